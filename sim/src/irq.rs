//! MSI-X vectors as eventfds, the way VFIO delivers them (`VFIO_DEVICE_SET_IRQS` with
//! `VFIO_IRQ_SET_ACTION_TRIGGER`): one eventfd per vector, written when the vector
//! fires, read by the driver to acknowledge.
//!
//! Creating the eventfd is a system call with no safe wrapper in `std`; it and the
//! adoption of the new descriptor are the two `unsafe` calls of this module. Signalling
//! uses safe `std::fs::File` writes on the owned descriptor.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

/// The device's MSI-X vectors, each backed by an eventfd created on first use.
#[derive(Debug)]
pub struct Irqs {
    vectors: u16,
    fds: Mutex<BTreeMap<u16, File>>,
    signalled: Mutex<BTreeMap<u16, u64>>,
}

impl Irqs {
    /// A table of `vectors` MSI-X vectors.
    pub fn new(vectors: u16) -> Self {
        Irqs {
            vectors,
            fds: Mutex::new(BTreeMap::new()),
            signalled: Mutex::new(BTreeMap::new()),
        }
    }

    /// Number of vectors.
    pub fn vectors(&self) -> u16 {
        self.vectors
    }

    /// The eventfd of `vector`, created on first use; `None` for a vector the device
    /// does not have or if the system refuses an eventfd.
    pub fn eventfd(&self, vector: u16) -> Option<i32> {
        if vector >= self.vectors {
            return None;
        }
        let mut fds = self.fds.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = fds.get(&vector) {
            return Some(f.as_raw_fd());
        }
        let fd = new_eventfd()?;
        let raw = fd.as_raw_fd();
        fds.insert(vector, File::from(fd));
        Some(raw)
    }

    /// Fires `vector`: adds 1 to its eventfd (if one was created) and counts it.
    pub fn signal(&self, vector: u16) {
        if vector >= self.vectors {
            return;
        }
        *self
            .signalled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(vector)
            .or_default() += 1;
        let mut fds = self.fds.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = fds.get_mut(&vector) {
            // A full counter (2^64 - 2) would make the write fail with EAGAIN; the
            // vector is then pending anyway, so the error is ignored.
            let _ = f.write(&1u64.to_ne_bytes());
        }
    }

    /// How many times `vector` fired.
    pub fn count(&self, vector: u16) -> u64 {
        self.signalled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&vector)
            .copied()
            .unwrap_or(0)
    }

    /// Number of eventfds currently open.
    pub fn open_fds(&self) -> usize {
        self.fds.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// A new non-blocking, close-on-exec eventfd with counter 0.
fn new_eventfd() -> Option<OwnedFd> {
    // SAFETY: eventfd(2) takes no pointers; it returns a new descriptor or -1.
    let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if raw < 0 {
        return None;
    }
    // SAFETY: `raw` was just returned by eventfd(2), is open, and is owned by no one
    // else; the OwnedFd closes it exactly once.
    Some(unsafe { OwnedFd::from_raw_fd(raw) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn signal_reaches_the_eventfd() {
        let irqs = Irqs::new(4);
        assert_eq!(irqs.eventfd(4), None);
        let fd = irqs.eventfd(1).unwrap();
        assert_eq!(irqs.eventfd(1), Some(fd));
        irqs.signal(1);
        irqs.signal(1);
        irqs.signal(2); // no eventfd yet: only counted
        assert_eq!(irqs.count(1), 2);
        assert_eq!(irqs.count(2), 1);
        let mut f = irqs
            .fds
            .lock()
            .unwrap()
            .get(&1)
            .unwrap()
            .try_clone()
            .unwrap();
        let mut b = [0u8; 8];
        f.read_exact(&mut b).unwrap();
        assert_eq!(u64::from_ne_bytes(b), 2);
        assert_eq!(irqs.open_fds(), 1);
    }
}

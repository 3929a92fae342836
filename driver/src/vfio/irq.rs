//! MSI-X vectors delivered as eventfds (`VFIO_DEVICE_SET_IRQS`).
//!
//! rdma-core (`mlx5_vfio_init_async_fd`, reference §6.2 step 4) attaches eventfds to
//! MSI-X vectors with `DATA_EVENTFD | ACTION_TRIGGER` on index
//! `VFIO_PCI_MSIX_IRQ_INDEX`, and notes that the first `SET_IRQS` must cover every
//! vector that will ever be used (enabling MSI-X sizes the table). Here all vectors
//! (up to a configured maximum) get an eventfd at once; the EQ code reads the one of
//! its vector ([`Bus::irq_eventfd`](ferroverbs_hw::Bus::irq_eventfd)). A device without
//! MSI-X eventfd support is driven by polling. On drop, MSI-X is disabled
//! (`DATA_NONE | ACTION_TRIGGER`, count 0) before the eventfds are closed.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use vfio_bindings::bindings::vfio as uapi;

use super::device::DeviceFd;
use super::error::VfioError;

/// `VFIO_PCI_MSIX_IRQ_INDEX`.
pub const MSIX_INDEX: u32 = uapi::VFIO_PCI_MSIX_IRQ_INDEX;

/// Builds a `vfio_irq_set` followed by `fds` as 32-bit words in host order: `argsz`,
/// `flags`, `index`, `start`, `count`, then `data[]`.
pub fn irq_set_buffer(flags: u32, index: u32, start: u32, fds: &[i32]) -> Vec<u32> {
    let header = size_of::<uapi::vfio_irq_set>();
    let argsz = (header + fds.len() * 4) as u32;
    let mut buf = vec![argsz, flags, index, start, fds.len() as u32];
    debug_assert_eq!(buf.len() * 4, header);
    buf.extend(fds.iter().map(|&fd| fd as u32));
    buf
}

/// A new non-blocking, close-on-exec eventfd.
pub fn new_eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; it returns a new descriptor or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// MSI-X vectors with their eventfds.
#[derive(Debug)]
pub struct Msix {
    device: Arc<DeviceFd>,
    fds: Vec<OwnedFd>,
}

impl Msix {
    /// Attaches an eventfd to each of the first `max` MSI-X vectors. `Ok(None)` when
    /// the device has no MSI-X vectors that can signal an eventfd (poll instead).
    pub fn enable(device: &Arc<DeviceFd>, max: u32) -> Result<Option<Self>, VfioError> {
        let info = device.irq_info(MSIX_INDEX)?;
        if info.count == 0 || info.flags & uapi::VFIO_IRQ_INFO_EVENTFD == 0 || max == 0 {
            return Ok(None);
        }
        let n = info.count.min(max) as usize;
        let fds = (0..n)
            .map(|_| new_eventfd())
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| VfioError::os("eventfd", e))?;
        let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
        let mut buf = irq_set_buffer(
            uapi::VFIO_IRQ_SET_DATA_EVENTFD | uapi::VFIO_IRQ_SET_ACTION_TRIGGER,
            MSIX_INDEX,
            0,
            &raw,
        );
        device
            .set_irqs(&mut buf)
            .map_err(|e| VfioError::ioctl("VFIO_DEVICE_SET_IRQS", e))?;
        Ok(Some(Msix {
            device: Arc::clone(device),
            fds,
        }))
    }

    /// Number of vectors with an eventfd.
    pub fn len(&self) -> usize {
        self.fds.len()
    }

    /// Always false: an enabled set has at least one vector.
    pub fn is_empty(&self) -> bool {
        self.fds.is_empty()
    }

    /// The eventfd of `vector`.
    pub fn eventfd(&self, vector: u16) -> Option<RawFd> {
        self.fds.get(vector as usize).map(|f| f.as_raw_fd())
    }
}

impl Drop for Msix {
    fn drop(&mut self) {
        let mut buf = irq_set_buffer(
            uapi::VFIO_IRQ_SET_DATA_NONE | uapi::VFIO_IRQ_SET_ACTION_TRIGGER,
            MSIX_INDEX,
            0,
            &[],
        );
        if let Err(e) = self.device.set_irqs(&mut buf) {
            tracing::warn!("disabling MSI-X failed: {e}");
        }
        // The eventfds close after this, when `fds` drops.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn irq_set_layout() {
        let buf = irq_set_buffer(0x24, MSIX_INDEX, 0, &[17, -1, -1]);
        assert_eq!(buf, vec![32, 0x24, 2, 0, 3, 17, u32::MAX, u32::MAX]);
        let off = irq_set_buffer(0x21, MSIX_INDEX, 0, &[]);
        assert_eq!(off, vec![20, 0x21, 2, 0, 0]);
        assert_eq!(
            uapi::VFIO_IRQ_SET_DATA_EVENTFD | uapi::VFIO_IRQ_SET_ACTION_TRIGGER,
            0x24
        );
    }

    #[test]
    fn eventfds_signal() {
        let fd = new_eventfd().unwrap();
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live local array to a live eventfd.
        let w = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), 8) };
        assert_eq!(w, 8);
        let mut got = [0u8; 8];
        // SAFETY: reads 8 bytes into a live local array from a live eventfd.
        let r = unsafe { libc::read(fd.as_raw_fd(), got.as_mut_ptr().cast(), 8) };
        assert_eq!(r, 8);
        assert_eq!(u64::from_ne_bytes(got), 1);
        // Non-blocking: nothing pending now.
        // SAFETY: as above.
        let r = unsafe { libc::read(fd.as_raw_fd(), got.as_mut_ptr().cast(), 8) };
        assert_eq!(r, -1);
        assert_eq!(
            io::Error::last_os_error().raw_os_error(),
            Some(libc::EAGAIN)
        );
    }

    #[test]
    fn a_non_vfio_device_has_no_irq_info() {
        let f = std::fs::File::open("/dev/null").unwrap();
        let dev = Arc::new(DeviceFd::new(f.into()));
        assert!(matches!(
            Msix::enable(&dev, 8),
            Err(VfioError::Ioctl {
                op: "VFIO_DEVICE_GET_IRQ_INFO",
                ..
            })
        ));
    }
}

//! Which file descriptors are this layer's: the uverbs command files, the completion
//! channels and the async event files. One atomic byte per descriptor number, so the
//! interposed `read`/`write`/`close` of every other descriptor cost one load.

use std::sync::atomic::{AtomicU8, Ordering};

/// Descriptor numbers this layer can own (it refuses to hand out larger ones).
pub const MAX_FD: usize = 1 << 16;

/// What a descriptor is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Not ours.
    None = 0,
    /// `/dev/infiniband/uverbsN` (a memfd holding the UAR pages; `fstat` answers for
    /// `/dev/null`, a character device).
    Uverbs = 1,
    /// A completion channel (an eventfd for readiness).
    CompChannel = 2,
    /// A context's async event file (an eventfd for readiness).
    Async = 3,
    /// `/dev/infiniband/rdma_cm` (an eventfd: readable while CM events wait).
    RdmaCm = 4,
}

static KINDS: [AtomicU8; MAX_FD] = [const { AtomicU8::new(0) }; MAX_FD];

/// The kind of `fd`.
pub fn kind(fd: i32) -> Kind {
    match usize::try_from(fd).ok().and_then(|i| KINDS.get(i)) {
        Some(k) => match k.load(Ordering::Acquire) {
            1 => Kind::Uverbs,
            2 => Kind::CompChannel,
            3 => Kind::Async,
            4 => Kind::RdmaCm,
            _ => Kind::None,
        },
        None => Kind::None,
    }
}

/// Marks `fd` as `k`; false when the number is too large to track.
pub fn set(fd: i32, k: Kind) -> bool {
    match usize::try_from(fd).ok().and_then(|i| KINDS.get(i)) {
        Some(slot) => {
            slot.store(k as u8, Ordering::Release);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_per_descriptor_and_large_numbers_are_refused() {
        assert!(set(60_000, Kind::CompChannel));
        assert_eq!(kind(60_000), Kind::CompChannel);
        assert!(set(60_000, Kind::None));
        assert_eq!(kind(60_000), Kind::None);
        assert!(!set(MAX_FD as i32, Kind::Uverbs));
        assert_eq!(kind(MAX_FD as i32), Kind::None);
        assert_eq!(kind(-1), Kind::None);
    }
}

//! The fast path: building WQEs in queue memory, ringing doorbells, consuming CQEs.
//!
//! This module turns work requests into the exact bytes rdma-core's `libmlx5` writes
//! (`shared/reference/mlx5-datapath.md` §2, §4, §5, §6, §7, §8), using the layouts of
//! [`ferroverbs_hw::datapath`]:
//!
//! * [`SendQueue`]: the SQ ring writer. A WQE is a control segment, transport and
//!   operation segments (address vector, remote address, atomic) and a gather list or
//!   inline data, laid out in 64-byte WQEBBs of a power-of-two ring and wrapped at the
//!   ring end between 16-byte segments (inline payloads split at the end). The WQE
//!   index is the 16-bit WQEBB producer counter. [`SendQueue::ring_doorbell`] updates the
//!   doorbell record and writes the 8-byte doorbell or the BlueFlame copy, alternating
//!   the two halves of the BlueFlame register.
//! * [`ReceiveQueue`]: the RQ ring writer: data segments and the
//!   [`MLX5_INVALID_LKEY`](ferroverbs_hw::datapath::wqe::MLX5_INVALID_LKEY) terminator,
//!   counted in WQEs; only the doorbell record is written.
//! * [`CompletionQueue`]: the CQ consumer: the ownership test with wrap parity, the read
//!   barrier, the consumer index and its doorbell record, and arming.
//!
//! Queues operate on memory given to them through [`QueueMem`] (the driver's
//! [`DmaBuf`](crate::dma::DmaBuf), or a [`Region`] of one) and never hold a Rust
//! reference to it ([`mem`] says why). This module allocates only at construction (the
//! per-slot `wr_id` tables), never on post or poll, takes no lock (`&mut self`), makes
//! no system call and contains no `unsafe` code.
#![forbid(unsafe_code)]

pub mod cq;
pub mod mem;
pub mod rq;
pub mod sq;
#[cfg(test)]
mod tests;

pub use cq::{CompletionQueue, CqConfig};
pub use mem::{DoorbellWord, QueueMem, Region, Word};
pub use rq::{ReceiveQueue, RecvRequest, RqConfig};
pub use sq::{
    use_blueflame, BlueFlameReg, Doorbell, DoorbellRegs, LastWqe, PendingDoorbell, PostedWqe,
    QpType, RemoteAddr, SendData, SendFlags, SendOp, SendQueue, SendWr, SqConfig, SqCursor,
    UdAddress, WqeSlots, BLUEFLAME_BFREG,
};

/// One scatter/gather element: `length` bytes at `addr` of the memory region `lkey`.
///
/// `repr(C)` (16 bytes, no padding): the typed send entries read `length` and
/// `lkey` as one 8-byte value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, zerocopy::IntoBytes, zerocopy::Immutable)]
#[repr(C)]
pub struct Sge {
    /// Address (as registered).
    pub addr: u64,
    /// Length in bytes; an SGE of length 0 is skipped, as rdma-core skips it.
    pub length: u32,
    /// Local key.
    pub lkey: u32,
}

/// Why a work request was not posted. Nothing is written to the queue when `post`
/// returns an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The queue has no room for the WQE until earlier ones complete.
    #[error("queue full: the WQE needs {needed} slots, {free} are free")]
    QueueFull {
        /// Slots (WQEBBs for a send queue, WQEs for a receive queue) needed.
        needed: u32,
        /// Slots free.
        free: u32,
    },
    /// More scatter/gather entries than the queue was sized for.
    #[error("{count} scatter/gather entries exceed the queue's maximum of {max}")]
    TooManySges {
        /// Entries in the request.
        count: usize,
        /// The queue's maximum.
        max: u32,
    },
    /// Inline data longer than the QP's `max_inline_data`.
    #[error("inline data of {len} bytes exceeds max_inline_data of {max}")]
    InlineTooLarge {
        /// Total inline bytes.
        len: usize,
        /// The QP's maximum.
        max: u32,
    },
    /// The WQE would need more than the 63 DS a control segment can express.
    #[error("a WQE of {ds} 16-byte units exceeds the 63 the control segment can express")]
    WqeTooLarge {
        /// DS the WQE would need.
        ds: usize,
    },
    /// The operation is not valid on this QP type.
    #[error("opcode {opcode:#04x} is not valid on a {qp_type:?} QP")]
    UnsupportedOp {
        /// The send opcode (`MLX5_OPCODE_*`).
        opcode: u8,
        /// The QP type.
        qp_type: QpType,
    },
    /// Inline data was given for an operation that reads into local memory.
    #[error("opcode {opcode:#04x} cannot take inline data")]
    InlineNotAllowed {
        /// The send opcode.
        opcode: u8,
    },
    /// A UD send without an address, or an address on a connected QP.
    #[error("a UD send needs an address vector and a connected QP must not have one")]
    AddressMismatch,
}

/// Why a queue could not be built over the memory it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GeometryError {
    /// An entry count that is zero, not a power of two, or too large.
    #[error("{what} of {count} is not a power of two in 1..={max}")]
    BadCount {
        /// Which count.
        what: &'static str,
        /// The count given.
        count: u32,
        /// The largest valid count.
        max: u32,
    },
    /// The memory is shorter than the queue.
    #[error("the buffer holds {len} bytes, the queue needs {need}")]
    BufferTooShort {
        /// Bytes given.
        len: usize,
        /// Bytes needed.
        need: usize,
    },
    /// An invalid stride, entry size or BlueFlame size.
    #[error("invalid {what}: {value}")]
    BadSize {
        /// Which size.
        what: &'static str,
        /// The value given.
        value: usize,
    },
}

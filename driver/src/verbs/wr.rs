//! Work requests: constructors for [`SendWr`] (the ring's type) and [`RecvWr`].
//!
//! ```
//! use ferroverbs::verbs::{RemoteAddr, SendWr, Sge};
//! let sge = Sge { addr: 0x1000, length: 64, lkey: 0x100 };
//! let sgl = [sge];
//! let remote = RemoteAddr { addr: 0x2000, rkey: 0x200 };
//! let wr = SendWr::rdma_write(7, &sgl, remote).signaled().fenced();
//! assert_eq!(wr.wr_id, 7);
//! let payload: &[&[u8]] = &[b"hello"];
//! let inline = SendWr::send_inline(8, payload).signaled();
//! ```

use crate::ring::{RemoteAddr, SendData, SendFlags, SendOp, SendWr, Sge};

/// A receive work request: a scatter list for one incoming message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// Returned with the completion.
    pub wr_id: u64,
    /// Where the message goes; zero-length entries are skipped.
    pub sg_list: &'a [Sge],
}

impl<'a> RecvWr<'a> {
    /// A receive request.
    pub fn new(wr_id: u64, sg_list: &'a [Sge]) -> Self {
        RecvWr { wr_id, sg_list }
    }
}

impl crate::ring::RecvRequest for RecvWr<'_> {
    #[inline(always)]
    fn wr_id(&self) -> u64 {
        self.wr_id
    }
    #[inline(always)]
    fn sg_list(&self) -> &[Sge] {
        self.sg_list
    }
}

impl<'a> SendWr<'a> {
    fn with(wr_id: u64, op: SendOp, data: SendData<'a>) -> Self {
        SendWr {
            wr_id,
            op,
            data,
            flags: SendFlags::NONE,
            ud: None,
        }
    }

    /// SEND of a gather list.
    pub fn send(wr_id: u64, sg_list: &'a [Sge]) -> Self {
        Self::with(wr_id, SendOp::Send, SendData::Gather(sg_list))
    }

    /// SEND of bytes copied into the WQE (`IBV_SEND_INLINE`): the parts are packed
    /// back to back; at most the QP's `max_inline_data` bytes in all.
    pub fn send_inline(wr_id: u64, parts: &'a [&'a [u8]]) -> Self {
        Self::with(wr_id, SendOp::Send, SendData::Inline(parts))
    }

    /// SEND with immediate data.
    pub fn send_with_imm(wr_id: u64, sg_list: &'a [Sge], imm: u32) -> Self {
        Self::with(wr_id, SendOp::SendImm { imm }, SendData::Gather(sg_list))
    }

    /// SEND with Invalidate (RC only): the responder invalidates `rkey` when the
    /// message arrives (IBTA Vol. 1 §9.4.1.4) and its completion carries
    /// [`WcFlags::WITH_INV`](crate::verbs::WcFlags::WITH_INV) and the key. Only keys
    /// created with remote invalidation enabled can be invalidated (on a ConnectX,
    /// memory windows of type 2; not the memory regions of `ibv_reg_mr`); any other
    /// key fails the request with a remote invalid request error on both sides.
    pub fn send_with_inv(wr_id: u64, sg_list: &'a [Sge], rkey: u32) -> Self {
        Self::with(wr_id, SendOp::SendInv { rkey }, SendData::Gather(sg_list))
    }

    /// RDMA WRITE of a gather list to `remote`.
    pub fn rdma_write(wr_id: u64, sg_list: &'a [Sge], remote: RemoteAddr) -> Self {
        Self::with(
            wr_id,
            SendOp::RdmaWrite { remote },
            SendData::Gather(sg_list),
        )
    }

    /// RDMA WRITE of inline bytes to `remote`.
    pub fn rdma_write_inline(wr_id: u64, parts: &'a [&'a [u8]], remote: RemoteAddr) -> Self {
        Self::with(wr_id, SendOp::RdmaWrite { remote }, SendData::Inline(parts))
    }

    /// RDMA WRITE with immediate data (consumes a receive request at the peer).
    pub fn rdma_write_with_imm(
        wr_id: u64,
        sg_list: &'a [Sge],
        remote: RemoteAddr,
        imm: u32,
    ) -> Self {
        Self::with(
            wr_id,
            SendOp::RdmaWriteImm { remote, imm },
            SendData::Gather(sg_list),
        )
    }

    /// RDMA READ from `remote` into a scatter list.
    pub fn rdma_read(wr_id: u64, sg_list: &'a [Sge], remote: RemoteAddr) -> Self {
        Self::with(
            wr_id,
            SendOp::RdmaRead { remote },
            SendData::Gather(sg_list),
        )
    }

    /// Atomic compare and swap of the 8 bytes at `remote` (8-byte aligned): if they
    /// equal `compare` they become `swap`; the old value lands in `result` (8 bytes).
    pub fn atomic_cmp_swp(
        wr_id: u64,
        result: &'a [Sge],
        remote: RemoteAddr,
        compare: u64,
        swap: u64,
    ) -> Self {
        Self::with(
            wr_id,
            SendOp::AtomicCas {
                remote,
                compare,
                swap,
            },
            SendData::Gather(result),
        )
    }

    /// Atomic fetch and add of `add` to the 8 bytes at `remote` (8-byte aligned); the
    /// old value lands in `result` (8 bytes).
    pub fn atomic_fetch_add(wr_id: u64, result: &'a [Sge], remote: RemoteAddr, add: u64) -> Self {
        Self::with(
            wr_id,
            SendOp::AtomicFa { remote, add },
            SendData::Gather(result),
        )
    }

    /// Adds `IBV_SEND_SIGNALED`: a completion on success.
    pub fn signaled(mut self) -> Self {
        self.flags = self.flags | SendFlags::SIGNALED;
        self
    }

    /// Adds `IBV_SEND_FENCE`: wait for earlier RDMA READs and atomics.
    pub fn fenced(mut self) -> Self {
        self.flags = self.flags | SendFlags::FENCE;
        self
    }

    /// Adds `IBV_SEND_SOLICITED`: a solicited event at the responder.
    pub fn solicited(mut self) -> Self {
        self.flags = self.flags | SendFlags::SOLICITED;
        self
    }

    /// Replaces the flags.
    pub fn with_flags(mut self, flags: SendFlags) -> Self {
        self.flags = flags;
        self
    }
}

//! Work completions: what [`CompletionQueue::poll`](super::CompletionQueue::poll) fills
//! in from each CQE, mapped as rdma-core's `mlx5_poll_cq` maps it
//! (`mlx5-datapath.md` §7.6-7.8).

use ferroverbs_hw::datapath::cqe::{
    MLX5_CQE_SYNDROME_BAD_RESP_ERR, MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR,
    MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
    MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, MLX5_CQE_SYNDROME_MW_BIND_ERR,
    MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,
    MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR, MLX5_CQE_SYNDROME_REMOTE_OP_ERR,
    MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR,
    MLX5_CQE_SYNDROME_WR_FLUSH_ERR,
};
use ferroverbs_hw::datapath::wqe::{
    MLX5_OPCODE_ATOMIC_CS, MLX5_OPCODE_ATOMIC_FA, MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_RDMA_WRITE,
    MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_SEND_IMM, MLX5_OPCODE_UMR,
};

/// The status of a work completion (`ibv_wc_status`; the discriminants are the verbs
/// values).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum WcStatus {
    /// The work request completed.
    #[default]
    Success = 0,
    /// Local length error: a receive buffer too small, or a message longer than the
    /// port allows.
    LocLenErr = 1,
    /// Local QP operation error: a malformed WQE.
    LocQpOpErr = 2,
    /// Local protection error: a local key that is invalid, of another PD, out of
    /// bounds or without the access needed.
    LocProtErr = 4,
    /// The work request was flushed: the QP is in the error state.
    WrFlushErr = 5,
    /// Memory window bind error.
    MwBindErr = 6,
    /// Unexpected transport response.
    BadRespErr = 7,
    /// Local access error.
    LocAccessErr = 8,
    /// The responder found the request invalid (e.g. a misaligned atomic).
    RemInvReqErr = 9,
    /// The responder refused the access: bad rkey, bounds or rights.
    RemAccessErr = 10,
    /// The responder could not complete the operation.
    RemOpErr = 11,
    /// Transport retries exhausted.
    RetryExcErr = 12,
    /// RNR retries exhausted.
    RnrRetryExcErr = 13,
    /// The responder aborted.
    RemAbortErr = 16,
    /// Any other error syndrome.
    GeneralErr = 21,
}

impl WcStatus {
    /// The status of an error CQE's syndrome (rdma-core `mlx5_handle_error_cqe`).
    pub fn from_syndrome(syndrome: u8) -> WcStatus {
        match syndrome {
            MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR => WcStatus::LocLenErr,
            MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR => WcStatus::LocQpOpErr,
            MLX5_CQE_SYNDROME_LOCAL_PROT_ERR => WcStatus::LocProtErr,
            MLX5_CQE_SYNDROME_WR_FLUSH_ERR => WcStatus::WrFlushErr,
            MLX5_CQE_SYNDROME_MW_BIND_ERR => WcStatus::MwBindErr,
            MLX5_CQE_SYNDROME_BAD_RESP_ERR => WcStatus::BadRespErr,
            MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR => WcStatus::LocAccessErr,
            MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR => WcStatus::RemInvReqErr,
            MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR => WcStatus::RemAccessErr,
            MLX5_CQE_SYNDROME_REMOTE_OP_ERR => WcStatus::RemOpErr,
            MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR => WcStatus::RetryExcErr,
            MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExcErr,
            MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR => WcStatus::RemAbortErr,
            _ => WcStatus::GeneralErr,
        }
    }

    /// Whether this is [`WcStatus::Success`].
    pub fn is_ok(self) -> bool {
        self == WcStatus::Success
    }
}

/// What completed (`ibv_wc_opcode`; the discriminants are the verbs values).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum WcOpcode {
    /// A SEND (with or without immediate) was sent.
    #[default]
    Send = 0,
    /// An RDMA WRITE (with or without immediate) was executed.
    RdmaWrite = 1,
    /// An RDMA READ was executed.
    RdmaRead = 2,
    /// An atomic compare and swap was executed.
    CompSwap = 3,
    /// An atomic fetch and add was executed.
    FetchAdd = 4,
    /// A memory window was bound (`IBV_WC_BIND_MW`).
    BindMw = 5,
    /// A key was invalidated locally (`IBV_WC_LOCAL_INV`).
    LocalInv = 6,
    /// A SEND was received.
    Recv = 128,
    /// An RDMA WRITE with immediate was received (consuming a receive request).
    RecvRdmaWithImm = 129,
}

impl WcOpcode {
    /// The completion opcode of a requester CQE for send opcode `op` (rdma-core
    /// `handle_good_req`).
    pub(crate) const fn of_send(op: u8) -> WcOpcode {
        match op {
            MLX5_OPCODE_RDMA_WRITE | MLX5_OPCODE_RDMA_WRITE_IMM => WcOpcode::RdmaWrite,
            MLX5_OPCODE_RDMA_READ => WcOpcode::RdmaRead,
            MLX5_OPCODE_ATOMIC_CS => WcOpcode::CompSwap,
            MLX5_OPCODE_ATOMIC_FA => WcOpcode::FetchAdd,
            // A UMR is a bind unless its WQE is marked a local invalidation
            // (`WqShared::umr_is_local_inv`).
            MLX5_OPCODE_UMR => WcOpcode::BindMw,
            _ => WcOpcode::Send,
        }
    }

    /// Whether a send opcode carries an immediate.
    pub(crate) const fn send_has_imm(op: u8) -> bool {
        op == MLX5_OPCODE_SEND_IMM || op == MLX5_OPCODE_RDMA_WRITE_IMM
    }
}

/// Completion flags (`ibv_wc_flags`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WcFlags(u8);

impl WcFlags {
    /// A GRH heads the receive buffer (UD receives; on RoCE v2 its last 20 bytes are
    /// the IPv4 header).
    pub const GRH: WcFlags = WcFlags(1);
    /// `imm_data` is valid.
    pub const WITH_IMM: WcFlags = WcFlags(2);
    /// The SEND invalidated a key.
    pub const WITH_INV: WcFlags = WcFlags(8);

    /// No flag.
    pub const fn empty() -> WcFlags {
        WcFlags(0)
    }

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: WcFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The `ibv_wc_flags` bits.
    pub const fn bits(self) -> u32 {
        self.0 as u32
    }
}

impl std::ops::BitOr for WcFlags {
    type Output = WcFlags;
    fn bitor(self, rhs: WcFlags) -> WcFlags {
        WcFlags(self.0 | rhs.0)
    }
}

/// One work completion (`ibv_wc`).
///
/// The field order is fixed (`repr(C)`, 32 bytes) for the poll path: what a
/// successful requester completion takes from its send opcode (`byte_len`, `opcode`,
/// `wc_flags`) is contiguous, and so is what it leaves 0 (`status` .. `src_qp`), so
/// the completion is a few wide stores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct WorkCompletion {
    /// The `wr_id` of the work request.
    pub wr_id: u64,
    /// The local QP number.
    pub qp_num: u32,
    /// Bytes received (receives), read (RDMA READ) or 8 (atomics); 0 otherwise.
    pub byte_len: u32,
    /// What completed. For an error completion: the operation of the failed request
    /// as far as the CQE tells it (the send opcode for a requester error, `Recv` for a
    /// responder error).
    pub opcode: WcOpcode,
    /// Flags.
    pub wc_flags: WcFlags,
    /// Success or the error.
    pub status: WcStatus,
    /// The vendor syndrome of an error completion (`vendor_err_synd`).
    pub vendor_err: u8,
    /// The immediate data, as the sender gave it, when `wc_flags` has `WITH_IMM`.
    pub imm_data: u32,
    /// The remote QP number (receives).
    pub src_qp: u32,
    /// The service level field of a receive's CQE (bits 27..24 of `flags_rqpn`), as
    /// libmlx5 reports it in `ibv_wc.sl` (rdma-core `providers/mlx5/cq.c`
    /// `handle_responder`). On a RoCE port it is the packet type of a UD receive:
    /// bits 2..0 the L3 header (0 GRH, 1 IPv6, 2 IPv4), which UCX's UD transport
    /// reads to find the destination address in the GRH area.
    pub sl: u8,
}

impl WorkCompletion {
    /// Whether the completion is successful.
    pub fn is_ok(&self) -> bool {
        self.status.is_ok()
    }
}

/// The fields of a [`WorkCompletion`] from `byte_len` to `vendor_err`, in its order:
/// 8 contiguous bytes of its `repr(C)` layout (checked below), which the poll path
/// takes from a per-opcode table and writes with one store
/// ([`put_tail`](super::fastmem::put_tail)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(8))]
pub(crate) struct WcTail {
    pub(crate) byte_len: u32,
    pub(crate) opcode: WcOpcode,
    pub(crate) wc_flags: WcFlags,
    pub(crate) status: WcStatus,
    pub(crate) vendor_err: u8,
}

/// The 8 bytes of a valid [`WcTail`] (in memory order, read as a native-endian
/// `u64`): what the poll path's per-opcode table holds, so that the tail is one
/// load and one store even when an RDMA READ replaces its `byte_len`. Made only from
/// a [`WcTail`] and changed only in its `byte_len` bytes, so its bytes are always
/// those of a valid tail ([`put_tail`](super::fastmem::put_tail) relies on it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WcTailBits(u64);

impl WcTailBits {
    /// The bytes of `t`.
    pub(crate) const fn of(t: WcTail) -> WcTailBits {
        let n = t.byte_len.to_ne_bytes();
        WcTailBits(u64::from_ne_bytes([
            n[0],
            n[1],
            n[2],
            n[3],
            t.opcode as u8,
            t.wc_flags.0,
            t.status as u8,
            t.vendor_err,
        ]))
    }

    /// The same tail with `byte_len` = `n`; `self`'s `byte_len` must be 0 (else the
    /// result's `byte_len` is `n` ORed with it; the other fields are unchanged
    /// either way, so the result is a valid tail).
    #[inline(always)]
    pub(crate) const fn with_byte_len(self, n: u32) -> WcTailBits {
        // `n`'s bytes where `byte_len`'s are: the first 4 in memory order.
        let at = if cfg!(target_endian = "little") {
            0
        } else {
            32
        };
        WcTailBits(self.0 | ((n as u64) << at))
    }

    /// The bytes.
    #[inline(always)]
    pub(crate) const fn get(self) -> u64 {
        self.0
    }
}

/// Where [`WcTail`] lies in [`WorkCompletion`]: its fields at the same distances from
/// `byte_len` as in the tail, and nothing else between.
pub(crate) const WC_TAIL_AT: usize = std::mem::offset_of!(WorkCompletion, byte_len);
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<WcTail>() == 8);
    assert!(size_of::<WcOpcode>() == 1 && size_of::<WcFlags>() == 1);
    assert!(size_of::<WcStatus>() == 1);
    assert!(offset_of!(WorkCompletion, opcode) == WC_TAIL_AT + offset_of!(WcTail, opcode));
    assert!(offset_of!(WorkCompletion, wc_flags) == WC_TAIL_AT + offset_of!(WcTail, wc_flags));
    assert!(offset_of!(WorkCompletion, status) == WC_TAIL_AT + offset_of!(WcTail, status));
    assert!(offset_of!(WorkCompletion, vendor_err) == WC_TAIL_AT + offset_of!(WcTail, vendor_err));
    assert!(WC_TAIL_AT + 8 <= size_of::<WorkCompletion>());
    // `sl` lies in what was the struct's tail padding: a completion stays 32 bytes.
    assert!(size_of::<WorkCompletion>() == 32);
    assert!(offset_of!(WcTail, byte_len) == 0 && offset_of!(WcTail, opcode) == 4);
    assert!(offset_of!(WcTail, wc_flags) == 5 && offset_of!(WcTail, status) == 6);
    assert!(offset_of!(WcTail, vendor_err) == 7);
};

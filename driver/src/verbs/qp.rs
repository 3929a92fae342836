//! Reliable-connected and unreliable-datagram queue pairs: sizing
//! (`mlx5-datapath.md` §1, §9), `CREATE_QP` over one DMA buffer (RQ first, then SQ,
//! then the doorbell record), the state transitions with their attributes
//! (`mlx5-controlpath.md` §4.6-4.7), `QUERY_QP`, and the post paths on top of the
//! [`ring`](crate::ring) writers.
//!
//! A UD QP ([`QpInitAttr::ud`]) goes RESET→INIT with a port, P_Key index and Q_Key
//! ([`QueuePair::to_init_ud`]), INIT→RTR with nothing ([`QueuePair::to_rtr_ud`]) and
//! RTR→RTS with its first PSN ([`QueuePair::to_rts_ud`]); every send names an
//! [`AddressHandle`](super::AddressHandle), the remote QPN and the remote Q_Key
//! ([`SendWr::ud`]) and carries at most the port MTU
//! ([`PostError::MessageTooLong`]); every receive buffer starts with 40 bytes of GRH.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use ferroverbs_hw::control::caps::cmd_hca_cap as g;
use ferroverbs_hw::control::cmd::{len_with_flex64, new_input, set_flex64, Opcode};
use ferroverbs_hw::control::qp::{
    ads, create_qp_in, create_qp_out, destroy_qp_in, destroy_qp_out, in_command, primary_path, qpc,
    query_qp_in, query_qp_out, transition_input, QpTransition,
};
use ferroverbs_hw::control::qp::{
    MLX5_QP_OPTPAR_ACK_TIMEOUT, MLX5_QP_OPTPAR_PKEY_INDEX, MLX5_QP_OPTPAR_PRIMARY_ADDR_PATH,
    MLX5_QP_OPTPAR_PRI_PORT, MLX5_QP_OPTPAR_Q_KEY, MLX5_QP_OPTPAR_RAE, MLX5_QP_OPTPAR_RETRY_COUNT,
    MLX5_QP_OPTPAR_RNR_RETRY, MLX5_QP_OPTPAR_RNR_TIMEOUT, MLX5_QP_OPTPAR_RRA_MAX,
    MLX5_QP_OPTPAR_RRE, MLX5_QP_OPTPAR_RWE, MLX5_QP_OPTPAR_SRA_MAX,
};
use ferroverbs_hw::control::uar_pd_td::{alloc_uar_out, dealloc_uar_in, dealloc_uar_out};
use ferroverbs_hw::datapath::cqe::{MLX5_CQE_REQ, MLX5_CQE_RESP_SEND};
use ferroverbs_hw::datapath::dbr::{MLX5_RCV_DBR, MLX5_SND_DBR};
use ferroverbs_hw::{Bus, DmaPerm};

use super::attr::ceil_log2;
use super::cq::{CqCore, CqeSize};
use super::fastmem::{FastMem, FastWord, SqSlots, WrIdTable};
use super::srq::{SharedReceiveQueue, SrqShared};
use super::{
    exec, flow_label_from_qpns, udp_sport_from_flow_label, AccessFlags, AddressVector,
    CompletionQueue, Error, Pd, QpAttr, QpInfo, QpState, RecvWr, Result, RtrAttr, RtsAttr,
    SendFlags, SendOp, SendWr, Sge, Transition, UdInitAttr, WcStatus,
};
use crate::dma::{DmaBuf, PAGE_SIZE};
use crate::ring::{self, BlueFlameReg, QpType, RqConfig, SqConfig};
use crate::Context;
use crate::Mtu;

/// The WQE overhead of an RC QP before its data part: control, remote address and
/// atomic segments (`sq_overhead` with RDMA and atomic operations; memory-window
/// operations raise it to [`MW_SQ_OVERHEAD`]).
const RC_SQ_OVERHEAD: u32 = 48;
/// The overhead of an RC or UC QP sized for UMR WQEs (rdma-core `_sq_overhead` with
/// `IBV_QP_EX_WITH_BIND_MW`: control, UMR control, mkey context and 64 bytes of KLM).
const MW_SQ_OVERHEAD: u32 = 192;
/// The WQE overhead of a UD QP before its data part: control segment and the 48-byte
/// datagram segment (rdma-core `sq_overhead` for UD: 16 + 48).
const UD_SQ_OVERHEAD: u32 = 64;
/// Bytes of a send WQE basic block.
const WQEBB: u32 = 64;
/// The largest WQE the control segment's 6-bit DS can describe, in bytes.
const MAX_WQE_BYTES: u32 = 63 * 16;

/// Queue sizes of a QP (`ibv_qp_cap`): what is asked at creation, and what
/// [`QueuePair::cap`] reports as granted (each at least the request).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QpCap {
    /// Send work requests outstanding.
    pub max_send_wr: u32,
    /// Receive work requests outstanding.
    pub max_recv_wr: u32,
    /// Gather entries per send request.
    pub max_send_sge: u32,
    /// Scatter entries per receive request.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send request.
    pub max_inline_data: u32,
}

impl Default for QpCap {
    /// 64 send and receive requests, one SGE each, 64 bytes inline.
    fn default() -> Self {
        QpCap {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        }
    }
}

/// How to create a QP.
pub struct QpInitAttr<'q, 'ctx, B: Bus> {
    /// Where send completions go.
    pub send_cq: &'q CompletionQueue<'ctx, B>,
    /// Where receive completions go (may be the same CQ).
    pub recv_cq: &'q CompletionQueue<'ctx, B>,
    /// Queue sizes.
    pub cap: QpCap,
    /// Signal every send request (`sq_sig_all`).
    pub sq_sig_all: bool,
    /// Copy single-WQE posts through the BlueFlame register when the device has one
    /// and the bus makes it pay ([`Bus::blueflame`]: not on VFIO's uncached BAR0
    /// unless `VfioConfig::blueflame`) (rdma-core's default); `false` always rings
    /// the 8-byte doorbell.
    pub blueflame: bool,
    /// The transport: [`QpType::Rc`] ([`QpInitAttr::new`]), [`QpType::Uc`]
    /// ([`QpInitAttr::with_type`]: SEND and RDMA WRITE only, no acknowledgements;
    /// posting a READ or an atomic is [`PostError::UnsupportedOp`]) or [`QpType::Ud`]
    /// ([`QpInitAttr::ud`]).
    pub qp_type: QpType,
    /// The shared receive queue the QP takes its receive WQEs from (`ibv_qp_init_attr.srq`;
    /// `None`: its own RQ of `cap.max_recv_wr`). Its receive completions carry the
    /// SRQ's `wr_id`s; [`QueuePair::post_recv`] is refused.
    pub srq: Option<&'q SharedReceiveQueue<'ctx, B>>,
    /// The port's general services QP (QP1, `IBV_QPT_GSI` in the kernel): a UD QP
    /// created with `qpc.st` QP1, which receives what peers send to QP 1 of the port
    /// it is initialized on and sends with source QP 1 ([`QpInitAttr::gsi`]). One per
    /// port; its Q_Key is 0x80010000 (IBTA Vol. 1 13.5.1).
    pub gsi: bool,
    /// Size the send queue for memory-window binds and local invalidations (RC and
    /// UC; [`QpInitAttr::with_memory_windows`]): every WQE slot holds a UMR WQE, as
    /// rdma-core's mlx5 provider sizes QPs that may post them (`_sq_overhead` with
    /// `IBV_QP_EX_WITH_BIND_MW`: 192 bytes before the data part instead of 48).
    pub memory_windows: bool,
    /// Let the device place small messages in their CQE instead of memory (scatter
    /// to CQE), the poll copying them where the work request said: received messages
    /// of up to 32 bytes, 64 when the receive CQ has 128-byte CQEs (responder,
    /// `qpc.cs_res`: RC and UC QPs, on their own RQ or an SRQ) into the receive's
    /// scatter list, and on an RC QP that signals every WQE (`sq_sig_all`) RDMA READ
    /// responses of up to 32 bytes (64 with 128-byte send CQEs) and atomic results
    /// (requester, `qpc.cs_req`) into the WQE's local list; on a device with
    /// `sctr_data_cqe`, as Linux's `mlx5_ib` configures it for libmlx5, which asks
    /// by default (`MLX5_QP_FLAG_SCATTER_CQE` unless `MLX5_SCATTER_TO_CQE=0`).
    /// `None` (the default): as the bus says ([`Bus::scatter_to_cqe_pays`]: on for a
    /// ConnectX over VFIO, off on the simulator, where it measurably adds latency);
    /// `Some(true)` ([`QpInitAttr::with_scatter_to_cqe`]) or `Some(false)`
    /// ([`QpInitAttr::without_scatter_to_cqe`]) decide. Ignored for UD.
    pub scatter_to_cqe: Option<bool>,
}

impl<'q, 'ctx, B: Bus> QpInitAttr<'q, 'ctx, B> {
    /// An RC QP on these CQs with these sizes, BlueFlame on, `sq_sig_all` off.
    pub fn new(
        send_cq: &'q CompletionQueue<'ctx, B>,
        recv_cq: &'q CompletionQueue<'ctx, B>,
        cap: QpCap,
    ) -> Self {
        QpInitAttr {
            send_cq,
            recv_cq,
            cap,
            sq_sig_all: false,
            blueflame: true,
            qp_type: QpType::Rc,
            srq: None,
            memory_windows: false,
            gsi: false,
            scatter_to_cqe: None,
        }
    }

    /// The general services QP (QP1) on these CQs: a UD QP whose context has `st`
    /// QP1 (`MLX5_QPC_ST_QP1`), as Linux's `mlx5_ib` creates its GSI QP.
    pub fn gsi(
        send_cq: &'q CompletionQueue<'ctx, B>,
        recv_cq: &'q CompletionQueue<'ctx, B>,
        cap: QpCap,
    ) -> Self {
        QpInitAttr {
            gsi: true,
            ..Self::ud(send_cq, recv_cq, cap)
        }
    }

    /// A UD QP on these CQs with these sizes, BlueFlame on, `sq_sig_all` off.
    pub fn ud(
        send_cq: &'q CompletionQueue<'ctx, B>,
        recv_cq: &'q CompletionQueue<'ctx, B>,
        cap: QpCap,
    ) -> Self {
        QpInitAttr {
            qp_type: QpType::Ud,
            ..Self::new(send_cq, recv_cq, cap)
        }
    }

    /// The same, taking receive WQEs from `srq`.
    pub fn with_srq(mut self, srq: &'q SharedReceiveQueue<'ctx, B>) -> Self {
        self.srq = Some(srq);
        self
    }

    /// The same with transport `qp_type`.
    pub fn with_type(mut self, qp_type: QpType) -> Self {
        self.qp_type = qp_type;
        self
    }

    /// The same, every received message in the receive buffer (no scatter to CQE,
    /// [`QpInitAttr::scatter_to_cqe`]; `MLX5_SCATTER_TO_CQE=0` for libmlx5).
    pub fn without_scatter_to_cqe(mut self) -> Self {
        self.scatter_to_cqe = Some(false);
        self
    }

    /// The same, small messages in their CQEs whatever the bus's default
    /// ([`QpInitAttr::scatter_to_cqe`]).
    pub fn with_scatter_to_cqe(mut self) -> Self {
        self.scatter_to_cqe = Some(true);
        self
    }

    /// The same, its send queue sized for memory-window binds and local
    /// invalidations ([`QpInitAttr::memory_windows`]).
    pub fn with_memory_windows(mut self) -> Self {
        self.memory_windows = true;
        self
    }
}

/// Why a work request was not posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The QP's state forbids posting (send: before RTS; receive: in RESET).
    #[error("the QP is in state {state:?}")]
    InvalidState {
        /// The QP's state.
        state: QpState,
    },
    /// The queue has no room until earlier requests complete (poll the CQ). Nothing
    /// was written.
    #[error("queue full: the request needs {needed} slots, {free} are free")]
    QueueFull {
        /// Slots needed (WQEBBs for a send, WQEs for a receive).
        needed: u32,
        /// Slots free.
        free: u32,
    },
    /// More scatter/gather entries than the QP was created for.
    #[error("{count} scatter/gather entries exceed the QP's maximum of {max}")]
    TooManySge {
        /// Entries given.
        count: usize,
        /// The maximum.
        max: u32,
    },
    /// More inline data than the QP's `max_inline_data`.
    #[error("inline data of {len} bytes exceeds max_inline_data of {max}")]
    InlineTooLarge {
        /// Bytes given.
        len: usize,
        /// The maximum.
        max: u32,
    },
    /// The WQE would exceed the 63 units a control segment describes.
    #[error("a WQE of {ds} 16-byte units is too large")]
    WqeTooLarge {
        /// Units needed.
        ds: usize,
    },
    /// The operation is not supported (atomics on a device without them).
    #[error("opcode {opcode:#04x} is not supported on this QP")]
    UnsupportedOp {
        /// The send opcode.
        opcode: u8,
    },
    /// Inline data for an operation that writes local memory (READ, atomics).
    #[error("opcode {opcode:#04x} cannot take inline data")]
    InlineNotAllowed {
        /// The send opcode.
        opcode: u8,
    },
    /// Receive requests go to the QP's shared receive queue
    /// ([`SharedReceiveQueue::post_recv`](super::SharedReceiveQueue::post_recv)).
    #[error("the QP takes its receive requests from an SRQ")]
    SrqAttached,
    /// A datagram address on a connected QP, or a UD send without one.
    #[error("a UD send needs an address handle and a connected QP takes none")]
    AddressMismatch,
    /// A UD message longer than the port MTU (UD messages are one packet).
    #[error("a UD message of {len} bytes exceeds the port MTU of {max}")]
    MessageTooLong {
        /// Bytes of the message.
        len: u64,
        /// The port MTU in bytes.
        max: u32,
    },
    /// A memory window bind refused before posting.
    #[error("memory window bind refused: {0}")]
    MwBind(super::MwBindError),
}

impl From<ring::PostError> for PostError {
    fn from(e: ring::PostError) -> Self {
        match e {
            ring::PostError::QueueFull { needed, free } => PostError::QueueFull { needed, free },
            ring::PostError::TooManySges { count, max } => PostError::TooManySge { count, max },
            ring::PostError::InlineTooLarge { len, max } => PostError::InlineTooLarge { len, max },
            ring::PostError::WqeTooLarge { ds } => PostError::WqeTooLarge { ds },
            ring::PostError::UnsupportedOp { opcode, .. } => PostError::UnsupportedOp { opcode },
            ring::PostError::InlineNotAllowed { opcode } => PostError::InlineNotAllowed { opcode },
            ring::PostError::AddressMismatch => PostError::AddressMismatch,
        }
    }
}

/// A list post stopped at request `index` (`bad_wr`); the requests before it were
/// posted (and their doorbell rung), the others were not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("work request {index} not posted: {error}")]
pub struct BadWr {
    /// Position of the failed request in the list.
    pub index: usize,
    /// Why.
    pub error: PostError,
}

/// What a QP shares with its CQs: per-slot `wr_id`s (written at post, read at poll)
/// and the completion counters the CQ publishes for the QP to reclaim its slots.
/// Atomics with `Relaxed`, `Release` and `Acquire` loads and stores only.
///
/// Laid out for a poll that meets the QP cold (with thousands of QPs on one CQ, the
/// QP of a CQE is rarely the last one's): aligned to a cache line, with everything a
/// requester CQE reads and writes (key, mask, `wr_id` table, QPN, counter) and the
/// receive key in its first line, and what a received SEND reads besides (its
/// `wr_id` table and counter) in the second; the rest, read only off the poll path,
/// after. The `Arc` that holds it keeps its counts in the line before (an
/// `ArcInner`'s two counters, then the value at its alignment).
#[repr(C, align(64))]
pub(crate) struct WqShared {
    /// [`cqe_qpn_key`] of `qpn` while the QP lives, [`DEAD_KEY`] once destroyed: a
    /// CQ matches a CQE's raw last 8 bytes against it (QPN, requester CQE and
    /// liveness in one compare).
    key: AtomicU64,
    /// [`CQE_QPN_MASK`], as data: the compare in [`WqShared::matches`] then takes it
    /// as a memory operand instead of materialising the 64-bit constant (one
    /// instruction less on the poll path). Never changes.
    key_mask: u64,
    /// The send ring's `wr_id` table for the CQ's lookups, its bound proved once.
    sq_ids: WrIdTable,
    pub(crate) qpn: u32,
    /// `DONE | wqe_counter` of the latest requester completion, 0 for none.
    pub(super) sq_done: AtomicU32,
    /// [`cqe_recv_key`] of `qpn` while the QP lives and takes its receive WQEs from
    /// its own RQ, [`DEAD_KEY`] once destroyed or given an SRQ: a CQ matches a
    /// CQE's raw last 8 bytes against it (QPN, received SEND without immediate, own
    /// RQ and liveness in one compare; [`WqShared::matches_recv`]).
    recv_key: AtomicU64,
    /// The receive ring's `wr_id` table for the CQ's lookups, its bound proved once.
    rq_ids: WrIdTable,
    /// `DONE | tail` (the RQ counter after the latest receive completion).
    rq_done: AtomicU32,
    rq_mask: u32,
    /// The destination QPN of the connected (RC, UC) QP, from its INIT→RTR: the
    /// `src_qp` of a completion whose `flags_rqpn` the device overwrote with data
    /// (scatter to CQE).
    dest_qpn: AtomicU32,
    /// The send ring's own per-slot `wr_id` table (written once per WR, at post).
    sq_wr_id: Arc<[AtomicU64]>,
    /// The receive ring's own per-slot `wr_id` table.
    rq_wr_id: Arc<[AtomicU64]>,
    /// The SRQ receive completions take their `wr_id` from, if the QP has one.
    srq: std::sync::OnceLock<Arc<SrqShared>>,
    /// Set when the QP's responder scatters to CQE (`qpc.cs_res`): where the poll
    /// copies a message the device placed in its CQE.
    scatter: std::sync::OnceLock<super::scatter::RecvScatter>,
    /// Set when the QP's requester scatters to CQE (`qpc.cs_req`): where the poll
    /// copies a READ response or an atomic result the device placed in its CQE.
    send_scatter: std::sync::OnceLock<super::scatter::SendScatter>,
}

// The poll path's fields where the layout above puts them: a requester CQE's in the
// first line, a received SEND's rest in the second.
const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(align_of::<WqShared>() == 64);
    // `WrIdTable` is 32 bytes, its pointer and mask first (asserted beside it).
    assert!(size_of::<WrIdTable>() == 32);
    assert!(offset_of!(WqShared, sq_done) + 4 <= 64);
    assert!(offset_of!(WqShared, qpn) + 4 <= 64);
    assert!(offset_of!(WqShared, recv_key) + 8 <= 64);
    assert!(offset_of!(WqShared, rq_ids) >= 64 && offset_of!(WqShared, rq_ids) + 16 <= 128);
    assert!(offset_of!(WqShared, rq_done) >= 64 && offset_of!(WqShared, rq_done) + 4 <= 128);
};

#[cfg(test)]
thread_local! {
    /// Unit tests that poll one completion through two CQs (to compare their decoders)
    /// retire it twice; they turn the software tail check off on their thread.
    pub(crate) static SKIP_RQ_TAIL_CHECK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[inline(always)]
fn rq_tail_check_skipped() -> bool {
    #[cfg(test)]
    {
        SKIP_RQ_TAIL_CHECK.with(|s| s.get())
    }
    #[cfg(not(test))]
    {
        false
    }
}

/// Marks a published completion counter: every bit above the 16-bit counter, so that
/// `DONE | w` is the mark and counter for any `w` whose low 16 bits are the counter
/// (the poll path ORs it onto a swapped CQE word without clearing the bits above).
pub(super) const DONE: u32 = 0xffff_0000;

/// The last 8 bytes of a CQE (`sop_drop_qpn`, `wqe_counter`, `signature`, `op_own`)
/// read as a native-endian `u64` and masked with [`CQE_QPN_MASK`] equal this for a
/// successful requester CQE ([`MLX5_CQE_REQ`]) of QPN `qpn` (no byte swap on the
/// poll path).
pub(crate) const fn cqe_qpn_key(qpn: u32) -> u64 {
    let q = (qpn & 0x00ff_ffff).to_be_bytes();
    u64::from_ne_bytes([0, q[1], q[2], q[3], 0, 0, 0, MLX5_CQE_REQ << 4])
}

/// Keeps, of a native-endian read of a CQE's last 8 bytes, the QPN bytes of
/// `sop_drop_qpn`, the CQE opcode (the high nibble of `op_own`) and the CQE format
/// (bits 3..2: `MLX5_INLINE_SCATTER_32`/`_64`, compressed), which the keys have 0:
/// a CQE carrying its message (scatter to CQE) never matches, and takes the decode
/// that copies it out. Drops the send opcode byte, the counter, the signature and
/// the owner and SE bits.
pub(crate) const CQE_QPN_MASK: u64 = u64::from_ne_bytes([0, 0xff, 0xff, 0xff, 0, 0, 0, 0xfc]);

/// [`cqe_qpn_key`]'s counterpart for a successful responder CQE of a received SEND
/// without immediate ([`MLX5_CQE_RESP_SEND`]) of QPN `qpn`.
pub(crate) const fn cqe_recv_key(qpn: u32) -> u64 {
    let q = (qpn & 0x00ff_ffff).to_be_bytes();
    u64::from_ne_bytes([0, q[1], q[2], q[3], 0, 0, 0, MLX5_CQE_RESP_SEND << 4])
}

/// A key no CQE software owns matches: its CQE opcode is INVALID (0xf), which the
/// owner test refuses (`sw_owned`) before [`WqShared::matches`] compares; and the
/// CQ's compare that folds the owner test in (`HOT_REQ_MASK`) also wants the send
/// opcode's byte to have the bits (0x30) no table opcode has, which an INVALID
/// entry software initialised (zero there) does not.
pub(crate) const DEAD_KEY: u64 = u64::from_ne_bytes([0x30, 0, 0, 0, 0, 0, 0, 0xf0]);

impl WqShared {
    #[inline]
    pub(crate) fn alive(&self) -> bool {
        self.key.load(Ordering::Relaxed) != DEAD_KEY
    }

    /// [`cqe_qpn_key`] of the QPN while the QP lives, [`DEAD_KEY`] after.
    #[inline(always)]
    pub(crate) fn key(&self) -> u64 {
        self.key.load(Ordering::Relaxed)
    }

    /// Whether a CQE whose last 8 bytes, read as a native-endian `u64`, are `last8`
    /// is a successful requester CQE of this QP while it lives: `last8` masked with
    /// [`CQE_QPN_MASK`] equals the key.
    #[inline(always)]
    pub(crate) fn matches(&self, last8: u64) -> bool {
        (last8 ^ self.key()) & self.key_mask == 0
    }

    /// Whether a CQE whose last 8 bytes, read as a native-endian `u64`, are `last8`
    /// is a successful responder CQE of a SEND without immediate received on this
    /// QP's own RQ while it lives: `last8` masked with [`CQE_QPN_MASK`] equals the
    /// receive key. Such a CQE is retired by [`WqShared::rq_retire_own`].
    #[inline(always)]
    pub(crate) fn matches_recv(&self, last8: u64) -> bool {
        (last8 ^ self.recv_key.load(Ordering::Relaxed)) & self.key_mask == 0
    }

    /// Whether [`WqShared::matches_recv`] can match (the QP lives, without an SRQ).
    pub(crate) fn recv_live(&self) -> bool {
        self.recv_key.load(Ordering::Relaxed) != DEAD_KEY
    }

    /// Marks the QP destroyed: CQs stop matching its CQEs.
    pub(crate) fn kill(&self) {
        self.key.store(DEAD_KEY, Ordering::Relaxed);
        self.recv_key.store(DEAD_KEY, Ordering::Relaxed);
    }

    /// Takes the QP's receive WQEs from `srq`: receive completions retire there, and
    /// never by [`WqShared::rq_retire_own`].
    pub(crate) fn set_srq(&self, srq: Arc<SrqShared>) {
        self.recv_key.store(DEAD_KEY, Ordering::Relaxed);
        let _ = self.srq.set(srq);
    }

    /// The SRQ the QP takes its receive WQEs from, if it has one.
    pub(crate) fn srq(&self) -> Option<&Arc<SrqShared>> {
        self.srq.get()
    }

    /// Copies `data`, the message of a responder CQE with `MLX5_INLINE_SCATTER_32`,
    /// into the receive WQE it completes (`counter`: the CQE's `wqe_counter`, the RQ
    /// slot or the SRQ WQE index), before the WQE is retired (rdma-core
    /// `handle_responder`: `mlx5_copy_to_recv_wqe` / `mlx5_copy_to_recv_srq`). A QP
    /// that did not ask the device to scatter to CQE gets `GeneralErr`.
    pub(crate) fn copy_scattered(&self, counter: u16, data: &[u8]) -> Result<(), WcStatus> {
        if self.srq.get().is_some_and(|s| !s.is_posted(counter)) {
            // A repeated completion (skipped by the retire that follows): nothing to
            // copy, the WQE may hold another receive's list.
            return Ok(());
        }
        match self.scatter.get() {
            Some(s) => s.copy_to_recv(u32::from(counter), data),
            None => Err(WcStatus::GeneralErr),
        }
    }

    /// Copies `data`, the READ response or atomic result of a requester CQE with
    /// `MLX5_INLINE_SCATTER_32`, into the local list of the send WQE it completes
    /// (`counter`: the CQE's `wqe_counter`), before the WQE is retired (rdma-core
    /// `mlx5_parse_cqe`: `mlx5_copy_to_send_wqe`). A QP that did not ask the device
    /// to scatter to CQE gets `GeneralErr`.
    pub(crate) fn copy_scattered_send(&self, counter: u16, data: &[u8]) -> Result<(), WcStatus> {
        match self.send_scatter.get() {
            Some(s) => s.copy_to_send(counter, data),
            None => Err(WcStatus::GeneralErr),
        }
    }

    /// Where the poll copies the READ responses and atomic results the device places
    /// in CQEs (the QP's requester scatters to CQE).
    pub(crate) fn set_send_scatter(&self, s: super::scatter::SendScatter) {
        let _ = self.send_scatter.set(s);
    }

    /// The destination QPN of the connected QP (0 before INIT→RTR).
    pub(crate) fn dest_qpn(&self) -> u32 {
        self.dest_qpn.load(Ordering::Relaxed)
    }

    /// Where the poll copies the messages the device places in CQEs (the QP's
    /// responder scatters to CQE).
    pub(crate) fn set_scatter(&self, s: super::scatter::RecvScatter) {
        let _ = self.scatter.set(s);
    }

    /// A destroyed QP with no work: what a CQ compares CQEs with before it has seen a
    /// live one.
    pub(crate) fn dead() -> WqShared {
        let one = || -> Arc<[AtomicU64]> { Arc::new([AtomicU64::new(0)]) };
        let sq_wr_id = one();
        let rq_wr_id = one();
        WqShared {
            qpn: 0,
            key: AtomicU64::new(DEAD_KEY),
            key_mask: CQE_QPN_MASK,
            sq_ids: WrIdTable::new(&sq_wr_id).expect("one slot"),
            sq_wr_id,
            sq_done: AtomicU32::new(0),
            rq_mask: 0,
            rq_done: AtomicU32::new(0),
            recv_key: AtomicU64::new(DEAD_KEY),
            rq_ids: WrIdTable::new(&rq_wr_id).expect("one slot"),
            rq_wr_id,
            srq: std::sync::OnceLock::new(),
            scatter: std::sync::OnceLock::new(),
            send_scatter: std::sync::OnceLock::new(),
            dest_qpn: AtomicU32::new(0),
        }
    }

    /// The `wr_id` of the send WQE at `counter`, which (with every WQE before it) is
    /// complete.
    #[inline(always)]
    pub(crate) fn sq_retire(&self, counter: u16) -> u64 {
        self.sq_retire_word(u32::from(counter))
    }

    /// Whether the UMR WQE at `counter` (low 16 bits) was a local invalidation: the
    /// slot after its first holds its mark (`ring::UMR_MARK_LOCAL_INV`). A load and a
    /// compare, inline: a call on the poll path would cost every poll its register
    /// saves.
    #[inline(always)]
    pub(crate) fn umr_is_local_inv(&self, counter: u32) -> bool {
        self.sq_ids
            .slot_word(counter.wrapping_add(1))
            .load(Ordering::Relaxed)
            == crate::ring::sq::UMR_MARK_LOCAL_INV
    }

    /// [`WqShared::sq_retire`] of the counter in the low 16 bits of `word` (the bits
    /// above are ignored: [`DONE`] covers them).
    #[inline(always)]
    pub(crate) fn sq_retire_word(&self, word: u32) -> u64 {
        let wr_id = self.sq_ids.slot_word(word).load(Ordering::Relaxed);
        // Release: the read above happens before the QP may reuse the slot.
        self.sq_done.store(DONE | word, Ordering::Release);
        wr_id
    }

    /// The `wr_id` of the receive WQE at `counter`, which is complete; `None` for a
    /// repeated completion of an SRQ WQE that was not posted again (see
    /// `SrqShared`): the CQ skips it.
    #[inline]
    pub(crate) fn rq_retire(&self, counter: u16) -> Option<u64> {
        if let Some(s) = self.srq.get() {
            // The counter is the SRQ WQE index.
            return s.retire(counter);
        }
        self.check_rq_tail(counter);
        let wr_id =
            self.rq_wr_id[(u32::from(counter) & self.rq_mask) as usize].load(Ordering::Relaxed);
        self.rq_done
            .store(DONE | u32::from(counter.wrapping_add(1)), Ordering::Release);
        Some(wr_id)
    }

    /// Debug builds: checks that the receive completion of a QP's own RQ names the
    /// WQE at the software tail. The slot is taken from the CQE's `wqe_counter`, as the
    /// hardware field allows; libmlx5 (`cq.c`, `handle_responder`) keeps a software
    /// tail instead (`wq->tail`), because a plain RQ completes in order: a counter
    /// other than the tail means a device (or simulator) reporting the wrong WQE.
    /// Nothing in release builds.
    #[inline(always)]
    fn check_rq_tail(&self, counter: u16) {
        if cfg!(debug_assertions) && !rq_tail_check_skipped() {
            // `DONE | tail`, or 0 before the first completion (tail 0).
            let tail = self.rq_done.load(Ordering::Relaxed) as u16;
            assert_eq!(
                counter, tail,
                "receive CQE wqe_counter {counter:#x} is not the RQ's software tail {tail:#x}"
            );
        }
    }

    /// [`WqShared::rq_retire`] of a QP with its own RQ (no SRQ; what a match of
    /// [`WqShared::matches_recv`] proves), of the counter in the low 16 bits of
    /// `word` (the bits above are ignored: [`DONE`] covers them, so the store is
    /// `DONE | (counter + 1) mod 2^16`, as `rq_retire`'s).
    #[inline(always)]
    pub(crate) fn rq_retire_own(&self, word: u32) -> u64 {
        self.check_rq_tail(word as u16);
        let wr_id = self.rq_ids.slot_word(word).load(Ordering::Relaxed);
        // Release: the read above happens before the QP may reuse the slot.
        self.rq_done
            .store(DONE | word.wrapping_add(1), Ordering::Release);
        wr_id
    }
}

type Mem<B> = Arc<DmaBuf<B>>;
type SqRing<B> = ring::SendQueue<FastMem<B>, FastWord<B>>;
type RqRing<B> = ring::ReceiveQueue<FastMem<B>, FastWord<B>>;

/// The layout of a QP's buffer and queues, from the caps (`mlx5_calc_sq_size`,
/// `mlx5_calc_rq_size`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    sq_wqebbs: u32,
    rq_wqes: u32,
    rq_shift: u32,
    pub(crate) granted: QpCap,
    /// Receive WQEs come from an SRQ: the device sees no RQ in the buffer (the SQ
    /// starts at 0); the ring writer's one-entry RQ sits after the doorbell record,
    /// unused.
    srq: bool,
}

impl Geometry {
    /// Bytes of the RQ in the device's view of the buffer (0 with an SRQ).
    fn rq_bytes(&self) -> usize {
        if self.srq {
            0
        } else {
            self.rq_ring_bytes()
        }
    }
    fn rq_ring_bytes(&self) -> usize {
        (self.rq_wqes as usize) << self.rq_shift
    }
    /// Offset of the RQ ring the driver's writer uses.
    fn rq_ring_offset(&self) -> usize {
        if self.srq {
            self.dbr_offset() + 64
        } else {
            0
        }
    }
    /// Bytes of the whole DMA buffer.
    fn buf_len(&self) -> usize {
        self.dbr_offset() + 64 + if self.srq { self.rq_ring_bytes() } else { 0 }
    }
    /// The geometry of a QP attached to an SRQ.
    fn with_srq(mut self) -> Self {
        self.srq = true;
        self.rq_wqes = 1;
        self.rq_shift = 4;
        self.granted.max_recv_wr = 0;
        self.granted.max_recv_sge = 0;
        self
    }
    fn sq_bytes(&self) -> usize {
        self.sq_wqebbs as usize * WQEBB as usize
    }
    /// Offset of the SQ ring in the buffer, and its WQEBBs.
    #[cfg(test)]
    pub(crate) fn sq_layout(&self) -> (usize, usize) {
        (self.rq_bytes(), self.sq_wqebbs as usize)
    }
    /// Offset of the doorbell record: after both rings, 64-byte aligned.
    pub(crate) fn dbr_offset(&self) -> usize {
        (self.rq_bytes() + self.sq_bytes()).next_multiple_of(64)
    }
}

/// The device limits QP sizing depends on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// `max_wqe_sz_sq`.
    pub(crate) max_wqe_sz_sq: u32,
    /// `max_wqe_sz_rq`.
    pub(crate) max_wqe_sz_rq: u32,
    /// `log_max_qp_sz`.
    pub(crate) log_max_qp_sz: u32,
}

impl Limits {
    /// The limits of the device behind `ctx`.
    pub(crate) fn of<B: Bus>(ctx: &Context<B>) -> Limits {
        Limits {
            max_wqe_sz_sq: ctx.cap(g::max_wqe_sz_sq).min(1 << 16) as u32,
            max_wqe_sz_rq: ctx.cap(g::max_wqe_sz_rq).min(1 << 16) as u32,
            log_max_qp_sz: ctx.cap(g::log_max_qp_sz).min(15) as u32,
        }
    }

    /// A ConnectX-5's: 1 KiB send WQEs, 512-byte receive WQEs, 32 Ki entries.
    pub(crate) const CX5: Limits = Limits {
        max_wqe_sz_sq: 1024,
        max_wqe_sz_rq: 512,
        log_max_qp_sz: 15,
    };
}

pub(crate) fn geometry(limits: &Limits, cap: &QpCap) -> Result<Geometry> {
    geometry_with(limits, cap, RC_SQ_OVERHEAD)
}

/// [`geometry`] for a QP whose send WQEs carry `ovh` bytes before their data part.
pub(crate) fn geometry_with(limits: &Limits, cap: &QpCap, ovh: u32) -> Result<Geometry> {
    let max_wqe_sq = limits.max_wqe_sz_sq.min(MAX_WQE_BYTES.next_multiple_of(64));
    let max_wqe_rq = limits.max_wqe_sz_rq;
    let max_wqes = 1u64 << limits.log_max_qp_sz.min(15);
    let max_send_sge = (max_wqe_sq.min(512).saturating_sub(32) / 16).max(1);
    let exceeded = |what, requested: u32, max: u64| Error::CapExceeded {
        what,
        requested: requested.into(),
        max,
    };
    if cap.max_send_wr == 0 || u64::from(cap.max_send_wr) > max_wqes {
        return Err(exceeded("max_send_wr", cap.max_send_wr, max_wqes));
    }
    if cap.max_recv_wr == 0 || u64::from(cap.max_recv_wr) > max_wqes {
        return Err(exceeded("max_recv_wr", cap.max_recv_wr, max_wqes));
    }
    if cap.max_send_sge > max_send_sge {
        return Err(exceeded(
            "max_send_sge",
            cap.max_send_sge,
            max_send_sge.into(),
        ));
    }
    let max_recv_sge = max_wqe_rq / 16;
    if cap.max_recv_sge > max_recv_sge {
        return Err(exceeded(
            "max_recv_sge",
            cap.max_recv_sge,
            max_recv_sge.into(),
        ));
    }
    // Send WQE size W (§9): the larger of the inline and the gather layouts.
    let inl = if cap.max_inline_data > 0 {
        ovh + (4 + cap.max_inline_data).next_multiple_of(16)
    } else {
        0
    };
    let sg = ovh + 16 * cap.max_send_sge;
    let w = inl.max(sg).next_multiple_of(WQEBB);
    if w > max_wqe_sq {
        let max_inline = max_wqe_sq - ovh - 4;
        return Err(exceeded(
            "max_inline_data",
            cap.max_inline_data,
            max_inline.into(),
        ));
    }
    let wq_size = (u64::from(cap.max_send_wr) * u64::from(w)).next_power_of_two();
    let sq_wqebbs = wq_size / u64::from(WQEBB);
    if sq_wqebbs > max_wqes {
        return Err(exceeded(
            "max_send_wr",
            cap.max_send_wr,
            max_wqes * 64 / u64::from(w),
        ));
    }
    let max_post = (wq_size / u64::from(w)) as u32;
    // Receive WQE: a power of two of 16-byte entries.
    let rq_wqe = (16 * cap.max_recv_sge.max(1)).next_power_of_two();
    let rq_shift = rq_wqe.trailing_zeros();
    let rq_wqes = (cap.max_recv_wr.next_power_of_two() * rq_wqe).max(64) / rq_wqe;
    Ok(Geometry {
        sq_wqebbs: sq_wqebbs as u32,
        rq_wqes,
        rq_shift,
        granted: QpCap {
            max_send_wr: max_post,
            max_recv_wr: rq_wqes,
            max_send_sge: (w - ovh) / 16,
            max_recv_sge: rq_wqe / 16,
            max_inline_data: w - ovh - 4,
        },
        srq: false,
    })
}

/// A reliable-connected queue pair.
///
/// Created in RESET by [`Pd::create_qp`]; [`QueuePair::modify`] (or
/// [`QueuePair::to_init`], [`QueuePair::to_rtr`], [`QueuePair::to_rts`]) takes it
/// through the states. Posting takes `&mut self`: one thread at a time, no lock.
/// Dropping it issues `DESTROY_QP` and releases its UAR and memory.
///
/// `repr(C)`: the queues, then the send ring's slots, as the post path reads them.
#[repr(C)]
pub struct QueuePair<'a, B: Bus> {
    pub(super) q: Queues<B>,
    /// The send ring as the typed entries write it (bounds proved once).
    sq_slots: SqSlots<B>,
    qpn: u32,
    uar: u32,
    /// Whether `uar` is the QP's own (deallocated with it), not the driver's shared one.
    own_uar: bool,
    /// The QP's own Q counter set (0: none).
    pub(super) counter_set: u8,
    port: u8,
    pkey_index: u16,
    pub(super) pd: &'a Pd<'a, B>,
    send_cq: Arc<CqCore<'a, B>>,
    recv_cq: Arc<CqCore<'a, B>>,
    live: bool,
}

/// The queues of a QP: its buffer, the ring writers, the state shared with its CQs,
/// and what posting needs. Everything the fast path touches lives here.
///
/// `repr(C)`: what every post reads or writes (state, counters, the shared
/// completion state's pointer) first, next to the send ring's writer.
#[repr(C)]
pub(crate) struct Queues<B: Bus> {
    pub(crate) state: QpState,
    atomics: bool,
    /// High-water mark of the WQEBBs outstanding after a post (counters).
    pub(super) sq_hwm: u16,
    /// `DONE | index` of the last WQE of the latest post, for the high-water mark
    /// (`note_posted`); `HwmPrev::FRESH` after (re)start.
    pub(super) hwm_prev: super::counters::HwmPrev,
    /// The last `sq_done` value acted on.
    sq_seen: u32,
    /// The RQ counter up to which receives were reclaimed.
    rq_tail: u16,
    /// UD: the largest message (the port MTU, from RESET→INIT); `u32::MAX` for RC.
    max_msg: u32,
    /// Send WRs posted (counters).
    pub(super) posted: u64,
    pub(crate) shared: Arc<WqShared>,
    pub(super) bus: Arc<B>,
    /// The error of the latest post that the one-request inline entry's out-of-line
    /// paths refused (they return a flag, so that the entry's result is built in
    /// registers: `post::send_one_inline`).
    pub(super) last_err: PostError,
    pub(super) sq: SqRing<B>,
    pub(super) rq: RqRing<B>,
    pub(crate) geo: Geometry,
    sq_cfg: SqConfig,
    pub(crate) buf: Mem<B>,
}

impl<B: Bus> super::post::SqOwner<B> for QueuePair<'_, B> {
    #[inline(always)]
    fn parts(&mut self) -> (&mut Queues<B>, &mut SqSlots<B>) {
        (&mut self.q, &mut self.sq_slots)
    }
}

impl<B: Bus> std::fmt::Debug for QueuePair<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair")
            .field("qpn", &self.qpn)
            .field("state", &self.q.state)
            .field("cap", &self.q.geo.granted)
            .finish()
    }
}

impl<B: Bus> Context<B> {
    /// The most inline data an RC QP of this device can be granted
    /// (`max_wqe_sz_sq` less the RC overhead and the inline header; verbs has no
    /// device attribute for it, only the per-QP `max_inline_data`).
    pub fn max_inline_data(&self) -> u32 {
        let w = Limits::of(self)
            .max_wqe_sz_sq
            .min(MAX_WQE_BYTES.next_multiple_of(64));
        w.saturating_sub(RC_SQ_OVERHEAD + 4)
    }
}

fn alloc_uar<B: Bus>(ctx: &Context<B>) -> Result<u32> {
    let input = new_input(Opcode::AllocUar, 0, 16);
    let out = exec(ctx, &input, alloc_uar_out::SIZE)?;
    Ok(alloc_uar_out::uar.get(&out) as u32)
}

/// Whether `e` is ALLOC_UAR's answer when every UAR page of the device is allocated
/// (`LIM_ERR`).
fn uars_exhausted(e: &Error) -> bool {
    matches!(
        e,
        Error::Device(crate::error::Error::Cmd(c))
            if c.status == crate::error::CmdStatus::LimitsExceeded
    )
}

fn dealloc_uar<B: Bus>(ctx: &Context<B>, uar: u32) -> Result<()> {
    let mut input = new_input(Opcode::DeallocUar, 0, dealloc_uar_in::SIZE);
    dealloc_uar_in::uar.set(&mut input, u64::from(uar));
    exec(ctx, &input, dealloc_uar_out::SIZE).map(|_| ())
}

impl<'ctx, B: Bus> Pd<'ctx, B> {
    /// Creates an RC queue pair in RESET (`CREATE_QP`), with its own UAR (so its
    /// BlueFlame register is its alone and needs no lock). When the device has no UAR
    /// page left (a ConnectX's BAR holds a few thousand, and it supports millions of
    /// QPs), the QP shares the driver's UAR and rings 8-byte doorbells only, without
    /// BlueFlame: rdma-core's libmlx5 likewise gives QPs beyond its low-latency
    /// BlueFlame registers a shared register that takes no BlueFlame copy (bfreg 0,
    /// `mlx5_alloc_qp_buf`/`need_uuar_lock`), and an 8-byte doorbell is one store, so
    /// QPs on other threads need no lock to share it.
    ///
    /// The CQs and the SRQ must belong to the PD's device
    /// ([`Error::ForeignObject`] otherwise).
    pub fn create_qp<'q>(&self, init: &QpInitAttr<'q, 'ctx, B>) -> Result<QueuePair<'_, B>> {
        let ctx = self.context();
        // Linux resolves `send_cq_handle`, `recv_cq_handle` and `srq_handle` of
        // CREATE_QP in the calling uverbs file's object table (drivers/infiniband/core
        // uverbs_cmd.c `create_qp`: `uobj_get_obj_read(cq, UVERBS_OBJECT_CQ, ...)`),
        // so an object of another device cannot be named there: it is EINVAL.
        let own = |object, number, owner| {
            if owner == ctx.id() {
                Ok(())
            } else {
                Err(Error::ForeignObject {
                    object,
                    number,
                    owner,
                    creating: "QP",
                    device: ctx.id(),
                })
            }
        };
        own("send CQ", init.send_cq.cqn(), init.send_cq.device())?;
        own("receive CQ", init.recv_cq.cqn(), init.recv_cq.device())?;
        if let Some(srq) = init.srq {
            own("SRQ", srq.srq_num(), srq.device())?;
        }
        let ovh = match init.qp_type {
            QpType::Rc | QpType::Uc if init.memory_windows => MW_SQ_OVERHEAD,
            QpType::Rc => RC_SQ_OVERHEAD,
            QpType::Ud => UD_SQ_OVERHEAD,
            // UC: control and remote address segments, as RC without atomics.
            QpType::Uc => RC_SQ_OVERHEAD,
        };
        let mut geo = geometry_with(&Limits::of(ctx), &init.cap, ovh)?;
        if init.srq.is_some() {
            geo = geo.with_srq();
        }
        let (uar, own_uar) = match alloc_uar(ctx) {
            Ok(u) => (u, true),
            Err(e) if uars_exhausted(&e) => match ctx.uar_index() {
                Some(u) => (u, false),
                None => return Err(e),
            },
            Err(e) => return Err(e),
        };
        // The QP's own Q counter set, for its device-side counters (none left: the QP
        // has none).
        let set = ctx.alloc_q_counter().unwrap_or(0);
        match self.create_qp_on(init, geo, (uar, own_uar), set) {
            Ok(qp) => Ok(qp),
            Err(e) => {
                if own_uar {
                    if let Err(e2) = dealloc_uar(ctx, uar) {
                        tracing::warn!(uar, error = %e2, "DEALLOC_UAR failed");
                    }
                }
                if set != 0 {
                    if let Err(e2) = ctx.dealloc_q_counter(set) {
                        tracing::warn!(set, error = %e2, "DEALLOC_Q_COUNTER failed");
                    }
                }
                Err(e)
            }
        }
    }

    fn create_qp_on<'q>(
        &self,
        init: &QpInitAttr<'q, 'ctx, B>,
        geo: Geometry,
        (uar, own_uar): (u32, bool),
        counter_set: u8,
    ) -> Result<QueuePair<'_, B>> {
        let ctx = self.context();
        let rq_bytes = geo.rq_bytes();
        let sq_bytes = geo.sq_bytes();
        let dbr = geo.dbr_offset();
        let buf = Arc::new(DmaBuf::new(ctx.bus(), geo.buf_len(), DmaPerm::RW)?);
        let npages = (rq_bytes + sq_bytes).div_ceil(PAGE_SIZE);
        let pas: Vec<u64> = (0..npages as u64)
            .map(|i| buf.iova() + i * PAGE_SIZE as u64)
            .collect();
        let len = len_with_flex64(&create_qp_in::LAYOUT, npages)
            .ok_or(Error::InvalidArgument("QP buffer too large"))?;
        let mut input = new_input(Opcode::CreateQp, 0, len);
        let q = |f| in_command(f);
        // MLX5_QP_ST_RC 0, MLX5_QP_ST_UC 1, MLX5_QP_ST_UD 2, MLX5_QP_ST_QP1 8.
        let st = match init.qp_type {
            QpType::Rc => 0,
            QpType::Uc => 1,
            QpType::Ud if init.gsi => 8,
            QpType::Ud => 2,
        };
        if init.gsi && init.qp_type != QpType::Ud {
            return Err(Error::InvalidArgument("a GSI QP (QP1) is a UD QP"));
        }
        q(qpc::st).set(&mut input, st);
        q(qpc::pm_state).set(&mut input, 3); // migrated
        q(qpc::pd).set(&mut input, self.pdn().into());
        q(qpc::uar_page).set(&mut input, uar.into());
        q(qpc::log_rq_stride).set(&mut input, u64::from(geo.rq_shift - 4));
        q(qpc::log_rq_size).set(&mut input, u64::from(geo.rq_wqes.trailing_zeros()));
        q(qpc::log_sq_size).set(&mut input, u64::from(geo.sq_wqebbs.trailing_zeros()));
        match init.srq {
            Some(srq) => {
                // MLX5_SRQ_RQ: receive WQEs from the SRQ, no RQ in the buffer.
                q(qpc::rq_type).set(&mut input, 1);
                q(qpc::srqn_rmpn_xrqn).set(&mut input, srq.srq_num().into());
                q(qpc::log_rq_size).set(&mut input, 0);
                q(qpc::log_rq_stride).set(&mut input, 0);
            }
            None => q(qpc::rq_type).set(&mut input, 0),
        }
        q(qpc::cqn_snd).set(&mut input, init.send_cq.cqn().into());
        q(qpc::cqn_rcv).set(&mut input, init.recv_cq.cqn().into());
        q(qpc::log_page_size).set(&mut input, 0);
        q(qpc::dbr_addr).set(&mut input, buf.iova() + dbr as u64);
        q(qpc::counter_set_id).set(&mut input, counter_set.into());
        // Responder scatter to CQE as Linux's `mlx5_ib` sets it (qp.c
        // `create_qp_common` / `configure_responder_scat_cqe`): RC and UC QPs whose
        // creator asked (`MLX5_QP_FLAG_SCATTER_CQE`) on a device with `sctr_data_cqe`
        // (without it the request is dropped, not refused: `process_vendor_flag`);
        // `MLX5_RES_SCAT_DATA64_CQE` (2) when the receive CQ has 128-byte CQEs,
        // `MLX5_RES_SCAT_DATA32_CQE` (1) otherwise.
        let asked = init
            .scatter_to_cqe
            .unwrap_or_else(|| ctx.bus().scatter_to_cqe_pays());
        let scatter = asked
            && matches!(init.qp_type, QpType::Rc | QpType::Uc)
            && ctx.cap(g::sctr_data_cqe) == 1;
        if scatter {
            let cs_res = match init.recv_cq.cqe_size() {
                CqeSize::Bytes128 => 2,
                CqeSize::Bytes64 => 1,
            };
            q(qpc::cs_res).set(&mut input, cs_res);
        }
        // Requester scatter to CQE as `mlx5_ib` sets it (qp.c
        // `configure_requester_scat_cqe`, for RC QPs asking for scatter to CQE): only
        // when every WQE is signaled (`sq_sig_all`; the device places a READ response
        // or an atomic result in the CQE of a signaled WQE only, and `mlx5_ib` takes
        // no chance on the others), `MLX5_REQ_SCAT_DATA64_CQE` (0x22) when the send
        // CQ has 128-byte CQEs, `MLX5_REQ_SCAT_DATA32_CQE` (0x11) otherwise. The poll
        // copies the data into the WQE's local list (as libmlx5's
        // `mlx5_copy_to_send_wqe`).
        let req_scatter = scatter && init.qp_type == QpType::Rc && init.sq_sig_all;
        if req_scatter {
            let cs_req = match init.send_cq.cqe_size() {
                CqeSize::Bytes128 => 0x22,
                CqeSize::Bytes64 => 0x11,
            };
            q(qpc::cs_req).set(&mut input, cs_req);
        }
        set_flex64(&mut input, create_qp_in::pas, &pas)
            .map_err(|_| Error::InvalidArgument("PAS list does not fit the command"))?;
        let out = exec(ctx, &input, create_qp_out::SIZE)?;
        let qpn = create_qp_out::qpn.get(&out) as u32;

        let bf_reg_size = 1usize << ctx.cap(g::log_bf_reg_size).min(16);
        // BlueFlame when asked for and the bus makes it pay (`Bus::blueflame`: not
        // on an uncached BAR mapping).
        let blueflame = init.blueflame && ctx.bus().blueflame() && own_uar;
        let bf = if blueflame && ctx.cap(g::bf) == 1 {
            BlueFlameReg::blueflame(uar, bf_reg_size)
        } else {
            BlueFlameReg::doorbell_only(uar, bf_reg_size)
        };
        let mut q = Queues::new(
            buf,
            geo,
            qpn,
            bf,
            init.sq_sig_all,
            !blueflame,
            ctx.cap(g::atomic) == 1,
            Arc::clone(ctx.bus()),
        )?;
        if init.qp_type != QpType::Rc {
            q.set_qp_type(init.qp_type)?;
        }
        if let Some(srq) = init.srq {
            q.shared.set_srq(Arc::clone(srq.shared()));
        }
        if scatter {
            let segs = match init.srq {
                Some(srq) => srq.recv_segs()?,
                None => super::scatter::RingSegs::new(&q.buf, 0, geo.rq_wqes, geo.rq_shift, 0)
                    .ok_or(Error::InvalidArgument("QP geometry"))?,
            };
            q.shared.set_scatter(super::scatter::RecvScatter {
                segs,
                mrs: Arc::clone(ctx.mrs()),
            });
        }
        if req_scatter {
            let segs = super::scatter::RingSegs::new(&q.buf, geo.rq_bytes(), geo.sq_wqebbs, 6, 0)
                .ok_or(Error::InvalidArgument("QP geometry"))?;
            q.shared.set_send_scatter(super::scatter::SendScatter {
                sq: segs,
                mrs: Arc::clone(ctx.mrs()),
            });
        }
        init.send_cq.attach(Arc::clone(&q.shared));
        if !Arc::ptr_eq(init.send_cq.core(), init.recv_cq.core()) {
            init.recv_cq.attach(Arc::clone(&q.shared));
        }
        let sq_slots = q.sq_slots()?;
        Ok(QueuePair {
            q,
            sq_slots,
            qpn,
            uar,
            own_uar,
            counter_set,
            port: 1,
            pkey_index: 0,
            pd: self,
            send_cq: Arc::clone(init.send_cq.core()),
            recv_cq: Arc::clone(init.recv_cq.core()),
            live: true,
        })
    }
}

impl<B: Bus> Queues<B> {
    /// The queues of QP `qpn` over `buf` (laid out as `geo` says), ringing `bf`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        buf: Mem<B>,
        geo: Geometry,
        qpn: u32,
        bf: BlueFlameReg,
        sig_all: bool,
        shut_up_bf: bool,
        atomics: bool,
        bus: Arc<B>,
    ) -> Result<Self> {
        let sq_cfg = SqConfig {
            qp_type: QpType::Rc,
            qpn,
            wqe_cnt: geo.sq_wqebbs,
            max_sge: geo.granted.max_send_sge,
            max_inline: geo.granted.max_inline_data,
            sig_all,
            bf,
            shut_up_bf,
            prefer_bf: true,
        };
        let sq_wr_id: Arc<[AtomicU64]> = (0..geo.sq_wqebbs).map(|_| AtomicU64::new(0)).collect();
        let rq_wr_id: Arc<[AtomicU64]> = (0..geo.rq_wqes).map(|_| AtomicU64::new(0)).collect();
        let (sq, rq) = rings(&buf, &geo, sq_cfg, &sq_wr_id, &rq_wr_id)?;
        let shared = Arc::new(WqShared {
            qpn,
            key: AtomicU64::new(cqe_qpn_key(qpn)),
            key_mask: CQE_QPN_MASK,
            sq_ids: WrIdTable::new(&sq_wr_id).ok_or(Error::InvalidArgument("QP geometry"))?,
            sq_wr_id,
            sq_done: AtomicU32::new(0),
            rq_mask: geo.rq_wqes - 1,
            recv_key: AtomicU64::new(cqe_recv_key(qpn)),
            rq_ids: WrIdTable::new(&rq_wr_id).ok_or(Error::InvalidArgument("QP geometry"))?,
            rq_wr_id,
            rq_done: AtomicU32::new(0),
            srq: std::sync::OnceLock::new(),
            scatter: std::sync::OnceLock::new(),
            send_scatter: std::sync::OnceLock::new(),
            dest_qpn: AtomicU32::new(0),
        });
        Ok(Queues {
            sq,
            rq,
            shared,
            bus,
            state: QpState::Reset,
            atomics,
            sq_seen: 0,
            rq_tail: 0,
            geo,
            sq_cfg,
            buf,
            max_msg: u32::MAX,
            posted: 0,
            sq_hwm: 0,
            hwm_prev: super::counters::HwmPrev::FRESH,
            last_err: PostError::AddressMismatch,
        })
    }

    /// The send ring, its `wr_id` table and its doorbell register as the typed entries
    /// write them ([`SqSlots`]: bounds proved once, here). The ring's memory never
    /// moves: a restart rebuilds the ring writers over the same buffer and table.
    pub(crate) fn sq_slots(&self) -> Result<SqSlots<B>> {
        let bf = self.sq_cfg.bf;
        // The doorbell goes to `reg + 0` or `reg + buf_size` (the halves alternate).
        let reg_len = if bf.buf_size == 0 { 8 } else { 2 * bf.buf_size };
        let mut slots = SqSlots::new(
            &self.buf,
            self.geo.rq_bytes(),
            self.geo.sq_wqebbs,
            &self.shared.sq_wr_id,
            &self.bus,
            bf.reg,
            reg_len,
        )
        .ok_or(Error::InvalidArgument("QP geometry"))?;
        slots.set_one_cap(self.sq.one_inline_limit(), |len| {
            self.sq.one_inline_head(len)
        });
        slots.refresh_one_limit(self.sq_hwm);
        Ok(slots)
    }

    /// Makes the send ring write WQEs for transport `ty` (before any post).
    pub(crate) fn set_qp_type(&mut self, ty: QpType) -> Result<()> {
        self.sq_cfg.qp_type = ty;
        self.restart()
    }

    /// The transport.
    pub(crate) fn qp_type(&self) -> QpType {
        self.sq_cfg.qp_type
    }

    /// The WQE index the next send request gets.
    pub(crate) fn next_send_index(&self) -> u16 {
        self.sq.cur_post()
    }

    /// The WQE counter the next receive request gets.
    pub(crate) fn next_recv_index(&self) -> u16 {
        self.rq.head()
    }

    /// Reclaims send slots completed since the last call; whether any were.
    #[inline]
    pub(super) fn sync_sq(&mut self) -> bool {
        let d = self.shared.sq_done.load(Ordering::Acquire);
        if d == self.sq_seen || d & DONE == 0 {
            return false;
        }
        self.sq_seen = d;
        self.sq.complete(d as u16).is_some()
    }

    /// Reclaims receive slots completed since the last call; whether any were.
    #[inline]
    fn sync_rq(&mut self) -> bool {
        let d = self.shared.rq_done.load(Ordering::Acquire);
        if d & DONE == 0 {
            return false;
        }
        let target = d as u16;
        // The ring's tail moves with `rq_tail`: retiring `k` WQEs at once is what
        // completing them one by one from `rq_tail` did, up to the target or the
        // outstanding ones.
        let k = self.rq.retire(u32::from(target.wrapping_sub(self.rq_tail)));
        self.rq_tail = self.rq_tail.wrapping_add(k as u16);
        k != 0
    }

    /// See [`QueuePair::post_send`].
    #[inline]
    pub(crate) fn post_send(&mut self, wrs: &[SendWr<'_>]) -> std::result::Result<(), BadWr> {
        if !self.state.can_send() {
            return Err(BadWr {
                index: 0,
                error: PostError::InvalidState { state: self.state },
            });
        }
        // The WQEs are written and their `wr_id`s recorded by the ring (one table,
        // shared with the CQs); the last one's doorbell data stays in registers. The
        // common shapes take the ring's lean writer inline; anything else (and every
        // error) goes out of line.
        let mut res = Ok(());
        let mut nreq = 0u32;
        let start = self.sq.cur_post();
        let mut last = ring::LastWqe::default();
        for (index, wr) in wrs.iter().enumerate() {
            if let Some(w) = self.sq.write_lean(wr) {
                last = w;
                nreq += 1;
                continue;
            }
            match self.post_send_slow(wr) {
                Ok(w) => {
                    last = w;
                    nreq += 1;
                }
                Err(error) => {
                    res = Err(BadWr { index, error });
                    break;
                }
            }
        }
        if nreq != 0 {
            self.sq.doorbell(&*self.bus, nreq, &last);
            self.note_posted(nreq, last.index(), start, self.sq.cur_post());
        }
        res
    }

    /// A send request outside the lean shapes, or one the lean writer could not take:
    /// the atomics check, the general writer, and when the ring was full and
    /// completions published since free slots, a second try.
    #[inline(never)]
    pub(super) fn post_send_slow(
        &mut self,
        wr: &SendWr<'_>,
    ) -> std::result::Result<ring::LastWqe, PostError> {
        if !self.atomics && matches!(wr.op, SendOp::AtomicCas { .. } | SendOp::AtomicFa { .. }) {
            return Err(PostError::UnsupportedOp {
                opcode: wr.op.opcode(),
            });
        }
        if self.sq_cfg.qp_type == QpType::Ud {
            let len: u64 = match wr.data {
                ring::SendData::Gather(sges) => sges.iter().map(|s| u64::from(s.length)).sum(),
                ring::SendData::Inline(parts) => parts.iter().map(|p| p.len() as u64).sum(),
            };
            if len > u64::from(self.max_msg) {
                return Err(PostError::MessageTooLong {
                    len,
                    max: self.max_msg,
                });
            }
        }
        match self.sq.write_wqe_general(wr) {
            Ok(w) => Ok(w),
            Err(ring::PostError::QueueFull { .. }) if self.sync_sq() => {
                self.sq.write_wqe(wr).map_err(PostError::from)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// See [`QueuePair::post_recv`].
    #[inline]
    pub(crate) fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), BadWr> {
        if self.geo.srq {
            return Err(BadWr {
                index: 0,
                error: PostError::SrqAttached,
            });
        }
        if !self.state.can_recv() {
            return Err(BadWr {
                index: 0,
                error: PostError::InvalidState { state: self.state },
            });
        }
        // When the ring is full, completions published since free slots: taken, and
        // the rest of the list posted (as posting one by one did).
        let mut done = 0;
        let res = loop {
            match self.rq.post_list(&wrs[done..]) {
                Ok(()) => break Ok(()),
                Err((i, ring::PostError::QueueFull { .. })) if self.sync_rq() => done += i,
                Err((i, e)) => {
                    break Err(BadWr {
                        index: done + i,
                        error: e.into(),
                    })
                }
            }
        };
        self.rq.ring_doorbell(&*self.bus);
        res
    }

    /// The rings after a reset: counters at zero, doorbell record cleared.
    pub(crate) fn restart(&mut self) -> Result<()> {
        let dbr = self.geo.dbr_offset();
        self.buf.write_be32(dbr, 0);
        self.buf.write_be32(dbr + 4, 0);
        let (sq, rq) = rings(
            &self.buf,
            &self.geo,
            self.sq_cfg,
            &self.shared.sq_wr_id,
            &self.shared.rq_wr_id,
        )?;
        self.sq = sq;
        self.rq = rq;
        self.shared.sq_done.store(0, Ordering::Release);
        self.shared.rq_done.store(0, Ordering::Release);
        self.sq_seen = 0;
        self.rq_tail = 0;
        self.hwm_prev = super::counters::HwmPrev::FRESH;
        Ok(())
    }
}

/// The send and receive rings over a QP buffer.
/// Both write their WQEs' `wr_id`s into the given tables, which the QP shares with
/// its CQs.
fn rings<B: Bus>(
    buf: &Mem<B>,
    geo: &Geometry,
    sq_cfg: SqConfig,
    sq_wr_id: &Arc<[AtomicU64]>,
    rq_wr_id: &Arc<[AtomicU64]>,
) -> Result<(SqRing<B>, RqRing<B>)> {
    let rq_bytes = geo.rq_bytes();
    let rq_ring = (geo.rq_ring_offset(), geo.rq_ring_bytes());
    let dbr = geo.dbr_offset();
    let bad = |_| Error::InvalidArgument("QP geometry");
    let window =
        |off, len| FastMem::new(buf, off, len).ok_or(Error::InvalidArgument("QP geometry"));
    let word = |off| FastWord::new(buf, off).ok_or(Error::InvalidArgument("QP geometry"));
    let sq = SqRing::with_wr_ids(
        window(rq_bytes, geo.sq_bytes())?,
        word(dbr + 4 * MLX5_SND_DBR)?,
        sq_cfg,
        Arc::clone(sq_wr_id),
    )
    .map_err(bad)?;
    let rq = RqRing::with_wr_ids(
        window(rq_ring.0, rq_ring.1)?,
        word(dbr + 4 * MLX5_RCV_DBR)?,
        RqConfig {
            wqe_cnt: geo.rq_wqes,
            wqe_shift: geo.rq_shift,
        },
        Arc::clone(rq_wr_id),
    )
    .map_err(bad)?;
    Ok((sq, rq))
}

impl<'a, B: Bus> QueuePair<'a, B> {
    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.qpn
    }

    /// The state (as the driver last set it).
    pub fn state(&self) -> QpState {
        self.q.state
    }

    /// The granted capabilities (each at least what was asked).
    pub fn cap(&self) -> QpCap {
        self.q.geo.granted
    }

    /// The port the QP is bound to (from RESET→INIT).
    pub fn port(&self) -> u8 {
        self.port
    }

    /// The protection domain.
    pub fn pd(&self) -> &'a Pd<'a, B> {
        self.pd
    }

    /// The send CQ's number.
    pub fn send_cqn(&self) -> u32 {
        self.send_cq.cqn()
    }

    /// The receive CQ's number.
    pub fn recv_cqn(&self) -> u32 {
        self.recv_cq.cqn()
    }

    /// Bytes of host memory the QP uses: the DMA buffer (RQ ring, SQ ring and
    /// doorbell record, rounded to pages), the bytes the hardware format requires
    /// (rings plus the 8-byte record), and the driver's bookkeeping (this handle,
    /// the per-slot `wr_id` tables).
    pub fn footprint(&self) -> QpFootprint {
        let geo = &self.q.geo;
        let hw = geo.rq_bytes() + geo.sq_bytes() + 8;
        let dma = (geo.dbr_offset() + 64).div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let sq = geo.sq_wqebbs as usize;
        let rq = geo.rq_wqes as usize;
        let book = std::mem::size_of::<Self>() + std::mem::size_of::<WqShared>() + (sq + rq) * 8; // the wr_id tables (the rings' own, shared with the CQs)
        QpFootprint {
            dma_bytes: dma,
            hw_bytes: hw,
            bookkeeping_bytes: book,
        }
    }

    // ------------------------------------------------------------------ fast path

    /// Opens a batch of typed send requests ([`SendBatch`](super::SendBatch): `send`,
    /// `send_inline`, `write`, ... then one `ring`), the fast entry beside
    /// [`QueuePair::post_send`]: same WQE bytes, no request decoding. Fails if the
    /// state forbids sending.
    #[inline(always)]
    pub fn post(&mut self) -> std::result::Result<super::SendBatch<'_, B>, PostError> {
        self.q.batch(&mut self.sq_slots)
    }

    /// Posts one SEND of the gather entry `sge` and rings its doorbell: the same as
    /// `post()`, `send(wr_id, sge, flags)`, `ring()` (same WQE, doorbell and errors),
    /// written as one straight path for the single request.
    ///
    /// Allocates nothing, takes no lock, makes no system call.
    #[inline(always)]
    pub fn send(
        &mut self,
        wr_id: u64,
        sge: &Sge,
        flags: SendFlags,
    ) -> std::result::Result<(), PostError> {
        let one = super::post::OneData::Sge(sge);
        self.q.send_one(&mut self.sq_slots, wr_id, one, flags)
    }

    /// Posts one SEND of `data` copied into the WQE (`IBV_SEND_INLINE`) and rings its
    /// doorbell: the same as `post()`, `send_inline(wr_id, data, flags)`, `ring()`
    /// (same WQE, doorbell and errors), written as one straight path for the single
    /// request.
    ///
    /// Allocates nothing, takes no lock, makes no system call.
    #[inline(always)]
    pub fn send_inline(
        &mut self,
        wr_id: u64,
        data: &[u8],
        flags: SendFlags,
    ) -> std::result::Result<(), PostError> {
        super::post::send_one_inline(self, wr_id, data, flags)
    }

    /// The straight path of [`QueuePair::send_inline`] alone: when it applies (the
    /// completions of every earlier WQE taken, the payload of 1 to the one-request
    /// entry's limit of bytes, room at the position), posts the SEND and rings its
    /// doorbell, exactly as `send_inline` does, and returns `true`; otherwise writes
    /// nothing and returns `false`, and the caller posts the request through
    /// `send_inline` or `post_send` (which then give its result or error). For
    /// callers with a straight path of their own (the C `ibv_post_send`), which keep
    /// nothing live across an out-of-line call.
    ///
    /// Allocates nothing, takes no lock, makes no system call.
    #[inline(always)]
    pub fn try_send_inline(&mut self, wr_id: u64, data: &[u8], flags: SendFlags) -> bool {
        super::post::try_send_one_inline(self, wr_id, data, flags)
    }

    /// Posts a list of send requests and rings one doorbell for them (the BlueFlame
    /// copy when the list is one WQE that fits). On an error the requests before the
    /// failed one are posted; the error says which one failed and why.
    ///
    /// Requests of the typed entries' shapes (SEND, SEND with immediate, RDMA WRITE,
    /// RDMA WRITE with immediate of one gather entry or one inline part, on a
    /// connected QP) are written by those entries ([`QueuePair::send_inline`],
    /// [`QueuePair::send`], [`SendBatch`](super::SendBatch)), the others by the
    /// general writer: the same WQEs, doorbell and errors either way.
    ///
    /// Allocates nothing, takes no lock, makes no system call.
    #[inline]
    pub fn post_send(&mut self, wrs: &[SendWr<'_>]) -> std::result::Result<(), BadWr> {
        super::post::post_send(self, wrs)
    }

    /// Posts a list of receive requests and publishes them (doorbell record only; the
    /// RQ has no MMIO doorbell). On an error the requests before the failed one are
    /// posted.
    ///
    /// Allocates nothing, takes no lock, makes no system call.
    #[inline]
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), BadWr> {
        self.q.post_recv(wrs)
    }

    // ---------------------------------------------------------------- control path

    /// RESET→INIT on `port` with remote `access` rights, P_Key index 0.
    pub fn to_init(&mut self, port: u8, access: AccessFlags) -> Result<()> {
        self.modify(
            QpState::Init,
            &QpAttr::new().port(port).pkey_index(0).access(access),
        )
    }

    /// UD RESET→INIT: port, P_Key index and Q_Key.
    pub fn to_init_ud(&mut self, attr: &UdInitAttr) -> Result<()> {
        self.modify(QpState::Init, &attr.into())
    }

    /// UD INIT→RTR (no attribute is required).
    pub fn to_rtr_ud(&mut self) -> Result<()> {
        self.modify(QpState::Rtr, &QpAttr::new())
    }

    /// UD RTR→RTS with the first PSN sent.
    pub fn to_rts_ud(&mut self, sq_psn: u32) -> Result<()> {
        self.modify(QpState::Rts, &QpAttr::new().sq_psn(sq_psn))
    }

    /// The transport of the QP.
    pub fn qp_type(&self) -> QpType {
        self.q.sq_cfg.qp_type
    }

    /// UD: the largest message a send may carry (the port MTU); `u32::MAX` on RC.
    pub fn max_message(&self) -> u32 {
        self.q.max_msg
    }

    /// INIT→RTR.
    pub fn to_rtr(&mut self, attr: &RtrAttr) -> Result<()> {
        self.modify(QpState::Rtr, &attr.into())
    }

    /// RTR→RTS.
    pub fn to_rts(&mut self, attr: &RtsAttr) -> Result<()> {
        self.modify(QpState::Rts, &attr.into())
    }

    /// Any state → ERR: outstanding requests complete with `WrFlushErr`.
    pub fn to_error(&mut self) -> Result<()> {
        self.modify(QpState::Err, &QpAttr::new())
    }

    /// Any state → RESET. The rings start over, so the QP's completions still in its
    /// CQs must go first: polled, or removed with
    /// [`CompletionQueue::discard_completions_of`](super::CompletionQueue::discard_completions_of)
    /// (what libmlx5's `ibv_modify_qp` to RESET does, and the drop-in's with it).
    pub fn reset(&mut self) -> Result<()> {
        self.modify(QpState::Reset, &QpAttr::new())
    }

    /// Moves the QP to `to` with `attr` (`ibv_modify_qp`): checks that a transition
    /// leads there, that `attr` has every attribute it requires and none it does not
    /// accept, the value ranges, the path MTU against the port's active MTU and the
    /// READ/atomic depths against the device; then issues the modify command.
    pub fn modify(&mut self, to: QpState, attr: &QpAttr) -> Result<()> {
        let ctx = self.pd.context();
        let t = Transition::between(self.q.state, to).ok_or(Error::InvalidTransition {
            from: self.q.state,
            to,
        })?;
        let ty = self.q.qp_type();
        attr.check_for(t, ty)?;
        let port = attr.port.unwrap_or(self.port);
        if attr.port.is_some() {
            let n = ctx.cap(g::num_ports).max(1);
            if u64::from(port) > n {
                return Err(Error::AttributeOutOfRange {
                    attribute: super::Attribute::Port,
                    value: port.into(),
                    max: n,
                });
            }
        }
        if let Some(mtu) = attr.path_mtu {
            let active = ctx.active_mtu(port)?;
            if mtu > active {
                return Err(Error::PathMtuTooLarge {
                    requested: mtu,
                    active,
                    port,
                });
            }
        }
        let depth = |attribute, v: Option<u8>, log: u64| -> Result<()> {
            let max = 1u64 << log.min(16);
            match v {
                Some(v) if u64::from(v) > max => Err(Error::AttributeOutOfRange {
                    attribute,
                    value: v.into(),
                    max,
                }),
                _ => Ok(()),
            }
        };
        depth(
            super::Attribute::MaxRdAtomic,
            attr.max_rd_atomic,
            ctx.cap(g::log_max_ra_req_qp),
        )?;
        depth(
            super::Attribute::MaxDestRdAtomic,
            attr.max_dest_rd_atomic,
            ctx.cap(g::log_max_ra_res_qp),
        )?;
        if let Some(p) = attr.pkey_index {
            if p != 0 {
                return Err(Error::AttributeOutOfRange {
                    attribute: super::Attribute::PkeyIndex,
                    value: p.into(),
                    max: 0,
                });
            }
        }
        // UD messages are one packet: at most the port's active MTU.
        let ud_mtu = if ty == QpType::Ud && (t == Transition::ResetToInit || attr.port.is_some()) {
            Some(ctx.active_mtu(port)?.bytes())
        } else {
            None
        };
        let input = self.modify_input(t, attr, port);
        let hw = hw_transition(t);
        exec(ctx, &input, hw.out_layout().size())?;
        if let Some(m) = ud_mtu {
            self.q.max_msg = m;
        }
        if let Some(p) = attr.port {
            self.port = p;
        }
        if let Some(p) = attr.pkey_index {
            self.pkey_index = p;
        }
        self.q.state = t.target();
        // The typed entries check the new state (and the room) before their next
        // request.
        self.sq_slots.close();
        if t == Transition::ToReset {
            self.q.restart()?;
        }
        Ok(())
    }

    fn modify_input(&self, t: Transition, attr: &QpAttr, port: u8) -> Vec<u8> {
        let mut opt = 0u32;
        let access_mask = if self.q.qp_type() == QpType::Uc {
            // UC carries no READ or atomic: only the write right is a parameter.
            MLX5_QP_OPTPAR_RWE
        } else {
            MLX5_QP_OPTPAR_RRE | MLX5_QP_OPTPAR_RAE | MLX5_QP_OPTPAR_RWE
        };
        let hw = hw_transition(t);
        let mut input = transition_input(hw, self.qpn, 0);
        if !hw.has_qpc() {
            return input;
        }
        let q = |f| in_command(f);
        let p = |f| primary_path(f);
        let set = |input: &mut Vec<u8>, f: ferroverbs_hw::Field, v: u64| f.set(input, v);
        if hw == QpTransition::Rst2Init {
            // The Q counter set, as Linux names it at RST2INIT.
            set(&mut input, q(qpc::counter_set_id), self.counter_set.into());
        }
        if let Some(a) = attr.access {
            set(
                &mut input,
                q(qpc::rre),
                a.contains(AccessFlags::REMOTE_READ).into(),
            );
            set(
                &mut input,
                q(qpc::rwe),
                a.contains(AccessFlags::REMOTE_WRITE).into(),
            );
            let rae = a.contains(AccessFlags::REMOTE_ATOMIC);
            set(&mut input, q(qpc::rae), rae.into());
            if rae {
                // MLX5_QPC_ATOMIC_MODE_IB_SPEC.
                set(&mut input, q(qpc::atomic_mode), 1);
            }
            opt |= access_mask;
        }
        if let Some(pk) = attr.pkey_index {
            set(&mut input, p(ads::pkey_index), pk.into());
            opt |= MLX5_QP_OPTPAR_PKEY_INDEX;
        }
        if attr.port.is_some() {
            opt |= MLX5_QP_OPTPAR_PRI_PORT;
        }
        set(&mut input, p(ads::vhca_port_num), port.into());
        if let Some(v) = attr.min_rnr_timer {
            set(&mut input, q(qpc::min_rnr_nak), v.into());
            opt |= MLX5_QP_OPTPAR_RNR_TIMEOUT;
        }
        if let Some(av) = attr.av {
            self.set_path(&mut input, &av, attr.dest_qpn);
            opt |= MLX5_QP_OPTPAR_PRIMARY_ADDR_PATH;
        }
        if let Some(m) = attr.path_mtu {
            set(&mut input, q(qpc::mtu), m as u64);
            let log_msg = self.pd.context().cap(g::log_max_msg);
            set(&mut input, q(qpc::log_msg_max), log_msg);
        }
        if let Some(v) = attr.dest_qpn {
            set(&mut input, q(qpc::remote_qpn), v.into());
            self.q
                .shared
                .dest_qpn
                .store(v & 0x00ff_ffff, Ordering::Relaxed);
        }
        if let Some(v) = attr.rq_psn {
            set(&mut input, q(qpc::next_rcv_psn), v.into());
        }
        if let Some(v) = attr.max_dest_rd_atomic {
            set(&mut input, q(qpc::log_rra_max), ceil_log2(v).into());
            opt |= MLX5_QP_OPTPAR_RRA_MAX;
        }
        if let Some(v) = attr.sq_psn {
            set(&mut input, q(qpc::next_send_psn), v.into());
        }
        if let Some(v) = attr.timeout {
            set(&mut input, p(ads::ack_timeout), v.into());
            opt |= MLX5_QP_OPTPAR_ACK_TIMEOUT;
        }
        if let Some(v) = attr.retry_cnt {
            set(&mut input, q(qpc::retry_count), v.into());
            opt |= MLX5_QP_OPTPAR_RETRY_COUNT;
        }
        if let Some(v) = attr.rnr_retry {
            set(&mut input, q(qpc::rnr_retry), v.into());
            opt |= MLX5_QP_OPTPAR_RNR_RETRY;
        }
        if let Some(v) = attr.max_rd_atomic {
            set(&mut input, q(qpc::log_sra_max), ceil_log2(v).into());
            opt |= MLX5_QP_OPTPAR_SRA_MAX;
        }
        if self.q.sq_cfg.qp_type == QpType::Ud {
            // UD (Linux `__mlx5_ib_modify_qp`): the Q_Key, the P_Key index and the port
            // where the transition takes them; the context's MTU is 4096 with
            // log_msg_max 12 ("MTU at the UD QP is actually the port's MTU").
            if let Some(k) = attr.qkey {
                set(&mut input, q(qpc::q_key), k.into());
            }
            set(&mut input, q(qpc::mtu), Mtu::Mtu4096 as u64);
            set(&mut input, q(qpc::log_msg_max), 12);
            let qkey = if attr.qkey.is_some() {
                MLX5_QP_OPTPAR_Q_KEY
            } else {
                0
            };
            let pkey = if attr.pkey_index.is_some() {
                MLX5_QP_OPTPAR_PKEY_INDEX
            } else {
                0
            };
            let opt = match t {
                Transition::InitToInit => {
                    qkey | pkey
                        | if attr.port.is_some() {
                            MLX5_QP_OPTPAR_PRI_PORT
                        } else {
                            0
                        }
                }
                Transition::InitToRtr | Transition::SqdToRts => qkey | pkey,
                Transition::RtrToRts | Transition::RtsToRts => qkey,
                _ => 0,
            };
            ferroverbs_hw::control::qp::rst2init_qp_in::opt_param_mask.set(&mut input, opt.into());
            return input;
        }
        match t {
            Transition::ResetToInit => {
                set(&mut input, q(qpc::pm_state), 3);
                opt = 0;
            }
            Transition::InitToRtr => {
                // Linux asks for an ACK request every 2^8 packets... per message here.
                set(&mut input, q(qpc::log_ack_req_freq), 0);
                opt &= access_mask | MLX5_QP_OPTPAR_PKEY_INDEX;
            }
            Transition::RtrToRts | Transition::RtsToRts => {
                opt &= access_mask | MLX5_QP_OPTPAR_RNR_TIMEOUT;
            }
            Transition::InitToInit => {
                opt &= access_mask | MLX5_QP_OPTPAR_PKEY_INDEX | MLX5_QP_OPTPAR_PRI_PORT;
            }
            _ => {}
        }
        ferroverbs_hw::control::qp::rst2init_qp_in::opt_param_mask.set(&mut input, opt.into());
        input
    }

    /// Writes the primary address path of a RoCE v2 peer.
    fn set_path(&self, input: &mut [u8], av: &AddressVector, dest_qpn: Option<u32>) {
        let p = |f| primary_path(f);
        p(ads::pkey_index).set(input, self.pkey_index.into());
        p(ads::src_addr_index).set(input, av.sgid_index.into());
        let hop = if av.hop_limit < 2 { 64 } else { av.hop_limit };
        p(ads::hop_limit).set(input, hop.into());
        p(ads::tclass).set(input, av.traffic_class.into());
        p(ads::dscp).set(input, u64::from(av.traffic_class >> 2));
        p(ads::ecn).set(input, u64::from(av.traffic_class & 3));
        p(ads::flow_label).set(input, av.flow_label.into());
        if let Some(dst) = p(ads::rgid_rip).bytes_mut(input) {
            dst.copy_from_slice(&av.dgid);
        }
        let m = av.dmac;
        p(ads::rmac_47_32).set(input, u64::from(u16::from_be_bytes([m[0], m[1]])));
        p(ads::rmac_31_0).set(
            input,
            u64::from(u32::from_be_bytes([m[2], m[3], m[4], m[5]])),
        );
        p(ads::eth_prio).set(input, u64::from(av.sl & 7));
        p(ads::sl).set(input, u64::from(av.sl & 7));
        let sport = av.udp_sport.unwrap_or_else(|| {
            // Linux mlx5_ib `mlx5_set_path_udp_sport`: the path's flow label when it
            // has one, else `rdma_calc_flow_label(lqpn, rqpn)`; then
            // `rdma_flow_label_to_udp_sport`.
            let fl = if av.flow_label != 0 {
                av.flow_label
            } else {
                flow_label_from_qpns(self.qpn, dest_qpn.unwrap_or(0))
            };
            udp_sport_from_flow_label(fl)
        });
        p(ads::udp_sport).set(input, sport.into());
    }

    /// The state and attributes the device holds for the QP (`QUERY_QP`).
    pub fn query(&self) -> Result<QpInfo> {
        let ctx = self.pd.context();
        let mut input = new_input(Opcode::QueryQp, 0, query_qp_in::SIZE);
        query_qp_in::qpn.set(&mut input, self.qpn.into());
        let npages = (self.q.geo.rq_bytes() + self.q.geo.sq_bytes()).div_ceil(PAGE_SIZE);
        let out_len = len_with_flex64(&query_qp_out::LAYOUT, npages).unwrap_or(query_qp_out::SIZE);
        let out = exec(ctx, &input, out_len)?;
        let base = query_qp_out::qpc.bit;
        let q = |f: ferroverbs_hw::Field| f.at(base).get(&out);
        let p = |f: ferroverbs_hw::Field| f.at(base + qpc::primary_address_path.bit).get(&out);
        let state = QpState::from_qpc(q(qpc::state) as u8).ok_or(Error::Device(
            crate::Error::MalformedOutput {
                opcode: crate::Opcode(Opcode::QueryQp.value()),
                what: "unknown QP state",
            },
        ))?;
        let mut access = AccessFlags::empty();
        if q(qpc::rre) == 1 {
            access |= AccessFlags::REMOTE_READ;
        }
        if q(qpc::rwe) == 1 {
            access |= AccessFlags::REMOTE_WRITE;
        }
        if q(qpc::rae) == 1 {
            access |= AccessFlags::REMOTE_ATOMIC;
        }
        let mut dgid = [0u8; 16];
        if let Some(src) = ads::rgid_rip
            .at(base + qpc::primary_address_path.bit)
            .bytes(&out)
        {
            dgid.copy_from_slice(src);
        }
        let hi = (p(ads::rmac_47_32) as u16).to_be_bytes();
        let lo = (p(ads::rmac_31_0) as u32).to_be_bytes();
        let pow = |log: u64| -> u8 { 1u8.checked_shl(log as u32).unwrap_or(0) };
        Ok(QpInfo {
            qp_num: self.qpn,
            state,
            port: p(ads::vhca_port_num) as u8,
            pkey_index: p(ads::pkey_index) as u16,
            access,
            path_mtu: Mtu::from_ib(q(qpc::mtu) as u32),
            dest_qpn: q(qpc::remote_qpn) as u32,
            rq_psn: q(qpc::next_rcv_psn) as u32,
            sq_psn: q(qpc::next_send_psn) as u32,
            max_dest_rd_atomic: pow(q(qpc::log_rra_max)),
            max_rd_atomic: pow(q(qpc::log_sra_max)),
            min_rnr_timer: q(qpc::min_rnr_nak) as u8,
            timeout: p(ads::ack_timeout) as u8,
            retry_cnt: q(qpc::retry_count) as u8,
            rnr_retry: q(qpc::rnr_retry) as u8,
            av: AddressVector {
                dgid,
                sgid_index: p(ads::src_addr_index) as u8,
                dmac: [hi[0], hi[1], lo[0], lo[1], lo[2], lo[3]],
                hop_limit: p(ads::hop_limit) as u8,
                traffic_class: p(ads::tclass) as u8,
                flow_label: p(ads::flow_label) as u32,
                sl: p(ads::sl) as u8,
                udp_sport: Some(p(ads::udp_sport) as u16),
            },
            cap: self.q.geo.granted,
            qkey: q(qpc::q_key) as u32,
        })
    }

    /// Destroys the QP now and reports the result (dropping does the same and only
    /// logs a failure).
    pub fn destroy(mut self) -> Result<()> {
        self.live = false;
        self.release()
    }

    fn release(&self) -> Result<()> {
        let ctx = self.pd.context();
        let mut input = new_input(Opcode::DestroyQp, 0, destroy_qp_in::SIZE);
        destroy_qp_in::qpn.set(&mut input, self.qpn.into());
        let r = exec(ctx, &input, destroy_qp_out::SIZE).map(|_| ());
        self.q.shared.kill();
        let r2 = match self.own_uar {
            true => dealloc_uar(ctx, self.uar),
            false => Ok(()),
        };
        // The counter set goes after the QP that counts into it.
        let r3 = match self.counter_set {
            0 => Ok(()),
            set => ctx.dealloc_q_counter(set),
        };
        r.and(r2).and(r3)
    }
}

impl<B: Bus> Drop for QueuePair<'_, B> {
    fn drop(&mut self) {
        if self.live {
            if let Err(e) = self.release() {
                tracing::warn!(qpn = self.qpn, error = %e, "DESTROY_QP failed");
            }
        }
        // Then the fields: the rings and buffer (unmapped and freed after the QP is
        // gone), and the CQ shares (possibly DESTROY_CQ).
    }
}

/// Host memory a QP uses (see [`QueuePair::footprint`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpFootprint {
    /// DMA memory: the rings and the doorbell record, in whole pages.
    pub dma_bytes: usize,
    /// Bytes the hardware format requires: the rings and the 8-byte doorbell record.
    pub hw_bytes: usize,
    /// Driver bookkeeping outside the DMA memory.
    pub bookkeeping_bytes: usize,
}

fn hw_transition(t: Transition) -> QpTransition {
    match t {
        Transition::ResetToInit => QpTransition::Rst2Init,
        Transition::InitToInit => QpTransition::Init2Init,
        Transition::InitToRtr => QpTransition::Init2Rtr,
        Transition::RtrToRts => QpTransition::Rtr2Rts,
        Transition::RtsToRts => QpTransition::Rts2Rts,
        Transition::SqdToRts => QpTransition::Sqd2Rts,
        Transition::ToErr => QpTransition::ToErr,
        Transition::ToReset => QpTransition::ToRst,
    }
}

//! The send queue ring writer (`mlx5-datapath.md` §1, §2, §5, §6, §8.1).
//!
//! The SQ is a ring of `wqe_cnt` 64-byte WQEBBs (a power of two). `cur_post`, a 16-bit
//! counter of WQEBBs, is both the WQE index written into each control segment and the
//! value of the send doorbell record; WQEBB `k` of the WQE at index `i` lives in slot
//! `(i + k) & (wqe_cnt - 1)`. [`SendQueue::post`] writes one WQE segment by segment the
//! way rdma-core's `_mlx5_post_send` does and advances `cur_post` by `ceil(DS / 4)`;
//! [`SendQueue::ring_doorbell`] then publishes everything posted since the last
//! doorbell:
//!
//! 1. [`Bus::wmb`]: the WQE stores before the doorbell record;
//! 2. doorbell record word [`MLX5_SND_DBR`](ferroverbs_hw::datapath::dbr::MLX5_SND_DBR)
//!    = BE32(`cur_post & 0xffff`);
//! 3. [`Bus::wmb`] (rdma-core `mmio_wc_start`; the kernel's second `wmb`);
//! 4. the 8-byte doorbell (the first 8 bytes of the last WQE's control segment) or, when
//!    [`use_blueflame`] says so, the whole last WQE in 64-byte blocks, at
//!    `bfreg + offset`;
//! 5. `offset ^= buf_size`: consecutive doorbells alternate between the two halves of
//!    the BlueFlame register.
//!
//! rdma-core's `mmio_flush_writes` (an `sfence` after the write-combining stores) has no
//! [`Bus`] operation: flushing write-combined MMIO is the bus implementation's job, and
//! a bus that lets the driver store doorbells directly ([`Bus::direct_reg`]) is one
//! whose stores need no flush (memory, or VFIO's uncached BAR0).

use super::mem::{DoorbellWord, QueueMem};
use super::{GeometryError, PostError, Sge};
use ferroverbs_hw::datapath::dbr::sq_counter;
use ferroverbs_hw::datapath::uar::{bf_buf_size, bfreg_offset, uar_bar_offset};
use ferroverbs_hw::datapath::wqe::{
    inline_ds, wqebbs_for_ds, WqeAv, MAX_WQE_DS, MLX5_INLINE_SEG, MLX5_OPCODE_ATOMIC_CS,
    MLX5_OPCODE_ATOMIC_FA, MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_RDMA_WRITE,
    MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_SEND, MLX5_OPCODE_SEND_IMM, MLX5_OPCODE_SEND_INVAL,
    MLX5_SEND_WQE_BB, MLX5_SEND_WQE_DS, MLX5_WQE_CTRL_CQ_UPDATE, MLX5_WQE_CTRL_FENCE,
    MLX5_WQE_CTRL_SOLICITED,
};
use ferroverbs_hw::Bus;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

mod fast;
mod umr;
pub use fast::{DoorbellRegs, PendingDoorbell, SqCursor, WqeSlots};
pub use umr::{UMR_MARK_BIND, UMR_MARK_LOCAL_INV};

/// Largest SQ in WQEBBs for which 16-bit counter differences stay unambiguous
/// (`qpc.log_sq_size` cannot describe a larger one anyway).
pub const MAX_SQ_WQEBBS: u32 = 1 << 15;

/// Size of the ctrl segment and of every other segment unit.
const DS: usize = MLX5_SEND_WQE_DS;
/// Bytes of one WQEBB.
const BB: usize = MLX5_SEND_WQE_BB;
/// rdma-core's `MLX5_ATOMIC_SIZE`: the local buffer of an atomic is always 8 bytes.
const ATOMIC_SIZE: u32 = 8;

/// The transport of the QP, which decides the segments a WQE may carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpType {
    /// Reliable connected: every operation.
    Rc,
    /// Unreliable connected: SEND and RDMA WRITE.
    Uc,
    /// Unreliable datagram: SEND only, each with an address vector.
    Ud,
}

/// A remote buffer: address and rkey.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteAddr {
    /// Remote virtual address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// The operation of a send work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// SEND.
    Send,
    /// SEND with immediate: `imm` goes on the wire big-endian.
    SendImm {
        /// The immediate data.
        imm: u32,
    },
    /// SEND with invalidate of `rkey` at the responder.
    SendInv {
        /// The rkey to invalidate.
        rkey: u32,
    },
    /// RDMA WRITE.
    RdmaWrite {
        /// The destination.
        remote: RemoteAddr,
    },
    /// RDMA WRITE with immediate.
    RdmaWriteImm {
        /// The destination.
        remote: RemoteAddr,
        /// The immediate data.
        imm: u32,
    },
    /// RDMA READ into the gather list.
    RdmaRead {
        /// The source.
        remote: RemoteAddr,
    },
    /// Atomic compare and swap of the 8 bytes at `remote`; the old value lands in the
    /// first gather entry.
    AtomicCas {
        /// The target.
        remote: RemoteAddr,
        /// The value compared with.
        compare: u64,
        /// The value swapped in.
        swap: u64,
    },
    /// Atomic fetch and add.
    AtomicFa {
        /// The target.
        remote: RemoteAddr,
        /// The value added.
        add: u64,
    },
}

impl SendOp {
    /// The send opcode of the control segment.
    pub fn opcode(&self) -> u8 {
        match self {
            SendOp::Send => MLX5_OPCODE_SEND,
            SendOp::SendImm { .. } => MLX5_OPCODE_SEND_IMM,
            SendOp::SendInv { .. } => MLX5_OPCODE_SEND_INVAL,
            SendOp::RdmaWrite { .. } => MLX5_OPCODE_RDMA_WRITE,
            SendOp::RdmaWriteImm { .. } => MLX5_OPCODE_RDMA_WRITE_IMM,
            SendOp::RdmaRead { .. } => MLX5_OPCODE_RDMA_READ,
            SendOp::AtomicCas { .. } => MLX5_OPCODE_ATOMIC_CS,
            SendOp::AtomicFa { .. } => MLX5_OPCODE_ATOMIC_FA,
        }
    }
}

/// The data part of a send work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendData<'a> {
    /// A gather list; zero-length entries are skipped.
    Gather(&'a [Sge]),
    /// Bytes copied into the WQE (`IBV_SEND_INLINE`), packed back to back.
    Inline(&'a [&'a [u8]]),
}

/// Send flags (`IBV_SEND_SIGNALED`, `IBV_SEND_SOLICITED`, `IBV_SEND_FENCE`), with
/// the bits of `enum ibv_send_flags` (FENCE 1, SIGNALED 2, SOLICITED 4), so that a
/// C request's flags are one mask ([`SendFlags::from_verbs`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendFlags(u8);

impl SendFlags {
    /// No flags.
    pub const NONE: SendFlags = SendFlags(0);
    /// Produce a CQE on success.
    pub const SIGNALED: SendFlags = SendFlags(2);
    /// Set the solicited-event bit.
    pub const SOLICITED: SendFlags = SendFlags(4);
    /// Wait for earlier READs and atomics before this WQE.
    pub const FENCE: SendFlags = SendFlags(1);

    /// The flags of the `ibv_send_flags` bits `bits` (`IBV_SEND_FENCE`,
    /// `IBV_SEND_SIGNALED`, `IBV_SEND_SOLICITED`; the other bits, such as
    /// `IBV_SEND_INLINE`, are not flags of the WQE and are ignored).
    #[inline(always)]
    pub const fn from_verbs(bits: u32) -> SendFlags {
        SendFlags((bits & 7) as u8)
    }

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: SendFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The flags of `self` and of `other` (`|`, usable in constants).
    pub const fn union(self, other: SendFlags) -> SendFlags {
        SendFlags(self.0 | other.0)
    }
}

impl core::ops::BitOr for SendFlags {
    type Output = SendFlags;
    fn bitor(self, rhs: SendFlags) -> SendFlags {
        SendFlags(self.0 | rhs.0)
    }
}

/// The destination of a UD send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdAddress<'a> {
    /// The address vector prebuilt for the address handle.
    pub av: &'a WqeAv,
    /// Destination QPN.
    pub remote_qpn: u32,
    /// Destination Q_Key.
    pub remote_qkey: u32,
}

/// One send work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// Returned with the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// The data part.
    pub data: SendData<'a>,
    /// Flags.
    pub flags: SendFlags,
    /// The destination of a UD send; `None` on connected QPs.
    pub ud: Option<UdAddress<'a>>,
}

/// The BlueFlame register a QP rings (`mlx5dv_qp.bf`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlueFlameReg {
    /// BAR0 offset of the register: `uar_bar_offset(uar) + bfreg_offset(k, bf_reg_size)`.
    pub reg: usize,
    /// Size of each half, `bf_reg_size / 2`, or 0 for a register without BlueFlame
    /// (bfreg 0, or a device without write combining): doorbells then always go to
    /// `reg` itself.
    pub buf_size: usize,
    /// The register's index (rdma-core `uuarn`); 0 never uses BlueFlame.
    pub index: u32,
}

/// The BlueFlame register a QP BlueFlames through in the UAR it owns: register 1,
/// never 0. rdma-core's mlx5 gives register 0 no BlueFlame buffer (`mlx5.c`
/// `mlx5_init_context`: `buf_size = bf_reg_size / 2` only `if (bfi)`), and Linux
/// mlx5_ib hands register 0 out only as the doorbell-only fallback (`qp.c`
/// `alloc_bfreg`, `NUM_NON_BLUE_FLAME_BFREGS = 1`); the BlueFlame ones start at 1.
pub const BLUEFLAME_BFREG: usize = 1;

impl BlueFlameReg {
    /// BlueFlame through register [`BLUEFLAME_BFREG`] of UAR `uar`, its two halves
    /// alternating.
    pub const fn blueflame(uar: u32, bf_reg_size: usize) -> Self {
        BlueFlameReg {
            reg: uar_bar_offset(uar) + bfreg_offset(BLUEFLAME_BFREG, bf_reg_size),
            buf_size: bf_buf_size(bf_reg_size),
            index: BLUEFLAME_BFREG as u32,
        }
    }

    /// Plain 8-byte doorbells to register 0 of UAR `uar` (rdma-core `uuarn` 0).
    pub const fn doorbell_only(uar: u32, bf_reg_size: usize) -> Self {
        BlueFlameReg {
            reg: uar_bar_offset(uar) + bfreg_offset(0, bf_reg_size),
            buf_size: 0,
            index: 0,
        }
    }
}

/// How a [`SendQueue`] is laid out and behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqConfig {
    /// Transport.
    pub qp_type: QpType,
    /// The QP number written in every control segment.
    pub qpn: u32,
    /// Ring size in WQEBBs: a power of two, at most [`MAX_SQ_WQEBBS`].
    pub wqe_cnt: u32,
    /// Largest gather list (`max_send_sge`).
    pub max_sge: u32,
    /// Largest inline payload (`max_inline_data` of the QP, from its sizing).
    pub max_inline: u32,
    /// Signal every WQE (`sq_sig_all`).
    pub sig_all: bool,
    /// The BlueFlame register.
    pub bf: BlueFlameReg,
    /// Never BlueFlame (rdma-core `MLX5_SHUT_UP_BF`).
    pub shut_up_bf: bool,
    /// BlueFlame non-inline WQEs too (rdma-core `prefer_bf`, default on).
    pub prefer_bf: bool,
}

/// Where [`SendQueue::post`] put a WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostedWqe {
    /// The WQE index: the WQEBB counter of its first block, as in its control segment.
    pub index: u16,
    /// Its size in 16-byte units.
    pub ds: u8,
    /// WQEBBs it occupies.
    pub wqebbs: u16,
    /// Whether its data part is inline.
    pub inline: bool,
}

/// What [`SendQueue::ring_doorbell`] wrote to the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Doorbell {
    /// An 8-byte doorbell of `value` at BAR0 offset `offset`.
    Db {
        /// BAR0 offset.
        offset: usize,
        /// The value passed to [`Bus::write64`].
        value: u64,
    },
    /// A BlueFlame copy of `len` bytes to BAR0 offset `offset`.
    BlueFlame {
        /// BAR0 offset.
        offset: usize,
        /// Bytes copied (whole WQEBBs).
        len: usize,
    },
}

/// rdma-core's BlueFlame decision (`post_send_db`, `mlx5-datapath.md` §6.2): copy the
/// WQE through the BlueFlame register only when BlueFlame is not shut up, exactly one
/// WR was posted, the register is not bfreg 0, the WQE is inline or BlueFlame is
/// preferred, and its `ds` is more than 1 and fits half the register
/// (`ds <= buf_size / 16`).
pub fn use_blueflame(
    shut_up_bf: bool,
    nreq: u32,
    bf: &BlueFlameReg,
    inline: bool,
    prefer_bf: bool,
    ds: u8,
) -> bool {
    !shut_up_bf
        && nreq == 1
        && bf.index != 0
        && (inline || prefer_bf)
        && ds > 1
        && usize::from(ds) <= bf.buf_size / 16
}

/// The WQEs posted since the last doorbell.
#[derive(Clone, Copy, Debug, Default)]
struct Pending {
    nreq: u32,
    last: LastWqe,
}

/// A send queue: the WQEBB ring, its doorbell record word and its BlueFlame register.
///
/// `M` is the ring memory ([`QueueMem`], at least `wqe_cnt * 64` bytes; only that
/// prefix is used: for a QP whose buffer starts with its RQ, a
/// [`Region`](super::mem::Region) at the SQ offset) and `D` the QP doorbell record word
/// at [`MLX5_SND_DBR`](ferroverbs_hw::datapath::dbr::MLX5_SND_DBR).
pub struct SendQueue<M: QueueMem, D: DoorbellWord> {
    buf: M,
    dbr: D,
    cfg: SqConfig,
    ring_len: usize,
    mask: u32,
    /// WQEBB producer counter: the next WQE's index.
    cur_post: u16,
    /// WQEBB counter up to which WQEs have completed.
    tail: u16,
    /// Per slot: the `wr_id` of the WQE starting there: the one per-WR record. It may
    /// be shared with a completion queue consumer ([`SendQueue::with_wr_ids`]), which
    /// reads it when the WQE completes; where the WQE ends is read back from its own
    /// control segment by [`SendQueue::complete`] (the device never writes the SQ).
    wr_id: Arc<[AtomicU64]>,
    pending: Pending,
    /// The BlueFlame half in use: 0 or `bf.buf_size`.
    bf_offset: usize,
    /// Template of the control segment: `qpn << 8` (the DS is or-ed in per WQE).
    qpn_ds: u32,
    /// Template of the control segment: `fm_ce_se` of `sq_sig_all`.
    fm_ce_se: u8,
    /// Whether the lean writer of [`SendQueue::write_wqe`] applies: an RC queue (every
    /// operation valid, no address vector) that takes at least one gather entry.
    lean: bool,
    /// The largest DS a BlueFlame copy takes: `buf_size / 16` (at most 63), or 0 when
    /// the queue never uses BlueFlame (shut up, or register 0): the constant part of
    /// [`use_blueflame`], computed once.
    bf_max_ds: u8,
    /// The largest inline payload the typed entries write themselves: `max_inline`,
    /// bounded so that the WQE's DS fits even with a remote address segment
    /// (`fast::MAX_INLINE_FAST`).
    max_inline_fast: u32,
    /// `bf_max_ds - 1` (0 when it is 0): `2 <= ds <= bf_max_ds` is
    /// `ds - 2 < bf_span` (wrapping).
    bf_span: u8,
    /// The typed entries' template of the control segment's first 8 bytes:
    /// `MLX5_OPCODE_SEND << 32 | qpn << 8` (index and DS added per WQE).
    ctrl_send: u64,
    /// `ctrl_send` with a DS of 2 (a SEND of one gather entry): the batch's head
    /// template ([`SqCursor`], with the index and as its memory image).
    ctrl_send2: u64,
    /// The memory image of the control segment's bytes 8-15 with the `fm_ce_se` of
    /// `sq_sig_all` (flags and immediate added per WQE).
    ctrl_tail: u64,
    /// `ctrl_tail` with the `fm_ce_se` of each combination of [`SendFlags`] (as
    /// `FM_CE_SE`): the one-request entry's tail is one load.
    ctrl_tails: [u64; 8],
}

impl<M: QueueMem, D: DoorbellWord> SendQueue<M, D> {
    /// A send queue over `buf` and the doorbell record word `dbr`, which should be zero
    /// (as the QP's creation leaves them).
    pub fn new(buf: M, dbr: D, cfg: SqConfig) -> Result<Self, GeometryError> {
        let table = (0..cfg.wqe_cnt.min(MAX_SQ_WQEBBS))
            .map(|_| AtomicU64::new(0))
            .collect();
        Self::with_wr_ids(buf, dbr, cfg, table)
    }

    /// Like [`SendQueue::new`], with the per-slot `wr_id` table given (`wqe_cnt`
    /// entries): a table the caller shares with its completion path, so that each WR
    /// is recorded once, at post. The table survives a rebuild of the queue (e.g.
    /// after a QP reset).
    pub fn with_wr_ids(
        buf: M,
        dbr: D,
        cfg: SqConfig,
        wr_id: Arc<[AtomicU64]>,
    ) -> Result<Self, GeometryError> {
        if !cfg.wqe_cnt.is_power_of_two() || cfg.wqe_cnt > MAX_SQ_WQEBBS {
            return Err(GeometryError::BadCount {
                what: "SQ size in WQEBBs",
                count: cfg.wqe_cnt,
                max: MAX_SQ_WQEBBS,
            });
        }
        let ring_len = cfg.wqe_cnt as usize * BB;
        if buf.len() < ring_len {
            return Err(GeometryError::BufferTooShort {
                len: buf.len(),
                need: ring_len,
            });
        }
        if !cfg.bf.buf_size.is_multiple_of(BB) {
            return Err(GeometryError::BadSize {
                what: "BlueFlame buffer size",
                value: cfg.bf.buf_size,
            });
        }
        if wr_id.len() != cfg.wqe_cnt as usize {
            return Err(GeometryError::BadSize {
                what: "wr_id table length",
                value: wr_id.len(),
            });
        }
        Ok(SendQueue {
            buf,
            dbr,
            cfg,
            ring_len,
            mask: cfg.wqe_cnt - 1,
            cur_post: 0,
            tail: 0,
            wr_id,
            pending: Pending::default(),
            bf_offset: 0,
            qpn_ds: cfg.qpn << 8,
            fm_ce_se: if cfg.sig_all {
                MLX5_WQE_CTRL_CQ_UPDATE
            } else {
                0
            },
            lean: cfg.qp_type == QpType::Rc && cfg.max_sge >= 1,
            bf_max_ds: if cfg.shut_up_bf || cfg.bf.index == 0 {
                0
            } else {
                (cfg.bf.buf_size / 16).min(usize::from(MAX_WQE_DS)) as u8
            },
            max_inline_fast: cfg.max_inline.min(fast::MAX_INLINE_FAST),
            bf_span: 0,
            ctrl_send: (u64::from(MLX5_OPCODE_SEND) << 32) | u64::from(cfg.qpn << 8),
            ctrl_send2: (u64::from(MLX5_OPCODE_SEND) << 32) | u64::from(cfg.qpn << 8) | 2,
            ctrl_tail: (u64::from(if cfg.sig_all {
                MLX5_WQE_CTRL_CQ_UPDATE
            } else {
                0
            }) << 32)
                .to_be(),
            ctrl_tails: [0; 8],
        })
        .map(|mut sq: Self| {
            sq.bf_span = sq.bf_max_ds.saturating_sub(1);
            for (t, fm) in sq.ctrl_tails.iter_mut().zip(FM_CE_SE) {
                *t = sq.ctrl_tail | (u64::from(fm) << 32).to_be();
            }
            sq
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SqConfig {
        &self.cfg
    }

    /// The WQEBB producer counter: the index the next WQE gets.
    pub fn cur_post(&self) -> u16 {
        self.cur_post
    }

    /// WQEBBs posted and not yet completed.
    pub fn outstanding(&self) -> u32 {
        u32::from(self.cur_post.wrapping_sub(self.tail))
    }

    /// WQEBBs free for new WQEs.
    pub fn free(&self) -> u32 {
        self.cfg.wqe_cnt - self.outstanding()
    }

    /// The ring memory.
    pub fn mem(&self) -> &M {
        &self.buf
    }

    /// The per-slot `wr_id` table (see [`SendQueue::with_wr_ids`]).
    pub fn wr_ids(&self) -> &Arc<[AtomicU64]> {
        &self.wr_id
    }

    /// Bytes of the ring: `wqe_cnt * 64`.
    pub fn ring_len(&self) -> usize {
        self.ring_len
    }

    /// The BlueFlame half the next doorbell goes to (0 or `buf_size`).
    pub fn bf_offset(&self) -> usize {
        self.bf_offset
    }

    /// Builds one WQE for `wr` at `cur_post` and advances `cur_post` by its WQEBBs.
    /// The WQE reaches the device at the next [`SendQueue::ring_doorbell`].
    ///
    /// Checks everything first and writes nothing on error. Does not allocate.
    #[inline(always)]
    pub fn post(&mut self, wr: &SendWr<'_>) -> Result<PostedWqe, PostError> {
        let w = self.write_wqe(wr)?;
        self.pending = Pending {
            nreq: self.pending.nreq + 1,
            last: w,
        };
        Ok(PostedWqe {
            index: w.index,
            ds: w.ds,
            wqebbs: wqebbs_for_ds(w.ds),
            inline: w.inline,
        })
    }

    /// [`SendQueue::post`] without the pending-doorbell record: builds the WQE, records
    /// its `wr_id` (the one per-WR store of bookkeeping) and advances `cur_post`; the
    /// caller keeps the returned [`LastWqe`] of the last WQE of a list and passes it to
    /// [`SendQueue::doorbell`].
    ///
    /// The writer is template-based: one `match` decodes the operation (opcode,
    /// immediate, remote address, atomic segment), the QPN part of `qpn_ds` and the
    /// signal-all bit were computed at construction, the flags map to `fm_ce_se`
    /// through a table, and each segment is built in registers and written with one
    /// 16-byte store ([`QueueMem::write16`]). The ring end can only fall between
    /// 16-byte segments (it is a multiple of 64), so the wrap test is one compare per
    /// segment. A one-part inline payload (the common case) is measured and copied
    /// without a loop.
    ///
    /// The common shapes on an RC queue take a lean path with the same bytes: SEND,
    /// SEND with immediate, RDMA WRITE (with immediate) of one non-empty gather entry
    /// (one WQEBB, so no wrap test and one bounds-checked store of all its segments),
    /// or of one inline part of at most `max_inline` bytes whose WQEBBs do not cross
    /// the ring end. Everything else (and every error) goes through the general
    /// writer, out of line.
    #[inline(always)]
    pub fn write_wqe(&mut self, wr: &SendWr<'_>) -> Result<LastWqe, PostError> {
        match self.write_lean(wr) {
            Some(w) => Ok(w),
            None => self.write_wqe_general(wr),
        }
    }

    /// The lean path of [`SendQueue::write_wqe`] alone: writes the WQE and returns
    /// `Some` when `wr` has one of the common shapes and fits (see there); `None`,
    /// with nothing written, otherwise (then [`SendQueue::write_wqe`] decides, and
    /// reports any error).
    #[inline(always)]
    pub fn write_lean(&mut self, wr: &SendWr<'_>) -> Option<LastWqe> {
        if self.lean && wr.ud.is_none() {
            let (opcode, imm, remote) = match wr.op {
                SendOp::Send => (MLX5_OPCODE_SEND, 0, None),
                SendOp::SendImm { imm } => (MLX5_OPCODE_SEND_IMM, imm, None),
                SendOp::RdmaWrite { remote } => (MLX5_OPCODE_RDMA_WRITE, 0, Some(remote)),
                SendOp::RdmaWriteImm { remote, imm } => {
                    (MLX5_OPCODE_RDMA_WRITE_IMM, imm, Some(remote))
                }
                _ => return None,
            };
            let index = self.cur_post;
            let slot = (u32::from(index) & self.mask) as usize;
            let start = slot * BB;
            match wr.data {
                SendData::Gather([sge])
                    if sge.length != 0 && self.outstanding() < self.cfg.wqe_cnt =>
                {
                    // `struct mlx5_wqe_data_seg`: byte_count, lkey, addr.
                    let data = seg16(
                        (u64::from(sge.length) << 32) | u64::from(sge.lkey),
                        sge.addr,
                    );
                    let (ds, ctrl_head) = match remote {
                        None => {
                            let (head, ctrl) = self.ctrl(index, opcode, 2, wr.flags, imm);
                            self.buf.write_segs(start, &[ctrl, data]);
                            (2, head)
                        }
                        Some(r) => {
                            let (head, ctrl) = self.ctrl(index, opcode, 3, wr.flags, imm);
                            let raddr = seg16(r.addr, u64::from(r.rkey) << 32);
                            self.buf.write_segs(start, &[ctrl, raddr, data]);
                            (3, head)
                        }
                    };
                    return Some(self.finish(slot, wr.wr_id, index, ds, false, ctrl_head));
                }
                SendData::Inline([p])
                    if !p.is_empty() && p.len() <= self.cfg.max_inline as usize =>
                {
                    let len = p.len();
                    let hds = 1 + usize::from(remote.is_some());
                    let ds = hds + inline_ds(len);
                    let wqebbs = usize::from(wqebbs_for_ds(ds as u8));
                    if ds <= usize::from(MAX_WQE_DS)
                        && wqebbs as u32 <= self.free()
                        && start + wqebbs * BB <= self.ring_len
                    {
                        let ds = ds as u8;
                        let (ctrl_head, ctrl) = self.ctrl(index, opcode, ds, wr.flags, imm);
                        match remote {
                            None => self.buf.write_segs(start, &[ctrl]),
                            Some(r) => {
                                let raddr = seg16(r.addr, u64::from(r.rkey) << 32);
                                self.buf.write_segs(start, &[ctrl, raddr]);
                            }
                        }
                        // The header, then the payload from byte 4; the padding up to
                        // the next 16 bytes is left as it was.
                        let off = start + DS * hds;
                        self.buf
                            .write(off, &(len as u32 | MLX5_INLINE_SEG).to_be_bytes());
                        self.buf.write(off + 4, p);
                        return Some(self.finish(slot, wr.wr_id, index, ds, true, ctrl_head));
                    }
                }
                _ => {}
            }
        }
        None
    }

    /// The control segment (`mlx5dv_x86_set_ctrl_seg`) of the WQE at `index`: bytes
    /// 8-10 zero, `fm_ce_se` from the template and the flags. Returns its first 8
    /// bytes as [`Bus::write64`] takes them, and its 16 bytes.
    #[inline(always)]
    fn ctrl(&self, index: u16, opcode: u8, ds: u8, flags: SendFlags, imm: u32) -> (u64, [u8; 16]) {
        let fm_ce_se = self.fm_ce_se | FM_CE_SE[usize::from(flags.0 & 7)];
        let w0 = (u32::from(index) << 8) | u32::from(opcode);
        let w1 = self.qpn_ds | u32::from(ds);
        let ctrl_head = (u64::from(w0) << 32) | u64::from(w1);
        let ctrl_tail = (u64::from(fm_ce_se) << 32) | u64::from(imm);
        (ctrl_head, seg16(ctrl_head, ctrl_tail))
    }

    /// Records the WQE just written at `slot`: its `wr_id` (the one per-WR record,
    /// read by the completion path through a shared table and by `complete`; the
    /// WQE's end is its control segment's DS) and the new `cur_post`.
    #[inline(always)]
    fn finish(
        &mut self,
        slot: usize,
        wr_id: u64,
        index: u16,
        ds: u8,
        inline: bool,
        ctrl_head: u64,
    ) -> LastWqe {
        self.wr_id[slot].store(wr_id, Ordering::Relaxed);
        self.cur_post = index.wrapping_add(wqebbs_for_ds(ds));
        LastWqe {
            index,
            ds,
            inline,
            ctrl_head,
        }
    }

    /// [`SendQueue::write_wqe`] without its lean path, for every request: all operations, gather lists,
    /// multi-part inline data, address vectors, wrap-around, and the errors.
    #[inline(never)]
    pub fn write_wqe_general(&mut self, wr: &SendWr<'_>) -> Result<LastWqe, PostError> {
        // 0: no atomic segment, 1: compare-and-swap (16 bytes), 2: fetch-and-add (the
        // first 8 bytes only: rdma-core leaves `compare` as it was).
        let (opcode, imm, remote, atom, a, b, ud_ok) = match wr.op {
            SendOp::Send => (MLX5_OPCODE_SEND, 0, None, 0u8, 0, 0, true),
            SendOp::SendImm { imm } => (MLX5_OPCODE_SEND_IMM, imm, None, 0, 0, 0, true),
            SendOp::SendInv { rkey } => (MLX5_OPCODE_SEND_INVAL, rkey, None, 0, 0, 0, false),
            SendOp::RdmaWrite { remote } => {
                (MLX5_OPCODE_RDMA_WRITE, 0, Some(remote), 0, 0, 0, false)
            }
            SendOp::RdmaWriteImm { remote, imm } => (
                MLX5_OPCODE_RDMA_WRITE_IMM,
                imm,
                Some(remote),
                0,
                0,
                0,
                false,
            ),
            SendOp::RdmaRead { remote } => (MLX5_OPCODE_RDMA_READ, 0, Some(remote), 0, 0, 0, false),
            SendOp::AtomicCas {
                remote,
                compare,
                swap,
            } => (
                MLX5_OPCODE_ATOMIC_CS,
                0,
                Some(remote),
                1,
                swap,
                compare,
                false,
            ),
            SendOp::AtomicFa { remote, add } => {
                (MLX5_OPCODE_ATOMIC_FA, 0, Some(remote), 2, add, 0, false)
            }
        };
        let atomic = atom != 0;
        // READ and atomics write into the gather list; the rest are valid on UC.
        let writes_local = atomic || opcode == MLX5_OPCODE_RDMA_READ;
        let qp_type = self.cfg.qp_type;
        let valid = match qp_type {
            QpType::Rc => true,
            QpType::Uc => !writes_local,
            QpType::Ud => ud_ok,
        };
        if !valid {
            return Err(unsupported(opcode, qp_type));
        }
        if (qp_type == QpType::Ud) != wr.ud.is_some() {
            return Err(PostError::AddressMismatch);
        }

        // The size, segment by segment (§2.4).
        let mut ds = 1 + usize::from(remote.is_some()) + usize::from(atomic);
        if wr.ud.is_some() {
            ds += WqeAv::SIZE / DS;
        }
        let mut inline_len = 0;
        let inline = match wr.data {
            SendData::Gather(sges) => {
                if sges.len() > self.cfg.max_sge as usize {
                    return Err(self.too_many(sges.len()));
                }
                for s in sges {
                    ds += usize::from(s.length != 0);
                }
                false
            }
            SendData::Inline(parts) => {
                if parts.len() > self.cfg.max_sge as usize {
                    return Err(self.too_many(parts.len()));
                }
                let inline = !parts.is_empty();
                if inline && writes_local {
                    return Err(PostError::InlineNotAllowed { opcode });
                }
                inline_len = match parts {
                    [p] => p.len(),
                    _ => parts.iter().map(|p| p.len()).sum(),
                };
                if inline_len > self.cfg.max_inline as usize {
                    return Err(PostError::InlineTooLarge {
                        len: inline_len,
                        max: self.cfg.max_inline,
                    });
                }
                ds += inline_ds(inline_len);
                inline
            }
        };
        if ds > usize::from(MAX_WQE_DS) {
            return Err(PostError::WqeTooLarge { ds });
        }
        let ds = ds as u8;
        let wqebbs = wqebbs_for_ds(ds);
        let free = self.free();
        if u32::from(wqebbs) > free {
            return Err(PostError::QueueFull {
                needed: u32::from(wqebbs),
                free,
            });
        }

        // The segments, in order, wrapping at the ring end between them (§2.5).
        let index = self.cur_post;
        let slot = (u32::from(index) & self.mask) as usize;
        let start = slot * BB;
        let ring_len = self.ring_len;
        let buf = &self.buf;
        // The first WQEBB never straddles the ring end, so `start + 16 < ring_len`.
        let mut off = start + DS;

        if let Some(ud) = wr.ud {
            let mut av = *ud.av;
            av.set_ud_dest(ud.remote_qpn, ud.remote_qkey);
            buf.write(off, av.as_bytes());
            // ctrl + AV fill the first WQEBB: the data part starts in the next one.
            off = wrap(off + WqeAv::SIZE, ring_len);
        }
        if let Some(remote) = remote {
            // `struct mlx5_wqe_raddr_seg`: raddr, rkey, reserved.
            buf.write16(off, &seg16(remote.addr, u64::from(remote.rkey) << 32));
            off = wrap(off + DS, ring_len);
            if atom == 1 {
                buf.write16(off, &seg16(a, b));
                off = wrap(off + DS, ring_len);
            } else if atom == 2 {
                buf.write(off, &a.to_be_bytes());
                off = wrap(off + DS, ring_len);
            }
        }
        match wr.data {
            SendData::Gather(sges) => {
                for sge in sges {
                    if sge.length == 0 {
                        continue;
                    }
                    let len = if atomic { ATOMIC_SIZE } else { sge.length };
                    // `struct mlx5_wqe_data_seg`: byte_count, lkey, addr.
                    let head = (u64::from(len) << 32) | u64::from(sge.lkey);
                    buf.write16(off, &seg16(head, sge.addr));
                    off = wrap(off + DS, ring_len);
                }
            }
            SendData::Inline(parts) if inline_len > 0 => {
                // The header, then the payload packed from byte 4 and split at the ring
                // end; the padding up to the next 16 bytes is left as it was.
                buf.write(off, &(inline_len as u32 | MLX5_INLINE_SEG).to_be_bytes());
                let mut d = off + 4;
                if d + inline_len <= ring_len {
                    // The common case: the whole payload before the ring end.
                    if let [p] = parts {
                        buf.write(d, p);
                    } else {
                        for part in parts {
                            buf.write(d, part);
                            d += part.len();
                        }
                    }
                } else {
                    for part in parts {
                        let mut p: &[u8] = part;
                        while !p.is_empty() {
                            let n = p.len().min(ring_len - d);
                            buf.write(d, &p[..n]);
                            p = &p[n..];
                            d = wrap(d + n, ring_len);
                        }
                    }
                }
            }
            SendData::Inline(_) => {}
        }

        let (ctrl_head, ctrl) = self.ctrl(index, opcode, ds, wr.flags, imm);
        buf.write16(start, &ctrl);
        Ok(self.finish(slot, wr.wr_id, index, ds, inline, ctrl_head))
    }

    #[cold]
    fn too_many(&self, count: usize) -> PostError {
        PostError::TooManySges {
            count,
            max: self.cfg.max_sge,
        }
    }

    /// Publishes the WQEs posted since the last doorbell: doorbell record, then the
    /// 8-byte doorbell or BlueFlame copy of the last WQE (see the module
    /// documentation). Returns what was written, or `None` when nothing was pending.
    #[inline]
    pub fn ring_doorbell<B: Bus + ?Sized>(&mut self, bus: &B) -> Option<Doorbell> {
        let p = self.pending;
        if p.nreq == 0 {
            return None;
        }
        self.pending.nreq = 0;
        Some(self.doorbell(bus, p.nreq, &p.last))
    }

    /// Publishes `nreq` WQEs written by [`SendQueue::write_wqe`], the last of which is
    /// `last`: doorbell record, then the 8-byte doorbell or BlueFlame copy of `last`
    /// (see the module documentation). WQEs posted with [`SendQueue::post`] and not
    /// yet published are published too (the record carries `cur_post`), but their
    /// pending count is not reset: use one of the two styles per queue.
    #[inline(always)]
    pub fn doorbell<B: Bus + ?Sized>(&mut self, bus: &B, nreq: u32, last: &LastWqe) -> Doorbell {
        bus.wmb();
        self.dbr.store_be32(sq_counter(u32::from(self.cur_post)));
        bus.wmb();

        let offset = self.cfg.bf.reg + self.bf_offset;
        // `use_blueflame` with its constant part precomputed (`bf_max_ds`).
        let bf = nreq == 1
            && last.ds > 1
            && last.ds <= self.bf_max_ds
            && (last.inline || self.cfg.prefer_bf);
        debug_assert_eq!(
            bf,
            use_blueflame(
                self.cfg.shut_up_bf,
                nreq,
                &self.cfg.bf,
                last.inline,
                self.cfg.prefer_bf,
                last.ds,
            )
        );
        let db = if bf {
            self.blueflame(bus, offset, last)
        } else {
            // The first 8 bytes of the last WQE, kept from its post.
            bus.write64(offset, last.ctrl_head);
            Doorbell::Db {
                offset,
                value: last.ctrl_head,
            }
        };
        self.bf_offset ^= self.cfg.bf.buf_size;
        db
    }

    /// The BlueFlame copy of `last` to BAR0 `offset`: whole WQEBBs, straight from the
    /// ring; the source wraps at the ring end, the destination does not.
    #[inline(always)]
    fn blueflame<B: Bus + ?Sized>(&self, bus: &B, offset: usize, last: &LastWqe) -> Doorbell {
        let first = u32::from(last.index);
        let wqebbs = usize::from(wqebbs_for_ds(last.ds));
        for k in 0..wqebbs {
            let s = ((first + k as u32) & self.mask) as usize * BB;
            self.buf
                .with_block64(s, |block| bus.write_block64(offset + k * BB, block));
        }
        Doorbell::BlueFlame {
            offset,
            len: wqebbs * BB,
        }
    }

    /// Posts `wrs` in order and rings one doorbell for those posted, as rdma-core's
    /// `ibv_post_send` does: on an error the WRs before it are still published, and
    /// the error comes back with the index of the WR that failed.
    pub fn post_list<B: Bus + ?Sized>(
        &mut self,
        bus: &B,
        wrs: &[SendWr<'_>],
    ) -> Result<usize, (usize, PostError)> {
        let mut res = Ok(wrs.len());
        for (i, wr) in wrs.iter().enumerate() {
            if let Err(e) = self.post(wr) {
                res = Err((i, e));
                break;
            }
        }
        self.ring_doorbell(bus);
        res
    }

    /// Retires the WQE whose index a requester CQE (or error CQE) reports: every WQE
    /// up to and including it is complete, signaled or not (rdma-core sets `sq.tail`
    /// from `wqe_head`). Returns its `wr_id`, or `None` when `wqe_counter` names no
    /// outstanding WQE (a device bug; nothing changes).
    ///
    /// Where the WQE ends is read back from its control segment (the device only reads
    /// the SQ, and an outstanding WQE's slots are not rewritten): its index must be
    /// `wqe_counter`, and its DS gives its WQEBBs.
    pub fn complete(&mut self, wqe_counter: u16) -> Option<u64> {
        let outstanding = self.cur_post.wrapping_sub(self.tail);
        if wqe_counter.wrapping_sub(self.tail) >= outstanding {
            return None;
        }
        let slot = (u32::from(wqe_counter) & self.mask) as usize;
        let start = slot * BB;
        let w0 = self.buf.load_be32(start);
        let w1 = self.buf.load_be32(start + 4);
        if (w0 >> 8) as u16 != wqe_counter {
            return None;
        }
        let next = wqe_counter.wrapping_add(wqebbs_for_ds((w1 & 0x3f) as u8));
        // A WQE starts at `wqe_counter` only if its end lies within the outstanding
        // range too; anything else is a counter pointing into the middle of a WQE.
        if next.wrapping_sub(self.tail) > outstanding || next.wrapping_sub(wqe_counter) == 0 {
            return None;
        }
        self.tail = next;
        Some(self.wr_id[slot].load(Ordering::Relaxed))
    }
}

/// The last WQE written by [`SendQueue::write_wqe`]: what its doorbell needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LastWqe {
    index: u16,
    ds: u8,
    inline: bool,
    /// The first 8 bytes of its control segment, as [`Bus::write64`] takes them.
    ctrl_head: u64,
}

impl LastWqe {
    /// The WQE index (WQEBB counter of its first block).
    pub fn index(&self) -> u16 {
        self.index
    }

    /// Its size in 16-byte units.
    pub fn ds(&self) -> u8 {
        self.ds
    }
}

/// `fm_ce_se` of each combination of [`SendFlags`] (its bits: FENCE, SIGNALED,
/// SOLICITED).
const FM_CE_SE: [u8; 8] = {
    let mut t = [0u8; 8];
    let mut i = 0;
    while i < 8 {
        let mut v = 0;
        let f = SendFlags(i as u8);
        if f.contains(SendFlags::SIGNALED) {
            v |= MLX5_WQE_CTRL_CQ_UPDATE;
        }
        if f.contains(SendFlags::SOLICITED) {
            v |= MLX5_WQE_CTRL_SOLICITED;
        }
        if f.contains(SendFlags::FENCE) {
            v |= MLX5_WQE_CTRL_FENCE;
        }
        t[i] = v;
        i += 1;
    }
    t
};

/// A 16-byte segment of two big-endian 64-bit words, as it sits in memory.
#[inline(always)]
fn seg16(hi: u64, lo: u64) -> [u8; 16] {
    ((u128::from(hi) << 64) | u128::from(lo)).to_be_bytes()
}

#[cold]
fn unsupported(opcode: u8, qp_type: QpType) -> PostError {
    PostError::UnsupportedOp { opcode, qp_type }
}

#[inline(always)]
fn wrap(off: usize, ring_len: usize) -> usize {
    if off == ring_len {
        0
    } else {
        off
    }
}

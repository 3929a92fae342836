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
//! [`Bus`] operation: flushing write-combined MMIO is the bus implementation's job.

use super::mem::{DoorbellWord, QueueMem};
use super::{GeometryError, PostError, Sge};
use ferroverbs_hw::datapath::dbr::sq_counter;
use ferroverbs_hw::datapath::wqe::{
    inline_ds, wqebbs_for_ds, WqeAv, MAX_WQE_DS, MLX5_INLINE_SEG, MLX5_OPCODE_ATOMIC_CS,
    MLX5_OPCODE_ATOMIC_FA, MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_RDMA_WRITE,
    MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_SEND, MLX5_OPCODE_SEND_IMM, MLX5_OPCODE_SEND_INVAL,
    MLX5_SEND_WQE_BB, MLX5_SEND_WQE_DS, MLX5_WQE_CTRL_CQ_UPDATE, MLX5_WQE_CTRL_FENCE,
    MLX5_WQE_CTRL_SOLICITED,
};
use ferroverbs_hw::Bus;

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

    /// Everything the writer needs of the operation, from one `match`.
    #[inline(always)]
    fn parts(&self) -> OpParts {
        let (opcode, imm, remote, atomic, ud_ok) = match *self {
            SendOp::Send => (MLX5_OPCODE_SEND, 0, None, false, true),
            SendOp::SendImm { imm } => (MLX5_OPCODE_SEND_IMM, imm, None, false, true),
            SendOp::SendInv { rkey } => (MLX5_OPCODE_SEND_INVAL, rkey, None, false, false),
            SendOp::RdmaWrite { remote } => (MLX5_OPCODE_RDMA_WRITE, 0, Some(remote), false, false),
            SendOp::RdmaWriteImm { remote, imm } => {
                (MLX5_OPCODE_RDMA_WRITE_IMM, imm, Some(remote), false, false)
            }
            SendOp::RdmaRead { remote } => (MLX5_OPCODE_RDMA_READ, 0, Some(remote), false, false),
            SendOp::AtomicCas { remote, .. } => {
                (MLX5_OPCODE_ATOMIC_CS, 0, Some(remote), true, false)
            }
            SendOp::AtomicFa { remote, .. } => {
                (MLX5_OPCODE_ATOMIC_FA, 0, Some(remote), true, false)
            }
        };
        OpParts {
            opcode,
            imm,
            remote,
            atomic,
            // READ and atomics write into the gather list; the rest are valid on UC.
            writes_local: atomic || opcode == MLX5_OPCODE_RDMA_READ,
            ud_ok,
        }
    }
}

/// [`SendOp::parts`].
#[derive(Clone, Copy)]
struct OpParts {
    opcode: u8,
    imm: u32,
    remote: Option<RemoteAddr>,
    atomic: bool,
    writes_local: bool,
    ud_ok: bool,
}

/// The data part of a send work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendData<'a> {
    /// A gather list; zero-length entries are skipped.
    Gather(&'a [Sge]),
    /// Bytes copied into the WQE (`IBV_SEND_INLINE`), packed back to back.
    Inline(&'a [&'a [u8]]),
}

/// Send flags (`IBV_SEND_SIGNALED`, `IBV_SEND_SOLICITED`, `IBV_SEND_FENCE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendFlags(u8);

impl SendFlags {
    /// No flags.
    pub const NONE: SendFlags = SendFlags(0);
    /// Produce a CQE on success.
    pub const SIGNALED: SendFlags = SendFlags(1);
    /// Set the solicited-event bit.
    pub const SOLICITED: SendFlags = SendFlags(2);
    /// Wait for earlier READs and atomics before this WQE.
    pub const FENCE: SendFlags = SendFlags(4);

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: SendFlags) -> bool {
        self.0 & other.0 == other.0
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
    last_index: u16,
    last_ds: u8,
    last_inline: bool,
    /// The first 8 bytes of its control segment, as [`Bus::write64`] takes them.
    last_db: u64,
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
    /// Per slot: the `wr_id` of the WQE starting there.
    wr_id: Box<[u64]>,
    /// Per slot: `cur_post` after the WQE starting there (rdma-core `wqe_head`).
    next_post: Box<[u16]>,
    pending: Pending,
    /// The BlueFlame half in use: 0 or `bf.buf_size`.
    bf_offset: usize,
    /// Template of the control segment: `qpn << 8` (the DS is or-ed in per WQE).
    qpn_ds: u32,
    /// Template of the control segment: `fm_ce_se` of `sq_sig_all`.
    fm_ce_se: u8,
}

impl<M: QueueMem, D: DoorbellWord> SendQueue<M, D> {
    /// A send queue over `buf` and the doorbell record word `dbr`, which should be zero
    /// (as the QP's creation leaves them).
    pub fn new(buf: M, dbr: D, cfg: SqConfig) -> Result<Self, GeometryError> {
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
        let n = cfg.wqe_cnt as usize;
        Ok(SendQueue {
            buf,
            dbr,
            cfg,
            ring_len,
            mask: cfg.wqe_cnt - 1,
            cur_post: 0,
            tail: 0,
            wr_id: vec![0; n].into_boxed_slice(),
            next_post: vec![0; n].into_boxed_slice(),
            pending: Pending::default(),
            bf_offset: 0,
            qpn_ds: cfg.qpn << 8,
            fm_ce_se: if cfg.sig_all {
                MLX5_WQE_CTRL_CQ_UPDATE
            } else {
                0
            },
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
    ///
    /// The writer is template-based: the QPN part of `qpn_ds` and the signal-all bit
    /// were computed at construction, the flags map to `fm_ce_se` through a table, and
    /// each segment is built in registers and written with one 16-byte store
    /// ([`QueueMem::write16`]). The ring end can only fall between 16-byte segments (it
    /// is a multiple of 64), so the wrap test is one compare per segment.
    #[inline(always)]
    pub fn post(&mut self, wr: &SendWr<'_>) -> Result<PostedWqe, PostError> {
        let op = &wr.op;
        let OpParts {
            opcode,
            imm,
            remote,
            atomic,
            writes_local,
            ud_ok,
        } = op.parts();
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
                for p in parts {
                    inline_len += p.len();
                }
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
        }
        match *op {
            SendOp::AtomicCas { compare, swap, .. } => {
                buf.write16(off, &seg16(swap, compare));
                off = wrap(off + DS, ring_len);
            }
            SendOp::AtomicFa { add, .. } => {
                // `swap_add` only: rdma-core leaves `compare` as it was.
                buf.write(off, &add.to_be_bytes());
                off = wrap(off + DS, ring_len);
            }
            _ => {}
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
                    for part in parts {
                        buf.write(d, part);
                        d += part.len();
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

        // The control segment (`mlx5dv_x86_set_ctrl_seg`): bytes 8-10 zero, fm_ce_se
        // from the template and the flags.
        let fm_ce_se = self.fm_ce_se | FM_CE_SE[usize::from(wr.flags.0 & 7)];
        let w0 = (u32::from(index) << 8) | u32::from(opcode);
        let w1 = self.qpn_ds | u32::from(ds);
        let ctrl_head = (u64::from(w0) << 32) | u64::from(w1);
        let ctrl_tail = (u64::from(fm_ce_se) << 32) | u64::from(imm);
        buf.write16(start, &seg16(ctrl_head, ctrl_tail));

        let next = index.wrapping_add(wqebbs);
        self.wr_id[slot] = wr.wr_id;
        self.next_post[slot] = next;
        self.cur_post = next;
        self.pending = Pending {
            nreq: self.pending.nreq + 1,
            last_index: index,
            last_ds: ds,
            last_inline: inline,
            last_db: ctrl_head,
        };
        Ok(PostedWqe {
            index,
            ds,
            wqebbs,
            inline,
        })
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
        bus.wmb();
        self.dbr.store_be32(sq_counter(u32::from(self.cur_post)));
        bus.wmb();

        let offset = self.cfg.bf.reg + self.bf_offset;
        let db = if use_blueflame(
            self.cfg.shut_up_bf,
            p.nreq,
            &self.cfg.bf,
            p.last_inline,
            self.cfg.prefer_bf,
            p.last_ds,
        ) {
            // Whole WQEBBs, straight from the ring; the source wraps at the ring end,
            // the destination does not.
            let first = u32::from(p.last_index);
            let wqebbs = usize::from(wqebbs_for_ds(p.last_ds));
            for k in 0..wqebbs {
                let s = ((first + k as u32) & self.mask) as usize * BB;
                self.buf
                    .with_block64(s, |block| bus.write_block64(offset + k * BB, block));
            }
            Doorbell::BlueFlame {
                offset,
                len: wqebbs * BB,
            }
        } else {
            // The first 8 bytes of the last WQE, kept from its post.
            bus.write64(offset, p.last_db);
            Doorbell::Db {
                offset,
                value: p.last_db,
            }
        };
        self.bf_offset ^= self.cfg.bf.buf_size;
        Some(db)
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
    pub fn complete(&mut self, wqe_counter: u16) -> Option<u64> {
        let outstanding = self.cur_post.wrapping_sub(self.tail);
        if wqe_counter.wrapping_sub(self.tail) >= outstanding {
            return None;
        }
        let slot = (u32::from(wqe_counter) & self.mask) as usize;
        let next = self.next_post[slot];
        // A WQE starts at `wqe_counter` only if its end lies within the outstanding
        // range too; anything else is a counter pointing into the middle of a WQE.
        if next.wrapping_sub(self.tail) > outstanding || next.wrapping_sub(wqe_counter) == 0 {
            return None;
        }
        self.tail = next;
        Some(self.wr_id[slot])
    }
}

/// `fm_ce_se` of each combination of [`SendFlags`] (bit 0 SIGNALED, 1 SOLICITED,
/// 2 FENCE).
const FM_CE_SE: [u8; 8] = {
    let mut t = [0u8; 8];
    let mut i = 0;
    while i < 8 {
        let mut v = 0;
        if i & 1 != 0 {
            v |= MLX5_WQE_CTRL_CQ_UPDATE;
        }
        if i & 2 != 0 {
            v |= MLX5_WQE_CTRL_SOLICITED;
        }
        if i & 4 != 0 {
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

//! Reading and validating work queue elements from host memory.
//!
//! Send WQEs (`mlx5-datapath.md` §2): a control segment (opcode, WQE index, QPN, DS,
//! `fm_ce_se`, immediate), then the segments of the opcode (remote address; atomic
//! operands), then either inline data (a BE32 header with bit 31 set and the count in
//! bits 30..0, the bytes right after it) or data segments (byte count, lkey, address;
//! a byte count of 0 means 2^31 bytes, which is why rdma-core never writes empty ones).
//! The WQE occupies `ceil(DS / 4)` WQEBBs of the ring and wraps at its end.
//!
//! Receive WQEs (§4): data segments at the RQ stride, the list ending at the stride or at
//! an entry whose lkey is `MLX5_INVALID_LKEY` (0x100).
//!
//! Validation follows what the device reports: a malformed WQE (DS 0, DS running past
//! what was posted, a QPN that is not the QP's, an opcode the QP cannot execute, inline
//! data longer than its segments or on an opcode that takes none) is a local QP
//! operation error; an unusable lkey (unknown, other PD, missing access, out of
//! bounds) is a local protection error; a message longer than the QP's `log_msg_max`
//! is a local length error.

use ferroverbs_hw::datapath::umr::{MwUmr, UMR_KLM_BYTES, UMR_NO_KLM_BYTES};
use ferroverbs_hw::datapath::wqe::{
    WqeAv, WqeCtrlSeg, WqeDataSeg, MLX5_INLINE_SEG, MLX5_INVALID_LKEY, MLX5_OPCODE_ATOMIC_CS,
    MLX5_OPCODE_ATOMIC_FA, MLX5_OPCODE_NOP, MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_RDMA_WRITE,
    MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_SEND, MLX5_OPCODE_SEND_IMM, MLX5_OPCODE_SEND_INVAL,
    MLX5_OPCODE_UMR,
};

use super::mem::{self, KeyError, Need, Sge};
use super::qp::QpCfg;
use crate::firmware::{Firmware, ServiceType};
use crate::iommu::{CachedAccess, Iommu, Window};

/// Largest send WQE: 63 DS (the 6-bit field), 16 WQEBBs of buffer.
pub const MAX_WQE_BYTES: usize = 1024;

/// Largest receive WQE stride read.
pub const MAX_RQ_STRIDE: usize = 2048;

/// What is wrong with a WQE (its completion syndrome).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WqeError {
    /// Malformed WQE: `LOCAL_QP_OP_ERR`.
    QpOp,
    /// Unusable key: `LOCAL_PROT_ERR`.
    Prot,
    /// Message too long: `LOCAL_LENGTH_ERR`.
    Length,
}

/// The operation of a send WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// NOP.
    Nop,
    /// SEND (with immediate if `imm`).
    Send {
        /// With immediate data.
        imm: bool,
    },
    /// SEND with Invalidate (RC only): the control segment's `imm` is the R_Key the
    /// responder invalidates (`mlx5-datapath.md` §2.1), carried in the last packet's
    /// IETH.
    SendInv,
    /// RDMA WRITE (with immediate if `imm`).
    Write {
        /// With immediate data.
        imm: bool,
    },
    /// RDMA READ.
    Read,
    /// Atomic compare and swap.
    CmpSwap,
    /// Atomic fetch and add.
    FetchAdd,
    /// User-mode memory registration (`MLX5_OPCODE_UMR`): a memory window bind or a
    /// local invalidation, executed by the device on its own MKEY table when the WQE
    /// reaches the head of the send queue (no packet; [`SendWqe::umr`]).
    Umr,
}

impl Op {
    fn of(opcode: u8) -> Option<Op> {
        Some(match opcode {
            MLX5_OPCODE_NOP => Op::Nop,
            MLX5_OPCODE_SEND => Op::Send { imm: false },
            MLX5_OPCODE_SEND_IMM => Op::Send { imm: true },
            MLX5_OPCODE_SEND_INVAL => Op::SendInv,
            MLX5_OPCODE_RDMA_WRITE => Op::Write { imm: false },
            MLX5_OPCODE_RDMA_WRITE_IMM => Op::Write { imm: true },
            MLX5_OPCODE_RDMA_READ => Op::Read,
            MLX5_OPCODE_ATOMIC_CS => Op::CmpSwap,
            MLX5_OPCODE_ATOMIC_FA => Op::FetchAdd,
            MLX5_OPCODE_UMR => Op::Umr,
            _ => return None,
        })
    }

    /// DS units before the data part.
    fn base_ds(self) -> usize {
        match self {
            Op::Nop | Op::Send { .. } | Op::SendInv => 1,
            Op::Write { .. } | Op::Read => 2,
            Op::CmpSwap | Op::FetchAdd => 3,
            Op::Umr => 1 + UMR_NO_KLM_BYTES / 16,
        }
    }

    /// Whether the responder returns data or a value that lands in the local list.
    pub fn scatters(self) -> bool {
        matches!(self, Op::Read | Op::CmpSwap | Op::FetchAdd)
    }

    /// Whether this is a READ or an atomic (bounded by the initiator depth).
    pub fn is_read_atomic(self) -> bool {
        self.scatters()
    }
}

/// The fence mode of a send WQE (`fm_ce_se` bits 7..5, the PRM's `MLX5_FENCE_MODE_*`):
/// what must complete before the WQE executes. rdma-core writes mode 4 ("small and
/// fence", `MLX5_WQE_CTRL_FENCE`) for `IBV_SEND_FENCE`, and the initiator small fence
/// on the WQE after a local invalidation or memory window bind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fence {
    /// Mode 0: none.
    None,
    /// Mode 1, initiator small fence: earlier local operations (UMR, BIND_MW,
    /// LOCAL_INV) complete first. The simulator executes a UMR when it reaches the
    /// head of the send queue, before any later WQE is sent, so this holds without a
    /// wait.
    InitiatorSmall,
    /// Mode 2, fence: earlier RDMA READs and atomics complete first (the IBTA fence
    /// indicator, Vol. 1 §10.8.3.3); modes 5-7 (reserved) are taken as this.
    Fence,
    /// Mode 3, strong ordering: every earlier WQE completes (is acknowledged) first.
    StrongOrdering,
    /// Mode 4, small and fence: modes 1 and 2 together.
    SmallAndFence,
}

impl Fence {
    /// The mode of `fm_ce_se` bits 7..5 (`fence_mode`).
    pub fn of(mode: u8) -> Fence {
        match mode {
            0 => Fence::None,
            1 => Fence::InitiatorSmall,
            3 => Fence::StrongOrdering,
            4 => Fence::SmallAndFence,
            _ => Fence::Fence,
        }
    }

    /// Whether the WQE waits for every earlier READ and atomic.
    #[inline]
    pub fn waits_for_reads(self) -> bool {
        matches!(
            self,
            Fence::Fence | Fence::SmallAndFence | Fence::StrongOrdering
        )
    }

    /// Whether the WQE waits for every earlier WQE to complete.
    #[inline]
    pub fn waits_for_all(self) -> bool {
        self == Fence::StrongOrdering
    }
}

/// A send WQE as the requester keeps it while the operation is in flight.
#[derive(Clone, Copy, Debug)]
pub struct SendWqe {
    /// The SQ WQEBB counter of its first block.
    pub pos: u32,
    /// WQEBBs it occupies.
    pub wqebbs: u32,
    /// The WQE index of its control segment (reported as `wqe_counter`).
    pub index: u16,
    /// The `MLX5_OPCODE_*` byte.
    pub opcode: u8,
    /// The operation (`None` for an opcode the QP cannot execute).
    pub op: Option<Op>,
    /// CQE on success requested.
    pub signaled: bool,
    /// Solicited event requested.
    pub solicited: bool,
    /// The fence mode of the control segment.
    pub fence: Fence,
    /// The immediate word (as its bytes sit in the WQE: big-endian value).
    pub imm: u32,
    /// Remote address.
    pub raddr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap (compare and swap) or add (fetch and add) operand.
    pub swap_add: u64,
    /// Compare operand.
    pub compare: u64,
    /// Message length.
    pub len: u64,
    /// The data is inline in the WQE.
    pub inline: bool,
    /// Validation result.
    pub error: Option<WqeError>,
}

/// Where a UMR WQE's fields are kept in a [`SendWqe`] (so that the common WQE stays
/// small): `imm` = the key it modifies, `raddr` = start, `len` = the window's length
/// (no packet is sent for it), `rkey` = `qpn << 8 | variant`, `swap_add` = the KLM
/// address (with a KLM) or the mkey mask (without one), `compare` = the KLM key or,
/// without a KLM, the PD (bits 31..0), the UMR flags (39..32), the access flags
/// (47..40), `free` (bit 48) and whether there is a KLM (bit 49). A window bind (the
/// only UMR with a KLM) needs no mask and no PD: its checks are the window's
/// (`Firmware::umr`); a UMR on a memory region has no KLM and needs both.
const UMR_FREE: u64 = 1 << 48;
const UMR_HAS_KLM: u64 = 1 << 49;

impl SendWqe {
    fn set_umr(&mut self, u: &MwUmr) {
        self.raddr = u.start;
        self.rkey = (u.qpn << 8) | u32::from(u.variant);
        let (mkey, addr) = u.klm.unwrap_or((u.pd & 0xff_ffff, u.mkey_mask));
        self.swap_add = addr;
        self.compare = u64::from(mkey)
            | (u64::from(u.flags) << 32)
            | (u64::from(u.access) << 40)
            | if u.free { UMR_FREE } else { 0 }
            | if u.klm.is_some() { UMR_HAS_KLM } else { 0 };
        self.len = u.len;
    }

    /// The UMR of a WQE whose operation is [`Op::Umr`].
    pub fn umr(&self) -> MwUmr {
        let c = self.compare;
        let klm = c & UMR_HAS_KLM != 0;
        MwUmr {
            key: self.imm,
            flags: (c >> 32) as u8,
            mkey_mask: if klm { 0 } else { self.swap_add },
            pd: if klm { 0 } else { c as u32 & 0xff_ffff },
            free: c & UMR_FREE != 0,
            access: (c >> 40) as u8,
            qpn: self.rkey >> 8,
            variant: self.rkey as u8,
            start: self.raddr,
            len: self.len,
            klm: klm.then_some((c as u32, self.swap_add)),
        }
    }
}

/// The data part of a WQE: its gather list, or its inline bytes.
#[derive(Clone, Debug, Default)]
pub struct WqeData {
    /// Gather/scatter entries.
    pub sges: Vec<Sge>,
    /// Inline bytes (of a WQE decoded by [`parse_send`]; see [`WqeData::inline_bytes`]).
    pub inline: Vec<u8>,
    /// The data part in WQE order when it mixes inline and pointer segments (empty
    /// otherwise): the message is these pieces one after the other.
    pub pieces: Vec<Piece>,
    /// The first two WQEBBs of a WQE whose inline bytes are read from there (taken by
    /// [`inline_send`]; see [`WqeData::set_pair`]).
    pub pair: Pair,
    /// The SQ position of the WQE these belong to.
    pub pos: Option<u32>,
    /// UD: the address vector of the WQE's datagram segment (`struct mlx5_wqe_av`,
    /// right after the control segment). It is kept here, with the WQE's other
    /// transient data, rather than in [`SendWqe`]: an RC/UC QP keeps a [`SendWqe`] for
    /// every request in flight, and 49 bytes of unused address vector in each made the
    /// outstanding requests of many QPs miss the caches.
    pub av: Option<WqeAv>,
    /// The cached translation of the SQ ring's mapping the WQEs are read through
    /// ([`Iommu::read_cached`]: every read still checked against the map table, only
    /// its search saved while no unmap happened).
    pub win: Window,
    /// The cached translation of the last mapping the gather list was read from (a
    /// `Cell`, so that [`WqeData::gather`] stays a `&self` read).
    pub data_win: std::cell::Cell<Window>,
}

/// One segment of a data part that mixes inline and pointer segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece {
    /// `len` inline bytes at `at` of [`WqeData::inline`].
    Inline {
        /// Offset in [`WqeData::inline`].
        at: u32,
        /// Byte count.
        len: u32,
    },
    /// A pointer (data) segment.
    Gather(Sge),
}

/// The first two WQEBBs of an inline SEND ([`inline_send`]) kept as read, and the
/// count of its inline bytes (at [`INLINE_SEND_DATA_AT`]); `None` when unused.
#[derive(Clone, Debug)]
pub struct Pair {
    bytes: [u8; 128],
    len: Option<u8>,
}

impl Default for Pair {
    fn default() -> Pair {
        Pair {
            bytes: [0; 128],
            len: None,
        }
    }
}

impl WqeData {
    /// The inline bytes of the WQE at `pos`: from the kept WQEBBs after
    /// [`WqeData::set_pair`], else those [`parse_send`] decoded.
    #[inline]
    pub fn inline_bytes(&self) -> &[u8] {
        match self.pair.len {
            Some(n) => &self.pair.bytes[INLINE_SEND_DATA_AT..INLINE_SEND_DATA_AT + usize::from(n)],
            None => &self.inline,
        }
    }

    /// Copies the bytes at `offset` of the message of the WQE these belong to into
    /// `dst`: its inline bytes (`inline`: the WQE's data is inline only), its pieces in
    /// order (a mixed data part), or its gather list.
    #[inline]
    pub fn gather(
        &self,
        fw: &Firmware,
        io: &Iommu,
        inline: bool,
        offset: u64,
        dst: &mut [u8],
    ) -> Result<(), KeyError> {
        if inline {
            let src = usize::try_from(offset)
                .ok()
                .and_then(|o| self.inline_bytes().get(o..o.checked_add(dst.len())?))
                .ok_or(KeyError::Bounds)?;
            dst.copy_from_slice(src);
            return Ok(());
        }
        if self.pieces.is_empty() {
            let mut w = self.data_win.get();
            let r = mem::gather_cached(fw, io, &mut w, &self.sges, offset, dst);
            self.data_win.set(w);
            return r;
        }
        self.gather_pieces(fw, io, offset, dst)
    }

    /// [`WqeData::gather`] of a mixed data part.
    #[cold]
    fn gather_pieces(
        &self,
        fw: &Firmware,
        io: &Iommu,
        offset: u64,
        dst: &mut [u8],
    ) -> Result<(), KeyError> {
        let mut skip = offset;
        let mut done = 0usize;
        for p in &self.pieces {
            if done == dst.len() {
                break;
            }
            let len = match p {
                Piece::Inline { len, .. } => u64::from(*len),
                Piece::Gather(s) => s.len,
            };
            if skip >= len {
                skip -= len;
                continue;
            }
            let n = ((len - skip) as usize).min(dst.len() - done);
            let out = &mut dst[done..done + n];
            match p {
                Piece::Inline { at, .. } => {
                    let from = *at as usize + skip as usize;
                    let src = self.inline.get(from..from + n).ok_or(KeyError::Bounds)?;
                    out.copy_from_slice(src);
                }
                Piece::Gather(s) => {
                    mem::gather(fw, io, std::slice::from_ref(s), skip, out)?;
                }
            }
            done += n;
            skip = 0;
        }
        if done < dst.len() {
            return Err(KeyError::Bounds);
        }
        Ok(())
    }

    /// Makes this the data of the inline SEND `w` at `pos` decoded by [`inline_send`]
    /// from `raw` (what [`parse_send`] would leave for it, kept as the WQEBBs read:
    /// one fixed-size copy instead of the decoder's).
    #[inline]
    pub fn set_pair(&mut self, pos: u32, w: &SendWqe, raw: &[u8; 128]) {
        self.pair.bytes = *raw;
        // `inline_send` bounds the count by the DS: at most 108.
        self.pair.len = u8::try_from(w.len).ok();
        self.pos = Some(pos);
    }
}

/// Reads WQEBB `pos` (a counter) of the SQ into `dst` (64 bytes).
fn read_wqebb(io: &Iommu, cfg: &QpCfg, pos: u32, dst: &mut [u8]) -> bool {
    if cfg.sq_size == 0 {
        return false;
    }
    cfg.sq_iova(pos & (cfg.sq_size - 1), 0)
        .is_some_and(|iova| io.read(iova, dst).is_ok())
}

/// Reads the `dst.len() / 64` WQEBBs from SQ counter `pos` into `dst` through the
/// cached window `win`, one IOMMU access per run of WQEBBs contiguous in IOVA space
/// (a WQE crosses at most one page boundary of the buffer, or the ring's end), through
/// the IOMMU or a hold of its table ([`CachedAccess`]: the same checks either way).
fn read_wqebbs(
    io: &impl CachedAccess,
    cfg: &QpCfg,
    win: &mut Window,
    pos: u32,
    dst: &mut [u8],
) -> bool {
    if cfg.sq_size == 0 {
        return false;
    }
    let mask = cfg.sq_size - 1;
    let n = dst.len() / 64;
    // The common case: the WQEBBs neither wrap the ring nor cross a page.
    let slot = pos & mask;
    if u64::from(slot) + n as u64 <= u64::from(cfg.sq_size) {
        let byte = cfg.sq_base + u64::from(slot) * 64;
        if let Some(iova) = cfg.buf.iova_in_page(byte, n as u64 * 64) {
            return io.read_cached(win, iova, &mut dst[..n * 64]).is_ok();
        }
    }
    let mut k = 0;
    while k < n {
        let Some(start) = cfg.sq_iova(pos.wrapping_add(k as u32) & mask, 0) else {
            return false;
        };
        let mut run = 1;
        while k + run < n
            && cfg.sq_iova(pos.wrapping_add((k + run) as u32) & mask, 0)
                == Some(start + 64 * run as u64)
        {
            run += 1;
        }
        if io
            .read_cached(win, start, &mut dst[k * 64..(k + run) * 64])
            .is_err()
        {
            return false;
        }
        k += run;
    }
    true
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[..8]);
    u64::from_be_bytes(v)
}

/// A send WQE that failed validation (what the fields say until parsed).
fn malformed(pos: u32) -> SendWqe {
    SendWqe {
        pos,
        wqebbs: 1,
        index: pos as u16,
        opcode: 0,
        op: None,
        signaled: false,
        solicited: false,
        fence: Fence::None,
        imm: 0,
        raddr: 0,
        rkey: 0,
        swap_add: 0,
        compare: 0,
        len: 0,
        inline: false,
        error: Some(WqeError::QpOp),
    }
}

/// Reads the control segment (the first 16 bytes of `first`) into `w`; returns the
/// WQE's DS count and WQEBBs, or `None` (with `w.wqebbs` set to what to skip) for a DS
/// of 0 or a WQE running past the `avail` WQEBBs posted.
fn header(w: &mut SendWqe, first: &[u8], avail: u32) -> Option<(usize, u32, u32)> {
    let ctrl = WqeCtrlSeg::read_from(first.get(..16)?).ok()?;
    w.index = ctrl.wqe_index();
    w.opcode = ctrl.opcode();
    w.signaled = ctrl.cq_update();
    w.solicited = ctrl.solicited();
    w.fence = Fence::of(ctrl.fence_mode());
    w.imm = ctrl.imm();
    let ds = usize::from(ctrl.ds());
    if ds == 0 {
        return None;
    }
    let wqebbs = ds.div_ceil(4) as u32;
    if wqebbs > avail {
        // The WQE runs past the producer counter: malformed.
        w.wqebbs = avail.max(1);
        return None;
    }
    w.wqebbs = wqebbs;
    Some((ds, wqebbs, ctrl.qpn()))
}

/// Reads the send WQE at SQ counter `pos`, of which at most `avail` WQEBBs were posted,
/// validates it and fills `data` with its gather list or inline bytes.
pub fn parse_send(
    fw: &Firmware,
    io: &Iommu,
    cfg: &QpCfg,
    pos: u32,
    avail: u32,
    data: &mut WqeData,
) -> SendWqe {
    // The WQE's bytes: most WQEs fit the small buffer; only a larger one pays for
    // zeroing `MAX_WQE_BYTES` on the stack. Most WQEs take one or two WQEBBs: the
    // first access reads two when both were posted (only posted WQEBBs are read; if
    // the second cannot be read, the first alone is).
    let mut small = [0u8; 256];
    let pre = if avail >= 2 { 128 } else { 64 };
    let ok = read_wqebbs(io, cfg, &mut data.win, pos, &mut small[..pre]);
    parse_send_read(fw, io, cfg, pos, avail, data, &mut small, pre, ok)
}

/// Reads the two WQEBBs at SQ counter `pos` into `raw` (the first read of
/// [`parse_send`] when at least two were posted), through the IOMMU or a hold of its
/// table; false if they cannot be read.
pub fn read_pair(
    io: &impl CachedAccess,
    cfg: &QpCfg,
    win: &mut Window,
    pos: u32,
    raw: &mut [u8; 128],
) -> bool {
    read_wqebbs(io, cfg, win, pos, raw)
}

/// [`parse_send`] after its first read: `small[..pre]` holds the first `pre` bytes
/// (64, or 128 when `avail >= 2`) if that read succeeded (`ok`).
#[allow(clippy::too_many_arguments)]
pub fn parse_send_read(
    fw: &Firmware,
    io: &Iommu,
    cfg: &QpCfg,
    pos: u32,
    avail: u32,
    data: &mut WqeData,
    small: &mut [u8; 256],
    mut pre: usize,
    ok: bool,
) -> SendWqe {
    data.sges.clear();
    data.inline.clear();
    data.pieces.clear();
    data.pair.len = None;
    data.pos = Some(pos);
    data.av = None;
    let mut w = malformed(pos);
    if !ok {
        pre = 64;
        if !read_wqebbs(io, cfg, &mut data.win, pos, &mut small[..pre]) {
            return w;
        }
    }
    let Some((ds, wqebbs, qpn)) = header(&mut w, &small[..64], avail) else {
        return w;
    };
    let end = wqebbs as usize * 64;
    let rest = pos.wrapping_add(pre as u32 / 64);
    if end <= small.len() {
        if end > pre && !read_wqebbs(io, cfg, &mut data.win, rest, &mut small[pre..end]) {
            return w;
        }
        decode(fw, cfg, &small[..end], ds, qpn, &mut w, data);
    } else {
        let mut big = [0u8; MAX_WQE_BYTES];
        big[..pre].copy_from_slice(&small[..pre]);
        if !read_wqebbs(io, cfg, &mut data.win, rest, &mut big[pre..end]) {
            return w;
        }
        decode(fw, cfg, &big[..end], ds, qpn, &mut w, data);
    }
    w
}

/// Offset of the inline bytes of a SEND WQE with inline data: after the control
/// segment and the inline segment's 4-byte header.
pub const INLINE_SEND_DATA_AT: usize = 16 + 4;

/// The common send WQE at SQ counter `pos`, decoded at fixed offsets from its first
/// two WQEBBs `raw` (both posted): a SEND or SEND with immediate of this QP (not UD)
/// whose data is inline, `ceil(DS / 4) <= 2`, the inline bytes within the DS and the
/// message within `max_msg`. Returns what [`parse_send`] returns for it (with the
/// inline bytes at [`INLINE_SEND_DATA_AT`] in `raw`, `len` of them), or `None` for any
/// other WQE (which [`parse_send_read`] then takes from the same bytes).
#[inline]
pub fn inline_send(cfg: &QpCfg, pos: u32, raw: &[u8; 128]) -> Option<SendWqe> {
    let ctrl = WqeCtrlSeg::read_from(&raw[..16]).ok()?;
    let imm = match ctrl.opcode() {
        MLX5_OPCODE_SEND => false,
        MLX5_OPCODE_SEND_IMM => true,
        _ => return None,
    };
    let ds = usize::from(ctrl.ds());
    // DS 2..=8: the control segment, the inline header and data, in two WQEBBs.
    if !(2..=8).contains(&ds) || ctrl.qpn() != cfg.qpn || cfg.st == ServiceType::Ud {
        return None;
    }
    let head = be32(&raw[16..20]);
    if head & MLX5_INLINE_SEG == 0 {
        return None;
    }
    let n = (head & !MLX5_INLINE_SEG) as usize;
    // One inline segment that is the whole data part: anything after its padding is
    // another segment (a mixed data part, `data_part`), which the general path walks.
    if (4 + n).div_ceil(16) != ds - 1 || n as u64 > cfg.max_msg {
        return None;
    }
    Some(SendWqe {
        pos,
        wqebbs: ds.div_ceil(4) as u32,
        index: ctrl.wqe_index(),
        opcode: ctrl.opcode(),
        op: Some(Op::Send { imm }),
        signaled: ctrl.cq_update(),
        solicited: ctrl.solicited(),
        fence: Fence::of(ctrl.fence_mode()),
        imm: ctrl.imm(),
        raddr: 0,
        rkey: 0,
        swap_add: 0,
        compare: 0,
        len: n as u64,
        inline: true,
        error: None,
    })
}

/// Validates the WQE whose `wqebbs` WQEBBs are `raw` (control segment already read into
/// `w`: `ds` and `qpn` from it) and fills `data`.
fn decode(
    fw: &Firmware,
    cfg: &QpCfg,
    raw: &[u8],
    ds: usize,
    qpn: u32,
    w: &mut SendWqe,
    data: &mut WqeData,
) {
    if qpn != cfg.qpn || raw.len() < ds * 16 {
        return;
    }
    let Some(op) = Op::of(w.opcode) else {
        return;
    };
    w.op = Some(op);
    // UD (`mlx5-datapath.md` §2.3-2.4): SEND only, the 48-byte address vector between
    // the control segment and the data part.
    let ud = cfg.st == ServiceType::Ud;
    if ud && !matches!(op, Op::Nop | Op::Send { .. }) {
        return;
    }
    // SEND with Invalidate exists on RC (and XRC) only (IBTA Vol. 1 §9.4.1.4, the
    // opcode table of §9.2.1): on UC it is an operation the QP cannot execute.
    if op == Op::SendInv && cfg.st != ServiceType::Rc {
        return;
    }
    let av_ds = if ud && op != Op::Nop {
        WqeAv::SIZE / 16
    } else {
        0
    };
    let base = op.base_ds() + av_ds;
    if ds < base {
        return;
    }
    if op == Op::Umr {
        // RC and UC only (rdma-core posts BIND_MW / LOCAL_INV on those).
        if ud {
            return;
        }
        let rest = &raw[16..ds * 16];
        let Some(u) = MwUmr::parse(w.imm, rest) else {
            return;
        };
        if ds * 16 - 16 < u.bytes() || rest.len() > UMR_KLM_BYTES {
            return;
        }
        w.set_umr(&u);
        w.error = None;
        return;
    }
    if av_ds != 0 {
        match WqeAv::read_from(&raw[16..16 + WqeAv::SIZE]) {
            Ok(av) => data.av = Some(av),
            Err(_) => return,
        }
    }
    if matches!(op, Op::Write { .. } | Op::Read | Op::CmpSwap | Op::FetchAdd) {
        w.raddr = be64(&raw[16..24]);
        w.rkey = be32(&raw[24..28]);
    }
    if matches!(op, Op::CmpSwap | Op::FetchAdd) {
        w.swap_add = be64(&raw[32..40]);
        w.compare = be64(&raw[40..48]);
    }
    let part = if op == Op::Nop {
        &raw[..0]
    } else {
        &raw[base * 16..ds * 16]
    };
    if !data_part(fw, cfg, op, part, w, data) {
        return;
    }
    if matches!(op, Op::CmpSwap | Op::FetchAdd) {
        if w.len < 8 {
            w.error = Some(WqeError::Length);
            return;
        }
        w.len = 8;
    }
    if w.len > cfg.max_msg {
        w.error = Some(WqeError::Length);
        return;
    }
    w.error = None;
}

/// Reads the data part of a send WQE segment by segment into `data`, setting `w.len`
/// and `w.inline`; false (with `w.error` set for a key error) if it is malformed.
///
/// The PRM lets the data part mix inline segments (a BE32 header `byte_count |
/// MLX5_INLINE_SEG`, the bytes, padded to the next 16-byte boundary) and pointer
/// segments (`struct mlx5_wqe_data_seg`) in any order, and production producers do:
/// UCX's mlx5 transport (`uct/ib/rc/accel/rc_mlx5.inl`) posts `ctrl | inline AM
/// header | data pointer` for active messages and `ctrl | inline TMH | data pointer`
/// for tag matching. The message is the concatenation of every segment in order. A
/// data part of inline segments only keeps its bytes in `data.inline`; one of pointer
/// segments only, its list in `data.sges`; a mix, both, and its order in
/// `data.pieces` ([`WqeData::gather`] reads any of the three).
fn data_part(
    fw: &Firmware,
    cfg: &QpCfg,
    op: Op,
    part: &[u8],
    w: &mut SendWqe,
    data: &mut WqeData,
) -> bool {
    let need = if op.scatters() {
        Need::LocalWrite
    } else {
        Need::LocalRead
    };
    let mut at = 0;
    let mut inline_segs = 0usize;
    let mut total = 0u64;
    while at < part.len() {
        let rest = &part[at..];
        let head = be32(rest);
        if head & MLX5_INLINE_SEG != 0 {
            // Inline data: only the opcodes that send bytes from the WQE (RDMA READ
            // and atomics scatter into the local list).
            let n = (head & !MLX5_INLINE_SEG) as usize;
            if 4 + n > rest.len() || !matches!(op, Op::Send { .. } | Op::SendInv | Op::Write { .. })
            {
                return false;
            }
            if inline_segs == 0 {
                // The first inline segment: the pointer segments before it (kept in
                // `data.sges` only while the part has no inline one) open the list of
                // pieces, so that a part of pointer segments only never writes (nor
                // allocates) `data.pieces`.
                data.pieces
                    .extend(data.sges.iter().map(|&s| Piece::Gather(s)));
            }
            let start = data.inline.len() as u32;
            data.inline.extend_from_slice(&rest[4..4 + n]);
            data.pieces.push(Piece::Inline {
                at: start,
                len: n as u32,
            });
            inline_segs += 1;
            total += n as u64;
            at += (4 + n).next_multiple_of(16);
        } else {
            let Ok(d) = WqeDataSeg::read_from(&rest[..16]) else {
                return false;
            };
            let len = match d.byte_count() {
                0 => 1u64 << 31,
                n => u64::from(n),
            };
            let sge = Sge {
                addr: d.addr(),
                len,
                key: d.lkey(),
            };
            if mem::check(fw, sge.key, cfg.pd, need, sge.addr, sge.len).is_err() {
                w.error = Some(WqeError::Prot);
                return false;
            }
            data.sges.push(sge);
            if inline_segs != 0 {
                data.pieces.push(Piece::Gather(sge));
            }
            total = total.saturating_add(len);
            at += 16;
        }
    }
    w.len = total;
    w.inline = inline_segs != 0 && data.sges.is_empty();
    if inline_segs == 0 || w.inline {
        // One kind only: the list or the bytes say it all.
        data.pieces.clear();
    }
    true
}

/// Fills `data` again for the WQE at `pos` (already validated when it was fetched).
pub fn reload(fw: &Firmware, io: &Iommu, cfg: &QpCfg, w: &SendWqe, data: &mut WqeData) -> bool {
    if data.pos == Some(w.pos) {
        return true;
    }
    let again = parse_send(fw, io, cfg, w.pos, w.wqebbs, data);
    again.error.is_none() && again.len == w.len
}

/// Why a receive WQE cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvError {
    /// The WQE could not be read (`LOCAL_QP_OP_ERR`).
    Unreadable,
    /// An entry's key is unusable (`LOCAL_PROT_ERR`).
    Prot,
}

/// Reads RQ WQE `counter` and fills `sges` with its scatter list, each entry checked
/// for local write access in the QP's PD.
pub fn parse_recv(
    fw: &Firmware,
    io: &Iommu,
    cfg: &QpCfg,
    counter: u32,
    sges: &mut Vec<Sge>,
) -> Result<(), RecvError> {
    parse_recv_with(fw, cfg, counter, sges, |iova, raw| {
        io.read(iova, raw).is_ok()
    })
}

/// [`parse_recv`] with the WQE's bytes read by `read(iova, buf)` (false: unreadable),
/// so that a caller may read through a cached translation of the ring.
pub fn parse_recv_with(
    fw: &Firmware,
    cfg: &QpCfg,
    counter: u32,
    sges: &mut Vec<Sge>,
    read: impl FnOnce(u64, &mut [u8]) -> bool,
) -> Result<(), RecvError> {
    sges.clear();
    if cfg.rq_size == 0 {
        return Err(RecvError::Unreadable);
    }
    let stride = (cfg.rq_stride as usize).min(MAX_RQ_STRIDE);
    // Small strides (one to four SGEs) do not pay for zeroing `MAX_RQ_STRIDE` bytes.
    let mut small = [0u8; 64];
    let mut big;
    let raw: &mut [u8] = if stride <= small.len() {
        &mut small
    } else {
        big = [0u8; MAX_RQ_STRIDE];
        &mut big
    };
    let iova = cfg
        .rq_iova(counter & (cfg.rq_size - 1))
        .ok_or(RecvError::Unreadable)?;
    if !read(iova, &mut raw[..stride]) {
        return Err(RecvError::Unreadable);
    }
    parse_segs(fw, cfg.pd, &raw[..stride], sges)
}

/// Fills `sges` with the data segments in `raw` (up to an lkey `MLX5_INVALID_LKEY`
/// entry or the end), each checked for local write access in PD `pd`.
pub fn parse_segs(
    fw: &Firmware,
    pd: u32,
    raw: &[u8],
    sges: &mut Vec<Sge>,
) -> Result<(), RecvError> {
    sges.clear();
    for seg in raw.chunks_exact(16) {
        let Ok(d) = WqeDataSeg::read_from(seg) else {
            break;
        };
        if d.lkey() == MLX5_INVALID_LKEY {
            break;
        }
        let len = match d.byte_count() {
            0 => 1u64 << 31,
            n => u64::from(n),
        };
        if mem::check(fw, d.lkey(), pd, Need::LocalWrite, d.addr(), len).is_err() {
            return Err(RecvError::Prot);
        }
        sges.push(Sge {
            addr: d.addr(),
            len,
            key: d.lkey(),
        });
    }
    Ok(())
}

/// Reads only the index, opcode and size of the WQE at `pos` (to flush it).
pub fn peek_send(io: &Iommu, cfg: &QpCfg, pos: u32) -> (u16, u8, u32) {
    let mut raw = [0u8; 64];
    if !read_wqebb(io, cfg, pos, &mut raw) {
        return (pos as u16, 0, 1);
    }
    match WqeCtrlSeg::read_from(&raw[..16]) {
        Ok(c) => (
            c.wqe_index(),
            c.opcode(),
            (usize::from(c.ds()).div_ceil(4) as u32).max(1),
        ),
        Err(_) => (pos as u16, 0, 1),
    }
}

//! Completion queues: `CREATE_CQ` over a DMA ring with its doorbell record
//! (`mlx5-controlpath.md` §4.5), polled with the [`ring`](crate::ring) consumer and
//! turned into [`WorkCompletion`]s (`mlx5-datapath.md` §7, §8.4).

use std::sync::{Arc, Mutex};

use ferroverbs_hw::control::cmd::{new_input, Opcode};
use ferroverbs_hw::control::cq::{create_cq_input, create_cq_out, destroy_cq_in, destroy_cq_out};
use ferroverbs_hw::datapath::cqe::{
    Cqe64, MLX5_CQE_REQ, MLX5_CQE_REQ_ERR, MLX5_CQE_RESP_ERR, MLX5_CQE_RESP_SEND,
    MLX5_CQE_RESP_SEND_IMM, MLX5_CQE_RESP_SEND_INV, MLX5_CQE_RESP_WR_IMM,
};
use ferroverbs_hw::datapath::dbr::{CqArmCmd, MLX5_CQ_ARM_DB, MLX5_CQ_SET_CI};
use ferroverbs_hw::datapath::uar::uar_bar_offset;
use ferroverbs_hw::datapath::wqe::{
    MLX5_OPCODE_ATOMIC_CS, MLX5_OPCODE_ATOMIC_FA, MLX5_OPCODE_RDMA_READ,
};
use ferroverbs_hw::{Bus, DmaPerm};

use super::fastmem::{FastMem, FastWord};
use super::qp::WqShared;
use super::{exec, Error, Result, WcFlags, WcOpcode, WcStatus, WorkCompletion};
use crate::dma::{DmaBuf, PAGE_SIZE};
use crate::ring::{self, CqConfig, QueueMem};
use crate::Context;

/// Bytes of one CQE (64-byte CQEs only).
const CQE_BYTES: usize = 64;

type CqRing<B> = ring::CompletionQueue<FastMem<B>, FastWord<B>>;

/// The firmware CQ and its memory, shared by the [`CompletionQueue`] handle and every
/// QP that uses the CQ: `DESTROY_CQ` happens when the last of them goes, and the
/// memory is released after it.
pub(crate) struct CqCore<'ctx, B: Bus> {
    pub(super) ctx: &'ctx Context<B>,
    cqn: u32,
    _buf: Arc<DmaBuf<B>>,
    /// Whether `DESTROY_CQ` is still due.
    live: std::sync::atomic::AtomicBool,
}

impl<B: Bus> CqCore<'_, B> {
    pub(crate) fn cqn(&self) -> u32 {
        self.cqn
    }

    fn destroy(&self) -> Result<()> {
        let mut input = new_input(Opcode::DestroyCq, 0, destroy_cq_in::SIZE);
        destroy_cq_in::cqn.set(&mut input, u64::from(self.cqn));
        exec(self.ctx, &input, destroy_cq_out::SIZE).map(|_| ())
    }
}

impl<B: Bus> Drop for CqCore<'_, B> {
    fn drop(&mut self) {
        if !self.live.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        if let Err(e) = self.destroy() {
            tracing::warn!(cqn = self.cqn, error = %e, "DESTROY_CQ failed");
        }
    }
}

/// A completion queue.
///
/// [`CompletionQueue::poll`] takes `&mut self`: one thread polls a CQ at a time, and
/// polling takes no lock. QPs keep a share of the firmware CQ, so dropping this handle
/// while QPs use the CQ defers `DESTROY_CQ` until the last of them is destroyed;
/// [`CompletionQueue::destroy`] reports that case as [`Error::CqInUse`] instead.
pub struct CompletionQueue<'ctx, B: Bus> {
    p: Poller<B>,
    core: Arc<CqCore<'ctx, B>>,
}

/// The consumer side of a CQ: its ring, and the QPs whose completions arrive there.
/// Everything the poll path touches lives here.
pub(crate) struct Poller<B: Bus> {
    ring: CqRing<B>,
    bus: Arc<B>,
    /// The QPs whose completions come here. Only locked by QP creation (`&self`);
    /// `poll` reaches it through `Mutex::get_mut` under `&mut self`, without locking.
    qps: Mutex<Vec<Arc<WqShared>>>,
    /// Index in `qps` of the last QP found.
    last: usize,
    /// CQEs of QPs this CQ does not know (destroyed QPs), skipped.
    pub(crate) unknown: u64,
    /// Entries in the ring.
    pub(crate) ncqe: u32,
    /// The ring memory (and the doorbell record after it).
    pub(crate) buf: Arc<DmaBuf<B>>,
    /// The ring, for the owner-byte test of an empty poll.
    owners: FastMem<B>,
    /// Offset in `owners` of the `op_own` byte the next poll tests.
    next_owner: usize,
    /// The owner bit that entry has once software owns it (wrap parity of the
    /// consumer index).
    next_parity: u8,
}

impl<B: Bus> Poller<B> {
    /// A consumer of `ncqe` (a power of two) entries over fresh DMA memory; every
    /// entry is marked invalid. `cqn` and `uar` are used for arming.
    pub(crate) fn new(bus: &Arc<B>, ncqe: u32, cqn: u32, uar: u32) -> Result<Self> {
        let ring_len = ncqe as usize * CQE_BYTES;
        // The doorbell record (8 bytes) lives right after the ring, in the same
        // allocation.
        let buf = Arc::new(DmaBuf::new(bus, ring_len + 64, DmaPerm::RW)?);
        let mut ring = Self::ring(&buf, ncqe, cqn, uar)?;
        ring.init_entries();
        let owners =
            FastMem::new(&buf, 0, ring_len).ok_or(Error::InvalidArgument("CQ geometry"))?;
        let next_owner = ring.owner_offset();
        Ok(Poller {
            owners,
            next_owner,
            next_parity: 0,
            ring,
            bus: Arc::clone(bus),
            qps: Mutex::new(Vec::new()),
            last: 0,
            unknown: 0,
            ncqe,
            buf,
        })
    }

    fn ring(buf: &Arc<DmaBuf<B>>, ncqe: u32, cqn: u32, uar: u32) -> Result<CqRing<B>> {
        let ring_len = ncqe as usize * CQE_BYTES;
        let window =
            |off, len| FastMem::new(buf, off, len).ok_or(Error::InvalidArgument("CQ geometry"));
        let word = |off| FastWord::new(buf, off).ok_or(Error::InvalidArgument("CQ geometry"));
        CqRing::new(
            window(0, ring_len)?,
            word(ring_len + 4 * MLX5_CQ_SET_CI)?,
            word(ring_len + 4 * MLX5_CQ_ARM_DB)?,
            CqConfig {
                cqn,
                ncqe,
                cqe_size: CQE_BYTES,
                uar: uar_bar_offset(uar),
            },
        )
        .map_err(|_| Error::InvalidArgument("CQ geometry"))
    }

    /// Sets the CQ number (known once the firmware created the CQ).
    pub(crate) fn set_cqn(&mut self, cqn: u32, uar: u32) -> Result<()> {
        self.ring = Self::ring(&self.buf, self.ncqe, cqn, uar)?;
        Ok(())
    }

    /// The doorbell record's IOVA.
    pub(crate) fn dbr_iova(&self) -> u64 {
        self.buf.iova() + (self.ncqe as usize * CQE_BYTES) as u64
    }

    /// Routes the completions of a QP here.
    pub(crate) fn attach(&self, qp: Arc<WqShared>) {
        let mut v = self.qps.lock().unwrap_or_else(|p| p.into_inner());
        v.retain(|q| q.alive());
        v.push(qp);
    }

    fn live_qps(&self) -> usize {
        self.qps
            .lock()
            .map(|v| v.iter().filter(|q| q.alive()).count())
            .unwrap_or(0)
    }

    /// See [`CompletionQueue::poll`].
    #[inline(always)]
    pub(crate) fn poll(&mut self, wc: &mut [WorkCompletion]) -> usize {
        // The common empty case first, without entering the ring: the owner byte of
        // the next entry, whose offset and expected owner bit were computed when the
        // last poll ended (`sw_owned`: opcode not INVALID, owner bit = wrap parity).
        let op_own = self.owners.load_u8(self.next_owner);
        if op_own >= 0xf0 || (op_own & 1) != self.next_parity {
            return 0;
        }
        self.poll_owned(wc)
    }

    /// See [`CompletionQueue::poll_one`]: the empty test of [`Poller::poll`], then,
    /// out of line, one entry taken and decoded (no loop over a slice).
    #[inline(always)]
    pub(crate) fn poll_one(&mut self) -> Option<WorkCompletion> {
        let op_own = self.owners.load_u8(self.next_owner);
        if op_own >= 0xf0 || (op_own & 1) != self.next_parity {
            return None;
        }
        self.take_one()
    }

    /// The rest of [`Poller::poll_one`] once the next entry is ours: take it, decode
    /// it, publish the consumer index and move the owner test on by one entry (no
    /// recomputation from the consumer index). A successful requester CQE is decoded
    /// from one 20-byte read of the entry's tail (byte count .. `op_own`); every
    /// other kind goes through [`decode`]. A CQE of an unknown QP (or of a kind verbs
    /// does not report) is skipped, as `poll` skips it, and the next entry is tried.
    #[inline(never)]
    fn take_one(&mut self) -> Option<WorkCompletion> {
        loop {
            // The read barrier and the consumer index (the entry's offset is ours).
            self.ring.take_owned(&*self.bus);
            let own = self.next_owner;
            // 64-byte entries: the `Cqe64` starts 63 bytes before its owner byte.
            let base = own - (CQE_BYTES - 1);
            let next = own + CQE_BYTES;
            if next >= self.owners.len() {
                self.next_owner = next - self.owners.len();
                self.next_parity ^= 1;
            } else {
                self.next_owner = next;
            }
            // `struct mlx5_cqe64` bytes 44..64: byte_cnt, (8 bytes), sop_drop_qpn,
            // wqe_counter, signature, op_own.
            let mut t = [0u8; 20];
            self.owners.read(base + 44, &mut t);
            let sop_drop_qpn = u32::from_be_bytes([t[12], t[13], t[14], t[15]]);
            let qpn = sop_drop_qpn & 0x00ff_ffff;
            if t[19] >> 4 == MLX5_CQE_REQ {
                let qps = self.qps.get_mut().unwrap_or_else(|p| p.into_inner());
                if let Some(qp) = find(qps, qpn, &mut self.last) {
                    let counter = u16::from_be_bytes([t[16], t[17]]);
                    let d = REQ_DECODE[(sop_drop_qpn >> 24) as usize];
                    let byte_cnt = u32::from_be_bytes([t[0], t[1], t[2], t[3]]);
                    let wc = WorkCompletion {
                        wr_id: qp.sq_retire(counter),
                        opcode: d.opcode,
                        byte_len: (byte_cnt & d.len_mask) | d.len_const,
                        wc_flags: d.flags,
                        qp_num: qpn,
                        ..WorkCompletion::default()
                    };
                    self.ring.update_ci();
                    return Some(wc);
                }
            } else if let Some(wc) = self.decode_one(base) {
                return Some(wc);
            }
            self.ring.update_ci();
            self.unknown += 1;
            let op_own = self.owners.load_u8(self.next_owner);
            if op_own >= 0xf0 || (op_own & 1) != self.next_parity {
                return None;
            }
        }
    }

    /// [`decode`] of the entry at `base` (any kind), and on success the consumer
    /// index published; out of line.
    #[inline(never)]
    fn decode_one(&mut self, base: usize) -> Option<WorkCompletion> {
        let qps = self.qps.get_mut().unwrap_or_else(|p| p.into_inner());
        let mut wc = WorkCompletion::default();
        if decode(self.ring.mem(), base, qps, &mut self.last, &mut wc) {
            self.ring.update_ci();
            Some(wc)
        } else {
            None
        }
    }

    /// The rest of [`Poller::poll`] once the next entry is ours: kept out of line so
    /// that an empty poll costs only the test above (no register saves of the loop).
    /// The first entry is not tested again; the read barrier comes with it.
    #[inline(never)]
    fn poll_owned(&mut self, wc: &mut [WorkCompletion]) -> usize {
        if wc.is_empty() {
            return 0;
        }
        let bus = &*self.bus;
        let qps = self.qps.get_mut().unwrap_or_else(|p| p.into_inner());
        let mut n = 0;
        let mut off = self.ring.take_owned(bus);
        loop {
            if decode(self.ring.mem(), off, qps, &mut self.last, &mut wc[n]) {
                n += 1;
            } else {
                self.unknown += 1;
            }
            if n >= wc.len() {
                break;
            }
            match self.ring.take(bus) {
                Some(o) => off = o,
                None => break,
            }
        }
        self.ring.update_ci();
        let ci = self.ring.consumer_index();
        self.next_owner = self.ring.owner_offset();
        self.next_parity = u8::from(ci & self.ncqe != 0);
        n
    }

    pub(crate) fn arm(&mut self, cmd: CqArmCmd) {
        self.ring.arm(&*self.bus, cmd);
    }
}

impl<B: Bus> std::fmt::Debug for CompletionQueue<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("cqn", &self.core.cqn)
            .field("cqe", &(self.p.ncqe - 1))
            .field("consumer_index", &self.p.ring.consumer_index())
            .finish()
    }
}

impl<B: Bus> Context<B> {
    /// Creates a CQ with room for at least `cqe` completions (`CREATE_CQ`; the ring
    /// holds the next power of two above `cqe`, as rdma-core sizes it).
    pub fn create_cq(&self, cqe: u32) -> Result<CompletionQueue<'_, B>> {
        self.create_cq_on(cqe, None, false)
    }

    /// [`Context::create_cq`] with its completion events on EQ `eqn` (a completion
    /// channel's) instead of the async EQ, and overrun ignored (`cqc.oi`) if asked.
    pub(crate) fn create_cq_on(
        &self,
        cqe: u32,
        eqn: Option<u8>,
        ignore_overrun: bool,
    ) -> Result<CompletionQueue<'_, B>> {
        use ferroverbs_hw::control::caps::cmd_hca_cap as g;
        let max_log = self.cap(g::log_max_cq_sz).min(24);
        let max = (1u64 << max_log) - 1;
        if cqe == 0 || u64::from(cqe) > max {
            return Err(Error::CapExceeded {
                what: "CQ entries",
                requested: cqe.into(),
                max,
            });
        }
        let ncqe = (cqe + 1).next_power_of_two();
        let log_size = ncqe.trailing_zeros() as u8;
        let uar = self.uar_index().ok_or(Error::InvalidArgument(
            "the context has no UAR (bring-up incomplete)",
        ))?;
        let eqn = eqn.or(self.async_eqn()).ok_or(Error::InvalidArgument(
            "the context has no EQ (bring-up incomplete)",
        ))?;
        let mut p = Poller::new(self.bus(), ncqe, 0, uar)?;
        let ring_len = ncqe as usize * CQE_BYTES;
        let pas: Vec<u64> = (0..ring_len.div_ceil(PAGE_SIZE) as u64)
            .map(|i| p.buf.iova() + i * PAGE_SIZE as u64)
            .collect();
        let mut input = create_cq_input(log_size, uar, u32::from(eqn), p.dbr_iova(), 0, &pas);
        if ignore_overrun {
            use ferroverbs_hw::control::cq::{cqc, in_command};
            in_command(cqc::oi).set(&mut input, 1);
        }
        let out = exec(self, &input, create_cq_out::SIZE)?;
        let cqn = create_cq_out::cqn.get(&out) as u32;
        p.set_cqn(cqn, uar)?;
        let buf = Arc::clone(&p.buf);
        Ok(CompletionQueue {
            p,
            core: Arc::new(CqCore {
                ctx: self,
                cqn,
                _buf: buf,
                live: std::sync::atomic::AtomicBool::new(true),
            }),
        })
    }
}

impl<'ctx, B: Bus> CompletionQueue<'ctx, B> {
    /// The CQ number.
    pub fn cqn(&self) -> u32 {
        self.core.cqn
    }

    /// How many completions the ring holds (`ibv_cq.cqe`: entries - 1).
    pub fn capacity(&self) -> u32 {
        self.p.ncqe - 1
    }

    /// The consumer index (CQEs polled; 32 bits, the device sees the low 24).
    pub(crate) fn consumer_index(&self) -> u32 {
        self.p.ring.consumer_index()
    }

    /// Completions skipped because their QP is gone.
    pub fn skipped(&self) -> u64 {
        self.p.unknown
    }

    /// Bytes of host memory the CQ uses: the ring and its doorbell record (rounded to
    /// pages), and the bookkeeping of this handle.
    pub fn footprint(&self) -> (usize, usize) {
        let ring = self.p.ncqe as usize * CQE_BYTES;
        let mem = (ring + 64).div_ceil(PAGE_SIZE) * PAGE_SIZE;
        (
            mem,
            std::mem::size_of::<Self>() + std::mem::size_of::<CqCore<'ctx, B>>(),
        )
    }

    pub(crate) fn core(&self) -> &Arc<CqCore<'ctx, B>> {
        &self.core
    }

    /// Routes the completions of a new QP here (QP creation).
    pub(crate) fn attach(&self, qp: Arc<WqShared>) {
        self.p.attach(qp)
    }

    /// Polls up to `wc.len()` completions into `wc` and returns how many were
    /// written. Never blocks, allocates, locks or makes a system call.
    ///
    /// Each CQE retires its work request at the QP (and, for a requester CQE, every
    /// unsignaled one posted before it), so the QP can reuse the ring slots.
    #[inline]
    pub fn poll(&mut self, wc: &mut [WorkCompletion]) -> usize {
        self.p.poll(wc)
    }

    /// Polls one completion (the fast entry beside [`CompletionQueue::poll`], for
    /// loops that handle completions one at a time): the same work completion `poll`
    /// would write into a one-entry slice, and the same retiring of the work request
    /// at its QP. `None` when the CQ is empty. Never blocks, allocates, locks or
    /// makes a system call.
    #[inline]
    pub fn poll_one(&mut self) -> Option<WorkCompletion> {
        self.p.poll_one()
    }

    /// Requests a completion event for the next completion (or the next solicited
    /// one): arms the CQ (`mlx5_arm_cq`).
    pub fn req_notify(&mut self, solicited_only: bool) {
        let cmd = if solicited_only {
            CqArmCmd::Solicited
        } else {
            CqArmCmd::NextCompletion
        };
        self.p.arm(cmd);
    }

    /// Counts one completion event: the arm sequence number advances (rdma-core
    /// `mlx5_cq_event`).
    pub(crate) fn count_event(&mut self) {
        self.p.ring.ack_event();
    }

    /// Destroys the CQ now (`DESTROY_CQ`). Refused with [`Error::CqInUse`] while
    /// queue pairs still use the CQ; the handle comes back with any error.
    #[allow(clippy::result_large_err)]
    pub fn destroy(self) -> std::result::Result<(), (Self, Error)> {
        if Arc::strong_count(&self.core) > 1 {
            let qps = self.p.live_qps().max(1);
            return Err((self, Error::CqInUse { qps }));
        }
        match self.core.destroy() {
            Ok(()) => {
                // Done: the memory goes when `self` drops, after the firmware object.
                self.core
                    .live
                    .store(false, std::sync::atomic::Ordering::Relaxed);
                Ok(())
            }
            Err(e) => Err((self, e)),
        }
    }
}

/// Finds the live QP `qpn` in `qps`, trying `last` first.
#[inline]
fn find<'q>(qps: &'q [Arc<WqShared>], qpn: u32, last: &mut usize) -> Option<&'q WqShared> {
    if let Some(q) = qps.get(*last) {
        if q.qpn == qpn && q.alive() {
            return Some(q);
        }
    }
    let i = qps.iter().position(|q| q.qpn == qpn && q.alive())?;
    *last = i;
    Some(&qps[i])
}

/// Writes the work completion of the CQE at byte `off` of the ring `mem` into `wc`,
/// retiring its work request at its QP; `false` (and `wc` unspecified) for a CQE of an
/// unknown QP or of a kind verbs does not report (resize, signature).
///
/// Reads only the last 32 bytes of the entry (`imm_inval_pkey` .. `op_own`) for the
/// common requester completion; every other kind copies the whole entry.
#[inline(always)]
fn decode(
    mem: &FastMem<impl Bus>,
    off: usize,
    qps: &[Arc<WqShared>],
    last: &mut usize,
    wc: &mut WorkCompletion,
) -> bool {
    let mut t = [0u8; 32];
    mem.read(off + 32, &mut t);
    let be32 = |i: usize| u32::from_be_bytes([t[i], t[i + 1], t[i + 2], t[i + 3]]);
    // `struct mlx5_cqe64` from byte 32: byte_cnt at 44, sop_drop_qpn at 56,
    // wqe_counter at 60, op_own at 63.
    let sop_drop_qpn = be32(56 - 32);
    let qpn = sop_drop_qpn & 0x00ff_ffff;
    let Some(qp) = find(qps, qpn, last) else {
        return false;
    };
    let counter = u16::from_be_bytes([t[60 - 32], t[61 - 32]]);
    if t[63 - 32] >> 4 != MLX5_CQE_REQ {
        return decode_other(mem, off, qp, qpn, counter, wc);
    }
    let op = (sop_drop_qpn >> 24) as usize;
    let d = REQ_DECODE[op];
    *wc = WorkCompletion {
        wr_id: qp.sq_retire(counter),
        opcode: d.opcode,
        byte_len: (be32(44 - 32) & d.len_mask) | d.len_const,
        wc_flags: d.flags,
        qp_num: qpn,
        ..WorkCompletion::default()
    };
    true
}

/// What a successful requester CQE of a send opcode reports (rdma-core
/// `handle_good_req`): the completion opcode, the flags, and the byte count as
/// `(byte_cnt & len_mask) | len_const` (READ: the CQE's byte count; atomics: 8;
/// otherwise 0).
#[derive(Clone, Copy)]
struct ReqDecode {
    opcode: WcOpcode,
    flags: WcFlags,
    len_mask: u32,
    len_const: u32,
}

/// [`ReqDecode`] of every send opcode byte, built from [`WcOpcode::of_send`] and
/// [`WcOpcode::send_has_imm`]: one indexed load instead of a chain of compares.
const REQ_DECODE: [ReqDecode; 256] = {
    let mut t = [ReqDecode {
        opcode: WcOpcode::Send,
        flags: WcFlags::empty(),
        len_mask: 0,
        len_const: 0,
    }; 256];
    let mut op = 0;
    while op < 256 {
        let o = op as u8;
        t[op] = ReqDecode {
            opcode: WcOpcode::of_send(o),
            flags: if WcOpcode::send_has_imm(o) {
                WcFlags::WITH_IMM
            } else {
                WcFlags::empty()
            },
            len_mask: if o == MLX5_OPCODE_RDMA_READ {
                u32::MAX
            } else {
                0
            },
            len_const: if o == MLX5_OPCODE_ATOMIC_CS || o == MLX5_OPCODE_ATOMIC_FA {
                8
            } else {
                0
            },
        };
        op += 1;
    }
    t
};

/// [`decode`] of the CQEs other than successful requester completions.
#[inline(never)]
fn decode_other(
    mem: &FastMem<impl Bus>,
    off: usize,
    qp: &WqShared,
    qpn: u32,
    counter: u16,
    wc: &mut WorkCompletion,
) -> bool {
    let mut bytes = [0u8; Cqe64::SIZE];
    mem.read(off, &mut bytes);
    let cqe: Cqe64 = zerocopy::transmute!(bytes);
    *wc = WorkCompletion {
        qp_num: qpn,
        ..WorkCompletion::default()
    };
    match cqe.opcode() {
        op @ (MLX5_CQE_RESP_SEND
        | MLX5_CQE_RESP_SEND_IMM
        | MLX5_CQE_RESP_SEND_INV
        | MLX5_CQE_RESP_WR_IMM) => {
            wc.wr_id = qp.rq_retire(counter);
            wc.byte_len = cqe.byte_cnt();
            wc.src_qp = cqe.src_qpn();
            // "g" (rdma-core `handle_responder`): a GRH heads the buffer (UD).
            let grh = if cqe.grh_type() != 0 {
                WcFlags::GRH
            } else {
                WcFlags::empty()
            };
            match op {
                MLX5_CQE_RESP_WR_IMM => {
                    wc.opcode = WcOpcode::RecvRdmaWithImm;
                    wc.wc_flags = WcFlags::WITH_IMM;
                    wc.imm_data = cqe.imm();
                }
                MLX5_CQE_RESP_SEND_IMM => {
                    wc.opcode = WcOpcode::Recv;
                    wc.wc_flags = WcFlags::WITH_IMM;
                    wc.imm_data = cqe.imm();
                }
                MLX5_CQE_RESP_SEND_INV => {
                    wc.opcode = WcOpcode::Recv;
                    wc.wc_flags = WcFlags::WITH_INV;
                    wc.imm_data = cqe.imm();
                }
                _ => wc.opcode = WcOpcode::Recv,
            }
            wc.wc_flags = wc.wc_flags | grh;
        }
        MLX5_CQE_REQ_ERR => {
            let e = cqe.as_err();
            wc.wr_id = qp.sq_retire(counter);
            wc.status = WcStatus::from_syndrome(e.syndrome());
            wc.vendor_err = e.vendor_err_synd();
            wc.opcode = WcOpcode::of_send(e.wqe_opcode());
        }
        MLX5_CQE_RESP_ERR => {
            let e = cqe.as_err();
            wc.wr_id = qp.rq_retire(counter);
            wc.status = WcStatus::from_syndrome(e.syndrome());
            wc.vendor_err = e.vendor_err_synd();
            wc.opcode = WcOpcode::Recv;
        }
        _ => return false,
    }
    true
}

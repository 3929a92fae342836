//! Completion queues: `CREATE_CQ` over a DMA ring with its doorbell record
//! (`mlx5-controlpath.md` §4.5), polled with the [`ring`](crate::ring) consumer and
//! turned into [`WorkCompletion`]s (`mlx5-datapath.md` §7, §8.4).

use std::sync::{Arc, Mutex};

use ferroverbs_hw::control::cmd::{new_input, Opcode};
use ferroverbs_hw::control::cq::{create_cq_input, create_cq_out, destroy_cq_in, destroy_cq_out};
use ferroverbs_hw::datapath::cqe::{
    Cqe64, MLX5_CQE_REQ, MLX5_CQE_REQ_ERR, MLX5_CQE_RESP_ERR, MLX5_CQE_RESP_SEND,
    MLX5_CQE_RESP_SEND_IMM, MLX5_CQE_RESP_SEND_INV, MLX5_CQE_RESP_WR_IMM, MLX5_INLINE_SCATTER_32,
    MLX5_INLINE_SCATTER_64,
};
use ferroverbs_hw::datapath::dbr::{CqArmCmd, MLX5_CQ_ARM_DB, MLX5_CQ_SET_CI};
use ferroverbs_hw::datapath::uar::uar_bar_offset;
use ferroverbs_hw::datapath::wqe::{
    MLX5_OPCODE_ATOMIC_CS, MLX5_OPCODE_ATOMIC_FA, MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_UMR,
};
use ferroverbs_hw::{Bus, DmaPerm};

use super::fastmem::{put_tail, CqeAt, CqeCursor, FastMem, FastWord};
use super::qp::{WqShared, CQE_QPN_MASK};
use super::wc::{WcTail, WcTailBits};
use super::{exec, Error, Result, WcFlags, WcOpcode, WcStatus, WorkCompletion};
use crate::dma::{DmaBuf, PAGE_SIZE};
use crate::ring::{self, CqConfig, QueueMem};
use crate::Context;

mod clean;
mod resize;

/// The size of a CQ's entries (`cqc.cqe_sz`; libmlx5 takes it from `MLX5_CQE_SIZE` or
/// `mlx5dv_cq_init_attr.cqe_size`, rdma-core `providers/mlx5/verbs.c`
/// `get_cqe_size`).
///
/// A 128-byte entry holds the 64-byte CQE in its second half. Its first half is where
/// the device places a received message of 33 to 64 bytes (responder scatter to CQE,
/// `qpc.cs_res` `MLX5_RES_SCAT_DATA64_CQE`), or the data of an RDMA READ response or
/// an atomic result of up to 64 bytes (requester, `qpc.cs_req`
/// `MLX5_REQ_SCAT_DATA64_CQE`), which Linux's `mlx5_ib` asks for on QPs whose CQ has
/// 128-byte CQEs (`configure_responder_scat_cqe`, `configure_requester_scat_cqe`);
/// the driver asks for the same ([`QpInitAttr::scatter_to_cqe`](super::QpInitAttr::scatter_to_cqe)).
///
/// The inline poll paths of a CQ ([`CompletionQueue::poll`] of a requester CQE or a
/// received SEND of the QP seen last, [`CompletionQueue::poll_hot_req`]) are those of
/// 64-byte CQEs, which step by 64 bytes at no cost: a CQ of 128-byte CQEs takes every
/// entry out of line, trying the same QPs first there (`docs/performance.md` has the
/// cost: 80 instructions per `poll_one` against 37).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CqeSize {
    /// 64-byte CQEs (`MLX5_CQC_CQE_SZ_64_BYTES`), rdma-core's default.
    #[default]
    Bytes64,
    /// 128-byte CQEs (`MLX5_CQC_CQE_SZ_128_BYTES`).
    Bytes128,
}

impl CqeSize {
    /// Bytes per entry: 64 or 128.
    pub const fn bytes(self) -> usize {
        match self {
            CqeSize::Bytes64 => 64,
            CqeSize::Bytes128 => 128,
        }
    }

    /// The size of `bytes` (64 or 128); `None` for any other.
    pub const fn from_bytes(bytes: usize) -> Option<CqeSize> {
        match bytes {
            64 => Some(CqeSize::Bytes64),
            128 => Some(CqeSize::Bytes128),
            _ => None,
        }
    }

    /// `cqc.cqe_sz` of the size.
    fn cqc_value(self) -> u64 {
        use ferroverbs_hw::control::cq::CqcCqeSz;
        match self {
            CqeSize::Bytes64 => CqcCqeSz::Bytes64.value().into(),
            CqeSize::Bytes128 => CqcCqeSz::Bytes128.value().into(),
        }
    }
}

type CqRing<B> = ring::CompletionQueue<FastMem<B>, FastWord<B>>;

/// The firmware CQ and its memory, shared by the [`CompletionQueue`] handle and every
/// QP that uses the CQ: `DESTROY_CQ` happens when the last of them goes, and the
/// memory is released after it.
pub(crate) struct CqCore<'ctx, B: Bus> {
    pub(super) ctx: &'ctx Context<B>,
    cqn: u32,
    _buf: Arc<DmaBuf<B>>,
    /// The ring a resize moved the CQ to ([`CompletionQueue::resize`]), kept until
    /// after `DESTROY_CQ` as `_buf` is (which keeps the doorbell record).
    resized: Mutex<Option<Arc<DmaBuf<B>>>>,
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
    qps: Mutex<QpTable>,
    /// Index in `qps` of the last QP found.
    last: usize,
    /// The QP of the last successful requester CQE taken out of line (a destroyed
    /// placeholder at first): [`Poller::poll_one`] tries it first, matching the
    /// CQE's raw QPN word against its key (QPN and liveness in one compare). Always
    /// a clone of an entry of `qps`, which keeps that entry while it is hot.
    hot: Arc<WqShared>,
    /// The QP of the last responder CQE decoded out of line, of a QP with its own RQ
    /// (a destroyed placeholder at first): [`Poller::poll`] takes a received SEND of
    /// it inline, matching the CQE's raw QPN word against its receive key
    /// ([`WqShared::matches_recv`]). Always a clone of an entry of `qps`, as `hot`.
    hot_rx: Arc<WqShared>,
    /// [`HOT_REQ_MASK`], as data: the compare in [`Poller::poll_hot_req`] then takes
    /// it as a memory operand instead of materialising the 64-bit constant. Never
    /// changes.
    hot_mask: u64,
    /// On a CQ of 128-byte CQEs (whose `hot` and `hot_rx` stay the destroyed
    /// placeholder: the inline paths step by 64 bytes), what `hot` and `hot_rx` are
    /// on the others, tried first by [`Poller::decode_taken`] out of line
    /// ([`Poller::take_wide_hot`]). Clones of entries of `qps`, as `hot`.
    wide_hot: Arc<WqShared>,
    wide_hot_rx: Arc<WqShared>,
    /// CQEs of QPs this CQ does not know (destroyed QPs), skipped.
    pub(crate) unknown: u64,
    /// Entries in the ring.
    pub(crate) ncqe: u32,
    /// The ring memory (and the doorbell record after it).
    pub(crate) buf: Arc<DmaBuf<B>>,
    /// The `op_own` byte the next poll tests, with the owner bit software expects
    /// there (wrap parity of the consumer index).
    cur: CqeCursor<B>,
}

impl<B: Bus> Poller<B> {
    /// A consumer of `ncqe` (a power of two) entries of `size` over fresh DMA
    /// memory; every entry is marked invalid. `cqn` and `uar` are used for arming.
    pub(crate) fn new(bus: &Arc<B>, ncqe: u32, size: CqeSize, cqn: u32, uar: u32) -> Result<Self> {
        let ring_len = ncqe as usize * size.bytes();
        // The doorbell record (8 bytes) lives right after the ring, in the same
        // allocation.
        let buf = Arc::new(DmaBuf::new(bus, ring_len + 64, DmaPerm::RW)?);
        let mut ring = Self::ring(&buf, ncqe, size, cqn, uar)?;
        ring.init_entries();
        let cur = CqeCursor::new(&buf, ncqe, size.bytes(), ring_len + 4 * MLX5_CQ_SET_CI)
            .ok_or(Error::InvalidArgument("CQ geometry"))?;
        // The hot QP is always one of `qps` (by identity), so that replacing it in
        // the poll path never drops the last reference (no deallocation there).
        let hot = Arc::new(WqShared::dead());
        Ok(Poller {
            cur,
            ring,
            bus: Arc::clone(bus),
            qps: Mutex::new(QpTable::new(Arc::clone(&hot))),
            last: 0,
            hot_rx: Arc::clone(&hot),
            wide_hot: Arc::clone(&hot),
            wide_hot_rx: Arc::clone(&hot),
            hot,
            hot_mask: HOT_REQ_MASK,
            unknown: 0,
            ncqe,
            buf,
        })
    }

    fn ring(
        buf: &Arc<DmaBuf<B>>,
        ncqe: u32,
        size: CqeSize,
        cqn: u32,
        uar: u32,
    ) -> Result<CqRing<B>> {
        let ring_len = ncqe as usize * size.bytes();
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
                cqe_size: size.bytes(),
                uar: uar_bar_offset(uar),
            },
        )
        .map_err(|_| Error::InvalidArgument("CQ geometry"))
    }

    /// Sets the CQ number (known once the firmware created the CQ).
    pub(crate) fn set_cqn(&mut self, cqn: u32, uar: u32) -> Result<()> {
        self.ring = Self::ring(&self.buf, self.ncqe, self.cqe_size(), cqn, uar)?;
        Ok(())
    }

    /// The size of the entries.
    pub(crate) fn cqe_size(&self) -> CqeSize {
        if self.cur.stride() == 128 {
            CqeSize::Bytes128
        } else {
            CqeSize::Bytes64
        }
    }

    /// The doorbell record's IOVA (right after the ring the CQ was created with).
    pub(crate) fn dbr_iova(&self) -> u64 {
        self.buf.iova() + (self.ncqe as usize * self.cur.stride()) as u64
    }

    /// Routes the completions of a QP here.
    pub(crate) fn attach(&self, qp: Arc<WqShared>) {
        let mut t = self.qps.lock().unwrap_or_else(|p| p.into_inner());
        // Destroyed QPs go (when the list has doubled since it was last swept, so
        // that creating n QPs costs O(n)), but not the hot one (`poll_one` holds a
        // clone of an entry of this list, and must never hold the last reference).
        if t.list.len() >= t.swept_len.max(8) * 2 {
            t.list.retain(|q| {
                q.alive()
                    || [&self.hot, &self.hot_rx, &self.wide_hot, &self.wide_hot_rx]
                        .into_iter()
                        .any(|h| Arc::ptr_eq(q, h))
            });
            t.reindex();
        }
        t.push(qp);
    }

    fn live_qps(&self) -> usize {
        self.qps
            .lock()
            .map(|t| t.list.iter().filter(|q| q.alive()).count())
            .unwrap_or(0)
    }

    /// Whether software owns the entry at the cursor (`sw_owned`: opcode not
    /// INVALID and owner bit = the expected parity), as one compare: with `x = op_own
    /// ^ parity`, the entry is software's when bit 0 of `x` is clear and `x < 0xf0`,
    /// i.e. when `x` rotated right by one is below `0x78`. Returns that rotated value
    /// (below [`OWNED_BELOW`] when owned).
    #[inline(always)]
    fn owner_test(&self) -> u8 {
        (self.cur.op_own() ^ self.cur.parity()).rotate_right(1)
    }

    /// See [`CompletionQueue::poll`].
    #[inline(always)]
    pub(crate) fn poll(&mut self, wc: &mut [WorkCompletion]) -> usize {
        // The common empty case first, without entering the ring: the owner byte of
        // the next entry at the cursor.
        if self.owner_test() >= OWNED_BELOW {
            return 0;
        }
        // One entry asked: inline, as `poll_one` takes it (the entry written in
        // place; skipped entries of unknown QPs consumed until one completes or the
        // CQ is empty, as `poll_owned` does).
        if let [out] = wc {
            return usize::from(self.take_into(out, Self::take_slow_into));
        }
        self.poll_owned(wc)
    }

    /// See [`CompletionQueue::poll_one`]: the empty test, then a successful
    /// requester CQE of the QP seen last taken inline (no register saves, no call,
    /// [`Poller::take_entry`]); everything else (other CQE kinds, another or unknown
    /// QP) out of line by [`Poller::take_slow`], with the same results as
    /// [`Poller::poll`].
    #[inline(always)]
    pub(crate) fn poll_one(&mut self) -> Option<WorkCompletion> {
        if self.owner_test() >= OWNED_BELOW {
            return None;
        }
        self.take_entry(Self::take_slow)
    }

    /// See [`CompletionQueue::poll_one_with_timestamp`]: [`Poller::poll_one`] one
    /// entry at a time, each entry's `timestamp` read (after the read barrier)
    /// before it is taken, so the timestamp is that of the entry that completes
    /// (entries skipped before it are not counted).
    #[inline]
    pub(crate) fn poll_one_with_timestamp(&mut self) -> Option<(WorkCompletion, u64)> {
        loop {
            if self.owner_test() >= OWNED_BELOW {
                return None;
            }
            let e = self.cur.entry();
            self.bus.rmb();
            // `struct mlx5_cqe64` `timestamp`: bytes 48..=55, big-endian (15 bytes
            // before `op_own`).
            let ts = u64::from_be(e.raw64::<15>());
            if let Some(wc) = self.take_entry(Self::decode_taken) {
                return Some((wc, ts));
            }
        }
    }

    /// Takes the entry at the cursor, which software owns (its owner test passed):
    /// the read barrier (before any other byte of the entry); then, if the entry is
    /// a successful requester CQE of the hot QP, its completion: the CQE's last 8
    /// bytes compared with the QP's key (QPN, CQE opcode and liveness), the fields
    /// read, the cursor moved on and the consumer index published (the device may
    /// have the entry back; the last entry of a cursor chunk out of line, without
    /// leaving this path), the `wr_id` read and the slot released at the QP, the
    /// rest from the send opcode's [`REQ_TAIL`]. Any other entry goes, the cursor
    /// moved past it (taken, neither decoded nor published), to `slow`
    /// ([`Poller::take_slow`] or [`Poller::decode_taken`]), whose result is
    /// returned. (A continuation rather than a `Result`: the completion's status is
    /// loaded from the table, so testing a `Result` or `Option` built from it would
    /// cost a compare with the niche value.)
    #[inline(always)]
    fn take_entry(
        &mut self,
        slow: impl FnOnce(&mut Self) -> Option<WorkCompletion>,
    ) -> Option<WorkCompletion> {
        let e = self.cur.entry();
        self.bus.rmb();
        // `struct mlx5_cqe64` from byte 56 (7 before op_own): sop_drop_qpn,
        // wqe_counter (its 2 bytes end the 4 from 58, 5 before), signature, op_own;
        // byte_cnt at 44 (19 before). The owner test passed: the QPN, the CQE opcode
        // (requester) and the QP's liveness are one masked compare with its key.
        let last8 = e.raw64::<7>();
        // The QP, in a register across the cursor's move (whose compiler barrier
        // would otherwise load it again).
        let hot: &WqShared = &self.hot;
        if !hot.matches(last8) {
            self.cur.advance();
            return slow(self);
        }
        let (mut wc, counter) = Self::req_completion(hot, e);
        // Every byte of the entry read: the device may have it back.
        self.cur.advance_publish();
        wc.wr_id = hot.sq_retire_word(counter);
        Some(wc)
    }

    /// The completion of the successful requester CQE `e` of `qp` (its last 8 bytes
    /// matched `qp`'s key, [`WqShared::matches`]) but its `wr_id`, and the WQE
    /// counter that names it: the fields read, the rest from the send opcode's
    /// [`REQ_TAIL`]. The caller then publishes the entry (every byte of it is read:
    /// the device may have it back) and takes the `wr_id` at the QP
    /// ([`WqShared::sq_retire_word`] of the counter), which releases the slot.
    #[inline(always)]
    fn req_completion(qp: &WqShared, e: CqeAt<'_>) -> (WorkCompletion, u32) {
        // The counter in the low 16 bits (the QPN's low bytes above it).
        let counter = u32::from_be(e.raw32::<5>());
        let op = e.byte::<7>();
        let mut wc = WorkCompletion {
            qp_num: qp.qpn,
            ..WorkCompletion::default()
        };
        let mut t = REQ_TAIL[usize::from(op)];
        if op & REQ_SPECIAL != 0 {
            // A branch taken by RDMA READs, atomics and UMRs only (not a select,
            // which would load the tail in two halves).
            std::hint::cold_path();
            if op == MLX5_OPCODE_RDMA_READ {
                t = t.with_byte_len(u32::from_be(e.raw32::<19>()));
            } else if op == MLX5_OPCODE_UMR && qp.umr_is_local_inv(counter) {
                t = LOCAL_INV_TAIL;
            }
        }
        put_tail(&mut wc, t);
        (wc, counter)
    }

    /// See [`CompletionQueue::poll_hot_req`]: the owner test and the hot QP's key
    /// compare in one, on one load of the entry's last 8 bytes
    /// ([`CqeAt::tail_atomic`]: the owner bit against the pass's parity, the CQE
    /// opcode requester (so not INVALID) and not scattered, the QPN and liveness of
    /// the hot QP, the send opcode's [`REQ_SPECIAL`] bits clear, [`HOT_REQ_MASK`]);
    /// then the read barrier, the send opcode and the counter read, and the entry
    /// taken as [`Poller::take_entry`] takes it (moved past and published, its
    /// `wr_id` retired). Nothing is taken otherwise: an empty CQ, any other entry.
    #[inline(always)]
    pub(crate) fn poll_hot_req<R>(&mut self, f: impl FnOnce(HotReq) -> R) -> Option<R> {
        // The QP, in a register across the cursor's move (whose compiler barrier
        // would otherwise load it again).
        let hot: &WqShared = &self.hot;
        let e = self.cur.entry();
        if (e.tail_atomic() ^ self.cur.owner64() ^ hot.key()) & self.hot_mask != 0 {
            return None;
        }
        // The entry is software's (its owner bit, in the load above): the rest of it
        // is read after the barrier.
        self.bus.rmb();
        let send_op = e.byte::<7>();
        let counter = u32::from_be(e.raw32::<5>());
        // Every byte of the entry read: the device may have it back.
        self.cur.advance_publish();
        let qp_num = hot.qpn;
        let wr_id = hot.sq_retire_word(counter);
        Some(f(HotReq {
            wr_id,
            qp_num,
            send_op,
        }))
    }

    /// See [`CompletionQueue::poll_each`]: each entry as [`Poller::poll_one`] takes
    /// it (a successful requester CQE of the hot QP inline, everything else by
    /// [`Poller::take_slow`]), handed to `f` where it was built.
    #[inline(always)]
    pub(crate) fn poll_each(&mut self, max: usize, mut f: impl FnMut(&WorkCompletion)) -> usize {
        let mut n = 0;
        while n < max && self.owner_test() < OWNED_BELOW {
            let e = self.cur.entry();
            self.bus.rmb();
            let hot: &WqShared = &self.hot;
            if hot.matches(e.raw64::<7>()) {
                let (mut wc, counter) = Self::req_completion(hot, e);
                self.cur.advance_publish();
                wc.wr_id = hot.sq_retire_word(counter);
                f(&wc)
            } else {
                self.cur.advance();
                match self.take_slow() {
                    Some(w) => f(&w),
                    None => break,
                }
            }
            n += 1;
        }
        n
    }

    /// The work completion of a CQE `e` of `qp` whose last 8 bytes matched its
    /// receive key ([`WqShared::matches_recv`]: a successful responder CQE of a SEND
    /// without immediate, received on the QP's own RQ while it lives): what
    /// [`decode`] reports for it (`wr_id` from the RQ slot of `wqe_counter`, retired
    /// at the QP; `byte_len` from `byte_cnt`; `src_qp` and the GRH flag from
    /// `flags_rqpn`; opcode `Recv`; the rest 0).
    #[inline(always)]
    fn recv_completion(qp: &WqShared, e: CqeAt<'_>) -> WorkCompletion {
        // `struct mlx5_cqe64`: flags_rqpn at 24 (39 before op_own at 63), byte_cnt
        // at 44 (19 before), the counter in the low 16 bits of the 4 bytes from 58
        // (5 before).
        const { assert!(std::mem::offset_of!(Cqe64, flags_rqpn) == 63 - 39) };
        const { assert!(std::mem::offset_of!(Cqe64, byte_cnt) == 63 - 19) };
        const { assert!(std::mem::offset_of!(Cqe64, wqe_counter) + 2 == 63 - 5 + 4) };
        let flags_rqpn = u32::from_be(e.raw32::<39>());
        let byte_len = u32::from_be(e.raw32::<19>());
        let counter = u32::from_be(e.raw32::<5>());
        let wc_flags = if (flags_rqpn >> 28) & 3 != 0 {
            WcFlags::GRH
        } else {
            WcFlags::empty()
        };
        WorkCompletion {
            wr_id: qp.rq_retire_own(counter),
            qp_num: qp.qpn,
            byte_len,
            opcode: WcOpcode::Recv,
            wc_flags,
            src_qp: flags_rqpn & 0x00ff_ffff,
            sl: (flags_rqpn >> 24) as u8 & 0xf,
            ..WorkCompletion::default()
        }
    }

    /// The completion of the entry taken last ([`decode`], as `poll` decodes it),
    /// and the hot QP updated after a successful requester CQE; `None` for a CQE of
    /// an unknown QP or of a kind verbs does not report, counted in `unknown`. The
    /// entry is published (the consumer index after it, in full).
    ///
    /// On a CQ of 128-byte CQEs the entry is first tried against its hot QPs
    /// ([`Poller::take_wide_hot`]), before the general decoder (out of line, whose
    /// register saves it then skips).
    #[inline(always)]
    fn decode_taken(&mut self) -> Option<WorkCompletion> {
        if self.cur.stride() == 128 {
            if let Some(wc) = self.take_wide_hot() {
                // The record still holds the index of this entry.
                let ci = self.cur.consumer_index();
                self.cur.publish(ci.wrapping_add(1));
                return Some(wc);
            }
        }
        self.decode_taken_general()
    }

    /// [`Poller::decode_taken`] by [`decode`].
    #[inline(never)]
    fn decode_taken_general(&mut self) -> Option<WorkCompletion> {
        let off = self.cur.last_offset();
        // The record still holds the index of this entry (nothing published it).
        let ci = self.cur.consumer_index();
        let wide = self.cur.stride() == 128;
        let qps = self.qps.get_mut().unwrap_or_else(|p| p.into_inner());
        let mut wc = WorkCompletion::default();
        let got = match decode(self.ring.mem(), off, wide, qps, &mut self.last, &mut wc) {
            Some(req) => {
                let qp = &qps.list[self.last];
                // The inline paths step by 64 bytes: a CQ of 128-byte CQEs keeps
                // its hot QPs the destroyed placeholder, which no entry matches, so
                // every entry comes here, where its own hot QPs are tried first.
                let (hot, hot_rx) = if wide {
                    (&mut self.wide_hot, &mut self.wide_hot_rx)
                } else {
                    (&mut self.hot, &mut self.hot_rx)
                };
                if req {
                    if !Arc::ptr_eq(hot, qp) {
                        *hot = Arc::clone(qp);
                    }
                } else if qp.recv_live() && !Arc::ptr_eq(hot_rx, qp) {
                    *hot_rx = Arc::clone(qp);
                }
                Some(wc)
            }
            None => {
                self.unknown += 1;
                None
            }
        };
        self.cur.publish(ci.wrapping_add(1));
        got
    }

    /// On a CQ of 128-byte CQEs, the completion of the entry taken last when it is a
    /// successful requester CQE of [`Poller::wide_hot`] or a received SEND (without
    /// immediate) on the own RQ of [`Poller::wide_hot_rx`], as the inline paths of
    /// a CQ of 64-byte CQEs take them ([`Poller::req_completion`],
    /// [`Poller::recv_completion`]: the same fields [`decode`] gives), the work
    /// request retired; `None` (nothing done) otherwise. The caller publishes it.
    #[inline(always)]
    fn take_wide_hot(&self) -> Option<WorkCompletion> {
        let e = self.cur.last_entry();
        let last8 = e.raw64::<7>();
        let hot: &WqShared = &self.wide_hot;
        if hot.matches(last8) {
            let (mut wc, counter) = Self::req_completion(hot, e);
            wc.wr_id = hot.sq_retire_word(counter);
            return Some(wc);
        }
        let rx: &WqShared = &self.wide_hot_rx;
        if rx.matches_recv(last8) {
            return Some(Self::recv_completion(rx, e));
        }
        None
    }

    /// The rest of [`Poller::poll_one`] for an entry [`Poller::take_entry`] took but
    /// did not decode: decoded by [`Poller::decode_taken`]; a CQE of an unknown QP
    /// (or of a kind verbs does not report) is skipped, as `poll` skips it, and the
    /// next entry is tried.
    #[inline(never)]
    fn take_slow(&mut self) -> Option<WorkCompletion> {
        if let Some(wc) = self.decode_taken() {
            return Some(wc);
        }
        loop {
            if self.owner_test() >= OWNED_BELOW {
                return None;
            }
            if let Some(wc) = self.take_entry(Self::decode_taken) {
                return Some(wc);
            }
        }
    }

    /// The rest of [`Poller::poll`] once the next entry is ours: kept out of line so
    /// that an empty poll costs only the test. Each entry through
    /// [`Poller::take_entry`] (and [`Poller::decode_taken`] for what it does not
    /// decode), each published as soon as it is read (the doorbell record is never
    /// behind the entries taken).
    ///
    /// The slots are walked by an iterator (a pointer compare per slot); an entry
    /// that is skipped leaves its slot to the next one.
    #[inline(never)]
    fn poll_owned(&mut self, wc: &mut [WorkCompletion]) -> usize {
        let mut n = 0;
        for out in wc.iter_mut() {
            // The entry at the cursor is software's (tested before the call, after
            // the previous slot, or after a skipped entry).
            while !self.take_into(out, Self::decode_into) {
                if self.owner_test() >= OWNED_BELOW {
                    return n;
                }
            }
            n += 1;
            if self.owner_test() >= OWNED_BELOW {
                break;
            }
        }
        n
    }

    /// [`Poller::take_entry`] for [`Poller::poll_owned`], writing the
    /// completion into the caller's slot `out` instead of returning it (no copy
    /// through a temporary); returns whether it wrote one (`false`: a CQE of an
    /// unknown QP or of a kind verbs does not report, skipped, `out` unspecified).
    /// The same steps and results as `take_entry`: the cursor moved on, the read
    /// barrier, the hot QP's successful requester CQE; and besides, a received SEND
    /// (without immediate) on the own RQ of the QP of the last responder CQE
    /// ([`Poller::hot_rx`]) taken inline ([`Poller::recv_completion`]), with what
    /// [`decode`] reports for it; anything else through [`Poller::decode_taken`].
    ///
    /// Any other entry goes to `slow` ([`Poller::decode_into`], or
    /// [`Poller::take_slow_into`], which goes on to the next entries when this one is
    /// skipped), whose result is returned.
    #[inline(always)]
    fn take_into(
        &mut self,
        out: &mut WorkCompletion,
        slow: impl FnOnce(&mut Self, &mut WorkCompletion) -> bool,
    ) -> bool {
        let e = self.cur.entry();
        self.bus.rmb();
        let last8 = e.raw64::<7>();
        let qp: &WqShared = &self.hot;
        if !qp.matches(last8) {
            let rx: &WqShared = &self.hot_rx;
            if rx.matches_recv(last8) {
                *out = Self::recv_completion(rx, e);
                // Every byte of the entry read: the device may have it back.
                self.cur.advance_publish();
                return true;
            }
            self.cur.advance();
            return slow(self, out);
        }
        // As in `take_entry` (the slot written once, `wr_id` included).
        let (mut wc, counter) = Self::req_completion(qp, e);
        self.cur.advance_publish();
        wc.wr_id = qp.sq_retire_word(counter);
        *out = wc;
        true
    }

    /// [`Poller::take_slow`] into `out`: the entry taken last decoded, and when it
    /// is skipped the next ones, until one completes (`true`) or the CQ is empty.
    #[inline(never)]
    fn take_slow_into(&mut self, out: &mut WorkCompletion) -> bool {
        match self.take_slow() {
            Some(w) => {
                *out = w;
                true
            }
            None => false,
        }
    }

    /// [`Poller::decode_taken`] into `out`.
    #[inline(always)]
    fn decode_into(&mut self, out: &mut WorkCompletion) -> bool {
        match self.decode_taken() {
            Some(w) => {
                *out = w;
                true
            }
            None => false,
        }
    }

    /// The consumer index the device sees (24 bits).
    pub(crate) fn consumer_index(&self) -> u32 {
        self.cur.consumer_index()
    }

    /// Starts the consumer at index `ci` (tests near the 24-bit wrap).
    #[cfg(test)]
    pub(crate) fn start_at(&mut self, ci: u32) {
        self.cur.start_at(ci);
    }

    pub(crate) fn arm(&mut self, cmd: CqArmCmd) {
        self.ring.set_consumer_index(self.cur.consumer_index());
        self.ring.arm(&*self.bus, cmd);
    }
}

impl<B: Bus> std::fmt::Debug for CompletionQueue<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("cqn", &self.core.cqn)
            .field("cqe", &(self.p.ncqe - 1))
            .field("consumer_index", &self.p.consumer_index())
            .finish()
    }
}

impl<B: Bus> Context<B> {
    /// Creates a CQ with room for at least `cqe` completions (`CREATE_CQ`; the ring
    /// holds the next power of two above `cqe`, as rdma-core sizes it).
    pub fn create_cq(&self, cqe: u32) -> Result<CompletionQueue<'_, B>> {
        self.create_cq_on(cqe, None, super::CqOptions::default())
    }

    /// [`Context::create_cq`] with its completion events on EQ `eqn` (a completion
    /// channel's) instead of the async EQ, with the options `opts`: overrun ignored
    /// (`cqc.oi`) if asked, entries of `opts.cqe_size` (`cqc.cqe_sz`).
    pub(crate) fn create_cq_on(
        &self,
        cqe: u32,
        eqn: Option<u8>,
        opts: super::CqOptions,
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
        let mut p = Poller::new(self.bus(), ncqe, opts.cqe_size, 0, uar)?;
        let ring_len = ncqe as usize * opts.cqe_size.bytes();
        let pas: Vec<u64> = (0..ring_len.div_ceil(PAGE_SIZE) as u64)
            .map(|i| p.buf.iova() + i * PAGE_SIZE as u64)
            .collect();
        let mut input = create_cq_input(log_size, uar, u32::from(eqn), p.dbr_iova(), 0, &pas);
        {
            use ferroverbs_hw::control::cq::{cqc, in_command};
            if opts.ignore_overrun {
                in_command(cqc::oi).set(&mut input, 1);
            }
            // The PRM's CQ context: `cqe_sz` 0 for 64-byte CQEs, 1 for 128-byte ones
            // (Linux `mlx5_ib_create_cq`: `cqe_sz_to_mlx_sz`).
            in_command(cqc::cqe_sz).set(&mut input, opts.cqe_size.cqc_value());
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
                resized: Mutex::new(None),
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

    /// The size of the CQ's entries ([`CqOptions::cqe_size`](super::CqOptions::cqe_size)).
    pub fn cqe_size(&self) -> CqeSize {
        self.p.cqe_size()
    }

    /// The consumer index (CQEs polled, modulo 2^24: what the device sees).
    pub(crate) fn consumer_index(&self) -> u32 {
        self.p.consumer_index()
    }

    /// Completions skipped: those of a QP that is gone, and repeated completions of
    /// an SRQ WQE that was not posted again (a buggy device's; also counted by
    /// [`SharedReceiveQueue::duplicate_completions`](super::SharedReceiveQueue::duplicate_completions)).
    pub fn skipped(&self) -> u64 {
        self.p.unknown
    }

    /// Bytes of host memory the CQ uses: the ring and its doorbell record (rounded to
    /// pages), and the bookkeeping of this handle.
    pub fn footprint(&self) -> (usize, usize) {
        let ring = self.p.ncqe as usize * self.p.cqe_size().bytes();
        let mem = (ring + 64).div_ceil(PAGE_SIZE) * PAGE_SIZE;
        (
            mem,
            std::mem::size_of::<Self>() + std::mem::size_of::<CqCore<'ctx, B>>(),
        )
    }

    /// The device the CQ belongs to.
    pub fn device(&self) -> crate::DeviceId {
        self.core.ctx.id()
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

    /// [`CompletionQueue::poll_one`] with the completion's CQE `timestamp`: the
    /// device's free-running clock counter (`struct mlx5_cqe64` `timestamp`, counted
    /// at [`DeviceAttr::hca_core_clock_khz`](crate::DeviceAttr), wrapping at
    /// `completion_timestamp_mask`) when the device wrote the CQE, as rdma-core
    /// libmlx5 `mlx5_cq_read_wc_completion_ts` reads it. Never blocks, allocates,
    /// locks or makes a system call.
    #[inline]
    pub fn poll_one_with_timestamp(&mut self) -> Option<(WorkCompletion, u64)> {
        self.p.poll_one_with_timestamp()
    }

    /// Polls up to `max` completions, handing each to `f` (in order) where it is
    /// built, and returns how many: what `poll` would write into a slice of `max`
    /// entries, without the slice (for callers that store completions in their own
    /// format, such as a C `ibv_wc` array). Never blocks, allocates, locks or makes
    /// a system call.
    #[inline]
    pub fn poll_each(&mut self, max: usize, f: impl FnMut(&WorkCompletion)) -> usize {
        self.p.poll_each(max, f)
    }

    /// Takes the completion at the head of the CQ when it is a successful requester
    /// completion of a SEND or an RDMA WRITE (with or without immediate or
    /// invalidation) of the QP whose requester completion was taken last, and hands
    /// it to `f` as a [`HotReq`];
    /// otherwise takes nothing and returns `None` (the CQ may be empty or not: the
    /// caller then polls with [`CompletionQueue::poll`],
    /// [`CompletionQueue::poll_one`] or [`CompletionQueue::poll_each`], which take
    /// any entry). The completion is the one those would give:
    /// [`requester_completion`] of its `send_op`, with its `wr_id` and `qp_num`. For
    /// callers that write completions in a layout of their own from a table built
    /// with [`requester_completion`] (the C `ibv_poll_cq`): nothing on this path is a
    /// call (but, once per chunk of up to 256 entries, the cursor's move to the next
    /// chunk). The empty test is the owner bit compared together with the entry's
    /// QP and kind, in one load: an empty CQ costs what a full one does.
    ///
    /// Never blocks, allocates, locks or makes a system call.
    #[inline(always)]
    pub fn poll_hot_req<R>(&mut self, f: impl FnOnce(HotReq) -> R) -> Option<R> {
        self.p.poll_hot_req(f)
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

/// The QPs of a CQ: their list, and where in it each QP number was last attached
/// (an index, so that a CQE of any of thousands of QPs finds its QP in one lookup).
pub(crate) struct QpTable {
    list: Vec<Arc<WqShared>>,
    at: QpnIndex,
    /// The list's length after it was last swept of destroyed QPs.
    swept_len: usize,
}

impl QpTable {
    fn new(first: Arc<WqShared>) -> QpTable {
        let mut t = QpTable {
            list: Vec::new(),
            at: QpnIndex::default(),
            swept_len: 0,
        };
        t.push(first);
        t
    }

    fn push(&mut self, qp: Arc<WqShared>) {
        self.at.insert(qp.qpn, self.list.len());
        self.list.push(qp);
    }

    /// Rebuilds the index after the list was swept.
    fn reindex(&mut self) {
        self.at.clear();
        for (i, q) in self.list.iter().enumerate() {
            // A number reused by a later QP maps to the later one.
            self.at.insert(q.qpn, i);
        }
        self.swept_len = self.list.len();
    }
}

/// Bits of a QPN that select the slot in a page of [`QpnIndex`].
const QPN_PAGE_BITS: u32 = 8;
/// Slots of a page of [`QpnIndex`].
const QPN_PAGE: usize = 1 << QPN_PAGE_BITS;
/// A free slot of [`QpnIndex`].
const QPN_NONE: u32 = u32::MAX;

/// A CQ's index from QPN to the position of its QP in [`QpTable::list`], looked up by
/// direct indexing: the QPN's high bits select a page of 256 slots (allocated when a
/// QPN in it is first attached), its low byte the slot. Devices hand QPNs out from a
/// bitmap, mostly consecutive (mlx5 firmware; the simulator's firmware round-robin
/// from its first QPN), so the QPs of a CQ fill few pages, and the slots of QPs
/// created together share cache lines (16 per line): with thousands of QPs the
/// lookup of a CQE's QP reads one line of the index, where a hash map's buckets
/// cost a miss per QP.
#[derive(Default)]
struct QpnIndex {
    pages: Vec<Option<Box<[u32; QPN_PAGE]>>>,
}

impl QpnIndex {
    /// The position of `qpn`.
    #[inline(always)]
    fn get(&self, qpn: u32) -> Option<usize> {
        let page = self
            .pages
            .get((qpn >> QPN_PAGE_BITS) as usize)?
            .as_deref()?;
        let i = page[qpn as usize & (QPN_PAGE - 1)];
        (i != QPN_NONE).then_some(i as usize)
    }

    /// Maps `qpn` (24 bits, as in a CQE) to position `i`, replacing what it mapped to.
    fn insert(&mut self, qpn: u32, i: usize) {
        let qpn = qpn & 0x00ff_ffff;
        let p = (qpn >> QPN_PAGE_BITS) as usize;
        if self.pages.len() <= p {
            self.pages.resize_with(p + 1, || None);
        }
        let page = self.pages[p].get_or_insert_with(|| Box::new([QPN_NONE; QPN_PAGE]));
        // A CQ holds fewer QPs than 2^32 (each one a device object).
        page[qpn as usize & (QPN_PAGE - 1)] = u32::try_from(i).unwrap_or(QPN_NONE);
    }

    /// Forgets every QPN (the pages are kept for the QPs attached next).
    fn clear(&mut self) {
        for page in self.pages.iter_mut().flatten() {
            page.fill(QPN_NONE);
        }
    }
}

/// Finds the live QP `qpn` in `qps`, trying `last` first.
#[inline]
fn find<'q>(qps: &'q QpTable, qpn: u32, last: &mut usize) -> Option<&'q WqShared> {
    if let Some(q) = qps.list.get(*last) {
        if q.qpn == qpn && q.alive() {
            return Some(q);
        }
    }
    let i = qps.at.get(qpn)?;
    let q = qps.list.get(i).filter(|q| q.qpn == qpn && q.alive())?;
    *last = i;
    Some(q)
}

/// Writes the work completion of the CQE at byte `off` of the ring `mem` into `wc`,
/// retiring its work request at its QP, and returns whether it was a successful
/// requester CQE (of the QP at `qps[*last]`); `None` (and `wc` unspecified) for a CQE
/// of an unknown QP, of a kind verbs does not report (resize, signature), or repeating
/// the completion of an SRQ WQE that was not posted again. `wide`: the ring's entries
/// are 128 bytes (the CQE at `off` is the second half of one).
///
/// Reads only the last 32 bytes of the entry (`imm_inval_pkey` .. `op_own`) for the
/// common requester completion; every other kind copies the whole entry.
#[inline(always)]
fn decode(
    mem: &FastMem<impl Bus>,
    off: usize,
    wide: bool,
    qps: &QpTable,
    last: &mut usize,
    wc: &mut WorkCompletion,
) -> Option<bool> {
    let mut t = [0u8; 32];
    mem.read(off + 32, &mut t);
    let be32 = |i: usize| u32::from_be_bytes([t[i], t[i + 1], t[i + 2], t[i + 3]]);
    // `struct mlx5_cqe64` from byte 32: byte_cnt at 44, sop_drop_qpn at 56,
    // wqe_counter at 60, op_own at 63.
    let sop_drop_qpn = be32(56 - 32);
    let qpn = sop_drop_qpn & 0x00ff_ffff;
    let qp = find(qps, qpn, last)?;
    let counter = u16::from_be_bytes([t[60 - 32], t[61 - 32]]);
    let cqe_op = t[63 - 32] >> 4;
    if cqe_op != MLX5_CQE_REQ {
        if t[63 - 32] & (MLX5_INLINE_SCATTER_32 | MLX5_INLINE_SCATTER_64) != 0 {
            // The message is in the CQE (scatter to CQE): copied out first.
            return decode_scattered(mem, off, wide, qp, qpn, counter, wc).then_some(false);
        }
        if cqe_op == MLX5_CQE_RESP_SEND || cqe_op == MLX5_CQE_RESP_SEND_IMM {
            // A received SEND: what `decode_other` reports for it, from the bytes
            // read above (`imm_inval_pkey` at 36, `byte_cnt` at 44) and `flags_rqpn`
            // (at 24: GRH type in bits 29..28, the source QPN in 23..0), without
            // copying the whole entry.
            const FLAGS_RQPN: usize = std::mem::offset_of!(Cqe64, flags_rqpn);
            const IMM: usize = std::mem::offset_of!(Cqe64, imm_inval_pkey);
            const BYTE_CNT: usize = std::mem::offset_of!(Cqe64, byte_cnt);
            let mut f = [0u8; 4];
            mem.read(off + FLAGS_RQPN, &mut f);
            let flags_rqpn = u32::from_be_bytes(f);
            let wr_id = qp.rq_retire(counter)?;
            let imm = cqe_op == MLX5_CQE_RESP_SEND_IMM;
            let mut flags = if imm {
                WcFlags::WITH_IMM
            } else {
                WcFlags::empty()
            };
            if (flags_rqpn >> 28) & 3 != 0 {
                flags = flags | WcFlags::GRH;
            }
            *wc = WorkCompletion {
                wr_id,
                qp_num: qpn,
                byte_len: be32(BYTE_CNT - 32),
                opcode: WcOpcode::Recv,
                wc_flags: flags,
                imm_data: if imm { be32(IMM - 32) } else { 0 },
                src_qp: flags_rqpn & 0x00ff_ffff,
                sl: (flags_rqpn >> 24) as u8 & 0xf,
                ..WorkCompletion::default()
            };
            return Some(false);
        }
        return decode_other(mem, off, qp, qpn, counter, wc).then_some(false);
    }
    if t[63 - 32] & (MLX5_INLINE_SCATTER_32 | MLX5_INLINE_SCATTER_64) != 0 {
        // A READ response or an atomic result in the CQE (requester scatter to CQE):
        // copied out first.
        return decode_req_scattered(mem, off, wide, qp, qpn, counter, wc).then_some(true);
    }
    let op = (sop_drop_qpn >> 24) as u8;
    *wc = WorkCompletion {
        wr_id: qp.sq_retire(counter),
        qp_num: qpn,
        ..WorkCompletion::default()
    };
    let mut t = REQ_TAIL[usize::from(op)];
    if op & REQ_SPECIAL != 0 {
        if op == MLX5_OPCODE_RDMA_READ {
            t = t.with_byte_len(be32(44 - 32));
        } else if op == MLX5_OPCODE_UMR && qp.umr_is_local_inv(u32::from(counter)) {
            t = LOCAL_INV_TAIL;
        }
    }
    put_tail(wc, t);
    Some(true)
}

/// A successful requester completion taken by [`CompletionQueue::poll_hot_req`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HotReq {
    /// The `wr_id` of the work request.
    pub wr_id: u64,
    /// The local QP number.
    pub qp_num: u32,
    /// The WQE's send opcode byte: [`requester_completion`] of it is `Some`, the rest
    /// of the completion.
    pub send_op: u8,
}

/// The completion a successful requester CQE of send opcode byte `send_op` reports
/// (`wr_id` and `qp_num` 0), for the opcodes [`CompletionQueue::poll_hot_req`] hands
/// out (SEND and RDMA WRITE, with or without immediate or invalidation: every
/// opcode whose completion is one table entry); `None` for the others (RDMA READ,
/// whose byte count is the CQE's, the atomics, UMR). A `const fn`, to build tables
/// of other completion layouts at compile time.
pub const fn requester_completion(send_op: u8) -> Option<WorkCompletion> {
    if send_op & REQ_SPECIAL != 0 {
        return None;
    }
    Some(WorkCompletion {
        wr_id: 0,
        qp_num: 0,
        byte_len: 0,
        opcode: WcOpcode::of_send(send_op),
        wc_flags: if WcOpcode::send_has_imm(send_op) {
            WcFlags::WITH_IMM
        } else {
            WcFlags::empty()
        },
        status: WcStatus::Success,
        vendor_err: 0,
        imm_data: 0,
        src_qp: 0,
        sl: 0,
    })
}

// `requester_completion` is what the reader reports: `REQ_TAIL`'s entry of every
// opcode it gives (`poll_hot_req` hands out exactly those).
const _: () = {
    let mut op = 0;
    while op < 256 {
        if let Some(w) = requester_completion(op as u8) {
            let t = WcTailBits::of(WcTail {
                byte_len: w.byte_len,
                opcode: w.opcode,
                wc_flags: w.wc_flags,
                status: w.status,
                vendor_err: w.vendor_err,
            });
            assert!(t.get() == REQ_TAIL[op].get());
        }
        op += 1;
    }
};

/// What a successful requester CQE reports besides `wr_id` and `qp_num` (rdma-core
/// `handle_good_req`; the other fields are 0): the fields of [`WorkCompletion`]
/// from `byte_len` to `vendor_err` ([`WcTail`], 8 bytes: one load and one store), for
/// each send opcode byte: the completion opcode from [`WcOpcode::of_send`],
/// `WITH_IMM` from [`WcOpcode::send_has_imm`], `byte_len` 8 for the atomics and 0
/// otherwise (an RDMA READ takes the CQE's byte count instead). One indexed load
/// instead of a chain of compares.
const REQ_TAIL: [WcTailBits; 256] = {
    let mut t = [WcTailBits::of(WcTail {
        byte_len: 0,
        opcode: WcOpcode::Send,
        wc_flags: WcFlags::empty(),
        status: WcStatus::Success,
        vendor_err: 0,
    }); 256];
    let mut op = 0;
    while op < 256 {
        let o = op as u8;
        t[op] = WcTailBits::of(WcTail {
            byte_len: if o == MLX5_OPCODE_ATOMIC_CS || o == MLX5_OPCODE_ATOMIC_FA {
                8
            } else {
                0
            },
            opcode: WcOpcode::of_send(o),
            wc_flags: if WcOpcode::send_has_imm(o) {
                WcFlags::WITH_IMM
            } else {
                WcFlags::empty()
            },
            status: WcStatus::Success,
            vendor_err: 0,
        });
        op += 1;
    }
    t
};

// An RDMA READ's tail has `byte_len` 0, which `WcTailBits::with_byte_len` needs.
const _: () = assert!(
    REQ_TAIL[MLX5_OPCODE_RDMA_READ as usize].get()
        == WcTailBits::of(WcTail {
            byte_len: 0,
            opcode: WcOpcode::RdmaRead,
            wc_flags: WcFlags::empty(),
            status: WcStatus::Success,
            vendor_err: 0,
        })
        .get()
);

/// Send opcode bits set in exactly the opcodes whose requester completion needs more
/// than [`REQ_TAIL`]: RDMA READ (0x10: the byte count), the atomics (0x11, 0x12:
/// nothing more) and UMR (0x25: bind or local invalidation, [`LOCAL_INV_TAIL`]); none of
/// the SEND and WRITE opcodes (0x01, 0x08..0x0b) has them.
const REQ_SPECIAL: u8 = 0x30;
const _: () = assert!(
    MLX5_OPCODE_RDMA_READ & REQ_SPECIAL != 0
        && MLX5_OPCODE_UMR & REQ_SPECIAL != 0
        && ferroverbs_hw::datapath::wqe::MLX5_OPCODE_SEND & REQ_SPECIAL == 0
        && ferroverbs_hw::datapath::wqe::MLX5_OPCODE_SEND_IMM & REQ_SPECIAL == 0
        && ferroverbs_hw::datapath::wqe::MLX5_OPCODE_SEND_INVAL & REQ_SPECIAL == 0
        && ferroverbs_hw::datapath::wqe::MLX5_OPCODE_RDMA_WRITE & REQ_SPECIAL == 0
        && ferroverbs_hw::datapath::wqe::MLX5_OPCODE_RDMA_WRITE_IMM & REQ_SPECIAL == 0
);

/// The tail of a successful UMR completion that was a local invalidation (a bind's is
/// [`REQ_TAIL`]'s; `WqShared::umr_is_local_inv` tells them apart).
const LOCAL_INV_TAIL: WcTailBits = WcTailBits::of(WcTail {
    byte_len: 0,
    opcode: WcOpcode::LocalInv,
    wc_flags: WcFlags::empty(),
    status: WcStatus::Success,
    vendor_err: 0,
});

/// [`Poller::owner_test`] values of an entry software owns are below this.
const OWNED_BELOW: u8 = 0x78;

/// The bits of a native-endian read of a CQE's last 8 bytes that
/// [`Poller::poll_hot_req`] compares with the hot QP's key and the pass's owner bit
/// ([`CqeCursor::owner64`]) in one: those of [`CQE_QPN_MASK`] (QPN, CQE opcode,
/// CQE format), the owner bit (bit 0 of `op_own`), and the send opcode's
/// [`REQ_SPECIAL`] bits (byte 56, `sop_drop_qpn`'s top byte; the keys have them 0).
/// An entry matches when software owns it (its owner bit is the pass's, and its
/// opcode is requester, not INVALID: `sw_owned`), it is a successful requester CQE
/// of the live hot QP that carries no data, and its completion is one table entry.
const HOT_REQ_MASK: u64 = CQE_QPN_MASK | u64::from_ne_bytes([REQ_SPECIAL, 0, 0, 0, 0, 0, 0, 0x01]);
const _: () = {
    // The owner bit is the one `CqeCursor::owner64` places, and no key of a live QP
    // has a bit of the send opcode's byte.
    assert!(HOT_REQ_MASK & CQE_QPN_MASK == CQE_QPN_MASK);
    assert!(
        super::qp::cqe_qpn_key(0x00ff_ffff) & u64::from_ne_bytes([0xff, 0, 0, 0, 0, 0, 0, 0]) == 0
    );
};

/// The `n` bytes a CQE at byte `off` of `mem` with `op_own` `op_own` carries (scatter
/// to CQE), as rdma-core's `handle_responder` and `mlx5_parse_cqe` find them:
/// `MLX5_INLINE_SCATTER_32`, at most 32 bytes from byte 0 of the 64-byte CQE
/// (`cqe64`, here `cqe`); `MLX5_INLINE_SCATTER_64`, at most 64 bytes from the first
/// half of a 128-byte entry (`cqe64 - 1`, the 64 bytes before the CQE; `wide`).
/// `None` for a count above the limit, and for `MLX5_INLINE_SCATTER_64` on a ring of
/// 64-byte entries (where the 64 bytes before the CQE are the previous CQE).
fn scattered_bytes<'a>(
    mem: &FastMem<impl Bus>,
    off: usize,
    wide: bool,
    cqe: &'a [u8; Cqe64::SIZE],
    n: usize,
    half: &'a mut [u8; Cqe64::SIZE],
) -> Option<&'a [u8]> {
    let op_own = cqe[Cqe64::SIZE - 1];
    if op_own & MLX5_INLINE_SCATTER_32 != 0 {
        return (n <= 32).then(|| &cqe[..n]);
    }
    if op_own & MLX5_INLINE_SCATTER_64 != 0 && wide && n <= 64 {
        // The CQE of a 128-byte entry is its second half: the first is right before.
        mem.read(off.checked_sub(Cqe64::SIZE)?, half);
        return Some(&half[..n]);
    }
    None
}

/// [`decode`] of a responder CQE that carries its message (responder scatter to
/// CQE, `qpc.cs_res`): the message copied into the scatter list of the receive WQE it
/// completes, before the WQE is retired, then the completion as [`decode_other`]
/// reports it, with the copy's error status if it failed (rdma-core
/// `handle_responder`: `mlx5_copy_to_recv_wqe`/`mlx5_copy_to_recv_srq` before the
/// opcode is decoded). The message is `byte_cnt` bytes where [`scattered_bytes`]
/// finds them (the CQE for `MLX5_INLINE_SCATTER_32`, the entry's first half for
/// `MLX5_INLINE_SCATTER_64` on a CQ of 128-byte CQEs); any other placement or count
/// is reported as `GeneralErr`. A 32-byte message covers `flags_rqpn`, so for both
/// formats: `src_qp` is the QP's destination QPN, `sl` 0, no GRH flag.
#[cold]
#[inline(never)]
fn decode_scattered(
    mem: &FastMem<impl Bus>,
    off: usize,
    wide: bool,
    qp: &WqShared,
    qpn: u32,
    counter: u16,
    wc: &mut WorkCompletion,
) -> bool {
    let mut bytes = [0u8; Cqe64::SIZE];
    mem.read(off, &mut bytes);
    let n = u32::from_be_bytes(bytes[44..48].try_into().expect("4 bytes")) as usize;
    let mut half = [0u8; Cqe64::SIZE];
    let copied = match scattered_bytes(mem, off, wide, &bytes, n, &mut half) {
        Some(data) => qp.copy_scattered(counter, data),
        None => Err(WcStatus::GeneralErr),
    };
    if !decode_other(mem, off, qp, qpn, counter, wc) {
        return false;
    }
    // `flags_rqpn` (byte 24) is data here: the sender of a connected QP is its
    // destination QP (verbs defines `src_qp` and `sl` for UD only; libmlx5 reports
    // the data's bytes), the GRH flag absent (no GRH heads an RC or UC receive).
    wc.src_qp = qp.dest_qpn();
    wc.sl = 0;
    let mut flags = WcFlags::empty();
    for f in [WcFlags::WITH_IMM, WcFlags::WITH_INV] {
        if wc.wc_flags.contains(f) {
            flags = flags | f;
        }
    }
    wc.wc_flags = flags;
    if let Err(status) = copied {
        wc.status = status;
    }
    true
}

/// [`decode`] of a successful requester CQE that carries the data of its RDMA READ
/// response or atomic result (requester scatter to CQE, `qpc.cs_req`): the data
/// copied into the send WQE's local list before the WQE is retired, then the
/// completion as `decode` reports it, with the copy's error status if it failed
/// (rdma-core `mlx5_parse_cqe`: `handle_good_req`, then `mlx5_copy_to_send_wqe` of
/// the completion's byte length: a READ's `byte_cnt`, 8 for an atomic), from where
/// [`scattered_bytes`] finds it (`MLX5_INLINE_SCATTER_32`: the CQE, at most 32
/// bytes; `MLX5_INLINE_SCATTER_64`, on a CQ of 128-byte CQEs: the entry's first
/// half, at most 64 bytes, as rdma-core reads it since commit 45184d2c8); any other
/// placement or count is `GeneralErr`.
#[cold]
#[inline(never)]
fn decode_req_scattered(
    mem: &FastMem<impl Bus>,
    off: usize,
    wide: bool,
    qp: &WqShared,
    qpn: u32,
    counter: u16,
    wc: &mut WorkCompletion,
) -> bool {
    let mut bytes = [0u8; Cqe64::SIZE];
    mem.read(off, &mut bytes);
    let op = bytes[56];
    let byte_cnt = u32::from_be_bytes(bytes[44..48].try_into().expect("4 bytes"));
    let n = match op {
        MLX5_OPCODE_RDMA_READ => byte_cnt as usize,
        MLX5_OPCODE_ATOMIC_CS | MLX5_OPCODE_ATOMIC_FA => 8,
        _ => 0,
    };
    let mut half = [0u8; Cqe64::SIZE];
    let copied = match scattered_bytes(mem, off, wide, &bytes, n, &mut half) {
        Some(data) => qp.copy_scattered_send(counter, data),
        None => Err(WcStatus::GeneralErr),
    };
    *wc = WorkCompletion {
        wr_id: qp.sq_retire(counter),
        qp_num: qpn,
        ..WorkCompletion::default()
    };
    let mut t = REQ_TAIL[usize::from(op)];
    if op == MLX5_OPCODE_RDMA_READ {
        t = t.with_byte_len(byte_cnt);
    } else if op == MLX5_OPCODE_UMR && qp.umr_is_local_inv(u32::from(counter)) {
        t = LOCAL_INV_TAIL;
    }
    put_tail(wc, t);
    if let Err(status) = copied {
        wc.status = status;
    }
    true
}

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
            let Some(wr_id) = qp.rq_retire(counter) else {
                return false;
            };
            wc.wr_id = wr_id;
            wc.byte_len = cqe.byte_cnt();
            wc.src_qp = cqe.src_qpn();
            wc.sl = (cqe.flags_rqpn.get() >> 24) as u8 & 0xf;
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
            let Some(wr_id) = qp.rq_retire(counter) else {
                return false;
            };
            wc.wr_id = wr_id;
            wc.status = WcStatus::from_syndrome(e.syndrome());
            wc.vendor_err = e.vendor_err_synd();
            wc.opcode = WcOpcode::Recv;
        }
        _ => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The QPN index maps each attached QPN to its position, the later of two QPs
    /// with one number (a reused QPN), nothing to an unknown QPN (in an allocated
    /// page or beyond the pages), and is empty again after `clear`.
    #[test]
    fn qpn_index_maps_numbers_directly() {
        let mut ix = QpnIndex::default();
        assert_eq!(ix.get(0x48), None);
        ix.insert(0x48, 1);
        ix.insert(0x49, 2);
        ix.insert(0x1_2345, 3);
        assert_eq!(ix.get(0x48), Some(1));
        assert_eq!(ix.get(0x49), Some(2));
        assert_eq!(ix.get(0x1_2345), Some(3));
        assert_eq!(ix.get(0x4a), None);
        assert_eq!(ix.get(0x1_2344), None);
        assert_eq!(ix.get(0xff_ffff), None);
        // Two pages (0x48 and 0x49 share one), page table to 0x123.
        assert_eq!(ix.pages.iter().flatten().count(), 2);
        assert_eq!(ix.pages.len(), 0x124);
        ix.insert(0x48, 7);
        assert_eq!(ix.get(0x48), Some(7));
        ix.clear();
        assert_eq!(ix.get(0x48), None);
        assert_eq!(ix.get(0x1_2345), None);
    }
}

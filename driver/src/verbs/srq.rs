//! Shared receive queues (`ibv_srq`): one pool of receive WQEs that several QPs take
//! from, with a limit that raises an asynchronous event when it runs low.
//!
//! The mlx5 format (`mlx5-datapath.md` §4, rdma-core `srq.c`): a ring of
//! `(max_wr + 1).next_power_of_two()` WQEs of `roundup_pow2(max(32, 16 + 16 *
//! max_sge))` bytes, each starting with `struct mlx5_wqe_srq_next_seg` whose
//! `next_wqe_index` links the free list, then data segments (ended by an lkey
//! `MLX5_INVALID_LKEY` entry when the list is short). Posting takes the WQE at `head`
//! and moves `head` along its link; the list is full when `head` reaches `tail` (one
//! WQE always stays unposted). The doorbell record is the count of WQEs posted
//! (16 bits). The device follows the same links, and its receive CQEs carry the SRQ
//! WQE index as `wqe_counter`: the CQ takes the `wr_id` from this SRQ's table and
//! hands the index back, and the next post links it after `tail`.
//!
//! Created with `CREATE_SRQ` (the SRQ context, `lwm` = the limit), limit (re-)armed
//! with `ARM_RQ` (`op_mod` SRQ), queried with `QUERY_SRQ`, destroyed with
//! `DESTROY_SRQ`, as Linux's `mlx5_ib` does for a basic SRQ (`srq_cmd.c`). When the
//! WQEs posted drop below the limit the device raises `SRQ_RQ_LIMIT`
//! ([`AsyncEvent::SrqLimitReached`](super::AsyncEvent::SrqLimitReached)) and disarms
//! it (the limit reads 0) until [`SharedReceiveQueue::arm`] sets it again.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use ferroverbs_hw::control::caps::cmd_hca_cap as g;
use ferroverbs_hw::control::cmd::{new_input, Opcode};
use ferroverbs_hw::control::srq::{
    arm_srq_input, create_srq_input, create_srq_out, destroy_srq_in, destroy_srq_out, query_srq_in,
    query_srq_out, srqc, SrqParams,
};
use ferroverbs_hw::datapath::wqe::MLX5_INVALID_LKEY;
use ferroverbs_hw::{Bus, DmaPerm};

use super::qp::{BadWr, PostError};
use super::{exec, Error, Pd, RecvWr, Result};
use crate::dma::{DmaBuf, PAGE_SIZE};

/// How to create an SRQ (`ibv_srq_init_attr.attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SrqAttr {
    /// Receive requests outstanding.
    pub max_wr: u32,
    /// Scatter entries per request.
    pub max_sge: u32,
    /// The limit: an [`AsyncEvent::SrqLimitReached`](super::AsyncEvent) when fewer
    /// requests than this are posted (0: not armed).
    pub srq_limit: u32,
}

impl Default for SrqAttr {
    /// 256 requests of one SGE, no limit.
    fn default() -> Self {
        SrqAttr {
            max_wr: 256,
            max_sge: 1,
            srq_limit: 0,
        }
    }
}

/// What the CQs of the QPs attached to an SRQ share with it: the per-WQE `wr_id`s and
/// the WQE indexes completed since the owner last posted.
///
/// A device reports each posted WQE once. One that reports a WQE again before the
/// owner posted it anew (a buggy or hostile device) would hand the index back twice:
/// the owner would link it into the free list twice (a cycle) and the completions
/// could outnumber the [`DoneRing`]'s slots, whose producers would then lap the
/// consumer and stall it (posting fails with `QueueFull` for good). So each WQE
/// carries a posted flag, set by the post and taken by the completion that retires
/// it: a completion that finds it clear is a duplicate, and its index is dropped and
/// counted ([`SharedReceiveQueue::duplicate_completions`]), and the CQ skips the
/// completion (counted in [`CompletionQueue::skipped`](super::CompletionQueue::skipped)
/// as well), so the application sees each posted receive complete exactly once. A
/// duplicate that arrives after the WQE was posted again cannot be told from its
/// completion.
pub(crate) struct SrqShared {
    mask: u32,
    wr_id: Box<[AtomicU64]>,
    /// Per WQE: posted and not yet completed.
    posted: Box<[AtomicBool]>,
    /// Completions of WQEs that were not posted: dropped.
    duplicates: AtomicU64,
    /// Completed WQE indexes, in completion order.
    done: DoneRing,
}

impl SrqShared {
    /// The shared state of an SRQ of `nwqe` (a power of two) WQEs, none posted.
    fn new(nwqe: u32) -> SrqShared {
        SrqShared {
            mask: nwqe - 1,
            wr_id: (0..nwqe).map(|_| AtomicU64::new(0)).collect(),
            posted: (0..nwqe).map(|_| AtomicBool::new(false)).collect(),
            duplicates: AtomicU64::new(0),
            done: DoneRing::new(nwqe),
        }
    }

    /// Records the post of WQE `i` (the owner, before the doorbell record).
    #[inline]
    fn posted(&self, i: usize, wr_id: u64) {
        self.wr_id[i].store(wr_id, Ordering::Relaxed);
        self.posted[i].store(true, Ordering::Relaxed);
    }

    /// The `wr_id` of SRQ WQE `index`, which completed; the index goes back to the
    /// owner's free list. `None` if the WQE was not posted (a duplicate completion:
    /// counted, and the CQ skips it). Lock-free (any number of CQ pollers at once),
    /// no allocation.
    #[inline]
    /// Whether SRQ WQE `index` is posted and not yet completed (a repeated
    /// completion of a WQE not posted again finds it free; its scatter list may be
    /// another receive's by then).
    pub(crate) fn is_posted(&self, index: u16) -> bool {
        let i = (u32::from(index) & self.mask) as usize;
        self.posted[i].load(Ordering::Relaxed)
    }

    pub(crate) fn retire(&self, index: u16) -> Option<u64> {
        let i = (u32::from(index) & self.mask) as usize;
        let wr_id = self.wr_id[i].load(Ordering::Relaxed);
        // The flag was set by the post the device completed (published to the device
        // by the doorbell record, as the `wr_id` was); the pop that hands the index
        // back to the owner orders this swap before the next post's store.
        if self.posted[i].swap(false, Ordering::Relaxed) {
            self.done.push(i as u16);
            Some(wr_id)
        } else {
            self.duplicates.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// The WQE indexes completions hand back to the SRQ's owner: a bounded
/// multi-producer, single-consumer queue with no lock (the CQ pollers of every
/// attached QP push, the owner pops while posting), so that neither `poll` nor
/// `post_recv` takes a lock. (rdma-core's mlx5 provider takes the SRQ's spinlock in
/// both, `mlx5_free_srq_wqe` and `mlx5_post_srq_recv`.)
///
/// Each slot holds its lap stamp (the producer's ticket + 1) above the index, so the
/// consumer tells a slot written for its current ticket from a stale one of an
/// earlier lap. The ring has at least as many slots as the SRQ has WQEs; an index
/// is pushed only when its WQE completes, and [`SrqShared::retire`] pushes it at most
/// once per post (a duplicate completion is dropped), so at most `slots` indexes are
/// ever queued and a producer never laps the consumer.
struct DoneRing {
    slots: Box<[AtomicU64]>,
    mask: u32,
    /// The next producer ticket.
    tail: AtomicU32,
    /// The next consumer ticket (only the owner, holding `&mut`, moves it).
    head: AtomicU32,
}

impl DoneRing {
    /// A ring of `capacity` (a power of two) slots.
    fn new(capacity: u32) -> DoneRing {
        DoneRing {
            // Stamp 0 matches no ticket's stamp (ticket + 1) of the first lap.
            slots: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
            mask: capacity - 1,
            tail: AtomicU32::new(0),
            head: AtomicU32::new(0),
        }
    }

    #[inline]
    fn push(&self, index: u16) {
        let t = self.tail.fetch_add(1, Ordering::Relaxed);
        let stamp = u64::from(t.wrapping_add(1)) << 32;
        self.slots[(t & self.mask) as usize].store(stamp | u64::from(index), Ordering::Release);
    }

    /// The oldest index pushed and not yet popped, if its producer finished writing it.
    #[inline]
    fn pop(&self) -> Option<u16> {
        let h = self.head.load(Ordering::Relaxed);
        let v = self.slots[(h & self.mask) as usize].load(Ordering::Acquire);
        if (v >> 32) as u32 != h.wrapping_add(1) {
            return None;
        }
        self.head.store(h.wrapping_add(1), Ordering::Relaxed);
        Some(v as u16)
    }
}

/// A shared receive queue.
///
/// Created by [`Pd::create_srq`]; QPs attach at creation
/// ([`QpInitAttr::srq`](super::QpInitAttr)) and must be destroyed before it (the
/// device refuses `DESTROY_SRQ` while QPs use it). Posting takes `&mut self` and
/// allocates nothing; completions (on any thread polling a CQ of an attached QP) hand
/// their WQEs back through a lock-free queue.
pub struct SharedReceiveQueue<'a, B: Bus> {
    pd: &'a Pd<'a, B>,
    srqn: u32,
    buf: Arc<DmaBuf<B>>,
    shared: Arc<SrqShared>,
    /// Software copy of each WQE's `next_wqe_index`.
    next: Box<[u16]>,
    nwqe: u32,
    stride: usize,
    max_sge: u32,
    head: u16,
    tail: u16,
    /// WQEs posted (the doorbell record value, 16 bits).
    counter: u16,
    dbr: usize,
    live: bool,
}

impl<B: Bus> std::fmt::Debug for SharedReceiveQueue<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedReceiveQueue")
            .field("srqn", &self.srqn)
            .field("max_wr", &(self.nwqe - 1))
            .field("max_sge", &self.max_sge)
            .finish()
    }
}

/// Bytes of the next segment at the start of every SRQ WQE.
const NEXT_SEG: usize = 16;

impl<'ctx, B: Bus> Pd<'ctx, B> {
    /// Creates a shared receive queue (`ibv_create_srq`) of at least `attr.max_wr`
    /// requests of `attr.max_sge` entries, its limit armed at `attr.srq_limit` (if not
    /// 0). As on mlx5, `max_wr` 0 is a queue that holds no request and `max_sge` 0 is
    /// one entry.
    pub fn create_srq(&self, attr: &SrqAttr) -> Result<SharedReceiveQueue<'_, B>> {
        let ctx = self.context();
        let log_max = ctx.cap(g::log_max_srq_sz).min(15) as u32;
        let max_wqe = ctx.cap(g::max_wqe_sz_rq).min(1 << 16) as u32;
        let exceeded = |what, requested: u32, max: u64| Error::CapExceeded {
            what,
            requested: requested.into(),
            max,
        };
        let nwqe = attr
            .max_wr
            .checked_add(1)
            .map(u32::next_power_of_two)
            .unwrap_or(u32::MAX);
        // As Linux's mlx5_ib (`mlx5_ib_create_srq`): `max_wr` 0 is a queue of one WQE
        // (`roundup_pow_of_two(max_wr + 1)`), which holds no request (libmlx5's
        // `mlx5_alloc_srq_buf` gives the caller `max_wr` 0 back, and its post finds it
        // full); only `max_wr` at or above the device's `1 << log_max_srq_sz` is
        // refused.
        if nwqe > 1 << log_max {
            return Err(exceeded("max_wr", attr.max_wr, (1u64 << log_max) - 1));
        }
        let stride = (NEXT_SEG as u32 + 16 * attr.max_sge.max(1))
            .next_power_of_two()
            .max(32);
        // `max_sge` 0 is one scatter entry, as mlx5_ib's descriptor of at least 32
        // bytes (`max_avail_gather` 1).
        if stride > max_wqe {
            return Err(exceeded(
                "max_sge",
                attr.max_sge,
                u64::from(max_wqe.saturating_sub(16) / 16),
            ));
        }
        if attr.srq_limit > attr.max_wr {
            return Err(exceeded(
                "srq_limit",
                attr.srq_limit,
                u64::from(attr.max_wr),
            ));
        }
        let ring = nwqe as usize * stride as usize;
        let dbr = ring.next_multiple_of(64);
        let buf = Arc::new(DmaBuf::new(ctx.bus(), dbr + 64, DmaPerm::RW)?);
        // The free list: i → i + 1 (the last one's link is written when it is freed).
        let next: Box<[u16]> = (0..nwqe).map(|i| ((i + 1) % nwqe) as u16).collect();
        for (i, &n) in next.iter().enumerate() {
            buf.write_be32(i * stride as usize, u32::from(n));
        }
        let npages = ring.div_ceil(PAGE_SIZE);
        let pas: Vec<u64> = (0..npages as u64)
            .map(|i| buf.iova() + i * PAGE_SIZE as u64)
            .collect();
        let input = create_srq_input(
            &SrqParams {
                log_srq_size: nwqe.trailing_zeros() as u8,
                log_rq_stride: (stride.trailing_zeros() - 4) as u8,
                pd: self.pdn(),
                lwm: attr.srq_limit.min(0xffff) as u16,
                dbr_addr: buf.iova() + dbr as u64,
                log_page_size: 0,
            },
            &pas,
        );
        let out = exec(ctx, &input, create_srq_out::SIZE)?;
        let srqn = create_srq_out::srqn.get(&out) as u32;
        let shared = Arc::new(SrqShared::new(nwqe));
        Ok(SharedReceiveQueue {
            pd: self,
            srqn,
            buf,
            shared,
            next,
            nwqe,
            stride: stride as usize,
            max_sge: (stride - NEXT_SEG as u32) / 16,
            head: 0,
            tail: (nwqe - 1) as u16,
            counter: 0,
            dbr,
            live: true,
        })
    }
}

/// What [`SharedReceiveQueue::query`] reports (`ibv_srq_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SrqInfo {
    /// Requests the SRQ holds.
    pub max_wr: u32,
    /// Scatter entries per request.
    pub max_sge: u32,
    /// The armed limit (0 once the limit event fired, until re-armed).
    pub srq_limit: u32,
    /// WQEs the device consumed so far (16 bits, `srqc.wqe_cnt`).
    pub wqe_cnt: u16,
}

impl<'a, B: Bus> SharedReceiveQueue<'a, B> {
    /// The SRQ number (what [`AsyncEvent::SrqLimitReached`](super::AsyncEvent) names).
    pub fn srq_num(&self) -> u32 {
        self.srqn
    }

    /// The device the SRQ belongs to.
    pub fn device(&self) -> crate::DeviceId {
        self.pd.context().id()
    }

    /// Requests it holds (at least what was asked).
    pub fn max_wr(&self) -> u32 {
        self.nwqe - 1
    }

    /// Scatter entries per request (at least what was asked).
    pub fn max_sge(&self) -> u32 {
        self.max_sge
    }

    /// The SRQ's WQEs as the poll reads their scatter lists back (scatter to CQE).
    pub(crate) fn recv_segs(&self) -> Result<super::scatter::RingSegs> {
        let shift = self.stride.trailing_zeros();
        super::scatter::RingSegs::new(&self.buf, 0, self.nwqe, shift, NEXT_SEG)
            .ok_or(Error::InvalidArgument("SRQ geometry"))
    }

    pub(crate) fn shared(&self) -> &Arc<SrqShared> {
        &self.shared
    }

    /// Links the WQEs completed since the last post after `tail`.
    fn reclaim(&mut self) -> bool {
        let mut any = false;
        while let Some(w) = self.shared.done.pop() {
            any = true;
            let t = usize::from(self.tail);
            self.next[t] = w;
            self.buf.write_be32(t * self.stride, u32::from(w));
            self.tail = w;
        }
        any
    }

    /// Posts receive requests (`ibv_post_srq_recv`) and publishes them with one
    /// doorbell record write. On an error the requests before the failed one are
    /// posted. Allocates nothing and makes no system call.
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), BadWr> {
        let mut res = Ok(());
        let mut n = 0u16;
        for (index, wr) in wrs.iter().enumerate() {
            if wr.sg_list.len() > self.max_sge as usize {
                res = Err(BadWr {
                    index,
                    error: PostError::TooManySge {
                        count: wr.sg_list.len(),
                        max: self.max_sge,
                    },
                });
                break;
            }
            if self.head == self.tail && !self.reclaim() {
                res = Err(BadWr {
                    index,
                    error: PostError::QueueFull { needed: 1, free: 0 },
                });
                break;
            }
            let i = usize::from(self.head);
            let base = i * self.stride + NEXT_SEG;
            let mut k = 0;
            for s in wr.sg_list.iter().filter(|s| s.length > 0) {
                self.write_seg(base + 16 * k, s.length, s.lkey, s.addr);
                k += 1;
            }
            if k < self.max_sge as usize {
                self.write_seg(base + 16 * k, 0, MLX5_INVALID_LKEY, 0);
            }
            self.shared.posted(i, wr.wr_id);
            self.head = self.next[i];
            n = n.wrapping_add(1);
        }
        if n > 0 {
            self.counter = self.counter.wrapping_add(n);
            self.pd.context().bus().wmb();
            self.buf.write_be32(self.dbr, u32::from(self.counter));
        }
        res
    }

    fn write_seg(&self, off: usize, len: u32, lkey: u32, addr: u64) {
        self.buf.write_be32(off, len);
        self.buf.write_be32(off + 4, lkey);
        self.buf.write_be64(off + 8, addr);
    }

    /// Completions of WQEs that were not posted (the device reported a WQE twice):
    /// skipped by the CQ (see [`CompletionQueue::skipped`](super::CompletionQueue::skipped)),
    /// and their WQE not handed back to the free list a second time.
    pub fn duplicate_completions(&self) -> u64 {
        self.shared.duplicates.load(Ordering::Relaxed)
    }

    /// Requests posted and not yet handed back by a completion (an upper bound of
    /// what the device still holds).
    pub fn outstanding(&mut self) -> u32 {
        self.reclaim();
        // Free WQEs: head .. tail along the links, tail excluded.
        let mut free = 0;
        let mut i = self.head;
        while i != self.tail && free < self.nwqe {
            free += 1;
            i = self.next[usize::from(i)];
        }
        self.nwqe - 1 - free
    }

    /// Arms the limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`, `ARM_RQ`): one
    /// [`AsyncEvent::SrqLimitReached`](super::AsyncEvent) when fewer than `limit`
    /// requests are posted, then disarmed. 0 disarms.
    pub fn arm(&mut self, limit: u32) -> Result<()> {
        if limit > self.max_wr() {
            return Err(Error::CapExceeded {
                what: "srq_limit",
                requested: limit.into(),
                max: self.max_wr().into(),
            });
        }
        let input = arm_srq_input(self.srqn, limit as u16);
        exec(
            self.pd.context(),
            &input,
            ferroverbs_hw::control::srq::arm_rq_out::SIZE,
        )
        .map(|_| ())
    }

    /// The device's view of the SRQ (`ibv_query_srq`, `QUERY_SRQ`).
    pub fn query(&self) -> Result<SrqInfo> {
        let mut input = new_input(Opcode::QuerySrq, 0, query_srq_in::SIZE);
        query_srq_in::srqn.set(&mut input, self.srqn.into());
        let out = exec(self.pd.context(), &input, query_srq_out::SIZE)?;
        let q = |f: ferroverbs_hw::Field| f.at(query_srq_out::srq_context_entry.bit).get(&out);
        Ok(SrqInfo {
            max_wr: (1u32 << q(srqc::log_srq_size)) - 1,
            max_sge: ((16u32 << q(srqc::log_rq_stride)) - NEXT_SEG as u32) / 16,
            srq_limit: q(srqc::lwm) as u32,
            wqe_cnt: q(srqc::wqe_cnt) as u16,
        })
    }

    /// Destroys the SRQ now and reports the result (dropping does the same and only
    /// logs a failure). Fails while QPs still use it.
    pub fn destroy(mut self) -> Result<()> {
        let r = self.release();
        if r.is_ok() {
            self.live = false;
        }
        r
    }

    fn release(&self) -> Result<()> {
        let mut input = new_input(Opcode::DestroySrq, 0, destroy_srq_in::SIZE);
        destroy_srq_in::srqn.set(&mut input, self.srqn.into());
        exec(self.pd.context(), &input, destroy_srq_out::SIZE).map(|_| ())
    }
}

impl<B: Bus> Drop for SharedReceiveQueue<'_, B> {
    fn drop(&mut self) {
        if self.live {
            if let Err(e) = self.release() {
                tracing::warn!(srqn = self.srqn, error = %e, "DESTROY_SRQ failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{DoneRing, SrqShared};
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::Arc;

    #[test]
    fn done_ring_is_fifo_across_laps() {
        let r = DoneRing::new(4);
        assert_eq!(r.pop(), None);
        for lap in 0..1000u32 {
            let n = 1 + (lap % 4) as u16;
            for k in 0..n {
                r.push(k + lap as u16);
            }
            for k in 0..n {
                assert_eq!(r.pop(), Some(k + lap as u16), "lap {lap}");
            }
            assert_eq!(r.pop(), None, "a stale slot of an earlier lap is not taken");
        }
    }

    #[test]
    fn a_duplicate_completion_is_dropped_and_counted() {
        let s = SrqShared::new(4);
        for i in 0..3 {
            s.posted(i, 100 + i as u64);
        }
        assert_eq!(s.retire(1), Some(101));
        // The device reports WQE 1 again, and WQE 3, never posted, too: both dropped
        // (the CQ skips them).
        assert_eq!(s.retire(1), None);
        assert_eq!(s.retire(3), None);
        assert_eq!(s.duplicates.load(Ordering::Relaxed), 2);
        assert_eq!(s.done.pop(), Some(1));
        assert_eq!(s.done.pop(), None, "index 1 is handed back once");
        // Laps of a device that completes every WQE twice: the ring never holds more
        // than the WQEs posted, so its producers never lap the consumer (without the
        // check, the second lap's pushes overwrite unread slots and `pop` stalls).
        let s = SrqShared::new(4);
        for lap in 0..1000u64 {
            for i in 0..3 {
                s.posted(i, lap);
            }
            for i in [2u16, 0, 1] {
                assert_eq!(s.retire(i), Some(lap));
                assert_eq!(s.retire(i), None);
            }
            for i in [2, 0, 1] {
                assert_eq!(s.done.pop(), Some(i), "lap {lap}");
            }
            assert_eq!(s.done.pop(), None, "lap {lap}");
        }
        assert_eq!(s.duplicates.load(Ordering::Relaxed), 3000);
    }

    #[test]
    fn done_ring_takes_every_index_of_concurrent_pollers_once() {
        // Four pollers complete WQEs (each owns four indexes and hands one back only
        // when the owner has reposted it, as a device completes a WQE once per post)
        // while the owner takes them back: every index comes back exactly once per
        // completion.
        const WQES: u32 = 16;
        const ROUNDS: u32 = 5_000;
        let r = Arc::new(DoneRing::new(WQES));
        let posted: Arc<Vec<AtomicBool>> =
            Arc::new((0..WQES).map(|_| AtomicBool::new(true)).collect());
        let pushes: Arc<Vec<AtomicU32>> = Arc::new((0..WQES).map(|_| AtomicU32::new(0)).collect());
        let pollers: Vec<_> = (0..4u16)
            .map(|p| {
                let (r, posted, pushes) =
                    (Arc::clone(&r), Arc::clone(&posted), Arc::clone(&pushes));
                std::thread::spawn(move || {
                    let mut pushed = 0;
                    while pushed < 4 * ROUNDS {
                        for i in (p * 4)..(p * 4 + 4) {
                            if pushed < 4 * ROUNDS
                                && posted[usize::from(i)].swap(false, Ordering::AcqRel)
                            {
                                pushes[usize::from(i)].fetch_add(1, Ordering::Relaxed);
                                r.push(i);
                                pushed += 1;
                            }
                        }
                        std::thread::yield_now();
                    }
                })
            })
            .collect();
        let mut seen = [0u32; WQES as usize];
        let mut taken = 0;
        while taken < 16 * ROUNDS {
            match r.pop() {
                Some(i) => {
                    let i = usize::from(i);
                    seen[i] += 1;
                    taken += 1;
                    posted[i].store(true, Ordering::Release);
                }
                None => std::thread::yield_now(),
            }
        }
        for p in pollers {
            p.join().unwrap();
        }
        assert_eq!(r.pop(), None);
        for (i, n) in seen.iter().enumerate() {
            assert_eq!(*n, pushes[i].load(Ordering::Relaxed), "index {i}");
        }
        for p in 0..4 {
            assert_eq!(seen[p * 4..p * 4 + 4].iter().sum::<u32>(), 4 * ROUNDS);
        }
    }
}

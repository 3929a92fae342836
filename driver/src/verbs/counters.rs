//! Counters: per device ([`Context::device_counters`]), per queue pair
//! ([`QueuePair::counters`]) and per completion queue ([`CompletionQueue::counters`]),
//! readable at any time without touching the fast path.
//!
//! # Where each number comes from
//!
//! * **Device** counters are read through the command interface, as on real hardware:
//!   QUERY_VPORT_COUNTER (`mlx5_ifc_query_vport_counter_out_bits`) gives packets and
//!   bytes in and out and the frames received with errors. Doorbells, WQE fetches,
//!   CQEs written, DMA bytes read and written (the PCIe traffic) and drops by reason
//!   have no PRM counter: the simulator reports them in the reserved tail of the same
//!   output ([`ferroverbs_hw::control::counters::ferroverbs_vport_counter_ext`]); a real
//!   ConnectX returns zeros there, so they read 0 on hardware.
//! * **QP** counters have two parts. What the driver knows it counts itself
//!   ([`QueuePair::counters`], no command): WRs
//!   posted (one add per `post_send` list), the SQ depth (read from the ring indices
//!   and the completion the CQ last published) and its high-water mark (kept by
//!   `post_send` with a bound that needs no extra memory access in the common case).
//!   What only the device knows ([`QueuePair::device_counters`]) comes from the QP's
//!   own **Q counter set**: the QP
//!   allocates one at creation (ALLOC_Q_COUNTER), names it in its context
//!   (`qpc.counter_set_id`, at CREATE_QP and RST2INIT as Linux does), reads it with
//!   QUERY_Q_COUNTER and frees it when destroyed. The PRM's Q counters are per set, so
//!   one set per QP makes them per QP. When the device has no set left (`max_qp_cnt`),
//!   the QP has none and [`QueuePair::device_counters`] gives `None`.
//! * **CQ** counters: QUERY_CQ's producer counter (CQEs written) minus the driver's
//!   consumer index is the backlog; the context's status says whether the CQ overran.
//!
//! The names of the device-side fields are the PRM's (`mlx5_ifc.h`) where one exists.

use std::sync::atomic::Ordering;

use ferroverbs_hw::control::cmd::Opcode;
use ferroverbs_hw::control::counters::{
    self as c, ferroverbs_q_counter_ext as qx, ferroverbs_vport_counter_ext as vx,
    query_q_counter_out as qo, query_vport_counter_out as vo,
};
use ferroverbs_hw::control::cq::{cqc, query_cq_in, query_cq_out, CqcStatus};
use ferroverbs_hw::{Bus, Field};

use super::qp::{Queues, DONE};
use super::{exec, CompletionQueue, QueuePair, Result};
use crate::ring::QueueMem;
use crate::Context;

/// Frames the device dropped on receive, by reason (simulator extension; 0 on real
/// hardware).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxDrops {
    /// ICRC mismatch.
    pub bad_icrc: u64,
    /// Not a well-formed RoCEv2 frame (Ethernet/IPv4/UDP/BTH structure, checksums).
    pub malformed: u64,
    /// Destination MAC of no port of the device.
    pub not_mine: u64,
    /// A transport the device does not serve.
    pub unsupported: u64,
    /// No such QP.
    pub no_qp: u64,
    /// The QP's state does not accept the packet.
    pub bad_state: u64,
    /// Addresses do not match the QP's path.
    pub bad_addr: u64,
    /// P_Key mismatch.
    pub bad_pkey: u64,
    /// A response matching no outstanding request.
    pub unexpected: u64,
    /// Stale or duplicate responses ignored.
    pub stale: u64,
    /// The device's receive queue was full.
    pub queue_full: u64,
}

impl RxDrops {
    /// All drops.
    pub fn total(&self) -> u64 {
        self.bad_icrc
            + self.malformed
            + self.not_mine
            + self.unsupported
            + self.no_qp
            + self.bad_state
            + self.bad_addr
            + self.bad_pkey
            + self.unexpected
            + self.stale
            + self.queue_full
    }
}

/// Device counters ([`Context::device_counters`]). Bytes of frames count from the
/// Ethernet header to the ICRC (no FCS, preamble or inter-frame gap).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Frames received (`received_eth_unicast.packets`).
    pub rx_packets: u64,
    /// Their bytes (`received_eth_unicast.octets`).
    pub rx_bytes: u64,
    /// Frames transmitted (`transmitted_eth_unicast.packets`).
    pub tx_packets: u64,
    /// Their bytes (`transmitted_eth_unicast.octets`).
    pub tx_bytes: u64,
    /// Frames received with errors (`received_errors.packets`: ICRC or structure).
    pub rx_errors: u64,
    /// Their bytes (`received_errors.octets`).
    pub rx_error_bytes: u64,
    /// Frames that could not be transmitted (`transmit_errors.packets`).
    pub tx_errors: u64,
    /// Their bytes (`transmit_errors.octets`).
    pub tx_error_bytes: u64,
    /// Send doorbells the device acted on (extension).
    pub doorbells: u64,
    /// Doorbells for no usable QP or CQ (extension).
    pub stray_doorbells: u64,
    /// Send WQEs fetched (extension).
    pub wqes_fetched: u64,
    /// CQEs written (extension).
    pub cqes_written: u64,
    /// Bytes the device read from host memory: DMA reads, the PCIe traffic towards
    /// the device: WQEs, payload, doorbell records, command mailboxes (extension).
    pub dma_read_bytes: u64,
    /// Bytes the device wrote to host memory: payload, CQEs, EQEs, command outputs
    /// (extension).
    pub dma_write_bytes: u64,
    /// Receive drops by reason (extension).
    pub drops: RxDrops,
    /// Duplicate requests received, answered again or ignored (extension).
    pub rx_duplicates: u64,
}

/// The device side of a QP's counters: its Q counter set (QUERY_Q_COUNTER; 32-bit
/// counters that wrap, as the PRM defines them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpDeviceCounters {
    /// The counter set.
    pub counter_set_id: u8,
    /// RDMA WRITE requests received (`rx_write_requests`).
    pub rx_write_requests: u32,
    /// RDMA READ requests received (`rx_read_requests`).
    pub rx_read_requests: u32,
    /// Atomic requests received (`rx_atomic_requests`).
    pub rx_atomic_requests: u32,
    /// Requests that found no receive WQE; each was answered with an RNR NAK
    /// (`out_of_buffer`).
    pub rnr_naks_sent: u32,
    /// Requests received out of sequence (`out_of_sequence`).
    pub out_of_sequence: u32,
    /// Duplicate requests received (`duplicate_request`).
    pub duplicate_requests: u32,
    /// Sequence NAKs received (`packet_seq_err`).
    pub seq_naks_received: u32,
    /// Implied NAKs (`implied_nak_seq_err`).
    pub implied_naks: u32,
    /// Local ACK timeouts (`local_ack_timeout_err`).
    pub ack_timeouts: u32,
    /// WQEs failed with RNR retry exceeded (`rnr_nak_retry_err`).
    pub rnr_retry_exceeded: u32,
    /// WQEs failed with transport retry exceeded (`req_transport_retries_exceeded`).
    pub retry_exceeded: u32,
    /// RNR NAKs received (extension; 0 on real hardware).
    pub rnr_naks_received: u32,
    /// Go-back-N retransmissions started, one per sequence NAK, implied NAK, local ACK
    /// timeout or RNR NAK acted on (extension).
    pub retransmissions: u32,
    /// Request packets sent again (extension).
    pub retransmitted_packets: u32,
}

/// A QP's counters ([`QueuePair::counters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCounters {
    /// Send WRs posted since creation.
    pub posted: u64,
    /// Send WRs completed: those whose completion the application polled (a signaled
    /// WR's completion also completes the unsignaled WRs before it).
    pub completed: u64,
    /// Send WRs posted and not completed now.
    pub sq_depth: u32,
    /// The same in WQEBBs (64-byte send queue slots).
    pub sq_depth_wqebbs: u32,
    /// The most WQEBBs ever outstanding right after a post (the high-water mark of
    /// `sq_depth_wqebbs`).
    pub sq_depth_hwm: u32,
    /// The send queue's size in WQEBBs.
    pub sq_size: u32,
    /// Receive WRs posted and not yet reclaimed (completed receives are reclaimed
    /// lazily, when the receive queue runs full).
    pub rq_outstanding: u32,
}

/// A CQ's counters ([`CompletionQueue::counters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqCounters {
    /// CQEs the device has written (its 24-bit producer counter).
    pub produced: u32,
    /// CQEs the application has polled (the 24-bit consumer index).
    pub consumed: u32,
    /// CQEs written and not polled yet: the backlog.
    pub backlog: u32,
    /// The CQ's size in CQEs.
    pub size: u32,
    /// CQEs lost to an overrun: 1 once the CQ overran (it is then in error and writes
    /// nothing more), else 0. A CQ created to ignore overruns never reports one: the
    /// device overwrites unpolled CQEs instead.
    pub overruns: u32,
    /// Whether the CQ is in error (overrun or a CQE write failure).
    pub in_error: bool,
}

fn get(out: &[u8], f: Field) -> u64 {
    if f.fits(out.len()) {
        f.get(out)
    } else {
        0
    }
}

impl<B: Bus> Context<B> {
    /// The device counters (QUERY_VPORT_COUNTER). Costs one firmware command; the fast
    /// path is not involved.
    pub fn device_counters(&self) -> Result<DeviceCounters> {
        self.query_device_counters(false)
    }

    /// The device counters, then zeroes them (QUERY_VPORT_COUNTER with `clear`).
    pub fn take_device_counters(&self) -> Result<DeviceCounters> {
        self.query_device_counters(true)
    }

    fn query_device_counters(&self, clear: bool) -> Result<DeviceCounters> {
        let out = exec(self, &c::query_vport_input(clear), vo::SIZE)?;
        let t = |m: Field| {
            let (p, b) = c::traffic(m);
            (get(&out, p), get(&out, b))
        };
        let x = |f: Field| get(&out, c::vport_ext(f));
        let (rx_packets, rx_bytes) = t(vo::received_eth_unicast);
        let (tx_packets, tx_bytes) = t(vo::transmitted_eth_unicast);
        let (rx_errors, rx_error_bytes) = t(vo::received_errors);
        let (tx_errors, tx_error_bytes) = t(vo::transmit_errors);
        Ok(DeviceCounters {
            rx_packets,
            rx_bytes,
            tx_packets,
            tx_bytes,
            rx_errors,
            rx_error_bytes,
            tx_errors,
            tx_error_bytes,
            doorbells: x(vx::doorbells),
            stray_doorbells: x(vx::stray_doorbells),
            wqes_fetched: x(vx::wqes_fetched),
            cqes_written: x(vx::cqes_written),
            dma_read_bytes: x(vx::dma_read_bytes),
            dma_write_bytes: x(vx::dma_write_bytes),
            drops: RxDrops {
                bad_icrc: x(vx::rx_drop_bad_icrc),
                malformed: x(vx::rx_drop_malformed),
                not_mine: x(vx::rx_drop_not_mine),
                unsupported: x(vx::rx_drop_unsupported),
                no_qp: x(vx::rx_drop_no_qp),
                bad_state: x(vx::rx_drop_bad_state),
                bad_addr: x(vx::rx_drop_bad_addr),
                bad_pkey: x(vx::rx_drop_bad_pkey),
                unexpected: x(vx::rx_drop_unexpected),
                stale: x(vx::rx_drop_stale),
                queue_full: x(vx::rx_drop_queue_full),
            },
            rx_duplicates: x(vx::rx_duplicates),
        })
    }

    /// Allocates a Q counter set (ALLOC_Q_COUNTER); `None` when the device has none
    /// (`max_qp_cnt` 0) or none left.
    pub(crate) fn alloc_q_counter(&self) -> Option<u8> {
        if self.cap(ferroverbs_hw::control::caps::cmd_hca_cap::max_qp_cnt) == 0 {
            return None;
        }
        match exec(self, &c::alloc_input(), c::alloc_q_counter_out::SIZE) {
            Ok(out) => c::allocated_set(&out).ok().filter(|&s| s != 0),
            Err(e) => {
                tracing::debug!(error = %e, "ALLOC_Q_COUNTER failed; QP without a counter set");
                None
            }
        }
    }

    /// Frees Q counter set `set` (DEALLOC_Q_COUNTER).
    pub(crate) fn dealloc_q_counter(&self, set: u8) -> Result<()> {
        exec(self, &c::dealloc_input(set), c::dealloc_q_counter_out::SIZE).map(|_| ())
    }

    /// Reads Q counter set `set` (QUERY_Q_COUNTER).
    fn query_q_counter(&self, set: u8) -> Result<QpDeviceCounters> {
        let out = exec(self, &c::query_q_input(set, false), qo::SIZE)?;
        let g = |f: Field| get(&out, f) as u32;
        let x = |f: Field| get(&out, c::q_ext(f)) as u32;
        Ok(QpDeviceCounters {
            counter_set_id: set,
            rx_write_requests: g(qo::rx_write_requests),
            rx_read_requests: g(qo::rx_read_requests),
            rx_atomic_requests: g(qo::rx_atomic_requests),
            rnr_naks_sent: g(qo::out_of_buffer),
            out_of_sequence: g(qo::out_of_sequence),
            duplicate_requests: g(qo::duplicate_request),
            seq_naks_received: g(qo::packet_seq_err),
            implied_naks: g(qo::implied_nak_seq_err),
            ack_timeouts: g(qo::local_ack_timeout_err),
            rnr_retry_exceeded: g(qo::rnr_nak_retry_err),
            retry_exceeded: g(qo::req_transport_retries_exceeded),
            rnr_naks_received: x(qx::rnr_nak_received),
            retransmissions: x(qx::retransmissions),
            retransmitted_packets: x(qx::retransmitted_packets),
        })
    }
}

/// `Queues::hwm_prev`: `DONE | index` of the last WQE of the latest post, compared
/// with `sq_done` (as a `u32`), or [`HwmPrev::FRESH`]. Two halves, so that the
/// one-request inline entry, which changes only the index, stores 16 bits
/// ([`Queues::note_posted_one`]); on a little-endian machine the two loads of a
/// compare are one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(4))]
pub(crate) struct HwmPrev {
    lo: u16,
    hi: u16,
}

impl HwmPrev {
    /// Before the first post (after creation and after a restart): a value
    /// `sq_done` never takes (it is 0 or `DONE | counter`), so that the first post
    /// measures the depth exactly and every later value is `DONE | index`.
    pub(crate) const FRESH: HwmPrev = HwmPrev { lo: 1, hi: 0 };

    /// `DONE | index` of the WQE at `index`.
    #[inline(always)]
    fn done(index: u16) -> HwmPrev {
        HwmPrev {
            lo: index,
            hi: (DONE >> 16) as u16,
        }
    }

    /// The value as `sq_done` holds it.
    #[inline(always)]
    pub(crate) fn get(self) -> u32 {
        (u32::from(self.hi) << 16) | u32::from(self.lo)
    }
}

impl PartialEq<HwmPrev> for u32 {
    #[inline(always)]
    fn eq(&self, h: &HwmPrev) -> bool {
        *self == h.get()
    }
}

impl<B: Bus> Queues<B> {
    /// Bookkeeping of a post of `nreq` send WRs (between its doorbell record and its
    /// doorbell), the first of which is the WQE at `start` and the last the WQE at
    /// `last`, leaving the producer counter at `cur`: the posted count and the depth
    /// high-water mark.
    ///
    /// Within a batch the depth only grows, so measuring it once here is exact. The
    /// depth is `cur_post` minus the end of the last WQE the CQ published as
    /// completed (`sq_done`). When that WQE is the last one of the previous post
    /// (the common case: post, complete, post again; `hwm_prev` is `DONE | its
    /// index`), it ended where this post started: every post comes here, so nothing
    /// was written between them. Otherwise the bound `cur_post - last_completed - 1`
    /// (exact when that WQE took one WQEBB, too large otherwise) decides, and only
    /// when it exceeds the mark does the cold path read the WQE's control segment
    /// and measure exactly.
    #[inline(always)]
    pub(crate) fn note_posted(&mut self, nreq: u32, last: u16, start: u16, cur: u16) {
        let d = self.shared.sq_done.load(Ordering::Relaxed);
        self.note_posted_with(nreq, last, start, cur, d);
    }

    /// [`Queues::note_posted`] with the completion `d` read (`sq_done`).
    #[inline(always)]
    pub(crate) fn note_posted_with(&mut self, nreq: u32, last: u16, start: u16, cur: u16, d: u32) {
        if d == self.hwm_prev {
            self.note_posted_prev(nreq, last, start, cur);
        } else {
            debug_assert_eq!(cur, self.sq.cur_post());
            self.posted += u64::from(nreq);
            self.note_depth_slow(d, cur);
            self.hwm_prev = HwmPrev::done(last);
        }
    }

    /// [`Queues::note_posted`] when the completion the CQ published (`sq_done`) is
    /// `hwm_prev`, the previous post's last WQE: it ended where this post started,
    /// so the depth is `cur - start`.
    #[inline(always)]
    pub(crate) fn note_posted_prev(&mut self, nreq: u32, last: u16, start: u16, cur: u16) {
        debug_assert_eq!(cur, self.sq.cur_post());
        self.posted += u64::from(nreq);
        let depth = cur.wrapping_sub(start);
        if depth > self.sq_hwm {
            self.sq_hwm = depth;
        }
        self.hwm_prev = HwmPrev::done(last);
    }

    /// [`Queues::note_posted_prev`] of one WQE at `start`, posted by the one-request
    /// inline entry (`post::send_one_inline`), whose gate keeps its depth within the
    /// mark ([`SqSlots::refresh_one_limit`](super::fastmem::SqSlots::refresh_one_limit)):
    /// no compare with the mark is needed.
    ///
    /// Called only when `sq_done` equals `hwm_prev`, which then has [`DONE`] set
    /// (`sq_done` is 0 or `DONE | counter`, and `hwm_prev` is [`HwmPrev::FRESH`] or
    /// `DONE | index`): only its low half changes (one 16-bit store).
    #[inline(always)]
    pub(crate) fn note_posted_one(&mut self, start: u16) {
        debug_assert!(
            self.sq.cur_post().wrapping_sub(start) <= self.sq_hwm,
            "the gate keeps the mark"
        );
        debug_assert_eq!(
            self.hwm_prev.get() & DONE,
            DONE,
            "after the shortcut's compare"
        );
        self.posted += 1;
        self.hwm_prev.lo = start;
    }

    /// [`Queues::note_posted`] when the completion the CQ published is not the
    /// previous post's last WQE: the bound, then the control segment, then the walk.
    #[cold]
    #[inline(never)]
    fn note_depth_slow(&mut self, d: u32, cur: u16) {
        let bound = if d & DONE != 0 {
            cur.wrapping_sub(d as u16).wrapping_sub(1)
        } else {
            cur
        };
        if bound > self.sq_hwm && self.depth_may_exceed_hwm(d) {
            self.raise_hwm();
        }
    }

    /// The check behind a bound above the mark: the bound assumed the last completed
    /// WQE took one WQEBB; its control segment (its slot is not reused while it is
    /// the latest completion the QP has not reclaimed) gives its real end, so a
    /// multi-WQEBB WQE (an inline SEND) does not send every post to the walk.
    /// `true` when the depth may exceed the mark (then `raise_hwm` measures).
    #[inline(always)]
    fn depth_may_exceed_hwm(&self, d: u32) -> bool {
        if d & DONE == 0 {
            return true;
        }
        match self.wqe_end(d as u16) {
            Some(end) => self.sq.cur_post().wrapping_sub(end) > self.sq_hwm,
            None => true,
        }
    }

    /// Receive WRs posted and not yet reclaimed.
    fn rq_outstanding(&self) -> u32 {
        self.rq.outstanding()
    }

    #[inline(never)]
    #[cold]
    fn raise_hwm(&mut self) {
        self.sync_sq();
        // The WQEBBs outstanding, without the walk that counts the WRs among them:
        // the walk is as long as the queue is deep, and a QP filling its SQ from
        // empty raises the mark at every post (quadratic in the depth, once per QP:
        // with many QPs it was most of a post's cost while they first filled).
        let (cur, tail) = self.sq_tail();
        self.sq_hwm = self.sq_hwm.max(cur.wrapping_sub(tail));
    }

    /// The end (next WQEBB counter) of the WQE starting at `at`, read back from its
    /// control segment; `None` if no WQE of index `at` starts there.
    #[inline(always)]
    fn wqe_end(&self, at: u16) -> Option<u16> {
        let mem = self.sq.mem();
        let mask = self.sq.config().wqe_cnt - 1;
        let off = (u32::from(at) & mask) as usize * 64;
        if off + 8 > mem.len() {
            return None;
        }
        let w0 = mem.load_be32(off);
        let w1 = mem.load_be32(off + 4);
        if (w0 >> 8) as u16 != at {
            return None;
        }
        let wqebbs = u16::from(w1 as u8 & 0x3f).div_ceil(4).max(1);
        Some(at.wrapping_add(wqebbs))
    }

    /// The producer counter and the start of what is outstanding: the end of the
    /// last completion the CQ published (or the ring's tail). Their difference is the
    /// WQEBBs outstanding.
    fn sq_tail(&self) -> (u16, u16) {
        let cur = self.sq.cur_post();
        let outstanding = self.sq.outstanding() as u16;
        let mut t = cur.wrapping_sub(outstanding);
        let d = self.shared.sq_done.load(Ordering::Acquire);
        if d & DONE != 0 {
            let c = d as u16;
            if c.wrapping_sub(t) < cur.wrapping_sub(t) {
                if let Some(e) = self.wqe_end(c) {
                    if e.wrapping_sub(t) <= cur.wrapping_sub(t) {
                        t = e;
                    }
                }
            }
        }
        (cur, t)
    }

    /// The send WRs and WQEBBs outstanding now: from the end of the last completion
    /// the CQ published (or the ring's tail) to the producer counter.
    fn sq_walk(&self) -> (u32, u32) {
        let (cur, mut t) = self.sq_tail();
        let wqebbs = u32::from(cur.wrapping_sub(t));
        let mut wrs = 0u32;
        while t != cur {
            match self.wqe_end(t) {
                Some(e) if e.wrapping_sub(t) <= cur.wrapping_sub(t) => {
                    wrs += 1;
                    t = e;
                }
                _ => break,
            }
        }
        (wrs, wqebbs)
    }
}

impl<B: Bus> QueuePair<'_, B> {
    /// The driver's counters of the QP: no command, no device access; the fast path's
    /// state is only read (a walk of the outstanding send WQEs' control segments).
    pub fn counters(&self) -> QpCounters {
        let q = &self.q;
        let (wrs, wqebbs) = q.sq_walk();
        QpCounters {
            posted: q.posted,
            completed: q.posted.saturating_sub(u64::from(wrs)),
            sq_depth: wrs,
            sq_depth_wqebbs: wqebbs,
            sq_depth_hwm: u32::from(q.sq_hwm),
            sq_size: q.sq.config().wqe_cnt,
            rq_outstanding: q.rq_outstanding(),
        }
    }

    /// The device's counters of the QP: its Q counter set (one QUERY_Q_COUNTER);
    /// `None` when the QP has no set.
    pub fn device_counters(&self) -> Result<Option<QpDeviceCounters>> {
        match self.counter_set {
            0 => Ok(None),
            set => self.pd.context().query_q_counter(set).map(Some),
        }
    }

    /// The QP's Q counter set (0: none).
    pub fn counter_set_id(&self) -> u8 {
        self.counter_set
    }
}

impl<B: Bus> CompletionQueue<'_, B> {
    /// The CQ's counters (one QUERY_CQ; the poll path is not involved).
    pub fn counters(&self) -> Result<CqCounters> {
        let ctx = self.core().ctx;
        let mut input = ferroverbs_hw::control::cmd::command_input(Opcode::QueryCq, 0);
        query_cq_in::cqn.set(&mut input, u64::from(self.cqn()));
        let out = exec(ctx, &input, query_cq_out::SIZE)?;
        let at = |f: Field| get(&out, f.at(query_cq_out::cq_context.bit));
        let produced = at(cqc::producer_counter) as u32;
        let consumed = self.consumer_index() & 0x00ff_ffff;
        let status = at(cqc::status) as u8;
        Ok(CqCounters {
            produced,
            consumed,
            backlog: produced.wrapping_sub(consumed) & 0x00ff_ffff,
            size: self.capacity() + 1,
            overruns: u32::from(status == CqcStatus::CqOverflow.value()),
            in_error: status != CqcStatus::Ok.value(),
        })
    }
}

//! Counters as the firmware reports them: Q counter sets (ALLOC_Q_COUNTER,
//! DEALLOC_Q_COUNTER, QUERY_Q_COUNTER; a QP counts into the set its context's
//! `counter_set_id` names) and the vport counters (QUERY_VPORT_COUNTER).
//!
//! The data path counts: the engine increments the set of the QP an event belongs to
//! ([`Firmware::q_counts`], one plain add on the engine's thread, which owns the
//! firmware while it works) and its own [`DataPathStats`]; the device hands those and
//! the IOMMU's DMA byte counts to the firmware right before a QUERY_VPORT_COUNTER
//! ([`Firmware::note_device_counters`]). What each counter means, and the simulator
//! extensions in the reserved tails of the query outputs, is described in
//! `ferroverbs_hw::control::counters` and `docs/simulator.md` ("Counters").
//!
//! Counter set numbers are 8 bits: sets 1..=`max_qp_cnt` are allocated; set 0 is
//! where QPs without a set count (it is not allocated and cannot be queried).
//! `clear` zeroes a set (or, for the vport, starts the counters again from zero) after
//! the values are read.

use ferroverbs_hw::control::counters::{
    alloc_q_counter_in, alloc_q_counter_out, dealloc_q_counter_in, dealloc_q_counter_out,
    ferroverbs_q_counter_ext as qx, ferroverbs_vport_counter_ext as vx, q_ext, query_q_counter_in,
    query_q_counter_out as qo, query_vport_counter_in, query_vport_counter_out as vo, traffic,
    vport_ext,
};

use super::resources::removed;
use super::{Cmd, CmdResult, Fail, Firmware, Out, Syndrome};
use crate::engine::DataPathStats;
use crate::iommu::Iommu;

/// Number of counter set numbers (8-bit `counter_set_id`).
pub const Q_COUNTER_IDS: usize = 256;

/// The counters of one Q counter set. Each is a 64-bit count here; QUERY_Q_COUNTER
/// reports the low 32 bits, as the PRM's counters are 32 bits wide.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QCounts {
    /// RDMA WRITE requests received (one per message).
    pub rx_write_requests: u64,
    /// RDMA READ requests received.
    pub rx_read_requests: u64,
    /// Atomic requests received.
    pub rx_atomic_requests: u64,
    /// Requests that found no receive WQE (RC: an RNR NAK was sent).
    pub out_of_buffer: u64,
    /// Requests received out of sequence (a sequence NAK sent or due).
    pub out_of_sequence: u64,
    /// Duplicate requests received.
    pub duplicate_request: u64,
    /// WQEs completed with RNR retry exceeded.
    pub rnr_nak_retry_err: u64,
    /// Sequence NAKs received.
    pub packet_seq_err: u64,
    /// Implied NAKs.
    pub implied_nak_seq_err: u64,
    /// Local ACK timeouts that caused a retransmission (or a retry-exceeded error).
    pub local_ack_timeout_err: u64,
    /// WQEs completed with transport retry exceeded.
    pub req_transport_retries_exceeded: u64,
    /// RNR NAKs received (extension).
    pub rnr_nak_received: u64,
    /// Go-back-N retransmissions started (extension).
    pub retransmissions: u64,
    /// Request packets sent again (extension).
    pub retransmitted_packets: u64,
}

/// The device-level counts QUERY_VPORT_COUNTER reports, as the device hands them over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounts {
    /// The data path's counters.
    pub dp: DataPathStats,
    /// Frames dropped because the device's receive queue was full.
    pub rx_queue_full: u64,
    /// Bytes read from host memory through the IOMMU.
    pub dma_read_bytes: u64,
    /// Bytes written to host memory through the IOMMU.
    pub dma_write_bytes: u64,
}

/// Every value QUERY_VPORT_COUNTER reports, in output order.
fn vport_values(d: &DeviceCounts) -> [(ferroverbs_hw::Field, u64); 26] {
    let s = &d.dp;
    let (rxe_p, rxe_b) = traffic(vo::received_errors);
    let (txe_p, txe_b) = traffic(vo::transmit_errors);
    let (rx_p, rx_b) = traffic(vo::received_eth_unicast);
    let (tx_p, tx_b) = traffic(vo::transmitted_eth_unicast);
    [
        (rxe_p, s.rx_bad_icrc + s.rx_malformed),
        (rxe_b, s.rx_error_bytes),
        (txe_p, s.tx_no_link),
        (txe_b, s.tx_error_bytes),
        (rx_p, s.rx_frames),
        (rx_b, s.rx_bytes),
        (tx_p, s.tx_frames),
        (tx_b, s.tx_bytes),
        (vport_ext(vx::doorbells), s.doorbells),
        (vport_ext(vx::stray_doorbells), s.stray_doorbells),
        (vport_ext(vx::wqes_fetched), s.wqes),
        (vport_ext(vx::cqes_written), s.cqes),
        (vport_ext(vx::dma_read_bytes), d.dma_read_bytes),
        (vport_ext(vx::dma_write_bytes), d.dma_write_bytes),
        (vport_ext(vx::rx_drop_bad_icrc), s.rx_bad_icrc),
        (vport_ext(vx::rx_drop_malformed), s.rx_malformed),
        (vport_ext(vx::rx_drop_not_mine), s.rx_not_mine),
        (vport_ext(vx::rx_drop_unsupported), s.rx_unsupported),
        (vport_ext(vx::rx_drop_no_qp), s.rx_no_qp),
        (vport_ext(vx::rx_drop_bad_state), s.rx_bad_state),
        (vport_ext(vx::rx_drop_bad_addr), s.rx_bad_addr),
        (vport_ext(vx::rx_drop_bad_pkey), s.rx_bad_pkey),
        (vport_ext(vx::rx_drop_unexpected), s.rx_unexpected),
        (vport_ext(vx::rx_drop_stale), s.rx_stale),
        (vport_ext(vx::rx_drop_queue_full), d.rx_queue_full),
        (vport_ext(vx::rx_duplicates), s.rx_duplicates),
    ]
}

/// Every value QUERY_Q_COUNTER reports.
fn q_values(q: &QCounts) -> [(ferroverbs_hw::Field, u64); 14] {
    [
        (qo::rx_write_requests, q.rx_write_requests),
        (qo::rx_read_requests, q.rx_read_requests),
        (qo::rx_atomic_requests, q.rx_atomic_requests),
        (qo::out_of_buffer, q.out_of_buffer),
        (qo::out_of_sequence, q.out_of_sequence),
        (qo::duplicate_request, q.duplicate_request),
        (qo::rnr_nak_retry_err, q.rnr_nak_retry_err),
        (qo::packet_seq_err, q.packet_seq_err),
        (qo::implied_nak_seq_err, q.implied_nak_seq_err),
        (qo::local_ack_timeout_err, q.local_ack_timeout_err),
        (
            qo::req_transport_retries_exceeded,
            q.req_transport_retries_exceeded,
        ),
        (q_ext(qx::rnr_nak_received), q.rnr_nak_received),
        (q_ext(qx::retransmissions), q.retransmissions),
        (q_ext(qx::retransmitted_packets), q.retransmitted_packets),
    ]
}

/// The Q counter sets and the vport counters' state.
#[derive(Debug)]
pub struct Counters {
    /// The values of every set number (0: QPs without a set).
    pub sets: Box<[QCounts; Q_COUNTER_IDS]>,
    /// The device counts as last handed over.
    pub device: DeviceCounts,
    /// The vport counters' zero point (moved by a `clear`).
    pub base: [u64; 26],
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            sets: Box::new([QCounts::default(); Q_COUNTER_IDS]),
            device: DeviceCounts::default(),
            base: [0; 26],
        }
    }
}

impl Firmware {
    /// The counters of Q counter set `set` (set 0 collects QPs without one): the data
    /// path increments them.
    #[inline]
    pub fn q_counts(&mut self, set: u8) -> &mut QCounts {
        &mut self.counters.sets[usize::from(set)]
    }

    /// The current values of Q counter set `set`.
    pub fn q_counts_of(&self, set: u8) -> QCounts {
        self.counters.sets[usize::from(set)]
    }

    /// Whether Q counter set `set` is allocated.
    pub fn q_counter_allocated(&self, set: u8) -> bool {
        set != 0 && self.q_sets.contains(u32::from(set))
    }

    /// Hands the device-level counts to the firmware (right before a
    /// QUERY_VPORT_COUNTER executes).
    pub fn note_device_counters(&mut self, d: DeviceCounts) {
        self.counters.device = d;
    }

    pub(super) fn alloc_q_counter(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(alloc_q_counter_in::SIZE, alloc_q_counter_out::SIZE)?;
        let n = self
            .q_sets
            .insert(())
            .ok_or(Fail::from(Syndrome::QCounterExhausted))?;
        // A set starts from zero.
        self.counters.sets[n as usize & (Q_COUNTER_IDS - 1)] = QCounts::default();
        let mut o = Out::new(alloc_q_counter_out::SIZE);
        o.set(alloc_q_counter_out::counter_set_id, u64::from(n));
        o.done()
    }

    pub(super) fn dealloc_q_counter(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(dealloc_q_counter_in::SIZE, dealloc_q_counter_out::SIZE)?;
        let n = c.get(dealloc_q_counter_in::counter_set_id) as u32;
        removed(
            self.q_sets.remove(n),
            Syndrome::QCounterUnknown,
            Syndrome::QCounterUnknown,
        )?;
        Out::new(dealloc_q_counter_out::SIZE).done()
    }

    pub(super) fn query_q_counter(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(query_q_counter_in::SIZE, qo::SIZE)?;
        let n = c.get(query_q_counter_in::counter_set_id) as u8;
        if !self.q_counter_allocated(n) {
            return Err(Syndrome::QCounterUnknown.into());
        }
        let mut o = Out::new(qo::SIZE);
        for (f, v) in q_values(&self.counters.sets[usize::from(n)]) {
            o.set(f, v & 0xffff_ffff);
        }
        if c.get(query_q_counter_in::clear) != 0 {
            self.counters.sets[usize::from(n)] = QCounts::default();
        }
        o.done()
    }

    pub(super) fn query_vport_counter(&mut self, c: &Cmd, io: &Iommu) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(query_vport_counter_in::SIZE, vo::SIZE)?;
        let port = c.get(query_vport_counter_in::port_num) as usize;
        if c.get(query_vport_counter_in::other_vport) != 0
            || c.get(query_vport_counter_in::vport_number) != 0
            || port > self.ports.len()
        {
            return Err(Syndrome::VportCounterOther.into());
        }
        // The IOMMU's totals are read now (the device's own accesses included).
        self.counters.device.dma_read_bytes = io.dma_read_bytes();
        self.counters.device.dma_write_bytes = io.dma_write_bytes();
        let values = vport_values(&self.counters.device);
        let mut o = Out::new(vo::SIZE);
        for (i, (f, v)) in values.iter().enumerate() {
            o.set(*f, v.wrapping_sub(self.counters.base[i]));
        }
        if c.get(query_vport_counter_in::clear) != 0 {
            for (i, (_, v)) in values.iter().enumerate() {
                self.counters.base[i] = *v;
            }
        }
        o.done()
    }

    /// Checks the `counter_set_id` a QP context names (0, or an allocated set).
    pub(super) fn check_counter_set(&self, set: u64) -> Result<(), Fail> {
        if set == 0 || self.q_counter_allocated(set as u8) && set < Q_COUNTER_IDS as u64 {
            Ok(())
        } else {
            Err(Syndrome::QpBadCounterSet.into())
        }
    }
}

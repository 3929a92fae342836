//! The post and poll paths of verbs objects over memory with no device behind it: a
//! [`DetachedQp`] and a [`DetachedCq`] run exactly the code of
//! [`QueuePair::post_send`](super::QueuePair::post_send),
//! [`QueuePair::post_recv`](super::QueuePair::post_recv) and
//! [`CompletionQueue::poll`](super::CompletionQueue::poll), on any [`Bus`] (typically
//! [`MemBus`](ferroverbs_hw::MemBus)), with no firmware object. The test plays the
//! device: it reads the WQEs and writes CQEs ([`DetachedCq::produce`]).
//!
//! For benchmarks, instruction counts and the allocation test; not for applications.
//!
//! ```
//! use std::sync::Arc;
//! use ferroverbs::verbs::fastpath::{DetachedCq, DetachedQp};
//! use ferroverbs::verbs::{QpCap, QpState, SendWr, WorkCompletion};
//! use ferroverbs_hw::MemBus;
//!
//! let bus = Arc::new(MemBus::new(1 << 16));
//! let mut cq = DetachedCq::new(&bus, 64).unwrap();
//! let mut qp = DetachedQp::new(&bus, 0x42, &QpCap::default(), false).unwrap();
//! cq.attach(&qp);
//! qp.set_state(QpState::Rts);
//! let index = qp.next_send_index();
//! let payload: &[&[u8]] = &[b"hello"];
//! qp.post_send(&[SendWr::send_inline(7, payload).signaled()]).unwrap();
//! cq.produce_send(0x42, index, ferroverbs_hw::datapath::wqe::MLX5_OPCODE_SEND);
//! let mut wc = [WorkCompletion::default(); 4];
//! assert_eq!(cq.poll(&mut wc), 1);
//! assert_eq!(wc[0].wr_id, 7);
//! ```

use std::sync::Arc;

use ferroverbs_hw::datapath::cqe::{
    hw_owner_bit, make_op_own, Cqe64, MLX5_CQE_REQ, MLX5_CQE_RESP_SEND,
};
use ferroverbs_hw::datapath::uar::{bf_buf_size, bfreg_offset, uar_bar_offset};
use ferroverbs_hw::{Bus, DmaPerm};

use super::cq::Poller;
use super::fastmem::SqSlots;
use super::qp::{geometry, Limits, Queues};
use super::{BadWr, QpCap, QpState, RecvWr, Result, SendWr, WorkCompletion};
use crate::dma::DmaBuf;
use crate::ring::BlueFlameReg;

/// The UAR a detached QP rings (BAR0 + 4 KiB).
pub const DETACHED_UAR: u32 = 1;

/// A QP's queues with no firmware QP: sized as on a ConnectX-5 (1 KiB send WQEs),
/// ringing BlueFlame register 0 of UAR [`DETACHED_UAR`] (512-byte register).
pub struct DetachedQp<B: Bus> {
    q: Queues<B>,
    sq_slots: SqSlots<B>,
}

impl<B: Bus> DetachedQp<B> {
    /// Queues for QP number `qpn` sized for `cap`; `sq_sig_all` signals every send.
    pub fn new(bus: &Arc<B>, qpn: u32, cap: &QpCap, sq_sig_all: bool) -> Result<Self> {
        let geo = geometry(&Limits::CX5, cap)?;
        let buf = Arc::new(DmaBuf::new(bus, geo.dbr_offset() + 64, DmaPerm::RW)?);
        let bf = BlueFlameReg {
            reg: uar_bar_offset(DETACHED_UAR) + bfreg_offset(0, 512),
            buf_size: bf_buf_size(512),
            index: 1,
        };
        let q = Queues::new(buf, geo, qpn, bf, sq_sig_all, false, true, Arc::clone(bus))?;
        let sq_slots = q.sq_slots()?;
        Ok(DetachedQp { q, sq_slots })
    }

    /// Like [`DetachedQp::new`], but on a register without BlueFlame (rdma-core's
    /// `MLX5_SHUT_UP_BF`): every doorbell is the 8-byte write of the last WQE's first
    /// 8 bytes.
    pub fn new_db_only(bus: &Arc<B>, qpn: u32, cap: &QpCap, sq_sig_all: bool) -> Result<Self> {
        let geo = geometry(&Limits::CX5, cap)?;
        let buf = Arc::new(DmaBuf::new(bus, geo.dbr_offset() + 64, DmaPerm::RW)?);
        let bf = BlueFlameReg {
            reg: uar_bar_offset(DETACHED_UAR) + bfreg_offset(0, 512),
            buf_size: bf_buf_size(512),
            index: 1,
        };
        let q = Queues::new(buf, geo, qpn, bf, sq_sig_all, true, true, Arc::clone(bus))?;
        let sq_slots = q.sq_slots()?;
        Ok(DetachedQp { q, sq_slots })
    }

    /// Sets the state (no firmware: only what the post paths check).
    pub fn set_state(&mut self, state: QpState) {
        self.q.state = state;
    }

    /// The granted capabilities.
    pub fn cap(&self) -> QpCap {
        self.q.geo.granted
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.q.shared.qpn
    }

    /// The WQE index (WQEBB counter) the next send request gets: what a requester
    /// CQE's `wqe_counter` names.
    pub fn next_send_index(&self) -> u16 {
        self.q.next_send_index()
    }

    /// The RQ counter the next receive request gets.
    pub fn next_recv_index(&self) -> u16 {
        self.q.next_recv_index()
    }

    /// [`QueuePair::post_send`](super::QueuePair::post_send).
    #[inline]
    pub fn post_send(&mut self, wrs: &[SendWr<'_>]) -> std::result::Result<(), BadWr> {
        self.q.post_send(wrs)
    }

    /// The QP's whole buffer (RQ, SQ, doorbell record), copied out: what the device
    /// would read (for tests comparing the bytes two post paths write).
    pub fn queue_bytes(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.q.buf.len()];
        self.q.buf.read_bytes(0, &mut v);
        v
    }

    /// The send doorbell record's value (what the device reads as the SQ producer
    /// counter).
    pub fn send_doorbell_record(&self) -> u32 {
        let off = self.q.geo.dbr_offset() + 4 * ferroverbs_hw::datapath::dbr::MLX5_SND_DBR;
        self.q.buf.read_be32(off)
    }

    /// The high-water mark of the SQ depth in WQEBBs
    /// ([`QpCounters::sq_depth_hwm`](super::QpCounters::sq_depth_hwm)).
    pub fn sq_depth_hwm(&self) -> u32 {
        u32::from(self.q.sq_hwm)
    }

    /// [`QueuePair::post`](super::QueuePair::post): a batch of typed send requests.
    #[inline(always)]
    pub fn post(&mut self) -> std::result::Result<super::SendBatch<'_, B>, super::PostError> {
        self.q.batch(&self.sq_slots)
    }

    /// [`QueuePair::post_recv`](super::QueuePair::post_recv).
    #[inline]
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), BadWr> {
        self.q.post_recv(wrs)
    }
}

/// A CQ's consumer with no firmware CQ, and the device's producer side for tests.
pub struct DetachedCq<B: Bus> {
    p: Poller<B>,
    /// The device's producer index.
    pi: u32,
}

impl<B: Bus> DetachedCq<B> {
    /// A CQ with room for `cqe` completions (the next power of two above).
    pub fn new(bus: &Arc<B>, cqe: u32) -> Result<Self> {
        let ncqe = (cqe + 1).next_power_of_two();
        Ok(DetachedCq {
            p: Poller::new(bus, ncqe, 0, DETACHED_UAR)?,
            pi: 0,
        })
    }

    /// Routes `qp`'s completions here.
    pub fn attach(&self, qp: &DetachedQp<B>) {
        self.p.attach(Arc::clone(&qp.q.shared));
    }

    /// [`CompletionQueue::poll`](super::CompletionQueue::poll).
    #[inline]
    pub fn poll(&mut self, wc: &mut [WorkCompletion]) -> usize {
        self.p.poll(wc)
    }

    /// [`CompletionQueue::skipped`](super::CompletionQueue::skipped).
    pub fn skipped(&self) -> u64 {
        self.p.unknown
    }

    /// [`CompletionQueue::poll_one`](super::CompletionQueue::poll_one).
    #[inline]
    pub fn poll_one(&mut self) -> Option<WorkCompletion> {
        self.p.poll_one()
    }

    /// Writes `cqe` as the device would: at the producer index, body first, then
    /// `op_own` with the owner bit of this pass (`cqe`'s own owner bit is ignored).
    pub fn produce(&mut self, cqe: &Cqe64) {
        let ncqe = self.p.ncqe;
        let off = (self.pi & (ncqe - 1)) as usize * 64;
        let bytes = zerocopy::IntoBytes::as_bytes(cqe);
        self.p.buf.write_bytes(off, &bytes[..63]);
        let op_own = (bytes[63] & !1) | hw_owner_bit(self.pi, ncqe);
        self.p.buf.store_u8_release(off + 63, op_own);
        self.pi = self.pi.wrapping_add(1);
    }

    /// Produces a successful requester CQE for the send WQE at `index` of `qpn`.
    pub fn produce_send(&mut self, qpn: u32, index: u16, send_opcode: u8) {
        let mut c = zeroed_cqe();
        c.set_sop_drop_qpn(send_opcode, qpn);
        c.wqe_counter.set(index);
        c.op_own = make_op_own(MLX5_CQE_REQ, 0, false, 0);
        self.produce(&c);
    }

    /// Produces a receive CQE of `byte_len` bytes for the receive WQE at `counter`.
    pub fn produce_recv(&mut self, qpn: u32, counter: u16, byte_len: u32) {
        let mut c = zeroed_cqe();
        c.set_sop_drop_qpn(0, qpn);
        c.wqe_counter.set(counter);
        c.byte_cnt.set(byte_len);
        c.op_own = make_op_own(MLX5_CQE_RESP_SEND, 0, false, 0);
        self.produce(&c);
    }
}

fn zeroed_cqe() -> Cqe64 {
    zerocopy::transmute!([0u8; 64])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::{Sge, WcOpcode};
    use ferroverbs_hw::datapath::wqe::{MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_SEND};
    use ferroverbs_hw::MemBus;

    type Cqs = [DetachedCq<MemBus>; 2];

    /// Posts one signaled SEND on `qp` and produces its requester CQE (send opcode
    /// `op`) on both CQs.
    fn produce(cqs: &mut Cqs, qp: &mut DetachedQp<MemBus>, wr_id: u64, op: u8) {
        let sge = [Sge {
            addr: 0x1000,
            length: 8,
            lkey: 5,
        }];
        let idx = qp.next_send_index();
        qp.post_send(&[SendWr::send(wr_id, &sge).signaled()])
            .unwrap();
        for cq in cqs.iter_mut() {
            cq.produce_send(qp.qp_num(), idx, op);
        }
    }

    /// `poll_one` on the first CQ, `poll` of one entry on the second: the same.
    fn check(cqs: &mut Cqs) -> Option<WorkCompletion> {
        let got = cqs[0].poll_one();
        let mut w = [WorkCompletion::default(); 1];
        let n = cqs[1].poll(&mut w);
        assert_eq!(got, (n == 1).then_some(w[0]));
        assert_eq!(cqs[0].skipped(), cqs[1].skipped());
        got
    }

    /// `poll_one`'s inline path trusts the QP it saw last only while that QP lives:
    /// once destroyed, its CQEs are skipped (counted), as `poll` skips them, and the
    /// other QPs of the CQ still complete, across ring wraps and QP switches.
    #[test]
    fn a_destroyed_hot_qp_is_not_matched() {
        let bus = Arc::new(MemBus::new(1 << 18));
        let cap = QpCap::default();
        let mut cqs = [
            DetachedCq::new(&bus, 3).unwrap(),
            DetachedCq::new(&bus, 3).unwrap(),
        ];
        let mut a = DetachedQp::new(&bus, 0x10, &cap, false).unwrap();
        let mut b = DetachedQp::new(&bus, 0x20, &cap, false).unwrap();
        for qp in [&mut a, &mut b] {
            for cq in &cqs {
                cq.attach(qp);
            }
            qp.set_state(QpState::Rts);
        }
        for round in 0..20u64 {
            produce(&mut cqs, &mut a, round, MLX5_OPCODE_SEND);
            let wc = check(&mut cqs).expect("a's completion");
            assert_eq!((wc.wr_id, wc.qp_num), (round, 0x10));
            produce(&mut cqs, &mut b, round + 100, MLX5_OPCODE_RDMA_READ);
            let wc = check(&mut cqs).expect("b's completion");
            assert_eq!(
                (wc.wr_id, wc.qp_num, wc.opcode),
                (round + 100, 0x20, WcOpcode::RdmaRead)
            );
        }
        // `a` is hot in the first CQ again, then destroyed.
        produce(&mut cqs, &mut a, 7, MLX5_OPCODE_SEND);
        assert_eq!(check(&mut cqs).unwrap().wr_id, 7);
        a.q.shared.kill();
        // A new QP attaches: the hot (dead) `a` stays in the list.
        let c = DetachedQp::new(&bus, 0x30, &cap, false).unwrap();
        for cq in &cqs {
            cq.attach(&c);
        }
        for round in 0..12u64 {
            produce(&mut cqs, &mut a, round, MLX5_OPCODE_SEND);
            assert_eq!(check(&mut cqs), None);
            assert_eq!(cqs[0].skipped(), round + 1);
            produce(&mut cqs, &mut b, round, MLX5_OPCODE_SEND);
            assert_eq!(check(&mut cqs).unwrap().qp_num, 0x20);
        }
        assert_eq!(check(&mut cqs), None);
    }
}

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
use ferroverbs_hw::{Bus, DmaPerm};

use super::cq::{CqeSize, Poller};
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

impl<B: Bus> super::post::SqOwner<B> for DetachedQp<B> {
    #[inline(always)]
    fn parts(&mut self) -> (&mut Queues<B>, &mut SqSlots<B>) {
        (&mut self.q, &mut self.sq_slots)
    }
}

impl<B: Bus> DetachedQp<B> {
    /// Queues for QP number `qpn` sized for `cap`; `sq_sig_all` signals every send.
    pub fn new(bus: &Arc<B>, qpn: u32, cap: &QpCap, sq_sig_all: bool) -> Result<Self> {
        let geo = geometry(&Limits::CX5, cap)?;
        let buf = Arc::new(DmaBuf::new(bus, geo.dbr_offset() + 64, DmaPerm::RW)?);
        let bf = BlueFlameReg::blueflame(DETACHED_UAR, 512);
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
        let bf = BlueFlameReg::blueflame(DETACHED_UAR, 512);
        let q = Queues::new(buf, geo, qpn, bf, sq_sig_all, true, true, Arc::clone(bus))?;
        let sq_slots = q.sq_slots()?;
        Ok(DetachedQp { q, sq_slots })
    }

    /// Sets the state (no firmware: only what the post paths check).
    pub fn set_state(&mut self, state: QpState) {
        self.q.state = state;
        self.sq_slots.close();
    }

    /// The SQ ring's offset in [`DetachedQp::queue_bytes`] and its WQEBBs.
    #[cfg(test)]
    pub(crate) fn sq_layout(&self) -> (usize, usize) {
        self.q.geo.sq_layout()
    }

    /// Makes the queues those of a QP of transport `ty` (before any post).
    #[cfg(test)]
    pub(crate) fn set_qp_type(&mut self, ty: crate::ring::QpType) {
        self.q.set_qp_type(ty).unwrap();
        self.sq_slots.close();
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
        super::post::post_send(self, wrs)
    }

    /// `post_send` with every request through the general writer
    /// ([`SendQueue::write_wqe`](crate::ring::SendQueue::write_wqe)): the reference
    /// the tests compare the typed writers with.
    #[cfg(test)]
    pub(crate) fn post_send_general(
        &mut self,
        wrs: &[SendWr<'_>],
    ) -> std::result::Result<(), BadWr> {
        // The typed entries' position is behind the WQEs written here.
        self.sq_slots.close();
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
        self.q.batch(&mut self.sq_slots)
    }

    /// [`QueuePair::send`](super::QueuePair::send): one SEND of a gather entry,
    /// rung.
    #[inline(always)]
    pub fn send(
        &mut self,
        wr_id: u64,
        sge: &super::Sge,
        flags: super::SendFlags,
    ) -> std::result::Result<(), super::PostError> {
        let one = super::post::OneData::Sge(sge);
        self.q.send_one(&mut self.sq_slots, wr_id, one, flags)
    }

    /// [`QueuePair::send_inline`](super::QueuePair::send_inline): one inline SEND,
    /// rung.
    #[inline(always)]
    pub fn send_inline(
        &mut self,
        wr_id: u64,
        data: &[u8],
        flags: super::SendFlags,
    ) -> std::result::Result<(), super::PostError> {
        super::post::send_one_inline(self, wr_id, data, flags)
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
    /// A CQ with room for `cqe` completions (the next power of two above), of
    /// 64-byte CQEs.
    pub fn new(bus: &Arc<B>, cqe: u32) -> Result<Self> {
        Self::with_cqe_size(bus, cqe, CqeSize::Bytes64)
    }

    /// [`DetachedCq::new`] with entries of `size`.
    pub fn with_cqe_size(bus: &Arc<B>, cqe: u32, size: CqeSize) -> Result<Self> {
        let ncqe = (cqe + 1).next_power_of_two();
        Ok(DetachedCq {
            p: Poller::new(bus, ncqe, size, 0, DETACHED_UAR)?,
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

    /// [`CompletionQueue::poll_each`](super::CompletionQueue::poll_each).
    #[inline]
    pub fn poll_each(&mut self, max: usize, f: impl FnMut(&WorkCompletion)) -> usize {
        self.p.poll_each(max, f)
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

    /// [`CompletionQueue::poll_hot_req`](super::CompletionQueue::poll_hot_req).
    #[inline]
    pub fn poll_hot_req<R>(&mut self, f: impl FnOnce(super::HotReq) -> R) -> Option<R> {
        self.p.poll_hot_req(f)
    }

    /// The size of the CQ's entries.
    pub fn cqe_size(&self) -> CqeSize {
        self.p.cqe_size()
    }

    /// The doorbell record's consumer index word (`MLX5_CQ_SET_CI`) as the device
    /// reads it: `consumer index & 0xffffff`.
    pub fn doorbell_record(&self) -> u32 {
        let off = self.p.ncqe as usize * self.p.cqe_size().bytes()
            + 4 * ferroverbs_hw::datapath::dbr::MLX5_CQ_SET_CI;
        self.p.buf.read_be32(off)
    }

    /// The device's producer index (entries produced so far, from where it started).
    pub fn producer_index(&self) -> u32 {
        self.pi
    }

    /// Starts the CQ (consumer and producer) at index `ci`.
    #[cfg(test)]
    fn start_at(&mut self, ci: u32) {
        self.p.start_at(ci);
        self.pi = ci;
    }

    /// Writes `cqe` as the device would: at the producer index (the second half of a
    /// 128-byte entry, whose first half gets [`WIDE_FILL`] bytes: the PRM leaves
    /// it undefined when no data is scattered there), body first, then `op_own`
    /// with the owner bit of this pass (`cqe`'s own owner bit is ignored).
    pub fn produce(&mut self, cqe: &Cqe64) {
        let ncqe = self.p.ncqe;
        let stride = self.p.cqe_size().bytes();
        let off = (self.pi & (ncqe - 1)) as usize * stride + stride - 64;
        if stride == 128 {
            self.p.buf.write_bytes(off - 64, &[WIDE_FILL; 64]);
        }
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

/// What [`DetachedCq::produce`] writes into the first half of a 128-byte entry: read
/// as a CQE, an opcode (0xa) that is not INVALID with owner bit 1, and QPN 0xa5a5a5,
/// so a poll that looked there would not find the completion produced.
pub const WIDE_FILL: u8 = 0xa5;

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

    /// The doorbell record holds the consumer index (modulo 2^24) after every poll,
    /// through the cursor's chunk ends (every 256 entries, or the ring's end on
    /// smaller rings), ring wraps and the index's 24-bit wrap (and the device's
    /// 32-bit one), with `poll_one`, `poll` and `poll_each` of 1 to 4 entries and
    /// `poll_hot_req` (then `poll_one` when it takes nothing); and every
    /// completion has its own values, written here from the CQE that was produced
    /// (not from the driver's other poll path): requester SEND, RDMA READ (the CQE's
    /// byte count), atomics (8), WRITE with immediate, CQEs with the SE bit, a switch
    /// to another QP, responder, requester error, and CQEs of an unknown QP (skipped,
    /// but consumed and published).
    #[test]
    fn the_doorbell_record_is_exact_after_every_poll() {
        use ferroverbs_hw::datapath::cqe::{CqeSyndrome, MLX5_CQE_REQ_ERR};
        use ferroverbs_hw::datapath::wqe::{MLX5_OPCODE_ATOMIC_FA, MLX5_OPCODE_RDMA_WRITE_IMM};
        use std::collections::VecDeque;

        use crate::verbs::{RecvWr, WcFlags, WcStatus};

        const A: u32 = 0x12_3456;
        const B: u32 = 0x10;
        let sge = [Sge {
            addr: 0x1000,
            length: 8,
            lkey: 5,
        }];
        let configs: [(u32, u32, u32); 7] = [
            (1, 0, 40),
            (3, 0, 300),
            (255, 0, 1100),
            (511, 0, 1500),
            (1023, (1 << 24) - 700, 1500),
            (3, (1 << 24) - 5, 40),
            (255, u32::MAX - 600, 1300),
        ];
        let mut seed = 0x2545_f491_u32;
        let mut rnd = |n: u32| {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed % n
        };
        let sizes = [CqeSize::Bytes64, CqeSize::Bytes128];
        for (size, (cqe, start, entries)) in sizes.into_iter().flat_map(|s| configs.map(|c| (s, c)))
        {
            let bus = Arc::new(MemBus::new(1 << 20));
            let mut cq = DetachedCq::with_cqe_size(&bus, cqe, size).unwrap();
            assert_eq!(cq.cqe_size(), size);
            cq.start_at(start);
            assert_eq!(cq.doorbell_record(), start & 0xff_ffff);
            let mut a = DetachedQp::new(&bus, A, &QpCap::default(), false).unwrap();
            let mut b = DetachedQp::new(&bus, B, &QpCap::default(), false).unwrap();
            cq.attach(&a);
            cq.attach(&b);
            a.set_state(QpState::Rts);
            b.set_state(QpState::Rts);
            // What each produced entry must give (`None`: skipped).
            let mut want: VecDeque<Option<WorkCompletion>> = VecDeque::new();
            let mut consumed = start;
            let mut produced = 0;
            let mut wr_id = 0u64;
            while produced < entries {
                let burst = 1 + rnd(5).min(cqe - 1);
                for _ in 0..burst {
                    produced += 1;
                    wr_id += 1;
                    let kind = rnd(9);
                    let mut wc = WorkCompletion {
                        wr_id,
                        qp_num: A,
                        ..WorkCompletion::default()
                    };
                    let mut c = zeroed_cqe();
                    let (qp, qpn) = if kind == 4 { (&mut b, B) } else { (&mut a, A) };
                    match kind {
                        0..=4 | 8 => {
                            let idx = qp.next_send_index();
                            qp.post_send(&[SendWr::send(wr_id, &sge).signaled()])
                                .unwrap();
                            let op = match kind {
                                1 => MLX5_OPCODE_RDMA_READ,
                                2 => MLX5_OPCODE_ATOMIC_FA,
                                3 => MLX5_OPCODE_RDMA_WRITE_IMM,
                                _ => MLX5_OPCODE_SEND,
                            };
                            c.set_sop_drop_qpn(op, qpn);
                            c.wqe_counter.set(idx);
                            c.byte_cnt.set(0x1_0000 + produced);
                            c.op_own = make_op_own(MLX5_CQE_REQ, 0, kind == 8, 0);
                            wc.qp_num = qpn;
                            match kind {
                                1 => {
                                    wc.opcode = WcOpcode::RdmaRead;
                                    wc.byte_len = 0x1_0000 + produced;
                                }
                                2 => {
                                    wc.opcode = WcOpcode::FetchAdd;
                                    wc.byte_len = 8;
                                }
                                3 => {
                                    wc.opcode = WcOpcode::RdmaWrite;
                                    wc.wc_flags = WcFlags::WITH_IMM;
                                }
                                _ => {}
                            }
                            cq.produce(&c);
                            want.push_back(Some(wc));
                        }
                        5 => {
                            let idx = a.next_recv_index();
                            a.post_recv(&[RecvWr::new(wr_id, &sge)]).unwrap();
                            cq.produce_recv(A, idx, 100 + produced);
                            wc.opcode = WcOpcode::Recv;
                            wc.byte_len = 100 + produced;
                            want.push_back(Some(wc));
                        }
                        6 => {
                            c.set_sop_drop_qpn(MLX5_OPCODE_SEND, A + 1);
                            c.op_own = make_op_own(MLX5_CQE_REQ, 0, false, 0);
                            cq.produce(&c);
                            want.push_back(None);
                        }
                        _ => {
                            let idx = a.next_send_index();
                            a.post_send(&[SendWr::send(wr_id, &sge).signaled()])
                                .unwrap();
                            c.set_sop_drop_qpn(MLX5_OPCODE_SEND, A);
                            c.wqe_counter.set(idx);
                            {
                                let bytes = zerocopy::IntoBytes::as_mut_bytes(&mut c);
                                bytes[54] = 0x88;
                                bytes[55] = CqeSyndrome::RemoteAccessErr as u8;
                            }
                            c.op_own = make_op_own(MLX5_CQE_REQ_ERR, 0, false, 0);
                            cq.produce(&c);
                            wc.status = WcStatus::RemAccessErr;
                            wc.vendor_err = 0x88;
                            want.push_back(Some(wc));
                        }
                    }
                }
                // Take them all, with `poll_one`, `poll` of 1 to 4 entries,
                // `poll_each` of 1 to 4, or `poll_hot_req` (as the C one-entry
                // poll: the completion from `requester_completion`, and when it
                // takes nothing, `poll_one`).
                let mode = rnd(10);
                loop {
                    // What the call must return: skipped entries before each
                    // completion are consumed with it.
                    let max = if mode == 0 {
                        1
                    } else {
                        1 + (mode as usize - 1) % 4
                    };
                    let mut expect = Vec::new();
                    let mut taken = 0;
                    while expect.len() < max {
                        match want.pop_front() {
                            Some(w) => {
                                taken += 1;
                                if let Some(w) = w {
                                    expect.push(w);
                                }
                            }
                            None => break,
                        }
                    }
                    let got: Vec<WorkCompletion> = if mode == 0 {
                        cq.poll_one().into_iter().collect()
                    } else if mode == 9 {
                        let hot = cq.poll_hot_req(|r| {
                            let mut w = crate::verbs::requester_completion(r.send_op)
                                .expect("an opcode of the table");
                            w.wr_id = r.wr_id;
                            w.qp_num = r.qp_num;
                            w
                        });
                        match hot {
                            Some(w) => vec![w],
                            None => cq.poll_one().into_iter().collect(),
                        }
                    } else if mode > 4 {
                        let mut v = Vec::new();
                        let n = cq.poll_each(max, |w| v.push(*w));
                        assert_eq!(n, v.len());
                        v
                    } else {
                        let mut w = [WorkCompletion::default(); 4];
                        let n = cq.poll(&mut w[..max]);
                        w[..n].to_vec()
                    };
                    consumed = consumed.wrapping_add(taken);
                    assert_eq!(
                        got, expect,
                        "{size:?} cqe {cqe} start {start:#x} at {consumed:#x}"
                    );
                    assert_eq!(
                        cq.doorbell_record(),
                        consumed & 0xff_ffff,
                        "{size:?} cqe {cqe} start {start:#x}"
                    );
                    if want.is_empty() && got.len() < max {
                        break;
                    }
                }
                assert_eq!(consumed, cq.producer_index());
            }
            assert!(cq.poll_one().is_none());
        }
    }

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

    /// Two CQs of `cqe` entries (`poll_one` on the first, `poll` on the second), both
    /// attached to QPs 0x10 and 0x20 of capabilities `cap`, in RTS.
    fn two_qps_on_two_cqs(
        bus: &Arc<MemBus>,
        cap: &QpCap,
        cqe: u32,
    ) -> (Cqs, DetachedQp<MemBus>, DetachedQp<MemBus>) {
        let cqs = [
            DetachedCq::new(bus, cqe).unwrap(),
            DetachedCq::new(bus, cqe).unwrap(),
        ];
        let mut a = DetachedQp::new(bus, 0x10, cap, false).unwrap();
        let mut b = DetachedQp::new(bus, 0x20, cap, false).unwrap();
        for qp in [&mut a, &mut b] {
            for cq in &cqs {
                cq.attach(qp);
            }
            qp.set_state(QpState::Rts);
        }
        (cqs, a, b)
    }

    /// `poll_one`'s inline path trusts the QP it saw last only while that QP lives:
    /// once destroyed, its CQEs are skipped (counted), as `poll` skips them, and the
    /// other QPs of the CQ still complete, across ring wraps and QP switches.
    #[test]
    fn a_destroyed_hot_qp_is_not_matched() {
        let bus = Arc::new(MemBus::new(1 << 18));
        let cap = QpCap::default();
        let (mut cqs, mut a, mut b) = two_qps_on_two_cqs(&bus, &cap, 3);
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

    /// `poll_hot_req` tests ownership in the same load as the QP and the CQE kind:
    /// on a ring of 4 entries (one cursor chunk, so every fourth entry is a chunk's
    /// last) over 40 passes it takes each SEND of the hot QP as it comes, the last
    /// entry of a chunk included, with the doorbell record exact after each; it
    /// takes nothing from the slot after the last entry, which holds the same QP's
    /// requester CQE of the previous pass (the owner bit of that pass) or, in the
    /// first pass, an entry software initialised; nor an RDMA READ (taken by
    /// `poll_one` after it) nor, once the QP is destroyed, any of its CQEs (skipped
    /// by `poll_one`).
    #[test]
    fn the_hot_requester_entry_tests_ownership_in_its_compare() {
        let bus = Arc::new(MemBus::new(1 << 18));
        let mut cq = DetachedCq::new(&bus, 3).unwrap();
        let mut a = DetachedQp::new(&bus, 0x10, &QpCap::default(), false).unwrap();
        cq.attach(&a);
        a.set_state(QpState::Rts);
        let sge = [Sge {
            addr: 0x1000,
            length: 8,
            lkey: 5,
        }];
        let post = |a: &mut DetachedQp<MemBus>, cq: &mut DetachedCq<MemBus>, wr_id, op| {
            let idx = a.next_send_index();
            a.post_send(&[SendWr::send(wr_id, &sge).signaled()])
                .unwrap();
            cq.produce_send(0x10, idx, op);
        };
        let take =
            |cq: &mut DetachedCq<MemBus>| cq.poll_hot_req(|r| (r.wr_id, r.qp_num, r.send_op));
        // Empty (initialised entries, the dead placeholder hot): nothing.
        assert_eq!(take(&mut cq), None);
        // The first completion makes `a` hot (through `poll_one`).
        post(&mut a, &mut cq, 1, MLX5_OPCODE_SEND);
        assert_eq!(take(&mut cq), None);
        assert_eq!(cq.poll_one().map(|w| w.wr_id), Some(1));
        assert_eq!(take(&mut cq), None);
        for wr_id in 2..162u64 {
            post(&mut a, &mut cq, wr_id, MLX5_OPCODE_SEND);
            assert_eq!(take(&mut cq), Some((wr_id, 0x10, MLX5_OPCODE_SEND)));
            assert_eq!(cq.doorbell_record(), wr_id as u32);
            // The next slot: `a`'s CQE of the previous pass (or, before the first
            // wrap, an initialised entry).
            assert_eq!(take(&mut cq), None, "after {wr_id}");
            assert_eq!(cq.doorbell_record(), wr_id as u32);
        }
        // An RDMA READ needs the CQE's byte count: left to the general reader.
        post(&mut a, &mut cq, 500, MLX5_OPCODE_RDMA_READ);
        assert_eq!(take(&mut cq), None);
        let wc = cq.poll_one().expect("the READ");
        assert_eq!((wc.wr_id, wc.opcode), (500, WcOpcode::RdmaRead));
        post(&mut a, &mut cq, 501, MLX5_OPCODE_SEND);
        assert_eq!(take(&mut cq), Some((501, 0x10, MLX5_OPCODE_SEND)));
        // Destroyed: its CQEs are not taken, and skipped by the general reader.
        a.q.shared.kill();
        post(&mut a, &mut cq, 502, MLX5_OPCODE_SEND);
        assert_eq!(take(&mut cq), None);
        assert_eq!(cq.poll_one(), None);
        assert_eq!(cq.skipped(), 1);
        assert_eq!(cq.doorbell_record(), 164);
    }

    /// `poll`'s inline receive path (a received SEND on the own RQ of the QP of the
    /// last responder CQE) gives what the decoder gives (`poll_one` never takes it):
    /// on two CQs fed the same CQEs, a random mix of received SENDs with and without
    /// immediate, a GRH type, random other bytes, requester completions, of two QPs
    /// alternating, over ring wraps; once the hot QP is destroyed its receive CQEs are
    /// skipped (counted) by both, and the other QP still completes.
    #[test]
    fn the_inline_receive_path_decodes_as_the_decoder() {
        use crate::verbs::RecvWr;
        use ferroverbs_hw::datapath::cqe::{Cqe64, MLX5_CQE_RESP_SEND, MLX5_CQE_RESP_SEND_IMM};
        let bus = Arc::new(MemBus::new(1 << 19));
        let cap = QpCap {
            max_recv_wr: 16,
            ..QpCap::default()
        };
        let (mut cqs, mut a, mut b) = two_qps_on_two_cqs(&bus, &cap, 7);
        // Each receive is retired by both CQs: off the software tail the second time.
        crate::verbs::qp::SKIP_RQ_TAIL_CHECK.with(|s| s.set(true));
        let sge = [Sge {
            addr: 0x1000,
            length: 8,
            lkey: 5,
        }];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        // One received SEND on `qp` (random bytes around the fields the decoder
        // reads), produced on both CQs.
        let recv = |cqs: &mut Cqs, qp: &mut DetachedQp<MemBus>, wr_id: u64, r: u64, imm: bool| {
            let idx = qp.next_recv_index();
            qp.post_recv(&[RecvWr::new(wr_id, &sge)]).unwrap();
            let mut raw = [0u8; 64];
            let mut y = r;
            for chunk in raw.chunks_mut(8) {
                y = y.wrapping_mul(0x5851_f42d_4c95_7f2d).wrapping_add(1);
                chunk.copy_from_slice(&y.to_ne_bytes());
            }
            let mut c: Cqe64 = zerocopy::transmute!(raw);
            c.set_sop_drop_qpn((r >> 56) as u8, qp.qp_num());
            c.wqe_counter.set(idx);
            let op = if imm {
                MLX5_CQE_RESP_SEND_IMM
            } else {
                MLX5_CQE_RESP_SEND
            };
            c.op_own = make_op_own(op, 0, r & 1 == 1, 0);
            for cq in cqs.iter_mut() {
                cq.produce(&c);
            }
            c
        };
        for round in 0..3_000u64 {
            let r = next();
            let on_b = r % 7 == 0;
            let qp = if on_b { &mut b } else { &mut a };
            if r % 11 == 0 {
                produce(&mut cqs, qp, round, MLX5_OPCODE_SEND);
                let wc = check(&mut cqs).expect("a requester completion");
                assert_eq!((wc.wr_id, wc.opcode), (round, WcOpcode::Send));
                continue;
            }
            let c = recv(&mut cqs, qp, round, next(), r % 5 == 0);
            let wc = check(&mut cqs).expect("a receive completion");
            assert_eq!(
                (wc.wr_id, wc.qp_num, wc.byte_len, wc.src_qp),
                (round, qp.qp_num(), c.byte_cnt(), c.src_qpn()),
                "{c:?}"
            );
        }
        // `a` is hot for receives in the second CQ, then destroyed.
        recv(&mut cqs, &mut a, 5, next(), false);
        assert_eq!(check(&mut cqs).unwrap().wr_id, 5);
        a.q.shared.kill();
        for round in 0..12u64 {
            recv(&mut cqs, &mut a, round, next(), false);
            assert_eq!(check(&mut cqs), None);
            assert_eq!(cqs[1].skipped(), round + 1);
            recv(&mut cqs, &mut b, round, next(), false);
            assert_eq!(check(&mut cqs).unwrap().qp_num, 0x20);
        }
        assert_eq!(check(&mut cqs), None);
    }
}

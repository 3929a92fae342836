//! Counters checked exactly against known workloads on two simulated NICs:
//! SENDs and WRITEs of known sizes (packets = segments of the path MTU, bytes =
//! headers + payload, DMA bytes = WQEs + payload + CQEs + doorbell records, doorbells,
//! WQE fetches, the SQ depth and its high-water mark), a lossy link (a sequence NAK and
//! its go-back-N), local ACK timeouts until retry exhaustion, an RNR NAK, a CQ overrun
//! with the `oi` bit off, the CQ backlog, and one garbage frame of every receive drop
//! reason. Everything is read through the driver's API (firmware commands:
//! QUERY_VPORT_COUNTER, QUERY_Q_COUNTER, QUERY_CQ).

mod verbs_support;
use verbs_support::*;

use std::time::Duration;

use ferroverbs::verbs::{
    AccessFlags as A, CompletionQueue, DeviceCounters, QpCap, QpInitAttr, RecvWr, SendWr, WcStatus,
    WorkCompletion,
};
use ferroverbs::Context;
use ferroverbs_sim::link::Impairments;
use ferroverbs_sim::wire::{self, Opcode, Psn};
use ferroverbs_sim::SimBus;

/// Ethernet (14) + IPv4 (20) + UDP (8) + BTH (12) + ICRC (4): every RoCEv2 frame.
const FRAME_OVERHEAD: u64 = 14 + 20 + 8 + 12 + 4;
/// An ACK: the overhead and the AETH.
const ACK_FRAME: u64 = FRAME_OVERHEAD + 4;
/// The RETH of a WRITE's first packet.
const RETH: u64 = 16;
/// One WQEBB / one CQE.
const WQEBB: u64 = 64;
const CQE: u64 = 64;

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

/// Polls `cq` until `n` completions arrived, running the fabric and, when nothing
/// moves, the next timers.
fn drain(net: &Net, cq: &mut CompletionQueue<'_, SimBus>, n: usize) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut wc = [WorkCompletion::default(); 64];
    for _ in 0..10_000 {
        if out.len() >= n {
            break;
        }
        net.fabric.run_until_idle();
        let k = cq.poll(&mut wc[..(n - out.len()).min(64)]);
        out.extend_from_slice(&wc[..k]);
        if k == 0 {
            net.fabric.run_timers(Duration::from_secs(10));
        }
    }
    assert_eq!(out.len(), n, "completions: {out:?}");
    out
}

/// What a QUERY_VPORT_COUNTER itself costs in DMA (its mailboxes, its command entry):
/// the difference of two queries with nothing in between.
fn query_overhead(ctx: &Context<SimBus>) -> (u64, u64) {
    let a = ctx.device_counters().unwrap();
    let b = ctx.device_counters().unwrap();
    let c = ctx.device_counters().unwrap();
    let d1 = (
        b.dma_read_bytes - a.dma_read_bytes,
        b.dma_write_bytes - a.dma_write_bytes,
    );
    let d2 = (
        c.dma_read_bytes - b.dma_read_bytes,
        c.dma_write_bytes - b.dma_write_bytes,
    );
    assert_eq!(d1, d2, "a query's own DMA is constant");
    d1
}

/// `after - before`, field by field, with a query's own DMA taken out.
fn delta(before: &DeviceCounters, after: &DeviceCounters, q: (u64, u64)) -> DeviceCounters {
    let mut d = *after;
    d.rx_packets -= before.rx_packets;
    d.rx_bytes -= before.rx_bytes;
    d.tx_packets -= before.tx_packets;
    d.tx_bytes -= before.tx_bytes;
    d.rx_errors -= before.rx_errors;
    d.rx_error_bytes -= before.rx_error_bytes;
    d.tx_errors -= before.tx_errors;
    d.doorbells -= before.doorbells;
    d.stray_doorbells -= before.stray_doorbells;
    d.wqes_fetched -= before.wqes_fetched;
    d.cqes_written -= before.cqes_written;
    d.dma_read_bytes -= before.dma_read_bytes + q.0;
    d.dma_write_bytes -= before.dma_write_bytes + q.1;
    d.drops.bad_icrc -= before.drops.bad_icrc;
    d.drops.malformed -= before.drops.malformed;
    d.drops.not_mine -= before.drops.not_mine;
    d.drops.unsupported -= before.drops.unsupported;
    d.drops.no_qp -= before.drops.no_qp;
    d.drops.bad_state -= before.drops.bad_state;
    d.drops.bad_addr -= before.drops.bad_addr;
    d.drops.bad_pkey -= before.drops.bad_pkey;
    d.drops.unexpected -= before.drops.unexpected;
    d.drops.stale -= before.drops.stale;
    d.drops.queue_full -= before.drops.queue_full;
    d.rx_duplicates -= before.rx_duplicates;
    d
}

/// A SEND of `len` bytes with path MTU `mtu`: its packets and their bytes on the wire.
fn send_wire(len: u64, mtu: u64) -> (u64, u64) {
    let segs = len.div_ceil(mtu).max(1);
    let pad = |n: u64| (4 - n % 4) % 4;
    let last = len - (segs - 1) * mtu;
    (
        segs,
        segs * FRAME_OVERHEAD + len + pad(last) + pad(mtu) * (segs - 1),
    )
}

#[test]
fn sends_and_writes_of_known_sizes() {
    const N: u64 = 10;
    const S: u64 = 3000;
    const M: u64 = 8;
    const W: u64 = 2048;
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut cqa = ca.create_cq(128).unwrap();
    let mut cqb = cb.create_cq(128).unwrap();
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    assert_ne!(qa.counter_set_id(), 0, "each QP has its own counter set");
    assert_ne!(qa.counter_set_id(), {
        let other = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
        other.counter_set_id()
    });
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    to_rts_reliable(&mut qa, &gb, nb, 0x200, 0x100, 14, 7, 7);
    to_rts_reliable(&mut qb, &ga, na, 0x100, 0x200, 14, 7, 7);
    let src = pa.alloc_mr(64 << 10, A::LOCAL_WRITE).unwrap();
    let dst = pb
        .alloc_mr(64 << 10, A::LOCAL_WRITE | A::REMOTE_WRITE | A::REMOTE_READ)
        .unwrap();
    src.write(0, &pattern(S as usize, 7));

    let (qa_o, qb_o) = (query_overhead(&ca), query_overhead(&cb));
    let (a0, b0) = (ca.device_counters().unwrap(), cb.device_counters().unwrap());

    // N SENDs of S bytes, one at a time, each received and polled on both sides.
    let rsg = [dst.sge(0, S as u32).unwrap()];
    let sg = [src.sge(0, S as u32).unwrap()];
    for k in 0..N {
        qb.post_recv(&[RecvWr::new(k, &rsg)]).unwrap();
        qa.post_send(&[SendWr::send(k, &sg).signaled()]).unwrap();
        let c = qa.counters();
        assert_eq!((c.posted, c.sq_depth, c.sq_depth_wqebbs), (k + 1, 1, 1));
        assert_eq!(drain(&net, &mut cqa, 1)[0].status, WcStatus::Success);
        assert_eq!(drain(&net, &mut cqb, 1)[0].byte_len, S as u32);
        let c = qa.counters();
        assert_eq!((c.completed, c.sq_depth, c.sq_depth_hwm), (k + 1, 0, 1));
    }
    let (a1, b1) = (ca.device_counters().unwrap(), cb.device_counters().unwrap());
    let (da, db) = (delta(&a0, &a1, qa_o), delta(&b0, &b1, qb_o));
    let (segs, bytes) = send_wire(S, 1024);
    assert_eq!((segs, bytes), (3, 3 * FRAME_OVERHEAD + S));
    // A sent N×3 packets and got one ACK per message (each message settled alone).
    assert_eq!((da.tx_packets, da.tx_bytes), (N * segs, N * bytes));
    assert_eq!((da.rx_packets, da.rx_bytes), (N, N * ACK_FRAME));
    assert_eq!((db.rx_packets, db.rx_bytes), (N * segs, N * bytes));
    assert_eq!((db.tx_packets, db.tx_bytes), (N, N * ACK_FRAME));
    assert_eq!((da.doorbells, da.wqes_fetched, da.cqes_written), (N, N, N));
    assert_eq!((db.doorbells, db.wqes_fetched, db.cqes_written), (0, 0, N));
    assert_eq!(
        (da.rx_errors, da.drops.total(), db.drops.total()),
        (0, 0, 0)
    );
    // DMA: A wrote its N CQEs; B wrote the payload and its N CQEs.
    assert_eq!(da.dma_write_bytes, N * CQE);
    assert_eq!(db.dma_write_bytes, N * (S + CQE));
    // A read N WQEs (one WQEBB each) and the payload; B read the N receive WQEs (one
    // 16-byte scatter entry). Besides, both read 4-byte doorbell records: A the SQ's
    // at the doorbell and the CQ's consumer index before writing a CQE, B the RQ's to
    // take a receive WQE and the CQ's before its CQE; how often the engine re-reads
    // them (e.g. for an ACK's credit count) is its business, so only the bounds and
    // the 4-byte granularity are checked here.
    let dbr_a = da.dma_read_bytes - N * (WQEBB + S);
    let dbr_b = db.dma_read_bytes - N * 16;
    assert_eq!((dbr_a % 4, dbr_b % 4), (0, 0), "{da:?} {db:?}");
    assert!((N * 2 * 4..=N * 4 * 4).contains(&dbr_a), "{da:?}");
    assert!((N * 2 * 4..=N * 4 * 4).contains(&dbr_b), "{db:?}");

    // M WRITEs of W bytes in one list: one doorbell, depth M, high-water mark M.
    let wsg = [src.sge(0, W as u32).unwrap()];
    let wrs: Vec<_> = (0..M)
        .map(|k| SendWr::rdma_write(100 + k, &wsg, dst.remote(0)).signaled())
        .collect();
    let (a1, b1) = (ca.device_counters().unwrap(), cb.device_counters().unwrap());
    qa.post_send(&wrs).unwrap();
    let c = qa.counters();
    assert_eq!(
        (c.posted, c.completed, c.sq_depth, c.sq_depth_wqebbs),
        (N + M, N, M as u32, M as u32)
    );
    assert_eq!(c.sq_depth_hwm, M as u32);
    drain(&net, &mut cqa, M as usize);
    let c = qa.counters();
    assert_eq!(
        (c.posted, c.completed, c.sq_depth, c.sq_depth_hwm),
        (N + M, N + M, 0, M as u32)
    );
    let (a2, b2) = (ca.device_counters().unwrap(), cb.device_counters().unwrap());
    let (da, db) = (delta(&a1, &a2, qa_o), delta(&b1, &b2, qb_o));
    let wsegs = W / 1024;
    let wbytes = wsegs * FRAME_OVERHEAD + RETH + W;
    assert_eq!((da.tx_packets, da.tx_bytes), (M * wsegs, M * wbytes));
    assert_eq!((db.rx_packets, db.rx_bytes), (M * wsegs, M * wbytes));
    assert_eq!((da.doorbells, da.wqes_fetched, da.cqes_written), (1, M, M));
    assert_eq!(
        db.dma_write_bytes,
        M * W,
        "a WRITE without immediate: no CQE"
    );
    assert_eq!(da.dma_write_bytes, M * CQE);
    // B acknowledged every WRITE in as many ACKs as its receive batches made.
    assert_eq!(db.tx_packets, da.rx_packets);
    assert_eq!(db.tx_bytes, db.tx_packets * ACK_FRAME);

    // The device side of the QPs' counters.
    let qa_dev = qa.device_counters().unwrap().expect("a counter set");
    let qb_dev = qb.device_counters().unwrap().expect("a counter set");
    assert_eq!(qb_dev.rx_write_requests, M as u32);
    assert_eq!(qa_dev.rx_write_requests, 0);
    assert_eq!(qa_dev.retransmissions, 0);
    assert_eq!(qb_dev.out_of_sequence + qb_dev.duplicate_requests, 0);
}

#[test]
fn a_lost_packet_a_sequence_nak_and_its_retransmission() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut cqa = ca.create_cq(128).unwrap();
    let mut cqb = cb.create_cq(128).unwrap();
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    to_rts_reliable(&mut qa, &gb, nb, 0x200, 0x100, 14, 7, 7);
    to_rts_reliable(&mut qb, &ga, na, 0x100, 0x200, 14, 7, 7);
    let src = pa.alloc_mr(8192, A::LOCAL_WRITE).unwrap();
    let dst = pb.alloc_mr(8192, A::LOCAL_WRITE).unwrap();
    src.write(0, &pattern(4096, 3));
    let (ma, mb) = (net.a.port_macs()[0], net.b.port_macs()[0]);
    // The second packet A sends to B is lost.
    net.fabric
        .impair(ma, mb, Impairments::new().drop_frames(1, 1).seeded(1));
    let (qa_o, qb_o) = (query_overhead(&ca), query_overhead(&cb));
    let (a0, b0) = (ca.device_counters().unwrap(), cb.device_counters().unwrap());
    qb.post_recv(&[RecvWr::new(1, &[dst.sge(0, 4096).unwrap()])])
        .unwrap();
    qa.post_send(&[SendWr::send(1, &[src.sge(0, 4096).unwrap()]).signaled()])
        .unwrap();
    assert_eq!(drain(&net, &mut cqa, 1)[0].status, WcStatus::Success);
    assert_eq!(drain(&net, &mut cqb, 1)[0].byte_len, 4096);
    let mut got = vec![0u8; 4096];
    dst.read(0, &mut got);
    assert_eq!(got, pattern(4096, 3));
    let (a1, b1) = (ca.device_counters().unwrap(), cb.device_counters().unwrap());
    let (da, db) = (delta(&a0, &a1, qa_o), delta(&b0, &b1, qb_o));
    // Four packets (PSN 0..3); PSN 1 lost; B gets 0, then 2 and 3 out of sequence
    // (one NAK for the gap), A goes back to PSN 1 and sends 1, 2, 3 again.
    let pkt = FRAME_OVERHEAD + 1024;
    assert_eq!((da.tx_packets, da.tx_bytes), (7, 7 * pkt));
    assert_eq!((db.rx_packets, db.rx_bytes), (6, 6 * pkt));
    let a = qa.device_counters().unwrap().unwrap();
    let b = qb.device_counters().unwrap().unwrap();
    assert_eq!(
        (
            a.seq_naks_received,
            a.retransmissions,
            a.retransmitted_packets
        ),
        (1, 1, 3)
    );
    assert_eq!(
        (a.ack_timeouts, a.implied_naks, a.rnr_naks_received),
        (0, 0, 0)
    );
    assert_eq!((b.out_of_sequence, b.duplicate_requests), (2, 0));
    // B's replies: the NAK (PSN 0 asked for no ACK) and the final ACK; both reached A.
    assert_eq!((db.tx_packets, da.rx_packets), (2, 2));
    assert_eq!(da.rx_bytes, 2 * ACK_FRAME);
    // The retransmission re-read the WQE: A fetched it once but read it twice.
    assert_eq!(da.wqes_fetched, 1);
    assert_eq!(da.dma_write_bytes, CQE);
    assert_eq!(db.dma_write_bytes, 4096 + CQE);
}

#[test]
fn local_ack_timeouts_until_the_retry_budget_is_spent() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut cqa = ca.create_cq(128).unwrap();
    let cqb = cb.create_cq(128).unwrap();
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    to_rts_reliable(&mut qa, &gb, nb, 0x200, 0x100, 12, 2, 7);
    to_rts_reliable(&mut qb, &ga, na, 0x100, 0x200, 12, 2, 7);
    let src = pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let (ma, mb) = (net.a.port_macs()[0], net.b.port_macs()[0]);
    net.fabric.partition_both(ma, mb, true);
    let (a0, qa_o) = (ca.device_counters().unwrap(), query_overhead(&ca));
    let a0 = {
        let _ = a0;
        ca.device_counters().unwrap()
    };
    qa.post_send(&[SendWr::send(1, &[src.sge(0, 100).unwrap()]).signaled()])
        .unwrap();
    let w = drain(&net, &mut cqa, 1);
    assert_eq!(w[0].status, WcStatus::RetryExcErr);
    let a = qa.device_counters().unwrap().unwrap();
    // The first try and two retries, each ended by the ACK timer; the third timeout
    // finds no retry left.
    assert_eq!(
        (a.ack_timeouts, a.retransmissions, a.retransmitted_packets),
        (3, 2, 2)
    );
    assert_eq!(a.retry_exceeded, 1);
    let da = delta(&a0, &ca.device_counters().unwrap(), qa_o);
    let (segs, bytes) = send_wire(100, 1024);
    // The partition drops the frames in the fabric: the device sent them all.
    assert_eq!((da.tx_packets, da.tx_bytes), (3 * segs, 3 * bytes));
    assert_eq!(da.rx_packets, 0);
}

#[test]
fn an_rnr_nak_then_the_retransmission_that_lands() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut cqa = ca.create_cq(128).unwrap();
    let mut cqb = cb.create_cq(128).unwrap();
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    to_rts_reliable(&mut qa, &gb, nb, 0x200, 0x100, 14, 7, 7);
    to_rts_reliable(&mut qb, &ga, na, 0x100, 0x200, 14, 7, 7);
    let src = pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let dst = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    // No receive posted: B answers with an RNR NAK.
    qa.post_send(&[SendWr::send(1, &[src.sge(0, 200).unwrap()]).signaled()])
        .unwrap();
    net.fabric.run_until_idle();
    let b = qb.device_counters().unwrap().unwrap();
    assert_eq!(b.rnr_naks_sent, 1);
    let a = qa.device_counters().unwrap().unwrap();
    assert_eq!((a.rnr_naks_received, a.retransmissions), (1, 1));
    assert_eq!(a.retransmitted_packets, 1);
    assert_eq!(qa.counters().sq_depth, 1);
    qb.post_recv(&[RecvWr::new(9, &[dst.sge(0, 200).unwrap()])])
        .unwrap();
    assert_eq!(drain(&net, &mut cqa, 1)[0].status, WcStatus::Success);
    assert_eq!(drain(&net, &mut cqb, 1)[0].wr_id, 9);
    let a = qa.device_counters().unwrap().unwrap();
    let b = qb.device_counters().unwrap().unwrap();
    assert_eq!(
        (a.rnr_naks_received, a.retransmissions, a.rnr_retry_exceeded),
        (1, 1, 0)
    );
    assert_eq!(b.rnr_naks_sent, 1);
    let c = qa.counters();
    assert_eq!(
        (c.posted, c.completed, c.sq_depth, c.sq_depth_hwm),
        (1, 1, 0, 1)
    );
}

#[test]
fn cq_backlog_and_an_overrun_with_oi_off() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    // Four entries, overrun not ignored.
    let mut small = ca.create_cq(3).unwrap();
    let cqb = cb.create_cq(64).unwrap();
    let mut qa = pa
        .create_qp(&QpInitAttr::new(&small, &small, cap()))
        .unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    to_rts_reliable(&mut qa, &gb, nb, 0x200, 0x100, 14, 7, 7);
    to_rts_reliable(&mut qb, &ga, na, 0x100, 0x200, 14, 7, 7);
    let src = pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let dst = pb.alloc_mr(4096, A::LOCAL_WRITE | A::REMOTE_WRITE).unwrap();
    let c = small.counters().unwrap();
    assert_eq!((c.size, c.produced, c.backlog, c.overruns), (4, 0, 0, 0));
    let sg = [src.sge(0, 8).unwrap()];
    let ra = dst.remote(0);
    for k in 0..3 {
        qa.post_send(&[SendWr::rdma_write(k, &sg, ra).signaled()])
            .unwrap();
    }
    net.fabric.run_until_idle();
    let c = small.counters().unwrap();
    assert_eq!(
        (c.produced, c.consumed, c.backlog, c.overruns),
        (3, 0, 3, 0)
    );
    let mut wc = [WorkCompletion::default(); 2];
    assert_eq!(small.poll(&mut wc), 2);
    let c = small.counters().unwrap();
    assert_eq!((c.produced, c.consumed, c.backlog), (3, 2, 1));
    // Four more without polling: the ring holds 4 - 1 = 3 more, the fourth overruns.
    for k in 3..7 {
        qa.post_send(&[SendWr::rdma_write(k, &sg, ra).signaled()])
            .unwrap();
    }
    net.fabric.run_until_idle();
    let c = small.counters().unwrap();
    assert_eq!(
        (c.produced, c.backlog, c.overruns, c.in_error),
        (6, 4, 1, true)
    );
    let d = ca.device_counters().unwrap();
    assert_eq!(d.cqes_written, 6);
    let _ = qa.counters();
}

/// A copy of `frame` (a SEND from A's QP to B's) with its headers changed by `f`, the
/// ICRC recomputed.
fn rewrite(frame: &[u8], f: impl FnOnce(&mut wire::FrameRepr)) -> Vec<u8> {
    let (mut repr, payload) = wire::frame::parse(frame).expect("a valid frame");
    f(&mut repr);
    let mut buf = vec![0u8; repr.buffer_len(payload.len())];
    let n = repr.emit(payload, &mut buf).expect("emit");
    buf.truncate(n);
    buf
}

#[test]
fn one_garbage_frame_of_every_drop_reason() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut cqa = ca.create_cq(64).unwrap();
    let mut cqb = cb.create_cq(64).unwrap();
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    // A QP of B that stays in INIT (no path yet).
    let mut idle = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    idle.to_init(1, A::empty()).unwrap();
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    to_rts_reliable(&mut qa, &gb, nb, 0x200, 0x100, 14, 7, 7);
    to_rts_reliable(&mut qb, &ga, na, 0x100, 0x200, 14, 7, 7);
    let src = pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let dst = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    // Capture one real SEND (and its ACK).
    net.fabric.capture(Some(16));
    qb.post_recv(&[RecvWr::new(1, &[dst.sge(0, 64).unwrap()])])
        .unwrap();
    qa.post_send(&[SendWr::send(1, &[src.sge(0, 64).unwrap()]).signaled()])
        .unwrap();
    drain(&net, &mut cqa, 1);
    drain(&net, &mut cqb, 1);
    let frames = net.fabric.take_captured();
    let send = frames
        .iter()
        .find(|f| wire::frame::parse(f).is_ok_and(|(r, _)| r.roce.bth.opcode == Opcode::RcSendOnly))
        .expect("the SEND")
        .clone();
    let ack = frames
        .iter()
        .find(|f| {
            wire::frame::parse(f).is_ok_and(|(r, _)| r.roce.bth.opcode == Opcode::RcAcknowledge)
        })
        .expect("the ACK")
        .clone();
    let before = cb.device_counters().unwrap();
    let a_before = ca.device_counters().unwrap();

    let mut bad_icrc = send.clone();
    let n = bad_icrc.len();
    bad_icrc[n - 10] ^= 0xff;
    let malformed = send[..30].to_vec();
    let not_mine = rewrite(&send, |r| r.ethernet.dst_addr.0 = [0x02, 9, 9, 9, 9, 9]);
    // A UD SEND to an RC QP: a transport the QP does not serve.
    let unsupported = rewrite(&send, |r| {
        r.roce.bth.opcode = Opcode::UdSendOnly;
        r.roce.deth = Some(wire::deth::Repr {
            qkey: 0x1111,
            src_qp: 0x42,
        });
    });
    let no_qp = rewrite(&send, |r| r.roce.bth.dest_qp = 0x00ab_cdef);
    let bad_state = rewrite(&send, |r| r.roce.bth.dest_qp = idle.qp_num());
    let bad_addr = rewrite(&send, |r| r.ipv4.src_addr = [10, 9, 9, 9].into());
    let bad_pkey = rewrite(&send, |r| r.roce.bth.pkey = 0x1234);
    // A READ response middle for A's QP, which has no READ outstanding, and an ACK of
    // a PSN A never sent: both stale.
    let stale_read = rewrite(&ack, |r| {
        r.roce.bth.opcode = Opcode::RcRdmaReadResponseMiddle;
        r.roce.aeth = None;
    });
    let stale = rewrite(&ack, |r| r.roce.bth.psn = Psn::new(0x7000));
    let to_b = [
        &bad_icrc,
        &malformed,
        &not_mine,
        &unsupported,
        &no_qp,
        &bad_state,
        &bad_addr,
        &bad_pkey,
    ];
    let rx = net.b.rx_queue();
    for f in to_b {
        rx.push(f.clone()).unwrap();
    }
    net.fabric.run_until_idle();
    let rx_a = net.a.rx_queue();
    rx_a.push(stale_read.clone()).unwrap();
    rx_a.push(stale.clone()).unwrap();
    net.fabric.run_until_idle();
    let qo = query_overhead(&cb);
    let after = cb.device_counters().unwrap();
    let d = delta(&before, &after, (0, 0));
    let _ = qo;
    let dr = d.drops;
    assert_eq!(
        (dr.bad_icrc, dr.malformed, dr.not_mine, dr.unsupported),
        (1, 1, 1, 1)
    );
    assert_eq!(
        (dr.no_qp, dr.bad_state, dr.bad_addr, dr.bad_pkey),
        (1, 1, 1, 1)
    );
    assert_eq!((dr.unexpected, dr.stale, dr.queue_full), (0, 0, 0));
    let all: u64 = to_b.iter().map(|f| f.len() as u64).sum();
    assert_eq!((d.rx_packets, d.rx_bytes), (8, all));
    assert_eq!(
        (d.rx_errors, d.rx_error_bytes),
        (2, (bad_icrc.len() + malformed.len()) as u64)
    );
    let da = delta(&a_before, &ca.device_counters().unwrap(), (0, 0));
    assert_eq!((da.drops.unexpected, da.drops.stale), (0, 2));
    assert_eq!(da.rx_packets, 2);
    assert_eq!(da.drops.total(), 2);

    // The receive queue full: what does not fit is dropped and counted.
    let limit = ferroverbs_sim::link::RX_QUEUE_LIMIT;
    for _ in 0..limit {
        rx.push(malformed.clone()).unwrap();
    }
    assert!(rx.push(malformed.clone()).is_err());
    net.fabric.run_until_idle();
    let d = delta(&after, &cb.device_counters().unwrap(), (0, 0));
    assert_eq!(d.drops.queue_full, 1);
    assert_eq!(d.drops.malformed, limit as u64);
    assert_eq!(d.rx_packets, limit as u64);

    // Clearing: the next read starts from zero.
    let _ = cb.take_device_counters().unwrap();
    let z = cb.device_counters().unwrap();
    assert_eq!((z.rx_packets, z.drops.total(), z.tx_packets), (0, 0, 0));
}

#[test]
fn counter_sets_are_freed_with_their_qps() {
    let sim = sim();
    let ctx = open(&sim, 1);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let before = sim.stats().objects.q_counters;
    {
        let qps: Vec<_> = (0..4)
            .map(|_| pd.create_qp(&QpInitAttr::new(&cq, &cq, cap())).unwrap())
            .collect();
        let mut ids: Vec<_> = qps.iter().map(|q| q.counter_set_id()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 4);
        assert!(!ids.contains(&0));
        assert_eq!(sim.stats().objects.q_counters, before + 4);
    }
    assert_eq!(sim.stats().objects.q_counters, before);
    drop(cq);
    drop(pd);
    drop(ctx);
    assert_nothing_left(&sim);
}

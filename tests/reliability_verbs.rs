//! RC reliability through the verbs API, on two simulated NICs whose fabric
//! link is impaired: the retry budget exhausted by a partition (RetryExcErr, the QP in
//! ERR as `query` reports, every outstanding WR flushed, counted exactly, then reset
//! and reconnected), RNR exhaustion (RnrRetryExcErr), and a seeded lossy workload of
//! SEND / WRITE / READ / fetch-and-add completing exactly once, in order, intact, in
//! deterministic and threaded mode.

mod verbs_support;
use verbs_support::*;

use std::time::{Duration, Instant};

use ferroverbs::verbs::{
    AccessFlags as A, CompletionQueue, QpCap, QpInitAttr, QpState, QueuePair, RecvWr, SendWr,
    WcOpcode, WcStatus, WorkCompletion,
};
use ferroverbs::GidEntry;
use ferroverbs_sim::link::Impairments;
use ferroverbs_sim::SimBus;

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    }
}

/// RESET → RTS towards `peer_qpn` with the given reliability attributes.
#[allow(clippy::too_many_arguments)]
fn bring_up(
    q: &mut QueuePair<'_, SimBus>,
    peer: &GidEntry,
    peer_qpn: u32,
    rq_psn: u32,
    sq_psn: u32,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
) {
    q.reset().expect("RESET");
    to_rts_reliable(
        q, peer, peer_qpn, rq_psn, sq_psn, timeout, retry_cnt, rnr_retry,
    );
}

/// Polls until `n` completions arrived, moving virtual time to the next timer when
/// nothing moves (deterministic) or waiting (threaded); panics after 20 s.
fn drain(net: &Net, cq: &mut CompletionQueue<'_, SimBus>, n: usize) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut wc = [WorkCompletion::default(); 64];
    let start = Instant::now();
    while out.len() < n {
        net.fabric.run_until_idle();
        let k = cq.poll(&mut wc[..(n - out.len()).min(64)]);
        out.extend_from_slice(&wc[..k]);
        if k == 0 {
            if !net.a.threaded() {
                net.fabric.run_timers(Duration::from_secs(10));
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "only {} of {n} completions: {out:?}",
                out.len()
            );
            std::thread::yield_now();
        }
    }
    out
}

#[test]
fn retry_exhaustion_flushes_everything_then_reset_and_reconnect() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut cqa = ca.create_cq(128).unwrap();
    let mut cqb = cb.create_cq(128).unwrap();
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    bring_up(&mut qa, &gb, nb, 0x200, 0x100, 12, 2, 7);
    bring_up(&mut qb, &ga, na, 0x100, 0x200, 12, 2, 7);
    let src = pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let dst = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let mine = pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let sg = [src.sge(0, 64).unwrap()];
    let rsg = [mine.sge(0, 64).unwrap()];
    for k in 0..3 {
        qa.post_recv(&[RecvWr::new(100 + k, &rsg)]).unwrap();
    }
    let (ma, mb) = (net.a.port_macs()[0], net.b.port_macs()[0]);
    net.fabric.partition_both(ma, mb, true);
    let t0 = net.a.clock().now();
    for k in 0..6 {
        qa.post_send(&[SendWr::send(k, &sg).signaled()]).unwrap();
    }
    // One try and two retries, each waiting out 4.096 µs × 2^12 = 16.8 ms.
    let w = drain(&net, &mut cqa, 9);
    assert_eq!(
        net.a.clock().now() - t0,
        Duration::from_nanos(3 * (4096 << 12))
    );
    assert_eq!((w[0].wr_id, w[0].status), (0, WcStatus::RetryExcErr));
    let sends: Vec<_> = w[1..6].iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        sends,
        (1..6)
            .map(|k| (k, WcStatus::WrFlushErr))
            .collect::<Vec<_>>()
    );
    let recvs: Vec<_> = w[6..].iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        recvs,
        (100..103)
            .map(|k| (k, WcStatus::WrFlushErr))
            .collect::<Vec<_>>()
    );
    assert_eq!(qa.query().unwrap().state, QpState::Err);
    let s = net.a.stats().data_path;
    assert_eq!((s.ack_timeouts, s.flushed, s.error_cqes), (3, 8, 9));
    assert_eq!(
        cqa.poll(&mut [WorkCompletion::default(); 4]),
        0,
        "exactly 9"
    );

    // Recovery: the link heals; both sides reset and reconnect with fresh PSNs.
    net.fabric.partition_both(ma, mb, false);
    bring_up(&mut qa, &gb, nb, 0x5000, 0x4000, 12, 2, 7);
    bring_up(&mut qb, &ga, na, 0x4000, 0x5000, 12, 2, 7);
    assert_eq!(qa.query().unwrap().state, QpState::Rts);
    let dsg = [dst.sge(0, 64).unwrap()];
    qb.post_recv(&[RecvWr::new(7, &dsg)]).unwrap();
    src.write(0, b"after the reconnect");
    qa.post_send(&[SendWr::send(50, &sg).signaled()]).unwrap();
    let w = drain(&net, &mut cqa, 1);
    assert_eq!((w[0].wr_id, w[0].status), (50, WcStatus::Success));
    let r = drain(&net, &mut cqb, 1);
    assert_eq!(
        (r[0].wr_id, r[0].opcode, r[0].byte_len),
        (7, WcOpcode::Recv, 64)
    );
    let mut got = [0u8; 19];
    dst.read(0, &mut got);
    assert_eq!(&got, b"after the reconnect");
}

#[test]
fn rnr_retry_exhaustion_and_infinite_rnr() {
    for rnr_retry in [1u8, 7] {
        let (net, (ca, ga), (cb, gb)) = two_nics(false);
        let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
        let mut cqa = ca.create_cq(64).unwrap();
        let mut cqb = cb.create_cq(64).unwrap();
        let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
        let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
        let (na, nb) = (qa.qp_num(), qb.qp_num());
        bring_up(&mut qa, &gb, nb, 0x200, 0x100, 12, 7, rnr_retry);
        bring_up(&mut qb, &ga, na, 0x100, 0x200, 12, 7, rnr_retry);
        let src = pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
        let dst = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
        let sg = [src.sge(0, 8).unwrap()];
        qa.post_send(&[SendWr::send(1, &sg).signaled()]).unwrap();
        if rnr_retry == 1 {
            let w = drain(&net, &mut cqa, 1);
            assert_eq!(w[0].status, WcStatus::RnrRetryExcErr);
            assert_eq!(net.b.stats().data_path.rnr_naks, 2);
            assert_eq!(qa.query().unwrap().state, QpState::Err);
        } else {
            // min_rnr_timer 1 = 10 µs: 10 ms of RNR NAKs, then a receive.
            net.fabric.run_timers(Duration::from_millis(10));
            assert!(net.b.stats().data_path.rnr_naks >= 1000);
            assert_eq!(cqa.poll(&mut [WorkCompletion::default(); 1]), 0);
            let dsg = [dst.sge(0, 8).unwrap()];
            qb.post_recv(&[RecvWr::new(2, &dsg)]).unwrap();
            let w = drain(&net, &mut cqa, 1);
            assert_eq!(w[0].status, WcStatus::Success);
            assert_eq!(drain(&net, &mut cqb, 1)[0].status, WcStatus::Success);
        }
    }
}

/// A seeded lossy workload through the verbs API.
fn lossy_workload(
    threaded: bool,
    seed: u64,
    n: u64,
    imp: Impairments,
) -> ferroverbs_sim::link::FaultStats {
    let (net, (ca, ga), (cb, gb)) = two_nics(threaded);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut cqa = ca.create_cq(128).unwrap();
    let mut cqb = cb.create_cq(128).unwrap();
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    // Timeout 8: 1 ms of virtual time. In threaded mode the timeout is wall-clock time
    // on device threads that a loaded 2-core machine may not schedule for 100 ms or
    // more, and a WR fails (RETRY_EXC_ERR) at the eighth timeout in a row without
    // progress (retry_cnt 7; any progress restores the budget). So there it is 16
    // (268 ms): running out takes 8 × 268 ms = 2.1 s in which the peer's device
    // thread or the fabric's wire thread never runs, where 12 (16.8 ms) took 134 ms.
    // The real losses the timer recovers cost 268 ms each, within `drain`'s 20 s.
    let timeout = if threaded { 16 } else { 8 };
    bring_up(&mut qa, &gb, nb, 0x200, 0xff_fff0, timeout, 7, 7);
    bring_up(&mut qb, &ga, na, 0xff_fff0, 0x200, timeout, 7, 7);
    let (ma, mb) = (net.a.port_macs()[0], net.b.port_macs()[0]);
    net.fabric.impair(ma, mb, imp.clone().seeded(seed));
    net.fabric.impair(mb, ma, imp.seeded(!seed));
    let all = A::LOCAL_WRITE | A::REMOTE_READ | A::REMOTE_WRITE | A::REMOTE_ATOMIC;
    let src = pa.alloc_mr(32 * 4096, all).unwrap();
    let dst = pb.alloc_mr(64 * 4096, all).unwrap();
    let remote = pb.alloc_mr(32 * 4096, all).unwrap();
    let ctr = pb.alloc_mr(8, all).unwrap();
    let stat: Vec<u8> = (0..32 * 4096).map(|i| (i * 7 + i / 253) as u8).collect();
    remote.write(0, &stat);
    let mut rslot = 0usize;
    let mut post_recv = |qb: &mut QueuePair<'_, SimBus>| {
        let k = rslot % 64;
        rslot += 1;
        let sg = [dst.sge(k * 4096, 4096).unwrap()];
        qb.post_recv(&[RecvWr::new(k as u64, &sg)]).unwrap();
    };
    for _ in 0..64 {
        post_recv(&mut qb);
    }
    let mut g = seed | 1;
    let mut rnd = |m: u64| {
        g ^= g << 13;
        g ^= g >> 7;
        g ^= g << 17;
        g % m
    };
    let mut fa = 0u64;
    let mut next_recv = 0u64;
    let mut k = 0u64;
    while k < n {
        let batch = (n - k).min(16) as usize;
        let mut kinds = Vec::new();
        for j in 0..batch {
            let m = k + j as u64;
            let len = 1 + rnd(3000) as usize;
            let off = j * 4096;
            let body: Vec<u8> = (0..len).map(|i| (i as u64 ^ m) as u8).collect();
            let kind = rnd(4);
            let sg = [src.sge(off, len as u32).unwrap()];
            match kind {
                0 => {
                    src.write(off, &body);
                    qa.post_send(&[SendWr::send(m, &sg).signaled()]).unwrap();
                }
                1 => {
                    src.write(off, &body);
                    let r = remote.remote(off);
                    qa.post_send(&[SendWr::rdma_write(m, &sg, r).signaled()])
                        .unwrap();
                }
                2 => {
                    src.write(off, &vec![0xee; len]);
                    let r = remote.remote(16 * 4096 + off);
                    qa.post_send(&[SendWr::rdma_read(m, &sg, r).signaled()])
                        .unwrap();
                }
                _ => {
                    let res = [src.sge(off, 8).unwrap()];
                    qa.post_send(&[SendWr::atomic_fetch_add(m, &res, ctr.remote(0), 1).signaled()])
                        .unwrap();
                    fa += 1;
                }
            }
            kinds.push((m, kind, len, body, fa));
        }
        let w = drain(&net, &mut cqa, batch);
        for (j, (c, (m, kind, len, body, fa))) in w.iter().zip(&kinds).enumerate() {
            assert_eq!(
                (c.wr_id, c.status),
                (*m, WcStatus::Success),
                "seed {seed:#x}"
            );
            let off = j * 4096;
            let mut got = vec![0u8; *len];
            match kind {
                0 => {
                    let r = drain(&net, &mut cqb, 1)[0];
                    assert_eq!((r.status, r.byte_len as usize), (WcStatus::Success, *len));
                    dst.read(r.wr_id as usize * 4096, &mut got);
                    assert_eq!(&got, body, "seed {seed:#x}: SEND {m} data");
                    next_recv += 1;
                    post_recv(&mut qb);
                }
                1 => {
                    remote.read(off, &mut got);
                    assert_eq!(&got, body, "seed {seed:#x}: WRITE {m} data");
                }
                2 => {
                    src.read(off, &mut got);
                    assert_eq!(
                        got,
                        stat[16 * 4096 + off..][..*len],
                        "seed {seed:#x}: READ {m}"
                    );
                }
                _ => {
                    let mut b = [0u8; 8];
                    src.read(off, &mut b);
                    assert_eq!(u64::from_ne_bytes(b), fa - 1, "seed {seed:#x}: atomic {m}");
                }
            }
        }
        k += batch as u64;
    }
    assert_eq!(
        cqb.poll(&mut [WorkCompletion::default(); 4]),
        0,
        "delivered twice"
    );
    let mut b = [0u8; 8];
    ctr.read(0, &mut b);
    assert_eq!(u64::from_ne_bytes(b), fa);
    let _ = next_recv;
    net.fabric.fault_stats()
}

#[test]
fn a_lossy_link_through_the_verbs_api_deterministic() {
    let s = lossy_workload(
        false,
        0x7e57,
        2_000,
        Impairments::new()
            .loss(0.05)
            .duplicate(0.02)
            .reorder(0.02)
            .corrupt(0.02),
    );
    assert!(s.lost > 0 && s.corrupted > 0 && s.duplicated > 0, "{s:?}");
}

#[test]
fn a_lossy_link_through_the_verbs_api_threaded() {
    // Real time: the ACK timeout is wall-clock time on the device threads, and
    // the fabric's wire thread releases delayed and reordered frames.
    let s = lossy_workload(
        true,
        0x7e58,
        300,
        Impairments::new()
            .loss(0.03)
            .duplicate(0.02)
            .reorder(0.02)
            .corrupt(0.02)
            .delay(Duration::from_micros(20), Duration::from_micros(50)),
    );
    assert!(s.delayed > 0 && s.lost > 0 && s.reordered > 0, "{s:?}");
}

/// A port whose physical link goes down sends and receives nothing, as a ConnectX
/// without a link: a SEND posted meanwhile is dropped at the port (counted as
/// `tx_no_link`), retransmitted at the ACK timeout once the link is back, and
/// completes once, intact; frames sent to the port while it is down are dropped
/// there (`rx_link_down`).
#[test]
fn a_send_across_a_link_down_is_retransmitted_when_the_link_returns() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut cqa = ca.create_cq(64).unwrap();
    let mut cqb = cb.create_cq(64).unwrap();
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    bring_up(&mut qa, &gb, nb, 0x200, 0x100, 12, 7, 7);
    bring_up(&mut qb, &ga, na, 0x100, 0x200, 12, 7, 7);
    let src = pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let dst = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let (sg, dsg) = ([src.sge(0, 64).unwrap()], [dst.sge(0, 64).unwrap()]);
    qb.post_recv(&[RecvWr::new(9, &dsg), RecvWr::new(10, &dsg)])
        .unwrap();
    src.write(0, b"sent while the link was down");
    assert!(net.a.set_link(1, false));
    qa.post_send(&[SendWr::send(1, &sg).signaled()]).unwrap();
    net.fabric.run_until_idle();
    let s = net.a.stats().data_path;
    assert_eq!((s.tx_no_link, s.rx_link_down), (1, 0));
    assert_eq!(net.b.stats().data_path.rx_frames, 0, "nothing left port A");
    // B's frames to A are dropped at A's port.
    qb.post_send(&[SendWr::send(2, &[dst.sge(64, 8).unwrap()]).signaled()])
        .unwrap();
    net.fabric.run_until_idle();
    assert_eq!(net.a.stats().data_path.rx_link_down, 1);
    assert_eq!(cqa.poll(&mut [WorkCompletion::default(); 2]), 0);
    assert!(net.a.set_link(1, true));
    qa.post_recv(&[RecvWr::new(20, &[src.sge(128, 64).unwrap()])])
        .unwrap();
    let w = drain(&net, &mut cqa, 2);
    let mut got: Vec<_> = w.iter().map(|c| (c.wr_id, c.status)).collect();
    got.sort_by_key(|g| g.0);
    assert_eq!(got, vec![(1, WcStatus::Success), (20, WcStatus::Success)]);
    let r = drain(&net, &mut cqb, 2);
    let mut got: Vec<_> = r.iter().map(|c| (c.wr_id, c.status)).collect();
    got.sort_by_key(|g| g.0);
    assert_eq!(got, vec![(2, WcStatus::Success), (9, WcStatus::Success)]);
    let mut bytes = [0u8; 28];
    dst.read(0, &mut bytes);
    assert_eq!(&bytes, b"sent while the link was down");
    assert!(net.a.stats().data_path.retransmits >= 1);
    assert_eq!(cqa.poll(&mut [WorkCompletion::default(); 2]), 0, "once");
}

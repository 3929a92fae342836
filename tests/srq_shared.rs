//! Shared receive queues through the verbs API on two simulated NICs: one
//! SRQ shared by 8 RC QPs under load (thousands of messages, each verified, receive
//! buffers reposted as they complete), the limit event raised through the async event
//! API once per arming and not again until re-armed, the SRQ full error, the CQE's
//! `wqe_counter` (the SRQ WQE index, following the free list), QPs of another
//! transport (UC) on the same SRQ, and the destroy order.

mod verbs_support;
use verbs_support::*;

use std::collections::HashMap;
use std::time::Duration;

use ferroverbs::verbs::{
    AccessFlags as A, AsyncEvent, Error, Mtu, PostError, QpCap, QpInitAttr, QpType, RecvWr, SendWr,
    SrqAttr, WcOpcode, WcStatus, WorkCompletion,
};
use ferroverbs_sim::SimBus;

const QPS: usize = 8;
const PER_ROUND: usize = 16;
const ROUNDS: usize = 30;
const SLOT: usize = 2048;
const SLOTS: usize = 512;
const FILL: usize = 150;
const LIMIT: u32 = 32;

fn events<B: ferroverbs_hw::Bus>(ctx: &ferroverbs::Context<B>) -> Vec<AsyncEvent> {
    let mut out = Vec::new();
    while let Some(e) = ctx.get_async_event() {
        out.push(e);
    }
    out
}

/// Message `seq` of QP `q`: its header (q, seq) then a pattern, 8..2000 bytes.
fn message(q: usize, seq: usize) -> Vec<u8> {
    let len = 8 + (q * 131 + seq * 977) % 1993;
    let mut v = pattern(len, (q * 7 + seq) as u8);
    v[..2].copy_from_slice(&(q as u16).to_le_bytes());
    v[2..6].copy_from_slice(&(seq as u32).to_le_bytes());
    v
}

#[test]
fn one_srq_shared_by_eight_qps_under_load() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut scq = ca.create_cq(1024).unwrap();
    let mut rcq = cb.create_cq(1024).unwrap();
    let bcq = cb.create_cq(64).unwrap();
    let mut srq = pb
        .create_srq(&SrqAttr {
            max_wr: 255,
            max_sge: 1,
            srq_limit: LIMIT,
        })
        .unwrap();
    assert_eq!(srq.max_wr(), 255);
    let info = srq.query().unwrap();
    assert_eq!((info.max_wr, info.max_sge, info.srq_limit), (255, 1, LIMIT));
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..QPS {
        senders.push(pa.create_qp(&QpInitAttr::new(&scq, &scq, cap)).unwrap());
        receivers.push(
            pb.create_qp(&QpInitAttr::new(&bcq, &rcq, cap).with_srq(&srq))
                .unwrap(),
        );
    }
    for (s, r) in senders.iter_mut().zip(receivers.iter_mut()) {
        connect(s, &ga, r, &gb, Mtu::Mtu1024);
    }
    // A QP on an SRQ takes no receive of its own.
    let rbuf = pb.alloc_mr(SLOTS * SLOT, A::LOCAL_WRITE).unwrap();
    assert_eq!(
        receivers[0]
            .post_recv(&[RecvWr::new(0, &[rbuf.sge(0, 64).unwrap()])])
            .unwrap_err()
            .error,
        PostError::SrqAttached
    );
    let src = pa.alloc_mr(QPS * PER_ROUND * SLOT, A::LOCAL_WRITE).unwrap();
    let qpn_index: HashMap<u32, usize> = receivers
        .iter()
        .enumerate()
        .map(|(i, q)| (q.qp_num(), i))
        .collect();

    let mut free: Vec<usize> = (0..SLOTS).rev().collect();
    let mut posted = 0usize;
    let mut next_seq = [0usize; QPS];
    let mut expect_seq = [0usize; QPS];
    let mut received = 0usize;
    let mut limit_events = 0usize;
    let mut armed = true;
    let mut expected_events = 0usize;
    let srqn = srq.srq_num();
    for round in 0..ROUNDS {
        // Top the SRQ up to FILL receives.
        while posted < FILL {
            let slot = free.pop().unwrap();
            let sge = [rbuf.sge(slot * SLOT, SLOT as u32).unwrap()];
            srq.post_recv(&[RecvWr::new(slot as u64, &sge)]).unwrap();
            posted += 1;
        }
        // Re-arm, except every fifth round (the event must then stay quiet).
        let arm = round % 5 != 2;
        if arm && !armed {
            srq.arm(LIMIT).unwrap();
            armed = true;
        }
        if armed {
            // FILL - PER_ROUND * QPS = 22 left at the end of the round: below 32.
            expected_events += 1;
        }
        for (q, s) in senders.iter_mut().enumerate() {
            let mut sges = Vec::new();
            for k in 0..PER_ROUND {
                let m = message(q, next_seq[q] + k);
                let off = (q * PER_ROUND + k) * SLOT;
                src.write(off, &m);
                sges.push([src.sge(off, m.len() as u32).unwrap()]);
            }
            let wrs: Vec<_> = sges
                .iter()
                .enumerate()
                .map(|(k, sg)| {
                    SendWr::send_with_imm(
                        (next_seq[q] + k) as u64,
                        sg,
                        ((q << 24) | (next_seq[q] + k)) as u32,
                    )
                    .signaled()
                })
                .collect();
            s.post_send(&wrs).unwrap();
            next_seq[q] += PER_ROUND;
        }
        net.settle();
        let mut wcs = Vec::new();
        while wcs.len() < QPS * PER_ROUND {
            net.settle();
            let before = wcs.len();
            poll_all(&mut rcq, &mut wcs);
            if wcs.len() == before {
                net.fabric.run_timers(Duration::from_secs(1));
            }
        }
        for wc in &wcs {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            assert_eq!(wc.opcode, WcOpcode::Recv);
            let q = qpn_index[&wc.qp_num];
            assert_eq!(wc.src_qp, senders[q].qp_num());
            let slot = wc.wr_id as usize;
            let mut got = vec![0u8; wc.byte_len as usize];
            rbuf.read(slot * SLOT, &mut got);
            let seq = u32::from_le_bytes(got[2..6].try_into().unwrap()) as usize;
            assert_eq!(u16::from_le_bytes([got[0], got[1]]) as usize, q);
            assert_eq!(seq, expect_seq[q], "QP {q}: in order");
            assert!(got == message(q, seq), "QP {q} message {seq} intact");
            assert_eq!(wc.imm_data, ((q << 24) | seq) as u32);
            expect_seq[q] += 1;
            free.push(slot);
            posted -= 1;
            received += 1;
        }
        let mut sent = Vec::new();
        poll_all(&mut scq, &mut sent);
        assert_eq!(sent.len(), QPS * PER_ROUND);
        assert!(sent.iter().all(|w| w.status == WcStatus::Success));
        // The limit fired once (if armed) and is disarmed now.
        let ev = events(&cb);
        for e in &ev {
            assert_eq!(*e, AsyncEvent::SrqLimitReached { srqn });
        }
        assert_eq!(ev.len(), usize::from(armed), "round {round}: {ev:?}");
        limit_events += ev.len();
        armed = false;
        assert_eq!(srq.query().unwrap().srq_limit, 0);
    }
    assert_eq!(received, ROUNDS * QPS * PER_ROUND);
    assert_eq!(limit_events, expected_events);
    assert!(limit_events >= 20);
    let dp = net.b.stats().data_path;
    assert_eq!(dp.srq_wqes as usize, received);
    assert_eq!(dp.srq_limit_events as usize, limit_events);
    assert_eq!(dp.rnr_naks, 0);
    // The device counted every WQE it took (16 bits).
    assert_eq!(srq.query().unwrap().wqe_cnt, received as u16);
    // The SRQ cannot go while QPs use it.
    drop(senders);
    assert!(matches!(
        srq.arm(1000),
        Err(Error::CapExceeded {
            what: "srq_limit",
            ..
        })
    ));
    drop(receivers);
    srq.destroy().unwrap();
}

#[test]
fn srq_wqe_counter_follows_the_free_list_and_full_is_an_error() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut scq = ca.create_cq(64).unwrap();
    let mut rcq = cb.create_cq(64).unwrap();
    let mut srq = pb
        .create_srq(&SrqAttr {
            max_wr: 7,
            max_sge: 2,
            srq_limit: 0,
        })
        .unwrap();
    // 16 + 2 * 16 bytes round up to a 64-byte stride: room for 3 entries.
    assert_eq!((srq.max_wr(), srq.max_sge()), (7, 3));
    let cap = QpCap::default();
    let mut qa = pa.create_qp(&QpInitAttr::new(&scq, &scq, cap)).unwrap();
    let mut qb = pb
        .create_qp(&QpInitAttr::new(&rcq, &rcq, cap).with_srq(&srq))
        .unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    let rbuf = pb.alloc_mr(8 * 256, A::LOCAL_WRITE).unwrap();
    let src = pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    src.write(0, &pattern(4096, 9));

    // 7 fit (one WQE always stays unposted); the 8th is refused, nothing written.
    let sges: Vec<_> = (0..8).map(|i| [rbuf.sge(i * 256, 256).unwrap()]).collect();
    let wrs: Vec<_> = (0..8)
        .map(|i| RecvWr::new(100 + i as u64, &sges[i]))
        .collect();
    let e = srq.post_recv(&wrs).unwrap_err();
    assert_eq!(e.index, 7);
    assert_eq!(e.error, PostError::QueueFull { needed: 1, free: 0 });
    assert_eq!(srq.outstanding(), 7);

    let send = |qa: &mut ferroverbs::verbs::QueuePair<'_, SimBus>, n: usize| {
        let sg = [src.sge(0, 64).unwrap()];
        let wrs: Vec<_> = (0..n)
            .map(|i| SendWr::send(i as u64, &sg).signaled())
            .collect();
        qa.post_send(&wrs).unwrap();
    };
    // Three messages take WQEs 0, 1, 2 (the list starts at 0 and runs i → i + 1).
    send(&mut qa, 3);
    let got = wait(&net, &mut rcq, 3);
    let ids: Vec<_> = got.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [100, 101, 102]);
    assert_eq!(wait(&net, &mut scq, 3).len(), 3);
    // The driver maps each CQE's wqe_counter (the SRQ WQE index) to the wr_id posted
    // at that index: wr_ids 100 + i sit at indexes i.
    assert_eq!(srq.query().unwrap().wqe_cnt, 3);
    // Completed WQEs 0, 1, 2 go back after the tail (7): the list now runs
    // 7 0 1 2, the last one the new tail, which stays unposted; so three posts fill
    // 7, 0, 1 and a fourth is refused. Seven messages then take 3 4 5 6 (wr_ids
    // 103..106) and 7 0 1 (200..202): the CQEs' wqe_counter followed the links.
    let wrs: Vec<_> = (0..4)
        .map(|i| RecvWr::new(200 + i as u64, &sges[i]))
        .collect();
    let e = srq.post_recv(&wrs).unwrap_err();
    assert_eq!(
        (e.index, e.error),
        (3, PostError::QueueFull { needed: 1, free: 0 })
    );
    assert_eq!(srq.outstanding(), 7);
    send(&mut qa, 7);
    let got = wait(&net, &mut rcq, 7);
    let ids: Vec<_> = got.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [103, 104, 105, 106, 200, 201, 202]);
    assert!(got
        .iter()
        .all(|w| w.status == WcStatus::Success && w.byte_len == 64));
    assert_eq!(srq.outstanding(), 0);
    assert_eq!(srq.query().unwrap().wqe_cnt, 10);
    assert_eq!(wait(&net, &mut scq, 7).len(), 7);
    // The QP's own RQ was never used: nothing left to flush on the SRQ's behalf.
    qb.to_error().unwrap();
    net.settle();
    let mut wc = [WorkCompletion::default(); 8];
    assert_eq!(
        rcq.poll(&mut wc),
        0,
        "SRQ WQEs belong to the SRQ, not the QP"
    );
    drop(qb);
    drop(qa);
    srq.destroy().unwrap();
}

#[test]
fn a_repeated_srq_completion_is_skipped_by_the_cq_and_counted() {
    // A faulty device writes the CQE of an SRQ receive twice (`Sim::repeat_cqe`):
    // the CQ skips the copy (the WQE was not posted again), counts it, and does not
    // hand the WQE back to the free list a second time, so the SRQ takes no more
    // receives than it has room for and every posted receive completes exactly once.
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut scq = ca.create_cq(64).unwrap();
    let mut rcq = cb.create_cq(64).unwrap();
    let mut srq = pb
        .create_srq(&SrqAttr {
            max_wr: 7,
            max_sge: 2,
            srq_limit: 0,
        })
        .unwrap();
    assert_eq!(srq.max_wr(), 7);
    let cap = QpCap::default();
    let mut qa = pa.create_qp(&QpInitAttr::new(&scq, &scq, cap)).unwrap();
    let mut qb = pb
        .create_qp(&QpInitAttr::new(&rcq, &rcq, cap).with_srq(&srq))
        .unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    let rbuf = pb.alloc_mr(16 * 256, A::LOCAL_WRITE).unwrap();
    let src = pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let sges: Vec<_> = (0..16).map(|i| [rbuf.sge(i * 256, 256).unwrap()]).collect();
    let send = |qa: &mut ferroverbs::verbs::QueuePair<'_, SimBus>, first: u64, n: u64| {
        for i in first..first + n {
            src.write(i as usize * 64, &[i as u8; 64]);
        }
        let sg: Vec<_> = (first..first + n)
            .map(|i| [src.sge(i as usize * 64, 64).unwrap()])
            .collect();
        let wrs: Vec<_> = (first..)
            .zip(&sg)
            .map(|(i, g)| SendWr::send(i, g).signaled())
            .collect();
        qa.post_send(&wrs).unwrap();
    };
    // WQEs 0, 1, 2 posted; one message takes WQE 0.
    let wrs: Vec<_> = (0..3)
        .map(|i| RecvWr::new(100 + i as u64, &sges[i]))
        .collect();
    srq.post_recv(&wrs).unwrap();
    send(&mut qa, 0, 1);
    let got = wait(&net, &mut rcq, 1);
    assert_eq!((got[0].wr_id, got[0].byte_len), (100, 64));
    assert_eq!(srq.outstanding(), 2);
    assert_eq!((rcq.skipped(), srq.duplicate_completions()), (0, 0));

    // The device repeats that CQE: nothing is reported, the copy is counted.
    assert!(net.b.repeat_cqe(rcq.cqn(), 1), "the CQE was written again");
    let mut wc = [WorkCompletion::default(); 4];
    assert_eq!(rcq.poll(&mut wc), 0, "{:?}", &wc[..1]);
    assert_eq!((rcq.skipped(), srq.duplicate_completions()), (1, 1));
    assert_eq!(srq.outstanding(), 2, "WQE 0 was handed back once");

    // WQE 0 went back once, after the tail (7): the unposted list runs 3 4 5 6 7 0,
    // the last the new tail, which stays unposted. Five receives fill 3..=7 and a
    // sixth is refused; had WQE 0 been handed back twice, it would have been taken.
    let wrs: Vec<_> = (0..6)
        .map(|i| RecvWr::new(200 + i as u64, &sges[3 + i]))
        .collect();
    let e = srq.post_recv(&wrs).unwrap_err();
    assert_eq!(
        (e.index, e.error),
        (5, PostError::QueueFull { needed: 1, free: 0 })
    );
    assert_eq!(srq.outstanding(), 7);
    // Seven messages complete each remaining receive exactly once, in list order,
    // each into its own buffer.
    send(&mut qa, 1, 7);
    let got = wait(&net, &mut rcq, 7);
    let ids: Vec<_> = got.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [101, 102, 200, 201, 202, 203, 204]);
    for (k, w) in got.iter().enumerate() {
        assert_eq!((w.status, w.byte_len), (WcStatus::Success, 64), "{w:?}");
        let slot = if w.wr_id < 200 {
            (w.wr_id - 100) as usize
        } else {
            3 + (w.wr_id - 200) as usize
        };
        let mut b = [0u8; 64];
        rbuf.read(slot * 256, &mut b);
        assert_eq!(b, [k as u8 + 1; 64], "message {} in slot {slot}", k + 1);
    }
    assert_eq!(wait(&net, &mut scq, 8).len(), 8);
    net.settle();
    assert_eq!(rcq.poll(&mut wc), 0);
    assert_eq!(srq.outstanding(), 0);
    assert_eq!((rcq.skipped(), srq.duplicate_completions()), (1, 1));
    // Nothing to repeat on a CQ with no CQE yet, or past what it wrote.
    let empty = cb.create_cq(8).unwrap();
    assert!(!net.b.repeat_cqe(empty.cqn(), 1));
    assert!(!net.b.repeat_cqe(rcq.cqn(), 0));
    drop(qb);
    drop(qa);
    srq.destroy().unwrap();
}

#[test]
fn uc_qps_on_an_srq() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut scq = ca.create_cq(64).unwrap();
    let mut rcq = cb.create_cq(64).unwrap();
    let mut srq = pb.create_srq(&SrqAttr::default()).unwrap();
    let cap = QpCap::default();
    let mut qa = pa
        .create_qp(&QpInitAttr::new(&scq, &scq, cap).with_type(QpType::Uc))
        .unwrap();
    let mut qb = pb
        .create_qp(
            &QpInitAttr::new(&rcq, &rcq, cap)
                .with_type(QpType::Uc)
                .with_srq(&srq),
        )
        .unwrap();
    connect_uc(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024, 1);
    let rbuf = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let sge = [rbuf.sge(0, 4096).unwrap()];
    srq.post_recv(&[RecvWr::new(9, &sge)]).unwrap();
    let src = pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let data = pattern(3000, 4);
    src.write(0, &data);
    qa.post_send(&[SendWr::send(1, &[src.sge(0, 3000).unwrap()]).signaled()])
        .unwrap();
    assert_eq!(wait(&net, &mut scq, 1)[0].status, WcStatus::Success);
    let got = wait(&net, &mut rcq, 1);
    assert_eq!((got[0].wr_id, got[0].byte_len), (9, 3000));
    let mut b = vec![0u8; 3000];
    rbuf.read(0, &mut b);
    assert!(b == data);
    drop((qa, qb));
}

//! Volume and sharing through the verbs API on two simulated NICs: SQ, RQ and CQ
//! wrap-around over 100,000 work requests with unsignaled batches, two QPs sharing one
//! CQ, and threaded mode, where an application that only polls sees its completions.

mod verbs_support;
use verbs_support::*;

use ferroverbs::verbs::{
    AccessFlags as A, Mtu, QpCap, QpInitAttr, RecvWr, SendWr, WcOpcode, WcStatus, WorkCompletion,
};

#[test]
fn rings_wrap_over_100k_requests_with_unsignaled_batches() {
    const TOTAL: u64 = 100_000;
    const BATCH: u64 = 16;
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let pa = ca.alloc_pd().unwrap();
    let pb = cb.alloc_pd().unwrap();
    // Small rings so that every one of them wraps many times.
    let mut cqa = ca.create_cq(31).unwrap();
    let mut cqb = cb.create_cq(63).unwrap();
    let cap = QpCap {
        max_send_wr: 32,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 32,
    };
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap)).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap)).unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    let src = pa.alloc_mr(BATCH as usize * 64, A::empty()).unwrap();
    let dst = pb.alloc_mr(64 * 64, A::LOCAL_WRITE).unwrap();
    let rsge: Vec<_> = (0..64).map(|i| dst.sge(i * 64, 64).unwrap()).collect();
    // Keep 48 receives posted.
    let mut posted_rx = 0u64;
    while posted_rx < 48 {
        let s = [rsge[(posted_rx % 64) as usize]];
        qb.post_recv(&[RecvWr::new(posted_rx, &s)]).unwrap();
        posted_rx += 1;
    }
    let mut wc = [WorkCompletion::default(); 64];
    let mut next_rx = 0u64;
    let mut sent = 0u64;
    let mut send_done = 0u64;
    let sges: Vec<_> = (0..BATCH as usize)
        .map(|i| [src.sge(i * 64, 64).unwrap()])
        .collect();
    while next_rx < TOTAL {
        // A batch of 16 SENDs, the last one signaled, in one post (one doorbell);
        // alternately as gather SENDs and as inline SENDs, so WQE sizes vary.
        if sent < TOTAL && sent - send_done < BATCH && posted_rx - next_rx >= BATCH {
            let mut payloads = [[0u8; 24]; BATCH as usize];
            for k in 0..BATCH {
                let seq = sent + k;
                src.write(k as usize * 64, &seq.to_le_bytes());
                payloads[k as usize][..8].copy_from_slice(&seq.to_le_bytes());
            }
            let parts: Vec<[&[u8]; 1]> = payloads.iter().map(|p| [&p[..]]).collect();
            let wrs: Vec<SendWr<'_>> = (0..BATCH as usize)
                .map(|k| {
                    let w = if (sent / BATCH).is_multiple_of(2) {
                        SendWr::send(sent + k as u64, &sges[k])
                    } else {
                        SendWr::send_inline(sent + k as u64, &parts[k])
                    };
                    if k as u64 == BATCH - 1 {
                        w.signaled()
                    } else {
                        w
                    }
                })
                .collect();
            qa.post_send(&wrs).unwrap();
            sent += BATCH;
        }
        net.settle();
        let n = cqa.poll(&mut wc);
        for c in &wc[..n] {
            assert_eq!((c.status, c.opcode), (WcStatus::Success, WcOpcode::Send));
            assert_eq!(c.wr_id % BATCH, BATCH - 1, "only the signaled one reports");
            assert_eq!(c.wr_id, send_done + BATCH - 1, "in order");
            send_done += BATCH;
        }
        let n = cqb.poll(&mut wc);
        for c in &wc[..n] {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            assert_eq!(c.wr_id, next_rx, "receives complete in order");
            let expect_len = if (next_rx / BATCH).is_multiple_of(2) {
                64
            } else {
                24
            };
            assert_eq!(c.byte_len, expect_len);
            let mut seq = [0u8; 8];
            dst.read(((next_rx % 64) * 64) as usize, &mut seq);
            assert_eq!(
                u64::from_le_bytes(seq),
                next_rx,
                "payload of message {next_rx}"
            );
            next_rx += 1;
            // Re-post the buffer (slot = wr_id % 64).
            let s = [rsge[(posted_rx % 64) as usize]];
            qb.post_recv(&[RecvWr::new(posted_rx, &s)]).unwrap();
            posted_rx += 1;
        }
    }
    assert_eq!(send_done, TOTAL);
    assert_eq!(cqa.skipped() + cqb.skipped(), 0);
}

#[test]
fn two_qps_share_one_cq() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let pa = ca.alloc_pd().unwrap();
    let pb = cb.alloc_pd().unwrap();
    let mut cqa = ca.create_cq(64).unwrap();
    let mut cqb = cb.create_cq(64).unwrap();
    let cap = QpCap::default();
    let mut a1 = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap)).unwrap();
    let mut a2 = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap)).unwrap();
    let mut b1 = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap)).unwrap();
    let mut b2 = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap)).unwrap();
    connect(&mut a1, &ga, &mut b1, &gb, Mtu::Mtu1024);
    connect(&mut a2, &ga, &mut b2, &gb, Mtu::Mtu1024);
    let dst = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let s1 = [dst.sge(0, 1024).unwrap()];
    let s2 = [dst.sge(2048, 1024).unwrap()];
    for i in 0..10u64 {
        b1.post_recv(&[RecvWr::new(100 + i, &s1)]).unwrap();
        b2.post_recv(&[RecvWr::new(200 + i, &s2)]).unwrap();
    }
    for i in 0..10u64 {
        let p1 = (1000 + i).to_le_bytes();
        let p2 = (2000 + i).to_le_bytes();
        let x: [&[u8]; 1] = [&p1];
        let y: [&[u8]; 1] = [&p2];
        a1.post_send(&[SendWr::send_inline(10 + i, &x).signaled()])
            .unwrap();
        a2.post_send(&[SendWr::send_inline(20 + i, &y).signaled()])
            .unwrap();
    }
    let sends = wait(&net, &mut cqa, 20);
    let recvs = wait(&net, &mut cqb, 20);
    let of = |w: &[WorkCompletion], qpn: u32| -> Vec<u64> {
        w.iter()
            .filter(|c| c.qp_num == qpn)
            .inspect(|c| assert!(c.is_ok(), "{c:?}"))
            .map(|c| c.wr_id)
            .collect()
    };
    assert_eq!(of(&sends, a1.qp_num()), (10..20).collect::<Vec<_>>());
    assert_eq!(of(&sends, a2.qp_num()), (20..30).collect::<Vec<_>>());
    assert_eq!(of(&recvs, b1.qp_num()), (100..110).collect::<Vec<_>>());
    assert_eq!(of(&recvs, b2.qp_num()), (200..210).collect::<Vec<_>>());
    for c in &recvs {
        let peer = if c.qp_num == b1.qp_num() {
            a1.qp_num()
        } else {
            a2.qp_num()
        };
        assert_eq!(c.src_qp, peer);
    }
    // Destroying one QP leaves the other working on the shared CQ.
    drop(a2);
    b1.post_recv(&[RecvWr::new(111, &s1)]).unwrap();
    let p = 7u64.to_le_bytes();
    let x: [&[u8]; 1] = [&p];
    a1.post_send(&[SendWr::send_inline(99, &x).signaled()])
        .unwrap();
    assert_eq!(wait(&net, &mut cqa, 1)[0].wr_id, 99);
    assert_eq!(wait(&net, &mut cqb, 1)[0].wr_id, 111);
}

#[test]
fn threaded_devices_progress_while_the_application_only_polls() {
    let (_net, (ca, ga), (cb, gb)) = two_nics(true);
    let pa = ca.alloc_pd().unwrap();
    let pb = cb.alloc_pd().unwrap();
    let mut cqa = ca.create_cq(64).unwrap();
    let mut cqb = cb.create_cq(64).unwrap();
    let mut qa = pa
        .create_qp(&QpInitAttr::new(&cqa, &cqa, QpCap::default()))
        .unwrap();
    let mut qb = pb
        .create_qp(&QpInitAttr::new(&cqb, &cqb, QpCap::default()))
        .unwrap();
    // Real time, loss-free: no timeout is needed, and none may fire spuriously or
    // run the retry budget out while a device thread waits for a CPU.
    connect_timeout(
        &mut qa,
        &ga,
        &mut qb,
        &gb,
        Mtu::Mtu1024,
        REAL_TIME_ACK_TIMEOUT,
    );
    let ra = pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let rb = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let sa = [ra.sge(0, 4096).unwrap()];
    let sb = [rb.sge(0, 4096).unwrap()];
    let mut wc = [WorkCompletion::default(); 8];
    // Ping-pong 2,000 times; the test never steps the fabric: only posts and polls.
    for i in 0..2000u64 {
        // A hang guard per round trip, not a speed limit: on a loaded 2-core machine
        // the whole run may take long, but one round trip never takes a minute.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        qb.post_recv(&[RecvWr::new(i, &sb)]).unwrap();
        qa.post_recv(&[RecvWr::new(i, &sa)]).unwrap();
        let ping = i.to_le_bytes();
        let x: [&[u8]; 1] = [&ping];
        qa.post_send(&[SendWr::send_inline(i, &x).signaled()])
            .unwrap();
        // B waits for the ping (skipping its own send completions) and answers.
        'ping: loop {
            let n = cqb.poll(&mut wc);
            for c in &wc[..n] {
                assert_eq!(c.status, WcStatus::Success, "{c:?}");
                if c.opcode == WcOpcode::Recv {
                    assert_eq!((c.wr_id, c.byte_len), (i, 8));
                    break 'ping;
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "ping {i} never arrived"
            );
            std::hint::spin_loop();
        }
        let mut got = [0u8; 8];
        rb.read(0, &mut got);
        assert_eq!(u64::from_le_bytes(got), i);
        qb.post_send(&[SendWr::send_inline(i, &x).signaled()])
            .unwrap();
        'pong: loop {
            let n = cqa.poll(&mut wc);
            for c in &wc[..n] {
                assert_eq!(c.status, WcStatus::Success, "pong {i}: {c:?}");
                if c.opcode == WcOpcode::Recv {
                    assert_eq!(c.wr_id, i);
                    break 'pong;
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "pong {i} never arrived"
            );
            std::hint::spin_loop();
        }
    }
}

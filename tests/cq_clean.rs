//! `CompletionQueue::discard_completions_of`: the completions of a QP moved to RESET
//! leave its CQ without being polled (libmlx5 `__mlx5_cq_clean`), those of other QPs
//! stay in their order, and the QP, connected again, completes only its new work
//! (the debug check of the RQ's software tail passes: no stale counter is met). A
//! receive completion of a QP with an SRQ that is discarded gives its WQE back to
//! the SRQ. The survivors keep their order and bytes across the ring's wrap, with
//! 64- and 128-byte CQEs (a message the device placed in a 128-byte CQE moves with
//! it). Two deterministic simulated NICs.

mod verbs_support;
use verbs_support::*;

use ferroverbs::verbs::{
    AccessFlags as A, CqOptions, CqeSize, Mtu, QpCap, QpInitAttr, RecvWr, SendWr, SrqAttr,
    WcOpcode, WcStatus,
};

#[test]
fn reset_drops_the_qps_completions_and_keeps_the_others() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut scq = ca.create_cq(64).unwrap();
    // B's QPs share one CQ: `qb`'s completions go, `qc`'s stay.
    let mut rcq = cb.create_cq(64).unwrap();
    let cap = QpCap::default();
    let mut qa = pa.create_qp(&QpInitAttr::new(&scq, &scq, cap)).unwrap();
    let mut qd = pa.create_qp(&QpInitAttr::new(&scq, &scq, cap)).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&rcq, &rcq, cap)).unwrap();
    let mut qc = pb.create_qp(&QpInitAttr::new(&rcq, &rcq, cap)).unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    connect(&mut qd, &ga, &mut qc, &gb, Mtu::Mtu1024);
    let rbuf = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let src = pa.alloc_mr(256, A::empty()).unwrap();
    src.write(0, &pattern(256, 7));
    for i in 0..4u64 {
        let sge = rbuf.sge(i as usize * 256, 256).unwrap();
        qb.post_recv(&[RecvWr::new(100 + i, &[sge])]).unwrap();
    }
    let sge = rbuf.sge(2048, 256).unwrap();
    qc.post_recv(&[RecvWr::new(500, &[sge])]).unwrap();
    // qb receives one message (WQE 0), qc one; nothing on B is polled.
    qa.post_send(&[SendWr::send(1, &[src.sge(0, 64).unwrap()]).signaled()])
        .unwrap();
    assert_eq!(wait(&net, &mut scq, 1)[0].wr_id, 1);
    qd.post_send(&[SendWr::send(2, &[src.sge(0, 32).unwrap()]).signaled()])
        .unwrap();
    assert_eq!(wait(&net, &mut scq, 1)[0].wr_id, 2);
    // qb to ERR: its three other receives are flushed into the CQ.
    qb.to_error().unwrap();
    net.settle();
    qb.reset().unwrap();
    assert_eq!(rcq.discard_completions_of(qb.qp_num()), 4);
    // A second clean finds nothing.
    assert_eq!(rcq.discard_completions_of(qb.qp_num()), 0);
    let mut left = Vec::new();
    poll_all(&mut rcq, &mut left);
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(
        (
            left[0].wr_id,
            left[0].qp_num,
            left[0].status,
            left[0].byte_len
        ),
        (500, qc.qp_num(), WcStatus::Success, 32)
    );
    assert_eq!(left[0].opcode, WcOpcode::Recv);

    // Both ends again from RESET: only the new work completes, from slot 0 on.
    qa.reset().unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    for i in 0..2u64 {
        let sge = rbuf.sge(1024 + i as usize * 256, 256).unwrap();
        qb.post_recv(&[RecvWr::new(200 + i, &[sge])]).unwrap();
    }
    for (i, len) in [(10u64, 48u32), (11, 80)] {
        qa.post_send(&[SendWr::send(i, &[src.sge(0, len).unwrap()]).signaled()])
            .unwrap();
    }
    let sent: Vec<_> = wait(&net, &mut scq, 2)
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect();
    assert_eq!(sent, [(10, WcStatus::Success), (11, WcStatus::Success)]);
    let got: Vec<_> = wait(&net, &mut rcq, 2)
        .iter()
        .map(|w| (w.wr_id, w.qp_num, w.status, w.byte_len))
        .collect();
    let b = qb.qp_num();
    assert_eq!(
        got,
        [
            (200, b, WcStatus::Success, 48),
            (201, b, WcStatus::Success, 80)
        ]
    );
    let mut more = Vec::new();
    net.settle();
    poll_all(&mut rcq, &mut more);
    assert!(more.is_empty(), "{more:?}");
    let mut bytes = vec![0u8; 80];
    rbuf.read(1280, &mut bytes);
    assert_eq!(bytes, pattern(256, 7)[..80]);
}

#[test]
fn a_discarded_srq_receive_gives_its_wqe_back() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut scq = ca.create_cq(64).unwrap();
    let mut rcq = cb.create_cq(64).unwrap();
    let mut srq = pb
        .create_srq(&SrqAttr {
            max_wr: 8,
            ..SrqAttr::default()
        })
        .unwrap();
    let cap = QpCap::default();
    let mut qa = pa.create_qp(&QpInitAttr::new(&scq, &scq, cap)).unwrap();
    let mut qb = pb
        .create_qp(&QpInitAttr::new(&rcq, &rcq, cap).with_srq(&srq))
        .unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    let rbuf = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let src = pa.alloc_mr(64, A::empty()).unwrap();
    for i in 0..3u64 {
        let sge = rbuf.sge(i as usize * 256, 256).unwrap();
        srq.post_recv(&[RecvWr::new(300 + i, &[sge])]).unwrap();
    }
    assert_eq!(srq.outstanding(), 3);
    qa.post_send(&[SendWr::send(1, &[src.sge(0, 64).unwrap()]).signaled()])
        .unwrap();
    assert_eq!(wait(&net, &mut scq, 1)[0].status, WcStatus::Success);
    // One SRQ WQE consumed, its completion not polled: discarded at RESET, the WQE
    // is the SRQ's again (the two others stay posted, an SRQ's WQEs are no QP's).
    qb.reset().unwrap();
    assert_eq!(rcq.discard_completions_of(qb.qp_num()), 1);
    assert_eq!(srq.outstanding(), 2);
    let mut left = Vec::new();
    poll_all(&mut rcq, &mut left);
    assert!(left.is_empty(), "{left:?}");
}

/// An 8-entry CQ on B for QPs `qb` and `qc`: six completions polled (so the next
/// ones cross the ring's end), then received messages alternately for `qb` and
/// `qc` (entries 6..=9); `qb` reset and its two discarded, `qc`'s two polled in
/// order with their bytes; then more for `qc`, polled as usual (the cursor and its
/// owner parity after the move are right).
fn survivors_across_the_wrap(size: CqeSize) {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut scq = ca.create_cq(64).unwrap();
    let opts = CqOptions {
        cqe_size: size,
        ..CqOptions::default()
    };
    let mut rcq = cb.create_cq_with(7, opts).unwrap();
    assert_eq!(rcq.capacity(), 7);
    let cap = QpCap::default();
    let mut qa = pa.create_qp(&QpInitAttr::new(&scq, &scq, cap)).unwrap();
    let mut qd = pa.create_qp(&QpInitAttr::new(&scq, &scq, cap)).unwrap();
    let init = |q| {
        let a = QpInitAttr::new(&rcq, &rcq, cap);
        if q && size == CqeSize::Bytes128 {
            a.with_scatter_to_cqe()
        } else {
            a
        }
    };
    let mut qb = pb.create_qp(&init(false)).unwrap();
    let mut qc = pb.create_qp(&init(true)).unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    connect(&mut qd, &ga, &mut qc, &gb, Mtu::Mtu1024);
    let rbuf = pb.alloc_mr(8192, A::LOCAL_WRITE).unwrap();
    let src = pa.alloc_mr(256, A::empty()).unwrap();
    src.write(0, &pattern(256, 5));
    let mut seq = 0u64;
    let mut to = |q: &mut ferroverbs::verbs::QueuePair<'_, _>,
                  from: &mut ferroverbs::verbs::QueuePair<'_, _>,
                  len: u32| {
        seq += 1;
        let slot = (seq % 32) as usize * 256;
        q.post_recv(&[RecvWr::new(1000 + seq, &[rbuf.sge(slot, 256).unwrap()])])
            .unwrap();
        from.post_send(&[SendWr::send(seq, &[src.sge(0, len).unwrap()]).signaled()])
            .unwrap();
        assert_eq!(wait(&net, &mut scq, 1)[0].status, WcStatus::Success);
        (1000 + seq, slot, len)
    };
    for _ in 0..6 {
        to(&mut qc, &mut qd, 8);
    }
    assert_eq!(wait(&net, &mut rcq, 6).len(), 6);
    let b1 = to(&mut qb, &mut qa, 40);
    let c1 = to(&mut qc, &mut qd, 56);
    let b2 = to(&mut qb, &mut qa, 40);
    let c2 = to(&mut qc, &mut qd, 24);
    let _ = (b1, b2);
    qb.reset().unwrap();
    assert_eq!(rcq.discard_completions_of(qb.qp_num()), 2);
    let got = wait(&net, &mut rcq, 2);
    let c = qc.qp_num();
    for (w, (id, slot, len)) in got.iter().zip([c1, c2]) {
        assert_eq!(
            (w.wr_id, w.qp_num, w.status, w.byte_len),
            (id, c, WcStatus::Success, len)
        );
        let mut bytes = vec![0u8; len as usize];
        rbuf.read(slot, &mut bytes);
        assert_eq!(bytes, pattern(256, 5)[..len as usize], "wr {id}");
    }
    let mut more = Vec::new();
    poll_all(&mut rcq, &mut more);
    assert!(more.is_empty(), "{more:?}");
    // On from the moved cursor: nine more (the ring wraps again).
    for _ in 0..9 {
        let (id, _, len) = to(&mut qc, &mut qd, 16);
        let w = wait(&net, &mut rcq, 1)[0];
        assert_eq!(
            (w.wr_id, w.status, w.byte_len),
            (id, WcStatus::Success, len)
        );
    }
}

#[test]
fn survivors_keep_their_order_across_the_wrap_with_64_byte_cqes() {
    survivors_across_the_wrap(CqeSize::Bytes64);
}

#[test]
fn survivors_keep_their_order_and_data_across_the_wrap_with_128_byte_cqes() {
    survivors_across_the_wrap(CqeSize::Bytes128);
}

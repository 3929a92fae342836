//! The receive completion index of a QP's own RQ: the driver takes the slot from the
//! CQE's `wqe_counter` and, in debug builds, checks it against the software tail
//! libmlx5 keeps (a plain RQ completes in order). A faulty device that writes a receive
//! CQE again (`Sim::repeat_cqe`, the counter of a WQE already completed) trips the
//! check, naming both values; in order, completions pass it.

mod verbs_support;
use verbs_support::*;

use ferroverbs::verbs::{AccessFlags as A, Mtu, QpCap, QpInitAttr, RecvWr, SendWr, WorkCompletion};

#[cfg(debug_assertions)]
#[test]
fn a_receive_cqe_off_the_software_tail_trips_the_debug_check() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut scq = ca.create_cq(16).unwrap();
    let mut rcq = cb.create_cq(16).unwrap();
    let cap = QpCap::default();
    let mut qa = pa.create_qp(&QpInitAttr::new(&scq, &scq, cap)).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&rcq, &rcq, cap)).unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    let rbuf = pb.alloc_mr(1024, A::LOCAL_WRITE).unwrap();
    let src = pa.alloc_mr(64, A::empty()).unwrap();
    for i in 0..3u64 {
        qb.post_recv(&[RecvWr::new(i, &[rbuf.sge(i as usize * 256, 256).unwrap()])])
            .unwrap();
    }
    let sg = [src.sge(0, 64).unwrap()];
    // Two messages in order: WQEs 0 and 1, each at the tail.
    for i in 0..2 {
        qa.post_send(&[SendWr::send(10 + i, &sg).signaled()])
            .unwrap();
        let r = wait(&net, &mut rcq, 1)[0];
        assert_eq!(r.wr_id, i);
        wait(&net, &mut scq, 1);
    }
    // The device writes WQE 1's CQE again: its counter is behind the tail (2).
    assert!(net.b.repeat_cqe(rcq.cqn(), 1));
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut wc = [WorkCompletion::default(); 4];
        rcq.poll(&mut wc)
    }));
    let msg = got.expect_err("the repeated CQE trips the check");
    let text = msg.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        text.contains("wqe_counter 0x1") && text.contains("software tail 0x2"),
        "{text}"
    );
}

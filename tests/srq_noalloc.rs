//! Posting to a shared receive queue and polling the completions that hand its WQEs
//! back allocate nothing: a counting global allocator (per thread, switched on only
//! around the measured calls) watches `SharedReceiveQueue::post_recv` (a fresh list,
//! and one that first links completed WQEs back) and `CompletionQueue::poll` of
//! receive completions taken from the SRQ, on two simulated NICs.

mod counting_alloc;
use counting_alloc::allocations;
mod verbs_support;
use verbs_support::*;

use ferroverbs::verbs::{
    AccessFlags as A, Mtu, QpCap, QpInitAttr, RecvWr, SendWr, SrqAttr, WcStatus, WorkCompletion,
};

#[global_allocator]
static ALLOC: counting_alloc::Counting = counting_alloc::Counting;

#[test]
fn srq_post_and_poll_allocate_nothing() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut scq = ca.create_cq(256).unwrap();
    let mut rcq = cb.create_cq(256).unwrap();
    let mut srq = pb
        .create_srq(&SrqAttr {
            max_wr: 63,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let mut qa = pa
        .create_qp(&QpInitAttr::new(&scq, &scq, QpCap::default()))
        .unwrap();
    let mut qb = pb
        .create_qp(&QpInitAttr::new(&rcq, &rcq, QpCap::default()).with_srq(&srq))
        .unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    let rbuf = pb.alloc_mr(64 * 64, A::LOCAL_WRITE).unwrap();
    let src = pa.alloc_mr(64, A::LOCAL_WRITE).unwrap();
    let sges: Vec<_> = (0..16).map(|i| [rbuf.sge(i * 64, 64).unwrap()]).collect();
    let wrs: Vec<_> = (0..16).map(|i| RecvWr::new(i as u64, &sges[i])).collect();
    let ssg = [src.sge(0, 32).unwrap()];
    let sends: Vec<_> = (0..16)
        .map(|i| SendWr::send(i as u64, &ssg).signaled())
        .collect();
    let mut wc = [WorkCompletion::default(); 32];
    for round in 0..8 {
        assert_eq!(
            allocations(|| srq.post_recv(&wrs).unwrap()),
            0,
            "post {round}"
        );
        qa.post_send(&sends).unwrap();
        net.settle();
        let mut n = 0;
        assert_eq!(allocations(|| n = rcq.poll(&mut wc)), 0, "poll {round}");
        assert_eq!(n, 16);
        assert!(wc[..16].iter().all(|w| w.status == WcStatus::Success));
        assert_eq!(wait(&net, &mut scq, 16).len(), 16);
    }
    drop((qa, qb));
}

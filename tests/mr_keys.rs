//! Deterministic wire bytes. Memory keys are a function of their device's own history: the software byte of a
//! key (`mkc.mkey_7_0`) is counted per device, as Linux's `mlx5_ib` counts it
//! (`mkey_var`), so that a seeded run hands out the same keys, and puts the same
//! packets on the wire, whatever else the process has registered; and zero-based
//! regions (`Pd::alloc_mr_zero_based`) keep host addresses out of work requests and
//! RETHs, so that the same run captures the same frames byte for byte.

mod verbs_support;
use verbs_support::*;

use ferroverbs::verbs::AccessFlags as A;

#[test]
fn keys_depend_on_their_device_only() {
    let keys = |extra_elsewhere: usize| {
        let (_net, (ca, _), (cb, _)) = two_nics(false);
        let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
        // Registrations on the other device do not move this one's keys.
        let others: Vec<_> = (0..extra_elsewhere)
            .map(|_| pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap())
            .collect();
        let mine: Vec<u32> = (0..3)
            .map(|_| pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap().lkey())
            .collect();
        drop(others);
        mine
    };
    let first = keys(0);
    assert_eq!(keys(5), first);
    assert_eq!(keys(300), first);
    // Distinct, and never the receive-list terminator 0x100's variant 0.
    assert!(first.iter().all(|k| k & 0xff != 0), "{first:x?}");
    assert_eq!(first[0] & 0xff, 1);
}

/// An RDMA WRITE and a SEND between zero-based regions, on a fresh pair of NICs (after
/// `noise` other registrations in the process); the frames on the fabric.
fn capture(noise: usize) -> Vec<Vec<u8>> {
    use ferroverbs::verbs::{Mtu, QpCap, QpInitAttr, RecvWr, SendWr};
    let _noise: Vec<_> = (0..noise).map(|_| vec![0u8; 4096 + noise]).collect();
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut other = Vec::new();
    for _ in 0..noise {
        other.push(pa.alloc_mr(8192, A::LOCAL_WRITE).unwrap());
    }
    drop(other);
    let mut cqa = ca.create_cq(16).unwrap();
    let mut cqb = cb.create_cq(16).unwrap();
    let cap = QpCap::default();
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap)).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap)).unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    let src = pa.alloc_mr_zero_based(4096, A::LOCAL_WRITE).unwrap();
    let dst = pb
        .alloc_mr_zero_based(4096, A::LOCAL_WRITE | A::REMOTE_WRITE)
        .unwrap();
    assert_eq!((src.addr(), dst.addr()), (0, 0));
    src.write(0, &pattern(3000, 9));
    net.fabric.capture(Some(1 << 20));
    let sg = [src.sge(0, 3000).unwrap()];
    qa.post_send(&[SendWr::rdma_write(1, &sg, dst.remote(100)).signaled()])
        .unwrap();
    wait(&net, &mut cqa, 1);
    let mut got = vec![0; 3000];
    dst.read(100, &mut got);
    assert_eq!(got, pattern(3000, 9));
    qb.post_recv(&[RecvWr::new(7, &[dst.sge(0, 4096).unwrap()])])
        .unwrap();
    qa.post_send(&[SendWr::send(2, &[src.sge(10, 64).unwrap()]).signaled()])
        .unwrap();
    assert_eq!(wait(&net, &mut cqb, 1)[0].wr_id, 7);
    wait(&net, &mut cqa, 1);
    net.fabric.take_captured()
}

#[test]
fn a_seeded_run_with_zero_based_regions_puts_the_same_bytes_on_the_wire() {
    let first = capture(0);
    assert!(first.len() >= 5, "{} frames", first.len());
    assert_eq!(capture(3), first);
    assert_eq!(capture(17), first);
}

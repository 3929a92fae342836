//! `MemoryRegion::rereg_pd_access`: a region's PD and rights changed in place by a
//! UMR on a `REG_UMR` QP (Linux `mlx5r_umr_rereg_pd_access`), its keys kept: a peer's
//! RDMA WRITE with the key it was given before is refused, then (remote write
//! granted) lands, then (taken back) is refused again; a region moved to another PD
//! fails a receive of a QP of its old PD with a local protection error; what a UMR
//! cannot change (remote atomic, a write right on a read-only region, a PD of
//! another device) is refused without touching the region. Two deterministic
//! simulated NICs.

mod verbs_support;
use verbs_support::*;

use ferroverbs::verbs::{
    AccessFlags as A, Error, Mtu, QpCap, QpInitAttr, RecvWr, SendWr, WcStatus,
};

#[test]
fn rights_and_pd_change_in_place_and_the_keys_stay() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let pb2 = cb.alloc_pd().unwrap();
    let mut scq = ca.create_cq(64).unwrap();
    let mut rcq = cb.create_cq(64).unwrap();
    let cap = QpCap::default();
    let src = pa.alloc_mr(256, A::empty()).unwrap();
    src.write(0, &pattern(256, 9));
    let sg = [src.sge(0, 128).unwrap()];
    let mut dst = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let key = dst.rkey();
    let remote = dst.remote(512);

    // A fresh connected pair for each step (an error completion leaves a QP in ERR).
    let mut step = || {
        let mut qa = pa.create_qp(&QpInitAttr::new(&scq, &scq, cap)).unwrap();
        let mut qb = pb.create_qp(&QpInitAttr::new(&rcq, &rcq, cap)).unwrap();
        connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
        qa.post_send(&[SendWr::rdma_write(1, &sg, remote).signaled()])
            .unwrap();
        let w = wait(&net, &mut scq, 1)[0];
        (w.wr_id, w.status)
    };
    // Local write only: the peer's WRITE is refused.
    assert_eq!(step(), (1, WcStatus::RemAccessErr));
    // Remote write granted in place: the same key now lets the WRITE land.
    assert!(dst.can_rereg_in_place(A::LOCAL_WRITE | A::REMOTE_WRITE));
    dst.rereg_pd_access(&pb, A::LOCAL_WRITE | A::REMOTE_WRITE)
        .unwrap();
    assert_eq!((dst.lkey(), dst.rkey()), (key, key));
    assert_eq!(dst.access(), A::LOCAL_WRITE | A::REMOTE_WRITE);
    assert_eq!(step(), (1, WcStatus::Success));
    let mut got = vec![0u8; 128];
    dst.read(512, &mut got);
    assert_eq!(got, pattern(256, 9)[..128]);
    // Taken back: refused again. The change leaves no object behind (its UMR QP and
    // CQ are destroyed).
    let objects = net.b.stats().objects.total();
    dst.rereg_pd_access(&pb, A::LOCAL_WRITE).unwrap();
    assert_eq!(net.b.stats().objects.total(), objects);
    assert_eq!(step(), (1, WcStatus::RemAccessErr));

    // What a UMR cannot change, refused with the region untouched.
    let atomic = A::LOCAL_WRITE | A::REMOTE_ATOMIC;
    assert!(!dst.can_rereg_in_place(atomic));
    assert!(matches!(
        dst.rereg_pd_access(&pb, atomic),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(dst.access(), A::LOCAL_WRITE);
    let mut ro = pb.alloc_mr(64, A::empty()).unwrap();
    assert!(!ro.can_rereg_in_place(A::LOCAL_WRITE));
    assert!(ro.can_rereg_in_place(A::REMOTE_READ));
    ro.rereg_pd_access(&pb, A::REMOTE_READ).unwrap();
    assert_eq!(ro.access(), A::REMOTE_READ);
    assert!(matches!(
        dst.rereg_pd_access(&pa, A::LOCAL_WRITE),
        Err(Error::ForeignObject { .. })
    ));
    assert_eq!(dst.pd().pdn(), pb.pdn());

    // Moved to another PD: a receive of a QP of the old PD into it fails.
    dst.rereg_pd_access(&pb2, A::LOCAL_WRITE).unwrap();
    assert_eq!(dst.pd().pdn(), pb2.pdn());
    assert_eq!(dst.lkey(), key);
    let mut qa = pa.create_qp(&QpInitAttr::new(&scq, &scq, cap)).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&rcq, &rcq, cap)).unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    qb.post_recv(&[RecvWr::new(7, &[dst.sge(0, 256).unwrap()])])
        .unwrap();
    qa.post_send(&[SendWr::send(2, &sg).signaled()]).unwrap();
    let r = wait(&net, &mut rcq, 1)[0];
    assert_eq!((r.wr_id, r.status), (7, WcStatus::LocProtErr));
    let s = wait(&net, &mut scq, 1)[0];
    assert_eq!((s.wr_id, s.status), (2, WcStatus::RemOpErr));

    // The UMR QPs and their CQs went with each change: nothing is left once the
    // objects and the devices are closed.
    drop((qa, qb, dst, ro, src, scq, rcq));
    drop((pb2, pb, pa));
    drop((ca, cb));
    assert_nothing_left(&net.a);
    assert_nothing_left(&net.b);
}

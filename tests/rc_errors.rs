//! The RC error cases through the verbs API on two simulated NICs: each case
//! with its expected work completion status (or post error), and the flush of what
//! was outstanding once a QP is in error.

mod verbs_support;
use verbs_support::*;

use ferroverbs::verbs::{
    AccessFlags as A, BadWr, CompletionQueue, Mtu, Pd, PostError, QpCap, QpInitAttr, QpState,
    QueuePair, RecvWr, RemoteAddr, SendWr, Sge, WcOpcode, WcStatus,
};
use ferroverbs::GidEntry;
use ferroverbs_sim::SimBus;

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    }
}

/// A fresh pair of connected QPs on the given PDs and CQs.
fn fresh<'a>(
    pa: &'a Pd<'a, SimBus>,
    pb: &'a Pd<'a, SimBus>,
    cqa: &CompletionQueue<'a, SimBus>,
    cqb: &CompletionQueue<'a, SimBus>,
    ga: &GidEntry,
    gb: &GidEntry,
) -> (QueuePair<'a, SimBus>, QueuePair<'a, SimBus>) {
    let mut qa = pa.create_qp(&QpInitAttr::new(cqa, cqa, cap())).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(cqb, cqb, cap())).unwrap();
    connect(&mut qa, ga, &mut qb, gb, Mtu::Mtu1024);
    (qa, qb)
}

#[test]
fn the_error_table() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let pa = ca.alloc_pd().unwrap();
    let pa2 = ca.alloc_pd().unwrap();
    let pb = cb.alloc_pd().unwrap();
    let mut cqa = ca.create_cq(64).unwrap();
    let mut cqb = cb.create_cq(64).unwrap();

    let src = pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let other_pd = pa2.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let rbuf = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let rbuf_ro = pb.alloc_mr(4096, A::empty()).unwrap();
    let all = A::LOCAL_WRITE | A::REMOTE_WRITE | A::REMOTE_READ | A::REMOTE_ATOMIC;
    let remote_all = pb.alloc_mr(4096, all).unwrap();
    let remote_none = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let s64 = [src.sge(0, 64).unwrap()];
    let res8 = [src.sge(1024, 8).unwrap()];

    // Requester-side (local) errors: the SEND fails before anything is sent.
    let bad_lkey = [Sge {
        lkey: src.lkey() ^ 0x0012_3400,
        ..s64[0]
    }];
    let foreign = [other_pd.sge(0, 64).unwrap()];
    for (name, sg) in [("bad lkey", &bad_lkey), ("lkey of another PD", &foreign)] {
        let (mut qa, mut qb) = fresh(&pa, &pb, &cqa, &cqb, &ga, &gb);
        qb.post_recv(&[RecvWr::new(1, &[rbuf.sge(0, 4096).unwrap()])])
            .unwrap();
        qa.post_send(&[SendWr::send(7, &sg[..]).signaled()])
            .unwrap();
        let w = wait(&net, &mut cqa, 1)[0];
        assert_eq!(
            (w.status, w.wr_id, w.opcode),
            (WcStatus::LocProtErr, 7, WcOpcode::Send),
            "{name}: {w:?}"
        );
        assert_ne!(w.vendor_err, 0, "{name}: the vendor syndrome is reported");
        drop((qa, qb));
        // Anything left for the destroyed QPs is skipped by the CQs.
        let _ = cqb.poll(&mut [Default::default(); 4]);
    }

    // Responder-side errors of a SEND: receive buffer without LOCAL_WRITE, and a
    // receive buffer too small.
    // The requester sees the responder's NAK: remote operational error for the
    // protection fault, invalid request for the length (IB spec 9.7.5.2.4, C9-150).
    for (name, rsg, want_rx, want_tx) in [
        (
            "receive buffer without LOCAL_WRITE",
            rbuf_ro.sge(0, 4096).unwrap(),
            WcStatus::LocProtErr,
            WcStatus::RemOpErr,
        ),
        (
            "receive buffer too small",
            rbuf.sge(0, 16).unwrap(),
            WcStatus::LocLenErr,
            WcStatus::RemInvReqErr,
        ),
    ] {
        let (mut qa, mut qb) = fresh(&pa, &pb, &cqa, &cqb, &ga, &gb);
        qb.post_recv(&[RecvWr::new(2, &[rsg])]).unwrap();
        qa.post_send(&[SendWr::send(8, &s64).signaled()]).unwrap();
        let r = wait(&net, &mut cqb, 1)[0];
        assert_eq!((r.status, r.wr_id), (want_rx, 2), "{name}: {r:?}");
        let s = wait(&net, &mut cqa, 1)[0];
        assert_eq!(s.wr_id, 8, "{name}");
        assert_eq!(
            s.status, want_tx,
            "{name}: the requester sees the NAK: {s:?}"
        );
        drop((qa, qb));
    }

    // SEND with Invalidate naming the key of a memory region: `ibv_reg_mr` regions
    // are not created with remote invalidation enabled (Linux mlx5_ib sets
    // `mkc.en_rinval` for type-2 memory windows only), so the responder refuses to
    // invalidate it: the receive completes in error and the requester is NAKed
    // (invalid request); the region stays usable.
    {
        let (mut qa, mut qb) = fresh(&pa, &pb, &cqa, &cqb, &ga, &gb);
        qb.post_recv(&[RecvWr::new(3, &[rbuf.sge(0, 4096).unwrap()])])
            .unwrap();
        qa.post_send(&[SendWr::send_with_inv(9, &s64, remote_all.rkey()).signaled()])
            .unwrap();
        let r = wait(&net, &mut cqb, 1)[0];
        assert_eq!((r.status, r.wr_id), (WcStatus::RemInvReqErr, 3), "{r:?}");
        let s = wait(&net, &mut cqa, 1)[0];
        assert_eq!((s.status, s.wr_id), (WcStatus::RemInvReqErr, 9), "{s:?}");
        drop((qa, qb));
        let (mut qa, _qb) = fresh(&pa, &pb, &cqa, &cqb, &ga, &gb);
        qa.post_send(&[SendWr::rdma_write(10, &s64, remote_all.remote(0)).signaled()])
            .unwrap();
        let w = wait(&net, &mut cqa, 1)[0];
        assert_eq!((w.status, w.wr_id), (WcStatus::Success, 10), "{w:?}");
    }

    // Remote access errors: bad rkey, out of bounds, missing remote rights.
    let bad_rkey = RemoteAddr {
        rkey: remote_all.rkey() ^ 0x0045_6700,
        ..remote_all.remote(0)
    };
    let oob = remote_all.remote(4096 - 32);
    let no_rights = remote_none.remote(0);
    let cases: Vec<(&str, SendWr<'_>)> = vec![
        ("WRITE, invalid rkey", SendWr::rdma_write(1, &s64, bad_rkey)),
        ("WRITE out of bounds", SendWr::rdma_write(2, &s64, oob)),
        ("READ out of bounds", SendWr::rdma_read(3, &s64, oob)),
        (
            "WRITE without REMOTE_WRITE",
            SendWr::rdma_write(4, &s64, no_rights),
        ),
        (
            "READ without REMOTE_READ",
            SendWr::rdma_read(5, &s64, no_rights),
        ),
        (
            "atomic without REMOTE_ATOMIC",
            SendWr::atomic_fetch_add(6, &res8, no_rights, 1),
        ),
        (
            "atomic, invalid rkey",
            SendWr::atomic_cmp_swp(7, &res8, bad_rkey, 0, 1),
        ),
    ];
    for (name, wr) in cases {
        let (mut qa, qb) = fresh(&pa, &pb, &cqa, &cqb, &ga, &gb);
        qa.post_send(&[wr.signaled()]).unwrap();
        let w = wait(&net, &mut cqa, 1)[0];
        assert_eq!(
            (w.status, w.wr_id),
            (WcStatus::RemAccessErr, wr.wr_id),
            "{name}: {w:?}"
        );
        drop((qa, qb));
    }

    // A misaligned atomic: the responder refuses it as an invalid request.
    {
        let (mut qa, qb) = fresh(&pa, &pb, &cqa, &cqb, &ga, &gb);
        qa.post_send(&[SendWr::atomic_fetch_add(9, &res8, remote_all.remote(4), 1).signaled()])
            .unwrap();
        let w = wait(&net, &mut cqa, 1)[0];
        assert_eq!(
            (w.status, w.wr_id),
            (WcStatus::RemInvReqErr, 9),
            "misaligned atomic: {w:?}"
        );
        drop((qa, qb));
    }

    // Errors the API catches before the device sees anything.
    {
        let mut q = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
        let invalid = |state| BadWr {
            index: 0,
            error: PostError::InvalidState { state },
        };
        assert_eq!(
            q.post_send(&[SendWr::send(1, &s64)]),
            Err(invalid(QpState::Reset)),
            "posting in RESET"
        );
        q.to_init(1, A::empty()).unwrap();
        assert_eq!(
            q.post_send(&[SendWr::send(1, &s64)]),
            Err(invalid(QpState::Init)),
            "posting in INIT"
        );
        let (mut qa, qb) = fresh(&pa, &pb, &cqa, &cqb, &ga, &gb);
        let max = qa.cap().max_send_sge as usize;
        let many = vec![s64[0]; max + 1];
        assert_eq!(
            qa.post_send(&[SendWr::send(2, &many)]),
            Err(BadWr {
                index: 0,
                error: PostError::TooManySge {
                    count: max + 1,
                    max: max as u32
                }
            }),
            "too many SGEs"
        );
        let big = vec![0u8; qa.cap().max_inline_data as usize + 1];
        let parts: [&[u8]; 1] = [&big];
        assert_eq!(
            qa.post_send(&[SendWr::send_inline(3, &parts)]),
            Err(BadWr {
                index: 0,
                error: PostError::InlineTooLarge {
                    len: big.len(),
                    max: qa.cap().max_inline_data
                }
            }),
            "inline too large"
        );
        drop((qa, qb, q));
    }
}

#[test]
fn a_qp_in_error_flushes_every_outstanding_request() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let pa = ca.alloc_pd().unwrap();
    let pb = cb.alloc_pd().unwrap();
    let mut cqa = ca.create_cq(64).unwrap();
    let cqb = cb.create_cq(64).unwrap();
    let buf = pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let (mut qa, _qb) = fresh(&pa, &pb, &cqa, &cqb, &ga, &gb);
    // Receives outstanding on A, then A moves to ERR: each is flushed.
    let sg = [buf.sge(0, 64).unwrap()];
    let recvs: Vec<RecvWr<'_>> = (10..14).map(|i| RecvWr::new(i, &sg)).collect();
    qa.post_recv(&recvs).unwrap();
    qa.to_error().unwrap();
    let w = wait(&net, &mut cqa, 4);
    for (i, c) in w.iter().enumerate() {
        assert_eq!(
            (c.status, c.wr_id, c.opcode),
            (WcStatus::WrFlushErr, 10 + i as u64, WcOpcode::Recv),
            "{c:?}"
        );
    }
    // Sends posted in ERR are flushed too, signaled or not.
    qa.post_send(&[SendWr::send(20, &sg), SendWr::send(21, &sg).signaled()])
        .unwrap();
    let w = wait(&net, &mut cqa, 2);
    assert_eq!(
        w.iter().map(|c| (c.status, c.wr_id)).collect::<Vec<_>>(),
        vec![(WcStatus::WrFlushErr, 20), (WcStatus::WrFlushErr, 21)]
    );
}

//! UC queue pairs through the verbs API: the attribute checks of each transition
//! (UC has no RNR, retry, timeout or READ/atomic depth attributes and no remote READ
//! or atomic access), READ and atomics refused at post time with a typed error, a
//! SEND that finds no receive WQE dropped (no RNR NAK, the next one delivered), and
//! the wire opcodes (UC family, no AckReq, no acknowledgement).

mod verbs_support;
use verbs_support::*;

use ferroverbs::verbs::{
    AccessFlags as A, AddressVector, Attribute, Error, Mtu, PostError, QpAttr, QpCap, QpInitAttr,
    QpState, QpType, RecvWr, RtrAttr, SendWr, WcOpcode, WcStatus,
};
use ferroverbs_sim::wire::Opcode;

#[test]
fn uc_attributes_and_unsupported_operations() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (mut cqa, mut cqb) = (ca.create_cq(64).unwrap(), cb.create_cq(64).unwrap());
    let cap = QpCap::default();
    let mut qa = pa
        .create_qp(&QpInitAttr::new(&cqa, &cqa, cap).with_type(QpType::Uc))
        .unwrap();
    let mut qb = pb
        .create_qp(&QpInitAttr::new(&cqb, &cqb, cap).with_type(QpType::Uc))
        .unwrap();

    // Remote READ / atomic rights do not exist on UC.
    match qa.to_init(1, A::REMOTE_WRITE | A::REMOTE_READ) {
        Err(Error::AccessNotSupported { qp_type, access }) => {
            assert_eq!(qp_type, QpType::Uc);
            assert_eq!(access, A::REMOTE_READ);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(qa.state(), QpState::Reset);
    qa.to_init(1, A::REMOTE_WRITE).unwrap();

    // INIT→RTR: the RC-only attributes are refused, the UC ones required.
    let rtr = RtrAttr {
        av: AddressVector::new(gb.gid, gb.mac, 0),
        path_mtu: Mtu::Mtu1024,
        dest_qpn: qb.qp_num(),
        rq_psn: 7,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 1,
    };
    assert!(matches!(
        qa.to_rtr(&rtr),
        Err(Error::UnexpectedAttribute {
            attribute: Attribute::MaxDestRdAtomic | Attribute::MinRnrTimer,
            ..
        })
    ));
    let base = QpAttr::new()
        .av(rtr.av)
        .path_mtu(Mtu::Mtu1024)
        .dest_qpn(qb.qp_num());
    assert!(matches!(
        qa.modify(QpState::Rtr, &base),
        Err(Error::MissingAttribute {
            attribute: Attribute::RqPsn,
            ..
        })
    ));
    qa.modify(QpState::Rtr, &base.rq_psn(7)).unwrap();
    // RTR→RTS: sq_psn only.
    assert!(matches!(
        qa.modify(QpState::Rts, &QpAttr::new().sq_psn(9).timeout(14)),
        Err(Error::UnexpectedAttribute {
            attribute: Attribute::Timeout,
            ..
        })
    ));
    assert!(matches!(
        qa.modify(QpState::Rts, &QpAttr::new().sq_psn(9).retry_cnt(7)),
        Err(Error::UnexpectedAttribute {
            attribute: Attribute::RetryCnt,
            ..
        })
    ));
    qa.modify(QpState::Rts, &QpAttr::new().sq_psn(9)).unwrap();
    let info = qa.query().unwrap();
    assert_eq!(info.state, QpState::Rts);
    assert_eq!(info.sq_psn, 9);
    assert_eq!(info.rq_psn, 7);
    assert_eq!(info.access, A::REMOTE_WRITE);

    uc_to_rts(&mut qb, &ga, qa.qp_num(), 9, 7, Mtu::Mtu1024);

    // READ and atomics: typed errors, nothing posted.
    let mr = pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let rmr = pb.alloc_mr(4096, A::LOCAL_WRITE | A::REMOTE_WRITE).unwrap();
    let sg = [mr.sge(0, 8).unwrap()];
    for (wr, opcode) in [
        (SendWr::rdma_read(1, &sg, rmr.remote(0)), 0x10),
        (SendWr::atomic_fetch_add(2, &sg, rmr.remote(0), 1), 0x12),
        (SendWr::atomic_cmp_swp(3, &sg, rmr.remote(0), 0, 1), 0x11),
    ] {
        let e = qa.post_send(&[wr.signaled()]).unwrap_err();
        assert_eq!(e.index, 0);
        assert_eq!(e.error, PostError::UnsupportedOp { opcode });
    }
    net.settle();
    assert_eq!(cqa.poll(&mut [Default::default(); 4]), 0);

    // A SEND with no receive WQE posted is dropped; the next one arrives.
    net.fabric.capture(Some(64));
    mr.write(0, b"first!!!second!!");
    qa.post_send(&[SendWr::send(10, &[mr.sge(0, 8).unwrap()]).signaled()])
        .unwrap();
    net.settle();
    let rbuf = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    qb.post_recv(&[RecvWr::new(77, &[rbuf.sge(0, 64).unwrap()])])
        .unwrap();
    qa.post_send(&[SendWr::send_with_imm(11, &[mr.sge(8, 8).unwrap()], 0xabcd).signaled()])
        .unwrap();
    let sent = wait(&net, &mut cqa, 2);
    assert!(sent
        .iter()
        .all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::Send));
    assert_eq!([sent[0].wr_id, sent[1].wr_id], [10, 11]);
    let got = wait(&net, &mut cqb, 1);
    assert_eq!(got[0].wr_id, 77);
    assert_eq!(got[0].byte_len, 8);
    assert_eq!(got[0].imm_data, 0xabcd);
    let mut b = [0u8; 8];
    rbuf.read(0, &mut b);
    assert_eq!(&b, b"second!!");
    let dp = net.b.stats().data_path;
    assert_eq!(dp.uc_msgs_dropped, 1);
    assert_eq!(dp.rnr_naks + dp.acks + dp.naks, 0);
    let frames = net.fabric.take_captured();
    assert_eq!(frames.len(), 2, "two requests, no acknowledgement");
    let ops: Vec<_> = frames
        .iter()
        .map(|f| {
            let (r, _) = ferroverbs_sim::wire::frame::parse(f).unwrap();
            assert!(!r.roce.bth.ack_req);
            assert_eq!(r.roce.bth.dest_qp, qb.qp_num());
            r.roce.opcode()
        })
        .collect();
    assert_eq!(ops, [Opcode::UcSendOnly, Opcode::UcSendOnlyWithImmediate]);
    assert_eq!(cqb.poll(&mut [Default::default(); 4]), 0);
}

#[test]
fn uc_write_segmented_by_mtu() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (mut cqa, mut cqb) = (ca.create_cq(64).unwrap(), cb.create_cq(64).unwrap());
    let cap = QpCap::default();
    let mut qa = pa
        .create_qp(&QpInitAttr::new(&cqa, &cqa, cap).with_type(QpType::Uc))
        .unwrap();
    let mut qb = pb
        .create_qp(&QpInitAttr::new(&cqb, &cqb, cap).with_type(QpType::Uc))
        .unwrap();
    connect_uc(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu256, 0x10);
    let src = pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let dst = pb.alloc_mr(4096, A::LOCAL_WRITE | A::REMOTE_WRITE).unwrap();
    let data = pattern(1000, 3);
    src.write(0, &data);
    net.fabric.capture(Some(64));
    let rbuf = pb.alloc_mr(64, A::LOCAL_WRITE).unwrap();
    qb.post_recv(&[RecvWr::new(5, &[rbuf.sge(0, 64).unwrap()])])
        .unwrap();
    qa.post_send(&[SendWr::rdma_write_with_imm(
        1,
        &[src.sge(0, 1000).unwrap()],
        dst.remote(100),
        42,
    )
    .signaled()])
        .unwrap();
    let s = wait(&net, &mut cqa, 1);
    assert_eq!(s[0].status, WcStatus::Success);
    assert_eq!(s[0].opcode, WcOpcode::RdmaWrite);
    let r = wait(&net, &mut cqb, 1);
    assert_eq!(r[0].opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!((r[0].wr_id, r[0].imm_data, r[0].byte_len), (5, 42, 1000));
    let mut got = vec![0u8; 1000];
    dst.read(100, &mut got);
    assert!(got == data);
    let frames = net.fabric.take_captured();
    let pkts: Vec<_> = frames
        .iter()
        .map(|f| {
            let (r, p) = ferroverbs_sim::wire::frame::parse(f).unwrap();
            (
                r.roce.opcode(),
                r.roce.bth.psn.value(),
                p.len(),
                r.roce.reth.is_some(),
            )
        })
        .collect();
    assert_eq!(
        pkts,
        [
            (Opcode::UcRdmaWriteFirst, 0x10, 256, true),
            (Opcode::UcRdmaWriteMiddle, 0x11, 256, false),
            (Opcode::UcRdmaWriteMiddle, 0x12, 256, false),
            (Opcode::UcRdmaWriteLastWithImmediate, 0x13, 232, false),
        ]
    );
}

//! The general services QP (QP1): created with `qpc.st` QP1, it receives the UD
//! packets peers send to QP 1 of its port and sends with source QP 1 in its DETH, the
//! Q_Key 0x80010000 (IBTA Vol. 1 13.5.1), as the CM's MADs travel on RoCEv2.

use std::time::Duration;

use ferroverbs::verbs::{
    AccessFlags, AddressVector, QpCap, QpInitAttr, RecvWr, SendWr, UdInitAttr, WcFlags, WcStatus,
};
use ferroverbs_sim::wire::{frame, Opcode};
use ferroverbs_testbed::Bed;

const QP1_QKEY: u32 = 0x8001_0000;

#[test]
fn qp1_to_qp1_carries_a_mad_with_source_qp_1() {
    let bed = Bed::new(31);
    bed.fabric().capture(Some(16));
    let (na, nb) = (bed.nic(0), bed.nic(1));
    let cq_a = na.ctx.create_cq(16).unwrap();
    let mut cq_b = nb.ctx.create_cq(16).unwrap();
    let cap = QpCap::default();
    let mut ga = na
        .pd
        .create_qp(&QpInitAttr::gsi(&cq_a, &cq_a, cap))
        .unwrap();
    let mut gb = nb
        .pd
        .create_qp(&QpInitAttr::gsi(&cq_b, &cq_b, cap))
        .unwrap();
    assert!(ga.qp_num() > 1, "QP1 has a QPN of its own; the wire says 1");
    for q in [&mut ga, &mut gb] {
        q.to_init_ud(&UdInitAttr::new(1, QP1_QKEY)).unwrap();
        q.to_rtr_ud().unwrap();
        q.to_rts_ud(0).unwrap();
    }
    let buf_a = na.pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let buf_b = nb.pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let rsg = [buf_b.sge(0, 40 + 256).unwrap()];
    gb.post_recv(&[RecvWr::new(5, &rsg)]).unwrap();
    let mad: Vec<u8> = (0..256u32).map(|i| i as u8).collect();
    buf_a.write(0, &mad);
    let ah = na
        .pd
        .create_ah(1, &AddressVector::new(nb.gid.gid, nb.gid.mac, 0))
        .unwrap();
    let sg = [buf_a.sge(0, 256).unwrap()];
    ga.post_send(&[SendWr::send(1, &sg).ud(&ah, 1, QP1_QKEY).signaled()])
        .unwrap();
    let wc = bed
        .run_until(Duration::from_secs(1), || cq_b.poll_one())
        .unwrap();
    assert_eq!(
        (wc.status, wc.wr_id, wc.byte_len),
        (WcStatus::Success, 5, 40 + 256)
    );
    assert_eq!(wc.src_qp, 1, "sent by QP1");
    assert_eq!(wc.qp_num, gb.qp_num());
    assert!(wc.wc_flags.contains(WcFlags::GRH));
    let mut got = vec![0u8; 256];
    buf_b.read(40, &mut got);
    assert_eq!(got, mad);
    let frames = bed.fabric().take_captured();
    let (r, _) = frame::parse(&frames[0]).unwrap();
    assert_eq!(r.roce.bth.opcode, Opcode::UdSendOnly);
    assert_eq!(r.roce.bth.dest_qp, 1);
    let deth = r.roce.deth.unwrap();
    assert_eq!((deth.qkey, deth.src_qp), (QP1_QKEY, 1));
}

#[test]
fn one_qp1_per_port_and_nothing_answers_qp_1_without_it() {
    let bed = Bed::new(32);
    let (na, nb) = (bed.nic(0), bed.nic(1));
    let cq = na.ctx.create_cq(16).unwrap();
    let cap = QpCap::default();
    let mut g1 = na.pd.create_qp(&QpInitAttr::gsi(&cq, &cq, cap)).unwrap();
    g1.to_init_ud(&UdInitAttr::new(1, QP1_QKEY)).unwrap();
    let mut g2 = na.pd.create_qp(&QpInitAttr::gsi(&cq, &cq, cap)).unwrap();
    let e = g2.to_init_ud(&UdInitAttr::new(1, QP1_QKEY)).unwrap_err();
    assert!(e.to_string().contains("0x5f080021"), "{e}");
    drop(g2);

    // B has no QP1: a UD SEND to its QP 1 is dropped and counted.
    let mut u = na.pd.create_qp(&QpInitAttr::ud(&cq, &cq, cap)).unwrap();
    u.to_init_ud(&UdInitAttr::new(1, QP1_QKEY)).unwrap();
    u.to_rtr_ud().unwrap();
    u.to_rts_ud(0).unwrap();
    let ah = na
        .pd
        .create_ah(1, &AddressVector::new(nb.gid.gid, nb.gid.mac, 0))
        .unwrap();
    let before = nb.sim.stats().data_path.rx_no_qp;
    u.post_send(&[SendWr::send(1, &[]).ud(&ah, 1, QP1_QKEY)])
        .unwrap();
    bed.fabric().run_until_idle();
    assert_eq!(nb.sim.stats().data_path.rx_no_qp, before + 1);
}

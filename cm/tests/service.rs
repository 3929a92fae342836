//! The CM service over the simulated ConnectX's QP1: an RC connection made with
//! rdma_cm's exchange (REQ, REP, RTU) between two NICs of a test bed, the QPs taken to
//! RTS with the negotiated attributes and carrying data, then disconnected; a listener
//! nobody has (REJ 8), a rejection with private data (REJ 28), a UD service resolved
//! by SIDR and used, and a lost REQ sent again after rdma_cm's time-out.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ferroverbs::verbs::{QpCap, QpInitAttr, RecvWr, SendWr, UdInitAttr, WcStatus};
use ferroverbs::{Clock, SteppedClock};
use ferroverbs_cm::service::{CmEvent, ConnParam, Service};
use ferroverbs_sim::SimBus;
use ferroverbs_testbed::{Bed, Nic};

const SECOND: Duration = Duration::from_secs(1);

fn clock(nic: &Nic) -> Arc<dyn Clock> {
    let (a, b) = (nic.sim.clock().clone(), nic.sim.clock().clone());
    Arc::new(SteppedClock::new(move || a.now(), move |d| b.advance(d)))
}

/// The bed's address book: 10.0.0.n is NIC n - 1.
fn resolver(bed: &Bed) -> impl Fn(IpAddr) -> Option<[u8; 6]> + 'static {
    let table: Vec<([u8; 16], [u8; 6])> =
        bed.nics().iter().map(|n| (n.gid.gid, n.gid.mac)).collect();
    move |ip| {
        let gid = ferroverbs_cm::ipcm::ip_to_gid(ip);
        table.iter().find(|(g, _)| *g == gid).map(|(_, m)| *m)
    }
}

/// The CM service of NIC `i` (the bed holds its PD for the process).
fn service(bed: &Bed, i: usize, seed: u64) -> Service<'static, SimBus> {
    let n = bed.nic(i);
    Service::new(n.pd, 1, n.gid, clock(n), resolver(bed), seed).expect("CM service")
}

fn addr(n: u8, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)), port)
}

/// Runs until one of the services has an event; returns (which, event).
fn next(bed: &Bed, a: &mut Service<'_, SimBus>, b: &mut Service<'_, SimBus>) -> (char, CmEvent) {
    bed.run_until(SECOND, || {
        a.poll();
        b.poll();
        if let Some(e) = a.next_event() {
            return Some(('a', e));
        }
        b.next_event().map(|e| ('b', e))
    })
    .expect("a CM event")
}

#[test]
fn connect_accept_send_disconnect() {
    let bed = Bed::new(41);
    let mut sa = service(&bed, 0, 1);
    let mut sb = service(&bed, 1, 2);
    let (na, nb) = (bed.nic(0), bed.nic(1));
    let (cqa, mut cqb) = (na.ctx.create_cq(64).unwrap(), nb.ctx.create_cq(64).unwrap());
    let mut qa = na
        .pd
        .create_qp(&QpInitAttr::new(&cqa, &cqa, QpCap::default()))
        .unwrap();
    let mut qb = nb
        .pd
        .create_qp(&QpInitAttr::new(&cqb, &cqb, QpCap::default()))
        .unwrap();
    sb.listen(addr(2, 7174)).unwrap();
    let param = ConnParam {
        responder_resources: 2,
        initiator_depth: 3,
        private_data: b"hello, CM".to_vec(),
        ..ConnParam::default()
    };
    let ia = sa.connect(&qa, addr(2, 7174), &param).unwrap();
    let (who, e) = next(&bed, &mut sa, &mut sb);
    let CmEvent::ConnectRequest {
        id: ib,
        peer,
        local,
        private_data,
        responder_resources,
        initiator_depth,
    } = e
    else {
        panic!("{who} {e:?}")
    };
    assert_eq!(who, 'b');
    assert_eq!((peer.ip(), local), (addr(1, 0).ip(), addr(2, 7174)));
    assert_eq!(&private_data[..9], b"hello, CM");
    assert_eq!(private_data.len(), 56);
    assert_eq!(
        (responder_resources, initiator_depth),
        (3, 2),
        "as the passive side sees them"
    );
    // B's QP is in INIT with a receive posted, as rdma_create_qp leaves a QP.
    let mb = nb
        .pd
        .alloc_mr(4096, ferroverbs::verbs::AccessFlags::LOCAL_WRITE)
        .unwrap();
    qb.to_init(1, ferroverbs::verbs::AccessFlags::empty())
        .unwrap();
    let rsg = [mb.sge(0, 64).unwrap()];
    qb.post_recv(&[RecvWr::new(1, &rsg)]).unwrap();
    sb.accept(
        ib,
        &mut qb,
        &ConnParam {
            private_data: b"welcome".to_vec(),
            ..ConnParam::default()
        },
    )
    .unwrap();
    let (who, e) = next(&bed, &mut sa, &mut sb);
    let CmEvent::ConnectResponse { id, private_data } = e else {
        panic!("{who} {e:?}")
    };
    assert_eq!((who, id), ('a', ia));
    assert_eq!(&private_data[..7], b"welcome");
    sa.establish(ia, &mut qa).unwrap();
    assert_eq!(
        next(&bed, &mut sa, &mut sb),
        ('a', CmEvent::Established { id: ia })
    );
    assert_eq!(
        next(&bed, &mut sa, &mut sb),
        ('b', CmEvent::Established { id: ib })
    );
    let (pa, pb) = (
        sa.engine().qp_params(ia).unwrap(),
        sb.engine().qp_params(ib).unwrap(),
    );
    assert_eq!((pa.dest_qpn, pb.dest_qpn), (qb.qp_num(), qa.qp_num()));
    assert_eq!((pa.sq_psn, pb.sq_psn), (pb.rq_psn, pa.rq_psn));

    // The QPs are connected: a SEND goes through.
    let ma = na
        .pd
        .alloc_mr(4096, ferroverbs::verbs::AccessFlags::LOCAL_WRITE)
        .unwrap();
    ma.write(0, b"over the CM's connection");
    let sg = [ma.sge(0, 24).unwrap()];
    qa.post_send(&[SendWr::send(2, &sg).signaled()]).unwrap();
    let wc = bed.run_until(SECOND, || cqb.poll_one()).unwrap();
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 24));
    let mut got = [0u8; 24];
    mb.read(0, &mut got);
    assert_eq!(&got, b"over the CM's connection");

    // Disconnect: DREQ, DREP, TimeWait on both.
    sa.disconnect(ia, Some(&mut qa)).unwrap();
    assert_eq!(
        next(&bed, &mut sa, &mut sb),
        ('b', CmEvent::Disconnected { id: ib })
    );
    sb.disconnect(ib, Some(&mut qb)).unwrap();
    assert_eq!(
        next(&bed, &mut sa, &mut sb),
        ('a', CmEvent::Disconnected { id: ia })
    );
    bed.advance(Duration::from_millis(512));
    let mut exits = vec![next(&bed, &mut sa, &mut sb), next(&bed, &mut sa, &mut sb)];
    exits.sort_by_key(|(w, _)| *w);
    assert_eq!(
        exits,
        [
            ('a', CmEvent::TimewaitExit { id: ia }),
            ('b', CmEvent::TimewaitExit { id: ib })
        ]
    );
    assert_eq!(sa.stats().bad_mads + sb.stats().bad_mads, 0);
}

#[test]
fn no_listener_and_a_consumer_reject() {
    let bed = Bed::new(42);
    let mut sa = service(&bed, 0, 3);
    let mut sb = service(&bed, 1, 4);
    let na = bed.nic(0);
    let cq = na.ctx.create_cq(16).unwrap();
    let qa = na
        .pd
        .create_qp(&QpInitAttr::new(&cq, &cq, QpCap::default()))
        .unwrap();
    let ia = sa
        .connect(&qa, addr(2, 9999), &ConnParam::default())
        .unwrap();
    match next(&bed, &mut sa, &mut sb) {
        ('a', CmEvent::Rejected { id, reason: 8, .. }) => assert_eq!(id, ia),
        e => panic!("{e:?}"),
    }
    sb.listen(addr(2, 9999)).unwrap();
    let ia = sa
        .connect(&qa, addr(2, 9999), &ConnParam::default())
        .unwrap();
    let ('b', CmEvent::ConnectRequest { id: ib, .. }) = next(&bed, &mut sa, &mut sb) else {
        panic!()
    };
    sb.reject(ib, b"not today").unwrap();
    match next(&bed, &mut sa, &mut sb) {
        (
            'a',
            CmEvent::Rejected {
                id,
                reason: 28,
                private_data,
            },
        ) => {
            assert_eq!(id, ia);
            assert_eq!(&private_data[..9], b"not today");
        }
        e => panic!("{e:?}"),
    }
    // An address nobody resolves is refused before anything is sent.
    assert!(sa.connect(&qa, addr(9, 1), &ConnParam::default()).is_err());
}

#[test]
fn a_ud_service_resolved_by_sidr_takes_datagrams() {
    let bed = Bed::new(43);
    let mut sa = service(&bed, 0, 5);
    let mut sb = service(&bed, 1, 6);
    let (na, nb) = (bed.nic(0), bed.nic(1));
    let (cqa, mut cqb) = (na.ctx.create_cq(16).unwrap(), nb.ctx.create_cq(16).unwrap());
    let qkey = 0x0123_4567; // RDMA_UDP_QKEY
    let mut ua = na
        .pd
        .create_qp(&QpInitAttr::ud(&cqa, &cqa, QpCap::default()))
        .unwrap();
    let mut ub = nb
        .pd
        .create_qp(&QpInitAttr::ud(&cqb, &cqb, QpCap::default()))
        .unwrap();
    for q in [&mut ua, &mut ub] {
        q.to_init_ud(&UdInitAttr::new(1, qkey)).unwrap();
        q.to_rtr_ud().unwrap();
        q.to_rts_ud(0).unwrap();
    }
    sb.listen_ud(addr(2, 7174)).unwrap();
    let ia = sa.resolve_ud(addr(2, 7174), b"udaddy").unwrap();
    let (
        'b',
        CmEvent::SidrRequest {
            id: ib,
            private_data,
            ..
        },
    ) = next(&bed, &mut sa, &mut sb)
    else {
        panic!()
    };
    assert_eq!(&private_data[..6], b"udaddy");
    sb.sidr_accept(ib, ub.qp_num(), qkey, &[]).unwrap();
    let (
        'a',
        CmEvent::SidrResolved {
            id,
            status: 0,
            qpn,
            qkey: k,
            peer,
        },
    ) = next(&bed, &mut sa, &mut sb)
    else {
        panic!()
    };
    assert_eq!((id, qpn, k), (ia, ub.qp_num(), qkey));
    let ah = na
        .pd
        .create_ah(
            1,
            &ferroverbs::verbs::AddressVector::new(peer.gid, peer.mac, 0),
        )
        .unwrap();
    let mb = nb
        .pd
        .alloc_mr(4096, ferroverbs::verbs::AccessFlags::LOCAL_WRITE)
        .unwrap();
    let rsg = [mb.sge(0, 40 + 64).unwrap()];
    ub.post_recv(&[RecvWr::new(1, &rsg)]).unwrap();
    ua.post_send(&[SendWr::send(1, &[]).ud(&ah, qpn, k)])
        .unwrap();
    let wc = bed.run_until(SECOND, || cqb.poll_one()).unwrap();
    assert_eq!((wc.status, wc.src_qp), (WcStatus::Success, ua.qp_num()));
}

#[test]
fn a_lost_req_is_sent_again_after_rdma_cms_timeout() {
    let bed = Bed::new(44);
    let mut sa = service(&bed, 0, 7);
    let mut sb = service(&bed, 1, 8);
    let (na, nb) = (bed.nic(0), bed.nic(1));
    let cq = na.ctx.create_cq(16).unwrap();
    let qa = na
        .pd
        .create_qp(&QpInitAttr::new(&cq, &cq, QpCap::default()))
        .unwrap();
    sb.listen(addr(2, 7174)).unwrap();
    bed.fabric().partition(na.gid.mac, nb.gid.mac, true);
    sa.connect(&qa, addr(2, 7174), &ConnParam::default())
        .unwrap();
    bed.fabric().run_until_idle();
    bed.fabric().partition(na.gid.mac, nb.gid.mac, false);
    let deadline = sa.next_deadline().unwrap();
    assert_eq!(deadline - bed.now(), Duration::from_millis(4608));
    bed.advance(Duration::from_millis(4607));
    sa.poll();
    sb.poll();
    assert!(sb.next_event().is_none(), "not before the time-out");
    bed.advance(Duration::from_millis(1));
    let (who, e) = next(&bed, &mut sa, &mut sb);
    assert!(
        matches!(e, CmEvent::ConnectRequest { .. }) && who == 'b',
        "{e:?}"
    );
    assert_eq!(sa.stats().mads_out, 2, "the REQ twice");
}

/// Whether `fd` is readable now.
fn readable(fd: std::os::fd::RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, a zero timeout.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

#[test]
fn the_channel_descriptor_wakes_when_a_mad_arrives() {
    let bed = Bed::new(45);
    let mut sa = service(&bed, 0, 9);
    let nb = bed.nic(1);
    let chan: &'static _ = Box::leak(Box::new(nb.ctx.create_comp_channel().unwrap()));
    let mut sb =
        Service::with_channel(nb.pd, chan, 1, nb.gid, clock(nb), resolver(&bed), 10).unwrap();
    let fd = sb.fd().unwrap();
    sb.listen(addr(2, 7174)).unwrap();
    sb.poll();
    assert!(!readable(fd), "nothing arrived yet");
    let na = bed.nic(0);
    let cq = na.ctx.create_cq(16).unwrap();
    let qa = na
        .pd
        .create_qp(&QpInitAttr::new(&cq, &cq, QpCap::default()))
        .unwrap();
    sa.connect(&qa, addr(2, 7174), &ConnParam::default())
        .unwrap();
    bed.fabric().run_until_idle();
    chan.process();
    assert!(readable(fd), "the REQ wakes the descriptor");
    sb.poll();
    assert!(matches!(
        sb.next_event(),
        Some(CmEvent::ConnectRequest { .. })
    ));
    assert!(!readable(fd), "poll consumed the wake-up and armed again");
}

#[test]
fn the_qp_attributes_of_rtr_are_known_before_the_rep_and_hold_after() {
    use ferroverbs::verbs::QpState;
    use ferroverbs_cm::service::QpTransitionAttr;
    let bed = Bed::new(46);
    let mut sa = service(&bed, 0, 11);
    let mut sb = service(&bed, 1, 12);
    sb.listen(addr(2, 7174)).unwrap();
    // QP numbers only, as the uAPI layer's rdma_cm device sees libmlx5's QPs.
    let ia = sa
        .connect_qpn(0x4242, addr(2, 7174), &ConnParam::default())
        .unwrap();
    let ('b', CmEvent::ConnectRequest { id: ib, .. }) = next(&bed, &mut sa, &mut sb) else {
        panic!()
    };
    let p = ConnParam::default();
    let QpTransitionAttr::Rtr {
        dest_qpn, rq_psn, ..
    } = sb.init_qp_attr(ib, QpState::Rtr, &p).unwrap()
    else {
        panic!()
    };
    assert_eq!(dest_qpn, 0x4242);
    sb.accept_qpn(ib, 0x4343, &p).unwrap();
    let ('a', CmEvent::ConnectResponse { .. }) = next(&bed, &mut sa, &mut sb) else {
        panic!()
    };
    // The active side sends from the PSN the passive side said it expects.
    let QpTransitionAttr::Rts { sq_psn, .. } = sa.init_qp_attr(ia, QpState::Rts, &p).unwrap()
    else {
        panic!()
    };
    assert_eq!(sq_psn, rq_psn);
    let QpTransitionAttr::Rtr { dest_qpn, .. } = sa.init_qp_attr(ia, QpState::Rtr, &p).unwrap()
    else {
        panic!()
    };
    assert_eq!(dest_qpn, 0x4343);
    assert!(sb.init_qp_attr(ib, QpState::Sqd, &p).is_err());
    sa.establish_rtu(ia).unwrap();
    assert_eq!(
        next(&bed, &mut sa, &mut sb),
        ('a', CmEvent::Established { id: ia })
    );
    assert_eq!(
        next(&bed, &mut sa, &mut sb),
        ('b', CmEvent::Established { id: ib })
    );
}

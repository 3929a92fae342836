//! Verbs objects on the simulated ConnectX through the control plane: PD, MR, CQ and
//! RC QP creation and destruction, the QP state machine with its attribute checks,
//! queries, and the post-path errors that need no data path.

mod verbs_support;
use verbs_support::*;

use ferroverbs::verbs::{
    flow_label_from_qpns, udp_sport_from_flow_label, AccessFlags, Attribute, BadWr, Error, Mtu,
    PostError, QpAttr, QpCap, QpInitAttr, QpState, RecvWr, SendWr, Transition,
};
use ferroverbs_hw::control::mkey::mkc;
use ferroverbs_hw::control::qp::QpcState as FwQpState;
use ferroverbs_hw::control::qp::{ads, qpc};

#[test]
fn objects_are_created_in_firmware_and_destroyed_on_drop() {
    let sim = sim();
    let ctx = open(&sim, 1);
    let before = sim.stats().objects;
    {
        let pd = ctx.alloc_pd().unwrap();
        let mr = pd
            .alloc_mr(10_000, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
            .unwrap();
        let cq = ctx.create_cq(100).unwrap();
        assert_eq!(cq.capacity(), 127, "next power of two above 100, minus one");
        let qp = pd
            .create_qp(&QpInitAttr::new(&cq, &cq, QpCap::default()))
            .unwrap();
        let o = sim.stats().objects;
        assert_eq!(o.pds, before.pds + 1);
        assert_eq!(o.mkeys, before.mkeys + 1);
        assert_eq!(o.cqs, before.cqs + 1);
        assert_eq!(o.qps, before.qps + 1);
        assert_eq!(o.uars, before.uars + 1, "one UAR per QP");
        sim.with_firmware(|fw| {
            let k = fw.mkey(mr.lkey() >> 8).expect("mkey exists");
            assert_eq!(k.key, mr.lkey());
            assert_eq!(k.pd, pd.pdn());
            assert_eq!(mkc::start_addr.get(&k.mkc), mr.addr());
            assert_eq!(mkc::len.get(&k.mkc), 10_000);
            assert_eq!(mkc::lw.get(&k.mkc), 1);
            assert_eq!(mkc::rr.get(&k.mkc), 1);
            assert_eq!(mkc::rw.get(&k.mkc), 0);
            assert_eq!(mkc::a.get(&k.mkc), 0);
            assert_eq!(mkc::log_page_size.get(&k.mkc), 12);
            assert_eq!(k.mtt.len(), 3, "10 000 bytes from a page boundary: 3 pages");
            let q = fw.qp(qp.qp_num()).expect("QP exists");
            assert_eq!(q.state, FwQpState::Rst);
            assert_eq!(q.pd, pd.pdn());
            assert_eq!(q.cqn_snd, Some(cq.cqn()));
            assert_eq!(q.cqn_rcv, Some(cq.cqn()));
            assert!(fw.cq(cq.cqn()).is_some());
        });
        assert_eq!(qp.state(), QpState::Reset);
    }
    assert_eq!(sim.stats().objects, before, "everything destroyed on drop");
    ctx.close().unwrap();
    assert_nothing_left(&sim);
}

#[test]
fn granted_caps_follow_rdma_core_sizing() {
    let sim = sim();
    let ctx = open(&sim, 1);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let ask = QpCap {
        max_send_wr: 100,
        max_recv_wr: 100,
        max_send_sge: 1,
        max_recv_sge: 3,
        max_inline_data: 64,
    };
    let qp = pd.create_qp(&QpInitAttr::new(&cq, &cq, ask)).unwrap();
    let c = qp.cap();
    // W = align64(max(48 + align16(4 + 64), 48 + 16)) = 128; 100 WRs * 128 B = 12800
    // -> 16384 B = 256 WQEBBs; max_post = 16384 / 128 = 128; inline = 128 - 48 - 4.
    assert_eq!(c.max_send_wr, 128);
    assert_eq!(c.max_inline_data, 76);
    assert_eq!(c.max_send_sge, (128 - 48) / 16);
    // RQ: 3 SGEs -> 64-byte WQEs of 4 entries; 100 -> 128 WQEs.
    assert_eq!(c.max_recv_wr, 128);
    assert_eq!(c.max_recv_sge, 4);
    sim.with_firmware(|fw| {
        let q = fw.qp(qp.qp_num()).unwrap();
        assert_eq!(qpc::log_sq_size.get(&q.qpc), 8);
        assert_eq!(qpc::log_rq_size.get(&q.qpc), 7);
        assert_eq!(qpc::log_rq_stride.get(&q.qpc), 2);
    });
    let f = qp.footprint();
    assert_eq!(f.hw_bytes, 16384 + 128 * 64 + 8);
    assert_eq!(f.dma_bytes, 28672);
    // Over the device limits: typed errors naming the capability.
    let big = QpCap {
        max_inline_data: 2000,
        ..QpCap::default()
    };
    match pd.create_qp(&QpInitAttr::new(&cq, &cq, big)) {
        Err(Error::CapExceeded { what, max, .. }) => {
            assert_eq!(what, "max_inline_data");
            assert_eq!(max, 1024 - 48 - 4);
        }
        other => panic!("{other:?}"),
    }
    let sges = QpCap {
        max_send_sge: 31,
        ..QpCap::default()
    };
    assert!(matches!(
        pd.create_qp(&QpInitAttr::new(&cq, &cq, sges)),
        Err(Error::CapExceeded {
            what: "max_send_sge",
            ..
        })
    ));
    assert!(matches!(ctx.create_cq(0), Err(Error::CapExceeded { .. })));
}

#[test]
fn transitions_check_their_attributes() {
    let sim = sim();
    let ctx = open(&sim, 1);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let mut qp = pd
        .create_qp(&QpInitAttr::new(&cq, &cq, QpCap::default()))
        .unwrap();

    // RESET -> INIT needs the port, the P_Key index and the access flags.
    match qp.modify(QpState::Init, &QpAttr::new().port(1).pkey_index(0)) {
        Err(Error::MissingAttribute {
            transition,
            attribute,
        }) => {
            assert_eq!(transition, Transition::ResetToInit);
            assert_eq!(attribute, Attribute::AccessFlags);
        }
        other => panic!("{other:?}"),
    }
    let e = qp
        .modify(
            QpState::Init,
            &QpAttr::new()
                .port(1)
                .pkey_index(0)
                .access(AccessFlags::empty())
                .dest_qpn(5),
        )
        .unwrap_err();
    assert!(matches!(
        e,
        Error::UnexpectedAttribute {
            transition: Transition::ResetToInit,
            attribute: Attribute::DestQpn
        }
    ));
    assert_eq!(
        e.to_string(),
        "RESET->INIT does not accept the dest_qpn attribute"
    );
    // No transition RESET -> RTS.
    assert!(matches!(
        qp.modify(QpState::Rts, &QpAttr::new()),
        Err(Error::InvalidTransition {
            from: QpState::Reset,
            to: QpState::Rts
        })
    ));
    assert!(matches!(
        qp.modify(
            QpState::Init,
            &QpAttr::new()
                .port(2)
                .pkey_index(0)
                .access(AccessFlags::empty())
        ),
        Err(Error::AttributeOutOfRange {
            attribute: Attribute::Port,
            ..
        })
    ));
    let access = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    qp.to_init(1, access).unwrap();
    assert_eq!(qp.state(), QpState::Init);

    // INIT -> RTR: each required attribute named when missing.
    let full: QpAttr = (&rtr(2, 0x77, Mtu::Mtu1024)).into();
    for (attr, missing) in [
        (QpAttr { av: None, ..full }, Attribute::AddressVector),
        (
            QpAttr {
                path_mtu: None,
                ..full
            },
            Attribute::PathMtu,
        ),
        (
            QpAttr {
                dest_qpn: None,
                ..full
            },
            Attribute::DestQpn,
        ),
        (
            QpAttr {
                rq_psn: None,
                ..full
            },
            Attribute::RqPsn,
        ),
        (
            QpAttr {
                max_dest_rd_atomic: None,
                ..full
            },
            Attribute::MaxDestRdAtomic,
        ),
        (
            QpAttr {
                min_rnr_timer: None,
                ..full
            },
            Attribute::MinRnrTimer,
        ),
    ] {
        match qp.modify(QpState::Rtr, &attr) {
            Err(Error::MissingAttribute {
                transition: Transition::InitToRtr,
                attribute,
            }) => assert_eq!(attribute, missing),
            other => panic!("{missing:?}: {other:?}"),
        }
    }
    // The path MTU cannot exceed the port's active MTU (1024 for the simulator's
    // 1500-byte Ethernet MTU).
    let active = ctx.query_port(1).unwrap().active_mtu;
    assert_eq!(active, Mtu::Mtu1024);
    match qp.to_rtr(&rtr(2, 0x77, Mtu::Mtu4096)) {
        Err(Error::PathMtuTooLarge {
            requested,
            active: a,
            port,
        }) => {
            assert_eq!((requested, a, port), (Mtu::Mtu4096, active, 1));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        qp.modify(
            QpState::Rtr,
            &QpAttr {
                rq_psn: Some(1 << 24),
                ..full
            }
        ),
        Err(Error::AttributeOutOfRange {
            attribute: Attribute::RqPsn,
            ..
        })
    ));
    qp.to_rtr(&rtr(2, 0x77, Mtu::Mtu1024)).unwrap();

    // RTR -> RTS.
    let e = qp
        .modify(
            QpState::Rts,
            &QpAttr::new().sq_psn(1).timeout(14).retry_cnt(7),
        )
        .unwrap_err();
    assert!(matches!(
        e,
        Error::MissingAttribute {
            transition: Transition::RtrToRts,
            attribute: Attribute::RnrRetry
        }
    ));
    qp.to_rts(&rts()).unwrap();
    assert_eq!(qp.state(), QpState::Rts);

    // What the firmware holds.
    let info = qp.query().unwrap();
    assert_eq!(info.state, QpState::Rts);
    assert_eq!(info.path_mtu, Some(Mtu::Mtu1024));
    assert_eq!(info.dest_qpn, 0x77);
    assert_eq!(info.rq_psn, 0x100);
    assert_eq!(info.sq_psn, 0x100);
    assert_eq!(info.access, access);
    assert_eq!(info.port, 1);
    assert_eq!(info.max_dest_rd_atomic, 4);
    assert_eq!(info.max_rd_atomic, 4);
    assert_eq!(info.min_rnr_timer, 12);
    assert_eq!(info.timeout, 14);
    assert_eq!((info.retry_cnt, info.rnr_retry), (7, 7));
    assert_eq!(info.av.dgid, gid(2).gid);
    assert_eq!(info.av.dmac, gid(2).mac);
    assert_eq!(info.av.hop_limit, 64);
    // No flow label on the path: Linux's port from the QP numbers' flow label.
    let sport = info.av.udp_sport.unwrap();
    assert_eq!(
        sport,
        udp_sport_from_flow_label(flow_label_from_qpns(qp.qp_num(), 0x77))
    );
    sim.with_firmware(|fw| {
        let q = fw.qp(qp.qp_num()).unwrap();
        assert_eq!(q.state, FwQpState::Rts);
        let p = |f: ferroverbs_hw::Field| f.at(qpc::primary_address_path.bit).get(&q.qpc);
        assert_eq!(p(ads::vhca_port_num), 1);
        assert_eq!(p(ads::src_addr_index), 0);
    });

    // RTS -> RTS with new access flags; RTS -> ERR -> RESET -> INIT again.
    qp.modify(
        QpState::Rts,
        &QpAttr::new()
            .access(AccessFlags::REMOTE_READ)
            .min_rnr_timer(3),
    )
    .unwrap();
    assert_eq!(qp.query().unwrap().access, AccessFlags::REMOTE_READ);
    qp.to_error().unwrap();
    assert_eq!(qp.query().unwrap().state, QpState::Err);
    qp.reset().unwrap();
    assert_eq!(qp.query().unwrap().state, QpState::Reset);
    qp.to_init(1, AccessFlags::empty()).unwrap();
    assert_eq!(qp.query().unwrap().state, QpState::Init);
}

#[test]
fn the_rc_udp_source_port_follows_the_flow_label_then_the_qp_numbers() {
    // Linux mlx5_ib `mlx5_set_path_udp_sport`: a non-zero flow label gives the port
    // (`rdma_flow_label_to_udp_sport`), else `rdma_calc_flow_label(lqpn, rqpn)` does.
    let sim = sim();
    let ctx = open(&sim, 1);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let init = QpInitAttr::new(&cq, &cq, QpCap::default());
    let fw_sport = |qpn: u32| {
        sim.with_firmware(|fw| {
            let q = fw.qp(qpn).unwrap();
            ads::udp_sport.at(qpc::primary_address_path.bit).get(&q.qpc) as u16
        })
    };
    for (flow_label, dest_qpn) in [
        (0x1_2345u32, 0x77u32),
        (0, 0x77),
        (0, 0x1234),
        (0xf_ffff, 9),
    ] {
        let mut qp = pd.create_qp(&init).unwrap();
        qp.to_init(1, AccessFlags::empty()).unwrap();
        let mut attr = rtr(2, dest_qpn, Mtu::Mtu1024);
        attr.av.flow_label = flow_label;
        qp.to_rtr(&attr).unwrap();
        let fl = if flow_label != 0 {
            flow_label
        } else {
            flow_label_from_qpns(qp.qp_num(), dest_qpn)
        };
        let want = udp_sport_from_flow_label(fl);
        assert_eq!(fw_sport(qp.qp_num()), want, "flow label {flow_label:#x}");
        assert_eq!(qp.query().unwrap().av.udp_sport, Some(want));
        if flow_label != 0 {
            // Whatever the QP numbers: the flow label alone decides.
            assert_eq!(
                want,
                0xc000 | ((flow_label & 0x3fff) ^ (flow_label >> 14)) as u16
            );
        }
    }
    // A port the caller gives is kept.
    let mut qp = pd.create_qp(&init).unwrap();
    qp.to_init(1, AccessFlags::empty()).unwrap();
    let mut attr = rtr(2, 0x77, Mtu::Mtu1024);
    attr.av.flow_label = 0x1_2345;
    attr.av.udp_sport = Some(0xd00d);
    qp.to_rtr(&attr).unwrap();
    assert_eq!(fw_sport(qp.qp_num()), 0xd00d);
}

#[test]
fn posting_in_reset_and_init_is_refused() {
    let sim = sim();
    let ctx = open(&sim, 1);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let mr = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let mut qp = pd
        .create_qp(&QpInitAttr::new(&cq, &cq, QpCap::default()))
        .unwrap();
    let sge = [mr.sge(0, 64).unwrap()];
    let send = [SendWr::send(1, &sge).signaled()];
    let recv = [RecvWr::new(2, &sge)];
    let refused = |state| BadWr {
        index: 0,
        error: PostError::InvalidState { state },
    };
    assert_eq!(qp.post_send(&send), Err(refused(QpState::Reset)));
    assert_eq!(qp.post_recv(&recv), Err(refused(QpState::Reset)));
    qp.to_init(1, AccessFlags::empty()).unwrap();
    assert_eq!(qp.post_send(&send), Err(refused(QpState::Init)));
    // Receives may be posted from INIT on.
    qp.post_recv(&recv).unwrap();
    qp.to_rtr(&rtr(2, 9, Mtu::Mtu1024)).unwrap();
    assert_eq!(qp.post_send(&send), Err(refused(QpState::Rtr)));
}

#[test]
fn send_requests_are_checked_before_the_ring_is_touched() {
    let sim = sim();
    let ctx = open(&sim, 1);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let mr = pd.alloc_mr(8192, AccessFlags::LOCAL_WRITE).unwrap();
    let cap = QpCap {
        max_send_wr: 4,
        max_send_sge: 2,
        max_inline_data: 32,
        ..QpCap::default()
    };
    let mut qp = pd.create_qp(&QpInitAttr::new(&cq, &cq, cap)).unwrap();
    qp.to_init(1, AccessFlags::empty()).unwrap();
    qp.to_rtr(&rtr(2, 9, Mtu::Mtu1024)).unwrap();
    qp.to_rts(&rts()).unwrap();
    let granted = qp.cap();

    // Too many SGEs.
    let sges: Vec<_> = (0..granted.max_send_sge as usize + 1)
        .map(|i| mr.sge(i * 16, 16).unwrap())
        .collect();
    assert_eq!(
        qp.post_send(&[SendWr::send(1, &sges)]),
        Err(BadWr {
            index: 0,
            error: PostError::TooManySge {
                count: sges.len(),
                max: granted.max_send_sge
            }
        })
    );
    // Inline too large.
    let big = vec![7u8; granted.max_inline_data as usize + 1];
    let parts: [&[u8]; 1] = [&big];
    assert_eq!(
        qp.post_send(&[SendWr::send_inline(2, &parts)]),
        Err(BadWr {
            index: 0,
            error: PostError::InlineTooLarge {
                len: big.len(),
                max: granted.max_inline_data
            }
        })
    );
    // Inline data cannot be the target of a READ.
    let remote = mr.remote(0);
    let w = SendWr::rdma_write_inline(3, &parts, remote);
    let read = SendWr {
        op: ferroverbs::verbs::SendOp::RdmaRead { remote },
        ..w
    };
    assert!(matches!(
        qp.post_send(&[read]),
        Err(BadWr {
            error: PostError::InlineNotAllowed { .. },
            ..
        })
    ));
    // A range outside the region is caught when the SGE is built.
    let e = mr.sge(8000, 500).unwrap_err();
    assert_eq!((e.offset, e.len, e.mr_len), (8000, 500, 8192));
}

#[test]
fn a_cq_in_use_cannot_be_destroyed() {
    let sim = sim();
    let ctx = open(&sim, 1);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let cqn = cq.cqn();
    let qp = pd
        .create_qp(&QpInitAttr::new(&cq, &cq, QpCap::default()))
        .unwrap();
    let (cq, e) = cq.destroy().unwrap_err();
    assert!(matches!(e, Error::CqInUse { qps: 1 }), "{e}");
    // Dropping the handle does not destroy the CQ under the QP either.
    drop(cq);
    assert!(sim.with_firmware(|fw| fw.cq(cqn).is_some()));
    drop(qp);
    assert!(
        sim.with_firmware(|fw| fw.cq(cqn).is_none()),
        "destroyed with its last QP"
    );
    let cq = ctx.create_cq(16).unwrap();
    let cqn = cq.cqn();
    cq.destroy().unwrap();
    assert!(sim.with_firmware(|fw| fw.cq(cqn).is_none()));
}

#[test]
fn memory_regions_own_their_buffer_and_check_access() {
    let sim = sim();
    let ctx = open(&sim, 1);
    let pd = ctx.alloc_pd().unwrap();
    // Remote write without local write is not a valid combination.
    assert!(matches!(
        pd.alloc_mr(64, AccessFlags::REMOTE_WRITE),
        Err(Error::InvalidAccess(_))
    ));
    // A user buffer, not page aligned: registered in place, given back intact.
    let mut v = vec![0u8; 5000];
    v[4999] = 0xab;
    let mr = pd
        .reg_mr(v.into_boxed_slice(), AccessFlags::LOCAL_WRITE)
        .unwrap();
    let mut last = [0u8; 1];
    mr.read(4999, &mut last);
    assert_eq!(last, [0xab]);
    mr.write(0, b"hello");
    sim.with_firmware(|fw| {
        let k = fw.mkey(mr.lkey() >> 8).unwrap();
        assert_eq!(mkc::start_addr.get(&k.mkc), mr.addr());
        let pages = (mr.addr() % 4096 + 5000).div_ceil(4096) as usize;
        assert_eq!(k.mtt.len(), pages);
    });
    let back = mr.deregister().unwrap().expect("the buffer comes back");
    assert_eq!(&back[..5], b"hello");
    assert_eq!(back[4999], 0xab);
    // Two regions get distinct keys.
    let a = pd.alloc_mr(64, AccessFlags::empty()).unwrap();
    let b = pd.alloc_mr(64, AccessFlags::empty()).unwrap();
    assert_ne!(a.lkey(), b.lkey());
    assert_eq!(a.lkey(), a.rkey());
    drop((a, b));
    drop(pd);
    ctx.close().unwrap();
    assert_nothing_left(&sim);
}

#[test]
fn no_memory_key_is_the_receive_list_terminator() {
    // `MLX5_INVALID_LKEY` (0x100: index 1, variant 0) ends a short receive scatter
    // list; a region with that key would read as an empty list to the device.
    let sim = sim();
    let ctx = open(&sim, 1);
    let pd = ctx.alloc_pd().unwrap();
    let mrs: Vec<_> = (0..300)
        .map(|_| pd.alloc_mr(64, AccessFlags::LOCAL_WRITE).unwrap())
        .collect();
    for mr in &mrs {
        assert_ne!(mr.lkey(), 0x100);
        assert_ne!(mr.lkey() & 0xff, 0, "variant byte 0 is never used");
    }
}

#[test]
fn verbs_objects_can_move_between_threads() {
    // A QP, a CQ and a memory region may be handed to another thread (one thread
    // at a time uses each: posting and polling take `&mut self`); a PD and a
    // context may be shared.
    fn send<T: Send>() {}
    fn sync<T: Sync>() {}
    use ferroverbs::verbs::{CompletionQueue, MemoryRegion, Pd, QueuePair};
    use ferroverbs_sim::SimBus;
    send::<QueuePair<'static, SimBus>>();
    send::<CompletionQueue<'static, SimBus>>();
    send::<MemoryRegion<'static, SimBus>>();
    sync::<MemoryRegion<'static, SimBus>>();
    sync::<Pd<'static, SimBus>>();
    sync::<ferroverbs::Context<SimBus>>();
}

#[test]
fn objects_of_another_device_are_refused_at_creation() {
    let (net, (a, _), (b, _)) = two_nics(false);
    let pd = a.alloc_pd().unwrap();
    let cq = a.create_cq(16).unwrap();
    let pd_b = b.alloc_pd().unwrap();
    let cq_b = b.create_cq(16).unwrap();
    let srq_b = pd_b
        .create_srq(&ferroverbs::verbs::SrqAttr {
            max_wr: 16,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    assert_ne!(a.id(), b.id());
    let (before_a, before_b) = (net.a.stats().objects, net.b.stats().objects);
    let foreign = |r: ferroverbs::verbs::Result<_>, what: &str, number: u32| {
        let e = r.expect_err("an object of another device must be refused");
        match &e {
            Error::ForeignObject {
                object,
                number: n,
                owner,
                creating,
                device,
            } => {
                assert_eq!((*object, *n, *creating), (what, number, "QP"));
                assert_eq!((*owner, *device), (b.id(), a.id()));
            }
            other => panic!("{what}: expected ForeignObject, got {other:?}"),
        }
        assert_eq!(
            e.to_string(),
            format!(
                "the {what} {number:#x} belongs to {}, not to {} where the QP is created",
                b.id(),
                a.id()
            )
        );
    };
    let cap = QpCap::default();
    foreign(
        pd.create_qp(&QpInitAttr::new(&cq_b, &cq, cap)),
        "send CQ",
        cq_b.cqn(),
    );
    foreign(
        pd.create_qp(&QpInitAttr::new(&cq, &cq_b, cap)),
        "receive CQ",
        cq_b.cqn(),
    );
    foreign(
        pd.create_qp(&QpInitAttr::new(&cq, &cq, cap).with_srq(&srq_b)),
        "SRQ",
        srq_b.srq_num(),
    );
    foreign(
        pd.create_qp(&QpInitAttr::ud(&cq_b, &cq_b, cap)),
        "send CQ",
        cq_b.cqn(),
    );
    // Nothing reached either firmware: no QP, UAR or counter set was left behind.
    assert_eq!(net.a.stats().objects, before_a);
    assert_eq!(net.b.stats().objects, before_b);
    // The same objects of the PD's own device are accepted.
    let qp = pd.create_qp(&QpInitAttr::new(&cq, &cq, cap)).unwrap();
    net.a.with_firmware(|fw| {
        let q = fw.qp(qp.qp_num()).expect("QP exists");
        assert_eq!((q.cqn_snd, q.cqn_rcv), (Some(cq.cqn()), Some(cq.cqn())));
    });
}

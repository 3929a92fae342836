//! Bring-up, queries, events and teardown of the driver against the simulated
//! ConnectX (deterministic mode, virtual time).

mod bringup_support;
use bringup_support::*;

use ferroverbs::{Device, DeviceConfig, GidEntry, L3Type, LinkLayer, Mtu, PortState, RoceVersion};
use ferroverbs_hw::control::caps::{cmd_hca_cap, query_hca_cap_out};
use ferroverbs_hw::control::cmd::Opcode;
use ferroverbs_sim::firmware::{CapType, FwConfig};
use ferroverbs_sim::{Sim, SimConfig};

#[test]
fn caps_are_set_as_the_driver_needs() {
    let sim = sim();
    let ctx = Device::open(sim.bus(), config(&sim)).unwrap();
    sim.with_firmware(|fw| {
        assert_eq!(fw.caps().gen(cmd_hca_cap::cmdif_checksum), 0);
        assert_eq!(fw.caps().gen(cmd_hca_cap::log_uar_page_sz), 0);
        assert_eq!(
            fw.caps()
                .roce(ferroverbs_hw::control::caps::roce_cap::sw_r_roce_src_udp_port),
            1
        );
        assert!(fw.ports()[0].roce_en, "RoCE enabled on the vport");
    });
    assert_eq!(ctx.cap(cmd_hca_cap::cmdif_checksum), 0);
    ctx.close().unwrap();
    sim.with_firmware(|fw| assert!(!fw.ports()[0].roce_en, "RoCE disabled again"));
}

#[test]
fn device_and_port_attributes_come_from_the_firmware() {
    let sim = sim();
    let ctx = Device::open(sim.bus(), config(&sim)).unwrap();
    let a = ctx.query_device().unwrap();
    let port = sim.with_firmware(|fw| fw.ports()[0].clone());
    let gen = |f| sim.with_firmware(|fw| fw.caps().gen(f));
    assert_eq!(a.max_qp, 1 << gen(cmd_hca_cap::log_max_qp));
    assert_eq!(a.max_qp_wr, 1 << gen(cmd_hca_cap::log_max_qp_sz));
    assert_eq!(
        u64::from(a.max_cqe),
        (1 << gen(cmd_hca_cap::log_max_cq_sz)) - 1
    );
    assert_eq!(a.max_cq, 1 << gen(cmd_hca_cap::log_max_cq));
    assert_eq!(a.max_mr, 1 << gen(cmd_hca_cap::log_max_mkey));
    assert_eq!(a.max_pd, 1 << gen(cmd_hca_cap::log_max_pd));
    assert_eq!(a.max_qp_rd_atom, 1 << gen(cmd_hca_cap::log_max_ra_req_qp));
    assert_eq!(
        a.max_qp_init_rd_atom,
        1 << gen(cmd_hca_cap::log_max_ra_res_qp)
    );
    let sq_sge = (gen(cmd_hca_cap::max_wqe_sz_sq).min(512) - 32) / 16;
    assert_eq!(
        u64::from(a.max_sge),
        (gen(cmd_hca_cap::max_wqe_sz_rq) / 16).min(sq_sge)
    );
    assert_eq!(a.max_mr_size, u64::MAX);
    assert_eq!(a.phys_port_cnt, 1);
    assert_eq!(a.link_layer, LinkLayer::Ethernet);
    assert_eq!(a.vendor_id, 0x02c9);
    assert_eq!(a.node_guid, port.guid());
    assert_eq!(a.fw_ver.to_string(), "16.35.1012");
    assert!(a.transports.rc && a.transports.ud);

    let p = ctx.query_port(1).unwrap();
    assert_eq!(p.state, PortState::Active);
    assert_eq!(p.link_layer, LinkLayer::Ethernet);
    assert_eq!(p.mac, port.mac);
    assert_eq!(p.max_mtu, Mtu::Mtu4096);
    assert_eq!(p.active_mtu, Mtu::for_ethernet(u32::from(port.mtu) - 22));
    assert_eq!(p.gid_tbl_len, 256);
    assert_eq!(p.gids, vec![gid0()]);
    assert!(ctx.query_port(0).is_err());
    assert!(ctx.query_port(2).is_err());
    ctx.close().unwrap();
    assert_nothing_left(&sim);
}

#[test]
fn the_gid_table_is_programmed_by_the_driver_and_cleared_at_teardown() {
    let sim = sim();
    let ctx = Device::open(sim.bus(), config(&sim)).unwrap();
    let mut v6 = GidEntry::ipv6(
        7,
        [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 9],
        [2, 0, 0, 0, 0, 9],
    );
    v6.vlan = Some(42);
    ctx.set_gid(1, v6).unwrap();
    let back = ctx.query_gid(1, 7).unwrap();
    assert_eq!(back, v6);
    assert_eq!(back.l3_type, L3Type::Ipv6);
    assert_eq!(back.version, RoceVersion::V2);
    let q = ctx.query_gid(1, 0).unwrap();
    assert_eq!(q, gid0());
    sim.with_firmware(|fw| {
        let e = fw.ports()[0].gid(7).expect("entry 7 set");
        assert_eq!(e.gid, v6.gid);
        assert_eq!(e.vlan, Some(42));
    });
    ctx.clear_gid(1, 7).unwrap();
    assert!(ctx.query_gid(1, 7).unwrap().is_empty());
    ctx.set_gid(1, GidEntry::ipv4(3, [192, 168, 0, 3], [2, 0, 0, 0, 0, 3]))
        .unwrap();
    // Beyond roce_address_table_size: refused by the driver before any command.
    assert!(matches!(
        ctx.set_gid(1, GidEntry::ipv4(300, [1, 1, 1, 1], [2; 6])),
        Err(ferroverbs::Error::InvalidArgument { .. })
    ));
    ctx.close().unwrap();
    sim.with_firmware(|fw| {
        assert!(
            fw.ports()[0].gids.iter().all(|g| g.is_none()),
            "teardown cleared the table"
        );
    });
    // A second bring-up without GIDs sees an empty table.
    let ctx = Device::open(
        sim.bus(),
        DeviceConfig {
            gids: Vec::new(),
            ..config(&sim)
        },
    )
    .unwrap();
    assert!(ctx.query_port(1).unwrap().gids.is_empty());
    drop(ctx);
    assert_nothing_left(&sim);
}

#[test]
fn commands_complete_by_event_once_the_async_eq_exists() {
    let sim = sim();
    let ctx = Device::open(sim.bus(), config(&sim)).unwrap();
    assert!(ctx.event_mode());
    assert!(ctx.async_eqn().is_some());
    assert!(ctx.uar_index().is_some());
    let eqes = sim.stats().fw.eqes;
    let cc = ctx.eq_consumer_counter().unwrap();
    for i in 1..=20u64 {
        ctx.query_device().unwrap();
        // One command, one command-completion EQE, consumed by the driver.
        assert_eq!(sim.stats().fw.eqes, eqes + i);
        assert_eq!(
            u64::from(ctx.eq_consumer_counter().unwrap()),
            u64::from(cc) + i
        );
    }
    // The EQ is re-armed after each pass: the device fired its vector.
    assert!(sim.irq_count(0) > 0);
    ctx.close().unwrap();
    assert_nothing_left(&sim);

    // Polled mode, by configuration: the EQ still exists, completions are polled.
    let ctx = Device::open(
        sim.bus(),
        DeviceConfig {
            event_mode: false,
            ..config(&sim)
        },
    )
    .unwrap();
    assert!(!ctx.event_mode());
    for _ in 0..20 {
        ctx.query_device().unwrap();
    }
    ctx.close().unwrap();
    assert_nothing_left(&sim);
}

#[test]
fn page_requests_are_answered_while_running() {
    let sim = sim();
    let ctx = Device::open(sim.bus(), config(&sim)).unwrap();
    let base = ctx.pages_lent();
    assert_eq!(sim.stats().pages_held as usize, base);

    sim.request_pages(37);
    ctx.process_events().unwrap();
    assert_eq!(ctx.pages_lent(), base + 37);
    assert_eq!(sim.stats().pages_held as usize, base + 37);

    // A request that arrives while the driver is busy is answered after the command.
    sim.request_pages(5);
    ctx.query_port(1).unwrap();
    assert_eq!(ctx.pages_lent(), base + 42);
    assert_eq!(sim.stats().pages_held as usize, base + 42);

    // The firmware gives pages back.
    sim.request_pages(-30);
    ctx.process_events().unwrap();
    assert_eq!(ctx.pages_lent(), base + 12);
    assert_eq!(sim.stats().pages_held as usize, base + 12);

    ctx.close().unwrap();
    assert_nothing_left(&sim);
}

fn with_pages(boot: u32, init: u32) -> Sim {
    let mut cfg = SimConfig::deterministic(0x0f00, 1);
    cfg.fw = FwConfig {
        boot_pages: boot,
        init_pages: init,
        ..cfg.fw
    };
    Sim::new(cfg)
}

#[test]
fn mailbox_chains_of_one_two_and_many_blocks_round_trip() {
    // MANAGE_PAGES GIVE inputs of 16 + 8n bytes and TAKE outputs of the same size:
    // n = 10/20 need one block, 100/120 two, 5000/9000 many (64 per command).
    for (boot, init) in [(10, 20), (100, 120), (5000, 9000)] {
        let sim = with_pages(boot, init);
        let ctx = Device::open(sim.bus(), config(&sim)).unwrap();
        assert_eq!(ctx.pages_lent(), (boot + init) as usize);
        assert_eq!(sim.stats().pages_held, u64::from(boot + init));
        ctx.close().unwrap();
        assert_nothing_left(&sim);
    }

    // SET_HCA_CAP: a 4112-byte input over 9 blocks, accepted only if every byte the
    // driver may not change arrived exactly as the firmware reported it; the device
    // starts with command checksums on and the driver turns them off.
    let sim = Sim::new(SimConfig::deterministic(0x0f00, 1).cap(
        CapType::General,
        cmd_hca_cap::cmdif_checksum,
        1,
    ));
    assert_eq!(
        sim.with_firmware(|fw| fw.caps().gen(cmd_hca_cap::cmdif_checksum)),
        1
    );
    let ctx = Device::open(sim.bus(), config(&sim)).unwrap();
    assert_eq!(
        sim.with_firmware(|fw| fw.caps().gen(cmd_hca_cap::cmdif_checksum)),
        0
    );

    // QUERY_HCA_CAP: a 4112-byte output over 8 blocks, equal to the firmware's image.
    for (op_mod, ty, cur) in [
        (0, CapType::General, false),
        (1, CapType::General, true),
        (8, CapType::Roce, false),
        (9, CapType::Roce, true),
    ] {
        let out = ctx
            .exec_cmd(
                &input(Opcode::QueryHcaCap, op_mod, 16),
                query_hca_cap_out::SIZE,
            )
            .unwrap();
        let got = query_hca_cap_out::capability.bytes(&out).unwrap();
        let image = sim.with_firmware(|fw| fw.caps().image(ty, cur).to_vec());
        assert_eq!(got.len(), image.len());
        assert!(
            got == &image[..],
            "op_mod {op_mod}: 4096 bytes over 8 output blocks"
        );
    }
    ctx.close().unwrap();
    assert_nothing_left(&sim);
}

#[test]
fn port_changes_arrive_as_async_events() {
    let sim = sim();
    let ctx = Device::open(sim.bus(), config(&sim)).unwrap();
    assert_eq!(ctx.next_async_event(), None);
    assert!(sim.set_link(1, false));
    ctx.process_events().unwrap();
    assert_eq!(
        ctx.next_async_event(),
        Some(ferroverbs::AsyncEvent::PortChange {
            port: 1,
            sub_type: 1
        })
    );
    assert_eq!(ctx.query_port(1).unwrap().state, PortState::Down);
    assert!(sim.set_link(1, true));
    // Events are also collected while the driver waits for a command.
    ctx.query_device().unwrap();
    assert_eq!(
        ctx.next_async_event(),
        Some(ferroverbs::AsyncEvent::PortChange {
            port: 1,
            sub_type: 4
        })
    );
    assert_eq!(ctx.next_async_event(), None);
    assert_eq!(ctx.query_port(1).unwrap().state, PortState::Active);
    ctx.close().unwrap();
    assert_nothing_left(&sim);
}

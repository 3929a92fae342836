//! Every command of the control plane, played by the test: the success path with the
//! values the simulated ConnectX reports.

mod common;
use common::*;

use ferroverbs_hw::control::caps::{
    cmd_hca_cap as g, in_command as cap_at, roce_cap as r, set_hca_cap_in,
};
use ferroverbs_hw::control::cmd::Opcode;
use ferroverbs_hw::control::cq::{self as cqm, cqc, destroy_cq_in, query_cq_in, query_cq_out};
use ferroverbs_hw::control::eq::{destroy_eq_in, eqc, query_eq_in, query_eq_out};
use ferroverbs_hw::control::hca::{query_issi_out, teardown_hca_out};
use ferroverbs_hw::control::mkey::{destroy_mkey_in, mkc, query_mkey_in, query_mkey_out};
use ferroverbs_hw::control::pages::{manage_pages_in, query_pages_out};
use ferroverbs_hw::control::qp::{self as qpm, ads, destroy_qp_in, qpc, QpTransition, QpcState};
use ferroverbs_hw::control::reg::{
    access_register_input, paos_reg, register_data, register_host_endianness, AccessRegisterOpMod,
};
use ferroverbs_hw::control::roce::{query_roce_address_in, query_roce_address_out, RoceAddr};
use ferroverbs_hw::control::uar_pd_td::{
    alloc_transport_domain_out, dealloc_pd_in, dealloc_transport_domain_in, dealloc_uar_in,
};
use ferroverbs_hw::control::vport::{
    mac_address_layout, modify_nic_vport_context_in, modify_nic_vport_field_select,
    nic_vport_context, query_nic_vport_context_out, query_vport_state_out,
};
use ferroverbs_hw::datapath::eqe::EventType;
use ferroverbs_sim::firmware::HcaState;
use ferroverbs_sim::SimConfig;

#[test]
fn capabilities_are_connectx5_like() {
    let mut h = Host::deterministic();
    h.simple(Opcode::EnableHca, 0, |_| {});
    let cur = h.caps(true);
    let max = h.caps(false);
    let c = |f| get(&cur, f);
    assert_eq!(c(g::log_max_qp), 18);
    assert_eq!(c(g::log_max_qp_sz), 15);
    assert_eq!(c(g::log_max_cq_sz), 22);
    assert_eq!(c(g::max_wqe_sz_sq), 1024);
    assert_eq!(c(g::max_wqe_sz_rq), 512);
    assert_eq!(c(g::log_max_mkey), 24);
    assert_eq!(c(g::log_max_pd), 24);
    assert_eq!(c(g::port_type), 1);
    assert_eq!(c(g::num_ports), 1);
    for f in [
        g::roce,
        g::rc,
        g::uc,
        g::ud,
        g::atomic,
        g::umem_uid_0,
        g::bf,
    ] {
        assert_eq!(c(f), 1, "{f:?}");
    }
    assert_eq!(c(g::cqe_version), 1);
    assert_eq!(c(g::log_bf_reg_size), 9);
    assert_eq!(c(g::log_max_msg), 30);
    assert_eq!(c(g::log_max_ra_req_qp), 4);
    assert_eq!(c(g::log_max_ra_res_qp), 4);
    assert_eq!(c(g::log_uar_page_sz), 0);
    assert_eq!(c(g::fast_teardown), 0);
    assert_eq!(c(g::mkey_by_name), 0);
    assert_eq!(get(&max, g::mkey_by_name), 1);
    // RoCE page.
    let o = h.simple(Opcode::QueryHcaCap, (4 << 1) | 1, |_| {});
    let roce = &o[0x10..];
    assert_eq!(get(roce, r::roce_address_table_size), 256);
    assert_eq!(get(roce, r::r_roce_dest_udp_port), 4791);
    assert_eq!(get(roce, r::roce_version), 0x5);
    assert_eq!(get(roce, r::sw_r_roce_src_udp_port), 0);
    // Atomic page: the standard 8-byte atomics, big-endian responses until software
    // selects host endianness (which MAX allows).
    use ferroverbs_hw::control::caps::atomic_caps as a;
    let o = h.simple(Opcode::QueryHcaCap, (3 << 1) | 1, |_| {});
    let atomic = &o[0x10..];
    assert_eq!(get(atomic, a::atomic_operations), 0x3);
    assert_eq!(get(atomic, a::atomic_size_qp), 0x8);
    assert_eq!(get(atomic, a::supported_atomic_req_8B_endianness_mode_1), 1);
    assert_eq!(get(atomic, a::atomic_req_8B_endianness_mode), 0);
    let o = h.simple(Opcode::QueryHcaCap, 3 << 1, |_| {});
    assert_eq!(get(&o[0x10..], a::atomic_req_8B_endianness_mode), 1);
}

#[test]
fn settable_capabilities_are_honoured() {
    let mut h = Host::deterministic();
    h.simple(Opcode::EnableHca, 0, |_| {});
    let mut i = input(Opcode::SetHcaCap, 0);
    let at = set_hca_cap_in::capability.byte_offset();
    let cur = h.caps(true);
    i[at..at + cur.len()].copy_from_slice(&cur);
    set(&mut i, cap_at(g::cmdif_checksum), 0);
    set(&mut i, cap_at(g::mkey_by_name), 1);
    set(&mut i, cap_at(g::log_max_qp), 10);
    set(&mut i, cap_at(g::drain_sigerr), 1);
    h.ok(&i, outlen(Opcode::SetHcaCap));
    let cur = h.caps(true);
    assert_eq!(get(&cur, g::mkey_by_name), 1);
    assert_eq!(get(&cur, g::log_max_qp), 10);
    assert_eq!(get(&cur, g::cmdif_checksum), 0);
    assert_eq!(get(&cur, g::drain_sigerr), 1);
    assert_eq!(get(&h.caps(false), g::log_max_qp), 18, "MAX unchanged");
    // RoCE: sw_r_roce_src_udp_port.
    let o = h.simple(Opcode::QueryHcaCap, (4 << 1) | 1, |_| {});
    let mut i = input(Opcode::SetHcaCap, 4 << 1);
    i[at..].copy_from_slice(&o[16..]);
    set(&mut i, cap_at(r::sw_r_roce_src_udp_port), 1);
    h.ok(&i, outlen(Opcode::SetHcaCap));
    let o = h.simple(Opcode::QueryHcaCap, (4 << 1) | 1, |_| {});
    assert_eq!(get(&o[16..], r::sw_r_roce_src_udp_port), 1);
}

#[test]
fn issi_pages_endianness_and_init() {
    let mut h = Host::deterministic();
    assert_eq!(h.sim.hca_state(), HcaState::Disabled);
    h.simple(Opcode::EnableHca, 0, |_| {});
    let o = h.simple(Opcode::QueryIssi, 0, |_| {});
    assert_eq!(get(&o, query_issi_out::current_issi), 0);
    assert_eq!(get(&o, query_issi_out::supported_issi_dw0), 0b11);
    h.simple(Opcode::SetIssi, 0, |i| {
        set(i, ferroverbs_hw::control::hca::set_issi_in::current_issi, 1)
    });
    let o = h.simple(Opcode::QueryIssi, 0, |_| {});
    assert_eq!(get(&o, query_issi_out::current_issi), 1);
    let boot = h.query_pages(1);
    let init = h.query_pages(2);
    assert_eq!(
        (boot, init),
        (16, 64),
        "init counts the boot pages not yet given"
    );
    assert_eq!(h.query_pages(3), 0);
    h.give(16);
    assert_eq!(h.query_pages(1), 0);
    assert_eq!(h.query_pages(2), 48);
    // HOST_ENDIANNESS write then read back.
    h.ok(&ferroverbs_hw::control::reg::host_endianness_input(), 32);
    let o = h.ok(
        &access_register_input(AccessRegisterOpMod::Read, 0x7004, 0, &[0; 16]),
        32,
    );
    assert_eq!(
        get(register_data(&o).unwrap(), register_host_endianness::he),
        0
    );
    h.give(48);
    h.simple(Opcode::InitHca, 0, |_| {});
    assert_eq!(h.sim.hca_state(), HcaState::Initialized);
    assert_eq!(h.sim.stats().pages_held, 64);
    // Regular pages: the firmware asks for more at run time.
    h.sim.request_pages(4);
    assert_eq!(h.query_pages(3), 4);
    h.give(4);
    assert_eq!(h.query_pages(3), 0);
    h.sim.request_pages(-3);
    assert_eq!(h.query_pages(3), -3);
    assert_eq!(
        h.take(10).len(),
        3,
        "only the surplus comes back while running"
    );
    // CANT_GIVE clears an outstanding request.
    h.sim.request_pages(7);
    h.simple(Opcode::ManagePages, 0, |_| {});
    assert_eq!(h.query_pages(3), 0);
    let o = h.simple(Opcode::TeardownHca, 0, |_| {});
    assert_eq!(get(&o, teardown_hca_out::state), 0);
    assert_eq!(h.sim.hca_state(), HcaState::Enabled);
    assert_eq!(h.take(1000).len(), 65);
    h.simple(Opcode::DisableHca, 0, |_| {});
    assert_eq!(h.sim.hca_state(), HcaState::Disabled);
    let s = h.close().stats();
    assert_eq!((s.pages_held, s.pages_abandoned, s.mappings), (0, 0, 0));
}

#[test]
fn take_returns_exactly_the_given_pages() {
    let mut h = Host::deterministic();
    h.simple(Opcode::EnableHca, 0, |_| {});
    let m = h.give(100).unwrap();
    let base = h.iova(m);
    let mut back = h.take(100);
    back.sort_unstable();
    let want: Vec<u64> = (0..100).map(|i| base + i * 4096).collect();
    assert_eq!(back, want);
    // TAKE of nothing held returns nothing.
    assert!(h.take(5).is_empty());
}

#[test]
fn disable_without_take_abandons_pages_and_counts_them() {
    let mut h = Host::deterministic();
    h.init();
    h.simple(Opcode::TeardownHca, 0, |_| {});
    h.simple(Opcode::DisableHca, 0, |_| {});
    let s = h.sim.stats();
    assert_eq!(s.pages_held, 0);
    assert_eq!(s.pages_abandoned, 64);
    // The function starts afresh.
    h.init();
}

#[test]
fn uar_pd_transport_domain() {
    let mut h = Host::deterministic();
    h.init();
    let a = h.alloc_uar();
    let b = h.alloc_uar();
    assert_ne!(a, b);
    assert!(a >= 8, "UARs start above the init segment");
    let pd = h.alloc_pd();
    let o = h.simple(Opcode::AllocTransportDomain, 0, |_| {});
    let td = get(&o, alloc_transport_domain_out::transport_domain);
    assert_eq!(h.sim.stats().objects.total(), 4);
    h.simple(Opcode::DeallocTransportDomain, 0, |i| {
        set(i, dealloc_transport_domain_in::transport_domain, td)
    });
    h.simple(Opcode::DeallocPd, 0, |i| {
        set(i, dealloc_pd_in::pd, pd.into())
    });
    for u in [a, b] {
        h.simple(Opcode::DeallocUar, 0, |i| {
            set(i, dealloc_uar_in::uar, u.into())
        });
    }
    assert_eq!(h.sim.stats().objects.total(), 0);
    h.simple(Opcode::Nop, 0, |_| {});
}

#[test]
fn eq_cq_mkey_create_query_destroy() {
    let mut h = Host::deterministic();
    let up = h.bring_up();
    let o = h.simple(Opcode::QueryEq, 0, |i| {
        set(i, query_eq_in::eq_number, up.eqn.into())
    });
    let e = |f: ferroverbs_hw::Field| get(&o, f.at(query_eq_out::eq_context_entry.bit));
    assert_eq!(e(eqc::log_eq_size), 6);
    assert_eq!(e(eqc::uar_page), u64::from(up.uar));
    assert_eq!(e(eqc::intr), 0);
    // CREATE_EQ's own completion went to the new EQ, so arming it at ci 0 fired at
    // once.
    assert_eq!(e(eqc::st), 0xa, "fired");
    assert_eq!(e(eqc::producer_counter), 1);
    assert_eq!(h.sim.irq_count(0), 1);
    assert_eq!(get(&o, query_eq_out::event_bitmask), 0xc00);
    // Consume up to the producer (the QUERY_EQ completion included) and re-arm.
    h.eq_doorbell(up.uar, up.eqn, 2, true);
    let o = h.simple(Opcode::QueryEq, 0, |i| {
        set(i, query_eq_in::eq_number, up.eqn.into())
    });
    let e = |f: ferroverbs_hw::Field| get(&o, f.at(query_eq_out::eq_context_entry.bit));
    assert_eq!(e(eqc::st), 0x9, "armed");
    assert_eq!(e(eqc::consumer_counter), 2);

    let cqn = h.create_cq(up.uar, up.eqn);
    let o = h.simple(Opcode::QueryCq, 0, |i| set(i, query_cq_in::cqn, cqn.into()));
    let c = |f: ferroverbs_hw::Field| get(&o, f.at(query_cq_out::cq_context.bit));
    assert_eq!(c(cqc::log_cq_size), 6);
    assert_eq!(c(cqc::c_eqn_or_apu_element), u64::from(up.eqn));
    assert_eq!(c(cqc::uar_page), u64::from(up.uar));
    assert_eq!(get(&o, cqm::in_command(cqc::dbr_addr)) & 0xfff, 0);

    let pd = h.alloc_pd();
    let key = h.create_mkey(pd, 3);
    assert_eq!(key & 0xff, 0x42);
    let o = h.simple(Opcode::QueryMkey, 0, |i| {
        set(i, query_mkey_in::mkey_index, (key >> 8).into())
    });
    let m = |f: ferroverbs_hw::Field| get(&o, f.at(query_mkey_out::memory_key_mkey_entry.bit));
    assert_eq!(m(mkc::pd), u64::from(pd));
    assert_eq!(m(mkc::len), 3 * 4096);
    assert_eq!(m(mkc::start_addr), 0x7000_0000);
    assert_eq!(m(mkc::mkey_7_0), 0x42);
    h.with_fw_check(|fw| assert_eq!(fw.mkey(key >> 8).unwrap().mtt.len(), 3));

    h.simple(Opcode::DestroyMkey, 0, |i| {
        set(i, destroy_mkey_in::mkey_index, (key >> 8).into())
    });
    h.simple(Opcode::DeallocPd, 0, |i| {
        set(i, dealloc_pd_in::pd, pd.into())
    });
    h.simple(Opcode::DestroyCq, 0, |i| {
        set(i, destroy_cq_in::cqn, cqn.into())
    });
    h.tear_down(up);
    assert_eq!(h.sim.stats().objects.total(), 0);
}

trait FwCheck {
    fn with_fw_check(&self, f: impl FnOnce(&ferroverbs_sim::firmware::Firmware));
}

impl FwCheck for Host {
    fn with_fw_check(&self, f: impl FnOnce(&ferroverbs_sim::firmware::Firmware)) {
        self.sim.with_firmware(f)
    }
}

fn rc_setup(h: &mut Host) -> (Up, u32, u32, u32) {
    let up = h.bring_up();
    let pd = h.alloc_pd();
    let cqn = h.create_cq(up.uar, up.eqn);
    let qpn = h.create_qp(QpSpec {
        st: 0,
        pd,
        uar: up.uar,
        cqn,
        log_sq: 6,
        log_rq: 6,
        rq_stride: 2,
    });
    (up, pd, cqn, qpn)
}

#[test]
fn rc_qp_walks_every_transition() {
    let mut h = Host::deterministic();
    let (up, pd, cqn, qpn) = rc_setup(&mut h);
    assert!(qpn >= 0x100);
    let state = |h: &mut Host| get(&h.query_qp(qpn), qpc::state);
    assert_eq!(state(&mut h), 0);
    let q = h.query_qp(qpn);
    assert_eq!(get(&q, qpc::pd), u64::from(pd));
    assert_eq!(get(&q, qpc::cqn_snd), u64::from(cqn));
    assert_eq!(get(&q, qpc::user_index), 0x1234);
    h.roce_enable();
    h.set_gid(0, 1, &gid_v4([10, 0, 0, 1], [2, 0, 0, 0, 0, 1]));
    for (t, s) in [
        (QpTransition::Rst2Init, 1),
        (QpTransition::Init2Init, 1),
        (QpTransition::Init2Rtr, 2),
        (QpTransition::Rtr2Rts, 3),
        (QpTransition::Rts2Rts, 3),
        (QpTransition::ToErr, 6),
        (QpTransition::ToRst, 0),
        (QpTransition::Rst2Init, 1),
        (QpTransition::ToErr, 6),
    ] {
        assert_eq!(h.transition(t, qpn, 0), (0, 0), "{t:?}");
        assert_eq!(state(&mut h), s, "after {t:?}");
    }
    assert_eq!(
        h.sim.with_firmware(|fw| fw.qp(qpn).unwrap().state),
        QpcState::Err
    );
    // What INIT2RTR and RTR2RTS carried is in the context.
    h.transition(QpTransition::ToRst, qpn, 0);
    for t in [
        QpTransition::Rst2Init,
        QpTransition::Init2Rtr,
        QpTransition::Rtr2Rts,
    ] {
        assert_eq!(h.transition(t, qpn, 0), (0, 0));
    }
    let q = h.query_qp(qpn);
    assert_eq!(get(&q, qpc::remote_qpn), 0x4711);
    assert_eq!(get(&q, qpc::mtu), 5);
    assert_eq!(get(&q, qpc::next_rcv_psn), 0x1000);
    assert_eq!(get(&q, qpc::next_send_psn), 0x2000);
    assert_eq!(get(&q, qpc::retry_count), 7);
    let path = |f: ferroverbs_hw::Field| get(&q, f.at(qpc::primary_address_path.bit));
    assert_eq!(path(ads::udp_sport), 0xdcba);
    assert_eq!(path(ads::ack_timeout), 14);
    // Optional parameters: RTS2RTS with RNR_TIMEOUT changes min_rnr_nak.
    let mut i = h.transition_input(QpTransition::Rts2Rts, qpn, 1 << 6);
    set(&mut i, qpm::in_command(qpc::min_rnr_nak), 3);
    h.ok(&i, 16);
    assert_eq!(get(&h.query_qp(qpn), qpc::min_rnr_nak), 3);
    h.simple(Opcode::DestroyQp, 0, |i| {
        set(i, destroy_qp_in::qpn, qpn.into())
    });
    h.simple(Opcode::DestroyCq, 0, |i| {
        set(i, destroy_cq_in::cqn, cqn.into())
    });
    h.simple(Opcode::DeallocPd, 0, |i| {
        set(i, dealloc_pd_in::pd, pd.into())
    });
    h.tear_down(up);
}

#[test]
fn ud_and_uc_qps() {
    let mut h = Host::deterministic();
    let up = h.bring_up();
    h.roce_enable();
    h.set_gid(0, 1, &gid_v4([10, 0, 0, 1], [2, 0, 0, 0, 0, 1]));
    let pd = h.alloc_pd();
    let cqn = h.create_cq(up.uar, up.eqn);
    let ud = h.create_qp(QpSpec {
        st: 2,
        pd,
        uar: up.uar,
        cqn,
        log_sq: 4,
        log_rq: 4,
        rq_stride: 1,
    });
    let mut i = h.transition_input(QpTransition::Rst2Init, ud, 0);
    set(&mut i, qpm::in_command(qpc::q_key), 0x1111_1111);
    h.ok(&i, 16);
    // UD needs no path at INIT2RTR.
    h.ok(
        &ferroverbs_hw::control::qp::transition_input(QpTransition::Init2Rtr, ud, 0),
        16,
    );
    h.ok(
        &ferroverbs_hw::control::qp::transition_input(QpTransition::Rtr2Rts, ud, 0),
        16,
    );
    assert_eq!(get(&h.query_qp(ud), qpc::q_key), 0x1111_1111);
    // Q_KEY as an optional parameter of RTS2RTS.
    let mut i = ferroverbs_hw::control::qp::transition_input(QpTransition::Rts2Rts, ud, 1 << 5);
    set(&mut i, qpm::in_command(qpc::q_key), 0x2222);
    h.ok(&i, 16);
    assert_eq!(get(&h.query_qp(ud), qpc::q_key), 0x2222);
    // SQERR2RTS exists for UD, but the QP is not in SQER.
    let (s, _) = h.transition(QpTransition::Sqerr2Rts, ud, 0);
    assert_eq!(s, 0x10);
    let uc = h.create_qp(QpSpec {
        st: 1,
        pd,
        uar: up.uar,
        cqn,
        log_sq: 4,
        log_rq: 4,
        rq_stride: 1,
    });
    for t in [
        QpTransition::Rst2Init,
        QpTransition::Init2Rtr,
        QpTransition::Rtr2Rts,
    ] {
        assert_eq!(h.transition(t, uc, 0), (0, 0), "{t:?}");
    }
    // A receive-only QP with no SQ and a QP without an RQ.
    let mut i = h.qp_input(QpSpec {
        st: 0,
        pd,
        uar: up.uar,
        cqn,
        log_sq: 0,
        log_rq: 4,
        rq_stride: 1,
    });
    set(&mut i, qpm::in_command(qpc::no_sq), 1);
    set(&mut i, qpm::in_command(qpc::cqn_snd), 0);
    h.ok(&i, outlen(Opcode::CreateQp));
    let mut i = h.qp_input(QpSpec {
        st: 0,
        pd,
        uar: up.uar,
        cqn,
        log_sq: 4,
        log_rq: 0,
        rq_stride: 0,
    });
    set(&mut i, qpm::in_command(qpc::rq_type), 3);
    set(&mut i, qpm::in_command(qpc::cqn_rcv), 0);
    h.ok(&i, outlen(Opcode::CreateQp));
    assert_eq!(h.sim.stats().objects.qps, 4);
}

#[test]
fn vport_context_state_and_gid_table() {
    let cfg = SimConfig::deterministic(99, 1);
    let mac = cfg.fw.macs[0];
    let mut h = Host::new(cfg);
    h.init();
    let q = |h: &mut Host| h.simple(Opcode::QueryNicVportContext, 0, |_| {});
    let at = |f: ferroverbs_hw::Field| f.at(query_nic_vport_context_out::nic_vport_context.bit);
    let o = q(&mut h);
    assert_eq!(get(&o, at(nic_vport_context::roce_en)), 0);
    assert_eq!(get(&o, at(nic_vport_context::mtu)), 1500);
    let addr = at(nic_vport_context::permanent_address);
    let got = ferroverbs_hw::control::vport::join_mac(
        get(&o, mac_address_layout::mac_addr_47_32.at(addr.bit)) as u16,
        get(&o, mac_address_layout::mac_addr_31_0.at(addr.bit)) as u32,
    );
    assert_eq!(got, mac);
    assert_ne!(get(&o, at(nic_vport_context::node_guid)), 0);
    h.roce_enable();
    h.simple(Opcode::ModifyNicVportContext, 0, |i| {
        set(
            i,
            modify_nic_vport_field_select::mtu.at(modify_nic_vport_context_in::field_select.bit),
            1,
        );
        set(
            i,
            nic_vport_context::mtu.at(modify_nic_vport_context_in::nic_vport_context.bit),
            4200,
        );
    });
    let o = q(&mut h);
    assert_eq!(get(&o, at(nic_vport_context::roce_en)), 1);
    assert_eq!(get(&o, at(nic_vport_context::mtu)), 4200);
    let o = h.simple(Opcode::QueryVportState, 0, |_| {});
    assert_eq!(get(&o, query_vport_state_out::state), 1);
    assert_eq!(get(&o, query_vport_state_out::admin_state), 1);
    // GID table round trip, then delete.
    let e = gid_v4([192, 168, 7, 9], [2, 0xaa, 0xbb, 0xcc, 0xdd, 0xee]);
    h.set_gid(3, 1, &e);
    let read = |h: &mut Host, idx: u64| {
        let o = h.simple(Opcode::QueryRoceAddress, 0, |i| {
            set(i, query_roce_address_in::roce_address_index, idx)
        });
        RoceAddr::read(&o, query_roce_address_out::roce_address.bit).unwrap()
    };
    assert_eq!(read(&mut h, 3), e);
    let mut v6 = e;
    v6.gid = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7];
    v6.l3_type = 1;
    v6.vlan = Some(100);
    h.set_gid(4, 1, &v6);
    assert_eq!(read(&mut h, 4), v6);
    h.set_gid(
        3,
        1,
        &RoceAddr {
            gid: [0; 16],
            mac: [0; 6],
            ..e
        },
    );
    assert_eq!(read(&mut h, 3).gid, [0; 16]);
    assert!(h.sim.with_firmware(|fw| fw.ports()[0].gid(3).is_none()));
    // PAOS: bring the port down and up.
    let paos = |h: &mut Host, write: bool, status: u8| {
        let mut reg = [0u8; 16];
        set(&mut reg, paos_reg::local_port, 1);
        set(&mut reg, paos_reg::admin_status, status.into());
        set(&mut reg, paos_reg::ase, 1);
        let op = if write {
            AccessRegisterOpMod::Write
        } else {
            AccessRegisterOpMod::Read
        };
        let o = h.ok(&access_register_input(op, 0x5006, 0, &reg), 32);
        register_data(&o).unwrap()[..16].to_vec()
    };
    let r = paos(&mut h, true, 2);
    assert_eq!(
        (
            get(&r, paos_reg::admin_status),
            get(&r, paos_reg::oper_status)
        ),
        (2, 2)
    );
    let o = h.simple(Opcode::QueryVportState, 0, |_| {});
    assert_eq!(get(&o, query_vport_state_out::state), 0);
    let r = paos(&mut h, true, 1);
    assert_eq!(get(&r, paos_reg::oper_status), 1);
    let r = paos(&mut h, false, 0);
    assert_eq!(get(&r, paos_reg::admin_status), 1);
}

#[test]
fn two_port_device_addresses_gid_tables_by_port() {
    let mut h = Host::new(SimConfig::deterministic(5, 2));
    h.init();
    assert_eq!(get(&h.caps(true), g::num_ports), 2);
    let e = gid_v4([10, 0, 0, 2], [2, 0, 0, 0, 0, 2]);
    h.set_gid(0, 2, &e);
    assert!(h
        .sim
        .with_firmware(|fw| fw.ports()[1].gid(0).is_some() && fw.ports()[0].gid(0).is_none()));
}

#[test]
fn force_teardown_destroys_everything() {
    let mut h = Host::deterministic();
    let (_up, _pd, _cqn, _qpn) = rc_setup(&mut h);
    assert_eq!(h.sim.stats().objects.total(), 5);
    h.simple(Opcode::TeardownHca, 0, |i| {
        set(i, ferroverbs_hw::control::hca::teardown_hca_in::profile, 1)
    });
    assert_eq!(h.sim.stats().objects.total(), 0);
    let n = h.sim.stats().pages_held as usize;
    assert_eq!(h.take(n).len(), n);
    h.simple(Opcode::DisableHca, 0, |_| {});
    let _ = (
        destroy_eq_in::eq_number,
        manage_pages_in::input_num_entries,
        query_pages_out::num_pages,
    );
    let _ = EventType::Cmd;
}

#[test]
fn the_uar_page_size_sets_the_uar_geometry() {
    use ferroverbs_hw::datapath::uar::{eq_doorbell_value, EQ_DOORBELL_ARM};
    use ferroverbs_hw::Bus;
    // 64 KiB host pages with 4 KiB UARs (`uar_4k`), as Linux sets them there:
    // ALLOC_UAR hands out sixteen UARs from an index aligned to sixteen, and an
    // object may use any of them.
    let mut h = Host::deterministic();
    h.init_with(|i| {
        set(i, cap_at(g::log_uar_page_sz), 4);
        set(i, cap_at(g::uar_4k), 1);
    });
    let (a, b) = (h.alloc_uar(), h.alloc_uar());
    assert_eq!((a % 16, b % 16), (0, 0), "{a} {b}");
    assert_ne!(a, b);
    let (eqn, _) = h.create_eq(6, a + 3, 0, &[EventType::Cmd]);
    let stray = h.sim.stats().stray_doorbells;
    h.eq_doorbell(a + 3, eqn, 0, true);
    assert_eq!(h.sim.stats().stray_doorbells, stray);
    // Through another UAR of the same page: not this EQ's.
    h.eq_doorbell(a + 4, eqn, 0, true);
    assert_eq!(h.sim.stats().stray_doorbells, stray + 1);
    // Only the index ALLOC_UAR returned names the allocation.
    let mut d = input(Opcode::DeallocUar, 0);
    set(&mut d, dealloc_uar_in::uar, u64::from(b + 1));
    h.fails(
        &d,
        outlen(Opcode::DeallocUar),
        ferroverbs_sim::firmware::Syndrome::UarUnknown,
    );
    set(&mut d, dealloc_uar_in::uar, u64::from(b));
    h.ok(&d, outlen(Opcode::DeallocUar));

    // 8 KiB UAR pages without `uar_4k`: UAR n at n << 13, registers in the first 4 KiB.
    let mut h = Host::deterministic();
    h.init_with(|i| set(i, cap_at(g::log_uar_page_sz), 1));
    let u = h.alloc_uar();
    let (eqn, _) = h.create_eq(6, u, 0, &[EventType::Cmd]);
    let before = h.sim.stats();
    let page = (u as usize) << 13;
    h.bus
        .write32(page + EQ_DOORBELL_ARM, eq_doorbell_value(eqn as u8, 0));
    let after = h.sim.stats();
    assert_eq!(
        (after.stray_doorbells, after.ignored_bar_writes),
        (before.stray_doorbells, before.ignored_bar_writes)
    );
    // The second 4 KiB of the page holds no register.
    h.bus.write32(
        page + 4096 + EQ_DOORBELL_ARM,
        eq_doorbell_value(eqn as u8, 0),
    );
    assert_eq!(
        h.sim.stats().ignored_bar_writes,
        after.ignored_bar_writes + 1
    );

    // Above 64 KiB pages is refused: `sim/tests/errors.rs`.
}

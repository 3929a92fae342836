//! Every command of the control plane through the driver's command interface
//! (`Context::exec_cmd`), against the simulated firmware: each succeeds, and each
//! error path comes back as a typed `CmdError` with the firmware's status and
//! syndrome. (The bring-up commands are covered by `bringup_trace.rs` and
//! `bringup_faults.rs`; here they are issued again where the firmware allows it.)

mod bringup_support;
use bringup_support::*;

use ferroverbs::dma::DmaBuf;
use ferroverbs::{CmdStatus, Context, Device, Error, Opcode as DrvOpcode};
use ferroverbs_hw::control::caps::{cmd_hca_cap, query_hca_cap_out, set_hca_cap_in};
use ferroverbs_hw::control::cmd::Opcode as Op;
use ferroverbs_hw::control::cq::*;
use ferroverbs_hw::control::eq::*;
use ferroverbs_hw::control::mkey::*;
use ferroverbs_hw::control::pages::*;
use ferroverbs_hw::control::qp::*;
use ferroverbs_hw::control::reg::*;
use ferroverbs_hw::control::roce::*;
use ferroverbs_hw::control::uar_pd_td::*;
use ferroverbs_hw::control::vport::*;
use ferroverbs_sim::firmware::Syndrome;
use ferroverbs_sim::SimBus;

type Ctx = Context<SimBus>;

/// Runs a command that must succeed; returns its output.
fn ok(ctx: &Ctx, input: &[u8], out_len: usize) -> Vec<u8> {
    match ctx.exec_cmd(input, out_len) {
        Ok(o) => o,
        Err(e) => panic!("{e}"),
    }
}

/// Runs a command that must fail with `s`: the driver's error names the opcode, the
/// PRM status the firmware bound to `s`, and `s`'s syndrome.
#[track_caller]
fn fails(ctx: &Ctx, input: &[u8], out_len: usize, s: Syndrome) {
    match ctx.exec_cmd(input, out_len) {
        Err(Error::Cmd(c)) => {
            assert_eq!(
                c.opcode,
                DrvOpcode(u16::from_be_bytes([input[0], input[1]]))
            );
            assert_eq!(c.status, CmdStatus::from_raw(s.status().value()), "{s:?}");
            assert_eq!(c.syndrome, s.value(), "{s:?}: {c}");
        }
        other => panic!("expected {s:?}, got {other:?}"),
    }
}

fn with_field(op: Op, len: usize, f: ferroverbs_hw::Field, v: u64) -> Vec<u8> {
    let mut b = input(op, 0, len);
    f.set(&mut b, v);
    b
}

struct Queue {
    buf: DmaBuf<SimBus>,
    dbr: DmaBuf<SimBus>,
}

fn alloc(ctx: &Ctx, op: Op, out: ferroverbs_hw::Field) -> u32 {
    out.get(&ok(ctx, &input(op, 0, 16), 16)) as u32
}

fn create_eq(ctx: &Ctx, uar: u32) -> (u32, DmaBuf<SimBus>) {
    let buf = dma(ctx, 4096); // 64 EQEs
    buf.fill(0, 4096, 0);
    for i in 0..64 {
        buf.write_u8(i * 64 + 63, 1);
    }
    let mut b = input(Op::CreateEq, 0, create_eq_in::SIZE + 8);
    let c = Some(create_eq_in::eq_context_entry);
    set(&mut b, c, eqc::log_eq_size, 6);
    set(&mut b, c, eqc::uar_page, u64::from(uar));
    set(&mut b, c, eqc::intr, 1);
    let pas = create_eq_in::pas.byte_offset();
    b[pas..pas + 8].copy_from_slice(&buf.iova().to_be_bytes());
    let eqn = create_eq_out::eq_number.get(&ok(ctx, &b, create_eq_out::SIZE)) as u32;
    (eqn, buf)
}

fn create_cq_input(uar: u32, eqn: u32, q: &Queue) -> Vec<u8> {
    let mut b = input(Op::CreateCq, 0, create_cq_in::SIZE + 8);
    let c = Some(create_cq_in::cq_context);
    set(&mut b, c, cqc::log_cq_size, 6);
    set(&mut b, c, cqc::uar_page, u64::from(uar));
    set(&mut b, c, cqc::c_eqn_or_apu_element, u64::from(eqn));
    set(&mut b, c, cqc::dbr_addr, q.dbr.iova());
    let pas = create_cq_in::pas.byte_offset();
    b[pas..pas + 8].copy_from_slice(&q.buf.iova().to_be_bytes());
    b
}

fn create_qp_input(pd: u32, uar: u32, cqn: u32, q: &Queue) -> Vec<u8> {
    let mut b = input(Op::CreateQp, 0, create_qp_in::SIZE + 8);
    let c = Some(create_qp_in::qpc);
    set(&mut b, c, qpc::st, 0); // RC
    set(&mut b, c, qpc::pm_state, 3);
    set(&mut b, c, qpc::pd, u64::from(pd));
    set(&mut b, c, qpc::uar_page, u64::from(uar));
    set(&mut b, c, qpc::log_sq_size, 4);
    set(&mut b, c, qpc::log_rq_size, 4);
    set(&mut b, c, qpc::log_rq_stride, 2);
    set(&mut b, c, qpc::cqn_snd, u64::from(cqn));
    set(&mut b, c, qpc::cqn_rcv, u64::from(cqn));
    set(&mut b, c, qpc::dbr_addr, q.dbr.iova());
    let pas = create_qp_in::pas.byte_offset();
    b[pas..pas + 8].copy_from_slice(&q.buf.iova().to_be_bytes());
    b
}

fn primary(f: ferroverbs_hw::Field) -> ferroverbs_hw::Field {
    f.at(qpc::primary_address_path.bit)
}

fn modify(
    op: Op,
    qpn: u32,
    fill: impl FnOnce(&mut Vec<u8>, Option<ferroverbs_hw::Field>),
) -> Vec<u8> {
    let mut b = input(op, 0, rst2init_qp_in::SIZE);
    rst2init_qp_in::qpn.set(&mut b, u64::from(qpn));
    fill(&mut b, Some(rst2init_qp_in::qpc));
    b
}

fn qp_state(ctx: &Ctx, qpn: u32) -> u64 {
    let out = ok(
        ctx,
        &with_field(Op::QueryQp, 16, query_qp_in::qpn, qpn.into()),
        query_qp_out::SIZE + 8,
    );
    qpc::state.at(query_qp_out::qpc.bit).get(&out)
}

#[test]
fn every_resource_command_succeeds_and_every_error_is_typed() {
    let sim = sim();
    let ctx = Device::open(sim.bus(), config(&sim)).unwrap();
    let caps_before = sim.stats().objects;

    // --- UAR, PD, transport domain -------------------------------------------
    let uar = alloc(&ctx, Op::AllocUar, alloc_uar_out::uar);
    let pd = alloc(&ctx, Op::AllocPd, alloc_pd_out::pd);
    let td = alloc(
        &ctx,
        Op::AllocTransportDomain,
        alloc_transport_domain_out::transport_domain,
    );
    assert_eq!(sim.stats().objects.pds, 1);
    assert_eq!(sim.stats().objects.tds, 1);

    // --- EQ --------------------------------------------------------------------
    let (eqn, eq_buf) = create_eq(&ctx, uar);
    let out = ok(
        &ctx,
        &with_field(Op::QueryEq, 16, query_eq_in::eq_number, eqn.into()),
        query_eq_out::SIZE + 8,
    );
    let c = query_eq_out::eq_context_entry.bit;
    assert_eq!(eqc::log_eq_size.at(c).get(&out), 6);
    assert_eq!(eqc::uar_page.at(c).get(&out), u64::from(uar));
    assert_eq!(eqc::intr.at(c).get(&out), 1);

    // --- CQ --------------------------------------------------------------------
    let cq = Queue {
        buf: dma(&ctx, 4096),
        dbr: dma(&ctx, 64),
    };
    let cqn = create_cq_out::cqn.get(&ok(
        &ctx,
        &create_cq_input(uar, eqn, &cq),
        create_cq_out::SIZE,
    )) as u32;
    let out = ok(
        &ctx,
        &with_field(Op::QueryCq, 16, query_cq_in::cqn, cqn.into()),
        query_cq_out::SIZE + 8,
    );
    assert_eq!(
        cqc::log_cq_size.at(query_cq_out::cq_context.bit).get(&out),
        6
    );
    assert_eq!(
        cqc::c_eqn_or_apu_element
            .at(query_cq_out::cq_context.bit)
            .get(&out),
        u64::from(eqn)
    );

    // --- MKEY (physical addressing) --------------------------------------------
    let mut b = input(Op::CreateMkey, 0, create_mkey_in::SIZE);
    let m = Some(create_mkey_in::memory_key_mkey_entry);
    set(&mut b, m, mkc::lr, 1);
    set(&mut b, m, mkc::lw, 1);
    set(&mut b, m, mkc::qpn, 0xff_ffff);
    set(&mut b, m, mkc::pd, u64::from(pd));
    set(&mut b, m, mkc::start_addr, 0x10_0000);
    set(&mut b, m, mkc::len, 0x1000);
    let mkey = create_mkey_out::mkey_index.get(&ok(&ctx, &b, create_mkey_out::SIZE)) as u32;
    let out = ok(
        &ctx,
        &with_field(Op::QueryMkey, 16, query_mkey_in::mkey_index, mkey.into()),
        query_mkey_out::SIZE,
    );
    assert_eq!(
        mkc::pd
            .at(query_mkey_out::memory_key_mkey_entry.bit)
            .get(&out),
        u64::from(pd)
    );
    assert_eq!(
        mkc::len
            .at(query_mkey_out::memory_key_mkey_entry.bit)
            .get(&out),
        0x1000
    );

    // --- QP through RST -> INIT -> RTR -> RTS -> ERR -> RST ----------------------
    let qpq = Queue {
        buf: dma(&ctx, 4096),
        dbr: dma(&ctx, 64),
    };
    let qpn = create_qp_out::qpn.get(&ok(
        &ctx,
        &create_qp_input(pd, uar, cqn, &qpq),
        create_qp_out::SIZE,
    )) as u32;
    assert_eq!(qp_state(&ctx, qpn), u64::from(QpcState::Rst.value()));
    // INIT2RTR from RST: the state machine refuses it.
    fails(
        &ctx,
        &modify(Op::Init2RtrQp, qpn, |_, _| {}),
        16,
        Syndrome::QpWrongState,
    );
    ok(
        &ctx,
        &modify(Op::Rst2InitQp, qpn, |b, c| {
            set(b, c, primary(ads::vhca_port_num), 1);
            set(b, c, qpc::rwe, 1);
            set(b, c, qpc::rre, 1);
        }),
        16,
    );
    assert_eq!(qp_state(&ctx, qpn), u64::from(QpcState::Init.value()));
    // INIT2RTR without the remote QPN: a required field is missing.
    fails(
        &ctx,
        &modify(Op::Init2RtrQp, qpn, |b, c| set(b, c, qpc::mtu, 3)),
        16,
        Syndrome::QpNoRemoteQpn,
    );
    let rtr = |b: &mut Vec<u8>, c: Option<ferroverbs_hw::Field>| {
        set(b, c, qpc::mtu, 3);
        set(b, c, qpc::log_msg_max, 20);
        set(b, c, qpc::remote_qpn, u64::from(qpn));
        set(b, c, qpc::next_rcv_psn, 0x100);
        set(b, c, primary(ads::vhca_port_num), 1);
        set(b, c, primary(ads::src_addr_index), 0);
        set(b, c, primary(ads::hop_limit), 64);
    };
    // A GID index the driver did not program.
    fails(
        &ctx,
        &modify(Op::Init2RtrQp, qpn, |b, c| {
            rtr(b, c);
            set(b, c, primary(ads::src_addr_index), 9);
        }),
        16,
        Syndrome::QpBadGidIndex,
    );
    ok(&ctx, &modify(Op::Init2RtrQp, qpn, rtr), 16);
    assert_eq!(qp_state(&ctx, qpn), u64::from(QpcState::Rtr.value()));
    ok(
        &ctx,
        &modify(Op::Rtr2RtsQp, qpn, |b, c| {
            set(b, c, qpc::next_send_psn, 0x200);
            set(b, c, qpc::retry_count, 7);
            set(b, c, qpc::rnr_retry, 7);
            set(b, c, primary(ads::ack_timeout), 14);
        }),
        16,
    );
    assert_eq!(qp_state(&ctx, qpn), u64::from(QpcState::Rts.value()));
    ok(&ctx, &modify(Op::Rts2RtsQp, qpn, |_, _| {}), 16);
    let mut e = input(Op::Qp2ErrQp, 0, qp_2err_in::SIZE);
    qp_2err_in::qpn.set(&mut e, qpn.into());
    ok(&ctx, &e, 16);
    assert_eq!(qp_state(&ctx, qpn), u64::from(QpcState::Err.value()));
    let mut r = input(Op::Qp2RstQp, 0, qp_2rst_in::SIZE);
    qp_2rst_in::qpn.set(&mut r, qpn.into());
    ok(&ctx, &r, 16);
    assert_eq!(qp_state(&ctx, qpn), u64::from(QpcState::Rst.value()));

    // --- objects in use cannot be destroyed ----------------------------------
    fails(
        &ctx,
        &with_field(Op::DestroyCq, 16, destroy_cq_in::cqn, cqn.into()),
        16,
        Syndrome::CqInUse,
    );
    fails(
        &ctx,
        &with_field(Op::DeallocPd, 16, dealloc_pd_in::pd, pd.into()),
        16,
        Syndrome::PdInUse,
    );
    fails(
        &ctx,
        &with_field(Op::DestroyEq, 16, destroy_eq_in::eq_number, eqn.into()),
        16,
        Syndrome::EqInUse,
    );
    fails(
        &ctx,
        &with_field(Op::DeallocUar, 16, dealloc_uar_in::uar, uar.into()),
        16,
        Syndrome::UarInUse,
    );

    // --- destroy everything, in order -----------------------------------------
    ok(
        &ctx,
        &with_field(Op::DestroyQp, 16, destroy_qp_in::qpn, qpn.into()),
        16,
    );
    ok(
        &ctx,
        &with_field(
            Op::DestroyMkey,
            16,
            destroy_mkey_in::mkey_index,
            mkey.into(),
        ),
        16,
    );
    ok(
        &ctx,
        &with_field(Op::DestroyCq, 16, destroy_cq_in::cqn, cqn.into()),
        16,
    );
    ok(
        &ctx,
        &with_field(Op::DestroyEq, 16, destroy_eq_in::eq_number, eqn.into()),
        16,
    );
    ok(
        &ctx,
        &with_field(
            Op::DeallocTransportDomain,
            16,
            dealloc_transport_domain_in::transport_domain,
            td.into(),
        ),
        16,
    );
    ok(
        &ctx,
        &with_field(Op::DeallocPd, 16, dealloc_pd_in::pd, pd.into()),
        16,
    );
    ok(
        &ctx,
        &with_field(Op::DeallocUar, 16, dealloc_uar_in::uar, uar.into()),
        16,
    );
    assert_eq!(sim.stats().objects, caps_before);

    // --- unknown objects ---------------------------------------------------------
    fails(
        &ctx,
        &with_field(Op::DestroyQp, 16, destroy_qp_in::qpn, qpn.into()),
        16,
        Syndrome::QpUnknown,
    );
    fails(
        &ctx,
        &with_field(Op::QueryCq, 16, query_cq_in::cqn, cqn.into()),
        query_cq_out::SIZE,
        Syndrome::CqUnknown,
    );
    fails(
        &ctx,
        &with_field(Op::QueryEq, 16, query_eq_in::eq_number, eqn.into()),
        query_eq_out::SIZE,
        Syndrome::EqUnknown,
    );
    fails(
        &ctx,
        &with_field(
            Op::DestroyMkey,
            16,
            destroy_mkey_in::mkey_index,
            mkey.into(),
        ),
        16,
        Syndrome::MkeyUnknown,
    );
    fails(
        &ctx,
        &with_field(Op::DeallocPd, 16, dealloc_pd_in::pd, pd.into()),
        16,
        Syndrome::PdUnknown,
    );
    fails(
        &ctx,
        &with_field(
            Op::DeallocTransportDomain,
            16,
            dealloc_transport_domain_in::transport_domain,
            td.into(),
        ),
        16,
        Syndrome::TdUnknown,
    );
    fails(
        &ctx,
        &with_field(Op::DeallocUar, 16, dealloc_uar_in::uar, uar.into()),
        16,
        Syndrome::UarUnknown,
    );

    // --- references to objects that do not exist -------------------------------
    let cq2 = Queue {
        buf: dma(&ctx, 4096),
        dbr: dma(&ctx, 64),
    };
    let uar = alloc(&ctx, Op::AllocUar, alloc_uar_out::uar);
    fails(
        &ctx,
        &create_cq_input(uar, 200, &cq2),
        create_cq_out::SIZE,
        Syndrome::CqUnknownEq,
    );
    fails(
        &ctx,
        &create_qp_input(77, uar, 0, &cq2),
        create_qp_out::SIZE,
        Syndrome::QpUnknownPd,
    );
    // A CQ ring that is not mapped: the firmware checks the IOVAs it is given.
    let mut bad = create_cq_input(uar, ctx.async_eqn().unwrap().into(), &cq2);
    let pas = create_cq_in::pas.byte_offset();
    bad[pas..pas + 8].copy_from_slice(&0x7000_0000_0000u64.to_be_bytes());
    fails(&ctx, &bad, create_cq_out::SIZE, Syndrome::CqPasNotMapped);
    ok(
        &ctx,
        &with_field(Op::DeallocUar, 16, dealloc_uar_in::uar, uar.into()),
        16,
    );

    drop((eq_buf, cq, qpq, cq2));
    ctx.close().unwrap();
    assert_nothing_left(&sim);
}

#[test]
fn hca_and_generic_errors_are_typed() {
    let sim = sim();
    let ctx = Device::open(sim.bus(), config(&sim)).unwrap();
    // Unknown opcode, bad op_mod, short input.
    fails(&ctx, &input_raw(0x9ff, 0, 16), 16, Syndrome::UnknownOpcode);
    fails(
        &ctx,
        // Cap type 1 (Ethernet offloads), MAX: not modelled.
        &input(Op::QueryHcaCap, 0x2, 16),
        query_hca_cap_out::SIZE,
        Syndrome::CapTypeUnsupported,
    );
    fails(
        &ctx,
        &input(Op::CreateCq, 0, 16),
        create_cq_out::SIZE,
        Syndrome::InputTooShort,
    );
    fails(&ctx, &input(Op::AllocPd, 1, 16), 16, Syndrome::BadOpMod);
    // Life-cycle commands in the wrong state.
    fails(
        &ctx,
        &input(Op::InitHca, 0, 32),
        16,
        Syndrome::InitAlreadyInitialized,
    );
    fails(
        &ctx,
        &input(Op::EnableHca, 0, 16),
        16,
        Syndrome::EnableAlreadyEnabled,
    );
    fails(
        &ctx,
        &input(Op::DisableHca, 0, 16),
        16,
        Syndrome::DisableWhileInitialized,
    );
    fails(
        &ctx,
        &with_field(
            Op::SetIssi,
            16,
            ferroverbs_hw::control::hca::set_issi_in::current_issi,
            1,
        ),
        16,
        Syndrome::SetIssiAfterInit,
    );
    fails(
        &ctx,
        &input(Op::SetHcaCap, 0, set_hca_cap_in::SIZE),
        16,
        Syndrome::SetCapAfterInit,
    );
    let mut t = input(Op::TeardownHca, 0, 16);
    ferroverbs_hw::control::hca::teardown_hca_in::profile.set(&mut t, 9);
    fails(&ctx, &t, 16, Syndrome::TeardownBadProfile);
    // TEARDOWN_HCA with objects left: refused (the driver's own close avoids this).
    let pd = alloc(&ctx, Op::AllocPd, alloc_pd_out::pd);
    fails(
        &ctx,
        &input(Op::TeardownHca, 0, 16),
        16,
        Syndrome::TeardownObjectsLeft,
    );
    ok(
        &ctx,
        &with_field(Op::DeallocPd, 16, dealloc_pd_in::pd, pd.into()),
        16,
    );
    // Pages: the same page listed twice, and a misaligned page, are refused whole.
    let page = dma(&ctx, 4096);
    let mut give = input(
        Op::ManagePages,
        ManagePagesOpMod::AllocationSuccess.value(),
        32,
    );
    manage_pages_in::input_num_entries.set(&mut give, 2);
    give[16..24].copy_from_slice(&page.iova().to_be_bytes());
    give[24..32].copy_from_slice(&page.iova().to_be_bytes());
    let held = sim.stats().pages_held;
    fails(&ctx, &give, 16, Syndrome::GiveDuplicate);
    assert_eq!(sim.stats().pages_held, held);
    let mut give = input(
        Op::ManagePages,
        ManagePagesOpMod::AllocationSuccess.value(),
        24,
    );
    manage_pages_in::input_num_entries.set(&mut give, 1);
    give[16..24].copy_from_slice(&0x1234u64.to_be_bytes());
    fails(&ctx, &give, 16, Syndrome::GiveMisaligned);
    // Registers: HOST_ENDIANNESS can be written again; an unknown register cannot.
    ok(&ctx, &host_endianness_input(), 32);
    let unk = access_register_input(AccessRegisterOpMod::Read, 0x1111, 0, &[0; 16]);
    fails(&ctx, &unk, 32, Syndrome::AccessRegUnknown);
    // GID table: index beyond the table, unknown RoCE version.
    let mut g = input(Op::SetRoceAddress, 0, set_roce_address_in::SIZE);
    set_roce_address_in::roce_address_index.set(&mut g, 4000);
    fails(&ctx, &g, 16, Syndrome::RoceAddrBadIndex);
    let mut g = input(Op::SetRoceAddress, 0, set_roce_address_in::SIZE);
    set_roce_address_in::roce_address_index.set(&mut g, 1);
    let a = Some(set_roce_address_in::roce_address);
    roce_addr_layout::source_l3_address
        .at(set_roce_address_in::roce_address.bit)
        .bytes_mut(&mut g)
        .unwrap()[15] = 1;
    set(&mut g, a, roce_addr_layout::roce_version, 7);
    fails(&ctx, &g, 16, Syndrome::RoceAddrBadVersion);
    // The NIC vport: other vports are not ours.
    let mut q = input(Op::QueryNicVportContext, 0, 16);
    query_nic_vport_context_in::other_vport.set(&mut q, 1);
    query_nic_vport_context_in::vport_number.set(&mut q, 3);
    fails(
        &ctx,
        &q,
        query_nic_vport_context_out::SIZE,
        Syndrome::VportOther,
    );
    let out = ok(
        &ctx,
        &input(Op::QueryNicVportContext, 0, 16),
        query_nic_vport_context_out::SIZE,
    );
    assert_eq!(
        nic_vport_context::roce_en
            .at(query_nic_vport_context_out::nic_vport_context.bit)
            .get(&out),
        1
    );
    let out = ok(&ctx, &input(Op::QueryVportState, 0, 16), 16);
    assert_eq!(query_vport_state_out::state.get(&out), 1, "link up");
    // QUERY_PAGES while running: nothing more wanted.
    let out = ok(
        &ctx,
        &input(Op::QueryPages, QueryPagesOpMod::RegularPages.value(), 16),
        16,
    );
    assert_eq!(num_pages(&out).unwrap(), 0);
    // The general caps say what the driver reported.
    assert_eq!(
        ctx.cap(cmd_hca_cap::log_max_qp),
        sim.with_firmware(|fw| fw.caps().gen(cmd_hca_cap::log_max_qp))
    );
    drop(page);
    ctx.close().unwrap();
    assert_nothing_left(&sim);
    assert_eq!(sim.stats().iommu_faults, 0);
}

fn input_raw(opcode: u16, op_mod: u16, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    b[..2].copy_from_slice(&opcode.to_be_bytes());
    b[6..8].copy_from_slice(&op_mod.to_be_bytes());
    b
}

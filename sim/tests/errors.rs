//! Every error path of the simulated firmware, each checked for its command status and
//! its syndrome; the last assertion checks that every syndrome of the table was seen.

mod common;
use common::*;

use std::collections::HashSet;

use ferroverbs_hw::{Bus, DmaPerm};

use ferroverbs_hw::control::caps::query_hca_cap_in;
use ferroverbs_hw::control::caps::{cmd_hca_cap as g, in_command as cap_at, set_hca_cap_in};
use ferroverbs_hw::control::cmd::{self, Opcode};
use ferroverbs_hw::control::cq::{self as cqm, cqc, create_cq_in, destroy_cq_in, query_cq_in};
use ferroverbs_hw::control::eq::{self as eqm, create_eq_input, destroy_eq_in, eqc, query_eq_in};
use ferroverbs_hw::control::hca::{disable_hca_in, enable_hca_in, set_issi_in, teardown_hca_in};
use ferroverbs_hw::control::mkey::{
    self as mk, create_mkey_in, destroy_mkey_in, mkc, query_mkey_in,
};
use ferroverbs_hw::control::pages::{give_pages_in, manage_pages_in, query_pages_in};
use ferroverbs_hw::control::qp::{
    self as qpm, ads, create_qp_in, destroy_qp_in, qpc, query_qp_in, QpTransition,
};
use ferroverbs_hw::control::reg::{access_register_input, paos_reg, AccessRegisterOpMod};
use ferroverbs_hw::control::roce::{query_roce_address_in, set_roce_address_input, RoceAddr};
use ferroverbs_hw::control::srq::{
    self as srqm, arm_rq_in, create_srq_input, destroy_srq_in, query_srq_in, srqc, SrqParams,
};
use ferroverbs_hw::control::uar_pd_td::{
    dealloc_pd_in, dealloc_transport_domain_in, dealloc_uar_in,
};
use ferroverbs_hw::control::vport::{
    modify_nic_vport_context_in, modify_nic_vport_field_select as fs, nic_vport_context,
    query_nic_vport_context_in,
};
use ferroverbs_hw::datapath::eqe::EventType;
use ferroverbs_hw::Field;
use ferroverbs_sim::bar::BarConfig;
use ferroverbs_sim::firmware::{CapType, Syndrome};
use ferroverbs_sim::SimConfig;

struct Check {
    seen: HashSet<Syndrome>,
}

impl Check {
    fn fails(&mut self, h: &mut Host, input: &[u8], outlen: usize, s: Syndrome) {
        h.fails(input, outlen, s);
        self.seen.insert(s);
    }

    fn op(
        &mut self,
        h: &mut Host,
        op: Opcode,
        op_mod: u16,
        s: Syndrome,
        f: impl FnOnce(&mut Vec<u8>),
    ) {
        let mut i = input(op, op_mod);
        f(&mut i);
        self.fails(h, &i, outlen(op), s);
    }

    fn transition(
        &mut self,
        h: &mut Host,
        t: QpTransition,
        qpn: u32,
        opt: u32,
        s: Syndrome,
        f: impl FnOnce(&mut Vec<u8>),
    ) {
        let mut i = h.transition_input(t, qpn, opt);
        f(&mut i);
        self.fails(h, &i, t.out_layout().size(), s);
    }
}

fn q(f: Field) -> Field {
    qpm::in_command(f)
}

fn initialized() -> Host {
    let mut h = Host::deterministic();
    h.init();
    h
}

fn with_caps(caps: &[(Field, u64)]) -> Host {
    let mut cfg = SimConfig::deterministic(3, 1);
    for &(f, v) in caps {
        cfg = cfg.cap(CapType::General, f, v);
    }
    let mut h = Host::new(cfg);
    h.init();
    h
}

fn generic(c: &mut Check) {
    let mut h = Host::deterministic();
    let mut i = input(Opcode::Nop, 0);
    set(&mut i, cmd::mbox_in::opcode, 0x999);
    c.fails(&mut h, &i, 16, Syndrome::UnknownOpcode);
    c.fails(
        &mut h,
        &input(Opcode::Nop, 0)[..8],
        16,
        Syndrome::InputTooShort,
    );
    c.op(
        &mut h,
        Opcode::QueryIssi,
        0,
        Syndrome::HcaNotEnabled,
        |_| {},
    );
    c.op(&mut h, Opcode::EnableHca, 1, Syndrome::BadOpMod, |_| {});
    c.op(&mut h, Opcode::EnableHca, 0, Syndrome::UidNotZero, |i| {
        set(i, cmd::mbox_in::uid, 5)
    });
    h.simple(Opcode::EnableHca, 0, |_| {});
    c.op(
        &mut h,
        Opcode::AllocPd,
        0,
        Syndrome::HcaNotInitialized,
        |_| {},
    );
    c.fails(
        &mut h,
        &input(Opcode::QueryHcaCap, 1),
        16,
        Syndrome::OutputTooShort,
    );
    h.init_rest();
    c.fails(
        &mut h,
        &input(Opcode::CreateEq, 0)[..100],
        16,
        Syndrome::InputTooShort,
    );
    c.op(
        &mut h,
        Opcode::QueryAdapter,
        0,
        Syndrome::NotImplemented,
        |_| {},
    );
}

trait InitRest {
    fn init_rest(&mut self);
}

impl InitRest for Host {
    /// The rest of [`Host::init`] after ENABLE_HCA.
    fn init_rest(&mut self) {
        let n = self.query_pages(2);
        self.give(n as usize);
        self.simple(Opcode::InitHca, 0, |_| {});
    }
}

fn hca(c: &mut Check) {
    let mut h = Host::deterministic();
    c.op(
        &mut h,
        Opcode::EnableHca,
        0,
        Syndrome::EnableBadFunction,
        |i| set(i, enable_hca_in::function_id, 1),
    );
    c.op(
        &mut h,
        Opcode::EnableHca,
        0,
        Syndrome::EnableBadFunction,
        |i| set(i, enable_hca_in::embedded_cpu_function, 1),
    );
    h.simple(Opcode::EnableHca, 0, |_| {});
    c.op(
        &mut h,
        Opcode::EnableHca,
        0,
        Syndrome::EnableAlreadyEnabled,
        |_| {},
    );
    c.op(
        &mut h,
        Opcode::DisableHca,
        0,
        Syndrome::DisableBadFunction,
        |i| set(i, disable_hca_in::function_id, 3),
    );
    c.op(
        &mut h,
        Opcode::SetIssi,
        0,
        Syndrome::SetIssiUnsupported,
        |i| set(i, set_issi_in::current_issi, 2),
    );
    c.op(
        &mut h,
        Opcode::InitHca,
        0,
        Syndrome::InitPagesMissing,
        |_| {},
    );
    c.op(
        &mut h,
        Opcode::TeardownHca,
        0,
        Syndrome::TeardownNotInitialized,
        |_| {},
    );
    h.init_rest();
    c.op(
        &mut h,
        Opcode::InitHca,
        0,
        Syndrome::InitAlreadyInitialized,
        |_| {},
    );
    c.op(
        &mut h,
        Opcode::SetIssi,
        0,
        Syndrome::SetIssiAfterInit,
        |i| set(i, set_issi_in::current_issi, 1),
    );
    c.op(
        &mut h,
        Opcode::DisableHca,
        0,
        Syndrome::DisableWhileInitialized,
        |_| {},
    );
    c.op(
        &mut h,
        Opcode::TeardownHca,
        0,
        Syndrome::TeardownBadProfile,
        |i| set(i, teardown_hca_in::profile, 5),
    );
    c.op(
        &mut h,
        Opcode::TeardownHca,
        0,
        Syndrome::TeardownFastUnsupported,
        |i| set(i, teardown_hca_in::profile, 2),
    );
    let pd = h.alloc_pd();
    c.op(
        &mut h,
        Opcode::TeardownHca,
        0,
        Syndrome::TeardownObjectsLeft,
        |_| {},
    );
    h.simple(Opcode::DeallocPd, 0, |i| {
        set(i, dealloc_pd_in::pd, pd.into())
    });
    h.simple(Opcode::TeardownHca, 0, |_| {});
    // FORCE_CLOSE on a device that does not advertise `force_teardown`.
    let mut h =
        Host::new(SimConfig::deterministic(7, 1).cap(CapType::General, g::force_teardown, 0));
    h.simple(Opcode::EnableHca, 0, |_| {});
    h.init_rest();
    c.op(
        &mut h,
        Opcode::TeardownHca,
        0,
        Syndrome::TeardownForceUnsupported,
        |i| set(i, teardown_hca_in::profile, 1),
    );
}

fn pages(c: &mut Check) {
    let mut h = Host::deterministic();
    h.simple(Opcode::EnableHca, 0, |_| {});
    c.op(&mut h, Opcode::QueryPages, 0, Syndrome::BadOpMod, |_| {});
    c.op(
        &mut h,
        Opcode::QueryPages,
        1,
        Syndrome::PagesBadFunction,
        |i| set(i, query_pages_in::function_id, 1),
    );
    c.op(&mut h, Opcode::ManagePages, 3, Syndrome::BadOpMod, |_| {});
    c.op(
        &mut h,
        Opcode::ManagePages,
        1,
        Syndrome::PagesBadFunction,
        |i| set(i, manage_pages_in::embedded_cpu_function, 1),
    );
    c.op(
        &mut h,
        Opcode::ManagePages,
        1,
        Syndrome::GiveInputShort,
        |i| set(i, manage_pages_in::input_num_entries, 10),
    );
    c.op(&mut h, Opcode::ManagePages, 1, Syndrome::GiveTooMany, |i| {
        set(i, manage_pages_in::input_num_entries, 0xffff_ffff)
    });
    let m = h.map(2 * 4096);
    let base = h.iova(m);
    c.fails(
        &mut h,
        &give_pages_in(0, &[base + 8]),
        16,
        Syndrome::GiveMisaligned,
    );
    c.fails(
        &mut h,
        &give_pages_in(0, &[base, base + 4096, base]),
        16,
        Syndrome::GiveDuplicate,
    );
    c.fails(
        &mut h,
        &give_pages_in(0, &[base, 0x1000]),
        16,
        Syndrome::GiveNotMapped,
    );
    assert_eq!(h.sim.stats().pages_held, 0, "a refused GIVE takes nothing");
    h.ok(&give_pages_in(0, &[base]), 16);
    c.fails(
        &mut h,
        &give_pages_in(0, &[base]),
        16,
        Syndrome::GiveDuplicate,
    );
    let mut i = input(Opcode::ManagePages, 2);
    set(&mut i, manage_pages_in::input_num_entries, 10);
    c.fails(&mut h, &i, 16, Syndrome::TakeOutputShort);
}

fn caps(c: &mut Check) {
    let mut h = Host::deterministic();
    h.simple(Opcode::EnableHca, 0, |_| {});
    c.op(
        &mut h,
        Opcode::QueryHcaCap,
        (1 << 1) | 1,
        Syndrome::CapTypeUnsupported,
        |_| {},
    );
    c.op(
        &mut h,
        Opcode::QueryHcaCap,
        1,
        Syndrome::CapOtherFunction,
        |i| set(i, query_hca_cap_in::other_function, 1),
    );
    c.op(&mut h, Opcode::SetHcaCap, 1, Syndrome::BadOpMod, |_| {});
    c.op(
        &mut h,
        Opcode::SetHcaCap,
        0x20 << 1,
        Syndrome::CapTypeUnsupported,
        |_| {},
    );
    let cur = h.caps(true);
    let base = |f: Field, v: u64| {
        let mut i = input(Opcode::SetHcaCap, 0);
        let at = set_hca_cap_in::capability.byte_offset();
        i[at..at + cur.len()].copy_from_slice(&cur);
        set(&mut i, cap_at(f), v);
        i
    };
    let n = outlen(Opcode::SetHcaCap);
    c.fails(
        &mut h,
        &base(g::log_max_cq, 10),
        n,
        Syndrome::SetCapReadOnly,
    );
    c.fails(&mut h, &base(g::port_type, 0), n, Syndrome::SetCapReadOnly);
    c.fails(
        &mut h,
        &base(g::log_uar_page_sz, 5),
        n,
        Syndrome::SetCapValue,
    );
    c.fails(&mut h, &base(g::log_max_qp, 19), n, Syndrome::SetCapValue);
    c.fails(
        &mut h,
        &base(g::cmdif_checksum, 3),
        n,
        Syndrome::SetCapValue,
    );
    c.fails(
        &mut h,
        &base(g::release_all_pages, 1),
        n,
        Syndrome::SetCapValue,
    );
    h.ok(&base(g::cmdif_checksum, 0), n);
    h.init_rest();
    c.fails(
        &mut h,
        &base(g::cmdif_checksum, 0),
        n,
        Syndrome::SetCapAfterInit,
    );
}

fn uar_pd_td(c: &mut Check) {
    let cfg = SimConfig {
        bar: BarConfig {
            pages: 8 + 2,
            ..BarConfig::default()
        },
        ..SimConfig::deterministic(1, 1)
    };
    let mut h = Host::new(cfg);
    h.init();
    let a = h.alloc_uar();
    h.alloc_uar();
    c.op(&mut h, Opcode::AllocUar, 0, Syndrome::UarExhausted, |_| {});
    c.op(&mut h, Opcode::DeallocUar, 0, Syndrome::UarUnknown, |i| {
        set(i, dealloc_uar_in::uar, 12345)
    });
    h.create_eq(4, a, 0, &[]);
    c.op(&mut h, Opcode::DeallocUar, 0, Syndrome::UarInUse, |i| {
        set(i, dealloc_uar_in::uar, a.into())
    });

    let mut h = with_caps(&[(g::log_max_pd, 1), (g::log_max_transport_domain, 0)]);
    let pd = h.alloc_pd();
    h.alloc_pd();
    c.op(&mut h, Opcode::AllocPd, 0, Syndrome::PdExhausted, |_| {});
    c.op(&mut h, Opcode::DeallocPd, 0, Syndrome::PdUnknown, |i| {
        set(i, dealloc_pd_in::pd, 77)
    });
    h.create_mkey(pd, 1);
    c.op(&mut h, Opcode::DeallocPd, 0, Syndrome::PdInUse, |i| {
        set(i, dealloc_pd_in::pd, pd.into())
    });
    h.simple(Opcode::AllocTransportDomain, 0, |_| {});
    c.op(
        &mut h,
        Opcode::AllocTransportDomain,
        0,
        Syndrome::TdExhausted,
        |_| {},
    );
    c.op(
        &mut h,
        Opcode::DeallocTransportDomain,
        0,
        Syndrome::TdUnknown,
        |i| set(i, dealloc_transport_domain_in::transport_domain, 9),
    );
}

fn mkey(c: &mut Check) {
    let mut h = with_caps(&[(g::log_max_mkey, 0), (g::log_max_mrw_sz, 20)]);
    let pd = h.alloc_pd();
    let n = outlen(Opcode::CreateMkey);
    let f = mk::in_command;
    let bad = |h: &mut Host, c: &mut Check, s: Syndrome, m: &dyn Fn(&mut Vec<u8>)| {
        let mut i = h.mkey_input(pd, 2);
        m(&mut i);
        c.fails(h, &i, n, s);
    };
    bad(&mut h, c, Syndrome::MkeyUnknownPd, &|i| {
        set(i, f(mkc::pd), 99)
    });
    bad(&mut h, c, Syndrome::MkeyBadAccessMode, &|i| {
        set(i, f(mkc::access_mode_1_0), 2)
    });
    bad(&mut h, c, Syndrome::MkeyBadAccessMode, &|i| {
        set(i, f(mkc::access_mode_4_2), 1)
    });
    bad(&mut h, c, Syndrome::MkeyUmemUnsupported, &|i| {
        set(i, create_mkey_in::mkey_umem_valid, 1)
    });
    bad(&mut h, c, Syndrome::MkeyFreeUnsupported, &|i| {
        set(i, f(mkc::free), 1)
    });
    bad(&mut h, c, Syndrome::MkeyQpnBound, &|i| {
        set(i, f(mkc::qpn), 5)
    });
    bad(&mut h, c, Syndrome::MkeyBadPageSize, &|i| {
        set(i, f(mkc::log_page_size), 11)
    });
    bad(&mut h, c, Syndrome::MkeyLength64Mtt, &|i| {
        set(i, f(mkc::length64), 1)
    });
    bad(&mut h, c, Syndrome::MkeyTranslationsShort, &|i| {
        set(i, f(mkc::len), 3 * 4096)
    });
    bad(&mut h, c, Syndrome::MkeyBadLength, &|i| {
        set(i, f(mkc::len), 1 << 21)
    });
    bad(&mut h, c, Syndrome::MkeyMttMisaligned, &|i| {
        let at = mk::MTT_OFFSET;
        let v = u64::from_be_bytes(i[at..at + 8].try_into().unwrap()) + 0x100;
        i[at..at + 8].copy_from_slice(&v.to_be_bytes());
    });
    bad(&mut h, c, Syndrome::MkeyMttNotMapped, &|i| {
        let at = mk::MTT_OFFSET + 8;
        i[at..at + 8].copy_from_slice(&0x4000_0003u64.to_be_bytes());
    });
    let mut i = h.mkey_input(pd, 2);
    i.truncate(mk::MTT_OFFSET + 8);
    c.fails(&mut h, &i, n, Syndrome::MkeyMttInputShort);
    // A PA mkey needs no translation list.
    let mut i = h.mkey_input(pd, 0);
    set(&mut i, f(mkc::access_mode_1_0), 0);
    set(&mut i, f(mkc::length64), 1);
    h.ok(&i, n);
    let i = h.mkey_input(pd, 1);
    c.fails(&mut h, &i, n, Syndrome::MkeyExhausted);
    c.op(&mut h, Opcode::DestroyMkey, 0, Syndrome::MkeyUnknown, |i| {
        set(i, destroy_mkey_in::mkey_index, 0x777)
    });
    c.op(&mut h, Opcode::QueryMkey, 0, Syndrome::MkeyUnknown, |i| {
        set(i, query_mkey_in::mkey_index, 0x777)
    });
}

fn eq(c: &mut Check) {
    let mut h = with_caps(&[(g::log_max_eq, 0)]);
    let uar = h.alloc_uar();
    let n = outlen(Opcode::CreateEq);
    let m = h.map(8192);
    let base = h.iova(m);
    let mk = |log: u8, uar: u32, intr: u16, pas: &[u64]| {
        create_eq_input(log, uar, intr, 0, &[EventType::Cmd], pas)
    };
    c.fails(&mut h, &mk(23, uar, 0, &[base]), n, Syndrome::EqBadSize);
    c.fails(&mut h, &mk(4, 999, 0, &[base]), n, Syndrome::EqUnknownUar);
    c.fails(&mut h, &mk(4, uar, 64, &[base]), n, Syndrome::EqBadIntr);
    let mut i = mk(4, uar, 0, &[base]);
    set(&mut i, eqm::in_command(eqc::ec), 1);
    c.fails(&mut h, &i, n, Syndrome::EqUnsupported);
    c.fails(&mut h, &mk(7, uar, 0, &[base]), n, Syndrome::EqPasShort);
    c.fails(
        &mut h,
        &mk(4, uar, 0, &[base + 64]),
        n,
        Syndrome::EqPasMisaligned,
    );
    c.fails(
        &mut h,
        &mk(4, uar, 0, &[0x1000]),
        n,
        Syndrome::EqPasNotMapped,
    );
    let (eqn, _) = h.create_eq(4, uar, 0, &[EventType::Cmd]);
    c.fails(&mut h, &mk(4, uar, 0, &[base]), n, Syndrome::EqExhausted);
    h.create_cq(uar, eqn);
    c.op(&mut h, Opcode::DestroyEq, 0, Syndrome::EqInUse, |i| {
        set(i, destroy_eq_in::eq_number, eqn.into())
    });
    c.op(&mut h, Opcode::DestroyEq, 0, Syndrome::EqUnknown, |i| {
        set(i, destroy_eq_in::eq_number, 200)
    });
    c.op(&mut h, Opcode::QueryEq, 0, Syndrome::EqUnknown, |i| {
        set(i, query_eq_in::eq_number, 200)
    });
}

fn cq(c: &mut Check) {
    let mut h = with_caps(&[(g::log_max_cq, 0)]);
    let uar = h.alloc_uar();
    let (eqn, _) = h.create_eq(4, uar, 0, &[]);
    let n = outlen(Opcode::CreateCq);
    let f = cqm::in_command;
    let bad = |h: &mut Host, c: &mut Check, s: Syndrome, m: &dyn Fn(&mut Vec<u8>)| {
        let mut i = h.cq_input(uar, eqn);
        m(&mut i);
        c.fails(h, &i, n, s);
    };
    bad(&mut h, c, Syndrome::CqBadSize, &|i| {
        set(i, f(cqc::log_cq_size), 23)
    });
    bad(&mut h, c, Syndrome::CqBadCqeSize, &|i| {
        set(i, f(cqc::cqe_sz), 2)
    });
    bad(&mut h, c, Syndrome::CqUnknownEq, &|i| {
        set(i, f(cqc::c_eqn_or_apu_element), 99)
    });
    bad(&mut h, c, Syndrome::CqUnknownUar, &|i| {
        set(i, f(cqc::uar_page), 99)
    });
    bad(&mut h, c, Syndrome::CqUnsupported, &|i| {
        set(i, f(cqc::cc), 1)
    });
    bad(&mut h, c, Syndrome::CqUnsupported, &|i| {
        set(i, create_cq_in::cq_umem_valid, 1)
    });
    bad(&mut h, c, Syndrome::CqDbrMisaligned, &|i| {
        let v = get(i, f(cqc::dbr_addr));
        set(i, f(cqc::dbr_addr), v + 4);
    });
    bad(&mut h, c, Syndrome::CqDbrNotMapped, &|i| {
        set(i, f(cqc::dbr_addr), 0x8000)
    });
    bad(&mut h, c, Syndrome::CqPasShort, &|i| i.truncate(0x110));
    bad(&mut h, c, Syndrome::CqPasMisaligned, &|i| {
        i[0x110 + 7] |= 0x40
    });
    bad(&mut h, c, Syndrome::CqPasNotMapped, &|i| {
        i[0x110..0x118].copy_from_slice(&0x2000u64.to_be_bytes())
    });
    let cqn = h.create_cq(uar, eqn);
    let i = h.cq_input(uar, eqn);
    c.fails(&mut h, &i, n, Syndrome::CqExhausted);
    let pd = h.alloc_pd();
    h.create_qp(QpSpec {
        st: 0,
        pd,
        uar,
        cqn,
        log_sq: 2,
        log_rq: 2,
        rq_stride: 0,
    });
    c.op(&mut h, Opcode::DestroyCq, 0, Syndrome::CqInUse, |i| {
        set(i, destroy_cq_in::cqn, cqn.into())
    });
    c.op(&mut h, Opcode::DestroyCq, 0, Syndrome::CqUnknown, |i| {
        set(i, destroy_cq_in::cqn, 0x5555)
    });
    c.op(&mut h, Opcode::QueryCq, 0, Syndrome::CqUnknown, |i| {
        set(i, query_cq_in::cqn, 0x5555)
    });
}

/// MODIFY_CQ resize of a CQ of 16 entries. The unpolled CQEs the firmware counts are
/// the producer counter (0: nothing written) minus the doorbell record's consumer
/// counter, which the host sets behind it; a resize whose resize CQE cannot be
/// written (the old ring unmapped) fails the CQ, and the next resize finds it in
/// error.
fn cq_resize(c: &mut Check) {
    let mut h = with_caps(&[]);
    let uar = h.alloc_uar();
    let (eqn, _) = h.create_eq(4, uar, 0, &[]);
    let m = h.map(8192);
    let base = h.iova(m);
    let i = cqm::create_cq_input(4, uar, eqn, base + 4096, 0, &[base]);
    let o = h.ok(&i, outlen(Opcode::CreateCq));
    let cqn = get(&o, cqm::create_cq_out::cqn) as u32;
    let new = h.map(8192);
    let nb = h.iova(new);
    let n = outlen(Opcode::ModifyCq);
    let bad = |h: &mut Host, c: &mut Check, s: Syndrome, m: &dyn Fn(&mut Vec<u8>)| {
        let mut i = cqm::resize_cq_input(cqn, 5, 64, 0, &[nb]);
        m(&mut i);
        c.fails(h, &i, n, s);
    };
    let op_mod = cmd::mbox_in::op_mod;
    bad(&mut h, c, Syndrome::BadOpMod, &|i| set(i, op_mod, 2));
    bad(&mut h, c, Syndrome::NotImplemented, &|i| set(i, op_mod, 0));
    bad(&mut h, c, Syndrome::CqUnknown, &|i| {
        set(i, cqm::modify_cq_in::cqn, 0x5555)
    });
    bad(&mut h, c, Syndrome::CqUnsupported, &|i| {
        set(i, cqm::modify_cq_in::cq_umem_valid, 1)
    });
    bad(&mut h, c, Syndrome::CqResizeFields, &|i| {
        set(
            i,
            cqm::modify_cq_in::modify_field_select_resize_field_select,
            3,
        )
    });
    bad(&mut h, c, Syndrome::CqResizeBadSize, &|i| {
        set(i, cqm::in_command(cqc::log_cq_size), 23)
    });
    bad(&mut h, c, Syndrome::CqBadCqeSize, &|i| {
        set(i, cqm::in_command(cqc::cqe_sz), 2)
    });
    bad(&mut h, c, Syndrome::CqResizeCqeSize, &|i| {
        set(i, cqm::in_command(cqc::cqe_sz), 1)
    });
    bad(&mut h, c, Syndrome::CqPasShort, &|i| i.truncate(0x110));
    bad(&mut h, c, Syndrome::CqPasMisaligned, &|i| {
        i[0x110 + 7] |= 0x40
    });
    bad(&mut h, c, Syndrome::CqPasNotMapped, &|i| {
        i[0x110..0x118].copy_from_slice(&0x2000u64.to_be_bytes())
    });
    // Eight unpolled: a ring of 8 is too small; sixteen: the ring of 16 is full.
    let ci = |h: &mut Host, behind: u32| {
        let v = 0x100_0000u32.wrapping_sub(behind) & 0xff_ffff;
        h.mapped[m].mem.write(4096, &v.to_be_bytes());
    };
    ci(&mut h, 8);
    bad(&mut h, c, Syndrome::CqResizeTooSmall, &|i| {
        set(i, cqm::in_command(cqc::log_cq_size), 3)
    });
    ci(&mut h, 16);
    bad(&mut h, c, Syndrome::CqResizeFull, &|_| {});
    ci(&mut h, 0);
    // (Any MODIFY_CQ of the CQ hands the firmware the consumer counter.)
    bad(&mut h, c, Syndrome::CqResizeFields, &|i| {
        set(
            i,
            cqm::modify_cq_in::modify_field_select_resize_field_select,
            0,
        )
    });
    // A resize to a ring that is then made read-only for the device (unmapped and
    // mapped again without write, at the same IOVA): the next resize's CQE cannot
    // be written there, which fails the CQ; the resize after that finds it in error.
    let lost = h.map(8192);
    let lb = h.iova(lost);
    h.ok(&cqm::resize_cq_input(cqn, 5, 64, 0, &[lb]), n);
    h.unmap(lost);
    let ro = Mem::new(8192);
    let again = h.bus.dma_map(ro.addr(), 8192, DmaPerm::RO).unwrap();
    assert_eq!(again, lb, "the IOVA is reused");
    h.ok(&cqm::resize_cq_input(cqn, 5, 64, 0, &[nb]), n);
    bad(&mut h, c, Syndrome::CqResizeInError, &|_| {});
}

fn qp_create(c: &mut Check) {
    let mut h = with_caps(&[(g::log_max_qp, 0)]);
    let uar = h.alloc_uar();
    let (eqn, _) = h.create_eq(4, uar, 0, &[]);
    let cqn = h.create_cq(uar, eqn);
    let pd = h.alloc_pd();
    let spec = QpSpec {
        st: 0,
        pd,
        uar,
        cqn,
        log_sq: 2,
        log_rq: 2,
        rq_stride: 0,
    };
    let n = outlen(Opcode::CreateQp);
    let bad = |h: &mut Host, c: &mut Check, s: Syndrome, m: &dyn Fn(&mut Vec<u8>)| {
        let mut i = h.qp_input(spec);
        m(&mut i);
        c.fails(h, &i, n, s);
    };
    bad(&mut h, c, Syndrome::QpInputQpnUnsupported, &|i| {
        set(i, create_qp_in::input_qpn, 5)
    });
    bad(&mut h, c, Syndrome::QpUmemUnsupported, &|i| {
        set(i, create_qp_in::wq_umem_valid, 1)
    });
    bad(&mut h, c, Syndrome::QpUmemUnsupported, &|i| {
        set(i, q(qpc::dbr_umem_valid), 1)
    });
    bad(&mut h, c, Syndrome::QpBadCounterSet, &|i| {
        set(i, q(qpc::counter_set_id), 9)
    });
    bad(&mut h, c, Syndrome::QpBadServiceType, &|i| {
        set(i, q(qpc::st), 3)
    });
    bad(&mut h, c, Syndrome::QpUnknownPd, &|i| {
        set(i, q(qpc::pd), 99)
    });
    bad(&mut h, c, Syndrome::QpUnknownUar, &|i| {
        set(i, q(qpc::uar_page), 99)
    });
    bad(&mut h, c, Syndrome::QpBadRqType, &|i| {
        set(i, q(qpc::rq_type), 2)
    });
    bad(&mut h, c, Syndrome::QpUnknownSrq, &|i| {
        set(i, q(qpc::rq_type), 1);
        set(i, q(qpc::srqn_rmpn_xrqn), 999);
    });
    bad(&mut h, c, Syndrome::QpBadRqStride, &|i| {
        set(i, q(qpc::log_rq_stride), 6)
    });
    bad(&mut h, c, Syndrome::QpUnknownCqSnd, &|i| {
        set(i, q(qpc::cqn_snd), 0)
    });
    bad(&mut h, c, Syndrome::QpUnknownCqRcv, &|i| {
        set(i, q(qpc::cqn_rcv), 999)
    });
    bad(&mut h, c, Syndrome::QpDbrMisaligned, &|i| {
        let v = get(i, q(qpc::dbr_addr));
        set(i, q(qpc::dbr_addr), v + 1);
    });
    bad(&mut h, c, Syndrome::QpDbrNotMapped, &|i| {
        set(i, q(qpc::dbr_addr), 0x8000)
    });
    bad(&mut h, c, Syndrome::QpPasShort, &|i| {
        set(i, q(qpc::log_sq_size), 10)
    });
    bad(&mut h, c, Syndrome::QpPasMisaligned, &|i| {
        i[0x110 + 6] |= 0x1
    });
    bad(&mut h, c, Syndrome::QpPasNotMapped, &|i| {
        i[0x110..0x118].copy_from_slice(&0x3000u64.to_be_bytes())
    });
    let qpn = h.create_qp(spec);
    let i = h.qp_input(spec);
    c.fails(&mut h, &i, n, Syndrome::QpExhausted);
    c.op(&mut h, Opcode::DestroyQp, 0, Syndrome::QpUnknown, |i| {
        set(i, destroy_qp_in::qpn, u64::from(qpn) + 1)
    });
    c.op(&mut h, Opcode::QueryQp, 0, Syndrome::QpUnknown, |i| {
        set(i, query_qp_in::qpn, 1)
    });
    c.transition(
        &mut h,
        QpTransition::ToErr,
        0x5555,
        0,
        Syndrome::QpUnknown,
        |_| {},
    );

    // log_max_qp_sz lowered (the 4-bit size fields cannot exceed the default 15).
    let mut h = with_caps(&[(g::log_max_qp_sz, 4)]);
    let uar = h.alloc_uar();
    let (eqn, _) = h.create_eq(4, uar, 0, &[]);
    let cqn = h.create_cq(uar, eqn);
    let pd = h.alloc_pd();
    let i = h.qp_input(QpSpec {
        st: 0,
        pd,
        uar,
        cqn,
        log_sq: 2,
        log_rq: 5,
        rq_stride: 0,
    });
    c.fails(&mut h, &i, n, Syndrome::QpBadRqSize);
    let i = h.qp_input(QpSpec {
        st: 0,
        pd,
        uar,
        cqn,
        log_sq: 5,
        log_rq: 2,
        rq_stride: 0,
    });
    c.fails(&mut h, &i, n, Syndrome::QpBadSqSize);
}

fn qp_modify(c: &mut Check) {
    let mut h = initialized();
    let uar = h.alloc_uar();
    let (eqn, _) = h.create_eq(4, uar, 0, &[]);
    let cqn = h.create_cq(uar, eqn);
    let pd = h.alloc_pd();
    let rc = h.create_qp(QpSpec {
        st: 0,
        pd,
        uar,
        cqn,
        log_sq: 2,
        log_rq: 2,
        rq_stride: 0,
    });
    let uc = h.create_qp(QpSpec {
        st: 1,
        pd,
        uar,
        cqn,
        log_sq: 2,
        log_rq: 2,
        rq_stride: 0,
    });
    use QpTransition::*;
    let p = qpm::primary_path;
    c.transition(&mut h, Init2Rtr, rc, 0, Syndrome::QpWrongState, |_| {});
    c.transition(
        &mut h,
        Sqerr2Rts,
        rc,
        0,
        Syndrome::QpTransitionNotForType,
        |_| {},
    );
    c.transition(&mut h, Sqd2Rts, rc, 0, Syndrome::QpWrongState, |_| {});
    c.transition(
        &mut h,
        Rst2Init,
        rc,
        1 << 1,
        Syndrome::QpBadOptParam,
        |_| {},
    );
    c.transition(&mut h, Rst2Init, rc, 0, Syndrome::QpBadPort, |i| {
        set(i, p(ads::vhca_port_num), 0)
    });
    c.transition(&mut h, Rst2Init, rc, 0, Syndrome::QpBadPort, |i| {
        set(i, p(ads::vhca_port_num), 2)
    });
    c.transition(&mut h, Rst2Init, rc, 0, Syndrome::QpBadPkeyIndex, |i| {
        set(i, p(ads::pkey_index), 1)
    });
    c.transition(
        &mut h,
        Rst2Init,
        uc,
        0,
        Syndrome::QpUcRemoteReadAtomic,
        |i| set(i, q(qpc::rre), 1),
    );
    assert_eq!(h.transition(Rst2Init, rc, 0), (0, 0));
    assert_eq!(h.transition(Rst2Init, uc, 0), (0, 0));
    c.transition(&mut h, Init2Init, rc, 1 << 16, Syndrome::QpBadPort, |i| {
        set(i, p(ads::vhca_port_num), 9)
    });
    c.transition(&mut h, Init2Rtr, rc, 0, Syndrome::QpRoceDisabled, |_| {});
    h.roce_enable();
    c.transition(&mut h, Init2Rtr, rc, 0, Syndrome::QpBadGidIndex, |_| {});
    h.set_gid(0, 1, &gid_v4([10, 0, 0, 9], [2, 0, 0, 0, 0, 9]));
    c.transition(&mut h, Init2Rtr, rc, 0, Syndrome::QpBadMtu, |i| {
        set(i, q(qpc::mtu), 0)
    });
    c.transition(&mut h, Init2Rtr, rc, 0, Syndrome::QpBadMtu, |i| {
        set(i, q(qpc::mtu), 7)
    });
    c.transition(&mut h, Init2Rtr, rc, 0, Syndrome::QpNoRemoteQpn, |i| {
        set(i, q(qpc::remote_qpn), 0)
    });
    c.transition(&mut h, Init2Rtr, rc, 0, Syndrome::QpBadMsgMax, |i| {
        set(i, q(qpc::log_msg_max), 31)
    });
    c.transition(&mut h, Init2Rtr, rc, 0, Syndrome::QpRraTooLarge, |i| {
        set(i, q(qpc::log_rra_max), 5)
    });
    c.transition(&mut h, Init2Rtr, rc, 0, Syndrome::QpBadGidIndex, |i| {
        set(i, p(ads::src_addr_index), 200)
    });
    c.transition(&mut h, Init2Rtr, rc, 0, Syndrome::QpBadPort, |i| {
        set(i, p(ads::vhca_port_num), 0)
    });
    // A refused transition changes nothing.
    assert_eq!(get(&h.query_qp(rc), qpc::state), 1);
    assert_eq!(h.transition(Init2Rtr, rc, 0), (0, 0));
    c.transition(&mut h, Rtr2Rts, rc, 0, Syndrome::QpSraTooLarge, |i| {
        set(i, q(qpc::log_sra_max), 5)
    });
    assert_eq!(h.transition(Rtr2Rts, rc, 0), (0, 0));
    c.transition(&mut h, Rts2Rts, rc, 1 << 9, Syndrome::QpBadOptParam, |_| {});
    c.transition(&mut h, Rts2Rts, uc, 0, Syndrome::QpWrongState, |_| {});
    let _ = Sqerr2Rts;
    // One QP1 per port.
    let gsi = |h: &mut Host| {
        h.create_qp(QpSpec {
            st: 8,
            pd,
            uar,
            cqn,
            log_sq: 2,
            log_rq: 2,
            rq_stride: 0,
        })
    };
    let (g1, g2) = (gsi(&mut h), gsi(&mut h));
    assert_eq!(h.transition(Rst2Init, g1, 0), (0, 0));
    c.transition(&mut h, Rst2Init, g2, 0, Syndrome::QpGsiPortTaken, |_| {});
}

fn vport(c: &mut Check) {
    let mut h = initialized();
    c.op(
        &mut h,
        Opcode::QueryNicVportContext,
        0,
        Syndrome::VportOther,
        |i| set(i, query_nic_vport_context_in::other_vport, 1),
    );
    c.op(
        &mut h,
        Opcode::QueryVportState,
        3,
        Syndrome::BadOpMod,
        |_| {},
    );
    let sel = |f: Field| f.at(modify_nic_vport_context_in::field_select.bit);
    let ctx = |f: Field| f.at(modify_nic_vport_context_in::nic_vport_context.bit);
    c.op(
        &mut h,
        Opcode::ModifyNicVportContext,
        0,
        Syndrome::VportFieldUnsupported,
        |i| set(i, sel(fs::permanent_address), 1),
    );
    c.op(
        &mut h,
        Opcode::ModifyNicVportContext,
        0,
        Syndrome::VportBadMtu,
        |i| {
            set(i, sel(fs::mtu), 1);
            set(i, ctx(nic_vport_context::mtu), 20_000);
        },
    );
    let e = gid_v4([1, 2, 3, 4], [2, 0, 0, 0, 0, 1]);
    let n = outlen(Opcode::SetRoceAddress);
    c.fails(
        &mut h,
        &set_roce_address_input(256, 1, &e),
        n,
        Syndrome::RoceAddrBadIndex,
    );
    c.fails(
        &mut h,
        &set_roce_address_input(1, 1, &RoceAddr { version: 1, ..e }),
        n,
        Syndrome::RoceAddrBadVersion,
    );
    c.fails(
        &mut h,
        &set_roce_address_input(1, 1, &RoceAddr { l3_type: 2, ..e }),
        n,
        Syndrome::RoceAddrBadL3Type,
    );
    c.op(
        &mut h,
        Opcode::QueryRoceAddress,
        0,
        Syndrome::RoceAddrBadIndex,
        |i| set(i, query_roce_address_in::roce_address_index, 300),
    );
    let mut h2 = Host::new(SimConfig::deterministic(2, 2));
    h2.init();
    c.fails(
        &mut h2,
        &set_roce_address_input(0, 3, &e),
        n,
        Syndrome::RoceAddrBadPort,
    );
    c.fails(
        &mut h2,
        &set_roce_address_input(0, 0, &e),
        n,
        Syndrome::RoceAddrBadPort,
    );
}

fn access_reg(c: &mut Check) {
    let mut h = Host::deterministic();
    h.simple(Opcode::EnableHca, 0, |_| {});
    let n = 32;
    c.fails(
        &mut h,
        &access_register_input(AccessRegisterOpMod::Read, 0x1234, 0, &[0; 16]),
        n,
        Syndrome::AccessRegUnknown,
    );
    c.fails(
        &mut h,
        &access_register_input(AccessRegisterOpMod::Write, 0x7004, 0, &[0; 4]),
        n,
        Syndrome::AccessRegShort,
    );
    c.fails(
        &mut h,
        &access_register_input(AccessRegisterOpMod::Write, 0x7004, 0, &[0x40; 16]),
        n,
        Syndrome::HostEndiannessBad,
    );
    c.fails(
        &mut h,
        &access_register_input(AccessRegisterOpMod::Read, 0x7004, 0, &[0; 16]),
        20,
        Syndrome::OutputTooShort,
    );
    let mut i = access_register_input(AccessRegisterOpMod::Read, 0x7004, 0, &[0; 16]);
    set(&mut i, cmd::mbox_in::op_mod, 2);
    c.fails(&mut h, &i, n, Syndrome::BadOpMod);
    let mut reg = [0u8; 16];
    c.fails(
        &mut h,
        &access_register_input(AccessRegisterOpMod::Read, 0x5006, 0, &reg),
        n,
        Syndrome::RegBadPort,
    );
    set(&mut reg, paos_reg::local_port, 1);
    set(&mut reg, paos_reg::ase, 1);
    set(&mut reg, paos_reg::admin_status, 3);
    c.fails(
        &mut h,
        &access_register_input(AccessRegisterOpMod::Write, 0x5006, 0, &reg),
        n,
        Syndrome::PaosBadStatus,
    );
}

fn counters(c: &mut Check) {
    use ferroverbs_hw::control::counters::{
        alloc_input, alloc_q_counter_out, dealloc_input, query_q_input, query_vport_counter_in,
    };
    let mut h = with_caps(&[(g::max_qp_cnt, 1)]);
    let out = h.ok(&alloc_input(), outlen(Opcode::AllocQCounter));
    assert_eq!(get(&out, alloc_q_counter_out::counter_set_id), 1);
    let n = outlen(Opcode::AllocQCounter);
    c.fails(&mut h, &alloc_input(), n, Syndrome::QCounterExhausted);
    let n = outlen(Opcode::QueryQCounter);
    c.fails(
        &mut h,
        &query_q_input(5, false),
        n,
        Syndrome::QCounterUnknown,
    );
    c.fails(
        &mut h,
        &query_q_input(0, false),
        n,
        Syndrome::QCounterUnknown,
    );
    let n = outlen(Opcode::DeallocQCounter);
    c.fails(&mut h, &dealloc_input(5), n, Syndrome::QCounterUnknown);
    h.ok(&dealloc_input(1), n);
    c.op(
        &mut h,
        Opcode::QueryVportCounter,
        0,
        Syndrome::VportCounterOther,
        |i| set(i, query_vport_counter_in::other_vport, 1),
    );
    c.op(
        &mut h,
        Opcode::QueryVportCounter,
        0,
        Syndrome::VportCounterOther,
        |i| set(i, query_vport_counter_in::port_num, 2),
    );
}

fn srq_input(h: &mut Host, pd: u32) -> Vec<u8> {
    let m = h.map(8192);
    let base = h.iova(m);
    create_srq_input(
        &SrqParams {
            log_srq_size: 4,
            log_rq_stride: 1,
            pd,
            lwm: 0,
            dbr_addr: base + 4096,
            log_page_size: 0,
        },
        &[base],
    )
}

fn srq(c: &mut Check) {
    let mut h = with_caps(&[(g::log_max_srq, 0), (g::log_max_srq_sz, 5)]);
    let uar = h.alloc_uar();
    let (eqn, _) = h.create_eq(4, uar, 0, &[]);
    let cqn = h.create_cq(uar, eqn);
    let pd = h.alloc_pd();
    let n = outlen(Opcode::CreateSrq);
    let f = srqm::in_command;
    let bad = |h: &mut Host, c: &mut Check, s: Syndrome, m: &dyn Fn(&mut Vec<u8>)| {
        let mut i = srq_input(h, pd);
        m(&mut i);
        c.fails(h, &i, n, s);
    };
    bad(&mut h, c, Syndrome::SrqUnsupported, &|i| {
        set(i, f(srqc::cont_srq), 1)
    });
    bad(&mut h, c, Syndrome::SrqUnknownPd, &|i| {
        set(i, f(srqc::pd), 99)
    });
    bad(&mut h, c, Syndrome::SrqBadSize, &|i| {
        set(i, f(srqc::log_srq_size), 6)
    });
    bad(&mut h, c, Syndrome::SrqBadStride, &|i| {
        set(i, f(srqc::log_rq_stride), 0)
    });
    bad(&mut h, c, Syndrome::SrqBadLwm, &|i| {
        set(i, f(srqc::lwm), 16)
    });
    bad(&mut h, c, Syndrome::SrqDbrMisaligned, &|i| {
        let v = get(i, f(srqc::dbr_addr));
        set(i, f(srqc::dbr_addr), v + 1);
    });
    bad(&mut h, c, Syndrome::SrqDbrNotMapped, &|i| {
        set(i, f(srqc::dbr_addr), 0x8000)
    });
    bad(&mut h, c, Syndrome::SrqPasShort, &|i| i.truncate(0x110));
    bad(&mut h, c, Syndrome::SrqPasMisaligned, &|i| {
        i[0x110 + 7] |= 0x40
    });
    bad(&mut h, c, Syndrome::SrqPasNotMapped, &|i| {
        i[0x110..0x118].copy_from_slice(&0x2000u64.to_be_bytes())
    });
    let i = srq_input(&mut h, pd);
    let o = h.ok(&i, n);
    let srqn = get(&o, ferroverbs_hw::control::srq::create_srq_out::srqn) as u32;
    let i = srq_input(&mut h, pd);
    c.fails(&mut h, &i, n, Syndrome::SrqExhausted);
    // A QP on it: the SRQ cannot be destroyed under it.
    let mut i = h.qp_input(QpSpec {
        st: 0,
        pd,
        uar,
        cqn,
        log_sq: 2,
        log_rq: 0,
        rq_stride: 0,
    });
    set(&mut i, qpm::in_command(qpc::rq_type), 1);
    set(&mut i, qpm::in_command(qpc::srqn_rmpn_xrqn), srqn.into());
    h.ok(&i, outlen(Opcode::CreateQp));
    c.op(&mut h, Opcode::DestroySrq, 0, Syndrome::SrqInUse, |i| {
        set(i, destroy_srq_in::srqn, srqn.into())
    });
    c.op(&mut h, Opcode::DestroySrq, 0, Syndrome::SrqUnknown, |i| {
        set(i, destroy_srq_in::srqn, 0x5555)
    });
    c.op(&mut h, Opcode::QuerySrq, 0, Syndrome::SrqUnknown, |i| {
        set(i, query_srq_in::srqn, 0x5555)
    });
    c.op(&mut h, Opcode::ArmRq, 1, Syndrome::SrqUnknown, |i| {
        set(i, arm_rq_in::srq_number, 0x5555)
    });
    c.op(&mut h, Opcode::ArmRq, 1, Syndrome::SrqBadLwm, |i| {
        set(i, arm_rq_in::srq_number, srqn.into());
        set(i, arm_rq_in::lwm, 16);
    });
    c.op(&mut h, Opcode::ArmRq, 2, Syndrome::BadOpMod, |i| {
        set(i, arm_rq_in::srq_number, srqn.into())
    });
}

#[test]
fn every_error_path_gives_its_status_and_syndrome() {
    let mut c = Check {
        seen: HashSet::new(),
    };
    generic(&mut c);
    hca(&mut c);
    pages(&mut c);
    caps(&mut c);
    uar_pd_td(&mut c);
    mkey(&mut c);
    eq(&mut c);
    cq(&mut c);
    cq_resize(&mut c);
    qp_create(&mut c);
    qp_modify(&mut c);
    vport(&mut c);
    access_reg(&mut c);
    counters(&mut c);
    srq(&mut c);
    let missing: Vec<_> = Syndrome::ALL
        .iter()
        .filter(|s| !c.seen.contains(s))
        .collect();
    assert!(missing.is_empty(), "syndromes never produced: {missing:?}");
}

#[test]
fn failed_commands_have_no_side_effects() {
    let mut h = initialized();
    let before = h.sim.stats().objects;
    let uar = h.alloc_uar();
    let i = create_eq_input(30, uar, 0, 0, &[], &[0x1000]);
    h.fails(&i, 16, Syndrome::EqBadSize);
    assert_eq!(h.sim.stats().objects.eqs, before.eqs);
    assert_eq!(h.sim.with_firmware(|fw| fw.stats().failed), 1);
}

//! UMR on memory regions: a driver's UMR QP (`MLX5_QPC_ST_REG_UMR`, Linux
//! `mlx5r_umr_resource_init`) changes a live region's access rights and PD in place
//! with the WQE of `mlx5r_umr_rereg_pd_access` (mask PD and access, the free-state
//! check "in use", inline mkey context), keeping its key. Later accesses obey the new
//! rights, QUERY_MKEY reports them, and what the device refuses completes in error
//! with nothing changed.

mod common;
mod dp;

use common::set;
use dp::*;
use ferroverbs_hw::control::cmd::Opcode;
use ferroverbs_hw::control::mkey::{mkc, query_mkey_in, query_mkey_out};
use ferroverbs_hw::control::qp::{self as qpm, QpTransition};
use ferroverbs_hw::control::uar_pd_td::dealloc_pd_in;
use ferroverbs_hw::datapath::cqe::{
    MLX5_CQE_REQ, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
    MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,
};
use ferroverbs_hw::datapath::umr::*;
use ferroverbs_hw::datapath::wqe::MLX5_OPCODE_UMR;

/// `MLX5_QPC_ST_REG_UMR`.
const ST_REG_UMR: u8 = 0xc;

/// The access mask `mlx5r_umr_rereg_pd_access` sets (`get_umr_update_access_mask`
/// on a device with atomics) and the PD.
const PD_ACCESS: u64 = MLX5_MKEY_MASK_LR
    | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE
    | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ
    | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE
    | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC
    | MLX5_MKEY_MASK_PD;

const LR_: u8 = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ;
const LW_: u8 = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE;
const RW_: u8 = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE;

/// B's UMR QP (its own CQ), in RTS as `mlx5r_umr_qp_rst2rts` brings it: RST2INIT
/// with port 1, INIT2RTR and RTR2RTS with no parameters.
fn umr_qp(n: &mut Node) -> (Qp, Cq) {
    let cq = n.create_cq(6);
    let qp = n.create_qp_st(ST_REG_UMR, &cq, &cq, 6, 0, 2);
    let t = QpTransition::Rst2Init;
    let mut i = qpm::transition_input(t, qp.qpn, 0);
    set(&mut i, qpm::primary_path(qpm::ads::vhca_port_num), 1);
    set(&mut i, qpm::in_command(qpm::qpc::pm_state), 3);
    n.h.ok(&i, t.out_layout().size());
    n.modify(&qp, QpTransition::Init2Rtr);
    n.modify(&qp, QpTransition::Rtr2Rts);
    (qp, cq)
}

/// The WQE of `mlx5r_umr_rereg_pd_access` for `key`: `access`
/// (`MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_*`) and `pd`, with `mask` and `flags`.
fn rereg_wqe(qpn: u32, key: u32, mask: u64, flags: u8, access: u8, pd: u32) -> Vec<u8> {
    let u = MwUmr {
        key,
        flags,
        mkey_mask: mask,
        access,
        qpn: UMR_QPN_NONE,
        variant: key as u8,
        pd,
        ..MwUmr::default()
    };
    let mut mid = vec![0u8; u.bytes()];
    u.emit(&mut mid);
    mixed_wqe(qpn, MLX5_OPCODE_UMR, &mid, &[], Some(key), SIG)
}

/// The usual rereg: check "in use", inline, PD and access.
fn rereg(qpn: u32, key: u32, access: u8, pd: u32) -> Vec<u8> {
    rereg_wqe(
        qpn,
        key,
        PD_ACCESS,
        MLX5_UMR_CHECK_FREE | MLX5_WQE_UMR_CTRL_FLAG_INLINE,
        access,
        pd,
    )
}

/// QUERY_MKEY of `key`: a field of its context.
fn mkey_field(n: &mut Node, key: u32, f: ferroverbs_hw::Field) -> u64 {
    let o = n.h.simple(Opcode::QueryMkey, 0, |i| {
        set(i, query_mkey_in::mkey_index, (key >> 8).into())
    });
    common::get(&o, f.at(query_mkey_out::memory_key_mkey_entry.bit))
}

#[test]
fn a_umr_grants_remote_write_keeping_the_key() {
    let mut p = Pair::deterministic(Conn::default());
    let mr = p.b.reg_mr(4096, LR | LW | UMR_EN);
    let (mut uq, mut ucq) = umr_qp(&mut p.b);
    assert_eq!(mkey_field(&mut p.b, mr.key, mkc::rw), 0);
    let pd = p.b.pd;
    let w = rereg(uq.qpn, mr.key, LR_ | LW_ | RW_, pd);
    assert_eq!(umr_syndrome(&p.fabric, &p.b, &mut uq, &mut ucq, &w), 0);
    assert_eq!(mkey_field(&mut p.b, mr.key, mkc::rw), 1);
    assert_eq!(mkey_field(&mut p.b, mr.key, mkc::lw), 1);
    assert_eq!(mkey_field(&mut p.b, mr.key, mkc::rr), 0);
    assert_eq!(
        mkey_field(&mut p.b, mr.key, mkc::mkey_7_0),
        u64::from(mr.key & 0xff)
    );
    assert_eq!(p.write_inline(mr.va + 8, mr.key, b"granted"), 0);
    assert_eq!(p.b.mr_read(&mr, 8, 7), b"granted");
}

#[test]
fn a_umr_revokes_remote_write_and_the_next_write_fails() {
    let mut p = Pair::deterministic(Conn::default());
    let mr = p.b.reg_mr(4096, LR | LW | RW | UMR_EN);
    let (mut uq, mut ucq) = umr_qp(&mut p.b);
    assert_eq!(p.write_inline(mr.va, mr.key, b"before"), 0);
    let pd = p.b.pd;
    let w = rereg(uq.qpn, mr.key, LR_ | LW_, pd);
    assert_eq!(umr_syndrome(&p.fabric, &p.b, &mut uq, &mut ucq, &w), 0);
    assert_eq!(mkey_field(&mut p.b, mr.key, mkc::rw), 0);
    assert_eq!(
        p.write_inline(mr.va, mr.key, b"after"),
        MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR
    );
    assert_eq!(p.b.mr_read(&mr, 0, 6), b"before");
}

#[test]
fn a_umr_moves_a_region_to_another_pd_and_back() {
    let mut p = Pair::deterministic(Conn::default());
    let mr = p.b.reg_mr(4096, LR | LW | RW | UMR_EN);
    let (mut uq, mut ucq) = umr_qp(&mut p.b);
    let (pd, other) = (p.b.pd, p.b.h.alloc_pd());
    let w = rereg(uq.qpn, mr.key, LR_ | LW_ | RW_, other);
    assert_eq!(umr_syndrome(&p.fabric, &p.b, &mut uq, &mut ucq, &w), 0);
    assert_eq!(mkey_field(&mut p.b, mr.key, mkc::pd), u64::from(other));
    // B's RC QP is in the old PD: the region is not its any more.
    assert_eq!(
        p.write_inline(mr.va, mr.key, b"x"),
        MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR
    );
    // The region holds the new PD now.
    let mut i = common::input(Opcode::DeallocPd, 0);
    set(&mut i, dealloc_pd_in::pd, other.into());
    let n = common::outlen(Opcode::DeallocPd);
    p.b.h
        .fails(&i, n, ferroverbs_sim::firmware::Syndrome::PdInUse);
    let w = rereg(uq.qpn, mr.key, LR_ | LW_ | RW_, pd);
    assert_eq!(umr_syndrome(&p.fabric, &p.b, &mut uq, &mut ucq, &w), 0);
    assert_eq!(mkey_field(&mut p.b, mr.key, mkc::pd), u64::from(pd));
    // ... and not the one it left.
    p.b.h.ok(&i, common::outlen(Opcode::DeallocPd));
}

/// A fresh pair, a region of `access` and B's UMR QP: the syndrome of `make(qpn,
/// key, pd)` posted there, and whether the region's remote write is still as it
/// was (nothing changed).
fn refused(access: u8, make: impl Fn(u32, u32, u32) -> Vec<u8>) -> u8 {
    let mut p = Pair::deterministic(Conn::default());
    let mr = p.b.reg_mr(4096, access);
    let (mut uq, mut ucq) = umr_qp(&mut p.b);
    let pd = p.b.pd;
    let w = make(uq.qpn, mr.key, pd);
    let s = umr_syndrome(&p.fabric, &p.b, &mut uq, &mut ucq, &w);
    assert_eq!(mkey_field(&mut p.b, mr.key, mkc::rw), 0, "changed on error");
    assert_eq!(mkey_field(&mut p.b, mr.key, mkc::pd), u64::from(pd));
    s
}

#[test]
fn what_the_device_refuses_completes_in_error_and_changes_nothing() {
    // No umr_en on the key.
    assert_eq!(
        refused(LR | LW, |q, k, pd| rereg(q, k, LR_ | LW_ | RW_, pd)),
        MLX5_CQE_SYNDROME_LOCAL_PROT_ERR
    );
    // "Must be free" on a live region.
    assert_eq!(
        refused(LR | LW | UMR_EN, |q, k, pd| rereg_wqe(
            q,
            k,
            PD_ACCESS,
            MLX5_UMR_CHECK_NOT_FREE | MLX5_WQE_UMR_CTRL_FLAG_INLINE,
            LR_ | LW_ | RW_,
            pd
        )),
        MLX5_CQE_SYNDROME_LOCAL_PROT_ERR
    );
    // A PD nobody allocated.
    assert_eq!(
        refused(LR | LW | UMR_EN, |q, k, pd| rereg(
            q,
            k,
            LR_ | LW_ | RW_,
            pd + 0x777
        )),
        MLX5_CQE_SYNDROME_LOCAL_PROT_ERR
    );
    // A translation change (not modelled).
    assert_eq!(
        refused(LR | LW | UMR_EN, |q, k, pd| rereg_wqe(
            q,
            k,
            PD_ACCESS | MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN,
            MLX5_WQE_UMR_CTRL_FLAG_INLINE,
            LR_ | LW_ | RW_,
            pd
        )),
        MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR
    );
    // A key no mkey has.
    assert_eq!(
        refused(LR | LW | UMR_EN, |q, k, pd| rereg(
            q,
            k ^ 0x7f_0000,
            LR_ | LW_ | RW_,
            pd
        )),
        MLX5_CQE_SYNDROME_LOCAL_PROT_ERR
    );
}

#[test]
fn an_rc_qp_may_not_move_a_region_out_of_its_pd() {
    let mut p = Pair::deterministic(Conn::default());
    let mr = p.b.reg_mr(4096, LR | LW | UMR_EN);
    let other = p.b.h.alloc_pd();
    let w = rereg(p.qb.qpn, mr.key, LR_ | LW_ | RW_, other);
    p.b.post(&mut p.qb, &w);
    let c = wait_cqe(&p.fabric, &p.b, &mut p.bcq.0);
    assert_ne!(c.opcode(), MLX5_CQE_REQ);
    assert_eq!(err(&c).syndrome(), MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
    assert_eq!(mkey_field(&mut p.b, mr.key, mkc::pd), u64::from(p.b.pd));
    assert_eq!(mkey_field(&mut p.b, mr.key, mkc::rw), 0);
}

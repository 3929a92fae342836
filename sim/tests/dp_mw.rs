//! Memory windows (IBTA Vol. 1 §10.6.7): a window is an MKEY created free in KLM mode
//! with `umr_en` (Linux `mlx5_ib_alloc_mw`); a UMR WQE binds it to a range of a memory
//! region with remote rights (the WQE rdma-core's `set_bind_wr` writes for
//! `IBV_WR_BIND_MW` and `ibv_bind_mw`), invalidates it (`IBV_WR_LOCAL_INV`), or a
//! SEND with Invalidate of a type 2 window frees it remotely. Remote access works
//! through a bound window, within its bounds and rights, and fails with a remote
//! access error otherwise; binds that break the rules complete with
//! `MLX5_CQE_SYNDROME_MW_BIND_ERR`.

mod common;
mod dp;

use dp::*;
use ferroverbs_hw::control::cmd::Opcode;
use ferroverbs_hw::control::mkey::{self as mk, create_mkey_out, mkc};
use ferroverbs_hw::datapath::cqe::{
    MLX5_CQE_REQ, MLX5_CQE_RESP_SEND_INV, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
    MLX5_CQE_SYNDROME_MW_BIND_ERR, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,
};
use ferroverbs_hw::datapath::umr::*;
use ferroverbs_hw::datapath::wqe::{
    MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_SEND_INVAL, MLX5_OPCODE_UMR,
};

/// A window: CREATE_MKEY as `mlx5_ib_alloc_mw` issues it.
fn alloc_mw(n: &mut Node, type2: bool, pd: u32) -> u32 {
    let mut i = mk::create_mkey_input(0);
    let f = mk::in_command;
    let set = |i: &mut Vec<u8>, fl: ferroverbs_hw::Field, v: u64| fl.set(i, v);
    set(&mut i, f(mkc::free), 1);
    set(&mut i, f(mkc::umr_en), 1);
    set(&mut i, f(mkc::lr), 1);
    set(&mut i, f(mkc::access_mode_1_0), 2);
    set(&mut i, f(mkc::en_rinval), u64::from(type2));
    set(&mut i, f(mkc::qpn), 0xff_ffff);
    set(&mut i, f(mkc::pd), pd.into());
    set(&mut i, f(mkc::translations_octword_size), 4);
    n.variant = n.variant.wrapping_add(1);
    set(&mut i, f(mkc::mkey_7_0), n.variant.into());
    let o = n.h.ok(&i, common::outlen(Opcode::CreateMkey));
    (create_mkey_out::mkey_index.get(&o) as u32) << 8 | u32::from(n.variant)
}

/// The bind rdma-core writes (`set_bind_wr`) for a window of `type2` to `len` bytes at
/// `addr` of the region `mr` with `access` (`MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_*`),
/// the window's key becoming `new_key`.
#[allow(clippy::too_many_arguments)]
fn bind_wqe(
    qpn: u32,
    key: u32,
    new_key: u32,
    type2: bool,
    mr: &Mr,
    addr: u64,
    len: u64,
    access: u8,
) -> Vec<u8> {
    let mut flags = MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET | MLX5_WQE_UMR_CTRL_FLAG_INLINE;
    let mut mask = MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE | MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY;
    if type2 {
        mask |= MLX5_WQE_UMR_CTRL_MKEY_MASK_QPN;
    }
    if len > 0 {
        if type2 {
            flags |= MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE;
        }
        mask |= MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN
            | MLX5_WQE_UMR_CTRL_MKEY_MASK_START_ADDR
            | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE
            | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ
            | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE
            | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC;
    } else if type2 {
        flags |= MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN;
    }
    let u = MwUmr {
        key,
        flags,
        mkey_mask: mask,
        free: len == 0,
        access,
        qpn: if type2 && len > 0 { qpn } else { UMR_QPN_NONE },
        variant: new_key as u8,
        pd: 0,
        start: addr,
        len,
        klm: (len > 0).then_some((mr.key, addr)),
    };
    let mut mid = vec![0u8; u.bytes()];
    u.emit(&mut mid);
    mixed_wqe(qpn, MLX5_OPCODE_UMR, &mid, &[], Some(key), SIG)
}

/// `IBV_WR_LOCAL_INV` of `key` as rdma-core writes it (a type 2 unbind checking the
/// QPN).
fn local_inv_wqe(qpn: u32, key: u32) -> Vec<u8> {
    let u = MwUmr {
        key,
        flags: MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET
            | MLX5_WQE_UMR_CTRL_FLAG_INLINE
            | MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN,
        mkey_mask: MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE
            | MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY
            | MLX5_WQE_UMR_CTRL_MKEY_MASK_QPN,
        free: true,
        qpn: UMR_QPN_NONE,
        ..MwUmr::default()
    };
    let mut mid = vec![0u8; u.bytes()];
    u.emit(&mut mid);
    mixed_wqe(qpn, MLX5_OPCODE_UMR, &mid, &[], Some(key), SIG)
}

const RW: u8 = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE;

/// A fresh pair (an error moves a QP to the error state: each case takes its own)
/// with an 8 KiB region on B and a window of `type2` allocated in B's PD.
fn window(type2: bool) -> (Pair, Mr, u32) {
    let mut p = Pair::deterministic(Conn::default());
    let mr = p.b.reg_mr(8192, ALL);
    let pd = p.b.pd;
    let mw = alloc_mw(&mut p.b, type2, pd);
    (p, mr, mw)
}

/// Posts on B's QP the bind of [`bind_wqe`] and gives its syndrome (0 for success).
#[allow(clippy::too_many_arguments)]
fn bind(
    p: &mut Pair,
    key: u32,
    new_key: u32,
    type2: bool,
    mr: &Mr,
    addr: u64,
    len: u64,
    access: u8,
) -> u8 {
    let w = bind_wqe(p.qb.qpn, key, new_key, type2, mr, addr, len, access);
    p.umr_on_b(&w)
}

fn next(key: u32) -> u32 {
    (key & !0xff) | ((key + 1) & 0xff)
}

#[test]
fn a_type2_window_gives_access_to_its_range_until_invalidated() {
    let (mut p, mr, mw) = window(true);
    // Before a bind the window is free: no access.
    assert_eq!(
        p.write_inline(mr.va, mw, b"x"),
        MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR
    );
    let (mut p, mr, mw) = window(true);
    let key = next(mw);
    let qpn = p.qb.qpn;
    let w = bind_wqe(qpn, mw, key, true, &mr, mr.va + 4096, 1024, RW);
    assert_eq!(p.umr_on_b(&w), 0);
    assert_eq!(
        p.write_inline(mr.va + 4096 + 100, key, b"through the window"),
        0
    );
    assert_eq!(p.b.mr_read(&mr, 4096 + 100, 18), b"through the window");
    // The old key (previous variant) is not the window any more.
    assert_eq!(
        p.write_inline(mr.va + 4096, mw, b"old"),
        MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR
    );
    // (each error moves the QP to the error state: a fresh pair per case below)
    let (mut p, mr, mw) = window(true);
    let key = next(mw);
    assert_eq!(bind(&mut p, mw, key, true, &mr, mr.va + 4096, 1024, RW), 0);
    // Beyond the window's end (inside the region): a remote access error.
    assert_eq!(
        p.write_inline(mr.va + 4096 + 1020, key, b"12345678"),
        MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR
    );
    assert_eq!(p.b.mr_read(&mr, 4096 + 1020, 4), [0; 4]);

    let (mut p, mr, mw) = window(true);
    let key = next(mw);
    let qpn = p.qb.qpn;
    assert_eq!(bind(&mut p, mw, key, true, &mr, mr.va, 8192, RW), 0);
    assert_eq!(p.write_inline(mr.va, key, b"first"), 0);
    // A bound type 2 window cannot be bound again before it is invalidated.
    let again = bind_wqe(qpn, key, next(key), true, &mr, mr.va, 16, RW);
    assert_eq!(p.umr_on_b(&again), MLX5_CQE_SYNDROME_MW_BIND_ERR);

    let (mut p, mr, mw) = window(true);
    let key = next(mw);
    let qpn = p.qb.qpn;
    assert_eq!(bind(&mut p, mw, key, true, &mr, mr.va, 8192, RW), 0);
    assert_eq!(p.write_inline(mr.va, key, b"first"), 0);
    assert_eq!(p.umr_on_b(&local_inv_wqe(qpn, key)), 0);
    assert_eq!(
        p.write_inline(mr.va, key, b"after"),
        MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR
    );
    assert_eq!(p.b.mr_read(&mr, 0, 5), b"first");
}

#[test]
fn an_invalidated_window_binds_again_with_a_new_key() {
    let (mut p, mr, mw) = window(true);
    let qpn = p.qb.qpn;
    let k1 = next(mw);
    assert_eq!(bind(&mut p, mw, k1, true, &mr, mr.va, 4096, RW), 0);
    assert_eq!(p.umr_on_b(&local_inv_wqe(qpn, k1)), 0);
    // rdma-core's LOCAL_INV leaves variant 0; the next bind names the window by the
    // key the application had and gives it the next one.
    let k2 = next(k1);
    assert_eq!(bind(&mut p, k1, k2, true, &mr, mr.va + 4096, 4096, RW), 0);
    assert_eq!(p.write_inline(mr.va + 4096, k2, b"second"), 0);
    assert_eq!(p.b.mr_read(&mr, 4096, 6), b"second");
    assert_eq!(
        p.write_inline(mr.va + 4096, k1, b"x"),
        MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR
    );
    // Invalidating a free window fails (it is bound to no QP).
    let mut p = Pair::deterministic(Conn::default());
    let pd = p.b.pd;
    let mw = alloc_mw(&mut p.b, true, pd);
    let qpn = p.qb.qpn;
    assert_eq!(
        p.umr_on_b(&local_inv_wqe(qpn, mw)),
        MLX5_CQE_SYNDROME_LOCAL_PROT_ERR
    );
}

#[test]
fn a_window_of_a_deregistered_region_gives_no_access() {
    let (mut p, mr, mw) = window(true);
    let key = next(mw);
    assert_eq!(bind(&mut p, mw, key, true, &mr, mr.va, 8192, RW), 0);
    assert_eq!(p.write_inline(mr.va, key, b"live"), 0);
    let mut d = ferroverbs_hw::control::cmd::new_input(
        Opcode::DestroyMkey,
        0,
        ferroverbs_hw::control::mkey::destroy_mkey_in::SIZE,
    );
    ferroverbs_hw::control::mkey::destroy_mkey_in::mkey_index.set(&mut d, u64::from(mr.key >> 8));
    p.b.h.ok(&d, common::outlen(Opcode::DestroyMkey));
    assert_eq!(
        p.write_inline(mr.va, key, b"gone"),
        MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR
    );
}

#[test]
fn a_type1_window_is_rebound_and_unbound_by_a_bind_of_length_zero() {
    let (mut p, mr, mw) = window(false);
    let k1 = next(mw);
    assert_eq!(bind(&mut p, mw, k1, false, &mr, mr.va, 4096, RW), 0);
    // A type 1 window may be bound again while bound.
    let k2 = next(k1);
    assert_eq!(bind(&mut p, k1, k2, false, &mr, mr.va + 4096, 4096, RW), 0);
    assert_eq!(p.write_inline(mr.va + 4096, k2, b"type one"), 0);
    assert_eq!(p.b.mr_read(&mr, 4096, 8), b"type one");
    assert_eq!(
        p.write_inline(mr.va, k2, b"x"),
        MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR
    );

    let (mut p, mr, mw) = window(false);
    let k1 = next(mw);
    assert_eq!(bind(&mut p, mw, k1, false, &mr, mr.va, 4096, RW), 0);
    let k2 = next(k1);
    assert_eq!(bind(&mut p, k1, k2, false, &mr, mr.va, 0, 0), 0);
    assert_eq!(
        p.write_inline(mr.va, k2, b"x"),
        MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR
    );
    // LOCAL_INV does not apply to type 1 windows.
    let mut p = Pair::deterministic(Conn::default());
    let pd = p.b.pd;
    let mr = p.b.reg_mr(4096, ALL);
    let mw = alloc_mw(&mut p.b, false, pd);
    let qpn = p.qb.qpn;
    let k1 = next(mw);
    assert_eq!(bind(&mut p, mw, k1, false, &mr, mr.va, 4096, RW), 0);
    assert_eq!(
        p.umr_on_b(&local_inv_wqe(qpn, k1)),
        MLX5_CQE_SYNDROME_LOCAL_PROT_ERR
    );
}

#[test]
fn binds_beyond_the_region_or_its_rights_or_pd_fail() {
    type Case = fn(&mut Pair, u32, &Mr, &Mr) -> Vec<u8>;
    let cases: [(&str, Case); 3] = [
        ("beyond the region", |p, mw, mr, _| {
            bind_wqe(p.qb.qpn, mw, next(mw), true, mr, mr.va + 4096, 8192, RW)
        }),
        ("before the region", |p, mw, mr, _| {
            bind_wqe(p.qb.qpn, mw, next(mw), true, mr, mr.va - 16, 64, RW)
        }),
        (
            "remote write over a region without local write",
            |p, mw, _, ro| bind_wqe(p.qb.qpn, mw, next(mw), true, ro, ro.va, 64, RW),
        ),
    ];
    for (what, case) in cases {
        let mut p = Pair::deterministic(Conn::default());
        let mr = p.b.reg_mr(8192, ALL);
        let ro = p.b.reg_mr(4096, LR | RR);
        let pd = p.b.pd;
        let mw = alloc_mw(&mut p.b, true, pd);
        let w = case(&mut p, mw, &mr, &ro);
        assert_eq!(p.umr_on_b(&w), MLX5_CQE_SYNDROME_MW_BIND_ERR, "{what}");
    }
    // A window of another PD than the QP's.
    let mut p = Pair::deterministic(Conn::default());
    let mr = p.b.reg_mr(8192, ALL);
    let other = p.b.h.alloc_pd();
    let mw = alloc_mw(&mut p.b, true, other);
    let w = bind_wqe(p.qb.qpn, mw, next(mw), true, &mr, mr.va, 64, RW);
    assert_eq!(p.umr_on_b(&w), MLX5_CQE_SYNDROME_MW_BIND_ERR);
}

#[test]
fn send_with_invalidate_frees_a_type2_window() {
    let mut p = Pair::deterministic(Conn::default());
    let mr = p.b.reg_mr(8192, ALL);
    let dst = p.b.reg_mr(4096, ALL);
    let pd = p.b.pd;
    let mw = alloc_mw(&mut p.b, true, pd);
    let key = next(mw);
    assert_eq!(bind(&mut p, mw, key, true, &mr, mr.va, 8192, RW), 0);
    assert_eq!(p.write_inline(mr.va, key, b"bound"), 0);
    p.b.post_recv(&mut p.qb, &[sge(&dst, 0, 4096)]);
    let w = mixed_wqe(
        p.qa.qpn,
        MLX5_OPCODE_SEND_INVAL,
        &[],
        &[Seg::Inline(b"done".to_vec())],
        Some(key),
        SIG,
    );
    p.a.post(&mut p.qa, &w);
    let rc = wait_cqe(&p.fabric, &p.b, &mut p.bcq.1);
    assert_eq!((rc.opcode(), rc.imm()), (MLX5_CQE_RESP_SEND_INV, key));
    assert_eq!(
        wait_cqe(&p.fabric, &p.a, &mut p.acq.0).opcode(),
        MLX5_CQE_REQ
    );
    assert_eq!(
        p.write_inline(mr.va, key, b"after"),
        MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR
    );
    assert_eq!(p.b.mr_read(&mr, 0, 5), b"bound");
}

#[test]
fn a_window_bound_on_a_uc_qp_takes_the_peers_writes() {
    let mut p = Pair::deterministic(Conn::default());
    let (mut qa, mut qb) = p.uc_qps();
    let mr = p.b.reg_mr(8192, ALL);
    let pd = p.b.pd;
    let mw = alloc_mw(&mut p.b, true, pd);
    let key = next(mw);
    let w = bind_wqe(qb.qpn, mw, key, true, &mr, mr.va, 4096, RW);
    p.b.post(&mut qb, &w);
    let c = wait_cqe(&p.fabric, &p.b, &mut p.bcq.0);
    assert_eq!(
        (c.opcode(), c.sop_opcode()),
        (MLX5_CQE_REQ, MLX5_OPCODE_UMR)
    );
    let w = mixed_wqe(
        qa.qpn,
        MLX5_OPCODE_RDMA_WRITE,
        &raddr_seg(mr.va + 8, key),
        &[Seg::Inline(b"over UC".to_vec())],
        None,
        SIG,
    );
    p.a.post(&mut qa, &w);
    assert_eq!(
        wait_cqe(&p.fabric, &p.a, &mut p.acq.0).opcode(),
        MLX5_CQE_REQ
    );
    p.fabric.run_until_idle();
    assert_eq!(p.b.mr_read(&mr, 8, 7), b"over UC");
}

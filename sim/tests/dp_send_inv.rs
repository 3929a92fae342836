//! SEND with Invalidate (`MLX5_OPCODE_SEND_INVAL`, IBTA Vol. 1 §9.4.1.4): the
//! requester carries the control segment's R_Key in the last packet's IETH; the
//! responder delivers the message, invalidates the key if it belongs to the QP's PD and
//! was created with remote invalidation enabled (`mkc.en_rinval`), and reports
//! `MLX5_CQE_RESP_SEND_INV` with the key; a later access through the key fails with a
//! remote access error. A key that cannot be invalidated fails the request.

mod common;
mod dp;

use dp::*;
use ferroverbs_hw::datapath::cqe::{
    MLX5_CQE_REQ, MLX5_CQE_REQ_ERR, MLX5_CQE_RESP_ERR, MLX5_CQE_RESP_SEND_INV,
    MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,
    MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
};
use ferroverbs_hw::datapath::wqe::MLX5_OPCODE_SEND_INVAL;
use ferroverbs_sim::wire::{frame, Opcode};

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(13) ^ seed).collect()
}

#[test]
fn send_with_invalidate_delivers_invalidates_and_reports_the_key() {
    let mut p = Pair::deterministic(Conn::default());
    let src = p.a.reg_mr(8192, ALL);
    let dst = p.b.reg_mr(8192, ALL);
    // The key the peer advertised for its buffer, invalidable remotely.
    let target = p.b.reg_mr(4096, ALL | RINV);
    assert_eq!(p.write_inline(target.va, target.key, b"before"), 0);
    assert_eq!(p.b.mr_read(&target, 0, 6), b"before");
    // A message of three packets (MTU 1024): the IETH rides on SEND_LAST.
    let payload = pattern(2500, 7);
    p.a.mr_write(&src, 0, &payload);
    let mut msg = b"hdr!".to_vec();
    msg.extend_from_slice(&payload);
    p.b.post_recv(&mut p.qb, &[sge(&dst, 0, 8192)]);
    p.fabric.capture(Some(1 << 20));
    let w = mixed_wqe(
        p.qa.qpn,
        MLX5_OPCODE_SEND_INVAL,
        &[],
        &[Seg::Inline(b"hdr!".to_vec()), Seg::Ptr(sge(&src, 0, 2500))],
        Some(target.key),
        SIG,
    );
    p.a.post(&mut p.qa, &w);
    let rc = wait_cqe(&p.fabric, &p.b, &mut p.bcq.1);
    // On the wire: SEND_FIRST, SEND_MIDDLE, then SEND_LAST_WITH_INVALIDATE with the
    // key in its IETH (and the ACK back).
    let ops: Vec<_> = p
        .fabric
        .take_captured()
        .iter()
        .filter_map(|f| frame::parse(f).ok())
        .map(|(r, _)| (r.roce.bth.opcode, r.roce.ieth.map(|i| i.rkey)))
        .filter(|(op, _)| *op != Opcode::RcAcknowledge)
        .collect();
    assert_eq!(
        ops,
        [
            (Opcode::RcSendFirst, None),
            (Opcode::RcSendMiddle, None),
            (Opcode::RcSendLastWithInvalidate, Some(target.key)),
        ]
    );
    assert_eq!(
        (rc.opcode(), rc.byte_cnt() as usize, rc.imm()),
        (MLX5_CQE_RESP_SEND_INV, msg.len(), target.key)
    );
    assert_eq!(p.b.mr_read(&dst, 0, msg.len()), msg);
    assert_eq!(
        wait_cqe(&p.fabric, &p.a, &mut p.acq.0).opcode(),
        MLX5_CQE_REQ
    );
    // The key is gone: a WRITE through it is a remote access error.
    assert_eq!(
        p.write_inline(target.va, target.key, b"after!"),
        MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR
    );
    assert_eq!(p.b.mr_read(&target, 0, 6), b"before");
}

#[test]
fn a_key_that_cannot_be_invalidated_fails_the_request() {
    // Without `en_rinval`, of another PD, unknown: each on a fresh pair.
    for case in 0..3 {
        let mut p = Pair::deterministic(Conn::default());
        let dst = p.b.reg_mr(4096, ALL);
        let other_pd = p.b.h.alloc_pd();
        let key = match case {
            0 => p.b.reg_mr(4096, ALL).key,
            1 => p.b.reg_mr_pd(4096, ALL | RINV, other_pd).key,
            _ => 0x00ab_cd01,
        };
        p.b.post_recv(&mut p.qb, &[sge(&dst, 0, 4096)]);
        let w = mixed_wqe(
            p.qa.qpn,
            MLX5_OPCODE_SEND_INVAL,
            &[],
            &[Seg::Inline(b"x".to_vec())],
            Some(key),
            SIG,
        );
        p.a.post(&mut p.qa, &w);
        let rc = wait_cqe(&p.fabric, &p.b, &mut p.bcq.1);
        assert_eq!(rc.opcode(), MLX5_CQE_RESP_ERR, "case {case}");
        assert_eq!(err(&rc).syndrome(), MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
        let sc = wait_cqe(&p.fabric, &p.a, &mut p.acq.0);
        assert_eq!(sc.opcode(), MLX5_CQE_REQ_ERR, "case {case}");
        assert_eq!(err(&sc).syndrome(), MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
        assert_eq!(p.b.h.sim.stats().data_path.rx_bad_invalidate, 1);
    }
}

#[test]
fn send_with_invalidate_is_rc_only() {
    let mut p = Pair::deterministic(Conn::default());
    let (mut qa, _qb) = p.uc_qps();
    let target = p.b.reg_mr(4096, ALL | RINV);
    let w = mixed_wqe(
        qa.qpn,
        MLX5_OPCODE_SEND_INVAL,
        &[],
        &[Seg::Inline(b"x".to_vec())],
        Some(target.key),
        SIG,
    );
    p.a.post(&mut qa, &w);
    let c = wait_cqe(&p.fabric, &p.a, &mut p.acq.0);
    assert_eq!(err(&c).syndrome(), MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
}

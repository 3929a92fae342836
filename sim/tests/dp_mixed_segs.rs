//! Send WQEs whose data part mixes inline and pointer segments, as the PRM allows and
//! UCX's mlx5 transport writes them (`ctrl | inline AM header | data pointer` for
//! active messages, `ctrl | inline TMH | data pointer` for tag matching): every mix for
//! SEND, SEND_IMM, WRITE and WRITE_IMM on RC, SEND and WRITE on UC, SEND on UD, on the
//! requester's one-doorbell fast path and its general one, over packet boundaries and
//! across the SQ's end; the message checked byte for byte at the receiver.

mod common;
mod dp;

use dp::*;
use ferroverbs_hw::datapath::cqe::{
    MLX5_CQE_REQ, MLX5_CQE_RESP_SEND, MLX5_CQE_RESP_SEND_IMM, MLX5_CQE_RESP_WR_IMM,
    MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
};
use ferroverbs_hw::datapath::wqe::{
    MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_SEND,
    MLX5_OPCODE_SEND_IMM,
};
use ferroverbs_sim::SimConfig;

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i >> 7) as u8)
        .collect()
}

/// Data parts by layout: `I` an inline segment, `P` a pointer segment, with sizes.
const LAYOUTS: &[&[(char, usize)]] = &[
    // UCX active message: an 8-byte inline AM header, then the payload by pointer.
    &[('I', 8), ('P', 100)],
    // UCX tag matching: the 16-byte TMH inline, then the payload by pointer.
    &[('I', 16), ('P', 200)],
    &[('P', 100), ('I', 8)],
    &[('I', 8), ('I', 20)],
    &[('I', 12), ('I', 1), ('I', 30)],
    &[('P', 30), ('P', 40)],
    &[('I', 3), ('P', 50), ('I', 13), ('P', 7)],
    &[('P', 1), ('I', 1), ('P', 1)],
    // Inline segments spanning WQEBBs, pointer ones between them.
    &[('I', 100), ('P', 200), ('I', 60)],
    // A message of several packets (MTU 1024) whose pieces cross packet boundaries.
    &[('I', 12), ('P', 3000), ('I', 5), ('P', 1100)],
];

/// The segments of `layout`, pointer data written into `src` of `node` (from offset
/// `at`), and the message they describe.
fn build(
    node: &Node,
    src: &Mr,
    at: usize,
    layout: &[(char, usize)],
    seed: u8,
) -> (Vec<Seg>, Vec<u8>) {
    let mut segs = Vec::new();
    let mut msg = Vec::new();
    let mut off = at;
    for (k, &(kind, n)) in layout.iter().enumerate() {
        let bytes = pattern(n, seed.wrapping_add(k as u8 * 17));
        msg.extend_from_slice(&bytes);
        if kind == 'I' {
            segs.push(Seg::Inline(bytes));
        } else {
            node.mr_write(src, off, &bytes);
            segs.push(Seg::Ptr(sge(src, off, n as u32)));
            off += n + 64;
        }
    }
    (segs, msg)
}

/// Posts `wqe` twice under one doorbell (the first is fetched with two WQEBBs
/// available, the requester's fast-path read; the second alone, the general one).
fn post_twice(node: &Node, qp: &mut Qp, wqe: &[u8]) {
    let (_, first) = node.write_wqe(qp, wqe);
    node.write_wqe(qp, wqe);
    node.ring(qp, first);
}

#[test]
fn rc_sends_with_mixed_data_parts_deliver_every_segment() {
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(16384, ALL);
    let dst = p.b.reg_mr(32768, ALL);
    for (li, layout) in LAYOUTS.iter().enumerate() {
        for imm in [None, Some(0x1234_0000 | li as u32)] {
            let (segs, msg) = build(&p.a, &src, 0, layout, li as u8);
            p.b.mr_write(&dst, 0, &vec![0xee; 32768]);
            p.b.post_recv(&mut p.qb, &[sge(&dst, 0, 16384)]);
            p.b.post_recv(&mut p.qb, &[sge(&dst, 16384, 16384)]);
            let op = if imm.is_some() {
                MLX5_OPCODE_SEND_IMM
            } else {
                MLX5_OPCODE_SEND
            };
            post_twice(&p.a, &mut p.qa, &mixed_wqe(qpn, op, &[], &segs, imm, SIG));
            for k in 0..2 {
                let rc = wait_cqe(&p.fabric, &p.b, &mut p.bcq.1);
                let want = if imm.is_some() {
                    MLX5_CQE_RESP_SEND_IMM
                } else {
                    MLX5_CQE_RESP_SEND
                };
                assert_eq!(
                    (rc.opcode(), rc.byte_cnt() as usize),
                    (want, msg.len()),
                    "layout {layout:?} imm {imm:?} copy {k}"
                );
                if let Some(v) = imm {
                    assert_eq!(rc.imm(), v);
                }
                assert_eq!(
                    p.b.mr_read(&dst, k * 16384, msg.len()),
                    msg,
                    "layout {layout:?} imm {imm:?} copy {k}"
                );
                // Nothing past the message was written.
                assert_eq!(p.b.mr_read(&dst, k * 16384 + msg.len(), 8), [0xee; 8]);
                let sc = wait_cqe(&p.fabric, &p.a, &mut p.acq.0);
                assert_eq!(sc.opcode(), MLX5_CQE_REQ, "layout {layout:?}");
            }
        }
    }
}

#[test]
fn rc_writes_with_mixed_data_parts_deliver_every_segment() {
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(16384, ALL);
    let dst = p.b.reg_mr(32768, ALL);
    for (li, layout) in LAYOUTS.iter().enumerate() {
        for imm in [None, Some(0x4321_0000 | li as u32)] {
            let (segs, msg) = build(&p.a, &src, 0, layout, 0x40 + li as u8);
            p.b.mr_write(&dst, 0, &vec![0xee; 32768]);
            let op = if imm.is_some() {
                p.b.post_recv(&mut p.qb, &[sge(&dst, 30000, 8)]);
                MLX5_OPCODE_RDMA_WRITE_IMM
            } else {
                MLX5_OPCODE_RDMA_WRITE
            };
            let w = mixed_wqe(qpn, op, &raddr_seg(dst.va + 100, dst.key), &segs, imm, SIG);
            p.a.post(&mut p.qa, &w);
            let sc = wait_cqe(&p.fabric, &p.a, &mut p.acq.0);
            assert_eq!(sc.opcode(), MLX5_CQE_REQ, "layout {layout:?} imm {imm:?}");
            if let Some(v) = imm {
                let rc = wait_cqe(&p.fabric, &p.b, &mut p.bcq.1);
                assert_eq!(
                    (rc.opcode(), rc.byte_cnt() as usize, rc.imm()),
                    (MLX5_CQE_RESP_WR_IMM, msg.len(), v)
                );
            }
            assert_eq!(p.b.mr_read(&dst, 100, msg.len()), msg, "layout {layout:?}");
            assert_eq!(p.b.mr_read(&dst, 100 + msg.len(), 8), [0xee; 8]);
            assert_eq!(p.b.mr_read(&dst, 92, 8), [0xee; 8]);
        }
    }
}

#[test]
fn a_mixed_wqe_across_the_end_of_the_send_queue() {
    let mut p = Pair::deterministic(Conn::default());
    // A second pair whose SQ has four WQEBBs: the second three-WQEBB WQE takes slots
    // 3, 0 and 1, its first inline segment running from slot 3 into slot 0.
    let qa = p.a.create_qp(&p.acq.0, &p.acq.1, 2, 6, 2);
    let qb = p.b.create_qp(&p.bcq.0, &p.bcq.1, 2, 6, 2);
    p.connect_qps(&qa, &qb, &Conn::default(), 0x777);
    let mut qa = qa;
    let mut qb = qb;
    let src = p.a.reg_mr(8192, ALL);
    let dst = p.b.reg_mr(8192, ALL);
    let layout: &[(char, usize)] = &[('I', 60), ('P', 300), ('I', 40), ('P', 5)];
    for round in 0..3u8 {
        let (segs, msg) = build(&p.a, &src, 0, layout, round);
        let w = mixed_wqe(qa.qpn, MLX5_OPCODE_SEND, &[], &segs, None, SIG);
        assert_eq!(w.len(), 160, "three WQEBBs");
        p.b.mr_write(&dst, 0, &vec![0xee; 8192]);
        p.b.post_recv(&mut qb, &[sge(&dst, 0, 4096)]);
        p.a.post(&mut qa, &w);
        let rc = wait_cqe(&p.fabric, &p.b, &mut p.bcq.1);
        assert_eq!(
            (rc.opcode(), rc.byte_cnt() as usize),
            (MLX5_CQE_RESP_SEND, msg.len()),
            "round {round}"
        );
        assert_eq!(p.b.mr_read(&dst, 0, msg.len()), msg, "round {round}");
        assert_eq!(
            wait_cqe(&p.fabric, &p.a, &mut p.acq.0).opcode(),
            MLX5_CQE_REQ
        );
    }
}

#[test]
fn uc_sends_and_writes_with_mixed_data_parts() {
    let mut p = Pair::deterministic(Conn::default());
    let (mut qa, mut qb) = p.uc_qps();
    let src = p.a.reg_mr(16384, ALL);
    let dst = p.b.reg_mr(16384, ALL);
    for (li, layout) in LAYOUTS.iter().enumerate() {
        let (segs, msg) = build(&p.a, &src, 0, layout, 0x80 + li as u8);
        p.b.mr_write(&dst, 0, &vec![0xee; 16384]);
        p.b.post_recv(&mut qb, &[sge(&dst, 0, 8192)]);
        let w = mixed_wqe(qa.qpn, MLX5_OPCODE_SEND, &[], &segs, None, SIG);
        p.a.post(&mut qa, &w);
        let rc = wait_cqe(&p.fabric, &p.b, &mut p.bcq.1);
        assert_eq!(
            (rc.opcode(), rc.byte_cnt() as usize),
            (MLX5_CQE_RESP_SEND, msg.len())
        );
        assert_eq!(p.b.mr_read(&dst, 0, msg.len()), msg, "send {layout:?}");
        assert_eq!(
            wait_cqe(&p.fabric, &p.a, &mut p.acq.0).opcode(),
            MLX5_CQE_REQ
        );
        let w = mixed_wqe(
            qa.qpn,
            MLX5_OPCODE_RDMA_WRITE,
            &raddr_seg(dst.va + 9000, dst.key),
            &segs,
            None,
            SIG,
        );
        p.a.post(&mut qa, &w);
        assert_eq!(
            wait_cqe(&p.fabric, &p.a, &mut p.acq.0).opcode(),
            MLX5_CQE_REQ
        );
        p.fabric.run_until_idle();
        assert_eq!(p.b.mr_read(&dst, 9000, msg.len()), msg, "write {layout:?}");
    }
}

#[test]
fn ud_sends_with_mixed_data_parts() {
    const QKEY: u32 = 0x1111_2222;
    let fabric = ferroverbs_sim::Fabric::new(11);
    let mut a = Node::new(SimConfig::deterministic(1, 1), [10, 0, 0, 1]);
    let mut b = Node::new(SimConfig::deterministic(2, 1), [10, 0, 0, 2]);
    fabric.attach(&a.h.sim);
    fabric.attach(&b.h.sim);
    let mut acq = a.create_cq(8);
    let mut bcq = b.create_cq(8);
    let mut qa = a.create_qp_st(2, &acq, &acq, 6, 6, 2);
    let mut qb = b.create_qp_st(2, &bcq, &bcq, 6, 6, 2);
    a.connect_ud(&qa, QKEY, 0x10);
    b.connect_ud(&qb, QKEY, 0x20);
    let src = a.reg_mr(8192, ALL);
    let dst = b.reg_mr(8192, ALL);
    let av = ud_av(b.ip, b.mac, qb.qpn, QKEY);
    // UD messages are one packet: the layouts that fit the 1024-byte MTU.
    let small = LAYOUTS
        .iter()
        .filter(|l| l.iter().map(|s| s.1).sum::<usize>() <= 1024);
    for (li, layout) in small.enumerate() {
        let (segs, msg) = build(&a, &src, 0, layout, 0xc0 + li as u8);
        b.mr_write(&dst, 0, &vec![0xee; 8192]);
        b.post_recv(&mut qb, &[sge(&dst, 0, 2048)]);
        let w = mixed_wqe(qa.qpn, MLX5_OPCODE_SEND, &av, &segs, None, SIG);
        a.post(&mut qa, &w);
        let rc = wait_cqe(&fabric, &b, &mut bcq);
        // The receive buffer starts with the 40-byte GRH area.
        assert_eq!(
            (rc.opcode(), rc.byte_cnt() as usize),
            (MLX5_CQE_RESP_SEND, 40 + msg.len()),
            "layout {layout:?}"
        );
        assert_eq!(b.mr_read(&dst, 40, msg.len()), msg, "layout {layout:?}");
        assert_eq!(wait_cqe(&fabric, &a, &mut acq).opcode(), MLX5_CQE_REQ);
    }
}

#[test]
fn inline_segments_where_the_opcode_takes_none_are_qp_operation_errors() {
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(4096, ALL);
    let dst = p.b.reg_mr(4096, ALL);
    // RDMA READ scatters into the local list: an inline segment there is malformed.
    let w = mixed_wqe(
        qpn,
        MLX5_OPCODE_RDMA_READ,
        &raddr_seg(dst.va, dst.key),
        &[Seg::Ptr(sge(&src, 0, 16)), Seg::Inline(vec![1, 2, 3])],
        None,
        SIG,
    );
    p.a.post(&mut p.qa, &w);
    let c = wait_cqe(&p.fabric, &p.a, &mut p.acq.0);
    assert_eq!(err(&c).syndrome(), MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
}

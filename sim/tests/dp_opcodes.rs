//! Every RC opcode end to end between two simulated NICs on an in-process fabric,
//! deterministic mode: data verified byte for byte at sizes 0, 1, MTU-1, MTU, MTU+1 and
//! 1 MiB; CQE fields (opcode, QPN, wqe_counter, byte count, immediate, user index).

mod common;
mod dp;

use dp::*;
use ferroverbs_hw::datapath::cqe::{
    MLX5_CQE_REQ, MLX5_CQE_RESP_SEND, MLX5_CQE_RESP_SEND_IMM, MLX5_CQE_RESP_WR_IMM,
};
use ferroverbs_hw::datapath::wqe::{
    MLX5_OPCODE_ATOMIC_CS, MLX5_OPCODE_ATOMIC_FA, MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_RDMA_WRITE,
    MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_SEND, MLX5_OPCODE_SEND_IMM,
};

const MTU: usize = 1024;
const SIZES: [usize; 6] = [0, 1, MTU - 1, MTU, MTU + 1, 1 << 20];

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

#[test]
fn send_and_send_with_immediate_at_every_size() {
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(1 << 20, ALL);
    let dst = p.b.reg_mr(1 << 20, ALL);
    for (k, &n) in SIZES.iter().enumerate() {
        for imm in [None, Some(0xdead_0000 | k as u32)] {
            let data = pattern(n, k as u8 + imm.is_some() as u8);
            p.a.mr_write(&src, 0, &data);
            p.b.mr_write(&dst, 0, &vec![0xee; n + 8]);
            let ridx = p.b.post_recv(&mut p.qb, &[sge(&dst, 0, (1 << 20) as u32)]);
            let sg = if n == 0 {
                vec![]
            } else {
                vec![sge(&src, 0, n as u32)]
            };
            let idx = p.a.post(&mut p.qa, &send_wqe(qpn, &sg, imm, SIG));
            let rc = wait_cqe(&p.fabric, &p.b, &mut p.bcq.1);
            let want = if imm.is_some() {
                MLX5_CQE_RESP_SEND_IMM
            } else {
                MLX5_CQE_RESP_SEND
            };
            assert_eq!(rc.opcode(), want, "size {n}");
            assert_eq!(rc.byte_cnt() as usize, n);
            assert_eq!(rc.qpn(), p.qb.qpn);
            assert_eq!(rc.src_qpn(), p.qa.qpn);
            assert_eq!(u32::from(rc.wqe_counter()), ridx & 0xffff);
            assert_eq!(rc.srqn_uidx(), p.qb.uidx);
            if let Some(i) = imm {
                assert_eq!(rc.imm(), i);
            }
            assert_eq!(p.b.mr_read(&dst, 0, n), data, "size {n}");
            assert_eq!(
                p.b.mr_read(&dst, n, 8),
                vec![0xee; 8],
                "no byte past the message"
            );
            let sc = wait_cqe(&p.fabric, &p.a, &mut p.acq.0);
            assert_eq!(sc.opcode(), MLX5_CQE_REQ);
            let sop = if imm.is_some() {
                MLX5_OPCODE_SEND_IMM
            } else {
                MLX5_OPCODE_SEND
            };
            assert_eq!(
                (sc.sop_opcode(), sc.qpn(), sc.wqe_counter()),
                (sop, p.qa.qpn, idx)
            );
            assert_eq!(sc.srqn_uidx(), p.qa.uidx);
        }
    }
    let s = p.b.h.sim.stats().data_path;
    assert_eq!(s.rx_bad_icrc + s.rx_malformed + s.rx_unexpected, 0);
}

#[test]
fn rdma_write_and_write_with_immediate_at_every_size() {
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(1 << 20, ALL);
    let dst = p.b.reg_mr((1 << 20) + 64, ALL);
    for (k, &n) in SIZES.iter().enumerate() {
        for imm in [None, Some(0x0102_0300 | k as u32)] {
            let data = pattern(n, 7 + k as u8);
            p.a.mr_write(&src, 0, &data);
            p.b.mr_write(&dst, 0, &vec![0x5a; n + 40]);
            let ridx = imm.map(|_| p.b.post_recv(&mut p.qb, &[]));
            let sg = if n == 0 {
                vec![]
            } else {
                vec![sge(&src, 0, n as u32)]
            };
            let idx = p.a.post(
                &mut p.qa,
                &rdma_wqe(qpn, false, dst.va + 32, dst.key, &sg, imm, SIG),
            );
            let sc = wait_cqe(&p.fabric, &p.a, &mut p.acq.0);
            assert_eq!(sc.opcode(), MLX5_CQE_REQ, "size {n}: {:?}", err(&sc));
            let sop = if imm.is_some() {
                MLX5_OPCODE_RDMA_WRITE_IMM
            } else {
                MLX5_OPCODE_RDMA_WRITE
            };
            assert_eq!((sc.sop_opcode(), sc.wqe_counter()), (sop, idx));
            assert_eq!(p.b.mr_read(&dst, 32, n), data, "size {n}");
            assert_eq!(p.b.mr_read(&dst, 0, 32), vec![0x5a; 32]);
            assert_eq!(p.b.mr_read(&dst, 32 + n, 8), vec![0x5a; 8]);
            if let (Some(i), Some(r)) = (imm, ridx) {
                let rc = wait_cqe(&p.fabric, &p.b, &mut p.bcq.1);
                assert_eq!(rc.opcode(), MLX5_CQE_RESP_WR_IMM);
                assert_eq!((rc.imm(), rc.byte_cnt() as usize), (i, n));
                assert_eq!(u32::from(rc.wqe_counter()), r);
            } else {
                assert!(
                    p.b.poll(&mut p.bcq.1).is_none(),
                    "plain WRITE uses no receive"
                );
            }
        }
    }
}

#[test]
fn rdma_read_at_every_size() {
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let local = p.a.reg_mr((1 << 20) + 16, ALL);
    let remote = p.b.reg_mr(1 << 20, ALL);
    for (k, &n) in SIZES.iter().enumerate() {
        let data = pattern(n, 99 + k as u8);
        p.b.mr_write(&remote, 0, &data);
        p.a.mr_write(&local, 0, &vec![0x11; n + 16]);
        let sg = if n == 0 {
            vec![]
        } else {
            vec![sge(&local, 8, n as u32)]
        };
        let idx = p.a.post(
            &mut p.qa,
            &rdma_wqe(qpn, true, remote.va, remote.key, &sg, None, SIG),
        );
        let sc = wait_cqe(&p.fabric, &p.a, &mut p.acq.0);
        assert_eq!(sc.opcode(), MLX5_CQE_REQ, "size {n}: {:?}", err(&sc));
        assert_eq!(
            (sc.sop_opcode(), sc.wqe_counter(), sc.byte_cnt() as usize),
            (MLX5_OPCODE_RDMA_READ, idx, n)
        );
        assert_eq!(p.a.mr_read(&local, 8, n), data, "size {n}");
        assert_eq!(p.a.mr_read(&local, 0, 8), vec![0x11; 8]);
        assert_eq!(p.a.mr_read(&local, 8 + n, 8), vec![0x11; 8]);
    }
    let s = p.b.h.sim.stats().data_path;
    // 0, 1, 1023, 1024 → 1 response each, 1025 → 2, 1 MiB → 1024.
    assert_eq!(s.read_responses, 4 + 2 + 1024);
}

#[test]
fn atomics_compare_swap_and_fetch_add() {
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let local = p.a.reg_mr(64, ALL);
    let remote = p.b.reg_mr(64, ALL);
    // Host byte order (little-endian) remote operand.
    p.b.mr_write(&remote, 8, &100u64.to_le_bytes());
    let idx = p.a.post(
        &mut p.qa,
        &atomic_wqe(
            qpn,
            remote.va + 8,
            remote.key,
            sge(&local, 0, 8),
            5,
            None,
            SIG,
        ),
    );
    let c = wait_cqe(&p.fabric, &p.a, &mut p.acq.0);
    assert_eq!(
        (c.opcode(), c.sop_opcode(), c.wqe_counter(), c.byte_cnt()),
        (MLX5_CQE_REQ, MLX5_OPCODE_ATOMIC_FA, idx, 8)
    );
    // The original value comes back big-endian (ConnectX atomic replies).
    assert_eq!(p.a.mr_read(&local, 0, 8), 100u64.to_be_bytes());
    assert_eq!(p.b.mr_read(&remote, 8, 8), 105u64.to_le_bytes());
    // CAS that fails, then one that succeeds.
    for (compare, swap, orig, after) in [(7u64, 9u64, 105u64, 105u64), (105, 9, 105, 9)] {
        p.a.post(
            &mut p.qa,
            &atomic_wqe(
                qpn,
                remote.va + 8,
                remote.key,
                sge(&local, 16, 8),
                swap,
                Some(compare),
                SIG,
            ),
        );
        let c = wait_cqe(&p.fabric, &p.a, &mut p.acq.0);
        assert_eq!(
            (c.opcode(), c.sop_opcode()),
            (MLX5_CQE_REQ, MLX5_OPCODE_ATOMIC_CS)
        );
        assert_eq!(p.a.mr_read(&local, 16, 8), orig.to_be_bytes());
        assert_eq!(p.b.mr_read(&remote, 8, 8), after.to_le_bytes());
    }
    assert_eq!(p.b.h.sim.stats().data_path.atomics, 3);
}

#[test]
fn inline_gather_scatter_and_blueflame() {
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(8192, ALL);
    let dst = p.b.reg_mr(8192, ALL);
    // Inline SEND of 60 bytes, received into a 3-entry scatter list.
    let msg = pattern(60, 3);
    p.b.post_recv(
        &mut p.qb,
        &[sge(&dst, 0, 10), sge(&dst, 100, 20), sge(&dst, 1000, 100)],
    );
    p.a.post(&mut p.qa, &inline_wqe(qpn, &msg, None, SIG));
    let rc = wait_cqe(&p.fabric, &p.b, &mut p.bcq.1);
    assert_eq!((rc.opcode(), rc.byte_cnt()), (MLX5_CQE_RESP_SEND, 60));
    assert_eq!(p.b.mr_read(&dst, 0, 10), msg[..10]);
    assert_eq!(p.b.mr_read(&dst, 100, 20), msg[10..30]);
    assert_eq!(p.b.mr_read(&dst, 1000, 30), msg[30..]);
    wait_cqe(&p.fabric, &p.a, &mut p.acq.0);
    // Inline WRITE.
    p.a.post(
        &mut p.qa,
        &inline_wqe(qpn, &msg[..33], Some((dst.va + 4000, dst.key)), SIG),
    );
    wait_cqe(&p.fabric, &p.a, &mut p.acq.0);
    assert_eq!(p.b.mr_read(&dst, 4000, 33), msg[..33]);
    // A 3-entry gather list spanning a page boundary, rung with BlueFlame.
    let g = pattern(3000, 9);
    p.a.mr_write(&src, 4000, &g);
    p.b.post_recv(&mut p.qb, &[sge(&dst, 0, 4096)]);
    let w = send_wqe(
        qpn,
        &[
            sge(&src, 4000, 1000),
            sge(&src, 5000, 1500),
            sge(&src, 6500, 500),
        ],
        None,
        SIG,
    );
    let (idx, _) = p.a.write_wqe(&mut p.qa, &w);
    let mut stamped = w.clone();
    stamped[1..3].copy_from_slice(&idx.to_be_bytes());
    p.a.ring_bf(&p.qa, &stamped);
    let rc = wait_cqe(&p.fabric, &p.b, &mut p.bcq.1);
    assert_eq!(rc.byte_cnt(), 3000);
    assert_eq!(p.b.mr_read(&dst, 0, 3000), g);
    let sc = wait_cqe(&p.fabric, &p.a, &mut p.acq.0);
    assert_eq!(sc.wqe_counter(), idx);
}

#[test]
fn unsignaled_wqes_complete_silently_and_the_sq_wraps() {
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(4096, ALL);
    let dst = p.b.reg_mr(4096, ALL);
    // 256-WQEBB SQ: 1000 WRITEs, only every 50th signaled, wrap the ring several times.
    let mut signaled = Vec::new();
    for i in 0..1000u32 {
        let flags = if i % 50 == 49 { SIG } else { 0 };
        p.a.mr_write(&src, 0, &i.to_be_bytes());
        let idx = p.a.post(
            &mut p.qa,
            &rdma_wqe(
                qpn,
                false,
                dst.va + 8 * u64::from(i % 64),
                dst.key,
                &[sge(&src, 0, 4)],
                None,
                flags,
            ),
        );
        if flags != 0 {
            signaled.push(idx);
            let c = wait_cqe(&p.fabric, &p.a, &mut p.acq.0);
            assert_eq!(c.wqe_counter(), idx);
        }
        if i % 16 == 0 {
            p.fabric.run_until_idle();
        }
    }
    p.fabric.run_until_idle();
    assert!(p.a.poll(&mut p.acq.0).is_none());
    assert_eq!(signaled.len(), 20);
    let s = p.a.h.sim.stats().data_path;
    assert_eq!(s.wqes, 1000);
    assert_eq!(s.cqes, 20);
}

#[test]
fn two_qps_share_a_cq_and_sends_arrive_in_order() {
    let mut p = Pair::deterministic(Conn::default());
    let src = p.a.reg_mr(4096, ALL);
    let dst = p.b.reg_mr(64 * 100, ALL);
    // A second QP pair sharing A's send CQ and B's receive CQ.
    let mut qa2 = p.a.create_qp(&p.acq.0, &p.acq.0, 6, 6, 1);
    let mut qb2 = p.b.create_qp(&p.bcq.0, &p.bcq.1, 6, 6, 1);
    let c = Conn::default();
    p.connect_qps(&qa2, &qb2, &c, 0x500);
    for i in 0..100usize {
        p.b.post_recv(
            if i % 2 == 0 { &mut p.qb } else { &mut qb2 },
            &[sge(&dst, i * 64, 64)],
        );
    }
    for i in 0..100u32 {
        p.a.mr_write(&src, (i as usize) * 4, &i.to_be_bytes());
        let qp = if i % 2 == 0 { &mut p.qa } else { &mut qa2 };
        let qpn = qp.qpn;
        p.a.post(
            qp,
            &send_wqe(qpn, &[sge(&src, i as usize * 4, 4)], Some(i), SIG),
        );
    }
    p.fabric.run_until_idle();
    let mut seen = [0u32; 2];
    for _ in 0..100 {
        let c = p.b.poll(&mut p.bcq.1).expect("receive CQE");
        let which = usize::from(c.qpn() == qb2.qpn);
        assert_eq!(c.imm(), seen[which] * 2 + which as u32, "in order per QP");
        assert_eq!(u32::from(c.wqe_counter()), seen[which]);
        seen[which] += 1;
    }
    let mut sends = 0;
    while let Some(c) = p.a.poll(&mut p.acq.0) {
        assert_eq!(c.opcode(), MLX5_CQE_REQ);
        sends += 1;
    }
    assert_eq!(sends, 100);
    for i in 0..100usize {
        assert_eq!(p.b.mr_read(&dst, i * 64, 4), (i as u32).to_be_bytes());
    }
}

#[test]
fn wire_bytes_are_segmented_rocev2() {
    use ferroverbs_sim::wire::{frame, Opcode};
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(4096, ALL);
    let dst = p.b.reg_mr(4096, ALL);
    p.fabric.capture(Some(100));
    p.b.post_recv(&mut p.qb, &[sge(&dst, 0, 4096)]);
    p.a.post(
        &mut p.qa,
        &send_wqe(qpn, &[sge(&src, 0, 2 * MTU as u32 + 5)], Some(0xabcd), SIG),
    );
    p.fabric.run_until_idle();
    let frames = p.fabric.take_captured();
    let parsed: Vec<_> = frames
        .iter()
        .map(|f| frame::parse(f).expect("valid RoCEv2 with ICRC"))
        .collect();
    let ops: Vec<Opcode> = parsed.iter().map(|(r, _)| r.roce.opcode()).collect();
    assert_eq!(
        ops,
        [
            Opcode::RcSendFirst,
            Opcode::RcSendMiddle,
            Opcode::RcSendLastWithImmediate,
            Opcode::RcAcknowledge
        ]
    );
    let psns: Vec<u32> = parsed.iter().map(|(r, _)| r.roce.bth.psn.value()).collect();
    assert_eq!(psns, [0x10, 0x11, 0x12, 0x12]);
    let lens: Vec<usize> = parsed.iter().map(|(_, pl)| pl.len()).collect();
    assert_eq!(lens, [MTU, MTU, 5, 0]);
    let (first, _) = &parsed[0];
    assert_eq!(first.udp.dst_port, 4791);
    assert_eq!(first.ipv4.src_addr.octets(), p.a.ip);
    assert_eq!(first.ipv4.dst_addr.octets(), p.b.ip);
    assert_eq!(first.ethernet.dst_addr.0, p.b.mac);
    assert_eq!(first.roce.bth.dest_qp, p.qb.qpn);
    assert!(parsed[2].0.roce.bth.ack_req);
    assert_eq!(parsed[2].0.roce.immdt.unwrap().immediate, 0xabcd);
    let ack = parsed[3].0.roce.aeth.unwrap();
    assert_eq!(ack.msn, 1);
}

#[test]
fn query_qp_reports_the_data_path_state() {
    use ferroverbs_hw::control::qp::qpc;
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(8192, ALL);
    let dst = p.b.reg_mr(8192, ALL);
    for _ in 0..3 {
        p.b.post_recv(&mut p.qb, &[sge(&dst, 0, 8192)]);
        // 2500 bytes at MTU 1024: 3 packets each.
        p.a.post(&mut p.qa, &send_wqe(qpn, &[sge(&src, 0, 2500)], None, SIG));
    }
    p.fabric.run_until_idle();
    let a = p.a.h.query_qp(p.qa.qpn);
    let b = p.b.h.query_qp(p.qb.qpn);
    assert_eq!(qpc::next_send_psn.get(&a), 0x10 + 9);
    assert_eq!(qpc::last_acked_psn.get(&a), 0x10 + 8);
    assert_eq!(qpc::hw_sq_wqebb_counter.get(&a), 3);
    assert_eq!(qpc::next_rcv_psn.get(&b), 0x10 + 9);
    assert_eq!(qpc::rmsn.get(&b), 3);
    assert_eq!(qpc::hw_rq_counter.get(&b), 3);
}

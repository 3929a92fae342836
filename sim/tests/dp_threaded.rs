//! Threaded mode: each device progresses on its own thread; the test only writes WQEs,
//! rings doorbells and polls CQ memory (it never steps anything). Must pass reliably on
//! a 2-core machine.

mod common;
mod dp;

use dp::*;
use ferroverbs_hw::datapath::cqe::*;
use ferroverbs_sim::SimConfig;

fn pair() -> Pair {
    // The ACK timer runs on real time here, while the device threads may wait 100 ms
    // or more for a CPU: at the default 67 ms (exponent 14) a spurious timeout costs a
    // retransmission, eight in a row fail the WR. The in-process fabric loses nothing,
    // so no timeout is needed: 4.096 µs × 2^23 = 34 s; running the retry budget out
    // (retry_count 7) then takes 8 × 34 s, far past `wait_cqe`'s 60 s guard.
    let conn = Conn {
        ack_timeout: 23,
        ..Conn::default()
    };
    let p = Pair::new(|s| SimConfig::threaded(s, 1), conn);
    assert!(p.a.h.sim.threaded() && p.b.h.sim.threaded());
    p
}

#[test]
fn every_opcode_with_only_polling() {
    let mut p = pair();
    let qpn = p.qa.qpn;
    let a = p.a.reg_mr((1 << 20) + 64, ALL);
    let b = p.b.reg_mr((1 << 20) + 64, ALL);
    for n in [0usize, 1, 1023, 1024, 1025, 1 << 20] {
        let data: Vec<u8> = (0..n).map(|i| (i * 7 + n) as u8).collect();
        // SEND.
        p.a.mr_write(&a, 0, &data);
        p.b.post_recv(&mut p.qb, &[sge(&b, 0, (1 << 20) + 64)]);
        let sg = if n == 0 {
            vec![]
        } else {
            vec![sge(&a, 0, n as u32)]
        };
        p.a.post(&mut p.qa, &send_wqe(qpn, &sg, Some(9), SIG));
        let r = wait_cqe(&p.fabric, &p.b, &mut p.bcq.1);
        assert_eq!(
            (r.opcode(), r.byte_cnt() as usize, r.imm()),
            (MLX5_CQE_RESP_SEND_IMM, n, 9)
        );
        assert_eq!(p.b.mr_read(&b, 0, n), data);
        assert_eq!(
            wait_cqe(&p.fabric, &p.a, &mut p.acq.0).opcode(),
            MLX5_CQE_REQ
        );
        // WRITE back from B? A writes to B at offset 64.
        p.a.post(
            &mut p.qa,
            &rdma_wqe(qpn, false, b.va + 64, b.key, &sg, None, SIG),
        );
        assert_eq!(
            wait_cqe(&p.fabric, &p.a, &mut p.acq.0).opcode(),
            MLX5_CQE_REQ
        );
        assert_eq!(p.b.mr_read(&b, 64, n), data);
        // READ it back into A at offset 32.
        let back = if n == 0 {
            vec![]
        } else {
            vec![sge(&a, 32, n as u32)]
        };
        p.a.post(
            &mut p.qa,
            &rdma_wqe(qpn, true, b.va + 64, b.key, &back, None, SIG),
        );
        let c = wait_cqe(&p.fabric, &p.a, &mut p.acq.0);
        assert_eq!((c.opcode(), c.byte_cnt() as usize), (MLX5_CQE_REQ, n));
        assert_eq!(p.a.mr_read(&a, 32, n), data);
    }
    // Atomics.
    p.b.mr_write(&b, 0, &41u64.to_le_bytes());
    p.a.post(
        &mut p.qa,
        &atomic_wqe(qpn, b.va, b.key, sge(&a, 0, 8), 1, None, SIG),
    );
    assert_eq!(
        wait_cqe(&p.fabric, &p.a, &mut p.acq.0).opcode(),
        MLX5_CQE_REQ
    );
    assert_eq!(p.a.mr_read(&a, 0, 8), 41u64.to_be_bytes());
    p.a.post(
        &mut p.qa,
        &atomic_wqe(qpn, b.va, b.key, sge(&a, 8, 8), 7, Some(42), SIG),
    );
    assert_eq!(
        wait_cqe(&p.fabric, &p.a, &mut p.acq.0).opcode(),
        MLX5_CQE_REQ
    );
    assert_eq!(p.a.mr_read(&a, 8, 8), 42u64.to_be_bytes());
    assert_eq!(p.b.mr_read(&b, 0, 8), 7u64.to_le_bytes());
}

#[test]
fn ping_pong_and_errors() {
    let mut p = pair();
    let (qa, qb) = (p.qa.qpn, p.qb.qpn);
    let a = p.a.reg_mr(4096, ALL);
    let b = p.b.reg_mr(4096, ALL);
    for i in 0..2000u32 {
        p.b.post_recv(&mut p.qb, &[sge(&b, 0, 64)]);
        p.a.post_recv(&mut p.qa, &[sge(&a, 0, 64)]);
        p.a.mr_write(&a, 100, &i.to_le_bytes());
        p.a.post(
            &mut p.qa,
            &send_wqe(
                qa,
                &[sge(&a, 100, 4)],
                None,
                if i % 64 == 0 { SIG } else { 0 },
            ),
        );
        let r = wait_cqe(&p.fabric, &p.b, &mut p.bcq.1);
        assert_eq!(r.opcode(), MLX5_CQE_RESP_SEND, "ping {i}");
        assert_eq!(p.b.mr_read(&b, 0, 4), i.to_le_bytes());
        p.b.post(&mut p.qb, &send_wqe(qb, &[sge(&b, 0, 4)], None, 0));
        let r = wait_cqe(&p.fabric, &p.a, &mut p.acq.1);
        assert_eq!(r.opcode(), MLX5_CQE_RESP_SEND, "pong {i}");
        if i % 64 == 0 {
            assert_eq!(
                wait_cqe(&p.fabric, &p.a, &mut p.acq.0).opcode(),
                MLX5_CQE_REQ
            );
        }
    }
    // A remote access error, then everything behind it flushed, with only polling.
    p.b.post_recv(&mut p.qb, &[sge(&b, 0, 64)]);
    p.a.post(
        &mut p.qa,
        &rdma_wqe(qa, false, b.va, b.key ^ 0x100, &[sge(&a, 0, 8)], None, SIG),
    );
    p.a.post(&mut p.qa, &send_wqe(qa, &[sge(&a, 0, 8)], None, 0));
    let e = err(&wait_cqe(&p.fabric, &p.a, &mut p.acq.0));
    assert_eq!(e.syndrome(), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
    let f = err(&wait_cqe(&p.fabric, &p.a, &mut p.acq.0));
    assert_eq!(f.syndrome(), MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
    // B went to error: its posted receive is flushed too.
    let f = err(&wait_cqe(&p.fabric, &p.b, &mut p.bcq.1));
    assert_eq!(f.syndrome(), MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
    // Receives posted to the QP in error are flushed by the device thread on its own.
    p.a.post_recv(&mut p.qa, &[sge(&a, 0, 64)]);
    let f = err(&wait_cqe(&p.fabric, &p.a, &mut p.acq.1));
    assert_eq!(f.syndrome(), MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
}

#[test]
fn threads_stop_when_the_devices_are_dropped() {
    let p = pair();
    let (wa, wb) = (p.a.h.sim.downgrade(), p.b.h.sim.downgrade());
    let fabric = p.fabric.clone();
    drop(p);
    assert!(
        wa.upgrade().is_none() && wb.upgrade().is_none(),
        "devices (and their joined threads) are gone"
    );
    assert_eq!(fabric.step(), 0);
}

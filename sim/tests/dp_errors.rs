//! The data path's error table: each case with the syndrome the requester's and the
//! responder's CQEs carry, the QP state afterwards, and the flush of everything
//! outstanding (`WR_FLUSH_ERR`, counted exactly, each with its own `wqe_counter`).

mod common;
mod dp;

use dp::*;
use ferroverbs_hw::control::qp::{QpTransition, QpcState};
use ferroverbs_hw::datapath::cqe::*;
use ferroverbs_hw::datapath::wqe::{MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_SEND};

fn expect_err(c: &ferroverbs_hw::datapath::cqe::Cqe64, op: u8, synd: u8) -> ErrCqe {
    let e = err(c);
    assert_eq!((e.opcode(), e.syndrome()), (op, synd), "{e:?}");
    e
}

/// The requester's error and the QP states of both sides.
fn requester_fails(p: &mut Pair, wqe: Vec<u8>, synd: u8) -> ErrCqe {
    let idx = p.a.post(&mut p.qa, &wqe);
    let c = wait_cqe(&p.fabric, &p.a, &mut p.acq.0);
    let e = expect_err(&c, MLX5_CQE_REQ_ERR, synd);
    assert_eq!(e.wqe_counter(), idx);
    assert_eq!(e.qpn(), p.qa.qpn);
    assert_eq!(e.srqn(), p.qa.uidx);
    assert_eq!(p.a.qp_state(&p.qa), QpcState::Err.value());
    e
}

#[test]
fn local_errors() {
    // Bad lkey.
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(4096, ALL);
    let bad = (src.key & !0xff) | ((src.key + 1) & 0xff);
    let e = requester_fails(
        &mut p,
        send_wqe(qpn, &[(src.va, 8, bad)], None, SIG),
        MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
    );
    assert_eq!(e.wqe_opcode(), MLX5_OPCODE_SEND);
    assert_eq!(e.vendor_err_synd(), 0x52);
    // The responder never saw a packet; it stays in RTS.
    assert_eq!(p.b.qp_state(&p.qb), QpcState::Rts.value());

    // An lkey of another PD.
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let pd2 = p.a.h.alloc_pd();
    let other = p.a.reg_mr_pd(4096, ALL, pd2);
    requester_fails(
        &mut p,
        send_wqe(qpn, &[sge(&other, 0, 8)], None, SIG),
        MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
    );

    // Out of the region's bounds; the invalid-lkey terminator used as a key.
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(4096, ALL);
    requester_fails(
        &mut p,
        send_wqe(qpn, &[sge(&src, 4000, 97)], None, SIG),
        MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
    );
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    requester_fails(
        &mut p,
        send_wqe(qpn, &[(0, 8, 0x100)], None, SIG),
        MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
    );

    // A READ into a region without local write.
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let ro = p.a.reg_mr(4096, LR);
    let remote = p.b.reg_mr(4096, ALL);
    requester_fails(
        &mut p,
        rdma_wqe(
            qpn,
            true,
            remote.va,
            remote.key,
            &[sge(&ro, 0, 8)],
            None,
            SIG,
        ),
        MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
    );

    // Bad opcode, DS 0: local QP operation errors.
    for (op, ds) in [(0x3e, 2), (MLX5_OPCODE_SEND, 0)] {
        let mut p = Pair::deterministic(Conn::default());
        let qpn = p.qa.qpn;
        let e = requester_fails(
            &mut p,
            raw_wqe(qpn, op, ds, SIG),
            MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
        );
        assert_eq!(e.wqe_opcode(), op);
    }
    // A WQE in the ring naming another QP than the doorbell that announced it.
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let (idx, mut first) =
        p.a.write_wqe(&mut p.qa, &raw_wqe(qpn ^ 1, MLX5_OPCODE_SEND, 1, SIG));
    first[4..7].copy_from_slice(&qpn.to_be_bytes()[1..]);
    p.a.ring(&p.qa, first);
    let c = wait_cqe(&p.fabric, &p.a, &mut p.acq.0);
    let e = expect_err(&c, MLX5_CQE_REQ_ERR, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
    assert_eq!(e.wqe_counter(), idx);
    // A doorbell naming a QP that does not exist is ignored and counted.
    let before = p.a.h.sim.stats().data_path.stray_doorbells;
    p.a.ring(&p.qa, [0, 0, 0, 0x0a, 0xff, 0xff, 0xf0, 1]);
    assert_eq!(p.a.h.sim.stats().data_path.stray_doorbells, before + 1);

    // Inline data longer than the WQE's segments.
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let mut w = inline_wqe(qpn, &[1, 2, 3], None, SIG);
    w[16..20].copy_from_slice(&(0x8000_0000u32 | 200).to_be_bytes());
    requester_fails(&mut p, w, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
}

#[test]
fn remote_access_errors() {
    struct Case {
        name: &'static str,
        access: u8,
        op: u8,
        off: u64,
        len: u32,
        bad_key: bool,
    }
    const W: u8 = 0;
    const R: u8 = 1;
    const A: u8 = 2;
    let cases = [
        Case {
            name: "write, invalid rkey",
            access: ALL,
            op: W,
            off: 0,
            len: 8,
            bad_key: true,
        },
        Case {
            name: "write, out of bounds",
            access: ALL,
            op: W,
            off: 4090,
            len: 8,
            bad_key: false,
        },
        Case {
            name: "write, no REMOTE_WRITE",
            access: ALL & !RW,
            op: W,
            off: 0,
            len: 8,
            bad_key: false,
        },
        Case {
            name: "read, invalid rkey",
            access: ALL,
            op: R,
            off: 0,
            len: 8,
            bad_key: true,
        },
        Case {
            name: "read, out of bounds",
            access: ALL,
            op: R,
            off: 4000,
            len: 200,
            bad_key: false,
        },
        Case {
            name: "read, no REMOTE_READ",
            access: ALL & !RR,
            op: R,
            off: 0,
            len: 8,
            bad_key: false,
        },
        Case {
            name: "atomic, invalid rkey",
            access: ALL,
            op: A,
            off: 0,
            len: 8,
            bad_key: true,
        },
        Case {
            name: "atomic, out of bounds",
            access: ALL,
            op: A,
            off: 4096,
            len: 8,
            bad_key: false,
        },
        Case {
            name: "atomic, no REMOTE_ATOMIC",
            access: ALL & !RA,
            op: A,
            off: 0,
            len: 8,
            bad_key: false,
        },
    ];
    for c in cases {
        let mut p = Pair::deterministic(Conn::default());
        let qpn = p.qa.qpn;
        let local = p.a.reg_mr(4096, ALL);
        let remote = p.b.reg_mr(4096, c.access);
        p.b.mr_write(&remote, 0, &[0x77; 64]);
        let rkey = if c.bad_key {
            remote.key ^ 0x100
        } else {
            remote.key
        };
        let raddr = remote.va + c.off;
        let wqe = match c.op {
            W => rdma_wqe(qpn, false, raddr, rkey, &[sge(&local, 0, c.len)], None, SIG),
            R => rdma_wqe(qpn, true, raddr, rkey, &[sge(&local, 0, c.len)], None, SIG),
            _ => atomic_wqe(qpn, raddr, rkey, sge(&local, 0, 8), 1, None, SIG),
        };
        // Something posted behind it is flushed.
        let rb = p.b.post_recv(&mut p.qb, &[sge(&remote, 0, 64)]);
        let idx = p.a.post(&mut p.qa, &wqe);
        let idx2 =
            p.a.post(&mut p.qa, &send_wqe(qpn, &[sge(&local, 0, 8)], None, 0));
        p.fabric.run_until_idle();
        let c1 =
            p.a.poll(&mut p.acq.0)
                .unwrap_or_else(|| panic!("{}: no CQE", c.name));
        let e = expect_err(&c1, MLX5_CQE_REQ_ERR, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
        assert_eq!(e.wqe_counter(), idx, "{}", c.name);
        let c2 =
            p.a.poll(&mut p.acq.0)
                .expect("flush of the unsignaled SEND");
        let e2 = expect_err(&c2, MLX5_CQE_REQ_ERR, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
        assert_eq!((e2.wqe_counter(), e2.vendor_err_synd()), (idx2, 0xf9));
        assert!(p.a.poll(&mut p.acq.0).is_none());
        // The responder went to error too and flushed its posted receive.
        assert_eq!(p.b.qp_state(&p.qb), QpcState::Err.value(), "{}", c.name);
        let r = p.b.poll(&mut p.bcq.1).expect("responder flush");
        let er = expect_err(&r, MLX5_CQE_RESP_ERR, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
        assert_eq!(u32::from(er.wqe_counter()), rb);
        // Memory untouched.
        assert_eq!(p.b.mr_read(&remote, 0, 64), vec![0x77; 64], "{}", c.name);
        assert_eq!(p.a.mr_read(&local, 0, 8), vec![0; 8], "{}", c.name);
    }
}

#[test]
fn invalid_requests() {
    // A misaligned atomic.
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let local = p.a.reg_mr(64, ALL);
    let remote = p.b.reg_mr(64, ALL);
    requester_fails(
        &mut p,
        atomic_wqe(
            qpn,
            remote.va + 4,
            remote.key,
            sge(&local, 0, 8),
            1,
            Some(0),
            SIG,
        ),
        MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
    );
    assert_eq!(p.b.qp_state(&p.qb), QpcState::Err.value());

    // Operations the responder QP does not enable: READ without rre, WRITE without
    // rwe, atomics without rae.
    for (conn, wqe_kind) in [
        (
            Conn {
                rre: false,
                ..Conn::default()
            },
            0,
        ),
        (
            Conn {
                rwe: false,
                ..Conn::default()
            },
            1,
        ),
        (
            Conn {
                rae: false,
                ..Conn::default()
            },
            2,
        ),
    ] {
        let mut p = Pair::deterministic(conn);
        let qpn = p.qa.qpn;
        let local = p.a.reg_mr(64, ALL);
        let remote = p.b.reg_mr(64, ALL);
        let w = match wqe_kind {
            0 => rdma_wqe(
                qpn,
                true,
                remote.va,
                remote.key,
                &[sge(&local, 0, 8)],
                None,
                SIG,
            ),
            1 => rdma_wqe(
                qpn,
                false,
                remote.va,
                remote.key,
                &[sge(&local, 0, 8)],
                None,
                SIG,
            ),
            _ => atomic_wqe(qpn, remote.va, remote.key, sge(&local, 0, 8), 1, None, SIG),
        };
        let e = requester_fails(&mut p, w, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
        assert_eq!(e.vendor_err_synd(), 0x8a);
    }
}

#[test]
fn receive_side_errors() {
    // Receive buffer too small: the responder completes the receive with a local length
    // error, the requester gets an invalid-request NAK.
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(4096, ALL);
    let dst = p.b.reg_mr(4096, ALL);
    let r = p.b.post_recv(&mut p.qb, &[sge(&dst, 0, 100)]);
    requester_fails(
        &mut p,
        send_wqe(qpn, &[sge(&src, 0, 101)], None, SIG),
        MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
    );
    let c = p.b.poll(&mut p.bcq.1).expect("responder error CQE");
    let e = expect_err(&c, MLX5_CQE_RESP_ERR, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
    assert_eq!(
        (u32::from(e.wqe_counter()), e.qpn(), e.srqn()),
        (r, p.qb.qpn, p.qb.uidx)
    );
    assert_eq!(p.b.qp_state(&p.qb), QpcState::Err.value());

    // Too small for the second packet of a multi-packet SEND.
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(4096, ALL);
    let dst = p.b.reg_mr(4096, ALL);
    p.b.post_recv(&mut p.qb, &[sge(&dst, 0, 1500)]);
    requester_fails(
        &mut p,
        send_wqe(qpn, &[sge(&src, 0, 2500)], None, SIG),
        MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
    );
    let c = p.b.poll(&mut p.bcq.1).unwrap();
    expect_err(&c, MLX5_CQE_RESP_ERR, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);

    // Receive buffer without LOCAL_WRITE: local protection error on the responder,
    // remote operational error on the requester.
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(4096, ALL);
    let ro = p.b.reg_mr(4096, LR | RR);
    let r = p.b.post_recv(&mut p.qb, &[sge(&ro, 0, 100)]);
    requester_fails(
        &mut p,
        send_wqe(qpn, &[sge(&src, 0, 10)], None, SIG),
        MLX5_CQE_SYNDROME_REMOTE_OP_ERR,
    );
    let c = p.b.poll(&mut p.bcq.1).unwrap();
    let e = expect_err(&c, MLX5_CQE_RESP_ERR, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
    assert_eq!(u32::from(e.wqe_counter()), r);
    assert_eq!(p.b.mr_read(&ro, 0, 10), vec![0; 10]);
}

#[test]
fn failure_flushes_every_outstanding_wqe_exactly_once() {
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(4096, ALL);
    let dst = p.b.reg_mr(4096, ALL);
    // Five good WRITEs (two signaled), a bad one, then seven more (mixed), one doorbell.
    let mut idx = Vec::new();
    let mut first = [0u8; 8];
    for i in 0..13 {
        let key = if i == 5 { 0xdead_be00 } else { src.key };
        let flags = if i % 3 == 0 { SIG } else { 0 };
        let w = rdma_wqe(
            qpn,
            false,
            dst.va,
            dst.key,
            &[(src.va, 16, key)],
            None,
            flags,
        );
        let (k, f) = p.a.write_wqe(&mut p.qa, &w);
        idx.push(k);
        first = f;
    }
    p.a.ring(&p.qa, first);
    p.fabric.run_until_idle();
    let mut got = Vec::new();
    while let Some(c) = p.a.poll(&mut p.acq.0) {
        got.push(c);
    }
    // Signaled successes before the failure (0 and 3), the error (5), flushes 6..12.
    assert_eq!(got.len(), 2 + 1 + 7, "{got:?}");
    assert_eq!(got[0].opcode(), MLX5_CQE_REQ);
    assert_eq!(got[0].wqe_counter(), idx[0]);
    assert_eq!(got[1].wqe_counter(), idx[3]);
    let e = expect_err(&got[2], MLX5_CQE_REQ_ERR, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
    assert_eq!(e.wqe_counter(), idx[5]);
    for (k, c) in got[3..].iter().enumerate() {
        let e = expect_err(c, MLX5_CQE_REQ_ERR, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
        assert_eq!(e.wqe_counter(), idx[6 + k]);
        assert_eq!(e.wqe_opcode(), MLX5_OPCODE_RDMA_WRITE);
    }
    let s = p.a.h.sim.stats().data_path;
    assert_eq!(s.flushed, 7);
    assert_eq!(s.error_cqes, 8);

    // Posting in ERR: flushed at the doorbell; receives posted in ERR are flushed when the
    // device next polls (a step).
    let late =
        p.a.post(&mut p.qa, &send_wqe(qpn, &[sge(&src, 0, 4)], None, 0));
    let c = p.a.poll(&mut p.acq.0).expect("flushed at the doorbell");
    assert_eq!(
        expect_err(&c, MLX5_CQE_REQ_ERR, MLX5_CQE_SYNDROME_WR_FLUSH_ERR).wqe_counter(),
        late
    );
    let r = p.a.post_recv(&mut p.qa, &[sge(&src, 0, 64)]);
    p.fabric.step();
    let c = p.a.poll(&mut p.acq.1).expect("receive flushed");
    assert_eq!(
        u32::from(expect_err(&c, MLX5_CQE_RESP_ERR, MLX5_CQE_SYNDROME_WR_FLUSH_ERR).wqe_counter()),
        r
    );
    assert_eq!(p.a.h.sim.stats().data_path.flushed, 9);
}

#[test]
fn modify_to_error_flushes_and_reset_starts_over() {
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qb.qpn;
    let buf = p.b.reg_mr(4096, ALL);
    let posted: Vec<u32> = (0..5)
        .map(|i| p.b.post_recv(&mut p.qb, &[sge(&buf, i * 64, 64)]))
        .collect();
    // Two sends posted before the QP is moved: one goes (completes), one is held by an
    // empty peer RQ... keep it simple: a WQE posted but never rung is flushed too.
    let w = send_wqe(qpn, &[sge(&buf, 0, 4)], None, 0);
    let (unrung, _) = p.b.write_wqe(&mut p.qb, &w);
    p.b.h.mapped[p.qb.m]
        .mem
        .write(p.qb.dbr_off + 4, &(p.qb.sq_pi & 0xffff).to_be_bytes());
    p.b.modify(&p.qb, QpTransition::ToErr);
    // Flushed before the command completed.
    let c = p.b.poll(&mut p.bcq.0).expect("send flush");
    assert_eq!(
        expect_err(&c, MLX5_CQE_REQ_ERR, MLX5_CQE_SYNDROME_WR_FLUSH_ERR).wqe_counter(),
        unrung
    );
    for &r in &posted {
        let c = p.b.poll(&mut p.bcq.1).expect("receive flush");
        assert_eq!(
            u32::from(
                expect_err(&c, MLX5_CQE_RESP_ERR, MLX5_CQE_SYNDROME_WR_FLUSH_ERR).wqe_counter()
            ),
            r
        );
    }
    assert!(p.b.poll(&mut p.bcq.1).is_none());
    assert_eq!(p.b.h.sim.stats().data_path.flushed, 6);
    // Back to RESET, counters to zero, reconnect, traffic flows again.
    p.b.modify(&p.qb, QpTransition::ToRst);
    p.a.modify(&p.qa, QpTransition::ToErr);
    p.a.modify(&p.qa, QpTransition::ToRst);
    while p.a.poll(&mut p.acq.0).is_some() {}
    while p.a.poll(&mut p.acq.1).is_some() {}
    for (n, q) in [(&p.a, &mut p.qa), (&p.b, &mut p.qb)] {
        q.sq_pi = 0;
        q.rq_pi = 0;
        n.h.mapped[q.m].mem.write(q.dbr_off, &[0; 8]);
    }
    let c = Conn::default();
    let (bip, bmac, aip, amac) = (p.b.ip, p.b.mac, p.a.ip, p.a.mac);
    let cb = Conn { sq_psn: 0x777, ..c };
    p.a.connect(&p.qa, p.qb.qpn, bip, bmac, &c, cb.sq_psn);
    p.b.connect(&p.qb, p.qa.qpn, aip, amac, &cb, c.sq_psn);
    let src = p.a.reg_mr(64, ALL);
    p.a.mr_write(&src, 0, b"again");
    let r = p.b.post_recv(&mut p.qb, &[sge(&buf, 0, 64)]);
    assert_eq!(r, 0);
    let qpa = p.qa.qpn;
    p.a.post(&mut p.qa, &send_wqe(qpa, &[sge(&src, 0, 5)], None, SIG));
    let rc = wait_cqe(&p.fabric, &p.b, &mut p.bcq.1);
    assert_eq!((rc.opcode(), rc.wqe_counter()), (MLX5_CQE_RESP_SEND, 0));
    assert_eq!(p.b.mr_read(&buf, 0, 5), b"again");
}

#[test]
fn rnr_nak_backs_off_until_a_receive_is_posted() {
    let mut p = Pair::deterministic(Conn {
        min_rnr: 1,
        ..Conn::default()
    });
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(4096, ALL);
    let dst = p.b.reg_mr(4096, ALL);
    p.a.mr_write(&src, 0, b"late receive");
    p.a.post(&mut p.qa, &send_wqe(qpn, &[sge(&src, 0, 12)], None, SIG));
    p.fabric.run_until_idle();
    assert!(p.a.poll(&mut p.acq.0).is_none());
    assert_eq!(p.b.h.sim.stats().data_path.rnr_naks, 1);
    // Timer code 1 = 10 µs: nothing happens before it expires.
    assert!(p.a.h.sim.next_deadline().is_some());
    p.fabric.advance(std::time::Duration::from_micros(5));
    assert_eq!(p.b.h.sim.stats().data_path.rnr_naks, 1);
    p.fabric.advance(std::time::Duration::from_micros(5));
    assert_eq!(
        p.b.h.sim.stats().data_path.rnr_naks,
        2,
        "retried, still no receive"
    );
    p.b.post_recv(&mut p.qb, &[sge(&dst, 0, 64)]);
    p.fabric.run_timers(std::time::Duration::from_millis(1));
    let rc = p.b.poll(&mut p.bcq.1).expect("delivered after the retry");
    assert_eq!(rc.byte_cnt(), 12);
    assert_eq!(p.b.mr_read(&dst, 0, 12), b"late receive");
    assert_eq!(p.a.poll(&mut p.acq.0).unwrap().opcode(), MLX5_CQE_REQ);
    assert!(p.a.h.sim.stats().data_path.retransmits >= 2);

    // With rnr_retry 0 the first RNR NAK is fatal.
    let mut p = Pair::deterministic(Conn {
        rnr_retry: 0,
        ..Conn::default()
    });
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(64, ALL);
    requester_fails(
        &mut p,
        send_wqe(qpn, &[sge(&src, 0, 8)], None, SIG),
        MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR,
    );
}

#[test]
fn no_key_is_the_receive_terminator() {
    // The first MKEY of a device with variant byte 0 must not be 0x100 (the lkey that
    // ends a receive WQE's list): a one-entry receive WQE has no terminator, so such a
    // key would read as an empty list.
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    p.b.variant = 0xff;
    let dst = p.b.reg_mr(4096, ALL);
    assert_eq!(dst.key & 0xff, 0);
    assert_ne!(dst.key, 0x100);
    let src = p.a.reg_mr(64, ALL);
    p.a.mr_write(&src, 0, b"terminator?");
    // A 16-byte stride QP: exactly one scatter entry, no terminator.
    let mut q1 = p.b.create_qp(&p.bcq.0, &p.bcq.1, 4, 4, 0);
    let mut qa2 = p.a.create_qp(&p.acq.0, &p.acq.1, 4, 4, 0);
    let c = Conn::default();
    p.connect_qps(&qa2, &q1, &c, 0x300);
    let _ = qpn;
    p.b.post_recv(&mut q1, &[sge(&dst, 0, 4096)]);
    let q2n = qa2.qpn;
    p.a.post(&mut qa2, &send_wqe(q2n, &[sge(&src, 0, 11)], None, SIG));
    let r = wait_cqe(&p.fabric, &p.b, &mut p.bcq.1);
    assert_eq!((r.opcode(), r.byte_cnt()), (MLX5_CQE_RESP_SEND, 11));
    assert_eq!(p.b.mr_read(&dst, 0, 11), b"terminator?");
}

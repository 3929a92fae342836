//! RC reliability scenarios, deterministic mode, each with its expected
//! completions: local ACK timeout exceeded / not exceeded / infinite, PSN sequence
//! error retry exhaustion, implied NAK exceeded / not exceeded, ghost ACK, bad
//! response, rkey violation, RNR exceeded / not exceeded / infinite, partial WRITE and
//! partial READ retry, duplicate atomics answered from the cache, max_rd_atomic,
//! max_dest_rd_atomic, PSN wrap. Virtual time makes the long timeouts instant.

mod common;
mod dp;
mod rel;

use std::time::Duration;

use dp::*;
use ferroverbs_hw::control::qp::QpcState;
use ferroverbs_hw::datapath::cqe::{
    Cqe64, MLX5_CQE_REQ, MLX5_CQE_REQ_ERR, MLX5_CQE_RESP_ERR, MLX5_CQE_RESP_SEND,
    MLX5_CQE_SYNDROME_BAD_RESP_ERR, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,
    MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR,
    MLX5_CQE_SYNDROME_WR_FLUSH_ERR,
};
use ferroverbs_sim::link::Impairments;
use ferroverbs_sim::wire::frame::Frame;

/// ACK timeout code 10: 4.096 µs × 2^10.
const T10: Duration = Duration::from_nanos(4096 << 10);

/// A signaled RDMA READ of `len` bytes from the start of `remote` into `rd` at `off`.
fn read_wqe(qpn: u32, remote: &Mr, rd: &Mr, off: usize, len: u32) -> Vec<u8> {
    rdma_wqe(
        qpn,
        true,
        remote.va,
        remote.key,
        &[sge(rd, off, len)],
        None,
        SIG,
    )
}

fn pair(f: impl FnOnce(&mut Conn)) -> Pair {
    let mut c = Conn {
        ack_timeout: 10,
        ..Conn::default()
    };
    f(&mut c);
    Pair::deterministic(c)
}

fn cqes(n: &Node, cq: &mut Cq) -> Vec<Cqe64> {
    let mut v = Vec::new();
    while let Some(c) = n.poll(cq) {
        v.push(c);
    }
    v
}

#[track_caller]
fn ok(c: &Cqe64, idx: u16) {
    assert_eq!((c.opcode(), c.wqe_counter()), (MLX5_CQE_REQ, idx));
}

#[track_caller]
fn failed(c: &Cqe64, opcode: u8, syndrome: u8, idx: u16) {
    assert_eq!(
        (c.opcode(), err(c).syndrome(), c.wqe_counter()),
        (opcode, syndrome, idx)
    );
}

fn now(p: &Pair) -> Duration {
    p.a.h.sim.clock().now()
}

/// Posts `n` 8-byte signaled SENDs from A (ringing once); returns their indexes.
fn sends(p: &mut Pair, src: &Mr, n: usize) -> Vec<u16> {
    let qpn = p.qa.qpn;
    let mut ids = Vec::new();
    let mut first = [0u8; 8];
    for k in 0..n {
        p.a.mr_write(src, k * 8, &(k as u64).to_le_bytes());
        let (i, f) =
            p.a.write_wqe(&mut p.qa, &send_wqe(qpn, &[sge(src, k * 8, 8)], None, SIG));
        ids.push(i);
        first = f;
    }
    p.a.ring(&p.qa, first);
    ids
}

fn recvs(p: &mut Pair, dst: &Mr, n: usize) {
    for _ in 0..n {
        let at = (p.qb.rq_pi as usize % 64) * 64;
        p.b.post_recv(&mut p.qb, &[sge(dst, at, 64)]);
    }
}

#[test]
fn local_ack_timeout_exceeded_fails_with_retry_exc_and_flushes_everything() {
    let mut p = pair(|c| c.retry_count = 3);
    let src = p.a.reg_mr(4096, ALL);
    let mine = p.a.reg_mr(4096, ALL);
    // Two receives on A's own RQ: they are flushed too.
    p.a.post_recv(&mut p.qa, &[sge(&mine, 0, 64)]);
    p.a.post_recv(&mut p.qa, &[sge(&mine, 64, 64)]);
    let (am, bm) = (p.a.mac, p.b.mac);
    p.fabric.partition(am, bm, true);
    let t0 = now(&p);
    let ids = sends(&mut p, &src, 5);
    p.fabric.run_timers(Duration::from_secs(10));
    // One try and three retries, each waiting out the timeout: 4 × 4.19 ms.
    assert_eq!(now(&p) - t0, T10 * 4);
    let s = p.a.h.sim.stats().data_path;
    assert_eq!((s.ack_timeouts, s.retries, s.retransmits), (4, 3, 15));
    let c = cqes(&p.a, &mut p.acq.0);
    assert_eq!(c.len(), 5);
    failed(
        &c[0],
        MLX5_CQE_REQ_ERR,
        MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR,
        ids[0],
    );
    for (k, c) in c.iter().enumerate().skip(1) {
        failed(c, MLX5_CQE_REQ_ERR, MLX5_CQE_SYNDROME_WR_FLUSH_ERR, ids[k]);
    }
    let r = cqes(&p.a, &mut p.acq.1);
    assert_eq!(r.len(), 2);
    for (k, c) in r.iter().enumerate() {
        failed(
            c,
            MLX5_CQE_RESP_ERR,
            MLX5_CQE_SYNDROME_WR_FLUSH_ERR,
            k as u16,
        );
    }
    assert_eq!((s.error_cqes, s.flushed, s.qp_errors), (7, 6, 1));
    assert_eq!(p.a.qp_state(&p.qa), QpcState::Err.value());
    assert_eq!(p.a.h.sim.next_deadline(), None, "no timer left");
    // Nothing reached B.
    assert_eq!(p.b.h.sim.stats().data_path.rx_frames, 0);
}

#[test]
fn local_ack_timeout_not_exceeded_recovers_when_the_partition_heals() {
    let mut p = pair(|c| c.retry_count = 3);
    let src = p.a.reg_mr(4096, ALL);
    let dst = p.b.reg_mr(4096, ALL);
    recvs(&mut p, &dst, 5);
    let (am, bm) = (p.a.mac, p.b.mac);
    p.fabric.partition_both(am, bm, true);
    let ids = sends(&mut p, &src, 5);
    // Two timeouts pass in the partition; the third retry (the last allowed) gets
    // through.
    p.fabric.run_timers(T10 * 2);
    assert_eq!(p.a.h.sim.stats().data_path.ack_timeouts, 2);
    assert!(cqes(&p.a, &mut p.acq.0).is_empty());
    p.fabric.partition_both(am, bm, false);
    p.fabric.run_timers(Duration::from_secs(1));
    let c = cqes(&p.a, &mut p.acq.0);
    assert_eq!(c.len(), 5);
    for (k, c) in c.iter().enumerate() {
        ok(c, ids[k]);
    }
    let r = cqes(&p.b, &mut p.bcq.1);
    assert_eq!(r.len(), 5, "each delivered once");
    for (k, c) in r.iter().enumerate() {
        assert_eq!(c.opcode(), MLX5_CQE_RESP_SEND);
        assert_eq!(p.b.mr_read(&dst, k * 64, 8), (k as u64).to_le_bytes());
    }
    assert_eq!(p.a.h.sim.stats().data_path.ack_timeouts, 3);
    assert_eq!(p.a.qp_state(&p.qa), QpcState::Rts.value());
}

#[test]
fn timeout_zero_means_no_timer_and_a_sequence_nak_recovers() {
    let mut p = pair(|c| c.ack_timeout = 0);
    let src = p.a.reg_mr(4096, ALL);
    let dst = p.b.reg_mr(4096, ALL);
    recvs(&mut p, &dst, 2);
    let (am, bm) = (p.a.mac, p.b.mac);
    p.fabric.partition(am, bm, true);
    sends(&mut p, &src, 1);
    p.fabric.run_until_idle();
    assert_eq!(p.a.h.sim.next_deadline(), None, "timeout 0: infinite");
    p.fabric.advance(Duration::from_secs(3600));
    assert!(cqes(&p.a, &mut p.acq.0).is_empty());
    p.fabric.partition(am, bm, false);
    // The next message is ahead of B's expected PSN: NAK sequence error, go back.
    sends(&mut p, &src, 1);
    p.fabric.run_until_idle();
    assert_eq!(cqes(&p.a, &mut p.acq.0).len(), 2);
    assert_eq!(cqes(&p.b, &mut p.bcq.1).len(), 2);
    let (sa, sb) = (p.a.h.sim.stats().data_path, p.b.h.sim.stats().data_path);
    assert_eq!((sa.seq_naks_received, sb.naks, sa.ack_timeouts), (1, 1, 0));
}

#[test]
fn psn_sequence_error_retry_exhaustion_and_recovery() {
    for retries in [0u8, 1] {
        let mut p = pair(|c| c.retry_count = retries);
        let src = p.a.reg_mr(4096, ALL);
        let dst = p.b.reg_mr(4096, ALL);
        recvs(&mut p, &dst, 2);
        let (am, bm) = (p.a.mac, p.b.mac);
        // Lose the first SEND: the second is ahead, B NAKs with the expected PSN.
        p.fabric
            .impair(am, bm, Impairments::new().drop_frames(0, 1));
        let ids = sends(&mut p, &src, 2);
        p.fabric.run_until_idle();
        let c = cqes(&p.a, &mut p.acq.0);
        assert_eq!(c.len(), 2);
        assert_eq!(p.a.h.sim.stats().data_path.seq_naks_received, 1);
        if retries == 0 {
            failed(
                &c[0],
                MLX5_CQE_REQ_ERR,
                MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR,
                ids[0],
            );
            failed(
                &c[1],
                MLX5_CQE_REQ_ERR,
                MLX5_CQE_SYNDROME_WR_FLUSH_ERR,
                ids[1],
            );
            // B delivered only the ... nothing: the second was ahead.
            assert!(cqes(&p.b, &mut p.bcq.1).is_empty());
        } else {
            ok(&c[0], ids[0]);
            ok(&c[1], ids[1]);
            let r = cqes(&p.b, &mut p.bcq.1);
            assert_eq!(r.len(), 2);
            assert_eq!(p.b.mr_read(&dst, 0, 8), 0u64.to_le_bytes());
            assert_eq!(p.b.mr_read(&dst, 64, 8), 1u64.to_le_bytes());
        }
    }
}

#[test]
fn implied_nak_exceeded_and_not_exceeded() {
    for retries in [0u8, 1] {
        let mut p = pair(|c| c.retry_count = retries);
        let qpn = p.qa.qpn;
        let src = p.a.reg_mr(4096, ALL);
        let rd = p.a.reg_mr(4096, ALL);
        let remote = p.b.reg_mr(4096, ALL);
        let dst = p.b.reg_mr(4096, ALL);
        p.b.mr_write(&remote, 0, b"remote bytes");
        recvs(&mut p, &dst, 1);
        let (am, bm) = (p.a.mac, p.b.mac);
        // The READ executes at B, its response is lost.
        p.fabric.partition(bm, am, true);
        let read = p.a.post(&mut p.qa, &read_wqe(qpn, &remote, &rd, 0, 12));
        p.fabric.run_until_idle();
        p.fabric.partition(bm, am, false);
        // The SEND after it is acknowledged: the ACK skips the READ's response.
        let send = sends(&mut p, &src, 1)[0];
        p.fabric.run_until_idle();
        let c = cqes(&p.a, &mut p.acq.0);
        let (sa, sb) = (p.a.h.sim.stats().data_path, p.b.h.sim.stats().data_path);
        assert_eq!(sa.implied_naks, 1);
        if retries == 0 {
            failed(
                &c[0],
                MLX5_CQE_REQ_ERR,
                MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR,
                read,
            );
            failed(
                &c[1],
                MLX5_CQE_REQ_ERR,
                MLX5_CQE_SYNDROME_WR_FLUSH_ERR,
                send,
            );
        } else {
            ok(&c[0], read);
            ok(&c[1], send);
            assert_eq!(p.a.mr_read(&rd, 0, 12), b"remote bytes");
            // Go-back-N resent the READ (executed again) and the SEND (acknowledged,
            // not delivered twice).
            assert_eq!(sb.rx_duplicates, 2);
            assert_eq!(cqes(&p.b, &mut p.bcq.1).len(), 1);
        }
    }
}

/// The frames captured so far whose source MAC is `from` and BTH opcode `op`.
fn frames(p: &Pair, from: [u8; 6], op: u8) -> Vec<Vec<u8>> {
    p.fabric
        .take_captured()
        .into_iter()
        .filter(|f| f[6..12] == from && f[42] == op)
        .collect()
}

fn set_psn(f: &mut [u8], psn: u32) {
    f[42 + 9..42 + 12].copy_from_slice(&psn.to_be_bytes()[1..]);
    Frame::new_unchecked(&mut f[..]).fill_icrc();
}

fn psn_of(f: &[u8]) -> u32 {
    u32::from_be_bytes([0, f[51], f[52], f[53]])
}

#[test]
fn a_ghost_ack_is_ignored() {
    let mut p = pair(|_| {});
    let src = p.a.reg_mr(4096, ALL);
    let dst = p.b.reg_mr(4096, ALL);
    recvs(&mut p, &dst, 2);
    p.fabric.capture(Some(64));
    let ids = sends(&mut p, &src, 1);
    p.fabric.run_until_idle();
    ok(&cqes(&p.a, &mut p.acq.0)[0], ids[0]);
    let mut ack = frames(&p, p.b.mac, 0x11).remove(0);
    // An ACK for a PSN A never sent.
    let psn = psn_of(&ack);
    set_psn(&mut ack, psn + 0x1000);
    let before = p.a.h.sim.stats().data_path;
    p.fabric.inject(&ack);
    p.fabric.run_until_idle();
    let after = p.a.h.sim.stats().data_path;
    assert_eq!(after.rx_stale, before.rx_stale + 1);
    assert!(cqes(&p.a, &mut p.acq.0).is_empty());
    // The QP carries on.
    let ids = sends(&mut p, &src, 1);
    p.fabric.run_until_idle();
    ok(&cqes(&p.a, &mut p.acq.0)[0], ids[0]);
    assert_eq!(cqes(&p.b, &mut p.bcq.1).len(), 2);
}

#[test]
fn a_bad_read_response_fails_with_bad_resp_err() {
    let mut p = pair(|_| {});
    let qpn = p.qa.qpn;
    let rd = p.a.reg_mr(8192, ALL);
    let remote = p.b.reg_mr(8192, ALL);
    p.fabric.capture(Some(64));
    // A one-packet READ, to capture a READ_RESPONSE_ONLY.
    p.a.post(&mut p.qa, &read_wqe(qpn, &remote, &rd, 0, 100));
    p.fabric.run_until_idle();
    assert_eq!(cqes(&p.a, &mut p.acq.0).len(), 1);
    let only = frames(&p, p.b.mac, 0x10).remove(0);
    // A three-packet READ whose responses are lost; a ONLY response where FIRST is due.
    let (am, bm) = (p.a.mac, p.b.mac);
    p.fabric.partition(bm, am, true);
    let idx = p.a.post(&mut p.qa, &read_wqe(qpn, &remote, &rd, 0, 3000));
    p.fabric.run_until_idle();
    let req = frames(&p, am, 0x0c).remove(0);
    p.fabric.partition(bm, am, false);
    let mut bad = only.clone();
    set_psn(&mut bad, psn_of(&req));
    p.fabric.inject(&bad);
    p.fabric.run_until_idle();
    let c = cqes(&p.a, &mut p.acq.0);
    assert_eq!(c.len(), 1);
    failed(&c[0], MLX5_CQE_REQ_ERR, MLX5_CQE_SYNDROME_BAD_RESP_ERR, idx);
    assert_eq!(p.a.qp_state(&p.qa), QpcState::Err.value());
}

#[test]
fn an_rkey_violation_fails_with_remote_access_error() {
    let mut p = pair(|_| {});
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(4096, ALL);
    let remote = p.b.reg_mr(4096, ALL);
    let bad = p.a.post(
        &mut p.qa,
        &rdma_wqe(
            qpn,
            false,
            remote.va,
            remote.key ^ 1,
            &[sge(&src, 0, 8)],
            None,
            SIG,
        ),
    );
    let next = sends(&mut p, &src, 1)[0];
    p.fabric.run_until_idle();
    let c = cqes(&p.a, &mut p.acq.0);
    failed(
        &c[0],
        MLX5_CQE_REQ_ERR,
        MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,
        bad,
    );
    failed(
        &c[1],
        MLX5_CQE_REQ_ERR,
        MLX5_CQE_SYNDROME_WR_FLUSH_ERR,
        next,
    );
    assert_eq!(p.a.qp_state(&p.qa), QpcState::Err.value());
    assert_eq!(p.b.qp_state(&p.qb), QpcState::Err.value());
}

#[test]
fn rnr_exceeded_not_exceeded_and_infinite() {
    // rnr_retry 2: the third RNR NAK is fatal.
    let mut p = pair(|c| {
        c.rnr_retry = 2;
        c.min_rnr = 1;
    });
    let src = p.a.reg_mr(4096, ALL);
    let ids = sends(&mut p, &src, 1);
    p.fabric.run_timers(Duration::from_secs(1));
    failed(
        &cqes(&p.a, &mut p.acq.0)[0],
        MLX5_CQE_REQ_ERR,
        MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR,
        ids[0],
    );
    assert_eq!(p.b.h.sim.stats().data_path.rnr_naks, 3);
    assert_eq!(p.a.h.sim.stats().data_path.ack_timeouts, 0);

    // rnr_retry 2, a receive posted after the second RNR NAK: delivered.
    let mut p = pair(|c| {
        c.rnr_retry = 2;
        c.min_rnr = 1;
    });
    let src = p.a.reg_mr(4096, ALL);
    let dst = p.b.reg_mr(4096, ALL);
    let ids = sends(&mut p, &src, 1);
    p.fabric.run_until_idle();
    p.fabric.advance(Duration::from_micros(10));
    assert_eq!(p.b.h.sim.stats().data_path.rnr_naks, 2);
    recvs(&mut p, &dst, 1);
    p.fabric.run_timers(Duration::from_secs(1));
    ok(&cqes(&p.a, &mut p.acq.0)[0], ids[0]);
    assert_eq!(cqes(&p.b, &mut p.bcq.1).len(), 1);

    // rnr_retry 7: retried forever (here 2,000 times over 20 ms), never a timeout.
    let mut p = pair(|c| {
        c.rnr_retry = 7;
        c.min_rnr = 1;
    });
    let src = p.a.reg_mr(4096, ALL);
    let dst = p.b.reg_mr(4096, ALL);
    let ids = sends(&mut p, &src, 1);
    p.fabric.run_timers(Duration::from_millis(20));
    assert!(p.b.h.sim.stats().data_path.rnr_naks >= 2000);
    assert!(cqes(&p.a, &mut p.acq.0).is_empty());
    recvs(&mut p, &dst, 1);
    p.fabric.run_timers(Duration::from_secs(1));
    ok(&cqes(&p.a, &mut p.acq.0)[0], ids[0]);
    assert_eq!(p.a.h.sim.stats().data_path.ack_timeouts, 0);
}

#[test]
fn a_partial_write_is_retried_from_the_lost_packet() {
    let mut p = pair(|_| {});
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(4096, ALL);
    let remote = p.b.reg_mr(4096, ALL);
    let data = rel::payload(7, 3000);
    p.a.mr_write(&src, 0, &data);
    let (am, bm) = (p.a.mac, p.b.mac);
    // FIRST, MIDDLE (lost), LAST.
    p.fabric
        .impair(am, bm, Impairments::new().drop_frames(1, 1));
    let idx = p.a.post(
        &mut p.qa,
        &rdma_wqe(
            qpn,
            false,
            remote.va,
            remote.key,
            &[sge(&src, 0, 3000)],
            None,
            SIG,
        ),
    );
    p.fabric.run_until_idle();
    ok(&cqes(&p.a, &mut p.acq.0)[0], idx);
    assert_eq!(p.b.mr_read(&remote, 0, 3000), data);
    let (sa, sb) = (p.a.h.sim.stats().data_path, p.b.h.sim.stats().data_path);
    assert_eq!((sa.retransmits, sa.seq_naks_received), (2, 1));
    assert_eq!(sb.rx_duplicates, 0);
}

#[test]
fn a_partial_read_is_retried_for_its_tail() {
    let mut p = pair(|_| {});
    let qpn = p.qa.qpn;
    let rd = p.a.reg_mr(4096, ALL);
    let remote = p.b.reg_mr(4096, ALL);
    let data = rel::payload(9, 3000);
    p.b.mr_write(&remote, 0, &data);
    let (am, bm) = (p.a.mac, p.b.mac);
    // Responses FIRST, MIDDLE (lost), LAST: the LAST implies the MIDDLE was lost.
    p.fabric
        .impair(bm, am, Impairments::new().drop_frames(1, 1));
    p.fabric.capture(Some(64));
    let idx = p.a.post(&mut p.qa, &read_wqe(qpn, &remote, &rd, 0, 3000));
    p.fabric.run_until_idle();
    ok(&cqes(&p.a, &mut p.acq.0)[0], idx);
    assert_eq!(p.a.mr_read(&rd, 0, 3000), data);
    let (sa, sb) = (p.a.h.sim.stats().data_path, p.b.h.sim.stats().data_path);
    assert_eq!(
        (sa.implied_naks, sb.rx_duplicates, sb.read_responses),
        (1, 1, 5)
    );
    // The second request asks for the tail: VA + 1 PMTU, 1976 bytes, PSN + 1.
    let reqs = frames(&p, am, 0x0c);
    assert_eq!(reqs.len(), 2);
    assert_eq!(psn_of(&reqs[1]), psn_of(&reqs[0]) + 1);
    let reth = &reqs[1][54..70];
    assert_eq!(
        u64::from_be_bytes(reth[..8].try_into().unwrap()),
        remote.va + 1024
    );
    assert_eq!(u32::from_be_bytes(reth[12..16].try_into().unwrap()), 1976);
}

#[test]
fn duplicate_atomics_are_answered_from_the_cache() {
    let mut p = pair(|_| {});
    let qpn = p.qa.qpn;
    let res = p.a.reg_mr(4096, ALL);
    let ctr = p.b.reg_mr(8, ALL);
    let (am, bm) = (p.a.mac, p.b.mac);
    // Every request arrives twice.
    p.fabric.impair(am, bm, Impairments::new().duplicate(1.0));
    for k in 0..8 {
        p.a.post(
            &mut p.qa,
            &atomic_wqe(qpn, ctr.va, ctr.key, sge(&res, k * 8, 8), 1, None, SIG),
        );
    }
    p.fabric.run_until_idle();
    assert_eq!(cqes(&p.a, &mut p.acq.0).len(), 8);
    for k in 0..8 {
        let got = u64::from_be_bytes(p.a.mr_read(&res, k * 8, 8).try_into().unwrap());
        assert_eq!(got, k as u64);
    }
    let sb = p.b.h.sim.stats().data_path;
    assert_eq!((sb.atomics, sb.rx_duplicates), (8, 8));
    assert_eq!(p.b.mr_read(&ctr, 0, 8), 8u64.to_le_bytes());
}

#[test]
fn max_rd_atomic_limits_outstanding_reads() {
    let mut p = pair(|c| c.log_sra = 0);
    let qpn = p.qa.qpn;
    let rd = p.a.reg_mr(4096, ALL);
    let remote = p.b.reg_mr(4096, ALL);
    let (am, bm) = (p.a.mac, p.b.mac);
    p.fabric.partition(bm, am, true);
    for k in 0..4 {
        p.a.post(&mut p.qa, &read_wqe(qpn, &remote, &rd, k * 64, 64));
    }
    p.fabric.run_until_idle();
    // One READ outstanding: one request on the wire.
    assert_eq!(p.b.h.sim.stats().data_path.rx_frames, 1);
    p.fabric.partition(bm, am, false);
    p.fabric.run_timers(Duration::from_secs(1));
    assert_eq!(cqes(&p.a, &mut p.acq.0).len(), 4);
    assert_eq!(p.a.h.sim.stats().data_path.ack_timeouts, 1);
}

#[test]
fn max_dest_rd_atomic_bounds_the_replay_cache() {
    // B remembers one READ: the first of two lost responses cannot be replayed.
    for (log_rra, fine) in [(0u8, false), (1, true)] {
        let mut p = pair(|c| {
            c.log_sra = 1;
            c.log_rra = log_rra;
            c.retry_count = 2;
        });
        let qpn = p.qa.qpn;
        let rd = p.a.reg_mr(4096, ALL);
        let remote = p.b.reg_mr(4096, ALL);
        let (am, bm) = (p.a.mac, p.b.mac);
        p.fabric.partition(bm, am, true);
        for k in 0..2 {
            p.a.post(&mut p.qa, &read_wqe(qpn, &remote, &rd, k * 64, 64));
        }
        p.fabric.run_until_idle();
        p.fabric.partition(bm, am, false);
        p.fabric.run_timers(Duration::from_secs(1));
        let c = cqes(&p.a, &mut p.acq.0);
        assert_eq!(c.len(), 2);
        if fine {
            assert!(c.iter().all(|c| c.opcode() == MLX5_CQE_REQ));
        } else {
            assert_eq!(
                err(&c[0]).syndrome(),
                MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR
            );
        }
    }
}

#[test]
fn psn_wrap_under_loss() {
    let conn = Conn {
        sq_psn: 0xff_ff80,
        ..rel::conn()
    };
    let imp = Impairments::new().loss(0.05).duplicate(0.02).reorder(0.02);
    let r =
        rel::run(0x3a9, 2_000, imp, rel::Mix::default(), conn).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.messages, 2_000);
}

#[test]
fn a_write_across_the_psn_wrap_loses_its_packet_at_zero() {
    // PSNs 0xfffffe, 0xffffff, 0x000000: the last one is lost and resent.
    let mut p = pair(|c| c.sq_psn = 0xff_fffe);
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(4096, ALL);
    let remote = p.b.reg_mr(4096, ALL);
    let data = rel::payload(3, 3000);
    p.a.mr_write(&src, 0, &data);
    let (am, bm) = (p.a.mac, p.b.mac);
    p.fabric
        .impair(am, bm, Impairments::new().drop_frames(2, 1));
    p.fabric.capture(Some(16));
    let idx = p.a.post(
        &mut p.qa,
        &rdma_wqe(
            qpn,
            false,
            remote.va,
            remote.key,
            &[sge(&src, 0, 3000)],
            None,
            SIG,
        ),
    );
    p.fabric.run_timers(Duration::from_secs(1));
    ok(&cqes(&p.a, &mut p.acq.0)[0], idx);
    assert_eq!(p.b.mr_read(&remote, 0, 3000), data);
    // Nothing after the lost LAST tells B a packet is missing: the ACK timeout does.
    let sa = p.a.h.sim.stats().data_path;
    assert_eq!((sa.ack_timeouts, sa.retransmits), (1, 3));
    // FIRST and MIDDLE, then (LAST lost) the whole message again from 0xfffffe.
    let sent: Vec<(u8, u32)> = p
        .fabric
        .take_captured()
        .iter()
        .filter(|f| f[6..12] == am)
        .map(|f| (f[42], psn_of(f)))
        .collect();
    assert_eq!(
        sent,
        [
            (0x06, 0xff_fffe),
            (0x07, 0xff_ffff),
            (0x06, 0xff_fffe),
            (0x07, 0xff_ffff),
            (0x08, 0)
        ]
    );
    // The next message starts at PSN 1.
    assert_eq!(
        ferroverbs_hw::control::qp::qpc::next_send_psn.get(&p.a.h.query_qp(p.qa.qpn)),
        1
    );
}

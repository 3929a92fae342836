//! Scale: what a step of the device does depends on the QPs with work, not on the QPs
//! it has. Counted, not timed: `DataPathStats::qp_visits` counts every QP runtime the
//! engine looks at (doorbells, received frames, owed ACKs, timers come due, QPs in
//! error), and the same traffic on one active QP must cost the same visits and the
//! same fabric steps beside one idle QP as beside 1,024 idle QPs, each of which has
//! its local ACK timer running (a request sent to a QP that does not exist, waiting
//! for an acknowledgement: the hardest kind of idle, a timer to keep and not look at).

mod common;
mod dp;

use dp::*;
use ferroverbs_hw::datapath::cqe::{MLX5_CQE_REQ, MLX5_CQE_RESP_SEND};

/// Rounds of traffic on the active pair.
const ROUNDS: usize = 8;
/// SENDs per round.
const PER_ROUND: usize = 8;

/// What the active pair's traffic cost.
#[derive(Debug, PartialEq, Eq)]
struct Cost {
    /// QP runtimes visited, both devices.
    visits: u64,
    /// Fabric steps until idle, all rounds.
    steps: usize,
    /// Work the steps reported.
    work: usize,
}

/// Runs the active pair's traffic beside `idle` idle RC QPs of A with their ACK
/// timers running; returns its cost.
fn cost_beside(idle: usize) -> Cost {
    let mut p = Pair::deterministic(Conn::default());
    let src = p.a.reg_mr(4096, ALL);
    let dst = p.b.reg_mr(4096, ALL);
    let conn = Conn::default();
    let (bip, bmac) = (p.b.ip, p.b.mac);
    let mut idle_qps = Vec::with_capacity(idle);
    for k in 0..idle {
        let mut q = p.a.create_qp(&p.acq.0, &p.acq.1, 2, 0, 2);
        // B has no QP of this number: it drops the SEND, and A's QP waits for an
        // ACK (timeout code 14: 67 ms of virtual time, which never passes here).
        p.a.connect(&q, 0xf0_0000 + k as u32, bip, bmac, &conn, 0x500);
        let wqe = send_wqe(q.qpn, &[sge(&src, 0, 8)], None, SIG);
        let (_, first) = p.a.write_wqe(&mut q, &wqe);
        p.a.ring(&q, first);
        idle_qps.push(q);
    }
    p.fabric.run_until_idle();
    assert_eq!(p.b.h.sim.stats().data_path.rx_no_qp, idle as u64);
    p.a.h.sim.with_engine(|e| {
        for q in &idle_qps {
            let qp = e.qp(q.qpn).expect("an idle QP has a runtime");
            assert!(
                qp.next_timer().is_some(),
                "QP {:#x} waits for its ACK",
                q.qpn
            );
        }
    });
    assert!(p.a.h.sim.next_deadline().is_some());

    let visits =
        |p: &Pair| p.a.h.sim.stats().data_path.qp_visits + p.b.h.sim.stats().data_path.qp_visits;
    let v0 = visits(&p);
    let (mut steps, mut work) = (0, 0);
    for round in 0..ROUNDS {
        for k in 0..PER_ROUND {
            let at = (p.qb.rq_pi as usize % 64) * 64;
            p.b.post_recv(&mut p.qb, &[sge(&dst, at, 64)]);
            let v = (round * PER_ROUND + k) as u64;
            p.a.mr_write(&src, k * 8, &v.to_le_bytes());
        }
        let qpn = p.qa.qpn;
        let mut first = [0u8; 8];
        for k in 0..PER_ROUND {
            let (_, f) =
                p.a.write_wqe(&mut p.qa, &send_wqe(qpn, &[sge(&src, k * 8, 8)], None, SIG));
            first = f;
        }
        p.a.ring(&p.qa, first);
        loop {
            let n = p.fabric.step();
            steps += 1;
            work += n;
            if n == 0 {
                break;
            }
        }
        for _ in 0..PER_ROUND {
            let c = p.a.poll(&mut p.acq.0).expect("a send completion");
            assert_eq!(c.opcode(), MLX5_CQE_REQ);
            let r = p.b.poll(&mut p.bcq.1).expect("a receive completion");
            assert_eq!(r.opcode(), MLX5_CQE_RESP_SEND);
            assert_eq!(r.byte_cnt(), 8);
        }
        assert!(p.a.poll(&mut p.acq.0).is_none());
    }
    // Every message arrived intact.
    for k in 0..PER_ROUND {
        let at = ((ROUNDS - 1) * PER_ROUND + k) % 64 * 64;
        let v = ((ROUNDS - 1) * PER_ROUND + k) as u64;
        assert_eq!(p.b.mr_read(&dst, at, 8), v.to_le_bytes());
    }
    // The idle QPs still wait, untouched.
    p.a.h.sim.with_engine(|e| {
        assert!(idle_qps
            .iter()
            .all(|q| e.qp(q.qpn).is_some_and(|qp| qp.next_timer().is_some())));
    });
    Cost {
        visits: visits(&p) - v0,
        steps,
        work,
    }
}

#[test]
fn a_step_visits_the_qps_with_work_whatever_the_number_of_idle_qps() {
    let one = cost_beside(1);
    let many = cost_beside(1024);
    assert_eq!(one, many, "1 idle QP: {one:?}, 1,024 idle QPs: {many:?}");
    // And the cost is the traffic's: a few visits per message (the doorbell, the
    // request at B, its ACK owed, the ACK at A), not one per idle QP.
    let msgs = (ROUNDS * PER_ROUND) as u64;
    assert!(one.visits > 0 && one.visits <= 4 * msgs, "{one:?}");
}

/// The record an RC or UC QP keeps for each request in flight is what the
/// outstanding requests of many QPs cost in cache: 1,024 QPs with 128 requests each
/// keep 131,072 of them live. It holds what completion and retransmission need, not
/// a UD address vector (which stays with the WQE being transmitted).
#[test]
fn a_request_in_flight_is_recorded_in_at_most_96_bytes() {
    let n = std::mem::size_of::<ferroverbs_sim::engine::Flight>();
    assert!(n <= 96, "a request in flight takes {n} bytes");
}

/// The records of the requests in flight live in the buffers of the QPs busy lately,
/// not in one buffer per QP that ever sent (`engine::FlightBufs`): QPs used one after
/// the other, each with a burst of RDMA WRITEs completed before the next starts, leave
/// one buffer in all, with the engine, whatever their number; every QP that is done
/// holds none. The bursts complete exactly as before (one signaled CQE per burst,
/// its `wqe_counter`, the data at B).
#[test]
fn idle_qps_hold_no_in_flight_record_buffer() {
    const QPS: usize = 32;
    const BURST: usize = 16;
    let mut p = Pair::deterministic(Conn::default());
    let src = p.a.reg_mr(4096, ALL);
    let dst = p.b.reg_mr(QPS * BURST * 8, ALL);
    let conn = Conn::default();
    let mut pairs = Vec::with_capacity(QPS);
    for k in 0..QPS {
        let qa = p.a.create_qp(&p.acq.0, &p.acq.1, 6, 0, 2);
        let qb = p.b.create_qp(&p.bcq.0, &p.bcq.1, 6, 0, 2);
        let c = Conn {
            sq_psn: 0x1000 * (k as u32 + 1),
            ..conn
        };
        p.connect_qps(&qa, &qb, &c, 0x80_0000 + k as u32);
        pairs.push((qa, qb));
    }
    for (k, (qa, _)) in pairs.iter_mut().enumerate() {
        let qpn = qa.qpn;
        let mut first = [0u8; 8];
        let mut last = 0;
        for j in 0..BURST {
            let v = ((k * BURST + j) as u64) | 0xabcd_0000_0000;
            p.a.mr_write(&src, j * 8, &v.to_le_bytes());
            let at = dst.va + ((k * BURST + j) * 8) as u64;
            let flags = if j + 1 == BURST { SIG } else { 0 };
            let w = rdma_wqe(qpn, false, at, dst.key, &[sge(&src, j * 8, 8)], None, flags);
            let (idx, f) = p.a.write_wqe(qa, &w);
            if j == 0 {
                first = f;
            }
            last = idx;
        }
        p.a.ring(qa, first);
        p.fabric.run_until_idle();
        let c =
            p.a.poll(&mut p.acq.0)
                .expect("the burst's signaled completion");
        assert_eq!(c.opcode(), MLX5_CQE_REQ);
        assert_eq!(c.wqe_counter(), last);
        assert!(p.a.poll(&mut p.acq.0).is_none());
        // Done: the QP gave its buffer back, and only one is in use in all.
        p.a.h.sim.with_engine(|e| {
            let holding = pairs_holding(e, &[qpn]);
            assert_eq!(holding, 0, "QP {qpn:#x} is idle and holds a buffer");
            assert_eq!(e.flight_bufs().len(), 1, "after QP {k}");
        });
    }
    for k in 0..QPS * BURST {
        let v = (k as u64) | 0xabcd_0000_0000;
        assert_eq!(p.b.mr_read(&dst, k * 8, 8), v.to_le_bytes(), "word {k}");
    }
    let qpns: Vec<u32> = pairs.iter().map(|(qa, _)| qa.qpn).collect();
    p.a.h
        .sim
        .with_engine(|e| assert_eq!(pairs_holding(e, &qpns), 0));
}

/// How many of the QPs `qpns` hold an in-flight record buffer.
fn pairs_holding(e: &ferroverbs_sim::engine::Engine, qpns: &[u32]) -> usize {
    qpns.iter()
        .filter(|&&q| e.qp(q).is_some_and(|r| r.sq.wqes.capacity() != 0))
        .count()
}

/// QPs in flight together hold a buffer each, and give them all back when they are
/// done; when QPs go (to RST, or destroyed) the engine keeps no more buffers than it
/// has QPs, so the buffers of a crowd of QPs gone are not kept for ever.
#[test]
fn in_flight_record_buffers_never_outnumber_the_qps() {
    const QPS: usize = 16;
    let mut p = Pair::deterministic(Conn::default());
    let src = p.a.reg_mr(4096, ALL);
    let dst = p.b.reg_mr(QPS * 8, ALL);
    let mut qas = Vec::with_capacity(QPS);
    for k in 0..QPS {
        let qa = p.a.create_qp(&p.acq.0, &p.acq.1, 6, 0, 2);
        let qb = p.b.create_qp(&p.bcq.0, &p.bcq.1, 6, 0, 2);
        let c = Conn {
            sq_psn: 0x2000 * (k as u32 + 1),
            ..Conn::default()
        };
        p.connect_qps(&qa, &qb, &c, 0x40_0000 + k as u32);
        qas.push(qa);
    }
    // Every QP rings before any ACK is back: each takes a buffer of its own.
    for (k, qa) in qas.iter_mut().enumerate() {
        let w = rdma_wqe(
            qa.qpn,
            false,
            dst.va + (k * 8) as u64,
            dst.key,
            &[sge(&src, 0, 8)],
            None,
            SIG,
        );
        let (_, first) = p.a.write_wqe(qa, &w);
        p.a.ring(qa, first);
    }
    let holding = |p: &Pair, qas: &[Qp]| {
        p.a.h.sim.with_engine(|e| {
            qas.iter()
                .filter(|q| e.qp(q.qpn).is_some_and(|r| r.sq.wqes.capacity() != 0))
                .count()
        })
    };
    assert_eq!(holding(&p, &qas), QPS);
    p.fabric.run_until_idle();
    for _ in 0..QPS {
        let c = p.a.poll(&mut p.acq.0).expect("a completion per QP");
        assert_eq!(c.opcode(), MLX5_CQE_REQ);
    }
    assert_eq!(holding(&p, &qas), 0);
    assert_eq!(p.a.h.sim.with_engine(|e| e.flight_bufs().len()), QPS);
    // The QPs go to RST one by one: the buffers kept follow the QPs left.
    for (k, qa) in qas.iter().enumerate() {
        p.a.modify(qa, ferroverbs_hw::control::qp::QpTransition::ToRst);
        let (bufs, live) = p.a.h.sim.with_engine(|e| {
            let live = std::iter::once(p.qa.qpn)
                .chain(qas.iter().map(|q| q.qpn))
                .filter(|&q| e.qp(q).is_some())
                .count();
            (e.flight_bufs().len(), live)
        });
        assert_eq!(live, QPS - k, "the pair's QP and the QPs not reset yet");
        assert!(bufs <= live, "{bufs} buffers for {live} QPs");
    }
}

//! Measures where send doorbells are best serviced: the round trip of a 64-byte SEND
//! ping-pong between two threaded devices with doorbells serviced on the ringing
//! thread (the default) and deferred to the device thread. Ignored by default (timing); run with
//! `cargo test --release -p ferroverbs-sim --test dp_latency -- --ignored --nocapture`.
//! A short run of each also checks that deferred doorbells work in both modes.

mod common;
mod dp;

use std::time::{Duration, Instant};

use dp::*;
use ferroverbs_hw::datapath::cqe::MLX5_CQE_RESP_SEND;
use ferroverbs_sim::{Doorbells, SimConfig};

fn ping_pong(threaded: bool, doorbells: Doorbells, rounds: u32) -> Duration {
    let mut p = Pair::new(
        |s| SimConfig {
            doorbells,
            ..if threaded {
                SimConfig::threaded(s, 1)
            } else {
                SimConfig::deterministic(s, 1)
            }
        },
        // Threaded: real time with device threads that may wait 100 ms or more for a
        // CPU; the in-process fabric loses nothing, so the ACK timeout is 34 s
        // (exponent 23; the retry budget lasts 8 × 34 s, past `wait_cqe`'s guard)
        // rather than the default 67 ms, eight spurious expiries of which in a row
        // would fail the WR.
        Conn {
            ack_timeout: if threaded { 23 } else { 14 },
            ..Conn::default()
        },
    );
    let (qa, qb) = (p.qa.qpn, p.qb.qpn);
    let a = p.a.reg_mr(4096, ALL);
    let b = p.b.reg_mr(4096, ALL);
    let ping = send_wqe(qa, &[sge(&a, 0, 64)], None, 0);
    let pong = send_wqe(qb, &[sge(&b, 0, 64)], None, 0);
    let start = Instant::now();
    for i in 0..rounds {
        p.b.post_recv(&mut p.qb, &[sge(&b, 0, 64)]);
        p.a.post_recv(&mut p.qa, &[sge(&a, 0, 64)]);
        p.a.post(&mut p.qa, &ping);
        let r = wait_cqe(&p.fabric, &p.b, &mut p.bcq.1);
        assert_eq!(r.opcode(), MLX5_CQE_RESP_SEND, "ping {i}");
        p.b.post(&mut p.qb, &pong);
        let r = wait_cqe(&p.fabric, &p.a, &mut p.acq.1);
        assert_eq!(r.opcode(), MLX5_CQE_RESP_SEND, "pong {i}");
    }
    start.elapsed() / rounds
}

#[test]
fn deferred_doorbells_work_in_both_modes() {
    for threaded in [false, true] {
        ping_pong(threaded, Doorbells::Deferred, 200);
    }
}

#[test]
#[ignore = "timing; run in release with --nocapture"]
fn doorbell_servicing_round_trip() {
    for threaded in [false, true] {
        for d in [Doorbells::Inline, Doorbells::Deferred] {
            ping_pong(threaded, d, 2000);
            let rtt = ping_pong(threaded, d, 20_000);
            println!(
                "{} {:?}: 64 B SEND ping-pong round trip {:.2} µs",
                if threaded {
                    "threaded"
                } else {
                    "deterministic"
                },
                d,
                rtt.as_secs_f64() * 1e6
            );
        }
    }
}

#[test]
#[ignore = "timing; run in release with --nocapture"]
fn message_rate_one_qp() {
    let mut p = Pair::deterministic(Conn::default());
    let qa = p.qa.qpn;
    let a = p.a.reg_mr(4096, ALL);
    let b = p.b.reg_mr(4096, ALL);
    let batch = 32u32;
    let mut sent = 0u64;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        for _ in 0..batch {
            p.b.post_recv(&mut p.qb, &[sge(&b, 0, 64)]);
        }
        let mut first = [0u8; 8];
        for k in 0..batch {
            let flags = if k + 1 == batch { SIG } else { 0 };
            let (_, f) =
                p.a.write_wqe(&mut p.qa, &send_wqe(qa, &[sge(&a, 0, 64)], None, flags));
            first = f;
        }
        p.a.ring(&p.qa, first);
        p.fabric.run_until_idle();
        assert!(p.a.poll(&mut p.acq.0).is_some());
        for _ in 0..batch {
            assert!(p.b.poll(&mut p.bcq.1).is_some());
        }
        sent += u64::from(batch);
    }
    let rate = sent as f64 / start.elapsed().as_secs_f64();
    println!("deterministic, one QP, 64 B SENDs in lists of {batch}: {:.0} messages/s (harness included)", rate);
}

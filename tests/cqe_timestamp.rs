//! Completion timestamps on the simulator, through the Rust verbs API: the CQE
//! `timestamp` a ConnectX writes (`struct mlx5_cqe64` `timestamp`, big-endian), the
//! device clock's free-running counter at `device_frequency_khz` (156.25 MHz), read
//! by `CompletionQueue::poll_one_with_timestamp`. On the bed's virtual clock each
//! timestamp lies between the device times before and after its completion, they
//! increase with the clock, and the same seed gives the same timestamps.

use std::time::Duration;

use ferroverbs::verbs::{RecvWr, SendWr, WcOpcode, WcStatus};
use ferroverbs_sim::engine::cq::device_ticks;
use ferroverbs_testbed::{Bed, PairConfig};

const T: Duration = Duration::from_secs(5);

/// 156.25 MHz in ticks per ns: `ns * 5 / 32`.
fn ticks(d: Duration) -> u64 {
    (d.as_nanos() * 5 / 32) as u64
}

/// The device reports the clock and the timestamp mask, as Linux
/// `mlx5_ib_query_device` does.
#[test]
fn the_device_reports_its_clock_and_the_timestamp_mask() {
    let bed = Bed::new(1);
    let d = bed.nic(0).ctx.query_device().unwrap();
    assert_eq!(d.hca_core_clock_khz, 156_250);
    assert_eq!(d.completion_timestamp_mask, 0x7fff_ffff_ffff_ffff);
    assert_eq!(device_ticks(1_000_000_000), 156_250_000);
    assert_eq!(device_ticks(32), 5);
    assert_eq!(device_ticks(31), 4);
}

/// SENDs from A to B, 1 ms and then 7 ms of virtual time apart: the timestamps of
/// A's requester and B's responder completions, each within the device time around
/// its completion, and the differences those of the clock.
fn run(seed: u64) -> Vec<(u64, u64)> {
    let bed = Bed::new(seed);
    let mut p = bed.pair(0, 1, &PairConfig::rc()).unwrap();
    let mut out = Vec::new();
    for (i, gap) in [1u64, 7, 7].into_iter().enumerate() {
        bed.advance(Duration::from_millis(gap));
        let rsg = [p.b.mr.sge(0, 64).unwrap()];
        p.b.qp
            .post_recv(&[RecvWr::new(100 + i as u64, &rsg)])
            .unwrap();
        let parts: [&[u8]; 1] = [b"stamped"];
        let before = bed.now();
        p.a.qp
            .post_send(&[SendWr::send_inline(i as u64, &parts).signaled()])
            .unwrap();
        let (ra, ta) = bed
            .run_until(T, || p.a.cq.poll_one_with_timestamp())
            .unwrap();
        let (rb, tb) = bed
            .run_until(T, || p.b.cq.poll_one_with_timestamp())
            .unwrap();
        let after = bed.now();
        assert_eq!(
            (ra.status, ra.opcode, ra.wr_id),
            (WcStatus::Success, WcOpcode::Send, i as u64)
        );
        assert_eq!(
            (rb.status, rb.opcode, rb.wr_id),
            (WcStatus::Success, WcOpcode::Recv, 100 + i as u64)
        );
        assert_eq!(rb.byte_len, 7);
        for t in [ta, tb] {
            assert!(
                ticks(before) <= t && t <= ticks(after),
                "timestamp {t} outside {}..={} ({before:?}..{after:?})",
                ticks(before),
                ticks(after)
            );
        }
        // The responder completes before the ACK that completes the requester.
        assert!(tb <= ta, "responder {tb} after requester {ta}");
        out.push((ta, tb));
    }
    for w in out.windows(2) {
        // 7 ms later, less the (sub-millisecond) time a round trip took.
        let (d_a, d_b) = (w[1].0 - w[0].0, w[1].1 - w[0].1);
        let seven = ticks(Duration::from_millis(7));
        for d in [d_a, d_b] {
            assert!(
                d > seven * 9 / 10 && d < seven * 11 / 10,
                "{d} ticks vs {seven}"
            );
        }
    }
    out
}

#[test]
fn cqe_timestamps_follow_the_device_clock() {
    let a = run(3);
    assert!(a[0].0 > 0);
}

#[test]
fn the_same_seed_gives_the_same_timestamps() {
    assert_eq!(run(5), run(5));
}

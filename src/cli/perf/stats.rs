//! The numbers perftest reports, computed as perftest computes them.
//!
//! Facts from linux-rdma/perftest (`src/perftest_parameters.c`, `print_report_lat` and
//! `print_report_bw`); the code here is our own.
//!
//! # Latency (`*_lat`)
//!
//! The client stamps the clock before posting each iteration (`tposted[i]`). The
//! samples are the `iters - 1` differences of consecutive stamps, each one full
//! iteration: a round trip for SEND and RDMA WRITE ping-pong, one RDMA READ or atomic
//! for the one-sided tests. perftest divides by the *RTT factor*, 2 for SEND and WRITE
//! (it reports half the round trip) and 1 for READ and atomics (a one-sided request
//! already is a whole round trip, and that is what it reports). Then:
//!
//! * the samples are sorted, and the 2 largest (`LAT_MEASURE_TAIL`) are left out of
//!   the count `m` used below (they remain in the array);
//! * `t_min` is `delta[0]`, `t_max` is `delta[m]` (so the single largest sample is
//!   never reported);
//! * `t_typical` is the median of the first `m`: `delta[m/2]` when `m` is odd, the mean
//!   of `delta[m/2 - 1]` and `delta[m/2]` when `m` is even;
//! * `t_avg` and `t_stdev` are the mean and the population standard deviation (divided
//!   by `m`) of the first `m`;
//! * the 99 % and 99.9 % percentiles are `delta[ceil(m * 0.99)]` and
//!   `delta[ceil(m * 0.999)]`.
//!
//! Two deliberate differences: perftest measures in TSC cycles and takes the median's
//! mean in integer cycles; we measure in nanoseconds and keep the fraction. And
//! perftest squares each deviation after truncating it to a whole number of
//! microseconds (an `int`), which reports a standard deviation of 0 for any jitter
//! below 1 µs; we do not truncate.
//!
//! # Bandwidth (`*_bw`)
//!
//! `tposted[i]` is stamped when WR `i` (counted over all QPs) is posted, at the start
//! of each post list; `tcompleted[j]` when the completion that retires WR `j` is
//! polled, at each CQ-moderation point (every `cq_mod`-th WR, and the last). With `n`
//! WRs of `size` bytes, `T = tcompleted[n-1] - tposted[0]`:
//!
//! * BW average = `size * n / T` in MiB/s (perftest's "MB" is 2^20 bytes, and its
//!   current header says MiB/sec);
//! * MsgRate = `n / T` in millions of messages per second;
//! * BW peak = `size / d` in MiB/s, where `d` is the smallest average time per message
//!   over every window from a post-list start `i` to a moderation point `j >= i`:
//!   `min (tcompleted[j] - tposted[i]) / (j - i + 1)`. A window counts only if its
//!   last message was polled after it was posted (`tcompleted[j]` later than the
//!   stamp of the post list holding `j`): with several QPs the message index runs
//!   over the QPs, and a completion of one QP is often polled before a
//!   higher-numbered message of another QP is posted; such a window measures no
//!   time (it once made the peak `size / 1 ps`, 61,035,156 MiB/s for 64 bytes). With
//!   no window left the peak is the average.
//!
//! The peak search visits `n / post_list` starts times `n / cq_mod` ends, as perftest
//! does; when that exceeds [`PEAK_BUDGET`] window evaluations, the starts are thinned
//! evenly (every k-th post list) so a long run does not take minutes to report.

/// At most this many windows are evaluated for the BW peak.
pub const PEAK_BUDGET: u64 = 10_000_000;

/// perftest leaves the largest samples out of the statistics (`LAT_MEASURE_TAIL`).
pub const LAT_MEASURE_TAIL: usize = 2;

/// Bytes per "MB" in perftest's bandwidth (`0x100000`).
pub const MIB: f64 = 1_048_576.0;

/// The latency line of a `*_lat` test, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencyReport {
    /// Message size in bytes.
    pub bytes: u64,
    /// Iterations run.
    pub iterations: u64,
    /// Smallest sample.
    pub t_min: f64,
    /// Largest sample counted (the second largest of all).
    pub t_max: f64,
    /// Median.
    pub t_typical: f64,
    /// Mean.
    pub t_avg: f64,
    /// Population standard deviation.
    pub t_stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p99_9: f64,
}

/// Why a report cannot be computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StatsError {
    /// Too few stamps: a latency report needs at least `LAT_MEASURE_TAIL + 2` samples,
    /// that is 4 iterations (perftest requires 5).
    #[error("{have} iteration stamps are too few for a latency report (at least {need})")]
    TooFewSamples {
        /// Stamps given.
        have: usize,
        /// Stamps needed.
        need: usize,
    },
    /// A stamp is earlier than the one before it.
    #[error("iteration stamp {index} is earlier than the one before it")]
    NonMonotonic {
        /// Index of the offending stamp.
        index: usize,
    },
    /// The bandwidth arrays are empty or of different lengths.
    #[error("bandwidth stamps: {posted} posted and {completed} completed (need equal, nonzero)")]
    BadBwStamps {
        /// Length of the posted array.
        posted: usize,
        /// Length of the completed array.
        completed: usize,
    },
    /// `post_list` or `cq_mod` is zero.
    #[error("post list and CQ moderation must be at least 1")]
    ZeroStep,
}

/// The samples of a latency test: differences of consecutive post stamps (ns),
/// divided by the RTT factor, in microseconds, sorted.
#[derive(Clone, Debug, PartialEq)]
pub struct LatencySamples {
    /// Sorted samples in microseconds (all of them, tail included).
    pub sorted_us: Vec<f64>,
    /// How many count for the statistics (`len - LAT_MEASURE_TAIL`).
    pub measured: usize,
}

impl LatencySamples {
    /// Samples from the post stamps `tposted` (ns, one per iteration) of a test whose
    /// RTT factor is `rtt_factor` (2 for SEND/WRITE ping-pong, 1 for READ/atomic).
    pub fn from_stamps(tposted_ns: &[u64], rtt_factor: u32) -> Result<Self, StatsError> {
        let need = LAT_MEASURE_TAIL + 2;
        if tposted_ns.len() < need {
            return Err(StatsError::TooFewSamples {
                have: tposted_ns.len(),
                need,
            });
        }
        let q = 1000.0 * f64::from(rtt_factor.max(1));
        let mut d = Vec::with_capacity(tposted_ns.len() - 1);
        for (i, w) in tposted_ns.windows(2).enumerate() {
            let delta = w[1]
                .checked_sub(w[0])
                .ok_or(StatsError::NonMonotonic { index: i + 1 })?;
            d.push(delta as f64 / q);
        }
        Ok(Self::from_deltas_us(d))
    }

    /// Samples from per-iteration times already in microseconds (any order).
    pub fn from_deltas_us(mut deltas: Vec<f64>) -> Self {
        deltas.sort_by(f64::total_cmp);
        let measured = deltas.len().saturating_sub(LAT_MEASURE_TAIL);
        LatencySamples {
            sorted_us: deltas,
            measured,
        }
    }

    /// The samples that count for the statistics (the tail left out).
    pub fn measured(&self) -> &[f64] {
        &self.sorted_us[..self.measured]
    }

    /// The report line.
    pub fn report(&self, bytes: u64, iterations: u64) -> Result<LatencyReport, StatsError> {
        let m = self.measured;
        let d = &self.sorted_us;
        if m < 1 || d.len() < m + 1 {
            return Err(StatsError::TooFewSamples {
                have: d.len() + 1,
                need: LAT_MEASURE_TAIL + 2,
            });
        }
        let median = if (m - 1) % 2 == 1 {
            (d[m / 2] + d[m / 2 - 1]) / 2.0
        } else {
            d[m / 2]
        };
        let avg = d[..m].iter().sum::<f64>() / m as f64;
        let var = d[..m].iter().map(|x| (avg - x) * (avg - x)).sum::<f64>() / m as f64;
        // ceil() of a product of two exact binary fractions; both ≤ m, in bounds.
        let i99 = ((m as f64) * 0.99).ceil() as usize;
        let i999 = ((m as f64) * 0.999).ceil() as usize;
        Ok(LatencyReport {
            bytes,
            iterations,
            t_min: d[0],
            t_max: d[m],
            t_typical: median,
            t_avg: avg,
            t_stdev: var.sqrt(),
            p99: d[i99.min(m)],
            p99_9: d[i999.min(m)],
        })
    }
}

/// The RTT factor of a test (perftest: 1 for READ and ATOMIC, 2 otherwise).
pub fn rtt_factor(one_sided_request: bool) -> u32 {
    if one_sided_request {
        1
    } else {
        2
    }
}

/// The bandwidth line of a `*_bw` test.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BwReport {
    /// Message size in bytes.
    pub bytes: u64,
    /// Messages counted (iterations times QPs).
    pub iterations: u64,
    /// Peak bandwidth, MiB/s.
    pub bw_peak: f64,
    /// Average bandwidth, MiB/s.
    pub bw_avg: f64,
    /// Average message rate, millions per second.
    pub msg_rate: f64,
}

/// Computes the bandwidth line from stamps in nanoseconds: `tposted[i]` is meaningful
/// where `i` is a multiple of `post_list`, `tcompleted[j]` where `j + 1` is a multiple
/// of `cq_mod` and at the last index (the others are ignored).
pub fn bw_report(
    bytes: u64,
    tposted_ns: &[u64],
    tcompleted_ns: &[u64],
    post_list: usize,
    cq_mod: usize,
) -> Result<BwReport, StatsError> {
    let n = tposted_ns.len();
    if n == 0 || tcompleted_ns.len() != n {
        return Err(StatsError::BadBwStamps {
            posted: n,
            completed: tcompleted_ns.len(),
        });
    }
    if post_list == 0 || cq_mod == 0 {
        return Err(StatsError::ZeroStep);
    }
    // A total of 0 ns (a coarse clock) would divide by zero: count it as 1 ns.
    let total_ns = tcompleted_ns[n - 1].saturating_sub(tposted_ns[0]).max(1) as f64;
    let secs = total_ns / 1e9;
    let bw_avg = bytes as f64 * n as f64 / secs / MIB;
    let msg_rate = n as f64 / secs / 1e6;
    let best_ns = match peak_delta_ns(tposted_ns, tcompleted_ns, post_list, cq_mod) {
        t if t.is_finite() => t,
        _ => total_ns / n as f64,
    };
    Ok(BwReport {
        bytes,
        iterations: n as u64,
        bw_peak: bytes as f64 / (best_ns / 1e9) / MIB,
        bw_avg,
        msg_rate,
    })
}

/// The smallest average time per message over the windows perftest searches whose
/// last message completed after it was posted (ns); infinite when there is none.
fn peak_delta_ns(p: &[u64], c: &[u64], post_list: usize, cq_mod: usize) -> f64 {
    let n = p.len();
    let starts = n.div_ceil(post_list) as u64;
    let ends = (n / cq_mod + 1) as u64;
    let work = starts.saturating_mul(ends);
    // Thin the starts when the search is too long: every `skip`-th post list.
    let skip = work.div_ceil(PEAK_BUDGET).max(1) as usize;
    let mut best = f64::INFINITY;
    let mut window = |i: usize, j: usize| {
        // Message j was posted with the post list starting at this index.
        let posted_j = p[j / post_list * post_list];
        if c[j] <= posted_j {
            return;
        }
        let t = (c[j] - p[i]) as f64 / (j - i + 1) as f64;
        if t < best {
            best = t;
        }
    };
    let mut i = 0;
    while i < n {
        // First moderation point at or after i: ROUND_UP(i + 1, cq_mod) - 1.
        let mut j = (i + 1).div_ceil(cq_mod) * cq_mod - 1;
        while j < n {
            window(i, j);
            j += cq_mod;
        }
        // The last WR is signaled whatever the moderation.
        if !n.is_multiple_of(cq_mod) {
            window(i, n - 1);
        }
        i += post_list * skip;
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    /// Stamps whose consecutive differences are `deltas_ns`.
    fn stamps(deltas_ns: &[u64]) -> Vec<u64> {
        let mut t = vec![1_000_000u64];
        for d in deltas_ns {
            t.push(t.last().unwrap() + d);
        }
        t
    }

    #[test]
    fn latency_of_ten_iterations_as_perftest() {
        // 9 samples of a ping-pong (rtt factor 2), in ns of round trip.
        let d = [2000, 4000, 2200, 2400, 10_000, 2600, 2800, 3000, 50_000];
        let s = LatencySamples::from_stamps(&stamps(&d), 2).unwrap();
        // Half round trips, sorted: 1.0 1.1 1.2 1.3 1.4 1.5 2.0 5.0 25.0 (µs).
        assert_eq!(s.sorted_us.len(), 9);
        assert_eq!(s.measured, 7);
        let r = s.report(2, 10).unwrap();
        assert_eq!(r.bytes, 2);
        assert_eq!(r.iterations, 10);
        assert!(close(r.t_min, 1.0));
        // t_max is delta[m]: the 8th of 9, 5.0, not the largest 25.0.
        assert!(close(r.t_max, 5.0));
        // m = 7, odd: median delta[3].
        assert!(close(r.t_typical, 1.3));
        let avg = (1.0 + 1.1 + 1.2 + 1.3 + 1.4 + 1.5 + 2.0) / 7.0;
        assert!(close(r.t_avg, avg));
        let var = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 2.0]
            .iter()
            .map(|x| (x - avg) * (x - avg))
            .sum::<f64>()
            / 7.0;
        assert!(close(r.t_stdev, var.sqrt()));
        // ceil(7 * 0.99) = 7 and ceil(7 * 0.999) = 7: delta[7] = 5.0.
        assert!(close(r.p99, 5.0));
        assert!(close(r.p99_9, 5.0));
    }

    #[test]
    fn even_count_median_is_the_mean_of_the_middle_two() {
        // 10 samples, m = 8 (even): median (delta[3] + delta[4]) / 2.
        let d: Vec<f64> = (1..=10).map(f64::from).collect();
        let s = LatencySamples::from_deltas_us(d);
        let r = s.report(8, 11).unwrap();
        assert_eq!(s.measured, 8);
        assert!(close(r.t_typical, 4.5));
        assert!(close(r.t_max, 9.0));
        assert!(close(r.t_avg, 4.5));
    }

    #[test]
    fn one_sided_tests_are_not_halved() {
        let d = [3000u64; 20];
        let half = LatencySamples::from_stamps(&stamps(&d), rtt_factor(false)).unwrap();
        let full = LatencySamples::from_stamps(&stamps(&d), rtt_factor(true)).unwrap();
        assert!(close(half.report(2, 21).unwrap().t_typical, 1.5));
        let r = full.report(2, 21).unwrap();
        assert!(close(r.t_typical, 3.0));
        assert!(close(r.t_stdev, 0.0));
        assert!(close(r.p99_9, 3.0));
    }

    #[test]
    fn percentile_indices_on_a_thousand_iterations() {
        // 1000 iterations: 999 samples 1..=999 µs (rtt 1), m = 997.
        let d: Vec<f64> = (1..=999).map(f64::from).collect();
        let s = LatencySamples::from_deltas_us(d);
        let r = s.report(2, 1000).unwrap();
        // ceil(997 * 0.99) = 988 -> value 989; ceil(997 * 0.999) = 997 -> 998.
        assert!(close(r.p99, 989.0));
        assert!(close(r.p99_9, 998.0));
        assert!(close(r.t_max, 998.0));
        // m = 997 odd: median delta[498] = 499.
        assert!(close(r.t_typical, 499.0));
    }

    #[test]
    fn synthetic_distribution_with_outliers() {
        // 100,000 samples: 99 % at 1.0-1.99 µs, 1 % at 50 µs, 2 huge outliers.
        let mut d = Vec::new();
        for i in 0..99_000u32 {
            d.push(1.0 + f64::from(i % 100) / 100.0);
        }
        d.extend(std::iter::repeat_n(50.0, 998));
        d.push(1e6);
        d.push(2e6);
        let r = LatencySamples::from_deltas_us(d)
            .report(64, 100_001)
            .unwrap();
        // m = 99,998: the statistics leave out both outliers, but t_max is delta[m],
        // the second largest of all.
        assert!(close(r.t_min, 1.0));
        assert!(close(r.t_max, 1e6));
        assert!(r.t_typical >= 1.0 && r.t_typical < 2.0);
        // ceil(99,998 * 0.99) = 98,999 (< 99,000: still in the fast band).
        assert!(close(r.p99, 1.99));
        // ceil(99,998 * 0.999) = 99,899: in the 50 µs band.
        assert!(close(r.p99_9, 50.0));
        let avg = (99_000.0 * 1.495 + 998.0 * 50.0) / 99_998.0;
        assert!((r.t_avg - avg).abs() < 1e-6, "{} {avg}", r.t_avg);
    }

    #[test]
    fn latency_input_errors() {
        assert_eq!(
            LatencySamples::from_stamps(&[1, 2, 3], 2),
            Err(StatsError::TooFewSamples { have: 3, need: 4 })
        );
        assert_eq!(
            LatencySamples::from_stamps(&[1, 2, 3, 2, 5], 2),
            Err(StatsError::NonMonotonic { index: 3 })
        );
        assert!(LatencySamples::from_stamps(&[0, 1, 2, 3], 2)
            .unwrap()
            .report(2, 4)
            .is_ok());
    }

    #[test]
    fn bandwidth_of_a_steady_stream() {
        // 1000 WRs of 64 KiB, one every 10 µs, each completing 5 µs after its post;
        // moderation 100, post list 1.
        let n = 1000usize;
        let p: Vec<u64> = (0..n as u64).map(|i| i * 10_000).collect();
        let c: Vec<u64> = p.iter().map(|t| t + 5_000).collect();
        let r = bw_report(65536, &p, &c, 1, 100).unwrap();
        assert_eq!(r.iterations, 1000);
        // T = 999 * 10 µs + 5 µs.
        let secs = (999.0 * 10_000.0 + 5_000.0) / 1e9;
        assert!(close(r.msg_rate, 1000.0 / secs / 1e6));
        assert!(close(r.bw_avg, 65536.0 * 1000.0 / secs / MIB));
        // Best window: one WR alone would be 5 µs, but only moderation points count:
        // i = 99, j = 99 gives 5 µs.
        assert!(close(r.bw_peak, 65536.0 / 5e-6 / MIB));
    }

    #[test]
    fn windows_whose_last_message_completed_before_it_was_posted_do_not_count() {
        // Messages numbered across QPs: message 2 (another QP) polled at 1000, the
        // instant it was posted; the windows ending at it measured nothing (0 ns for
        // (2, 2)) and are skipped.
        let p = [0u64, 1000, 1000, 1000];
        let c = [900u64, 3000, 1000, 4000];
        let r = bw_report(64, &p, &c, 1, 1).unwrap();
        // The rest: (0,0) 900 ns, (0,1) 1500, (1,1) 2000, (0,3) 1000, (1,3) 1000,
        // (2,3) 1500, (3,3) 3000 per message.
        assert!(close(r.bw_peak, 64.0 / 900e-9 / MIB), "{}", r.bw_peak);
        // Every completion at or before its post: the average.
        let r = bw_report(64, &[5, 5], &[5, 5], 1, 1).unwrap();
        assert!(close(r.bw_peak, r.bw_avg));
    }

    #[test]
    fn peak_only_ends_at_moderation_points() {
        // 8 WRs, cq_mod 4: completions stamped at j = 3 and 7 only. Garbage elsewhere
        // must be ignored.
        let p = [0, 10, 20, 30, 40, 50, 60, 70];
        let c = [0, 0, 0, 100, 0, 0, 0, 180];
        let r = bw_report(1 << 20, &p, &c, 1, 4).unwrap();
        // Windows: (0,3) 100/4=25, (0,7) 180/8=22.5, (1,3) 90/3=30, (2,3) 80/2=40,
        // (3,3) 70/1, (4,7) 140/4=35, ... best 22.5 ns per message.
        assert!(close(r.bw_peak, 1.0 / 22.5e-9));
        // Average over T = 180 ns.
        assert!(close(r.msg_rate, 8.0 / 180e-9 / 1e6));
    }

    #[test]
    fn peak_with_post_lists_and_a_ragged_end() {
        // 10 WRs, post list 2 (stamps at 0, 2, 4, 6, 8), moderation 4 (j = 3, 7) plus
        // the last WR (9) since 10 % 4 != 0.
        let p = [0, 0, 20, 0, 40, 0, 60, 0, 80, 0];
        let c = [0, 0, 0, 50, 0, 0, 0, 130, 0, 139];
        let r = bw_report(100, &p, &c, 2, 4).unwrap();
        // (0,3) 50/4 = 12.5; (0,7) 130/8 = 16.25; (0,9) 139/10 = 13.9; (2,3) 30/2 = 15;
        // (4,7) 90/4 = 22.5; (8,9) 59/2 = 29.5; (6,7) 70/2 = 35 ... best 12.5.
        assert!(close(r.bw_peak, 100.0 / 12.5e-9 / MIB));
    }

    #[test]
    fn bandwidth_input_errors() {
        assert!(matches!(
            bw_report(1, &[], &[], 1, 1),
            Err(StatsError::BadBwStamps { .. })
        ));
        assert!(matches!(
            bw_report(1, &[0, 1], &[1], 1, 1),
            Err(StatsError::BadBwStamps { .. })
        ));
        assert_eq!(bw_report(1, &[0], &[1], 0, 1), Err(StatsError::ZeroStep));
        // Zero elapsed time does not divide by zero.
        let r = bw_report(1, &[5], &[5], 1, 1).unwrap();
        assert!(r.bw_avg.is_finite() && r.bw_peak.is_finite());
    }

    #[test]
    fn a_long_run_thins_the_peak_search() {
        // 2,000,000 WRs with cq_mod 1 would be 2e12 windows; it must finish quickly and
        // still find the steady-state rate.
        let n = 2_000_000usize;
        let p: Vec<u64> = (0..n as u64).map(|i| i * 100).collect();
        let c: Vec<u64> = p.iter().map(|t| t + 100).collect();
        let t = std::time::Instant::now();
        let r = bw_report(64, &p, &c, 1, 1_000_000).unwrap();
        assert!(t.elapsed().as_secs() < 30);
        assert!(r.bw_peak > 0.0);
        let r = bw_report(64, &p[..10_000], &c[..10_000], 1, 1).unwrap();
        // Windows from i to j cost (100 (j-i) + 100) / (j - i + 1) ns: best near 100.
        assert!((r.bw_peak - 64.0 / 100e-9 / MIB).abs() / r.bw_peak < 0.01);
    }
}

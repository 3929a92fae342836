//! A log-linear histogram of latency samples for `--report-histogram`: every power of
//! two of nanoseconds is split into 4 equal buckets (a relative resolution of 25 % or
//! better), values below 4 ns have a bucket each. Counting is O(1) per sample and the
//! table is 250 counters, whatever the run length.
//!
//! perftest's `-H` prints every sorted sample, one line each; for the long runs this
//! tool makes that is unreadable, so it prints the bucket table instead.

use std::fmt::Write as _;

/// Sub-buckets per power of two (2 bits).
const SUB_BITS: u32 = 2;
const SUB: u64 = 1 << SUB_BITS;
/// Buckets: 4 exact ones below 4 ns, then 4 per octave up to 2^64.
const BUCKETS: usize = (SUB as usize) * (64 - SUB_BITS as usize + 1);

/// Counts per bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

/// The bucket index of `v` nanoseconds.
fn index(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let k = 63 - v.leading_zeros(); // floor(log2 v) >= SUB_BITS
    let sub = (v >> (k - SUB_BITS)) & (SUB - 1);
    (SUB * u64::from(k - SUB_BITS + 1) + sub) as usize
}

/// The range `[lo, hi)` of bucket `i`, in nanoseconds (`hi` saturates at `u64::MAX`).
fn bounds(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < SUB {
        return (i, i + 1);
    }
    let k = (i / SUB) as u32 - 1 + SUB_BITS;
    let sub = i % SUB;
    let lo = (SUB + sub) << (k - SUB_BITS);
    let hi = (SUB + sub + 1)
        .checked_shl(k - SUB_BITS)
        .filter(|h| *h > lo)
        .unwrap_or(u64::MAX);
    (lo, hi)
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
        }
    }

    /// Counts one sample of `ns` nanoseconds.
    pub fn record_ns(&mut self, ns: u64) {
        self.counts[index(ns)] += 1;
        self.total += 1;
    }

    /// Counts one sample of `us` microseconds (rounded to the nanosecond; negative
    /// and NaN count as 0).
    pub fn record_us(&mut self, us: f64) {
        let ns = (us * 1000.0).round();
        self.record_ns(if ns.is_finite() && ns > 0.0 {
            ns as u64
        } else {
            0
        });
    }

    /// Samples counted.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The non-empty buckets: `(lo_ns, hi_ns, count)`.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| {
                let (lo, hi) = bounds(i);
                (lo, hi, *c)
            })
    }

    /// The table: one line per non-empty bucket with its range in microseconds, count,
    /// share, cumulative share and a bar.
    pub fn render(&self, title: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(out, " {title}, {} samples", self.total);
        let _ = writeln!(
            out,
            " {:>12} {:>12} {:>12} {:>8} {:>8}",
            "from[usec]", "to[usec]", "count", "%", "cum %"
        );
        let max = self.counts.iter().copied().max().unwrap_or(0).max(1);
        let mut cum = 0u64;
        for (lo, hi, c) in self.buckets() {
            cum += c;
            let pct = 100.0 * c as f64 / self.total as f64;
            let cum_pct = 100.0 * cum as f64 / self.total as f64;
            let bar = ((c as f64 / max as f64) * 40.0).ceil() as usize;
            let _ = writeln!(
                out,
                " {:>12.3} {:>12.3} {:>12} {:>8.2} {:>8.2}  {}",
                lo as f64 / 1000.0,
                hi as f64 / 1000.0,
                c,
                pct,
                cum_pct,
                "#".repeat(bar)
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_tile_the_line() {
        // Every bucket starts where the previous one ended.
        let mut prev_hi = 0;
        for i in 0..BUCKETS {
            let (lo, hi) = bounds(i);
            assert_eq!(lo, prev_hi, "bucket {i}");
            assert!(hi > lo || hi == u64::MAX);
            prev_hi = hi;
            if hi == u64::MAX {
                break;
            }
        }
        for v in [
            0u64,
            1,
            3,
            4,
            5,
            7,
            8,
            9,
            15,
            16,
            1000,
            1023,
            1024,
            1279,
            1280,
            u64::MAX,
        ] {
            let (lo, hi) = bounds(index(v));
            assert!(lo <= v && (v < hi || hi == u64::MAX), "{v}: [{lo}, {hi})");
        }
        assert_eq!(bounds(index(1000)), (896, 1024));
        assert_eq!(bounds(index(1024)), (1024, 1280));
        assert!(index(u64::MAX) < BUCKETS);
    }

    #[test]
    fn counts_and_renders_synthetic_samples() {
        let mut h = Histogram::new();
        for _ in 0..900 {
            h.record_us(1.1); // 1100 ns: [1024, 1280)
        }
        for _ in 0..99 {
            h.record_us(2.0); // 2000 ns: [1792, 2048)
        }
        h.record_us(100.0); // 100000 ns: [98304, 114688)
        h.record_us(-1.0);
        assert_eq!(h.total(), 1001);
        let b: Vec<_> = h.buckets().collect();
        assert_eq!(
            b,
            vec![
                (0, 1, 1),
                (1024, 1280, 900),
                (1792, 2048, 99),
                (98304, 114688, 1)
            ]
        );
        let text = h.render("Histogram of t[usec]");
        assert!(text.starts_with(" Histogram of t[usec], 1001 samples\n"));
        let line = text.lines().find(|l| l.contains(" 900 ")).unwrap();
        assert!(line.contains("1.024") && line.contains("1.280"), "{line}");
        assert!(line.contains("89.91"), "{line}");
        assert!(line.ends_with(&"#".repeat(40)), "{line}");
        let last = text.lines().last().unwrap();
        assert!(last.contains("100.00"), "{last}");
    }
}

//! Soak: 1,000,000 messages of a mixed SEND / WRITE / READ / fetch-and-add
//! workload over links losing 1 % of frames in each direction, deterministic mode:
//! nothing lost, nothing duplicated, everything in order and intact.
//!
//! About 45 s in a debug build on one core (a few seconds optimized); `REL_SOAK=<n>`
//! sets the count.

mod common;
mod dp;
mod rel;

use ferroverbs_sim::link::Impairments;

#[test]
fn a_million_messages_at_one_percent_loss() {
    let default = 1_000_000;
    let n = std::env::var("REL_SOAK")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    let mix = rel::Mix {
        max_len: 512,
        ..rel::Mix::default()
    };
    let t = std::time::Instant::now();
    let r = rel::check(
        0x50a4,
        n,
        Impairments::new().loss(0.01),
        mix,
        "cargo test -p ferroverbs-sim --test rel_soak",
    );
    eprintln!("{n} messages in {:?}: {r:?}", t.elapsed());
    assert_eq!(r.messages, n);
    assert!(r.faults.lost > n / 200, "{r:?}");
}

//! RC reliability over impaired links (issue 5), deterministic mode: seeded fault
//! schedules (loss, duplication, reordering, corruption) within the retry budget, and a
//! mixed SEND / WRITE / READ / fetch-and-add workload that must arrive exactly once, in
//! order, intact, with exactly one successful completion per WR. A failing case prints
//! its seed; `REL_SEED=<seed>` replays it (test `replay`).

mod common;
mod dp;
mod rel;

use ferroverbs_sim::link::Impairments;
use rel::*;

fn faults(loss: f64, dup: f64, reorder: f64, corrupt: f64) -> Impairments {
    Impairments::new()
        .loss(loss)
        .duplicate(dup)
        .reorder(reorder)
        .corrupt(corrupt)
}

#[test]
fn ten_thousand_messages_over_a_lossy_duplicating_reordering_corrupting_link() {
    let r = check(
        0x5eed_0001,
        10_000,
        faults(0.05, 0.05, 0.05, 0.05),
        Mix::default(),
    );
    eprintln!("{r:?}");
    assert_eq!(r.messages, 10_000);
    assert!(r.faults.lost > 100 && r.faults.duplicated > 100, "{r:?}");
    assert!(
        r.faults.reordered > 100 && r.faults.corrupted > 100,
        "{r:?}"
    );
    assert!(
        r.retransmits > 0 && r.timeouts > 0 && r.duplicates > 0,
        "{r:?}"
    );
}

/// The acceptance property: random fault schedules (loss up to 10 %), random mixes.
#[test]
fn seeded_fault_schedules_within_the_retry_budget() {
    let base: u64 = std::env::var("REL_BASE")
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0xfa17);
    for case in 0..8u64 {
        let seed = base.wrapping_mul(0x100).wrapping_add(case);
        let mut g = Rng(seed);
        let pct = |g: &mut Rng, max: u64| g.below(max + 1) as f64 / 1000.0;
        let imp = faults(
            pct(&mut g, 100),
            pct(&mut g, 50),
            pct(&mut g, 50),
            pct(&mut g, 30),
        );
        let send = g.below(60);
        let write = g.below(100 - send);
        let read = g.below(100 - send - write);
        let mix = Mix {
            send,
            write,
            read,
            max_len: 1 + g.below(4095),
        };
        check(seed, 600, imp, mix);
    }
}

/// Replays one seed: `REL_SEED=0x... cargo test -p ferroverbs-sim --test rel_faults replay`.
#[test]
fn replay() {
    let Some(seed) = std::env::var("REL_SEED")
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
    else {
        return;
    };
    let r = check(seed, 10_000, faults(0.05, 0.05, 0.05, 0.05), Mix::default());
    eprintln!("{r:?}");
}

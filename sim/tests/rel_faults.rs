//! RC reliability over impaired links, deterministic mode: seeded fault
//! schedules (loss, duplication, reordering, corruption) within the retry budget, and a
//! mixed SEND / WRITE / READ / fetch-and-add workload that must arrive exactly once, in
//! order, intact, with exactly one successful completion per WR. A failing case prints
//! its seed and the command that replays it.

mod common;
mod dp;
mod rel;

use std::time::Duration;

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
    let seed = env_seed("REL_SEED").unwrap_or(0x5eed_0001);
    let r = check(
        seed,
        10_000,
        faults(0.05, 0.05, 0.05, 0.05),
        Mix::default(),
        &format!("REL_SEED={seed:#x} cargo test -p ferroverbs-sim --test rel_faults ten_thousand"),
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

fn env_seed(var: &str) -> Option<u64> {
    std::env::var(var)
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
}

/// The fault schedule and operation mix of property case `seed`: loss up to 10 %,
/// duplication and reordering up to 5 %, corruption up to 3 %; every other case adds a
/// delay with jitter (which reorders too), every fourth a rate limit.
fn case(seed: u64) -> (Impairments, Mix) {
    let mut g = Rng(seed);
    let pct = |g: &mut Rng, max: u64| g.below(max + 1) as f64 / 1000.0;
    let mut imp = faults(
        pct(&mut g, 100),
        pct(&mut g, 50),
        pct(&mut g, 50),
        pct(&mut g, 30),
    );
    if seed % 2 == 1 {
        imp = imp.delay(
            Duration::from_micros(g.below(20)),
            Duration::from_micros(1 + g.below(30)),
        );
    }
    if seed % 4 == 3 {
        imp = imp.rate_limit(
            1_000_000_000 + g.below(4_000_000_000),
            Duration::from_millis(1),
        );
    }
    let send = g.below(60);
    let write = g.below(100 - send);
    let read = g.below(100 - send - write);
    let mix = Mix {
        send,
        write,
        read,
        max_len: 1 + g.below(4095),
    };
    (imp, mix)
}

fn run_case(seed: u64) -> Report {
    let (imp, mix) = case(seed);
    check(
        seed,
        600,
        imp,
        mix,
        &format!("REL_CASE={seed:#x} cargo test -p ferroverbs-sim --test rel_faults replay_case"),
    )
}

/// The acceptance property: random fault schedules within the retry budget, random
/// operation mixes. `REL_BASE` picks another family of seeds.
#[test]
fn seeded_fault_schedules_within_the_retry_budget() {
    let base = env_seed("REL_BASE").unwrap_or(0xfa17);
    for k in 0..8u64 {
        let r = run_case(base.wrapping_mul(0x100).wrapping_add(k));
        assert_eq!(r.messages, 600);
    }
}

/// Replays one property case: `REL_CASE=0x... cargo test -p ferroverbs-sim --test
/// rel_faults replay_case`.
#[test]
fn replay_case() {
    if let Some(seed) = env_seed("REL_CASE") {
        eprintln!("{:?}", run_case(seed));
    }
}

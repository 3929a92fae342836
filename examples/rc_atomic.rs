//! Atomics between two simulated NICs: fetch-and-add and compare-and-swap on 8 bytes of
//! B's memory. The operand is in host byte order, and so is the original value the
//! requester receives (the driver selects host-endian atomic responses, as Linux does).
//!
//! `cargo run --example rc_atomic`

use std::time::Duration;

use ferroverbs::verbs::{MemoryRegion, SendWr};
use ferroverbs_sim::SimBus;
use ferroverbs_testbed::Bed;

/// The 8 bytes at the start of `mr`, in host byte order.
fn word(mr: &MemoryRegion<'_, SimBus>) -> u64 {
    let mut b = [0u8; 8];
    mr.read(0, &mut b);
    u64::from_ne_bytes(b)
}

fn main() {
    let bed = Bed::new(1);
    let mut p = bed.rc_pair().unwrap();
    let second = Duration::from_secs(1);
    // The counter is at the start of B's buffer; A's buffer receives the old value.
    p.b.mr.write(0, &40u64.to_ne_bytes());
    let res = [p.a.mr.sge(0, 8).unwrap()];
    let counter = p.b.remote(0);

    p.a.qp
        .post_send(&[SendWr::atomic_fetch_add(1, &res, counter, 2).signaled()])
        .unwrap();
    assert!(bed.run_until(second, || p.a.cq.poll_one()).unwrap().is_ok());
    println!("fetch_add(2): was {}, now {}", word(&p.a.mr), word(&p.b.mr));
    assert_eq!((word(&p.a.mr), word(&p.b.mr)), (40, 42));
    for (compare, swap, after) in [(41, 0, 42), (42, 1000, 1000)] {
        p.a.qp
            .post_send(&[SendWr::atomic_cmp_swp(2, &res, counter, compare, swap).signaled()])
            .unwrap();
        assert!(bed.run_until(second, || p.a.cq.poll_one()).unwrap().is_ok());
        println!(
            "cmp_swp({compare} -> {swap}): was {}, now {}",
            word(&p.a.mr),
            word(&p.b.mr)
        );
        assert_eq!((word(&p.a.mr), word(&p.b.mr)), (42, after));
    }
}

//! Atomics between two simulated NICs: fetch-and-add and compare-and-swap on 8 bytes of
//! B's memory. The simulator keeps the operand in host byte order and, as a ConnectX
//! does, returns the original value big-endian.
//!
//! `cargo run --example rc_atomic`

#[path = "common/mod.rs"]
mod common;

use ferroverbs::verbs::{AccessFlags, QpCap, QpInitAttr, SendWr};

fn main() {
    let net = common::net();
    let (ca, ga) = common::open(&net.a, 1);
    let (cb, gb) = common::open(&net.b, 2);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (mut cqa, cqb) = (ca.create_cq(16).unwrap(), cb.create_cq(16).unwrap());
    let mut qa = pa
        .create_qp(&QpInitAttr::new(&cqa, &cqa, QpCap::default()))
        .unwrap();
    let mut qb = pb
        .create_qp(&QpInitAttr::new(&cqb, &cqb, QpCap::default()))
        .unwrap();
    common::connect(&mut qa, &ga, &mut qb, &gb, AccessFlags::REMOTE_ATOMIC);

    let counter = pb
        .alloc_mr(8, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC)
        .unwrap();
    counter.write(0, &40u64.to_le_bytes());
    let result = pa.alloc_mr(8, AccessFlags::LOCAL_WRITE).unwrap();
    let res = [result.sge(0, 8).unwrap()];
    let old = |r: &ferroverbs::verbs::MemoryRegion<'_, _>| {
        let mut b = [0u8; 8];
        r.read(0, &mut b);
        // The fetched value arrives in host byte order (the driver selects host-endian
        // atomic responses, as Linux does).
        u64::from_ne_bytes(b)
    };
    let now = |r: &ferroverbs::verbs::MemoryRegion<'_, _>| {
        let mut b = [0u8; 8];
        r.read(0, &mut b);
        u64::from_le_bytes(b)
    };
    qa.post_send(&[SendWr::atomic_fetch_add(1, &res, counter.remote(0), 2).signaled()])
        .unwrap();
    assert!(common::wait(&net, &mut cqa).is_ok());
    println!("fetch_add(2): was {}, now {}", old(&result), now(&counter));
    for (compare, swap) in [(41, 0), (42, 1000)] {
        qa.post_send(&[
            SendWr::atomic_cmp_swp(2, &res, counter.remote(0), compare, swap).signaled(),
        ])
        .unwrap();
        assert!(common::wait(&net, &mut cqa).is_ok());
        println!(
            "cmp_swp({compare} -> {swap}): was {}, now {}",
            old(&result),
            now(&counter)
        );
    }
}

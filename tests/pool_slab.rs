//! The registered buffer pool: exhaustion, reuse, slots that never overlap, detach and
//! reclaim, churn from several threads, and SEND/RECV between two simulated NICs with
//! pool slots on both sides (deterministic mode).

mod verbs_support;
use verbs_support::*;

use std::collections::HashSet;

use ferroverbs::verbs::{
    AccessFlags as A, Mtu, PoolConfig, PoolError, QpCap, QpInitAttr, RecvWr, SendWr, WcOpcode,
    WcStatus,
};

#[test]
fn exhaustion_reuse_and_no_overlap() {
    let sim = sim();
    let ctx = open(&sim, 1);
    let pd = ctx.alloc_pd().unwrap();
    {
        let pool = pd.create_buffer_pool(PoolConfig::new(100, 37)).unwrap();
        assert_eq!(pool.stride(), 128);
        assert_eq!(pool.capacity(), 37);
        assert_eq!(pool.mr().addr() % 4096, 0, "page-aligned region");
        assert!(pool.mr().len() >= 37 * 128);
        let mut slots: Vec<_> = (0..37).map(|_| pool.alloc().unwrap()).collect();
        assert_eq!(pool.in_use(), 37);
        assert!(matches!(
            pool.alloc(),
            Err(PoolError::Exhausted { slots: 37 })
        ));
        // Every slot inside the region, aligned, disjoint from every other.
        let mut ranges: Vec<(u64, u64)> = slots
            .iter()
            .map(|s| (s.addr(), s.addr() + s.len() as u64))
            .collect();
        ranges.sort();
        for w in ranges.windows(2) {
            assert!(w[0].1 <= w[1].0, "overlap {w:?}");
        }
        for s in &slots {
            assert_eq!(s.addr() % 64, 0);
            assert!(s.addr() >= pool.mr().addr());
            assert!(s.addr() + 100 <= pool.mr().addr() + pool.mr().len() as u64);
            assert_eq!(s.sge().lkey, pool.lkey());
            assert_eq!(s.sge().length, 100);
            assert_eq!(s.remote(4).addr, s.addr() + 4);
            assert_eq!(s.remote(4).rkey, pool.rkey());
        }
        let idx: HashSet<u32> = slots.iter().map(|s| s.index()).collect();
        assert_eq!(idx.len(), 37);
        // Writes to one slot never reach another.
        for (i, s) in slots.iter().enumerate() {
            s.fill(i as u8);
        }
        for (i, s) in slots.iter().enumerate() {
            let mut b = [0u8; 100];
            s.read(0, &mut b).unwrap();
            assert!(b.iter().all(|&x| x == i as u8), "slot {i}");
        }
        // Slot bounds, not region bounds.
        assert!(slots[0].write(96, &[0; 5]).is_err());
        assert!(slots[0].sge_range(0, 101).is_err());
        assert_eq!(slots[0].sge_range(10, 90).unwrap().length, 90);
        // Free one: the next allocation reuses it (LIFO), then exhaustion again.
        let gone = slots.remove(5);
        let (gi, ga) = (gone.index(), gone.addr());
        pool.free(gone);
        assert_eq!(pool.in_use(), 36);
        let again = pool.alloc().unwrap();
        assert_eq!((again.index(), again.addr()), (gi, ga));
        assert!(pool.alloc().is_err());
        drop(again);
        drop(slots);
        assert_eq!(pool.in_use(), 0);
        // Every slot can be allocated again.
        let all: Vec<_> = (0..37).map(|_| pool.alloc().unwrap()).collect();
        assert_eq!(all.len(), 37);
    }
    drop(pd);
    ctx.close().unwrap();
    assert_nothing_left(&sim);
}

#[test]
fn detached_slots_are_reclaimed_once() {
    let sim = sim();
    let ctx = open(&sim, 1);
    let pd = ctx.alloc_pd().unwrap();
    let pool = pd
        .create_buffer_pool(PoolConfig::new(4096, 4).align(4096))
        .unwrap();
    let s = pool.alloc().unwrap();
    s.write(0, b"kept").unwrap();
    let i = s.into_index();
    assert_eq!(pool.in_use(), 1, "a detached slot stays allocated");
    let live = pool.alloc().unwrap();
    assert!(matches!(
        pool.reclaim(live.index()),
        Err(PoolError::NotDetached { .. })
    ));
    assert!(pool.reclaim(99).is_err());
    let back = pool.reclaim(i).unwrap();
    let mut b = [0u8; 4];
    back.read(0, &mut b).unwrap();
    assert_eq!(&b, b"kept");
    assert!(matches!(
        pool.reclaim(i),
        Err(PoolError::NotDetached { .. })
    ));
    drop(back);
    // Free slots cannot be reclaimed either.
    assert!(pool.reclaim(i).is_err());
    drop(live);
    assert_eq!(pool.in_use(), 0);
    assert!(matches!(
        pd.create_buffer_pool(PoolConfig::new(64, 4).align(48)),
        Err(PoolError::Alignment { .. })
    ));
}

#[test]
fn churn_from_several_threads() {
    let sim = sim();
    let ctx = open(&sim, 1);
    let pd = ctx.alloc_pd().unwrap();
    let pool = pd.create_buffer_pool(PoolConfig::new(64, 64)).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let pool = &pool;
            s.spawn(move || {
                for round in 0..2000u32 {
                    let k = 1 + (round as usize % 8);
                    let held: Vec<_> = (0..k).map(|_| pool.alloc().unwrap()).collect();
                    for h in &held {
                        h.write(0, &[t; 64]).unwrap();
                    }
                    for h in &held {
                        let mut b = [0u8; 64];
                        h.read(0, &mut b).unwrap();
                        assert!(b.iter().all(|&x| x == t), "slot shared between owners");
                    }
                }
            });
        }
    });
    assert_eq!(pool.in_use(), 0);
    let all: HashSet<u32> = (0..64)
        .map(|_| pool.alloc().unwrap().into_index())
        .collect();
    assert_eq!(all.len(), 64, "the free list lost or duplicated a slot");
}

#[test]
fn send_and_recv_through_pool_slots() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let pa = ca.alloc_pd().unwrap();
    let pb = cb.alloc_pd().unwrap();
    let mut cqa = ca.create_cq(64).unwrap();
    let mut cqb = cb.create_cq(64).unwrap();
    let cap = QpCap {
        max_send_wr: 32,
        max_recv_wr: 32,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap)).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap)).unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);

    let tx = pa
        .create_buffer_pool(PoolConfig::new(2000, 16).access(A::empty()))
        .unwrap();
    let rx = pb.create_buffer_pool(PoolConfig::new(2048, 16)).unwrap();
    // Every receive slot posted, detached, its index as the wr_id.
    for _ in 0..16 {
        let s = rx.alloc().unwrap();
        s.fill(0xee);
        let sge = s.sge();
        let i = s.into_index();
        qb.post_recv(&[RecvWr::new(u64::from(i), &[sge])]).unwrap();
    }
    assert_eq!(rx.in_use(), 16);
    for round in 0..3u8 {
        let mut sent = Vec::new();
        for k in 0..16u8 {
            let s = tx.alloc().unwrap();
            let n = 1 + (k as usize * 127) % 2000;
            let data = pattern(n, round * 16 + k);
            s.write(0, &data).unwrap();
            qa.post_send(&[SendWr::send(
                u64::from(s.index()),
                &[s.sge_range(0, n as u32).unwrap()],
            )
            .signaled()])
                .unwrap();
            sent.push((s, data));
        }
        let done = wait(&net, &mut cqa, 16);
        assert!(done.iter().all(|w| w.status == WcStatus::Success));
        // Send slots go back as their completions arrive.
        for w in &done {
            let i = sent
                .iter()
                .position(|(s, _)| u64::from(s.index()) == w.wr_id);
            sent.remove(i.expect("a completion names a posted slot"));
        }
        assert_eq!(tx.in_use(), 0);
        let got = wait(&net, &mut cqb, 16);
        for (k, w) in got.iter().enumerate() {
            assert_eq!(w.status, WcStatus::Success);
            assert_eq!(w.opcode, WcOpcode::Recv);
            let n = 1 + (k * 127) % 2000;
            assert_eq!(w.byte_len as usize, n);
            let slot = rx.reclaim(w.wr_id as u32).unwrap();
            let mut b = vec![0u8; n + 1];
            slot.read(0, &mut b).unwrap();
            assert_eq!(
                &b[..n],
                &pattern(n, round * 16 + k as u8)[..],
                "message {k}"
            );
            assert_eq!(b[n], 0xee, "nothing past the message");
            // Re-post the slot (same buffer, fresh fill).
            slot.fill(0xee);
            let sge = slot.sge();
            let i = slot.into_index();
            qb.post_recv(&[RecvWr::new(u64::from(i), &[sge])]).unwrap();
        }
    }
    drop(qa);
    drop(qb);
    // Every receive slot comes back once the QP is gone.
    for i in 0..16 {
        drop(rx.reclaim(i).unwrap());
    }
    assert_eq!(rx.in_use(), 0);
}

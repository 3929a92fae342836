//! Event-driven RC ping-pong between two simulated ConnectX NICs in threaded mode:
//! each side sleeps in `epoll_wait` on its completion channel between messages
//! (no busy polling), takes the event, acknowledges it, re-arms the CQ and polls it.
//! Send and receive buffers come from registered buffer pools. At the end the link of
//! one NIC goes down and up, and the asynchronous events are printed.
//!
//! ```text
//! cargo run --release --example events -- [--iters N]
//! ```

use std::time::{Duration, Instant};

use ferroverbs::verbs::{
    AccessFlags, BufferPool, CompletionChannel, CompletionQueue, PoolConfig, QpCap, QpInitAttr,
    QueuePair, RecvWr, SendWr, WcOpcode, WcStatus, WorkCompletion,
};
use ferroverbs_sim::{Fabric, Sim, SimBus, SimConfig};

mod common;

const SLOTS: usize = 16;
const MSG: usize = 64;

/// Sleeps in `epoll_wait` until the channel has an event; returns the wake-ups.
fn sleep_until_event(ep: i32, ch: &CompletionChannel<'_, SimBus>) -> u64 {
    let mut wakeups = 0;
    loop {
        if ch.try_get_cq_event().is_some() {
            return wakeups;
        }
        let mut ev = [libc::epoll_event { events: 0, u64: 0 }];
        // SAFETY: `ev` is a live array of one epoll_event; 10 s timeout.
        let n = unsafe { libc::epoll_wait(ep, ev.as_mut_ptr(), 1, 10_000) };
        assert!(n >= 0, "epoll_wait failed");
        assert!(n > 0, "no completion event within 10 s");
        wakeups += 1;
    }
}

/// One side: waits for `iters` messages (each answered unless `last`), sending the
/// first one if `starts`.
fn side(
    starts: bool,
    iters: u64,
    ch: &CompletionChannel<'_, SimBus>,
    cq: &mut CompletionQueue<'_, SimBus>,
    qp: &mut QueuePair<'_, SimBus>,
    pool: &BufferPool<'_, SimBus>,
) -> (u64, Duration) {
    // SAFETY: epoll_create1 takes no pointers.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(ep >= 0);
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: 0,
    };
    // SAFETY: a valid epoll descriptor, the channel's open fd, a live epoll_event.
    assert_eq!(
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, ch.fd(), &mut ev) },
        0
    );
    // Receive slots stay posted: their indexes are the wr_ids.
    for _ in 0..SLOTS / 2 {
        let s = pool.alloc().expect("a receive slot");
        let sge = s.sge_range(0, MSG as u32).unwrap();
        qp.post_recv(&[RecvWr::new(u64::from(s.into_index()), &[sge])])
            .unwrap();
    }
    let send = |qp: &mut QueuePair<'_, SimBus>, n: u64| {
        let s = pool.alloc().expect("a send slot");
        s.write(0, &n.to_le_bytes()).unwrap();
        let sge = s.sge_range(0, MSG as u32).unwrap();
        qp.post_send(&[SendWr::send(u64::from(s.into_index()), &[sge]).signaled()])
            .unwrap();
    };
    cq.req_notify(false);
    let start = Instant::now();
    if starts {
        send(qp, 0);
    }
    let (mut got, mut wakeups) = (0u64, 0u64);
    let mut wc = [WorkCompletion::default(); 8];
    while got < iters {
        wakeups += sleep_until_event(ep, ch);
        ch.ack_cq_events(cq, 1);
        cq.req_notify(false);
        let k = cq.poll(&mut wc);
        for w in &wc[..k] {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            let slot = pool.reclaim(w.wr_id as u32).expect("a posted slot");
            if w.opcode != WcOpcode::Recv {
                continue; // a send slot: back to the pool
            }
            let mut b = [0u8; 8];
            slot.read(0, &mut b).unwrap();
            let n = u64::from_le_bytes(b);
            got += 1;
            let sge = slot.sge_range(0, MSG as u32).unwrap();
            qp.post_recv(&[RecvWr::new(u64::from(slot.into_index()), &[sge])])
                .unwrap();
            if !(starts && got == iters) {
                send(qp, n + 1);
            }
        }
    }
    let took = start.elapsed();
    // SAFETY: closing the epoll descriptor created above.
    unsafe { libc::close(ep) };
    (wakeups, took)
}

/// Completion events through completion channels (pollable descriptors) between two
/// threaded simulated NICs.
#[derive(clap::Parser)]
struct Args {
    /// Round trips.
    #[arg(long, default_value_t = 1000)]
    iters: u64,
}

fn main() {
    let iters = <Args as clap::Parser>::parse().iters;
    let fabric = Fabric::new(7);
    let a = Sim::new(SimConfig::threaded(0xa, 1));
    let b = Sim::new(SimConfig::threaded(0xb, 1));
    fabric.attach(&a);
    fabric.attach(&b);
    let (ca, ga) = common::open(&a, 1);
    let (cb, gb) = common::open(&b, 2);
    {
        let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
        let (cha, chb) = (
            ca.create_comp_channel().unwrap(),
            cb.create_comp_channel().unwrap(),
        );
        let mut cqa = cha.create_cq(64).unwrap();
        let mut cqb = chb.create_cq(64).unwrap();
        let cap = QpCap {
            max_send_wr: 32,
            max_recv_wr: 32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap)).unwrap();
        let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap)).unwrap();
        common::connect(&mut qa, &ga, &mut qb, &gb, AccessFlags::empty());
        let pool_a = pa.create_buffer_pool(PoolConfig::new(MSG, SLOTS)).unwrap();
        let pool_b = pb.create_buffer_pool(PoolConfig::new(MSG, SLOTS)).unwrap();
        let ((wa, took), (wb, _)) = std::thread::scope(|s| {
            let server = s.spawn(|| side(false, iters, &chb, &mut cqb, &mut qb, &pool_b));
            let client = side(true, iters, &cha, &mut cqa, &mut qa, &pool_a);
            (client, server.join().expect("server"))
        });
        println!(
            "{iters} round trips in {took:?}: {:.1} µs each; {wa} + {wb} epoll wake-ups",
            took.as_secs_f64() * 1e6 / iters as f64
        );
        drop((qa, qb));
        // The receive slots still posted come back once their QPs are gone.
        println!(
            "pool slots in use after the QPs: {} and {} (receives still posted, sends not yet polled)",
            pool_a.in_use(),
            pool_b.in_use()
        );
    }
    // Asynchronous events: the link of NIC 2 goes down and up.
    b.set_link(1, false);
    b.set_link(1, true);
    while let Some(ev) = cb.get_async_event() {
        println!("async event on NIC 2: {} {ev:?}", ev.ibv_name());
    }
    ca.close().unwrap();
    cb.close().unwrap();
}

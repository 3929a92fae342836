//! RC SEND ping-pong between two simulated ConnectX NICs on an in-process fabric,
//! through the verbs API (the `ibv_rc_pingpong` of ferroverbs): prints the round-trip
//! latency.
//!
//! ```text
//! cargo run --release --example rc_pingpong -- [--iters N] [--size BYTES] [--threaded [--busy-poll]] [--tcp] [--qp-timeout EXP]
//! ```
//!
//! `--tcp` also runs the baseline in the same process: a TCP loopback ping-pong of
//! the same size, and prints the ratio of the medians (the target: the simulator's
//! round trip at least 20x shorter).
//!
//! By default both NICs run in deterministic mode on this thread (the example steps
//! the fabric); with `--threaded` each NIC has its own device thread and the two sides
//! of the ping-pong run on two application threads that only post and poll. With
//! `--busy-poll` as well, each application thread services its own NIC when its CQ
//! is empty (`Sim::try_service`, NAPI-style, as `ferroverbs perf` does across
//! processes), so that the NIC's device thread naps instead of spinning: otherwise
//! four busy threads share the CPUs, which on a 2-vCPU machine makes every hand-off
//! wait for a scheduler switch.
//!
//! `--qp-timeout EXP` sets both QPs' local ACK timeout to 4.096 µs × 2^EXP (0 to 31;
//! 0: no timer), as perftest's `-u`/`--qp-timeout`; the default is 14 (67 ms), the
//! `ibv_rc_pingpong` and perftest value. In threaded mode the timer runs on real
//! time while the threads that would deliver an ACK may wait for a CPU: eight
//! expiries in a row (retry count 7 + 1), 537 ms at 14, fail a request with a retry
//! error although nothing was lost, so on a loaded machine a long timeout (23:
//! 34 s) keeps the run going (the in-process fabric loses nothing, so no timer is
//! needed to recover). Deterministic mode runs on virtual time.

#[path = "common/mod.rs"]
mod common;
use common::{open, rtr_attr};

use std::time::{Duration, Instant};

use ferroverbs::verbs::{
    AccessFlags, CompletionQueue, MemoryRegion, QpCap, QpInitAttr, QueuePair, RecvWr, RtsAttr,
    SendWr, WcOpcode, WorkCompletion,
};
use ferroverbs::GidEntry;
use ferroverbs_sim::SimBus;

/// An RC SEND ping-pong between two simulated NICs (or the same over TCP loopback).
#[derive(clap::Parser)]
struct Args {
    /// Round trips.
    #[arg(long, default_value_t = 10_000)]
    iters: u64,
    /// Message size in bytes.
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Threaded NICs (the devices progress on their own threads).
    #[arg(long)]
    threaded: bool,
    /// With --threaded: the application threads also service their own NIC.
    #[arg(long, requires = "threaded")]
    busy_poll: bool,
    /// The same ping-pong over TCP loopback (the baseline).
    #[arg(long)]
    tcp: bool,
    /// Local ACK timeout exponent: 4.096 us x 2^EXP (0 = no timer; 0 to 31).
    #[arg(long, default_value_t = DEF_QP_TIMEOUT,
          value_parser = clap::value_parser!(u8).range(0..=MAX_QP_TIMEOUT as i64))]
    qp_timeout: u8,
}

/// The default local ACK timeout exponent (`ibv_rc_pingpong`'s and perftest's
/// `DEF_QP_TIME`): 4.096 µs × 2^14 ≈ 67 ms.
const DEF_QP_TIMEOUT: u8 = 14;

/// The largest exponent: the QP context's `ack_timeout` field is 5 bits.
const MAX_QP_TIMEOUT: u8 = 31;

fn args() -> Args {
    <Args as clap::Parser>::parse()
}

/// RESET → INIT → RTR → RTS towards QP `peer_qpn` at `peer` for SENDs, with the local
/// ACK timeout exponent `timeout`; `psn` = (expected, first sent).
fn connect_send(
    q: &mut QueuePair<'_, SimBus>,
    peer: &GidEntry,
    peer_qpn: u32,
    psn: (u32, u32),
    timeout: u8,
) {
    q.to_init(1, AccessFlags::empty()).expect("INIT");
    q.to_rtr(&rtr_attr(peer, peer_qpn, psn.0)).expect("RTR");
    q.to_rts(&RtsAttr {
        timeout,
        ..RtsAttr::new(psn.1)
    })
    .expect("RTS");
}

/// One side of the ping-pong: its QP, CQ and buffer.
struct Side<'a> {
    qp: QueuePair<'a, SimBus>,
    cq: CompletionQueue<'a, SimBus>,
    buf: MemoryRegion<'a, SimBus>,
    size: usize,
    inline: bool,
}

impl Side<'_> {
    fn post_recv(&mut self) {
        let sg = [self.buf.sge(0, self.size.max(1) as u32).expect("sge")];
        self.qp
            .post_recv(&[RecvWr::new(1, &sg)])
            .expect("post_recv");
    }

    fn send(&mut self, payload: &[u8]) {
        if self.inline {
            let parts: [&[u8]; 1] = [payload];
            self.qp
                .post_send(&[SendWr::send_inline(2, &parts).signaled()])
                .expect("post_send");
        } else {
            self.buf.write(self.size, payload);
            let sg = [self.buf.sge(self.size, self.size as u32).expect("sge")];
            let sg: &[_] = if self.size == 0 { &[] } else { &sg };
            self.qp
                .post_send(&[SendWr::send(2, sg).signaled()])
                .expect("post_send");
        }
    }

    /// Polls until a receive completed (send completions are consumed on the way).
    fn wait_recv(&mut self, mut step: impl FnMut()) {
        let mut wc = [WorkCompletion::default(); 4];
        loop {
            let n = self.cq.poll(&mut wc);
            let mut got = false;
            for c in &wc[..n] {
                assert!(c.is_ok(), "{c:?}");
                got |= c.opcode == WcOpcode::Recv;
            }
            if got {
                return;
            }
            step();
        }
    }
}

fn main() {
    let a = args();
    let common::Net {
        fabric,
        a: sa,
        b: sb,
    } = common::net_with(a.threaded);
    let (ca, ga) = open(&sa, 1);
    let (cb, gb) = open(&sb, 2);
    let (pa, pb) = (ca.alloc_pd().expect("pd"), cb.alloc_pd().expect("pd"));
    let cap = QpCap {
        max_inline_data: 64,
        ..QpCap::default()
    };
    let (cqa, cqb) = (ca.create_cq(64).expect("cq"), cb.create_cq(64).expect("cq"));
    // `MLX5_SCATTER_TO_CQE`, for comparisons: "0" as libmlx5 reads it (no scatter to
    // CQE: every received message in the buffer), any other value scatter to CQE
    // whatever the bus's default (off on the simulator); unset, the default.
    let env = std::env::var_os("MLX5_SCATTER_TO_CQE");
    let attr = |cq| {
        let a = QpInitAttr::new(cq, cq, cap);
        match &env {
            Some(v) if v == "0" => a.without_scatter_to_cqe(),
            Some(_) => a.with_scatter_to_cqe(),
            None => a,
        }
    };
    let mut qa = pa.create_qp(&attr(&cqa)).expect("qp");
    let mut qb = pb.create_qp(&attr(&cqb)).expect("qp");
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    connect_send(&mut qa, &gb, nb, (0x200, 0x100), a.qp_timeout);
    connect_send(&mut qb, &ga, na, (0x100, 0x200), a.qp_timeout);
    // What the device holds (QUERY_QP), as printed below.
    let timeout = qa.query().expect("query QP").timeout;
    assert_eq!(
        timeout, a.qp_timeout,
        "the device holds the asked ACK timeout"
    );
    let inline = a.size <= qa.cap().max_inline_data as usize;
    let len = (2 * a.size).max(2);
    let access = AccessFlags::LOCAL_WRITE;
    let mut ping = Side {
        qp: qa,
        cq: cqa,
        buf: pa.alloc_mr(len, access).expect("mr"),
        size: a.size,
        inline,
    };
    let mut pong = Side {
        qp: qb,
        cq: cqb,
        buf: pb.alloc_mr(len, access).expect("mr"),
        size: a.size,
        inline,
    };
    println!(
        "rc_pingpong: QPs {na:#x} <-> {nb:#x}, {} bytes ({}), {} iterations, {} mode, \
         ACK timeout exponent {timeout}",
        a.size,
        if inline { "inline" } else { "gather" },
        a.iters,
        if a.threaded && a.busy_poll {
            "threaded, busy-polling"
        } else if a.threaded {
            "threaded"
        } else {
            "deterministic"
        }
    );
    let payload = vec![0x5au8; a.size];
    let warmup = (a.iters / 10).min(1000);
    let mut rtts = Vec::with_capacity(a.iters as usize);
    if a.threaded {
        // The responder on its own thread; each side only posts and polls.
        let total = warmup + a.iters;
        std::thread::scope(|s| {
            let pong = &mut pong;
            let payload2 = payload.clone();
            // What a side does when its CQ is empty: service its own NIC
            // (`--busy-poll`), or leave the CPU to the device threads.
            let busy = a.busy_poll;
            let idle = move |sim: &ferroverbs_sim::Sim| {
                if !busy || sim.try_service() == Some(0) {
                    std::thread::yield_now();
                }
            };
            let sb = &sb;
            s.spawn(move || {
                for _ in 0..total {
                    pong.post_recv();
                    pong.wait_recv(|| idle(sb));
                    pong.send(&payload2);
                }
            });
            for i in 0..total {
                ping.post_recv();
                let t = Instant::now();
                ping.send(&payload);
                ping.wait_recv(|| idle(&sa));
                if i >= warmup {
                    rtts.push(t.elapsed());
                }
            }
        });
    } else {
        for i in 0..warmup + a.iters {
            ping.post_recv();
            pong.post_recv();
            let t = Instant::now();
            ping.send(&payload);
            pong.wait_recv(|| {
                fabric.run_until_idle();
            });
            pong.send(&payload);
            ping.wait_recv(|| {
                fabric.run_until_idle();
            });
            if i >= warmup {
                rtts.push(t.elapsed());
            }
        }
    }
    rtts.sort();
    let sum: Duration = rtts.iter().sum();
    let pct = |p: f64| rtts[((rtts.len() as f64 - 1.0) * p) as usize];
    println!(
        "round trip: avg {:.2} us, min {:.2} us, p50 {:.2} us, p99 {:.2} us, max {:.2} us",
        sum.as_secs_f64() * 1e6 / rtts.len() as f64,
        rtts[0].as_secs_f64() * 1e6,
        pct(0.5).as_secs_f64() * 1e6,
        pct(0.99).as_secs_f64() * 1e6,
        rtts[rtts.len() - 1].as_secs_f64() * 1e6,
    );
    println!(
        "one-way latency (avg/2): {:.2} us",
        sum.as_secs_f64() * 1e6 / rtts.len() as f64 / 2.0
    );
    if a.tcp {
        // The baseline, in the same run: a TCP loopback ping-pong of the
        // same size (TCP_NODELAY, echo thread). Medians are compared: on a shared
        // machine the mean is dominated by preemptions of either side.
        let tcp = tcp_rtts(a.size.max(1), warmup, a.iters);
        let (p50, t50) = (pct(0.5), tcp[tcp.len() / 2]);
        println!(
            "tcp loopback round trip ({} bytes): min {:.2} us, p50 {:.2} us, p99 {:.2} us; p50 ratio tcp/rc = {:.1}x",
            a.size.max(1),
            tcp[0].as_secs_f64() * 1e6,
            t50.as_secs_f64() * 1e6,
            tcp[((tcp.len() as f64 - 1.0) * 0.99) as usize].as_secs_f64() * 1e6,
            t50.as_secs_f64() / p50.as_secs_f64()
        );
    }
}

/// Sorted round trips of a `size`-byte ping-pong over loopback TCP to an echo thread.
fn tcp_rtts(size: usize, warmup: u64, iters: u64) -> Vec<Duration> {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let echo = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.set_nodelay(true).expect("nodelay");
        let mut buf = vec![0u8; size];
        while s.read_exact(&mut buf).is_ok() {
            if s.write_all(&buf).is_err() {
                break;
            }
        }
    });
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).expect("nodelay");
    let (msg, mut buf) = (vec![0x5au8; size], vec![0u8; size]);
    let mut out = Vec::with_capacity(iters as usize);
    for i in 0..warmup + iters {
        let t = Instant::now();
        s.write_all(&msg).expect("write");
        s.read_exact(&mut buf).expect("read");
        if i >= warmup {
            out.push(t.elapsed());
        }
    }
    drop(s);
    let _ = echo.join();
    out.sort();
    out
}

//! RC message rate between two simulated ConnectX NICs on an in-process fabric: one QP
//! streams 64-byte inline SENDs (lists of `--batch`, the last signaled) to a peer that
//! keeps its receive queue full; prints messages per second.
//!
//! ```text
//! cargo run --release --example rc_rate -- [--msgs N] [--batch B] [--size BYTES] [--threaded [--busy-poll]] [--post-send]
//! ```
//!
//! The SENDs are posted through the driver's typed entries (`qp.post()`, one
//! `send_inline` per message, one `ring()` per list: the same WQEs and one doorbell per
//! list, as `post_send` of the list writes them); `--post-send` posts the same list
//! through the general `post_send` instead.
//!
//! Deterministic mode (the default) runs everything on this thread: the send doorbell
//! is serviced while `post_send` runs, and the example steps the fabric (the receiver's
//! packet processing, its ACKs, the sender's completions). With `--threaded` each NIC
//! has its own device thread and this thread only posts and polls; `--busy-poll` adds
//! NAPI-style busy polling: an empty poll services the sending NIC on this thread
//! (`Sim::try_service`), whose device thread then naps. This is also the
//! workload profiled for `docs/performance.md` (valgrind `--tool=callgrind`).

#[path = "common/mod.rs"]
mod common;
use common::{open, to_rts_send};

use std::time::Instant;

use ferroverbs::verbs::{
    AccessFlags, QpCap, QpInitAttr, RecvWr, SendFlags, SendWr, Sge, WorkCompletion,
};

/// One QP's message rate: SENDs posted in lists and polled, between two simulated NICs.
#[derive(clap::Parser)]
struct Cli {
    /// Messages in all.
    #[arg(long, default_value_t = 2_000_000)]
    msgs: u64,
    /// Work requests per list (1 to 64).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=64))]
    batch: u16,
    /// Message size in bytes (0 to 64, inline).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(0..=64))]
    size: u16,
    /// Threaded NICs.
    #[arg(long)]
    threaded: bool,
    /// With --threaded: the application thread also services its NIC.
    #[arg(long, requires = "threaded")]
    busy_poll: bool,
    /// Post through `QueuePair::post_send` instead of the typed batch.
    #[arg(long)]
    post_send: bool,
}

struct Args {
    msgs: u64,
    batch: usize,
    size: usize,
    threaded: bool,
    busy_poll: bool,
    post_send: bool,
}

fn args() -> Args {
    let c = <Cli as clap::Parser>::parse();
    Args {
        msgs: c.msgs,
        batch: usize::from(c.batch),
        size: usize::from(c.size),
        threaded: c.threaded,
        busy_poll: c.busy_poll,
        post_send: c.post_send,
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
        max_send_wr: 128,
        max_recv_wr: 128,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let (mut cqa, mut cqb) = (
        ca.create_cq(255).expect("cq"),
        cb.create_cq(255).expect("cq"),
    );
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap)).expect("qp");
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap)).expect("qp");
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    to_rts_send(&mut qa, &gb, nb, (0x200, 0x100));
    to_rts_send(&mut qb, &ga, na, (0x100, 0x200));
    let rb = pb.alloc_mr(64 * 128, AccessFlags::LOCAL_WRITE).expect("mr");
    let payload = vec![0x5au8; a.size];
    let parts: [&[u8]; 1] = [&payload];
    let batch = a.batch;
    let sgs: Vec<[Sge; 1]> = (0..batch)
        .map(|i| [rb.sge(i * 64, 64).expect("sge")])
        .collect();
    let recvs: Vec<RecvWr<'_>> = sgs.iter().map(|s| RecvWr::new(0, s)).collect();
    let sends: Vec<SendWr<'_>> = (0..batch)
        .map(|i| {
            let w = SendWr::send_inline(i as u64, &parts);
            if i == batch - 1 {
                w.signaled()
            } else {
                w
            }
        })
        .collect();
    let mut wc = [WorkCompletion::default(); 128];
    let mut round = || {
        qb.post_recv(&recvs).expect("post_recv");
        if a.post_send {
            qa.post_send(&sends).expect("post_send");
        } else {
            // The same list through the typed entries: `batch` inline SENDs, the last
            // signaled, one doorbell.
            let mut b = qa.post().expect("post: the QP is in RTS");
            for i in 0..batch - 1 {
                b.send_inline(i as u64, &payload, SendFlags::NONE)
                    .expect("send_inline");
            }
            b.send_inline((batch - 1) as u64, &payload, SendFlags::SIGNALED)
                .expect("send_inline");
            b.ring();
        }
        let (mut got_rx, mut got_tx) = (0, 0);
        while got_rx < batch || got_tx < 1 {
            if !a.threaded {
                fabric.run_until_idle();
            }
            let r = cqb.poll(&mut wc);
            assert!(wc[..r].iter().all(|c| c.is_ok()), "{:?}", &wc[..r]);
            let t = cqa.poll(&mut wc);
            assert!(wc[..t].iter().all(|c| c.is_ok()), "{:?}", &wc[..t]);
            got_rx += r;
            got_tx += t;
            if a.threaded && r + t == 0 {
                if a.busy_poll {
                    // NAPI-style busy polling of the sender's own NIC (its ACK and
                    // completion on this thread; its device thread naps meanwhile).
                    if sa.try_service() != Some(0) {
                        continue;
                    }
                }
                // Leave the CPU to the device threads (2 cores shared by 3 threads).
                std::thread::yield_now();
            }
        }
    };
    let rounds = a.msgs.div_ceil(batch as u64);
    for _ in 0..(rounds / 10).min(1000) {
        round();
    }
    let t = Instant::now();
    for _ in 0..rounds {
        round();
    }
    let el = t.elapsed();
    let n = rounds * batch as u64;
    println!(
        "rc_rate: {} mode{}, {} bytes inline, lists of {batch}: {n} SENDs in {:.3} s = {:.3} M SENDs/s ({:.0} ns each)",
        if a.threaded { "threaded" } else { "deterministic" },
        if a.post_send { ", post_send" } else { "" },
        a.size,
        el.as_secs_f64(),
        n as f64 / el.as_secs_f64() / 1e6,
        el.as_nanos() as f64 / n as f64
    );
}

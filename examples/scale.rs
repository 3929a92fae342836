//! Scale of the driver and the simulator with many QPs: the time to create, connect and
//! destroy `--qps` RC QPs (and, with `--mr-per-qp`, to register and deregister one
//! memory region per QP), and the memory each idle QP and the CQ take, against the
//! bytes the hardware format requires.
//!
//! ```text
//! cargo run --release --example scale -- [--qps 16384] [--mr-per-qp]
//! ```
//!
//! Two simulated NICs on an in-process fabric (deterministic); `--qps` QPs on each,
//! QP `i` of one connected to QP `i` of the other (RESET → INIT → RTR → RTS), all on
//! one CQ per side, with the footprint of `docs/performance.md` (128 send and 128
//! receive requests, one SGE, 64 bytes inline). Each QP sends one 64-byte inline SEND
//! that its peer receives, so the memory figures are those of QPs that have carried
//! traffic and are idle again. Prints one line per figure (`key: value`), for
//! `benches/scale.sh`.
//!
//! Before it starts the clock it writes, then frees, as much memory as the run will
//! take: on a virtual machine the first touch of a guest page the hypervisor has not
//! backed yet costs several times an ordinary page fault (a fresh 1,200 MB mapping
//! touched a page at a time: 8.6 µs per page, again right after: 2.3 µs), and which
//! pages a run gets depends on what ran before it; the pages freed are the ones the
//! run's allocations get back, so the times are the driver's and the simulator's.

#[path = "common/mod.rs"]
mod common;
use common::{open, to_rts_send};

use std::time::Instant;

use ferroverbs::verbs::{AccessFlags, QpCap, QpInitAttr, RecvWr, SendWr, WorkCompletion};

/// Many QPs: creation, connection and destruction times, and memory per idle QP.
#[derive(clap::Parser)]
struct Cli {
    /// QPs on each NIC.
    #[arg(long, default_value_t = 16384, value_parser = clap::value_parser!(u32).range(1..=65536))]
    qps: u32,
    /// Also register one 4 KiB memory region per QP (and time it).
    #[arg(long)]
    mr_per_qp: bool,
}

/// Bytes the process takes per QP pair and its MR (measured: 297,530 page faults at
/// 16,384 QPs with `--mr-per-qp`), with some room.
const BYTES_PER_QP_PAIR: usize = 96 << 10;

/// Writes one byte of every page of a fresh `bytes`-byte buffer, then frees it, so the
/// guest pages the run allocates next are backed already.
fn warm_guest_memory(bytes: usize) {
    let mut v = vec![0u8; bytes];
    for i in (0..bytes).step_by(4096) {
        v[i] = 1;
    }
    std::hint::black_box(&mut v);
}

fn main() {
    let cli = <Cli as clap::Parser>::parse();
    let n = cli.qps as usize;
    warm_guest_memory(n * BYTES_PER_QP_PAIR);
    let net = common::net();
    let (ca, ga) = open(&net.a, 1);
    let (cb, gb) = open(&net.b, 2);
    let (pa, pb) = (ca.alloc_pd().expect("pd"), cb.alloc_pd().expect("pd"));
    let cap = QpCap {
        max_send_wr: 128,
        max_recv_wr: 128,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    // One CQ per side with room for one completion of every QP.
    let cqe = (2 * n as u32 + 64).next_power_of_two() - 1;
    let (mut cqa, mut cqb) = (
        ca.create_cq(cqe).expect("cq"),
        cb.create_cq(cqe).expect("cq"),
    );

    let t = Instant::now();
    let mut qa = Vec::with_capacity(n);
    let mut qb = Vec::with_capacity(n);
    for _ in 0..n {
        qa.push(pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap)).expect("qp"));
        qb.push(pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap)).expect("qp"));
    }
    let create = t.elapsed();
    let t = Instant::now();
    for (a, b) in qa.iter_mut().zip(qb.iter_mut()) {
        let (na, nb) = (a.qp_num(), b.qp_num());
        to_rts_send(a, &gb, nb, (0x200, 0x100));
        to_rts_send(b, &ga, na, (0x100, 0x200));
    }
    let connect = t.elapsed();

    // One SEND on every QP: the QPs have carried traffic before they are measured.
    let rb = pb.alloc_mr(64, AccessFlags::LOCAL_WRITE).expect("mr");
    let sge = [rb.sge(0, 64).expect("sge")];
    let payload = [0x5au8; 64];
    let parts: [&[u8]; 1] = [&payload];
    for (a, b) in qa.iter_mut().zip(qb.iter_mut()) {
        b.post_recv(&[RecvWr::new(0, &sge)]).expect("post_recv");
        a.post_send(&[SendWr::send_inline(0, &parts).signaled()])
            .expect("post_send");
    }
    let mut wc = vec![WorkCompletion::default(); 256];
    let (mut got_a, mut got_b) = (0, 0);
    while got_a < n || got_b < n {
        net.fabric.run_until_idle();
        let k = cqa.poll(&mut wc);
        for c in &wc[..k] {
            assert!(c.is_ok(), "send completion {c:?}");
            got_a += 1;
        }
        let k = cqb.poll(&mut wc);
        for c in &wc[..k] {
            assert!(c.is_ok(), "receive completion {c:?}");
            got_b += 1;
        }
    }

    let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / n as f64;
    println!("qps: {n}");
    println!("create_qp_us: {:.1}", per(create) / 2.0);
    println!("connect_qp_us: {:.1}", per(connect) / 2.0);

    // Memory of one idle QP of side A (every QP has the same geometry), and of A's CQ.
    let f = qa[0].footprint();
    let (sim_qp, fw_qp) = {
        let q: Vec<u32> = qa.iter().map(|q| q.qp_num()).collect();
        // The in-flight record buffers the engine keeps for the QPs (shared: the
        // QPs busy lately hold them) count, shared out over the QPs.
        let e: usize = net.a.with_engine(|e| {
            q.iter()
                .map(|&q| e.qp(q).map_or(0, |r| r.footprint()))
                .sum::<usize>()
                + e.flight_bufs().footprint()
        });
        let w: usize = net.a.with_firmware(|fw| {
            q.iter()
                .map(|&q| fw.qp(q).map_or(0, |r| r.footprint()))
                .sum()
        });
        (e / n, w / n)
    };
    println!("qp_hw_bytes: {}", f.hw_bytes);
    println!("qp_dma_bytes: {}", f.dma_bytes);
    println!("qp_driver_bytes: {}", f.bookkeeping_bytes);
    println!("qp_sim_engine_bytes: {sim_qp}");
    println!("qp_sim_firmware_bytes: {fw_qp}");
    let (cq_dma, cq_book) = cqa.footprint();
    let cqn = cqa.cqn();
    let cq_sim = net
        .a
        .with_engine(|e| e.cq(cqn).map_or(0, |c| c.footprint()));
    let cq_fw = net
        .a
        .with_firmware(|fw| fw.cq(cqn).map_or(0, |c| c.footprint()));
    println!("cq_entries: {}", cqe + 1);
    println!("cq_hw_bytes: {}", (cqe as usize + 1) * 64 + 8);
    println!("cq_dma_bytes: {cq_dma}");
    println!("cq_driver_bytes: {cq_book}");
    println!("cq_sim_bytes: {}", cq_sim + cq_fw);

    if cli.mr_per_qp {
        let t = Instant::now();
        let mrs: Vec<_> = (0..n)
            .map(|_| pa.alloc_mr(4096, AccessFlags::LOCAL_WRITE).expect("mr"))
            .collect();
        let reg = t.elapsed();
        let t = Instant::now();
        drop(mrs);
        let dereg = t.elapsed();
        println!("reg_mr_us: {:.1}", per(reg));
        println!("dereg_mr_us: {:.1}", per(dereg));
    }

    let t = Instant::now();
    drop(qa);
    drop(qb);
    let destroy = t.elapsed();
    println!("destroy_qp_us: {:.1}", per(destroy) / 2.0);
}

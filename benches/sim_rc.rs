//! Criterion benchmarks of RC over the simulator through the verbs API, with a TCP
//! baseline measured in the same run:
//!
//! * `sim_rc/pingpong64`: one round trip of a 64-byte inline SEND ping-pong between two
//!   simulated NICs in deterministic mode (all on the bench thread, fabric stepped);
//! * `baseline/tcp_pingpong64`: one round trip of 64 bytes over a loopback TCP socket
//!   (`TCP_NODELAY`) to an echo thread;
//! * `sim_rc/send64_rate`: 64-byte inline SENDs on one QP, 64 per iteration (the last
//!   signaled), with the receiver reposting its receives: elements per second is the
//!   message rate.
//!
//! It also prints the memory footprint of the QPs and CQs used. `docs/performance.md`
//! records the numbers.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

#[path = "../examples/common/mod.rs"]
mod common;
use common::{open, to_rts_send as to_rts};
use ferroverbs::verbs::{AccessFlags, QpCap, QpInitAttr, RecvWr, SendWr, WcOpcode, WorkCompletion};

fn sim_rc(c: &mut Criterion) {
    let common::Net {
        fabric,
        a: sa,
        b: sb,
    } = common::net();
    let (ca, ga) = open(&sa, 1);
    let (cb, gb) = open(&sb, 2);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let cap = QpCap {
        max_send_wr: 128,
        max_recv_wr: 128,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let (mut cqa, mut cqb) = (ca.create_cq(255).unwrap(), cb.create_cq(255).unwrap());
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap)).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap)).unwrap();
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    to_rts(&mut qa, &gb, nb, (0x200, 0x100));
    to_rts(&mut qb, &ga, na, (0x100, 0x200));
    let fq = qa.footprint();
    let (cq_dma, cq_book) = cqa.footprint();
    eprintln!(
        "footprint: QP {:?} (cap {:?}); CQ of {} entries: {} bytes DMA (hardware format {} + 8), {} bytes bookkeeping",
        fq,
        qa.cap(),
        cqa.capacity() + 1,
        cq_dma,
        (cqa.capacity() as usize + 1) * 64,
        cq_book
    );
    let ra = pa.alloc_mr(64 * 128, AccessFlags::LOCAL_WRITE).unwrap();
    let rb = pb.alloc_mr(64 * 128, AccessFlags::LOCAL_WRITE).unwrap();
    let payload = [0x5au8; 64];
    let parts: [&[u8]; 1] = [&payload];
    let mut wc = [WorkCompletion::default(); 128];

    let mut g = c.benchmark_group("sim_rc");
    g.bench_function("pingpong64", |b| {
        b.iter(|| {
            let sa_ = [ra.sge(0, 64).unwrap()];
            let sb_ = [rb.sge(0, 64).unwrap()];
            qa.post_recv(&[RecvWr::new(1, &sa_)]).unwrap();
            qb.post_recv(&[RecvWr::new(1, &sb_)]).unwrap();
            qa.post_send(&[SendWr::send_inline(2, &parts).signaled()])
                .unwrap();
            'ping: loop {
                fabric.run_until_idle();
                let n = cqb.poll(&mut wc);
                for w in &wc[..n] {
                    if w.opcode == WcOpcode::Recv {
                        break 'ping;
                    }
                }
            }
            qb.post_send(&[SendWr::send_inline(2, &parts).signaled()])
                .unwrap();
            'pong: loop {
                fabric.run_until_idle();
                let n = cqa.poll(&mut wc);
                for w in &wc[..n] {
                    if w.opcode == WcOpcode::Recv {
                        break 'pong;
                    }
                }
            }
        })
    });
    // Drain what the ping-pong left (send completions of B).
    fabric.run_until_idle();
    while cqb.poll(&mut wc) > 0 {}
    while cqa.poll(&mut wc) > 0 {}

    const BATCH: usize = 64;
    let sgs: Vec<[ferroverbs::verbs::Sge; 1]> =
        (0..BATCH).map(|i| [rb.sge(i * 64, 64).unwrap()]).collect();
    let recvs: Vec<RecvWr<'_>> = sgs.iter().map(|s| RecvWr::new(0, s)).collect();
    let sends: Vec<SendWr<'_>> = (0..BATCH)
        .map(|i| {
            let w = SendWr::send_inline(i as u64, &parts);
            if i == BATCH - 1 {
                w.signaled()
            } else {
                w
            }
        })
        .collect();
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("send64_rate", |b| {
        b.iter(|| {
            qb.post_recv(&recvs).unwrap();
            qa.post_send(&sends).unwrap();
            let (mut got_rx, mut got_tx) = (0, 0);
            while got_rx < BATCH || got_tx < 1 {
                fabric.run_until_idle();
                got_rx += cqb.poll(&mut wc);
                got_tx += cqa.poll(&mut wc);
            }
        })
    });
    g.finish();
}

fn tcp(c: &mut Criterion) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().unwrap();
    let echo = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.set_nodelay(true).unwrap();
        let mut buf = [0u8; 64];
        while s.read_exact(&mut buf).is_ok() {
            if s.write_all(&buf).is_err() {
                break;
            }
        }
    });
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let msg = [0x5au8; 64];
    let mut buf = [0u8; 64];
    c.bench_function("baseline/tcp_pingpong64", |b| {
        b.iter(|| {
            s.write_all(&msg).unwrap();
            s.read_exact(&mut buf).unwrap();
        })
    });
    drop(s);
    echo.join().unwrap();
}

criterion_group!(benches, sim_rc, tcp);
criterion_main!(benches);

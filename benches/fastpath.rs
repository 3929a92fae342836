//! Criterion benchmarks of the verbs fast path over `MemBus` (no device: the bench
//! plays the device with `verbs::fastpath`, outside the timed sections):
//!
//! * `post_send/inline64`: one signaled 64-byte inline SEND with its doorbell
//!   (BlueFlame copy of its two WQEBBs);
//! * `post_send/list16`: a list of 16 one-SGE SENDs with one doorbell;
//! * `poll/hit`: taking one CQE (one-entry array);
//! * `poll/empty`: polling an empty CQ.
//!
//! The same operations through the typed entries (`QueuePair::post` batches and
//! `CompletionQueue::poll_one`): `post_send/typed_inline64`, `post_send/typed_list16`,
//! `poll/one_hit`, `poll/one_empty`.
//!
//! Baseline in the same run: `baseline/memcpy64`, a 64-byte copy into the same kind of
//! memory. `benches/icount.sh` gives the instruction counts; `docs/performance.md` the
//! numbers.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use ferroverbs::verbs::fastpath::{DetachedCq, DetachedQp};
use ferroverbs::verbs::{QpCap, QpState, SendFlags, SendWr, Sge, WorkCompletion};
use ferroverbs_hw::datapath::wqe::MLX5_OPCODE_SEND;
use ferroverbs_hw::MemBus;

const QPN: u32 = 0x77;

fn setup(qpn: u32) -> (DetachedQp<MemBus>, DetachedCq<MemBus>) {
    let bus = Arc::new(MemBus::new(1 << 16));
    let cap = QpCap {
        max_send_wr: 256,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let cq = DetachedCq::new(&bus, 4095).expect("cq");
    let mut qp = DetachedQp::new(&bus, qpn, &cap, false).expect("qp");
    cq.attach(&qp);
    qp.set_state(QpState::Rts);
    (qp, cq)
}

/// Times `batch` posts at a time (each a call of `post`, which posts one request or
/// a list whose last WQE takes `last_wqebbs` WQEBBs), retiring them (untimed)
/// between batches.
fn time_posts(
    qp: &mut DetachedQp<MemBus>,
    cq: &mut DetachedCq<MemBus>,
    post: &mut dyn FnMut(&mut DetachedQp<MemBus>),
    last_wqebbs: u16,
    batch: u64,
    iters: u64,
) -> Duration {
    let mut wc = [WorkCompletion::default(); 4];
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(batch);
        let t = Instant::now();
        for _ in 0..n {
            post(qp);
        }
        total += t.elapsed();
        // The device completes the last WQE.
        let last = qp.next_send_index().wrapping_sub(last_wqebbs);
        cq.produce_send(QPN, last, MLX5_OPCODE_SEND);
        while cq.poll(&mut wc) == 0 {}
        left -= n;
    }
    total
}

fn post_send(c: &mut Criterion) {
    let mut g = c.benchmark_group("post_send");
    let payload = [0x5au8; 64];
    let parts: [&[u8]; 1] = [&payload];
    let sge = [Sge {
        addr: 0x10_0000,
        length: 64,
        lkey: 0x1234,
    }];
    {
        let (mut qp, mut cq) = setup(QPN);
        let wr = [SendWr::send_inline(1, &parts).signaled()];
        let mut post = |qp: &mut DetachedQp<MemBus>| qp.post_send(black_box(&wr)).expect("post");
        g.bench_function("inline64", |b| {
            b.iter_custom(|iters| time_posts(&mut qp, &mut cq, &mut post, 2, 64, iters))
        });
    }
    {
        let (mut qp, mut cq) = setup(QPN);
        let list: Vec<SendWr<'_>> = (0..16).map(|i| SendWr::send(i, &sge)).collect();
        let mut post = |qp: &mut DetachedQp<MemBus>| qp.post_send(black_box(&list)).expect("post");
        g.bench_function("list16", |b| {
            b.iter_custom(|iters| time_posts(&mut qp, &mut cq, &mut post, 1, 8, iters))
        });
    }
    {
        let (mut qp, mut cq) = setup(QPN);
        let mut post = |qp: &mut DetachedQp<MemBus>| {
            let mut b = qp.post().expect("RTS");
            b.send_inline(1, black_box(&payload), SendFlags::SIGNALED)
                .expect("post");
            b.ring();
        };
        g.bench_function("typed_inline64", |b| {
            b.iter_custom(|iters| time_posts(&mut qp, &mut cq, &mut post, 2, 64, iters))
        });
    }
    {
        let (mut qp, mut cq) = setup(QPN);
        let sges = [sge[0]; 16];
        let mut post = |qp: &mut DetachedQp<MemBus>| {
            let mut b = qp.post().expect("RTS");
            for (i, s) in black_box(&sges).iter().enumerate() {
                b.send(i as u64, s, SendFlags::NONE).expect("post");
            }
            b.ring();
        };
        g.bench_function("typed_list16", |b| {
            b.iter_custom(|iters| time_posts(&mut qp, &mut cq, &mut post, 1, 8, iters))
        });
    }
    g.finish();
}

fn poll(c: &mut Criterion) {
    let mut g = c.benchmark_group("poll");
    {
        let (mut qp, mut cq) = setup(QPN);
        let sge = [Sge {
            addr: 0x10_0000,
            length: 64,
            lkey: 0x1234,
        }];
        let one = [SendWr::send(1, &sge).signaled()];
        let mut wc = [WorkCompletion::default(); 1];
        g.bench_function("hit", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    // 64 completions produced untimed, then 64 one-CQE polls timed.
                    let n = left.min(64);
                    for _ in 0..n {
                        let idx = qp.next_send_index();
                        qp.post_send(&one).expect("post");
                        cq.produce_send(QPN, idx, MLX5_OPCODE_SEND);
                    }
                    let t = Instant::now();
                    for _ in 0..n {
                        let got = cq.poll(black_box(&mut wc));
                        debug_assert_eq!(got, 1);
                        black_box(got);
                    }
                    total += t.elapsed();
                    left -= n;
                }
                total
            })
        });
    }
    {
        let (mut qp, mut cq) = setup(QPN);
        let sge = Sge {
            addr: 0x10_0000,
            length: 64,
            lkey: 0x1234,
        };
        g.bench_function("one_hit", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let n = left.min(64);
                    for _ in 0..n {
                        let idx = qp.next_send_index();
                        let mut bt = qp.post().expect("RTS");
                        bt.send(1, &sge, SendFlags::SIGNALED).expect("post");
                        bt.ring();
                        cq.produce_send(QPN, idx, MLX5_OPCODE_SEND);
                    }
                    let t = Instant::now();
                    for _ in 0..n {
                        let got = cq.poll_one();
                        debug_assert!(got.is_some());
                        black_box(got);
                    }
                    total += t.elapsed();
                    left -= n;
                }
                total
            })
        });
    }
    {
        let (_qp, mut cq) = setup(QPN);
        let mut wc = [WorkCompletion::default(); 16];
        g.bench_function("empty", |b| b.iter(|| cq.poll(black_box(&mut wc))));
    }
    {
        let (_qp, mut cq) = setup(QPN);
        g.bench_function("one_empty", |b| {
            b.iter(|| black_box(cq.poll_one().is_none()))
        });
    }
    g.finish();
}

fn baseline(c: &mut Criterion) {
    let bus = Arc::new(MemBus::new(4096));
    let buf = ferroverbs::dma::DmaBuf::new(&bus, 4096, ferroverbs_hw::DmaPerm::RW).expect("buf");
    let src = [0x5au8; 64];
    c.bench_function("baseline/dmabuf_write64", |b| {
        b.iter(|| buf.write_bytes(black_box(128), black_box(&src)))
    });
}

criterion_group!(benches, post_send, poll, baseline);
criterion_main!(benches);

//! The responder's path for one-packet SENDs (`transport::responder`: SEND_ONLY and
//! SEND_ONLY_WITH_IMMEDIATE at the expected PSN, a receive WQE from the QP's own RQ)
//! against the general path: every scenario runs twice on fresh deterministic pairs,
//! once as the device runs and once with the general path forced
//! (`set_general_path_only`), and everything observable must be the same: the bytes
//! of every CQE on both sides, every frame on the wire, the receive buffers, the
//! counters of both devices (but the one counting the fast path), the IOMMU's fault
//! and byte counters, the QP states. Scenarios: successful SENDs of 0 to 1024 bytes
//! (inline and gathered, with immediate, solicited) through RQ and CQ wraps, strides of
//! 16 and 64 bytes, receive WQEs of one entry, of several (the fallback), of none;
//! local length errors, receive buffers without LOCAL_WRITE, a bad lkey, an lkey of
//! another PD, entries out of bounds and of 2^31 bytes, a receive buffer unmapped from
//! the IOMMU (translation fault), and RNR NAKs with their retries; and the cases the
//! one-packet path's single IOMMU hold and direct CQE write hand back to the general
//! code: the receive CQ unmapped (CQE write fault), the RQ ring unmapped between two
//! SENDs (receive WQE read fault), the whole QP buffer with its doorbell record
//! unmapped (RNR), a CQ overrun, and armed CQs (completion events, compared too).
//!
//! Each scenario runs on a receive QP without scatter to CQE and on one with it
//! (`qpc.cs_res`: messages of up to 32 bytes in their CQE), with small SENDs of their
//! own (0 to 40 bytes; a length error, a bad key and a CQE write fault among them).
//!
//! One test function: the switch is process-wide (this binary runs nothing else).

mod common;
mod dp;

use std::time::Duration;

use dp::*;
use ferroverbs_hw::datapath::wqe::MLX5_WQE_CTRL_SOLICITED;
use ferroverbs_sim::transport::responder::set_general_path_only;
use ferroverbs_sim::DataPathStats;

/// Everything a run leaves behind.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    a_cqes: Vec<Vec<u8>>,
    b_cqes: Vec<Vec<u8>>,
    frames: Vec<Vec<u8>>,
    b_mem: Vec<Vec<u8>>,
    a_stats: DataPathStats,
    b_stats: DataPathStats,
    iommu: [(u64, u64, u64); 2],
    states: (u8, u8),
    /// B's completion EQ entries (events of armed CQs).
    b_eqes: Vec<Vec<u8>>,
}

/// A scenario: what it posts, given the pair, its receive QP and its regions.
struct Scenario {
    name: &'static str,
    /// The RQ stride code of B's QP (16 << code bytes).
    stride: u8,
    /// Whether the fast run must have taken the fast path at least once.
    fast: bool,
    /// Whether every request must succeed.
    clean: bool,
    run: fn(&mut Pair, &mut Qp, &mut Qp, &[Mr; 2], &[Mr; 4], &mut Cqes),
}

fn run(s: &Scenario, general: bool, cs_res: u8) -> Outcome {
    set_general_path_only(general);
    let mut p = Pair::deterministic(Conn::default());
    p.fabric.capture(Some(1 << 20));
    // A fresh QP pair with the scenario's receive stride (the pair's own QPs stay
    // idle); CQs of 256 entries, an RQ of 16 WQEs so that the counters wrap.
    let mut qa = p.a.create_qp(&p.acq.0, &p.acq.1, 8, 4, 2);
    let mut qb =
        p.b.create_qp_cs(0, &p.bcq.0, &p.bcq.1, 8, 4, s.stride, cs_res);
    let c = Conn::default();
    p.connect_qps(&qa, &qb, &c, 0x500);
    let src = [p.a.reg_mr(4096, ALL), p.a.reg_mr(4096, ALL)];
    for (k, m) in src.iter().enumerate() {
        let bytes: Vec<u8> = (0..4096).map(|i| (i * 7 + k * 3 + 1) as u8).collect();
        p.a.mr_write(m, 0, &bytes);
    }
    let other_pd = p.b.h.alloc_pd();
    let dst = [
        p.b.reg_mr(4096, ALL),
        p.b.reg_mr(4096, LR | RR),
        p.b.reg_mr_pd(4096, ALL, other_pd),
        p.b.reg_mr(8192, ALL),
    ];
    let mut cqes = Cqes::default();
    (s.run)(&mut p, &mut qa, &mut qb, &src, &dst, &mut cqes);
    p.fabric.run_until_idle();
    p.drain(&mut cqes);
    let b_mem = dst.iter().map(|m| p.b.mr_read(m, 0, m.len)).collect();
    let mut a_stats = p.a.h.sim.stats().data_path;
    let mut b_stats = p.b.h.sim.stats().data_path;
    let fast = b_stats.rx_send_only_fast;
    if general {
        assert_eq!(fast, 0, "{}: the general path was forced", s.name);
    } else if s.fast {
        assert!(
            fast > 0,
            "{}: the fast path was not taken: {b_stats:?} {a_stats:?}",
            s.name
        );
    }
    a_stats.rx_send_only_fast = 0;
    b_stats.rx_send_only_fast = 0;
    let states = (p.a.qp_state(&qa), p.b.qp_state(&qb));
    let b_eqes = (0..64)
        .map_while(|ci| p.b.ceq_entry(ci).map(|e| e.to_vec()))
        .collect();
    if s.clean {
        assert_eq!(
            (a_stats.error_cqes, b_stats.error_cqes, a_stats.retransmits),
            (0, 0, 0),
            "{}: no error expected",
            s.name
        );
    }
    Outcome {
        a_cqes: cqes.a,
        b_cqes: cqes.b,
        frames: p.fabric.take_captured(),
        b_mem,
        a_stats,
        b_stats,
        iommu: [p.a.iommu_counters(), p.b.iommu_counters()],
        states,
        b_eqes,
    }
}

/// SENDs of `lens` bytes (gathered from `src[0]`, or inline up to 64 bytes when
/// `inline`), each into its own receive WQE of `recv(k)` entries; every fourth with
/// immediate, every third solicited; in lists of 8 with the last signaled; the CQs
/// drained after each list.
#[allow(clippy::too_many_arguments)]
fn traffic(
    p: &mut Pair,
    qa: &mut Qp,
    qb: &mut Qp,
    src: &[Mr; 2],
    lens: &[u32],
    inline: bool,
    recv: impl Fn(usize) -> Vec<(u64, u32, u32)>,
    out: &mut Cqes,
) {
    for (chunk_no, chunk) in lens.chunks(8).enumerate() {
        for k in 0..chunk.len() {
            p.b.post_recv(qb, &recv(chunk_no * 8 + k));
        }
        let mut first = None;
        for (k, &len) in chunk.iter().enumerate() {
            let n = chunk_no * 8 + k;
            let mut flags = if k + 1 == chunk.len() { SIG } else { 0 };
            if n % 3 == 0 {
                flags |= MLX5_WQE_CTRL_SOLICITED;
            }
            let imm = (n % 4 == 1).then_some(0x1234_5600 | n as u32);
            let off = (n * 13) % 2048;
            let w = if inline && imm.is_none() && len <= 64 {
                let data = p.a.mr_read(&src[0], off, len as usize);
                inline_wqe(qa.qpn, &data, None, flags)
            } else if len == 0 {
                // No data segment (one of byte count 0 would mean 2^31 bytes).
                send_wqe(qa.qpn, &[], imm, flags)
            } else {
                send_wqe(qa.qpn, &[sge(&src[0], off, len)], imm, flags)
            };
            let (_, f) = p.a.write_wqe(qa, &w);
            first.get_or_insert(f);
        }
        if let Some(f) = first {
            p.a.ring(qa, f);
        }
        p.fabric.run_until_idle();
        p.drain(out);
    }
}

/// One SEND of `len` bytes from `src[0]` into a receive WQE of `entries`.
fn one(
    p: &mut Pair,
    qa: &mut Qp,
    qb: &mut Qp,
    src: &[Mr; 2],
    len: u32,
    entries: &[(u64, u32, u32)],
) {
    p.b.post_recv(qb, entries);
    let segs = if len == 0 {
        vec![]
    } else {
        vec![sge(&src[0], 5, len)]
    };
    p.a.post(qa, &send_wqe(qa.qpn, &segs, None, SIG));
    p.fabric.run_until_idle();
}

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "one-entry WQEs, stride 64 (terminated), 0..=1024 bytes, wraps",
            stride: 2,
            fast: true,
            clean: true,
            run: |p, qa, qb, src, dst, out| {
                let lens: Vec<u32> = (0..300u32)
                    .map(|i| match i % 7 {
                        0 => 0,
                        1 => 1,
                        2 => 64,
                        3 => 1024,
                        _ => (i * 37) % 1025,
                    })
                    .collect();
                let d = dst[3];
                let recv = |n: usize| vec![sge(&d, (n % 7) * 1024, 1024)];
                traffic(p, qa, qb, src, &lens, true, recv, out);
            },
        },
        Scenario {
            name: "one-entry WQEs, stride 16 (no terminator)",
            stride: 0,
            fast: true,
            clean: true,
            run: |p, qa, qb, src, dst, out| {
                let lens: Vec<u32> = (0..40u32).map(|i| (i * 29) % 1025).collect();
                let d = dst[0];
                let recv = |n: usize| vec![sge(&d, (n % 3) * 1024, 1024)];
                traffic(p, qa, qb, src, &lens, false, recv, out);
            },
        },
        Scenario {
            name: "several entries (fallback), none, and one then the end mark",
            stride: 2,
            fast: true,
            clean: false,
            run: |p, qa, qb, src, dst, out| {
                let lens: Vec<u32> = (0..48u32).map(|i| (i * 53) % 1025).collect();
                let d = dst[3];
                // Two entries; four (a full stride, no end mark); none (only SENDs of
                // 0 bytes fit: the others fail with a length error and end the
                // scenario's traffic, flushed); one.
                let recv = |n: usize| match n % 4 {
                    0 => vec![sge(&d, 0, 10), sge(&d, 100, 1014)],
                    1 => vec![
                        sge(&d, 2000, 300),
                        sge(&d, 3000, 300),
                        sge(&d, 4000, 300),
                        sge(&d, 5000, 300),
                    ],
                    2 if n == 42 => vec![],
                    _ => vec![sge(&d, 6000, 1024)],
                };
                traffic(p, qa, qb, src, &lens, false, recv, out);
            },
        },
        Scenario {
            name: "small SENDs (0..=40 bytes: up to 32 in the CQE with scatter to CQE)",
            stride: 2,
            fast: true,
            clean: true,
            run: |p, qa, qb, src, dst, out| {
                let lens: Vec<u32> = (0..123u32).map(|i| (i * 7) % 41).collect();
                let d = dst[3];
                let recv = |n: usize| vec![sge(&d, (n % 7) * 1024, 1024)];
                traffic(p, qa, qb, src, &lens[..60], true, recv, out);
                traffic(p, qa, qb, src, &lens[60..], false, recv, out);
            },
        },
        Scenario {
            name: "small SEND: local length error",
            stride: 2,
            fast: true,
            clean: false,
            run: |p, qa, qb, src, dst, _| one(p, qa, qb, src, 20, &[sge(&dst[0], 0, 19)]),
        },
        Scenario {
            name: "small SEND: bad lkey",
            stride: 2,
            fast: true,
            clean: false,
            run: |p, qa, qb, src, dst, _| {
                let (addr, len, key) = sge(&dst[0], 0, 64);
                one(p, qa, qb, src, 16, &[(addr, len, key ^ 0x0012_3400)])
            },
        },
        Scenario {
            name: "small SEND: receive CQ unmapped (CQE write fault)",
            stride: 2,
            fast: true,
            clean: false,
            run: |p, qa, qb, src, dst, _| {
                one(p, qa, qb, src, 8, &[sge(&dst[0], 0, 64)]);
                p.b.h.unmap(p.bcq.1.m);
                one(p, qa, qb, src, 8, &[sge(&dst[0], 64, 64)]);
            },
        },
        Scenario {
            name: "local length error",
            stride: 2,
            fast: true,
            clean: false,
            run: |p, qa, qb, src, dst, _| one(p, qa, qb, src, 64, &[sge(&dst[0], 0, 63)]),
        },
        Scenario {
            name: "receive buffer without LOCAL_WRITE",
            stride: 2,
            fast: true,
            clean: false,
            run: |p, qa, qb, src, dst, _| one(p, qa, qb, src, 64, &[sge(&dst[1], 0, 64)]),
        },
        Scenario {
            name: "bad lkey",
            stride: 2,
            fast: true,
            clean: false,
            run: |p, qa, qb, src, dst, _| {
                let (addr, len, key) = sge(&dst[0], 0, 64);
                one(p, qa, qb, src, 64, &[(addr, len, key ^ 0x0012_3400)])
            },
        },
        Scenario {
            name: "lkey of another PD",
            stride: 2,
            fast: true,
            clean: false,
            run: |p, qa, qb, src, dst, _| one(p, qa, qb, src, 64, &[sge(&dst[2], 0, 64)]),
        },
        Scenario {
            name: "entry out of bounds",
            stride: 2,
            fast: true,
            clean: false,
            run: |p, qa, qb, src, dst, _| one(p, qa, qb, src, 64, &[sge(&dst[0], 4000, 200)]),
        },
        Scenario {
            name: "entry of 2^31 bytes (byte count 0)",
            stride: 2,
            fast: true,
            clean: false,
            run: |p, qa, qb, src, dst, _| one(p, qa, qb, src, 64, &[sge(&dst[0], 0, 0)]),
        },
        Scenario {
            name: "empty SEND into a too-short entry, then a SEND into an empty list",
            stride: 2,
            fast: true,
            clean: false,
            run: |p, qa, qb, src, dst, _| {
                one(p, qa, qb, src, 0, &[sge(&dst[0], 0, 1)]);
                one(p, qa, qb, src, 1, &[]);
            },
        },
        Scenario {
            name: "receive buffer unmapped (translation fault)",
            stride: 2,
            fast: true,
            clean: false,
            run: |p, qa, qb, src, dst, _| {
                p.b.h.unmap(dst[0].m);
                one(p, qa, qb, src, 64, &[sge(&dst[0], 0, 64)]);
            },
        },
        Scenario {
            name: "receive CQ unmapped (CQE write fault)",
            stride: 2,
            fast: true,
            clean: false,
            run: |p, qa, qb, src, dst, _| {
                one(p, qa, qb, src, 64, &[sge(&dst[0], 0, 64)]);
                p.b.h.unmap(p.bcq.1.m);
                one(p, qa, qb, src, 64, &[sge(&dst[0], 64, 64)]);
            },
        },
        Scenario {
            name: "RQ ring unmapped between two SENDs (receive WQE read fault)",
            stride: 2,
            fast: true,
            clean: false,
            run: |p, qa, qb, src, dst, _| {
                // Two WQEs posted: the first SEND reads the doorbell record (two
                // known), the second takes the next WQE without reading it again, and
                // its read faults.
                p.b.post_recv(qb, &[sge(&dst[0], 0, 64)]);
                one(p, qa, qb, src, 64, &[sge(&dst[0], 64, 64)]);
                p.b.h.unmap(qb.m);
                p.a.post(qa, &send_wqe(qa.qpn, &[sge(&src[0], 5, 64)], None, SIG));
                p.fabric.run_until_idle();
            },
        },
        Scenario {
            name: "QP buffer and doorbell record unmapped (no WQE seen: RNR)",
            stride: 2,
            fast: true,
            clean: false,
            run: |p, qa, qb, src, dst, _| {
                one(p, qa, qb, src, 64, &[sge(&dst[0], 0, 64)]);
                p.b.post_recv(qb, &[sge(&dst[0], 64, 64)]);
                p.b.h.unmap(qb.m);
                p.a.post(qa, &send_wqe(qa.qpn, &[sge(&src[0], 5, 64)], None, SIG));
                p.fabric.run_until_idle();
                p.fabric.run_timers(Duration::from_millis(1));
            },
        },
        Scenario {
            name: "receive CQ overrun (256 entries, never polled)",
            stride: 2,
            fast: true,
            clean: false,
            run: |p, qa, qb, src, dst, out| {
                let d = dst[3];
                for list in 0..36usize {
                    for k in 0..8 {
                        p.b.post_recv(qb, &[sge(&d, (list * 8 + k) % 7 * 1024, 1024)]);
                    }
                    let mut first = None;
                    for k in 0..8usize {
                        let flags = if k == 7 { SIG } else { 0 };
                        let len = ((list * 8 + k) * 37 % 200 + 1) as u32;
                        let w = send_wqe(qa.qpn, &[sge(&src[0], k * 100, len)], None, flags);
                        let (_, f) = p.a.write_wqe(qa, &w);
                        first.get_or_insert(f);
                    }
                    if let Some(f) = first {
                        p.a.ring(qa, f);
                    }
                    p.fabric.run_until_idle();
                    // Only A's CQ: B's receive CQ fills up.
                    while let Some(c) = p.a.poll(&mut p.acq.0) {
                        out.a.push(c.as_bytes().to_vec());
                    }
                }
            },
        },
        Scenario {
            name: "armed receive CQ: next completion, then solicited only",
            stride: 2,
            fast: true,
            clean: true,
            run: |p, qa, qb, src, dst, out| {
                let d = dst[3];
                let recv = |n: usize| vec![sge(&d, (n % 7) * 1024, 1024)];
                let lens: Vec<u32> = (0..24u32).map(|i| (i * 41) % 300).collect();
                for (round, part) in lens.chunks(8).enumerate() {
                    // Re-armed before each list (after the drain of the last one).
                    p.b.arm(&p.bcq.1, round as u32, round % 2 == 1);
                    traffic(p, qa, qb, src, part, false, recv, out);
                }
            },
        },
        Scenario {
            name: "RNR NAKs, retries, then delivery",
            stride: 2,
            fast: true,
            clean: false,
            run: |p, qa, qb, src, dst, _| {
                p.a.post(qa, &send_wqe(qa.qpn, &[sge(&src[0], 0, 12)], Some(7), SIG));
                p.fabric.run_until_idle();
                p.fabric.advance(Duration::from_micros(10));
                p.fabric.advance(Duration::from_micros(10));
                p.b.post_recv(qb, &[sge(&dst[0], 0, 64)]);
                p.fabric.run_timers(Duration::from_millis(1));
            },
        },
    ]
}

#[test]
fn the_one_packet_send_path_does_what_the_general_path_does() {
    // Every scenario without scatter to CQE, and with it (`cs_res` 1: the messages
    // of up to 32 bytes in their 64-byte CQE, which the one-packet path writes too).
    for cs_res in [0u8, 1] {
        for s in scenarios() {
            let fast = run(&s, false, cs_res);
            let general = run(&s, true, cs_res);
            assert_eq!(fast, general, "{} (cs_res {cs_res})", s.name);
            assert!(!fast.frames.is_empty(), "{}", s.name);
        }
    }
    set_general_path_only(false);
}

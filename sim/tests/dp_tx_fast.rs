//! The requester's path for inline one-packet SENDs (`transport::requester`: a SEND or
//! SEND with immediate whose data is inline in at most two WQEBBs, fetched with one
//! IOMMU read, decoded at fixed offsets and transmitted at once as a SEND ONLY frame
//! built at fixed offsets) against the general path: every scenario runs twice on
//! fresh deterministic pairs, once as the device runs and once with the general path
//! forced (`set_general_path_only`), and everything observable must be the same: every
//! frame on the wire (byte for byte, ICRC included), the bytes of every CQE on both
//! sides, the receive buffers, the counters of both devices (but the one counting the
//! fast path), the IOMMU's fault and byte counters, the QP states. Scenarios: inline
//! SENDs of 0 to 108 bytes (every DS from 2 to 8), with and without immediate,
//! solicited or not, signaled or not, through SQ, RQ and CQ wraps; PSNs wrapping past
//! 2^24; inline SENDs of three WQEBBs and gathered SENDs, WRITEs and READs in between,
//! fenced SENDs behind a READ; more SENDs in one doorbell than the window allows; lost
//! frames (go-back-N retransmissions of SENDs sent on the fast path, re-read from the
//! ring); RNR NAKs; a WQE naming another QP (local QP operation error).
//!
//! One test function: the switch is process-wide (this binary runs nothing else).

mod common;
mod dp;

use std::time::Duration;

use dp::*;
use ferroverbs_hw::datapath::wqe::{
    WqeCtrlSeg, MLX5_INLINE_SEG, MLX5_OPCODE_SEND, MLX5_OPCODE_SEND_IMM, MLX5_WQE_CTRL_FENCE,
    MLX5_WQE_CTRL_SOLICITED,
};
use ferroverbs_sim::link::Impairments;
use ferroverbs_sim::transport::requester::set_general_path_only;
use ferroverbs_sim::DataPathStats;

/// Everything a run leaves behind.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    a_cqes: Vec<Vec<u8>>,
    b_cqes: Vec<Vec<u8>>,
    frames: Vec<Vec<u8>>,
    b_mem: Vec<u8>,
    a_stats: DataPathStats,
    b_stats: DataPathStats,
    iommu: [(u64, u64, u64); 2],
    states: (u8, u8),
}

/// A scenario: its connection, and what it posts given the pair, its QPs and regions.
struct Scenario {
    name: &'static str,
    conn: Conn,
    /// log2 of A's SQ (WQEBBs) and of B's RQ (WQEs).
    log_sq: u8,
    log_rq: u8,
    /// Whether the fast run must have taken the fast path at least once.
    fast: bool,
    run: fn(&mut Pair, &mut Qp, &mut Qp, &Mr, &Mr, &mut Cqes),
}

fn run(s: &Scenario, general: bool) -> Outcome {
    set_general_path_only(general);
    let mut p = Pair::deterministic(s.conn);
    p.fabric.capture(Some(1 << 22));
    let mut qa = p.a.create_qp(&p.acq.0, &p.acq.1, s.log_sq, 4, 2);
    let mut qb = p.b.create_qp(&p.bcq.0, &p.bcq.1, 4, s.log_rq, 2);
    let c = s.conn;
    p.connect_qps(&qa, &qb, &c, 0x500);
    let src = p.a.reg_mr(8192, ALL);
    let bytes: Vec<u8> = (0..8192).map(|i| (i * 7 + 1) as u8).collect();
    p.a.mr_write(&src, 0, &bytes);
    let dst = p.b.reg_mr(1 << 16, ALL);
    let mut cqes = Cqes::default();
    (s.run)(&mut p, &mut qa, &mut qb, &src, &dst, &mut cqes);
    p.fabric.clear_impairments();
    p.fabric.run_timers(Duration::from_secs(1));
    p.fabric.run_until_idle();
    p.drain(&mut cqes);
    let b_mem = p.b.mr_read(&dst, 0, dst.len);
    let mut a_stats = p.a.h.sim.stats().data_path;
    let mut b_stats = p.b.h.sim.stats().data_path;
    let fast = a_stats.tx_send_only_fast;
    if general {
        assert_eq!(fast, 0, "{}: the general path was forced", s.name);
    } else if s.fast {
        assert!(
            fast > 0,
            "{}: the fast path was not taken: {a_stats:?}",
            s.name
        );
    }
    a_stats.tx_send_only_fast = 0;
    b_stats.tx_send_only_fast = 0;
    let states = (p.a.qp_state(&qa), p.b.qp_state(&qb));
    Outcome {
        a_cqes: cqes.a,
        b_cqes: cqes.b,
        frames: p.fabric.take_captured().into_iter().map(unplace).collect(),
        b_mem,
        a_stats,
        b_stats,
        iommu: [p.a.iommu_counters(), p.b.iommu_counters()],
        states,
    }
}

/// A frame with what depends on where the run's memory happens to be mapped blanked:
/// the RETH's virtual address of a WRITE or READ request (B's buffer address) and so
/// the frame's ICRC. Only the general path builds those frames; every other frame
/// (the SEND ONLY frames of the fast path among them) is compared whole.
fn unplace(mut f: Vec<u8>) -> Vec<u8> {
    // Ethernet 14 + IPv4 20 + UDP 8: the BTH at 42, its opcode first; the RETH after
    // the 12-byte BTH, its virtual address first. RC WRITE FIRST, WRITE ONLY, WRITE
    // ONLY WITH IMMEDIATE, READ REQUEST (IBTA Table 38).
    if f.len() > 70 && matches!(f[42], 0x06 | 0x0a | 0x0b | 0x0c) {
        f[54..62].fill(0);
        let n = f.len();
        f[n - 4..].fill(0);
    }
    f
}

/// An inline SEND WQE (SEND_IMM with `imm`) carrying `data`.
fn inline_send(qpn: u32, data: &[u8], imm: Option<u32>, flags: u8) -> Vec<u8> {
    let ds = 1 + (4 + data.len()).div_ceil(16);
    let op = if imm.is_some() {
        MLX5_OPCODE_SEND_IMM
    } else {
        MLX5_OPCODE_SEND
    };
    let mut c = WqeCtrlSeg::zeroed();
    c.set_ctrl_seg(0, op, 0, qpn, flags, ds as u8, 0, imm.unwrap_or(0));
    let mut w = c.as_bytes().to_vec();
    w.extend_from_slice(&(data.len() as u32 | MLX5_INLINE_SEG).to_be_bytes());
    w.extend_from_slice(data);
    w.resize(ds * 16, 0);
    w
}

/// The `n`-th message of a scenario's traffic.
#[derive(Clone, Copy)]
enum Msg {
    /// An inline SEND of this many bytes.
    Inline(usize),
    /// A gathered SEND of this many bytes.
    Gather(u32),
    /// An RDMA WRITE of this many bytes to B's region.
    Write(u32),
    /// An RDMA READ of this many bytes from B's region.
    Read(u32),
}

/// Posts `msgs` in lists of `list` (one doorbell each; the last of each list and every
/// fifth message signaled, every third solicited, every fourth SEND with immediate,
/// every seventh fenced), one receive WQE of 1,024 bytes per SEND posted first; runs
/// the fabric and drains the CQs after each list.
#[allow(clippy::too_many_arguments)]
fn traffic(
    p: &mut Pair,
    qa: &mut Qp,
    qb: &mut Qp,
    src: &Mr,
    dst: &Mr,
    msgs: &[Msg],
    list: usize,
    out: &mut Cqes,
) {
    for (chunk_no, chunk) in msgs.chunks(list).enumerate() {
        for (k, m) in chunk.iter().enumerate() {
            if matches!(m, Msg::Inline(_) | Msg::Gather(_)) {
                let n = chunk_no * list + k;
                p.b.post_recv(qb, &[sge(dst, (n % 60) * 1024, 1024)]);
            }
        }
        let mut first = None;
        for (k, &m) in chunk.iter().enumerate() {
            let n = chunk_no * list + k;
            let mut flags = if k + 1 == chunk.len() || n % 5 == 2 {
                SIG
            } else {
                0
            };
            if n.is_multiple_of(3) {
                flags |= MLX5_WQE_CTRL_SOLICITED;
            }
            if n % 7 == 3 {
                flags |= MLX5_WQE_CTRL_FENCE;
            }
            let imm = (n % 4 == 1).then_some(0x1234_5600 | n as u32);
            let off = (n * 13) % 4096;
            let w = match m {
                Msg::Inline(len) => {
                    let data = p.a.mr_read(src, off, len);
                    inline_send(qa.qpn, &data, imm, flags)
                }
                Msg::Gather(len) => send_wqe(qa.qpn, &[sge(src, off, len)], imm, flags),
                Msg::Write(len) => rdma_wqe(
                    qa.qpn,
                    false,
                    dst.va + 61 * 1024,
                    dst.key,
                    &[sge(src, off, len)],
                    None,
                    flags,
                ),
                Msg::Read(len) => rdma_wqe(
                    qa.qpn,
                    true,
                    dst.va + (n % 60) as u64 * 1024,
                    dst.key,
                    &[sge(src, 4096 + off % 2048, len)],
                    None,
                    flags,
                ),
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

fn inline_lens(n: usize) -> Vec<Msg> {
    (0..n).map(|i| Msg::Inline((i * 37) % 109)).collect()
}

fn scenarios() -> Vec<Scenario> {
    let c = Conn::default();
    vec![
        Scenario {
            name: "inline SENDs of 0..=108 bytes in lists of 8, SQ/RQ/CQ wraps",
            conn: c,
            log_sq: 6,
            log_rq: 6,
            fast: true,
            run: |p, qa, qb, src, dst, out| {
                let mut msgs: Vec<Msg> = (0..=108).map(Msg::Inline).collect();
                msgs.extend(inline_lens(300));
                traffic(p, qa, qb, src, dst, &msgs, 8, out);
            },
        },
        Scenario {
            name: "PSNs wrapping past 2^24, lists of 64",
            conn: Conn {
                sq_psn: 0xff_ff80,
                ..c
            },
            log_sq: 8,
            log_rq: 7,
            fast: true,
            run: |p, qa, qb, src, dst, out| {
                traffic(p, qa, qb, src, dst, &inline_lens(400), 64, out);
            },
        },
        Scenario {
            name: "mixed: three-WQEBB inline, gathered SENDs, WRITEs, READs, fences",
            conn: c,
            log_sq: 7,
            log_rq: 7,
            fast: true,
            run: |p, qa, qb, src, dst, out| {
                let msgs: Vec<Msg> = (0..240usize)
                    .map(|i| match i % 9 {
                        0 => Msg::Inline(150),
                        1 => Msg::Gather((i as u32 * 41) % 1025),
                        2 => Msg::Write(100 + i as u32),
                        3 => Msg::Read(64 + i as u32),
                        _ => Msg::Inline((i * 11) % 109),
                    })
                    .collect();
                traffic(p, qa, qb, src, dst, &msgs, 12, out);
            },
        },
        Scenario {
            name: "more SENDs in one doorbell than the window",
            conn: c,
            log_sq: 10,
            log_rq: 10,
            fast: true,
            run: |p, qa, qb, src, dst, out| {
                traffic(p, qa, qb, src, dst, &inline_lens(500), 500, out);
            },
        },
        Scenario {
            name: "lost frames: go-back-N over SENDs sent on the fast path",
            conn: c,
            log_sq: 8,
            log_rq: 7,
            fast: true,
            run: |p, qa, qb, src, dst, out| {
                let (am, bm) = (p.a.mac, p.b.mac);
                p.fabric
                    .impair(am, bm, Impairments::new().drop_frames(5, 3));
                traffic(p, qa, qb, src, dst, &inline_lens(64), 32, out);
                p.fabric.run_timers(Duration::from_secs(1));
                p.drain(out);
                p.fabric
                    .impair(am, bm, Impairments::new().seeded(3).loss(0.2));
                traffic(p, qa, qb, src, dst, &inline_lens(100), 10, out);
                p.fabric.clear_impairments();
                p.fabric.run_timers(Duration::from_secs(1));
                p.drain(out);
            },
        },
        Scenario {
            name: "RNR NAKs, retries, then delivery",
            conn: c,
            log_sq: 6,
            log_rq: 4,
            fast: true,
            run: |p, qa, qb, _, dst, out| {
                let data: Vec<u8> = (0..64).collect();
                p.a.post(qa, &inline_send(qa.qpn, &data, Some(9), SIG));
                p.a.post(qa, &inline_send(qa.qpn, &data[..5], None, SIG));
                p.fabric.run_until_idle();
                p.fabric.advance(Duration::from_micros(10));
                p.fabric.advance(Duration::from_micros(10));
                p.b.post_recv(qb, &[sge(dst, 0, 64)]);
                p.b.post_recv(qb, &[sge(dst, 64, 64)]);
                p.fabric.run_timers(Duration::from_millis(1));
                p.drain(out);
            },
        },
        Scenario {
            name: "a WQE naming another QP (local QP operation error)",
            conn: c,
            log_sq: 6,
            log_rq: 4,
            fast: true,
            run: |p, qa, qb, _, dst, out| {
                let data = [7u8; 64];
                p.b.post_recv(qb, &[sge(dst, 0, 64)]);
                p.a.post(qa, &inline_send(qa.qpn, &data, None, SIG));
                p.a.post(qa, &inline_send(qa.qpn ^ 1, &data, None, SIG));
                p.fabric.run_until_idle();
                p.drain(out);
            },
        },
    ]
}

/// Names the first difference between two outcomes (the whole outcome is too large to
/// print usefully).
fn compare(f: &Outcome, g: &Outcome, name: &str) {
    let first =
        |a: &[Vec<u8>], b: &[Vec<u8>]| (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i));
    if let Some(i) = first(&f.frames, &g.frames) {
        panic!(
            "{name}: frame {i} of {}/{} differs:\n fast    {:02x?}\n general {:02x?}",
            f.frames.len(),
            g.frames.len(),
            f.frames.get(i),
            g.frames.get(i)
        );
    }
    if let Some(i) = first(&f.a_cqes, &g.a_cqes) {
        panic!(
            "{name}: requester CQE {i} differs: {:02x?} / {:02x?}",
            f.a_cqes.get(i),
            g.a_cqes.get(i)
        );
    }
    if let Some(i) = first(&f.b_cqes, &g.b_cqes) {
        panic!(
            "{name}: responder CQE {i} differs: {:02x?} / {:02x?}",
            f.b_cqes.get(i),
            g.b_cqes.get(i)
        );
    }
    assert!(f.b_mem == g.b_mem, "{name}: the receive buffers differ");
    assert_eq!(f.a_stats, g.a_stats, "{name}: requester counters");
    assert_eq!(f.b_stats, g.b_stats, "{name}: responder counters");
    assert_eq!(f.iommu, g.iommu, "{name}: IOMMU counters");
    assert_eq!(f.states, g.states, "{name}: QP states");
    assert!(f == g, "{name}");
}

#[test]
fn the_inline_send_path_does_what_the_general_path_does() {
    for s in scenarios() {
        let fast = run(&s, false);
        let general = run(&s, true);
        compare(&fast, &general, s.name);
        assert!(!fast.frames.is_empty() || !s.fast, "{}", s.name);
    }
    set_general_path_only(false);
}

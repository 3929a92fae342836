//! A seeded reliability workload: a mixed SEND / WRITE / READ / fetch-and-add stream
//! from A to B over a fabric whose links are impaired, checked for exactly-once,
//! in-order delivery with intact data and exactly one successful completion per WR.
#![allow(dead_code)]

use std::time::Duration;

use ferroverbs_hw::datapath::cqe::{MLX5_CQE_REQ, MLX5_CQE_RESP_SEND};
use ferroverbs_sim::link::Impairments;

use crate::dp::*;

/// SplitMix64, for the workload's choices (independent of the fabric's generators).
pub struct Rng(pub u64);

impl Rng {
    /// Next value.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Bytes of a pattern for message `k`.
pub fn payload(k: u64, n: usize) -> Vec<u8> {
    let s = (k as u8).wrapping_mul(13);
    let mut v: Vec<u8> = (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(s) ^ (i >> 8) as u8)
        .collect();
    // The message number in its first bytes, so a misplaced message is recognised.
    for (i, b) in (k as u32).to_le_bytes().iter().enumerate().take(n) {
        v[i] = *b;
    }
    v
}

/// The operation mix, in percent (the rest are fetch-and-adds).
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    /// SENDs.
    pub send: u64,
    /// RDMA WRITEs.
    pub write: u64,
    /// RDMA READs.
    pub read: u64,
    /// Largest message.
    pub max_len: u64,
}

impl Default for Mix {
    fn default() -> Self {
        Mix {
            send: 35,
            write: 30,
            read: 20,
            max_len: 3000,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Send,
    Write,
    Read { off: usize },
    FetchAdd { expect: u64 },
}

/// What a run did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Report {
    /// Messages completed.
    pub messages: u64,
    /// Virtual time used.
    pub virtual_time: Duration,
    /// Middleware counters.
    pub faults: ferroverbs_sim::link::FaultStats,
    /// Requester retransmitted packets.
    pub retransmits: u64,
    /// Local ACK timeouts.
    pub timeouts: u64,
    /// Duplicates seen by the responder.
    pub duplicates: u64,
}

/// A gather/scatter list of `len` bytes at `off` (none for 0 bytes: a data segment
/// of byte count 0 means 2^31 bytes).
fn sg(mr: &Mr, off: usize, len: usize) -> Vec<(u64, u32, u32)> {
    if len == 0 {
        Vec::new()
    } else {
        vec![sge(mr, off, len as u32)]
    }
}

const SLOTS: usize = 32;
const SLOT: usize = 4096;
const STATIC: usize = 64 * 1024;

/// Runs `n` messages from A to B with both directions impaired by `imp` (seeded with
/// `seed`); returns what happened or the first violation.
pub fn run(seed: u64, n: u64, imp: Impairments, mix: Mix, conn: Conn) -> Result<Report, String> {
    let mut p = Pair::deterministic(conn);
    let (amac, bmac) = (p.a.mac, p.b.mac);
    p.fabric.impair(amac, bmac, imp.clone().seeded(seed));
    p.fabric.impair(bmac, amac, imp.seeded(seed ^ 0xb0b));
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(SLOTS * SLOT, ALL);
    let rd = p.a.reg_mr(SLOTS * SLOT, ALL);
    let at = p.a.reg_mr(SLOTS * 8, ALL);
    let bstatic = p.b.reg_mr(STATIC, ALL);
    let bw = p.b.reg_mr(SLOTS * SLOT, ALL);
    let brecv = p.b.reg_mr(64 * SLOT, ALL);
    let ctr = p.b.reg_mr(8, ALL);
    let stat: Vec<u8> = (0..STATIC).map(|i| (i * 7 + i / 251) as u8).collect();
    p.b.mr_write(&bstatic, 0, &stat);
    let mut rng = Rng(seed);
    let mut fa = 0u64;
    let mut k = 0u64;
    let mut recv_idx = 0u32;
    let start = p.a.h.sim.clock().now();
    while k < n {
        let batch = (n - k).min(SLOTS as u64) as usize;
        let mut posted: Vec<(u16, Kind, usize, u64)> = Vec::with_capacity(batch);
        let mut sends: Vec<(u64, usize)> = Vec::new();
        for j in 0..batch {
            let m = k + j as u64;
            let r = rng.below(100);
            let len = match rng.below(4) {
                0 => rng.below(64) as usize,
                _ => rng.below(mix.max_len + 1) as usize,
            };
            let soff = j * SLOT;
            let kind = if r < mix.send {
                Kind::Send
            } else if r < mix.send + mix.write {
                Kind::Write
            } else if r < mix.send + mix.write + mix.read {
                Kind::Read {
                    off: rng.below((STATIC - len) as u64) as usize,
                }
            } else {
                fa += 1;
                Kind::FetchAdd { expect: fa - 1 }
            };
            let w = match kind {
                Kind::Send => {
                    p.a.mr_write(&src, soff, &payload(m, len));
                    let rslot = (p.qb.rq_pi as usize % 64) * SLOT;
                    p.b.post_recv(&mut p.qb, &[sge(&brecv, rslot, SLOT as u32)]);
                    sends.push((m, len));
                    send_wqe(qpn, &sg(&src, soff, len), None, SIG)
                }
                Kind::Write => {
                    p.a.mr_write(&src, soff, &payload(m, len));
                    rdma_wqe(
                        qpn,
                        false,
                        bw.va + soff as u64,
                        bw.key,
                        &sg(&src, soff, len),
                        None,
                        SIG,
                    )
                }
                Kind::Read { off } => {
                    p.a.mr_write(&rd, soff, &vec![0xee; len]);
                    rdma_wqe(
                        qpn,
                        true,
                        bstatic.va + off as u64,
                        bstatic.key,
                        &sg(&rd, soff, len),
                        None,
                        SIG,
                    )
                }
                Kind::FetchAdd { .. } => {
                    p.a.mr_write(&at, j * 8, &[0xee; 8]);
                    atomic_wqe(qpn, ctr.va, ctr.key, sge(&at, j * 8, 8), 1, None, SIG)
                }
            };
            let (idx, first) = p.a.write_wqe(&mut p.qa, &w);
            posted.push((idx, kind, len, m));
            if j + 1 == batch || rng.below(4) == 0 {
                p.a.ring(&p.qa, first);
            }
        }
        p.fabric.run_timers(Duration::from_secs(3600));
        // Requester completions: one per WR, in order, all successful.
        for (j, &(idx, kind, len, m)) in posted.iter().enumerate() {
            let Some(c) = p.a.poll(&mut p.acq.0) else {
                return Err(format!(
                    "message {m} ({kind:?}, {len} B): no completion; QP state {}, stats {:?}",
                    p.a.qp_state(&p.qa),
                    p.a.h.sim.stats().data_path
                ));
            };
            if c.opcode() != MLX5_CQE_REQ || c.wqe_counter() != idx {
                let e = err(&c);
                return Err(format!(
                    "message {m} ({kind:?}, {len} B): CQE opcode {:#x} counter {} (want {idx}), syndrome {:#x}",
                    c.opcode(),
                    c.wqe_counter(),
                    e.syndrome()
                ));
            }
            let soff = j * SLOT;
            match kind {
                Kind::Send => {}
                Kind::Write => {
                    if p.b.mr_read(&bw, soff, len) != payload(m, len) {
                        return Err(format!("message {m}: WRITE data differs"));
                    }
                }
                Kind::Read { off } => {
                    if p.a.mr_read(&rd, soff, len) != stat[off..off + len] {
                        return Err(format!("message {m}: READ data differs"));
                    }
                }
                Kind::FetchAdd { expect } => {
                    let got = u64::from_be_bytes(p.a.mr_read(&at, j * 8, 8).try_into().unwrap());
                    if got != expect {
                        return Err(format!(
                            "message {m}: fetch-and-add returned {got}, want {expect} (executed twice or lost)"
                        ));
                    }
                }
            }
        }
        if let Some(c) = p.a.poll(&mut p.acq.0) {
            return Err(format!(
                "an extra requester CQE: counter {}",
                c.wqe_counter()
            ));
        }
        // Responder: one receive completion per SEND, in order, data intact.
        for &(m, len) in &sends {
            let Some(c) = p.b.poll(&mut p.bcq.1) else {
                return Err(format!("SEND {m}: no receive completion"));
            };
            if c.opcode() != MLX5_CQE_RESP_SEND || c.byte_cnt() as usize != len {
                return Err(format!(
                    "SEND {m}: receive CQE opcode {:#x}, {} bytes (want {len})",
                    c.opcode(),
                    c.byte_cnt()
                ));
            }
            if u32::from(c.wqe_counter()) != recv_idx & 0xffff {
                return Err(format!(
                    "SEND {m}: receive WQE {} (want {recv_idx})",
                    c.wqe_counter()
                ));
            }
            let slot = (recv_idx as usize % 64) * SLOT;
            if p.b.mr_read(&brecv, slot, len) != payload(m, len) {
                return Err(format!(
                    "SEND {m}: delivered data differs (out of order or corrupt)"
                ));
            }
            recv_idx += 1;
        }
        if let Some(c) = p.b.poll(&mut p.bcq.1) {
            return Err(format!(
                "an extra receive completion (delivered twice?): counter {}",
                c.wqe_counter()
            ));
        }
        k += batch as u64;
    }
    let total = p.b.mr_read(&ctr, 0, 8);
    let v = u64::from_le_bytes(total.clone().try_into().unwrap());
    if v != fa && u64::from_be_bytes(total.try_into().unwrap()) != fa {
        return Err(format!("counter {v}, want {fa}"));
    }
    let sa = p.a.h.sim.stats().data_path;
    let sb = p.b.h.sim.stats().data_path;
    let faults = p.fabric.fault_stats();
    let caught = sa.rx_bad_icrc + sa.rx_malformed + sb.rx_bad_icrc + sb.rx_malformed;
    if caught != faults.corrupted {
        return Err(format!(
            "{} frames corrupted, {caught} dropped by the receivers' checks",
            faults.corrupted
        ));
    }
    Ok(Report {
        messages: n,
        virtual_time: p.a.h.sim.clock().now() - start,
        faults,
        retransmits: sa.retransmits + sb.retransmits,
        timeouts: sa.ack_timeouts + sb.ack_timeouts,
        duplicates: sa.rx_duplicates + sb.rx_duplicates,
    })
}

/// The connection the reliability tests use: 1 KiB MTU, 7 retries, a 4 ms ACK timeout.
pub fn conn() -> Conn {
    Conn {
        ack_timeout: 10,
        retry_count: 7,
        ..Conn::default()
    }
}

/// Runs, and on failure panics with the seed and how to replay it (`replay`: the
/// command that reruns this case).
#[track_caller]
pub fn check(seed: u64, n: u64, imp: Impairments, mix: Mix, replay: &str) -> Report {
    match run(seed, n, imp.clone(), mix, conn()) {
        Ok(r) => r,
        Err(e) => panic!(
            "seed {seed:#x} failed: {e}\n  impairments {imp:?}\n  mix {mix:?}\n  replay: {replay}"
        ),
    }
}

//! Recovering an RC connection after a fatal transport error, as RC applications do:
//! drain, reset, reconnect, with exponential backoff between attempts.
//!
//! ```text
//! cargo run --example rc_recovery -- [--messages N] [--outage-ms MS] [--loss PERCENT]
//! ```
//!
//! Two simulated NICs on an in-process fabric (deterministic mode, virtual time: the
//! example moves time itself, so an outage of seconds runs in milliseconds). A
//! streams numbered SENDs to B over links that lose `--loss` percent of frames. After
//! a third of the messages the link is cut in both directions for `--outage-ms` of
//! device time, longer than the retry budget (ACK timeout 4.2 ms × (1 + 3 retries)).
//!
//! What happens, step by step:
//!
//! 1. **The error.** A's oldest outstanding SEND completes with `RetryExcErr`
//!    (IBV_WC_RETRY_EXC_ERR) after its local ACK timer expired `retry_cnt + 1` times;
//!    A's QP moves to the error state (`query()` reports `QpState::Err`).
//! 2. **Drain.** Every other outstanding send WR and every posted receive WR
//!    completes with `WrFlushErr`; the example polls until it has seen exactly one
//!    completion per WR it posted, so nothing is left in flight. The WRs that did not
//!    complete successfully are requeued (B may already have received some of them:
//!    the receiver drops message numbers it has seen, as applications must after a
//!    reconnect; RC's exactly-once guarantee holds within one connection only).
//! 3. **Reset and reconnect.** Both QPs go to RESET (the peer learns of the failure
//!    out of band, here directly) and back to RTS with fresh PSNs.
//! 4. **Probe with backoff.** A probe SEND checks the path. If it fails too (the
//!    outage is not over), drain and reset again and wait before the next attempt:
//!    1 ms, 2 ms, 4 ms ... up to 1 s (exponential backoff, capped).
//! 5. **Resume.** Once a probe succeeds the remaining messages go out; B checks that
//!    every message number arrived, in order, once.

#[path = "common/mod.rs"]
mod common;
use common::open;

use std::collections::VecDeque;
use std::time::Duration;

use ferroverbs::verbs::{
    AccessFlags, CompletionQueue, MemoryRegion, QpCap, QpInitAttr, QpState, QueuePair, RecvWr,
    RtsAttr, SendWr, WcOpcode, WcStatus, WorkCompletion,
};
use ferroverbs::GidEntry;
use ferroverbs_sim::link::Impairments;
use ferroverbs_sim::{Fabric, Sim, SimBus, SimConfig};

/// ACK timeout exponent: 4.096 µs × 2^10 = 4.2 ms.
const TIMEOUT: u8 = 10;
/// Transport retries before RetryExcErr.
const RETRIES: u8 = 3;
/// Messages kept in flight.
const DEPTH: usize = 16;
/// The probe's message number (not a data message).
const PROBE: u64 = u64::MAX;

/// RC recovery: a link outage and seeded loss, the QP's retry error, and reconnection.
#[derive(clap::Parser)]
struct Cli {
    /// Messages to deliver.
    #[arg(long, default_value_t = 3_000)]
    messages: u64,
    /// Length of the link outage in milliseconds.
    #[arg(long = "outage-ms", default_value_t = 40.0)]
    outage_ms: f64,
    /// Random loss in percent.
    #[arg(long, default_value_t = 2.0)]
    loss: f64,
}

struct Args {
    messages: u64,
    outage: Duration,
    loss: f64,
}

fn args() -> Args {
    let c = <Cli as clap::Parser>::parse();
    Args {
        messages: c.messages,
        outage: Duration::from_secs_f64(c.outage_ms.max(0.0) / 1e3),
        loss: c.loss / 100.0,
    }
}

/// RESET (whatever the state) → INIT → RTR → RTS towards `peer_qpn` at `peer`.
fn reconnect(qp: &mut QueuePair<'_, SimBus>, peer: &GidEntry, peer_qpn: u32, psn: (u32, u32)) {
    qp.reset().expect("RESET");
    qp.to_init(1, AccessFlags::empty()).expect("INIT");
    qp.to_rtr(&common::rtr_attr(peer, peer_qpn, psn.0))
        .expect("RTR");
    qp.to_rts(&RtsAttr {
        timeout: TIMEOUT,
        retry_cnt: RETRIES,
        ..RtsAttr::new(psn.1)
    })
    .expect("RTS");
}

/// The receiving side: posts receives, checks message numbers.
struct Receiver<'a> {
    qp: QueuePair<'a, SimBus>,
    cq: CompletionQueue<'a, SimBus>,
    buf: MemoryRegion<'a, SimBus>,
    slot: usize,
    next: u64,
    duplicates: u64,
}

impl Receiver<'_> {
    /// Posts `n` receives, each into its own 64-byte slot (`wr_id` = the slot).
    fn post(&mut self, n: usize) {
        for _ in 0..n {
            let k = self.slot % 64;
            self.slot += 1;
            let sg = [self.buf.sge(k * 64, 64).expect("sge")];
            self.qp
                .post_recv(&[RecvWr::new(k as u64, &sg)])
                .expect("post_recv");
        }
    }

    /// Takes receive completions and posts as many fresh receives.
    fn poll(&mut self) {
        let mut wc = [WorkCompletion::default(); 32];
        loop {
            let n = self.cq.poll(&mut wc);
            if n == 0 {
                return;
            }
            for c in &wc[..n] {
                if c.status != WcStatus::Success {
                    continue;
                }
                let mut b = [0u8; 8];
                self.buf.read(c.wr_id as usize * 64, &mut b);
                let m = u64::from_le_bytes(b);
                if m == PROBE {
                    continue;
                }
                if m < self.next {
                    // A resend, after a reconnect, of a message that had arrived.
                    self.duplicates += 1;
                } else {
                    assert_eq!(m, self.next, "messages arrive in order");
                    self.next += 1;
                }
            }
            self.post(n);
        }
    }
}

/// Posts SEND `m` (its number in a 64-byte slot of `src`).
fn post(qa: &mut QueuePair<'_, SimBus>, src: &MemoryRegion<'_, SimBus>, m: u64, slot: &mut usize) {
    src.write(*slot * 64, &m.to_le_bytes());
    let sg = [src.sge(*slot * 64, 8).expect("sge")];
    qa.post_send(&[SendWr::send(m, &sg).signaled()])
        .expect("post_send");
    *slot = (*slot + 1) % 64;
}

/// Connection PSNs of reconnection `epoch`: (A sends / B expects, B sends / A expects).
fn psns(epoch: u32) -> (u32, u32) {
    (0x1000 * (epoch + 1), 0x80_0000 + 0x1000 * (epoch + 1))
}

fn main() {
    let a = args();
    let fabric = Fabric::new(0x2ec0);
    let (sa, sb) = (
        Sim::new(SimConfig::deterministic(1, 1)),
        Sim::new(SimConfig::deterministic(2, 1)),
    );
    fabric.attach(&sa);
    fabric.attach(&sb);
    let (ma, mb) = (sa.port_macs()[0], sb.port_macs()[0]);
    fabric.impair_both(ma, mb, Impairments::new().loss(a.loss));
    let (ca, ga) = open(&sa, 1);
    let (cb, gb) = open(&sb, 2);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut cqa = ca.create_cq(256).unwrap();
    let cqb = cb.create_cq(256).unwrap();
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap)).unwrap();
    let qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap)).unwrap();
    let src = pa.alloc_mr(64 * 64, AccessFlags::LOCAL_WRITE).unwrap();
    let dst = pb.alloc_mr(64 * 64, AccessFlags::LOCAL_WRITE).unwrap();
    let mut rx = Receiver {
        qp: qb,
        cq: cqb,
        buf: dst,
        slot: 0,
        next: 0,
        duplicates: 0,
    };
    let (na, nb) = (qa.qp_num(), rx.qp.qp_num());
    let mut epoch = 0u32;
    let connect_both = |qa: &mut QueuePair<'_, SimBus>, rx: &mut Receiver<'_>, epoch: u32| {
        let (p0, p1) = psns(epoch);
        reconnect(qa, &gb, nb, (p1, p0));
        reconnect(&mut rx.qp, &ga, na, (p0, p1));
        rx.post(64);
    };
    connect_both(&mut qa, &mut rx, epoch);

    let mut todo: VecDeque<u64> = (0..a.messages).collect();
    let mut in_flight: VecDeque<u64> = VecDeque::new();
    let mut slot = 0usize;
    let mut wc = [WorkCompletion::default(); 32];
    let (mut failures, mut attempts) = (0u32, 0u32);
    let outage_at = a.messages / 3;
    let mut outage = false;
    let start = sa.clock().now();
    let t = |s: &Sim| s.clock().now() - start;

    while !todo.is_empty() || !in_flight.is_empty() {
        if !outage && rx.next >= outage_at {
            // Cut both directions for a window of device time (the fabric's clock).
            outage = true;
            let now = sa.clock().now();
            fabric.impair_both(
                ma,
                mb,
                Impairments::new().outage(now, now + a.outage).loss(a.loss),
            );
            println!("t={:?}: link down for {:?}", t(&sa), a.outage);
        }
        while in_flight.len() < DEPTH {
            let Some(m) = todo.pop_front() else { break };
            post(&mut qa, &src, m, &mut slot);
            in_flight.push_back(m);
        }
        fabric.run_until_idle();
        rx.poll();
        let n = cqa.poll(&mut wc);
        if n == 0 {
            // Nothing completed: let device time run to the next timer.
            fabric.run_timers(Duration::from_millis(100));
            continue;
        }
        // Completions come in posting order, failures and flushes included.
        let mut requeue = Vec::new();
        for c in &wc[..n] {
            let m = in_flight.pop_front().expect("one completion per WR");
            assert_eq!(c.wr_id, m);
            if c.status != WcStatus::Success {
                if requeue.is_empty() {
                    println!(
                        "t={:?}: SEND {m} completed with {:?}; query: {:?}",
                        t(&sa),
                        c.status,
                        qa.query().expect("query").state
                    );
                }
                requeue.push(m);
            } else {
                assert_eq!(c.opcode, WcOpcode::Send);
            }
        }
        if requeue.is_empty() {
            continue;
        }
        // 1-2. Drain: every WR still posted completes (flushed) in the error state.
        failures += 1;
        assert_eq!(qa.query().expect("query").state, QpState::Err);
        while let Some(m) = in_flight.pop_front() {
            let c = loop {
                fabric.run_until_idle();
                if cqa.poll(&mut wc[..1]) == 1 {
                    break wc[0];
                }
            };
            assert_eq!((c.wr_id, c.status), (m, WcStatus::WrFlushErr));
            requeue.push(m);
        }
        println!("  drained: {} WR(s) to resend", requeue.len());
        for m in requeue.into_iter().rev() {
            todo.push_front(m);
        }
        // 3-4. Reset, reconnect and probe, with exponential backoff.
        let mut backoff = Duration::from_millis(1);
        loop {
            attempts += 1;
            epoch += 1;
            rx.poll();
            connect_both(&mut qa, &mut rx, epoch);
            post(&mut qa, &src, PROBE, &mut slot);
            let c = loop {
                fabric.run_timers(Duration::from_millis(100));
                if cqa.poll(&mut wc[..1]) == 1 {
                    break wc[0];
                }
            };
            if c.status == WcStatus::Success {
                println!("t={:?}: reconnected (attempt {attempts})", t(&sa));
                break;
            }
            println!(
                "t={:?}: probe failed ({:?}); next attempt in {backoff:?}",
                t(&sa),
                c.status
            );
            fabric.advance(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }
    fabric.run_until_idle();
    rx.poll();
    assert_eq!(rx.next, a.messages, "every message arrived");
    println!(
        "{} messages delivered in order; {failures} fatal error(s), {attempts} reconnect \
         attempt(s), {} resent message(s) dropped as duplicates by the receiver; {:?} of \
         device time; {:?}",
        rx.next,
        rx.duplicates,
        t(&sa),
        fabric.fault_stats()
    );
}

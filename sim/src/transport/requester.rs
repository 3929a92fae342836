//! The RC requester: fetches send WQEs and turns them into request packets.
//!
//! [`pump`] runs after a send doorbell, after every response (which may open the
//! window or finish a READ a fence waits for) and when an RNR timer expires. It
//! fetches WQEs in order up to the SQ doorbell record, assigns each its PSNs, and
//! transmits while
//!
//! * the window allows: at most [`WINDOW`] PSNs past the oldest unacknowledged one;
//! * the initiator depth allows: at most `2^log_sra_max` READ/atomic requests
//!   outstanding;
//! * no fence holds: a fenced WQE waits for every earlier READ/atomic to complete, a
//!   strongly ordered one (fence mode 3) for every earlier WQE;
//! * no RNR back-off is running.
//!
//! A WQE that failed validation stops fetching; it completes in error (and the QP goes
//! to the error state) once every WQE before it has completed, so completions stay in
//! order.

use crate::engine::mem;
use crate::engine::wqe::{self, Op, WqeError};
use crate::engine::{Ctx, Flight, QpRt, Synd};
use crate::iommu::{Held, Iommu};
use crate::wire::{atomic_eth, ieth, immdt, opcode::Position, reth, Opcode, RoceRepr, MAX_U24};
use ferroverbs_hw::control::qp::QpcState;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{bth, completer, send_frame, send_packet, TxError};

/// Most PSNs in flight past the oldest unacknowledged one.
pub const WINDOW: u32 = 256;

/// AckReq is set at least every this many packets of a long message.
pub const ACK_EVERY: u32 = 32;

/// 16-bit SQ counters.
const MASK16: u32 = 0xffff;

/// While set, every send WQE takes the general path ([`set_general_path_only`]).
static GENERAL_ONLY: AtomicBool = AtomicBool::new(false);

/// Test hook: with `true`, the requester of every device in this process fetches and
/// transmits the inline one-packet SENDs on the general path too (as every other WQE),
/// so that a test can run the same traffic both ways and compare what the two paths
/// did (frames, CQEs, counters, IOMMU accesses). Not for use outside tests.
#[doc(hidden)]
pub fn set_general_path_only(on: bool) {
    GENERAL_ONLY.store(on, Ordering::Relaxed);
}

/// Fetches and transmits as much as the QP may now send.
pub fn pump(qp: &mut QpRt, cx: &mut Ctx) {
    if !matches!(qp.state, QpcState::Rts | QpcState::Sqd) || qp.cfg.sq_size == 0 {
        return;
    }
    if let Some(t) = qp.sq.rnr_until {
        if cx.now < t {
            return;
        }
        qp.sq.rnr_until = None;
    }
    // The doorbell record's translation is cached (the same record holds the RQ
    // counter: `QpRt::rq_posted`); its value is read every time.
    let mut w = qp.resp.dbr_win.get();
    let db = cx.io.read_be32_cached(&mut w, qp.cfg.dbr + 4);
    qp.resp.dbr_win.set(w);
    let Ok(db) = db else {
        return;
    };
    // A run of inline SENDs sent at once is read under one hold of the IOMMU's table
    // (one lock for the run instead of one per WQE: the same checks, counters and
    // windows); the hold is dropped before anything else touches host memory.
    let io: &Iommu = cx.io;
    let mut hold: Option<Held<'_>> = None;
    loop {
        if qp.sq.tx >= qp.sq.wqes.len() {
            if qp.sq.stalled || qp.state != QpcState::Rts {
                break;
            }
            let avail = (db.wrapping_sub(qp.sq.fetched) & MASK16).min(qp.cfg.sq_size);
            if avail == 0 {
                break;
            }
            fetch(qp, cx, avail, io, &mut hold);
            continue;
        }
        hold = None;
        let i = qp.sq.tx;
        // The few fields the checks need (not a copy of the whole flight).
        let f = &qp.sq.wqes[i];
        let (op, sent, fence, counted, next) = (
            f.w.op,
            f.sent,
            f.w.fence,
            f.counted,
            f.first_psn.add(f.sent),
        );
        if f.err.is_some() {
            break;
        }
        let Some(op) = op else { break };
        if op == Op::Nop {
            qp.sq.wqes[i].done = true;
            qp.sq.tx += 1;
            continue;
        }
        if op == Op::Umr {
            // A memory window bind or local invalidation: executed on the MKEY table
            // in send queue order, with no packet (`Firmware::umr`).
            let u = qp.sq.wqes[i].w.umr();
            match cx.fw.umr(qp.cfg.pd, qp.cfg.qpn, false, &u) {
                Ok(()) => {
                    qp.sq.wqes[i].done = true;
                    qp.sq.tx += 1;
                    continue;
                }
                Err(s) => {
                    qp.sq.wqes[i].err = Some(Synd::of(s));
                    qp.sq.stalled = true;
                    break;
                }
            }
        }
        // A fenced WQE waits for every earlier READ/atomic (itself excluded, when a
        // go-back-N resends it); a strongly ordered one for every earlier WQE.
        if sent == 0
            && ((fence.waits_for_reads() && qp.sq.reads_out > u32::from(counted))
                || (fence.waits_for_all() && !earlier_done(qp, i)))
        {
            break;
        }
        if op.is_read_atomic() && !counted && qp.sq.reads_out >= qp.cfg.sra_max {
            break;
        }
        if next.distance(qp.sq.una) >= WINDOW as i32 {
            break;
        }
        if let Err(e) = transmit(qp, cx, i) {
            let synd = match e {
                TxError::Memory(_) => WqeError::Prot,
                TxError::Build => WqeError::QpOp,
            };
            qp.sq.wqes[i].err = Some(Synd::of_wqe(synd));
            qp.sq.stalled = true;
            break;
        }
        let f = &mut qp.sq.wqes[i];
        let hi = f.first_psn.add(f.sent);
        if hi.distance(qp.sq.psn_hi) > 0 {
            qp.sq.psn_hi = hi;
        }
        if qp.sq.ack_deadline.is_none() {
            qp.sq.ack_deadline = completer::ack_timeout_ns(qp.cfg.ack_timeout).map(|t| cx.now + t);
        }
        let f = &mut qp.sq.wqes[i];
        if op.is_read_atomic() && !f.counted {
            f.counted = true;
            qp.sq.reads_out += 1;
        }
        if f.sent >= f.npsn {
            qp.sq.tx += 1;
        }
    }
    drop(hold);
    completer::complete_head(qp, cx);
}

/// Reads, validates and queues the next WQE; the common one (an inline SEND of one
/// packet that may go now) is transmitted at once by [`send_now`], its WQEBBs read
/// under `hold` (taken from `io` if not held yet, and kept for the next such WQE).
/// Every other path drops the hold first: nothing else reads host memory under it.
fn fetch<'a>(qp: &mut QpRt, cx: &mut Ctx, avail: u32, io: &'a Iommu, hold: &mut Option<Held<'a>>) {
    let pos = qp.sq.fetched;
    if avail < 2 || GENERAL_ONLY.load(Ordering::Relaxed) {
        *hold = None;
        let w = wqe::parse_send(cx.fw, cx.io, &qp.cfg, pos, avail, &mut qp.sq.txd);
        queue(qp, cx, w);
        return;
    }
    // The first read of `parse_send` (two WQEBBs), decoded at fixed offsets when it is
    // the common WQE; any other goes on through the general decoder with the same
    // bytes (one read either way, so the IOMMU sees the same accesses).
    let mut raw = [0u8; 128];
    let h = hold.get_or_insert_with(|| io.hold());
    let ok = wqe::read_pair(h, &qp.cfg, &mut qp.sq.txd.win, pos, &mut raw);
    if ok {
        if let Some(w) = wqe::inline_send(&qp.cfg, pos, &raw) {
            // Its data as `parse_send` leaves it (a retransmission of this WQE takes
            // it from there, as after the general fetch).
            qp.sq.txd.set_pair(pos, &w, &raw);
            if !send_now(qp, cx, &w, &raw) {
                // Valid, but it waits (window, fence) or takes the general transmit.
                *hold = None;
                queue(qp, cx, w);
            }
            return;
        }
    }
    *hold = None;
    let mut small = [0u8; 256];
    small[..128].copy_from_slice(&raw);
    let w = wqe::parse_send_read(
        cx.fw,
        cx.io,
        &qp.cfg,
        pos,
        avail,
        &mut qp.sq.txd,
        &mut small,
        128,
        ok,
    );
    queue(qp, cx, w);
}

/// Whether every flight before flight `i` has completed (strong ordering: fence mode
/// 3 executes a WQE only then).
fn earlier_done(qp: &QpRt, i: usize) -> bool {
    qp.sq.wqes.iter().take(i).all(|f| f.done)
}

/// Queues the fetched WQE `w`.
fn queue(qp: &mut QpRt, cx: &mut Ctx, mut w: wqe::SendWqe) {
    cx.stats.wqes += 1;
    qp.sq.fetched = qp.sq.fetched.wrapping_add(w.wqebbs);
    let pmtu = u64::from(qp.cfg.pmtu);
    if w.error.is_none() && w.op != Some(Op::Nop) && (qp.cfg.path.is_none() || pmtu == 0) {
        // No usable path (not an IPv4 RoCEv2 GID): the WQE cannot be executed.
        w.error = Some(WqeError::QpOp);
    }
    let npsn = match (w.error, w.op) {
        (None, Some(Op::Send { .. } | Op::SendInv | Op::Write { .. } | Op::Read)) => {
            (w.len.div_ceil(pmtu).max(1)).min(u64::from(u32::MAX)) as u32
        }
        (None, Some(Op::CmpSwap | Op::FetchAdd)) => 1,
        _ => 0,
    };
    let err = w.error.map(Synd::of_wqe);
    if err.is_some() {
        qp.sq.stalled = true;
    }
    cx.flights.fill(&mut qp.sq.wqes);
    qp.sq.wqes.push_back(Flight {
        w,
        first_psn: qp.sq.next_psn,
        npsn,
        sent: 0,
        resp_pkts: 0,
        got: 0,
        done: false,
        counted: false,
        err,
    });
    qp.sq.next_psn = qp.sq.next_psn.add(npsn);
}

/// Transmits the inline SEND `w` just read (its WQEBBs `raw`, decoded by
/// [`wqe::inline_send`]) as one SEND ONLY packet built at fixed offsets
/// ([`crate::wire::encap::Encap::rc_send_only`]) and queues it as sent, if it may go
/// now: every WQE before it was transmitted (the caller fetches only then), it fits
/// one packet of the path MTU, the QP has a path, the window has room for its PSN and
/// no fence holds it. Otherwise returns false having changed nothing. The frame, the
/// flight, the PSNs, the counters and the timer are those of [`queue`] then
/// [`transmit`] in the loop of [`pump`].
fn send_now(qp: &mut QpRt, cx: &mut Ctx, w: &wqe::SendWqe, raw: &[u8; 128]) -> bool {
    let sq = &mut qp.sq;
    let psn = sq.next_psn;
    let Some(e) = &qp.cfg.encap else {
        return false;
    };
    let n = w.len as usize;
    if qp.cfg.path.is_none()
        || n > qp.cfg.pmtu as usize
        || (w.fence.waits_for_reads() && sq.reads_out > 0)
        || (w.fence.waits_for_all() && !sq.wqes.is_empty())
        || psn.distance(sq.una) >= WINDOW as i32
    {
        return false;
    }
    let imm = match w.op {
        Some(Op::Send { imm: true }) => Some([raw[12], raw[13], raw[14], raw[15]]),
        _ => None,
    };
    // The inline bytes are the first `n` of the WQEBBs after the inline header.
    let (_, window) = raw.split_at(wqe::INLINE_SEND_DATA_AT);
    let Ok(window) = <&[u8; 128 - wqe::INLINE_SEND_DATA_AT]>::try_from(window) else {
        return false;
    };
    // The frame is built in the buffer it goes out in.
    let mut buf = cx.net.buffer();
    let Some(_) = e.rc_send_only(
        &mut buf,
        qp.cfg.remote_qpn & MAX_U24,
        psn,
        w.solicited,
        imm,
        window,
        n,
    ) else {
        // Nothing built: the buffer goes back where it came from.
        cx.net.spare.push(buf);
        return false;
    };
    cx.net.send(buf, cx.stats);
    cx.stats.wqes += 1;
    cx.stats.tx_send_only_fast += 1;
    sq.fetched = sq.fetched.wrapping_add(w.wqebbs);
    cx.flights.fill(&mut sq.wqes);
    push_sent(&mut sq.wqes, w, psn);
    let hi = psn.next();
    sq.next_psn = hi;
    sq.tx += 1;
    if hi.distance(sq.psn_hi) > 0 {
        sq.psn_hi = hi;
    }
    if sq.ack_deadline.is_none() {
        sq.ack_deadline = completer::ack_timeout_ns(qp.cfg.ack_timeout).map(|t| cx.now + t);
    }
    true
}

/// Queues the inline SEND `w` as sent in one packet at `psn` (the flight [`queue`]
/// and [`transmit`] leave for it). Not inlined: the flight is written into the
/// queue's slot field by field, where a copy of it from the caller's frame would
/// otherwise be made (the queue's push is out of line in a large caller).
#[inline(never)]
fn push_sent(
    wqes: &mut std::collections::VecDeque<Flight>,
    w: &wqe::SendWqe,
    psn: crate::wire::Psn,
) {
    wqes.push_back(Flight {
        w: *w,
        first_psn: psn,
        npsn: 1,
        sent: 1,
        resp_pkts: 0,
        got: 0,
        done: false,
        counted: false,
        err: None,
    });
}

fn send_opcode(op: Op, pos: Position) -> Opcode {
    use Opcode::*;
    match (op, pos) {
        (Op::Send { .. } | Op::SendInv, Position::First) => RcSendFirst,
        (Op::Send { .. } | Op::SendInv, Position::Middle) => RcSendMiddle,
        (Op::SendInv, Position::Last) => RcSendLastWithInvalidate,
        (Op::SendInv, Position::Only) => RcSendOnlyWithInvalidate,
        (Op::Send { imm: false }, Position::Last) => RcSendLast,
        (Op::Send { imm: true }, Position::Last) => RcSendLastWithImmediate,
        (Op::Send { imm: false }, Position::Only) => RcSendOnly,
        (Op::Send { imm: true }, Position::Only) => RcSendOnlyWithImmediate,
        (_, Position::First) => RcRdmaWriteFirst,
        (_, Position::Middle) => RcRdmaWriteMiddle,
        (Op::Write { imm: true }, Position::Last) => RcRdmaWriteLastWithImmediate,
        (_, Position::Last) => RcRdmaWriteLast,
        (Op::Write { imm: true }, Position::Only) => RcRdmaWriteOnlyWithImmediate,
        (_, Position::Only) => RcRdmaWriteOnly,
    }
}

/// Transmits the next packet (or the READ request) of flight `i`.
fn transmit(qp: &mut QpRt, cx: &mut Ctx, i: usize) -> Result<(), TxError> {
    let sq = &mut qp.sq;
    let f = &sq.wqes[i];
    let (Some(path), Some(op)) = (&qp.cfg.path, f.w.op) else {
        return Err(TxError::Build);
    };
    if !wqe::reload(cx.fw, cx.io, &qp.cfg, &f.w, &mut sq.txd) {
        return Err(TxError::Memory(mem::KeyError::Translation));
    }
    let pmtu = u64::from(qp.cfg.pmtu);
    let remote = qp.cfg.remote_qpn;
    let psn = f.first_psn.add(f.sent);
    match op {
        Op::Send { .. } | Op::SendInv | Op::Write { .. } => {
            let imm = matches!(op, Op::Send { imm: true } | Op::Write { imm: true });
            let k = f.sent;
            let off = u64::from(k) * pmtu;
            let plen = pmtu.min(f.w.len.saturating_sub(off)) as usize;
            let pos = if f.npsn == 1 {
                Position::Only
            } else if k == 0 {
                Position::First
            } else if k + 1 == f.npsn {
                Position::Last
            } else {
                Position::Middle
            };
            let last = pos.ends_message();
            let mut b = bth(send_opcode(op, pos), remote, psn);
            b.ack_req = last || (k + 1).is_multiple_of(ACK_EVERY);
            b.solicited =
                last && f.w.solicited && (matches!(op, Op::Send { .. } | Op::SendInv) || imm);
            let mut roce = RoceRepr::new(b);
            if matches!(op, Op::Write { .. }) && pos.starts_message() {
                roce.reth = Some(reth::Repr {
                    virtual_address: f.w.raddr,
                    rkey: f.w.rkey,
                    dma_length: f.w.len as u32,
                });
            }
            if imm && last {
                roce.immdt = Some(immdt::Repr { immediate: f.w.imm });
            }
            if op == Op::SendInv && last {
                // The control segment's `imm` is the R_Key to invalidate.
                roce.ieth = Some(ieth::Repr { rkey: f.w.imm });
            }
            let data = &sq.txd;
            let inline = f.w.inline;
            let send = |fw: &_, io: &_, dst: &mut [u8]| data.gather(fw, io, inline, off, dst);
            match &qp.cfg.encap {
                Some(e) => send_frame(cx, e, &roce, plen, send)?,
                None => send_packet(cx, path, &roce, plen, send)?,
            }
            sq.wqes[i].sent += 1;
        }
        Op::Read => {
            let off = u64::from(f.sent) * pmtu;
            let mut b = bth(Opcode::RcRdmaReadRequest, remote, psn);
            b.ack_req = true;
            let mut roce = RoceRepr::new(b);
            roce.reth = Some(reth::Repr {
                virtual_address: f.w.raddr.wrapping_add(off),
                rkey: f.w.rkey,
                dma_length: f.w.len.saturating_sub(off) as u32,
            });
            send_packet(cx, path, &roce, 0, |_, _, _| Ok(()))?;
            sq.wqes[i].sent = f.npsn;
        }
        Op::CmpSwap | Op::FetchAdd => {
            let cas = op == Op::CmpSwap;
            let opcode = if cas {
                Opcode::RcCompareSwap
            } else {
                Opcode::RcFetchAdd
            };
            let mut b = bth(opcode, remote, psn);
            b.ack_req = true;
            let mut roce = RoceRepr::new(b);
            roce.atomic_eth = Some(atomic_eth::Repr {
                virtual_address: f.w.raddr,
                rkey: f.w.rkey,
                swap_add: f.w.swap_add,
                compare: if cas { f.w.compare } else { 0 },
            });
            send_packet(cx, path, &roce, 0, |_, _, _| Ok(()))?;
            sq.wqes[i].sent = 1;
        }
        Op::Nop | Op::Umr => {}
    }
    Ok(())
}

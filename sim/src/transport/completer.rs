//! The RC completer: turns ACKs, NAKs, READ responses and atomic ACKs into requester
//! completions, in WQE order.
//!
//! * An ACK with PSN `p` completes every SEND/WRITE whose last PSN is at most `p`; it
//!   cannot complete a READ or an atomic, which wait for their responses.
//! * READ responses must arrive in PSN order; each lands at its offset in the READ's
//!   scatter list (FIRST/MIDDLE exactly one PMTU, LAST/ONLY the rest; anything else is
//!   a bad response). The last one completes the READ.
//! * An atomic ACK writes the original remote value to the WQE's local buffer as it
//!   came off the wire (big-endian: ConnectX reports atomic results in network byte
//!   order, `IBV_EXP_ATOMIC_HCA_REPLY_BE`) and completes the atomic.
//! * An RNR NAK backs off for the time its timer code stands for, then retransmits
//!   from its PSN; a sequence NAK retransmits from its PSN at once. Both count against
//!   their retry counters; exhausted, the WQE completes with `RNR_RETRY_EXC_ERR` /
//!   `TRANSPORT_RETRY_EXC_ERR`.
//! * A fatal NAK completes the WQE it names with the matching error (invalid request
//!   → `REMOTE_INVAL_REQ_ERR`, remote access → `REMOTE_ACCESS_ERR`, remote
//!   operational → `REMOTE_OP_ERR`) after completing everything before it; the QP then
//!   goes to the error state and every later WQE is flushed.
//!
//! Unsignaled WQEs complete silently on success; errors are always reported.
//!
//! * Requester scatter to CQE (`qpc.cs_req`): the data of a READ response or an
//!   atomic ACK of a signaled WQE small enough goes in the WQE's CQE
//!   (`MLX5_INLINE_SCATTER_32`/`_64`) instead of its local buffer.

use ferroverbs_hw::datapath::cqe::{
    MLX5_CQE_SYNDROME_BAD_RESP_ERR, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
    MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
    MLX5_CQE_SYNDROME_REMOTE_OP_ERR, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR,
    MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR,
};

use crate::engine::cq::CqeKind;
use crate::engine::wqe::{self, Op};
use crate::engine::{mem, Ctx, Pkt, QpRt, ReqScat, Synd};
use crate::wire::aeth::{self, NakCode, Syndrome};
use crate::wire::opcode::{Operation, Position};
use crate::wire::Psn;
use ferroverbs_hw::control::qp::QpcState;

use super::requester;

/// Handles a response packet for `qp`.
pub fn on_response(qp: &mut QpRt, cx: &mut Ctx, pkt: &Pkt) {
    if !matches!(qp.state, QpcState::Rts | QpcState::Sqd) {
        cx.stats.rx_bad_state += 1;
        return;
    }
    match pkt.repr.opcode().operation() {
        Operation::Acknowledge => on_ack(qp, cx, pkt),
        Operation::RdmaReadResponse => on_read_response(qp, cx, pkt),
        Operation::AtomicAcknowledge => on_atomic_ack(qp, cx, pkt),
        _ => cx.stats.rx_unexpected += 1,
    }
}

/// The local ACK timeout for the exponent `code` (QP attribute `timeout`, `ads.ack_timeout`):
/// 4.096 µs × 2^code; 0 means no timer (IBTA 9.7.6.1.3, rocev2-wire.md §4.3).
pub fn ack_timeout_ns(code: u8) -> Option<u64> {
    (code != 0).then(|| 4096u64 << code.min(31))
}

/// Whether PSNs were transmitted and not yet acknowledged.
fn outstanding(qp: &QpRt) -> bool {
    qp.sq.una.distance(qp.sq.psn_hi) < 0
}

/// Restarts the local ACK timer if PSNs are outstanding (and no RNR back-off runs),
/// stops it otherwise.
fn rearm(qp: &mut QpRt, now: u64) {
    qp.sq.ack_deadline = if outstanding(qp) && qp.sq.rnr_until.is_none() {
        ack_timeout_ns(qp.cfg.ack_timeout).map(|t| now + t)
    } else {
        None
    };
}

/// Whether `psn` lies in what was transmitted and is not yet acknowledged.
fn in_flight(qp: &QpRt, psn: Psn) -> bool {
    psn.distance(qp.sq.una) >= 0 && psn.distance(qp.sq.psn_hi) < 0
}

/// Marks every SEND/WRITE whose PSNs are all at or before `psn` as done and moves the
/// oldest unacknowledged PSN. Returns `None` for a PSN outside what is outstanding (a
/// stale ACK, or a ghost: a PSN never sent), else whether the oldest unacknowledged
/// PSN moved (progress: the retry counters are reset and the timer restarted).
fn ack_to(qp: &mut QpRt, psn: Psn) -> Option<bool> {
    let sq = &mut qp.sq;
    if psn.distance(sq.una) < -1 || psn.distance(sq.psn_hi) >= 0 {
        return None;
    }
    let mut una = psn.next();
    for f in sq.wqes.iter_mut() {
        if f.done || f.npsn == 0 {
            continue;
        }
        if f.first_psn.distance(psn) > 0 {
            break;
        }
        if f.w.op.is_some_and(Op::scatters) {
            // A READ/atomic waits for its responses: nothing past its first missing
            // response is acknowledged.
            let first_open = f.first_psn.add(f.resp_pkts);
            if first_open.distance(una) < 0 {
                una = first_open;
            }
            break;
        }
        if f.last_psn().distance(psn) > 0 || f.sent < f.npsn {
            // A message only partly covered stays outstanding.
            break;
        }
        f.done = true;
    }
    if una.distance(sq.una) > 0 {
        sq.una = una;
        sq.retry_psn = None;
        sq.retries_left = qp.cfg.retry_count;
        sq.rnr_left = qp.cfg.rnr_retry;
        return Some(true);
    }
    Some(false)
}

/// Completes the WQEs at the head of the send queue that are done (a CQE for the
/// signaled ones), and reports a failed WQE once it reaches the head.
pub fn complete_head(qp: &mut QpRt, cx: &mut Ctx) {
    // The leading run of done, successful, unsignaled flights completes silently:
    // counted, then dropped from the queue in one step (what popping them one by one
    // did). The flight after it is read in place; only a failed one is copied out (its
    // report needs the QP mutably).
    loop {
        let k = qp
            .sq
            .wqes
            .iter()
            .take_while(|f| f.done && f.err.is_none() && !f.w.signaled)
            .count();
        if k > 0 {
            qp.sq.wqes.drain(..k);
            qp.sq.tx = qp.sq.tx.saturating_sub(k);
        }
        let Some(f) = qp.sq.wqes.front() else {
            // Nothing in flight: the buffer goes to the next QP that needs one.
            cx.flights.put(&mut qp.sq.wqes);
            return;
        };
        if let Some(s) = f.err {
            let f = *f;
            qp.sq.wqes.pop_front();
            qp.sq.tx = qp.sq.tx.saturating_sub(1);
            report_error(qp, cx, &f, s);
            return;
        }
        if !f.done {
            break;
        }
        let c =
            f.w.signaled
                .then(|| qp.req_completion(f, CqeKind::Req { sop: f.w.opcode }, cx.now));
        // The READ response or atomic result that goes in this CQE (requester scatter
        // to CQE), kept since it arrived.
        let scat = match qp.sq.req_scat {
            Some(s) if c.is_some() && s.index == f.w.index && f.w.op.is_some_and(Op::scatters) => {
                qp.sq.req_scat = None;
                Some(s)
            }
            _ => None,
        };
        qp.sq.wqes.pop_front();
        qp.sq.tx = qp.sq.tx.saturating_sub(1);
        if let Some(c) = c {
            let written = match &scat {
                Some(s) => cx.post_cqe_scattered(qp.cfg.cqn_snd, &c, s.bytes()),
                None => cx.post_cqe(qp.cfg.cqn_snd, &c),
            };
            if !written {
                qp.to_error(cx);
                return;
            }
        }
    }
}

fn report_error(qp: &mut QpRt, cx: &mut Ctx, f: &crate::engine::Flight, s: Synd) {
    if qp.sq.req_scat.is_some_and(|r| r.index == f.w.index) {
        qp.sq.req_scat = None;
    }
    if f.counted {
        qp.sq.reads_out = qp.sq.reads_out.saturating_sub(1);
    }
    let c = qp.req_completion(
        f,
        CqeKind::Err {
            req: true,
            syndrome: s.syndrome,
            vendor: s.vendor,
            sop: f.w.opcode,
        },
        cx.now,
    );
    cx.post_cqe(qp.cfg.cqn_snd, &c);
    qp.to_error(cx);
}

/// Fails the flight holding `psn` (or, if none does, the oldest incomplete one) now:
/// completes what is done before it, reports it, and flushes the rest.
fn fail_at(qp: &mut QpRt, cx: &mut Ctx, psn: Psn, s: Synd) {
    let i = qp
        .sq
        .wqes
        .iter()
        .position(|f| f.contains(psn))
        .or_else(|| qp.sq.wqes.iter().position(|f| !f.done && f.npsn > 0));
    let Some(i) = i else {
        cx.stats.rx_unexpected += 1;
        return;
    };
    qp.sq.wqes[i].err = Some(s);
    complete_head(qp, cx);
    if qp.state == QpcState::Err {
        return;
    }
    // Something before it is still incomplete: report it anyway (and flush the rest).
    if let Some(i) = qp.sq.wqes.iter().position(|f| f.err.is_some()) {
        if let Some(f) = qp.sq.wqes.remove(i) {
            if i < qp.sq.tx {
                qp.sq.tx -= 1;
            }
            report_error(qp, cx, &f, s);
        }
    }
}

/// Goes back to `psn`: the flight holding it resends from there, every later one from
/// its start.
fn rewind(qp: &mut QpRt, cx: &mut Ctx, psn: Psn) {
    let Some(i) = qp
        .sq
        .wqes
        .iter()
        .position(|f| !f.done && f.err.is_none() && f.contains(psn))
    else {
        return;
    };
    let mut resent = 0u64;
    for (j, f) in qp.sq.wqes.iter_mut().enumerate().skip(i) {
        let from = if j == i {
            let d = psn.distance(f.first_psn).max(0) as u32;
            if f.w.op.is_some_and(Op::scatters) {
                d.min(f.resp_pkts)
            } else {
                d
            }
        } else {
            0
        };
        resent += u64::from(f.sent.saturating_sub(from));
        f.sent = from;
    }
    cx.stats.retransmits += resent;
    cx.fw.q_counts(qp.cfg.counter_set).retransmitted_packets += resent;
    qp.sq.tx = i;
}

/// Go-back-N from `psn` after a sequence NAK, an implied NAK or a local ACK timeout:
/// costs one transport retry (none left: the WQE holding `psn` completes with
/// `TRANSPORT_RETRY_EXC_ERR`, IBV_WC_RETRY_EXC_ERR). A second NAK for the same PSN
/// while it is still the oldest unacknowledged one is the same loss: ignored.
fn go_back(qp: &mut QpRt, cx: &mut Ctx, psn: Psn) {
    if qp.sq.retry_psn == Some(psn) && qp.sq.una == psn {
        cx.stats.rx_stale += 1;
        return;
    }
    if qp.sq.retries_left == 0 {
        cx.fw
            .q_counts(qp.cfg.counter_set)
            .req_transport_retries_exceeded += 1;
        fail_at(
            qp,
            cx,
            psn,
            Synd::of(MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR),
        );
        return;
    }
    qp.sq.retries_left -= 1;
    cx.stats.retries += 1;
    cx.fw.q_counts(qp.cfg.counter_set).retransmissions += 1;
    qp.sq.retry_psn = Some(psn);
    rewind(qp, cx, psn);
    qp.sq.ack_deadline = None;
    requester::pump(qp, cx);
    rearm(qp, cx.now);
}

/// The local ACK timer fired: go back to the oldest unacknowledged PSN (one transport
/// retry), or fail with `TRANSPORT_RETRY_EXC_ERR` when none is left.
pub fn on_ack_timeout(qp: &mut QpRt, cx: &mut Ctx) {
    qp.sq.ack_deadline = None;
    if !matches!(qp.state, QpcState::Rts | QpcState::Sqd)
        || !outstanding(qp)
        || qp.sq.rnr_until.is_some()
    {
        return;
    }
    cx.stats.ack_timeouts += 1;
    cx.fw.q_counts(qp.cfg.counter_set).local_ack_timeout_err += 1;
    qp.sq.retry_psn = None;
    let una = qp.sq.una;
    go_back(qp, cx, una);
}

/// The oldest READ/atomic still waiting for a response (its index).
fn oldest_read(qp: &QpRt) -> Option<usize> {
    qp.sq
        .wqes
        .iter()
        .position(|f| !f.done && f.err.is_none() && f.w.op.is_some_and(Op::scatters))
}

/// An implied NAK: something past a READ/atomic still missing responses was answered,
/// so those responses were lost; go back to the oldest unacknowledged PSN.
fn implied_nak(qp: &mut QpRt, cx: &mut Ctx) {
    cx.stats.implied_naks += 1;
    cx.fw.q_counts(qp.cfg.counter_set).implied_nak_seq_err += 1;
    let una = qp.sq.una;
    go_back(qp, cx, una);
}

fn on_ack(qp: &mut QpRt, cx: &mut Ctx, pkt: &Pkt) {
    let Some(a) = pkt.repr.aeth else {
        cx.stats.rx_unexpected += 1;
        return;
    };
    let psn = pkt.repr.bth.psn;
    match a.syndrome {
        Syndrome::Ack { .. } => {
            match ack_to(qp, psn) {
                Some(true) => rearm(qp, cx.now),
                Some(false) => {}
                None => cx.stats.rx_stale += 1,
            }
            complete_head(qp, cx);
            if qp.state == QpcState::Err {
                return;
            }
            // An ACK at or past a READ/atomic whose responses are missing: the
            // responder executed it, its responses were lost.
            if let Some(i) = oldest_read(qp) {
                let f = qp.sq.wqes[i];
                if f.sent > 0 && psn.distance(f.last_psn()) >= 0 && in_flight(qp, f.last_psn()) {
                    return implied_nak(qp, cx);
                }
            }
            requester::pump(qp, cx);
        }
        Syndrome::RnrNak { timer } => {
            if !in_flight(qp, psn) || qp.sq.rnr_until.is_some() {
                cx.stats.rx_stale += 1;
                return;
            }
            cx.stats.rnr_naks_received += 1;
            cx.fw.q_counts(qp.cfg.counter_set).rnr_nak_received += 1;
            ack_to(qp, psn.sub(1));
            complete_head(qp, cx);
            if qp.state == QpcState::Err {
                return;
            }
            if qp.sq.rnr_left == 0 {
                cx.fw.q_counts(qp.cfg.counter_set).rnr_nak_retry_err += 1;
                fail_at(qp, cx, psn, Synd::of(MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR));
                return;
            }
            if qp.sq.rnr_left != 7 {
                qp.sq.rnr_left -= 1;
            }
            cx.stats.retries += 1;
            cx.fw.q_counts(qp.cfg.counter_set).retransmissions += 1;
            rewind(qp, cx, psn);
            let us = aeth::rnr_timer_micros(timer).unwrap_or(0);
            qp.sq.rnr_until = Some(cx.now + u64::from(us) * 1000);
            // No local ACK timeout while backing off: the timer restarts with the
            // retransmission.
            qp.sq.ack_deadline = None;
        }
        Syndrome::Nak(NakCode::PsnSequenceError) => {
            if !in_flight(qp, psn) {
                cx.stats.rx_stale += 1;
                return;
            }
            cx.stats.seq_naks_received += 1;
            cx.fw.q_counts(qp.cfg.counter_set).packet_seq_err += 1;
            if ack_to(qp, psn.sub(1)) == Some(true) {
                rearm(qp, cx.now);
            }
            complete_head(qp, cx);
            if qp.state == QpcState::Err {
                return;
            }
            // The NAK acknowledges everything before its PSN, but not past a READ
            // still missing responses: go back to the oldest unacknowledged PSN.
            let una = qp.sq.una;
            go_back(qp, cx, una);
        }
        Syndrome::Nak(code) => {
            if !in_flight(qp, psn) {
                cx.stats.rx_stale += 1;
                return;
            }
            ack_to(qp, psn.sub(1));
            let synd = match code {
                NakCode::InvalidRequest => MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
                NakCode::RemoteAccessError => MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,
                _ => MLX5_CQE_SYNDROME_REMOTE_OP_ERR,
            };
            fail_at(qp, cx, psn, Synd::of(synd));
        }
    }
}

/// A READ response or atomic ACK moved the oldest unacknowledged PSN: the retry
/// counters are reset and the timer restarted.
fn progress(qp: &mut QpRt, now: u64) {
    qp.sq.retries_left = qp.cfg.retry_count;
    qp.sq.rnr_left = qp.cfg.rnr_retry;
    qp.sq.retry_psn = None;
    rearm(qp, now);
}

/// Whether the `n` bytes a READ response or an atomic ACK brought for flight `f` go
/// in its CQE instead of its local buffer (requester scatter to CQE, `qpc.cs_req`:
/// [`QpCfg::req_in_cqe`](crate::engine::qp::QpCfg::req_in_cqe)). Only a signaled
/// WQE has a CQE to carry them: Linux's `mlx5_ib` enables `cs_req` only for QPs that
/// signal every WQE (`configure_requester_scat_cqe`: `sq_sig_all`, unless the
/// creator allowed it explicitly), and an unsignaled READ's data goes to its buffer
/// here (the PRM places it in the CQE only when the WQE generates one). One READ
/// response packet at most (`n` is at most 64, below every path MTU), and one held
/// at a time ([`ReqScat`]): a second before the first's CQE goes to memory.
fn req_in_cqe(qp: &QpRt, f: &crate::engine::Flight, n: u64) -> bool {
    f.w.signaled && f.npsn <= 1 && qp.cfg.req_in_cqe(n) && qp.sq.req_scat.is_none()
}

/// Keeps `data` for the CQE of flight `f` ([`req_in_cqe`] held).
fn hold_for_cqe(qp: &mut QpRt, f: &crate::engine::Flight, data: &[u8]) {
    let mut s = ReqScat {
        index: f.w.index,
        len: data.len().min(64) as u8,
        data: [0; 64],
    };
    s.data[..usize::from(s.len)].copy_from_slice(&data[..usize::from(s.len)]);
    qp.sq.req_scat = Some(s);
}

fn on_read_response(qp: &mut QpRt, cx: &mut Ctx, pkt: &Pkt) {
    let psn = pkt.repr.bth.psn;
    let Some(i) = oldest_read(qp) else {
        cx.stats.rx_stale += 1;
        return;
    };
    let f = qp.sq.wqes[i];
    let expect = f.first_psn.add(f.resp_pkts);
    if f.w.op != Some(Op::Read) || psn != expect {
        if psn.distance(expect) > 0 && in_flight(qp, psn) {
            // A response past the one awaited: those before it were lost.
            ack_to(qp, psn.sub(1));
            complete_head(qp, cx);
            if qp.state != QpcState::Err {
                implied_nak(qp, cx);
            }
        } else {
            // A duplicate (or a response to nothing outstanding).
            cx.stats.rx_stale += 1;
        }
        return;
    }
    ack_to(qp, psn.sub(1));
    let k = f.resp_pkts;
    let want = if f.npsn == 1 {
        Position::Only
    } else if k == 0 {
        Position::First
    } else if k + 1 == f.npsn {
        Position::Last
    } else {
        Position::Middle
    };
    let remaining = f.w.len - f.got;
    let n = pkt.payload.len() as u64;
    let len_ok = if want.ends_message() {
        n == remaining
    } else {
        n == u64::from(qp.cfg.pmtu)
    };
    if pkt.repr.opcode().position() != want || !len_ok {
        fail_at(
            qp,
            cx,
            f.first_psn,
            Synd::of(MLX5_CQE_SYNDROME_BAD_RESP_ERR),
        );
        return;
    }
    // Requester scatter to CQE: the response's data kept for the READ's CQE, the
    // local buffer untouched (software copies it there); its list still checked.
    let in_cqe = want == Position::Only && req_in_cqe(qp, &f, n);
    let ok = wqe::reload(cx.fw, cx.io, &qp.cfg, &f.w, &mut qp.sq.rxd)
        && (in_cqe || mem::scatter(cx.fw, cx.io, &qp.sq.rxd.sges, f.got, pkt.payload).is_ok());
    if !ok {
        fail_at(
            qp,
            cx,
            f.first_psn,
            Synd::of(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR),
        );
        return;
    }
    if in_cqe {
        hold_for_cqe(qp, &f, pkt.payload);
    }
    let fl = &mut qp.sq.wqes[i];
    fl.got += n;
    fl.resp_pkts += 1;
    let una = fl.first_psn.add(fl.resp_pkts);
    if fl.resp_pkts >= fl.npsn {
        fl.done = true;
        if fl.counted {
            fl.counted = false;
            qp.sq.reads_out = qp.sq.reads_out.saturating_sub(1);
        }
    }
    if una.distance(qp.sq.una) > 0 {
        qp.sq.una = una;
    }
    progress(qp, cx.now);
    complete_head(qp, cx);
    requester::pump(qp, cx);
}

fn on_atomic_ack(qp: &mut QpRt, cx: &mut Ctx, pkt: &Pkt) {
    let psn = pkt.repr.bth.psn;
    let Some(i) = oldest_read(qp) else {
        cx.stats.rx_stale += 1;
        return;
    };
    let f = qp.sq.wqes[i];
    let expect = f.first_psn.add(f.resp_pkts);
    if !matches!(f.w.op, Some(Op::CmpSwap | Op::FetchAdd)) || psn != f.first_psn {
        if psn.distance(expect) > 0 && in_flight(qp, psn) {
            ack_to(qp, psn.sub(1));
            complete_head(qp, cx);
            if qp.state != QpcState::Err {
                implied_nak(qp, cx);
            }
        } else {
            cx.stats.rx_stale += 1;
        }
        return;
    }
    let Some(orig) = pkt.repr.atomic_ack_eth else {
        cx.stats.rx_unexpected += 1;
        return;
    };
    ack_to(qp, psn.sub(1));
    let f = qp.sq.wqes[i];
    let bytes = cx.fw.atomic_result_bytes(orig.original);
    // Requester scatter to CQE: the result (in the byte order it would have in
    // memory) kept for the atomic's CQE, the local buffer untouched.
    let in_cqe = req_in_cqe(qp, &f, bytes.len() as u64);
    let ok = wqe::reload(cx.fw, cx.io, &qp.cfg, &f.w, &mut qp.sq.rxd)
        && (in_cqe || mem::scatter(cx.fw, cx.io, &qp.sq.rxd.sges, 0, &bytes).is_ok());
    if !ok {
        fail_at(qp, cx, psn, Synd::of(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR));
        return;
    }
    if in_cqe {
        hold_for_cqe(qp, &f, &bytes);
    }
    let fl = &mut qp.sq.wqes[i];
    fl.resp_pkts = 1;
    fl.done = true;
    if fl.counted {
        fl.counted = false;
        qp.sq.reads_out = qp.sq.reads_out.saturating_sub(1);
    }
    if psn.next().distance(qp.sq.una) > 0 {
        qp.sq.una = psn.next();
    }
    progress(qp, cx.now);
    complete_head(qp, cx);
    requester::pump(qp, cx);
}

//! The UC transport: unreliable connected SEND and RDMA WRITE (with and without
//! immediate), no acknowledgements, no retransmission.
//!
//! Facts (IBTA Vol. 1 §9.7-9.8 for the unreliable connected service as
//! `shared/reference/rocev2-wire.md` §3-4 summarises it; Linux rxe `check_psn` /
//! `check_op_seq` for UC):
//!
//! * **Opcodes**: UC has the SEND (0x20-0x25) and RDMA WRITE (0x26-0x2b) families
//!   only; a message of `len` bytes uses `max(1, ceil(len / PMTU))` packets, FIRST and
//!   MIDDLE exactly one PMTU, the RETH on WRITE FIRST/ONLY, the immediate on the
//!   LAST/ONLY packet, exactly as RC. READ and atomics do not exist on UC: a send WQE
//!   with one (which the driver refuses to post) completes with a local QP operation
//!   error.
//! * **Requester**: every fetched WQE is transmitted at once, all its packets, with
//!   no window and no AckReq; it completes (a CQE when signaled) as soon as its last
//!   packet is on the wire. Nothing is kept for retransmission.
//! * **Responder**: tracks the expected PSN. A packet ahead of it means packets were
//!   lost: the message in progress is dropped, the expected PSN moves past the
//!   packet, and packets that continue no message (MIDDLE/LAST after a loss) are
//!   dropped until the next FIRST/ONLY starts a new message. A packet behind it (a
//!   duplicate) is dropped. So a lost packet loses the message it belongs to and only
//!   that one. Nothing is NAKed and the QP stays in its state for remote-side
//!   problems (a WRITE to a bad rkey, to a QP without remote write, a SEND with no
//!   receive WQE posted: the message is dropped and counted,
//!   [`DataPathStats::uc_msgs_dropped`](crate::engine::DataPathStats)).
//! * **Receive WQEs**: a SEND consumes one at its first packet, a WRITE with
//!   immediate at its last; a SEND dropped half-way keeps its WQE, which the next
//!   message reuses from its first byte (as rxe does: the WQE leaves the queue only
//!   when it completes), so a lost message costs no receive WQE. A message longer
//!   than the WQE, or a WQE that cannot be used, completes the WQE in error and moves
//!   the QP to the error state (a local error of the responder).

use ferroverbs_hw::control::qp::QpcState;
use ferroverbs_hw::datapath::cqe::{
    MLX5_CQE_RESP_SEND, MLX5_CQE_RESP_SEND_IMM, MLX5_CQE_RESP_WR_IMM,
    MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
    MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
};

use crate::engine::cq::CqeKind;
use crate::engine::mem::{self, Need};
use crate::engine::recv::{self, TakeError};
use crate::engine::wqe::{self, Op, RecvError, WqeError};
use crate::engine::{Ctx, Flight, InMsg, Pkt, QpRt, Synd};
use crate::wire::opcode::{Operation, Position};
use crate::wire::psn::PsnClass;
use crate::wire::{immdt, reth, Opcode, RoceRepr};

use super::{bth, send_packet};

/// 16-bit SQ counters.
const MASK16: u32 = 0xffff;

// ------------------------------------------------------------------------ requester

/// Fetches and transmits every send WQE posted to the UC QP `qp`, completing each
/// when its last packet is sent.
pub fn pump(qp: &mut QpRt, cx: &mut Ctx) {
    if qp.state != QpcState::Rts || qp.cfg.sq_size == 0 {
        return;
    }
    let Ok(db) = cx.io.read_be32(qp.cfg.dbr + 4) else {
        return;
    };
    while qp.state == QpcState::Rts {
        let avail = (db.wrapping_sub(qp.sq.fetched) & MASK16).min(qp.cfg.sq_size);
        if avail == 0 {
            break;
        }
        let w = wqe::parse_send(cx.fw, cx.io, &qp.cfg, qp.sq.fetched, avail, &mut qp.sq.txd);
        cx.stats.wqes += 1;
        qp.sq.fetched = qp.sq.fetched.wrapping_add(w.wqebbs);
        let pmtu = u64::from(qp.cfg.pmtu);
        let mut err = w.error;
        let mut umr_err = None;
        if err.is_none() {
            match w.op {
                Some(Op::Nop) => {}
                // A memory window bind or local invalidation, executed in send-queue
                // order (`Firmware::umr`), as on RC.
                Some(Op::Umr) => {
                    if let Err(s) = cx.fw.umr(qp.cfg.pd, qp.cfg.qpn, false, &w.umr()) {
                        err = Some(WqeError::QpOp);
                        umr_err = Some(s);
                    }
                }
                Some(Op::Send { .. } | Op::Write { .. }) if qp.cfg.path.is_some() && pmtu > 0 => {}
                // READ/atomics (not UC operations) or no usable path.
                _ => err = Some(WqeError::QpOp),
            }
        }
        let npsn = match (err, w.op) {
            (None, Some(Op::Send { .. } | Op::Write { .. })) => {
                w.len.div_ceil(pmtu).clamp(1, u64::from(u32::MAX)) as u32
            }
            _ => 0,
        };
        let mut f = Flight {
            w,
            first_psn: qp.sq.next_psn,
            npsn,
            sent: 0,
            resp_pkts: 0,
            got: 0,
            done: false,
            counted: false,
            err: umr_err.map(Synd::of).or(err.map(Synd::of_wqe)),
        };
        if let Some(s) = f.err {
            return fail(qp, cx, &f, s);
        }
        while f.sent < f.npsn {
            if transmit(qp, cx, &f).is_err() {
                return fail(qp, cx, &f, Synd::of_wqe(WqeError::Prot));
            }
            f.sent += 1;
        }
        qp.sq.next_psn = qp.sq.next_psn.add(npsn);
        qp.sq.una = qp.sq.next_psn;
        qp.sq.psn_hi = qp.sq.next_psn;
        if f.w.signaled {
            let c = qp.req_completion(&f, CqeKind::Req { sop: f.w.opcode }, cx.now);
            if !cx.post_cqe(qp.cfg.cqn_snd, &c) {
                return qp.to_error(cx);
            }
        }
    }
}

/// Completes `f` with `s` and moves the QP to the error state (flushing the rest).
fn fail(qp: &mut QpRt, cx: &mut Ctx, f: &Flight, s: Synd) {
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

fn opcode(op: Op, pos: Position) -> Opcode {
    use Opcode::*;
    match (op, pos) {
        (Op::Send { .. }, Position::First) => UcSendFirst,
        (Op::Send { .. }, Position::Middle) => UcSendMiddle,
        (Op::Send { imm: false }, Position::Last) => UcSendLast,
        (Op::Send { imm: true }, Position::Last) => UcSendLastWithImmediate,
        (Op::Send { imm: false }, Position::Only) => UcSendOnly,
        (Op::Send { imm: true }, Position::Only) => UcSendOnlyWithImmediate,
        (_, Position::First) => UcRdmaWriteFirst,
        (_, Position::Middle) => UcRdmaWriteMiddle,
        (Op::Write { imm: true }, Position::Last) => UcRdmaWriteLastWithImmediate,
        (_, Position::Last) => UcRdmaWriteLast,
        (Op::Write { imm: true }, Position::Only) => UcRdmaWriteOnlyWithImmediate,
        (_, Position::Only) => UcRdmaWriteOnly,
    }
}

/// Transmits packet `f.sent` of the SEND/WRITE `f`.
fn transmit(qp: &mut QpRt, cx: &mut Ctx, f: &Flight) -> Result<(), super::TxError> {
    let (Some(path), Some(op)) = (qp.cfg.path, f.w.op) else {
        return Err(super::TxError::Build);
    };
    let (Op::Send { imm } | Op::Write { imm }) = op else {
        return Err(super::TxError::Build);
    };
    let pmtu = u64::from(qp.cfg.pmtu);
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
    let mut b = bth(opcode(op, pos), qp.cfg.remote_qpn, f.first_psn.add(k));
    b.solicited = last && f.w.solicited && (matches!(op, Op::Send { .. }) || imm);
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
    let data = &qp.sq.txd;
    let inline = f.w.inline;
    send_packet(cx, &path, &roce, plen, |fw, io, dst| {
        data.gather(fw, io, inline, off, dst)
    })
}

// ------------------------------------------------------------------------ responder

/// Handles a UC request packet for `qp`.
pub fn on_request(qp: &mut QpRt, cx: &mut Ctx, pkt: &Pkt) {
    if !matches!(qp.state, QpcState::Rtr | QpcState::Rts | QpcState::Sqd) {
        cx.stats.rx_bad_state += 1;
        return;
    }
    let op = pkt.repr.opcode();
    let pos = op.position();
    let operation = op.operation();
    let psn = pkt.repr.bth.psn;
    match psn.classify(qp.resp.epsn) {
        PsnClass::Expected => {}
        PsnClass::Duplicate => {
            cx.stats.rx_duplicates += 1;
            return;
        }
        // Packets were lost: whatever message was in progress is gone.
        PsnClass::Ahead => abort(qp, cx),
    }
    qp.resp.epsn = psn.next();
    let in_seq = match qp.resp.cur {
        InMsg::None => pos.starts_message(),
        InMsg::Send => operation == Operation::Send && !pos.starts_message(),
        InMsg::Write { .. } => operation == Operation::RdmaWrite && !pos.starts_message(),
    };
    if !in_seq {
        // A new message interrupts an unfinished one, or a continuation belongs to a
        // message already dropped: resynchronize on FIRST/ONLY.
        abort(qp, cx);
        if !pos.starts_message() {
            cx.stats.uc_pkts_dropped += 1;
            return;
        }
    }
    if !op.payload().allows(pkt.payload.len(), qp.cfg.pmtu as usize) {
        return drop_msg(qp, cx);
    }
    match operation {
        Operation::Send => on_send(qp, cx, pkt, pos),
        Operation::RdmaWrite => on_write(qp, cx, pkt, pos),
        _ => drop_msg(qp, cx),
    }
}

/// Drops the message in progress, if any (its receive WQE stays for the next one).
fn abort(qp: &mut QpRt, cx: &mut Ctx) {
    if qp.resp.cur != InMsg::None {
        qp.resp.cur = InMsg::None;
        cx.stats.uc_msgs_dropped += 1;
    }
}

/// Drops the message the current packet belongs to: this packet and, until the next
/// FIRST/ONLY, the rest.
fn drop_msg(qp: &mut QpRt, cx: &mut Ctx) {
    qp.resp.cur = InMsg::None;
    cx.stats.uc_msgs_dropped += 1;
    cx.stats.uc_pkts_dropped += 1;
}

/// Completes the active receive WQE with `syndrome` and moves the QP to error.
fn recv_error(qp: &mut QpRt, cx: &mut Ctx, syndrome: u8) {
    if qp.resp.rwqe.active {
        qp.resp.rwqe.active = false;
        let s = Synd::of(syndrome);
        let c = qp.resp_completion(
            CqeKind::Err {
                req: false,
                syndrome: s.syndrome,
                vendor: s.vendor,
                sop: 0,
            },
            qp.resp.rwqe.counter,
            qp.resp.rwqe.got,
            cx.now,
        );
        cx.post_cqe(qp.cfg.cqn_rcv, &c);
    }
    qp.resp.cur = InMsg::None;
    qp.to_error(cx);
}

/// Makes sure a receive WQE is active (reusing one a dropped SEND left), reading its
/// scatter list if `scatter`. `false`: none (the message is dropped) or unusable (the
/// QP went to error).
fn need_rwqe(qp: &mut QpRt, cx: &mut Ctx, scatter: bool) -> bool {
    if qp.resp.rwqe.active {
        qp.resp.rwqe.got = 0;
        return true;
    }
    match recv::take(qp, cx, scatter) {
        Ok(()) => true,
        Err(TakeError::Empty) => {
            drop_msg(qp, cx);
            false
        }
        Err(TakeError::Bad(e)) => {
            let synd = match e {
                RecvError::Prot => MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
                RecvError::Unreadable => MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
            };
            recv_error(qp, cx, synd);
            false
        }
    }
}

fn on_send(qp: &mut QpRt, cx: &mut Ctx, pkt: &Pkt, pos: Position) {
    if pos.starts_message() && !need_rwqe(qp, cx, true) {
        return;
    }
    let n = pkt.payload.len() as u64;
    let rw = &qp.resp.rwqe;
    if rw.got + n > rw.total {
        return recv_error(qp, cx, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
    }
    // Scatter to CQE (`qpc.cs_res`), as on RC: a small one-packet message goes in its CQE.
    let in_cqe = pos == Position::Only && qp.cfg.in_cqe(n);
    if !in_cqe && mem::scatter(cx.fw, cx.io, &rw.sges, rw.got, pkt.payload).is_err() {
        return recv_error(qp, cx, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
    }
    qp.resp.rwqe.got += n;
    if !pos.ends_message() {
        qp.resp.cur = InMsg::Send;
        return;
    }
    qp.resp.cur = InMsg::None;
    qp.resp.msn = qp.resp.msn.wrapping_add(1) & 0x00ff_ffff;
    qp.resp.rwqe.active = false;
    let imm = pkt.repr.immdt.map(|i| i.immediate);
    let opcode = if imm.is_some() {
        MLX5_CQE_RESP_SEND_IMM
    } else {
        MLX5_CQE_RESP_SEND
    };
    let mut c = qp.resp_completion(
        CqeKind::Resp { opcode },
        qp.resp.rwqe.counter,
        qp.resp.rwqe.got,
        cx.now,
    );
    c.imm = imm.unwrap_or(0);
    c.se = pkt.repr.bth.solicited;
    let written = if in_cqe {
        cx.post_cqe_scattered(qp.cfg.cqn_rcv, &c, pkt.payload)
    } else {
        cx.post_cqe(qp.cfg.cqn_rcv, &c)
    };
    if !written {
        qp.to_error(cx);
    }
}

fn on_write(qp: &mut QpRt, cx: &mut Ctx, pkt: &Pkt, pos: Position) {
    let (va, rkey, left, total) = match qp.resp.cur {
        InMsg::Write {
            va,
            rkey,
            left,
            total,
        } => (va, rkey, left, total),
        _ => {
            let Some(r) = pkt.repr.reth else {
                return drop_msg(qp, cx);
            };
            let len = u64::from(r.dma_length);
            let ok = qp.cfg.rwe
                && (len == 0
                    || mem::check(
                        cx.fw,
                        r.rkey,
                        qp.cfg.pd,
                        Need::RemoteWrite,
                        r.virtual_address,
                        len,
                    )
                    .is_ok());
            if !ok {
                return drop_msg(qp, cx);
            }
            (r.virtual_address, r.rkey, len, len)
        }
    };
    let n = pkt.payload.len() as u64;
    let last = pos.ends_message();
    if n > left || (last && n != left) {
        return drop_msg(qp, cx);
    }
    if n > 0 && mem::write(cx.fw, cx.io, rkey, va, pkt.payload).is_err() {
        return drop_msg(qp, cx);
    }
    if !last {
        qp.resp.cur = InMsg::Write {
            va: va + n,
            rkey,
            left: left - n,
            total,
        };
        return;
    }
    qp.resp.cur = InMsg::None;
    qp.resp.msn = qp.resp.msn.wrapping_add(1) & 0x00ff_ffff;
    let Some(imm) = pkt.repr.immdt.map(|i| i.immediate) else {
        return;
    };
    if !need_rwqe(qp, cx, false) {
        return;
    }
    qp.resp.rwqe.active = false;
    let mut c = qp.resp_completion(
        CqeKind::Resp {
            opcode: MLX5_CQE_RESP_WR_IMM,
        },
        qp.resp.rwqe.counter,
        total,
        cx.now,
    );
    c.imm = imm;
    c.se = pkt.repr.bth.solicited;
    if !cx.post_cqe(qp.cfg.cqn_rcv, &c) {
        qp.to_error(cx);
    }
}

//! The RC responder: executes request packets in PSN order.
//!
//! SEND consumes a receive WQE at its first packet (none posted: RNR NAK) and
//! completes it at its last; RDMA WRITE validates the rkey over the whole message at
//! its first packet and places each packet's payload; WRITE with immediate consumes a
//! receive WQE at its last packet; RDMA READ validates and answers with
//! `max(1, ceil(len / PMTU))` response packets; atomics (8-byte aligned) are executed on
//! the 8 bytes of host memory in the host's byte order (as configured with
//! HOST_ENDIANNESS) and answered with the original value. Every device's packets are
//! processed under its lock, so an atomic is atomic with respect to every other atomic
//! of that device (`IBV_ATOMIC_HCA`). Zero-length RDMA operations check no rkey.

use ferroverbs_hw::datapath::cqe::{
    MLX5_CQE_RESP_SEND, MLX5_CQE_RESP_SEND_IMM, MLX5_CQE_RESP_SEND_INV, MLX5_CQE_RESP_WR_IMM,
    MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
    MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
};
use ferroverbs_hw::datapath::eqe::{
    MLX5_EVENT_TYPE_WQ_ACCESS_ERROR, MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR,
};

use crate::engine::cq::{Completion, CqeKind};
use crate::engine::mem::{self, Need};
use crate::engine::recv::{self, TakeError};
use crate::engine::wqe::RecvError;
use crate::engine::{Ctx, InMsg, Pkt, QpRt, Resource, Synd};
use crate::wire::aeth::{self, NakCode, Syndrome};
use crate::wire::bth::Repr as BthRepr;
use crate::wire::frame::RcSendOnly;
use crate::wire::opcode::{Operation, Position};
use crate::wire::psn::PsnClass;
use crate::wire::{atomic_ack_eth, Opcode, Psn, RoceRepr};
use ferroverbs_hw::control::qp::QpcState;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{bth, send_frame, send_packet};

/// 24-bit MSN.
const MASK24: u32 = 0x00ff_ffff;

/// While set, every request takes the general path ([`set_general_path_only`]).
static GENERAL_ONLY: AtomicBool = AtomicBool::new(false);

/// Test hook: with `true`, the responder of every device in this process handles the
/// one-packet SENDs on the general path too (as every other request), so that a test
/// can run the same traffic both ways and compare what the two paths did (CQE bytes,
/// memory, counters, packets). Not for use outside tests.
#[doc(hidden)]
pub fn set_general_path_only(on: bool) {
    GENERAL_ONLY.store(on, Ordering::Relaxed);
}

/// Handles a request packet for `qp`.
pub fn on_request(qp: &mut QpRt, cx: &mut Ctx, pkt: &Pkt) {
    if qp.cfg.st == crate::firmware::ServiceType::Uc {
        return super::uc::on_request(qp, cx, pkt);
    }
    if !matches!(qp.state, QpcState::Rtr | QpcState::Rts | QpcState::Sqd) {
        cx.stats.rx_bad_state += 1;
        return;
    }
    let psn = pkt.repr.bth.psn;
    // The common request: a one-packet SEND (with or without immediate) at the
    // expected PSN, between messages, to a QP with its own RQ, its payload within the
    // path MTU (the opcode's payload rule). Everything else, and every packet that
    // fails a check there, takes the general path or its error handling.
    if matches!(
        pkt.repr.bth.opcode,
        Opcode::RcSendOnly | Opcode::RcSendOnlyWithImmediate
    ) {
        let one = One {
            bth: pkt.repr.bth,
            immediate: pkt.repr.immdt.map(|i| i.immediate),
            payload: pkt.payload,
            sip: pkt.sip,
        };
        if fast_send_only(qp, &one) {
            qp.resp.nak_sent = false;
            cx.stats.rx_send_only_fast += 1;
            return send_only(qp, cx, &one);
        }
    }
    match psn.classify(qp.resp.epsn) {
        PsnClass::Expected => {
            qp.resp.nak_sent = false;
            execute(qp, cx, pkt);
        }
        PsnClass::Duplicate => {
            cx.stats.rx_duplicates += 1;
            cx.fw.q_counts(qp.cfg.counter_set).duplicate_request += 1;
            duplicate(qp, cx, pkt);
        }
        PsnClass::Ahead => {
            cx.fw.q_counts(qp.cfg.counter_set).out_of_sequence += 1;
            if !qp.resp.nak_sent {
                qp.resp.nak_sent = true;
                let e = qp.resp.epsn;
                nak(qp, cx, e, NakCode::PsnSequenceError);
            }
        }
    }
}

/// A one-packet RC SEND (SEND_ONLY or SEND_ONLY_WITH_IMMEDIATE): the fields
/// [`send_only`] reads.
struct One<'a> {
    bth: BthRepr,
    immediate: Option<u32>,
    payload: &'a [u8],
    sip: Ipv4Addr,
}

impl One<'_> {
    /// The packet as the general path takes it (with `roce` holding its headers).
    fn pkt<'r>(&'r self, roce: &'r mut RoceRepr) -> Pkt<'r> {
        *roce = RoceRepr::new(self.bth);
        roce.immdt = self
            .immediate
            .map(|immediate| crate::wire::immdt::Repr { immediate });
        Pkt {
            repr: roce,
            payload: self.payload,
            sip: self.sip,
        }
    }
}

/// Whether a one-packet SEND to `qp` (an RC QP) takes [`send_only`]: the QP receives
/// (RTR, RTS or SQD), the PSN is the expected one, no message is in progress, the QP
/// has its own RQ (not an SRQ), the payload is within the path MTU (the opcode's
/// payload rule) and, if it goes in its CQE (scatter to CQE), within the 32 bytes of
/// a 64-byte CQE, and the test hook does not force the general path.
#[inline(always)]
fn fast_send_only(qp: &QpRt, one: &One) -> bool {
    matches!(qp.state, QpcState::Rtr | QpcState::Rts | QpcState::Sqd)
        && one.bth.psn == qp.resp.epsn
        && qp.resp.cur == InMsg::None
        && qp.cfg.srqn.is_none()
        && one.payload.len() <= qp.cfg.pmtu as usize
        && (one.payload.len() <= 32 || !qp.cfg.in_cqe(one.payload.len() as u64))
        && !GENERAL_ONLY.load(Ordering::Relaxed)
}

/// [`on_request`] of a one-packet RC SEND read by
/// [`parse_rc_send_only`](crate::wire::frame::parse_rc_send_only), for an RC QP:
/// `send_only` when `fast_send_only` holds, else [`on_request`] with the packet's
/// headers (the same handling as a SEND the general parser read).
#[inline(always)]
pub fn on_send_only(qp: &mut QpRt, cx: &mut Ctx, s: &RcSendOnly) {
    let one = One {
        bth: s.bth,
        immediate: s.immediate,
        payload: s.payload,
        sip: s.src_addr,
    };
    if fast_send_only(qp, &one) {
        qp.resp.nak_sent = false;
        cx.stats.rx_send_only_fast += 1;
        return send_only(qp, cx, &one);
    }
    let mut roce = RoceRepr::new(s.bth);
    on_request(qp, cx, &one.pkt(&mut roce));
}

fn execute(qp: &mut QpRt, cx: &mut Ctx, pkt: &Pkt) {
    let op = pkt.repr.opcode();
    let pos = op.position();
    let operation = op.operation();
    let psn = pkt.repr.bth.psn;
    // The opcode must continue the message in progress, or start one.
    let in_seq = match qp.resp.cur {
        InMsg::None => pos.starts_message(),
        InMsg::Send => operation == Operation::Send && !pos.starts_message(),
        InMsg::Write { .. } => operation == Operation::RdmaWrite && !pos.starts_message(),
    };
    if !in_seq || !op.payload().allows(pkt.payload.len(), qp.cfg.pmtu as usize) {
        return class_c(qp, cx, psn, NakCode::InvalidRequest);
    }
    match operation {
        Operation::Send => on_send(qp, cx, pkt, pos),
        Operation::RdmaWrite if qp.cfg.rwe => on_write(qp, cx, pkt, pos),
        Operation::RdmaReadRequest if qp.cfg.rre => on_read(qp, cx, pkt),
        Operation::CompareSwap | Operation::FetchAdd if qp.cfg.rae => on_atomic(qp, cx, pkt),
        // An operation the QP does not enable.
        _ => class_c(qp, cx, psn, NakCode::InvalidRequest),
    }
}

/// The ACK credit code for the receive WQEs posted: the largest code advertising at
/// most that many (unlimited without an RQ).
fn credits(qp: &QpRt, cx: &Ctx) -> u8 {
    if qp.cfg.rq_size == 0 {
        return aeth::CREDITS_UNLIMITED;
    }
    credit_code(qp.rq_posted(cx.io))
}

/// The largest credit code advertising at most `n` receive WQEs. The counts grow with
/// the code, so a binary search finds it (code 0 advertises 0).
fn credit_code(n: u32) -> u8 {
    let (mut lo, mut hi) = (0u8, aeth::CREDITS_UNLIMITED);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if aeth::credit_count(mid).is_some_and(|v| v <= n) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

fn send_ack(qp: &QpRt, cx: &mut Ctx, psn: Psn, syndrome: Syndrome) {
    let Some(path) = qp.cfg.path else { return };
    let mut roce = RoceRepr::new(bth(Opcode::RcAcknowledge, qp.cfg.remote_qpn, psn));
    roce.aeth = Some(aeth::Repr {
        syndrome,
        msn: qp.resp.msn & MASK24,
    });
    let _ = match &qp.cfg.encap {
        Some(e) => send_frame(cx, e, &roce, 0, |_, _, _| Ok(())),
        None => send_packet(cx, &path, &roce, 0, |_, _, _| Ok(())),
    };
}

/// Sends the ACK the QP owes, if any (the latest PSN asked for: ACKs coalesce).
pub fn flush_ack(qp: &mut QpRt, cx: &mut Ctx) {
    let due = qp.resp.ack_due.take();
    if qp.state == QpcState::Err {
        return;
    }
    if let Some(psn) = due {
        cx.stats.acks += 1;
        let credits = credits(qp, cx);
        send_ack(qp, cx, psn, Syndrome::Ack { credits });
    }
}

/// Owes an ACK for `psn`; it goes out with the next response of this QP or when the
/// device finishes its batch of received packets, covering every PSN before it.
fn ack(qp: &mut QpRt, psn: Psn) {
    qp.resp.ack_due = Some(psn);
}

fn nak(qp: &mut QpRt, cx: &mut Ctx, psn: Psn, code: NakCode) {
    flush_ack(qp, cx);
    cx.stats.naks += 1;
    send_ack(qp, cx, psn, Syndrome::Nak(code));
}

fn rnr_nak(qp: &mut QpRt, cx: &mut Ctx, psn: Psn) {
    flush_ack(qp, cx);
    cx.stats.rnr_naks += 1;
    cx.fw.q_counts(qp.cfg.counter_set).out_of_buffer += 1;
    send_ack(
        qp,
        cx,
        psn,
        Syndrome::RnrNak {
            timer: qp.cfg.min_rnr_nak & aeth::MAX_CODE,
        },
    );
}

/// A class C error with no receive WQE to report it on: NAK, the QP to error, and an
/// affiliated asynchronous event (invalid request / access violation work queue error).
fn class_c(qp: &mut QpRt, cx: &mut Ctx, psn: Psn, code: NakCode) {
    nak(qp, cx, psn, code);
    let ty = match code {
        NakCode::RemoteAccessError => MLX5_EVENT_TYPE_WQ_ACCESS_ERROR,
        _ => MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR,
    };
    // struct mlx5_eqe_qp_srq: 20 reserved bytes, type (0 = QP), 3 reserved, QPN.
    let mut data = [0u8; 28];
    data[24..].copy_from_slice(&(qp.cfg.qpn & MASK24).to_be_bytes());
    if let Some(v) = cx.fw.post_event(cx.io, ty, 0, &data) {
        cx.irqs.signal(v);
    }
    qp.to_error(cx);
}

/// Completes the active receive WQE in error, NAKs, and moves the QP to error.
fn recv_error(qp: &mut QpRt, cx: &mut Ctx, psn: Psn, syndrome: u8, code: NakCode) {
    let rw = &mut qp.resp.rwqe;
    if rw.active {
        rw.active = false;
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
    nak(qp, cx, psn, code);
    qp.to_error(cx);
}

/// A CQE's 32-bit byte count of a message of `n` bytes (saturated, as
/// [`QpRt::resp_completion`] does).
fn byte_cnt(n: u64) -> u32 {
    n.min(u64::from(u32::MAX)) as u32
}

/// Takes the next receive WQE. `Ok(false)`: none posted (RNR).
fn take_rwqe(qp: &mut QpRt, cx: &mut Ctx, psn: Psn, scatter: bool) -> Result<bool, ()> {
    match recv::take(qp, cx, scatter) {
        Ok(()) => Ok(true),
        Err(e) => {
            not_taken(qp, cx, psn, e);
            if e == TakeError::Empty {
                Ok(false)
            } else {
                Err(())
            }
        }
    }
}

/// What [`take_rwqe`] does when no receive WQE could be taken: an RNR NAK when none
/// is posted, else the WQE completes in error.
fn not_taken(qp: &mut QpRt, cx: &mut Ctx, psn: Psn, e: TakeError) {
    match e {
        TakeError::Empty => rnr_nak(qp, cx, psn),
        TakeError::Bad(e) => {
            let synd = match e {
                RecvError::Prot => MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
                RecvError::Unreadable => MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
            };
            recv_error(qp, cx, psn, synd, NakCode::RemoteOperationalError);
        }
    }
}

/// A SEND_ONLY or SEND_ONLY_WITH_IMMEDIATE at the expected PSN, between messages, on
/// a QP with its own RQ, with at most a path MTU of payload ([`on_request`] checked
/// all that): what [`execute`] and [`on_send`] do for it, in fewer steps. The receive
/// WQE is taken by [`recv::take_rq`]; when it has one scatter entry, that entry's
/// MKEY (looked up and checked once, as for any WQE) places the payload, and the CQE
/// comes from the QP's template. A WQE with another shape continues on the general
/// path ([`send_data`]). Same checks (local length, the key's PD, access and bounds,
/// the translation), same errors, same CQE bytes, same ACK.
///
/// Its host accesses (the RQ doorbell record when the known WQEs are used up, the
/// receive WQE, the payload, the CQE) go through one hold of the IOMMU's table
/// ([`Iommu::hold`](crate::iommu::Iommu::hold)): the same checks and effects as the
/// IOMMU's own accessors, one lock. The hold is dropped before anything that uses the
/// IOMMU's own accessors: every error path (RNR NAK, error CQE, NAK, event), the
/// general SEND path for another WQE shape, and a CQE that needs more than its write
/// ([`CqRt::try_push_resp`](crate::engine::cq::CqRt::try_push_resp) refused it
/// before doing anything: [`Ctx::post_resp_cqe`] then writes it).
#[inline(never)]
fn send_only(qp: &mut QpRt, cx: &mut Ctx, one: &One) {
    let psn = one.bth.psn;
    let io = cx.io;
    let held = io.hold();
    let (sge, k) = match recv::take_rq(qp, cx.fw, &held) {
        Ok(Some(one)) => one,
        Ok(None) => {
            drop(held);
            let mut roce = RoceRepr::new(one.bth);
            return send_data(qp, cx, &one.pkt(&mut roce), Position::Only);
        }
        Err(e) => {
            drop(held);
            return not_taken(qp, cx, psn, e);
        }
    };
    let n = one.payload.len();
    // `on_send`'s length check with nothing received yet: `0 + n > total`.
    if n as u64 > sge.len {
        drop(held);
        return recv_error(
            qp,
            cx,
            psn,
            MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR,
            NakCode::InvalidRequest,
        );
    }
    // Scatter to CQE (`qpc.cs_res`), as `send_data`: the message goes in its CQE, the
    // receive buffer untouched (its entry was checked all the same).
    let in_cqe = qp.cfg.in_cqe(n as u64);
    // `mem::scatter_cached` of a one-entry list at offset 0: the whole payload at the
    // entry's address (nothing for an empty payload).
    let win = &mut qp.resp.data_win;
    if !in_cqe && mem::write_key_cached(k, &held, win, sge.addr, one.payload).is_err() {
        drop(held);
        return recv_error(
            qp,
            cx,
            psn,
            MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
            NakCode::RemoteOperationalError,
        );
    }
    let r = &mut qp.resp;
    r.rwqe.got = n as u64;
    r.epsn = psn.next();
    r.msn = r.msn.wrapping_add(1) & MASK24;
    r.rwqe.active = false;
    let (opcode, imm) = match one.immediate {
        Some(i) => (MLX5_CQE_RESP_SEND_IMM, i),
        None => (MLX5_CQE_RESP_SEND, 0),
    };
    let counter = r.rwqe.counter as u16;
    let se = one.bth.solicited;
    let cfg = &qp.cfg;
    let len = byte_cnt(n as u64);
    let tpl = &cfg.resp_cqe;
    let written = match cfg.cqn_rcv.and_then(|cqn| cx.cqs.get_mut(cqn)) {
        Some(cq) if in_cqe => {
            cq.try_push_resp_scattered(&held, tpl, opcode, se, counter, imm, cx.now, one.payload)
        }
        Some(cq) => cq.try_push_resp(&held, tpl, opcode, se, counter, len, imm, cx.now),
        None => false,
    };
    drop(held);
    if written {
        cx.stats.cqes += 1;
    } else if in_cqe {
        // What `send_data` writes: the general push, with the message.
        let c = qp.resp_completion(
            CqeKind::Resp { opcode },
            u32::from(counter),
            n as u64,
            cx.now,
        );
        let c = Completion { imm, se, ..c };
        if !cx.post_cqe_scattered(qp.cfg.cqn_rcv, &c, one.payload) {
            return qp.to_error(cx);
        }
    } else if !cx.post_resp_cqe(cfg, opcode, se, counter, len, imm) {
        return qp.to_error(cx);
    }
    if one.bth.ack_req {
        ack(qp, psn);
    }
}

fn on_send(qp: &mut QpRt, cx: &mut Ctx, pkt: &Pkt, pos: Position) {
    let psn = pkt.repr.bth.psn;
    if pos.starts_message() {
        match take_rwqe(qp, cx, psn, true) {
            Ok(true) => {}
            Ok(false) | Err(()) => return,
        }
    }
    send_data(qp, cx, pkt, pos);
}

/// A SEND packet with its receive WQE taken: places the payload, completes the WQE
/// at the message's last packet.
fn send_data(qp: &mut QpRt, cx: &mut Ctx, pkt: &Pkt, pos: Position) {
    let psn = pkt.repr.bth.psn;
    let n = pkt.payload.len() as u64;
    let rw = &qp.resp.rwqe;
    if rw.got + n > rw.total {
        return recv_error(
            qp,
            cx,
            psn,
            MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR,
            NakCode::InvalidRequest,
        );
    }
    // Scatter to CQE (`qpc.cs_res`): a one-packet message small enough goes in its CQE,
    // the receive buffer untouched (software copies it there).
    let in_cqe = pos == Position::Only && qp.cfg.in_cqe(n);
    let win = &mut qp.resp.data_win;
    if !in_cqe && mem::scatter_cached(cx.fw, cx.io, win, &rw.sges, rw.got, pkt.payload).is_err() {
        return recv_error(
            qp,
            cx,
            psn,
            MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
            NakCode::RemoteOperationalError,
        );
    }
    qp.resp.rwqe.got += n;
    let inv = pkt.repr.ieth.map(|i| i.rkey);
    if let Some(rkey) = inv {
        // SEND with Invalidate: the R_Key of the IETH is invalidated when the message
        // completes (IBTA Vol. 1 §9.4.1.4), if it names a key of the QP's PD created
        // with remote invalidation enabled (`mkc.en_rinval`). Otherwise the request is
        // invalid: the receive completes in error and the requester is NAKed (invalid
        // request), the responder's QP going to error, as rxe does (`rxe_resp.c`,
        // RESPST_ERR_INVALIDATE_RKEY: IB_WC_REM_INV_REQ_ERR).
        if cx.fw.invalidate_remote(rkey, qp.cfg.pd).is_err() {
            cx.stats.rx_bad_invalidate += 1;
            return recv_error(
                qp,
                cx,
                psn,
                MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
                NakCode::InvalidRequest,
            );
        }
    }
    qp.resp.epsn = psn.next();
    if pos.ends_message() {
        qp.resp.cur = InMsg::None;
        qp.resp.msn = qp.resp.msn.wrapping_add(1) & MASK24;
        qp.resp.rwqe.active = false;
        // The CQE's `imm_inval_pkey` holds the immediate, or the invalidated R_Key
        // (`mlx5-datapath.md` §5: libmlx5 reads it as `invalidated_rkey`).
        let imm = pkt.repr.immdt.map(|i| i.immediate).or(inv);
        let opcode = match (pkt.repr.immdt, inv) {
            (Some(_), _) => MLX5_CQE_RESP_SEND_IMM,
            (None, Some(_)) => MLX5_CQE_RESP_SEND_INV,
            (None, None) => MLX5_CQE_RESP_SEND,
        };
        let rw = &qp.resp.rwqe;
        let written = if in_cqe {
            let c = qp.resp_completion(CqeKind::Resp { opcode }, rw.counter, rw.got, cx.now);
            let c = Completion {
                imm: imm.unwrap_or(0),
                se: pkt.repr.bth.solicited,
                ..c
            };
            cx.post_cqe_scattered(qp.cfg.cqn_rcv, &c, pkt.payload)
        } else {
            cx.post_resp_cqe(
                &qp.cfg,
                opcode,
                pkt.repr.bth.solicited,
                rw.counter as u16,
                byte_cnt(rw.got),
                imm.unwrap_or(0),
            )
        };
        if !written {
            return qp.to_error(cx);
        }
    } else {
        qp.resp.cur = InMsg::Send;
    }
    if pkt.repr.bth.ack_req {
        ack(qp, psn);
    }
}

fn on_write(qp: &mut QpRt, cx: &mut Ctx, pkt: &Pkt, pos: Position) {
    let psn = pkt.repr.bth.psn;
    cx.fw.q_counts(qp.cfg.counter_set).rx_write_requests += u64::from(pos.starts_message());
    let (va, rkey, left, total) = match qp.resp.cur {
        InMsg::Write {
            va,
            rkey,
            left,
            total,
        } => (va, rkey, left, total),
        _ => {
            let Some(r) = pkt.repr.reth else {
                return class_c(qp, cx, psn, NakCode::InvalidRequest);
            };
            let len = u64::from(r.dma_length);
            if len > 0
                && mem::check(
                    cx.fw,
                    r.rkey,
                    qp.cfg.pd,
                    Need::RemoteWrite,
                    r.virtual_address,
                    len,
                )
                .is_err()
            {
                return class_c(qp, cx, psn, NakCode::RemoteAccessError);
            }
            (r.virtual_address, r.rkey, len, len)
        }
    };
    let n = pkt.payload.len() as u64;
    let last = pos.ends_message();
    if n > left || (last && n != left) {
        return class_c(qp, cx, psn, NakCode::InvalidRequest);
    }
    let imm = pkt.repr.immdt.map(|i| i.immediate);
    if last && imm.is_some() {
        // The receive WQE is needed before any byte of this packet lands, so that a
        // retry after an RNR NAK finds memory as it was.
        match take_rwqe(qp, cx, psn, false) {
            Ok(true) => {}
            Ok(false) | Err(()) => return,
        }
    }
    let win = &mut qp.resp.data_win;
    if n > 0 && mem::write_cached(cx.fw, cx.io, win, rkey, va, pkt.payload).is_err() {
        return class_c(qp, cx, psn, NakCode::RemoteAccessError);
    }
    qp.resp.epsn = psn.next();
    if last {
        qp.resp.cur = InMsg::None;
        qp.resp.msn = qp.resp.msn.wrapping_add(1) & MASK24;
        if let Some(imm) = imm {
            qp.resp.rwqe.active = false;
            let written = cx.post_resp_cqe(
                &qp.cfg,
                MLX5_CQE_RESP_WR_IMM,
                pkt.repr.bth.solicited,
                qp.resp.rwqe.counter as u16,
                byte_cnt(total),
                imm,
            );
            if !written {
                return qp.to_error(cx);
            }
        }
    } else {
        qp.resp.cur = InMsg::Write {
            va: va + n,
            rkey,
            left: left - n,
            total,
        };
    }
    if pkt.repr.bth.ack_req {
        ack(qp, psn);
    }
}

/// Keeps a READ/atomic for replay to its duplicates: a ring of `max_dest_rd_atomic`
/// (`2^log_rra_max`) responder resources, the oldest overwritten first (rxe keeps as
/// many; a duplicate of a request no longer remembered is dropped, and the requester
/// times out).
fn remember(qp: &mut QpRt, r: Resource) {
    while qp.resp.res.len() >= qp.cfg.rra_max.max(1) as usize {
        qp.resp.res.pop_front();
    }
    qp.resp.res.push_back(r);
}

fn on_read(qp: &mut QpRt, cx: &mut Ctx, pkt: &Pkt) {
    let psn = pkt.repr.bth.psn;
    cx.fw.q_counts(qp.cfg.counter_set).rx_read_requests += 1;
    let Some(r) = pkt.repr.reth else {
        return class_c(qp, cx, psn, NakCode::InvalidRequest);
    };
    let len = u64::from(r.dma_length);
    if len > 0
        && mem::check(
            cx.fw,
            r.rkey,
            qp.cfg.pd,
            Need::RemoteRead,
            r.virtual_address,
            len,
        )
        .is_err()
    {
        return class_c(qp, cx, psn, NakCode::RemoteAccessError);
    }
    let pmtu = u64::from(qp.cfg.pmtu);
    let npsn = len.div_ceil(pmtu).max(1) as u32;
    // The MSN counts the READ once it is accepted, before its responses (C9-148).
    qp.resp.msn = qp.resp.msn.wrapping_add(1) & MASK24;
    qp.resp.epsn = psn.add(npsn);
    remember(
        qp,
        Resource::Read {
            psn,
            npsn,
            va: r.virtual_address,
            rkey: r.rkey,
            len,
        },
    );
    read_responses(qp, cx, psn, npsn, 0, r.virtual_address, r.rkey, len);
}

/// Sends responses `from..npsn` of a READ of `len` bytes at `va` whose first PSN is
/// `psn`.
#[allow(clippy::too_many_arguments)]
fn read_responses(
    qp: &QpRt,
    cx: &mut Ctx,
    psn: Psn,
    npsn: u32,
    from: u32,
    va: u64,
    rkey: u32,
    len: u64,
) {
    let Some(path) = qp.cfg.path else { return };
    let pmtu = u64::from(qp.cfg.pmtu);
    for k in from..npsn {
        let pos = if npsn == 1 {
            Position::Only
        } else if k == 0 {
            Position::First
        } else if k + 1 == npsn {
            Position::Last
        } else {
            Position::Middle
        };
        let opcode = match pos {
            Position::Only => Opcode::RcRdmaReadResponseOnly,
            Position::First => Opcode::RcRdmaReadResponseFirst,
            Position::Middle => Opcode::RcRdmaReadResponseMiddle,
            Position::Last => Opcode::RcRdmaReadResponseLast,
        };
        let off = u64::from(k) * pmtu;
        let n = pmtu.min(len - off) as usize;
        let mut roce = RoceRepr::new(bth(opcode, qp.cfg.remote_qpn, psn.add(k)));
        if pos != Position::Middle {
            roce.aeth = Some(aeth::Repr {
                syndrome: Syndrome::ACK,
                msn: qp.resp.msn,
            });
        }
        let sent = send_packet(cx, &path, &roce, n, |fw, io, dst| {
            mem::read(fw, io, rkey, va + off, dst)
        });
        if sent.is_err() {
            // Host memory vanished under the READ: no response goes out, and the
            // requester times out.
            break;
        }
        cx.stats.read_responses += 1;
    }
}

fn on_atomic(qp: &mut QpRt, cx: &mut Ctx, pkt: &Pkt) {
    let psn = pkt.repr.bth.psn;
    cx.fw.q_counts(qp.cfg.counter_set).rx_atomic_requests += 1;
    let Some(a) = pkt.repr.atomic_eth else {
        return class_c(qp, cx, psn, NakCode::InvalidRequest);
    };
    if a.virtual_address % 8 != 0 {
        return class_c(qp, cx, psn, NakCode::InvalidRequest);
    }
    if mem::check(
        cx.fw,
        a.rkey,
        qp.cfg.pd,
        Need::RemoteAtomic,
        a.virtual_address,
        8,
    )
    .is_err()
    {
        return class_c(qp, cx, psn, NakCode::RemoteAccessError);
    }
    let Ok(iova) = mem::translate8(cx.fw, a.rkey, a.virtual_address) else {
        return class_c(qp, cx, psn, NakCode::RemoteAccessError);
    };
    let little = cx.fw.host_endianness() == 0;
    let mut cur = [0u8; 8];
    if cx.io.read(iova, &mut cur).is_err() {
        return class_c(qp, cx, psn, NakCode::RemoteAccessError);
    }
    let orig = if little {
        u64::from_le_bytes(cur)
    } else {
        u64::from_be_bytes(cur)
    };
    let new = if pkt.repr.opcode() == Opcode::RcCompareSwap {
        if orig == a.compare {
            a.swap_add
        } else {
            orig
        }
    } else {
        orig.wrapping_add(a.swap_add)
    };
    if new != orig {
        let bytes = if little {
            new.to_le_bytes()
        } else {
            new.to_be_bytes()
        };
        if cx.io.write(iova, &bytes).is_err() {
            return class_c(qp, cx, psn, NakCode::RemoteAccessError);
        }
    }
    cx.stats.atomics += 1;
    qp.resp.msn = qp.resp.msn.wrapping_add(1) & MASK24;
    qp.resp.epsn = psn.next();
    remember(qp, Resource::Atomic { psn, orig });
    atomic_ack(qp, cx, psn, orig);
}

fn atomic_ack(qp: &mut QpRt, cx: &mut Ctx, psn: Psn, orig: u64) {
    flush_ack(qp, cx);
    let Some(path) = qp.cfg.path else { return };
    let mut roce = RoceRepr::new(bth(Opcode::RcAtomicAcknowledge, qp.cfg.remote_qpn, psn));
    roce.aeth = Some(aeth::Repr {
        syndrome: Syndrome::ACK,
        msn: qp.resp.msn,
    });
    roce.atomic_ack_eth = Some(atomic_ack_eth::Repr { original: orig });
    let _ = send_packet(cx, &path, &roce, 0, |_, _, _| Ok(()));
}

/// A request whose PSN was already executed.
fn duplicate(qp: &mut QpRt, cx: &mut Ctx, pkt: &Pkt) {
    let psn = pkt.repr.bth.psn;
    match pkt.repr.opcode().operation() {
        Operation::Send | Operation::RdmaWrite => {
            // Acknowledge everything executed so far, now; do not execute again.
            let last = qp.resp.epsn.sub(1);
            ack(qp, last);
            flush_ack(qp, cx);
        }
        Operation::RdmaReadRequest => {
            let found = qp.resp.res.iter().rev().find_map(|r| match *r {
                Resource::Read {
                    psn: p,
                    npsn,
                    va,
                    rkey,
                    len,
                } if {
                    let d = psn.distance(p);
                    d >= 0 && (d as u32) < npsn
                } =>
                {
                    Some((p, npsn, va, rkey, len))
                }
                _ => None,
            });
            if let Some((p, npsn, va, rkey, len)) = found {
                let from = psn.distance(p) as u32;
                read_responses(qp, cx, p, npsn, from, va, rkey, len);
            }
        }
        Operation::CompareSwap | Operation::FetchAdd => {
            let found = qp.resp.res.iter().rev().find_map(|r| match *r {
                Resource::Atomic { psn: p, orig } if p == psn => Some(orig),
                _ => None,
            });
            if let Some(orig) = found {
                atomic_ack(qp, cx, psn, orig);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credit_code_is_the_largest_code_not_above_the_count() {
        for n in (0..70_000u32).chain([u32::MAX]) {
            let linear = (0..aeth::CREDITS_UNLIMITED)
                .rev()
                .find(|&c| aeth::credit_count(c).is_some_and(|v| v <= n))
                .unwrap_or(0);
            assert_eq!(credit_code(n), linear, "{n}");
        }
        assert_eq!((credit_code(5), credit_code(6), credit_code(7)), (4, 5, 5));
    }
}

//! The UMR QP (`MLX5_QPC_ST_REG_UMR`): the send queue on which a driver posts the UMR
//! WQEs that change memory regions in place (Linux `mlx5r_umr_post_send_wait` on the
//! QP of `mlx5r_umr_resource_init`). It has no transport: each fetched WQE executes
//! on the MKEY table at once (`Firmware::umr`, with the privilege of a REG_UMR QP:
//! the mkeys of every PD), in send queue order, and completes (a CQE when signaled).
//! A NOP completes; any other opcode is an operation the QP cannot execute
//! (`MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR`). A failed WQE completes in error and moves
//! the QP to the error state, flushing the rest, as on the other send queues.

use ferroverbs_hw::control::qp::QpcState;

use crate::engine::cq::CqeKind;
use crate::engine::wqe::{self, Op, WqeError};
use crate::engine::{Ctx, Flight, QpRt, Synd};

/// 16-bit SQ counters.
const MASK16: u32 = 0xffff;

/// Executes every send WQE posted to the UMR QP `qp`.
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
        let mut err = w.error.map(Synd::of_wqe);
        if err.is_none() {
            match w.op {
                Some(Op::Nop) => {}
                Some(Op::Umr) => {
                    if let Err(s) = cx.fw.umr(qp.cfg.pd, qp.cfg.qpn, true, &w.umr()) {
                        err = Some(Synd::of(s));
                    }
                }
                _ => err = Some(Synd::of_wqe(WqeError::QpOp)),
            }
        }
        let f = Flight {
            w,
            first_psn: qp.sq.next_psn,
            npsn: 0,
            sent: 0,
            resp_pkts: 0,
            got: 0,
            done: true,
            counted: false,
            err,
        };
        if let Some(s) = f.err {
            let c = qp.req_completion(
                &f,
                CqeKind::Err {
                    req: true,
                    syndrome: s.syndrome,
                    vendor: s.vendor,
                    sop: f.w.opcode,
                },
                cx.now,
            );
            cx.post_cqe(qp.cfg.cqn_snd, &c);
            return qp.to_error(cx);
        }
        if f.w.signaled {
            let c = qp.req_completion(&f, CqeKind::Req { sop: f.w.opcode }, cx.now);
            if !cx.post_cqe(qp.cfg.cqn_snd, &c) {
                return qp.to_error(cx);
            }
        }
    }
}

//! Taking the next receive WQE for an incoming message, for every transport.
//!
//! A QP's receive WQEs come from its own RQ (the ring at the start of the QP buffer,
//! consumed in order; the CQE's `wqe_counter` is the RQ counter). The responder
//! calls [`take`] at the packet that needs the WQE (the first packet of a SEND, the
//! last of a WRITE with immediate) and fills [`RecvWqe`](super::RecvWqe) from it.

use super::mem;
use super::wqe::{self, RecvError};
use super::{Ctx, QpRt};

/// Why no receive WQE was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TakeError {
    /// None is posted (RC: RNR NAK; UC: the message is dropped).
    Empty,
    /// The WQE was consumed but cannot be used: it completes with this error.
    Bad(RecvError),
}

/// Consumes the next receive WQE of `qp` into `qp.resp.rwqe` (active, `got` 0), with
/// its scatter list read and checked when `scatter` is set (a WRITE with immediate
/// places nothing in it).
pub fn take(qp: &mut QpRt, cx: &mut Ctx, scatter: bool) -> Result<(), TakeError> {
    if qp.rq_posted(cx.io) == 0 {
        return Err(TakeError::Empty);
    }
    let counter = qp.rq_ci;
    qp.rq_ci = qp.rq_ci.wrapping_add(1);
    let rw = &mut qp.resp.rwqe;
    rw.active = true;
    rw.counter = counter;
    rw.got = 0;
    rw.total = 0;
    rw.sges.clear();
    if !scatter {
        return Ok(());
    }
    match wqe::parse_recv(cx.fw, cx.io, &qp.cfg, counter, &mut rw.sges) {
        Ok(()) => {
            rw.total = mem::total(&rw.sges);
            Ok(())
        }
        Err(e) => Err(TakeError::Bad(e)),
    }
}

//! Taking the next receive WQE for an incoming message, for every transport.
//!
//! A QP's receive WQEs come from its own RQ (the ring at the start of the QP buffer,
//! consumed in order; the CQE's `wqe_counter` is the RQ counter) or, for a QP created
//! with `rq_type` SRQ, from its shared receive queue (`mlx5-datapath.md` §4): the
//! device takes the WQE its list head names, follows that WQE's `next_wqe_index`
//! (`struct mlx5_wqe_srq_next_seg`, the first 16 bytes), reads the data segments after
//! it, and reports the SRQ WQE index as `wqe_counter`. Taking a WQE that leaves fewer
//! posted than an armed limit raises `MLX5_EVENT_TYPE_SRQ_RQ_LIMIT` on the
//! asynchronous EQ (SRQN in `mlx5_eqe_qp_srq`) and disarms the limit.
//!
//! The responder calls [`take`] at the packet that needs the WQE (the first packet of
//! a SEND, the last of a WRITE with immediate) and fills
//! [`RecvWqe`](super::RecvWqe) from it.

use ferroverbs_hw::datapath::eqe::MLX5_EVENT_TYPE_SRQ_RQ_LIMIT;

use ferroverbs_hw::datapath::wqe::{WqeDataSeg, MLX5_INVALID_LKEY};

use super::mem::{self, Need};
use super::wqe::{self, RecvError, MAX_RQ_STRIDE};
use super::{Ctx, QpRt};
use crate::firmware::srq::SrqTake;
use crate::firmware::{Firmware, Mkey};
use crate::iommu::CachedAccess;

/// Bytes of the next segment at the start of every SRQ WQE.
const SRQ_NEXT_SEG: usize = 16;

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
    if let Some(srqn) = qp.cfg.srqn {
        return take_srq(qp, cx, srqn, scatter);
    }
    let counter = consume_rq(qp, cx.io)?;
    if !scatter {
        return Ok(());
    }
    match read_rwqe_io(qp, cx.fw, cx.io, counter) {
        Ok(()) => {
            let rw = &mut qp.resp.rwqe;
            rw.total = mem::total(&rw.sges);
            Ok(())
        }
        Err(e) => Err(TakeError::Bad(e)),
    }
}

/// Consumes the next WQE of `qp`'s own RQ: `Empty` when none is posted; otherwise its
/// counter, with `qp.resp.rwqe` made active for it, nothing received, no scatter
/// list yet (shared by [`take`] and [`take_rq`]).
///
/// The doorbell record is read only when the WQEs it showed posted at its last read
/// are used up (`qp.rq_known`): the driver only ever adds WQEs behind the record
/// (it moves forward, and the driver never overwrites a WQE the device has not
/// consumed), so those are still posted; this is what a ConnectX does (it fetches
/// the record when its known WQEs run out). The record is one aligned 4-byte load
/// ([`CachedAccess::read_be32_cached`]), never torn (a torn record made the
/// device take stale WQEs as posted; see `Iommu`'s aligned reads).
#[inline(always)]
fn consume_rq(qp: &mut QpRt, io: &impl CachedAccess) -> Result<u32, TakeError> {
    if qp.rq_known == 0 {
        qp.rq_known = qp.rq_posted(io);
        if qp.rq_known == 0 {
            return Err(TakeError::Empty);
        }
    }
    qp.rq_known -= 1;
    let counter = qp.rq_ci;
    qp.rq_ci = counter.wrapping_add(1);
    let rw = &mut qp.resp.rwqe;
    rw.active = true;
    rw.counter = counter;
    rw.got = 0;
    rw.total = 0;
    rw.sges.clear();
    Ok(counter)
}

/// [`take`] for a QP with its own RQ (not an SRQ), for a message that scatters
/// (SEND): the same effects on `qp`, the same reads, checks and errors. When the WQE
/// has exactly one data segment (the first segment's lkey is not
/// `MLX5_INVALID_LKEY`, and the stride holds no second segment or the second one's
/// lkey is the end mark: what [`wqe::parse_segs`] reads as a one-entry list) and the
/// stride is at most 64 bytes, that entry comes back with the MKEY that passed its
/// check (local write in the QP's PD, covering the entry), and `qp.resp.rwqe.sges` is
/// left empty (`total` is set). Any other WQE is read into `qp.resp.rwqe.sges` as
/// [`take`] reads it and `Ok(None)` comes back.
pub fn take_rq<'f>(
    qp: &mut QpRt,
    fw: &'f Firmware,
    io: &impl CachedAccess,
) -> Result<Option<(mem::Sge, &'f Mkey)>, TakeError> {
    let counter = consume_rq(qp, io)?;
    let cfg = &qp.cfg;
    // `rq_posted` is 0 without an RQ, so `rq_size` is a power of two here.
    let stride = (cfg.rq_stride as usize).min(MAX_RQ_STRIDE);
    let mut raw = [0u8; 64];
    if stride > raw.len() {
        return match read_rwqe_io(qp, fw, io, counter) {
            Ok(()) => {
                let rw = &mut qp.resp.rwqe;
                rw.total = mem::total(&rw.sges);
                Ok(None)
            }
            Err(e) => Err(TakeError::Bad(e)),
        };
    }
    let raw = &mut raw[..stride];
    let read = cfg
        .rq_iova(counter & cfg.rq_size.wrapping_sub(1))
        .is_some_and(|iova| io.read_cached(&mut qp.resp.rq_win, iova, raw).is_ok());
    if !read {
        return Err(TakeError::Bad(RecvError::Unreadable));
    }
    let lkey_at = |at: usize| {
        raw.get(at + 4..at + 8)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    let one = lkey_at(0).is_some_and(|k| k != MLX5_INVALID_LKEY)
        && lkey_at(16).is_none_or(|k| k == MLX5_INVALID_LKEY);
    let rw = &mut qp.resp.rwqe;
    if !one {
        wqe::parse_segs(fw, cfg.pd, raw, &mut rw.sges).map_err(TakeError::Bad)?;
        rw.total = mem::total(&rw.sges);
        return Ok(None);
    }
    let Ok(d) = WqeDataSeg::read_from(&raw[..16]) else {
        return Err(TakeError::Bad(RecvError::Unreadable));
    };
    // As `wqe::parse_segs`: a byte count of 0 means 2^31 bytes.
    let len = match d.byte_count() {
        0 => 1u64 << 31,
        n => u64::from(n),
    };
    let k = mem::checked(fw, d.lkey(), cfg.pd, Need::LocalWrite, d.addr(), len)
        .map_err(|_| TakeError::Bad(RecvError::Prot))?;
    rw.total = len;
    let sge = mem::Sge {
        addr: d.addr(),
        len,
        key: d.lkey(),
    };
    Ok(Some((sge, k)))
}

/// Reads the RQ WQE of counter `counter` into `qp.resp.rwqe.sges`, each data segment
/// checked ([`wqe::parse_segs`]): as [`wqe::parse_recv`], through the QP's cached
/// translation of its ring (`qp.resp.rq_win`).
fn read_rwqe_io(
    qp: &mut QpRt,
    fw: &Firmware,
    io: &impl CachedAccess,
    counter: u32,
) -> Result<(), RecvError> {
    let win = &mut qp.resp.rq_win;
    wqe::parse_recv_with(fw, &qp.cfg, counter, &mut qp.resp.rwqe.sges, |iova, raw| {
        io.read_cached(win, iova, raw).is_ok()
    })
}

fn take_srq(qp: &mut QpRt, cx: &mut Ctx, srqn: u32, scatter: bool) -> Result<(), TakeError> {
    let mut raw = [0u8; MAX_RQ_STRIDE];
    let Some(srq) = cx.fw.srq_mut(srqn) else {
        return Err(TakeError::Bad(RecvError::Unreadable));
    };
    let stride = (srq.stride as usize).min(MAX_RQ_STRIDE);
    let pd = srq.pd;
    let t = match srq.take(cx.io, &mut raw) {
        Ok(t) => t,
        Err(SrqTake::Empty) => return Err(TakeError::Empty),
        Err(SrqTake::Unreadable) => return Err(TakeError::Bad(RecvError::Unreadable)),
    };
    cx.stats.srq_wqes += 1;
    if t.limit_hit {
        // struct mlx5_eqe_qp_srq: 20 reserved bytes, type, 3 reserved, SRQN.
        let mut data = [0u8; 28];
        data[24..].copy_from_slice(&(srqn & 0x00ff_ffff).to_be_bytes());
        cx.stats.srq_limit_events += 1;
        if let Some(v) = cx
            .fw
            .post_event(cx.io, MLX5_EVENT_TYPE_SRQ_RQ_LIMIT, 0, &data)
        {
            cx.irqs.signal(v);
        }
    }
    let rw = &mut qp.resp.rwqe;
    rw.active = true;
    rw.counter = u32::from(t.index);
    rw.got = 0;
    rw.total = 0;
    rw.sges.clear();
    if !scatter {
        return Ok(());
    }
    match wqe::parse_segs(cx.fw, pd, &raw[SRQ_NEXT_SEG..stride], &mut rw.sges) {
        Ok(()) => {
            rw.total = mem::total(&rw.sges);
            Ok(())
        }
        Err(e) => Err(TakeError::Bad(e)),
    }
}

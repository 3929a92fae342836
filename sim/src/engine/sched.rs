//! Which QPs the engine visits: ready lists and timers, so that no cost of a step, a
//! packet or a doorbell grows with the number of QPs that have nothing to do.
//!
//! * **Owed ACKs**: a QP that received a request owing an acknowledgement joins the
//!   ACK list once (a flag on the QP, not a search of the list); the list is drained
//!   when the batch of received frames ends ([`super::Engine::flush_acks`]).
//! * **QPs in error** whose receive queue the device still watches join the error list
//!   once, and leave it when they leave the error state or are destroyed.
//! * **Timers** (the local ACK timeout and the RNR back-off of each QP's requester)
//!   are entries of a [`Timers`] heap keyed by QPN. A QP's real deadlines stay in its
//!   requester state ([`super::Sq`]); the heap holds, for each QP with a timer, an
//!   entry at or before the earliest of them ([`Timers::wake_by`]: a deadline that
//!   only moves later, as the ACK timer does at every acknowledgement, costs nothing
//!   until the entry is reached). When an entry comes due the QP is looked at: an
//!   expired timer fires, a later one is queued again at its real time.
//!
//! Expired timers of one poll fire in the order their QPs started watching timers
//! (the order of the list of QPs with timers the engine kept before: a QP joins when a
//! timer of it starts, and leaves at the first poll that finds none running), so the
//! frames they send, and every completion after, are the same as that list gave.
//!
//! List entries carry the QP runtime's identity ([`QpSched::id`]): an entry of a QP
//! destroyed (or reset) meanwhile is skipped when reached, so destroying a QP costs
//! nothing on the lists.

use super::QpRt;
use crate::timer::Timers;

/// A list entry: QPN and the identity of the runtime that joined.
pub(crate) type Listed = (u32, u64);

/// A QP runtime's place on the engine's lists.
#[derive(Clone, Copy, Debug, Default)]
pub struct QpSched {
    /// Identity of this runtime (unique per engine): list entries of an earlier
    /// runtime with the same QPN are stale.
    pub id: u64,
    /// Rank among the QPs whose timers are watched, while it is one of them.
    pub timer_seq: Option<u64>,
    /// The deadline of its entry in the timer heap, if it has one (a copy of
    /// [`Timers::deadline`], read without the heap's slot lookup on every packet).
    pub wake: Option<u64>,
    /// On the list of QPs whose timers stopped, looked at by the next poll.
    pub leaving: bool,
    /// On the list of QPs owing an ACK.
    pub ack_listed: bool,
    /// On the list of QPs in error.
    pub err_listed: bool,
}

/// The engine's ready lists and timers.
#[derive(Debug, Default)]
pub struct WorkLists {
    /// QPs owing an ACK, in the order they came to owe it.
    pub(crate) acks: Vec<Listed>,
    /// QPs in error whose RQ is watched for new posts, in the order they failed.
    pub(crate) errs: Vec<Listed>,
    /// When to look at each QP with a timer.
    pub(crate) timers: Timers,
    /// The next [`QpSched::timer_seq`].
    next_seq: u64,
    /// QPs whose timers stopped since the last poll.
    pub(crate) leaving: Vec<Listed>,
    /// Scratch of a poll: the QPs whose timers expired, with their ranks.
    pub(crate) due: Vec<(u64, u32)>,
}

impl WorkLists {
    /// Records QP `qpn`'s timers after something ran on it: a running timer is
    /// watched (the heap wakes the engine no later than it), a QP whose timers all
    /// stopped is looked at by the next poll.
    #[inline]
    pub(crate) fn note_timer(&mut self, qpn: u32, qp: &mut QpRt) {
        match qp.next_timer() {
            Some(t) => {
                if qp.sched.timer_seq.is_none() {
                    qp.sched.timer_seq = Some(self.next_seq);
                    self.next_seq += 1;
                }
                self.wake_by(qpn, qp, t);
            }
            None => {
                if qp.sched.timer_seq.is_some() && !qp.sched.leaving {
                    qp.sched.leaving = true;
                    self.leaving.push((qpn, qp.sched.id));
                }
            }
        }
    }

    /// Makes the heap wake the engine for QP `qpn` no later than `t`
    /// ([`Timers::wake_by`]), keeping [`QpSched::wake`] its copy.
    #[inline]
    pub(crate) fn wake_by(&mut self, qpn: u32, qp: &mut QpRt, t: u64) {
        if qp.sched.wake.is_some_and(|w| w <= t) {
            return;
        }
        self.timers.wake_by(qpn, t);
        qp.sched.wake = Some(t);
    }

    /// Puts QP `qpn` on the error list if it is in error and not on it.
    #[inline]
    pub(crate) fn note_err(&mut self, qpn: u32, qp: &mut QpRt) {
        if qp.state == ferroverbs_hw::control::qp::QpcState::Err && !qp.sched.err_listed {
            qp.sched.err_listed = true;
            self.errs.push((qpn, qp.sched.id));
        }
    }

    /// Puts QP `qpn` on the ACK list if it owes an ACK and is not on it.
    #[inline]
    pub(crate) fn note_ack(&mut self, qpn: u32, qp: &mut QpRt) {
        if qp.resp.ack_due.is_some() && !qp.sched.ack_listed {
            qp.sched.ack_listed = true;
            self.acks.push((qpn, qp.sched.id));
        }
    }

    /// What follows a packet given to an RC or UC QP: the lists of QPs owing an ACK
    /// (after a request), with timers, in error.
    #[inline(always)]
    pub(crate) fn after_packet(&mut self, qpn: u32, qp: &mut QpRt, request: bool) {
        if request {
            self.note_ack(qpn, qp);
        }
        self.note_timer(qpn, qp);
        self.note_err(qpn, qp);
    }

    /// Forgets everything (device reset).
    pub(crate) fn clear(&mut self) {
        self.acks.clear();
        self.errs.clear();
        self.timers.clear();
        self.leaving.clear();
        self.due.clear();
    }
}

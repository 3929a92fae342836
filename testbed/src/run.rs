//! Bounded runs on virtual time.

use std::fmt;
use std::time::Duration;

use crate::bed::Bed;
use crate::trace::describe;

/// Rounds of [`Bed::run_until`] that move no time before it gives up: a guard against a
/// device, or a condition that posts, finding work at one instant forever. A round is
/// one look at the condition and everything that runs after it; a test that needs more
/// at one instant splits it into several runs.
const MAX_ROUNDS_AT_ONE_INSTANT: u32 = 20_000;

/// Why [`Bed::run_until`] stopped without its condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StuckReason {
    /// Virtual time reached the deadline.
    Deadline,
    /// Nothing was in flight and no timer was pending: the condition cannot become
    /// true without the caller doing something.
    Idle,
    /// The fabric (or the condition, by posting) kept working without time moving.
    Livelock,
}

impl fmt::Display for StuckReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StuckReason::Deadline => "the virtual deadline passed",
            StuckReason::Idle => "nothing in flight and no timer pending",
            StuckReason::Livelock => "the devices kept working without time moving",
        })
    }
}

/// The failure of [`Bed::run_until`]: the reason, the seed that replays the run, the
/// virtual times, and the last frames the fabric forwarded.
#[derive(Clone, Debug, thiserror::Error)]
pub struct Stuck {
    /// Why the run stopped.
    pub reason: StuckReason,
    /// The bed's seed.
    pub seed: u64,
    /// The virtual time when it stopped.
    pub now: Duration,
    /// The virtual deadline.
    pub deadline: Duration,
    /// The last frames forwarded, oldest first, one line each.
    pub frames: Vec<String>,
}

impl fmt::Display for Stuck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "condition not reached: {} (virtual time {:?}, deadline {:?}; seed {}); the last {} frames:",
            self.reason,
            self.now,
            self.deadline,
            self.seed,
            self.frames.len()
        )?;
        for l in &self.frames {
            write!(f, "\n  {l}")?;
        }
        Ok(())
    }
}

impl Bed {
    /// The virtual time of the bed's NICs.
    pub fn now(&self) -> Duration {
        self.nics[0].sim.clock().now()
    }

    /// Moves virtual time forward by `d` and runs the fabric until idle.
    pub fn advance(&self, d: Duration) {
        self.fabric.advance(d);
    }

    /// Runs the fabric until `cond` returns `Some`, moving virtual time to each next
    /// timer or delayed frame when the fabric is idle, for at most `within` of virtual
    /// time. Returns what `cond` returned, or [`Stuck`] (reason, seed, last frames)
    /// when the deadline passes or nothing is left to happen.
    ///
    /// `cond` is asked after every idle point, so a poll of a CQ (`|| cq.poll_one()`)
    /// is a condition; what it posts runs before time moves.
    pub fn run_until<T>(
        &self,
        within: Duration,
        mut cond: impl FnMut() -> Option<T>,
    ) -> Result<T, Stuck> {
        let deadline = self.now() + within;
        let mut rounds_at_instant = 0;
        loop {
            self.fabric.run_until_idle();
            if let Some(t) = cond() {
                return Ok(t);
            }
            // What the condition itself posted (a poll that answers, a repost) runs
            // before time moves.
            if self.fabric.run_until_idle() > 0 {
                rounds_at_instant += 1;
                if rounds_at_instant > MAX_ROUNDS_AT_ONE_INSTANT {
                    return Err(self.stuck(StuckReason::Livelock, deadline));
                }
                continue;
            }
            let now = self.now();
            let Some(wait) = self.fabric.next_event() else {
                return Err(self.stuck(StuckReason::Idle, deadline));
            };
            if now >= deadline {
                return Err(self.stuck(StuckReason::Deadline, deadline));
            }
            if wait.is_zero() {
                rounds_at_instant += 1;
                if rounds_at_instant > MAX_ROUNDS_AT_ONE_INSTANT {
                    return Err(self.stuck(StuckReason::Livelock, deadline));
                }
                continue;
            }
            rounds_at_instant = 0;
            // Never past the deadline: the condition is asked once more there.
            self.fabric.advance(wait.min(deadline - now));
        }
    }

    fn stuck(&self, reason: StuckReason, deadline: Duration) -> Stuck {
        Stuck {
            reason,
            seed: self.seed,
            now: self.now(),
            deadline,
            frames: self
                .fabric
                .last_frames()
                .iter()
                .map(|f| describe(f))
                .collect(),
        }
    }
}

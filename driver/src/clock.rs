//! The driver's notion of time: every timeout and the health watchdog period are
//! measured on a [`Clock`].
//!
//! On hardware this is the host's monotonic clock ([`MonotonicClock`], the default).
//! A test that runs the simulator on virtual time passes a clock that reads (and, if
//! it wants waits to make progress, advances) that virtual time, so timeouts and
//! watchdog periods are exact and take no wall-clock time. The driver has no other
//! source of time.

use std::fmt;
use std::time::{Duration, Instant};

/// A monotonic time source.
pub trait Clock: Send + Sync {
    /// Time elapsed since an arbitrary fixed origin. Never goes backwards.
    fn now(&self) -> Duration;

    /// Lets time pass while a wait loop has nothing to do but look at the device
    /// again; `round` counts the looks so far (0 first). The firmware-readiness waits
    /// of bring-up call it between two reads of the `initializing` bit.
    ///
    /// The default, right for host time, spins, then yields, then sleeps in 1 ms
    /// steps ([`host_idle`]). A clock of virtual time that the device runs on too
    /// should move that time on instead ([`SteppedClock`]): a wait for a device that
    /// is still booting then makes progress and, if the device never gets there, ends
    /// in its timeout.
    fn idle(&self, round: u32) {
        host_idle(round);
    }
}

/// How a wait loop on host time spends its `round`th pause: a spin for the first 64,
/// a yield of the CPU up to 2048, then a 1 ms sleep (a wait that takes long on real
/// firmware should not burn a core).
pub fn host_idle(round: u32) {
    if round < 64 {
        std::hint::spin_loop();
    } else if round < 2048 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A clock that reads another party's time and can move it on: the time of a
/// simulated device, virtual in its deterministic mode.
///
/// [`Clock::idle`] calls `advance(step)`; when that returns `false` (the time cannot
/// be moved: it is real time) the clock waits on the host instead, as
/// [`MonotonicClock`] does. So the same clock serves a device on virtual time (a wait
/// moves the device's time on by `step` per look) and one on real time.
pub struct SteppedClock<N, A> {
    now: N,
    advance: A,
    step: Duration,
}

impl<N, A> SteppedClock<N, A>
where
    N: Fn() -> Duration + Send + Sync,
    A: Fn(Duration) -> bool + Send + Sync,
{
    /// The step [`SteppedClock::new`] uses: 100 µs of device time per look.
    pub const DEFAULT_STEP: Duration = Duration::from_micros(100);

    /// A clock reading `now`, moved on by `advance` in steps of
    /// [`Self::DEFAULT_STEP`] while the driver waits.
    pub fn new(now: N, advance: A) -> Self {
        Self::with_step(now, advance, Self::DEFAULT_STEP)
    }

    /// A clock reading `now`, moved on by `advance(step)` each time the driver waits.
    pub fn with_step(now: N, advance: A, step: Duration) -> Self {
        SteppedClock { now, advance, step }
    }
}

impl<N, A> fmt::Debug for SteppedClock<N, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SteppedClock")
            .field("step", &self.step)
            .finish_non_exhaustive()
    }
}

impl<N, A> Clock for SteppedClock<N, A>
where
    N: Fn() -> Duration + Send + Sync,
    A: Fn(Duration) -> bool + Send + Sync,
{
    fn now(&self) -> Duration {
        (self.now)()
    }

    fn idle(&self, round: u32) {
        if !(self.advance)(self.step) {
            host_idle(round);
        }
    }
}

/// The host's monotonic clock (`std::time::Instant`).
#[derive(Clone, Copy)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        MonotonicClock {
            origin: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MonotonicClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MonotonicClock")
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

impl<F: Fn() -> Duration + Send + Sync> Clock for F {
    fn now(&self) -> Duration {
        self()
    }
}

/// How a wait loop spends the time between two looks at the device: spin briefly,
/// then yield the CPU, then sleep in 1 ms steps (a command that takes long on real
/// firmware should not burn a core).
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    rounds: u32,
}

impl Backoff {
    /// Waits a little on the host; each call waits at least as long as the previous
    /// one.
    pub(crate) fn snooze(&mut self) {
        host_idle(self.rounds);
        self.rounds = self.rounds.saturating_add(1);
    }

    /// Lets `clock` pass a little time ([`Clock::idle`]): a clock of virtual time
    /// moves itself on, host time is waited for as [`Backoff::snooze`] does.
    pub(crate) fn idle(&mut self, clock: &dyn Clock) {
        clock.idle(self.rounds);
        self.rounds = self.rounds.saturating_add(1);
    }

    /// Looks so far.
    pub(crate) fn rounds(&self) -> u32 {
        self.rounds
    }
}

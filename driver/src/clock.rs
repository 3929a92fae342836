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
    /// again; `round` counts the looks so far (0 first). Every wait of the driver
    /// calls it between two looks: the firmware-readiness waits of bring-up, the
    /// wait for a command's completion, the page reclaim of teardown.
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

/// Looks at the device after which a wait whose clock has not moved at all gives up:
/// past the spinning and yielding rounds of [`host_idle`] these are 1 ms sleeps, so a
/// frozen clock costs about two seconds of host time.
pub(crate) const FROZEN_CLOCK_LOOKS: u32 = 4096;

/// How a [`BoundedWait`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitOver {
    /// The timeout passed on the clock; how long the wait lasted.
    TimedOut(Duration),
    /// The clock read the same for [`FROZEN_CLOCK_LOOKS`] looks in a row; looks in all.
    Frozen(u32),
}

/// A wait of the driver for the device, bounded twice: by a timeout on the driver's
/// [`Clock`] (host time, or virtual time a [`SteppedClock`] moves on by a step per
/// look, so at most `timeout / step` looks), and by [`FROZEN_CLOCK_LOOKS`] looks in a
/// row during which the clock did not move at all (virtual time nobody advances). So
/// no wait of the driver can last forever, whatever clock it was given.
///
/// Linux bounds the same waits in jiffies only (`wait_fw_init`, the command timeout
/// of `wait_func`, `mlx5_reclaim_root_pages`' `RECLAIM_PAGES` timeout), which always
/// move; a driver on a simulated device's clock needs the second bound.
pub(crate) struct BoundedWait<'c> {
    clock: &'c dyn Clock,
    start: Duration,
    last: Duration,
    still: u32,
    looks: u32,
    backoff: Backoff,
}

impl<'c> BoundedWait<'c> {
    /// A wait that began at `start` (a reading of `clock`).
    pub(crate) fn since(clock: &'c dyn Clock, start: Duration) -> Self {
        BoundedWait {
            clock,
            start,
            last: start,
            still: 0,
            looks: 0,
            backoff: Backoff::default(),
        }
    }

    /// A wait that begins now.
    pub(crate) fn new(clock: &'c dyn Clock) -> Self {
        Self::since(clock, clock.now())
    }

    /// Counts one more look at the device, made at `now` (a reading of the clock),
    /// and says whether the wait is over: `timeout` passed since the start (or since
    /// the last [`BoundedWait::progress`]), or the clock stood still too long.
    pub(crate) fn check(&mut self, now: Duration, timeout: Duration) -> Result<(), WaitOver> {
        self.looks = self.looks.saturating_add(1);
        let waited = now.saturating_sub(self.start);
        if waited >= timeout {
            return Err(WaitOver::TimedOut(waited));
        }
        if now == self.last {
            self.still = self.still.saturating_add(1);
        } else {
            self.last = now;
            self.still = 0;
        }
        if self.still >= FROZEN_CLOCK_LOOKS {
            return Err(WaitOver::Frozen(self.looks));
        }
        Ok(())
    }

    /// Lets the clock pass a little time before the next look ([`Clock::idle`]).
    pub(crate) fn idle(&mut self) {
        self.backoff.idle(self.clock);
    }

    /// The device made progress at `now`: the timeout counts from there again.
    pub(crate) fn progress(&mut self, now: Duration) {
        self.start = now;
        self.last = now;
        self.still = 0;
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
    /// Lets `clock` pass a little time ([`Clock::idle`]): a clock of virtual time
    /// moves itself on, host time is waited for ([`host_idle`]).
    pub(crate) fn idle(&mut self, clock: &dyn Clock) {
        clock.idle(self.rounds);
        self.rounds = self.rounds.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Virtual time in nanoseconds that `idle` moves on by `step` (0: frozen).
    struct Virtual {
        ns: AtomicU64,
        step: u64,
    }

    impl Clock for Virtual {
        fn now(&self) -> Duration {
            Duration::from_nanos(self.ns.load(Ordering::Relaxed))
        }
        fn idle(&self, _round: u32) {
            self.ns.fetch_add(self.step, Ordering::Relaxed);
        }
    }

    fn looks_until_over(clock: &Virtual, timeout: Duration) -> (u32, WaitOver) {
        let mut w = BoundedWait::new(clock);
        let mut looks = 0;
        loop {
            looks += 1;
            if let Err(over) = w.check(clock.now(), timeout) {
                return (looks, over);
            }
            w.idle();
        }
    }

    #[test]
    fn a_wait_on_a_moving_virtual_clock_ends_in_its_timeout_after_timeout_over_step_looks() {
        let c = Virtual {
            ns: AtomicU64::new(0),
            step: 100_000,
        };
        let (looks, over) = looks_until_over(&c, Duration::from_millis(200));
        assert_eq!(over, WaitOver::TimedOut(Duration::from_millis(200)));
        assert_eq!(looks, 2001);
    }

    #[test]
    fn a_wait_on_a_frozen_clock_ends_after_a_bounded_number_of_looks() {
        let c = Virtual {
            ns: AtomicU64::new(5),
            step: 0,
        };
        let (looks, over) = looks_until_over(&c, Duration::from_secs(3600));
        assert_eq!(over, WaitOver::Frozen(FROZEN_CLOCK_LOOKS));
        assert_eq!(looks, FROZEN_CLOCK_LOOKS);
    }

    #[test]
    fn progress_restarts_both_bounds() {
        let c = Virtual {
            ns: AtomicU64::new(0),
            step: 0,
        };
        let mut w = BoundedWait::new(&c);
        for _ in 0..FROZEN_CLOCK_LOOKS - 1 {
            assert_eq!(w.check(c.now(), Duration::from_secs(1)), Ok(()));
        }
        c.ns.store(900_000_000, Ordering::Relaxed);
        w.progress(c.now());
        // 0.9 s later the timeout counts from the progress, and the still looks
        // from zero.
        for _ in 0..FROZEN_CLOCK_LOOKS - 1 {
            assert_eq!(w.check(c.now(), Duration::from_secs(1)), Ok(()));
        }
        assert!(matches!(
            w.check(c.now(), Duration::from_secs(1)),
            Err(WaitOver::Frozen(_))
        ));
        c.ns.store(1_900_000_000, Ordering::Relaxed);
        assert_eq!(
            w.check(c.now(), Duration::from_secs(1)),
            Err(WaitOver::TimedOut(Duration::from_secs(1)))
        );
    }
}

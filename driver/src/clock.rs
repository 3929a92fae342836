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
    /// Waits a little; each call waits at least as long as the previous one.
    pub(crate) fn snooze(&mut self) {
        if self.rounds < 64 {
            std::hint::spin_loop();
        } else if self.rounds < 2048 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.rounds = self.rounds.saturating_add(1);
    }
}

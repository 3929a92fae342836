//! Device time: the real monotonic clock, or virtual time advanced by the test.
//!
//! Everything time-dependent in the simulated device (the health counter, the
//! internal timer, delayed command completions) is derived from this clock when it is
//! read, so no thread is needed: in virtual time nothing moves until the test calls
//! [`Clock::advance`], which makes runs deterministic.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A source of device time (nanoseconds since the device was created).
#[derive(Clone, Debug)]
pub enum Clock {
    /// Wall-clock monotonic time since `start`.
    Real {
        /// The device's time zero.
        start: Instant,
    },
    /// Virtual nanoseconds, shared by every clone; moves only on [`Clock::advance`].
    Virtual(Arc<AtomicU64>),
}

impl Clock {
    /// Real time starting now.
    pub fn real() -> Self {
        Clock::Real {
            start: Instant::now(),
        }
    }

    /// Virtual time starting at zero.
    pub fn virtual_time() -> Self {
        Clock::Virtual(Arc::new(AtomicU64::new(0)))
    }

    /// Whether this is virtual time.
    pub fn is_virtual(&self) -> bool {
        matches!(self, Clock::Virtual(_))
    }

    /// Device time elapsed since creation.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.now_ns())
    }

    /// Device time elapsed since creation, in nanoseconds.
    pub fn now_ns(&self) -> u64 {
        match self {
            Clock::Real { start } => u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX),
            Clock::Virtual(ns) => ns.load(Ordering::Acquire),
        }
    }

    /// Moves virtual time forward by `d`. Real time cannot be moved: returns `false`.
    pub fn advance(&self, d: Duration) -> bool {
        match self {
            Clock::Real { .. } => false,
            Clock::Virtual(ns) => {
                let add = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
                let _ = ns.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                    Some(v.saturating_add(add))
                });
                true
            }
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::real()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_time_moves_only_when_advanced() {
        let c = Clock::virtual_time();
        let c2 = c.clone();
        assert_eq!(c.now_ns(), 0);
        assert!(c.advance(Duration::from_millis(250)));
        assert_eq!(c2.now(), Duration::from_millis(250));
        c.advance(Duration::MAX);
        assert_eq!(c.now_ns(), u64::MAX);
    }

    #[test]
    fn real_time_is_monotonic() {
        let c = Clock::real();
        let a = c.now_ns();
        std::thread::sleep(Duration::from_millis(2));
        assert!(c.now_ns() > a);
        assert!(!c.advance(Duration::from_secs(1)));
        assert!(!c.is_virtual());
    }
}

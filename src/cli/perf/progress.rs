//! Progress on standard error for long runs: nothing during the first second, then one
//! line per second (rewritten in place on a terminal), so a short run prints nothing
//! and a long one shows it is alive and when it will end.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// How often a line is printed, and how long a run must last before the first.
pub const PERIOD: Duration = Duration::from_secs(1);

/// Checks the clock only every this many updates (a power of two minus one mask).
const CHECK_MASK: u64 = 0x3ff;

/// Progress of one measurement.
pub struct Progress {
    label: String,
    total: u64,
    start: Instant,
    next: Instant,
    calls: u64,
    in_place: bool,
    printed: bool,
    out: Box<dyn Write + Send>,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("label", &self.label)
            .field("total", &self.total)
            .finish_non_exhaustive()
    }
}

impl Progress {
    /// Progress of `total` units of work labelled `label`, on standard error.
    pub fn stderr(label: impl Into<String>, total: u64) -> Self {
        let tty = std::io::stderr().is_terminal();
        Self::new(
            label,
            total,
            Instant::now(),
            tty,
            Box::new(std::io::stderr()),
        )
    }

    /// Progress written to `out`, starting at `start`; `in_place` rewrites one line
    /// with carriage returns (for a terminal).
    pub fn new(
        label: impl Into<String>,
        total: u64,
        start: Instant,
        in_place: bool,
        out: Box<dyn Write + Send>,
    ) -> Self {
        Progress {
            label: label.into(),
            total,
            start,
            next: start + PERIOD,
            calls: 0,
            in_place,
            printed: false,
            out,
        }
    }

    /// `done` units are complete. Cheap: reads the clock once per 1024 calls.
    #[inline]
    pub fn update(&mut self, done: u64) {
        self.calls = self.calls.wrapping_add(1);
        if self.calls & CHECK_MASK == 0 {
            self.update_at(done, Instant::now());
        }
    }

    /// `done` units are complete at `now`: prints a line if one is due.
    pub fn update_at(&mut self, done: u64, now: Instant) {
        if now < self.next {
            return;
        }
        self.next = now + PERIOD;
        let elapsed = now.duration_since(self.start).as_secs_f64();
        let frac = if self.total == 0 {
            1.0
        } else {
            done.min(self.total) as f64 / self.total as f64
        };
        let eta = if frac > 0.0 {
            elapsed / frac - elapsed
        } else {
            f64::NAN
        };
        let line = format!(
            "{}: {}/{} ({:.1}%), {:.1} s elapsed, about {:.1} s left",
            self.label,
            done,
            self.total,
            100.0 * frac,
            elapsed,
            eta
        );
        let _ = if self.in_place {
            write!(self.out, "\r{line}\x1b[K")
        } else {
            writeln!(self.out, "{line}")
        };
        let _ = self.out.flush();
        self.printed = true;
    }

    /// Ends the progress display (a terminal line is finished with a newline).
    pub fn finish(&mut self) {
        if self.printed && self.in_place {
            let _ = write!(self.out, "\r\x1b[K");
            let _ = self.out.flush();
        }
        self.printed = false;
    }

    /// Whether any line was printed.
    pub fn printed(&self) -> bool {
        self.printed
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn quiet_for_the_first_second_then_once_per_second() {
        let sink = Sink::default();
        let t0 = Instant::now();
        let mut p = Progress::new("send-bw", 1000, t0, false, Box::new(sink.clone()));
        p.update_at(10, t0 + Duration::from_millis(500));
        assert!(!p.printed());
        p.update_at(250, t0 + Duration::from_millis(1000));
        p.update_at(260, t0 + Duration::from_millis(1500));
        p.update_at(500, t0 + Duration::from_millis(2000));
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(
            lines[0],
            "send-bw: 250/1000 (25.0%), 1.0 s elapsed, about 3.0 s left"
        );
        assert_eq!(
            lines[1],
            "send-bw: 500/1000 (50.0%), 2.0 s elapsed, about 2.0 s left"
        );
    }

    #[test]
    fn a_terminal_line_is_rewritten_and_cleared() {
        let sink = Sink::default();
        let t0 = Instant::now();
        let mut p = Progress::new("x", 4, t0, true, Box::new(sink.clone()));
        p.update_at(1, t0 + PERIOD);
        p.update_at(2, t0 + 2 * PERIOD);
        p.finish();
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert!(!text.contains('\n'));
        assert_eq!(text.matches('\r').count(), 3);
        assert!(text.ends_with("\r\x1b[K"));
    }

    #[test]
    fn update_reads_the_clock_rarely() {
        let sink = Sink::default();
        let past = Instant::now() - Duration::from_secs(10);
        let mut p = Progress::new("x", 1 << 20, past, false, Box::new(sink.clone()));
        for i in 0..(CHECK_MASK) {
            p.update(i);
        }
        assert!(!p.printed(), "no clock read before 1024 calls");
        p.update(CHECK_MASK + 1);
        assert!(p.printed());
    }
}

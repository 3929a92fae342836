//! `-e`: completions by event instead of polling, as perftest's `-e` does with
//! `ibv_req_notify_cq` / `ibv_get_cq_event` / `ibv_ack_cq_events`.
//!
//! When a poll finds nothing, the side arms its CQ ([`CompletionQueue::req_notify`]),
//! lets the device progress (the simulator's deterministic mode is stepped; threaded
//! devices run alone), sleeps in `poll(2)` on the completion channels' descriptors
//! until one is readable (or [`EVENT_WAIT`] passes, so that a stalled test still
//! notices), then takes and acknowledges the events and polls the CQ again. Arming a
//! CQ whose completions are already past its consumer index raises the event at once
//! (see `ferroverbs::verbs::channel`), so no completion is missed between the empty
//! poll and the arm.

use std::os::fd::RawFd;
use std::time::Duration;

use ferroverbs::verbs::{CompletionChannel, CompletionQueue};
use ferroverbs_hw::Bus;

/// The longest sleep for one event.
pub const EVENT_WAIT: Duration = Duration::from_millis(10);

/// A completion channel as the test uses it.
pub trait EventChannel<B: Bus> {
    /// The descriptor that becomes readable when an event waits.
    fn event_fd(&self) -> RawFd;
    /// Takes every queued event (they all concern `cq`, the channel's one CQ) and
    /// acknowledges them; returns how many there were.
    fn take_events(&self, cq: &mut CompletionQueue<'_, B>) -> u32;
}

impl<B: Bus> EventChannel<B> for CompletionChannel<'_, B> {
    fn event_fd(&self) -> RawFd {
        self.fd()
    }

    fn take_events(&self, cq: &mut CompletionQueue<'_, B>) -> u32 {
        let mut n = 0;
        while self.try_get_cq_event().is_some() {
            n += 1;
        }
        if n > 0 {
            self.ack_cq_events(cq, n);
        }
        n
    }
}

/// Sleeps until one of `fds` is readable or `timeout` passes.
pub fn wait_readable(fds: &[RawFd], timeout: Duration) {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `p` is a live, initialised array of `p.len()` pollfd structures that
    // poll(2) may write `revents` into; the descriptors are only read.
    let _ = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::time::Instant;

    #[test]
    fn a_readable_descriptor_ends_the_wait() {
        let (r, mut w) = std::os::unix::net::UnixStream::pair().unwrap();
        w.write_all(b"x").unwrap();
        let t = Instant::now();
        wait_readable(&[r.as_raw_fd()], Duration::from_secs(30));
        assert!(t.elapsed() < Duration::from_secs(30));
    }
}

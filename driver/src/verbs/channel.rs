//! Completion channels (`ibv_comp_channel`): completion events delivered through a file
//! descriptor that works with `poll(2)`/`epoll`.
//!
//! Each channel owns a completion EQ of its own (`CREATE_EQ` with no async event
//! subscribed, on its own MSI-X vector), and the CQs created through
//! [`CompletionChannel::create_cq`] name that EQ in their context (`cqc.c_eqn`). The
//! flow is libibverbs':
//!
//! 1. [`CompletionQueue::req_notify`] arms the CQ (the CQ arm doorbell: next
//!    completion, or the next solicited one);
//! 2. when such a completion arrives the device writes a completion EQE (type 0, the
//!    CQN) to the channel's EQ, disarms the CQ, and fires the EQ's MSI-X vector;
//! 3. the channel's descriptor ([`CompletionChannel::fd`]) becomes readable;
//!    [`CompletionChannel::get_cq_event`] (or its non-blocking and timed forms)
//!    consumes the EQEs, re-arms the EQ, and returns a [`CqEvent`] naming the CQ;
//! 4. the application acknowledges with [`CompletionChannel::ack_cq_events`] (every
//!    event must be acknowledged; the CQ's arm sequence number advances per
//!    acknowledged event, as rdma-core's `mlx5_cq_event` advances it per event, so
//!    acknowledge before re-arming), re-arms with `req_notify`, and polls the CQ
//!    empty (a completion that arrived between the event and the re-arm is found by
//!    that poll, or fires at once: arming with completions already past the consumer
//!    index raises the event immediately).
//!
//! # The descriptor and the two simulator modes
//!
//! Where the bus offers MSI-X eventfds (VFIO, the simulator), the channel's
//! descriptor *is* its vector's eventfd: the device itself makes it readable, with no
//! driver thread. In the simulator's threaded mode the device thread writes the EQE
//! and signals the eventfd as the completion happens, so an application can sleep in
//! `epoll_wait` between messages. In deterministic mode the device progresses only
//! when the test drives it (`Sim::step`, `Fabric::run_until_idle`, or a doorbell
//! serviced on the ringing thread): the EQE is written and the eventfd signalled
//! during that call, so after driving the fabric a `poll(2)` with a timeout sees the
//! descriptor readable, and `try_get_cq_event` returns the event. Blocking in
//! [`CompletionChannel::get_cq_event`] in deterministic mode only makes sense when
//! another thread drives the device.
//!
//! Where the bus has no interrupts ([`Bus::irq_eventfd`] gives `None`, e.g.
//! `MemBus`), the channel creates an eventfd of its own and signals it when
//! [`CompletionChannel::process`] (or a `get_cq_event` call) finds completion EQEs: the
//! application drives progress by calling `process` (from a timer, or a polling
//! thread), and the descriptor then behaves as above.
//!
//! While events are queued in the channel the descriptor stays readable (the channel
//! signals it again when it hands out one event and more remain), as the kernel's
//! event file is readable while its list is non-empty.
//!
//! A channel's EQ holds 256 entries, 128 of them spare: one EQE per armed CQ at a
//! time, so up to 128 CQs may share a channel.

use std::collections::{BTreeMap, VecDeque};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ferroverbs_hw::Bus;

use super::{CompletionQueue, Error, Result};
use crate::eq::{Event, EventQueue};
use crate::hca::cmd_in;
use crate::prm::{self, op};
use crate::Context;

/// log2 of the entries of a channel's EQ.
const LOG_EQ_SIZE: u8 = 8;

/// A completion event: the CQ it concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CqEvent {
    /// The CQ number ([`CompletionQueue::cqn`]).
    pub cqn: u32,
}

/// How to create a CQ beyond its size ([`Context::create_cq_with`],
/// [`CompletionChannel::create_cq_with`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqOptions {
    /// Ignore overrun (`cqc.oi`): the device keeps writing CQEs over ones the
    /// application has not polled instead of putting the CQ in error and raising a
    /// CQ error event. For a CQ sized so that it cannot overrun, or one whose
    /// application tolerates lost completions under load; the QPs of a CQ in error
    /// would otherwise stop.
    pub ignore_overrun: bool,
    /// The size of the CQ's entries (`cqc.cqe_sz`; default 64 bytes). 128-byte CQEs
    /// let the device place messages of up to 64 bytes in them (scatter to CQE,
    /// [`CqeSize`](super::CqeSize)).
    pub cqe_size: super::CqeSize,
}

/// Events handed out and acknowledged for one CQ.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    delivered: u64,
    acked: u64,
}

struct Inner<B: Bus> {
    eq: EventQueue<B>,
    pending: VecDeque<u32>,
    counts: BTreeMap<u32, Counts>,
}

/// A completion channel; see the [module](self) docs.
pub struct CompletionChannel<'ctx, B: Bus> {
    ctx: &'ctx Context<B>,
    eqn: u8,
    vector: u16,
    /// The MSI-X eventfd (owned by the bus) or the channel's own eventfd.
    fd: RawFd,
    own_fd: Option<OwnedFd>,
    inner: Mutex<Inner<B>>,
}

impl<B: Bus> std::fmt::Debug for CompletionChannel<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionChannel")
            .field("eqn", &self.eqn)
            .field("vector", &self.vector)
            .field("fd", &self.fd)
            .field("interrupt_driven", &self.own_fd.is_none())
            .finish()
    }
}

impl<B: Bus> Context<B> {
    /// [`Context::create_cq`] with options (e.g. overrun ignored); its completion
    /// events, if armed, go to the async EQ and are dropped (use a channel's
    /// [`CompletionChannel::create_cq_with`] to receive them).
    pub fn create_cq_with(&self, cqe: u32, opts: CqOptions) -> Result<CompletionQueue<'_, B>> {
        self.create_cq_on(cqe, None, opts)
    }

    /// Creates a completion channel (`ibv_create_comp_channel`): a completion EQ on a
    /// free MSI-X vector (`CREATE_EQ`), armed, and its descriptor.
    pub fn create_comp_channel(&self) -> Result<CompletionChannel<'_, B>> {
        let vector = self
            .event_state()
            .take_vector()
            .ok_or(Error::InvalidArgument(
                "no free MSI-X vector for the channel",
            ))?;
        match CompletionChannel::create(self, vector) {
            Ok(ch) => Ok(ch),
            Err(e) => {
                self.event_state().put_vector(vector);
                Err(e)
            }
        }
    }
}

impl<'ctx, B: Bus> CompletionChannel<'ctx, B> {
    fn create(ctx: &'ctx Context<B>, vector: u16) -> Result<Self> {
        let uar = ctx
            .uar_index()
            .ok_or(Error::InvalidArgument("the context has no UAR"))?;
        use prm::cmd_hca_cap as g;
        if u64::from(LOG_EQ_SIZE) > ctx.cap(g::log_max_eq_sz) {
            return Err(Error::CapExceeded {
                what: "log2 of the EQ entries",
                requested: LOG_EQ_SIZE.into(),
                max: ctx.cap(g::log_max_eq_sz),
            });
        }
        let (fd, own_fd) = match ctx.bus().irq_eventfd(vector) {
            Some(fd) => (fd, None),
            None => {
                let own = new_eventfd().ok_or(Error::InvalidArgument(
                    "the system refused an eventfd for the channel",
                ))?;
                (own.as_raw_fd(), Some(own))
            }
        };
        // Anything left from an earlier user of the vector.
        drain_eventfd(fd);
        let mut eq = EventQueue::new(ctx.bus(), LOG_EQ_SIZE)?;
        let pas = eq.pas();
        let mut input = cmd_in(op::CREATE_EQ, 0, prm::create_eq_in::SIZE + 8 * pas.len());
        let c = prm::create_eq_in::eq_context_entry.bit;
        prm::eqc::log_eq_size
            .at(c)
            .set(&mut input, u64::from(eq.log_size()));
        prm::eqc::uar_page.at(c).set(&mut input, u64::from(uar));
        prm::eqc::intr.at(c).set(&mut input, u64::from(vector));
        prm::eqc::log_page_size.at(c).set(&mut input, 0);
        // No async event: completion EQEs reach the EQ a CQ names whatever the mask.
        let pas_off = prm::create_eq_in::pas.byte_offset();
        for (i, p) in pas.iter().enumerate() {
            input[pas_off + 8 * i..pas_off + 8 * i + 8].copy_from_slice(&p.to_be_bytes());
        }
        let out = ctx.exec_cmd(&input, prm::create_eq_out::SIZE)?;
        let eqn = prm::create_eq_out::eq_number.get(&out) as u8;
        eq.activate(eqn, uar);
        eq.arm();
        Ok(CompletionChannel {
            ctx,
            eqn,
            vector,
            fd,
            own_fd,
            inner: Mutex::new(Inner {
                eq,
                pending: VecDeque::new(),
                counts: BTreeMap::new(),
            }),
        })
    }

    /// The descriptor to watch with `poll(2)`/`epoll` (readable: an event is
    /// waiting). It belongs to the channel (or the bus): do not close it.
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// Whether the descriptor is the device's MSI-X eventfd (the device makes it
    /// readable) rather than the channel's own (made readable by
    /// [`CompletionChannel::process`]).
    pub fn is_interrupt_driven(&self) -> bool {
        self.own_fd.is_none()
    }

    /// The channel's EQ number.
    pub fn eqn(&self) -> u8 {
        self.eqn
    }

    /// The channel's MSI-X vector.
    pub fn vector(&self) -> u16 {
        self.vector
    }

    /// Creates a CQ whose completion events come to this channel
    /// (`ibv_create_cq` with a channel). The CQ borrows the channel, so the channel
    /// outlives it (its EQ cannot be destroyed under the CQ).
    pub fn create_cq(&self, cqe: u32) -> Result<CompletionQueue<'_, B>> {
        self.create_cq_with(cqe, CqOptions::default())
    }

    /// [`CompletionChannel::create_cq`] with options.
    pub fn create_cq_with(&self, cqe: u32, opts: CqOptions) -> Result<CompletionQueue<'_, B>> {
        self.ctx.create_cq_on(cqe, Some(self.eqn), opts)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<B>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Consumes the completion EQEs the device wrote, queues their events, and
    /// re-arms the EQ; returns how many events are queued. Signals the descriptor
    /// when events are queued (the way to drive a channel without interrupts).
    pub fn process(&self) -> usize {
        let mut inner = self.lock();
        self.consume(&mut inner);
        let n = inner.pending.len();
        if n > 0 {
            signal_eventfd(self.fd);
        }
        n
    }

    fn consume(&self, inner: &mut Inner<B>) {
        let signalled = drain_eventfd(self.fd);
        let mut any = false;
        while let Some(eqe) = inner.eq.next() {
            any = true;
            match Event::decode(&eqe) {
                Event::Completion { cqn } => inner.pending.push_back(cqn),
                other => tracing::debug!(?other, eqn = self.eqn, "unexpected EQE on a channel"),
            }
        }
        if any || signalled {
            // Publishing the counter and arming: an EQE written since the loop fires
            // the vector at once.
            inner.eq.arm();
        }
    }

    /// Takes the next completion event without blocking (`ibv_get_cq_event` on a
    /// non-blocking channel).
    pub fn try_get_cq_event(&self) -> Option<CqEvent> {
        let mut inner = self.lock();
        if inner.pending.is_empty() {
            self.consume(&mut inner);
        }
        let cqn = inner.pending.pop_front()?;
        inner.counts.entry(cqn).or_default().delivered += 1;
        if !inner.pending.is_empty() {
            // Keep the descriptor readable while events wait.
            signal_eventfd(self.fd);
        }
        Some(CqEvent { cqn })
    }

    /// Waits up to `timeout` for a completion event (`poll(2)` on the descriptor).
    pub fn get_cq_event_timeout(&self, timeout: Duration) -> Option<CqEvent> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(ev) = self.try_get_cq_event() {
                return Some(ev);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            wait_readable(self.fd, Some(left));
        }
    }

    /// Waits for a completion event (`ibv_get_cq_event`, blocking). In the
    /// simulator's deterministic mode another thread must drive the device.
    pub fn get_cq_event(&self) -> CqEvent {
        loop {
            if let Some(ev) = self.try_get_cq_event() {
                return ev;
            }
            wait_readable(self.fd, None);
        }
    }

    /// Acknowledges `n` events of `cq` (`ibv_ack_cq_events`); the CQ's arm sequence
    /// number advances once per event. Acknowledge before re-arming.
    pub fn ack_cq_events(&self, cq: &mut CompletionQueue<'_, B>, n: u32) {
        for _ in 0..n {
            cq.count_event();
        }
        let mut inner = self.lock();
        let c = inner.counts.entry(cq.cqn()).or_default();
        c.acked = (c.acked + u64::from(n)).min(c.delivered);
    }

    /// Events of CQ `cqn` handed out and not yet acknowledged (libibverbs'
    /// `comp_events_completed` against the events delivered; destroying a CQ with
    /// unacknowledged events is legal here, but a port of libibverbs code would
    /// hang).
    pub fn unacked_events(&self, cqn: u32) -> u64 {
        let inner = self.lock();
        inner.counts.get(&cqn).map_or(0, |c| c.delivered - c.acked)
    }

    /// Events queued in the channel and not yet handed out.
    pub fn queued_events(&self) -> usize {
        self.lock().pending.len()
    }
}

impl<B: Bus> AsRawFd for CompletionChannel<'_, B> {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl<B: Bus> Drop for CompletionChannel<'_, B> {
    fn drop(&mut self) {
        let mut input = cmd_in(op::DESTROY_EQ, 0, 16);
        prm::destroy_eq_in::eq_number.set(&mut input, u64::from(self.eqn));
        match self.ctx.exec_cmd(&input, 16) {
            Ok(_) => self.ctx.event_state().put_vector(self.vector),
            // The vector stays taken: the EQ may still fire it.
            Err(e) => tracing::warn!(eqn = self.eqn, error = %e, "DESTROY_EQ failed"),
        }
        // The ring unmaps (and the own eventfd closes) after the firmware object.
    }
}

/// A new non-blocking, close-on-exec eventfd.
fn new_eventfd() -> Option<OwnedFd> {
    // SAFETY: eventfd(2) takes no pointers; it returns a new descriptor or -1.
    let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if raw < 0 {
        return None;
    }
    // SAFETY: `raw` was just returned by eventfd(2), is open and owned by no one
    // else; the OwnedFd closes it once.
    Some(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Reads (and so clears) a non-blocking eventfd; whether it was signalled.
pub(crate) fn drain_eventfd(fd: RawFd) -> bool {
    let mut v = 0u64;
    // SAFETY: reads at most 8 bytes into `v`, a live, writable 8-byte local; a bad or
    // empty descriptor makes read(2) fail (EBADF/EAGAIN), nothing else.
    let r = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    r == 8 && v > 0
}

/// Adds 1 to an eventfd (makes it readable).
pub(crate) fn signal_eventfd(fd: RawFd) {
    let one = 1u64;
    // SAFETY: writes 8 bytes from `one`, a live 8-byte local; a full counter or bad
    // descriptor makes write(2) fail, which only means the fd is already readable or
    // unusable.
    let _ = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// Waits until `fd` is readable or `timeout` passes (`None`: forever); whether it is
/// readable.
pub(crate) fn wait_readable(fd: RawFd, timeout: Option<Duration>) -> bool {
    let ms = match timeout {
        None => -1,
        Some(t) => t.as_millis().clamp(1, i32::MAX as u128) as i32,
    };
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid `pollfd` that lives across the call; nfds = 1.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    r > 0 && p.revents & libc::POLLIN != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eventfd_helpers() {
        let fd = new_eventfd().unwrap();
        let raw = fd.as_raw_fd();
        assert!(!wait_readable(raw, Some(Duration::from_millis(1))));
        assert!(!drain_eventfd(raw));
        signal_eventfd(raw);
        signal_eventfd(raw);
        assert!(wait_readable(raw, Some(Duration::ZERO)));
        assert!(drain_eventfd(raw));
        assert!(!drain_eventfd(raw));
    }
}

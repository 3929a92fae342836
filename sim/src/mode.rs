//! Execution modes and the device thread of threaded mode.
//!
//! | | deterministic | threaded |
//! |---|---|---|
//! | commands | on the thread that rings the command doorbell | same |
//! | send doorbells | serviced on the ringing thread: WQEs fetched, packets built and queued at their destination | same |
//! | received packets, ACKs, timers | when the test calls [`Sim::step`](crate::Sim::step) / [`Fabric::step`](crate::link::Fabric::step) | on the device's own thread, woken when a packet is queued for it |
//! | time | virtual (moves on `advance`) | real |
//!
//! Servicing a send doorbell on the ringing thread costs the poster the packet building
//! of up to a window of packets, but saves a thread hand-off per message in both
//! directions: in threaded mode a one-way message costs one wake-up (the receiving
//! device's thread), and the data of a large message keeps flowing from the device
//! threads as ACKs open the window.
//!
//! The device thread backs off when idle: it spins for [`SPIN_TIME`] and yields for
//! [`YIELD_TIME`] (neither with an [`Ingress`]), then parks until a packet arrives or
//! [`MAX_PARK`] passes (sooner if a timer is due). It holds only a weak reference to the device and stops
//! (joined) when the last handle to the device is dropped.
//!
//! A device may have an [`Ingress`]: a source of received frames that is read, not
//! pushed (the UDP link's socket, [`crate::link::udp`]). Whoever services the device
//! reads it first, without blocking: the device thread in threaded mode, the thread
//! that steps the device in deterministic mode (a busy-polling application, as with a
//! real NIC), so that no other thread hands the frames over. An idle device thread
//! then blocks in the ingress ([`Ingress::wait`]) instead of parking.
//!
//! In threaded mode a busy-polling application thread may service the device too
//! ([`Sim::try_service`](crate::Sim::try_service), never waiting for the device
//! thread); while it does ([`Service::assisted`]), the idle device thread naps for
//! [`ASSIST_NAP`] instead of competing with it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::link::RxQueue;

/// How a simulated device makes progress.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Everything on the caller's threads; the test steps the device or the fabric.
    #[default]
    Deterministic,
    /// The device has its own thread that processes received packets and timers.
    Threaded,
}

/// Where a send doorbell's work (WQE fetch, packet building) is done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Doorbells {
    /// On the thread that rings the doorbell (the default).
    #[default]
    Inline,
    /// Queued for the device: its thread (threaded mode) or the next step
    /// (deterministic mode) does the work. For measuring the trade-off.
    Deferred,
}

/// How long an idle device thread keeps spinning before it yields.
pub const SPIN_TIME: Duration = Duration::from_micros(20);
/// How long an idle device thread keeps yielding before it parks.
pub const YIELD_TIME: Duration = Duration::from_micros(200);
/// Longest park (receive WQEs posted to a QP in error are noticed at this pace).
pub const MAX_PARK: Duration = Duration::from_millis(10);

/// How long the device thread naps, and how recently an application thread must have
/// assisted ([`Service::assisted`]) for it to nap instead of polling.
pub const ASSIST_NAP: Duration = Duration::from_millis(1);

/// What a device thread drives.
pub trait Service: Send + Sync + 'static {
    /// Does the work that is due; returns how much (0: idle).
    fn service(&self) -> usize;
    /// How long the thread may sleep before a timer is due (`None`: no timer).
    fn due_in(&self) -> Option<Duration>;
    /// How long an idle thread spins before it starts yielding (default
    /// [`SPIN_TIME`]).
    fn spin_time(&self) -> Duration {
        SPIN_TIME
    }
    /// How long an idle thread yields after spinning, before it blocks (default
    /// [`YIELD_TIME`]).
    fn yield_time(&self) -> Duration {
        YIELD_TIME
    }
    /// The ingress an idle thread blocks in instead of parking (default: none; a
    /// queued frame unparks the thread).
    fn idle_ingress(&self) -> Option<Arc<dyn Ingress>> {
        None
    }
    /// Whether an application thread serviced the target within the last
    /// [`ASSIST_NAP`] (busy polling): an idle device thread then naps for that long
    /// instead of competing with it for the CPU and the ingress (default: never).
    fn assisted(&self) -> bool {
        false
    }
    /// Naps for at most `d` while an application thread assists ([`Service::assisted`]):
    /// a nap that ends early when the application stops assisting (default: a
    /// sleep of `d`).
    fn nap(&self, d: Duration) {
        thread::sleep(d);
    }
    /// Called when the thread's longest wait in the ingress ([`MAX_PARK`]) ended by
    /// its timeout: frames found queued then waited for it (a missed wake-up; the
    /// target counts them). Default: nothing.
    fn parked_past_frames(&self) {}
}

/// A source of received frames that the device reads when it is serviced (instead of
/// another thread pushing them into its [`RxQueue`]).
pub trait Ingress: Send + Sync {
    /// Moves the frames that have arrived into the device's receive queue without
    /// blocking; returns how many.
    fn poll(&self) -> usize;
    /// Blocks until a frame may have arrived, [`Ingress::wake`] is called, or `timeout`
    /// passes; returns false when the wait ended by its timeout alone.
    fn wait(&self, timeout: Duration) -> bool;
    /// Ends a [`Ingress::wait`] in progress (or the next one) early.
    fn wake(&self);
}

/// A device thread; dropping it stops and joins the thread.
pub struct Runner {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl core::fmt::Debug for Runner {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Runner")
            .field("stopped", &self.stop.load(Ordering::Relaxed))
            .finish()
    }
}

impl Runner {
    /// Starts a thread servicing `target` while it lives, woken by `rx`.
    pub fn spawn<T: Service>(
        name: String,
        target: Weak<T>,
        rx: &RxQueue,
    ) -> std::io::Result<Runner> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = thread::Builder::new()
            .name(name)
            .spawn(move || run(target, flag))?;
        rx.set_waker(handle.thread().clone());
        Ok(Runner {
            stop,
            handle: Some(handle),
        })
    }
}

fn run<T: Service>(target: Weak<T>, stop: Arc<AtomicBool>) {
    let mut idle_since: Option<Instant> = None;
    while !stop.load(Ordering::Acquire) {
        let (work, due, spin, yields, assisted) = match target.upgrade() {
            Some(t) => (
                t.service(),
                t.due_in(),
                t.spin_time(),
                t.yield_time(),
                t.assisted(),
            ),
            None => break,
        };
        if work > 0 {
            idle_since = None;
            continue;
        }
        if assisted {
            // Not a park: the frames the application reads would unpark it.
            match target.upgrade() {
                Some(t) => t.nap(due.map_or(ASSIST_NAP, |d| d.min(ASSIST_NAP))),
                None => break,
            }
            idle_since = None;
            continue;
        }
        let idle = idle_since.get_or_insert_with(Instant::now).elapsed();
        if idle < spin {
            std::hint::spin_loop();
        } else if idle < spin + yields {
            thread::yield_now();
        } else {
            let timeout = due.map_or(MAX_PARK, |d| d.min(MAX_PARK));
            // No strong reference to the device while asleep (its last handle may go).
            let ingress = match target.upgrade() {
                Some(t) => t.idle_ingress(),
                None => break,
            };
            match ingress {
                Some(i) => {
                    if !i.wait(timeout) && timeout == MAX_PARK {
                        match target.upgrade() {
                            Some(t) => t.parked_past_frames(),
                            None => break,
                        }
                    }
                }
                None => thread::park_timeout(timeout),
            }
            // Woken by a frame (or a timer): spin again before the next park.
            idle_since = None;
        }
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            // The last handle may be dropped on the device thread itself (it held a
            // temporary strong reference): it exits on its own.
            if h.thread().id() != thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

//! What packets travel on: an in-process Ethernet fabric connecting simulated NICs.
//!
//! Every frame on the fabric is a real RoCEv2 Ethernet frame (Ethernet II, IPv4, UDP to
//! port 4791, BTH ... ICRC), built by the sending device with [`crate::wire::frame`]
//! and checked (structure, IPv4 checksum, ICRC) by the receiving device, which drops
//! and counts whatever fails. The fabric itself is a learning-free switch: it forwards a
//! frame to the device port whose MAC address is the frame's destination and drops
//! (and counts) frames for unknown addresses.
//!
//! Pieces:
//!
//! * [`FramePool`]: frame buffers of [`MAX_FRAME`] bytes, recycled so that the steady
//!   state of the packet path allocates nothing;
//! * [`RxQueue`]: a device's receive queue (frames waiting for the device) and the
//!   waker of its thread in threaded mode;
//! * [`Uplink`]: what a device transmits into;
//! * [`Fabric`]: the switch, and the driver of deterministic runs ([`Fabric::step`],
//!   [`Fabric::run_until_idle`], [`Fabric::advance`]).
//!
//! Execution: in deterministic mode nothing moves on its own: a send
//! doorbell is serviced on the ringing thread and leaves its frames in the
//! destinations' receive queues; [`Fabric::step`] lets every attached device (in attach
//! order) process the frames waiting for it, which may queue more frames, and
//! [`Fabric::run_until_idle`] steps until no frame is left. In threaded mode each device
//! has a thread that the fabric wakes when it queues a frame for it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::thread::Thread;
use std::time::Duration;

use crate::device::{Sim, WeakSim};

pub mod faults;
pub mod pcap;
pub mod udp;

pub use faults::{FaultStats, Impairments, Stage};
pub use pcap::PcapWriter;

/// The largest frame the simulator builds: Ethernet, IPv4, UDP, BTH, the largest
/// extension header set (RETH + ImmDt, or AtomicETH), a 4096-byte payload, pad and ICRC,
/// rounded up.
pub const MAX_FRAME: usize = 4352;

/// Most buffers a pool keeps for reuse; more are freed.
const MAX_POOLED: usize = 1 << 16;

/// Most frames waiting in one device's receive queue; more are dropped and counted.
pub const RX_QUEUE_LIMIT: usize = 1 << 17;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing panics while holding these locks; a poisoned lock still holds
    // consistent data.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Recycled frame buffers.
#[derive(Debug, Default)]
pub struct FramePool {
    free: Mutex<Vec<Vec<u8>>>,
    allocated: AtomicU64,
}

impl FramePool {
    /// An empty pool.
    pub fn new() -> Arc<Self> {
        Arc::new(FramePool::default())
    }

    /// An empty buffer with room for [`MAX_FRAME`] bytes (reused if one is free).
    pub fn get(&self) -> Vec<u8> {
        if let Some(b) = lock(&self.free).pop() {
            return b;
        }
        self.allocated.fetch_add(1, Ordering::Relaxed);
        Vec::with_capacity(MAX_FRAME)
    }

    /// Moves up to `n` free buffers into `out` under one lock (none are allocated:
    /// `out` may stay as it was when the pool is empty).
    pub fn take(&self, out: &mut Vec<Vec<u8>>, n: usize) {
        let mut free = lock(&self.free);
        let k = free.len().min(n);
        let at = free.len() - k;
        out.extend(free.drain(at..));
    }

    /// Gives a buffer back for reuse.
    pub fn put(&self, mut buf: Vec<u8>) {
        if buf.capacity() < MAX_FRAME {
            return;
        }
        buf.clear();
        let mut free = lock(&self.free);
        if free.len() < MAX_POOLED {
            free.push(buf);
        }
    }

    /// Gives every buffer of `bufs` back for reuse under one lock (`bufs` is left
    /// empty with its capacity).
    pub fn put_all(&self, bufs: &mut Vec<Vec<u8>>) {
        let mut free = lock(&self.free);
        for mut buf in bufs.drain(..) {
            if buf.capacity() >= MAX_FRAME && free.len() < MAX_POOLED {
                buf.clear();
                free.push(buf);
            }
        }
    }

    /// Buffers allocated since the pool was made (a steady state stops this count).
    pub fn allocated(&self) -> u64 {
        self.allocated.load(Ordering::Relaxed)
    }

    /// Buffers waiting for reuse.
    pub fn free(&self) -> usize {
        lock(&self.free).len()
    }
}

/// A device's queue of received frames.
#[derive(Debug, Default)]
pub struct RxQueue {
    frames: Mutex<VecDeque<Vec<u8>>>,
    /// Frames queued (read without the lock by an idle device thread).
    count: AtomicUsize,
    thread: OnceLock<Thread>,
    dropped: AtomicU64,
}

impl RxQueue {
    /// An empty queue.
    pub fn new() -> Arc<Self> {
        Arc::new(RxQueue::default())
    }

    /// Queues a frame and wakes the device's thread (if it has one). A full queue
    /// gives the frame back (the caller recycles it), counted as dropped.
    pub fn push(&self, frame: Vec<u8>) -> Result<(), Vec<u8>> {
        {
            let mut q = lock(&self.frames);
            if q.len() >= RX_QUEUE_LIMIT {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return Err(frame);
            }
            q.push_back(frame);
            self.count.fetch_add(1, Ordering::Release);
        }
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
        Ok(())
    }

    /// Queues every frame of `frames`, in order, under one lock, and wakes the device's
    /// thread once. Frames that do not fit (a full queue) stay in `frames`, counted as
    /// dropped, for the caller to recycle; the others are moved out. Returns how many
    /// were queued. Into an empty queue, from storage at least as large as the
    /// queue's, the batch moves as a whole: `frames` and the queue trade their
    /// storage (`frames` is left empty either way; the queue never shrinks).
    pub fn push_all(&self, frames: &mut Vec<Vec<u8>>) -> usize {
        let n = {
            let mut q = lock(&self.frames);
            let n = if q.is_empty()
                && frames.len() <= RX_QUEUE_LIMIT
                && frames.capacity() >= q.capacity()
            {
                // The whole batch becomes the queue, and the queue's empty storage
                // the caller's (both conversions take the buffer as it is: no copy
                // of the frames, no allocation). Only for storage at least as large
                // as the queue's: the queue never shrinks (single frames pushed
                // later find the room a warmed-up queue had).
                let n = frames.len();
                let batch = VecDeque::from(std::mem::take(frames));
                *frames = Vec::from(std::mem::replace(&mut *q, batch));
                n
            } else {
                let room = RX_QUEUE_LIMIT.saturating_sub(q.len());
                let n = frames.len().min(room);
                q.reserve(n);
                for f in frames.drain(..n) {
                    q.push_back(f);
                }
                n
            };
            self.count.fetch_add(n, Ordering::Release);
            n
        };
        if !frames.is_empty() {
            self.dropped
                .fetch_add(frames.len() as u64, Ordering::Relaxed);
        }
        if n > 0 {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
        n
    }

    /// Wakes the device's thread (if it has one) without queueing anything.
    pub fn wake(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    /// The oldest frame, if any.
    pub fn pop(&self) -> Option<Vec<u8>> {
        if self.is_empty() {
            return None;
        }
        let f = lock(&self.frames).pop_front();
        if f.is_some() {
            self.count.fetch_sub(1, Ordering::Release);
        }
        f
    }

    /// Moves every waiting frame, oldest first, to the end of `out` under one lock.
    /// Returns how many. An empty `out` with at least the queue's capacity trades
    /// its storage with the queue's (no frame copied); otherwise the frames are
    /// appended. The queue's capacity never shrinks; no allocation once both
    /// storages have grown to the largest batch.
    pub fn take_all(&self, out: &mut VecDeque<Vec<u8>>) -> usize {
        if self.is_empty() {
            return 0;
        }
        let mut q = lock(&self.frames);
        let n = q.len();
        if out.is_empty() && out.capacity() >= q.capacity() {
            // The queue's storage becomes `out`'s and `out`'s (empty, at least as
            // large: the queue never shrinks) the queue's.
            std::mem::swap(&mut *q, out);
        } else {
            out.extend(q.drain(..));
        }
        self.count.fetch_sub(n, Ordering::Release);
        n
    }

    /// Frames waiting.
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Whether no frame is waiting (no lock taken).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Frames dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Registers the thread to wake when a frame arrives (threaded mode; once).
    pub fn set_waker(&self, t: Thread) {
        let _ = self.thread.set(t);
    }
}

/// Where a device sends its frames.
pub trait Uplink: Send + Sync {
    /// Takes a finished frame (a buffer from the device's pool) and delivers it, or
    /// drops and counts it.
    fn transmit(&self, frame: Vec<u8>);

    /// Takes every frame of `frames`, in order, as [`Uplink::transmit`] would one by
    /// one (`frames` is left empty with its capacity). An uplink may deliver a batch
    /// more cheaply (the fabric: one lock for a run of frames to one port).
    fn transmit_batch(&self, frames: &mut Vec<Vec<u8>>) {
        for f in frames.drain(..) {
            self.transmit(f);
        }
    }
}

/// Counters of a fabric.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FabricStats {
    /// Frames forwarded to a port.
    pub forwarded: u64,
    /// Frames dropped: no attached port has the destination MAC.
    pub no_route: u64,
    /// Frames dropped: shorter than an Ethernet header.
    pub runt: u64,
    /// Frames dropped: the destination's receive queue was full.
    pub queue_full: u64,
    /// Frames injected with [`Fabric::inject`].
    pub injected: u64,
}

#[derive(Default)]
struct Counters {
    forwarded: AtomicU64,
    no_route: AtomicU64,
    runt: AtomicU64,
    queue_full: AtomicU64,
    injected: AtomicU64,
}

struct Route {
    mac: [u8; 6],
    rx: Arc<RxQueue>,
}

struct FabricInner {
    routes: RwLock<Vec<Route>>,
    devices: Mutex<Vec<WeakSim>>,
    pool: Arc<FramePool>,
    counters: Counters,
    capture: Mutex<Option<(usize, Vec<Vec<u8>>)>>,
    /// The last frames transmitted into the fabric, before the link middleware (a
    /// ring of at most `.0` frames), for diagnostics.
    history: Mutex<Option<(usize, VecDeque<Vec<u8>>)>>,
    /// Whether `history` is set.
    remembering: AtomicBool,
    pcap: RwLock<Option<Arc<PcapWriter>>>,
    /// Whether `capture` or `pcap` is set: an untapped fabric forwards a frame without
    /// taking their locks.
    tapped: AtomicBool,
    seed: u64,
    /// Link middleware (loss, duplication, reordering, delay, corruption, ...).
    faults: faults::Faults,
}

impl FabricInner {
    fn forward(&self, frame: Vec<u8>) {
        if self.remembering.load(Ordering::Acquire) {
            self.remember(&frame);
        }
        if self.faults.active() {
            return self.faults.forward(frame, &mut |f| self.deliver(f));
        }
        self.deliver(frame);
    }

    /// Forwards a frame that passed the middleware.
    fn deliver(&self, frame: Vec<u8>) {
        if frame.len() < 14 {
            self.counters.runt.fetch_add(1, Ordering::Relaxed);
            self.pool.put(frame);
            return;
        }
        if self.tapped.load(Ordering::Acquire) {
            self.tap(&frame);
        }
        let mut dst = [0u8; 6];
        dst.copy_from_slice(&frame[..6]);
        let routes = self.routes.read().unwrap_or_else(|e| e.into_inner());
        match routes.iter().find(|r| r.mac == dst) {
            Some(r) => match r.rx.push(frame) {
                Ok(()) => {
                    self.counters.forwarded.fetch_add(1, Ordering::Relaxed);
                }
                Err(f) => {
                    self.counters.queue_full.fetch_add(1, Ordering::Relaxed);
                    self.pool.put(f);
                }
            },
            None => {
                drop(routes);
                self.counters.no_route.fetch_add(1, Ordering::Relaxed);
                self.pool.put(frame);
            }
        }
    }

    /// Gives a forwarded frame to the pcap writer and the capture, if set.
    fn tap(&self, frame: &[u8]) {
        if let Some(p) = &*self.pcap.read().unwrap_or_else(|e| e.into_inner()) {
            p.write(frame);
        }
        let mut cap = lock(&self.capture);
        if let Some((limit, frames)) = cap.as_mut() {
            if frames.len() < *limit {
                frames.push(frame.to_vec());
            }
        }
    }

    /// Keeps a transmitted frame in the history ring, if set.
    fn remember(&self, frame: &[u8]) {
        let mut hist = lock(&self.history);
        if let Some((limit, frames)) = hist.as_mut() {
            // The oldest buffer is reused once the ring is full: no allocation then.
            let mut b = if frames.len() >= *limit {
                frames.pop_front().unwrap_or_default()
            } else {
                Vec::with_capacity(frame.len())
            };
            b.clear();
            b.extend_from_slice(frame);
            frames.push_back(b);
        }
    }

    /// Recomputes `tapped` after `capture` or `pcap` changed.
    fn retap(&self) {
        let pcap = self
            .pcap
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
        let capture = lock(&self.capture).is_some();
        self.tapped.store(pcap || capture, Ordering::Release);
    }

    fn sims(&self) -> Vec<Sim> {
        lock(&self.devices)
            .iter()
            .filter_map(WeakSim::upgrade)
            .collect()
    }
}

impl Uplink for FabricInner {
    fn transmit(&self, frame: Vec<u8>) {
        self.forward(frame);
    }

    /// A batch whose frames all go to one port, on a link with no middleware and no
    /// tap (the common case: a QP's burst), is queued with one lookup of the route and
    /// one lock of the receive queue; anything else goes frame by frame through
    /// [`FabricInner::forward`] (middleware, tap, per-frame routing), in order.
    fn transmit_batch(&self, frames: &mut Vec<Vec<u8>>) {
        let plain = !self.faults.active()
            && !self.tapped.load(Ordering::Acquire)
            && !self.remembering.load(Ordering::Acquire);
        let dst = match frames.first() {
            Some(f) if plain && f.len() >= 14 => {
                let mut d = [0u8; 6];
                d.copy_from_slice(&f[..6]);
                d
            }
            _ => {
                for f in frames.drain(..) {
                    self.forward(f);
                }
                return;
            }
        };
        if frames.iter().any(|f| f.len() < 14 || f[..6] != dst) {
            for f in frames.drain(..) {
                self.forward(f);
            }
            return;
        }
        let routes = self.routes.read().unwrap_or_else(|e| e.into_inner());
        match routes.iter().find(|r| r.mac == dst) {
            Some(r) => {
                let n = r.rx.push_all(frames);
                self.counters
                    .forwarded
                    .fetch_add(n as u64, Ordering::Relaxed);
                drop(routes);
                if !frames.is_empty() {
                    self.counters
                        .queue_full
                        .fetch_add(frames.len() as u64, Ordering::Relaxed);
                    self.pool.put_all(frames);
                }
            }
            None => {
                drop(routes);
                self.counters
                    .no_route
                    .fetch_add(frames.len() as u64, Ordering::Relaxed);
                self.pool.put_all(frames);
            }
        }
    }
}

/// An in-process Ethernet switch connecting simulated NICs by their MAC addresses.
///
/// Cloning gives another handle to the same fabric. The fabric does not keep devices
/// alive (it holds weak handles); frames for a device that was dropped wait in its
/// orphaned receive queue until that queue fills, then count as `queue_full`.
#[derive(Clone)]
pub struct Fabric {
    inner: Arc<FabricInner>,
}

impl Default for Fabric {
    fn default() -> Self {
        Fabric::new(0)
    }
}

impl core::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Fabric")
            .field("seed", &self.inner.seed)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Most steps [`Fabric::run_until_idle`] takes before giving up (a livelock guard).
pub const MAX_STEPS: usize = 1_000_000;

impl Fabric {
    /// An empty fabric. `seed` is recorded for the reproducibility of deterministic
    /// runs (future randomised middleware draws from it); print it when a test fails.
    pub fn new(seed: u64) -> Self {
        let pcap = PcapWriter::from_env();
        Fabric {
            inner: Arc::new(FabricInner {
                routes: RwLock::new(Vec::new()),
                devices: Mutex::new(Vec::new()),
                pool: FramePool::new(),
                counters: Counters::default(),
                capture: Mutex::new(None),
                history: Mutex::new(None),
                remembering: AtomicBool::new(false),
                tapped: AtomicBool::new(pcap.is_some()),
                pcap: RwLock::new(pcap),
                seed,
                faults: faults::Faults::new(),
            }),
        }
    }

    /// The seed the fabric was made with.
    pub fn seed(&self) -> u64 {
        self.inner.seed
    }

    /// Connects every port of `sim` (by its MAC address) to the fabric. The device
    /// transmits into the fabric from now on and shares the fabric's frame pool.
    pub fn attach(&self, sim: &Sim) {
        let rx = sim.rx_queue();
        {
            let mut routes = self.inner.routes.write().unwrap_or_else(|e| e.into_inner());
            for mac in sim.port_macs() {
                routes.retain(|r| r.mac != mac);
                routes.push(Route {
                    mac,
                    rx: rx.clone(),
                });
            }
        }
        lock(&self.inner.devices).push(sim.downgrade());
        self.inner.faults.set_clock(sim.clock());
        if sim.threaded() {
            faults::start_wire_thread(&self.inner);
        }
        let uplink: Arc<dyn Uplink> = self.inner.clone();
        sim.set_uplink(Some(uplink), self.inner.pool.clone());
    }

    /// Sends raw bytes into the fabric as if a device had transmitted them (for tests:
    /// malformed or corrupted frames).
    pub fn inject(&self, bytes: &[u8]) {
        self.inner.counters.injected.fetch_add(1, Ordering::Relaxed);
        let mut b = self.inner.pool.get();
        b.extend_from_slice(bytes);
        self.inner.forward(b);
    }

    /// Starts keeping a copy of up to `limit` forwarded frames (`None` stops and
    /// discards them).
    pub fn capture(&self, limit: Option<usize>) {
        *lock(&self.inner.capture) = limit.map(|l| (l, Vec::new()));
        self.inner.retap();
    }

    /// Starts keeping the last `n` frames devices transmitted or tests injected, as
    /// they entered the fabric (before loss, delay or corruption by the link
    /// middleware), for a diagnostic when a test fails; `None` stops and discards them.
    pub fn keep_last(&self, n: Option<usize>) {
        let n = n.filter(|&n| n > 0);
        *lock(&self.inner.history) = n.map(|n| (n, VecDeque::new()));
        self.inner.remembering.store(n.is_some(), Ordering::Release);
    }

    /// The last frames transmitted, oldest first, as kept by [`Fabric::keep_last`].
    pub fn last_frames(&self) -> Vec<Vec<u8>> {
        match lock(&self.inner.history).as_ref() {
            Some((_, frames)) => frames.iter().cloned().collect(),
            None => Vec::new(),
        }
    }

    /// Writes every forwarded or injected frame to `writer` (`None`: stops). A fabric
    /// starts capturing to the file named by `FERROVERBS_PCAP` if that is set
    /// ([`pcap`]). Frames a device sends to itself do not cross the fabric and are not
    /// captured.
    pub fn set_pcap(&self, writer: Option<Arc<PcapWriter>>) {
        *self.inner.pcap.write().unwrap_or_else(|e| e.into_inner()) = writer;
        self.inner.retap();
    }

    /// The pcap writer this fabric captures to, if any.
    pub fn pcap(&self) -> Option<Arc<PcapWriter>> {
        self.inner
            .pcap
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The frames captured so far (the capture continues, empty).
    pub fn take_captured(&self) -> Vec<Vec<u8>> {
        match lock(&self.inner.capture).as_mut() {
            Some((_, frames)) => std::mem::take(frames),
            None => Vec::new(),
        }
    }

    /// One deterministic round: every attached device, in attach order, processes the
    /// frames waiting in its receive queue and its due timers. Returns the work done
    /// (frames processed, timers fired); 0 means the fabric is idle at this instant.
    pub fn step(&self) -> usize {
        // Frames the link middleware delayed (now due) or held back go first.
        let released = self.inner.faults.release(&mut |f| self.inner.deliver(f));
        // No allocation: the devices are visited under the list's lock (servicing a
        // device only takes its own lock, the routes' and receive queues' locks).
        let devices = lock(&self.inner.devices);
        released
            + devices
                .iter()
                .filter_map(WeakSim::upgrade)
                .map(|s| s.service())
                .sum::<usize>()
    }

    /// Steps until a round does nothing (at most [`MAX_STEPS`] rounds). Returns the
    /// total work done. Device time does not move.
    pub fn run_until_idle(&self) -> usize {
        let mut total = 0;
        for _ in 0..MAX_STEPS {
            let n = self.step();
            if n == 0 {
                break;
            }
            total += n;
        }
        total
    }

    /// Moves the virtual clock of every attached device forward by `d`, then runs until
    /// idle. Returns the work done.
    pub fn advance(&self, d: Duration) -> usize {
        for s in self.inner.sims() {
            s.clock().advance(d);
        }
        self.run_until_idle()
    }

    /// Runs until idle, then, while some device has a timer pending, moves virtual time
    /// to the earliest one (never more than `limit` in total) and runs again. Returns the
    /// work done.
    pub fn run_timers(&self, limit: Duration) -> usize {
        let mut total = self.run_until_idle();
        let mut left = limit;
        while let Some(wait) = self.next_event() {
            if wait > left {
                break;
            }
            left -= wait;
            for s in &self.inner.sims() {
                s.clock().advance(wait);
            }
            total += self.run_until_idle();
        }
        total
    }

    /// How long from now until something is due on the fabric: the earliest timer of
    /// an attached device or the release of a frame the link middleware delays. `None`
    /// when nothing is pending (an idle fabric stays idle until someone posts).
    pub fn next_event(&self) -> Option<Duration> {
        let sims = self.inner.sims();
        let wire = self.inner.faults.next_release().and_then(|t| {
            let now = sims.first()?.clock().now();
            Some(Duration::from_nanos(t).saturating_sub(now))
        });
        sims.iter()
            .filter_map(|s| s.next_deadline().map(|t| (t, s.clock().now())))
            .map(|(t, now)| t.saturating_sub(now))
            .chain(wire)
            .min()
    }

    /// Counters.
    pub fn stats(&self) -> FabricStats {
        let c = &self.inner.counters;
        FabricStats {
            forwarded: c.forwarded.load(Ordering::Relaxed),
            no_route: c.no_route.load(Ordering::Relaxed),
            runt: c.runt.load(Ordering::Relaxed),
            queue_full: c.queue_full.load(Ordering::Relaxed),
            injected: c.injected.load(Ordering::Relaxed),
        }
    }

    /// The shared frame pool.
    pub fn pool(&self) -> &Arc<FramePool> {
        &self.inner.pool
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_reuses_buffers() {
        let p = FramePool::new();
        let a = p.get();
        assert!(a.capacity() >= MAX_FRAME);
        p.put(a);
        let b = p.get();
        assert_eq!(p.allocated(), 1);
        p.put(b);
        p.put(Vec::new());
        assert_eq!(p.free(), 1);
    }

    #[test]
    fn batches_move_every_frame_in_order_and_recycle_under_one_lock() {
        let q = RxQueue::new();
        for i in 0..5u8 {
            q.push(vec![i]).unwrap();
        }
        let mut out = VecDeque::new();
        assert_eq!(q.take_all(&mut out), 5);
        assert!(q.is_empty());
        q.push(vec![9]).unwrap();
        assert_eq!(q.take_all(&mut out), 1);
        assert_eq!(
            out.iter().map(|f| f[0]).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4, 9]
        );
        assert_eq!(q.take_all(&mut out), 0);
        let p = FramePool::new();
        let mut spent = vec![p.get(), p.get(), vec![1]];
        p.put_all(&mut spent);
        assert!(spent.is_empty());
        assert_eq!(p.free(), 2, "short buffers are not kept");
    }

    #[test]
    fn whole_batches_trade_storage_and_keep_order_counts_and_capacity() {
        // Into an empty queue (the batch becomes the queue), then behind frames
        // already queued (appended); out of the queue into an empty `out` (storage
        // traded) and into a non-empty one (appended): every frame once, in order.
        let q = RxQueue::new();
        let mut batch: Vec<Vec<u8>> = Vec::with_capacity(64);
        batch.extend((0..5u8).map(|i| vec![i]));
        assert_eq!(q.push_all(&mut batch), 5);
        assert!(batch.is_empty());
        assert_eq!(q.len(), 5);
        batch.extend((5..8u8).map(|i| vec![i]));
        assert_eq!(q.push_all(&mut batch), 3);
        assert!(batch.is_empty());
        q.push(vec![8]).unwrap();
        assert_eq!(q.len(), 9);
        let qcap = |q: &RxQueue| lock(&q.frames).capacity();
        let before = qcap(&q);
        assert!(before >= 64, "the batch's storage became the queue's");
        let mut out = VecDeque::with_capacity(before);
        assert_eq!(q.take_all(&mut out), 9);
        assert!(qcap(&q) >= before, "the queue never shrinks");
        assert!(q.is_empty());
        assert_eq!(q.take_all(&mut out), 0);
        let mut more = vec![vec![9u8], vec![10]];
        assert_eq!(q.push_all(&mut more), 2);
        assert_eq!(q.take_all(&mut out), 2, "appended behind what `out` holds");
        assert_eq!(
            out.iter().map(|f| f[0]).collect::<Vec<_>>(),
            (0..=10).collect::<Vec<u8>>()
        );
        assert_eq!((q.len(), q.dropped()), (0, 0));
        // Storage goes round (batch -> queue -> out -> queue -> batch): once every
        // storage has held the largest batch, a round allocates nothing new, which
        // the counting allocator of `tests/sim_noalloc.rs` checks on live traffic;
        // here: the capacity a whole batch brought stays in circulation.
        let cap = {
            let mut big: Vec<Vec<u8>> = Vec::with_capacity(100);
            big.extend((0..100u8).map(|i| vec![i]));
            let c = big.capacity();
            assert_eq!(q.push_all(&mut big), 100);
            c
        };
        assert!(qcap(&q) >= cap);
        let mut small = VecDeque::new();
        small.push_back(vec![7u8]);
        small.pop_front();
        let mut out2 = VecDeque::with_capacity(2 * cap);
        assert_eq!(q.take_all(&mut out2), 100);
        assert!(qcap(&q) >= cap, "the queue never shrinks");
        // A smaller empty `out` is appended to (its storage would shrink the queue).
        let mut batch3: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i]).collect();
        assert_eq!(q.push_all(&mut batch3), 3);
        assert!(qcap(&q) >= cap, "the queue never shrinks");
        assert_eq!(q.take_all(&mut small), 3);
        assert!(qcap(&q) >= cap, "the queue never shrinks");
        assert_eq!(small.iter().map(|f| f[0]).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(out2.capacity() >= cap);
        assert_eq!(out2.front(), Some(&vec![0u8]));
        assert_eq!(out2.back(), Some(&vec![99u8]));
    }

    #[test]
    fn a_batch_is_queued_in_order_and_what_does_not_fit_is_handed_back() {
        let q = RxQueue::new();
        for i in 0..(RX_QUEUE_LIMIT - 2) {
            q.push(vec![i as u8]).unwrap();
        }
        let mut batch = vec![vec![1u8], vec![2], vec![3], vec![4]];
        assert_eq!(q.push_all(&mut batch), 2);
        assert_eq!(batch, vec![vec![3u8], vec![4]]);
        assert_eq!((q.len(), q.dropped()), (RX_QUEUE_LIMIT, 2));
        let mut out = VecDeque::new();
        q.take_all(&mut out);
        assert_eq!(out.back(), Some(&vec![2u8]));
        let mut none = Vec::new();
        assert_eq!(q.push_all(&mut none), 0);
    }

    #[test]
    fn batches_take_the_same_routes_as_single_frames() {
        // To an unknown port, mixed with runts: counted as frame by frame.
        let f = Fabric::new(1);
        let mut batch = vec![vec![0x02u8; 60], vec![0x02; 60], vec![0u8; 10]];
        f.inner.transmit_batch(&mut batch);
        assert!(batch.is_empty());
        let s = f.stats();
        assert_eq!((s.no_route, s.runt, s.forwarded), (2, 1, 0));
        let mut same = vec![vec![0x04u8; 60], vec![0x04; 60]];
        f.inner.transmit_batch(&mut same);
        assert_eq!(f.stats().no_route, 4);
        assert_eq!(f.pool().free(), 0, "short buffers are not pooled");
    }

    #[test]
    fn rx_queue_bounds() {
        let q = RxQueue::new();
        assert!(q.is_empty());
        q.push(vec![1]).unwrap();
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop(), Some(vec![1]));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn unknown_destinations_and_runts_are_counted() {
        let f = Fabric::new(1);
        f.inject(&[0u8; 10]);
        f.inject(&[0x02; 60]);
        let s = f.stats();
        assert_eq!((s.runt, s.no_route, s.injected, s.forwarded), (1, 1, 2, 0));
    }
}

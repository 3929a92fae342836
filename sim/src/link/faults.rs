//! Link middleware: seeded, composable impairments on one direction of a fabric link.
//!
//! Modelled on smoltcp's `phy` wrappers (`FaultInjector`, `Tracer`, ...), which wrap a
//! device and decide per packet whether to drop, corrupt or pass it: here a chain of
//! [`Stage`]s sits on a directed link of the [`Fabric`] (frames from one MAC address
//! to another; see [`Fabric::impair`]) and every frame crossing that link goes through
//! the stages in order. A stage may drop a frame, copy it, flip a bit in it, hold it
//! back behind the next frame, or postpone it; what leaves the last stage is forwarded
//! at once or, if it was given a later release time, when device time reaches it.
//!
//! * **Seeded.** Each link draws from its own SplitMix64 generator seeded with the
//!   fabric's seed and the link's two addresses, so the fault schedule of a link depends
//!   only on the seed and the frames that cross it. A deterministic run (virtual time,
//!   devices stepped in attach order) is reproduced exactly from the fabric's seed.
//! * **Time.** Delays, jitter, rate limits and outage windows are in device time: the
//!   clock of the first device attached to the fabric (virtual time in deterministic
//!   mode, so a 100 ms delay costs nothing; [`Fabric::advance`] and
//!   [`Fabric::run_timers`] release delayed frames). Delayed frames are released by
//!   [`Fabric::step`] and by any frame the fabric forwards; a fabric with threaded
//!   devices (real time, nothing steps it) has a wire thread that releases them when
//!   due (and frames held for reordering within a millisecond).
//! * **Corruption** flips one bit after the UDP header (BTH, extension headers,
//!   payload, pad or ICRC), never in the BTH byte the ICRC masks (FECN/BECN), so every
//!   corrupted frame fails the receiver's ICRC check (or, if the flipped bit makes the
//!   BTH itself invalid, its structure check) and is dropped and counted there
//!   (`DataPathStats::rx_bad_icrc` / `rx_malformed`).
//! * **Reordering** holds a frame back and releases it right after the next frame on
//!   the same link (or at the next [`Fabric::step`] if none comes).
//! * **Partitions**: [`Fabric::partition`] cuts a direction until it is healed, and
//!   [`Stage::Outage`] cuts it for a window of device time.
//! * **Rate limit**: the link serializes frames at a number of bytes per second; a
//!   frame that would wait longer than the stage's backlog is dropped (a full queue).
//!
//! With no impairment configured the fabric's forwarding path is unchanged (one atomic
//! load) and allocates nothing.

use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::Thread;
use std::time::Duration;

use super::{lock, Fabric, FabricInner};
use crate::clock::Clock;

/// A MAC address, naming one end of a link.
pub type Mac = [u8; 6];

/// Byte offset of the BTH in a RoCEv2 frame over IPv4 (Ethernet 14 + IPv4 20 + UDP 8).
const BTH_OFFSET: usize = 42;
/// The BTH byte the ICRC masks (FECN, BECN, reserved): a flip there goes unnoticed.
const MASKED_BTH_BYTE: usize = BTH_OFFSET + 4;

/// One impairment of a link direction. Probabilities are per frame, in `0.0..=1.0`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Stage {
    /// Drop a frame with probability `p`.
    Loss(f64),
    /// Deliver a frame twice with probability `p` (the copy right after the original).
    Duplicate(f64),
    /// Hold a frame back with probability `p` and deliver it after the next frame on
    /// the link (one frame of reordering distance).
    Reorder(f64),
    /// Postpone every frame by `delay` plus a uniformly drawn `0..jitter` (device
    /// time). Jitter larger than the gap between frames reorders them.
    Delay {
        /// Fixed delay.
        delay: Duration,
        /// Upper bound of the random extra delay.
        jitter: Duration,
    },
    /// Flip one random bit (after the UDP header, never in the ICRC-masked BTH byte)
    /// with probability `p`.
    Corrupt(f64),
    /// Drop every frame while device time is in `from..until`.
    Outage {
        /// Start of the outage (device time since the clock's zero).
        from: Duration,
        /// End of the outage.
        until: Duration,
    },
    /// Drop `count` frames starting with the `from`-th frame to enter the link
    /// (counted from 0 since the link's impairments were set): targeted, schedule-free
    /// loss for scenarios ("lose the second packet of this WRITE").
    DropFrames {
        /// Index of the first frame dropped.
        from: u64,
        /// Frames dropped.
        count: u64,
    },
    /// The attaching NIC's port 1 loses its physical link at device time `from` and
    /// gets it back at `until` ([`Sim::set_link`](crate::Sim::set_link): a
    /// PORT_CHANGE event each time, and the port sends and receives nothing
    /// meanwhile). Acted on by the UDP link ([`super::udp::UdpLink::attach`]); frames
    /// pass this stage unchanged (the device drops them).
    LinkDown {
        /// When the link goes down (device time since the clock's zero).
        from: Duration,
        /// When it comes back.
        until: Duration,
    },
    /// Serialize frames at `bytes_per_sec`; a frame that would wait more than
    /// `backlog` behind earlier ones is dropped.
    RateLimit {
        /// Link rate in bytes per second (0: no limit).
        bytes_per_sec: u64,
        /// Longest queueing delay before frames are dropped.
        backlog: Duration,
    },
}

/// A chain of stages for one link direction, applied in order. Built with the
/// methods below, e.g. `Impairments::new().loss(0.05).duplicate(0.01).reorder(0.02)`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Impairments {
    /// The stages, in the order a frame crosses them.
    pub stages: Vec<Stage>,
    /// The seed of the link's generator (with the link's addresses); `None`: the
    /// fabric's seed.
    pub seed: Option<u64>,
}

impl Impairments {
    /// No impairment.
    pub fn new() -> Self {
        Impairments::default()
    }

    /// Draws the fault schedule from `seed` instead of the fabric's seed.
    pub fn seeded(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Appends a stage.
    pub fn then(mut self, s: Stage) -> Self {
        self.stages.push(s);
        self
    }

    /// Appends [`Stage::Loss`].
    pub fn loss(self, p: f64) -> Self {
        self.then(Stage::Loss(p))
    }

    /// Appends [`Stage::Duplicate`].
    pub fn duplicate(self, p: f64) -> Self {
        self.then(Stage::Duplicate(p))
    }

    /// Appends [`Stage::Reorder`].
    pub fn reorder(self, p: f64) -> Self {
        self.then(Stage::Reorder(p))
    }

    /// Appends [`Stage::Delay`].
    pub fn delay(self, delay: Duration, jitter: Duration) -> Self {
        self.then(Stage::Delay { delay, jitter })
    }

    /// Appends [`Stage::Corrupt`].
    pub fn corrupt(self, p: f64) -> Self {
        self.then(Stage::Corrupt(p))
    }

    /// Appends [`Stage::Outage`].
    pub fn outage(self, from: Duration, until: Duration) -> Self {
        self.then(Stage::Outage { from, until })
    }

    /// Appends [`Stage::LinkDown`].
    pub fn link_down(self, from: Duration, until: Duration) -> Self {
        self.then(Stage::LinkDown { from, until })
    }

    /// Appends [`Stage::DropFrames`].
    pub fn drop_frames(self, from: u64, count: u64) -> Self {
        self.then(Stage::DropFrames { from, count })
    }

    /// Appends [`Stage::RateLimit`].
    pub fn rate_limit(self, bytes_per_sec: u64, backlog: Duration) -> Self {
        self.then(Stage::RateLimit {
            bytes_per_sec,
            backlog,
        })
    }
}

/// The environment variable whose [`Impairments`] spec a UDP link applies to its
/// egress when its configuration names none (`FERROVERBS_IMPAIR=loss=0.01,seed=7`).
pub const ENV_VAR: &str = "FERROVERBS_IMPAIR";

impl std::str::FromStr for Impairments {
    type Err = String;

    /// Parses a comma-separated spec, stages in the order written: `loss=P`,
    /// `duplicate=P`, `reorder=P`, `corrupt=P` (probabilities in `0..=1`),
    /// `delay=D` or `delay=D:JITTER` (durations with a unit: `ns`, `us`, `ms`, `s`),
    /// `drop=FROM:COUNT` (frames by index), `down=AT:FOR` (the port's link goes down
    /// at device time `AT` for `FOR`, [`Stage::LinkDown`]),
    /// `rate=BYTES_PER_SEC:BACKLOG`, and `seed=N`. The error names the item that is
    /// wrong.
    fn from_str(spec: &str) -> Result<Self, String> {
        fn prob(k: &str, v: &str) -> Result<f64, String> {
            match v.parse::<f64>() {
                Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
                _ => Err(format!("{k}={v}: expected a probability from 0 to 1")),
            }
        }
        fn dur(k: &str, v: &str) -> Result<Duration, String> {
            let bad = || format!("{k}: {v:?} is not a duration (e.g. 250us, 2ms, 1s)");
            let i = v.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
            let n: u64 = v[..i].parse().map_err(|_| bad())?;
            Ok(match &v[i..] {
                "ns" => Duration::from_nanos(n),
                "us" => Duration::from_micros(n),
                "ms" => Duration::from_millis(n),
                "s" => Duration::from_secs(n),
                _ => return Err(bad()),
            })
        }
        fn pair<'a>(k: &str, v: &'a str) -> Result<(&'a str, &'a str), String> {
            v.split_once(':')
                .ok_or_else(|| format!("{k}={v}: expected two values separated by ':'"))
        }
        let mut imp = Impairments::new();
        for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| format!("{item:?}: expected NAME=VALUE"))?;
            imp = match k {
                "loss" => imp.loss(prob(k, v)?),
                "duplicate" => imp.duplicate(prob(k, v)?),
                "reorder" => imp.reorder(prob(k, v)?),
                "corrupt" => imp.corrupt(prob(k, v)?),
                "delay" => match v.split_once(':') {
                    Some((d, j)) => imp.delay(dur(k, d)?, dur(k, j)?),
                    None => imp.delay(dur(k, v)?, Duration::ZERO),
                },
                "drop" => {
                    let (a, b) = pair(k, v)?;
                    let n = |x: &str| {
                        x.parse::<u64>()
                            .map_err(|_| format!("{k}={v}: {x:?} is not a frame count"))
                    };
                    imp.drop_frames(n(a)?, n(b)?)
                }
                "down" => {
                    let (a, b) = pair(k, v)?;
                    let from = dur(k, a)?;
                    imp.link_down(from, from.saturating_add(dur(k, b)?))
                }
                "rate" => {
                    let (a, b) = pair(k, v)?;
                    let r = a
                        .parse::<u64>()
                        .map_err(|_| format!("{k}={v}: {a:?} is not bytes per second"))?;
                    imp.rate_limit(r, dur(k, b)?)
                }
                "seed" => imp.seeded(
                    v.parse::<u64>()
                        .map_err(|_| format!("seed={v}: expected an unsigned integer"))?,
                ),
                _ => {
                    return Err(format!(
                        "{k:?}: unknown impairment (loss, duplicate, reorder, corrupt, \
                         delay, drop, down, rate, seed)"
                    ))
                }
            };
        }
        Ok(imp)
    }
}

/// What the middleware did, summed over every link of a fabric.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Frames that entered an impaired link.
    pub frames: u64,
    /// Dropped by [`Stage::Loss`].
    pub lost: u64,
    /// Extra copies made by [`Stage::Duplicate`].
    pub duplicated: u64,
    /// Frames held back by [`Stage::Reorder`].
    pub reordered: u64,
    /// Frames given a later release time (delay, jitter, rate limit).
    pub delayed: u64,
    /// Frames with a bit flipped by [`Stage::Corrupt`].
    pub corrupted: u64,
    /// Dropped by a partition or an outage.
    pub partitioned: u64,
    /// Dropped by a rate limit's full backlog.
    pub rate_dropped: u64,
    /// Frames forwarded out of the middleware (copies included).
    pub delivered: u64,
}

#[derive(Default)]
struct Counters {
    frames: AtomicU64,
    lost: AtomicU64,
    duplicated: AtomicU64,
    reordered: AtomicU64,
    delayed: AtomicU64,
    corrupted: AtomicU64,
    partitioned: AtomicU64,
    rate_dropped: AtomicU64,
    delivered: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// SplitMix64 (Steele, Lea, Flood 2014): small, fast, and good enough for fault
/// schedules.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `true` with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next_u64() >> 11) as f64) < p * (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (0 for n = 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

struct Link {
    stages: Vec<Stage>,
    rng: Rng,
    /// A frame held back by a reorder stage.
    held: Option<Vec<u8>>,
    /// When the rate limiter's link is free again (ns).
    free_at: u64,
    /// Cut by [`Fabric::partition`].
    cut: bool,
    /// Frames that entered the link since its stages were set.
    seen: u64,
}

impl Link {
    fn new(seed: u64, from: Mac, to: Mac) -> Link {
        let mut k = seed ^ 0x5851_f42d_4c95_7f2d;
        for b in from.iter().chain(to.iter()) {
            k = (k ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        Link {
            stages: Vec::new(),
            rng: Rng(k),
            held: None,
            free_at: 0,
            cut: false,
            seen: 0,
        }
    }
}

/// A frame released later: ordered by release time, then by arrival.
struct Delayed {
    at: u64,
    seq: u64,
    frame: Vec<u8>,
}

impl PartialEq for Delayed {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Delayed {}
impl PartialOrd for Delayed {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Delayed {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // A max-heap: the earliest release first.
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Default)]
struct State {
    links: HashMap<(Mac, Mac), Link>,
    delayed: BinaryHeap<Delayed>,
    seq: u64,
    /// Frames on their way through the stages (reused).
    work: VecDeque<(Vec<u8>, u64)>,
    /// The stages (and seed) of every direction without impairments of its own
    /// ([`Faults::impair_all`]).
    default: Option<(u64, Vec<Stage>)>,
}

/// The middleware of a fabric (one per fabric; see the module documentation).
#[derive(Default)]
pub(crate) struct Faults {
    /// Some link is impaired, cut, or frames are waiting: frames take the slow path.
    active: AtomicBool,
    state: Mutex<State>,
    clock: OnceLock<Clock>,
    /// Earliest release time of a delayed frame (`u64::MAX`: none).
    next_release: AtomicU64,
    counters: Counters,
    /// The wire thread of a fabric of threaded devices (releases delayed frames).
    wire: OnceLock<Thread>,
}

impl Faults {
    pub(crate) fn new() -> Faults {
        Faults {
            next_release: AtomicU64::new(u64::MAX),
            ..Faults::default()
        }
    }

    /// Whether frames must go through [`Faults::forward`].
    pub(crate) fn active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// Records the fabric's clock (the first device's).
    pub(crate) fn set_clock(&self, c: &Clock) {
        let _ = self.clock.set(c.clone());
    }

    /// Device time (ns) of the recorded clock (0 before one is recorded).
    pub(crate) fn now(&self) -> u64 {
        self.clock.get().map_or(0, Clock::now_ns)
    }

    /// Gives every direction that has no impairments of its own the stages of `imp`,
    /// each direction drawing from its own generator (seeded by `imp`'s seed, else
    /// `seed`, and the direction's addresses); an empty chain removes them. What a
    /// UDP link's egress uses ([`super::udp::UdpConfig::impairments`]).
    pub(crate) fn impair_all(&self, seed: u64, imp: Impairments) {
        let mut st = lock(&self.state);
        st.default = (!imp.stages.is_empty()).then(|| (imp.seed.unwrap_or(seed), imp.stages));
        self.refresh(&st);
    }

    /// Records the thread that releases delayed frames (woken when one is queued).
    pub(crate) fn set_wire(&self, t: Thread) {
        let _ = self.wire.set(t);
    }

    fn refresh(&self, st: &State) {
        let busy = !st.delayed.is_empty()
            || st.default.is_some()
            || st
                .links
                .values()
                .any(|l| !l.stages.is_empty() || l.cut || l.held.is_some());
        self.active.store(busy, Ordering::Release);
        self.next_release.store(
            st.delayed.peek().map_or(u64::MAX, |d| d.at),
            Ordering::Release,
        );
    }

    /// Runs `frame` through its link's stages; `deliver` forwards what comes out now.
    /// Frames whose time has come are released first.
    pub(crate) fn forward(&self, frame: Vec<u8>, deliver: &mut dyn FnMut(Vec<u8>)) {
        let now = self.now();
        let mut out: Vec<Vec<u8>> = Vec::new();
        {
            let mut st = lock(&self.state);
            Self::due(&mut st, now, &mut out);
            if frame.len() >= 12 {
                let mut to = [0u8; 6];
                let mut from = [0u8; 6];
                to.copy_from_slice(&frame[..6]);
                from.copy_from_slice(&frame[6..12]);
                let State {
                    links,
                    delayed,
                    seq,
                    work,
                    default,
                } = &mut *st;
                if let Some((seed, stages)) = default {
                    links.entry((from, to)).or_insert_with(|| {
                        let mut l = Link::new(*seed, from, to);
                        l.stages = stages.clone();
                        l
                    });
                }
                match links.get_mut(&(from, to)) {
                    Some(link) if !link.stages.is_empty() || link.cut || link.held.is_some() => {
                        self.run(link, frame, now, work);
                        for (f, at) in work.drain(..) {
                            if at <= now {
                                out.push(f);
                            } else {
                                if let Some(t) = self.wire.get() {
                                    t.unpark();
                                }
                                bump(&self.counters.delayed);
                                *seq += 1;
                                delayed.push(Delayed {
                                    at,
                                    seq: *seq,
                                    frame: f,
                                });
                            }
                        }
                    }
                    _ => out.push(frame),
                }
            } else {
                out.push(frame);
            }
            self.refresh(&st);
        }
        for f in out {
            deliver(f);
        }
    }

    fn due(st: &mut State, now: u64, out: &mut Vec<Vec<u8>>) {
        while st.delayed.peek().is_some_and(|d| d.at <= now) {
            if let Some(d) = st.delayed.pop() {
                out.push(d.frame);
            }
        }
    }

    /// The stages of `link` on one frame; results (frame, release time) in `work`.
    fn run(&self, link: &mut Link, frame: Vec<u8>, now: u64, work: &mut VecDeque<(Vec<u8>, u64)>) {
        bump(&self.counters.frames);
        work.clear();
        if link.cut {
            bump(&self.counters.partitioned);
            return;
        }
        work.push_back((frame, now));
        let index = link.seen;
        link.seen += 1;
        let c = &self.counters;
        for stage in link.stages.iter().copied() {
            let n = work.len();
            for _ in 0..n {
                let Some((mut f, mut at)) = work.pop_front() else {
                    break;
                };
                match stage {
                    Stage::Loss(p) => {
                        if link.rng.chance(p) {
                            bump(&c.lost);
                            continue;
                        }
                    }
                    Stage::Duplicate(p) => {
                        if link.rng.chance(p) {
                            bump(&c.duplicated);
                            work.push_back((f.clone(), at));
                        }
                    }
                    Stage::Reorder(p) => {
                        if link.held.is_none() && link.rng.chance(p) {
                            bump(&c.reordered);
                            link.held = Some(f);
                            continue;
                        }
                        if let Some(h) = link.held.take() {
                            work.push_back((f, at));
                            f = h;
                        }
                    }
                    Stage::Delay { delay, jitter } => {
                        let j = link.rng.below(jitter.as_nanos() as u64);
                        at = at.saturating_add(delay.as_nanos() as u64).saturating_add(j);
                    }
                    Stage::Corrupt(p) => {
                        if f.len() > BTH_OFFSET + 1 && link.rng.chance(p) {
                            bump(&c.corrupted);
                            let span = (f.len() - BTH_OFFSET) as u64;
                            let mut i = BTH_OFFSET + link.rng.below(span) as usize;
                            if i == MASKED_BTH_BYTE {
                                i += 1;
                            }
                            let bit = link.rng.below(8) as u8;
                            f[i] ^= 1 << bit;
                        }
                    }
                    Stage::Outage { from, until } => {
                        let (a, b) = (from.as_nanos() as u64, until.as_nanos() as u64);
                        if (a..b).contains(&at) {
                            bump(&c.partitioned);
                            continue;
                        }
                    }
                    Stage::LinkDown { .. } => {}
                    Stage::DropFrames { from, count } => {
                        if index >= from && index - from < count {
                            bump(&c.lost);
                            continue;
                        }
                    }
                    Stage::RateLimit {
                        bytes_per_sec,
                        backlog,
                    } => {
                        if bytes_per_sec > 0 {
                            let start = at.max(link.free_at);
                            if start - at > backlog.as_nanos() as u64 {
                                bump(&c.rate_dropped);
                                continue;
                            }
                            let t = (f.len() as u128 * 1_000_000_000 / u128::from(bytes_per_sec))
                                as u64;
                            link.free_at = start.saturating_add(t);
                            at = link.free_at;
                        }
                    }
                }
                work.push_back((f, at));
            }
        }
        let delivered = work.len() as u64;
        c.delivered.fetch_add(delivered, Ordering::Relaxed);
    }

    /// Releases delayed frames that are due and frames held for reordering (none
    /// came after them). Returns how many were forwarded.
    pub(crate) fn release(&self, deliver: &mut dyn FnMut(Vec<u8>)) -> usize {
        if !self.active() {
            return 0;
        }
        let now = self.now();
        let mut out = Vec::new();
        {
            let mut st = lock(&self.state);
            Self::due(&mut st, now, &mut out);
            for l in st.links.values_mut() {
                if let Some(h) = l.held.take() {
                    out.push(h);
                }
            }
            self.refresh(&st);
        }
        let n = out.len();
        for f in out {
            deliver(f);
        }
        n
    }

    /// Device time at which the next delayed frame is due.
    pub(crate) fn next_release(&self) -> Option<u64> {
        match self.next_release.load(Ordering::Acquire) {
            u64::MAX => None,
            t => Some(t),
        }
    }

    fn with_link(&self, seed: u64, from: Mac, to: Mac, f: impl FnOnce(&mut Link)) {
        let mut st = lock(&self.state);
        let link = st
            .links
            .entry((from, to))
            .or_insert_with(|| Link::new(seed, from, to));
        f(link);
        self.refresh(&st);
    }

    pub(crate) fn stats(&self) -> FaultStats {
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FaultStats {
            frames: g(&c.frames),
            lost: g(&c.lost),
            duplicated: g(&c.duplicated),
            reordered: g(&c.reordered),
            delayed: g(&c.delayed),
            corrupted: g(&c.corrupted),
            partitioned: g(&c.partitioned),
            rate_dropped: g(&c.rate_dropped),
            delivered: g(&c.delivered),
        }
    }
}

/// Longest sleep of the wire thread when nothing is delayed.
pub(crate) const WIRE_IDLE: Duration = Duration::from_millis(100);

/// Starts (once) the wire thread of a fabric with threaded devices: nothing steps such
/// a fabric, so this thread releases delayed frames when they are due and frames held
/// back for reordering (at most [`WIRE_IDLE`] later). It holds the fabric weakly and
/// ends once the fabric is dropped.
pub(super) fn start_wire_thread(inner: &Arc<FabricInner>) {
    if inner.faults.wire.get().is_some() {
        return;
    }
    let weak: Weak<FabricInner> = Arc::downgrade(inner);
    let spawned = std::thread::Builder::new()
        .name("ferroverbs-wire".into())
        .spawn(move || wire_thread(weak));
    if let Ok(h) = spawned {
        let _ = inner.faults.wire.set(h.thread().clone());
    }
}

fn wire_thread(fabric: Weak<FabricInner>) {
    loop {
        let wait = {
            let Some(f) = fabric.upgrade() else { return };
            f.faults.release(&mut |fr| f.deliver(fr));
            match f.faults.next_release() {
                Some(t) => Duration::from_nanos(t.saturating_sub(f.faults.now())),
                None if f.faults.active() => Duration::from_millis(1),
                None => WIRE_IDLE,
            }
        };
        std::thread::park_timeout(wait.min(WIRE_IDLE));
    }
}

impl Fabric {
    /// Sets the impairments of the direction `from` → `to` (frames whose source MAC is
    /// `from` and destination MAC is `to`), replacing earlier ones. An empty chain
    /// removes them.
    pub fn impair(&self, from: Mac, to: Mac, imp: Impairments) {
        let seed = imp.seed.unwrap_or(self.inner.seed);
        self.inner.faults.with_link(seed, from, to, |l| {
            l.rng = Link::new(seed, from, to).rng;
            l.seen = 0;
            l.stages = imp.stages;
        });
    }

    /// Sets the same impairments on both directions between `a` and `b` (each
    /// direction draws from its own generator).
    pub fn impair_both(&self, a: Mac, b: Mac, imp: Impairments) {
        self.impair(a, b, imp.clone());
        self.impair(b, a, imp);
    }

    /// Cuts (`true`) or heals (`false`) the direction `from` → `to`: while cut, every
    /// frame is dropped (counted as `partitioned`).
    pub fn partition(&self, from: Mac, to: Mac, cut: bool) {
        let seed = self.inner.seed;
        self.inner.faults.with_link(seed, from, to, |l| l.cut = cut);
    }

    /// Cuts or heals both directions between `a` and `b`.
    pub fn partition_both(&self, a: Mac, b: Mac, cut: bool) {
        self.partition(a, b, cut);
        self.partition(b, a, cut);
    }

    /// Removes every impairment and partition; frames held back or delayed are
    /// delivered now.
    pub fn clear_impairments(&self) {
        {
            let mut st = lock(&self.inner.faults.state);
            for l in st.links.values_mut() {
                l.stages.clear();
                l.cut = false;
            }
            self.inner.faults.refresh(&st);
        }
        let mut st = lock(&self.inner.faults.state);
        let mut out: Vec<Vec<u8>> = st.delayed.drain().map(|d| d.frame).collect();
        for l in st.links.values_mut() {
            if let Some(h) = l.held.take() {
                out.push(h);
            }
        }
        self.inner.faults.refresh(&st);
        drop(st);
        for f in out {
            self.inner.deliver(f);
        }
    }

    /// What the middleware did so far.
    pub fn fault_stats(&self) -> FaultStats {
        self.inner.faults.stats()
    }

    /// Frames waiting in the middleware (delayed or held back for reordering).
    pub fn frames_in_flight(&self) -> usize {
        let st = lock(&self.inner.faults.state);
        st.delayed.len() + st.links.values().filter(|l| l.held.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(to: Mac, from: Mac, tag: u8) -> Vec<u8> {
        let mut f = vec![0u8; 80];
        f[..6].copy_from_slice(&to);
        f[6..12].copy_from_slice(&from);
        f[60] = tag;
        f
    }

    const A: Mac = [2, 0, 0, 0, 0, 1];
    const B: Mac = [2, 0, 0, 0, 0, 2];

    fn run(imp: Impairments, n: u8, seed: u64) -> (Vec<u8>, FaultStats) {
        let f = Faults::new();
        f.set_clock(&Clock::virtual_time());
        f.with_link(seed, A, B, |l| l.stages = imp.stages);
        let mut got = Vec::new();
        for k in 0..n {
            f.forward(frame(B, A, k), &mut |fr| got.push(fr[60]));
        }
        f.release(&mut |fr| got.push(fr[60]));
        (got, f.stats())
    }

    #[test]
    fn specs_parse_in_order_and_name_what_is_wrong() {
        let imp: Impairments =
            "loss=0.01, delay=250us:50us,corrupt=0.5,seed=7,drop=3:2,rate=1000:1ms,down=2s:500ms"
                .parse()
                .unwrap();
        assert_eq!(
            imp,
            Impairments::new()
                .loss(0.01)
                .delay(Duration::from_micros(250), Duration::from_micros(50))
                .corrupt(0.5)
                .seeded(7)
                .drop_frames(3, 2)
                .rate_limit(1000, Duration::from_millis(1))
                .link_down(Duration::from_secs(2), Duration::from_millis(2500))
        );
        assert_eq!("".parse::<Impairments>().unwrap(), Impairments::new());
        let err = |s: &str| s.parse::<Impairments>().unwrap_err();
        assert!(err("loss=2").contains("loss=2"), "{}", err("loss=2"));
        assert!(err("delay=5").contains("not a duration"));
        assert!(err("jitter=1").contains("unknown impairment"));
        assert!(err("loss").contains("NAME=VALUE"));
        assert!(err("drop=3").contains("two values"));
        assert!(err("down=1s").contains("two values"));
        assert!(err("down=1s:x").contains("not a duration"));
    }

    #[test]
    fn loss_and_duplication_are_seeded() {
        let imp = Impairments::new().loss(0.2).duplicate(0.2);
        let (a, sa) = run(imp.clone(), 200, 9);
        let (b, sb) = run(imp.clone(), 200, 9);
        assert_eq!(a, b);
        assert_eq!(sa, sb);
        assert!(sa.lost > 10 && sa.duplicated > 10, "{sa:?}");
        assert_eq!(a.len() as u64, 200 - sa.lost + sa.duplicated);
        let (c, _) = run(imp, 200, 10);
        assert_ne!(a, c);
    }

    #[test]
    fn reorder_swaps_with_the_next_frame() {
        let (got, s) = run(Impairments::new().reorder(1.0), 4, 1);
        // 0 held, 1 passes and releases 0; 2 held, 3 releases it.
        assert_eq!(got, vec![1, 0, 3, 2]);
        assert_eq!(s.reordered, 2);
    }

    #[test]
    fn corruption_avoids_the_masked_byte_and_counts() {
        let f = Faults::new();
        f.with_link(3, A, B, |l| {
            l.stages = Impairments::new().corrupt(1.0).stages
        });
        let mut n = 0;
        for _ in 0..500 {
            f.forward(frame(B, A, 0), &mut |fr| {
                let orig = frame(B, A, 0);
                let diff: Vec<usize> = (0..fr.len()).filter(|&i| fr[i] != orig[i]).collect();
                assert_eq!(diff.len(), 1);
                assert!(diff[0] >= BTH_OFFSET && diff[0] != MASKED_BTH_BYTE);
                n += 1;
            });
        }
        assert_eq!((n, f.stats().corrupted), (500, 500));
    }

    #[test]
    fn delay_rate_limit_and_partition() {
        let clock = Clock::virtual_time();
        let f = Faults::new();
        f.set_clock(&clock);
        f.with_link(1, A, B, |l| {
            l.stages = Impairments::new()
                .delay(Duration::from_micros(10), Duration::ZERO)
                .rate_limit(80_000_000, Duration::from_micros(3))
                .stages
        });
        let mut got = Vec::new();
        // 80 bytes at 80 MB/s: 1 µs each; backlog 3 µs: frames 0..=3 fit, 4.. dropped.
        for k in 0..6 {
            f.forward(frame(B, A, k), &mut |fr| got.push(fr[60]));
        }
        assert!(got.is_empty());
        assert_eq!(f.next_release(), Some(11_000));
        clock.advance(Duration::from_micros(12));
        f.release(&mut |fr| got.push(fr[60]));
        assert_eq!(got, vec![0, 1]);
        clock.advance(Duration::from_micros(10));
        f.release(&mut |fr| got.push(fr[60]));
        assert_eq!(got, vec![0, 1, 2, 3]);
        assert_eq!(f.stats().rate_dropped, 2);
        f.with_link(1, A, B, |l| {
            l.stages.clear();
            l.cut = true;
        });
        f.forward(frame(B, A, 9), &mut |fr| got.push(fr[60]));
        f.forward(frame(A, B, 8), &mut |fr| got.push(fr[60]));
        assert_eq!(got, vec![0, 1, 2, 3, 8]);
        assert_eq!(f.stats().partitioned, 1);
    }
}

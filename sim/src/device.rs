//! The simulated device: [`Sim`], the handle a test holds (configuration, fault
//! injection, counters, time), and [`SimBus`], the [`Bus`] the driver uses.
//!
//! BAR0 is the [`Bar`] register file (`mlx5-controlpath.md` §1, §8): the
//! initialization segment, then UAR pages from [`BarConfig::first_uar`]; the device acts
//! on the [`BarEvent`]s it reports. A write to the command doorbell runs the
//! commands synchronously on the writing thread (deterministic mode): the command is
//! complete when `write32` returns, unless a delay fault holds it. EQ doorbells in UAR
//! pages update consumer counters and arm EQs; an armed EQ fires its MSI-X eventfd.
//!
//! The health counter and the internal timer are derived from the [`Clock`] when read:
//! the counter advances every 100 ms of device time unless a fault stalls it.
//!
//! The data path ([`Engine`]) hangs off the same lock: a send doorbell (an 8-byte
//! doorbell or the first 64-byte chunk of a BlueFlame copy in a UAR page) is serviced
//! on the writing thread, a CQ arm doorbell arms the CQ, and every command's effect on
//! QPs and CQs reaches the engine right after the command. Received frames wait in the
//! device's [`RxQueue`] until [`Sim::step`] (deterministic mode) or the device thread
//! (threaded mode, [`crate::mode`]) processes them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::time::Duration;

use ferroverbs_hw::bus::Block64;
use ferroverbs_hw::control::cmdq::DeliveryStatus;
use ferroverbs_hw::datapath::eqe::MLX5_EVENT_TYPE_CMD;
use ferroverbs_hw::{Bus, BusError, DmaPerm, Field};

use crate::bar::{Bar, BarConfig, BarEvent, FwRev, UarDoorbell};
use crate::clock::Clock;
use crate::cmdq::{self, SlotResult};
use crate::engine::{DataPathStats, Engine};
use crate::fault::{CommandFault, DelayRule, FatalHealth, Faults, Hold};
use crate::firmware::{
    CapOverride, CapType, Firmware, FwConfig, FwStats, HcaState, ObjectCounts, RoceAddr,
};
use crate::iommu::Iommu;
use crate::irq::Irqs;
use crate::link::{FramePool, RxQueue, Uplink};
use crate::mode::{Doorbells, Ingress, Mode, Runner, Service};

/// The health counter advances once per this much device time.
pub const HEALTH_TICK: Duration = Duration::from_millis(100);

/// Threaded mode with an ingress: how long a device may hold the ACKs it owes for a
/// send doorbell to carry them (ACK coalescing, IBTA vol. 1 §9.7.5.1.1: one ACK
/// acknowledges every packet before it). Far below the shortest local ACK timeout a
/// QP may ask for (4.096 µs · 2^timeout, RC QPs' floor on the UDP link is 2^18).
pub const ACK_DELAY: Duration = Duration::from_micros(50);

/// Configuration of a simulated device.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Firmware configuration: ports, MACs, GIDs, pages, capability overrides. Its UAR
    /// range is taken from `bar` ([`BarConfig::first_uar`] up to [`BarConfig::pages`]).
    pub fw: FwConfig,
    /// BAR0 configuration: firmware revision, queue geometry, size, UAR placement.
    pub bar: BarConfig,
    /// Seed for everything random (default MAC addresses today).
    pub seed: u64,
    /// Virtual time (deterministic) instead of real time.
    pub virtual_time: bool,
    /// How the device makes progress: stepped by the test, or on its own thread.
    pub mode: Mode,
    /// Where send doorbells are serviced.
    pub doorbells: Doorbells,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            fw: FwConfig::default(),
            bar: BarConfig {
                fw_rev: FwRev {
                    major: 16,
                    minor: 35,
                    subminor: 1012,
                },
                ..BarConfig::default()
            },
            seed: 0x5eed,
            virtual_time: false,
            mode: Mode::Deterministic,
            doorbells: Doorbells::Inline,
        }
    }
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl SimConfig {
    /// A configuration with virtual time and `ports` ports whose MACs derive from
    /// `seed` (locally administered unicast addresses).
    pub fn deterministic(seed: u64, ports: u8) -> Self {
        let mut c = SimConfig {
            seed,
            virtual_time: true,
            ..SimConfig::default()
        };
        c.fw.ports = ports.max(1);
        let mut s = seed;
        c.fw.macs = (0..c.fw.ports)
            .map(|_| {
                let r = splitmix(&mut s).to_be_bytes();
                [(r[0] & 0xfc) | 0x02, r[1], r[2], r[3], r[4], r[5]]
            })
            .collect();
        if ports > 1 {
            c.fw.caps.push(CapOverride {
                cap: CapType::General,
                field: ferroverbs_hw::control::caps::cmd_hca_cap::num_vhca_ports,
                value: u64::from(ports),
            });
        }
        c
    }

    /// A configuration for threaded mode: real time, a device thread, and `ports` ports
    /// whose MACs derive from `seed`.
    pub fn threaded(seed: u64, ports: u8) -> Self {
        SimConfig {
            virtual_time: false,
            mode: Mode::Threaded,
            ..SimConfig::deterministic(seed, ports)
        }
    }

    /// Adds a capability override.
    pub fn cap(mut self, cap: CapType, field: Field, value: u64) -> Self {
        self.fw.caps.push(CapOverride { cap, field, value });
        self
    }

    /// Sets the GID table entries present at reset on `port` (1-based).
    pub fn gids(mut self, port: u8, gids: Vec<RoceAddr>) -> Self {
        let i = usize::from(port.max(1) - 1);
        if self.fw.gids.len() <= i {
            self.fw.gids.resize(i + 1, Vec::new());
        }
        self.fw.gids[i] = gids;
        self
    }
}

/// Counters of everything the device holds or did, for tests ("counted, not assumed").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Live IOMMU mappings.
    pub mappings: usize,
    /// Bytes mapped.
    pub mapped_bytes: u64,
    /// Device accesses the IOMMU refused.
    pub iommu_faults: u64,
    /// Firmware pages held by the device.
    pub pages_held: u64,
    /// Pages the device still held when the function was disabled or reset.
    pub pages_abandoned: u64,
    /// Objects per firmware table.
    pub objects: ObjectCounts,
    /// Firmware work counters (commands executed and failed, EQEs written).
    pub fw: FwStats,
    /// Command entries handed back (any delivery status).
    pub commands_completed: u64,
    /// Of those, with a delivery status other than OK.
    pub delivery_errors: u64,
    /// Doorbell bits whose entry was not owned by hardware or not readable.
    pub commands_ignored: u64,
    /// Commands currently held by a delay fault.
    pub commands_held: usize,
    /// EQ doorbells naming an EQ that does not exist or is not driven by that UAR.
    pub stray_doorbells: u64,
    /// BAR writes the register file ignored (read-only registers, undefined offsets,
    /// a vanished device).
    pub ignored_bar_writes: u64,
    /// Command queue address writes the firmware did not latch because it was still
    /// booting (a driver that did not wait for `initializing` to clear first).
    pub cmdq_writes_while_booting: u64,
    /// MSI-X eventfds open.
    pub eventfds: usize,
    /// Data-path counters.
    pub data_path: DataPathStats,
    /// Frames waiting in the receive queue.
    pub rx_queued: usize,
    /// Frames dropped because the receive queue was full.
    pub rx_queue_full: u64,
    /// Times the device thread's longest wait in its ingress (the UDP socket) ended by
    /// its timeout with frames already queued: a frame that waited for the timeout
    /// instead of waking the thread (a missed wake-up; 0 in a correct run).
    pub late_frames: u64,
}

/// A command slot held by a delay fault.
#[derive(Clone, Copy, Debug)]
struct Held {
    slot: usize,
    rung_ns: u64,
    hold: Hold,
}

/// Everything behind the device lock.
struct Device {
    bar: Bar,
    fw: Firmware,
    faults: Faults,
    held: Vec<Held>,
    /// Device time up to which the health counter has been advanced.
    health_ns: u64,
    completed: u64,
    delivery_errors: u64,
    ignored: u64,
    stray: u64,
    engine: Engine,
    doorbells: Doorbells,
    /// Received frames being processed (taken from the receive queue in one go).
    rx_batch: std::collections::VecDeque<Vec<u8>>,
    /// Processed frames on their way back to the pool.
    rx_spent: Vec<Vec<u8>>,
}

struct Shared {
    iommu: Iommu,
    irqs: Irqs,
    clock: Clock,
    dev: Mutex<Device>,
    bar0_len: usize,
    rx: Arc<RxQueue>,
    runner: Mutex<Option<Runner>>,
    /// The engine has periodic work (see [`Engine::has_periodic`]); read by an idle
    /// device thread without the lock.
    periodic: AtomicBool,
    /// A time at or before the engine's next timer deadline ([`Engine::wake_at`];
    /// `u64::MAX`: none), for the same reader; a service then moves it to the next.
    deadline: AtomicU64,
    /// Some command is held by a delay fault.
    held_any: AtomicBool,
    /// The source of received frames read when the device is serviced (the UDP link).
    ingress: RwLock<Option<Arc<dyn Ingress>>>,
    /// Whether `ingress` is set (read without its lock on every service).
    has_ingress: AtomicBool,
    /// With an ingress, the ACKs a step owes leave at the start of the next step
    /// instead of its end (after the application could see the step's completions).
    /// Set while ACKs are owed, so that an otherwise idle step still sends them.
    acks_owed: AtomicBool,
    /// Threaded mode: owed ACKs leave with the next send doorbell or command, or
    /// once they have been owed for [`ACK_DELAY`] (the device thread's wait in the
    /// ingress ends then), not at the start of the next service: a ping-pong's answer
    /// carries the ACK of the request in the same burst of datagrams, and the peer's
    /// device thread wakes once per message instead of twice.
    threaded: bool,
    /// Threaded mode: device time since which ACKs are owed (meaningful while
    /// `acks_owed` is set).
    acks_owed_ns: AtomicU64,
    /// Some thread is in [`Shared::try_service`] (the device thread, or an application
    /// thread assisting it from an empty poll): another one returns at once.
    servicing: AtomicBool,
    /// Device time of the last [`Sim::try_service`] that got to service (0: never).
    assisted_ns: AtomicU64,
    /// The device thread's nap while an application thread assists
    /// ([`Service::nap`]), ended early by [`Sim::end_assist`].
    nap: (Mutex<()>, std::sync::Condvar),
    /// Longest ingress waits of the device thread that timed out with frames queued
    /// ([`SimStats::late_frames`]).
    late_frames: AtomicU64,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // A device thread may be blocked in the ingress.
        if let Some(i) = self.ingress.get_mut().unwrap_or_else(|e| e.into_inner()) {
            i.wake();
        }
        // Stops (and joins, unless this is that thread) the device thread.
        let r = self
            .runner
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(r);
    }
}

/// A weak handle to a device (the fabric's: it does not keep devices alive).
#[derive(Clone)]
pub struct WeakSim {
    shared: Weak<Shared>,
}

impl WeakSim {
    /// The device, if it still exists.
    pub fn upgrade(&self) -> Option<Sim> {
        self.shared.upgrade().map(|shared| Sim { shared })
    }
}

/// The simulated device, as a test holds it.
#[derive(Clone)]
pub struct Sim {
    shared: Arc<Shared>,
}

/// The [`Bus`] through which a driver reaches a [`Sim`]. Clones share the device.
#[derive(Clone)]
pub struct SimBus {
    shared: Arc<Shared>,
}

impl Sim {
    /// A device in its power-on state.
    pub fn new(mut cfg: SimConfig) -> Self {
        let clock = if cfg.virtual_time {
            Clock::virtual_time()
        } else {
            Clock::real()
        };
        let bar = Bar::new(cfg.bar, clock.clone());
        // The firmware hands out the UAR pages the BAR has.
        let first = bar.config().first_uar;
        cfg.fw.first_uar = first;
        cfg.fw.num_uars = bar.config().pages.saturating_sub(first).max(1);
        let bar0_len = bar.len();
        let irqs = Irqs::new(cfg.fw.msix_vectors);
        let mode = cfg.mode;
        let seed = cfg.seed;
        let fw = Firmware::new(cfg.fw);
        let rx = RxQueue::new();
        let macs = fw.ports().iter().map(|p| p.mac).collect();
        let links: Vec<bool> = fw.ports().iter().map(|p| p.oper_up()).collect();
        let dev = Device {
            bar,
            fw,
            faults: Faults::default(),
            held: Vec::new(),
            health_ns: clock.now_ns(),
            completed: 0,
            delivery_errors: 0,
            ignored: 0,
            stray: 0,
            engine: {
                let mut e = Engine::new(macs, rx.clone(), FramePool::new());
                for (i, up) in links.iter().enumerate() {
                    e.set_link(i as u8 + 1, *up);
                }
                e
            },
            doorbells: cfg.doorbells,
            rx_batch: std::collections::VecDeque::new(),
            rx_spent: Vec::new(),
        };
        let shared = Arc::new(Shared {
            iommu: Iommu::new(),
            irqs,
            clock,
            dev: Mutex::new(dev),
            bar0_len,
            rx,
            runner: Mutex::new(None),
            periodic: AtomicBool::new(false),
            deadline: AtomicU64::new(u64::MAX),
            held_any: AtomicBool::new(false),
            ingress: RwLock::new(None),
            has_ingress: AtomicBool::new(false),
            acks_owed: AtomicBool::new(false),
            acks_owed_ns: AtomicU64::new(0),
            threaded: mode == Mode::Threaded,
            servicing: AtomicBool::new(false),
            assisted_ns: AtomicU64::new(0),
            nap: (Mutex::new(()), std::sync::Condvar::new()),
            late_frames: AtomicU64::new(0),
        });
        if mode == Mode::Threaded {
            let runner = Runner::spawn(
                format!("ferroverbs-sim-{seed:x}"),
                Arc::downgrade(&shared),
                &shared.rx,
            );
            // Without a thread the device still works when stepped.
            if let Ok(r) = runner {
                *shared.runner.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            }
        }
        Sim { shared }
    }

    /// A weak handle (does not keep the device alive).
    pub fn downgrade(&self) -> WeakSim {
        WeakSim {
            shared: Arc::downgrade(&self.shared),
        }
    }

    /// The receive queue frames for this device are delivered to.
    pub fn rx_queue(&self) -> Arc<RxQueue> {
        self.shared.rx.clone()
    }

    /// The MAC address of each port.
    pub fn port_macs(&self) -> Vec<[u8; 6]> {
        self.dev().engine.macs().to_vec()
    }

    /// Connects the device to a fabric (`None`: disconnects it); frames are built in
    /// buffers from `pool`.
    pub fn set_uplink(&self, uplink: Option<Arc<dyn Uplink>>, pool: Arc<FramePool>) {
        self.dev().engine.set_uplink(uplink, pool);
    }

    /// Sets (or with `None` removes) the device's [`Ingress`]: from now on, servicing
    /// the device (its thread, or [`Sim::step`]) reads received frames from it, without
    /// blocking, before processing its receive queue; an idle device thread blocks in
    /// it. While an ingress is set, the ACKs a service owes are sent at the start of
    /// the next service (one step later, never later than that: the device thread or
    /// the stepping application services again at once), so that the sender of a
    /// message does not make its receiver wait for the ACK's system call.
    pub fn set_ingress(&self, ingress: Option<Arc<dyn Ingress>>) {
        let s = &self.shared;
        let some = ingress.is_some();
        let old = std::mem::replace(
            &mut *s.ingress.write().unwrap_or_else(|e| e.into_inner()),
            ingress,
        );
        s.has_ingress.store(some, Ordering::Release);
        if let Some(old) = old {
            old.wake();
        }
        if !some {
            // ACKs owed stay owed: send them now.
            let now = s.clock.now_ns();
            let mut d = s.lock();
            let Device { fw, engine, .. } = &mut *d;
            engine.flush_acks(fw, &s.iommu, &s.irqs, now);
            s.acks_owed.store(false, Ordering::Release);
        }
        s.rx.wake();
    }

    /// Whether the device runs its own thread.
    pub fn threaded(&self) -> bool {
        self.shared
            .runner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Processes the frames waiting in the receive queue and the data-path timers that
    /// are due, and runs due held commands. Returns the data-path work done (0: idle).
    pub fn service(&self) -> usize {
        // As the device thread does: held commands only when some are held, and an
        // idle device (no frame received, no periodic work, no timer due) takes no
        // lock (a deterministic fabric step visits every device).
        self.shared.service_now()
    }

    /// Services the device as [`Sim::service`] does, unless some other thread is
    /// servicing it (the device thread, or another assisting thread): then returns
    /// `None` at once, never waiting for it. What a busy-polling application calls
    /// when its CQ is empty (NAPI-style busy polling): in threaded mode its own thread
    /// then reads the ingress and delivers the completion, with no hand-off from the
    /// device thread, which keeps carrying the traffic whenever the application does
    /// not poll. Returns the data-path work done (0: idle).
    pub fn try_service(&self) -> Option<usize> {
        let r = self.shared.try_service();
        if r.is_some() {
            let now = self.shared.clock.now_ns().max(1);
            self.shared.assisted_ns.store(now, Ordering::Relaxed);
        }
        r
    }

    /// The application thread that assisted ([`Sim::try_service`]) is about to block
    /// (in a completion channel's read): the device thread stops napping and carries
    /// the traffic again at once, instead of after the rest of its nap (up to
    /// [`crate::mode::ASSIST_NAP`], which an event-driven ping-pong paid per message).
    pub fn end_assist(&self) {
        if self.shared.assisted_ns.swap(0, Ordering::Relaxed) == 0 {
            return;
        }
        let _g = self.shared.nap.0.lock().unwrap_or_else(|e| e.into_inner());
        self.shared.nap.1.notify_all();
    }

    /// Device time at which the next data-path timer expires, if any.
    pub fn next_deadline(&self) -> Option<Duration> {
        self.dev().engine.next_deadline().map(Duration::from_nanos)
    }

    /// Fault injection: the device writes the CQE it wrote `back` entries ago
    /// (1: the last one) to CQ `cqn` again, as the next CQE (owner bit, producer
    /// index and completion event as for any CQE), as a faulty device repeating a
    /// completion would. Returns whether it was written (not for an unknown CQ, one
    /// that has written fewer than `back` CQEs, or one in error).
    pub fn repeat_cqe(&self, cqn: u32, back: u32) -> bool {
        let s = &self.shared;
        let mut d = s.lock();
        let Device { fw, engine, .. } = &mut *d;
        engine.repeat_cqe(fw, &s.iommu, &s.irqs, cqn, back)
    }

    /// Runs `f` with the data-path engine (to inspect QP and CQ runtime state).
    pub fn with_engine<R>(&self, f: impl FnOnce(&Engine) -> R) -> R {
        f(&self.dev().engine)
    }

    /// The bus a driver uses to reach this device.
    pub fn bus(&self) -> SimBus {
        SimBus {
            shared: self.shared.clone(),
        }
    }

    fn dev(&self) -> MutexGuard<'_, Device> {
        self.shared.lock()
    }

    /// The device clock.
    pub fn clock(&self) -> &Clock {
        &self.shared.clock
    }

    /// The IOMMU (to inspect mappings).
    pub fn iommu(&self) -> &Iommu {
        &self.shared.iommu
    }

    /// Moves virtual time forward and services what became due (held commands, the
    /// health counter). Returns `false` on a real-time device.
    pub fn advance(&self, d: Duration) -> bool {
        let moved = self.shared.clock.advance(d);
        self.step();
        moved
    }

    /// Services due work: held commands whose delay has elapsed, received frames and
    /// due data-path timers (see [`Sim::service`]).
    pub fn step(&self) {
        self.service();
    }

    /// Runs every command held by a delay fault, whatever its hold.
    pub fn release_held(&self) {
        self.shared.service_due(true);
    }

    /// Counters.
    pub fn stats(&self) -> SimStats {
        let d = self.dev();
        SimStats {
            mappings: self.shared.iommu.mappings(),
            mapped_bytes: self.shared.iommu.mapped_bytes(),
            iommu_faults: self.shared.iommu.faults(),
            pages_held: d.fw.pages().held(),
            pages_abandoned: d.fw.pages().abandoned(),
            objects: d.fw.objects(),
            fw: d.fw.stats(),
            commands_completed: d.completed,
            delivery_errors: d.delivery_errors,
            commands_ignored: d.ignored,
            commands_held: d.held.len(),
            stray_doorbells: d.stray,
            ignored_bar_writes: d.bar.ignored_writes(),
            cmdq_writes_while_booting: d.bar.cmdq_writes_while_booting(),
            eventfds: self.shared.irqs.open_fds(),
            data_path: d.engine.stats(),
            rx_queued: self.shared.rx.len(),
            rx_queue_full: self.shared.rx.dropped(),
            late_frames: self.shared.late_frames.load(Ordering::Relaxed),
        }
    }

    /// The firmware's life-cycle state.
    pub fn hca_state(&self) -> HcaState {
        self.dev().fw.state()
    }

    /// Runs `f` with the firmware (to inspect objects, ports, capabilities).
    pub fn with_firmware<R>(&self, f: impl FnOnce(&Firmware) -> R) -> R {
        f(&self.dev().fw)
    }

    /// Runs `f` with the BAR register file.
    pub fn with_bar<R>(&self, f: impl FnOnce(&Bar) -> R) -> R {
        f(&self.dev().bar)
    }

    /// How many times MSI-X `vector` fired.
    pub fn irq_count(&self, vector: u16) -> u64 {
        self.shared.irqs.count(vector)
    }

    /// Fail a chosen command (see [`CommandFault`]).
    pub fn fail_command(&self, f: CommandFault) {
        self.dev().faults.add_command(f);
    }

    /// Delay the completion of matching commands (see [`DelayRule`]).
    pub fn delay_commands(&self, d: DelayRule) {
        self.dev().faults.add_delay(d);
    }

    /// Removes every command fault and delay rule (held commands stay held).
    pub fn clear_command_faults(&self) {
        self.dev().faults.clear_commands();
    }

    /// Stops (`true`) or restarts the health counter.
    pub fn stall_health(&self, stalled: bool) {
        let now = self.shared.clock.now_ns();
        let mut d = self.dev();
        self.shared.catch_up_health(&mut d, now);
        d.faults.health_stalled = stalled;
    }

    /// Raises (or with `None` clears) a health condition: `synd`, `ext_synd` and the
    /// RFR bit in the health buffer, `synd` in `health_syndrome`. With `rfr` the
    /// firmware asks for a reset, which drivers treat as fatal; without it the
    /// syndrome is a non-fatal report (rdma-core `sensor_fw_synd_rfr`, Linux
    /// `health.c`). The device keeps executing commands either way.
    pub fn raise_fatal(&self, fatal: Option<FatalHealth>) {
        let mut d = self.dev();
        match fatal {
            Some(f) => d.bar.set_fatal(f.synd, f.ext_synd, f.rfr),
            None => d.bar.clear_fatal(),
        }
    }

    /// Makes the device fall off the bus (`true`): every read returns all ones and
    /// writes, doorbells included, are ignored.
    pub fn vanish(&self, gone: bool) {
        self.dev().bar.set_vanished(gone);
    }

    /// The firmware asks for `delta` more pages (negative: asks to return some) with a
    /// PAGE_REQUEST event.
    pub fn request_pages(&self, delta: i32) {
        let v = {
            let mut d = self.dev();
            d.fw.request_pages(&self.shared.iommu, delta)
        };
        if let Some(v) = v {
            self.shared.irqs.signal(v);
        }
    }

    /// The physical link of `port` (1-based) goes up or down. A change of the port's
    /// operational state is reported with a PORT_CHANGE event (sub-type ACTIVE or
    /// DOWN) once the HCA is initialized. While the link is down the port sends and
    /// receives nothing (frames dropped and counted: `tx_no_link`, `rx_link_down`).
    /// Returns `false` for an unknown port.
    pub fn set_link(&self, port: u8, up: bool) -> bool {
        let (known, sig) = {
            let mut d = self.dev();
            let known = d.fw.set_link(&self.shared.iommu, port, up);
            let now = self.shared.clock.now_ns();
            let Device { fw, engine, .. } = &mut *d;
            engine.sync(fw, &self.shared.iommu, &self.shared.irqs, now);
            (known, d.fw.take_irqs())
        };
        for v in sig {
            self.shared.irqs.signal(v);
        }
        known
    }

    /// Function-level reset: registers, firmware state and held commands are reset;
    /// IOMMU mappings (owned by the driver's container) stay.
    pub fn reset(&self) {
        let now = self.shared.clock.now_ns();
        let mut d = self.dev();
        d.fw.reset();
        // The data path forgets every QP and CQ with the firmware.
        let Device { fw, engine, .. } = &mut *d;
        engine.sync(fw, &self.shared.iommu, &self.shared.irqs, now);
        self.shared.publish(engine);
        d.bar.reset();
        d.held.clear();
        d.health_ns = now;
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Device> {
        // Nothing in the device panics while holding the lock; if a test thread did,
        // the state is still consistent enough to inspect.
        self.dev.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Advances the health counter by one tick per [`HEALTH_TICK`] of device time since
    /// the last catch-up, unless stalled (then the time is skipped).
    fn catch_up_health(&self, d: &mut Device, now: u64) {
        let tick = HEALTH_TICK.as_nanos() as u64;
        let ticks = now.saturating_sub(d.health_ns) / tick;
        d.health_ns += ticks * tick;
        if d.faults.health_stalled {
            return;
        }
        // The counter is 24 bits wide: more ticks than that wrap around.
        for _ in 0..ticks % (1 << 24) {
            d.bar.tick();
        }
    }

    fn read32(&self, off: usize) -> u32 {
        let now = self.clock.now_ns();
        let mut d = self.lock();
        self.catch_up_health(&mut d, now);
        d.bar.read32(off)
    }

    fn apply(&self, ev: Option<BarEvent>, mut d: MutexGuard<'_, Device>) {
        let mut sig = Vec::new();
        match ev {
            None | Some(BarEvent::CmdqAddress { .. }) => {}
            Some(BarEvent::CmdDoorbell { slots }) => {
                // A command may move a QP to RESET or ERR, destroy it, or be the last
                // thing a process does before it exits: the ACKs a service deferred
                // (UDP ingress) go out first, as a NIC's would have long before.
                self.flush_owed_acks(&mut d);
                self.ring(&mut d, slots, &mut sig)
            }
            Some(BarEvent::Uar { index, doorbell }) => match doorbell {
                UarDoorbell::Eq { eqn, ci, arm } => {
                    let eqn = u32::from(eqn);
                    let mine = d.fw.uar_allocated(index)
                        && d.fw.eq(eqn).is_some_and(|e| e.ring.uar == index);
                    if mine {
                        sig.extend(d.fw.eq_doorbell(index, eqn, ci, arm));
                    } else {
                        // Hardware ignores a doorbell for an EQ this UAR does not drive.
                        d.stray += 1;
                    }
                }
                UarDoorbell::CqArm {
                    cqn,
                    sn,
                    solicited,
                    ci,
                } => {
                    let Device { fw, engine, .. } = &mut *d;
                    engine.arm_cq(fw, &self.iommu, &self.irqs, index, cqn, sn, solicited, ci);
                }
                // A send doorbell: the first 8 bytes of the control segment, written on
                // their own or as the start of a BlueFlame copy (the following chunks
                // repeat what the SQ buffer already holds). QPN: bytes 4-6.
                UarDoorbell::Send {
                    offset: 0, ctrl, ..
                } => self.send_doorbell(&mut d, index, &ctrl),
                UarDoorbell::BlueFlame {
                    offset: 0, block, ..
                } => self.send_doorbell(&mut d, index, &block),
                UarDoorbell::Send { .. } | UarDoorbell::BlueFlame { .. } => {}
            },
        }
        drop(d);
        for v in sig {
            self.irqs.signal(v);
        }
    }

    fn send_doorbell(&self, d: &mut Device, uar: u32, ctrl: &[u8]) {
        let qpn = u32::from_be_bytes([0, ctrl[4], ctrl[5], ctrl[6]]);
        if d.doorbells == Doorbells::Deferred {
            d.engine.queue_doorbell(uar, qpn);
            self.publish(&d.engine);
            self.rx.wake();
            self.wake_ingress();
            return;
        }
        // The ACKs a service deferred go out before the packets of this doorbell: a
        // responder acknowledges a request when it arrives, long before its
        // application can answer it (a ConnectX sends the ACK from the receive path),
        // so the peer never sees the answer before the ACK of the request it
        // answers.
        if self.acks_owed.load(Ordering::Acquire) {
            self.flush_owed_acks(d);
        }
        let now = self.clock.now_ns();
        let Device { fw, engine, .. } = d;
        engine.send_doorbell(fw, &self.iommu, &self.irqs, now, uar, qpn);
        self.publish(engine);
        // A frame to one of this device's own ports (two QPs of one NIC) went to its
        // receive queue, whose push unparks a parked device thread but cannot end its
        // wait in the ingress: end it, or the frame waits for the wait's timeout.
        if self.threaded && !self.rx.is_empty() {
            self.wake_ingress();
        }
    }

    /// Records, for an idle device thread, whether the engine has periodic work and
    /// when its next timer is due.
    fn publish(&self, engine: &Engine) {
        self.periodic
            .store(engine.has_periodic(), Ordering::Release);
        self.deadline
            .store(engine.wake_at().unwrap_or(u64::MAX), Ordering::Release);
    }

    /// Ends a device thread's wait in the ingress, if there is one.
    fn wake_ingress(&self) {
        if self.has_ingress.load(Ordering::Acquire) {
            if let Some(i) = &*self.ingress.read().unwrap_or_else(|e| e.into_inner()) {
                i.wake();
            }
        }
    }

    /// Reads the ingress (non-blocking), if there is one; returns the frames queued.
    fn poll_ingress(&self) -> usize {
        if !self.has_ingress.load(Ordering::Acquire) {
            return 0;
        }
        match &*self.ingress.read().unwrap_or_else(|e| e.into_inner()) {
            Some(i) => i.poll(),
            None => 0,
        }
    }

    /// Whether owed ACKs are to leave at the start of a service at device time `now`:
    /// at once in deterministic mode, after [`ACK_DELAY`] in threaded mode.
    fn acks_due(&self, now: u64) -> bool {
        self.acks_owed.load(Ordering::Acquire)
            && (!self.threaded
                || now.saturating_sub(self.acks_owed_ns.load(Ordering::Relaxed))
                    >= ACK_DELAY.as_nanos() as u64)
    }

    /// Sends the ACKs the previous service deferred, if any.
    fn flush_owed_acks(&self, d: &mut Device) {
        if self.acks_owed.swap(false, Ordering::AcqRel) {
            let now = self.clock.now_ns();
            let Device { fw, engine, .. } = d;
            engine.flush_acks(fw, &self.iommu, &self.irqs, now);
        }
    }

    /// Processes received frames and due timers; returns the work done.
    fn service_data_path(&self) -> usize {
        let mut work = 0;
        let now = self.clock.now_ns();
        let defer_acks = self.has_ingress.load(Ordering::Acquire);
        let mut d = self.lock();
        let Device {
            fw,
            engine,
            rx_batch,
            rx_spent,
            ..
        } = &mut *d;
        // The ACKs the previous step owes (ingress: deferred by one step; threaded:
        // until they are due).
        if self.acks_due(now) {
            engine.flush_acks(fw, &self.iommu, &self.irqs, now);
            self.acks_owed.store(false, Ordering::Release);
            work += 1;
        }
        // The queue's frames in batches (one lock each way per batch, not per frame);
        // frames queued meanwhile (loopback) make another batch.
        while self.rx.take_all(rx_batch) > 0 {
            while let Some(frame) = rx_batch.pop_front() {
                engine.receive(fw, &self.iommu, &self.irqs, now, &frame);
                rx_spent.push(frame);
                work += 1;
            }
            engine.pool().put_all(rx_spent);
        }
        if !defer_acks {
            engine.flush_acks(fw, &self.iommu, &self.irqs, now);
        } else if engine.acks_owed() && !self.acks_owed.load(Ordering::Acquire) {
            self.acks_owed_ns.store(now, Ordering::Relaxed);
            self.acks_owed.store(true, Ordering::Release);
        }
        work += engine.poll(fw, &self.iommu, &self.irqs, now);
        self.publish(engine);
        work
    }

    // The writes catch the health counter up under the lock they take anyway (what
    // `service_due` would do first with one more lock when no command is held).

    fn write32(&self, off: usize, value: u32) {
        let now = self.clock.now_ns();
        let mut d = self.lock();
        self.catch_up_health(&mut d, now);
        let ev = d.bar.write32(off, value);
        self.apply(ev, d);
    }

    fn write64(&self, off: usize, value: u64) {
        let now = self.clock.now_ns();
        let mut d = self.lock();
        self.catch_up_health(&mut d, now);
        let ev = d.bar.write64(off, value);
        self.apply(ev, d);
    }

    fn write_block64(&self, off: usize, block: &Block64) {
        let now = self.clock.now_ns();
        let mut d = self.lock();
        self.catch_up_health(&mut d, now);
        let ev = d.bar.write_block64(off, block);
        self.apply(ev, d);
    }

    /// Runs held commands that are due, if any are held (no lock taken otherwise).
    fn service_held(&self) {
        if self.held_any.load(Ordering::Acquire) {
            self.service_due(false);
        }
    }

    /// A command doorbell: runs (or holds) each slot whose bit is set.
    fn ring(&self, d: &mut Device, slots: u32, sig: &mut Vec<u16>) {
        let Some(base) = d.bar.cmdq_addr() else {
            d.ignored += u64::from(slots.count_ones());
            return;
        };
        let geom = d.bar.cmdq_geometry();
        for slot in 0..geom.entries() {
            if slots & (1 << slot) == 0 {
                continue;
            }
            let Some(iova) = cmdq::entry_iova(base, geom, slot) else {
                continue;
            };
            // A delay fault looks at the opcode before anything runs.
            let opcode = cmdq::read_entry(&self.iommu, iova)
                .filter(|e| e.hw_owned())
                .and_then(|e| ferroverbs_hw::control::cmd::opcode(&e.in_).ok());
            if let Some(op) = opcode {
                if let Some(hold) = d.faults.on_doorbell(op) {
                    self.held_any.store(true, Ordering::Release);
                    d.held.push(Held {
                        slot,
                        rung_ns: self.clock.now_ns(),
                        hold,
                    });
                    continue;
                }
            }
            self.run_slot(d, iova, slot, sig);
        }
    }

    fn run_slot(&self, d: &mut Device, iova: u64, slot: usize, sig: &mut Vec<u16>) {
        let Device {
            fw, faults, engine, ..
        } = d;
        let r = cmdq::run(
            &self.iommu,
            iova,
            |op, m| faults.on_command(op, m),
            |input, outlen| {
                // QUERY_QP reports the data path's counters and PSNs as they are now.
                if ferroverbs_hw::control::cmd::opcode(input)
                    == Ok(ferroverbs_hw::control::cmd::Opcode::QueryQp.value())
                {
                    if let Ok(qpn) = ferroverbs_hw::control::qp::qpn(input) {
                        engine.export_qp(fw, qpn);
                    }
                }
                // So do QUERY_CQ (producer and consumer counters) and
                // QUERY_VPORT_COUNTER (the data path's counters).
                crate::engine::counters::export(engine, fw, &self.iommu, &self.rx, input);
                fw.execute(&self.iommu, input, outlen)
            },
        );
        // INIT_HCA fixes the UAR geometry the capabilities chose.
        let shift = d.fw.uar_geometry().shift;
        d.bar.set_uar_shift(shift);
        // The command's effect on QPs and CQs reaches the data path at once (a 2ERR
        // flushes before the command completes).
        d.engine
            .sync(&mut d.fw, &self.iommu, &self.irqs, self.clock.now_ns());
        self.publish(&d.engine);
        match r {
            SlotResult::Completed { delivery, .. } => {
                d.completed += 1;
                if delivery != DeliveryStatus::Ok {
                    d.delivery_errors += 1;
                }
                let vector = (1u32 << slot).to_be_bytes();
                sig.extend(d.fw.post_event(&self.iommu, MLX5_EVENT_TYPE_CMD, 0, &vector));
            }
            SlotResult::NotOwned | SlotResult::Unreadable => d.ignored += 1,
        }
    }

    /// Runs held commands that are due (all of them with `all`).
    fn service_due(&self, all: bool) {
        let now = self.clock.now_ns();
        let mut d = self.lock();
        self.catch_up_health(&mut d, now);
        if d.held.is_empty() {
            return;
        }
        let (due, keep): (Vec<Held>, Vec<Held>) = d.held.drain(..).partition(|h| {
            all || matches!(h.hold, Hold::For(t) if now.saturating_sub(h.rung_ns) >= t.as_nanos() as u64)
        });
        d.held = keep;
        self.held_any.store(!d.held.is_empty(), Ordering::Release);
        let mut sig = Vec::new();
        if let Some(base) = d.bar.cmdq_addr() {
            let geom = d.bar.cmdq_geometry();
            for h in due {
                if let Some(iova) = cmdq::entry_iova(base, geom, h.slot) {
                    self.run_slot(&mut d, iova, h.slot, &mut sig);
                }
            }
        }
        drop(d);
        for v in sig {
            self.irqs.signal(v);
        }
    }
}

impl Shared {
    /// [`Shared::service_now`] unless another thread is in here (then `None`).
    fn try_service(&self) -> Option<usize> {
        struct Busy<'a>(&'a AtomicBool);
        impl Drop for Busy<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        // A relaxed look first: a spinning loser does not bounce the cache line.
        if self.servicing.load(Ordering::Relaxed)
            || self
                .servicing
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return None;
        }
        let _busy = Busy(&self.servicing);
        Some(self.service_now())
    }

    /// Services the device (held commands, ingress, received frames, timers).
    fn service_now(&self) -> usize {
        if self.held_any.load(Ordering::Acquire) {
            self.service_due(false);
        }
        // Frames that arrived at the ingress join the receive queue.
        self.poll_ingress();
        // An idle device takes no lock: spinning threads leave it to the application.
        // A running timer (ACK timeout, RNR back-off) is work only once it is due.
        if self.rx.is_empty()
            && !self.acks_due(self.clock.now_ns())
            && !self.periodic.load(Ordering::Acquire)
            && self.deadline.load(Ordering::Acquire) > self.clock.now_ns()
        {
            return 0;
        }
        self.service_data_path()
    }
}

impl Service for Shared {
    fn service(&self) -> usize {
        // The device thread leaves the work to an application thread that is doing
        // it (it reads the same ingress and queue; nothing is lost: the next
        // iteration, or the ingress wait, sees what arrives meanwhile).
        self.try_service().unwrap_or(0)
    }

    fn due_in(&self) -> Option<Duration> {
        let mut t = self.deadline.load(Ordering::Acquire);
        if self.threaded && self.acks_owed.load(Ordering::Acquire) {
            let acks = self.acks_owed_ns.load(Ordering::Relaxed) + ACK_DELAY.as_nanos() as u64;
            t = t.min(acks);
        }
        (t != u64::MAX).then(|| Duration::from_nanos(t.saturating_sub(self.clock.now_ns())))
    }

    fn spin_time(&self) -> Duration {
        // Servicing a device with an ingress makes a system call (the non-blocking
        // read) anyway; spinning threads starve the application's (and the peer
        // process's) on a machine with few CPUs: yield at once.
        if self.has_ingress.load(Ordering::Acquire) {
            Duration::ZERO
        } else {
            crate::mode::SPIN_TIME
        }
    }

    fn yield_time(&self) -> Duration {
        // Nor does it yield: on a machine whose CPUs other processes keep busy, a
        // yielding thread is given the CPU back after their time slices (measured:
        // a datagram that arrives while the device thread yields waits up to 3 ms,
        // where one that wakes it from the ingress's `ppoll` is read within tens of
        // microseconds, the scheduler running the woken thread first).
        if self.has_ingress.load(Ordering::Acquire) {
            Duration::ZERO
        } else {
            crate::mode::YIELD_TIME
        }
    }

    fn assisted(&self) -> bool {
        let t = self.assisted_ns.load(Ordering::Relaxed);
        t != 0 && self.clock.now_ns().saturating_sub(t) < crate::mode::ASSIST_NAP.as_nanos() as u64
    }

    fn nap(&self, d: Duration) {
        let g = self.nap.0.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self
            .nap
            .1
            .wait_timeout_while(g, d, |_| self.assisted_ns.load(Ordering::Relaxed) != 0);
    }

    fn parked_past_frames(&self) {
        if !self.rx.is_empty() {
            self.late_frames.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn idle_ingress(&self) -> Option<Arc<dyn Ingress>> {
        // Frames of the fabric or a deferred doorbell unpark the thread; the ingress's
        // wait ends on a datagram or a wake. With frames queued, do not block there.
        if !self.has_ingress.load(Ordering::Acquire) || !self.rx.is_empty() {
            return None;
        }
        self.ingress
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Bus for SimBus {
    fn bar0_len(&self) -> usize {
        self.shared.bar0_len
    }

    /// `false`: the simulated device writes a message to memory as cheaply as to a
    /// CQE, so scatter to CQE only adds the poll's copy. Measured
    /// (`docs/performance.md`): `ferroverbs perf send-lat -n 20000` t_typical at 8
    /// bytes 1.07 µs with it against 1.01 µs without, at 32 bytes 1.05 against 1.00
    /// (medians of 7 alternated runs, release build), the simulator's one-packet
    /// SEND path taking scattered messages too. A QP can still ask for it
    /// (`QpInitAttr::with_scatter_to_cqe` in the driver).
    fn scatter_to_cqe_pays(&self) -> bool {
        false
    }

    fn read32(&self, off: usize) -> u32 {
        self.shared.service_due(false);
        self.shared.read32(off)
    }

    fn write32(&self, off: usize, value: u32) {
        self.shared.service_held();
        self.shared.write32(off, value);
    }

    fn write64(&self, off: usize, value: u64) {
        self.shared.service_held();
        self.shared.write64(off, value);
    }

    fn write_block64(&self, off: usize, block: &Block64) {
        self.shared.service_held();
        self.shared.write_block64(off, block);
    }

    fn dma_map(&self, vaddr: usize, len: usize, perm: DmaPerm) -> Result<u64, BusError> {
        self.shared.iommu.map(vaddr, len, perm)
    }

    fn dma_map_on_demand(&self, vaddr: usize, len: usize, perm: DmaPerm) -> Result<u64, BusError> {
        self.shared.iommu.map_on_demand(vaddr, len, perm)
    }

    fn dma_unmap(&self, iova: u64, len: usize) -> Result<(), BusError> {
        self.shared.iommu.unmap(iova, len)
    }

    fn irq_eventfd(&self, vector: u16) -> Option<i32> {
        self.shared.irqs.eventfd(vector)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An application thread that assisted the device (an empty poll) and then
    /// blocks ends the device thread's nap: `end_assist` clears the assistance and
    /// wakes a nap in progress, which would otherwise last its whole length.
    #[test]
    fn end_assist_ends_the_device_threads_nap() {
        let sim = Sim::new(SimConfig::threaded(7, 1));
        // The device thread may be servicing at the instant: try again (bounded).
        let polled = (0..10_000).any(|_| {
            let ok = sim.try_service().is_some();
            if !ok {
                std::thread::yield_now();
            }
            ok
        });
        assert!(polled && sim.shared.assisted(), "an empty poll assisted");
        let shared = Arc::clone(&sim.shared);
        let t0 = std::time::Instant::now();
        let napper = std::thread::spawn(move || shared.nap(Duration::from_secs(60)));
        std::thread::sleep(Duration::from_millis(20));
        sim.end_assist();
        napper.join().unwrap();
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the nap was not ended"
        );
        assert!(!sim.shared.assisted());
        // Without assistance there is no nap at all.
        let t1 = std::time::Instant::now();
        sim.shared.nap(Duration::from_secs(60));
        assert!(t1.elapsed() < Duration::from_secs(30));
        // Ending an assistance that is not there does nothing.
        sim.end_assist();
    }
}

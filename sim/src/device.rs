//! The simulated device: [`Sim`], the handle a test holds (configuration, fault
//! injection, counters, time), and [`SimBus`], the [`Bus`] the driver uses.
//!
//! BAR0 (`mlx5-controlpath.md` §1, §8): the initialization segment in pages 0-2, then
//! UAR pages from [`FwConfig::first_uar`]. A write to the command doorbell runs the
//! commands synchronously on the writing thread (deterministic mode): the command is
//! complete when `write32` returns, unless a delay fault holds it. EQ doorbells in UAR
//! pages update consumer counters and arm EQs; an armed EQ fires its MSI-X eventfd.
//!
//! The health counter and the internal timer are derived from the [`Clock`] when read:
//! the counter advances every 100 ms of device time unless a fault stalls it.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ferroverbs_hw::bus::Block64;
use ferroverbs_hw::control::cmdq::{CmdqGeometry, DeliveryStatus};
use ferroverbs_hw::control::iseg::{self, initial_seg, NicInterface, CMD_IF_REV};
use ferroverbs_hw::datapath::eqe::MLX5_EVENT_TYPE_CMD;
use ferroverbs_hw::datapath::uar::{
    classify, decode_eq_doorbell, UarRegister, DEFAULT_BF_REG_SIZE,
};
use ferroverbs_hw::{Bus, BusError, DmaPerm, Field};

use crate::clock::Clock;
use crate::cmdq::{self, SlotResult};
use crate::fault::{CommandFault, DelayRule, FatalHealth, Faults, Hold};
use crate::firmware::{
    CapOverride, CapType, Firmware, FwConfig, FwStats, HcaState, ObjectCounts, RoceAddr,
};
use crate::iommu::Iommu;
use crate::irq::Irqs;

/// Size of a BAR0 page (a UAR page).
const PAGE: usize = 4096;
/// The health counter advances once per this much device time.
pub const HEALTH_TICK: Duration = Duration::from_millis(100);
/// The queue geometry the device reports: 32 entries of 64 bytes
/// (`cmdq_addr_l_sz` low byte 0x56).
pub const CMDQ_GEOMETRY: CmdqGeometry = CmdqGeometry {
    log_size: 5,
    log_stride: 6,
};

/// Configuration of a simulated device.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Firmware configuration: ports, MACs, GIDs, pages, capability overrides.
    pub fw: FwConfig,
    /// Seed for everything random (default MAC addresses today).
    pub seed: u64,
    /// Virtual time (deterministic) instead of real time.
    pub virtual_time: bool,
    /// How long `initializing` stays set after the command queue address is written.
    pub init_delay: Duration,
    /// Firmware version (major, minor, subminor).
    pub fw_version: (u16, u16, u16),
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            fw: FwConfig::default(),
            seed: 0x5eed,
            virtual_time: false,
            init_delay: Duration::ZERO,
            fw_version: (16, 35, 1012),
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
    /// Doorbells to UARs that are not allocated, EQs that do not exist, and the like.
    pub stray_doorbells: u64,
    /// MSI-X eventfds open.
    pub eventfds: usize,
}

/// A command slot held by a delay fault.
#[derive(Clone, Copy, Debug)]
struct Held {
    slot: usize,
    rung_ns: u64,
    hold: Hold,
}

/// The init-segment registers the device keeps (the rest is derived when read).
#[derive(Clone, Debug)]
struct InitSeg {
    cmdq_addr_h: u32,
    cmdq_addr_l: u32,
    nic_interface: u8,
    /// Device time at which the command queue address was written.
    cmdq_written_ns: Option<u64>,
}

impl InitSeg {
    fn reset() -> Self {
        InitSeg {
            cmdq_addr_h: 0,
            cmdq_addr_l: 0,
            nic_interface: NicInterface::FullDriver as u8,
            cmdq_written_ns: None,
        }
    }

    fn cmdq_base(&self) -> u64 {
        (u64::from(self.cmdq_addr_h) << 32) | u64::from(self.cmdq_addr_l & !0xfff)
    }
}

/// Everything behind the device lock.
struct Device {
    cfg: SimConfig,
    fw: Firmware,
    faults: Faults,
    iseg: InitSeg,
    held: Vec<Held>,
    completed: u64,
    delivery_errors: u64,
    ignored: u64,
    stray: u64,
}

struct Shared {
    iommu: Iommu,
    irqs: Irqs,
    clock: Clock,
    dev: Mutex<Device>,
    bar0_len: usize,
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
    pub fn new(cfg: SimConfig) -> Self {
        let clock = if cfg.virtual_time {
            Clock::virtual_time()
        } else {
            Clock::real()
        };
        let bar0_len = (cfg.fw.first_uar as usize + cfg.fw.num_uars as usize) * PAGE;
        let irqs = Irqs::new(cfg.fw.msix_vectors);
        let dev = Device {
            fw: Firmware::new(cfg.fw.clone()),
            cfg,
            faults: Faults::default(),
            iseg: InitSeg::reset(),
            held: Vec::new(),
            completed: 0,
            delivery_errors: 0,
            ignored: 0,
            stray: 0,
        };
        Sim {
            shared: Arc::new(Shared {
                iommu: Iommu::new(),
                irqs,
                clock,
                dev: Mutex::new(dev),
                bar0_len,
            }),
        }
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

    /// Moves virtual time forward and services what became due (held commands).
    /// Returns `false` on a real-time device.
    pub fn advance(&self, d: Duration) -> bool {
        let moved = self.shared.clock.advance(d);
        self.step();
        moved
    }

    /// Services due work: held commands whose delay has elapsed.
    pub fn step(&self) {
        self.shared.service_due(false);
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
            eventfds: self.shared.irqs.open_fds(),
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
        d.faults.health_stalled_at = if stalled {
            Some(health_count(now))
        } else {
            None
        };
    }

    /// Raises (or with `None` clears) a fatal health condition.
    pub fn raise_fatal(&self, fatal: Option<FatalHealth>) {
        self.dev().faults.fatal = fatal;
    }

    /// Makes the device fall off the bus (`true`): every read returns all ones and
    /// writes are ignored.
    pub fn vanish(&self, gone: bool) {
        self.dev().faults.vanished = gone;
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

    /// Function-level reset: registers, firmware state and held commands are reset;
    /// IOMMU mappings (owned by the driver's container) stay.
    pub fn reset(&self) {
        let mut d = self.dev();
        d.fw.reset();
        d.iseg = InitSeg::reset();
        d.held.clear();
    }
}

/// The health counter value at device time `ns`.
fn health_count(ns: u64) -> u32 {
    ((ns / HEALTH_TICK.as_nanos() as u64) & 0x00ff_ffff) as u32
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Device> {
        // Nothing in the device panics while holding the lock; if a test thread did,
        // the state is still consistent enough to inspect.
        self.dev.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn read32(&self, off: usize) -> u32 {
        let d = self.lock();
        if d.faults.vanished || off >= self.bar0_len || !off.is_multiple_of(4) {
            return u32::MAX;
        }
        let now = self.clock.now_ns();
        let (maj, min, sub) = d.cfg.fw_version;
        let reg = |f: Field, v: u32| {
            let mut w = 0u32;
            iseg::reg_set(f, &mut w, v);
            w
        };
        let fatal = d.faults.fatal;
        match off {
            iseg::FW_REV => {
                reg(initial_seg::fw_rev_major, u32::from(maj))
                    | reg(initial_seg::fw_rev_minor, u32::from(min))
            }
            iseg::CMDIF_REV_FW_SUB => {
                reg(initial_seg::cmd_interface_rev, u32::from(CMD_IF_REV))
                    | reg(initial_seg::fw_rev_subminor, u32::from(sub))
            }
            iseg::CMDQ_ADDR_H => d.iseg.cmdq_addr_h,
            iseg::CMDQ_ADDR_L_SZ => {
                (d.iseg.cmdq_addr_l & !0xfff)
                    | (u32::from(d.iseg.nic_interface & 7) << iseg::MLX5_NIC_IFC_OFFSET)
                    | CMDQ_GEOMETRY.to_reg()
            }
            iseg::INITIALIZING => {
                let done = d
                    .iseg
                    .cmdq_written_ns
                    .is_some_and(|t| now.saturating_sub(t) >= d.cfg.init_delay.as_nanos() as u64);
                reg(initial_seg::initializing, u32::from(!done))
            }
            iseg::HEALTH_FW_VER => (u32::from(maj) << 16) | u32::from(min),
            iseg::HEALTH_RFR_SEVERITY => {
                // rfr_severity byte: bit 7 RFR.
                let rfr = fatal.is_some_and(|f| f.rfr);
                u32::from(rfr) << 31
            }
            iseg::HEALTH_IRISC_SYND => {
                // irisc_index (byte), synd (byte), ext_synd (BE16).
                let (s, e) = fatal.map_or((0, 0), |f| (f.synd, f.ext_synd));
                (u32::from(s) << 16) | u32::from(e)
            }
            iseg::INTERNAL_TIMER_H | iseg::INTERNAL_TIMER_L => {
                let khz =
                    d.fw.caps()
                        .gen(ferroverbs_hw::control::caps::cmd_hca_cap::device_frequency_khz);
                let ticks = (u128::from(now) * u128::from(khz) / 1_000_000) as u64;
                if off == iseg::INTERNAL_TIMER_H {
                    (ticks >> 32) as u32
                } else {
                    ticks as u32
                }
            }
            iseg::HEALTH_COUNTER => {
                let count = d
                    .faults
                    .health_stalled_at
                    .unwrap_or_else(|| health_count(now));
                let synd = fatal.map_or(0, |f| f.synd);
                reg(initial_seg::health_syndrome, u32::from(synd))
                    | reg(initial_seg::health_counter, count)
            }
            _ => 0,
        }
    }

    fn write32(&self, off: usize, value: u32) {
        if off >= self.bar0_len {
            return;
        }
        let mut d = self.lock();
        if d.faults.vanished {
            return;
        }
        let uar_base = d.cfg.fw.first_uar as usize * PAGE;
        match off {
            iseg::CMDQ_ADDR_H => d.iseg.cmdq_addr_h = value,
            iseg::CMDQ_ADDR_L_SZ => {
                d.iseg.cmdq_addr_l = value & !0xfff;
                d.iseg.nic_interface = iseg::nic_interface_of(value);
                if d.iseg.cmdq_written_ns.is_none() {
                    d.iseg.cmdq_written_ns = Some(self.clock.now_ns());
                }
            }
            iseg::CMD_DBELL => {
                let sig = self.ring(&mut d, value);
                drop(d);
                self.signal(&sig);
            }
            _ if off >= uar_base => {
                let uar = (off / PAGE) as u32;
                if !d.fw.uar_allocated(uar) {
                    // Hardware ignores doorbells to UAR pages nobody allocated.
                    d.stray += 1;
                    return;
                }
                let reg = classify(off % PAGE, DEFAULT_BF_REG_SIZE);
                let sig = match reg {
                    UarRegister::EqArm | UarRegister::EqNoArm => {
                        let (eqn, ci) = decode_eq_doorbell(value);
                        let eqn = u32::from(eqn);
                        let owned = d.fw.eq(eqn).is_some_and(|e| e.ring.uar == uar);
                        if !owned {
                            d.stray += 1;
                        }
                        d.fw.eq_doorbell(uar, eqn, ci, reg == UarRegister::EqArm)
                    }
                    // CQ arm doorbells and BlueFlame/send doorbells belong to the data
                    // path; the control plane accepts and ignores them.
                    _ => None,
                };
                drop(d);
                if let Some(v) = sig {
                    self.irqs.signal(v);
                }
            }
            _ => {}
        }
    }

    fn signal(&self, vectors: &[u16]) {
        for &v in vectors {
            self.irqs.signal(v);
        }
    }

    /// A command doorbell: runs (or holds) each slot whose bit is set. Returns the
    /// MSI-X vectors to fire.
    fn ring(&self, d: &mut Device, mask: u32) -> Vec<u16> {
        let mut sig = Vec::new();
        let base = d.iseg.cmdq_base();
        if d.iseg.cmdq_written_ns.is_none() {
            d.ignored += u64::from(mask.count_ones());
            return sig;
        }
        for slot in 0..CMDQ_GEOMETRY.entries() {
            if mask & (1 << slot) == 0 {
                continue;
            }
            let Some(iova) = cmdq::entry_iova(base, CMDQ_GEOMETRY, slot) else {
                continue;
            };
            // A delay fault looks at the opcode before anything runs.
            let opcode = cmdq::read_entry(&self.iommu, iova)
                .filter(|e| e.hw_owned())
                .and_then(|e| ferroverbs_hw::control::cmd::opcode(&e.in_).ok());
            if let Some(op) = opcode {
                if let Some(hold) = d.faults.on_doorbell(op) {
                    d.held.push(Held {
                        slot,
                        rung_ns: self.clock.now_ns(),
                        hold,
                    });
                    continue;
                }
            }
            self.run_slot(d, iova, slot, &mut sig);
        }
        sig
    }

    fn run_slot(&self, d: &mut Device, iova: u64, slot: usize, sig: &mut Vec<u16>) {
        let Device { fw, faults, .. } = d;
        let r = cmdq::run(
            &self.iommu,
            iova,
            |op, m| faults.on_command(op, m),
            |input, outlen| fw.execute(&self.iommu, input, outlen),
        );
        match r {
            SlotResult::Completed { delivery, .. } => {
                d.completed += 1;
                if delivery != DeliveryStatus::Ok {
                    d.delivery_errors += 1;
                }
                let vector = (1u32 << slot).to_be_bytes();
                if let Some(v) =
                    d.fw.post_event(&self.iommu, MLX5_EVENT_TYPE_CMD, 0, &vector)
                {
                    sig.push(v);
                }
            }
            SlotResult::NotOwned | SlotResult::Unreadable => d.ignored += 1,
        }
    }

    /// Runs held commands that are due (all of them with `all`).
    fn service_due(&self, all: bool) {
        let now = self.clock.now_ns();
        let mut d = self.lock();
        if d.held.is_empty() {
            return;
        }
        let (due, keep): (Vec<Held>, Vec<Held>) = d.held.drain(..).partition(|h| {
            all || matches!(h.hold, Hold::For(t) if now.saturating_sub(h.rung_ns) >= t.as_nanos() as u64)
        });
        d.held = keep;
        let base = d.iseg.cmdq_base();
        let mut sig = Vec::new();
        for h in due {
            if let Some(iova) = cmdq::entry_iova(base, CMDQ_GEOMETRY, h.slot) {
                self.run_slot(&mut d, iova, h.slot, &mut sig);
            }
        }
        drop(d);
        self.signal(&sig);
    }
}

impl Bus for SimBus {
    fn bar0_len(&self) -> usize {
        self.shared.bar0_len
    }

    fn read32(&self, off: usize) -> u32 {
        self.shared.service_due(false);
        self.shared.read32(off)
    }

    fn write32(&self, off: usize, value: u32) {
        self.shared.service_due(false);
        self.shared.write32(off, value);
    }

    fn write64(&self, off: usize, value: u64) {
        // Two big-endian halves, high first, as the bytes land on the device.
        self.write32(off, (value >> 32) as u32);
        self.write32(off + 4, value as u32);
    }

    fn write_block64(&self, off: usize, block: &Block64) {
        for (i, c) in block.chunks_exact(4).enumerate() {
            self.write32(off + i * 4, u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        }
    }

    fn dma_map(&self, vaddr: usize, len: usize, perm: DmaPerm) -> Result<u64, BusError> {
        self.shared.iommu.map(vaddr, len, perm)
    }

    fn dma_unmap(&self, iova: u64, len: usize) -> Result<(), BusError> {
        self.shared.iommu.unmap(iova, len)
    }

    fn irq_eventfd(&self, vector: u16) -> Option<i32> {
        self.shared.irqs.eventfd(vector)
    }
}

//! BAR0 of the simulated device: the initialization segment and the UAR pages.
//!
//! [`Bar`] is a register file. It answers every read the way a ConnectX answers it
//! (firmware revision, command interface revision 5, the command queue geometry in the
//! low byte of `cmdq_addr_l_sz`, the `initializing` bit, the health buffer, the health
//! counter and the free-running internal timer) and turns every write that means
//! something into a [`BarEvent`] for the firmware and the engine to act on: the command
//! queue being programmed, the command doorbell (which slots were rung), and the
//! doorbells of the UAR pages (CQ arm, EQ update, send doorbell, BlueFlame copy).
//!
//! Layout, from `ferroverbs-hw`:
//!
//! * `0 .. first_uar * 4096`: the initialization segment
//!   ([`iseg::InitSeg`], Linux `struct mlx5_init_seg`); the PRM view
//!   ([`iseg::initial_seg`]) reaches 0x400c, so UAR indexes start above it;
//! * `index * 4096` for `first_uar <= index < pages`: UAR page `index`, decoded with
//!   [`uar::classify`].
//!
//! Nothing here panics on any offset or value. A read outside BAR0, or not aligned to
//! its width, returns all ones (what a read of a vanished PCI device returns) and is
//! counted; a write there, to a read-only register or to an undefined UAR offset is
//! ignored and counted. A device that has fallen off the bus ([`Bar::set_vanished`])
//! reads all ones everywhere and ignores every write.
//!
//! Sources: `mlx5-controlpath.md` §1 (iseg), §2.1 (geometry), §5.2 and §8 (UAR
//! doorbells), §9 (what a simulator must answer).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ferroverbs_hw::bus::{Block64, ADAPTER_PAGE_SIZE};
use ferroverbs_hw::control::cmdq::{CmdqGeometry, MLX5_MAX_COMMANDS};
use ferroverbs_hw::control::iseg::{self, HealthBuffer, InitSeg, NicInterface};
use ferroverbs_hw::datapath::dbr;
use ferroverbs_hw::datapath::uar::{self, UarRegister};
use zerocopy::{FromZeros, IntoBytes};

use crate::clock::Clock;
use crate::engine::cq::device_ticks;

/// A firmware revision, as `major.minor.subminor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FwRev {
    /// Major revision (`fw_rev` `[15:0]`).
    pub major: u16,
    /// Minor revision (`fw_rev` `[31:16]`).
    pub minor: u16,
    /// Sub-minor revision (`cmdif_rev_fw_sub` `[15:0]`).
    pub subminor: u16,
}

impl FwRev {
    /// The health buffer's `fw_ver` encoding: `major << 24 | minor << 16 | subminor`
    /// (how Linux `health.c` prints it).
    pub const fn health_fw_ver(self) -> u32 {
        ((self.major as u32 & 0xff) << 24)
            | ((self.minor as u32 & 0xff) << 16)
            | self.subminor as u32
    }
}

/// What the BAR reports and how big it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BarConfig {
    /// Firmware revision.
    pub fw_rev: FwRev,
    /// Command queue geometry (low byte of `cmdq_addr_l_sz`).
    pub cmdq: CmdqGeometry,
    /// BAR0 size in 4 KiB pages.
    pub pages: u32,
    /// The first UAR index firmware hands out; lower pages belong to the init segment.
    pub first_uar: u32,
    /// BlueFlame register size (`1 << log_bf_reg_size`), for decoding UAR offsets.
    pub bf_reg_size: usize,
    /// Hardware id in the health buffer.
    pub hw_id: u32,
    /// `nic_interface_supported` bits of the `initializing` register.
    pub nic_interface_supported: u8,
    /// The FW-reset-supported bit of the `initializing` register.
    pub fw_reset_supported: bool,
    /// How long the firmware boots after a reset (device time: virtual in
    /// deterministic mode, real otherwise). Until then the `initializing` bit reads
    /// set and a write of the command queue address is not latched (counted, see
    /// [`Bar::cmdq_writes_while_booting`]); afterwards the bit reads clear, whether or
    /// not the address has been written. Real firmware clears the bit on its own once
    /// booted, which Linux mlx5_core `mlx5_function_enable` waits for before it writes
    /// the address ("pre-initializing" `wait_fw_init`). Default [`DEFAULT_BOOT_TIME`].
    pub boot_time: Duration,
}

/// The default [`BarConfig::boot_time`]: 1 ms, short enough that a device opened on
/// real time costs nothing noticeable (a real adapter takes hundreds of milliseconds
/// to seconds after a function-level reset).
pub const DEFAULT_BOOT_TIME: Duration = Duration::from_millis(1);

/// The geometry both drivers accept and the reference recommends: 32 entries of 64
/// bytes (low byte 0x56).
pub const DEFAULT_CMDQ: CmdqGeometry = CmdqGeometry {
    log_size: 5,
    log_stride: 6,
};

/// The smallest UAR index that does not overlap the PRM view of the init segment
/// (16396 bytes).
pub const MIN_FIRST_UAR: u32 = iseg::initial_seg::SIZE.div_ceil(ADAPTER_PAGE_SIZE) as u32;

impl Default for BarConfig {
    fn default() -> Self {
        BarConfig {
            fw_rev: FwRev {
                major: 16,
                minor: 35,
                subminor: 2000,
            },
            cmdq: DEFAULT_CMDQ,
            // 32 MiB, the BAR0 size of ConnectX-4 to -6.
            pages: 8192,
            first_uar: 8,
            bf_reg_size: uar::DEFAULT_BF_REG_SIZE,
            hw_id: 0x20d,
            nic_interface_supported: 0,
            fw_reset_supported: false,
            boot_time: DEFAULT_BOOT_TIME,
        }
    }
}

/// A doorbell written to a UAR page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UarDoorbell {
    /// CQ arm doorbell (64-bit write at 0x20): the arm word and the CQ number.
    CqArm {
        /// CQ number (low 24 bits of the low dword).
        cqn: u32,
        /// Arm sequence number (`arm_word` `[29:28]`).
        sn: u8,
        /// `true` for "next solicited completion" (`MLX5_CQ_DB_REQ_NOT_SOL`).
        solicited: bool,
        /// Consumer index (`arm_word` `[23:0]`).
        ci: u32,
    },
    /// EQ doorbell (32-bit write at 0x40 with arm, 0x48 without).
    Eq {
        /// EQ number.
        eqn: u8,
        /// Consumer index (24 bits).
        ci: u32,
        /// Whether the EQ is armed as well.
        arm: bool,
    },
    /// A send doorbell (64-bit write into a BlueFlame register): the first 8 bytes of
    /// the WQE's control segment as they sit in memory.
    Send {
        /// BlueFlame register (0..4).
        bfreg: usize,
        /// Which half of the register.
        half: usize,
        /// Offset inside the half.
        offset: usize,
        /// The 8 bytes written.
        ctrl: [u8; 8],
    },
    /// A BlueFlame copy: 64 bytes of a WQE written into a BlueFlame register.
    BlueFlame {
        /// BlueFlame register (0..4).
        bfreg: usize,
        /// Which half of the register.
        half: usize,
        /// Offset inside the half (64 × the chunk's position in the WQE).
        offset: usize,
        /// The 64 bytes written.
        block: Block64,
    },
}

/// A BAR0 write that the device has to act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarEvent {
    /// `cmdq_addr_l_sz` was written: the command queue is at `addr` (with the high half
    /// last written to `cmdq_addr_h`), and the driver asks for NIC interface mode
    /// `nic_interface` (0 = full driver, 1 = disabled, 7 = SW reset).
    CmdqAddress {
        /// DMA address of the command queue (4 KiB aligned).
        addr: u64,
        /// The requested NIC interface mode (3 bits, as the drivers write it).
        nic_interface: u8,
    },
    /// The command doorbell was rung for these queue entries (bit *i* = entry *i*).
    CmdDoorbell {
        /// Rung slots, limited to the queue's entries.
        slots: u32,
    },
    /// A doorbell of UAR page `index`.
    Uar {
        /// UAR index.
        index: u32,
        /// What was written.
        doorbell: UarDoorbell,
    },
}

/// The BAR0 register file of the simulated device.
pub struct Bar {
    config: BarConfig,
    clock: Clock,
    /// The init segment's stored registers, as the device presents them (big-endian).
    regs: Box<InitSeg>,
    cmdq_programmed: bool,
    /// Held in `initializing` past the boot time ([`Bar::set_initializing`]).
    held_initializing: bool,
    /// Command queue address writes made while the firmware was booting.
    cmdq_writes_while_booting: AtomicU64,
    /// Device time of the last reset, in nanoseconds.
    reset_at_ns: u64,
    vanished: bool,
    health_counter: u32,
    ignored_writes: AtomicU64,
    bad_reads: AtomicU64,
    /// log2 of the BAR0 stride between UAR indexes (the firmware's `UarGeometry`).
    uar_shift: u32,
}

impl core::fmt::Debug for Bar {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Bar")
            .field("config", &self.config)
            .field("cmdq_addr", &self.cmdq_addr())
            .field("initializing", &self.initializing())
            .field("health_counter", &self.health_counter)
            .field("vanished", &self.vanished)
            .finish_non_exhaustive()
    }
}

const INITIALIZING_BIT: u32 = 1 << 31;
const RFR_BIT: u8 = 1 << iseg::MLX5_RFR_BIT_OFFSET;
const COUNTER_MASK: u32 = 0x00ff_ffff;

impl Bar {
    /// A BAR in its power-on state: firmware initializing, no command queue, health
    /// counter 0. `first_uar` is raised to [`MIN_FIRST_UAR`] and `pages` to at least
    /// one UAR page if the configuration asks for less.
    pub fn new(mut config: BarConfig, clock: Clock) -> Self {
        config.first_uar = config.first_uar.max(MIN_FIRST_UAR);
        config.pages = config.pages.max(config.first_uar + 1);
        let mut bar = Bar {
            config,
            clock,
            regs: Box::new(InitSeg::new_zeroed()),
            cmdq_programmed: false,
            held_initializing: false,
            cmdq_writes_while_booting: AtomicU64::new(0),
            reset_at_ns: 0,
            vanished: false,
            health_counter: 0,
            ignored_writes: AtomicU64::new(0),
            bad_reads: AtomicU64::new(0),
            uar_shift: 12,
        };
        bar.reset();
        bar
    }

    /// Back to the power-on state (what a PCI reset does); fault settings are kept.
    pub fn reset(&mut self) {
        let c = self.config;
        let r = &mut *self.regs;
        r.as_mut_bytes().fill(0);
        r.fw_rev
            .set(u32::from(c.fw_rev.minor) << 16 | u32::from(c.fw_rev.major));
        r.cmdif_rev_fw_sub
            .set(u32::from(iseg::CMD_IF_REV) << 16 | u32::from(c.fw_rev.subminor));
        r.cmdq_addr_l_sz.set(c.cmdq.to_reg());
        r.health.fw_ver.set(c.fw_rev.health_fw_ver());
        r.health.hw_id.set(c.hw_id);
        self.cmdq_programmed = false;
        self.uar_shift = 12;
        self.health_counter = 0;
        self.reset_at_ns = self.clock.now_ns();
        self.held_initializing = false;
        self.store_initializing();
        self.store_health_counter();
    }

    /// The configuration.
    pub fn config(&self) -> &BarConfig {
        &self.config
    }

    /// BAR0 length in bytes.
    pub fn len(&self) -> usize {
        self.config.pages as usize * ADAPTER_PAGE_SIZE
    }

    /// Always false: BAR0 holds at least the init segment and one UAR page.
    pub fn is_empty(&self) -> bool {
        false
    }

    fn init_region_end(&self) -> usize {
        self.config.first_uar as usize * ADAPTER_PAGE_SIZE
    }

    fn in_range(&self, off: usize, width: usize) -> bool {
        off.is_multiple_of(width.min(8))
            && off.checked_add(width).is_some_and(|end| end <= self.len())
    }

    fn ignore(&self) -> Option<BarEvent> {
        self.ignored_writes.fetch_add(1, Ordering::Relaxed);
        None
    }

    // ----- reads -----

    /// Reads the 32-bit register at `off` (its value; the device stores it big-endian).
    pub fn read32(&self, off: usize) -> u32 {
        if self.vanished {
            return u32::MAX;
        }
        if !self.in_range(off, 4) {
            self.bad_reads.fetch_add(1, Ordering::Relaxed);
            return u32::MAX;
        }
        if off >= self.init_region_end() {
            // UAR pages hold write-only doorbells.
            return 0;
        }
        match off {
            // The free-running counter of the device clock (PRM `initial_seg`
            // `internal_timer_h/l`), the same count as the CQE `timestamp`: ticks of
            // `device_frequency_khz`, not nanoseconds (Linux `mlx5_read_time` reads
            // it as cycles and converts with that frequency).
            iseg::INTERNAL_TIMER_H => (device_ticks(self.clock.now_ns()) >> 32) as u32,
            iseg::INTERNAL_TIMER_L => device_ticks(self.clock.now_ns()) as u32,
            // The doorbell vector reads as zero.
            iseg::CMD_DBELL => 0,
            iseg::INITIALIZING => {
                let v = self.regs.initializing.get() & !INITIALIZING_BIT;
                if self.initializing() {
                    v | INITIALIZING_BIT
                } else {
                    v
                }
            }
            _ => match self.regs.as_bytes().get(off..off + 4) {
                Some(b) => u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
                // Reserved space past `struct mlx5_init_seg`.
                None => 0,
            },
        }
    }

    // ----- writes -----

    /// Writes `value` to the 32-bit register at `off`; returns what the device must do.
    pub fn write32(&mut self, off: usize, value: u32) -> Option<BarEvent> {
        if self.vanished || !self.in_range(off, 4) {
            return self.ignore();
        }
        if off >= self.init_region_end() {
            return self.uar_write32(off, value);
        }
        match off {
            // A booting firmware does not latch the command queue address (Linux
            // mlx5_core `mlx5_function_enable` waits for `initializing` to clear
            // before `mlx5_cmd_enable` writes it).
            iseg::CMDQ_ADDR_H | iseg::CMDQ_ADDR_L_SZ if self.initializing() => {
                self.cmdq_writes_while_booting
                    .fetch_add(1, Ordering::Relaxed);
                None
            }
            iseg::CMDQ_ADDR_H => {
                self.regs.cmdq_addr_h.set(value);
                None
            }
            iseg::CMDQ_ADDR_L_SZ => {
                let nic_interface = iseg::nic_interface_of(value);
                let stored = (value & 0xffff_f000)
                    | (u32::from(nic_interface) << iseg::MLX5_NIC_IFC_OFFSET)
                    | self.config.cmdq.to_reg();
                self.regs.cmdq_addr_l_sz.set(stored);
                self.cmdq_programmed = true;
                Some(BarEvent::CmdqAddress {
                    addr: self.programmed_addr(),
                    nic_interface,
                })
            }
            iseg::CMD_DBELL => {
                let slots = value & self.slot_mask();
                if slots == 0 {
                    self.ignore()
                } else {
                    Some(BarEvent::CmdDoorbell { slots })
                }
            }
            _ => self.ignore(),
        }
    }

    /// Writes `value` big-endian to the 64 bits at `off` (doorbells).
    pub fn write64(&mut self, off: usize, value: u64) -> Option<BarEvent> {
        if self.vanished || !self.in_range(off, 8) || off < self.init_region_end() {
            return self.ignore();
        }
        let (index, page_off) = self.uar_of(off);
        let doorbell = match uar::classify(page_off, self.config.bf_reg_size) {
            UarRegister::CqArm => {
                let (sn, cmd, ci) = dbr::decode_cq_arm_word((value >> 32) as u32);
                UarDoorbell::CqArm {
                    cqn: value as u32 & COUNTER_MASK,
                    sn,
                    solicited: cmd != 0,
                    ci,
                }
            }
            UarRegister::BlueFlame {
                bfreg,
                half,
                offset,
            } => UarDoorbell::Send {
                bfreg,
                half,
                offset,
                ctrl: value.to_be_bytes(),
            },
            _ => return self.ignore(),
        };
        Some(BarEvent::Uar { index, doorbell })
    }

    /// Copies a 64-byte BlueFlame chunk to `off`.
    pub fn write_block64(&mut self, off: usize, block: &Block64) -> Option<BarEvent> {
        if self.vanished || !self.in_range(off, 64) || off < self.init_region_end() {
            return self.ignore();
        }
        let (index, page_off) = self.uar_of(off);
        if page_off + block.len() > ADAPTER_PAGE_SIZE {
            return self.ignore();
        }
        match uar::classify(page_off, self.config.bf_reg_size) {
            UarRegister::BlueFlame {
                bfreg,
                half,
                offset,
            } => Some(BarEvent::Uar {
                index,
                doorbell: UarDoorbell::BlueFlame {
                    bfreg,
                    half,
                    offset,
                    block: *block,
                },
            }),
            _ => self.ignore(),
        }
    }

    fn uar_write32(&mut self, off: usize, value: u32) -> Option<BarEvent> {
        let (index, page_off) = self.uar_of(off);
        let arm = match uar::classify(page_off, self.config.bf_reg_size) {
            UarRegister::EqArm => true,
            UarRegister::EqNoArm => false,
            _ => return self.ignore(),
        };
        let (eqn, ci) = uar::decode_eq_doorbell(value);
        Some(BarEvent::Uar {
            index,
            doorbell: UarDoorbell::Eq { eqn, ci, arm },
        })
    }

    /// The UAR index and the offset in its page of BAR0 offset `off`. With UAR pages
    /// above 4 KiB the registers are in the page's first 4 KiB: an offset past them is
    /// given as `ADAPTER_PAGE_SIZE` or more, which no register has.
    fn uar_of(&self, off: usize) -> (u32, usize) {
        (
            (off >> self.uar_shift) as u32,
            off & ((1 << self.uar_shift) - 1),
        )
    }

    /// Sets the UAR geometry: UAR `n` is at BAR0 offset `n << shift` (12 to 16, as the
    /// firmware's capabilities chose at INIT_HCA; 12 at reset).
    pub fn set_uar_shift(&mut self, shift: u32) {
        self.uar_shift = shift.clamp(12, 16);
    }

    fn slot_mask(&self) -> u32 {
        let n = self.config.cmdq.entries().min(MLX5_MAX_COMMANDS);
        if n >= 32 {
            u32::MAX
        } else {
            (1u32 << n) - 1
        }
    }

    fn programmed_addr(&self) -> u64 {
        u64::from(self.regs.cmdq_addr_h.get()) << 32
            | u64::from(self.regs.cmdq_addr_l_sz.get() & 0xffff_f000)
    }

    // ----- state for the firmware -----

    /// The command queue's DMA address, once the driver has programmed it.
    pub fn cmdq_addr(&self) -> Option<u64> {
        self.cmdq_programmed.then(|| self.programmed_addr())
    }

    /// The command queue geometry the BAR reports.
    pub fn cmdq_geometry(&self) -> CmdqGeometry {
        self.config.cmdq
    }

    /// The NIC interface mode last written (3 bits, as the drivers read it).
    pub fn nic_interface(&self) -> u8 {
        iseg::nic_interface_of(self.regs.cmdq_addr_l_sz.get())
    }

    /// Whether the NIC interface is in mode `mode`.
    pub fn nic_interface_is(&self, mode: NicInterface) -> bool {
        self.nic_interface() == mode as u8
    }

    /// Whether firmware reports itself initializing: from reset until the boot time
    /// has passed, or while held there ([`Bar::set_initializing`]).
    pub fn initializing(&self) -> bool {
        self.held_initializing || self.boot_remaining() > Duration::ZERO
    }

    /// Device time left until the firmware has booted (zero once it has).
    pub fn boot_remaining(&self) -> Duration {
        let since = self.clock.now_ns().saturating_sub(self.reset_at_ns);
        self.config
            .boot_time
            .saturating_sub(Duration::from_nanos(since))
    }

    /// Holds the firmware in `initializing` past its boot time (a firmware that never
    /// finishes booting), or releases it. A reset releases it too.
    pub fn set_initializing(&mut self, on: bool) {
        self.held_initializing = on;
    }

    /// Command queue address writes (either half) made while the firmware was
    /// booting, which it did not latch: a driver that did not wait for `initializing`
    /// to clear first.
    pub fn cmdq_writes_while_booting(&self) -> u64 {
        self.cmdq_writes_while_booting.load(Ordering::Relaxed)
    }

    fn store_initializing(&mut self) {
        let c = self.config;
        let mut v = u32::from(c.nic_interface_supported & 7) << 24;
        if c.fw_reset_supported {
            v |= 1 << iseg::MLX5_FW_RESET_SUPPORTED_OFFSET;
        }
        // Bit 31 is computed at read time from `initializing()`.
        self.regs.initializing.set(v);
    }

    // ----- health -----

    /// Advances the health counter by one (firmware's heartbeat; 24 bits, wrapping).
    /// A test that wants a stuck firmware simply stops calling it.
    pub fn tick(&mut self) {
        self.health_counter = (self.health_counter + 1) & COUNTER_MASK;
        self.store_health_counter();
    }

    /// The health counter.
    pub fn health_counter(&self) -> u32 {
        self.health_counter
    }

    fn store_health_counter(&mut self) {
        let synd = u32::from(self.regs.health.synd);
        self.regs
            .health_counter
            .set(synd << 24 | self.health_counter);
    }

    /// Raises a fatal health condition: `synd` and `ext_synd` in the health buffer (and
    /// the syndrome mirror of the `health_counter` register), with the reset-for-recovery
    /// bit if `rfr`.
    pub fn set_fatal(&mut self, synd: u8, ext_synd: u16, rfr: bool) {
        let h: &mut HealthBuffer = &mut self.regs.health;
        h.synd = synd;
        h.ext_synd.set(ext_synd);
        h.rfr_severity = if rfr { RFR_BIT } else { 0 };
        self.store_health_counter();
    }

    /// Clears the fatal health condition.
    pub fn clear_fatal(&mut self) {
        self.set_fatal(0, 0, false);
    }

    /// Makes the device fall off the bus (every read all ones, every write ignored), or
    /// come back.
    pub fn set_vanished(&mut self, vanished: bool) {
        self.vanished = vanished;
    }

    /// Whether the device has fallen off the bus.
    pub fn vanished(&self) -> bool {
        self.vanished
    }

    /// Writes that were ignored: outside BAR0, misaligned, to read-only registers, to
    /// undefined UAR offsets, or while the device was gone.
    pub fn ignored_writes(&self) -> u64 {
        self.ignored_writes.load(Ordering::Relaxed)
    }

    /// Reads outside BAR0 or misaligned (answered with all ones).
    pub fn bad_reads(&self) -> u64 {
        self.bad_reads.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroverbs_hw::control::iseg::{initial_seg, reg_get};
    use ferroverbs_hw::datapath::dbr::{cq_arm_doorbell, cq_arm_word, CqArmCmd};
    use proptest::prelude::*;
    use std::time::Duration;

    fn bar() -> Bar {
        Bar::new(BarConfig::default(), Clock::virtual_time())
    }

    #[test]
    fn power_on_reads() {
        let b = bar();
        assert_eq!(b.read32(iseg::FW_REV), 35 << 16 | 16);
        assert_eq!(
            reg_get(
                initial_seg::cmd_interface_rev,
                b.read32(iseg::CMDIF_REV_FW_SUB)
            ),
            5
        );
        assert_eq!(
            reg_get(
                initial_seg::fw_rev_subminor,
                b.read32(iseg::CMDIF_REV_FW_SUB)
            ),
            2000
        );
        // Reference §2.1: low byte 0x56 = 32 entries of 64 bytes.
        assert_eq!(b.read32(iseg::CMDQ_ADDR_L_SZ), 0x56);
        assert_eq!(
            CmdqGeometry::from_reg(b.read32(iseg::CMDQ_ADDR_L_SZ)).validate(),
            Ok(DEFAULT_CMDQ)
        );
        assert!(iseg::is_initializing(b.read32(iseg::INITIALIZING)));
        assert!(b.initializing());
        assert_eq!(b.read32(iseg::HEALTH_FW_VER), 16 << 24 | 35 << 16 | 2000);
        assert_ne!(b.read32(iseg::HEALTH_FW_VER), u32::MAX);
        assert_eq!(b.read32(iseg::HEALTH + 0x34), 0x20d);
        assert_eq!(b.read32(iseg::HEALTH_IRISC_SYND), 0);
        assert_eq!(b.read32(iseg::HEALTH_COUNTER), 0);
        assert_eq!(b.read32(iseg::CMD_DBELL), 0);
        assert_eq!(
            b.read32(0x3000),
            0,
            "reserved init-segment space reads zero"
        );
        assert_eq!(b.cmdq_addr(), None);
        assert_eq!(b.len(), 32 << 20);
        assert_eq!(b.bad_reads(), 0);
    }

    #[test]
    fn programming_the_command_queue() {
        let clock = Clock::virtual_time();
        let mut b = Bar::new(BarConfig::default(), clock.clone());
        // While the firmware boots the address is not latched.
        assert_eq!(b.write32(iseg::CMDQ_ADDR_H, 0x0000_0007), None);
        assert_eq!(b.write32(iseg::CMDQ_ADDR_L_SZ, 0x7777_7000), None);
        assert_eq!(b.cmdq_writes_while_booting(), 2);
        assert_eq!(b.cmdq_addr(), None);
        assert_eq!(b.read32(iseg::CMDQ_ADDR_H), 0);
        assert_eq!(b.read32(iseg::CMDQ_ADDR_L_SZ), 0x56);
        clock.advance(DEFAULT_BOOT_TIME);
        // Booted: the bit clears on its own, before any address is written.
        assert!(!b.initializing());
        assert!(!iseg::is_initializing(b.read32(iseg::INITIALIZING)));
        assert_eq!(b.write32(iseg::CMDQ_ADDR_H, 0x0000_0001), None);
        let ev = b.write32(iseg::CMDQ_ADDR_L_SZ, 0x2345_6000);
        assert_eq!(
            ev,
            Some(BarEvent::CmdqAddress {
                addr: 0x1_2345_6000,
                nic_interface: 0
            })
        );
        assert_eq!(b.cmdq_addr(), Some(0x1_2345_6000));
        assert!(!b.initializing());
        assert!(!iseg::is_initializing(b.read32(iseg::INITIALIZING)));
        // The address reads back with the read-only geometry.
        assert_eq!(b.read32(iseg::CMDQ_ADDR_L_SZ), 0x2345_6056);
        assert_eq!(b.read32(iseg::CMDQ_ADDR_H), 1);
        // Fast teardown: write DISABLED the drivers' way and read it back.
        let cur = b.read32(iseg::CMDQ_ADDR_L_SZ);
        let ev = b.write32(
            iseg::CMDQ_ADDR_L_SZ,
            iseg::with_nic_interface(cur, NicInterface::Disabled),
        );
        assert!(matches!(
            ev,
            Some(BarEvent::CmdqAddress {
                nic_interface: 1,
                ..
            })
        ));
        assert!(b.nic_interface_is(NicInterface::Disabled));
        assert_eq!(iseg::nic_interface_of(b.read32(iseg::CMDQ_ADDR_L_SZ)), 1);
        assert_eq!(b.read32(iseg::CMDQ_ADDR_L_SZ) & 0xff, 0x56);
        // SW reset needs the third bit the header does not declare.
        b.write32(
            iseg::CMDQ_ADDR_L_SZ,
            iseg::with_nic_interface(cur, NicInterface::SwReset),
        );
        assert_eq!(b.nic_interface(), 7);
        assert_eq!(b.cmdq_writes_while_booting(), 2);
        b.reset();
        assert!(b.initializing());
        assert_eq!(b.cmdq_addr(), None);
        assert_eq!(b.read32(iseg::CMDQ_ADDR_L_SZ), 0x56);
    }

    #[test]
    fn boot_time_clears_initializing_for_pre_init_waits() {
        let clock = Clock::virtual_time();
        let cfg = BarConfig {
            boot_time: Duration::from_millis(10),
            nic_interface_supported: 0b011,
            fw_reset_supported: true,
            ..BarConfig::default()
        };
        let b = Bar::new(cfg, clock.clone());
        assert_eq!(
            b.read32(iseg::INITIALIZING),
            1 << 31 | 1 << 30 | 0b011 << 24
        );
        clock.advance(Duration::from_millis(9));
        assert!(b.initializing());
        assert_eq!(b.boot_remaining(), Duration::from_millis(1));
        clock.advance(Duration::from_millis(1));
        assert!(!b.initializing());
        assert_eq!(b.boot_remaining(), Duration::ZERO);
        assert_eq!(b.read32(iseg::INITIALIZING), 1 << 30 | 0b011 << 24);
    }

    #[test]
    fn held_initializing_outlasts_the_boot_and_a_reset_releases_it() {
        let clock = Clock::virtual_time();
        let mut b = Bar::new(BarConfig::default(), clock.clone());
        b.set_initializing(true);
        clock.advance(Duration::from_secs(10));
        assert!(b.initializing());
        assert_eq!(b.write32(iseg::CMDQ_ADDR_L_SZ, 0x1000), None);
        assert_eq!(b.cmdq_writes_while_booting(), 1);
        b.reset();
        clock.advance(DEFAULT_BOOT_TIME);
        assert!(!b.initializing());
    }

    #[test]
    fn command_doorbell_reports_slots() {
        let mut b = bar();
        assert_eq!(
            b.write32(iseg::CMD_DBELL, 1),
            Some(BarEvent::CmdDoorbell { slots: 1 })
        );
        assert_eq!(
            b.write32(iseg::CMD_DBELL, 1 << 31 | 1 << 4),
            Some(BarEvent::CmdDoorbell {
                slots: 1 << 31 | 1 << 4
            })
        );
        assert_eq!(b.write32(iseg::CMD_DBELL, 0), None);
        assert_eq!(b.ignored_writes(), 1);
        // A smaller queue: bits past its entries are dropped.
        let cfg = BarConfig {
            cmdq: CmdqGeometry {
                log_size: 3,
                log_stride: 6,
            },
            ..BarConfig::default()
        };
        let mut small = Bar::new(cfg, Clock::virtual_time());
        assert_eq!(
            small.write32(iseg::CMD_DBELL, 0xffff_ff01),
            Some(BarEvent::CmdDoorbell {
                slots: 0xff01 & 0xff
            })
        );
        assert_eq!(small.write32(iseg::CMD_DBELL, 1 << 8), None);
    }

    #[test]
    fn read_only_registers_ignore_writes() {
        let mut b = bar();
        for off in [
            iseg::FW_REV,
            iseg::CMDIF_REV_FW_SUB,
            iseg::INITIALIZING,
            iseg::HEALTH_FW_VER,
            iseg::HEALTH_COUNTER,
            0x3000,
        ] {
            let before = b.read32(off);
            assert_eq!(b.write32(off, 0xdead_beef), None);
            assert_eq!(b.read32(off), before);
        }
        assert_eq!(b.ignored_writes(), 6);
        assert_eq!(b.write64(0x10, 0x1_0000_0000), None);
        assert_eq!(b.write_block64(0, &[0; 64]), None);
        assert_eq!(b.cmdq_addr(), None);
    }

    #[test]
    fn health_counter_and_timer() {
        let clock = Clock::virtual_time();
        let mut b = Bar::new(BarConfig::default(), clock.clone());
        b.tick();
        b.tick();
        assert_eq!(b.read32(iseg::HEALTH_COUNTER), 2);
        assert_eq!(
            reg_get(initial_seg::health_counter, b.read32(iseg::HEALTH_COUNTER)),
            2
        );
        for _ in 0..COUNTER_MASK {
            b.tick();
        }
        assert_eq!(b.health_counter(), 1, "24-bit counter wraps");
        assert_eq!(b.read32(iseg::INTERNAL_TIMER_L), 0);
        // 156,250 kHz: 5 ticks per 32 ns. 2^32 ticks + 5 ticks.
        clock.advance(Duration::from_nanos(((1u64 << 32) + 5) * 32 / 5 + 1));
        assert_eq!(b.read32(iseg::INTERNAL_TIMER_H), 1);
        assert_eq!(b.read32(iseg::INTERNAL_TIMER_L), 5);
        // One second of device time is device_frequency_khz * 1000 ticks.
        let before = (u64::from(b.read32(iseg::INTERNAL_TIMER_H)) << 32)
            | u64::from(b.read32(iseg::INTERNAL_TIMER_L));
        clock.advance(Duration::from_secs(1));
        let after = (u64::from(b.read32(iseg::INTERNAL_TIMER_H)) << 32)
            | u64::from(b.read32(iseg::INTERNAL_TIMER_L));
        assert_eq!(
            after - before,
            u64::from(crate::engine::cq::DEVICE_FREQUENCY_KHZ) * 1000
        );
    }

    #[test]
    fn fatal_health_and_vanishing() {
        let mut b = bar();
        b.tick();
        b.set_fatal(0x7, 0x1234, true);
        let w = b.read32(iseg::HEALTH_IRISC_SYND);
        assert_eq!((w >> 16) & 0xff, 0x7);
        assert_eq!(w & 0xffff, 0x1234);
        assert_eq!(b.read32(iseg::HEALTH_RFR_SEVERITY) >> 31, 1);
        assert_eq!(b.read32(iseg::HEALTH_COUNTER), 0x07_000001);
        b.clear_fatal();
        assert_eq!(b.read32(iseg::HEALTH_IRISC_SYND), 0);
        assert_eq!(b.read32(iseg::HEALTH_COUNTER), 1);

        b.set_vanished(true);
        assert_eq!(b.read32(iseg::HEALTH_FW_VER), u32::MAX);
        assert_eq!(b.read32(iseg::FW_REV), u32::MAX);
        assert_eq!(b.write32(iseg::CMD_DBELL, 1), None);
        assert_eq!(b.write32(iseg::CMDQ_ADDR_L_SZ, 0x1000), None);
        assert_eq!(b.cmdq_addr(), None);
        b.set_vanished(false);
        assert_eq!(b.read32(iseg::FW_REV), 35 << 16 | 16);
    }

    #[test]
    fn uar_doorbells() {
        let mut b = bar();
        let page = uar::uar_bar_offset(9);
        assert_eq!(
            b.write32(
                page + uar::EQ_DOORBELL_ARM,
                uar::eq_doorbell_value(3, 0x12_3456)
            ),
            Some(BarEvent::Uar {
                index: 9,
                doorbell: UarDoorbell::Eq {
                    eqn: 3,
                    ci: 0x12_3456,
                    arm: true
                }
            })
        );
        assert_eq!(
            b.write32(page + uar::EQ_DOORBELL_NO_ARM, uar::eq_doorbell_value(3, 7)),
            Some(BarEvent::Uar {
                index: 9,
                doorbell: UarDoorbell::Eq {
                    eqn: 3,
                    ci: 7,
                    arm: false
                }
            })
        );
        let arm = cq_arm_doorbell(cq_arm_word(2, CqArmCmd::Solicited, 0x55), 0xabc);
        assert_eq!(
            b.write64(page + uar::MLX5_CQ_DOORBELL, arm),
            Some(BarEvent::Uar {
                index: 9,
                doorbell: UarDoorbell::CqArm {
                    cqn: 0xabc,
                    sn: 2,
                    solicited: true,
                    ci: 0x55
                }
            })
        );
        let ctrl = [0x00, 0x00, 0x01, 0x0a, 0x00, 0x12, 0x34, 0x02];
        assert_eq!(
            b.write64(page + uar::MLX5_BF_OFFSET, u64::from_be_bytes(ctrl)),
            Some(BarEvent::Uar {
                index: 9,
                doorbell: UarDoorbell::Send {
                    bfreg: 0,
                    half: 0,
                    offset: 0,
                    ctrl
                }
            })
        );
        let mut block = [0u8; 64];
        block[0] = 0xaa;
        // bfreg 1, second half (bf_reg_size 512): 0x800 + 512 + 256 + 64.
        assert_eq!(
            b.write_block64(page + 0x800 + 512 + 256 + 64, &block),
            Some(BarEvent::Uar {
                index: 9,
                doorbell: UarDoorbell::BlueFlame {
                    bfreg: 1,
                    half: 1,
                    offset: 64,
                    block
                }
            })
        );
        // Undefined UAR offsets and widths are ignored.
        assert_eq!(b.write32(page + 0x20, 1), None);
        assert_eq!(b.write64(page + 0x40, 1), None);
        assert_eq!(b.write_block64(page + 0x40, &block), None);
        assert_eq!(b.write32(page + 0x100, 1), None);
        assert_eq!(b.ignored_writes(), 4);
        assert_eq!(b.read32(page + 0x40), 0);
        // UAR indexes below first_uar are the init segment.
        assert_eq!(b.write32(uar::uar_bar_offset(1) + 0x40, 1), None);
    }

    #[test]
    fn out_of_range_and_misaligned() {
        let mut b = bar();
        let end = b.len();
        assert_eq!(b.read32(end), u32::MAX);
        assert_eq!(b.read32(end - 2), u32::MAX);
        assert_eq!(b.read32(usize::MAX), u32::MAX);
        assert_eq!(b.read32(iseg::FW_REV + 1), u32::MAX);
        assert_eq!(b.bad_reads(), 4);
        assert_eq!(b.write32(end, 1), None);
        assert_eq!(b.write32(usize::MAX - 1, 1), None);
        assert_eq!(b.write64(end - 4, 1), None);
        assert_eq!(b.write64(usize::MAX, 1), None);
        assert_eq!(b.write_block64(end - 32, &[0; 64]), None);
        assert_eq!(b.write_block64(usize::MAX - 63, &[0; 64]), None);
        assert_eq!(b.write32(iseg::CMD_DBELL + 2, 1), None);
        assert_eq!(b.ignored_writes(), 7);
    }

    #[test]
    fn config_is_made_consistent() {
        let cfg = BarConfig {
            pages: 0,
            first_uar: 0,
            ..BarConfig::default()
        };
        let b = Bar::new(cfg, Clock::virtual_time());
        assert_eq!(b.config().first_uar, MIN_FIRST_UAR);
        assert_eq!(MIN_FIRST_UAR, 5);
        assert_eq!(b.len(), 6 * ADAPTER_PAGE_SIZE);
        assert!(!b.is_empty());
    }

    proptest! {
        #[test]
        fn never_panics(ops in proptest::collection::vec((0u8..4, any::<usize>(), any::<u64>()), 1..64),
                        near in proptest::collection::vec((0u8..4, 0usize..0x20_0000, any::<u64>()), 1..64)) {
            let cfg = BarConfig { pages: 256, ..BarConfig::default() };
            let mut b = Bar::new(cfg, Clock::virtual_time());
            for (kind, off, v) in ops.into_iter().chain(near) {
                match kind {
                    0 => {
                        let r = b.read32(off);
                        if off >= b.len() {
                            prop_assert_eq!(r, u32::MAX);
                        }
                    }
                    1 => { let _ = b.write32(off, v as u32); }
                    2 => { let _ = b.write64(off, v); }
                    _ => { let _ = b.write_block64(off, &[v as u8; 64]); }
                }
            }
            // The command queue geometry can never be overwritten.
            prop_assert_eq!(b.read32(iseg::CMDQ_ADDR_L_SZ) & 0xff, 0x56);
            prop_assert_eq!(reg_get(initial_seg::cmd_interface_rev, b.read32(iseg::CMDIF_REV_FW_SUB)), 5);
        }
    }
}

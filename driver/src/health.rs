//! The health watchdog.
//!
//! Firmware advances a 24-bit health counter in the init segment (0x1010 bits 23:0) and
//! reports trouble in the health buffer (0x200). Like both reference drivers the
//! watchdog looks at the "fatal sensors" in this order (Linux `health.c`
//! `check_fatal_sensors`, rdma-core `mlx5_vfio.c` `health_check`):
//!
//! 1. `health.fw_ver` (0x230) reads all ones: the device fell off the bus;
//! 2. `nic_interface` (0x14 bits 10:8) reads DISABLED (1) or SW_RESET (7);
//! 3. `health.synd` (0x23d) is nonzero: a firmware/hardware error syndrome;
//!
//! and, once per watchdog period, whether the counter moved. After
//! [`MAX_MISSES`] consecutive periods without movement the device is declared failed
//! (both drivers use 3).
//!
//! The verdict is sticky: once the device is failed, `Health::failed` returns the
//! reason at once and the driver refuses every further command instead of waiting on
//! a device that will not answer. No thread is involved: the watchdog runs whenever
//! the driver touches the device (before each command, while waiting for one, and in
//! `Context::process_events`), so a failure is noticed within one watchdog period of
//! the next call.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ferroverbs_hw::control::iseg::NicInterface;
use ferroverbs_hw::Bus;

use crate::error::Failure;
use crate::regs;

/// Consecutive watchdog periods without counter movement that declare the device dead
/// (Linux `MAX_MISSES`, rdma-core `MAX_MISSES`).
pub const MAX_MISSES: u32 = 3;

const NIC_IFC_DISABLED: u8 = NicInterface::Disabled as u8;
const NIC_IFC_SW_RESET: u8 = NicInterface::SwReset as u8;

/// The watchdog's state.
#[derive(Debug)]
pub(crate) struct Health {
    period: Duration,
    last_poll: Option<Duration>,
    last_counter: Option<u32>,
    misses: u32,
    verdict: Arc<OnceLock<Failure>>,
}

impl Health {
    /// A watchdog that compares the counter every `period`.
    pub(crate) fn new(period: Duration) -> Self {
        Health {
            period,
            last_poll: None,
            last_counter: None,
            misses: 0,
            verdict: Arc::new(OnceLock::new()),
        }
    }

    /// A handle on the verdict that can be read without holding the driver's lock.
    pub(crate) fn verdict(&self) -> Arc<OnceLock<Failure>> {
        Arc::clone(&self.verdict)
    }

    /// The failure, if the device has been declared failed.
    #[inline]
    pub(crate) fn failed(&self) -> Option<Failure> {
        self.verdict.get().copied()
    }

    /// Declares the device failed (the first reason sticks).
    pub(crate) fn fail(&self, why: Failure) -> Failure {
        let f = *self.verdict.get_or_init(|| why);
        if f == why {
            tracing::error!(reason = %f, "device failed");
        }
        f
    }

    /// Reads the fatal sensors; cheap enough to run before every command.
    pub(crate) fn check_sensors<B: Bus>(&self, bus: &B) -> Result<(), Failure> {
        if let Some(f) = self.failed() {
            return Err(f);
        }
        if let Some(f) = read_sensors(bus) {
            return Err(self.fail(f));
        }
        Ok(())
    }

    /// Runs the watchdog if a period has passed since its last run: the sensors, then
    /// the counter comparison.
    pub(crate) fn tick<B: Bus>(&mut self, bus: &B, now: Duration) -> Result<(), Failure> {
        if let Some(f) = self.failed() {
            return Err(f);
        }
        match self.last_poll {
            Some(t) if now.saturating_sub(t) < self.period => return Ok(()),
            _ => {}
        }
        self.last_poll = Some(now);
        self.check_sensors(bus)?;
        let counter = regs::health_counter(bus.read32(regs::HEALTH_COUNTER));
        if self.last_counter == Some(counter) {
            self.misses += 1;
            tracing::warn!(counter, misses = self.misses, "health counter did not move");
            if self.misses >= MAX_MISSES {
                return Err(self.fail(Failure::CounterStalled {
                    counter,
                    polls: self.misses,
                }));
            }
        } else {
            self.misses = 0;
            self.last_counter = Some(counter);
        }
        Ok(())
    }
}

/// The fatal sensors, in the reference drivers' order; `None` when healthy.
pub(crate) fn read_sensors<B: Bus>(bus: &B) -> Option<Failure> {
    if bus.read32(regs::HEALTH_FW_VER) == u32::MAX {
        return Some(Failure::Vanished);
    }
    let nic = regs::nic_interface(bus.read32(regs::CMDQ_ADDR_L_SZ));
    if nic == NIC_IFC_DISABLED || nic == NIC_IFC_SW_RESET {
        return Some(Failure::NicInterface { mode: nic });
    }
    let w = bus.read32(regs::HEALTH_SYND_DWORD);
    let synd = (w >> 16) as u8;
    if synd != 0 {
        return Some(Failure::FatalSyndrome {
            synd,
            ext_synd: w as u16,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroverbs_hw::MemBus;

    fn healthy_bus() -> MemBus {
        let bus = MemBus::new(0x2000);
        bus.write32(regs::HEALTH_FW_VER, 0x1000_0000);
        bus
    }

    #[test]
    fn stalled_counter_fails_after_three_periods() {
        let bus = healthy_bus();
        let mut h = Health::new(Duration::from_millis(100));
        let ms = Duration::from_millis;
        h.tick(&bus, ms(0)).unwrap();
        // Within the period nothing is compared.
        h.tick(&bus, ms(50)).unwrap();
        h.tick(&bus, ms(100)).unwrap();
        h.tick(&bus, ms(200)).unwrap();
        assert_eq!(
            h.tick(&bus, ms(300)),
            Err(Failure::CounterStalled {
                counter: 0,
                polls: 3
            })
        );
        assert!(h.failed().is_some());
        // Sticky, whatever the device does now.
        bus.write32(regs::HEALTH_COUNTER, 5);
        assert!(h.tick(&bus, ms(1000)).is_err());
        assert!(h.check_sensors(&bus).is_err());
    }

    #[test]
    fn a_moving_counter_keeps_the_device_alive() {
        let bus = healthy_bus();
        let mut h = Health::new(Duration::from_millis(10));
        for i in 0..20u32 {
            bus.write32(regs::HEALTH_COUNTER, 0xab00_0000 | i);
            h.tick(&bus, Duration::from_millis(10 * u64::from(i)))
                .unwrap();
        }
        // Two misses, then movement: the count restarts.
        let t = Duration::from_millis(1000);
        h.tick(&bus, t).unwrap();
        h.tick(&bus, t * 2).unwrap();
        bus.write32(regs::HEALTH_COUNTER, 77);
        h.tick(&bus, t * 3).unwrap();
        h.tick(&bus, t * 4).unwrap();
        h.tick(&bus, t * 5).unwrap();
        assert!(h.failed().is_none());
    }

    #[test]
    fn sensors_in_order() {
        let bus = healthy_bus();
        assert_eq!(read_sensors(&bus), None);
        bus.write32(regs::HEALTH_SYND_DWORD, 0x0001_0042);
        assert_eq!(
            read_sensors(&bus),
            Some(Failure::FatalSyndrome {
                synd: 1,
                ext_synd: 0x42
            })
        );
        bus.write32(regs::CMDQ_ADDR_L_SZ, 7 << 8);
        assert_eq!(read_sensors(&bus), Some(Failure::NicInterface { mode: 7 }));
        bus.write32(regs::HEALTH_FW_VER, u32::MAX);
        assert_eq!(read_sensors(&bus), Some(Failure::Vanished));
        let h = Health::new(Duration::from_secs(1));
        assert_eq!(h.check_sensors(&bus), Err(Failure::Vanished));
        assert_eq!(h.failed(), Some(Failure::Vanished));
    }
}

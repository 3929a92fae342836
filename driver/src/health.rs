//! The health watchdog.
//!
//! Firmware advances a 24-bit health counter in the init segment (0x1010 bits 23:0) and
//! reports trouble in the health buffer (0x200). Like both reference drivers the
//! watchdog looks at the "fatal sensors" in this order (Linux `health.c`
//! `check_fatal_sensors`, rdma-core `mlx5_vfio.c` `health_check`):
//!
//! 1. `health.fw_ver` (0x230) reads all ones: the device fell off the bus;
//! 2. `nic_interface` (0x14 bits 10:8) reads DISABLED (1) or SW_RESET (7);
//! 3. `health.synd` (0x23d) is nonzero **and** the RFR bit (reset for recovery
//!    requested, bit 7 of `rfr_severity` at 0x238, bit 31 of its dword) is set: the
//!    firmware asks for a reset (rdma-core `sensor_fw_synd_rfr`, Linux
//!    `check_fatal_sensors`' `sensor_fw_synd_rfr`);
//!
//! and, once per watchdog period, whether the counter moved.
//!
//! A syndrome without RFR is not fatal: the firmware reports an error it has dealt
//! with, or not yet decided about (Linux `poll_health` queues its health "report"
//! work for a syndrome that changed, and keeps the device running). The watchdog
//! counts each new such syndrome (`Health::reports`), logs it at WARN and hands it
//! to the driver, which queues it as an async event
//! ([`crate::eq::AsyncEvent::HealthReport`]); the same syndrome seen again is not
//! reported twice until it has cleared. After
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

/// A non-fatal health syndrome: `health.synd` nonzero without the RFR bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthReport {
    /// `health.synd` (1 = FW internal error, 0x10 = high temperature, ...).
    pub synd: u8,
    /// `health.ext_synd`.
    pub ext_synd: u16,
}

/// What the fatal sensors read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sensors {
    /// Nothing to report.
    Healthy,
    /// A syndrome without RFR: not fatal.
    Report(HealthReport),
    /// The device failed.
    Fatal(Failure),
}

/// The watchdog's state.
#[derive(Debug)]
pub(crate) struct Health {
    period: Duration,
    last_poll: Option<Duration>,
    last_counter: Option<u32>,
    misses: u32,
    verdict: Arc<OnceLock<Failure>>,
    /// The non-fatal syndrome last reported (cleared when the syndrome clears).
    last_report: Option<HealthReport>,
    /// A new non-fatal syndrome the driver has not taken yet.
    pending_report: Option<HealthReport>,
    /// Non-fatal syndromes reported so far.
    reports: u64,
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
            last_report: None,
            pending_report: None,
            reports: 0,
        }
    }

    /// Non-fatal syndromes reported so far (each new syndrome once).
    pub(crate) fn reports(&self) -> u64 {
        self.reports
    }

    /// Takes the non-fatal syndrome found since the last call, if any.
    pub(crate) fn take_report(&mut self) -> Option<HealthReport> {
        self.pending_report.take()
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

    /// Reads the fatal sensors; cheap enough to run before every command. A new
    /// non-fatal syndrome is counted, logged and kept for [`Health::take_report`].
    pub(crate) fn check_sensors<B: Bus>(&mut self, bus: &B) -> Result<(), Failure> {
        if let Some(f) = self.failed() {
            return Err(f);
        }
        match read_sensors(bus) {
            Sensors::Fatal(f) => return Err(self.fail(f)),
            Sensors::Report(r) => {
                if self.last_report != Some(r) {
                    self.last_report = Some(r);
                    self.pending_report = Some(r);
                    self.reports += 1;
                    tracing::warn!(
                        synd = r.synd,
                        ext_synd = r.ext_synd,
                        "firmware reported a health syndrome without reset request (not fatal)"
                    );
                }
            }
            Sensors::Healthy => self.last_report = None,
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

/// The fatal sensors, in the reference drivers' order (rdma-core `mlx5_vfio.c`
/// `mlx5_health_check_fatal_sensors`, Linux `health.c` `check_fatal_sensors`).
pub(crate) fn read_sensors<B: Bus>(bus: &B) -> Sensors {
    if bus.read32(regs::HEALTH_FW_VER) == u32::MAX {
        return Sensors::Fatal(Failure::Vanished);
    }
    let nic = regs::nic_interface(bus.read32(regs::CMDQ_ADDR_L_SZ));
    if nic == NIC_IFC_DISABLED || nic == NIC_IFC_SW_RESET {
        return Sensors::Fatal(Failure::NicInterface { mode: nic });
    }
    let w = bus.read32(regs::HEALTH_SYND_DWORD);
    let synd = (w >> 16) as u8;
    if synd == 0 {
        return Sensors::Healthy;
    }
    let ext_synd = w as u16;
    // A syndrome is fatal only with the reset-for-recovery bit (rdma-core
    // `sensor_fw_synd_rfr`: `rfr && synd`; Linux `sensor_fw_synd_rfr`).
    if regs::rfr(bus.read32(regs::HEALTH_RFR_SEVERITY)) {
        Sensors::Fatal(Failure::FatalSyndrome { synd, ext_synd })
    } else {
        Sensors::Report(HealthReport { synd, ext_synd })
    }
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
        assert_eq!(read_sensors(&bus), Sensors::Healthy);
        // A syndrome alone is a report, not a failure.
        bus.write32(regs::HEALTH_SYND_DWORD, 0x0001_0042);
        assert_eq!(
            read_sensors(&bus),
            Sensors::Report(HealthReport {
                synd: 1,
                ext_synd: 0x42
            })
        );
        // With RFR (bit 7 of `rfr_severity`, the top byte of its dword) it is fatal.
        bus.write32(regs::HEALTH_RFR_SEVERITY, 0x8000_0000);
        assert_eq!(
            read_sensors(&bus),
            Sensors::Fatal(Failure::FatalSyndrome {
                synd: 1,
                ext_synd: 0x42
            })
        );
        // RFR without a syndrome is nothing.
        bus.write32(regs::HEALTH_SYND_DWORD, 0);
        assert_eq!(read_sensors(&bus), Sensors::Healthy);
        bus.write32(regs::CMDQ_ADDR_L_SZ, 7 << 8);
        assert_eq!(
            read_sensors(&bus),
            Sensors::Fatal(Failure::NicInterface { mode: 7 })
        );
        bus.write32(regs::HEALTH_FW_VER, u32::MAX);
        assert_eq!(read_sensors(&bus), Sensors::Fatal(Failure::Vanished));
        let mut h = Health::new(Duration::from_secs(1));
        assert_eq!(h.check_sensors(&bus), Err(Failure::Vanished));
        assert_eq!(h.failed(), Some(Failure::Vanished));
    }

    #[test]
    fn a_syndrome_without_rfr_is_reported_once_per_change() {
        let bus = healthy_bus();
        let mut h = Health::new(Duration::from_millis(10));
        bus.write32(regs::HEALTH_SYND_DWORD, 0x0010_0007);
        h.check_sensors(&bus).unwrap();
        h.check_sensors(&bus).unwrap();
        assert_eq!(h.reports(), 1);
        assert_eq!(
            h.take_report(),
            Some(HealthReport {
                synd: 0x10,
                ext_synd: 7
            })
        );
        assert_eq!(h.take_report(), None);
        // A different syndrome is a new report; so is the first one after it cleared.
        bus.write32(regs::HEALTH_SYND_DWORD, 0x0001_0000);
        h.check_sensors(&bus).unwrap();
        bus.write32(regs::HEALTH_SYND_DWORD, 0);
        h.check_sensors(&bus).unwrap();
        bus.write32(regs::HEALTH_SYND_DWORD, 0x0001_0000);
        h.check_sensors(&bus).unwrap();
        assert_eq!(h.reports(), 3);
        assert!(h.failed().is_none());
        // The watchdog's counter rule still applies.
        for i in 0..=MAX_MISSES {
            let r = h.tick(&bus, Duration::from_millis(10 * u64::from(i)));
            assert_eq!(r.is_err(), i == MAX_MISSES, "poll {i}");
        }
    }
}

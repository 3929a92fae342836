//! Shared helpers of the bring-up tests: a deterministic simulated device, driver
//! configurations on its virtual clock, command builders, and the leak check.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use ferroverbs::dma::DmaBuf;
use ferroverbs::{Clock, Context, DeviceConfig, GidEntry};
use ferroverbs_hw::control::cmd::{new_input, Opcode};
use ferroverbs_hw::{DmaPerm, Field};
use ferroverbs_sim::{Sim, SimBus, SimConfig};

/// A deterministic (virtual-time) single-port device.
pub fn sim() -> Sim {
    Sim::new(SimConfig::deterministic(0x0f00, 1))
}

/// The driver's clock reading the device's virtual time, which the driver's waits
/// move on (in 100 µs steps while the firmware boots).
pub fn vclock(sim: &Sim) -> Arc<dyn Clock> {
    let (now, time) = (sim.clock().clone(), sim.clock().clone());
    Arc::new(ferroverbs::SteppedClock::new(
        move || now.now(),
        move |d| time.advance(d),
    ))
}

/// A clock that moves the device's virtual time on by `step` each time the driver
/// reads it: waits for a frozen device make progress and end in a timeout.
pub fn ticking(sim: &Sim, step: Duration) -> Arc<dyn Clock> {
    let c = sim.clock().clone();
    Arc::new(move || {
        c.advance(step);
        c.now()
    })
}

/// The health watchdog period the tests use.
pub const PERIOD: Duration = Duration::from_millis(500);
/// The command timeout the tests use.
pub const TIMEOUT: Duration = Duration::from_millis(200);

/// A configuration on the device's virtual time, with one IPv4 GID at index 0.
pub fn config(sim: &Sim) -> DeviceConfig {
    DeviceConfig {
        cmd_timeout: TIMEOUT,
        init_timeout: Duration::from_secs(1),
        health_period: PERIOD,
        ..DeviceConfig::default()
    }
    .with_clock(vclock(sim))
    .with_gid(gid0())
}

/// The GID every test configures at index 0.
pub fn gid0() -> GidEntry {
    GidEntry::ipv4(0, [10, 0, 0, 1], [0x02, 0, 0, 0, 0, 1])
}

/// Asserts that nothing is left on the device or in the IOMMU.
#[track_caller]
pub fn assert_nothing_left(sim: &Sim) {
    let s = sim.stats();
    assert_eq!(s.mappings, 0, "IOVA mappings left: {s:?}");
    assert_eq!(s.mapped_bytes, 0, "{s:?}");
    assert_eq!(s.pages_held, 0, "firmware pages left: {s:?}");
    assert_eq!(s.pages_abandoned, 0, "pages abandoned: {s:?}");
    assert_eq!(s.objects.total(), 0, "objects left: {s:?}");
    assert_eq!(s.commands_held, 0, "{s:?}");
}

/// A command input with its header.
pub fn input(op: Opcode, op_mod: u16, len: usize) -> Vec<u8> {
    new_input(op, op_mod, len)
}

/// Sets `f` (inside the context at `ctx`, if given) of `buf`.
pub fn set(buf: &mut [u8], ctx: Option<Field>, f: Field, v: u64) {
    match ctx {
        Some(c) => f.at(c.bit).set(buf, v),
        None => f.set(buf, v),
    }
}

/// A DMA buffer of `len` bytes for queue memory, mapped through the context's bus.
pub fn dma(ctx: &Context<SimBus>, len: usize) -> DmaBuf<SimBus> {
    DmaBuf::new(ctx.bus(), len, DmaPerm::RW).expect("DMA buffer")
}

/// Number of threads of this process.
pub fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(0)
}

//! Injected faults: failed commands at every bring-up step, a frozen command, a
//! stalled health counter, a fatal syndrome, a device that falls off the bus, a
//! firmware that never finishes initializing. Each gives a typed error, leaves nothing
//! mapped, and neither hangs nor panics (virtual time throughout).

mod bringup_support;
use bringup_support::*;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use ferroverbs::health::MAX_MISSES;
use ferroverbs::{
    CmdStatus, DeliveryStatus, Device, DeviceConfig, Error, Failure, InitWait, Opcode, Step, Wait,
};
use ferroverbs_hw::bus::Block64;
use ferroverbs_hw::control::cmd::Opcode as Op;
use ferroverbs_hw::control::cmdq::CmdqGeometry;
use ferroverbs_hw::control::iseg;
use ferroverbs_hw::{Bus, BusError, DmaPerm};
use ferroverbs_sim::fault::{CommandFault, DelayRule, FatalHealth, FaultOutcome, Hold};
use ferroverbs_sim::firmware::HcaState;
use ferroverbs_sim::{Sim, SimBus, SimConfig};

/// Each bring-up command, the op_mod / occurrence that identifies it, and the step
/// that must be reported when it fails.
const STEPS: &[(Op, Option<u16>, Option<u32>, Step)] = &[
    (Op::EnableHca, None, None, Step::EnableHca),
    (Op::QueryIssi, None, None, Step::Issi),
    (Op::SetIssi, None, None, Step::Issi),
    (Op::QueryPages, Some(1), None, Step::BootPages),
    (Op::ManagePages, None, Some(1), Step::BootPages),
    (Op::AccessReg, None, None, Step::HostEndianness),
    (Op::QueryHcaCap, Some(0), None, Step::QueryGeneralCaps),
    (Op::QueryHcaCap, Some(1), Some(1), Step::QueryGeneralCaps),
    (Op::SetHcaCap, Some(0), None, Step::SetGeneralCaps),
    (Op::QueryHcaCap, Some(1), Some(2), Step::SetGeneralCaps),
    // The ODP page, CUR (cap type 2): the device reports `pg`.
    (Op::QueryHcaCap, Some(5), None, Step::OdpCaps),
    (Op::QueryHcaCap, Some(8), None, Step::RoceCaps),
    (Op::SetHcaCap, Some(8), None, Step::RoceCaps),
    (Op::QueryPages, Some(2), None, Step::InitPages),
    (Op::ManagePages, None, Some(2), Step::InitPages),
    (Op::InitHca, None, None, Step::InitHca),
    (Op::ModifyNicVportContext, None, None, Step::EnableRoce),
    (Op::SetRoceAddress, None, None, Step::GidTable),
    (Op::AllocUar, None, None, Step::AllocUar),
    (Op::CreateEq, None, None, Step::AsyncEq),
];

fn fault(op: Op, op_mod: Option<u16>, nth: Option<u32>, outcome: FaultOutcome) -> CommandFault {
    CommandFault {
        opcode: op.value(),
        op_mod,
        nth,
        outcome,
    }
}

#[test]
fn a_failed_command_at_any_bring_up_step_is_named_and_undone() {
    for (i, &(op, op_mod, nth, step)) in STEPS.iter().enumerate() {
        let sim = sim();
        let syndrome = 0x0bad_0000 | i as u32;
        sim.fail_command(fault(
            op,
            op_mod,
            nth,
            FaultOutcome::Status {
                status: 0x03,
                syndrome,
            },
        ));
        let err = Device::open(sim.bus(), config(&sim)).expect_err("bring-up must fail");
        let Error::BringUp(b) = &err else {
            panic!("{op:?}: not a bring-up error: {err:?}")
        };
        assert_eq!(b.step, step, "{op:?} op_mod {op_mod:?}: {err}");
        match &*b.source {
            Error::Cmd(c) => {
                assert_eq!(c.opcode, Opcode(op.value()));
                assert_eq!(c.status, CmdStatus::BadParam);
                assert_eq!(c.syndrome, syndrome);
                if let Some(m) = op_mod {
                    assert_eq!(c.op_mod, m);
                }
            }
            other => panic!("{op:?}: {other:?}"),
        }
        assert!(
            err.to_string().contains(&format!("{syndrome:#010x}")),
            "{err}"
        );
        assert_nothing_left(&sim);
        assert_eq!(
            sim.hca_state(),
            HcaState::Disabled,
            "{op:?}: DISABLE_HCA ran"
        );
        assert_eq!(sim.stats().iommu_faults, 0);
    }
}

#[test]
fn a_delivery_error_is_reported_with_its_status() {
    let sim = sim();
    sim.fail_command(fault(Op::InitHca, None, None, FaultOutcome::Delivery(0x3)));
    let err = Device::open(sim.bus(), config(&sim)).unwrap_err();
    assert_eq!(err.step(), Some(Step::InitHca));
    let Error::BringUp(b) = err else {
        unreachable!()
    };
    assert!(matches!(
        *b.source,
        Error::Delivery {
            status: DeliveryStatus::BadBlockNumber,
            opcode: Opcode(0x102),
            ..
        }
    ));
    assert_nothing_left(&sim);
}

#[test]
fn a_frozen_command_during_bring_up_times_out_and_leaves_nothing_mapped() {
    let sim = sim();
    sim.delay_commands(DelayRule {
        opcode: Some(Op::InitHca.value()),
        nth: None,
        hold: Hold::UntilReleased,
    });
    let cfg = config(&sim).with_clock(ticking(&sim, Duration::from_millis(1)));
    let t0 = sim.clock().now();
    let err = Device::open(sim.bus(), cfg).unwrap_err();
    let Error::BringUp(b) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(b.step, Step::InitHca);
    match &*b.source {
        Error::CmdTimeout { opcode, waited, .. } => {
            assert_eq!(*opcode, Opcode(Op::InitHca.value()));
            assert!(*waited >= TIMEOUT);
        }
        other => panic!("{other:?}"),
    }
    // Bounded: one command timeout plus the undo, in device time.
    assert!(sim.clock().now() - t0 < TIMEOUT * 4);
    // The undo took the pages back and disabled the HCA on other slots; every
    // mapping is gone, including the frozen command's mailboxes.
    let s = sim.stats();
    assert_eq!(s.mappings, 0, "{s:?}");
    assert_eq!(s.pages_held, 0, "{s:?}");
    assert_eq!(s.commands_held, 1);
    // The device finally answers into memory it can no longer reach: an IOMMU fault,
    // not a use-after-free, and no panic.
    sim.clear_command_faults();
    sim.release_held();
    let s = sim.stats();
    assert_eq!(s.commands_held, 0);
    assert_eq!(s.mappings, 0);
}

#[test]
fn a_frozen_command_while_running_times_out_and_the_device_stays_usable() {
    let sim = sim();
    let cfg = config(&sim).with_clock(ticking(&sim, Duration::from_millis(1)));
    let ctx = Device::open(sim.bus(), cfg).unwrap();
    sim.delay_commands(DelayRule {
        opcode: Some(Op::QueryVportState.value()),
        nth: Some(1),
        hold: Hold::UntilReleased,
    });
    match ctx.query_port(1) {
        Err(Error::CmdTimeout { opcode, waited, .. }) => {
            assert_eq!(opcode, Opcode(Op::QueryVportState.value()));
            assert!(waited >= TIMEOUT && waited < TIMEOUT * 2, "{waited:?}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        ctx.failure().is_none(),
        "a timeout alone does not fail the device"
    );
    // The stuck slot is skipped; other commands still work.
    ctx.query_device().unwrap();
    assert_eq!(ctx.query_port(1).unwrap().gids, vec![gid0()]);
    // Once the device lets go of the slot, it is reused.
    sim.release_held();
    for _ in 0..40 {
        ctx.query_device().unwrap();
    }
    ctx.close().unwrap();
    assert_nothing_left(&sim);
}

#[test]
fn every_command_frozen_makes_teardown_stop_asking_and_unmap() {
    let sim = sim();
    let cfg = config(&sim).with_clock(ticking(&sim, Duration::from_millis(1)));
    let ctx = Device::open(sim.bus(), cfg).unwrap();
    sim.delay_commands(DelayRule {
        opcode: None,
        nth: None,
        hold: Hold::UntilReleased,
    });
    assert!(matches!(ctx.query_device(), Err(Error::CmdTimeout { .. })));
    let t0 = sim.clock().now();
    let r = ctx.close();
    // One teardown command timed out; the rest were not even tried.
    assert!(matches!(r, Err(Error::CmdTimeout { .. })), "{r:?}");
    assert!(sim.clock().now() - t0 < TIMEOUT * 2);
    assert_eq!(sim.stats().mappings, 0);
    sim.clear_command_faults();
    sim.release_held();
    assert_eq!(sim.stats().mappings, 0);
}

#[test]
fn a_stalled_health_counter_is_detected_within_the_watchdog_period() {
    let sim = sim();
    let ctx = Device::open(sim.bus(), config(&sim)).unwrap();
    // Healthy: time passes, the counter moves, nothing is reported.
    for _ in 0..20 {
        sim.advance(PERIOD / 4);
        ctx.process_events().unwrap();
    }
    sim.stall_health(true);
    let stalled_at = sim.clock().now();
    let step = PERIOD / 10;
    let detected = loop {
        sim.advance(step);
        match ctx.process_events() {
            Ok(()) => assert!(
                sim.clock().now() - stalled_at <= PERIOD * (MAX_MISSES + 1),
                "not detected within the watchdog period"
            ),
            Err(e) => break e,
        }
    };
    let after = sim.clock().now() - stalled_at;
    assert!(
        matches!(detected, Error::DeviceFailed(Failure::CounterStalled { polls, .. }) if polls == MAX_MISSES),
        "{detected:?}"
    );
    assert!(
        after > PERIOD * (MAX_MISSES - 1),
        "not before 3 unchanged polls: {after:?}"
    );
    assert!(after <= PERIOD * (MAX_MISSES + 1), "{after:?}");
    assert_failed_for_good(&sim, &ctx);
    drop(ctx);
    assert_eq!(sim.stats().mappings, 0);
}

/// After a failure every call returns at once, without a single command.
fn assert_failed_for_good(sim: &Sim, ctx: &ferroverbs::Context<ferroverbs_sim::SimBus>) {
    let before = sim.stats().commands_completed;
    let t0 = sim.clock().now();
    assert!(ctx.failure().is_some());
    assert!(matches!(ctx.query_device(), Err(Error::DeviceFailed(_))));
    assert!(matches!(ctx.query_port(1), Err(Error::DeviceFailed(_))));
    assert!(matches!(ctx.process_events(), Err(Error::DeviceFailed(_))));
    assert!(matches!(
        ctx.exec_cmd(&input(Op::AllocPd, 0, 16), 16),
        Err(Error::DeviceFailed(_))
    ));
    assert_eq!(
        sim.stats().commands_completed,
        before,
        "no command reached the device"
    );
    assert_eq!(sim.clock().now(), t0, "no waiting");
}

#[test]
fn a_fatal_health_syndrome_fails_the_device_at_the_next_call() {
    let sim = sim();
    let ctx = Device::open(sim.bus(), config(&sim)).unwrap();
    sim.raise_fatal(Some(FatalHealth {
        synd: 0x7,
        ext_synd: 0x1234,
        rfr: true,
    }));
    match ctx.query_device() {
        Err(Error::DeviceFailed(Failure::FatalSyndrome { synd, ext_synd })) => {
            assert_eq!((synd, ext_synd), (0x7, 0x1234));
        }
        other => panic!("{other:?}"),
    }
    assert_failed_for_good(&sim, &ctx);
    // Teardown issues nothing to a failed device and still unmaps everything.
    let before = sim.stats().commands_completed;
    assert!(matches!(ctx.close(), Err(Error::PagesNotReturned { .. })));
    assert_eq!(sim.stats().commands_completed, before);
    assert_eq!(sim.stats().mappings, 0);

    // An idle application notices through process_events as well.
    let sim = self::sim();
    let ctx = Device::open(sim.bus(), config(&sim)).unwrap();
    sim.raise_fatal(Some(FatalHealth {
        synd: 0x1,
        ext_synd: 0,
        rfr: true,
    }));
    assert!(matches!(
        ctx.process_events(),
        Err(Error::DeviceFailed(Failure::FatalSyndrome { synd: 1, .. }))
    ));
    drop(ctx);
    assert_eq!(sim.stats().mappings, 0);
}

#[test]
fn a_health_syndrome_without_rfr_does_not_fail_the_device() {
    let sim = sim();
    let ctx = Device::open(sim.bus(), config(&sim)).unwrap();
    sim.raise_fatal(Some(FatalHealth {
        synd: 0x7,
        ext_synd: 0x1234,
        rfr: false,
    }));
    // Commands keep running, the watchdog keeps its counter rule.
    let before = sim.stats().commands_completed;
    ctx.query_device().unwrap();
    ctx.process_events().unwrap();
    assert!(sim.stats().commands_completed > before);
    assert_eq!(ctx.failure(), None);
    assert_eq!(ctx.health_reports(), 1);
    sim.stall_health(true);
    let mut polls = 0;
    let err = loop {
        sim.advance(PERIOD);
        polls += 1;
        assert!(polls <= MAX_MISSES + 1, "stalled counter not detected");
        if let Err(e) = ctx.process_events() {
            break e;
        }
    };
    assert!(
        matches!(err, Error::DeviceFailed(Failure::CounterStalled { .. })),
        "{err:?}"
    );
    let _ = ctx.close();
    assert_eq!(sim.stats().mappings, 0);
}

#[test]
fn a_device_that_falls_off_the_bus_is_reported_not_waited_for() {
    let sim = sim();
    let ctx = Device::open(sim.bus(), config(&sim)).unwrap();
    sim.vanish(true);
    assert!(matches!(
        ctx.query_port(1),
        Err(Error::DeviceFailed(Failure::Vanished))
    ));
    assert_failed_for_good(&sim, &ctx);
    let _ = ctx.close();
    assert_eq!(sim.stats().mappings, 0);

    // Gone before bring-up: the init segment reads all ones.
    let sim = self::sim();
    sim.vanish(true);
    let err = Device::open(sim.bus(), config(&sim)).unwrap_err();
    assert_eq!(err.step(), Some(Step::InitSegment));
    assert!(err.to_string().contains("all ones"), "{err}");
    assert_eq!(sim.stats().mappings, 0);
}

/// A bus in front of the simulator whose `initializing` bit reads as set for the
/// first `reads` reads (counted from the command queue address write if
/// `after_cmdq`): a firmware that takes its time, or never finishes.
struct SlowInit {
    bus: SimBus,
    reads: AtomicU64,
    after_cmdq: bool,
    cmdq_written: AtomicBool,
}

impl SlowInit {
    fn new(sim: &Sim, reads: u64, after_cmdq: bool) -> Self {
        SlowInit {
            bus: sim.bus(),
            reads: AtomicU64::new(reads),
            after_cmdq,
            cmdq_written: AtomicBool::new(false),
        }
    }
}

impl Bus for SlowInit {
    fn bar0_len(&self) -> usize {
        self.bus.bar0_len()
    }
    fn read32(&self, off: usize) -> u32 {
        let v = self.bus.read32(off);
        if off == iseg::INITIALIZING
            && (!self.after_cmdq || self.cmdq_written.load(Ordering::Acquire))
            && self
                .reads
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                .is_ok()
        {
            return v | 1 << 31;
        }
        v
    }
    fn write32(&self, off: usize, value: u32) {
        if off == iseg::CMDQ_ADDR_L_SZ {
            self.cmdq_written.store(true, Ordering::Release);
        }
        self.bus.write32(off, value)
    }
    fn write64(&self, off: usize, value: u64) {
        self.bus.write64(off, value)
    }
    fn write_block64(&self, off: usize, block: &Block64) {
        self.bus.write_block64(off, block)
    }
    fn dma_map(&self, vaddr: usize, len: usize, perm: DmaPerm) -> Result<u64, BusError> {
        self.bus.dma_map(vaddr, len, perm)
    }
    fn dma_unmap(&self, iova: u64, len: usize) -> Result<(), BusError> {
        self.bus.dma_unmap(iova, len)
    }
}

#[test]
fn firmware_that_never_boots_times_out_before_the_command_queue_address() {
    let sim = sim();
    let dcfg = DeviceConfig {
        init_timeout: Duration::from_secs(2),
        ..config(&sim)
    };
    let err = Device::open(SlowInit::new(&sim, u64::MAX, false), dcfg).unwrap_err();
    assert_eq!(err.step(), Some(Step::WaitFirmwareBoot));
    assert!(
        err.to_string()
            .contains("firmware still initializing before the command queue address was written"),
        "{err}"
    );
    let Error::BringUp(b) = err else {
        unreachable!()
    };
    assert!(
        matches!(*b.source, Error::FirmwareInitTimeout { phase: InitWait::BeforeCmdqAddress, waited } if waited >= Duration::from_secs(2)),
        "{b:?}"
    );
    // The address was never written, nothing was mapped, no command was run.
    assert_eq!(sim.with_bar(|bar| bar.cmdq_addr()), None);
    assert_eq!(sim.stats().cmdq_writes_while_booting, 0);
    assert_eq!(sim.stats().mappings, 0);
    assert_eq!(sim.stats().commands_completed, 0);
}

#[test]
fn firmware_that_stays_initializing_after_the_command_queue_address_times_out() {
    let sim = sim();
    let dcfg = DeviceConfig {
        init_timeout: Duration::from_secs(2),
        ..config(&sim)
    };
    let err = Device::open(SlowInit::new(&sim, u64::MAX, true), dcfg).unwrap_err();
    assert_eq!(err.step(), Some(Step::WaitFirmware));
    assert!(
        err.to_string()
            .contains("firmware still initializing after the command queue address was written"),
        "{err}"
    );
    let Error::BringUp(b) = err else {
        unreachable!()
    };
    assert!(matches!(
        *b.source,
        Error::FirmwareInitTimeout { phase: InitWait::AfterCmdqAddress, waited } if waited >= Duration::from_secs(2)
    ));
    // The address was latched (the firmware had booted), then everything unwound.
    assert!(sim.with_bar(|bar| bar.cmdq_addr()).is_some());
    assert_eq!(sim.stats().mappings, 0);
    assert_eq!(sim.stats().commands_completed, 0);
}

#[test]
fn a_firmware_that_takes_a_while_is_waited_for_before_and_after() {
    for after_cmdq in [false, true] {
        let sim = self::sim();
        let dcfg = config(&sim).with_clock(ticking(&sim, Duration::from_millis(5)));
        let ctx = Device::open(SlowInit::new(&sim, 60, after_cmdq), dcfg).unwrap();
        assert!(sim.clock().now() >= Duration::from_millis(300));
        assert_eq!(sim.stats().cmdq_writes_while_booting, 0);
        ctx.close().unwrap();
        assert_nothing_left(&sim);
    }
}

#[test]
fn bring_up_waits_for_the_simulated_firmware_to_boot() {
    // Virtual time: the driver's waits move the device's time on until it has booted,
    // and only then write the command queue address.
    let mut cfg = SimConfig::deterministic(3, 1);
    cfg.bar.boot_time = Duration::from_millis(50);
    let sim = Sim::new(cfg);
    let ctx = Device::open(sim.bus(), config(&sim)).unwrap();
    assert!(sim.clock().now() >= Duration::from_millis(50));
    assert_eq!(sim.stats().cmdq_writes_while_booting, 0);
    assert!(sim.with_bar(|bar| bar.cmdq_addr()).is_some());
    ctx.close().unwrap();
    assert_nothing_left(&sim);

    // Real time, the driver on the host's clock.
    let mut cfg = SimConfig::threaded(4, 1);
    cfg.bar.boot_time = Duration::from_millis(30);
    let sim = Sim::new(cfg);
    let t = std::time::Instant::now();
    let dcfg = DeviceConfig {
        cmd_timeout: Duration::from_secs(5),
        ..DeviceConfig::default()
    }
    .with_gid(gid0());
    let ctx = Device::open(sim.bus(), dcfg).unwrap();
    assert!(t.elapsed() >= Duration::from_millis(30));
    assert_eq!(sim.stats().cmdq_writes_while_booting, 0);
    ctx.close().unwrap();
}

#[test]
fn a_virtual_clock_nobody_moves_ends_the_boot_wait() {
    // The driver reads the device's virtual time but cannot move it: the firmware
    // never boots, and the wait ends instead of spinning forever.
    let sim = sim();
    let c = sim.clock().clone();
    let frozen: std::sync::Arc<dyn ferroverbs::Clock> = std::sync::Arc::new(move || c.now());
    let err = Device::open(sim.bus(), config(&sim).with_clock(frozen)).unwrap_err();
    assert_eq!(err.step(), Some(Step::WaitFirmwareBoot));
    let Error::BringUp(b) = err else {
        unreachable!()
    };
    assert!(
        matches!(*b.source, Error::ClockFrozen { wait: Wait::FirmwareInit(InitWait::BeforeCmdqAddress), looks } if looks >= 4096),
        "{b:?}"
    );
    assert_eq!(sim.stats().mappings, 0);
}

#[test]
fn an_unusable_command_queue_geometry_is_refused() {
    let mut cfg = SimConfig::deterministic(1, 1);
    cfg.bar.cmdq = CmdqGeometry {
        log_size: 6,
        log_stride: 6,
    };
    let sim = Sim::new(cfg);
    let err = Device::open(sim.bus(), config(&sim)).unwrap_err();
    assert_eq!(err.step(), Some(Step::InitSegment));
    let Error::BringUp(b) = err else {
        unreachable!()
    };
    assert!(
        matches!(*b.source, Error::BadCmdqGeometry(_)),
        "{:?}",
        b.source
    );
    assert_eq!(sim.stats().mappings, 0);

    // A smaller queue works: 4 entries, the last one kept for page requests.
    let mut cfg = SimConfig::deterministic(1, 1);
    cfg.bar.cmdq = CmdqGeometry {
        log_size: 2,
        log_stride: 6,
    };
    let sim = Sim::new(cfg);
    let ctx = Device::open(sim.bus(), config(&sim)).unwrap();
    sim.request_pages(3);
    ctx.query_port(1).unwrap();
    assert_eq!(sim.stats().pages_held as usize, ctx.pages_lent());
    ctx.close().unwrap();
    assert_nothing_left(&sim);
}

#[test]
fn a_bad_configuration_is_refused_before_touching_the_device() {
    let sim = sim();
    let cfg = DeviceConfig {
        cmd_timeout: Duration::ZERO,
        ..config(&sim)
    };
    let err = Device::open(sim.bus(), cfg).unwrap_err();
    assert_eq!(err.step(), Some(Step::Config));
    assert_eq!(sim.stats().commands_completed, 0);
    assert_eq!(sim.stats().mappings, 0);
    // A GID index beyond the table: refused at the GID step, everything undone.
    let cfg = config(&sim).with_gid(ferroverbs::GidEntry::ipv4(4000, [1, 2, 3, 4], [2; 6]));
    let err = Device::open(sim.bus(), cfg).unwrap_err();
    assert_eq!(err.step(), Some(Step::GidTable));
    assert_nothing_left(&sim);
}

#[test]
fn a_command_can_have_its_own_timeout() {
    let sim = sim();
    // A clock that moves device time on and lets the device service what became due
    // (commands held for a while), as a device running on its own would.
    let dev = sim.clone();
    let clock: std::sync::Arc<dyn ferroverbs::Clock> = std::sync::Arc::new(move || {
        dev.advance(Duration::from_millis(1));
        dev.clock().now()
    });
    let ctx = Device::open(sim.bus(), config(&sim).with_clock(clock)).unwrap();
    sim.delay_commands(DelayRule {
        opcode: Some(Op::QueryVportState.value()),
        nth: Some(1),
        hold: Hold::UntilReleased,
    });
    let short = Duration::from_millis(20);
    match ctx.exec_cmd_timeout(&input(Op::QueryVportState, 0, 16), 16, short) {
        Err(Error::CmdTimeout { waited, .. }) => {
            assert!(waited >= short && waited < TIMEOUT, "{waited:?}")
        }
        other => panic!("{other:?}"),
    }
    // A command the device takes 300 ms over: too slow for the default timeout,
    // fine within a longer one of its own.
    for (timeout, ok) in [(TIMEOUT, false), (Duration::from_secs(1), true)] {
        sim.delay_commands(DelayRule {
            opcode: Some(Op::QueryVportState.value()),
            nth: Some(1),
            hold: Hold::For(Duration::from_millis(300)),
        });
        let r = ctx.exec_cmd_timeout(&input(Op::QueryVportState, 0, 16), 16, timeout);
        assert_eq!(r.is_ok(), ok, "{timeout:?}: {r:?}");
    }
    sim.release_held();
    ctx.close().unwrap();
    assert_nothing_left(&sim);
}

/// Runs `f` on a thread and fails the test if it has not returned within 30 s of real
/// time (a wait of the driver that never ends would otherwise hang the test binary).
fn within_30s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("{what} did not return within 30 s"))
}

/// A device whose `force_teardown` capability is off, opened on its virtual clock,
/// with a PD created through the raw command hatch and never deallocated: its
/// graceful TEARDOWN_HCA is refused and cannot be forced.
fn unteardownable() -> (Sim, ferroverbs::Context<SimBus>) {
    let sim = Sim::new(SimConfig::deterministic(0x0f00, 1).cap(
        ferroverbs_sim::firmware::CapType::General,
        ferroverbs_hw::control::caps::cmd_hca_cap::force_teardown,
        0,
    ));
    let ctx = Device::open(sim.bus(), config(&sim)).unwrap();
    ctx.exec_cmd(&input(Op::AllocPd, 0, 16), 16).unwrap();
    (sim, ctx)
}

#[test]
fn a_context_whose_teardown_is_refused_closes_with_the_refusal() {
    let (sim, ctx) = unteardownable();
    let t0 = sim.clock().now();
    let r = within_30s("close", move || ctx.close());
    match r {
        Err(Error::Cmd(c)) => {
            assert_eq!(c.opcode, Opcode(Op::TeardownHca.value()));
            assert_eq!(c.status, CmdStatus::BadResState);
        }
        other => panic!("{other:?}"),
    }
    // No wait at all: the firmware refused at once, and (as Linux skips its cleanup
    // after a failed TEARDOWN_HCA) nothing was waited for afterwards.
    assert!(
        sim.clock().now() - t0 < TIMEOUT,
        "{:?}",
        sim.clock().now() - t0
    );
    assert_eq!(sim.stats().mappings, 0, "everything unmapped");
    assert_eq!(sim.hca_state(), HcaState::Initialized);
}

#[test]
fn dropping_a_context_whose_teardown_is_refused_returns() {
    let (sim, ctx) = unteardownable();
    within_30s("drop", move || drop(ctx));
    assert_eq!(sim.stats().mappings, 0);
}

/// A TEARDOWN_HCA the firmware answers with success without doing it: the HCA stays
/// initialized and keeps its pages, so every `MANAGE_PAGES(take)` returns none.
fn silent_teardown(sim: &Sim) {
    sim.fail_command(CommandFault::status(Op::TeardownHca.value(), 0, 0));
}

#[test]
fn page_reclaim_that_never_progresses_ends_in_bounded_steps_on_virtual_time() {
    let sim = sim();
    let ctx = Device::open(sim.bus(), config(&sim)).unwrap();
    silent_teardown(&sim);
    let t0 = sim.clock().now();
    let r = within_30s("close", move || ctx.close());
    assert!(
        matches!(r, Err(Error::PagesNotReturned { pages }) if pages > 0),
        "{r:?}"
    );
    // The driver's waits moved the virtual clock on (100 µs per look): one command
    // timeout without progress, so about 2000 looks, not an endless loop.
    let waited = sim.clock().now() - t0;
    assert!(waited >= TIMEOUT && waited < TIMEOUT * 2, "{waited:?}");
    assert_eq!(sim.stats().mappings, 0);
}

/// A clock reading the device's virtual time, moved on by the driver's waits only
/// while `moving` is set.
fn freezable(
    sim: &Sim,
    moving: std::sync::Arc<AtomicBool>,
) -> std::sync::Arc<dyn ferroverbs::Clock> {
    let (now, time) = (sim.clock().clone(), sim.clock().clone());
    std::sync::Arc::new(ferroverbs::SteppedClock::new(
        move || now.now(),
        move |d| moving.load(Ordering::Relaxed) && time.advance(d),
    ))
}

#[test]
fn page_reclaim_on_a_clock_nobody_moves_ends_in_clock_frozen() {
    let sim = sim();
    let moving = std::sync::Arc::new(AtomicBool::new(true));
    let cfg = config(&sim).with_clock(freezable(&sim, moving.clone()));
    let ctx = Device::open(sim.bus(), cfg).unwrap();
    silent_teardown(&sim);
    moving.store(false, Ordering::Relaxed);
    let r = within_30s("close", move || ctx.close());
    assert!(
        matches!(r, Err(Error::ClockFrozen { wait: Wait::PageReclaim { pages }, looks }) if pages > 0 && looks >= 4096),
        "{r:?}"
    );
    assert_eq!(sim.stats().mappings, 0);
}

#[test]
fn a_command_the_device_holds_on_a_clock_nobody_moves_ends_in_clock_frozen() {
    let sim = sim();
    let moving = std::sync::Arc::new(AtomicBool::new(true));
    let cfg = config(&sim).with_clock(freezable(&sim, moving.clone()));
    let ctx = Device::open(sim.bus(), cfg).unwrap();
    sim.delay_commands(DelayRule {
        opcode: Some(Op::QueryVportState.value()),
        nth: Some(1),
        hold: Hold::UntilReleased,
    });
    moving.store(false, Ordering::Relaxed);
    let (r, ctx) = within_30s("query_port", move || (ctx.query_port(1).map(|_| ()), ctx));
    match r {
        Err(Error::ClockFrozen {
            wait: Wait::Command { opcode, .. },
            looks,
        }) => {
            assert_eq!(opcode, Opcode(Op::QueryVportState.value()));
            assert!(looks >= 4096);
        }
        other => panic!("{other:?}"),
    }
    sim.release_held();
    moving.store(true, Ordering::Relaxed);
    within_30s("close", move || ctx.close()).unwrap();
    assert_nothing_left(&sim);
}

#[test]
fn a_forced_teardown_leaves_no_objects() {
    use ferroverbs_hw::control::srq::{create_srq_input, create_srq_out, SrqParams};
    let sim = sim();
    let ctx = Device::open(sim.bus(), config(&sim)).unwrap();
    assert_eq!(
        ctx.cap(ferroverbs_hw::control::caps::cmd_hca_cap::force_teardown),
        1,
        "the simulated ConnectX advertises force_teardown"
    );
    // Objects through the raw hatch, never destroyed: a PD, a Q counter set, an SRQ.
    let pd = ctx.exec_cmd(&input(Op::AllocPd, 0, 16), 16).unwrap();
    let pdn = ferroverbs_hw::control::uar_pd_td::alloc_pd_out::pd.get(&pd) as u32;
    ctx.exec_cmd(&input(Op::AllocQCounter, 0, 16), 16).unwrap();
    let ring = dma(&ctx, 4096 + 64);
    let srq = create_srq_input(
        &SrqParams {
            log_srq_size: 4,
            log_rq_stride: 1,
            pd: pdn,
            lwm: 0,
            dbr_addr: ring.iova() + 4096,
            log_page_size: 0,
        },
        &[ring.iova()],
    );
    ctx.exec_cmd(&srq, create_srq_out::SIZE).unwrap();
    let o = sim.stats().objects;
    assert_eq!((o.pds, o.q_counters, o.srqs), (1, 1, 1), "{o:?}");
    // The graceful close is refused with objects left; the forced one drops them.
    within_30s("close", move || ctx.close()).unwrap();
    drop(ring);
    assert_eq!(sim.stats().objects.total(), 0, "{:?}", sim.stats().objects);
    assert_nothing_left(&sim);
    assert_eq!(sim.hca_state(), HcaState::Disabled);
}

//! The command queue transport, EQ events, interrupts, the init segment and fault
//! injection, played by the test.

mod common;
use common::*;

use std::io::Read;
use std::time::Duration;

use ferroverbs_hw::control::caps::set_hca_cap_in;
use ferroverbs_hw::control::cmd::{self, Opcode};
use ferroverbs_hw::control::cmdq::DeliveryStatus;
use ferroverbs_hw::control::iseg::{self, initial_seg, reg_get};
use ferroverbs_hw::control::pages::{give_pages_in, manage_pages_in};
use ferroverbs_hw::datapath::eqe::{eqe_sw_owned, Eqe, EventType};
use ferroverbs_hw::{Bus, DmaPerm};
use ferroverbs_sim::fault::{CommandFault, DelayRule, FatalHealth, FaultOutcome, Hold};
use ferroverbs_sim::firmware::Syndrome;
use ferroverbs_sim::SimConfig;

/// Writes a raw entry into slot 0 and rings it.
fn ring_raw(h: &mut Host, entry: &[u8; 64]) {
    h.cmdq.mem.write(0, entry);
    h.bus.write32(iseg::CMD_DBELL, 1);
}

fn entry(inp: &[u8], inlen: u32, in_ptr: u64, out_ptr: u64, outlen: u32) -> [u8; 64] {
    let mut e = [0u8; 64];
    e[0] = 7;
    e[4..8].copy_from_slice(&inlen.to_be_bytes());
    e[8..16].copy_from_slice(&in_ptr.to_be_bytes());
    let n = inp.len().min(16);
    e[16..16 + n].copy_from_slice(&inp[..n]);
    e[0x30..0x38].copy_from_slice(&out_ptr.to_be_bytes());
    e[0x38..0x3c].copy_from_slice(&outlen.to_be_bytes());
    e[0x3f] = 1;
    e
}

fn delivery(h: &Host) -> Option<DeliveryStatus> {
    let so = h.cmdq.mem.bytes(0x3f, 1)[0];
    (so & 1 == 0).then(|| DeliveryStatus::from_value(so >> 1).unwrap())
}

#[test]
fn init_segment_registers() {
    let sim = ferroverbs_sim::Sim::new(SimConfig::deterministic(1, 1));
    let bus = sim.bus();
    assert_eq!(
        reg_get(
            initial_seg::cmd_interface_rev,
            bus.read32(iseg::CMDIF_REV_FW_SUB)
        ),
        5
    );
    assert_eq!(bus.read32(iseg::CMDQ_ADDR_L_SZ) & 0xff, 0x56);
    assert!(iseg::is_initializing(bus.read32(iseg::INITIALIZING)));
    assert_ne!(bus.read32(iseg::HEALTH_FW_VER), u32::MAX);
    // The health counter advances every 100 ms of device time.
    let c0 = bus.read32(iseg::HEALTH_COUNTER);
    sim.advance(Duration::from_millis(350));
    assert_eq!(bus.read32(iseg::HEALTH_COUNTER), c0 + 3);
    sim.stall_health(true);
    sim.advance(Duration::from_secs(5));
    assert_eq!(bus.read32(iseg::HEALTH_COUNTER), c0 + 3, "stalled");
    sim.stall_health(false);
    sim.advance(Duration::from_millis(100));
    assert_eq!(bus.read32(iseg::HEALTH_COUNTER), c0 + 4);
    // The firmware booted while time moved on (the default boot time is 1 ms):
    // `initializing` cleared on its own, and the command queue address is latched.
    assert!(!iseg::is_initializing(bus.read32(iseg::INITIALIZING)));
    assert_eq!(sim.stats().cmdq_writes_while_booting, 0);
    let mem = Mem::new(4096);
    let iova = bus.dma_map(mem.addr(), 4096, DmaPerm::RW).unwrap();
    bus.write32(iseg::CMDQ_ADDR_H, (iova >> 32) as u32);
    bus.write32(iseg::CMDQ_ADDR_L_SZ, iova as u32);
    assert!(!iseg::is_initializing(bus.read32(iseg::INITIALIZING)));
    assert_eq!(bus.read32(iseg::CMDQ_ADDR_L_SZ), (iova as u32) | 0x56);
    // A fatal syndrome with RFR.
    sim.raise_fatal(Some(FatalHealth {
        synd: 0x7,
        ext_synd: 0x1234,
        rfr: true,
    }));
    assert_eq!(bus.read32(iseg::HEALTH_RFR_SEVERITY) >> 31, 1);
    assert_eq!(bus.read32(iseg::HEALTH_IRISC_SYND) & 0x00ff_ffff, 0x07_1234);
    assert_eq!(
        reg_get(
            initial_seg::health_syndrome,
            bus.read32(iseg::HEALTH_COUNTER)
        ),
        7
    );
    sim.raise_fatal(None);
    assert_eq!(bus.read32(iseg::HEALTH_IRISC_SYND), 0);
    // A vanished device reads all ones.
    sim.vanish(true);
    for off in [0, iseg::HEALTH_FW_VER, iseg::HEALTH_COUNTER, 0x8040] {
        assert_eq!(bus.read32(off), u32::MAX);
    }
    sim.vanish(false);
    assert_ne!(bus.read32(iseg::HEALTH_FW_VER), u32::MAX);
    bus.dma_unmap(iova, 4096).unwrap();
}

#[test]
fn mailbox_inputs_of_one_two_and_many_blocks_round_trip() {
    let mut h = Host::deterministic();
    h.simple(Opcode::EnableHca, 0, |_| {});
    // GIVE of n pages is 16 + 8n bytes: 1 block (60 pages), 2 blocks (100), 16 blocks (1000).
    let mut all = Vec::new();
    for (n, blocks) in [(60usize, 1usize), (100, 2), (1000, 16)] {
        let m = h.map(n * 4096);
        let base = h.iova(m);
        let pages: Vec<u64> = (0..n as u64).map(|i| base + i * 4096).collect();
        let i = give_pages_in(0, &pages);
        assert_eq!(i.len().saturating_sub(16).div_ceil(512), blocks);
        h.ok(&i, 16);
        all.extend(pages);
        let held = h.sim.stats().pages_held as usize;
        assert_eq!(held, all.len());
    }
    // TAKE outputs of 1, 2 and 16 blocks return exactly those pages.
    let mut back = Vec::new();
    for n in [60usize, 100, 1000] {
        let got = h.take(n);
        assert_eq!(got.len(), n);
        back.extend(got);
    }
    back.sort_unstable();
    all.sort_unstable();
    assert_eq!(back, all);
    // SET_HCA_CAP input and QUERY_HCA_CAP output: 4112 bytes, 8 blocks each way, and a
    // capability page survives the trip byte for byte.
    let cur = h.caps(true);
    assert_eq!(cur.len(), 4096);
    let mut i = input(Opcode::SetHcaCap, 0);
    let at = set_hca_cap_in::capability.byte_offset();
    i[at..].copy_from_slice(&cur);
    h.ok(&i, 16);
    assert_eq!(h.caps(true), cur);
}

#[test]
fn rdma_core_style_long_chains_and_k_style_tokens() {
    let mut h = Host::deterministic();
    // An 8-block chain for a 16-byte command: blocks beyond the length are not read.
    let chain = h.chain(8, &[]).unwrap();
    let i = input(Opcode::EnableHca, 0);
    ring_raw(&mut h, &entry(&i, 16, chain.iova, chain.iova, 16));
    assert_eq!(delivery(&h), Some(DeliveryStatus::Ok));
    // Linux puts a nonzero token in the entry and every block.
    h.token = 0x5a;
    let o = h.ok(&input(Opcode::QueryHcaCap, 1), 4112);
    assert_eq!(o.len(), 4112);
    h.bus.dma_unmap(chain.iova, chain.mem.len()).unwrap();
}

#[test]
fn transport_errors_give_delivery_statuses() {
    let mut h = Host::deterministic();
    h.simple(Opcode::EnableHca, 0, |_| {});
    let pd0 = h.sim.stats().fw.executed;
    let i = input(Opcode::QueryHcaCap, 1);
    let outc = h.chain(8, &[]).unwrap();
    // type other than 7.
    let mut e = entry(&i, 16, 0, outc.iova, 4112);
    e[0] = 6;
    ring_raw(&mut h, &e);
    assert_eq!(delivery(&h), Some(DeliveryStatus::CmdDescrErr));
    // Not owned by hardware: ignored, left untouched.
    let mut e = entry(&i, 16, 0, outc.iova, 4112);
    e[0x3f] = 0;
    ring_raw(&mut h, &e);
    assert_eq!(h.cmdq.mem.bytes(0x3f, 1)[0], 0);
    assert_eq!(h.sim.stats().commands_ignored, 1);
    // Output chain shorter than the length.
    ring_raw(&mut h, &entry(&i, 16, 0, 0, 4112));
    assert_eq!(delivery(&h), Some(DeliveryStatus::BadBlkNumErr));
    // Output block misaligned, unmapped.
    ring_raw(&mut h, &entry(&i, 16, 0, outc.iova + 0x100, 4112));
    assert_eq!(delivery(&h), Some(DeliveryStatus::OutPtrAlignErr));
    ring_raw(&mut h, &entry(&i, 16, 0, 0x10_0000_0000, 4112));
    assert_eq!(delivery(&h), Some(DeliveryStatus::OutPtrAlignErr));
    // A cycle: block 1 points back at block 0.
    outc.mem
        .write(BLOCK_STRIDE + 0x230, &outc.iova.to_be_bytes());
    ring_raw(&mut h, &entry(&i, 16, 0, outc.iova, 4112));
    assert_eq!(delivery(&h), Some(DeliveryStatus::BadBlkNumErr));
    // Wrong block number, wrong token.
    let c2 = h.chain(8, &[]).unwrap();
    c2.mem.write(3 * BLOCK_STRIDE + 0x238, &7u32.to_be_bytes());
    ring_raw(&mut h, &entry(&i, 16, 0, c2.iova, 4112));
    assert_eq!(delivery(&h), Some(DeliveryStatus::BadBlkNumErr));
    let c3 = h.chain(8, &[]).unwrap();
    c3.mem.write(2 * BLOCK_STRIDE + 0x23d, &[9]);
    ring_raw(&mut h, &entry(&i, 16, 0, c3.iova, 4112));
    assert_eq!(delivery(&h), Some(DeliveryStatus::TokErr));
    // A chained block only 512-byte aligned (next pointers are 1 KiB aligned).
    let c4 = h.chain(1, &[]).unwrap();
    let raw = Mem::new(8192);
    let riova = h.bus.dma_map(raw.addr(), 8192, DmaPerm::RW).unwrap();
    raw.write(0x230, &(riova + 512 + 1024).to_be_bytes());
    raw.write(512 + 1024 + 0x238, &1u32.to_be_bytes());
    ring_raw(&mut h, &entry(&i, 16, 0, riova, 16 + 1024));
    assert_eq!(delivery(&h), Some(DeliveryStatus::OutPtrAlignErr));
    // Input side: pointer misaligned, unmapped, chain too short.
    let big = input(Opcode::SetHcaCap, 0);
    ring_raw(
        &mut h,
        &entry(&big, 4112, c4.iova + 0x200 + 0x40, outc.iova, 16),
    );
    assert_eq!(delivery(&h), Some(DeliveryStatus::InPtrAlignErr));
    ring_raw(&mut h, &entry(&big, 4112, 0x20_0000_0000, outc.iova, 16));
    assert_eq!(delivery(&h), Some(DeliveryStatus::InPtrAlignErr));
    ring_raw(&mut h, &entry(&big, 4112, c4.iova, 0, 16));
    assert_eq!(delivery(&h), Some(DeliveryStatus::BadBlkNumErr));
    // Lengths beyond the limit.
    ring_raw(&mut h, &entry(&i, 2 << 20, c4.iova, 0, 16));
    assert_eq!(delivery(&h), Some(DeliveryStatus::InLengthErr));
    ring_raw(&mut h, &entry(&i, 16, 0, 0, 2 << 20));
    assert_eq!(delivery(&h), Some(DeliveryStatus::OutLengthErr));
    // Nothing above reached the firmware.
    assert_eq!(h.sim.stats().fw.executed, pd0);
    // A read-only output block: the command does not run.
    let ro = Mem::new(4096);
    let roi = h.bus.dma_map(ro.addr(), 4096, DmaPerm::RO).unwrap();
    ring_raw(
        &mut h,
        &entry(&input(Opcode::AllocUar, 0), 16, 0, roi, 16 + 100),
    );
    assert_eq!(delivery(&h), Some(DeliveryStatus::OutPtrAlignErr));
    assert_eq!(h.sim.stats().fw.executed, pd0);
    assert!(h.sim.stats().delivery_errors >= 14);
}

#[test]
fn several_doorbell_bits_at_once() {
    let h = Host::deterministic();
    let a = entry(&input(Opcode::EnableHca, 0), 16, 0, 0, 16);
    let b = entry(&input(Opcode::QueryIssi, 0), 16, 0, 0, 16);
    h.cmdq.mem.write(0, &a);
    h.cmdq.mem.write(31 * 64, &b);
    h.bus.write32(iseg::CMD_DBELL, 1 | 1 << 31);
    assert_eq!(h.cmdq.mem.bytes(0x3f, 1)[0], 0);
    assert_eq!(h.cmdq.mem.bytes(31 * 64 + 0x3f, 1)[0], 0);
    // QUERY_ISSI's output (112 bytes) did not fit 16: BAD_OUTP_LEN, after ENABLE_HCA ran.
    let st = h.cmdq.mem.bytes(31 * 64 + 0x20, 8);
    assert_eq!(cmd::status(&st), Ok(0x51));
    assert_eq!(cmd::syndrome(&st), Ok(Syndrome::OutputTooShort.value()));
}

fn eqe(h: &Host, buf: usize, index: usize) -> Eqe {
    let b = h.mapped[buf].mem.bytes(index * 64, 64);
    Eqe::read_from(&b).unwrap()
}

#[test]
fn command_completions_and_page_requests_post_eqes_and_fire_msix() {
    let mut h = Host::deterministic();
    // As with VFIO, the eventfd is set up before the EQ that signals it.
    let fd = h.bus.irq_eventfd(0).unwrap();
    let up = h.bring_up();
    let dup = dup_fd(fd);
    let mut f = std::fs::File::from(dup);
    let nent = 1u32 << up.eq_log_size;
    // EQE 0: CREATE_EQ's own completion (slot 0), owner 0 on the first pass.
    let e = eqe(&h, up.eq_buf, 0);
    assert_eq!(e.event(), Some(EventType::Cmd));
    assert_eq!(e.cmd().vector(), 1);
    assert!(eqe_sw_owned(e.owner, 0, nent));
    assert!(!eqe_sw_owned(eqe(&h, up.eq_buf, 1).owner, 1, nent));
    // Arming with EQE 0 unconsumed fired once.
    let mut b = [0u8; 8];
    f.read_exact(&mut b).unwrap();
    assert_eq!(u64::from_ne_bytes(b), 1);
    // Consume it, re-arm: the next command completes through an EQE and one interrupt.
    h.eq_doorbell(up.uar, up.eqn, 1, true);
    h.slot = 5;
    h.simple(Opcode::Nop, 0, |_| {});
    let e = eqe(&h, up.eq_buf, 1);
    assert_eq!(e.cmd().vector(), 1 << 5);
    assert!(eqe_sw_owned(e.owner, 1, nent));
    assert_eq!(h.sim.irq_count(0), 2);
    // Not re-armed: the next completion writes an EQE but does not interrupt.
    h.simple(Opcode::Nop, 0, |_| {});
    assert_eq!(h.sim.irq_count(0), 2);
    // Page request: +4 then -2.
    h.eq_doorbell(up.uar, up.eqn, 3, true);
    h.sim.request_pages(4);
    let e = eqe(&h, up.eq_buf, 3);
    assert_eq!(e.event(), Some(EventType::PageRequest));
    assert_eq!(e.page_req().num_pages(), 4);
    assert_eq!(e.page_req().func_id(), 0);
    assert_eq!(h.sim.irq_count(0), 3);
    h.give(4);
    h.sim.request_pages(-2);
    // GIVE's completion went in between.
    let e = eqe(&h, up.eq_buf, 5);
    assert_eq!(e.page_req().num_pages(), -2);
    // Wrap: fill the ring, consuming as we go; the second pass writes owner 1.
    let mut ci = 6u32;
    h.eq_doorbell(up.uar, up.eqn, ci, false);
    for _ in 0..nent {
        h.simple(Opcode::Nop, 0, |_| {});
        let idx = (ci % nent) as usize;
        let e = eqe(&h, up.eq_buf, idx);
        assert!(eqe_sw_owned(e.owner, ci, nent), "EQE {ci}");
        ci += 1;
        h.eq_doorbell(up.uar, up.eqn, ci, false);
    }
    assert_eq!(h.sim.stats().fw.eq_overruns, 0);
    // Stop consuming: the ring overruns and the events are counted, not written.
    for _ in 0..nent + 3 {
        h.simple(Opcode::Nop, 0, |_| {});
    }
    assert_eq!(h.sim.stats().fw.eq_overruns, 3);
    // Doorbells for an EQ another UAR drives, or no EQ, are ignored and counted.
    let other = h.alloc_uar();
    h.eq_doorbell(other, up.eqn, ci, true);
    h.eq_doorbell(up.uar, 77, 0, true);
    assert_eq!(h.sim.stats().stray_doorbells, 2);
}

/// A duplicate of a descriptor the device owns (so dropping it closes only the copy).
fn dup_fd(fd: i32) -> std::os::fd::OwnedFd {
    // SAFETY: `fd` is the device's eventfd, open for as long as the device lives, which
    // outlives this borrow; it is only used to make an owned duplicate.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    borrowed.try_clone_to_owned().unwrap()
}

#[test]
fn injected_command_failures() {
    let mut h = Host::deterministic();
    h.sim.fail_command(
        CommandFault::status(Opcode::QueryPages.value(), 0x4, 0xdead)
            .with_op_mod(2)
            .nth(1),
    );
    h.simple(Opcode::EnableHca, 0, |_| {});
    h.query_pages(1);
    let (s, y, _) = h.cmd(&input(Opcode::QueryPages, 2), 16);
    assert_eq!((s, y), (0x4, 0xdead));
    h.query_pages(2);
    // A delivery-status fault.
    h.sim.fail_command(CommandFault {
        opcode: Opcode::AllocUar.value(),
        op_mod: None,
        nth: None,
        outcome: FaultOutcome::Delivery(DeliveryStatus::FwErr as u8),
    });
    assert_eq!(h.exec(&input(Opcode::Nop, 0), 16), Answer::Out(vec![0; 16]));
    h.init_from_enabled();
    assert_eq!(
        h.exec(&input(Opcode::AllocUar, 0), 16),
        Answer::Delivery(DeliveryStatus::FwErr)
    );
    assert_eq!(
        h.sim.stats().objects.uars,
        0,
        "the failed command did not run"
    );
    h.sim.clear_command_faults();
    h.alloc_uar();
}

trait InitFromEnabled {
    fn init_from_enabled(&mut self);
}

impl InitFromEnabled for Host {
    fn init_from_enabled(&mut self) {
        let n = self.query_pages(2);
        self.give(n as usize);
        self.simple(Opcode::InitHca, 0, |_| {});
    }
}

#[test]
fn delayed_completions_are_held_until_released_or_due() {
    let mut h = Host::deterministic();
    h.sim.delay_commands(DelayRule {
        opcode: Some(Opcode::EnableHca.value()),
        nth: Some(1),
        hold: Hold::UntilReleased,
    });
    assert_eq!(h.exec(&input(Opcode::EnableHca, 0), 16), Answer::Pending);
    assert_eq!(h.sim.stats().commands_held, 1);
    h.sim.advance(Duration::from_secs(100));
    assert_eq!(
        h.collect(16, None),
        Answer::Pending,
        "time does not release it"
    );
    h.sim.release_held();
    assert_eq!(h.collect(16, None), Answer::Out(vec![0; 16]));
    assert_eq!(
        h.sim.hca_state(),
        ferroverbs_sim::firmware::HcaState::Enabled
    );
    // Held for a while of device time.
    h.sim.delay_commands(DelayRule {
        opcode: None,
        nth: None,
        hold: Hold::For(Duration::from_millis(50)),
    });
    // (A NOP: its answer fits the inline output, so no mailbox must outlive `exec`.)
    assert_eq!(h.exec(&input(Opcode::Nop, 0), 16), Answer::Pending);
    h.sim.advance(Duration::from_millis(49));
    assert_eq!(h.collect(16, None), Answer::Pending);
    h.sim.advance(Duration::from_millis(1));
    assert_eq!(h.collect(16, None), Answer::Out(vec![0; 16]));
    assert_eq!(h.sim.stats().commands_held, 0);
}

#[test]
fn a_vanished_device_ignores_doorbells() {
    let mut h = Host::deterministic();
    h.sim.vanish(true);
    assert_eq!(h.exec(&input(Opcode::EnableHca, 0), 16), Answer::Pending);
    assert_eq!(h.bus.read32(iseg::CMDIF_REV_FW_SUB), u32::MAX);
    h.sim.vanish(false);
    // The entry is still posted; ringing again runs it.
    h.bus.write32(iseg::CMD_DBELL, 1);
    assert_eq!(h.collect(16, None), Answer::Out(vec![0; 16]));
    let _ = manage_pages_in::input_num_entries;
}

#[test]
fn doorbell_before_the_queue_is_programmed_is_ignored() {
    let sim = ferroverbs_sim::Sim::new(SimConfig::deterministic(1, 1));
    let bus = sim.bus();
    bus.write32(iseg::CMD_DBELL, 1);
    assert_eq!(sim.stats().commands_ignored, 1);
}

#[test]
fn port_changes_are_reported_on_subscribed_eqs() {
    let mut h = Host::deterministic();
    let up = h.bring_up();
    let (eqn, buf) = h.create_eq(4, up.uar, 1, &[EventType::PortChange]);
    h.eq_doorbell(up.uar, eqn, 0, true);
    assert!(h.sim.set_link(1, false));
    assert!(!h.sim.set_link(2, false), "no port 2");
    let e = eqe(&h, buf, 0);
    assert_eq!(e.event(), Some(EventType::PortChange));
    assert_eq!(e.sub_type, 1, "DOWN");
    assert_eq!(e.port().port_num(), 1);
    assert_eq!(h.sim.irq_count(1), 1);
    // No change, no event.
    h.sim.set_link(1, false);
    assert_eq!(h.sim.with_firmware(|fw| fw.eq(eqn).unwrap().ring.pi), 1);
    h.sim.set_link(1, true);
    let e = eqe(&h, buf, 1);
    assert_eq!(e.sub_type, 4, "ACTIVE");
    // PAOS admin down through ACCESS_REG raises the same event.
    let mut reg = [0u8; 16];
    set(
        &mut reg,
        ferroverbs_hw::control::reg::paos_reg::local_port,
        1,
    );
    set(&mut reg, ferroverbs_hw::control::reg::paos_reg::ase, 1);
    set(
        &mut reg,
        ferroverbs_hw::control::reg::paos_reg::admin_status,
        2,
    );
    h.ok(
        &ferroverbs_hw::control::reg::access_register_input(
            ferroverbs_hw::control::reg::AccessRegisterOpMod::Write,
            0x5006,
            0,
            &reg,
        ),
        32,
    );
    assert_eq!(eqe(&h, buf, 2).sub_type, 1);
}

//! HCA bring-up and teardown, and the command execution loop.
//!
//! Bring-up follows the order real firmware requires (rdma-core `mlx5_vfio`
//! `mlx5_vfio_setup_function` and `create_async_eqs`, Linux `mlx5_function_setup` and
//! `mlx5_load`); `docs/bring-up.md` describes every step and how it can fail:
//!
//! 1. read the init segment: `cmdif_rev` must be 5, the queue geometry sane;
//! 2. wait (time-bounded) for the `initializing` bit to clear: the firmware boots
//!    after a reset or the function-level reset of opening a vfio-pci device, and
//!    does not latch a command queue address before it has (Linux mlx5_core
//!    `mlx5_function_enable`, `wait_fw_init` "pre-initializing");
//! 3. allocate the command queue page, write its address, and wait for the bit again
//!    (`mlx5_function_enable`'s second `wait_fw_init`, rdma-core `mlx5_vfio`
//!    `mlx5_vfio_setup_function`'s only one);
//! 4. `ENABLE_HCA`;
//! 5. `QUERY_ISSI`, `SET_ISSI(1)`;
//! 6. `QUERY_PAGES(boot)`, `MANAGE_PAGES(give)`;
//! 7. `ACCESS_REG` HOST_ENDIANNESS;
//! 8. `QUERY_HCA_CAP` general (max, cur), `SET_HCA_CAP` general (`cmdif_checksum = 0`,
//!    `log_uar_page_sz = 0`), and the RoCE capabilities when the device has RoCE;
//! 9. `QUERY_PAGES(init)`, `MANAGE_PAGES(give)`;
//! 10. `INIT_HCA`;
//! 11. on an Ethernet port, `MODIFY_NIC_VPORT_CONTEXT roce_en = 1`;
//! 12. `SET_ROCE_ADDRESS` for each configured GID (with VFIO there is no kernel GID
//!     cache: the driver owns the GID table);
//! 13. `ALLOC_UAR`;
//! 14. `CREATE_EQ` of the async EQ (command completions, page requests, async
//!     events) and arming it; from then on commands complete by event.
//!
//! Teardown runs in reverse and undoes only what exists, so the same code unwinds a
//! bring-up that failed halfway: `DESTROY_EQ`, `DEALLOC_UAR`, the GID entries,
//! `roce_en = 0`, `TEARDOWN_HCA`, `MANAGE_PAGES(take)` until every page is back,
//! `DISABLE_HCA` (the last two skipped when TEARDOWN_HCA failed, as Linux
//! `mlx5_function_close` skips its cleanup); then the command queue and every mailbox
//! are unmapped. Every wait is bounded twice (`clock::BoundedWait`): by its timeout, and by
//! a number of looks on a clock that does not move. Once the
//! device stops answering (a command times out, or the watchdog declares it failed)
//! teardown issues no further commands and just unmaps everything: the IOMMU then
//! keeps the device away from memory that is about to be freed.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use ferroverbs_hw::Bus;

use crate::clock::{BoundedWait, Clock, WaitOver};
use crate::cmdif::{read_geometry, CmdIf, Pending, SlotClass};
use crate::device::{DeviceConfig, GidConfig};
use crate::dma::PagePool;
use crate::eq::{async_event_mask, AsyncEvent, EventQueue, NUM_SPARE_EQE};
use crate::error::{BringUpError, Error, Failure, InitWait, Opcode, Result, Step, Wait};
use crate::health::Health;
use crate::prm::{self, op};
use crate::regs;

use ferroverbs_hw::control::caps::{CapMode, CapType, PortType};
use ferroverbs_hw::control::hca::{
    issi_supported, teardown_hca_out, TeardownProfile, TeardownState, ISSI_1,
};
use ferroverbs_hw::control::pages::{ManagePagesOpMod, QueryPagesOpMod};
use ferroverbs_hw::control::reg::host_endianness_input;

/// `QUERY_HCA_CAP` op_mod: `(cap_type << 1) | mode` (Linux `mlx5_core_get_caps_mode`).
pub(crate) const fn query_cap_op(cap: CapType, mode: CapMode) -> u16 {
    (cap.value() << 1) | mode.value()
}

/// `SET_HCA_CAP` op_mod: `cap_type << 1` (Linux `set_caps`).
pub(crate) const fn set_cap_op(cap: CapType) -> u16 {
    cap.value() << 1
}

/// `port_type` of an Ethernet (RoCE) port.
pub(crate) const PORT_TYPE_ETH: u64 = PortType::Eth.value() as u64;
/// Pages per `MANAGE_PAGES` command (the PAS list of 4096 pages spans 64 mailbox
/// blocks).
const PAGES_PER_CMD: usize = 4096;
/// Size of the capability area of `QUERY_HCA_CAP` / `SET_HCA_CAP`.
pub(crate) const CAP_LEN: usize = 4096;

/// A page request taken from the EQ, waiting to be answered.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PageRequest {
    func_id: u16,
    ec_function: bool,
    num_pages: i32,
}

/// Capabilities read during bring-up (the 4096-byte capability areas).
#[derive(Clone)]
pub(crate) struct Caps {
    pub(crate) general_cur: Vec<u8>,
    pub(crate) general_max: Vec<u8>,
    pub(crate) roce_cur: Option<Vec<u8>>,
    /// The atomic capabilities (current), when the device has atomics.
    pub(crate) atomic_cur: Option<Vec<u8>>,
    /// The on-demand paging capabilities (current), when the device has them (`pg`).
    pub(crate) odp_cur: Option<Vec<u8>>,
}

impl Caps {
    fn empty() -> Self {
        Caps {
            general_cur: vec![0; CAP_LEN],
            general_max: vec![0; CAP_LEN],
            roce_cur: None,
            atomic_cur: None,
            odp_cur: None,
        }
    }

    /// A general capability field (current value).
    pub(crate) fn gen(&self, f: ferroverbs_hw::Field) -> u64 {
        f.get(&self.general_cur)
    }

    /// A RoCE capability field (current value), 0 without RoCE.
    pub(crate) fn roce(&self, f: ferroverbs_hw::Field) -> u64 {
        self.roce_cur.as_deref().map_or(0, |c| f.get(c))
    }

    /// An atomic capability field (current value), 0 without atomics.
    pub(crate) fn atomic(&self, f: ferroverbs_hw::Field) -> u64 {
        self.atomic_cur.as_deref().map_or(0, |c| f.get(c))
    }

    /// An on-demand paging capability field (current value), 0 without `pg`.
    pub(crate) fn odp(&self, f: ferroverbs_hw::Field) -> u64 {
        self.odp_cur.as_deref().map_or(0, |c| f.get(c))
    }

    /// Whether the device executes the verbs' atomics as `IBV_ATOMIC_HCA` promises
    /// (Linux `mlx5_ib` `get_atomic_caps`): compare-and-swap and fetch-and-add on 8-byte
    /// operands of RC QPs, with the fetched value returned in host byte order
    /// (`atomic_req_8B_endianness_mode` set). A device left in big-endian mode still
    /// executes atomics, but is reported without atomic support, as Linux does.
    pub(crate) fn hca_atomics(&self) -> bool {
        use ferroverbs_hw::control::caps::{
            ATOMIC_OPS_CMP_SWAP, ATOMIC_OPS_FETCH_ADD, MLX5_ATOMIC_CAPS_ATOMIC_SIZE_QP_8_BYTES,
        };
        let ops = ATOMIC_OPS_CMP_SWAP | ATOMIC_OPS_FETCH_ADD;
        self.gen(prm::cmd_hca_cap::atomic) == 1
            && self.atomic(prm::atomic_caps::atomic_operations) & ops == ops
            && self.atomic(prm::atomic_caps::atomic_size_qp)
                & u64::from(MLX5_ATOMIC_CAPS_ATOMIC_SIZE_QP_8_BYTES)
                != 0
            && self.atomic(prm::atomic_caps::atomic_req_8B_endianness_mode) != 0
    }
}

/// A command input buffer with the generic header filled in.
pub(crate) fn cmd_in(opcode: u16, op_mod: u16, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len.max(16)];
    prm::mbox_in::opcode.set(&mut b, u64::from(opcode));
    prm::mbox_in::op_mod.set(&mut b, u64::from(op_mod));
    b
}

/// The control-plane state of one HCA: command queue, async EQ, firmware pages,
/// watchdog, and what bring-up created (so teardown undoes exactly that).
pub(crate) struct Hca<B: Bus> {
    pub(crate) bus: Arc<B>,
    clock: Arc<dyn Clock>,
    cmd_timeout: Duration,
    init_timeout: Duration,
    use_events: bool,
    pub(crate) health: Health,
    // Drop order matters only for tidiness: every DMA buffer unmaps itself.
    eq: Option<EventQueue<B>>,
    cmd: CmdIf<B>,
    pub(crate) pages: PagePool<B>,
    /// Completion by event (else by polling the owner bit).
    events: bool,
    /// Slots whose command-completion EQE has been seen.
    eq_done: u32,
    page_requests: VecDeque<PageRequest>,
    async_events: VecDeque<AsyncEvent>,
    dropped_events: u64,
    /// The device stopped answering during teardown: issue no more commands.
    unresponsive: bool,
    // What exists on the device.
    enabled: bool,
    inited: bool,
    roce_enabled: bool,
    gids: Vec<u16>,
    pub(crate) uar: Option<u32>,
    eq_created: bool,
    /// `function_id` / `embedded_cpu_function` the firmware named in QUERY_PAGES.
    page_func: (u16, bool),
    pub(crate) caps: Caps,
    /// The software byte of the last memory key made (its `mkey_7_0`).
    key_variant: u8,
}

/// Waits until the `initializing` bit (iseg 0x1fc bit 31) reads clear, at most
/// `timeout` on `clock` (Linux mlx5_core `wait_fw_init`, rdma-core `mlx5_vfio`
/// `wait_fw_init`), letting the clock pass time between looks ([`Clock::idle`]).
///
/// Ends in [`Error::FirmwareInitTimeout`] naming `phase`, in
/// [`Error::DeviceFailed`]`(Vanished)` when the register and the health buffer read
/// all ones, and in [`Error::ClockFrozen`] when `clock` never moved while the device
/// kept reporting itself initializing (virtual time nobody advances).
fn wait_firmware<B: Bus + ?Sized>(
    bus: &B,
    clock: &dyn Clock,
    timeout: Duration,
    phase: InitWait,
) -> Result<()> {
    let mut wait = BoundedWait::new(clock);
    loop {
        let v = bus.read32(regs::INITIALIZING);
        if !regs::initializing(v) {
            return Ok(());
        }
        if v == u32::MAX && bus.read32(regs::HEALTH_FW_VER) == u32::MAX {
            return Err(Error::DeviceFailed(Failure::Vanished));
        }
        match wait.check(clock.now(), timeout) {
            Ok(()) => {}
            Err(WaitOver::TimedOut(waited)) => {
                return Err(Error::FirmwareInitTimeout { phase, waited })
            }
            Err(WaitOver::Frozen(looks)) => {
                return Err(Error::ClockFrozen {
                    wait: Wait::FirmwareInit(phase),
                    looks,
                })
            }
        }
        wait.idle();
    }
}

/// Maximum number of async events kept for the application.
const ASYNC_EVENT_QUEUE: usize = 1024;

impl<B: Bus> Hca<B> {
    /// Brings the HCA up. On failure everything done so far is undone, and the error
    /// names the step.
    pub(crate) fn bring_up(
        bus: Arc<B>,
        config: &DeviceConfig,
    ) -> std::result::Result<Hca<B>, BringUpError> {
        let fail = |step: Step| {
            move |e: Error| BringUpError {
                step,
                source: Box::new(e),
            }
        };
        config.validate().map_err(fail(Step::Config))?;
        let geo = read_geometry(&*bus).map_err(fail(Step::InitSegment))?;
        let clock = &*config.clock;
        wait_firmware(
            &*bus,
            clock,
            config.init_timeout,
            InitWait::BeforeCmdqAddress,
        )
        .map_err(fail(Step::WaitFirmwareBoot))?;
        let cmd = CmdIf::new(&bus, geo).map_err(fail(Step::CmdqAddress))?;
        let mut hca = Hca {
            pages: PagePool::new(&bus),
            bus,
            clock: Arc::clone(&config.clock),
            cmd_timeout: config.cmd_timeout,
            init_timeout: config.init_timeout,
            use_events: config.event_mode,
            health: Health::new(config.health_period),
            eq: None,
            cmd,
            events: false,
            eq_done: 0,
            page_requests: VecDeque::new(),
            async_events: VecDeque::new(),
            dropped_events: 0,
            unresponsive: false,
            enabled: false,
            inited: false,
            roce_enabled: false,
            gids: Vec::new(),
            uar: None,
            eq_created: false,
            page_func: (0, false),
            caps: Caps::empty(),
            key_variant: 0,
        };
        match hca.setup(config) {
            Ok(()) => Ok(hca),
            Err((step, e)) => {
                tracing::warn!(%step, error = %e, "bring-up failed; undoing");
                if let Err(undo) = hca.shutdown() {
                    tracing::warn!(error = %undo, "undo after failed bring-up was incomplete");
                }
                Err(BringUpError {
                    step,
                    source: Box::new(e),
                })
            }
        }
    }

    fn setup(&mut self, config: &DeviceConfig) -> std::result::Result<(), (Step, Error)> {
        let at = |step: Step| move |e: Error| (step, e);
        // Linux waits at most `FW_INIT` (2 s) here, rdma-core up to 120 s; the
        // configured timeout bounds both waits.
        wait_firmware(
            &*self.bus,
            &*self.clock,
            self.init_timeout,
            InitWait::AfterCmdqAddress,
        )
        .map_err(|e| self.vanished_is_fatal(e))
        .map_err(at(Step::WaitFirmware))?;

        self.exec(&cmd_in(op::ENABLE_HCA, 0, 16), 16)
            .map_err(at(Step::EnableHca))?;
        self.enabled = true;

        self.negotiate_issi().map_err(at(Step::Issi))?;
        self.give_startup_pages(QueryPagesOpMod::BootPages)
            .map_err(at(Step::BootPages))?;
        self.set_host_endianness()
            .map_err(at(Step::HostEndianness))?;

        self.caps.general_max = self
            .query_cap(query_cap_op(CapType::General, CapMode::Max))
            .map_err(at(Step::QueryGeneralCaps))?;
        self.caps.general_cur = self
            .query_cap(query_cap_op(CapType::General, CapMode::Cur))
            .map_err(at(Step::QueryGeneralCaps))?;
        self.set_general_caps().map_err(at(Step::SetGeneralCaps))?;
        // Atomic before RoCE, as Linux's `set_hca_cap` orders them.
        if self.caps.gen(prm::cmd_hca_cap::atomic) == 1 {
            self.atomic_caps().map_err(at(Step::AtomicCaps))?;
        }
        // Then on-demand paging (Linux `handle_hca_cap_odp`, which only reads them
        // when the device reports its SRQ-receive bits current already).
        if self.caps.gen(prm::cmd_hca_cap::pg) == 1 {
            let cur = self
                .query_cap(query_cap_op(CapType::Odp, CapMode::Cur))
                .map_err(at(Step::OdpCaps))?;
            self.caps.odp_cur = Some(cur);
        }
        if self.caps.gen(prm::cmd_hca_cap::roce) == 1 {
            self.roce_caps().map_err(at(Step::RoceCaps))?;
        }

        self.give_startup_pages(QueryPagesOpMod::InitPages)
            .map_err(at(Step::InitPages))?;
        self.exec(&cmd_in(op::INIT_HCA, 0, prm::init_hca_in::SIZE), 16)
            .map_err(at(Step::InitHca))?;
        self.inited = true;

        if self.caps.gen(prm::cmd_hca_cap::port_type) == PORT_TYPE_ETH
            && self.caps.roce_cur.is_some()
        {
            self.exec(&Self::roce_en_input(true), 16)
                .map_err(at(Step::EnableRoce))?;
            self.roce_enabled = true;
        }
        for g in &config.gids {
            self.set_gid(g).map_err(at(Step::GidTable))?;
        }

        let out = self
            .exec(&cmd_in(op::ALLOC_UAR, 0, 16), 16)
            .map_err(at(Step::AllocUar))?;
        self.uar = Some(prm::alloc_uar_out::uar.get(&out) as u32);

        self.create_async_eq().map_err(at(Step::AsyncEq))?;
        self.enter_event_mode().map_err(at(Step::EventMode))?;
        Ok(())
    }

    /// Records a vanished device in the watchdog's sticky verdict.
    fn vanished_is_fatal(&self, e: Error) -> Error {
        match e {
            Error::DeviceFailed(f) => Error::DeviceFailed(self.health.fail(f)),
            e => e,
        }
    }

    fn negotiate_issi(&mut self) -> Result<()> {
        let out = self.exec(&cmd_in(op::QUERY_ISSI, 0, 16), prm::query_issi_out::SIZE)?;
        if !issi_supported(&out, ISSI_1) {
            let supported = prm::query_issi_out::supported_issi_dw0.get(&out) as u32;
            return Err(Error::UnsupportedIssi { supported });
        }
        let mut set = cmd_in(op::SET_ISSI, 0, 16);
        prm::set_issi_in::current_issi.set(&mut set, u64::from(ISSI_1));
        self.exec(&set, 16)?;
        Ok(())
    }

    /// `QUERY_PAGES(which)` then `MANAGE_PAGES(give)` of that many pages.
    fn give_startup_pages(&mut self, which: QueryPagesOpMod) -> Result<()> {
        let out = self.exec(&cmd_in(op::QUERY_PAGES, which.value(), 16), 16)?;
        let func_id = prm::query_pages_out::function_id.get(&out) as u16;
        let ec = prm::query_pages_out::embedded_cpu_function.get(&out) == 1;
        let n = prm::query_pages_out::num_pages.get(&out) as u32 as i32;
        self.page_func = (func_id, ec);
        if n > 0 {
            self.give_pages(func_id, ec, n as usize, SlotClass::Regular)?;
        }
        Ok(())
    }

    fn set_host_endianness(&mut self) -> Result<()> {
        // Register data: `he` = 0 on a little-endian host, 1 on a big-endian one.
        let input = host_endianness_input();
        let len = input.len();
        self.exec(&input, len)?;
        Ok(())
    }

    /// `QUERY_HCA_CAP` with `op_mod`; returns the 4096-byte capability area.
    pub(crate) fn query_cap(&mut self, op_mod: u16) -> Result<Vec<u8>> {
        let out = self.exec(
            &cmd_in(op::QUERY_HCA_CAP, op_mod, 16),
            prm::query_hca_cap_out::SIZE,
        )?;
        Ok(prm::query_hca_cap_out::capability
            .bytes(&out)
            .map(<[u8]>::to_vec)
            .unwrap_or_else(|| vec![0; CAP_LEN]))
    }

    fn set_cap(&mut self, op_mod: u16, cap: &[u8]) -> Result<()> {
        let mut input = cmd_in(op::SET_HCA_CAP, op_mod, prm::set_hca_cap_in::SIZE);
        if let Some(dst) = prm::set_hca_cap_in::capability.bytes_mut(&mut input) {
            dst.copy_from_slice(&cap[..CAP_LEN]);
        }
        self.exec(&input, 16)?;
        Ok(())
    }

    /// `SET_HCA_CAP` general: the current capabilities with the fields a userspace
    /// driver must set (rdma-core `handle_hca_cap`): no command checksums, 4 KiB UAR
    /// pages. Then re-reads the current values.
    fn set_general_caps(&mut self) -> Result<()> {
        let mut cap = self.caps.general_cur.clone();
        prm::cmd_hca_cap::cmdif_checksum.set(&mut cap, 0);
        prm::cmd_hca_cap::log_uar_page_sz.set(&mut cap, 0);
        self.set_cap(set_cap_op(CapType::General), &cap)?;
        self.caps.general_cur = self.query_cap(query_cap_op(CapType::General, CapMode::Cur))?;
        Ok(())
    }

    /// RoCE capabilities; turns on `sw_r_roce_src_udp_port` when the maximum allows
    /// it (rdma-core `handle_hca_cap_roce`).
    fn roce_caps(&mut self) -> Result<()> {
        let max = self.query_cap(query_cap_op(CapType::Roce, CapMode::Max))?;
        let mut cur = self.query_cap(query_cap_op(CapType::Roce, CapMode::Cur))?;
        let f = prm::roce_cap::sw_r_roce_src_udp_port;
        if f.get(&max) == 1 && f.get(&cur) == 0 {
            let mut set = cur.clone();
            f.set(&mut set, 1);
            self.set_cap(set_cap_op(CapType::Roce), &set)?;
            cur = self.query_cap(query_cap_op(CapType::Roce, CapMode::Cur))?;
        }
        self.caps.roce_cur = Some(cur);
        Ok(())
    }

    /// Atomic capabilities; selects host-endian 8-byte atomic responses when the device
    /// supports them (Linux `handle_hca_cap_atomic`: SET_HCA_CAP of a zeroed atomic page
    /// but for `atomic_req_8B_endianness_mode`), so that a fetched value lands in host
    /// byte order as a libmlx5 user on Linux gets it.
    fn atomic_caps(&mut self) -> Result<()> {
        use ferroverbs_hw::control::caps::ATOMIC_REQ_MODE_HOST_ENDIANNESS;
        let f = prm::atomic_caps::atomic_req_8B_endianness_mode;
        let mut cur = self.query_cap(query_cap_op(CapType::Atomic, CapMode::Cur))?;
        if prm::atomic_caps::supported_atomic_req_8B_endianness_mode_1.get(&cur) == 1
            && f.get(&cur) != ATOMIC_REQ_MODE_HOST_ENDIANNESS
        {
            let mut set = vec![0u8; CAP_LEN];
            f.set(&mut set, ATOMIC_REQ_MODE_HOST_ENDIANNESS);
            self.set_cap(set_cap_op(CapType::Atomic), &set)?;
            cur = self.query_cap(query_cap_op(CapType::Atomic, CapMode::Cur))?;
        }
        self.caps.atomic_cur = Some(cur);
        Ok(())
    }

    /// The software byte (`mkc.mkey_7_0`) of the next memory key: counted per device,
    /// as rdma-core's `mlx5_ib` counts per device (`mlx5_ib_dev.mkey_var`), so that the
    /// keys a device hands out depend on its own history only (a seeded run gives the
    /// same keys, and so the same packets, whatever else runs in the process). Never
    /// 0: key 0x100 (index 1, variant 0) is `MLX5_INVALID_LKEY`, the terminator of a
    /// short receive scatter list, and must never name a region.
    pub(crate) fn next_key_variant(&mut self) -> u8 {
        self.key_variant = self.key_variant.wrapping_add(1).max(1);
        self.key_variant
    }

    /// `MODIFY_NIC_VPORT_CONTEXT` with `field_select.roce_en`.
    fn roce_en_input(on: bool) -> Vec<u8> {
        let mut input = cmd_in(
            op::MODIFY_NIC_VPORT_CONTEXT,
            0,
            prm::modify_nic_vport_context_in::SIZE,
        );
        let sel = prm::modify_nic_vport_context_in::field_select.bit;
        prm::modify_nic_vport_field_select::roce_en
            .at(sel)
            .set(&mut input, 1);
        let ctx = prm::modify_nic_vport_context_in::nic_vport_context.bit;
        prm::nic_vport_context::roce_en
            .at(ctx)
            .set(&mut input, u64::from(on));
        input
    }

    /// `SET_ROCE_ADDRESS` of one GID table entry.
    pub(crate) fn set_gid(&mut self, g: &GidConfig) -> Result<()> {
        let size = self.caps.roce(prm::roce_cap::roce_address_table_size);
        if u64::from(g.index) >= size {
            return Err(Error::InvalidArgument {
                what: "GID index beyond the device's roce_address_table_size",
            });
        }
        let mut input = cmd_in(op::SET_ROCE_ADDRESS, 0, prm::set_roce_address_in::SIZE);
        prm::set_roce_address_in::roce_address_index.set(&mut input, u64::from(g.index));
        if self.caps.gen(prm::cmd_hca_cap::num_vhca_ports) > 0 {
            prm::set_roce_address_in::vhca_port_num.set(&mut input, 1);
        }
        let base = prm::set_roce_address_in::roce_address.bit;
        g.encode(&mut input, base);
        self.exec(&input, 16)?;
        if !self.gids.contains(&g.index) {
            self.gids.push(g.index);
        }
        Ok(())
    }

    /// The `SET_ROCE_ADDRESS` that clears one GID table entry (a zero address, as
    /// Linux deletes entries).
    fn clear_gid_input(&self, index: u16) -> Vec<u8> {
        let mut input = cmd_in(op::SET_ROCE_ADDRESS, 0, prm::set_roce_address_in::SIZE);
        prm::set_roce_address_in::roce_address_index.set(&mut input, u64::from(index));
        if self.caps.gen(prm::cmd_hca_cap::num_vhca_ports) > 0 {
            prm::set_roce_address_in::vhca_port_num.set(&mut input, 1);
        }
        input
    }

    /// Clears one GID table entry.
    pub(crate) fn clear_gid(&mut self, index: u16) -> Result<()> {
        let input = self.clear_gid_input(index);
        self.exec(&input, 16)?;
        self.gids.retain(|&i| i != index);
        Ok(())
    }

    /// The async EQ: `roundup_pow_of_two(entries + spare)` EQEs, one PAS entry per
    /// 4 KiB page, interrupt vector 0, subscribed to command completions, page
    /// requests and async events; armed once created.
    fn create_async_eq(&mut self) -> Result<()> {
        let uar = self.uar.ok_or(Error::InvalidArgument {
            what: "no UAR for the async EQ",
        })?;
        let want = (self.cmd.entries() as u32 + NUM_SPARE_EQE).next_power_of_two();
        let log_size = want.trailing_zeros() as u8;
        let max = self.caps.gen(prm::cmd_hca_cap::log_max_eq_sz);
        if u64::from(log_size) > max {
            return Err(Error::InvalidArgument {
                what: "async EQ larger than log_max_eq_sz",
            });
        }
        let eq = EventQueue::new(&self.bus, log_size)?;
        let pas = eq.pas();
        let mut input = cmd_in(op::CREATE_EQ, 0, prm::create_eq_in::SIZE + 8 * pas.len());
        let ctx = prm::create_eq_in::eq_context_entry.bit;
        prm::eqc::log_eq_size
            .at(ctx)
            .set(&mut input, u64::from(eq.log_size()));
        prm::eqc::uar_page.at(ctx).set(&mut input, u64::from(uar));
        prm::eqc::intr.at(ctx).set(&mut input, 0);
        prm::eqc::log_page_size.at(ctx).set(&mut input, 0);
        // event_bitmask[0]: the first of four 64-bit words.
        let mask = prm::create_eq_in::event_bitmask.byte_offset();
        input[mask..mask + 8].copy_from_slice(&async_event_mask().to_be_bytes());
        let pas_off = prm::create_eq_in::pas.byte_offset();
        for (i, p) in pas.iter().enumerate() {
            input[pas_off + 8 * i..pas_off + 8 * i + 8].copy_from_slice(&p.to_be_bytes());
        }
        // Keep the ring alive from before the command: the device may write to it
        // as soon as it exists.
        self.eq = Some(eq);
        let out = match self.exec(&input, prm::create_eq_out::SIZE) {
            Ok(out) => out,
            Err(e) => {
                self.eq = None;
                return Err(e);
            }
        };
        let eqn = prm::create_eq_out::eq_number.get(&out) as u8;
        self.eq_created = true;
        if let Some(eq) = self.eq.as_mut() {
            eq.activate(eqn, uar);
            eq.arm();
        }
        Ok(())
    }

    /// Completion by event from now on (if configured). Command-completion EQEs
    /// already in the EQ (for commands that completed by polling) are consumed and
    /// dropped first.
    fn enter_event_mode(&mut self) -> Result<()> {
        self.poll_eq();
        self.eq_done = 0;
        self.events = self.use_events && self.eq.is_some();
        Ok(())
    }

    /// The EQ number of the async EQ.
    pub(crate) fn async_eqn(&self) -> Option<u8> {
        self.eq
            .as_ref()
            .filter(|_| self.eq_created)
            .map(|e| e.eqn())
    }

    /// Whether commands complete by event.
    pub(crate) fn event_mode(&self) -> bool {
        self.events
    }

    /// The async EQ's consumer counter.
    pub(crate) fn eq_consumer_counter(&self) -> Option<u32> {
        self.eq.as_ref().map(|e| e.consumer_counter())
    }

    /// Executes one command and returns its whole output (`out_len` bytes).
    ///
    /// Fails at once if the device has failed. While waiting it consumes EQEs,
    /// answers page requests (on the reserved slot), and runs the watchdog.
    pub(crate) fn exec(&mut self, input: &[u8], out_len: usize) -> Result<Vec<u8>> {
        self.exec_with_timeout(input, out_len, self.cmd_timeout)
    }

    /// [`Hca::exec`] with a timeout for this command only.
    pub(crate) fn exec_with_timeout(
        &mut self,
        input: &[u8],
        out_len: usize,
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        if let Some(f) = self.health.failed() {
            return Err(Error::DeviceFailed(f));
        }
        self.check_health(false)?;
        let r = self.run_with_timeout(SlotClass::Regular, input, out_len, timeout);
        if !self.page_requests.is_empty() && self.health.failed().is_none() {
            if let Err(e) = self.service_page_requests() {
                tracing::warn!(error = %e, "answering a page request failed");
            }
        }
        r
    }

    /// Posts a command on a slot of `class` and waits for it.
    pub(crate) fn run(
        &mut self,
        class: SlotClass,
        input: &[u8],
        out_len: usize,
    ) -> Result<Vec<u8>> {
        self.run_with_timeout(class, input, out_len, self.cmd_timeout)
    }

    fn run_with_timeout(
        &mut self,
        class: SlotClass,
        input: &[u8],
        out_len: usize,
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        let p = self.cmd.post(class, input, out_len, self.clock.now())?;
        let bit = 1u32 << p.slot;
        let clock = Arc::clone(&self.clock);
        let mut wait = BoundedWait::since(&*clock, p.posted_at);
        loop {
            self.poll_eq();
            let done = if self.events {
                self.eq_done & bit != 0 && self.cmd.owner_clear(p.slot)
            } else {
                self.cmd.owner_clear(p.slot)
            };
            if done {
                self.eq_done &= !bit;
                break;
            }
            if class == SlotClass::Regular && !self.page_requests.is_empty() {
                if let Err(e) = self.service_page_requests() {
                    tracing::warn!(error = %e, "answering a page request failed");
                }
            }
            let now = self.clock.now();
            let tick = self.health.tick(&*self.bus, now);
            self.queue_health_report();
            if let Err(f) = tick {
                self.cmd.abandon(&p);
                let e = Error::DeviceFailed(f);
                self.trace(&p, now, Err(&e));
                return Err(e);
            }
            if let Err(over) = wait.check(now, timeout) {
                self.cmd.abandon(&p);
                let (opcode, op_mod) = (Opcode(p.opcode), p.op_mod);
                let e = match over {
                    WaitOver::TimedOut(waited) => Error::CmdTimeout {
                        opcode,
                        op_mod,
                        waited,
                    },
                    WaitOver::Frozen(looks) => Error::ClockFrozen {
                        wait: Wait::Command { opcode, op_mod },
                        looks,
                    },
                };
                self.trace(&p, now, Err(&e));
                return Err(e);
            }
            // On a clock of virtual time this moves the device's time on, so a
            // command the device delays completes, or times out, in bounded looks.
            wait.idle();
        }
        let r = self.cmd.finish(&p);
        let now = self.clock.now();
        self.trace(&p, now, r.as_ref().map(|_| ()));
        r
    }

    /// The per-command tracing event: opcode, op_mod, slot, duration, result.
    fn trace(&self, p: &Pending, now: Duration, r: std::result::Result<(), &Error>) {
        let us = now.saturating_sub(p.posted_at).as_micros() as u64;
        match r {
            Ok(()) => tracing::debug!(
                target: "ferroverbs::cmd",
                opcode = %Opcode(p.opcode), op_mod = p.op_mod, slot = p.slot,
                duration_us = us, result = "ok", "command"
            ),
            Err(e) => tracing::debug!(
                target: "ferroverbs::cmd",
                opcode = %Opcode(p.opcode), op_mod = p.op_mod, slot = p.slot,
                duration_us = us, result = %e, "command"
            ),
        }
    }

    /// Consumes every pending EQE of the async EQ and re-arms it.
    pub(crate) fn poll_eq(&mut self) {
        let Some(eq) = self.eq.as_mut() else {
            return;
        };
        if !self.eq_created {
            return;
        }
        let mut any = false;
        while let Some(eqe) = eq.next() {
            any = true;
            match crate::eq::Event::decode(&eqe) {
                crate::eq::Event::Cmd { vector } => {
                    // Only slots with a command in flight: a stale event for a slot
                    // completed by polling must not complete a later command.
                    self.eq_done |= vector & self.cmd.busy_mask();
                }
                crate::eq::Event::PageRequest {
                    func_id,
                    ec_function,
                    num_pages,
                } => self.page_requests.push_back(PageRequest {
                    func_id,
                    ec_function,
                    num_pages,
                }),
                crate::eq::Event::Completion { cqn } => {
                    tracing::debug!(cqn, "completion event on the async EQ ignored");
                }
                crate::eq::Event::Async(ev) => {
                    Self::push_async_event(&mut self.async_events, &mut self.dropped_events, ev)
                }
            }
        }
        if any {
            eq.arm();
        }
    }

    /// Whether async events wait to be taken.
    pub(crate) fn async_event_queued(&self) -> bool {
        !self.async_events.is_empty()
    }

    /// Queues `ev` for the application, dropping the oldest beyond
    /// [`ASYNC_EVENT_QUEUE`] (disjoint fields, so the EQ may be borrowed meanwhile).
    fn push_async_event(queue: &mut VecDeque<AsyncEvent>, dropped: &mut u64, ev: AsyncEvent) {
        if queue.len() >= ASYNC_EVENT_QUEUE {
            queue.pop_front();
            *dropped += 1;
        }
        queue.push_back(ev);
    }

    /// Queues the non-fatal health syndrome the watchdog found, if any.
    fn queue_health_report(&mut self) {
        if let Some(r) = self.health.take_report() {
            let ev = AsyncEvent::HealthReport {
                synd: r.synd,
                ext_synd: r.ext_synd,
            };
            Self::push_async_event(&mut self.async_events, &mut self.dropped_events, ev);
        }
    }

    /// Reads the fatal sensors (and, unless `sensors_only`, runs the watchdog if a
    /// period has passed); a non-fatal syndrome becomes an async event.
    pub(crate) fn check_health(&mut self, sensors_only: bool) -> Result<()> {
        let r = self.health.check_sensors(&*self.bus).and_then(|()| {
            if sensors_only {
                return Ok(());
            }
            let now = self.clock.now();
            self.health.tick(&*self.bus, now)
        });
        self.queue_health_report();
        r.map_err(Error::DeviceFailed)
    }

    /// Non-fatal health syndromes reported so far.
    pub(crate) fn health_reports(&self) -> u64 {
        self.health.reports()
    }

    /// The oldest async event not yet taken.
    pub(crate) fn take_async_event(&mut self) -> Option<AsyncEvent> {
        self.async_events.pop_front()
    }

    /// Answers the queued page requests: `MANAGE_PAGES(give)` for requests of more
    /// pages, `MANAGE_PAGES(take)` for pages the firmware offers back.
    pub(crate) fn service_page_requests(&mut self) -> Result<()> {
        let mut first_err = None;
        while let Some(req) = self.page_requests.pop_front() {
            let r = if req.num_pages > 0 {
                self.give_pages(
                    req.func_id,
                    req.ec_function,
                    req.num_pages as usize,
                    SlotClass::Pages,
                )
            } else if req.num_pages < 0 {
                self.take_pages(
                    req.func_id,
                    req.ec_function,
                    req.num_pages.unsigned_abs() as usize,
                    SlotClass::Pages,
                )
                .map(|_| ())
            } else {
                Ok(())
            };
            if let Err(e) = r {
                if matches!(e, Error::DeviceFailed(_)) {
                    return Err(e);
                }
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Lends `n` pages to the firmware (`MANAGE_PAGES(give)`, batched). If the pages
    /// cannot be allocated, tells the firmware so (`CANT_GIVE`).
    fn give_pages(&mut self, func_id: u16, ec: bool, n: usize, class: SlotClass) -> Result<()> {
        let mut left = n;
        while left > 0 {
            let batch = left.min(PAGES_PER_CMD);
            let iovas = match self.pages.lend(batch) {
                Ok(v) => v,
                Err(e) => {
                    let mut input = cmd_in(
                        op::MANAGE_PAGES,
                        ManagePagesOpMod::AllocationFail.value(),
                        16,
                    );
                    prm::manage_pages_in::function_id.set(&mut input, u64::from(func_id));
                    prm::manage_pages_in::embedded_cpu_function.set(&mut input, u64::from(ec));
                    let _ = self.run(class, &input, 16);
                    return Err(e);
                }
            };
            let mut input = cmd_in(
                op::MANAGE_PAGES,
                ManagePagesOpMod::AllocationSuccess.value(),
                16 + 8 * batch,
            );
            prm::manage_pages_in::function_id.set(&mut input, u64::from(func_id));
            prm::manage_pages_in::embedded_cpu_function.set(&mut input, u64::from(ec));
            prm::manage_pages_in::input_num_entries.set(&mut input, batch as u64);
            let pas = prm::manage_pages_in::pas.byte_offset();
            for (i, p) in iovas.iter().enumerate() {
                input[pas + 8 * i..pas + 8 * i + 8].copy_from_slice(&p.to_be_bytes());
            }
            match self.run(class, &input, 16) {
                Ok(_) => {}
                Err(e @ (Error::Cmd(_) | Error::Delivery { .. })) => {
                    // The firmware refused them: they never reached it.
                    self.pages.give_back(&iovas);
                    return Err(e);
                }
                // Timed out or failed: the device may hold them; they stay lent
                // until teardown unmaps them.
                Err(e) => return Err(e),
            }
            left -= batch;
        }
        tracing::debug!(
            pages = n,
            lent = self.pages.lent(),
            "gave pages to firmware"
        );
        Ok(())
    }

    /// Asks the firmware for up to `n` pages back (`MANAGE_PAGES(take)`); returns how
    /// many it returned.
    fn take_pages(&mut self, func_id: u16, ec: bool, n: usize, class: SlotClass) -> Result<usize> {
        let batch = n.min(PAGES_PER_CMD);
        let mut input = cmd_in(
            op::MANAGE_PAGES,
            ManagePagesOpMod::HcaReturnPages.value(),
            16,
        );
        prm::manage_pages_in::function_id.set(&mut input, u64::from(func_id));
        prm::manage_pages_in::embedded_cpu_function.set(&mut input, u64::from(ec));
        prm::manage_pages_in::input_num_entries.set(&mut input, batch as u64);
        let out = self.run(class, &input, 16 + 8 * batch)?;
        let claimed = prm::manage_pages_out::output_num_entries.get(&out) as usize;
        if claimed > batch {
            return Err(Error::MalformedOutput {
                opcode: Opcode(op::MANAGE_PAGES),
                what: "more pages returned than asked for",
            });
        }
        let pas = prm::manage_pages_out::pas.byte_offset();
        let mut first_err = None;
        for i in 0..claimed {
            let mut b = [0u8; 8];
            b.copy_from_slice(&out[pas + 8 * i..pas + 8 * i + 8]);
            if let Err(e) = self.pages.reclaim(u64::from_be_bytes(b)) {
                first_err.get_or_insert(e);
            }
        }
        tracing::debug!(
            asked = batch,
            returned = claimed,
            lent = self.pages.lent(),
            "took pages back from firmware"
        );
        first_err.map_or(Ok(claimed), Err)
    }

    /// Takes back every page the firmware holds (Linux `mlx5_reclaim_startup_pages`,
    /// `mlx5_reclaim_root_pages`): repeats `MANAGE_PAGES(take)` until none is left,
    /// giving up after a command timeout's worth of time without progress (Linux:
    /// the `RECLAIM_PAGES` timeout, restarted whenever pages come back, "FW did not
    /// return all pages. giving up..."), or after [`crate::clock::FROZEN_CLOCK_LOOKS`]
    /// looks on a clock that does not move ([`Error::ClockFrozen`]).
    fn reclaim_all_pages(&mut self) -> Result<()> {
        let (func_id, ec) = self.page_func;
        let clock = Arc::clone(&self.clock);
        let mut wait = BoundedWait::new(&*clock);
        while self.pages.lent() > 0 {
            let got = self.take_pages(func_id, ec, self.pages.lent(), SlotClass::Regular)?;
            let now = clock.now();
            if got > 0 {
                wait.progress(now);
                continue;
            }
            let pages = self.pages.lent();
            match wait.check(now, self.cmd_timeout) {
                Ok(()) => wait.idle(),
                Err(WaitOver::TimedOut(_)) => return Err(Error::PagesNotReturned { pages }),
                Err(WaitOver::Frozen(looks)) => {
                    return Err(Error::ClockFrozen {
                        wait: Wait::PageReclaim { pages },
                        looks,
                    })
                }
            }
        }
        Ok(())
    }

    /// Runs one teardown command unless the device stopped answering; remembers the
    /// first error.
    fn teardown_cmd(
        &mut self,
        input: &[u8],
        out_len: usize,
        first_err: &mut Option<Error>,
    ) -> bool {
        match self.teardown_exec(input, out_len) {
            Some(Ok(_)) => true,
            Some(Err(e)) => {
                first_err.get_or_insert(e);
                false
            }
            None => false,
        }
    }

    /// Runs one teardown command unless the device stopped answering (`None`); a
    /// command that timed out or found the device failed or the clock frozen stops
    /// every later one.
    fn teardown_exec(&mut self, input: &[u8], out_len: usize) -> Option<Result<Vec<u8>>> {
        if self.unresponsive {
            return None;
        }
        let r = self.exec(input, out_len);
        if let Err(e) = &r {
            if matches!(
                e,
                Error::CmdTimeout { .. }
                    | Error::DeviceFailed(_)
                    | Error::NoFreeSlot
                    | Error::ClockFrozen {
                        wait: Wait::Command { .. },
                        ..
                    }
            ) {
                self.unresponsive = true;
            }
            tracing::warn!(error = %e, "teardown command failed");
        }
        Some(r)
    }

    /// `TEARDOWN_HCA` (Linux `mlx5_cmd_teardown_hca`): GRACEFUL_CLOSE; if the
    /// firmware refuses it (objects created through raw commands still exist:
    /// `BAD_RES_STATE`) and `cmd_hca_cap.force_teardown` is set, FORCE_CLOSE, whose
    /// `teardown_hca_out.state` must read SUCCESS (Linux `mlx5_cmd_force_teardown_hca`:
    /// "teardown with force mode failed" on FAIL). A forced close that succeeded
    /// dropped every object, so it counts as success. Returns whether the HCA is
    /// torn down.
    fn teardown_hca(&mut self, first_err: &mut Option<Error>) -> bool {
        let teardown = |profile: TeardownProfile| {
            let mut input = cmd_in(op::TEARDOWN_HCA, 0, 16);
            prm::teardown_hca_in::profile.set(&mut input, u64::from(profile.value()));
            input
        };
        let graceful = match self.teardown_exec(&teardown(TeardownProfile::GracefulClose), 16) {
            None => return false,
            Some(Ok(_)) => return true,
            Some(Err(e)) => e,
        };
        if self.unresponsive
            || graceful.cmd().is_none()
            || self.caps.gen(prm::cmd_hca_cap::force_teardown) != 1
        {
            first_err.get_or_insert(graceful);
            return false;
        }
        tracing::warn!(error = %graceful, "graceful TEARDOWN_HCA refused; forcing");
        let force = teardown(TeardownProfile::ForceClose);
        match self.teardown_exec(&force, teardown_hca_out::SIZE) {
            Some(Ok(out)) => {
                let state = teardown_hca_out::state.get(&out) as u8;
                if state == TeardownState::Success.value() {
                    tracing::warn!("forced TEARDOWN_HCA dropped the objects left");
                    true
                } else {
                    tracing::warn!(state, "forced TEARDOWN_HCA failed");
                    first_err.get_or_insert(Error::ForceTeardownFailed { state });
                    false
                }
            }
            Some(Err(_)) | None => {
                // The graceful refusal says what was wrong in the first place.
                first_err.get_or_insert(graceful);
                false
            }
        }
    }

    /// Undoes whatever bring-up created, in reverse order; see the module docs.
    /// Returns the first error; everything is unmapped either way.
    pub(crate) fn shutdown(&mut self) -> Result<()> {
        let mut first_err = None;
        if self.health.failed().is_some() {
            self.unresponsive = true;
        }
        // Back to polling: the EQ is about to go.
        self.events = false;
        if self.eq_created {
            self.poll_eq();
            if !self.unresponsive {
                if let Err(e) = self.service_page_requests() {
                    tracing::warn!(error = %e, "answering a page request during teardown failed");
                }
            }
            let mut input = cmd_in(op::DESTROY_EQ, 0, 16);
            let eqn = self.eq.as_ref().map_or(0, |e| e.eqn());
            prm::destroy_eq_in::eq_number.set(&mut input, u64::from(eqn));
            self.teardown_cmd(&input, 16, &mut first_err);
            self.eq_created = false;
        }
        self.eq = None;
        if let Some(uar) = self.uar.take() {
            let mut input = cmd_in(op::DEALLOC_UAR, 0, 16);
            prm::dealloc_uar_in::uar.set(&mut input, u64::from(uar));
            self.teardown_cmd(&input, 16, &mut first_err);
        }
        for index in std::mem::take(&mut self.gids).into_iter().rev() {
            let input = self.clear_gid_input(index);
            self.teardown_cmd(&input, 16, &mut first_err);
        }
        if self.roce_enabled {
            self.roce_enabled = false;
            self.teardown_cmd(&Self::roce_en_input(false), 16, &mut first_err);
        }
        // Linux `mlx5_function_close`: if TEARDOWN_HCA fails, "tear_down_hca failed,
        // skip cleanup": the firmware still runs and keeps its pages, so neither the
        // page reclaim nor DISABLE_HCA can succeed; the pages are abandoned below.
        let torn_down = !self.inited || self.teardown_hca(&mut first_err);
        if self.inited && torn_down {
            self.inited = false;
        }
        if torn_down && self.pages.lent() > 0 && !self.unresponsive {
            if let Err(e) = self.reclaim_all_pages() {
                tracing::warn!(error = %e, "could not take back every firmware page");
                if matches!(e, Error::CmdTimeout { .. } | Error::DeviceFailed(_)) {
                    self.unresponsive = true;
                }
                first_err.get_or_insert(e);
            }
        }
        if self.enabled && torn_down {
            self.enabled = false;
            self.teardown_cmd(&cmd_in(op::DISABLE_HCA, 0, 16), 16, &mut first_err);
        }
        if self.cmd.has_abandoned() {
            tracing::warn!("unmapping the mailboxes of commands the device never completed");
        }
        let kept = self.pages.abandon();
        if kept > 0 {
            first_err.get_or_insert(Error::PagesNotReturned { pages: kept });
        }
        first_err.map_or(Ok(()), Err)
    }
}

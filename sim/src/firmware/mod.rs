//! The simulated firmware: it executes command inputs gathered by the command queue
//! and answers with the PRM status and a syndrome, keeping the object tables, the page
//! ledger, the capabilities and the QP state machine.
//!
//! Every command validates its input as the firmware does (`mlx5-controlpath.md` §3-4,
//! §9): unknown opcode → `BAD_OP`; bad op_mod → `BAD_PARAM`; a resource command before
//! INIT_HCA → `BAD_SYS_STATE`; an unknown object number → `BAD_RES` (a table index →
//! `BAD_INDEX`); out-of-range sizes → `BAD_PARAM` (beyond a `log_max_*` limit:
//! `LIM`); destroying an object still in use → `BAD_RES_STATE`; a QP transition from
//! the wrong state → `BAD_QP_STATE`; short input → `BAD_INP_LEN`, short output →
//! `BAD_OUTP_LEN`. Each error has its own [`Syndrome`]. Nothing here panics on any
//! input: every field read is bounds-checked ([`In`]), every length is checked before
//! it is used.
//!
//! Command handlers check lengths and parameters before changing any state, so a
//! failed command has no side effect.

pub mod caps;
pub mod counters;
mod hca;
pub mod ifc;
mod mw;
pub mod pages;
mod qp;
pub mod qp_state;
mod queues;
mod resources;
pub mod srq;
pub mod syndrome;
pub mod table;
mod umr;
mod vport;

use ferroverbs_hw::control::cmd::{self, Opcode};
use ferroverbs_hw::control::mkey::mkc;
use ferroverbs_hw::control::qp::{QpTransition, QpcState};
use ferroverbs_hw::Field;

use crate::eq::{EqRing, Posted};
use crate::iommu::{Access, Iommu};
pub use caps::{CapOverride, CapType, Caps};
pub use pages::Pages;
pub use qp_state::ServiceType;
pub use syndrome::Syndrome;
pub use table::Table;
pub use vport::{roce_v2_ipv4, Port, RoceAddr};

/// A failed command: the status byte and syndrome of the output header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fail {
    /// `MLX5_CMD_STAT_*`.
    pub status: u8,
    /// 32-bit syndrome.
    pub syndrome: u32,
}

impl From<Syndrome> for Fail {
    fn from(s: Syndrome) -> Self {
        Fail {
            status: s.status().value(),
            syndrome: s.value(),
        }
    }
}

/// The result of a command handler: the output message (header included), or a failure.
pub type CmdResult = Result<Vec<u8>, Fail>;

/// Firmware configuration (part of the device configuration).
#[derive(Clone, Debug)]
pub struct FwConfig {
    /// Number of physical ports (1 or 2).
    pub ports: u8,
    /// MAC address of each port (the NIC vport's permanent address is port 1's).
    pub macs: Vec<[u8; 6]>,
    /// Boot pages QUERY_PAGES(BOOT) asks for.
    pub boot_pages: u32,
    /// Init pages QUERY_PAGES(INIT) asks for.
    pub init_pages: u32,
    /// MSI-X vectors of the function.
    pub msix_vectors: u16,
    /// First UAR index ALLOC_UAR hands out (the pages below hold the init segment).
    pub first_uar: u32,
    /// Number of UAR pages.
    pub num_uars: u32,
    /// Capability overrides, applied to both the current and the maximum values.
    pub caps: Vec<CapOverride>,
    /// GID table entries present at reset, per port (index 0 first).
    pub gids: Vec<Vec<RoceAddr>>,
    /// Whether the physical links are up.
    pub link_up: bool,
}

impl Default for FwConfig {
    fn default() -> Self {
        FwConfig {
            ports: 1,
            macs: vec![[0x02, 0x00, 0x00, 0x00, 0x00, 0x01]],
            boot_pages: 16,
            init_pages: 48,
            msix_vectors: 64,
            first_uar: FIRST_UAR,
            num_uars: NUM_UARS,
            caps: Vec::new(),
            gids: Vec::new(),
            link_up: true,
        }
    }
}

/// First UAR index handed out by default: BAR0 pages 0-2 hold the initialization
/// segment (`struct mlx5_init_seg` is 0x2010 bytes), so UARs start above them.
pub const FIRST_UAR: u32 = 8;
/// Number of UAR pages by default.
pub const NUM_UARS: u32 = 1024;

/// Where the function is in its life cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HcaState {
    /// Before ENABLE_HCA (or after DISABLE_HCA).
    Disabled,
    /// Enabled, not initialized (before INIT_HCA or after TEARDOWN_HCA).
    Enabled,
    /// INIT_HCA done: resources may be created.
    Initialized,
}

/// Counters of the firmware's work, for tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FwStats {
    /// Commands executed (answered by the firmware, success or failure).
    pub executed: u64,
    /// Of those, the ones that failed.
    pub failed: u64,
    /// EQEs written.
    pub eqes: u64,
    /// Events dropped because an EQ was full.
    pub eq_overruns: u64,
}

/// A memory key.
#[derive(Clone, Debug)]
pub struct Mkey {
    /// The key (`mkey_index << 8 | mkey_7_0`).
    pub key: u32,
    /// Its PD.
    pub pd: u32,
    /// The mkey context as created.
    pub mkc: Vec<u8>,
    /// Translation entries (page IOVAs with the permission bits), MTT mode.
    pub mtt: Vec<u64>,
    /// `mkc` decoded for the data path (once, at creation).
    pub view: crate::engine::mem::MkeyView,
}

/// Where the UARs are in BAR0 and how ALLOC_UAR hands them out, as the general
/// capabilities `log_uar_page_sz` and `uar_4k` set them (PRM "UAR"; Linux
/// `mlx5_core` `uar2pfn` and `uars_per_sys_page`). Linux sets `log_uar_page_sz =
/// PAGE_SHIFT - 12`, and `uar_4k` on hosts with pages above 4 KiB when the device
/// supports it.
///
/// * `uar_4k = 0`: a UAR page is `4 KiB << log_uar_page_sz` (the host page): UAR `n`
///   is at `n << (12 + log_uar_page_sz)`, its registers in the first 4 KiB.
/// * `uar_4k = 1`: UARs are 4 KiB (`n << 12`), and ALLOC_UAR hands out a host page's
///   worth, `2^log_uar_page_sz` consecutive UARs from an index aligned to that count;
///   objects may name any UAR of the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UarGeometry {
    /// log2 of the BAR0 stride between UAR indexes.
    pub shift: u32,
    /// UAR indexes per allocation (a power of two).
    pub group: u32,
}

impl Default for UarGeometry {
    fn default() -> Self {
        UarGeometry {
            shift: 12,
            group: 1,
        }
    }
}

impl UarGeometry {
    /// The geometry of `log_uar_page_sz` and `uar_4k`.
    pub fn of(log_uar_page_sz: u64, uar_4k: bool) -> Self {
        let k = log_uar_page_sz.min(16) as u32;
        if uar_4k {
            UarGeometry {
                shift: 12,
                group: 1 << k,
            }
        } else {
            UarGeometry {
                shift: 12 + k,
                group: 1,
            }
        }
    }

    /// The allocation (UAR page) UAR index `uar` belongs to.
    pub fn unit(self, uar: u32) -> u32 {
        uar / self.group
    }
}

/// Why a remote invalidation ([`Firmware::invalidate_remote`]) was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvalidateError {
    /// No live MKEY has this key (unknown index, other variant byte, already free).
    NoKey,
    /// The MKEY belongs to another protection domain than the receiving QP's.
    OtherPd,
    /// The MKEY was not created with remote invalidation enabled (`mkc.en_rinval`).
    NotEnabled,
}

/// A completion queue.
#[derive(Clone, Debug)]
pub struct Cq {
    /// The CQ context as created.
    pub cqc: Vec<u8>,
    /// Buffer pages.
    pub pages: Vec<u64>,
    /// EQ its completion events go to.
    pub eqn: u32,
    /// UAR of its arm doorbell.
    pub uar: u32,
    /// log2 of the number of CQEs.
    pub log_size: u8,
    /// CQE size in bytes.
    pub cqe_size: u32,
    /// Doorbell record IOVA.
    pub dbr: u64,
    /// The buffer a MODIFY_CQ resize moves the CQ to, until the data path switches
    /// to it ([`Cq::take_resize`]).
    pub resize: Option<CqResize>,
}

/// The new buffer of a CQ being resized (MODIFY_CQ, `op_mod` resize), as the command
/// described it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CqResize {
    /// Buffer pages.
    pub pages: Vec<u64>,
    /// log2 of the number of CQEs.
    pub log_size: u8,
    /// `cqc.log_page_size`: pages of `4096 << log_page_size` bytes.
    pub log_page_size: u8,
    /// `cqc.page_offset`: where the ring starts in its first page, in 64-byte units.
    pub page_offset: u8,
}

/// A queue pair.
#[derive(Clone, Debug)]
pub struct Qp {
    /// Service type (a QP1 is [`ServiceType::Ud`] with `gsi` set).
    pub st: ServiceType,
    /// Created with `qpc.st` QP1 (`MLX5_QPC_ST_QP1`): the general services QP of the
    /// port it is initialized on. It receives the UD packets addressed to QP 1 there
    /// and sends with source QP 1 in its DETH (IBTA Vol. 1 13.5.1; Linux `mlx5_ib`
    /// builds its GSI on such a QP).
    pub gsi: bool,
    /// Current state.
    pub state: QpcState,
    /// The QP context: as created, updated by every transition.
    pub qpc: Vec<u8>,
    /// PD.
    pub pd: u32,
    /// Send CQ, if the QP has a send queue.
    pub cqn_snd: Option<u32>,
    /// Receive CQ, if the QP has a receive queue or an SRQ.
    pub cqn_rcv: Option<u32>,
    /// The SRQ its receive WQEs come from (`rq_type` SRQ).
    pub srqn: Option<u32>,
    /// UAR of its doorbells.
    pub uar: u32,
    /// Buffer pages.
    pub pages: Vec<u64>,
    /// Doorbell record IOVA.
    pub dbr: u64,
}

impl Qp {
    /// Bytes of simulator memory the firmware object holds: the structure, its QP
    /// context image and its page list.
    pub fn footprint(&self) -> usize {
        std::mem::size_of::<Qp>() + self.qpc.capacity() + self.pages.capacity() * 8
    }
}

impl Cq {
    /// Bytes of simulator memory the firmware object holds: the structure, its CQ
    /// context image and its page list.
    pub fn footprint(&self) -> usize {
        std::mem::size_of::<Cq>() + self.cqc.capacity() + self.pages.capacity() * 8
    }

    /// The data path switches the CQ to the buffer of its pending resize: the object
    /// and its context (`log_cq_size`, `log_page_size`, `page_offset`, as QUERY_CQ
    /// then reports them) describe the new buffer from now on. Returns it (`None`:
    /// no resize is pending).
    pub fn take_resize(&mut self) -> Option<CqResize> {
        use ferroverbs_hw::control::cq::cqc;
        let r = self.resize.take()?;
        self.pages.clone_from(&r.pages);
        self.log_size = r.log_size;
        let img = &mut self.cqc;
        for (f, v) in [
            (cqc::log_cq_size, r.log_size),
            (cqc::log_page_size, r.log_page_size),
            (cqc::page_offset, r.page_offset),
        ] {
            if f.fits(img.len()) {
                f.set(img, u64::from(v));
            }
        }
        Some(r)
    }
}

/// An event queue: its ring and the context fields QUERY_EQ reports.
#[derive(Clone, Debug)]
pub struct Eq {
    /// The device side of the ring.
    pub ring: EqRing,
}

/// Bounds-checked reads of a command input (missing bytes read as zero; every handler
/// checks the length it needs first, this only guarantees no panic).
#[derive(Clone, Copy)]
pub struct In<'a>(pub &'a [u8]);

impl<'a> In<'a> {
    /// A field.
    pub fn get(&self, f: Field) -> u64 {
        if f.width <= 64 && f.fits(self.0.len()) {
            f.get(self.0)
        } else {
            0
        }
    }

    /// Field `f` of the context nested at `ctx`.
    pub fn at(&self, ctx: Field, f: Field) -> u64 {
        self.get(f.at(ctx.bit))
    }

    /// The bytes of a byte-aligned field (empty if out of range).
    pub fn bytes(&self, f: Field) -> &'a [u8] {
        f.bytes(self.0).unwrap_or(&[])
    }

    /// `n` big-endian u64 entries starting at byte `start`; `None` if the input ends
    /// before them.
    pub fn be64s(&self, start: usize, n: usize) -> Option<Vec<u64>> {
        let end = start.checked_add(n.checked_mul(8)?)?;
        let b = self.0.get(start..end)?;
        Some(
            b.chunks_exact(8)
                .map(|c| u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect(),
        )
    }
}

/// A command output being built (zeroed, header OK).
pub struct Out(pub Vec<u8>);

impl Out {
    /// A zeroed output of `len` bytes.
    pub fn new(len: usize) -> Self {
        Out(vec![0; len.max(8)])
    }

    /// Sets a field (ignored if out of range).
    pub fn set(&mut self, f: Field, v: u64) {
        if f.width <= 64 && f.fits(self.0.len()) {
            f.set(&mut self.0, v);
        }
    }

    /// Sets field `f` of the context nested at `ctx`.
    pub fn set_at(&mut self, ctx: Field, f: Field, v: u64) {
        self.set(f.at(ctx.bit), v);
    }

    /// Copies `data` into a byte-aligned field (truncated to the field).
    pub fn put(&mut self, f: Field, data: &[u8]) {
        if let Some(dst) = f.bytes_mut(&mut self.0) {
            let n = dst.len().min(data.len());
            dst[..n].copy_from_slice(&data[..n]);
        }
    }

    /// The output of a QUERY command that ends with the object's page list (`pas`):
    /// `size` bytes plus as many page addresses as the caller's `outlen` holds, the
    /// page addresses written.
    pub fn with_pas(outlen: usize, size: usize, pas: Field, pages: &[u64]) -> Self {
        let at = pas.byte_offset();
        let mut o = Out::new(outlen.min(at + pages.len() * 8).max(size));
        o.put_be64s(at, pages);
        o
    }

    /// Writes big-endian u64 entries from byte `start`, as many as fit.
    pub fn put_be64s(&mut self, start: usize, vals: &[u64]) {
        for (i, v) in vals.iter().enumerate() {
            let at = start + i * 8;
            match self.0.get_mut(at..at + 8) {
                Some(d) => d.copy_from_slice(&v.to_be_bytes()),
                None => break,
            }
        }
    }

    /// The finished output.
    pub fn done(self) -> CmdResult {
        Ok(self.0)
    }
}

/// A command being executed: its input, the output length the driver allows, and
/// the decoded header.
pub struct Cmd<'a> {
    /// Input reader.
    pub inp: In<'a>,
    /// Output length the driver provided.
    pub outlen: usize,
    /// Opcode.
    pub opcode: Opcode,
    /// op_mod.
    pub op_mod: u16,
}

impl Cmd<'_> {
    /// Checks the input holds `in_size` bytes and the output can take `out_size`.
    pub fn lengths(&self, in_size: usize, out_size: usize) -> Result<(), Fail> {
        if self.inp.0.len() < in_size {
            return Err(Syndrome::InputTooShort.into());
        }
        if self.outlen < out_size {
            return Err(Syndrome::OutputTooShort.into());
        }
        Ok(())
    }

    /// Requires op_mod 0.
    pub fn op_mod_zero(&self) -> Result<(), Fail> {
        if self.op_mod != 0 {
            return Err(Syndrome::BadOpMod.into());
        }
        Ok(())
    }

    /// Field accessor shortcut.
    pub fn get(&self, f: Field) -> u64 {
        self.inp.get(f)
    }
}

/// The simulated firmware.
pub struct Firmware {
    cfg: FwConfig,
    state: HcaState,
    issi: u16,
    host_endianness: u8,
    caps: Caps,
    pages: Pages,
    uars: Table<()>,
    /// The UAR geometry the capabilities set at INIT_HCA ([`UarGeometry`]).
    uar_geom: UarGeometry,
    pds: Table<()>,
    tds: Table<()>,
    /// MKEY numbering (index allocation, capacity); the MKEYs live in `mkey_objs`.
    mkeys: Table<()>,
    /// The MKEYs by index, looked up directly by the data path ([`Firmware::mkey`]).
    mkey_objs: crate::engine::fastmap::DirectIndex<Mkey>,
    eqs: Table<Eq>,
    cqs: Table<Cq>,
    qps: Table<Qp>,
    srqs: Table<srq::Srq>,
    ports: Vec<Port>,
    /// Allocated Q counter sets.
    q_sets: Table<()>,
    /// Q counter values and the vport counters' state.
    counters: counters::Counters,
    stats: FwStats,
    /// MSI-X vectors to fire for events the last command raised.
    pending_irqs: Vec<u16>,
    /// Changes the data path follows, in order (see [`DataPathEvent`]).
    datapath_events: Vec<DataPathEvent>,
}

/// A change to an object the data path keeps state for, recorded by the command that
/// made it and taken by the engine right after the command
/// ([`Firmware::take_datapath_events`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataPathEvent {
    /// A modify command moved QP `qpn` from `from` to `to`.
    QpModified {
        /// The QP.
        qpn: u32,
        /// Its state before.
        from: QpcState,
        /// Its state after.
        to: QpcState,
    },
    /// QP `qpn` was destroyed.
    QpDestroyed(u32),
    /// CQ `cqn` was destroyed.
    CqDestroyed(u32),
    /// A MODIFY_CQ resize of CQ `cqn` was accepted: the data path writes the resize
    /// CQE into the old buffer and switches to the new one ([`Cq::take_resize`])
    /// before the command completes.
    CqResized(u32),
    /// Every object is gone (forced teardown, function disabled or reset).
    Reset,
    /// Port `port`'s (1-based) operational state changed: while it is down the port
    /// sends and receives nothing.
    PortState {
        /// The port.
        port: u8,
        /// Whether it is up now.
        up: bool,
    },
}

/// How many objects each table holds, for tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObjectCounts {
    /// UAR pages allocated.
    pub uars: usize,
    /// Protection domains.
    pub pds: usize,
    /// Transport domains.
    pub tds: usize,
    /// Memory keys.
    pub mkeys: usize,
    /// Event queues.
    pub eqs: usize,
    /// Completion queues.
    pub cqs: usize,
    /// Queue pairs.
    pub qps: usize,
    /// Q counter sets allocated.
    pub q_counters: usize,
    /// Shared receive queues.
    pub srqs: usize,
}

impl ObjectCounts {
    /// Total objects.
    pub fn total(&self) -> usize {
        self.uars
            + self.pds
            + self.tds
            + self.mkeys
            + self.eqs
            + self.cqs
            + self.qps
            + self.q_counters
            + self.srqs
    }
}

impl Firmware {
    /// A firmware in its reset state (function disabled).
    pub fn new(cfg: FwConfig) -> Self {
        let caps = Caps::new(&cfg);
        let pages = Pages::new(cfg.boot_pages, cfg.init_pages);
        let ports = vport::ports(&cfg, &caps);
        let mut fw = Firmware {
            uars: Table::new(cfg.first_uar, cfg.num_uars.max(1)),
            uar_geom: UarGeometry::default(),
            pds: Table::new(1, 1),
            tds: Table::new(1, 1),
            // Index 1 with variant 0 would be key 0x100, MLX5_INVALID_LKEY, the receive
            // list terminator: firmware never hands it out, so numbering starts at 2.
            mkeys: Table::new(FIRST_MKEY_INDEX, 1),
            mkey_objs: Default::default(),
            eqs: Table::new(1, 1),
            cqs: Table::new(1, 1),
            qps: Table::new(QPN_BASE, 1),
            q_sets: Table::new(1, 1),
            counters: counters::Counters::default(),
            srqs: Table::new(1, 1),
            cfg,
            state: HcaState::Disabled,
            issi: 0,
            host_endianness: 0,
            caps,
            pages,
            ports,
            stats: FwStats::default(),
            pending_irqs: Vec::new(),
            datapath_events: Vec::new(),
        };
        fw.size_tables();
        fw
    }

    /// Resets the function (PCI function-level reset): every object, page, capability
    /// change and GID is forgotten. Pages still held are counted as abandoned.
    pub fn reset(&mut self) {
        let abandoned = {
            self.pages.release_all();
            self.pages.abandoned()
        };
        let stats = self.stats;
        let given = self.pages.given_total();
        let taken = self.pages.taken_total();
        *self = Firmware::new(self.cfg.clone());
        self.datapath_events.push(DataPathEvent::Reset);
        self.stats = stats;
        self.pages.restore_totals(given, taken, abandoned);
    }

    /// Sizes the object tables from the current capabilities.
    fn size_tables(&mut self) {
        use ifc::cmd_hca_cap as g;
        let geom = UarGeometry::of(
            self.caps.gen(g::log_uar_page_sz),
            self.caps.gen(g::uar_4k) != 0,
        );
        if geom != self.uar_geom && self.uars.is_empty() {
            // The 4 KiB pages of BAR0 past the init segment, regrouped: UAR indexes
            // whose page lies wholly in that range, allocated `group` at a time.
            let init_end = u64::from(self.cfg.first_uar) << 12;
            let bar_end = u64::from(self.cfg.first_uar + self.cfg.num_uars) << 12;
            let first_index = init_end.div_ceil(1 << geom.shift);
            let end_index = bar_end >> geom.shift;
            let group = u64::from(geom.group);
            let first_unit = first_index.div_ceil(group);
            let end_unit = (end_index / group).max(first_unit + 1);
            self.uars = Table::new(first_unit as u32, (end_unit - first_unit) as u32);
            self.uar_geom = geom;
        }
        let cap = |log: u64| -> u32 { 1u32 << log.min(24) };
        self.pds.set_capacity(cap(self.caps.gen(g::log_max_pd)));
        self.tds
            .set_capacity(cap(self.caps.gen(g::log_max_transport_domain)));
        // MKEY indexes are 24 bits (key = index << 8 | variant).
        self.mkeys
            .set_capacity(cap(self.caps.gen(g::log_max_mkey)).min((1 << 24) - FIRST_MKEY_INDEX));
        // EQ numbers are 8 bits and start at 1.
        self.eqs
            .set_capacity(cap(self.caps.gen(g::log_max_eq)).min(255));
        self.cqs.set_capacity(cap(self.caps.gen(g::log_max_cq)));
        self.qps
            .set_capacity(cap(self.caps.gen(g::log_max_qp)).min((1 << 24) - QPN_BASE));
        // Counter set numbers are 8 bits and start at 1.
        self.q_sets
            .set_capacity((self.caps.gen(g::max_qp_cnt) as u32).min(255));
        self.srqs.set_capacity(cap(self.caps.gen(g::log_max_srq)));
    }

    /// The configuration.
    pub fn config(&self) -> &FwConfig {
        &self.cfg
    }

    /// Life-cycle state.
    pub fn state(&self) -> HcaState {
        self.state
    }

    /// The page ledger.
    pub fn pages(&self) -> &Pages {
        &self.pages
    }

    /// The capabilities.
    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    /// Work counters.
    pub fn stats(&self) -> FwStats {
        self.stats
    }

    /// Objects per table.
    pub fn objects(&self) -> ObjectCounts {
        ObjectCounts {
            uars: self.uars.len(),
            pds: self.pds.len(),
            tds: self.tds.len(),
            mkeys: self.mkeys.len(),
            eqs: self.eqs.len(),
            cqs: self.cqs.len(),
            qps: self.qps.len(),
            q_counters: self.q_sets.len(),
            srqs: self.srqs.len(),
        }
    }

    /// The ports (vport context, GID table, link state).
    pub fn ports(&self) -> &[Port] {
        &self.ports
    }

    /// The QP numbered `qpn`.
    pub fn qp(&self, qpn: u32) -> Option<&Qp> {
        self.qps.get(qpn)
    }

    /// The CQ numbered `cqn`.
    pub fn cq(&self, cqn: u32) -> Option<&Cq> {
        self.cqs.get(cqn)
    }

    /// The EQ numbered `eqn`.
    pub fn eq(&self, eqn: u32) -> Option<&Eq> {
        self.eqs.get(eqn)
    }

    /// The QP numbered `qpn`, mutably (the data path records its counters and PSNs in
    /// the context QUERY_QP reports).
    pub fn qp_mut(&mut self, qpn: u32) -> Option<&mut Qp> {
        self.qps.get_mut(qpn)
    }

    /// The CQ numbered `cqn`, mutably (the data path records its state in the context).
    pub fn cq_mut(&mut self, cqn: u32) -> Option<&mut Cq> {
        self.cqs.get_mut(cqn)
    }

    /// Moves QP `qpn` to `state` on the data path's behalf (a completion error puts it
    /// in ERR), in the table and in its context.
    pub fn set_qp_state(&mut self, qpn: u32, state: QpcState) {
        if let Some(qp) = self.qps.get_mut(qpn) {
            qp.state = state;
            let f = ferroverbs_hw::control::qp::qpc::state;
            if f.fits(qp.qpc.len()) {
                f.set(&mut qp.qpc, u64::from(state.value()));
            }
        }
    }

    /// The bytes an 8-byte atomic's original value is written back as into the
    /// requester's local buffer: big-endian (network order, the reset state), or in the
    /// host byte order declared with HOST_ENDIANNESS once SET_HCA_CAP has set
    /// `atomic_caps.atomic_req_8B_endianness_mode` to host endianness (Linux
    /// `handle_hca_cap_atomic`, so that libmlx5 and the verbs return the value in host
    /// order).
    pub fn atomic_result_bytes(&self, value: u64) -> [u8; 8] {
        let mode = self
            .caps
            .atomic(ifc::atomic_caps::atomic_req_8B_endianness_mode);
        if mode == ferroverbs_hw::control::caps::ATOMIC_REQ_MODE_HOST_ENDIANNESS
            && self.host_endianness == 0
        {
            value.to_le_bytes()
        } else {
            value.to_be_bytes()
        }
    }

    /// The host byte order software declared with HOST_ENDIANNESS (`he`: 0 little-endian,
    /// 1 big-endian).
    pub fn host_endianness(&self) -> u8 {
        self.host_endianness
    }

    /// Moves the data-path events recorded since the last call to the end of `out`.
    pub fn take_datapath_events(&mut self, out: &mut Vec<DataPathEvent>) {
        out.append(&mut self.datapath_events);
    }

    /// The memory key whose index is `index`.
    #[inline]
    pub fn mkey(&self, index: u32) -> Option<&Mkey> {
        self.mkey_objs.get(index)
    }

    /// Invalidates memory key `key` for a SEND with Invalidate received by a QP of
    /// protection domain `pd` (the R_Key of its IETH, IBTA Vol. 1 §9.4.1.4 and
    /// §10.6.7.2): the key must name a live MKEY of `pd` created with remote
    /// invalidation enabled (`mkc.en_rinval`, PRM "Mkey Context"); it becomes free
    /// (`mkc.free = 1`, as QUERY_MKEY then reports), so that every later access
    /// through it fails.
    pub fn invalidate_remote(&mut self, key: u32, pd: u32) -> Result<(), InvalidateError> {
        let k = self
            .mkey_objs
            .get_mut(key >> 8)
            .filter(|k| k.key == key && !k.view.is_free())
            .ok_or(InvalidateError::NoKey)?;
        if k.pd != pd {
            return Err(InvalidateError::OtherPd);
        }
        if !k.view.remote_invalidate() {
            return Err(InvalidateError::NotEnabled);
        }
        k.view.set_free();
        if mkc::free.fits(k.mkc.len()) {
            mkc::free.set(&mut k.mkc, 1);
        }
        Ok(())
    }

    /// Executes one command: `input` is the whole gathered input, `outlen` the output
    /// length the driver allowed. Returns the output message, header included.
    pub fn execute(&mut self, io: &Iommu, input: &[u8], outlen: usize) -> Vec<u8> {
        self.stats.executed += 1;
        let result = self.dispatch(io, input, outlen);
        match result {
            Ok(mut out) => {
                // Success: status 0, syndrome 0 (handlers leave the header zeroed).
                if out.len() >= 8 {
                    out[..8].fill(0);
                }
                out
            }
            Err(f) => {
                self.stats.failed += 1;
                tracing::debug!(
                    opcode = cmd::opcode(input).unwrap_or(0),
                    status = f.status,
                    syndrome = f.syndrome,
                    "simulated firmware refused a command"
                );
                let mut out = vec![0u8; 16];
                cmd::mbox_out::status.set(&mut out, u64::from(f.status));
                cmd::mbox_out::syndrome.set(&mut out, u64::from(f.syndrome));
                out
            }
        }
    }

    fn dispatch(&mut self, io: &Iommu, input: &[u8], outlen: usize) -> CmdResult {
        let hdr = match cmd::InHeader::parse(input) {
            Ok(h) if input.len() >= cmd::mbox_in::SIZE => h,
            _ => return Err(Syndrome::InputTooShort.into()),
        };
        let Ok(opcode) = hdr.opcode() else {
            return Err(Syndrome::UnknownOpcode.into());
        };
        if hdr.uid != 0 {
            return Err(Syndrome::UidNotZero.into());
        }
        let c = Cmd {
            inp: In(input),
            outlen,
            opcode,
            op_mod: hdr.op_mod,
        };
        self.gate(opcode)?;
        use Opcode::*;
        match opcode {
            EnableHca => self.enable_hca(&c),
            DisableHca => self.disable_hca(&c),
            QueryIssi => self.query_issi(&c),
            SetIssi => self.set_issi(&c),
            QueryPages => self.query_pages(&c),
            ManagePages => self.manage_pages(&c, io),
            QueryHcaCap => self.query_hca_cap(&c),
            SetHcaCap => self.set_hca_cap(&c),
            InitHca => self.init_hca(&c),
            TeardownHca => self.teardown_hca(&c),
            AccessReg => self.access_reg(&c, io),
            Nop => self.nop(&c),
            AllocUar => self.alloc_uar(&c),
            DeallocUar => self.dealloc_uar(&c),
            AllocPd => self.alloc_pd(&c),
            DeallocPd => self.dealloc_pd(&c),
            AllocTransportDomain => self.alloc_td(&c),
            DeallocTransportDomain => self.dealloc_td(&c),
            CreateMkey => self.create_mkey(&c, io),
            QueryMkey => self.query_mkey(&c),
            DestroyMkey => self.destroy_mkey(&c),
            CreateEq => self.create_eq(&c, io),
            DestroyEq => self.destroy_eq(&c),
            QueryEq => self.query_eq(&c),
            CreateCq => self.create_cq(&c, io),
            DestroyCq => self.destroy_cq(&c),
            QueryCq => self.query_cq(&c),
            ModifyCq => self.modify_cq(&c, io),
            CreateQp => self.create_qp(&c, io),
            DestroyQp => self.destroy_qp(&c),
            QueryQp => self.query_qp(&c),
            CreateSrq => self.create_srq(&c, io),
            DestroySrq => self.destroy_srq(&c),
            QuerySrq => self.query_srq(&c),
            ArmRq => self.arm_rq(&c),
            Rst2InitQp => self.modify_qp(&c, QpTransition::Rst2Init),
            Init2InitQp => self.modify_qp(&c, QpTransition::Init2Init),
            Init2RtrQp => self.modify_qp(&c, QpTransition::Init2Rtr),
            Rtr2RtsQp => self.modify_qp(&c, QpTransition::Rtr2Rts),
            Rts2RtsQp => self.modify_qp(&c, QpTransition::Rts2Rts),
            Sqerr2RtsQp => self.modify_qp(&c, QpTransition::Sqerr2Rts),
            SqdRtsQp => self.modify_qp(&c, QpTransition::Sqd2Rts),
            Qp2ErrQp => self.modify_qp(&c, QpTransition::ToErr),
            Qp2RstQp => self.modify_qp(&c, QpTransition::ToRst),
            QueryNicVportContext => self.query_nic_vport_context(&c),
            ModifyNicVportContext => self.modify_nic_vport_context(&c),
            QueryVportState => self.query_vport_state(&c),
            SetRoceAddress => self.set_roce_address(&c),
            QueryRoceAddress => self.query_roce_address(&c),
            AllocQCounter => self.alloc_q_counter(&c),
            DeallocQCounter => self.dealloc_q_counter(&c),
            QueryQCounter => self.query_q_counter(&c),
            QueryVportCounter => self.query_vport_counter(&c, io),
            _ => Err(Syndrome::NotImplemented.into()),
        }
    }

    /// The life-cycle gate: which commands the function accepts in its state.
    fn gate(&self, op: Opcode) -> Result<(), Fail> {
        use Opcode::*;
        let pre_init = matches!(
            op,
            EnableHca
                | DisableHca
                | QueryIssi
                | SetIssi
                | QueryPages
                | ManagePages
                | QueryHcaCap
                | SetHcaCap
                | InitHca
                | TeardownHca
                | AccessReg
                | Nop
        );
        match self.state {
            HcaState::Disabled if op == EnableHca || op == Nop => Ok(()),
            HcaState::Disabled => Err(Syndrome::HcaNotEnabled.into()),
            HcaState::Enabled if pre_init => Ok(()),
            HcaState::Enabled => Err(Syndrome::HcaNotInitialized.into()),
            HcaState::Initialized => Ok(()),
        }
    }

    /// Whether an access of `len` bytes at `iova` is mapped for `access`.
    fn mapped(io: &Iommu, iova: u64, len: usize, access: Access) -> bool {
        io.check(iova, len, access).is_ok()
    }

    /// Posts an event to the lowest-numbered EQ subscribed to `ty`. Returns the MSI-X
    /// vector to fire, if any.
    pub fn post_event(&mut self, io: &Iommu, ty: u8, sub_type: u8, data: &[u8]) -> Option<u16> {
        let eqn = self
            .eqs
            .iter()
            .find(|(_, eq)| eq.ring.subscribed(ty))
            .map(|(n, _)| n)?;
        self.post_to_eq(io, eqn, ty, sub_type, data)
    }

    /// Posts an event to EQ `eqn` whatever its mask (completion events).
    pub fn post_to_eq(
        &mut self,
        io: &Iommu,
        eqn: u32,
        ty: u8,
        sub_type: u8,
        data: &[u8],
    ) -> Option<u16> {
        let eq = self.eqs.get_mut(eqn)?;
        match eq.ring.post(io, ty, sub_type, data) {
            Posted::Written(v) => {
                self.stats.eqes += 1;
                v
            }
            Posted::Overrun => {
                self.stats.eq_overruns += 1;
                None
            }
            Posted::Fault(_) => None,
        }
    }

    /// An EQ doorbell written in UAR page `uar`: `(eqn << 24) | ci`, arming if `arm`.
    /// Returns the vector to fire. Doorbells for an EQ that does not exist or does not
    /// belong to that UAR are ignored, as hardware ignores them.
    pub fn eq_doorbell(&mut self, uar: u32, eqn: u32, ci: u32, arm: bool) -> Option<u16> {
        let eq = self.eqs.get_mut(eqn)?;
        if eq.ring.uar != uar {
            return None;
        }
        eq.ring.doorbell(ci, arm).ok().flatten()
    }

    /// The MSI-X vectors events raised by the last commands must fire (drained).
    pub fn take_irqs(&mut self) -> Vec<u16> {
        std::mem::take(&mut self.pending_irqs)
    }

    /// Tells the data path of a change of port `index`'s (0-based) operational state
    /// from `was_up`, and posts a PORT_CHANGE event for it if the HCA is initialized;
    /// the vector joins the pending interrupts.
    fn port_event(&mut self, io: &Iommu, index: usize, was_up: bool) {
        let Some(p) = self.ports.get(index) else {
            return;
        };
        let up = p.oper_up();
        if up == was_up {
            return;
        }
        self.datapath_events.push(DataPathEvent::PortState {
            port: index as u8 + 1,
            up,
        });
        if self.state != HcaState::Initialized {
            return;
        }
        use ferroverbs_hw::datapath::eqe::{
            MLX5_EVENT_TYPE_PORT_CHANGE, MLX5_PORT_CHANGE_SUBTYPE_ACTIVE,
            MLX5_PORT_CHANGE_SUBTYPE_DOWN,
        };
        let sub = if up {
            MLX5_PORT_CHANGE_SUBTYPE_ACTIVE
        } else {
            MLX5_PORT_CHANGE_SUBTYPE_DOWN
        };
        // `struct mlx5_eqe_port_state`: the port number in bits 7..4 of byte 8.
        let mut data = [0u8; 9];
        data[8] = ((index as u8 + 1) & 0xf) << 4;
        if let Some(v) = self.post_event(io, MLX5_EVENT_TYPE_PORT_CHANGE, sub, &data) {
            self.pending_irqs.push(v);
        }
    }

    /// The physical link of port `port` (1-based) goes up or down; a PORT_CHANGE event
    /// reports a change of the operational state. Returns `false` for an unknown port.
    pub fn set_link(&mut self, io: &Iommu, port: u8, up: bool) -> bool {
        let Some(i) = usize::from(port)
            .checked_sub(1)
            .filter(|&i| i < self.ports.len())
        else {
            return false;
        };
        let was = self.ports[i].oper_up();
        self.ports[i].link_up = up;
        self.port_event(io, i, was);
        true
    }

    /// Whether UAR index `uar` is allocated (it belongs to an allocated UAR page).
    pub fn uar_allocated(&self, uar: u32) -> bool {
        self.uars.contains(self.uar_geom.unit(uar))
    }

    /// The UAR geometry: BAR0 offset of UAR `n` is `n << shift`.
    pub fn uar_geometry(&self) -> UarGeometry {
        self.uar_geom
    }

    /// Takes a use of the UAR page holding UAR index `uar` (false if not allocated).
    pub(crate) fn uar_acquire(&mut self, uar: u32) -> bool {
        let u = self.uar_geom.unit(uar);
        self.uars.acquire(u)
    }

    /// Releases a use taken by [`Firmware::uar_acquire`].
    pub(crate) fn uar_release(&mut self, uar: u32) {
        let u = self.uar_geom.unit(uar);
        self.uars.release(u);
    }

    /// The firmware wants `delta` more pages (negative: fewer): records it and posts a
    /// PAGE_REQUEST event. Returns the vector to fire.
    pub fn request_pages(&mut self, io: &Iommu, delta: i32) -> Option<u16> {
        let n = self.pages.request(delta);
        let mut data = [0u8; 8];
        // ec_function 0, func_id 0 (the function itself), num_pages.
        data[4..8].copy_from_slice(&n.to_be_bytes());
        self.post_event(
            io,
            ferroverbs_hw::datapath::eqe::MLX5_EVENT_TYPE_PAGE_REQUEST,
            0,
            &data,
        )
    }
}

/// First MKEY index handed out: index 1 would allow key 0x100 (`MLX5_INVALID_LKEY`,
/// which ends a receive WQE's scatter list) to name a real key.
pub const FIRST_MKEY_INDEX: u32 = 2;

/// First QP number handed out (QPN 0 and 1 are the special QP0/QP1).
pub const QPN_BASE: u32 = 0x100;

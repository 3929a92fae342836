//! Opening a device: [`Device::open`] brings the HCA up and gives a [`Context`], which
//! answers device and port queries, carries raw firmware commands, services events,
//! and tears the HCA down on [`Context::close`] or drop.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use ferroverbs_hw::{Bus, Field};

use crate::clock::{Clock, MonotonicClock};
use crate::eq::AsyncEvent;
use crate::error::{Error, Failure, Result};
use crate::hca::{cmd_in, Caps, Hca, PORT_TYPE_ETH};
use crate::prm::{self, op};
use crate::regs;

/// RoCE version of a GID table entry (`roce_version` of `roce_addr_layout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RoceVersion {
    /// RoCE v1 (Ethernet type 0x8915), value 0.
    V1,
    /// RoCE v2 (UDP port 4791), value 2.
    V2,
    /// Any other value the device reports.
    Other(u8),
}

impl RoceVersion {
    fn raw(self) -> u8 {
        match self {
            RoceVersion::V1 => 0,
            RoceVersion::V2 => 2,
            RoceVersion::Other(v) => v,
        }
    }

    fn from_raw(v: u8) -> Self {
        match v {
            0 => RoceVersion::V1,
            2 => RoceVersion::V2,
            v => RoceVersion::Other(v),
        }
    }
}

/// Network-layer type of a RoCE v2 GID (`roce_l3_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum L3Type {
    /// IPv4 (the GID is `::ffff:a.b.c.d`), value 0.
    Ipv4,
    /// IPv6, value 1.
    Ipv6,
    /// Any other value the device reports.
    Other(u8),
}

impl L3Type {
    fn raw(self) -> u8 {
        match self {
            L3Type::Ipv4 => 0,
            L3Type::Ipv6 => 1,
            L3Type::Other(v) => v,
        }
    }

    fn from_raw(v: u8) -> Self {
        match v {
            0 => L3Type::Ipv4,
            1 => L3Type::Ipv6,
            v => L3Type::Other(v),
        }
    }
}

/// One entry of a port's GID table (`roce_addr_layout`): what the driver programs
/// with `SET_ROCE_ADDRESS` and reads with `QUERY_ROCE_ADDRESS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GidEntry {
    /// Index in the table (`roce_address_index`).
    pub index: u16,
    /// The GID (`source_l3_address`).
    pub gid: [u8; 16],
    /// Source MAC address of packets sent with this GID.
    pub mac: [u8; 6],
    /// RoCE version.
    pub version: RoceVersion,
    /// L3 type (RoCE v2).
    pub l3_type: L3Type,
    /// VLAN id, if packets are tagged.
    pub vlan: Option<u16>,
}

/// What bring-up programs into the GID table.
pub type GidConfig = GidEntry;

impl GidEntry {
    /// A RoCE v2 entry for an IPv4 address (GID `::ffff:a.b.c.d`).
    pub fn ipv4(index: u16, addr: [u8; 4], mac: [u8; 6]) -> Self {
        GidEntry {
            index,
            gid: ferroverbs_hw::control::roce::ipv4_mapped_gid(addr),
            mac,
            version: RoceVersion::V2,
            l3_type: L3Type::Ipv4,
            vlan: None,
        }
    }

    /// A RoCE v2 entry for an IPv6 address.
    pub fn ipv6(index: u16, addr: [u8; 16], mac: [u8; 6]) -> Self {
        GidEntry {
            index,
            gid: addr,
            mac,
            version: RoceVersion::V2,
            l3_type: L3Type::Ipv6,
            vlan: None,
        }
    }

    /// Whether the entry is empty (all-zero GID).
    pub fn is_empty(&self) -> bool {
        self.gid == [0; 16]
    }

    /// Writes the `roce_addr_layout` at bit `base` of `buf`.
    pub(crate) fn encode(&self, buf: &mut [u8], base: u32) {
        use prm::roce_addr_layout as l;
        if let Some(dst) = l::source_l3_address.at(base).bytes_mut(buf) {
            dst.copy_from_slice(&self.gid);
        }
        if let Some(v) = self.vlan {
            l::vlan_valid.at(base).set(buf, 1);
            l::vlan_id.at(base).set(buf, u64::from(v));
        }
        let m = self.mac;
        l::source_mac_47_32
            .at(base)
            .set(buf, u64::from(u16::from_be_bytes([m[0], m[1]])));
        l::source_mac_31_0
            .at(base)
            .set(buf, u64::from(u32::from_be_bytes([m[2], m[3], m[4], m[5]])));
        l::roce_l3_type
            .at(base)
            .set(buf, u64::from(self.l3_type.raw()));
        l::roce_version
            .at(base)
            .set(buf, u64::from(self.version.raw()));
    }

    /// Reads a `roce_addr_layout` at bit `base` of `buf` (device bytes: total).
    pub(crate) fn decode(index: u16, buf: &[u8], base: u32) -> Self {
        use prm::roce_addr_layout as l;
        let mut gid = [0u8; 16];
        if let Some(src) = l::source_l3_address.at(base).bytes(buf) {
            gid.copy_from_slice(src);
        }
        let hi = (l::source_mac_47_32.at(base).get(buf) as u16).to_be_bytes();
        let lo = (l::source_mac_31_0.at(base).get(buf) as u32).to_be_bytes();
        GidEntry {
            index,
            gid,
            mac: [hi[0], hi[1], lo[0], lo[1], lo[2], lo[3]],
            version: RoceVersion::from_raw(l::roce_version.at(base).get(buf) as u8),
            l3_type: L3Type::from_raw(l::roce_l3_type.at(base).get(buf) as u8),
            vlan: (l::vlan_valid.at(base).get(buf) == 1)
                .then(|| l::vlan_id.at(base).get(buf) as u16),
        }
    }
}

/// How to open a device.
#[derive(Clone)]
pub struct DeviceConfig {
    /// GID table entries to program on port 1 during bring-up.
    pub gids: Vec<GidEntry>,
    /// How long one command may take (rdma-core uses 60 s).
    pub cmd_timeout: Duration,
    /// How long to wait for the `initializing` bit to clear (rdma-core: 120 s).
    pub init_timeout: Duration,
    /// The health watchdog period; the device is declared failed after
    /// [`MAX_MISSES`](crate::health::MAX_MISSES) periods without counter movement.
    pub health_period: Duration,
    /// Complete commands by event once the async EQ exists (else keep polling).
    pub event_mode: bool,
    /// The time source of every timeout and of the watchdog.
    pub clock: Arc<dyn Clock>,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            gids: Vec::new(),
            cmd_timeout: Duration::from_secs(60),
            init_timeout: Duration::from_secs(120),
            health_period: Duration::from_secs(1),
            event_mode: true,
            clock: Arc::new(MonotonicClock::new()),
        }
    }
}

impl fmt::Debug for DeviceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceConfig")
            .field("gids", &self.gids)
            .field("cmd_timeout", &self.cmd_timeout)
            .field("init_timeout", &self.init_timeout)
            .field("health_period", &self.health_period)
            .field("event_mode", &self.event_mode)
            .finish_non_exhaustive()
    }
}

impl DeviceConfig {
    /// Uses `clock` for every timeout and the watchdog.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Adds a GID table entry to program during bring-up.
    pub fn with_gid(mut self, gid: GidEntry) -> Self {
        self.gids.push(gid);
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.cmd_timeout.is_zero() || self.init_timeout.is_zero() {
            return Err(Error::InvalidArgument {
                what: "timeouts must be nonzero",
            });
        }
        if self.health_period.is_zero() {
            return Err(Error::InvalidArgument {
                what: "the health period must be nonzero",
            });
        }
        for (i, g) in self.gids.iter().enumerate() {
            if self.gids[..i].iter().any(|h| h.index == g.index) {
                return Err(Error::InvalidArgument {
                    what: "two GID entries with the same index",
                });
            }
        }
        Ok(())
    }
}

/// Firmware version from the init segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FwVersion {
    /// Major.
    pub major: u16,
    /// Minor.
    pub minor: u16,
    /// Sub-minor.
    pub subminor: u16,
}

impl fmt::Display for FwVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.subminor)
    }
}

/// Atomic operation support (`ibv_atomic_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicCap {
    /// No atomics.
    None,
    /// Atomic among operations through this HCA.
    Hca,
}

/// Link layer of a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkLayer {
    /// InfiniBand (`port_type` 0).
    InfiniBand,
    /// Ethernet / RoCE (`port_type` 1).
    Ethernet,
}

/// Device attributes (`ibv_device_attr`), computed from the capabilities as Linux
/// `mlx5_ib_query_device` computes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version.
    pub fw_ver: FwVersion,
    /// Node GUID (NIC vport context).
    pub node_guid: u64,
    /// System image GUID.
    pub sys_image_guid: u64,
    /// PCI vendor id of Mellanox/NVIDIA.
    pub vendor_id: u32,
    /// Largest memory region: unlimited.
    pub max_mr_size: u64,
    /// Supported page sizes: every power of two from `1 << log_pg_sz` up.
    pub page_size_cap: u64,
    /// `1 << log_max_qp`.
    pub max_qp: u32,
    /// `1 << log_max_qp_sz`.
    pub max_qp_wr: u32,
    /// Minimum of the send and receive scatter/gather limits.
    pub max_sge: u32,
    /// Scatter/gather entries of an RDMA read (`MLX5_MAX_SGE_RD`).
    pub max_sge_rd: u32,
    /// `1 << log_max_cq`.
    pub max_cq: u32,
    /// `(1 << log_max_cq_sz) - 1`.
    pub max_cqe: u32,
    /// `1 << log_max_mkey`.
    pub max_mr: u32,
    /// `1 << log_max_pd`.
    pub max_pd: u32,
    /// `1 << log_max_ra_req_qp`.
    pub max_qp_rd_atom: u32,
    /// `1 << log_max_ra_res_qp`.
    pub max_qp_init_rd_atom: u32,
    /// `1 << log_max_srq`.
    pub max_srq: u32,
    /// `(1 << log_max_srq_sz) - 1`.
    pub max_srq_wr: u32,
    /// Receive scatter/gather limit minus one.
    pub max_srq_sge: u32,
    /// Atomic support.
    pub atomic_cap: AtomicCap,
    /// `local_ca_ack_delay`.
    pub local_ca_ack_delay: u8,
    /// Number of ports.
    pub phys_port_cnt: u8,
    /// `1 << log_max_msg`.
    pub max_msg_sz: u64,
    /// `1 << log_max_mcg`.
    pub max_mcast_grp: u32,
    /// `max_qp_mcg`.
    pub max_mcast_qp_attach: u32,
    /// Device clock in kHz (`device_frequency_khz`).
    pub hca_core_clock_khz: u32,
    /// The bits of the CQE `timestamp` counter that wrap (`completion_timestamp_mask`):
    /// `0x7fff_ffff_ffff_ffff` when the device has a clock (`device_frequency_khz`
    /// nonzero), as Linux `mlx5_ib_query_device` sets `timestamp_mask`; 0 otherwise.
    pub completion_timestamp_mask: u64,
    /// Link layer of the ports.
    pub link_layer: LinkLayer,
    /// RC, UC, UD and XRC transport support.
    pub transports: Transports,
}

/// Transport services the device supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transports {
    /// Reliable connected.
    pub rc: bool,
    /// Unreliable connected.
    pub uc: bool,
    /// Unreliable datagram.
    pub ud: bool,
    /// Extended reliable connected.
    pub xrc: bool,
}

/// Port state (`ibv_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortState {
    /// Link down.
    Down,
    /// Link up.
    Active,
    /// A vport state value the driver does not know.
    Other(u8),
}

/// Path MTU (`ibv_mtu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    /// The MTU of its IB encoding (1 = 256 .. 5 = 4096): `enum ibv_mtu`, the qpc `mtu`
    /// field and `port_mtu` alike.
    pub fn from_ib(v: u32) -> Option<Mtu> {
        Some(match v {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            3 => Mtu::Mtu1024,
            4 => Mtu::Mtu2048,
            5 => Mtu::Mtu4096,
            _ => return None,
        })
    }

    /// The MTU in bytes.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }

    /// The MTU of `bytes` (256, 512, 1024, 2048 or 4096), `None` for any other.
    pub fn from_bytes(bytes: u32) -> Option<Mtu> {
        [
            Mtu::Mtu256,
            Mtu::Mtu512,
            Mtu::Mtu1024,
            Mtu::Mtu2048,
            Mtu::Mtu4096,
        ]
        .into_iter()
        .find(|m| m.bytes() == bytes)
    }

    /// The MTU a simulated NIC's port is given by the value `v` of an environment
    /// variable (`FERROVERBS_MTU` of the drop-in and the uAPI layer): 256, 512, 1024,
    /// 2048 or 4096; `None` when unset or empty. The error names the value and what
    /// is expected. A larger MTU means fewer packets but four times the bytes in a
    /// requester's 256-packet window, which a slow receiver may not drain within the
    /// ACK timeout; the UDP link carries frames of up to 4352 bytes, enough for 4096.
    pub fn from_env(v: Option<&str>) -> std::result::Result<Option<Mtu>, String> {
        match v.map(str::trim).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(t) => t
                .parse::<u32>()
                .ok()
                .and_then(Mtu::from_bytes)
                .map(Some)
                .ok_or_else(|| format!("{t}: expected 256, 512, 1024, 2048 or 4096")),
        }
    }

    /// The smallest Ethernet MTU whose [`Mtu::for_ethernet`] is this MTU: its bytes and
    /// the 96 bytes of headers `iboe_get_mtu` leaves room for.
    pub fn ethernet_mtu(self) -> u32 {
        self.bytes() + 40 + 8 + 12 + 4 + 28 + 4
    }

    /// The largest IB MTU whose RoCE packets fit an Ethernet MTU of `eth_mtu` bytes
    /// (Linux `iboe_get_mtu`: subtract GRH 40, UDP 8, BTH 12, XRC 4, AtomicETH 28 and
    /// ICRC 4 bytes); at least 256.
    pub fn for_ethernet(eth_mtu: u32) -> Mtu {
        let room = eth_mtu.saturating_sub(40 + 8 + 12 + 4 + 28 + 4);
        [Mtu::Mtu4096, Mtu::Mtu2048, Mtu::Mtu1024, Mtu::Mtu512]
            .into_iter()
            .find(|m| m.bytes() <= room)
            .unwrap_or(Mtu::Mtu256)
    }
}

/// Port attributes (`ibv_port_attr`, plus the Ethernet facts of a RoCE port).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// Operational state (`QUERY_VPORT_STATE.state`).
    pub state: PortState,
    /// Administrative state: 0 down, 1 up, 2 follow.
    pub admin_state: u8,
    /// Largest MTU the port supports.
    pub max_mtu: Mtu,
    /// MTU in use, derived from the NIC vport MTU.
    pub active_mtu: Mtu,
    /// The NIC vport MTU in bytes (hardware MTU: Ethernet payload plus L2 headers).
    pub vport_mtu: u16,
    /// Size of the GID table.
    pub gid_tbl_len: u32,
    /// Largest message.
    pub max_msg_sz: u64,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// Permanent MAC address of the vport.
    pub mac: [u8; 6],
    /// The non-empty entries of the GID table.
    pub gids: Vec<GidEntry>,
}

/// Which open device (which [`Context`]) an object belongs to: a number unique in
/// the process, given out in the order devices are opened (the first is 1).
///
/// Object numbers (CQN, SRQN, PDN, keys) are per device, so an object of one device
/// handed to another names an unrelated object there; the verbs API compares these
/// ids when it creates an object from others ([`crate::verbs::Error::ForeignObject`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId(u64);

impl DeviceId {
    fn next() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        DeviceId(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    /// The number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device #{}", self.0)
    }
}

/// Entry point: opens a device behind a [`Bus`].
#[derive(Debug)]
pub struct Device;

impl Device {
    /// Brings the device up and returns its context. On failure, everything done so
    /// far is undone and the error names the bring-up step ([`Error::BringUp`]).
    pub fn open<B: Bus>(bus: B, config: DeviceConfig) -> Result<Context<B>> {
        Self::open_shared(Arc::new(bus), config)
    }

    /// As [`Device::open`], for a bus the caller shares.
    pub fn open_shared<B: Bus>(bus: Arc<B>, config: DeviceConfig) -> Result<Context<B>> {
        let fw_ver = read_fw_version(&*bus);
        let hca = Hca::bring_up(Arc::clone(&bus), &config)?;
        let verdict = hca.health.verdict();
        let caps = hca.caps.clone();
        tracing::info!(%fw_ver, "device up");
        Ok(Context {
            id: DeviceId::next(),
            bus,
            hca: Mutex::new(hca),
            verdict,
            caps,
            fw_ver,
            closed: false,
            events: Default::default(),
            mrs: Default::default(),
        })
    }
}

fn read_fw_version<B: Bus>(bus: &B) -> FwVersion {
    let a = bus.read32(regs::FW_REV);
    let b = bus.read32(regs::CMDIF_REV_FW_SUB);
    FwVersion {
        major: a as u16,
        minor: (a >> 16) as u16,
        subminor: b as u16,
    }
}

/// `1 << log`, saturating (device values are untrusted).
fn pow2(log: u64) -> u64 {
    if log >= 64 {
        u64::MAX
    } else {
        1 << log
    }
}

fn pow2_u32(log: u64) -> u32 {
    pow2(log).min(u64::from(u32::MAX)) as u32
}

/// An open device.
///
/// All methods take `&self`; commands are serialized internally. Once the device has
/// failed (watchdog verdict), every method that talks to it returns
/// [`Error::DeviceFailed`] at once.
pub struct Context<B: Bus> {
    id: DeviceId,
    bus: Arc<B>,
    hca: Mutex<Hca<B>>,
    verdict: Arc<OnceLock<Failure>>,
    caps: Caps,
    fw_ver: FwVersion,
    closed: bool,
    events: crate::verbs::EventState,
    /// The memory regions by key, for the poll's copies of scattered CQEs.
    mrs: Arc<crate::verbs::scatter::MrDir>,
}

impl<B: Bus> fmt::Debug for Context<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("id", &self.id)
            .field("fw_ver", &self.fw_ver)
            .field("failed", &self.verdict.get())
            .finish_non_exhaustive()
    }
}

impl<B: Bus> Context<B> {
    /// The software byte of the next memory key of this device
    /// (`Hca::next_key_variant`).
    pub(crate) fn next_key_variant(&self) -> Result<u8> {
        Ok(self.lock()?.next_key_variant())
    }

    /// Which open device this is (compared when objects are combined).
    pub fn id(&self) -> DeviceId {
        self.id
    }

    fn lock(&self) -> Result<MutexGuard<'_, Hca<B>>> {
        if let Some(f) = self.verdict.get() {
            return Err(Error::DeviceFailed(*f));
        }
        Ok(self.hca.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn lock_any(&self) -> MutexGuard<'_, Hca<B>> {
        self.hca.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Event bookkeeping of the verbs layer (async events, completion vectors).
    pub(crate) fn event_state(&self) -> &crate::verbs::EventState {
        &self.events
    }

    /// The memory regions of the device by key ([`crate::verbs::scatter`]).
    pub(crate) fn mrs(&self) -> &Arc<crate::verbs::scatter::MrDir> {
        &self.mrs
    }

    /// The bus.
    pub fn bus(&self) -> &Arc<B> {
        &self.bus
    }

    /// Firmware version.
    pub fn fw_version(&self) -> FwVersion {
        self.fw_ver
    }

    /// Non-fatal health syndromes the watchdog has seen (each new `health.synd`
    /// without the RFR bit once; each is also an [`AsyncEvent::HealthReport`]).
    pub fn health_reports(&self) -> u64 {
        self.lock_any().health_reports()
    }

    /// Why the device failed, if it did.
    pub fn failure(&self) -> Option<Failure> {
        self.verdict.get().copied()
    }

    /// An on-demand paging capability (current value, `odp_cap`), by field: 0 when
    /// the device reports no `pg`.
    pub fn odp_cap(&self, f: Field) -> u64 {
        self.caps.odp(f)
    }

    /// A general capability (current value), by field.
    pub fn cap(&self, f: Field) -> u64 {
        self.caps.gen(f)
    }

    /// A RoCE capability (current value), by field; 0 without RoCE.
    pub fn roce_cap(&self, f: Field) -> u64 {
        self.caps.roce(f)
    }

    /// The UAR the driver allocated for its EQ doorbells.
    pub fn uar_index(&self) -> Option<u32> {
        self.lock_any().uar
    }

    /// The async EQ's number.
    pub fn async_eqn(&self) -> Option<u8> {
        self.lock_any().async_eqn()
    }

    /// Whether commands complete by event (the async EQ) rather than by polling.
    pub fn event_mode(&self) -> bool {
        self.lock_any().event_mode()
    }

    /// The async EQ's consumer counter (how many EQEs the driver consumed).
    pub fn eq_consumer_counter(&self) -> Option<u32> {
        self.lock_any().eq_consumer_counter()
    }

    /// Number of pages the firmware holds.
    pub fn pages_lent(&self) -> usize {
        self.lock_any().pages.lent()
    }

    /// Executes a raw firmware command: `input` is the whole input (generic header
    /// first), `out_len` the output length expected. Returns the whole output; a
    /// nonzero status comes back as [`Error::Cmd`] with the opcode, op_mod, status
    /// and syndrome. The escape hatch for what has no typed API yet (rdma-core's
    /// `mlx5dv_devx_general_cmd`).
    pub fn exec_cmd(&self, input: &[u8], out_len: usize) -> Result<Vec<u8>> {
        self.lock()?.exec(input, out_len)
    }

    /// [`Context::exec_cmd`] with a timeout for this command instead of
    /// [`DeviceConfig::cmd_timeout`].
    pub fn exec_cmd_timeout(
        &self,
        input: &[u8],
        out_len: usize,
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        self.lock()?.exec_with_timeout(input, out_len, timeout)
    }

    /// Consumes pending events: answers page requests, queues async events, and runs
    /// the health watchdog (rdma-core `mlx5dv_vfio_process_events`). Call it now and
    /// then when the driver is otherwise idle.
    pub fn process_events(&self) -> Result<()> {
        let mut hca = self.lock()?;
        hca.check_health(true)?;
        hca.poll_eq();
        let r = hca.service_page_requests();
        hca.check_health(false)?;
        r
    }

    /// Consumes the async EQ even when the device has failed (the ring is host
    /// memory), so that events written before the failure are still reported.
    pub(crate) fn drain_async_eq(&self) {
        self.lock_any().poll_eq();
    }

    /// Whether async events wait in the context's queue (taken or not by a command's
    /// look at the async EQ).
    pub(crate) fn async_event_queued(&self) -> bool {
        self.lock_any().async_event_queued()
    }

    /// The oldest async event not yet taken (see [`Context::process_events`]).
    pub fn next_async_event(&self) -> Option<AsyncEvent> {
        self.lock_any().take_async_event()
    }

    /// Device attributes.
    pub fn query_device(&self) -> Result<DeviceAttr> {
        let mut hca = self.lock()?;
        let out = hca.exec(
            &cmd_in(op::QUERY_NIC_VPORT_CONTEXT, 0, 16),
            prm::query_nic_vport_context_out::SIZE,
        )?;
        drop(hca);
        let ctx = prm::query_nic_vport_context_out::nic_vport_context.bit;
        let c = &self.caps;
        use prm::cmd_hca_cap as g;
        let max_rq_sg = (c.gen(g::max_wqe_sz_rq) / 16) as u32;
        let max_sq_desc = c.gen(g::max_wqe_sz_sq).min(512);
        let max_sq_sg = (max_sq_desc.saturating_sub(16 + 16) / 16) as u32;
        Ok(DeviceAttr {
            fw_ver: self.fw_ver,
            node_guid: prm::nic_vport_context::node_guid.at(ctx).get(&out),
            sys_image_guid: prm::nic_vport_context::system_image_guid.at(ctx).get(&out),
            vendor_id: 0x02c9,
            max_mr_size: u64::MAX,
            page_size_cap: !(pow2(c.gen(g::log_pg_sz)).wrapping_sub(1)),
            max_qp: pow2_u32(c.gen(g::log_max_qp)),
            max_qp_wr: pow2_u32(c.gen(g::log_max_qp_sz)),
            max_sge: max_rq_sg.min(max_sq_sg),
            max_sge_rd: (512 - 16 - 16) / 16,
            max_cq: pow2_u32(c.gen(g::log_max_cq)),
            max_cqe: pow2_u32(c.gen(g::log_max_cq_sz)).saturating_sub(1),
            max_mr: pow2_u32(c.gen(g::log_max_mkey)),
            max_pd: pow2_u32(c.gen(g::log_max_pd)),
            max_qp_rd_atom: pow2_u32(c.gen(g::log_max_ra_req_qp)),
            max_qp_init_rd_atom: pow2_u32(c.gen(g::log_max_ra_res_qp)),
            max_srq: pow2_u32(c.gen(g::log_max_srq)),
            max_srq_wr: pow2_u32(c.gen(g::log_max_srq_sz)).saturating_sub(1),
            max_srq_sge: max_rq_sg.saturating_sub(1),
            atomic_cap: if c.hca_atomics() {
                AtomicCap::Hca
            } else {
                AtomicCap::None
            },
            local_ca_ack_delay: c.gen(g::local_ca_ack_delay) as u8,
            phys_port_cnt: c.gen(g::num_ports) as u8,
            max_msg_sz: pow2(c.gen(g::log_max_msg)),
            max_mcast_grp: pow2_u32(c.gen(g::log_max_mcg)),
            max_mcast_qp_attach: c.gen(g::max_qp_mcg) as u32,
            hca_core_clock_khz: c.gen(g::device_frequency_khz) as u32,
            completion_timestamp_mask: if c.gen(g::device_frequency_khz) != 0 {
                0x7fff_ffff_ffff_ffff
            } else {
                0
            },
            link_layer: self.link_layer(),
            transports: Transports {
                rc: c.gen(g::rc) == 1,
                uc: c.gen(g::uc) == 1,
                ud: c.gen(g::ud) == 1,
                xrc: c.gen(g::xrc) == 1,
            },
        })
    }

    fn link_layer(&self) -> LinkLayer {
        if self.caps.gen(prm::cmd_hca_cap::port_type) == PORT_TYPE_ETH {
            LinkLayer::Ethernet
        } else {
            LinkLayer::InfiniBand
        }
    }

    fn check_port(&self, port: u8) -> Result<()> {
        let n = self.caps.gen(prm::cmd_hca_cap::num_ports).max(1);
        if port == 0 || u64::from(port) > n {
            return Err(Error::InvalidArgument {
                what: "port number out of range",
            });
        }
        Ok(())
    }

    /// The size of the GID table.
    pub fn gid_table_len(&self) -> u32 {
        self.caps
            .roce(prm::roce_cap::roce_address_table_size)
            .min(u64::from(u32::MAX)) as u32
    }

    /// The active MTU of `port`, as [`Context::query_port`] reports it, from one
    /// command (QUERY_NIC_VPORT_CONTEXT): without the port's state and GID table,
    /// which `query_port` reads with a command per GID entry. A QP's modify checks
    /// its path MTU against it.
    pub fn active_mtu(&self, port: u8) -> Result<Mtu> {
        self.check_port(port)?;
        let vctx = self.lock()?.exec(
            &cmd_in(op::QUERY_NIC_VPORT_CONTEXT, 0, 16),
            prm::query_nic_vport_context_out::SIZE,
        )?;
        Ok(vport_mtus(&vctx).1)
    }

    /// Sets the port's Ethernet MTU to `eth_mtu` bytes, what `ip link set mtu` does to a
    /// ConnectX through mlx5_core (`mlx5_modify_nic_vport_mtu`: MODIFY_NIC_VPORT_CONTEXT
    /// with `field_select.mtu`, the vport MTU counting the Ethernet header, a VLAN tag
    /// and the FCS, 22 bytes more): the port's `active_mtu` becomes
    /// [`Mtu::for_ethernet`] of it.
    pub fn set_ethernet_mtu(&self, eth_mtu: u16) -> Result<()> {
        use prm::{
            modify_nic_vport_context_in as m, modify_nic_vport_field_select as fs,
            nic_vport_context as v,
        };
        let mut input = cmd_in(op::MODIFY_NIC_VPORT_CONTEXT, 0, m::SIZE);
        fs::mtu.at(m::field_select.bit).set(&mut input, 1);
        v::mtu
            .at(m::nic_vport_context.bit)
            .set(&mut input, u64::from(eth_mtu) + 14 + 4 + 4);
        self.lock()?.exec(&input, 16).map(|_| ())
    }

    /// The port's operational state alone (`QUERY_VPORT_STATE`, one command): what
    /// changes when its link goes down or up, for callers that keep the rest of
    /// [`Context::query_port`].
    pub fn port_state(&self, port: u8) -> Result<PortState> {
        self.check_port(port)?;
        let st = self
            .lock()?
            .exec(&cmd_in(op::QUERY_VPORT_STATE, 0, 16), 16)?;
        Ok(port_state_of(&st))
    }

    /// Port attributes: `QUERY_VPORT_STATE`, `QUERY_NIC_VPORT_CONTEXT` and the GID
    /// table through `QUERY_ROCE_ADDRESS`.
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        self.check_port(port)?;
        let mut hca = self.lock()?;
        let st = hca.exec(&cmd_in(op::QUERY_VPORT_STATE, 0, 16), 16)?;
        let vctx = hca.exec(
            &cmd_in(op::QUERY_NIC_VPORT_CONTEXT, 0, 16),
            prm::query_nic_vport_context_out::SIZE,
        )?;
        let mut gids = Vec::new();
        if self.caps.roce_cur.is_some() {
            for index in 0..self.gid_table_len().min(u32::from(u16::MAX)) as u16 {
                let e = query_gid_locked(&mut hca, &self.caps, index)?;
                if !e.is_empty() {
                    gids.push(e);
                }
            }
        }
        drop(hca);
        let (vport_mtu, active_mtu) = vport_mtus(&vctx);
        let state = port_state_of(&st);
        let ctx = prm::query_nic_vport_context_out::nic_vport_context.bit;
        let mac_field = prm::nic_vport_context::permanent_address.at(ctx).get(&vctx);
        let m = mac_field.to_be_bytes();
        Ok(PortAttr {
            state,
            admin_state: prm::query_vport_state_out::admin_state.get(&st) as u8,
            max_mtu: Mtu::Mtu4096,
            active_mtu,
            vport_mtu,
            gid_tbl_len: self.gid_table_len(),
            max_msg_sz: pow2(self.caps.gen(prm::cmd_hca_cap::log_max_msg)),
            link_layer: self.link_layer(),
            mac: [m[2], m[3], m[4], m[5], m[6], m[7]],
            gids,
        })
    }

    /// One GID table entry (`QUERY_ROCE_ADDRESS`).
    pub fn query_gid(&self, port: u8, index: u16) -> Result<GidEntry> {
        self.check_port(port)?;
        let mut hca = self.lock()?;
        query_gid_locked(&mut hca, &self.caps, index)
    }

    /// Programs one GID table entry (`SET_ROCE_ADDRESS`); teardown clears it.
    pub fn set_gid(&self, port: u8, entry: GidEntry) -> Result<()> {
        self.check_port(port)?;
        self.lock()?.set_gid(&entry)
    }

    /// Clears one GID table entry.
    pub fn clear_gid(&self, port: u8, index: u16) -> Result<()> {
        self.check_port(port)?;
        self.lock()?.clear_gid(index)
    }

    /// Tears the device down: destroys what bring-up created, takes back every
    /// firmware page, disables the HCA and unmaps all DMA memory. Everything is
    /// unmapped even when a step fails; the first failure is returned.
    pub fn close(mut self) -> Result<()> {
        self.closed = true;
        let r = self.lock_any().shutdown();
        tracing::info!(ok = r.is_ok(), "device closed");
        r
    }
}

/// The operational state in a `QUERY_VPORT_STATE` output.
fn port_state_of(st: &[u8]) -> PortState {
    match prm::query_vport_state_out::state.get(st) as u8 {
        0 => PortState::Down,
        1 => PortState::Active,
        v => PortState::Other(v),
    }
}

/// The vport MTU and the active (IB) MTU it gives, from a QUERY_NIC_VPORT_CONTEXT
/// output: ETH_HLEN + VLAN_HLEN + ETH_FCS_LEN lie between the hardware and the
/// software MTU.
fn vport_mtus(vctx: &[u8]) -> (u16, Mtu) {
    let ctx = prm::query_nic_vport_context_out::nic_vport_context.bit;
    let vport_mtu = prm::nic_vport_context::mtu.at(ctx).get(vctx) as u16;
    let eth_mtu = u32::from(vport_mtu).saturating_sub(14 + 4 + 4);
    (vport_mtu, Mtu::for_ethernet(eth_mtu))
}

fn query_gid_locked<B: Bus>(hca: &mut Hca<B>, caps: &Caps, index: u16) -> Result<GidEntry> {
    let mut input = cmd_in(op::QUERY_ROCE_ADDRESS, 0, 16);
    prm::query_roce_address_in::roce_address_index.set(&mut input, u64::from(index));
    if caps.gen(prm::cmd_hca_cap::num_vhca_ports) > 0 {
        prm::query_roce_address_in::vhca_port_num.set(&mut input, 1);
    }
    let out = hca.exec(&input, prm::query_roce_address_out::SIZE)?;
    Ok(GidEntry::decode(
        index,
        &out,
        prm::query_roce_address_out::roce_address.bit,
    ))
}

impl<B: Bus> Drop for Context<B> {
    fn drop(&mut self) {
        if !self.closed {
            if let Err(e) = self.lock_any().shutdown() {
                tracing::warn!(error = %e, "teardown on drop was incomplete");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_mtu_from_the_environment_is_one_of_the_five_and_fits_its_ethernet_mtu() {
        assert_eq!(Mtu::from_env(None), Ok(None));
        assert_eq!(Mtu::from_env(Some(" ")), Ok(None));
        assert_eq!(Mtu::from_env(Some("4096")), Ok(Some(Mtu::Mtu4096)));
        assert_eq!(Mtu::from_env(Some(" 256 ")), Ok(Some(Mtu::Mtu256)));
        for bad in ["1500", "0", "-1", "4k"] {
            let e = Mtu::from_env(Some(bad)).unwrap_err();
            assert!(e.starts_with(bad) && e.contains("expected 256"), "{e}");
        }
        for m in [
            Mtu::Mtu256,
            Mtu::Mtu512,
            Mtu::Mtu1024,
            Mtu::Mtu2048,
            Mtu::Mtu4096,
        ] {
            assert_eq!(Mtu::from_bytes(m.bytes()), Some(m));
            assert_eq!(Mtu::for_ethernet(m.ethernet_mtu()), m);
        }
        // The simulator's 1500 gives 1024, as `iboe_get_mtu` does.
        assert_eq!(Mtu::for_ethernet(1500), Mtu::Mtu1024);
    }

    #[test]
    fn mtus_of_their_ib_encoding() {
        for (v, bytes) in [(1, 256), (2, 512), (3, 1024), (4, 2048), (5, 4096)] {
            let m = Mtu::from_ib(v).unwrap();
            assert_eq!((m as u32, m.bytes()), (v, bytes));
        }
        assert_eq!(Mtu::from_ib(0), None);
        assert_eq!(Mtu::from_ib(6), None);
    }

    #[test]
    fn gid_entries_round_trip_through_roce_addr_layout() {
        let mut g = GidEntry::ipv4(3, [192, 168, 1, 7], [0x02, 0, 0, 0xaa, 0xbb, 0xcc]);
        g.vlan = Some(100);
        let mut buf = vec![0u8; 48];
        g.encode(&mut buf, 128);
        assert_eq!(
            &buf[16..32],
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 7]
        );
        // vlan_valid at bit 131, vlan_id 132..144, mac 144..192, l3 type, version.
        assert_eq!(
            &buf[32..40],
            &[0x10, 0x64, 0x02, 0x00, 0x00, 0xaa, 0xbb, 0xcc]
        );
        assert_eq!(buf[16 + 0x1a] & 0x0f, 0, "IPv4");
        assert_eq!(buf[16 + 0x1b], 2, "RoCE v2");
        assert_eq!(GidEntry::decode(3, &buf, 128), g);
        assert!(GidEntry::decode(0, &[0u8; 48], 128).is_empty());
    }

    #[test]
    fn a_context_can_be_shared_between_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<Context<ferroverbs_hw::MemBus>>();
        shareable::<DeviceConfig>();
    }

    #[test]
    fn mtu_from_ethernet() {
        assert_eq!(Mtu::for_ethernet(1500), Mtu::Mtu1024);
        assert_eq!(Mtu::for_ethernet(9000), Mtu::Mtu4096);
        assert_eq!(Mtu::for_ethernet(2200), Mtu::Mtu2048);
        assert_eq!(Mtu::for_ethernet(0), Mtu::Mtu256);
        assert_eq!(Mtu::Mtu4096.bytes(), 4096);
    }

    #[test]
    fn config_is_validated() {
        let c = DeviceConfig::default()
            .with_gid(GidEntry::ipv4(0, [1, 2, 3, 4], [0; 6]))
            .with_gid(GidEntry::ipv4(0, [1, 2, 3, 5], [0; 6]));
        assert!(c.validate().is_err());
        assert!(DeviceConfig::default().validate().is_ok());
    }
}

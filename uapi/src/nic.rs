//! The device behind `/dev/infiniband/uverbs0`, brought up by the driver the first
//! time the file is opened and kept for the life of the process: a simulated
//! ConnectX in this process, in threaded mode, on the UDP link (RoCE v2 over real
//! UDP datagrams), or a ConnectX behind VFIO.
//!
//! `FERROVERBS_DEVICE` selects it: `sim` (`127.0.0.1`, UDP port 4791), `sim:A.B.C.D` or
//! `sim:A.B.C.D:PORT` (both sides of a pair use the same port), or `vfio:BDF` (with
//! [`VFIO_IPV4_ENV`], the address of its RoCE GID).
//!
//! Next to the driver's context it holds what `mlx5_ib` keeps per device: one UAR
//! for the doorbells of every user context (on the simulator, the BAR page the
//! doorbell thread rings, see [`crate::doorbell`]; over VFIO, the BAR page itself,
//! mapped into the program as `mlx5_ib_mmap` maps it), and one completion EQ (a
//! driver completion channel) to which every user CQ reports, whose events a thread
//! routes to the application's completion channels ([`crate::events`]).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, Mutex};

use ferroverbs::verbs::CompletionChannel;
use ferroverbs::vfio::{VfioBus, VfioConfig};
use ferroverbs::{Context, DeviceAttr, DeviceConfig, DeviceSpec, GidEntry, PortAttr};
use ferroverbs_hw::control::caps::cmd_hca_cap as g;
use ferroverbs_hw::Bus;
use ferroverbs_sim::link::udp::{mac_for, UdpConfig, UdpLink};
use ferroverbs_sim::{Sim, SimBus};

/// Either bus: the simulator's or VFIO's.
pub type NicBus = ferroverbs::AnyBus<SimBus>;

/// The environment variable that selects the device.
pub const DEVICE_ENV: &str = "FERROVERBS_DEVICE";
/// The environment variable with the IPv4 address of a VFIO NIC (its GID 0).
pub use ferroverbs::vfio::VFIO_IPV4_ENV;
/// The environment variable that sets the shortest ACK timeout exponent of RC QPs.
pub const MIN_ACK_TIMEOUT_ENV: &str = "FERROVERBS_MIN_ACK_TIMEOUT";
/// The environment variable that sets the RoCE MTU the simulated NIC's port reports
/// (256 ... 4096, [`ferroverbs::Mtu::from_env`]), as the drop-in's; unset, the
/// simulator's Ethernet MTU of 1500 gives 1024.
pub const MTU_ENV: &str = "FERROVERBS_MTU";

/// The process's NIC, brought up.
pub struct Nic {
    /// The driver context (leaked: it lives as long as the process).
    pub ctx: &'static Context<NicBus>,
    /// The simulated device (its device thread and wire); `None` over VFIO.
    pub sim: Option<Sim>,
    /// Its UDP link; `None` over VFIO.
    pub link: Option<UdpLink>,
    /// Its IPv4 address (GID 0).
    pub ipv4: Ipv4Addr,
    /// Its MAC (GID 0's).
    pub mac: [u8; 6],
    /// Device attributes, queried once.
    pub dev: DeviceAttr,
    /// Port 1, queried once.
    pub port: PortAttr,
    /// The UAR of every user context's doorbells.
    pub uar: u32,
    /// The EQ of every user CQ's completion events.
    pub channel: CompletionChannel<'static, NicBus>,
    /// The shortest local ACK timeout exponent RC QPs get (0: none).
    pub min_ack_timeout: u8,
    /// `cqe_version` the device supports.
    pub cqe_version: u8,
}

impl Nic {
    /// A general capability.
    pub fn cap(&self, f: ferroverbs_hw::Field) -> u64 {
        self.ctx.cap(f)
    }

    /// `1 << log_bf_reg_size` on the simulator; 0 over VFIO, where this layer offers
    /// no BlueFlame: every context's UAR pages are the NIC's one UAR page, so two
    /// contexts' BlueFlame registers would be one, and vfio-pci maps the BAR
    /// uncached, where a BlueFlame copy is 8 writes per WQEBB. Linux's
    /// `set_ucontext_resp` reports 0 likewise when its write-combining test fails;
    /// libmlx5 then rings every doorbell with one 8-byte store.
    pub fn bf_reg_size(&self) -> u32 {
        if self.sim.is_some() && self.ctx.bus().blueflame() {
            1 << self.cap(g::log_bf_reg_size).min(12)
        } else {
            0
        }
    }

    /// The VFIO bus, when the NIC is a ConnectX behind VFIO.
    pub fn vfio(&self) -> Option<&VfioBus> {
        match &**self.ctx.bus() {
            ferroverbs::AnyBus::Vfio(b) => Some(b),
            ferroverbs::AnyBus::Sim(_) => None,
        }
    }

    /// The MAC of the RoCE peer at `ip`: on the simulated link, the one its address
    /// gives (`mac_for`); over VFIO, the host's neighbour table's
    /// ([`ferroverbs::neighbour`]), else ETIMEDOUT (what Linux's
    /// `rdma_addr_find_l2_eth_by_grh` returns when the neighbour stays unresolved
    /// for its 1 s; here nothing sends the ARP request that would resolve it).
    pub fn dmac(&self, ip: Ipv4Addr) -> Result<[u8; 6], crate::Errno> {
        if self.sim.is_some() {
            return Ok(mac_for(ip));
        }
        ferroverbs::neighbour::arp_mac(ip).ok_or(crate::Errno::ETIMEDOUT)
    }

    fn open() -> Result<Nic, String> {
        let spec: DeviceSpec = match std::env::var(DEVICE_ENV) {
            Ok(s) if !s.trim().is_empty() => s.parse().map_err(|e| format!("{DEVICE_ENV}: {e}"))?,
            _ => DeviceSpec::default(),
        };
        let mtu = ferroverbs::Mtu::from_env(std::env::var(MTU_ENV).ok().as_deref())
            .map_err(|e| format!("{MTU_ENV}={e}"))?;
        let sa = match spec {
            DeviceSpec::Sim => SocketAddrV4::new(Ipv4Addr::LOCALHOST, DeviceSpec::ROCEV2_PORT),
            DeviceSpec::SimUdp(a) => a,
            DeviceSpec::Vfio(bdf) => {
                let ip = ferroverbs::vfio::vfio_ipv4(std::env::var(VFIO_IPV4_ENV).ok().as_deref())?;
                let bus = VfioBus::open(&bdf, &VfioConfig::default())
                    .map_err(|e| format!("cannot open vfio:{bdf}: {e}"))?;
                let ctx = ferroverbs::Device::open(NicBus::Vfio(bus), DeviceConfig::default())
                    .map_err(|e| format!("bring-up of vfio:{bdf} failed: {e}"))?;
                let mac = ctx
                    .query_port(1)
                    .map_err(|e| format!("QUERY_PORT failed: {e}"))?
                    .mac;
                ctx.set_gid(1, GidEntry::ipv4(0, ip.octets(), mac))
                    .map_err(|e| format!("SET_ROCE_ADDRESS of {ip} on vfio:{bdf} failed: {e}"))?;
                // No floor under the ACK timeout on hardware, as the drop-in's.
                return Nic::finish(ctx, None, None, ip, mac, mtu, 0);
            }
        };
        let min_ack_timeout = match std::env::var(MIN_ACK_TIMEOUT_ENV) {
            Ok(s) if !s.trim().is_empty() => s
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|v| *v <= 31)
                .ok_or_else(|| format!("{MIN_ACK_TIMEOUT_ENV}={s}: expected 0 to 31"))?,
            // As the drop-in: 1.07 s, so that a peer process waiting for a CPU on a
            // loaded machine does not exhaust the retries of an RC QP.
            _ => 18,
        };
        let (addr, port) = (*sa.ip(), sa.port());
        let cfg = UdpConfig::new(addr).port(port);
        let sim = Sim::new(cfg.sim_config(true));
        let link = UdpLink::attach(&sim, cfg)
            .map_err(|e| format!("cannot attach the simulated NIC at {addr}:{port}: {e}"))?;
        let clock = sim.clock().clone();
        let config = DeviceConfig::default()
            .with_clock(Arc::new(ferroverbs::SteppedClock::new(
                {
                    let c = clock.clone();
                    move || c.now()
                },
                move |d| clock.advance(d),
            )))
            .with_gid(GidEntry::ipv4(0, addr.octets(), mac_for(addr)));
        let ctx = ferroverbs::Device::open(NicBus::Sim(sim.bus()), config)
            .map_err(|e| format!("bring-up of the simulated NIC failed: {e}"))?;
        Nic::finish(
            ctx,
            Some(sim),
            Some(link),
            addr,
            mac_for(addr),
            mtu,
            min_ack_timeout,
        )
    }

    /// The rest of the bring-up, on either bus: the MTU, the queries, the UAR and
    /// the completion EQ.
    fn finish(
        ctx: Context<NicBus>,
        sim: Option<Sim>,
        link: Option<UdpLink>,
        ipv4: Ipv4Addr,
        mac: [u8; 6],
        mtu: Option<ferroverbs::Mtu>,
        min_ack_timeout: u8,
    ) -> Result<Nic, String> {
        if let Some(m) = mtu {
            ctx.set_ethernet_mtu(m.ethernet_mtu() as u16)
                .map_err(|e| format!("setting the NIC's MTU failed: {e}"))?;
        }
        let ctx: &'static Context<NicBus> = Box::leak(Box::new(ctx));
        let dev = ctx
            .query_device()
            .map_err(|e| format!("QUERY_DEVICE failed: {e}"))?;
        let port_attr = ctx
            .query_port(1)
            .map_err(|e| format!("QUERY_PORT failed: {e}"))?;
        let out = ctx
            .exec_cmd(
                &ferroverbs_hw::control::cmd::new_input(
                    ferroverbs_hw::control::cmd::Opcode::AllocUar,
                    0,
                    16,
                ),
                ferroverbs_hw::control::uar_pd_td::alloc_uar_out::SIZE,
            )
            .map_err(|e| format!("ALLOC_UAR failed: {e}"))?;
        let uar = ferroverbs_hw::control::uar_pd_td::alloc_uar_out::uar.get(&out) as u32;
        let channel = ctx
            .create_comp_channel()
            .map_err(|e| format!("the completion EQ: {e}"))?;
        let cqe_version = ctx.cap(g::cqe_version).min(1) as u8;
        Ok(Nic {
            ctx,
            sim,
            link,
            ipv4,
            mac,
            dev,
            port: port_attr,
            uar,
            channel,
            min_ack_timeout,
            cqe_version,
        })
    }
}

static NIC: Mutex<Option<Result<&'static Nic, String>>> = Mutex::new(None);

/// The simulated NIC once it is up (read without a lock by [`end_assist`]).
static UP_SIM: std::sync::OnceLock<&'static Sim> = std::sync::OnceLock::new();

/// A thread of the program is about to block in a completion channel's `read`: the
/// simulated device's thread, napping while the program's empty polls did its work,
/// carries the traffic again at once ([`Sim::end_assist`]). Nothing before the NIC
/// is up, nothing over VFIO; no lock.
pub fn end_assist() {
    if let Some(sim) = UP_SIM.get() {
        sim.end_assist();
    }
}

/// The NIC, brought up on first use (with the event and doorbell threads). A failed
/// bring-up is reported on stderr once and then remembered.
pub fn nic() -> Result<&'static Nic, String> {
    let mut g = NIC.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(r) = &*g {
        return r.clone();
    }
    let r = Nic::open().map(|n| &*Box::leak(Box::new(n)));
    match &r {
        Ok(n) => {
            if let Some(sim) = &n.sim {
                let _ = UP_SIM.set(sim);
            }
            crate::events::start(n);
            // Over VFIO the program's stores reach the BAR itself: no doorbell
            // thread, and no device thread to give the CPU to.
            if n.sim.is_some() {
                crate::doorbell::start(n);
            }
            crate::clock::set_nic(n);
            if std::env::var_os(STATS_ENV).is_some() {
                // SAFETY: registers a function of this library (which stays loaded)
                // without arguments, run at exit.
                unsafe { libc::atexit(print_stats) };
            }
            if n.sim.is_some() {
                lower_caller_priority();
            }
        }
        Err(e) => eprintln!("ferroverbs-uapi: {e}"),
    }
    *g = Some(r.clone());
    r
}

/// The environment variable that asks for a line of the NIC's wire counters on
/// stderr at exit (as the drop-in prints one when the device is closed).
pub const STATS_ENV: &str = "FERROVERBS_STATS";

extern "C" fn print_stats() {
    if let Some(Ok(n)) = NIC.try_lock().ok().and_then(|g| g.clone()) {
        if let (Some(sim), Some(link)) = (&n.sim, &n.link) {
            eprintln!("ferroverbs-uapi: {}", link.summary(sim));
        }
    }
}

/// The environment variable with the nice value the application's thread takes once
/// the device threads run (default [`APP_NICE`]; 0 leaves it).
pub const APP_NICE_ENV: &str = "FERROVERBS_APP_NICE";
/// A ConnectX runs beside the CPU; the simulated one shares it with an application
/// that busy-polls its CQs in memory (libmlx5), and the device's threads only get a
/// CPU by preempting it. Lowering the application thread's priority (nice, which an
/// unprivileged process may raise) makes the scheduler run the device's threads when
/// they wake, instead of at the end of the poller's time slice.
pub const APP_NICE: i32 = 10;

fn lower_caller_priority() {
    let nice = std::env::var(APP_NICE_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<i32>().ok())
        .unwrap_or(APP_NICE)
        .clamp(0, 19);
    if nice == 0 {
        return;
    }
    // SAFETY: plain syscalls on the calling thread.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        let cur = libc::getpriority(libc::PRIO_PROCESS, tid);
        libc::setpriority(libc::PRIO_PROCESS, tid, (cur + nice).min(19));
    }
}

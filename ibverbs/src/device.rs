//! The device behind the library: which NIC the environment names, and the process-wide
//! driver context opened on it.
//!
//! `FERROVERBS_DEVICE` selects it:
//!
//! * `sim:A.B.C.D` (the default, `sim:127.0.0.1`): a simulated ConnectX in this
//!   process, in threaded mode (its device thread answers the wire without any verb
//!   call: RC ACKs, RDMA WRITE placement, READ responses, atomics), attached to the UDP
//!   link on `A.B.C.D:4791` (RoCE v2 over real UDP datagrams). GID 0 is `::ffff:A.B.C.D`,
//!   type RoCE v2. Two processes talk when each has its own address (127.0.0.1 and
//!   127.0.0.2: Linux routes all of 127/8 to `lo`). `sim:A.B.C.D:PORT` uses another
//!   UDP port (both sides must use the same).
//! * `vfio:DDDD:BB:DD.F`: a ConnectX bound to `vfio-pci`, driven by ferroverbs.
//!
//! `FERROVERBS_DEVICE_NAME` overrides the device name (default `ferroverbs0`).
//!
//! The NIC is brought up by the first `ibv_open_device` and then stays up for the life
//! of the process (its UDP socket stays bound); every `ibv_open_device` shares it.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, Mutex};

use ferroverbs::vfio::{PciAddress, VfioBus, VfioConfig};
use ferroverbs::{Context, Device, DeviceConfig, GidEntry};
use ferroverbs_sim::link::udp::{mac_for, UdpConfig, UdpLink};
use ferroverbs_sim::{Sim, SimBus};

/// The environment variable that selects the device.
pub const DEVICE_ENV: &str = "FERROVERBS_DEVICE";
/// The environment variable that names the device.
pub const NAME_ENV: &str = "FERROVERBS_DEVICE_NAME";

pub use ferroverbs::DeviceSpec;

/// The device the environment selects ([`DeviceSpec`]'s syntax; unset or empty:
/// `sim`).
pub fn spec_from_env() -> Result<DeviceSpec, String> {
    match std::env::var(DEVICE_ENV) {
        Ok(s) if !s.trim().is_empty() => s.parse().map_err(|e| format!("{e}")),
        _ => Ok(DeviceSpec::default()),
    }
}

/// What the library opens for `spec`: a simulated NIC on the UDP link at this address
/// (`sim` is `sim:127.0.0.1`, port 4791), or a ConnectX at this PCI address.
fn sim_or_vfio(spec: &DeviceSpec) -> Result<SocketAddrV4, PciAddress> {
    match *spec {
        DeviceSpec::Sim => Ok(SocketAddrV4::new(
            Ipv4Addr::LOCALHOST,
            DeviceSpec::ROCEV2_PORT,
        )),
        DeviceSpec::SimUdp(a) => Ok(a),
        DeviceSpec::Vfio(bdf) => Err(bdf),
    }
}

/// The UDP link address of a simulated NIC: `sim` is `sim:127.0.0.1` (port 4791).
pub fn sim_addr(spec: &DeviceSpec) -> Option<SocketAddrV4> {
    sim_or_vfio(spec).ok()
}

/// The node GUID shown before the device is opened: the EUI-64 of the simulated NIC's
/// MAC, or one derived from the PCI address.
pub fn guid(spec: &DeviceSpec) -> u64 {
    let mac = match sim_or_vfio(spec) {
        Ok(a) => mac_for(*a.ip()),
        Err(bdf) => {
            let h = bdf
                .to_string()
                .bytes()
                .fold(0u32, |h, b| h.rotate_left(5) ^ u32::from(b));
            let b = h.to_be_bytes();
            [0x02, 0xc9, b[0], b[1], b[2], b[3]]
        }
    };
    u64::from_be_bytes(ferroverbs_hw::control::roce::eui64(mac))
}

/// The device name: `FERROVERBS_DEVICE_NAME`, or `ferroverbs0`.
pub fn device_name() -> String {
    std::env::var(NAME_ENV)
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "ferroverbs0".to_string())
}

/// Either bus, the simulator's or VFIO's: the driver's [`ferroverbs::AnyBus`], shared
/// with the uAPI layer.
pub type AnyBus = ferroverbs::AnyBus<SimBus>;

/// The NIC of this process, brought up.
pub struct Nic {
    /// The driver context.
    pub ctx: Context<AnyBus>,
    /// What was opened.
    pub spec: DeviceSpec,
    /// The simulated device (kept alive with its device thread).
    pub sim: Option<Sim>,
    /// The UDP link of the simulated device.
    pub link: Option<UdpLink>,
    /// The shortest local ACK timeout exponent its RC QPs get
    /// (`min_ack_timeout_from_env` on a simulated NIC, 0, no floor, on hardware).
    pub min_ack_timeout: u8,
}

impl Nic {
    /// The IPv4 address of a simulated NIC.
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        sim_addr(&self.spec).map(|a| *a.ip())
    }

    /// A summary of the simulated NIC's wire and data path counters (link datagrams,
    /// drops, NAKs, retransmits, impairments), for `FERROVERBS_STATS=1`.
    pub fn stats(&self) -> Option<String> {
        let (sim, link) = (self.sim.as_ref()?, self.link.as_ref()?);
        Some(link.summary(sim))
    }

    fn open(spec: &DeviceSpec) -> Result<Nic, String> {
        match sim_or_vfio(spec) {
            Ok(sa) => {
                let (addr, port) = (sa.ip(), sa.port());
                let min_ack_timeout = min_ack_timeout_from_env()?;
                let cfg = UdpConfig::new(*addr).port(port);
                let sim = Sim::new(cfg.sim_config(true));
                let link = UdpLink::attach(&sim, cfg).map_err(|e| {
                    format!("cannot attach the simulated NIC at {addr}:{port}: {e}")
                })?;
                let clock = sim.clock().clone();
                let config = DeviceConfig::default()
                    .with_clock(Arc::new(ferroverbs::SteppedClock::new(
                        {
                            let c = clock.clone();
                            move || c.now()
                        },
                        move |d| clock.advance(d),
                    )))
                    .with_gid(GidEntry::ipv4(0, addr.octets(), mac_for(*addr)));
                let ctx = Device::open(AnyBus::Sim(sim.bus()), config)
                    .map_err(|e| format!("bring-up of the simulated NIC failed: {e}"))?;
                if let Some(mtu) = mtu_from_env()? {
                    ctx.set_ethernet_mtu(mtu.ethernet_mtu() as u16)
                        .map_err(|e| format!("setting the simulated NIC's MTU failed: {e}"))?;
                }
                Ok(Nic {
                    ctx,
                    spec: *spec,
                    sim: Some(sim),
                    link: Some(link),
                    min_ack_timeout,
                })
            }
            Err(bdf) => {
                let bus = VfioBus::open(&bdf, &VfioConfig::default())
                    .map_err(|e| format!("cannot open vfio:{bdf}: {e}"))?;
                let ctx = Device::open(AnyBus::Vfio(bus), DeviceConfig::default())
                    .map_err(|e| format!("bring-up of vfio:{bdf} failed: {e}"))?;
                Ok(Nic {
                    ctx,
                    spec: *spec,
                    sim: None,
                    link: None,
                    min_ack_timeout: 0,
                })
            }
        }
    }
}

/// The environment variable that sets the shortest ACK timeout of a simulated NIC's
/// QPs.
pub const MIN_ACK_TIMEOUT_ENV: &str = "FERROVERBS_MIN_ACK_TIMEOUT";

/// `FERROVERBS_MIN_ACK_TIMEOUT` ([`parse_min_ack_timeout`]), read when the simulated
/// NIC is brought up.
fn min_ack_timeout_from_env() -> Result<u8, String> {
    parse_min_ack_timeout(std::env::var(MIN_ACK_TIMEOUT_ENV).ok().as_deref())
}

/// The shortest local ACK timeout exponent a QP on a simulated NIC gets: the value of
/// `FERROVERBS_MIN_ACK_TIMEOUT` (0 to 31, the 5 bits of the QP context's
/// `ack_timeout`; 0 leaves the application's value as it is), or, unset or empty,
/// [`SIM_MIN_ACK_TIMEOUT`](crate::convert::SIM_MIN_ACK_TIMEOUT) (18). A test whose
/// tools cannot set the timeout (`ibv_rc_pingpong` always asks for 14) raises it so
/// that its peers may wait longer for a CPU (23: 34 s per expiry).
pub fn parse_min_ack_timeout(v: Option<&str>) -> Result<u8, String> {
    let Some(v) = v.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(crate::convert::SIM_MIN_ACK_TIMEOUT);
    };
    v.parse::<u8>().ok().filter(|&t| t <= 31).ok_or_else(|| {
        format!(
            "{MIN_ACK_TIMEOUT_ENV}={v}: expected an ACK timeout exponent from 0 to 31 \
             (4.096 us x 2^n)"
        )
    })
}

/// The environment variable that sets the RoCE MTU of a simulated NIC.
pub const MTU_ENV: &str = "FERROVERBS_MTU";

/// `FERROVERBS_MTU` ([`ferroverbs::Mtu::from_env`]): the RoCE MTU the simulated NIC's
/// port reports, set as its Ethernet MTU; unset, the simulator's 1500 (`active_mtu`
/// 1024).
fn mtu_from_env() -> Result<Option<ferroverbs::Mtu>, String> {
    ferroverbs::Mtu::from_env(std::env::var(MTU_ENV).ok().as_deref())
        .map_err(|e| format!("{MTU_ENV}={e}"))
}

static NIC: Mutex<Option<&'static Nic>> = Mutex::new(None);

/// The NIC of this process: brought up on first use, then shared for the life of the
/// process (it is never torn down: its objects may be referenced until exit).
pub fn nic() -> Result<&'static Nic, String> {
    let mut g = NIC.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = *g {
        return Ok(n);
    }
    let spec = spec_from_env()?;
    let n: &'static Nic = Box::leak(Box::new(Nic::open(&spec)?));
    *g = Some(n);
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sim_is_the_udp_link_at_localhost() {
        let a = |s: &str| sim_addr(&s.parse().unwrap());
        assert_eq!(a("sim"), Some("127.0.0.1:4791".parse().unwrap()));
        assert_eq!(a("sim:127.0.0.2"), Some("127.0.0.2:4791".parse().unwrap()));
        assert_eq!(
            a("sim:10.1.2.3:5000"),
            Some("10.1.2.3:5000".parse().unwrap())
        );
        assert_eq!(a("vfio:0000:3b:00.0"), None);
    }

    #[test]
    fn the_ack_timeout_floor_of_the_environment() {
        assert_eq!(parse_min_ack_timeout(None), Ok(18));
        assert_eq!(parse_min_ack_timeout(Some("")), Ok(18));
        assert_eq!(parse_min_ack_timeout(Some("23")), Ok(23));
        assert_eq!(parse_min_ack_timeout(Some(" 0 ")), Ok(0));
        assert_eq!(parse_min_ack_timeout(Some("31")), Ok(31));
        for bad in ["32", "-1", "x", "18s"] {
            let e = parse_min_ack_timeout(Some(bad)).unwrap_err();
            assert!(
                e.contains(MIN_ACK_TIMEOUT_ENV) && e.contains("0 to 31"),
                "{e}"
            );
        }
    }

    #[test]
    fn guid_is_the_eui64_of_the_mac() {
        let s: DeviceSpec = "sim:127.0.0.2".parse().unwrap();
        // MAC 02:00:7f:00:00:02 -> 00:00:7f:ff:fe:00:00:02.
        assert_eq!(guid(&s), 0x0000_7fff_fe00_0002);
        assert_eq!(guid(&DeviceSpec::Sim), 0x0000_7fff_fe00_0001);
        // MAC 02:c9 + a hash of the PCI address's kernel spelling `0000:3b:00.0`.
        assert_eq!(
            guid(&"vfio:0000:3b:00.0".parse().unwrap()),
            0x00c9_1fff_fe7e_f42c
        );
    }
}

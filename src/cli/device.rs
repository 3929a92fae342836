//! Opening the device a command names: the embedded simulator (`sim`) or a ConnectX
//! behind VFIO (`vfio:BDF`). Every failure here is a setup error (exit code 3) whose
//! message is the driver's, which names the fix.

use std::net::SocketAddrV4;
use std::path::Path;

use ferroverbs::vfio::{PciAddress, VfioBus, VfioConfig, VfioDeviceInfo};
use ferroverbs::{Context, Device, DeviceConfig, GidEntry};
use ferroverbs_hw::control::roce::eui64;
use ferroverbs_sim::{Sim, SimBus, SimConfig};

use super::error::CliError;

/// The PCI device id the simulator models (ConnectX-5, `0x1017`): its
/// `vendor_part_id`.
pub const SIM_PART_ID: u32 = 0x1017;

/// The GID table index of the IPv4 (RoCE v2) address the tool programs and uses.
pub const SIM_IPV4_GID_INDEX: u16 = 1;

/// A simulated NIC brought up by the driver.
pub struct SimNic {
    /// The simulated device.
    pub sim: Sim,
    /// The driver's context.
    pub ctx: Context<SimBus>,
    /// The name the tool shows (`sim0`, `sim1`).
    pub name: String,
    /// Its IPv4 address (in GID [`SIM_IPV4_GID_INDEX`]).
    pub ipv4: [u8; 4],
}

impl std::fmt::Debug for SimNic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimNic")
            .field("name", &self.name)
            .field("ipv4", &self.ipv4)
            .finish_non_exhaustive()
    }
}

/// The IPv4 address of simulated NIC `index`: 192.0.2.(index+1), in the
/// documentation range (RFC 5737), since it never leaves the process.
pub fn sim_ipv4(index: u8) -> [u8; 4] {
    [192, 0, 2, index.saturating_add(1)]
}

/// The modified EUI-64 link-local IPv6 address of a MAC (RFC 4291 appendix A).
pub fn link_local(mac: [u8; 6]) -> [u8; 16] {
    let mut a = [0; 16];
    a[..2].copy_from_slice(&[0xfe, 0x80]);
    a[8..].copy_from_slice(&eui64(mac));
    a
}

/// The simulator configuration of NIC `index` (one port, MAC derived from the index).
pub fn sim_config(index: u8) -> SimConfig {
    SimConfig::deterministic(0xfe77_0000 + u64::from(index), 1)
}

/// The driver configuration for a simulated NIC: GID 0 its link-local IPv6 address,
/// GID 1 its IPv4 address, both RoCE v2.
pub fn driver_config(mac: [u8; 6], ipv4: [u8; 4]) -> DeviceConfig {
    DeviceConfig::default()
        .with_gid(GidEntry::ipv6(0, link_local(mac), mac))
        .with_gid(GidEntry::ipv4(SIM_IPV4_GID_INDEX, ipv4, mac))
}

/// Creates simulated NIC `index` from `cfg` and brings it up.
pub fn open_sim_with(index: u8, cfg: SimConfig) -> Result<SimNic, CliError> {
    let sim = Sim::new(cfg);
    let mac = sim.with_firmware(|fw| fw.ports()[0].mac);
    let ipv4 = sim_ipv4(index);
    let name = format!("sim{index}");
    let (now, time) = (sim.clock().clone(), sim.clock().clone());
    let config = driver_config(mac, ipv4).with_clock(std::sync::Arc::new(
        ferroverbs::SteppedClock::new(move || now.now(), move |d| time.advance(d)),
    ));
    let ctx = Device::open(sim.bus(), config)
        .map_err(|e| CliError::setup(format!("cannot bring up the simulated device {name}"), e))?;
    Ok(SimNic {
        sim,
        ctx,
        name,
        ipv4,
    })
}

/// Creates simulated NIC `index` with the default configuration and brings it up.
pub fn open_sim(index: u8) -> Result<SimNic, CliError> {
    open_sim_with(index, sim_config(index))
}

/// A ConnectX opened through VFIO and brought up.
pub struct VfioNic {
    /// The driver's context.
    pub ctx: Context<VfioBus>,
    /// What VFIO found.
    pub info: VfioDeviceInfo,
    /// The PCI revision (`hw_ver`), from sysfs.
    pub revision: u32,
}

impl std::fmt::Debug for VfioNic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioNic")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// The PCI revision of `bdf` from sysfs (`hw_ver` in `ibv_devinfo`), 0 if unknown.
fn pci_revision(sysfs_root: &Path, bdf: &PciAddress) -> u32 {
    let p = sysfs_root
        .join("bus/pci/devices")
        .join(bdf.to_string())
        .join("revision");
    std::fs::read_to_string(p)
        .ok()
        .and_then(|s| u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok())
        .unwrap_or(0)
}

/// The answer to `--device sim:A.B.C.D[:PORT]` (the `libibverbs.so.1` form): this
/// tool's simulated NICs live in its own process; across processes it takes
/// `--server`/`--client` with `--ip` and `--udp-port`.
pub fn sim_udp_unsupported(addr: SocketAddrV4) -> CliError {
    CliError::unsupported(
        format!("--device sim:{addr}"),
        "the tool's simulated NICs are in its own process: use --device sim, and \
         --server/--client with --ip/--udp-port for a NIC on the UDP link",
    )
}

/// Opens `bdf` through VFIO and brings the device up.
pub fn open_vfio(bdf: &PciAddress) -> Result<VfioNic, CliError> {
    let cfg = VfioConfig::default();
    let bus = VfioBus::open(bdf, &cfg)
        .map_err(|e| CliError::setup(format!("cannot open vfio:{bdf}"), e))?;
    let info = bus.info().clone();
    let revision = pci_revision(Path::new("/sys"), bdf);
    let ctx = Device::open(bus, DeviceConfig::default())
        .map_err(|e| CliError::setup(format!("cannot bring up vfio:{bdf}"), e))?;
    Ok(VfioNic {
        ctx,
        info,
        revision,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(sim_ipv4(0), [192, 0, 2, 1]);
        assert_eq!(sim_ipv4(1), [192, 0, 2, 2]);
        let ll = link_local([0x02, 0x11, 0x22, 0x33, 0x44, 0x55]);
        assert_eq!(
            std::net::Ipv6Addr::from(ll).to_string(),
            "fe80::11:22ff:fe33:4455"
        );
    }

    #[test]
    fn a_simulated_nic_comes_up_with_its_gids() {
        let nic = open_sim(0).unwrap();
        let e = nic.ctx.query_gid(1, SIM_IPV4_GID_INDEX).unwrap();
        assert_eq!(&e.gid[12..], &[192, 0, 2, 1]);
        assert_eq!(nic.name, "sim0");
    }

    #[test]
    fn sysfs_revision() {
        let dir = std::env::temp_dir().join(format!("fv-rev-{}", std::process::id()));
        let bdf: PciAddress = "0000:3b:00.0".parse().unwrap();
        let d = dir.join("bus/pci/devices/0000:3b:00.0");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("revision"), "0x01\n").unwrap();
        assert_eq!(pci_revision(&dir, &bdf), 1);
        assert_eq!(pci_revision(&dir.join("nowhere"), &bdf), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

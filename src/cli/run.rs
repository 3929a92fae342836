//! `ferroverbs run [--device sim[:IPv4[:PORT]]|vfio:BDF] -- PROGRAM [ARGS]`: runs an
//! unmodified program on the system's rdma-core (libibverbs + libmlx5) with the
//! userspace RDMA interface of `uapi/` (`libferroverbs_uapi.so`) in front of it.
//!
//! It writes the sysfs tree libibverbs and libmlx5 read ([`write_sysfs`]) into a
//! temporary directory, and runs the program with `SYSFS_PATH` pointing at it,
//! `LD_PRELOAD` naming the library, and `FERROVERBS_DEVICE` naming the NIC; the tree
//! is removed when the program ends, and the program's exit status is the command's.
//! A ConnectX on VFIO is opened once before the program starts (its set-up errors
//! name the fix) for the MAC its sysfs entries show, with the address of
//! `FERROVERBS_VFIO_IPV4` as GID 0.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::net::Ipv4Addr;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ferroverbs::DeviceSpec;
use ferroverbs_sim::link::udp::mac_for;

use super::args::RunArgs;
use super::error::CliError;

/// The environment variable that names the preload library (default: found next to
/// the `ferroverbs` executable).
pub const LIB_ENV: &str = "FERROVERBS_UAPI_LIB";
/// The library's file name.
pub const LIB_NAME: &str = "libferroverbs_uapi.so";
/// The device name in sysfs (what `ibv_devinfo` shows as `hca_id`), as Linux names
/// the first mlx5 device.
pub const IBDEV: &str = "mlx5_0";
/// Entries of the GID table (the simulated device's `roce_address_table_size`).
pub const GID_TABLE_LEN: usize = 256;

/// Where the preload library is: `FERROVERBS_UAPI_LIB`, or next to this executable
/// ([`library_near`]).
pub fn library() -> Result<PathBuf, CliError> {
    if let Some(p) = std::env::var_os(LIB_ENV).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| CliError::setup("locating ferroverbs", e))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    library_near(dir).ok_or_else(|| {
        CliError::setup_msg(format!(
            "{LIB_NAME} not found next to {} (build it with `cargo build -p ferroverbs-uapi`, or \
             set {LIB_ENV})",
            exe.display()
        ))
    })
}

/// The library beside an executable in `dir`: of `dir/`, `dir/deps/` and `dir/..`,
/// the copy modified last (the first of them on a tie).
///
/// Cargo leaves two copies in a target directory: `deps/`, rebuilt whenever a build
/// needs the crate (`cargo test` builds it as a dev-dependency), and the copy
/// beside the executables, refreshed only when `ferroverbs-uapi` itself is built
/// (`cargo build -p ferroverbs-uapi`). Taking the first that exists loaded a stale
/// library under `cargo test` after a source change: the layer of an older commit
/// ran against the new tests (`tests/cm_libfabric.rs` saw ids bound to port 0 keep
/// port 0, and `fi_pingpong -e rdm` refuse the peer's address).
pub fn library_near(dir: &Path) -> Option<PathBuf> {
    let mut best: Option<(PathBuf, std::time::SystemTime)> = None;
    for d in [dir.to_path_buf(), dir.join("deps"), dir.join("..")] {
        let p = d.join(LIB_NAME);
        let Ok(m) = fs::metadata(&p) else {
            continue;
        };
        let t = m.modified().unwrap_or(std::time::UNIX_EPOCH);
        if best.as_ref().is_none_or(|(_, b)| t > *b) {
            best = Some((p, t));
        }
    }
    best.map(|(p, _)| p)
}

fn hex_groups(b: &[u8]) -> String {
    b.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c.get(1).copied().unwrap_or(0)))
        .collect::<Vec<_>>()
        .join(":")
}

fn put(root: &Path, rel: &str, text: &str) -> io::Result<()> {
    let p = root.join(rel);
    if let Some(d) = p.parent() {
        fs::create_dir_all(d)?;
    }
    fs::write(p, format!("{text}\n"))
}

/// What the sysfs tree says of the NIC.
#[derive(Clone, Copy, Debug)]
pub struct SysfsNic<'a> {
    /// The IPv4 address of GID 0.
    pub ip: Ipv4Addr,
    /// The port's MAC (the node GUID is its EUI-64).
    pub mac: [u8; 6],
    /// The PCI device id (libmlx5 claims the ConnectX ids of its table).
    pub pci_device: u16,
    /// `board_id`.
    pub board_id: &'a str,
    /// `node_desc`.
    pub node_desc: &'a str,
}

impl SysfsNic<'static> {
    /// The simulated ConnectX-5 (15b3:1017) at `ip`.
    pub fn simulated(ip: Ipv4Addr) -> Self {
        SysfsNic {
            ip,
            mac: mac_for(ip),
            pci_device: 0x1017,
            board_id: "FERROVERBS_SIM",
            node_desc: "ferroverbs simulated ConnectX-5",
        }
    }
}

/// The PCI function of the simulated device in the sysfs tree.
pub const PCI_DEVICE: &str = "devices/pci0000:00/0000:00:05.0";

/// Writes the sysfs tree of a simulated ConnectX-5 at `ip` under `root` (Linux's
/// layout, `rdma-core libibverbs/sysfs.c, init.c`; the PCI id 15b3:1017 in the
/// modalias is what libmlx5's table matches). `dev` is the `major:minor` of the
/// character device that stands in for `/dev/infiniband/uverbs0` (`/dev/null`).
///
/// As on Linux, `class/infiniband/mlx5_0` is a link to the device's directory below
/// its PCI function ([`PCI_DEVICE`]), whose `vendor` and `device` files give the PCI
/// id: UCX finds the function from the link's target (`realpath`, two components
/// up, `uct_ib_device_get_sysfs_path`) and offers its mlx5 transports only for the
/// ids of its ConnectX table.
pub fn write_sysfs(root: &Path, nic: &SysfsNic, dev: (u32, u32)) -> io::Result<()> {
    let SysfsNic {
        ip,
        mac,
        pci_device,
        board_id,
        node_desc,
    } = *nic;
    let guid = ferroverbs_hw::control::roce::eui64(mac);
    let ib = format!("{PCI_DEVICE}/infiniband/{IBDEV}");
    fs::create_dir_all(root.join(&ib))?;
    fs::create_dir_all(root.join("class/infiniband"))?;
    let class = root.join(format!("class/infiniband/{IBDEV}"));
    let _ = fs::remove_file(&class);
    std::os::unix::fs::symlink(format!("../../{ib}"), class)?;
    put(root, "class/infiniband_verbs/abi_version", "6")?;
    put(root, "class/infiniband_verbs/uverbs0/ibdev", IBDEV)?;
    put(
        root,
        "class/infiniband_verbs/uverbs0/dev",
        &format!("{}:{}", dev.0, dev.1),
    )?;
    put(root, "class/infiniband_verbs/uverbs0/abi_version", "1")?;
    let device = PCI_DEVICE;
    put(
        root,
        &format!("{device}/modalias"),
        &format!("pci:v000015B3d0000{pci_device:04X}sv000015B3sd00000008bc02sc00i00"),
    )?;
    put(root, &format!("{device}/vendor"), "0x15b3")?;
    put(
        root,
        &format!("{device}/device"),
        &format!("{pci_device:#06x}"),
    )?;
    put(root, &format!("{device}/subsystem_vendor"), "0x15b3")?;
    put(root, &format!("{device}/subsystem_device"), "0x0008")?;
    // A ConnectX-5's PCIe Gen3 x16.
    put(
        root,
        &format!("{device}/current_link_speed"),
        "8.0 GT/s PCIe",
    )?;
    put(root, &format!("{device}/current_link_width"), "16")?;
    let ibdevice = root.join(format!("{ib}/device"));
    let _ = fs::remove_file(&ibdevice);
    std::os::unix::fs::symlink("../../../0000:00:05.0", ibdevice)?;
    let link = root.join("class/infiniband_verbs/uverbs0/device");
    let _ = fs::remove_file(&link);
    std::os::unix::fs::symlink(format!("../../infiniband/{IBDEV}/device"), link)?;
    put(root, &format!("{ib}/node_type"), "1: CA")?;
    put(root, &format!("{ib}/node_guid"), &hex_groups(&guid))?;
    put(root, &format!("{ib}/sys_image_guid"), &hex_groups(&guid))?;
    put(root, &format!("{ib}/hca_type"), &format!("MT{pci_device}"))?;
    put(root, &format!("{ib}/board_id"), board_id)?;
    put(root, &format!("{ib}/node_desc"), node_desc)?;
    let port = format!("{ib}/ports/1");
    put(root, &format!("{port}/state"), "4: ACTIVE")?;
    put(root, &format!("{port}/phys_state"), "5: LinkUp")?;
    put(root, &format!("{port}/link_layer"), "Ethernet")?;
    put(root, &format!("{port}/rate"), "100 Gb/sec (4X EDR)")?;
    put(root, &format!("{port}/lid"), "0x0")?;
    put(root, &format!("{port}/sm_lid"), "0x0")?;
    put(root, &format!("{port}/lid_mask_count"), "0")?;
    put(root, &format!("{port}/cap_mask"), "0x04010000")?;
    put(root, &format!("{port}/pkeys/0"), "0xffff")?;
    let o = ip.octets();
    let gid0 = [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, o[0], o[1], o[2], o[3],
    ];
    for i in 0..GID_TABLE_LEN {
        let gid = if i == 0 { gid0 } else { [0u8; 16] };
        put(root, &format!("{port}/gids/{i}"), &hex_groups(&gid))?;
        put(root, &format!("{port}/gid_attrs/types/{i}"), "RoCE v2")?;
    }
    put(root, "class/misc/rdma_cm/abi_version", "4")?;
    Ok(())
}

/// The `major:minor` of `/dev/null`.
fn null_dev() -> io::Result<(u32, u32)> {
    let rdev = fs::metadata("/dev/null")?.rdev();
    Ok((libc::major(rdev), libc::minor(rdev)))
}

/// Runs `ferroverbs run` and returns the program's exit code.
pub fn run(a: &RunArgs) -> Result<ExitCode, CliError> {
    let nic = match a.device {
        DeviceSpec::Sim => SysfsNic::simulated(Ipv4Addr::LOCALHOST),
        DeviceSpec::SimUdp(sa) => SysfsNic::simulated(*sa.ip()),
        DeviceSpec::Vfio(bdf) => {
            // Pre-flight, before the program starts: open the device as
            // `ferroverbs devinfo -d vfio:BDF` does, so a machine without VFIO gets
            // the same set-up error naming the fix (exit code 3); the port's MAC is
            // the one sysfs shows. The program opens the device again (one process
            // at a time holds a VFIO group).
            let nic = super::device::open_vfio(&bdf)?;
            let port = nic
                .ctx
                .query_port(1)
                .map_err(|e| CliError::setup(format!("QUERY_PORT on vfio:{bdf}"), e))?;
            let pci_device = nic.info.pci_id.1;
            drop(nic);
            if a.impair.is_some() {
                return Err(CliError::unsupported(
                    "ferroverbs run --impair on vfio:...",
                    "the simulated link (impairments are the simulator's)",
                ));
            }
            let ip = ferroverbs::vfio::vfio_ipv4(
                std::env::var(ferroverbs::vfio::VFIO_IPV4_ENV)
                    .ok()
                    .as_deref(),
            )
            .map_err(CliError::setup_msg)?;
            SysfsNic {
                ip,
                mac: port.mac,
                pci_device,
                board_id: "FERROVERBS_VFIO",
                node_desc: "ConnectX through ferroverbs VFIO",
            }
        }
    };
    let lib = library()?;
    let dir = std::env::temp_dir().join(format!("ferroverbs-run-{}", std::process::id()));
    let sys = dir.join("sys");
    let dev = null_dev().map_err(|e| CliError::setup("stat /dev/null", e))?;
    // What a killed run of an earlier process with this PID left behind.
    let _ = fs::remove_dir_all(&dir);
    write_sysfs(&sys, &nic, dev)
        .map_err(|e| CliError::setup(format!("writing the sysfs tree in {}", sys.display()), e))?;
    let mut preload = OsString::from(lib.as_os_str());
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let (prog, args) = a.program.split_first().expect("clap requires the program");
    let mut cmd = std::process::Command::new(prog);
    cmd.args(args)
        .env("SYSFS_PATH", &sys)
        .env("LD_PRELOAD", preload)
        .env("FERROVERBS_DEVICE", a.device.to_string());
    if let Some(spec) = &a.impair {
        // Checked by the argument parser; the NIC parses the same spec.
        cmd.env(ferroverbs_sim::link::faults::ENV_VAR, spec);
    }
    let status = cmd.status();
    let _ = fs::remove_dir_all(&dir);
    let status =
        status.map_err(|e| CliError::setup(format!("running {}", Path::new(prog).display()), e))?;
    Ok(match status.code() {
        Some(c) => ExitCode::from(c.clamp(0, 255) as u8),
        None => ExitCode::from(128 + status.signal().unwrap_or(0).clamp(0, 127) as u8),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn lib_at(p: &Path, age: Duration) {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        let f = fs::File::create(p).unwrap();
        f.set_modified(SystemTime::now() - age).unwrap();
    }

    /// `cargo test` rebuilds `deps/libferroverbs_uapi.so` and leaves the copy beside
    /// the executable as an older `cargo build -p ferroverbs-uapi` left it: the
    /// rebuilt one is loaded.
    #[test]
    fn the_library_rebuilt_last_is_taken() {
        let root = std::env::temp_dir().join(format!("fv-lib-near-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let top = root.join(LIB_NAME);
        let deps = root.join("deps").join(LIB_NAME);
        assert_eq!(library_near(&root), None);
        lib_at(&top, Duration::from_secs(60));
        assert_eq!(library_near(&root), Some(top.clone()));
        lib_at(&deps, Duration::from_secs(1));
        assert_eq!(library_near(&root), Some(deps.clone()));
        // Built as a package of its own: the copy beside the executable is as new.
        lib_at(&top, Duration::from_secs(0));
        assert_eq!(library_near(&root), Some(top.clone()));
        // A tie (cargo's hard link of one file): the one beside the executable.
        let t = fs::metadata(&top).unwrap().modified().unwrap();
        fs::File::options()
            .write(true)
            .open(&deps)
            .unwrap()
            .set_modified(t)
            .unwrap();
        assert_eq!(library_near(&root), Some(top));
        fs::remove_dir_all(&root).unwrap();
    }

    /// A ConnectX-6 on VFIO shows its own PCI id (which libmlx5 matches), its MAC's
    /// node GUID and the address of GID 0; the simulated NIC shows a ConnectX-5.
    #[test]
    fn the_tree_shows_the_nic_it_is_written_for() {
        let root = std::env::temp_dir().join(format!("ferroverbs-sysfs-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let nic = SysfsNic {
            ip: Ipv4Addr::new(10, 0, 0, 9),
            mac: [0xb8, 0xce, 0xf6, 0x10, 0x20, 0x30],
            pci_device: 0x101b,
            board_id: "FERROVERBS_VFIO",
            node_desc: "ConnectX through ferroverbs VFIO",
        };
        write_sysfs(&root, &nic, (1, 3)).unwrap();
        let read = |rel: &str| fs::read_to_string(root.join(rel)).unwrap();
        let ib = "class/infiniband/mlx5_0";
        assert_eq!(read(&format!("{PCI_DEVICE}/device")), "0x101b\n");
        assert!(read(&format!("{PCI_DEVICE}/modalias")).starts_with("pci:v000015B3d0000101Bsv"));
        assert_eq!(read(&format!("{ib}/hca_type")), "MT4123\n");
        assert_eq!(read(&format!("{ib}/node_guid")), "bace:f6ff:fe10:2030\n");
        assert_eq!(
            read(&format!("{ib}/ports/1/gids/0")),
            "0000:0000:0000:0000:0000:ffff:0a00:0009\n"
        );
        assert_eq!(read(&format!("{ib}/board_id")), "FERROVERBS_VFIO\n");
        write_sysfs(
            &root,
            &SysfsNic::simulated(Ipv4Addr::new(127, 0, 77, 1)),
            (1, 3),
        )
        .unwrap();
        assert_eq!(read(&format!("{PCI_DEVICE}/device")), "0x1017\n");
        assert_eq!(read(&format!("{ib}/hca_type")), "MT4119\n");
        fs::remove_dir_all(&root).unwrap();
    }
}

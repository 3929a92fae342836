//! Every way opening a ConnectX through VFIO fails on a machine that is not set up
//! for it, checked without hardware: a fake sysfs tree (and a fake `/dev/vfio`) in a
//! temporary directory, and this machine itself, which has no `/dev/vfio`.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use ferroverbs::vfio::{
    preflight, Bar0Error, DeviceSpec, GroupMember, HugePages, PciAddress, Sysfs, VfioBus,
    VfioConfig, VfioError,
};

const CX5: PciAddress = PciAddress {
    domain: 0,
    bus: 0x3b,
    device: 0,
    function: 0,
};
const CX5_PORT2: PciAddress = PciAddress {
    domain: 0,
    bus: 0x3b,
    device: 0,
    function: 1,
};

/// A temporary `/sys` + `/dev/vfio`, removed on drop.
struct FakeHost {
    dir: PathBuf,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

impl FakeHost {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "ferroverbs-fakehost-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sys/kernel/iommu_groups")).unwrap();
        std::fs::create_dir_all(dir.join("sys/bus/pci/devices")).unwrap();
        std::fs::create_dir_all(dir.join("dev/vfio")).unwrap();
        FakeHost { dir }
    }

    fn sys(&self) -> PathBuf {
        self.dir.join("sys")
    }

    fn config(&self) -> VfioConfig {
        VfioConfig {
            dev_root: self.dir.join("dev/vfio"),
            sysfs: Sysfs::new(self.sys()),
            ..VfioConfig::default()
        }
    }

    /// A `/dev/vfio/vfio` that opens (a regular file: every ioctl on it fails).
    fn with_container_node(self) -> Self {
        std::fs::write(self.dir.join("dev/vfio/vfio"), b"").unwrap();
        self
    }

    fn device(
        &self,
        bdf: &PciAddress,
        vendor: u16,
        device: u16,
        driver: Option<&str>,
        group: Option<u32>,
        numa: &str,
    ) {
        let dev = self.sys().join("bus/pci/devices").join(bdf.to_string());
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("vendor"), format!("0x{vendor:04x}\n")).unwrap();
        std::fs::write(dev.join("device"), format!("0x{device:04x}\n")).unwrap();
        std::fs::write(dev.join("numa_node"), format!("{numa}\n")).unwrap();
        if let Some(d) = driver {
            let drv = self.sys().join("bus/pci/drivers").join(d);
            std::fs::create_dir_all(&drv).unwrap();
            symlink(&drv, dev.join("driver")).unwrap();
        }
        if let Some(g) = group {
            let gdir = self.sys().join("kernel/iommu_groups").join(g.to_string());
            std::fs::create_dir_all(gdir.join("devices")).unwrap();
            symlink(&dev, gdir.join("devices").join(bdf.to_string())).unwrap();
            symlink(&gdir, dev.join("iommu_group")).unwrap();
        }
    }

    fn hugepages(&self, node: Option<u32>, total: u64, free: u64) {
        let dir = match node {
            Some(n) => self.sys().join(format!(
                "devices/system/node/node{n}/hugepages/hugepages-2048kB"
            )),
            None => self.sys().join("kernel/mm/hugepages/hugepages-2048kB"),
        };
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("nr_hugepages"), format!("{total}\n")).unwrap();
        std::fs::write(dir.join("free_hugepages"), format!("{free}\n")).unwrap();
    }
}

impl Drop for FakeHost {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn open_err(host: &FakeHost, bdf: &PciAddress) -> VfioError {
    VfioBus::open(bdf, &host.config()).unwrap_err()
}

#[test]
fn this_machine_has_no_vfio_module() {
    if Path::new("/dev/vfio/vfio").exists() {
        println!("note: /dev/vfio/vfio exists here; the module-not-loaded check is skipped");
        return;
    }
    let spec: DeviceSpec = "vfio:0000:3b:00.0".parse().unwrap();
    let DeviceSpec::Vfio(bdf) = spec else {
        unreachable!()
    };
    let e = VfioBus::open(&bdf, &VfioConfig::default()).unwrap_err();
    assert!(matches!(e, VfioError::ModuleNotLoaded { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("/dev/vfio/vfio") && msg.contains("modprobe vfio-pci"),
        "{msg}"
    );
}

#[test]
fn missing_container_node_comes_first() {
    let host = FakeHost::new();
    host.device(&CX5, 0x15b3, 0x1017, Some("vfio-pci"), Some(12), "0");
    let e = open_err(&host, &CX5);
    assert!(matches!(e, VfioError::ModuleNotLoaded { .. }), "{e}");
}

#[test]
fn device_not_in_sysfs() {
    let host = FakeHost::new().with_container_node();
    let e = open_err(&host, &CX5);
    match &e {
        VfioError::DeviceNotFound { bdf, path } => {
            assert_eq!(*bdf, CX5);
            assert!(path.ends_with("bus/pci/devices/0000:3b:00.0"));
        }
        e => panic!("{e}"),
    }
    assert!(e.to_string().contains("lspci -D -d 15b3:"));
}

#[test]
fn not_a_connectx() {
    let host = FakeHost::new().with_container_node();
    host.device(&CX5, 0x8086, 0x1572, Some("vfio-pci"), Some(12), "0");
    let e = open_err(&host, &CX5);
    assert!(
        matches!(
            e,
            VfioError::NotConnectX {
                vendor: 0x8086,
                device: 0x1572,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("8086:1572"));
    // A Mellanox function that is not mlx5 (ConnectX-3, mlx4).
    let host = FakeHost::new().with_container_node();
    host.device(&CX5, 0x15b3, 0x1003, Some("vfio-pci"), Some(12), "0");
    assert!(matches!(
        open_err(&host, &CX5),
        VfioError::NotConnectX { device: 0x1003, .. }
    ));
}

#[test]
fn iommu_disabled() {
    let host = FakeHost::new().with_container_node();
    host.device(&CX5, 0x15b3, 0x1017, Some("mlx5_core"), None, "0");
    let e = open_err(&host, &CX5);
    assert!(
        matches!(
            e,
            VfioError::IommuDisabled {
                groups_present: false,
                ..
            }
        ),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("intel_iommu=on") && msg.contains("is empty"),
        "{msg}"
    );
}

#[test]
fn not_bound_to_vfio_pci() {
    let host = FakeHost::new().with_container_node();
    host.device(&CX5, 0x15b3, 0x101d, Some("mlx5_core"), Some(40), "1");
    let e = open_err(&host, &CX5);
    match &e {
        VfioError::NotBoundToVfio { driver, .. } => {
            assert_eq!(driver.as_deref(), Some("mlx5_core"))
        }
        e => panic!("{e}"),
    }
    let msg = e.to_string();
    for needle in [
        "`mlx5_core`",
        "modprobe vfio-pci",
        "echo 0000:3b:00.0 > /sys/bus/pci/devices/0000:3b:00.0/driver/unbind",
        "echo vfio-pci > /sys/bus/pci/devices/0000:3b:00.0/driver_override",
        "echo 0000:3b:00.0 > /sys/bus/pci/drivers_probe",
    ] {
        assert!(msg.contains(needle), "{needle} missing from: {msg}");
    }
    // Driverless: no unbind step.
    let host = FakeHost::new().with_container_node();
    host.device(&CX5, 0x15b3, 0x101d, None, Some(40), "1");
    let msg = open_err(&host, &CX5).to_string();
    assert!(
        msg.contains("driver `none`") && !msg.contains("unbind"),
        "{msg}"
    );
}

#[test]
fn group_not_viable_names_the_other_devices() {
    let host = FakeHost::new().with_container_node();
    host.device(&CX5, 0x15b3, 0x1017, Some("vfio-pci"), Some(12), "0");
    host.device(&CX5_PORT2, 0x15b3, 0x1017, Some("mlx5_core"), Some(12), "0");
    let bridge = PciAddress::new(0, 0x3a, 0, 0).unwrap();
    host.device(&bridge, 0x8086, 0x2030, Some("pcieport"), Some(12), "0");
    let e = open_err(&host, &CX5);
    match &e {
        VfioError::GroupNotViable {
            group,
            offenders,
            members,
            ..
        } => {
            assert_eq!(*group, 12);
            assert_eq!(
                offenders,
                &[GroupMember {
                    name: "0000:3b:00.1".into(),
                    driver: Some("mlx5_core".into())
                }]
            );
            assert_eq!(members.len(), 3);
        }
        e => panic!("{e}"),
    }
    let msg = e.to_string();
    assert!(msg.contains("0000:3b:00.1 (driver mlx5_core)"), "{msg}");
    assert!(msg.contains("0000:3a:00.0 (driver pcieport)"), "{msg}");
}

#[test]
fn hugepages_required_but_none_reserved() {
    let host = FakeHost::new().with_container_node();
    host.device(&CX5, 0x15b3, 0x1017, Some("vfio-pci"), Some(12), "1");
    host.hugepages(None, 0, 0);
    let mut cfg = host.config();
    cfg.hugepages = HugePages::Require;
    cfg.arena_bytes = 4 << 20;
    let e = VfioBus::open(&CX5, &cfg).unwrap_err();
    assert!(
        matches!(
            e,
            VfioError::NoHugepages {
                needed: 2,
                free: 0,
                total: 0,
                node: None
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("/proc/sys/vm/nr_hugepages"), "{e}");
    // Counted on the device's node when the node has a pool.
    host.hugepages(Some(1), 8, 1);
    let e = VfioBus::open(&CX5, &cfg).unwrap_err();
    assert!(
        matches!(
            e,
            VfioError::NoHugepages {
                needed: 2,
                free: 1,
                total: 8,
                node: Some(1)
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("on NUMA node 1"), "{e}");
    // Enough on the node: the pre-flight passes.
    host.hugepages(Some(1), 8, 2);
    preflight(&CX5, &cfg).unwrap();
}

#[test]
fn a_good_setup_passes_preflight_and_then_talks_to_the_container() {
    let host = FakeHost::new().with_container_node();
    host.device(&CX5, 0x15b3, 0x1017, Some("vfio-pci"), Some(12), "-1");
    host.device(&CX5_PORT2, 0x15b3, 0x1017, None, Some(12), "-1");
    let pre = preflight(&CX5, &host.config()).unwrap();
    assert_eq!(pre.model, "ConnectX-5");
    assert_eq!(pre.group, 12);
    assert_eq!(pre.device.numa_node, None);
    assert_eq!(pre.device.driver.as_deref(), Some("vfio-pci"));
    assert_eq!(pre.members.len(), 2);
    // The next step is the container's API check, which a regular file fails.
    match open_err(&host, &CX5) {
        VfioError::Ioctl { op, source } => {
            assert_eq!(op, "VFIO_GET_API_VERSION");
            assert_eq!(source.raw_os_error(), Some(ENOTTY));
        }
        e => panic!("{e}"),
    }
}

/// `ENOTTY` (Linux asm-generic errno 25): "inappropriate ioctl for device".
const ENOTTY: i32 = 25;

#[test]
fn malformed_sysfs_is_an_error_not_a_panic() {
    let host = FakeHost::new().with_container_node();
    host.device(&CX5, 0x15b3, 0x1017, Some("vfio-pci"), Some(12), "0");
    let dev = host.sys().join("bus/pci/devices/0000:3b:00.0");
    std::fs::write(dev.join("vendor"), "mellanox\n").unwrap();
    assert!(matches!(open_err(&host, &CX5), VfioError::Sysfs { .. }));
    std::fs::write(dev.join("vendor"), "0x15b3\n").unwrap();
    std::fs::write(dev.join("numa_node"), "lots\n").unwrap();
    assert!(matches!(open_err(&host, &CX5), VfioError::Sysfs { .. }));
    std::fs::remove_file(dev.join("numa_node")).unwrap();
    assert!(preflight(&CX5, &host.config())
        .unwrap()
        .device
        .numa_node
        .is_none());
}

/// Every error's message names what to do about it.
#[test]
fn every_message_names_a_fix() {
    let cases: Vec<(VfioError, &str)> = vec![
        (
            VfioError::PermissionDenied {
                path: "/dev/vfio/12".into(),
                uid: 0,
                gid: 0,
                mode: 0o600,
            },
            "chown",
        ),
        (
            VfioError::MemlockTooLow {
                needed: 2 << 20,
                limit: 64 << 10,
            },
            "ulimit -l",
        ),
        (
            VfioError::Bar0TooSmall {
                bdf: CX5,
                len: 0x1000,
                min: 0x5000,
            },
            "lspci -vv -s 0000:3b:00.0",
        ),
        (VfioError::NoType1v2, "modprobe vfio_iommu_type1"),
        (
            VfioError::GroupNodeMissing {
                path: "/dev/vfio/12".into(),
            },
            "bind the function to vfio-pci",
        ),
        (
            VfioError::Bar0(Bar0Error::FwNotReady {
                waited: std::time::Duration::from_secs(120),
                register: 0x8000_0000,
            }),
            "health buffer",
        ),
        (
            VfioError::Bar0(Bar0Error::CmdifRev { found: 3 }),
            "update the firmware",
        ),
        (
            VfioError::Bar0(Bar0Error::NotResponding { offset: 0 }),
            "reset",
        ),
        (
            VfioError::GroupNotViableKernel {
                group: 3,
                members: vec![],
            },
            "vfio-pci",
        ),
    ];
    for (e, fix) in cases {
        let msg = e.to_string();
        assert!(msg.contains(fix), "{fix:?} missing from: {msg}");
    }
}

#[test]
fn device_strings() {
    assert_eq!("sim".parse::<DeviceSpec>().unwrap(), DeviceSpec::Sim);
    assert_eq!(
        "vfio:0000:3b:00.1".parse::<DeviceSpec>().unwrap(),
        DeviceSpec::Vfio(CX5_PORT2)
    );
    assert!("vfio:3b:00".parse::<DeviceSpec>().is_err());
    assert!(ferroverbs::DeviceSpec::default() == DeviceSpec::Sim);
}

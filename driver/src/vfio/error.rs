//! What can go wrong when opening a ConnectX through VFIO, each case naming its fix.
//!
//! Every variant's message says what was found and what to do about it, because the
//! person reading it is usually at a machine that is not yet set up for VFIO
//! (docs/vfio.md has the same list with more detail).

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use super::spec::PciAddress;

/// A device of an IOMMU group and the host driver it is bound to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMember {
    /// The device's sysfs name (a PCI address for PCI devices).
    pub name: String,
    /// The driver it is bound to, `None` when it has none.
    pub driver: Option<String>,
}

impl fmt::Display for GroupMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.driver {
            Some(d) => write!(f, "{} (driver {d})", self.name),
            None => write!(f, "{} (no driver)", self.name),
        }
    }
}

fn list(members: &[GroupMember]) -> String {
    members
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn driver_name(d: &Option<String>) -> &str {
    d.as_deref().unwrap_or("none")
}

fn unbind_hint(bdf: &PciAddress, d: &Option<String>) -> String {
    match d {
        Some(_) => format!("echo {bdf} > /sys/bus/pci/devices/{bdf}/driver/unbind; "),
        None => String::new(),
    }
}

/// The checks made on BAR0 right after it is mapped ([`check_bar0`](super::check_bar0)).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Bar0Error {
    /// A register read as all ones: the function does not answer on the PCI bus.
    #[error(
        "BAR0 register {offset:#x} reads as all ones: the device does not answer (PCI link \
         down, function in reset, or memory space disabled); check `lspci -vv -s <BDF>` and \
         the kernel log, then reset the function (echo 1 > /sys/bus/pci/devices/<BDF>/reset)"
    )]
    NotResponding {
        /// The register that read as all ones.
        offset: usize,
    },
    /// The `initializing` bit (iseg 0x1fc bit 31) stayed set.
    #[error(
        "firmware not ready after {waited:?} (iseg 0x1fc = {register:#010x}, bit 31 \
         `initializing` still set): the firmware is still booting or hung; wait and retry, \
         check `mstfwreset`/a cold reboot, and the health buffer at 0x200"
    )]
    FwNotReady {
        /// How long the driver waited.
        waited: Duration,
        /// The last value of the register.
        register: u32,
    },
    /// The command interface revision is not 5 (iseg 0x4 `[31:16]`).
    #[error(
        "command interface revision {found} (iseg 0x4 [31:16]), expected 5: this is not an \
         mlx5 function, or its firmware is too old or mid-reset; update the firmware"
    )]
    CmdifRev {
        /// The revision read.
        found: u16,
    },
}

/// Why opening a device through VFIO failed.
#[derive(Debug, thiserror::Error)]
pub enum VfioError {
    /// `/dev/vfio/vfio` does not exist.
    #[error(
        "{path:?} does not exist: the VFIO driver is not loaded; run `modprobe vfio-pci` \
         (and boot with the IOMMU on, e.g. intel_iommu=on); see docs/vfio.md"
    )]
    ModuleNotLoaded {
        /// The container path looked for.
        path: PathBuf,
    },
    /// No such PCI function in sysfs.
    #[error(
        "PCI device {bdf} not found ({path:?} is missing); list ConnectX functions with \
         `lspci -D -d 15b3:`"
    )]
    DeviceNotFound {
        /// The address asked for.
        bdf: PciAddress,
        /// The sysfs directory looked for.
        path: PathBuf,
    },
    /// The function is not a ConnectX.
    #[error(
        "{bdf} is not a ConnectX (PCI id {vendor:04x}:{device:04x}); ferroverbs drives vendor \
         15b3 (Mellanox/NVIDIA) functions with an mlx5 device id (ConnectX-4 to -8, \
         BlueField); pick another function with `lspci -D -d 15b3:`"
    )]
    NotConnectX {
        /// The function.
        bdf: PciAddress,
        /// Its PCI vendor id.
        vendor: u16,
        /// Its PCI device id.
        device: u16,
    },
    /// The function is bound to another driver, or none.
    #[error(
        "{bdf} is bound to driver `{}`, not vfio-pci; bind it with: modprobe vfio-pci; {}\
         echo vfio-pci > /sys/bus/pci/devices/{bdf}/driver_override; \
         echo {bdf} > /sys/bus/pci/drivers_probe (or `dpdk-devbind.py --bind=vfio-pci {bdf}`)",
        driver_name(driver),
        unbind_hint(bdf, driver)
    )]
    NotBoundToVfio {
        /// The function.
        bdf: PciAddress,
        /// Its current driver.
        driver: Option<String>,
    },
    /// The function has no IOMMU group: the IOMMU is off.
    #[error(
        "{bdf} has no IOMMU group and {groups_dir:?} {}: the IOMMU is disabled; enable VT-d / \
         AMD-Vi in the firmware setup and boot with intel_iommu=on (Intel) or amd_iommu=on \
         (AMD), optionally iommu=pt",
        if *groups_present { "has groups for other devices" } else { "is empty" }
    )]
    IommuDisabled {
        /// The function.
        bdf: PciAddress,
        /// `/sys/kernel/iommu_groups`.
        groups_dir: PathBuf,
        /// Whether any IOMMU group exists at all.
        groups_present: bool,
    },
    /// Another device of the IOMMU group is bound to a host driver.
    #[error(
        "IOMMU group {group} of {bdf} is not viable: {} must be bound to vfio-pci or left \
         without a driver (group members: {}); unbind each of them from its driver and bind \
         it to vfio-pci like {bdf}",
        list(offenders),
        list(members)
    )]
    GroupNotViable {
        /// The function asked for.
        bdf: PciAddress,
        /// The group number.
        group: u32,
        /// The members bound to a host driver.
        offenders: Vec<GroupMember>,
        /// All members of the group.
        members: Vec<GroupMember>,
    },
    /// The kernel said the group is not viable, though sysfs showed nothing wrong.
    #[error(
        "VFIO reports IOMMU group {group} not viable (members: {}); bind every member to \
         vfio-pci or leave it without a driver",
        list(members)
    )]
    GroupNotViableKernel {
        /// The group number.
        group: u32,
        /// All members of the group, as sysfs lists them.
        members: Vec<GroupMember>,
    },
    /// `/dev/vfio/<group>` does not exist though the container does.
    #[error(
        "{path:?} does not exist: no VFIO group node for the device; bind the function to \
         vfio-pci (the node appears when vfio-pci claims it) and check udev"
    )]
    GroupNodeMissing {
        /// The group node looked for.
        path: PathBuf,
    },
    /// Opening a VFIO node was refused.
    #[error(
        "permission denied opening {path:?} (owner uid {uid}, gid {gid}, mode {mode:o}); run \
         as root, or `chown <user> {path:?}` (a udev rule makes it last: \
         SUBSYSTEM==\"vfio\", OWNER=\"<user>\")"
    )]
    PermissionDenied {
        /// The node.
        path: PathBuf,
        /// Its owner.
        uid: u32,
        /// Its group.
        gid: u32,
        /// Its permission bits.
        mode: u32,
    },
    /// `RLIMIT_MEMLOCK` is below what the DMA arenas pin.
    #[error(
        "locked-memory limit {limit} bytes is below the {needed} bytes the DMA arenas pin \
         (VFIO charges every mapped page to RLIMIT_MEMLOCK); raise it: `ulimit -l unlimited`, \
         `* - memlock unlimited` in /etc/security/limits.conf, LimitMEMLOCK=infinity for a \
         systemd unit, or grant CAP_IPC_LOCK (`setcap cap_ipc_lock+ep <binary>`)"
    )]
    MemlockTooLow {
        /// Bytes needed.
        needed: u64,
        /// The current soft limit.
        limit: u64,
    },
    /// Hugepages were required but not enough are free.
    #[error(
        "{needed} free 2 MiB hugepages needed{}, {free} free of {total} reserved; reserve \
         some: `echo {} > /proc/sys/vm/nr_hugepages` (or per node: \
         /sys/devices/system/node/nodeN/hugepages/hugepages-2048kB/nr_hugepages, or \
         hugepages=N on the kernel command line)",
        node.map(|n| format!(" on NUMA node {n}")).unwrap_or_default(),
        total + needed.saturating_sub(*free)
    )]
    NoHugepages {
        /// Pages needed.
        needed: u64,
        /// Pages free.
        free: u64,
        /// Pages reserved in total (`nr_hugepages`).
        total: u64,
        /// The NUMA node counted, if per node.
        node: Option<u32>,
    },
    /// BAR0 is smaller than the driver needs.
    #[error(
        "BAR0 of {bdf} is {len:#x} bytes, smaller than the {min:#x} the driver needs (the \
         initialization segment and UAR pages): wrong function, or the BAR was not assigned \
         (check `lspci -vv -s {bdf}` for `Region 0`)"
    )]
    Bar0TooSmall {
        /// The function.
        bdf: PciAddress,
        /// BAR0 length reported by VFIO.
        len: u64,
        /// The minimum.
        min: u64,
    },
    /// BAR0 cannot be mapped.
    #[error(
        "BAR0 of {bdf} cannot be mmapped (region flags {flags:#x}); the kernel refused direct \
         access (e.g. the BAR is not page aligned); check `lspci -vv -s {bdf}`"
    )]
    Bar0NotMappable {
        /// The function.
        bdf: PciAddress,
        /// The region flags.
        flags: u32,
    },
    /// A BAR0 register check failed.
    #[error(transparent)]
    Bar0(#[from] Bar0Error),
    /// The container speaks another VFIO API.
    #[error(
        "VFIO API version {found}, expected 0: the file is not a VFIO container or the \
         kernel is incompatible"
    )]
    ApiVersion {
        /// What `VFIO_GET_API_VERSION` returned.
        found: i32,
    },
    /// The kernel lacks the Type1v2 IOMMU backend.
    #[error(
        "the VFIO container does not support the Type1v2 IOMMU: load `vfio_iommu_type1` \
         (modprobe vfio_iommu_type1) and make sure the IOMMU is enabled"
    )]
    NoType1v2,
    /// The device fd is not a vfio-pci device.
    #[error("VFIO device {bdf} is not a PCI device (flags {flags:#x})")]
    NotPciDevice {
        /// The function.
        bdf: PciAddress,
        /// The device info flags.
        flags: u32,
    },
    /// A sysfs attribute could not be read or parsed.
    #[error("sysfs attribute {path:?}: {reason}")]
    Sysfs {
        /// The attribute.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A VFIO ioctl failed.
    #[error("VFIO {op} failed: {source}")]
    Ioctl {
        /// The ioctl name.
        op: &'static str,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// A system call other than an ioctl failed.
    #[error("{op} failed: {source}")]
    Os {
        /// What was being done.
        op: &'static str,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// Mapping memory for device access failed.
    #[error("DMA mapping of {len} bytes failed: {reason}")]
    Dma {
        /// Bytes.
        len: usize,
        /// Why.
        reason: String,
    },
}

impl VfioError {
    /// Wraps an ioctl errno.
    pub(crate) fn ioctl(op: &'static str, source: io::Error) -> Self {
        VfioError::Ioctl { op, source }
    }

    /// Wraps a system call errno.
    pub(crate) fn os(op: &'static str, source: io::Error) -> Self {
        VfioError::Os { op, source }
    }
}

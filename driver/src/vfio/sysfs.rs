//! What sysfs says about a PCI function: ids, driver, IOMMU group, NUMA node,
//! hugepage pools.
//!
//! Everything is read below a configurable root (normally `/sys`), so tests build a
//! fake tree in a temporary directory:
//!
//! ```text
//! <root>/bus/pci/devices/<BDF>/{vendor,device,numa_node}    "0x15b3\n", "0x1017\n", "0\n"
//! <root>/bus/pci/devices/<BDF>/driver -> .../drivers/vfio-pci
//! <root>/bus/pci/devices/<BDF>/iommu_group -> .../kernel/iommu_groups/N
//! <root>/kernel/iommu_groups/N/devices/<BDF> -> .../<BDF>
//! <root>/kernel/mm/hugepages/hugepages-2048kB/{nr_hugepages,free_hugepages}
//! <root>/devices/system/node/nodeN/hugepages/hugepages-2048kB/{nr_hugepages,free_hugepages}
//! ```
//!
//! Only the basenames of symbolic links are used (rdma-core's
//! `mlx5_vfio_get_iommu_group_id` does the same with the `iommu_group` link).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::error::{GroupMember, VfioError};
use super::spec::PciAddress;

/// Drivers under which a group member does not break the group's viability.
///
/// The kernel's rule (Linux ≥ 5.19) is that every device of the group is either
/// driverless or bound to a driver that manages its own DMA (`driver_managed_dma`):
/// vfio-pci and its variant drivers (`*_vfio_pci`), pci-stub and pcieport (bridges).
/// This list is the pre-check that names the culprits; the kernel's
/// `VFIO_GROUP_GET_STATUS` has the last word.
pub fn driver_keeps_group_viable(driver: Option<&str>) -> bool {
    match driver {
        None => true,
        Some(d) => is_vfio_driver(d) || d == "pci-stub" || d == "pcieport",
    }
}

/// Whether `driver` hands the function to VFIO: `vfio-pci` or a vfio-pci variant
/// driver such as `mlx5_vfio_pci` (same device fd and regions).
pub fn is_vfio_driver(driver: &str) -> bool {
    driver == "vfio-pci" || driver.ends_with("_vfio_pci") || driver.ends_with("-vfio-pci")
}

/// What sysfs knows about one PCI function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PciDeviceInfo {
    /// Its address.
    pub bdf: PciAddress,
    /// PCI vendor id (`vendor`).
    pub vendor: u16,
    /// PCI device id (`device`).
    pub device: u16,
    /// The bound driver (basename of the `driver` link), if any.
    pub driver: Option<String>,
    /// The IOMMU group number (basename of the `iommu_group` link), if any.
    pub iommu_group: Option<u32>,
    /// The NUMA node (`numa_node`; -1, meaning unknown, becomes `None`).
    pub numa_node: Option<u32>,
}

/// Free and reserved hugepages of one size, system-wide or on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HugepageCounts {
    /// `nr_hugepages`: pages reserved in the pool.
    pub total: u64,
    /// `free_hugepages`: pages not in use.
    pub free: u64,
}

/// A sysfs tree rooted at some directory (normally `/sys`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sysfs {
    root: PathBuf,
}

impl Default for Sysfs {
    fn default() -> Self {
        Sysfs::new("/sys")
    }
}

fn link_basename(path: &Path) -> io::Result<Option<String>> {
    match fs::read_link(path) {
        Ok(target) => Ok(target.file_name().map(|n| n.to_string_lossy().into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn sysfs_err(path: &Path, reason: impl ToString) -> VfioError {
    VfioError::Sysfs {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// Parses a sysfs id attribute such as `0x15b3\n`.
pub fn parse_hex_u16(text: &str) -> Option<u16> {
    let t = text.trim();
    let digits = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X"))?;
    u16::from_str_radix(digits, 16).ok()
}

/// Parses a `numa_node` attribute: a node number, or -1 for "unknown".
pub fn parse_numa_node(text: &str) -> Option<Option<u32>> {
    let v: i64 = text.trim().parse().ok()?;
    match v {
        -1 => Some(None),
        0..=0xffff => Some(Some(v as u32)),
        _ => None,
    }
}

impl Sysfs {
    /// A tree rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Sysfs { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/bus/pci/devices/<bdf>`.
    pub fn device_dir(&self, bdf: &PciAddress) -> PathBuf {
        self.root.join("bus/pci/devices").join(bdf.to_string())
    }

    /// `<root>/kernel/iommu_groups`.
    pub fn iommu_groups_dir(&self) -> PathBuf {
        self.root.join("kernel/iommu_groups")
    }

    fn read_attr(&self, path: &Path) -> Result<String, VfioError> {
        fs::read_to_string(path).map_err(|e| sysfs_err(path, e))
    }

    fn read_hex(&self, path: &Path) -> Result<u16, VfioError> {
        let text = self.read_attr(path)?;
        parse_hex_u16(&text).ok_or_else(|| sysfs_err(path, format!("not a hex id: {text:?}")))
    }

    /// Reads the ids, driver, IOMMU group and NUMA node of `bdf`.
    pub fn pci_device(&self, bdf: &PciAddress) -> Result<PciDeviceInfo, VfioError> {
        let dir = self.device_dir(bdf);
        if !dir.is_dir() {
            return Err(VfioError::DeviceNotFound {
                bdf: *bdf,
                path: dir,
            });
        }
        let vendor = self.read_hex(&dir.join("vendor"))?;
        let device = self.read_hex(&dir.join("device"))?;
        let driver = link_basename(&dir.join("driver")).map_err(|e| sysfs_err(&dir, e))?;
        let group_link = dir.join("iommu_group");
        let iommu_group = match link_basename(&group_link).map_err(|e| sysfs_err(&dir, e))? {
            None => None,
            Some(name) => Some(name.parse::<u32>().map_err(|_| {
                sysfs_err(&group_link, format!("group name {name:?} is not a number"))
            })?),
        };
        let numa_path = dir.join("numa_node");
        let numa_node = match fs::read_to_string(&numa_path) {
            Ok(t) => parse_numa_node(&t)
                .ok_or_else(|| sysfs_err(&numa_path, format!("not a node number: {t:?}")))?,
            // Kernels without NUMA support have no such attribute.
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(sysfs_err(&numa_path, e)),
        };
        Ok(PciDeviceInfo {
            bdf: *bdf,
            vendor,
            device,
            driver,
            iommu_group,
            numa_node,
        })
    }

    /// Whether `<root>/kernel/iommu_groups` has any group: false when the IOMMU is off.
    pub fn iommu_groups_present(&self) -> bool {
        fs::read_dir(self.iommu_groups_dir())
            .map(|mut d| d.next().is_some())
            .unwrap_or(false)
    }

    /// The devices of IOMMU group `group` and their drivers, sorted by name.
    pub fn group_members(&self, group: u32) -> Result<Vec<GroupMember>, VfioError> {
        let dir = self
            .iommu_groups_dir()
            .join(group.to_string())
            .join("devices");
        let entries = fs::read_dir(&dir).map_err(|e| sysfs_err(&dir, e))?;
        let mut members = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| sysfs_err(&dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            // Each entry links to the device's directory, which has the driver link.
            let driver =
                link_basename(&entry.path().join("driver")).map_err(|e| sysfs_err(&dir, e))?;
            members.push(GroupMember { name, driver });
        }
        members.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(members)
    }

    /// Reserved and free hugepages of `size_kib`, on `node` or system-wide. `None` when
    /// the kernel has no pool of that size (or no such node).
    pub fn hugepages(&self, size_kib: u64, node: Option<u32>) -> Option<HugepageCounts> {
        let pool = format!("hugepages-{size_kib}kB");
        let dir = match node {
            Some(n) => self
                .root
                .join(format!("devices/system/node/node{n}/hugepages"))
                .join(pool),
            None => self.root.join("kernel/mm/hugepages").join(pool),
        };
        let read = |name: &str| -> Option<u64> {
            fs::read_to_string(dir.join(name)).ok()?.trim().parse().ok()
        };
        Some(HugepageCounts {
            total: read("nr_hugepages")?,
            free: read("free_hugepages")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_parsers() {
        assert_eq!(parse_hex_u16("0x15b3\n"), Some(0x15b3));
        assert_eq!(parse_hex_u16("0X1017"), Some(0x1017));
        assert_eq!(parse_hex_u16("15b3"), None);
        assert_eq!(parse_hex_u16("0x"), None);
        assert_eq!(parse_hex_u16("0x123456"), None);
        assert_eq!(parse_numa_node("-1\n"), Some(None));
        assert_eq!(parse_numa_node("1\n"), Some(Some(1)));
        assert_eq!(parse_numa_node("x"), None);
        assert_eq!(parse_numa_node("-2"), None);
    }

    #[test]
    fn viability_rule() {
        assert!(driver_keeps_group_viable(None));
        assert!(driver_keeps_group_viable(Some("vfio-pci")));
        assert!(driver_keeps_group_viable(Some("mlx5_vfio_pci")));
        assert!(driver_keeps_group_viable(Some("pci-stub")));
        assert!(driver_keeps_group_viable(Some("pcieport")));
        assert!(!driver_keeps_group_viable(Some("mlx5_core")));
        assert!(!driver_keeps_group_viable(Some("nvme")));
        assert!(is_vfio_driver("vfio-pci"));
        assert!(!is_vfio_driver("mlx5_core"));
    }
}

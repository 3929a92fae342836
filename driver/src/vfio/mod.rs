//! The VFIO backend: a real ConnectX bound to vfio-pci, as a [`Bus`].
//!
//! [`VfioBus::open`] follows rdma-core's `mlx5_vfio` (reference §6.2), with a sysfs
//! pre-flight that turns each missing piece of set-up into a [`VfioError`] naming the
//! fix:
//!
//! 1. open the container `/dev/vfio/vfio` ([`VfioError::ModuleNotLoaded`]);
//! 2. [`preflight`] in sysfs: the function exists, is a ConnectX, has an IOMMU group,
//!    is bound to vfio-pci, its group is viable, hugepages and the memlock limit
//!    suffice for the arenas;
//! 3. container API version and the Type1v2 extension; open `/dev/vfio/<group>`,
//!    group status VIABLE, `SET_CONTAINER`, `SET_IOMMU(TYPE1v2)`, `IOMMU_GET_INFO`
//!    (page sizes, valid IOVA ranges);
//! 4. `GET_DEVICE_FD`, device info (a PCI device), BAR0 and config region info;
//!    memory space and bus mastering on in the PCI command register; BAR0 mapped;
//! 5. [`check_bar0`]: firmware ready and command interface revision 5 (or only the
//!    revision, [`check_cmdif`], with `pre_init_wait` off);
//! 6. the first DMA arena (hugepages on the device's NUMA node, one IOMMU mapping);
//! 7. MSI-X vectors with eventfds (polling when unavailable).
//!
//! Every step's resource is an RAII guard, so a failure at any step undoes the steps
//! before it in reverse order, and dropping the bus undoes all of them: bus mastering
//! off, MSI-X off and eventfds closed, BAR0 unmapped, user DMA mappings and arenas
//! unmapped and freed, device fd closed, group detached from the container and
//! closed, container closed.
//!
//! The device string [`DeviceSpec`] (`sim` or `vfio:0000:3b:00.0`) chooses between
//! this bus and the simulator wherever a device is chosen. Bring-up on real hardware:
//! `docs/vfio.md`. This is the only module of the driver with `unsafe` code besides
//! `dma`; each block carries a `// SAFETY:` comment.

mod check;
mod container;
mod device;
mod dma;
mod error;
mod group;
pub mod ioctl;
mod iova;
mod irq;
mod region;
mod spec;
mod sysfs;

use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferroverbs_hw::bus::Block64;
use ferroverbs_hw::{Bus, BusError, DmaPerm};

pub use check::{
    check_bar0, check_cmdif, connectx_model, FirmwareInfo, CONNECTX_DEVICE_IDS, FW_READY_POLL,
    FW_READY_TIMEOUT, MELLANOX_VENDOR_ID, MIN_BAR0_LEN,
};
pub use container::Container;
pub use device::{
    BusMaster, DeviceFd, DeviceInfo, IrqInfo, RegionInfo, PCI_COMMAND, PCI_COMMAND_MASTER,
    PCI_COMMAND_MEMORY,
};
pub use dma::{
    check_memlock, has_cap_ipc_lock, memlock_limit, parse_cap_eff, ArenaMem, DmaChunk, HugePages,
    CAP_IPC_LOCK, HUGE_PAGE,
};
pub use error::{Bar0Error, GroupMember, VfioError};
pub use group::{Group, GroupStatus};
pub use iova::{
    parse_iommu_info, CapChainError, IommuInfo, IovaAllocator, IovaFreeError, IovaRange,
    LEGACY_RANGES, MIN_IOVA, MSI_WINDOW,
};
pub use irq::{irq_set_buffer, new_eventfd, Msix, MSIX_INDEX};
pub use region::{rmb, wmb, Mmio};
pub use spec::{vfio_ipv4, DeviceSpec, DeviceSpecError, PciAddress, VFIO_IPV4_ENV};
pub use sysfs::{
    driver_keeps_group_viable, is_vfio_driver, parse_hex_u16, parse_numa_node, HugepageCounts,
    PciDeviceInfo, Sysfs,
};

use dma::{ArenaPolicy, DmaSpace};
use vfio_bindings::bindings::vfio as uapi;

/// The environment variable whose value `1` turns BlueFlame on for VFIO devices
/// ([`VfioConfig::blueflame`]'s default).
pub const BLUEFLAME_ENV: &str = "FERROVERBS_VFIO_BLUEFLAME";

/// [`VfioConfig::blueflame`]'s default from the value of [`BLUEFLAME_ENV`]: on only
/// for exactly `1` (unset, empty, `0` or anything else: off, the uncached BAR's
/// choice).
fn blueflame_from_env(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|v| v == "1")
}

/// Where to find things and how much to set up.
#[derive(Clone, Debug)]
pub struct VfioConfig {
    /// Directory of the VFIO nodes: `vfio` (the container) and one node per group.
    pub dev_root: PathBuf,
    /// The sysfs tree.
    pub sysfs: Sysfs,
    /// Bytes of the first DMA arena (rounded up to 2 MiB), pinned at open.
    pub arena_bytes: usize,
    /// Whether arenas must, may or must not use 2 MiB hugepages.
    pub hugepages: HugePages,
    /// NUMA node for the arenas; `None` takes the device's (`numa_node` in sysfs).
    pub numa_node: Option<u32>,
    /// How long to wait for the firmware to leave `initializing` before the command
    /// queue is programmed (Linux's pre-initializing wait).
    pub fw_ready_timeout: Duration,
    /// Whether to make that wait at all; `false` checks only the revisions
    /// ([`check_cmdif`]) and leaves the wait to the driver's bring-up, after the command
    /// queue address is written (rdma-core's order).
    pub pre_init_wait: bool,
    /// At most this many MSI-X vectors get an eventfd (0: poll only).
    pub max_msix_vectors: u32,
    /// Whether QPs copy single small WQEs through BlueFlame ([`Bus::blueflame`]).
    /// Off by default: vfio-pci maps BAR0 uncached, so a BlueFlame copy is eight
    /// PCIe writes per 64 bytes where the doorbell is one (Linux's `mlx5_ib` and
    /// rdma-core's VFIO provider use no BlueFlame without write-combining). On, to
    /// measure one against the other (`docs/vfio.md` §6). The default is `true`
    /// only when the environment has [`BLUEFLAME_ENV`]`=1`, so that the CLI and
    /// the `libibverbs` replacement can be switched without a rebuild.
    pub blueflame: bool,
}

impl Default for VfioConfig {
    fn default() -> Self {
        VfioConfig {
            dev_root: PathBuf::from("/dev/vfio"),
            sysfs: Sysfs::default(),
            arena_bytes: HUGE_PAGE,
            hugepages: HugePages::Prefer,
            numa_node: None,
            fw_ready_timeout: FW_READY_TIMEOUT,
            pre_init_wait: true,
            max_msix_vectors: u32::MAX,
            blueflame: blueflame_from_env(std::env::var_os(BLUEFLAME_ENV).as_deref()),
        }
    }
}

/// What the sysfs pre-flight found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preflight {
    /// The function's ids, driver, group and node.
    pub device: PciDeviceInfo,
    /// The ConnectX model.
    pub model: &'static str,
    /// The IOMMU group number.
    pub group: u32,
    /// Every device of the group.
    pub members: Vec<GroupMember>,
}

/// Checks in sysfs (and the process limits) everything that can be checked before
/// touching `/dev/vfio`: the function exists, is a ConnectX, the IOMMU is on, the
/// function is bound to vfio-pci, its group is viable, and hugepages and the memlock
/// limit suffice for the first arena.
pub fn preflight(bdf: &PciAddress, cfg: &VfioConfig) -> Result<Preflight, VfioError> {
    let sysfs = &cfg.sysfs;
    let device = sysfs.pci_device(bdf)?;
    let model = connectx_model(device.vendor, device.device).ok_or(VfioError::NotConnectX {
        bdf: *bdf,
        vendor: device.vendor,
        device: device.device,
    })?;
    let group = device.iommu_group.ok_or_else(|| VfioError::IommuDisabled {
        bdf: *bdf,
        groups_dir: sysfs.iommu_groups_dir(),
        groups_present: sysfs.iommu_groups_present(),
    })?;
    if !device.driver.as_deref().is_some_and(is_vfio_driver) {
        return Err(VfioError::NotBoundToVfio {
            bdf: *bdf,
            driver: device.driver.clone(),
        });
    }
    let members = sysfs.group_members(group)?;
    let offenders: Vec<GroupMember> = members
        .iter()
        .filter(|m| !driver_keeps_group_viable(m.driver.as_deref()))
        .cloned()
        .collect();
    if !offenders.is_empty() {
        return Err(VfioError::GroupNotViable {
            bdf: *bdf,
            group,
            offenders,
            members,
        });
    }
    let arena = cfg.arena_bytes.max(1).div_ceil(HUGE_PAGE) * HUGE_PAGE;
    if cfg.hugepages == HugePages::Require {
        let node = cfg.numa_node.or(device.numa_node);
        let needed = (arena / HUGE_PAGE) as u64;
        let (counts, node) = match sysfs.hugepages(2048, node) {
            Some(c) => (Some(c), node),
            None => (sysfs.hugepages(2048, None), None),
        };
        let c = counts.unwrap_or(HugepageCounts { total: 0, free: 0 });
        if c.free < needed {
            return Err(VfioError::NoHugepages {
                needed,
                free: c.free,
                total: c.total,
                node,
            });
        }
    }
    let limit = memlock_limit().map_err(|e| VfioError::os("getrlimit(RLIMIT_MEMLOCK)", e))?;
    check_memlock(arena as u64, limit, has_cap_ipc_lock())?;
    Ok(Preflight {
        device,
        model,
        group,
        members,
    })
}

/// What was found while opening the device.
#[derive(Clone, Debug)]
pub struct VfioDeviceInfo {
    /// The function.
    pub bdf: PciAddress,
    /// The ConnectX model.
    pub model: &'static str,
    /// PCI vendor and device id.
    pub pci_id: (u16, u16),
    /// The IOMMU group.
    pub group: u32,
    /// The NUMA node the arenas are placed on.
    pub numa_node: Option<u32>,
    /// Firmware revision and command interface revision.
    pub firmware: FirmwareInfo,
    /// IOMMU page sizes and IOVA ranges.
    pub iommu: IommuInfo,
    /// BAR0 length.
    pub bar0_len: usize,
    /// The PCI command register before the driver set memory space and bus master.
    pub pci_command_before: u16,
}

/// BAR0 seen as a bus with no DMA, for [`check_bar0`] right after mapping.
struct Bar0Only<'a>(&'a Mmio);

impl Bus for Bar0Only<'_> {
    fn bar0_len(&self) -> usize {
        self.0.len()
    }
    fn read32(&self, off: usize) -> u32 {
        self.0.read32(off)
    }
    fn write32(&self, off: usize, value: u32) {
        self.0.write32(off, value)
    }
    fn write64(&self, off: usize, value: u64) {
        self.0.write64(off, value)
    }
    fn write_block64(&self, off: usize, block: &Block64) {
        self.0.write_block64(off, block)
    }
    fn dma_map(&self, _vaddr: usize, len: usize, _perm: DmaPerm) -> Result<u64, BusError> {
        Err(BusError::MapRefused {
            len,
            reason: "no DMA before the IOMMU is set up".into(),
        })
    }
    fn dma_unmap(&self, iova: u64, len: usize) -> Result<(), BusError> {
        Err(BusError::NotMapped { iova, len })
    }
}

/// A ConnectX function opened through VFIO: BAR0 MMIO, IOMMU DMA, MSI-X eventfds.
///
/// Fields drop in declaration order, which is the teardown order.
pub struct VfioBus {
    bus_master: BusMaster,
    msix: Option<Msix>,
    mmio: Mmio,
    /// BAR0's offset in the device file (`VFIO_DEVICE_GET_REGION_INFO`).
    bar0_offset: u64,
    dma: Mutex<DmaSpace<Container>>,
    device: Arc<DeviceFd>,
    group: Group,
    container: Arc<Container>,
    info: VfioDeviceInfo,
    /// [`VfioConfig::blueflame`].
    blueflame: bool,
}

impl std::fmt::Debug for VfioBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioBus")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl VfioBus {
    /// Opens `bdf` (see the module documentation for the steps and their errors).
    pub fn open(bdf: &PciAddress, cfg: &VfioConfig) -> Result<Self, VfioError> {
        let container = Container::open(&cfg.dev_root.join("vfio"))?;
        let pre = preflight(bdf, cfg)?;
        container.check_api()?;
        let container = Arc::new(container);
        let mut group = Group::open(&cfg.dev_root, pre.group)?;
        if !group.status()?.viable {
            return Err(VfioError::GroupNotViableKernel {
                group: pre.group,
                members: cfg.sysfs.group_members(pre.group).unwrap_or(pre.members),
            });
        }
        group.set_container(&container)?;
        container.set_iommu()?;
        let iommu = container.iommu_info()?;
        let device = Arc::new(DeviceFd::new(group.device_fd(&bdf.to_string())?));
        let dinfo = device.info()?;
        if dinfo.flags & uapi::VFIO_DEVICE_FLAGS_PCI == 0 {
            return Err(VfioError::NotPciDevice {
                bdf: *bdf,
                flags: dinfo.flags,
            });
        }
        let bar = device.region_info(uapi::VFIO_PCI_BAR0_REGION_INDEX)?;
        if bar.size < MIN_BAR0_LEN as u64 {
            return Err(VfioError::Bar0TooSmall {
                bdf: *bdf,
                len: bar.size,
                min: MIN_BAR0_LEN as u64,
            });
        }
        if !bar.mappable() {
            return Err(VfioError::Bar0NotMappable {
                bdf: *bdf,
                flags: bar.flags,
            });
        }
        let cfg_region = device.region_info(uapi::VFIO_PCI_CONFIG_REGION_INDEX)?;
        let bus_master = BusMaster::enable(&device, cfg_region)?;
        let bar_len = usize::try_from(bar.size).map_err(|_| VfioError::Bar0NotMappable {
            bdf: *bdf,
            flags: bar.flags,
        })?;
        let mmio = Mmio::map(device.file(), bar.offset, bar_len)
            .map_err(|e| VfioError::os("mmap of BAR0", e))?;
        let firmware = if cfg.pre_init_wait {
            check_bar0(&Bar0Only(&mmio), cfg.fw_ready_timeout, FW_READY_POLL)?
        } else {
            check_cmdif(&Bar0Only(&mmio))?
        };
        let numa_node = cfg.numa_node.or(pre.device.numa_node);
        let mut dma = DmaSpace::new(
            Arc::clone(&container),
            &iommu,
            ArenaPolicy {
                arena_len: cfg.arena_bytes,
                hugepages: cfg.hugepages,
                node: numa_node,
                sysfs: cfg.sysfs.clone(),
            },
        );
        dma.grow(cfg.arena_bytes)?;
        let msix = match Msix::enable(&device, cfg.max_msix_vectors) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(%bdf, "MSI-X unavailable ({e}); event queues will be polled");
                None
            }
        };
        tracing::info!(
            %bdf,
            model = pre.model,
            fw = %firmware,
            group = pre.group,
            numa_node,
            bar0_len = bar_len,
            msix = msix.as_ref().map_or(0, Msix::len),
            "ConnectX opened through VFIO"
        );
        let info = VfioDeviceInfo {
            bdf: *bdf,
            model: pre.model,
            pci_id: (pre.device.vendor, pre.device.device),
            group: pre.group,
            numa_node,
            firmware,
            iommu,
            bar0_len: bar_len,
            pci_command_before: bus_master.before,
        };
        Ok(VfioBus {
            bus_master,
            msix,
            mmio,
            bar0_offset: bar.offset,
            dma: Mutex::new(dma),
            device,
            group,
            container,
            info,
            blueflame: cfg.blueflame,
        })
    }

    /// What was found while opening.
    pub fn info(&self) -> &VfioDeviceInfo {
        &self.info
    }

    /// Number of MSI-X vectors with an eventfd (0: poll).
    pub fn msix_vectors(&self) -> usize {
        self.msix.as_ref().map_or(0, Msix::len)
    }

    /// Carves `len` bytes aligned to `align` (4 KiB to 2 MiB) out of a DMA arena,
    /// growing the arenas when needed. The memory is zeroed when first handed out.
    pub fn alloc_dma(&self, len: usize, align: usize) -> Result<DmaChunk, VfioError> {
        self.lock_dma().alloc(len, align)
    }

    /// Gives a chunk from [`VfioBus::alloc_dma`] back.
    pub fn free_dma(&self, chunk: DmaChunk) -> Result<(), BusError> {
        self.lock_dma().free(chunk)
    }

    /// Live IOMMU mappings (arenas plus user mappings).
    pub fn dma_mappings(&self) -> usize {
        self.lock_dma().mappings()
    }

    /// Number of DMA arenas, and how many of them are hugepage-backed.
    pub fn arenas(&self) -> (usize, usize) {
        self.lock_dma().arena_count()
    }

    fn lock_dma(&self) -> std::sync::MutexGuard<'_, DmaSpace<Container>> {
        // A panic while holding the lock leaves the bookkeeping consistent (every
        // mutation is completed before returning), so a poisoned lock is still usable.
        self.dma.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The group, device and container, for tools that need the raw fds.
    pub fn parts(&self) -> (&Group, &DeviceFd, &Container) {
        (&self.group, &self.device, &self.container)
    }

    /// Maps BAR0's page at `off` (a UAR page, the clock page) into the process for
    /// the process to keep and unmap, as Linux's `mlx5_ib_mmap` maps a UAR page for
    /// libmlx5: one page of the device file at BAR0's offset, `mmap(MAP_SHARED)`;
    /// a page outside BAR0 or not page-aligned is EINVAL.
    pub fn map_bar0_page(&self, off: usize, writable: bool) -> std::io::Result<NonNull<u8>> {
        region::map_region_page(
            self.device.file(),
            self.bar0_offset,
            self.mmio.len() as u64,
            off,
            writable,
        )
    }

    /// The bus-master guard (the command register as found).
    pub fn bus_master(&self) -> &BusMaster {
        &self.bus_master
    }
}

impl Bus for VfioBus {
    #[inline]
    fn bar0_len(&self) -> usize {
        self.mmio.len()
    }

    #[inline]
    fn read32(&self, off: usize) -> u32 {
        self.mmio.read32(off)
    }

    #[inline]
    fn write32(&self, off: usize, value: u32) {
        self.mmio.write32(off, value)
    }

    #[inline]
    fn write64(&self, off: usize, value: u64) {
        self.mmio.write64(off, value)
    }

    #[inline]
    fn write_block64(&self, off: usize, block: &Block64) {
        self.mmio.write_block64(off, block)
    }

    /// BAR0's mapping itself ([`Mmio::direct_reg`]: `None` unless `off` and `len`
    /// are whole words, `len > 0`, and `off..off + len` neither wraps nor leaves
    /// BAR0), as rdma-core's `mlx5_vfio` rings its UARs through its mapping.
    ///
    /// Valid while the bus lives, as the contract asks: the mapping belongs to
    /// `self.mmio`, which is never replaced and is unmapped only when the bus is
    /// dropped. Every user keeps the bus alive meanwhile: a QP's send ring
    /// (`verbs::fastmem::SqSlots`) holds an `Arc` of the bus next to the pointer,
    /// so the bus cannot be dropped (and BAR0 unmapped) while a QP can still store
    /// to its doorbell. The mapping is uncached, so the stores need nothing after
    /// them. (While the function's memory-space bit is clear, during a reset for
    /// instance, vfio-pci zaps the user mapping of BAR0 and any access faults, a
    /// direct store as much as [`Mmio::write64`]. The driver neither resets the
    /// function nor clears that bit while the bus lives; only bus mastering is
    /// cleared, on drop.)
    #[inline]
    fn direct_reg(&self, off: usize, len: usize) -> Option<NonNull<AtomicU64>> {
        self.mmio.direct_reg(off, len)
    }

    /// [`VfioConfig::blueflame`] (off by default: BAR0 is mapped uncached).
    #[inline]
    fn blueflame(&self) -> bool {
        self.blueflame
    }

    #[inline(always)]
    fn wmb(&self) {
        wmb()
    }

    #[inline(always)]
    fn rmb(&self) {
        rmb()
    }

    fn dma_map(&self, vaddr: usize, len: usize, perm: DmaPerm) -> Result<u64, BusError> {
        self.lock_dma().map(vaddr, len, perm)
    }

    fn dma_unmap(&self, iova: u64, len: usize) -> Result<(), BusError> {
        self.lock_dma().unmap(iova, len)
    }

    fn irq_eventfd(&self, vector: u16) -> Option<i32> {
        self.msix.as_ref()?.eventfd(vector)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn blueflame_is_on_only_for_env_value_1() {
        assert!(blueflame_from_env(Some(OsStr::new("1"))));
        for off in [
            None,
            Some(""),
            Some("0"),
            Some("yes"),
            Some("1 "),
            Some("true"),
        ] {
            assert!(!blueflame_from_env(off.map(OsStr::new)), "{off:?}");
        }
    }
}

//! The VFIO device fd: device and region information, PCI config space access, the
//! command register (memory space and bus master), IRQ information.
//!
//! Config space is read and written with `pread`/`pwrite` at the config region's
//! offset (rdma-core `mlx5_vfio_enable_pci_cmd`, reference §6.2 step 6).

use std::fs::File;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use vfio_bindings::bindings::vfio as uapi;

use super::error::VfioError;
use super::ioctl::{self, ioctl_ptr};

/// `PCI_COMMAND`, the command register's offset in config space.
pub const PCI_COMMAND: u64 = 0x4;
/// `PCI_COMMAND_MEMORY`: the function answers memory-space (BAR) accesses.
pub const PCI_COMMAND_MEMORY: u16 = 1 << 1;
/// `PCI_COMMAND_MASTER`: the function may initiate DMA.
pub const PCI_COMMAND_MASTER: u16 = 1 << 2;

/// What `VFIO_DEVICE_GET_INFO` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// `VFIO_DEVICE_FLAGS_*`.
    pub flags: u32,
    /// Number of regions (max index + 1).
    pub num_regions: u32,
    /// Number of IRQ indexes.
    pub num_irqs: u32,
}

/// What `VFIO_DEVICE_GET_REGION_INFO` says about one region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionInfo {
    /// Region index (BAR0 = 0, config = 7).
    pub index: u32,
    /// `VFIO_REGION_INFO_FLAG_*` (READ 1, WRITE 2, MMAP 4, CAPS 8).
    pub flags: u32,
    /// Size in bytes.
    pub size: u64,
    /// Offset of the region in the device fd (for pread/pwrite/mmap).
    pub offset: u64,
}

impl RegionInfo {
    /// Whether the region can be mmapped.
    pub fn mappable(&self) -> bool {
        self.flags & uapi::VFIO_REGION_INFO_FLAG_MMAP != 0
    }
}

/// What `VFIO_DEVICE_GET_IRQ_INFO` says about one IRQ index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IrqInfo {
    /// `VFIO_IRQ_INFO_*` (EVENTFD 1, MASKABLE 2, AUTOMASKED 4, NORESIZE 8).
    pub flags: u32,
    /// Number of vectors.
    pub count: u32,
}

/// An open VFIO device.
#[derive(Debug)]
pub struct DeviceFd {
    file: File,
}

impl AsFd for DeviceFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl DeviceFd {
    /// Wraps the fd returned by `VFIO_GROUP_GET_DEVICE_FD`.
    pub fn new(fd: OwnedFd) -> Self {
        DeviceFd { file: fd.into() }
    }

    /// The file, for mmapping regions.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// `VFIO_DEVICE_GET_INFO`.
    pub fn info(&self) -> Result<DeviceInfo, VfioError> {
        let mut info = uapi::vfio_device_info {
            argsz: size_of::<uapi::vfio_device_info>() as u32,
            ..Default::default()
        };
        // SAFETY: `info` is a complete vfio_device_info with argsz = its size; the
        // kernel writes at most that many bytes (ioctl module docs on the 20/24-byte
        // difference).
        unsafe { ioctl_ptr(self.as_fd(), ioctl::VFIO_DEVICE_GET_INFO, &mut info) }
            .map_err(|e| VfioError::ioctl("VFIO_DEVICE_GET_INFO", e))?;
        Ok(DeviceInfo {
            flags: info.flags,
            num_regions: info.num_regions,
            num_irqs: info.num_irqs,
        })
    }

    /// `VFIO_DEVICE_GET_REGION_INFO` for `index`.
    pub fn region_info(&self, index: u32) -> Result<RegionInfo, VfioError> {
        let mut info = uapi::vfio_region_info {
            argsz: size_of::<uapi::vfio_region_info>() as u32,
            index,
            ..Default::default()
        };
        // SAFETY: `info` is a complete vfio_region_info with argsz = its size; with that
        // argsz the kernel writes no capability chain beyond it.
        unsafe { ioctl_ptr(self.as_fd(), ioctl::VFIO_DEVICE_GET_REGION_INFO, &mut info) }
            .map_err(|e| VfioError::ioctl("VFIO_DEVICE_GET_REGION_INFO", e))?;
        Ok(RegionInfo {
            index,
            flags: info.flags,
            size: info.size,
            offset: info.offset,
        })
    }

    /// `VFIO_DEVICE_GET_IRQ_INFO` for `index` (MSI-X is `VFIO_PCI_MSIX_IRQ_INDEX`).
    pub fn irq_info(&self, index: u32) -> Result<IrqInfo, VfioError> {
        let mut info = uapi::vfio_irq_info {
            argsz: size_of::<uapi::vfio_irq_info>() as u32,
            index,
            ..Default::default()
        };
        // SAFETY: `info` is a complete vfio_irq_info with argsz = its size.
        unsafe { ioctl_ptr(self.as_fd(), ioctl::VFIO_DEVICE_GET_IRQ_INFO, &mut info) }
            .map_err(|e| VfioError::ioctl("VFIO_DEVICE_GET_IRQ_INFO", e))?;
        Ok(IrqInfo {
            flags: info.flags,
            count: info.count,
        })
    }

    /// `VFIO_DEVICE_SET_IRQS` with a prepared buffer (see `irq::irq_set_buffer`): a
    /// `vfio_irq_set` header whose argsz is the buffer's length in bytes, then data.
    pub(crate) fn set_irqs(&self, buf: &mut [u32]) -> io::Result<()> {
        let argsz = buf.first().copied().unwrap_or(0) as usize;
        if buf.len() * 4 < size_of::<uapi::vfio_irq_set>() || argsz > buf.len() * 4 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: the buffer holds a vfio_irq_set header (checked length) whose argsz
        // does not exceed the buffer; the kernel reads argsz bytes and writes nothing.
        unsafe { ioctl_ptr(self.as_fd(), ioctl::VFIO_DEVICE_SET_IRQS, buf.as_mut_ptr()) }
            .map(|_| ())
    }

    /// Reads the 16-bit config space register at `off` through the config region.
    pub fn config_read16(&self, cfg: &RegionInfo, off: u64) -> io::Result<u16> {
        let mut b = [0u8; 2];
        self.file.read_exact_at(&mut b, cfg.offset + off)?;
        // PCI config space is little-endian.
        Ok(u16::from_le_bytes(b))
    }

    /// Writes the 16-bit config space register at `off` through the config region.
    pub fn config_write16(&self, cfg: &RegionInfo, off: u64, v: u16) -> io::Result<()> {
        self.file.write_all_at(&v.to_le_bytes(), cfg.offset + off)
    }
}

/// Memory space and bus mastering switched on for the life of the guard; bus
/// mastering (the function's permission to DMA) is switched off again on drop, so a
/// failure halfway through opening, or closing the bus, stops the device's DMA before
/// the DMA mappings go away.
#[derive(Debug)]
pub struct BusMaster {
    device: Arc<DeviceFd>,
    cfg: RegionInfo,
    /// The command register as found.
    pub before: u16,
}

impl BusMaster {
    /// Sets `PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER` (read-modify-write).
    pub fn enable(device: &Arc<DeviceFd>, cfg: RegionInfo) -> Result<Self, VfioError> {
        let before = device
            .config_read16(&cfg, PCI_COMMAND)
            .map_err(|e| VfioError::os("read of the PCI command register", e))?;
        device
            .config_write16(
                &cfg,
                PCI_COMMAND,
                before | PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER,
            )
            .map_err(|e| VfioError::os("write of the PCI command register", e))?;
        Ok(BusMaster {
            device: Arc::clone(device),
            cfg,
            before,
        })
    }
}

impl Drop for BusMaster {
    fn drop(&mut self) {
        let r = self
            .device
            .config_read16(&self.cfg, PCI_COMMAND)
            .and_then(|v| {
                self.device
                    .config_write16(&self.cfg, PCI_COMMAND, v & !PCI_COMMAND_MASTER)
            });
        if let Err(e) = r {
            tracing::warn!("clearing bus mastering failed: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A regular file stands in for the device fd: config space at offset 0x1000.
    #[test]
    fn bus_master_guard_sets_and_clears_the_command_bits() {
        let path = std::env::temp_dir().join(format!("ferroverbs-vfio-cfg-{}", std::process::id()));
        let mut cfg_bytes = vec![0u8; 0x1100];
        cfg_bytes[0x1004] = 0x00; // command register: everything off
        cfg_bytes[0x1005] = 0x04; // bit 10 (INTx disable) set
        std::fs::write(&path, &cfg_bytes).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let dev = Arc::new(DeviceFd::new(file.into()));
        let cfg = RegionInfo {
            index: 7,
            flags: 3,
            size: 256,
            offset: 0x1000,
        };
        let guard = BusMaster::enable(&dev, cfg).unwrap();
        assert_eq!(guard.before, 0x0400);
        assert_eq!(dev.config_read16(&cfg, PCI_COMMAND).unwrap(), 0x0406);
        assert!(dev.info().is_err(), "a regular file is not a VFIO device");
        drop(guard);
        assert_eq!(dev.config_read16(&cfg, PCI_COMMAND).unwrap(), 0x0402);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(
            &bytes[0x1004..0x1006],
            &[0x02, 0x04],
            "little-endian in config space"
        );
        std::fs::remove_file(&path).unwrap();
    }
}

//! The VFIO container (`/dev/vfio/vfio`): the IOMMU context that groups join and DMA
//! mappings live in.
//!
//! Opening sequence (rdma-core `mlx5_vfio_open_fds`, reference §6.2): open the node,
//! `VFIO_GET_API_VERSION` must be `VFIO_API_VERSION` (0), `VFIO_CHECK_EXTENSION` must
//! report `VFIO_TYPE1v2_IOMMU`; after the first group has joined, `VFIO_SET_IOMMU`
//! selects Type1v2. Closing the fd (on drop) tears down the IOMMU domain and any
//! mapping left in it.

use std::fs::{File, OpenOptions};
use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use ferroverbs_hw::DmaPerm;
use vfio_bindings::bindings::vfio as uapi;

use super::dma::IommuMapper;
use super::error::VfioError;
use super::ioctl::{self, ioctl_none, ioctl_ptr, ioctl_val};
use super::iova::{info_argsz, parse_iommu_info, IommuInfo};

/// Opens a VFIO character device read-write, turning "permission denied" into
/// [`VfioError::PermissionDenied`] (with the node's owner and mode) and "no such
/// file" into `missing()`.
pub(crate) fn open_node(
    path: &Path,
    missing: impl FnOnce() -> VfioError,
) -> Result<File, VfioError> {
    match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => Ok(f),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(missing()),
        Err(e)
            if e.raw_os_error() == Some(libc::EACCES) || e.raw_os_error() == Some(libc::EPERM) =>
        {
            Err(permission_denied(path))
        }
        Err(e) => Err(VfioError::os(
            "open",
            io::Error::new(e.kind(), format!("{path:?}: {e}")),
        )),
    }
}

/// The [`VfioError::PermissionDenied`] for `path`, with its owner and mode.
pub(crate) fn permission_denied(path: &Path) -> VfioError {
    let (uid, gid, mode) = std::fs::metadata(path)
        .map(|m| (m.uid(), m.gid(), m.mode() & 0o7777))
        .unwrap_or((0, 0, 0));
    VfioError::PermissionDenied {
        path: path.to_path_buf(),
        uid,
        gid,
        mode,
    }
}

/// An open VFIO container.
#[derive(Debug)]
pub struct Container {
    fd: OwnedFd,
}

impl AsFd for Container {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Container {
    /// Opens the container node (normally `/dev/vfio/vfio`). A missing node means the
    /// VFIO modules are not loaded.
    pub fn open(path: &Path) -> Result<Self, VfioError> {
        let f = open_node(path, || VfioError::ModuleNotLoaded {
            path: path.to_path_buf(),
        })?;
        Ok(Container { fd: f.into() })
    }

    /// Checks the API version and the Type1v2 IOMMU extension.
    pub fn check_api(&self) -> Result<(), VfioError> {
        let v = ioctl_none(self.as_fd(), ioctl::VFIO_GET_API_VERSION)
            .map_err(|e| VfioError::ioctl("VFIO_GET_API_VERSION", e))?;
        if v != uapi::VFIO_API_VERSION as i32 {
            return Err(VfioError::ApiVersion { found: v });
        }
        let ok = ioctl_val(
            self.as_fd(),
            ioctl::VFIO_CHECK_EXTENSION,
            uapi::VFIO_TYPE1v2_IOMMU as libc::c_ulong,
        )
        .map_err(|e| VfioError::ioctl("VFIO_CHECK_EXTENSION", e))?;
        if ok == 0 {
            return Err(VfioError::NoType1v2);
        }
        Ok(())
    }

    /// Selects the Type1v2 IOMMU (valid once a group has joined).
    pub fn set_iommu(&self) -> Result<(), VfioError> {
        ioctl_val(
            self.as_fd(),
            ioctl::VFIO_SET_IOMMU,
            uapi::VFIO_TYPE1v2_IOMMU as libc::c_ulong,
        )
        .map_err(|e| VfioError::ioctl("VFIO_SET_IOMMU", e))?;
        Ok(())
    }

    /// Page sizes and valid IOVA ranges (`VFIO_IOMMU_GET_INFO`), asking again with the
    /// larger `argsz` the kernel reports when the capability chain does not fit.
    pub fn iommu_info(&self) -> Result<IommuInfo, VfioError> {
        let mut argsz = size_of::<uapi::vfio_iommu_type1_info>();
        for _ in 0..4 {
            // u64 words keep the buffer 8-byte aligned like the structure.
            let mut buf = vec![0u64; argsz.div_ceil(8)];
            let bytes_len = buf.len() * 8;
            // argsz is the structure's first u32, in host byte order.
            let mut w0 = [0u8; 8];
            w0[..4].copy_from_slice(&(argsz as u32).to_ne_bytes());
            buf[0] = u64::from_ne_bytes(w0);
            // SAFETY: the buffer owns `bytes_len >= argsz` bytes, 8-byte aligned, and
            // starts with argsz: the kernel writes at most argsz bytes of a
            // vfio_iommu_type1_info and its capabilities into it.
            unsafe { ioctl_ptr(self.as_fd(), ioctl::VFIO_IOMMU_GET_INFO, buf.as_mut_ptr()) }
                .map_err(|e| VfioError::ioctl("VFIO_IOMMU_GET_INFO", e))?;
            let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
            let wanted = info_argsz(&bytes).unwrap_or(0) as usize;
            if wanted > argsz && wanted <= 1 << 20 {
                argsz = wanted;
                continue;
            }
            return parse_iommu_info(&bytes[..argsz.min(bytes_len)]).map_err(|e| VfioError::Dma {
                len: 0,
                reason: format!("IOMMU info capability chain: {e}"),
            });
        }
        Err(VfioError::Dma {
            len: 0,
            reason: "VFIO_IOMMU_GET_INFO kept asking for a larger buffer".into(),
        })
    }
}

impl IommuMapper for Container {
    unsafe fn map(&self, vaddr: usize, iova: u64, len: u64, perm: DmaPerm) -> io::Result<()> {
        let mut flags = 0;
        if perm.read {
            flags |= uapi::VFIO_DMA_MAP_FLAG_READ;
        }
        if perm.write {
            flags |= uapi::VFIO_DMA_MAP_FLAG_WRITE;
        }
        let mut arg = uapi::vfio_iommu_type1_dma_map {
            argsz: size_of::<uapi::vfio_iommu_type1_dma_map>() as u32,
            flags,
            vaddr: vaddr as u64,
            iova,
            size: len,
        };
        // SAFETY: `arg` is a complete vfio_iommu_type1_dma_map whose argsz is its size;
        // the kernel only reads it. That the memory at vaddr stays valid while mapped is
        // the caller's promise (this function's contract).
        unsafe { ioctl_ptr(self.as_fd(), ioctl::VFIO_IOMMU_MAP_DMA, &mut arg) }.map(|_| ())
    }

    fn unmap(&self, iova: u64, len: u64) -> io::Result<()> {
        let mut arg = uapi::vfio_iommu_type1_dma_unmap {
            argsz: size_of::<uapi::vfio_iommu_type1_dma_unmap>() as u32,
            flags: 0,
            iova,
            size: len,
            data: Default::default(),
        };
        // SAFETY: `arg` is a complete vfio_iommu_type1_dma_unmap (no dirty bitmap, so no
        // trailing data) whose argsz is its size; the kernel writes back `size`.
        unsafe { ioctl_ptr(self.as_fd(), ioctl::VFIO_IOMMU_UNMAP_DMA, &mut arg) }?;
        if arg.size != len {
            return Err(io::Error::other(format!(
                "unmapped {} bytes at IOVA {iova:#x}, expected {len}",
                arg.size
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_container_means_module_not_loaded() {
        let e = Container::open(Path::new("/nonexistent/dev/vfio/vfio")).unwrap_err();
        assert!(matches!(e, VfioError::ModuleNotLoaded { .. }), "{e}");
        assert!(e.to_string().contains("modprobe vfio-pci"));
    }

    #[test]
    fn a_file_that_is_not_a_container_fails_the_api_check() {
        let c = Container::open(Path::new("/dev/null")).unwrap();
        match c.check_api() {
            Err(VfioError::Ioctl { op, source }) => {
                assert_eq!(op, "VFIO_GET_API_VERSION");
                assert_eq!(source.raw_os_error(), Some(libc::ENOTTY));
            }
            other => panic!("{other:?}"),
        }
        assert!(c.iommu_info().is_err());
        assert!(c.unmap(0x10000, 4096).is_err());
    }

    #[test]
    fn permission_denied_names_owner_and_mode() {
        let e = permission_denied(Path::new("/dev/null"));
        match &e {
            VfioError::PermissionDenied { uid, mode, .. } => {
                assert_eq!(*uid, 0);
                assert_eq!(*mode, 0o666);
            }
            e => panic!("{e:?}"),
        }
        assert!(e.to_string().contains("mode 666"), "{e}");
    }
}

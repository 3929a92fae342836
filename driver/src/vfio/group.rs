//! The VFIO group (`/dev/vfio/<N>`): the unit of IOMMU isolation a device belongs to.
//!
//! Sequence (reference §6.2 step 3): open the node, `VFIO_GROUP_GET_STATUS` must have
//! `VIABLE`, `VFIO_GROUP_SET_CONTAINER` joins the container, `VFIO_GROUP_GET_DEVICE_FD`
//! with the device's name gives the device fd. On drop the group leaves its container
//! (`VFIO_GROUP_UNSET_CONTAINER`) before its fd is closed, and releases its reference
//! to the container, which is closed after every group that joined it.

use std::ffi::CString;
use std::fs::File;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use vfio_bindings::bindings::vfio as uapi;

use super::container::{open_node, Container};
use super::error::VfioError;
use super::ioctl::{self, ioctl_none, ioctl_ptr};

/// An open VFIO group.
#[derive(Debug)]
pub struct Group {
    fd: OwnedFd,
    number: u32,
    container: Option<Arc<Container>>,
}

impl AsFd for Group {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The group's status flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupStatus {
    /// Every device of the group is bound to a VFIO driver or to none.
    pub viable: bool,
    /// The group has joined a container.
    pub container_set: bool,
}

impl Group {
    /// Opens `<dev_root>/<number>`.
    pub fn open(dev_root: &Path, number: u32) -> Result<Self, VfioError> {
        let path = dev_root.join(number.to_string());
        let f: File = open_node(&path, || VfioError::GroupNodeMissing { path: path.clone() })?;
        Ok(Group {
            fd: f.into(),
            number,
            container: None,
        })
    }

    /// The group number.
    pub fn number(&self) -> u32 {
        self.number
    }

    /// `VFIO_GROUP_GET_STATUS`.
    pub fn status(&self) -> Result<GroupStatus, VfioError> {
        let mut st = uapi::vfio_group_status {
            argsz: size_of::<uapi::vfio_group_status>() as u32,
            flags: 0,
        };
        // SAFETY: `st` is a complete vfio_group_status with argsz = its size; the kernel
        // writes its flags.
        unsafe { ioctl_ptr(self.as_fd(), ioctl::VFIO_GROUP_GET_STATUS, &mut st) }
            .map_err(|e| VfioError::ioctl("VFIO_GROUP_GET_STATUS", e))?;
        Ok(GroupStatus {
            viable: st.flags & uapi::VFIO_GROUP_FLAGS_VIABLE != 0,
            container_set: st.flags & uapi::VFIO_GROUP_FLAGS_CONTAINER_SET != 0,
        })
    }

    /// Joins `container` (`VFIO_GROUP_SET_CONTAINER`); the group keeps the container
    /// open until it has left it again.
    pub fn set_container(&mut self, container: &Arc<Container>) -> Result<(), VfioError> {
        let mut cfd: libc::c_int = container.as_fd().as_raw_fd();
        // SAFETY: the argument is a pointer to an int holding a live container fd; the
        // kernel only reads it.
        unsafe { ioctl_ptr(self.as_fd(), ioctl::VFIO_GROUP_SET_CONTAINER, &mut cfd) }
            .map_err(|e| VfioError::ioctl("VFIO_GROUP_SET_CONTAINER", e))?;
        self.container = Some(Arc::clone(container));
        Ok(())
    }

    /// A device fd for `name` (the PCI address as sysfs spells it).
    pub fn device_fd(&self, name: &str) -> Result<OwnedFd, VfioError> {
        let c = CString::new(name).map_err(|_| VfioError::Sysfs {
            path: name.into(),
            reason: "device name contains a NUL byte".into(),
        })?;
        // SAFETY: the argument is a NUL-terminated string that outlives the call; the
        // kernel only reads it.
        let fd = unsafe {
            ioctl_ptr(
                self.as_fd(),
                ioctl::VFIO_GROUP_GET_DEVICE_FD,
                c.as_ptr() as *mut libc::c_char,
            )
        }
        .map_err(|e| VfioError::ioctl("VFIO_GROUP_GET_DEVICE_FD", e))?;
        // SAFETY: on success the ioctl returns a new file descriptor that nothing else
        // owns; OwnedFd takes sole ownership and closes it on drop.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.container.take().is_some() {
            if let Err(e) = ioctl_none(self.as_fd(), ioctl::VFIO_GROUP_UNSET_CONTAINER) {
                tracing::warn!(
                    group = self.number,
                    "VFIO_GROUP_UNSET_CONTAINER failed: {e}"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_group_node() {
        let e = Group::open(Path::new("/nonexistent"), 7).unwrap_err();
        match e {
            VfioError::GroupNodeMissing { path } => assert_eq!(path, Path::new("/nonexistent/7")),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn a_non_group_fd_fails_status_with_the_errno() {
        let dir =
            std::env::temp_dir().join(format!("ferroverbs-vfio-group-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("3"), b"").unwrap();
        let g = Group::open(&dir, 3).unwrap();
        assert_eq!(g.number(), 3);
        assert!(matches!(
            g.status(),
            Err(VfioError::Ioctl {
                op: "VFIO_GROUP_GET_STATUS",
                ..
            })
        ));
        assert!(g.device_fd("0000:3b:00.0").is_err());
        drop(g);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

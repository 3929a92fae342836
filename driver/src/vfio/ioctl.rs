//! VFIO ioctl request numbers and the raw `ioctl(2)` calls.
//!
//! Every VFIO ioctl is `_IO(VFIO_TYPE, VFIO_BASE + n)` with `VFIO_TYPE = ';'` and
//! `VFIO_BASE = 100` (Linux `include/uapi/linux/vfio.h`): the number carries no size
//! and no direction, and each argument structure starts with `argsz`. `vfio-bindings`
//! (bindgen output) has the structures and flags but not the numbers, which bindgen
//! cannot translate, so they are built here; `tests/vfio_uapi.rs` compares them with a
//! C program compiled against the installed header.
//!
//! The argument structures are `vfio-bindings`' (generated from Linux 6.6). One is
//! longer than in older headers: `vfio_device_info` gained a trailing `pad` (24 bytes
//! instead of 20 in Linux 6.1). The kernel copies only `minsz` bytes (up to
//! `cap_offset`) and checks `argsz >= minsz`, so the longer structure works on both.

use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsRawFd, BorrowedFd};

use vfio_bindings::bindings::vfio as uapi;

/// The ioctl request type of `libc::ioctl` on this target.
pub type Request = libc::c_ulong;

/// `VFIO_TYPE`, the ioctl magic `';'`.
pub const VFIO_TYPE: u32 = uapi::VFIO_TYPE as u32;
/// `VFIO_BASE`.
pub const VFIO_BASE: u32 = uapi::VFIO_BASE;

// `_IOC_NONE << _IOC_DIRSHIFT`: 0 on the asm-generic layout (x86-64, aarch64, riscv);
// powerpc, mips and sparc encode "no direction" as 1 << 29.
#[cfg(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc64"
))]
const IOC_NONE_BITS: u32 = 1 << 29;
#[cfg(not(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc64"
)))]
const IOC_NONE_BITS: u32 = 0;

/// `_IO(VFIO_TYPE, VFIO_BASE + nr)`.
pub const fn vfio_io(nr: u32) -> Request {
    (IOC_NONE_BITS | (VFIO_TYPE << 8) | (VFIO_BASE + nr)) as Request
}

/// Container: API version, must be `VFIO_API_VERSION` (0).
pub const VFIO_GET_API_VERSION: Request = vfio_io(0);
/// Container: whether an IOMMU type (extension) is supported.
pub const VFIO_CHECK_EXTENSION: Request = vfio_io(1);
/// Container: select the IOMMU type (after the first group is attached).
pub const VFIO_SET_IOMMU: Request = vfio_io(2);
/// Group: `vfio_group_status` (VIABLE, CONTAINER_SET).
pub const VFIO_GROUP_GET_STATUS: Request = vfio_io(3);
/// Group: attach to a container (`int *` container fd).
pub const VFIO_GROUP_SET_CONTAINER: Request = vfio_io(4);
/// Group: detach from its container.
pub const VFIO_GROUP_UNSET_CONTAINER: Request = vfio_io(5);
/// Group: a device fd for a device name (`char *`).
pub const VFIO_GROUP_GET_DEVICE_FD: Request = vfio_io(6);
/// Device: `vfio_device_info`.
pub const VFIO_DEVICE_GET_INFO: Request = vfio_io(7);
/// Device: `vfio_region_info` of one region index.
pub const VFIO_DEVICE_GET_REGION_INFO: Request = vfio_io(8);
/// Device: `vfio_irq_info` of one IRQ index.
pub const VFIO_DEVICE_GET_IRQ_INFO: Request = vfio_io(9);
/// Device: `vfio_irq_set` followed by its data.
pub const VFIO_DEVICE_SET_IRQS: Request = vfio_io(10);
/// Device: function-level reset.
pub const VFIO_DEVICE_RESET: Request = vfio_io(11);
/// Container: `vfio_iommu_type1_info` (shares nr 12 with
/// `VFIO_DEVICE_GET_PCI_HOT_RESET_INFO`; the fd tells them apart).
pub const VFIO_IOMMU_GET_INFO: Request = vfio_io(12);
/// Container: `vfio_iommu_type1_dma_map`.
pub const VFIO_IOMMU_MAP_DMA: Request = vfio_io(13);
/// Container: `vfio_iommu_type1_dma_unmap`.
pub const VFIO_IOMMU_UNMAP_DMA: Request = vfio_io(14);

/// Every request number used, by its UAPI name (for the UAPI conformance test).
pub const REQUESTS: &[(&str, Request)] = &[
    ("VFIO_GET_API_VERSION", VFIO_GET_API_VERSION),
    ("VFIO_CHECK_EXTENSION", VFIO_CHECK_EXTENSION),
    ("VFIO_SET_IOMMU", VFIO_SET_IOMMU),
    ("VFIO_GROUP_GET_STATUS", VFIO_GROUP_GET_STATUS),
    ("VFIO_GROUP_SET_CONTAINER", VFIO_GROUP_SET_CONTAINER),
    ("VFIO_GROUP_UNSET_CONTAINER", VFIO_GROUP_UNSET_CONTAINER),
    ("VFIO_GROUP_GET_DEVICE_FD", VFIO_GROUP_GET_DEVICE_FD),
    ("VFIO_DEVICE_GET_INFO", VFIO_DEVICE_GET_INFO),
    ("VFIO_DEVICE_GET_REGION_INFO", VFIO_DEVICE_GET_REGION_INFO),
    ("VFIO_DEVICE_GET_IRQ_INFO", VFIO_DEVICE_GET_IRQ_INFO),
    ("VFIO_DEVICE_SET_IRQS", VFIO_DEVICE_SET_IRQS),
    ("VFIO_DEVICE_RESET", VFIO_DEVICE_RESET),
    ("VFIO_IOMMU_GET_INFO", VFIO_IOMMU_GET_INFO),
    ("VFIO_IOMMU_MAP_DMA", VFIO_IOMMU_MAP_DMA),
    ("VFIO_IOMMU_UNMAP_DMA", VFIO_IOMMU_UNMAP_DMA),
];

/// Sizes of the argument structures used, by C name.
pub const STRUCT_SIZES: &[(&str, usize)] = &[
    (
        "vfio_info_cap_header",
        size_of::<uapi::vfio_info_cap_header>(),
    ),
    ("vfio_group_status", size_of::<uapi::vfio_group_status>()),
    ("vfio_device_info", size_of::<uapi::vfio_device_info>()),
    ("vfio_region_info", size_of::<uapi::vfio_region_info>()),
    ("vfio_irq_info", size_of::<uapi::vfio_irq_info>()),
    ("vfio_irq_set", size_of::<uapi::vfio_irq_set>()),
    (
        "vfio_iommu_type1_info",
        size_of::<uapi::vfio_iommu_type1_info>(),
    ),
    ("vfio_iova_range", size_of::<uapi::vfio_iova_range>()),
    (
        "vfio_iommu_type1_info_cap_iova_range",
        size_of::<uapi::vfio_iommu_type1_info_cap_iova_range>(),
    ),
    (
        "vfio_iommu_type1_info_dma_avail",
        size_of::<uapi::vfio_iommu_type1_info_dma_avail>(),
    ),
    (
        "vfio_iommu_type1_dma_map",
        size_of::<uapi::vfio_iommu_type1_dma_map>(),
    ),
    (
        "vfio_iommu_type1_dma_unmap",
        size_of::<uapi::vfio_iommu_type1_dma_unmap>(),
    ),
];

/// The UAPI constants the backend relies on, by C name (for the conformance test).
pub const CONSTANTS: &[(&str, u64)] = &[
    ("VFIO_API_VERSION", uapi::VFIO_API_VERSION as u64),
    ("VFIO_TYPE1v2_IOMMU", uapi::VFIO_TYPE1v2_IOMMU as u64),
    (
        "VFIO_GROUP_FLAGS_VIABLE",
        uapi::VFIO_GROUP_FLAGS_VIABLE as u64,
    ),
    (
        "VFIO_GROUP_FLAGS_CONTAINER_SET",
        uapi::VFIO_GROUP_FLAGS_CONTAINER_SET as u64,
    ),
    ("VFIO_DEVICE_FLAGS_PCI", uapi::VFIO_DEVICE_FLAGS_PCI as u64),
    (
        "VFIO_REGION_INFO_FLAG_MMAP",
        uapi::VFIO_REGION_INFO_FLAG_MMAP as u64,
    ),
    (
        "VFIO_PCI_BAR0_REGION_INDEX",
        uapi::VFIO_PCI_BAR0_REGION_INDEX as u64,
    ),
    (
        "VFIO_PCI_CONFIG_REGION_INDEX",
        uapi::VFIO_PCI_CONFIG_REGION_INDEX as u64,
    ),
    (
        "VFIO_PCI_MSIX_IRQ_INDEX",
        uapi::VFIO_PCI_MSIX_IRQ_INDEX as u64,
    ),
    ("VFIO_IRQ_INFO_EVENTFD", uapi::VFIO_IRQ_INFO_EVENTFD as u64),
    (
        "VFIO_IRQ_SET_DATA_NONE",
        uapi::VFIO_IRQ_SET_DATA_NONE as u64,
    ),
    (
        "VFIO_IRQ_SET_DATA_EVENTFD",
        uapi::VFIO_IRQ_SET_DATA_EVENTFD as u64,
    ),
    (
        "VFIO_IRQ_SET_ACTION_TRIGGER",
        uapi::VFIO_IRQ_SET_ACTION_TRIGGER as u64,
    ),
    (
        "VFIO_IOMMU_INFO_PGSIZES",
        uapi::VFIO_IOMMU_INFO_PGSIZES as u64,
    ),
    ("VFIO_IOMMU_INFO_CAPS", uapi::VFIO_IOMMU_INFO_CAPS as u64),
    (
        "VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE",
        uapi::VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE as u64,
    ),
    (
        "VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL",
        uapi::VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL as u64,
    ),
    (
        "VFIO_DMA_MAP_FLAG_READ",
        uapi::VFIO_DMA_MAP_FLAG_READ as u64,
    ),
    (
        "VFIO_DMA_MAP_FLAG_WRITE",
        uapi::VFIO_DMA_MAP_FLAG_WRITE as u64,
    ),
];

macro_rules! members {
    ($($s:ident . $m:ident),* $(,)?) => {
        &[$((stringify!($s), stringify!($m), offset_of!(uapi::$s, $m))),*]
    };
}

/// Offsets of the members read or written, as (struct, member, offset).
pub const MEMBER_OFFSETS: &[(&str, &str, usize)] = members![
    vfio_info_cap_header.id,
    vfio_info_cap_header.version,
    vfio_info_cap_header.next,
    vfio_group_status.flags,
    vfio_device_info.flags,
    vfio_device_info.num_regions,
    vfio_device_info.num_irqs,
    vfio_device_info.cap_offset,
    vfio_region_info.flags,
    vfio_region_info.index,
    vfio_region_info.cap_offset,
    vfio_region_info.size,
    vfio_region_info.offset,
    vfio_irq_info.flags,
    vfio_irq_info.index,
    vfio_irq_info.count,
    vfio_irq_set.flags,
    vfio_irq_set.index,
    vfio_irq_set.start,
    vfio_irq_set.count,
    vfio_irq_set.data,
    vfio_iommu_type1_info.flags,
    vfio_iommu_type1_info.iova_pgsizes,
    vfio_iommu_type1_info.cap_offset,
    vfio_iova_range.start,
    vfio_iova_range.end,
    vfio_iommu_type1_info_cap_iova_range.nr_iovas,
    vfio_iommu_type1_info_cap_iova_range.iova_ranges,
    vfio_iommu_type1_info_dma_avail.avail,
    vfio_iommu_type1_dma_map.flags,
    vfio_iommu_type1_dma_map.vaddr,
    vfio_iommu_type1_dma_map.iova,
    vfio_iommu_type1_dma_map.size,
    vfio_iommu_type1_dma_unmap.flags,
    vfio_iommu_type1_dma_unmap.iova,
    vfio_iommu_type1_dma_unmap.size,
];

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// An ioctl without argument (`VFIO_GET_API_VERSION`, `VFIO_DEVICE_RESET`).
pub(crate) fn ioctl_none(fd: BorrowedFd<'_>, req: Request) -> io::Result<libc::c_int> {
    // SAFETY: the request takes no argument, so the kernel reads and writes no user
    // memory; `fd` is a live descriptor for the duration of the call.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), req as _) })
}

/// An ioctl whose argument is an integer passed by value (`VFIO_CHECK_EXTENSION`,
/// `VFIO_SET_IOMMU`).
pub(crate) fn ioctl_val(
    fd: BorrowedFd<'_>,
    req: Request,
    arg: libc::c_ulong,
) -> io::Result<libc::c_int> {
    // SAFETY: the argument is passed by value and is not dereferenced by the kernel
    // for these requests; `fd` is live for the call.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), req as _, arg) })
}

/// An ioctl whose argument points at `arg`.
///
/// # Safety
/// `T` must be the argument type the kernel expects for `req` on this kind of fd
/// (or a byte buffer at least as long as the `argsz` it carries), with `argsz` set to
/// no more than the bytes `arg` owns: the kernel reads and writes up to that many
/// bytes through the pointer.
pub(crate) unsafe fn ioctl_ptr<T: ?Sized>(
    fd: BorrowedFd<'_>,
    req: Request,
    arg: *mut T,
) -> io::Result<libc::c_int> {
    // SAFETY: forwarded to the caller's contract above; the pointer is valid for the
    // call because it comes from a live borrow in every caller.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), req as _, arg as *mut libc::c_void) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers of reference §6.3 (measured with gcc on x86-64 against Linux 6.1's
    /// `linux/vfio.h`); identical on every asm-generic architecture.
    #[test]
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn request_numbers_match_the_measured_table() {
        let expect: &[(&str, Request)] = &[
            ("VFIO_GET_API_VERSION", 0x3b64),
            ("VFIO_CHECK_EXTENSION", 0x3b65),
            ("VFIO_SET_IOMMU", 0x3b66),
            ("VFIO_GROUP_GET_STATUS", 0x3b67),
            ("VFIO_GROUP_SET_CONTAINER", 0x3b68),
            ("VFIO_GROUP_UNSET_CONTAINER", 0x3b69),
            ("VFIO_GROUP_GET_DEVICE_FD", 0x3b6a),
            ("VFIO_DEVICE_GET_INFO", 0x3b6b),
            ("VFIO_DEVICE_GET_REGION_INFO", 0x3b6c),
            ("VFIO_DEVICE_GET_IRQ_INFO", 0x3b6d),
            ("VFIO_DEVICE_SET_IRQS", 0x3b6e),
            ("VFIO_DEVICE_RESET", 0x3b6f),
            ("VFIO_IOMMU_GET_INFO", 0x3b70),
            ("VFIO_IOMMU_MAP_DMA", 0x3b71),
            ("VFIO_IOMMU_UNMAP_DMA", 0x3b72),
        ];
        assert_eq!(REQUESTS, expect);
    }

    #[test]
    fn structure_sizes_match_the_measured_table() {
        let sizes: std::collections::HashMap<_, _> = STRUCT_SIZES.iter().copied().collect();
        // §6.3: 8, 32, 16, 20 (header of vfio_irq_set), 24, 32, 24; vfio_device_info is
        // 20 in Linux 6.1 and 24 with the `pad` added later (module docs).
        assert_eq!(sizes["vfio_group_status"], 8);
        assert_eq!(sizes["vfio_device_info"], 24);
        assert_eq!(sizes["vfio_region_info"], 32);
        assert_eq!(sizes["vfio_irq_info"], 16);
        assert_eq!(sizes["vfio_irq_set"], 20);
        assert_eq!(sizes["vfio_iommu_type1_info"], 24);
        assert_eq!(sizes["vfio_iommu_type1_dma_map"], 32);
        assert_eq!(sizes["vfio_iommu_type1_dma_unmap"], 24);
        assert_eq!(sizes["vfio_info_cap_header"], 8);
        assert_eq!(sizes["vfio_iova_range"], 16);
        assert_eq!(sizes["vfio_iommu_type1_info_cap_iova_range"], 16);
        let off = |s: &str, m: &str| {
            MEMBER_OFFSETS
                .iter()
                .find(|(a, b, _)| *a == s && *b == m)
                .map(|x| x.2)
                .unwrap()
        };
        assert_eq!(off("vfio_region_info", "size"), 16);
        assert_eq!(off("vfio_region_info", "offset"), 24);
        assert_eq!(off("vfio_iommu_type1_info", "iova_pgsizes"), 8);
        assert_eq!(off("vfio_iommu_type1_info", "cap_offset"), 16);
        assert_eq!(off("vfio_iommu_type1_dma_map", "vaddr"), 8);
        assert_eq!(off("vfio_iommu_type1_dma_map", "iova"), 16);
        assert_eq!(off("vfio_iommu_type1_dma_map", "size"), 24);
        assert_eq!(off("vfio_irq_set", "data"), 20);
        assert_eq!(
            off("vfio_iommu_type1_info_cap_iova_range", "iova_ranges"),
            16
        );
    }

    #[test]
    fn ioctl_on_a_non_vfio_fd_reports_the_errno() {
        let f = std::fs::File::open("/dev/null").unwrap();
        use std::os::fd::AsFd;
        let e = ioctl_none(f.as_fd(), VFIO_GET_API_VERSION).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY));
    }
}

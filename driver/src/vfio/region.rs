//! BAR0 mapped into the process: volatile big-endian MMIO and the CPU barriers.
//!
//! The region is mapped with `memmap2` (`mmap(MAP_SHARED)` of the device fd at the
//! region's offset, as rdma-core maps it) and never exposed as a Rust reference: every
//! access is one volatile load or store of the register's width, so the compiler
//! neither merges, splits, elides nor reorders them. Registers are big-endian on the
//! device (reference §1); values are swapped on little-endian hosts.
//!
//! vfio-pci maps BARs uncached (`vfio_pci_core_mmap` sets `pgprot_noncached`), not
//! write-combining, so every store is its own PCIe write, in program order, and
//! nothing needs flushing after it (rdma-core's `mmio_flush_writes`, an `sfence` on
//! x86-64, exists for write-combining buffers). A BlueFlame block is 8 ascending
//! 8-byte stores, as rdma-core's generic `mmio_memcpy_x64` writes it: correct, but 8
//! writes per WQEBB instead of the one burst of a write-combining mapping. That is
//! why [`VfioBus`](super::VfioBus) turns BlueFlame off unless asked
//! ([`Bus::blueflame`](ferroverbs_hw::Bus::blueflame)), as Linux's `mlx5_ib` reports
//! no BlueFlame register (`bf_reg_size = 0`) when its write-combining test fails and
//! rdma-core's VFIO provider allocates only non-cached UARs (`vfio_devx_alloc_uar`
//! refuses every type but `MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC`).
//!
//! The doorbell registers may also be stored to directly ([`Mmio::direct_reg`],
//! the driver's [`Bus::direct_reg`](ferroverbs_hw::Bus::direct_reg) on VFIO), as
//! rdma-core's `mlx5_vfio` rings the UARs through its one mapping of BAR0
//! (`uar2iova` is a pointer into it): an uncached mapping needs no flush after
//! those stores either.
//!
//! Barriers (rdma-core `util/udma_barrier.h`, as the Bus contract documents them):
//!
//! | | x86-64 | aarch64 |
//! |---|---|---|
//! | [`wmb`] (`udma_to_device_barrier`) | compiler barrier (stores are ordered, UC after WB included) | `dsb st` |
//! | [`rmb`] (`udma_from_device_barrier`) | `lfence` | `dsb ld` |
//!
//! Other architectures fall back to a sequentially consistent fence. (rdma-core
//! since 2024, commit 1ec72764a, uses the lighter `dmb oshst` / `dmb oshld` for the
//! two DMA barriers on aarch64 and keeps `dsb st` for `mmio_wc_start`, the barrier
//! between the doorbell record and the doorbell; `dsb` is at least as strong, and
//! [`wmb`] serves as both.)

use std::fs::File;
use std::io;
use std::ptr::{self, NonNull};
use std::sync::atomic::AtomicU64;

use memmap2::{MmapOptions, MmapRaw};

/// Orders earlier stores to DMA memory before a following MMIO store.
#[inline(always)]
pub fn wmb() {
    #[cfg(target_arch = "x86_64")]
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dsb st` only waits for outstanding stores; it touches no memory or
    // register that Rust knows about.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
}

/// Orders the read of an owner bit before the reads of the entry's body.
#[inline(always)]
pub fn rmb() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `lfence` only orders loads; it touches no memory or register that Rust
    // knows about.
    unsafe {
        core::arch::asm!("lfence", options(nostack, preserves_flags))
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dsb ld` only waits for outstanding loads; no memory or register is
    // touched.
    unsafe {
        core::arch::asm!("dsb ld", options(nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
}

/// A mapped MMIO region (BAR0).
///
/// Out-of-range or misaligned accesses are driver bugs: reads return all ones (what a
/// device that is gone returns) and writes are dropped, with an error logged, rather
/// than touching memory outside the mapping.
#[derive(Debug)]
pub struct Mmio {
    map: MmapRaw,
}

impl Mmio {
    /// Maps `len` bytes of `file` at `offset` read-write and shared.
    pub fn map(file: &File, offset: u64, len: usize) -> io::Result<Self> {
        let map = MmapOptions::new().offset(offset).len(len).map_raw(file)?;
        Ok(Mmio { map })
    }

    /// An anonymous private mapping of `len` bytes standing in for a BAR in tests:
    /// the same `MmapRaw` the device mapping is, backed by memory.
    #[cfg(test)]
    fn anonymous(len: usize) -> io::Result<Self> {
        let map = MmapOptions::new().len(len).map_anon()?.into();
        Ok(Mmio { map })
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Always false for a mapped BAR (mmap refuses empty mappings).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    #[inline]
    fn ok(&self, off: usize, width: usize) -> bool {
        off.is_multiple_of(width) && off.checked_add(width).is_some_and(|e| e <= self.map.len())
    }

    #[cold]
    fn bad_write(&self, off: usize, width: usize) {
        tracing::error!(
            off,
            width,
            len = self.map.len(),
            "MMIO write outside BAR0 or misaligned, dropped"
        );
    }

    /// Reads the big-endian 32-bit register at `off`.
    #[inline]
    pub fn read32(&self, off: usize) -> u32 {
        if !self.ok(off, 4) {
            return u32::MAX;
        }
        // SAFETY: `off..off + 4` is inside the live mapping and 4-byte aligned (the
        // mapping is page aligned); the memory is device registers that are only
        // accessed through volatile operations.
        u32::from_be(unsafe { ptr::read_volatile(self.map.as_ptr().add(off) as *const u32) })
    }

    /// Writes `value` to the big-endian 32-bit register at `off`.
    #[inline]
    pub fn write32(&self, off: usize, value: u32) {
        if !self.ok(off, 4) {
            return self.bad_write(off, 4);
        }
        // SAFETY: in bounds and aligned (checked above); MMIO is only accessed through
        // volatile operations, never through references.
        unsafe { ptr::write_volatile(self.map.as_mut_ptr().add(off) as *mut u32, value.to_be()) }
    }

    /// Writes `value` big-endian to the 64 bits at `off` in one store.
    #[inline]
    pub fn write64(&self, off: usize, value: u64) {
        if !self.ok(off, 8) {
            return self.bad_write(off, 8);
        }
        // SAFETY: in bounds and 8-byte aligned (checked above); volatile-only MMIO.
        unsafe { ptr::write_volatile(self.map.as_mut_ptr().add(off) as *mut u64, value.to_be()) }
    }

    /// Copies a 64-byte block to `off` in ascending 8-byte stores, bytes in order.
    #[inline]
    pub fn write_block64(&self, off: usize, block: &[u8; 64]) {
        if !self.ok(off, 64) {
            return self.bad_write(off, 64);
        }
        let base = self.map.as_mut_ptr();
        for (i, chunk) in block.chunks_exact(8).enumerate() {
            let mut w = [0u8; 8];
            w.copy_from_slice(chunk);
            // SAFETY: `off` is 64-byte aligned and `off + 64` is in bounds (checked
            // above), so each 8-byte slot is in bounds and aligned; volatile-only MMIO.
            // `from_ne_bytes` keeps the bytes in memory order.
            unsafe { ptr::write_volatile(base.add(off + i * 8) as *mut u64, u64::from_ne_bytes(w)) }
        }
    }

    /// The `len` bytes at `off` as 8-byte words the driver may store to directly
    /// (the contract of [`Bus::direct_reg`](ferroverbs_hw::Bus::direct_reg)), or
    /// `None` unless `off` and `len` are multiples of 8, `len` is not 0, `off + len`
    /// does not wrap and lies inside the mapping, and the mapping's start is 8-byte
    /// aligned (it is page aligned; checked rather than assumed, since `AtomicU64`
    /// needs it). The same checks as `MemBus::direct_reg`.
    ///
    /// The pointer is valid as long as this `Mmio` lives: the mapping is only
    /// unmapped when it is dropped (there is no remap). The region is device
    /// memory that Rust never holds a reference to; [`Mmio::write64`] and
    /// [`Mmio::write_block64`] write the same words with volatile stores, so a
    /// direct store of the memory image `u64::from_ne_bytes(v.to_be_bytes())`
    /// puts exactly the bytes of `write64(off, v)` on the bus. The mapping is
    /// uncached (module documentation), so the stores need no flush.
    pub fn direct_reg(&self, off: usize, len: usize) -> Option<NonNull<AtomicU64>> {
        if !off.is_multiple_of(8) || !len.is_multiple_of(8) || len == 0 {
            return None;
        }
        if off.checked_add(len)? > self.map.len() {
            return None;
        }
        let base = self.map.as_mut_ptr();
        if !(base as usize).is_multiple_of(core::mem::align_of::<AtomicU64>()) {
            return None;
        }
        // SAFETY: `off + len <= self.map.len()` (checked above, without wrapping) and
        // `len > 0`, so `off < self.map.len()`: `base + off` is inside the one mapped
        // object `base .. base + self.map.len()`, which is smaller than `isize::MAX`
        // bytes (a mapping always is). The result is 8-byte aligned: the base is
        // (checked) and `off` is a multiple of 8. Derived from the mapping's base, it
        // may address every word of `off .. off + len`, all inside the mapping.
        let p = unsafe { base.add(off) };
        NonNull::new(p.cast::<AtomicU64>())
    }
}

/// The size of a BAR page a process maps (a UAR page, the init segment's clock page).
pub const BAR_PAGE: usize = 4096;

/// The device file offset of the page at `off` of a region that starts at file
/// offset `region_offset` and is `region_len` bytes long, if `off` is a page offset
/// inside the region.
pub fn region_page_offset(region_offset: u64, region_len: u64, off: usize) -> Option<u64> {
    let off = u64::try_from(off).ok()?;
    if !off.is_multiple_of(BAR_PAGE as u64) || off.checked_add(BAR_PAGE as u64)? > region_len {
        return None;
    }
    region_offset.checked_add(off)
}

/// Maps one page of a device region into the process for the process to keep (what
/// Linux's `mlx5_ib_mmap` gives libmlx5 for a UAR page or the clock page:
/// `io_remap_pfn_range` of the BAR page, uncached): `mmap(MAP_SHARED)` of `file` at
/// [`region_page_offset`], read-write or read-only. The mapping belongs to the
/// caller, who unmaps it (`munmap` of [`BAR_PAGE`] bytes); a page outside the region
/// or not page-aligned is `EINVAL`.
pub fn map_region_page(
    file: &File,
    region_offset: u64,
    region_len: u64,
    off: usize,
    writable: bool,
) -> io::Result<NonNull<u8>> {
    use std::os::fd::AsRawFd;
    let at = region_page_offset(region_offset, region_len, off)
        .and_then(|a| libc::off_t::try_from(a).ok())
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    let prot = if writable {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_READ
    };
    // SAFETY: a new shared mapping of one page of the device file, placed by the
    // kernel (no address hint, no MAP_FIXED): no existing memory is touched.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            BAR_PAGE,
            prot,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            at,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    /// Three zeroed pages in a file of this process (`tag` names the test), opened
    /// for reading and writing, to stand in for a device region.
    fn device_file(tag: &str) -> (std::path::PathBuf, std::fs::File) {
        let name = format!("ferroverbs-vfio-{tag}-{}", std::process::id());
        let path = std::env::temp_dir().join(name);
        std::fs::write(&path, vec![0u8; 3 * 4096]).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        (path, file)
    }

    /// A file stands in for the device: mapped shared, the bytes written through the
    /// mapping are the bytes in the file.
    #[test]
    fn mmio_stores_are_big_endian_and_in_place() {
        let (path, file) = device_file("bar");
        // Map the second and third pages, as a region at a nonzero offset.
        let bar = Mmio::map(&file, 4096, 8192).unwrap();
        assert_eq!(bar.len(), 8192);
        assert!(!bar.is_empty());
        bar.write32(0x18, 1);
        bar.write64(0x800, 0x0102_0304_0506_0708);
        let mut blk = [0u8; 64];
        blk.iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = i as u8 ^ 0xa5);
        bar.write_block64(0x1000, &blk);
        wmb();
        rmb();
        assert_eq!(bar.read32(0x18), 1);
        assert_eq!(bar.read32(0x804), 0x0506_0708);
        // Out of range and misaligned: reads are all ones, writes are dropped.
        assert_eq!(bar.read32(8192), u32::MAX);
        assert_eq!(bar.read32(0x19), u32::MAX);
        assert_eq!(bar.read32(usize::MAX - 1), u32::MAX);
        bar.write32(8190, 0xdead_beef);
        bar.write64(0x804, 1);
        bar.write_block64(0x1fc8, &blk);
        drop(bar);
        let bytes = std::fs::read(&path).unwrap();
        let page = &bytes[4096..];
        assert_eq!(&page[0x18..0x1c], &[0, 0, 0, 1]);
        assert_eq!(&page[0x800..0x808], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&page[0x1000..0x1040], &blk[..]);
        assert!(bytes[..4096].iter().all(|&b| b == 0), "offset respected");
        assert!(page[0x1fc8..].iter().all(|&b| b == 0), "dropped writes");
        std::fs::remove_file(&path).unwrap();
    }

    /// The checks of `MemBus::direct_reg` (hw/src/bus.rs, same cases), against an
    /// anonymous mapping standing in for BAR0.
    #[test]
    fn direct_registers_are_checked_and_address_the_mapping() {
        let bar = Mmio::anonymous(8192).unwrap();
        assert!(bar.direct_reg(0x804, 8).is_none(), "misaligned");
        assert!(bar.direct_reg(0x800, 12).is_none(), "not whole words");
        assert!(bar.direct_reg(0x800, 0).is_none(), "empty");
        assert!(bar.direct_reg(8192 - 8, 16).is_none(), "past the end");
        assert!(bar.direct_reg(8192, 8).is_none(), "starts at the end");
        assert!(bar.direct_reg(usize::MAX - 7, 8).is_none(), "wraps");
        assert!(
            bar.direct_reg(8, usize::MAX - 7).is_none(),
            "wraps (length)"
        );
        let base = bar.map.as_ptr() as usize;
        let p = bar.direct_reg(0x1800, 0x200).expect("inside BAR0");
        assert_eq!(p.as_ptr() as usize, base + 0x1800);
        let last = bar.direct_reg(8192 - 8, 8).expect("the last word");
        assert_eq!(last.as_ptr() as usize, base + 8192 - 8);
        let all = bar.direct_reg(0, 8192).expect("the whole BAR");
        assert_eq!(all.as_ptr() as usize, base);
    }

    /// A direct store of a register's memory image puts on the device the bytes
    /// `write64` puts there, and eight ascending ones those of `write_block64`
    /// (the contract of `Bus::direct_reg`). A file stands in for the device, as in
    /// `mmio_stores_are_big_endian_and_in_place`.
    #[test]
    fn direct_stores_put_the_bytes_of_write64_and_write_block64() {
        let (path, file) = device_file("direct");
        let bar = Mmio::map(&file, 4096, 8192).unwrap();
        // A doorbell: the first 8 bytes of a control segment.
        let ctrl = [0x00, 0x12, 0x34, 0x0a, 0xab, 0xcd, 0xef, 0x02];
        let v = u64::from_be_bytes(ctrl);
        bar.write64(0x800, v);
        let reg = bar.direct_reg(0x900, 0x200).unwrap();
        let image = u64::from_ne_bytes(v.to_be_bytes());
        let blk: [u8; 64] = core::array::from_fn(|i| 0x40 ^ i as u8);
        bar.write_block64(0xc00, &blk);
        // SAFETY: word 0 and words 32..40 of the 64 words (0x200 bytes) at 0x900
        // that `direct_reg` returned, inside the live mapping (`bar` outlives the
        // stores); device memory is only accessed through this pointer, volatile
        // `Mmio` stores and the file, never through a reference.
        unsafe {
            (*reg.as_ptr()).store(image, Ordering::Relaxed);
            for (w, c) in blk.chunks_exact(8).enumerate() {
                let word = u64::from_ne_bytes(c.try_into().unwrap());
                (*reg.as_ptr().add(32 + w)).store(word, Ordering::Relaxed);
            }
        }
        wmb();
        assert_eq!(bar.read32(0x900), bar.read32(0x800));
        assert_eq!(bar.read32(0x904), bar.read32(0x804));
        drop(bar);
        let bytes = std::fs::read(&path).unwrap();
        let page = &bytes[4096..];
        assert_eq!(&page[0x800..0x808], &ctrl);
        assert_eq!(&page[0x900..0x908], &ctrl, "direct doorbell = write64");
        assert_eq!(&page[0xc00..0xc40], &blk[..]);
        assert_eq!(
            &page[0xa00..0xa40],
            &page[0xc00..0xc40],
            "direct block = write_block64"
        );
        assert!(page[0x908..0xa00].iter().all(|&b| b == 0), "nothing else");
        assert!(page[0xa40..0xc00].iter().all(|&b| b == 0), "nothing else");
        assert!(bytes[..4096].iter().all(|&b| b == 0), "offset respected");
        std::fs::remove_file(&path).unwrap();
    }

    /// A page of a region at a nonzero file offset maps the file's bytes there:
    /// what the process stores through a writable page is in the file, a read-only
    /// page reads them, and pages outside the region or not aligned are EINVAL.
    #[test]
    fn region_pages_map_the_file_at_the_region_offset() {
        assert_eq!(region_page_offset(4096, 8192, 0), Some(4096));
        assert_eq!(region_page_offset(4096, 8192, 4096), Some(8192));
        assert_eq!(region_page_offset(4096, 8192, 8192), None, "past the end");
        assert_eq!(region_page_offset(4096, 8192, 0x800), None, "not a page");
        assert_eq!(
            region_page_offset(u64::MAX - 4095, 8192, 4096),
            None,
            "wraps"
        );
        assert_eq!(region_page_offset(0, u64::MAX, usize::MAX & !4095), None);
        let (path, file) = device_file("page");
        let page = map_region_page(&file, 4096, 8192, 4096, true).unwrap();
        // SAFETY: bytes 0x800..0x808 of the one page just mapped read-write, which
        // nothing else references; unmapped below.
        unsafe {
            ptr::write_volatile(
                page.as_ptr().add(0x800).cast::<[u8; 8]>(),
                [9, 8, 7, 6, 5, 4, 3, 2],
            );
            libc::munmap(page.as_ptr().cast(), BAR_PAGE);
        }
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(
            &bytes[8192 + 0x800..8192 + 0x808],
            &[9, 8, 7, 6, 5, 4, 3, 2]
        );
        assert!(
            bytes[..8192].iter().all(|&b| b == 0),
            "only the second region page"
        );
        let ro = map_region_page(&file, 4096, 8192, 4096, false).unwrap();
        // SAFETY: a read of the page just mapped read-only; unmapped after.
        let v = unsafe {
            let v = ptr::read_volatile(ro.as_ptr().add(0x800));
            libc::munmap(ro.as_ptr().cast(), BAR_PAGE);
            v
        };
        assert_eq!(v, 9);
        for off in [8192, 0x800, usize::MAX & !4095] {
            let e = map_region_page(&file, 4096, 8192, off, true).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "offset {off:#x}");
        }
        std::fs::remove_file(&path).unwrap();
    }
}

//! BAR0 mapped into the process: volatile big-endian MMIO and the CPU barriers.
//!
//! The region is mapped with `memmap2` (`mmap(MAP_SHARED)` of the device fd at the
//! region's offset, as rdma-core maps it) and never exposed as a Rust reference: every
//! access is one volatile load or store of the register's width, so the compiler
//! neither merges, splits, elides nor reorders them. Registers are big-endian on the
//! device (reference §1); values are swapped on little-endian hosts.
//!
//! vfio-pci maps BARs uncached (`pgprot_noncached`), not write-combining, so a
//! BlueFlame block is 8 ascending 8-byte uncached stores: correct, though not the
//! single burst a write-combining mapping gives.
//!
//! Barriers (rdma-core `util/udma_barrier.h`, as the Bus contract documents them):
//!
//! | | x86-64 | aarch64 |
//! |---|---|---|
//! | [`wmb`] (`udma_to_device_barrier`) | compiler barrier (stores are ordered, UC after WB included) | `dsb st` |
//! | [`rmb`] (`udma_from_device_barrier`) | `lfence` | `dsb ld` |
//!
//! Other architectures fall back to a sequentially consistent fence.

use std::fs::File;
use std::io;
use std::ptr;

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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file stands in for the device: mapped shared, the bytes written through the
    /// mapping are the bytes in the file.
    #[test]
    fn mmio_stores_are_big_endian_and_in_place() {
        let path = std::env::temp_dir().join(format!("ferroverbs-vfio-bar-{}", std::process::id()));
        std::fs::write(&path, vec![0u8; 3 * 4096]).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
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
}

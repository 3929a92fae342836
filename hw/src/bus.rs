//! The Bus contract: the only thing between the driver and a device.
//!
//! Two implementations exist: VFIO (a mapped BAR0 and the IOMMU, in the driver) and
//! the simulator. A third, [`MemBus`], keeps BAR0 as plain memory with identity-mapped
//! DMA for unit tests and fast-path benchmarks.
//!
//! # Registers
//! BAR0 holds the initialization segment at offset 0 and the UAR pages at
//! `index * 4096` (`log_uar_page_sz = 0`). Every register is big-endian on the device.
//! [`Bus::read32`], [`Bus::write32`] and [`Bus::write64`] take and return the
//! register's *value*; the bus stores it big-endian, so `write64(off, v)` puts the
//! bytes `v.to_be_bytes()` at `off..off + 8`. A doorbell that must carry the first 8
//! bytes of a WQE's control segment as they sit in memory (rdma-core's
//! `mmio_write64_be`) is therefore written as `write64(off, u64::from_be_bytes(bytes))`.
//! Writes reach the device in program order.
//!
//! # DMA
//! [`Bus::dma_map`] makes `len` bytes of host memory at `vaddr` visible to the device
//! at an IO virtual address; the device reads and writes host memory only through such
//! mappings, and any other access is an IOMMU fault. The trait is safe to call, but it
//! carries a promise the type system cannot see: **the caller keeps the mapped bytes
//! alive and in place until [`Bus::dma_unmap`]**, and treats them as shared with the
//! device (volatile or atomic access only, no Rust references that the device might
//! write through). In ferroverbs the driver's `dma` module is the only caller, and it
//! upholds this with owned, pinned allocations.
//!
//! # Ordering
//! * [`Bus::wmb`] orders the driver's earlier stores to DMA memory before a following
//!   MMIO write (rdma-core `udma_to_device_barrier`: a compiler barrier on x86-64,
//!   `dsb st` on arm64). A device must never observe a WQE before the doorbell that
//!   publishes it.
//! * [`Bus::rmb`] orders the read of a CQE or EQE owner bit before the reads of its body
//!   (rdma-core `udma_from_device_barrier`: `lfence` on x86-64, `dsb ld` on arm64). A
//!   device publishes a CQE's body before its owner bit.
//!
//! # Interrupts
//! Optionally, an eventfd per MSI-X vector, signalled when an armed EQ gets an event.

use core::ptr::NonNull;
use core::sync::atomic::{compiler_fence, fence, AtomicU64, Ordering};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Size of a UAR page and of the adapter page (`MLX5_ADAPTER_PAGE_SIZE`).
pub const ADAPTER_PAGE_SIZE: usize = 4096;

/// A BlueFlame block: 64 bytes copied to the device in one burst.
pub type Block64 = [u8; 64];

/// Device access rights of a DMA mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaPerm {
    /// The device may read the memory.
    pub read: bool,
    /// The device may write the memory.
    pub write: bool,
}

impl DmaPerm {
    /// Read and write, the usual case for queues and registered memory.
    pub const RW: DmaPerm = DmaPerm {
        read: true,
        write: true,
    };
    /// Device reads only.
    pub const RO: DmaPerm = DmaPerm {
        read: true,
        write: false,
    };
}

/// Why a bus operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BusError {
    /// The range to map was empty, or wraps the address space.
    #[error("DMA range of {len} bytes at {vaddr:#x} is empty or wraps")]
    BadRange {
        /// Host address.
        vaddr: usize,
        /// Length in bytes.
        len: usize,
    },
    /// The IOVA space (or the mapping table) is exhausted.
    #[error("no IOVA space left for {len} bytes")]
    NoIovaSpace {
        /// Length in bytes.
        len: usize,
    },
    /// No mapping starts at this IOVA with this length.
    #[error("no DMA mapping of {len} bytes at IOVA {iova:#x}")]
    NotMapped {
        /// IO virtual address.
        iova: u64,
        /// Length in bytes.
        len: usize,
    },
    /// The platform refused the mapping (VFIO errno, memlock limit, ...).
    #[error("DMA map of {len} bytes refused: {reason}")]
    MapRefused {
        /// Length in bytes.
        len: usize,
        /// What the platform said.
        reason: String,
    },
}

/// The bus between the driver and a device. See the module documentation for the
/// exact meaning of each operation.
///
/// The driver is generic over `B: Bus`, so on VFIO a doorbell compiles to one store.
pub trait Bus: Send + Sync {
    /// Length of BAR0 in bytes.
    fn bar0_len(&self) -> usize;

    /// Reads the 32-bit big-endian register at byte offset `off` of BAR0 and returns its
    /// value. A device that has fallen off the bus reads as all ones.
    fn read32(&self, off: usize) -> u32;

    /// Writes `value` to the 32-bit big-endian register at byte offset `off`.
    fn write32(&self, off: usize, value: u32);

    /// Writes `value` big-endian to the 64 bits at byte offset `off` (one store on
    /// 64-bit hosts): doorbells.
    fn write64(&self, off: usize, value: u64);

    /// Copies a 64-byte block to BAR0 at `off` (a BlueFlame chunk), in ascending
    /// 8-byte stores.
    fn write_block64(&self, off: usize, block: &Block64);

    /// A doorbell register the driver may store to directly, as rdma-core stores to
    /// its mapped UAR: the `len` bytes of BAR0 at `off` as 8-byte words, or `None`
    /// (the default) when every doorbell must go through [`Bus::write64`] and
    /// [`Bus::write_block64`] (a simulator, which must see each one).
    ///
    /// A bus returns `Some` only where BAR0 is memory the process writes itself
    /// (plain memory, a mapped BAR), and only when `off` and `len` are multiples of 8
    /// and `off..off + len` lies inside BAR0. The pointer stays valid as long as the
    /// bus lives. Its user stores whole words with relaxed atomic 8-byte stores
    /// (`AtomicU64::store`), each the memory image of the 8 bytes the device sees
    /// there: the word of `write64(off, v)` is `u64::from_ne_bytes(v.to_be_bytes())`,
    /// a `write_block64` is eight such words in ascending order. Creating the
    /// pointer is safe; storing through it is the caller's `unsafe`, with this
    /// contract as its proof.
    ///
    /// Nothing follows the direct stores (no bus call after them), so a bus returns
    /// `Some` only where a store needs nothing after it to reach the device: memory,
    /// or an uncached BAR mapping (VFIO). A write-combining mapping would need
    /// rdma-core's `mmio_flush_writes` after each doorbell; such a bus keeps `None`.
    fn direct_reg(&self, off: usize, len: usize) -> Option<NonNull<AtomicU64>> {
        let _ = (off, len);
        None
    }

    /// Whether the driver copies a single small WQE through the BlueFlame register
    /// ([`Bus::write_block64`]) when the device has one, or always rings the 8-byte
    /// doorbell. BlueFlame pays only when a 64-byte block reaches the device as one
    /// burst: a write-combining BAR mapping, or a bus that takes the block in one
    /// call (the default, `true`: [`MemBus`], the simulator). A bus whose BAR0 is
    /// mapped uncached says `false`: each 8-byte store is then its own PCIe write,
    /// eight per WQEBB where the doorbell is one. Linux's `mlx5_ib` does the same
    /// when its write-combining test fails (it reports `bf_reg_size = 0`, so
    /// rdma-core's BlueFlame halves are empty), and rdma-core's VFIO provider
    /// offers only non-cached UARs.
    #[inline(always)]
    fn blueflame(&self) -> bool {
        true
    }

    /// Whether the driver's RC and UC QPs let the device place small messages in
    /// their CQEs (scatter to CQE, `qpc.cs_res` and `cs_req`) unless the creator
    /// chose (`QpInitAttr::scatter_to_cqe` in the driver). On a ConnectX it saves
    /// the payload's DMA write and the poller's cache miss on it, which is why
    /// Linux's `mlx5_ib` and libmlx5 enable it by default: the default, `true` (VFIO,
    /// [`MemBus`]). A device that has neither cost (the simulator, where the poll's
    /// copy out of the CQE only adds work) says `false`.
    #[inline(always)]
    fn scatter_to_cqe_pays(&self) -> bool {
        true
    }

    /// Orders earlier stores to DMA memory before the following MMIO write.
    #[inline(always)]
    fn wmb(&self) {
        // x86-64 keeps stores in order, so a compiler barrier is enough there; a
        // release fence is what weaker architectures need.
        #[cfg(target_arch = "x86_64")]
        compiler_fence(Ordering::SeqCst);
        #[cfg(not(target_arch = "x86_64"))]
        fence(Ordering::Release);
    }

    /// Orders the read of an owner bit before the reads of the entry's body.
    #[inline(always)]
    fn rmb(&self) {
        fence(Ordering::Acquire);
    }

    /// Maps `len` bytes of host memory at `vaddr` for device access; returns the IOVA.
    /// The caller keeps the memory alive and in place until [`Bus::dma_unmap`].
    fn dma_map(&self, vaddr: usize, len: usize, perm: DmaPerm) -> Result<u64, BusError>;

    /// Maps `len` bytes at `vaddr` for device access *on demand* (on-demand paging,
    /// Linux's ODP regions): the memory need not be mapped now nor stay mapped; the
    /// device reaches it through the process's page tables at each access, as a
    /// ConnectX resolves a page fault through the kernel, and an access to a page the
    /// process does not have (or may not write) faults. Removed by
    /// [`Bus::dma_unmap`]. A bus that can only map memory in place (VFIO's type-1
    /// IOMMU pins it) refuses: [`BusError::MapRefused`].
    fn dma_map_on_demand(&self, vaddr: usize, len: usize, perm: DmaPerm) -> Result<u64, BusError> {
        let _ = (vaddr, perm);
        Err(BusError::MapRefused {
            len,
            reason: "this bus cannot map memory on demand".into(),
        })
    }

    /// Removes the mapping made by [`Bus::dma_map`] that starts at `iova`.
    fn dma_unmap(&self, iova: u64, len: usize) -> Result<(), BusError>;

    /// The eventfd signalled for MSI-X `vector`, if the bus delivers interrupts.
    fn irq_eventfd(&self, vector: u16) -> Option<i32> {
        let _ = vector;
        None
    }
}

/// BAR0 as plain memory and identity-mapped DMA (IOVA = host address).
///
/// For unit tests and fast-path benchmarks: a doorbell is one relaxed store per dword,
/// and the test can read back what the driver wrote. No device is behind it.
pub struct MemBus {
    /// BAR0's bytes as the device sees them, eight at a time (each word holds the
    /// memory image of 8 bytes, so a doorbell or BlueFlame chunk is plain stores).
    bar: Box<[AtomicU64]>,
    maps: Mutex<BTreeMap<u64, (usize, DmaPerm)>>,
}

impl MemBus {
    /// A bus whose BAR0 is `bar0_len` bytes (rounded up to 8) of zeroes.
    pub fn new(bar0_len: usize) -> Self {
        let words = bar0_len.div_ceil(8);
        MemBus {
            bar: (0..words).map(|_| AtomicU64::new(0)).collect(),
            maps: Mutex::new(BTreeMap::new()),
        }
    }

    /// The bytes of BAR0 at `off..off + len`, as the device would see them.
    pub fn bar_bytes(&self, off: usize, len: usize) -> Vec<u8> {
        (off..off + len)
            .map(|i| {
                self.bar
                    .get(i / 8)
                    .map_or(0xff, |w| w.load(Ordering::Relaxed).to_ne_bytes()[i % 8])
            })
            .collect()
    }

    /// Number of live DMA mappings.
    pub fn mappings(&self) -> usize {
        self.maps.lock().map(|m| m.len()).unwrap_or(0)
    }
}

impl Bus for MemBus {
    fn bar0_len(&self) -> usize {
        self.bar.len() * 8
    }

    #[inline]
    fn read32(&self, off: usize) -> u32 {
        let off = off & !3;
        match self.bar.get(off / 8) {
            Some(w) => {
                let b = w.load(Ordering::Relaxed).to_ne_bytes();
                let at = off % 8;
                u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
            }
            None => u32::MAX,
        }
    }

    #[inline]
    fn write32(&self, off: usize, value: u32) {
        let off = off & !3;
        if let Some(w) = self.bar.get(off / 8) {
            let at = off % 8;
            // A read-modify-write of the 8-byte word; the other half is kept.
            let _ = w.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                let mut b = old.to_ne_bytes();
                b[at..at + 4].copy_from_slice(&value.to_be_bytes());
                Some(u64::from_ne_bytes(b))
            });
        }
    }

    #[inline]
    fn write64(&self, off: usize, value: u64) {
        if off.is_multiple_of(8) {
            if let Some(w) = self.bar.get(off / 8) {
                w.store(u64::from_ne_bytes(value.to_be_bytes()), Ordering::Relaxed);
            }
        } else {
            self.write32(off, (value >> 32) as u32);
            self.write32(off + 4, value as u32);
        }
    }

    #[inline]
    fn write_block64(&self, off: usize, block: &Block64) {
        match self.bar.get(off / 8..off / 8 + 8) {
            Some(words) if off.is_multiple_of(8) => {
                for (w, c) in words.iter().zip(block.chunks_exact(8)) {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(c);
                    w.store(u64::from_ne_bytes(b), Ordering::Relaxed);
                }
            }
            _ => {
                for (i, c) in block.chunks_exact(4).enumerate() {
                    self.write32(off + i * 4, u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
                }
            }
        }
    }

    /// BAR0's words themselves (plain memory): `write64` and `write_block64` are
    /// relaxed stores of the same words, so direct stores are equivalent.
    fn direct_reg(&self, off: usize, len: usize) -> Option<NonNull<AtomicU64>> {
        if !off.is_multiple_of(8) || !len.is_multiple_of(8) || len == 0 {
            return None;
        }
        let words = self.bar.get(off / 8..off.checked_add(len)? / 8)?;
        // A pointer to the whole range (not to its first word), so that it may
        // address every word of it.
        Some(NonNull::from(words).cast())
    }

    fn dma_map(&self, vaddr: usize, len: usize, perm: DmaPerm) -> Result<u64, BusError> {
        if len == 0 || vaddr.checked_add(len).is_none() {
            return Err(BusError::BadRange { vaddr, len });
        }
        let mut maps = self
            .maps
            .lock()
            .map_err(|_| BusError::NoIovaSpace { len })?;
        maps.insert(vaddr as u64, (len, perm));
        Ok(vaddr as u64)
    }

    fn dma_unmap(&self, iova: u64, len: usize) -> Result<(), BusError> {
        let mut maps = self
            .maps
            .lock()
            .map_err(|_| BusError::NotMapped { iova, len })?;
        match maps.get(&iova) {
            Some(&(l, _)) if l == len => {
                maps.remove(&iova);
                Ok(())
            }
            _ => Err(BusError::NotMapped { iova, len }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_are_big_endian_on_the_device() {
        let bus = MemBus::new(8192);
        bus.write32(0x18, 0x0000_0001);
        assert_eq!(bus.bar_bytes(0x18, 4), [0, 0, 0, 1]);
        let ctrl = [0x00, 0x12, 0x34, 0x0a, 0xab, 0xcd, 0xef, 0x02];
        bus.write64(0x1800, u64::from_be_bytes(ctrl));
        assert_eq!(bus.bar_bytes(0x1800, 8), ctrl);
        let mut blk = [0u8; 64];
        blk.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
        bus.write_block64(0x1900, &blk);
        assert_eq!(bus.bar_bytes(0x1900, 64), blk);
        assert_eq!(
            bus.read32(1 << 20),
            u32::MAX,
            "outside BAR0 reads as all ones"
        );
    }

    #[test]
    fn narrow_writes_keep_their_neighbours_and_odd_blocks_work() {
        let bus = MemBus::new(8192);
        bus.write64(0x800, 0x1122_3344_5566_7788);
        bus.write32(0x804, 0xaabb_ccdd);
        assert_eq!(bus.read32(0x800), 0x1122_3344);
        assert_eq!(
            bus.bar_bytes(0x800, 8),
            [0x11, 0x22, 0x33, 0x44, 0xaa, 0xbb, 0xcc, 0xdd]
        );
        // A 4-byte-aligned (not 8-byte-aligned) 64-bit write and block write.
        bus.write64(0x904, 0x0102_0304_0506_0708);
        assert_eq!(bus.bar_bytes(0x904, 8), [1, 2, 3, 4, 5, 6, 7, 8]);
        let blk: Block64 = core::array::from_fn(|i| 0x80 | i as u8);
        bus.write_block64(0xa04, &blk);
        assert_eq!(bus.bar_bytes(0xa04, 64), blk);
        assert_eq!(
            bus.read32(0xa00),
            0,
            "the dword before the block is untouched"
        );
    }

    #[test]
    fn direct_registers_are_checked_and_address_the_bar() {
        let bus = MemBus::new(8192);
        assert!(bus.direct_reg(0x804, 8).is_none(), "misaligned");
        assert!(bus.direct_reg(0x800, 12).is_none(), "not whole words");
        assert!(bus.direct_reg(8192 - 8, 16).is_none(), "past the end");
        assert!(bus.direct_reg(usize::MAX - 7, 8).is_none(), "wraps");
        let p = bus.direct_reg(0x1800, 0x200).expect("inside BAR0");
        assert_eq!(
            p.as_ptr() as usize,
            &bus.bar[0x300] as *const AtomicU64 as usize
        );
    }

    #[test]
    fn dma_is_identity_and_counted() {
        let bus = MemBus::new(4096);
        let buf = [0u8; 128];
        let iova = bus
            .dma_map(buf.as_ptr() as usize, 128, DmaPerm::RW)
            .unwrap();
        assert_eq!(iova, buf.as_ptr() as u64);
        assert_eq!(bus.mappings(), 1);
        assert!(bus.dma_unmap(iova, 64).is_err());
        bus.dma_unmap(iova, 128).unwrap();
        assert_eq!(bus.mappings(), 0);
        assert!(matches!(
            bus.dma_map(0, 0, DmaPerm::RW),
            Err(BusError::BadRange { .. })
        ));
    }
}

//! DMA memory shared with the device.
//!
//! Everything the device reads or writes in host memory (the command queue page, the
//! mailbox blocks, firmware pages, EQ/CQ/QP buffers, doorbell records) is a
//! [`DmaBuf`]: a page-aligned, zero-filled host allocation made visible to the device
//! through [`Bus::dma_map`], unmapped through [`Bus::dma_unmap`] and then freed when
//! the buffer is dropped. The bytes are shared with a device that may write them at
//! any time, so they are never exposed as Rust references: every access is an atomic
//! load or store of the host-memory word (the device's writes are not Rust writes, so
//! a plain reference could be assumed immutable by the compiler).
//!
//! [`PagePool`] lends whole 4 KiB pages to the firmware (`MANAGE_PAGES`), keeps count
//! of every page the device holds, and takes them back page by page.
//!
//! This module holds the only `unsafe` code of the control plane; each block carries
//! a `// SAFETY:` comment.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::{BTreeMap, HashSet};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use ferroverbs_hw::{Bus, BusError, DmaPerm};

use crate::error::Error;

/// The page size of the device's DMA world (`MLX5_ADAPTER_PAGE_SIZE`): firmware pages,
/// command queue, mailbox pages and PAS entries all count in 4 KiB pages.
pub const PAGE_SIZE: usize = 4096;

/// A page-aligned, zeroed host allocation mapped for device access.
///
/// The device sees it at [`DmaBuf::iova`]; the driver reads and writes it through the
/// accessors below, which all take byte offsets and check them against the length.
/// Dropping the buffer unmaps it and then frees it, in that order: once the IOMMU
/// mapping is gone the device can no longer reach the memory, so freeing it is safe
/// even if the device misbehaves. If the unmap fails, the memory is leaked rather
/// than freed, because the device might still reach it.
pub struct DmaBuf<B: Bus> {
    bus: Arc<B>,
    ptr: NonNull<u8>,
    len: usize,
    iova: u64,
}

// SAFETY: a DmaBuf owns its allocation outright (no aliasing Rust references exist to
// it), and every access after construction is an atomic load or store, so moving the
// owner to another thread or sharing `&DmaBuf` between threads cannot create a data
// race. `B: Bus` is itself `Send + Sync`.
unsafe impl<B: Bus> Send for DmaBuf<B> {}
// SAFETY: see the `Send` impl: shared access goes only through atomic operations.
unsafe impl<B: Bus> Sync for DmaBuf<B> {}

impl<B: Bus> DmaBuf<B> {
    /// Allocates `len` bytes (rounded up to whole 4 KiB pages), zero-filled and
    /// 4 KiB-aligned, and maps them for device access with `perm`.
    pub fn new(bus: &Arc<B>, len: usize, perm: DmaPerm) -> Result<Self, Error> {
        let len = len.max(1).div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let layout = Layout::from_size_align(len, PAGE_SIZE)
            .map_err(|_| Error::OutOfMemory { bytes: len })?;
        // SAFETY: `layout` has a nonzero size (at least one page) and a valid
        // power-of-two alignment, as `alloc_zeroed` requires.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(Error::OutOfMemory { bytes: len })?;
        match bus.dma_map(ptr.as_ptr() as usize, len, perm) {
            Ok(iova) => Ok(DmaBuf {
                bus: Arc::clone(bus),
                ptr,
                len,
                iova,
            }),
            Err(e) => {
                // SAFETY: the mapping failed, so the device never saw this memory; it
                // was allocated just above with exactly this layout and is freed once.
                unsafe { dealloc(ptr.as_ptr(), layout) };
                Err(Error::Bus(e))
            }
        }
    }

    /// Length in bytes (a multiple of 4 KiB).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a buffer holds at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The address the device uses for byte 0 of the buffer.
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// The host address of byte 0, for code that hands the memory to the fast path.
    /// Dereferencing it is the caller's responsibility.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Panics if `off..off + n` is not inside the buffer or not aligned to `align`:
    /// offsets are always computed by the driver, never taken from the device, so a
    /// failure here is a driver bug.
    #[inline]
    #[track_caller]
    fn check(&self, off: usize, n: usize, align: usize) {
        assert!(
            off.checked_add(n).is_some_and(|end| end <= self.len) && off.is_multiple_of(align),
            "DMA access of {n} bytes at {off:#x} outside a {}-byte buffer or misaligned",
            self.len
        );
    }

    #[inline]
    fn atomic_u8(&self, off: usize) -> &AtomicU8 {
        self.check(off, 1, 1);
        // SAFETY: `off` is inside the live allocation (checked above); AtomicU8 has
        // the size and alignment of u8; the memory is only ever accessed atomically
        // by this process, and lives as long as `self`.
        unsafe { &*(self.ptr.as_ptr().add(off) as *const AtomicU8) }
    }

    #[inline]
    fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        self.check(off, 4, 4);
        // SAFETY: in bounds and 4-byte aligned (checked above; the base is page
        // aligned); AtomicU32 has the size and alignment of u32; only atomic accesses
        // are made to this memory, and it lives as long as `self`.
        unsafe { &*(self.ptr.as_ptr().add(off) as *const AtomicU32) }
    }

    #[inline]
    fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        self.check(off, 8, 8);
        // SAFETY: in bounds and 8-byte aligned (checked above; the base is page
        // aligned); AtomicU64 has the size and alignment of u64; only atomic accesses
        // are made to this memory, and it lives as long as `self`.
        unsafe { &*(self.ptr.as_ptr().add(off) as *const AtomicU64) }
    }

    /// Reads the byte at `off`.
    #[inline]
    pub fn read_u8(&self, off: usize) -> u8 {
        self.atomic_u8(off).load(Ordering::Relaxed)
    }

    /// Writes the byte at `off`.
    #[inline]
    pub fn write_u8(&self, off: usize, v: u8) {
        self.atomic_u8(off).store(v, Ordering::Relaxed)
    }

    /// Reads the byte at `off` with acquire ordering (an owner byte the device
    /// publishes last).
    #[inline]
    pub fn load_u8_acquire(&self, off: usize) -> u8 {
        self.atomic_u8(off).load(Ordering::Acquire)
    }

    /// Writes the byte at `off` with release ordering (an owner byte the driver
    /// publishes last).
    #[inline]
    pub fn store_u8_release(&self, off: usize, v: u8) {
        self.atomic_u8(off).store(v, Ordering::Release)
    }

    /// Reads the big-endian 32-bit value at the 4-byte-aligned `off`.
    #[inline]
    pub fn read_be32(&self, off: usize) -> u32 {
        u32::from_be(self.atomic_u32(off).load(Ordering::Relaxed))
    }

    /// Writes `v` big-endian at the 4-byte-aligned `off`.
    #[inline]
    pub fn write_be32(&self, off: usize, v: u32) {
        self.atomic_u32(off).store(v.to_be(), Ordering::Relaxed)
    }

    /// Reads the big-endian 64-bit value at the 8-byte-aligned `off`.
    #[inline]
    pub fn read_be64(&self, off: usize) -> u64 {
        u64::from_be(self.atomic_u64(off).load(Ordering::Relaxed))
    }

    /// Writes `v` big-endian at the 8-byte-aligned `off`.
    #[inline]
    pub fn write_be64(&self, off: usize, v: u64) {
        self.atomic_u64(off).store(v.to_be(), Ordering::Relaxed)
    }

    /// Copies `dst.len()` bytes starting at `off` out of the buffer.
    pub fn read_bytes(&self, off: usize, dst: &mut [u8]) {
        self.check(off, dst.len(), 1);
        let mut i = 0;
        while i < dst.len() {
            let at = off + i;
            if at.is_multiple_of(8) && dst.len() - i >= 8 {
                let w = self.atomic_u64(at).load(Ordering::Relaxed);
                dst[i..i + 8].copy_from_slice(&w.to_ne_bytes());
                i += 8;
            } else {
                dst[i] = self.read_u8(at);
                i += 1;
            }
        }
    }

    /// Copies `src` into the buffer starting at `off`.
    pub fn write_bytes(&self, off: usize, src: &[u8]) {
        self.check(off, src.len(), 1);
        let mut i = 0;
        while i < src.len() {
            let at = off + i;
            if at.is_multiple_of(8) && src.len() - i >= 8 {
                let mut w = [0u8; 8];
                w.copy_from_slice(&src[i..i + 8]);
                self.atomic_u64(at)
                    .store(u64::from_ne_bytes(w), Ordering::Relaxed);
                i += 8;
            } else {
                self.write_u8(at, src[i]);
                i += 1;
            }
        }
    }

    /// Sets `len` bytes starting at `off` to `value`.
    pub fn fill(&self, off: usize, len: usize, value: u8) {
        self.check(off, len, 1);
        let word = u64::from_ne_bytes([value; 8]);
        let mut i = 0;
        while i < len {
            let at = off + i;
            if at.is_multiple_of(8) && len - i >= 8 {
                self.atomic_u64(at).store(word, Ordering::Relaxed);
                i += 8;
            } else {
                self.write_u8(at, value);
                i += 1;
            }
        }
    }
}

impl<B: Bus> Drop for DmaBuf<B> {
    fn drop(&mut self) {
        match self.bus.dma_unmap(self.iova, self.len) {
            Ok(()) => {
                let layout = Layout::from_size_align(self.len, PAGE_SIZE)
                    .expect("layout was valid at allocation");
                // SAFETY: the device can no longer reach the memory (the mapping is
                // gone), no references into it exist (all access was through `&self`
                // methods that returned values), and it was allocated in `new` with
                // exactly this layout.
                unsafe { dealloc(self.ptr.as_ptr(), layout) };
            }
            Err(e) => {
                // The device may still reach the memory: leaking it is the only safe
                // choice.
                tracing::error!(iova = self.iova, len = self.len, error = %e,
                    "DMA unmap failed; leaking the buffer");
            }
        }
    }
}

impl<B: Bus> std::fmt::Debug for DmaBuf<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaBuf")
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("len", &self.len)
            .finish()
    }
}

/// One mapped chunk of the page pool.
struct Chunk<B: Bus> {
    buf: DmaBuf<B>,
    /// Indices of the pages of this chunk that are not lent to the firmware.
    free: Vec<u16>,
}

/// Firmware pages: 4 KiB pages lent to the device with `MANAGE_PAGES`.
///
/// Pages are allocated and mapped in chunks of up to [`PagePool::CHUNK_PAGES`] pages (one
/// mapping per chunk keeps the IOMMU table small); a chunk is unmapped and freed as
/// soon as none of its pages is lent. The pool remembers exactly which pages the
/// device holds, so a page the firmware returns twice, or one it was never given, is
/// reported instead of corrupting the accounting.
pub struct PagePool<B: Bus> {
    bus: Arc<B>,
    chunks: BTreeMap<u64, Chunk<B>>,
    lent: HashSet<u64>,
}

impl<B: Bus> PagePool<B> {
    /// Pages per mapped chunk (256 KiB).
    pub const CHUNK_PAGES: usize = 64;

    /// An empty pool.
    pub fn new(bus: &Arc<B>) -> Self {
        PagePool {
            bus: Arc::clone(bus),
            chunks: BTreeMap::new(),
            lent: HashSet::new(),
        }
    }

    /// Number of pages the device holds.
    pub fn lent(&self) -> usize {
        self.lent.len()
    }

    /// Number of chunks currently mapped.
    pub fn mapped_chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Takes `n` pages for the device and returns their IOVAs; they count as lent
    /// until [`PagePool::give_back`] or [`PagePool::reclaim`].
    pub fn lend(&mut self, n: usize) -> Result<Vec<u64>, Error> {
        let mut out = Vec::with_capacity(n);
        // Use free pages of existing chunks first.
        for (&base, chunk) in self.chunks.iter_mut() {
            while out.len() < n {
                match chunk.free.pop() {
                    Some(i) => out.push(base + i as u64 * PAGE_SIZE as u64),
                    None => break,
                }
            }
            if out.len() == n {
                break;
            }
        }
        while out.len() < n {
            let pages = (n - out.len()).min(Self::CHUNK_PAGES);
            let buf = match DmaBuf::new(&self.bus, pages * PAGE_SIZE, DmaPerm::RW) {
                Ok(b) => b,
                Err(e) => {
                    // Undo this call's partial work so the accounting stays exact.
                    for iova in out {
                        self.unlend(iova);
                    }
                    return Err(e);
                }
            };
            let base = buf.iova();
            if base % PAGE_SIZE as u64 != 0 {
                for iova in out {
                    self.unlend(iova);
                }
                return Err(Error::Misaligned {
                    what: "firmware page chunk",
                    iova: base,
                });
            }
            out.extend((0..pages).map(|i| base + (i * PAGE_SIZE) as u64));
            self.chunks.insert(
                base,
                Chunk {
                    buf,
                    free: Vec::new(),
                },
            );
        }
        self.lent.extend(out.iter().copied());
        Ok(out)
    }

    /// Returns a page that was handed out by `lend` but never reached the device
    /// (the `MANAGE_PAGES` that would have given it failed).
    pub fn give_back(&mut self, iovas: &[u64]) {
        for &iova in iovas {
            if self.lent.remove(&iova) {
                self.unlend(iova);
            }
        }
    }

    /// Records that the device returned the page at `iova` (`MANAGE_PAGES` TAKE).
    /// An address the device does not hold is an error (bytes from the device are
    /// untrusted), and changes nothing.
    pub fn reclaim(&mut self, iova: u64) -> Result<(), Error> {
        if !self.lent.remove(&iova) {
            return Err(Error::BadPageReturned { iova });
        }
        self.unlend(iova);
        Ok(())
    }

    /// Forgets every page the device holds and unmaps all chunks. Used when the
    /// device can no longer be asked for its pages (it failed or stopped answering):
    /// unmapping first makes the memory unreachable for it, so freeing is safe.
    /// Returns how many pages were still lent.
    pub fn abandon(&mut self) -> usize {
        let n = self.lent.len();
        self.lent.clear();
        self.chunks.clear();
        n
    }

    /// Marks one page of its chunk free, and drops the chunk once all are free.
    fn unlend(&mut self, iova: u64) {
        let Some((&base, chunk)) = self.chunks.range_mut(..=iova).next_back() else {
            return;
        };
        let idx = ((iova - base) / PAGE_SIZE as u64) as usize;
        if idx * PAGE_SIZE >= chunk.buf.len() {
            return;
        }
        chunk.free.push(idx as u16);
        if chunk.free.len() * PAGE_SIZE == chunk.buf.len() {
            self.chunks.remove(&base);
        }
    }
}

impl<B: Bus> Drop for PagePool<B> {
    fn drop(&mut self) {
        if !self.lent.is_empty() {
            tracing::warn!(
                pages = self.lent.len(),
                "firmware pages still lent when the pool was dropped; unmapping them"
            );
        }
    }
}

/// Maps a bus error into the driver's error type.
impl From<BusError> for Error {
    fn from(e: BusError) -> Self {
        Error::Bus(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroverbs_hw::MemBus;

    #[test]
    fn buffer_is_zeroed_aligned_mapped_and_unmapped() {
        let bus = Arc::new(MemBus::new(4096));
        let buf = DmaBuf::new(&bus, 100, DmaPerm::RW).unwrap();
        assert_eq!(buf.len(), PAGE_SIZE);
        assert_eq!(buf.iova() % PAGE_SIZE as u64, 0);
        assert_eq!(bus.mappings(), 1);
        let mut all = vec![0xffu8; PAGE_SIZE];
        buf.read_bytes(0, &mut all);
        assert!(all.iter().all(|&b| b == 0));
        drop(buf);
        assert_eq!(bus.mappings(), 0);
    }

    #[test]
    fn accessors_are_big_endian_and_bytewise_exact() {
        let bus = Arc::new(MemBus::new(4096));
        let buf = DmaBuf::new(&bus, 64, DmaPerm::RW).unwrap();
        buf.write_be32(4, 0x1122_3344);
        buf.write_be64(8, 0x0102_0304_0506_0708);
        let mut b = [0u8; 16];
        buf.read_bytes(0, &mut b);
        assert_eq!(
            b,
            [0, 0, 0, 0, 0x11, 0x22, 0x33, 0x44, 1, 2, 3, 4, 5, 6, 7, 8]
        );
        assert_eq!(buf.read_be32(4), 0x1122_3344);
        assert_eq!(buf.read_be64(8), 0x0102_0304_0506_0708);
        // Unaligned copies go bytewise.
        let src: Vec<u8> = (0..23).collect();
        buf.write_bytes(3, &src);
        let mut dst = [0u8; 23];
        buf.read_bytes(3, &mut dst);
        assert_eq!(&dst[..], &src[..]);
        buf.fill(1, 30, 0xa5);
        let mut f = [0u8; 32];
        buf.read_bytes(0, &mut f);
        assert_eq!(f[0], 0);
        assert!(f[1..31].iter().all(|&x| x == 0xa5));
        assert_eq!(f[31], 0);
        buf.store_u8_release(63, 1);
        assert_eq!(buf.load_u8_acquire(63), 1);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn out_of_bounds_access_is_a_driver_bug() {
        let bus = Arc::new(MemBus::new(4096));
        let buf = DmaBuf::new(&bus, 64, DmaPerm::RW).unwrap();
        buf.read_be32(PAGE_SIZE);
    }

    #[test]
    fn page_pool_counts_every_page_and_frees_chunks() {
        let bus = Arc::new(MemBus::new(4096));
        let mut pool = PagePool::new(&bus);
        let a = pool.lend(100).unwrap();
        assert_eq!(a.len(), 100);
        assert_eq!(pool.lent(), 100);
        assert_eq!(pool.mapped_chunks(), 2);
        assert_eq!(bus.mappings(), 2);
        let uniq: HashSet<_> = a.iter().collect();
        assert_eq!(uniq.len(), 100);
        assert!(a.iter().all(|p| p % PAGE_SIZE as u64 == 0));
        // A page the device never held is refused, and changes nothing.
        assert!(matches!(
            pool.reclaim(0x1234_5000),
            Err(Error::BadPageReturned { .. })
        ));
        for &p in &a[..50] {
            pool.reclaim(p).unwrap();
        }
        assert!(pool.reclaim(a[0]).is_err(), "returned twice");
        assert_eq!(pool.lent(), 50);
        // Reuse free pages before mapping more.
        let b = pool.lend(10).unwrap();
        assert_eq!(pool.mapped_chunks(), 2);
        for &p in a[50..].iter().chain(&b) {
            pool.reclaim(p).unwrap();
        }
        assert_eq!(pool.lent(), 0);
        assert_eq!(pool.mapped_chunks(), 0);
        assert_eq!(bus.mappings(), 0);
        let c = pool.lend(3).unwrap();
        pool.give_back(&c);
        assert_eq!((pool.lent(), bus.mappings()), (0, 0));
        pool.lend(5).unwrap();
        assert_eq!(pool.abandon(), 5);
        assert_eq!(bus.mappings(), 0);
    }
}

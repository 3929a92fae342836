//! The memory the rings operate on.
//!
//! Queue buffers and doorbell records are host memory shared with the device: the
//! device reads SQ and RQ buffers and doorbell records and writes CQ buffers, at any
//! time, outside the Rust abstract machine. So, like [`DmaBuf`], the rings never hold a
//! Rust reference to those bytes: every access is a copy through [`QueueMem`], whose
//! implementations use atomic (or, elsewhere, volatile) loads and stores that the
//! compiler can neither elide nor assume unobserved.
//!
//! * [`QueueMem`]: byte-addressed copies in and out, and the single 32-bit big-endian
//!   store a doorbell record needs. Implemented for [`DmaBuf`] (the driver's mapped
//!   DMA memory), for slices of [`AtomicU32`] (tests, and any memory a caller maps
//!   itself), for a [`Region`] (a window into another `QueueMem`: the SQ part of a QP
//!   buffer, a doorbell record inside a shared page), and through `&`, `Box` and `Arc`.
//! * [`DoorbellWord`]: one 32-bit word of a doorbell record: an [`AtomicU32`] or a
//!   [`Word`] of some `QueueMem`.
//!
//! All of it is safe code; the `unsafe` that turns an allocation into atomics lives in
//! [`crate::dma`], next to the allocation whose lifetime justifies it.

use crate::dma::DmaBuf;
use core::sync::atomic::{AtomicU32, Ordering};
use ferroverbs_hw::Bus;

/// Host memory shared with the device, accessed only by copies.
///
/// Offsets are bytes from the start of the memory. The rings check their geometry
/// against [`QueueMem::len`] once, at construction, and never access beyond it.
pub trait QueueMem {
    /// Length in bytes.
    fn len(&self) -> usize;

    /// Whether the memory is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Loads the byte at `off` (a real load each call: an owner byte the device
    /// changes).
    fn load_u8(&self, off: usize) -> u8;

    /// Copies `dst.len()` bytes starting at `off` into `dst`.
    fn read(&self, off: usize, dst: &mut [u8]);

    /// Copies `src` to the memory starting at `off`.
    fn write(&self, off: usize, src: &[u8]);

    /// Stores the big-endian image of `value` at the 4-byte-aligned `off` with one
    /// 32-bit store (a doorbell record word, which the device may read at any time).
    fn store_be32(&self, off: usize, value: u32);

    /// Loads the big-endian 32-bit value at the 4-byte-aligned `off`.
    fn load_be32(&self, off: usize) -> u32 {
        let mut b = [0u8; 4];
        self.read(off, &mut b);
        u32::from_be_bytes(b)
    }

    /// Copies one 16-byte WQE segment to `off` (the fast path's unit of store;
    /// implementations may make it a single 16-byte store).
    #[inline(always)]
    fn write16(&self, off: usize, seg: &[u8; 16]) {
        self.write(off, seg)
    }

    /// Copies `N` consecutive 16-byte segments to `off` (a WQE's leading segments,
    /// which never cross the ring end): implementations may check the whole span
    /// once and store without further checks.
    #[inline(always)]
    fn write_segs<const N: usize>(&self, off: usize, segs: &[[u8; 16]; N]) {
        for (k, seg) in segs.iter().enumerate() {
            self.write16(off + 16 * k, seg);
        }
    }

    /// Calls `f` with the 64 bytes at `off` (a BlueFlame block of a WQE the driver
    /// wrote and the device only reads). Implementations over plain memory may hand
    /// out the ring bytes themselves instead of a copy.
    #[inline(always)]
    fn with_block64<R>(&self, off: usize, f: impl FnOnce(&[u8; 64]) -> R) -> R {
        let mut b = [0u8; 64];
        self.read(off, &mut b);
        f(&b)
    }
}

impl<B: Bus> QueueMem for DmaBuf<B> {
    fn len(&self) -> usize {
        DmaBuf::len(self)
    }

    #[inline]
    fn load_u8(&self, off: usize) -> u8 {
        self.read_u8(off)
    }

    #[inline]
    fn read(&self, off: usize, dst: &mut [u8]) {
        self.read_bytes(off, dst)
    }

    #[inline]
    fn write(&self, off: usize, src: &[u8]) {
        self.write_bytes(off, src)
    }

    #[inline]
    fn store_be32(&self, off: usize, value: u32) {
        self.write_be32(off, value)
    }

    #[inline]
    fn load_be32(&self, off: usize) -> u32 {
        self.read_be32(off)
    }
}

/// Memory as 32-bit words whose in-memory bytes are the memory's bytes (word `i` holds
/// bytes `4i..4i + 4` in memory order). Offsets past the end read as zero and writes
/// past the end are dropped.
impl QueueMem for [AtomicU32] {
    fn len(&self) -> usize {
        <[AtomicU32]>::len(self) * 4
    }

    #[inline]
    fn load_u8(&self, off: usize) -> u8 {
        self.get(off / 4)
            .map_or(0, |w| w.load(Ordering::Relaxed).to_ne_bytes()[off % 4])
    }

    fn read(&self, off: usize, dst: &mut [u8]) {
        let mut i = 0;
        while i < dst.len() {
            let pos = off + i;
            let word = self
                .get(pos / 4)
                .map_or([0; 4], |w| w.load(Ordering::Relaxed).to_ne_bytes());
            let from = pos % 4;
            let n = (4 - from).min(dst.len() - i);
            dst[i..i + n].copy_from_slice(&word[from..from + n]);
            i += n;
        }
    }

    fn write(&self, off: usize, src: &[u8]) {
        let mut i = 0;
        while i < src.len() {
            let pos = off + i;
            let from = pos % 4;
            let n = (4 - from).min(src.len() - i);
            if let Some(w) = self.get(pos / 4) {
                if n == 4 {
                    let mut b = [0u8; 4];
                    b.copy_from_slice(&src[i..i + 4]);
                    w.store(u32::from_ne_bytes(b), Ordering::Relaxed);
                } else {
                    let mut b = w.load(Ordering::Relaxed).to_ne_bytes();
                    b[from..from + n].copy_from_slice(&src[i..i + n]);
                    w.store(u32::from_ne_bytes(b), Ordering::Relaxed);
                }
            }
            i += n;
        }
    }

    #[inline]
    fn store_be32(&self, off: usize, value: u32) {
        if let Some(w) = self.get(off / 4) {
            w.store(value.to_be(), Ordering::Release);
        }
    }
}

macro_rules! forward_queue_mem {
    ($($wrapper:ty),*) => {$(
        impl<T: QueueMem + ?Sized> QueueMem for $wrapper {
            fn len(&self) -> usize {
                (**self).len()
            }
            #[inline]
            fn load_u8(&self, off: usize) -> u8 {
                (**self).load_u8(off)
            }
            #[inline]
            fn read(&self, off: usize, dst: &mut [u8]) {
                (**self).read(off, dst)
            }
            #[inline]
            fn write(&self, off: usize, src: &[u8]) {
                (**self).write(off, src)
            }
            #[inline]
            fn store_be32(&self, off: usize, value: u32) {
                (**self).store_be32(off, value)
            }
            #[inline]
            fn load_be32(&self, off: usize) -> u32 {
                (**self).load_be32(off)
            }
            #[inline(always)]
            fn write16(&self, off: usize, seg: &[u8; 16]) {
                (**self).write16(off, seg)
            }
            #[inline(always)]
            fn write_segs<const N: usize>(&self, off: usize, segs: &[[u8; 16]; N]) {
                (**self).write_segs(off, segs)
            }
            #[inline(always)]
            fn with_block64<R>(&self, off: usize, f: impl FnOnce(&[u8; 64]) -> R) -> R {
                (**self).with_block64(off, f)
            }
        }
    )*};
}
forward_queue_mem!(&T, Box<T>, std::sync::Arc<T>);

/// A window of `len` bytes at `base` into another [`QueueMem`]: the SQ part of a QP
/// buffer (which starts with the RQ), or a doorbell record inside a shared page.
#[derive(Clone, Debug)]
pub struct Region<M> {
    mem: M,
    base: usize,
    len: usize,
}

impl<M: QueueMem> Region<M> {
    /// The window `base..base + len` of `mem`; `None` when it does not fit.
    pub fn new(mem: M, base: usize, len: usize) -> Option<Self> {
        let end = base.checked_add(len)?;
        (end <= mem.len()).then_some(Region { mem, base, len })
    }

    /// Offset of the window in the underlying memory.
    pub fn base(&self) -> usize {
        self.base
    }

    /// The underlying memory.
    pub fn inner(&self) -> &M {
        &self.mem
    }
}

impl<M: QueueMem> QueueMem for Region<M> {
    fn len(&self) -> usize {
        self.len
    }
    #[inline]
    fn load_u8(&self, off: usize) -> u8 {
        self.mem.load_u8(self.base + off)
    }
    #[inline]
    fn read(&self, off: usize, dst: &mut [u8]) {
        self.mem.read(self.base + off, dst)
    }
    #[inline]
    fn write(&self, off: usize, src: &[u8]) {
        self.mem.write(self.base + off, src)
    }
    #[inline]
    fn store_be32(&self, off: usize, value: u32) {
        self.mem.store_be32(self.base + off, value)
    }
    #[inline]
    fn load_be32(&self, off: usize) -> u32 {
        self.mem.load_be32(self.base + off)
    }
    #[inline(always)]
    fn write16(&self, off: usize, seg: &[u8; 16]) {
        self.mem.write16(self.base + off, seg)
    }
    #[inline(always)]
    fn write_segs<const N: usize>(&self, off: usize, segs: &[[u8; 16]; N]) {
        self.mem.write_segs(self.base + off, segs)
    }
    #[inline(always)]
    fn with_block64<R>(&self, off: usize, f: impl FnOnce(&[u8; 64]) -> R) -> R {
        self.mem.with_block64(self.base + off, f)
    }
}

/// One 32-bit word of a doorbell record (host memory the device reads).
pub trait DoorbellWord {
    /// Stores `value` big-endian, with one 32-bit store.
    fn store_be32(&self, value: u32);

    /// The value last stored (decoded from big-endian).
    fn load_be32(&self) -> u32;
}

impl DoorbellWord for AtomicU32 {
    #[inline(always)]
    fn store_be32(&self, value: u32) {
        // The in-memory image of `value.to_be()` is the big-endian bytes of `value`.
        self.store(value.to_be(), Ordering::Release);
    }

    fn load_be32(&self) -> u32 {
        u32::from_be(self.load(Ordering::Relaxed))
    }
}

impl<T: DoorbellWord + ?Sized> DoorbellWord for &T {
    #[inline(always)]
    fn store_be32(&self, value: u32) {
        (**self).store_be32(value)
    }

    fn load_be32(&self) -> u32 {
        (**self).load_be32()
    }
}

/// The 32-bit word at byte offset `off` (4-byte aligned) of a [`QueueMem`]: e.g.
/// `Word { mem: &dbr_page, off: qp_dbr + 4 * MLX5_SND_DBR }`.
#[derive(Clone, Debug)]
pub struct Word<M> {
    /// The memory holding the record.
    pub mem: M,
    /// Byte offset of the word.
    pub off: usize,
}

impl<M: QueueMem> DoorbellWord for Word<M> {
    #[inline(always)]
    fn store_be32(&self, value: u32) {
        self.mem.store_be32(self.off, value)
    }

    fn load_be32(&self) -> u32 {
        self.mem.load_be32(self.off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroverbs_hw::{DmaPerm, MemBus};
    use std::sync::Arc;

    fn words(n: usize, fill: u8) -> Box<[AtomicU32]> {
        (0..n)
            .map(|_| AtomicU32::new(u32::from_ne_bytes([fill; 4])))
            .collect()
    }

    #[test]
    fn atomic_word_memory_is_in_memory_order() {
        let m = words(4, 0);
        m.write(6, &[1, 2, 3, 4, 5]);
        let mut out = [0xffu8; 9];
        m.read(4, &mut out);
        assert_eq!(out, [0, 0, 1, 2, 3, 4, 5, 0, 0]);
        assert_eq!(m.load_u8(7), 2);
        assert_eq!(QueueMem::len(&m), 16);
        // Past the end: zeroes in, nothing out.
        m.write(15, &[9, 9]);
        let mut tail = [0xffu8; 3];
        m.read(15, &mut tail);
        assert_eq!(tail, [9, 0, 0]);
        m.store_be32(8, 0x0102_0304);
        assert_eq!(m[2].load(Ordering::Relaxed).to_ne_bytes(), [1, 2, 3, 4]);
        assert_eq!(m.load_be32(8), 0x0102_0304);
    }

    #[test]
    fn regions_and_words() {
        let m = words(8, 0);
        assert!(Region::new(&m, 30, 4).is_none());
        assert!(Region::new(&m, usize::MAX, 2).is_none());
        let r = Region::new(&m, 16, 16).unwrap();
        r.write(0, &[7; 4]);
        assert_eq!(m.load_u8(16), 7);
        assert_eq!((r.len(), r.base()), (16, 16));
        let w = Word { mem: &r, off: 4 };
        w.store_be32(0xaabb_ccdd);
        assert_eq!(m.load_be32(20), 0xaabb_ccdd);
        assert_eq!(w.load_be32(), 0xaabb_ccdd);
    }

    #[test]
    fn doorbell_atomics_are_big_endian_in_memory() {
        let w = AtomicU32::new(0);
        w.store_be32(0x0102_0304);
        assert_eq!(w.load(Ordering::Relaxed).to_ne_bytes(), [1, 2, 3, 4]);
        fn through<D: DoorbellWord>(d: D) -> u32 {
            d.load_be32()
        }
        assert_eq!(through(&w), 0x0102_0304);
    }

    #[test]
    fn dma_buffers_are_queue_memory() {
        let bus = Arc::new(MemBus::new(0x1000));
        let buf = DmaBuf::new(&bus, 64, DmaPerm::RW).unwrap();
        QueueMem::write(&buf, 3, &[1, 2, 3]);
        let mut out = [0u8; 5];
        QueueMem::read(&buf, 2, &mut out);
        assert_eq!(out, [0, 1, 2, 3, 0]);
        QueueMem::store_be32(&buf, 8, 0x0a0b_0c0d);
        assert_eq!(buf.read_u8(8), 0x0a);
        assert_eq!(QueueMem::load_be32(&buf, 8), 0x0a0b_0c0d);
        assert_eq!(QueueMem::len(&buf), 4096);
    }
}

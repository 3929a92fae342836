//! The memory the rings operate on.
//!
//! Queue memory is shared with the device, in one direction or the other, and the two
//! directions get two different abstractions:
//!
//! * [`DriverMem`]: memory the driver writes and the device only reads (SQ and RQ
//!   buffers). The rings take it as a plain `&mut [u8]` view, so posting is ordinary
//!   stores and copies. This is sound for DMA memory because the device never writes
//!   these buffers: there is nothing a Rust reference could miss. Every
//!   `AsRef<[u8]> + AsMut<[u8]>` type (a `Vec<u8>`, a boxed slice, a `&mut [u8]`, a
//!   DMA buffer type of the driver's `dma` module) is `DriverMem`.
//! * [`DeviceMem`]: memory the device writes (CQ and EQ buffers). No Rust reference to
//!   its bytes ever exists; the rings read and initialise it through copies, each
//!   implementation choosing loads the compiler cannot elide or tear (atomics here,
//!   volatile accesses in the `dma` module).
//! * [`DoorbellWord`]: one 32-bit word of a doorbell record, which the device reads at
//!   any time and which must therefore change with a single 32-bit store of its
//!   big-endian image.
//!
//! Everything here is safe code. A DMA-backed implementation needs `unsafe` to turn a
//! mapped allocation into these views; that belongs in the `dma` module, next to the
//! allocation whose lifetime justifies it.

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Memory the driver writes and the device reads: SQ and RQ buffers.
///
/// Implementations must return views of the same length every time.
pub trait DriverMem {
    /// The bytes, for reading back (BlueFlame copies, tests).
    fn bytes(&self) -> &[u8];
    /// The bytes, for writing WQEs.
    fn bytes_mut(&mut self) -> &mut [u8];
}

impl<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized> DriverMem for T {
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        self.as_ref()
    }

    #[inline(always)]
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.as_mut()
    }
}

/// Memory the device writes and the driver reads: CQ and EQ buffers.
///
/// Accesses are copies through `&self`; an implementation must make each
/// [`DeviceMem::load_u8`] a real load (not cached in a register across calls) and must
/// not panic for an in-range offset. Offsets past the end read as zero and writes past
/// the end are dropped.
pub trait DeviceMem {
    /// Length in bytes.
    fn len(&self) -> usize;

    /// Whether the memory is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Loads the byte at `off`.
    fn load_u8(&self, off: usize) -> u8;

    /// Copies `dst.len()` bytes starting at `off` into `dst`.
    fn read(&self, off: usize, dst: &mut [u8]) {
        for (i, d) in dst.iter_mut().enumerate() {
            *d = self.load_u8(off + i);
        }
    }

    /// Copies `src` to `off` (initialisation before the device owns the memory).
    fn write(&self, off: usize, src: &[u8]);
}

impl DeviceMem for [AtomicU8] {
    fn len(&self) -> usize {
        <[AtomicU8]>::len(self)
    }

    #[inline]
    fn load_u8(&self, off: usize) -> u8 {
        self.get(off).map_or(0, |b| b.load(Ordering::Relaxed))
    }

    fn write(&self, off: usize, src: &[u8]) {
        for (i, s) in src.iter().enumerate() {
            if let Some(b) = self.get(off + i) {
                b.store(*s, Ordering::Relaxed);
            }
        }
    }
}

/// Memory as 64-bit words in native byte order (byte `off` is byte `off % 8` of word
/// `off / 8` in memory order), e.g. a page of `AtomicU64`.
impl DeviceMem for [AtomicU64] {
    fn len(&self) -> usize {
        <[AtomicU64]>::len(self) * 8
    }

    #[inline]
    fn load_u8(&self, off: usize) -> u8 {
        self.get(off / 8)
            .map_or(0, |w| w.load(Ordering::Relaxed).to_ne_bytes()[off % 8])
    }

    fn read(&self, off: usize, dst: &mut [u8]) {
        let mut i = 0;
        while i < dst.len() {
            let pos = off + i;
            let word = self
                .get(pos / 8)
                .map_or([0; 8], |w| w.load(Ordering::Relaxed).to_ne_bytes());
            let from = pos % 8;
            let n = (8 - from).min(dst.len() - i);
            dst[i..i + n].copy_from_slice(&word[from..from + n]);
            i += n;
        }
    }

    fn write(&self, off: usize, src: &[u8]) {
        for (i, s) in src.iter().enumerate() {
            let pos = off + i;
            if let Some(w) = self.get(pos / 8) {
                let mut bytes = w.load(Ordering::Relaxed).to_ne_bytes();
                bytes[pos % 8] = *s;
                w.store(u64::from_ne_bytes(bytes), Ordering::Relaxed);
            }
        }
    }
}

impl<T: DeviceMem + ?Sized> DeviceMem for &T {
    fn len(&self) -> usize {
        (**self).len()
    }
    #[inline]
    fn load_u8(&self, off: usize) -> u8 {
        (**self).load_u8(off)
    }
    fn read(&self, off: usize, dst: &mut [u8]) {
        (**self).read(off, dst)
    }
    fn write(&self, off: usize, src: &[u8]) {
        (**self).write(off, src)
    }
}

impl<T: DeviceMem + ?Sized> DeviceMem for Box<T> {
    fn len(&self) -> usize {
        (**self).len()
    }
    #[inline]
    fn load_u8(&self, off: usize) -> u8 {
        (**self).load_u8(off)
    }
    fn read(&self, off: usize, dst: &mut [u8]) {
        (**self).read(off, dst)
    }
    fn write(&self, off: usize, src: &[u8]) {
        (**self).write(off, src)
    }
}

impl<T: DeviceMem + ?Sized> DeviceMem for std::sync::Arc<T> {
    fn len(&self) -> usize {
        (**self).len()
    }
    #[inline]
    fn load_u8(&self, off: usize) -> u8 {
        (**self).load_u8(off)
    }
    fn read(&self, off: usize, dst: &mut [u8]) {
        (**self).read(off, dst)
    }
    fn write(&self, off: usize, src: &[u8]) {
        (**self).write(off, src)
    }
}

/// One 32-bit word of a doorbell record (host memory the device reads).
pub trait DoorbellWord {
    /// Stores `value` big-endian, with one 32-bit store.
    fn store_be32(&mut self, value: u32);

    /// The value last stored (decoded from big-endian).
    fn load_be32(&self) -> u32;
}

impl DoorbellWord for AtomicU32 {
    #[inline(always)]
    fn store_be32(&mut self, value: u32) {
        // The in-memory image of `value.to_be()` is the big-endian bytes of `value`.
        self.store(value.to_be(), Ordering::Release);
    }

    fn load_be32(&self) -> u32 {
        u32::from_be(self.load(Ordering::Relaxed))
    }
}

impl DoorbellWord for &AtomicU32 {
    #[inline(always)]
    fn store_be32(&mut self, value: u32) {
        self.store(value.to_be(), Ordering::Release);
    }

    fn load_be32(&self) -> u32 {
        u32::from_be(self.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_byte_memory() {
        let m: Vec<AtomicU8> = (0..16).map(|_| AtomicU8::new(0)).collect();
        let m = m.as_slice();
        m.write(3, &[1, 2, 3]);
        let mut out = [0u8; 5];
        m.read(2, &mut out);
        assert_eq!(out, [0, 1, 2, 3, 0]);
        assert_eq!(m.load_u8(100), 0);
        m.write(15, &[9, 9]); // the byte past the end is dropped
        assert_eq!(m.load_u8(15), 9);
    }

    #[test]
    fn atomic_word_memory_is_in_memory_order() {
        let m: Box<[AtomicU64]> = (0..4).map(|_| AtomicU64::new(0)).collect();
        DeviceMem::write(&m, 6, &[1, 2, 3, 4]);
        let mut out = [0u8; 8];
        DeviceMem::read(&m, 4, &mut out);
        assert_eq!(out, [0, 0, 1, 2, 3, 4, 0, 0]);
        assert_eq!(DeviceMem::load_u8(&m, 7), 2);
        assert_eq!(DeviceMem::len(&m), 32);
        let mut tail = [0xffu8; 4];
        DeviceMem::read(&m, 30, &mut tail);
        assert_eq!(tail, [0, 0, 0, 0]);
    }

    #[test]
    fn doorbell_words_are_big_endian_in_memory() {
        let mut w = AtomicU32::new(0);
        w.store_be32(0x0102_0304);
        assert_eq!(w.load(Ordering::Relaxed).to_ne_bytes(), [1, 2, 3, 4]);
        assert_eq!(w.load_be32(), 0x0102_0304);
        let words = [AtomicU32::new(0), AtomicU32::new(0)];
        let mut r = &words[1];
        r.store_be32(7);
        assert_eq!(words[1].load(Ordering::Relaxed).to_ne_bytes(), [0, 0, 0, 7]);
    }
}

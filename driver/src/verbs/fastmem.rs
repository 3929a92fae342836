//! Queue memory for the verbs fast path: a window of a [`DmaBuf`] that the ring
//! writers access with plain copies instead of per-word atomics.
//!
//! [`DmaBuf`]'s own accessors make every access an atomic load or store of one word,
//! checked against the buffer, which is right for memory the device may change at
//! any time but costs several instructions per 8 bytes. The bytes of a WQE or a CQE
//! body are not such memory: the driver writes a WQE only into ring slots the device
//! does not own (before the doorbell that publishes them, or after the completion
//! that returned them), and reads a CQE body only after the owner byte said the
//! device is done with it; both orders go through the acquire/release operations of
//! the rings (owner byte, doorbell record, the QP's completion counters) and the
//! [`Bus`] barriers. So no access of these copies is concurrent with a device access to
//! the same bytes, and plain copies are enough. The owner byte and the doorbell
//! record words, which the device does access concurrently, stay atomic.
//!
//! A [`FastMem`] is private to the rings of one QP or CQ, which the verbs objects
//! reach only through `&mut self`; no two threads use it at once.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;

use ferroverbs_hw::Bus;

use crate::dma::DmaBuf;
use crate::ring::{DoorbellWord, QueueMem};

/// `len` bytes at `off` of a DMA buffer, which the window keeps alive.
pub(crate) struct FastMem<B: Bus> {
    ptr: *mut u8,
    len: usize,
    _buf: Arc<DmaBuf<B>>,
}

// SAFETY: the window owns a reference to its allocation, which outlives it; moving it
// to another thread moves the only user of these bytes (see the module doc).
unsafe impl<B: Bus> Send for FastMem<B> {}
// SAFETY: a `FastMem` is reachable only through the `&mut self` of the verbs object
// whose ring holds it, so shared references never exist on two threads at once; the
// only accesses the device may make concurrently are to the owner byte and the
// doorbell record words, which are atomic here.
unsafe impl<B: Bus> Sync for FastMem<B> {}

impl<B: Bus> FastMem<B> {
    /// The window `off..off + len` of `buf`; `None` if it does not fit.
    pub(crate) fn new(buf: &Arc<DmaBuf<B>>, off: usize, len: usize) -> Option<Self> {
        let end = off.checked_add(len)?;
        if end > buf.len() {
            return None;
        }
        Some(FastMem {
            // In bounds: checked above (`wrapping_add` needs no unsafe; the result is
            // inside the allocation).
            ptr: buf.as_ptr().wrapping_add(off),
            len,
            _buf: Arc::clone(buf),
        })
    }

    #[inline(always)]
    fn check(&self, off: usize, n: usize) {
        // Offsets come from the rings, which check their geometry against `len` once;
        // a failure here is a driver bug, not a device fault. One add, one carry test
        // and one compare in the steady state; the panic is out of line.
        match off.checked_add(n) {
            Some(end) if end <= self.len => {}
            _ => out_of_bounds(off, n, self.len),
        }
    }
}

#[cold]
#[inline(never)]
fn out_of_bounds(off: usize, n: usize, len: usize) -> ! {
    panic!("queue access of {n} bytes at {off} outside {len} bytes")
}

impl<B: Bus> QueueMem for FastMem<B> {
    #[inline(always)]
    fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn load_u8(&self, off: usize) -> u8 {
        // One compare for one byte (an owner byte, tested on every empty poll).
        if off >= self.len {
            out_of_bounds(off, 1, self.len);
        }
        // SAFETY: in bounds (checked); the allocation lives as long as `self`; the
        // byte is only accessed atomically here (an owner byte the device writes).
        unsafe { AtomicU8::from_ptr(self.ptr.add(off)) }.load(Ordering::Relaxed)
    }

    #[inline(always)]
    fn read(&self, off: usize, dst: &mut [u8]) {
        self.check(off, dst.len());
        // SAFETY: the source is in bounds (checked) of a live allocation, `dst` is a
        // distinct Rust buffer; no device access to these bytes is concurrent (module
        // doc).
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), dst.as_mut_ptr(), dst.len()) }
    }

    #[inline(always)]
    fn write(&self, off: usize, src: &[u8]) {
        self.check(off, src.len());
        // SAFETY: the destination is in bounds (checked) of a live allocation that no
        // Rust reference points into; no device access to these bytes is concurrent
        // (module doc).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(off), src.len()) }
    }

    #[inline(always)]
    fn store_be32(&self, off: usize, value: u32) {
        self.check(off, 4);
        assert!(
            (self.ptr as usize + off).is_multiple_of(4),
            "misaligned record"
        );
        // SAFETY: in bounds and 4-byte aligned (checked); a doorbell record word the
        // device reads concurrently, so accessed atomically only.
        unsafe { AtomicU32::from_ptr(self.ptr.add(off) as *mut u32) }
            .store(value.to_be(), Ordering::Release)
    }

    #[inline(always)]
    fn load_be32(&self, off: usize) -> u32 {
        self.check(off, 4);
        assert!(
            (self.ptr as usize + off).is_multiple_of(4),
            "misaligned record"
        );
        // SAFETY: as in `store_be32`.
        u32::from_be(
            unsafe { AtomicU32::from_ptr(self.ptr.add(off) as *mut u32) }.load(Ordering::Relaxed),
        )
    }

    #[inline(always)]
    fn write16(&self, off: usize, seg: &[u8; 16]) {
        self.check(off, 16);
        // SAFETY: in bounds (checked) of a live allocation that no Rust reference
        // points into; an unaligned 16-byte store (`[u8; 16]` has alignment 1); no
        // device access to these bytes is concurrent (module doc).
        unsafe { self.ptr.add(off).cast::<[u8; 16]>().write_unaligned(*seg) }
    }

    #[inline(always)]
    fn write_segs<const N: usize>(&self, off: usize, segs: &[[u8; 16]; N]) {
        // One bounds check for the whole span (a WQE's leading segments), then plain
        // stores.
        self.check(off, 16 * N);
        // SAFETY: the `16 * N` bytes at `off` are in bounds (checked just above) of a
        // live allocation that no Rust reference points into; `[[u8; 16]; N]` has
        // alignment 1, so the unaligned store is valid at any offset; no device access
        // to these bytes is concurrent (module doc: the slots belong to the driver
        // until the doorbell).
        unsafe {
            self.ptr
                .add(off)
                .cast::<[[u8; 16]; N]>()
                .write_unaligned(*segs)
        }
    }

    #[inline(always)]
    fn with_block64<R>(&self, off: usize, f: impl FnOnce(&[u8; 64]) -> R) -> R {
        self.check(off, 64);
        // SAFETY: in bounds (checked) of an allocation that lives as long as `self`;
        // `[u8; 64]` has alignment 1. The block belongs to a WQE the driver finished
        // writing before the doorbell; while `f` runs nothing writes it: the device
        // only reads send queue memory, and the driver's own writes go through the
        // ring that is borrowed by this call (module doc). So a shared reference for
        // the duration of `f` aliases no write.
        f(unsafe { &*self.ptr.add(off).cast::<[u8; 64]>() })
    }
}

/// One 32-bit doorbell record word of a DMA buffer (which the word keeps alive), with
/// its bounds and alignment checked once, at construction: a store is one byte swap
/// and one release store, with no check on the fast path.
pub(crate) struct FastWord<B: Bus> {
    ptr: *mut u32,
    _buf: Arc<DmaBuf<B>>,
}

// SAFETY: as for `FastMem`: the word owns a reference to its allocation, and the
// device's concurrent accesses to it are matched by atomic accesses here.
unsafe impl<B: Bus> Send for FastWord<B> {}
// SAFETY: every access is atomic (`AtomicU32` loads and stores), so shared use from
// several threads is data-race free.
unsafe impl<B: Bus> Sync for FastWord<B> {}

impl<B: Bus> FastWord<B> {
    /// The word at byte `off` of `buf`; `None` unless it lies inside the buffer and
    /// is 4-byte aligned.
    pub(crate) fn new(buf: &Arc<DmaBuf<B>>, off: usize) -> Option<Self> {
        let end = off.checked_add(4)?;
        let ptr = buf.as_ptr().wrapping_add(off);
        if end > buf.len() || !(ptr as usize).is_multiple_of(4) {
            return None;
        }
        Some(FastWord {
            ptr: ptr.cast::<u32>(),
            _buf: Arc::clone(buf),
        })
    }

    #[inline(always)]
    fn atomic(&self) -> &AtomicU32 {
        // SAFETY: in bounds and 4-byte aligned (checked at construction) of an
        // allocation that lives as long as `self`; the word is only ever accessed
        // atomically (a doorbell record word the device reads concurrently).
        unsafe { AtomicU32::from_ptr(self.ptr) }
    }
}

impl<B: Bus> DoorbellWord for FastWord<B> {
    #[inline(always)]
    fn store_be32(&self, value: u32) {
        self.atomic().store(value.to_be(), Ordering::Release)
    }

    fn load_be32(&self) -> u32 {
        u32::from_be(self.atomic().load(Ordering::Relaxed))
    }
}

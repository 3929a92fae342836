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

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use ferroverbs_hw::Bus;

use super::wc::{WcTailBits, WC_TAIL_AT};
use super::WorkCompletion;
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

/// A per-slot `wr_id` table indexed by a 16-bit WQE counter masked to its length,
/// with that bound proved once, at construction (the length is a power of two and
/// the mask is the length minus one): a lookup is one `and` and one load, with no
/// bounds check on the poll path. `repr(C)`: the pointer and the mask, what a lookup
/// reads, are its first 16 bytes (the `Arc` only keeps the table alive).
#[repr(C)]
pub(crate) struct WrIdTable {
    ptr: *const AtomicU64,
    mask: u32,
    _table: Arc<[AtomicU64]>,
}

const _: () =
    assert!(std::mem::size_of::<WrIdTable>() == 32 && std::mem::offset_of!(WrIdTable, mask) < 16);

// SAFETY: the table owns a reference to its `Arc<[AtomicU64]>`, and every access
// through it is an atomic load or store, so it may be sent and shared between
// threads like the `Arc` itself.
unsafe impl Send for WrIdTable {}
// SAFETY: as for `Send`: only atomic accesses to memory the `Arc` keeps alive.
unsafe impl Sync for WrIdTable {}

impl WrIdTable {
    /// The table over `table`; `None` unless its length is a power of two of at
    /// most 2^16 (what a 16-bit counter indexes; so the mask keeps only a counter's
    /// bits, see [`WrIdTable::slot_word`]).
    pub(crate) fn new(table: &Arc<[AtomicU64]>) -> Option<Self> {
        let len = table.len();
        if !len.is_power_of_two() || len > 1 << 16 {
            return None;
        }
        Some(WrIdTable {
            ptr: table.as_ptr(),
            mask: (len - 1) as u32,
            _table: Arc::clone(table),
        })
    }

    /// The slot of the counter in the low 16 bits of `word` (`word & mask`: the mask
    /// is below 2^16, checked in [`WrIdTable::new`], so the bits above the counter
    /// are dropped).
    #[inline(always)]
    pub(crate) fn slot_word(&self, word: u32) -> &AtomicU64 {
        let i = (word & self.mask) as usize;
        // SAFETY: `i <= mask = len - 1` (the mask is the length minus one, checked
        // to be a power of two in `new`, so `word & mask` is below the length); the
        // `Arc` held by `self` keeps the slice alive and unmoved; the slot is an
        // `AtomicU64`, accessed only atomically.
        unsafe { &*self.ptr.add(i) }
    }
}

/// Bytes of the 64-byte CQE (`struct mlx5_cqe64`) every entry of a CQ ends with, and
/// the step between consecutive entries of a ring of 64-byte CQEs (a 128-byte entry
/// holds it in its second half: rdma-core mlx5 `get_cqe`, `cqe_sz == 64 ? cqe : cqe +
/// 64`).
pub(crate) const CQE_STRIDE: usize = 64;

/// Entries in a [`CqeCursor`]'s chunk at most: the low byte of the consumer index
/// wraps every 256 entries.
const CHUNK_MAX: u32 = 256;

/// What [`CqeCursor::publish_next`] adds to the doorbell record's memory image
/// (`BE32(ci & 0xffffff)` read as a native-endian `u32`): 1 in its last byte, the
/// index's low byte, whatever the host's byte order. While that byte does not wrap
/// (no carry), the add is exactly one more consumed entry.
const CI_ONE: u32 = u32::from_ne_bytes([0, 0, 0, 1]);

/// Owner bit `parity` (0 or 1) where it lies in a native-endian read of a CQE's last
/// 8 bytes: bit 0 of byte 7, `op_own` (`struct mlx5_cqe64`, byte 63).
const fn owner64(parity: u8) -> u64 {
    u64::from_ne_bytes([0, 0, 0, 0, 0, 0, 0, parity & 1])
}

/// Where the next CQE of a ring of 64- or 128-byte entries is, and the consumer index
/// the device sees.
///
/// The entry is kept as a pointer to its `op_own` byte (the entry's last) with the
/// owner bit software expects there (the wrap parity of the consumer index): the
/// empty test of a poll is a pointer load, a byte load and a compare, with no bounds
/// check.
///
/// The consumer index lives in one place only: the CQ's doorbell record word
/// (`MLX5_CQ_SET_CI`), which holds `BE32(ci & 0xffffff)` and which the cursor keeps
/// exact after every entry taken (the device reads it for overrun detection and
/// arming: it never sees an index older than the entries software has finished
/// with). The ring is cut into chunks of `min(n, 256)` entries (a power of two, so a
/// chunk ends at the ring's end or where the index's low byte wraps, and never
/// across either). Inside a chunk, moving on is one decrement of `left` and one add
/// to `at`, and publishing an entry is one add of [`CI_ONE`] to the record (no
/// carry can leave the low byte); the last entry of a chunk takes the out-of-line
/// [`CqeCursor::cross`] and is published with the full index
/// ([`CqeCursor::publish`]).
///
/// The entries are `stride` bytes (64 or 128); the [`Cqe64`](ferroverbs_hw::datapath::cqe::Cqe64)
/// is an entry's last 64 bytes, so `at` is the last byte of either. Inside a chunk,
/// [`CqeCursor::advance`] steps by `stride`; [`CqeCursor::advance_publish`], the
/// inline path of the poll, steps by the constant [`CQE_STRIDE`] (an add of an
/// immediate), which is the stride of a ring of 64-byte entries only: the CQ never
/// takes an entry of a 128-byte ring that way (it decodes every one of them out of
/// line).
///
/// Invariant (the proof of every access below): `base..end` (`end = base + n *
/// stride`, `stride` 64 or 128) lies inside the DMA buffer the cursor keeps alive and
/// `base` is 8-byte aligned (checked in [`CqeCursor::new`]); `at = base + 64 * j +
/// 63` for some `j`; `1 <= left <= chunk` and `at + (left - 1) * stride < end` (the
/// entries up to the chunk's end lie inside the ring); `first = base + stride - 1`
/// (entry 0's last byte), and `last_chunk = end - chunk * stride + stride - 1` (the
/// last byte of the first entry of the ring's last chunk; `chunk` divides `n`);
/// `rec` is a 4-byte aligned word outside the ring, of the same buffer or of
/// `_rec_buf` (which the cursor keeps alive too); `owner64` is [`owner64`] of
/// `parity`. Only the constructors, [`CqeCursor::seek`], [`CqeCursor::advance`],
/// [`CqeCursor::advance_publish`] and [`CqeCursor::cross`] change `at` and `left`,
/// and each keeps the invariant. When every move is by `stride` (always on a ring of
/// 64-byte entries), `at` is the last byte of entry `k` (`base + k * stride + stride
/// - 1`) and `k + left` is a multiple of `chunk`.
pub(crate) struct CqeCursor<B: Bus> {
    at: *const u8,
    left: u32,
    parity: u8,
    /// `parity` where the owner bit lies in a native-endian read of an entry's last
    /// 8 bytes ([`CqeAt::tail_atomic`]): bit 0 of their last byte, `op_own`.
    owner64: u64,
    chunk: u32,
    /// Bytes per entry: 64 or 128.
    stride: usize,
    first: *const u8,
    last_chunk: *const u8,
    end: *const u8,
    rec: NonNull<AtomicU32>,
    _buf: Arc<DmaBuf<B>>,
    /// The buffer of the doorbell record when it is not the ring's (a resized CQ,
    /// [`CqeCursor::resumed`]).
    _rec_buf: Option<Arc<DmaBuf<B>>>,
}

// SAFETY: as for `FastMem`: the cursor owns a reference to its allocation; it is
// reachable only through the `&mut self` of the CQ that holds it; the owner byte,
// which the device writes concurrently, is only loaded atomically, the doorbell
// record (which the device reads concurrently) only accessed atomically, and the rest
// of an entry is read only after the owner byte and the read barrier gave it to
// software.
unsafe impl<B: Bus> Send for CqeCursor<B> {}
// SAFETY: as for `Send` (shared references are never used on two threads at once:
// every method that reads takes `&self` of a CQ polled under `&mut self`).
unsafe impl<B: Bus> Sync for CqeCursor<B> {}

impl<B: Bus> CqeCursor<B> {
    /// A cursor over the `ncqe` (a power of two) entries of `stride` bytes (64 or
    /// 128) at byte 0 of `buf`, with the doorbell record word at byte `rec_off`
    /// (after the ring), at entry 0 with owner parity 0 and consumer index 0 (written
    /// to the record); `None` if they do not fit, the stride is neither, or the
    /// record is misaligned.
    pub(crate) fn new(
        buf: &Arc<DmaBuf<B>>,
        ncqe: u32,
        stride: usize,
        rec_off: usize,
    ) -> Option<Self> {
        if !ncqe.is_power_of_two() || (stride != 64 && stride != 128) {
            return None;
        }
        let len = (ncqe as usize).checked_mul(stride)?;
        if len > buf.len() || rec_off < len || rec_off.checked_add(4)? > buf.len() {
            return None;
        }
        let base = buf.as_ptr().cast_const();
        let rec = buf.as_ptr().wrapping_add(rec_off);
        if !(rec as usize).is_multiple_of(4) || !(base as usize).is_multiple_of(8) {
            return None;
        }
        let chunk = ncqe.min(CHUNK_MAX);
        let c = CqeCursor {
            // Inside the buffer (checked above); `wrapping_add` needs no unsafe.
            at: base.wrapping_add(stride - 1),
            left: chunk,
            parity: 0,
            owner64: owner64(0),
            chunk,
            stride,
            first: base.wrapping_add(stride - 1),
            last_chunk: base.wrapping_add(len - chunk as usize * stride + stride - 1),
            end: base.wrapping_add(len),
            rec: NonNull::new(rec.cast::<AtomicU32>())?,
            _buf: Arc::clone(buf),
            _rec_buf: None,
        };
        c.publish(0);
        Some(c)
    }

    /// A cursor over the `ncqe` (a power of two) entries of `stride` bytes (64 or
    /// 128) at byte 0 of `ring`, with the doorbell record word at byte `rec_off` of
    /// another buffer `rec_buf` (a resized CQ: its record stays where the CQ was
    /// created), at consumer index `ci` (entry `ci mod ncqe` with the parity of pass
    /// `ci / ncqe`), which it publishes; `None` if the ring does not fit, the stride
    /// is neither, or the record is misaligned or outside `rec_buf`.
    pub(crate) fn resumed(
        ring: &Arc<DmaBuf<B>>,
        ncqe: u32,
        stride: usize,
        rec_buf: &Arc<DmaBuf<B>>,
        rec_off: usize,
        ci: u32,
    ) -> Option<Self> {
        if !ncqe.is_power_of_two() || (stride != 64 && stride != 128) {
            return None;
        }
        let len = (ncqe as usize).checked_mul(stride)?;
        if len > ring.len() || rec_off.checked_add(4)? > rec_buf.len() {
            return None;
        }
        let base = ring.as_ptr().cast_const();
        let rec = rec_buf.as_ptr().wrapping_add(rec_off);
        if !(rec as usize).is_multiple_of(4) || !(base as usize).is_multiple_of(8) {
            return None;
        }
        let chunk = ncqe.min(CHUNK_MAX);
        let mut c = CqeCursor {
            // Inside the ring buffer (checked above).
            at: base.wrapping_add(stride - 1),
            left: chunk,
            parity: 0,
            owner64: owner64(0),
            chunk,
            stride,
            first: base.wrapping_add(stride - 1),
            last_chunk: base.wrapping_add(len - chunk as usize * stride + stride - 1),
            end: base.wrapping_add(len),
            rec: NonNull::new(rec.cast::<AtomicU32>())?,
            _buf: Arc::clone(ring),
            _rec_buf: Some(Arc::clone(rec_buf)),
        };
        c.seek(ci);
        Some(c)
    }

    /// Bytes per entry (64 or 128).
    #[inline(always)]
    pub(crate) fn stride(&self) -> usize {
        self.stride
    }

    /// Byte offset of the doorbell record word in `buf`, if it lies there.
    pub(crate) fn record_offset(&self, buf: &DmaBuf<B>) -> Option<usize> {
        let off = (self.rec.as_ptr() as usize).checked_sub(buf.as_ptr() as usize)?;
        (off.checked_add(4)? <= buf.len()).then_some(off)
    }

    /// The `op_own` byte of the entry at the cursor (an atomic load: the device
    /// writes it concurrently).
    #[inline(always)]
    pub(crate) fn op_own(&self) -> u8 {
        // SAFETY: `at` is inside the live buffer (the type's invariant); the byte is
        // only ever accessed atomically by the driver.
        unsafe { AtomicU8::from_ptr(self.at.cast_mut()) }.load(Ordering::Relaxed)
    }

    /// The owner bit software expects at the cursor (0 or 1).
    #[inline(always)]
    pub(crate) fn parity(&self) -> u8 {
        self.parity
    }

    /// The owner bit software expects at the cursor where it lies in a native-endian
    /// read of the entry's last 8 bytes ([`CqeAt::tail_atomic`]): bit 0 of byte 7.
    #[inline(always)]
    pub(crate) fn owner64(&self) -> u64 {
        self.owner64
    }

    /// The entry at the cursor: for the owner test and, after it and the read
    /// barrier, the reads of its body. The cursor does not move
    /// ([`CqeCursor::advance`], [`CqeCursor::advance_publish`]).
    #[inline(always)]
    pub(crate) fn entry(&self) -> CqeAt<'_> {
        CqeAt {
            at: self.at,
            _cur: std::marker::PhantomData,
        }
    }

    /// Moves past the entry at the cursor, which software took, without publishing
    /// it (for the out-of-line decoders, which read it at
    /// [`CqeCursor::last_offset`] and publish it with [`CqeCursor::publish`]); from
    /// the last entry of a chunk through [`CqeCursor::cross`].
    #[inline(always)]
    pub(crate) fn advance(&mut self) {
        // `left >= 1` (invariant).
        self.left = self.left.wrapping_sub(1);
        if self.left == 0 {
            // Inline, with no call: a call would make every path of the poll that
            // inlines this save registers.
            std::hint::cold_path();
            self.cross();
            return;
        }
        self.step_inside(self.stride);
    }

    /// Moves past the entry at the cursor, every byte of which software has read,
    /// and publishes it (the device may have it back): inside a chunk one add to
    /// `at` and one add of [`CI_ONE`] to the doorbell record's image
    /// ([`CqeCursor::publish_next`]); from the last entry of a chunk, a branch laid
    /// out of line ([`CqeCursor::cross_publish`]: the next chunk, the full index
    /// published). Inside a chunk the step is [`CQE_STRIDE`], a ring of 64-byte
    /// entries' (see the type's doc).
    #[inline(always)]
    pub(crate) fn advance_publish(&mut self) {
        // `left >= 1` (invariant).
        self.left = self.left.wrapping_sub(1);
        if self.left == 0 {
            // Inline, with no call, as in `advance`.
            std::hint::cold_path();
            self.cross_publish();
            return;
        }
        debug_assert_eq!(
            self.stride, CQE_STRIDE,
            "advance_publish on a 128-byte ring"
        );
        self.step_inside(CQE_STRIDE);
        self.publish_next();
    }

    /// The move inside a chunk by `by` bytes (64, or the stride; `left` already
    /// decremented and not 0).
    #[inline(always)]
    fn step_inside(&mut self, by: usize) {
        // `by` is a multiple of 64 and at most `stride`, and `left' = left - 1 >= 1`:
        // `at + by + (left' - 1) * stride <= at + (left - 1) * stride < end`, so the
        // invariant holds. (The compiler barrier, no instruction, makes `at` be read
        // again, so the move is one add to memory instead of an add and a store of
        // the copy in a register.)
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        self.at = self.at.wrapping_add(by);
    }

    /// [`CqeCursor::advance_publish`] from the last entry of a chunk: the cursor
    /// crosses ([`CqeCursor::cross`]) and the index after the entry is published in
    /// full (its low byte may wrap here; the record holds the entry's own index,
    /// every entry before it having been published).
    #[inline(always)]
    fn cross_publish(&mut self) {
        self.cross();
        self.publish(self.consumer_index().wrapping_add(1));
    }

    /// [`CqeCursor::advance`] from the last entry of a chunk (`k + 1` a multiple of
    /// `chunk`): the first entry of the next chunk, which is entry 0 of the next pass
    /// (parity flipped) at the ring's end.
    #[inline(always)]
    fn cross(&mut self) {
        let next = self.at.wrapping_add(self.stride);
        if next > self.last_chunk {
            // `k + 1 = n`: the `k = 0` entry, next pass. `first + (chunk - 1) *
            // stride = base + chunk * stride - 1 < end` (`chunk <= n`).
            self.at = self.first;
            self.parity ^= 1;
            self.owner64 = owner64(self.parity);
        } else {
            // `k + 1 < n` (a multiple of `chunk`, which divides `n`): inside, and
            // `next + (chunk - 1) * stride <= last_chunk + (chunk - 1) * stride = end
            // - 1`; `next` is `at` plus a multiple of 64.
            self.at = next;
        }
        self.left = self.chunk;
    }

    /// The entry taken last (the one before the cursor), for the out-of-line
    /// decoders: it was software's (its owner test passed before the read barrier),
    /// and nothing published it yet.
    #[inline(always)]
    pub(crate) fn last_entry(&self) -> CqeAt<'_> {
        let at = if self.at == self.first {
            self.end.wrapping_sub(1)
        } else {
            self.at.wrapping_sub(self.stride)
        };
        // `end - 1 = base + 64 * (n * stride / 64 - 1) + 63`, or `at - stride` with
        // `at` past `first` (so `at - stride >= base + 63`): of `at`'s form, below
        // `end`.
        CqeAt {
            at,
            _cur: std::marker::PhantomData,
        }
    }

    /// Byte offset in the ring of the [`Cqe64`](ferroverbs_hw::datapath::cqe::Cqe64)
    /// of the entry taken last (the one before the cursor; the entry's last 64
    /// bytes), for the out-of-line decoders.
    pub(crate) fn last_offset(&self) -> usize {
        let prev = if self.at == self.first {
            self.end.wrapping_sub(1)
        } else {
            self.at.wrapping_sub(self.stride)
        };
        // `prev = base + j * stride + stride - 1` and `first = base + stride - 1`:
        // the entry's CQE64 starts `j * stride + stride - 64` bytes into the ring.
        prev as usize - self.first as usize + self.stride - CQE_STRIDE
    }

    #[inline(always)]
    fn rec(&self) -> &AtomicU32 {
        // SAFETY: `rec` is a 4-byte aligned word inside the buffer the cursor keeps
        // alive (checked in `new`), outside the ring; the driver accesses it only
        // atomically (the device reads it concurrently).
        unsafe { self.rec.as_ref() }
    }

    /// The consumer index the device sees (24 bits, from the doorbell record).
    #[inline(always)]
    pub(crate) fn consumer_index(&self) -> u32 {
        u32::from_be(self.rec().load(Ordering::Relaxed))
    }

    /// Publishes consumer index `ci` (its low 24 bits) to the doorbell record, with
    /// release ordering: every read of the entries before it happens before the
    /// device may reuse them.
    #[inline(always)]
    pub(crate) fn publish(&self, ci: u32) {
        self.rec()
            .store((ci & 0x00ff_ffff).to_be(), Ordering::Release)
    }

    /// Moves the cursor to consumer index `ci` (entry `ci mod n`, the parity of pass
    /// `ci / n`, the chunk's remaining entries) and publishes it: for tests that
    /// start a CQ near the 24-bit wrap of the index.
    #[cfg(test)]
    pub(crate) fn start_at(&mut self, ci: u32) {
        self.seek(ci);
    }

    /// Moves the cursor to consumer index `ci` and publishes it (see
    /// [`CqeCursor::start_at`]; a CQ cleaned of a QP's completions moves on so).
    pub(crate) fn seek(&mut self, ci: u32) {
        // `end - first = n * stride - stride + 1`.
        let n = (self.end as usize - self.first as usize).div_ceil(self.stride) as u32;
        let k = ci & (n - 1);
        // `k + left` (below) is the multiple of `chunk` after `k`, at most `n`: `at +
        // (left - 1) * stride = first + (k + left - 1) * stride < end`.
        self.at = self.first.wrapping_add(k as usize * self.stride);
        self.parity = ((ci / n) & 1) as u8;
        self.owner64 = owner64(self.parity);
        self.left = self.chunk - k % self.chunk;
        self.publish(ci);
    }

    /// Publishes one more entry, which [`CqeCursor::advance_publish`] moved past
    /// inside a chunk (not the last of it, so the index's low byte does not wrap and
    /// the add of [`CI_ONE`] carries nowhere), once every byte of it was read: one
    /// add to the record's memory image, with release ordering as
    /// [`CqeCursor::publish`].
    #[inline(always)]
    fn publish_next(&self) {
        let r = self.rec();
        let v = r.load(Ordering::Relaxed);
        debug_assert_ne!(v.to_ne_bytes()[3], 0xff, "publish_next at a chunk's end");
        r.store(v.wrapping_add(CI_ONE), Ordering::Release);
    }
}

/// Writes the fields `byte_len` .. `vendor_err` of `wc` from `tail` with one 8-byte
/// store (the compiler, which sees that some of a constant table's fields are the
/// same in every entry, would otherwise split the copy into a store per field).
#[inline(always)]
pub(crate) fn put_tail(wc: &mut WorkCompletion, tail: WcTailBits) {
    let p = std::ptr::from_mut(wc).cast::<u8>().wrapping_add(WC_TAIL_AT);
    // SAFETY: `WC_TAIL_AT .. WC_TAIL_AT + 8` are the bytes of `wc`'s fields
    // `byte_len` .. `vendor_err`, at the offsets (from `byte_len`) of the same fields
    // in `WcTail` (asserted at compile time in `wc.rs`), inside `wc`, which is
    // exclusively borrowed (no other reference sees the write); `tail` holds the
    // bytes of a valid `WcTail` in memory order (`WcTailBits`' invariant), so each
    // field gets a valid value of its type; an unaligned store (`byte_len`'s offset
    // is not a multiple of 8).
    unsafe { p.cast::<u64>().write_unaligned(tail.get()) }
}

/// An entry of a [`CqeCursor`]'s ring (borrowing the cursor, so its buffer stays
/// alive while this exists): reads of its bytes, once its owner byte said it is
/// software's and the read barrier was issued.
#[derive(Clone, Copy)]
pub(crate) struct CqeAt<'a> {
    /// `op_own` byte of the entry's CQE64: `base + 64 * j + 63`, below the ring's
    /// end, inside the cursor's live buffer (a value the cursor's `at` had, so the
    /// invariant held for it): the 64 bytes that end here are in the ring.
    at: *const u8,
    _cur: std::marker::PhantomData<&'a ()>,
}

impl CqeAt<'_> {
    /// The 4 bytes that start `BACK` bytes before the entry's `op_own` byte, in the
    /// entry's byte order read as a native-endian `u32` (no byte swap: callers compare
    /// them with values prepared in the same form, or swap them).
    #[inline(always)]
    pub(crate) fn raw32<const BACK: usize>(self) -> u32 {
        const { assert!(BACK >= 3 && BACK < CQE_STRIDE) };
        // SAFETY: `at - BACK .. at - BACK + 4` lies inside the CQE64 of `at` (`3 <=
        // BACK <= 63`, and the CQE64 spans `at - 63 ..= at`), which is inside the live
        // buffer (the cursor's invariant; the borrow keeps the buffer alive); an
        // unaligned plain read: the device no longer writes this entry (its owner
        // byte was tested, then the read barrier).
        unsafe { self.at.sub(BACK).cast::<u32>().read_unaligned() }
    }

    /// The 8 bytes that end with the `op_own` byte (`BACK` = 7: bytes 56..=63 of the
    /// entry), as [`CqeAt::raw32`] (native-endian, not swapped).
    #[inline(always)]
    pub(crate) fn raw64<const BACK: usize>(self) -> u64 {
        const { assert!(BACK >= 7 && BACK < CQE_STRIDE) };
        // SAFETY: as in `raw32`: `at - BACK .. at - BACK + 8` is inside the CQE64
        // (`7 <= BACK <= 63`).
        unsafe { self.at.sub(BACK).cast::<u64>().read_unaligned() }
    }

    /// The entry's last 8 bytes (`sop_drop_qpn`, `wqe_counter`, `signature`,
    /// `op_own`: bytes 56..=63) in one atomic load, native-endian as
    /// [`CqeAt::raw64`], for an owner test that also reads the fields beside the
    /// owner byte: before the owner test and the read barrier, while the device may
    /// be writing the entry. The device writes `op_own` after the rest of the entry
    /// (the PRM's CQE ownership; the simulator's body, a release fence, then the
    /// byte), and an aligned 8-byte load is single-copy atomic, so a load that sees
    /// the owner bit of this pass sees the other 7 bytes of this pass too.
    #[inline(always)]
    pub(crate) fn tail_atomic(self) -> u64 {
        // SAFETY: `at - 7 = base + 64 * j + 56` is 8-byte aligned (`base` is, the
        // cursor's invariant) and `at - 7 ..= at` lies inside the CQE64, inside the
        // live buffer (the borrow keeps it alive); the driver accesses these bytes
        // only by loads, and this one is atomic (the device writes them
        // concurrently).
        unsafe { AtomicU64::from_ptr(self.at.sub(7).cast_mut().cast::<u64>()) }
            .load(Ordering::Relaxed)
    }

    /// The byte `BACK` bytes before the `op_own` byte. A volatile read: one load of
    /// its own, which the compiler does not derive from a wider read of the same
    /// bytes (that costs a register copy on the poll path).
    #[inline(always)]
    pub(crate) fn byte<const BACK: usize>(self) -> u8 {
        const { assert!(BACK < CQE_STRIDE) };
        // SAFETY: as in `raw32`: `at - BACK` is inside the CQE64; a plain (volatile)
        // read of a byte the device no longer writes.
        unsafe { self.at.sub(BACK).read_volatile() }
    }
}

/// The send ring of a QP as the typed entries ([`SendBatch`](super::SendBatch)) write
/// it, with every bound proved once, here, instead of per store:
///
/// * the ring holds `mask + 1` WQEBBs (a power of two) of 64 bytes, and the `wr_id`
///   table `mask + 1` entries;
/// * the **position** of the next WQE: its slot `s` and `left`, the WQEBBs the
///   typed entries may still take from there, with `s + left <= mask + 1`: a WQE of
///   `n <= left` WQEBBs lies inside the ring and before its end, and so does its
///   `wr_id` entry. It is kept relative to the end of the budget, `e = s + left`:
///   two pointers (`wend = ring + 64 * e`, `iend = ids + e`) and one negative
///   offset `off = -8 * left`, so the WQE is at `wend + 8 * off` and its entry at
///   `iend` plus `off` bytes, and taking `n` WQEBBs is one add to `off` and a test
///   of its sign (no pointer moves). `left` is
///   also the **post budget**: the QP places the position with at most the WQEBBs
///   it knows free, and with 0 when its state forbids posting, so one
///   compare-and-branch per WQE checks the state, the room and the bound at once
///   (0 sends every request to the out-of-line path, which checks exactly);
/// * the position never passes a multiple of 256 WQE indexes either (`s + left`
///   is at most the end of the position's **chunk** of `min(mask + 1, 256)` slots,
///   which divides the ring: [`WqeSlots::place`](crate::ring::WqeSlots::place)),
///   so the batch cursor's control head moves on by one add (`ring::SqCursor`);
///   the rest of a budget placed beyond the chunk's end is kept (`rest`, with
///   the same meaning: 0 after every state change) and placed at the next chunk by
///   [`SqSlots::advance`], with no other check;
/// * the doorbell register, when the bus lets the driver store to it directly
///   ([`Bus::direct_reg`]): a power of two of bytes, so a store at `off &
///   (len - 8)` is inside it with no compare.
///
/// The owner keeps the ring's DMA buffer, the `wr_id` table and the bus alive;
/// [`SqSlots::open`] hands out a [`Slots`] for one batch (a copy of the position,
/// kept in registers, and a borrow of the owner to save it back).
///
/// `repr(C)`, the position and the gates first, the per-length tables after: a post
/// to a QP whose state is cold reads one or two cache lines of it, not one per field.
#[repr(C)]
pub(crate) struct SqSlots<B: Bus> {
    pos: SlotPos,
    /// The most `one_lim` may be: 0 (closed for good) when the queue may use
    /// BlueFlame; the owner sets it ([`SqSlots::set_one_cap`]).
    one_cap: u32,
    /// The one-request inline entry's gate ([`SqSlots::take_one_inline`]): a payload
    /// of `1..=one_lim` bytes takes it. At most `one_cap`
    /// ([`SqSlots::refresh_one_limit`]).
    one_lim: usize,
    fixed: SlotsFixed,
    /// The 8-byte doorbell of the one-request entry: the direct register, or, when
    /// the bus offers none, `_spare` (unused: [`SqSlots::ring_one`] then rings
    /// through the bus).
    one_db: NonNull<AtomicU64>,
    /// The doorbell register's BAR0 offset (for [`Bus::write64`] when it is not
    /// direct).
    one_reg: usize,
    /// `len - 8` of `one_db`'s words (a power of two of bytes): `off & one_mask` is a
    /// word inside it.
    one_mask: usize,
    /// The memory image of the first 8 bytes of the one-request inline WQE's control
    /// segment at index 0, per payload length `0..=64` (entry 0 unused):
    /// [`SendQueue::one_inline_head`](crate::ring::SendQueue::one_inline_head).
    one_heads: [u64; 65],
    /// Per payload length `0..=64`: the inline header's image and the WQE's size
    /// ([`OneLen`]).
    one_lens: [OneLen; 65],
    _spare: Option<Box<AtomicU64>>,
    _buf: Arc<DmaBuf<B>>,
    _ids: Arc<[AtomicU64]>,
    _bus: Arc<B>,
}

/// What does not change: the ring, the table, the register.
#[repr(C)]
struct SlotsFixed {
    ring: NonNull<u8>,
    ids: NonNull<AtomicU64>,
    mask: u32,
    /// `min(mask, 255)`: a chunk (see [`SqSlots`]) is `chunk_mask + 1` slots.
    chunk_mask: u32,
    /// The budget placed beyond the position's chunk (WQEBBs known free after
    /// `s + left`, 0 when the state forbids posting): placed by
    /// [`WqeSlots::place`](crate::ring::WqeSlots::place), taken by
    /// [`SqSlots::advance`], cleared by [`SqSlots::close`].
    rest: std::cell::Cell<u32>,
    /// The WQE index at `s + left` (where the position was placed plus the budget
    /// placed there): the position's index is `end - left`
    /// ([`WqeSlots::index`](crate::ring::WqeSlots::index)), kept exact by every
    /// take (which moves the index and `left` by the same WQEBBs).
    end: std::cell::Cell<u16>,
    /// The direct register, or `None`.
    reg: Option<NonNull<AtomicU64>>,
    /// `reg_len - 8` (the register is a power of two of bytes): `off & reg_mask` is
    /// a word inside it.
    reg_mask: usize,
}

/// A position in the ring (see [`SqSlots`]), relative to the end of its budget `e =
/// s + left <= mask + 1`: `wend = ring + 64 * e`, `iend = ids + e`, `off = -8 *
/// left` (so `-8 * (mask + 1) <= off <= 0`; the WQE is at `wend + 8 * off`, its
/// `wr_id` entry at `iend` plus `off` bytes).
#[derive(Clone, Copy)]
struct SlotPos {
    wend: *mut u8,
    iend: *const AtomicU64,
    off: isize,
}

impl SlotPos {
    /// The WQEBBs left (`left`).
    #[inline(always)]
    fn left(&self) -> u32 {
        // `off = -8 * left`, `left <= 2^16`.
        (self.off.unsigned_abs() >> 3) as u32
    }

    /// The WQE's first byte and its `wr_id` entry at the position (`ring + 64 * s`,
    /// `ids + s`: inside the ring and the table when `left >= 1`, one past their
    /// ends otherwise).
    #[inline(always)]
    fn at(&self) -> (*mut u8, *const AtomicU64) {
        (
            self.wend.wrapping_offset(8 * self.off),
            self.iend.wrapping_byte_offset(self.off),
        )
    }
}

// SAFETY: the owner keeps its allocations alive (the Arcs); the ring bytes are used
// as `FastMem`'s are (module doc: written only by the QP's owner, through `&mut` of
// the QP), the `wr_id` table and the register words only atomically.
unsafe impl<B: Bus> Send for SqSlots<B> {}
// SAFETY: as for `Send`; the ring is only written through `&mut SqSlots`.
unsafe impl<B: Bus> Sync for SqSlots<B> {}

impl<B: Bus> SqSlots<B> {
    /// The send ring of `wqebbs` WQEBBs at byte `off` of `buf`, its `wr_id` table
    /// `ids`, and the doorbell register of `reg_len` bytes at BAR0 offset `reg` of
    /// `bus` (used directly only if the bus allows it and `reg_len` is a power of
    /// two). `None` unless `wqebbs` is a power of two of at most 2^16 (what the
    /// 16-bit WQE counter indexes), the ring lies inside `buf` and the table has
    /// `wqebbs` entries. The position is slot 0 with nothing left (the owner places
    /// it).
    pub(crate) fn new(
        buf: &Arc<DmaBuf<B>>,
        off: usize,
        wqebbs: u32,
        ids: &Arc<[AtomicU64]>,
        bus: &Arc<B>,
        reg: usize,
        reg_len: usize,
    ) -> Option<Self> {
        if !wqebbs.is_power_of_two() || wqebbs > 1 << 16 || ids.len() != wqebbs as usize {
            return None;
        }
        let end = off.checked_add((wqebbs as usize).checked_mul(64)?)?;
        if end > buf.len() {
            return None;
        }
        let direct = if reg_len.is_power_of_two() && reg_len >= 8 {
            bus.direct_reg(reg, reg_len)
        } else {
            None
        };
        let (one_db, one_mask, spare) = match direct {
            Some(r) => (r, reg_len - 8, None),
            None => {
                let spare = Box::new(AtomicU64::new(0));
                (NonNull::from(&*spare), 0, Some(spare))
            }
        };
        // In bounds: checked above (`wrapping_add` needs no unsafe).
        let ring = NonNull::new(buf.as_ptr().wrapping_add(off))?;
        // A pointer to the whole table, so that it may address every entry.
        let ids_ptr: NonNull<AtomicU64> = NonNull::from(&ids[..]).cast();
        Some(SqSlots {
            fixed: SlotsFixed {
                ring,
                ids: ids_ptr,
                mask: wqebbs - 1,
                reg: direct,
                reg_mask: reg_len.wrapping_sub(8),
                chunk_mask: (wqebbs - 1).min(255),
                rest: std::cell::Cell::new(0),
                end: std::cell::Cell::new(0),
            },
            // Slot 0, nothing left: `e = 0 + 0 <= mask + 1`.
            pos: SlotPos {
                wend: ring.as_ptr(),
                iend: ids_ptr.as_ptr(),
                off: 0,
            },
            one_lim: 0,
            one_cap: 0,
            one_db,
            one_reg: reg,
            one_mask,
            one_heads: [0; 65],
            one_lens: [OneLen::default(); 65],
            _spare: spare,
            _buf: Arc::clone(buf),
            _ids: Arc::clone(ids),
            _bus: Arc::clone(bus),
        })
    }

    /// Whether the typed entries may take nothing without the out-of-line path
    /// (no WQEBB left: closed, or the budget spent; one compare).
    #[inline(always)]
    pub(crate) fn spent(&self) -> bool {
        self.pos.off == 0
    }

    /// Closes the fast path (nothing left): the next typed request goes out of line,
    /// which checks the state and the room exactly and places the position again.
    /// Whoever changes the QP's state or writes WQEs other than through [`Slots`]
    /// calls this.
    #[inline(always)]
    pub(crate) fn close(&mut self) {
        // `e = s`: the invariant holds.
        self.pos.off = 0;
        self.fixed.rest.set(0);
    }

    /// Places the position at WQE index `index` (the producer counter: the next
    /// chunk's start when the current one was used up) with the budget kept beyond
    /// the current chunk (`rest`), when the position's budget is spent (`left` is
    /// 0) and some is kept; whether it did. That budget was placed with the checks
    /// of a batch's opening (state, room) and is cleared by every state change
    /// ([`SqSlots::close`]), so none is needed again; it never grows.
    #[inline(always)]
    pub(crate) fn advance(&mut self, index: u16) -> bool {
        let rest = self.fixed.rest.get();
        if self.pos.off != 0 || rest == 0 {
            return false;
        }
        let mut p = self.open();
        crate::ring::WqeSlots::place(&mut p, index, rest);
        crate::ring::WqeSlots::save(&mut p);
        true
    }

    /// Sets the most the one-request inline entry ([`SqSlots::take_one_inline`]) may
    /// take, if the doorbell register is direct (else it stays closed): the caller
    /// passes 0 when the queue may use BlueFlame (that entry only rings the 8-byte
    /// doorbell), else its largest inline payload. The entry takes at most 64 bytes
    /// (two WQEBBs, copied with four moves); longer payloads go through a batch.
    /// `head(len)` is the image of its control segment's first 8 bytes at index 0
    /// for a payload of `len` bytes
    /// ([`SendQueue::one_inline_head`](crate::ring::SendQueue::one_inline_head)).
    /// Closed until [`SqSlots::refresh_one_limit`].
    pub(crate) fn set_one_cap(&mut self, cap: u32, head: impl Fn(usize) -> u64) {
        self.one_cap = cap.min(64);
        self.one_lim = 0;
        for (len, h) in self.one_heads.iter_mut().enumerate().skip(1) {
            *h = head(len);
        }
        for (len, l) in self.one_lens.iter_mut().enumerate() {
            *l = OneLen::of(len);
        }
    }

    /// Whether the one-request inline entry is closed for good (a queue that may ring
    /// BlueFlame: [`SqSlots::set_one_cap`]).
    #[inline(always)]
    pub(crate) fn one_closed(&self) -> bool {
        self.one_cap == 0
    }

    /// Places the one-request inline entry's gate for the depth high-water mark
    /// `hwm` (WQEBBs): the payloads whose WQE takes at most `hwm` WQEBBs (`(16 + 4 +
    /// 63 + len) / 64 <= hwm`, i.e. `len <= 64 * hwm - 20`), within the cap. A post
    /// through that entry right after the completion of every earlier WQE (the
    /// only case it counts itself) leaves a depth of its own WQEBBs, so it never
    /// raises the mark: the mark's compare is this gate. The mark never decreases,
    /// so a gate placed from an older mark stays exact (only narrower).
    pub(crate) fn refresh_one_limit(&mut self, hwm: u16) {
        if self.one_cap == 0 {
            // Closed for good (and `one_lim` is 0 since `set_one_cap`).
            return;
        }
        let by_hwm = (64 * u32::from(hwm)).saturating_sub(20);
        self.one_lim = self.one_cap.min(by_hwm) as usize;
    }

    /// Takes the WQEBBs of a one-request inline SEND WQE of `data` at the
    /// position, records its `wr_id` and moves on (saved), when the payload passes
    /// the one-request gate (`1 <= len <= one_lim`, see
    /// [`SqSlots::refresh_one_limit`]) and its WQEBBs are left in the budget; `None`
    /// otherwise, with nothing written (and the budget closed when it was short).
    /// The returned [`OneInline`] writes the WQE ([`OneInline::write`]); the
    /// doorbell is then [`SqSlots::ring_one`]. The bookkeeping is stored first, so
    /// that none of it stays in registers while the WQE is written.
    #[inline(always)]
    pub(crate) fn take_one_inline<'d>(
        &mut self,
        data: &'d [u8],
        wr_id: u64,
    ) -> Option<OneInline<'_, 'd>> {
        let len = data.len();
        // One compare for both: 1 <= len <= one_lim (at most 64).
        if len.wrapping_sub(1) >= self.one_lim {
            return None;
        }
        // SAFETY: `len <= one_lim <= one_cap <= 64` (checked above; `set_one_cap`,
        // `refresh_one_limit`): an entry of the 65.
        let l = unsafe { *self.one_lens.get_unchecked(len) };
        let n = usize::from(l.n);
        // `off + 8 * n` (`8 * n <= 16`): positive exactly when fewer than `n` are
        // left; then the budget is closed instead (0: every request goes out of
        // line, which places it again), so the invariant holds on both paths.
        let (wqe, id) = self.pos.at();
        // The WQE's address as a value of its own (no instruction): its stores then
        // address it directly, and the ring base and the position need not stay in
        // registers until the WQE is written.
        #[cfg(target_arch = "x86_64")]
        let wqe = {
            let mut p = wqe;
            // SAFETY: an empty instruction sequence: it reads and writes no memory
            // and leaves the pointer unchanged.
            #[allow(clippy::pointers_in_nomem_asm_block)] // the pointer is not read
            unsafe {
                std::arch::asm!("/* {0} */", inout(reg) p, options(pure, nomem, nostack, preserves_flags))
            };
            p
        };
        let off = self.pos.off + l.step as isize;
        if off > 0 {
            self.pos.off = 0;
            return None;
        }
        // The new slot `s + n <= e` (see `Slots::take`), with `left - n`.
        self.pos.off = off;
        // SAFETY: `s + n <= s + left = e <= mask + 1` (the position's invariant, with
        // `n <= left` checked above): the entry `id` is inside the table, which
        // `self` keeps alive, and only accessed atomically.
        unsafe { (*id).store(wr_id, Ordering::Relaxed) };
        Some(OneInline {
            wqe,
            data,
            n: n as u32,
            lens: &self.one_lens,
            heads: &self.one_heads,
        })
    }

    /// The 8-byte doorbell `image` (memory image) of a WQE written by
    /// [`SqSlots::take_one_inline`], stored at byte `off` (the BlueFlame half) of
    /// the direct register: one relaxed store, as `Bus::write64` would make it.
    #[inline(always)]
    pub(crate) fn ring_one(&self, off: usize, image: u64) {
        debug_assert!(self.one_lim > 0, "only after take_one_inline");
        if self.fixed.reg.is_none() {
            // No direct register: the bus's doorbell (the value the image holds).
            return ring_bus(&*self._bus, self.one_reg + off, u64::from_be(image));
        }
        let at = off & self.one_mask;
        // SAFETY: `one_db` is the bus's direct register of `one_mask + 8` bytes (a
        // power of two: `SqSlots::new`; valid while the bus lives, which `self` keeps
        // alive) or the 8-byte `_spare` word `self` owns (`one_mask = 0`); `at` has
        // its low 3 bits clear and is at most `one_mask`: a word inside it. A
        // relaxed atomic store of the memory image, as `Bus::write64`'s contract.
        unsafe { (*self.one_db.as_ptr().byte_add(at)).store(image, Ordering::Relaxed) };
    }

    /// The position for one batch (see the type's documentation).
    #[inline(always)]
    pub(crate) fn open(&mut self) -> Slots<'_> {
        Slots {
            pos: self.pos,
            fixed: &self.fixed,
            home: &mut self.pos,
            _home: std::marker::PhantomData,
        }
    }
}

/// The one-request entry's doorbell on a bus without a direct register
/// ([`SqSlots::ring_one`]): out of line, called last.
#[inline(never)]
fn ring_bus<B: Bus>(bus: &B, off: usize, value: u64) {
    bus.write64(off, value);
}

/// The position of a [`SqSlots`] for one batch: a copy kept in registers, written
/// back by [`WqeSlots::save`](crate::ring::WqeSlots::save); every access is in
/// bounds by the position's invariant (see each method). `Copy`, so that a batch
/// can hand it to an out-of-line function by value (a reference would keep it in
/// memory); `home` is the owner's position, mutably borrowed for `'a`.
#[derive(Clone, Copy)]
pub(crate) struct Slots<'a> {
    pos: SlotPos,
    fixed: &'a SlotsFixed,
    home: *mut SlotPos,
    _home: std::marker::PhantomData<&'a mut SlotPos>,
}

impl Slots<'_> {
    /// Takes `n` WQEBBs at the position: the WQE's first byte and its `wr_id` entry,
    /// or `None` (nothing changes) when fewer than `n` are left. On `Some`, the
    /// `64 * n` bytes at the WQE pointer and the entry are inside the ring and the
    /// table: `s + n <= s + left <= mask + 1`.
    #[inline(always)]
    fn take(&mut self, n: u32) -> Option<(*mut u8, *const AtomicU64)> {
        debug_assert!(n <= 1 << 30);
        // `-2^19 <= off <= 0` (`left <= mask + 1 <= 2^16`, `SqSlots::new`) and `n <=
        // 2^30` (the callers): `off + 8 * n` is exact, and fewer than `n` are left
        // exactly when `off > -8 * n`. The test reads the offset the stores address
        // from (so only one value lives): a compare, a branch and one add per WQE,
        // no pointer moves.
        if self.pos.off > -8 * n as isize {
            return None;
        }
        let at = self.pos.at();
        // The new slot `s + n <= e` (the budget's end, at most one past the ring's
        // last slot, which `left = 0` then keeps from being used): the invariant
        // holds with `left - n`.
        self.pos.off += 8 * n as isize;
        Some(at)
    }
}

impl<'a> crate::ring::WqeSlots for Slots<'a> {
    #[inline(always)]
    fn left(&self) -> u32 {
        self.pos.left()
    }

    #[inline(always)]
    fn place(&mut self, index: u16, budget: u32) {
        let f = self.fixed;
        let s = u32::from(index) & f.mask;
        // To the end of the chunk: `chunk - s mod chunk <= mask + 1 - s` (the chunk,
        // `min(mask + 1, 256)`, divides the ring), and `s mod chunk = index mod
        // chunk` (both masks are powers of two less one); so the WQEs placed have
        // indexes within one multiple of 256 (a chunk of a ring of at most 256 slots
        // ends at a multiple of the ring size, which divides 256).
        let left = budget.min(f.chunk_mask + 1 - (s & f.chunk_mask));
        f.rest.set(budget - left);
        f.end.set(index.wrapping_add(left as u16));
        // `s <= mask`, and `e = s + left <= mask + 1`: the invariant.
        let e = (s + left) as usize;
        self.pos = SlotPos {
            wend: f.ring.as_ptr().wrapping_add(64 * e),
            iend: f.ids.as_ptr().wrapping_add(e),
            off: -8 * left as isize,
        };
    }

    #[inline(always)]
    fn put<const W: usize, const SAVE: bool>(&mut self, words: &[u64; W], wr_id: u64) -> bool {
        const { assert!(W >= 2 && W <= 8, "a WQE's leading segments fill one WQEBB") };
        let Some((wqe, id)) = self.take(1) else {
            return false;
        };
        if SAVE {
            crate::ring::WqeSlots::save(self);
        }
        // SAFETY: `take(1)`: the 64 bytes at `wqe` are inside the ring, and `8 * W <=
        // 64`; the owner (borrowed by `self`) keeps the ring and the table alive; no
        // Rust reference points into the ring; unaligned stores of `u64` memory
        // images; the slot belongs to the driver until the doorbell (module doc); the
        // table entry is only accessed atomically.
        unsafe {
            (*id).store(wr_id, Ordering::Relaxed);
            wqe.cast::<[u64; W]>().write_unaligned(*words);
        }
        true
    }

    #[inline(always)]
    fn put_inline<const W: usize, const SAVE: bool>(
        &mut self,
        words: &[u64; W],
        data: &[u8],
        wr_id: u64,
    ) -> bool {
        const { assert!(W >= 2 && W <= 6 && W.is_multiple_of(2), "leading segments") };
        // The WQEBBs of the WQE: leading segments, header and payload, rounded up.
        let n = (8 * W + 4 + 63 + data.len()) >> 6;
        if n > 1 << 30 {
            return false;
        }
        let Some((wqe, id)) = self.take(n as u32) else {
            return false;
        };
        if SAVE {
            crate::ring::WqeSlots::save(self);
        }
        let len = data.len() as u32 | ferroverbs_hw::datapath::wqe::MLX5_INLINE_SEG;
        // SAFETY: `take(n)`: the `64 * n >= 8 * W + 4 + data.len()` bytes at `wqe` are
        // inside the ring, which the owner keeps alive; no Rust reference points into
        // it; unaligned stores; the slots belong to the driver until the doorbell
        // (module doc); the table entry is only accessed atomically.
        unsafe {
            (*id).store(wr_id, Ordering::Relaxed);
            wqe.cast::<[u64; W]>().write_unaligned(*words);
            let hdr = wqe.add(8 * W);
            hdr.cast::<[u8; 4]>().write_unaligned(len.to_be_bytes());
            copy_small(hdr.add(4), data);
        }
        true
    }

    #[inline(always)]
    fn save(&mut self) {
        let p = self.pos;
        // SAFETY: `home` comes from the `&'a mut` of the owner's position
        // (`SqSlots::open`), which stays borrowed for `'a` (the `PhantomData`), so
        // nothing else reads or writes it meanwhile; copies of this `Slots` are
        // used by one batch on one thread, one after the other. The value keeps the
        // position's invariant (every `SlotPos` here does). Field by field (a
        // whole-struct copy would move the padding too).
        unsafe {
            (*self.home).wend = p.wend;
            (*self.home).iend = p.iend;
            (*self.home).off = p.off;
        }
    }

    #[inline(always)]
    fn index(&self) -> u16 {
        // `off / 8 = -left`, `left <= 256`: the same WQEBBs as the index moved since
        // the placement.
        self.fixed
            .end
            .get()
            .wrapping_add((self.pos.off >> 3) as u16)
    }

    type Regs = Regs<'a>;

    #[inline(always)]
    fn regs(&self) -> Regs<'a> {
        Regs(self.fixed)
    }
}

/// What the one-request inline entry needs of a payload's length `len <= 64`
/// ([`SqSlots::take_one_inline`]), one entry per length (loads instead of
/// arithmetic on the straight path).
#[derive(Clone, Copy, Default)]
#[repr(C, align(8))]
struct OneLen {
    /// The memory image of the inline header: `len | MLX5_INLINE_SEG`, big-endian.
    hdr: u32,
    /// The WQE's WQEBBs: control segment, header and payload, rounded up.
    n: u16,
    /// `8 * n`: what the position's offset moves by.
    step: u16,
}

impl OneLen {
    fn of(len: usize) -> OneLen {
        let hdr = len as u32 | ferroverbs_hw::datapath::wqe::MLX5_INLINE_SEG;
        let n = (16 + 4 + len).div_ceil(64) as u16;
        OneLen {
            hdr: u32::from_ne_bytes(hdr.to_be_bytes()),
            n,
            step: 8 * n,
        }
    }
}

/// The WQEBBs of a one-request inline WQE, taken by [`SqSlots::take_one_inline`]:
/// the `64 * n >= 20 + len` bytes at `wqe` are inside the ring and belong to the
/// driver, for the payload `data` of `1 <= len <= 64` bytes; borrows the ring's
/// owner (`'s`) until it is written.
pub(crate) struct OneInline<'s, 'd> {
    wqe: *mut u8,
    data: &'d [u8],
    n: u32,
    lens: &'s [OneLen; 65],
    heads: &'s [u64; 65],
}

impl OneInline<'_, '_> {
    /// The WQE's WQEBBs.
    #[inline(always)]
    pub(crate) fn wqebbs(&self) -> u32 {
        self.n
    }

    /// Writes the WQE at index `index`: its control segment (the
    /// [`SqSlots::set_one_cap`] head for the length with the index, and the image
    /// `tail` of bytes 8-15), the inline header and the payload. Returns the memory
    /// image of its first 8 bytes (the 8-byte doorbell).
    #[inline(always)]
    pub(crate) fn write(self, index: u16, tail: u64) -> u64 {
        let (data, len) = (self.data, self.data.len());
        // SAFETY: `1 <= len <= one_lim <= one_cap <= 64` (`take_one_inline`,
        // `set_one_cap`, `refresh_one_limit`): an entry of the 65.
        let head = unsafe { *self.heads.get_unchecked(len) };
        // The index's big-endian bytes 1 and 2 (see `SendQueue::one_inline_head`):
        // `swap_bytes` puts them in bytes 3 and 2 of the 32-bit value.
        let image = head | u64::from(u32::from(index).swap_bytes() >> 8);
        let wqe = self.wqe;
        // SAFETY: the `64 * n >= 20 + len` bytes at `wqe` are inside the ring
        // (`take_one_inline`), which its owner keeps alive (`self` borrows the owner,
        // so it is neither dropped nor used meanwhile); no Rust reference points
        // into the ring and `data` (a Rust slice) is not in it; unaligned stores;
        // the slots belong to the driver until the doorbell (module doc);
        // `len <= 64` for `copy_upto64`, and an entry of the 65 `lens`.
        unsafe {
            wqe.cast::<[u64; 2]>().write_unaligned([image, tail]);
            // The header's image read here, after the control segment's stores (so
            // that it does not take a register while they are made): the same
            // entry as `take_one_inline`'s.
            let hdr = self.lens.get_unchecked(len).hdr;
            wqe.add(16).cast::<u32>().write_unaligned(hdr);
            copy_upto64::<20>(wqe, data);
        }
        image
    }
}

/// The fixed part of a [`SqSlots`] (ring, mask, direct register) for the doorbell,
/// borrowed from the owner.
#[derive(Clone, Copy)]
pub(crate) struct Regs<'a>(&'a SlotsFixed);

impl crate::ring::DoorbellRegs for Regs<'_> {
    #[inline(always)]
    fn direct(self) -> bool {
        self.0.reg.is_some()
    }

    #[inline(always)]
    fn head(self, index: u16) -> u64 {
        let f = self.0;
        let slot = (u32::from(index) & f.mask) as usize;
        // SAFETY: the first 8 bytes of slot `slot <= mask`, inside the ring, which the
        // owner keeps alive; the driver wrote them and the device only reads them.
        u64::from_be_bytes(unsafe {
            f.ring
                .as_ptr()
                .add(slot * 64)
                .cast::<[u8; 8]>()
                .read_unaligned()
        })
    }

    #[inline(always)]
    fn db64(self, off: usize, image: u64) -> bool {
        debug_assert!(off.is_multiple_of(8), "doorbell offsets are whole words");
        let f = self.0;
        let Some(reg) = f.reg else {
            return false;
        };
        debug_assert!(off <= f.reg_mask, "doorbell offset inside the register");
        let at = off & f.reg_mask;
        // SAFETY: `reg` is the bus's direct register of `reg_mask + 8` bytes, a power
        // of two (`Bus::direct_reg`: word-aligned, valid while the bus lives, which
        // the owner keeps alive); `at = off & (len - 8)` is a multiple of 8 below
        // `len` (`reg_mask` has its low 3 bits clear). A relaxed atomic store of the
        // memory image, as the contract says.
        unsafe { (*reg.as_ptr().byte_add(at)).store(image, Ordering::Relaxed) };
        true
    }

    #[inline(always)]
    fn blueflame(self, index: u16, wqebbs: u16, off: usize) -> bool {
        debug_assert!(off.is_multiple_of(8), "BlueFlame offsets are whole words");
        let f = self.0;
        let Some(reg) = f.reg else {
            return false;
        };
        let n = usize::from(wqebbs);
        let words = (f.reg_mask + 8) / 8;
        let w0 = off / 8;
        if w0 + n * 8 > words {
            return false;
        }
        let base = f.ring.as_ptr();
        for k in 0..n {
            let slot = (u32::from(index.wrapping_add(k as u16)) & f.mask) as usize;
            for w in 0..8 {
                // SAFETY: the source is word `w` of slot `slot <= mask`, inside the
                // ring; the destination word `w0 + 8k + w < w0 + 8n <= words` is
                // inside the register (checked), valid while the bus lives
                // (`Bus::direct_reg`); relaxed atomic stores of the memory image, in
                // ascending order.
                unsafe {
                    let v = base.add(slot * 64 + w * 8).cast::<u64>().read_unaligned();
                    (*reg.as_ptr().add(w0 + k * 8 + w)).store(v, Ordering::Relaxed);
                }
            }
        }
        true
    }
}

/// The two 8-byte words of `sge` as they are in memory read as native-endian
/// values: `addr`, and `length | lkey << 32` (on a little-endian host; `length << 32
/// | lkey` on a big-endian one). Two loads, both done here, before any test of
/// them: volatile reads, so that the compiler neither moves the second past the
/// caller's tests nor keeps the entry's address in a register for it (the typed
/// send entries' straight path then has no address to compute per request).
#[inline(always)]
pub(crate) fn sge_words(sge: &crate::ring::Sge) -> [u64; 2] {
    const {
        assert!(std::mem::size_of::<crate::ring::Sge>() == 16);
        assert!(std::mem::align_of::<crate::ring::Sge>() == 8);
        assert!(std::mem::offset_of!(crate::ring::Sge, addr) == 0);
        assert!(std::mem::offset_of!(crate::ring::Sge, length) == 8);
        assert!(std::mem::offset_of!(crate::ring::Sge, lkey) == 12);
    };
    let p = std::ptr::from_ref(sge).cast::<u64>();
    // SAFETY: `p` points to a live `Sge` (a shared reference), which is 16 bytes,
    // 8-byte aligned and without padding (`repr(C)`, asserted above): the words at
    // `p` and `p + 1` are initialised, aligned and inside it; reading them aliases
    // no write (the reference is shared).
    unsafe { [p.read_volatile(), p.add(1).read_volatile()] }
}

/// Copies `src` to `dst` with fixed-size moves (no call of the C library's `memcpy`:
/// an inline payload is at most a few hundred bytes, usually 64 or fewer). Overlapping
/// moves rewrite some bytes with the same values; no byte outside
/// `dst..dst + src.len()` is written.
///
/// # Safety
/// `dst..dst + src.len()` must be valid for writes and not overlap `src`.
#[inline(always)]
unsafe fn copy_small(dst: *mut u8, src: &[u8]) {
    let n = src.len();
    let s = src.as_ptr();
    // SAFETY (every move below): the source range is inside `src` (each case names
    // the bound on `n` it relies on), the destination the same offsets of `dst`,
    // valid by the caller's contract; unaligned loads and stores of byte arrays.
    unsafe {
        let mv16 = |at: usize| {
            dst.add(at)
                .cast::<[u8; 16]>()
                .write_unaligned(s.add(at).cast::<[u8; 16]>().read_unaligned())
        };
        if n > 64 {
            // Out of line, so that the short copies need no registers saved.
            copy_long(dst, src);
        } else if n > 32 {
            // 32 < n <= 64: the first 32 bytes and the last 32 (overlapping).
            mv16(0);
            mv16(16);
            mv16(n - 32);
            mv16(n - 16);
        } else if n >= 16 {
            mv16(0);
            mv16(n - 16);
        } else if n >= 8 {
            let a = s.cast::<[u8; 8]>().read_unaligned();
            let b = s.add(n - 8).cast::<[u8; 8]>().read_unaligned();
            dst.cast::<[u8; 8]>().write_unaligned(a);
            dst.add(n - 8).cast::<[u8; 8]>().write_unaligned(b);
        } else if n >= 4 {
            let a = s.cast::<[u8; 4]>().read_unaligned();
            let b = s.add(n - 4).cast::<[u8; 4]>().read_unaligned();
            dst.cast::<[u8; 4]>().write_unaligned(a);
            dst.add(n - 4).cast::<[u8; 4]>().write_unaligned(b);
        } else if n > 0 {
            // 1..=3 bytes: the first, the middle and the last.
            *dst = *s;
            *dst.add(n / 2) = *s.add(n / 2);
            *dst.add(n - 1) = *s.add(n - 1);
        }
    }
}

/// [`copy_small`] of at most 64 bytes (no test for longer ones) to `base + OFF`
/// (the offset a constant, so that it folds into the stores' addresses).
///
/// # Safety
/// As for [`copy_small`] with `dst = base + OFF`, and `src.len() <= 64`.
#[inline(always)]
unsafe fn copy_upto64<const OFF: usize>(base: *mut u8, src: &[u8]) {
    let n = src.len();
    debug_assert!(n <= 64);
    let s = src.as_ptr();
    // SAFETY (every move below): the source range is inside `src` (each case names
    // the bound on `n` it relies on, with `n <= 64`), the destination the same
    // offsets of `dst = base + OFF`, valid by the caller's contract; unaligned
    // loads and stores of byte arrays.
    unsafe {
        let dst = base.add(OFF);
        let mv16 = |at: usize| {
            base.add(OFF + at)
                .cast::<[u8; 16]>()
                .write_unaligned(s.add(at).cast::<[u8; 16]>().read_unaligned())
        };
        if n > 32 {
            // 32 < n <= 64: the last 32 bytes and the first 32 (overlapping).
            mv16(n - 32);
            mv16(n - 16);
            mv16(0);
            mv16(16);
        } else {
            // Laid out after the long case, which then falls through to what
            // follows (the shorter copies take one jump more).
            std::hint::cold_path();
            copy_small(dst, src);
        }
    }
}

/// [`copy_small`] of more than 64 bytes: 32-byte steps, then the last 32 bytes
/// (overlapping).
///
/// # Safety
/// As for [`copy_small`], and `src.len() > 64`.
#[cold]
#[inline(never)]
unsafe fn copy_long(dst: *mut u8, src: &[u8]) {
    let n = src.len();
    let s = src.as_ptr();
    debug_assert!(n > 64);
    // SAFETY: every move reads 16 bytes at `at <= n - 16` of `src` and writes the
    // same offsets of `dst`, valid by the caller's contract.
    unsafe {
        let mv16 = |at: usize| {
            dst.add(at)
                .cast::<[u8; 16]>()
                .write_unaligned(s.add(at).cast::<[u8; 16]>().read_unaligned())
        };
        let mut at = 0;
        while at + 32 < n {
            mv16(at);
            mv16(at + 16);
            at += 32;
        }
        mv16(n - 32);
        mv16(n - 16);
    }
}

#[cfg(test)]
mod tests {
    use super::{copy_small, copy_upto64};

    #[test]
    fn copy_small_writes_exactly_the_payload() {
        let src: Vec<u8> = (0..300u32).map(|i| (i * 7 + 1) as u8).collect();
        for n in 0..=300 {
            for at in [0usize, 3, 20] {
                let mut dst = vec![0xaau8; 340];
                // SAFETY: `at + n <= 320 < 340` bytes of a distinct buffer.
                unsafe { copy_small(dst.as_mut_ptr().add(at), &src[..n]) };
                assert_eq!(&dst[at..at + n], &src[..n], "n {n} at {at}");
                assert!(dst[..at].iter().all(|&b| b == 0xaa), "before, n {n}");
                assert!(dst[at + n..].iter().all(|&b| b == 0xaa), "after, n {n}");
                if n <= 64 {
                    let mut d2 = vec![0xaau8; 340];
                    // SAFETY: as above, and `n <= 64`.
                    unsafe { copy_upto64::<0>(d2.as_mut_ptr().add(at), &src[..n]) };
                    assert_eq!(d2, dst, "copy_upto64, n {n} at {at}");
                    if at == 20 {
                        // The offset as the constant (the one-request entry's use).
                        let mut d3 = vec![0xaau8; 340];
                        // SAFETY: bytes `20 .. 20 + n <= 84` of a distinct buffer.
                        unsafe { copy_upto64::<20>(d3.as_mut_ptr(), &src[..n]) };
                        assert_eq!(d3, dst, "copy_upto64::<20>, n {n}");
                    }
                }
            }
        }
    }
}

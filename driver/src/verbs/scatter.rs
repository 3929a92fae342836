//! The memory regions of a device by key, for the one place software writes received
//! data itself: a completion whose data the device placed in the CQE (scatter to CQE),
//! which the poll copies where the work request said, as rdma-core's libmlx5 does: a
//! receive's message (`qpc.cs_res`) into the receive's scatter list (`cq.c`
//! `handle_responder`, `mlx5_copy_to_recv_wqe`), an RDMA READ response or an atomic
//! result (`qpc.cs_req`) into the send WQE's local list (`mlx5_parse_cqe`,
//! `mlx5_copy_to_send_wqe`).
//!
//! libmlx5 takes a scatter entry's address as a pointer, which holds only for memory
//! regions whose key translates host addresses (`ibv_reg_mr`); a zero-based region
//! or one registered at another IOVA (`ibv_reg_mr_iova2`) names its bytes by
//! addresses that are not pointers. The driver instead translates each entry as the
//! device does: its `lkey` names a region here (start address, length, host address
//! of byte 0), and the entry must lie inside it. Any region works, and nothing a
//! device or an application writes in a WQE or a CQE can make the poll write outside
//! a live region.
//!
//! Lookups are lock-free (three atomic loads down a 256-way radix tree over the
//! 24-bit key index, then the entry's atomics); only registration takes the lock, and
//! allocates the tree's nodes. A deregistration clears the entry and then waits for
//! copies in progress on it (at most 64 bytes each) before the region's memory may go.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ferroverbs_hw::datapath::wqe::MLX5_INVALID_LKEY;
use ferroverbs_hw::Bus;

use super::WcStatus;
use crate::dma::DmaBuf;

/// The receive WQEs of an RQ (data segments from byte 0 of each WQE) or an SRQ
/// (after its 16-byte next segment) in a DMA buffer, which it keeps alive, read back
/// by the poll: the WQE of a completion is not reused before it is retired, which the
/// copy precedes, so nothing writes it meanwhile.
///
/// Not generic over the bus (it lives in the QP's shared state, which is not): the
/// buffer's `Arc` is held type-erased ([`KeepAlive`]).
pub(crate) struct RingSegs {
    /// Byte 0 of WQE 0.
    ptr: *const u8,
    /// WQEs in the ring minus one (a power of two minus one).
    mask: u32,
    /// log2 of the WQE stride.
    shift: u32,
    /// Offset of the first data segment in a WQE.
    first: usize,
    _keep: KeepAlive,
}

// SAFETY: `ptr` points into the buffer `_keep` keeps alive, and is only read through
// atomic loads, so the value may move to and be shared with other threads like the
// `Arc<DmaBuf>` it holds (`DmaBuf` is `Send + Sync`).
unsafe impl Send for RingSegs {}
// SAFETY: as for `Send`: shared use is atomic loads of memory kept alive.
unsafe impl Sync for RingSegs {}

/// An `Arc<T>` held as a raw pointer and the function that drops it.
struct KeepAlive {
    p: *const (),
    drop: unsafe fn(*const ()),
}

/// Drops the `Arc<T>` that `Arc::into_raw` made `p`.
///
/// # Safety
/// `p` must come from `Arc::<T>::into_raw`, and be given here once.
unsafe fn drop_arc<T>(p: *const ()) {
    // SAFETY: the caller's promise.
    drop(unsafe { Arc::from_raw(p as *const T) });
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        // SAFETY: `p` and `drop` were made together in `RingSegs::new` from one
        // `Arc::into_raw`, dropped once, here. The `Arc<DmaBuf<B>>` drops within the
        // bus's lifetime: a `RingSegs` lives in a QP's `WqShared`, whose every owner
        // (the QP's queues, the pollers of its CQs) is generic over the same `B` and
        // so cannot outlive it.
        unsafe { (self.drop)(self.p) }
    }
}

impl RingSegs {
    /// The ring of `nwqe` (a power of two) WQEs of `1 << shift` bytes at `base` of
    /// `buf`, data segments from byte `first` of each; `None` if it does not fit.
    pub(crate) fn new<B: Bus>(
        buf: &Arc<DmaBuf<B>>,
        base: usize,
        nwqe: u32,
        shift: u32,
        first: usize,
    ) -> Option<Self> {
        let end = base.checked_add((nwqe as usize).checked_shl(shift)?)?;
        if !nwqe.is_power_of_two() || end > buf.len() || first + 16 > 1 << shift || shift < 4 {
            return None;
        }
        Some(RingSegs {
            // In bounds (checked above).
            ptr: buf.as_ptr().wrapping_add(base),
            mask: nwqe - 1,
            shift,
            first,
            _keep: KeepAlive {
                p: Arc::into_raw(Arc::clone(buf)) as *const (),
                drop: drop_arc::<DmaBuf<B>>,
            },
        })
    }

    /// Segment `k` of the WQE at `index` (masked to the ring): `(byte_count, lkey,
    /// addr)`, `None` past the WQE's last segment slot.
    fn seg(&self, index: u32, k: usize) -> Option<(u32, u32, u64)> {
        let at = self.first.checked_add(k.checked_mul(16)?)?;
        if at + 16 > 1 << self.shift {
            return None;
        }
        let off = (((index & self.mask) as usize) << self.shift) + at;
        let word = |i: usize| {
            // SAFETY: `off + 4 * i + 4 <= (mask + 1) << shift`, inside the ring that
            // `new` checked against the buffer, which `_keep` keeps alive; the offset
            // is a multiple of 4 from a page-aligned base; DMA memory is accessed only
            // atomically or by the rings, which do not write this WQE before it is
            // retired.
            let w = unsafe { AtomicU32::from_ptr(self.ptr.add(off + 4 * i) as *mut u32) };
            u32::from_be(w.load(Ordering::Relaxed))
        };
        // `struct mlx5_wqe_data_seg`: byte_count, lkey, addr (big-endian).
        let addr = (u64::from(word(2)) << 32) | u64::from(word(3));
        Some((word(0) & 0x7fff_ffff, word(1), addr))
    }
}

impl RingSegs {
    /// The big-endian word at byte `byte` of the ring, taken modulo the ring's size
    /// (a multiple of 4: the ring's size is a power of two of at least 16 bytes).
    fn ring_word(&self, byte: usize) -> u32 {
        let off = byte & ((((self.mask as usize) + 1) << self.shift) - 1) & !3;
        // SAFETY: `off + 4 <= (mask + 1) << shift` (masked to the ring, a multiple
        // of 4), inside the ring that `new` checked against the buffer, which
        // `_keep` keeps alive; 4-byte aligned from a page-aligned base. DMA memory is
        // accessed only atomically or by the rings, which do not write a WQE before
        // it is retired.
        let w = unsafe { AtomicU32::from_ptr(self.ptr.add(off) as *mut u32) };
        u32::from_be(w.load(Ordering::Relaxed))
    }
}

/// What an RC QP whose requester scatters to CQE (`qpc.cs_req`) needs to copy a READ
/// response or an atomic result out of a CQE: its send queue (64-byte WQEBBs) and
/// the device's regions.
pub(crate) struct SendScatter {
    pub(crate) sq: RingSegs,
    pub(crate) mrs: Arc<MrDir>,
}

impl SendScatter {
    /// Copies `data` (a READ response or an atomic result the device placed in the
    /// CQE of the send WQE at `index`) across that WQE's local scatter list, as
    /// libmlx5's `mlx5_copy_to_send_wqe` does: the data segments after the control
    /// and remote address segments (READ) or those and the atomic segment (compare
    /// and swap, fetch and add), up to the control segment's DS count, wrapping at the
    /// end of the send queue; each takes up to its byte count, in order. Another
    /// opcode is `RemInvReqErr` (libmlx5's answer); an entry outside its region
    /// `LocProtErr`; data left when the list ends `LocLenErr`.
    pub(crate) fn copy_to_send(&self, index: u16, data: &[u8]) -> Result<(), WcStatus> {
        use ferroverbs_hw::datapath::wqe::{
            MLX5_OPCODE_ATOMIC_CS, MLX5_OPCODE_ATOMIC_FA, MLX5_OPCODE_RDMA_READ,
        };
        let base = (usize::from(index) & self.sq.mask as usize) << self.sq.shift;
        // `struct mlx5_wqe_ctrl_seg`: opmod_idx_opcode (opcode in the low byte),
        // qpn_ds (DS, in 16-byte units, in the low 6 bits).
        let opcode = self.sq.ring_word(base) as u8;
        let ds = (self.sq.ring_word(base + 4) & 0x3f) as usize;
        let first = match opcode {
            MLX5_OPCODE_RDMA_READ => 2,
            MLX5_OPCODE_ATOMIC_CS | MLX5_OPCODE_ATOMIC_FA => 3,
            _ => return Err(WcStatus::RemInvReqErr),
        };
        let mut rest = data;
        for k in first..ds.max(first) {
            if rest.is_empty() {
                break;
            }
            let at = base + 16 * k;
            // `struct mlx5_wqe_data_seg`: byte_count, lkey, addr (big-endian).
            let len = self.sq.ring_word(at) & 0x7fff_ffff;
            let lkey = self.sq.ring_word(at + 4);
            let addr = (u64::from(self.sq.ring_word(at + 8)) << 32)
                | u64::from(self.sq.ring_word(at + 12));
            let n = rest.len().min(len as usize);
            if !self.mrs.copy_to(lkey, addr, &rest[..n]) {
                return Err(WcStatus::LocProtErr);
            }
            rest = &rest[n..];
        }
        if rest.is_empty() {
            Ok(())
        } else {
            Err(WcStatus::LocLenErr)
        }
    }
}

/// What a QP whose responder scatters to CQE needs to copy a message out of a CQE:
/// its receive WQEs (its RQ's or its SRQ's) and the device's regions.
pub(crate) struct RecvScatter {
    pub(crate) segs: RingSegs,
    pub(crate) mrs: Arc<MrDir>,
}

impl RecvScatter {
    /// Copies `data` (a message the device placed in its CQE) across the scatter list
    /// of the receive WQE at `index`, as libmlx5's `copy_to_scat` does: each entry
    /// takes up to its byte count, in order, until the data is placed (the list ends
    /// at the first entry with `MLX5_INVALID_LKEY` or the WQE's last slot). An entry
    /// outside its region is `LocProtErr`; data left when the list ends is
    /// `LocLenErr` (libmlx5's `IBV_WC_LOC_LEN_ERR`).
    pub(crate) fn copy_to_recv(&self, index: u32, data: &[u8]) -> Result<(), WcStatus> {
        let mut rest = data;
        let mut k = 0;
        while !rest.is_empty() {
            let Some((len, lkey, addr)) = self.segs.seg(index, k) else {
                break;
            };
            if lkey == MLX5_INVALID_LKEY {
                break;
            }
            let n = rest.len().min(len as usize);
            if !self.mrs.copy_to(lkey, addr, &rest[..n]) {
                return Err(WcStatus::LocProtErr);
            }
            rest = &rest[n..];
            k += 1;
        }
        if rest.is_empty() {
            Ok(())
        } else {
            Err(WcStatus::LocLenErr)
        }
    }
}

/// Fan-out of each level of the tree (the key index's 24 bits as 3 × 8).
const FAN: usize = 256;

/// One registered region (key 0: none; a key's low byte, the driver's variant, is
/// never 0).
#[derive(Default)]
struct Entry {
    key: AtomicU32,
    /// Copies in progress through this entry.
    users: AtomicU32,
    start: AtomicU64,
    len: AtomicU64,
    host: AtomicUsize,
}

struct Leaf([Entry; FAN]);
struct Mid([AtomicPtr<Leaf>; FAN]);

/// The regions of one device by key index.
pub(crate) struct MrDir {
    top: Box<[AtomicPtr<Mid>; FAN]>,
    /// Serialises the writers (node allocation); readers never take it.
    write: Mutex<()>,
}

impl Default for MrDir {
    fn default() -> Self {
        MrDir {
            top: Box::new(std::array::from_fn(
                |_| AtomicPtr::new(std::ptr::null_mut()),
            )),
            write: Mutex::new(()),
        }
    }
}

// The tree's nodes are only reached through atomics; they are freed in `Drop`, when
// no reader can exist (`&mut self`).
impl Drop for MrDir {
    fn drop(&mut self) {
        for m in self.top.iter() {
            let m = m.load(Ordering::Acquire);
            if m.is_null() {
                continue;
            }
            // SAFETY: `m` came from `Box::into_raw` in `slot` and is freed only here,
            // once; no reader exists (`&mut self`).
            let mid = unsafe { Box::from_raw(m) };
            for l in mid.0.iter() {
                let l = l.load(Ordering::Acquire);
                if !l.is_null() {
                    // SAFETY: as for `m`: a `Box::into_raw` of `slot`, freed once.
                    drop(unsafe { Box::from_raw(l) });
                }
            }
        }
    }
}

fn split(key: u32) -> (usize, usize, usize) {
    let i = (key >> 8) as usize;
    ((i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff)
}

impl MrDir {
    /// The entry of `key`'s index, if its node exists.
    fn find(&self, key: u32) -> Option<&Entry> {
        let (a, b, c) = split(key);
        let m = self.top[a].load(Ordering::Acquire);
        // SAFETY: a non-null node pointer came from `Box::into_raw` in `slot` and
        // lives until `self` drops.
        let mid = unsafe { m.as_ref() }?;
        let l = mid.0[b].load(Ordering::Acquire);
        // SAFETY: as above.
        let leaf = unsafe { l.as_ref() }?;
        Some(&leaf.0[c])
    }

    /// The entry of `key`'s index, its nodes allocated if needed (writers only, under
    /// `write`).
    fn slot(&self, key: u32) -> &Entry {
        let (a, b, c) = split(key);
        let mut m = self.top[a].load(Ordering::Acquire);
        if m.is_null() {
            let mid = Box::new(Mid(std::array::from_fn(|_| {
                AtomicPtr::new(std::ptr::null_mut())
            })));
            m = Box::into_raw(mid);
            self.top[a].store(m, Ordering::Release);
        }
        // SAFETY: non-null, from `Box::into_raw`, alive until `self` drops.
        let mid = unsafe { &*m };
        let mut l = mid.0[b].load(Ordering::Acquire);
        if l.is_null() {
            let leaf = Box::new(Leaf(std::array::from_fn(|_| Entry::default())));
            l = Box::into_raw(leaf);
            mid.0[b].store(l, Ordering::Release);
        }
        // SAFETY: as above.
        unsafe { &(*l).0[c] }
    }

    /// Records the region of `key`: `len` bytes addressed from `start`, at host
    /// address `host`. The memory must stay allocated until [`MrDir::remove`] of
    /// the key returned.
    pub(crate) fn insert(&self, key: u32, start: u64, len: usize, host: NonNull<u8>) {
        let _w = self.write.lock().unwrap_or_else(|p| p.into_inner());
        let e = self.slot(key);
        e.start.store(start, Ordering::Relaxed);
        e.len.store(len as u64, Ordering::Relaxed);
        e.host.store(host.as_ptr() as usize, Ordering::Relaxed);
        // Publishes the fields above to a reader that sees the key.
        e.key.store(key, Ordering::SeqCst);
    }

    /// Forgets the region of `key`, and returns once no copy into it is in progress:
    /// its memory may then go.
    pub(crate) fn remove(&self, key: u32) {
        let _w = self.write.lock().unwrap_or_else(|p| p.into_inner());
        let Some(e) = self.find(key) else { return };
        if e.key.load(Ordering::Relaxed) != key {
            return;
        }
        // With `copy_to`'s SeqCst increment and key load: a copy that saw the key
        // has raised `users` before this store, so the wait below sees it.
        e.key.store(0, Ordering::SeqCst);
        while e.users.load(Ordering::SeqCst) != 0 {
            // A copy of at most 64 bytes: a bounded wait.
            std::hint::spin_loop();
            std::thread::yield_now();
        }
    }

    /// Copies `data` to the bytes at `addr` of the region of `lkey`; `false` (nothing
    /// written) if no live region has that key or `addr..addr + data.len()` is not
    /// inside it.
    pub(crate) fn copy_to(&self, lkey: u32, addr: u64, data: &[u8]) -> bool {
        if data.is_empty() {
            return true;
        }
        let Some(e) = self.find(lkey) else {
            return false;
        };
        e.users.fetch_add(1, Ordering::SeqCst);
        let ok = e.key.load(Ordering::SeqCst) == lkey && {
            let start = e.start.load(Ordering::Relaxed);
            let len = e.len.load(Ordering::Relaxed);
            let off = addr.wrapping_sub(start);
            addr >= start
                && off
                    .checked_add(data.len() as u64)
                    .is_some_and(|end| end <= len)
        };
        if ok {
            let off = (addr - e.start.load(Ordering::Relaxed)) as usize;
            let host = e.host.load(Ordering::Relaxed) as *mut u8;
            for (i, b) in data.iter().enumerate() {
                // SAFETY: `off + i` is inside the region's `len` bytes at `host`
                // (checked above), which stay allocated while the key is live and
                // `users` is raised (`remove` clears the key, then waits for
                // `users` to fall, before the region's memory may go). Registered
                // memory is accessed only atomically (the device may write it at any
                // time); `AtomicU8` has the size and alignment of `u8`.
                unsafe { AtomicU8::from_ptr(host.add(off + i)) }.store(*b, Ordering::Relaxed);
            }
        }
        e.users.fetch_sub(1, Ordering::Release);
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_inside_live_regions_only() {
        let d = MrDir::default();
        let mut buf = vec![0u8; 64];
        let host = NonNull::new(buf.as_mut_ptr()).unwrap();
        // A zero-based region and one at a high key index (three tree levels).
        for key in [0x0000_0301u32, 0xfe_dc_ba_07] {
            d.insert(key, 0x1000, 64, host);
            assert!(d.copy_to(key, 0x1010, b"abcd"));
            assert!(d.copy_to(key, 0x103c, b"wxyz"), "the last 4 bytes");
            assert!(!d.copy_to(key, 0x103d, b"wxyz"), "one past the end");
            assert!(!d.copy_to(key, 0x0fff, b"ab"), "before the start");
            assert!(!d.copy_to(key, u64::MAX, b"ab"), "wrapping");
            assert!(!d.copy_to(key ^ 0x10, 0x1010, b"ab"), "another key");
            assert!(!d.copy_to(key ^ 1, 0x1010, b"ab"), "another variant");
            assert!(d.copy_to(key, 0x2000, b""), "nothing to copy");
            d.remove(key);
            assert!(!d.copy_to(key, 0x1010, b"ab"), "removed");
        }
        assert_eq!(&buf[0x10..0x14], b"abcd");
        assert_eq!(&buf[0x3c..], b"wxyz");
        assert!(buf[..0x10].iter().all(|&b| b == 0));
    }
}

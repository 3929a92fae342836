//! A registered buffer pool: one memory region, allocated page-aligned and registered
//! once, carved into fixed-size slots handed out and taken back without any firmware
//! command (the slab allocator of the seed article: many small buffers, one key).
//!
//! The free list is a lock-free stack of slot indexes (a Treiber stack whose head
//! carries a generation tag against ABA), so [`BufferPool::alloc`] and freeing are
//! O(1), allocate no memory and take no lock after creation. A [`Slot`] is an owned
//! handle: it returns to the pool when dropped (or by [`BufferPool::free`]), so a slot
//! cannot be freed twice. A slot that must stay allocated while the device uses it
//! (a posted receive, whose `wr_id` names it) can be detached into its index with
//! [`Slot::into_index`] and taken back with [`BufferPool::reclaim`], which refuses an
//! index that is not detached.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

use ferroverbs_hw::Bus;

use super::{AccessFlags, MemoryRegion, Pd, RangeError, RemoteAddr, Sge};
use crate::dma::PAGE_SIZE;

/// Largest slot: 1 GiB.
pub const MAX_SLOT_SIZE: usize = 1 << 30;
/// Largest slot alignment: one page.
pub const MAX_SLOT_ALIGN: usize = PAGE_SIZE;
/// Largest number of slots (indexes are 32-bit, one value marks the end of the list).
pub const MAX_SLOTS: usize = (u32::MAX - 1) as usize;

/// End of the free list.
const NIL: u32 = u32::MAX;

const FREE: u8 = 0;
const OWNED: u8 = 1;
const DETACHED: u8 = 2;

/// How to carve a [`BufferPool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Usable bytes of each slot (1 ..= [`MAX_SLOT_SIZE`]).
    pub slot_size: usize,
    /// Number of slots (1 ..= [`MAX_SLOTS`]).
    pub slots: usize,
    /// Alignment of every slot's first byte: a power of two up to [`MAX_SLOT_ALIGN`]
    /// (the region itself is page-aligned). Slots are `slot_size` rounded up to it
    /// apart.
    pub align: usize,
    /// Access rights of the region.
    pub access: AccessFlags,
}

impl PoolConfig {
    /// `slots` slots of `slot_size` bytes, 64-byte aligned (a cache line), locally
    /// writable (receive buffers).
    pub fn new(slot_size: usize, slots: usize) -> Self {
        PoolConfig {
            slot_size,
            slots,
            align: 64,
            access: AccessFlags::LOCAL_WRITE,
        }
    }

    /// With alignment `align`.
    pub fn align(mut self, align: usize) -> Self {
        self.align = align;
        self
    }

    /// With access rights `access`.
    pub fn access(mut self, access: AccessFlags) -> Self {
        self.access = access;
        self
    }

    /// The distance between two slots, checked.
    fn stride(&self) -> Result<usize, PoolError> {
        if self.slot_size == 0 || self.slot_size > MAX_SLOT_SIZE {
            return Err(PoolError::SlotSize {
                size: self.slot_size,
                max: MAX_SLOT_SIZE,
            });
        }
        if !self.align.is_power_of_two() || self.align > MAX_SLOT_ALIGN {
            return Err(PoolError::Alignment {
                align: self.align,
                max: MAX_SLOT_ALIGN,
            });
        }
        if self.slots == 0 || self.slots > MAX_SLOTS {
            return Err(PoolError::SlotCount {
                slots: self.slots,
                max: MAX_SLOTS,
            });
        }
        Ok(self.slot_size.next_multiple_of(self.align))
    }
}

/// What a buffer pool operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// Every slot is allocated.
    #[error("the buffer pool is exhausted ({slots} slots in use)")]
    Exhausted {
        /// Number of slots of the pool.
        slots: usize,
    },
    /// The slot size is zero or too large.
    #[error("slot size {size} is outside 1..={max}")]
    SlotSize {
        /// Size asked for.
        size: usize,
        /// Largest slot.
        max: usize,
    },
    /// The alignment is not a power of two or too large.
    #[error("slot alignment {align} is not a power of two up to {max}")]
    Alignment {
        /// Alignment asked for.
        align: usize,
        /// Largest alignment.
        max: usize,
    },
    /// The number of slots is zero or too large.
    #[error("{slots} slots is outside 1..={max}")]
    SlotCount {
        /// Count asked for.
        slots: usize,
        /// Largest count.
        max: usize,
    },
    /// The pool's total size overflows.
    #[error("{slots} slots of {stride} bytes do not fit the address space")]
    TooLarge {
        /// Count asked for.
        slots: usize,
        /// Distance between slots.
        stride: usize,
    },
    /// [`BufferPool::reclaim`] of an index that is not a detached slot.
    #[error("slot {index} is not detached")]
    NotDetached {
        /// The index given.
        index: u32,
    },
    /// Allocating or registering the region failed.
    #[error(transparent)]
    Verbs(#[from] super::Error),
}

/// A registered region carved into fixed-size slots; see the [module](self) docs.
pub struct BufferPool<'a, B: Bus> {
    mr: MemoryRegion<'a, B>,
    slot_size: usize,
    stride: usize,
    slots: u32,
    /// Free-list head: generation tag (high 32 bits) and slot index (low 32 bits).
    head: AtomicU64,
    /// Next free slot after each free slot.
    next: Box<[AtomicU32]>,
    /// Each slot's state: free, owned by a [`Slot`], or detached.
    state: Box<[AtomicU8]>,
    in_use: AtomicU32,
}

impl<B: Bus> std::fmt::Debug for BufferPool<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool")
            .field("mr", &self.mr)
            .field("slot_size", &self.slot_size)
            .field("stride", &self.stride)
            .field("slots", &self.slots)
            .field("in_use", &self.in_use())
            .finish()
    }
}

impl<'ctx, B: Bus> Pd<'ctx, B> {
    /// Creates a buffer pool in this PD ([`BufferPool::new`]).
    pub fn create_buffer_pool(&self, cfg: PoolConfig) -> Result<BufferPool<'_, B>, PoolError> {
        BufferPool::new(self, cfg)
    }
}

impl<'a, B: Bus> BufferPool<'a, B> {
    /// Allocates `slots * stride` bytes (page-aligned, zeroed), registers them as one
    /// memory region, and puts every slot on the free list (slot 0 first out).
    pub fn new(pd: &'a Pd<'a, B>, cfg: PoolConfig) -> Result<Self, PoolError> {
        let stride = cfg.stride()?;
        let total = stride.checked_mul(cfg.slots).ok_or(PoolError::TooLarge {
            slots: cfg.slots,
            stride,
        })?;
        let total = total
            .checked_next_multiple_of(PAGE_SIZE)
            .ok_or(PoolError::TooLarge {
                slots: cfg.slots,
                stride,
            })?;
        let mr = pd.alloc_mr(total, cfg.access)?;
        let n = cfg.slots as u32;
        let next: Box<[AtomicU32]> = (0..n)
            .map(|i| AtomicU32::new(if i + 1 < n { i + 1 } else { NIL }))
            .collect();
        let state: Box<[AtomicU8]> = (0..n).map(|_| AtomicU8::new(FREE)).collect();
        Ok(BufferPool {
            mr,
            slot_size: cfg.slot_size,
            stride,
            slots: n,
            head: AtomicU64::new(0),
            next,
            state,
            in_use: AtomicU32::new(0),
        })
    }

    /// The registered region behind the slots.
    pub fn mr(&self) -> &MemoryRegion<'a, B> {
        &self.mr
    }

    /// Usable bytes per slot.
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Distance between two slots' first bytes.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.slots as usize
    }

    /// Slots allocated now (owned or detached).
    pub fn in_use(&self) -> usize {
        self.in_use.load(Ordering::Relaxed) as usize
    }

    /// The local key of every slot.
    pub fn lkey(&self) -> u32 {
        self.mr.lkey()
    }

    /// The remote key of every slot.
    pub fn rkey(&self) -> u32 {
        self.mr.rkey()
    }

    /// Takes a free slot. O(1), lock-free, allocation-free.
    pub fn alloc(&self) -> Result<Slot<'_, 'a, B>, PoolError> {
        let index = self.pop().ok_or(PoolError::Exhausted {
            slots: self.slots as usize,
        })?;
        self.state[index as usize].store(OWNED, Ordering::Relaxed);
        self.in_use.fetch_add(1, Ordering::Relaxed);
        Ok(Slot { pool: self, index })
    }

    /// Returns a slot to the pool (what dropping it does).
    pub fn free(&self, slot: Slot<'_, 'a, B>) {
        drop(slot)
    }

    /// Takes back a slot detached with [`Slot::into_index`]. Refused for an index
    /// that is out of range, free, or owned by a live [`Slot`]: each detached slot is
    /// reclaimed at most once.
    pub fn reclaim(&self, index: u32) -> Result<Slot<'_, 'a, B>, PoolError> {
        let st = self
            .state
            .get(index as usize)
            .ok_or(PoolError::NotDetached { index })?;
        st.compare_exchange(DETACHED, OWNED, Ordering::Acquire, Ordering::Relaxed)
            .map_err(|_| PoolError::NotDetached { index })?;
        Ok(Slot { pool: self, index })
    }

    fn pop(&self) -> Option<u32> {
        let mut cur = self.head.load(Ordering::Acquire);
        loop {
            let index = cur as u32;
            if index == NIL {
                return None;
            }
            let next = self.next[index as usize].load(Ordering::Relaxed);
            let tag = (cur >> 32).wrapping_add(1);
            let new = (tag << 32) | u64::from(next);
            match self
                .head
                .compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(index),
                Err(h) => cur = h,
            }
        }
    }

    fn push(&self, index: u32) {
        self.state[index as usize].store(FREE, Ordering::Relaxed);
        self.in_use.fetch_sub(1, Ordering::Relaxed);
        let mut cur = self.head.load(Ordering::Acquire);
        loop {
            self.next[index as usize].store(cur as u32, Ordering::Relaxed);
            let tag = (cur >> 32).wrapping_add(1);
            let new = (tag << 32) | u64::from(index);
            match self
                .head
                .compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(h) => cur = h,
            }
        }
    }

    fn offset(&self, index: u32) -> usize {
        index as usize * self.stride
    }
}

/// One allocated slot of a [`BufferPool`]; back to the pool when dropped.
pub struct Slot<'p, 'a, B: Bus> {
    pool: &'p BufferPool<'a, B>,
    index: u32,
}

impl<B: Bus> std::fmt::Debug for Slot<'_, '_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("index", &self.index)
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .finish()
    }
}

impl<'p, 'a, B: Bus> Slot<'p, 'a, B> {
    /// The slot's index in its pool (`0..capacity`).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The address of the slot's first byte, as the keys translate it.
    pub fn addr(&self) -> u64 {
        self.pool.mr.addr() + self.pool.offset(self.index) as u64
    }

    /// Usable bytes.
    pub fn len(&self) -> usize {
        self.pool.slot_size
    }

    /// Always false: a slot holds at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.pool.mr.lkey()
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.pool.mr.rkey()
    }

    /// A scatter/gather entry covering the whole slot.
    pub fn sge(&self) -> Sge {
        Sge {
            addr: self.addr(),
            length: u32::try_from(self.len()).unwrap_or(u32::MAX),
            lkey: self.lkey(),
        }
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), RangeError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(RangeError {
                offset,
                len,
                mr_len: self.len(),
            }),
        }
    }

    /// A scatter/gather entry for `len` bytes at `offset` in the slot, checked
    /// against the slot (not merely the region).
    pub fn sge_range(&self, offset: usize, len: u32) -> Result<Sge, RangeError> {
        self.check(offset, len as usize)?;
        Ok(Sge {
            addr: self.addr() + offset as u64,
            length: len,
            lkey: self.lkey(),
        })
    }

    /// The remote address of the slot's byte `offset`, to hand to a peer.
    pub fn remote(&self, offset: usize) -> RemoteAddr {
        RemoteAddr {
            addr: self.addr() + offset as u64,
            rkey: self.rkey(),
        }
    }

    /// Copies `src` into the slot at `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), RangeError> {
        self.check(offset, src.len())?;
        self.pool
            .mr
            .write(self.pool.offset(self.index) + offset, src);
        Ok(())
    }

    /// Copies `dst.len()` bytes at `offset` out of the slot.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), RangeError> {
        self.check(offset, dst.len())?;
        self.pool
            .mr
            .read(self.pool.offset(self.index) + offset, dst);
        Ok(())
    }

    /// Sets every byte of the slot to `value`.
    pub fn fill(&self, value: u8) {
        self.pool
            .mr
            .fill(self.pool.offset(self.index), self.len(), value);
    }

    /// Detaches the slot: it stays allocated, and only its index remains (for a
    /// `wr_id`); [`BufferPool::reclaim`] gives the handle back.
    pub fn into_index(self) -> u32 {
        let index = self.index;
        self.pool.state[index as usize].store(DETACHED, Ordering::Release);
        std::mem::forget(self);
        index
    }
}

impl<B: Bus> Drop for Slot<'_, '_, B> {
    fn drop(&mut self) {
        self.pool.push(self.index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_bounds() {
        assert!(matches!(
            PoolConfig::new(0, 4).stride(),
            Err(PoolError::SlotSize { .. })
        ));
        assert!(matches!(
            PoolConfig::new(MAX_SLOT_SIZE + 1, 4).stride(),
            Err(PoolError::SlotSize { .. })
        ));
        assert!(matches!(
            PoolConfig::new(64, 4).align(3).stride(),
            Err(PoolError::Alignment { .. })
        ));
        assert!(matches!(
            PoolConfig::new(64, 4).align(8192).stride(),
            Err(PoolError::Alignment { .. })
        ));
        assert!(matches!(
            PoolConfig::new(64, 0).stride(),
            Err(PoolError::SlotCount { .. })
        ));
        assert_eq!(PoolConfig::new(100, 4).stride().unwrap(), 128);
        assert_eq!(PoolConfig::new(100, 4).align(1).stride().unwrap(), 100);
        assert_eq!(PoolConfig::new(4096, 4).align(4096).stride().unwrap(), 4096);
    }
}

//! The receive queue ring writer (`mlx5-datapath.md` §1, §4, §8.2).
//!
//! The RQ is a ring of `wqe_cnt` WQEs (a power of two) of `stride` bytes each, a power
//! of two of at least 16; a WQE is an array of `stride / 16` data segments. Posting
//! writes the non-empty SGEs in order and, when they do not fill the WQE, a terminator
//! entry (`byte_count` 0, lkey
//! [`MLX5_INVALID_LKEY`], `addr` 0).
//! The producer counter `head` counts WQEs; publishing it is a barrier and the doorbell
//! record word [`MLX5_RCV_DBR`](ferroverbs_hw::datapath::dbr::MLX5_RCV_DBR) =
//! BE32(`head & 0xffff`). The RQ has no MMIO doorbell.
//!
//! WQE signatures (`mlx5_rwqe_sig` in the first 16 bytes) are not used.

use super::mem::{DoorbellWord, QueueMem};
use super::{GeometryError, PostError, Sge};
use ferroverbs_hw::datapath::dbr::rq_counter;
use ferroverbs_hw::datapath::wqe::{WqeDataSeg, MLX5_INVALID_LKEY};
use ferroverbs_hw::Bus;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A receive request as [`ReceiveQueue::post_list`] takes it: the `wr_id` and the
/// scatter list (zero-length entries skipped).
pub trait RecvRequest {
    /// Returned with the completion.
    fn wr_id(&self) -> u64;
    /// Where the message goes.
    fn sg_list(&self) -> &[Sge];
}

impl RecvRequest for (u64, &[Sge]) {
    fn wr_id(&self) -> u64 {
        self.0
    }
    fn sg_list(&self) -> &[Sge] {
        self.1
    }
}

/// Largest RQ in WQEs for which 16-bit counter differences stay unambiguous.
pub const MAX_RQ_WQES: u32 = 1 << 15;

/// How a [`ReceiveQueue`] is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RqConfig {
    /// Ring size in WQEs: a power of two, at most [`MAX_RQ_WQES`].
    pub wqe_cnt: u32,
    /// log2 of the WQE size in bytes (`rq.wqe_shift`), 4 to 11.
    pub wqe_shift: u32,
}

/// A receive queue: the WQE ring and its doorbell record word.
///
/// `M` is the ring memory ([`QueueMem`], at least `wqe_cnt << wqe_shift` bytes: the
/// start of the QP buffer) and `D` the QP doorbell record word at
/// [`MLX5_RCV_DBR`](ferroverbs_hw::datapath::dbr::MLX5_RCV_DBR).
pub struct ReceiveQueue<M: QueueMem, D: DoorbellWord> {
    buf: M,
    dbr: D,
    cfg: RqConfig,
    stride: usize,
    max_gs: u32,
    mask: u32,
    head: u16,
    tail: u16,
    /// Per slot: the `wr_id` (possibly shared with a completion path, see
    /// [`ReceiveQueue::with_wr_ids`]).
    wr_id: Arc<[AtomicU64]>,
    pending: u32,
}

impl<M: QueueMem, D: DoorbellWord> ReceiveQueue<M, D> {
    /// A receive queue over `buf` and the doorbell record word `dbr`.
    pub fn new(buf: M, dbr: D, cfg: RqConfig) -> Result<Self, GeometryError> {
        let table = (0..cfg.wqe_cnt.min(MAX_RQ_WQES))
            .map(|_| AtomicU64::new(0))
            .collect();
        Self::with_wr_ids(buf, dbr, cfg, table)
    }

    /// Like [`ReceiveQueue::new`], with the per-slot `wr_id` table given (`wqe_cnt`
    /// entries): a table the caller shares with its completion path, so that each WR
    /// is recorded once, at post.
    pub fn with_wr_ids(
        buf: M,
        dbr: D,
        cfg: RqConfig,
        wr_id: Arc<[AtomicU64]>,
    ) -> Result<Self, GeometryError> {
        if !cfg.wqe_cnt.is_power_of_two() || cfg.wqe_cnt > MAX_RQ_WQES {
            return Err(GeometryError::BadCount {
                what: "RQ size in WQEs",
                count: cfg.wqe_cnt,
                max: MAX_RQ_WQES,
            });
        }
        // 16 bytes (one entry) up to 2 KiB: `qpc.log_rq_stride` is 3 bits of 16 << n.
        if !(4..=11).contains(&cfg.wqe_shift) {
            return Err(GeometryError::BadSize {
                what: "RQ WQE shift",
                value: cfg.wqe_shift as usize,
            });
        }
        let stride = 1usize << cfg.wqe_shift;
        let need = cfg.wqe_cnt as usize * stride;
        if buf.len() < need {
            return Err(GeometryError::BufferTooShort {
                len: buf.len(),
                need,
            });
        }
        if wr_id.len() != cfg.wqe_cnt as usize {
            return Err(GeometryError::BadSize {
                what: "wr_id table length",
                value: wr_id.len(),
            });
        }
        Ok(ReceiveQueue {
            buf,
            dbr,
            cfg,
            stride,
            max_gs: (stride / WqeDataSeg::SIZE) as u32,
            mask: cfg.wqe_cnt - 1,
            head: 0,
            tail: 0,
            wr_id,
            pending: 0,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &RqConfig {
        &self.cfg
    }

    /// Scatter entries per WQE (`rq.max_gs`).
    pub fn max_gs(&self) -> u32 {
        self.max_gs
    }

    /// The WQE producer counter: the index the next WQE gets.
    pub fn head(&self) -> u16 {
        self.head
    }

    /// WQEs posted and not yet completed.
    pub fn outstanding(&self) -> u32 {
        u32::from(self.head.wrapping_sub(self.tail))
    }

    /// The ring memory.
    pub fn mem(&self) -> &M {
        &self.buf
    }

    /// The per-slot `wr_id` table (see [`ReceiveQueue::with_wr_ids`]).
    pub fn wr_ids(&self) -> &Arc<[AtomicU64]> {
        &self.wr_id
    }

    /// Bytes of the ring: `wqe_cnt << wqe_shift`.
    pub fn ring_len(&self) -> usize {
        self.cfg.wqe_cnt as usize * self.stride
    }

    /// Writes one receive WQE for `sges` and advances `head`; returns its index. The
    /// WQE reaches the device at the next [`ReceiveQueue::ring_doorbell`]. Writes
    /// nothing on error. Does not allocate.
    #[inline]
    pub fn post(&mut self, wr_id: u64, sges: &[Sge]) -> Result<u16, PostError> {
        if self.outstanding() >= self.cfg.wqe_cnt {
            return Err(PostError::QueueFull { needed: 1, free: 0 });
        }
        if sges.len() > self.max_gs as usize {
            return Err(PostError::TooManySges {
                count: sges.len(),
                max: self.max_gs,
            });
        }
        let index = self.head;
        let slot = (u32::from(index) & self.mask) as usize;
        let start = slot * self.stride;
        if let [sge] = sges {
            if sge.length != 0 {
                // The common case, same bytes: one data segment and, when the WQE has
                // room for more, the terminator, with one bounds check for both.
                let data = seg16(
                    (u64::from(sge.length) << 32) | u64::from(sge.lkey),
                    sge.addr,
                );
                if self.max_gs > 1 {
                    self.buf
                        .write_segs(start, &[data, seg16(u64::from(MLX5_INVALID_LKEY), 0)]);
                } else {
                    self.buf.write_segs(start, &[data]);
                }
                self.wr_id[slot].store(wr_id, Ordering::Relaxed);
                self.head = index.wrapping_add(1);
                self.pending += 1;
                return Ok(index);
            }
        }
        self.write_general(start, sges);
        self.wr_id[slot].store(wr_id, Ordering::Relaxed);
        self.head = index.wrapping_add(1);
        self.pending += 1;
        Ok(index)
    }

    /// WQE slots free for posting: `wqe_cnt` minus the outstanding WQEs.
    #[inline]
    pub fn free(&self) -> u32 {
        self.cfg.wqe_cnt - self.outstanding()
    }

    /// Writes one receive WQE per request of `reqs`, in order, the bytes
    /// [`ReceiveQueue::post`] writes for each, and advances `head` past them. Stops at
    /// the first request that cannot be posted (the ring full:
    /// [`PostError::QueueFull`]; more entries than the WQE holds:
    /// [`PostError::TooManySges`]), returned with its index; the requests before it
    /// are posted, nothing of it is written. The WQEs reach the device at the next
    /// [`ReceiveQueue::ring_doorbell`]. Does not allocate.
    ///
    /// Against `post` per request: the room is computed once for the list (a counter
    /// compare per request), the producer counter stays in a register, and the
    /// one-entry WQE (the common case) is one 16- or 32-byte store and the `wr_id`.
    #[inline]
    pub fn post_list<R: RecvRequest>(&mut self, reqs: &[R]) -> Result<(), (usize, PostError)> {
        let free = self.free() as usize;
        let two = self.max_gs > 1;
        let mut head = self.head;
        let mut res = Ok(());
        for (i, r) in reqs.iter().enumerate() {
            if i >= free {
                res = Err((i, PostError::QueueFull { needed: 1, free: 0 }));
                break;
            }
            let slot = (u32::from(head) & self.mask) as usize;
            let start = slot << self.cfg.wqe_shift;
            match r.sg_list() {
                [sge] if sge.length != 0 => {
                    // One data segment and, when the WQE has room for more, the
                    // terminator (as `post`).
                    let data = seg16(
                        (u64::from(sge.length) << 32) | u64::from(sge.lkey),
                        sge.addr,
                    );
                    if two {
                        self.buf
                            .write_segs(start, &[data, seg16(u64::from(MLX5_INVALID_LKEY), 0)]);
                    } else {
                        self.buf.write_segs(start, &[data]);
                    }
                }
                sges => {
                    if sges.len() > self.max_gs as usize {
                        res = Err((
                            i,
                            PostError::TooManySges {
                                count: sges.len(),
                                max: self.max_gs,
                            },
                        ));
                        break;
                    }
                    self.write_general(start, sges);
                }
            }
            self.wr_id[slot].store(r.wr_id(), Ordering::Relaxed);
            head = head.wrapping_add(1);
        }
        self.pending += u32::from(head.wrapping_sub(self.head));
        self.head = head;
        res
    }

    /// The WQE at byte `start` for a list of at most `max_gs` entries: the non-empty
    /// ones, then the terminator if they do not fill the WQE.
    fn write_general(&mut self, start: usize, sges: &[Sge]) {
        let mut d = WqeDataSeg::zeroed();
        let mut written = 0;
        for sge in sges.iter().filter(|s| s.length != 0) {
            d.set_data_seg(sge.length, sge.lkey, sge.addr);
            self.buf
                .write(start + written * WqeDataSeg::SIZE, d.as_bytes());
            written += 1;
        }
        // A short list ends with the terminator; a full one has none.
        if written < self.max_gs as usize {
            d.set_terminator();
            self.buf
                .write(start + written * WqeDataSeg::SIZE, d.as_bytes());
        }
    }

    /// Retires the `n` oldest outstanding WQEs (at most [`ReceiveQueue::outstanding`];
    /// more is clamped to it) without reading their `wr_id`s: what `n` calls of
    /// [`ReceiveQueue::complete`] in order do to the ring. Returns how many were
    /// retired.
    #[inline]
    pub fn retire(&mut self, n: u32) -> u32 {
        let n = n.min(self.outstanding());
        self.tail = self.tail.wrapping_add(n as u16);
        n
    }

    /// Publishes the WQEs posted since the last doorbell: [`Bus::wmb`], then the
    /// doorbell record. Returns whether anything was pending.
    pub fn ring_doorbell<B: Bus + ?Sized>(&mut self, bus: &B) -> bool {
        if self.pending == 0 {
            return false;
        }
        self.pending = 0;
        bus.wmb();
        self.dbr.store_be32(rq_counter(u32::from(self.head)));
        true
    }

    /// Retires the WQE a responder CQE reports (its `wqe_counter`, the RQ WQE counter,
    /// which rdma-core 55+ uses for the slot) and returns its `wr_id`, or `None` when
    /// `wqe_counter` names no outstanding WQE.
    pub fn complete(&mut self, wqe_counter: u16) -> Option<u64> {
        if wqe_counter.wrapping_sub(self.tail) >= self.head.wrapping_sub(self.tail) {
            return None;
        }
        self.tail = self.tail.wrapping_add(1);
        Some(self.wr_id[(u32::from(wqe_counter) & self.mask) as usize].load(Ordering::Relaxed))
    }
}

/// A 16-byte segment of two big-endian 64-bit words, as it sits in memory.
#[inline(always)]
fn seg16(hi: u64, lo: u64) -> [u8; 16] {
    ((u128::from(hi) << 64) | u128::from(lo)).to_be_bytes()
}

//! The typed fast entries of the send queue: one WQE of a known shape per call, no
//! [`SendWr`] to decode (rdma-core's `ibv_wr_*` "new post send" API and
//! `mlx5dv_wr_*` are the model).
//!
//! A batch is a [`SqCursor`] opened with [`SendQueue::cursor`]: it holds the next WQE
//! index, the room left, what the doorbell will need, and a copy of everything about
//! the queue that does not change during a batch (the ring's slots and `wr_id` table
//! as a [`WqeSlots`], the QPN half of the control segment, the `fm_ce_se` of
//! `sq_sig_all`, `max_inline`), so that a list of WQEs keeps all of it in registers
//! (the queue itself may be changed by an out-of-line call of the general writer in
//! the same loop, which would make the compiler reload its fields after every WQE);
//! [`SendQueue::publish`] writes the producer counter back and rings the doorbell once
//! (the sequence of [`SendQueue::doorbell`]).
//!
//! Each entry checks its shape and the room once and, when they hold, writes the
//! WQE's leading segments and its `wr_id` through [`WqeSlots`], whose bounds were
//! proved once for the queue (slot = index & mask of a ring of mask + 1 WQEBBs); the
//! bytes are exactly those of the general writer ([`SendQueue::write_wqe`]) for the
//! same request. When a check fails the entry writes nothing and returns `false`; the
//! caller then hands the request, as a [`SendWr`], to the general writer, which writes
//! it or reports why not (a zero length, a full queue, inline data too large, a WQE
//! crossing the ring end).

use super::*;

/// The send ring's memory as the typed entries write it: WQEBB slots and the `wr_id`
/// table addressed by WQE index (slot `index & mask`), with their bounds proved once
/// for the queue, and the doorbell register when the bus lets the driver store to it
/// directly. Implemented by the driver's `verbs::fastmem` (the unsafe stores live
/// there); a `Copy` handle kept in registers for a batch.
pub trait WqeSlots: Copy {
    /// Writes the `N` leading 16-byte segments (at most one WQEBB) of the WQE at
    /// `index` and records its `wr_id`.
    fn put<const N: usize>(self, index: u16, segs: &[[u8; 16]; N], wr_id: u64);

    /// Writes the `N` leading segments of the WQE at `index`, then the inline header
    /// (`data.len() | MLX5_INLINE_SEG`, big-endian) and `data` from byte 4 after them
    /// (the padding to the next 16 bytes left as it was), and records its `wr_id`;
    /// `false`, with nothing written, when the payload would cross the ring end.
    fn put_inline<const N: usize>(
        self,
        index: u16,
        segs: &[[u8; 16]; N],
        data: &[u8],
        wr_id: u64,
    ) -> bool;

    /// The first 8 bytes of the WQE at `index` (its control segment's head), as
    /// [`Bus::write64`] takes them.
    fn head(self, index: u16) -> u64;

    /// Stores the 8-byte doorbell `value` (as [`Bus::write64`] takes it) at byte
    /// `off` of the QP's BlueFlame register directly; `false` when the bus offers no
    /// direct register (then the caller calls [`Bus::write64`]).
    fn db64(self, off: usize, value: u64) -> bool;

    /// Copies the `wqebbs` WQEBBs of the WQE at `index` (wrapping at the ring end)
    /// to byte `off` of the BlueFlame register directly, in ascending 8-byte
    /// stores; `false` when the bus offers no direct register.
    fn blueflame(self, index: u16, wqebbs: u16, off: usize) -> bool;
}

/// An open batch of WQEs (see the module documentation): between
/// [`SendQueue::cursor`] and [`SendQueue::publish`] the cursor, not the queue,
/// holds the producer counter. Four 16-bit counters, a count of WQEs and the batch's
/// copies of the queue's constants, so that a loop of posts keeps them in registers.
#[derive(Clone, Copy, Debug)]
pub struct SqCursor<S> {
    /// The index of the batch's first WQE (where the cursor was opened).
    start: u16,
    /// The next WQE's index.
    index: u16,
    /// The index the ring is full at: the oldest outstanding WQEBB + `wqe_cnt` (a WQE
    /// of `n` WQEBBs fits when `limit - index >= n`).
    limit: u16,
    /// The index of the batch's last WQE (meaningful once `index != start`).
    last: u16,
    /// WQEs written in the batch.
    nreq: u32,
    /// The ring's slots.
    slots: S,
    /// `qpn << 8` of the control segment (its second word, without the DS).
    qpn_ds: u32,
    /// `fm_ce_se` of `sq_sig_all`.
    fm_ce_se: u8,
    /// The largest inline payload the typed entries write themselves: `max_inline`,
    /// and small enough that the WQE's DS fits [`MAX_WQE_DS`] even with a remote
    /// address segment.
    max_inline: u32,
}

impl<S> SqCursor<S> {
    /// Whether the batch wrote anything.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.index == self.start
    }

    /// The index the next WQE gets.
    #[inline(always)]
    pub fn next_index(&self) -> u16 {
        self.index
    }

    /// The index of the batch's last WQE (meaningful when the batch is not empty).
    #[inline(always)]
    pub fn last(&self) -> u16 {
        self.last
    }

    /// WQEs written in the batch (since it was opened or last published).
    #[inline(always)]
    pub fn count(&self) -> u32 {
        self.nreq
    }
}

/// The largest inline payload whose WQE (control, remote address, inline header,
/// payload) still fits [`MAX_WQE_DS`] segments.
pub(super) const MAX_INLINE_FAST: u32 = (MAX_WQE_DS as u32 - 2) * DS as u32 - 4;

impl<M: QueueMem, D: DoorbellWord> SendQueue<M, D> {
    /// Whether the typed entries apply to this queue: a connected QP (RC or UC: no
    /// address vector) with room for one gather entry.
    #[inline(always)]
    pub fn fast_entries(&self) -> bool {
        self.lean || (self.cfg.qp_type == QpType::Uc && self.cfg.max_sge >= 1)
    }

    /// Opens a batch at `cur_post` with the free WQEBBs as its room, writing through
    /// `slots` (which must be this queue's ring and `wr_id` table).
    #[inline(always)]
    pub fn cursor<S: WqeSlots>(&self, slots: S) -> SqCursor<S> {
        SqCursor {
            start: self.cur_post,
            index: self.cur_post,
            limit: self.tail.wrapping_add(self.cfg.wqe_cnt as u16),
            last: self.cur_post,
            nreq: 0,
            slots,
            qpn_ds: self.qpn_ds,
            fm_ce_se: self.fm_ce_se,
            max_inline: self.max_inline_fast,
        }
    }

    /// Hands the producer counter back to the queue (before a call of the general
    /// writer, or of [`SendQueue::complete`], in the middle of a batch).
    #[inline(always)]
    pub fn sync_from<S>(&mut self, c: &SqCursor<S>) {
        self.cur_post = c.index;
    }

    /// Takes the producer counter and the room from the queue again after
    /// [`SendQueue::sync_from`] and a call of the general writer; `written` is the
    /// index of the WQE that call wrote, if any. Field by field, so that the cursor
    /// can live in registers.
    #[inline(always)]
    pub fn sync_to<S>(&self, c: &mut SqCursor<S>, written: Option<u16>) {
        c.index = self.cur_post;
        c.limit = self.tail.wrapping_add(self.cfg.wqe_cnt as u16);
        if let Some(w) = written {
            c.last = w;
            c.nreq += 1;
        }
    }

    /// Publishes a batch: the producer counter goes back to the queue and, when the
    /// batch wrote anything, the doorbell is rung once for it (BlueFlame for a single
    /// WQE that qualifies): the doorbell record, then the 8-byte doorbell or the
    /// BlueFlame copy of the last WQE, with the barriers of [`SendQueue::doorbell`],
    /// straight to the register when the bus allows it ([`WqeSlots::db64`]). The
    /// cursor stays usable for a next batch (empty again). Returns what was written
    /// to the device.
    #[inline(always)]
    pub fn publish<B: Bus + ?Sized, S: WqeSlots>(
        &mut self,
        bus: &B,
        c: &mut SqCursor<S>,
    ) -> Option<Doorbell> {
        let cur = c.index;
        self.cur_post = cur;
        if c.is_empty() {
            return None;
        }
        let nreq = c.nreq;
        c.nreq = 0;
        c.start = cur;
        let last = c.last;
        // The last WQE's doorbell data, read back from its control segment (the device
        // only reads the ring).
        let ctrl_head = c.slots.head(last);
        let ds = (ctrl_head & 0x3f) as u8;
        // Everything the doorbell needs, read before the barriers (after a compiler
        // barrier every field would be loaded again).
        let half = self.bf_offset;
        self.bf_offset = half ^ self.cfg.bf.buf_size;
        // `use_blueflame` with its constant part precomputed (`bf_max_ds`); the
        // inline test only when BlueFlame is not preferred for every WQE.
        // (`2 <= ds <= bf_max_ds` as one compare, with `bf_span = bf_max_ds - 1`.)
        let bf = ds.wrapping_sub(2) < self.bf_span
            && nreq == 1
            && (self.cfg.prefer_bf || self.wqe_is_inline(last, ctrl_head));
        debug_assert_eq!(bf, nreq == 1 && ds > 1 && ds <= self.bf_max_ds && bf);
        let offset = self.cfg.bf.reg + half;

        bus.wmb();
        self.dbr.store_be32(sq_counter(u32::from(cur)));
        bus.wmb();

        if bf {
            let wqebbs = wqebbs_for_ds(ds);
            if !c.slots.blueflame(last, wqebbs, half) {
                let last = LastWqe {
                    index: last,
                    ds,
                    inline: true,
                    ctrl_head,
                };
                self.blueflame(bus, offset, &last);
            }
            Some(Doorbell::BlueFlame {
                offset,
                len: usize::from(wqebbs) * BB,
            })
        } else {
            if !c.slots.db64(half, ctrl_head) {
                bus.write64(offset, ctrl_head);
            }
            Some(Doorbell::Db {
                offset,
                value: ctrl_head,
            })
        }
    }

    /// Whether the WQE at `index` with this control head carries inline data: the
    /// first segment after the control (and remote address) segment has the inline
    /// flag in its byte count. (Typed entries write no atomic or address-vector
    /// segments.)
    #[cold]
    fn wqe_is_inline(&self, index: u16, ctrl_head: u64) -> bool {
        let start = (u32::from(index) & self.mask) as usize * BB;
        let opcode = (ctrl_head >> 32) as u8;
        let remote = matches!(
            opcode,
            MLX5_OPCODE_RDMA_WRITE | MLX5_OPCODE_RDMA_WRITE_IMM | MLX5_OPCODE_RDMA_READ
        );
        let ds = (ctrl_head & 0x3f) as usize;
        let first = 1 + usize::from(remote);
        if ds <= first {
            return false;
        }
        let off = start + DS * first;
        if off + 4 > self.ring_len {
            return false;
        }
        self.buf.load_be32(off) & MLX5_INLINE_SEG != 0
    }
}

impl<S: WqeSlots> SqCursor<S> {
    /// The control segment (`mlx5dv_x86_set_ctrl_seg`) of the WQE at `index`, as
    /// [`SendQueue::ctrl`] builds it, from the batch's copies of the templates.
    #[inline(always)]
    fn ctrl(&self, index: u16, opcode: u8, ds: u8, flags: SendFlags, imm: u32) -> [u8; 16] {
        let fm_ce_se = self.fm_ce_se | FM_CE_SE[usize::from(flags.0 & 7)];
        let w0 = (u32::from(index) << 8) | u32::from(opcode);
        let w1 = self.qpn_ds | u32::from(ds);
        let ctrl_head = (u64::from(w0) << 32) | u64::from(w1);
        let ctrl_tail = (u64::from(fm_ce_se) << 32) | u64::from(imm);
        seg16(ctrl_head, ctrl_tail)
    }

    /// Writes a WQE of `opcode` (SEND, SEND with immediate, RDMA WRITE or RDMA WRITE
    /// with immediate; the caller guarantees one of them, and `remote` exactly for the
    /// writes) with the one gather entry `sge`: control segment, remote address
    /// segment if any, data segment; one WQEBB. `false`, with nothing written, when
    /// `sge` is empty (the general writer leaves the data segment out) or the ring is
    /// full.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn put_sge(
        &mut self,
        opcode: u8,
        wr_id: u64,
        sge: &Sge,
        remote: Option<RemoteAddr>,
        flags: SendFlags,
        imm: u32,
    ) -> bool {
        let index = self.index;
        if self.limit == index || sge.length == 0 {
            return false;
        }
        // `struct mlx5_wqe_data_seg`: byte_count, lkey, addr.
        let data = seg16(
            (u64::from(sge.length) << 32) | u64::from(sge.lkey),
            sge.addr,
        );
        match remote {
            None => {
                let ctrl = self.ctrl(index, opcode, 2, flags, imm);
                self.slots.put(index, &[ctrl, data], wr_id);
            }
            Some(r) => {
                let ctrl = self.ctrl(index, opcode, 3, flags, imm);
                let raddr = seg16(r.addr, u64::from(r.rkey) << 32);
                self.slots.put(index, &[ctrl, raddr, data], wr_id);
            }
        }
        self.last = index;
        self.index = index.wrapping_add(1);
        self.nreq += 1;
        true
    }

    /// Writes a WQE of `opcode` (as for [`SqCursor::put_sge`]) whose data part is
    /// `data`, inline: control segment, remote address segment if any, the inline
    /// header and the payload (the padding to the next 16 bytes left as it was).
    /// `false`, with nothing written, when `data` is empty or longer than
    /// `max_inline`, when the ring has no room, or when the WQE would cross the ring
    /// end (the general writer splits it there).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn put_inline(
        &mut self,
        opcode: u8,
        wr_id: u64,
        data: &[u8],
        remote: Option<RemoteAddr>,
        flags: SendFlags,
        imm: u32,
    ) -> bool {
        let len = data.len();
        // One compare for both: 1 <= len <= max_inline.
        if len.wrapping_sub(1) >= self.max_inline as usize {
            return false;
        }
        let hds = 1 + usize::from(remote.is_some());
        // `inline_ds` and `wqebbs_for_ds` as shifts (len >= 1); `max_inline` keeps
        // `ds` within MAX_WQE_DS (see `SendQueue::cursor`).
        let ds = hds + ((len + 4 + (DS - 1)) >> 4);
        debug_assert_eq!(ds, hds + inline_ds(len));
        debug_assert!(ds <= usize::from(MAX_WQE_DS));
        let wqebbs = ((ds + 3) >> 2) as u16;
        let ds = ds as u8;
        let index = self.index;
        if wqebbs > self.limit.wrapping_sub(index) {
            return false;
        }
        let ctrl = self.ctrl(index, opcode, ds, flags, imm);
        let written = match remote {
            None => self.slots.put_inline(index, &[ctrl], data, wr_id),
            Some(r) => {
                let raddr = seg16(r.addr, u64::from(r.rkey) << 32);
                self.slots.put_inline(index, &[ctrl, raddr], data, wr_id)
            }
        };
        if !written {
            return false;
        }
        self.last = index;
        self.index = index.wrapping_add(wqebbs);
        self.nreq += 1;
        true
    }
}

//! The typed fast entries of the send queue: one WQE of a known shape per call, no
//! [`SendWr`] to decode (rdma-core's `ibv_wr_*` "new post send" API and
//! `mlx5dv_wr_*` are the model).
//!
//! A batch is a [`SqCursor`] opened with [`SendQueue::cursor`]: it holds the next WQE
//! index, the room left and what the doorbell will need, so that a list of WQEs
//! keeps all of it in registers; [`SendQueue::publish`] writes the producer counter
//! back and rings the doorbell once ([`SendQueue::doorbell`], the same sequence as
//! [`SendQueue::post_list`]).
//!
//! Everything that does not change per WQE comes from the queue: the QPN half of the
//! control segment (`qpn_ds`), the `fm_ce_se` of `sq_sig_all`, the ring mask. Each
//! entry checks its shape and the room once and, when they hold, writes the WQE's
//! leading segments with one bounds check for the whole span
//! ([`QueueMem::write_segs`]); the bytes are exactly those of the general writer
//! ([`SendQueue::write_wqe`]) for the same request. When a check fails the entry
//! writes nothing and returns `false`; the caller then hands the request, as a
//! [`SendWr`], to the general writer, which writes it or reports why not (a zero
//! length, a full queue, inline data too large, a WQE crossing the ring end).

use super::*;

/// An open batch of WQEs (see the module documentation): between
/// [`SendQueue::cursor`] and [`SendQueue::publish`] the cursor, not the queue,
/// holds the producer counter. Four 16-bit counters and a count of WQEs, so that a
/// loop of posts keeps them in registers.
#[derive(Clone, Copy, Debug)]
pub struct SqCursor {
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
}

impl SqCursor {
    /// Whether the batch wrote anything.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.index == self.start
    }

    /// The index the next WQE gets.
    pub fn next_index(&self) -> u16 {
        self.index
    }

    /// WQEs written in the batch (since it was opened or last published).
    #[inline(always)]
    pub fn count(&self) -> u32 {
        self.nreq
    }

    /// The counters (first, next, limit, last) and the count, to hand a cursor to an
    /// out-of-line function as scalars (a cursor passed by value is packed into
    /// registers, which costs shifts on the fast path).
    #[inline(always)]
    pub fn parts(&self) -> ([u16; 4], u32) {
        ([self.start, self.index, self.limit, self.last], self.nreq)
    }

    /// The cursor of [`SqCursor::parts`].
    #[inline(always)]
    pub fn from_parts([start, index, limit, last]: [u16; 4], nreq: u32) -> SqCursor {
        SqCursor {
            start,
            index,
            limit,
            last,
            nreq,
        }
    }
}

impl<M: QueueMem, D: DoorbellWord> SendQueue<M, D> {
    /// Whether the typed entries apply to this queue: a connected QP (RC or UC: no
    /// address vector) with room for one gather entry.
    #[inline(always)]
    pub fn fast_entries(&self) -> bool {
        self.lean || (self.cfg.qp_type == QpType::Uc && self.cfg.max_sge >= 1)
    }

    /// Opens a batch at `cur_post` with the free WQEBBs as its room.
    #[inline(always)]
    pub fn cursor(&self) -> SqCursor {
        SqCursor {
            start: self.cur_post,
            index: self.cur_post,
            limit: self.tail.wrapping_add(self.cfg.wqe_cnt as u16),
            last: self.cur_post,
            nreq: 0,
        }
    }

    /// Hands the producer counter back to the queue (before a call of the general
    /// writer, or of [`SendQueue::complete`], in the middle of a batch).
    #[inline(always)]
    pub fn sync_from(&mut self, c: &SqCursor) {
        self.cur_post = c.index;
    }

    /// Takes the producer counter and the room from the queue again after
    /// [`SendQueue::sync_from`] and a call of the general writer; `written` is the
    /// index of the WQE that call wrote, if any. Field by field, so that the cursor
    /// can live in registers.
    #[inline(always)]
    pub fn sync_to(&self, c: &mut SqCursor, written: Option<u16>) {
        c.index = self.cur_post;
        c.limit = self.tail.wrapping_add(self.cfg.wqe_cnt as u16);
        if let Some(w) = written {
            c.last = w;
            c.nreq += 1;
        }
    }

    /// Publishes a batch: the producer counter goes back to the queue and, when the
    /// batch wrote anything, the doorbell is rung once for it (BlueFlame for a single
    /// WQE that qualifies). The cursor stays usable for a next batch (empty again).
    /// Returns what was written to the device.
    #[inline(always)]
    pub fn publish<B: Bus + ?Sized>(&mut self, bus: &B, c: &mut SqCursor) -> Option<Doorbell> {
        self.cur_post = c.index;
        if c.is_empty() {
            return None;
        }
        let nreq = c.nreq;
        c.nreq = 0;
        c.start = c.index;
        // The last WQE's doorbell data, read back from its control segment (the device
        // only reads the ring).
        let start = (u32::from(c.last) & self.mask) as usize * BB;
        let mut head = [0u8; 8];
        self.buf.read(start, &mut head);
        let ctrl_head = u64::from_be_bytes(head);
        let ds = (ctrl_head & 0x3f) as u8;
        let last = LastWqe {
            index: c.last,
            ds,
            // Only asked when BlueFlame is not preferred for every WQE.
            inline: !self.cfg.prefer_bf && self.wqe_is_inline(start, ctrl_head),
            ctrl_head,
        };
        Some(self.doorbell(bus, nreq, &last))
    }

    /// Whether the WQE at byte `start` with this control head carries inline data: the
    /// first segment after the control (and remote address) segment has the inline
    /// flag in its byte count. (Typed entries write no atomic or address-vector
    /// segments.)
    #[cold]
    fn wqe_is_inline(&self, start: usize, ctrl_head: u64) -> bool {
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

    /// Writes a WQE of `opcode` (SEND, SEND with immediate, RDMA WRITE or RDMA WRITE
    /// with immediate; the caller guarantees one of them, and `remote` exactly for the
    /// writes) with the one gather entry `sge`: control segment, remote address
    /// segment if any, data segment; one WQEBB. `false`, with nothing written, when
    /// `sge` is empty (the general writer leaves the data segment out) or the ring is
    /// full.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn put_sge(
        &self,
        c: &mut SqCursor,
        opcode: u8,
        wr_id: u64,
        sge: &Sge,
        remote: Option<RemoteAddr>,
        flags: SendFlags,
        imm: u32,
    ) -> bool {
        if c.limit.wrapping_sub(c.index) == 0 || sge.length == 0 {
            return false;
        }
        let index = c.index;
        let slot = (u32::from(index) & self.mask) as usize;
        let start = slot * BB;
        // `struct mlx5_wqe_data_seg`: byte_count, lkey, addr.
        let data = seg16(
            (u64::from(sge.length) << 32) | u64::from(sge.lkey),
            sge.addr,
        );
        let ds = match remote {
            None => {
                let (_, ctrl) = self.ctrl(index, opcode, 2, flags, imm);
                self.buf.write_segs(start, &[ctrl, data]);
                2
            }
            Some(r) => {
                let (_, ctrl) = self.ctrl(index, opcode, 3, flags, imm);
                let raddr = seg16(r.addr, u64::from(r.rkey) << 32);
                self.buf.write_segs(start, &[ctrl, raddr, data]);
                3
            }
        };
        debug_assert_eq!(wqebbs_for_ds(ds), 1);
        self.wr_id[slot].store(wr_id, Ordering::Relaxed);
        c.last = index;
        c.index = index.wrapping_add(1);
        c.nreq += 1;
        true
    }

    /// Writes a WQE of `opcode` (as for [`SendQueue::put_sge`]) whose data part is
    /// `data`, inline: control segment, remote address segment if any, the inline
    /// header and the payload (the padding to the next 16 bytes left as it was).
    /// `false`, with nothing written, when `data` is empty or longer than
    /// `max_inline`, when the ring has no room, or when the WQE would cross the ring
    /// end (the general writer splits it there).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn put_inline(
        &self,
        c: &mut SqCursor,
        opcode: u8,
        wr_id: u64,
        data: &[u8],
        remote: Option<RemoteAddr>,
        flags: SendFlags,
        imm: u32,
    ) -> bool {
        let len = data.len();
        if len == 0 || len > self.cfg.max_inline as usize {
            return false;
        }
        let hds = 1 + usize::from(remote.is_some());
        let ds = hds + inline_ds(len);
        let wqebbs = wqebbs_for_ds(ds as u8);
        let index = c.index;
        let slot = (u32::from(index) & self.mask) as usize;
        let start = slot * BB;
        if ds > usize::from(MAX_WQE_DS)
            || wqebbs > c.limit.wrapping_sub(index)
            || start + usize::from(wqebbs) * BB > self.ring_len
        {
            return false;
        }
        let ds = ds as u8;
        let (_, ctrl) = self.ctrl(index, opcode, ds, flags, imm);
        match remote {
            None => self.buf.write_segs(start, &[ctrl]),
            Some(r) => {
                let raddr = seg16(r.addr, u64::from(r.rkey) << 32);
                self.buf.write_segs(start, &[ctrl, raddr]);
            }
        }
        let off = start + DS * hds;
        self.buf
            .write(off, &(len as u32 | MLX5_INLINE_SEG).to_be_bytes());
        self.buf.write(off + 4, data);
        self.wr_id[slot].store(wr_id, Ordering::Relaxed);
        c.last = index;
        c.index = index.wrapping_add(wqebbs);
        c.nreq += 1;
        true
    }
}

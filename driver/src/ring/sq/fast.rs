//! The typed fast entries of the send queue: one WQE of a known shape per call, no
//! [`SendWr`] to decode (rdma-core's `ibv_wr_*` "new post send" API and
//! `mlx5dv_wr_*` are the model).
//!
//! A batch is a [`SqCursor`] opened with [`SendQueue::cursor`]: it holds the next WQE
//! index, the batch's count, the last WQE's doorbell word, the ring position (a
//! [`WqeSlots`]) and a copy of everything about the queue that does not change
//! during a batch (the control segment's QPN template, the `fm_ce_se` of
//! `sq_sig_all`, `max_inline`), so that a list of WQEs keeps all of it in registers
//! (the queue itself may be changed by an out-of-line call of the general writer in
//! the same loop, which would make the compiler reload its fields after every WQE).
//! [`SendQueue::publish`] writes the producer counter back and the doorbell record;
//! [`SendQueue::ring`] then rings the doorbell once (the sequence of
//! [`SendQueue::doorbell`]).
//!
//! The position's `left` is the **post budget**: the WQEBBs the entries may write
//! with no other check, placed by the QP with at most the WQEBBs it knows free and
//! 0 when its state forbids posting, and never past the ring end nor past a
//! multiple of 256 WQE indexes (see the driver's `fastmem::SqSlots`; the second
//! bound is what lets the cursor move its control head on by one add). Each entry checks its shape, then takes its WQEBBs from the
//! budget (one compare and branch: state, room and bounds at once) and writes the
//! WQE's leading segments and its `wr_id`; the bytes are exactly those of the
//! general writer ([`SendQueue::write_wqe`]) for the same request. When a check fails
//! the entry writes nothing and returns `false`; the caller then hands the request,
//! as a [`SendWr`], to the general writer, which writes it or reports why not (a
//! zero length, a full queue, inline data too large, a WQE crossing the ring end),
//! and places the position again.

use super::*;

/// The send ring's memory as the typed entries write it: a position (the next WQE's
/// slot and the WQEBBs left to take from there, never past the ring end) with its
/// bounds proved by the implementation, and the doorbell register when the bus lets
/// the driver store to it directly. Implemented by the driver's `verbs::fastmem`
/// (the unsafe stores live there); kept in registers for a batch.
///
/// Words are 8-byte **memory images**: the word stored as it is (`x.to_be()` of a
/// big-endian field value).
pub trait WqeSlots {
    /// WQEBBs left at the position (the post budget; 0: every request goes out of
    /// line).
    fn left(&self) -> u32;

    /// Moves the position to WQE index `index`, with at most `budget` WQEBBs to
    /// take (fewer when the ring end or the next multiple of 256 WQE indexes comes
    /// first: a batch's WQEs never have indexes on both sides of such a multiple).
    fn place(&mut self, index: u16, budget: u32);

    /// Takes one WQEBB: writes the `W` leading words of the WQE there, records its
    /// `wr_id` and moves on; `false`, with nothing written, when none is left.
    /// `SAVE`: the new position is saved ([`WqeSlots::save`]) before the stores.
    fn put<const W: usize, const SAVE: bool>(&mut self, words: &[u64; W], wr_id: u64) -> bool;

    /// Takes the `(8 * W + 4 + data.len() + 63) / 64` WQEBBs of an inline WQE:
    /// writes its `W` leading words, the inline header (`data.len() |
    /// MLX5_INLINE_SEG`, big-endian) and `data` from byte 4 after them (the padding
    /// to the next 16 bytes left as it was), records its `wr_id` and moves on;
    /// `false`, with nothing written, when fewer are left. `SAVE` as for
    /// [`WqeSlots::put`].
    fn put_inline<const W: usize, const SAVE: bool>(
        &mut self,
        words: &[u64; W],
        data: &[u8],
        wr_id: u64,
    ) -> bool;

    /// Saves the position for the next batch.
    fn save(&mut self);

    /// The WQE index at the position: the producer counter once the WQEs before
    /// it are published (meaningful while the position is placed, that is while
    /// `left` is not 0, and right after the take that spent it).
    fn index(&self) -> u16;

    /// The ring and doorbell register, for reads of written WQEs and the doorbell.
    type Regs: DoorbellRegs;

    /// See [`WqeSlots::Regs`].
    fn regs(&self) -> Self::Regs;
}

/// The ring's written WQEs and the doorbell register as the doorbell uses them
/// (a `Copy` handle: passed to out-of-line paths by value).
pub trait DoorbellRegs: Copy {
    /// Whether the bus offers a direct register ([`DoorbellRegs::db64`] then always
    /// stores).
    fn direct(self) -> bool;

    /// The first 8 bytes of the WQE at `index` (its control segment's head), as
    /// [`Bus::write64`] takes them.
    fn head(self, index: u16) -> u64;

    /// Stores the 8-byte doorbell word `image` (the memory image) at byte `off` of
    /// the QP's BlueFlame register directly; `false` when the bus offers no direct
    /// register (then the caller calls [`Bus::write64`]).
    fn db64(self, off: usize, image: u64) -> bool;

    /// Copies the `wqebbs` WQEBBs of the WQE at `index` (wrapping at the ring end)
    /// to byte `off` of the BlueFlame register directly, in ascending 8-byte
    /// stores; `false` when the bus offers no direct register.
    fn blueflame(self, index: u16, wqebbs: u16, off: usize) -> bool;
}

/// An open batch of WQEs (see the module documentation): between
/// [`SendQueue::cursor`] and [`SendQueue::publish`] the cursor, not the queue,
/// holds the producer counter.
#[derive(Clone, Copy, Debug)]
pub struct SqCursor<S> {
    /// The index of the batch's first WQE (where the cursor was opened).
    start: u16,
    /// The memory image of the next WQE's control head (bytes 0-7: opcode
    /// modifier, index, opcode, QPN, DS) as a SEND of DS 2 (the queue's
    /// `ctrl_send2` with the index, [`SendQueue::head_image`]): a WQE's head is this as it
    /// is for a SEND of one gather entry (an xor for another opcode, an add for
    /// another DS), and moving on is one add of [`IDX_ONE`] (1 in byte 2, the
    /// index's low byte) per WQEBB. The position never passes a multiple of 256 WQE
    /// indexes ([`WqeSlots::place`]), so the add never carries out of byte 2 while
    /// the image is used; after the last WQE before such a multiple it may carry
    /// into byte 3 (the opcode byte on a little-endian host), but the budget is
    /// then spent, so no WQE is written with it, and the index is read from here
    /// with that carry accounted for ([`SqCursor::head_index`]; at publish, from
    /// the position, [`WqeSlots::index`]).
    head: u64,
    /// WQEs written in the batch.
    nreq: u32,
    /// The memory image of the last WQE's first 8 bytes (the 8-byte doorbell).
    last_head: u64,
    /// The ring position.
    slots: S,
    /// The memory image of the control segment's bytes 8-15 with the `fm_ce_se` of
    /// `sq_sig_all` and no immediate.
    tail: u64,
    /// The largest inline payload the typed entries write themselves: `max_inline`,
    /// and small enough that the WQE's DS fits [`MAX_WQE_DS`] even with a remote
    /// address segment.
    max_inline: u32,
}

impl<S> SqCursor<S> {
    /// Whether the batch wrote anything.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.nreq == 0
    }

    /// The index the next WQE gets (the position's, [`WqeSlots::index`]).
    #[inline(always)]
    pub fn next_index(&self) -> u16
    where
        S: WqeSlots,
    {
        self.slots.index()
    }

    /// The index the next WQE gets, from the control head's image (the same as
    /// [`SqCursor::next_index`]; for the out-of-line paths, which then need
    /// nothing of the position).
    #[inline(always)]
    fn head_index(&self) -> u16 {
        let b = self.head.to_ne_bytes();
        // The index's bytes 1 (high) and 2 (low), and a carry out of the low byte
        // that went to byte 3 (the template's opcode byte, SEND) instead of byte 1
        // (see `head`; none on a big-endian host, where the carry goes to byte 1).
        let carry = b[3].wrapping_sub(MLX5_OPCODE_SEND);
        u16::from_be_bytes([b[1], b[2]]).wrapping_add(u16::from(carry) << 8)
    }

    /// Saves the position for the next batch ([`WqeSlots::save`]).
    #[inline(always)]
    pub fn save(&mut self)
    where
        S: WqeSlots,
    {
        self.slots.save()
    }

    /// The ring and doorbell register of the batch's position.
    #[inline(always)]
    pub fn regs(&self) -> S::Regs
    where
        S: WqeSlots,
    {
        self.slots.regs()
    }

    /// The index of the batch's first WQE.
    #[inline(always)]
    pub fn start(&self) -> u16 {
        self.start
    }

    /// The index of the batch's last WQE (meaningful when the batch is not empty).
    #[inline(always)]
    pub fn last(&self) -> u16 {
        (u64::from_be(self.last_head) >> 40) as u16
    }

    /// WQEs written in the batch (since it was opened or last published).
    #[inline(always)]
    pub fn count(&self) -> u32 {
        self.nreq
    }
}

/// One WQEBB more in a control head's memory image ([`SqCursor`]'s `head`): 1 in
/// byte 2, the index's low byte.
pub(super) const IDX_ONE: u64 = u64::from_ne_bytes([0, 0, 1, 0, 0, 0, 0, 0]);

/// The largest inline payload whose WQE (control, remote address, inline header,
/// payload) still fits [`MAX_WQE_DS`] segments.
pub(super) const MAX_INLINE_FAST: u32 = (MAX_WQE_DS as u32 - 2) * DS as u32 - 4;

/// A published batch's doorbell, to ring after the doorbell record
/// ([`SendQueue::publish`], [`SendQueue::ring_direct`], [`SendQueue::ring_slow`]).
#[derive(Clone, Copy, Debug)]
pub struct PendingDoorbell {
    /// BlueFlame half: 0 or `buf_size`.
    pub half: usize,
    /// Whether the BlueFlame copy may apply (one WQE of a DS BlueFlame takes); the
    /// rest of the decision is [`SendQueue::ring_slow`]'s.
    pub maybe_bf: bool,
    /// The memory image of the last WQE's first 8 bytes.
    pub image: u64,
    /// The last WQE's index.
    pub last: u16,
}

impl<M: QueueMem, D: DoorbellWord> SendQueue<M, D> {
    /// Whether the typed entries apply to this queue: a connected QP (RC or UC: no
    /// address vector) with room for one gather entry.
    #[inline(always)]
    pub fn fast_entries(&self) -> bool {
        self.lean || (self.cfg.qp_type == QpType::Uc && self.cfg.max_sge >= 1)
    }

    /// The largest inline payload of the one-request inline entry, when it may take
    /// any (the caller adds its own conditions): `max_inline` (bounded as for the
    /// typed entries), or 0 when this queue may ring BlueFlame (that entry rings only
    /// the 8-byte doorbell). A queue whose BlueFlame span is empty (shut up,
    /// register 0, or a half too small for a 2-DS WQE) never takes the BlueFlame copy
    /// (`pending`'s `maybe_bf` is always false), so its doorbell never depends on the
    /// WQE.
    pub fn one_inline_limit(&self) -> u32 {
        if self.bf_span == 0 {
            self.max_inline_fast
        } else {
            0
        }
    }

    /// The memory image of the first 8 bytes of the control segment of a
    /// one-request inline SEND (no remote address, no immediate) of `len` bytes
    /// (`1..=64`) at WQE index 0, as [`SqCursor::put_inline`] builds it (opcode,
    /// QPN, DS): the image at index `i` is this or-ed with
    /// `u64::from(i.swap_bytes()) << 8` (the index's two big-endian bytes, 1 and 2,
    /// are 0 here). The driver keeps one per length.
    pub fn one_inline_head(&self, len: usize) -> u64 {
        // 1 + inline_ds(len) (len >= 1; as `SqCursor::put_inline`).
        let ds = ((len + DS + 4 + (DS - 1)) >> 4) as u64;
        (self.ctrl_send + ds).to_be()
    }

    /// The memory images of bytes 8-15 of the control segment of a SEND without
    /// immediate, one per combination of [`SendFlags`] (`flags & 7`).
    #[inline(always)]
    pub fn ctrl_tails(&self) -> &[u64; 8] {
        &self.ctrl_tails
    }

    /// The memory image of bytes 8-15 of the control segment of a one-request
    /// SEND with `flags` (no immediate).
    #[inline(always)]
    pub fn one_ctrl_tail(&self, flags: SendFlags) -> u64 {
        self.ctrl_tails[usize::from(flags.0 & 7)]
    }

    /// Moves the producer counter to `cur`, past a WQE the one-request entry writes
    /// at `cur_post` (published by [`SendQueue::publish_one`]).
    #[inline(always)]
    pub fn set_cur_post(&mut self, cur: u16) {
        self.cur_post = cur;
    }

    /// Publishes the WQEs before `cur`, the producer counter (one, written by the
    /// one-request entry, after [`SendQueue::set_cur_post`]): `wmb`, the doorbell
    /// record, `wmb` ([`SendQueue::doorbell`]'s order); then returns the BlueFlame
    /// half the doorbell goes to, toggling it (as every doorbell does).
    #[inline(always)]
    pub fn publish_one<B: Bus + ?Sized>(&mut self, bus: &B, cur: u16) -> usize {
        debug_assert_eq!(cur, self.cur_post);
        let half = self.bf_offset;
        self.bf_offset = half ^ self.cfg.bf.buf_size;
        bus.wmb();
        self.dbr.store_be32(sq_counter(u32::from(cur)));
        bus.wmb();
        half
    }

    /// The memory image of the control head of a SEND of one gather entry (DS 2)
    /// at WQE index `index`: the batch's template ([`SqCursor`]'s `head`).
    #[inline(always)]
    fn head_image(&self, index: u16) -> u64 {
        (self.ctrl_send2 | (u64::from(index) << 40)).to_be()
    }

    /// Opens a batch at `cur_post` over the position `slots` (which must be this
    /// queue's ring and `wr_id` table, placed at `cur_post`).
    #[inline(always)]
    pub fn cursor<S: WqeSlots>(&self, slots: S) -> SqCursor<S> {
        debug_assert!(
            slots.left() == 0 || slots.index() == self.cur_post,
            "the position is at the producer counter: {} {}",
            slots.index(),
            self.cur_post
        );
        SqCursor {
            start: self.cur_post,
            head: self.head_image(self.cur_post),
            nreq: 0,
            last_head: 0,
            slots,
            tail: self.ctrl_tail,
            max_inline: self.max_inline_fast,
        }
    }

    /// Hands the producer counter back to the queue (before a call of the general
    /// writer, or of [`SendQueue::complete`], in the middle of a batch).
    #[inline(always)]
    pub fn sync_from<S: WqeSlots>(&mut self, c: &SqCursor<S>) {
        debug_assert_eq!(c.head_index(), c.next_index());
        self.cur_post = c.head_index();
    }

    /// Takes the producer counter from the queue again after
    /// [`SendQueue::sync_from`] and a call of the general writer, and places the
    /// position there with `budget` WQEBBs (the room the caller knows free, 0 to
    /// close); `written` is the index of the WQE that call wrote, if any.
    #[inline(always)]
    pub fn sync_to<S: WqeSlots>(&self, c: &mut SqCursor<S>, written: Option<u16>, budget: u32) {
        c.head = self.head_image(self.cur_post);
        c.slots.place(self.cur_post, budget);
        if let Some(w) = written {
            c.last_head = c.slots.regs().head(w).to_be();
            c.nreq += 1;
        }
    }

    /// Publishes a batch's WQEs (the caller saved the position,
    /// [`SqCursor::save`]): the producer counter goes back to the queue, and when the
    /// batch wrote anything: `wmb`, the doorbell
    /// record, `wmb` ([`SendQueue::doorbell`]'s order), the BlueFlame half toggled
    /// and the BlueFlame decision taken. Returns the doorbell to ring with
    /// [`SendQueue::ring_direct`] or [`SendQueue::ring_slow`] (nothing may be stored
    /// to the ring in between). The
    /// cursor stays usable for a next batch (empty again).
    #[inline(always)]
    pub fn publish<B: Bus + ?Sized, S: WqeSlots>(
        &mut self,
        bus: &B,
        c: &mut SqCursor<S>,
    ) -> Option<PendingDoorbell> {
        let cur = c.next_index();
        self.cur_post = cur;
        if c.nreq == 0 {
            return None;
        }
        let nreq = c.nreq;
        c.nreq = 0;
        c.start = cur;
        let image = c.last_head;
        // Everything the doorbell needs, read before the barriers (after a compiler
        // barrier every field would be loaded again).
        let half = self.bf_offset;
        self.bf_offset = half ^ self.cfg.bf.buf_size;
        let p = self.pending(nreq, half, image);
        bus.wmb();
        self.dbr.store_be32(sq_counter(u32::from(cur)));
        bus.wmb();
        Some(p)
    }

    /// The doorbell of a batch of `nreq` WQEs whose last one starts with `image`,
    /// on BlueFlame half `half`: `use_blueflame` with its constant part
    /// precomputed (`bf_max_ds`), and `2 <= ds <= bf_max_ds` as one compare
    /// (`bf_span = bf_max_ds - 1`); the inline test is `ring_slow`'s.
    #[inline(always)]
    pub fn pending(&self, nreq: u32, half: usize, image: u64) -> PendingDoorbell {
        // The DS byte (its top 2 bits are 0: a DS is at most 63).
        let ds = (image >> 56) as u8;
        PendingDoorbell {
            half,
            maybe_bf: nreq == 1 && ds.wrapping_sub(2) < self.bf_span,
            image,
            last: (u64::from_be(image) >> 40) as u16,
        }
    }

    /// Rings the 8-byte doorbell [`SendQueue::publish`] prepared straight to the
    /// register ([`DoorbellRegs::db64`]); `false`, with nothing done, when that is
    /// not the way (a possible BlueFlame copy, or a bus without a direct register):
    /// then [`SendQueue::ring_slow`].
    #[inline(always)]
    pub fn ring_direct<S: WqeSlots>(&self, c: &SqCursor<S>, p: PendingDoorbell) -> bool {
        !p.maybe_bf && c.slots.regs().db64(p.half, p.image)
    }

    /// The doorbell of [`SendQueue::publish`] when [`SendQueue::ring_direct`] did
    /// not ring it: the BlueFlame copy when the WQE qualifies (`prefer_bf`, or an
    /// inline WQE), else the 8-byte doorbell; directly when the bus allows it, else
    /// through the [`Bus`]. Returns what was written. (Inlined into its out-of-line
    /// callers.)
    #[inline(always)]
    pub fn ring_slow<B: Bus + ?Sized, R: DoorbellRegs>(
        &self,
        bus: &B,
        regs: R,
        p: PendingDoorbell,
    ) -> Doorbell {
        let head = u64::from_be(p.image);
        let ds = (head & 0x3f) as u8;
        let offset = self.cfg.bf.reg + p.half;
        let bf = p.maybe_bf && (self.cfg.prefer_bf || self.wqe_is_inline(p.last, head));
        if bf {
            let wqebbs = wqebbs_for_ds(ds);
            if !regs.blueflame(p.last, wqebbs, p.half) {
                let last = LastWqe {
                    index: p.last,
                    ds,
                    inline: true,
                    ctrl_head: head,
                };
                self.blueflame(bus, offset, &last);
            }
            Doorbell::BlueFlame {
                offset,
                len: usize::from(wqebbs) * BB,
            }
        } else {
            if !regs.db64(p.half, p.image) {
                bus.write64(offset, head);
            }
            Doorbell::Db {
                offset,
                value: head,
            }
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
    /// The control segment (`mlx5dv_x86_set_ctrl_seg`) of the next WQE as two memory
    /// images, from the batch's templates: bytes 0-7 (index, opcode, QPN, DS) and
    /// 8-15 (`fm_ce_se`, immediate).
    #[inline(always)]
    fn ctrl(&self, opcode: u8, ds: u64, flags: SendFlags, imm: u32) -> (u64, u64) {
        debug_assert!((2..64).contains(&ds));
        // `ds - 2 < 62` in byte 7 (the top byte of the native value on a
        // little-endian host, the bottom one on a big-endian host).
        let ds2 = ds - 2;
        let dsd = if cfg!(target_endian = "little") {
            // A rotation (`ds2 < 64`: the same as a shift), which the compiler keeps
            // as one instruction after the shifts that compute an inline WQE's DS.
            ds2.rotate_right(8)
        } else {
            ds2
        };
        // The opcode by an xor of byte 3 with SEND's, the DS by an add to byte 7
        // (2 there: the sum is `ds < 64`, no carry); constants, nothing for a SEND
        // of one gather entry.
        let op = u64::from_ne_bytes([0, 0, 0, opcode ^ MLX5_OPCODE_SEND, 0, 0, 0, 0]);
        let head = (self.head ^ op) + dsd;
        let fm = u64::from(FM_CE_SE[usize::from(flags.0 & 7)]) << 32;
        let tail = self.tail | (fm | u64::from(imm)).to_be();
        (head, tail)
    }

    /// Records the WQE just written (`wqebbs` WQEBBs, first word `head`).
    #[inline(always)]
    fn wrote(&mut self, head: u64, wqebbs: u32) {
        debug_assert_eq!(
            self.head.to_ne_bytes()[3],
            MLX5_OPCODE_SEND,
            "a head moved past its 256-index chunk is never written"
        );
        self.last_head = head;
        // Within the WQE's chunk (the budget covered it): at most a carry out of
        // byte 2 after the chunk's last WQE (see `head`).
        self.head += IDX_ONE * u64::from(wqebbs);
        self.nreq += 1;
    }

    /// Writes a WQE of `opcode` (SEND, SEND with immediate, RDMA WRITE or RDMA WRITE
    /// with immediate; the caller guarantees one of them, and `remote` exactly for the
    /// writes) with the one gather entry `sge`: control segment, remote address
    /// segment if any, data segment; one WQEBB. `false`, with nothing written, when
    /// `sge` is empty (the general writer leaves the data segment out) or the budget
    /// is spent.
    ///
    /// `NOW`: the position is saved as soon as the WQEBB is taken (a request
    /// published on its own; a batch saves it when it publishes).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn put_sge<const NOW: bool>(
        &mut self,
        opcode: u8,
        wr_id: u64,
        sge: &Sge,
        remote: Option<RemoteAddr>,
        flags: SendFlags,
        imm: u32,
    ) -> bool {
        // `struct mlx5_wqe_data_seg`: byte_count, lkey, addr. The length and the key
        // as one value (`length` in the low half), turned into the segment's first
        // 8 bytes by a rotation and one byte swap.
        let [addr, lk] = crate::verbs::fastmem::sge_words(sge);
        let lk = if cfg!(target_endian = "little") {
            lk
        } else {
            lk.rotate_left(32)
        };
        let d0 = lk.rotate_left(32).to_be();
        let d1 = addr.to_be();
        // The length's 4 bytes are the first 4 of the segment (the low half of its
        // memory image on a little-endian host).
        if d0.to_ne_bytes()[..4] == [0; 4] {
            return false;
        }
        let ok = match remote {
            None => {
                let (h, t) = self.ctrl(opcode, 2, flags, imm);
                self.slots
                    .put::<4, NOW>(&[h, t, d0, d1], wr_id)
                    .then_some(h)
            }
            Some(r) => {
                let (h, t) = self.ctrl(opcode, 3, flags, imm);
                let (r0, r1) = (r.addr.to_be(), (u64::from(r.rkey) << 32).to_be());
                self.slots
                    .put::<6, NOW>(&[h, t, r0, r1, d0, d1], wr_id)
                    .then_some(h)
            }
        };
        match ok {
            Some(h) => {
                self.wrote(h, 1);
                true
            }
            None => false,
        }
    }

    /// Writes the leading run of `wrs` that are SENDs of one gather entry on a
    /// connected QP, each as [`SqCursor::put_sge`] writes it (control segment from
    /// the cursor's head and `tails[flags]`, the queue's control tails
    /// [`SendQueue::ctrl_tails`], then the data segment; one WQEBB), and returns how
    /// many it wrote. It stops, with nothing written for it, at the first request of
    /// another shape, with an empty gather entry, or when the budget is spent: the
    /// caller posts that one another way. A loop with no call in it, so that the
    /// cursor stays in registers (`QueuePair::post_send` of a list).
    #[inline(always)]
    pub fn put_sends(&mut self, wrs: &[SendWr<'_>], tails: &[u64; 8]) -> usize {
        // Each WQE takes one WQEBB: how many were written is what the budget lost,
        // and the last head the one before the cursor's, so the loop keeps neither.
        let left = self.slots.left();
        let mut head = self.head;
        for wr in wrs {
            let (SendOp::Send, SendData::Gather([sge]), None) = (wr.op, wr.data, wr.ud) else {
                break;
            };
            // As `put_sge`: the data segment's two words, the length tested in the
            // first.
            let [addr, lk] = crate::verbs::fastmem::sge_words(sge);
            let lk = if cfg!(target_endian = "little") {
                lk
            } else {
                lk.rotate_left(32)
            };
            let d0 = lk.rotate_left(32).to_be();
            let d1 = addr.to_be();
            if d0.to_ne_bytes()[..4] == [0; 4] {
                break;
            }
            let tail = tails[usize::from(wr.flags.0 & 7)];
            if !self.slots.put::<4, false>(&[head, tail, d0, d1], wr.wr_id) {
                break;
            }
            debug_assert_eq!(
                head.to_ne_bytes()[3],
                MLX5_OPCODE_SEND,
                "a head moved past its 256-index chunk is never written"
            );
            head += IDX_ONE;
        }
        let n = left - self.slots.left();
        if n > 0 {
            self.head = head;
            // The add is exact (no wrap of the 64-bit image), so is its inverse.
            self.last_head = head - IDX_ONE;
            self.nreq += n;
        }
        n as usize
    }

    /// Writes a WQE of `opcode` (as for [`SqCursor::put_sge`]) whose data part is
    /// `data`, inline: control segment, remote address segment if any, the inline
    /// header and the payload (the padding to the next 16 bytes left as it was).
    /// `false`, with nothing written, when `data` is empty or longer than
    /// `max_inline`, or when the budget does not cover it (a full ring, or a WQE
    /// that would cross the ring end: the general writer splits it there). `NOW`
    /// as for [`SqCursor::put_sge`].
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn put_inline<const NOW: bool>(
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
        // `ds` within MAX_WQE_DS (see `SendQueue::cursor`). The WQEBBs are counted as
        // `WqeSlots::put_inline` counts them.
        // `ds - 2` first (the control head adds it), then `ds`.
        let ds2 = (hds - 1) + ((len + 4 + (DS - 1) - DS) >> 4);
        let ds = ds2 + 2;
        debug_assert_eq!(ds, hds + inline_ds(len));
        debug_assert!(ds <= usize::from(MAX_WQE_DS));
        let wqebbs = ((16 * hds + 4 + 63 + len) >> 6) as u32;
        debug_assert_eq!(wqebbs, u32::from(wqebbs_for_ds(ds as u8)));
        let (h, t) = self.ctrl(opcode, ds as u64, flags, imm);
        let written = match remote {
            None => self.slots.put_inline::<2, NOW>(&[h, t], data, wr_id),
            Some(r) => {
                let (r0, r1) = (r.addr.to_be(), (u64::from(r.rkey) << 32).to_be());
                self.slots
                    .put_inline::<4, NOW>(&[h, t, r0, r1], data, wr_id)
            }
        };
        if !written {
            return false;
        }
        self.wrote(h, wqebbs);
        true
    }
}

//! Typed send entries: a [`SendBatch`] writes WQEs of known shapes straight into the
//! send ring, with no [`SendWr`] to decode, and rings one doorbell for all of them
//! (the model is rdma-core's `ibv_wr_start` / `ibv_wr_send` / `ibv_wr_complete` and
//! `mlx5dv`).
//!
//! ```
//! use std::sync::Arc;
//! use ferroverbs::verbs::fastpath::{DetachedCq, DetachedQp};
//! use ferroverbs::verbs::{QpCap, QpState, SendFlags, Sge, WorkCompletion};
//! use ferroverbs_hw::MemBus;
//!
//! let bus = Arc::new(MemBus::new(1 << 16));
//! let mut cq = DetachedCq::new(&bus, 64).unwrap();
//! let mut qp = DetachedQp::new(&bus, 0x42, &QpCap::default(), false).unwrap();
//! cq.attach(&qp);
//! qp.set_state(QpState::Rts);
//! let index = qp.next_send_index();
//! let mut batch = qp.post().unwrap();
//! batch.send_inline(7, b"hello", SendFlags::SIGNALED).unwrap();
//! let sge = Sge { addr: 0x1000, length: 64, lkey: 0x5 };
//! batch.send(8, &sge, SendFlags::NONE).unwrap();
//! batch.ring(); // one doorbell for both
//! cq.produce_send(0x42, index, ferroverbs_hw::datapath::wqe::MLX5_OPCODE_SEND);
//! assert_eq!(cq.poll_one().unwrap().wr_id, 7);
//! ```
//!
//! What is precomputed where: the control segment's QPN half and the `sq_sig_all`
//! bit at QP creation (ring configuration), the BlueFlame register and its
//! alternation in the ring; the state is checked once per batch, by
//! [`QueuePair::post`](super::QueuePair::post). Per request an entry checks its shape
//! and the room and writes the WQE with one bounds check
//! ([`ring::SendQueue::put_sge`], [`ring::SendQueue::put_inline`]). The bytes are
//! those [`QueuePair::post_send`](super::QueuePair::post_send) writes for the same
//! requests (`verbs::tests` compares them), and so are the errors: any request the
//! typed writer does not take (an empty gather entry, a full ring, inline data too
//! large or crossing the ring end) goes, out of line, through the general writer
//! and the same queue-full retry as `post_send`.
//!
//! A batch rings its doorbell in [`SendBatch::ring`], or when it is dropped (for
//! example on an early return with `?`), so requests written are always published.
//! Nothing here allocates, locks or makes a system call.

use ferroverbs_hw::datapath::wqe::{
    MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_SEND, MLX5_OPCODE_SEND_IMM,
};
use ferroverbs_hw::Bus;

use super::fastmem::{Slots, SqSlots};
use super::qp::Queues;
use super::{PostError, RemoteAddr, SendData, SendFlags, SendOp, SendWr, Sge};
use crate::ring::{self, DoorbellRegs, WqeSlots};

/// A batch of send requests on one QP, published by one doorbell (see the module
/// documentation). Obtained from [`QueuePair::post`](super::QueuePair::post).
///
/// Each entry returns an error, and posts nothing, when its request cannot be
/// posted; the requests before it stay in the batch.
pub struct SendBatch<'q, B: Bus> {
    q: &'q mut Queues<B>,
    c: ring::SqCursor<Slots<'q>>,
}

impl<B: Bus> Queues<B> {
    /// The one-request entries' error convention: an error is left in
    /// `Queues::last_err` and the result points to it (one register, no unwinding).
    #[inline(always)]
    fn keep_err(&mut self, r: Result<(), PostError>) -> Option<&PostError> {
        match r {
            Ok(()) => None,
            Err(e) => {
                self.last_err = e;
                Some(&self.last_err)
            }
        }
    }

    /// Opens a batch on this QP's send ring `slots` ([`Queues::sq_slots`]). When the
    /// ring's post budget is spent (it is 0 after every state change), the state
    /// (RTS, SQD, SQE or ERR, as `post_send`) and the QP type are checked, out of
    /// line, and the budget placed again from the room known free.
    #[inline(always)]
    pub(crate) fn batch<'q>(
        &'q mut self,
        slots: &'q mut SqSlots<B>,
    ) -> Result<SendBatch<'q, B>, PostError> {
        if slots.spent() {
            self.open_slow(slots)?;
        }
        let c = self.sq.cursor(slots.open());
        Ok(SendBatch { q: self, c })
    }

    /// The checks of a batch opened with no budget, and the budget placed again.
    #[cold]
    #[inline(never)]
    fn open_slow(&mut self, slots: &mut SqSlots<B>) -> Result<(), PostError> {
        // The budget kept beyond a chunk's end: placed with these checks, and
        // cleared by every state change.
        if slots.advance(self.sq.cur_post()) {
            return Ok(());
        }
        if !self.state.can_send() {
            return Err(PostError::InvalidState { state: self.state });
        }
        if !self.sq.fast_entries() {
            return Err(PostError::AddressMismatch);
        }
        self.sync_sq();
        let mut s = slots.open();
        s.place(self.sq.cur_post(), self.sq.free());
        s.save();
        slots.refresh_one_limit(self.sq_hwm);
        Ok(())
    }

    /// Publishes a batch: the doorbell record, then the doorbell and the counters
    /// (see [`SendBatch::ring`]). The straight path (the 8-byte doorbell stored
    /// directly, the completed WQE the previous post's last) makes no call; every
    /// other case goes to one out-of-line call that does the rest, so that no value
    /// lives across a call.
    #[inline(always)]
    fn finish(&mut self, c: &mut ring::SqCursor<Slots<'_>>) {
        c.save();
        self.finish_saved::<false>(c);
    }

    /// [`Queues::finish`] of a cursor whose position is saved; `ONE`: the batch is
    /// one WQE (its last is its first).
    #[inline(always)]
    fn finish_saved<const ONE: bool>(&mut self, c: &mut ring::SqCursor<Slots<'_>>) {
        let (n, start, cur) = (c.count(), c.start(), c.next_index());
        let Some(p) = self.sq.publish(&*self.bus, c) else {
            return;
        };
        // Read before the doorbell: it names no WQE of this batch, so the depth
        // measured from it is the depth right after this post.
        let d = self
            .shared
            .sq_done
            .load(std::sync::atomic::Ordering::Relaxed);
        let regs = c.regs();
        if d != self.hwm_prev {
            // Scalars only (a struct would be built in memory first).
            finish_slow(self, regs, p.half, p.image, n, start);
            return;
        }
        // The counters (plain stores to host memory, which the doorbell's order does
        // not concern), then the doorbell: the 8-byte doorbell stored directly, or,
        // in tail position (nothing is needed after it), the BlueFlame copy or the
        // bus's doorbell.
        let last = if ONE { start } else { p.last };
        self.note_posted_prev(n, last, start, cur);
        if !p.maybe_bf && regs.direct() {
            regs.db64(p.half, p.image);
            return;
        }
        ring_other(self, regs, p.half, p.image, n);
    }

    /// One SEND of a gather entry or of inline data, posted and rung on its own
    /// (the entries [`QueuePair::send`](super::QueuePair::send) and
    /// [`QueuePair::send_inline`](super::QueuePair::send_inline)): a batch of one,
    /// with every check of the batch; anything but the straight path (no budget, an
    /// empty gather entry, inline data out of bounds) goes, as a tail call, to the
    /// batch entries out of line, so that the straight path keeps its values in
    /// registers.
    #[inline(always)]
    pub(crate) fn send_one(
        &mut self,
        slots: &mut SqSlots<B>,
        wr_id: u64,
        data: OneData<'_>,
        flags: SendFlags,
    ) -> Result<(), PostError> {
        let mut c = self.sq.cursor(slots.open());
        // The position is saved as soon as the WQE's room is taken (`NOW`), so that
        // it does not stay in registers while the WQE is written.
        let ok = match data {
            OneData::Sge(sge) => c.put_sge::<true>(MLX5_OPCODE_SEND, wr_id, sge, None, flags, 0),
            OneData::Inline(d) => c.put_inline::<true>(MLX5_OPCODE_SEND, wr_id, d, None, flags, 0),
        };
        if !ok {
            return match data {
                OneData::Sge(sge) => send_one_slow(self, slots, wr_id, sge, flags),
                OneData::Inline(d) => send_inline_one_slow(self, slots, wr_id, d, flags),
            };
        }
        self.finish_saved::<true>(&mut c);
        Ok(())
    }
}

/// The data of [`Queues::send_one`].
#[derive(Clone, Copy)]
pub(crate) enum OneData<'a> {
    /// One gather entry.
    Sge(&'a Sge),
    /// Inline data.
    Inline(&'a [u8]),
}

/// The owner of a QP's queues and send ring position ([`QueuePair`](super::QueuePair),
/// [`DetachedQp`](super::fastpath::DetachedQp)): the one-request inline entry and its
/// out-of-line paths take it as one pointer.
pub(crate) trait SqOwner<B: Bus> {
    /// The queues and the send ring position.
    fn parts(&mut self) -> (&mut Queues<B>, &mut SqSlots<B>);
}

/// One inline SEND posted and rung on its own (the entries
/// [`QueuePair::send_inline`](super::QueuePair::send_inline) and
/// `DetachedQp::send_inline`): what `post()`, `send_inline`, `ring()` do (same WQE,
/// doorbell, counters and errors). On a queue whose doorbell is the 8-byte one (no
/// BlueFlame: [`SqSlots::set_one_cap`]), a payload the gate takes is written,
/// published and rung here (with no call when the bus lets the driver store the
/// doorbell directly; through the bus's `write64`, last, otherwise) when the
/// completion the
/// CQ published is the previous post's last WQE (the shortcut of
/// [`Queues::note_posted`]: the depth after this post is then this WQE's WQEBBs,
/// which the gate keeps within the high-water mark, [`SqSlots::refresh_one_limit`];
/// no WQE of this post is rung yet, so no completion can come between this read
/// and the doorbell): the budget (state, room, ring end) and the gate (length, the
/// mark) in [`SqSlots::take_one_inline`], the producer counter and the counters, the
/// WQE ([`OneInline::write`]), the doorbell record, the doorbell. Otherwise
/// [`one_inline_other`] runs it out of line (the same post with the counters'
/// exact measure, or a batch of one). It does not return its error (a `Result`
/// would come back through memory, and so the straight path would need a stack
/// frame): it leaves it in `Queues::last_err` and returns a pointer to it.
#[inline(always)]
pub(crate) fn send_one_inline<B: Bus, O: SqOwner<B>>(
    o: &mut O,
    wr_id: u64,
    data: &[u8],
    flags: SendFlags,
) -> Result<(), PostError> {
    let (q, slots) = o.parts();
    if one_inline_straight(q, slots, data, wr_id, flags) {
        return Ok(());
    }
    // Every other case out of line (no register of the straight path lives across
    // a call): a queue whose entry is closed for good (one that may ring
    // BlueFlame) straight to a batch of one.
    if slots.one_closed() {
        return one_result(send_one_batch(o, data, wr_id, flags));
    }
    one_result(one_inline_other(o, data, wr_id, flags))
}

/// [`QueuePair::try_send_inline`](super::QueuePair::try_send_inline): the straight
/// path of [`send_one_inline`] alone, whether it posted the request (nothing written
/// otherwise).
#[inline(always)]
pub(crate) fn try_send_one_inline<B: Bus, O: SqOwner<B>>(
    o: &mut O,
    wr_id: u64,
    data: &[u8],
    flags: SendFlags,
) -> bool {
    let (q, slots) = o.parts();
    one_inline_straight(q, slots, data, wr_id, flags)
}

/// The straight path of [`send_one_inline`]: whether it posted the request (when
/// the completion the CQ published is the previous post's last WQE and
/// [`SqSlots::take_one_inline`] takes it); nothing written otherwise.
#[inline(always)]
fn one_inline_straight<B: Bus>(
    q: &mut Queues<B>,
    slots: &mut SqSlots<B>,
    data: &[u8],
    wr_id: u64,
    flags: SendFlags,
) -> bool {
    let d = q.shared.sq_done.load(std::sync::atomic::Ordering::Relaxed);
    if d != q.hwm_prev {
        return false;
    }
    let Some(w) = slots.take_one_inline(data, wr_id) else {
        return false;
    };
    let start = q.sq.cur_post();
    let cur = start.wrapping_add(w.wqebbs() as u16);
    q.sq.set_cur_post(cur);
    q.note_posted_one(start);
    let image = w.write(start, q.sq.one_ctrl_tail(flags));
    let half = q.sq.publish_one(&*q.bus, cur);
    slots.ring_one(half, image);
    true
}

/// The result of an out-of-line path of [`send_one_inline`]: `Ok` for `None`, else
/// the error it points to (`Queues::last_err`).
#[inline(always)]
fn one_result(r: Option<&PostError>) -> Result<(), PostError> {
    match r {
        None => Ok(()),
        Some(e) => Err(*e),
    }
}

/// [`send_one_inline`] when its straight path does not apply (a queue that may ring
/// BlueFlame, no budget, a payload outside the gate): the gate placed again for the
/// depth high-water mark (as it is before this post: a gate from an older mark is
/// only narrower), then a batch of one. The error, if the request was refused, is
/// left in `Queues::last_err` and the result points to it (one register: the
/// caller keeps nothing across the call).
#[inline(never)]
fn send_one_other<'o, B: Bus + 'o, O: SqOwner<B>>(
    o: &'o mut O,
    data: &[u8],
    wr_id: u64,
    flags: SendFlags,
) -> Option<&'o PostError> {
    let (q, slots) = o.parts();
    slots.refresh_one_limit(q.sq_hwm);
    send_one_batch(o, data, wr_id, flags)
}

/// [`send_one_inline`] on a queue whose one-request entry is closed for good
/// ([`SqSlots::one_closed`]): a batch of one ([`Queues::send_one`]: the BlueFlame
/// copy where it applies). The error as for [`send_one_other`].
#[inline(never)]
fn send_one_batch<'o, B: Bus + 'o, O: SqOwner<B>>(
    o: &'o mut O,
    data: &[u8],
    wr_id: u64,
    flags: SendFlags,
) -> Option<&'o PostError> {
    let (q, slots) = o.parts();
    let r = q.send_one(slots, wr_id, OneData::Inline(data), flags);
    q.keep_err(r)
}

/// [`send_one_inline`] when its straight path does not apply: when the completion
/// the CQ published is not the previous post's last WQE, the same post with the
/// counters' exact measure (the completion read again after the WQE is written,
/// still before the doorbell); else, or when the gate or the budget refuse,
/// [`send_one_other`].
#[inline(never)]
fn one_inline_other<'o, B: Bus + 'o, O: SqOwner<B>>(
    o: &'o mut O,
    data: &[u8],
    wr_id: u64,
    flags: SendFlags,
) -> Option<&'o PostError> {
    let (q, slots) = o.parts();
    // A budget spent at a chunk's end (`SqSlots::advance`): the next chunk's, then
    // the straight path again.
    if slots.advance(q.sq.cur_post()) && one_inline_straight(q, slots, data, wr_id, flags) {
        return None;
    }
    let d = q.shared.sq_done.load(std::sync::atomic::Ordering::Relaxed);
    if d == q.hwm_prev {
        return send_one_other(o, data, wr_id, flags);
    }
    let Some(w) = slots.take_one_inline(data, wr_id) else {
        return send_one_other(o, data, wr_id, flags);
    };
    let start = q.sq.cur_post();
    let cur = start.wrapping_add(w.wqebbs() as u16);
    q.sq.set_cur_post(cur);
    let image = w.write(start, q.sq.one_ctrl_tail(flags));
    let half = q.sq.publish_one(&*q.bus, cur);
    let d = q.shared.sq_done.load(std::sync::atomic::Ordering::Relaxed);
    q.note_posted_with(1, start, start, cur, d);
    slots.ring_one(half, image);
    None
}

/// The rest of [`Queues::finish`] when it is not the straight path: the doorbell
/// (BlueFlame, or through the bus) and the counters. `half` and `image` are the
/// published batch's ([`ring::PendingDoorbell`]); the completion is read again,
/// still before the doorbell.
#[cold]
#[inline(never)]
fn finish_slow<B: Bus>(
    q: &mut Queues<B>,
    regs: super::fastmem::Regs<'_>,
    half: usize,
    image: u64,
    n: u32,
    start: u16,
) {
    let d = q.shared.sq_done.load(std::sync::atomic::Ordering::Relaxed);
    let p = q.sq.pending(n, half, image);
    let last = p.last;
    q.sq.ring_slow(&*q.bus, regs, p);
    q.note_posted_with(n, last, start, q.sq.cur_post(), d);
}

/// The doorbell of [`Queues::finish`] other than the direct 8-byte one: the
/// BlueFlame copy (a BlueFlame QP's single WQE), or the bus's doorbell. Out of line
/// but not cold (it is the common case of a BlueFlame QP), called last.
#[inline(never)]
fn ring_other<B: Bus>(
    q: &Queues<B>,
    regs: super::fastmem::Regs<'_>,
    half: usize,
    image: u64,
    n: u32,
) {
    q.sq.ring_slow(&*q.bus, regs, q.sq.pending(n, half, image));
}

/// [`Queues::send_one`] of a gather entry through a batch: the open checks, the
/// general writer, the errors.
#[cold]
#[inline(never)]
fn send_one_slow<B: Bus>(
    q: &mut Queues<B>,
    slots: &mut SqSlots<B>,
    wr_id: u64,
    sge: &Sge,
    flags: SendFlags,
) -> Result<(), PostError> {
    let mut b = q.batch(slots)?;
    b.send(wr_id, sge, flags)?;
    b.ring();
    Ok(())
}

/// [`Queues::send_one`] of inline data through a batch.
#[cold]
#[inline(never)]
fn send_inline_one_slow<B: Bus>(
    q: &mut Queues<B>,
    slots: &mut SqSlots<B>,
    wr_id: u64,
    data: &[u8],
    flags: SendFlags,
) -> Result<(), PostError> {
    let mut b = q.batch(slots)?;
    b.send_inline(wr_id, data, flags)?;
    b.ring();
    Ok(())
}

/// [`QueuePair::post_send`](super::QueuePair::post_send) and
/// `DetachedQp::post_send`: a list of [`SendWr`] through the typed writers where the
/// request has a typed shape, with the results of the general writer (the bytes,
/// doorbell, counters and errors are those of [`Queues::post_send`], which the tests
/// compare). One request of a typed SEND shape (one inline part or one gather entry,
/// no datagram address) is the one-request entry ([`send_one_inline`],
/// [`Queues::send_one`]); any other list goes, out of line, to [`post_send_list`].
#[inline(always)]
pub(crate) fn post_send<B: Bus, O: SqOwner<B>>(
    o: &mut O,
    wrs: &[SendWr<'_>],
) -> Result<(), super::BadWr> {
    if let [wr] = wrs {
        if wr.ud.is_none() && matches!(wr.op, SendOp::Send) {
            let r = match wr.data {
                SendData::Inline([p]) => send_one_inline(o, wr.wr_id, p, wr.flags),
                SendData::Gather([sge]) => return post_send_sge(o, wr.wr_id, sge, wr.flags),
                _ => return post_send_list(o, wrs),
            };
            return r.map_err(|error| super::BadWr { index: 0, error });
        }
    }
    post_send_list(o, wrs)
}

/// [`post_send`] of one SEND of one gather entry: [`Queues::send_one`], out of line
/// (so that the inline SEND's straight path keeps its values in registers, with no
/// stack frame).
#[inline(never)]
fn post_send_sge<B: Bus, O: SqOwner<B>>(
    o: &mut O,
    wr_id: u64,
    sge: &Sge,
    flags: SendFlags,
) -> Result<(), super::BadWr> {
    let (q, slots) = o.parts();
    q.send_one(slots, wr_id, OneData::Sge(sge), flags)
        .map_err(|error| super::BadWr { index: 0, error })
}

/// [`post_send`] of any other list: one batch, each request through its typed entry
/// where it has one and the general writer otherwise, one doorbell; the requests
/// before a failed one are published (the batch rings when it is dropped). A list
/// of SENDs of one gather entry each (the common list) runs in a loop that keeps the
/// batch in registers, any other in [`post_mixed_list`]. A queue without typed
/// entries (UD: every send carries an address vector) and the empty list take
/// [`Queues::post_send`] itself, after closing the typed entries' position (it
/// writes WQEs behind it).
#[inline(never)]
fn post_send_list<B: Bus, O: SqOwner<B>>(
    o: &mut O,
    wrs: &[SendWr<'_>],
) -> Result<(), super::BadWr> {
    let (q, slots) = o.parts();
    if wrs.is_empty() || !q.sq.fast_entries() {
        slots.close();
        return q.post_send(wrs);
    }
    let mut b = q
        .batch(slots)
        .map_err(|error| super::BadWr { index: 0, error })?;
    let tails = b.q.sq.ctrl_tails();
    let done = b.c.put_sends(wrs, tails);
    if done < wrs.len() {
        // The batch moves (by value: it stays in registers in the loop above).
        return post_mixed_rest(b, wrs, done);
    }
    b.ring();
    Ok(())
}

/// The rest of [`post_send_list`] from the first request the run of SENDs of one
/// gather entry did not take (`wrs[from]`: another shape, an empty gather entry, or
/// the budget spent), in the same batch `b`: each request through
/// [`SendBatch::put`].
#[inline(never)]
fn post_mixed_rest<B: Bus>(
    mut b: SendBatch<'_, B>,
    wrs: &[SendWr<'_>],
    from: usize,
) -> Result<(), super::BadWr> {
    for (index, wr) in wrs.iter().enumerate().skip(from) {
        b.put(wr).map_err(|error| super::BadWr { index, error })?;
    }
    b.ring();
    Ok(())
}

impl<'q, B: Bus> SendBatch<'q, B> {
    /// SEND of the gather entry `sge` (`ibv_wr_send` + `ibv_wr_set_sge`).
    #[inline(always)]
    pub fn send(&mut self, wr_id: u64, sge: &Sge, flags: SendFlags) -> Result<(), PostError> {
        self.gather(MLX5_OPCODE_SEND, wr_id, sge, None, flags, 0)
    }

    /// SEND with immediate `imm` of the gather entry `sge`.
    #[inline(always)]
    pub fn send_imm(
        &mut self,
        wr_id: u64,
        sge: &Sge,
        imm: u32,
        flags: SendFlags,
    ) -> Result<(), PostError> {
        self.gather(MLX5_OPCODE_SEND_IMM, wr_id, sge, None, flags, imm)
    }

    /// SEND of `data` copied into the WQE (`IBV_SEND_INLINE`; at most the QP's
    /// `max_inline_data` bytes).
    #[inline(always)]
    pub fn send_inline(
        &mut self,
        wr_id: u64,
        data: &[u8],
        flags: SendFlags,
    ) -> Result<(), PostError> {
        self.inline(MLX5_OPCODE_SEND, wr_id, data, None, flags, 0)
    }

    /// SEND with immediate `imm` of inline `data`.
    #[inline(always)]
    pub fn send_imm_inline(
        &mut self,
        wr_id: u64,
        data: &[u8],
        imm: u32,
        flags: SendFlags,
    ) -> Result<(), PostError> {
        self.inline(MLX5_OPCODE_SEND_IMM, wr_id, data, None, flags, imm)
    }

    /// RDMA WRITE of the gather entry `sge` to `remote`.
    #[inline(always)]
    pub fn write(
        &mut self,
        wr_id: u64,
        sge: &Sge,
        remote: RemoteAddr,
        flags: SendFlags,
    ) -> Result<(), PostError> {
        self.gather(MLX5_OPCODE_RDMA_WRITE, wr_id, sge, Some(remote), flags, 0)
    }

    /// RDMA WRITE with immediate `imm` of the gather entry `sge` to `remote`.
    #[inline(always)]
    pub fn write_imm(
        &mut self,
        wr_id: u64,
        sge: &Sge,
        remote: RemoteAddr,
        imm: u32,
        flags: SendFlags,
    ) -> Result<(), PostError> {
        let op = MLX5_OPCODE_RDMA_WRITE_IMM;
        self.gather(op, wr_id, sge, Some(remote), flags, imm)
    }

    /// RDMA WRITE of inline `data` to `remote`.
    #[inline(always)]
    pub fn write_inline(
        &mut self,
        wr_id: u64,
        data: &[u8],
        remote: RemoteAddr,
        flags: SendFlags,
    ) -> Result<(), PostError> {
        self.inline(MLX5_OPCODE_RDMA_WRITE, wr_id, data, Some(remote), flags, 0)
    }

    /// Any other request (READ, atomics, gather lists, several inline parts), through
    /// the general writer, in this batch.
    pub fn post(&mut self, wr: &SendWr<'_>) -> Result<(), PostError> {
        self.general(wr)
    }

    /// Any request: through its typed entry when it has one (SEND, SEND with
    /// immediate, RDMA WRITE, RDMA WRITE with immediate of one gather entry or one
    /// inline part, no datagram address), else [`SendBatch::post`].
    #[inline(always)]
    pub(crate) fn put(&mut self, wr: &SendWr<'_>) -> Result<(), PostError> {
        if wr.ud.is_none() {
            let (id, f) = (wr.wr_id, wr.flags);
            match (wr.op, wr.data) {
                (SendOp::Send, SendData::Gather([sge])) => return self.send(id, sge, f),
                (SendOp::Send, SendData::Inline([p])) => return self.send_inline(id, p, f),
                (SendOp::SendImm { imm }, SendData::Gather([sge])) => {
                    return self.send_imm(id, sge, imm, f)
                }
                (SendOp::SendImm { imm }, SendData::Inline([p])) => {
                    return self.send_imm_inline(id, p, imm, f)
                }
                (SendOp::RdmaWrite { remote }, SendData::Gather([sge])) => {
                    return self.write(id, sge, remote, f)
                }
                (SendOp::RdmaWrite { remote }, SendData::Inline([p])) => {
                    return self.write_inline(id, p, remote, f)
                }
                (SendOp::RdmaWriteImm { remote, imm }, SendData::Gather([sge])) => {
                    return self.write_imm(id, sge, remote, imm, f)
                }
                _ => {}
            }
        }
        self.general(wr)
    }

    /// Whether nothing was written in this batch yet.
    pub fn is_empty(&self) -> bool {
        self.c.is_empty()
    }

    /// The WQE index the next request gets (what a requester CQE of it will name).
    pub fn next_index(&self) -> u16 {
        self.c.next_index()
    }

    /// Publishes the batch: the doorbell record, the QP's counters, then one
    /// doorbell (the BlueFlame copy when the batch is one WQE that fits); nothing
    /// when the batch is empty. Dropping the batch does the same.
    #[inline(always)]
    pub fn ring(self) {
        // No drop glue on this path: the batch is published here, once.
        let mut me = std::mem::ManuallyDrop::new(self);
        let SendBatch { q, c } = &mut *me;
        q.finish(c);
    }

    /// Requests written in this batch so far.
    pub fn count(&self) -> u32 {
        self.c.count()
    }

    /// Discards the batch (`ibv_wr_abort`): nothing written in it reaches the device,
    /// and the send ring's producer goes back to where the batch began, so the next
    /// batch writes over it.
    pub fn abort(self) {
        let mut me = std::mem::ManuallyDrop::new(self);
        let SendBatch { q, c } = &mut *me;
        q.sq.set_cur_post(c.start());
    }

    /// The queue and the cursor (for the entries of other modules, `mw`).
    pub(super) fn parts(&mut self) -> (&mut Queues<B>, &mut ring::SqCursor<Slots<'q>>) {
        (self.q, &mut self.c)
    }

    /// The QP number.
    pub(super) fn qpn(&self) -> u32 {
        self.q.sq.config().qpn
    }

    #[inline(always)]
    fn gather(
        &mut self,
        opcode: u8,
        wr_id: u64,
        sge: &Sge,
        remote: Option<RemoteAddr>,
        flags: SendFlags,
        imm: u32,
    ) -> Result<(), PostError> {
        if self
            .c
            .put_sge::<false>(opcode, wr_id, sge, remote, flags, imm)
        {
            return Ok(());
        }
        let wr = SendWr {
            wr_id,
            op: op_of(opcode, remote, imm),
            data: SendData::Gather(std::slice::from_ref(sge)),
            flags,
            ud: None,
        };
        self.general(&wr)
    }

    /// A request the typed writers did not take: the general writer (with the
    /// queue-full retry of `post_send`), out of line, then the budget placed again
    /// from the room known free.
    #[inline(always)]
    fn general(&mut self, wr: &SendWr<'_>) -> Result<(), PostError> {
        // The cursor does not go out of line (its fields stay in registers): the
        // queue gets the producer counter, and gives it back with the room.
        self.q.sq.sync_from(&self.c);
        let mut out = (Ok(0), 0);
        general(self.q, wr, &mut out);
        let (r, budget) = out;
        self.q
            .sq
            .sync_to(&mut self.c, r.as_ref().ok().copied(), budget);
        r.map(|_| ())
    }

    #[inline(always)]
    fn inline(
        &mut self,
        opcode: u8,
        wr_id: u64,
        data: &[u8],
        remote: Option<RemoteAddr>,
        flags: SendFlags,
        imm: u32,
    ) -> Result<(), PostError> {
        if self
            .c
            .put_inline::<false>(opcode, wr_id, data, remote, flags, imm)
        {
            return Ok(());
        }
        let parts = [data];
        let wr = SendWr {
            wr_id,
            op: op_of(opcode, remote, imm),
            data: SendData::Inline(&parts),
            flags,
            ud: None,
        };
        self.general(&wr)
    }
}

/// The general writer for a batch (the state was checked when it opened): the
/// index it wrote, and the WQEBBs known free after it (completions reclaimed
/// first), the budget the batch continues with, in `out`.
///
/// `extern "C"`: it cannot unwind (a panic in it, which would be a driver bug such
/// as a failed bounds check, aborts the process), so a batch that calls it needs no
/// unwinding path, and the caller's loop does not keep the batch's state in memory
/// for one (with an unwinding path, `t_list16` of `benches/icount.sh` took 1.7
/// instructions more per request).
#[cold]
#[inline(never)]
extern "C" fn general<B: Bus>(
    q: &mut Queues<B>,
    wr: &SendWr<'_>,
    out: &mut (Result<u16, PostError>, u32),
) {
    let r = q.post_send_slow(wr).map(|w| w.index());
    q.sync_sq();
    *out = (r, q.sq.free());
}

/// Publishes a batch dropped without [`SendBatch::ring`] (out of line, so that the
/// drop glue stays small; the cursor goes by value, a copy, so that on the fast path
/// it never leaves registers).
#[cold]
#[inline(never)]
fn publish_dropped<B: Bus>(q: &mut Queues<B>, mut c: ring::SqCursor<Slots<'_>>) {
    q.finish(&mut c);
}

impl<B: Bus> Drop for SendBatch<'_, B> {
    #[inline(always)]
    fn drop(&mut self) {
        if !self.c.is_empty() {
            publish_dropped(self.q, self.c);
        } else {
            // Nothing to publish, but the general writer may have placed the
            // position again (its chunk's end and the rest of the budget are the
            // owner's already: `SqSlots`): saved, so that the three agree.
            self.c.save();
        }
    }
}

/// The [`SendOp`] of a typed entry's opcode (for the general writer).
fn op_of(opcode: u8, remote: Option<RemoteAddr>, imm: u32) -> SendOp {
    match (opcode, remote) {
        (MLX5_OPCODE_SEND_IMM, _) => SendOp::SendImm { imm },
        (MLX5_OPCODE_RDMA_WRITE, Some(remote)) => SendOp::RdmaWrite { remote },
        (MLX5_OPCODE_RDMA_WRITE_IMM, Some(remote)) => SendOp::RdmaWriteImm { remote, imm },
        _ => SendOp::Send,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ferroverbs_hw::datapath::cqe::{make_op_own, Cqe64, MLX5_CQE_REQ};
    use ferroverbs_hw::datapath::uar::uar_bar_offset;
    use ferroverbs_hw::MemBus;

    use super::super::fastpath::{DetachedCq, DetachedQp, DETACHED_UAR};
    use super::super::{BadWr, QpCap, QpState, WorkCompletion};
    use super::*;

    const QPN: u32 = 0x2a5;

    struct Side {
        bus: Arc<MemBus>,
        qp: DetachedQp<MemBus>,
        cq: DetachedCq<MemBus>,
    }

    fn side(cap: &QpCap, blueflame: bool) -> Side {
        let bus = Arc::new(MemBus::new(1 << 16));
        let cq = DetachedCq::new(&bus, 1023).unwrap();
        let mut qp = if blueflame {
            DetachedQp::new(&bus, QPN, cap, false).unwrap()
        } else {
            DetachedQp::new_db_only(&bus, QPN, cap, false).unwrap()
        };
        cq.attach(&qp);
        qp.set_state(QpState::Rts);
        Side { bus, qp, cq }
    }

    /// The device's view of a side: the QP buffer and the UAR page.
    fn image(s: &Side) -> (Vec<u8>, Vec<u8>) {
        (
            s.qp.queue_bytes(),
            s.bus.bar_bytes(uar_bar_offset(DETACHED_UAR), 4096),
        )
    }

    /// One request, in the typed entries' terms.
    #[derive(Clone, Debug)]
    struct Req {
        wr_id: u64,
        /// 0 SEND, 1 SEND with immediate, 2 WRITE, 3 WRITE with immediate.
        kind: u8,
        inline: Option<Vec<u8>>,
        sge: Sge,
        remote: RemoteAddr,
        imm: u32,
        flags: SendFlags,
    }

    impl Req {
        fn wr<'a>(&self, sges: &'a [Sge; 1], parts: &'a [&'a [u8]; 1]) -> SendWr<'a> {
            let op = match self.kind {
                0 => SendOp::Send,
                1 => SendOp::SendImm { imm: self.imm },
                2 => SendOp::RdmaWrite {
                    remote: self.remote,
                },
                _ => SendOp::RdmaWriteImm {
                    remote: self.remote,
                    imm: self.imm,
                },
            };
            let data = match self.inline {
                Some(_) => SendData::Inline(parts),
                None => SendData::Gather(sges),
            };
            SendWr {
                wr_id: self.wr_id,
                op,
                data,
                flags: self.flags,
                ud: None,
            }
        }

        fn post(&self, b: &mut SendBatch<'_, MemBus>) -> Result<(), PostError> {
            let (r, f) = (self.remote, self.flags);
            match (&self.inline, self.kind) {
                (None, 0) => b.send(self.wr_id, &self.sge, f),
                (None, 1) => b.send_imm(self.wr_id, &self.sge, self.imm, f),
                (None, 2) => b.write(self.wr_id, &self.sge, r, f),
                (None, _) => b.write_imm(self.wr_id, &self.sge, r, self.imm, f),
                (Some(d), 0) => b.send_inline(self.wr_id, d, f),
                (Some(d), 1) => b.send_imm_inline(self.wr_id, d, self.imm, f),
                (Some(d), 2) => b.write_inline(self.wr_id, d, r, f),
                (Some(d), _) => {
                    // No typed entry: the general writer inside the batch.
                    let sges = [self.sge];
                    let parts = [d.as_slice()];
                    b.post(&self.wr(&sges, &parts))
                }
            }
        }
    }

    /// A deterministic request mix: every typed shape, empty gather entries and
    /// inline payloads, payloads beyond `max_inline`, every flag combination.
    fn requests(n: usize, max_inline: usize, seed: u64) -> Vec<Req> {
        let mut x = seed;
        let mut next = move || {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            x >> 33
        };
        (0..n)
            .map(|i| {
                let r = next();
                let inline = if r % 3 == 0 {
                    let len = (next() as usize) % (max_inline + 9);
                    Some((0..len).map(|k| (k as u8) ^ (i as u8)).collect())
                } else {
                    None
                };
                let flags = next() as u8 & 7;
                Req {
                    wr_id: 1000 + i as u64,
                    kind: (next() % 4) as u8,
                    inline,
                    sge: Sge {
                        addr: next() << 12 | 0x10,
                        length: if next() % 9 == 0 { 0 } else { next() as u32 },
                        lkey: next() as u32,
                    },
                    remote: RemoteAddr {
                        addr: next() << 20,
                        rkey: next() as u32,
                    },
                    imm: next() as u32,
                    flags: [
                        SendFlags::NONE,
                        SendFlags::SIGNALED,
                        SendFlags::SOLICITED,
                        SendFlags::SIGNALED | SendFlags::SOLICITED,
                        SendFlags::FENCE,
                        SendFlags::FENCE | SendFlags::SIGNALED,
                        SendFlags::FENCE | SendFlags::SOLICITED,
                        SendFlags::FENCE | SendFlags::SIGNALED | SendFlags::SOLICITED,
                    ][usize::from(flags)],
                }
            })
            .collect()
    }

    /// Posts `reqs` in batches of 1..=5 on `a` through the general writer
    /// (`post_send_general`, one list per batch), on `b` with the typed entries (one
    /// batch each) and on `c` with `post_send` (which routes them through the typed
    /// writers), retiring each batch's last WQE on all three, and compares after
    /// every batch: the QP buffers, the UAR pages (doorbell or BlueFlame copy), the
    /// results, the counters and the work completions.
    fn compare(cap: QpCap, blueflame: bool, reqs: &[Req]) {
        let (mut a, mut b) = (side(&cap, blueflame), side(&cap, blueflame));
        let mut c = side(&cap, blueflame);
        let mut i = 0;
        let mut batch_no = 0;
        while i < reqs.len() {
            let n = (1 + batch_no % 5).min(reqs.len() - i);
            batch_no += 1;
            let chunk = &reqs[i..i + n];
            i += n;
            // The general path: one list.
            let sges: Vec<[Sge; 1]> = chunk.iter().map(|r| [r.sge]).collect();
            let datas: Vec<[&[u8]; 1]> = chunk
                .iter()
                .map(|r| [r.inline.as_deref().unwrap_or(&[])])
                .collect();
            let wrs: Vec<SendWr<'_>> = chunk
                .iter()
                .enumerate()
                .map(|(k, r)| r.wr(&sges[k], &datas[k]))
                .collect();
            let mut indices = Vec::new();
            let ra = a.qp.post_send_general(&wrs);
            let rc = c.qp.post_send(&wrs);
            assert_eq!(ra, rc, "post_send's results of batch {batch_no}: {chunk:?}");
            assert_eq!(a.qp.next_send_index(), c.qp.next_send_index());
            assert!(
                image(&a) == image(&c),
                "post_send's bytes after batch {batch_no}: {chunk:?}"
            );
            assert_eq!(a.qp.sq_depth_hwm(), c.qp.sq_depth_hwm());
            // Which WQEs went in (their indices), for the retiring CQE.
            let posted = match ra {
                Ok(()) => n,
                Err(e) => e.index,
            };
            // The typed path: one batch, stopping at the first error as post_send does;
            // a lone SEND every other time through the one-request entries
            // (`send`, `send_inline`: a batch of one, rung).
            let mut rb = Ok(());
            let one = n == 1 && chunk[0].kind == 0 && batch_no % 2 == 0;
            if one {
                let r = &chunk[0];
                indices.push(b.qp.next_send_index());
                let res = match &r.inline {
                    None => b.qp.send(r.wr_id, &r.sge, r.flags),
                    Some(d) => b.qp.send_inline(r.wr_id, d, r.flags),
                };
                if let Err(e) = res {
                    rb = Err(BadWr { index: 0, error: e });
                }
            } else {
                let mut batch = b.qp.post().unwrap();
                for (k, r) in chunk.iter().enumerate() {
                    indices.push(batch.next_index());
                    if let Err(e) = r.post(&mut batch) {
                        rb = Err(BadWr { index: k, error: e });
                        break;
                    }
                }
                batch.ring();
            }
            assert_eq!(ra, rb, "results of batch {batch_no}: {chunk:?}");
            assert_eq!(
                a.qp.next_send_index(),
                b.qp.next_send_index(),
                "producer index after batch {batch_no}"
            );
            assert!(
                image(&a) == image(&b),
                "bytes after batch {batch_no}: {chunk:?}"
            );
            if posted > 0 {
                let last = indices[posted - 1];
                for s in [&mut a, &mut b, &mut c] {
                    s.cq.produce_send(QPN, last, opcode_of(&chunk[posted - 1]));
                }
                let wa = a.cq.poll_one();
                let mut wb = [WorkCompletion::default(); 1];
                assert_eq!(b.cq.poll(&mut wb), 1);
                assert_eq!(wa, Some(wb[0]));
                let mut wc = [WorkCompletion::default(); 3];
                assert_eq!(c.cq.poll(&mut wc), 1);
                assert_eq!(wa, Some(wc[0]));
                assert_eq!(wa.unwrap().wr_id, chunk[posted - 1].wr_id);
            }
        }
    }

    fn opcode_of(r: &Req) -> u8 {
        [
            MLX5_OPCODE_SEND,
            MLX5_OPCODE_SEND_IMM,
            MLX5_OPCODE_RDMA_WRITE,
            MLX5_OPCODE_RDMA_WRITE_IMM,
        ][usize::from(r.kind)]
    }

    /// `post_send` routes each request by its shape: lists mixing the typed shapes
    /// with the others (RDMA READ, both atomics, SEND with invalidate, gather lists
    /// of two entries, inline data in two parts or none, empty gather entries,
    /// payloads beyond `max_inline`) give, list after list, the bytes, doorbells,
    /// results (the failed request's index and error), producer index, depth mark
    /// and completions of the general writer; so do lists posted in a state that
    /// forbids sending, and on a UD QP (no typed entries: address vectors).
    #[test]
    fn post_send_of_every_shape_is_the_general_writer() {
        let cap = QpCap {
            max_send_wr: 16,
            max_send_sge: 2,
            max_inline_data: 64,
            ..QpCap::default()
        };
        for blueflame in [true, false] {
            let (mut a, mut c) = (side(&cap, blueflame), side(&cap, blueflame));
            let max_inline = a.qp.cap().max_inline_data as usize;
            let payload: Vec<u8> = (0..max_inline + 8).map(|k| k as u8 ^ 0x5a).collect();
            let mut x = 0x853c_49e6_748f_ea9b_u64;
            let mut next = |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            for round in 0..4000u32 {
                if round % 997 == 500 {
                    // A state that forbids sending, then back.
                    for s in [&mut a, &mut c] {
                        s.qp.set_state(QpState::Init);
                    }
                }
                if round % 997 == 510 {
                    for s in [&mut a, &mut c] {
                        s.qp.set_state(QpState::Rts);
                    }
                }
                let n = 1 + next(5) as usize;
                let remote = RemoteAddr {
                    addr: next(1 << 40) << 3,
                    rkey: next(1 << 32) as u32,
                };
                let sges: Vec<[Sge; 2]> = (0..n)
                    .map(|_| {
                        let mut e = || Sge {
                            addr: next(1 << 40),
                            length: if next(6) == 0 {
                                0
                            } else {
                                1 + next(4096) as u32
                            },
                            lkey: next(1 << 24) as u32,
                        };
                        [e(), e()]
                    })
                    .collect();
                let lens: Vec<(usize, usize)> = (0..n)
                    .map(|_| {
                        let l = next(max_inline as u64 + 9) as usize;
                        (l, next(l as u64 + 1) as usize)
                    })
                    .collect();
                let parts: Vec<[&[u8]; 2]> = lens
                    .iter()
                    .map(|&(l, k)| [&payload[..k], &payload[k..l]])
                    .collect();
                let wrs: Vec<SendWr<'_>> = (0..n)
                    .map(|k| {
                        let (g1, g2) = (&sges[k][..1], &sges[k][..]);
                        let (p1, p2) = (&parts[k][1..], &parts[k][..]);
                        let imm = next(1 << 32) as u32;
                        let mut w = match next(16) {
                            0 => SendWr::send(k as u64, g1),
                            1 => SendWr::send(k as u64, g2),
                            2 => SendWr::send_inline(k as u64, p1),
                            3 => SendWr::send_inline(k as u64, p2),
                            4 => SendWr::send_inline(k as u64, &[]),
                            5 => SendWr::send_with_imm(k as u64, g1, imm),
                            6 => SendWr::send_with_inv(k as u64, g1, imm),
                            7 => SendWr::rdma_write(k as u64, g1, remote),
                            8 => SendWr::rdma_write(k as u64, g2, remote),
                            9 => SendWr::rdma_write_inline(k as u64, p1, remote),
                            10 => SendWr::rdma_write_with_imm(k as u64, g1, remote, imm),
                            11 => SendWr::rdma_read(k as u64, g1, remote),
                            12 => SendWr::atomic_cmp_swp(k as u64, g1, remote, 7, 9),
                            13 => SendWr::atomic_fetch_add(k as u64, g1, remote, 3),
                            14 => SendWr {
                                op: SendOp::SendImm { imm },
                                ..SendWr::send_inline(k as u64, p1)
                            },
                            _ => SendWr {
                                op: SendOp::RdmaWriteImm { remote, imm },
                                ..SendWr::rdma_write_inline(k as u64, p1, remote)
                            },
                        };
                        w.flags = [
                            SendFlags::NONE,
                            SendFlags::SIGNALED,
                            SendFlags::SOLICITED | SendFlags::FENCE,
                            SendFlags::SIGNALED | SendFlags::FENCE,
                        ][next(4) as usize];
                        w
                    })
                    .collect();
                let start = a.qp.next_send_index();
                let ra = a.qp.post_send_general(&wrs);
                let rc = c.qp.post_send(&wrs);
                assert_eq!(ra, rc, "round {round}: {wrs:?}");
                assert_eq!(a.qp.next_send_index(), c.qp.next_send_index());
                assert!(image(&a) == image(&c), "bytes after round {round}: {wrs:?}");
                assert_eq!(a.qp.sq_depth_hwm(), c.qp.sq_depth_hwm(), "round {round}");
                // Retire everything posted (the last WQE's CQE), sometimes.
                let end = a.qp.next_send_index();
                if end != start && (next(3) != 0 || end.wrapping_sub(start) > 8) {
                    let posted = match ra {
                        Ok(()) => n,
                        Err(e) => e.index,
                    };
                    let op = wrs[posted - 1].op.opcode();
                    // The last WQE's index: read back from the general side's ring.
                    let last = last_index(&a, start, end);
                    for s in [&mut a, &mut c] {
                        s.cq.produce_send(QPN, last, op);
                    }
                    let mut wc = [WorkCompletion::default(); 2];
                    let (na, nc) = (a.cq.poll(&mut wc[..1]), c.cq.poll(&mut wc[1..]));
                    assert_eq!((na, nc), (1, 1), "round {round}");
                    assert_eq!(wc[0], wc[1], "round {round}");
                }
            }
        }
        // A UD QP: no typed entries; a send without an address fails the same way.
        let bus = Arc::new(MemBus::new(1 << 16));
        let mut ud = DetachedQp::new(&bus, QPN, &QpCap::default(), false).unwrap();
        ud.set_qp_type(crate::ring::QpType::Ud);
        ud.set_state(QpState::Rts);
        let sge = [Sge {
            addr: 0x1000,
            length: 8,
            lkey: 1,
        }];
        let e = ud.post_send(&[SendWr::send(1, &sge)]).unwrap_err();
        assert_eq!(
            e,
            BadWr {
                index: 0,
                error: PostError::AddressMismatch
            }
        );
        assert_eq!(ud.next_send_index(), 0);
    }

    /// The index of the last WQE between `start` and `end` on `s`'s ring (walked by
    /// the DS of each control segment).
    fn last_index(s: &Side, start: u16, end: u16) -> u16 {
        let bytes = s.qp.queue_bytes();
        let (sq_off, wqebbs) = s.qp.sq_layout();
        let mut at = start;
        loop {
            let slot = usize::from(at) & (wqebbs - 1);
            let off = sq_off + slot * 64;
            let ds = bytes[off + 7] & 0x3f;
            let next = at.wrapping_add(u16::from(ds).div_ceil(4));
            if next == end {
                return at;
            }
            at = next;
        }
    }

    #[test]
    fn typed_entries_write_the_bytes_of_post_send() {
        // A small ring (wrap-around many times, inline WQEs crossing the ring end) and
        // a larger one; BlueFlame and the 8-byte doorbell.
        for (cap, seed) in [
            (
                QpCap {
                    max_send_wr: 8,
                    max_inline_data: 64,
                    ..QpCap::default()
                },
                1,
            ),
            (
                QpCap {
                    max_send_wr: 64,
                    max_send_sge: 2,
                    max_inline_data: 200,
                    ..QpCap::default()
                },
                2,
            ),
        ] {
            let max_inline = side(&cap, true).qp.cap().max_inline_data as usize;
            let reqs = requests(3000, max_inline, seed);
            compare(cap, true, &reqs);
            compare(cap, false, &reqs);
        }
    }

    /// A send ring of more than 256 WQEBBs: the typed entries' position stops at
    /// every multiple of 256 WQE indexes (the control head moves on by one add, which
    /// must not carry out of the index's low byte) and goes on with the rest of the
    /// budget there; the bytes, results and completions stay those of `post_send`,
    /// with WQEs of every size crossing those multiples in the middle of batches.
    /// Lists of SENDs of one gather entry, the run `post_send` writes in one loop
    /// ([`ring::SqCursor::put_sends`]): lists of 1 to 40 (longer than the ring's
    /// room, and across its end and 256-index chunks) with every flag combination,
    /// now and then an empty gather entry or another shape in the middle, on a ring
    /// that fills up (retired only sometimes): after every list the results (the
    /// index and error of a full ring), the bytes, the producer index, the depth
    /// mark and the completions are those of the general writer.
    #[test]
    fn post_send_runs_of_sends_are_the_general_writer() {
        let cap = QpCap {
            max_send_wr: 64,
            ..QpCap::default()
        };
        for blueflame in [true, false] {
            let (mut a, mut c) = (side(&cap, blueflame), side(&cap, blueflame));
            let mut x = 0x2545_f491_4f6c_dd1d_u64;
            let mut next = |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            let mut errors = 0;
            for round in 0..3000u32 {
                let n = 1 + next(40) as usize;
                let sges: Vec<[Sge; 1]> = (0..n)
                    .map(|_| {
                        [Sge {
                            addr: next(1 << 40),
                            length: if next(25) == 0 {
                                0
                            } else {
                                1 + next(1 << 20) as u32
                            },
                            lkey: next(1 << 24) as u32,
                        }]
                    })
                    .collect();
                let wrs: Vec<SendWr<'_>> = (0..n)
                    .map(|k| {
                        let id = u64::from(round) << 8 | k as u64;
                        let w = match next(25) {
                            0 => SendWr::send_with_imm(id, &sges[k], 0x1234),
                            _ => SendWr::send(id, &sges[k]),
                        };
                        w.with_flags(SendFlags::from_verbs(next(8) as u32))
                    })
                    .collect();
                let start = a.qp.next_send_index();
                let ra = a.qp.post_send_general(&wrs);
                let rc = c.qp.post_send(&wrs);
                assert_eq!(ra, rc, "round {round}: {wrs:?}");
                errors += usize::from(ra.is_err());
                assert_eq!(
                    a.qp.next_send_index(),
                    c.qp.next_send_index(),
                    "round {round}"
                );
                assert!(image(&a) == image(&c), "bytes after round {round}: {wrs:?}");
                assert_eq!(a.qp.sq_depth_hwm(), c.qp.sq_depth_hwm(), "round {round}");
                let end = a.qp.next_send_index();
                if end != start && next(4) != 0 {
                    let posted = match ra {
                        Ok(()) => n,
                        Err(e) => e.index,
                    };
                    let op = wrs[posted - 1].op.opcode();
                    let last = last_index(&a, start, end);
                    for s in [&mut a, &mut c] {
                        s.cq.produce_send(QPN, last, op);
                    }
                    let mut wc = [WorkCompletion::default(); 2];
                    let (na, nc) = (a.cq.poll(&mut wc[..1]), c.cq.poll(&mut wc[1..]));
                    assert_eq!((na, nc), (1, 1), "round {round}");
                    assert_eq!(wc[0], wc[1], "round {round}");
                }
            }
            assert!(errors > 100, "the ring filled up in {errors} rounds only");
        }
    }

    #[test]
    fn typed_entries_write_the_bytes_of_post_send_across_256_index_chunks() {
        let cap = QpCap {
            max_send_wr: 300,
            max_inline_data: 200,
            ..QpCap::default()
        };
        let s = side(&cap, false);
        let wqebbs = s.qp.queue_bytes().len() / 64;
        assert!(wqebbs > 512, "a ring of more than two chunks: {wqebbs}");
        let max_inline = s.qp.cap().max_inline_data as usize;
        let reqs = requests(3000, max_inline, 3);
        compare(cap, true, &reqs);
        compare(cap, false, &reqs);
    }

    /// Lists of up to 16 typed SENDs (gather entries and inline payloads) on a ring
    /// of more than 256 WQEBBs until the 16-bit WQE index wrapped: after every list
    /// the bytes (QP buffer, doorbell register page), the producer index and the
    /// completion are those of the same list through `post_send`.
    #[test]
    fn typed_lists_write_the_bytes_of_post_send_across_the_index_wrap() {
        let cap = QpCap {
            max_send_wr: 256,
            max_inline_data: 64,
            ..QpCap::default()
        };
        let (mut a, mut b) = (side(&cap, false), side(&cap, false));
        let mut x = 11u64;
        let mut next = move |n: u64| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) % n
        };
        let payload: Vec<u8> = (0..64u8).map(|k| k ^ 0xa5).collect();
        // More than 2^16 WQEBBs, so the index wraps (at least once) in the middle of
        // the run.
        let mut total = 0u32;
        let mut lists = 0u32;
        while total < 70_000 {
            let n = 1 + next(16) as usize;
            let reqs: Vec<(u64, Option<usize>, Sge)> = (0..n)
                .map(|k| {
                    let sge = Sge {
                        addr: next(1 << 30) << 6,
                        length: 1 + next(1 << 20) as u32,
                        lkey: next(1 << 24) as u32,
                    };
                    let inline = (next(4) == 0).then(|| 1 + next(64) as usize);
                    (u64::from(lists) << 8 | k as u64, inline, sge)
                })
                .collect();
            let sges: Vec<[Sge; 1]> = reqs.iter().map(|r| [r.2]).collect();
            let parts: Vec<[&[u8]; 1]> = reqs
                .iter()
                .map(|r| [&payload[..r.1.unwrap_or(0)]])
                .collect();
            let wrs: Vec<SendWr<'_>> = reqs
                .iter()
                .enumerate()
                .map(|(k, r)| {
                    let w = match r.1 {
                        None => SendWr::send(r.0, &sges[k]),
                        Some(_) => SendWr::send_inline(r.0, &parts[k]),
                    };
                    if k + 1 == n {
                        w.signaled()
                    } else {
                        w
                    }
                })
                .collect();
            let start = a.qp.next_send_index();
            assert_eq!(start, b.qp.next_send_index(), "list {lists}");
            a.qp.post_send_general(&wrs).unwrap();
            let mut batch = b.qp.post().unwrap();
            let mut last = 0;
            for (k, r) in reqs.iter().enumerate() {
                let f = if k + 1 == n {
                    SendFlags::SIGNALED
                } else {
                    SendFlags::NONE
                };
                last = batch.next_index();
                match r.1 {
                    None => batch.send(r.0, &r.2, f).unwrap(),
                    Some(len) => batch.send_inline(r.0, &payload[..len], f).unwrap(),
                }
            }
            batch.ring();
            let end = a.qp.next_send_index();
            assert_eq!(end, b.qp.next_send_index(), "list {lists}");
            assert!(image(&a) == image(&b), "bytes after list {lists}");
            assert_eq!(b.qp.send_doorbell_record(), u32::from(end), "list {lists}");
            total += u32::from(end.wrapping_sub(start));
            for s in [&mut a, &mut b] {
                s.cq.produce_send(QPN, last, MLX5_OPCODE_SEND);
            }
            let (wa, wb) = (a.cq.poll_one(), b.cq.poll_one());
            assert_eq!(wa, wb, "list {lists}");
            assert_eq!(wb.map(|w| w.wr_id), Some(reqs[n - 1].0));
            lists += 1;
        }
    }

    #[test]
    fn a_batch_of_one_inline_send_rings_blueflame_and_a_list_the_doorbell() {
        let mut s = side(&QpCap::default(), true);
        let bf = uar_bar_offset(DETACHED_UAR) + 0xa00; // BlueFlame register 1
        let mut b = s.qp.post().unwrap();
        assert!(b.is_empty());
        b.send_inline(1, &[0xee; 64], SendFlags::SIGNALED).unwrap();
        b.ring();
        // The whole WQE (2 WQEBBs) went to the register: the payload's tail too.
        assert_eq!(s.bus.bar_bytes(bf + 3, 1), [MLX5_OPCODE_SEND]);
        assert_eq!(
            s.bus.bar_bytes(bf + 16, 4),
            (64u32 | 0x8000_0000).to_be_bytes()
        );
        assert_eq!(s.bus.bar_bytes(bf + 20 + 63, 1), [0xee]);
        // Two WQEs: the 8-byte doorbell (second half of the register, alternating).
        let mut b = s.qp.post().unwrap();
        let sge = Sge {
            addr: 0x1000,
            length: 8,
            lkey: 5,
        };
        b.send(2, &sge, SendFlags::NONE).unwrap();
        let last = b.next_index();
        b.send(3, &sge, SendFlags::SIGNALED).unwrap();
        b.ring();
        let head = s.bus.bar_bytes(bf + 0x100, 8);
        assert_eq!(
            head,
            [
                0,
                (last >> 8) as u8,
                last as u8,
                MLX5_OPCODE_SEND,
                (QPN >> 16) as u8,
                (QPN >> 8) as u8,
                QPN as u8,
                2
            ]
        );
        // The doorbell record carries the producer counter.
        assert_eq!(
            s.qp.send_doorbell_record(),
            u32::from(s.qp.next_send_index())
        );
        assert_eq!(s.qp.next_send_index(), last + 1);
    }

    #[test]
    fn a_dropped_batch_is_published_and_errors_leave_the_ring_intact() {
        let cap = QpCap {
            max_send_wr: 4,
            ..QpCap::default()
        };
        let mut s = side(&cap, false);
        let sge = Sge {
            addr: 0x1000,
            length: 8,
            lkey: 5,
        };
        // Fill the ring with one-WQEBB SENDs through a batch that is dropped on `?`.
        let fill = |qp: &mut DetachedQp<MemBus>| -> Result<u32, PostError> {
            let mut b = qp.post()?;
            let mut n = 0u32;
            loop {
                b.send(u64::from(n), &sge, SendFlags::NONE)?;
                n += 1;
            }
        };
        let before = s.qp.queue_bytes();
        let err = fill(&mut s.qp).unwrap_err();
        let posted = u32::from(s.qp.next_send_index());
        assert!(matches!(err, PostError::QueueFull { needed: 1, free: 0 }));
        // Published on drop: the doorbell record has every WQE posted.
        let after = s.qp.queue_bytes();
        assert_eq!(s.qp.send_doorbell_record(), posted);
        assert!(posted > 0);
        assert_ne!(before, after);
        // Full: the next request is refused and writes nothing.
        let mut b = s.qp.post().unwrap();
        assert!(matches!(
            b.send_inline(9, &[1; 8], SendFlags::SIGNALED),
            Err(PostError::QueueFull { .. })
        ));
        drop(b);
        assert_eq!(s.qp.queue_bytes(), after);
        // Completing the last frees the ring; the batch retries after reclaiming.
        s.cq.produce_send(QPN, (posted - 1) as u16, MLX5_OPCODE_SEND);
        assert_eq!(
            s.cq.poll_one().map(|w| w.wr_id),
            Some(u64::from(posted - 1))
        );
        let mut b = s.qp.post().unwrap();
        b.send(100, &sge, SendFlags::SIGNALED).unwrap();
        b.ring();
        assert_eq!(u32::from(s.qp.next_send_index()), posted + 1);
        // Inline data beyond max_inline_data: the error of post_send.
        let max = s.qp.cap().max_inline_data as usize;
        let mut b = s.qp.post().unwrap();
        assert_eq!(
            b.send_inline(1, &vec![0; max + 1], SendFlags::NONE),
            Err(PostError::InlineTooLarge {
                len: max + 1,
                max: max as u32
            })
        );
    }

    /// The depth high-water mark, kept at each doorbell with the previous post's last
    /// WQE as a shortcut, against a model: the depth after each post is the producer
    /// counter minus the end of the last completed WQE; and the posted count. Batches
    /// of 1-4 requests of 1-4 WQEBBs (inline payloads) through both entries,
    /// completions of the previous post's last WQE (the shortcut), of an earlier one,
    /// or none.
    #[test]
    fn the_depth_high_water_mark_is_exact() {
        for blueflame in [true, false] {
            the_depth_high_water_mark_is_exact_on(blueflame);
        }
    }

    fn the_depth_high_water_mark_is_exact_on(blueflame: bool) {
        let cap = QpCap {
            max_send_wr: 64,
            max_inline_data: 200,
            ..QpCap::default()
        };
        let mut s = side(&cap, blueflame);
        let mut x = 7u64;
        let mut next = move |n: u64| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) % n
        };
        let sge = Sge {
            addr: 0x1000,
            length: 8,
            lkey: 5,
        };
        let payload = [0x3c; 200];
        // Outstanding WQEs (index, end), oldest first; the end of the last completed.
        let mut outstanding: Vec<(u16, u16)> = Vec::new();
        let mut tail = 0u16;
        let mut hwm = 0u16;
        let mut posted = 0u64;
        for round in 0..2000u32 {
            // Room: keep at least 16 WQEBBs free (4 requests of up to 4 WQEBBs).
            while s.qp.next_send_index().wrapping_sub(tail) > 64 - 16 {
                let (index, end) = outstanding.remove(0);
                let k = next(outstanding.len() as u64 + 1) as usize;
                let (index, end) = if k == 0 {
                    (index, end)
                } else {
                    outstanding.drain(..k).next_back().unwrap()
                };
                s.cq.produce_send(QPN, index, MLX5_OPCODE_SEND);
                assert!(s.cq.poll_one().is_some());
                tail = end;
            }
            let n = 1 + next(4) as usize;
            let lens: Vec<usize> = (0..n)
                .map(|_| [0, 10, 60, 120, 190][next(5) as usize])
                .collect();
            if round % 3 == 0 {
                // post_send, one list.
                let parts: Vec<[&[u8]; 1]> = lens.iter().map(|&l| [&payload[..l]]).collect();
                let sges = [sge];
                let wrs: Vec<SendWr<'_>> = lens
                    .iter()
                    .enumerate()
                    .map(|(k, &l)| {
                        if l == 0 {
                            SendWr::send(k as u64, &sges)
                        } else {
                            SendWr::send_inline(k as u64, &parts[k])
                        }
                    })
                    .collect();
                // The WQE ends, from the sizes the general writer gives them.
                let mut at = s.qp.next_send_index();
                for &l in &lens {
                    let ds = if l == 0 { 2 } else { 1 + inline_ds_of(l) };
                    let end = at.wrapping_add(ds.div_ceil(4));
                    outstanding.push((at, end));
                    at = end;
                }
                s.qp.post_send(&wrs).unwrap();
                assert_eq!(s.qp.next_send_index(), at);
            } else if n == 1 && lens[0] > 0 && round % 3 == 1 {
                // The one-request inline entry.
                let at = s.qp.next_send_index();
                s.qp.send_inline(0, &payload[..lens[0]], SendFlags::NONE)
                    .unwrap();
                outstanding.push((at, s.qp.next_send_index()));
            } else {
                let mut b = s.qp.post().unwrap();
                for (k, &l) in lens.iter().enumerate() {
                    let at = b.next_index();
                    if l == 0 {
                        b.send(k as u64, &sge, SendFlags::NONE).unwrap();
                    } else {
                        b.send_inline(k as u64, &payload[..l], SendFlags::NONE)
                            .unwrap();
                    }
                    outstanding.push((at, b.next_index()));
                }
                b.ring();
            }
            hwm = hwm.max(s.qp.next_send_index().wrapping_sub(tail));
            assert_eq!(s.qp.sq_depth_hwm(), u32::from(hwm), "round {round}");
            // The posted count: one per WR, whichever entry and path posted it.
            posted += n as u64;
            assert_eq!(s.qp.parts().0.posted, posted, "round {round}");
            // Sometimes complete the last WQE of this post (the next post then takes
            // the shortcut), sometimes an earlier one, sometimes nothing.
            match next(3) {
                0 => {
                    let (index, end) = *outstanding.last().unwrap();
                    s.cq.produce_send(QPN, index, MLX5_OPCODE_SEND);
                    assert!(s.cq.poll_one().is_some());
                    outstanding.clear();
                    tail = end;
                }
                1 if outstanding.len() > 1 => {
                    let (index, end) = outstanding.remove(0);
                    s.cq.produce_send(QPN, index, MLX5_OPCODE_SEND);
                    assert!(s.cq.poll_one().is_some());
                    tail = end;
                }
                _ => {}
            }
        }
        assert!(hwm > 20, "the mark moved: {hwm}");
    }

    fn inline_ds_of(len: usize) -> u16 {
        ferroverbs_hw::datapath::wqe::inline_ds(len) as u16
    }

    #[test]
    fn posting_outside_rts_is_refused() {
        for blueflame in [true, false] {
            posting_outside_rts_is_refused_on(blueflame);
        }
    }

    /// The one-request inline entry on a QP without BlueFlame (its own straight path
    /// once the depth mark covers the WQE): a full ring refuses with `QueueFull` and
    /// leaves the QP buffer and the doorbell record as they were; completions free
    /// it again; the doorbell alternates between the register's halves as
    /// `post_send`'s does; inline data longer than the QP takes is refused.
    #[test]
    fn one_request_inline_fills_and_refuses_like_a_batch() {
        let cap = QpCap {
            max_send_wr: 16,
            max_inline_data: 64,
            ..QpCap::default()
        };
        let mut s = side(&cap, false);
        let bf = uar_bar_offset(DETACHED_UAR) + 0xa00; // BlueFlame register 1
        let payload = [0x77u8; 64];
        let mut posted = Vec::new();
        let err = loop {
            let at = s.qp.next_send_index();
            match s
                .qp
                .send_inline(posted.len() as u64, &payload, SendFlags::SIGNALED)
            {
                Ok(()) => posted.push(at),
                Err(e) => break e,
            }
            // Each doorbell is the WQE's first 8 bytes, on alternating halves.
            let half = if posted.len() % 2 == 1 { 0 } else { 0x100 };
            let head = s.bus.bar_bytes(bf + half, 8);
            assert_eq!(&head[1..3], &at.to_be_bytes(), "post {}", posted.len());
            assert_eq!(head[7], 1 + 5, "DS of a 64-byte inline SEND");
        };
        assert!(
            matches!(err, PostError::QueueFull { needed: 2, free: 0 }),
            "{err:?}"
        );
        // At least the granted number of the largest requests fit.
        assert!(
            posted.len() as u32 >= s.qp.cap().max_send_wr,
            "{}",
            posted.len()
        );
        let before = (s.qp.queue_bytes(), s.qp.send_doorbell_record());
        assert!(s.qp.send_inline(99, &payload, SendFlags::NONE).is_err());
        assert_eq!((s.qp.queue_bytes(), s.qp.send_doorbell_record()), before);
        // Completing the last frees everything; posting goes on across the ring end.
        let last = *posted.last().unwrap();
        s.cq.produce_send(QPN, last, MLX5_OPCODE_SEND);
        assert_eq!(
            s.cq.poll_one().map(|w| w.wr_id),
            Some(posted.len() as u64 - 1)
        );
        for k in 0..3 * posted.len() as u64 {
            let at = s.qp.next_send_index();
            s.qp.send_inline(
                1000 + k,
                &payload[..(k as usize % 64) + 1],
                SendFlags::SIGNALED,
            )
            .unwrap();
            s.cq.produce_send(QPN, at, MLX5_OPCODE_SEND);
            assert_eq!(s.cq.poll_one().map(|w| w.wr_id), Some(1000 + k));
            assert_eq!(
                s.qp.send_doorbell_record(),
                u32::from(s.qp.next_send_index())
            );
        }
        let max = s.qp.cap().max_inline_data as usize;
        let before = s.qp.queue_bytes();
        assert_eq!(
            s.qp.send_inline(1, &vec![0; max + 1], SendFlags::NONE),
            Err(PostError::InlineTooLarge {
                len: max + 1,
                max: max as u32
            })
        );
        assert_eq!(s.qp.queue_bytes(), before);
    }

    fn posting_outside_rts_is_refused_on(blueflame: bool) {
        let mut s = side(&QpCap::default(), blueflame);
        let sge = Sge {
            addr: 0x1000,
            length: 8,
            lkey: 5,
        };
        // In RTS the post budget is placed; a state change closes it again, and
        // every entry sees the new state.
        s.qp.send(1, &sge, SendFlags::NONE).unwrap();
        for state in [QpState::Init, QpState::Reset, QpState::Rtr] {
            s.qp.set_state(state);
            let before = s.qp.queue_bytes();
            let refused = PostError::InvalidState { state };
            assert_eq!(s.qp.post().err(), Some(refused));
            assert_eq!(s.qp.send(2, &sge, SendFlags::NONE), Err(refused));
            assert_eq!(s.qp.send_inline(3, b"abc", SendFlags::NONE), Err(refused));
            assert_eq!(s.qp.queue_bytes(), before);
        }
        // ERR (and SQE, SQD) take posts, which the device flushes.
        for state in [QpState::Err, QpState::Rts] {
            s.qp.set_state(state);
            s.qp.send_inline(4, b"abc", SendFlags::NONE).unwrap();
            s.qp.post().unwrap().send(5, &sge, SendFlags::NONE).unwrap();
        }
    }

    fn zeroed() -> Cqe64 {
        zerocopy::transmute!([0u8; 64])
    }

    #[test]
    fn poll_one_reports_what_poll_reports() {
        use ferroverbs_hw::datapath::cqe::{CqeSyndrome, MLX5_CQE_REQ_ERR, MLX5_CQE_RESP_SEND_IMM};
        // Two identical CQs over a small ring (wrap-around), one polled with
        // `poll` one entry at a time, one with `poll_one`; a mix of requester,
        // responder, error CQEs and CQEs of an unknown QP.
        let cap = QpCap::default();
        let (mut a, mut b) = (side(&cap, true), side(&cap, true));
        let mut a_cq = DetachedCq::new(&a.bus, 7).unwrap();
        let mut b_cq = DetachedCq::new(&b.bus, 7).unwrap();
        a_cq.attach(&a.qp);
        b_cq.attach(&b.qp);
        let sge = [Sge {
            addr: 0x1000,
            length: 8,
            lkey: 5,
        }];
        let recv = [super::super::RecvWr::new(77, &sge)];
        for round in 0..200u32 {
            let kind = round % 5;
            let mut cqe = zeroed();
            match kind {
                0 | 1 => {
                    let idx = a.qp.next_send_index();
                    let op = [MLX5_OPCODE_SEND, MLX5_OPCODE_RDMA_WRITE_IMM][kind as usize];
                    for s in [&mut a, &mut b] {
                        let mut bt = s.qp.post().unwrap();
                        bt.send(u64::from(round), &sge[0], SendFlags::SIGNALED)
                            .unwrap();
                        bt.ring();
                    }
                    cqe.set_sop_drop_qpn(op, QPN);
                    cqe.wqe_counter.set(idx);
                    cqe.byte_cnt.set(round);
                    cqe.op_own = make_op_own(MLX5_CQE_REQ, 0, false, 0);
                }
                2 => {
                    let idx = a.qp.next_recv_index();
                    a.qp.post_recv(&recv).unwrap();
                    b.qp.post_recv(&recv).unwrap();
                    cqe.set_sop_drop_qpn(0, QPN);
                    cqe.wqe_counter.set(idx);
                    cqe.byte_cnt.set(round);
                    cqe.imm_inval_pkey.set(round ^ 0x5555);
                    cqe.op_own = make_op_own(MLX5_CQE_RESP_SEND_IMM, 0, false, 0);
                }
                3 => {
                    let idx = a.qp.next_send_index();
                    for s in [&mut a, &mut b] {
                        let mut bt = s.qp.post().unwrap();
                        bt.send(u64::from(round), &sge[0], SendFlags::SIGNALED)
                            .unwrap();
                        bt.ring();
                    }
                    cqe.set_sop_drop_qpn(MLX5_OPCODE_SEND, QPN);
                    cqe.wqe_counter.set(idx);
                    {
                        let b = zerocopy::IntoBytes::as_mut_bytes(&mut cqe);
                        b[54] = 0x88;
                        b[55] = CqeSyndrome::RemoteAccessErr as u8;
                    }
                    cqe.op_own = make_op_own(MLX5_CQE_REQ_ERR, 0, false, 0);
                }
                _ => {
                    // A QP this CQ does not know: skipped by both.
                    cqe.set_sop_drop_qpn(MLX5_OPCODE_SEND, QPN + 1);
                    cqe.op_own = make_op_own(MLX5_CQE_REQ, 0, false, 0);
                }
            }
            a_cq.produce(&cqe);
            b_cq.produce(&cqe);
            // Sometimes let two accumulate (poll_one then finds the second too).
            if round % 7 == 3 {
                continue;
            }
            loop {
                let got = a_cq.poll_one();
                let mut w = [WorkCompletion::default(); 1];
                let n = b_cq.poll(&mut w);
                assert_eq!(got, (n == 1).then_some(w[0]), "round {round}");
                if got.is_none() {
                    break;
                }
            }
            assert_eq!(a_cq.poll_one(), None);
        }
        assert_eq!(a_cq.skipped(), b_cq.skipped());
        assert!(a_cq.skipped() > 0);
    }
}

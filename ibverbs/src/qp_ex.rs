//! The work-request interface of `ibv_qp_ex` (`ibv_create_qp_ex` with
//! `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`, `ibv_qp_to_qp_ex`, `ibv_wr_start` ..
//! `ibv_wr_complete`): every QP of this library is an `ibv_qp_ex`, whose function
//! pointers map the requests onto one [`SendBatch`] of the driver, opened by
//! `wr_start` and published by `wr_complete` with one doorbell.
//!
//! As in rdma-core's mlx5 provider (`providers/mlx5/qp.c` `mlx5_send_wr_*`): an
//! operation (`wr_send`, `wr_rdma_write`, ...) takes `wr_id` and `wr_flags` from the
//! `ibv_qp_ex` fields at the time of the call and starts a request; the data setter
//! (`wr_set_sge`, `wr_set_sge_list`, `wr_set_inline_data`, `wr_set_inline_data_list`)
//! and, on UD, `wr_set_ud_addr`, in either order, complete it, and it is written into
//! the send ring then. `wr_bind_mw` and `wr_local_inv` need no setter. An error (a
//! setter with no request, too much inline data, a full ring, a QP in a state that
//! cannot send) is kept and returned by `wr_complete`, which then publishes nothing
//! (`wr_abort` discards the batch too). Inline data is copied at the setter, so the
//! application may reuse its buffer at once.
//!
//! Nothing here allocates: the QP object holds the batch, the pending request, its
//! gather list and an inline buffer.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_uint, c_void};
use std::ptr;

use ferroverbs::verbs::{
    MwBind, MwType, QueuePair, RemoteAddr, SendBatch, SendData, SendFlags, SendOp, SendWr, Sge,
};

use crate::abi::{self, ibv_ah, ibv_qp, ibv_sge};
use crate::abi_ex::{self, c as cx, ibv_data_buf, ibv_mw, ibv_mw_bind_info, ibv_qp_ex};
use crate::ffi::{
    fnp, guard, post_errno, ptr_result, set_errno, AhObj, QpObj, VerbsObj, B, MAX_SGE,
};

/// The largest inline payload a request of this interface carries (more than any
/// QP's `max_inline_data`).
const INLINE_BUF: usize = 1024;

/// An `ibv_qp_ex` around `qp`, its interface unset (`ibv_create_qp`'s QPs).
pub(crate) fn qp_ex_of(qp: ibv_qp) -> ibv_qp_ex {
    ibv_qp_ex {
        qp_base: qp,
        comp_mask: 0,
        wr_id: 0,
        wr_flags: 0,
        wr_atomic_cmp_swp: ptr::null(),
        wr_atomic_fetch_add: ptr::null(),
        wr_bind_mw: ptr::null(),
        wr_local_inv: ptr::null(),
        wr_rdma_read: ptr::null(),
        wr_rdma_write: ptr::null(),
        wr_rdma_write_imm: ptr::null(),
        wr_send: ptr::null(),
        wr_send_imm: ptr::null(),
        wr_send_inv: ptr::null(),
        wr_send_tso: ptr::null(),
        wr_set_ud_addr: ptr::null(),
        wr_set_xrc_srqn: ptr::null(),
        wr_set_inline_data: ptr::null(),
        wr_set_inline_data_list: ptr::null(),
        wr_set_sge: ptr::null(),
        wr_set_sge_list: ptr::null(),
        wr_start: ptr::null(),
        wr_complete: ptr::null(),
        wr_abort: ptr::null(),
        wr_atomic_write: ptr::null(),
    }
}

/// Installs `create_qp_ex` in a context's extended ops.
pub(crate) fn set_ops(ext: &mut [*const c_void; 39]) {
    ext[abi::vops::CREATE_QP_EX] = fnp(create_qp_ex as *const ());
}

/// The operation of the request being built.
#[derive(Clone, Copy)]
enum Op {
    Send,
    SendImm(u32),
    SendInv(u32),
    Write(RemoteAddr),
    WriteImm(RemoteAddr, u32),
    Read(RemoteAddr),
    Cas(RemoteAddr, u64, u64),
    Fa(RemoteAddr, u64),
}

/// Where the pending request's data is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Data {
    None,
    Gather(usize),
    Inline(usize),
}

/// A request started by an operation and not yet written.
#[derive(Clone, Copy)]
struct Pending {
    op: Op,
    wr_id: u64,
    flags: SendFlags,
    data: Data,
    ud: Option<(*mut ibv_ah, u32, u32)>,
}

struct Wr {
    /// Dropped after `batch` (it borrows the QP the guard locks).
    batch: Option<SendBatch<'static, B>>,
    guard: Option<crate::spin::SpinGuard<'static, QueuePair<'static, B>>>,
    pending: Option<Pending>,
    err: c_int,
    sges: [Sge; MAX_SGE],
    inline: [u8; INLINE_BUF],
    ud_qp: bool,
}

/// The `ibv_wr_*` state of one QP (used only by the thread between its `wr_start` and
/// `wr_complete`/`wr_abort`, which holds the QP's lock meanwhile).
pub(crate) struct WrState(UnsafeCell<Wr>);

impl Default for WrState {
    fn default() -> Self {
        WrState(UnsafeCell::new(Wr {
            batch: None,
            guard: None,
            pending: None,
            err: 0,
            sges: [Sge::default(); MAX_SGE],
            inline: [0; INLINE_BUF],
            ud_qp: false,
        }))
    }
}

/// The QP and its `ibv_wr_*` state behind an `ibv_qp_ex` pointer.
///
/// # Safety
/// `qp` is a live QP of ours, used by this thread alone between `wr_start` and
/// `wr_complete`/`wr_abort` (the verbs contract of this interface).
unsafe fn state<'a>(qp: *mut ibv_qp_ex) -> Option<(&'static QpObj, &'a mut Wr)> {
    // SAFETY: the caller's QP; every QP is an `ibv_qp_ex` whose first member is the
    // `ibv_qp` the QP object starts with.
    let q = unsafe { QpObj::from_ibv(qp as *mut ibv_qp) }.ok()?;
    // SAFETY: the caller's contract: no other thread uses the state meanwhile.
    Some((q, unsafe { &mut *q.wr.0.get() }))
}

/// The `wr_id` and flags the application set in the `ibv_qp_ex`.
///
/// # Safety
/// `qp` is a live QP of ours.
unsafe fn id_flags(qp: *mut ibv_qp_ex) -> (u64, SendFlags) {
    // SAFETY: plain fields of our object, written by the application.
    let (id, f) = unsafe { ((*qp).wr_id, (*qp).wr_flags) };
    (id, crate::mw::send_flags(f))
}

impl Wr {
    fn fail(&mut self, e: c_int) {
        if self.err == 0 {
            self.err = e;
        }
    }

    /// Ends the pending request: a request without its data (or, on UD, its address)
    /// is an error.
    fn close_pending(&mut self) {
        if self.pending.take().is_some() {
            self.fail(libc::EINVAL);
        }
    }

    fn start(&mut self, op: Op, wr_id: u64, flags: SendFlags) {
        self.close_pending();
        self.pending = Some(Pending {
            op,
            wr_id,
            flags,
            data: Data::None,
            ud: None,
        });
    }

    /// Writes the pending request when it has all it needs.
    fn try_flush(&mut self) {
        let Some(p) = self.pending else {
            return self.fail(libc::EINVAL);
        };
        if p.data == Data::None || (self.ud_qp && p.ud.is_none()) {
            return;
        }
        self.pending = None;
        if self.err != 0 {
            return;
        }
        let r = self.write(&p);
        if let Err(e) = r {
            self.fail(e);
        }
    }

    fn write(&mut self, p: &Pending) -> Result<(), c_int> {
        let pe = |e: ferroverbs::verbs::PostError| post_errno(&e);
        let (wr_id, f) = (p.wr_id, p.flags);
        // The typed entries for the common one-entry shapes on connected QPs.
        if let Some(b) = self.batch.as_mut() {
            match (p.op, p.data) {
                (Op::Send, Data::Gather(1)) => return b.send(wr_id, &self.sges[0], f).map_err(pe),
                (Op::SendImm(i), Data::Gather(1)) => {
                    return b.send_imm(wr_id, &self.sges[0], i, f).map_err(pe)
                }
                (Op::Write(r), Data::Gather(1)) => {
                    return b.write(wr_id, &self.sges[0], r, f).map_err(pe)
                }
                (Op::WriteImm(r, i), Data::Gather(1)) => {
                    return b.write_imm(wr_id, &self.sges[0], r, i, f).map_err(pe)
                }
                (Op::Send, Data::Inline(n)) => {
                    return b.send_inline(wr_id, &self.inline[..n], f).map_err(pe)
                }
                (Op::SendImm(i), Data::Inline(n)) => {
                    return b
                        .send_imm_inline(wr_id, &self.inline[..n], i, f)
                        .map_err(pe)
                }
                (Op::Write(r), Data::Inline(n)) => {
                    return b.write_inline(wr_id, &self.inline[..n], r, f).map_err(pe)
                }
                _ => {}
            }
        }
        let op = match p.op {
            Op::Send => SendOp::Send,
            Op::SendImm(imm) => SendOp::SendImm { imm },
            Op::SendInv(rkey) => SendOp::SendInv { rkey },
            Op::Write(remote) => SendOp::RdmaWrite { remote },
            Op::WriteImm(remote, imm) => SendOp::RdmaWriteImm { remote, imm },
            Op::Read(remote) => SendOp::RdmaRead { remote },
            Op::Cas(remote, compare, swap) => SendOp::AtomicCas {
                remote,
                compare,
                swap,
            },
            Op::Fa(remote, add) => SendOp::AtomicFa { remote, add },
        };
        let part: [&[u8]; 1];
        let data = match p.data {
            Data::Gather(n) => SendData::Gather(&self.sges[..n]),
            Data::Inline(n) => {
                part = [&self.inline[..n]];
                SendData::Inline(if n == 0 { &[] } else { &part })
            }
            Data::None => return Err(libc::EINVAL),
        };
        let mut wr = SendWr {
            wr_id,
            op,
            data,
            flags: f,
            ud: None,
        };
        let ah;
        if let Some((a, qpn, qkey)) = p.ud {
            // SAFETY: the application's address handle, alive while requests use it.
            ah = unsafe { AhObj::from_ibv(a) }?;
            wr = wr.ud(&ah.ah, qpn, qkey);
        }
        match (self.batch.as_mut(), self.guard.as_mut()) {
            (Some(b), _) => b.post(&wr).map_err(pe),
            // A UD QP has no typed batch (its WQEs carry an address vector): each
            // request goes through `post_send`, with its own doorbell.
            (None, Some(g)) if self.ud_qp => g.post_send(&[wr]).map_err(|b| pe(b.error)),
            _ => Err(libc::EINVAL),
        }
    }

    fn set_gather(&mut self, sges: impl ExactSizeIterator<Item = Sge>) {
        let Some(p) = self.pending.as_mut() else {
            return self.fail(libc::EINVAL);
        };
        if sges.len() > MAX_SGE {
            self.pending = None;
            return self.fail(libc::EINVAL);
        }
        let n = sges.len();
        for (d, s) in self.sges.iter_mut().zip(sges) {
            *d = s;
        }
        p.data = Data::Gather(n);
        self.try_flush();
    }

    /// # Safety
    /// Every part names `len` readable bytes.
    unsafe fn set_inline(&mut self, parts: impl Iterator<Item = (*const u8, usize)>) {
        let Some(p) = self.pending.as_mut() else {
            return self.fail(libc::EINVAL);
        };
        let mut n = 0usize;
        for (addr, len) in parts {
            if len == 0 {
                continue;
            }
            if addr.is_null() || n + len > INLINE_BUF {
                // rdma-core's mlx5: inline data beyond the WQE's room is ENOMEM.
                self.pending = None;
                return self.fail(libc::ENOMEM);
            }
            // SAFETY: the caller's contract; the copy stays within the buffer.
            unsafe { ptr::copy_nonoverlapping(addr, self.inline.as_mut_ptr().add(n), len) };
            n += len;
        }
        p.data = Data::Inline(n);
        self.try_flush();
    }

    /// Releases the batch (published or discarded) and then the QP.
    fn end(&mut self, publish: bool) {
        if let Some(b) = self.batch.take() {
            if publish {
                b.ring();
            } else {
                b.abort();
            }
        }
        self.guard = None;
        self.pending = None;
        self.err = 0;
    }
}

// ---------------------------------------------------------------------------------
// Creation
// ---------------------------------------------------------------------------------

/// The `send_ops_flags` a QP type offers (rdma-core mlx5 `mlx5_qp_fill_wr_pfns`
/// without TSO, atomic write and the XRC/DC flavours, which this library does not
/// have).
fn supported_ops(qp_type: c_uint) -> u64 {
    let common = cx::IBV_QP_EX_WITH_SEND | cx::IBV_QP_EX_WITH_SEND_WITH_IMM;
    match qp_type {
        abi::c::IBV_QPT_RC => {
            common
                | cx::IBV_QP_EX_WITH_RDMA_WRITE
                | cx::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
                | cx::IBV_QP_EX_WITH_RDMA_READ
                | cx::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
                | cx::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
                | cx::IBV_QP_EX_WITH_LOCAL_INV
                | cx::IBV_QP_EX_WITH_BIND_MW
                | cx::IBV_QP_EX_WITH_SEND_WITH_INV
        }
        abi::c::IBV_QPT_UC => {
            common
                | cx::IBV_QP_EX_WITH_RDMA_WRITE
                | cx::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
                | cx::IBV_QP_EX_WITH_LOCAL_INV
                | cx::IBV_QP_EX_WITH_BIND_MW
        }
        abi::c::IBV_QPT_UD => common,
        _ => 0,
    }
}

/// `verbs_context.create_qp_ex` (`ibv_create_qp_ex`).
unsafe extern "C" fn create_qp_ex(
    _ctx: *mut abi::ibv_context,
    attr: *mut abi_ex::ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    guard(ptr::null_mut(), || {
        // SAFETY: the caller's attributes.
        let Some(a) = (unsafe { attr.as_mut() }) else {
            set_errno(libc::EINVAL);
            return ptr::null_mut();
        };
        // SAFETY: `a` is the caller's.
        ptr_result(unsafe { create(a) })
    })
}

/// # Safety
/// `a`'s pointers are the caller's (NULL or live objects of ours).
unsafe fn create(a: &mut abi_ex::ibv_qp_init_attr_ex) -> Result<*mut ibv_qp, c_int> {
    let known = cx::IBV_QP_INIT_ATTR_PD
        | cx::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
        | cx::IBV_QP_INIT_ATTR_CREATE_FLAGS;
    if a.comp_mask & cx::IBV_QP_INIT_ATTR_PD == 0 {
        return Err(libc::EINVAL);
    }
    if a.comp_mask & !known != 0 {
        // XRC domains, TSO, RSS: not offered.
        return Err(libc::EOPNOTSUPP);
    }
    if a.comp_mask & cx::IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 {
        create_flags_ok(a.create_flags)?;
    }
    let ops = if a.comp_mask & cx::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
        a.send_ops_flags
    } else {
        0
    };
    if ops & !supported_ops(a.qp_type) != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let mut init = abi::ibv_qp_init_attr {
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq as *mut abi::ibv_srq,
        cap: a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
    };
    // Sized for UMR WQEs when they may be posted (rdma-core `sq_overhead`: the
    // operations asked for, or all of the type's without `send_ops_flags`).
    let mw = a.comp_mask & cx::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS == 0
        || ops & (cx::IBV_QP_EX_WITH_BIND_MW | cx::IBV_QP_EX_WITH_LOCAL_INV) != 0;
    // SAFETY: the caller's PD and the attributes built from theirs.
    let qp = unsafe { crate::ffi::create_qp_with(a.pd, &mut init, mw) };
    if qp.is_null() {
        // SAFETY: reading this thread's errno, set by `create_qp`.
        return Err(unsafe { *libc::__errno_location() });
    }
    a.cap = init.cap;
    let ex = qp as *mut ibv_qp_ex;
    // SAFETY: the QP just created, not yet handed out: its `ibv_qp_ex` is ours to
    // fill.
    unsafe {
        (*(qp as *mut QpObj)).wr.0.get_mut().ud_qp = a.qp_type == abi::c::IBV_QPT_UD;
        fill(&mut *ex, a.qp_type);
    }
    Ok(qp)
}

/// `ibv_qp_init_attr_ex.create_flags` as the kernel judges them: a bit outside
/// the flags uverbs knows (`ib_uverbs_create_qp`: block multicast loopback,
/// cross-channel, managed send and receive, scatter FCS, CVLAN stripping, source
/// QPN, PCI write end padding) is EINVAL; a known one the device lacks is
/// EOPNOTSUPP (mlx5_ib `process_create_flags`). No flag is offered: the device has
/// no multicast (no `block_lb_mc` capability), no cross-channel queues and no raw
/// Ethernet QPs. Flags 0 are accepted.
fn create_flags_ok(flags: u32) -> Result<(), c_int> {
    const UVERBS_FLAGS: u32 = (1 << 1) | (1 << 2) | (1 << 3) | (1 << 4) | (0xf << 8);
    if flags & !UVERBS_FLAGS != 0 {
        return Err(libc::EINVAL);
    }
    if flags != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(())
}

/// Sets the function pointers of the interface for a QP of `qp_type`.
fn fill(ex: &mut ibv_qp_ex, qp_type: c_uint) {
    let ops = supported_ops(qp_type);
    let has = |f: u64| ops & f != 0;
    ex.wr_start = fnp(wr_start as *const ());
    ex.wr_complete = fnp(wr_complete as *const ());
    ex.wr_abort = fnp(wr_abort as *const ());
    ex.wr_send = fnp(wr_send as *const ());
    ex.wr_send_imm = fnp(wr_send_imm as *const ());
    ex.wr_set_sge = fnp(wr_set_sge as *const ());
    ex.wr_set_sge_list = fnp(wr_set_sge_list as *const ());
    ex.wr_set_inline_data = fnp(wr_set_inline_data as *const ());
    ex.wr_set_inline_data_list = fnp(wr_set_inline_data_list as *const ());
    if qp_type == abi::c::IBV_QPT_UD {
        ex.wr_set_ud_addr = fnp(wr_set_ud_addr as *const ());
    }
    if has(cx::IBV_QP_EX_WITH_RDMA_WRITE) {
        ex.wr_rdma_write = fnp(wr_rdma_write as *const ());
        ex.wr_rdma_write_imm = fnp(wr_rdma_write_imm as *const ());
    }
    if has(cx::IBV_QP_EX_WITH_RDMA_READ) {
        ex.wr_rdma_read = fnp(wr_rdma_read as *const ());
        ex.wr_atomic_cmp_swp = fnp(wr_atomic_cmp_swp as *const ());
        ex.wr_atomic_fetch_add = fnp(wr_atomic_fetch_add as *const ());
        ex.wr_send_inv = fnp(wr_send_inv as *const ());
    }
    if has(cx::IBV_QP_EX_WITH_BIND_MW) {
        ex.wr_bind_mw = fnp(wr_bind_mw as *const ());
        ex.wr_local_inv = fnp(wr_local_inv as *const ());
    }
}

// ---------------------------------------------------------------------------------
// The interface
// ---------------------------------------------------------------------------------

/// Runs `f` on the QP's state (nothing for a pointer that is not ours; a panic is
/// kept as EIO).
///
/// # Safety
/// As [`state`].
unsafe fn with(qp: *mut ibv_qp_ex, f: impl FnOnce(&'static QpObj, &mut Wr)) {
    // SAFETY: the caller's contract.
    if let Some((q, w)) = unsafe { state(qp) } {
        let wp = w as *mut Wr;
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(q, w))).is_err() {
            // SAFETY: `wp` is the state borrowed above, no longer borrowed by `f`.
            unsafe { (*wp).fail(libc::EIO) };
        }
    }
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    // SAFETY: the caller's QP; every QP is an `ibv_qp_ex` starting with its `ibv_qp`.
    let Ok(q) = (unsafe { QpObj::from_ibv(qp as *mut ibv_qp) }) else {
        return;
    };
    // The QP's lock is taken before the state is touched: the state is the lock
    // holder's (another thread's `wr_start` waits here until this batch ends, as
    // rdma-core's send-queue lock makes it).
    let g = q.qp.lock();
    // SAFETY: this thread holds the QP's lock now.
    unsafe {
        with(qp, |_, w| {
            w.err = 0;
            w.guard = Some(g);
            let Some(g) = w.guard.as_mut() else { return };
            let qpp: *mut QueuePair<'static, B> = &mut **g;
            // SAFETY: the QP lives in the QP object (its address does not move) and
            // stays locked by the guard kept beside the batch, which is dropped
            // first (`Wr::end`); nothing else reaches it through the guard meanwhile.
            let qpr: &'static mut QueuePair<'static, B> = &mut *qpp;
            if w.ud_qp {
                // Requests are posted one by one (`Wr::write`).
                return;
            }
            match qpr.post() {
                Ok(b) => w.batch = Some(b),
                Err(e) => w.fail(post_errno(&e)),
            }
        })
    }
}

unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    let mut ret = libc::EINVAL;
    // SAFETY: the caller's QP.
    unsafe {
        with(qp, |_, w| {
            if w.guard.is_none() {
                return;
            }
            w.close_pending();
            ret = w.err;
            w.end(ret == 0);
        })
    };
    ret
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    // SAFETY: the caller's QP.
    unsafe { with(qp, |_, w| w.end(false)) }
}

/// Starts a request of `op`.
///
/// # Safety
/// As [`state`].
unsafe fn op(qp: *mut ibv_qp_ex, op: Op) {
    // SAFETY: the caller's QP.
    let (id, f) = unsafe { id_flags(qp) };
    // SAFETY: as above.
    unsafe { with(qp, |_, w| w.start(op, id, f)) }
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    // SAFETY: the caller's QP.
    unsafe { op(qp, Op::Send) }
}

unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm: u32) {
    // SAFETY: the caller's QP. `imm` is big-endian (`__be32`).
    unsafe { op(qp, Op::SendImm(u32::from_be(imm))) }
}

unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    // SAFETY: the caller's QP.
    unsafe { op(qp, Op::SendInv(rkey)) }
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    // SAFETY: the caller's QP.
    unsafe { op(qp, Op::Write(RemoteAddr { addr, rkey })) }
}

unsafe extern "C" fn wr_rdma_write_imm(qp: *mut ibv_qp_ex, rkey: u32, addr: u64, imm: u32) {
    let r = RemoteAddr { addr, rkey };
    // SAFETY: the caller's QP.
    unsafe { op(qp, Op::WriteImm(r, u32::from_be(imm))) }
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    // SAFETY: the caller's QP.
    unsafe { op(qp, Op::Read(RemoteAddr { addr, rkey })) }
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    compare: u64,
    swap: u64,
) {
    let r = RemoteAddr { addr, rkey };
    // SAFETY: the caller's QP.
    unsafe { op(qp, Op::Cas(r, compare, swap)) }
}

unsafe extern "C" fn wr_atomic_fetch_add(qp: *mut ibv_qp_ex, rkey: u32, addr: u64, add: u64) {
    // SAFETY: the caller's QP.
    unsafe { op(qp, Op::Fa(RemoteAddr { addr, rkey }, add)) }
}

unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    // SAFETY: the caller's QP.
    let (id, f) = unsafe { id_flags(qp) };
    // SAFETY: the caller's window and bind information.
    let bind: Result<(u32, MwType, MwBind), c_int> = unsafe { crate::mw::wr_bind_of(mw, info) };
    // SAFETY: the caller's QP.
    unsafe {
        with(qp, |_, w| {
            w.close_pending();
            let (key, ty, b) = match bind {
                Ok(x) => x,
                Err(e) => return w.fail(e),
            };
            if w.err != 0 {
                return;
            }
            let Some(batch) = w.batch.as_mut() else {
                return w.fail(libc::EINVAL);
            };
            if let Err(e) = batch.bind_mw_raw(id, key, ty, rkey, &b, f) {
                w.fail(post_errno(&e));
            }
        })
    }
}

unsafe extern "C" fn wr_local_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    // SAFETY: the caller's QP.
    let (id, f) = unsafe { id_flags(qp) };
    // SAFETY: the caller's QP.
    unsafe {
        with(qp, |_, w| {
            w.close_pending();
            if w.err != 0 {
                return;
            }
            let Some(batch) = w.batch.as_mut() else {
                return w.fail(libc::EINVAL);
            };
            if let Err(e) = batch.local_inv(id, rkey, f) {
                w.fail(post_errno(&e));
            }
        })
    }
}

unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let s = Sge { addr, length, lkey };
    // SAFETY: the caller's QP.
    unsafe { with(qp, |_, w| w.set_gather(std::iter::once(s))) }
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, n: usize, list: *const ibv_sge) {
    // SAFETY: the caller's QP.
    unsafe {
        with(qp, |_, w| {
            if n > 0 && list.is_null() {
                return w.fail(libc::EINVAL);
            }
            if n > MAX_SGE {
                w.pending = None;
                return w.fail(libc::EINVAL);
            }
            let it = (0..n).map(|i| {
                // SAFETY: the caller's list of `n` entries.
                let e = list.add(i).read();
                Sge {
                    addr: e.addr,
                    length: e.length,
                    lkey: e.lkey,
                }
            });
            w.set_gather(it)
        })
    }
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, len: usize) {
    // SAFETY: the caller's QP and the `len` bytes at `addr` it names.
    unsafe {
        with(qp, |_, w| {
            w.set_inline(std::iter::once((addr as *const u8, len)))
        })
    }
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    n: usize,
    list: *const ibv_data_buf,
) {
    // SAFETY: the caller's QP and its buffer list.
    unsafe {
        with(qp, |_, w| {
            if n > 0 && list.is_null() {
                return w.fail(libc::EINVAL);
            }
            let it = (0..n).map(|i| {
                // SAFETY: the caller's list of `n` entries.
                let b = list.add(i).read();
                (b.addr as *const u8, b.length)
            });
            w.set_inline(it)
        })
    }
}

unsafe extern "C" fn wr_set_ud_addr(qp: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    // SAFETY: the caller's QP.
    unsafe {
        with(qp, |_, w| {
            let Some(p) = w.pending.as_mut() else {
                return w.fail(libc::EINVAL);
            };
            p.ud = Some((ah, qpn, qkey));
            w.try_flush();
        })
    }
}

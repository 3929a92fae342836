//! The polling interface of `ibv_cq_ex` (`ibv_create_cq_ex`, `ibv_start_poll`,
//! `ibv_next_poll`, `ibv_end_poll`, the `ibv_wc_read_*` readers): every CQ of this
//! library is an `ibv_cq_ex` whose function pointers read the driver's
//! [`CompletionQueue::poll_one`] one completion at a time.
//!
//! As in rdma-core (`providers/mlx5/cq.c` `mlx5_start_poll`, `mlx5_next_poll`,
//! `mlx5_end_poll`): `start_poll` takes the CQ's lock and the first completion, or
//! answers ENOENT (and releases the lock) when there is none; `next_poll` moves to
//! the next (ENOENT when none, the lock still held); `end_poll` releases the lock.
//! `status` and `wr_id` are written into the `ibv_cq_ex` itself, the readers give the
//! other fields of the current completion. `read_imm_data` gives the immediate in
//! network order and, for a SEND with Invalidate, the invalidated key in host order,
//! as `mlx5_cq_read_wc_imm_data` does.
//!
//! `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` installs `read_completion_ts`: the current
//! completion's CQE `timestamp`, the device clock's free-running counter (counted at
//! `hca_core_clock` kHz, wrapping at `completion_timestamp_mask`), as libmlx5
//! `mlx5_cq_read_wc_completion_ts` reads it. Work-completion fields the device does
//! not report are refused at creation with EOPNOTSUPP, as rdma-core's providers
//! refuse what they lack: wall-clock timestamps (no clock info page), CVLAN, flow
//! tags and tag matching.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_uint, c_void};
use std::ptr;

use ferroverbs::verbs::{CompletionQueue, WcFlags, WorkCompletion};
use ferroverbs_sim::Sim;

use crate::abi::{self, ibv_cq};
use crate::abi_ex::{self, c as cx, ibv_cq_ex, ibv_poll_cq_attr};
use crate::ffi::{fnp, guard, ptr_result, set_errno, CqObj, VerbsObj, B};

/// An `ibv_cq_ex` around `cq`, its interface set.
pub(crate) fn cq_ex_of(cq: ibv_cq) -> ibv_cq_ex {
    ibv_cq_ex {
        cq,
        comp_mask: 0,
        status: 0,
        wr_id: 0,
        start_poll: fnp(start_poll as *const ()),
        next_poll: fnp(next_poll as *const ()),
        end_poll: fnp(end_poll as *const ()),
        read_opcode: fnp(read_opcode as *const ()),
        read_vendor_err: fnp(read_vendor_err as *const ()),
        read_byte_len: fnp(read_byte_len as *const ()),
        read_imm_data: fnp(read_imm_data as *const ()),
        read_qp_num: fnp(read_qp_num as *const ()),
        read_src_qp: fnp(read_src_qp as *const ()),
        read_wc_flags: fnp(read_wc_flags as *const ()),
        read_slid: fnp(read_zero32 as *const ()),
        read_sl: fnp(read_zero8 as *const ()),
        read_dlid_path_bits: fnp(read_zero8 as *const ()),
        read_completion_ts: ptr::null(),
        read_cvlan: ptr::null(),
        read_flow_tag: ptr::null(),
        read_tm_info: ptr::null(),
        read_completion_wallclock_ns: ptr::null(),
    }
}

/// Installs `create_cq_ex` in a context's extended ops.
pub(crate) fn set_ops(ext: &mut [*const c_void; 39]) {
    ext[abi::vops::CREATE_CQ_EX] = fnp(create_cq_ex as *const ());
}

struct Poll {
    guard: Option<crate::spin::SpinGuard<'static, CompletionQueue<'static, B>>>,
    cur: WorkCompletion,
    /// The CQE `timestamp` of `cur`.
    ts: u64,
}

/// The `start_poll` .. `end_poll` state of one CQ (used by the thread that holds the
/// CQ's lock meanwhile).
pub(crate) struct PollState(UnsafeCell<Poll>);

impl Default for PollState {
    fn default() -> Self {
        PollState(UnsafeCell::new(Poll {
            guard: None,
            cur: WorkCompletion::default(),
            ts: 0,
        }))
    }
}

/// The work-completion fields offered (`IBV_WC_STANDARD_FLAGS` and the completion
/// timestamp).
const OFFERED_WC_FLAGS: u64 = cx::IBV_WC_STANDARD_FLAGS | cx::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;

/// `verbs_context.create_cq_ex` (`ibv_create_cq_ex`).
unsafe extern "C" fn create_cq_ex(
    ctx: *mut abi::ibv_context,
    attr: *mut abi_ex::ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    guard(ptr::null_mut(), || {
        // SAFETY: the caller's attributes.
        let Some(a) = (unsafe { attr.as_ref() }) else {
            set_errno(libc::EINVAL);
            return ptr::null_mut();
        };
        let r = (|| {
            if a.comp_mask & !(cx::IBV_CQ_INIT_ATTR_MASK_FLAGS | cx::IBV_CQ_INIT_ATTR_MASK_PD) != 0
            {
                return Err(libc::EINVAL);
            }
            if a.wc_flags & !cx::IBV_CREATE_CQ_SUP_WC_FLAGS != 0 {
                return Err(libc::EINVAL);
            }
            if a.wc_flags & !OFFERED_WC_FLAGS != 0 {
                return Err(libc::EOPNOTSUPP);
            }
            if a.comp_mask & cx::IBV_CQ_INIT_ATTR_MASK_PD != 0 {
                // Parent domains are not offered.
                return Err(libc::EOPNOTSUPP);
            }
            if a.comp_mask & cx::IBV_CQ_INIT_ATTR_MASK_FLAGS != 0
                && a.flags & !cx::IBV_CREATE_CQ_ATTR_SINGLE_THREADED != 0
            {
                return Err(libc::EOPNOTSUPP);
            }
            let cqe = c_int::try_from(a.cqe).map_err(|_| libc::EINVAL)?;
            let vector = c_int::try_from(a.comp_vector).map_err(|_| libc::EINVAL)?;
            // SAFETY: the caller's context and channel.
            let cq = unsafe { crate::ffi::create_cq(ctx, cqe, a.cq_context, a.channel, vector) };
            if cq.is_null() {
                // SAFETY: this thread's errno, set by `create_cq`.
                return Err(unsafe { *libc::__errno_location() });
            }
            let cq = cq as *mut ibv_cq_ex;
            if a.wc_flags & cx::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP != 0 {
                // SAFETY: the `ibv_cq_ex` just made, not yet the caller's.
                unsafe { (*cq).read_completion_ts = fnp(read_completion_ts as *const ()) };
            }
            Ok(cq)
        })();
        ptr_result(r)
    })
}

/// The CQ and its polling state behind an `ibv_cq_ex` pointer.
///
/// # Safety
/// `cq` is a live CQ of ours, polled through this interface by one thread at a time
/// (between `start_poll` and `end_poll` it holds the CQ's lock).
unsafe fn state<'a>(cq: *mut ibv_cq_ex) -> Option<(&'static CqObj, &'a mut Poll)> {
    // SAFETY: every CQ is an `ibv_cq_ex` starting with the `ibv_cq` of its object.
    let q = unsafe { CqObj::from_ibv(cq as *mut ibv_cq) }.ok()?;
    // SAFETY: the caller's contract.
    Some((q, unsafe { &mut *q.poll.0.get() }))
}

/// Makes `w` the current completion: `status` and `wr_id` into the `ibv_cq_ex`.
///
/// # Safety
/// `cq` is a live CQ of ours.
unsafe fn set_current(cq: *mut ibv_cq_ex, p: &mut Poll, (w, ts): (WorkCompletion, u64)) {
    p.cur = w;
    p.ts = ts;
    // SAFETY: plain fields of our object, which the application reads.
    unsafe {
        (*cq).status = w.status as c_uint;
        (*cq).wr_id = w.wr_id;
    }
}

/// An empty CQ: on a simulated NIC the polling thread services the device (as
/// `ibv_poll_cq` does), else it yields.
fn idle(sim: Option<&'static Sim>) {
    if sim.and_then(Sim::try_service).unwrap_or(0) == 0 {
        std::thread::yield_now();
    }
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: the caller's attributes.
        if unsafe { attr.as_ref() }.is_some_and(|a| a.comp_mask != 0) {
            return libc::EINVAL;
        }
        // SAFETY: every CQ is an `ibv_cq_ex` starting with the `ibv_cq` of its object.
        let Ok(q) = (unsafe { CqObj::from_ibv(cq as *mut ibv_cq) }) else {
            return libc::EINVAL;
        };
        // The lock first: the polling state is the lock holder's.
        let mut g = q.cq.lock();
        // SAFETY: this thread holds the CQ's lock.
        let p = unsafe { &mut *q.poll.0.get() };
        match g.poll_one_with_timestamp() {
            Some(w) => {
                p.guard = Some(g);
                // SAFETY: the caller's CQ.
                unsafe { set_current(cq, p, w) };
                0
            }
            None => {
                drop(g);
                idle(q.sim);
                libc::ENOENT
            }
        }
    })
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: the caller's CQ.
        let Some((q, p)) = (unsafe { state(cq) }) else {
            return libc::EINVAL;
        };
        let Some(g) = p.guard.as_mut() else {
            return libc::EINVAL;
        };
        match g.poll_one_with_timestamp() {
            Some(w) => {
                // SAFETY: the caller's CQ.
                unsafe { set_current(cq, p, w) };
                0
            }
            None => {
                idle(q.sim);
                libc::ENOENT
            }
        }
    })
}

unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    guard((), || {
        // SAFETY: the caller's CQ.
        if let Some((_, p)) = unsafe { state(cq) } {
            p.guard = None;
        }
    })
}

/// The current completion.
///
/// # Safety
/// As [`state`].
unsafe fn cur(cq: *mut ibv_cq_ex) -> WorkCompletion {
    // SAFETY: the caller's contract.
    unsafe { state(cq) }.map(|(_, p)| p.cur).unwrap_or_default()
}

unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> c_uint {
    // SAFETY: the caller's CQ.
    unsafe { cur(cq) }.opcode as c_uint
}

unsafe extern "C" fn read_vendor_err(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: the caller's CQ.
    u32::from(unsafe { cur(cq) }.vendor_err)
}

unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: the caller's CQ.
    unsafe { cur(cq) }.byte_len
}

unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: the caller's CQ.
    let w = unsafe { cur(cq) };
    if w.wc_flags.contains(WcFlags::WITH_INV) {
        w.imm_data
    } else {
        w.imm_data.to_be()
    }
}

unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: the caller's CQ.
    unsafe { cur(cq) }.qp_num
}

unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: the caller's CQ.
    unsafe { cur(cq) }.src_qp
}

unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> c_uint {
    // SAFETY: the caller's CQ.
    unsafe { cur(cq) }.wc_flags.bits()
}

/// `read_completion_ts` (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`): the current
/// completion's CQE `timestamp` (libmlx5 `mlx5_cq_read_wc_completion_ts`).
unsafe extern "C" fn read_completion_ts(cq: *mut ibv_cq_ex) -> u64 {
    // SAFETY: the caller's CQ.
    unsafe { state(cq) }.map(|(_, p)| p.ts).unwrap_or(0)
}

/// `read_slid` (RoCE: no LID).
unsafe extern "C" fn read_zero32(_cq: *mut ibv_cq_ex) -> u32 {
    0
}

/// `read_sl`, `read_dlid_path_bits` (RoCE: 0).
unsafe extern "C" fn read_zero8(_cq: *mut ibv_cq_ex) -> u8 {
    0
}

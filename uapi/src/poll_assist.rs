//! Busy-poll assistance: an empty `ibv_poll_cq` lends the polling thread to the
//! simulated device, as the drop-in's poll does.
//!
//! libmlx5's `ibv_poll_cq` only reads the CQ ring in the application's memory; on a
//! ConnectX the hardware writes the CQE meanwhile. The simulated device needs a CPU to
//! do that work, and its thread (woken from its UDP socket) competes for one with the
//! application's spinning poll loop: on a machine with few CPUs the scheduler runs it
//! only after the spinner's time slice, which put this layer's round trip at four
//! times the drop-in's. So, when a CQ is created, the layer wraps the context's
//! `poll_cq` entry (`struct ibv_context.ops.poll_cq`, which rdma-core's inline
//! `ibv_poll_cq` calls, the `cq->context` libibverbs sets before the CREATE_CQ
//! command): the wrapper calls libmlx5's own poll first, and only when that finds the
//! CQ empty services the device on the calling thread (`Sim::try_service`: one
//! non-blocking read of the socket, the work it brings, never a wait for another
//! thread), whose completion the application's next poll finds: the NAPI-style busy
//! polling of Linux network stacks.
//! libmlx5's code runs unmodified; a CQE present costs the wrapper a load and a call.
//!
//! `FERROVERBS_POLL_ASSIST=0` leaves the entry alone (the device thread alone then
//! carries the traffic). Extended CQs (`ibv_start_poll`, whose entries libmlx5 sets
//! per CQ after the command) are not wrapped.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::nic::Nic;
use crate::user;

/// The environment variable that turns the assistance off (`0`).
pub const ENV: &str = "FERROVERBS_POLL_ASSIST";

/// `offsetof(struct ibv_context, ops.poll_cq)` in rdma-core's `infiniband/verbs.h`
/// (the device pointer, then eleven entries of `struct ibv_context_ops` before it;
/// checked against the installed header by `uapi/tests/layout.rs`).
pub const CONTEXT_OPS_POLL_CQ: u64 = 96;
/// `offsetof(struct ibv_cq, context)`.
pub const CQ_CONTEXT: u64 = 0;

type PollCq = unsafe extern "C" fn(*mut c_void, c_int, *mut c_void) -> c_int;

/// libmlx5's `poll_cq` entry of the contexts wrapped (0: none yet). Every mlx5
/// context of a process has the same one (the CQE version is the device's); a
/// context whose entry differs is left alone.
static ORIGINAL: AtomicUsize = AtomicUsize::new(0);
/// The device the wrapper services.
static DEVICE: OnceLock<&'static Nic> = OnceLock::new();
/// Empty polls that serviced the device, and how many of them found work for it
/// (for tests).
static ASSISTS: AtomicU64 = AtomicU64::new(0);
static ASSISTED_HITS: AtomicU64 = AtomicU64::new(0);

/// Empty polls that serviced the device, and of those, the ones that found work.
pub fn stats() -> (u64, u64) {
    (
        ASSISTS.load(Ordering::Relaxed),
        ASSISTED_HITS.load(Ordering::Relaxed),
    )
}

/// The wrapper installed in `ibv_context.ops.poll_cq`: libmlx5's poll, and on an
/// empty CQ the device serviced for the next poll (kept out of line, so that a poll
/// that finds completions costs a load, a call and a test more than libmlx5's own).
unsafe extern "C" fn assisted_poll_cq(cq: *mut c_void, n: c_int, wc: *mut c_void) -> c_int {
    let orig = ORIGINAL.load(Ordering::Relaxed);
    // SAFETY: ORIGINAL is set (non-zero, with release ordering before the entry is
    // replaced, which the caller read to get here) to the `PollCq` the entry held,
    // libmlx5's function, which stays mapped for the life of the process (providers
    // are never unloaded while a context is open).
    let orig: PollCq = unsafe { std::mem::transmute::<usize, PollCq>(orig) };
    // SAFETY: the arguments are the caller's, passed on unchanged to the function
    // rdma-core's `ibv_poll_cq` would have called.
    let r = unsafe { orig(cq, n, wc) };
    if r == 0 {
        assist();
    }
    r
}

/// Services the device on this thread after an empty poll (its completion is then
/// in the ring for the next one), or yields when there is nothing to do or the device
/// thread is at work: on a machine with fewer cores than busy threads the core goes
/// to it, as the drop-in's poll does.
#[cold]
#[inline(never)]
fn assist() {
    let Some(nic) = DEVICE.get() else {
        return;
    };
    ASSISTS.fetch_add(1, Ordering::Relaxed);
    if nic.sim.try_service().unwrap_or(0) == 0 {
        std::thread::yield_now();
    } else {
        ASSISTED_HITS.fetch_add(1, Ordering::Relaxed);
    }
}

/// Wraps the `poll_cq` entry of the context of the CQ at `user_handle` (CREATE_CQ's
/// user handle: libibverbs's `struct ibv_cq`, its `context` already set), unless
/// turned off or already wrapped. Reads and writes go through the checked user copies,
/// so a bogus handle changes nothing.
pub fn install(nic: &'static Nic, user_handle: u64) {
    if std::env::var(ENV).as_deref() == Ok("0") {
        return;
    }
    let read = |addr: u64| -> Option<u64> {
        let b = user::copy_in(addr, 8).ok()?;
        Some(u64::from_ne_bytes(b.try_into().ok()?))
    };
    let Some(ctx) = read(user_handle.wrapping_add(CQ_CONTEXT)) else {
        return;
    };
    let slot = ctx.wrapping_add(CONTEXT_OPS_POLL_CQ);
    if slot % 8 != 0 {
        return;
    }
    let Some(current) = read(slot) else {
        return;
    };
    let wrapper = assisted_poll_cq as PollCq as usize as u64;
    if current == wrapper || current == 0 {
        return;
    }
    match ORIGINAL.compare_exchange(0, current as usize, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {}
        Err(o) if o as u64 == current => {}
        Err(_) => return,
    }
    let _ = DEVICE.set(nic);
    // The slot must be writable: write back the value it holds (no change for a
    // concurrent reader), then replace it with one aligned atomic store, so that a
    // thread polling meanwhile reads either entry, never a torn pointer.
    if user::copy_out(slot, &current.to_ne_bytes()).is_err() {
        return;
    }
    // SAFETY: `slot` is 8-byte aligned and was just read and written through the
    // kernel's checked copies: a live, writable word of this process, the
    // `ops.poll_cq` entry of the caller's `ibv_context`. AtomicU64 has the alignment
    // and size of that pointer on the 64-bit targets this layer builds for.
    let word = unsafe { AtomicU64::from_ptr(slot as *mut u64) };
    let _ = word.compare_exchange(current, wrapper, Ordering::AcqRel, Ordering::Relaxed);
}

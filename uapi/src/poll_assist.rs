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
//! Extended CQs (`ibv_create_cq_ex`) are polled through entries of the CQ itself,
//! `struct ibv_cq_ex.start_poll` and `next_poll`, which libmlx5 sets per CQ
//! (`mlx5_cq_fill_pfns`, called in `create_cq` before the CREATE_CQ command, one of
//! its 24 variants by CQE version, locking, stalling and clock update). At CREATE_CQ
//! the layer wraps the CQ's `start_poll` the same way: an `ENOENT` (empty CQ) of
//! libmlx5's `start_poll` services the device. `next_poll` is left alone: it runs
//! inside a poll that `start_poll` began, and its `ENOENT` ends the batch (the
//! program calls `end_poll` and starts again with `start_poll`), as `poll_cq`
//! returning fewer completions than asked, which the wrapper does not assist either.
//! A CQ made by `ibv_create_cq` has no `start_poll` (libmlx5's `calloc` leaves it
//! 0) and is left alone.
//!
//! `FERROVERBS_POLL_ASSIST=0` leaves the entries alone (the device thread alone then
//! carries the traffic).

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
/// `offsetof(struct ibv_cq_ex, start_poll)` (`infiniband/verbs.h`; libibverbs's
/// `struct verbs_cq` is a union of `ibv_cq` and `ibv_cq_ex`, and CREATE_CQ's user
/// handle is its address; checked by `uapi/tests/layout.rs`).
pub const CQ_EX_START_POLL: u64 = 144;

type PollCq = unsafe extern "C" fn(*mut c_void, c_int, *mut c_void) -> c_int;
/// `int (*start_poll)(struct ibv_cq_ex *, struct ibv_poll_cq_attr *)`.
type StartPoll = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;

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
/// Threads inside an assist now (servicing the device or yielding the core).
static IN_ASSIST: AtomicUsize = AtomicUsize::new(0);

/// Distinct `start_poll` functions of libmlx5 the layer can wrap: a wrapper per
/// slot, each calling the original of its slot, so that a wrapped poll finds its
/// original with one load and no lookup. A process uses one or two of libmlx5's
/// variants (locked or single-threaded, with or without clock update); a CQ whose
/// variant finds no free slot is left unwrapped.
const START_SLOTS: usize = 8;
/// libmlx5's `start_poll` of each slot (0: free).
static START_ORIGINALS: [AtomicUsize; START_SLOTS] = [const { AtomicUsize::new(0) }; START_SLOTS];
/// The wrapper of each slot.
const START_WRAPPERS: [StartPoll; START_SLOTS] = [
    assisted_start_poll::<0>,
    assisted_start_poll::<1>,
    assisted_start_poll::<2>,
    assisted_start_poll::<3>,
    assisted_start_poll::<4>,
    assisted_start_poll::<5>,
    assisted_start_poll::<6>,
    assisted_start_poll::<7>,
];

/// Empty polls that serviced the device, and of those, the ones that found work.
pub fn stats() -> (u64, u64) {
    (
        ASSISTS.load(Ordering::Relaxed),
        ASSISTED_HITS.load(Ordering::Relaxed),
    )
}

/// Empty polls that serviced the device so far (the trap's sign of a busy poller,
/// [`crate::mmio_trap`]).
pub fn assists() -> u64 {
    ASSISTS.load(Ordering::Relaxed)
}

/// Whether a thread is inside an assist now: a busy poller whose empty poll yielded
/// the core and has not had it back yet. On a loaded machine that yield can last a
/// scheduler time slice of another program, milliseconds without a new poll, and the
/// poller is still polling ([`crate::doorbell`]'s watcher does not count such a look
/// as quiet).
pub fn assisting() -> bool {
    IN_ASSIST.load(Ordering::Acquire) != 0
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
    // Doorbells of a hot UAR page are plain stores: forward them before polling
    // (one load when no page is hot).
    if crate::doorbell::hot() {
        crate::doorbell::flush_hot();
    }
    // SAFETY: the arguments are the caller's, passed on unchanged to the function
    // rdma-core's `ibv_poll_cq` would have called.
    let r = unsafe { orig(cq, n, wc) };
    if r == 0 {
        assist();
    }
    r
}

/// The wrapper installed in `ibv_cq_ex.start_poll` of slot `K`: libmlx5's
/// `start_poll`, and on `ENOENT` (an empty CQ; libmlx5 has released the CQ's lock
/// by then) the device serviced for the next call.
unsafe extern "C" fn assisted_start_poll<const K: usize>(
    cq: *mut c_void,
    attr: *mut c_void,
) -> c_int {
    let orig = START_ORIGINALS[K].load(Ordering::Relaxed);
    // SAFETY: slot K is set (non-zero, with release ordering before any entry is
    // replaced by this wrapper, which the caller read to get here) to libmlx5's
    // `start_poll` the entry held, and a slot is never changed once set; the
    // provider stays mapped while its contexts are open.
    let orig: StartPoll = unsafe { std::mem::transmute::<usize, StartPoll>(orig) };
    if crate::doorbell::hot() {
        crate::doorbell::flush_hot();
    }
    // SAFETY: the caller's arguments, passed on unchanged to the function rdma-core's
    // inline `ibv_start_poll` would have called.
    let r = unsafe { orig(cq, attr) };
    if r == libc::ENOENT {
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
    let Some(sim) = &nic.sim else {
        return;
    };
    IN_ASSIST.fetch_add(1, Ordering::AcqRel);
    if sim.try_service().unwrap_or(0) == 0 {
        std::thread::yield_now();
    } else {
        ASSISTED_HITS.fetch_add(1, Ordering::Relaxed);
    }
    IN_ASSIST.fetch_sub(1, Ordering::AcqRel);
}

/// Wraps the `poll_cq` entry of the context of the CQ at `user_handle` (CREATE_CQ's
/// user handle: libibverbs's `struct ibv_cq`, its `context` already set) and, for an
/// extended CQ, the CQ's `start_poll`, unless turned off or already wrapped. Reads
/// and writes go through the checked user copies, so a bogus handle changes nothing.
pub fn install(nic: &'static Nic, user_handle: u64) {
    // Over VFIO the device needs no CPU of the program's and its doorbells are the
    // BAR's: libmlx5's poll runs unwrapped, as on a kernel's ConnectX.
    if std::env::var(ENV).as_deref() == Ok("0") || nic.sim.is_none() {
        return;
    }
    let _ = DEVICE.set(nic);
    install_poll_cq(user_handle);
    install_start_poll(user_handle);
}

/// Whether code addresses `a` and `b` lie in the same loaded object (`dladdr`'s
/// base address).
fn same_object(a: usize, b: usize) -> bool {
    let base = |addr: usize| -> Option<usize> {
        // SAFETY: `dladdr` only looks the address up in the loader's tables (it never
        // dereferences it) and fills the `Dl_info` it is given.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: as above; `info` is a valid, writable `Dl_info`.
        let found = unsafe { libc::dladdr(addr as *const c_void, &mut info) };
        (found != 0 && !info.dli_fbase.is_null()).then_some(info.dli_fbase as usize)
    };
    matches!((base(a), base(b)), (Some(x), Some(y)) if x == y)
}

/// The 8-byte word at `addr` of the process, through the checked copy.
fn read_word(addr: u64) -> Option<u64> {
    let b = user::copy_in(addr, 8).ok()?;
    Some(u64::from_ne_bytes(b.try_into().ok()?))
}

/// Wraps the context's `poll_cq` entry (see [`install`]).
fn install_poll_cq(user_handle: u64) {
    let Some(ctx) = read_word(user_handle.wrapping_add(CQ_CONTEXT)) else {
        return;
    };
    let slot = ctx.wrapping_add(CONTEXT_OPS_POLL_CQ);
    if !slot.is_multiple_of(8) {
        return;
    }
    let Some(current) = read_word(slot) else {
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

/// Wraps `start_poll` of the extended CQ at `user_handle` (see the module's
/// documentation); a CQ without one (made by `ibv_create_cq`), one already wrapped
/// or one whose function finds no free slot is left alone.
fn install_start_poll(user_handle: u64) {
    let slot = user_handle.wrapping_add(CQ_EX_START_POLL);
    if !slot.is_multiple_of(8) {
        return;
    }
    let Some(current) = read_word(slot) else {
        return;
    };
    if current == 0 || START_WRAPPERS.iter().any(|w| *w as usize as u64 == current) {
        return;
    }
    // Only a function of the provider whose `poll_cq` the context has (libmlx5's):
    // anything else at that offset is not an `ibv_cq_ex` of libmlx5.
    let provider = ORIGINAL.load(Ordering::Acquire);
    if provider == 0 || !same_object(provider, current as usize) {
        return;
    }
    let Some(k) = START_ORIGINALS.iter().position(|o| {
        match o.compare_exchange(0, current as usize, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(v) => v as u64 == current,
        }
    }) else {
        return;
    };
    let wrapper = START_WRAPPERS[k] as usize as u64;
    if user::copy_out(slot, &current.to_ne_bytes()).is_err() {
        return;
    }
    // SAFETY: as for the `poll_cq` entry above: `slot` is an 8-byte aligned, live and
    // writable word of this process (the `start_poll` entry of the caller's
    // `ibv_cq_ex`), just read and written through the checked copies.
    let word = unsafe { AtomicU64::from_ptr(slot as *mut u64) };
    let _ = word.compare_exchange(current, wrapper, Ordering::AcqRel, Ordering::Relaxed);
}

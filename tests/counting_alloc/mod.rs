//! A counting global allocator for the no-allocation tests (`verbs_noalloc`,
//! `sim_noalloc`, `srq_noalloc`): it forwards every call to the system allocator and,
//! while a thread has switched counting on ([`allocations`]), counts that thread's
//! calls. Each test binary installs it with
//! `#[global_allocator] static ALLOC: counting_alloc::Counting = counting_alloc::Counting;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The allocator: the system allocator plus a per-thread call count.
pub struct Counting;

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

fn note() {
    // `try_with`: the thread-locals may be gone while a thread exits.
    let _ = ON.try_with(|on| {
        if on.get() {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        }
    });
}

// SAFETY: forwards every call to the system allocator unchanged; the bookkeeping
// touches only const-initialised thread-locals (no allocation, no reentrancy).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's promises are passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        note();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note();
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Runs `f` with counting on and returns the allocator calls it made on this thread.
pub fn allocations(f: impl FnOnce()) -> u64 {
    COUNT.with(|c| c.set(0));
    ON.with(|on| on.set(true));
    f();
    ON.with(|on| on.set(false));
    COUNT.with(|c| c.get())
}

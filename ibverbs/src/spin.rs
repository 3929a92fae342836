//! The lock of a CQ and of a QP: a spin lock, as libmlx5 takes a `pthread_spinlock_t`
//! around `mlx5_poll_cq` and `mlx5_post_send` (rdma-core `providers/mlx5`
//! `mlx5_spin_lock`). Uncontended, taking it is one atomic test-and-set and releasing
//! it one store (a `std::sync::Mutex` adds its poisoning checks on both sides); a waiter
//! spins briefly, then yields its CPU, since the holder may be running a firmware
//! command (`ibv_query_qp`, `ibv_create_qp` on the CQ).

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU32, Ordering};

/// A value behind a spin lock.
pub(crate) struct SpinLock<T> {
    /// Bit 0: held (a 32-bit word, so that taking it is one `lock bts` on x86-64).
    locked: AtomicU32,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a `SpinGuard`, of which at most one exists
// at a time (the `locked` flag, taken with Acquire and released with Release), so it
// is shared between threads as a `Mutex<T>` shares it: `T: Send` suffices.
unsafe impl<T: Send> Sync for SpinLock<T> {}

/// Spins of a waiter before it yields its CPU.
const SPINS: u32 = 64;

impl<T> SpinLock<T> {
    /// `value`, unlocked.
    pub(crate) fn new(value: T) -> Self {
        SpinLock {
            locked: AtomicU32::new(0),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock (spinning, then yielding, while another thread holds it).
    #[inline(always)]
    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        // Uncontended: one atomic test-and-set of bit 0 and its branch.
        if self.locked.fetch_or(1, Ordering::Acquire) & 1 != 0 {
            self.lock_contended();
        }
        SpinGuard { lock: self }
    }

    /// Takes the lock if no other thread holds it (one atomic test-and-set); `None`
    /// otherwise.
    #[inline(always)]
    pub(crate) fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        if self.locked.fetch_or(1, Ordering::Acquire) & 1 != 0 {
            return None;
        }
        Some(SpinGuard { lock: self })
    }

    /// A guard of the lock, which the caller holds: the guard of a [`SpinLock::lock`]
    /// or [`SpinLock::try_lock`] it forgot (`std::mem::forget`) to hand the lock to
    /// another function.
    ///
    /// # Safety
    /// The caller holds the lock, and no other guard of it exists.
    #[inline(always)]
    pub(crate) unsafe fn held(&self) -> SpinGuard<'_, T> {
        debug_assert_ne!(
            self.locked.load(Ordering::Relaxed) & 1,
            0,
            "the lock is held"
        );
        SpinGuard { lock: self }
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        let mut spins = 0;
        loop {
            while self.locked.load(Ordering::Relaxed) != 0 {
                if spins < SPINS {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            if self.locked.fetch_or(1, Ordering::Acquire) & 1 == 0 {
                return;
            }
        }
    }

    /// The value, the lock consumed.
    pub(crate) fn into_inner(self) -> T {
        self.value.into_inner()
    }
}

/// The holder of a [`SpinLock`]: releases it when dropped (also on unwinding).
pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock: no other reference to the value exists.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard holds the lock, and `&mut self` makes this the only
        // reference through it.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        self.lock.locked.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Four threads adding 1 a hundred thousand times each under the lock: no
    /// increment is lost.
    #[test]
    fn the_lock_excludes() {
        let l = Arc::new(SpinLock::new(0u64));
        let ts: Vec<_> = (0..4)
            .map(|_| {
                let l = Arc::clone(&l);
                std::thread::spawn(move || {
                    for _ in 0..100_000 {
                        *l.lock() += 1;
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        assert_eq!(*l.lock(), 400_000);
    }
}

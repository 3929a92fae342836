//! Timers keyed by object number, none of whose operations scans the timers: a binary
//! min-heap of deadlines with lazy cancellation by generation numbers.
//!
//! Each key (a QPN for the transport's timers; any `u32` a user numbers its objects
//! by, such as a connection manager's local communication IDs) has at most one live
//! timer, recorded in a slot (a [`NumMap`] lookup) with the generation of its heap
//! entry. Re-arming pushes a new entry and leaves the old one in the heap, stale (its
//! generation no longer the slot's); a stale entry is dropped when it reaches the top,
//! so the top is always live and [`Timers::next`] is a read.
//!
//! | operation | cost |
//! |---|---|
//! | [`Timers::arm`] | O(log n) push (O(1) when the deadline is unchanged) |
//! | [`Timers::wake_by`] | O(1) when an entry at or before the deadline exists, else as `arm` |
//! | [`Timers::cancel`] | O(1) (plus the stale tops it drops) |
//! | [`Timers::pop_expired`] | O(log n) per timer that fires |
//! | [`Timers::next`] | O(1) |
//!
//! Stale entries are bounded: when they outnumber the live ones (plus a constant), the
//! heap is rebuilt from the live entries in place (O(n), paid for by the n operations
//! that made them stale), so memory follows the live timers, not the traffic. After
//! the heap and the slot table have grown to the number of live timers, nothing
//! allocates.
//!
//! Entries with the same deadline fire in the order they were armed (the generation
//! breaks ties), so expiry is deterministic.
//!
//! The simulator's transport keys them by QPN (ACK timeouts, RNR back-off); the
//! connection manager by local communication ID (response timeouts and
//! retransmissions, TimeWait). [`nummap`] holds the integer-keyed map they use.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod nummap;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::nummap::NumMap;

/// A heap entry: ordered by deadline, then by generation (arming order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    at: u64,
    gen: u64,
    key: u32,
}

/// The live timer of a key: its deadline and the generation of its heap entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    at: u64,
    gen: u64,
}

/// Stale entries tolerated beyond the live ones before the heap is rebuilt.
const STALE_SLACK: usize = 64;

/// Timers keyed by `u32` (see the module documentation).
#[derive(Debug, Default)]
pub struct Timers {
    heap: BinaryHeap<Reverse<Entry>>,
    slots: NumMap<u32, Slot>,
    next_gen: u64,
}

impl Timers {
    /// No timers.
    pub fn new() -> Timers {
        Timers::default()
    }

    /// Sets `key`'s timer to fire at `at`, replacing the one it had.
    pub fn arm(&mut self, key: u32, at: u64) {
        if self.slots.get(&key).is_some_and(|s| s.at == at) {
            return;
        }
        let gen = self.next_gen;
        self.next_gen += 1;
        self.slots.insert(key, Slot { at, gen });
        self.heap.push(Reverse(Entry { at, gen, key }));
        // The entry this one replaces may be the top.
        self.settle();
        self.bound_stale();
    }

    /// Makes `key`'s timer fire no later than `at`: a timer it has that fires at or
    /// before `at` is kept, a later one (or none) is replaced. For an owner that keeps
    /// its real deadline itself and checks it when the timer fires (a deadline that
    /// only moves later then costs nothing until it is reached).
    pub fn wake_by(&mut self, key: u32, at: u64) {
        if self.slots.get(&key).is_some_and(|s| s.at <= at) {
            return;
        }
        self.arm(key, at);
    }

    /// Stops `key`'s timer. Returns whether it had one.
    pub fn cancel(&mut self, key: u32) -> bool {
        let had = self.slots.remove(&key).is_some();
        if had {
            self.settle();
            self.bound_stale();
        }
        had
    }

    /// When `key`'s timer fires, if it has one.
    pub fn deadline(&self, key: u32) -> Option<u64> {
        self.slots.get(&key).map(|s| s.at)
    }

    /// The earliest deadline of all timers.
    pub fn next(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse(e)| e.at)
    }

    /// The earliest timer: its key and deadline.
    pub fn peek(&self) -> Option<(u32, u64)> {
        self.heap.peek().map(|Reverse(e)| (e.key, e.at))
    }

    /// Removes and returns the earliest timer if it fires at or before `now`: its key
    /// and deadline. Call until `None` to take every expired timer, earliest first
    /// (ties in arming order).
    pub fn pop_expired(&mut self, now: u64) -> Option<(u32, u64)> {
        let Reverse(top) = *self.heap.peek()?;
        if top.at > now {
            return None;
        }
        self.heap.pop();
        // The top is live (`settle`): its slot goes with it.
        self.slots.remove(&top.key);
        self.settle();
        Some((top.key, top.at))
    }

    /// Live timers.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether no timer is live.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Entries in the heap, live and stale (for the tests of the memory bound).
    pub fn entries(&self) -> usize {
        self.heap.len()
    }

    /// Removes every timer (the capacity is kept).
    pub fn clear(&mut self) {
        self.heap.clear();
        self.slots.clear();
    }

    fn live(slots: &NumMap<u32, Slot>, e: &Entry) -> bool {
        slots.get(&e.key).is_some_and(|s| s.gen == e.gen)
    }

    /// Drops the stale entries at the top, so that the top is live.
    fn settle(&mut self) {
        while let Some(Reverse(top)) = self.heap.peek() {
            if Self::live(&self.slots, top) {
                break;
            }
            self.heap.pop();
        }
    }

    /// Rebuilds the heap from its live entries once the stale ones outnumber them.
    fn bound_stale(&mut self) {
        if self.heap.len() > 2 * self.slots.len() + STALE_SLACK {
            let slots = &self.slots;
            self.heap.retain(|Reverse(e)| Self::live(slots, e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(t: &mut Timers, now: u64) -> Vec<(u32, u64)> {
        std::iter::from_fn(|| t.pop_expired(now)).collect()
    }

    #[test]
    fn fires_in_deadline_order_ties_in_arming_order() {
        let mut t = Timers::new();
        t.arm(5, 30);
        t.arm(1, 10);
        t.arm(9, 20);
        t.arm(3, 20);
        assert_eq!(t.next(), Some(10));
        assert_eq!(t.pop_expired(9), None);
        assert_eq!(drain(&mut t, 20), vec![(1, 10), (9, 20), (3, 20)]);
        assert_eq!(t.next(), Some(30));
        assert_eq!(t.len(), 1);
        assert_eq!(drain(&mut t, u64::MAX), vec![(5, 30)]);
        assert!(t.is_empty());
        assert_eq!(t.next(), None);
    }

    #[test]
    fn rearm_and_cancel_replace_the_old_entry() {
        let mut t = Timers::new();
        t.arm(1, 10);
        t.arm(2, 15);
        // Later: the entry at 10 goes stale and the top moves on at once.
        t.arm(1, 40);
        assert_eq!(t.next(), Some(15));
        assert_eq!(t.deadline(1), Some(40));
        // Earlier.
        t.arm(2, 5);
        assert_eq!(t.next(), Some(5));
        assert!(t.cancel(2));
        assert!(!t.cancel(2));
        assert_eq!(t.next(), Some(40));
        assert_eq!(drain(&mut t, 39), vec![]);
        assert_eq!(drain(&mut t, 40), vec![(1, 40)]);
        assert_eq!((t.len(), t.next()), (0, None));
    }

    #[test]
    fn wake_by_keeps_an_earlier_entry_and_replaces_a_later_one() {
        let mut t = Timers::new();
        t.wake_by(7, 100);
        t.wake_by(7, 150);
        assert_eq!(t.deadline(7), Some(100));
        assert_eq!(t.entries(), 1);
        t.wake_by(7, 60);
        assert_eq!((t.deadline(7), t.next()), (Some(60), Some(60)));
        assert_eq!(drain(&mut t, 100), vec![(7, 60)]);
    }

    #[test]
    fn stale_entries_stay_bounded_by_the_live_ones() {
        let mut t = Timers::new();
        // Key 0 holds the top; keys 1..=8 are re-armed earlier and earlier, each time
        // leaving a stale entry below the top.
        t.arm(0, 0);
        for round in 0..10_000u64 {
            for k in 1..=8u32 {
                t.arm(k, 1_000_000 - round * 10 - u64::from(k));
            }
            assert!(
                t.entries() <= 2 * t.len() + STALE_SLACK + 1,
                "{}",
                t.entries()
            );
        }
        assert_eq!(t.len(), 9);
        let fired = drain(&mut t, u64::MAX);
        assert_eq!(fired.len(), 9, "each live timer fires once: {fired:?}");
        assert_eq!(fired[0], (0, 0));
        assert_eq!(t.entries(), 0);
    }

    #[test]
    fn a_reused_key_does_not_revive_its_stale_entry() {
        let mut t = Timers::new();
        t.arm(0, 1);
        t.arm(4, 50);
        assert!(t.cancel(4));
        // A new timer of the same key later than the stale entry: the stale one
        // (generation of the old slot) must not fire at 50.
        t.arm(4, 80);
        assert_eq!(drain(&mut t, 60), vec![(0, 1)]);
        assert_eq!(drain(&mut t, 80), vec![(4, 80)]);
    }
}

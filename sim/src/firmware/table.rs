//! A firmware object table: numbered objects with use counts.
//!
//! Every resource the firmware hands out (UAR index, PD, transport domain, MKEY index,
//! EQN, CQN, QPN) lives in one of these. An object records how many other objects use
//! it (a CQ counts the QPs that complete to it, a PD the MKEYs and QPs in it, ...), so
//! that destroying one still in use can be refused with `BAD_RES_STATE`, as the
//! firmware does.

use std::collections::BTreeMap;

#[derive(Clone, Debug)]
struct Slot<T> {
    obj: T,
    users: u32,
}

/// Why an object could not be removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoveError {
    /// No object has this number.
    Unknown,
    /// Other objects still use it.
    InUse(u32),
}

/// Numbered objects in `[first, first + capacity)`, lowest free number first.
#[derive(Clone, Debug)]
pub struct Table<T> {
    slots: BTreeMap<u32, Slot<T>>,
    first: u32,
    capacity: u32,
    /// Next number to try (numbers are handed out round-robin, like firmware does
    /// for QPNs, so a stale number does not immediately name a new object).
    cursor: u32,
}

impl<T> Table<T> {
    /// A table numbering from `first`, holding at most `capacity` objects.
    pub fn new(first: u32, capacity: u32) -> Self {
        Table {
            slots: BTreeMap::new(),
            first,
            capacity: capacity.max(1),
            cursor: 0,
        }
    }

    /// Number of live objects.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The most objects the table holds.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Lowers the capacity (a capability set smaller); live objects are kept.
    pub fn set_capacity(&mut self, capacity: u32) {
        self.capacity = capacity.max(1);
        if self.cursor >= self.capacity {
            self.cursor = 0;
        }
    }

    /// Inserts `obj` under a free number; `None` when the table is full.
    pub fn insert(&mut self, obj: T) -> Option<u32> {
        if self.slots.len() as u64 >= u64::from(self.capacity) {
            return None;
        }
        // Round-robin from the cursor; the table is not full, so this terminates
        // within `capacity` probes. Probe the next free number with the map's order
        // instead of one by one.
        let mut probe = self.cursor;
        loop {
            let n = self.first.wrapping_add(probe);
            if let std::collections::btree_map::Entry::Vacant(e) = self.slots.entry(n) {
                e.insert(Slot { obj, users: 0 });
                self.cursor = (probe + 1) % self.capacity;
                return Some(n);
            }
            // Skip the run of used numbers starting at n.
            let mut next = probe + 1;
            for (&k, _) in self.slots.range(n + 1..) {
                if k != self.first.wrapping_add(next) {
                    break;
                }
                next += 1;
            }
            probe = if next >= self.capacity { 0 } else { next };
        }
    }

    /// The object numbered `n`.
    pub fn get(&self, n: u32) -> Option<&T> {
        self.slots.get(&n).map(|s| &s.obj)
    }

    /// The object numbered `n`, mutably.
    pub fn get_mut(&mut self, n: u32) -> Option<&mut T> {
        self.slots.get_mut(&n).map(|s| &mut s.obj)
    }

    /// Whether `n` names a live object.
    pub fn contains(&self, n: u32) -> bool {
        self.slots.contains_key(&n)
    }

    /// How many objects use `n` (0 for an unknown number).
    pub fn users(&self, n: u32) -> u32 {
        self.slots.get(&n).map_or(0, |s| s.users)
    }

    /// Records one more user of `n`; `false` if `n` is unknown.
    pub fn acquire(&mut self, n: u32) -> bool {
        match self.slots.get_mut(&n) {
            Some(s) => {
                s.users = s.users.saturating_add(1);
                true
            }
            None => false,
        }
    }

    /// Drops one user of `n` (no-op for an unknown number).
    pub fn release(&mut self, n: u32) {
        if let Some(s) = self.slots.get_mut(&n) {
            s.users = s.users.saturating_sub(1);
        }
    }

    /// Removes `n` unless it is unknown or still in use.
    pub fn remove(&mut self, n: u32) -> Result<T, RemoveError> {
        match self.slots.get(&n) {
            None => Err(RemoveError::Unknown),
            Some(s) if s.users > 0 => Err(RemoveError::InUse(s.users)),
            Some(_) => self
                .slots
                .remove(&n)
                .map(|s| s.obj)
                .ok_or(RemoveError::Unknown),
        }
    }

    /// Removes every object regardless of users (a forced teardown).
    pub fn clear(&mut self) {
        self.slots.clear();
        self.cursor = 0;
    }

    /// Live objects in number order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.slots.iter().map(|(&n, s)| (n, &s.obj))
    }

    /// Live objects in number order, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut T)> {
        self.slots.iter_mut().map(|(&n, s)| (n, &mut s.obj))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_unique_round_robin_and_bounded() {
        let mut t = Table::new(10, 3);
        assert_eq!(t.insert('a'), Some(10));
        assert_eq!(t.insert('b'), Some(11));
        assert_eq!(t.insert('c'), Some(12));
        assert_eq!(t.insert('d'), None);
        assert_eq!(t.remove(11), Ok('b'));
        assert_eq!(t.insert('e'), Some(11));
        t.remove(10).unwrap();
        t.remove(12).unwrap();
        // Round-robin: after 11 comes 12, then wraps to 10.
        assert_eq!(t.insert('f'), Some(12));
        assert_eq!(t.insert('g'), Some(10));
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn in_use_objects_cannot_be_removed() {
        let mut t = Table::new(1, 8);
        let n = t.insert(()).unwrap();
        assert!(t.acquire(n));
        assert!(t.acquire(n));
        assert_eq!(t.remove(n), Err(RemoveError::InUse(2)));
        t.release(n);
        t.release(n);
        assert_eq!(t.remove(n), Ok(()));
        assert_eq!(t.remove(n), Err(RemoveError::Unknown));
        assert!(!t.acquire(99));
    }

    #[test]
    fn skipping_long_used_runs_is_fast() {
        let mut t = Table::new(0, 100_000);
        for _ in 0..100_000 {
            t.insert(()).unwrap();
        }
        t.remove(99_999).unwrap();
        t.remove(5).unwrap();
        assert_eq!(t.insert(()), Some(5));
        assert_eq!(t.insert(()), Some(99_999));
    }
}

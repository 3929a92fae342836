//! Maps keyed by object numbers (QPN, CQN, MKEY index) for the packet path: the
//! integer-hashed [`NumMap`] (from `ferroverbs-timer`, shared with the connection
//! manager) and the directly indexed [`DirectIndex`].

pub use ferroverbs_timer::nummap::{NumHasher, NumMap};

/// Object numbers a [`DirectIndex`] holds: below 2^24 (MKEY indexes, QPNs and the like
/// are 24-bit).
pub const DIRECT_LIMIT: u32 = 1 << 24;

const PAGE_BITS: u32 = 8;
const PAGE: usize = 1 << PAGE_BITS;

/// A page of a [`DirectIndex`]: 256 consecutive numbers.
struct Page<T> {
    slots: [Option<Box<T>>; PAGE],
    live: u32,
}

/// A map from object numbers (below [`DIRECT_LIMIT`]) to objects, looked up by direct
/// indexing instead of a search: the number's high bits select a page of 256 slots,
/// its low byte the slot. A page is allocated when a number in it is first used and
/// freed when its last object goes, so memory follows the live objects (numbers are
/// handed out round-robin by the firmware and are mostly consecutive), and the page
/// table grows only to the highest number used (8 bytes per 256 numbers). The data
/// path looks an MKEY up by index for every lkey and rkey it uses.
pub struct DirectIndex<T> {
    pages: Vec<Option<Box<Page<T>>>>,
    len: usize,
}

impl<T> Default for DirectIndex<T> {
    fn default() -> Self {
        DirectIndex {
            pages: Vec::new(),
            len: 0,
        }
    }
}

impl<T> std::fmt::Debug for DirectIndex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectIndex")
            .field("len", &self.len)
            .field("pages", &self.pages.iter().flatten().count())
            .finish()
    }
}

impl<T> DirectIndex<T> {
    /// The object numbered `n`.
    #[inline]
    pub fn get(&self, n: u32) -> Option<&T> {
        let page = self.pages.get((n >> PAGE_BITS) as usize)?.as_deref()?;
        page.slots[n as usize & (PAGE - 1)].as_deref()
    }

    /// The object numbered `n`, mutably.
    #[inline]
    pub fn get_mut(&mut self, n: u32) -> Option<&mut T> {
        let page = self
            .pages
            .get_mut((n >> PAGE_BITS) as usize)?
            .as_deref_mut()?;
        page.slots[n as usize & (PAGE - 1)].as_deref_mut()
    }

    /// Stores `obj` as number `n`, returning the object it replaces; `Err(obj)` (nothing
    /// stored) for a number at or above [`DIRECT_LIMIT`].
    pub fn insert(&mut self, n: u32, obj: T) -> Result<Option<T>, T> {
        if n >= DIRECT_LIMIT {
            return Err(obj);
        }
        let p = (n >> PAGE_BITS) as usize;
        if self.pages.len() <= p {
            self.pages.resize_with(p + 1, || None);
        }
        let page = self.pages[p].get_or_insert_with(|| {
            Box::new(Page {
                slots: std::array::from_fn(|_| None),
                live: 0,
            })
        });
        let old = page.slots[n as usize & (PAGE - 1)].replace(Box::new(obj));
        if old.is_none() {
            page.live += 1;
            self.len += 1;
        }
        Ok(old.map(|b| *b))
    }

    /// Removes and returns the object numbered `n` (its page goes with its last object).
    pub fn remove(&mut self, n: u32) -> Option<T> {
        let p = (n >> PAGE_BITS) as usize;
        let page = self.pages.get_mut(p)?.as_deref_mut()?;
        let old = page.slots[n as usize & (PAGE - 1)].take()?;
        page.live -= 1;
        self.len -= 1;
        if page.live == 0 {
            self.pages[p] = None;
            // The page table shrinks back to the highest page in use.
            while self.pages.last().is_some_and(Option::is_none) {
                self.pages.pop();
            }
        }
        Some(*old)
    }

    /// Removes every object.
    pub fn clear(&mut self) {
        self.pages.clear();
        self.len = 0;
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Pages allocated (for the tests of the memory bound).
    pub fn pages(&self) -> usize {
        self.pages.iter().flatten().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_index_inserts_finds_replaces_and_removes() {
        let mut m: DirectIndex<u64> = DirectIndex::default();
        assert!(m.is_empty());
        assert_eq!(m.get(0), None);
        assert_eq!(m.get(u32::MAX), None);
        assert_eq!(m.remove(7), None);
        // Numbers across pages, the first and last of a page, the limit's neighbours.
        let ns = [
            0u32,
            1,
            2,
            255,
            256,
            257,
            1000,
            65_535,
            65_536,
            DIRECT_LIMIT - 1,
        ];
        for &n in &ns {
            assert_eq!(m.insert(n, u64::from(n) * 3), Ok(None));
        }
        assert_eq!(m.len(), ns.len());
        for &n in &ns {
            assert_eq!(m.get(n), Some(&(u64::from(n) * 3)));
        }
        // Neighbours of live numbers in live pages, and numbers in absent pages.
        for n in [3u32, 254, 258, 999, 1001, 65_534, 65_537, DIRECT_LIMIT - 2] {
            assert_eq!(m.get(n), None, "{n}");
        }
        for n in [DIRECT_LIMIT, DIRECT_LIMIT + 1, u32::MAX] {
            assert_eq!(m.get(n), None);
            assert_eq!(m.insert(n, 1), Err(1));
            assert_eq!(m.remove(n), None);
        }
        assert_eq!(m.len(), ns.len());
        // Replacing returns the old object and keeps the count.
        assert_eq!(m.insert(256, 9), Ok(Some(768)));
        *m.get_mut(256).unwrap() += 1;
        assert_eq!(m.get(256), Some(&10));
        assert_eq!(m.len(), ns.len());
        // Removing: each once; a page goes with its last object; the table shrinks.
        assert_eq!(m.pages(), 6);
        assert_eq!(
            m.remove(DIRECT_LIMIT - 1),
            Some(u64::from(DIRECT_LIMIT - 1) * 3)
        );
        assert_eq!(m.remove(DIRECT_LIMIT - 1), None);
        assert_eq!(m.pages(), 5);
        assert_eq!(m.pages.len(), 65_536 / PAGE + 1);
        for n in [65_535u32, 65_536] {
            m.remove(n).unwrap();
        }
        assert_eq!(m.pages(), 3);
        assert_eq!(m.pages.len(), 1000 / PAGE + 1);
        // Reuse of a removed number.
        m.remove(1).unwrap();
        assert_eq!(m.get(1), None);
        assert_eq!(m.insert(1, 11), Ok(None));
        assert_eq!(m.get(1), Some(&11));
        m.clear();
        assert!(m.is_empty());
        assert_eq!(m.pages(), 0);
        assert_eq!(m.get(1), None);
    }

    #[test]
    fn direct_index_memory_follows_the_live_objects() {
        // Round-robin numbering, as the firmware's tables hand numbers out: 100,000
        // objects created and destroyed with at most 10 alive keep at most two pages.
        let mut m: DirectIndex<u32> = DirectIndex::default();
        for n in 0..100_000u32 {
            m.insert(n, n).unwrap();
            if n >= 10 {
                assert_eq!(m.remove(n - 10), Some(n - 10));
            }
            assert!(m.pages() <= 2);
        }
        assert_eq!(m.len(), 10);
    }
}

//! Firmware page accounting: the host memory the firmware asks for and holds.
//!
//! A ConnectX keeps its ICM (context tables and firmware state) in host memory the
//! driver gives it page by page with MANAGE_PAGES. QUERY_PAGES tells the driver how
//! many pages each phase needs: *boot* pages before anything else, *init* pages before
//! INIT_HCA, and *regular* pages while running, which can be negative when the
//! firmware wants to give some back (Linux `pagealloc.c`, rdma-core
//! `mlx5_vfio_setup_function`). The firmware may also ask at run time with a
//! PAGE_REQUEST event (EQE type 0x0b) carrying a signed page count.
//!
//! The simulator does not store anything in the pages, but it holds them: it checks
//! each one when given (4 KiB aligned, mapped writable, not already held), counts
//! them, refuses INIT_HCA until enough were given, and hands them back on TAKE.

use std::collections::BTreeSet;

/// Which phase QUERY_PAGES asks about (its op_mod).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PagePhase {
    /// op_mod 1: pages needed before INIT_HCA's preparation (boot).
    Boot,
    /// op_mod 2: pages needed by INIT_HCA.
    Init,
    /// op_mod 3: pages wanted (or to be returned) while running.
    Regular,
}

impl PagePhase {
    /// Decodes QUERY_PAGES op_mod.
    pub fn from_op_mod(op_mod: u16) -> Option<Self> {
        match op_mod {
            1 => Some(PagePhase::Boot),
            2 => Some(PagePhase::Init),
            3 => Some(PagePhase::Regular),
            _ => None,
        }
    }
}

/// Why a page could not be given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GiveError {
    /// The address is not 4 KiB aligned.
    Misaligned(u64),
    /// The page is already held (given twice).
    Duplicate(u64),
}

/// The firmware's page ledger.
#[derive(Clone, Debug)]
pub struct Pages {
    held: BTreeSet<u64>,
    boot: u64,
    init: u64,
    /// Run-time adjustment asked for with page requests (signed).
    extra: i64,
    given_total: u64,
    taken_total: u64,
    abandoned: u64,
}

impl Pages {
    /// A ledger for a firmware that needs `boot` boot pages and `init` init pages.
    pub fn new(boot: u32, init: u32) -> Self {
        Pages {
            held: BTreeSet::new(),
            boot: u64::from(boot),
            init: u64::from(init),
            extra: 0,
            given_total: 0,
            taken_total: 0,
            abandoned: 0,
        }
    }

    /// Pages currently held.
    pub fn held(&self) -> u64 {
        self.held.len() as u64
    }

    /// Whether `iova` is a page the firmware holds.
    pub fn holds(&self, iova: u64) -> bool {
        self.held.contains(&iova)
    }

    /// Pages the firmware holds inside `[iova, iova + len)`.
    pub fn held_in(&self, iova: u64, len: u64) -> usize {
        let end = iova.saturating_add(len);
        self.held
            .range(iova.saturating_sub(4095)..end)
            .filter(|&&p| p + 4096 > iova)
            .count()
    }

    /// Pages given since creation.
    pub fn given_total(&self) -> u64 {
        self.given_total
    }

    /// Pages taken back since creation.
    pub fn taken_total(&self) -> u64 {
        self.taken_total
    }

    /// Pages the device still held when the function was disabled: the driver never
    /// took them back.
    pub fn abandoned(&self) -> u64 {
        self.abandoned
    }

    /// Whether INIT_HCA has the pages it needs.
    pub fn init_satisfied(&self) -> bool {
        self.held() >= self.boot + self.init
    }

    /// Pages the firmware wants while running (before any request: boot + init).
    pub fn target(&self) -> u64 {
        let base = (self.boot + self.init) as i64;
        (base + self.extra).max(0) as u64
    }

    /// The QUERY_PAGES answer for `phase` (`num_pages`, signed).
    pub fn query(&self, phase: PagePhase, initialized: bool) -> i32 {
        let held = self.held() as i64;
        let v = match phase {
            PagePhase::Boot => (self.boot as i64 - held).max(0),
            PagePhase::Init => ((self.boot + self.init) as i64 - held).max(0),
            PagePhase::Regular if initialized => self.target() as i64 - held,
            PagePhase::Regular => 0,
        };
        v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
    }

    /// Checks a GIVE list without changing anything.
    pub fn check_give(&self, pages: &[u64]) -> Result<(), GiveError> {
        let mut seen = BTreeSet::new();
        for &p in pages {
            if p & 0xfff != 0 {
                return Err(GiveError::Misaligned(p));
            }
            if self.held.contains(&p) || !seen.insert(p) {
                return Err(GiveError::Duplicate(p));
            }
        }
        Ok(())
    }

    /// Takes the pages of a GIVE (already checked).
    pub fn give(&mut self, pages: &[u64]) -> Result<(), GiveError> {
        self.check_give(pages)?;
        self.held.extend(pages.iter().copied());
        self.given_total += pages.len() as u64;
        Ok(())
    }

    /// How many pages a TAKE of `n` would return: the firmware keeps what it needs
    /// while initialized, and gives everything back otherwise.
    pub fn takeable(&self, n: u64, initialized: bool) -> u64 {
        let floor = if initialized { self.target() } else { 0 };
        n.min(self.held().saturating_sub(floor))
    }

    /// Returns up to `n` pages (most recently given addresses last-in first-out is not
    /// promised; the highest IOVAs are returned first).
    pub fn take(&mut self, n: u64, initialized: bool) -> Vec<u64> {
        let count = self.takeable(n, initialized);
        let mut out = Vec::with_capacity(count as usize);
        for _ in 0..count {
            if let Some(p) = self.held.pop_last() {
                out.push(p);
            }
        }
        self.taken_total += out.len() as u64;
        out
    }

    /// The firmware wants `delta` more pages (negative: fewer). Returns the signed
    /// count to put in the PAGE_REQUEST event.
    pub fn request(&mut self, delta: i32) -> i32 {
        self.extra = self.extra.saturating_add(i64::from(delta));
        delta
    }

    /// MANAGE_PAGES CANT_GIVE: the driver cannot satisfy the outstanding request, so
    /// the firmware stops asking.
    pub fn cant_give(&mut self) {
        let base = (self.boot + self.init) as i64;
        let held = self.held() as i64;
        if self.target() as i64 > held {
            self.extra = held - base;
        }
    }

    /// Carries the cumulative counters over a function reset.
    pub fn restore_totals(&mut self, given: u64, taken: u64, abandoned: u64) {
        self.given_total = given;
        self.taken_total = taken;
        self.abandoned = abandoned;
    }

    /// DISABLE_HCA: the function forgets its pages; those not taken back are counted
    /// as abandoned. The run-time adjustment is reset.
    pub fn release_all(&mut self) {
        self.abandoned += self.held();
        self.held.clear();
        self.extra = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pages(base: u64, n: u64) -> Vec<u64> {
        (0..n).map(|i| base + i * 4096).collect()
    }

    #[test]
    fn boot_then_init_then_regular() {
        let mut p = Pages::new(4, 8);
        assert_eq!(p.query(PagePhase::Boot, false), 4);
        assert_eq!(p.query(PagePhase::Init, false), 12);
        p.give(&pages(0x10000, 4)).unwrap();
        assert_eq!(p.query(PagePhase::Boot, false), 0);
        assert_eq!(p.query(PagePhase::Init, false), 8);
        assert!(!p.init_satisfied());
        p.give(&pages(0x20000, 8)).unwrap();
        assert!(p.init_satisfied());
        assert_eq!(p.query(PagePhase::Regular, true), 0);
        assert_eq!(p.request(3), 3);
        assert_eq!(p.query(PagePhase::Regular, true), 3);
        p.give(&pages(0x30000, 3)).unwrap();
        assert_eq!(p.query(PagePhase::Regular, true), 0);
        // While initialized only the surplus can be taken.
        assert_eq!(p.take(10, true), Vec::<u64>::new());
        p.request(-2);
        assert_eq!(p.query(PagePhase::Regular, true), -2);
        assert_eq!(p.take(10, true).len(), 2);
        // Torn down: everything comes back.
        assert_eq!(p.take(100, false).len(), 13);
        assert_eq!(p.held(), 0);
        assert_eq!(p.given_total(), 15);
        assert_eq!(p.taken_total(), 15);
    }

    #[test]
    fn bad_gives_change_nothing() {
        let mut p = Pages::new(1, 1);
        assert_eq!(p.give(&[0x1001]), Err(GiveError::Misaligned(0x1001)));
        assert_eq!(
            p.give(&[0x1000, 0x2000, 0x1000]),
            Err(GiveError::Duplicate(0x1000))
        );
        assert_eq!(p.held(), 0);
        p.give(&[0x1000]).unwrap();
        assert_eq!(p.give(&[0x1000]), Err(GiveError::Duplicate(0x1000)));
        assert_eq!(p.held_in(0x1000, 1), 1);
        assert_eq!(p.held_in(0x1fff, 1), 1);
        assert_eq!(p.held_in(0x2000, 4096), 0);
        assert_eq!(p.held_in(0, 0x1001), 1);
    }

    #[test]
    fn cant_give_and_release_all() {
        let mut p = Pages::new(1, 1);
        p.give(&[0x1000, 0x2000]).unwrap();
        p.request(5);
        assert_eq!(p.query(PagePhase::Regular, true), 5);
        p.cant_give();
        assert_eq!(p.query(PagePhase::Regular, true), 0);
        p.release_all();
        assert_eq!(p.abandoned(), 2);
        assert_eq!(p.held(), 0);
    }
}

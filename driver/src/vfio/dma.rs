//! DMA through the IOMMU: hugepage arenas, user-memory mappings, the memlock check.
//!
//! * **Arenas** are blocks of host memory, 2 MiB hugepages when the system has them
//!   (`mmap(MAP_HUGETLB | MAP_HUGE_2MB)`), 4 KiB pages otherwise (with a `tracing`
//!   warning, or a [`VfioError::NoHugepages`] when hugepages are required). Each arena
//!   is mapped with one `VFIO_IOMMU_MAP_DMA` at a 2 MiB-aligned IOVA, so the IOMMU
//!   can use 2 MiB pages and the 65535-mapping limit of type1 is never approached
//!   (reference §6.1 item 6); [`DmaChunk`]s are carved out of arenas.
//! * **NUMA placement**: an arena is bound to the device's node with
//!   `mbind(MPOL_PREFERRED)` before any page of it is touched, then every page is
//!   touched by the calling thread, so the pages come from that node whichever CPU
//!   runs the thread (no pinning needed). `MPOL_PREFERRED` rather than `MPOL_BIND`:
//!   a hugetlb fault that cannot be satisfied on a bound node kills the process with
//!   SIGBUS, while a preferred node falls back to another one. A failing `mbind`
//!   (no NUMA, seccomp) is a warning, not an error.
//! * Arenas are `madvise(MADV_DONTFORK)`: a forked child never shares, and so never
//!   copies-on-write, pages the device writes. User memory passed to `dma_map` is the
//!   caller's to protect the same way.
//! * **User memory** (memory regions) is mapped on demand by [`Bus::dma_map`]
//!   (`ferroverbs_hw::Bus`): the range is widened to whole IOMMU pages, mapped at a
//!   fresh IOVA, and the returned IOVA keeps the offset into the first page. A range
//!   that lies inside an arena is not mapped again: its arena IOVA is returned and the
//!   use counted.
//! * Everything is undone on drop: user mappings first, then arenas (unmap, then
//!   unmap the memory). Memory whose IOMMU unmap fails is leaked rather than freed,
//!   because the device might still reach it.
//!
//! The IOMMU calls go through [`IommuMapper`] so that all of this bookkeeping is
//! tested with a fake IOMMU.

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use ferroverbs_hw::{BusError, DmaPerm};
use memmap2::{MmapMut, MmapOptions};

use super::error::VfioError;
use super::iova::{IommuInfo, IovaAllocator};
use super::sysfs::Sysfs;

/// The hugepage size arenas use.
pub const HUGE_PAGE: usize = 2 << 20;
/// The smallest page the device deals in.
pub const PAGE: usize = 4096;

/// What the IOMMU does for the DMA bookkeeping (a VFIO container, or a fake in tests).
pub(crate) trait IommuMapper: Send + Sync {
    /// Maps `len` bytes at host address `vaddr` to `iova`.
    ///
    /// # Safety
    /// The memory must stay allocated (and not be remapped) until [`unmap`] of the same
    /// IOVA range returns successfully: the device may access it at any time.
    ///
    /// [`unmap`]: IommuMapper::unmap
    unsafe fn map(&self, vaddr: usize, iova: u64, len: u64, perm: DmaPerm) -> io::Result<()>;

    /// Removes the mapping of `len` bytes at `iova`.
    fn unmap(&self, iova: u64, len: u64) -> io::Result<()>;
}

/// Whether arenas use hugepages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HugePages {
    /// Use 2 MiB hugepages; fail with [`VfioError::NoHugepages`] when there are none.
    Require,
    /// Use hugepages when available, else 4 KiB pages with a warning (the default).
    #[default]
    Prefer,
    /// Always use 4 KiB pages.
    Never,
}

/// A piece of an arena: host memory the device reaches at `iova`.
///
/// A plain handle: the memory belongs to the arena (freed with the bus) and is given
/// back with [`VfioBus::free_dma`](super::VfioBus::free_dma). It is shared with the
/// device, so access it only through raw pointers with volatile or atomic operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaChunk {
    /// Host address of byte 0.
    pub vaddr: usize,
    /// Device address of byte 0.
    pub iova: u64,
    /// Length in bytes (a multiple of 4 KiB).
    pub len: usize,
}

impl DmaChunk {
    /// Host pointer to byte 0.
    pub fn as_ptr(&self) -> *mut u8 {
        self.vaddr as *mut u8
    }
}

/// Host memory of one arena.
#[derive(Debug)]
pub struct ArenaMem {
    mem: MmapMut,
    base: usize,
    huge: bool,
}

impl ArenaMem {
    /// Allocates `len` bytes (rounded up to 2 MiB), zeroed, preferably on `node`.
    pub fn new(
        len: usize,
        policy: HugePages,
        node: Option<u32>,
        sysfs: &Sysfs,
    ) -> Result<Self, VfioError> {
        let len = len.max(1).div_ceil(HUGE_PAGE) * HUGE_PAGE;
        let huge = if policy == HugePages::Never {
            None
        } else {
            match MmapOptions::new().len(len).huge(Some(21)).map_anon() {
                Ok(m) => Some(m),
                Err(e) => {
                    let pages = (len / HUGE_PAGE) as u64;
                    let counts = sysfs
                        .hugepages(2048, node)
                        .or_else(|| sysfs.hugepages(2048, None));
                    if policy == HugePages::Require {
                        let c =
                            counts.unwrap_or(super::sysfs::HugepageCounts { total: 0, free: 0 });
                        return Err(VfioError::NoHugepages {
                            needed: pages,
                            free: c.free,
                            total: c.total,
                            node: node.filter(|_| sysfs.hugepages(2048, node).is_some()),
                        });
                    }
                    tracing::warn!(
                        bytes = len,
                        error = %e,
                        free_hugepages = counts.map(|c| c.free),
                        "no 2 MiB hugepages for a DMA arena; using 4 KiB pages (slower IOMMU \
                         lookups, more memlock bookkeeping). Reserve hugepages with \
                         `echo N > /proc/sys/vm/nr_hugepages`"
                    );
                    None
                }
            }
        };
        let (mut mem, huge) = match huge {
            Some(m) => (m, true),
            None => (
                MmapOptions::new()
                    .len(len)
                    .map_anon()
                    .map_err(|e| VfioError::os("mmap of a DMA arena", e))?,
                false,
            ),
        };
        let base = mem.as_mut_ptr() as usize;
        // A child process must not share (and copy-on-write) pages the device writes.
        if let Err(e) = mem.advise(memmap2::Advice::DontFork) {
            tracing::warn!("madvise(MADV_DONTFORK) of a DMA arena failed: {e}");
        }
        if let Some(n) = node {
            if let Err(e) = mbind_preferred(base, len, n) {
                tracing::warn!(node = n, "mbind(MPOL_PREFERRED) of a DMA arena failed: {e}");
            }
        }
        let step = if huge { HUGE_PAGE } else { PAGE };
        for off in (0..len).step_by(step) {
            // SAFETY: `off < len`, inside the anonymous mapping we own; nothing else
            // references it yet (it is not mapped for the device), and the write is a
            // volatile zero, the value the page already holds: it only faults the page
            // in, under the NUMA policy just set.
            unsafe { std::ptr::write_volatile((base + off) as *mut u8, 0) };
        }
        Ok(ArenaMem { mem, base, huge })
    }

    /// Host address of byte 0.
    pub fn base(&self) -> usize {
        self.base
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.mem.len()
    }

    /// Always false (at least one hugepage).
    pub fn is_empty(&self) -> bool {
        self.mem.len() == 0
    }

    /// Whether the memory is backed by 2 MiB hugepages.
    pub fn is_huge(&self) -> bool {
        self.huge
    }
}

/// `mbind(addr, len, MPOL_PREFERRED, {node}, ...)` through `syscall(2)` (libc has no
/// wrapper; the numbers are the kernel's `MPOL_PREFERRED = 1`).
fn mbind_preferred(addr: usize, len: usize, node: u32) -> io::Result<()> {
    const MPOL_PREFERRED: libc::c_ulong = 1;
    let bits = libc::c_ulong::BITS as usize;
    let words = node as usize / bits + 1;
    let mut mask = vec![0 as libc::c_ulong; words];
    mask[node as usize / bits] |= 1 << (node as usize % bits);
    // The kernel reads `maxnode - 1` bits.
    let maxnode = (words * bits + 1) as libc::c_ulong;
    // SAFETY: mbind reads `words` longs from `mask`, which owns them, and changes only
    // the memory policy of `addr..addr + len`, an anonymous mapping owned by the caller.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr as libc::c_ulong,
            len as libc::c_ulong,
            MPOL_PREFERRED,
            mask.as_ptr(),
            maxnode,
            0 as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The soft `RLIMIT_MEMLOCK`, `None` when unlimited.
pub fn memlock_limit() -> io::Result<Option<u64>> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `struct rlimit` to the pointer, which points at a
    // live local of that type.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // rlim_t is 32 bits on some targets.
    #[allow(clippy::unnecessary_cast)]
    let cur = rl.rlim_cur as u64;
    Ok((rl.rlim_cur != libc::RLIM_INFINITY).then_some(cur))
}

/// `CAP_IPC_LOCK`, which exempts a process from VFIO's memlock accounting.
pub const CAP_IPC_LOCK: u32 = 14;

/// The effective capability set from the text of `/proc/self/status` (`CapEff:`).
pub fn parse_cap_eff(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

/// Whether this process has `CAP_IPC_LOCK` in its effective set.
pub fn has_cap_ipc_lock() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| parse_cap_eff(&s))
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

/// VFIO type1 charges every pinned page to `RLIMIT_MEMLOCK` unless the process has
/// `CAP_IPC_LOCK` (Linux `vfio_iommu_type1.c`, `lock_cap`). Fails when `needed` bytes
/// exceed a finite `limit` without the capability.
pub fn check_memlock(needed: u64, limit: Option<u64>, cap_ipc_lock: bool) -> Result<(), VfioError> {
    match limit {
        Some(limit) if !cap_ipc_lock && needed > limit => {
            Err(VfioError::MemlockTooLow { needed, limit })
        }
        _ => Ok(()),
    }
}

/// An arena: memory, its IOVA, and the chunks carved from it.
#[derive(Debug)]
struct Arena {
    mem: ArenaMem,
    iova: u64,
    /// Free offsets inside the arena.
    chunks: IovaAllocator,
}

impl Arena {
    fn contains(&self, vaddr: usize, len: usize) -> bool {
        vaddr >= self.mem.base()
            && vaddr
                .checked_add(len)
                .is_some_and(|e| e <= self.mem.base() + self.mem.len())
    }
}

/// One user mapping made by `dma_map`.
#[derive(Clone, Copy, Debug)]
struct UserMap {
    /// IOVA of the first whole page.
    base_iova: u64,
    /// Bytes mapped (whole pages).
    map_len: u64,
    /// The length the caller asked for.
    len: usize,
}

/// All DMA state of one container.
#[derive(Debug)]
pub(crate) struct DmaSpace<M: IommuMapper> {
    mapper: Arc<M>,
    iova: IovaAllocator,
    page: u64,
    arena_len: usize,
    policy: HugePages,
    node: Option<u32>,
    sysfs: Sysfs,
    arenas: Vec<Arena>,
    /// User mappings by the IOVA returned to the caller.
    user: BTreeMap<u64, UserMap>,
    /// Arena-backed `dma_map` results and their use counts, by (IOVA, length).
    arena_refs: BTreeMap<(u64, usize), usize>,
}

/// Where the arena bytes live and how they are placed.
#[derive(Clone, Debug)]
pub(crate) struct ArenaPolicy {
    pub arena_len: usize,
    pub hugepages: HugePages,
    pub node: Option<u32>,
    pub sysfs: Sysfs,
}

impl<M: IommuMapper> DmaSpace<M> {
    pub(crate) fn new(mapper: Arc<M>, info: &IommuInfo, policy: ArenaPolicy) -> Self {
        DmaSpace {
            mapper,
            iova: IovaAllocator::for_iommu(info),
            page: info.min_page_size().max(PAGE as u64),
            arena_len: policy.arena_len.max(HUGE_PAGE),
            policy: policy.hugepages,
            node: policy.node,
            sysfs: policy.sysfs,
            arenas: Vec::new(),
            user: BTreeMap::new(),
            arena_refs: BTreeMap::new(),
        }
    }

    /// Number of live IOMMU mappings (arenas and user mappings).
    pub(crate) fn mappings(&self) -> usize {
        self.arenas.len() + self.user.len()
    }

    /// Number of arenas and how many are hugepage-backed.
    pub(crate) fn arena_count(&self) -> (usize, usize) {
        (
            self.arenas.len(),
            self.arenas.iter().filter(|a| a.mem.is_huge()).count(),
        )
    }

    /// Creates and maps a new arena of at least `len` bytes.
    pub(crate) fn grow(&mut self, len: usize) -> Result<usize, VfioError> {
        let len = len.max(self.arena_len).div_ceil(HUGE_PAGE) * HUGE_PAGE;
        let mem = ArenaMem::new(len, self.policy, self.node, &self.sysfs)?;
        let len = mem.len();
        let iova = self
            .iova
            .alloc(len as u64, HUGE_PAGE as u64)
            .ok_or_else(|| VfioError::Dma {
                len,
                reason: "no IOVA space left for an arena".into(),
            })?;
        // SAFETY: the arena memory is owned by the Arena stored below and is unmapped
        // from the IOMMU (Drop) before it is freed.
        if let Err(e) = unsafe { self.mapper.map(mem.base(), iova, len as u64, DmaPerm::RW) } {
            // Undo the IOVA; `mem` is freed as it goes out of scope (never mapped).
            let _ = self.iova.free(iova, len as u64);
            return Err(map_error(len, e));
        }
        self.arenas.push(Arena {
            chunks: IovaAllocator::new(
                &[super::iova::IovaRange {
                    start: 0,
                    end: len as u64 - 1,
                }],
                0,
            ),
            mem,
            iova,
        });
        Ok(self.arenas.len() - 1)
    }

    /// Carves `len` bytes (rounded up to 4 KiB) aligned to `align` (at least 4 KiB)
    /// out of an arena, adding one when none has room.
    pub(crate) fn alloc(&mut self, len: usize, align: usize) -> Result<DmaChunk, VfioError> {
        let len = len.max(1).div_ceil(PAGE) * PAGE;
        let align = align.max(PAGE);
        if !align.is_power_of_two() || align > HUGE_PAGE {
            return Err(VfioError::Dma {
                len,
                reason: format!("alignment {align:#x} is not a power of two up to 2 MiB"),
            });
        }
        let found = self
            .arenas
            .iter_mut()
            .enumerate()
            .find_map(|(i, a)| a.chunks.alloc(len as u64, align as u64).map(|off| (i, off)));
        let (i, off) = match found {
            Some(x) => x,
            None => {
                let i = self.grow(len)?;
                let off = self.arenas[i]
                    .chunks
                    .alloc(len as u64, align as u64)
                    .ok_or_else(|| VfioError::Dma {
                        len,
                        reason: "a fresh arena had no room".into(),
                    })?;
                (i, off)
            }
        };
        let a = &self.arenas[i];
        Ok(DmaChunk {
            vaddr: a.mem.base() + off as usize,
            iova: a.iova + off,
            len,
        })
    }

    /// Gives a chunk back to its arena.
    pub(crate) fn free(&mut self, chunk: DmaChunk) -> Result<(), BusError> {
        let not_mapped = BusError::NotMapped {
            iova: chunk.iova,
            len: chunk.len,
        };
        let a = self
            .arenas
            .iter_mut()
            .find(|a| a.contains(chunk.vaddr, chunk.len))
            .ok_or(not_mapped.clone())?;
        let off = (chunk.vaddr - a.mem.base()) as u64;
        if a.iova + off != chunk.iova {
            return Err(not_mapped);
        }
        a.chunks.free(off, chunk.len as u64).map_err(|_| not_mapped)
    }

    /// `Bus::dma_map`.
    pub(crate) fn map(&mut self, vaddr: usize, len: usize, perm: DmaPerm) -> Result<u64, BusError> {
        if len == 0 || vaddr.checked_add(len).is_none() {
            return Err(BusError::BadRange { vaddr, len });
        }
        if let Some(a) = self.arenas.iter().find(|a| a.contains(vaddr, len)) {
            // Arenas are mapped read-write, a superset of any `perm`.
            let iova = a.iova + (vaddr - a.mem.base()) as u64;
            *self.arena_refs.entry((iova, len)).or_insert(0) += 1;
            return Ok(iova);
        }
        let page = self.page;
        let start = (vaddr as u64) & !(page - 1);
        let end = (vaddr as u64 + len as u64)
            .checked_add(page - 1)
            .ok_or(BusError::BadRange { vaddr, len })?
            & !(page - 1);
        let map_len = end - start;
        let align = if start.is_multiple_of(HUGE_PAGE as u64) && map_len >= HUGE_PAGE as u64 {
            HUGE_PAGE as u64
        } else {
            page
        };
        let base_iova = self
            .iova
            .alloc(map_len, align)
            .ok_or(BusError::NoIovaSpace { len })?;
        // SAFETY: the Bus contract makes the caller keep `vaddr..vaddr + len` alive and
        // in place until dma_unmap; the widening to whole pages covers only pages that
        // hold part of that range.
        if let Err(e) = unsafe { self.mapper.map(start as usize, base_iova, map_len, perm) } {
            let _ = self.iova.free(base_iova, map_len);
            return Err(BusError::MapRefused {
                len,
                reason: map_error(len, e).to_string(),
            });
        }
        let iova = base_iova + (vaddr as u64 - start);
        self.user.insert(
            iova,
            UserMap {
                base_iova,
                map_len,
                len,
            },
        );
        Ok(iova)
    }

    /// `Bus::dma_unmap`.
    pub(crate) fn unmap(&mut self, iova: u64, len: usize) -> Result<(), BusError> {
        if let Some(m) = self.user.get(&iova).copied() {
            if m.len != len {
                return Err(BusError::NotMapped { iova, len });
            }
            self.mapper
                .unmap(m.base_iova, m.map_len)
                .map_err(|e| BusError::MapRefused {
                    len,
                    reason: format!("VFIO_IOMMU_UNMAP_DMA: {e}"),
                })?;
            self.user.remove(&iova);
            let _ = self.iova.free(m.base_iova, m.map_len);
            return Ok(());
        }
        match self.arena_refs.get_mut(&(iova, len)) {
            Some(n) => {
                *n -= 1;
                if *n == 0 {
                    self.arena_refs.remove(&(iova, len));
                }
                Ok(())
            }
            None => Err(BusError::NotMapped { iova, len }),
        }
    }
}

fn map_error(len: usize, e: io::Error) -> VfioError {
    let hint = match e.raw_os_error() {
        Some(libc::ENOMEM) => {
            "; ENOMEM from VFIO usually means RLIMIT_MEMLOCK is exhausted: raise `ulimit -l` \
             or grant CAP_IPC_LOCK (docs/vfio.md)"
        }
        Some(libc::ENOSPC) => "; the container's DMA mapping limit (dma_entry_limit) is reached",
        Some(libc::EEXIST) => "; the IOVA range is already mapped",
        _ => "",
    };
    VfioError::Dma {
        len,
        reason: format!("VFIO_IOMMU_MAP_DMA: {e}{hint}"),
    }
}

impl<M: IommuMapper> Drop for DmaSpace<M> {
    fn drop(&mut self) {
        for (iova, m) in std::mem::take(&mut self.user) {
            if let Err(e) = self.mapper.unmap(m.base_iova, m.map_len) {
                tracing::warn!(iova, "unmapping user DMA memory failed: {e}");
            }
        }
        for a in std::mem::take(&mut self.arenas) {
            match self.mapper.unmap(a.iova, a.mem.len() as u64) {
                Ok(()) => drop(a),
                Err(e) => {
                    tracing::error!(
                        iova = a.iova,
                        "unmapping a DMA arena failed ({e}); leaking its memory, which the \
                         device may still reach"
                    );
                    std::mem::forget(a.mem);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::vfio::iova::{IovaRange, MIN_IOVA};

    /// An IOMMU that records what it is asked to do.
    #[derive(Default)]
    struct FakeIommu {
        maps: Mutex<BTreeMap<u64, (usize, u64, DmaPerm)>>,
        log: Mutex<Vec<String>>,
        fail_maps: Mutex<u32>,
    }

    impl IommuMapper for FakeIommu {
        unsafe fn map(&self, vaddr: usize, iova: u64, len: u64, perm: DmaPerm) -> io::Result<()> {
            let mut f = self.fail_maps.lock().unwrap();
            if *f > 0 {
                *f -= 1;
                return Err(io::Error::from_raw_os_error(libc::ENOMEM));
            }
            assert_eq!(vaddr % PAGE, 0, "VFIO needs page-aligned vaddr");
            assert_eq!(iova % PAGE as u64, 0);
            assert_eq!(len % PAGE as u64, 0);
            let mut maps = self.maps.lock().unwrap();
            // Overlap is EEXIST in VFIO.
            let end = iova + len;
            assert!(maps
                .iter()
                .all(|(&i, &(_, l, _))| end <= i || i + l <= iova));
            maps.insert(iova, (vaddr, len, perm));
            self.log
                .lock()
                .unwrap()
                .push(format!("map {iova:#x}+{len:#x}"));
            Ok(())
        }

        fn unmap(&self, iova: u64, len: u64) -> io::Result<()> {
            let mut maps = self.maps.lock().unwrap();
            match maps.get(&iova) {
                Some(&(_, l, _)) if l == len => {
                    maps.remove(&iova);
                    self.log
                        .lock()
                        .unwrap()
                        .push(format!("unmap {iova:#x}+{len:#x}"));
                    Ok(())
                }
                _ => Err(io::Error::from_raw_os_error(libc::EINVAL)),
            }
        }
    }

    fn space(fake: &Arc<FakeIommu>, ranges: Option<Vec<IovaRange>>) -> DmaSpace<FakeIommu> {
        let info = IommuInfo {
            page_sizes: Some(0x4020_1000),
            ranges,
            dma_avail: None,
        };
        DmaSpace::new(
            Arc::clone(fake),
            &info,
            ArenaPolicy {
                arena_len: HUGE_PAGE,
                hugepages: HugePages::Prefer,
                node: Some(0),
                sysfs: Sysfs::default(),
            },
        )
    }

    #[test]
    fn user_memory_is_widened_to_pages_and_keeps_its_offset() {
        let fake = Arc::new(FakeIommu::default());
        let mut dma = space(&fake, None);
        let buf = vec![0u8; 3 * PAGE];
        let vaddr = buf.as_ptr() as usize + 100;
        let iova = dma.map(vaddr, 5000, DmaPerm::RO).unwrap();
        assert_eq!(
            iova % PAGE as u64,
            (vaddr % PAGE) as u64,
            "offset in page kept"
        );
        assert!(iova >= MIN_IOVA);
        {
            let maps = fake.maps.lock().unwrap();
            let (&base, &(v, l, perm)) = maps.iter().next().unwrap();
            assert_eq!(base, iova & !(PAGE as u64 - 1));
            assert_eq!(v, vaddr & !(PAGE - 1));
            assert_eq!(l as usize, (vaddr + 5000).div_ceil(PAGE) * PAGE - v);
            assert_eq!(perm, DmaPerm::RO);
        }
        assert_eq!(dma.mappings(), 1);
        assert!(matches!(
            dma.unmap(iova, 4999),
            Err(BusError::NotMapped { .. })
        ));
        dma.unmap(iova, 5000).unwrap();
        assert!(fake.maps.lock().unwrap().is_empty());
        assert!(matches!(
            dma.unmap(iova, 5000),
            Err(BusError::NotMapped { .. })
        ));
        // The IOVA is reused.
        let again = dma.map(vaddr, 5000, DmaPerm::RW).unwrap();
        assert_eq!(again, iova);
        assert!(matches!(
            dma.map(0, 0, DmaPerm::RW),
            Err(BusError::BadRange { .. })
        ));
        assert!(matches!(
            dma.map(usize::MAX - 10, 100, DmaPerm::RW),
            Err(BusError::BadRange { .. })
        ));
    }

    #[test]
    fn arenas_chunks_and_arena_backed_dma_map() {
        let fake = Arc::new(FakeIommu::default());
        let mut dma = space(&fake, None);
        let a = dma.alloc(100, 0).unwrap();
        assert_eq!(a.len, PAGE);
        assert_eq!(a.iova % HUGE_PAGE as u64, 0, "arena IOVA is 2 MiB aligned");
        assert_eq!(dma.arena_count().0, 1);
        let b = dma.alloc(PAGE, 64 * 1024).unwrap();
        assert_eq!(b.iova % (64 * 1024), 0);
        assert_eq!(
            b.iova - a.iova,
            (b.vaddr - a.vaddr) as u64,
            "one linear mapping"
        );
        // The memory is usable (zeroed) host memory.
        // SAFETY: `b` is a live chunk of PAGE bytes that no device touches in this test.
        unsafe {
            assert_eq!(std::ptr::read_volatile(b.as_ptr()), 0);
            std::ptr::write_volatile(b.as_ptr().add(PAGE - 1), 7);
        }
        // dma_map inside an arena: no new IOMMU mapping, the arena IOVA, counted.
        let n = fake.maps.lock().unwrap().len();
        let i1 = dma.map(b.vaddr + 8, 16, DmaPerm::RW).unwrap();
        let i2 = dma.map(b.vaddr + 8, 16, DmaPerm::RO).unwrap();
        assert_eq!((i1, i2), (b.iova + 8, b.iova + 8));
        assert_eq!(fake.maps.lock().unwrap().len(), n);
        dma.unmap(i1, 16).unwrap();
        dma.unmap(i1, 16).unwrap();
        assert!(dma.unmap(i1, 16).is_err());
        // A chunk larger than the arena makes a bigger arena.
        let big = dma.alloc(3 * HUGE_PAGE, 0).unwrap();
        assert_eq!(dma.arena_count().0, 2);
        assert_eq!(big.len, 3 * HUGE_PAGE);
        // Free and reuse.
        dma.free(a).unwrap();
        assert!(dma.free(a).is_err(), "double free");
        let c = dma.alloc(PAGE, 0).unwrap();
        assert_eq!(c, a);
        let forged = DmaChunk {
            iova: c.iova + 1,
            ..c
        };
        assert!(dma.free(forged).is_err());
        assert!(dma.alloc(PAGE, 3 * PAGE).is_err());
    }

    #[test]
    fn failure_halfway_leaves_nothing_behind() {
        let fake = Arc::new(FakeIommu::default());
        let mut dma = space(
            &fake,
            Some(vec![IovaRange {
                start: 0,
                end: (8 << 20) - 1,
            }]),
        );
        let free_before = dma.iova.free_bytes();
        *fake.fail_maps.lock().unwrap() = 1;
        let e = dma.alloc(PAGE, 0).unwrap_err();
        assert!(e.to_string().contains("RLIMIT_MEMLOCK"), "{e}");
        assert_eq!(dma.iova.free_bytes(), free_before, "IOVA given back");
        assert_eq!(dma.arena_count().0, 0);
        let buf = vec![0u8; PAGE];
        *fake.fail_maps.lock().unwrap() = 1;
        assert!(matches!(
            dma.map(buf.as_ptr() as usize, 10, DmaPerm::RW),
            Err(BusError::MapRefused { .. })
        ));
        assert_eq!(dma.iova.free_bytes(), free_before);
        // IOVA exhaustion: 8 MiB of space minus the floor holds 3 arenas of 2 MiB.
        for _ in 0..3 {
            dma.grow(HUGE_PAGE).unwrap();
        }
        assert!(matches!(dma.grow(HUGE_PAGE), Err(VfioError::Dma { .. })));
        assert_eq!(dma.arena_count().0, 3);
        assert!(fake.maps.lock().unwrap().len() == 3);
    }

    #[test]
    fn drop_unmaps_user_mappings_then_arenas() {
        let fake = Arc::new(FakeIommu::default());
        let buf = vec![0u8; 2 * PAGE];
        {
            let mut dma = space(&fake, None);
            dma.alloc(PAGE, 0).unwrap();
            dma.map(buf.as_ptr() as usize, 10, DmaPerm::RW).unwrap();
            assert_eq!(dma.mappings(), 2);
        }
        assert!(fake.maps.lock().unwrap().is_empty());
        let log = fake.log.lock().unwrap().clone();
        assert_eq!(log.len(), 4, "{log:?}");
        assert!(log[0].starts_with("map") && log[1].starts_with("map"));
        // The user mapping (mapped second) goes first, the arena last.
        let user = log[1].replace("map", "unmap");
        let arena = log[0].replace("map", "unmap");
        assert_eq!(log[2..], [user, arena]);
    }

    #[test]
    fn hugepage_policy() {
        let sysfs = Sysfs::default();
        // Prefer always works; Never never uses hugepages.
        let m = ArenaMem::new(PAGE, HugePages::Prefer, Some(0), &sysfs).unwrap();
        assert_eq!(m.len(), HUGE_PAGE);
        assert!(!m.is_empty());
        assert_eq!(m.base() % PAGE, 0);
        let m = ArenaMem::new(1, HugePages::Never, None, &sysfs).unwrap();
        assert!(!m.is_huge());
        // Require fails exactly when the system has no free hugepage.
        let free = sysfs.hugepages(2048, None).map_or(0, |c| c.free);
        match ArenaMem::new(PAGE, HugePages::Require, None, &sysfs) {
            Ok(m) => assert!(m.is_huge() && free > 0),
            // Usually because none is free; a cgroup hugetlb limit can refuse too.
            Err(VfioError::NoHugepages { needed, .. }) => assert_eq!(needed, 1),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn memlock_rules() {
        assert!(check_memlock(4 << 20, None, false).is_ok());
        assert!(check_memlock(4 << 20, Some(8 << 20), false).is_ok());
        assert!(check_memlock(4 << 20, Some(64 << 10), true).is_ok());
        let e = check_memlock(4 << 20, Some(64 << 10), false).unwrap_err();
        assert!(matches!(
            e,
            VfioError::MemlockTooLow {
                needed: 0x40_0000,
                limit: 0x1_0000
            }
        ));
        assert!(e.to_string().contains("ulimit -l"), "{e}");
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001fffeffffff\n";
        assert_eq!(parse_cap_eff(status), Some(0x1fffeffffff));
        assert_eq!(parse_cap_eff("CapEff:\tzz\n"), None);
        assert_eq!(parse_cap_eff(""), None);
        memlock_limit().unwrap();
    }
}

//! Doorbells: libmlx5 rings them with plain stores into the UAR pages it mapped from
//! the uverbs file (rdma-core `providers/mlx5/qp.c: post_send_db`, `cq.c:
//! mlx5_arm_cq`), with no system call. Here those pages are pages of the memfd that
//! backs the uverbs descriptor, at the file offsets `mlx5_ib` gives them. On x86-64
//! a page mapped through the interposed `mmap` is read-only and each store is
//! trapped and forwarded on the thread that made it ([`crate::mmio_trap`],
//! [`forward`]); this module's thread then sleeps (one look a second), except while
//! a page is hot (a busy poller's, left writable): then the poll wrappers forward its
//! doorbells ([`flush_hot`]) and the thread looks every [`HOT_TICK`] and traps the
//! page again once [`COOL_LOOKS`] looks saw no empty poll.
//!
//! The layer also maps every UAR page of a context itself (a *shadow* page,
//! [`add_shadow`]). A program whose `mmap` does not reach this library (UCX's UCM
//! patches `mmap` and calls the system call itself) maps the memfd at the same
//! offset and so stores into the same memory, unseen by the trap: while a UAR page
//! has no mapping made through the interposed `mmap`, the thread watches its shadow.
//!
//! Where stores are not trapped (`FERROVERBS_DOORBELLS=watch`, another
//! architecture, a store the decoder does not know, or a shadow page as above), the
//! thread plays the part of the ConnectX's MMIO decoder by watching the pages:
//!
//! * it takes (swaps to zero) the 64-bit CQ arm doorbell at offset 0x20 of each page
//!   and the send doorbells at the BlueFlame registers (0x800 + k · bf_reg_size, both
//!   halves), and forwards them to the simulated device's UAR as MMIO writes;
//! * a send doorbell only says "some QP of this context rang": two QPs sharing a
//!   register may overwrite each other's store before it is seen, so on every send
//!   doorbell the thread compares each QP's send doorbell record (the producer index
//!   libmlx5 writes before the doorbell, `MLX5_SND_DBR`) with the one it last
//!   forwarded, and rings the device for every QP whose record moved. The device
//!   reads the WQEs up to that record from the application's SQ buffer (a BlueFlame
//!   copy repeats what the buffer holds).
//!
//! CQ arms likewise: libmlx5 arms every CQ of a context through the same register
//! (offset 0x20 of UAR page 0), so two arms in a row leave only the second there. On
//! a store to that register the thread forwards the arm word of every CQ of the
//! context whose arm doorbell record (`MLX5_CQ_ARM_DB`, written by libmlx5 before
//! the doorbell) differs from the one it last forwarded. CREATE_CQ sets that word to
//! [`ARM_NEVER`], a value libmlx5 never writes (it writes `sn << 28 | cmd | ci`, bits
//! 25 to 27 and 30, 31 clear), so the first arm, all zeros, is seen as a change.
//!
//! Receive queues and SRQs have no doorbell: the device reads their doorbell records
//! when a message arrives, as a ConnectX does.
//!
//! Latency and idle cost: after a doorbell the thread spins (with a pause hint) for
//! [`SPIN`], then sleeps [`TICK`] between looks (with a timer slack of 1 ns) until
//! [`ACTIVE`] has passed without a doorbell, then [`NAP`] between looks, and
//! [`DEEP_NAP`] once [`ASLEEP`] has passed: an idle process costs 250 looks a second,
//! and the first doorbell after a long pause waits up to 4 ms. Short sleeps rather than yields: on a
//! machine whose cores are taken by busy-polling applications (libmlx5 polls its CQs
//! in memory), a thread that wakes from a sleep is scheduled ahead of the spinners,
//! where a yielding one waits for its time slice.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ferroverbs_hw::datapath::uar::uar_bar_offset;
use ferroverbs_hw::Bus;

use crate::nic::Nic;

/// Spinning after a doorbell.
pub const SPIN: Duration = Duration::from_micros(20);
/// Sleep between looks while active.
pub const TICK: Duration = Duration::from_micros(20);
/// How long after the last doorbell the thread counts as active.
pub const ACTIVE: Duration = Duration::from_millis(50);
/// Sleep between looks when idle.
pub const NAP: Duration = Duration::from_millis(1);
/// How long after the last doorbell the thread counts as asleep.
pub const ASLEEP: Duration = Duration::from_secs(1);
/// Sleep between looks when asleep.
pub const DEEP_NAP: Duration = Duration::from_millis(4);

/// Offset of the CQ arm doorbell in a UAR page (`MLX5_CQ_DOORBELL`).
const CQ_DOORBELL: usize = 0x20;
/// Offset of the first BlueFlame register (`MLX5_BF_OFFSET`).
const BF_OFFSET: usize = 0x800;

struct Page {
    file: u64,
    addr: usize,
    /// Which UAR page of the context it maps ([`uar_key`]).
    key: u64,
    /// The layer's own mapping ([`add_shadow`]), not the application's.
    shadow: bool,
}

/// The arm doorbell record word of a CQ that was never armed.
pub const ARM_NEVER: u32 = 0xffff_ffff;

struct CqWatch {
    file: u64,
    cqn: u32,
    /// Address of the CQ's arm doorbell record word (`db_addr + 4`).
    arm_dbr: usize,
    last: u32,
}

struct QpWatch {
    file: u64,
    qpn: u32,
    /// Address of the QP's send doorbell record word (`db_addr + 4`).
    sq_dbr: usize,
    last: u32,
}

#[derive(Default)]
struct Watch {
    pages: Vec<Page>,
    qps: Vec<QpWatch>,
    cqs: Vec<CqWatch>,
}

static WATCH: Mutex<Watch> = Mutex::new(Watch {
    pages: Vec::new(),
    qps: Vec::new(),
    cqs: Vec::new(),
});
/// Doorbells forwarded (for the statistics line and tests).
pub static FORWARDED: AtomicU64 = AtomicU64::new(0);

fn lock() -> std::sync::MutexGuard<'static, Watch> {
    WATCH.lock().unwrap_or_else(|e| e.into_inner())
}

/// The environment variable that chooses how doorbells reach the device: `trap`
/// (the default on x86-64, [`crate::mmio_trap`]) or `watch` (this thread).
pub const MODE_ENV: &str = "FERROVERBS_DOORBELLS";

static NIC: std::sync::OnceLock<&'static Nic> = std::sync::OnceLock::new();

/// Which UAR page of a context the mmap page offset `pgoff` names: a static page's
/// index (its regular, WC and NC offsets name one page, `mlx5_ib_mmap`), or the
/// offset itself for a page the library allocated (at
/// [`crate::verbs::MMAP_OFFSET_START`] and above).
pub fn uar_key(pgoff: u64) -> u64 {
    if pgoff >= crate::verbs::MMAP_OFFSET_START {
        pgoff
    } else {
        crate::file::mmap_command(pgoff).1
    }
}

/// Watches the UAR page `key` of context `file`, mapped by the application at
/// `addr` through the interposed `mmap` (trapping its stores where it can,
/// [`crate::mmio_trap::add_page`]).
pub fn add_page(file: u64, addr: usize, key: u64) {
    let trapped = crate::mmio_trap::add_page(addr);
    let mut w = lock();
    if trapped {
        if let Some(s) = w
            .pages
            .iter()
            .find(|p| p.shadow && p.file == file && p.key == key)
        {
            crate::mmio_trap::set_shadow(addr, s.addr);
        }
    }
    w.pages.push(Page {
        file,
        addr,
        key,
        shadow: false,
    });
}

/// Adds the layer's own read-write mapping at `addr` of UAR page `key` of context
/// `file`: watched while the application has no mapping of that page made through
/// the interposed `mmap` (then its stores land in this memory, not in a trap).
pub fn add_shadow(file: u64, addr: usize, key: u64) {
    let mut w = lock();
    for p in w
        .pages
        .iter()
        .filter(|p| !p.shadow && p.file == file && p.key == key)
    {
        crate::mmio_trap::set_shadow(p.addr, addr);
    }
    w.pages.push(Page {
        file,
        addr,
        key,
        shadow: true,
    });
    drop(w);
    // A trapping watcher sleeps; it looks again (and, while the page stays
    // unclaimed, watches it).
    wake_watcher();
}

/// Stops watching the shadow mapping at `addr` (before the layer unmaps it).
pub fn remove_shadow(addr: usize) {
    // A page hot through this shadow is trapped again, and what was stored before
    // that is forwarded, before the shadow goes.
    crate::mmio_trap::clear_shadow(addr);
    if let Some(nic) = NIC.get() {
        scan_shadow(nic, addr);
    }
    lock().pages.retain(|p| !(p.shadow && p.addr == addr));
}

/// Whether shadow page `p` has an application mapping made through the interposed
/// `mmap`.
fn claimed(pages: &[Page], p: &Page) -> bool {
    pages
        .iter()
        .any(|q| !q.shadow && q.file == p.file && q.key == p.key)
}

/// Whether some UAR page is mapped only behind this library's back (its shadow
/// must be watched even while stores are trapped).
pub fn unclaimed_shadows() -> usize {
    let w = lock();
    w.pages
        .iter()
        .filter(|p| p.shadow && !claimed(&w.pages, p))
        .count()
}

/// Forwards the doorbell store of `width` bytes of `raw` (the register's value as
/// the CPU held it: the big-endian bytes libmlx5 stores) at offset `off` of a UAR
/// page to the device's UAR, as the MMIO write it is. Widths other than 8 and 4 are
/// dropped, as a ConnectX drops them. Called by the trap handler, on the thread that
/// stored.
pub fn forward(off: usize, width: usize, raw: u64) {
    let Some(nic) = NIC.get() else {
        return;
    };
    let bus = nic.ctx.bus();
    let at = uar_bar_offset(nic.uar) + off;
    match width {
        8 => bus.write64(at, u64::from_be(raw)),
        4 => bus.write32(at, u32::from_be(raw as u32)),
        _ => return,
    }
    FORWARDED.fetch_add(1, Ordering::Relaxed);
}

/// The futex word the watcher thread sleeps on while doorbells are trapped.
static WAKE: AtomicU32 = AtomicU32::new(0);

/// Wakes the watcher thread (async-signal-safe: one atomic store and a futex wake).
pub fn wake_watcher() {
    WAKE.store(1, Ordering::Release);
    // SAFETY: FUTEX_WAKE on a static word; no other memory is touched.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            WAKE.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        )
    };
}

/// Sleeps (at most 1 s) while doorbells are trapped and nobody called
/// [`wake_watcher`].
fn wait_while_trapped() {
    let ts = libc::timespec {
        tv_sec: 1,
        tv_nsec: 0,
    };
    // SAFETY: FUTEX_WAIT on a static word with a valid timeout.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            WAKE.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            0u32,
            &ts as *const libc::timespec,
        )
    };
}

/// Stops watching whatever application page lies in `[addr, addr + len)`; true if
/// one did.
pub fn remove_pages(addr: usize, len: usize) -> bool {
    let mut w = lock();
    let inside = |p: &Page| !p.shadow && p.addr >= addr && p.addr < addr.saturating_add(len);
    for p in w.pages.iter().filter(|p| inside(p)) {
        crate::mmio_trap::remove_page(p.addr);
    }
    let before = w.pages.len();
    w.pages.retain(|p| !inside(p));
    w.pages.len() != before
}

/// Watches QP `qpn` of `file`, whose doorbell record is at `db_addr`.
pub fn add_qp(file: u64, qpn: u32, db_addr: u64) {
    lock().qps.push(QpWatch {
        file,
        qpn,
        sq_dbr: db_addr as usize + 4,
        last: 0,
    });
}

/// Watches CQ `cqn` of `file`, whose doorbell record is at `db_addr` (its arm word
/// holding [`ARM_NEVER`]).
pub fn add_cq(file: u64, cqn: u32, db_addr: u64) {
    lock().cqs.push(CqWatch {
        file,
        cqn,
        arm_dbr: db_addr as usize + 4,
        last: ARM_NEVER,
    });
}

/// Stops watching CQ `cqn`.
pub fn remove_cq(cqn: u32) {
    lock().cqs.retain(|c| c.cqn != cqn);
}

/// Restarts QP `qpn`'s producer index at 0 (after a modify to RESET, where libmlx5
/// zeroes its doorbell record).
pub fn reset_qp(qpn: u32) {
    for q in lock().qps.iter_mut().filter(|q| q.qpn == qpn) {
        q.last = 0;
    }
}

/// Stops watching QP `qpn` (before its buffers may be freed).
pub fn remove_qp(qpn: u32) {
    lock().qps.retain(|q| q.qpn != qpn);
}

/// Stops watching everything of `file`.
pub fn remove_file(file: u64) {
    let mut w = lock();
    for p in w.pages.iter().filter(|p| p.file == file) {
        crate::mmio_trap::remove_page(p.addr);
    }
    w.pages.retain(|p| p.file != file);
    w.qps.retain(|q| q.file != file);
    w.cqs.retain(|c| c.file != file);
}

/// Takes the 64-bit register at `addr` (zero: nothing was stored).
///
/// # Safety
///
/// `addr` is 8-byte aligned inside a watched page (an anonymous mapping this layer
/// made and that is still mapped: unmapping removes the page under the lock first).
unsafe fn take(addr: usize) -> u64 {
    // SAFETY: the caller's; the application stores to it with plain 8-byte stores,
    // which an atomic swap on the same aligned word sees whole.
    let w = unsafe { &*(addr as *const AtomicU64) };
    if w.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    u64::from_be(w.swap(0, Ordering::AcqRel))
}

/// One look at every watched register; true if a doorbell was forwarded. With
/// `trapped`, the application's pages are the trap's and only the shadows of pages
/// mapped behind the library's back are looked at; otherwise the application's
/// pages and the shadows of pages it has not mapped through the interposed `mmap`.
fn scan(nic: &Nic, trapped: bool) -> bool {
    let mut w = lock();
    let Watch { pages, qps, cqs } = &mut *w;
    let mut work = false;
    for p in pages.iter() {
        let look = if p.shadow {
            !claimed(pages, p)
        } else {
            !trapped
        };
        if look {
            // SAFETY: a watched page, mapped while it is in the list (under the lock).
            work |= unsafe { scan_page(nic, p.file, p.addr, qps, cqs) };
        }
    }
    work
}

/// Takes the CQ arm and send registers of the page at `addr` of context `file` and
/// forwards what moved (see the module's documentation); true if something rang.
///
/// # Safety
///
/// `addr` is a watched page, read-write (an application page in `watch` mode or a
/// shadow), mapped while the caller holds the watch lock.
unsafe fn scan_page(
    nic: &Nic,
    file: u64,
    addr: usize,
    qps: &mut [QpWatch],
    cqs: &mut [CqWatch],
) -> bool {
    let bus = nic.ctx.bus();
    let uar = uar_bar_offset(nic.uar);
    let bf = nic.bf_reg_size() as usize;
    let mut work = false;
    // SAFETY: offset 0x20 of a watched page.
    if unsafe { take(addr + CQ_DOORBELL) } != 0 {
        work = true;
        for c in cqs.iter_mut().filter(|c| c.file == file) {
            // SAFETY: the CQ's doorbell record, allocated while the CQ exists (it
            // leaves the watch before DESTROY_CQ returns).
            let v = unsafe { &*(c.arm_dbr as *const AtomicU32) }.load(Ordering::Acquire);
            if v != c.last {
                c.last = v;
                let word = u32::from_be(v);
                if crate::trace() {
                    eprintln!("uapi: CQ {:#x} arm {word:#010x}", c.cqn);
                }
                bus.write64(
                    uar + CQ_DOORBELL,
                    (u64::from(word) << 32) | u64::from(c.cqn),
                );
                FORWARDED.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    let mut rang = false;
    for off in send_registers(bf) {
        // SAFETY: an aligned register inside a watched page.
        rang |= unsafe { take(addr + off) } != 0;
    }
    if rang {
        work = true;
        for q in qps.iter_mut().filter(|q| q.file == file) {
            // SAFETY: the QP's doorbell record, which stays allocated while the
            // QP exists (the QP is removed from the watch before DESTROY_QP
            // returns).
            let v = unsafe { &*(q.sq_dbr as *const AtomicU32) }.load(Ordering::Acquire);
            if v != q.last {
                if crate::trace() {
                    eprintln!("uapi: QP {:#x} SQ counter {:#x}", q.qpn, u32::from_be(v));
                }
                q.last = v;
                bus.write64(uar + BF_OFFSET, u64::from(q.qpn) << 8);
                FORWARDED.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    work
}

/// Offsets of the send registers of a UAR page: both halves of the first four
/// BlueFlame registers of `bf` bytes (libmlx5 alternates between the halves,
/// `mlx5_bf.offset ^= buf_size`).
fn send_registers(bf: usize) -> impl Iterator<Item = usize> {
    (0..8)
        .map(move |i| BF_OFFSET + (i / 2) * bf + (i % 2) * bf / 2)
        .filter(|off| off + 8 <= 4096)
}

/// Whether a page is hot ([`crate::mmio_trap`]): its doorbells are plain stores
/// that [`flush_hot`] forwards. One load: the poll wrapper's test.
#[inline(always)]
pub fn hot() -> bool {
    crate::mmio_trap::HOT_COUNT.load(Ordering::Relaxed) != 0
}

/// Forwards the doorbells stored in the hot pages since the last look (read
/// through the layer's shadow of each): called by the poll wrappers and the
/// completion channel's `read` while a page is hot, and by the watcher thread. A
/// look that finds every register zero takes no lock.
#[cold]
#[inline(never)]
pub fn flush_hot() -> bool {
    let Some(nic) = NIC.get() else {
        return false;
    };
    let bf = nic.bf_reg_size() as usize;
    let mut work = false;
    crate::mmio_trap::for_each_hot(|shadow| {
        let set = |off: usize| {
            // SAFETY: an aligned word of a hot page's shadow, the layer's own
            // read-write mapping, unmapped only after it leaves the hot table
            // (closing a context while another thread polls its CQs is the
            // program's use after free, as in rdma-core).
            unsafe { &*((shadow + off) as *const AtomicU64) }.load(Ordering::Relaxed) != 0
        };
        if set(CQ_DOORBELL) || send_registers(bf).any(set) {
            work |= scan_shadow(nic, shadow);
        }
    });
    work
}

/// Forwards every doorbell a program stored that has not reached the device yet
/// (those of hot pages and of watched pages; a trapped store is forwarded when it is
/// made). Called before a command that changes or destroys a QP and at exit: a
/// ConnectX sees a doorbell store long before the command the program issues after
/// it (PCIe posted writes are not passed by later posted writes, PCIe base
/// specification's ordering rules), so a send a program rang just before it destroys
/// its QP or exits has left the port on hardware and must leave it here too.
pub fn forward_pending() {
    let Some(nic) = NIC.get() else {
        return;
    };
    if hot() {
        flush_hot();
    }
    scan(nic, crate::mmio_trap::enabled());
}

/// At exit, [`forward_pending`], unless another thread holds the watch for longer
/// than 100 ms (the process may exit from a thread that interrupted one holding it).
extern "C" fn forward_at_exit() {
    for _ in 0..100 {
        match WATCH.try_lock() {
            Ok(g) => {
                drop(g);
                forward_pending();
                return;
            }
            Err(std::sync::TryLockError::Poisoned(_)) => return,
            Err(std::sync::TryLockError::WouldBlock) => {
                std::thread::sleep(Duration::from_millis(1))
            }
        }
    }
}

/// Scans the shadow page at `addr`, if it is still watched.
fn scan_shadow(nic: &Nic, addr: usize) -> bool {
    let mut w = lock();
    let Watch { pages, qps, cqs } = &mut *w;
    let Some(file) = pages
        .iter()
        .find(|p| p.shadow && p.addr == addr)
        .map(|p| p.file)
    else {
        return false;
    };
    // SAFETY: a watched shadow (read-write, mapped while listed, under the lock).
    unsafe { scan_page(nic, file, addr, qps, cqs) }
}

/// Sleep between the watcher's looks at hot pages (a fallback: the poll wrapper
/// forwards their doorbells).
pub const HOT_TICK: Duration = Duration::from_micros(200);
/// Looks at hot pages without an empty poll between them, and with no poller inside
/// its assist, after which the watcher traps the pages again (1 ms: a busy poller
/// descheduled for a look or two on a loaded machine stays hot, and one whose empty
/// poll yielded the core to another program stays hot however long that lasts).
pub const COOL_LOOKS: u32 = 5;

/// The environment variable naming a file to which the process appends, at exit,
/// one line of its doorbell counts: `doorbells trapped T forwarded F pages_gone_hot
/// H empty_polls_assisted A` (F counts the trapped ones too).
pub const STATS_ENV: &str = "FERROVERBS_DOORBELL_STATS";

extern "C" fn write_stats() {
    let Some(path) = std::env::var_os(STATS_ENV) else {
        return;
    };
    let line = format!(
        "doorbells trapped {} forwarded {} pages_gone_hot {} empty_polls_assisted {}\n",
        crate::mmio_trap::TRAPPED.load(Ordering::Relaxed),
        FORWARDED.load(Ordering::Relaxed),
        crate::mmio_trap::WENT_HOT.load(Ordering::Relaxed),
        crate::poll_assist::assists(),
    );
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
    {
        let _ = f.write_all(line.as_bytes());
    }
}

/// Starts the doorbell thread.
pub fn start(nic: &'static Nic) {
    let _ = NIC.set(nic);
    // SAFETY: registers a function without arguments of this library (which stays
    // loaded), run at exit.
    unsafe { libc::atexit(forward_at_exit) };
    if std::env::var_os(STATS_ENV).is_some() {
        // SAFETY: registers a function without arguments, run at exit.
        unsafe { libc::atexit(write_stats) };
    }
    let spawned = std::thread::Builder::new()
        .name("uapi-doorbells".into())
        .spawn(move || {
            // SAFETY: prctl on the calling thread; no pointers.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
            let tick = std::env::var("FERROVERBS_DOORBELL_TICK_US")
                .ok()
                .and_then(|v| v.parse().ok())
                .map_or(TICK, Duration::from_micros);
            let mut active = Instant::now();
            let mut polls = crate::poll_assist::assists();
            let mut hot_look = Instant::now();
            let mut was_hot = false;
            let mut quiet = 0;
            loop {
                let trapped = crate::mmio_trap::enabled();
                if trapped && hot() {
                    // Hot pages: the poll wrapper forwards their doorbells; this
                    // thread looks too, now and then, and traps them again once the
                    // program stops polling (its next doorbell is then forwarded
                    // at once, by the trap). The first look of a hot spell only
                    // starts the count of polls.
                    if !was_hot {
                        was_hot = true;
                        polls = crate::poll_assist::assists();
                        hot_look = Instant::now();
                        quiet = 0;
                    }
                    flush_hot();
                    if hot_look.elapsed() >= HOT_TICK {
                        let now = crate::poll_assist::assists();
                        // A poller inside its assist (yielding to a busy
                        // machine) is still polling: not a quiet look.
                        let idle = now == polls && !crate::poll_assist::assisting();
                        quiet = if idle { quiet + 1 } else { 0 };
                        if quiet >= COOL_LOOKS {
                            quiet = 0;
                            for s in crate::mmio_trap::cool_all() {
                                if s != 0 {
                                    scan_shadow(nic, s);
                                }
                            }
                        }
                        polls = now;
                        hot_look = Instant::now();
                    }
                    if unclaimed_shadows() == 0 {
                        std::thread::sleep(HOT_TICK);
                        continue;
                    }
                    // Pages mapped behind the library's back are watched as ever.
                } else {
                    was_hot = false;
                }
                if trapped {
                    // Reset before looking, so a shadow added meanwhile wakes the
                    // wait below at once.
                    WAKE.store(0, Ordering::Release);
                    if unclaimed_shadows() == 0 {
                        wait_while_trapped();
                        active = Instant::now();
                        continue;
                    }
                }
                if scan(nic, trapped) {
                    active = Instant::now();
                    continue;
                }
                let idle = active.elapsed();
                if idle < SPIN {
                    std::hint::spin_loop();
                } else if idle < ACTIVE {
                    std::thread::sleep(tick);
                } else if idle < ASLEEP {
                    std::thread::sleep(NAP);
                } else {
                    std::thread::sleep(DEEP_NAP);
                }
            }
        });
    if let Err(e) = spawned {
        eprintln!("ferroverbs-uapi: cannot start the doorbell thread: {e}");
    }
}

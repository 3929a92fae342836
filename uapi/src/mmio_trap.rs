//! Doorbell stores trapped as a hypervisor traps the MMIO writes of an emulated
//! device: the UAR pages are mapped read-only, so libmlx5's doorbell store (a plain
//! `mov` to the page, rdma-core `util/mmio.h: mmio_write64_be`) faults; the SIGSEGV
//! handler decodes the faulting instruction ([`decode`]), takes the value from the
//! register file of the interrupted thread, hands it to the simulated device's UAR as
//! the MMIO write it is ([`crate::doorbell::forward`]), and resumes after the
//! instruction. The doorbell is serviced on the thread that rang it, as the drop-in
//! services its doorbells in `ibv_post_send`: no thread hand-off, and no thread
//! watching the pages while the program is idle.
//!
//! What the handler cannot decode (a store other than `mov` from a general register
//! or an immediate: a BlueFlame copy with vector stores) makes every trapped page
//! writable again and wakes the watcher thread ([`crate::doorbell`]), which then
//! observes the pages by reading them, as it does where this module is not built
//! (architectures other than x86-64) or when `FERROVERBS_DOORBELLS=watch` asks for
//! it. A fault on any other address goes to the handler the program had installed
//! before (or installs later, through [`app_sigaction`]), or to the default action.
//!
//! A fault per post costs a signal round trip. After a send doorbell of a
//! busy-polling program the page goes *hot* (`maybe_go_hot`): it stays writable,
//! its doorbells are plain stores, and the poll wrappers forward them
//! ([`crate::doorbell::flush_hot`]) until the watcher thread, seeing no empty poll
//! for a look, traps it again ([`cool_all`]).
//!
//! The handler runs on a thread stopped at a store in libmlx5's post or arm path: it
//! holds none of this library's or the simulator's locks, so the device's doorbell
//! work (which takes them) may run there; errno is preserved.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Most pages trapped at once (further pages are watched by the thread instead).
pub const MAX_PAGES: usize = 1024;

const PAGE: usize = 4096;

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: AtomicUsize = AtomicUsize::new(0);
/// Trapped page addresses (0: free slot); read lock-free by the handler.
static PAGES: [AtomicUsize; MAX_PAGES] = [EMPTY; MAX_PAGES];
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Set once a store could not be decoded: the pages are writable and watched.
static GAVE_UP: AtomicBool = AtomicBool::new(false);
/// Stores the handler decoded and forwarded.
pub static TRAPPED: AtomicUsize = AtomicUsize::new(0);
/// The layer's shadow mapping of the page in each slot of [`PAGES`] (0: none known);
/// a page goes hot only with one, through which hot pages are read.
static SHADOW_OF: [AtomicUsize; MAX_PAGES] = [EMPTY; MAX_PAGES];

/// Most pages whose loads are trapped at once (core clock pages).
pub const MAX_LOAD_PAGES: usize = 16;
/// Pages whose loads are trapped: this layer's `PROT_NONE` mappings, each standing
/// for a device register page ([`crate::clock`]); read lock-free by the handler.
static LOAD_PAGES: [AtomicUsize; MAX_LOAD_PAGES] = [EMPTY; MAX_LOAD_PAGES];
/// Loads the handler decoded and answered.
pub static LOADS: AtomicUsize = AtomicUsize::new(0);

/// Most pages hot at once.
pub const HOT_SLOTS: usize = 8;
/// Hot pages: index + 1 of their slot in [`PAGES`] (0: free).
static HOT: [AtomicUsize; HOT_SLOTS] = [EMPTY; HOT_SLOTS];
/// How many pages are hot (the poll wrapper's one load).
pub static HOT_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Serialises the hot transitions (the handler's and the watcher's); held only
/// around `mprotect` and the table updates, never while faulting.
static HOT_LOCK: AtomicBool = AtomicBool::new(false);
/// Times a page went hot (for tests and the statistics).
pub static WENT_HOT: AtomicUsize = AtomicUsize::new(0);
/// Empty assisted polls counted at the last send doorbell trapped.
static LAST_ASSISTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// CQ arm doorbells trapped (an event-driven program arms its CQ before each wait).
/// A trapped arm does not update the watch's last-forwarded arm record, so once one
/// was trapped no page goes hot: a scan would forward that arm again, and a second
/// arm after the event it asked for would ask for another.
static ARMS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

struct HotGuard;
impl Drop for HotGuard {
    fn drop(&mut self) {
        HOT_LOCK.store(false, Ordering::Release);
    }
}
/// Takes [`HOT_LOCK`] (a spin lock: the handler may take it, and no holder faults
/// or waits while holding it).
fn hot_lock() -> HotGuard {
    while HOT_LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::hint::spin_loop();
    }
    HotGuard
}

fn slot_of(page: usize) -> Option<usize> {
    (page != 0)
        .then(|| PAGES.iter().position(|s| s.load(Ordering::Acquire) == page))
        .flatten()
}

/// Records `shadow` as the layer's own mapping of trapped page `page`.
pub fn set_shadow(page: usize, shadow: usize) {
    if let Some(i) = slot_of(page) {
        SHADOW_OF[i].store(shadow, Ordering::Release);
    }
}

/// Forgets the shadow `shadow` (before it is unmapped): a page hot through it is
/// trapped again first. The caller then reads the shadow once more for the stores
/// that landed before.
pub fn clear_shadow(shadow: usize) {
    let _g = hot_lock();
    for (i, s) in SHADOW_OF.iter().enumerate() {
        if shadow != 0 && s.load(Ordering::Acquire) == shadow {
            cool_slot(i);
            s.store(0, Ordering::Release);
        }
    }
}

/// Makes the page of slot `i` trapped again if it is hot (under [`HOT_LOCK`]).
fn cool_slot(i: usize) {
    for h in HOT.iter() {
        if h.load(Ordering::Acquire) == i + 1 {
            let page = PAGES[i].load(Ordering::Acquire);
            if page != 0 && !GAVE_UP.load(Ordering::Acquire) {
                // SAFETY: a page of this layer that is still mapped (unmapping
                // removes it from the table first, under this lock).
                unsafe { libc::mprotect(page as *mut libc::c_void, PAGE, libc::PROT_READ) };
            }
            h.store(0, Ordering::Release);
            HOT_COUNT.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Calls `f` with the shadow of every hot page.
pub fn for_each_hot(mut f: impl FnMut(usize)) {
    for h in HOT.iter() {
        let i = h.load(Ordering::Acquire);
        if i != 0 {
            let s = SHADOW_OF[i - 1].load(Ordering::Acquire);
            if s != 0 {
                f(s);
            }
        }
    }
}

/// Traps every hot page again (read-only first: a store after that faults and is
/// forwarded by the handler) and returns their shadows, which the caller reads
/// once more for the stores that landed before.
pub fn cool_all() -> [usize; HOT_SLOTS] {
    let mut out = [0; HOT_SLOTS];
    let _g = hot_lock();
    for (k, h) in HOT.iter().enumerate() {
        let i = h.load(Ordering::Acquire);
        if i != 0 {
            out[k] = SHADOW_OF[i - 1].load(Ordering::Acquire);
            cool_slot(i - 1);
        }
    }
    out
}

/// After a trapped send doorbell of a busy-polling program (an empty poll since the
/// previous send doorbell, and no CQ arm ever trapped: a program that waits for
/// completion events arms its CQ before each wait), leaves `page` writable so
/// that the next doorbells are plain stores, read by the poll wrapper
/// ([`crate::doorbell::flush_hot`]) and, as a fallback, the watcher thread, which
/// traps the page again once the polls stop. Async-signal-safe: atomics, a spin
/// lock no holder can fault under, `mprotect` and a futex wake.
fn maybe_go_hot(page: usize) {
    let a = crate::poll_assist::assists();
    let polled = LAST_ASSISTS.swap(a, Ordering::AcqRel) != a;
    if !polled || ARMS.load(Ordering::Acquire) != 0 {
        return;
    }
    let Some(i) = slot_of(page) else {
        return;
    };
    if SHADOW_OF[i].load(Ordering::Acquire) == 0 {
        return;
    }
    {
        let _g = hot_lock();
        if GAVE_UP.load(Ordering::Acquire) || HOT.iter().any(|h| h.load(Ordering::Acquire) == i + 1)
        {
            return;
        }
        let Some(free) = HOT.iter().find(|h| h.load(Ordering::Acquire) == 0) else {
            return;
        };
        // SAFETY: a page of this layer that is still mapped (as above).
        if unsafe {
            libc::mprotect(
                page as *mut libc::c_void,
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        } != 0
        {
            return;
        }
        free.store(i + 1, Ordering::Release);
        HOT_COUNT.fetch_add(1, Ordering::AcqRel);
        WENT_HOT.fetch_add(1, Ordering::Relaxed);
    }
    crate::doorbell::wake_watcher();
}

/// The page offset and value of the last store forwarded (for tests).
pub static LAST: [std::sync::atomic::AtomicU64; 2] = [
    std::sync::atomic::AtomicU64::new(0),
    std::sync::atomic::AtomicU64::new(0),
];

/// The program's own SIGSEGV disposition, to which faults outside the UAR pages go.
struct Chained(std::cell::UnsafeCell<libc::sigaction>);
// SAFETY: written only under `CHAIN_LOCK` by `install` and `app_sigaction` before
// (or while) the handler may read it; a torn read is impossible for the handler's use
// (it copies the struct once and a program changing its SIGSEGV handler while
// faulting is already racing with itself).
unsafe impl Sync for Chained {}
// SAFETY: an all-zero sigaction is SIG_DFL with an empty mask.
static CHAIN: Chained = Chained(std::cell::UnsafeCell::new(unsafe { std::mem::zeroed() }));
static CHAIN_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Whether doorbells are trapped (x86-64, not asked otherwise, no store seen that
/// the decoder does not know).
pub fn enabled() -> bool {
    static MODE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *MODE.get_or_init(|| {
        cfg!(target_arch = "x86_64")
            && std::env::var(crate::doorbell::MODE_ENV).as_deref() != Ok("watch")
    });
    on && !GAVE_UP.load(Ordering::Acquire)
}

/// Traps stores to the page at `addr` (mapped read-write by this layer); false if it
/// cannot (the table is full, the handler cannot be installed, or trapping is off),
/// and the page is then left to the watcher thread.
pub fn add_page(addr: usize) -> bool {
    if !enabled() || !install() {
        return false;
    }
    for slot in PAGES.iter() {
        if slot
            .compare_exchange(0, addr, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            // SAFETY: the page is this layer's own anonymous mapping of one page.
            if unsafe { libc::mprotect(addr as *mut libc::c_void, PAGE, libc::PROT_READ) } != 0 {
                slot.store(0, Ordering::Release);
                return false;
            }
            return true;
        }
    }
    false
}

/// Stops trapping the page at `addr` (before it is unmapped).
pub fn remove_page(addr: usize) {
    let _g = hot_lock();
    for (i, slot) in PAGES.iter().enumerate() {
        if slot.load(Ordering::Acquire) == addr {
            for h in HOT.iter() {
                if h.load(Ordering::Acquire) == i + 1 {
                    h.store(0, Ordering::Release);
                    HOT_COUNT.fetch_sub(1, Ordering::AcqRel);
                }
            }
            SHADOW_OF[i].store(0, Ordering::Release);
            slot.store(0, Ordering::Release);
        }
    }
}

/// Whether loads can be trapped here (x86-64, with the handler installed).
pub fn loads_trappable() -> bool {
    cfg!(target_arch = "x86_64") && install()
}

/// Traps loads from the page at `addr` (this layer's `PROT_NONE` mapping of one
/// page): each is answered by [`crate::clock::core_clock_load`]. False if the table
/// is full or loads cannot be trapped.
pub fn add_load_page(addr: usize) -> bool {
    if !loads_trappable() {
        return false;
    }
    LOAD_PAGES.iter().any(|slot| {
        slot.compare_exchange(0, addr, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    })
}

/// Stops trapping loads from the page at `addr` (before it is unmapped); true if it
/// was such a page.
pub fn remove_load_page(addr: usize) -> bool {
    LOAD_PAGES.iter().any(|slot| {
        slot.compare_exchange(addr, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    })
}

fn load_trapped(page: usize) -> bool {
    page != 0 && LOAD_PAGES.iter().any(|s| s.load(Ordering::Acquire) == page)
}

fn trapped(page: usize) -> bool {
    page != 0 && PAGES.iter().any(|s| s.load(Ordering::Acquire) == page)
}

/// Installs the SIGSEGV handler once; true if it is in place.
fn install() -> bool {
    if INSTALLED.load(Ordering::Acquire) {
        return true;
    }
    let _g = CHAIN_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if INSTALLED.load(Ordering::Acquire) {
        return true;
    }
    // SAFETY: sigaction with a handler of the SA_SIGINFO signature; the old action is
    // written to CHAIN, which the handler reads only once INSTALLED is set.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_segv as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if crate::real::sigaction(libc::SIGSEGV, &sa, CHAIN.0.get()) != 0 {
            return false;
        }
    }
    INSTALLED.store(true, Ordering::Release);
    true
}

/// `sigaction(SIGSEGV, ...)` of the program once the handler is installed: the
/// program's handler becomes the one faults outside the UAR pages go to, and ours
/// stays in place. Returns `None` when the handler is not installed (the call goes to
/// libc).
///
/// # Safety
///
/// `act` and `old` as sigaction(2)'s (null or valid).
pub unsafe fn app_sigaction(
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> Option<libc::c_int> {
    if !INSTALLED.load(Ordering::Acquire) {
        return None;
    }
    let _g = CHAIN_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: the caller's pointers; CHAIN is written under the lock.
    unsafe {
        if !old.is_null() {
            *old = *CHAIN.0.get();
        }
        if !act.is_null() {
            *CHAIN.0.get() = *act;
        }
    }
    Some(0)
}

/// A decoded store: its length in bytes, its width and where its value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Store {
    /// Instruction length.
    pub len: usize,
    /// Bytes stored (1, 2, 4 or 8).
    pub width: usize,
    /// The value's source.
    pub src: Src,
}

/// Where a decoded store's value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Src {
    /// A general register, in the x86 encoding (0 = rax ... 15 = r15); a byte store
    /// names its low byte (no REX prefix and 4..7: ah, ch, dh, bh, which [`decode`]
    /// refuses).
    Reg(u8),
    /// An immediate, sign-extended to the store's width.
    Imm(u64),
}

/// The opcode, ModRM `reg` field, REX byte and operand-size prefix of a one-byte-opcode
/// instruction with a memory operand at the start of `code`, and its length up to
/// the end of the displacement (Intel SDM vol. 2, 2.1: legacy prefixes, REX, opcode,
/// ModRM, SIB, displacement). `None` for a register operand (ModRM mod 3) or bytes
/// that end early.
struct Operands {
    op: u8,
    reg: u8,
    rex: u8,
    opsize: bool,
    len: usize,
}

fn operands(code: &[u8]) -> Option<Operands> {
    let mut i = 0;
    let mut opsize = false;
    loop {
        match *code.get(i)? {
            0x66 => opsize = true,
            0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 => {}
            _ => break,
        }
        i += 1;
        if i > 4 {
            return None;
        }
    }
    let mut rex = 0u8;
    if let b @ 0x40..=0x4f = *code.get(i)? {
        rex = b;
        i += 1;
    }
    let op = *code.get(i)?;
    i += 1;
    let modrm = *code.get(i)?;
    i += 1;
    let (md, reg, rm) = (modrm >> 6, (modrm >> 3) & 7, modrm & 7);
    if md == 3 {
        return None;
    }
    if rm == 4 {
        let sib = *code.get(i)?;
        i += 1;
        if md == 0 && sib & 7 == 5 {
            i += 4;
        }
    } else if md == 0 && rm == 5 {
        i += 4;
    }
    i += match md {
        1 => 1,
        2 => 4,
        _ => 0,
    };
    Some(Operands {
        op,
        reg,
        rex,
        opsize,
        len: i,
    })
}

/// A decoded load: its length in bytes, its width (4 or 8) and the general register
/// it writes (x86 encoding, 0 = rax ... 15 = r15).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Load {
    /// Instruction length.
    pub len: usize,
    /// Bytes loaded.
    pub width: usize,
    /// The destination register.
    pub dst: u8,
}

/// Decodes the x86-64 `MOV r32, r/m32` or `MOV r64, r/m64` (8B /r, Intel SDM vol. 2)
/// from memory at the start of `code`: what a compiler emits for the relaxed atomic
/// 32-bit load of rdma-core's `mmio_read32_be`. `None` for anything else (16-bit
/// loads, which keep the register's upper bits, included).
pub fn decode_load(code: &[u8]) -> Option<Load> {
    let o = operands(code)?;
    if o.op != 0x8b || (o.opsize && o.rex & 8 == 0) || o.len > code.len() {
        return None;
    }
    Some(Load {
        len: o.len,
        width: if o.rex & 8 != 0 { 8 } else { 4 },
        dst: o.reg | ((o.rex & 4) << 1),
    })
}

/// Decodes the x86-64 `mov` to memory at the start of `code` (Intel SDM vol. 2:
/// `MOV r/m, r` 88/89 and `MOV r/m, imm` C6/C7 /0, with operand-size, segment and REX
/// prefixes): the forms a compiler emits for a volatile or relaxed atomic store.
/// `None` for anything else.
pub fn decode(code: &[u8]) -> Option<Store> {
    let Operands {
        op,
        reg,
        rex,
        opsize,
        len: i,
    } = operands(code)?;
    let w = rex & 8 != 0;
    let wide = if w {
        8
    } else if opsize {
        2
    } else {
        4
    };
    let imm = |i: usize, n: usize| -> Option<u64> {
        let b = code.get(i..i + n)?;
        Some(match n {
            1 => b[0] as i8 as i64 as u64,
            2 => i16::from_le_bytes([b[0], b[1]]) as i64 as u64,
            _ => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64 as u64,
        })
    };
    let s = match op {
        0x88 => {
            if rex == 0 && (4..8).contains(&reg) {
                return None;
            }
            Store {
                len: i,
                width: 1,
                src: Src::Reg(reg | ((rex & 4) << 1)),
            }
        }
        0x89 => Store {
            len: i,
            width: wide,
            src: Src::Reg(reg | ((rex & 4) << 1)),
        },
        0xc6 if reg == 0 => Store {
            len: i + 1,
            width: 1,
            src: Src::Imm(imm(i, 1)?),
        },
        0xc7 if reg == 0 => {
            let n = if wide == 2 { 2 } else { 4 };
            Store {
                len: i + n,
                width: wide,
                src: Src::Imm(imm(i, n)?),
            }
        }
        _ => return None,
    };
    (s.len <= code.len()).then_some(s)
}

#[cfg(target_arch = "x86_64")]
fn greg(uc: &libc::ucontext_t, reg: u8) -> u64 {
    uc.uc_mcontext.gregs[greg_index(reg)] as u64
}

/// The x86 register number to glibc's `gregs` index (sys/ucontext.h REG_*).
#[cfg(target_arch = "x86_64")]
fn greg_index(reg: u8) -> usize {
    let idx = match reg {
        0 => libc::REG_RAX,
        1 => libc::REG_RCX,
        2 => libc::REG_RDX,
        3 => libc::REG_RBX,
        4 => libc::REG_RSP,
        5 => libc::REG_RBP,
        6 => libc::REG_RSI,
        7 => libc::REG_RDI,
        r => libc::REG_R8 + i32::from(r - 8),
    };
    idx as usize
}

extern "C" fn on_segv(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SIGSEGV.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = addr & !(PAGE - 1);
    if load_trapped(page) {
        // SAFETY: `ctx` is the interrupted thread's ucontext (SA_SIGINFO).
        if unsafe { emulate_load(page, addr, &mut *(ctx as *mut libc::ucontext_t)) } {
            return;
        }
        // A load the handler does not know: the page becomes readable with the
        // registers' values of now (frozen from then on), and the load runs again.
        crate::clock::freeze(page);
        return;
    }
    if trapped(page) {
        // SAFETY: errno is thread-local; restored before returning.
        let errno = unsafe { *libc::__errno_location() };
        // SAFETY: `ctx` is the interrupted thread's ucontext (SA_SIGINFO).
        let done = unsafe { emulate(page, addr, &mut *(ctx as *mut libc::ucontext_t)) };
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
        if done {
            return;
        }
        // Unknown store: every page back to read-write for the watcher; the store
        // runs again when the handler returns.
        let _g = hot_lock();
        GAVE_UP.store(true, Ordering::Release);
        for h in HOT.iter() {
            if h.swap(0, Ordering::AcqRel) != 0 {
                HOT_COUNT.fetch_sub(1, Ordering::AcqRel);
            }
        }
        for s in PAGES.iter() {
            let p = s.swap(0, Ordering::AcqRel);
            if p != 0 {
                // SAFETY: a page of this layer that is still mapped (unmapping removes
                // it from the table first).
                unsafe {
                    libc::mprotect(
                        p as *mut libc::c_void,
                        PAGE,
                        libc::PROT_READ | libc::PROT_WRITE,
                    )
                };
            }
        }
        crate::doorbell::wake_watcher();
        return;
    }
    // Not ours: the program's handler, or the default action (reset and return: the
    // instruction faults again and the kernel takes the default action).
    // SAFETY: CHAIN holds a sigaction copied from the kernel or the program.
    let chained = unsafe { *CHAIN.0.get() };
    let h = chained.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // SAFETY: resetting the disposition with a zeroed (SIG_DFL) action.
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            crate::real::sigaction(libc::SIGSEGV, &dfl, std::ptr::null_mut());
        }
    } else if chained.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the program installed a handler of this signature.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the program installed a handler of this signature.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}

/// Forwards the store at `addr` in trapped page `page` and steps over it; false if
/// the instruction is not one [`decode`] knows.
///
/// # Safety
///
/// `uc` is the context of the thread that faulted on `addr`.
#[cfg(target_arch = "x86_64")]
unsafe fn emulate(page: usize, addr: usize, uc: &mut libc::ucontext_t) -> bool {
    let rip = uc.uc_mcontext.gregs[libc::REG_RIP as usize] as usize;
    // SAFETY: the caller's context.
    let Some(s) = (unsafe { decode_at_rip(uc, decode) }) else {
        return false;
    };
    let value = match s.src {
        Src::Reg(r) => greg(uc, r),
        Src::Imm(v) => v,
    };
    let value = match s.width {
        8 => value,
        4 => value & 0xffff_ffff,
        2 => value & 0xffff,
        _ => value & 0xff,
    };
    crate::doorbell::forward(addr - page, s.width, value);
    if addr - page >= 0x800 {
        maybe_go_hot(page);
    } else if addr - page == 0x20 {
        ARMS.fetch_add(1, Ordering::AcqRel);
    }
    LAST[0].store((addr - page) as u64, Ordering::Relaxed);
    LAST[1].store(value, Ordering::Relaxed);
    TRAPPED.fetch_add(1, Ordering::Release);
    uc.uc_mcontext.gregs[libc::REG_RIP as usize] = (rip + s.len) as i64;
    true
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn emulate(_page: usize, _addr: usize, _uc: &mut libc::ucontext_t) -> bool {
    false
}

/// The bytes of the faulting instruction at RIP of `uc`, at most 15 (the longest x86
/// instruction), decoded by `f`: first those left in RIP's page (an instruction that
/// does not fit there continues on the next page, which is then mapped), then 15.
///
/// # Safety
///
/// `uc` is the context of a thread that faulted on a data access.
#[cfg(target_arch = "x86_64")]
unsafe fn decode_at_rip<T>(uc: &libc::ucontext_t, f: impl Fn(&[u8]) -> Option<T>) -> Option<T> {
    let rip = uc.uc_mcontext.gregs[libc::REG_RIP as usize] as usize;
    let in_page = (PAGE - rip % PAGE).min(15);
    // SAFETY: the faulting instruction's page is mapped and readable (x86-64 user
    // pages that execute are readable).
    let d = f(unsafe { std::slice::from_raw_parts(rip as *const u8, in_page) });
    if d.is_some() || in_page == 15 {
        return d;
    }
    // SAFETY: as above, the instruction crosses into the next page.
    f(unsafe { std::slice::from_raw_parts(rip as *const u8, 15) })
}

/// Answers the load at `addr` in load-trapped page `page` with the device register's
/// bytes there and steps over it; false if the instruction is not one
/// [`decode_load`] knows.
///
/// # Safety
///
/// `uc` is the context of the thread that faulted on `addr`.
#[cfg(target_arch = "x86_64")]
unsafe fn emulate_load(page: usize, addr: usize, uc: &mut libc::ucontext_t) -> bool {
    // SAFETY: the caller's context.
    let Some(l) = (unsafe { decode_at_rip(uc, decode_load) }) else {
        return false;
    };
    let value = crate::clock::core_clock_load(addr - page, l.width);
    // A 32-bit load zero-extends into the 64-bit register (Intel SDM vol. 1, 3.4.1.1).
    uc.uc_mcontext.gregs[greg_index(l.dst)] = value as i64;
    let rip = uc.uc_mcontext.gregs[libc::REG_RIP as usize];
    uc.uc_mcontext.gregs[libc::REG_RIP as usize] = rip + l.len as i64;
    LOADS.fetch_add(1, Ordering::Relaxed);
    true
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn emulate_load(_page: usize, _addr: usize, _uc: &mut libc::ucontext_t) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_stores_a_compiler_emits() {
        // mov %rax,(%rdx)
        assert_eq!(
            decode(&[0x48, 0x89, 0x02]),
            Some(Store {
                len: 3,
                width: 8,
                src: Src::Reg(0)
            })
        );
        // mov %r9,0x20(%r8)
        assert_eq!(
            decode(&[0x4d, 0x89, 0x48, 0x20]),
            Some(Store {
                len: 4,
                width: 8,
                src: Src::Reg(9)
            })
        );
        // mov %rcx,0x800(%rax,%rdx,1)
        assert_eq!(
            decode(&[0x48, 0x89, 0x8c, 0x10, 0x00, 0x08, 0x00, 0x00]),
            Some(Store {
                len: 8,
                width: 8,
                src: Src::Reg(1)
            })
        );
        // mov %esi,(%rdi)
        assert_eq!(
            decode(&[0x89, 0x37]),
            Some(Store {
                len: 2,
                width: 4,
                src: Src::Reg(6)
            })
        );
        // movq $-1,0x8(%rsp)
        assert_eq!(
            decode(&[0x48, 0xc7, 0x44, 0x24, 0x08, 0xff, 0xff, 0xff, 0xff]),
            Some(Store {
                len: 9,
                width: 8,
                src: Src::Imm(u64::MAX)
            })
        );
        // movw $0x1234,(%rax)
        assert_eq!(
            decode(&[0x66, 0xc7, 0x00, 0x34, 0x12]),
            Some(Store {
                len: 5,
                width: 2,
                src: Src::Imm(0x1234)
            })
        );
        // mov %r12b,(%rbx)  /  mov %ah,(%rbx): refused
        assert_eq!(
            decode(&[0x44, 0x88, 0x23]),
            Some(Store {
                len: 3,
                width: 1,
                src: Src::Reg(12)
            })
        );
        assert_eq!(decode(&[0x88, 0x23]), None);
    }

    /// A store to a trapped page reaches the handler, which forwards it (no device
    /// here: nothing is rung) and steps over it: the page keeps its zeros and the
    /// program goes on.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn a_store_to_a_trapped_page_is_taken_and_stepped_over() {
        // SAFETY: a new anonymous shared page, unmapped at the end.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let p = p as usize;
        assert!(add_page(p));
        let before = TRAPPED.load(Ordering::Acquire);
        // SAFETY: an aligned word of the page (read-only now: the store traps).
        unsafe { std::ptr::write_volatile((p + 0x900) as *mut u64, 0x1122_3344_5566_7788) };
        assert_eq!(TRAPPED.load(Ordering::Acquire), before + 1);
        assert_eq!(LAST[0].load(Ordering::Relaxed), 0x900);
        assert_eq!(LAST[1].load(Ordering::Relaxed), 0x1122_3344_5566_7788);
        // SAFETY: as above, read.
        assert_eq!(
            unsafe { std::ptr::read_volatile((p + 0x900) as *const u64) },
            0
        );
        remove_page(p);
        // SAFETY: the page mapped above.
        unsafe { libc::munmap(p as *mut libc::c_void, PAGE) };
    }

    #[test]
    fn decodes_the_loads_of_mmio_read32() {
        // mov (%rdi),%eax
        assert_eq!(
            decode_load(&[0x8b, 0x07]),
            Some(Load {
                len: 2,
                width: 4,
                dst: 0
            })
        );
        // mov 0x4(%rax),%edx
        assert_eq!(
            decode_load(&[0x8b, 0x50, 0x04]),
            Some(Load {
                len: 3,
                width: 4,
                dst: 2
            })
        );
        // mov 0x4(%rdi),%r8d
        assert_eq!(
            decode_load(&[0x44, 0x8b, 0x47, 0x04]),
            Some(Load {
                len: 4,
                width: 4,
                dst: 8
            })
        );
        // mov (%rdi),%rax
        assert_eq!(
            decode_load(&[0x48, 0x8b, 0x07]),
            Some(Load {
                len: 3,
                width: 8,
                dst: 0
            })
        );
        // mov (%rdi),%ax keeps the upper bits: refused; so are register forms,
        // stores and truncated bytes.
        assert_eq!(decode_load(&[0x66, 0x8b, 0x07]), None);
        assert_eq!(decode_load(&[0x8b, 0xc2]), None);
        assert_eq!(decode_load(&[0x89, 0x07]), None);
        assert_eq!(decode_load(&[0x8b, 0x87, 0x00]), None);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_load_from_a_load_trapped_page_is_answered_and_stepped_over() {
        // SAFETY: a new anonymous page with no access, unmapped at the end.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let p = p as usize;
        assert!(add_load_page(p));
        let before = LOADS.load(Ordering::Acquire);
        // SAFETY: an aligned word of the page (no access: the load traps and is
        // answered by the handler; no NIC in this process, so with 0).
        let v = unsafe { std::ptr::read_volatile((p + 4) as *const u32) };
        assert_eq!(v, 0);
        assert_eq!(LOADS.load(Ordering::Acquire), before + 1);
        assert!(remove_load_page(p));
        assert!(!remove_load_page(p));
        // SAFETY: the page mapped above.
        unsafe { libc::munmap(p as *mut libc::c_void, PAGE) };
    }

    #[test]
    fn refuses_what_is_not_a_mov_to_memory() {
        // mov %rax,%rdx (register form)
        assert_eq!(decode(&[0x48, 0x89, 0xc2]), None);
        // movdqa %xmm0,(%rax)
        assert_eq!(decode(&[0x66, 0x0f, 0x7f, 0x00]), None);
        // add %rax,(%rdx)
        assert_eq!(decode(&[0x48, 0x01, 0x02]), None);
        // truncated
        assert_eq!(decode(&[0x48, 0x89]), None);
        assert_eq!(decode(&[0x48, 0xc7, 0x00, 0x01]), None);
        assert_eq!(decode(&[]), None);
    }
}

//! mlx5_ib's two clock pages, as its `mmap` offers them to libmlx5 (Linux
//! `drivers/infiniband/hw/mlx5/main.c: mlx5_ib_mmap`; rdma-core
//! `providers/mlx5/mlx5.c: mlx5_map_internal_clock, mlx5_map_clock_info`):
//!
//! * the *core clock* page (`MLX5_IB_MMAP_CORE_CLOCK`): the init segment's page that
//!   holds `internal_timer_h`/`_l`, the free-running device clock in ticks of
//!   `device_frequency_khz` (the count of the CQE `timestamp`), which libmlx5 reads
//!   for `ibv_query_rt_values_ex` (`mlx5_read_clock`: high, low, high again, each a
//!   32-bit big-endian MMIO load). Linux maps the BAR page uncached; here the page is
//!   a `PROT_NONE` mapping whose loads are trapped
//!   ([`crate::mmio_trap::add_load_page`]) and answered with the simulated device's
//!   init segment register at that offset, read through the bus.
//! * the *clock info* page (`MLX5_IB_MMAP_CLOCK_INFO`, `struct mlx5_ib_clock_info`):
//!   the kernel's translation of device ticks to wall-clock nanoseconds (`nsec` at
//!   `cycles`, then `(delta · mult + frac) >> shift`), rewritten under the sequence
//!   word `sign` (odd while `MLX5_IB_CLOCK_INFO_KERNEL_UPDATING` is set), which
//!   `mlx5dv_get_clock_info` copies and `mlx5dv_ts_to_ns` applies. Here one memfd
//!   page of the process, mapped read-only by every context and rewritten by a
//!   thread every [`UPDATE_PERIOD`] (`overflow_period`, which libmlx5 reports as
//!   `max_clock_info_update_nsec`).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use ferroverbs_hw::control::iseg;
use ferroverbs_hw::Bus;

use crate::abi::clock_info as info;
use crate::nic::Nic;
use crate::Errno;

const PAGE: usize = 4096;

/// The core clock page: the BAR page of `internal_timer_h`.
pub const CORE_CLOCK_PAGE: usize = iseg::INTERNAL_TIMER_H & !(PAGE - 1);

/// `hca_core_clock_offset` of the ucontext response: where `internal_timer_h` lies in
/// its page (Linux `set_ucontext_resp`: `offsetof(struct mlx5_init_seg,
/// internal_timer_h) % PAGE_SIZE`).
pub const CORE_CLOCK_OFFSET: u64 = (iseg::INTERNAL_TIMER_H % PAGE) as u64;

/// How often the clock info page is rewritten.
pub const UPDATE_PERIOD: Duration = Duration::from_secs(1);

/// `shift` of the clock info page: with it `mult` resolves a tick to 2^-24 ns, and a
/// `delta · mult` stays below 2^64 for about 1,100 s of ticks at 156.25 MHz.
pub const SHIFT: u32 = 24;

/// `mask` of the clock info page: the 63 bits of `timestamp_mask` that QUERY_DEVICE
/// reports.
pub const MASK: u64 = 0x7fff_ffff_ffff_ffff;

/// `MLX5_IB_CLOCK_INFO_KERNEL_UPDATING` (`rdma/mlx5-abi.h`).
const UPDATING: u32 = 1;

static NIC: OnceLock<&'static Nic> = OnceLock::new();

/// Records the process's NIC for the trap handler and the clock info thread.
pub fn set_nic(nic: &'static Nic) {
    let _ = NIC.set(nic);
}

/// The value a trapped `width`-byte load at offset `off` of the core clock page
/// reads: the little-endian view of the big-endian registers' bytes there, as a
/// load from the BAR gives it. Zero before the NIC is up.
pub fn core_clock_load(off: usize, width: usize) -> u64 {
    let Some(nic) = NIC.get() else {
        return 0;
    };
    let bus = nic.ctx.bus();
    let reg = |o: usize| -> u64 {
        let at = CORE_CLOCK_PAGE + (o & (PAGE - 4));
        u64::from(u32::from_le_bytes(bus.read32(at).to_be_bytes()))
    };
    match width {
        8 => reg(off) | (reg(off + 4) << 32),
        _ => reg(off),
    }
}

/// The device clock in ticks, read as libmlx5 reads it (high, low, high again).
pub fn device_ticks(bus: &(impl Bus + ?Sized)) -> u64 {
    let h = iseg::INTERNAL_TIMER_H;
    let l = iseg::INTERNAL_TIMER_H + 4;
    let mut hi = bus.read32(h);
    let mut lo = bus.read32(l);
    for _ in 0..2 {
        let again = bus.read32(h);
        if again == hi {
            break;
        }
        hi = again;
        lo = bus.read32(l);
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// Maps a core clock page for a context: `len` one page, not writable (Linux:
/// EINVAL for another length, EPERM for `PROT_WRITE`). EOPNOTSUPP where loads
/// cannot be trapped (the ucontext response then offers no page).
pub fn map_core_clock(len: usize, prot: i32) -> Result<usize, Errno> {
    if len != PAGE {
        return Err(Errno::EINVAL);
    }
    if prot & (libc::PROT_WRITE | libc::PROT_EXEC) != 0 {
        return Err(Errno::EPERM);
    }
    if !crate::mmio_trap::loads_trappable() {
        return Err(Errno::EOPNOTSUPP);
    }
    // SAFETY: a new anonymous mapping; no existing memory is touched.
    let p = unsafe {
        crate::real::mmap(
            std::ptr::null_mut(),
            PAGE,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Errno::last());
    }
    if !crate::mmio_trap::add_load_page(p as usize) {
        // SAFETY: the mapping just made.
        unsafe { libc::syscall(libc::SYS_munmap, p, PAGE) };
        return Err(Errno::ENOMEM);
    }
    Ok(p as usize)
}

/// Makes the core clock page at `page` readable with the registers' values of now,
/// frozen: what the trap handler does for a load it cannot decode (so the program
/// goes on, with a clock that no longer moves).
pub fn freeze(page: usize) {
    crate::mmio_trap::remove_load_page(page);
    let mut words = [0u8; PAGE];
    for off in (0..PAGE).step_by(4) {
        let v = core_clock_load(off, 4) as u32;
        words[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }
    // SAFETY: `page` is this layer's anonymous one-page mapping (it was in the load
    // table); made writable, filled, then read-only.
    unsafe {
        libc::mprotect(
            page as *mut libc::c_void,
            PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
        );
        std::ptr::copy_nonoverlapping(words.as_ptr(), page as *mut u8, PAGE);
        libc::mprotect(page as *mut libc::c_void, PAGE, libc::PROT_READ);
    }
}

/// The process's clock info page: its memfd and the layer's writable mapping.
struct InfoPage {
    fd: i32,
    page: usize,
}

static INFO: OnceLock<Result<InfoPage, Errno>> = OnceLock::new();

/// `mult` for a clock of `khz`: nanoseconds per tick in 2^-[`SHIFT`], rounded.
pub fn mult(khz: u32) -> u32 {
    let khz = u64::from(khz.max(1));
    (((1_000_000u64 << SHIFT) + khz / 2) / khz).min(u64::from(u32::MAX)) as u32
}

/// Rewrites the clock info page at `page` for `nic`: `nsec` is `CLOCK_REALTIME` at
/// the device clock `cycles` read just before it, under the sequence word.
fn update(page: usize, nic: &Nic) {
    let word = |off: usize| -> &AtomicU64 {
        // SAFETY: `page` is the layer's writable one-page mapping of the memfd, which
        // lives as long as the process; `off` is an 8-byte-aligned field.
        unsafe { &*((page + off) as *const AtomicU64) }
    };
    // SAFETY: as above, the 4-byte-aligned first word.
    let sign = unsafe { &*((page + info::sign) as *const AtomicU32) };
    let seq = sign.load(Ordering::Relaxed) & !UPDATING;
    sign.store(seq | UPDATING, Ordering::Release);
    std::sync::atomic::fence(Ordering::Release);
    let cycles = device_ticks(&**nic.ctx.bus());
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec passed.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    let nsec = (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64;
    word(info::nsec).store(nsec, Ordering::Relaxed);
    word(info::cycles).store(cycles, Ordering::Relaxed);
    word(info::frac).store(0, Ordering::Relaxed);
    let mult = u64::from(mult(nic.dev.hca_core_clock_khz));
    word(info::mult).store(mult | (u64::from(SHIFT) << 32), Ordering::Relaxed);
    word(info::mask).store(MASK, Ordering::Relaxed);
    word(info::overflow_period).store(UPDATE_PERIOD.as_nanos() as u64, Ordering::Relaxed);
    sign.store(seq.wrapping_add(2), Ordering::Release);
}

/// The clock info page, made (and its thread started) on first use.
fn info_page() -> Result<&'static InfoPage, Errno> {
    INFO.get_or_init(|| {
        let nic = *NIC.get().ok_or(Errno::ENODEV)?;
        // SAFETY: memfd_create with a NUL-terminated name.
        let fd =
            unsafe { libc::memfd_create(c"ferroverbs-clock-info".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(Errno::last());
        }
        // SAFETY: the new memfd; one page.
        if unsafe { libc::ftruncate(fd, PAGE as libc::off_t) } != 0 {
            return Err(Errno::last());
        }
        // SAFETY: a new shared mapping of the memfd's page.
        let p = unsafe {
            crate::real::mmap(
                std::ptr::null_mut(),
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        let page = p as usize;
        update(page, nic);
        std::thread::Builder::new()
            .name("uapi-clock-info".into())
            .spawn(move || loop {
                std::thread::sleep(UPDATE_PERIOD);
                update(page, nic);
            })
            .map_err(|_| Errno::ENOMEM)?;
        Ok(InfoPage { fd, page })
    })
    .as_ref()
    .map_err(|e| *e)
}

/// Maps the clock info page of `index` for a context (Linux
/// `mlx5_ib_mmap_clock_info_page`: EINVAL for a length other than a page, EPERM for
/// a writable mapping, EOPNOTSUPP for an index other than `MLX5_IB_CLOCK_INFO_V1`).
pub fn map_clock_info(index: u64, len: usize, prot: i32) -> Result<usize, Errno> {
    if len != PAGE {
        return Err(Errno::EINVAL);
    }
    if prot & (libc::PROT_WRITE | libc::PROT_EXEC) != 0 {
        return Err(Errno::EPERM);
    }
    if index != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    let info = info_page()?;
    debug_assert!(info.page != 0);
    // SAFETY: a new read-only shared mapping of the clock info memfd.
    let p = unsafe {
        crate::real::mmap(
            std::ptr::null_mut(),
            PAGE,
            libc::PROT_READ,
            libc::MAP_SHARED,
            info.fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Errno::last());
    }
    Ok(p as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mult_turns_ticks_of_156_25_mhz_into_6_4_ns() {
        let m = u64::from(mult(156_250));
        // 6.4 ns per tick, to 2^-24 ns.
        assert_eq!(m, 107_374_182);
        // 156,250,000 ticks are one second, within a nanosecond.
        let ns = (156_250_000u64 * m) >> SHIFT;
        assert!((999_999_990..=1_000_000_000).contains(&ns), "{ns}");
        // No overflow of delta * mult for 1,000 s of ticks.
        assert!(156_250_000u64 * 1000 <= u64::MAX / m);
    }

    #[test]
    fn the_clock_pages_are_the_init_segments_timer_page() {
        assert_eq!(CORE_CLOCK_PAGE, 0x1000);
        assert_eq!(CORE_CLOCK_OFFSET, 0);
    }
}

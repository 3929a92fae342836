//! The libc entry points this library interposes (it is loaded with `LD_PRELOAD`).
//! Each looks at the descriptor or path and passes every call that is not this
//! layer's straight to libc ([`crate::real`]).
//!
//! Variadic C functions (`open`, `openat`, `ioctl`) are defined with their optional
//! argument as a plain third argument: on the x86-64 and AArch64 Linux calling
//! conventions a variadic argument travels in the same register as a named one.

use std::ffi::CStr;

use libc::{c_char, c_int, c_uint, c_ulong, c_void, off_t, size_t, ssize_t};

use crate::fdtab::{self, Kind};
use crate::{events, file, nic, real, Errno};

/// The character device libibverbs opens (`/dev/infiniband/uverbsN`); this layer
/// offers `uverbs0`.
const UVERBS: &[u8] = b"/dev/infiniband/uverbs0";
/// librdmacm's event channel device.
const RDMA_CM: &[u8] = b"/dev/infiniband/rdma_cm";
/// The character device it answers `stat` and `fstat` for: a real one, whose
/// numbers the sysfs `dev` file repeats (libibverbs `open_cdev` compares `st_rdev`
/// with it). The descriptor itself is a memfd ([`file::create_backing`]), so that a
/// mapping made behind this library's back (the raw system call) gets the UAR pages
/// the layer watches.
const BACKING: &[u8] = b"/dev/null\0";
/// `NETLINK_RDMA`.
const NETLINK_RDMA: c_int = 20;

fn fail<T: From<i8>>(e: Errno) -> T {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() = e.0 };
    T::from(-1)
}

/// Whether `path` names the uverbs device.
///
/// # Safety
///
/// `path` is null or a NUL-terminated string.
unsafe fn is_uverbs(path: *const c_char) -> bool {
    if path.is_null() {
        return false;
    }
    // SAFETY: the caller's.
    unsafe { CStr::from_ptr(path) }.to_bytes() == UVERBS
}

/// Whether `path` names the rdma_cm device.
///
/// # Safety
///
/// `path` is null or a NUL-terminated string.
unsafe fn is_rdma_cm(path: *const c_char) -> bool {
    if path.is_null() {
        return false;
    }
    // SAFETY: the caller's.
    unsafe { CStr::from_ptr(path) }.to_bytes() == RDMA_CM
}

fn open_rdma_cm(flags: c_int) -> c_int {
    let nic = match nic::nic() {
        Ok(n) => n,
        Err(_) => return fail(Errno::ENODEV),
    };
    match crate::rdma_cm::open(nic, flags) {
        Ok(fd) if fdtab::set(fd, Kind::RdmaCm) => fd,
        Ok(fd) => {
            crate::rdma_cm::close(fd);
            // SAFETY: the descriptor just opened.
            unsafe { real::close(fd) };
            fail(Errno::EMFILE)
        }
        Err(e) => fail(e),
    }
}

fn open_uverbs(flags: c_int) -> c_int {
    let nic = match nic::nic() {
        Ok(n) => n,
        Err(_) => return fail(Errno::ENODEV),
    };
    let _ = nic;
    let fd = match file::create_backing(flags) {
        Ok(fd) => fd,
        Err(e) => return fail(e),
    };
    if !fdtab::set(fd, Kind::Uverbs) {
        // SAFETY: the descriptor just opened.
        unsafe { real::close(fd) };
        return fail(Errno::EMFILE);
    }
    file::open(fd);
    fd
}

/// `open(2)`.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's.
    if unsafe { is_uverbs(path) } {
        return open_uverbs(flags);
    }
    // SAFETY: as above.
    if unsafe { is_rdma_cm(path) } {
        return open_rdma_cm(flags);
    }
    // SAFETY: the caller's.
    unsafe { real::open(path, flags, mode) }
}

/// `open64(2)`.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's.
    unsafe { open(path, flags | libc::O_LARGEFILE, mode) }
}

/// `__open_2` (the fortified `open`).
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's.
    unsafe { open(path, flags, 0) }
}

/// `__open64_2`.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's.
    unsafe { open(path, flags | libc::O_LARGEFILE, 0) }
}

/// `openat(2)`.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: the caller's.
    if unsafe { is_uverbs(path) } {
        return open_uverbs(flags);
    }
    // SAFETY: as above.
    if unsafe { is_rdma_cm(path) } {
        return open_rdma_cm(flags);
    }
    // SAFETY: the caller's.
    unsafe { real::openat(dirfd, path, flags, mode) }
}

/// `openat64(2)`.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: the caller's.
    unsafe { openat(dirfd, path, flags | libc::O_LARGEFILE, mode) }
}

/// `__openat_2`.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's.
    unsafe { openat(dirfd, path, flags, 0) }
}

/// `close(2)`: a uverbs file destroys its objects first.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    match fdtab::kind(fd) {
        Kind::None => {}
        Kind::Uverbs => {
            file::close(fd);
            fdtab::set(fd, Kind::None);
        }
        Kind::CompChannel | Kind::Async => return crate::close_event_fd(fd),
        Kind::RdmaCm => {
            crate::rdma_cm::close(fd);
            fdtab::set(fd, Kind::None);
        }
    }
    // SAFETY: the caller's.
    unsafe { real::close(fd) }
}

/// Records `new` as another descriptor of `old`'s uverbs file after a successful
/// duplication; `new` (what the call returned) is passed through.
fn duplicated(old: c_int, new: c_int) -> c_int {
    if new >= 0 && new != old && fdtab::kind(old) == Kind::Uverbs {
        if fdtab::set(new, Kind::Uverbs) {
            file::dup(old, new);
        } else {
            // SAFETY: the descriptor the call just made.
            unsafe { real::close(new) };
            return fail(Errno::EMFILE);
        }
    }
    new
}

/// Before `dup2`/`dup3` reuse `new` (closing what it named): a uverbs file it named
/// loses that descriptor.
fn replaced(old: c_int, new: c_int) {
    if new != old && fdtab::kind(new) == Kind::Uverbs {
        file::close(new);
        fdtab::set(new, Kind::None);
    }
}

/// `dup(2)`: a duplicate of a uverbs file names the same file (one ucontext, its
/// objects and UARs), as `ibv_import_device` relies on.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: the caller's.
    duplicated(fd, unsafe { real::dup(fd) })
}

/// `dup2(2)`.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn dup2(fd: c_int, new: c_int) -> c_int {
    replaced(fd, new);
    // SAFETY: the caller's.
    duplicated(fd, unsafe { real::dup2(fd, new) })
}

/// `dup3(2)`.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn dup3(fd: c_int, new: c_int, flags: c_int) -> c_int {
    replaced(fd, new);
    // SAFETY: the caller's.
    duplicated(fd, unsafe { real::dup3(fd, new, flags) })
}

/// `fcntl(2)`: `F_DUPFD` and `F_DUPFD_CLOEXEC` duplicate as `dup` does (CPython's
/// `os.dup` uses the latter). The variadic argument is read as one integer-class
/// argument, where the x86-64 and AArch64 Linux calling conventions pass it for
/// every `fcntl` command (an int or a pointer).
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: the caller's.
    let r = unsafe { real::fcntl(fd, cmd, arg) };
    if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
        return duplicated(fd, r);
    }
    r
}

/// `fcntl64`, glibc's name for `fcntl` with 64-bit offsets.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: the caller's.
    unsafe { fcntl(fd, cmd, arg) }
}

/// `read(2)`: events on the channel and async files; EINVAL on a uverbs file (it has
/// no read operation).
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    match fdtab::kind(fd) {
        Kind::None => {}
        Kind::Uverbs | Kind::RdmaCm => return fail(Errno::EINVAL),
        Kind::CompChannel | Kind::Async => {
            return match events::file(fd) {
                Some(f) => match f.read(buf as u64, n) {
                    Ok(n) => n as ssize_t,
                    Err(e) => fail(e),
                },
                None => fail(Errno::EBADF),
            }
        }
    }
    // SAFETY: the caller's.
    unsafe { real::read(fd, buf, n) }
}

/// `__read_chk` (the fortified `read`).
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    if n > buflen {
        // glibc's __chk_fail.
        std::process::abort();
    }
    // SAFETY: the caller's.
    unsafe { read(fd, buf, n) }
}

/// `write(2)`: the uverbs command ABI on a uverbs file.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    match fdtab::kind(fd) {
        Kind::None => {}
        Kind::Uverbs => {
            let Ok(nic) = nic::nic() else {
                return fail(Errno::ENODEV);
            };
            return match file::get(fd) {
                Some(f) => {
                    let mut f = f.lock().unwrap_or_else(|e| e.into_inner());
                    let r = f.write(nic, buf as u64, n);
                    if r.is_ok() {
                        f.sync_uars(fd);
                    }
                    match r {
                        Ok(n) => n as ssize_t,
                        Err(e) => fail(e),
                    }
                }
                None => fail(Errno::EBADF),
            };
        }
        Kind::RdmaCm => {
            return match crate::rdma_cm::write(fd, buf as u64, n) {
                Ok(n) => n as ssize_t,
                Err(e) => fail(e),
            };
        }
        Kind::CompChannel | Kind::Async => return fail(Errno::EINVAL),
    }
    // SAFETY: the caller's.
    unsafe { real::write(fd, buf, n) }
}

/// `ioctl(2)`: `RDMA_VERBS_IOCTL` on a uverbs file runs its methods
/// ([`crate::ioctl`]); any other request is ENOTTY, as Linux's
/// `ib_uverbs_ioctl` answers it.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
#[allow(clippy::useless_conversion)] // `c_ulong` is narrower on 32-bit targets.
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: *mut c_void) -> c_int {
    if fdtab::kind(fd) == Kind::Uverbs {
        if u64::from(req) != crate::abi::RDMA_VERBS_IOCTL {
            return fail(Errno::ENOTTY);
        }
        return match file::get(fd) {
            Some(f) => {
                let r = crate::ioctl::ioctl(&f, arg as u64);
                if r.is_ok() {
                    f.lock().unwrap_or_else(|e| e.into_inner()).sync_uars(fd);
                }
                match r {
                    Ok(()) => 0,
                    Err(e) => fail(e),
                }
            }
            None => fail(Errno::EBADF),
        };
    }
    // SAFETY: the caller's.
    unsafe { real::ioctl(fd, req, arg) }
}

/// `mmap(2)`: UAR pages of a uverbs file.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    if flags & libc::MAP_ANONYMOUS == 0 && fdtab::kind(fd) == Kind::Uverbs {
        let err = |e: Errno| {
            // SAFETY: errno is thread-local.
            unsafe { *libc::__errno_location() = e.0 };
            libc::MAP_FAILED
        };
        if flags & libc::MAP_SHARED == 0 || flags & libc::MAP_FIXED != 0 {
            return err(Errno::EINVAL);
        }
        return match file::get(fd) {
            Some(f) => match f
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .mmap(fd, len, prot, off)
            {
                Ok(p) => p as *mut c_void,
                Err(e) => err(e),
            },
            None => err(Errno::EBADF),
        };
    }
    // SAFETY: the caller's.
    unsafe { real::mmap(addr, len, prot, flags, fd, off) }
}

/// `mmap64(2)`.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: the caller's.
    unsafe { mmap(addr, len, prot, flags, fd, off) }
}

/// `sigaction(2)`: once the doorbell trap's SIGSEGV handler is installed, the
/// program's SIGSEGV handler is kept as the one faults outside the UAR pages go to
/// ([`crate::mmio_trap::app_sigaction`]).
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    if sig == libc::SIGSEGV {
        // SAFETY: the caller's pointers.
        if let Some(r) = unsafe { crate::mmio_trap::app_sigaction(act, old) } {
            return r;
        }
    }
    // SAFETY: the caller's.
    unsafe { real::sigaction(sig, act, old) }
}

/// `munmap(2)`: a UAR page stops being watched, and a core clock page trapped,
/// before it goes.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    crate::doorbell::remove_pages(addr as usize, len);
    if len == 4096 {
        crate::mmio_trap::remove_load_page(addr as usize);
    }
    // SAFETY: plain syscall with the caller's arguments.
    unsafe { libc::syscall(libc::SYS_munmap, addr, len) as c_int }
}

/// `fstat(2)`: a uverbs file (a memfd) and an rdma_cm file are the character
/// device the uverbs device stands for (libibverbs's and librdmacm's `open_cdev`
/// check `S_ISCHR` and `st_rdev`).
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, st: *mut libc::stat) -> c_int {
    if matches!(fdtab::kind(fd), Kind::RdmaCm | Kind::Uverbs) {
        // SAFETY: a NUL-terminated path; the caller's buffer.
        return unsafe { real::stat(BACKING.as_ptr().cast(), st) };
    }
    // SAFETY: the caller's.
    unsafe { real::fstat(fd, st) }
}

/// `fstat64(2)`.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, st: *mut libc::stat) -> c_int {
    // SAFETY: the caller's (`stat` and `stat64` are one layout on 64-bit Linux).
    unsafe { fstat(fd, st) }
}

/// `stat(2)`: the uverbs device is its backing character device.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, st: *mut libc::stat) -> c_int {
    // SAFETY: the caller's.
    let p = if unsafe { is_uverbs(path) } {
        BACKING.as_ptr().cast()
    } else {
        path
    };
    // SAFETY: the caller's.
    unsafe { real::stat(p, st) }
}

/// `stat64(2)`.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn stat64(path: *const c_char, st: *mut libc::stat) -> c_int {
    // SAFETY: the caller's (`struct stat64` is `struct stat` on 64-bit Linux).
    unsafe { stat(path, st) }
}

/// `lstat(2)`.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn lstat(path: *const c_char, st: *mut libc::stat) -> c_int {
    // SAFETY: the caller's.
    let p = if unsafe { is_uverbs(path) } {
        BACKING.as_ptr().cast()
    } else {
        path
    };
    // SAFETY: the caller's.
    unsafe { real::lstat(p, st) }
}

/// `fstatat(2)`.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn fstatat(
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat,
    flags: c_int,
) -> c_int {
    // `fstatat(fd, "", st, AT_EMPTY_PATH)` is `fstat(fd)`.
    // SAFETY: the caller's NUL-terminated path.
    if flags & libc::AT_EMPTY_PATH != 0
        && !path.is_null()
        && unsafe { *path } == 0
        && matches!(fdtab::kind(dirfd), Kind::RdmaCm | Kind::Uverbs)
    {
        // SAFETY: the caller's buffer.
        return unsafe { fstat(dirfd, st) };
    }
    // SAFETY: the caller's.
    let p = if unsafe { is_uverbs(path) } {
        BACKING.as_ptr().cast()
    } else {
        path
    };
    // SAFETY: the caller's.
    unsafe { real::fstatat(dirfd, p, st, flags) }
}

/// `fstatat64(2)`.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn fstatat64(
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's.
    unsafe { fstatat(dirfd, path, st, flags) }
}

/// `access(2)`.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: the caller's.
    let p = if unsafe { is_uverbs(path) } {
        BACKING.as_ptr().cast()
    } else {
        path
    };
    // SAFETY: the caller's.
    unsafe { real::access(p, mode) }
}

/// `socket(2)`: the RDMA netlink family is refused (EPROTONOSUPPORT, as on a kernel
/// without `ib_core`), so libibverbs finds devices in sysfs.
///
/// # Safety
///
/// As libc's.
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, proto: c_int) -> c_int {
    if domain == libc::AF_NETLINK && proto == NETLINK_RDMA {
        return fail(Errno::EPROTONOSUPPORT);
    }
    // SAFETY: the caller's.
    unsafe { real::socket(domain, ty, proto) }
}

//! The libc functions this library interposes, as libc defines them
//! (`dlsym(RTLD_NEXT, ...)`), for passing calls through and for the library's own use
//! of its descriptors.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Looks `name` (NUL-terminated) up once in the libraries after this one.
pub fn lookup(slot: &AtomicUsize, name: &'static [u8]) -> usize {
    let p = slot.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: `name` is a NUL-terminated symbol name; dlsym has no other requirement.
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    slot.store(f, Ordering::Relaxed);
    f
}

macro_rules! real_fn {
    ($( $name:ident : fn($($a:ident : $t:ty),*) -> $r:ty; )*) => {
        $(
            /// libc's function of this name.
            ///
            /// # Safety
            ///
            /// As the libc function's.
            pub unsafe fn $name($($a: $t),*) -> $r {
                static SLOT: AtomicUsize = AtomicUsize::new(0);
                let f = lookup(&SLOT, concat!(stringify!($name), "\0").as_bytes());
                if f == 0 {
                    // SAFETY: errno is thread-local.
                    unsafe { *libc::__errno_location() = libc::ENOSYS };
                    return (-1i32) as $r;
                }
                // SAFETY: dlsym found the libc function with this C signature.
                let f: unsafe extern "C" fn($($t),*) -> $r = unsafe { std::mem::transmute(f) };
                // SAFETY: the caller's.
                unsafe { f($($a),*) }
            }
        )*
    };
}

real_fn! {
    open: fn(path: *const libc::c_char, flags: libc::c_int, mode: libc::c_uint) -> libc::c_int;
    openat: fn(dirfd: libc::c_int, path: *const libc::c_char, flags: libc::c_int, mode: libc::c_uint) -> libc::c_int;
    close: fn(fd: libc::c_int) -> libc::c_int;
    dup: fn(fd: libc::c_int) -> libc::c_int;
    dup2: fn(fd: libc::c_int, new: libc::c_int) -> libc::c_int;
    dup3: fn(fd: libc::c_int, new: libc::c_int, flags: libc::c_int) -> libc::c_int;
    fcntl: fn(fd: libc::c_int, cmd: libc::c_int, arg: libc::c_ulong) -> libc::c_int;
    read: fn(fd: libc::c_int, buf: *mut libc::c_void, n: libc::size_t) -> libc::ssize_t;
    write: fn(fd: libc::c_int, buf: *const libc::c_void, n: libc::size_t) -> libc::ssize_t;
    ioctl: fn(fd: libc::c_int, req: libc::c_ulong, arg: *mut libc::c_void) -> libc::c_int;
    mmap: fn(addr: *mut libc::c_void, len: libc::size_t, prot: libc::c_int, flags: libc::c_int, fd: libc::c_int, off: libc::off_t) -> *mut libc::c_void;
    stat: fn(path: *const libc::c_char, st: *mut libc::stat) -> libc::c_int;
    lstat: fn(path: *const libc::c_char, st: *mut libc::stat) -> libc::c_int;
    fstatat: fn(dirfd: libc::c_int, path: *const libc::c_char, st: *mut libc::stat, flags: libc::c_int) -> libc::c_int;
    fstat: fn(fd: libc::c_int, st: *mut libc::stat) -> libc::c_int;
    access: fn(path: *const libc::c_char, mode: libc::c_int) -> libc::c_int;
    socket: fn(domain: libc::c_int, ty: libc::c_int, proto: libc::c_int) -> libc::c_int;
    sigaction: fn(sig: libc::c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> libc::c_int;
}

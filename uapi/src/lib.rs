//! # ferroverbs-uapi: Linux's RDMA user interface, in the process
//!
//! A preload library (`libferroverbs_uapi.so`) that plays, inside an unmodified
//! program, the part of the Linux kernel that rdma-core's own libibverbs and libmlx5
//! talk to, so that they run on a simulated ConnectX:
//!
//! * discovery: a sysfs tree under `$SYSFS_PATH` (written by `ferroverbs run`) names
//!   `uverbs0` with a ConnectX-5's PCI id, so libmlx5 claims it; the RDMA netlink
//!   socket is refused (EPROTONOSUPPORT) so libibverbs reads sysfs;
//! * `/dev/infiniband/uverbs0`: `open` gives a memfd that `stat` and `fstat` show
//!   as `/dev/null` (a real character device, whose numbers the sysfs `dev` file
//!   repeats), and `write`
//!   carries the uverbs command ABI ([`mod@file`], [`verbs`]); `RDMA_VERBS_IOCTL`
//!   runs the methods libmlx5 needs that have no write() form, and CQ and QP
//!   creation ([`mod@ioctl`]); every other method is EPROTONOSUPPORT, so libibverbs
//!   uses its write() command;
//! * `mmap` of the file gives the UAR pages (the memfd's pages at `mlx5_ib`'s
//!   offsets), read-only: libmlx5's doorbell stores fault and are decoded and
//!   forwarded to the device on the storing thread ([`mmio_trap`]), or a device
//!   thread watches the pages ([`doorbell`]), as it does the pages a program maps
//!   with the raw system call (UCX);
//! * completion channels and the async file are eventfds with the kernel's read
//!   semantics ([`events`]).
//!
//! The control plane is the driver's (`ferroverbs::Context::exec_cmd`): each verbs
//! object is the firmware object `mlx5_ib` would make.
#![warn(missing_docs)]

pub mod abi;
pub mod clock;
pub mod doorbell;
pub mod events;
pub mod fdtab;
pub mod file;
#[cfg(not(test))]
mod interpose;
pub mod ioctl;
pub mod mmio_trap;
pub mod nic;
pub mod poll_assist;
pub mod rdma_cm;
pub mod real;
pub mod user;
pub mod verbs;

/// An errno value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

#[allow(missing_docs)]
impl Errno {
    pub const EPERM: Errno = Errno(libc::EPERM);
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EINTR: Errno = Errno(libc::EINTR);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const EBADF: Errno = Errno(libc::EBADF);
    pub const EAGAIN: Errno = Errno(libc::EAGAIN);
    pub const ENOMEM: Errno = Errno(libc::ENOMEM);
    pub const EFAULT: Errno = Errno(libc::EFAULT);
    pub const EBUSY: Errno = Errno(libc::EBUSY);
    pub const ENODEV: Errno = Errno(libc::ENODEV);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const EMFILE: Errno = Errno(libc::EMFILE);
    pub const ENOTTY: Errno = Errno(libc::ENOTTY);
    pub const ETIMEDOUT: Errno = Errno(libc::ETIMEDOUT);
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    pub const EPROTONOSUPPORT: Errno = Errno(libc::EPROTONOSUPPORT);

    /// The calling thread's errno.
    pub fn last() -> Errno {
        Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    }
}

/// Whether `FERROVERBS_UAPI_TRACE=1` asked for a line on stderr per command,
/// forwarded doorbell and delivered event.
pub fn trace() -> bool {
    use std::sync::atomic::{AtomicU8, Ordering};
    static T: AtomicU8 = AtomicU8::new(2);
    match T.load(Ordering::Relaxed) {
        0 => false,
        1 => true,
        _ => {
            let on = std::env::var("FERROVERBS_UAPI_TRACE").as_deref() == Ok("1");
            T.store(u8::from(on), Ordering::Relaxed);
            on
        }
    }
}

/// Closes an event descriptor of this layer (completion channel or async file).
pub fn close_event_fd(fd: i32) -> i32 {
    fdtab::set(fd, fdtab::Kind::None);
    match events::unregister(fd) {
        Some(f) => f.close(),
        // SAFETY: plain close of a descriptor the caller names.
        None => unsafe { real::close(fd) },
    }
}

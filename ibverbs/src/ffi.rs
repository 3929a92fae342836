//! The C entry points: every function here takes or returns pointers of the verbs ABI.
//! This module holds all the unsafe code of the library; each block says why it is
//! sound (`// SAFETY:`). The rules it relies on are the verbs API's own: an object
//! pointer passed in is one this library returned and the caller has not destroyed;
//! out-parameters point to writable structs of the documented type; memory named by a
//! scatter/gather entry stays valid while the request is posted.
//!
//! Objects are allocated as `#[repr(C)]` structs whose first field is the public verbs
//! struct, so the pointer the application holds is the pointer to the whole object.
//! The driver objects inside borrow each other (`QueuePair<'a>` borrows its `Pd`); the
//! library hands them `'static` references to their parents, and keeps each parent
//! alive while children exist (a use count: destroying a PD with live MRs or QPs, or a
//! CQ with live QPs, fails with `EBUSY`, as the kernel refuses it).

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::os::fd::RawFd;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use ferroverbs::verbs::{requester_completion, HotReq};
use ferroverbs::verbs::{
    AddressHandle, AsyncEvent, CompletionChannel, CompletionQueue, MemoryRegion, Pd, QpCap,
    QpInitAttr, QpState, QpType, QueuePair, RecvWr, RemoteAddr, SendBatch, SendData, SendFlags,
    SendOp, SendWr, Sge, SharedReceiveQueue, SrqAttr,
};
use ferroverbs::GidEntry;
use ferroverbs_sim::Sim;

use crate::abi::{self, c};
use crate::convert;
use crate::device::{self, AnyBus, Nic};
use crate::spin::SpinLock;

pub(crate) type B = AnyBus;

/// Scatter/gather entries one work request may carry through this library.
pub(crate) const MAX_SGE: usize = 32;

pub(crate) fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e };
}

/// This thread's errno.
fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Runs `f`, turning a panic into `fail` (a panic must not cross the C boundary).
pub(crate) fn guard<R>(fail: R, f: impl FnOnce() -> R) -> R {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(fail)
}

/// For pointer-returning verbs: the object or NULL with errno set.
pub(crate) fn ptr_result<T>(r: Result<*mut T, c_int>) -> *mut T {
    match r {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            ptr::null_mut()
        }
    }
}

/// For int-returning verbs: 0 or the (positive) errno, also stored in errno.
pub(crate) fn int_result(r: Result<(), c_int>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            e
        }
    }
}

/// A raw pointer that may be kept in a global table.
struct SyncPtr<T>(*mut T);
impl<T> Clone for SyncPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SyncPtr<T> {}
// SAFETY: the tables only store and hand back the addresses; every dereference is
// done by an entry point under the verbs API's rules (the object is alive).
unsafe impl<T> Send for SyncPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SyncPtr<T> {}

/// An object this library allocates for the application: a `#[repr(C)]` struct whose
/// first field is the public verbs struct `Ibv`, so the pointer the application holds
/// (`*mut Ibv`) is the address of the whole object.
///
/// # Safety
/// Implementors are `#[repr(C)]` with an `Ibv` first field, or override every method
/// with the offset they use.
pub(crate) unsafe trait VerbsObj: Sized + 'static {
    /// The public verbs struct the application sees.
    type Ibv;

    /// The object behind a pointer the application passed: EINVAL for NULL.
    ///
    /// # Safety
    /// `p` must be NULL or a pointer this library returned for an object of this type
    /// that is alive (and stays alive while the reference is used: the use counts).
    unsafe fn from_ibv(p: *mut Self::Ibv) -> Result<&'static Self, c_int> {
        // SAFETY: the caller's contract; `Ibv` is the first field of `#[repr(C)] Self`.
        unsafe { (p as *mut Self).as_ref() }.ok_or(libc::EINVAL)
    }

    /// Gives the object to the application: the pointer it will hold.
    fn into_ibv(self: Box<Self>) -> *mut Self::Ibv {
        Box::into_raw(self) as *mut Self::Ibv
    }

    /// Takes an object back from the application to destroy it.
    ///
    /// # Safety
    /// `p` must come from [`VerbsObj::into_ibv`] of this type, taken back once, with
    /// nothing borrowing the object any more.
    unsafe fn take(p: *mut Self::Ibv) -> Box<Self> {
        // SAFETY: the caller's contract: `p` is the address `Box::into_raw` returned.
        unsafe { Box::from_raw(p as *mut Self) }
    }
}

/// Implements [`VerbsObj`] for objects whose first field is their verbs struct.
macro_rules! verbs_obj {
    ($($t:ty => $ibv:ty),* $(,)?) => {$(
        // SAFETY: `#[repr(C)]` with the verbs struct as first field (see the struct).
        unsafe impl VerbsObj for $t {
            type Ibv = $ibv;
        }
    )*};
}

verbs_obj! {
    PdObj => abi::ibv_pd,
    MrObj => abi::ibv_mr,
    ChanObj => abi::ibv_comp_channel,
    CqObj => abi::ibv_cq,
    QpObj => abi::ibv_qp,
    SrqObj => abi::ibv_srq,
    AhObj => abi::ibv_ah,
}

/// How many objects use one (a use count): destroying an object in use fails with
/// `EBUSY`, as the kernel refuses it.
#[derive(Default)]
pub(crate) struct Users(AtomicUsize);

impl Users {
    pub(crate) fn acquire(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn release(&self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }

    /// `Ok` when nothing uses the object, else EBUSY.
    pub(crate) fn idle(&self) -> Result<(), c_int> {
        if self.0.load(Ordering::Acquire) == 0 {
            Ok(())
        } else {
            Err(libc::EBUSY)
        }
    }
}

/// The shape shared by the int-returning verbs on one object: `obj` is the object's
/// lookup ([`VerbsObj::from_ibv`]); runs `f` on it and returns 0 or the positive errno
/// (also stored in errno); a panic returns EIO.
pub(crate) fn int_verb<O>(
    obj: Result<&'static O, c_int>,
    f: impl FnOnce(&'static O) -> Result<(), c_int>,
) -> c_int {
    guard(libc::EIO, || int_result(obj.and_then(f)))
}

/// As [`int_verb`] for the verbs that create an object: the new object's pointer, or
/// NULL with errno set (a panic gives NULL).
pub(crate) fn ptr_verb<O, T>(
    obj: Result<&'static O, c_int>,
    f: impl FnOnce(&'static O) -> Result<*mut T, c_int>,
) -> *mut T {
    guard(ptr::null_mut(), || ptr_result(obj.and_then(f)))
}

/// The shape of the verbs that answer 0 or -1 and leave errno alone (`ibv_query_gid`,
/// `ibv_get_cq_event`, ...): -1 for a failed lookup, `None` from `f`, or a panic.
fn status_verb<O>(
    obj: Result<&'static O, c_int>,
    f: impl FnOnce(&'static O) -> Option<()>,
) -> c_int {
    guard(-1, || match obj.ok().and_then(f) {
        Some(()) => 0,
        None => -1,
    })
}

/// Driver results as verbs results: the error's errno ([`convert::errno_of`]).
pub(crate) trait OrErrno<T> {
    fn or_errno(self) -> Result<T, c_int>;
}

impl<T> OrErrno<T> for Result<T, ferroverbs::verbs::Error> {
    fn or_errno(self) -> Result<T, c_int> {
        self.map_err(|e| convert::errno_of(&e))
    }
}

// ---------------------------------------------------------------------------------
// Device list and context
// ---------------------------------------------------------------------------------

static DEVICE: OnceLock<SyncPtr<abi::verbs_device>> = OnceLock::new();

/// Our tag in `verbs_device.ops`: not a provider's `verbs_device_ops`.
static DEVICE_TAG: u64 = 0x6665_7272_6f76_6572;

fn the_device() -> *mut abi::verbs_device {
    DEVICE
        .get_or_init(|| {
            let mut d = Box::new(abi::verbs_device {
                device: abi::ibv_device {
                    _ops: [ptr::null_mut(); 2],
                    node_type: c::IBV_NODE_CA,
                    transport_type: c::IBV_TRANSPORT_IB,
                    name: [0; 64],
                    dev_name: [0; 64],
                    dev_path: [0; 256],
                    ibdev_path: [0; 256],
                },
                ops: &DEVICE_TAG as *const u64 as *const c_void,
                refcount: 1,
                entry: [ptr::null_mut(); 2],
                sysfs: ptr::null_mut(),
                core_support: 0,
            });
            let name = device::device_name();
            convert::set_cstr(&mut d.device.name, &name);
            convert::set_cstr(&mut d.device.dev_name, "uverbs-ferroverbs");
            convert::set_cstr(&mut d.device.dev_path, "/dev/null");
            convert::set_cstr(
                &mut d.device.ibdev_path,
                &format!("/nonexistent/ferroverbs/{name}"),
            );
            SyncPtr(Box::into_raw(d))
        })
        .0
}

fn spec_or_warn() -> Option<device::DeviceSpec> {
    match device::spec_from_env() {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!("libibverbs (ferroverbs): {}: {e}", device::DEVICE_ENV);
            None
        }
    }
}

pub(crate) unsafe extern "C" fn get_device_list(num: *mut c_int) -> *mut *mut abi::ibv_device {
    guard(ptr::null_mut(), || {
        let n = usize::from(spec_or_warn().is_some());
        // SAFETY: calloc of n+1 pointers; freed by `free_device_list` with free().
        let list = unsafe { libc::calloc(n + 1, std::mem::size_of::<usize>()) }
            as *mut *mut abi::ibv_device;
        if list.is_null() {
            set_errno(libc::ENOMEM);
            return ptr::null_mut();
        }
        if n == 1 {
            // SAFETY: `list` has two slots; the device lives for the process.
            unsafe { *list = the_device() as *mut abi::ibv_device };
        }
        if !num.is_null() {
            // SAFETY: `num` is the caller's int.
            unsafe { *num = n as c_int };
        }
        list
    })
}

pub(crate) unsafe extern "C" fn free_device_list(list: *mut *mut abi::ibv_device) {
    // SAFETY: `list` came from `get_device_list` (calloc).
    unsafe { libc::free(list as *mut c_void) };
}

pub(crate) unsafe extern "C" fn get_device_name(dev: *mut abi::ibv_device) -> *const c_char {
    if dev.is_null() {
        return ptr::null();
    }
    // SAFETY: `dev` is our device; its name is NUL-terminated.
    unsafe { (*dev).name.as_ptr() }
}

pub(crate) unsafe extern "C" fn get_device_guid(_dev: *mut abi::ibv_device) -> u64 {
    guard(0, || {
        let g = match device::spec_from_env() {
            Ok(s) => device::guid(&s),
            Err(_) => 0,
        };
        g.to_be()
    })
}

pub(crate) unsafe extern "C" fn get_device_index(_dev: *mut abi::ibv_device) -> c_int {
    -1
}

/// Everything of one `ibv_open_device`.
#[repr(C)]
pub(crate) struct CtxObj {
    pub(crate) vctx: abi::verbs_context,
    pub(crate) nic: &'static Nic,
    pub(crate) own_async_fd: Option<RawFd>,
    /// `context->cmd_fd` (see [`CmdFile`]), closed with the context as rdma-core's
    /// `verbs_uninit_context` closes it.
    pub(crate) cmd_fd: std::os::fd::OwnedFd,
    /// `context->async_fd`: an epoll descriptor watching the async EQ's eventfd (see
    /// [`AppFd`]).
    pub(crate) app_async_fd: AppFd,
}

/// The descriptor an application gets for `channel->fd` or `context->async_fd`: an
/// epoll instance (level-triggered) on the device's eventfd, so that it is readable
/// exactly when that eventfd is (`poll(2)`, `epoll` and `select` work on it), while its
/// file status flags are the application's own: the eventfd underneath is opened
/// non-blocking for the driver, and an application that sets `O_NONBLOCK` on this
/// descriptor (`fcntl`) makes `ibv_get_cq_event` / `ibv_get_async_event` answer -1
/// with `EAGAIN` instead of waiting, as rdma-core's event files do.
pub(crate) struct AppFd(std::os::fd::OwnedFd);

impl AppFd {
    /// An epoll descriptor (blocking, close-on-exec) that watches `inner`.
    fn watching(inner: RawFd) -> Result<AppFd, c_int> {
        use std::os::fd::FromRawFd;
        // SAFETY: epoll_create1 takes no pointers; it returns a new descriptor or -1.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EMFILE));
        }
        // SAFETY: `ep` was just returned by epoll_create1 and is owned by nobody else.
        let own = unsafe { std::os::fd::OwnedFd::from_raw_fd(ep) };
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 0,
        };
        // SAFETY: `ev` is a valid epoll_event living across the call.
        if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, inner, &mut ev) } != 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL));
        }
        Ok(AppFd(own))
    }

    fn raw(&self) -> RawFd {
        use std::os::fd::AsRawFd;
        self.0.as_raw_fd()
    }

    /// Whether the application made the descriptor non-blocking.
    fn nonblocking(&self) -> bool {
        // SAFETY: F_GETFL on our own open descriptor takes no pointer.
        let fl = unsafe { libc::fcntl(self.raw(), libc::F_GETFL) };
        fl >= 0 && fl & libc::O_NONBLOCK != 0
    }

    /// Sleeps until the descriptor is readable (an event is waiting).
    fn wait(&self) {
        let mut p = libc::pollfd {
            fd: self.raw(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid `pollfd` that lives across the call; nfds = 1.
        unsafe { libc::poll(&mut p, 1, -1) };
    }

    /// The event from `take`, or, when there is none: -1 with `EAGAIN` on a
    /// non-blocking descriptor (`None`), otherwise a wait until the descriptor is
    /// readable and another try.
    fn next<T>(&self, mut take: impl FnMut() -> Option<T>) -> Option<T> {
        loop {
            if let Some(v) = take() {
                return Some(v);
            }
            if self.nonblocking() {
                set_errno(libc::EAGAIN);
                return None;
            }
            // The program stops polling to wait: the device thread, napping while
            // the program's empty polls did its work, carries the traffic again now.
            if let Ok(n) = device::nic() {
                if let Some(sim) = &n.sim {
                    sim.end_assist();
                }
            }
            self.wait();
        }
    }
}

// SAFETY: the application's pointer is the `context` member of the `verbs_context`
// that is the first field of `#[repr(C)] CtxObj`; every method steps by its offset.
unsafe impl VerbsObj for CtxObj {
    type Ibv = abi::ibv_context;

    unsafe fn from_ibv(ctx: *mut abi::ibv_context) -> Result<&'static Self, c_int> {
        if ctx.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: our contexts are the `context` member of a `CtxObj` (whose first
        // field is the `verbs_context`), so stepping back `CTX_OFFSET` bytes gives the
        // `CtxObj`; the caller guarantees it is alive.
        Ok(unsafe { &*((ctx as *mut u8).sub(CTX_OFFSET) as *const CtxObj) })
    }

    fn into_ibv(self: Box<Self>) -> *mut abi::ibv_context {
        let p = Box::into_raw(self);
        // SAFETY: `p` is the box just leaked; the context is inside it.
        unsafe { &mut (*p).vctx.context }
    }

    unsafe fn take(ctx: *mut abi::ibv_context) -> Box<Self> {
        // SAFETY: as in `from_ibv`: `ctx - CTX_OFFSET` is the address `into_ibv`
        // leaked, taken back once (the caller's contract).
        unsafe { Box::from_raw((ctx as *mut u8).sub(CTX_OFFSET) as *mut CtxObj) }
    }
}

/// Where the application's `ibv_context` lies in a [`CtxObj`].
const CTX_OFFSET: usize = std::mem::offset_of!(abi::verbs_context, context);

pub(crate) fn fnp(f: *const ()) -> *const c_void {
    f as *const c_void
}

pub(crate) unsafe extern "C" fn open_device(dev: *mut abi::ibv_device) -> *mut abi::ibv_context {
    guard(ptr::null_mut(), || {
        if dev.is_null() {
            set_errno(libc::EINVAL);
            return ptr::null_mut();
        }
        let nic = match device::nic() {
            Ok(n) => n,
            Err(e) => {
                eprintln!("libibverbs (ferroverbs): {e}");
                set_errno(libc::ENODEV);
                return ptr::null_mut();
            }
        };
        let cmd_fd = match CmdFile::open() {
            Ok(f) => f,
            Err(e) => {
                set_errno(e);
                return ptr::null_mut();
            }
        };
        let (async_fd, own) = match nic.ctx.async_event_fd() {
            Some(fd) => (fd, None),
            None => {
                // SAFETY: plain eventfd creation.
                let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
                (fd, (fd >= 0).then_some(fd))
            }
        };
        let app_async_fd = match AppFd::watching(async_fd) {
            Ok(f) => f,
            Err(e) => {
                if let Some(fd) = own {
                    // SAFETY: our own eventfd, not handed out.
                    unsafe { libc::close(fd) };
                }
                set_errno(e);
                return ptr::null_mut();
            }
        };
        let mut ops = [ptr::null::<c_void>(); 32];
        ops[abi::ops::POLL_CQ] = fnp(poll_cq as *const ());
        ops[abi::ops::REQ_NOTIFY_CQ] = fnp(req_notify_cq as *const ());
        ops[abi::ops::POST_SRQ_RECV] = fnp(post_srq_recv as *const ());
        ops[abi::ops::POST_SEND] = fnp(post_send as *const ());
        ops[abi::ops::POST_RECV] = fnp(post_recv as *const ());
        crate::mw::set_ops(&mut ops);
        let mut ext = [ptr::null::<c_void>(); 39];
        ext[abi::vops::QUERY_PORT] = fnp(query_port_ex as *const ());
        ext[abi::vops::QUERY_DEVICE_EX] = fnp(query_device_ex as *const ());
        crate::qp_ex::set_ops(&mut ext);
        crate::cq_ex::set_ops(&mut ext);
        Box::new(CtxObj {
            vctx: abi::verbs_context {
                ext,
                sz: std::mem::size_of::<abi::verbs_context>(),
                context: abi::ibv_context {
                    device: dev,
                    ops,
                    cmd_fd: std::os::fd::AsRawFd::as_raw_fd(&cmd_fd),
                    async_fd: app_async_fd.raw(),
                    num_comp_vectors: 1,
                    mutex: abi::pthread_mutex_t([0; 40]),
                    abi_compat: c::VERBS_ABI_IS_EXTENDED as *mut c_void,
                },
            },
            nic,
            own_async_fd: own,
            cmd_fd,
            app_async_fd,
        })
        .into_ibv()
    })
}

pub(crate) unsafe extern "C" fn close_device(ctx: *mut abi::ibv_context) -> c_int {
    // SAFETY: the caller passes a context of ours, closed once.
    if let Err(e) = unsafe { CtxObj::from_ibv(ctx) } {
        return e;
    }
    // SAFETY: created by `open_device`, closed once.
    let b = unsafe { CtxObj::take(ctx) };
    if std::env::var_os("FERROVERBS_STATS").is_some() {
        if let Some(s) = b.nic.stats() {
            eprintln!("libibverbs (ferroverbs): {s}");
        }
    }
    if let Some(fd) = b.own_async_fd {
        // SAFETY: our own eventfd.
        unsafe { libc::close(fd) };
    }
    0
}

pub(crate) unsafe extern "C" fn query_device(
    ctx: *mut abi::ibv_context,
    attr: *mut abi::ibv_device_attr,
) -> c_int {
    // SAFETY: the caller's context.
    int_verb(unsafe { CtxObj::from_ibv(ctx) }, |o| {
        let d = o.nic.ctx.query_device().map_err(|_| libc::EIO)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: `attr` is the caller's `ibv_device_attr`.
        unsafe { attr.write(convert::device_attr_to_ibv(&d)) };
        Ok(())
    })
}

unsafe extern "C" fn query_device_ex(
    ctx: *mut abi::ibv_context,
    _input: *const c_void,
    attr: *mut u8,
    attr_size: usize,
) -> c_int {
    // SAFETY: the caller's context.
    int_verb(unsafe { CtxObj::from_ibv(ctx) }, |o| {
        if attr.is_null() || attr_size < std::mem::size_of::<abi::ibv_device_attr>() {
            return Err(libc::EINVAL);
        }
        let d = o.nic.ctx.query_device().map_err(|_| libc::EIO)?;
        let n = attr_size.min(abi::DEVICE_ATTR_EX_SIZE);
        // SAFETY: `attr` has `attr_size` writable bytes (the inline wrapper passes
        // sizeof its struct); we write within the first `n`.
        unsafe {
            ptr::write_bytes(attr, 0, n);
            (attr as *mut abi::ibv_device_attr).write_unaligned(convert::device_attr_to_ibv(&d));
            // As libibverbs fills them from mlx5_ib's QUERY_DEVICE_EX answer
            // (`timestamp_mask`, `hca_core_clock`: Linux `mlx5_ib_query_device`).
            if n >= abi::DEVICE_ATTR_EX_COMPLETION_TIMESTAMP_MASK + 8 {
                (attr.add(abi::DEVICE_ATTR_EX_COMPLETION_TIMESTAMP_MASK) as *mut u64)
                    .write_unaligned(d.completion_timestamp_mask);
            }
            if n >= abi::DEVICE_ATTR_EX_HCA_CORE_CLOCK + 8 {
                (attr.add(abi::DEVICE_ATTR_EX_HCA_CORE_CLOCK) as *mut u64)
                    .write_unaligned(u64::from(d.hca_core_clock_khz));
            }
            if n >= abi::DEVICE_ATTR_EX_PHYS_PORT_CNT_EX + 4 {
                (attr.add(abi::DEVICE_ATTR_EX_PHYS_PORT_CNT_EX) as *mut u32)
                    .write_unaligned(u32::from(d.phys_port_cnt.max(1)));
            }
        }
        Ok(())
    })
}

fn port_attr(o: &CtxObj, port: u8) -> Result<abi::ibv_port_attr, c_int> {
    let p = o.nic.ctx.query_port(port).map_err(|_| libc::EINVAL)?;
    Ok(convert::port_attr_to_ibv(&p))
}

/// The exported `ibv_query_port@1.1`: fills the 48-byte compat struct.
pub(crate) unsafe extern "C" fn query_port(
    ctx: *mut abi::ibv_context,
    port: u8,
    attr: *mut u8,
) -> c_int {
    // SAFETY: same contract, compat size.
    unsafe { query_port_ex(ctx, port, attr, abi::PORT_ATTR_COMPAT_SIZE) }
}

/// `verbs_context.query_port`: fills `min(attr_size, 52)` bytes.
unsafe extern "C" fn query_port_ex(
    ctx: *mut abi::ibv_context,
    port: u8,
    attr: *mut u8,
    attr_size: usize,
) -> c_int {
    // SAFETY: the caller's context.
    int_verb(unsafe { CtxObj::from_ibv(ctx) }, |o| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        let a = port_attr(o, port)?;
        let n = attr_size.min(std::mem::size_of::<abi::ibv_port_attr>());
        // SAFETY: `attr` has `attr_size` writable bytes; we copy `n` of them from a
        // local struct.
        unsafe { ptr::copy_nonoverlapping(&a as *const abi::ibv_port_attr as *const u8, attr, n) };
        Ok(())
    })
}

fn gid_entry(o: &CtxObj, port: u8, index: u32) -> Result<GidEntry, c_int> {
    let index = u16::try_from(index).map_err(|_| libc::EINVAL)?;
    if u32::from(index) >= o.nic.ctx.gid_table_len() {
        return Err(libc::EINVAL);
    }
    o.nic.ctx.query_gid(port, index).map_err(|_| libc::EINVAL)
}

pub(crate) unsafe extern "C" fn query_gid(
    ctx: *mut abi::ibv_context,
    port: u8,
    index: c_int,
    gid: *mut [u8; 16],
) -> c_int {
    // SAFETY: the caller's context.
    status_verb(unsafe { CtxObj::from_ibv(ctx) }, |o| {
        let e = gid_entry(o, port, index as u32).ok()?;
        // SAFETY: `gid` is NULL or the caller's `union ibv_gid`.
        unsafe { gid.as_mut() }?.copy_from_slice(&e.gid);
        Some(())
    })
}

pub(crate) unsafe extern "C" fn query_gid_ex(
    ctx: *mut abi::ibv_context,
    port: u32,
    index: u32,
    entry: *mut abi::ibv_gid_entry,
    _flags: u32,
    entry_size: usize,
) -> c_int {
    // SAFETY: the caller's context.
    int_verb(unsafe { CtxObj::from_ibv(ctx) }, |o| {
        if entry.is_null() || entry_size < std::mem::size_of::<abi::ibv_gid_entry>() {
            return Err(libc::EINVAL);
        }
        let port = u8::try_from(port).map_err(|_| libc::EINVAL)?;
        let e = gid_entry(o, port, index)?;
        if e.is_empty() {
            return Err(libc::ENODATA);
        }
        // SAFETY: `entry` is the caller's `ibv_gid_entry`.
        unsafe { entry.write(gid_entry_to_ibv(&e.gid, index, port)) };
        Ok(())
    })
}

/// The `ibv_gid_entry` of a RoCE v2 GID of ours.
fn gid_entry_to_ibv(gid: &[u8; 16], index: u32, port: u8) -> abi::ibv_gid_entry {
    abi::ibv_gid_entry {
        gid: *gid,
        gid_index: index,
        port_num: u32::from(port),
        gid_type: c::IBV_GID_TYPE_ROCE_V2,
        ndev_ifindex: 0,
    }
}

pub(crate) unsafe extern "C" fn query_gid_table(
    ctx: *mut abi::ibv_context,
    entries: *mut abi::ibv_gid_entry,
    max_entries: usize,
    _flags: u32,
    entry_size: usize,
) -> isize {
    guard(-(libc::EIO as isize), || {
        // SAFETY: the caller's context.
        let Ok(o) = (unsafe { CtxObj::from_ibv(ctx) }) else {
            return -(libc::EINVAL as isize);
        };
        if entries.is_null() || entry_size < std::mem::size_of::<abi::ibv_gid_entry>() {
            return -(libc::EINVAL as isize);
        }
        let Ok(p) = o.nic.ctx.query_port(1) else {
            return -(libc::EIO as isize);
        };
        let mut n = 0usize;
        for e in p.gids.iter().filter(|e| !e.is_empty()) {
            if n == max_entries {
                return -(libc::EINVAL as isize);
            }
            // SAFETY: `entries` holds `max_entries` entries of `entry_size` bytes.
            unsafe {
                (entries as *mut u8)
                    .add(n * entry_size)
                    .cast::<abi::ibv_gid_entry>()
                    .write_unaligned(gid_entry_to_ibv(&e.gid, u32::from(e.index), 1))
            };
            n += 1;
        }
        n as isize
    })
}

pub(crate) unsafe extern "C" fn query_gid_type(
    ctx: *mut abi::ibv_context,
    port: u8,
    index: c_uint,
    ty: *mut c_uint,
) -> c_int {
    // SAFETY: the caller's context.
    status_verb(unsafe { CtxObj::from_ibv(ctx) }, |o| {
        gid_entry(o, port, index).ok()?;
        // SAFETY: NULL or the caller's out-parameter.
        *unsafe { ty.as_mut() }? = c::IBV_GID_TYPE_SYSFS_ROCE_V2;
        Some(())
    })
}

pub(crate) unsafe extern "C" fn query_pkey(
    ctx: *mut abi::ibv_context,
    _port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    if ctx.is_null() || pkey.is_null() || index != 0 {
        return -1;
    }
    // SAFETY: the caller's out-parameter. RoCE ports have the default P_Key only.
    unsafe { pkey.write(0xffffu16.to_be()) };
    0
}

pub(crate) unsafe extern "C" fn get_pkey_index(
    _ctx: *mut abi::ibv_context,
    _port: u8,
    pkey: u16,
) -> c_int {
    if u16::from_be(pkey) | 0x8000 == 0xffff {
        0
    } else {
        -1
    }
}

// ---------------------------------------------------------------------------------
// Protection domains and memory regions
// ---------------------------------------------------------------------------------

#[repr(C)]
pub(crate) struct PdObj {
    pub(crate) ibv: abi::ibv_pd,
    pub(crate) pd: Pd<'static, B>,
    pub(crate) users: Users,
}

pub(crate) unsafe extern "C" fn alloc_pd(ctx: *mut abi::ibv_context) -> *mut abi::ibv_pd {
    // SAFETY: the caller's context.
    ptr_verb(unsafe { CtxObj::from_ibv(ctx) }, |o| {
        let pd = o.nic.ctx.alloc_pd().or_errno()?;
        let handle = pd.pdn();
        Ok(Box::new(PdObj {
            ibv: abi::ibv_pd {
                context: ctx,
                handle,
            },
            pd,
            users: Users::default(),
        })
        .into_ibv())
    })
}

pub(crate) unsafe extern "C" fn dealloc_pd(pd: *mut abi::ibv_pd) -> c_int {
    // SAFETY: the caller's PD.
    int_verb(unsafe { PdObj::from_ibv(pd) }, |p| {
        p.users.idle()?;
        // SAFETY: created by `alloc_pd`; nothing borrows it.
        unsafe { PdObj::take(pd) }.pd.dealloc().or_errno()
    })
}

#[repr(C)]
pub(crate) struct MrObj {
    pub(crate) ibv: abi::ibv_mr,
    pub(crate) mr: MemoryRegion<'static, B>,
    pub(crate) pd: &'static PdObj,
}

/// # Safety
/// `pd` must be NULL or a live PD of ours.
unsafe fn reg_mr_impl(
    pd: *mut abi::ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> *mut abi::ibv_mr {
    // SAFETY: the caller's PD, alive while the MR exists (use count).
    ptr_verb(unsafe { PdObj::from_ibv(pd) }, |p| {
        let acc = convert::access_from_ibv(access as u32)?;
        let start = NonNull::new(addr as *mut u8).ok_or(libc::EINVAL)?;
        if len == 0 {
            return Err(libc::EINVAL);
        }
        if (iova ^ addr as u64) & 0xfff != 0 {
            // Linux refuses an IOVA whose offset in a 4 KiB page differs from the
            // buffer's (`ib_umem_find_best_pgsz` finds no page size): EINVAL.
            return Err(libc::EINVAL);
        }
        // SAFETY: the verbs contract of ibv_reg_mr: the application keeps the memory
        // allocated until ibv_dereg_mr, and the device may access it meanwhile. The
        // keys translate from `iova` (`mkc.start_addr`), the address the application's
        // work requests and its peers use (`ibv_reg_mr_iova2`; `iova == addr` for
        // ibv_reg_mr).
        let mr = unsafe { p.pd.reg_mr_raw_iova(start, len, acc, iova) }.or_errno()?;
        p.users.acquire();
        Ok(Box::new(MrObj {
            ibv: abi::ibv_mr {
                context: p.ibv.context,
                pd,
                addr,
                length: len,
                handle: mr.lkey(),
                lkey: mr.lkey(),
                rkey: mr.rkey(),
            },
            mr,
            pd: p,
        })
        .into_ibv())
    })
}

pub(crate) unsafe extern "C" fn reg_mr(
    pd: *mut abi::ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut abi::ibv_mr {
    // SAFETY: the caller's PD.
    unsafe { reg_mr_impl(pd, addr, len, addr as u64, access) }
}

pub(crate) unsafe extern "C" fn reg_mr_iova(
    pd: *mut abi::ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> *mut abi::ibv_mr {
    // SAFETY: the caller's PD.
    unsafe { reg_mr_impl(pd, addr, len, iova, access) }
}

pub(crate) unsafe extern "C" fn reg_mr_iova2(
    pd: *mut abi::ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_uint,
) -> *mut abi::ibv_mr {
    // SAFETY: the caller's PD.
    unsafe { reg_mr_impl(pd, addr, len, iova, access as c_int) }
}

/// `IBV_REREG_MR_CHANGE_TRANSLATION`, `_CHANGE_PD`, `_CHANGE_ACCESS` (`verbs.h`).
const REREG_TRANSLATION: c_int = 1;
const REREG_PD: c_int = 2;
const REREG_ACCESS: c_int = 4;
/// `IBV_REREG_MR_ERR_INPUT`, `IBV_REREG_MR_ERR_CMD` (`enum ibv_rereg_mr_err_code`).
const REREG_ERR_INPUT: c_int = -1;
const REREG_ERR_CMD: c_int = -4;

/// `ibv_rereg_mr`: libibverbs's input checks (`verbs.c`: flags beyond the three,
/// a translation without address or length, access without its flag:
/// `IBV_REREG_MR_ERR_INPUT` with errno EINVAL) and the kernel's (no flag, a PD not
/// of the context: `IBV_REREG_MR_ERR_CMD` with EINVAL, as `ib_uverbs_rereg_mr`
/// answers), then what Linux's `mlx5_ib_rereg_user_mr` does:
///
/// * no new translation, and an access change a UMR can make (only local write,
///   remote write and remote read differ, `can_use_umr_rereg_access`): the PD and
///   the rights change in place on the region's mkey (`mlx5r_umr_rereg_pd_access`,
///   [`MemoryRegion::rereg_pd_access`]), lkey and rkey stay, so keys a peer was
///   given before keep working. One more condition is the driver's: a region
///   registered with no write right is mapped read-only for the device, so granting
///   it one takes the next path;
/// * anything else (a new translation, a remote atomic change): a new registration
///   with what changes (a new translation is registered at its own address, as
///   `ibv_cmd_rereg_mr` passes `hca_va = addr`) and the old one deregistered
///   (`create_real_mr`): the keys change, and the application reads them from
///   `mr`. Linux changes a translation in place only for regions of its mkey cache
///   (`can_use_umr_rereg_pas` needs `mr->mmkey.cache_ent`); the driver has none.
///
/// A change the device refuses is `IBV_REREG_MR_ERR_CMD` with its errno (EFAULT
/// for a UMR that completed in error) and leaves the region as it was.
///
/// # Safety
///
/// `mr` is NULL or a live MR of ours that no other thread uses meanwhile (the
/// verbs contract of `ibv_rereg_mr`); `pd` NULL or a live PD of ours.
pub(crate) unsafe extern "C" fn rereg_mr(
    mr: *mut abi::ibv_mr,
    flags: c_int,
    pd: *mut abi::ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    guard(REREG_ERR_CMD, || {
        let input = |e: c_int| {
            set_errno(e);
            REREG_ERR_INPUT
        };
        if mr.is_null()
            || flags & !(REREG_TRANSLATION | REREG_PD | REREG_ACCESS) != 0
            || (flags & REREG_TRANSLATION != 0 && (length == 0 || addr.is_null()))
            || (access != 0 && flags & REREG_ACCESS == 0)
        {
            return input(libc::EINVAL);
        }
        let cmd_err = |e: c_int| {
            set_errno(e);
            REREG_ERR_CMD
        };
        // The kernel's own checks (`ib_uverbs_rereg_mr`): no flag at all, or a PD
        // that is not one of the context's, is EINVAL from the command.
        if flags == 0 {
            return cmd_err(libc::EINVAL);
        }
        // SAFETY: the caller's MR, used by no other thread during the call.
        let o = unsafe { &mut *(mr as *mut MrObj) };
        let new_pd: &'static PdObj = if flags & REREG_PD != 0 {
            // SAFETY: the caller's PD.
            match unsafe { PdObj::from_ibv(pd) } {
                Ok(p) if p.ibv.context == o.ibv.context => p,
                _ => return cmd_err(libc::EINVAL),
            }
        } else {
            o.pd
        };
        let acc = if flags & REREG_ACCESS != 0 {
            match convert::access_from_ibv(access as u32) {
                Ok(a) => a,
                Err(e) => return input(e),
            }
        } else {
            o.mr.access()
        };
        if flags & REREG_TRANSLATION == 0 && o.mr.can_rereg_in_place(acc) {
            if let Err(e) = o.mr.rereg_pd_access(&new_pd.pd, acc) {
                set_errno(convert::errno_of(&e));
                return REREG_ERR_CMD;
            }
            new_pd.users.acquire();
            let old_pd = std::mem::replace(&mut o.pd, new_pd);
            old_pd.users.release();
            o.ibv.pd = new_pd as *const PdObj as *mut abi::ibv_pd;
            return 0;
        }
        let (start, len, iova) = if flags & REREG_TRANSLATION != 0 {
            (addr, length, addr as u64)
        } else {
            (o.ibv.addr, o.ibv.length, o.mr.addr())
        };
        let Some(start_nn) = NonNull::new(start as *mut u8) else {
            return input(libc::EINVAL);
        };
        // SAFETY: as in `reg_mr_impl`: the application keeps the memory allocated
        // until the region is deregistered or registered elsewhere again.
        let new = match unsafe { new_pd.pd.reg_mr_raw_iova(start_nn, len, acc, iova) } {
            Ok(m) => m,
            Err(e) => {
                set_errno(convert::errno_of(&e));
                return REREG_ERR_CMD;
            }
        };
        new_pd.users.acquire();
        let old = std::mem::replace(&mut o.mr, new);
        let old_pd = std::mem::replace(&mut o.pd, new_pd);
        let r = old.deregister();
        old_pd.users.release();
        o.ibv.pd = new_pd as *const PdObj as *mut abi::ibv_pd;
        (o.ibv.addr, o.ibv.length) = (start, len);
        (o.ibv.handle, o.ibv.lkey, o.ibv.rkey) = (o.mr.lkey(), o.mr.lkey(), o.mr.rkey());
        match r {
            Ok(_) => 0,
            Err(e) => {
                // The device failed (a fatal state): the region holds the new keys.
                set_errno(convert::errno_of(&e));
                REREG_ERR_CMD
            }
        }
    })
}

pub(crate) unsafe extern "C" fn dereg_mr(mr: *mut abi::ibv_mr) -> c_int {
    // SAFETY: the caller's MR.
    int_verb(unsafe { MrObj::from_ibv(mr) }, |_| {
        // SAFETY: created by `reg_mr_impl`, deregistered once.
        let b = unsafe { MrObj::take(mr) };
        let pd = b.pd;
        let r = b.mr.deregister().map(|_| ());
        pd.users.release();
        r.or_errno()
    })
}

// ---------------------------------------------------------------------------------
// Completion channels and completion queues
// ---------------------------------------------------------------------------------

#[repr(C)]
pub(crate) struct ChanObj {
    ibv: abi::ibv_comp_channel,
    ch: CompletionChannel<'static, B>,
    /// `channel->fd`: an epoll descriptor watching the channel's eventfd.
    app_fd: AppFd,
    /// CQN -> CQ object, for `ibv_get_cq_event`.
    cqs: Mutex<Vec<(u32, SyncPtr<CqObj>)>>,
    users: Users,
}

pub(crate) unsafe extern "C" fn create_comp_channel(
    ctx: *mut abi::ibv_context,
) -> *mut abi::ibv_comp_channel {
    // SAFETY: the caller's context.
    ptr_verb(unsafe { CtxObj::from_ibv(ctx) }, |o| {
        let ch = o.nic.ctx.create_comp_channel().or_errno()?;
        let app_fd = AppFd::watching(ch.fd())?;
        Ok(Box::new(ChanObj {
            ibv: abi::ibv_comp_channel {
                context: ctx,
                fd: app_fd.raw(),
                refcnt: 0,
            },
            ch,
            app_fd,
            cqs: Mutex::new(Vec::new()),
            users: Users::default(),
        })
        .into_ibv())
    })
}

pub(crate) unsafe extern "C" fn destroy_comp_channel(ch: *mut abi::ibv_comp_channel) -> c_int {
    // SAFETY: the caller's channel.
    int_verb(unsafe { ChanObj::from_ibv(ch) }, |c| {
        c.users.idle()?;
        // SAFETY: created by `create_comp_channel`; no CQ uses it.
        drop(unsafe { ChanObj::take(ch) });
        Ok(())
    })
}

#[repr(C)]
pub(crate) struct CqObj {
    /// The application's `ibv_cq`, inside the `ibv_cq_ex` every CQ is (`cq_ex`).
    pub(crate) ibv: crate::abi_ex::ibv_cq_ex,
    pub(crate) cq: SpinLock<CompletionQueue<'static, B>>,
    pub(crate) cqn: u32,
    pub(crate) chan: Option<&'static ChanObj>,
    /// The simulated device, which a thread polling an empty CQ services.
    pub(crate) sim: Option<&'static Sim>,
    pub(crate) users: Users,
    /// The `ibv_start_poll` .. `ibv_end_poll` state (`cq_ex`).
    pub(crate) poll: crate::cq_ex::PollState,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// libmlx5's demand for a queue buffer on huge pages (`buf.c`
/// `mlx5_get_alloc_type`): `<prefix>_ALLOC_TYPE` (`MLX_QP`, `MLX_CQ`, `MLX_SRQ`) set
/// to `HUGE` (any case), or, when that variable is unset or names no type, the old
/// key `legacy` (`HUGE_CQ`, `HUGE_RC`, ...: `mlx5_use_huge`) set to `y`. The other
/// types (`PREFER_HUGE`, `ALL`, `PREFER_CONTIG`, `ANON`) fall back to ordinary
/// pages, as libmlx5 does when huge pages are short.
fn huge_demanded(prefix: &str, legacy: Option<&str>) -> bool {
    const TYPES: [&str; 6] = [
        "ANON",
        "HUGE",
        "CONTIG",
        "PREFER_CONTIG",
        "PREFER_HUGE",
        "ALL",
    ];
    let named = std::env::var(format!("{prefix}_ALLOC_TYPE"))
        .ok()
        .and_then(|v| TYPES.iter().find(|t| t.eq_ignore_ascii_case(&v)).copied());
    match named {
        Some(t) => t == "HUGE",
        None => legacy.is_some_and(|k| std::env::var_os(k).is_some_and(|v| v == "y")),
    }
}

/// Refuses a queue whose buffer the environment demands on huge pages
/// ([`huge_demanded`]) when the system has no 2 MiB page for it: libmlx5 then fails
/// the creation (`mlx5_alloc_prefered_buf` with `MLX5_ALLOC_TYPE_HUGE` returns -1
/// after `alloc_huge_mem`'s `shmget(SHM_HUGETLB)` failed), with `shmget`'s errno
/// (`ENOMEM` when none is free). The probe is the same `shmget` of one huge page,
/// removed at once. When one can be had the queue is still placed on the driver's
/// ordinary pages (its DMA buffers are page allocations): huge pages are a TLB
/// hint the simulated device does not see.
fn huge_pages_for(prefix: &str, legacy: Option<&str>) -> Result<(), c_int> {
    if !huge_demanded(prefix, legacy) {
        return Ok(());
    }
    const HPAGE: usize = 2 << 20;
    let flags = libc::SHM_HUGETLB | libc::SHM_R | libc::SHM_W;
    // SAFETY: shmget creates a private segment or fails; it touches no memory of ours.
    let id = unsafe { libc::shmget(libc::IPC_PRIVATE, HPAGE, flags) };
    if id < 0 {
        return Err(errno());
    }
    // SAFETY: the segment just created, never attached: removed at once.
    unsafe { libc::shmctl(id, libc::IPC_RMID, ptr::null_mut()) };
    Ok(())
}

pub(crate) unsafe extern "C" fn create_cq(
    ctx: *mut abi::ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut abi::ibv_comp_channel,
    comp_vector: c_int,
) -> *mut abi::ibv_cq {
    // SAFETY: the caller's context.
    ptr_verb(unsafe { CtxObj::from_ibv(ctx) }, |o| {
        let n = u32::try_from(cqe).map_err(|_| libc::EINVAL)?.max(1);
        // A vector the context does not have is EINVAL, as the kernel answers.
        if comp_vector < 0 || comp_vector >= o.vctx.context.num_comp_vectors {
            return Err(libc::EINVAL);
        }
        huge_pages_for("MLX_CQ", Some("HUGE_CQ"))?;
        // SAFETY: NULL or the caller's channel, alive while CQs use it.
        let chan = unsafe { ChanObj::from_ibv(channel) }.ok();
        let opts = ferroverbs::verbs::CqOptions {
            cqe_size: cqe_size_of(std::env::var_os("MLX5_CQE_SIZE").as_deref())
                .ok_or(libc::EINVAL)?,
            ..Default::default()
        };
        let cq = match chan {
            Some(c) => c.ch.create_cq_with(n, opts),
            None => o.nic.ctx.create_cq_with(n, opts),
        }
        .map_err(|e| convert::create_cq_errno(&e))?;
        let cqn = cq.cqn();
        let cap = cq.capacity();
        let p = Box::new(CqObj {
            ibv: crate::cq_ex::cq_ex_of(abi::ibv_cq {
                context: ctx,
                channel,
                cq_context,
                handle: cqn,
                cqe: cap.min(i32::MAX as u32) as c_int,
                mutex: abi::pthread_mutex_t([0; 40]),
                cond: abi::pthread_cond_t([0; 48]),
                comp_events_completed: 0,
                async_events_completed: 0,
            }),
            cq: SpinLock::new(cq),
            cqn,
            chan,
            sim: o.nic.sim.as_ref(),
            users: Users::default(),
            poll: Default::default(),
        })
        .into_ibv();
        if let Some(c) = chan {
            c.users.acquire();
            lock(&c.cqs).push((cqn, SyncPtr(p as *mut CqObj)));
        }
        Ok(p)
    })
}

pub(crate) unsafe extern "C" fn destroy_cq(cq: *mut abi::ibv_cq) -> c_int {
    // SAFETY: the caller's CQ.
    int_verb(unsafe { CqObj::from_ibv(cq) }, |q| {
        q.users.idle()?;
        if let Some(c) = q.chan {
            lock(&c.cqs).retain(|(n, _)| *n != q.cqn);
            c.users.release();
        }
        // SAFETY: created by `create_cq`; no QP uses it.
        let b = unsafe { CqObj::take(cq) };
        let cq = b.cq.into_inner();
        cq.destroy().map_err(|(_, e)| convert::errno_of(&e))
    })
}

/// `ops.poll_cq`. One entry asked of a CQ whose next entry the driver's inline
/// reader hands out (the latency case: a successful requester completion of a SEND
/// or RDMA WRITE of the QP seen last, [`CompletionQueue::poll_hot_req`]): taken
/// under the CQ's lock, which is released before the caller's `ibv_wc` is written
/// ([`write_req_wc`]), with no call. Everything else (more entries, any other entry,
/// an empty CQ, which the polling thread services on a simulated NIC, a lock held by
/// another thread, bad arguments) goes to [`poll_cq_list`], in tail position (an
/// `extern "C"` callee does not unwind: no landing pad), with the same results.
unsafe extern "C" fn poll_cq(cq: *mut abi::ibv_cq, n: c_int, wc: *mut abi::ibv_wc) -> c_int {
    if n == 1 && !wc.is_null() {
        // SAFETY: the caller's CQ.
        if let Ok(q) = unsafe { CqObj::from_ibv(cq) } {
            if let Some(mut g) = q.cq.try_lock() {
                let got = g.poll_hot_req(|r| r);
                // The CQ's state is done with: the lock goes before the `ibv_wc` is
                // written (the caller's memory).
                drop(g);
                if let Some(r) = got {
                    // SAFETY: `wc` has room for one entry (`n` is 1; not NULL).
                    unsafe { write_req_wc(wc, r) };
                    return 1;
                }
                // Nothing taken (the lock released): the general path polls.
            }
        }
    }
    // SAFETY: the caller's arguments.
    unsafe { poll_cq_list(cq, n, wc) }
}

/// Writes the `ibv_wc` of the successful requester completion `r` (what
/// [`convert::wc_to_ibv`] makes of the driver's [`requester_completion`] of its send
/// opcode, with its `wr_id` and QP number) into `wc`: the `wr_id`, the two 16-byte
/// halves whose first words come from [`REQ_WC`] (the rest of each is 0), and
/// `imm_data` (0) with `qp_num`. Four stores and two table loads, with no shift of
/// the index.
///
/// # Safety
/// `wc` is valid for the write of one `ibv_wc`.
#[inline(always)]
unsafe fn write_req_wc(wc: *mut abi::ibv_wc, r: HotReq) {
    let op = usize::from(r.send_op);
    let p = wc.cast::<u8>();
    // SAFETY: the offsets are those of the fields named (asserted below), inside
    // the `ibv_wc` the caller lets us write; unaligned writes.
    unsafe {
        p.cast::<u64>().write_unaligned(r.wr_id);
        p.add(WC_IMM)
            .cast::<[u32; 2]>()
            .write_unaligned([0, r.qp_num]);
    }
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadl_epi64, _mm_storeu_si128};
        // Each half one `movq` (which clears the upper 8 bytes) and one 16-byte
        // store: the compiler would store its two words separately.
        // SAFETY: SSE2 is part of x86-64; the loads read 8 bytes of `REQ_WC`'s
        // rows (`op < 256`), the stores write 16 bytes at `WC_LO` and `WC_HI`,
        // inside the `ibv_wc` (asserted below); both unaligned.
        unsafe {
            let lo = _mm_loadl_epi64(std::ptr::from_ref(&REQ_WC[0][op]).cast::<__m128i>());
            let hi = _mm_loadl_epi64(std::ptr::from_ref(&REQ_WC[1][op]).cast::<__m128i>());
            _mm_storeu_si128(p.add(WC_LO).cast::<__m128i>(), lo);
            _mm_storeu_si128(p.add(WC_HI).cast::<__m128i>(), hi);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as above.
    unsafe {
        p.add(WC_LO)
            .cast::<[u64; 2]>()
            .write_unaligned([REQ_WC[0][op], 0]);
        p.add(WC_HI)
            .cast::<[u64; 2]>()
            .write_unaligned([REQ_WC[1][op], 0]);
    }
}

/// Where [`write_req_wc`]'s pieces of an `ibv_wc` start: `status` (with `opcode`,
/// `vendor_err`, `byte_len` after it), `imm_data` (with `qp_num`), `src_qp` (with
/// `wc_flags`, `pkey_index`, `slid`, `sl`, `dlid_path_bits` and the padding to 48).
const WC_LO: usize = std::mem::offset_of!(abi::ibv_wc, status);
const WC_IMM: usize = std::mem::offset_of!(abi::ibv_wc, imm_data);
const WC_HI: usize = std::mem::offset_of!(abi::ibv_wc, src_qp);
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(offset_of!(abi::ibv_wc, wr_id) == 0 && WC_LO == 8);
    assert!(offset_of!(abi::ibv_wc, opcode) == WC_LO + 4);
    assert!(offset_of!(abi::ibv_wc, vendor_err) == WC_LO + 8);
    assert!(offset_of!(abi::ibv_wc, byte_len) == WC_LO + 12);
    assert!(WC_IMM == WC_LO + 16 && offset_of!(abi::ibv_wc, qp_num) == WC_IMM + 4);
    assert!(WC_HI == WC_IMM + 8 && offset_of!(abi::ibv_wc, wc_flags) == WC_HI + 4);
    assert!(size_of::<abi::ibv_wc>() == WC_HI + 16);
};

/// The words of the `ibv_wc` of a successful requester completion of each send
/// opcode byte that [`CompletionQueue::poll_hot_req`] hands out, which
/// [`write_req_wc`] copies: `[0]` the 8 bytes at `status` (`status`, `opcode`),
/// `[1]` the 8 at `src_qp` (`src_qp`, `wc_flags`), in memory order; built at compile
/// time from what [`convert::wc_to_ibv`] makes of the driver's
/// [`requester_completion`], every other field of which is asserted 0 (`wr_id` and
/// `qp_num` are the completion's). Entries of the other opcodes are never read.
static REQ_WC: [[u64; 256]; 2] = {
    const fn word(a: u32, b: u32) -> u64 {
        let (a, b) = (a.to_ne_bytes(), b.to_ne_bytes());
        u64::from_ne_bytes([a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]])
    }
    let mut t = [[0u64; 256]; 2];
    let mut op = 0;
    while op < 256 {
        if let Some(w) = requester_completion(op as u8) {
            let row = convert::wc_to_ibv(&w);
            assert!(row.wr_id == 0 && row.qp_num == 0, "the completion's own");
            assert!(row.vendor_err == 0 && row.byte_len == 0, "stored as 0");
            assert!(row.imm_data == 0, "stored as 0");
            assert!(row.pkey_index == 0 && row.slid == 0, "stored as 0");
            assert!(row.sl == 0 && row.dlid_path_bits == 0, "stored as 0");
            t[0][op] = word(row.status, row.opcode);
            t[1][op] = word(row.src_qp, row.wc_flags);
        }
        op += 1;
    }
    t
};

/// [`poll_cq`] of up to `n` entries under the CQ's lock, each written straight into
/// the caller's array; on an empty CQ of a simulated NIC, the device serviced.
///
/// # Safety
/// `cq` is NULL or a live CQ; `wc` NULL or room for `n` entries.
#[inline(never)]
unsafe extern "C" fn poll_cq_list(cq: *mut abi::ibv_cq, n: c_int, wc: *mut abi::ibv_wc) -> c_int {
    // SAFETY: the caller's CQ.
    let Ok(q) = (unsafe { CqObj::from_ibv(cq) }) else {
        return -1;
    };
    if n <= 0 {
        return 0;
    }
    if wc.is_null() {
        return -1;
    }
    let mut g = q.cq.lock();
    // Each completion written straight into the caller's array, where the driver's
    // reader builds it.
    let mut out = wc;
    let done = g.poll_each(n as usize, |w| {
        // SAFETY: `wc` has room for `n` entries and `poll_each` hands out at most
        // `n` completions: `out` is `wc + k` for the `k`-th, `k < n`.
        unsafe {
            out.write(convert::wc_to_ibv(w));
            out = out.add(1);
        }
    });
    drop(g);
    if done == 0 {
        // Applications spin on an empty CQ. On a simulated NIC the polling thread
        // services the device itself unless its thread is doing so (NAPI-style busy
        // polling, `Sim::try_service`, as the `ferroverbs perf` cross-process mode
        // does): it reads the UDP ingress and delivers the completion the next poll
        // finds, with no hand-off from the device thread, which naps meanwhile. With
        // nothing to do, on a machine with fewer cores than busy threads, leave the
        // core to the device and link threads that make progress.
        if q.sim.and_then(Sim::try_service).unwrap_or(0) == 0 {
            std::thread::yield_now();
        }
    }
    done as c_int
}

/// `ops.req_notify_cq`.
unsafe extern "C" fn req_notify_cq(cq: *mut abi::ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: the caller's CQ.
    let Ok(q) = (unsafe { CqObj::from_ibv(cq) }) else {
        return libc::EINVAL;
    };
    if q.chan.is_none() {
        return libc::EINVAL;
    }
    q.cq.lock().req_notify(solicited_only != 0);
    0
}

pub(crate) unsafe extern "C" fn get_cq_event(
    ch: *mut abi::ibv_comp_channel,
    cq: *mut *mut abi::ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    // SAFETY: the caller's channel.
    status_verb(unsafe { ChanObj::from_ibv(ch) }, |c| {
        // An event of a CQ destroyed meanwhile is skipped.
        let p = c.app_fd.next(|| loop {
            let ev = c.ch.try_get_cq_event()?;
            if let Some(p) = lock(&c.cqs).iter().find(|(n, _)| *n == ev.cqn) {
                break Some(p.1);
            }
        })?;
        // SAFETY: the CQ is registered, hence alive; the out-parameters are the
        // caller's.
        unsafe {
            if !cq.is_null() {
                *cq = p.0 as *mut abi::ibv_cq;
            }
            if !cq_context.is_null() {
                *cq_context = (*p.0).ibv.cq.cq_context;
            }
        }
        Some(())
    })
}

pub(crate) unsafe extern "C" fn ack_cq_events(cq: *mut abi::ibv_cq, nevents: c_uint) {
    guard((), || {
        // SAFETY: the caller's CQ.
        if let Ok(q) = unsafe { CqObj::from_ibv(cq) } {
            if let Some(c) = q.chan {
                c.ch.ack_cq_events(&mut q.cq.lock(), nevents);
            }
        }
    })
}

/// `ibv_resize_cq` as libmlx5's `mlx5_resize_cq` answers it: a negative size, or
/// one whose ring would pass `INT_MAX` bytes, is EINVAL; the CQ's lock is held for
/// the whole resize (no poll, `ibv_start_poll` .. `ibv_end_poll` batch or arm of
/// another thread runs meanwhile: they wait); a size that gives the same ring does
/// nothing; the kernel's refusals (0 or more than `max_cqe` entries, fewer than the
/// completions not yet polled) are EINVAL. On success `cq->cqe` is the new ring's
/// size minus one (the size asked, rounded up).
pub(crate) unsafe extern "C" fn resize_cq(cq: *mut abi::ibv_cq, cqe: c_int) -> c_int {
    // SAFETY: the caller's CQ.
    int_verb(unsafe { CqObj::from_ibv(cq) }, |q| {
        let n = u32::try_from(cqe).map_err(|_| libc::EINVAL)?;
        if i64::from(cqe) * 64 > i64::from(i32::MAX) {
            return Err(libc::EINVAL);
        }
        let mut g = q.cq.lock();
        g.resize(n).map_err(|e| convert::resize_cq_errno(&e))?;
        let cap = g.capacity().min(i32::MAX as u32) as c_int;
        // SAFETY: `cq` is the application's `ibv_cq` of this live CQ (looked up
        // above); its `cqe` field is written under the CQ's lock, as libmlx5 writes
        // it.
        unsafe { (*cq).cqe = cap };
        Ok(())
    })
}

// ---------------------------------------------------------------------------------
// Queue pairs
// ---------------------------------------------------------------------------------

#[repr(C)]
pub(crate) struct QpObj {
    /// The application's `ibv_qp`, inside the `ibv_qp_ex` every QP is (`qp_ex`).
    pub(crate) ibv: crate::abi_ex::ibv_qp_ex,
    pub(crate) qp: SpinLock<QueuePair<'static, B>>,
    pub(crate) pd: &'static PdObj,
    pub(crate) send_cq: &'static CqObj,
    pub(crate) recv_cq: &'static CqObj,
    /// The SRQ the QP takes its receives from.
    pub(crate) srq: Option<&'static SrqObj>,
    pub(crate) sq_sig_all: bool,
    pub(crate) sim_link: bool,
    /// The NIC's floor of the local ACK timeout exponent ([`device::Nic`]).
    pub(crate) min_ack_timeout: u8,
    pub(crate) ud: bool,
    /// The `ibv_wr_*` state between `wr_start` and `wr_complete` (`qp_ex`).
    pub(crate) wr: crate::qp_ex::WrState,
}

pub(crate) unsafe extern "C" fn create_qp(
    pd: *mut abi::ibv_pd,
    init: *mut abi::ibv_qp_init_attr,
) -> *mut abi::ibv_qp {
    // rdma-core's mlx5 sizes QPs created without `send_ops_flags` for every
    // operation of their type, memory-window binds included (`sq_overhead`).
    // SAFETY: the caller's PD and attributes.
    unsafe { create_qp_with(pd, init, true) }
}

/// `ibv_create_qp`, the send queue sized for memory-window operations on RC and UC
/// when `mw`.
///
/// # Safety
/// `pd` and `init` are the caller's (NULL or live).
pub(crate) unsafe fn create_qp_with(
    pd: *mut abi::ibv_pd,
    init: *mut abi::ibv_qp_init_attr,
    mw: bool,
) -> *mut abi::ibv_qp {
    // SAFETY: the caller's PD, kept alive by the use count.
    ptr_verb(unsafe { PdObj::from_ibv(pd) }, |p| {
        // SAFETY: the caller's init attributes.
        let ia = unsafe { init.as_mut() }.ok_or(libc::EINVAL)?;
        let ty = match ia.qp_type {
            c::IBV_QPT_RC => QpType::Rc,
            c::IBV_QPT_UC => QpType::Uc,
            c::IBV_QPT_UD => QpType::Ud,
            _ => return Err(libc::EOPNOTSUPP),
        };
        // SAFETY: NULL or the caller's SRQ, kept alive by its use count.
        let srq = unsafe { SrqObj::from_ibv(ia.srq) }.ok();
        if srq.is_some() && ty == QpType::Ud {
            // RC and UC QPs only: the SRQs of the driver and simulator are tested with
            // those transports.
            return Err(libc::EOPNOTSUPP);
        }
        // SAFETY: the caller's CQs, kept alive by their use counts.
        let scq = unsafe { CqObj::from_ibv(ia.send_cq) }?;
        // SAFETY: as above.
        let rcq = unsafe { CqObj::from_ibv(ia.recv_cq) }?;
        let cap = QpCap {
            max_send_wr: ia.cap.max_send_wr.max(1),
            max_recv_wr: ia.cap.max_recv_wr.max(1),
            max_send_sge: ia.cap.max_send_sge.clamp(1, MAX_SGE as u32),
            max_recv_sge: ia.cap.max_recv_sge.clamp(1, MAX_SGE as u32),
            max_inline_data: ia.cap.max_inline_data,
        };
        if ia.cap.max_send_sge as usize > MAX_SGE || ia.cap.max_recv_sge as usize > MAX_SGE {
            return Err(libc::EINVAL);
        }
        // libmlx5's old per-type keys (`qptype2key`).
        let legacy = match ty {
            QpType::Rc => "HUGE_RC",
            QpType::Uc => "HUGE_UC",
            _ => "HUGE_UD",
        };
        huge_pages_for("MLX_QP", Some(legacy))?;
        let qp = {
            let sg = scq.cq.lock();
            let srq_guard = srq.map(|s| lock(&s.srq));
            let rg = (!std::ptr::eq(scq, rcq)).then(|| rcq.cq.lock());
            let mut a = QpInitAttr::new(&sg, rg.as_deref().unwrap_or(&sg), cap);
            a.qp_type = ty;
            a.sq_sig_all = ia.sq_sig_all != 0;
            a.srq = srq_guard.as_deref();
            // `MLX5_SHUT_UP_BF` set to anything but "0": never BlueFlame, every
            // doorbell the 8-byte one (rdma-core mlx5 `get_shut_up_bf`).
            if shut_up_bf() {
                a.blueflame = false;
            }
            a.memory_windows = mw;
            // Scatter to CQE as libmlx5 asks for it (`use_scatter_to_cqe`): on
            // unless `MLX5_SCATTER_TO_CQE=0`, on every bus (the library behaves as
            // libmlx5 for the programs it runs; the driver's own default, off on the
            // simulator, is for its latency).
            a.scatter_to_cqe = Some(scatter_to_cqe());
            // A transport the driver does not offer (yet) is "not supported".
            p.pd.create_qp(&a).map_err(|e| match ty {
                QpType::Uc => libc::EOPNOTSUPP,
                _ => convert::errno_of(&e),
            })?
        };
        let granted = qp.cap();
        ia.cap = convert::cap_to_ibv(&granted);
        if srq.is_some() {
            // The receives come from the SRQ (rdma-core reports 0 for such QPs).
            ia.cap.max_recv_wr = 0;
            ia.cap.max_recv_sge = 0;
        }
        let qpn = qp.qp_num();
        p.users.acquire();
        scq.users.acquire();
        rcq.users.acquire();
        if let Some(s) = srq {
            s.users.acquire();
        }
        let sim_link = p_sim(p);
        // The one NIC of the process, open since the PD's context was.
        let min_ack_timeout = device::nic().map_or(0, |n| n.min_ack_timeout);
        Ok(Box::new(QpObj {
            ibv: crate::qp_ex::qp_ex_of(abi::ibv_qp {
                context: p.ibv.context,
                qp_context: ia.qp_context,
                pd,
                send_cq: ia.send_cq,
                recv_cq: ia.recv_cq,
                srq: ia.srq,
                handle: qpn,
                qp_num: qpn,
                state: 0,
                qp_type: ia.qp_type,
                mutex: abi::pthread_mutex_t([0; 40]),
                cond: abi::pthread_cond_t([0; 48]),
                events_completed: 0,
            }),
            qp: SpinLock::new(qp),
            pd: p,
            send_cq: scq,
            recv_cq: rcq,
            srq,
            sq_sig_all: ia.sq_sig_all != 0,
            sim_link,
            min_ack_timeout,
            ud: ty == QpType::Ud,
            wr: Default::default(),
        })
        .into_ibv())
    })
}

fn p_sim(p: &PdObj) -> bool {
    matches!(**p.pd.context().bus(), AnyBus::Sim(_))
}

pub(crate) unsafe extern "C" fn modify_qp(
    qp: *mut abi::ibv_qp,
    attr: *mut abi::ibv_qp_attr,
    mask: c_int,
) -> c_int {
    // SAFETY: the caller's QP.
    int_verb(unsafe { QpObj::from_ibv(qp) }, |q| {
        // SAFETY: the caller's attributes.
        let a = unsafe { attr.as_ref() }.ok_or(libc::EINVAL)?;
        let mut g = q.qp.lock();
        let (to, qa) =
            convert::qp_attr_from_ibv(a, mask, g.state(), q.sim_link, q.min_ack_timeout)?;
        g.modify(to, &qa).or_errno()?;
        if to == QpState::Reset {
            // libmlx5 `mlx5_modify_qp`: at RESET the QP's completions nobody polled
            // leave its CQs (`mlx5_cq_clean` of the receive CQ, then of the send CQ
            // if another, each under the CQ's lock), as its rings start over.
            clean_cqs(q.send_cq, q.recv_cq, g.qp_num());
        }
        let st = convert::qp_state_to_ibv(g.state());
        // SAFETY: `state` is a plain field of our object the application may read;
        // written under the QP lock.
        unsafe { (*(qp as *mut QpObj)).ibv.qp_base.state = st };
        Ok(())
    })
}

/// Removes the completions of QP `qpn` from its CQs `send` and `recv` (rdma-core
/// `mlx5_cq_clean`: the receive CQ, then the send CQ when it is another), each
/// under its lock, which waits for a poller of the CQ to finish.
fn clean_cqs(send: &CqObj, recv: &CqObj, qpn: u32) {
    recv.cq.lock().discard_completions_of(qpn);
    if !std::ptr::eq(send, recv) {
        send.cq.lock().discard_completions_of(qpn);
    }
}

pub(crate) unsafe extern "C" fn query_qp(
    qp: *mut abi::ibv_qp,
    attr: *mut abi::ibv_qp_attr,
    _mask: c_int,
    init: *mut abi::ibv_qp_init_attr,
) -> c_int {
    // SAFETY: the caller's QP.
    int_verb(unsafe { QpObj::from_ibv(qp) }, |q| {
        let info = q.qp.lock().query().or_errno()?;
        let a = convert::qp_info_to_ibv(&info);
        // SAFETY: the caller's out-parameters.
        unsafe {
            if !attr.is_null() {
                attr.write(a);
            }
            if let Some(i) = init.as_mut() {
                i.qp_context = q.ibv.qp_base.qp_context;
                i.send_cq = q.ibv.qp_base.send_cq;
                i.recv_cq = q.ibv.qp_base.recv_cq;
                i.srq = q.ibv.qp_base.srq;
                i.cap = a.cap;
                if q.srq.is_some() {
                    i.cap.max_recv_wr = 0;
                    i.cap.max_recv_sge = 0;
                }
                i.qp_type = q.ibv.qp_base.qp_type;
                i.sq_sig_all = c_int::from(q.sq_sig_all);
            }
        }
        Ok(())
    })
}

pub(crate) unsafe extern "C" fn destroy_qp(qp: *mut abi::ibv_qp) -> c_int {
    // SAFETY: the caller's QP.
    int_verb(unsafe { QpObj::from_ibv(qp) }, |_| {
        // SAFETY: created by `create_qp`, destroyed once.
        let b = unsafe { QpObj::take(qp) };
        let (pd, s, r, srq) = (b.pd, b.send_cq, b.recv_cq, b.srq);
        let qpn = b.qp.lock().qp_num();
        let res = b.qp.into_inner().destroy();
        if res.is_ok() {
            // libmlx5 `mlx5_destroy_qp`: the QP's completions leave its CQs (a
            // later QP of the same number must not meet them).
            clean_cqs(s, r, qpn);
        }
        pd.users.release();
        s.users.release();
        r.users.release();
        if let Some(q) = srq {
            q.users.release();
        }
        res.or_errno()
    })
}

pub(crate) unsafe extern "C" fn qp_to_qp_ex(qp: *mut abi::ibv_qp) -> *mut c_void {
    // Every QP is an `ibv_qp_ex` (`qp_ex`): its address is the QP's.
    qp as *mut c_void
}

pub(crate) fn post_errno(e: &ferroverbs::verbs::PostError) -> c_int {
    use ferroverbs::verbs::PostError as P;
    match e {
        P::QueueFull { .. } => libc::ENOMEM,
        _ => libc::EINVAL,
    }
}

/// Copies a C scatter/gather list into `out`.
///
/// # Safety
/// `sg` must point to `n` valid entries (or be unused when `n` is 0).
pub(crate) unsafe fn sges(
    sg: *const abi::ibv_sge,
    n: c_int,
    out: &mut [Sge; MAX_SGE],
) -> Result<&[Sge], c_int> {
    let n = usize::try_from(n).map_err(|_| libc::EINVAL)?;
    if n > MAX_SGE {
        return Err(libc::EINVAL);
    }
    if n > 0 && sg.is_null() {
        return Err(libc::EINVAL);
    }
    for (i, o) in out.iter_mut().enumerate().take(n) {
        // SAFETY: `i < n` entries.
        let s = unsafe { sg.add(i).read() };
        *o = Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        };
    }
    Ok(&out[..n])
}

/// Whether `MLX5_SHUT_UP_BF` turns BlueFlame off: set to anything but "0"
/// (rdma-core mlx5 `get_shut_up_bf`; read once per process, as libmlx5 reads it
/// once per context).
fn shut_up_bf() -> bool {
    static SHUT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SHUT.get_or_init(|| shut_up_bf_of(std::env::var_os("MLX5_SHUT_UP_BF").as_deref()))
}

/// Whether QPs let the device scatter small received messages to their CQEs: unless
/// `MLX5_SCATTER_TO_CQE` is "0" (rdma-core mlx5 `use_scatter_to_cqe`; read once per
/// process).
fn scatter_to_cqe() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("MLX5_SCATTER_TO_CQE").is_none_or(|v| v != "0"))
}

/// The CQE size a value of `MLX5_CQE_SIZE` asks for (rdma-core mlx5 `get_cqe_size`,
/// read at every CQ creation as libmlx5 reads it): unset, 64 bytes; set, its
/// `atoi` value, which must be 64 or 128 (`None`: `ibv_create_cq` fails with
/// `EINVAL`).
fn cqe_size_of(v: Option<&std::ffi::OsStr>) -> Option<ferroverbs::verbs::CqeSize> {
    let Some(v) = v else {
        return Some(ferroverbs::verbs::CqeSize::Bytes64);
    };
    usize::try_from(atoi(v.as_encoded_bytes()))
        .ok()
        .and_then(ferroverbs::verbs::CqeSize::from_bytes)
}

/// C's `atoi` (what libmlx5 parses its numeric variables with): leading white space,
/// an optional sign, then the decimal digits up to the first other byte; 0 when there
/// are none. Saturates instead of overflowing (undefined in C).
fn atoi(s: &[u8]) -> i64 {
    let mut i = 0;
    while i < s.len() && matches!(s[i], b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r') {
        i += 1;
    }
    let neg = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let mut v: i64 = 0;
    while let Some(d) = s.get(i).filter(|d| d.is_ascii_digit()) {
        v = v.saturating_mul(10).saturating_add(i64::from(d - b'0'));
        i += 1;
    }
    if neg {
        -v
    } else {
        v
    }
}

/// Whether a value of `MLX5_SHUT_UP_BF` turns BlueFlame off: set, and not "0"
/// (`strcmp(env, "0") ? 1 : 0`).
fn shut_up_bf_of(v: Option<&std::ffi::OsStr>) -> bool {
    v.is_some_and(|v| v != "0")
}

/// `ops.post_send`. One inline SEND of one non-empty gather entry on a connected QP
/// (the latency case) takes the driver's straight path
/// ([`QueuePair::try_send_inline`]) under the QP's lock: the only calls it makes
/// are the doorbell's and, in tail position, the general path's: [`post_send_held`]
/// (the lock kept) for that request when the straight path does not apply,
/// [`post_send_list`] for any other request or list and when another thread holds
/// the lock, with the same results, errors and `*bad`. (Those callees do not
/// unwind, as `extern "C"` functions: the calls are tail calls, with no landing
/// pad, and no value of the straight path lives across a call but the lock's
/// address.)
unsafe extern "C" fn post_send(
    qp: *mut abi::ibv_qp,
    wr: *mut abi::ibv_send_wr,
    bad: *mut *mut abi::ibv_send_wr,
) -> c_int {
    // SAFETY: the caller's QP.
    if let (Ok(q), false) = (unsafe { QpObj::from_ibv(qp) }, wr.is_null()) {
        // SAFETY: the caller's request (not NULL, checked).
        let w = unsafe { &*wr };
        // `num_sge` 1 and `opcode` SEND, side by side: one compare where the
        // target allows.
        let shape = u64::from(w.num_sge as u32) | u64::from(w.opcode) << 32;
        // Neither UD nor the other QP types without the driver's typed entries are
        // tested here: the straight path never applies to them (its budget is
        // placed only by a batch's opening, which refuses them), so their requests
        // reach the general path, which posts them with their address.
        if shape == 1 | u64::from(c::IBV_WR_SEND) << 32
            && w.next.is_null()
            && w.send_flags & c::IBV_SEND_INLINE != 0
            && !w.sg_list.is_null()
        {
            // SAFETY: the caller's gather list of one entry (not NULL, checked).
            let s = unsafe { w.sg_list.read() };
            if s.addr != 0 {
                if let Some(mut g) = q.qp.try_lock() {
                    // SAFETY: with IBV_SEND_INLINE the entry names memory the
                    // application lets the library read during this call (no key is
                    // needed); not NULL.
                    let data = unsafe {
                        std::slice::from_raw_parts(s.addr as *const u8, s.length as usize)
                    };
                    if g.try_send_inline(w.wr_id, data, send_flags(w.send_flags)) {
                        return 0;
                    }
                    // Nothing written: the request, alone in its list, through the
                    // general path, the lock kept.
                    std::mem::forget(g);
                    // SAFETY: the caller's arguments; the QP's lock is held (the
                    // guard forgotten) and `wr` is the list's only request.
                    return unsafe { post_send_held(qp, wr, bad) };
                }
            }
        }
    }
    // SAFETY: the caller's arguments.
    unsafe { post_send_list(qp, wr, bad) }
}

/// [`post_send`] of a request alone in its list, of the straight path's shape, which
/// that path did not take: posted as [`post_send_list`] posts it, on the QP whose
/// lock the caller holds, which is released.
///
/// # Safety
/// `qp` is a live QP whose lock the caller holds (no guard of it exists); `wr` a
/// valid request (`next` NULL) with a valid gather list; `bad` NULL or writable.
#[inline(never)]
unsafe extern "C" fn post_send_held(
    qp: *mut abi::ibv_qp,
    wr: *mut abi::ibv_send_wr,
    bad: *mut *mut abi::ibv_send_wr,
) -> c_int {
    // SAFETY: the caller's QP (live, not NULL) and request.
    let (q, w) = unsafe { (&*(qp as *const QpObj), &*wr) };
    // SAFETY: the caller holds the lock and passed it on.
    let mut g = unsafe { q.qp.held() };
    let r = if q.ud {
        // SAFETY: the request's own gather list and address handle.
        unsafe { post_one(&mut g, w, true) }
    } else {
        // The straight path's shape (checked by the caller): an inline SEND of one
        // gather entry at a non-NULL address, as `post_connected` posts it (its
        // empty entry through `post_one`).
        // SAFETY: the caller's gather list of one entry (not NULL, checked by the
        // caller).
        let s = unsafe { w.sg_list.read() };
        if s.length == 0 {
            // SAFETY: the caller's contract.
            unsafe { post_one(&mut g, w, false) }
        } else {
            // SAFETY: with IBV_SEND_INLINE the entry names memory the application
            // lets the library read during this call (no key is needed).
            let data =
                unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.length as usize) };
            g.send_inline(w.wr_id, data, send_flags(w.send_flags))
                .map_err(|e| post_errno(&e))
        }
    };
    match r {
        Ok(()) => 0,
        Err(e) => {
            if !bad.is_null() {
                // SAFETY: the caller's out-parameter.
                unsafe { *bad = wr };
            }
            e
        }
    }
}

/// [`post_send`] of the requests its straight path does not take: under the QP's
/// lock, each request through the driver's one-request entries where it has their
/// shape ([`post_connected`]), the others through `post_send` ([`post_one`]); on the
/// first failure `*bad` is set to that request and its errno returned (the requests
/// before it are posted).
///
/// # Safety
/// `qp` is a live QP; `wr` a valid request list, each with a valid gather list (and
/// on UD a live address handle); `bad` NULL or writable.
#[inline(never)]
unsafe extern "C" fn post_send_list(
    qp: *mut abi::ibv_qp,
    wr: *mut abi::ibv_send_wr,
    bad: *mut *mut abi::ibv_send_wr,
) -> c_int {
    // SAFETY: the caller's QP.
    let Ok(q) = (unsafe { QpObj::from_ibv(qp) }) else {
        return libc::EINVAL;
    };
    let mut g = q.qp.lock();
    let r = if !q.ud && !wr.is_null() && unsafe { !(*wr).next.is_null() } {
        // SAFETY: the caller's list, with valid gather lists.
        unsafe { post_connected_list(&mut g, wr) }
    } else {
        let mut cur = wr;
        loop {
            if cur.is_null() {
                break Ok(());
            }
            // SAFETY: `cur` is a request of the caller's list.
            let w = unsafe { &*cur };
            // SAFETY: the request's own gather list; for UD its address handle.
            let r = unsafe {
                if q.ud {
                    post_one(&mut g, w, true)
                } else {
                    post_connected(&mut g, w)
                }
            };
            if let Err(e) = r {
                break Err((cur, e));
            }
            cur = w.next;
        }
    };
    match r {
        Ok(()) => 0,
        Err((at, e)) => {
            if !bad.is_null() {
                // SAFETY: the caller's out-parameter.
                unsafe { *bad = at };
            }
            e
        }
    }
}

/// Whether a request is a memory-window operation (bind or local invalidate), which
/// `crate::mw` posts on its own.
fn is_mw_op(opcode: c_uint) -> bool {
    matches!(
        opcode,
        crate::abi_ex::c::IBV_WR_BIND_MW | crate::abi_ex::c::IBV_WR_LOCAL_INV
    )
}

/// A list of two or more requests on a connected QP, as libmlx5's `mlx5_post_send`
/// posts a list: the WQEs one after the other and one doorbell for them (at the
/// end, or before the failed request: the ones before it are published). Each
/// request goes through the driver's typed batch entries where it has their shape
/// (a SEND of one gather entry, or of one non-empty inline entry), the others
/// through the batch's general writer ([`SendBatch::post`]); a memory-window
/// operation, which `crate::mw` posts, closes the batch and is posted on its own.
/// On a failure, the failed request and its errno.
///
/// # Safety
/// `wr` is a valid request list, each with a valid gather list (with
/// `IBV_SEND_INLINE`, naming readable memory).
unsafe fn post_connected_list(
    g: &mut QueuePair<'static, B>,
    wr: *mut abi::ibv_send_wr,
) -> Result<(), (*mut abi::ibv_send_wr, c_int)> {
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: `cur` is a request of the caller's list.
        let w = unsafe { &*cur };
        if is_mw_op(w.opcode) {
            // SAFETY: the caller's contract.
            unsafe { post_one(g, w, false) }.map_err(|e| (cur, e))?;
            cur = w.next;
            continue;
        }
        let mut b = g.post().map_err(|e| (cur, post_errno(&e)))?;
        while !cur.is_null() {
            // SAFETY: as above.
            let w = unsafe { &*cur };
            if is_mw_op(w.opcode) {
                break;
            }
            // A failure drops the batch, which publishes the requests before it.
            // SAFETY: the caller's contract.
            unsafe { batch_one(&mut b, w) }.map_err(|e| (cur, e))?;
            cur = w.next;
        }
        b.ring();
    }
    Ok(())
}

/// One request of [`post_connected_list`] in the batch `b`.
///
/// # Safety
/// As [`post_connected_list`], for `w`.
#[inline(always)]
unsafe fn batch_one(b: &mut SendBatch<'_, B>, w: &abi::ibv_send_wr) -> Result<(), c_int> {
    if w.opcode == c::IBV_WR_SEND && w.num_sge == 1 && !w.sg_list.is_null() {
        // SAFETY: the caller's gather list of one entry (not NULL, checked).
        let s = unsafe { w.sg_list.read() };
        let flags = send_flags(w.send_flags);
        if w.send_flags & c::IBV_SEND_INLINE == 0 {
            let sge = Sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            };
            return b.send(w.wr_id, &sge, flags).map_err(|e| post_errno(&e));
        }
        if s.length != 0 {
            // SAFETY: with IBV_SEND_INLINE the entry names memory the application
            // lets the library read during this call (no key is needed).
            let data =
                unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.length as usize) };
            return b
                .send_inline(w.wr_id, data, flags)
                .map_err(|e| post_errno(&e));
        }
    }
    // SAFETY: the caller's contract (a connected QP: no address handle).
    unsafe { with_send_wr(w, false, |wr| b.post(wr).map_err(|e| post_errno(&e))) }
}

/// The driver's send flags of `ibv_send_wr.send_flags` (`IBV_SEND_INLINE` is the
/// data's form, not a flag; the checksum offload flags have no effect).
#[inline(always)]
fn send_flags(bits: c_uint) -> SendFlags {
    SendFlags::from_verbs(bits)
}

// `SendFlags::from_verbs` keeps the bits: the driver's flags are the verbs bits.
const _: () = {
    let (f, s, o) = (
        c::IBV_SEND_FENCE,
        c::IBV_SEND_SIGNALED,
        c::IBV_SEND_SOLICITED,
    );
    assert!(f | s | o == 7);
    assert!(SendFlags::from_verbs(f).contains(SendFlags::FENCE));
    assert!(SendFlags::FENCE.contains(SendFlags::from_verbs(f)));
    assert!(SendFlags::from_verbs(s).contains(SendFlags::SIGNALED));
    assert!(SendFlags::SIGNALED.contains(SendFlags::from_verbs(s)));
    assert!(SendFlags::from_verbs(o).contains(SendFlags::SOLICITED));
    assert!(SendFlags::SOLICITED.contains(SendFlags::from_verbs(o)));
};

/// [`post_one`] on a connected QP: a SEND of one gather entry, or of one non-empty
/// inline entry, goes straight to the driver's one-request entries
/// ([`QueuePair::send`], [`QueuePair::send_inline`]: the same WQE, doorbell and
/// errors as `post_send` of that request); any other request to [`post_one`].
///
/// # Safety
/// As [`post_one`].
#[inline(always)]
unsafe fn post_connected(
    qp: &mut QueuePair<'static, B>,
    w: &abi::ibv_send_wr,
) -> Result<(), c_int> {
    if w.opcode == c::IBV_WR_SEND && w.num_sge == 1 && !w.sg_list.is_null() {
        // SAFETY: the caller's gather list of one entry (not NULL, checked).
        let s = unsafe { w.sg_list.read() };
        let flags = send_flags(w.send_flags);
        let r = if w.send_flags & c::IBV_SEND_INLINE == 0 {
            let sge = Sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            };
            qp.send(w.wr_id, &sge, flags)
        } else if s.length != 0 {
            // SAFETY: with IBV_SEND_INLINE the entry names memory the application
            // lets the library read during this call (no key is needed).
            let data =
                unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.length as usize) };
            qp.send_inline(w.wr_id, data, flags)
        } else {
            // SAFETY: the caller's contract.
            return unsafe { post_one(qp, w, false) };
        };
        return r.map_err(|e| post_errno(&e));
    }
    // SAFETY: the caller's contract.
    unsafe { post_one(qp, w, false) }
}

/// # Safety
/// `w`'s gather list must be valid; with `IBV_SEND_INLINE`, the memory it names must be
/// readable; on a UD QP (`ud`), `w.wr.ud.ah` must be a live address handle.
#[inline(never)]
unsafe fn post_one(
    qp: &mut QueuePair<'static, B>,
    w: &abi::ibv_send_wr,
    ud: bool,
) -> Result<(), c_int> {
    if is_mw_op(w.opcode) {
        // SAFETY: the caller's request (its `bind_mw` member for a bind).
        return unsafe { crate::mw::post_mw_wr(qp, w) };
    }
    // SAFETY: the caller's contract.
    unsafe {
        with_send_wr(w, ud, |wr| {
            qp.post_send(std::slice::from_ref(wr))
                .map_err(|b| post_errno(&b.error))
        })
    }
}

/// Runs `f` on the driver's request for `w` (any opcode but the memory-window
/// ones: EINVAL, as an unknown opcode).
///
/// # Safety
/// As [`post_one`].
unsafe fn with_send_wr(
    w: &abi::ibv_send_wr,
    ud: bool,
    f: impl FnOnce(&SendWr<'_>) -> Result<(), c_int>,
) -> Result<(), c_int> {
    let mut store = [Sge::default(); MAX_SGE];
    // SAFETY: the caller's contract.
    let sg = unsafe { sges(w.sg_list, w.num_sge, &mut store) }?;
    let imm = u32::from_be(w.imm_data);
    // SAFETY: reading the union members the opcode selects (plain integers).
    let (rdma, atomic) = unsafe { (w.wr.rdma, w.wr.atomic) };
    let op = match w.opcode {
        c::IBV_WR_SEND => SendOp::Send,
        c::IBV_WR_SEND_WITH_IMM => SendOp::SendImm { imm },
        c::IBV_WR_SEND_WITH_INV => SendOp::SendInv { rkey: w.imm_data },
        c::IBV_WR_RDMA_WRITE => SendOp::RdmaWrite {
            remote: RemoteAddr {
                addr: rdma.remote_addr,
                rkey: rdma.rkey,
            },
        },
        c::IBV_WR_RDMA_WRITE_WITH_IMM => SendOp::RdmaWriteImm {
            remote: RemoteAddr {
                addr: rdma.remote_addr,
                rkey: rdma.rkey,
            },
            imm,
        },
        c::IBV_WR_RDMA_READ => SendOp::RdmaRead {
            remote: RemoteAddr {
                addr: rdma.remote_addr,
                rkey: rdma.rkey,
            },
        },
        c::IBV_WR_ATOMIC_CMP_AND_SWP => SendOp::AtomicCas {
            remote: RemoteAddr {
                addr: atomic.remote_addr,
                rkey: atomic.rkey,
            },
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        c::IBV_WR_ATOMIC_FETCH_AND_ADD => SendOp::AtomicFa {
            remote: RemoteAddr {
                addr: atomic.remote_addr,
                rkey: atomic.rkey,
            },
            add: atomic.compare_add,
        },
        _ => return Err(libc::EINVAL),
    };
    let flags = send_flags(w.send_flags);
    let mut parts: [&[u8]; MAX_SGE] = [&[]; MAX_SGE];
    let data = if w.send_flags & c::IBV_SEND_INLINE != 0 {
        for (p, s) in parts.iter_mut().zip(sg) {
            if s.length > 0 {
                // SAFETY: with IBV_SEND_INLINE the entries name memory the application
                // lets the library read during this call (no key is needed).
                *p = unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.length as usize) };
            }
        }
        SendData::Inline(&parts[..sg.len()])
    } else {
        SendData::Gather(sg)
    };
    let mut wr = SendWr {
        wr_id: w.wr_id,
        op,
        data,
        flags,
        ud: None,
    };
    if ud {
        // SAFETY: on a UD QP the `ud` member of the union is the one the caller set.
        let u = unsafe { w.wr.ud };
        // SAFETY: the caller's address handle, alive while requests use it.
        let ah = unsafe { AhObj::from_ibv(u.ah) }?;
        wr = wr.ud(&ah.ah, u.remote_qpn, u.remote_qkey);
    }
    f(&wr)
}

/// Walks a C receive-request chain (`ibv_post_recv` / `ibv_post_srq_recv`), posting
/// each request with `post`; on the first failure sets `*bad` to that request and
/// returns its errno.
///
/// # Safety
///
/// `wr` is NULL or a valid `ibv_recv_wr` list whose scatter lists are valid; `bad`
/// is NULL or writable.
unsafe fn post_recv_chain(
    wr: *mut abi::ibv_recv_wr,
    bad: *mut *mut abi::ibv_recv_wr,
    mut post: impl FnMut(RecvWr<'_>) -> Result<(), c_int>,
) -> c_int {
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: `cur` is a request of the caller's list.
        let w = unsafe { &*cur };
        let mut store = [Sge::default(); MAX_SGE];
        // SAFETY: the request's own scatter list.
        let r = unsafe { sges(w.sg_list, w.num_sge, &mut store) }
            .and_then(|sg| post(RecvWr::new(w.wr_id, sg)));
        if let Err(e) = r {
            if !bad.is_null() {
                // SAFETY: the caller's out-parameter.
                unsafe { *bad = cur };
            }
            return e;
        }
        cur = w.next;
    }
    0
}

/// `ops.post_recv`.
unsafe extern "C" fn post_recv(
    qp: *mut abi::ibv_qp,
    wr: *mut abi::ibv_recv_wr,
    bad: *mut *mut abi::ibv_recv_wr,
) -> c_int {
    // SAFETY: the caller's QP.
    let Ok(q) = (unsafe { QpObj::from_ibv(qp) }) else {
        return libc::EINVAL;
    };
    let mut g = q.qp.lock();
    // SAFETY: the caller's request list and out-parameter.
    unsafe {
        post_recv_chain(wr, bad, |r| {
            g.post_recv(&[r]).map_err(|b| post_errno(&b.error))
        })
    }
}

// ---------------------------------------------------------------------------------
// Shared receive queues
// ---------------------------------------------------------------------------------

/// An `ibv_srq` and the driver's SRQ behind it.
#[repr(C)]
pub(crate) struct SrqObj {
    ibv: abi::ibv_srq,
    srq: Mutex<SharedReceiveQueue<'static, B>>,
    srqn: u32,
    pd: &'static PdObj,
    /// QPs attached: `ibv_destroy_srq` fails with `EBUSY` while any is.
    users: Users,
}

/// SRQN -> SRQ object, for the SRQ events of `ibv_get_async_event`.
static SRQS: Mutex<Vec<(u32, SyncPtr<SrqObj>)>> = Mutex::new(Vec::new());

fn srq_by_num(srqn: u32) -> Option<*mut SrqObj> {
    lock(&SRQS)
        .iter()
        .find(|(n, _)| *n == srqn)
        .map(|(_, p)| p.0)
}

/// `ibv_srq_attr_mask` bits (`verbs.h`).
const IBV_SRQ_MAX_WR: c_int = 1;
const IBV_SRQ_LIMIT: c_int = 2;

pub(crate) unsafe extern "C" fn create_srq(
    pd: *mut abi::ibv_pd,
    init: *mut abi::ibv_srq_init_attr,
) -> *mut abi::ibv_srq {
    // SAFETY: the caller's PD, kept alive by the use count.
    ptr_verb(unsafe { PdObj::from_ibv(pd) }, |p| {
        // SAFETY: the caller's init attributes.
        let ia = unsafe { init.as_mut() }.ok_or(libc::EINVAL)?;
        let a = ia.attr;
        // `max_wr` 0 is accepted, as libmlx5's `mlx5_create_srq` and mlx5_ib's
        // `mlx5_ib_create_srq` do: a queue of one WQE that holds no request.
        if a.max_sge as usize > MAX_SGE || a.srq_limit > a.max_wr {
            return Err(libc::EINVAL);
        }
        huge_pages_for("MLX_SRQ", None)?;
        let srq =
            p.pd.create_srq(&SrqAttr {
                max_wr: a.max_wr,
                max_sge: a.max_sge.max(1),
                srq_limit: a.srq_limit,
            })
            .or_errno()?;
        let srqn = srq.srq_num();
        // As rdma-core's mlx5: the sizes granted go back to the caller.
        ia.attr.max_wr = srq.max_wr();
        ia.attr.max_sge = srq.max_sge();
        p.users.acquire();
        let ptr = Box::new(SrqObj {
            ibv: abi::ibv_srq {
                context: p.ibv.context,
                srq_context: ia.srq_context,
                pd,
                handle: srqn,
                mutex: abi::pthread_mutex_t([0; 40]),
                cond: abi::pthread_cond_t([0; 48]),
                events_completed: 0,
            },
            srq: Mutex::new(srq),
            srqn,
            pd: p,
            users: Users::default(),
        })
        .into_ibv();
        lock(&SRQS).push((srqn, SyncPtr(ptr as *mut SrqObj)));
        Ok(ptr)
    })
}

pub(crate) unsafe extern "C" fn modify_srq(
    srq: *mut abi::ibv_srq,
    attr: *mut abi::ibv_srq_attr,
    mask: c_int,
) -> c_int {
    // SAFETY: the caller's SRQ.
    int_verb(unsafe { SrqObj::from_ibv(srq) }, |s| {
        // SAFETY: the caller's attributes.
        let a = unsafe { attr.as_ref() }.ok_or(libc::EINVAL)?;
        if mask & !(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) != 0 {
            return Err(libc::EINVAL);
        }
        if mask & IBV_SRQ_MAX_WR != 0 {
            // Resizing is not offered (mlx5_ib refuses IB_SRQ_MAX_WR with EINVAL).
            return Err(libc::EINVAL);
        }
        if mask & IBV_SRQ_LIMIT != 0 {
            let mut g = lock(&s.srq);
            if a.srq_limit > g.max_wr() {
                return Err(libc::EINVAL);
            }
            g.arm(a.srq_limit).or_errno()?;
        }
        Ok(())
    })
}

pub(crate) unsafe extern "C" fn query_srq(
    srq: *mut abi::ibv_srq,
    attr: *mut abi::ibv_srq_attr,
) -> c_int {
    // SAFETY: the caller's SRQ.
    int_verb(unsafe { SrqObj::from_ibv(srq) }, |s| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        let i = lock(&s.srq).query().or_errno()?;
        // SAFETY: the caller's out-parameter.
        unsafe {
            attr.write(abi::ibv_srq_attr {
                max_wr: i.max_wr,
                max_sge: i.max_sge,
                srq_limit: i.srq_limit,
            })
        };
        Ok(())
    })
}

pub(crate) unsafe extern "C" fn destroy_srq(srq: *mut abi::ibv_srq) -> c_int {
    // SAFETY: the caller's SRQ.
    int_verb(unsafe { SrqObj::from_ibv(srq) }, |s| {
        s.users.idle()?;
        lock(&SRQS).retain(|(n, _)| *n != s.srqn);
        // SAFETY: created by `create_srq`; no QP uses it and the event table no longer
        // names it.
        let b = unsafe { SrqObj::take(srq) };
        let pd = b.pd;
        let r = b
            .srq
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .destroy();
        pd.users.release();
        r.or_errno()
    })
}

/// `ops.post_srq_recv` (what the inline `ibv_post_srq_recv` calls).
unsafe extern "C" fn post_srq_recv(
    srq: *mut abi::ibv_srq,
    wr: *mut abi::ibv_recv_wr,
    bad: *mut *mut abi::ibv_recv_wr,
) -> c_int {
    // SAFETY: the caller's SRQ.
    let Ok(s) = (unsafe { SrqObj::from_ibv(srq) }) else {
        return libc::EINVAL;
    };
    let mut g = lock(&s.srq);
    // SAFETY: the caller's request list and out-parameter.
    unsafe {
        post_recv_chain(wr, bad, |r| {
            g.post_recv(&[r]).map_err(|b| post_errno(&b.error))
        })
    }
}

// ---------------------------------------------------------------------------------
// Address handles (UD)
// ---------------------------------------------------------------------------------

#[repr(C)]
pub(crate) struct AhObj {
    pub(crate) ibv: abi::ibv_ah,
    pub(crate) ah: AddressHandle<'static, B>,
    pub(crate) pd: &'static PdObj,
}

pub(crate) unsafe extern "C" fn create_ah(
    pd: *mut abi::ibv_pd,
    attr: *mut abi::ibv_ah_attr,
) -> *mut abi::ibv_ah {
    // SAFETY: the caller's PD, kept alive by the use count.
    ptr_verb(unsafe { PdObj::from_ibv(pd) }, |p| {
        // SAFETY: the caller's attributes.
        let a = unsafe { attr.as_ref() }.ok_or(libc::EINVAL)?;
        let av = convert::av_from_ibv(a, p_sim(p))?;
        let ah = p.pd.create_ah(a.port_num.max(1), &av).or_errno()?;
        p.users.acquire();
        Ok(Box::new(AhObj {
            ibv: abi::ibv_ah {
                context: p.ibv.context,
                pd,
                handle: 0,
            },
            ah,
            pd: p,
        })
        .into_ibv())
    })
}

pub(crate) unsafe extern "C" fn destroy_ah(ah: *mut abi::ibv_ah) -> c_int {
    // SAFETY: the caller's address handle.
    int_verb(unsafe { AhObj::from_ibv(ah) }, |_| {
        // SAFETY: created by `create_ah`, destroyed once.
        unsafe { AhObj::take(ah) }.pd.users.release();
        Ok(())
    })
}

// ---------------------------------------------------------------------------------
// Asynchronous events
// ---------------------------------------------------------------------------------

pub(crate) unsafe extern "C" fn get_async_event(
    ctx: *mut abi::ibv_context,
    event: *mut abi::ibv_async_event,
) -> c_int {
    // SAFETY: the caller's context.
    status_verb(unsafe { CtxObj::from_ibv(ctx) }, |o| {
        if event.is_null() {
            return None;
        }
        let (ty, element) = o.app_async_fd.next(|| loop {
            let e = o.nic.ctx.try_get_async_event()?;
            break Some(match e {
                AsyncEvent::PortActive { port } => (9, usize::from(port)),
                AsyncEvent::PortError { port } => (10, usize::from(port)),
                AsyncEvent::PortChange { port, .. } => (18, usize::from(port)),
                AsyncEvent::DeviceFatal { .. } => (8, 0),
                // IBV_EVENT_SRQ_LIMIT_REACHED and IBV_EVENT_SRQ_ERR, `element.srq`
                // the application's SRQ (an event of an SRQ destroyed meanwhile
                // is dropped).
                AsyncEvent::SrqLimitReached { srqn } => match srq_by_num(srqn) {
                    Some(p) => (15, p as usize),
                    None => continue,
                },
                AsyncEvent::SrqError { srqn } => match srq_by_num(srqn) {
                    Some(p) => (14, p as usize),
                    None => continue,
                },
                // QP and CQ events would need the application's object; they are
                // reported through completions with error status instead.
                _ => continue,
            });
        })?;
        // SAFETY: the caller's out-parameter.
        unsafe {
            event.write(abi::ibv_async_event {
                element: element as *mut c_void,
                event_type: ty,
            })
        };
        Some(())
    })
}

pub(crate) unsafe extern "C" fn ack_async_event(_event: *mut abi::ibv_async_event) {}

// ---------------------------------------------------------------------------------
// Unsupported objects: clean errors
// ---------------------------------------------------------------------------------

/// For pointer-returning entry points of features this library does not offer (XRC,
/// multicast, the provider-private `ibv_cmd_*` layer): NULL, errno EOPNOTSUPP.
pub(crate) unsafe extern "C" fn unsupported_ptr() -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    ptr::null_mut()
}

/// For int-returning entry points of features this library does not offer:
/// EOPNOTSUPP (also in errno).
pub(crate) unsafe extern "C" fn unsupported_int() -> c_int {
    set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

/// For entry points that have nothing to do here (`verbs_register_driver_34` from the
/// constructors of libmlx5 and libefa, `ibv_dontfork_range`, `__verbs_log`, ...): 0.
pub(crate) unsafe extern "C" fn nothing() -> c_int {
    0
}

/// `ibv_is_fork_initialized`: `IBV_FORK_UNNEEDED`. rdma-core answers that when the
/// kernel copies pinned pages on fork; this library registers memory without the
/// kernel's RDMA stack (the simulator's memory is the process's own, VFIO pins through
/// the IOMMU), so a child's copy-on-write never takes a page from under the device's
/// mappings of the parent and `ibv_fork_init` has nothing to set up (it returns 0).
pub(crate) unsafe extern "C" fn fork_unneeded() -> c_int {
    c::IBV_FORK_UNNEEDED
}

/// The file behind every context's `cmd_fd`. rdma-core's contexts carry the uverbs
/// character device they were opened on (`verbs_open_device`), which programs
/// duplicate and hand to `ibv_import_device` (rdma-core's `test_shared_pd` does
/// `os.dup(ctx.cmd_fd)`); this library's device has no such file, so each context
/// gets a duplicate of one process-wide sealed, empty memfd instead: a valid
/// descriptor that names this library's device, reads end of file, refuses writes
/// (`EPERM`, the seals) and ioctls (`ENOTTY`).
struct CmdFile {
    fd: std::os::fd::OwnedFd,
    id: (libc::dev_t, libc::ino_t),
}

static CMD_FILE: OnceLock<Result<CmdFile, c_int>> = OnceLock::new();

impl CmdFile {
    /// The process's command file, created on first use.
    fn get() -> Result<&'static CmdFile, c_int> {
        CMD_FILE
            .get_or_init(|| {
                use std::os::fd::{AsRawFd, FromRawFd};
                let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
                // SAFETY: a NUL-terminated name; memfd_create returns a new descriptor
                // or -1.
                let raw = unsafe { libc::memfd_create(c"ferroverbs-uverbs".as_ptr(), flags) };
                if raw < 0 {
                    return Err(errno());
                }
                // SAFETY: `raw` is the descriptor just created, owned by nobody else.
                let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
                let seals = libc::F_SEAL_WRITE
                    | libc::F_SEAL_GROW
                    | libc::F_SEAL_SHRINK
                    | libc::F_SEAL_SEAL;
                // SAFETY: fcntl on our own descriptor.
                if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
                    return Err(errno());
                }
                let id = file_id(fd.as_raw_fd()).ok_or_else(errno)?;
                Ok(CmdFile { fd, id })
            })
            .as_ref()
            .map_err(|e| *e)
    }

    /// A new descriptor of the command file (close-on-exec) for a context.
    fn open() -> Result<std::os::fd::OwnedFd, c_int> {
        Self::get()?
            .fd
            .try_clone()
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))
    }

    /// Whether `fd` is a descriptor of the command file (a context's `cmd_fd`, or a
    /// duplicate of one).
    fn names(fd: c_int) -> bool {
        let Some(id) = CMD_FILE.get().and_then(|r| r.as_ref().ok()).map(|f| f.id) else {
            return false;
        };
        file_id(fd) == Some(id)
    }
}

/// `(st_dev, st_ino)` of the file `fd` is open on.
fn file_id(fd: c_int) -> Option<(libc::dev_t, libc::ino_t)> {
    // SAFETY: an all-zero `stat` is a valid value; fstat writes it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on any int is defined (EBADF for a bad descriptor); `st` is writable.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// `ibv_import_device(cmd_fd)`, in rdma-core's order (`libibverbs/device.c`): a
/// descriptor that is not a character device is EINVAL; one that names no listed
/// device is ENODEV; the device found, but its provider without `import_context`, is
/// EOPNOTSUPP. This library's device is named by its contexts' command file
/// ([`CmdFile`]), and it offers no import (sharing objects through a kernel uverbs
/// file), so that file gives EOPNOTSUPP, on which rdma-core's tests skip ("Importing
/// a device is not supported"); any other character device names no device of the
/// list.
pub(crate) unsafe extern "C" fn import_device(cmd_fd: c_int) -> *mut c_void {
    if CmdFile::names(cmd_fd) {
        set_errno(libc::EOPNOTSUPP);
        return ptr::null_mut();
    }
    // SAFETY: an all-zero `stat` is a valid value; fstat writes it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on any int is defined (EBADF for a bad descriptor); `st` is writable.
    let r = unsafe { libc::fstat(cmd_fd, &mut st) };
    if r != 0 || st.st_mode & libc::S_IFMT != libc::S_IFCHR {
        set_errno(libc::EINVAL);
    } else {
        set_errno(libc::ENODEV);
    }
    ptr::null_mut()
}

/// `__ioctl_final_num_attrs(num_attrs, link)`: the attributes of a chain of
/// `struct ibv_command_buffer` (the provider's ioctl builder), as rdma-core counts
/// them: `num_attrs` plus, for each linked buffer, its `next_attr - hdr.attrs`.
///
/// # Safety
/// `link` is NULL or a chain of valid `ibv_command_buffer`s (the caller's promise).
pub(crate) unsafe extern "C" fn ioctl_final_num_attrs(
    num_attrs: c_uint,
    mut link: *const abi::ibv_command_buffer,
) -> c_uint {
    let mut n = num_attrs;
    while !link.is_null() {
        // SAFETY: `link` is a valid command buffer (the caller's promise); `hdr.attrs`
        // is its trailing attribute array, `next_attr` points into it.
        let (next, used) = unsafe {
            let b = &*link;
            let attrs = ptr::addr_of!((*link).attrs) as *const abi::ib_uverbs_attr;
            (b.next, b.next_attr.offset_from(attrs))
        };
        n = n.wrapping_add(used as c_uint);
        link = next;
    }
    n
}

/// The IBVERBS_1.0 device of rdma-core's compatibility layer (`struct
/// ibv_device_1_0`): the real device at its third word.
#[repr(C)]
pub(crate) struct IbvDevice10 {
    obsolete_sysfs_dev: *mut c_void,
    obsolete_sysfs_ibdev: *mut c_void,
    real_device: *mut abi::ibv_device,
    ops: [*mut c_void; 2],
}

/// `ibv_get_device_list@IBVERBS_1.0`: as rdma-core builds it, an array of
/// `ibv_device_1_0` wrappers whose slot -1 keeps the real list.
pub(crate) unsafe extern "C" fn get_device_list_1_0(num: *mut c_int) -> *mut *mut IbvDevice10 {
    let mut n: c_int = 0;
    // SAFETY: `n` is a writable int.
    let real = unsafe { get_device_list(&mut n) };
    if real.is_null() {
        return ptr::null_mut();
    }
    let n = n as usize;
    // SAFETY: calloc of n + 2 pointers (the real list, the wrappers, NULL).
    let l = unsafe { libc::calloc(n + 2, std::mem::size_of::<usize>()) } as *mut *mut c_void;
    if l.is_null() {
        // SAFETY: `real` came from `get_device_list`.
        unsafe { free_device_list(real) };
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    }
    // SAFETY: `l` has n + 2 slots; `real` has n devices before its NULL.
    unsafe {
        *l = real as *mut c_void;
        for i in 0..n {
            let d = libc::calloc(1, std::mem::size_of::<IbvDevice10>()) as *mut IbvDevice10;
            if d.is_null() {
                for j in 1..=i {
                    libc::free(*l.add(j));
                }
                libc::free(l as *mut c_void);
                free_device_list(real);
                set_errno(libc::ENOMEM);
                return ptr::null_mut();
            }
            (*d).real_device = *real.add(i);
            *l.add(i + 1) = d as *mut c_void;
        }
        if !num.is_null() {
            *num = n as c_int;
        }
        l.add(1) as *mut *mut IbvDevice10
    }
}

/// `ibv_free_device_list@IBVERBS_1.0`.
///
/// # Safety
/// `list` came from [`get_device_list_1_0`].
pub(crate) unsafe extern "C" fn free_device_list_1_0(list: *mut *mut IbvDevice10) {
    if list.is_null() {
        return;
    }
    // SAFETY: the list is NULL-terminated, its slot -1 is the real list (as built by
    // `get_device_list_1_0`), every element and the array are calloc'd.
    unsafe {
        let mut p = list;
        while !(*p).is_null() {
            libc::free(*p as *mut c_void);
            p = p.add(1);
        }
        let base = list.sub(1);
        free_device_list(*base as *mut *mut abi::ibv_device);
        libc::free(base as *mut c_void);
    }
}

/// `ibv_get_device_name@IBVERBS_1.0`.
///
/// # Safety
/// `dev` is an element of a [`get_device_list_1_0`] list.
pub(crate) unsafe extern "C" fn get_device_name_1_0(dev: *mut IbvDevice10) -> *const c_char {
    if dev.is_null() {
        return ptr::null();
    }
    // SAFETY: `dev` is a live 1.0 wrapper; its real device is ours.
    unsafe { get_device_name((*dev).real_device) }
}

/// `ibv_get_device_guid@IBVERBS_1.0`.
///
/// # Safety
/// `dev` is an element of a [`get_device_list_1_0`] list.
pub(crate) unsafe extern "C" fn get_device_guid_1_0(dev: *mut IbvDevice10) -> u64 {
    if dev.is_null() {
        return 0;
    }
    // SAFETY: `dev` is a live 1.0 wrapper; its real device is ours.
    unsafe { get_device_guid((*dev).real_device) }
}

/// For entry points that report "not found" with -1 (`ibv_read_sysfs_file`).
pub(crate) unsafe extern "C" fn minus_one() -> c_int {
    -1
}

pub(crate) unsafe extern "C" fn get_sysfs_path() -> *const c_char {
    c"/sys".as_ptr()
}

pub(crate) unsafe extern "C" fn wc_status_str(s: c_uint) -> *const c_char {
    convert::wc_status_str(s).as_ptr()
}

pub(crate) unsafe extern "C" fn node_type_str(t: c_int) -> *const c_char {
    convert::node_type_str(t).as_ptr()
}

pub(crate) unsafe extern "C" fn port_state_str(s: c_uint) -> *const c_char {
    convert::port_state_str(s).as_ptr()
}

pub(crate) unsafe extern "C" fn event_type_str(e: c_uint) -> *const c_char {
    convert::event_type_str(e).as_ptr()
}

pub(crate) unsafe extern "C" fn rate_to_mult(r: c_int) -> c_int {
    convert::rate_to_mult(r)
}

pub(crate) unsafe extern "C" fn mult_to_rate(m: c_int) -> c_int {
    convert::mult_to_rate(m)
}

pub(crate) unsafe extern "C" fn rate_to_mbps(r: c_int) -> c_int {
    convert::rate_to_mbps(r)
}

pub(crate) unsafe extern "C" fn mbps_to_rate(m: c_int) -> c_int {
    convert::mbps_to_rate(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    /// The `ibv_wc` table of the one-entry poll: a requester completion of SEND,
    /// SEND with invalidation and RDMA WRITE reports `IBV_WC_SEND` (0) or
    /// `IBV_WC_RDMA_WRITE` (1), with `IBV_WC_WITH_IMM` (2) for the immediate forms
    /// (rdma-core mlx5 `handle_good_req`), success, and 0 elsewhere; READ, the
    /// atomics and UMR are not in it (the general path takes them).
    #[test]
    fn the_requester_table_is_the_verbs_completion() {
        use ferroverbs_hw::datapath::wqe::{
            MLX5_OPCODE_ATOMIC_CS, MLX5_OPCODE_ATOMIC_FA, MLX5_OPCODE_RDMA_READ,
            MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_SEND,
            MLX5_OPCODE_SEND_IMM, MLX5_OPCODE_SEND_INVAL, MLX5_OPCODE_UMR,
        };
        for (op, opcode, flags) in [
            (MLX5_OPCODE_SEND, 0, 0),
            (MLX5_OPCODE_SEND_IMM, 0, 2),
            (MLX5_OPCODE_SEND_INVAL, 0, 0),
            (MLX5_OPCODE_RDMA_WRITE, 1, 0),
            (MLX5_OPCODE_RDMA_WRITE_IMM, 1, 2),
        ] {
            // Written over bytes of 0xa5, as the poll path writes it.
            let mut w = std::mem::MaybeUninit::<abi::ibv_wc>::uninit();
            // SAFETY: the bytes of `w`, all of which the call below writes.
            unsafe {
                w.as_mut_ptr()
                    .cast::<u8>()
                    .write_bytes(0xa5, size_of_val(&w))
            };
            let r = HotReq {
                wr_id: 0x0123_4567_89ab_cdef,
                qp_num: 0x12_3456,
                send_op: op,
            };
            // SAFETY: room for one `ibv_wc`; every field written (an integer each).
            let w = unsafe {
                write_req_wc(w.as_mut_ptr(), r);
                w.assume_init()
            };
            let got = (w.wr_id, w.status, w.opcode, w.vendor_err, w.byte_len);
            let want = (0x0123_4567_89ab_cdef, 0, opcode, 0, 0);
            assert_eq!(got, want, "send opcode {op:#x}");
            let got = (w.imm_data, w.qp_num, w.src_qp, w.wc_flags);
            assert_eq!(got, (0, 0x12_3456, 0, flags), "send opcode {op:#x}");
            let got = (w.pkey_index, w.slid, w.sl, w.dlid_path_bits);
            assert_eq!(got, (0, 0, 0, 0), "send opcode {op:#x}");
            // What the general path writes for the same completion.
            let mut c = requester_completion(op).expect("in the table");
            c.wr_id = r.wr_id;
            c.qp_num = r.qp_num;
            let g = convert::wc_to_ibv(&c);
            assert_eq!(
                (g.wr_id, g.status, g.opcode, g.qp_num, g.wc_flags),
                (w.wr_id, w.status, w.opcode, w.qp_num, w.wc_flags)
            );
        }
        for op in [
            MLX5_OPCODE_RDMA_READ,
            MLX5_OPCODE_ATOMIC_CS,
            MLX5_OPCODE_ATOMIC_FA,
            MLX5_OPCODE_UMR,
        ] {
            assert!(requester_completion(op).is_none(), "send opcode {op:#x}");
        }
    }

    /// `MLX5_SHUT_UP_BF` as rdma-core reads it: unset or "0" keeps BlueFlame; "1",
    /// any other text and the empty string turn it off.
    #[test]
    fn shut_up_bf_reads_as_rdma_core() {
        use std::ffi::OsStr;
        assert!(!super::shut_up_bf_of(None));
        assert!(!super::shut_up_bf_of(Some(OsStr::new("0"))));
        for v in ["1", "yes", "00", ""] {
            assert!(super::shut_up_bf_of(Some(OsStr::new(v))), "{v:?}");
        }
    }

    /// `MLX5_CQE_SIZE` as rdma-core's `get_cqe_size` reads it (`atoi`, then 64 or
    /// 128): unset is 64; "128", " 128" and "128 bytes" are 128; anything else that
    /// `atoi` does not make 64 or 128 is refused.
    #[test]
    fn cqe_size_reads_as_rdma_core() {
        use ferroverbs::verbs::CqeSize;
        use std::ffi::OsStr;
        assert_eq!(super::cqe_size_of(None), Some(CqeSize::Bytes64));
        for (v, want) in [
            ("64", Some(CqeSize::Bytes64)),
            ("+64", Some(CqeSize::Bytes64)),
            ("128", Some(CqeSize::Bytes128)),
            (" 128", Some(CqeSize::Bytes128)),
            ("128 bytes", Some(CqeSize::Bytes128)),
            ("0128", Some(CqeSize::Bytes128)),
            ("", None),
            ("0", None),
            ("32", None),
            ("256", None),
            ("-128", None),
            ("x128", None),
            ("99999999999999999999999", None),
        ] {
            assert_eq!(super::cqe_size_of(Some(OsStr::new(v))), want, "{v:?}");
        }
    }

    #[test]
    fn device_list_has_one_named_device() {
        let mut n = -1;
        // SAFETY: the API's contract, as a C caller would use it.
        unsafe {
            let l = get_device_list(&mut n);
            assert!(!l.is_null());
            assert_eq!(n, 1);
            let d = *l;
            assert!(!d.is_null());
            assert!((*l.add(1)).is_null());
            let name = CStr::from_ptr(get_device_name(d));
            assert_eq!(name.to_str().unwrap(), device::device_name());
            assert_eq!((*d).node_type, c::IBV_NODE_CA);
            free_device_list(l);
        }
    }

    #[test]
    fn strings_are_c_strings() {
        // SAFETY: static strings.
        unsafe {
            assert_eq!(
                CStr::from_ptr(wc_status_str(5)).to_str().unwrap(),
                "Work Request Flushed Error"
            );
            assert_eq!(CStr::from_ptr(get_sysfs_path()).to_str().unwrap(), "/sys");
        }
    }
}

//! Verbs of the library called in process through its exported C symbols, as a C
//! program calls them, where the answer must be rdma-core's: the entry points of
//! features this library does not offer (import, dma-buf registration, the data-order
//! query) answer as rdma-core does for a provider without the op (the context's
//! `cmd_fd` names the device to `ibv_import_device`, which refuses it so); the IBVERBS_1.0
//! compatibility versions (reached with `dlvsym`, as a program linked against them
//! binds) list the device; `ibv_rereg_mr` keeps a region's keys for what a UMR
//! changes in place and renews them otherwise, as Linux's mlx5_ib. All tests share one simulated NIC (host 84 of this process's
//! loopback /24).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr;
use std::sync::OnceLock;

use ibverbs::abi;

mod support;

use support::net;

extern "C" {
    fn ibv_get_device_list(num: *mut c_int) -> *mut *mut abi::ibv_device;
    fn ibv_get_device_guid(dev: *mut abi::ibv_device) -> u64;
    fn ibv_open_device(dev: *mut abi::ibv_device) -> *mut abi::ibv_context;
    fn ibv_alloc_pd(ctx: *mut abi::ibv_context) -> *mut abi::ibv_pd;
    fn ibv_create_cq(
        ctx: *mut abi::ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        ch: *mut c_void,
        vec: c_int,
    ) -> *mut abi::ibv_cq;
    fn ibv_create_qp(pd: *mut abi::ibv_pd, init: *mut abi::ibv_qp_init_attr) -> *mut abi::ibv_qp;
    fn ibv_destroy_qp(qp: *mut abi::ibv_qp) -> c_int;
    fn ibv_destroy_cq(cq: *mut abi::ibv_cq) -> c_int;
    fn ibv_reg_dmabuf_mr(
        pd: *mut abi::ibv_pd,
        offset: u64,
        len: usize,
        iova: u64,
        fd: c_int,
        access: c_int,
    ) -> *mut abi::ibv_mr;
    fn ibv_import_device(cmd_fd: c_int) -> *mut abi::ibv_context;
    fn ibv_import_pd(ctx: *mut abi::ibv_context, handle: u32) -> *mut abi::ibv_pd;
    fn ibv_unimport_pd(pd: *mut abi::ibv_pd);
    fn ibv_import_mr(pd: *mut abi::ibv_pd, handle: u32) -> *mut abi::ibv_mr;
    fn ibv_import_dm(ctx: *mut abi::ibv_context, handle: u32) -> *mut c_void;
    fn ibv_query_qp_data_in_order(qp: *mut abi::ibv_qp, op: c_int, flags: u32) -> c_int;
    fn __ioctl_final_num_attrs(num: u32, link: *const abi::ibv_command_buffer) -> u32;
    fn ibv_create_comp_channel(ctx: *mut abi::ibv_context) -> *mut abi::ibv_comp_channel;
    fn ibv_destroy_comp_channel(ch: *mut abi::ibv_comp_channel) -> c_int;
    fn ibv_get_cq_event(
        ch: *mut abi::ibv_comp_channel,
        cq: *mut *mut abi::ibv_cq,
        cq_context: *mut *mut c_void,
    ) -> c_int;
    fn ibv_ack_cq_events(cq: *mut abi::ibv_cq, n: u32);
    fn ibv_modify_qp(qp: *mut abi::ibv_qp, attr: *mut abi::ibv_qp_attr, mask: c_int) -> c_int;
    fn ibv_get_async_event(ctx: *mut abi::ibv_context, ev: *mut abi::ibv_async_event) -> c_int;
    fn ibv_ack_async_event(ev: *mut abi::ibv_async_event);
    fn ibv_query_device(ctx: *mut abi::ibv_context, attr: *mut abi::ibv_device_attr) -> c_int;
    fn ibv_query_qp(
        qp: *mut abi::ibv_qp,
        attr: *mut abi::ibv_qp_attr,
        mask: c_int,
        init: *mut abi::ibv_qp_init_attr,
    ) -> c_int;
    fn ibv_resize_cq(cq: *mut abi::ibv_cq, cqe: c_int) -> c_int;
    fn ibv_fork_init() -> c_int;
    fn ibv_reg_mr(
        pd: *mut abi::ibv_pd,
        addr: *mut c_void,
        len: usize,
        acc: c_int,
    ) -> *mut abi::ibv_mr;
    fn ibv_rereg_mr(
        mr: *mut abi::ibv_mr,
        flags: c_int,
        pd: *mut abi::ibv_pd,
        addr: *mut c_void,
        len: usize,
        acc: c_int,
    ) -> c_int;
    fn ibv_dereg_mr(mr: *mut abi::ibv_mr) -> c_int;
    fn ibv_dealloc_pd(pd: *mut abi::ibv_pd) -> c_int;
    fn ibv_is_fork_initialized() -> c_int;
}

/// Tests that change the shared NIC's link or need it up, or that make QPs and
/// completions the async-event test must not see, take this lock.
static LINK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn link_lock() -> std::sync::MutexGuard<'static, ()> {
    LINK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `fd` becomes readable within `ms` (`poll(2)`).
fn readable(fd: c_int, ms: c_int) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, ms) == 1 }
}

fn set_nonblocking(fd: c_int) {
    // SAFETY: fcntl on an open descriptor, no pointers.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        assert!(fl >= 0);
        assert_eq!(libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK), 0);
    }
}

/// The process's context and a PD on it (opened once; the NIC stays up).
struct Dev {
    ctx: *mut abi::ibv_context,
    pd: *mut abi::ibv_pd,
}
// SAFETY: the library's verbs may be called from any thread.
unsafe impl Send for Dev {}
// SAFETY: as above.
unsafe impl Sync for Dev {}

fn dev() -> &'static Dev {
    static DEV: OnceLock<Dev> = OnceLock::new();
    DEV.get_or_init(|| {
        // SAFETY: set before the library reads it (the first open), to the same value
        // by every test of this process.
        unsafe { std::env::set_var("FERROVERBS_DEVICE", format!("sim:{}", net::host(84))) };
        // SAFETY: the verbs API used as its contract says.
        unsafe {
            let mut n = 0;
            let list = ibv_get_device_list(&mut n);
            assert_eq!(n, 1);
            let ctx = ibv_open_device(*list);
            assert!(!ctx.is_null());
            let pd = ibv_alloc_pd(ctx);
            assert!(!pd.is_null());
            Dev { ctx, pd }
        }
    })
}

/// `IBV_QPT_RC`.
const QPT_RC: u32 = 2;
/// `IBV_QPT_UD`.
const QPT_UD: u32 = 4;

/// The attributes of a QP of type `qp_type` on `cq` (both directions), four work
/// requests of one SGE each way, nothing inline.
fn qp_init(cq: *mut abi::ibv_cq, qp_type: u32) -> abi::ibv_qp_init_attr {
    abi::ibv_qp_init_attr {
        qp_context: ptr::null_mut(),
        send_cq: cq,
        recv_cq: cq,
        srq: ptr::null_mut(),
        cap: abi::ibv_qp_cap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        qp_type,
        sq_sig_all: 0,
    }
}

fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

fn set_errno(e: c_int) {
    // SAFETY: this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// A NULL result with `errno` `want` (errno cleared before the call).
fn null_with(p: *mut c_void, want: c_int, what: &str) {
    let e = errno();
    assert!(p.is_null(), "{what}: not NULL");
    assert_eq!(e, want, "{what}: errno {e}, want {want}");
}

#[test]
fn import_and_dmabuf_verbs_fail_as_rdma_core_without_the_provider_op() {
    let d = dev();
    // SAFETY: the verbs API used as its contract says (live context and PD).
    unsafe {
        set_errno(0);
        let mr = ibv_reg_dmabuf_mr(d.pd, 0, 4096, 0, -1, 1);
        null_with(mr.cast(), libc::EOPNOTSUPP, "ibv_reg_dmabuf_mr");
        set_errno(0);
        null_with(
            ibv_import_pd(d.ctx, 1).cast(),
            libc::EOPNOTSUPP,
            "ibv_import_pd",
        );
        set_errno(0);
        null_with(
            ibv_import_mr(d.pd, 1).cast(),
            libc::EOPNOTSUPP,
            "ibv_import_mr",
        );
        set_errno(0);
        null_with(ibv_import_dm(d.ctx, 1), libc::EOPNOTSUPP, "ibv_import_dm");
        // rdma-core's dummy unimport does nothing: the PD stays usable.
        ibv_unimport_pd(d.pd);
        let cq = ibv_create_cq(d.ctx, 4, ptr::null_mut(), ptr::null_mut(), 0);
        assert!(!cq.is_null());

        // ibv_import_device: a descriptor that is not a character device is EINVAL; a
        // character device that is no device of the list is ENODEV.
        let mut fds = [0; 2];
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        set_errno(0);
        null_with(
            ibv_import_device(fds[0]).cast(),
            libc::EINVAL,
            "import (pipe)",
        );
        libc::close(fds[0]);
        libc::close(fds[1]);
        set_errno(0);
        null_with(ibv_import_device(-1).cast(), libc::EINVAL, "import (-1)");
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        assert!(null >= 0);
        set_errno(0);
        null_with(
            ibv_import_device(null).cast(),
            libc::ENODEV,
            "import (/dev/null)",
        );
        libc::close(null);
        // The context's cmd_fd is a valid descriptor (close-on-exec) that a program may
        // duplicate, as rdma-core's test_shared_pd does before importing it; importing
        // it or a duplicate is EOPNOTSUPP (rdma-core: the device found, its provider
        // without import_context); writing commands to it is refused.
        let cmd = (*d.ctx).cmd_fd;
        assert!(cmd >= 0, "cmd_fd {cmd}");
        assert_eq!(
            libc::fcntl(cmd, libc::F_GETFD) & libc::FD_CLOEXEC,
            libc::FD_CLOEXEC
        );
        let dup = libc::dup(cmd);
        assert!(dup >= 0);
        set_errno(0);
        null_with(
            ibv_import_device(cmd).cast(),
            libc::EOPNOTSUPP,
            "import (cmd_fd)",
        );
        set_errno(0);
        null_with(
            ibv_import_device(dup).cast(),
            libc::EOPNOTSUPP,
            "import (a duplicate of cmd_fd)",
        );
        assert_eq!(libc::write(dup, b"x".as_ptr().cast(), 1), -1);
        assert_eq!(*libc::__errno_location(), libc::EPERM);
        libc::close(dup);

        // ibv_query_qp_data_in_order: 0 ("not known to be in order"), with or without
        // IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS.
        let mut init = qp_init(cq, QPT_RC);
        let qp = ibv_create_qp(d.pd, &mut init);
        assert!(!qp.is_null());
        // IBV_WR_RDMA_WRITE = 0, IBV_WR_SEND = 2.
        assert_eq!(ibv_query_qp_data_in_order(qp, 0, 0), 0);
        assert_eq!(ibv_query_qp_data_in_order(qp, 2, 1), 0);
        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
    }
}

#[test]
fn ioctl_final_num_attrs_counts_the_linked_buffers() {
    /// A command buffer with room for 4 attributes.
    #[repr(C)]
    struct Buf {
        b: abi::ibv_command_buffer,
        room: [abi::ib_uverbs_attr; 4],
    }
    fn buf(used: usize, next: *const abi::ibv_command_buffer) -> Box<Buf> {
        // SAFETY: all-zero is a valid `Buf` (pointers NULL, integers 0).
        let mut b: Box<Buf> = Box::new(unsafe { std::mem::zeroed() });
        let attrs = b.room.as_ptr();
        b.b.next = next;
        // SAFETY: within `room` (used <= 4).
        b.b.next_attr = unsafe { attrs.add(used) };
        b
    }
    let last = buf(3, ptr::null());
    let first = buf(2, &last.b);
    // SAFETY: a valid chain of two command buffers.
    unsafe {
        assert_eq!(__ioctl_final_num_attrs(1, ptr::null()), 1);
        assert_eq!(__ioctl_final_num_attrs(1, &last.b), 4);
        assert_eq!(__ioctl_final_num_attrs(1, &first.b), 6);
    }
}

#[test]
fn ibverbs_1_0_device_list_through_the_compat_versions() {
    let d = dev();
    let lib = support::built_library();
    let path = std::ffi::CString::new(lib.to_str().unwrap()).unwrap();
    type List10 = unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void;
    type Free10 = unsafe extern "C" fn(*mut *mut c_void);
    type Name10 = unsafe extern "C" fn(*mut c_void) -> *const c_char;
    type Guid10 = unsafe extern "C" fn(*mut c_void) -> u64;
    type Open10 = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
    // SAFETY: dlopen of the built library (a second, private copy: RTLD_LOCAL), its
    // IBVERBS_1.0 functions looked up by version as the loader binds them and called
    // with the types rdma-core's compat-1_0.c gives them.
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!h.is_null(), "dlopen {}", lib.display());
        let sym = |name: &CStr, node: &CStr| {
            let p = libc::dlvsym(h, name.as_ptr(), node.as_ptr());
            assert!(!p.is_null(), "{name:?}@{node:?} not found");
            p
        };
        let v10 = c"IBVERBS_1.0";
        let list: List10 = std::mem::transmute(sym(c"ibv_get_device_list", v10));
        let free: Free10 = std::mem::transmute(sym(c"ibv_free_device_list", v10));
        let name: Name10 = std::mem::transmute(sym(c"ibv_get_device_name", v10));
        let guid: Guid10 = std::mem::transmute(sym(c"ibv_get_device_guid", v10));
        let open: Open10 = std::mem::transmute(sym(c"ibv_open_device", v10));
        // The 1.0 and the default versions are different functions.
        assert_ne!(
            sym(c"ibv_get_device_list", v10),
            sym(c"ibv_get_device_list", c"IBVERBS_1.1")
        );

        let mut n = -1;
        let l = list(&mut n);
        assert!(!l.is_null());
        assert_eq!(n, 1);
        assert!((*l.add(1)).is_null(), "NULL-terminated");
        let dev10 = *l;
        // The wrapper holds the real device at its third word.
        let real = *(dev10 as *const *mut abi::ibv_device).add(2);
        assert!(!real.is_null());
        assert_eq!(
            CStr::from_ptr(name(dev10)),
            CStr::from_ptr((*real).name.as_ptr())
        );
        assert_eq!(guid(dev10), ibv_get_device_guid((*d.ctx).device));
        assert_ne!(guid(dev10), 0);
        // A 1.0 context is not offered.
        set_errno(0);
        null_with(open(dev10), libc::EOPNOTSUPP, "ibv_open_device@IBVERBS_1.0");
        free(l);
        libc::dlclose(h);
    }
}

type PostRecv = unsafe extern "C" fn(
    *mut abi::ibv_qp,
    *mut abi::ibv_recv_wr,
    *mut *mut abi::ibv_recv_wr,
) -> c_int;
type ReqNotify = unsafe extern "C" fn(*mut abi::ibv_cq, c_int) -> c_int;
type PollCq = unsafe extern "C" fn(*mut abi::ibv_cq, c_int, *mut abi::ibv_wc) -> c_int;

#[test]
fn get_cq_event_on_a_non_blocking_channel_answers_eagain() {
    let d = dev();
    let _g = link_lock();
    // SAFETY: the verbs API used as its contract says; the ops are the context's.
    unsafe {
        let ops = (*d.ctx).ops;
        let post_recv: PostRecv = std::mem::transmute(ops[abi::ops::POST_RECV]);
        let req_notify: ReqNotify = std::mem::transmute(ops[abi::ops::REQ_NOTIFY_CQ]);
        let poll_cq: PollCq = std::mem::transmute(ops[abi::ops::POLL_CQ]);
        let ch = ibv_create_comp_channel(d.ctx);
        assert!(!ch.is_null());
        let fd = (*ch).fd;
        let cq = ibv_create_cq(d.ctx, 8, 0x5eed as *mut c_void, ch.cast(), 0);
        assert!(!cq.is_null());
        set_nonblocking(fd);
        // Nothing queued: -1 with EAGAIN at once, and the descriptor is not readable.
        let (mut got_cq, mut got_ctx) = (ptr::null_mut(), ptr::null_mut());
        set_errno(0);
        assert_eq!(ibv_get_cq_event(ch, &mut got_cq, &mut got_ctx), -1);
        assert_eq!(errno(), libc::EAGAIN);
        assert!(!readable(fd, 0));

        // A completion on the armed CQ: a receive flushed by moving its QP to ERR.
        let mut init = qp_init(cq, QPT_RC);
        let qp = ibv_create_qp(d.pd, &mut init);
        assert!(!qp.is_null());
        let mut a = abi::ibv_qp_attr {
            qp_state: 1,
            port_num: 1,
            qp_access_flags: 1,
            ..Default::default()
        };
        // IBV_QP_STATE | PKEY_INDEX | PORT | ACCESS_FLAGS
        assert_eq!(ibv_modify_qp(qp, &mut a, 0x39), 0);
        let mut buf = [0u8; 64];
        let mut sge = abi::ibv_sge {
            addr: buf.as_mut_ptr() as u64,
            length: 0,
            lkey: 0,
        };
        let mut wr = abi::ibv_recv_wr {
            wr_id: 77,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 0,
        };
        let mut bad = ptr::null_mut();
        assert_eq!(post_recv(qp, &mut wr, &mut bad), 0);
        assert_eq!(req_notify(cq, 0), 0);
        let mut a = abi::ibv_qp_attr {
            qp_state: 6,
            ..Default::default()
        };
        assert_eq!(ibv_modify_qp(qp, &mut a, 1), 0);
        assert!(
            readable(fd, 10_000),
            "the channel's descriptor never became readable"
        );
        assert_eq!(ibv_get_cq_event(ch, &mut got_cq, &mut got_ctx), 0);
        assert_eq!(got_cq, cq);
        assert_eq!(got_ctx, 0x5eed as *mut c_void);
        ibv_ack_cq_events(cq, 1);
        // The one event taken: EAGAIN again, not readable.
        set_errno(0);
        assert_eq!(ibv_get_cq_event(ch, &mut got_cq, &mut got_ctx), -1);
        assert_eq!(errno(), libc::EAGAIN);
        assert!(!readable(fd, 0));
        let mut wc = [abi::ibv_wc::default(); 4];
        assert_eq!(poll_cq(cq, 4, wc.as_mut_ptr()), 1);
        assert_eq!(wc[0].wr_id, 77);
        assert_eq!(wc[0].status, 5, "IBV_WC_WR_FLUSH_ERR");
        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
    }
}

#[test]
fn get_async_event_on_a_non_blocking_descriptor_answers_eagain() {
    let d = dev();
    let _g = link_lock();
    let sim = ibverbs::device::nic()
        .unwrap()
        .sim
        .as_ref()
        .expect("a simulated NIC");
    // SAFETY: the verbs API used as its contract says.
    unsafe {
        let fd = (*d.ctx).async_fd;
        set_nonblocking(fd);
        let mut ev = abi::ibv_async_event {
            element: ptr::null_mut(),
            event_type: 0,
        };
        // Whatever bring-up (and the other tests of this process, which share the
        // device) queued, then nothing: EAGAIN, and the descriptor no longer
        // readable. The async EQ's vector also signals command completions, so the
        // other tests' commands can make it readable again for a moment (a spurious
        // wake-up: the next call drains it and answers EAGAIN); a quiet moment must
        // come within a bounded number of tries.
        // Takes every queued event, then waits for that quiet moment: whether one came.
        let settle = |ev: &mut abi::ibv_async_event| {
            let mut n = 0;
            for _ in 0..1000 {
                while ibv_get_async_event(d.ctx, ev) == 0 {
                    ibv_ack_async_event(ev);
                    n += 1;
                    assert!(n < 256, "events without end");
                }
                assert_eq!(errno(), libc::EAGAIN);
                if !readable(fd, 0) {
                    return true;
                }
                std::thread::yield_now();
            }
            false
        };
        assert!(
            settle(&mut ev),
            "async_fd stays readable with no event queued"
        );

        // Link down and up: two port events; the descriptor is readable until both
        // are taken.
        assert!(sim.set_link(1, false));
        assert!(sim.set_link(1, true));
        let mut got = vec![];
        for _ in 0..2 {
            assert!(
                readable(fd, 10_000),
                "async_fd not readable with events queued"
            );
            assert_eq!(ibv_get_async_event(d.ctx, &mut ev), 0);
            got.push((ev.event_type, ev.element as usize));
            ibv_ack_async_event(&mut ev);
        }
        // IBV_EVENT_PORT_ERR, IBV_EVENT_PORT_ACTIVE, element.port_num 1.
        assert_eq!(got, vec![(10, 1), (9, 1)]);
        set_errno(0);
        assert_eq!(ibv_get_async_event(d.ctx, &mut ev), -1);
        assert_eq!(errno(), libc::EAGAIN);
        // Not readable once quiet (the other tests' commands may wake it for a moment).
        assert!(
            settle(&mut ev),
            "async_fd stays readable with no event queued"
        );
    }
}

#[test]
fn create_cq_refuses_too_many_entries_and_a_missing_vector_with_einval() {
    let d = dev();
    // SAFETY: the verbs API used as its contract says.
    unsafe {
        let mut attr: abi::ibv_device_attr = std::mem::zeroed();
        assert_eq!(ibv_query_device(d.ctx, &mut attr), 0);
        let max = attr.max_cqe;
        assert!(max > 0);
        set_errno(0);
        let cq = ibv_create_cq(d.ctx, max + 1, ptr::null_mut(), ptr::null_mut(), 0);
        null_with(cq.cast(), libc::EINVAL, "max_cqe + 1 entries");
        assert_eq!((*d.ctx).num_comp_vectors, 1);
        for v in [1, 7, -1] {
            set_errno(0);
            let cq = ibv_create_cq(d.ctx, 8, ptr::null_mut(), ptr::null_mut(), v);
            null_with(cq.cast(), libc::EINVAL, &format!("completion vector {v}"));
        }
        let cq = ibv_create_cq(d.ctx, 8, ptr::null_mut(), ptr::null_mut(), 0);
        assert!(!cq.is_null(), "vector 0 of 1");
        assert_eq!(ibv_destroy_cq(cq), 0);
    }
}

#[test]
fn query_qp_reports_the_q_key_of_a_ud_qp() {
    let d = dev();
    // SAFETY: the verbs API used as its contract says.
    unsafe {
        let cq = ibv_create_cq(d.ctx, 8, ptr::null_mut(), ptr::null_mut(), 0);
        assert!(!cq.is_null());
        let mut init = qp_init(cq, QPT_UD);
        let qp = ibv_create_qp(d.pd, &mut init);
        assert!(!qp.is_null());
        let mut a = abi::ibv_qp_attr {
            qp_state: 1,
            port_num: 1,
            qkey: 0x1234_5678,
            ..Default::default()
        };
        // IBV_QP_STATE | PKEY_INDEX | PORT | QKEY
        assert_eq!(ibv_modify_qp(qp, &mut a, 0x71), 0);
        let mut q = abi::ibv_qp_attr::default();
        let mut qi: abi::ibv_qp_init_attr = std::mem::zeroed();
        assert_eq!(ibv_query_qp(qp, &mut q, 0x40 | 1, &mut qi), 0);
        assert_eq!(q.qp_state, 1);
        assert_eq!(q.qkey, 0x1234_5678);
        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
    }
}

#[test]
fn fork_support_is_reported_unneeded() {
    // SAFETY: plain calls without arguments.
    unsafe {
        assert_eq!(ibv_fork_init(), 0);
        // IBV_FORK_UNNEEDED, as rdma-core reports on a kernel that copies pinned pages.
        assert_eq!(ibv_is_fork_initialized(), 2);
    }
}

/// A QP of `d` on `cq` in INIT holding receives `ids` (no SGE), then moved to ERR:
/// the receives are flushed, one completion each on `cq` (status WR_FLUSH_ERR), all
/// written before `ibv_modify_qp` returns. Returns the QP.
///
/// # Safety
///
/// `cq` is a live CQ of `d`'s context.
unsafe fn flushed_receives(
    d: &Dev,
    cq: *mut abi::ibv_cq,
    ids: std::ops::Range<u64>,
) -> *mut abi::ibv_qp {
    let mut init = qp_init(cq, QPT_RC);
    init.cap.max_recv_wr = 32;
    // SAFETY: the verbs API used as its contract says; the ops are the context's.
    unsafe {
        let post_recv: PostRecv = std::mem::transmute((*d.ctx).ops[abi::ops::POST_RECV]);
        let qp = ibv_create_qp(d.pd, &mut init);
        assert!(!qp.is_null());
        let mut a = abi::ibv_qp_attr {
            qp_state: 1,
            port_num: 1,
            qp_access_flags: 1,
            ..Default::default()
        };
        // IBV_QP_STATE | PKEY_INDEX | PORT | ACCESS_FLAGS
        assert_eq!(ibv_modify_qp(qp, &mut a, 0x39), 0);
        for id in ids {
            let mut wr = abi::ibv_recv_wr {
                wr_id: id,
                next: ptr::null_mut(),
                sg_list: ptr::null_mut(),
                num_sge: 0,
            };
            let mut bad = ptr::null_mut();
            assert_eq!(post_recv(qp, &mut wr, &mut bad), 0);
        }
        let mut a = abi::ibv_qp_attr {
            qp_state: 6,
            ..Default::default()
        };
        assert_eq!(ibv_modify_qp(qp, &mut a, 1), 0);
        qp
    }
}

#[test]
fn resize_cq_keeps_unpolled_completions_and_answers_as_libmlx5() {
    let d = dev();
    let _g = link_lock();
    // SAFETY: the verbs API used as its contract says; the ops are the context's.
    unsafe {
        let poll_cq: PollCq = std::mem::transmute((*d.ctx).ops[abi::ops::POLL_CQ]);
        let mut attr: abi::ibv_device_attr = std::mem::zeroed();
        assert_eq!(ibv_query_device(d.ctx, &mut attr), 0);
        let cq = ibv_create_cq(d.ctx, 3, ptr::null_mut(), ptr::null_mut(), 0);
        assert!(!cq.is_null());
        assert_eq!((*cq).cqe, 3);
        let a = flushed_receives(d, cq, 0..3);
        // Three completions waiting: a ring of 2 cannot take them; sizes out of range.
        for bad in [1, 0, -1, attr.max_cqe + 1, i32::MAX / 32] {
            set_errno(0);
            assert_eq!(ibv_resize_cq(cq, bad), libc::EINVAL, "resize to {bad}");
            assert_eq!(errno(), libc::EINVAL, "errno of resize to {bad}");
            assert_eq!((*cq).cqe, 3, "a refused resize keeps the size");
        }
        // The ring it has: nothing to do.
        assert_eq!(ibv_resize_cq(cq, 2), 0);
        assert_eq!((*cq).cqe, 3);
        let mut wc = [abi::ibv_wc::default(); 64];
        assert_eq!(poll_cq(cq, 1, wc.as_mut_ptr()), 1);
        assert_eq!(wc[0].wr_id, 0);
        // Grow with two waiting; 20 more arrive in the new ring.
        assert_eq!(ibv_resize_cq(cq, 20), 0);
        assert_eq!((*cq).cqe, 31, "rounded up as libmlx5 reports it");
        let b = flushed_receives(d, cq, 100..120);
        // 22 waiting: a ring of 16 is too small, one of 64 holds them.
        assert_eq!(ibv_resize_cq(cq, 15), libc::EINVAL);
        assert_eq!((*cq).cqe, 31);
        assert_eq!(ibv_resize_cq(cq, 40), 0);
        assert_eq!((*cq).cqe, 63);
        // Shrink back with 22 waiting (a ring of 32).
        assert_eq!(ibv_resize_cq(cq, 22), 0);
        assert_eq!((*cq).cqe, 31);
        let n = poll_cq(cq, 64, wc.as_mut_ptr());
        assert_eq!(n, 22, "every completion once");
        let want: Vec<(u64, u32)> = (1..3)
            .map(|i| (i, (*a).qp_num))
            .chain((100..120).map(|i| (i, (*b).qp_num)))
            .collect();
        let got: Vec<(u64, u32)> = wc[..22].iter().map(|w| (w.wr_id, w.qp_num)).collect();
        assert_eq!(got, want, "in order");
        assert!(
            wc[..22].iter().all(|w| w.status == 5),
            "IBV_WC_WR_FLUSH_ERR"
        );
        assert_eq!(poll_cq(cq, 64, wc.as_mut_ptr()), 0);
        assert_eq!(ibv_destroy_qp(a), 0);
        assert_eq!(ibv_destroy_qp(b), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
    }
}

#[test]
fn resize_cq_waits_for_a_concurrent_poller() {
    let d = dev();
    let _g = link_lock();
    struct P(*mut abi::ibv_cq);
    // SAFETY: the library's CQ verbs may be called from any thread.
    unsafe impl Send for P {}
    // SAFETY: the verbs API used as its contract says; the ops are the context's.
    unsafe {
        let poll_cq: PollCq = std::mem::transmute((*d.ctx).ops[abi::ops::POLL_CQ]);
        let cq = ibv_create_cq(d.ctx, 31, ptr::null_mut(), ptr::null_mut(), 0);
        assert!(!cq.is_null());
        // One thread resizes back and forth (never below 32 entries, room for a
        // batch) while this one polls 10 batches of 20 flushed receives: each
        // completion exactly once, in order.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let count = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let resizer = {
            let (stop, count, p) = (
                std::sync::Arc::clone(&stop),
                std::sync::Arc::clone(&count),
                P(cq),
            );
            std::thread::spawn(move || {
                let p = p;
                let mut k = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    k += 1;
                    let size = [63, 200, 31][k as usize % 3];
                    assert_eq!(ibv_resize_cq(p.0, size), 0);
                    count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                k
            })
        };
        let mut qps = Vec::new();
        let mut wc = [abi::ibv_wc::default(); 8];
        for batch in 0..10u64 {
            let ids = batch * 20..batch * 20 + 20;
            let qp = flushed_receives(d, cq, ids.clone());
            let mut next = ids.start;
            let t0 = std::time::Instant::now();
            while next < ids.end {
                assert!(t0.elapsed().as_secs() < 30, "completions lost");
                let n = poll_cq(cq, 8, wc.as_mut_ptr());
                assert!(n >= 0);
                for w in &wc[..n as usize] {
                    assert_eq!((w.wr_id, w.qp_num, w.status), (next, (*qp).qp_num, 5));
                    next += 1;
                }
            }
            qps.push(qp);
        }
        // On a loaded machine the resizer may not have run yet: it must have resized
        // at least once (bounded wait) for the test to show anything.
        let t0 = std::time::Instant::now();
        while count.load(std::sync::atomic::Ordering::Relaxed) == 0 && t0.elapsed().as_secs() < 30 {
            std::thread::yield_now();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let resized = resizer.join().unwrap();
        assert!(resized > 0, "no resize happened");
        assert_eq!(poll_cq(cq, 8, wc.as_mut_ptr()), 0);
        for qp in qps {
            assert_eq!(ibv_destroy_qp(qp), 0);
        }
        assert_eq!(ibv_destroy_cq(cq), 0);
    }
}

#[test]
fn rereg_mr_keeps_the_keys_in_place_and_renews_them_for_a_new_translation() {
    // IBV_REREG_MR_CHANGE_TRANSLATION, _PD, _ACCESS; IBV_ACCESS_LOCAL_WRITE,
    // _REMOTE_WRITE, _REMOTE_ATOMIC; IBV_REREG_MR_ERR_INPUT.
    const TRANS: c_int = 1;
    const PD: c_int = 2;
    const ACCESS: c_int = 4;
    const LW: c_int = 1;
    const RW: c_int = 2;
    const ATOMIC: c_int = 8;
    const ERR_INPUT: c_int = -1;
    let d = dev();
    let mut a = vec![0u8; 8192];
    let mut b = vec![0u8; 4096];
    // SAFETY: the verbs API used as its contract says; the buffers outlive the MR.
    unsafe {
        let pd2 = ibv_alloc_pd(d.ctx);
        assert!(!pd2.is_null());
        let mr = ibv_reg_mr(d.pd, a.as_mut_ptr() as *mut c_void, a.len(), LW);
        assert!(!mr.is_null());
        let key = (*mr).lkey;
        assert_eq!((*mr).rkey, key);
        // libibverbs's input checks: unknown flags, access without its flag, a
        // translation without an address.
        for (flags, addr, acc) in [
            (8, ptr::null_mut(), 0),
            (PD, ptr::null_mut(), LW),
            (TRANS, ptr::null_mut(), 0),
        ] {
            set_errno(0);
            let r = ibv_rereg_mr(mr, flags, d.pd, addr, 4096, acc);
            assert_eq!((r, errno()), (ERR_INPUT, libc::EINVAL), "flags {flags}");
        }
        // The kernel's checks: no flag, no PD to move to.
        const ERR_CMD: c_int = -4;
        for (flags, pd) in [(0, d.pd), (PD, ptr::null_mut())] {
            set_errno(0);
            let r = ibv_rereg_mr(mr, flags, pd, ptr::null_mut(), 0, 0);
            assert_eq!((r, errno()), (ERR_CMD, libc::EINVAL), "flags {flags}");
        }
        assert_eq!(((*mr).lkey, (*mr).pd), (key, d.pd));
        // Access and PD changed in place: the keys stay, the PD moves.
        assert_eq!(
            ibv_rereg_mr(mr, ACCESS, ptr::null_mut(), ptr::null_mut(), 0, LW | RW),
            0
        );
        assert_eq!(((*mr).lkey, (*mr).rkey), (key, key));
        assert_eq!(ibv_rereg_mr(mr, PD, pd2, ptr::null_mut(), 0, 0), 0);
        assert_eq!(((*mr).lkey, (*mr).pd), (key, pd2));
        // The region holds the new PD, no longer the old one.
        set_errno(0);
        assert_eq!(ibv_dealloc_pd(pd2), libc::EBUSY);
        assert_eq!(ibv_rereg_mr(mr, PD, d.pd, ptr::null_mut(), 0, 0), 0);
        assert_eq!((*mr).pd, d.pd);
        // Remote atomic is no UMR change: a new registration, new keys.
        assert_eq!(
            ibv_rereg_mr(mr, ACCESS, ptr::null_mut(), ptr::null_mut(), 0, LW | ATOMIC),
            0
        );
        let key2 = (*mr).lkey;
        assert_ne!(key2, key);
        assert_eq!(
            ((*mr).rkey, (*mr).addr, (*mr).length),
            (key2, a.as_mut_ptr() as *mut c_void, a.len())
        );
        // A new translation: new keys, the new range.
        let baddr = b.as_mut_ptr() as *mut c_void;
        assert_eq!(
            ibv_rereg_mr(mr, TRANS, ptr::null_mut(), baddr, b.len(), 0),
            0
        );
        assert_ne!((*mr).lkey, key2);
        assert_eq!(((*mr).addr, (*mr).length), (baddr, b.len()));
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_dealloc_pd(pd2), 0);
    }
}

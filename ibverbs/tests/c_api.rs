//! Verbs of the library called in process through its exported C symbols, as a C
//! program calls them, where the answer must be rdma-core's: the entry points of
//! features this library does not offer (import, dma-buf registration, the data-order
//! query) answer as rdma-core does for a provider without the op; the IBVERBS_1.0
//! compatibility versions (reached with `dlvsym`, as a program linked against them
//! binds) list the device. All tests share one simulated NIC (host 84 of this process's
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

        // ibv_query_qp_data_in_order: 0 ("not known to be in order"), with or without
        // IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS.
        let mut init = abi::ibv_qp_init_attr {
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
            qp_type: 2,
            sq_sig_all: 0,
        };
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

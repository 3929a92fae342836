//! Connecting an RC QP of the library to another QP of the same NIC (loopback), as
//! the C API tests do it, and the entry points and `ops` types those tests share
//! (each test uses some of them).
#![allow(dead_code)]

use std::ffi::{c_int, c_void};
use std::time::{Duration, Instant};

use ibverbs::abi;

pub mod send_pair;

extern "C" {
    pub fn ibv_get_device_list(num: *mut c_int) -> *mut *mut abi::ibv_device;
    pub fn ibv_open_device(dev: *mut abi::ibv_device) -> *mut abi::ibv_context;
    pub fn ibv_alloc_pd(ctx: *mut abi::ibv_context) -> *mut abi::ibv_pd;
    pub fn ibv_reg_mr(
        pd: *mut abi::ibv_pd,
        addr: *mut c_void,
        len: usize,
        acc: c_int,
    ) -> *mut abi::ibv_mr;
    pub fn ibv_create_cq(
        ctx: *mut abi::ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        ch: *mut c_void,
        vec: c_int,
    ) -> *mut abi::ibv_cq;
    pub fn ibv_create_qp(
        pd: *mut abi::ibv_pd,
        init: *mut abi::ibv_qp_init_attr,
    ) -> *mut abi::ibv_qp;
    pub fn ibv_destroy_qp(qp: *mut abi::ibv_qp) -> c_int;
    fn ibv_modify_qp(qp: *mut abi::ibv_qp, attr: *mut abi::ibv_qp_attr, mask: c_int) -> c_int;
}

/// Opens the library's only device (`FERROVERBS_DEVICE` names one simulated NIC).
///
/// # Safety
///
/// The library was loaded with its device set.
pub unsafe fn open_only_device() -> *mut abi::ibv_context {
    let mut n = 0;
    // SAFETY: the verbs API used as its contract says.
    unsafe {
        let list = ibv_get_device_list(&mut n);
        assert_eq!(n, 1);
        let ctx = ibv_open_device(*list);
        assert!(!ctx.is_null());
        ctx
    }
}

/// What a C-ABI test starts from: the only device opened, the data-path entries of
/// its `ops` every test calls, a PD, and a zeroed buffer registered in it.
pub struct Opened {
    pub ctx: *mut abi::ibv_context,
    pub post_send: PostSend,
    pub poll_cq: PollCq,
    pub pd: *mut abi::ibv_pd,
    pub buf: Vec<u8>,
    pub base: u64,
    pub lkey: u32,
    pub rkey: u32,
}

impl Opened {
    /// Entry `index` of the context's `ops` (`abi::ops::*`) as the function type `F`.
    ///
    /// # Safety
    ///
    /// `F` is the C type of that entry.
    pub unsafe fn op<F: Copy>(&self, index: usize) -> F {
        // SAFETY: the context is live; the entry is a function of type `F` (the
        // caller's promise), a pointer-sized value.
        unsafe { std::mem::transmute_copy(&(*self.ctx).ops[index]) }
    }
}

/// Opens the only device ([`open_only_device`]), allocates a PD and registers a
/// zeroed buffer of `len` bytes with `access` (`ibv_access_flags`).
///
/// # Safety
///
/// As [`open_only_device`].
pub unsafe fn open_with_buffer(len: usize, access: c_int) -> Opened {
    // SAFETY: the verbs API used as its contract says (the caller's promise).
    unsafe {
        let ctx = open_only_device();
        let ops = (*ctx).ops;
        let post_send: PostSend = std::mem::transmute(ops[abi::ops::POST_SEND]);
        let poll_cq: PollCq = std::mem::transmute(ops[abi::ops::POLL_CQ]);
        let pd = ibv_alloc_pd(ctx);
        assert!(!pd.is_null());
        let mut buf = vec![0u8; len];
        let base = buf.as_mut_ptr() as u64;
        let mr = ibv_reg_mr(pd, buf.as_mut_ptr() as *mut c_void, buf.len(), access);
        assert!(!mr.is_null());
        let (lkey, rkey) = ((*mr).lkey, (*mr).rkey);
        Opened {
            ctx,
            post_send,
            poll_cq,
            pd,
            buf,
            base,
            lkey,
            rkey,
        }
    }
}

/// `ops.post_send` of a context.
pub type PostSend = unsafe extern "C" fn(
    *mut abi::ibv_qp,
    *mut abi::ibv_send_wr,
    *mut *mut abi::ibv_send_wr,
) -> c_int;
/// `ops.poll_cq` of a context.
pub type PollCq = unsafe extern "C" fn(*mut abi::ibv_cq, c_int, *mut abi::ibv_wc) -> c_int;

/// Polls `cq` through `poll` until one completion arrives (at most 120 s).
///
/// # Safety
///
/// `cq` is a live CQ of the library and `poll` its `ops.poll_cq`.
pub unsafe fn one(poll: PollCq, cq: *mut abi::ibv_cq) -> abi::ibv_wc {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        // SAFETY: an all-zero `ibv_wc` is valid (plain integers).
        let mut wc: abi::ibv_wc = unsafe { std::mem::zeroed() };
        // SAFETY: the caller's promise; `wc` has room for one.
        let got = unsafe { poll(cq, 1, &mut wc) };
        assert!(got >= 0);
        if got == 1 {
            return wc;
        }
        assert!(Instant::now() < deadline, "no completion in 120 s");
        std::thread::yield_now();
    }
}

/// RESET -> INIT -> RTR -> RTS towards `dest` on this NIC (loopback), with the
/// remote `access` flags (`IBV_ACCESS_*`) and `rd_atomic` READ/atomic requests
/// outstanding each way.
///
/// # Safety
///
/// `qp` is a live QP of the library.
pub unsafe fn connect(qp: *mut abi::ibv_qp, dest: u32, gid: [u8; 16], access: u32, rd_atomic: u8) {
    let mut a = abi::ibv_qp_attr {
        qp_state: 1,
        port_num: 1,
        qp_access_flags: access,
        ..Default::default()
    };
    // SAFETY: `qp` is live (the caller's promise); `a` is a valid attribute block.
    assert_eq!(unsafe { ibv_modify_qp(qp, &mut a, 0x39) }, 0);
    let mut a = abi::ibv_qp_attr {
        qp_state: 2,
        path_mtu: 3,
        dest_qp_num: dest,
        rq_psn: 0,
        max_dest_rd_atomic: rd_atomic,
        min_rnr_timer: 12,
        ..Default::default()
    };
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = gid;
    a.ah_attr.grh.hop_limit = 1;
    a.ah_attr.port_num = 1;
    // SAFETY: as above.
    assert_eq!(unsafe { ibv_modify_qp(qp, &mut a, 0x129181) }, 0);
    // The ACK timeout: 23 (34 s). The timer runs on real time while the NIC's device
    // thread may wait for a CPU; at 14 (the library raises it to 18, 1.07 s) eight
    // expiries in a row, 8.6 s without that thread, would fail a WR although the
    // loopback link lost nothing; were one of the tests' few one-packet requests
    // lost, its expiry would still come within the time the tests wait for them.
    let mut a = abi::ibv_qp_attr {
        qp_state: 3,
        timeout: 23,
        retry_cnt: 7,
        rnr_retry: 7,
        sq_psn: 0,
        max_rd_atomic: rd_atomic,
        ..Default::default()
    };
    // SAFETY: as above.
    assert_eq!(unsafe { ibv_modify_qp(qp, &mut a, 0x12e01) }, 0);
}

//! The extended verbs of the library called in process as a C program calls them
//! (the inline functions of `verbs.h` go through `verbs_context.create_qp_ex` /
//! `create_cq_ex`, the `ibv_qp_ex` and `ibv_cq_ex` function pointers and the
//! context's `alloc_mw` / `bind_mw` / `dealloc_mw` slots): two RC QPs of one
//! simulated NIC (host 85 of this process's loopback /24) connected to each other.
//! Checks the bytes each request moves, the completions `ibv_start_poll` /
//! `ibv_next_poll` give (`wr_id`, status, opcode, byte count, flags, immediate),
//! `ibv_wr_abort`, the errors kept until `ibv_wr_complete`, the creation flags
//! refused with EOPNOTSUPP, and memory windows of both types granting and losing
//! remote access.

use std::ffi::{c_int, c_uint, c_void};
use std::ptr;
use std::time::{Duration, Instant};

use ibverbs::abi;
use ibverbs::abi_ex::{self, c as cx};

#[path = "../../tests/common/net.rs"]
mod net;

mod loopback;
use loopback::{connect, open_only_device};

extern "C" {
    fn ibv_alloc_pd(ctx: *mut abi::ibv_context) -> *mut abi::ibv_pd;
    fn ibv_reg_mr(
        pd: *mut abi::ibv_pd,
        addr: *mut c_void,
        len: usize,
        acc: c_int,
    ) -> *mut abi::ibv_mr;
    fn ibv_qp_to_qp_ex(qp: *mut abi::ibv_qp) -> *mut abi_ex::ibv_qp_ex;
}

type CreateQpEx = unsafe extern "C" fn(
    *mut abi::ibv_context,
    *mut abi_ex::ibv_qp_init_attr_ex,
) -> *mut abi::ibv_qp;
type CreateCqEx = unsafe extern "C" fn(
    *mut abi::ibv_context,
    *mut abi_ex::ibv_cq_init_attr_ex,
) -> *mut abi_ex::ibv_cq_ex;
type PostRecv = unsafe extern "C" fn(
    *mut abi::ibv_qp,
    *mut abi::ibv_recv_wr,
    *mut *mut abi::ibv_recv_wr,
) -> c_int;
type PostSend = unsafe extern "C" fn(
    *mut abi::ibv_qp,
    *mut abi::ibv_send_wr,
    *mut *mut abi::ibv_send_wr,
) -> c_int;
type AllocMw = unsafe extern "C" fn(*mut abi::ibv_pd, c_uint) -> *mut abi_ex::ibv_mw;
type BindMw =
    unsafe extern "C" fn(*mut abi::ibv_qp, *mut abi_ex::ibv_mw, *mut abi_ex::ibv_mw_bind) -> c_int;
type PollCq = unsafe extern "C" fn(*mut abi::ibv_cq, c_int, *mut abi::ibv_wc) -> c_int;
type DeallocMw = unsafe extern "C" fn(*mut abi_ex::ibv_mw) -> c_int;

type Q = *mut abi_ex::ibv_qp_ex;
type Fn0 = unsafe extern "C" fn(Q);
type FnComplete = unsafe extern "C" fn(Q) -> c_int;
type FnRkey = unsafe extern "C" fn(Q, u32, u64);
type FnRkeyImm = unsafe extern "C" fn(Q, u32, u64, u32);
type FnCas = unsafe extern "C" fn(Q, u32, u64, u64, u64);
type FnFa = unsafe extern "C" fn(Q, u32, u64, u64);
type FnSge = unsafe extern "C" fn(Q, u32, u64, u32);
type FnSgeList = unsafe extern "C" fn(Q, usize, *const abi::ibv_sge);
type FnInline = unsafe extern "C" fn(Q, *mut c_void, usize);
type FnInlineList = unsafe extern "C" fn(Q, usize, *const abi_ex::ibv_data_buf);
type FnInv = unsafe extern "C" fn(Q, u32);
type FnBind = unsafe extern "C" fn(Q, *mut abi_ex::ibv_mw, u32, *const abi_ex::ibv_mw_bind_info);

type Cx = *mut abi_ex::ibv_cq_ex;
type FnStart = unsafe extern "C" fn(Cx, *mut abi_ex::ibv_poll_cq_attr) -> c_int;
type FnNext = unsafe extern "C" fn(Cx) -> c_int;
type FnEnd = unsafe extern "C" fn(Cx);
type FnRead32 = unsafe extern "C" fn(Cx) -> u32;
type FnRead64 = unsafe extern "C" fn(Cx) -> u64;

/// A completion as the readers give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Wc {
    wr_id: u64,
    status: u32,
    opcode: u32,
    byte_len: u32,
    flags: u32,
    imm: u32,
    qp_num: u32,
    /// `ibv_wc_read_completion_ts` (0 when the CQ has no reader for it).
    ts: u64,
}

/// Every completion the CQ gives within `limit` until `n` were seen.
///
/// # Safety
/// `cq` is a live CQ of the library.
unsafe fn poll(cq: Cx, n: usize, limit: Duration) -> Vec<Wc> {
    // SAFETY: the function pointers the library set in its own `ibv_cq_ex`.
    let (start, next, end, opcode, byte_len, flags, imm, qpn, ts) = unsafe {
        let start: FnStart = std::mem::transmute((*cq).start_poll);
        let next: FnNext = std::mem::transmute((*cq).next_poll);
        let end: FnEnd = std::mem::transmute((*cq).end_poll);
        let opcode: FnRead32 = std::mem::transmute((*cq).read_opcode);
        let byte_len: FnRead32 = std::mem::transmute((*cq).read_byte_len);
        let flags: FnRead32 = std::mem::transmute((*cq).read_wc_flags);
        let imm: FnRead32 = std::mem::transmute((*cq).read_imm_data);
        let qpn: FnRead32 = std::mem::transmute((*cq).read_qp_num);
        let ts: Option<FnRead64> = (!(*cq).read_completion_ts.is_null())
            .then(|| std::mem::transmute((*cq).read_completion_ts));
        (start, next, end, opcode, byte_len, flags, imm, qpn, ts)
    };
    let mut out = Vec::new();
    let deadline = Instant::now() + limit;
    // SAFETY: the CQ is live; the readers are called between start and end.
    unsafe {
        let read = |out: &mut Vec<Wc>| {
            out.push(Wc {
                wr_id: (*cq).wr_id,
                status: (*cq).status,
                opcode: opcode(cq),
                byte_len: byte_len(cq),
                flags: flags(cq),
                imm: imm(cq),
                qp_num: qpn(cq),
                ts: ts.map(|f| f(cq)).unwrap_or(0),
            })
        };
        while out.len() < n && Instant::now() < deadline {
            let mut attr = abi_ex::ibv_poll_cq_attr { comp_mask: 0 };
            match start(cq, &mut attr) {
                0 => {}
                libc::ENOENT => continue,
                e => panic!("start_poll: {e}"),
            }
            read(&mut out);
            while out.len() < n {
                match next(cq) {
                    0 => read(&mut out),
                    libc::ENOENT => break,
                    e => panic!("next_poll: {e}"),
                }
            }
            end(cq);
        }
    }
    out
}

const T: Duration = Duration::from_secs(120);
/// `IBV_WC_SEND`, `IBV_WC_RDMA_WRITE`, `IBV_WC_RDMA_READ`, `IBV_WC_COMP_SWAP`,
/// `IBV_WC_FETCH_ADD`, `IBV_WC_BIND_MW`, `IBV_WC_LOCAL_INV`, `IBV_WC_RECV`,
/// `IBV_WC_RECV_RDMA_WITH_IMM`.
const WC_SEND: u32 = 0;
const WC_WRITE: u32 = 1;
const WC_READ: u32 = 2;
const WC_CAS: u32 = 3;
const WC_FA: u32 = 4;
const WC_BIND: u32 = 5;
const WC_INV: u32 = 6;
const WC_RECV: u32 = 128;
const WC_RECV_IMM: u32 = 129;
/// `IBV_WC_REM_ACCESS_ERR`.
const REM_ACCESS_ERR: u32 = 10;
const SIGNALED: u32 = abi::c::IBV_SEND_SIGNALED;

#[test]
fn the_wr_and_cq_ex_interfaces_and_memory_windows_through_the_c_abi() {
    // SAFETY: set before the library reads it, in the only test of this process.
    unsafe { std::env::set_var("FERROVERBS_DEVICE", format!("sim:{}", net::host(85))) };
    let gid = ferroverbs_sim::link::udp::gid_for(net::host(85));
    // SAFETY: the verbs API used as its contract says; the buffers outlive the
    // requests that name them (the test waits for every completion).
    unsafe {
        let ctx = open_only_device();
        let vctx = (ctx as *mut u8).sub(std::mem::offset_of!(abi::verbs_context, context))
            as *mut abi::verbs_context;
        let create_qp_ex: CreateQpEx = std::mem::transmute((*vctx).ext[abi::vops::CREATE_QP_EX]);
        let create_cq_ex: CreateCqEx = std::mem::transmute((*vctx).ext[abi::vops::CREATE_CQ_EX]);
        let ops = (*ctx).ops;
        let post_recv: PostRecv = std::mem::transmute(ops[abi::ops::POST_RECV]);
        let post_send: PostSend = std::mem::transmute(ops[abi::ops::POST_SEND]);
        let alloc_mw: AllocMw = std::mem::transmute(ops[abi_ex::ops::ALLOC_MW]);
        let bind_mw: BindMw = std::mem::transmute(ops[abi_ex::ops::BIND_MW]);
        let dealloc_mw: DeallocMw = std::mem::transmute(ops[abi_ex::ops::DEALLOC_MW]);
        let pd = ibv_alloc_pd(ctx);
        assert!(!pd.is_null());
        // A: bytes 0..32 Ki; B: 32 Ki..64 Ki. Local write, remote write/read/atomic,
        // MW bind.
        let mut buf = vec![0u8; 64 * 1024];
        let base = buf.as_mut_ptr() as u64;
        let mr = ibv_reg_mr(pd, buf.as_mut_ptr() as *mut c_void, buf.len(), 0x1f);
        assert!(!mr.is_null());
        let (lkey, rkey) = ((*mr).lkey, (*mr).rkey);
        let b_at = |off: u64| base + 32 * 1024 + off;

        // CQ: the standard fields and the completion timestamp; wall-clock
        // timestamps (libmlx5 converts with the clock info page) are not offered.
        let mut ca = abi_ex::ibv_cq_init_attr_ex {
            cqe: 64,
            cq_context: ptr::null_mut(),
            channel: ptr::null_mut(),
            comp_vector: 0,
            wc_flags: cx::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
            comp_mask: 0,
            flags: 0,
            parent_domain: ptr::null_mut(),
        };
        *libc::__errno_location() = 0;
        assert!(create_cq_ex(ctx, &mut ca).is_null());
        assert_eq!(*libc::__errno_location(), libc::EOPNOTSUPP);
        ca.wc_flags = cx::IBV_WC_STANDARD_FLAGS | cx::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
        let cq = create_cq_ex(ctx, &mut ca);
        assert!(!cq.is_null());
        let icq = cq as *mut abi::ibv_cq;
        assert!((*cq).cq.cqe >= 64);

        let mut qa = abi_ex::ibv_qp_init_attr_ex {
            qp_context: ptr::null_mut(),
            send_cq: icq,
            recv_cq: icq,
            srq: ptr::null_mut(),
            cap: abi::ibv_qp_cap {
                max_send_wr: 16,
                max_recv_wr: 16,
                max_send_sge: 2,
                max_recv_sge: 2,
                max_inline_data: 64,
            },
            qp_type: abi::c::IBV_QPT_RC,
            sq_sig_all: 0,
            comp_mask: cx::IBV_QP_INIT_ATTR_PD | cx::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
            pd,
            xrcd: ptr::null_mut(),
            create_flags: 0,
            max_tso_header: 0,
            rwq_ind_tbl: ptr::null_mut(),
            rx_hash_conf: std::mem::zeroed(),
            source_qpn: 0,
            send_ops_flags: cx::IBV_QP_EX_WITH_TSO,
        };
        // Creation flags, as the kernel judges them (ib_uverbs_create_qp, mlx5_ib
        // process_create_flags): a bit uverbs does not know is EINVAL; a known flag
        // the device lacks (blocking multicast loopback: no multicast) EOPNOTSUPP;
        // flags 0 with IBV_QP_INIT_ATTR_CREATE_FLAGS are accepted (below).
        qa.comp_mask |= cx::IBV_QP_INIT_ATTR_CREATE_FLAGS;
        qa.send_ops_flags = cx::IBV_QP_EX_WITH_SEND;
        for (flags, want) in [(1 << 0, libc::EINVAL), (1 << 1, libc::EOPNOTSUPP)] {
            qa.create_flags = flags;
            *libc::__errno_location() = 0;
            assert!(
                create_qp_ex(ctx, &mut qa).is_null(),
                "create_flags {flags:#x}"
            );
            assert_eq!(*libc::__errno_location(), want, "create_flags {flags:#x}");
        }
        qa.create_flags = 0;
        qa.send_ops_flags = cx::IBV_QP_EX_WITH_TSO;
        // TSO is not an RC operation here (nor on mlx5): EOPNOTSUPP.
        *libc::__errno_location() = 0;
        assert!(create_qp_ex(ctx, &mut qa).is_null());
        assert_eq!(*libc::__errno_location(), libc::EOPNOTSUPP);
        qa.send_ops_flags = cx::IBV_QP_EX_WITH_SEND
            | cx::IBV_QP_EX_WITH_SEND_WITH_IMM
            | cx::IBV_QP_EX_WITH_RDMA_WRITE
            | cx::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
            | cx::IBV_QP_EX_WITH_RDMA_READ
            | cx::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
            | cx::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
            | cx::IBV_QP_EX_WITH_BIND_MW
            | cx::IBV_QP_EX_WITH_LOCAL_INV;
        let a = create_qp_ex(ctx, &mut qa);
        assert!(!a.is_null());
        assert!(qa.cap.max_inline_data >= 64 && qa.cap.max_send_sge >= 2);
        let b = create_qp_ex(ctx, &mut qa);
        assert!(!b.is_null());
        connect(a, (*b).qp_num, gid, 0xf, 4);
        connect(b, (*a).qp_num, gid, 0xf, 4);
        let xa = ibv_qp_to_qp_ex(a);
        let xb = ibv_qp_to_qp_ex(b);
        assert_eq!(xa as *mut abi::ibv_qp, a);
        let x = &*xa;
        let wr_start: Fn0 = std::mem::transmute(x.wr_start);
        let wr_complete: FnComplete = std::mem::transmute(x.wr_complete);
        let wr_abort: Fn0 = std::mem::transmute(x.wr_abort);
        let wr_send: Fn0 = std::mem::transmute(x.wr_send);
        let wr_write: FnRkey = std::mem::transmute(x.wr_rdma_write);
        let wr_write_imm: FnRkeyImm = std::mem::transmute(x.wr_rdma_write_imm);
        let wr_read: FnRkey = std::mem::transmute(x.wr_rdma_read);
        let wr_cas: FnCas = std::mem::transmute(x.wr_atomic_cmp_swp);
        let wr_fa: FnFa = std::mem::transmute(x.wr_atomic_fetch_add);
        let set_sge: FnSge = std::mem::transmute(x.wr_set_sge);
        let set_sge_list: FnSgeList = std::mem::transmute(x.wr_set_sge_list);
        let set_inline: FnInline = std::mem::transmute(x.wr_set_inline_data);
        let set_inline_list: FnInlineList = std::mem::transmute(x.wr_set_inline_data_list);
        let wr_bind: FnBind = std::mem::transmute(x.wr_bind_mw);
        let wr_inv: FnInv = std::mem::transmute(x.wr_local_inv);

        // B's receives: 64 bytes each at 32 Ki + 4 Ki * i.
        for i in 0..4u64 {
            let mut s = abi::ibv_sge {
                addr: b_at(4096 * i),
                length: 64,
                lkey,
            };
            let mut rw = abi::ibv_recv_wr {
                wr_id: 100 + i,
                next: ptr::null_mut(),
                sg_list: &mut s,
                num_sge: 1,
            };
            let mut bad = ptr::null_mut();
            assert_eq!(post_recv(b, &mut rw, &mut bad), 0);
        }

        // One batch: an inline WRITE of two parts, a SEND of a two-entry gather list,
        // an inline SEND, a WRITE with immediate; one doorbell at wr_complete.
        buf[0..8].copy_from_slice(b"gathered");
        buf[100..104].copy_from_slice(b" two");
        let (p1, p2) = (*b"inline ", *b"parts");
        let parts = [
            abi_ex::ibv_data_buf {
                addr: p1.as_ptr() as *mut c_void,
                length: 7,
            },
            abi_ex::ibv_data_buf {
                addr: p2.as_ptr() as *mut c_void,
                length: 5,
            },
        ];
        let sges = [
            abi::ibv_sge {
                addr: base,
                length: 8,
                lkey,
            },
            abi::ibv_sge {
                addr: base + 100,
                length: 4,
                lkey,
            },
        ];
        wr_start(xa);
        (*xa).wr_id = 1;
        (*xa).wr_flags = SIGNALED;
        wr_write(xa, rkey, b_at(20000));
        set_inline_list(xa, 2, parts.as_ptr());
        (*xa).wr_id = 2;
        wr_send(xa);
        set_sge_list(xa, 2, sges.as_ptr());
        (*xa).wr_id = 3;
        let mut hi = *b"hi!";
        wr_send(xa);
        set_inline(xa, hi.as_mut_ptr() as *mut c_void, 3);
        hi.copy_from_slice(b"XXX"); // copied at the setter
        (*xa).wr_id = 4;
        wr_write_imm(xa, rkey, b_at(21000), 0x1122_3344u32.to_be());
        set_sge(xa, lkey, base, 8);
        assert_eq!(wr_complete(xa), 0);
        let mut got = poll(cq, 7, T);
        // The CQE timestamps, in the order the device wrote the entries: the device
        // clock's counter, which only moves on.
        assert!(got[0].ts > 0, "{got:?}");
        assert!(got.windows(2).all(|w| w[0].ts <= w[1].ts), "{got:?}");
        let first_ts = got[6].ts;
        got.sort_by_key(|w| w.wr_id);
        let q = |w: &Wc| (w.wr_id, w.status, w.opcode);
        assert_eq!(
            got.iter().map(q).collect::<Vec<_>>(),
            [
                (1, 0, WC_WRITE),
                (2, 0, WC_SEND),
                (3, 0, WC_SEND),
                (4, 0, WC_WRITE),
                (100, 0, WC_RECV),
                (101, 0, WC_RECV),
                (102, 0, WC_RECV_IMM)
            ],
            "{got:?}"
        );
        let r = |id| got.iter().find(|w| w.wr_id == id).copied().unwrap();
        assert_eq!((r(100).byte_len, r(100).qp_num), (12, (*b).qp_num));
        assert_eq!(r(101).byte_len, 3);
        // IBV_WC_WITH_IMM, the immediate in network order.
        assert_eq!((r(102).flags & 2, r(102).imm), (2, 0x1122_3344u32.to_be()));
        assert_eq!(&buf[32 * 1024 + 20000..32 * 1024 + 20012], b"inline parts");
        assert_eq!(&buf[32 * 1024..32 * 1024 + 12], b"gathered two");
        assert_eq!(&buf[32 * 1024 + 4096..32 * 1024 + 4099], b"hi!");
        assert_eq!(&buf[32 * 1024 + 21000..32 * 1024 + 21008], b"gathered");

        // READ, compare-and-swap, fetch-and-add in one batch.
        buf[32 * 1024 + 24000..32 * 1024 + 24016].copy_from_slice(b"read me, please!");
        buf[32 * 1024 + 25000..32 * 1024 + 25008].copy_from_slice(&7u64.to_ne_bytes());
        buf[32 * 1024 + 25008..32 * 1024 + 25016].copy_from_slice(&40u64.to_ne_bytes());
        wr_start(xa);
        (*xa).wr_id = 5;
        wr_read(xa, rkey, b_at(24000));
        set_sge(xa, lkey, base + 1000, 16);
        (*xa).wr_id = 6;
        wr_cas(xa, rkey, b_at(25000), 7, 9);
        set_sge(xa, lkey, base + 2000, 8);
        (*xa).wr_id = 7;
        wr_fa(xa, rkey, b_at(25008), 2);
        set_sge(xa, lkey, base + 2008, 8);
        assert_eq!(wr_complete(xa), 0);
        let mut got = poll(cq, 3, T);
        // Later completions, later timestamps.
        assert!(got.iter().all(|w| w.ts > first_ts), "{first_ts} {got:?}");
        got.sort_by_key(|w| w.wr_id);
        assert_eq!(
            got.iter().map(q).collect::<Vec<_>>(),
            [(5, 0, WC_READ), (6, 0, WC_CAS), (7, 0, WC_FA)]
        );
        assert_eq!((got[0].byte_len, got[1].byte_len), (16, 8));
        assert_eq!(&buf[1000..1016], b"read me, please!");
        let u = |o: usize| u64::from_ne_bytes(buf[o..o + 8].try_into().unwrap());
        assert_eq!((u(2000), u(2008)), (7, 40));
        assert_eq!((u(32 * 1024 + 25000), u(32 * 1024 + 25008)), (9, 42));

        // wr_abort: nothing of the batch is sent.
        wr_start(xa);
        (*xa).wr_id = 8;
        wr_write(xa, rkey, b_at(26000));
        set_inline(xa, b"aborted".as_ptr() as *mut c_void, 7);
        wr_abort(xa);
        assert!(poll(cq, 1, Duration::from_millis(300)).is_empty());
        assert_eq!(&buf[32 * 1024 + 26000..32 * 1024 + 26007], &[0; 7]);
        // A setter without an operation fails the batch at wr_complete: EINVAL.
        wr_start(xa);
        set_sge(xa, lkey, base, 8);
        assert_eq!(wr_complete(xa), libc::EINVAL);

        // A type 1 window (ibv_bind_mw) over 4 KiB of B at 40 Ki, remote write.
        let mw1 = alloc_mw(pd, cx::IBV_MW_TYPE_1);
        assert!(!mw1.is_null());
        let k0 = (*mw1).rkey;
        let mut bind = abi_ex::ibv_mw_bind {
            wr_id: 9,
            send_flags: SIGNALED,
            bind_info: abi_ex::ibv_mw_bind_info {
                mr,
                addr: b_at(8192),
                length: 4096,
                mw_access_flags: 2,
            },
        };
        assert_eq!(bind_mw(b, mw1, &mut bind), 0);
        let k1 = (*mw1).rkey;
        assert_eq!(k1, (k0 & !0xff) | ((k0 + 1) & 0xff));
        assert_eq!(q(&poll(cq, 1, T)[0]), (9, 0, WC_BIND));
        wr_start(xa);
        (*xa).wr_id = 10;
        (*xa).wr_flags = SIGNALED;
        wr_write(xa, k1, b_at(8192 + 10));
        set_inline(xa, b"window one".as_ptr() as *mut c_void, 10);
        assert_eq!(wr_complete(xa), 0);
        assert_eq!(q(&poll(cq, 1, T)[0]), (10, 0, WC_WRITE));
        assert_eq!(&buf[40 * 1024 + 10..40 * 1024 + 20], b"window one");

        // A type 2 window bound with ibv_wr_bind_mw on B, invalidated with
        // ibv_post_send's IBV_WR_LOCAL_INV.
        let mw2 = alloc_mw(pd, cx::IBV_MW_TYPE_2);
        assert!(!mw2.is_null());
        let k2 = ((*mw2).rkey & !0xff) | (((*mw2).rkey + 1) & 0xff);
        let info = abi_ex::ibv_mw_bind_info {
            mr,
            addr: b_at(12288),
            length: 512,
            mw_access_flags: 2,
        };
        let xbr = &*xb;
        assert_eq!(xbr.wr_bind_mw, x.wr_bind_mw);
        wr_start(xb);
        (*xb).wr_id = 11;
        (*xb).wr_flags = SIGNALED;
        wr_bind(xb, mw2, k2, &info);
        assert_eq!(wr_complete(xb), 0);
        assert_eq!(q(&poll(cq, 1, T)[0]), (11, 0, WC_BIND));
        wr_start(xa);
        (*xa).wr_id = 12;
        wr_write(xa, k2, b_at(12288 + 500));
        set_inline(xa, b"type two".as_ptr() as *mut c_void, 8);
        assert_eq!(wr_complete(xa), 0);
        assert_eq!(q(&poll(cq, 1, T)[0]), (12, 0, WC_WRITE));
        assert_eq!(&buf[44 * 1024 + 500..44 * 1024 + 508], b"type two");
        // ibv_post_send's IBV_WR_LOCAL_INV of the type 2 window.
        let mut inv = abi::ibv_send_wr {
            wr_id: 13,
            next: ptr::null_mut(),
            sg_list: ptr::null_mut(),
            num_sge: 0,
            opcode: cx::IBV_WR_LOCAL_INV,
            send_flags: SIGNALED,
            imm_data: k2,
            wr: std::mem::zeroed(),
            remote_srqn: 0,
            bind_mw_tso: [0; 6],
        };
        let mut bad = ptr::null_mut();
        assert_eq!(post_send(b, &mut inv, &mut bad), 0);
        assert_eq!(q(&poll(cq, 1, T)[0]), (13, 0, WC_INV));
        // A third window bound with ibv_post_send's IBV_WR_BIND_MW, freed with
        // ibv_wr_local_inv.
        let mw3 = alloc_mw(pd, cx::IBV_MW_TYPE_2);
        assert!(!mw3.is_null());
        let k3 = ((*mw3).rkey & !0xff) | (((*mw3).rkey + 1) & 0xff);
        let bm = abi_ex::send_wr_bind_mw {
            mw: mw3,
            rkey: k3,
            bind_info: abi_ex::ibv_mw_bind_info {
                mr,
                addr: b_at(16384),
                length: 64,
                mw_access_flags: 2,
            },
        };
        let mut bw = abi::ibv_send_wr {
            wr_id: 16,
            opcode: cx::IBV_WR_BIND_MW,
            imm_data: 0,
            ..inv
        };
        std::ptr::write(
            bw.bind_mw_tso.as_mut_ptr() as *mut abi_ex::send_wr_bind_mw,
            bm,
        );
        assert_eq!(post_send(b, &mut bw, &mut bad), 0);
        assert_eq!(q(&poll(cq, 1, T)[0]), (16, 0, WC_BIND));
        wr_start(xa);
        (*xa).wr_id = 17;
        wr_write(xa, k3, b_at(16384 + 60));
        set_inline(xa, b"mw 3".as_ptr() as *mut c_void, 4);
        assert_eq!(wr_complete(xa), 0);
        assert_eq!(q(&poll(cq, 1, T)[0]), (17, 0, WC_WRITE));
        assert_eq!(&buf[48 * 1024 + 60..48 * 1024 + 64], b"mw 3");
        wr_start(xb);
        (*xb).wr_id = 18;
        (*xb).wr_flags = SIGNALED;
        wr_inv(xb, k3);
        assert_eq!(wr_complete(xb), 0);
        assert_eq!(q(&poll(cq, 1, T)[0]), (18, 0, WC_INV));

        // A SEND with Invalidate of a fourth window (ibv_wr_send_inv): B's completion
        // carries IBV_WC_WITH_INV and the key in host order, through the extended
        // readers and through ibv_poll_cq.
        let mw4 = alloc_mw(pd, cx::IBV_MW_TYPE_2);
        assert!(!mw4.is_null());
        let k4 = ((*mw4).rkey & !0xff) | (((*mw4).rkey + 1) & 0xff);
        let info4 = abi_ex::ibv_mw_bind_info {
            addr: b_at(20480),
            ..info
        };
        wr_start(xb);
        (*xb).wr_id = 19;
        wr_bind(xb, mw4, k4, &info4);
        assert_eq!(wr_complete(xb), 0);
        assert_eq!(q(&poll(cq, 1, T)[0]), (19, 0, WC_BIND));
        let wr_send_inv: FnInv = std::mem::transmute(x.wr_send_inv);
        for round in 0..2 {
            if round == 1 {
                // Bind again (the window is free after the first invalidation).
                wr_start(xb);
                (*xb).wr_id = 19;
                wr_bind(xb, mw4, k4, &info4);
                assert_eq!(wr_complete(xb), 0);
                assert_eq!(q(&poll(cq, 1, T)[0]), (19, 0, WC_BIND));
            }
            wr_start(xa);
            (*xa).wr_id = 20;
            wr_send_inv(xa, k4);
            set_inline(xa, b"bye".as_ptr() as *mut c_void, 3);
            assert_eq!(wr_complete(xa), 0);
            let mut got = Vec::new();
            if round == 0 {
                got = poll(cq, 2, T);
            } else {
                let poll_cq: PollCq = std::mem::transmute(ops[abi::ops::POLL_CQ]);
                let deadline = Instant::now() + T;
                let mut wc = [abi::ibv_wc::default(); 4];
                while got.len() < 2 && Instant::now() < deadline {
                    let n = poll_cq(icq, 4, wc.as_mut_ptr());
                    for w in &wc[..n.max(0) as usize] {
                        got.push(Wc {
                            wr_id: w.wr_id,
                            status: w.status,
                            opcode: w.opcode,
                            byte_len: w.byte_len,
                            flags: w.wc_flags,
                            imm: w.imm_data,
                            qp_num: w.qp_num,
                            ts: 0,
                        });
                    }
                }
            }
            got.sort_by_key(|w| w.wr_id);
            assert_eq!(got.len(), 2, "{got:?}");
            assert_eq!(q(&got[0]), (20, 0, WC_SEND));
            let r = got[1];
            // IBV_WC_WITH_INV (8).
            assert_eq!(
                (r.wr_id, r.opcode, r.byte_len, r.flags & 8, r.imm),
                (103 - round, WC_RECV, 3, 8, k4),
                "{r:?}"
            );
            if round == 0 {
                // One receive left for the second round.
                let mut s = abi::ibv_sge {
                    addr: b_at(4096 * 3 + 2048),
                    length: 64,
                    lkey,
                };
                let mut rw = abi::ibv_recv_wr {
                    wr_id: 102,
                    next: ptr::null_mut(),
                    sg_list: &mut s,
                    num_sge: 1,
                };
                let mut rbad = ptr::null_mut();
                assert_eq!(post_recv(b, &mut rw, &mut rbad), 0);
            }
        }
        assert_eq!(dealloc_mw(mw4), 0);

        // Through the invalidated window: a remote access error on A (B's QP may go
        // to the error state too, flushing its last receive).
        wr_start(xa);
        (*xa).wr_id = 15;
        wr_write(xa, k2, b_at(12288 + 100));
        set_inline(xa, b"late".as_ptr() as *mut c_void, 4);
        assert_eq!(wr_complete(xa), 0);
        let got = poll(cq, 2, Duration::from_secs(2));
        let e = got.iter().find(|w| w.wr_id == 15).copied();
        assert_eq!(e.map(|e| e.status), Some(REM_ACCESS_ERR), "{got:?}");
        assert_eq!(&buf[44 * 1024 + 100..44 * 1024 + 104], &[0; 4]);
        assert_eq!(dealloc_mw(mw1), 0);
        assert_eq!(dealloc_mw(mw2), 0);
        assert_eq!(dealloc_mw(mw3), 0);
    }
}

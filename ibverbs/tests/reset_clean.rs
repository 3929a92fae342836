//! `ibv_modify_qp` to RESET removes the QP's completions nobody polled from its CQs,
//! as libmlx5's `mlx5_modify_qp` does (`mlx5_cq_clean`), keeping those of the other
//! QPs of the CQ; the QP, connected again, completes only its new work (pyverbs'
//! `restate_qps` moves QPs in ERR to RESET without polling their flushed receives).
//! Called through the exported C symbols and the context's `ops`, as a C program
//! calls them. Four RC QPs of one simulated NIC (host 211 of this process's
//! loopback /24): A and D complete into one CQ, B and C into another; A↔B, D↔C.

use std::ffi::c_int;
use std::ptr;
use std::time::{Duration, Instant};

use ibverbs::abi;

#[path = "../../tests/common/net.rs"]
mod net;

mod loopback;
use loopback::*;

extern "C" {
    fn ibv_modify_qp(qp: *mut abi::ibv_qp, attr: *mut abi::ibv_qp_attr, mask: c_int) -> c_int;
}

type PostRecv = unsafe extern "C" fn(
    *mut abi::ibv_qp,
    *mut abi::ibv_recv_wr,
    *mut *mut abi::ibv_recv_wr,
) -> c_int;

const IBV_WR_SEND: u32 = 2;
const IBV_WC_SUCCESS: u32 = 0;
const IBV_WC_RECV: u32 = 128;
const IBV_QPS_RESET: u32 = 0;
const IBV_QPS_ERR: u32 = 6;
const IBV_QP_STATE: c_int = 1;

/// Moves `qp` to `state` (`IBV_QP_STATE` only).
///
/// # Safety
///
/// `qp` is a live QP of the library.
unsafe fn to_state(qp: *mut abi::ibv_qp, state: u32) {
    let mut a = abi::ibv_qp_attr {
        qp_state: state,
        ..Default::default()
    };
    // SAFETY: the caller's QP; a valid attribute block.
    assert_eq!(unsafe { ibv_modify_qp(qp, &mut a, IBV_QP_STATE) }, 0);
}

/// Everything `cq` gives until it has been empty for `quiet`: (wr_id, status,
/// opcode, byte_len, qp_num).
///
/// # Safety
///
/// `cq` is a live CQ of the library and `poll` its `ops.poll_cq`.
unsafe fn drain(
    poll: PollCq,
    cq: *mut abi::ibv_cq,
    quiet: Duration,
) -> Vec<(u64, u32, u32, u32, u32)> {
    let mut got = Vec::new();
    let mut last = Instant::now();
    while last.elapsed() < quiet {
        // SAFETY: all-zero `ibv_wc`s are valid (plain integers).
        let mut wc: [abi::ibv_wc; 8] = unsafe { std::mem::zeroed() };
        // SAFETY: the caller's promise; `wc` has room for 8.
        let n = unsafe { poll(cq, 8, wc.as_mut_ptr()) };
        assert!(n >= 0);
        for w in &wc[..n as usize] {
            got.push((w.wr_id, w.status, w.opcode, w.byte_len, w.qp_num));
            last = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    got
}

#[test]
fn reset_removes_the_qps_unpolled_completions_and_keeps_the_others() {
    // SAFETY: set before the library reads it, in the only test of this process.
    unsafe { std::env::set_var("FERROVERBS_DEVICE", format!("sim:{}", net::host(211))) };
    let gid = ferroverbs_sim::link::udp::gid_for(net::host(211));
    // SAFETY: the verbs API used as its contract says.
    unsafe {
        // IBV_ACCESS_LOCAL_WRITE.
        let o = open_with_buffer(16 * 1024, 1);
        let post_recv: PostRecv = o.op(abi::ops::POST_RECV);
        let (ctx, pd, post_send, poll_cq) = (o.ctx, o.pd, o.post_send, o.poll_cq);
        let (mut buf, base, lkey) = (o.buf, o.base, o.lkey);
        for (i, b) in buf[..256].iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        let cq_ad = ibv_create_cq(ctx, 64, ptr::null_mut(), ptr::null_mut(), 0);
        let cq_bc = ibv_create_cq(ctx, 64, ptr::null_mut(), ptr::null_mut(), 0);
        assert!(!cq_ad.is_null() && !cq_bc.is_null());
        let qp_on = |cq: *mut abi::ibv_cq| {
            let mut qi = abi::ibv_qp_init_attr {
                qp_context: ptr::null_mut(),
                send_cq: cq,
                recv_cq: cq,
                srq: ptr::null_mut(),
                cap: abi::ibv_qp_cap {
                    max_send_wr: 16,
                    max_recv_wr: 16,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                qp_type: 2,
                sq_sig_all: 1,
            };
            let q = ibv_create_qp(pd, &mut qi);
            assert!(!q.is_null());
            q
        };
        let (a, b, c, d) = (qp_on(cq_ad), qp_on(cq_bc), qp_on(cq_bc), qp_on(cq_ad));
        connect(a, (*b).qp_num, gid, 0, 1);
        connect(b, (*a).qp_num, gid, 0, 1);
        connect(d, (*c).qp_num, gid, 0, 1);
        connect(c, (*d).qp_num, gid, 0, 1);
        let mut sges: Vec<abi::ibv_sge> = (0..16u64)
            .map(|k| abi::ibv_sge {
                addr: base + 4096 + 256 * k,
                length: 256,
                lkey,
            })
            .collect();
        let recv = |qp: *mut abi::ibv_qp, wr_id: u64, s: *mut abi::ibv_sge| {
            let mut rw = abi::ibv_recv_wr {
                wr_id,
                next: ptr::null_mut(),
                sg_list: s,
                num_sge: 1,
            };
            let mut bad = ptr::null_mut();
            assert_eq!(post_recv(qp, &mut rw, &mut bad), 0);
        };
        let send = |qp: *mut abi::ibv_qp, wr_id: u64, len: u32| {
            let mut s = abi::ibv_sge {
                addr: base,
                length: len,
                lkey,
            };
            let mut w: abi::ibv_send_wr = std::mem::zeroed();
            w.wr_id = wr_id;
            w.sg_list = &mut s;
            w.num_sge = 1;
            w.opcode = IBV_WR_SEND;
            let mut bad = ptr::null_mut();
            assert_eq!(post_send(qp, &mut w, &mut bad), 0);
        };
        // B: four receives (100..103, slots 0..3), C: one (500, slot 8).
        for (k, s) in sges[..4].iter_mut().enumerate() {
            recv(b, 100 + k as u64, s);
        }
        recv(c, 500, &mut sges[8]);
        // A SENDs 64 bytes to B, D 32 to C; their completions say the messages
        // landed. Nothing of B's and C's CQ is polled.
        send(a, 1, 64);
        let w = one(poll_cq, cq_ad);
        assert_eq!((w.wr_id, w.status), (1, IBV_WC_SUCCESS));
        send(d, 2, 32);
        let w = one(poll_cq, cq_ad);
        assert_eq!((w.wr_id, w.status), (2, IBV_WC_SUCCESS));
        // B to ERR: its three other receives are flushed (given time to land),
        // then RESET with the four completions unpolled.
        to_state(b, IBV_QPS_ERR);
        std::thread::sleep(Duration::from_millis(200));
        to_state(b, IBV_QPS_RESET);
        let (qb, qc) = ((*b).qp_num, (*c).qp_num);
        let left = drain(poll_cq, cq_bc, Duration::from_millis(300));
        assert_eq!(
            left,
            [(500, IBV_WC_SUCCESS, IBV_WC_RECV, 32, qc)],
            "only C's receive stays"
        );

        // A and B again from RESET: B completes only its new receives, from its
        // first slot on (a stale counter would also trip the driver's debug check).
        to_state(a, IBV_QPS_RESET);
        connect(a, qb, gid, 0, 1);
        connect(b, (*a).qp_num, gid, 0, 1);
        recv(b, 200, &mut sges[4]);
        recv(b, 201, &mut sges[5]);
        send(a, 10, 48);
        send(a, 11, 80);
        let sent = drain(poll_cq, cq_ad, Duration::from_millis(300));
        let qa = (*a).qp_num;
        assert_eq!(
            sent.iter().map(|w| (w.0, w.1, w.4)).collect::<Vec<_>>(),
            [(10, IBV_WC_SUCCESS, qa), (11, IBV_WC_SUCCESS, qa)]
        );
        let got = drain(poll_cq, cq_bc, Duration::from_millis(300));
        assert_eq!(
            got,
            [
                (200, IBV_WC_SUCCESS, IBV_WC_RECV, 48, qb),
                (201, IBV_WC_SUCCESS, IBV_WC_RECV, 80, qb)
            ]
        );
        let (r0, r1) = (4096 + 4 * 256, 4096 + 5 * 256);
        assert_eq!(buf[r0..r0 + 48], buf[..48]);
        assert_eq!(buf[r1..r1 + 80], buf[..80]);
        for q in [a, b, c, d] {
            assert_eq!(ibv_destroy_qp(q), 0);
        }
    }
}

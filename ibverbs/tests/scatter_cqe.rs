//! Responder scatter to CQE through the library's C ABI, as a C program sees it: two
//! RC QPs of one simulated NIC (host 87 of this process's loopback /24) connected to
//! each other, the receiver's completions on a CQ of their own. The library creates
//! its QPs with scatter to CQE (as libmlx5 does unless `MLX5_SCATTER_TO_CQE=0`), so a
//! SEND of up to 32 bytes is placed in its CQE and the receive buffer stays untouched
//! after the sender's completion, until `ibv_poll_cq` on the receive CQ copies the
//! message across the receive's two scatter entries; a 33-byte SEND is in the buffer
//! before the poll.

use std::ffi::{c_int, c_void};
use std::ptr;

use ibverbs::abi;

#[path = "../../tests/common/net.rs"]
mod net;

mod loopback;
use loopback::*;

extern "C" {
    fn ibv_destroy_qp(qp: *mut abi::ibv_qp) -> c_int;
}

type PostRecv =
    unsafe extern "C" fn(*mut c_void, *mut abi::ibv_recv_wr, *mut *mut abi::ibv_recv_wr) -> c_int;

#[test]
fn ibv_poll_cq_copies_a_scattered_message_into_the_receive() {
    // SAFETY: set before the library reads it, in the only test of this process.
    unsafe { std::env::set_var("FERROVERBS_DEVICE", format!("sim:{}", net::host(87))) };
    let gid = ferroverbs_sim::link::udp::gid_for(net::host(87));
    // SAFETY: the verbs API used as its contract says; the buffer is registered and
    // read only while the device does not write it (after the completions).
    unsafe {
        let mut n = 0;
        let list = ibv_get_device_list(&mut n);
        assert_eq!(n, 1);
        let ctx = ibv_open_device(*list);
        assert!(!ctx.is_null());
        let ops = (*ctx).ops;
        let post_recv: PostRecv = std::mem::transmute(ops[abi::ops::POST_RECV]);
        let post_send: PostSend = std::mem::transmute(ops[abi::ops::POST_SEND]);
        let poll_cq: PollCq = std::mem::transmute(ops[abi::ops::POLL_CQ]);
        let pd = ibv_alloc_pd(ctx);
        assert!(!pd.is_null());
        let mut buf = vec![0u8; 16 * 1024];
        let base = buf.as_mut_ptr();
        let mr = ibv_reg_mr(pd, base as *mut c_void, buf.len(), 1);
        assert!(!mr.is_null());
        let lkey = (*mr).lkey;
        let scq = ibv_create_cq(ctx, 16, ptr::null_mut(), ptr::null_mut(), 0);
        let rcq = ibv_create_cq(ctx, 16, ptr::null_mut(), ptr::null_mut(), 0);
        assert!(!scq.is_null() && !rcq.is_null());
        let mut qi = abi::ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: scq,
            recv_cq: scq,
            srq: ptr::null_mut(),
            cap: abi::ibv_qp_cap {
                max_send_wr: 8,
                max_recv_wr: 8,
                max_send_sge: 1,
                max_recv_sge: 2,
                max_inline_data: 0,
            },
            qp_type: 2,
            sq_sig_all: 1,
        };
        let sender = ibv_create_qp(pd, &mut qi);
        qi.recv_cq = rcq;
        let receiver = ibv_create_qp(pd, &mut qi);
        assert!(!sender.is_null() && !receiver.is_null());
        connect(sender, (*receiver).qp_num, gid, 1, 1);
        connect(receiver, (*sender).qp_num, gid, 1, 1);

        let (src, dst) = (0usize, 8192usize);
        for (k, m) in [1usize, 17, 32, 33].into_iter().enumerate() {
            let at = |off: usize| base.add(off);
            ptr::write_bytes(at(dst), 0xee, 1024);
            for i in 0..m {
                *at(src + i) = (i * 13 + k + 1) as u8;
            }
            // Two entries: 5 bytes at dst, 200 at dst + 256.
            let mut rs = [
                abi::ibv_sge {
                    addr: at(dst) as u64,
                    length: 5,
                    lkey,
                },
                abi::ibv_sge {
                    addr: at(dst + 256) as u64,
                    length: 200,
                    lkey,
                },
            ];
            let mut rw = abi::ibv_recv_wr {
                wr_id: 100 + k as u64,
                next: ptr::null_mut(),
                sg_list: rs.as_mut_ptr(),
                num_sge: 2,
            };
            let mut rbad = ptr::null_mut();
            assert_eq!(post_recv(receiver as *mut c_void, &mut rw, &mut rbad), 0);
            let mut s = abi::ibv_sge {
                addr: at(src) as u64,
                length: m as u32,
                lkey,
            };
            let mut w: abi::ibv_send_wr = std::mem::zeroed();
            w.wr_id = 7;
            w.sg_list = &mut s;
            w.num_sge = 1;
            w.opcode = 2; // IBV_WR_SEND
            w.send_flags = 2; // IBV_SEND_SIGNALED
            let mut sbad = ptr::null_mut();
            assert_eq!(post_send(sender, &mut w, &mut sbad), 0);
            let sw = one(poll_cq, scq);
            assert_eq!((sw.status, sw.wr_id), (0, 7), "{m} bytes: {sw:?}");
            // The responder is done: the buffer shows where the message went.
            let untouched = *at(dst) == 0xee;
            assert_eq!(untouched, m <= 32, "{m} bytes: in the CQE iff 32 or fewer");
            let rwc = one(poll_cq, rcq);
            assert_eq!(rwc.status, 0, "{m} bytes: {rwc:?}");
            assert_eq!((rwc.wr_id, rwc.byte_len), (100 + k as u64, m as u32));
            assert_eq!(rwc.opcode, 128, "IBV_WC_RECV");
            assert_eq!(rwc.src_qp, (*sender).qp_num);
            let got = std::slice::from_raw_parts(at(dst), 1024);
            let msg = std::slice::from_raw_parts(at(src), m);
            let first = m.min(5);
            assert_eq!(&got[..first], &msg[..first], "{m} bytes: first entry");
            assert_eq!(
                &got[256..256 + m - first],
                &msg[first..],
                "{m} bytes: second"
            );
            assert_eq!(got[first], 0xee);
            assert_eq!(got[256 + m - first], 0xee, "{m} bytes: nothing more");
        }
        assert_eq!(ibv_destroy_qp(receiver), 0);
        assert_eq!(ibv_destroy_qp(sender), 0);
    }
}

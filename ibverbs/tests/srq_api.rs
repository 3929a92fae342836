//! The SRQ verbs of the library, called in process through its exported C symbols and
//! the inline functions' `ibv_context.ops` slots, as a C program would: two RC QPs of
//! one simulated NIC (host 83 of this process's loopback /24) connected to each other, the receiving one on an
//! SRQ. Checks the granted sizes (`max_wr` 0 too), `ibv_query_srq`, `ibv_modify_srq` (limit arming,
//! resize refused), `ibv_post_recv` on the QP refused with `EINVAL`, completions
//! carrying the SRQ requests' `wr_id`s, `IBV_EVENT_SRQ_LIMIT_REACHED` naming the SRQ,
//! and `ibv_destroy_srq` refused with `EBUSY` while the QP exists.

use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ibverbs::abi;

#[path = "../../tests/common/net.rs"]
mod net;

mod loopback;
use loopback::*;

extern "C" {
    fn ibv_create_srq(pd: *mut abi::ibv_pd, init: *mut abi::ibv_srq_init_attr)
        -> *mut abi::ibv_srq;
    fn ibv_modify_srq(srq: *mut abi::ibv_srq, attr: *mut abi::ibv_srq_attr, mask: c_int) -> c_int;
    fn ibv_query_srq(srq: *mut abi::ibv_srq, attr: *mut abi::ibv_srq_attr) -> c_int;
    fn ibv_destroy_srq(srq: *mut abi::ibv_srq) -> c_int;
    fn ibv_destroy_qp(qp: *mut abi::ibv_qp) -> c_int;
    fn ibv_get_async_event(ctx: *mut abi::ibv_context, ev: *mut abi::ibv_async_event) -> c_int;
    fn ibv_ack_async_event(ev: *mut abi::ibv_async_event);
}

type PostRecv =
    unsafe extern "C" fn(*mut c_void, *mut abi::ibv_recv_wr, *mut *mut abi::ibv_recv_wr) -> c_int;

struct Ctx(*mut abi::ibv_context);
// SAFETY: the library's verbs may be called from any thread.
unsafe impl Send for Ctx {}

#[test]
fn srq_verbs_through_the_c_abi() {
    // SAFETY: set before the library reads it, in the only test of this process.
    unsafe { std::env::set_var("FERROVERBS_DEVICE", format!("sim:{}", net::host(83))) };
    let gid = ferroverbs_sim::link::udp::gid_for(net::host(83));
    // SAFETY: the verbs API used as its contract says.
    unsafe {
        let o = open_with_buffer(64 * 1024, 1);
        let post_srq_recv: PostRecv = o.op(abi::ops::POST_SRQ_RECV);
        let post_recv: PostRecv = o.op(abi::ops::POST_RECV);
        let (ctx, pd, post_send, poll_cq) = (o.ctx, o.pd, o.post_send, o.poll_cq);
        let (mut buf, lkey) = (o.buf, o.lkey);
        let cq = ibv_create_cq(ctx, 64, ptr::null_mut(), ptr::null_mut(), 0);
        assert!(!cq.is_null());

        // A limit above max_wr is refused; the sizes granted are written back.
        let mut si = abi::ibv_srq_init_attr {
            srq_context: 0x5a as *mut c_void,
            attr: abi::ibv_srq_attr {
                max_wr: 20,
                max_sge: 1,
                srq_limit: 21,
            },
        };
        assert!(ibv_create_srq(pd, &mut si).is_null());
        si.attr.srq_limit = 0;
        let srq = ibv_create_srq(pd, &mut si);
        assert!(!srq.is_null());
        assert!(
            si.attr.max_wr >= 20 && si.attr.max_sge >= 1,
            "{:?}",
            si.attr
        );
        assert_eq!((*srq).srq_context, 0x5a as *mut c_void);
        assert_eq!((*srq).pd, pd);
        let mut q = abi::ibv_srq_attr::default();
        assert_eq!(ibv_query_srq(srq, &mut q), 0);
        assert_eq!((q.max_wr, q.srq_limit), (si.attr.max_wr, 0));
        // Resizing is refused; a limit above max_wr too.
        let mut m = abi::ibv_srq_attr {
            max_wr: 40,
            ..Default::default()
        };
        assert_eq!(ibv_modify_srq(srq, &mut m, 1), libc::EINVAL);
        m.srq_limit = q.max_wr + 1;
        assert_eq!(ibv_modify_srq(srq, &mut m, 2), libc::EINVAL);

        let mut qi = abi::ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq: ptr::null_mut(),
            cap: abi::ibv_qp_cap {
                max_send_wr: 16,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: 2,
            sq_sig_all: 1,
        };
        let sender = ibv_create_qp(pd, &mut qi);
        assert!(!sender.is_null());
        qi.srq = srq;
        let receiver = ibv_create_qp(pd, &mut qi);
        assert!(!receiver.is_null());
        assert_eq!((*receiver).srq, srq);
        assert_eq!(qi.cap.max_recv_wr, 0);
        connect(sender, (*receiver).qp_num, gid, 1, 1);
        connect(receiver, (*sender).qp_num, gid, 1, 1);

        // The QP takes no receive of its own.
        let mut sge = abi::ibv_sge {
            addr: buf.as_ptr() as u64,
            length: 64,
            lkey,
        };
        let mut rw = abi::ibv_recv_wr {
            wr_id: 1,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = ptr::null_mut();
        assert_eq!(
            post_recv(receiver as *mut c_void, &mut rw, &mut bad),
            libc::EINVAL
        );
        assert_eq!(bad, &mut rw as *mut _);

        // max_wr 0 and max_sge 0, as pyverbs' `SrqInitAttr()` asks: created as libmlx5's
        // mlx5_create_srq and mlx5_ib create it (one WQE, one scatter entry), granted
        // max_wr 0 and max_sge 1, and a receive finds it full (ENOMEM, as libmlx5's
        // post with head == tail).
        let mut z = abi::ibv_srq_init_attr {
            srq_context: ptr::null_mut(),
            attr: abi::ibv_srq_attr::default(),
        };
        let empty = ibv_create_srq(pd, &mut z);
        assert!(!empty.is_null(), "max_wr 0 refused");
        assert_eq!((z.attr.max_wr, z.attr.max_sge), (0, 1));
        let mut zq = abi::ibv_srq_attr::default();
        assert_eq!(ibv_query_srq(empty, &mut zq), 0);
        assert_eq!((zq.max_wr, zq.max_sge, zq.srq_limit), (0, 1, 0));
        bad = ptr::null_mut();
        assert_eq!(
            post_srq_recv(empty as *mut c_void, &mut rw, &mut bad),
            libc::ENOMEM
        );
        assert_eq!(bad, &mut rw as *mut _);
        assert_eq!(ibv_destroy_srq(empty), 0);

        // 8 receives on the SRQ (one chained list), wr_id 100 + k, slot k of 1 KiB.
        let mut sges: Vec<abi::ibv_sge> = (0..8)
            .map(|k| abi::ibv_sge {
                addr: buf.as_ptr() as u64 + 1024 * k,
                length: 1024,
                lkey,
            })
            .collect();
        let mut wrs: Vec<abi::ibv_recv_wr> = (0..8)
            .map(|k| abi::ibv_recv_wr {
                wr_id: 100 + k as u64,
                next: ptr::null_mut(),
                sg_list: &mut sges[k],
                num_sge: 1,
            })
            .collect();
        for k in 0..7 {
            wrs[k].next = &mut wrs[k + 1];
        }
        assert_eq!(post_srq_recv(srq as *mut c_void, &mut wrs[0], &mut bad), 0);
        // Armed at 6: three sends leave 5.
        let mut m = abi::ibv_srq_attr {
            srq_limit: 6,
            ..Default::default()
        };
        assert_eq!(ibv_modify_srq(srq, &mut m, 2), 0);
        assert_eq!(ibv_query_srq(srq, &mut q), 0);
        assert_eq!(q.srq_limit, 6);

        // Three SENDs of 32 + k bytes from the second half of the buffer.
        for k in 0..3usize {
            let off = 32 * 1024 + 1024 * k;
            for (i, b) in buf[off..off + 32 + k].iter_mut().enumerate() {
                *b = (k * 50 + i) as u8;
            }
            let mut s = abi::ibv_sge {
                addr: buf.as_ptr() as u64 + off as u64,
                length: 32 + k as u32,
                lkey,
            };
            let mut w: abi::ibv_send_wr = std::mem::zeroed();
            w.wr_id = 7;
            w.sg_list = &mut s;
            w.num_sge = 1;
            w.opcode = 2; // IBV_WR_SEND
            w.send_flags = 2; // IBV_SEND_SIGNALED
            let mut bad = ptr::null_mut();
            assert_eq!(post_send(sender, &mut w, &mut bad), 0);
        }
        let mut recvs = Vec::new();
        let mut sends = 0;
        let deadline = Instant::now() + Duration::from_secs(120);
        while (recvs.len() < 3 || sends < 3) && Instant::now() < deadline {
            let mut wc: [abi::ibv_wc; 8] = std::mem::zeroed();
            let got = poll_cq(cq, 8, wc.as_mut_ptr());
            assert!(got >= 0);
            for w in &wc[..got as usize] {
                assert_eq!(w.status, 0, "{w:?}");
                if w.opcode == 128 {
                    // IBV_WC_RECV
                    assert_eq!(w.qp_num, (*receiver).qp_num);
                    recvs.push((w.wr_id, w.byte_len));
                } else {
                    assert_eq!(w.wr_id, 7);
                    sends += 1;
                }
            }
        }
        assert_eq!(recvs, vec![(100, 32), (101, 33), (102, 34)]);
        for k in 0..3usize {
            let got = &buf[1024 * k..1024 * k + 32 + k];
            assert!(got
                .iter()
                .enumerate()
                .all(|(i, b)| *b == (k * 50 + i) as u8));
        }

        // The limit event names the SRQ, and the limit is disarmed.
        let (tx, rx) = mpsc::channel();
        let c = Ctx(ctx);
        std::thread::spawn(move || {
            let c = c;
            let mut ev = abi::ibv_async_event {
                element: ptr::null_mut(),
                event_type: 0,
            };
            let r = ibv_get_async_event(c.0, &mut ev);
            let _ = tx.send((r, ev.event_type, ev.element as usize));
            ibv_ack_async_event(&mut ev);
        });
        let (r, ty, el) = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("no SRQ limit event");
        assert_eq!((r, ty, el), (0, 15, srq as usize));
        assert_eq!(ibv_query_srq(srq, &mut q), 0);
        assert_eq!(q.srq_limit, 0);

        // Destroy order: the SRQ is busy while its QP exists.
        assert_eq!(ibv_destroy_srq(srq), libc::EBUSY);
        assert_eq!(ibv_destroy_qp(receiver), 0);
        assert_eq!(ibv_destroy_qp(sender), 0);
        assert_eq!(ibv_destroy_srq(srq), 0);
    }
}

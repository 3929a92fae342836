//! `ibv_post_send` of a list on an RC QP, called through the context's
//! `ops.post_send` as a C program calls it: the requests of a list are posted in
//! order (SENDs of one gather entry, inline SENDs, SENDs of two entries, RDMA
//! WRITEs, in one batch with one doorbell); a request that fails stops the list
//! with its errno and `*bad_wr` pointing at it, the ones before it delivered and
//! the ones after it not posted. Two RC QPs of one simulated NIC (host 87 of this
//! process's loopback /24).

use std::ffi::c_int;
use std::ptr;
use std::time::{Duration, Instant};

use ibverbs::abi;

#[path = "../../tests/common/net.rs"]
mod net;

mod loopback;
use loopback::*;

type PostRecv = unsafe extern "C" fn(
    *mut abi::ibv_qp,
    *mut abi::ibv_recv_wr,
    *mut *mut abi::ibv_recv_wr,
) -> c_int;

const IBV_WR_RDMA_WRITE: u32 = 0;
const IBV_WR_SEND: u32 = 2;
const IBV_SEND_INLINE: u32 = 8;
const WC_RECV: u32 = 128;

#[test]
fn a_send_list_is_posted_in_order_and_stops_at_the_failed_request() {
    // SAFETY: set before the library reads it, in the only test of this process.
    unsafe { std::env::set_var("FERROVERBS_DEVICE", format!("sim:{}", net::host(87))) };
    let gid = ferroverbs_sim::link::udp::gid_for(net::host(87));
    // SAFETY: the verbs API used as its contract says.
    unsafe {
        // IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE.
        let o = open_with_buffer(64 * 1024, 1 | 2);
        let post_recv: PostRecv = o.op(abi::ops::POST_RECV);
        let (ctx, pd, post_send, poll_cq) = (o.ctx, o.pd, o.post_send, o.poll_cq);
        let (mut buf, base, lkey, rkey) = (o.buf, o.base, o.lkey, o.rkey);
        let cq = ibv_create_cq(ctx, 256, ptr::null_mut(), ptr::null_mut(), 0);
        assert!(!cq.is_null());
        let mut qi = abi::ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq: ptr::null_mut(),
            cap: abi::ibv_qp_cap {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 2,
                max_recv_sge: 1,
                max_inline_data: 64,
            },
            qp_type: 2,
            sq_sig_all: 1,
        };
        let a = ibv_create_qp(pd, &mut qi);
        let b = ibv_create_qp(pd, &mut qi);
        assert!(!a.is_null() && !b.is_null());
        connect(a, (*b).qp_num, gid, 2, 1);
        connect(b, (*a).qp_num, gid, 2, 1);

        // B's receives: 256 bytes each at 32 Ki + 256 * k, wr_id 1000 + k.
        let mut rsges: Vec<abi::ibv_sge> = (0..32u64)
            .map(|k| abi::ibv_sge {
                addr: base + 32 * 1024 + 256 * k,
                length: 256,
                lkey,
            })
            .collect();
        for (k, s) in rsges.iter_mut().enumerate() {
            let mut rw = abi::ibv_recv_wr {
                wr_id: 1000 + k as u64,
                next: ptr::null_mut(),
                sg_list: s,
                num_sge: 1,
            };
            let mut bad = ptr::null_mut();
            assert_eq!(post_recv(b, &mut rw, &mut bad), 0);
        }
        let poll = |want: usize, limit: Duration| {
            let mut got = Vec::new();
            let deadline = Instant::now() + limit;
            while got.len() < want && Instant::now() < deadline {
                let mut wc: [abi::ibv_wc; 16] = std::mem::zeroed();
                let r = poll_cq(cq, 16, wc.as_mut_ptr());
                assert!(r >= 0);
                for w in &wc[..r as usize] {
                    assert_eq!(w.status, 0, "{w:?}");
                    got.push((w.wr_id, w.opcode, w.byte_len));
                }
            }
            got
        };

        // The sources: request k's bytes at 4 Ki * k.
        for k in 0..8usize {
            for i in 0..64 {
                buf[4096 * k + i] = (k * 16 + i) as u8;
            }
        }
        let src = |k: u64| base + 4096 * k;
        // 0: SEND of one entry (64 B); 1: inline SEND (40 B); 2: SEND of two entries
        // (16 + 8 B); 3: RDMA WRITE (32 B to 48 Ki); 4: an opcode verbs.h does not
        // define (EINVAL); 5: SEND (not posted).
        let mut sg: Vec<[abi::ibv_sge; 3]> = (0..6u64)
            .map(|k| {
                [
                    abi::ibv_sge {
                        addr: src(k),
                        length: 64,
                        lkey,
                    },
                    abi::ibv_sge {
                        addr: src(k) + 100,
                        length: 8,
                        lkey,
                    },
                    abi::ibv_sge {
                        addr: src(k) + 200,
                        length: 8,
                        lkey,
                    },
                ]
            })
            .collect();
        sg[1][0].length = 40;
        sg[2][0].length = 16;
        sg[3][0].length = 32;
        let mut wrs: Vec<abi::ibv_send_wr> = (0..6).map(|_| std::mem::zeroed()).collect();
        for (k, w) in wrs.iter_mut().enumerate() {
            w.wr_id = k as u64;
            w.sg_list = sg[k].as_mut_ptr();
            w.num_sge = [1, 1, 2, 1, 1, 1][k];
            w.opcode = IBV_WR_SEND;
        }
        wrs[1].send_flags = IBV_SEND_INLINE;
        wrs[4].opcode = 99;
        wrs[3].opcode = IBV_WR_RDMA_WRITE;
        wrs[3].wr.rdma = abi::wr_rdma {
            remote_addr: base + 48 * 1024,
            rkey,
        };
        for k in 0..5 {
            let next: *mut abi::ibv_send_wr = &mut wrs[k + 1];
            wrs[k].next = next;
        }
        let mut bad = ptr::null_mut();
        assert_eq!(post_send(a, wrs.as_mut_ptr(), &mut bad), libc::EINVAL);
        assert_eq!(
            bad, &mut wrs[4] as *mut _,
            "bad_wr names the failed request"
        );
        // Four send completions (0..=3) and three receives, in order; nothing of 4 or 5.
        let mut got = poll(7, Duration::from_secs(60));
        // Nothing more comes (0.5 s more).
        got.extend(poll(1, Duration::from_millis(500)));
        let sends: Vec<u64> = got.iter().filter(|w| w.1 < WC_RECV).map(|w| w.0).collect();
        let recvs: Vec<(u64, u32)> = got
            .iter()
            .filter(|w| w.1 == WC_RECV)
            .map(|w| (w.0, w.2))
            .collect();
        assert_eq!(sends, vec![0, 1, 2, 3], "{got:?}");
        assert_eq!(recvs, vec![(1000, 64), (1001, 40), (1002, 24)], "{got:?}");
        let rx = |k: usize| 32 * 1024 + 256 * k;
        assert_eq!(&buf[rx(0)..rx(0) + 64], &buf[0..64]);
        assert_eq!(&buf[rx(1)..rx(1) + 40], &buf[4096..4096 + 40]);
        let two: Vec<u8> = buf[8192..8192 + 16]
            .iter()
            .chain(&buf[8192 + 100..8192 + 108])
            .copied()
            .collect();
        assert_eq!(&buf[rx(2)..rx(2) + 24], &two[..]);
        assert_eq!(
            &buf[48 * 1024..48 * 1024 + 32],
            &buf[3 * 4096..3 * 4096 + 32]
        );

        // A list of 16 SENDs of one entry: all posted, completed in order.
        let mut ls: Vec<abi::ibv_sge> = (0..16u64)
            .map(|k| abi::ibv_sge {
                addr: src(k % 8),
                length: 1 + k as u32,
                lkey,
            })
            .collect();
        let mut l: Vec<abi::ibv_send_wr> = (0..16).map(|_| std::mem::zeroed()).collect();
        for (k, w) in l.iter_mut().enumerate() {
            w.wr_id = 100 + k as u64;
            w.sg_list = &mut ls[k];
            w.num_sge = 1;
            w.opcode = IBV_WR_SEND;
        }
        for k in 0..15 {
            let next: *mut abi::ibv_send_wr = &mut l[k + 1];
            l[k].next = next;
        }
        bad = ptr::null_mut();
        assert_eq!(post_send(a, l.as_mut_ptr(), &mut bad), 0);
        assert!(bad.is_null());
        let got = poll(32, Duration::from_secs(60));
        let sends: Vec<u64> = got.iter().filter(|w| w.1 < WC_RECV).map(|w| w.0).collect();
        let recvs: Vec<(u64, u32)> = got
            .iter()
            .filter(|w| w.1 == WC_RECV)
            .map(|w| (w.0, w.2))
            .collect();
        assert_eq!(sends, (100..116).collect::<Vec<_>>());
        assert_eq!(
            recvs,
            (0..16u64)
                .map(|k| (1003 + k, 1 + k as u32))
                .collect::<Vec<_>>()
        );
    }
}

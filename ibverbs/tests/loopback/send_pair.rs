//! Two RC QPs of one context connected to each other, for SENDs checked byte for byte
//! where scatter to CQE may put them: the receive buffer is looked at after the
//! sender's completion (the responder is done), before the receive is polled.

use std::ffi::c_void;
use std::ptr;

use ibverbs::abi;

use super::*;

/// `ops.post_recv` of a context.
pub type PostRecv =
    unsafe extern "C" fn(*mut c_void, *mut abi::ibv_recv_wr, *mut *mut abi::ibv_recv_wr) -> c_int;

/// The pair: `sender` completes on `scq`, `receiver` on `rcq`; each has one send and
/// two receive scatter entries; `buf` is registered with `lkey`.
pub struct SendPair {
    pub post_recv: PostRecv,
    pub post_send: PostSend,
    pub poll_cq: PollCq,
    pub buf: Vec<u8>,
    pub lkey: u32,
    pub scq: *mut abi::ibv_cq,
    pub rcq: *mut abi::ibv_cq,
    pub sender: *mut abi::ibv_qp,
    pub receiver: *mut abi::ibv_qp,
}

/// Opens the only device, registers a 16 KiB buffer and makes the pair (its CQs with
/// whatever `MLX5_CQE_SIZE` says now), connected through `gid`.
///
/// # Safety
///
/// The library's device is the only one (`FERROVERBS_DEVICE` set by the caller).
pub unsafe fn send_pair(gid: [u8; 16]) -> SendPair {
    // SAFETY: the verbs API used as its contract says (the caller's promise).
    unsafe {
        let ctx = open_only_device();
        let ops = (*ctx).ops;
        let pd = ibv_alloc_pd(ctx);
        assert!(!pd.is_null());
        let mut buf = vec![0u8; 16 * 1024];
        let mr = ibv_reg_mr(pd, buf.as_mut_ptr() as *mut c_void, buf.len(), 1);
        assert!(!mr.is_null());
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
        let post_recv: PostRecv = std::mem::transmute(ops[abi::ops::POST_RECV]);
        let post_send: PostSend = std::mem::transmute(ops[abi::ops::POST_SEND]);
        let poll_cq: PollCq = std::mem::transmute(ops[abi::ops::POLL_CQ]);
        SendPair {
            post_recv,
            post_send,
            poll_cq,
            lkey: (*mr).lkey,
            buf,
            scq,
            rcq,
            sender,
            receiver,
        }
    }
}

impl SendPair {
    /// SEND `k` of `m` bytes (from offset 0 of the buffer) into two receive entries (5
    /// bytes at offset 8192, 200 at 8192 + 256): the sender's completion, the receive
    /// buffer untouched after it exactly when `m <= in_cqe` (the message travelled
    /// in the CQE), then the receive's completion and every byte in place, nothing
    /// beyond.
    ///
    /// # Safety
    ///
    /// The pair is live.
    pub unsafe fn send_and_check(&mut self, k: usize, m: usize, in_cqe: usize) {
        let (src, dst) = (0usize, 8192usize);
        let lkey = self.lkey;
        let base = self.buf.as_mut_ptr();
        // SAFETY: offsets within the 16 KiB buffer; the device writes it only between
        // the posts and the completions, while it is not read here.
        unsafe {
            let at = |off: usize| base.add(off);
            ptr::write_bytes(at(dst), 0xee, 1024);
            for i in 0..m {
                *at(src + i) = (i * 13 + k + 1) as u8;
            }
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
            let receiver = self.receiver as *mut c_void;
            assert_eq!((self.post_recv)(receiver, &mut rw, &mut rbad), 0);
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
            assert_eq!((self.post_send)(self.sender, &mut w, &mut sbad), 0);
            let sw = one(self.poll_cq, self.scq);
            assert_eq!((sw.status, sw.wr_id), (0, 7), "{m} bytes: {sw:?}");
            // The responder is done: the buffer shows where the message went.
            let untouched = *at(dst) == 0xee;
            assert_eq!(
                untouched,
                m <= in_cqe,
                "{m} bytes: in the CQE iff {in_cqe} or fewer"
            );
            let rwc = one(self.poll_cq, self.rcq);
            assert_eq!(rwc.status, 0, "{m} bytes: {rwc:?}");
            assert_eq!((rwc.wr_id, rwc.byte_len), (100 + k as u64, m as u32));
            assert_eq!(rwc.opcode, 128, "IBV_WC_RECV");
            assert_eq!(rwc.src_qp, (*self.sender).qp_num);
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
    }

    /// Destroys the two QPs.
    ///
    /// # Safety
    ///
    /// The pair is live and not used afterwards.
    pub unsafe fn destroy_qps(&mut self) {
        // SAFETY: the caller's promise.
        unsafe {
            assert_eq!(ibv_destroy_qp(self.receiver), 0);
            assert_eq!(ibv_destroy_qp(self.sender), 0);
        }
    }
}

//! Responder scatter to CQE (`qpc.cs_res`, as Linux's `mlx5_ib` sets it for RC and UC
//! QPs): a received SEND of up to 32 bytes is placed in its 64-byte CQE
//! (`MLX5_INLINE_SCATTER_32`), 33 to 64 in the first half of a 128-byte entry
//! (`MLX5_INLINE_SCATTER_64`) when `cs_res` asks for 64; the receive buffer is not
//! written; anything larger, and
//! every message of a QP without `cs_res`, lands in the buffer as before.

mod common;
mod dp;

use dp::*;
use ferroverbs_hw::datapath::cqe::{
    MLX5_CQE_RESP_SEND, MLX5_CQE_RESP_SEND_IMM, MLX5_INLINE_SCATTER_32, MLX5_INLINE_SCATTER_64,
};
use ferroverbs_hw::datapath::wqe::{MLX5_OPCODE_SEND, MLX5_OPCODE_SEND_IMM};

const INLINE: u8 = MLX5_INLINE_SCATTER_32 | MLX5_INLINE_SCATTER_64;

/// Sends `n` bytes (with an immediate when `imm`) from A's QP `qa` of service type `st`
/// to B's `qb` (whose receive CQ has `stride`-byte entries) and returns the receive
/// CQE's entry and the receive buffer's first `n + 8` bytes.
fn exchange(st: u8, cs_res: u8, stride: usize, n: usize, imm: bool) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let mut p = Pair::deterministic(Conn::default());
    let mut rcq = p.b.create_cq_sized(6, false, stride);
    let c = Conn {
        rre: st == 0,
        rae: st == 0,
        ..Conn::default()
    };
    let mut qa = p.a.create_qp_st(st, &p.acq.0, &p.acq.1, 6, 6, 2);
    let mut qb = p.b.create_qp_cs(st, &p.bcq.0, &rcq, 6, 6, 2, cs_res);
    p.connect_qps(&qa, &qb, &c, 0x321);
    let dst = p.b.reg_mr(4096, ALL);
    p.b.mr_write(&dst, 0, &[0xee; 256]);
    p.b.post_recv(&mut qb, &[sge(&dst, 0, 4096)]);
    let msg: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(7) ^ 0x5a).collect();
    let (op, im) = if imm {
        (MLX5_OPCODE_SEND_IMM, Some(0xabcd_0123))
    } else {
        (MLX5_OPCODE_SEND, None)
    };
    let w = mixed_wqe(qa.qpn, op, &[], &[Seg::Inline(msg.clone())], im, SIG);
    p.a.post(&mut qa, &w);
    let rc = wait_cqe(&p.fabric, &p.b, &mut rcq);
    let want = if imm {
        MLX5_CQE_RESP_SEND_IMM
    } else {
        MLX5_CQE_RESP_SEND
    };
    assert_eq!((rc.opcode(), rc.byte_cnt() as usize), (want, n));
    if imm {
        assert_eq!(rc.imm(), 0xabcd_0123);
    }
    (p.b.last_entry(&rcq), p.b.mr_read(&dst, 0, n + 8), msg)
}

#[test]
fn small_sends_land_in_the_cqe() {
    for st in [0u8, 1] {
        for imm in [false, true] {
            // 64-byte CQEs: up to 32 bytes in the CQE's first half.
            for n in [1, 17, 32] {
                let (e, buf, msg) = exchange(st, 1, 64, n, imm);
                assert_eq!(e[63] & INLINE, MLX5_INLINE_SCATTER_32, "st {st} n {n}");
                assert_eq!(e[..n], msg[..], "st {st} n {n}");
                assert_eq!(buf, vec![0xee; n + 8], "the buffer is not written");
            }
            // Data64 asked, but the CQ's CQEs are 64 bytes: 32 at most.
            let (e, buf, msg) = exchange(st, 2, 64, 33, imm);
            assert_eq!(e[63] & INLINE, 0);
            assert_eq!(buf[..33], msg[..]);
            // 128-byte entries: up to 64 bytes in the entry's first half.
            for n in [20, 33, 64] {
                let (e, buf, msg) = exchange(st, 2, 128, n, imm);
                // Up to 32 bytes fit the CQE64 (the entry's upper half) itself.
                if n <= 32 {
                    assert_eq!(e[127] & INLINE, MLX5_INLINE_SCATTER_32, "n {n}");
                    assert_eq!(e[64..64 + n], msg[..], "st {st} n {n}");
                } else {
                    assert_eq!(e[127] & INLINE, MLX5_INLINE_SCATTER_64, "n {n}");
                    assert_eq!(e[..n], msg[..], "st {st} n {n}");
                }
                assert_eq!(buf, vec![0xee; n + 8]);
            }
            // Larger messages, and QPs without cs_res, use the buffer.
            let (e, buf, msg) = exchange(st, 2, 128, 65, imm);
            assert_eq!(e[127] & INLINE, 0);
            assert_eq!(buf[..65], msg[..]);
            let (e, buf, msg) = exchange(st, 0, 64, 8, imm);
            assert_eq!(e[63] & INLINE, 0);
            assert_eq!(buf[..8], msg[..]);
            // Nor does a 0-byte message of such a QP come as a scattered CQE.
            let (e, _, _) = exchange(st, 0, 64, 0, imm);
            assert_eq!(e[63] & INLINE, 0, "0 bytes without cs_res");
            let (e, _, _) = exchange(st, 1, 64, 0, imm);
            assert_eq!(
                e[63] & INLINE,
                MLX5_INLINE_SCATTER_32,
                "0 bytes with cs_res"
            );
        }
    }
}

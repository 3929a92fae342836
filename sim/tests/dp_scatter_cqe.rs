//! Responder scatter to CQE (`qpc.cs_res`, as Linux's `mlx5_ib` sets it for RC and UC
//! QPs): a received SEND of up to 32 bytes is placed in its 64-byte CQE
//! (`MLX5_INLINE_SCATTER_32`), 33 to 64 in the first half of a 128-byte entry
//! (`MLX5_INLINE_SCATTER_64`) when `cs_res` asks for 64; the receive buffer is not
//! written; anything larger, and
//! every message of a QP without `cs_res`, lands in the buffer as before.
//!
//! Requester scatter to CQE (`qpc.cs_req`, `MLX5_REQ_SCAT_DATA32_CQE` 0x11 /
//! `_DATA64_CQE` 0x22, as `mlx5_ib` sets it for RC QPs that signal every WQE): the
//! data of an RDMA READ response or an atomic result of a signaled WQE goes in the
//! requester's CQE by the same rules, the local buffer untouched.

mod common;
mod dp;

use dp::*;
use ferroverbs_hw::datapath::cqe::MLX5_CQE_REQ;
use ferroverbs_hw::datapath::cqe::{
    MLX5_CQE_RESP_SEND, MLX5_CQE_RESP_SEND_IMM, MLX5_INLINE_SCATTER_32, MLX5_INLINE_SCATTER_64,
};
use ferroverbs_hw::datapath::wqe::{
    MLX5_OPCODE_ATOMIC_CS, MLX5_OPCODE_ATOMIC_FA, MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_SEND,
    MLX5_OPCODE_SEND_IMM,
};

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

/// A's RC QP with requester scatter to CQE `cs_req` (send CQ of `stride`-byte
/// entries) READs `n` bytes from B (signaled or not; an unsignaled READ is followed by
/// a signaled 0-byte READ so that it completes): the READ's CQE entry, A's local
/// buffer's first `n + 8` bytes, and the remote bytes.
fn read(cs_req: u8, stride: usize, n: usize, signaled: bool) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let mut p = Pair::deterministic(Conn::default());
    let mut scq = p.a.create_cq_sized(6, false, stride);
    let mut qa = p.a.create_qp_scat(0, &scq, &p.acq.1, 6, 6, 2, 0, cs_req);
    let qb = p.b.create_qp_st(0, &p.bcq.0, &p.bcq.1, 6, 6, 2);
    p.connect_qps(&qa, &qb, &Conn::default(), 0x321);
    let local = p.a.reg_mr(4096, ALL);
    p.a.mr_write(&local, 0, &[0xee; 256]);
    let remote = p.b.reg_mr(4096, ALL);
    let data: Vec<u8> = (0..256u32).map(|i| (i * 11 + 3) as u8).collect();
    p.b.mr_write(&remote, 0, &data);
    let flags = if signaled { SIG } else { 0 };
    let segs = [sge(&local, 0, n as u32)];
    let segs: &[_] = if n == 0 { &[] } else { &segs };
    let w = rdma_wqe(qa.qpn, true, remote.va + 16, remote.key, segs, None, flags);
    let idx = p.a.post(&mut qa, &w);
    if !signaled {
        let w = rdma_wqe(qa.qpn, true, remote.va, remote.key, &[], None, SIG);
        p.a.post(&mut qa, &w);
    }
    let c = wait_cqe(&p.fabric, &p.a, &mut scq);
    assert_eq!(
        (c.opcode(), c.sop_opcode()),
        (MLX5_CQE_REQ, MLX5_OPCODE_RDMA_READ)
    );
    if signaled {
        assert_eq!((c.wqe_counter(), c.byte_cnt() as usize), (idx, n));
    }
    (
        p.a.last_entry(&scq),
        p.a.mr_read(&local, 0, n + 8),
        data[16..16 + n].to_vec(),
    )
}

#[test]
fn small_reads_land_in_the_requesters_cqe() {
    // DATA32 (0x11), 64-byte CQEs: up to 32 bytes in the CQE's first half.
    for n in [0, 1, 8, 31, 32] {
        let (e, buf, want) = read(0x11, 64, n, true);
        assert_eq!(e[63] & INLINE, MLX5_INLINE_SCATTER_32, "n {n}");
        assert_eq!(e[..n], want[..], "n {n}");
        assert_eq!(
            buf,
            vec![0xee; n + 8],
            "n {n}: the local buffer is not written"
        );
    }
    // More than fits, DATA64 on 64-byte CQEs, no cs_req, and the responder's encoding
    // (1) in cs_req: the local buffer.
    for (cs_req, n) in [(0x11, 33), (0x22, 33), (0, 8), (1, 8), (2, 8)] {
        let (e, buf, want) = read(cs_req, 64, n, true);
        assert_eq!(e[63] & INLINE, 0, "cs_req {cs_req:#x} n {n}");
        assert_eq!(buf[..n], want[..], "cs_req {cs_req:#x} n {n}");
        assert_eq!(buf[n..], [0xee; 8]);
    }
    // DATA64 (0x22), 128-byte entries: up to 32 in the CQE64, up to 64 in the lower
    // half.
    for n in [20, 32, 33, 64] {
        let (e, buf, want) = read(0x22, 128, n, true);
        if n <= 32 {
            assert_eq!(e[127] & INLINE, MLX5_INLINE_SCATTER_32, "n {n}");
            assert_eq!(e[64..64 + n], want[..], "n {n}");
        } else {
            assert_eq!(e[127] & INLINE, MLX5_INLINE_SCATTER_64, "n {n}");
            assert_eq!(e[..n], want[..], "n {n}");
        }
        assert_eq!(buf, vec![0xee; n + 8], "n {n}");
    }
    let (e, buf, want) = read(0x22, 128, 65, true);
    assert_eq!(e[127] & INLINE, 0);
    assert_eq!(buf[..65], want[..]);
    // An unsignaled READ has no CQE to carry its data: the buffer.
    let (_, buf, want) = read(0x11, 64, 8, false);
    assert_eq!(buf[..8], want[..]);
}

#[test]
fn atomic_results_land_in_the_requesters_cqe() {
    let mut p = Pair::deterministic(Conn::default());
    let mut scq = p.a.create_cq_sized(6, false, 64);
    let mut qa = p.a.create_qp_scat(0, &scq, &p.acq.1, 6, 6, 2, 0, 0x11);
    let qb = p.b.create_qp_st(0, &p.bcq.0, &p.bcq.1, 6, 6, 2);
    p.connect_qps(&qa, &qb, &Conn::default(), 0x321);
    let local = p.a.reg_mr(64, ALL);
    p.a.mr_write(&local, 0, &[0xee; 64]);
    let remote = p.b.reg_mr(64, ALL);
    p.b.mr_write(&remote, 8, &100u64.to_le_bytes());
    // Fetch and add 5, then a compare and swap that fails and one that succeeds.
    let ops = [
        (5u64, None, 100u64, 105u64),
        (9, Some(7u64), 105, 105),
        (9, Some(105), 105, 9),
    ];
    for (k, (swap_add, compare, orig, after)) in ops.into_iter().enumerate() {
        let at = 16 * k;
        let w = atomic_wqe(
            qa.qpn,
            remote.va + 8,
            remote.key,
            sge(&local, at, 8),
            swap_add,
            compare,
            SIG,
        );
        let idx = p.a.post(&mut qa, &w);
        let c = wait_cqe(&p.fabric, &p.a, &mut scq);
        let op = if compare.is_some() {
            MLX5_OPCODE_ATOMIC_CS
        } else {
            MLX5_OPCODE_ATOMIC_FA
        };
        assert_eq!(
            (c.opcode(), c.sop_opcode(), c.wqe_counter(), c.byte_cnt()),
            (MLX5_CQE_REQ, op, idx, 8)
        );
        let e = p.a.last_entry(&scq);
        assert_eq!(e[63] & INLINE, MLX5_INLINE_SCATTER_32, "op {k}");
        // The original value in the byte order it has in memory (big-endian: the
        // device's atomic endianness mode is left at 0 here).
        assert_eq!(e[..8], orig.to_be_bytes(), "op {k}");
        assert_eq!(
            p.a.mr_read(&local, at, 8),
            [0xee; 8],
            "op {k}: buffer untouched"
        );
        assert_eq!(p.b.mr_read(&remote, 8, 8), after.to_le_bytes());
    }
}

/// A SEND of up to 32 bytes into a 64-byte CQE takes the responder's one-packet path
/// (no detour through the general one); 33 bytes into a 128-byte entry do not (its
/// lower half is the general path's write), and are placed all the same.
#[test]
fn scattered_sends_take_the_one_packet_path() {
    for (stride, cs_res, n, fast) in [(64, 1, 8, 1), (64, 1, 32, 1), (128, 2, 33, 0)] {
        let mut p = Pair::deterministic(Conn::default());
        let mut rcq = p.b.create_cq_sized(6, false, stride);
        let mut qa = p.a.create_qp_st(0, &p.acq.0, &p.acq.1, 6, 6, 2);
        let mut qb = p.b.create_qp_cs(0, &p.bcq.0, &rcq, 6, 6, 2, cs_res);
        p.connect_qps(&qa, &qb, &Conn::default(), 0x321);
        let dst = p.b.reg_mr(4096, ALL);
        p.b.post_recv(&mut qb, &[sge(&dst, 0, 4096)]);
        let msg = vec![0x5a; n];
        let w = mixed_wqe(
            qa.qpn,
            MLX5_OPCODE_SEND,
            &[],
            &[Seg::Inline(msg)],
            None,
            SIG,
        );
        p.a.post(&mut qa, &w);
        let rc = wait_cqe(&p.fabric, &p.b, &mut rcq);
        assert_ne!(rc.as_bytes()[63] & INLINE, 0, "n {n}");
        let s = p.b.h.sim.stats().data_path;
        assert_eq!(s.rx_send_only_fast, fast, "n {n}");
    }
}

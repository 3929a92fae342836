//! Responder scatter to CQE through the verbs API: RC and UC QPs (on their own RQ and
//! on an SRQ) created with scatter to CQE (`QpInitAttr::with_scatter_to_cqe`: the
//! simulator bus's default is off) get `qpc.cs_res`, as Linux's `mlx5_ib` creates them
//! for libmlx5, so the simulated device places a received message of up to 32 bytes in
//! its CQE (`MLX5_INLINE_SCATTER_32`) and leaves the receive buffer alone; the poll
//! copies it across the receive's scatter list (entries of an ordinary and of a
//! zero-based memory region), as libmlx5's `mlx5_copy_to_recv_wqe` does. Shown by the
//! buffer: untouched after the device completed the receive, holding the message once
//! the completion is polled; larger messages, and QPs created without scatter to
//! CQE, find their bytes in the buffer before the poll. Every case runs on CQs of
//! 64-byte CQEs and of 128-byte ones (`CqOptions::cqe_size`): on the latter the QP
//! gets `cs_res` 2 (`MLX5_RES_SCAT_DATA64_CQE`, as `mlx5_ib`'s
//! `configure_responder_scat_cqe` gives it), and messages of 33 to 64 bytes come in
//! the entry's first half (`MLX5_INLINE_SCATTER_64`), copied from there as
//! libmlx5 copies `cqe - 1`; 65 bytes and more go to memory.
//!
//! Requester scatter to CQE (`qpc.cs_req`) the same way: an RC QP that signals every
//! WQE gets it, as `mlx5_ib` gives it (0x11, or 0x22 with 128-byte send CQEs); its
//! RDMA READs of up to 32 bytes (64 with 128-byte CQEs) and its atomics find their
//! data in the local buffer only once polled (libmlx5's `mlx5_copy_to_send_wqe`),
//! other QPs' before.

mod verbs_support;
use verbs_support::*;

use ferroverbs::verbs::{
    AccessFlags as A, CompletionQueue, CqOptions, CqeSize, Mtu, QpCap, QpInitAttr, QpType, RecvWr,
    SendWr, SrqAttr, WcFlags, WcOpcode, WcStatus,
};
use ferroverbs::Context;
use ferroverbs_sim::SimBus;

/// The sizes of the test: around the 32-byte limit, and past a second one (64).
const SIZES: [usize; 7] = [0, 1, 31, 32, 33, 64, 65];

/// The sizes of the SENDs: [`SIZES`], and more between and after the limits.
const SEND_SIZES: [usize; 10] = [0, 1, 31, 32, 33, 40, 63, 64, 65, 100];

/// A CQ of `cqe` entries of `size`.
fn cq_of(ctx: &Context<SimBus>, cqe: u32, size: CqeSize) -> CompletionQueue<'_, SimBus> {
    let cq = ctx
        .create_cq_with(
            cqe,
            CqOptions {
                cqe_size: size,
                ..CqOptions::default()
            },
        )
        .unwrap();
    assert_eq!(cq.cqe_size(), size);
    cq
}

/// The most bytes the device places in a CQE of `size` (`cs_res` / `cs_req` as
/// `mlx5_ib` chooses them): 32, or 64 in a 128-byte entry.
fn limit(size: CqeSize) -> usize {
    match size {
        CqeSize::Bytes64 => 32,
        CqeSize::Bytes128 => 64,
    }
}

/// What a receive buffer holds before any message.
const FILL: u8 = 0xee;

/// Waits for one completion of `cq`.
fn one(net: &Net, cq: &mut CompletionQueue<'_, SimBus>) -> ferroverbs::verbs::WorkCompletion {
    let w = wait(net, cq, 1);
    w[0]
}

/// Sends every size of [`SEND_SIZES`] (with and without an immediate) over a QP pair of
/// type `ty`, the receiver on an SRQ when `srq`, created with scatter to CQE when
/// `scatter`, both on CQs of `size`; each receive has three entries: 5 bytes of an
/// ordinary region, 7 of a zero-based one, 100 of the ordinary one.
fn exchange(ty: QpType, srq: bool, scatter: Option<bool>, size: CqeSize) {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut scq = cq_of(&ca, 64, size);
    let mut rcq = cq_of(&cb, 64, size);
    let cap = QpCap {
        max_recv_sge: 3,
        ..QpCap::default()
    };
    let mut s = pb
        .create_srq(&SrqAttr {
            max_wr: 16,
            max_sge: 3,
            srq_limit: 0,
        })
        .unwrap();
    let mut ia = QpInitAttr::new(&rcq, &rcq, cap).with_type(ty);
    if srq {
        ia = ia.with_srq(&s);
    }
    ia.scatter_to_cqe = scatter;
    // `None`: the simulator bus's default, off (`Bus::scatter_to_cqe_pays`).
    let scatter = scatter == Some(true);
    let mut qa = pa
        .create_qp(&QpInitAttr::new(&scq, &scq, cap).with_type(ty))
        .unwrap();
    let mut qb = pb.create_qp(&ia).unwrap();
    match ty {
        QpType::Uc => connect_uc(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024, 0x40),
        _ => connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024),
    }
    let src = pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let rbuf = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let zbuf = pb.alloc_mr_zero_based(4096, A::LOCAL_WRITE).unwrap();
    assert_eq!(zbuf.addr(), 0);
    let mut k = 0u64;
    for n in SEND_SIZES {
        for imm in [None, Some(0x1234_5678 ^ n as u32)] {
            k += 1;
            let what = format!("{ty:?} srq {srq} scatter {scatter} {size:?} {n} bytes imm {imm:?}");
            rbuf.fill(0, 4096, FILL);
            zbuf.fill(0, 4096, FILL);
            let sgl = [
                rbuf.sge(0, 5).unwrap(),
                zbuf.sge(100, 7).unwrap(),
                rbuf.sge(200, 100).unwrap(),
            ];
            let rwr = RecvWr::new(1000 + k, &sgl);
            if srq {
                s.post_recv(&[rwr]).unwrap();
            } else {
                qb.post_recv(&[rwr]).unwrap();
            }
            let msg = pattern(n, k as u8);
            src.write(0, &msg);
            let gl = [src.sge(0, n as u32).unwrap()];
            let gl: &[_] = if n == 0 { &[] } else { &gl };
            let wr = match imm {
                Some(i) => SendWr::send_with_imm(k, gl, i),
                None => SendWr::send(k, gl),
            };
            qa.post_send(&[wr.signaled()]).unwrap();
            // The sender's completion: the device has taken the message.
            let sw = one(&net, &mut scq);
            assert_eq!((sw.status, sw.wr_id), (WcStatus::Success, k), "{what}");
            net.settle();
            // Where the three entries put the message's bytes.
            let placed = |rbuf: &[u8], zbuf: &[u8]| {
                let mut got = Vec::new();
                got.extend_from_slice(&rbuf[..5]);
                got.extend_from_slice(&zbuf[100..107]);
                got.extend_from_slice(&rbuf[200..300]);
                got
            };
            let in_cqe = scatter && n <= limit(size);
            let before = placed(&rbuf.to_vec(), &zbuf.to_vec());
            if in_cqe {
                assert!(
                    before.iter().all(|&b| b == FILL),
                    "{what}: the device left the buffer alone"
                );
            } else {
                assert_eq!(before[..n], msg[..], "{what}: the device wrote the buffer");
            }
            let w = one(&net, &mut rcq);
            assert_eq!(w.status, WcStatus::Success, "{what}: {w:?}");
            assert_eq!(w.wr_id, 1000 + k, "{what}");
            assert_eq!(w.opcode, WcOpcode::Recv, "{what}");
            assert_eq!(w.byte_len as usize, n, "{what}");
            assert_eq!(w.qp_num, qb.qp_num(), "{what}");
            assert_eq!(w.src_qp, qa.qp_num(), "{what}");
            assert_eq!(w.sl, 0, "{what}");
            assert_eq!(w.imm_data, imm.unwrap_or(0), "{what}");
            assert_eq!(w.wc_flags.contains(WcFlags::WITH_IMM), imm.is_some());
            assert!(!w.wc_flags.contains(WcFlags::GRH), "{what}");
            let (r, z) = (rbuf.to_vec(), zbuf.to_vec());
            let after = placed(&r, &z);
            assert_eq!(after[..n], msg[..], "{what}: the message in the buffer");
            assert!(
                after[n..].iter().all(|&b| b == FILL),
                "{what}: nothing more"
            );
            // Nothing outside the three entries.
            assert!(r[5..200].iter().chain(&r[300..]).all(|&b| b == FILL));
            assert!(z[..100].iter().chain(&z[107..]).all(|&b| b == FILL));
        }
    }
    assert_eq!(rcq.skipped(), 0);
    assert_eq!(scq.skipped(), 0);
}

#[test]
fn rc_rq() {
    exchange(QpType::Rc, false, Some(true), CqeSize::Bytes64);
}

#[test]
fn rc_srq() {
    exchange(QpType::Rc, true, Some(true), CqeSize::Bytes64);
}

#[test]
fn uc_rq() {
    exchange(QpType::Uc, false, Some(true), CqeSize::Bytes64);
}

#[test]
fn uc_srq() {
    exchange(QpType::Uc, true, Some(true), CqeSize::Bytes64);
}

#[test]
fn rc_rq_128_byte_cqes() {
    exchange(QpType::Rc, false, Some(true), CqeSize::Bytes128);
}

#[test]
fn rc_srq_128_byte_cqes() {
    exchange(QpType::Rc, true, Some(true), CqeSize::Bytes128);
}

#[test]
fn uc_rq_128_byte_cqes() {
    exchange(QpType::Uc, false, Some(true), CqeSize::Bytes128);
}

#[test]
fn uc_srq_128_byte_cqes() {
    exchange(QpType::Uc, true, Some(true), CqeSize::Bytes128);
}

#[test]
fn turned_off_or_by_default_every_message_lands_in_the_buffer() {
    for size in [CqeSize::Bytes64, CqeSize::Bytes128] {
        exchange(QpType::Rc, false, Some(false), size);
        exchange(QpType::Uc, true, Some(false), size);
        // The simulator's default: off.
        exchange(QpType::Rc, false, None, size);
        exchange(QpType::Uc, true, None, size);
    }
}

/// A region deregistered after the device completed a receive into it, before the
/// poll: the copy finds no live region for the entry's key, writes nothing, and the
/// completion reports `LocProtErr` (the receive's `wr_id`, its byte count); the next
/// receive works. A receive list too short for the message cannot get that far: the
/// device checks the length first (`LocLenErr` from the device). `n` bytes on CQs of
/// `size`.
fn region_gone(size: CqeSize, n: usize) {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut scq = cq_of(&ca, 16, size);
    let mut rcq = cq_of(&cb, 16, size);
    let cap = QpCap::default();
    let mut qa = pa.create_qp(&QpInitAttr::new(&scq, &scq, cap)).unwrap();
    let mut qb = pb
        .create_qp(&QpInitAttr::new(&rcq, &rcq, cap).with_scatter_to_cqe())
        .unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    let src = pa.alloc_mr(64, A::LOCAL_WRITE).unwrap();
    let msg = pattern(n, 0x5a);
    src.write(0, &msg);
    let gone = pb
        .reg_mr(vec![FILL; 64].into_boxed_slice(), A::LOCAL_WRITE)
        .unwrap();
    qb.post_recv(&[RecvWr::new(1, &[gone.sge(0, 64).unwrap()])])
        .unwrap();
    qa.post_send(&[SendWr::send(1, &[src.sge(0, n as u32).unwrap()]).signaled()])
        .unwrap();
    assert_eq!(one(&net, &mut scq).status, WcStatus::Success);
    net.settle();
    let back = gone.deregister().unwrap().unwrap();
    assert!(back.iter().all(|&b| b == FILL), "the device left it alone");
    let w = one(&net, &mut rcq);
    assert_eq!(
        (w.status, w.wr_id, w.byte_len),
        (WcStatus::LocProtErr, 1, n as u32)
    );
    let rbuf = pb.alloc_mr(64, A::LOCAL_WRITE).unwrap();
    qb.post_recv(&[RecvWr::new(2, &[rbuf.sge(0, 64).unwrap()])])
        .unwrap();
    qa.post_send(&[SendWr::send(2, &[src.sge(0, n as u32).unwrap()]).signaled()])
        .unwrap();
    assert_eq!(one(&net, &mut scq).status, WcStatus::Success);
    let w = one(&net, &mut rcq);
    assert_eq!(
        (w.status, w.wr_id, w.byte_len),
        (WcStatus::Success, 2, n as u32)
    );
    let mut got = vec![0u8; n];
    rbuf.read(0, &mut got);
    assert_eq!(got, msg);
}

#[test]
fn a_region_gone_before_the_poll_is_a_protection_error() {
    region_gone(CqeSize::Bytes64, 16);
}

#[test]
fn a_region_gone_before_the_poll_of_a_64_byte_message_in_a_128_byte_cqe() {
    region_gone(CqeSize::Bytes128, 16);
    region_gone(CqeSize::Bytes128, 64);
}

/// RDMA READs of every size of [`SIZES`] and atomics from an RC QP created with
/// `sq_sig_all` when `sig_all` (and scatter to CQE unless `scatter` is false): with
/// both, the QP asks for requester scatter to CQE (`qpc.cs_req`, as `mlx5_ib` sets it
/// for QPs that signal every WQE), the device places a READ response of up to 32
/// bytes, or an atomic's original value, in the CQE and leaves the local buffer
/// alone, and the poll copies it across the send WQE's local list (entries of an
/// ordinary and of a zero-based region), as libmlx5's `mlx5_copy_to_send_wqe` does.
/// Each size is read into one entry and into up to three, three times over, so that
/// the WQEs (one and two WQEBBs) take many positions in the send queue of 8 WQEBBs
/// and an in-CQE READ's list crosses its end.
fn reads(sig_all: bool, scatter: Option<bool>, size: CqeSize) {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut scq = cq_of(&ca, 64, size);
    let rcq = cq_of(&cb, 64, size);
    let cap = QpCap {
        max_send_wr: 4,
        max_send_sge: 3,
        ..QpCap::default()
    };
    let mut ia = QpInitAttr::new(&scq, &scq, cap);
    ia.sq_sig_all = sig_all;
    ia.scatter_to_cqe = scatter;
    let scatter = scatter == Some(true);
    let mut qa = pa.create_qp(&ia).unwrap();
    // Four WQEs of two WQEBBs (up to three entries after the control and remote
    // address segments, rounded up as libmlx5 does): 8 WQEBBs.
    assert_eq!(qa.cap().max_send_wr, 4);
    let mut qb = pb.create_qp(&QpInitAttr::new(&rcq, &rcq, cap)).unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    let remote = pb
        .alloc_mr(4096, A::LOCAL_WRITE | A::REMOTE_READ | A::REMOTE_ATOMIC)
        .unwrap();
    let data = pattern(4096, 0x3c);
    remote.write(0, &data);
    let lbuf = pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let zbuf = pa.alloc_mr_zero_based(4096, A::LOCAL_WRITE).unwrap();
    let in_cqe = |n: usize| sig_all && scatter && n <= limit(size);
    let mut k = 0u64;
    // Three passes of 17 WQEBBs through the queue of 8: the third one's 31-byte READ
    // into three entries (two WQEBBs) starts in the last WQEBB.
    for (pass, n) in (0..3).flat_map(|p| SIZES.map(|n| (p, n))) {
        for three in [false, true] {
            k += 1;
            let what = format!(
                "sig_all {sig_all} scatter {scatter} {size:?} pass {pass} {n} bytes, 3 entries \
                 {three}"
            );
            lbuf.fill(0, 4096, FILL);
            zbuf.fill(0, 4096, FILL);
            // One entry, or up to three: 5 bytes of the ordinary region, 7 of the
            // zero-based one, the rest of the ordinary one (a READ reads what its
            // list holds).
            let (a, b) = (n.min(5), n.saturating_sub(5).min(7));
            let c = n - a - b;
            let mut gl = Vec::new();
            if three {
                for (mr, off, len) in [(&lbuf, 0, a), (&zbuf, 100, b), (&lbuf, 200, c)] {
                    if len > 0 {
                        gl.push(mr.sge(off, len as u32).unwrap());
                    }
                }
            } else if n > 0 {
                gl.push(lbuf.sge(0, n as u32).unwrap());
            }
            let at = 8 * k as usize;
            let wr = SendWr::rdma_read(k, &gl, remote.remote(at));
            qa.post_send(&[if sig_all { wr } else { wr.signaled() }])
                .unwrap();
            net.settle();
            let placed = |l: &[u8], z: &[u8]| {
                let mut got = Vec::new();
                if three {
                    got.extend_from_slice(&l[..5]);
                    got.extend_from_slice(&z[100..107]);
                    got.extend_from_slice(&l[200..300]);
                } else {
                    got.extend_from_slice(&l[..n + 8]);
                }
                got
            };
            let want = &data[at..at + n];
            let before = placed(&lbuf.to_vec(), &zbuf.to_vec());
            if in_cqe(n) {
                assert!(
                    before.iter().all(|&b| b == FILL),
                    "{what}: the device left the buffer alone"
                );
            } else {
                assert_eq!(before[..n], want[..], "{what}: the device wrote the buffer");
            }
            let w = one(&net, &mut scq);
            assert_eq!(
                (w.status, w.wr_id, w.opcode, w.byte_len as usize),
                (WcStatus::Success, k, WcOpcode::RdmaRead, n),
                "{what}: {w:?}"
            );
            let (l, z) = (lbuf.to_vec(), zbuf.to_vec());
            let after = placed(&l, &z);
            assert_eq!(after[..n], want[..], "{what}: the data in the buffer");
            assert!(
                after[n..].iter().all(|&b| b == FILL),
                "{what}: nothing more"
            );
            if three {
                assert!(l[5..200].iter().chain(&l[300..]).all(|&b| b == FILL));
                assert!(z[..100].iter().chain(&z[107..]).all(|&b| b == FILL));
            }
        }
    }
    // Atomics: the original value, in host order, lands in the result buffer at the
    // poll.
    remote.write(8, &100u64.to_le_bytes());
    let ops = [
        (None, 5u64, 100u64, 105u64),
        (Some(7u64), 9, 105, 105),
        (Some(105), 9, 105, 9),
    ];
    for (i, (compare, swap_add, orig, after)) in ops.into_iter().enumerate() {
        let id = 100 + i as u64;
        lbuf.fill(0, 64, FILL);
        let res = [lbuf.sge(16, 8).unwrap()];
        let wr = match compare {
            Some(c) => SendWr::atomic_cmp_swp(id, &res, remote.remote(8), c, swap_add),
            None => SendWr::atomic_fetch_add(id, &res, remote.remote(8), swap_add),
        };
        qa.post_send(&[if sig_all { wr } else { wr.signaled() }])
            .unwrap();
        net.settle();
        let mut v = [0u8; 8];
        lbuf.read(16, &mut v);
        if in_cqe(8) {
            assert_eq!(v, [FILL; 8], "atomic {i}: the device left the buffer alone");
        } else {
            assert_eq!(v, orig.to_ne_bytes(), "atomic {i}: the device wrote it");
        }
        let w = one(&net, &mut scq);
        let op = if compare.is_some() {
            WcOpcode::CompSwap
        } else {
            WcOpcode::FetchAdd
        };
        assert_eq!(
            (w.status, w.wr_id, w.opcode, w.byte_len),
            (WcStatus::Success, id, op, 8),
            "atomic {i}: {w:?}"
        );
        lbuf.read(16, &mut v);
        assert_eq!(v, orig.to_ne_bytes(), "atomic {i}");
        remote.read(8, &mut v);
        assert_eq!(u64::from_le_bytes(v), after, "atomic {i}");
        let around = lbuf.to_vec();
        assert!(around[..16]
            .iter()
            .chain(&around[24..64])
            .all(|&b| b == FILL));
    }
    assert_eq!(scq.skipped(), 0);
}

#[test]
fn reads_and_atomics_of_a_qp_signalling_every_wqe_land_in_the_cqe() {
    reads(true, Some(true), CqeSize::Bytes64);
}

#[test]
fn reads_of_up_to_64_bytes_land_in_a_128_byte_cqe() {
    reads(true, Some(true), CqeSize::Bytes128);
}

#[test]
fn reads_and_atomics_of_other_qps_land_in_the_buffer() {
    // Not every WQE signaled: no requester scatter (as mlx5_ib); scatter to CQE off,
    // or left to the simulator bus (off).
    for size in [CqeSize::Bytes64, CqeSize::Bytes128] {
        reads(false, Some(true), size);
        reads(true, Some(false), size);
        reads(true, None, size);
    }
}

/// A region deregistered after the device completed a READ whose data is in the CQE,
/// before the poll: the copy writes nothing and the completion reports `LocProtErr`
/// (with the READ's `wr_id` and byte count).
#[test]
fn a_read_buffer_gone_before_the_poll_is_a_protection_error() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut scq = ca.create_cq(16).unwrap();
    let rcq = cb.create_cq(16).unwrap();
    let cap = QpCap::default();
    let mut ia = QpInitAttr::new(&scq, &scq, cap).with_scatter_to_cqe();
    ia.sq_sig_all = true;
    let mut qa = pa.create_qp(&ia).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&rcq, &rcq, cap)).unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    let remote = pb.alloc_mr(64, A::LOCAL_WRITE | A::REMOTE_READ).unwrap();
    remote.write(0, b"sixteen bytes!!!");
    let gone = pa
        .reg_mr(vec![FILL; 64].into_boxed_slice(), A::LOCAL_WRITE)
        .unwrap();
    qa.post_send(&[SendWr::rdma_read(
        1,
        &[gone.sge(0, 16).unwrap()],
        remote.remote(0),
    )])
    .unwrap();
    net.settle();
    let back = gone.deregister().unwrap().unwrap();
    assert!(back.iter().all(|&b| b == FILL), "the device left it alone");
    let w = one(&net, &mut scq);
    assert_eq!(
        (w.status, w.wr_id, w.byte_len, w.opcode),
        (WcStatus::LocProtErr, 1, 16, WcOpcode::RdmaRead)
    );
}

/// A CQ of 128-byte CQEs resized (grown, then shrunk) while it holds received
/// messages placed in its entries: the resize copies whole entries, their first
/// halves included (`MLX5_INLINE_SCATTER_64`), so every message still reaches its
/// receive buffer, byte for byte, once polled; and the new rings keep the CQE size.
#[test]
fn a_resized_128_byte_cq_keeps_the_messages_in_its_entries() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut scq = cq_of(&ca, 64, CqeSize::Bytes128);
    let mut rcq = cq_of(&cb, 15, CqeSize::Bytes128);
    let cap = QpCap {
        max_recv_wr: 16,
        ..QpCap::default()
    };
    let mut qa = pa.create_qp(&QpInitAttr::new(&scq, &scq, cap)).unwrap();
    let mut qb = pb
        .create_qp(&QpInitAttr::new(&rcq, &rcq, cap).with_scatter_to_cqe())
        .unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    let src = pa.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let rbuf = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    let sizes = [16usize, 48, 64, 100, 33, 1, 63, 65, 40, 32];
    let mut k = 0u64;
    // Grown from 16 entries to 64, then shrunk to 16 (more than the 10 unpolled).
    for (round, new_size) in [(0, 63u32), (1, 15)] {
        rbuf.fill(0, 4096, FILL);
        let mut msgs = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            k += 1;
            let msg = pattern(n, k as u8);
            src.write(128 * i, &msg);
            let at = 256 * i;
            qb.post_recv(&[RecvWr::new(k, &[rbuf.sge(at, 128).unwrap()])])
                .unwrap();
            qa.post_send(&[SendWr::send(k, &[src.sge(128 * i, n as u32).unwrap()]).signaled()])
                .unwrap();
            assert_eq!(one(&net, &mut scq).status, WcStatus::Success);
            msgs.push((k, at, msg));
        }
        net.settle();
        let r = rbuf.to_vec();
        for (_, at, msg) in &msgs {
            let untouched = r[*at..*at + msg.len()].iter().all(|&b| b == FILL);
            assert_eq!(
                untouched,
                msg.len() <= 64,
                "round {round}, {} bytes: in the CQE iff 64 or fewer",
                msg.len()
            );
        }
        // The ten completions are unpolled: resize under them.
        rcq.resize(new_size).unwrap();
        assert_eq!(rcq.capacity(), (new_size + 1).next_power_of_two() - 1);
        assert_eq!(rcq.cqe_size(), CqeSize::Bytes128);
        for (id, at, msg) in &msgs {
            let w = one(&net, &mut rcq);
            assert_eq!(
                (w.status, w.wr_id, w.byte_len as usize),
                (WcStatus::Success, *id, msg.len()),
                "round {round}: {w:?}"
            );
            let r = rbuf.to_vec();
            assert_eq!(&r[*at..*at + msg.len()], &msg[..], "round {round}, wr {id}");
            assert_eq!(
                r[*at + msg.len()],
                FILL,
                "round {round}, wr {id}: nothing more"
            );
        }
    }
    assert_eq!(rcq.skipped(), 0);
}

//! The post and poll paths on `MemBus` with the test playing the device
//! ([`fastpath`](super::fastpath)): work request bookkeeping, unsignaled requests,
//! full queues, wrap-around, and the CQE → work completion mapping.

use std::sync::Arc;

use ferroverbs_hw::datapath::cqe::{
    make_op_own, Cqe64, CqeSyndrome, MLX5_CQE_REQ_ERR, MLX5_CQE_RESP_ERR, MLX5_CQE_RESP_SEND_IMM,
    MLX5_CQE_RESP_WR_IMM,
};
use ferroverbs_hw::datapath::wqe::{
    MLX5_OPCODE_ATOMIC_FA, MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_SEND,
};
use ferroverbs_hw::MemBus;

use super::fastpath::{DetachedCq, DetachedQp, DETACHED_UAR};
use super::*;

const QPN: u32 = 0x123;

fn setup(cap: QpCap) -> (Arc<MemBus>, DetachedQp<MemBus>, DetachedCq<MemBus>) {
    let bus = Arc::new(MemBus::new(1 << 16));
    let cq = DetachedCq::new(&bus, 255).unwrap();
    let mut qp = DetachedQp::new(&bus, QPN, &cap, false).unwrap();
    cq.attach(&qp);
    qp.set_state(QpState::Rts);
    (bus, qp, cq)
}

fn sge() -> [Sge; 1] {
    [Sge {
        addr: 0x1000,
        length: 8,
        lkey: 0x500,
    }]
}

fn zeroed() -> Cqe64 {
    zerocopy::transmute!([0u8; 64])
}

#[test]
fn a_signaled_send_completes_with_its_wr_id() {
    let (bus, mut qp, mut cq) = setup(QpCap::default());
    let mut wc = [WorkCompletion::default(); 4];
    assert_eq!(cq.poll(&mut wc), 0, "empty");
    let idx = qp.next_send_index();
    let s = sge();
    qp.post_send(&[SendWr::send(0xabc, &s).signaled()]).unwrap();
    // BlueFlame (one WQE of 2 DS): the WQE went to the register of the QP's UAR.
    let bf = ferroverbs_hw::datapath::uar::uar_bar_offset(DETACHED_UAR) + 0xa00; // BlueFlame register 1
    assert_eq!(bus.bar_bytes(bf + 3, 1), [MLX5_OPCODE_SEND]);
    cq.produce_send(QPN, idx, MLX5_OPCODE_SEND);
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!(
        wc[0],
        WorkCompletion {
            wr_id: 0xabc,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            qp_num: QPN,
            ..WorkCompletion::default()
        }
    );
    assert_eq!(cq.poll(&mut wc), 0);
}

#[test]
fn unsignaled_requests_are_retired_by_a_later_completion() {
    let cap = QpCap {
        max_send_wr: 16,
        ..QpCap::default()
    };
    let (_bus, mut qp, mut cq) = setup(cap);
    let s = sge();
    let mut wc = [WorkCompletion::default(); 4];
    let slots = qp.cap().max_send_wr as u64;
    // Fill the queue with unsignaled sends; the next post is refused, intact.
    let mut last = 0;
    let mut n = 0u64;
    loop {
        let idx = qp.next_send_index();
        match qp.post_send(&[SendWr::send(n, &s)]) {
            Ok(()) => {
                last = idx;
                n += 1;
            }
            Err(e) => {
                assert!(matches!(e.error, PostError::QueueFull { .. }), "{e}");
                break;
            }
        }
    }
    assert!(n >= slots, "{n} < {slots}");
    let before = qp.next_send_index();
    assert!(qp.post_send(&[SendWr::send(99, &s)]).is_err());
    assert_eq!(
        qp.next_send_index(),
        before,
        "a refused post leaves the ring"
    );
    // One completion for the last WQE retires all of them (only it is reported).
    cq.produce_send(QPN, last, MLX5_OPCODE_SEND);
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!(wc[0].wr_id, n - 1);
    // The whole ring is free again.
    for i in 0..n {
        qp.post_send(&[SendWr::send(i, &s)]).unwrap();
    }
}

#[test]
fn lists_ring_one_doorbell_and_stop_at_the_bad_request() {
    let (bus, mut qp, _cq) = setup(QpCap::default());
    let s = sge();
    let too_many = vec![sge()[0]; qp.cap().max_send_sge as usize + 1];
    let wrs = [
        SendWr::send(1, &s),
        SendWr::send(2, &s),
        SendWr::send(3, &too_many),
        SendWr::send(4, &s),
    ];
    let first = qp.next_send_index();
    let e = qp.post_send(&wrs).unwrap_err();
    assert_eq!(e.index, 2);
    assert_eq!(
        e.error,
        PostError::TooManySge {
            count: too_many.len(),
            max: qp.cap().max_send_sge
        }
    );
    // Two WQEs went out with one 8-byte doorbell naming the second.
    assert_eq!(qp.next_send_index(), first.wrapping_add(2));
    let bf = ferroverbs_hw::datapath::uar::uar_bar_offset(DETACHED_UAR) + 0xa00; // BlueFlame register 1
    let db = bus.bar_bytes(bf, 8);
    assert_eq!(u16::from_be_bytes([db[1], db[2]]), first.wrapping_add(1));
}

#[test]
fn the_receive_queue_fills_and_drains() {
    let cap = QpCap {
        max_recv_wr: 8,
        ..QpCap::default()
    };
    let (_bus, mut qp, mut cq) = setup(cap);
    let s = sge();
    let n = qp.cap().max_recv_wr;
    for i in 0..n {
        qp.post_recv(&[RecvWr::new(u64::from(i), &s)]).unwrap();
    }
    assert!(matches!(
        qp.post_recv(&[RecvWr::new(100, &s)]),
        Err(BadWr {
            index: 0,
            error: PostError::QueueFull { .. }
        })
    ));
    let mut wc = [WorkCompletion::default(); 16];
    for c in 0..3u16 {
        cq.produce_recv(QPN, c, 100 + u32::from(c));
    }
    assert_eq!(cq.poll(&mut wc), 3);
    for (i, w) in wc[..3].iter().enumerate() {
        assert_eq!(w.wr_id, i as u64);
        assert_eq!(w.opcode, WcOpcode::Recv);
        assert_eq!(w.byte_len, 100 + i as u32);
    }
    for i in 0..3 {
        qp.post_recv(&[RecvWr::new(200 + i, &s)]).unwrap();
    }
    assert!(qp.post_recv(&[RecvWr::new(300, &s)]).is_err());
}

#[test]
fn rings_wrap_over_100k_requests() {
    let cap = QpCap {
        max_send_wr: 32,
        max_recv_wr: 32,
        ..QpCap::default()
    };
    let (_bus, mut qp, mut cq) = setup(cap);
    let s = sge();
    let payload = [0x5au8; 40];
    let parts: [&[u8]; 1] = [&payload];
    let mut wc = [WorkCompletion::default(); 8];
    let mut next = 0u64;
    for i in 0..100_000u64 {
        let idx = qp.next_send_index();
        // Alternate 1-WQEBB gather sends and 2-WQEBB inline sends so that WQEs
        // straddle the ring end; signal every fourth.
        let wr = if i % 2 == 0 {
            SendWr::send(i, &s)
        } else {
            SendWr::send_inline(i, &parts)
        };
        let wr = if i % 4 == 3 { wr.signaled() } else { wr };
        qp.post_send(&[wr]).unwrap();
        let ridx = qp.next_recv_index();
        qp.post_recv(&[RecvWr::new(i, &s)]).unwrap();
        cq.produce_recv(QPN, ridx, 8);
        if i % 4 == 3 {
            cq.produce_send(QPN, idx, MLX5_OPCODE_SEND);
        }
        let n = cq.poll(&mut wc);
        for w in &wc[..n] {
            assert!(w.is_ok());
            match w.opcode {
                WcOpcode::Recv => {
                    assert_eq!(w.wr_id, next);
                    next += 1;
                }
                WcOpcode::Send => assert_eq!(w.wr_id % 4, 3),
                o => panic!("{o:?}"),
            }
        }
    }
    assert_eq!(next, 100_000);
}

#[test]
fn error_and_responder_cqes_map_to_verbs_completions() {
    let (_bus, mut qp, mut cq) = setup(QpCap::default());
    let s = sge();
    let idx = qp.next_send_index();
    qp.post_send(&[SendWr::rdma_read(
        77,
        &s,
        RemoteAddr {
            addr: 0x10,
            rkey: 0x20,
        },
    )])
    .unwrap();
    let mut wc = [WorkCompletion::default(); 4];
    // A requester error: remote access error, vendor syndrome 0x88.
    let mut c = zeroed();
    c.set_sop_drop_qpn(MLX5_OPCODE_RDMA_READ, QPN);
    c.wqe_counter.set(idx);
    {
        let b = zerocopy::IntoBytes::as_mut_bytes(&mut c);
        b[54] = 0x88;
        b[55] = CqeSyndrome::RemoteAccessErr as u8;
    }
    c.op_own = make_op_own(MLX5_CQE_REQ_ERR, 0, false, 0);
    cq.produce(&c);
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!(wc[0].wr_id, 77);
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
    assert_eq!(wc[0].vendor_err, 0x88);
    assert_eq!(wc[0].opcode, WcOpcode::RdmaRead);

    // Receives: SEND with immediate, WRITE with immediate, and a responder error.
    for i in 0..3 {
        qp.post_recv(&[RecvWr::new(10 + i, &s)]).unwrap();
    }
    let mut r = zeroed();
    r.set_sop_drop_qpn(0, QPN);
    r.set_flags_rqpn(0, 0, 0x456);
    r.imm_inval_pkey.set(0xdead_beef);
    r.byte_cnt.set(8);
    r.wqe_counter.set(0);
    r.op_own = make_op_own(MLX5_CQE_RESP_SEND_IMM, 0, false, 0);
    cq.produce(&r);
    r.wqe_counter.set(1);
    r.byte_cnt.set(0);
    r.op_own = make_op_own(MLX5_CQE_RESP_WR_IMM, 0, false, 0);
    cq.produce(&r);
    let mut e = zeroed();
    e.set_sop_drop_qpn(0, QPN);
    e.wqe_counter.set(2);
    zerocopy::IntoBytes::as_mut_bytes(&mut e)[55] = CqeSyndrome::LocalLengthErr as u8;
    e.op_own = make_op_own(MLX5_CQE_RESP_ERR, 0, false, 0);
    cq.produce(&e);
    assert_eq!(cq.poll(&mut wc), 3);
    assert_eq!(
        wc[0],
        WorkCompletion {
            wr_id: 10,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 8,
            imm_data: 0xdead_beef,
            qp_num: QPN,
            src_qp: 0x456,
            wc_flags: WcFlags::WITH_IMM,
            vendor_err: 0,
            sl: 0,
        }
    );
    assert_eq!(wc[1].opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(wc[1].wr_id, 11);
    assert!(wc[1].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(wc[2].wr_id, 12);
    assert_eq!(wc[2].status, WcStatus::LocLenErr);

    // Requester completions of READ, atomics and WRITE with immediate.
    for (op, opcode, len) in [
        (MLX5_OPCODE_ATOMIC_FA, WcOpcode::FetchAdd, 8),
        (MLX5_OPCODE_RDMA_WRITE_IMM, WcOpcode::RdmaWrite, 0),
    ] {
        let idx = qp.next_send_index();
        qp.post_send(&[SendWr::send(5, &s)]).unwrap();
        cq.produce_send(QPN, idx, op);
        assert_eq!(cq.poll(&mut wc), 1);
        assert_eq!((wc[0].opcode, wc[0].byte_len), (opcode, len));
    }
}

#[test]
fn every_syndrome_maps_as_rdma_core_maps_it() {
    let table = [
        (0x01, WcStatus::LocLenErr, 1),
        (0x02, WcStatus::LocQpOpErr, 2),
        (0x04, WcStatus::LocProtErr, 4),
        (0x05, WcStatus::WrFlushErr, 5),
        (0x06, WcStatus::MwBindErr, 6),
        (0x10, WcStatus::BadRespErr, 7),
        (0x11, WcStatus::LocAccessErr, 8),
        (0x12, WcStatus::RemInvReqErr, 9),
        (0x13, WcStatus::RemAccessErr, 10),
        (0x14, WcStatus::RemOpErr, 11),
        (0x15, WcStatus::RetryExcErr, 12),
        (0x16, WcStatus::RnrRetryExcErr, 13),
        (0x22, WcStatus::RemAbortErr, 16),
        (0x77, WcStatus::GeneralErr, 21),
    ];
    for (synd, status, ibv) in table {
        assert_eq!(WcStatus::from_syndrome(synd), status);
        assert_eq!(status as u8, ibv);
    }
    for s in CqeSyndrome::ALL {
        assert_ne!(WcStatus::from_syndrome(s as u8), WcStatus::GeneralErr);
    }
}

#[test]
fn attribute_tables_and_helpers() {
    use attr::ceil_log2;
    assert_eq!(
        [0, 1, 2, 3, 4, 5, 16, 17].map(ceil_log2),
        [0, 0, 1, 2, 2, 3, 4, 5]
    );
    for t in [
        Transition::ResetToInit,
        Transition::InitToRtr,
        Transition::RtrToRts,
    ] {
        for a in t.required() {
            assert!(!t.optional().contains(a), "{t} {a}");
        }
    }
    assert_eq!(
        Transition::between(QpState::Rts, QpState::Reset),
        Some(Transition::ToReset)
    );
    assert_eq!(Transition::between(QpState::Init, QpState::Rts), None);
    assert_eq!(
        format!("{:?}", AccessFlags::empty()),
        "AccessFlags(LOCAL_READ)"
    );
    assert_eq!(
        format!("{:?}", AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ),
        "AccessFlags(LOCAL_WRITE | REMOTE_READ)"
    );
}

/// Received SENDs (with and without immediate) report every field from the CQE,
/// through `poll` and `poll_one` alike: `byte_len`, the immediate (only with
/// `WITH_IMM`), the source QPN, `GRH` for every non-zero GRH type, whatever else the
/// CQE carries (SL, SE, the other bytes set at random).
#[test]
fn received_sends_report_every_field() {
    let cap = QpCap {
        max_recv_wr: 16,
        ..QpCap::default()
    };
    let (_bus, mut qp, mut cq) = setup(cap);
    let s = sge();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut wc = [WorkCompletion::default(); 1];
    for i in 0..3_000u64 {
        let ridx = qp.next_recv_index();
        qp.post_recv(&[RecvWr::new(i, &s)]).unwrap();
        let mut raw = [0u8; 64];
        for chunk in raw.chunks_mut(8) {
            chunk.copy_from_slice(&next().to_ne_bytes());
        }
        let mut c: Cqe64 = zerocopy::transmute!(raw);
        let imm = i % 2 == 1;
        let op = if imm {
            MLX5_CQE_RESP_SEND_IMM
        } else {
            ferroverbs_hw::datapath::cqe::MLX5_CQE_RESP_SEND
        };
        c.set_sop_drop_qpn((next() >> 56) as u8, QPN);
        c.wqe_counter.set(ridx);
        c.op_own = make_op_own(op, 0, next() & 1 == 1, 0);
        cq.produce(&c);
        let w = if i % 3 == 0 {
            assert_eq!(cq.poll(&mut wc), 1);
            wc[0]
        } else {
            cq.poll_one().expect("a completion")
        };
        let mut flags = if imm {
            WcFlags::WITH_IMM
        } else {
            WcFlags::empty()
        };
        if c.grh_type() != 0 {
            flags = flags | WcFlags::GRH;
        }
        let want = WorkCompletion {
            wr_id: i,
            qp_num: QPN,
            byte_len: c.byte_cnt(),
            opcode: WcOpcode::Recv,
            wc_flags: flags,
            status: WcStatus::Success,
            vendor_err: 0,
            imm_data: if imm { c.imm() } else { 0 },
            src_qp: c.src_qpn(),
            // libmlx5's `wc->sl`: bits 27..24 of `flags_rqpn`.
            sl: ((c.flags_rqpn.get() >> 24) & 0xf) as u8,
        };
        assert_eq!(w, want, "{c:?}");
    }
}

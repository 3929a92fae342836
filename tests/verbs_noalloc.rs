//! The fast path allocates nothing: a counting global allocator watches
//! `post_send` (one inline SEND, a list of 16 gather SENDs, RDMA and atomic requests),
//! `post_recv`, `poll` (hits and misses), and the typed entries (`QueuePair::post`
//! batches: `send_inline`, `send`, `write_imm`, ... `ring`, a batch published on drop;
//! the one-request `QueuePair::send_inline` and `QueuePair::send`;
//! `CompletionQueue::poll_one`) of the verbs code over `MemBus`, with the
//! test playing the device (`verbs::fastpath`); and the same calls on real QPs and CQs
//! of two simulated NICs (whose doorbells the simulator services on the posting
//! thread, with its packet path allocating nothing in steady state). Allocations are
//! counted per thread, only while a test has switched counting on.

mod counting_alloc;
use counting_alloc::allocations;
use std::sync::Arc;

use ferroverbs::verbs::fastpath::{DetachedCq, DetachedQp};
use ferroverbs::verbs::{
    QpCap, QpState, RecvWr, RemoteAddr, SendFlags, SendWr, Sge, WorkCompletion,
};
use ferroverbs_hw::datapath::wqe::MLX5_OPCODE_SEND;
use ferroverbs_hw::MemBus;

#[global_allocator]
static ALLOC: counting_alloc::Counting = counting_alloc::Counting;

#[test]
fn the_counter_counts() {
    assert_eq!(allocations(|| drop(vec![1u8; 10])), 2);
    assert_eq!(allocations(|| ()), 0);
}

#[test]
fn post_and_poll_allocate_nothing() {
    let bus = Arc::new(MemBus::new(1 << 16));
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    };
    let mut cq = DetachedCq::new(&bus, 1023).unwrap();
    let mut qp = DetachedQp::new(&bus, 7, &cap, false).unwrap();
    cq.attach(&qp);
    qp.set_state(QpState::Rts);
    let sge = [Sge {
        addr: 0x1000,
        length: 64,
        lkey: 0x100,
    }];
    let payload = [0xa5u8; 64];
    let parts: [&[u8]; 1] = [&payload];
    let remote = RemoteAddr {
        addr: 0x8000,
        rkey: 0x200,
    };
    let list: Vec<SendWr<'_>> = (0..16).map(|i| SendWr::send(i, &sge)).collect();
    let recvs: Vec<RecvWr<'_>> = (0..8).map(|i| RecvWr::new(i, &sge)).collect();
    let mut wc = [WorkCompletion::default(); 32];

    let n = allocations(|| {
        for round in 0..200u64 {
            // One inline SEND (BlueFlame), then a list of 16 (one doorbell).
            let idx = qp.next_send_index();
            qp.post_send(&[SendWr::send_inline(round, &parts).signaled()])
                .unwrap();
            cq.produce_send(7, idx, MLX5_OPCODE_SEND);
            qp.post_send(&list).unwrap();
            let idx = qp.next_send_index();
            qp.post_send(&[
                SendWr::rdma_write(1, &sge, remote),
                SendWr::rdma_read(2, &sge, remote),
                SendWr::atomic_fetch_add(3, &sge, remote, 1),
                SendWr::atomic_cmp_swp(4, &sge, remote, 1, 2).signaled(),
            ])
            .unwrap();
            let _ = idx;
            let last = qp.next_send_index().wrapping_sub(1);
            cq.produce_send(7, last, MLX5_OPCODE_SEND);
            // Receives and their completions.
            let r = qp.next_recv_index();
            qp.post_recv(&recvs).unwrap();
            for k in 0..8u16 {
                cq.produce_recv(7, r.wrapping_add(k), 64);
            }
            // Poll: hits, then an empty poll.
            let mut got = 0;
            while got < 10 {
                got += cq.poll(&mut wc);
            }
            assert_eq!(cq.poll(&mut wc), 0);
            // The typed entries: one inline SEND (BlueFlame), then a batch of 16
            // gather SENDs and an RDMA WRITE (one doorbell), a batch dropped without
            // `ring` (published on drop), and `poll_one` for their completions.
            let idx = qp.next_send_index();
            let mut b = qp.post().unwrap();
            b.send_inline(round, &payload, SendFlags::SIGNALED).unwrap();
            b.ring();
            cq.produce_send(7, idx, MLX5_OPCODE_SEND);
            let mut b = qp.post().unwrap();
            for i in 0..16 {
                b.send(i, &sge[0], SendFlags::NONE).unwrap();
            }
            b.write_imm(17, &sge[0], remote, 5, SendFlags::SIGNALED)
                .unwrap();
            let last = b.next_index().wrapping_sub(1);
            b.ring();
            cq.produce_send(7, last, MLX5_OPCODE_SEND);
            {
                let mut b = qp.post().unwrap();
                b.send_imm_inline(18, &payload[..9], 1, SendFlags::SIGNALED)
                    .unwrap();
                let last = b.next_index();
                b.post(&SendWr::rdma_read(19, &sge, remote).signaled())
                    .unwrap();
                cq.produce_send(7, last, MLX5_OPCODE_SEND);
            }
            let last = qp.next_send_index().wrapping_sub(1);
            cq.produce_send(7, last, MLX5_OPCODE_SEND);
            // The one-request entries: an inline SEND and a gather SEND, each rung.
            let idx = qp.next_send_index();
            qp.send_inline(20, &payload, SendFlags::SIGNALED).unwrap();
            cq.produce_send(7, idx, MLX5_OPCODE_SEND);
            let idx = qp.next_send_index();
            qp.send(21, &sge[0], SendFlags::SIGNALED).unwrap();
            cq.produce_send(7, idx, MLX5_OPCODE_SEND);
            for _ in 0..6 {
                assert!(cq.poll_one().is_some());
            }
            assert!(cq.poll_one().is_none());
        }
    });
    assert_eq!(n, 0, "allocator calls on the fast path");
}

/// The one-request inline entry's own straight path (a QP without BlueFlame over a
/// bus with a direct register), with its out-of-line paths: the counters' exact
/// measure (completions left outstanding), the budget placed again at the ring end,
/// payloads outside its gate.
#[test]
fn one_request_inline_without_blueflame_allocates_nothing() {
    let bus = Arc::new(MemBus::new(1 << 16));
    let cap = QpCap {
        max_send_wr: 16,
        max_inline_data: 128,
        ..QpCap::default()
    };
    let mut cq = DetachedCq::new(&bus, 1023).unwrap();
    let mut qp = DetachedQp::new_db_only(&bus, 7, &cap, false).unwrap();
    cq.attach(&qp);
    qp.set_state(QpState::Rts);
    let payload = [0x5au8; 128];
    let n = allocations(|| {
        for round in 0..500u64 {
            // Two posts, the second while the first is outstanding, then both
            // completed by one CQE of the second.
            let len = [64, 1, 33, 100, 64][round as usize % 5];
            qp.send_inline(round, &payload[..len], SendFlags::NONE)
                .unwrap();
            let idx = qp.next_send_index();
            qp.send_inline(round, &payload[..64], SendFlags::SIGNALED)
                .unwrap();
            cq.produce_send(7, idx, MLX5_OPCODE_SEND);
            assert_eq!(cq.poll_one().map(|w| w.wr_id), Some(round));
        }
    });
    assert_eq!(n, 0, "allocator calls on the fast path");
}

#[test]
fn verbs_objects_on_the_simulator_allocate_nothing_in_steady_state() {
    steady_state(ferroverbs::verbs::CqeSize::Bytes64, false);
}

/// The same on CQs of 128-byte CQEs, the receiver scattering to CQE: its 64-byte
/// messages come in the CQE (`MLX5_INLINE_SCATTER_64`) and the poll copies them.
#[test]
fn cqs_of_128_byte_cqes_allocate_nothing_in_steady_state() {
    steady_state(ferroverbs::verbs::CqeSize::Bytes128, true);
}

/// Two simulated NICs' QPs on CQs of `size`, the receiver with scatter to CQE when
/// `scatter`: rounds of SENDs through every post and poll entry allocate nothing.
fn steady_state(size: ferroverbs::verbs::CqeSize, scatter: bool) {
    use ferroverbs::verbs::{
        AccessFlags, AddressVector, CqOptions, Mtu, QpInitAttr, RtrAttr, RtsAttr,
    };
    use ferroverbs::{Device, DeviceConfig, GidEntry};
    use ferroverbs_sim::{Fabric, Sim, SimConfig};

    let fabric = Fabric::new(3);
    let (sa, sb) = (
        Sim::new(SimConfig::deterministic(5, 1)),
        Sim::new(SimConfig::deterministic(6, 1)),
    );
    fabric.attach(&sa);
    fabric.attach(&sb);
    let open = |sim: &Sim, n: u8| {
        let gid = GidEntry::ipv4(0, [10, 0, 0, n], sim.port_macs()[0]);
        let c = sim.clock().clone();
        let cfg = DeviceConfig::default()
            .with_clock(Arc::new(ferroverbs::SteppedClock::new(
                {
                    let c = c.clone();
                    move || c.now()
                },
                move |d| c.advance(d),
            )))
            .with_gid(gid);
        (Device::open(sim.bus(), cfg).unwrap(), gid)
    };
    let (ca, ga) = open(&sa, 1);
    let (cb, gb) = open(&sb, 2);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let opts = CqOptions {
        cqe_size: size,
        ..CqOptions::default()
    };
    let (mut cqa, mut cqb) = (
        ca.create_cq_with(64, opts).unwrap(),
        cb.create_cq_with(64, opts).unwrap(),
    );
    let mut qa = pa
        .create_qp(&QpInitAttr::new(&cqa, &cqa, QpCap::default()))
        .unwrap();
    let mut ib = QpInitAttr::new(&cqb, &cqb, QpCap::default());
    ib.scatter_to_cqe = Some(scatter);
    let mut qb = pb.create_qp(&ib).unwrap();
    qa.to_init(1, AccessFlags::empty()).unwrap();
    qb.to_init(1, AccessFlags::empty()).unwrap();
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    let rtr = |peer: &GidEntry, qpn, psn| RtrAttr {
        av: AddressVector::new(peer.gid, peer.mac, 0),
        path_mtu: Mtu::Mtu1024,
        dest_qpn: qpn,
        rq_psn: psn,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 1,
    };
    qa.to_rtr(&rtr(&gb, nb, 0x200)).unwrap();
    qb.to_rtr(&rtr(&ga, na, 0x100)).unwrap();
    qa.to_rts(&RtsAttr::new(0x100)).unwrap();
    qb.to_rts(&RtsAttr::new(0x200)).unwrap();
    let rb = pb.alloc_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let sg = [rb.sge(0, 64).unwrap()];
    let payload = [7u8; 64];
    let parts: [&[u8]; 1] = [&payload];
    let mut wc = [WorkCompletion::default(); 8];
    let mut round = |count: bool| -> u64 {
        let mut n = 0;
        let mut run = |f: &mut dyn FnMut()| {
            if count {
                n += allocations(f);
            } else {
                f();
            }
        };
        run(&mut || qb.post_recv(&[RecvWr::new(1, &sg)]).unwrap());
        run(&mut || {
            qa.post_send(&[SendWr::send_inline(2, &parts).signaled()])
                .unwrap()
        });
        let mut got = (0, 0);
        while got != (1, 1) {
            fabric.run_until_idle();
            run(&mut || {
                got.0 += cqb.poll(&mut wc);
                got.1 += cqa.poll(&mut wc);
            });
        }
        // The same through the typed entries: a batch of one inline SEND, and
        // `poll_one`.
        run(&mut || qb.post_recv(&[RecvWr::new(3, &sg)]).unwrap());
        run(&mut || {
            let mut b = qa.post().unwrap();
            b.send_inline(4, &payload, SendFlags::SIGNALED).unwrap();
            b.ring();
        });
        // And the one-request entry (its doorbell through the simulator's bus).
        run(&mut || qb.post_recv(&[RecvWr::new(5, &sg)]).unwrap());
        run(&mut || qa.send_inline(6, &payload, SendFlags::SIGNALED).unwrap());
        // Both in flight; their completions come in order.
        for (recv_id, send_id) in [(3u64, 4u64), (5, 6)] {
            if scatter {
                // The device leaves the buffer alone: the poll copies the message.
                rb.fill(0, 64, 0);
            }
            let mut got = (None, None);
            while got.0.is_none() || got.1.is_none() {
                fabric.run_until_idle();
                run(&mut || {
                    got.0 = got.0.or(cqb.poll_one());
                    got.1 = got.1.or(cqa.poll_one());
                });
            }
            let (r, s) = (got.0.unwrap(), got.1.unwrap());
            assert!(r.is_ok() && s.is_ok());
            assert_eq!((r.wr_id, r.byte_len, s.wr_id), (recv_id, 64, send_id));
            if scatter {
                assert_eq!(
                    rb.to_vec()[..64],
                    payload,
                    "the message copied from the CQE"
                );
            }
        }
        n
    };
    // Warm up (the simulator's frame pool fills), then count.
    for _ in 0..100 {
        round(false);
    }
    let mut total = 0;
    for _ in 0..1000 {
        total += round(true);
    }
    assert_eq!(total, 0, "allocator calls in post_send, post_recv and poll");
}

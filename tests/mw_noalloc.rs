//! Memory-window requests on the fast path allocate nothing and complete with their
//! own opcodes: `SendBatch::bind_mw_raw` and `SendBatch::local_inv` write UMR WQEs
//! (rdma-core's `set_bind_wr` layout, 12 and 8 DS) into the ring, and the requester
//! CQEs of those WQEs, polled with `poll_one`, are `WcOpcode::BindMw` and
//! `WcOpcode::LocalInv`; a counting global allocator watches both, with the test
//! playing the device (`verbs::fastpath`).

mod counting_alloc;
use counting_alloc::allocations;
use std::sync::Arc;

use ferroverbs::verbs::fastpath::{DetachedCq, DetachedQp};
use ferroverbs::verbs::{AccessFlags, MwBind, MwType, QpCap, QpState, SendFlags, WcOpcode};
use ferroverbs_hw::datapath::wqe::MLX5_OPCODE_UMR;
use ferroverbs_hw::MemBus;

#[global_allocator]
static ALLOC: counting_alloc::Counting = counting_alloc::Counting;

#[test]
fn binds_and_local_invalidations_allocate_nothing_and_complete_with_their_opcodes() {
    let bus = Arc::new(MemBus::new(1 << 16));
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut cq = DetachedCq::new(&bus, 255).unwrap();
    let mut qp = DetachedQp::new(&bus, 9, &cap, false).unwrap();
    cq.attach(&qp);
    qp.set_state(QpState::Rts);
    let bind = MwBind {
        lkey: 0x300,
        addr: 0x7000_0000,
        len: 4096,
        access: AccessFlags::REMOTE_WRITE,
    };
    for round in 0..4u64 {
        let first = qp.next_send_index();
        let n = allocations(|| {
            let mut b = qp.post().unwrap();
            b.bind_mw_raw(
                10 + round,
                0x4201,
                MwType::Type2,
                0x4202,
                &bind,
                SendFlags::SIGNALED,
            )
            .unwrap();
            b.local_inv(20 + round, 0x4202, SendFlags::SIGNALED)
                .unwrap();
            b.ring();
        });
        assert_eq!(n, 0, "round {round}");
        // The bind takes 3 WQEBBs (12 DS), the invalidation 2 (8 DS).
        assert_eq!(qp.next_send_index(), first.wrapping_add(5));
        cq.produce_send(9, first, MLX5_OPCODE_UMR);
        cq.produce_send(9, first.wrapping_add(3), MLX5_OPCODE_UMR);
        let mut got = Vec::with_capacity(2);
        let n = allocations(|| {
            got.push(cq.poll_one().unwrap());
            got.push(cq.poll_one().unwrap());
        });
        assert_eq!(n, 0);
        assert_eq!(
            got.iter().map(|w| (w.wr_id, w.opcode)).collect::<Vec<_>>(),
            [
                (10 + round, WcOpcode::BindMw),
                (20 + round, WcOpcode::LocalInv)
            ]
        );
    }
}

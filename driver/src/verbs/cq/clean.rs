//! Removing a QP's completions from a CQ without polling them, as libmlx5 does when
//! a QP moves to RESET or is destroyed (rdma-core `providers/mlx5/verbs.c`
//! `mlx5_modify_qp` and `mlx5_destroy_qp` call `mlx5_cq_clean`;
//! `providers/mlx5/cq.c` `__mlx5_cq_clean`).
//!
//! The walk: from the consumer index, the entries software owns (at most the
//! ring) up to the producer index; then back from the newest to the oldest, each
//! entry of the QP dropped (a responder entry of a QP with an SRQ hands its WQE back
//! to the SRQ, `mlx5_free_srq_wqe`), each other entry moved up by the number dropped
//! after it so far, keeping the owner bit its new slot wants. The consumer index
//! then moves on by the number dropped, published after the moves: the surviving
//! completions sit, in their order, right below the producer index, and the device
//! never sees a slot it may write that software still reads.

use ferroverbs_hw::datapath::cqe::{
    sw_owned, MLX5_CQE_RESP_ERR, MLX5_CQE_RESP_SEND, MLX5_CQE_RESP_SEND_IMM,
    MLX5_CQE_RESP_SEND_INV, MLX5_CQE_RESP_WR_IMM,
};
use ferroverbs_hw::Bus;

use super::{CompletionQueue, Poller};
use crate::ring::QueueMem;

/// 24-bit CQ indexes.
const MASK24: u32 = 0x00ff_ffff;

/// Whether a CQE opcode is a responder's (rdma-core `cq.c` `is_responder`).
fn is_responder(op: u8) -> bool {
    matches!(
        op,
        MLX5_CQE_RESP_WR_IMM
            | MLX5_CQE_RESP_SEND
            | MLX5_CQE_RESP_SEND_IMM
            | MLX5_CQE_RESP_SEND_INV
            | MLX5_CQE_RESP_ERR
    )
}

impl<B: Bus> CompletionQueue<'_, B> {
    /// Removes every completion of QP `qp_num` that the CQ holds and nobody polled,
    /// keeping the others in their order (libmlx5 `__mlx5_cq_clean`, see the
    /// module documentation), and returns how many it removed. A receive
    /// completion of a QP with a shared receive queue gives its WQE back to the
    /// SRQ, as its poll would have (without a work completion).
    ///
    /// For a QP moved to RESET (its rings start over, so a completion of its past
    /// would name a slot of its future) or destroyed: the device writes no more
    /// completions of the QP then, and the ones it wrote go. `&mut self`: no poll
    /// runs meanwhile (the drop-in's `ibv_modify_qp` takes the CQ's lock, as
    /// `mlx5_cq_clean` takes the CQ's spin lock). A control-path operation: it
    /// reads every entry it walks and may look the QP up in a hash table.
    pub fn discard_completions_of(&mut self, qp_num: u32) -> u32 {
        self.p.clean(qp_num & MASK24)
    }
}

impl<B: Bus> Poller<B> {
    /// See [`CompletionQueue::discard_completions_of`].
    fn clean(&mut self, qpn: u32) -> u32 {
        let ci = self.cur.consumer_index();
        let stride = self.cur.stride();
        let n = self.ncqe;
        let at = |i: u32| (i & (n - 1)) as usize * stride;
        let mem = self.ring.mem();
        // The producer index: the entries software owns from `ci` on.
        let mut owned = 0;
        while owned < n {
            let i = ci.wrapping_add(owned) & MASK24;
            if !sw_owned(mem.load_u8(at(i) + stride - 1), i, n) {
                break;
            }
            owned += 1;
        }
        if owned == 0 {
            return 0;
        }
        // The entries' bodies are read after their owner bytes.
        self.bus.rmb();
        let qps = self.qps.get_mut().unwrap_or_else(|p| p.into_inner());
        let srq = qps
            .at
            .get(qpn)
            .and_then(|k| qps.list.get(k))
            .and_then(|q| q.srq().cloned());
        let mut freed = 0u32;
        // A whole entry: a 128-byte one's first half may hold scattered data.
        let mut whole = [0u8; 128];
        let entry = &mut whole[..stride];
        for j in (0..owned).rev() {
            let i = ci.wrapping_add(j) & MASK24;
            mem.read(at(i), entry);
            // `struct mlx5_cqe64` in the entry's last 64 bytes: `sop_drop_qpn` at
            // 56 (QPN in its low 24 bits), `wqe_counter` at 60, `op_own` at 63.
            let c = &entry[stride - 64..];
            let of = u32::from_be_bytes([0, c[57], c[58], c[59]]);
            if of == qpn {
                if is_responder(c[63] >> 4) {
                    if let Some(s) = &srq {
                        // `mlx5_free_srq_wqe`: the WQE is free again (its
                        // `wr_id` goes with the completion).
                        let _ = s.retire(u16::from_be_bytes([c[60], c[61]]));
                    }
                }
                freed += 1;
            } else if freed > 0 {
                let to = i.wrapping_add(freed) & MASK24;
                // The owner bit of the slot it moves to (software's there too: `to`
                // lies between `ci` and the producer index).
                entry[stride - 1] = (entry[stride - 1] & !1) | u8::from(to & n != 0);
                mem.write(at(to), entry);
            }
        }
        if freed > 0 {
            // The moves before the index that lets the device have the slots
            // (`udma_to_device_barrier`, then `update_cons_index`).
            self.bus.wmb();
            self.cur.seek(ci.wrapping_add(freed) & MASK24);
        }
        freed
    }
}

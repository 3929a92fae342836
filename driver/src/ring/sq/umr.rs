//! UMR WQEs on the send ring: memory window binds and local invalidations, laid out as
//! rdma-core's mlx5 provider writes them (`providers/mlx5/qp.c` `set_bind_wr`): the
//! control segment (opcode `MLX5_OPCODE_UMR`, `imm` = the key modified), then the
//! segments of [`MwUmr`] (8 DS without a translation, 12 with one).

use ferroverbs_hw::datapath::umr::{MwUmr, UMR_KLM_BYTES};
use ferroverbs_hw::datapath::wqe::{wqebbs_for_ds, MLX5_OPCODE_UMR};

use super::{unsupported, wrap, LastWqe, QpType, SendFlags, SendQueue, BB, DS};
use crate::ring::mem::{DoorbellWord, QueueMem};
use crate::ring::PostError;

/// What the slot after a UMR WQE's first holds in the `wr_id` table (the WQE spans at
/// least two WQEBBs, so the slot is its own until it completes): whether it is a local
/// invalidation, so that its completion reports `IBV_WC_LOCAL_INV` rather than
/// `IBV_WC_BIND_MW` (rdma-core keeps the same in `sq.wr_data`).
pub const UMR_MARK_BIND: u64 = 0;
/// See [`UMR_MARK_BIND`].
pub const UMR_MARK_LOCAL_INV: u64 = 1;

impl<M: QueueMem, D: DoorbellWord> SendQueue<M, D> {
    /// Writes the UMR WQE `u` at `cur_post` (RC and UC queues) and advances
    /// `cur_post`; `local_inv` marks an invalidation ([`UMR_MARK_LOCAL_INV`]). Writes
    /// nothing on error. Does not allocate.
    pub fn write_umr(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        u: &MwUmr,
        local_inv: bool,
    ) -> Result<LastWqe, PostError> {
        if self.cfg.qp_type == QpType::Ud {
            return Err(unsupported(MLX5_OPCODE_UMR, self.cfg.qp_type));
        }
        let n = u.bytes();
        let ds = (1 + n / DS) as u8;
        let wqebbs = wqebbs_for_ds(ds);
        let free = self.free();
        if u32::from(wqebbs) > free {
            return Err(PostError::QueueFull {
                needed: u32::from(wqebbs),
                free,
            });
        }
        let mut segs = [0u8; UMR_KLM_BYTES];
        u.emit(&mut segs);
        let index = self.cur_post;
        let slot = (u32::from(index) & self.mask) as usize;
        let start = slot * BB;
        let ring_len = self.ring_len;
        let mut off = wrap(start + DS, ring_len);
        for seg in segs[..n].chunks_exact(DS) {
            let mut s = [0u8; 16];
            s.copy_from_slice(seg);
            self.buf.write16(off, &s);
            off = wrap(off + DS, ring_len);
        }
        let next = ((u32::from(index) + 1) & self.mask) as usize;
        let mark = if local_inv {
            UMR_MARK_LOCAL_INV
        } else {
            UMR_MARK_BIND
        };
        self.wr_id[next].store(mark, std::sync::atomic::Ordering::Relaxed);
        let (ctrl_head, ctrl) = self.ctrl(index, MLX5_OPCODE_UMR, ds, flags, u.key);
        self.buf.write16(start, &ctrl);
        Ok(self.finish(slot, wr_id, index, ds, false, ctrl_head))
    }
}

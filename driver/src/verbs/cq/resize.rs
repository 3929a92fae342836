//! CQ resize: `MODIFY_CQ` with `op_mod` resize (Linux `mlx5_ib_resize_cq`), and the
//! move of the completions not yet polled to the new ring as libmlx5 moves them
//! (rdma-core `providers/mlx5/cq.c` `mlx5_cq_resize_copy_cqes`).
//!
//! The device keeps its producer index across the switch: it writes a resize CQE
//! (opcode `MLX5_CQE_RESIZE_CQ`) into the old ring at the entry of the next producer
//! index `r`, and the CQEs after it into the new ring at their indexes, with the owner
//! bits of the new size. Software copies the entries `ci .. r` it had not polled to
//! the new ring one entry further on (`ci + 1 .. r + 1`, owner bits of the new size),
//! and steps its consumer index over the resize CQE to `ci + 1`: the new ring then
//! holds every completion once, in order.

use std::sync::Arc;

use ferroverbs_hw::control::caps::cmd_hca_cap as g;
use ferroverbs_hw::control::cq::{modify_cq_out, resize_cq_input};
use ferroverbs_hw::datapath::cqe::{sw_owned, CQE_OP_OWN_INIT, MLX5_CQE_RESIZE_CQ};
use ferroverbs_hw::{Bus, DmaPerm};

use super::{CompletionQueue, FastMem, Poller};
use crate::dma::{DmaBuf, PAGE_SIZE};
use crate::ring::QueueMem;
use crate::verbs::fastmem::CqeCursor;
use crate::verbs::{exec, Error, Result};

/// 24-bit CQ indexes.
const MASK24: u32 = 0x00ff_ffff;

impl<B: Bus> CompletionQueue<'_, B> {
    /// Resizes the CQ to room for at least `cqe` completions (`ibv_resize_cq`): a
    /// ring of the next power of two above `cqe` entries, as [`Context::create_cq`]
    /// sizes it ([`CompletionQueue::capacity`] reports the new size). Completions not
    /// yet polled stay, in order, each polled once, and completions that arrive
    /// during the resize land in the new ring. Growing and shrinking both work; a
    /// size that gives the ring it has already does nothing (as libmlx5).
    ///
    /// Errors: `cqe` 0 or above the device's `log_max_cq_sz` limit
    /// ([`Error::CapExceeded`]); a ring that would not have more entries than the
    /// completions waiting in the CQ ([`Error::CqResizeBelowUnpolled`], as the
    /// firmware refuses it too: `EINVAL` in verbs); a CQ that cannot be resized (in
    /// error, full, a device without `cq_resize`: the command's error, or
    /// [`Error::CqResizeLost`] when the device answered but wrote no resize CQE). On
    /// any error the CQ keeps its ring and its completions.
    ///
    /// Thread safety: `&mut self`, so no poll or arm runs during the resize (the
    /// drop-in's `ibv_resize_cq` takes the CQ's lock, as libmlx5's `mlx5_resize_cq`
    /// takes its spin lock). The device keeps writing completions while the command
    /// runs. The poll path is unchanged: it reads the ring through the same cursor,
    /// rebuilt here over the new ring.
    ///
    /// The allocation the CQ was created with holds its doorbell record, which a
    /// resize does not move (`MODIFY_CQ` changes only the buffer), so it stays until
    /// the CQ is destroyed; a ring replaced by a later resize is freed.
    ///
    /// [`Context::create_cq`]: crate::Context::create_cq
    pub fn resize(&mut self, cqe: u32) -> Result<()> {
        let ctx = self.core.ctx;
        let max_log = ctx.cap(g::log_max_cq_sz).min(24);
        let max = (1u64 << max_log) - 1;
        if cqe == 0 || u64::from(cqe) > max {
            return Err(Error::CapExceeded {
                what: "CQ entries",
                requested: cqe.into(),
                max,
            });
        }
        if ctx.cap(g::cq_resize) == 0 {
            return Err(Error::InvalidArgument(
                "the device does not support CQ resize (cq_resize capability 0)",
            ));
        }
        let ncqe = (cqe + 1).next_power_of_two();
        if ncqe == self.p.ncqe {
            return Ok(());
        }
        let unpolled = self.p.unpolled();
        if unpolled >= ncqe {
            return Err(Error::CqResizeBelowUnpolled {
                unpolled,
                entries: ncqe,
            });
        }
        let bus = Arc::clone(&self.p.bus);
        // The new ring keeps the CQE size (the firmware refuses another one).
        let stride = self.p.cqe_size().bytes();
        let ring_len = ncqe as usize * stride;
        let buf = Arc::new(DmaBuf::new(&bus, ring_len, DmaPerm::RW)?);
        let mem = FastMem::new(&buf, 0, ring_len).ok_or(Error::InvalidArgument("CQ geometry"))?;
        for i in 0..ncqe as usize {
            mem.write((i + 1) * stride - 1, &[CQE_OP_OWN_INIT]);
        }
        let pas: Vec<u64> = (0..ring_len.div_ceil(PAGE_SIZE) as u64)
            .map(|i| buf.iova() + i * PAGE_SIZE as u64)
            .collect();
        let input = resize_cq_input(self.core.cqn, ncqe.trailing_zeros() as u8, stride, 0, &pas);
        exec(ctx, &input, modify_cq_out::SIZE)?;
        self.p.switch_to(&buf, mem, ncqe, self.core.cqn)?;
        let mut slot = self.core.resized.lock().unwrap_or_else(|p| p.into_inner());
        // The ring of an earlier resize: the device no longer writes it.
        *slot = Some(buf);
        Ok(())
    }
}

impl<B: Bus> Poller<B> {
    /// Completions the device wrote that software has not polled: the entries from
    /// the consumer index on that software owns (at most the ring).
    fn unpolled(&self) -> u32 {
        let ci = self.cur.consumer_index();
        let mem = self.ring.mem();
        let stride = self.cur.stride();
        let mut n = 0;
        while n < self.ncqe {
            let i = ci.wrapping_add(n) & MASK24;
            let at = ((i & (self.ncqe - 1)) as usize + 1) * stride - 1;
            if !sw_owned(mem.load_u8(at), i, self.ncqe) {
                break;
            }
            n += 1;
        }
        n
    }

    /// After the device accepted the resize to the `ncqe` entries of `mem` (over
    /// `buf`): the completions from the consumer index up to the resize CQE copied to
    /// the new ring one entry further on, then the ring, the cursor (at the consumer
    /// index after the resize CQE, published) and the size switched. Nothing changes
    /// when the resize CQE is not found ([`Error::CqResizeLost`]).
    fn switch_to(
        &mut self,
        buf: &Arc<DmaBuf<B>>,
        mem: FastMem<B>,
        ncqe: u32,
        cqn: u32,
    ) -> Result<()> {
        let old = self.ring.mem();
        let ci = self.cur.consumer_index();
        let stride = self.cur.stride();
        let mut i = ci;
        // A whole entry: a 128-byte one's first half may hold scattered data.
        let mut whole = [0u8; 128];
        let entry = &mut whole[..stride];
        let mut found = false;
        for _ in 0..self.ncqe {
            let at = (i & (self.ncqe - 1)) as usize * stride;
            let op_own = old.load_u8(at + stride - 1);
            if !sw_owned(op_own, i, self.ncqe) {
                break;
            }
            self.bus.rmb();
            if op_own >> 4 == MLX5_CQE_RESIZE_CQ {
                found = true;
                break;
            }
            old.read(at, entry);
            let to = i.wrapping_add(1) & MASK24;
            entry[stride - 1] = (entry[stride - 1] & !1) | u8::from(to & ncqe != 0);
            mem.write((to & (ncqe - 1)) as usize * stride, entry);
            i = to;
        }
        if !found {
            return Err(Error::CqResizeLost { cqn });
        }
        // The doorbell record stays in the allocation the CQ was created with (the
        // ring keeps its record words).
        let rec = self
            .cur
            .record_offset(&self.buf)
            .ok_or(Error::InvalidArgument("CQ geometry"))?;
        let cur = CqeCursor::resumed(
            buf,
            ncqe,
            stride,
            &self.buf,
            rec,
            ci.wrapping_add(1) & MASK24,
        )
        .ok_or(Error::InvalidArgument("CQ geometry"))?;
        self.ring
            .replace_buffer(mem, ncqe)
            .map_err(|_| Error::InvalidArgument("CQ geometry"))?;
        self.cur = cur;
        self.ncqe = ncqe;
        Ok(())
    }
}

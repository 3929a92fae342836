//! RESIZE_CQ as Linux `ib_uverbs_resize_cq` and `mlx5_ib_resize_cq` (user CQ,
//! `resize_user`) execute it: the new buffer libmlx5 allocated (`mlx5_ib_resize_cq`'s
//! `buf_addr`, `cqe_size`) is mapped for the device, `MODIFY_CQ` with `op_mod`
//! resize moves the CQ there, and the old buffer's mapping goes. The device writes
//! the resize CQE into the old buffer before the command completes, so libmlx5's
//! `mlx5_cq_resize_copy_cqes`, right after this command, finds it and copies the
//! completions it had not polled to the new buffer.

use ferroverbs_hw::control::caps::cmd_hca_cap as g;
use ferroverbs_hw::control::cmd::{new_input, Opcode};
use ferroverbs_hw::control::cq::{cqc, modify_cq_out, query_cq_in, query_cq_out, resize_cq_input};
use ferroverbs_hw::DmaPerm;

use super::{exec, Mapped, Ucontext};
use crate::abi::{self, Resp};
use crate::file::Cmd;
use crate::user::PAGE;
use crate::Errno;

impl Ucontext {
    /// RESIZE_CQ. Errors as Linux gives them: an unknown handle, 0 entries or more
    /// than the device's `log_max_cq_sz` allows, short or nonzero reserved driver
    /// data, a CQE size other than the CQ's: EINVAL; a buffer that is not the
    /// application's mapped memory: EFAULT-like errors of the mapping; a resize the
    /// firmware refuses (fewer entries than the completions not yet polled need,
    /// a CQ in error): EINVAL (`mlx5_cmd_check`). The same number of entries answers
    /// at once with the CQ's size.
    pub(super) fn resize_cq(&mut self, c: &Cmd<'_>) -> Result<(), Errno> {
        use abi::mlx5_resize_cq as u;
        use abi::resize_cq as q;
        let h = c.core.u32(q::cq_handle);
        let cqe = c.core.u32(q::cqe);
        let cqn = self.cqs.get(&h).ok_or(Errno::EINVAL)?.cqn;
        if self.nic.cap(g::cq_resize) == 0 {
            return Err(Errno::ENOSYS);
        }
        let max_log = self.nic.cap(g::log_max_cq_sz).min(24);
        if cqe == 0 || u64::from(cqe) > 1 << max_log {
            return Err(Errno::EINVAL);
        }
        let entries = (u64::from(cqe) + 1).next_power_of_two();
        if entries > (1 << max_log) {
            return Err(Errno::EINVAL);
        }
        let (log_now, cqe_size_now) = self.cq_geometry(cqn)?;
        if entries == 1 << log_now {
            return Self::resized(c, entries);
        }
        if c.udata_len < abi::mlx5_resize_cq::SIZE {
            return Err(Errno::EINVAL);
        }
        if c.udata.u16(u::reserved0) != 0 || c.udata.u32(u::reserved1) != 0 {
            return Err(Errno::EINVAL);
        }
        let cqe_size = usize::from(c.udata.u16(u::cqe_size));
        if cqe_size != cqe_size_now {
            return Err(Errno::EINVAL);
        }
        let buf = c.udata.u64(u::buf_addr);
        if !buf.is_multiple_of(PAGE) {
            return Err(Errno::EINVAL);
        }
        let mem = Mapped::new(self.nic, buf, entries as usize * cqe_size, DmaPerm::RW)?;
        let input = resize_cq_input(cqn, entries.trailing_zeros() as u8, cqe_size, 0, &mem.pas());
        if let Err(e) = exec(self.nic, &input, modify_cq_out::SIZE) {
            mem.unmap(self.nic);
            return Err(e);
        }
        // The device writes the new buffer only from now on.
        let cq = self.cqs.get_mut(&h).ok_or(Errno::EINVAL)?;
        let old = std::mem::replace(&mut cq.mem, mem);
        old.unmap(self.nic);
        Self::resized(c, entries)
    }

    /// `log_cq_size` and the CQE size in bytes of CQ `cqn` (QUERY_CQ).
    fn cq_geometry(&self, cqn: u32) -> Result<(u64, usize), Errno> {
        let mut input = new_input(Opcode::QueryCq, 0, query_cq_in::SIZE);
        query_cq_in::cqn.set(&mut input, cqn.into());
        let out = exec(self.nic, &input, query_cq_out::SIZE)?;
        let at = |f: ferroverbs_hw::Field| f.at(query_cq_out::cq_context.bit).get(&out);
        let size = if at(cqc::cqe_sz) == 0 { 64 } else { 128 };
        Ok((at(cqc::log_cq_size), size))
    }

    /// The response: the CQ's entries minus one (`ib_uverbs_resize_cq_resp.cqe`).
    fn resized(c: &Cmd<'_>, entries: u64) -> Result<(), Errno> {
        let mut r = Resp::new(abi::resize_cq_resp::SIZE);
        r.u32(abi::resize_cq_resp::cqe, (entries - 1) as u32);
        c.respond(&r)
    }
}

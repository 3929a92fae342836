//! Event and completion queues: CREATE/DESTROY/QUERY_EQ and CREATE/DESTROY/QUERY_CQ
//! (`mlx5-controlpath.md` §4.4, §4.5).

use ferroverbs_hw::Field;

use super::ifc::*;
use super::resources::removed;
use super::{Cmd, CmdResult, Cq, CqResize, DataPathEvent, Eq, Fail, Firmware, Out, Syndrome};
use crate::eq::EqRing;
use crate::iommu::{Access, Iommu};

/// The syndromes a buffer description can fail with.
pub(super) struct BufferErrors {
    pub short: Syndrome,
    pub misaligned: Syndrome,
    pub not_mapped: Syndrome,
}

/// Reads and checks the PAS list of a queue buffer of `bytes` bytes starting
/// `offset` bytes into its first page, with pages of `4096 << log_page_size` bytes.
/// The list starts at byte `pas_at` of the input. Every page must be aligned to the
/// page size, and the part of it the buffer uses must be mapped writable.
pub(super) fn buffer_pages(
    c: &Cmd,
    io: &Iommu,
    pas_at: usize,
    log_page_size: u64,
    offset: u64,
    bytes: u64,
    e: BufferErrors,
) -> Result<Vec<u64>, Fail> {
    let page = 4096u64 << log_page_size.min(31);
    let npages = (offset + bytes).div_ceil(page);
    let npages = usize::try_from(npages).map_err(|_| Fail::from(e.short))?;
    let pas = c.inp.be64s(pas_at, npages).ok_or(Fail::from(e.short))?;
    let end = offset + bytes;
    for (i, &p) in pas.iter().enumerate() {
        if p & (page - 1) != 0 {
            return Err(e.misaligned.into());
        }
        let page_start = i as u64 * page;
        let lo = offset.max(page_start);
        let hi = end.min(page_start + page);
        if hi > lo
            && io
                .check(p + (lo - page_start), (hi - lo) as usize, Access::Write)
                .is_err()
        {
            return Err(e.not_mapped.into());
        }
    }
    Ok(pas)
}

/// `page_offset` of the EQ/CQ/QP contexts counts 64-byte units.
pub(super) const PAGE_OFFSET_UNIT: u64 = 64;

impl Firmware {
    pub(super) fn create_eq(&mut self, c: &Cmd, io: &Iommu) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(create_eq_in::SIZE, create_eq_out::SIZE)?;
        let ctx = create_eq_in::eq_context_entry;
        let q = |f: Field| c.inp.at(ctx, f);
        if q(eqc::ec) != 0 {
            return Err(Syndrome::EqUnsupported.into());
        }
        let log_size = q(eqc::log_eq_size);
        if log_size > self.caps.gen(cmd_hca_cap::log_max_eq_sz) || log_size > 24 {
            return Err(Syndrome::EqBadSize.into());
        }
        let uar = q(eqc::uar_page) as u32;
        if !self.uar_allocated(uar) {
            return Err(Syndrome::EqUnknownUar.into());
        }
        let intr = q(eqc::intr);
        if intr >= u64::from(self.cfg.msix_vectors) {
            return Err(Syndrome::EqBadIntr.into());
        }
        let lps = q(eqc::log_page_size);
        let offset = q(eqc::page_offset) * PAGE_OFFSET_UNIT;
        let pages = buffer_pages(
            c,
            io,
            create_eq_in::pas.byte_offset(),
            lps,
            offset,
            64u64 << log_size,
            BufferErrors {
                short: Syndrome::EqPasShort,
                misaligned: Syndrome::EqPasMisaligned,
                not_mapped: Syndrome::EqPasNotMapped,
            },
        )?;
        let mut mask = [0u64; 4];
        if let Some(words) = c.inp.be64s(create_eq_in::event_bitmask.byte_offset(), 4) {
            mask.copy_from_slice(&words);
        }
        let ring = EqRing {
            log_size: log_size as u8,
            pages,
            log_page_size: lps as u8,
            offset,
            pi: 0,
            ci: 0,
            armed: false,
            intr: intr as u16,
            uar,
            mask,
            oi: q(eqc::oi) != 0,
            status: 0,
            overruns: 0,
            fired: 0,
        };
        let eqn = self
            .eqs
            .insert(Eq { ring })
            .ok_or(Fail::from(Syndrome::EqExhausted))?;
        self.uar_acquire(uar);
        let mut o = Out::new(create_eq_out::SIZE);
        o.set(create_eq_out::eq_number, u64::from(eqn));
        o.done()
    }

    pub(super) fn destroy_eq(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(destroy_eq_in::SIZE, destroy_eq_out::SIZE)?;
        let eqn = c.get(destroy_eq_in::eq_number) as u32;
        let eq = removed(self.eqs.remove(eqn), Syndrome::EqUnknown, Syndrome::EqInUse)?;
        self.uar_release(eq.ring.uar);
        Out::new(destroy_eq_out::SIZE).done()
    }

    pub(super) fn query_eq(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(query_eq_in::SIZE, query_eq_out::SIZE)?;
        let eqn = c.get(query_eq_in::eq_number) as u32;
        let eq = self.eqs.get(eqn).ok_or(Fail::from(Syndrome::EqUnknown))?;
        let r = &eq.ring;
        let mut o = Out::with_pas(c.outlen, query_eq_out::SIZE, query_eq_out::pas, &r.pages);
        let ctx = query_eq_out::eq_context_entry;
        o.set_at(ctx, eqc::status, u64::from(r.status));
        o.set_at(ctx, eqc::oi, u64::from(r.oi));
        o.set_at(ctx, eqc::st, u64::from(r.state()));
        o.set_at(ctx, eqc::page_offset, r.offset / PAGE_OFFSET_UNIT);
        o.set_at(ctx, eqc::log_eq_size, u64::from(r.log_size));
        o.set_at(ctx, eqc::uar_page, u64::from(r.uar));
        o.set_at(ctx, eqc::intr, u64::from(r.intr));
        o.set_at(ctx, eqc::log_page_size, u64::from(r.log_page_size));
        o.set_at(ctx, eqc::consumer_counter, u64::from(r.ci));
        o.set_at(ctx, eqc::producer_counter, u64::from(r.pi));
        o.set(query_eq_out::event_bitmask, r.mask[0]);
        o.done()
    }

    pub(super) fn create_cq(&mut self, c: &Cmd, io: &Iommu) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(create_cq_in::SIZE, create_cq_out::SIZE)?;
        let ctx = create_cq_in::cq_context;
        let q = |f: Field| c.inp.at(ctx, f);
        if c.get(create_cq_in::cq_umem_valid) != 0
            || q(cqc::dbr_umem_valid) != 0
            || q(cqc::cc) != 0
            || q(cqc::cqe_comp_en) != 0
            || q(cqc::apu_cq) != 0
        {
            return Err(Syndrome::CqUnsupported.into());
        }
        let log_size = q(cqc::log_cq_size);
        if log_size > self.caps.gen(cmd_hca_cap::log_max_cq_sz) || log_size > 24 {
            return Err(Syndrome::CqBadSize.into());
        }
        let cqe_size: u32 = match q(cqc::cqe_sz) {
            0 => 64,
            1 => 128,
            _ => return Err(Syndrome::CqBadCqeSize.into()),
        };
        let eqn = q(cqc::c_eqn_or_apu_element) as u32;
        if !self.eqs.contains(eqn) {
            return Err(Syndrome::CqUnknownEq.into());
        }
        let uar = q(cqc::uar_page) as u32;
        if !self.uar_allocated(uar) {
            return Err(Syndrome::CqUnknownUar.into());
        }
        let dbr = q(cqc::dbr_addr);
        if dbr & 7 != 0 {
            return Err(Syndrome::CqDbrMisaligned.into());
        }
        if !Self::mapped(io, dbr, 8, Access::Write) {
            return Err(Syndrome::CqDbrNotMapped.into());
        }
        let pages = buffer_pages(
            c,
            io,
            create_cq_in::pas.byte_offset(),
            q(cqc::log_page_size),
            q(cqc::page_offset) * PAGE_OFFSET_UNIT,
            u64::from(cqe_size) << log_size,
            BufferErrors {
                short: Syndrome::CqPasShort,
                misaligned: Syndrome::CqPasMisaligned,
                not_mapped: Syndrome::CqPasNotMapped,
            },
        )?;
        let cq = Cq {
            cqc: c.inp.bytes(ctx).to_vec(),
            pages,
            eqn,
            uar,
            log_size: log_size as u8,
            cqe_size,
            dbr,
            resize: None,
        };
        let cqn = self
            .cqs
            .insert(cq)
            .ok_or(Fail::from(Syndrome::CqExhausted))?;
        self.eqs.acquire(eqn);
        self.uar_acquire(uar);
        let mut o = Out::new(create_cq_out::SIZE);
        o.set(create_cq_out::cqn, u64::from(cqn));
        o.done()
    }

    pub(super) fn destroy_cq(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(destroy_cq_in::SIZE, destroy_cq_out::SIZE)?;
        let cqn = c.get(destroy_cq_in::cqn) as u32;
        let cq = removed(self.cqs.remove(cqn), Syndrome::CqUnknown, Syndrome::CqInUse)?;
        self.eqs.release(cq.eqn);
        self.uar_release(cq.uar);
        self.datapath_events
            .push(super::DataPathEvent::CqDestroyed(cqn));
        Out::new(destroy_cq_out::SIZE).done()
    }

    pub(super) fn query_cq(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(query_cq_in::SIZE, query_cq_out::SIZE)?;
        let cqn = c.get(query_cq_in::cqn) as u32;
        let cq = self.cqs.get(cqn).ok_or(Fail::from(Syndrome::CqUnknown))?;
        let mut o = Out::with_pas(c.outlen, query_cq_out::SIZE, query_cq_out::pas, &cq.pages);
        o.put(query_cq_out::cq_context, &cq.cqc);
        o.done()
    }

    /// MODIFY_CQ. `op_mod` resize (`MLX5_CQ_OPMOD_RESIZE`) moves the CQ to the
    /// buffer the context and the page list describe (Linux `mlx5_ib_resize_cq`
    /// selects `log_cq_size`, `page_offset` and `log_page_size`, and keeps the CQE
    /// size, the doorbell record, the EQ and the UAR). The CQ keeps its producer
    /// index: at the switch point the device writes a resize CQE (opcode
    /// `MLX5_CQE_RESIZE_CQ`) into the old buffer, at the entry of the next producer
    /// index, and writes the CQEs after it into the new buffer (the data path does
    /// both, [`DataPathEvent::CqResized`], before the command completes). Software
    /// then copies the CQEs it had not polled, from its consumer index up to the
    /// resize CQE, to the new buffer one entry further on and steps its consumer
    /// index over the resize CQE (libmlx5 `mlx5_cq_resize_copy_cqes`).
    ///
    /// Refused: a CQ in error; new entries not more than the unpolled CQEs (the
    /// producer counter minus the doorbell record's consumer counter, which the data
    /// path exports into the context before the command: they move to the new
    /// buffer, and the device needs one more entry as it sees the consumer index
    /// until software publishes its step over the resize CQE); an old buffer with no
    /// entry left for the resize CQE. Moderation (`op_mod` 0) is not modelled.
    pub(super) fn modify_cq(&mut self, c: &Cmd, io: &Iommu) -> CmdResult {
        use ferroverbs_hw::control::cq::{
            modify_cq_in, modify_cq_out, MLX5_CQ_OPMOD_RESIZE, MLX5_MODIFY_CQ_MASK_LOG_SIZE,
            MLX5_MODIFY_CQ_MASK_PG_OFFSET, MLX5_MODIFY_CQ_MASK_PG_SIZE,
        };
        match c.op_mod {
            MLX5_CQ_OPMOD_RESIZE => {}
            0 => return Err(Syndrome::NotImplemented.into()),
            _ => return Err(Syndrome::BadOpMod.into()),
        }
        c.lengths(modify_cq_in::SIZE, modify_cq_out::SIZE)?;
        let cqn = c.get(modify_cq_in::cqn) as u32;
        let ctx = modify_cq_in::cq_context;
        let q = |f: Field| c.inp.at(ctx, f);
        let max_log = self.caps.gen(cmd_hca_cap::log_max_cq_sz);
        let cq = self.cqs.get(cqn).ok_or(Fail::from(Syndrome::CqUnknown))?;
        if c.get(modify_cq_in::cq_umem_valid) != 0 {
            return Err(Syndrome::CqUnsupported.into());
        }
        let all = MLX5_MODIFY_CQ_MASK_LOG_SIZE
            | MLX5_MODIFY_CQ_MASK_PG_OFFSET
            | MLX5_MODIFY_CQ_MASK_PG_SIZE;
        if c.get(modify_cq_in::modify_field_select_resize_field_select) != u64::from(all) {
            return Err(Syndrome::CqResizeFields.into());
        }
        let log_size = q(cqc::log_cq_size);
        if log_size > max_log || log_size > 24 {
            return Err(Syndrome::CqResizeBadSize.into());
        }
        let cqe_size: u32 = match q(cqc::cqe_sz) {
            0 => 64,
            1 => 128,
            _ => return Err(Syndrome::CqBadCqeSize.into()),
        };
        if cqe_size != cq.cqe_size {
            return Err(Syndrome::CqResizeCqeSize.into());
        }
        let img = |f: Field| {
            if f.fits(cq.cqc.len()) {
                f.get(&cq.cqc)
            } else {
                0
            }
        };
        if img(cqc::status) != 0 {
            return Err(Syndrome::CqResizeInError.into());
        }
        let unpolled =
            img(cqc::producer_counter).wrapping_sub(img(cqc::consumer_counter)) & 0xff_ffff;
        if unpolled >= 1u64 << cq.log_size {
            return Err(Syndrome::CqResizeFull.into());
        }
        if unpolled >= 1u64 << log_size {
            return Err(Syndrome::CqResizeTooSmall.into());
        }
        let lps = q(cqc::log_page_size);
        let page_offset = q(cqc::page_offset);
        let pages = buffer_pages(
            c,
            io,
            modify_cq_in::pas.byte_offset(),
            lps,
            page_offset * PAGE_OFFSET_UNIT,
            u64::from(cqe_size) << log_size,
            BufferErrors {
                short: Syndrome::CqPasShort,
                misaligned: Syndrome::CqPasMisaligned,
                not_mapped: Syndrome::CqPasNotMapped,
            },
        )?;
        let cq = self
            .cqs
            .get_mut(cqn)
            .ok_or(Fail::from(Syndrome::CqUnknown))?;
        cq.resize = Some(CqResize {
            pages,
            log_size: log_size as u8,
            log_page_size: lps as u8,
            page_offset: page_offset as u8,
        });
        self.datapath_events.push(DataPathEvent::CqResized(cqn));
        Out::new(modify_cq_out::SIZE).done()
    }
}

//! Shared receive queues: CREATE_SRQ / DESTROY_SRQ / QUERY_SRQ and ARM_RQ
//! (`mlx5-controlpath.md` §4, Linux `srq_cmd.c` for the command sequence).
//!
//! The firmware keeps the SRQ's buffer (PAS pages, stride, size), doorbell record and
//! PD, and the device's consumption state the data path advances
//! ([`Srq::take`]): the index of the next WQE (following each WQE's `next_wqe_index`
//! link from WQE 0, as rdma-core initializes the list), the count of WQEs consumed,
//! and the limit watermark `lwm` (armed when non-zero: once fewer WQEs than it are
//! posted, an `SRQ_RQ_LIMIT` event, and `lwm` back to 0 until ARM_RQ).

use ferroverbs_hw::control::srq::{
    arm_rq_in, arm_rq_out, create_srq_in, create_srq_out, destroy_srq_in, destroy_srq_out,
    query_srq_in, query_srq_out, srqc, ArmRqOpMod, SrqcState,
};
use ferroverbs_hw::Field;

use super::ifc::cmd_hca_cap;
use super::queues::{buffer_pages, BufferErrors, PAGE_OFFSET_UNIT};
use super::resources::removed;
use super::{Cmd, CmdResult, Fail, Firmware, Out, Syndrome};
use crate::iommu::{Access, Iommu};

/// A shared receive queue.
#[derive(Clone, Debug)]
pub struct Srq {
    /// The SRQ context as created (`lwm`, `wqe_cnt` and `state` kept current).
    pub srqc: Vec<u8>,
    /// Protection domain.
    pub pd: u32,
    /// Buffer pages.
    pub pages: Vec<u64>,
    /// Page size (log2 bytes).
    pub page_shift: u32,
    /// Byte offset of the ring in the first page.
    pub offset: u64,
    /// Number of WQEs (a power of two).
    pub size: u32,
    /// WQE stride in bytes.
    pub stride: u32,
    /// Doorbell record IOVA.
    pub dbr: u64,
    /// Limit watermark (0: disarmed).
    pub lwm: u16,
    /// Index of the next WQE the device takes.
    pub head: u16,
    /// WQEs consumed (16 bits, compared with the doorbell record).
    pub consumed: u16,
    /// In error (a WQE link it could not follow).
    pub error: bool,
}

/// Why [`Srq::take`] returned no WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SrqTake {
    /// Nothing posted.
    Empty,
    /// The doorbell record or the WQE could not be read.
    Unreadable,
}

/// A WQE taken from an SRQ: its index (the CQE's `wqe_counter`), and whether the limit
/// event fired with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Taken {
    /// The SRQ WQE index.
    pub index: u16,
    /// WQEs still posted after this one.
    pub left: u32,
    /// The limit was armed and the WQEs posted dropped below it: raise the event.
    pub limit_hit: bool,
}

impl Srq {
    /// The IOVA of byte `byte` of the ring.
    pub fn iova(&self, byte: u64) -> Option<u64> {
        let b = self.offset.checked_add(byte)?;
        let page = self
            .pages
            .get(usize::try_from(b >> self.page_shift).ok()?)?;
        Some(page + (b & ((1u64 << self.page_shift) - 1)))
    }

    /// The IOVA of WQE `index` (a WQE never crosses a page: stride ≤ page, aligned).
    pub fn wqe_iova(&self, index: u16) -> Option<u64> {
        self.iova(u64::from(u32::from(index) & (self.size - 1)) * u64::from(self.stride))
    }

    /// WQEs posted and not consumed, per the doorbell record.
    pub fn posted(&self, io: &Iommu) -> Option<u32> {
        let db = io.read_be32(self.dbr).ok()?;
        Some((db.wrapping_sub(u32::from(self.consumed)) & 0xffff).min(self.size))
    }

    /// Takes the next posted WQE into `raw` (its first `stride` bytes, at most
    /// `raw.len()`), follows its link, and checks the limit.
    pub fn take(&mut self, io: &Iommu, raw: &mut [u8]) -> Result<Taken, SrqTake> {
        if self.error {
            return Err(SrqTake::Unreadable);
        }
        let avail = self.posted(io).ok_or(SrqTake::Unreadable)?;
        if avail == 0 {
            return Err(SrqTake::Empty);
        }
        let index = self.head;
        let n = (self.stride as usize).min(raw.len());
        let iova = self.wqe_iova(index).ok_or(SrqTake::Unreadable)?;
        if n < 4 || io.read(iova, &mut raw[..n]).is_err() {
            return Err(SrqTake::Unreadable);
        }
        // struct mlx5_wqe_srq_next_seg: next_wqe_index BE16 at byte 2.
        let next = u16::from_be_bytes([raw[2], raw[3]]);
        self.head = (u32::from(next) & (self.size - 1)) as u16;
        self.consumed = self.consumed.wrapping_add(1);
        let left = avail - 1;
        let limit_hit = self.lwm != 0 && left < u32::from(self.lwm);
        if limit_hit {
            self.lwm = 0;
            self.set(srqc::lwm, 0);
        }
        self.set(srqc::wqe_cnt, u64::from(self.consumed));
        Ok(Taken {
            index,
            left,
            limit_hit,
        })
    }

    fn set(&mut self, f: Field, v: u64) {
        if f.fits(self.srqc.len()) {
            f.set(&mut self.srqc, v);
        }
    }
}

impl Firmware {
    pub(super) fn create_srq(&mut self, c: &Cmd, io: &Iommu) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(create_srq_in::SIZE, create_srq_out::SIZE)?;
        let ctx = create_srq_in::srq_context_entry;
        let q = |f: Field| c.inp.at(ctx, f);
        if q(srqc::cont_srq) != 0 || q(srqc::wq_signature) != 0 || q(srqc::xrcd) != 0 {
            return Err(Syndrome::SrqUnsupported.into());
        }
        let pd = q(srqc::pd) as u32;
        if !self.pds.contains(pd) {
            return Err(Syndrome::SrqUnknownPd.into());
        }
        let log_size = q(srqc::log_srq_size);
        if log_size > self.caps.gen(cmd_hca_cap::log_max_srq_sz).min(15) {
            return Err(Syndrome::SrqBadSize.into());
        }
        let stride = 16u64 << q(srqc::log_rq_stride);
        if stride < 32 || stride > self.caps.gen(cmd_hca_cap::max_wqe_sz_rq) {
            return Err(Syndrome::SrqBadStride.into());
        }
        let size = 1u32 << log_size;
        if q(srqc::lwm) >= u64::from(size) {
            return Err(Syndrome::SrqBadLwm.into());
        }
        let dbr = q(srqc::dbr_addr);
        if dbr & 3 != 0 {
            return Err(Syndrome::SrqDbrMisaligned.into());
        }
        if !Self::mapped(io, dbr, 4, Access::Read) {
            return Err(Syndrome::SrqDbrNotMapped.into());
        }
        let lps = q(srqc::log_page_size);
        let offset = q(srqc::page_offset) * PAGE_OFFSET_UNIT;
        let pages = buffer_pages(
            c,
            io,
            create_srq_in::pas.byte_offset(),
            lps,
            offset,
            stride << log_size,
            BufferErrors {
                short: Syndrome::SrqPasShort,
                misaligned: Syndrome::SrqPasMisaligned,
                not_mapped: Syndrome::SrqPasNotMapped,
            },
        )?;
        let mut img = c.inp.bytes(ctx).to_vec();
        if srqc::state.fits(img.len()) {
            srqc::state.set(&mut img, SrqcState::Good.value().into());
            srqc::wqe_cnt.set(&mut img, 0);
        }
        let srq = Srq {
            srqc: img,
            pd,
            pages,
            page_shift: 12 + lps.min(19) as u32,
            offset,
            size,
            stride: stride as u32,
            dbr,
            lwm: q(srqc::lwm) as u16,
            head: 0,
            consumed: 0,
            error: false,
        };
        let srqn = self
            .srqs
            .insert(srq)
            .ok_or(Fail::from(Syndrome::SrqExhausted))?;
        self.pds.acquire(pd);
        let mut o = Out::new(create_srq_out::SIZE);
        o.set(create_srq_out::srqn, u64::from(srqn));
        o.done()
    }

    pub(super) fn destroy_srq(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(destroy_srq_in::SIZE, destroy_srq_out::SIZE)?;
        let srqn = c.get(destroy_srq_in::srqn) as u32;
        let srq = removed(
            self.srqs.remove(srqn),
            Syndrome::SrqUnknown,
            Syndrome::SrqInUse,
        )?;
        self.pds.release(srq.pd);
        Out::new(destroy_srq_out::SIZE).done()
    }

    pub(super) fn query_srq(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(query_srq_in::SIZE, query_srq_out::SIZE)?;
        let srqn = c.get(query_srq_in::srqn) as u32;
        let srq = self
            .srqs
            .get(srqn)
            .ok_or(Fail::from(Syndrome::SrqUnknown))?;
        let mut o = Out::with_pas(
            c.outlen,
            query_srq_out::SIZE,
            query_srq_out::pas,
            &srq.pages,
        );
        o.put(query_srq_out::srq_context_entry, &srq.srqc);
        let state = if srq.error {
            SrqcState::Error
        } else {
            SrqcState::Good
        };
        o.set_at(
            query_srq_out::srq_context_entry,
            srqc::state,
            state.value().into(),
        );
        o.done()
    }

    pub(super) fn arm_rq(&mut self, c: &Cmd) -> CmdResult {
        c.lengths(arm_rq_in::SIZE, arm_rq_out::SIZE)?;
        if ArmRqOpMod::from_value(c.op_mod) != Some(ArmRqOpMod::Srq) {
            return Err(Syndrome::BadOpMod.into());
        }
        let srqn = c.get(arm_rq_in::srq_number) as u32;
        let lwm = c.get(arm_rq_in::lwm);
        let srq = self
            .srqs
            .get_mut(srqn)
            .ok_or(Fail::from(Syndrome::SrqUnknown))?;
        if lwm >= u64::from(srq.size) {
            return Err(Syndrome::SrqBadLwm.into());
        }
        srq.lwm = lwm as u16;
        srq.set(srqc::lwm, lwm);
        Out::new(arm_rq_out::SIZE).done()
    }

    /// The SRQ numbered `srqn`.
    pub fn srq(&self, srqn: u32) -> Option<&Srq> {
        self.srqs.get(srqn)
    }

    /// The SRQ numbered `srqn`, mutably (the data path consumes its WQEs).
    pub fn srq_mut(&mut self, srqn: u32) -> Option<&mut Srq> {
        self.srqs.get_mut(srqn)
    }
}

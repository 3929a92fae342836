//! Simple resources: UAR pages, protection domains, transport domains, and memory keys
//! (`mlx5-controlpath.md` §4.1, §4.3).

use super::ifc::*;
use super::table::RemoveError;
use super::{Cmd, CmdResult, Fail, Firmware, Mkey, Out, Syndrome};
use crate::iommu::{Access, Iommu};

/// `mkc.access_mode`: physical addresses (the IOVA itself).
const ACCESS_MODE_PA: u64 = 0;
/// `mkc.access_mode`: memory translation table.
const ACCESS_MODE_MTT: u64 = 1;
/// `MLX5_MKC_ACCESS_MODE_KLMS`: the mode of a memory window.
const ACCESS_MODE_KLMS: u64 = 2;
/// `mkc.qpn` of a key bound to no QP.
const MKEY_QPN_NONE: u64 = 0xff_ffff;
/// Byte offset of the MTT list in CREATE_MKEY (`klm_pas_mtt`).
fn mtt_offset() -> usize {
    create_mkey_in::klm_pas_mtt.byte_offset()
}

/// The result of removing an object from its table, with the failures named by the
/// command's syndromes: `unknown` for a number no object has, `in_use` for an object
/// others still use.
pub(super) fn removed<T>(
    r: Result<T, RemoveError>,
    unknown: Syndrome,
    in_use: Syndrome,
) -> Result<T, Fail> {
    r.map_err(|e| match e {
        RemoveError::Unknown => unknown.into(),
        RemoveError::InUse(_) => in_use.into(),
    })
}

impl Firmware {
    pub(super) fn alloc_uar(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(alloc_uar_in::SIZE, alloc_uar_out::SIZE)?;
        let n = self
            .uars
            .insert(())
            .ok_or(Fail::from(Syndrome::UarExhausted))?;
        // The first UAR of the allocated page (`UarGeometry`).
        let mut o = Out::new(alloc_uar_out::SIZE);
        o.set(alloc_uar_out::uar, u64::from(n * self.uar_geom.group));
        o.done()
    }

    pub(super) fn dealloc_uar(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(dealloc_uar_in::SIZE, dealloc_uar_out::SIZE)?;
        let n = c.get(dealloc_uar_in::uar) as u32;
        // Only the index ALLOC_UAR returned names the allocation.
        if !n.is_multiple_of(self.uar_geom.group) {
            return Err(Syndrome::UarUnknown.into());
        }
        removed(
            self.uars.remove(self.uar_geom.unit(n)),
            Syndrome::UarUnknown,
            Syndrome::UarInUse,
        )?;
        Out::new(dealloc_uar_out::SIZE).done()
    }

    pub(super) fn alloc_pd(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(alloc_pd_in::SIZE, alloc_pd_out::SIZE)?;
        let n = self
            .pds
            .insert(())
            .ok_or(Fail::from(Syndrome::PdExhausted))?;
        let mut o = Out::new(alloc_pd_out::SIZE);
        o.set(alloc_pd_out::pd, u64::from(n));
        o.done()
    }

    pub(super) fn dealloc_pd(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(dealloc_pd_in::SIZE, dealloc_pd_out::SIZE)?;
        let n = c.get(dealloc_pd_in::pd) as u32;
        removed(self.pds.remove(n), Syndrome::PdUnknown, Syndrome::PdInUse)?;
        Out::new(dealloc_pd_out::SIZE).done()
    }

    pub(super) fn alloc_td(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(
            alloc_transport_domain_in::SIZE,
            alloc_transport_domain_out::SIZE,
        )?;
        let n = self
            .tds
            .insert(())
            .ok_or(Fail::from(Syndrome::TdExhausted))?;
        let mut o = Out::new(alloc_transport_domain_out::SIZE);
        o.set(alloc_transport_domain_out::transport_domain, u64::from(n));
        o.done()
    }

    pub(super) fn dealloc_td(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(
            dealloc_transport_domain_in::SIZE,
            dealloc_transport_domain_out::SIZE,
        )?;
        let n = c.get(dealloc_transport_domain_in::transport_domain) as u32;
        removed(self.tds.remove(n), Syndrome::TdUnknown, Syndrome::TdUnknown)?;
        Out::new(dealloc_transport_domain_out::SIZE).done()
    }

    pub(super) fn create_mkey(&mut self, c: &Cmd, io: &Iommu) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(create_mkey_in::SIZE, create_mkey_out::SIZE)?;
        let ctx = create_mkey_in::memory_key_mkey_entry;
        let m = |f| c.inp.at(ctx, f);
        if c.get(create_mkey_in::mkey_umem_valid) != 0 {
            return Err(Syndrome::MkeyUmemUnsupported.into());
        }
        let mode = m(mkc::access_mode_1_0) | (m(mkc::access_mode_4_2) << 2);
        // A memory window: a free KLM mkey that UMR WQEs may modify (Linux mlx5_ib
        // `mlx5_ib_alloc_mw`: free, umr_en, lr, access mode KLMS, en_rinval for type
        // 2, qpn 0xffffff, translations for the KLMs a bind writes). It gets its
        // bounds, rights and translation when bound (`Firmware::umr`).
        let window = m(mkc::free) != 0 && mode == ACCESS_MODE_KLMS && m(mkc::umr_en) != 0;
        if m(mkc::free) != 0 && !window {
            return Err(Syndrome::MkeyFreeUnsupported.into());
        }
        if mode != ACCESS_MODE_PA && mode != ACCESS_MODE_MTT && !window {
            return Err(Syndrome::MkeyBadAccessMode.into());
        }
        if m(mkc::qpn) != MKEY_QPN_NONE {
            return Err(Syndrome::MkeyQpnBound.into());
        }
        let pd = m(mkc::pd) as u32;
        if !self.pds.contains(pd) {
            return Err(Syndrome::MkeyUnknownPd.into());
        }
        let length64 = m(mkc::length64) != 0;
        let start = m(mkc::start_addr);
        let len = m(mkc::len);
        let max_log = self.caps.gen(cmd_hca_cap::log_max_mrw_sz);
        if !length64 && max_log < 64 && len > (1u64 << max_log) {
            return Err(Syndrome::MkeyBadLength.into());
        }
        let mut mtt = Vec::new();
        if mode == ACCESS_MODE_MTT {
            if length64 {
                return Err(Syndrome::MkeyLength64Mtt.into());
            }
            let lps = m(mkc::log_page_size);
            if !(12..=30).contains(&lps) {
                return Err(Syndrome::MkeyBadPageSize.into());
            }
            let page = 1u64 << lps;
            let first = start & !(page - 1);
            let end = start
                .checked_add(len)
                .ok_or(Fail::from(Syndrome::MkeyBadLength))?;
            let npages = (end - first).div_ceil(page);
            if m(mkc::translations_octword_size) < npages.div_ceil(2) {
                return Err(Syndrome::MkeyTranslationsShort.into());
            }
            let npages =
                usize::try_from(npages).map_err(|_| Fail::from(Syndrome::MkeyBadLength))?;
            mtt = c
                .inp
                .be64s(mtt_offset(), npages)
                .ok_or(Fail::from(Syndrome::MkeyMttInputShort))?;
            for (i, e) in mtt.iter().enumerate() {
                // The low byte holds rd_en/wr_en; the address is ptag_63_8.
                let addr = e & !0xff;
                if addr & (page - 1) != 0 {
                    return Err(Syndrome::MkeyMttMisaligned.into());
                }
                // The part of this page the key covers must be mapped.
                let page_va = first + i as u64 * page;
                let lo = start.max(page_va);
                let hi = end.min(page_va + page);
                if hi > lo
                    && !Self::mapped(io, addr + (lo - page_va), (hi - lo) as usize, Access::Read)
                {
                    return Err(Syndrome::MkeyMttNotMapped.into());
                }
            }
        }
        let mkc_bytes = c.inp.bytes(ctx).to_vec();
        let variant = m(mkc::mkey_7_0) as u32;
        let index = self
            .mkeys
            .insert(())
            .ok_or(Fail::from(Syndrome::MkeyExhausted))?;
        let k = Mkey {
            key: (index << 8) | variant,
            pd,
            view: crate::engine::mem::MkeyView::decode(&mkc_bytes),
            mkc: mkc_bytes,
            mtt,
        };
        // Indexes are below 2^24 (the table's capacity), which the index holds.
        if self.mkey_objs.insert(index, k).is_err() {
            let _ = self.mkeys.remove(index);
            return Err(Syndrome::MkeyExhausted.into());
        }
        self.pds.acquire(pd);
        let mut o = Out::new(create_mkey_out::SIZE);
        o.set(create_mkey_out::mkey_index, u64::from(index));
        o.done()
    }

    pub(super) fn query_mkey(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(query_mkey_in::SIZE, query_mkey_out::SIZE)?;
        let index = c.get(query_mkey_in::mkey_index) as u32;
        let k = self
            .mkey_objs
            .get(index)
            .ok_or(Fail::from(Syndrome::MkeyUnknown))?;
        let mut o = Out::new(query_mkey_out::SIZE);
        o.put(query_mkey_out::memory_key_mkey_entry, &k.mkc);
        o.done()
    }

    pub(super) fn destroy_mkey(&mut self, c: &Cmd) -> CmdResult {
        c.op_mod_zero()?;
        c.lengths(destroy_mkey_in::SIZE, destroy_mkey_out::SIZE)?;
        let index = c.get(destroy_mkey_in::mkey_index) as u32;
        self.mkeys
            .remove(index)
            .map_err(|_| Fail::from(Syndrome::MkeyUnknown))?;
        let k = self
            .mkey_objs
            .remove(index)
            .ok_or(Fail::from(Syndrome::MkeyUnknown))?;
        self.pds.release(k.pd);
        Out::new(destroy_mkey_out::SIZE).done()
    }
}

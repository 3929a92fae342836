//! Memory windows: the UMR work requests that bind and invalidate them.
//!
//! A window is an MKEY created free in KLM mode with `umr_en` (CREATE_MKEY, as Linux
//! `mlx5_ib_alloc_mw` issues it). A UMR WQE on a send queue ([`MwUmr`], rdma-core
//! `set_bind_wr`) then either binds it (a KLM entry naming a memory region's lkey, the
//! bounds and the remote rights) or frees it again (`IBV_WR_LOCAL_INV`, or a type 1
//! bind of length 0). The checks are those of IBTA Vol. 1 §10.6.7.2 (Bind Memory
//! Window) and §10.6.7.3 (Invalidate), which a ConnectX completes with
//! `MLX5_CQE_SYNDROME_MW_BIND_ERR` (binds) or `MLX5_CQE_SYNDROME_LOCAL_PROT_ERR`
//! (invalidations):
//!
//! * the window is a live key with `umr_en` in the QP's PD, named by the index of the
//!   control segment's key (its variant byte is the one the WQE gives it: rdma-core's
//!   `IBV_WR_LOCAL_INV` writes variant 0, and the next bind names the window by the
//!   key the application last had);
//! * a bind of a type 2 window (`MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE`) needs it free;
//!   an invalidation of one (`CHECK_QPN`) needs it bound to this QP;
//! * the region is a live memory region (not a window) of the same PD, the range lies
//!   inside it, and remote write or atomic rights need the region's local write
//!   (§10.6.7.2.2, the check rdma-core's `MW_DEBUG` build makes too).

use ferroverbs_hw::control::mkey::mkc;
use ferroverbs_hw::datapath::cqe::{
    MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, MLX5_CQE_SYNDROME_MW_BIND_ERR,
};
use ferroverbs_hw::datapath::umr::{
    MwUmr, MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC,
    MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE, MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ,
    MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE, MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE,
    MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN, UMR_QPN_NONE,
};

use super::Firmware;

/// Largest window a KLM entry describes (rdma-core `set_bind_wr`: "KLM support only
/// 2GB").
const MAX_KLM_LEN: u64 = 1 << 31;

impl Firmware {
    /// Executes the UMR `u` posted on QP `qpn` of protection domain `pd` (`reg_umr`:
    /// the QP is a `MLX5_QPC_ST_REG_UMR` QP): on a memory window, the bind or
    /// invalidation of this module; on any other key, the change of a memory
    /// region's mkey (the firmware's `umr` module). `Err` carries the CQE syndrome
    /// of the failed request. Nothing changes on an error.
    pub fn umr(&mut self, pd: u32, qpn: u32, reg_umr: bool, u: &MwUmr) -> Result<(), u8> {
        if self
            .mkey_objs
            .get(u.key >> 8)
            .is_some_and(|k| !k.view.is_window())
        {
            return self.region_umr(pd, reg_umr, u);
        }
        let bind = !u.free && u.klm.is_some();
        let fail = if bind {
            MLX5_CQE_SYNDROME_MW_BIND_ERR
        } else {
            MLX5_CQE_SYNDROME_LOCAL_PROT_ERR
        };
        let w = self
            .mkey_objs
            .get(u.key >> 8)
            .filter(|k| k.view.umr_enabled() && k.view.is_window())
            .ok_or(fail)?;
        if w.pd != pd {
            return Err(fail);
        }
        let type2 = w.view.remote_invalidate();
        if u.flags & MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE != 0 && !w.view.is_free() {
            return Err(fail);
        }
        if u.flags & MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN != 0
            && (w.view.is_free() || w.view.qpn() != qpn || !type2)
        {
            return Err(fail);
        }
        if !bind {
            let k = self.mkey_objs.get_mut(u.key >> 8).ok_or(fail)?;
            k.view.unbind();
            k.mtt = Vec::new();
            k.key = (k.key & !0xff) | u32::from(u.variant);
            set_mkc(&mut k.mkc, k.key, None);
            return Ok(());
        }
        let (mr_key, addr) = u.klm.ok_or(fail)?;
        if u.start != addr || u.len == 0 || u.len > MAX_KLM_LEN {
            return Err(fail);
        }
        let mr = self
            .mkey_objs
            .get(mr_key >> 8)
            .filter(|k| k.key == mr_key && !k.view.is_free() && !k.view.is_window())
            .ok_or(fail)?;
        if mr.pd != pd {
            return Err(fail);
        }
        let acc = u.access;
        let lw = acc & MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE != 0;
        let rr = acc & MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ != 0;
        let rw = acc & MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE != 0;
        let a = acc & MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC != 0;
        if !mr.view.covers_range(addr, u.len) {
            return Err(fail);
        }
        if (rw || a || lw) && !mr.view.local_write() {
            return Err(fail);
        }
        let region = mr.view;
        let mtt = mr.mtt.clone();
        let bound_qpn = if type2 { qpn } else { UMR_QPN_NONE };
        let k = self.mkey_objs.get_mut(u.key >> 8).ok_or(fail)?;
        k.view
            .bind(&region, mr_key, u.start, u.len, lw, rr, rw, a, bound_qpn);
        k.mtt = mtt;
        k.key = (k.key & !0xff) | u32::from(u.variant);
        set_mkc(&mut k.mkc, k.key, Some((u, bound_qpn, lw, rr, rw, a)));
        Ok(())
    }
}

/// Mirrors a UMR in the window's `mkc` image, as QUERY_MKEY then reports it.
fn set_mkc(m: &mut [u8], key: u32, bound: Option<(&MwUmr, u32, bool, bool, bool, bool)>) {
    let mut put = |f: ferroverbs_hw::Field, v: u64| {
        if f.fits(m.len()) {
            f.set(m, v);
        }
    };
    put(mkc::mkey_7_0, u64::from(key & 0xff));
    match bound {
        None => {
            put(mkc::free, 1);
            put(mkc::len, 0);
            put(mkc::qpn, u64::from(UMR_QPN_NONE));
            for f in [mkc::lw, mkc::rr, mkc::rw, mkc::a] {
                put(f, 0);
            }
        }
        Some((u, qpn, lw, rr, rw, a)) => {
            put(mkc::free, 0);
            put(mkc::start_addr, u.start);
            put(mkc::len, u.len);
            put(mkc::qpn, u64::from(qpn));
            put(mkc::lw, u64::from(lw));
            put(mkc::rr, u64::from(rr));
            put(mkc::rw, u64::from(rw));
            put(mkc::a, u64::from(a));
        }
    }
}

//! UMR on a memory region: the WQE with which a driver changes a live region's PD
//! and access rights in place, keeping its keys (Linux `mlx5r_umr_rereg_pd_access`,
//! what `mlx5_ib_rereg_user_mr` posts for a PD or access change), or frees it
//! (`mlx5r_umr_revoke_mr`). The WQE names the region by the index of its control
//! segment's key; the UMR control segment's mask says which fields of the mkey
//! context segment become the region's.
//!
//! What the simulated device checks (a failed UMR completes in error and changes
//! nothing):
//!
//! * the key is a live mkey created with `umr_en` (an mkey without it cannot be
//!   modified by a UMR: `MLX5_CQE_SYNDROME_LOCAL_PROT_ERR`);
//! * a QP other than a `MLX5_QPC_ST_REG_UMR` one (the driver's own, privileged QP,
//!   which modifies the mkeys of every PD) modifies only mkeys of its own PD and
//!   cannot move them to another: the PD rule IBTA Vol. 1 §10.6.7.2 makes for
//!   window binds (`LOCAL_PROT_ERR`);
//! * the free-state check of the control flags (bits 6..5): 1 (rdma-core's
//!   `MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE`, Linux's `MLX5_UMR_CHECK_NOT_FREE`) needs the
//!   key free, 2 (Linux's `MLX5_UMR_CHECK_FREE`, set by `mlx5r_umr_rereg_pd_access`)
//!   needs it in use, 3 is reserved (`LOCAL_QP_OP_ERR`); a type 2 window's QPN check
//!   (`MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN`) fails on a region, which no QP holds
//!   (`LOCAL_PROT_ERR`, as an `IBV_WR_LOCAL_INV` of a region's key);
//! * the mask names only what this device changes on a region: PD, the five access
//!   rights (`lr`, `lw`, `rr`, `rw`, `a`), `free` and the key's variant byte. A
//!   translation change (`MLX5_MKEY_MASK_LEN`, `_START_ADDR`, `_PAGE_SIZE`, with
//!   translation entries) is not modelled, nor are relaxed ordering and the other
//!   fields: `LOCAL_QP_OP_ERR`;
//! * the new PD is an allocated one (`LOCAL_PROT_ERR`).
//!
//! The new rights and PD apply to every access that follows (the data path reads
//! them from the mkey at each use) and QUERY_MKEY reports them; the region holds its
//! new PD (DEALLOC_PD of it fails while it does) and no longer its old one.

use ferroverbs_hw::control::mkey::mkc;
use ferroverbs_hw::datapath::cqe::{
    MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
};
use ferroverbs_hw::datapath::umr::{
    MwUmr, MLX5_MKEY_MASK_LR, MLX5_MKEY_MASK_PD, MLX5_UMR_CHECK_FREE, MLX5_UMR_CHECK_NOT_FREE,
    MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC, MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ,
    MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE, MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ,
    MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE, MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN,
    MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC, MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE,
    MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ,
    MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE, MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE,
    MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY, UMR_CHECK_STATE_MASK,
};
use ferroverbs_hw::Field;

use super::Firmware;
use crate::engine::mem::MkeyView;

/// The mask bits a UMR may carry on a memory region here.
const REGION_MASK: u64 = MLX5_MKEY_MASK_PD
    | MLX5_MKEY_MASK_LR
    | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE
    | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ
    | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE
    | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC
    | MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE
    | MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY;

impl Firmware {
    /// Executes the UMR `u` on the memory region its key names, posted on a QP of
    /// PD `pd` (`reg_umr`: a `MLX5_QPC_ST_REG_UMR` QP); see the module documentation.
    pub(super) fn region_umr(&mut self, pd: u32, reg_umr: bool, u: &MwUmr) -> Result<(), u8> {
        const PROT: u8 = MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
        const QP_OP: u8 = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
        let index = u.key >> 8;
        let k = self.mkey_objs.get(index).ok_or(PROT)?;
        if !k.view.umr_enabled() {
            return Err(PROT);
        }
        if !reg_umr && k.pd != pd {
            return Err(PROT);
        }
        if u.flags & MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN != 0 {
            return Err(PROT);
        }
        match u.flags & UMR_CHECK_STATE_MASK {
            0 => {}
            MLX5_UMR_CHECK_NOT_FREE if k.view.is_free() => {}
            MLX5_UMR_CHECK_FREE if !k.view.is_free() => {}
            MLX5_UMR_CHECK_NOT_FREE | MLX5_UMR_CHECK_FREE => return Err(PROT),
            _ => return Err(QP_OP),
        }
        let mask = u.mkey_mask;
        if mask & !REGION_MASK != 0 {
            return Err(QP_OP);
        }
        let new_pd = if mask & MLX5_MKEY_MASK_PD != 0 {
            u.pd & 0xff_ffff
        } else {
            k.pd
        };
        if (!reg_umr && new_pd != pd) || !self.pds.contains(new_pd) {
            return Err(PROT);
        }
        let k = self.mkey_objs.get_mut(index).ok_or(PROT)?;
        let m = &mut k.mkc;
        let mut put = |f: Field, v: bool| {
            if f.fits(m.len()) {
                f.set(m, u64::from(v));
            }
        };
        let acc = u.access;
        for (bit, field, flag) in [
            (
                MLX5_MKEY_MASK_LR,
                mkc::lr,
                MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ,
            ),
            (
                MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE,
                mkc::lw,
                MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE,
            ),
            (
                MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ,
                mkc::rr,
                MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ,
            ),
            (
                MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE,
                mkc::rw,
                MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE,
            ),
            (
                MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC,
                mkc::a,
                MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC,
            ),
        ] {
            if mask & bit != 0 {
                put(field, acc & flag != 0);
            }
        }
        if mask & MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE != 0 {
            put(mkc::free, u.free);
        }
        if mkc::pd.fits(m.len()) {
            mkc::pd.set(m, new_pd.into());
        }
        if mask & MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY != 0 {
            k.key = (k.key & !0xff) | u32::from(u.variant);
            if mkc::mkey_7_0.fits(m.len()) {
                mkc::mkey_7_0.set(m, u.variant.into());
            }
        }
        let old_pd = std::mem::replace(&mut k.pd, new_pd);
        // A region's view is its context decoded (as CREATE_MKEY made it).
        k.view = MkeyView::decode(&k.mkc);
        // The mkey holds its new PD (DEALLOC_PD of it is refused while it does), not
        // its old one.
        if old_pd != new_pd {
            self.pds.acquire(new_pd);
            self.pds.release(old_pd);
        }
        Ok(())
    }
}

//! Memory windows: `ibv_alloc_mw` / `ibv_dealloc_mw` / `ibv_bind_mw` (the context's
//! `alloc_mw`, `dealloc_mw` and `bind_mw` ops, which the inline functions of
//! `verbs.h` call) and the `IBV_WR_BIND_MW` / `IBV_WR_LOCAL_INV` requests of
//! `ibv_post_send`, over the driver's [`MemoryWindow`] and its batch entries.
//!
//! The checks before posting are rdma-core's mlx5 provider's (`mlx5_bind_mw`): a
//! region is needed for a nonzero range (EINVAL), zero-based windows and regions are
//! refused (EINVAL), the region must be in the window's PD (EPERM), a window longer
//! than 2 GiB is EOPNOTSUPP (`set_bind_wr`). What only the device can check (the
//! range inside the region, its rights) completes with `IBV_WC_MW_BIND_ERR`.

use std::ffi::{c_int, c_uint, c_void};
use std::ptr;

use ferroverbs::verbs::{AccessFlags, MemoryWindow, MwBind, MwType, QueuePair, SendFlags};

use crate::abi;
use crate::abi_ex::{self, c as cx, ibv_mw, ibv_mw_bind, ibv_mw_bind_info};
use crate::ffi::{fnp, int_verb, post_errno, ptr_verb, MrObj, OrErrno, PdObj, QpObj, VerbsObj, B};

/// One `ibv_alloc_mw`.
#[repr(C)]
pub(crate) struct MwObj {
    ibv: ibv_mw,
    mw: MemoryWindow<'static, B>,
    pd: &'static PdObj,
}

// SAFETY: `#[repr(C)]` with the verbs struct as first field.
unsafe impl VerbsObj for MwObj {
    type Ibv = ibv_mw;
}

/// Installs the memory-window ops in a context's `ops`.
pub(crate) fn set_ops(ops: &mut [*const c_void; 32]) {
    ops[abi_ex::ops::ALLOC_MW] = fnp(alloc_mw as *const ());
    ops[abi_ex::ops::BIND_MW] = fnp(bind_mw as *const ());
    ops[abi_ex::ops::DEALLOC_MW] = fnp(dealloc_mw as *const ());
}

/// `ops.alloc_mw`.
unsafe extern "C" fn alloc_mw(pd: *mut abi::ibv_pd, ty: c_uint) -> *mut ibv_mw {
    // SAFETY: the caller's PD, kept alive by its use count while the window lives.
    ptr_verb(unsafe { PdObj::from_ibv(pd) }, |p| {
        let t = match ty {
            cx::IBV_MW_TYPE_1 => MwType::Type1,
            cx::IBV_MW_TYPE_2 => MwType::Type2,
            // The kernel refuses other types (uverbs ALLOC_MW: EINVAL).
            _ => return Err(libc::EINVAL),
        };
        let mw = p.pd.alloc_mw(t).or_errno()?;
        p.users.acquire();
        Ok(Box::new(MwObj {
            ibv: ibv_mw {
                context: p.ibv.context,
                pd,
                rkey: mw.rkey(),
                handle: mw.rkey(),
                r#type: ty,
            },
            mw,
            pd: p,
        })
        .into_ibv())
    })
}

/// `ops.dealloc_mw`.
unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    // SAFETY: the caller's window.
    int_verb(unsafe { MwObj::from_ibv(mw) }, |_| {
        // SAFETY: created by `alloc_mw`, deallocated once.
        let b = unsafe { MwObj::take(mw) };
        let pd = b.pd;
        let r = b.mw.dealloc();
        pd.users.release();
        r.or_errno()
    })
}

/// The driver's bind of `info` for window `w` (rdma-core `mlx5_bind_mw`'s checks).
///
/// # Safety
/// `info.mr` is NULL or a live region of ours.
unsafe fn bind_of(w: &MwObj, info: &ibv_mw_bind_info) -> Result<MwBind, c_int> {
    if info.mw_access_flags & cx::IBV_ACCESS_ZERO_BASED != 0 {
        return Err(libc::EINVAL);
    }
    let access = AccessFlags::from_bits(info.mw_access_flags & abi::c::IBV_ACCESS_BASIC)
        .ok_or(libc::EINVAL)?;
    if info.mr.is_null() {
        if info.addr != 0 || info.length != 0 {
            return Err(libc::EINVAL);
        }
        return Ok(MwBind {
            lkey: 0,
            addr: 0,
            len: 0,
            access,
        });
    }
    // SAFETY: the caller's region.
    let mr = unsafe { MrObj::from_ibv(info.mr) }?;
    if !std::ptr::eq(mr.pd, w.pd) {
        return Err(libc::EPERM);
    }
    if info.length > ferroverbs::verbs::MAX_MW_LEN {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(MwBind {
        lkey: mr.ibv.lkey,
        addr: info.addr,
        len: info.length,
        access,
    })
}

/// The driver's send flags of `ibv_send_wr.send_flags` (the same bits).
pub(crate) fn send_flags(f: c_uint) -> SendFlags {
    SendFlags::from_verbs(f)
}

/// `ops.bind_mw` (`ibv_bind_mw`, type 1: the inline wrapper checked the type): posts
/// the bind and gives the window its next key.
unsafe extern "C" fn bind_mw(
    qp: *mut abi::ibv_qp,
    mw: *mut ibv_mw,
    bind: *mut ibv_mw_bind,
) -> c_int {
    // SAFETY: the caller's QP.
    int_verb(unsafe { QpObj::from_ibv(qp) }, |q| {
        // SAFETY: the caller's window and bind request.
        let (w, b) = unsafe { (MwObj::from_ibv(mw)?, bind.as_ref().ok_or(libc::EINVAL)?) };
        // SAFETY: the caller's bind information.
        let info = unsafe { bind_of(w, &b.bind_info) }?;
        let key = ferroverbs::verbs::inc_rkey(w.ibv.rkey);
        let mut g = q.qp.lock();
        let mut batch = g.post().map_err(|e| post_errno(&e))?;
        let r = batch.bind_mw_raw(
            b.wr_id,
            w.ibv.rkey,
            w.mw.mw_type(),
            key,
            &info,
            send_flags(b.send_flags),
        );
        batch.ring();
        r.map_err(|e| post_errno(&e))?;
        // SAFETY: `rkey` is a plain field of our object the application reads.
        unsafe { (*mw).rkey = key };
        Ok(())
    })
}

/// `IBV_WR_BIND_MW` or `IBV_WR_LOCAL_INV` of `ibv_post_send`, posted on `qp`.
///
/// # Safety
/// For a bind, `w.bind_mw` must name a live window (and region) of ours.
pub(crate) unsafe fn post_mw_wr(
    qp: &mut QueuePair<'static, B>,
    w: &abi::ibv_send_wr,
) -> Result<(), c_int> {
    let flags = send_flags(w.send_flags);
    let mut batch = qp.post().map_err(|e| post_errno(&e))?;
    let r = if w.opcode == cx::IBV_WR_LOCAL_INV {
        batch.local_inv(w.wr_id, w.imm_data, flags)
    } else {
        // SAFETY: the `bind_mw` member of the request's last union, 48 bytes.
        let bm = unsafe { ptr::read(w.bind_mw_tso.as_ptr() as *const abi_ex::send_wr_bind_mw) };
        // SAFETY: the caller's window.
        let mw = unsafe { MwObj::from_ibv(bm.mw) }?;
        // SAFETY: the caller's bind information.
        let info = unsafe { bind_of(mw, &bm.bind_info) }?;
        batch.bind_mw_raw(w.wr_id, mw.ibv.rkey, mw.mw.mw_type(), bm.rkey, &info, flags)
    };
    batch.ring();
    r.map_err(|e| post_errno(&e))
}

/// The window behind `mw` for the `ibv_wr_bind_mw` of `qp_ex`, and its bind.
///
/// # Safety
/// `mw` and `info` are the caller's (NULL or live).
pub(crate) unsafe fn wr_bind_of(
    mw: *mut ibv_mw,
    info: *const ibv_mw_bind_info,
) -> Result<(u32, MwType, MwBind), c_int> {
    // SAFETY: the caller's window.
    let w = unsafe { MwObj::from_ibv(mw) }?;
    // SAFETY: the caller's bind information.
    let info = unsafe { info.as_ref() }.ok_or(libc::EINVAL)?;
    // SAFETY: as above.
    let b = unsafe { bind_of(w, info) }?;
    Ok((w.ibv.rkey, w.mw.mw_type(), b))
}

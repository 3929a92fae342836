//! Memory windows (IBTA Vol. 1 §10.6.7, verbs `ibv_alloc_mw`, `ibv_bind_mw`,
//! `IBV_WR_BIND_MW`, `IBV_WR_LOCAL_INV`): a [`MemoryWindow`] is a key a peer can use
//! to reach a range of a [`MemoryRegion`], with its own rights, granted and revoked
//! on the send queue without a firmware command.
//!
//! On a ConnectX a window is an mkey created free in KLM mode with UMR enabled (Linux
//! `mlx5_ib_alloc_mw`), and a bind or an invalidation is a UMR WQE (rdma-core
//! `set_bind_wr`) that the device executes in send-queue order:
//!
//! * type 1 ([`MwType::Type1`]): bound with [`QueuePair::bind_mw`] (`ibv_bind_mw`),
//!   bound again at will, unbound by a bind of length 0;
//! * type 2 ([`MwType::Type2`]): bound with [`SendBatch::bind_mw`] (`IBV_WR_BIND_MW`)
//!   only while free, to the QP that binds it; freed by [`SendBatch::local_inv`]
//!   (`IBV_WR_LOCAL_INV`) or by a peer's SEND with Invalidate of its key.
//!
//! Each bind gives the window a new key: the variant byte moves on (verbs
//! `ibv_inc_rkey`), so a key handed out before a rebind stops working. A request the
//! device refuses (a range outside the region, remote write or atomic over a region
//! without local write, a bound type 2 window, another PD) completes with
//! [`WcStatus::MwBindErr`](super::WcStatus); what the driver can see at post time
//! ([`MwBindError`]) is refused before anything is written.
//!
//! ```no_run
//! # fn demo<B: ferroverbs_hw::Bus>(pd: &ferroverbs::verbs::Pd<'_, B>, qp: &mut ferroverbs::verbs::QueuePair<'_, B>) -> Result<(), Box<dyn std::error::Error>> {
//! use ferroverbs::verbs::*;
//! let mr = pd.alloc_mr(8192, AccessFlags::LOCAL_WRITE)?;
//! let mut mw = pd.alloc_mw(MwType::Type2)?;
//! let rkey = mw.next_rkey();
//! let bind = MwBind::of(&mr, 4096, 1024, AccessFlags::REMOTE_WRITE)?;
//! let mut b = qp.post()?;
//! b.bind_mw(1, &mw, rkey, &bind, SendFlags::SIGNALED)?;
//! b.ring();
//! mw.set_rkey(rkey); // give `rkey` to the peer: it writes 1024 bytes at 4096
//! # Ok(()) }
//! ```

use ferroverbs_hw::control::cmd::{new_input, Opcode};
use ferroverbs_hw::control::mkey::{
    self, create_mkey_input, create_mkey_out, destroy_mkey_in, destroy_mkey_out, mkc,
    MkcAccessMode, MKC_QPN_NONE,
};
use ferroverbs_hw::datapath::umr::*;
use ferroverbs_hw::Bus;

use super::qp::Queues;
use super::{
    exec, AccessFlags, MemoryRegion, Pd, PostError, QueuePair, Result, SendBatch, SendFlags,
};

/// The type of a memory window (`enum ibv_mw_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Bound by `ibv_bind_mw`, to no QP (`IBV_MW_TYPE_1`).
    Type1 = 1,
    /// Bound by a send work request, to the QP that posts it (`IBV_MW_TYPE_2`).
    Type2 = 2,
}

/// A memory window of a protection domain; `Drop` deallocates it (`DESTROY_MKEY`).
pub struct MemoryWindow<'a, B: Bus> {
    pd: &'a Pd<'a, B>,
    rkey: u32,
    ty: MwType,
    live: bool,
}

impl<B: Bus> std::fmt::Debug for MemoryWindow<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryWindow")
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .field("type", &self.ty)
            .finish()
    }
}

/// Translation entries a window's mkey is created with (Linux `mlx5_ib_alloc_mw`:
/// `roundup(1, 4)` KLMs when the caller asks for none).
const MW_KLMS: u64 = 4;

/// Largest window one KLM entry describes (rdma-core `set_bind_wr`: 2 GiB).
pub const MAX_MW_LEN: u64 = 1 << 31;

impl<'ctx, B: Bus> Pd<'ctx, B> {
    /// Allocates a memory window of type `ty` (`ibv_alloc_mw`): unbound, so its key
    /// gives no access until bound.
    pub fn alloc_mw(&self, ty: MwType) -> Result<MemoryWindow<'_, B>> {
        let mut input = create_mkey_input(0);
        let m = mkey::in_command;
        m(mkc::free).set(&mut input, 1);
        m(mkc::umr_en).set(&mut input, 1);
        m(mkc::lr).set(&mut input, 1);
        m(mkc::access_mode_1_0).set(&mut input, MkcAccessMode::Klms.value().into());
        m(mkc::en_rinval).set(&mut input, u64::from(ty == MwType::Type2));
        m(mkc::qpn).set(&mut input, MKC_QPN_NONE.into());
        m(mkc::pd).set(&mut input, self.pdn().into());
        m(mkc::translations_octword_size).set(&mut input, MW_KLMS);
        let variant = self.context().next_key_variant()?;
        m(mkc::mkey_7_0).set(&mut input, variant.into());
        let out = exec(self.context(), &input, create_mkey_out::SIZE)?;
        let index = create_mkey_out::mkey_index.get(&out) as u32;
        Ok(MemoryWindow {
            pd: self,
            rkey: mkey::mkey(index, variant),
            ty,
            live: true,
        })
    }
}

impl<'a, B: Bus> MemoryWindow<'a, B> {
    /// The window's current key (what a peer uses once it is bound).
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The key the next bind gives the window (verbs `ibv_inc_rkey`: the variant byte
    /// moves on, the index stays).
    pub fn next_rkey(&self) -> u32 {
        inc_rkey(self.rkey)
    }

    /// Records the key a bind posted with [`SendBatch::bind_mw`] gave the window.
    pub fn set_rkey(&mut self, rkey: u32) {
        self.rkey = rkey;
    }

    /// The window's type.
    pub fn mw_type(&self) -> MwType {
        self.ty
    }

    /// The protection domain.
    pub fn pd(&self) -> &'a Pd<'a, B> {
        self.pd
    }

    /// Deallocates the window now and reports the result (`ibv_dealloc_mw`); access
    /// through its key fails from then on.
    pub fn dealloc(mut self) -> Result<()> {
        self.live = false;
        self.destroy()
    }

    fn destroy(&self) -> Result<()> {
        let mut input = new_input(Opcode::DestroyMkey, 0, destroy_mkey_in::SIZE);
        destroy_mkey_in::mkey_index.set(&mut input, u64::from(mkey::mkey_index(self.rkey)));
        exec(self.pd.context(), &input, destroy_mkey_out::SIZE).map(|_| ())
    }
}

impl<B: Bus> Drop for MemoryWindow<'_, B> {
    fn drop(&mut self) {
        if self.live {
            if let Err(e) = self.destroy() {
                tracing::warn!(rkey = self.rkey, error = %e, "DESTROY_MKEY of a window failed");
            }
        }
    }
}

/// `ibv_inc_rkey`: the key with its variant byte incremented.
pub const fn inc_rkey(rkey: u32) -> u32 {
    (rkey & 0xffff_ff00) | (rkey.wrapping_add(1) & 0xff)
}

/// What a bind gives a window (`struct ibv_mw_bind_info`): `len` bytes at `addr` of
/// the memory region whose lkey is `lkey`, with `access` (remote read, write, atomic;
/// local write). A length of 0 unbinds (type 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MwBind {
    /// The region's lkey.
    pub lkey: u32,
    /// Start address, in the region's address space.
    pub addr: u64,
    /// Length in bytes (at most [`MAX_MW_LEN`]).
    pub len: u64,
    /// The window's rights.
    pub access: AccessFlags,
}

/// A bind the driver refuses before posting (rdma-core `mlx5_bind_mw` and
/// `set_bind_wr` refuse the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MwBindError {
    /// The range does not lie inside the region.
    #[error("the window's range lies outside the memory region")]
    OutOfRegion,
    /// Longer than one KLM entry describes (2 GiB): `EOPNOTSUPP`.
    #[error("a window of {0} bytes exceeds the 2 GiB one translation entry describes")]
    TooLong(u64),
    /// The region belongs to another protection domain than the window: `EPERM`.
    #[error("the memory region belongs to another protection domain than the window")]
    OtherPd,
    /// A type 1 window bound with a work request, or a type 2 one with `ibv_bind_mw`.
    #[error("a {0:?} window cannot be bound this way")]
    WrongType(MwType),
}

impl MwBind {
    /// A bind to `len` bytes at `offset` of `mr`, checked against the region.
    pub fn of<B: Bus>(
        mr: &MemoryRegion<'_, B>,
        offset: usize,
        len: usize,
        access: AccessFlags,
    ) -> std::result::Result<MwBind, MwBindError> {
        if offset.checked_add(len).is_none_or(|e| e > mr.len()) {
            return Err(MwBindError::OutOfRegion);
        }
        Ok(MwBind {
            lkey: mr.lkey(),
            addr: mr.addr() + offset as u64,
            len: len as u64,
            access,
        })
    }

    /// The UMR of this bind of the window whose key is `key` on QP `qpn`, the window
    /// getting `new_key` (rdma-core `set_umr_control_seg`, `set_umr_mkey_seg`,
    /// `set_umr_data_seg`).
    fn umr(&self, ty: MwType, key: u32, new_key: u32, qpn: u32) -> MwUmr {
        let type2 = ty == MwType::Type2;
        let mut flags = MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET | MLX5_WQE_UMR_CTRL_FLAG_INLINE;
        let mut mask = MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE | MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY;
        if type2 {
            mask |= MLX5_WQE_UMR_CTRL_MKEY_MASK_QPN;
        }
        let mut access = 0;
        if self.len > 0 {
            if type2 {
                flags |= MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE;
            }
            mask |= MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN
                | MLX5_WQE_UMR_CTRL_MKEY_MASK_START_ADDR
                | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE
                | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ
                | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE
                | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC;
            for (f, bit) in [
                (
                    AccessFlags::LOCAL_WRITE,
                    MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE,
                ),
                (
                    AccessFlags::REMOTE_WRITE,
                    MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE,
                ),
                (
                    AccessFlags::REMOTE_READ,
                    MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ,
                ),
                (
                    AccessFlags::REMOTE_ATOMIC,
                    MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC,
                ),
            ] {
                if self.access.contains(f) {
                    access |= bit;
                }
            }
        } else if type2 {
            flags |= MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN;
        }
        MwUmr {
            key,
            flags,
            mkey_mask: mask,
            free: self.len == 0,
            access,
            qpn: if type2 && self.len > 0 {
                qpn
            } else {
                UMR_QPN_NONE
            },
            variant: new_key as u8,
            // rdma-core's `set_umr_mkey_seg` leaves `flags_pd` zero (the mask has no PD).
            pd: 0,
            start: self.addr,
            len: self.len,
            klm: (self.len > 0).then_some((self.lkey, self.addr)),
        }
    }
}

/// The UMR of `IBV_WR_LOCAL_INV` of `rkey` (rdma-core: a type 2 unbind, variant 0).
fn local_inv_umr(rkey: u32) -> MwUmr {
    MwUmr {
        key: rkey,
        flags: MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET
            | MLX5_WQE_UMR_CTRL_FLAG_INLINE
            | MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN,
        mkey_mask: MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE
            | MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY
            | MLX5_WQE_UMR_CTRL_MKEY_MASK_QPN,
        free: true,
        qpn: UMR_QPN_NONE,
        ..MwUmr::default()
    }
}

impl<B: Bus> Queues<B> {
    /// Writes the UMR `u`, with the queue-full retry of `post_send`.
    fn post_umr(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        u: &MwUmr,
        local_inv: bool,
    ) -> std::result::Result<crate::ring::LastWqe, PostError> {
        match self.sq.write_umr(wr_id, flags, u, local_inv) {
            Ok(w) => Ok(w),
            Err(crate::ring::PostError::QueueFull { .. }) if self.sync_sq() => self
                .sq
                .write_umr(wr_id, flags, u, local_inv)
                .map_err(PostError::from),
            Err(e) => Err(e.into()),
        }
    }
}

impl<B: Bus> SendBatch<'_, B> {
    /// `IBV_WR_BIND_MW`: binds the type 2 window `mw` as `bind` says, giving it the key
    /// `new_key` (usually [`MemoryWindow::next_rkey`]; record it with
    /// [`MemoryWindow::set_rkey`] once posted). The completion is
    /// [`WcOpcode::BindMw`](super::WcOpcode::BindMw).
    pub fn bind_mw(
        &mut self,
        wr_id: u64,
        mw: &MemoryWindow<'_, B>,
        new_key: u32,
        bind: &MwBind,
        flags: SendFlags,
    ) -> std::result::Result<(), PostError> {
        self.bind_mw_raw(wr_id, mw.rkey, mw.ty, new_key, bind, flags)
    }

    /// [`SendBatch::bind_mw`] of the window whose current key is `key` and type `ty`
    /// (for callers that keep windows themselves, as a C library does); the region's PD
    /// is not checked here.
    pub fn bind_mw_raw(
        &mut self,
        wr_id: u64,
        key: u32,
        ty: MwType,
        new_key: u32,
        bind: &MwBind,
        flags: SendFlags,
    ) -> std::result::Result<(), PostError> {
        if bind.len > MAX_MW_LEN {
            return Err(PostError::MwBind(MwBindError::TooLong(bind.len)));
        }
        let u = bind.umr(ty, key, new_key, self.qpn());
        self.umr(wr_id, flags, &u, false)
    }

    /// `IBV_WR_LOCAL_INV`: invalidates the type 2 window whose key is `rkey` (bound to
    /// this QP). The completion is [`WcOpcode::LocalInv`](super::WcOpcode::LocalInv).
    pub fn local_inv(
        &mut self,
        wr_id: u64,
        rkey: u32,
        flags: SendFlags,
    ) -> std::result::Result<(), PostError> {
        self.umr(wr_id, flags, &local_inv_umr(rkey), true)
    }

    fn umr(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        u: &MwUmr,
        local_inv: bool,
    ) -> std::result::Result<(), PostError> {
        let (q, c) = self.parts();
        q.sq.sync_from(c);
        let r = q.post_umr(wr_id, flags, u, local_inv);
        q.sync_sq();
        let budget = q.sq.free();
        q.sq.sync_to(c, r.as_ref().ok().map(|w| w.index()), budget);
        r.map(|_| ())
    }
}

impl<B: Bus> QueuePair<'_, B> {
    /// `ibv_bind_mw`: binds the type 1 window `mw` as `bind` says (a length of 0
    /// unbinds it) and rings the doorbell; the window gets its next key, returned
    /// (and kept in `mw`). The completion is
    /// [`WcOpcode::BindMw`](super::WcOpcode::BindMw).
    pub fn bind_mw(
        &mut self,
        wr_id: u64,
        mw: &mut MemoryWindow<'_, B>,
        bind: &MwBind,
        flags: SendFlags,
    ) -> std::result::Result<u32, PostError> {
        if mw.ty != MwType::Type1 {
            return Err(PostError::MwBind(MwBindError::WrongType(mw.ty)));
        }
        let key = mw.next_rkey();
        let mut b = self.post()?;
        b.bind_mw(wr_id, mw, key, bind, flags)?;
        b.ring();
        mw.rkey = key;
        Ok(key)
    }
}

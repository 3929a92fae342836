//! Changing a memory region's PD and access rights in place, keeping its keys: the
//! UMR WQE of Linux `mlx5r_umr_rereg_pd_access` (`drivers/infiniband/hw/mlx5/umr.c`,
//! what `mlx5_ib_rereg_user_mr` posts for a PD or access change that a UMR can make,
//! `can_use_umr_rereg_access`), on a QP of service type `MLX5_QPC_ST_REG_UMR` (Linux
//! `MLX5_IB_QPT_REG_UMR`, the privileged QP that modifies the mkeys of every PD).
//!
//! The WQE: the control segment (`MLX5_OPCODE_UMR`, `imm` = the region's key, a CQE
//! asked for, initiator small fence), the UMR control segment (flags
//! `MLX5_UMR_CHECK_FREE` (the key must be in use) | `MLX5_UMR_INLINE`, mask PD | LR |
//! LW | RR | RW, | A when the device has atomics: `get_umr_update_access_mask`,
//! `get_umr_update_pd_mask`) and the mkey context segment (the new rights with local
//! read always set, the new PD, QPN 0xffffff, the key's own variant byte).
//!
//! Linux keeps one UMR QP per device (`mlx5r_umr_resource_init`); the driver makes
//! one for each change, over one DMA buffer of three pages (SQ, CQ, doorbell
//! records): CREATE_CQ, CREATE_QP, RST2INIT (port 1), INIT2RTR, RTR2RTS
//! (`mlx5r_umr_qp_rst2rts`), the WQE and its doorbell on the context's UAR, a wait
//! for the CQE bounded by [`UMR_WAIT`] (`mlx5r_umr_post_send_wait`), then
//! DESTROY_QP and DESTROY_CQ. This is the control path (`ibv_rereg_mr` is a system
//! call on Linux): it allocates, and takes the context's command lock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferroverbs_hw::control::caps::cmd_hca_cap as g;
use ferroverbs_hw::control::cmd::{len_with_flex64, new_input, set_flex64, Opcode};
use ferroverbs_hw::control::cq::{create_cq_input, create_cq_out, destroy_cq_in, destroy_cq_out};
use ferroverbs_hw::control::qp::{
    ads, create_qp_in, create_qp_out, destroy_qp_in, destroy_qp_out, in_command, primary_path, qpc,
    transition_input, QpTransition, QpcSt,
};
use ferroverbs_hw::datapath::cqe::{sw_owned, CQE_OP_OWN_INIT, MLX5_CQE_REQ};
use ferroverbs_hw::datapath::uar::{uar_bar_offset, MLX5_BF_OFFSET};
use ferroverbs_hw::datapath::umr::{MwUmr, UMR_NO_KLM_BYTES};
use ferroverbs_hw::datapath::wqe::{
    MLX5_FENCE_MODE_INITIATOR_SMALL, MLX5_OPCODE_UMR, MLX5_WQE_CTRL_CQ_UPDATE,
};
use ferroverbs_hw::{Bus, DmaPerm};

use super::{exec, AccessFlags, Error, MemoryRegion, Pd, Result};
use crate::dma::{DmaBuf, PAGE_SIZE};
use crate::Context;

/// How long the UMR may take to complete (a loaded machine's scheduling included).
pub const UMR_WAIT: Duration = Duration::from_secs(10);
/// SQ WQEBBs (one page).
const SQ_BBS: u32 = 64;
/// CQ entries (one page of 64-byte CQEs).
const CQ_ENTRIES: u32 = 64;
/// The pages of the buffer: SQ, CQ, doorbell records (the CQ's at 0, the QP's at 64).
const SQ_PAGE: usize = 0;
const CQ_PAGE: usize = 1;
const DBR_PAGE: usize = 2;
const QP_DBR: usize = 64;
/// DS of the WQE: control, UMR control and mkey context segments (128 bytes).
const DS: u32 = (16 + UMR_NO_KLM_BYTES as u32) / 16;

/// Whether a UMR can take a region from rights `current` to `target` (Linux
/// `can_use_umr_rereg_access`: only local write, remote write and remote read may
/// differ, relaxed ordering aside, which these flags do not carry).
fn umr_can_rereg_access(current: AccessFlags, target: AccessFlags) -> bool {
    let may_differ =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    (current.bits() ^ target.bits()) & !may_differ.bits() == 0
}

impl<'a, B: Bus> MemoryRegion<'a, B> {
    /// Whether [`MemoryRegion::rereg_pd_access`] can give the region the rights
    /// `access` in place: a UMR may make the change (Linux
    /// `can_use_umr_rereg_access`: only LOCAL_WRITE, REMOTE_WRITE and REMOTE_READ
    /// differ), and the region's device mapping already allows the writes the new
    /// rights need (a region registered with no write right is mapped read-only and
    /// its translation entries lack the write bit, so granting it one takes a new
    /// registration).
    pub fn can_rereg_in_place(&self, access: AccessFlags) -> bool {
        umr_can_rereg_access(self.access(), access)
            && (self.access().writable() || !access.writable())
    }

    /// Moves the region to `pd` with the rights `access` in place (Linux
    /// `mlx5r_umr_rereg_pd_access`, see the module documentation): its keys stay
    /// valid, and every later access by the device obeys the new PD and rights.
    ///
    /// Errors: rights verbs forbids ([`Error::InvalidAccess`]); a change that cannot
    /// be made in place ([`MemoryRegion::can_rereg_in_place`] false:
    /// [`Error::InvalidArgument`]); a PD of another device
    /// ([`Error::ForeignObject`]); the device refusing the UMR
    /// ([`Error::UmrFailed`], with its CQE syndrome) or not completing it within
    /// [`UMR_WAIT`] ([`Error::UmrTimeout`]); a command's error. On any error the
    /// region keeps its PD and rights.
    pub fn rereg_pd_access(&mut self, pd: &'a Pd<'a, B>, access: AccessFlags) -> Result<()> {
        access.check()?;
        if !self.can_rereg_in_place(access) {
            return Err(Error::InvalidArgument(
                "the access change needs a new registration (a right a UMR cannot change, \
                 or a write right on a region mapped read-only)",
            ));
        }
        let ctx = self.pd().context();
        if pd.context().id() != ctx.id() {
            return Err(Error::ForeignObject {
                object: "PD",
                number: pd.pdn(),
                owner: pd.context().id(),
                creating: "memory region",
                device: ctx.id(),
            });
        }
        let u = rereg_umr(ctx, self.lkey(), pd.pdn(), access);
        post_umr(ctx, pd.pdn(), &u)?;
        self.set_pd_access(pd, access);
        Ok(())
    }
}

/// The UMR of `mlx5r_umr_rereg_pd_access` for the region whose key is `key`: PD
/// `pdn` and the rights `access`.
fn rereg_umr<B: Bus>(ctx: &Context<B>, key: u32, pdn: u32, access: AccessFlags) -> MwUmr {
    MwUmr::rereg_pd_access(key, pdn, access.bits(), ctx.cap(g::atomic) != 0)
}

/// The firmware objects of one UMR QP, destroyed when dropped (QP before CQ).
struct UmrObjects<'c, B: Bus> {
    ctx: &'c Context<B>,
    cqn: Option<u32>,
    qpn: Option<u32>,
}

impl<B: Bus> Drop for UmrObjects<'_, B> {
    fn drop(&mut self) {
        if let Some(qpn) = self.qpn {
            let mut input = new_input(Opcode::DestroyQp, 0, destroy_qp_in::SIZE);
            destroy_qp_in::qpn.set(&mut input, qpn.into());
            if let Err(e) = exec(self.ctx, &input, destroy_qp_out::SIZE) {
                tracing::warn!(qpn, error = %e, "DESTROY_QP of the UMR QP failed");
            }
        }
        if let Some(cqn) = self.cqn {
            let mut input = new_input(Opcode::DestroyCq, 0, destroy_cq_in::SIZE);
            destroy_cq_in::cqn.set(&mut input, cqn.into());
            if let Err(e) = exec(self.ctx, &input, destroy_cq_out::SIZE) {
                tracing::warn!(cqn, error = %e, "DESTROY_CQ of the UMR QP failed");
            }
        }
    }
}

/// Makes a UMR QP in PD `pdn`, posts `u` on it and waits for its completion (see
/// the module documentation).
fn post_umr<B: Bus>(ctx: &Context<B>, pdn: u32, u: &MwUmr) -> Result<()> {
    let uar = ctx.uar_index().ok_or(Error::InvalidArgument(
        "the context has no UAR (bring-up incomplete)",
    ))?;
    let eqn = ctx.async_eqn().ok_or(Error::InvalidArgument(
        "the context has no EQ (bring-up incomplete)",
    ))?;
    let page = |p: usize| p * PAGE_SIZE;
    let buf = Arc::new(DmaBuf::new(ctx.bus(), page(3), DmaPerm::RW)?);
    let pa = |p: usize| buf.iova() + page(p) as u64;
    for i in 0..CQ_ENTRIES as usize {
        buf.write_u8(page(CQ_PAGE) + i * 64 + 63, CQE_OP_OWN_INIT);
    }
    let mut objs = UmrObjects {
        ctx,
        cqn: None,
        qpn: None,
    };
    let input = create_cq_input(
        CQ_ENTRIES.trailing_zeros() as u8,
        uar,
        u32::from(eqn),
        pa(DBR_PAGE),
        0,
        &[pa(CQ_PAGE)],
    );
    let out = exec(ctx, &input, create_cq_out::SIZE)?;
    let cqn = create_cq_out::cqn.get(&out) as u32;
    objs.cqn = Some(cqn);
    let in_len = len_with_flex64(&create_qp_in::LAYOUT, 1)
        .ok_or(Error::InvalidArgument("CREATE_QP input"))?;
    let mut input = new_input(Opcode::CreateQp, 0, in_len);
    let mut s = |f, v: u64| in_command(f).set(&mut input, v);
    s(qpc::st, QpcSt::RegUmr.value().into());
    s(qpc::pm_state, 3);
    s(qpc::pd, pdn.into());
    s(qpc::uar_page, uar.into());
    // MLX5_ZERO_LEN_RQ: the QP receives nothing.
    s(qpc::rq_type, 3);
    s(qpc::log_sq_size, SQ_BBS.trailing_zeros().into());
    s(qpc::cqn_snd, cqn.into());
    s(qpc::cqn_rcv, cqn.into());
    s(qpc::log_page_size, 0);
    s(qpc::dbr_addr, pa(DBR_PAGE) + QP_DBR as u64);
    set_flex64(&mut input, create_qp_in::pas, &[pa(SQ_PAGE)])
        .map_err(|_| Error::InvalidArgument("CREATE_QP input"))?;
    let out = exec(ctx, &input, create_qp_out::SIZE)?;
    let qpn = create_qp_out::qpn.get(&out) as u32;
    objs.qpn = Some(qpn);
    // `mlx5r_umr_qp_rst2rts`: port 1, nothing else.
    let t = QpTransition::Rst2Init;
    let mut input = transition_input(t, qpn, 0);
    primary_path(ads::vhca_port_num).set(&mut input, 1);
    in_command(qpc::pm_state).set(&mut input, 3);
    exec(ctx, &input, t.out_layout().size())?;
    for t in [QpTransition::Init2Rtr, QpTransition::Rtr2Rts] {
        exec(ctx, &transition_input(t, qpn, 0), t.out_layout().size())?;
    }
    // The WQE at index 0 (two WQEBBs).
    let mut wqe = [0u8; 16 + UMR_NO_KLM_BYTES];
    wqe[0..4].copy_from_slice(&u32::from(MLX5_OPCODE_UMR).to_be_bytes());
    wqe[4..8].copy_from_slice(&((qpn << 8) | DS).to_be_bytes());
    wqe[11] = MLX5_WQE_CTRL_CQ_UPDATE | MLX5_FENCE_MODE_INITIATOR_SMALL;
    wqe[12..16].copy_from_slice(&u.key.to_be_bytes());
    u.emit(&mut wqe[16..]);
    buf.write_bytes(page(SQ_PAGE), &wqe);
    let bus = ctx.bus();
    // The WQE before the doorbell record, the record before the doorbell.
    bus.wmb();
    buf.write_be32(page(DBR_PAGE) + QP_DBR + 4, 2);
    bus.wmb();
    let mut first = [0u8; 8];
    first.copy_from_slice(&wqe[..8]);
    bus.write64(
        uar_bar_offset(uar) + MLX5_BF_OFFSET,
        u64::from_be_bytes(first),
    );
    let start = Instant::now();
    let cqe = page(CQ_PAGE);
    loop {
        let op_own = buf.load_u8_acquire(cqe + 63);
        if sw_owned(op_own, 0, CQ_ENTRIES) {
            bus.rmb();
            if op_own >> 4 == MLX5_CQE_REQ {
                return Ok(());
            }
            // `mlx5_err_cqe.syndrome`, byte 55 (`mlx5r_umr_post_send_wait`: an
            // error completion is EFAULT in Linux).
            return Err(Error::UmrFailed {
                key: u.key,
                syndrome: buf.read_u8(cqe + 55),
            });
        }
        if start.elapsed() > UMR_WAIT {
            return Err(Error::UmrTimeout { key: u.key });
        }
        std::thread::sleep(Duration::from_micros(20));
    }
}

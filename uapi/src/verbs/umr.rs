//! The layer's own UMR QP, as `mlx5_ib` keeps one per device
//! (`mlx5r_umr_resource_init`, Linux `drivers/infiniband/hw/mlx5/umr.c`): a PD, a
//! CQ and a QP of service type `MLX5_QPC_ST_REG_UMR` (Linux `MLX5_IB_QPT_REG_UMR`)
//! brought to RTS with port 1 and no other parameter (`mlx5r_umr_qp_rst2rts`), all
//! made with the driver's commands over memory of this layer (the SQ, the CQ and
//! their doorbell records in three pages mapped for the device). It is made the
//! first time a region is changed in place, and lives as long as the process's
//! device.
//!
//! [`rereg_pd_access`] posts the WQE of `mlx5r_umr_rereg_pd_access`: the control
//! segment (`MLX5_OPCODE_UMR`, `imm` = the region's key, a CQE asked for, initiator
//! small fence), the UMR control segment (flags `MLX5_UMR_CHECK_FREE` (the key must
//! be in use) | `MLX5_UMR_INLINE`, mask PD | LR | LW | RR | RW, | A when the device
//! has atomics: `get_umr_update_access_mask`, `get_umr_update_pd_mask`) and the mkey
//! context segment (the new rights with local read always set, the new PD, QPN
//! 0xffffff, the key's own variant byte). It rings the doorbell on the layer's UAR
//! and waits, bounded, for the CQE (`mlx5r_umr_post_send_wait`). On an error CQE it
//! brings the QP back through RESET to RTS and answers EFAULT, as
//! `mlx5r_umr_recover` and `mlx5r_umr_post_send_wait` do; a WQE that does not
//! complete in [`WAIT`] leaves the QP unusable (EIO from then on).

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ferroverbs_hw::control::cmd::{len_with_flex64, new_input, set_flex64, Opcode};
use ferroverbs_hw::control::cq::{create_cq_input, create_cq_out, destroy_cq_in, destroy_cq_out};
use ferroverbs_hw::control::qp::{
    ads, create_qp_in, create_qp_out, destroy_qp_in, destroy_qp_out, in_command, primary_path, qpc,
    transition_input, QpTransition, QpcSt,
};
use ferroverbs_hw::control::uar_pd_td::{alloc_pd_out, dealloc_pd_in};
use ferroverbs_hw::datapath::cqe::{sw_owned, CQE_OP_OWN_INIT, MLX5_CQE_REQ};
use ferroverbs_hw::datapath::uar::{uar_bar_offset, MLX5_BF_OFFSET};
use ferroverbs_hw::datapath::umr::{MwUmr, UMR_NO_KLM_BYTES};
use ferroverbs_hw::datapath::wqe::{
    MLX5_FENCE_MODE_INITIATOR_SMALL, MLX5_OPCODE_UMR, MLX5_WQE_CTRL_CQ_UPDATE,
};
use ferroverbs_hw::{Bus, DmaPerm};

use super::{caps_atomic, exec, Mapped};
use crate::nic::Nic;
use crate::user::PAGE;
use crate::Errno;

/// How long a UMR may take to complete (a loaded machine's scheduling included).
pub const WAIT: Duration = Duration::from_secs(10);
/// SQ WQEBBs (one page); each UMR takes two, and one is outstanding at a time.
const SQ_BBS: u32 = 64;
/// CQ entries (one page of 64-byte CQEs).
const CQ_ENTRIES: u32 = 64;
/// The three pages: SQ, CQ, doorbell records (the CQ's at 0, the QP's at 64).
const SQ_PAGE: usize = 0;
const CQ_PAGE: usize = 1;
const DBR_PAGE: usize = 2;
const PAGES: usize = 3;
const QP_DBR: usize = 64;
/// DS of the WQE: control, UMR control and mkey context segments (128 bytes).
const DS: u32 = (16 + UMR_NO_KLM_BYTES as u32) / 16;

/// The UMR QP and its rings.
struct UmrQp {
    /// The three pages, as 64-bit words (the device reads and writes them too).
    mem: &'static [AtomicU64],
    map: Mapped,
    pdn: u32,
    cqn: u32,
    qpn: u32,
    /// SQ producer counter (WQEBBs).
    pi: u16,
    /// CQ consumer counter.
    ci: u32,
    /// A WQE never completed: the rings can no longer be trusted.
    broken: bool,
}

/// The process's one UMR QP (its device is the process's one NIC); the lock
/// serialises the UMRs as `mlx5_ib`'s `umrc.sem` does.
static UMR: Mutex<Option<UmrQp>> = Mutex::new(None);

fn word_index(page: usize, off: usize) -> usize {
    (page * PAGE as usize + off) / 8
}

impl UmrQp {
    fn store(&self, page: usize, off: usize, bytes: &[u8]) {
        let at = word_index(page, off);
        for (i, c) in bytes.chunks_exact(8).enumerate() {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.mem[at + i].store(u64::from_ne_bytes(w), Ordering::Relaxed);
        }
    }

    fn load(&self, page: usize, off: usize) -> [u8; 8] {
        self.mem[word_index(page, off)]
            .load(Ordering::Acquire)
            .to_ne_bytes()
    }

    /// Writes a 32-bit big-endian doorbell record word at `off` of the record page.
    fn store_dbr(&self, off: usize, v: u32) {
        let at = word_index(DBR_PAGE, off & !7);
        let mut w = self.mem[at].load(Ordering::Relaxed).to_ne_bytes();
        let k = off & 7;
        w[k..k + 4].copy_from_slice(&v.to_be_bytes());
        self.mem[at].store(u64::from_ne_bytes(w), Ordering::Release);
    }

    /// Posts the UMR `u` on `key` and waits for its completion: `Ok(None)` on
    /// success, `Ok(Some(syndrome))` on an error CQE.
    fn post_wait(&mut self, nic: &Nic, key: u32, u: &MwUmr) -> Result<Option<u8>, Errno> {
        let idx = self.pi;
        let slot = usize::from(idx) % SQ_BBS as usize;
        let mut wqe = [0u8; 16 + UMR_NO_KLM_BYTES];
        wqe[0..4]
            .copy_from_slice(&((u32::from(idx) << 8) | u32::from(MLX5_OPCODE_UMR)).to_be_bytes());
        wqe[4..8].copy_from_slice(&((self.qpn << 8) | DS).to_be_bytes());
        wqe[11] = MLX5_WQE_CTRL_CQ_UPDATE | MLX5_FENCE_MODE_INITIATOR_SMALL;
        wqe[12..16].copy_from_slice(&key.to_be_bytes());
        u.emit(&mut wqe[16..]);
        self.store(SQ_PAGE, slot * 64, &wqe);
        self.pi = idx.wrapping_add(2);
        fence(Ordering::Release);
        self.store_dbr(QP_DBR + 4, u32::from(self.pi));
        fence(Ordering::SeqCst);
        let mut first = [0u8; 8];
        first.copy_from_slice(&wqe[..8]);
        nic.ctx.bus().write64(
            uar_bar_offset(nic.uar) + MLX5_BF_OFFSET,
            u64::from_be_bytes(first),
        );
        let start = Instant::now();
        loop {
            let n = self.ci % CQ_ENTRIES;
            let tail = self.load(CQ_PAGE, n as usize * 64 + 56);
            if sw_owned(tail[7], self.ci, CQ_ENTRIES) {
                self.ci = self.ci.wrapping_add(1);
                self.store_dbr(0, self.ci & 0xff_ffff);
                let op = tail[7] >> 4;
                if op == MLX5_CQE_REQ {
                    return Ok(None);
                }
                // `mlx5_err_cqe.syndrome`, byte 55.
                let synd = self.load(CQ_PAGE, n as usize * 64 + 48)[7];
                return Ok(Some(synd));
            }
            if start.elapsed() > WAIT {
                self.broken = true;
                return Err(Errno::EIO);
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

fn alloc_pages() -> Result<&'static [AtomicU64], Errno> {
    let layout = std::alloc::Layout::from_size_align(PAGES * PAGE as usize, PAGE as usize)
        .map_err(|_| Errno::ENOMEM)?;
    // SAFETY: the layout has a nonzero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        return Err(Errno::ENOMEM);
    }
    // SAFETY: `p` is a fresh zeroed allocation of `PAGES` pages aligned to a page,
    // never freed (it lives as long as the process's device); `AtomicU64` has the
    // size and alignment of `u64`, and all zeros is a valid value.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<AtomicU64>(), PAGES * PAGE as usize / 8) })
}

/// RST2INIT (port 1), INIT2RTR, RTR2RTS of the UMR QP (`mlx5r_umr_qp_rst2rts`).
fn rst2rts(nic: &Nic, qpn: u32) -> Result<(), Errno> {
    let t = QpTransition::Rst2Init;
    let mut input = transition_input(t, qpn, 0);
    primary_path(ads::vhca_port_num).set(&mut input, 1);
    in_command(qpc::pm_state).set(&mut input, 3);
    exec(nic, &input, t.out_layout().size())?;
    for t in [QpTransition::Init2Rtr, QpTransition::Rtr2Rts] {
        exec(nic, &transition_input(t, qpn, 0), t.out_layout().size())?;
    }
    Ok(())
}

fn create(nic: &'static Nic) -> Result<UmrQp, Errno> {
    let mem = alloc_pages()?;
    let map = Mapped::new(nic, mem.as_ptr() as u64, PAGES * PAGE as usize, DmaPerm::RW)?;
    let mut q = UmrQp {
        mem,
        map,
        pdn: 0,
        cqn: 0,
        qpn: 0,
        pi: 0,
        ci: 0,
        broken: false,
    };
    let mut op_own = [0u8; 8];
    op_own[7] = CQE_OP_OWN_INIT;
    for i in 0..CQ_ENTRIES as usize {
        q.store(CQ_PAGE, i * 64 + 56, &op_own);
    }
    let r = make_objects(nic, &mut q);
    if r.is_err() {
        destroy_objects(nic, &q);
        q.map.unmap(nic);
    }
    r.map(|_| q)
}

fn make_objects(nic: &Nic, q: &mut UmrQp) -> Result<(), Errno> {
    let pas = q.map.pas();
    let out = exec(nic, &new_input(Opcode::AllocPd, 0, 16), alloc_pd_out::SIZE)?;
    q.pdn = alloc_pd_out::pd.get(&out) as u32;
    let input = create_cq_input(
        CQ_ENTRIES.trailing_zeros() as u8,
        nic.uar,
        u32::from(nic.channel.eqn()),
        pas[DBR_PAGE],
        0,
        &pas[CQ_PAGE..CQ_PAGE + 1],
    );
    let out = exec(nic, &input, create_cq_out::SIZE)?;
    q.cqn = create_cq_out::cqn.get(&out) as u32;
    let in_len = len_with_flex64(&create_qp_in::LAYOUT, 1).ok_or(Errno::ENOMEM)?;
    let mut input = new_input(Opcode::CreateQp, 0, in_len);
    let mut s = |f, v: u64| in_command(f).set(&mut input, v);
    s(qpc::st, QpcSt::RegUmr.value().into());
    s(qpc::pm_state, 3);
    s(qpc::pd, q.pdn.into());
    s(qpc::uar_page, nic.uar.into());
    // MLX5_ZERO_LEN_RQ: the QP receives nothing.
    s(qpc::rq_type, 3);
    s(qpc::log_sq_size, SQ_BBS.trailing_zeros().into());
    s(qpc::cqn_snd, q.cqn.into());
    s(qpc::cqn_rcv, q.cqn.into());
    s(qpc::log_page_size, 0);
    s(qpc::dbr_addr, pas[DBR_PAGE] + QP_DBR as u64);
    set_flex64(&mut input, create_qp_in::pas, &pas[SQ_PAGE..SQ_PAGE + 1])
        .map_err(|_| Errno::ENOMEM)?;
    let out = exec(nic, &input, create_qp_out::SIZE)?;
    q.qpn = create_qp_out::qpn.get(&out) as u32;
    rst2rts(nic, q.qpn)
}

/// Undoes what [`make_objects`] made of `q` (a failed creation).
fn destroy_objects(nic: &Nic, q: &UmrQp) {
    if q.qpn != 0 {
        let mut input = new_input(Opcode::DestroyQp, 0, destroy_qp_in::SIZE);
        destroy_qp_in::qpn.set(&mut input, q.qpn.into());
        let _ = exec(nic, &input, destroy_qp_out::SIZE);
    }
    if q.cqn != 0 {
        let mut input = new_input(Opcode::DestroyCq, 0, destroy_cq_in::SIZE);
        destroy_cq_in::cqn.set(&mut input, q.cqn.into());
        let _ = exec(nic, &input, destroy_cq_out::SIZE);
    }
    if q.pdn != 0 {
        let mut input = new_input(Opcode::DeallocPd, 0, dealloc_pd_in::SIZE);
        dealloc_pd_in::pd.set(&mut input, q.pdn.into());
        let _ = exec(nic, &input, 16);
    }
}

/// The UMR of `mlx5r_umr_rereg_pd_access` for the region whose key is `key`: PD
/// `pdn` and the verbs access flags `access` (see the module documentation).
fn rereg_umr(nic: &Nic, key: u32, pdn: u32, access: u32) -> MwUmr {
    MwUmr::rereg_pd_access(key, pdn, access, caps_atomic(nic))
}

/// Changes the PD and the access rights of the region whose key is `key` in place
/// (`mlx5r_umr_rereg_pd_access`): the key stays valid. EFAULT when the device
/// refused the UMR, EIO when the UMR QP cannot be used, or a command's errno when
/// it cannot be made.
pub fn rereg_pd_access(nic: &'static Nic, key: u32, pdn: u32, access: u32) -> Result<(), Errno> {
    let mut g = UMR.lock().unwrap_or_else(|e| e.into_inner());
    if g.is_none() {
        *g = Some(create(nic)?);
    }
    let q = g.as_mut().ok_or(Errno::EIO)?;
    if q.broken {
        return Err(Errno::EIO);
    }
    let u = rereg_umr(nic, key, pdn, access);
    match q.post_wait(nic, key, &u)? {
        None => Ok(()),
        Some(synd) => {
            if crate::trace() {
                eprintln!("uapi: UMR on key {key:#x} failed, syndrome {synd:#x}");
            }
            // `mlx5r_umr_recover`: the QP went to the error state; back to RTS
            // through RESET (the SQ counters restart from 0).
            let t = QpTransition::ToRst;
            exec(nic, &transition_input(t, q.qpn, 0), t.out_layout().size())?;
            q.pi = 0;
            q.store_dbr(QP_DBR + 4, 0);
            if rst2rts(nic, q.qpn).is_err() {
                q.broken = true;
            }
            Err(Errno::EFAULT)
        }
    }
}

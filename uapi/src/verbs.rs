//! The ucontext and its objects, and the commands that make them, as Linux's
//! `mlx5_ib` executes them over `mlx5_core`: each verbs object is a firmware object
//! made by a command through the driver's command interface, over the application's
//! own memory (queue buffers and doorbell records mapped for the device with their
//! page lists, as a kernel pins user memory).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;

use ferroverbs::verbs::{flow_label_from_qpns, udp_sport_from_flow_label};
use ferroverbs::{CmdStatus, LinkLayer};
use ferroverbs_hw::control::caps::cmd_hca_cap as g;
use ferroverbs_hw::control::cmd::{len_with_flex64, new_input, set_flex64, Opcode};
use ferroverbs_hw::control::cq::{create_cq_input, create_cq_out, destroy_cq_in, destroy_cq_out};
use ferroverbs_hw::control::mkey::{
    self, create_mkey_in, create_mkey_input, create_mkey_out, destroy_mkey_in, destroy_mkey_out,
    mkc, mtt_octwords, MkcAccessMode, MKC_QPN_NONE, MTT_READ, MTT_WRITE,
};
use ferroverbs_hw::control::qp::{
    ads, create_qp_in, create_qp_out, destroy_qp_in, destroy_qp_out, in_command, primary_path, qpc,
    query_qp_in, query_qp_out, transition_input, QpTransition, QpcState,
    MLX5_QP_OPTPAR_ACK_TIMEOUT, MLX5_QP_OPTPAR_PKEY_INDEX, MLX5_QP_OPTPAR_PRIMARY_ADDR_PATH,
    MLX5_QP_OPTPAR_PRI_PORT, MLX5_QP_OPTPAR_Q_KEY, MLX5_QP_OPTPAR_RAE, MLX5_QP_OPTPAR_RETRY_COUNT,
    MLX5_QP_OPTPAR_RNR_RETRY, MLX5_QP_OPTPAR_RNR_TIMEOUT, MLX5_QP_OPTPAR_RRA_MAX,
    MLX5_QP_OPTPAR_RRE, MLX5_QP_OPTPAR_RWE, MLX5_QP_OPTPAR_SRA_MAX,
};
use ferroverbs_hw::control::srq::{create_srq_input, create_srq_out, destroy_srq_in, SrqParams};
use ferroverbs_hw::control::uar_pd_td::{alloc_pd_out, dealloc_pd_in};
use ferroverbs_hw::{Bus, DmaPerm};
use ferroverbs_sim::link::udp::addr_of_gid;

use crate::abi::{self, cmd, qp_mask, Req, Resp};
use crate::events::{self, EventFile, Route};
use crate::file::Cmd;
use crate::nic::Nic;
use crate::user::{self, PAGE};
use crate::{fdtab, Errno};

pub(crate) mod odp;
mod resize_cq;
mod umr;

/// `MLX5_LIB_CAP_DYN_UAR`: the library allocates its UARs (`MLX5_IB_METHOD_UAR_OBJ_ALLOC`).
const LIB_CAP_DYN_UAR: u64 = 1 << 1;
/// `MLX5_QP_FLAG_UAR_PAGE_INDEX`: `bfreg_index` names a dynamically allocated UAR.
const QP_FLAG_UAR_PAGE_INDEX: u32 = 1 << 10;
/// `MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX`.
const CQ_FLAG_UAR_PAGE_INDEX: u16 = 1 << 1;
/// `IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION` (`ib_user_ioctl_verbs.h`).
const CQ_FLAGS_TIMESTAMP_COMPLETION: u32 = 1 << 0;
/// The first mmap page offset of the entries mlx5_ib hands out
/// (`MLX5_IB_MMAP_OFFSET_START << 16`, `rdma_user_mmap_entry_insert_range`).
pub const MMAP_OFFSET_START: u64 = 9 << 16;
/// `MLX5_IB_ALLOC_UCTX_DEVX`.
const UCTX_DEVX: u32 = 1;
/// `MLX5_MAX_BFREGS` (Linux `hw/mlx5/main.c: calc_total_bfregs`).
pub const MAX_BFREGS: u32 = 512;
/// `MLX5_QP_FLAG_SIGNATURE`, `_SCATTER_CQE`, `_BFREG_INDEX`, `_UAR_PAGE_INDEX`.
const QP_FLAG_SIGNATURE: u32 = 1 << 0;
const QP_FLAG_SCATTER_CQE: u32 = 1 << 1;
const QP_FLAG_BFREG_INDEX: u32 = 1 << 3;
/// `MLX5_QP_FLAG_ALLOW_SCATTER_CQE` (`mlx5dv_create_qp`'s
/// `MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE`, which UCX's rc_mlx5 asks for): requester
/// scatter to CQE without `sq_sig_all`, as `mlx5_ib`'s `process_vendor_flag` takes it.
const QP_FLAG_ALLOW_SCATTER_CQE: u32 = 1 << 8;
/// `ibv_access_flags`.
const ACCESS_LOCAL_WRITE: u32 = 1;
const ACCESS_REMOTE_WRITE: u32 = 2;
const ACCESS_REMOTE_READ: u32 = 4;
const ACCESS_REMOTE_ATOMIC: u32 = 8;
const ACCESS_ZERO_BASED: u32 = 32;
const ACCESS_ON_DEMAND: u32 = 64;
const ACCESS_RELAXED_ORDERING: u32 = 1 << 20;
/// `ibv_qp_type`.
const QPT_RC: u8 = 2;
const QPT_UC: u8 = 3;
const QPT_UD: u8 = 4;

/// The software byte of the memory keys (Linux `mlx5_ib` `mkey_var`).
static KEY_VARIANT: AtomicU8 = AtomicU8::new(0);

fn exec(nic: &Nic, input: &[u8], out_len: usize) -> Result<Vec<u8>, Errno> {
    nic.ctx.exec_cmd(input, out_len).map_err(|e| match e {
        // Linux `mlx5_cmd_check` → `cmd_status_to_err`.
        ferroverbs::Error::Cmd(c) => match c.status {
            CmdStatus::BadOp => Errno::EINVAL,
            CmdStatus::BadParam | CmdStatus::BadResource | CmdStatus::BadResState => Errno::EINVAL,
            CmdStatus::BadIndex | CmdStatus::BadQpState | CmdStatus::BadPacket => Errno::EINVAL,
            CmdStatus::ResourceBusy => Errno::EBUSY,
            CmdStatus::LimitsExceeded => Errno::ENOMEM,
            CmdStatus::NoResources => Errno::EAGAIN,
            _ => Errno::EIO,
        },
        _ => Errno::EIO,
    })
}

/// Device memory the application handed over: mapped for the device.
struct Mapped {
    iova: u64,
    len: usize,
    /// Mapped for device writes too (`DmaPerm::RW`).
    writable: bool,
}

impl Mapped {
    fn new(nic: &Nic, addr: u64, len: usize, perm: DmaPerm) -> Result<Mapped, Errno> {
        user::check_mapped(addr, len as u64)?;
        let iova = nic
            .ctx
            .bus()
            .dma_map(addr as usize, len, perm)
            .map_err(|_| Errno::ENOMEM)?;
        Ok(Mapped {
            iova,
            len,
            writable: perm == DmaPerm::RW,
        })
    }

    /// An on-demand mapping (an ODP region, see [`odp`]): the pages need not be
    /// mapped now; the device reaches them through the page tables at each access.
    fn on_demand(nic: &Nic, addr: u64, len: usize, perm: DmaPerm) -> Result<Mapped, Errno> {
        if addr == 0 {
            return Err(Errno::EFAULT);
        }
        // The page list of the region's mkey is built whole: as large a region as a
        // pinned one may be (`user::MAX_PAGES`), ENOMEM beyond.
        let end = addr.checked_add(len as u64).ok_or(Errno::EINVAL)?;
        if (end - (addr & !(PAGE - 1))).div_ceil(PAGE) > user::MAX_PAGES {
            return Err(Errno::ENOMEM);
        }
        let iova = nic
            .ctx
            .bus()
            .dma_map_on_demand(addr as usize, len, perm)
            .map_err(|e| match e {
                ferroverbs_hw::BusError::MapRefused { .. } => Errno::EOPNOTSUPP,
                _ => Errno::ENOMEM,
            })?;
        Ok(Mapped {
            iova,
            len,
            writable: perm == DmaPerm::RW,
        })
    }

    /// The page addresses of `[iova, iova + len)` (the mapping keeps the page offset).
    fn pas(&self) -> Vec<u64> {
        let first = self.iova & !(PAGE - 1);
        let n = (self.iova + self.len as u64 - first).div_ceil(PAGE);
        (0..n).map(|i| first + i * PAGE).collect()
    }

    fn unmap(&self, nic: &Nic) {
        let _ = nic.ctx.bus().dma_unmap(self.iova, self.len);
    }
}

struct Pd {
    pdn: u32,
    users: u32,
}

struct Mr {
    index: u32,
    /// Its lkey and rkey.
    key: u32,
    pd: u32,
    mem: Mapped,
    /// What it was registered with (REREG_MR keeps what it does not change).
    start: u64,
    length: u64,
    hca_va: u64,
    access: u32,
}

/// A memory window (`mlx5_ib_alloc_mw`): a free KLM mkey that UMR WQEs bind.
struct Mw {
    index: u32,
    pd: u32,
}

struct Cq {
    cqn: u32,
    mem: Mapped,
    db_page: u64,
    comp: Arc<AtomicU32>,
    async_reported: Arc<AtomicU32>,
    users: u32,
    /// 64 or 128 (`mlx5_ib_create_cq.cqe_size`).
    cqe_size: u32,
}

struct Qp {
    qpn: u32,
    ty: u8,
    state: u8,
    pd: u32,
    send_cq: u32,
    recv_cq: u32,
    srq: Option<u32>,
    mem: Option<Mapped>,
    db_page: u64,
    caps: [u32; 5],
    /// The receive queue as libmlx5 laid it out (Linux `set_rq_size` from the user's
    /// `rq_wqe_count` and `rq_wqe_shift`): WQEs and scatter entries per WQE, what
    /// QUERY_QP reports as `max_recv_wr` and `max_recv_sge`.
    rq_wqes: u32,
    rq_max_gs: u32,
    sq_sig_all: u8,
    port: u8,
    pkey_index: u16,
    qkey: u32,
    sq_bytes: u32,
    events: Arc<AtomicU32>,
}

struct Srq {
    srqn: u32,
    pd: u32,
    mem: Mapped,
    db_page: u64,
    max_wr: u32,
    max_sge: u32,
    limit: u32,
    users: u32,
    events: Arc<AtomicU32>,
}

struct Ah {
    pd: u32,
}

/// A UAR page the library allocated (`MLX5_IB_METHOD_UAR_OBJ_ALLOC`): its page id
/// (what CREATE_QP and CREATE_CQ name) and mmap page offset. The doorbells of every
/// UAR page of the context reach the device through the layer's own UAR (see
/// `doorbell`), so the page id names the page among the context's.
struct DynUar {
    page_id: u32,
    pgoff: u64,
}

/// A user context (`mlx5_ib_ucontext`) and its objects.
pub struct Ucontext {
    nic: &'static Nic,
    file: u64,
    async_file: Arc<EventFile>,
    tot_bfregs: u32,
    /// The library allocates its UAR pages (`bfregi.lib_uar_dyn`).
    dyn_uar: bool,
    uars: HashMap<u32, DynUar>,
    next_uar: u32,
    cqe_version: u8,
    next_handle: u32,
    pds: HashMap<u32, Pd>,
    mrs: HashMap<u32, Mr>,
    mws: HashMap<u32, Mw>,
    cqs: HashMap<u32, Cq>,
    qps: HashMap<u32, Qp>,
    srqs: HashMap<u32, Srq>,
    ahs: HashMap<u32, Ah>,
    /// Doorbell record pages mapped for the device: page address → (IOVA, users)
    /// (Linux `mlx5_ib_db_map_user` shares one mapping per page).
    db_pages: HashMap<u64, (u64, u32)>,
}

impl Ucontext {
    /// GET_CONTEXT (Linux `mlx5_ib_alloc_ucontext`): with `MLX5_LIB_CAP_DYN_UAR`
    /// (libmlx5 always asks) no static UARs (`tot_bfregs` 0, the library allocates
    /// its pages with the UAR_OBJ_ALLOC method); otherwise `tot_bfregs` static
    /// registers in `tot_bfregs / 2` UAR pages.
    pub fn create(nic: &'static Nic, file: u64, c: &Cmd<'_>) -> Result<Ucontext, Errno> {
        use abi::alloc_ucontext_req as q;
        let u = &c.udata;
        // The v0 request (8 bytes) or at least up to max_cqe_version.
        if c.udata_len < q::max_cqe_version && c.udata_len != 8 {
            return Err(Errno::EINVAL);
        }
        let flags = u.u32(q::flags);
        if flags & !UCTX_DEVX != 0
            || u.u32(q::comp_mask) != 0
            || u.u8(q::reserved0) != 0
            || u.u16(q::reserved1) != 0
            || u.u32(q::reserved2) != 0
        {
            return Err(Errno::EOPNOTSUPP);
        }
        if flags & UCTX_DEVX != 0 {
            // No DEVX on this device: libmlx5 asks again without it.
            return Err(Errno::EOPNOTSUPP);
        }
        let dyn_uar = c.udata_len >= abi::alloc_ucontext_req::SIZE
            && u.u64(q::lib_caps) & LIB_CAP_DYN_UAR != 0;
        // Linux checks the static registers only when it makes them
        // (`calc_total_bfregs`, skipped for `lib_uar_dyn`).
        let total = if dyn_uar {
            0
        } else {
            let total = u.u32(q::total_num_bfregs);
            if total == 0 {
                return Err(Errno::EINVAL);
            }
            if total > MAX_BFREGS {
                return Err(Errno::ENOMEM);
            }
            let total = total.next_multiple_of(2);
            if u.u32(q::num_low_latency_bfregs) > total - 1 {
                return Err(Errno::EINVAL);
            }
            total
        };
        let cqe_version = nic.cqe_version.min(u.u8(q::max_cqe_version));
        let async_file = EventFile::new(abi::async_event_desc::SIZE)?;
        let afd = async_file.fd();
        if !fdtab::set(afd, fdtab::Kind::Async) {
            async_file.close();
            return Err(Errno::EMFILE);
        }
        events::register(&async_file);
        let mut r = Resp::new(abi::get_context_resp::SIZE);
        r.u32(abi::get_context_resp::async_fd, afd as u32);
        r.u32(abi::get_context_resp::num_comp_vectors, 1);
        let d = ucontext_resp(nic, total, cqe_version, c.uresp.1);
        c.respond(&r)?;
        c.respond_udata(&d)?;
        Ok(Ucontext {
            nic,
            file,
            async_file,
            tot_bfregs: total,
            dyn_uar,
            uars: HashMap::new(),
            next_uar: 0,
            cqe_version,
            next_handle: 1,
            pds: HashMap::new(),
            mrs: HashMap::new(),
            mws: HashMap::new(),
            cqs: HashMap::new(),
            qps: HashMap::new(),
            srqs: HashMap::new(),
            ahs: HashMap::new(),
            db_pages: HashMap::new(),
        })
    }

    /// The QUERY_CONTEXT method's driver response (what GET_CONTEXT answered), for
    /// a caller's buffer of `room` bytes.
    pub fn query_context(&self, room: usize) -> Resp {
        ucontext_resp(self.nic, self.tot_bfregs, self.cqe_version, room)
    }

    /// The PD number of PD handle `h` (mlx5_ib's `MLX5_IB_METHOD_PD_QUERY`).
    pub fn pd_number(&self, h: u32) -> Result<u32, Errno> {
        self.pds.get(&h).map(|p| p.pdn).ok_or(Errno::ENOENT)
    }

    /// (lkey, rkey, length, iova) of MR handle `h` (`UVERBS_METHOD_QUERY_MR`).
    pub fn mr_attrs(&self, h: u32) -> Result<(u32, u32, u64, u64), Errno> {
        let mr = self.mrs.get(&h).ok_or(Errno::ENOENT)?;
        let key = mr.key;
        let iova = if mr.access & ACCESS_ZERO_BASED != 0 {
            mr.start % PAGE
        } else {
            mr.hca_va
        };
        Ok((key, key, mr.length, iova))
    }

    /// MLX5_IB_METHOD_UAR_OBJ_ALLOC: a new UAR page of the context; (handle, mmap
    /// offset in bytes, page id).
    pub fn alloc_uar(&mut self) -> Result<(u32, u64, u32), Errno> {
        let page_id = self.next_uar;
        if page_id >= MAX_BFREGS {
            return Err(Errno::ENOMEM);
        }
        self.next_uar += 1;
        let pgoff = MMAP_OFFSET_START + u64::from(page_id);
        let h = self.handle();
        self.uars.insert(h, DynUar { page_id, pgoff });
        Ok((h, pgoff * PAGE, page_id))
    }

    /// MLX5_IB_METHOD_UAR_OBJ_DESTROY: the page can no longer be mapped or named.
    pub fn destroy_uar(&mut self, h: u32) -> Result<(), Errno> {
        self.uars.remove(&h).map(|_| ()).ok_or(Errno::ENOENT)
    }

    /// Whether `pgoff` is the mmap page offset of a live allocated UAR.
    pub fn uar_offset(&self, pgoff: u64) -> bool {
        self.uars.values().any(|u| u.pgoff == pgoff)
    }

    /// The NIC the context is on.
    pub fn nic(&self) -> &'static Nic {
        self.nic
    }

    /// The mmap page offsets of the live allocated UARs.
    pub fn uar_pgoffs(&self) -> impl Iterator<Item = u64> + '_ {
        self.uars.values().map(|u| u.pgoff)
    }

    /// Whether `page_id` names a live allocated UAR.
    fn uar_page(&self, page_id: u32) -> bool {
        self.uars.values().any(|u| u.page_id == page_id)
    }

    /// UAR pages the application may map.
    pub fn uar_pages(&self) -> u32 {
        self.tot_bfregs / 2
    }

    fn handle(&mut self) -> u32 {
        let h = self.next_handle;
        self.next_handle = self.next_handle.wrapping_add(1).max(1);
        h
    }

    /// Runs one command other than GET_CONTEXT.
    pub fn execute(&mut self, c: &Cmd<'_>) -> Result<(), Errno> {
        match (c.number, c.ex) {
            (cmd::QUERY_DEVICE, ex) => self.query_device(c, ex),
            (cmd::QUERY_PORT, false) => self.query_port(c),
            (cmd::ALLOC_PD, false) => self.alloc_pd(c),
            (cmd::DEALLOC_PD, false) => self.dealloc_pd(c),
            (cmd::REG_MR, false) => self.reg_mr(c),
            (cmd::DEREG_MR, false) => self.dereg_mr(c),
            (cmd::REREG_MR, false) => self.rereg_mr(c),
            (cmd::ALLOC_MW, false) => self.alloc_mw(c),
            (cmd::DEALLOC_MW, false) => self.dealloc_mw(c),
            (cmd::CREATE_COMP_CHANNEL, false) => self.create_comp_channel(c),
            (cmd::CREATE_CQ, ex) => self.create_cq(c, ex),
            (cmd::RESIZE_CQ, false) => self.resize_cq(c),
            (cmd::DESTROY_CQ, false) => self.destroy_cq(c),
            (cmd::CREATE_QP, ex) => self.create_qp(c, ex),
            (cmd::MODIFY_QP, ex) => self.modify_qp(c, ex),
            (cmd::QUERY_QP, false) => self.query_qp(c),
            (cmd::DESTROY_QP, false) => self.destroy_qp(c),
            (cmd::CREATE_SRQ, false) => self.create_srq(c),
            (cmd::MODIFY_SRQ, false) => self.modify_srq(c),
            (cmd::QUERY_SRQ, false) => self.query_srq(c),
            (cmd::DESTROY_SRQ, false) => self.destroy_srq(c),
            (cmd::CREATE_AH, false) => self.create_ah(c),
            (cmd::DESTROY_AH, false) => self.destroy_ah(c),
            _ => Err(Errno::EOPNOTSUPP),
        }
    }

    fn query_device(&mut self, c: &Cmd<'_>, ex: bool) -> Result<(), Errno> {
        let nic = self.nic;
        let d = &nic.dev;
        let mut r = Resp::new(if ex {
            abi::ex_query_device_resp::SIZE
        } else {
            abi::query_device_resp::SIZE
        });
        if ex && c.core.u32(abi::ex_query_device::comp_mask) != 0 {
            return Err(Errno::EINVAL);
        }
        {
            use abi::query_device_resp as p;
            let fw = nic.ctx.fw_version();
            r.u64(
                p::fw_ver,
                (u64::from(fw.major) << 32) | (u64::from(fw.minor) << 16) | u64::from(fw.subminor),
            );
            // Linux reports the GUIDs as they are on the wire (big-endian).
            r.u64(p::node_guid, d.node_guid.to_be());
            r.u64(p::sys_image_guid, d.sys_image_guid.to_be());
            r.u64(p::max_mr_size, d.max_mr_size);
            r.u64(p::page_size_cap, d.page_size_cap);
            r.u32(p::vendor_id, d.vendor_id);
            // ConnectX-5 (PCI device 0x1017), what mlx5_ib reports for it.
            r.u32(p::vendor_part_id, 4119);
            r.u32(p::hw_ver, 0);
            r.u32(p::max_qp, d.max_qp);
            r.u32(p::max_qp_wr, d.max_qp_wr);
            // IB_DEVICE_SYS_IMAGE_GUID | IB_DEVICE_RC_RNR_NAK_GEN, and the memory
            // windows mlx5_ib reports with `imaicl` (IB_DEVICE_MEM_WINDOW |
            // IB_DEVICE_MEM_WINDOW_TYPE_2B, `max_mw` from `log_max_mkey`): the
            // simulated firmware executes their UMR WQEs (sim `firmware::mw`).
            r.u32(
                p::device_cap_flags,
                (1 << 11) | (1 << 12) | (1 << 17) | (1 << 24),
            );
            r.u32(p::max_mw, d.max_mr);
            r.u32(p::max_sge, d.max_sge);
            r.u32(p::max_sge_rd, d.max_sge_rd);
            r.u32(p::max_cq, d.max_cq);
            r.u32(p::max_cqe, d.max_cqe);
            r.u32(p::max_mr, d.max_mr);
            r.u32(p::max_pd, d.max_pd);
            r.u32(p::max_qp_rd_atom, d.max_qp_rd_atom);
            r.u32(
                p::max_res_rd_atom,
                d.max_qp_rd_atom.saturating_mul(d.max_qp),
            );
            r.u32(p::max_qp_init_rd_atom, d.max_qp_init_rd_atom);
            let atomic = match d.atomic_cap {
                ferroverbs::AtomicCap::None => 0,
                ferroverbs::AtomicCap::Hca => 1,
            };
            r.u32(p::atomic_cap, atomic);
            r.u32(p::max_mcast_grp, d.max_mcast_grp);
            r.u32(p::max_mcast_qp_attach, d.max_mcast_qp_attach);
            r.u32(
                p::max_total_mcast_qp_attach,
                d.max_mcast_qp_attach.saturating_mul(d.max_mcast_grp),
            );
            r.u32(p::max_ah, i32::MAX as u32);
            r.u32(p::max_srq, d.max_srq);
            r.u32(p::max_srq_wr, d.max_srq_wr);
            r.u32(p::max_srq_sge, d.max_srq_sge);
            r.u16(p::max_pkeys, 1);
            r.u8(p::local_ca_ack_delay, d.local_ca_ack_delay);
            r.u8(p::phys_port_cnt, d.phys_port_cnt);
        }
        if ex {
            use abi::ex_query_device_resp as p;
            r.u32(p::comp_mask, 0);
            r.u32(
                p::response_length,
                c.resp.1.min(abi::ex_query_device_resp::SIZE) as u32,
            );
            // Linux `mlx5_ib_query_device`: `timestamp_mask` 0x7fff_ffff_ffff_ffff and
            // `hca_core_clock` = `device_frequency_khz`, reported by
            // `ib_uverbs_ex_query_device` as `timestamp_mask` / `hca_core_clock`
            // (libibverbs `completion_timestamp_mask`, what `ibv_rc_pingpong -t`
            // requires). libmlx5 reads the CQE `timestamp` itself for
            // `ibv_wc_read_completion_ts`.
            r.u64(p::timestamp_mask, d.completion_timestamp_mask);
            // `struct ib_uverbs_odp_caps`: `general_caps` (u64), then
            // `per_transport_caps` rc, uc, ud (u32 each).
            let odp = odp::caps(nic);
            r.u64(p::odp_caps, odp.general);
            r.u32(p::odp_caps + 8, odp.rc);
            r.u32(p::odp_caps + 12, odp.uc);
            r.u32(p::odp_caps + 16, odp.ud);
            r.u32(p::xrc_odp_caps, odp.xrc);
            r.u64(p::hca_core_clock, u64::from(d.hca_core_clock_khz));
            let mut drv = Resp::new(8);
            drv.u32(4, 8);
            c.respond(&r)?;
            return c.respond_udata(&drv);
        }
        c.respond(&r)
    }

    fn query_port(&mut self, c: &Cmd<'_>) -> Result<(), Errno> {
        let port = c.core.u8(abi::query_port::port_num);
        if port != 1 {
            return Err(Errno::EINVAL);
        }
        let p = &self.nic.port;
        let eth = p.link_layer == LinkLayer::Ethernet;
        let mut r = Resp::new(abi::query_port_resp::SIZE);
        use abi::query_port_resp as f;
        // IB_PORT_CM_SUP, and IB_PORT_IP_BASED_GIDS on RoCE (Linux mlx5_query_port_roce).
        r.u32(f::port_cap_flags, (1 << 16) | if eth { 1 << 26 } else { 0 });
        r.u32(f::max_msg_sz, p.max_msg_sz.min(u64::from(u32::MAX)) as u32);
        r.u32(f::gid_tbl_len, p.gid_tbl_len);
        r.u16(f::pkey_tbl_len, 1);
        // The state as it is now (the link may have gone down since bring-up; Linux
        // `mlx5_query_port_roce` reads the netdev's carrier at every query).
        let state = self.nic.ctx.port_state(port).unwrap_or(p.state);
        let active = matches!(state, ferroverbs::PortState::Active);
        r.u8(f::state, if active { 4 } else { 1 });
        r.u8(f::max_mtu, p.max_mtu as u8);
        r.u8(f::active_mtu, p.active_mtu as u8);
        r.u8(f::max_vl_num, 1);
        r.u8(f::active_width, 2);
        r.u8(f::active_speed, 32);
        r.u8(f::phys_state, if active { 5 } else { 3 });
        r.u8(f::link_layer, if eth { 2 } else { 1 });
        // IB_UVERBS_QPF_GRH_REQUIRED on RoCE.
        r.u8(f::flags, u8::from(eth));
        c.respond(&r)
    }

    fn alloc_pd(&mut self, c: &Cmd<'_>) -> Result<(), Errno> {
        let out = exec(
            self.nic,
            &new_input(Opcode::AllocPd, 0, 16),
            alloc_pd_out::SIZE,
        )?;
        let pdn = alloc_pd_out::pd.get(&out) as u32;
        let h = self.handle();
        self.pds.insert(h, Pd { pdn, users: 0 });
        let mut r = Resp::new(abi::alloc_pd_resp::SIZE);
        r.u32(abi::alloc_pd_resp::pd_handle, h);
        let mut d = Resp::new(abi::mlx5_alloc_pd_resp::SIZE);
        d.u32(abi::mlx5_alloc_pd_resp::pdn, pdn);
        if let Err(e) = c.respond(&r).and_then(|_| c.respond_udata(&d)) {
            self.dealloc_pd_handle(h)?;
            return Err(e);
        }
        Ok(())
    }

    fn dealloc_pd_handle(&mut self, h: u32) -> Result<(), Errno> {
        let pd = self.pds.get(&h).ok_or(Errno::ENOENT)?;
        if pd.users > 0 {
            return Err(Errno::EBUSY);
        }
        let mut input = new_input(Opcode::DeallocPd, 0, dealloc_pd_in::SIZE);
        dealloc_pd_in::pd.set(&mut input, pd.pdn.into());
        exec(self.nic, &input, 16)?;
        self.pds.remove(&h);
        Ok(())
    }

    fn dealloc_pd(&mut self, c: &Cmd<'_>) -> Result<(), Errno> {
        self.dealloc_pd_handle(c.core.u32(abi::dealloc_pd::pd_handle))
    }

    fn pd_use(&mut self, h: u32) -> Result<u32, Errno> {
        let pd = self.pds.get_mut(&h).ok_or(Errno::EINVAL)?;
        pd.users += 1;
        Ok(pd.pdn)
    }

    fn pd_unuse(&mut self, h: u32) {
        if let Some(pd) = self.pds.get_mut(&h) {
            pd.users = pd.users.saturating_sub(1);
        }
    }

    fn reg_mr(&mut self, c: &Cmd<'_>) -> Result<(), Errno> {
        use abi::reg_mr as q;
        let start = c.core.u64(q::start);
        let length = c.core.u64(q::length);
        let hca_va = c.core.u64(q::hca_va);
        let pd_h = c.core.u32(q::pd_handle);
        let access = c.core.u32(q::access_flags);
        check_mr_access(self.nic, access)?;
        if length == 0 || length > isize::MAX as u64 || start % PAGE != hca_va % PAGE {
            return Err(Errno::EINVAL);
        }
        let pdn = self.pds.get(&pd_h).ok_or(Errno::EINVAL)?.pdn;
        let (index, key, mem) = self.create_mr_mkey(start, length, hca_va, pdn, access)?;
        let h = self.handle();
        self.pd_use(pd_h)?;
        self.mrs.insert(
            h,
            Mr {
                index,
                key,
                pd: pd_h,
                mem,
                start,
                length,
                hca_va,
                access,
            },
        );
        let mut r = Resp::new(abi::reg_mr_resp::SIZE);
        r.u32(abi::reg_mr_resp::mr_handle, h);
        r.u32(abi::reg_mr_resp::lkey, key);
        r.u32(abi::reg_mr_resp::rkey, key);
        if let Err(e) = c.respond(&r) {
            self.dereg_mr_handle(h)?;
            return Err(e);
        }
        Ok(())
    }

    /// Maps `[start, start + length)` for the device and makes an MTT mkey over it in
    /// PD `pdn` with `access` (Linux `mlx5_ib_reg_user_mr` → `reg_create`): (index,
    /// key, mapping).
    fn create_mr_mkey(
        &mut self,
        start: u64,
        length: u64,
        hca_va: u64,
        pdn: u32,
        access: u32,
    ) -> Result<(u32, u32, Mapped), Errno> {
        let writable = writable_access(access);
        let perm = if writable { DmaPerm::RW } else { DmaPerm::RO };
        // `check_mr_access` let ON_DEMAND through only if the device offers ODP.
        let mem = if access & ACCESS_ON_DEMAND != 0 {
            // Linux `create_user_odp_mr`: nothing pinned, nothing checked now.
            Mapped::on_demand(self.nic, start, length as usize, perm)?
        } else {
            Mapped::new(self.nic, start, length as usize, perm)?
        };
        let pas = mem.pas();
        let write_bit = if writable { MTT_WRITE } else { 0 };
        let mtt: Vec<u64> = pas.iter().map(|p| p | MTT_READ | write_bit).collect();
        let octwords = mtt_octwords(mtt.len()) as u64;
        let mut input = create_mkey_input(mtt.len());
        let m = mkey::in_command;
        create_mkey_in::pg_access.set(&mut input, 1);
        create_mkey_in::translations_octword_actual_size.set(&mut input, octwords);
        m(mkc::access_mode_1_0).set(&mut input, MkcAccessMode::Mtt.value().into());
        m(mkc::lr).set(&mut input, 1);
        m(mkc::lw).set(&mut input, u64::from(access & ACCESS_LOCAL_WRITE != 0));
        m(mkc::rr).set(&mut input, u64::from(access & ACCESS_REMOTE_READ != 0));
        m(mkc::rw).set(&mut input, u64::from(access & ACCESS_REMOTE_WRITE != 0));
        m(mkc::a).set(&mut input, u64::from(access & ACCESS_REMOTE_ATOMIC != 0));
        m(mkc::qpn).set(&mut input, MKC_QPN_NONE.into());
        // UMR may change the region in place (Linux 6.x `reg_create` sets `umr_en`
        // on every user region; REREG_MR's PD and access changes rely on it).
        m(mkc::umr_en).set(&mut input, 1);
        let variant = KEY_VARIANT.fetch_add(1, Ordering::Relaxed);
        m(mkc::mkey_7_0).set(&mut input, variant.into());
        m(mkc::pd).set(&mut input, pdn.into());
        let va = if access & ACCESS_ZERO_BASED != 0 {
            start % PAGE
        } else {
            hca_va
        };
        m(mkc::start_addr).set(&mut input, va);
        m(mkc::len).set(&mut input, length);
        m(mkc::translations_octword_size).set(&mut input, octwords);
        m(mkc::log_page_size).set(&mut input, 12);
        if set_flex64(&mut input, create_mkey_in::klm_pas_mtt, &mtt).is_err() {
            mem.unmap(self.nic);
            return Err(Errno::ENOMEM);
        }
        let out = match exec(self.nic, &input, create_mkey_out::SIZE) {
            Ok(o) => o,
            Err(e) => {
                mem.unmap(self.nic);
                return Err(e);
            }
        };
        let index = create_mkey_out::mkey_index.get(&out) as u32;
        Ok((index, mkey::mkey(index, variant), mem))
    }

    fn destroy_mkey(&self, index: u32) -> Result<(), Errno> {
        let mut input = new_input(Opcode::DestroyMkey, 0, destroy_mkey_in::SIZE);
        destroy_mkey_in::mkey_index.set(&mut input, index.into());
        exec(self.nic, &input, destroy_mkey_out::SIZE).map(|_| ())
    }

    /// REREG_MR (Linux `ib_uverbs_rereg_mr`, then `mlx5_ib_rereg_user_mr`).
    ///
    /// Without `IB_MR_REREG_TRANS`, a PD and/or access change that a UMR can make
    /// (`can_use_umr_rereg_access`: only local write, remote write, remote read and
    /// relaxed ordering differ) is made in place on the region's mkey by a UMR on
    /// the layer's UMR QP (`mlx5r_umr_rereg_pd_access`, [`umr`]): lkey and rkey stay.
    /// One more condition is the simulator's: the region's device mapping must
    /// already allow the writes the new rights need (a region registered without
    /// any write right is mapped read-only, since the process may have mapped its
    /// pages so).
    ///
    /// Everything else takes the `create_real_mr` path: a new mkey with what
    /// changes (translation, PD, access) and what does not, then the old one
    /// destroyed; the response carries the new keys, which libibverbs stores in the
    /// `ibv_mr`. Linux changes a translation in place only for regions from its mkey
    /// cache (`can_use_umr_rereg_pas` needs `mr->mmkey.cache_ent`); this layer has no
    /// cache. On an error the region stays as it was.
    fn rereg_mr(&mut self, c: &Cmd<'_>) -> Result<(), Errno> {
        use abi::rereg_mr as q;
        // IB_MR_REREG_TRANS | IB_MR_REREG_PD | IB_MR_REREG_ACCESS.
        const TRANS: u32 = 1;
        const PD: u32 = 2;
        const ACCESS: u32 = 4;
        let flags = c.core.u32(q::flags);
        if flags & !(TRANS | PD | ACCESS) != 0 || flags == 0 {
            return Err(Errno::EINVAL);
        }
        let (start, length, hca_va) = (
            c.core.u64(q::start),
            c.core.u64(q::length),
            c.core.u64(q::hca_va),
        );
        if flags & TRANS != 0 && start % PAGE != hca_va % PAGE {
            return Err(Errno::EINVAL);
        }
        let h = c.core.u32(q::mr_handle);
        let mr = self.mrs.get(&h).ok_or(Errno::ENOENT)?;
        let access = if flags & ACCESS != 0 {
            let a = c.core.u32(q::access_flags);
            check_mr_access(self.nic, a)?;
            a
        } else {
            mr.access
        };
        let pd_h = if flags & PD != 0 {
            c.core.u32(q::pd_handle)
        } else {
            mr.pd
        };
        let pdn = self.pds.get(&pd_h).ok_or(Errno::EINVAL)?.pdn;
        let in_place = flags & TRANS == 0
            && umr_can_rereg_access(mr.access, access)
            && (mr.mem.writable || !writable_access(access));
        if in_place {
            let key = mr.key;
            umr::rereg_pd_access(self.nic, key, pdn, access)?;
            self.pd_use(pd_h)?;
            let mr = self.mrs.get_mut(&h).expect("looked up");
            let old_pd = std::mem::replace(&mut mr.pd, pd_h);
            mr.access = access;
            self.pd_unuse(old_pd);
            let mut r = Resp::new(abi::rereg_mr_resp::SIZE);
            r.u32(abi::rereg_mr_resp::lkey, key);
            r.u32(abi::rereg_mr_resp::rkey, key);
            return c.respond(&r);
        }
        let (start, length, hca_va) = if flags & TRANS != 0 {
            if length == 0 || length > isize::MAX as u64 {
                return Err(Errno::EINVAL);
            }
            (start, length, hca_va)
        } else {
            (mr.start, mr.length, mr.hca_va)
        };
        let (index, key, mem) = self.create_mr_mkey(start, length, hca_va, pdn, access)?;
        let old = self.mrs.get(&h).expect("looked up").index;
        if let Err(e) = self.destroy_mkey(old) {
            let _ = self.destroy_mkey(index);
            mem.unmap(self.nic);
            return Err(e);
        }
        self.pd_use(pd_h)?;
        let mr = self.mrs.get_mut(&h).expect("looked up");
        let old_pd = std::mem::replace(&mut mr.pd, pd_h);
        let old_mem = std::mem::replace(&mut mr.mem, mem);
        mr.index = index;
        mr.key = key;
        (mr.start, mr.length, mr.hca_va, mr.access) = (start, length, hca_va, access);
        old_mem.unmap(self.nic);
        self.pd_unuse(old_pd);
        let mut r = Resp::new(abi::rereg_mr_resp::SIZE);
        r.u32(abi::rereg_mr_resp::lkey, key);
        r.u32(abi::rereg_mr_resp::rkey, key);
        c.respond(&r)
    }

    /// ALLOC_MW (Linux `ib_uverbs_alloc_mw`, `mlx5_ib_alloc_mw`): a free mkey in KLM
    /// mode with `umr_en`, remote invalidation for type 2, `roundup(num_klms, 4)`
    /// translation entries (4 when none are asked for).
    fn alloc_mw(&mut self, c: &Cmd<'_>) -> Result<(), Errno> {
        use abi::alloc_mw as q;
        use abi::mlx5_alloc_mw as d;
        let pd_h = c.core.u32(q::pd_handle);
        let pdn = self.pds.get(&pd_h).ok_or(Errno::EINVAL)?.pdn;
        // IB_MW_TYPE_1, IB_MW_TYPE_2.
        let ty = c.core.u8(q::mw_type);
        if ty != 1 && ty != 2 {
            return Err(Errno::EINVAL);
        }
        let u = &c.udata;
        if u.u32(d::comp_mask) != 0 || u.u8(d::reserved1) != 0 || u.u16(d::reserved2) != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        if c.udata_len > d::SIZE && u.0[d::SIZE..c.udata_len].iter().any(|&b| b != 0) {
            return Err(Errno::EOPNOTSUPP);
        }
        let klms = u64::from(u.u8(d::num_klms).max(1)).next_multiple_of(4);
        let mut input = create_mkey_input(0);
        let m = mkey::in_command;
        m(mkc::free).set(&mut input, 1);
        m(mkc::umr_en).set(&mut input, 1);
        m(mkc::lr).set(&mut input, 1);
        m(mkc::access_mode_1_0).set(&mut input, MkcAccessMode::Klms.value().into());
        m(mkc::en_rinval).set(&mut input, u64::from(ty == 2));
        m(mkc::qpn).set(&mut input, MKC_QPN_NONE.into());
        m(mkc::pd).set(&mut input, pdn.into());
        m(mkc::translations_octword_size).set(&mut input, klms);
        let variant = KEY_VARIANT.fetch_add(1, Ordering::Relaxed);
        m(mkc::mkey_7_0).set(&mut input, variant.into());
        let out = exec(self.nic, &input, create_mkey_out::SIZE)?;
        let index = create_mkey_out::mkey_index.get(&out) as u32;
        let h = self.handle();
        self.pd_use(pd_h)?;
        self.mws.insert(h, Mw { index, pd: pd_h });
        let mut r = Resp::new(abi::alloc_mw_resp::SIZE);
        r.u32(abi::alloc_mw_resp::mw_handle, h);
        r.u32(abi::alloc_mw_resp::rkey, mkey::mkey(index, variant));
        if let Err(e) = c.respond(&r) {
            self.dealloc_mw_handle(h)?;
            return Err(e);
        }
        Ok(())
    }

    fn dealloc_mw_handle(&mut self, h: u32) -> Result<(), Errno> {
        let mw = self.mws.get(&h).ok_or(Errno::ENOENT)?;
        self.destroy_mkey(mw.index)?;
        let mw = self.mws.remove(&h).expect("looked up");
        self.pd_unuse(mw.pd);
        Ok(())
    }

    fn dealloc_mw(&mut self, c: &Cmd<'_>) -> Result<(), Errno> {
        self.dealloc_mw_handle(c.core.u32(abi::dealloc_mw::mw_handle))
    }

    fn dereg_mr_handle(&mut self, h: u32) -> Result<(), Errno> {
        let mr = self.mrs.get(&h).ok_or(Errno::ENOENT)?;
        self.destroy_mkey(mr.index)?;
        let mr = self.mrs.remove(&h).expect("looked up");
        mr.mem.unmap(self.nic);
        self.pd_unuse(mr.pd);
        Ok(())
    }

    fn dereg_mr(&mut self, c: &Cmd<'_>) -> Result<(), Errno> {
        self.dereg_mr_handle(c.core.u32(abi::dereg_mr::mr_handle))
    }

    fn create_comp_channel(&mut self, c: &Cmd<'_>) -> Result<(), Errno> {
        let f = EventFile::new(abi::comp_event_desc::SIZE)?;
        let fd = f.fd();
        if !fdtab::set(fd, fdtab::Kind::CompChannel) {
            f.close();
            return Err(Errno::EMFILE);
        }
        events::register(&f);
        let mut r = Resp::new(abi::create_comp_channel_resp::SIZE);
        r.u32(abi::create_comp_channel_resp::fd, fd as u32);
        if let Err(e) = c.respond(&r) {
            crate::close_event_fd(fd);
            return Err(e);
        }
        Ok(())
    }

    /// Maps the doorbell record page holding `db_addr` (one mapping per page).
    fn map_db(&mut self, db_addr: u64) -> Result<u64, Errno> {
        if !db_addr.is_multiple_of(8) {
            return Err(Errno::EINVAL);
        }
        let page = db_addr & !(PAGE - 1);
        if let Some((iova, users)) = self.db_pages.get_mut(&page) {
            *users += 1;
            return Ok(*iova + (db_addr - page));
        }
        let m = Mapped::new(self.nic, page, PAGE as usize, DmaPerm::RW)?;
        self.db_pages.insert(page, (m.iova, 1));
        Ok(m.iova + (db_addr - page))
    }

    fn unmap_db(&mut self, page: u64) {
        if let Some((iova, users)) = self.db_pages.get_mut(&page) {
            *users -= 1;
            if *users == 0 {
                let _ = self.nic.ctx.bus().dma_unmap(*iova, PAGE as usize);
                self.db_pages.remove(&page);
            }
        }
    }

    fn create_cq(&mut self, c: &Cmd<'_>, ex: bool) -> Result<(), Errno> {
        let (user_handle, cqe, vector, channel) = if ex {
            use abi::ex_create_cq as q;
            if c.core.u32(q::comp_mask) != 0 {
                return Err(Errno::EINVAL);
            }
            // IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION (bit 0, which libibverbs
            // `ibv_cmd_create_cq_ex` sets for IBV_WC_EX_WITH_COMPLETION_TIMESTAMP):
            // accepted with nothing to do, every CQE carries its `timestamp` (Linux
            // mlx5 `check_cq_create_flags` accepts it). IGNORE_OVERRUN (bit 1): not
            // offered.
            if c.core.u32(q::flags) & !CQ_FLAGS_TIMESTAMP_COMPLETION != 0 {
                return Err(Errno::EOPNOTSUPP);
            }
            (
                c.core.u64(q::user_handle),
                c.core.u32(q::cqe),
                c.core.u32(q::comp_vector),
                c.core.u32(q::comp_channel) as i32,
            )
        } else {
            use abi::create_cq as q;
            (
                c.core.u64(q::user_handle),
                c.core.u32(q::cqe),
                c.core.u32(q::comp_vector),
                c.core.u32(q::comp_channel) as i32,
            )
        };
        if vector != 0 {
            return Err(Errno::EINVAL);
        }
        let chan = if channel >= 0 {
            if fdtab::kind(channel) != fdtab::Kind::CompChannel {
                return Err(Errno::EINVAL);
            }
            Some(events::file(channel).ok_or(Errno::EINVAL)?)
        } else {
            None
        };
        use abi::mlx5_create_cq as u;
        if c.udata_len < u::uar_page_index {
            return Err(Errno::EINVAL);
        }
        let buf = c.udata.u64(u::buf_addr);
        let db = c.udata.u64(u::db_addr);
        let cqe_size = c.udata.u32(u::cqe_size);
        let cq_flags = c.udata.u16(u::flags);
        if c.udata.u8(u::cqe_comp_en) != 0 || cq_flags & !CQ_FLAG_UAR_PAGE_INDEX != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        // Linux `create_cq_user`: the UAR page named, or with library-allocated UARs
        // one must be named.
        if cq_flags & CQ_FLAG_UAR_PAGE_INDEX != 0 {
            if !self.uar_page(c.udata.u32(u::uar_page_index)) {
                return Err(Errno::EINVAL);
            }
        } else if self.dyn_uar {
            return Err(Errno::EINVAL);
        }
        if cqe_size != 64 && cqe_size != 128 {
            return Err(Errno::EINVAL);
        }
        let max_log = self.nic.cap(g::log_max_cq_sz).min(24);
        if cqe == 0 || u64::from(cqe) >= 1 << max_log {
            return Err(Errno::EINVAL);
        }
        let entries = (cqe + 1).next_power_of_two();
        let page_offset = buf_page_offset(buf)?;
        let len = entries as usize * cqe_size as usize;
        let mem = Mapped::new(self.nic, buf, len, DmaPerm::RW)?;
        let dbr = match self.map_db(db) {
            Ok(d) => d,
            Err(e) => {
                mem.unmap(self.nic);
                return Err(e);
            }
        };
        let db_page = db & !(PAGE - 1);
        // The arm word no arm has written (see `doorbell`): libmlx5 never reads it.
        if let Err(e) = user::copy_out(db + 4, &crate::doorbell::ARM_NEVER.to_ne_bytes()) {
            mem.unmap(self.nic);
            self.unmap_db(db_page);
            return Err(e);
        }
        let mut input = create_cq_input(
            entries.trailing_zeros() as u8,
            self.nic.uar,
            u32::from(self.nic.channel.eqn()),
            dbr,
            0,
            &mem.pas(),
        );
        {
            use ferroverbs_hw::control::cq::{cqc, in_command, CqcCqeSz};
            if cqe_size == 128 {
                in_command(cqc::cqe_sz).set(&mut input, CqcCqeSz::Bytes128.value().into());
            }
            in_command(cqc::page_offset).set(&mut input, page_offset);
        }
        let out = match exec(self.nic, &input, create_cq_out::SIZE) {
            Ok(o) => o,
            Err(e) => {
                mem.unmap(self.nic);
                self.unmap_db(db_page);
                return Err(e);
            }
        };
        let cqn = create_cq_out::cqn.get(&out) as u32;
        crate::doorbell::add_cq(self.file, cqn, db);
        crate::poll_assist::install(self.nic, user_handle);
        let comp = Arc::new(AtomicU32::new(0));
        if let Some(ch) = chan {
            events::route(
                cqn,
                Route {
                    user_handle,
                    channel: ch,
                    reported: Arc::clone(&comp),
                },
            );
        }
        let h = self.handle();
        let async_reported = Arc::new(AtomicU32::new(0));
        events::route_async(
            events::Object::Cq,
            cqn,
            events::AsyncRoute {
                file: Arc::clone(&self.async_file),
                user_handle,
                reported: Arc::clone(&async_reported),
            },
        );
        self.cqs.insert(
            h,
            Cq {
                cqn,
                mem,
                db_page,
                comp,
                async_reported,
                users: 0,
                cqe_size,
            },
        );
        let mut r = Resp::new(if ex {
            abi::ex_create_cq_resp::SIZE
        } else {
            abi::create_cq_resp::SIZE
        });
        r.u32(abi::create_cq_resp::cq_handle, h);
        r.u32(abi::create_cq_resp::cqe, entries - 1);
        if ex {
            r.u32(
                abi::ex_create_cq_resp::response_length,
                abi::ex_create_cq_resp::SIZE as u32,
            );
        }
        let mut d = Resp::new(abi::mlx5_create_cq_resp::SIZE);
        d.u32(abi::mlx5_create_cq_resp::cqn, cqn);
        if let Err(e) = c.respond(&r).and_then(|_| c.respond_udata(&d)) {
            let _ = self.destroy_cq_handle(h);
            return Err(e);
        }
        Ok(())
    }

    fn destroy_cq_handle(&mut self, h: u32) -> Result<(u32, u32), Errno> {
        let cq = self.cqs.get(&h).ok_or(Errno::ENOENT)?;
        if cq.users > 0 {
            return Err(Errno::EBUSY);
        }
        let mut input = new_input(Opcode::DestroyCq, 0, destroy_cq_in::SIZE);
        destroy_cq_in::cqn.set(&mut input, cq.cqn.into());
        crate::doorbell::remove_cq(cq.cqn);
        events::unroute(cq.cqn);
        events::unroute_async(events::Object::Cq, cq.cqn);
        exec(self.nic, &input, destroy_cq_out::SIZE)?;
        let cq = self.cqs.remove(&h).expect("looked up");
        cq.mem.unmap(self.nic);
        self.unmap_db(cq.db_page);
        Ok((
            cq.comp.load(Ordering::Acquire),
            cq.async_reported.load(Ordering::Acquire),
        ))
    }

    fn destroy_cq(&mut self, c: &Cmd<'_>) -> Result<(), Errno> {
        let (comp, asy) = self.destroy_cq_handle(c.core.u32(abi::destroy_cq::cq_handle))?;
        let mut r = Resp::new(abi::destroy_cq_resp::SIZE);
        r.u32(abi::destroy_cq_resp::comp_events_reported, comp);
        r.u32(abi::destroy_cq_resp::async_events_reported, asy);
        c.respond(&r)
    }

    fn create_qp(&mut self, c: &Cmd<'_>, ex: bool) -> Result<(), Errno> {
        let q = &c.core;
        let user_handle = if ex {
            q.u64(abi::ex_create_qp::user_handle)
        } else {
            q.u64(abi::create_qp::user_handle)
        };
        let mut block_mc_lb = false;
        // (pd, send_cq, recv_cq, srq, caps, sq_sig_all, qp_type, is_srq)
        let (pd_h, scq_h, rcq_h, srq_h, caps, sig_all, ty, is_srq) = if ex {
            use abi::ex_create_qp as f;
            // IB_UVERBS_CREATE_QP_MASK_IND_TABLE (RSS, raw packet QPs only).
            let mask = q.u32(f::comp_mask);
            if mask & !1 != 0 {
                return Err(Errno::EINVAL);
            }
            if mask != 0 {
                return Err(Errno::EOPNOTSUPP);
            }
            block_mc_lb = create_flags_supported(self.nic, q.u32(f::create_flags))?;
            (
                q.u32(f::pd_handle),
                q.u32(f::send_cq_handle),
                q.u32(f::recv_cq_handle),
                q.u32(f::srq_handle),
                [
                    q.u32(f::max_send_wr),
                    q.u32(f::max_recv_wr),
                    q.u32(f::max_send_sge),
                    q.u32(f::max_recv_sge),
                    q.u32(f::max_inline_data),
                ],
                q.u8(f::sq_sig_all),
                q.u8(f::qp_type),
                q.u8(f::is_srq),
            )
        } else {
            use abi::create_qp as f;
            (
                q.u32(f::pd_handle),
                q.u32(f::send_cq_handle),
                q.u32(f::recv_cq_handle),
                q.u32(f::srq_handle),
                [
                    q.u32(f::max_send_wr),
                    q.u32(f::max_recv_wr),
                    q.u32(f::max_send_sge),
                    q.u32(f::max_recv_sge),
                    q.u32(f::max_inline_data),
                ],
                q.u8(f::sq_sig_all),
                q.u8(f::qp_type),
                q.u8(f::is_srq),
            )
        };
        let st = match ty {
            QPT_RC => 0,
            QPT_UC => 1,
            QPT_UD => 2,
            // XRC, raw packet, driver QPs: not offered.
            _ => return Err(Errno::EOPNOTSUPP),
        };
        let pdn = self.pds.get(&pd_h).ok_or(Errno::EINVAL)?.pdn;
        let scq = self.cqs.get(&scq_h).ok_or(Errno::EINVAL)?;
        let (scqn, scqe_size) = (scq.cqn, scq.cqe_size);
        let rcq = self.cqs.get(&rcq_h).ok_or(Errno::EINVAL)?;
        let (rcqn, rcqe_size) = (rcq.cqn, rcq.cqe_size);
        let srq = if is_srq != 0 {
            Some(self.srqs.get(&srq_h).ok_or(Errno::EINVAL)?.srqn)
        } else {
            None
        };
        use abi::mlx5_create_qp as u;
        if c.udata_len < u::sq_buf_addr {
            return Err(Errno::EINVAL);
        }
        let d = &c.udata;
        let buf = d.u64(u::buf_addr);
        let db = d.u64(u::db_addr);
        let sq_cnt = d.u32(u::sq_wqe_count);
        let rq_cnt = d.u32(u::rq_wqe_count);
        let rq_shift = d.u32(u::rq_wqe_shift);
        let flags = d.u32(u::flags);
        let uidx = d.u32(u::uidx);
        if flags
            & !(QP_FLAG_SIGNATURE
                | QP_FLAG_SCATTER_CQE
                | QP_FLAG_ALLOW_SCATTER_CQE
                | QP_FLAG_BFREG_INDEX
                | QP_FLAG_UAR_PAGE_INDEX)
            != 0
        {
            return Err(Errno::EINVAL);
        }
        let bfreg = if flags & QP_FLAG_UAR_PAGE_INDEX != 0 {
            // Linux `create_user_qp`: the page is the QP's; no static register
            // (`MLX5_IB_INVALID_BFREG` in the response).
            if !self.uar_page(d.u32(u::bfreg_index)) {
                return Err(Errno::EINVAL);
            }
            1 << 31
        } else if self.dyn_uar {
            // `alloc_bfreg` with library-allocated UARs.
            return Err(Errno::EINVAL);
        } else if flags & QP_FLAG_BFREG_INDEX != 0 {
            let b = d.u32(u::bfreg_index);
            // Static registers only: 2 per UAR page, numbered 4 per page (Linux
            // `adjust_bfregn`).
            if b % 4 > 1 || b / 4 >= self.uar_pages() {
                return Err(Errno::EINVAL);
            }
            b
        } else {
            0
        };
        let max_wqes = 1u32 << self.nic.cap(g::log_max_qp_sz).min(24);
        let pow2_or_0 = |n: u32| n == 0 || n.is_power_of_two();
        if !pow2_or_0(sq_cnt) || sq_cnt > max_wqes || !pow2_or_0(rq_cnt) || rq_cnt > max_wqes {
            return Err(Errno::EINVAL);
        }
        if srq.is_some() && rq_cnt != 0 {
            return Err(Errno::EINVAL);
        }
        if rq_cnt != 0
            && (!(4..=16).contains(&rq_shift)
                || (1u64 << rq_shift) > self.nic.cap(g::max_wqe_sz_rq))
        {
            return Err(Errno::EINVAL);
        }
        if self.cqe_version == 1 && uidx > 0x00ff_ffff {
            return Err(Errno::EINVAL);
        }
        let rq_bytes = if rq_cnt == 0 {
            0
        } else {
            u64::from(rq_cnt) << rq_shift
        };
        let len = rq_bytes + u64::from(sq_cnt) * 64;
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let page_offset = buf_page_offset(buf)?;
        let mem = Mapped::new(self.nic, buf, len as usize, DmaPerm::RW)?;
        let dbr = match self.map_db(db) {
            Ok(v) => v,
            Err(e) => {
                mem.unmap(self.nic);
                return Err(e);
            }
        };
        let db_page = db & !(PAGE - 1);
        let pas = mem.pas();
        let Some(in_len) = len_with_flex64(&create_qp_in::LAYOUT, pas.len()) else {
            mem.unmap(self.nic);
            self.unmap_db(db_page);
            return Err(Errno::ENOMEM);
        };
        let mut input = new_input(Opcode::CreateQp, 0, in_len);
        let s = |input: &mut Vec<u8>, f, v: u64| in_command(f).set(input, v);
        s(&mut input, qpc::st, st);
        s(&mut input, qpc::pm_state, 3);
        s(&mut input, qpc::block_lb_mc, u64::from(block_mc_lb));
        s(&mut input, qpc::pd, pdn.into());
        s(&mut input, qpc::uar_page, self.nic.uar.into());
        match (srq, rq_cnt) {
            (Some(n), _) => {
                // MLX5_SRQ_RQ.
                s(&mut input, qpc::rq_type, 1);
                s(&mut input, qpc::srqn_rmpn_xrqn, n.into());
            }
            // MLX5_ZERO_LEN_RQ.
            (None, 0) => s(&mut input, qpc::rq_type, 3),
            (None, n) => {
                s(&mut input, qpc::rq_type, 0);
                s(&mut input, qpc::log_rq_stride, u64::from(rq_shift - 4));
                s(&mut input, qpc::log_rq_size, u64::from(n.trailing_zeros()));
            }
        }
        if sq_cnt == 0 {
            s(&mut input, qpc::no_sq, 1);
        } else {
            s(
                &mut input,
                qpc::log_sq_size,
                u64::from(sq_cnt.trailing_zeros()),
            );
        }
        s(&mut input, qpc::cqn_snd, scqn.into());
        s(&mut input, qpc::cqn_rcv, rcqn.into());
        s(&mut input, qpc::log_page_size, 0);
        s(&mut input, qpc::page_offset, page_offset);
        s(&mut input, qpc::dbr_addr, dbr);
        if self.cqe_version == 1 {
            s(&mut input, qpc::user_index, uidx.into());
        }
        // Responder scatter to CQE, as mlx5_ib (qp.c `create_qp_common`,
        // `configure_responder_scat_cqe`): asked by `MLX5_QP_FLAG_SCATTER_CQE` (libmlx5
        // sends it unless `MLX5_SCATTER_TO_CQE=0`), kept only on a device with
        // `sctr_data_cqe` (dropped, not refused, otherwise: `process_vendor_flag`), for
        // RC and UC QPs: `MLX5_RES_SCAT_DATA64_CQE` (2) when the receive CQ has 128-byte
        // CQEs, `MLX5_RES_SCAT_DATA32_CQE` (1) otherwise. libmlx5 copies the data out
        // (`mlx5_copy_to_recv_wqe`). Requester scatter likewise (`mlx5_ib`
        // `configure_requester_scat_cqe`): RC QPs that signal every WQE or allow it
        // (`MLX5_QP_FLAG_ALLOW_SCATTER_CQE`) get `cs_req` `MLX5_REQ_SCAT_DATA64_CQE`
        // (0x22) when the send CQ has 128-byte CQEs, `MLX5_REQ_SCAT_DATA32_CQE`
        // (0x11) otherwise; libmlx5 copies READ responses and atomic results out
        // (`mlx5_copy_to_send_wqe`).
        let scatter = flags & QP_FLAG_SCATTER_CQE != 0 && self.nic.cap(g::sctr_data_cqe) == 1;
        if scatter && (ty == QPT_RC || ty == QPT_UC) {
            let cs_res = if rcqe_size == 128 { 2 } else { 1 };
            s(&mut input, qpc::cs_res, cs_res);
        }
        if scatter && ty == QPT_RC && (sig_all != 0 || flags & QP_FLAG_ALLOW_SCATTER_CQE != 0) {
            let cs_req = if scqe_size == 128 { 0x22 } else { 0x11 };
            s(&mut input, qpc::cs_req, cs_req);
        }
        if set_flex64(&mut input, create_qp_in::pas, &pas).is_err() {
            mem.unmap(self.nic);
            self.unmap_db(db_page);
            return Err(Errno::ENOMEM);
        }
        let out = match exec(self.nic, &input, create_qp_out::SIZE) {
            Ok(o) => o,
            Err(e) => {
                mem.unmap(self.nic);
                self.unmap_db(db_page);
                return Err(e);
            }
        };
        let qpn = create_qp_out::qpn.get(&out) as u32;
        let h = self.handle();
        self.pd_use(pd_h)?;
        self.cqs.get_mut(&scq_h).expect("looked up").users += 1;
        self.cqs.get_mut(&rcq_h).expect("looked up").users += 1;
        if srq.is_some() {
            self.srqs.get_mut(&srq_h).expect("looked up").users += 1;
        }
        self.qps.insert(
            h,
            Qp {
                qpn,
                ty,
                state: 0,
                pd: pd_h,
                send_cq: scq_h,
                recv_cq: rcq_h,
                srq: srq.map(|_| srq_h),
                mem: Some(mem),
                db_page,
                caps,
                rq_wqes: rq_cnt,
                rq_max_gs: if rq_cnt == 0 {
                    0
                } else {
                    (1u32 << rq_shift) / 16 - u32::from(flags & QP_FLAG_SIGNATURE != 0)
                },
                sq_sig_all: sig_all,
                port: 1,
                pkey_index: 0,
                qkey: 0,
                sq_bytes: sq_cnt * 64,
                events: Arc::new(AtomicU32::new(0)),
            },
        );
        if sq_cnt != 0 {
            crate::doorbell::add_qp(self.file, qpn, db);
        }
        events::route_async(
            events::Object::Qp,
            qpn,
            events::AsyncRoute {
                file: Arc::clone(&self.async_file),
                user_handle,
                reported: Arc::clone(&self.qps[&h].events),
            },
        );
        let mut r = Resp::new(if ex {
            abi::ex_create_qp_resp::SIZE
        } else {
            abi::create_qp_resp::SIZE
        });
        {
            use abi::create_qp_resp as f;
            r.u32(f::qp_handle, h);
            r.u32(f::qpn, qpn);
            r.u32(f::max_send_wr, caps[0]);
            r.u32(f::max_recv_wr, caps[1]);
            r.u32(f::max_send_sge, caps[2]);
            r.u32(f::max_recv_sge, caps[3]);
            r.u32(f::max_inline_data, caps[4]);
        }
        if ex {
            r.u32(
                abi::ex_create_qp_resp::response_length,
                abi::ex_create_qp_resp::SIZE as u32,
            );
        }
        let mut dr = Resp::new(abi::mlx5_create_qp_resp::SIZE);
        dr.u32(abi::mlx5_create_qp_resp::bfreg_index, bfreg);
        if let Err(e) = c.respond(&r).and_then(|_| c.respond_udata(&dr)) {
            let _ = self.destroy_qp_handle(h);
            return Err(e);
        }
        Ok(())
    }

    fn destroy_qp_handle(&mut self, h: u32) -> Result<u32, Errno> {
        let qp = self.qps.get(&h).ok_or(Errno::ENOENT)?;
        // Doorbells rung before the command reach the device first.
        crate::doorbell::forward_pending();
        crate::doorbell::remove_qp(qp.qpn);
        events::unroute_async(events::Object::Qp, qp.qpn);
        let mut input = new_input(Opcode::DestroyQp, 0, destroy_qp_in::SIZE);
        destroy_qp_in::qpn.set(&mut input, qp.qpn.into());
        exec(self.nic, &input, destroy_qp_out::SIZE)?;
        let qp = self.qps.remove(&h).expect("looked up");
        if let Some(m) = &qp.mem {
            m.unmap(self.nic);
        }
        self.unmap_db(qp.db_page);
        self.pd_unuse(qp.pd);
        for cq in [qp.send_cq, qp.recv_cq] {
            if let Some(c) = self.cqs.get_mut(&cq) {
                c.users = c.users.saturating_sub(1);
            }
        }
        if let Some(s) = qp.srq.and_then(|s| self.srqs.get_mut(&s)) {
            s.users = s.users.saturating_sub(1);
        }
        Ok(qp.events.load(Ordering::Acquire))
    }

    fn destroy_qp(&mut self, c: &Cmd<'_>) -> Result<(), Errno> {
        let n = self.destroy_qp_handle(c.core.u32(abi::destroy_qp::qp_handle))?;
        let mut r = Resp::new(abi::destroy_qp_resp::SIZE);
        r.u32(abi::destroy_qp_resp::events_reported, n);
        c.respond(&r)
    }

    fn modify_qp(&mut self, c: &Cmd<'_>, ex: bool) -> Result<(), Errno> {
        use abi::modify_qp as f;
        let q = &c.core;
        if ex && q.u32(abi::ex_modify_qp::rate_limit) != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        let h = q.u32(f::qp_handle);
        let mask = q.u32(f::attr_mask);
        let nic = self.nic;
        let qp = self.qps.get_mut(&h).ok_or(Errno::EINVAL)?;
        let cur = if mask & qp_mask::CUR_STATE != 0 {
            q.u8(f::cur_qp_state)
        } else {
            qp.state
        };
        let next = if mask & qp_mask::STATE != 0 {
            q.u8(f::qp_state)
        } else {
            cur
        };
        let to_hw = |s: u8| -> Result<QpcState, Errno> {
            Ok(match s {
                0 => QpcState::Rst,
                1 => QpcState::Init,
                2 => QpcState::Rtr,
                3 => QpcState::Rts,
                4 => QpcState::Sqd,
                5 => QpcState::Sqer,
                6 => QpcState::Err,
                _ => return Err(Errno::EINVAL),
            })
        };
        let t = QpTransition::between(to_hw(cur)?, to_hw(next)?).ok_or(Errno::EINVAL)?;
        // The attributes each transition requires (IBTA 11.2.4.2, Linux
        // `ib_modify_qp_is_ok` `qp_state_table`).
        let need = match (t, qp.ty) {
            (QpTransition::Rst2Init, QPT_UD) => qp_mask::PKEY_INDEX | qp_mask::PORT | qp_mask::QKEY,
            (QpTransition::Rst2Init, _) => {
                qp_mask::PKEY_INDEX | qp_mask::PORT | qp_mask::ACCESS_FLAGS
            }
            (QpTransition::Init2Rtr, QPT_RC) => {
                qp_mask::AV
                    | qp_mask::PATH_MTU
                    | qp_mask::DEST_QPN
                    | qp_mask::RQ_PSN
                    | qp_mask::MAX_DEST_RD_ATOMIC
                    | qp_mask::MIN_RNR_TIMER
            }
            (QpTransition::Init2Rtr, QPT_UC) => {
                qp_mask::AV | qp_mask::PATH_MTU | qp_mask::DEST_QPN | qp_mask::RQ_PSN
            }
            (QpTransition::Rtr2Rts, QPT_RC) => {
                qp_mask::SQ_PSN
                    | qp_mask::TIMEOUT
                    | qp_mask::RETRY_CNT
                    | qp_mask::RNR_RETRY
                    | qp_mask::MAX_QP_RD_ATOMIC
            }
            (QpTransition::Rtr2Rts, _) => qp_mask::SQ_PSN,
            _ => 0,
        };
        if mask & need != need {
            return Err(Errno::EINVAL);
        }
        if mask & qp_mask::PORT != 0 && q.u8(f::port_num) != 1 {
            return Err(Errno::EINVAL);
        }
        if mask & qp_mask::PKEY_INDEX != 0 && q.u16(f::pkey_index) != 0 {
            return Err(Errno::EINVAL);
        }
        if mask & qp_mask::PATH_MTU != 0 {
            let m = q.u8(f::path_mtu);
            if m == 0 || m > nic.port.active_mtu as u8 {
                return Err(Errno::EINVAL);
            }
        }
        if mask & qp_mask::ALT_PATH != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        let mut input = transition_input(t, qp.qpn, 0);
        let mut opt = 0u32;
        if t.has_qpc() {
            let s = |input: &mut Vec<u8>, fld, v: u64| in_command(fld).set(input, v);
            let p = |input: &mut Vec<u8>, fld, v: u64| primary_path(fld).set(input, v);
            let access_opt = if qp.ty == QPT_UC {
                MLX5_QP_OPTPAR_RWE
            } else {
                MLX5_QP_OPTPAR_RRE | MLX5_QP_OPTPAR_RAE | MLX5_QP_OPTPAR_RWE
            };
            if mask & qp_mask::ACCESS_FLAGS != 0 {
                let a = q.u32(f::qp_access_flags);
                s(&mut input, qpc::rre, u64::from(a & ACCESS_REMOTE_READ != 0));
                s(
                    &mut input,
                    qpc::rwe,
                    u64::from(a & ACCESS_REMOTE_WRITE != 0),
                );
                let rae = a & ACCESS_REMOTE_ATOMIC != 0;
                s(&mut input, qpc::rae, u64::from(rae));
                if rae {
                    // MLX5_QPC_ATOMIC_MODE_IB_SPEC.
                    s(&mut input, qpc::atomic_mode, 1);
                }
                opt |= access_opt;
            }
            if mask & qp_mask::PKEY_INDEX != 0 {
                p(&mut input, ads::pkey_index, q.u16(f::pkey_index).into());
                opt |= MLX5_QP_OPTPAR_PKEY_INDEX;
            }
            if mask & qp_mask::PORT != 0 {
                opt |= MLX5_QP_OPTPAR_PRI_PORT;
            }
            p(&mut input, ads::vhca_port_num, qp.port.into());
            if mask & qp_mask::MIN_RNR_TIMER != 0 {
                s(&mut input, qpc::min_rnr_nak, q.u8(f::min_rnr_timer).into());
                opt |= MLX5_QP_OPTPAR_RNR_TIMEOUT;
            }
            if mask & qp_mask::AV != 0 {
                let a = Req(&q.0[f::dest..f::dest + abi::qp_dest::SIZE]);
                use abi::qp_dest as dd;
                if a.u8(dd::is_global) == 0 {
                    // RoCE addresses are global (Linux `rdma_check_ah_attr`).
                    return Err(Errno::EINVAL);
                }
                let dgid = a.gid(dd::dgid);
                let Some(ip) = addr_of_gid(&dgid) else {
                    return Err(Errno::EINVAL);
                };
                let dmac = nic.dmac(ip)?;
                let sgid = a.u8(dd::sgid_index);
                if u32::from(sgid) >= nic.port.gid_tbl_len.max(1) {
                    return Err(Errno::EINVAL);
                }
                p(&mut input, ads::pkey_index, qp.pkey_index.into());
                p(&mut input, ads::src_addr_index, sgid.into());
                let hop = a.u8(dd::hop_limit);
                p(
                    &mut input,
                    ads::hop_limit,
                    u64::from(if hop < 2 { 64 } else { hop }),
                );
                let tc = a.u8(dd::traffic_class);
                p(&mut input, ads::tclass, tc.into());
                p(&mut input, ads::dscp, u64::from(tc >> 2));
                p(&mut input, ads::ecn, u64::from(tc & 3));
                let fl = a.u32(dd::flow_label) & 0xf_ffff;
                p(&mut input, ads::flow_label, fl.into());
                if let Some(dst) = primary_path(ads::rgid_rip).bytes_mut(&mut input) {
                    dst.copy_from_slice(&dgid);
                }
                p(
                    &mut input,
                    ads::rmac_47_32,
                    u64::from(u16::from_be_bytes([dmac[0], dmac[1]])),
                );
                p(
                    &mut input,
                    ads::rmac_31_0,
                    u64::from(u32::from_be_bytes([dmac[2], dmac[3], dmac[4], dmac[5]])),
                );
                let sl = a.u8(dd::sl) & 7;
                p(&mut input, ads::eth_prio, sl.into());
                p(&mut input, ads::sl, sl.into());
                // Linux `mlx5_set_path_udp_sport`.
                let dest = if mask & qp_mask::DEST_QPN != 0 {
                    q.u32(f::dest_qp_num)
                } else {
                    0
                };
                let fl = if fl != 0 {
                    fl
                } else {
                    flow_label_from_qpns(qp.qpn, dest)
                };
                p(
                    &mut input,
                    ads::udp_sport,
                    udp_sport_from_flow_label(fl).into(),
                );
                opt |= MLX5_QP_OPTPAR_PRIMARY_ADDR_PATH;
            }
            if mask & qp_mask::PATH_MTU != 0 {
                s(&mut input, qpc::mtu, q.u8(f::path_mtu).into());
                s(&mut input, qpc::log_msg_max, nic.cap(g::log_max_msg));
            }
            if mask & qp_mask::DEST_QPN != 0 {
                s(
                    &mut input,
                    qpc::remote_qpn,
                    u64::from(q.u32(f::dest_qp_num) & 0xff_ffff),
                );
            }
            if mask & qp_mask::RQ_PSN != 0 {
                s(
                    &mut input,
                    qpc::next_rcv_psn,
                    u64::from(q.u32(f::rq_psn) & 0xff_ffff),
                );
            }
            if mask & qp_mask::MAX_DEST_RD_ATOMIC != 0 {
                s(
                    &mut input,
                    qpc::log_rra_max,
                    ceil_log2(q.u8(f::max_dest_rd_atomic)).into(),
                );
                opt |= MLX5_QP_OPTPAR_RRA_MAX;
            }
            if mask & qp_mask::SQ_PSN != 0 {
                s(
                    &mut input,
                    qpc::next_send_psn,
                    u64::from(q.u32(f::sq_psn) & 0xff_ffff),
                );
            }
            if mask & qp_mask::TIMEOUT != 0 {
                let mut v = q.u8(f::timeout) & 0x1f;
                if v != 0 && v < nic.min_ack_timeout {
                    v = nic.min_ack_timeout;
                }
                p(&mut input, ads::ack_timeout, v.into());
                opt |= MLX5_QP_OPTPAR_ACK_TIMEOUT;
            }
            if mask & qp_mask::RETRY_CNT != 0 {
                s(
                    &mut input,
                    qpc::retry_count,
                    u64::from(q.u8(f::retry_cnt) & 7),
                );
                opt |= MLX5_QP_OPTPAR_RETRY_COUNT;
            }
            if mask & qp_mask::RNR_RETRY != 0 {
                s(
                    &mut input,
                    qpc::rnr_retry,
                    u64::from(q.u8(f::rnr_retry) & 7),
                );
                opt |= MLX5_QP_OPTPAR_RNR_RETRY;
            }
            if mask & qp_mask::MAX_QP_RD_ATOMIC != 0 {
                s(
                    &mut input,
                    qpc::log_sra_max,
                    ceil_log2(q.u8(f::max_rd_atomic)).into(),
                );
                opt |= MLX5_QP_OPTPAR_SRA_MAX;
            }
            if qp.ty == QPT_UD {
                // Linux `__mlx5_ib_modify_qp` for UD: the Q_Key where given, MTU 4096
                // with log_msg_max 12.
                if mask & qp_mask::QKEY != 0 {
                    s(&mut input, qpc::q_key, q.u32(f::qkey).into());
                }
                s(&mut input, qpc::mtu, 5);
                s(&mut input, qpc::log_msg_max, 12);
                let qkey = if mask & qp_mask::QKEY != 0 {
                    MLX5_QP_OPTPAR_Q_KEY
                } else {
                    0
                };
                let pkey = if mask & qp_mask::PKEY_INDEX != 0 {
                    MLX5_QP_OPTPAR_PKEY_INDEX
                } else {
                    0
                };
                opt = match t {
                    QpTransition::Init2Init => {
                        qkey | pkey
                            | if mask & qp_mask::PORT != 0 {
                                MLX5_QP_OPTPAR_PRI_PORT
                            } else {
                                0
                            }
                    }
                    QpTransition::Init2Rtr | QpTransition::Sqd2Rts => qkey | pkey,
                    QpTransition::Rtr2Rts | QpTransition::Rts2Rts => qkey,
                    _ => 0,
                };
            } else {
                match t {
                    QpTransition::Rst2Init => {
                        s(&mut input, qpc::pm_state, 3);
                        opt = 0;
                    }
                    QpTransition::Init2Rtr => {
                        s(&mut input, qpc::log_ack_req_freq, 0);
                        opt &= access_opt | MLX5_QP_OPTPAR_PKEY_INDEX;
                    }
                    QpTransition::Rtr2Rts | QpTransition::Rts2Rts => {
                        opt &= access_opt | MLX5_QP_OPTPAR_RNR_TIMEOUT;
                    }
                    QpTransition::Init2Init => {
                        opt &= access_opt | MLX5_QP_OPTPAR_PKEY_INDEX | MLX5_QP_OPTPAR_PRI_PORT;
                    }
                    _ => {}
                }
            }
            ferroverbs_hw::control::qp::rst2init_qp_in::opt_param_mask.set(&mut input, opt.into());
        }
        // Doorbells rung before the command reach the device first.
        crate::doorbell::forward_pending();
        exec(nic, &input, t.out_layout().size())?;
        qp.state = next;
        if mask & qp_mask::QKEY != 0 {
            qp.qkey = q.u32(f::qkey);
        }
        if mask & qp_mask::PKEY_INDEX != 0 {
            qp.pkey_index = q.u16(f::pkey_index);
        }
        if t == QpTransition::ToRst {
            crate::doorbell::reset_qp(qp.qpn);
        }
        if ex {
            // ib_uverbs_ex_modify_qp_resp: comp_mask, response_length.
            let mut r = Resp::new(8);
            r.u32(4, 8);
            c.respond(&r)?;
        }
        Ok(())
    }

    fn query_qp(&mut self, c: &Cmd<'_>) -> Result<(), Errno> {
        let h = c.core.u32(abi::query_qp::qp_handle);
        let qp = self.qps.get(&h).ok_or(Errno::EINVAL)?;
        let mut input = new_input(Opcode::QueryQp, 0, query_qp_in::SIZE);
        query_qp_in::qpn.set(&mut input, qp.qpn.into());
        let npages = qp.mem.as_ref().map_or(0, |m| m.pas().len());
        let out_len = len_with_flex64(&query_qp_out::LAYOUT, npages).unwrap_or(query_qp_out::SIZE);
        let out = exec(self.nic, &input, out_len)?;
        let base = query_qp_out::qpc.bit;
        let g = |f: ferroverbs_hw::Field| f.at(base).get(&out);
        let pp = |f: ferroverbs_hw::Field| f.at(base + qpc::primary_address_path.bit).get(&out);
        let state = match g(qpc::state) {
            0 => 0u8,
            1 => 1,
            2 => 2,
            3 => 3,
            4 => 5,
            7 => 4,
            _ => 6,
        };
        let mut r = Resp::new(abi::query_qp_resp::SIZE);
        use abi::query_qp_resp as f;
        {
            use abi::qp_dest as dd;
            let mut dgid = [0u8; 16];
            if let Some(b) = qpc::primary_address_path
                .at(base)
                .bytes(&out)
                .and_then(|_| {
                    ads::rgid_rip
                        .at(base + qpc::primary_address_path.bit)
                        .bytes(&out)
                })
            {
                dgid.copy_from_slice(&b[..16]);
            }
            r.bytes(f::dest + dd::dgid, &dgid);
            r.u32(f::dest + dd::flow_label, pp(ads::flow_label) as u32);
            r.u8(f::dest + dd::sgid_index, pp(ads::src_addr_index) as u8);
            r.u8(f::dest + dd::hop_limit, pp(ads::hop_limit) as u8);
            r.u8(f::dest + dd::traffic_class, pp(ads::tclass) as u8);
            r.u8(f::dest + dd::sl, pp(ads::sl) as u8);
            r.u8(f::dest + dd::is_global, 1);
            r.u8(f::dest + dd::port_num, qp.port);
        }
        // Linux `mlx5_ib_query_qp`: the receive queue's real size; the send side is
        // the user's (0 for a user QP: libmlx5 fills in its own).
        r.u32(f::max_send_wr, 0);
        r.u32(f::max_recv_wr, qp.rq_wqes);
        r.u32(f::max_send_sge, 0);
        r.u32(f::max_recv_sge, qp.rq_max_gs);
        r.u32(f::max_inline_data, qp.caps[4]);
        r.u32(
            f::qkey,
            if qp.ty == QPT_UD {
                g(qpc::q_key) as u32
            } else {
                qp.qkey
            },
        );
        r.u32(f::rq_psn, g(qpc::next_rcv_psn) as u32);
        r.u32(f::sq_psn, g(qpc::next_send_psn) as u32);
        r.u32(f::dest_qp_num, g(qpc::remote_qpn) as u32);
        let access = (if g(qpc::rre) == 1 {
            ACCESS_REMOTE_READ
        } else {
            0
        }) | (if g(qpc::rwe) == 1 {
            ACCESS_REMOTE_WRITE
        } else {
            0
        }) | (if g(qpc::rae) == 1 {
            ACCESS_REMOTE_ATOMIC
        } else {
            0
        });
        r.u32(f::qp_access_flags, access);
        r.u16(f::pkey_index, qp.pkey_index);
        r.u8(f::qp_state, state);
        r.u8(f::cur_qp_state, state);
        r.u8(f::path_mtu, g(qpc::mtu) as u8);
        // IBV_MIG_MIGRATED.
        r.u8(f::path_mig_state, 0);
        r.u8(
            f::max_rd_atomic,
            (1u32 << g(qpc::log_sra_max)).min(255) as u8,
        );
        r.u8(
            f::max_dest_rd_atomic,
            (1u32 << g(qpc::log_rra_max)).min(255) as u8,
        );
        r.u8(f::min_rnr_timer, g(qpc::min_rnr_nak) as u8);
        r.u8(f::port_num, qp.port);
        r.u8(f::timeout, pp(ads::ack_timeout) as u8);
        r.u8(f::retry_cnt, g(qpc::retry_count) as u8);
        r.u8(f::rnr_retry, g(qpc::rnr_retry) as u8);
        r.u8(f::sq_sig_all, qp.sq_sig_all);
        let _ = qp.sq_bytes;
        c.respond(&r)
    }

    fn create_srq(&mut self, c: &Cmd<'_>) -> Result<(), Errno> {
        use abi::create_srq as f;
        let q = &c.core;
        let pd_h = q.u32(f::pd_handle);
        let user_handle = q.u64(f::user_handle);
        let max_wr = q.u32(f::max_wr);
        let max_sge = q.u32(f::max_sge);
        let limit = q.u32(f::srq_limit);
        let pdn = self.pds.get(&pd_h).ok_or(Errno::EINVAL)?.pdn;
        let max_srq_wr = self.nic.dev.max_srq_wr;
        // Linux `mlx5_ib_create_srq` refuses `max_wr >= 1 << log_max_srq_sz` (one
        // above the reported `max_srq_wr`) and takes 0: the ring gets
        // `roundup_pow_of_two(max_wr + 1)` entries (rdma-core's `SrqInitAttr()`
        // asks for 0).
        if max_wr > max_srq_wr || max_sge > self.nic.dev.max_srq_sge + 1 {
            return Err(Errno::EINVAL);
        }
        if limit > max_wr {
            return Err(Errno::EINVAL);
        }
        use abi::mlx5_create_srq as u;
        if c.udata_len < u::uidx {
            return Err(Errno::EINVAL);
        }
        let buf = c.udata.u64(u::buf_addr);
        let db = c.udata.u64(u::db_addr);
        if c.udata.u32(u::flags) & !1 != 0 {
            return Err(Errno::EINVAL);
        }
        // Linux `mlx5_ib_create_srq`: the stride holds the next segment and the
        // scatter entries, a power of two of at least 32 bytes; the ring one more
        // entry than asked, rounded up.
        let desc = (16 + 16 * max_sge.max(1)).next_power_of_two().max(32);
        let shift = desc.trailing_zeros();
        let entries = (max_wr + 1).next_power_of_two();
        let len = (entries as usize) << shift;
        let page_offset = buf_page_offset(buf)?;
        let mem = Mapped::new(self.nic, buf, len, DmaPerm::RW)?;
        let dbr = match self.map_db(db) {
            Ok(d) => d,
            Err(e) => {
                mem.unmap(self.nic);
                return Err(e);
            }
        };
        let db_page = db & !(PAGE - 1);
        let params = SrqParams {
            log_srq_size: entries.trailing_zeros() as u8,
            log_rq_stride: (shift - 4) as u8,
            pd: pdn,
            lwm: limit as u16,
            dbr_addr: dbr,
            log_page_size: 0,
        };
        let mut input = create_srq_input(&params, &mem.pas());
        ferroverbs_hw::control::srq::in_command(ferroverbs_hw::control::srq::srqc::page_offset)
            .set(&mut input, page_offset);
        let out = match exec(self.nic, &input, create_srq_out::SIZE) {
            Ok(o) => o,
            Err(e) => {
                mem.unmap(self.nic);
                self.unmap_db(db_page);
                return Err(e);
            }
        };
        let srqn = create_srq_out::srqn.get(&out) as u32;
        let h = self.handle();
        self.pd_use(pd_h)?;
        let max_sge_out = (desc - 16) / 16;
        self.srqs.insert(
            h,
            Srq {
                srqn,
                pd: pd_h,
                mem,
                db_page,
                max_wr: entries - 1,
                max_sge: max_sge_out,
                limit,
                users: 0,
                events: Arc::new(AtomicU32::new(0)),
            },
        );
        events::route_async(
            events::Object::Srq,
            srqn,
            events::AsyncRoute {
                file: Arc::clone(&self.async_file),
                user_handle,
                reported: Arc::clone(&self.srqs[&h].events),
            },
        );
        let mut r = Resp::new(abi::create_srq_resp::SIZE);
        r.u32(abi::create_srq_resp::srq_handle, h);
        r.u32(abi::create_srq_resp::max_wr, entries - 1);
        r.u32(abi::create_srq_resp::max_sge, max_sge_out);
        r.u32(abi::create_srq_resp::srqn, srqn);
        let mut d = Resp::new(abi::mlx5_create_srq_resp::SIZE);
        d.u32(abi::mlx5_create_srq_resp::srqn, srqn);
        if let Err(e) = c.respond(&r).and_then(|_| c.respond_udata(&d)) {
            let _ = self.destroy_srq_handle(h);
            return Err(e);
        }
        Ok(())
    }

    fn modify_srq(&mut self, c: &Cmd<'_>) -> Result<(), Errno> {
        use abi::modify_srq as f;
        let h = c.core.u32(f::srq_handle);
        let mask = c.core.u32(f::attr_mask);
        let srq = self.srqs.get_mut(&h).ok_or(Errno::EINVAL)?;
        // IBV_SRQ_MAX_WR: mlx5 cannot resize an SRQ.
        if mask & 1 != 0 {
            return Err(Errno::EINVAL);
        }
        if mask & 2 != 0 {
            let limit = c.core.u32(f::srq_limit);
            if limit > srq.max_wr {
                return Err(Errno::EINVAL);
            }
            let input = ferroverbs_hw::control::srq::arm_srq_input(srq.srqn, limit as u16);
            exec(self.nic, &input, 16)?;
            srq.limit = limit;
        }
        Ok(())
    }

    fn query_srq(&mut self, c: &Cmd<'_>) -> Result<(), Errno> {
        let srq = self
            .srqs
            .get(&c.core.u32(abi::query_srq::srq_handle))
            .ok_or(Errno::EINVAL)?;
        let mut r = Resp::new(abi::query_srq_resp::SIZE);
        r.u32(abi::query_srq_resp::max_wr, srq.max_wr);
        r.u32(abi::query_srq_resp::max_sge, srq.max_sge);
        r.u32(abi::query_srq_resp::srq_limit, srq.limit);
        c.respond(&r)
    }

    fn destroy_srq_handle(&mut self, h: u32) -> Result<u32, Errno> {
        let srq = self.srqs.get(&h).ok_or(Errno::ENOENT)?;
        if srq.users > 0 {
            return Err(Errno::EBUSY);
        }
        events::unroute_async(events::Object::Srq, srq.srqn);
        let mut input = new_input(Opcode::DestroySrq, 0, destroy_srq_in::SIZE);
        destroy_srq_in::srqn.set(&mut input, srq.srqn.into());
        exec(self.nic, &input, 16)?;
        let srq = self.srqs.remove(&h).expect("looked up");
        srq.mem.unmap(self.nic);
        self.unmap_db(srq.db_page);
        self.pd_unuse(srq.pd);
        Ok(srq.events.load(Ordering::Acquire))
    }

    fn destroy_srq(&mut self, c: &Cmd<'_>) -> Result<(), Errno> {
        let n = self.destroy_srq_handle(c.core.u32(abi::destroy_srq::srq_handle))?;
        let mut r = Resp::new(abi::destroy_srq_resp::SIZE);
        r.u32(abi::destroy_srq_resp::events_reported, n);
        c.respond(&r)
    }

    fn create_ah(&mut self, c: &Cmd<'_>) -> Result<(), Errno> {
        use abi::create_ah as f;
        let pd_h = c.core.u32(f::pd_handle);
        if !self.pds.contains_key(&pd_h) {
            return Err(Errno::EINVAL);
        }
        let a = Req(&c.core.0[f::attr..]);
        if a.u8(abi::ah_attr::port_num) != 1 || a.u8(abi::ah_attr::is_global) == 0 {
            return Err(Errno::EINVAL);
        }
        let dgid = a.gid(abi::ah_attr::grh + abi::global_route::dgid);
        let ip = addr_of_gid(&dgid).ok_or(Errno::EINVAL)?;
        let dmac = self.nic.dmac(ip)?;
        let h = self.handle();
        self.pd_use(pd_h)?;
        self.ahs.insert(h, Ah { pd: pd_h });
        let mut r = Resp::new(abi::create_ah_resp::SIZE);
        r.u32(abi::create_ah_resp::ah_handle, h);
        let mut d = Resp::new(abi::mlx5_create_ah_resp::SIZE);
        // Linux `mlx5_ib_create_ah`: the length up to the MAC, and the MAC the GID
        // resolves to.
        d.u32(abi::mlx5_create_ah_resp::response_length, 10);
        d.bytes(abi::mlx5_create_ah_resp::dmac, &dmac);
        if let Err(e) = c.respond(&r).and_then(|_| c.respond_udata(&d)) {
            self.ahs.remove(&h);
            self.pd_unuse(pd_h);
            return Err(e);
        }
        Ok(())
    }

    fn destroy_ah(&mut self, c: &Cmd<'_>) -> Result<(), Errno> {
        let h = c.core.u32(abi::destroy_ah::ah_handle);
        let ah = self.ahs.remove(&h).ok_or(Errno::ENOENT)?;
        self.pd_unuse(ah.pd);
        Ok(())
    }

    /// Destroys every object, in Linux's order (AH, QP, SRQ, CQ, MW, MR, PD).
    pub fn destroy_all(&mut self) {
        let hs: Vec<u32> = self.ahs.keys().copied().collect();
        for h in hs {
            if let Some(ah) = self.ahs.remove(&h) {
                self.pd_unuse(ah.pd);
            }
        }
        let hs: Vec<u32> = self.qps.keys().copied().collect();
        for h in hs {
            let _ = self.destroy_qp_handle(h);
        }
        let hs: Vec<u32> = self.srqs.keys().copied().collect();
        for h in hs {
            let _ = self.destroy_srq_handle(h);
        }
        let hs: Vec<u32> = self.cqs.keys().copied().collect();
        for h in hs {
            let _ = self.destroy_cq_handle(h);
        }
        let hs: Vec<u32> = self.mws.keys().copied().collect();
        for h in hs {
            let _ = self.dealloc_mw_handle(h);
        }
        let hs: Vec<u32> = self.mrs.keys().copied().collect();
        for h in hs {
            let _ = self.dereg_mr_handle(h);
        }
        let hs: Vec<u32> = self.pds.keys().copied().collect();
        for h in hs {
            let _ = self.dealloc_pd_handle(h);
        }
        let _ = &self.async_file;
    }
}

/// mlx5_ib's ucontext response (`mlx5_ib_alloc_ucontext_resp`, Linux
/// `set_ucontext_resp`), for GET_CONTEXT and the QUERY_CONTEXT method alike;
/// `room` is the caller's buffer (`response_length`).
fn ucontext_resp(nic: &Nic, total: u32, cqe_version: u8, room: usize) -> Resp {
    let mut d = Resp::new(abi::alloc_ucontext_resp::SIZE);
    {
        use abi::alloc_ucontext_resp as p;
        d.u32(p::qp_tab_size, 1 << nic.cap(g::log_max_qp).min(24));
        d.u32(p::bf_reg_size, nic.bf_reg_size());
        d.u32(p::tot_bfregs, total);
        d.u32(p::cache_line_size, 64);
        d.u16(p::max_sq_desc_sz, nic.cap(g::max_wqe_sz_sq) as u16);
        d.u16(p::max_rq_desc_sz, nic.cap(g::max_wqe_sz_rq) as u16);
        d.u32(p::max_send_wqebb, 1 << nic.cap(g::log_max_qp_sz).min(24));
        d.u32(p::max_recv_wr, 1 << nic.cap(g::log_max_qp_sz).min(24));
        d.u32(p::max_srq_recv_wr, 1 << nic.cap(g::log_max_srq_sz).min(24));
        d.u16(p::num_ports, nic.cap(g::num_ports).max(1) as u16);
        d.u32(
            p::response_length,
            room.min(abi::alloc_ucontext_resp::SIZE) as u32,
        );
        d.u8(p::cqe_version, cqe_version);
        // MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE | _CREATE_AH.
        d.u8(p::cmds_supp_uhw, 1 | 2);
        // MLX5_USER_INLINE_MODE_NONE + 1 (Linux sends the mode plus one).
        d.u8(p::eth_min_inline, 1);
        d.u32(p::log_uar_size, 12);
        d.u32(p::num_uars_per_page, 1);
        // Linux `set_ucontext_resp`: the core clock page's offset (with
        // MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_CORE_CLOCK_OFFSET) where its loads can be
        // trapped, and the clock info page (bit MLX5_IB_CLOCK_INFO_V1) for a device
        // with a clock.
        if nic.dev.hca_core_clock_khz != 0 {
            if crate::mmio_trap::loads_trappable() {
                d.u32(p::comp_mask, 1);
                d.u64(p::hca_core_clock_offset, crate::clock::CORE_CLOCK_OFFSET);
            }
            d.u8(p::clock_info_versions, 1);
        }
    }
    d
}

/// `page_offset` of a queue buffer at `buf` (QP, CQ and SRQ contexts: where the
/// ring starts in its first 4 KiB page, in 64-byte units): Linux `mlx5_ib` takes
/// any buffer whose offset that field can express
/// (`mlx5_umem_find_best_quantized_pgoff` with a 64-byte quantum, as libmlx5's
/// parent-domain allocators may place a QP buffer on a 512-byte boundary) and
/// refuses the others with EINVAL.
fn buf_page_offset(buf: u64) -> Result<u64, Errno> {
    if !buf.is_multiple_of(64) {
        return Err(Errno::EINVAL);
    }
    Ok((buf % PAGE) / 64)
}

/// Whether `access` lets the device write the region (Linux `ib_access_writable`).
fn writable_access(access: u32) -> bool {
    access & (ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC) != 0
}

/// Whether a UMR can take a region from rights `current` to `target` (Linux
/// `can_use_umr_rereg_access`: only local write, remote write, remote read and
/// relaxed ordering may differ; `mlx5r_umr_can_reconfig`'s relaxed ordering
/// conditions need capabilities this device does not report, so they hold).
fn umr_can_rereg_access(current: u32, target: u32) -> bool {
    let diffs = current ^ target;
    diffs
        & !(ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_RELAXED_ORDERING)
        == 0
}

/// Whether the device has atomics (`MLX5_CAP_GEN(atomic)`: a UMR's access mask then
/// includes remote atomic, `get_umr_update_access_mask`).
fn caps_atomic(nic: &Nic) -> bool {
    nic.cap(g::atomic) != 0
}

/// Linux `ib_check_mr_access` with mlx5_ib's support: known flags only, remote
/// write or atomic only with local write, on-demand paging only where the device
/// offers it ([`odp::on_demand`]: EOPNOTSUPP otherwise). `IBV_ACCESS_MW_BIND` needs
/// nothing of an mlx5 mkey: windows bind to any region of their PD.
fn check_mr_access(nic: &Nic, access: u32) -> Result<(), Errno> {
    // IB_ACCESS_SUPPORTED: the flags up to IB_ACCESS_HUGETLB (1 << 7), and the
    // optional range (IB_UVERBS_ACCESS_OPTIONAL_RANGE, bits 20..29, of which mlx5_ib
    // honours relaxed ordering and ignores the rest), which libibverbs passes once
    // QUERY_CONTEXT reported IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS.
    let known = 0xff | 0x3ff0_0000 | ACCESS_RELAXED_ORDERING;
    if access & !known != 0 {
        return Err(Errno::EINVAL);
    }
    if access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC) != 0
        && access & ACCESS_LOCAL_WRITE == 0
    {
        return Err(Errno::EINVAL);
    }
    odp::on_demand(nic, access).map(|_| ())
}

/// The extended CREATE_QP's `create_flags`: Linux's core refuses a flag it does not
/// know (EINVAL, `create_qp` in `uverbs_cmd.c`); mlx5_ib's `process_create_flags`
/// one the device's capabilities do not offer (EOPNOTSUPP). This device offers none:
/// it reports no `block_lb_mc` (the simulator has no multicast), and cross-channel,
/// raw-packet (FCS scatter, VLAN stripping, end padding) and source-QPN QPs are not
/// implemented.
/// Whether multicast loopback is to be blocked.
fn create_flags_supported(nic: &Nic, flags: u32) -> Result<bool, Errno> {
    // IB_QP_CREATE_BLOCK_MULTICAST_LOOPBACK, _CROSS_CHANNEL, _MANAGED_SEND,
    // _MANAGED_RECV, _SCATTER_FCS, _CVLAN_STRIPPING, _SOURCE_QPN,
    // _PCI_WRITE_END_PADDING (Linux `ib_verbs.h`).
    const BLOCK_MC_LB: u32 = 1 << 1;
    const KNOWN: u32 = BLOCK_MC_LB | (1 << 2) | (1 << 3) | (1 << 4) | (0xf << 8);
    if flags & !KNOWN != 0 {
        return Err(Errno::EINVAL);
    }
    let offered = if nic.cap(g::block_lb_mc) != 0 {
        BLOCK_MC_LB
    } else {
        0
    };
    if flags & !offered != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok(flags & BLOCK_MC_LB != 0)
}

fn ceil_log2(v: u8) -> u8 {
    if v <= 1 {
        0
    } else {
        (8 - (v - 1).leading_zeros()) as u8
    }
}

//! A data-path test driver: plays the host side of the data path explicitly through the
//! `SimBus` and the hw layouts (CQs, MKEYs and QPs created with commands, WQEs and
//! doorbell records written by hand, doorbells rung through BAR0, CQEs polled with the
//! owner-bit rule), so the simulator's engine and transport can be tested without the
//! real driver.
#![allow(dead_code)]

use ferroverbs_hw::control::cmd::{self, Opcode};
use ferroverbs_hw::control::cq::{create_cq_input, create_cq_out};
use ferroverbs_hw::control::mkey::{self as mk, create_mkey_in, create_mkey_out, mkc};
use ferroverbs_hw::control::qp::{self as qpm, ads, create_qp_out, qpc, QpTransition};
use ferroverbs_hw::datapath::cqe::{sw_owned, Cqe64, ErrCqe, CQE_OP_OWN_INIT, MLX5_CQE_REQ};
use ferroverbs_hw::datapath::dbr;
use ferroverbs_hw::datapath::uar;
use ferroverbs_hw::datapath::wqe::{
    WqeAtomicSeg, WqeAv, WqeCtrlSeg, WqeDataSeg, WqeRaddrSeg, MLX5_INLINE_SEG,
    MLX5_OPCODE_ATOMIC_CS, MLX5_OPCODE_ATOMIC_FA, MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_RDMA_WRITE,
    MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_SEND, MLX5_OPCODE_SEND_IMM, MLX5_OPCODE_UMR,
    MLX5_WQE_CTRL_CQ_UPDATE,
};
use ferroverbs_hw::Bus;
use ferroverbs_sim::SimConfig;

use crate::common::{gid_v4, outlen, set, Host, Up};

/// MKEY access bits.
pub const LR: u8 = 1;
/// Local write.
pub const LW: u8 = 2;
/// Remote read.
pub const RR: u8 = 4;
/// Remote write.
pub const RW: u8 = 8;
/// Remote atomic.
pub const RA: u8 = 16;
/// Everything.
pub const ALL: u8 = LR | LW | RR | RW | RA;
/// Not an access right: remote invalidation enabled (`mkc.en_rinval`).
pub const RINV: u8 = 32;
/// Not an access right: UMR WQEs may modify the key (`mkc.umr_en`).
pub const UMR_EN: u8 = 64;

/// A memory region: a mapped buffer and its MKEY (VA = host address).
#[derive(Clone, Copy, Debug)]
pub struct Mr {
    /// The key (lkey = rkey).
    pub key: u32,
    /// Virtual address of byte 0 (the host address).
    pub va: u64,
    /// Index of the buffer in `Host::mapped`.
    pub m: usize,
    /// Length.
    pub len: usize,
}

/// A CQ and its consumer state.
#[derive(Clone, Copy, Debug)]
pub struct Cq {
    /// CQ number.
    pub cqn: u32,
    /// Buffer mapping.
    pub m: usize,
    /// log2 of the entries.
    pub log: u8,
    /// Byte offset of the doorbell record in the buffer mapping.
    pub dbr_off: usize,
    /// Consumer index.
    pub ci: u32,
    /// Bytes per entry: 64, or 128 (the CQE64 in the upper half).
    pub stride: usize,
}

/// A QP and its producer state.
#[derive(Clone, Copy, Debug)]
pub struct Qp {
    /// QP number.
    pub qpn: u32,
    /// Buffer mapping.
    pub m: usize,
    /// SQ WQEBBs.
    pub sq_size: u32,
    /// RQ WQEs.
    pub rq_size: u32,
    /// RQ stride.
    pub rq_stride: usize,
    /// Byte offset of the SQ.
    pub sq_off: usize,
    /// Byte offset of the doorbell record.
    pub dbr_off: usize,
    /// SQ producer (WQEBBs).
    pub sq_pi: u32,
    /// RQ producer (WQEs).
    pub rq_pi: u32,
    /// UAR of its doorbells.
    pub uar: u32,
    /// User index.
    pub uidx: u32,
}

/// Connection parameters.
#[derive(Clone, Copy, Debug)]
pub struct Conn {
    /// MTU code (1..5).
    pub mtu: u8,
    /// Remote read/write/atomic enables.
    pub rre: bool,
    /// Remote write.
    pub rwe: bool,
    /// Remote atomic.
    pub rae: bool,
    /// First PSN this side sends.
    pub sq_psn: u32,
    /// log2 outstanding READ/atomic as requester.
    pub log_sra: u8,
    /// RNR NAK timer code.
    pub min_rnr: u8,
    /// RNR retry.
    pub rnr_retry: u8,
    /// Transport retry count.
    pub retry_count: u8,
    /// Local ACK timeout exponent (4.096 µs × 2^n, 0 = none).
    pub ack_timeout: u8,
    /// log2 READ/atomic resources as responder.
    pub log_rra: u8,
}

impl Default for Conn {
    fn default() -> Self {
        Conn {
            mtu: 3,
            rre: true,
            rwe: true,
            rae: true,
            sq_psn: 0x10,
            log_sra: 4,
            min_rnr: 1,
            rnr_retry: 7,
            retry_count: 7,
            ack_timeout: 14,
            log_rra: 4,
        }
    }
}

/// One simulated NIC, brought up, with a GID, a PD and a completion EQ.
pub struct Node {
    /// The command-level driver.
    pub h: Host,
    /// Bring-up result (UAR, async EQ).
    pub up: Up,
    /// A protection domain.
    pub pd: u32,
    /// The completion EQ.
    pub ceq: u32,
    /// Its buffer mapping.
    pub ceq_m: usize,
    /// IPv4 address (GID 0).
    pub ip: [u8; 4],
    /// Port 1's MAC.
    pub mac: [u8; 6],
    /// The variant byte of the last MKEY made (the next one gets this + 1).
    pub variant: u8,
}

impl Node {
    /// The IOMMU's fault count and DMA bytes read and written.
    pub fn iommu_counters(&self) -> (u64, u64, u64) {
        let i = self.h.sim.iommu();
        (i.faults(), i.dma_read_bytes(), i.dma_write_bytes())
    }

    /// A device with `cfg`, brought up, GID 0 = `ip` (IPv4-mapped, RoCE v2).
    pub fn new(cfg: SimConfig, ip: [u8; 4]) -> Node {
        let mut h = Host::new(cfg);
        let up = h.bring_up();
        let mac = h.sim.port_macs()[0];
        h.set_gid(0, 1, &gid_v4(ip, mac));
        let pd = h.alloc_pd();
        let (ceq, ceq_m) = h.create_eq(6, up.uar, 1, &[]);
        h.eq_doorbell(up.uar, ceq, 0, true);
        Node {
            h,
            up,
            pd,
            ceq,
            ceq_m,
            ip,
            mac,
            variant: 0x40,
        }
    }

    /// Registers `len` fresh zeroed bytes with `access` in `pd`.
    pub fn reg_mr_pd(&mut self, len: usize, access: u8, pd: u32) -> Mr {
        let m = self.h.map(len.max(1));
        let va = self.h.mapped[m].mem.addr() as u64;
        let iova = self.h.iova(m);
        let npages = len.max(1).div_ceil(4096);
        let mut i = mk::create_mkey_input(npages);
        let f = mk::in_command;
        set(&mut i, create_mkey_in::pg_access, 1);
        set(&mut i, f(mkc::access_mode_1_0), 1);
        for (bit, field) in [
            (LR, mkc::lr),
            (LW, mkc::lw),
            (RR, mkc::rr),
            (RW, mkc::rw),
            (RA, mkc::a),
            (RINV, mkc::en_rinval),
            (UMR_EN, mkc::umr_en),
        ] {
            set(&mut i, f(field), u64::from(access & bit != 0));
        }
        set(&mut i, f(mkc::qpn), 0xff_ffff);
        self.variant = self.variant.wrapping_add(1);
        set(&mut i, f(mkc::mkey_7_0), self.variant.into());
        set(&mut i, f(mkc::pd), pd.into());
        set(&mut i, f(mkc::start_addr), va);
        set(&mut i, f(mkc::len), len as u64);
        set(&mut i, f(mkc::log_page_size), 12);
        let oct = mk::mtt_octwords(npages) as u64;
        set(&mut i, f(mkc::translations_octword_size), oct);
        set(
            &mut i,
            create_mkey_in::translations_octword_actual_size,
            oct,
        );
        for k in 0..npages {
            let at = mk::MTT_OFFSET + k * 8;
            i[at..at + 8].copy_from_slice(&((iova + k as u64 * 4096) | 3).to_be_bytes());
        }
        let o = self.h.ok(&i, outlen(Opcode::CreateMkey));
        let key = (create_mkey_out::mkey_index.get(&o) as u32) << 8 | u32::from(self.variant);
        Mr { key, va, m, len }
    }

    /// Registers in the node's PD.
    pub fn reg_mr(&mut self, len: usize, access: u8) -> Mr {
        let pd = self.pd;
        self.reg_mr_pd(len, access, pd)
    }

    /// Writes into a region.
    pub fn mr_write(&self, mr: &Mr, off: usize, data: &[u8]) {
        self.h.mapped[mr.m].mem.write(off, data);
    }

    /// Reads a region.
    pub fn mr_read(&self, mr: &Mr, off: usize, n: usize) -> Vec<u8> {
        self.h.mapped[mr.m].mem.bytes(off, n)
    }

    /// A CQ of `1 << log` 64-byte entries (initialised to `0xf0`), events to the
    /// completion EQ.
    pub fn create_cq(&mut self, log: u8) -> Cq {
        self.create_cq_with(log, false)
    }

    /// A CQ with the overrun-ignore bit as given.
    pub fn create_cq_with(&mut self, log: u8, oi: bool) -> Cq {
        self.create_cq_sized(log, oi, 64)
    }

    /// A CQ of `1 << log` entries of `stride` bytes (64, or 128: `cqc.cqe_sz` 1).
    pub fn create_cq_sized(&mut self, log: u8, oi: bool, stride: usize) -> Cq {
        let bytes = stride << log;
        let dbr_off = bytes.next_multiple_of(4096);
        let m = self.h.map(dbr_off + 4096);
        for k in 0..(1usize << log) {
            self.h.mapped[m]
                .mem
                .write(k * stride + stride - 1, &[CQE_OP_OWN_INIT]);
        }
        let base = self.h.iova(m);
        let pas: Vec<u64> = (0..bytes.div_ceil(4096) as u64)
            .map(|k| base + k * 4096)
            .collect();
        let mut i = create_cq_input(log, self.up.uar, self.ceq, base + dbr_off as u64, 0, &pas);
        set(
            &mut i,
            ferroverbs_hw::control::cq::in_command(ferroverbs_hw::control::cq::cqc::oi),
            oi.into(),
        );
        set(
            &mut i,
            ferroverbs_hw::control::cq::in_command(ferroverbs_hw::control::cq::cqc::cqe_sz),
            u64::from(stride == 128),
        );
        let o = self.h.ok(&i, outlen(Opcode::CreateCq));
        Cq {
            cqn: create_cq_out::cqn.get(&o) as u32,
            m,
            log,
            dbr_off,
            ci: 0,
            stride,
        }
    }

    /// The whole entry (`cq.stride` bytes) the last [`Node::poll`] of `cq` took.
    pub fn last_entry(&self, cq: &Cq) -> Vec<u8> {
        let n = 1u32 << cq.log;
        let off = ((cq.ci.wrapping_sub(1) & (n - 1)) as usize) * cq.stride;
        self.h.mapped[cq.m].mem.bytes(off, cq.stride)
    }

    /// Takes the next CQE if software owns it (updating the consumer index record).
    pub fn poll(&self, cq: &mut Cq) -> Option<Cqe64> {
        let n = 1u32 << cq.log;
        let mem = &self.h.mapped[cq.m].mem;
        let off = ((cq.ci & (n - 1)) as usize) * cq.stride + cq.stride - 64;
        let mut own = [0u8; 1];
        mem.read(off + 63, &mut own);
        if !sw_owned(own[0], cq.ci, n) {
            return None;
        }
        let mut b = [0u8; 64];
        mem.read(off, &mut b);
        cq.ci = cq.ci.wrapping_add(1);
        mem.write(cq.dbr_off, &dbr::cq_set_ci(cq.ci).to_be_bytes());
        Cqe64::read_from(&b).ok()
    }

    /// Rings the CQ arm doorbell (and writes the arm word to the record first).
    pub fn arm(&self, cq: &Cq, sn: u32, solicited: bool) {
        let cmd = if solicited {
            dbr::CqArmCmd::Solicited
        } else {
            dbr::CqArmCmd::NextCompletion
        };
        let word = dbr::cq_arm_word(sn, cmd, cq.ci);
        self.h.mapped[cq.m]
            .mem
            .write(cq.dbr_off + 4, &word.to_be_bytes());
        self.h.bus.wmb();
        self.h.bus.write64(
            uar::uar_bar_offset(self.up.uar) + uar::MLX5_CQ_DOORBELL,
            dbr::cq_arm_doorbell(word, cq.cqn),
        );
    }

    /// An RC QP (send CQ `scq`, receive CQ `rcq`) of `1 << log_sq` WQEBBs and
    /// `1 << log_rq` receive WQEs of `16 << stride` bytes.
    pub fn create_qp(&mut self, scq: &Cq, rcq: &Cq, log_sq: u8, log_rq: u8, stride: u8) -> Qp {
        self.create_qp_st(0, scq, rcq, log_sq, log_rq, stride)
    }

    /// A QP of service type `st` (the qpc encoding: 0 RC, 1 UC, 2 UD).
    pub fn create_qp_st(
        &mut self,
        st: u8,
        scq: &Cq,
        rcq: &Cq,
        log_sq: u8,
        log_rq: u8,
        stride: u8,
    ) -> Qp {
        self.create_qp_cs(st, scq, rcq, log_sq, log_rq, stride, 0)
    }

    /// [`Node::create_qp_st`] with responder scatter to CQE `cs_res` (`qpc.cs_res`:
    /// 0 none, 1 up to 32 bytes, 2 up to 64).
    #[allow(clippy::too_many_arguments)]
    pub fn create_qp_cs(
        &mut self,
        st: u8,
        scq: &Cq,
        rcq: &Cq,
        log_sq: u8,
        log_rq: u8,
        stride: u8,
        cs_res: u8,
    ) -> Qp {
        self.create_qp_scat(st, scq, rcq, log_sq, log_rq, stride, cs_res, 0)
    }

    /// [`Node::create_qp_cs`] with requester scatter to CQE `cs_req` too
    /// (`qpc.cs_req`: 0 none, 0x11 up to 32 bytes, 0x22 up to 64).
    #[allow(clippy::too_many_arguments)]
    pub fn create_qp_scat(
        &mut self,
        st: u8,
        scq: &Cq,
        rcq: &Cq,
        log_sq: u8,
        log_rq: u8,
        stride: u8,
        cs_res: u8,
        cs_req: u8,
    ) -> Qp {
        let rq_stride = 16usize << stride;
        let rq = rq_stride << log_rq;
        let sq = 64usize << log_sq;
        let bytes = rq + sq;
        let npages = bytes.div_ceil(4096);
        let m = self.h.map(npages * 4096 + 4096);
        let base = self.h.iova(m);
        let mut i = cmd::new_input(Opcode::CreateQp, 0, 0x110 + npages * 8);
        let f = qpm::in_command;
        let uidx = 0x1000 + self.h.mapped.len() as u32;
        set(&mut i, f(qpc::st), st.into());
        set(&mut i, f(qpc::cs_res), cs_res.into());
        set(&mut i, f(qpc::cs_req), cs_req.into());
        set(&mut i, f(qpc::pm_state), 3);
        set(&mut i, f(qpc::pd), self.pd.into());
        set(&mut i, f(qpc::uar_page), self.up.uar.into());
        set(&mut i, f(qpc::log_rq_size), log_rq.into());
        set(&mut i, f(qpc::log_rq_stride), stride.into());
        set(&mut i, f(qpc::log_sq_size), log_sq.into());
        set(&mut i, f(qpc::cqn_snd), scq.cqn.into());
        set(&mut i, f(qpc::cqn_rcv), rcq.cqn.into());
        set(&mut i, f(qpc::dbr_addr), base + (npages * 4096) as u64);
        set(&mut i, f(qpc::user_index), uidx.into());
        for k in 0..npages {
            let at = 0x110 + k * 8;
            i[at..at + 8].copy_from_slice(&(base + k as u64 * 4096).to_be_bytes());
        }
        let o = self.h.ok(&i, outlen(Opcode::CreateQp));
        Qp {
            qpn: create_qp_out::qpn.get(&o) as u32,
            m,
            sq_size: 1 << log_sq,
            rq_size: 1 << log_rq,
            rq_stride,
            sq_off: rq,
            dbr_off: npages * 4096,
            sq_pi: 0,
            rq_pi: 0,
            uar: self.up.uar,
            uidx,
        }
    }

    /// RST2INIT, INIT2RTR towards `peer`'s QP `rqpn`, RTR2RTS.
    pub fn connect(
        &mut self,
        qp: &Qp,
        rqpn: u32,
        peer_ip: [u8; 4],
        peer_mac: [u8; 6],
        c: &Conn,
        rq_psn: u32,
    ) {
        self.modify_init(qp, c);
        self.modify_rtr(qp, rqpn, peer_ip, peer_mac, c, rq_psn);
        self.modify_rts(qp, c);
    }

    /// Takes UD QP `qp` to RTS with Q_Key `qkey` and first PSN `sq_psn`.
    pub fn connect_ud(&mut self, qp: &Qp, qkey: u32, sq_psn: u32) {
        let f = qpm::in_command;
        let t = QpTransition::Rst2Init;
        let mut i = qpm::transition_input(t, qp.qpn, 0);
        set(&mut i, qpm::primary_path(ads::vhca_port_num), 1);
        set(&mut i, f(qpc::pm_state), 3);
        set(&mut i, f(qpc::q_key), qkey.into());
        self.h.ok(&i, t.out_layout().size());
        let t = QpTransition::Init2Rtr;
        let i = qpm::transition_input(t, qp.qpn, 0);
        self.h.ok(&i, t.out_layout().size());
        let t = QpTransition::Rtr2Rts;
        let mut i = qpm::transition_input(t, qp.qpn, 0);
        set(&mut i, f(qpc::next_send_psn), sq_psn.into());
        self.h.ok(&i, t.out_layout().size());
    }

    /// RST2INIT.
    pub fn modify_init(&mut self, qp: &Qp, c: &Conn) {
        let t = QpTransition::Rst2Init;
        let mut i = qpm::transition_input(t, qp.qpn, 0);
        let f = qpm::in_command;
        let p = qpm::primary_path;
        set(&mut i, p(ads::vhca_port_num), 1);
        set(&mut i, f(qpc::pm_state), 3);
        set(&mut i, f(qpc::rre), c.rre.into());
        set(&mut i, f(qpc::rwe), c.rwe.into());
        set(&mut i, f(qpc::rae), c.rae.into());
        self.h.ok(&i, t.out_layout().size());
    }

    /// INIT2RTR.
    pub fn modify_rtr(
        &mut self,
        qp: &Qp,
        rqpn: u32,
        peer_ip: [u8; 4],
        peer_mac: [u8; 6],
        c: &Conn,
        rq_psn: u32,
    ) {
        let t = QpTransition::Init2Rtr;
        let mut i = qpm::transition_input(t, qp.qpn, 0);
        let f = qpm::in_command;
        let p = qpm::primary_path;
        set(&mut i, f(qpc::mtu), c.mtu.into());
        set(&mut i, f(qpc::log_msg_max), 30);
        set(&mut i, f(qpc::remote_qpn), rqpn.into());
        set(&mut i, f(qpc::next_rcv_psn), rq_psn.into());
        set(&mut i, f(qpc::min_rnr_nak), c.min_rnr.into());
        set(&mut i, f(qpc::log_rra_max), c.log_rra.into());
        set(&mut i, p(ads::vhca_port_num), 1);
        set(&mut i, p(ads::src_addr_index), 0);
        set(&mut i, p(ads::hop_limit), 64);
        let gid = gid_v4(peer_ip, peer_mac).gid;
        let at = p(ads::rgid_rip).byte_offset();
        i[at..at + 16].copy_from_slice(&gid);
        set(
            &mut i,
            p(ads::rmac_47_32),
            u64::from(u16::from_be_bytes([peer_mac[0], peer_mac[1]])),
        );
        set(
            &mut i,
            p(ads::rmac_31_0),
            u64::from(u32::from_be_bytes([
                peer_mac[2],
                peer_mac[3],
                peer_mac[4],
                peer_mac[5],
            ])),
        );
        self.h.ok(&i, t.out_layout().size());
    }

    /// RTR2RTS.
    pub fn modify_rts(&mut self, qp: &Qp, c: &Conn) {
        let t = QpTransition::Rtr2Rts;
        let mut i = qpm::transition_input(t, qp.qpn, 0);
        let f = qpm::in_command;
        set(&mut i, f(qpc::next_send_psn), c.sq_psn.into());
        set(&mut i, f(qpc::retry_count), c.retry_count.into());
        set(&mut i, f(qpc::rnr_retry), c.rnr_retry.into());
        set(&mut i, f(qpc::log_sra_max), c.log_sra.into());
        set(
            &mut i,
            qpm::primary_path(ads::ack_timeout),
            c.ack_timeout.into(),
        );
        self.h.ok(&i, t.out_layout().size());
    }

    /// Runs a modify command without parameters (2ERR, 2RST).
    pub fn modify(&mut self, qp: &Qp, t: QpTransition) {
        let i = qpm::transition_input(t, qp.qpn, 0);
        self.h.ok(&i, t.out_layout().size());
    }

    /// The QP's state as QUERY_QP reports it.
    pub fn qp_state(&mut self, qp: &Qp) -> u8 {
        let c = self.h.query_qp(qp.qpn);
        qpc::state.get(&c) as u8
    }

    fn sq_mem_write(&self, qp: &Qp, pos: u32, wqe: &[u8]) {
        // WQEBB k of the WQE goes to slot (pos + k) mod size.
        for (k, bb) in wqe.chunks(64).enumerate() {
            let slot = (pos.wrapping_add(k as u32) & (qp.sq_size - 1)) as usize;
            self.h.mapped[qp.m].mem.write(qp.sq_off + slot * 64, bb);
        }
    }

    /// Writes a WQE built by `build` (given the WQE index) at the producer index; returns
    /// its index and first 8 bytes. Does not ring.
    pub fn write_wqe(&self, qp: &mut Qp, wqe: &[u8]) -> (u16, [u8; 8]) {
        let idx = qp.sq_pi as u16;
        let mut w = wqe.to_vec();
        // Stamp the index into the control segment.
        let op = w[3];
        w[1..3].copy_from_slice(&idx.to_be_bytes());
        w[3] = op;
        w.resize(w.len().next_multiple_of(64), 0);
        self.sq_mem_write(qp, qp.sq_pi, &w);
        qp.sq_pi = qp.sq_pi.wrapping_add((w.len() / 64) as u32);
        let mut first = [0u8; 8];
        first.copy_from_slice(&w[..8]);
        (idx, first)
    }

    /// Publishes the SQ producer counter and rings the 8-byte doorbell with `first`.
    pub fn ring(&self, qp: &Qp, first: [u8; 8]) {
        let mem = &self.h.mapped[qp.m].mem;
        self.h.bus.wmb();
        mem.write(qp.dbr_off + 4, &dbr::sq_counter(qp.sq_pi).to_be_bytes());
        self.h.bus.wmb();
        self.h.bus.write64(
            uar::uar_bar_offset(qp.uar) + uar::MLX5_BF_OFFSET,
            u64::from_be_bytes(first),
        );
    }

    /// Publishes the counter and copies the WQE at `pos` (`wqebbs` blocks) with BlueFlame.
    pub fn ring_bf(&self, qp: &Qp, wqe: &[u8]) {
        let mem = &self.h.mapped[qp.m].mem;
        self.h.bus.wmb();
        mem.write(qp.dbr_off + 4, &dbr::sq_counter(qp.sq_pi).to_be_bytes());
        self.h.bus.wmb();
        let base = uar::uar_bar_offset(qp.uar) + uar::bfreg_offset(1, uar::DEFAULT_BF_REG_SIZE);
        for (k, c) in wqe.chunks(64).enumerate() {
            let mut b = [0u8; 64];
            b[..c.len()].copy_from_slice(c);
            self.h.bus.write_block64(base + k * 64, &b);
        }
    }

    /// Posts one WQE and rings; returns its index.
    pub fn post(&self, qp: &mut Qp, wqe: &[u8]) -> u16 {
        let (idx, first) = self.write_wqe(qp, wqe);
        self.ring(qp, first);
        idx
    }

    /// Posts a receive WQE with `sges` (terminated if short).
    pub fn post_recv(&self, qp: &mut Qp, sges: &[(u64, u32, u32)]) -> u32 {
        let slot = (qp.rq_pi & (qp.rq_size - 1)) as usize;
        let mut w = vec![0u8; qp.rq_stride];
        for (k, &(addr, len, key)) in sges.iter().enumerate() {
            let mut d = WqeDataSeg::zeroed();
            d.set_data_seg(len, key, addr);
            w[k * 16..k * 16 + 16].copy_from_slice(d.as_bytes());
        }
        if sges.len() * 16 < qp.rq_stride {
            let mut d = WqeDataSeg::zeroed();
            d.set_terminator();
            let k = sges.len();
            w[k * 16..k * 16 + 16].copy_from_slice(d.as_bytes());
        }
        let mem = &self.h.mapped[qp.m].mem;
        mem.write(slot * qp.rq_stride, &w);
        let idx = qp.rq_pi;
        qp.rq_pi = qp.rq_pi.wrapping_add(1);
        self.h.bus.wmb();
        mem.write(qp.dbr_off, &dbr::rq_counter(qp.rq_pi).to_be_bytes());
        idx
    }

    /// Reads the next EQE of the completion EQ, if any (consumer index `ci`).
    pub fn ceq_entry(&self, ci: u32) -> Option<[u8; 64]> {
        let n = 64u32;
        let mut e = [0u8; 64];
        self.h.mapped[self.ceq_m]
            .mem
            .read(((ci % n) as usize) * 64, &mut e);
        ferroverbs_hw::datapath::eqe::eqe_sw_owned(e[63], ci, n).then_some(e)
    }
}

/// A data segment (lkey, address, length).
pub fn sge(mr: &Mr, off: usize, len: u32) -> (u64, u32, u32) {
    (mr.va + off as u64, len, mr.key)
}

fn ctrl(opcode: u8, qpn: u32, ds: usize, flags: u8, imm: u32) -> [u8; 16] {
    let mut c = WqeCtrlSeg::zeroed();
    c.set_ctrl_seg(0, opcode, 0, qpn, flags, ds as u8, 0, imm);
    let mut b = [0u8; 16];
    b.copy_from_slice(c.as_bytes());
    b
}

fn data_segs(sges: &[(u64, u32, u32)]) -> Vec<u8> {
    let mut v = Vec::new();
    for &(addr, len, key) in sges {
        let mut d = WqeDataSeg::zeroed();
        d.set_data_seg(len, key, addr);
        v.extend_from_slice(d.as_bytes());
    }
    v
}

/// Signaled.
pub const SIG: u8 = MLX5_WQE_CTRL_CQ_UPDATE;

/// A SEND (SEND_IMM with `imm`) WQE.
pub fn send_wqe(qpn: u32, sges: &[(u64, u32, u32)], imm: Option<u32>, flags: u8) -> Vec<u8> {
    let op = if imm.is_some() {
        MLX5_OPCODE_SEND_IMM
    } else {
        MLX5_OPCODE_SEND
    };
    let mut w = ctrl(op, qpn, 1 + sges.len(), flags, imm.unwrap_or(0)).to_vec();
    w.extend(data_segs(sges));
    w
}

/// An inline SEND (or WRITE with `raddr`) WQE.
pub fn inline_wqe(qpn: u32, data: &[u8], write: Option<(u64, u32)>, flags: u8) -> Vec<u8> {
    let base = if write.is_some() { 2 } else { 1 };
    let ds = base + (4 + data.len()).div_ceil(16);
    let op = if write.is_some() {
        MLX5_OPCODE_RDMA_WRITE
    } else {
        MLX5_OPCODE_SEND
    };
    let mut w = ctrl(op, qpn, ds, flags, 0).to_vec();
    if let Some((raddr, rkey)) = write {
        let mut r = WqeRaddrSeg::zeroed();
        r.set_raddr_seg(raddr, rkey);
        w.extend_from_slice(r.as_bytes());
    }
    w.extend_from_slice(&(data.len() as u32 | MLX5_INLINE_SEG).to_be_bytes());
    w.extend_from_slice(data);
    w.resize(ds * 16, 0);
    w
}

/// One segment of a WQE's data part ([`mixed_wqe`]).
#[derive(Clone, Debug)]
pub enum Seg {
    /// An inline segment: a BE32 `len | MLX5_INLINE_SEG` header and the bytes, padded
    /// to 16.
    Inline(Vec<u8>),
    /// A pointer (data) segment: address, length, lkey.
    Ptr((u64, u32, u32)),
}

/// The data part of `segs`, in order, each segment on its own 16-byte boundary.
pub fn data_part(segs: &[Seg]) -> Vec<u8> {
    let mut v = Vec::new();
    for s in segs {
        match s {
            Seg::Inline(b) => {
                v.extend_from_slice(&(b.len() as u32 | MLX5_INLINE_SEG).to_be_bytes());
                v.extend_from_slice(b);
                v.resize(v.len().next_multiple_of(16), 0);
            }
            Seg::Ptr(p) => v.extend(data_segs(&[*p])),
        }
    }
    v
}

/// A WQE of `opcode` whose segments after the control one are `middle` (a remote
/// address segment, a UD address vector; a multiple of 16 bytes) and then the data
/// part `segs`.
pub fn mixed_wqe(
    qpn: u32,
    opcode: u8,
    middle: &[u8],
    segs: &[Seg],
    imm: Option<u32>,
    flags: u8,
) -> Vec<u8> {
    let data = data_part(segs);
    let ds = 1 + middle.len() / 16 + data.len() / 16;
    let mut w = ctrl(opcode, qpn, ds, flags, imm.unwrap_or(0)).to_vec();
    w.extend_from_slice(middle);
    w.extend(data);
    w
}

/// The remote address segment of an RDMA WRITE or READ.
pub fn raddr_seg(raddr: u64, rkey: u32) -> [u8; 16] {
    let mut r = WqeRaddrSeg::zeroed();
    r.set_raddr_seg(raddr, rkey);
    let mut b = [0u8; 16];
    b.copy_from_slice(r.as_bytes());
    b
}

/// The 48-byte UD address vector towards `dest_qpn` of the node at `ip`/`mac` with
/// Q_Key `qkey` (RoCEv2: the IPv4-mapped GID, source GID index 0).
pub fn ud_av(ip: [u8; 4], mac: [u8; 6], dest_qpn: u32, qkey: u32) -> [u8; 48] {
    let mut av = WqeAv::zeroed();
    av.set_dgram_seg(
        u64::from(qkey) << 32,
        dest_qpn,
        true,
        0,
        0,
        0,
        mac,
        0,
        64,
        WqeAv::make_grh_gid_fl(true, 0, 0),
        gid_v4(ip, mac).gid,
    );
    let mut b = [0u8; 48];
    b.copy_from_slice(av.as_bytes());
    b
}

/// An RDMA WRITE (WRITE_IMM with `imm`) or READ WQE.
pub fn rdma_wqe(
    qpn: u32,
    read: bool,
    raddr: u64,
    rkey: u32,
    sges: &[(u64, u32, u32)],
    imm: Option<u32>,
    flags: u8,
) -> Vec<u8> {
    let op = match (read, imm) {
        (true, _) => MLX5_OPCODE_RDMA_READ,
        (false, Some(_)) => MLX5_OPCODE_RDMA_WRITE_IMM,
        (false, None) => MLX5_OPCODE_RDMA_WRITE,
    };
    let mut w = ctrl(op, qpn, 2 + sges.len(), flags, imm.unwrap_or(0)).to_vec();
    let mut r = WqeRaddrSeg::zeroed();
    r.set_raddr_seg(raddr, rkey);
    w.extend_from_slice(r.as_bytes());
    w.extend(data_segs(sges));
    w
}

/// An atomic WQE: compare and swap with `Some(compare)`, else fetch and add.
pub fn atomic_wqe(
    qpn: u32,
    raddr: u64,
    rkey: u32,
    local: (u64, u32, u32),
    swap_add: u64,
    compare: Option<u64>,
    flags: u8,
) -> Vec<u8> {
    let op = if compare.is_some() {
        MLX5_OPCODE_ATOMIC_CS
    } else {
        MLX5_OPCODE_ATOMIC_FA
    };
    let mut w = ctrl(op, qpn, 4, flags, 0).to_vec();
    let mut r = WqeRaddrSeg::zeroed();
    r.set_raddr_seg(raddr, rkey);
    w.extend_from_slice(r.as_bytes());
    let mut a = WqeAtomicSeg::zeroed();
    match compare {
        Some(c) => a.set_cas(swap_add, c),
        None => a.set_fetch_add(swap_add),
    }
    w.extend_from_slice(a.as_bytes());
    w.extend(data_segs(&[local]));
    w
}

/// A raw WQE with a chosen opcode and DS.
pub fn raw_wqe(qpn: u32, opcode: u8, ds: usize, flags: u8) -> Vec<u8> {
    let mut w = ctrl(opcode, qpn, ds, flags, 0).to_vec();
    w.resize(ds.max(1) * 16, 0);
    w
}

/// The error view of a CQE.
pub fn err(c: &Cqe64) -> ErrCqe {
    ErrCqe::read_from(c.as_bytes()).unwrap()
}

/// The CQEs polled from A's send CQ and B's receive CQ ([`Pair::drain`]), as bytes.
#[derive(Default)]
pub struct Cqes {
    /// A's send CQ.
    pub a: Vec<Vec<u8>>,
    /// B's receive CQ.
    pub b: Vec<Vec<u8>>,
}

/// Two nodes on a fabric, each with a send and a receive CQ and an RC QP connected to
/// the other's.
pub struct Pair {
    /// The fabric.
    pub fabric: ferroverbs_sim::Fabric,
    /// Requester side.
    pub a: Node,
    /// Responder side.
    pub b: Node,
    /// A's CQs (send, receive).
    pub acq: (Cq, Cq),
    /// B's CQs.
    pub bcq: (Cq, Cq),
    /// A's QP.
    pub qa: Qp,
    /// B's QP.
    pub qb: Qp,
}

impl Pair {
    /// Two deterministic or threaded nodes (per `cfg`) connected with `conn`.
    pub fn new(cfg: impl Fn(u64) -> SimConfig, conn: Conn) -> Pair {
        let fabric = ferroverbs_sim::Fabric::new(7);
        let mut a = Node::new(cfg(1), [10, 0, 0, 1]);
        let mut b = Node::new(cfg(2), [10, 0, 0, 2]);
        fabric.attach(&a.h.sim);
        fabric.attach(&b.h.sim);
        let acq = (a.create_cq(8), a.create_cq(8));
        let bcq = (b.create_cq(8), b.create_cq(8));
        let qa = a.create_qp(&acq.0, &acq.1, 8, 6, 2);
        let qb = b.create_qp(&bcq.0, &bcq.1, 8, 6, 2);
        let (bip, bmac, aip, amac) = (b.ip, b.mac, a.ip, a.mac);
        let cb = Conn {
            sq_psn: conn.sq_psn.wrapping_add(0x100) & 0xff_ffff,
            ..conn
        };
        a.connect(&qa, qb.qpn, bip, bmac, &conn, cb.sq_psn);
        b.connect(&qb, qa.qpn, aip, amac, &cb, conn.sq_psn);
        Pair {
            fabric,
            a,
            b,
            acq,
            bcq,
            qa,
            qb,
        }
    }

    /// A deterministic pair.
    pub fn deterministic(conn: Conn) -> Pair {
        Pair::new(|s| SimConfig::deterministic(s, 1), conn)
    }

    /// Connects a further QP of A, `qa`, and one of B, `qb`, to each other with `c`:
    /// A sends from `c.sq_psn`, B from `b_sq_psn`, each expecting the other's.
    pub fn connect_qps(&mut self, qa: &Qp, qb: &Qp, c: &Conn, b_sq_psn: u32) {
        let (bip, bmac, aip, amac) = (self.b.ip, self.b.mac, self.a.ip, self.a.mac);
        self.a.connect(qa, qb.qpn, bip, bmac, c, b_sq_psn);
        let cb = Conn {
            sq_psn: b_sq_psn,
            ..*c
        };
        self.b.connect(qb, qa.qpn, aip, amac, &cb, c.sq_psn);
    }

    /// A further pair of UC QPs (A's and B's, on the pair's CQs) connected to each
    /// other (no remote read or atomic: UC has none).
    pub fn uc_qps(&mut self) -> (Qp, Qp) {
        let uc = Conn {
            rre: false,
            rae: false,
            ..Conn::default()
        };
        let qa = self.a.create_qp_st(1, &self.acq.0, &self.acq.1, 6, 6, 2);
        let qb = self.b.create_qp_st(1, &self.bcq.0, &self.bcq.1, 6, 6, 2);
        self.connect_qps(&qa, &qb, &uc, 0x999);
        (qa, qb)
    }

    /// Polls everything A's send CQ and B's receive CQ hold into `out`, as bytes.
    pub fn drain(&mut self, out: &mut Cqes) {
        while let Some(c) = self.a.poll(&mut self.acq.0) {
            out.a.push(c.as_bytes().to_vec());
        }
        while let Some(c) = self.b.poll(&mut self.bcq.1) {
            out.b.push(c.as_bytes().to_vec());
        }
    }

    /// Posts the UMR WQE `w` on B's QP: [`umr_syndrome`] on B's send CQ.
    pub fn umr_on_b(&mut self, w: &[u8]) -> u8 {
        umr_syndrome(&self.fabric, &self.b, &mut self.qb, &mut self.bcq.0, w)
    }

    /// An RDMA WRITE of `data`, inline, from A's QP to `addr` with `rkey`: the
    /// syndrome of its completion (0 for success).
    pub fn write_inline(&mut self, addr: u64, rkey: u32, data: &[u8]) -> u8 {
        let w = mixed_wqe(
            self.qa.qpn,
            MLX5_OPCODE_RDMA_WRITE,
            &raddr_seg(addr, rkey),
            &[Seg::Inline(data.to_vec())],
            None,
            MLX5_WQE_CTRL_CQ_UPDATE,
        );
        self.a.post(&mut self.qa, &w);
        let c = wait_cqe(&self.fabric, &self.a, &mut self.acq.0);
        if c.opcode() == MLX5_CQE_REQ {
            0
        } else {
            err(&c).syndrome()
        }
    }

    /// Runs the fabric until nothing moves (deterministic), or waits until `done`
    /// holds (threaded).
    pub fn settle(&self) {
        self.fabric.run_until_idle();
    }
}

/// Posts the UMR WQE `w` (a bind, an invalidation, a re-registration) on `qp` of
/// `node` and gives its completion's syndrome (0 for success, asserting that the
/// requester CQE names the UMR opcode).
pub fn umr_syndrome(
    fabric: &ferroverbs_sim::Fabric,
    node: &Node,
    qp: &mut Qp,
    cq: &mut Cq,
    w: &[u8],
) -> u8 {
    node.post(qp, w);
    let c = wait_cqe(fabric, node, cq);
    if c.opcode() == MLX5_CQE_REQ {
        assert_eq!(c.sop_opcode(), MLX5_OPCODE_UMR);
        0
    } else {
        err(&c).syndrome()
    }
}

/// Polls `cq` of `node` until a CQE arrives (threaded mode: up to 60 s of real time, a
/// hang guard for a loaded 2-core machine; deterministic: runs the fabric first).
pub fn wait_cqe(fabric: &ferroverbs_sim::Fabric, node: &Node, cq: &mut Cq) -> Cqe64 {
    // A threaded device progresses on its own: the test only polls memory.
    if !node.h.sim.threaded() {
        fabric.run_until_idle();
    }
    let start = std::time::Instant::now();
    loop {
        if let Some(c) = node.poll(cq) {
            return c;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "no CQE on CQ {:#x} (seed {})",
            cq.cqn,
            fabric.seed()
        );
        std::thread::yield_now();
    }
}

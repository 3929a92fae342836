//! What the data path needs of a QP context, decoded once per state change from the
//! firmware's image of it (`mlx5_ifc.h` `qpc` and `ads`), and the addressing of the
//! QP's work queue buffer.
//!
//! The buffer (`mlx5-datapath.md` §1): the RQ at offset 0, `(16 << log_rq_stride) <<
//! log_rq_size` bytes, then the SQ, `64 << log_sq_size` bytes, laid over the PAS pages
//! (`4096 << log_page_size` bytes each) from byte `page_offset * 64` of the first page.

use std::net::Ipv4Addr;

use ferroverbs_hw::control::qp::{ads, qpc};
use ferroverbs_hw::Field;

use crate::firmware::{Firmware, Qp, ServiceType};
use crate::wire::udp;

fn get(img: &[u8], f: Field) -> u64 {
    if f.fits(img.len()) {
        f.get(img)
    } else {
        0
    }
}

fn pri(f: Field) -> Field {
    f.at(qpc::primary_address_path.bit)
}

/// Pages of a [`QueueBuf`] kept in the buffer itself (besides its list): the first
/// ones, which hold the whole SQ and RQ of a QP of up to 16 KiB of queues, so that a
/// WQE's address is found without a read of the page list on the heap (a cache miss per
/// QP when thousands of QPs are used in turn).
const HEAD_PAGES: usize = 4;

/// A work queue buffer laid over PAS pages.
#[derive(Clone, Debug, Default)]
pub struct QueueBuf {
    /// `pages[..HEAD_PAGES]` (zeros past the end of `pages`).
    head: [u64; HEAD_PAGES],
    pages: Vec<u64>,
    page_shift: u32,
    offset: u64,
}

impl QueueBuf {
    /// The buffer over `pages` (IOVAs of `1 << page_shift` bytes each) from byte
    /// `offset` of the first.
    pub fn new(pages: Vec<u64>, page_shift: u32, offset: u64) -> QueueBuf {
        let mut head = [0; HEAD_PAGES];
        for (h, p) in head.iter_mut().zip(&pages) {
            *h = *p;
        }
        QueueBuf {
            head,
            pages,
            page_shift,
            offset,
        }
    }

    /// The IOVA of page `i`.
    #[inline]
    fn page(&self, i: u64) -> Option<u64> {
        let i = usize::try_from(i).ok()?;
        if i < HEAD_PAGES && i < self.pages.len() {
            Some(self.head[i])
        } else {
            self.pages.get(i).copied()
        }
    }

    /// The IOVA of byte `byte` of the buffer. A WQEBB (or an RQ WQE of at most one
    /// stride) never crosses a page, since pages are at least 4 KiB and the queues are
    /// aligned to their element size.
    pub fn iova(&self, byte: u64) -> Option<u64> {
        let b = self.offset.checked_add(byte)?;
        let page = self.page(b >> self.page_shift)?;
        Some(page + (b & ((1u64 << self.page_shift) - 1)))
    }

    /// The IOVA of bytes `byte..byte + len` of the buffer if they lie in one page
    /// (so contiguous in IOVA space), else `None`.
    #[inline]
    pub fn iova_in_page(&self, byte: u64, len: u64) -> Option<u64> {
        let b = self.offset.checked_add(byte)?;
        let last = b.checked_add(len.checked_sub(1)?)?;
        if b >> self.page_shift != last >> self.page_shift {
            return None;
        }
        let page = self.page(b >> self.page_shift)?;
        Some(page + (b & ((1u64 << self.page_shift) - 1)))
    }
}

/// A resolved RoCEv2 path: both ends' Ethernet and IPv4 addresses and the header
/// values the address vector asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Path {
    /// Local port (1-based).
    pub port: u8,
    /// Source MAC (the GID entry's).
    pub smac: [u8; 6],
    /// Source IPv4 address (the GID entry's).
    pub sip: Ipv4Addr,
    /// Destination MAC.
    pub dmac: [u8; 6],
    /// Destination IPv4 address (from the IPv4-mapped remote GID).
    pub dip: Ipv4Addr,
    /// UDP source port.
    pub sport: u16,
    /// IPv4 TTL (hop limit).
    pub ttl: u8,
    /// IPv4 TOS (traffic class).
    pub tos: u8,
}

/// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`).
pub fn ipv4_of_gid(gid: &[u8]) -> Option<Ipv4Addr> {
    if gid.len() == 16 && gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff {
        Some(Ipv4Addr::new(gid[12], gid[13], gid[14], gid[15]))
    } else {
        None
    }
}

/// The data-path view of a QP context.
///
/// `repr(C)`: the fields the packet path reads for every message first (doorbell
/// record, numbers, sizes, the queue buffer, the path and its headers), the rest after.
#[derive(Clone, Debug)]
#[repr(C)]
pub struct QpCfg {
    /// Doorbell record IOVA.
    pub dbr: u64,
    /// Byte offset of the SQ in the buffer.
    pub sq_base: u64,
    /// QP number.
    pub qpn: u32,
    /// Remote QP number.
    pub remote_qpn: u32,
    /// Path MTU in bytes.
    pub pmtu: u32,
    /// UAR page of the QP's doorbells.
    pub uar: u32,
    /// SQ size in WQEBBs (0: no SQ).
    pub sq_size: u32,
    /// Protection domain.
    pub pd: u32,
    /// User index (reported in CQEs, CQE version 1).
    pub user_index: u32,
    /// RQ size in WQEs (0: no RQ).
    pub rq_size: u32,
    /// Send CQ.
    pub cqn_snd: Option<u32>,
    /// Receive CQ.
    pub cqn_rcv: Option<u32>,
    /// The work queue buffer.
    pub buf: QueueBuf,
    /// The SRQ receive WQEs come from (`rq_type` SRQ).
    pub srqn: Option<u32>,
    /// Service type.
    pub st: ServiceType,
    /// The Q counter set its events count into (`qpc.counter_set_id`; 0: none).
    pub counter_set: u8,
    /// Local ACK timeout exponent: 4.096 µs × 2^`ack_timeout` (0: no timer).
    pub ack_timeout: u8,
    /// Remote write enabled.
    pub rwe: bool,
    /// Remote read enabled.
    pub rre: bool,
    /// Remote atomic enabled.
    pub rae: bool,
    /// A QP1 (`qpc.st` QP1): its sends carry source QP 1 in the DETH.
    pub gsi: bool,
    /// RNR NAK timer code the responder sends.
    pub min_rnr_nak: u8,
    /// The resolved path, once the QP has one (INIT2RTR) and it is IPv4 RoCEv2.
    pub path: Option<Path>,
    /// The Ethernet, IPv4 and UDP headers of that path, built with it.
    pub encap: Option<crate::wire::encap::Encap>,
    /// Largest message.
    pub max_msg: u64,
    /// The largest received SEND placed in its CQE instead of the receive buffer
    /// (responder scatter to CQE, `qpc.cs_res`; 0: none).
    pub scatter_cqe: u32,
    /// The largest RDMA READ response or atomic result placed in the requester's
    /// CQE instead of the local buffer (requester scatter to CQE, `qpc.cs_req`; 0:
    /// none).
    pub req_scatter_cqe: u32,
    /// RQ WQE stride in bytes.
    pub rq_stride: u32,
    /// First PSN the requester sends (`next_send_psn` at RTR2RTS).
    pub sq_psn: u32,
    /// First PSN the responder expects (`next_rcv_psn` at INIT2RTR).
    pub rq_psn: u32,
    /// Outstanding READ/atomic requests as requester.
    pub sra_max: u32,
    /// READ/atomic requests remembered as responder (`2^log_rra_max`,
    /// max_dest_rd_atomic).
    pub rra_max: u32,
    /// Transport retry count.
    pub retry_count: u8,
    /// RNR retry count (7 = infinite).
    pub rnr_retry: u8,
    /// The local port (1-based; from RST2INIT).
    pub port: u8,
    /// UD: the QP's Q_Key (`qpc.q_key`).
    pub qkey: u32,
    /// Its successful responder CQE with the per-QP fields in place (QPN, remote QPN,
    /// user index; no GRH), for [`super::Ctx::post_resp_cqe`].
    pub resp_cqe: super::cq::CqeTemplate,
}

/// The IB MTU (bytes) of RoCE packets on a port whose NIC vport MTU (the hardware
/// MTU: Ethernet payload plus Ethernet header, VLAN tag and FCS) is `vport_mtu`: the
/// largest of 4096..256 leaving room for the headers, as Linux `iboe_get_mtu` computes
/// it (GRH 40, UDP 8, BTH 12, XRC 4, AtomicETH 28, ICRC 4) from the netdev MTU
/// (vport MTU less 14 + 4 + 4). The MTU of UD QPs ("UD uses the port MTU",
/// `rocev2-wire.md` §1.4); the driver's `Mtu::for_ethernet` applies the same rule.
pub fn port_ib_mtu(vport_mtu: u16) -> u32 {
    let eth = u32::from(vport_mtu).saturating_sub(14 + 4 + 4);
    let room = eth.saturating_sub(40 + 8 + 12 + 4 + 28 + 4);
    [4096u32, 2048, 1024, 512]
        .into_iter()
        .find(|&m| m <= room)
        .unwrap_or(256)
}

impl QpCfg {
    /// Decodes the firmware's image of QP `qpn`.
    pub fn load(fw: &Firmware, qpn: u32, qp: &Qp) -> QpCfg {
        let img = &qp.qpc;
        let g = |f: Field| get(img, f);
        // rq_type 3: zero-length RQ (no receive queue); 1: receive WQEs from an SRQ
        // (no RQ in the QP buffer either).
        let rq_size = if g(qpc::rq_type) != 0 {
            0
        } else {
            1u32 << g(qpc::log_rq_size).min(24)
        };
        let rq_stride = 16u32 << g(qpc::log_rq_stride).min(7);
        let sq_size = if g(qpc::no_sq) != 0 {
            0
        } else {
            1u32 << g(qpc::log_sq_size).min(24)
        };
        let mtu = g(qpc::mtu);
        let port = g(pri(ads::vhca_port_num)) as u8;
        let pmtu = if qp.st == ServiceType::Ud {
            // UD ignores the context's MTU: its messages are bounded by the port's.
            usize::from(port)
                .checked_sub(1)
                .and_then(|i| fw.ports().get(i))
                .map_or(0, |p| port_ib_mtu(p.mtu))
        } else if (1..=5).contains(&mtu) {
            128u32 << mtu
        } else {
            0
        };
        let path = Self::path(fw, img, qpn);
        let mut cfg = QpCfg {
            qpn,
            st: qp.st,
            gsi: qp.gsi,
            pd: qp.pd,
            cqn_snd: qp.cqn_snd,
            cqn_rcv: qp.cqn_rcv,
            // CQE version 1: the QP's user index; version 0: the SRQN of an SRQ QP
            // (`mlx5-datapath.md` §7, `srqn_uidx`).
            user_index: match qp.srqn {
                Some(s)
                    if fw
                        .caps()
                        .gen(ferroverbs_hw::control::caps::cmd_hca_cap::cqe_version)
                        == 0 =>
                {
                    s
                }
                _ => g(qpc::user_index) as u32,
            },
            scatter_cqe: Self::scatter_cqe(fw, qp, g(qpc::cs_res)),
            req_scatter_cqe: Self::req_scatter_cqe(fw, qp, g(qpc::cs_req)),
            counter_set: g(qpc::counter_set_id) as u8,
            uar: qp.uar,
            buf: QueueBuf::new(
                qp.pages.clone(),
                12 + g(qpc::log_page_size).min(19) as u32,
                g(qpc::page_offset) * 64,
            ),
            sq_size,
            sq_base: u64::from(rq_size) * u64::from(rq_stride),
            rq_size,
            srqn: qp.srqn,
            rq_stride,
            dbr: qp.dbr,
            pmtu,
            max_msg: if qp.st == ServiceType::Ud {
                u64::from(pmtu)
            } else {
                1u64 << g(qpc::log_msg_max).min(31)
            },
            remote_qpn: g(qpc::remote_qpn) as u32,
            sq_psn: g(qpc::next_send_psn) as u32,
            rq_psn: g(qpc::next_rcv_psn) as u32,
            rre: g(qpc::rre) != 0,
            rwe: g(qpc::rwe) != 0,
            rae: g(qpc::rae) != 0,
            sra_max: 1u32 << g(qpc::log_sra_max),
            min_rnr_nak: g(qpc::min_rnr_nak) as u8,
            retry_count: g(qpc::retry_count) as u8,
            rnr_retry: g(qpc::rnr_retry) as u8,
            ack_timeout: g(pri(ads::ack_timeout)) as u8,
            rra_max: 1u32 << g(qpc::log_rra_max).min(16),
            path,
            encap: path.and_then(|p| crate::transport::encap_of(&p).ok()),
            port,
            qkey: g(qpc::q_key) as u32,
            resp_cqe: super::cq::CqeTemplate::default(),
        };
        cfg.resp_cqe = super::cq::CqeTemplate::resp(cfg.qpn, cfg.remote_qpn, cfg.user_index, false);
        cfg
    }

    /// Whether a one-packet message of `n` bytes goes in its CQE (responder scatter
    /// to CQE; a QP without `cs_res` never scatters, a 0-byte message included).
    #[inline]
    pub fn in_cqe(&self, n: u64) -> bool {
        self.scatter_cqe != 0 && n <= u64::from(self.scatter_cqe)
    }

    /// The responder scatter-to-CQE limit of `qpc.cs_res` (PRM; Linux `mlx5_ib`
    /// `configure_responder_scat_cqe` sets `MLX5_RES_SCAT_DATA32_CQE` (1) for RC and UC
    /// QPs whose receive CQ has 64-byte CQEs, `MLX5_RES_SCAT_DATA64_CQE` (2) for
    /// 128-byte ones): messages of up to 32 bytes go in the 64-byte CQE, of up to 64 in
    /// the first half of a 128-byte entry (`MLX5_INLINE_SCATTER_32`/`_64` in `op_own`,
    /// copied out by libmlx5's `mlx5_copy_to_recv_wqe`). Data64 on a CQ of 64-byte
    /// CQEs gives 32; UD QPs (whose buffers start with the GRH) never scatter to CQE.
    fn scatter_cqe(fw: &Firmware, qp: &Qp, cs_res: u64) -> u32 {
        if !matches!(qp.st, ServiceType::Rc | ServiceType::Uc) {
            return 0;
        }
        let cqe128 = qp
            .cqn_rcv
            .and_then(|c| fw.cq(c))
            .is_some_and(|c| c.cqe_size == 128);
        match cs_res {
            1 => 32,
            2 if cqe128 => 64,
            2 => 32,
            _ => 0,
        }
    }

    /// Whether the `n` bytes of a READ response or atomic result of a signaled WQE go
    /// in its CQE (requester scatter to CQE).
    #[inline]
    pub fn req_in_cqe(&self, n: u64) -> bool {
        self.req_scatter_cqe != 0 && n <= u64::from(self.req_scatter_cqe)
    }

    /// The requester scatter-to-CQE limit of `qpc.cs_req` (PRM; Linux
    /// `include/linux/mlx5/qp.h` `MLX5_REQ_SCAT_DATA32_CQE` 0x11 and
    /// `MLX5_REQ_SCAT_DATA64_CQE` 0x22, which `mlx5_ib`'s
    /// `configure_requester_scat_cqe` sets for RC QPs created with
    /// `MLX5_QP_FLAG_SCATTER_CQE` that signal every WQE (`sq_sig_all`) or allow it
    /// (`MLX5_QP_FLAG_ALLOW_SCATTER_CQE`): DATA64 when the send CQ has 128-byte
    /// CQEs, DATA32 otherwise): the data of an RDMA READ response or an atomic
    /// response of up to 32 bytes goes in the 64-byte CQE, of up to 64 in the first
    /// half of a 128-byte entry; libmlx5 copies it into the send WQE's scatter list
    /// (`cq.c` `mlx5_parse_cqe`, `qp.c` `mlx5_copy_to_send_wqe`, RC only). DATA64 on
    /// a CQ of 64-byte CQEs gives 32; other values, and other transports, none.
    fn req_scatter_cqe(fw: &Firmware, qp: &Qp, cs_req: u64) -> u32 {
        if qp.st != ServiceType::Rc {
            return 0;
        }
        let cqe128 = qp
            .cqn_snd
            .and_then(|c| fw.cq(c))
            .is_some_and(|c| c.cqe_size == 128);
        match cs_req {
            0x11 => 32,
            0x22 if cqe128 => 64,
            0x22 => 32,
            _ => 0,
        }
    }

    fn path(fw: &Firmware, img: &[u8], qpn: u32) -> Option<Path> {
        let g = |f: Field| get(img, f);
        let port = g(pri(ads::vhca_port_num)) as u8;
        let p = fw.ports().get(usize::from(port).checked_sub(1)?)?;
        let src = p.gid(g(pri(ads::src_addr_index)) as usize)?;
        let sip = ipv4_of_gid(&src.gid)?;
        let rgid = pri(ads::rgid_rip).bytes(img)?;
        let dip = ipv4_of_gid(rgid)?;
        let hi = (g(pri(ads::rmac_47_32)) as u16).to_be_bytes();
        let lo = (g(pri(ads::rmac_31_0)) as u32).to_be_bytes();
        let dmac = [hi[0], hi[1], lo[0], lo[1], lo[2], lo[3]];
        let remote = g(qpc::remote_qpn) as u32;
        let sport = match g(pri(ads::udp_sport)) as u16 {
            0 => udp::rocev2_source_port(g(pri(ads::flow_label)) as u32, qpn, remote),
            s => s,
        };
        let ttl = match g(pri(ads::hop_limit)) as u8 {
            0 => 64,
            t => t,
        };
        Some(Path {
            port,
            smac: src.mac,
            sip,
            dmac,
            dip,
            sport,
            ttl,
            tos: g(pri(ads::tclass)) as u8,
        })
    }

    /// The IOVA of byte `off` of SQ WQEBB slot `slot`.
    pub fn sq_iova(&self, slot: u32, off: u64) -> Option<u64> {
        self.buf.iova(self.sq_base + u64::from(slot) * 64 + off)
    }

    /// The IOVA of RQ WQE slot `slot`.
    pub fn rq_iova(&self, slot: u32) -> Option<u64> {
        self.buf.iova(u64::from(slot) * u64::from(self.rq_stride))
    }
}

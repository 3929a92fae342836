//! The UD transport: one packet per message, no acknowledgement, no retransmission.
//!
//! Facts (`shared/reference/rocev2-wire.md` §1.4, §2.2, §3, §4; `mlx5-datapath.md`
//! §2.3, §7.8; IBTA Vol. 1 §9.6, §10.2.5 (Q_Keys), §11.4.1.1 (the GRH of a UD receive)):
//!
//! * **Requester.** Each send WQE of a UD QP carries a datagram segment (the 48-byte
//!   `struct mlx5_wqe_av`): destination QPN (`dqp_dct`), Q_Key (bytes 0-3), destination
//!   MAC (`rmac`), GID (`rgid`), source GID index, flow label, traffic class, hop limit
//!   and, for RoCEv2, the UDP source port in `rlid` (0: derived from the flow label and
//!   the QP numbers as Linux `rdma_get_udp_sport` does). A message is one
//!   `UD SEND_ONLY` (0x64) or `UD SEND_ONLY_WITH_IMMEDIATE` (0x65) packet: BTH, DETH
//!   (Q_Key, source QPN), ImmDt; the IPv4 header takes the AV's source GID (the port's
//!   GID table entry), destination GID (IPv4-mapped), TTL = hop limit and TOS = traffic
//!   class. A message longer than the port MTU completes with `LOCAL_LENGTH_ERR`.
//!   The requester completes each WQE as soon as its packet is sent.
//! * **Q_Key rule.** A Q_Key in the work request with its high bit set (a "controlled"
//!   Q_Key, IBTA §10.2.5) is replaced by the sending QP's own Q_Key.
//! * **Responder.** Only the two UD opcodes, DETH present, the QP in RTR/RTS/SQD; the
//!   DETH Q_Key must equal the QP's Q_Key, else the packet is dropped and counted
//!   (`rx_bad_qkey`), as rxe does. With no receive WQE posted the packet is dropped
//!   silently (`rx_no_recv_wqe`): UD has no RNR NAK. Otherwise the receive buffer gets
//!   the 40-byte GRH area first, then the payload; for RoCEv2 over IPv4 the GRH area is
//!   20 zero bytes followed by the 20-byte IPv4 header as received (Linux
//!   `include/rdma/ib_verbs.h` `union rdma_network_hdr { struct ib_grh ibgrh; struct {
//!   u8 reserved[20]; struct iphdr roce4grh; }; }`, what rxe's `rxe_resp.c` writes and
//!   mlx5 hardware delivers). The CQE reports byte count = 40 + payload, the source QPN
//!   (DETH) in `flags_rqpn` with "g" set and the RoCE L3 header type IPv4, and the
//!   immediate. A buffer smaller than 40 + payload completes the receive WQE with
//!   `LOCAL_LENGTH_ERR` (and the QP goes to the error state, as every error
//!   completion does); the sender never learns of it.

use ferroverbs_hw::control::qp::QpcState;
use ferroverbs_hw::datapath::cqe::{
    MLX5_CQE_RESP_SEND, MLX5_CQE_RESP_SEND_IMM, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR,
    MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
};
use ferroverbs_hw::datapath::wqe::WqeAv;

use crate::engine::cq::{Completion, CqeKind};
use crate::engine::mem;
use crate::engine::qp::{ipv4_of_gid, Path};
use crate::engine::wqe::{self, Op, RecvError, SendWqe, WqeError};
use crate::engine::{Ctx, QpRt, Synd};
use crate::wire::{deth, immdt, udp, Opcode, RoceRepr};

use super::{bth, send_packet, TxError};

/// Bytes of the GRH area at the start of every UD receive buffer.
pub const GRH_LEN: usize = 40;

/// Where the IPv4 header sits inside the GRH area (RoCEv2 over IPv4).
pub const GRH_IPV4_OFFSET: usize = 20;

/// The high bit of a Q_Key: a controlled Q_Key, replaced by the QP's own on send.
pub const QKEY_CONTROLLED: u32 = 0x8000_0000;

/// 16-bit SQ counters.
const MASK16: u32 = 0xffff;

/// The path an address vector describes, from QP `qpn` on `port`.
pub fn av_path(cx: &Ctx, port: u8, qpn: u32, av: &WqeAv) -> Option<Path> {
    let p = cx.fw.ports().get(usize::from(port).checked_sub(1)?)?;
    let src = p.gid(usize::from(av.sgid_index()))?;
    let sip = ipv4_of_gid(&src.gid)?;
    let dip = ipv4_of_gid(&av.rgid)?;
    let sport = match av.rlid() {
        0 => udp::rocev2_source_port(av.flow_label(), qpn, av.dest_qpn()),
        s => s,
    };
    let ttl = match av.hop_limit {
        0 => 64,
        t => t,
    };
    Some(Path {
        port,
        smac: src.mac,
        sip,
        dmac: av.rmac,
        dip,
        sport,
        ttl,
        tos: av.tclass,
    })
}

/// Fetches and sends every WQE posted to UD QP `qp` (RTS only; nothing is outstanding
/// afterwards: each WQE completes when its packet leaves).
pub fn pump(qp: &mut QpRt, cx: &mut Ctx) {
    if qp.state != QpcState::Rts || qp.cfg.sq_size == 0 {
        return;
    }
    let Ok(db) = cx.io.read_be32(qp.cfg.dbr + 4) else {
        return;
    };
    loop {
        let avail = (db.wrapping_sub(qp.sq.fetched) & MASK16).min(qp.cfg.sq_size);
        if avail == 0 {
            break;
        }
        let w = wqe::parse_send(cx.fw, cx.io, &qp.cfg, qp.sq.fetched, avail, &mut qp.sq.txd);
        cx.stats.wqes += 1;
        qp.sq.fetched = qp.sq.fetched.wrapping_add(w.wqebbs);
        let res = match w.error {
            Some(e) => Err(Synd::of_wqe(e)),
            None => transmit(qp, cx, &w),
        };
        match res {
            Ok(()) => {
                if w.signaled {
                    let c = req_completion(qp, &w, CqeKind::Req { sop: w.opcode }, cx.now);
                    cx.post_cqe(qp.cfg.cqn_snd, &c);
                }
            }
            Err(s) => {
                let kind = CqeKind::Err {
                    req: true,
                    syndrome: s.syndrome,
                    vendor: s.vendor,
                    sop: w.opcode,
                };
                let c = req_completion(qp, &w, kind, cx.now);
                cx.post_cqe(qp.cfg.cqn_snd, &c);
                // The rest of the SQ (and the RQ) is flushed.
                qp.to_error(cx);
                return;
            }
        }
    }
}

fn req_completion(qp: &QpRt, w: &SendWqe, kind: CqeKind, now: u64) -> Completion {
    Completion {
        kind,
        qpn: qp.cfg.qpn,
        wqe_counter: w.index,
        byte_cnt: w.len.min(u64::from(u32::MAX)) as u32,
        imm: 0,
        rqpn: 0,
        uidx: qp.cfg.user_index,
        se: false,
        timestamp: now,
        grh: false,
    }
}

/// Sends the one packet of WQE `w`.
fn transmit(qp: &mut QpRt, cx: &mut Ctx, w: &SendWqe) -> Result<(), Synd> {
    let Some(op) = w.op else {
        return Err(Synd::of_wqe(WqeError::QpOp));
    };
    let imm = match op {
        Op::Nop => return Ok(()),
        Op::Send { imm } => imm,
        _ => return Err(Synd::of_wqe(WqeError::QpOp)),
    };
    if w.len > u64::from(qp.cfg.pmtu) {
        return Err(Synd::of_wqe(WqeError::Length));
    }
    let Some(av) = qp.sq.txd.av else {
        return Err(Synd::of_wqe(WqeError::QpOp));
    };
    let Some(path) = av_path(cx, qp.cfg.port, qp.cfg.qpn, &av) else {
        return Err(Synd::of_wqe(WqeError::QpOp));
    };
    let qkey = match av.qkey() {
        k if k & QKEY_CONTROLLED != 0 => qp.cfg.qkey,
        k => k,
    };
    let opcode = if imm {
        Opcode::UdSendOnlyWithImmediate
    } else {
        Opcode::UdSendOnly
    };
    let psn = qp.sq.next_psn;
    let mut b = bth(opcode, av.dest_qpn(), psn);
    b.solicited = w.solicited;
    let mut roce = RoceRepr::new(b);
    roce.deth = Some(deth::Repr {
        qkey,
        // A QP1 sends as QP 1 (IBTA Vol. 1 13.5.1; mlx5_ib's GSI sends with
        // `deth_sqpn` 1).
        src_qp: if qp.cfg.gsi {
            crate::engine::GSI_QPN
        } else {
            qp.cfg.qpn
        },
    });
    if imm {
        roce.immdt = Some(immdt::Repr { immediate: w.imm });
    }
    let data = &qp.sq.txd;
    let r = send_packet(cx, &path, &roce, w.len as usize, |fw, io, dst| {
        data.gather(fw, io, w.inline, 0, dst)
    });
    qp.sq.next_psn = psn.next();
    qp.sq.psn_hi = qp.sq.next_psn;
    qp.sq.una = qp.sq.next_psn;
    match r {
        Ok(()) => Ok(()),
        Err(TxError::Memory(_)) => Err(Synd::of_wqe(WqeError::Prot)),
        Err(TxError::Build) => Err(Synd::of_wqe(WqeError::QpOp)),
    }
}

/// A received UD packet, checked by the engine (address, QP of type UD, P_Key).
pub struct UdPkt<'a> {
    /// Its transport headers.
    pub roce: &'a RoceRepr,
    /// Its payload (pad excluded).
    pub payload: &'a [u8],
    /// The IPv4 header as received (20 bytes).
    pub ip_header: &'a [u8],
}

/// Handles a UD request for `qp`.
pub fn on_packet(qp: &mut QpRt, cx: &mut Ctx, pkt: &UdPkt) {
    if !matches!(qp.state, QpcState::Rtr | QpcState::Rts | QpcState::Sqd) {
        cx.stats.rx_bad_state += 1;
        return;
    }
    let Some(d) = pkt.roce.deth else {
        cx.stats.rx_malformed += 1;
        return;
    };
    if d.qkey != qp.cfg.qkey {
        cx.stats.rx_bad_qkey += 1;
        return;
    }
    if pkt.payload.len() > qp.cfg.pmtu as usize {
        cx.stats.rx_malformed += 1;
        return;
    }
    if qp.rq_posted(cx.io) == 0 {
        cx.stats.rx_no_recv_wqe += 1;
        return;
    }
    let counter = qp.rq_ci;
    qp.rq_ci = qp.rq_ci.wrapping_add(1);
    let mut sges = std::mem::take(&mut qp.resp.rwqe.sges);
    let r = receive(qp, cx, pkt, counter, &mut sges);
    qp.resp.rwqe.sges = sges;
    let (kind, byte_cnt) = match r {
        Ok(n) => {
            let opcode = if pkt.roce.immdt.is_some() {
                MLX5_CQE_RESP_SEND_IMM
            } else {
                MLX5_CQE_RESP_SEND
            };
            (CqeKind::Resp { opcode }, n)
        }
        Err(syndrome) => {
            let s = Synd::of(syndrome);
            let kind = CqeKind::Err {
                req: false,
                syndrome: s.syndrome,
                vendor: s.vendor,
                sop: 0,
            };
            (kind, 0)
        }
    };
    let mut c = qp.resp_completion(kind, counter, byte_cnt, cx.now);
    c.rqpn = d.src_qp;
    c.imm = pkt.roce.immdt.map_or(0, |i| i.immediate);
    c.se = pkt.roce.bth.solicited;
    c.grh = true;
    let written = cx.post_cqe(qp.cfg.cqn_rcv, &c);
    if !written || matches!(kind, CqeKind::Err { .. }) {
        qp.to_error(cx);
    }
}

/// Places the GRH area and the payload in receive WQE `counter`; the byte count, or
/// the error syndrome.
fn receive(
    qp: &QpRt,
    cx: &mut Ctx,
    pkt: &UdPkt,
    counter: u32,
    sges: &mut Vec<mem::Sge>,
) -> Result<u64, u8> {
    if let Err(e) = wqe::parse_recv(cx.fw, cx.io, &qp.cfg, counter, sges) {
        return Err(match e {
            RecvError::Prot => MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
            RecvError::Unreadable => MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
        });
    }
    let need = (GRH_LEN + pkt.payload.len()) as u64;
    if mem::total(sges) < need {
        return Err(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
    }
    let mut grh = [0u8; GRH_LEN];
    let n = pkt.ip_header.len().min(GRH_LEN - GRH_IPV4_OFFSET);
    grh[GRH_IPV4_OFFSET..GRH_IPV4_OFFSET + n].copy_from_slice(&pkt.ip_header[..n]);
    mem::scatter(cx.fw, cx.io, sges, 0, &grh).map_err(|_| MLX5_CQE_SYNDROME_LOCAL_PROT_ERR)?;
    if !pkt.payload.is_empty() {
        mem::scatter(cx.fw, cx.io, sges, GRH_LEN as u64, pkt.payload)
            .map_err(|_| MLX5_CQE_SYNDROME_LOCAL_PROT_ERR)?;
    }
    Ok(need)
}

//! The CM on a device, in the spirit of rdma_cm: a port's general services QP (QP1)
//! carrying the [`engine`](crate::engine)'s MADs as UD packets, the RDMA IP CM service
//! on top (IP addresses and ports, the IP header in the REQ), and the application's
//! QP taken through INIT, RTR and RTS with the attributes the exchange negotiated
//! (Linux `rdma_init_qp_attr`).
//!
//! [`Service::poll`] does the work (received MADs, timers, MADs to send) and is
//! cheap to call in the application's loop; [`Service::next_event`] then hands out
//! what happened. Nothing blocks: a deterministic test steps its fabric and calls
//! `poll`; a threaded device makes progress on its own.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ferroverbs::verbs::{
    AccessFlags, AddressHandle, AddressVector, CompletionChannel, CompletionQueue, MemoryRegion,
    Pd, QpAttr, QpCap, QpInitAttr, QpState, QueuePair, RecvWr, RtrAttr, RtsAttr, SendWr,
    UdInitAttr, WcOpcode,
};
use ferroverbs::{Clock, GidEntry, Mtu};
use ferroverbs_hw::Bus;

use crate::engine::{
    AcceptParams, CmError, Config, ConnId, ConnectParams, Engine, Event, Outgoing,
};
use crate::ipcm::{self, IpHdr, PortSpace};
use crate::mad::{MAD_LEN, QP1_QKEY};
use crate::msg::{rej_reason, sidr_status, Path, TransportType};

/// Receive buffers of the GSI QP.
const RECV_SLOTS: usize = 64;
/// Send buffers of the GSI QP.
const SEND_SLOTS: usize = 64;
/// Bytes per buffer: the 40-byte GRH area and the MAD, rounded up.
const SLOT: usize = 512;
/// The GRH area at the head of every UD receive.
const GRH: usize = 40;
/// `wr_id`s of sends are offset by this (receives are their slot).
const SEND_TAG: u64 = 1 << 32;
/// The first ephemeral port of active connections.
const EPHEMERAL: u16 = 0x9c40;
/// The hop limit rdma_cm puts in the path of a routed RoCEv2 connection (Linux
/// `cma_resolve_iboe_route`: the route's `ip4_dst_hoplimit`, 64 by default).
pub const HOP_LIMIT: u8 = 64;

/// A peer's GSI QP: its GID and MAC address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Peer {
    /// The RoCEv2 GID (`::ffff:a.b.c.d`).
    pub gid: [u8; 16],
    /// Its MAC address.
    pub mac: [u8; 6],
}

/// What a connection asks for or answers with (rdma_cm's `rdma_conn_param`).
#[derive(Clone, Debug)]
pub struct ConnParam {
    /// RDMA READs/atomics accepted as responder (`responder_resources`).
    pub responder_resources: u8,
    /// RDMA READs/atomics issued at once (`initiator_depth`).
    pub initiator_depth: u8,
    /// Transport retries (at most 7).
    pub retry_count: u8,
    /// RNR retries (7: infinite).
    pub rnr_retry_count: u8,
    /// Private data: at most 56 bytes in a connect (after the 36-byte IP header),
    /// 196 in an accept, 148 in a reject.
    pub private_data: Vec<u8>,
}

impl Default for ConnParam {
    /// One READ/atomic each way, 7 retries and infinite RNR retries, no private data
    /// (librdmacm's defaults for a NULL `conn_param`, with rping's depths).
    fn default() -> Self {
        ConnParam {
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            private_data: Vec::new(),
        }
    }
}

/// The attributes of one transition of a connection's QP, as `rdma_init_qp_attr`
/// gives them (Linux `cm_init_qp_init_attr`, `cm_init_qp_rtr_attr`,
/// `cm_init_qp_rts_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpTransitionAttr {
    /// To INIT: port, P_Key index 0, access flags.
    Init {
        /// The port.
        port: u8,
        /// Remote write, and read and atomics when the connection has responder
        /// resources.
        access: AccessFlags,
    },
    /// To RTR.
    Rtr {
        /// The peer.
        peer: Peer,
        /// The GID index of this side's address.
        sgid_index: u8,
        /// The path MTU code (1 = 256 ... 5 = 4096).
        path_mtu: u8,
        /// The peer's QP.
        dest_qpn: u32,
        /// The first PSN expected.
        rq_psn: u32,
        /// RDMA READs/atomics accepted as responder.
        max_dest_rd_atomic: u8,
        /// The RNR NAK timer code.
        min_rnr_timer: u8,
    },
    /// To RTS.
    Rts {
        /// The first PSN sent.
        sq_psn: u32,
        /// The local ACK time-out exponent.
        timeout: u8,
        /// Transport retries.
        retry_cnt: u8,
        /// RNR retries.
        rnr_retry: u8,
        /// RDMA READs/atomics issued at once.
        max_rd_atomic: u8,
    },
}

/// What happened, for the application (rdma_cm's events).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmEvent {
    /// A connection request to a listened address (`RDMA_CM_EVENT_CONNECT_REQUEST`).
    ConnectRequest {
        /// The new connection: [`Service::accept`] or [`Service::reject`] it.
        id: ConnId,
        /// The active side's address and port.
        peer: SocketAddr,
        /// The listened address it asked for.
        local: SocketAddr,
        /// Its private data (56 bytes, zero-padded).
        private_data: Vec<u8>,
        /// RDMA READs/atomics the peer will issue: this side's responder resources.
        responder_resources: u8,
        /// RDMA READs/atomics the peer accepts: this side's initiator depth.
        initiator_depth: u8,
    },
    /// The REP arrived: call [`Service::establish`] with the QP
    /// (`RDMA_CM_EVENT_CONNECT_RESPONSE`).
    ConnectResponse {
        /// The connection.
        id: ConnId,
        /// The passive side's private data (196 bytes, zero-padded).
        private_data: Vec<u8>,
    },
    /// Connected (`RDMA_CM_EVENT_ESTABLISHED`).
    Established {
        /// The connection.
        id: ConnId,
    },
    /// Rejected (`RDMA_CM_EVENT_REJECTED`); `reason` 8: nobody listens there, 28: the
    /// peer's application said no.
    Rejected {
        /// The connection.
        id: ConnId,
        /// The REJ reason.
        reason: u16,
        /// Its private data (148 bytes, zero-padded).
        private_data: Vec<u8>,
    },
    /// No answer (`RDMA_CM_EVENT_UNREACHABLE`, `-ETIMEDOUT`).
    Unreachable {
        /// The connection.
        id: ConnId,
    },
    /// The connection went down (`RDMA_CM_EVENT_DISCONNECTED`); answer with
    /// [`Service::disconnect`] if the peer asked.
    Disconnected {
        /// The connection.
        id: ConnId,
    },
    /// TimeWait ended: the QP may be reused (`RDMA_CM_EVENT_TIMEWAIT_EXIT`).
    TimewaitExit {
        /// The connection.
        id: ConnId,
    },
    /// A UD service request (SIDR): answer with [`Service::sidr_accept`] or
    /// [`Service::reject_sidr`].
    SidrRequest {
        /// The exchange.
        id: ConnId,
        /// The requester's address and port.
        peer: SocketAddr,
        /// The listened address it asked for.
        local: SocketAddr,
        /// Its private data (180 bytes, zero-padded).
        private_data: Vec<u8>,
    },
    /// A UD service resolved: send to `qpn` with `qkey` (`RDMA_CM_EVENT_ESTABLISHED`
    /// on a UD id), or the status saying why not (`RDMA_CM_EVENT_UNREACHABLE`).
    SidrResolved {
        /// The exchange.
        id: ConnId,
        /// The SIDR status (0: found).
        status: u8,
        /// The service's UD QP.
        qpn: u32,
        /// Its Q_Key.
        qkey: u32,
        /// The peer: its GID and MAC, for the address handle.
        peer: Peer,
    },
}

/// What the service could not do.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The CM refused (unknown connection, wrong state, private data too long, ...).
    #[error(transparent)]
    Cm(#[from] CmError),
    /// A verbs call failed.
    #[error(transparent)]
    Verbs(#[from] ferroverbs::verbs::Error),
    /// A device query failed.
    #[error(transparent)]
    Device(#[from] ferroverbs::Error),
    /// No MAC address is known for the destination (`RDMA_CM_EVENT_ADDR_ERROR`).
    #[error("no route to {0}: its MAC address is unknown")]
    NoRoute(IpAddr),
    /// Only IPv4 is implemented.
    #[error("{0}: only IPv4 addresses are supported")]
    NotIpv4(IpAddr),
    /// The QP1 refused a work request.
    #[error("the QP1 refused a work request: {0}")]
    Post(#[from] ferroverbs::verbs::BadWr),
    /// The connection is of another kind (for example a SIDR exchange).
    #[error("connection {0:?} is not an RC or UC connection of this service")]
    NotAConnection(ConnId),
}

/// What the service keeps of a connection beyond the engine.
#[derive(Clone, Copy, Debug)]
struct IdInfo {
    peer: Peer,
    transport: TransportType,
    /// The first PSN this side advertises (chosen at connect, or when the request
    /// arrived, so that the attributes of RTR are known before the REP).
    psn: u32,
}

/// Counters of the service.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServiceStats {
    /// MADs received.
    pub mads_in: u64,
    /// MADs sent.
    pub mads_out: u64,
    /// MADs received that were not valid CM MADs (dropped): the sum of `dropped`.
    pub bad_mads: u64,
    /// Those drops by reason.
    pub dropped: DropCounts,
    /// Completions of the GSI QP in error.
    pub gsi_errors: u64,
}

/// MADs dropped, by reason (the parser's [`crate::Error`], and what comes before it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropCounts {
    /// Shorter than a MAD (the datagram, or a structure in it).
    pub truncated: u64,
    /// A MAD base version other than 1.
    pub base_version: u64,
    /// Another management class than the CM's.
    pub not_cm: u64,
    /// A CM class version other than 2.
    pub class_version: u64,
    /// A method other than Send.
    pub method: u64,
    /// An attribute that is no CM message.
    pub unknown_attribute: u64,
    /// A field out of its range.
    pub field: u64,
    /// From an address no route leads back to.
    pub no_route: u64,
}

impl DropCounts {
    fn count(&mut self, e: &crate::Error) {
        use crate::Error as E;
        *match e {
            E::Truncated { .. } => &mut self.truncated,
            E::BaseVersion(_) => &mut self.base_version,
            E::NotCm(_) => &mut self.not_cm,
            E::ClassVersion(_) => &mut self.class_version,
            E::Method(_) => &mut self.method,
            E::UnknownAttribute(_) => &mut self.unknown_attribute,
            E::Field { .. } => &mut self.field,
        } += 1;
    }
}

/// The CM service of one port (see the module documentation).
pub struct Service<'a, B: Bus> {
    pd: &'a Pd<'a, B>,
    port: u8,
    local: GidEntry,
    local_ip: Ipv4Addr,
    clock: Arc<dyn Clock>,
    resolve: Box<dyn Fn(IpAddr) -> Option<[u8; 6]> + Send + 'a>,
    chan: Option<&'a CompletionChannel<'a, B>>,
    cq: CompletionQueue<'a, B>,
    gsi: QueuePair<'a, B>,
    bufs: MemoryRegion<'a, B>,
    ahs: HashMap<Peer, AddressHandle<'a, B>>,
    free_send: Vec<usize>,
    backlog: VecDeque<Outgoing<Peer>>,
    engine: Engine<Peer>,
    events: VecDeque<CmEvent>,
    ids: HashMap<ConnId, IdInfo>,
    next_port: u16,
    psn_state: u64,
    path_mtu: Mtu,
    stats: ServiceStats,
}

impl<'a, B: Bus> Service<'a, B> {
    /// The CM on port `port` of `pd`'s device, whose GID is `local` (IPv4), with
    /// `clock` for its time-outs and `resolve` for the MAC address of an IP address
    /// (the simulator's UDP link derives it; on VFIO the host's neighbour table).
    /// `seed` makes its communication IDs and PSNs reproducible. Creates the port's
    /// QP1 and posts its receive buffers.
    pub fn new(
        pd: &'a Pd<'a, B>,
        port: u8,
        local: GidEntry,
        clock: Arc<dyn Clock>,
        resolve: impl Fn(IpAddr) -> Option<[u8; 6]> + Send + 'a,
        seed: u64,
    ) -> Result<Service<'a, B>, ServiceError> {
        Self::build(pd, None, port, local, clock, Box::new(resolve), seed)
    }

    /// [`Service::new`] with the QP1's completions on `chan`: [`Service::fd`] is
    /// then readable (`poll(2)`, epoll) when MADs arrived, so an application waits on
    /// it, with [`Service::next_deadline`] as its time-out, and calls
    /// [`Service::poll`] when it wakes (rdma_cm's event channel fd).
    pub fn with_channel(
        pd: &'a Pd<'a, B>,
        chan: &'a CompletionChannel<'a, B>,
        port: u8,
        local: GidEntry,
        clock: Arc<dyn Clock>,
        resolve: impl Fn(IpAddr) -> Option<[u8; 6]> + Send + 'a,
        seed: u64,
    ) -> Result<Service<'a, B>, ServiceError> {
        Self::build(pd, Some(chan), port, local, clock, Box::new(resolve), seed)
    }

    /// The descriptor to wait on, when made [`Service::with_channel`].
    pub fn fd(&self) -> Option<std::os::fd::RawFd> {
        self.chan.map(|c| c.fd())
    }

    fn build(
        pd: &'a Pd<'a, B>,
        chan: Option<&'a CompletionChannel<'a, B>>,
        port: u8,
        local: GidEntry,
        clock: Arc<dyn Clock>,
        resolve: Box<dyn Fn(IpAddr) -> Option<[u8; 6]> + Send + 'a>,
        seed: u64,
    ) -> Result<Service<'a, B>, ServiceError> {
        let local_ip = match ipcm::gid_to_ip(local.gid) {
            IpAddr::V4(v4) => v4,
            ip => return Err(ServiceError::NotIpv4(ip)),
        };
        let ctx = pd.context();
        let guid = ctx.query_device()?.node_guid;
        let path_mtu = ctx.query_port(port)?.active_mtu;
        let entries = (RECV_SLOTS + SEND_SLOTS) as u32;
        let mut cq = match chan {
            Some(ch) => ch.create_cq(entries)?,
            None => ctx.create_cq(entries)?,
        };
        if chan.is_some() {
            cq.req_notify(false);
        }
        let cap = QpCap {
            max_send_wr: SEND_SLOTS as u32,
            max_recv_wr: RECV_SLOTS as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let mut gsi = pd.create_qp(&QpInitAttr::gsi(&cq, &cq, cap))?;
        gsi.to_init_ud(&UdInitAttr::new(port, QP1_QKEY))?;
        gsi.to_rtr_ud()?;
        gsi.to_rts_ud(0)?;
        let bufs = pd.alloc_mr((RECV_SLOTS + SEND_SLOTS) * SLOT, AccessFlags::LOCAL_WRITE)?;
        let mut s = Service {
            pd,
            port,
            local,
            local_ip,
            clock,
            resolve,
            chan,
            cq,
            gsi,
            bufs,
            ahs: HashMap::new(),
            free_send: (0..SEND_SLOTS).rev().collect(),
            backlog: VecDeque::new(),
            engine: Engine::new(Config::rdma_cm(guid, seed)),
            events: VecDeque::new(),
            ids: HashMap::new(),
            next_port: EPHEMERAL,
            psn_state: seed ^ 0x005e_ed0f_9a1b,
            path_mtu,
            stats: ServiceStats::default(),
        };
        for slot in 0..RECV_SLOTS {
            s.post_recv(slot)?;
        }
        Ok(s)
    }

    /// The counters.
    pub fn stats(&self) -> ServiceStats {
        self.stats
    }

    /// Makes `port` the source port of the next request's IP CM header (the port of
    /// the rdma_cm id that sends it); later requests go on from the next one.
    pub fn set_next_src_port(&mut self, port: u16) {
        if port != 0 {
            self.next_port = port;
        }
    }

    /// The path MTU of the port's connections (its active MTU).
    pub fn path_mtu(&self) -> Mtu {
        self.path_mtu
    }

    /// The QP number of the port's QP1.
    pub fn gsi_qp_num(&self) -> u32 {
        self.gsi.qp_num()
    }

    /// The underlying state machines (states, negotiated attributes).
    pub fn engine(&self) -> &Engine<Peer> {
        &self.engine
    }

    fn now(&self) -> Duration {
        self.clock.now()
    }

    fn post_recv(&mut self, slot: usize) -> Result<(), ServiceError> {
        let sg = [self
            .bufs
            .sge(slot * SLOT, (GRH + MAD_LEN) as u32)
            .expect("slot within the buffer")];
        self.gsi
            .post_recv(&[RecvWr::new(slot as u64, &sg)])
            .map_err(ServiceError::from)
    }

    fn peer_of(&self, ip: IpAddr) -> Result<Peer, ServiceError> {
        let mac = (self.resolve)(ip).ok_or(ServiceError::NoRoute(ip))?;
        Ok(Peer {
            gid: ipcm::ip_to_gid(ip),
            mac,
        })
    }

    fn next_psn(&mut self) -> u32 {
        // xorshift64*: reproducible first PSNs from the seed.
        let mut x = self.psn_state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.psn_state = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40) as u32 & 0xff_ffff
    }

    /// Answers RC connection requests to `addr` (its port; the address must be this
    /// device's or unspecified).
    pub fn listen(&mut self, addr: SocketAddr) -> Result<(), ServiceError> {
        self.check_local(addr.ip())?;
        Ok(self
            .engine
            .listen(ipcm::service_id(PortSpace::Tcp, addr.port()))?)
    }

    /// [`Service::listen`] with at most `backlog` requests waiting for an accept or
    /// reject; one beyond is dropped unanswered (the peer's CM retries) and counted
    /// (`Engine::backlog_drops`), holding no memory.
    pub fn listen_backlog(&mut self, addr: SocketAddr, backlog: usize) -> Result<(), ServiceError> {
        self.check_local(addr.ip())?;
        Ok(self
            .engine
            .listen_backlog(ipcm::service_id(PortSpace::Tcp, addr.port()), backlog)?)
    }

    /// Stops answering RC connection requests to `addr`'s port (connections made
    /// stay).
    pub fn unlisten(&mut self, addr: SocketAddr) {
        self.engine
            .unlisten(ipcm::service_id(PortSpace::Tcp, addr.port()));
    }

    /// Stops answering UD service requests to `addr`'s port.
    pub fn unlisten_ud(&mut self, addr: SocketAddr) {
        self.engine
            .unlisten(ipcm::service_id(PortSpace::Udp, addr.port()));
    }

    /// Answers UD service requests (SIDR) to `addr`.
    pub fn listen_ud(&mut self, addr: SocketAddr) -> Result<(), ServiceError> {
        self.check_local(addr.ip())?;
        Ok(self
            .engine
            .listen(ipcm::service_id(PortSpace::Udp, addr.port()))?)
    }

    fn check_local(&self, ip: IpAddr) -> Result<(), ServiceError> {
        match ip {
            IpAddr::V4(v4) if v4 == self.local_ip || v4.is_unspecified() => Ok(()),
            IpAddr::V4(_) => Err(ServiceError::NoRoute(ip)),
            ip => Err(ServiceError::NotIpv4(ip)),
        }
    }

    fn ip_private_data(
        &mut self,
        dst: SocketAddr,
        user: &[u8],
        max: usize,
    ) -> Result<Vec<u8>, ServiceError> {
        if user.len() > max {
            return Err(CmError::PrivateDataTooLong {
                msg: "connection request",
                len: user.len(),
                max,
            }
            .into());
        }
        let src_port = self.next_port;
        self.next_port = self.next_port.wrapping_add(1).max(EPHEMERAL);
        let mut pd = vec![0u8; ipcm::HDR_LEN];
        IpHdr {
            src_port,
            src: self.local_ip.into(),
            dst: dst.ip(),
        }
        .emit(&mut pd)
        .map_err(|_| ServiceError::NotIpv4(dst.ip()))?;
        pd.extend_from_slice(user);
        Ok(pd)
    }

    /// Sends an RC connection request for `qp` (in RESET, or in INIT with receives
    /// posted) to `dst`. The answer comes
    /// as [`CmEvent::ConnectResponse`] (then call [`Service::establish`]),
    /// [`CmEvent::Rejected`] or [`CmEvent::Unreachable`].
    pub fn connect(
        &mut self,
        qp: &QueuePair<'_, B>,
        dst: SocketAddr,
        p: &ConnParam,
    ) -> Result<ConnId, ServiceError> {
        self.connect_qpn(qp.qp_num(), dst, p)
    }

    /// [`Service::connect`] for the QP numbered `qpn` (a QP this process's verbs do
    /// not own, such as one of rdma-core's libmlx5 behind the uAPI layer).
    pub fn connect_qpn(
        &mut self,
        qpn: u32,
        dst: SocketAddr,
        p: &ConnParam,
    ) -> Result<ConnId, ServiceError> {
        let IpAddr::V4(dst_ip) = dst.ip() else {
            return Err(ServiceError::NotIpv4(dst.ip()));
        };
        let peer = self.peer_of(dst.ip())?;
        let private_data = self.ip_private_data(dst, &p.private_data, 56)?;
        let src_port = u16::from_be_bytes([private_data[2], private_data[3]]);
        let psn = self.next_psn();
        let params = ConnectParams {
            service_id: ipcm::service_id(PortSpace::Tcp, dst.port()),
            transport: TransportType::Rc,
            local_qpn: qpn,
            starting_psn: psn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            retry_count: p.retry_count.min(7),
            rnr_retry_count: p.rnr_retry_count.min(7),
            path_mtu: self.path_mtu as u8,
            srq: false,
            path: Path {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: self.local.gid,
                remote_gid: ipcm::ip_to_gid(dst_ip.into()),
                flow_label: ipcm::roce_flow_label(src_port, dst.port()),
                packet_rate: 0,
                traffic_class: 0,
                hop_limit: HOP_LIMIT,
                sl: 0,
                subnet_local: false,
                local_ack_timeout: 0,
            },
            private_data,
        };
        let now = self.now();
        let id = self.engine.connect(now, peer, &params)?;
        self.ids.insert(
            id,
            IdInfo {
                peer,
                transport: TransportType::Rc,
                psn,
            },
        );
        self.flush();
        Ok(id)
    }

    /// The attributes of the transition of `id`'s QP to `state` (INIT, RTR or RTS),
    /// as `rdma_init_qp_attr` computes them. On the passive side they are known from
    /// the request on, before the REP; `p` (the accept's resources) applies to a
    /// passive connection not yet accepted, and is ignored otherwise.
    pub fn init_qp_attr(
        &self,
        id: ConnId,
        state: QpState,
        p: &ConnParam,
    ) -> Result<QpTransitionAttr, ServiceError> {
        let info = self.ids.get(&id).ok_or(ServiceError::NotAConnection(id))?;
        let q = match self.engine.qp_params(id) {
            Some(q) => q,
            None => self
                .engine
                .accept_qp_params(id, &self.accept_params(info, 0, p))?,
        };
        Ok(match state {
            QpState::Init => QpTransitionAttr::Init {
                port: self.port,
                // Linux `cm_init_qp_init_attr`.
                access: if q.max_dest_rd_atomic > 0 && info.transport == TransportType::Rc {
                    AccessFlags::REMOTE_WRITE
                        | AccessFlags::REMOTE_READ
                        | AccessFlags::REMOTE_ATOMIC
                } else {
                    AccessFlags::REMOTE_WRITE
                },
            },
            QpState::Rtr => QpTransitionAttr::Rtr {
                peer: info.peer,
                sgid_index: self.local.index as u8,
                path_mtu: q.path_mtu,
                dest_qpn: q.dest_qpn,
                rq_psn: q.rq_psn,
                max_dest_rd_atomic: q.max_dest_rd_atomic,
                // The shortest RNR NAK timer code (Linux leaves it to the consumer;
                // 1 is what the examples use).
                min_rnr_timer: 1,
            },
            QpState::Rts => QpTransitionAttr::Rts {
                sq_psn: q.sq_psn,
                timeout: q.timeout,
                retry_cnt: q.retry_cnt,
                rnr_retry: q.rnr_retry,
                max_rd_atomic: q.max_rd_atomic,
            },
            _ => return Err(CmError::Invalid("a connection's QP goes to INIT, RTR or RTS").into()),
        })
    }

    fn accept_params(&self, info: &IdInfo, qpn: u32, p: &ConnParam) -> AcceptParams {
        AcceptParams {
            local_qpn: qpn,
            starting_psn: info.psn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            rnr_retry_count: p.rnr_retry_count.min(7),
            srq: false,
            private_data: p.private_data.clone(),
        }
    }

    /// Takes `qp` (in RESET or INIT) through INIT, RTR and RTS with what `id`
    /// negotiated ([`Service::init_qp_attr`]).
    fn qp_to_rts(
        &self,
        id: ConnId,
        qp: &mut QueuePair<'_, B>,
        p: &ConnParam,
    ) -> Result<(), ServiceError> {
        if let QpTransitionAttr::Init { port, access } = self.init_qp_attr(id, QpState::Init, p)? {
            // A QP in RESET goes to INIT here; one already in INIT (receives posted
            // before connecting, as rdma_create_qp leaves it) takes the CM's values
            // by INIT to INIT (Linux `cma_modify_qp_rtr`).
            if qp.state() == QpState::Init {
                qp.modify(
                    QpState::Init,
                    &QpAttr::new().port(port).pkey_index(0).access(access),
                )?;
            } else {
                qp.to_init(port, access)?;
            }
        }
        if let QpTransitionAttr::Rtr {
            peer,
            sgid_index,
            path_mtu,
            dest_qpn,
            rq_psn,
            max_dest_rd_atomic,
            min_rnr_timer,
        } = self.init_qp_attr(id, QpState::Rtr, p)?
        {
            qp.to_rtr(&RtrAttr {
                av: AddressVector::new(peer.gid, peer.mac, sgid_index),
                path_mtu: Mtu::from_ib(path_mtu.into()).unwrap_or(Mtu::Mtu1024),
                dest_qpn,
                rq_psn,
                max_dest_rd_atomic,
                min_rnr_timer,
            })?;
        }
        if let QpTransitionAttr::Rts {
            sq_psn,
            timeout,
            retry_cnt,
            rnr_retry,
            max_rd_atomic,
        } = self.init_qp_attr(id, QpState::Rts, p)?
        {
            qp.to_rts(&RtsAttr {
                sq_psn,
                timeout,
                retry_cnt,
                rnr_retry,
                max_rd_atomic,
            })?;
        }
        Ok(())
    }

    /// Active: after [`CmEvent::ConnectResponse`], takes `qp` to RTS with the
    /// negotiated attributes and sends the RTU; [`CmEvent::Established`] follows.
    pub fn establish(&mut self, id: ConnId, qp: &mut QueuePair<'_, B>) -> Result<(), ServiceError> {
        if let Err(e) = self.qp_to_rts(id, qp, &ConnParam::default()) {
            // As rdma_cm: a QP that cannot be connected rejects the REP.
            let _ = self.engine.reject(id, rej_reason::CONSUMER_DEFINED, &[]);
            self.flush();
            return Err(e);
        }
        self.establish_rtu(id)
    }

    /// Active: sends the RTU of `id` once its QP is in RTS (moved by someone else:
    /// librdmacm's `ucma_process_conn_resp` behind the uAPI layer);
    /// [`CmEvent::Established`] follows.
    pub fn establish_rtu(&mut self, id: ConnId) -> Result<(), ServiceError> {
        self.engine.establish(id)?;
        self.flush();
        self.pump_events();
        Ok(())
    }

    /// Passive: takes `qp` (in RESET or INIT) to RTS with what the request and `p`
    /// negotiate and answers with a REP; [`CmEvent::Established`] follows the RTU.
    pub fn accept(
        &mut self,
        id: ConnId,
        qp: &mut QueuePair<'_, B>,
        p: &ConnParam,
    ) -> Result<(), ServiceError> {
        if let Err(e) = self.qp_to_rts(id, qp, p) {
            let _ = self.engine.reject(id, rej_reason::CONSUMER_DEFINED, &[]);
            self.flush();
            return Err(e);
        }
        self.accept_qpn(id, qp.qp_num(), p)
    }

    /// Passive: answers the request of `id` with a REP for the QP numbered `qpn`,
    /// already in RTS with [`Service::init_qp_attr`]'s attributes (rdma_accept's order).
    pub fn accept_qpn(&mut self, id: ConnId, qpn: u32, p: &ConnParam) -> Result<(), ServiceError> {
        let info = self.ids.get(&id).ok_or(ServiceError::NotAConnection(id))?;
        let ap = self.accept_params(info, qpn, p);
        let now = self.now();
        self.engine.accept(now, id, &ap)?;
        self.flush();
        Ok(())
    }

    /// Rejects a connection request (or a REP) with `private_data` (REJ reason 28,
    /// consumer defined, as `rdma_reject`).
    pub fn reject(&mut self, id: ConnId, private_data: &[u8]) -> Result<(), ServiceError> {
        self.engine
            .reject(id, rej_reason::CONSUMER_DEFINED, private_data)?;
        self.flush();
        Ok(())
    }

    /// Disconnects: moves `qp` to the error state (as `rdma_disconnect`) and sends a
    /// DREQ, or answers the peer's with a DREP.
    pub fn disconnect(
        &mut self,
        id: ConnId,
        qp: Option<&mut QueuePair<'_, B>>,
    ) -> Result<(), ServiceError> {
        if let Some(qp) = qp {
            qp.to_error()?;
        }
        let now = self.now();
        self.engine.disconnect(now, id)?;
        self.flush();
        Ok(())
    }

    /// Forgets `id` (taking a live connection down as `rdma_destroy_id` does).
    pub fn destroy(&mut self, id: ConnId) -> Result<(), ServiceError> {
        let now = self.now();
        self.engine.destroy(now, id)?;
        self.ids.remove(&id);
        self.flush();
        Ok(())
    }

    /// Asks `dst` for its UD service (SIDR); [`CmEvent::SidrResolved`] answers.
    pub fn resolve_ud(
        &mut self,
        dst: SocketAddr,
        private_data: &[u8],
    ) -> Result<ConnId, ServiceError> {
        let peer = self.peer_of(dst.ip())?;
        let pd = self.ip_private_data(dst, private_data, 180)?;
        let now = self.now();
        let id = self.engine.sidr_request(
            now,
            peer,
            ipcm::service_id(PortSpace::Udp, dst.port()),
            &pd,
        )?;
        self.ids.insert(
            id,
            IdInfo {
                peer,
                transport: TransportType::Rc,
                psn: 0,
            },
        );
        self.flush();
        Ok(id)
    }

    /// Answers a [`CmEvent::SidrRequest`] with the UD QP `qpn` and its `qkey`.
    pub fn sidr_accept(
        &mut self,
        id: ConnId,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), ServiceError> {
        self.engine
            .sidr_reply(id, sidr_status::SUCCESS, qpn, qkey, private_data)?;
        self.flush();
        Ok(())
    }

    /// Refuses a [`CmEvent::SidrRequest`].
    pub fn reject_sidr(&mut self, id: ConnId) -> Result<(), ServiceError> {
        self.engine.sidr_reply(id, sidr_status::REJECT, 0, 0, &[])?;
        self.flush();
        Ok(())
    }

    /// The next event, if any (call [`Service::poll`] to make progress).
    pub fn next_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// Does the work due: takes the MADs the QP1 received to the state machines,
    /// runs the timers that are due, sends what they produced. Returns the MADs
    /// handled (received and sent).
    pub fn poll(&mut self) -> usize {
        let mut work = 0;
        if let Some(ch) = self.chan {
            // The verbs pattern: take the events, empty the CQ, arm, then empty it
            // again, so that a MAD arriving after the last look wakes the
            // descriptor and none waits unseen.
            let mut n = 0;
            while ch.try_get_cq_event().is_some() {
                n += 1;
            }
            if n > 0 {
                ch.ack_cq_events(&mut self.cq, n);
            }
            work += self.take_completions();
            self.cq.req_notify(false);
        }
        work += self.take_completions();
        let now = self.now();
        self.engine.on_timers(now);
        work += self.flush();
        self.pump_events();
        work
    }

    /// Takes the QP1's completions: receives to the state machines (and posted
    /// again), sends' buffers back. Returns the MADs received.
    fn take_completions(&mut self) -> usize {
        let mut work = 0;
        while let Some(wc) = self.cq.poll_one() {
            if wc.wr_id >= SEND_TAG {
                self.free_send.push((wc.wr_id - SEND_TAG) as usize);
                if !wc.is_ok() {
                    self.stats.gsi_errors += 1;
                }
                continue;
            }
            let slot = wc.wr_id as usize;
            let short = (wc.byte_len as usize) < GRH + MAD_LEN;
            if wc.is_ok() && wc.opcode == WcOpcode::Recv && short {
                // A UD datagram shorter than a MAD (IBTA 13.4.1: MADs are 256 bytes).
                self.stats.bad_mads += 1;
                self.stats.dropped.truncated += 1;
                work += 1;
            } else if wc.is_ok() && wc.opcode == WcOpcode::Recv {
                let mut b = [0u8; GRH + MAD_LEN];
                self.bufs.read(slot * SLOT, &mut b);
                // RoCEv2 over IPv4: the IPv4 header in the last 20 bytes of the GRH
                // area, its source address at 12..16 of it.
                let src = Ipv4Addr::new(b[32], b[33], b[34], b[35]);
                let now = self.now();
                match self.peer_of(src.into()) {
                    Ok(peer) => {
                        self.stats.mads_in += 1;
                        if let Err(e) = self.engine.receive(now, peer, &b[GRH..]) {
                            self.stats.bad_mads += 1;
                            self.stats.dropped.count(&e);
                        }
                    }
                    Err(_) => {
                        self.stats.bad_mads += 1;
                        self.stats.dropped.no_route += 1;
                    }
                }
                work += 1;
            } else if !wc.is_ok() {
                self.stats.gsi_errors += 1;
            }
            // A receive that cannot be posted again leaves one buffer fewer; the
            // GSI QP in error is counted above.
            let _ = self.post_recv(slot);
        }
        work
    }

    /// Whether every MAD handed to QP1 has completed (none waits for a send buffer
    /// or on the wire): a process about to exit polls until then.
    pub fn sends_done(&self) -> bool {
        self.backlog.is_empty() && self.free_send.len() == SEND_SLOTS
    }

    /// When the earliest time-out is due (on the service's clock).
    pub fn next_deadline(&mut self) -> Option<Duration> {
        self.engine.next_deadline()
    }

    /// Sends what the engine produced, as far as send buffers allow.
    fn flush(&mut self) -> usize {
        while let Some(o) = self.engine.poll_transmit() {
            self.backlog.push_back(o);
        }
        let mut sent = 0;
        while let Some(slot) = self.free_send.pop() {
            let Some(o) = self.backlog.pop_front() else {
                self.free_send.push(slot);
                break;
            };
            if self.send(slot, &o).is_err() {
                self.free_send.push(slot);
                self.stats.gsi_errors += 1;
                continue;
            }
            sent += 1;
        }
        sent
    }

    fn send(&mut self, slot: usize, o: &Outgoing<Peer>) -> Result<(), ServiceError> {
        if !self.ahs.contains_key(&o.to) {
            let ah = self.pd.create_ah(
                self.port,
                &AddressVector::new(o.to.gid, o.to.mac, self.local.index as u8),
            )?;
            self.ahs.insert(o.to, ah);
        }
        let off = (RECV_SLOTS + slot) * SLOT;
        self.bufs.write(off, &o.mad.to_bytes());
        let sg = [self
            .bufs
            .sge(off, MAD_LEN as u32)
            .expect("slot within the buffer")];
        let ah = &self.ahs[&o.to];
        self.gsi
            .post_send(&[SendWr::send(SEND_TAG + slot as u64, &sg)
                .ud(ah, crate::mad::GSI_QPN, QP1_QKEY)
                .signaled()])?;
        self.stats.mads_out += 1;
        Ok(())
    }

    /// Turns the engine's events into the application's.
    fn pump_events(&mut self) {
        while let Some(e) = self.engine.poll_event() {
            let ev = match e {
                Event::ConnectRequest { id, from, req } => {
                    // The RDMA IP CM header (Annex A11): a bad one, or one for
                    // another address, is rejected as Linux's rdma_cm does (REJ 28).
                    let hdr = IpHdr::parse(&req.private_data);
                    let ok = matches!(&hdr, Ok(h) if h.dst == IpAddr::V4(self.local_ip));
                    let (Ok(h), true) = (hdr, ok) else {
                        let _ = self.engine.reject(id, rej_reason::CONSUMER_DEFINED, &[]);
                        continue;
                    };
                    let transport = req.transport;
                    let psn = self.next_psn();
                    self.ids.insert(
                        id,
                        IdInfo {
                            peer: from,
                            transport,
                            psn,
                        },
                    );
                    CmEvent::ConnectRequest {
                        id,
                        peer: SocketAddr::new(h.src, h.src_port),
                        local: SocketAddr::new(h.dst, req.service_id as u16),
                        private_data: req.private_data[ipcm::HDR_LEN..].to_vec(),
                        // As Linux reports them to the passive side: swapped.
                        responder_resources: req.initiator_depth,
                        initiator_depth: req.responder_resources,
                    }
                }
                Event::ConnectResponse { id, rep } => CmEvent::ConnectResponse {
                    id,
                    private_data: rep.private_data.to_vec(),
                },
                Event::Established { id } => CmEvent::Established { id },
                Event::Rejected { id, rej } => CmEvent::Rejected {
                    id,
                    reason: rej.reason,
                    private_data: rej.private_data.to_vec(),
                },
                Event::Unreachable { id } => CmEvent::Unreachable { id },
                Event::Disconnected { id } => CmEvent::Disconnected { id },
                Event::TimewaitExit { id } => CmEvent::TimewaitExit { id },
                Event::SidrRequest { id, from, req } => {
                    let Ok(h) = IpHdr::parse(&req.private_data) else {
                        let _ = self.engine.sidr_reply(id, sidr_status::REJECT, 0, 0, &[]);
                        continue;
                    };
                    self.ids.insert(
                        id,
                        IdInfo {
                            peer: from,
                            transport: TransportType::Rc,
                            psn: 0,
                        },
                    );
                    CmEvent::SidrRequest {
                        id,
                        peer: SocketAddr::new(h.src, h.src_port),
                        local: SocketAddr::new(h.dst, req.service_id as u16),
                        private_data: req.private_data[ipcm::HDR_LEN..].to_vec(),
                    }
                }
                Event::SidrResolved { id, rep } => CmEvent::SidrResolved {
                    id,
                    status: rep.status,
                    qpn: rep.qpn,
                    qkey: rep.qkey,
                    peer: self.ids.get(&id).map(|i| i.peer).unwrap_or(Peer {
                        gid: [0; 16],
                        mac: [0; 6],
                    }),
                },
            };
            self.events.push_back(ev);
        }
        // Answers the engine produced while translating (rejections).
        while let Some(o) = self.engine.poll_transmit() {
            self.backlog.push_back(o);
        }
    }
}

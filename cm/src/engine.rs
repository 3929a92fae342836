//! The CM's connection state machines (IBTA Vol. 1 12.9; the states, answers to
//! duplicates and time-outs as Linux's `drivers/infiniband/core/cm.c` implements them),
//! without I/O: the caller feeds received MADs and the time in, and takes MADs to
//! send and events out. `A` is whatever the caller uses to address a peer's GSI QP
//! (for RoCEv2: its GID and MAC); answers to a received MAD go back to its sender.
//!
//! Every wait is a timer with a bounded number of retransmissions: a REQ, REP, DREQ
//! or SIDR_REQ is sent again every time-out until answered or out of retries, then
//! the connection fails with [`Event::Unreachable`] (or, for a DREQ, ends its
//! disconnection).

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::time::Duration;

use ferroverbs_timer::Timers;

use crate::mad::DEFAULT_PKEY;
use crate::msg::{
    apr_status, private_len, rej_reason, sidr_status, Drep, Dreq, Message, Mra, MsgKind, Path, Rej,
    Rep, Req, Rtu, SidrRep, SidrReq, TransportType,
};
use crate::time::{self, conv};
use crate::CmMad;

/// A connection's (or SIDR exchange's) local communication ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u32);

/// The states of a connection (Linux `enum ib_cm_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// No exchange (after a rejection, a failure or TimeWait).
    Idle,
    /// Active: REQ sent, waiting for REP.
    ReqSent,
    /// Active: the peer sent an MRA for the REQ: waiting longer.
    MraReqRcvd,
    /// Passive: REQ received and reported; the application decides (Linux's rdma_cm
    /// state, which answers a duplicate REQ with an MRA).
    MraReqSent,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Passive: the peer sent an MRA for the REP.
    MraRepRcvd,
    /// Active: REP received and reported; the application moves its QP to RTS and
    /// calls [`Engine::establish`].
    RepRcvd,
    /// Connected.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// DREQ received and reported; [`Engine::disconnect`] answers it.
    DreqRcvd,
    /// Disconnected, waiting out stray packets before the QP may be reused.
    TimeWait,
    /// Active SIDR: SIDR_REQ sent.
    SidrReqSent,
    /// Passive SIDR: SIDR_REQ received and reported.
    SidrReqRcvd,
}

/// The CM's own settings.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// The CA (node) GUID of this device.
    pub local_ca_guid: u64,
    /// The seed of the communication IDs (the same seed gives the same IDs).
    pub seed: u64,
    /// The CA's ACK delay exponent (the REP's Target ACK Delay).
    pub ca_ack_delay: u8,
    /// The path's packet life time exponent (rdma_cm on RoCE: 16).
    pub packet_life_time: u8,
    /// The CM response time-out exponent this side advertises (rdma_cm: 20).
    pub response_timeout: u8,
    /// Retransmissions of a REQ, REP, DREQ or SIDR_REQ (rdma_cm: 15).
    pub max_cm_retries: u8,
}

impl Config {
    /// rdma_cm's values on RoCE for a device with CA GUID `guid`: packet life time 16,
    /// response time-out 20, 15 retries, ACK delay 15 (Linux `cma.c` constants).
    pub fn rdma_cm(guid: u64, seed: u64) -> Config {
        Config {
            local_ca_guid: guid,
            seed,
            ca_ack_delay: 15,
            packet_life_time: time::CMA_IBOE_PACKET_LIFETIME,
            response_timeout: time::CMA_CM_RESPONSE_TIMEOUT,
            max_cm_retries: time::CMA_MAX_CM_RETRIES,
        }
    }
}

/// What the active side asks for in its REQ.
#[derive(Clone, Debug)]
pub struct ConnectParams {
    /// The service (RDMA IP CM: [`crate::ipcm::service_id`]).
    pub service_id: u64,
    /// RC or UC.
    pub transport: TransportType,
    /// The local QP.
    pub local_qpn: u32,
    /// Its first PSN.
    pub starting_psn: u32,
    /// RDMA READs/atomics accepted as responder.
    pub responder_resources: u8,
    /// RDMA READs/atomics issued at once.
    pub initiator_depth: u8,
    /// Transport retries (at most 7).
    pub retry_count: u8,
    /// RNR retries (at most 7; 7 is infinite).
    pub rnr_retry_count: u8,
    /// The path MTU code (1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    /// The QP takes its receives from an SRQ.
    pub srq: bool,
    /// The primary path (GIDs, flow label, traffic class, hop limit, SL); its local
    /// ACK time-out is computed from the device's ACK delay and packet life time.
    pub path: Path,
    /// Private data (at most 92 bytes; RDMA IP CM: the IP header, then 56 bytes).
    pub private_data: Vec<u8>,
}

/// What the passive side answers in its REP.
#[derive(Clone, Debug)]
pub struct AcceptParams {
    /// The local QP.
    pub local_qpn: u32,
    /// Its first PSN.
    pub starting_psn: u32,
    /// RDMA READs/atomics accepted as responder.
    pub responder_resources: u8,
    /// RDMA READs/atomics issued at once.
    pub initiator_depth: u8,
    /// RNR retries the peer's requester uses (at most 7).
    pub rnr_retry_count: u8,
    /// The QP takes its receives from an SRQ.
    pub srq: bool,
    /// Private data (at most 196 bytes).
    pub private_data: Vec<u8>,
}

/// The QP attributes a connection negotiated, as `rdma_init_qp_attr` computes them
/// for RTR and RTS (Linux `cm_init_qp_rtr_attr`, `cm_init_qp_rts_attr`; note the
/// swaps: this side's READ/atomic depth as responder is the peer's initiator depth).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpParams {
    /// The peer's QP.
    pub dest_qpn: u32,
    /// The first PSN this side expects (its own advertised PSN).
    pub rq_psn: u32,
    /// The first PSN this side sends (the peer's advertised PSN).
    pub sq_psn: u32,
    /// The path MTU code.
    pub path_mtu: u8,
    /// RDMA READs/atomics this side accepts as responder.
    pub max_dest_rd_atomic: u8,
    /// RDMA READs/atomics this side issues.
    pub max_rd_atomic: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// The local ACK time-out exponent.
    pub timeout: u8,
}

/// What happened, for the application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event<A> {
    /// Passive: a REQ for a listened service.
    ConnectRequest {
        /// The new connection.
        id: ConnId,
        /// Where it came from.
        from: A,
        /// The REQ.
        req: Box<Req>,
    },
    /// Active: the REP (call [`Engine::establish`] once the QP is in RTS).
    ConnectResponse {
        /// The connection.
        id: ConnId,
        /// The REP.
        rep: Box<Rep>,
    },
    /// Connected (passive: RTU received; active: RTU sent).
    Established {
        /// The connection.
        id: ConnId,
    },
    /// The peer rejected the REQ or REP, or the connection.
    Rejected {
        /// The connection.
        id: ConnId,
        /// The REJ.
        rej: Box<Rej>,
    },
    /// No answer after every retransmission (`-ETIMEDOUT` in rdma_cm).
    Unreachable {
        /// The connection.
        id: ConnId,
    },
    /// The connection is going down (DREQ received, DREP received, or no DREP).
    Disconnected {
        /// The connection.
        id: ConnId,
    },
    /// TimeWait ended: the QP may be reused.
    TimewaitExit {
        /// The connection.
        id: ConnId,
    },
    /// Passive: a SIDR_REQ for a listened service.
    SidrRequest {
        /// The exchange.
        id: ConnId,
        /// Where it came from.
        from: A,
        /// The SIDR_REQ.
        req: Box<SidrReq>,
    },
    /// Active: the SIDR_REP (its status says whether the service was found).
    SidrResolved {
        /// The exchange.
        id: ConnId,
        /// The SIDR_REP.
        rep: Box<SidrRep>,
    },
}

/// A MAD to send to a peer's GSI QP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outgoing<A> {
    /// The peer.
    pub to: A,
    /// The MAD.
    pub mad: CmMad,
}

/// What the application asked that the CM cannot do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    /// No such connection.
    #[error("no connection {0:?}")]
    UnknownId(ConnId),
    /// The operation is not allowed in the connection's state.
    #[error("{op} on connection {id:?} in state {state:?}")]
    InvalidState {
        /// The connection.
        id: ConnId,
        /// Its state.
        state: State,
        /// The operation.
        op: &'static str,
    },
    /// Someone already listens on the service.
    #[error("service {0:#018x} is already listened on")]
    AddrInUse(u64),
    /// More private data than the message carries.
    #[error("{len} bytes of private data, at most {max} in a {msg}")]
    PrivateDataTooLong {
        /// The message.
        msg: &'static str,
        /// The length given.
        len: usize,
        /// The most the message carries.
        max: usize,
    },
    /// A value out of range.
    #[error("{0}")]
    Invalid(&'static str),
}

struct Conn<A> {
    state: State,
    peer: A,
    remote_comm_id: u32,
    remote_ca_guid: u64,
    local_qpn: u32,
    remote_qpn: u32,
    tid: u64,
    /// The MAD the timer retransmits.
    sent: Option<CmMad>,
    retries_left: u8,
    timeout: Duration,
    params: Option<QpParams>,
    /// The DREQ's TID this side answers with its DREP.
    dreq_tid: u64,
    /// Disconnected was reported (rdma_cm reports it once).
    disconnected: bool,
    /// The application destroyed the connection: no more events, removed at Idle.
    destroyed: bool,
    /// The RTU sent (resent on a duplicate REP).
    rtu: Option<CmMad>,
}

/// The largest listen backlog: Linux's `ucma` default `max_backlog`
/// (`/proc/sys/net/rdma_ucm/max_backlog`).
pub const MAX_BACKLOG: usize = 1024;

/// `t` in nanoseconds, the unit of the timers (saturating: 584 years).
fn nanos(t: Duration) -> u64 {
    u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)
}

/// One device's CM: listeners, connections, timers (see the module documentation).
pub struct Engine<A> {
    cfg: Config,
    conns: HashMap<u32, Conn<A>>,
    /// (peer CA GUID, peer's comm ID) → local ID: duplicate REQs.
    by_remote: HashMap<(u64, u32), u32>,
    /// (peer CA GUID, peer QPN) → local ID: stale connections.
    by_remote_qpn: HashMap<(u64, u32), u32>,
    /// (peer, request ID) → local ID: duplicate SIDR_REQs.
    sidr_by_remote: HashMap<(A, u32), u32>,
    /// Listened service IDs and their backlogs.
    listeners: HashMap<u64, usize>,
    /// REQs dropped unanswered because their listener's backlog was full.
    backlog_drops: u64,
    /// One timer per connection, keyed by local communication ID, deadlines in
    /// nanoseconds of the clock `now` is read from.
    timers: Timers,
    outbox: std::collections::VecDeque<Outgoing<A>>,
    events: std::collections::VecDeque<Event<A>>,
    id_counter: u32,
    id_operand: u32,
    hi_tid: u32,
}

/// splitmix64: the IDs' generator from the seed.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn pd<const N: usize>(msg: &'static str, data: &[u8]) -> Result<[u8; N], CmError> {
    if data.len() > N {
        return Err(CmError::PrivateDataTooLong {
            msg,
            len: data.len(),
            max: N,
        });
    }
    let mut a = [0u8; N];
    a[..data.len()].copy_from_slice(data);
    Ok(a)
}

impl<A: Clone + Eq + Hash + Debug> Engine<A> {
    /// An engine with no listener and no connection.
    pub fn new(cfg: Config) -> Engine<A> {
        let r = mix(cfg.seed);
        Engine {
            cfg,
            conns: HashMap::new(),
            by_remote: HashMap::new(),
            by_remote_qpn: HashMap::new(),
            sidr_by_remote: HashMap::new(),
            listeners: HashMap::new(),
            backlog_drops: 0,
            timers: Timers::new(),
            outbox: Default::default(),
            events: Default::default(),
            id_counter: 0,
            // Linux: the cyclic index XOR a random operand drawn at load
            // (`cm_alloc_id_priv`); here drawn from the seed.
            id_operand: r as u32,
            hi_tid: ((r >> 32) as u32) | 1,
        }
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    fn alloc_id(&mut self) -> u32 {
        loop {
            self.id_counter = self.id_counter.wrapping_add(1);
            let id = self.id_counter ^ self.id_operand;
            if id != 0 && !self.conns.contains_key(&id) {
                return id;
            }
        }
    }

    /// A new transaction ID for a message that starts an exchange: this engine's
    /// high half, the comm ID in the low half (Linux `cm_form_tid`).
    fn new_tid(&self, id: u32) -> u64 {
        (u64::from(self.hi_tid) << 32) | u64::from(id)
    }

    /// Starts answering REQs and SIDR_REQs for `service_id`.
    pub fn listen(&mut self, service_id: u64) -> Result<(), CmError> {
        self.listen_backlog(service_id, MAX_BACKLOG)
    }

    /// [`Engine::listen`] with at most `backlog` requests waiting for the
    /// application's accept or reject (0 or more than [`MAX_BACKLOG`]: that
    /// maximum, as Linux's `ucma_listen` clamps it). A REQ beyond it is dropped
    /// unanswered and counted ([`Engine::backlog_drops`]), so that the peer's
    /// retries may find room later (Linux `cm_destroy_id` on the `-ENOMEM` of a full
    /// backlog: "do not reject to allow future retries"); it costs no state here.
    pub fn listen_backlog(&mut self, service_id: u64, backlog: usize) -> Result<(), CmError> {
        if self.listeners.contains_key(&service_id) {
            return Err(CmError::AddrInUse(service_id));
        }
        let b = if backlog == 0 || backlog > MAX_BACKLOG {
            MAX_BACKLOG
        } else {
            backlog
        };
        self.listeners.insert(service_id, b);
        Ok(())
    }

    /// REQs dropped because their listener's backlog was full.
    pub fn backlog_drops(&self) -> u64 {
        self.backlog_drops
    }

    /// Requests to `service_id` the application has not answered yet.
    fn waiting(&self, service_id: u64) -> usize {
        self.conns
            .values()
            .filter(|c| {
                c.state == State::MraReqSent
                    && matches!(&c.sent, Some(CmMad { msg: Message::Req(r), .. }) if r.service_id == service_id)
            })
            .count()
    }

    /// Stops listening on `service_id` (connections already made stay).
    pub fn unlisten(&mut self, service_id: u64) {
        self.listeners.remove(&service_id);
    }

    /// The state of `id`.
    pub fn state(&self, id: ConnId) -> Option<State> {
        self.conns.get(&id.0).map(|c| c.state)
    }

    /// The QP attributes `id` negotiated (once the REP is sent or received).
    pub fn qp_params(&self, id: ConnId) -> Option<QpParams> {
        self.conns.get(&id.0)?.params
    }

    /// The peer of `id`.
    pub fn peer(&self, id: ConnId) -> Option<&A> {
        self.conns.get(&id.0).map(|c| &c.peer)
    }

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<Outgoing<A>> {
        self.outbox.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event<A>> {
        self.events.pop_front()
    }

    /// Entries the timer structure holds, live and stale: a diagnostic of the
    /// memory the timers take, which follows the live connections (bounded by
    /// their number plus a constant), not the number of timers ever armed.
    pub fn timer_entries(&self) -> usize {
        self.timers.entries()
    }

    /// When the earliest timer is due.
    pub fn next_deadline(&mut self) -> Option<Duration> {
        self.timers.next().map(Duration::from_nanos)
    }

    fn send(&mut self, to: A, tid: u64, msg: Message) {
        self.outbox.push_back(Outgoing {
            to,
            mad: CmMad { tid, msg },
        });
    }

    fn event(&mut self, id: u32, e: Event<A>) {
        if self.conns.get(&id).is_some_and(|c| !c.destroyed) {
            self.events.push_back(e);
        }
    }

    /// Arms `id`'s timer at `now + timeout`, cancelling the previous one.
    fn arm(&mut self, id: u32, now: Duration, timeout: Duration) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.timeout = timeout;
            self.timers.arm(id, nanos(now + timeout));
        }
    }

    fn cancel(&mut self, id: u32) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.sent = None;
        }
        self.timers.cancel(id);
    }

    /// Sends `mad` to `id`'s peer and retransmits it every `timeout` until answered,
    /// `retries` times.
    fn send_reliably(
        &mut self,
        id: u32,
        now: Duration,
        mad: CmMad,
        timeout: Duration,
        retries: u8,
    ) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.sent = Some(mad);
        c.retries_left = retries;
        let to = c.peer.clone();
        self.outbox.push_back(Outgoing { to, mad });
        self.arm(id, now, timeout);
    }

    fn set_state(&mut self, id: u32, s: State) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = s;
        }
    }

    /// Enters TimeWait for conv(packet life time + 1) (Linux `cm_enter_timewait`).
    fn enter_timewait(&mut self, id: u32, now: Duration) {
        self.cancel(id);
        self.set_state(id, State::TimeWait);
        let t = conv(self.cfg.packet_life_time + 1);
        self.arm(id, now, t);
    }

    fn new_conn(&mut self, id: u32, state: State, peer: A) {
        self.conns.insert(
            id,
            Conn {
                state,
                peer,
                remote_comm_id: 0,
                remote_ca_guid: 0,
                local_qpn: 0,
                remote_qpn: 0,
                tid: self.new_tid(id),
                sent: None,
                retries_left: 0,
                timeout: Duration::ZERO,
                params: None,
                dreq_tid: 0,
                disconnected: false,
                destroyed: false,
                rtu: None,
            },
        );
    }

    fn state_of(&self, id: ConnId) -> Result<State, CmError> {
        self.conns
            .get(&id.0)
            .map(|c| c.state)
            .ok_or(CmError::UnknownId(id))
    }

    fn wrong(&self, id: ConnId, op: &'static str) -> CmError {
        match self.conns.get(&id.0) {
            Some(c) => CmError::InvalidState {
                id,
                state: c.state,
                op,
            },
            None => CmError::UnknownId(id),
        }
    }

    /// Active: sends a REQ to `to` and waits for the REP.
    pub fn connect(&mut self, now: Duration, to: A, p: &ConnectParams) -> Result<ConnId, CmError> {
        if p.transport == TransportType::Xrc {
            return Err(CmError::Invalid("XRC connections are not supported"));
        }
        if p.retry_count > 7 || p.rnr_retry_count > 7 || !(1..=5).contains(&p.path_mtu) {
            return Err(CmError::Invalid(
                "retry and RNR retry counts are 0..=7, the path MTU code 1..=5",
            ));
        }
        let private_data = pd::<{ private_len::REQ }>("REQ", &p.private_data)?;
        let id = self.alloc_id();
        self.new_conn(id, State::ReqSent, to);
        let cfg = self.cfg;
        let mut path = p.path;
        path.local_ack_timeout = time::ack_timeout(cfg.ca_ack_delay, cfg.packet_life_time);
        let req = Req {
            local_comm_id: id,
            service_id: p.service_id,
            local_ca_guid: cfg.local_ca_guid,
            local_qkey: 0,
            local_qpn: p.local_qpn & 0xff_ffff,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            local_eecn: 0,
            remote_eecn: 0,
            remote_cm_response_timeout: cfg.response_timeout,
            transport: p.transport,
            e2e_flow_control: false,
            starting_psn: p.starting_psn & 0xff_ffff,
            local_cm_response_timeout: cfg.response_timeout,
            retry_count: p.retry_count,
            pkey: DEFAULT_PKEY,
            path_mtu: p.path_mtu,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count,
            max_cm_retries: cfg.max_cm_retries.min(15),
            srq: p.srq,
            primary: path,
            alternate: Path::default(),
            private_data,
        };
        let c = self.conns.get_mut(&id).expect("just made");
        c.local_qpn = req.local_qpn;
        c.params = Some(QpParams {
            dest_qpn: 0,
            rq_psn: req.starting_psn,
            sq_psn: 0,
            path_mtu: p.path_mtu,
            max_dest_rd_atomic: 0,
            max_rd_atomic: 0,
            retry_cnt: p.retry_count,
            rnr_retry: 0,
            timeout: 0,
        });
        let tid = c.tid;
        let timeout = time::req_timeout(cfg.packet_life_time, cfg.response_timeout);
        self.send_reliably(
            id,
            now,
            CmMad {
                tid,
                msg: Message::Req(req),
            },
            timeout,
            cfg.max_cm_retries,
        );
        Ok(ConnId(id))
    }

    /// Passive: the QP attributes [`Engine::accept`] with `p` would negotiate for `id`
    /// (rdma_cm moves the QP to RTR and RTS with them before it sends the REP).
    pub fn accept_qp_params(&self, id: ConnId, p: &AcceptParams) -> Result<QpParams, CmError> {
        match self.conns.get(&id.0) {
            Some(Conn {
                state: State::MraReqSent,
                sent:
                    Some(CmMad {
                        msg: Message::Req(req),
                        ..
                    }),
                ..
            }) => Ok(passive_params(req, p)),
            _ => Err(self.wrong(id, "accept")),
        }
    }

    /// Passive: answers the REQ of `id` with a REP and waits for the RTU.
    pub fn accept(&mut self, now: Duration, id: ConnId, p: &AcceptParams) -> Result<(), CmError> {
        let state = self.state_of(id)?;
        if !matches!(state, State::MraReqSent) {
            return Err(self.wrong(id, "accept"));
        }
        if p.rnr_retry_count > 7 {
            return Err(CmError::Invalid("the RNR retry count is 0..=7"));
        }
        let private_data = pd::<{ private_len::REP }>("REP", &p.private_data)?;
        let cfg = self.cfg;
        let c = self.conns.get_mut(&id.0).expect("checked");
        let Some(Message::Req(req)) = c.sent.take().map(|m| m.msg) else {
            return Err(CmError::Invalid("the REQ of this connection is gone"));
        };
        let rep = Rep {
            local_comm_id: id.0,
            remote_comm_id: req.local_comm_id,
            local_qkey: 0,
            local_qpn: p.local_qpn & 0xff_ffff,
            local_eecn: 0,
            starting_psn: p.starting_psn & 0xff_ffff,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: cfg.ca_ack_delay,
            failover_accepted: 0,
            e2e_flow_control: false,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            local_ca_guid: cfg.local_ca_guid,
            private_data,
        };
        c.local_qpn = rep.local_qpn;
        c.params = Some(passive_params(&req, p));
        let tid = c.tid;
        self.set_state(id.0, State::RepSent);
        self.send_reliably(
            id.0,
            now,
            CmMad {
                tid,
                msg: Message::Rep(rep),
            },
            conv(req.local_cm_response_timeout),
            req.max_cm_retries,
        );
        Ok(())
    }

    /// Rejects the REQ (passive) or REP (active) of `id` with `reason` and
    /// `private_data` (at most 148 bytes); the connection becomes idle.
    pub fn reject(&mut self, id: ConnId, reason: u16, private_data: &[u8]) -> Result<(), CmError> {
        let state = self.state_of(id)?;
        let kind = match state {
            State::MraReqSent => MsgKind::Req,
            State::RepRcvd => MsgKind::Rep,
            _ => return Err(self.wrong(id, "reject")),
        };
        let private_data = pd::<{ private_len::REJ }>("REJ", private_data)?;
        let c = self.conns.get(&id.0).expect("checked");
        let rej = Rej {
            local_comm_id: id.0,
            remote_comm_id: c.remote_comm_id,
            msg_rejected: kind,
            ari_len: 0,
            reason,
            ari: [0; private_len::REJ_ARI],
            private_data,
        };
        let (to, tid) = (c.peer.clone(), c.tid);
        self.send(to, tid, Message::Rej(rej));
        self.cancel(id.0);
        self.set_state(id.0, State::Idle);
        Ok(())
    }

    /// Active: sends the RTU once the QP is in RTS; the connection is established.
    pub fn establish(&mut self, id: ConnId) -> Result<(), CmError> {
        if self.state_of(id)? != State::RepRcvd {
            return Err(self.wrong(id, "establish"));
        }
        let c = self.conns.get_mut(&id.0).expect("checked");
        let rtu = CmMad {
            tid: c.tid,
            msg: Message::Rtu(Rtu {
                local_comm_id: id.0,
                remote_comm_id: c.remote_comm_id,
                private_data: [0; private_len::RTU],
            }),
        };
        c.rtu = Some(rtu);
        c.state = State::Established;
        let to = c.peer.clone();
        // The RTU is not retransmitted: a lost one is healed by the REP's
        // retransmission, answered with the RTU again (Linux `cm_dup_rep_handler`).
        self.outbox.push_back(Outgoing { to, mad: rtu });
        self.event(id.0, Event::Established { id });
        Ok(())
    }

    /// Disconnects `id`: sends a DREQ (established) or answers the peer's DREQ with a
    /// DREP (after [`Event::Disconnected`]).
    pub fn disconnect(&mut self, now: Duration, id: ConnId) -> Result<(), CmError> {
        match self.state_of(id)? {
            State::Established => {
                let cfg = self.cfg;
                let new_tid = self.new_tid(id.0);
                let c = &self.conns[&id.0];
                let dreq = CmMad {
                    tid: new_tid,
                    msg: Message::Dreq(Dreq {
                        local_comm_id: id.0,
                        remote_comm_id: c.remote_comm_id,
                        remote_qpn: c.remote_qpn,
                        private_data: [0; private_len::DREQ],
                    }),
                };
                self.set_state(id.0, State::DreqSent);
                let timeout = time::req_timeout(cfg.packet_life_time, cfg.response_timeout);
                self.send_reliably(id.0, now, dreq, timeout, cfg.max_cm_retries);
                Ok(())
            }
            State::DreqRcvd => {
                let c = &self.conns[&id.0];
                let drep = Drep {
                    local_comm_id: id.0,
                    remote_comm_id: c.remote_comm_id,
                    private_data: [0; private_len::DREP],
                };
                let (to, tid) = (c.peer.clone(), c.dreq_tid);
                // TimeWait first, then the DREP (Linux `ib_send_cm_drep`).
                self.enter_timewait(id.0, now);
                self.send(to, tid, Message::Drep(drep));
                Ok(())
            }
            _ => Err(self.wrong(id, "disconnect")),
        }
    }

    /// Active SIDR: asks `to` for the UD QP of `service_id`.
    pub fn sidr_request(
        &mut self,
        now: Duration,
        to: A,
        service_id: u64,
        private_data: &[u8],
    ) -> Result<ConnId, CmError> {
        let private_data = pd::<{ private_len::SIDR_REQ }>("SIDR_REQ", private_data)?;
        let id = self.alloc_id();
        self.new_conn(id, State::SidrReqSent, to);
        let cfg = self.cfg;
        let tid = self.conns[&id].tid;
        let mad = CmMad {
            tid,
            msg: Message::SidrReq(SidrReq {
                request_id: id,
                pkey: DEFAULT_PKEY,
                service_id,
                private_data,
            }),
        };
        let timeout = time::req_timeout(cfg.packet_life_time, cfg.response_timeout);
        self.send_reliably(id, now, mad, timeout, cfg.max_cm_retries);
        Ok(ConnId(id))
    }

    /// Passive SIDR: answers the SIDR_REQ of `id` with `status` and, on success, the
    /// service's UD QP and Q_Key; the exchange ends.
    pub fn sidr_reply(
        &mut self,
        id: ConnId,
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        if self.state_of(id)? != State::SidrReqRcvd {
            return Err(self.wrong(id, "sidr_reply"));
        }
        let private_data = pd::<{ private_len::SIDR_REP }>("SIDR_REP", private_data)?;
        let c = self.conns.remove(&id.0).expect("checked");
        self.sidr_by_remote
            .remove(&(c.peer.clone(), c.remote_comm_id));
        let Some(Message::SidrReq(req)) = c.sent.map(|m| m.msg) else {
            return Err(CmError::Invalid("the SIDR_REQ of this exchange is gone"));
        };
        self.send(
            c.peer,
            c.tid,
            Message::SidrRep(SidrRep {
                request_id: req.request_id,
                status,
                add_info_len: 0,
                qpn: qpn & 0xff_ffff,
                service_id: req.service_id,
                qkey,
                add_info: [0; private_len::SIDR_REP_INFO],
                private_data,
            }),
        );
        Ok(())
    }

    /// Forgets `id`. A connection still up is taken down as Linux's `cm_destroy_id`
    /// does (a DREQ when established, a DREP when one is owed, a REJ while a REQ or
    /// REP is unanswered); no event about it follows.
    pub fn destroy(&mut self, now: Duration, id: ConnId) -> Result<(), CmError> {
        let state = self.state_of(id)?;
        match state {
            State::Established => {
                self.disconnect(now, id)?;
            }
            State::DreqRcvd => {
                self.disconnect(now, id)?;
            }
            State::MraReqSent | State::RepRcvd => {
                self.reject(id, rej_reason::CONSUMER_DEFINED, &[])?;
            }
            State::ReqSent | State::MraReqRcvd => {
                // REJ "timeout" with this CA's GUID as the ARI (Linux `cm_destroy_id`).
                let c = &self.conns[&id.0];
                let mut ari = [0u8; private_len::REJ_ARI];
                ari[..8].copy_from_slice(&self.cfg.local_ca_guid.to_be_bytes());
                let rej = Rej {
                    local_comm_id: id.0,
                    remote_comm_id: 0,
                    msg_rejected: MsgKind::Req,
                    ari_len: 8,
                    reason: rej_reason::TIMEOUT,
                    ari,
                    private_data: [0; private_len::REJ],
                };
                let (to, tid) = (c.peer.clone(), c.tid);
                self.send(to, tid, Message::Rej(rej));
                self.set_state(id.0, State::Idle);
            }
            State::RepSent | State::MraRepRcvd => {
                let c = &self.conns[&id.0];
                let rej = Rej {
                    local_comm_id: id.0,
                    remote_comm_id: c.remote_comm_id,
                    msg_rejected: MsgKind::Rep,
                    ari_len: 0,
                    reason: rej_reason::CONSUMER_DEFINED,
                    ari: [0; private_len::REJ_ARI],
                    private_data: [0; private_len::REJ],
                };
                let (to, tid) = (c.peer.clone(), c.tid);
                self.send(to, tid, Message::Rej(rej));
                self.set_state(id.0, State::Idle);
            }
            State::SidrReqRcvd => {
                self.sidr_reply(id, sidr_status::REJECT, 0, 0, &[])?;
                return Ok(());
            }
            _ => {}
        }
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.destroyed = true;
        }
        self.reap(id.0);
        Ok(())
    }

    /// Removes a destroyed connection once nothing is left for it to do.
    fn reap(&mut self, id: u32) {
        let done = self
            .conns
            .get(&id)
            .is_some_and(|c| c.destroyed && matches!(c.state, State::Idle | State::SidrReqSent));
        if done {
            self.remove(id);
        }
    }

    fn remove(&mut self, id: u32) {
        self.timers.cancel(id);
        if let Some(c) = self.conns.remove(&id) {
            if self.by_remote.get(&(c.remote_ca_guid, c.remote_comm_id)) == Some(&id) {
                self.by_remote.remove(&(c.remote_ca_guid, c.remote_comm_id));
            }
            if self.by_remote_qpn.get(&(c.remote_ca_guid, c.remote_qpn)) == Some(&id) {
                self.by_remote_qpn.remove(&(c.remote_ca_guid, c.remote_qpn));
            }
        }
    }

    /// Runs the timers due at `now`: retransmissions, failures, TimeWait exits.
    pub fn on_timers(&mut self, now: Duration) {
        while let Some((id, _)) = self.timers.pop_expired(nanos(now)) {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            if c.state == State::TimeWait {
                c.state = State::Idle;
                self.event(id, Event::TimewaitExit { id: ConnId(id) });
                self.reap(id);
                continue;
            }
            if c.retries_left > 0 {
                if let Some(mad) = c.sent {
                    c.retries_left -= 1;
                    let (to, timeout) = (c.peer.clone(), c.timeout);
                    self.outbox.push_back(Outgoing { to, mad });
                    self.arm(id, now, timeout);
                    continue;
                }
            }
            // Out of retries.
            let state = c.state;
            c.sent = None;
            match state {
                State::ReqSent
                | State::MraReqRcvd
                | State::RepSent
                | State::MraRepRcvd
                | State::SidrReqSent => {
                    self.set_state(id, State::Idle);
                    self.event(id, Event::Unreachable { id: ConnId(id) });
                    self.reap(id);
                }
                State::DreqSent => {
                    // No DREP: the disconnection completes anyway; Linux's rdma_cm
                    // reports the DREQ_ERROR as DISCONNECTED (`cma_ib_handler`), so
                    // a peer that vanished is noticed after the DREQ's retries.
                    let c = self.conns.get_mut(&id).expect("timer of a connection");
                    let first = !c.disconnected;
                    c.disconnected = true;
                    if first {
                        self.event(id, Event::Disconnected { id: ConnId(id) });
                    }
                    self.enter_timewait(id, now);
                }
                _ => {}
            }
        }
    }

    /// Handles a MAD received from `from` at `now`. A MAD that is not a valid CM MAD is
    /// returned as the error that says why, and changes nothing.
    pub fn receive(&mut self, now: Duration, from: A, mad: &[u8]) -> Result<(), crate::Error> {
        let m = CmMad::parse(mad)?;
        match m.msg {
            Message::Req(req) => self.on_req(now, from, m.tid, req),
            Message::Mra(mra) => self.on_mra(now, mra),
            Message::Rej(rej) => self.on_rej(now, rej),
            Message::Rep(rep) => self.on_rep(from, m.tid, rep),
            Message::Rtu(rtu) => self.on_rtu(rtu),
            Message::Dreq(dreq) => self.on_dreq(from, m.tid, dreq),
            Message::Drep(drep) => self.on_drep(now, drep),
            Message::SidrReq(req) => self.on_sidr_req(from, m.tid, req),
            Message::SidrRep(rep) => self.on_sidr_rep(rep),
            Message::Lap {
                local_comm_id,
                remote_comm_id,
            } => {
                // RoCE has no alternate paths: answer that they are unsupported.
                self.send(
                    from,
                    m.tid,
                    Message::Apr {
                        local_comm_id: remote_comm_id,
                        remote_comm_id: local_comm_id,
                        ap_status: apr_status::UNSUPPORTED,
                    },
                );
            }
            Message::Apr { .. } => {}
        }
        Ok(())
    }

    /// The connection that `local`/`remote` (as the peer names them) designate.
    fn find(&self, our_id: u32, their_id: u32) -> Option<u32> {
        self.conns
            .get(&our_id)
            .filter(|c| c.remote_comm_id == their_id)
            .map(|_| our_id)
    }

    /// The connection an MRA or REJ of a message of `kind` answers: for a REQ, by our
    /// ID alone (the peer has not recorded its own yet); otherwise by both IDs (Linux
    /// `cm_acquire_mraed_id`, `cm_acquire_rejected_id`).
    fn answered(&self, kind: MsgKind, our_id: u32, their_id: u32) -> Option<u32> {
        match kind {
            MsgKind::Req => self.conns.contains_key(&our_id).then_some(our_id),
            _ => self.find(our_id, their_id),
        }
    }

    fn on_req(&mut self, now: Duration, from: A, tid: u64, req: Req) {
        let key = (req.local_ca_guid, req.local_comm_id);
        if let Some(&id) = self.by_remote.get(&key) {
            // A duplicate (Linux `cm_dup_req_handler`).
            let c = &self.conns[&id];
            match c.state {
                State::MraReqSent => {
                    let mra = Mra {
                        local_comm_id: id,
                        remote_comm_id: req.local_comm_id,
                        msg_mraed: MsgKind::Req,
                        service_timeout: time::CM_MRA_SETTING,
                        private_data: [0; private_len::MRA],
                    };
                    self.send(from, tid, Message::Mra(mra));
                }
                State::TimeWait => {
                    self.send(
                        from,
                        tid,
                        Message::Rej(stale_rej(id, req.local_comm_id, MsgKind::Req)),
                    );
                }
                _ => {}
            }
            return;
        }
        if let Some(&old) = self.by_remote_qpn.get(&(req.local_ca_guid, req.local_qpn)) {
            // The peer's QP still belongs to a connection here (Linux `cm_match_req`):
            // the REQ is rejected as stale and the old connection is disconnected
            // (`ib_send_cm_dreq`, which acts on an established one only), so that
            // the peer's next REQ finds the QP free once the old connection's
            // DREQ is answered or given up. A peer whose process died without a
            // DREQ and whose new process reuses the QPN would otherwise be
            // refused for as long as this side kept the old connection. A
            // connection in TimeWait no longer holds the peer's QPN (Linux
            // `cm_enter_timewait` removes it from the remote-QPN table).
            let state = self.conns.get(&old).map(|c| c.state);
            if state.is_some_and(|s| !matches!(s, State::Idle | State::TimeWait)) {
                self.send(
                    from,
                    tid,
                    Message::Rej(stale_rej(0, req.local_comm_id, MsgKind::Req)),
                );
                if state == Some(State::Established) {
                    let _ = self.disconnect(now, ConnId(old));
                }
                return;
            }
        }
        if req.transport == TransportType::Xrc {
            self.send(
                from,
                tid,
                Message::Rej(plain_rej(
                    0,
                    req.local_comm_id,
                    MsgKind::Req,
                    rej_reason::INVALID_TRANSPORT_TYPE,
                )),
            );
            return;
        }
        if !self.listeners.contains_key(&req.service_id) {
            self.send(
                from,
                tid,
                Message::Rej(plain_rej(
                    0,
                    req.local_comm_id,
                    MsgKind::Req,
                    rej_reason::INVALID_SERVICE_ID,
                )),
            );
            return;
        }
        let backlog = self.listeners[&req.service_id];
        if self.waiting(req.service_id) >= backlog {
            self.backlog_drops += 1;
            return;
        }
        let id = self.alloc_id();
        self.new_conn(id, State::MraReqSent, from.clone());
        let c = self.conns.get_mut(&id).expect("just made");
        c.tid = tid;
        c.remote_comm_id = req.local_comm_id;
        c.remote_ca_guid = req.local_ca_guid;
        c.remote_qpn = req.local_qpn;
        // Kept for the REP (`accept` takes it); never retransmitted.
        c.sent = Some(CmMad {
            tid,
            msg: Message::Req(req),
        });
        self.by_remote.insert(key, id);
        self.by_remote_qpn
            .insert((req.local_ca_guid, req.local_qpn), id);
        self.event(
            id,
            Event::ConnectRequest {
                id: ConnId(id),
                from,
                req: Box::new(req),
            },
        );
    }

    fn on_mra(&mut self, now: Duration, mra: Mra) {
        let Some(id) = self.answered(mra.msg_mraed, mra.remote_comm_id, mra.local_comm_id) else {
            return;
        };
        let next = match (self.conns[&id].state, mra.msg_mraed) {
            (State::ReqSent, MsgKind::Req) => State::MraReqRcvd,
            (State::RepSent, MsgKind::Rep) => State::MraRepRcvd,
            _ => return,
        };
        if next == State::MraReqRcvd {
            let c = self.conns.get_mut(&id).expect("found");
            c.remote_comm_id = mra.local_comm_id;
        }
        self.set_state(id, next);
        // Wait as long as the peer says, plus a packet life time (Linux
        // `cm_mra_handler`).
        let t = conv(mra.service_timeout) + conv(self.cfg.packet_life_time + 1);
        self.arm(id, now, t);
    }

    fn on_rej(&mut self, now: Duration, rej: Rej) {
        let Some(id) = self.answered(rej.msg_rejected, rej.remote_comm_id, rej.local_comm_id)
        else {
            return;
        };
        let state = self.conns[&id].state;
        let to_timewait = match state {
            State::ReqSent | State::MraReqRcvd | State::RepSent | State::MraRepRcvd => {
                rej.reason == rej_reason::STALE_CONN
            }
            State::RepRcvd | State::Established | State::DreqSent => true,
            _ => return,
        };
        self.cancel(id);
        self.event(
            id,
            Event::Rejected {
                id: ConnId(id),
                rej: Box::new(rej),
            },
        );
        if to_timewait {
            self.enter_timewait(id, now);
        } else {
            self.set_state(id, State::Idle);
            self.reap(id);
        }
    }

    fn on_rep(&mut self, from: A, tid: u64, rep: Rep) {
        let Some(c) = self.conns.get(&rep.remote_comm_id) else {
            // Nothing here knows it: reject it as an invalid communication ID.
            let rej = plain_rej(
                0,
                rep.local_comm_id,
                MsgKind::Rep,
                rej_reason::INVALID_COMM_ID,
            );
            self.send(from, tid, Message::Rej(rej));
            return;
        };
        let id = rep.remote_comm_id;
        match c.state {
            State::ReqSent | State::MraReqRcvd => {}
            State::Established if c.remote_comm_id == rep.local_comm_id => {
                // A duplicate REP: the RTU was lost (Linux `cm_dup_rep_handler`).
                if let Some(rtu) = c.rtu {
                    let to = c.peer.clone();
                    self.outbox.push_back(Outgoing { to, mad: rtu });
                }
                return;
            }
            State::RepRcvd if c.remote_comm_id == rep.local_comm_id => {
                let mra = Mra {
                    local_comm_id: id,
                    remote_comm_id: rep.local_comm_id,
                    msg_mraed: MsgKind::Rep,
                    service_timeout: time::CM_MRA_SETTING,
                    private_data: [0; private_len::MRA],
                };
                let (to, tid) = (c.peer.clone(), c.tid);
                self.send(to, tid, Message::Mra(mra));
                return;
            }
            _ => return,
        }
        let cfg = self.cfg;
        let c = self.conns.get_mut(&id).expect("found");
        c.remote_comm_id = rep.local_comm_id;
        c.remote_ca_guid = rep.local_ca_guid;
        c.remote_qpn = rep.local_qpn;
        if let Some(p) = c.params.as_mut() {
            // Active QP attributes (Linux `cm_rep_handler`): note the swaps.
            p.dest_qpn = rep.local_qpn;
            p.sq_psn = rep.starting_psn;
            p.max_dest_rd_atomic = rep.initiator_depth;
            p.max_rd_atomic = rep.responder_resources;
            p.rnr_retry = rep.rnr_retry_count;
            p.timeout = time::ack_timeout(rep.target_ack_delay, cfg.packet_life_time);
        }
        self.by_remote
            .insert((rep.local_ca_guid, rep.local_comm_id), id);
        self.by_remote_qpn
            .insert((rep.local_ca_guid, rep.local_qpn), id);
        self.cancel(id);
        self.set_state(id, State::RepRcvd);
        self.event(
            id,
            Event::ConnectResponse {
                id: ConnId(id),
                rep: Box::new(rep),
            },
        );
    }

    fn on_rtu(&mut self, rtu: Rtu) {
        let Some(id) = self.find(rtu.remote_comm_id, rtu.local_comm_id) else {
            return;
        };
        if !matches!(self.conns[&id].state, State::RepSent | State::MraRepRcvd) {
            return;
        }
        self.cancel(id);
        self.set_state(id, State::Established);
        self.event(id, Event::Established { id: ConnId(id) });
    }

    fn on_dreq(&mut self, from: A, tid: u64, dreq: Dreq) {
        let Some(id) = self.find(dreq.remote_comm_id, dreq.local_comm_id) else {
            // Unknown: answer with a DREP anyway (Linux `cm_issue_drep`).
            let drep = Drep {
                local_comm_id: dreq.remote_comm_id,
                remote_comm_id: dreq.local_comm_id,
                private_data: [0; private_len::DREP],
            };
            self.send(from, tid, Message::Drep(drep));
            return;
        };
        let c = self.conns.get_mut(&id).expect("found");
        if dreq.remote_qpn != c.local_qpn {
            // Not for our QP: dropped (Linux `cm_dreq_handler`).
            return;
        }
        match c.state {
            State::Established | State::RepSent | State::MraRepRcvd | State::DreqSent => {
                c.dreq_tid = tid;
                let first = !c.disconnected;
                c.disconnected = true;
                self.cancel(id);
                self.set_state(id, State::DreqRcvd);
                if first {
                    self.event(id, Event::Disconnected { id: ConnId(id) });
                }
            }
            State::TimeWait => {
                let drep = Drep {
                    local_comm_id: id,
                    remote_comm_id: dreq.local_comm_id,
                    private_data: [0; private_len::DREP],
                };
                self.send(from, tid, Message::Drep(drep));
            }
            _ => {}
        }
    }

    fn on_drep(&mut self, now: Duration, drep: Drep) {
        let Some(id) = self.find(drep.remote_comm_id, drep.local_comm_id) else {
            return;
        };
        let c = self.conns.get_mut(&id).expect("found");
        if !matches!(c.state, State::DreqSent | State::DreqRcvd) {
            return;
        }
        let first = !c.disconnected;
        c.disconnected = true;
        if first {
            self.event(id, Event::Disconnected { id: ConnId(id) });
        }
        self.enter_timewait(id, now);
    }

    fn on_sidr_req(&mut self, from: A, tid: u64, req: SidrReq) {
        if self
            .sidr_by_remote
            .contains_key(&(from.clone(), req.request_id))
        {
            // A duplicate while pending: dropped (Linux `cm_sidr_req_handler`).
            return;
        }
        if !self.listeners.contains_key(&req.service_id) {
            let rep = SidrRep {
                request_id: req.request_id,
                status: sidr_status::UNSUPPORTED,
                add_info_len: 0,
                qpn: 0,
                service_id: req.service_id,
                qkey: 0,
                add_info: [0; private_len::SIDR_REP_INFO],
                private_data: [0; private_len::SIDR_REP],
            };
            self.send(from, tid, Message::SidrRep(rep));
            return;
        }
        let id = self.alloc_id();
        self.new_conn(id, State::SidrReqRcvd, from.clone());
        let c = self.conns.get_mut(&id).expect("just made");
        c.tid = tid;
        c.remote_comm_id = req.request_id;
        c.sent = Some(CmMad {
            tid,
            msg: Message::SidrReq(req),
        });
        self.sidr_by_remote
            .insert((from.clone(), req.request_id), id);
        self.event(
            id,
            Event::SidrRequest {
                id: ConnId(id),
                from,
                req: Box::new(req),
            },
        );
    }

    fn on_sidr_rep(&mut self, rep: SidrRep) {
        let id = rep.request_id;
        if self.conns.get(&id).map(|c| c.state) != Some(State::SidrReqSent) {
            return;
        }
        self.cancel(id);
        self.set_state(id, State::Idle);
        self.event(
            id,
            Event::SidrResolved {
                id: ConnId(id),
                rep: Box::new(rep),
            },
        );
        self.reap(id);
    }
}

/// The passive side's QP attributes (Linux `cm_req_handler`, `ib_send_cm_rep`): the
/// REQ's QPN and PSN, its MTU, retry and RNR counts and ACK time-out; the READ/atomic
/// depths as accepted.
fn passive_params(req: &Req, p: &AcceptParams) -> QpParams {
    QpParams {
        dest_qpn: req.local_qpn,
        rq_psn: p.starting_psn & 0xff_ffff,
        sq_psn: req.starting_psn,
        path_mtu: req.path_mtu,
        max_dest_rd_atomic: p.responder_resources,
        max_rd_atomic: p.initiator_depth,
        retry_cnt: req.retry_count,
        rnr_retry: req.rnr_retry_count,
        timeout: req.primary.local_ack_timeout,
    }
}

fn plain_rej(local: u32, remote: u32, kind: MsgKind, reason: u16) -> Rej {
    Rej {
        local_comm_id: local,
        remote_comm_id: remote,
        msg_rejected: kind,
        ari_len: 0,
        reason,
        ari: [0; private_len::REJ_ARI],
        private_data: [0; private_len::REJ],
    }
}

fn stale_rej(local: u32, remote: u32, kind: MsgKind) -> Rej {
    plain_rej(local, remote, kind, rej_reason::STALE_CONN)
}

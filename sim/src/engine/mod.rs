//! The data-path engine: what a ConnectX does between the doorbells and the wire.
//!
//! * **Send doorbells** (an 8-byte doorbell or the first chunk of a BlueFlame copy in a
//!   QP's UAR): the QPN is bytes 4-6 of the control segment written; the engine then
//!   fetches WQEs from the QP buffer through the IOMMU, from its own SQ counter up to
//!   the SQ doorbell record counter (WQEBB units, 16 bits, wrapping), validates them
//!   ([`wqe`]), translates their lkeys ([`mem`]) and hands them to the RC requester
//!   ([`crate::transport`]), which segments them into RoCEv2 packets.
//! * **Received frames** are checked (structure, checksums, ICRC), matched to a QP by
//!   destination QPN, source and destination addresses and P_Key, and given to the
//!   responder (requests) or the completer (responses).
//! * **Completions** are written to the QP's CQs ([`cq`]) with the owner-bit protocol;
//!   an armed CQ posts a completion event to its EQ.
//! * **Errors**: a WQE that fails completes with an error CQE, the QP moves to the error
//!   state (reported in its context, which QUERY_QP shows) and every outstanding send
//!   and receive WQE is flushed with `WR_FLUSH_ERR`, each with its own `wqe_counter`.
//!   While in error, newly posted WQEs are flushed too (send WQEs at their doorbell,
//!   receive WQEs when the device next polls the receive doorbell record).
//!
//! The engine follows the firmware's QP state machine through the events the firmware
//! records for each successful modify/destroy command
//! ([`crate::firmware::DataPathEvent`]): RST forgets everything (counters back to 0, as
//! rdma-core resets its own), INIT2RTR loads the responder's expected PSN, RTR2RTS the
//! requester's first PSN, 2ERR flushes.

pub mod counters;
pub mod cq;
pub mod fastmap;
pub mod mem;
pub mod qp;
pub mod recv;
pub mod sched;
pub mod wqe;

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::sync::Arc;

use ferroverbs_hw::datapath::cqe::{
    MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
    MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, MLX5_CQE_SYNDROME_WR_FLUSH_ERR,
};

use ferroverbs_hw::control::qp::QpcState;

use crate::firmware::{DataPathEvent, Firmware, ServiceType};
use crate::iommu::Iommu;
use crate::irq::Irqs;
use crate::link::{FramePool, RxQueue, Uplink};
use crate::transport;
use crate::wire::{self, Psn};
use cq::{Completion, CqRt, CqeKind, Pushed};
use fastmap::DirectIndex;
use mem::Sge;
use qp::QpCfg;
use sched::{QpSched, WorkLists};
use wqe::{SendWqe, WqeData, WqeError};

/// Vendor syndrome of a flushed WQE (the value ConnectX adapters report).
pub const VENDOR_FLUSH: u8 = 0xf9;
/// Vendor syndrome of a local protection error (a value seen on ConnectX adapters).
pub const VENDOR_LOCAL_PROT: u8 = 0x52;
/// Vendor syndrome of a remote invalid request error (a value seen on ConnectX
/// adapters).
pub const VENDOR_REM_INV_REQ: u8 = 0x8a;

/// 16-bit hardware counters (SQ WQEBB counter, RQ WQE counter).
const MASK16: u32 = 0xffff;

/// An error completion's syndromes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Synd {
    /// `MLX5_CQE_SYNDROME_*`.
    pub syndrome: u8,
    /// Vendor syndrome.
    pub vendor: u8,
}

impl Synd {
    /// A syndrome with the vendor value the simulator uses for it.
    pub const fn of(syndrome: u8) -> Synd {
        let vendor = match syndrome {
            MLX5_CQE_SYNDROME_WR_FLUSH_ERR => VENDOR_FLUSH,
            MLX5_CQE_SYNDROME_LOCAL_PROT_ERR => VENDOR_LOCAL_PROT,
            ferroverbs_hw::datapath::cqe::MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR => {
                VENDOR_REM_INV_REQ
            }
            _ => 0,
        };
        Synd { syndrome, vendor }
    }

    /// The syndrome of a WQE validation error.
    pub fn of_wqe(e: WqeError) -> Synd {
        Synd::of(match e {
            WqeError::QpOp => MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
            WqeError::Prot => MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
            WqeError::Length => MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR,
        })
    }
}

/// Counters of the data path, for tests ("counted, not assumed").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataPathStats {
    /// Send doorbells acted on.
    pub doorbells: u64,
    /// Send or arm doorbells for an unknown object, a QP/CQ another UAR drives, or a
    /// QP in a state that does not send.
    pub stray_doorbells: u64,
    /// Send WQEs fetched.
    pub wqes: u64,
    /// CQEs written.
    pub cqes: u64,
    /// Of those, error CQEs (flushes included).
    pub error_cqes: u64,
    /// Of those, `WR_FLUSH_ERR` CQEs.
    pub flushed: u64,
    /// CQEs dropped because their CQ overran or was in error.
    pub cqes_dropped: u64,
    /// QPs moved to the error state by the data path.
    pub qp_errors: u64,
    /// Frames transmitted.
    pub tx_frames: u64,
    /// Bytes of the frames transmitted (Ethernet header to ICRC; no FCS, preamble or
    /// inter-frame gap).
    pub tx_bytes: u64,
    /// Bytes of the frames that could not be sent.
    pub tx_error_bytes: u64,
    /// Frames that could not be sent (no fabric attached, or the sending port's
    /// link is down, and not for this device).
    pub tx_no_link: u64,
    /// Frames that arrived while the receiving port's link was down: dropped, as a
    /// port without a link receives nothing.
    pub rx_link_down: u64,
    /// Inline one-packet SENDs fetched and transmitted at once by the requester's path
    /// for them (`transport::requester`).
    pub tx_send_only_fast: u64,
    /// Frames received (before any check).
    pub rx_frames: u64,
    /// Bytes of the frames received (as `tx_bytes`).
    pub rx_bytes: u64,
    /// Bytes of the frames dropped as `rx_bad_icrc` or `rx_malformed`.
    pub rx_error_bytes: u64,
    /// Dropped: ICRC mismatch.
    pub rx_bad_icrc: u64,
    /// Dropped: not a well-formed RoCEv2 frame (Ethernet/IPv4/UDP/BTH structure,
    /// checksums, opcode).
    pub rx_malformed: u64,
    /// Dropped: not addressed to a port of this device.
    pub rx_not_mine: u64,
    /// Dropped: a transport other than RC, UC and UD, or a UD packet for a QP that
    /// is not UD.
    pub rx_unsupported: u64,
    /// Dropped: no such QP (or not RC).
    pub rx_no_qp: u64,
    /// Dropped: the QP's state does not accept it.
    pub rx_bad_state: u64,
    /// SEND with Invalidate whose R_Key could not be invalidated (unknown or free
    /// key, another PD, remote invalidation not enabled): completed in error.
    pub rx_bad_invalidate: u64,
    /// Dropped: source or destination address does not match the QP's path.
    pub rx_bad_addr: u64,
    /// Dropped: P_Key mismatch.
    pub rx_bad_pkey: u64,
    /// Dropped: a UD packet whose DETH Q_Key is not the destination QP's.
    pub rx_bad_qkey: u64,
    /// Dropped: a UD packet for a QP with no receive WQE posted (UD has no RNR NAK).
    pub rx_no_recv_wqe: u64,
    /// Dropped: a response matching no outstanding request (or out of order).
    pub rx_unexpected: u64,
    /// Dropped: duplicate requests answered or ignored.
    pub rx_duplicates: u64,
    /// One-packet SENDs (SEND_ONLY, SEND_ONLY_WITH_IMMEDIATE) at the expected PSN taken
    /// by the responder's path for them (`transport::responder`), successful or not.
    pub rx_send_only_fast: u64,
    /// ACKs sent.
    pub acks: u64,
    /// NAKs sent (sequence, invalid request, access, operational).
    pub naks: u64,
    /// RNR NAKs sent.
    pub rnr_naks: u64,
    /// Packets retransmitted (go-back-N after a NAK, an RNR NAK, an implied NAK or a
    /// local ACK timeout).
    pub retransmits: u64,
    /// Local ACK timeouts that fired with PSNs outstanding.
    pub ack_timeouts: u64,
    /// Implied NAKs: a response or ACK past a READ/atomic still missing responses.
    pub implied_naks: u64,
    /// Sequence NAKs received.
    pub seq_naks_received: u64,
    /// RNR NAKs received.
    pub rnr_naks_received: u64,
    /// Retransmissions started (each costs one transport or RNR retry).
    pub retries: u64,
    /// Responses ignored: duplicate NAKs for a go-back-N already under way, stale or
    /// ghost ACKs (a PSN never sent).
    pub rx_stale: u64,
    /// READ response packets sent.
    pub read_responses: u64,
    /// Atomics executed.
    pub atomics: u64,
    /// UC messages dropped by the responder (a lost packet, no receive WQE, a bad
    /// rkey or length: see [`transport::uc`]).
    pub uc_msgs_dropped: u64,
    /// UC packets dropped because they continued no message in progress.
    pub uc_pkts_dropped: u64,
    /// Receive WQEs taken from shared receive queues.
    pub srq_wqes: u64,
    /// SRQ limit events raised.
    pub srq_limit_events: u64,
    /// QP runtimes the engine looked at for work: at a send doorbell, a received frame
    /// for an RC, UC or UD QP, an owed ACK sent, a timer come due, a QP whose timers
    /// stopped, a QP in error whose receive queue is watched. QPs with nothing to do
    /// are not visited ([`sched`]), so this grows with the work, not with the QPs.
    pub qp_visits: u64,
}

/// The device's ports as the data path sees them.
pub struct Net {
    /// Where frames for other devices go.
    pub uplink: Option<Arc<dyn Uplink>>,
    /// Frame buffers.
    pub pool: Arc<FramePool>,
    /// This device's receive queue (loopback).
    pub rx: Arc<RxQueue>,
    /// MAC address of each port.
    pub macs: Vec<[u8; 6]>,
    /// The outer headers of the paths sent on lately.
    pub encaps: transport::EncapCache,
    /// Ports whose physical link is down (bit `i`: port `i + 1`): what they send to
    /// the fabric is dropped ([`DataPathStats::tx_no_link`]) and what arrives for
    /// them too ([`DataPathStats::rx_link_down`]); loopback within the device goes on.
    pub links_down: u32,
    /// Frames for the fabric not handed over yet: [`Net::flush`] gives them to the
    /// uplink in one batch before the engine call that built them returns.
    pub outbox: Vec<Vec<u8>>,
    /// Frame buffers taken from the pool in batches ([`Net::buffer`]): one lock of the
    /// shared pool per [`SPARE_BATCH`] frames built instead of one per frame.
    pub spare: Vec<Vec<u8>>,
}

/// Frame buffers a device takes from the shared pool at a time.
pub const SPARE_BATCH: usize = 32;

impl Net {
    /// Sends a finished frame: to this device's own receive queue if its destination is
    /// one of its ports (loopback), else to the fabric (queued in the outbox until
    /// [`Net::flush`], which every engine entry point that transmits calls before it
    /// returns).
    pub fn send(&mut self, frame: Vec<u8>, stats: &mut DataPathStats) {
        stats.tx_frames += 1;
        stats.tx_bytes += frame.len() as u64;
        let mine = frame.len() >= 6 && self.macs.iter().any(|m| frame[..6] == m[..]);
        if mine {
            if let Err(f) = self.rx.push(frame) {
                self.pool.put(f);
            }
            return;
        }
        if self.uplink.is_some() && !self.port_down(&frame, 6) {
            self.outbox.push(frame);
        } else {
            stats.tx_no_link += 1;
            stats.tx_error_bytes += frame.len() as u64;
            self.pool.put(frame);
        }
    }

    /// Whether the port whose MAC is at byte `at` of `frame` (6: the source, 0: the
    /// destination) has its link down. One test of a zero word while every link is
    /// up.
    #[inline]
    pub fn port_down(&self, frame: &[u8], at: usize) -> bool {
        if self.links_down == 0 {
            return false;
        }
        let Some(mac) = frame.get(at..at + 6) else {
            return false;
        };
        self.macs
            .iter()
            .position(|m| m[..] == *mac)
            .is_some_and(|i| i < 32 && self.links_down & (1 << i) != 0)
    }

    /// An empty frame buffer: from the device's spares, refilled from the pool in
    /// batches; a new one when the pool has none.
    pub fn buffer(&mut self) -> Vec<u8> {
        if let Some(b) = self.spare.pop() {
            return b;
        }
        self.pool.take(&mut self.spare, SPARE_BATCH);
        self.spare.pop().unwrap_or_else(|| self.pool.get())
    }

    /// Hands the outbox's frames to the uplink, in the order they were built, in one
    /// batch ([`Uplink::transmit_batch`]: one lock of the route table and of the
    /// destination's receive queue for a run of frames to one port).
    pub fn flush(&mut self) {
        if self.outbox.is_empty() {
            return;
        }
        match &self.uplink {
            Some(u) if self.outbox.len() == 1 => {
                if let Some(f) = self.outbox.pop() {
                    u.transmit(f);
                }
            }
            Some(u) => u.transmit_batch(&mut self.outbox),
            None => self.pool.put_all(&mut self.outbox),
        }
    }
}

/// Everything the data path touches besides the QP being worked on.
pub struct Ctx<'a> {
    /// The firmware's object tables.
    pub fw: &'a mut Firmware,
    /// Host memory.
    pub io: &'a Iommu,
    /// MSI-X.
    pub irqs: &'a Irqs,
    /// Device time (ns).
    pub now: u64,
    /// CQ runtimes.
    pub cqs: &'a mut DirectIndex<CqRt>,
    /// The ports.
    pub net: &'a mut Net,
    /// Counters.
    pub stats: &'a mut DataPathStats,
    /// The buffers of in-flight WQE records no QP holds.
    pub flights: &'a mut FlightBufs,
}

/// The buffers of the QPs' in-flight WQE records ([`Sq::wqes`]) that no QP holds: a
/// QP whose last request completed gives its buffer back, and the next QP to fetch a
/// WQE with none takes the buffer given back last. The records of the requests in
/// flight are then written into the few buffers the QPs busy lately used, whatever
/// the number of QPs, instead of one ring per QP: 1,024 QPs with 128 requests each
/// cycled through 12 MiB of records (a cache miss per request once that outgrew the
/// cache), one QP through 12 KiB. A buffer holds no state between two owners (it is
/// empty), so which one a QP gets changes nothing it does; nothing is allocated to
/// move one (the list's room is reserved for every QP when QPs are made), and the
/// engine keeps no more buffers than it has QPs (those beyond go with the QPs).
#[derive(Debug, Default)]
pub struct FlightBufs {
    free: Vec<VecDeque<Flight>>,
}

impl FlightBufs {
    /// Gives back `q`'s buffer if it has one and holds nothing (and the list has
    /// room: it never grows here).
    #[inline]
    pub fn put(&mut self, q: &mut VecDeque<Flight>) {
        if q.is_empty() && q.capacity() != 0 && self.free.len() < self.free.capacity() {
            self.free.push(std::mem::take(q));
        }
    }

    /// Gives `q`, before a record is pushed, the buffer given back last if it has
    /// none.
    #[inline]
    pub fn fill(&mut self, q: &mut VecDeque<Flight>) {
        if q.capacity() == 0 {
            if let Some(b) = self.free.pop() {
                *q = b;
            }
        }
    }

    /// Makes room in the list for `n` buffers (control path: when a QP is made).
    pub fn reserve_for(&mut self, n: usize) {
        if self.free.capacity() < n {
            self.free.reserve(n - self.free.len());
        }
    }

    /// Drops the buffers beyond `n` (control path: when QPs go, so that the buffers
    /// held never outnumber the QPs).
    pub fn trim_to(&mut self, n: usize) {
        self.free.truncate(n);
    }

    /// Buffers held.
    pub fn len(&self) -> usize {
        self.free.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.free.is_empty()
    }

    /// Bytes of the buffers held and of the list.
    pub fn footprint(&self) -> usize {
        self.free.capacity() * std::mem::size_of::<VecDeque<Flight>>()
            + self
                .free
                .iter()
                .map(|q| q.capacity() * std::mem::size_of::<Flight>())
                .sum::<usize>()
    }
}

impl Ctx<'_> {
    /// Writes a CQE to CQ `cqn` (loading its runtime on first use). Returns whether it
    /// was written.
    pub fn post_cqe(&mut self, cqn: Option<u32>, c: &Completion) -> bool {
        self.post_cqe_with(cqn, c, None)
    }

    /// [`Ctx::post_cqe`] of a CQE carrying the data `data`: a responder CQE with its
    /// message, or a requester CQE with its READ response or atomic result (scatter
    /// to CQE, [`CqRt::push_scattered`]).
    pub fn post_cqe_scattered(&mut self, cqn: Option<u32>, c: &Completion, data: &[u8]) -> bool {
        self.post_cqe_with(cqn, c, Some(data))
    }

    fn post_cqe_with(&mut self, cqn: Option<u32>, c: &Completion, data: Option<&[u8]>) -> bool {
        let Some(cqn) = cqn else { return false };
        let push = |cq: &mut CqRt, fw: &mut Firmware, io: &Iommu, irqs: &Irqs| match data {
            Some(d) => cq.push_scattered(fw, io, irqs, c, d),
            None => cq.push(fw, io, irqs, c),
        };
        // One lookup in the common case (the runtime is loaded).
        let pushed = match self.cqs.get_mut(cqn) {
            Some(cq) => push(cq, self.fw, self.io, self.irqs),
            None => {
                let Some(rt) = CqRt::load(self.fw, cqn) else {
                    self.stats.cqes_dropped += 1;
                    return false;
                };
                if self.cqs.insert(cqn, rt).is_err() {
                    // Not a 24-bit CQN: the firmware gives none such.
                    self.stats.cqes_dropped += 1;
                    return false;
                }
                let Some(cq) = self.cqs.get_mut(cqn) else {
                    return false;
                };
                push(cq, self.fw, self.io, self.irqs)
            }
        };
        match pushed {
            Pushed::Written => {
                self.stats.cqes += 1;
                if let CqeKind::Err { syndrome, .. } = c.kind {
                    self.stats.error_cqes += 1;
                    if syndrome == MLX5_CQE_SYNDROME_WR_FLUSH_ERR {
                        self.stats.flushed += 1;
                    }
                }
                true
            }
            Pushed::Overrun | Pushed::Failed => {
                self.stats.cqes_dropped += 1;
                false
            }
        }
    }
}

impl Ctx<'_> {
    /// Writes a successful responder CQE of `qp` to its receive CQ from the QP's
    /// template ([`cq::CqeTemplate::fill`]: the same bytes, counters and events as
    /// [`Ctx::post_cqe`] of the equivalent [`Completion`] with `kind` `Resp { opcode }`,
    /// the QP's QPN, remote QPN and user index, `grh` false). Returns whether it was
    /// written.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn post_resp_cqe(
        &mut self,
        cfg: &QpCfg,
        opcode: u8,
        se: bool,
        wqe_counter: u16,
        byte_cnt: u32,
        imm: u32,
    ) -> bool {
        let Some(cqn) = cfg.cqn_rcv else { return false };
        let Some(cq) = self.cqs.get_mut(cqn) else {
            // First use of the CQ: the general path loads its runtime.
            let c = Completion {
                kind: CqeKind::Resp { opcode },
                qpn: cfg.qpn,
                wqe_counter,
                byte_cnt,
                imm,
                rqpn: cfg.remote_qpn,
                uidx: cfg.user_index,
                se,
                timestamp: self.now,
                grh: false,
            };
            return self.post_cqe(Some(cqn), &c);
        };
        let (tpl, now) = (&cfg.resp_cqe, self.now);
        let pushed = cq.push_with(self.fw, self.io, self.irqs, se, |owner| {
            tpl.fill(opcode, se, owner, wqe_counter, byte_cnt, imm, now)
        });
        if pushed == Pushed::Written {
            self.stats.cqes += 1;
            true
        } else {
            self.stats.cqes_dropped += 1;
            false
        }
    }
}

/// The general services QP's number on the wire (IBTA Vol. 1 13.5.1).
pub const GSI_QPN: u32 = 1;

/// A send WQE in flight: fetched, not yet completed.
#[derive(Clone, Copy, Debug)]
pub struct Flight {
    /// The WQE.
    pub w: SendWqe,
    /// Its first PSN.
    pub first_psn: Psn,
    /// PSNs it uses (0 for a NOP or a WQE that failed validation).
    pub npsn: u32,
    /// PSNs transmitted so far (packets; a READ request covers all its PSNs).
    pub sent: u32,
    /// READ: response packets received; atomics: 1 once answered.
    pub resp_pkts: u32,
    /// READ: bytes received.
    pub got: u64,
    /// Complete (acknowledged, or all responses received).
    pub done: bool,
    /// Counted in the outstanding READ/atomic requests.
    pub counted: bool,
    /// The error it completes with, once known.
    pub err: Option<Synd>,
}

impl Flight {
    /// Its last PSN.
    pub fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npsn.saturating_sub(1))
    }

    /// Whether `psn` is one of its PSNs.
    pub fn contains(&self, psn: Psn) -> bool {
        self.npsn > 0 && {
            let d = psn.distance(self.first_psn);
            d >= 0 && (d as u32) < self.npsn
        }
    }
}

/// The requester side of a QP.
///
/// `repr(C)`: the fields every message reads first (timers, the WQEs in flight and
/// their counters, the WQE being transmitted), the READ/atomic state last.
#[derive(Debug, Default)]
#[repr(C)]
pub struct Sq {
    /// After an RNR NAK: no transmission before this device time.
    pub rnr_until: Option<u64>,
    /// When the local ACK timer fires (armed while PSNs are outstanding).
    pub ack_deadline: Option<u64>,
    /// Fetched, not completed.
    pub wqes: VecDeque<Flight>,
    /// Index in `wqes` of the next WQE to transmit.
    pub tx: usize,
    /// The PSN the last go-back-N restarted from: a further NAK or implied NAK for it
    /// while it is still the oldest unacknowledged PSN is the same loss, not a new one.
    pub retry_psn: Option<Psn>,
    /// SQ WQEBB counter of the next WQE to fetch.
    pub fetched: u32,
    /// PSN for the next fetched WQE.
    pub next_psn: Psn,
    /// Oldest PSN not yet acknowledged.
    pub una: Psn,
    /// The PSN after the last one transmitted (the sent frontier; a retransmission
    /// does not move it back).
    pub psn_hi: Psn,
    /// READ/atomic requests outstanding.
    pub reads_out: u32,
    /// Transport retries left (sequence NAKs).
    pub retries_left: u8,
    /// RNR retries left (7: infinite).
    pub rnr_left: u8,
    /// A locally failed WQE is queued: nothing more is fetched.
    pub stalled: bool,
    /// Data of the WQE being transmitted.
    pub txd: WqeData,
    /// The data of a completed READ/atomic that goes in its CQE (requester scatter
    /// to CQE, `qpc.cs_req`), until the WQE's CQE is written.
    pub req_scat: Option<ReqScat>,
    /// Data of the READ/atomic being completed.
    pub rxd: WqeData,
}

/// The data of an RDMA READ response or an atomic result that goes in the
/// requester's CQE ([`qp::QpCfg::req_in_cqe`]), held from its arrival
/// until the WQE completes (at once in the common case: the responses arrive in
/// order, after everything before them was acknowledged).
#[derive(Clone, Copy, Debug)]
pub struct ReqScat {
    /// The WQE index of the READ/atomic (its CQE's `wqe_counter`).
    pub index: u16,
    /// Bytes of `data` used (at most 64).
    pub len: u8,
    /// The data.
    pub data: [u8; 64],
}

impl ReqScat {
    /// The data.
    pub fn bytes(&self) -> &[u8] {
        &self.data[..usize::from(self.len).min(64)]
    }
}

/// A message being received.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InMsg {
    /// Between messages.
    #[default]
    None,
    /// A multi-packet SEND.
    Send,
    /// A multi-packet RDMA WRITE.
    Write {
        /// Next address.
        va: u64,
        /// The rkey.
        rkey: u32,
        /// Bytes still expected.
        left: u64,
        /// The message length.
        total: u64,
    },
}

/// A receive WQE being filled.
#[derive(Clone, Debug, Default)]
pub struct RecvWqe {
    /// Consumed from the RQ and not completed.
    pub active: bool,
    /// Its RQ counter.
    pub counter: u32,
    /// Its scatter list.
    pub sges: Vec<Sge>,
    /// Its capacity.
    pub total: u64,
    /// Bytes received.
    pub got: u64,
}

/// A READ or atomic request kept for replay to a duplicate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// An RDMA READ.
    Read {
        /// First PSN.
        psn: Psn,
        /// PSNs it uses.
        npsn: u32,
        /// Address.
        va: u64,
        /// rkey.
        rkey: u32,
        /// Length.
        len: u64,
    },
    /// An executed atomic and the value it returned.
    Atomic {
        /// Its PSN.
        psn: Psn,
        /// The original value.
        orig: u64,
    },
}

/// The responder side of a QP.
///
/// `repr(C)`: what every request reads first (sequence state, the message in
/// progress, the cached windows), the receive WQE and the replay resources last.
#[derive(Debug, Default)]
#[repr(C)]
pub struct Resp {
    /// Expected PSN.
    pub epsn: Psn,
    /// Message sequence number (24 bits).
    pub msn: u32,
    /// A sequence NAK was sent for the current gap.
    pub nak_sent: bool,
    /// The PSN of an ACK owed and not sent yet (ACKs coalesce within a batch).
    pub ack_due: Option<Psn>,
    /// The message in progress.
    pub cur: InMsg,
    /// The cached translation of the last mapping a SEND's payload was scattered to.
    pub data_win: crate::iommu::Window,
    /// The cached translation of the RQ ring's mapping.
    pub rq_win: crate::iommu::Window,
    /// The cached translation of the doorbell record's mapping (its value is read at
    /// every use: the driver updates it concurrently; only the table search is
    /// saved). A `Cell` so that [`QpRt::rq_posted`] stays a `&self` read.
    pub dbr_win: std::cell::Cell<crate::iommu::Window>,
    /// The receive WQE being filled.
    pub rwqe: RecvWqe,
    /// Replay resources, oldest first.
    pub res: VecDeque<Resource>,
}

/// Scatter/gather entries the lists of a QP's WQE being transmitted and of its receive
/// WQE being filled hold from the QP's creation (the capacity `Vec` gives them at their
/// first entry): the first message of a QP allocates nothing on the data path.
const SGES_AT_CREATE: usize = 4;

/// The data-path state of one QP.
///
/// `repr(C)`, its fields in this order, so that what the packet path reads for every
/// message sits together at the front: its list state, counters and QP state (the first
/// cache line), then the context (its per-message fields first), the responder, and
/// the requester (its per-message fields first, the READ/atomic state last). A QP
/// whose state is cold (thousands of QPs used in turn) so costs a few cache lines per
/// message, not one per field.
#[repr(C)]
pub struct QpRt {
    /// Its place on the engine's lists.
    sched: QpSched,
    /// RQ WQEs consumed (counter).
    pub rq_ci: u32,
    /// RQ WQEs the doorbell record showed posted at its last read and not consumed
    /// since: the device reads the record again only when these are used up
    /// ([`recv::take`]), as a ConnectX does.
    pub rq_known: u32,
    /// Its state (mirrors the firmware's).
    pub state: QpcState,
    /// Its context.
    pub cfg: QpCfg,
    /// Responder.
    pub resp: Resp,
    /// Requester.
    pub sq: Sq,
}

impl QpRt {
    fn new(cfg: QpCfg, state: QpcState, id: u64) -> QpRt {
        QpRt {
            sq: Sq {
                next_psn: Psn::new(cfg.sq_psn),
                una: Psn::new(cfg.sq_psn),
                psn_hi: Psn::new(cfg.sq_psn),
                retries_left: cfg.retry_count,
                rnr_left: cfg.rnr_retry,
                txd: WqeData {
                    sges: Vec::with_capacity(if cfg.sq_size != 0 { SGES_AT_CREATE } else { 0 }),
                    ..WqeData::default()
                },
                ..Sq::default()
            },
            resp: Resp {
                epsn: Psn::new(cfg.rq_psn),
                rwqe: RecvWqe {
                    sges: Vec::with_capacity(if cfg.rq_size != 0 || cfg.srqn.is_some() {
                        SGES_AT_CREATE
                    } else {
                        0
                    }),
                    ..RecvWqe::default()
                },
                ..Resp::default()
            },
            cfg,
            state,
            rq_ci: 0,
            rq_known: 0,
            sched: QpSched {
                id,
                ..QpSched::default()
            },
        }
    }

    /// Completion for a requester CQE of flight `f` with `kind`.
    pub fn req_completion(&self, f: &Flight, kind: CqeKind, now: u64) -> Completion {
        Completion {
            kind,
            qpn: self.cfg.qpn,
            wqe_counter: f.w.index,
            byte_cnt: f.w.len.min(u64::from(u32::MAX)) as u32,
            imm: 0,
            rqpn: 0,
            uidx: self.cfg.user_index,
            se: false,
            timestamp: now,
            grh: false,
        }
    }

    /// Completion for a responder CQE.
    pub fn resp_completion(
        &self,
        kind: CqeKind,
        counter: u32,
        byte_cnt: u64,
        now: u64,
    ) -> Completion {
        Completion {
            kind,
            qpn: self.cfg.qpn,
            wqe_counter: counter as u16,
            byte_cnt: byte_cnt.min(u64::from(u32::MAX)) as u32,
            imm: 0,
            rqpn: self.cfg.remote_qpn,
            uidx: self.cfg.user_index,
            se: false,
            timestamp: now,
            grh: false,
        }
    }

    /// Moves the QP to the error state (in the firmware too) and flushes everything
    /// outstanding. Already in error: nothing happens.
    pub fn to_error(&mut self, cx: &mut Ctx) {
        if self.state == QpcState::Err {
            return;
        }
        self.state = QpcState::Err;
        cx.stats.qp_errors += 1;
        cx.fw.set_qp_state(self.cfg.qpn, QpcState::Err);
        self.flush(cx);
    }

    /// Flushes every outstanding send and receive WQE (`WR_FLUSH_ERR`), in order.
    pub fn flush(&mut self, cx: &mut Ctx) {
        while let Some(f) = self.sq.wqes.pop_front() {
            let kind = CqeKind::Err {
                req: true,
                syndrome: MLX5_CQE_SYNDROME_WR_FLUSH_ERR,
                vendor: VENDOR_FLUSH,
                sop: f.w.opcode,
            };
            let c = self.req_completion(&f, kind, cx.now);
            cx.post_cqe(self.cfg.cqn_snd, &c);
        }
        cx.flights.put(&mut self.sq.wqes);
        self.sq.tx = 0;
        self.sq.reads_out = 0;
        self.sq.stalled = false;
        self.sq.rnr_until = None;
        self.sq.ack_deadline = None;
        self.sq.retry_psn = None;
        self.sq.txd.pos = None;
        self.sq.rxd.pos = None;
        self.sq.req_scat = None;
        self.flush_sq_ring(cx);
        if self.resp.rwqe.active {
            self.resp.rwqe.active = false;
            let c = self.resp_completion(
                CqeKind::Err {
                    req: false,
                    syndrome: MLX5_CQE_SYNDROME_WR_FLUSH_ERR,
                    vendor: VENDOR_FLUSH,
                    sop: 0,
                },
                self.resp.rwqe.counter,
                0,
                cx.now,
            );
            cx.post_cqe(self.cfg.cqn_rcv, &c);
        }
        self.resp.cur = InMsg::None;
        self.flush_rq(cx);
    }

    /// Flushes send WQEs posted (doorbell record) but not fetched.
    pub fn flush_sq_ring(&mut self, cx: &mut Ctx) {
        if self.cfg.sq_size == 0 {
            return;
        }
        let Ok(db) = cx.io.read_be32(self.cfg.dbr + 4) else {
            return;
        };
        let mut left = (db.wrapping_sub(self.sq.fetched) & MASK16).min(self.cfg.sq_size);
        while left > 0 {
            let (index, opcode, wqebbs) = wqe::peek_send(cx.io, &self.cfg, self.sq.fetched);
            let wqebbs = wqebbs.min(left);
            let c = Completion {
                kind: CqeKind::Err {
                    req: true,
                    syndrome: MLX5_CQE_SYNDROME_WR_FLUSH_ERR,
                    vendor: VENDOR_FLUSH,
                    sop: opcode,
                },
                qpn: self.cfg.qpn,
                wqe_counter: index,
                byte_cnt: 0,
                imm: 0,
                rqpn: 0,
                uidx: self.cfg.user_index,
                se: false,
                timestamp: cx.now,
                grh: false,
            };
            cx.post_cqe(self.cfg.cqn_snd, &c);
            self.sq.fetched = self.sq.fetched.wrapping_add(wqebbs);
            left -= wqebbs;
        }
    }

    /// Flushes receive WQEs posted (doorbell record) but not consumed.
    pub fn flush_rq(&mut self, cx: &mut Ctx) {
        if self.cfg.rq_size == 0 {
            return;
        }
        let Ok(db) = cx.io.read_be32(self.cfg.dbr) else {
            return;
        };
        let left = (db.wrapping_sub(self.rq_ci) & MASK16).min(self.cfg.rq_size);
        for _ in 0..left {
            let c = self.resp_completion(
                CqeKind::Err {
                    req: false,
                    syndrome: MLX5_CQE_SYNDROME_WR_FLUSH_ERR,
                    vendor: VENDOR_FLUSH,
                    sop: 0,
                },
                self.rq_ci,
                0,
                cx.now,
            );
            cx.post_cqe(self.cfg.cqn_rcv, &c);
            self.rq_ci = self.rq_ci.wrapping_add(1);
        }
        // Everything posted is flushed: what was known posted is consumed.
        self.rq_known = 0;
    }

    /// Bytes of simulator memory this runtime holds: the structure and what its
    /// queues and scatter lists have allocated. Bounded by the QP's limits (in-flight
    /// WQEs by the SQ size, replay resources by the responder depth, scatter entries
    /// by the WQE size), so it does not grow with the traffic.
    pub fn footprint(&self) -> usize {
        use std::mem::size_of;
        let data = |d: &WqeData| {
            d.sges.capacity() * size_of::<Sge>()
                + d.inline.capacity()
                + d.pieces.capacity() * size_of::<wqe::Piece>()
        };
        size_of::<QpRt>()
            + self.sq.wqes.capacity() * size_of::<Flight>()
            + data(&self.sq.txd)
            + data(&self.sq.rxd)
            + self.resp.res.capacity() * size_of::<Resource>()
            + self.resp.rwqe.sges.capacity() * size_of::<Sge>()
    }

    /// The device time of the QP's next timer (RNR back-off or local ACK timeout).
    pub fn next_timer(&self) -> Option<u64> {
        match (self.sq.rnr_until, self.sq.ack_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Receive WQEs posted and not consumed.
    pub fn rq_posted(&self, io: &impl crate::iommu::CachedAccess) -> u32 {
        if self.cfg.rq_size == 0 {
            return 0;
        }
        let mut w = self.resp.dbr_win.get();
        let db = io.read_be32_cached(&mut w, self.cfg.dbr);
        self.resp.dbr_win.set(w);
        db.map(|db| (db.wrapping_sub(self.rq_ci) & MASK16).min(self.cfg.rq_size))
            .unwrap_or(0)
    }
}

/// A received RoCEv2 packet, parsed.
pub struct Pkt<'a> {
    /// Its headers.
    pub repr: &'a wire::RoceRepr,
    /// Its payload (pad excluded).
    pub payload: &'a [u8],
    /// Source IPv4 address.
    pub sip: Ipv4Addr,
}

/// Builds a [`Ctx`] from the engine's fields (disjoint from `qps` and `work`, so
/// those stay usable).
macro_rules! ctx {
    ($e:ident, $fw:expr, $io:expr, $irqs:expr, $now:expr) => {
        Ctx {
            fw: $fw,
            io: $io,
            irqs: $irqs,
            now: $now,
            cqs: &mut $e.cqs,
            net: &mut $e.net,
            stats: &mut $e.stats,
            flights: &mut $e.flights,
        }
    };
}

/// The RC or UC QP a parsed frame of transport `t` is for, after the checks every such
/// frame takes, in this order, each failure counted: the destination MAC is one of the
/// ports', the transport is RC or UC, the QP exists with that service type and a path,
/// the frame comes from the path's remote address to its local one, and the P_Key is
/// the default partition's (the only one in an Ethernet port's table).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn rc_target<'q>(
    qps: &'q mut DirectIndex<QpRt>,
    stats: &mut DataPathStats,
    macs: &[[u8; 6]],
    t: wire::Transport,
    dst_mac: &[u8; 6],
    qpn: u32,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    pkey: u16,
) -> Option<&'q mut QpRt> {
    if !macs.contains(dst_mac) {
        stats.rx_not_mine += 1;
        return None;
    }
    let st = match t {
        wire::Transport::Rc => ServiceType::Rc,
        wire::Transport::Uc => ServiceType::Uc,
        _ => {
            stats.rx_unsupported += 1;
            return None;
        }
    };
    let Some(qp) = qps.get_mut(qpn) else {
        stats.rx_no_qp += 1;
        return None;
    };
    // The packet's transport must be the QP's (an RC opcode to a UC QP is not for
    // it, and the reverse).
    if qp.cfg.st != st {
        stats.rx_no_qp += 1;
        return None;
    }
    let Some(path) = qp.cfg.path else {
        stats.rx_bad_state += 1;
        return None;
    };
    if src != path.dip || dst != path.sip {
        stats.rx_bad_addr += 1;
        return None;
    }
    if pkey & 0x7fff != 0x7fff {
        stats.rx_bad_pkey += 1;
        return None;
    }
    Some(qp)
}

/// The data-path state of a device.
pub struct Engine {
    /// QP runtimes by QPN (direct index: every received frame looks its QP up).
    qps: DirectIndex<QpRt>,
    /// CQ runtimes by CQN (direct index: one per responder CQE is looked up).
    cqs: DirectIndex<CqRt>,
    net: Net,
    stats: DataPathStats,
    /// The in-flight record buffers no QP holds ([`FlightBufs`]).
    flights: FlightBufs,
    /// The QPs with work: owing an ACK, in error, with a timer ([`sched`]).
    work: WorkLists,
    /// The identity of the next QP runtime made ([`QpSched::id`]).
    next_id: u64,
    events: Vec<DataPathEvent>,
    /// Send doorbells waiting to be serviced (deferred mode): (UAR, QPN).
    doorbells: VecDeque<(u32, u32)>,
    /// Frames received since the owed ACKs were last sent.
    since_acks: u32,
}

/// Owed ACKs go out at least once per this many received frames.
pub const ACK_BATCH: u32 = 64;

impl Engine {
    /// An engine for a device with ports of these MACs, receiving into `rx`.
    pub fn new(macs: Vec<[u8; 6]>, rx: Arc<RxQueue>, pool: Arc<FramePool>) -> Engine {
        Engine {
            qps: DirectIndex::default(),
            cqs: DirectIndex::default(),
            net: Net {
                uplink: None,
                pool,
                rx,
                macs,
                links_down: 0,
                encaps: transport::EncapCache::default(),
                outbox: Vec::with_capacity(64),
                spare: Vec::with_capacity(SPARE_BATCH),
            },
            stats: DataPathStats::default(),
            flights: FlightBufs::default(),
            work: WorkLists::default(),
            next_id: 0,
            events: Vec::new(),
            doorbells: VecDeque::new(),
            since_acks: 0,
        }
    }

    /// Counters.
    pub fn stats(&self) -> DataPathStats {
        self.stats
    }

    /// The frame pool.
    pub fn pool(&self) -> &Arc<FramePool> {
        &self.net.pool
    }

    /// Port `port` (1-based) is up or down (see [`Net::links_down`]): from the
    /// firmware's [`DataPathEvent::PortState`], and at creation.
    pub fn set_link(&mut self, port: u8, up: bool) {
        let Some(bit) = u32::from(port).checked_sub(1).filter(|b| *b < 32) else {
            return;
        };
        if up {
            self.net.links_down &= !(1 << bit);
        } else {
            self.net.links_down |= 1 << bit;
        }
    }

    /// Connects the device to a fabric (or disconnects it).
    pub fn set_uplink(&mut self, uplink: Option<Arc<dyn Uplink>>, pool: Arc<FramePool>) {
        self.net.uplink = uplink;
        self.net.pool = pool;
        // The spares go to the new pool (buffers are interchangeable).
        self.net.pool.put_all(&mut self.net.spare);
    }

    /// The ports' MAC addresses.
    pub fn macs(&self) -> &[[u8; 6]] {
        &self.net.macs
    }

    /// The data-path state of QP `qpn`, if it has any.
    pub fn qp(&self, qpn: u32) -> Option<&QpRt> {
        self.qps.get(qpn)
    }

    /// The in-flight record buffers no QP holds ([`FlightBufs`]).
    pub fn flight_bufs(&self) -> &FlightBufs {
        &self.flights
    }

    /// The runtime of CQ `cqn`, once the data path used it.
    pub fn cq(&self, cqn: u32) -> Option<&CqRt> {
        self.cqs.get(cqn)
    }

    /// Follows the firmware's QP/CQ changes (call after every command).
    pub fn sync(&mut self, fw: &mut Firmware, io: &Iommu, irqs: &Irqs, now: u64) {
        fw.take_datapath_events(&mut self.events);
        if self.events.is_empty() {
            return;
        }
        self.sync_events(fw, io, irqs, now);
        self.net.flush();
    }

    fn sync_events(&mut self, fw: &mut Firmware, io: &Iommu, irqs: &Irqs, now: u64) {
        let mut events = std::mem::take(&mut self.events);
        for ev in events.drain(..) {
            match ev {
                DataPathEvent::Reset => {
                    self.qps.clear();
                    self.flights.trim_to(0);
                    self.cqs.clear();
                    self.work.clear();
                }
                DataPathEvent::QpDestroyed(qpn) => self.forget(qpn),
                DataPathEvent::CqDestroyed(cqn) => {
                    self.cqs.remove(cqn);
                }
                DataPathEvent::CqResized(cqn) => self.cq_resized(fw, io, irqs, cqn),
                DataPathEvent::QpModified { qpn, from, to } => {
                    self.qp_modified(fw, io, irqs, now, qpn, from, to);
                }
                DataPathEvent::PortState { port, up } => self.set_link(port, up),
            }
        }
        self.events = events;
    }

    /// A MODIFY_CQ resize of `cqn`: the runtime (loaded if the data path never
    /// used the CQ) writes the resize CQE and switches buffers ([`CqRt::resize`]).
    fn cq_resized(&mut self, fw: &mut Firmware, io: &Iommu, irqs: &Irqs, cqn: u32) {
        if self.cqs.get(cqn).is_none() {
            let Some(rt) = CqRt::load(fw, cqn) else {
                return;
            };
            if self.cqs.insert(cqn, rt).is_err() {
                return;
            }
        }
        if let Some(cq) = self.cqs.get_mut(cqn) {
            cq.resize(fw, io, irqs);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn qp_modified(
        &mut self,
        fw: &mut Firmware,
        io: &Iommu,
        irqs: &Irqs,
        now: u64,
        qpn: u32,
        from: QpcState,
        to: QpcState,
    ) {
        if to == QpcState::Rst {
            self.forget(qpn);
            return;
        }
        let Some(fqp) = fw.qp(qpn) else { return };
        let cfg = QpCfg::load(fw, qpn, fqp);
        let mut cx = ctx!(self, fw, io, irqs, now);
        if self.qps.get(qpn).is_none() {
            let id = self.next_id;
            self.next_id += 1;
            if self
                .qps
                .insert(qpn, QpRt::new(cfg.clone(), from, id))
                .is_err()
            {
                // Not a 24-bit QPN: the firmware gives none such.
                return;
            }
            // Room to give back every QP's record buffer without allocating.
            cx.flights.reserve_for(self.qps.len());
        }
        let Some(qp) = self.qps.get_mut(qpn) else {
            return;
        };
        qp.cfg = cfg;
        match (from, to) {
            (QpcState::Init, QpcState::Rtr) => {
                qp.resp = Resp {
                    epsn: Psn::new(qp.cfg.rq_psn),
                    ..Resp::default()
                };
            }
            (QpcState::Rtr, QpcState::Rts) => {
                qp.sq.next_psn = Psn::new(qp.cfg.sq_psn);
                qp.sq.una = qp.sq.next_psn;
                qp.sq.psn_hi = qp.sq.next_psn;
                qp.sq.retries_left = qp.cfg.retry_count;
                qp.sq.rnr_left = qp.cfg.rnr_retry;
            }
            _ => {}
        }
        match to {
            QpcState::Err if qp.state != QpcState::Err => {
                qp.state = QpcState::Err;
                qp.flush(&mut cx);
            }
            QpcState::Rts => {
                qp.state = to;
                // WQEs posted while the QP could not send go now.
                transport::pump(qp, &mut cx);
            }
            _ => qp.state = to,
        }
        self.work.note_timer(qpn, qp);
        self.work.note_err(qpn, qp);
    }

    /// Drops QP `qpn`'s runtime: its timer goes, its list entries are stale (skipped
    /// when reached), so this costs the same whatever the number of QPs.
    fn forget(&mut self, qpn: u32) {
        if self.qps.remove(qpn).is_some() {
            self.work.timers.cancel(qpn);
            self.flights.trim_to(self.qps.len());
        }
    }

    /// A send doorbell (8-byte doorbell or the first BlueFlame chunk) for `qpn` in UAR
    /// page `uar`.
    pub fn send_doorbell(
        &mut self,
        fw: &mut Firmware,
        io: &Iommu,
        irqs: &Irqs,
        now: u64,
        uar: u32,
        qpn: u32,
    ) {
        let mut cx = ctx!(self, fw, io, irqs, now);
        let Some(qp) = self.qps.get_mut(qpn) else {
            cx.stats.stray_doorbells += 1;
            return;
        };
        if qp.cfg.uar != uar
            || !matches!(
                qp.cfg.st,
                ServiceType::Rc | ServiceType::Uc | ServiceType::Ud | ServiceType::RegUmr
            )
        {
            cx.stats.stray_doorbells += 1;
            return;
        }
        cx.stats.qp_visits += 1;
        match qp.state {
            QpcState::Rts | QpcState::Sqd => {
                cx.stats.doorbells += 1;
                transport::pump(qp, &mut cx);
            }
            QpcState::Err => {
                cx.stats.doorbells += 1;
                qp.flush_sq_ring(&mut cx);
            }
            _ => cx.stats.stray_doorbells += 1,
        }
        self.work.note_timer(qpn, qp);
        self.work.note_err(qpn, qp);
        self.net.flush();
    }

    /// Writes QP `qpn`'s data-path state into the firmware's image of its context (what
    /// QUERY_QP reports): `next_send_psn`, `next_rcv_psn`, `last_acked_psn`, the
    /// hardware SQ WQEBB and RQ WQE counters, the responder's MSN.
    pub fn export_qp(&self, fw: &mut Firmware, qpn: u32) {
        use ferroverbs_hw::control::qp::qpc;
        let Some(qp) = self.qps.get(qpn) else { return };
        let Some(f) = fw.qp_mut(qpn) else { return };
        let img = &mut f.qpc;
        let mut put = |field: ferroverbs_hw::Field, v: u64| {
            if field.fits(img.len()) {
                field.set(img, v);
            }
        };
        if matches!(qp.state, QpcState::Rts | QpcState::Sqd | QpcState::Err) {
            put(qpc::next_send_psn, u64::from(qp.sq.next_psn.value()));
            put(qpc::last_acked_psn, u64::from(qp.sq.una.sub(1).value()));
        }
        if !matches!(qp.state, QpcState::Rst | QpcState::Init) {
            put(qpc::next_rcv_psn, u64::from(qp.resp.epsn.value()));
            put(qpc::rmsn, u64::from(qp.resp.msn));
        }
        put(qpc::hw_sq_wqebb_counter, u64::from(qp.sq.fetched & MASK16));
        put(qpc::hw_rq_counter, u64::from(qp.rq_ci));
    }

    /// Queues a send doorbell for the next [`Engine::poll`].
    pub fn queue_doorbell(&mut self, uar: u32, qpn: u32) {
        self.doorbells.push_back((uar, qpn));
    }

    /// A CQ arm doorbell in UAR page `uar`.
    #[allow(clippy::too_many_arguments)]
    pub fn arm_cq(
        &mut self,
        fw: &mut Firmware,
        io: &Iommu,
        irqs: &Irqs,
        uar: u32,
        cqn: u32,
        sn: u8,
        solicited: bool,
        ci: u32,
    ) {
        if self.cqs.get(cqn).is_none() {
            let Some(rt) = CqRt::load(fw, cqn) else {
                self.stats.stray_doorbells += 1;
                return;
            };
            if self.cqs.insert(cqn, rt).is_err() {
                // Not a 24-bit CQN: the firmware gives none such.
                self.stats.stray_doorbells += 1;
                return;
            }
        }
        let Some(cq) = self.cqs.get_mut(cqn) else {
            return;
        };
        if cq.uar() != uar {
            self.stats.stray_doorbells += 1;
            return;
        }
        cq.arm(fw, io, irqs, sn, solicited, ci);
    }

    /// Processes one received frame.
    ///
    /// The common request, a one-packet RC SEND, is read by
    /// [`wire::frame::parse_rc_send_only`] (the same checks as the general parser, at
    /// fixed offsets, without building the whole header representation) and goes to
    /// [`transport::responder::on_send_only`]; every other frame, and every frame that
    /// parser does not take, is parsed by [`wire::frame::parse`] as before. Both take
    /// the same QP lookup and checks (`rc_target`) and the same bookkeeping after.
    pub fn receive(&mut self, fw: &mut Firmware, io: &Iommu, irqs: &Irqs, now: u64, frame: &[u8]) {
        self.stats.rx_frames += 1;
        self.stats.rx_bytes += frame.len() as u64;
        if self.net.port_down(frame, 0) {
            self.stats.rx_link_down += 1;
            return;
        }
        if let Some(s) = wire::frame::parse_rc_send_only(frame) {
            let qpn = s.bth.dest_qp;
            let mut cx = ctx!(self, fw, io, irqs, now);
            let Some(qp) = rc_target(
                &mut self.qps,
                cx.stats,
                &cx.net.macs,
                wire::Transport::Rc,
                &s.dst_mac,
                qpn,
                s.src_addr,
                s.dst_addr,
                s.bth.pkey,
            ) else {
                return;
            };
            transport::responder::on_send_only(qp, &mut cx, &s);
            self.work.after_packet(qpn, qp, true);
            return self.ack_batch(fw, io, irqs, now);
        }
        self.receive_general(fw, io, irqs, now, frame);
    }

    /// [`Engine::receive`] of a frame the one-packet SEND parser did not take.
    #[inline(never)]
    fn receive_general(
        &mut self,
        fw: &mut Firmware,
        io: &Iommu,
        irqs: &Irqs,
        now: u64,
        frame: &[u8],
    ) {
        let (repr, payload) = match wire::frame::parse(frame) {
            Ok(x) => x,
            Err(wire::Error::Icrc { .. }) => {
                self.stats.rx_bad_icrc += 1;
                self.stats.rx_error_bytes += frame.len() as u64;
                return;
            }
            Err(_) => {
                self.stats.rx_malformed += 1;
                self.stats.rx_error_bytes += frame.len() as u64;
                return;
            }
        };
        let op = repr.roce.opcode();
        if op.transport() == wire::Transport::Ud {
            if !self.net.macs.contains(&repr.ethernet.dst_addr.0) {
                self.stats.rx_not_mine += 1;
                return;
            }
            let ip_header = frame.get(wire::frame::IPV4_OFFSET..wire::frame::IPV4_OFFSET + 20);
            self.receive_ud(fw, io, irqs, now, &repr, payload, ip_header.unwrap_or(&[]));
            return;
        }
        let qpn = repr.roce.bth.dest_qp;
        let mut cx = ctx!(self, fw, io, irqs, now);
        let Some(qp) = rc_target(
            &mut self.qps,
            cx.stats,
            &cx.net.macs,
            op.transport(),
            &repr.ethernet.dst_addr.0,
            qpn,
            repr.ipv4.src_addr,
            repr.ipv4.dst_addr,
            repr.roce.bth.pkey,
        ) else {
            return;
        };
        let pkt = Pkt {
            repr: &repr.roce,
            payload,
            sip: repr.ipv4.src_addr,
        };
        let request = op.is_request();
        if request {
            transport::responder::on_request(qp, &mut cx, &pkt);
        } else {
            transport::completer::on_response(qp, &mut cx, &pkt);
        }
        self.work.after_packet(qpn, qp, request);
        self.ack_batch(fw, io, irqs, now);
    }

    /// What follows a packet given to an RC or UC QP (after the QP joined the lists
    /// of QPs owing an ACK, with a timer running, in error: `WorkLists::after_packet`):
    /// the owed ACKs go out every [`ACK_BATCH`] frames.
    #[inline(always)]
    fn ack_batch(&mut self, fw: &mut Firmware, io: &Iommu, irqs: &Irqs, now: u64) {
        self.since_acks += 1;
        if self.since_acks >= ACK_BATCH {
            self.flush_acks(fw, io, irqs, now);
        }
    }

    /// A checked UD frame: to a UD QP, P_Key checked, then the UD responder.
    #[allow(clippy::too_many_arguments)]
    fn receive_ud(
        &mut self,
        fw: &mut Firmware,
        io: &Iommu,
        irqs: &Irqs,
        now: u64,
        repr: &wire::frame::Repr,
        payload: &[u8],
        ip_header: &[u8],
    ) {
        let mut qpn = repr.roce.bth.dest_qp;
        if qpn == GSI_QPN {
            // QP 1 is the QP1 of the port the frame arrived on (IBTA Vol. 1 13.5.1;
            // mlx5: the QP created with `qpc.st` QP1).
            let port = (self.net.macs.iter())
                .position(|m| *m == repr.ethernet.dst_addr.0)
                .map(|i| i + 1);
            match port.and_then(|p| fw.gsi_qpn(p)) {
                Some(n) => qpn = n,
                None => {
                    self.stats.rx_no_qp += 1;
                    return;
                }
            }
        }
        let mut cx = ctx!(self, fw, io, irqs, now);
        let Some(qp) = self.qps.get_mut(qpn) else {
            cx.stats.rx_no_qp += 1;
            return;
        };
        cx.stats.qp_visits += 1;
        if qp.cfg.st != ServiceType::Ud {
            cx.stats.rx_unsupported += 1;
            return;
        }
        if repr.roce.bth.pkey & 0x7fff != 0x7fff {
            cx.stats.rx_bad_pkey += 1;
            return;
        }
        let pkt = transport::ud::UdPkt {
            roce: &repr.roce,
            payload,
            ip_header,
        };
        transport::ud::on_packet(qp, &mut cx, &pkt);
        self.work.note_err(qpn, qp);
    }

    /// Sends the ACKs owed (call when a batch of received frames is done).
    /// Also hands every frame built by the received frames (responses, requests a
    /// completion let go) to the fabric.
    pub fn flush_acks(&mut self, fw: &mut Firmware, io: &Iommu, irqs: &Irqs, now: u64) {
        self.since_acks = 0;
        if !self.work.acks.is_empty() {
            let mut cx = ctx!(self, fw, io, irqs, now);
            for (qpn, id) in self.work.acks.drain(..) {
                if let Some(qp) = self.qps.get_mut(qpn).filter(|q| q.sched.id == id) {
                    cx.stats.qp_visits += 1;
                    qp.sched.ack_listed = false;
                    transport::responder::flush_ack(qp, &mut cx);
                }
            }
        }
        self.net.flush();
    }

    /// Fault injection: CQ `cqn` gets the CQE written `back` entries ago again
    /// ([`cq::CqRt::repeat`]), as a device that repeats a completion. Returns whether
    /// it was written.
    pub fn repeat_cqe(
        &mut self,
        fw: &mut Firmware,
        io: &Iommu,
        irqs: &Irqs,
        cqn: u32,
        back: u32,
    ) -> bool {
        match self.cqs.get_mut(cqn) {
            Some(cq) => cq.repeat(fw, io, irqs, back) == Pushed::Written,
            None => false,
        }
    }

    /// Whether some QP owes an ACK that [`Engine::flush_acks`] would send.
    pub fn acks_owed(&self) -> bool {
        !self.work.acks.is_empty()
    }

    /// Periodic work: queued send doorbells, RNR timers that expired, receive WQEs
    /// posted to QPs in error.
    /// Returns how many things it did.
    pub fn poll(&mut self, fw: &mut Firmware, io: &Iommu, irqs: &Irqs, now: u64) -> usize {
        let mut work = 0;
        while let Some((uar, qpn)) = self.doorbells.pop_front() {
            self.send_doorbell(fw, io, irqs, now, uar, qpn);
            work += 1;
        }
        work += self.fire_timers(fw, io, irqs, now);
        if !self.work.errs.is_empty() {
            let mut errs = std::mem::take(&mut self.work.errs);
            let mut cx = ctx!(self, fw, io, irqs, now);
            let qps = &mut self.qps;
            let before = cx.stats.flushed;
            errs.retain(|&(qpn, id)| match qps.get_mut(qpn) {
                Some(qp) if qp.sched.id == id => {
                    cx.stats.qp_visits += 1;
                    if qp.state == QpcState::Err {
                        qp.flush_rq(&mut cx);
                        true
                    } else {
                        qp.sched.err_listed = false;
                        false
                    }
                }
                _ => false,
            });
            work += (cx.stats.flushed - before) as usize;
            // Keep the list's buffer (no allocation in steady state).
            self.work.errs = errs;
        }
        self.net.flush();
        work
    }

    /// Whether [`Engine::poll`] has anything to do besides received frames and timers
    /// (see [`Engine::next_deadline`]): queued doorbells, QPs in error whose receive
    /// queue is watched.
    pub fn has_periodic(&self) -> bool {
        !self.doorbells.is_empty() || !self.work.errs.is_empty()
    }

    /// The timers' part of [`Engine::poll`]: every QP whose timer heap entry came due
    /// is looked at; the expired RNR back-offs and local ACK timeouts fire, in the
    /// order the QPs started watching timers ([`sched`]); an entry that came due
    /// before its QP's real deadline (which moved later since) is queued again at
    /// that deadline. Then the QPs whose timers stopped leave the watched set.
    /// Returns the timers fired.
    fn fire_timers(&mut self, fw: &mut Firmware, io: &Iommu, irqs: &Irqs, now: u64) -> usize {
        let mut work = 0;
        let w = &mut self.work;
        while let Some((qpn, _)) = w.timers.pop_expired(now) {
            let Some(qp) = self.qps.get_mut(qpn) else {
                continue;
            };
            self.stats.qp_visits += 1;
            // The heap holds no entry of it any more.
            qp.sched.wake = None;
            let Some(seq) = qp.sched.timer_seq else {
                continue;
            };
            match qp.next_timer() {
                Some(t) if t <= now => w.due.push((seq, qpn)),
                Some(t) => w.wake_by(qpn, qp, t),
                // Stopped: it leaves at the pass over `leaving` below.
                None => {}
            }
        }
        if !w.due.is_empty() {
            // Ranks are unique: the order is the watched QPs' order.
            w.due.sort_unstable();
            let mut due = std::mem::take(&mut w.due);
            let mut cx = ctx!(self, fw, io, irqs, now);
            for &(_, qpn) in &due {
                let Some(qp) = self.qps.get_mut(qpn) else {
                    continue;
                };
                if qp.sq.rnr_until.is_some_and(|t| t <= now) {
                    qp.sq.rnr_until = None;
                    work += 1;
                    transport::requester::pump(qp, &mut cx);
                }
                if qp.sq.ack_deadline.is_some_and(|t| t <= now) {
                    work += 1;
                    transport::completer::on_ack_timeout(qp, &mut cx);
                }
                match qp.next_timer() {
                    Some(t) => self.work.wake_by(qpn, qp, t),
                    None => qp.sched.timer_seq = None,
                }
            }
            due.clear();
            // Keep the scratch buffer (no allocation in steady state).
            self.work.due = due;
        }
        let w = &mut self.work;
        for (qpn, id) in w.leaving.drain(..) {
            let Some(qp) = self.qps.get_mut(qpn).filter(|q| q.sched.id == id) else {
                continue;
            };
            self.stats.qp_visits += 1;
            qp.sched.leaving = false;
            if qp.next_timer().is_none() {
                qp.sched.timer_seq = None;
            }
        }
        work
    }

    /// The earliest device time at which a timer expires (exact: the timer heap's
    /// entries that came before their QPs' real deadlines are moved to them first).
    pub fn next_deadline(&mut self) -> Option<u64> {
        loop {
            let (qpn, at) = self.work.timers.peek()?;
            let qp = self.qps.get_mut(qpn);
            let real = qp
                .as_deref()
                .filter(|q| q.sched.timer_seq.is_some())
                .and_then(QpRt::next_timer);
            match real {
                Some(t) if t == at => return Some(at),
                Some(t) => self.work.timers.arm(qpn, t),
                None => {
                    self.work.timers.cancel(qpn);
                }
            }
            if let Some(qp) = qp {
                qp.sched.wake = self.work.timers.deadline(qpn);
            }
        }
    }

    /// A device time at or before [`Engine::next_deadline`] (the earliest entry of the
    /// timer heap, without moving any: O(1)); when it comes, [`Engine::poll`] fires
    /// what expired and moves the rest. For a device thread's wait.
    pub fn wake_at(&self) -> Option<u64> {
        self.work.timers.next()
    }
}

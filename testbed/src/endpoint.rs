//! Connected pairs of queue pairs, each side with its CQ and registered buffer.

use ferroverbs::verbs::{
    AccessFlags, AddressHandle, AddressVector, CompletionQueue, MemoryRegion, Mtu, QpAttr, QpCap,
    QpInitAttr, QpState, QpType, QueuePair, RemoteAddr, RtrAttr, RtsAttr, UdInitAttr,
};
use ferroverbs::GidEntry;
use ferroverbs_sim::SimBus;

use crate::bed::{Bed, Nic};
use crate::Error;

/// The transport of a pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Reliable connection.
    Rc,
    /// Unreliable connection.
    Uc,
    /// Unreliable datagram (each side has an address handle of the other).
    Ud,
}

/// What [`Bed::pair`] creates: the transport, queue sizes, buffers and the
/// attributes of the transitions to RTS.
#[derive(Clone, Debug)]
pub struct PairConfig {
    /// The transport.
    pub transport: Transport,
    /// Each QP's capacities.
    pub cap: QpCap,
    /// Entries of each side's CQ (shared by its send and receive queues).
    pub cq_entries: u32,
    /// Bytes of each side's registered buffer.
    pub buf_len: usize,
    /// The remote access the QPs (RC, UC) and the buffers grant; the buffers also get
    /// local write.
    pub access: AccessFlags,
    /// The path MTU (RC, UC).
    pub mtu: Mtu,
    /// The Q_Key (UD).
    pub qkey: u32,
    /// The ACK timeout exponent, transport and RNR retries, READs/atomics in flight
    /// (RC); `sq_psn` is replaced by the pair's PSNs.
    pub rts: RtsAttr,
    /// The RNR NAK timer code the responder advertises (RC).
    pub min_rnr_timer: u8,
}

impl PairConfig {
    /// RC: 64-entry queues, a 4 KiB buffer with remote read, write and atomic access,
    /// path MTU 1024, RtsAttr's typical values with 4 READs/atomics in flight.
    pub fn rc() -> Self {
        PairConfig {
            transport: Transport::Rc,
            cap: QpCap::default(),
            cq_entries: 256,
            buf_len: 4096,
            access: AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            mtu: Mtu::Mtu1024,
            qkey: 0,
            rts: RtsAttr {
                max_rd_atomic: 4,
                ..RtsAttr::new(0)
            },
            min_rnr_timer: 1,
        }
    }

    /// UC: as [`PairConfig::rc`] with remote write only (UC has no READ or atomics).
    pub fn uc() -> Self {
        PairConfig {
            transport: Transport::Uc,
            access: AccessFlags::REMOTE_WRITE,
            ..PairConfig::rc()
        }
    }

    /// UD: as [`PairConfig::rc`] with Q_Key 0x11111111 and no remote access.
    pub fn ud() -> Self {
        PairConfig {
            transport: Transport::Ud,
            access: AccessFlags::empty(),
            qkey: 0x1111_1111,
            ..PairConfig::rc()
        }
    }

    /// The same with each side's buffer `len` bytes long.
    pub fn buf_len(mut self, len: usize) -> Self {
        self.buf_len = len;
        self
    }

    /// The same with QP capacities `cap`.
    pub fn cap(mut self, cap: QpCap) -> Self {
        self.cap = cap;
        self
    }
}

/// One side of a [`Pair`]: its QP, its CQ, its registered buffer and what it knows of
/// the peer.
pub struct Endpoint {
    /// The queue pair, in RTS.
    pub qp: QueuePair<'static, SimBus>,
    /// The CQ of both its send and receive queues.
    pub cq: CompletionQueue<'static, SimBus>,
    /// Its registered buffer, [`PairConfig::buf_len`] bytes.
    pub mr: MemoryRegion<'static, SimBus>,
    /// UD: an address handle of the peer's port.
    pub ah: Option<AddressHandle<'static, SimBus>>,
    /// The peer QP's number.
    pub peer_qpn: u32,
    /// The Q_Key of UD sends to the peer.
    pub qkey: u32,
    /// This side's GID and MAC.
    pub gid: GidEntry,
    /// The index of its NIC in the bed.
    pub nic: usize,
}

impl Endpoint {
    /// The address and key of this side's buffer at `offset`, for the peer's RDMA
    /// READ, WRITE and atomics.
    pub fn remote(&self, offset: usize) -> RemoteAddr {
        self.mr.remote(offset)
    }
}

/// Two connected queue pairs: `a` on one NIC, `b` on another (or the same).
pub struct Pair {
    /// The first side.
    pub a: Endpoint,
    /// The second side.
    pub b: Endpoint,
}

/// The PSN `a` sends first (and `b` expects), and the reverse.
const PSN_A: u32 = 0x100;
const PSN_B: u32 = 0x200;

impl Bed {
    /// Creates a QP on NIC `a` and one on NIC `b` (which may be the same NIC) as
    /// `cfg` says and takes both to RTS towards each other.
    ///
    /// # Panics
    ///
    /// If the bed has no NIC `a` or `b`.
    pub fn pair(&self, a: usize, b: usize, cfg: &PairConfig) -> Result<Pair, Error> {
        let (na, nb) = (&self.nics[a], &self.nics[b]);
        let mut ea = endpoint(na, a, nb, cfg)?;
        let mut eb = endpoint(nb, b, na, cfg)?;
        ea.peer_qpn = eb.qp.qp_num();
        eb.peer_qpn = ea.qp.qp_num();
        to_rts(&mut ea, &nb.gid, (PSN_B, PSN_A), cfg)?;
        to_rts(&mut eb, &na.gid, (PSN_A, PSN_B), cfg)?;
        Ok(Pair { a: ea, b: eb })
    }

    /// An RC pair between NICs 0 and 1 with [`PairConfig::rc`].
    pub fn rc_pair(&self) -> Result<Pair, Error> {
        self.pair(0, 1, &PairConfig::rc())
    }
}

/// The objects of one side on `nic` (index `i`), the QP still in RESET.
fn endpoint(nic: &Nic, i: usize, peer: &Nic, cfg: &PairConfig) -> Result<Endpoint, Error> {
    let cq = nic.ctx.create_cq(cfg.cq_entries)?;
    let init = match cfg.transport {
        Transport::Rc => QpInitAttr::new(&cq, &cq, cfg.cap),
        Transport::Uc => QpInitAttr::new(&cq, &cq, cfg.cap).with_type(QpType::Uc),
        Transport::Ud => QpInitAttr::ud(&cq, &cq, cfg.cap),
    };
    let qp = nic.pd.create_qp(&init)?;
    let mr = nic
        .pd
        .alloc_mr(cfg.buf_len, AccessFlags::LOCAL_WRITE | cfg.access)?;
    let ah = match cfg.transport {
        Transport::Ud => Some(
            nic.pd
                .create_ah(1, &AddressVector::new(peer.gid.gid, peer.gid.mac, 0))?,
        ),
        _ => None,
    };
    Ok(Endpoint {
        qp,
        cq,
        mr,
        ah,
        peer_qpn: 0,
        qkey: cfg.qkey,
        gid: nic.gid,
        nic: i,
    })
}

/// RESET → INIT → RTR → RTS towards `peer`; `psn` = (expected, first sent).
fn to_rts(
    e: &mut Endpoint,
    peer: &GidEntry,
    psn: (u32, u32),
    cfg: &PairConfig,
) -> Result<(), Error> {
    let q = &mut e.qp;
    let av = AddressVector::new(peer.gid, peer.mac, 0);
    match cfg.transport {
        Transport::Rc => {
            q.to_init(1, cfg.access)?;
            q.to_rtr(&RtrAttr {
                av,
                path_mtu: cfg.mtu,
                dest_qpn: e.peer_qpn,
                rq_psn: psn.0,
                max_dest_rd_atomic: cfg.rts.max_rd_atomic,
                min_rnr_timer: cfg.min_rnr_timer,
            })?;
            Ok(q.to_rts(&RtsAttr {
                sq_psn: psn.1,
                ..cfg.rts
            })?)
        }
        Transport::Uc => {
            // UC's RTR takes no READ/atomic or RNR attributes (IBTA Vol. 1 11.2.4.2,
            // as Linux's ib_modify_qp_is_ok table has it).
            q.to_init(1, cfg.access)?;
            q.modify(
                QpState::Rtr,
                &QpAttr::new()
                    .av(av)
                    .path_mtu(cfg.mtu)
                    .dest_qpn(e.peer_qpn)
                    .rq_psn(psn.0),
            )?;
            Ok(q.modify(QpState::Rts, &QpAttr::new().sq_psn(psn.1))?)
        }
        Transport::Ud => {
            q.to_init_ud(&UdInitAttr::new(1, cfg.qkey))?;
            q.to_rtr_ud()?;
            Ok(q.to_rts_ud(psn.1)?)
        }
    }
}

//! QP states, transitions and attributes, and which attributes each RC and UD
//! transition requires and accepts (IB spec 1.4 §11.2.5, as `ibv_modify_qp` and Linux's
//! `ib_modify_qp_is_ok` table state them; `rocev2-wire.md` §5.1), and how they map onto
//! the qpc fields and `opt_param_mask` bits of the mlx5 modify commands
//! (`mlx5-controlpath.md` §4.6-4.7).

use std::fmt;

use super::{AccessFlags, Error, QpCap, Result};
use crate::ring::QpType;
use crate::Mtu;

/// A QP state (`ibv_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Reset: just created, or reset; nothing is processed.
    Reset,
    /// Initialized: receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained.
    Sqd,
    /// Send queue error.
    Sqe,
    /// Error: outstanding and new work requests complete with `WrFlushErr`.
    Err,
}

impl QpState {
    /// Decodes qpc `state` (`MLX5_QPC_STATE_*`, and the kernel's 5 for SQD).
    pub fn from_qpc(v: u8) -> Option<QpState> {
        Some(match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqe,
            5 | 7 => QpState::Sqd,
            6 => QpState::Err,
            _ => return None,
        })
    }

    /// Whether send requests may be posted (rdma-core allows it once the QP has
    /// reached RTS: RTS, SQD, SQE and ERR, where they are flushed).
    pub fn can_send(self) -> bool {
        matches!(
            self,
            QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Err
        )
    }

    /// Whether receive requests may be posted (every state but RESET).
    pub fn can_recv(self) -> bool {
        self != QpState::Reset
    }
}

/// A QP state transition (the modify commands of the PRM).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transition {
    /// RESET to INIT (`RST2INIT_QP`).
    ResetToInit,
    /// INIT to INIT (`INIT2INIT_QP`).
    InitToInit,
    /// INIT to RTR (`INIT2RTR_QP`).
    InitToRtr,
    /// RTR to RTS (`RTR2RTS_QP`).
    RtrToRts,
    /// RTS to RTS (`RTS2RTS_QP`).
    RtsToRts,
    /// SQD to RTS (`SQD_RTS_QP`).
    SqdToRts,
    /// Any state to ERR (`2ERR_QP`).
    ToErr,
    /// Any state to RESET (`2RST_QP`).
    ToReset,
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transition::ResetToInit => "RESET->INIT",
            Transition::InitToInit => "INIT->INIT",
            Transition::InitToRtr => "INIT->RTR",
            Transition::RtrToRts => "RTR->RTS",
            Transition::RtsToRts => "RTS->RTS",
            Transition::SqdToRts => "SQD->RTS",
            Transition::ToErr => "->ERR",
            Transition::ToReset => "->RESET",
        })
    }
}

impl Transition {
    /// The transition from `from` to `to`, if there is one.
    pub fn between(from: QpState, to: QpState) -> Option<Transition> {
        use QpState as S;
        Some(match (from, to) {
            (_, S::Reset) => Transition::ToReset,
            (_, S::Err) => Transition::ToErr,
            (S::Reset, S::Init) => Transition::ResetToInit,
            (S::Init, S::Init) => Transition::InitToInit,
            (S::Init, S::Rtr) => Transition::InitToRtr,
            (S::Rtr, S::Rts) => Transition::RtrToRts,
            (S::Rts, S::Rts) => Transition::RtsToRts,
            (S::Sqd, S::Rts) => Transition::SqdToRts,
            _ => return None,
        })
    }

    /// The state after the transition.
    pub fn target(self) -> QpState {
        match self {
            Transition::ResetToInit | Transition::InitToInit => QpState::Init,
            Transition::InitToRtr => QpState::Rtr,
            Transition::RtrToRts | Transition::RtsToRts | Transition::SqdToRts => QpState::Rts,
            Transition::ToErr => QpState::Err,
            Transition::ToReset => QpState::Reset,
        }
    }

    /// The attributes the transition requires on a QP of type `ty` (`ibv_modify_qp(3)`,
    /// Linux `qp_state_table`): RC as [`Transition::required`]; UC without the RC-only
    /// ones (no `max_dest_rd_atomic` or `min_rnr_timer` at INIT→RTR, no `timeout`,
    /// `retry_cnt`, `rnr_retry` or `max_rd_atomic` at RTR→RTS); UD with the Q_Key.
    pub fn required_for(self, ty: QpType) -> &'static [Attribute] {
        use Attribute::*;
        match (ty, self) {
            (QpType::Ud, Transition::ResetToInit) => &[PkeyIndex, Port, Qkey],
            (QpType::Ud, Transition::RtrToRts) => &[SqPsn],
            (QpType::Ud, _) => &[],
            (QpType::Uc, Transition::InitToRtr) => &[AddressVector, PathMtu, DestQpn, RqPsn],
            (QpType::Uc, Transition::RtrToRts) => &[SqPsn],
            _ => self.required(),
        }
    }

    /// The attributes the transition accepts besides the required ones on a QP of
    /// type `ty`: RC as [`Transition::optional`]; UD: the Q_Key and the P_Key index
    /// where the mlx5 commands take them; UC without `min_rnr_timer` and the
    /// READ/atomic depths, retry counts and timeout (SQD→RTS: access, P_Key index and
    /// the address vector, Linux's UC row of `qp_state_table`).
    pub fn optional_for(self, ty: QpType) -> &'static [Attribute] {
        use Attribute::*;
        match (ty, self) {
            (QpType::Ud, Transition::InitToInit) => &[PkeyIndex, Port, Qkey],
            (QpType::Ud, Transition::InitToRtr | Transition::SqdToRts) => &[PkeyIndex, Qkey],
            (QpType::Ud, Transition::RtrToRts | Transition::RtsToRts) => &[Qkey],
            (QpType::Ud, _) => &[],
            (QpType::Uc, Transition::RtrToRts | Transition::RtsToRts) => &[AccessFlags],
            (QpType::Uc, Transition::SqdToRts) => &[AccessFlags, PkeyIndex, AddressVector],
            _ => self.optional(),
        }
    }

    /// The attributes the transition requires (RC).
    pub fn required(self) -> &'static [Attribute] {
        use Attribute::*;
        match self {
            Transition::ResetToInit => &[PkeyIndex, Port, AccessFlags],
            Transition::InitToRtr => &[
                AddressVector,
                PathMtu,
                DestQpn,
                RqPsn,
                MaxDestRdAtomic,
                MinRnrTimer,
            ],
            Transition::RtrToRts => &[Timeout, RetryCnt, RnrRetry, SqPsn, MaxRdAtomic],
            _ => &[],
        }
    }

    /// The attributes the transition accepts besides the required ones (RC, as far as
    /// the mlx5 commands can carry them: `opt_param_mask` of Linux `opt_mask`).
    pub fn optional(self) -> &'static [Attribute] {
        use Attribute::*;
        match self {
            Transition::InitToInit => &[PkeyIndex, Port, AccessFlags],
            Transition::InitToRtr => &[AccessFlags, PkeyIndex],
            Transition::RtrToRts | Transition::RtsToRts => &[AccessFlags, MinRnrTimer],
            Transition::SqdToRts => &[
                AccessFlags,
                MinRnrTimer,
                PkeyIndex,
                AddressVector,
                MaxRdAtomic,
                MaxDestRdAtomic,
                RetryCnt,
                RnrRetry,
                Timeout,
            ],
            _ => &[],
        }
    }
}

/// A QP attribute (`ibv_qp_attr_mask` bit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Attribute {
    /// `IBV_QP_PKEY_INDEX`.
    PkeyIndex,
    /// `IBV_QP_PORT`.
    Port,
    /// `IBV_QP_ACCESS_FLAGS`.
    AccessFlags,
    /// `IBV_QP_AV`.
    AddressVector,
    /// `IBV_QP_PATH_MTU`.
    PathMtu,
    /// `IBV_QP_DEST_QPN`.
    DestQpn,
    /// `IBV_QP_RQ_PSN`.
    RqPsn,
    /// `IBV_QP_MAX_DEST_RD_ATOMIC`.
    MaxDestRdAtomic,
    /// `IBV_QP_MIN_RNR_TIMER`.
    MinRnrTimer,
    /// `IBV_QP_SQ_PSN`.
    SqPsn,
    /// `IBV_QP_TIMEOUT`.
    Timeout,
    /// `IBV_QP_RETRY_CNT`.
    RetryCnt,
    /// `IBV_QP_RNR_RETRY`.
    RnrRetry,
    /// `IBV_QP_MAX_QP_RD_ATOMIC`.
    MaxRdAtomic,
    /// `IBV_QP_QKEY` (UD).
    Qkey,
}

impl fmt::Display for Attribute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Attribute::PkeyIndex => "pkey_index",
            Attribute::Port => "port",
            Attribute::AccessFlags => "access_flags",
            Attribute::AddressVector => "address vector",
            Attribute::PathMtu => "path_mtu",
            Attribute::DestQpn => "dest_qpn",
            Attribute::RqPsn => "rq_psn",
            Attribute::MaxDestRdAtomic => "max_dest_rd_atomic",
            Attribute::MinRnrTimer => "min_rnr_timer",
            Attribute::SqPsn => "sq_psn",
            Attribute::Timeout => "timeout",
            Attribute::RetryCnt => "retry_cnt",
            Attribute::RnrRetry => "rnr_retry",
            Attribute::MaxRdAtomic => "max_rd_atomic",
            Attribute::Qkey => "qkey",
        })
    }
}

/// The RoCE v2 path to the peer (`ibv_ah_attr` with its GRH, plus the Ethernet facts a
/// userspace driver without the kernel's neighbour table must be told).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AddressVector {
    /// The peer's GID (an IPv4-mapped `::ffff:a.b.c.d` or an IPv6 address).
    pub dgid: [u8; 16],
    /// Index of the local GID (source address) in the port's GID table.
    pub sgid_index: u8,
    /// The peer's (or the next hop's) MAC address.
    pub dmac: [u8; 6],
    /// IP hop limit / TTL (the kernel uses 64 when given less than 2).
    pub hop_limit: u8,
    /// IP traffic class (DSCP << 2 | ECN).
    pub traffic_class: u8,
    /// IPv6 flow label (20 bits).
    pub flow_label: u32,
    /// Service level: the Ethernet priority (0-7).
    pub sl: u8,
    /// The UDP source port; `None` derives one in the RoCE v2 range 0xc000-0xffff as
    /// Linux does: from `flow_label` when non-zero, else (on a connected QP) from
    /// the flow label of the two QP numbers (`mlx5_set_path_udp_sport`).
    pub udp_sport: Option<u16>,
}

impl AddressVector {
    /// A path to `dgid` / `dmac` from local GID `sgid_index`, hop limit 64, best
    /// effort.
    pub fn new(dgid: [u8; 16], dmac: [u8; 6], sgid_index: u8) -> Self {
        AddressVector {
            dgid,
            sgid_index,
            dmac,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            sl: 0,
            udp_sport: None,
        }
    }
}

/// Attributes of a QP modification (`ibv_qp_attr` and its mask in one: each field
/// that is `Some` is given). Builder methods set one field each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpAttr {
    /// The P_Key index (0: RoCE ports have one P_Key).
    pub pkey_index: Option<u16>,
    /// The port (1-based).
    pub port: Option<u8>,
    /// What peers may do: REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC.
    pub access: Option<AccessFlags>,
    /// The path to the peer.
    pub av: Option<AddressVector>,
    /// The path MTU; at most the port's active MTU.
    pub path_mtu: Option<Mtu>,
    /// The peer's QP number.
    pub dest_qpn: Option<u32>,
    /// The first PSN expected from the peer (24 bits).
    pub rq_psn: Option<u32>,
    /// RDMA READs and atomics the peer may have outstanding at this QP.
    pub max_dest_rd_atomic: Option<u8>,
    /// The RNR NAK timer code (5 bits, IB spec table 45).
    pub min_rnr_timer: Option<u8>,
    /// The first PSN sent (24 bits).
    pub sq_psn: Option<u32>,
    /// The local ACK timeout exponent: 4.096 µs × 2^timeout (5 bits; 0 = infinite).
    pub timeout: Option<u8>,
    /// Transport retries (3 bits).
    pub retry_cnt: Option<u8>,
    /// RNR retries (3 bits; 7 = infinite).
    pub rnr_retry: Option<u8>,
    /// RDMA READs and atomics this QP may have outstanding as requester.
    pub max_rd_atomic: Option<u8>,
    /// The Q_Key (UD): incoming datagrams must carry it.
    pub qkey: Option<u32>,
}

impl QpAttr {
    /// No attribute.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the P_Key index.
    pub fn pkey_index(mut self, v: u16) -> Self {
        self.pkey_index = Some(v);
        self
    }
    /// Sets the port.
    pub fn port(mut self, v: u8) -> Self {
        self.port = Some(v);
        self
    }
    /// Sets the remote access rights.
    pub fn access(mut self, v: AccessFlags) -> Self {
        self.access = Some(v);
        self
    }
    /// Sets the path.
    pub fn av(mut self, v: AddressVector) -> Self {
        self.av = Some(v);
        self
    }
    /// Sets the path MTU.
    pub fn path_mtu(mut self, v: Mtu) -> Self {
        self.path_mtu = Some(v);
        self
    }
    /// Sets the peer's QP number.
    pub fn dest_qpn(mut self, v: u32) -> Self {
        self.dest_qpn = Some(v);
        self
    }
    /// Sets the first expected PSN.
    pub fn rq_psn(mut self, v: u32) -> Self {
        self.rq_psn = Some(v);
        self
    }
    /// Sets the responder's outstanding READ/atomic limit.
    pub fn max_dest_rd_atomic(mut self, v: u8) -> Self {
        self.max_dest_rd_atomic = Some(v);
        self
    }
    /// Sets the RNR NAK timer.
    pub fn min_rnr_timer(mut self, v: u8) -> Self {
        self.min_rnr_timer = Some(v);
        self
    }
    /// Sets the first PSN sent.
    pub fn sq_psn(mut self, v: u32) -> Self {
        self.sq_psn = Some(v);
        self
    }
    /// Sets the ACK timeout.
    pub fn timeout(mut self, v: u8) -> Self {
        self.timeout = Some(v);
        self
    }
    /// Sets the retry count.
    pub fn retry_cnt(mut self, v: u8) -> Self {
        self.retry_cnt = Some(v);
        self
    }
    /// Sets the RNR retry count.
    pub fn rnr_retry(mut self, v: u8) -> Self {
        self.rnr_retry = Some(v);
        self
    }
    /// Sets the requester's outstanding READ/atomic limit.
    pub fn max_rd_atomic(mut self, v: u8) -> Self {
        self.max_rd_atomic = Some(v);
        self
    }

    /// Sets the Q_Key (UD).
    pub fn qkey(mut self, v: u32) -> Self {
        self.qkey = Some(v);
        self
    }

    /// Whether `a` is given.
    pub fn has(&self, a: Attribute) -> bool {
        match a {
            Attribute::PkeyIndex => self.pkey_index.is_some(),
            Attribute::Port => self.port.is_some(),
            Attribute::AccessFlags => self.access.is_some(),
            Attribute::AddressVector => self.av.is_some(),
            Attribute::PathMtu => self.path_mtu.is_some(),
            Attribute::DestQpn => self.dest_qpn.is_some(),
            Attribute::RqPsn => self.rq_psn.is_some(),
            Attribute::MaxDestRdAtomic => self.max_dest_rd_atomic.is_some(),
            Attribute::MinRnrTimer => self.min_rnr_timer.is_some(),
            Attribute::SqPsn => self.sq_psn.is_some(),
            Attribute::Timeout => self.timeout.is_some(),
            Attribute::RetryCnt => self.retry_cnt.is_some(),
            Attribute::RnrRetry => self.rnr_retry.is_some(),
            Attribute::MaxRdAtomic => self.max_rd_atomic.is_some(),
            Attribute::Qkey => self.qkey.is_some(),
        }
    }

    /// Checks the attributes against what `t` requires and accepts on an RC QP, and
    /// the range of each value given.
    pub fn check(&self, t: Transition) -> Result<()> {
        self.check_for(t, QpType::Rc)
    }

    /// Checks the attributes against what `t` requires and accepts on a QP of type
    /// `ty` ([`Transition::required_for`], [`Transition::optional_for`]), and the range
    /// of each value given; a UC QP also refuses remote READ and atomic access rights,
    /// which its transport cannot carry
    /// ([`Error::AccessNotSupported`](super::Error::AccessNotSupported)).
    pub fn check_for(&self, t: Transition, ty: QpType) -> Result<()> {
        use Attribute::*;
        if ty == QpType::Uc {
            if let Some(a) = self.access {
                let mut bad = super::AccessFlags::empty();
                for f in [
                    super::AccessFlags::REMOTE_READ,
                    super::AccessFlags::REMOTE_ATOMIC,
                ] {
                    if a.contains(f) {
                        bad |= f;
                    }
                }
                if bad != super::AccessFlags::empty() {
                    return Err(Error::AccessNotSupported {
                        qp_type: ty,
                        access: bad,
                    });
                }
            }
        }
        for &a in t.required_for(ty) {
            if !self.has(a) {
                return Err(Error::MissingAttribute {
                    transition: t,
                    attribute: a,
                });
            }
        }
        const ALL: [Attribute; 15] = [
            PkeyIndex,
            Port,
            AccessFlags,
            AddressVector,
            PathMtu,
            DestQpn,
            RqPsn,
            MaxDestRdAtomic,
            MinRnrTimer,
            SqPsn,
            Timeout,
            RetryCnt,
            RnrRetry,
            MaxRdAtomic,
            Qkey,
        ];
        for a in ALL {
            if self.has(a) && !t.required_for(ty).contains(&a) && !t.optional_for(ty).contains(&a) {
                return Err(Error::UnexpectedAttribute {
                    transition: t,
                    attribute: a,
                });
            }
        }
        let range = |attribute, value: Option<u64>, max: u64| match value {
            Some(value) if value > max => Err(Error::AttributeOutOfRange {
                attribute,
                value,
                max,
            }),
            _ => Ok(()),
        };
        range(DestQpn, self.dest_qpn.map(u64::from), 0xff_ffff)?;
        range(RqPsn, self.rq_psn.map(u64::from), 0xff_ffff)?;
        range(SqPsn, self.sq_psn.map(u64::from), 0xff_ffff)?;
        range(MinRnrTimer, self.min_rnr_timer.map(u64::from), 31)?;
        range(Timeout, self.timeout.map(u64::from), 31)?;
        range(RetryCnt, self.retry_cnt.map(u64::from), 7)?;
        range(RnrRetry, self.rnr_retry.map(u64::from), 7)?;
        if let Some(av) = self.av {
            range(AddressVector, Some(u64::from(av.flow_label)), 0xf_ffff)?;
            range(AddressVector, Some(u64::from(av.sl)), 7)?;
        }
        if let Some(p) = self.port {
            if p == 0 {
                return Err(Error::AttributeOutOfRange {
                    attribute: Port,
                    value: 0,
                    max: 0,
                });
            }
        }
        Ok(())
    }
}

/// Everything INIT→RTR needs for an RC QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtrAttr {
    /// The path to the peer.
    pub av: AddressVector,
    /// The path MTU.
    pub path_mtu: Mtu,
    /// The peer's QP number.
    pub dest_qpn: u32,
    /// The first PSN expected from the peer.
    pub rq_psn: u32,
    /// RDMA READs and atomics the peer may have outstanding here.
    pub max_dest_rd_atomic: u8,
    /// The RNR NAK timer code.
    pub min_rnr_timer: u8,
}

impl From<&RtrAttr> for QpAttr {
    fn from(a: &RtrAttr) -> QpAttr {
        QpAttr::new()
            .av(a.av)
            .path_mtu(a.path_mtu)
            .dest_qpn(a.dest_qpn)
            .rq_psn(a.rq_psn)
            .max_dest_rd_atomic(a.max_dest_rd_atomic)
            .min_rnr_timer(a.min_rnr_timer)
    }
}

/// Everything RESET→INIT needs for a UD QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdInitAttr {
    /// The port (1-based).
    pub port: u8,
    /// The P_Key index (0: a RoCE port has one P_Key).
    pub pkey_index: u16,
    /// The Q_Key datagrams to this QP must carry.
    pub qkey: u32,
}

impl UdInitAttr {
    /// Port `port`, P_Key index 0, Q_Key `qkey`.
    pub fn new(port: u8, qkey: u32) -> Self {
        UdInitAttr {
            port,
            pkey_index: 0,
            qkey,
        }
    }
}

impl From<&UdInitAttr> for QpAttr {
    fn from(a: &UdInitAttr) -> QpAttr {
        QpAttr::new()
            .port(a.port)
            .pkey_index(a.pkey_index)
            .qkey(a.qkey)
    }
}

/// Everything RTR→RTS needs for an RC QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtsAttr {
    /// The first PSN sent.
    pub sq_psn: u32,
    /// The ACK timeout exponent.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// RDMA READs and atomics outstanding as requester.
    pub max_rd_atomic: u8,
}

impl RtsAttr {
    /// Typical values: timeout 14 (67 ms), 7 retries, 7 RNR retries (infinite), one
    /// outstanding READ/atomic, starting at `sq_psn`.
    pub fn new(sq_psn: u32) -> Self {
        RtsAttr {
            sq_psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
        }
    }
}

impl From<&RtsAttr> for QpAttr {
    fn from(a: &RtsAttr) -> QpAttr {
        QpAttr::new()
            .sq_psn(a.sq_psn)
            .timeout(a.timeout)
            .retry_cnt(a.retry_cnt)
            .rnr_retry(a.rnr_retry)
            .max_rd_atomic(a.max_rd_atomic)
    }
}

/// What [`QueuePair::query`](super::QueuePair::query) reports: the state and the
/// attributes the device holds (`QUERY_QP`), and the capabilities granted at creation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpInfo {
    /// The QP number.
    pub qp_num: u32,
    /// The state.
    pub state: QpState,
    /// The port.
    pub port: u8,
    /// The P_Key index.
    pub pkey_index: u16,
    /// Remote access rights.
    pub access: AccessFlags,
    /// The path MTU (`None` before RTR).
    pub path_mtu: Option<Mtu>,
    /// The peer's QP number.
    pub dest_qpn: u32,
    /// Next PSN expected.
    pub rq_psn: u32,
    /// Next PSN sent.
    pub sq_psn: u32,
    /// Responder READ/atomic limit.
    pub max_dest_rd_atomic: u8,
    /// Requester READ/atomic limit.
    pub max_rd_atomic: u8,
    /// RNR NAK timer.
    pub min_rnr_timer: u8,
    /// ACK timeout.
    pub timeout: u8,
    /// Retry count.
    pub retry_cnt: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// The path: remote GID, MAC, source GID index, hop limit, traffic class, flow
    /// label, SL and UDP source port.
    pub av: AddressVector,
    /// The capabilities granted at creation.
    pub cap: QpCap,
    /// The Q_Key (UD; 0 on RC).
    pub qkey: u32,
}

/// `ceil(log2(n))` for the `log_sra_max` / `log_rra_max` fields (0 for 0 and 1).
pub(crate) fn ceil_log2(n: u8) -> u8 {
    if n <= 1 {
        0
    } else {
        (8 - (n - 1).leading_zeros()) as u8
    }
}

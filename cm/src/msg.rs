//! The CM messages (IBTA Vol. 1 12.6, tables 106-120; Linux
//! `include/rdma/ibta_vol1_c12.h` gives every field's offset and width): typed
//! representations parsed from and emitted into the 232-byte attribute of a MAD.
//! Offsets below are from the first byte after the MAD header. All fields are
//! big-endian; 24-bit QPNs, PSNs and EECNs are the upper three bytes of their word.

use crate::field::Field;
use crate::mad::{Header, DATA_LEN, HEADER_LEN, MAD_LEN};
use crate::Error;

/// `AttributeID`s of the CM messages (Linux `include/rdma/ib_cm.h`).
pub mod attr {
    /// ConnectRequest.
    pub const REQ: u16 = 0x0010;
    /// MsgRcptAck.
    pub const MRA: u16 = 0x0011;
    /// ConnectReject.
    pub const REJ: u16 = 0x0012;
    /// ConnectReply.
    pub const REP: u16 = 0x0013;
    /// ReadyToUse.
    pub const RTU: u16 = 0x0014;
    /// DisconnectRequest.
    pub const DREQ: u16 = 0x0015;
    /// DisconnectReply.
    pub const DREP: u16 = 0x0016;
    /// ServiceIDResReq.
    pub const SIDR_REQ: u16 = 0x0017;
    /// ServiceIDResReqResp.
    pub const SIDR_REP: u16 = 0x0018;
    /// LoadAlternatePath.
    pub const LAP: u16 = 0x0019;
    /// AlternatePathResponse.
    pub const APR: u16 = 0x001a;
}

/// Bytes of private data each message carries (Linux `enum ib_cm_data_size`).
pub mod private_len {
    /// REQ.
    pub const REQ: usize = 92;
    /// MRA.
    pub const MRA: usize = 222;
    /// REJ.
    pub const REJ: usize = 148;
    /// REP.
    pub const REP: usize = 196;
    /// RTU.
    pub const RTU: usize = 224;
    /// DREQ.
    pub const DREQ: usize = 220;
    /// DREP.
    pub const DREP: usize = 224;
    /// SIDR_REQ.
    pub const SIDR_REQ: usize = 216;
    /// SIDR_REP.
    pub const SIDR_REP: usize = 136;
    /// Additional rejection information of a REJ.
    pub const REJ_ARI: usize = 72;
    /// Additional information of a SIDR_REP.
    pub const SIDR_REP_INFO: usize = 72;
}

/// The transport service a REQ asks for (its Transport Service Type and Extended
/// Transport Type fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransportType {
    /// Reliable connection (type 0).
    Rc,
    /// Unreliable connection (type 1).
    Uc,
    /// XRC (type 3 with extended type 1).
    Xrc,
}

/// A path of a REQ (primary or alternate): the addressing of the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Path {
    /// Local port LID (0xffff, permissive, on RoCE when the hop limit exceeds 1).
    pub local_lid: u16,
    /// Remote port LID.
    pub remote_lid: u16,
    /// Local port GID (on RoCEv2 over IPv4: `::ffff:a.b.c.d`).
    pub local_gid: [u8; 16],
    /// Remote port GID.
    pub remote_gid: [u8; 16],
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Packet rate (6 bits; 0 = the port's current rate).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Subnet local.
    pub subnet_local: bool,
    /// Local ACK timeout exponent (5 bits).
    pub local_ack_timeout: u8,
}

/// Field positions of a path block starting at `base` (REQ: 52 primary, 96
/// alternate).
struct PathFields {
    local_lid: Field,
    remote_lid: Field,
    local_gid: usize,
    remote_gid: usize,
    flow_label: Field,
    packet_rate: Field,
    traffic_class: Field,
    hop_limit: Field,
    sl: Field,
    subnet_local: Field,
    local_ack_timeout: Field,
}

impl PathFields {
    const fn at(b: usize) -> PathFields {
        PathFields {
            local_lid: Field::int(b, 2),
            remote_lid: Field::int(b + 2, 2),
            local_gid: b + 4,
            remote_gid: b + 20,
            flow_label: Field::new(b + 36, 4, 12, 20),
            packet_rate: Field::new(b + 36, 4, 0, 6),
            traffic_class: Field::int(b + 40, 1),
            hop_limit: Field::int(b + 41, 1),
            sl: Field::bits(b + 42, 7, 4),
            subnet_local: Field::bits(b + 42, 3, 3),
            local_ack_timeout: Field::bits(b + 43, 7, 3),
        }
    }

    fn parse(&self, d: &[u8]) -> Path {
        let gid = |o: usize| {
            let mut g = [0u8; 16];
            g.copy_from_slice(&d[o..o + 16]);
            g
        };
        Path {
            local_lid: self.local_lid.get(d) as u16,
            remote_lid: self.remote_lid.get(d) as u16,
            local_gid: gid(self.local_gid),
            remote_gid: gid(self.remote_gid),
            flow_label: self.flow_label.get(d) as u32,
            packet_rate: self.packet_rate.get(d) as u8,
            traffic_class: self.traffic_class.get(d) as u8,
            hop_limit: self.hop_limit.get(d) as u8,
            sl: self.sl.get(d) as u8,
            subnet_local: self.subnet_local.get(d) != 0,
            local_ack_timeout: self.local_ack_timeout.get(d) as u8,
        }
    }

    fn emit(&self, p: &Path, d: &mut [u8]) {
        self.local_lid.set(d, p.local_lid.into());
        self.remote_lid.set(d, p.remote_lid.into());
        d[self.local_gid..self.local_gid + 16].copy_from_slice(&p.local_gid);
        d[self.remote_gid..self.remote_gid + 16].copy_from_slice(&p.remote_gid);
        self.flow_label.set(d, p.flow_label.into());
        self.packet_rate.set(d, p.packet_rate.into());
        self.traffic_class.set(d, p.traffic_class.into());
        self.hop_limit.set(d, p.hop_limit.into());
        self.sl.set(d, p.sl.into());
        self.subnet_local.set(d, p.subnet_local.into());
        self.local_ack_timeout.set(d, p.local_ack_timeout.into());
    }
}

/// ConnectRequest (IBTA table 107).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Req {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The service asked for (RDMA IP CM: port space and port, [`crate::ipcm`]).
    pub service_id: u64,
    /// The sender's CA (node) GUID.
    pub local_ca_guid: u64,
    /// The sender's Q_Key (unused for RC and UC).
    pub local_qkey: u32,
    /// The sender's QP number.
    pub local_qpn: u32,
    /// RDMA READs and atomics the sender accepts as responder.
    pub responder_resources: u8,
    /// RDMA READs and atomics the sender issues at once as requester.
    pub initiator_depth: u8,
    /// The EECN fields (EE contexts; 0 for RC and UC).
    pub local_eecn: u32,
    /// The remote EECN.
    pub remote_eecn: u32,
    /// How long the passive side may take to answer (exponent, 5 bits).
    pub remote_cm_response_timeout: u8,
    /// The transport.
    pub transport: TransportType,
    /// End-to-end flow control.
    pub e2e_flow_control: bool,
    /// The sender's first PSN (24 bits).
    pub starting_psn: u32,
    /// How long the sender may take to answer (exponent, 5 bits).
    pub local_cm_response_timeout: u8,
    /// Transport retries (3 bits).
    pub retry_count: u8,
    /// The partition key.
    pub pkey: u16,
    /// The path MTU code (1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    /// RDC exists.
    pub rdc_exists: bool,
    /// RNR retries (3 bits).
    pub rnr_retry_count: u8,
    /// Retries of the CM messages (4 bits).
    pub max_cm_retries: u8,
    /// The sender's QP takes its receives from an SRQ.
    pub srq: bool,
    /// The primary path.
    pub primary: Path,
    /// The alternate path (all zero: none; RoCE has none).
    pub alternate: Path,
    /// Private data (RDMA IP CM: the 36-byte IP header, then 56 bytes).
    pub private_data: [u8; private_len::REQ],
}

/// Fields of a REQ.
mod req {
    use crate::field::Field;
    pub const LOCAL_COMM_ID: Field = Field::int(0, 4);
    pub const SERVICE_ID: Field = Field::int(8, 8);
    pub const LOCAL_CA_GUID: Field = Field::int(16, 8);
    pub const LOCAL_QKEY: Field = Field::int(28, 4);
    pub const LOCAL_QPN: Field = Field::new(32, 4, 8, 24);
    pub const RESPONDER_RESOURCES: Field = Field::int(35, 1);
    pub const LOCAL_EECN: Field = Field::new(36, 4, 8, 24);
    pub const INITIATOR_DEPTH: Field = Field::int(39, 1);
    pub const REMOTE_EECN: Field = Field::new(40, 4, 8, 24);
    pub const REMOTE_CM_RESPONSE_TIMEOUT: Field = Field::bits(43, 7, 3);
    pub const TRANSPORT_SERVICE_TYPE: Field = Field::bits(43, 2, 1);
    pub const E2E_FLOW_CONTROL: Field = Field::bits(43, 0, 0);
    pub const STARTING_PSN: Field = Field::new(44, 4, 8, 24);
    pub const LOCAL_CM_RESPONSE_TIMEOUT: Field = Field::bits(47, 7, 3);
    pub const RETRY_COUNT: Field = Field::bits(47, 2, 0);
    pub const PKEY: Field = Field::int(48, 2);
    pub const PATH_MTU: Field = Field::bits(50, 7, 4);
    pub const RDC_EXISTS: Field = Field::bits(50, 3, 3);
    pub const RNR_RETRY_COUNT: Field = Field::bits(50, 2, 0);
    pub const MAX_CM_RETRIES: Field = Field::bits(51, 7, 4);
    pub const SRQ: Field = Field::bits(51, 3, 3);
    pub const EXTENDED_TRANSPORT_TYPE: Field = Field::bits(51, 2, 0);
    pub const PRIMARY: usize = 52;
    pub const ALTERNATE: usize = 96;
    pub const PRIVATE_DATA: usize = 140;
}

impl Req {
    fn parse(d: &[u8]) -> Result<Req, Error> {
        use req::*;
        let transport = match (
            TRANSPORT_SERVICE_TYPE.get(d),
            EXTENDED_TRANSPORT_TYPE.get(d),
        ) {
            (0, _) => TransportType::Rc,
            (1, _) => TransportType::Uc,
            (3, 1) => TransportType::Xrc,
            (t, e) => {
                return Err(Error::Field {
                    msg: "REQ",
                    field: "transport service type",
                    value: (t << 3 | e) as u32,
                })
            }
        };
        Ok(Req {
            local_comm_id: LOCAL_COMM_ID.get(d) as u32,
            service_id: SERVICE_ID.get(d),
            local_ca_guid: LOCAL_CA_GUID.get(d),
            local_qkey: LOCAL_QKEY.get(d) as u32,
            local_qpn: LOCAL_QPN.get(d) as u32,
            responder_resources: RESPONDER_RESOURCES.get(d) as u8,
            initiator_depth: INITIATOR_DEPTH.get(d) as u8,
            local_eecn: LOCAL_EECN.get(d) as u32,
            remote_eecn: REMOTE_EECN.get(d) as u32,
            remote_cm_response_timeout: REMOTE_CM_RESPONSE_TIMEOUT.get(d) as u8,
            transport,
            e2e_flow_control: E2E_FLOW_CONTROL.get(d) != 0,
            starting_psn: STARTING_PSN.get(d) as u32,
            local_cm_response_timeout: LOCAL_CM_RESPONSE_TIMEOUT.get(d) as u8,
            retry_count: RETRY_COUNT.get(d) as u8,
            pkey: PKEY.get(d) as u16,
            path_mtu: PATH_MTU.get(d) as u8,
            rdc_exists: RDC_EXISTS.get(d) != 0,
            rnr_retry_count: RNR_RETRY_COUNT.get(d) as u8,
            max_cm_retries: MAX_CM_RETRIES.get(d) as u8,
            srq: SRQ.get(d) != 0,
            primary: PathFields::at(PRIMARY).parse(d),
            alternate: PathFields::at(ALTERNATE).parse(d),
            private_data: array(&d[PRIVATE_DATA..]),
        })
    }

    fn emit(&self, d: &mut [u8]) {
        use req::*;
        LOCAL_COMM_ID.set(d, self.local_comm_id.into());
        SERVICE_ID.set(d, self.service_id);
        LOCAL_CA_GUID.set(d, self.local_ca_guid);
        LOCAL_QKEY.set(d, self.local_qkey.into());
        LOCAL_QPN.set(d, self.local_qpn.into());
        RESPONDER_RESOURCES.set(d, self.responder_resources.into());
        LOCAL_EECN.set(d, self.local_eecn.into());
        INITIATOR_DEPTH.set(d, self.initiator_depth.into());
        REMOTE_EECN.set(d, self.remote_eecn.into());
        REMOTE_CM_RESPONSE_TIMEOUT.set(d, self.remote_cm_response_timeout.into());
        let (t, e) = match self.transport {
            TransportType::Rc => (0, 0),
            TransportType::Uc => (1, 0),
            TransportType::Xrc => (3, 1),
        };
        TRANSPORT_SERVICE_TYPE.set(d, t);
        EXTENDED_TRANSPORT_TYPE.set(d, e);
        E2E_FLOW_CONTROL.set(d, self.e2e_flow_control.into());
        STARTING_PSN.set(d, self.starting_psn.into());
        LOCAL_CM_RESPONSE_TIMEOUT.set(d, self.local_cm_response_timeout.into());
        RETRY_COUNT.set(d, self.retry_count.into());
        PKEY.set(d, self.pkey.into());
        PATH_MTU.set(d, self.path_mtu.into());
        RDC_EXISTS.set(d, self.rdc_exists.into());
        RNR_RETRY_COUNT.set(d, self.rnr_retry_count.into());
        MAX_CM_RETRIES.set(d, self.max_cm_retries.into());
        SRQ.set(d, self.srq.into());
        PathFields::at(PRIMARY).emit(&self.primary, d);
        PathFields::at(ALTERNATE).emit(&self.alternate, d);
        d[PRIVATE_DATA..].copy_from_slice(&self.private_data);
    }
}

/// ConnectReply (IBTA table 111).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rep {
    /// The sender's (passive side's) communication ID.
    pub local_comm_id: u32,
    /// The REQ's communication ID.
    pub remote_comm_id: u32,
    /// The sender's Q_Key.
    pub local_qkey: u32,
    /// The sender's QP number.
    pub local_qpn: u32,
    /// The sender's EECN (0).
    pub local_eecn: u32,
    /// The sender's first PSN.
    pub starting_psn: u32,
    /// RDMA READs and atomics the sender accepts as responder.
    pub responder_resources: u8,
    /// RDMA READs and atomics the sender issues as requester.
    pub initiator_depth: u8,
    /// The sender's CA ACK delay exponent (5 bits).
    pub target_ack_delay: u8,
    /// Failover accepted (2 bits).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub e2e_flow_control: bool,
    /// RNR retries the active side's requester uses (3 bits).
    pub rnr_retry_count: u8,
    /// The sender's QP takes its receives from an SRQ.
    pub srq: bool,
    /// The sender's CA GUID.
    pub local_ca_guid: u64,
    /// Private data.
    pub private_data: [u8; private_len::REP],
}

mod rep {
    use crate::field::Field;
    pub const LOCAL_COMM_ID: Field = Field::int(0, 4);
    pub const REMOTE_COMM_ID: Field = Field::int(4, 4);
    pub const LOCAL_QKEY: Field = Field::int(8, 4);
    pub const LOCAL_QPN: Field = Field::new(12, 4, 8, 24);
    pub const LOCAL_EECN: Field = Field::new(16, 4, 8, 24);
    pub const STARTING_PSN: Field = Field::new(20, 4, 8, 24);
    pub const RESPONDER_RESOURCES: Field = Field::int(24, 1);
    pub const INITIATOR_DEPTH: Field = Field::int(25, 1);
    pub const TARGET_ACK_DELAY: Field = Field::bits(26, 7, 3);
    pub const FAILOVER_ACCEPTED: Field = Field::bits(26, 2, 1);
    pub const E2E_FLOW_CONTROL: Field = Field::bits(26, 0, 0);
    pub const RNR_RETRY_COUNT: Field = Field::bits(27, 7, 5);
    pub const SRQ: Field = Field::bits(27, 4, 4);
    pub const LOCAL_CA_GUID: Field = Field::int(28, 8);
    pub const PRIVATE_DATA: usize = 36;
}

impl Rep {
    fn parse(d: &[u8]) -> Rep {
        use rep::*;
        Rep {
            local_comm_id: LOCAL_COMM_ID.get(d) as u32,
            remote_comm_id: REMOTE_COMM_ID.get(d) as u32,
            local_qkey: LOCAL_QKEY.get(d) as u32,
            local_qpn: LOCAL_QPN.get(d) as u32,
            local_eecn: LOCAL_EECN.get(d) as u32,
            starting_psn: STARTING_PSN.get(d) as u32,
            responder_resources: RESPONDER_RESOURCES.get(d) as u8,
            initiator_depth: INITIATOR_DEPTH.get(d) as u8,
            target_ack_delay: TARGET_ACK_DELAY.get(d) as u8,
            failover_accepted: FAILOVER_ACCEPTED.get(d) as u8,
            e2e_flow_control: E2E_FLOW_CONTROL.get(d) != 0,
            rnr_retry_count: RNR_RETRY_COUNT.get(d) as u8,
            srq: SRQ.get(d) != 0,
            local_ca_guid: LOCAL_CA_GUID.get(d),
            private_data: array(&d[PRIVATE_DATA..]),
        }
    }

    fn emit(&self, d: &mut [u8]) {
        use rep::*;
        LOCAL_COMM_ID.set(d, self.local_comm_id.into());
        REMOTE_COMM_ID.set(d, self.remote_comm_id.into());
        LOCAL_QKEY.set(d, self.local_qkey.into());
        LOCAL_QPN.set(d, self.local_qpn.into());
        LOCAL_EECN.set(d, self.local_eecn.into());
        STARTING_PSN.set(d, self.starting_psn.into());
        RESPONDER_RESOURCES.set(d, self.responder_resources.into());
        INITIATOR_DEPTH.set(d, self.initiator_depth.into());
        TARGET_ACK_DELAY.set(d, self.target_ack_delay.into());
        FAILOVER_ACCEPTED.set(d, self.failover_accepted.into());
        E2E_FLOW_CONTROL.set(d, self.e2e_flow_control.into());
        RNR_RETRY_COUNT.set(d, self.rnr_retry_count.into());
        SRQ.set(d, self.srq.into());
        LOCAL_CA_GUID.set(d, self.local_ca_guid);
        d[PRIVATE_DATA..].copy_from_slice(&self.private_data);
    }
}

/// Which message a REJ or an MRA answers (the 2-bit "message REJected/MRAed").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MsgKind {
    /// A REQ.
    Req,
    /// A REP.
    Rep,
    /// Another message (LAP for an MRA).
    Other,
}

impl MsgKind {
    fn code(self) -> u64 {
        match self {
            MsgKind::Req => 0,
            MsgKind::Rep => 1,
            MsgKind::Other => 2,
        }
    }

    fn from_code(msg: &'static str, v: u64) -> Result<MsgKind, Error> {
        match v {
            0 => Ok(MsgKind::Req),
            1 => Ok(MsgKind::Rep),
            2 => Ok(MsgKind::Other),
            v => Err(Error::Field {
                msg,
                field: "message kind",
                value: v as u32,
            }),
        }
    }
}

/// REJ reasons (IBTA table 112; Linux `enum ib_cm_rej_reason`) this implementation
/// sends or acts on.
pub mod rej_reason {
    /// No QP available.
    pub const NO_QP: u16 = 1;
    /// No resources.
    pub const NO_RESOURCES: u16 = 3;
    /// Timeout (the ARI carries the sender's CA GUID).
    pub const TIMEOUT: u16 = 4;
    /// Unsupported request.
    pub const UNSUPPORTED: u16 = 5;
    /// Invalid communication ID.
    pub const INVALID_COMM_ID: u16 = 6;
    /// Invalid service ID: no listener.
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// Invalid transport type.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// Stale connection.
    pub const STALE_CONN: u16 = 10;
    /// Invalid GID.
    pub const INVALID_GID: u16 = 12;
    /// Invalid MTU.
    pub const INVALID_MTU: u16 = 26;
    /// Consumer defined (`rdma_reject`, and rdma_cm's own failures).
    pub const CONSUMER_DEFINED: u16 = 28;
    /// Invalid class version.
    pub const INVALID_CLASS_VERSION: u16 = 31;
}

/// ConnectReject (IBTA table 112).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rej {
    /// The sender's communication ID (0 when rejecting a REQ it has not recorded).
    pub local_comm_id: u32,
    /// The rejected side's communication ID.
    pub remote_comm_id: u32,
    /// What is rejected.
    pub msg_rejected: MsgKind,
    /// Bytes of additional rejection information used (7 bits).
    pub ari_len: u8,
    /// The reason ([`rej_reason`]).
    pub reason: u16,
    /// Additional rejection information.
    pub ari: [u8; private_len::REJ_ARI],
    /// Private data.
    pub private_data: [u8; private_len::REJ],
}

mod rej {
    use crate::field::Field;
    pub const LOCAL_COMM_ID: Field = Field::int(0, 4);
    pub const REMOTE_COMM_ID: Field = Field::int(4, 4);
    pub const MSG_REJECTED: Field = Field::bits(8, 7, 6);
    pub const ARI_LEN: Field = Field::bits(9, 7, 1);
    pub const REASON: Field = Field::int(10, 2);
    pub const ARI: usize = 12;
    pub const PRIVATE_DATA: usize = 84;
}

impl Rej {
    fn parse(d: &[u8]) -> Result<Rej, Error> {
        use rej::*;
        Ok(Rej {
            local_comm_id: LOCAL_COMM_ID.get(d) as u32,
            remote_comm_id: REMOTE_COMM_ID.get(d) as u32,
            msg_rejected: MsgKind::from_code("REJ", MSG_REJECTED.get(d))?,
            ari_len: ARI_LEN.get(d) as u8,
            reason: REASON.get(d) as u16,
            ari: array(&d[ARI..]),
            private_data: array(&d[PRIVATE_DATA..]),
        })
    }

    fn emit(&self, d: &mut [u8]) {
        use rej::*;
        LOCAL_COMM_ID.set(d, self.local_comm_id.into());
        REMOTE_COMM_ID.set(d, self.remote_comm_id.into());
        MSG_REJECTED.set(d, self.msg_rejected.code());
        ARI_LEN.set(d, self.ari_len.into());
        REASON.set(d, self.reason.into());
        d[ARI..ARI + private_len::REJ_ARI].copy_from_slice(&self.ari);
        d[PRIVATE_DATA..].copy_from_slice(&self.private_data);
    }
}

/// MsgRcptAck (IBTA table 106): "the message arrived; my answer takes longer".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Mra {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The other side's communication ID.
    pub remote_comm_id: u32,
    /// What is acknowledged.
    pub msg_mraed: MsgKind,
    /// How long the answer may take (exponent, 5 bits).
    pub service_timeout: u8,
    /// Private data.
    pub private_data: [u8; private_len::MRA],
}

mod mra {
    use crate::field::Field;
    pub const LOCAL_COMM_ID: Field = Field::int(0, 4);
    pub const REMOTE_COMM_ID: Field = Field::int(4, 4);
    pub const MSG_MRAED: Field = Field::bits(8, 7, 6);
    pub const SERVICE_TIMEOUT: Field = Field::bits(9, 7, 3);
    pub const PRIVATE_DATA: usize = 10;
}

impl Mra {
    fn parse(d: &[u8]) -> Result<Mra, Error> {
        use mra::*;
        Ok(Mra {
            local_comm_id: LOCAL_COMM_ID.get(d) as u32,
            remote_comm_id: REMOTE_COMM_ID.get(d) as u32,
            msg_mraed: MsgKind::from_code("MRA", MSG_MRAED.get(d))?,
            service_timeout: SERVICE_TIMEOUT.get(d) as u8,
            private_data: array(&d[PRIVATE_DATA..]),
        })
    }

    fn emit(&self, d: &mut [u8]) {
        use mra::*;
        LOCAL_COMM_ID.set(d, self.local_comm_id.into());
        REMOTE_COMM_ID.set(d, self.remote_comm_id.into());
        MSG_MRAED.set(d, self.msg_mraed.code());
        SERVICE_TIMEOUT.set(d, self.service_timeout.into());
        d[PRIVATE_DATA..].copy_from_slice(&self.private_data);
    }
}

/// ReadyToUse (IBTA table 113).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rtu {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The other side's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; private_len::RTU],
}

/// DisconnectRequest (IBTA table 114).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dreq {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The other side's communication ID.
    pub remote_comm_id: u32,
    /// The *receiver's* QP number (Linux drops a DREQ whose QPN is not its own).
    pub remote_qpn: u32,
    /// Private data.
    pub private_data: [u8; private_len::DREQ],
}

/// DisconnectReply (IBTA table 115).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Drep {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The other side's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; private_len::DREP],
}

const ID_LOCAL: Field = Field::int(0, 4);
const ID_REMOTE: Field = Field::int(4, 4);
const DREQ_REMOTE_QPN: Field = Field::new(8, 4, 8, 24);
/// The AP status of an APR (byte 9; IBTA table 118).
const APR_STATUS: Field = Field::int(9, 1);

/// AP status codes of an APR (Linux `enum ib_cm_apr_status`).
pub mod apr_status {
    /// The alternate path was loaded.
    pub const SUCCESS: u8 = 0;
    /// Alternate paths are not supported (what this CM answers to a LAP: RoCE has no
    /// alternate paths).
    pub const UNSUPPORTED: u8 = 2;
}

/// ServiceIDResReq (IBTA table 119): resolves a service to a UD QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SidrReq {
    /// The requester's ID (its local communication ID).
    pub request_id: u32,
    /// The partition key.
    pub pkey: u16,
    /// The service asked for.
    pub service_id: u64,
    /// Private data (RDMA IP CM: the 36-byte IP header, then 180 bytes).
    pub private_data: [u8; private_len::SIDR_REQ],
}

/// SIDR_REP status codes (Linux `enum ib_cm_sidr_status`).
pub mod sidr_status {
    /// The service's QP follows.
    pub const SUCCESS: u8 = 0;
    /// No such service.
    pub const UNSUPPORTED: u8 = 1;
    /// Rejected by the consumer.
    pub const REJECT: u8 = 2;
    /// No QP.
    pub const NO_QP: u8 = 3;
    /// Redirect.
    pub const REDIRECT: u8 = 4;
    /// Unsupported version.
    pub const UNSUPPORTED_VERSION: u8 = 5;
}

/// ServiceIDResReqResp (IBTA table 120).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SidrRep {
    /// The request's ID.
    pub request_id: u32,
    /// The status ([`sidr_status`]).
    pub status: u8,
    /// Bytes of additional information used.
    pub add_info_len: u8,
    /// The UD QP of the service.
    pub qpn: u32,
    /// The service (echoed).
    pub service_id: u64,
    /// The Q_Key of the service's QP.
    pub qkey: u32,
    /// Additional information.
    pub add_info: [u8; private_len::SIDR_REP_INFO],
    /// Private data.
    pub private_data: [u8; private_len::SIDR_REP],
}

mod sidr {
    use crate::field::Field;
    pub const REQ_ID: Field = Field::int(0, 4);
    pub const REQ_PKEY: Field = Field::int(4, 2);
    pub const REQ_SERVICE_ID: Field = Field::int(8, 8);
    pub const REQ_PRIVATE_DATA: usize = 16;
    pub const REP_STATUS: Field = Field::int(4, 1);
    pub const REP_ADD_INFO_LEN: Field = Field::int(5, 1);
    pub const REP_QPN: Field = Field::new(8, 4, 8, 24);
    pub const REP_SERVICE_ID: Field = Field::int(12, 8);
    pub const REP_QKEY: Field = Field::int(20, 4);
    pub const REP_ADD_INFO: usize = 24;
    pub const REP_PRIVATE_DATA: usize = 96;
}

/// A CM message: the attribute of a CM MAD.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Message {
    /// REQ.
    Req(Req),
    /// MRA.
    Mra(Mra),
    /// REJ.
    Rej(Rej),
    /// REP.
    Rep(Rep),
    /// RTU.
    Rtu(Rtu),
    /// DREQ.
    Dreq(Dreq),
    /// DREP.
    Drep(Drep),
    /// SIDR_REQ.
    SidrReq(SidrReq),
    /// SIDR_REP.
    SidrRep(SidrRep),
    /// LAP (alternate paths; not supported on RoCE, as on Linux): the IDs only.
    Lap {
        /// The sender's communication ID.
        local_comm_id: u32,
        /// The other side's communication ID.
        remote_comm_id: u32,
    },
    /// APR: the IDs and the status (the additional information and private data are
    /// not kept).
    Apr {
        /// The sender's communication ID.
        local_comm_id: u32,
        /// The other side's communication ID.
        remote_comm_id: u32,
        /// The AP status ([`apr_status`]).
        ap_status: u8,
    },
}

impl Message {
    /// The message's `AttributeID`.
    pub fn attr_id(&self) -> u16 {
        match self {
            Message::Req(_) => attr::REQ,
            Message::Mra(_) => attr::MRA,
            Message::Rej(_) => attr::REJ,
            Message::Rep(_) => attr::REP,
            Message::Rtu(_) => attr::RTU,
            Message::Dreq(_) => attr::DREQ,
            Message::Drep(_) => attr::DREP,
            Message::SidrReq(_) => attr::SIDR_REQ,
            Message::SidrRep(_) => attr::SIDR_REP,
            Message::Lap { .. } => attr::LAP,
            Message::Apr { .. } => attr::APR,
        }
    }

    /// The message's name, as the IBTA abbreviates it.
    pub fn name(&self) -> &'static str {
        match self {
            Message::Req(_) => "REQ",
            Message::Mra(_) => "MRA",
            Message::Rej(_) => "REJ",
            Message::Rep(_) => "REP",
            Message::Rtu(_) => "RTU",
            Message::Dreq(_) => "DREQ",
            Message::Drep(_) => "DREP",
            Message::SidrReq(_) => "SIDR_REQ",
            Message::SidrRep(_) => "SIDR_REP",
            Message::Lap { .. } => "LAP",
            Message::Apr { .. } => "APR",
        }
    }

    /// Reads the attribute `d` (232 bytes) of a MAD whose `AttributeID` is `attr_id`.
    pub fn parse(attr_id: u16, d: &[u8]) -> Result<Message, Error> {
        if d.len() < DATA_LEN {
            return Err(Error::Truncated {
                what: "CM attribute",
                len: d.len(),
                need: DATA_LEN,
            });
        }
        let d = &d[..DATA_LEN];
        let ids = || (ID_LOCAL.get(d) as u32, ID_REMOTE.get(d) as u32);
        Ok(match attr_id {
            attr::REQ => Message::Req(Req::parse(d)?),
            attr::MRA => Message::Mra(Mra::parse(d)?),
            attr::REJ => Message::Rej(Rej::parse(d)?),
            attr::REP => Message::Rep(Rep::parse(d)),
            attr::RTU => Message::Rtu(Rtu {
                local_comm_id: ids().0,
                remote_comm_id: ids().1,
                private_data: array(&d[8..]),
            }),
            attr::DREQ => Message::Dreq(Dreq {
                local_comm_id: ids().0,
                remote_comm_id: ids().1,
                remote_qpn: DREQ_REMOTE_QPN.get(d) as u32,
                private_data: array(&d[12..]),
            }),
            attr::DREP => Message::Drep(Drep {
                local_comm_id: ids().0,
                remote_comm_id: ids().1,
                private_data: array(&d[8..]),
            }),
            attr::SIDR_REQ => Message::SidrReq(SidrReq {
                request_id: sidr::REQ_ID.get(d) as u32,
                pkey: sidr::REQ_PKEY.get(d) as u16,
                service_id: sidr::REQ_SERVICE_ID.get(d),
                private_data: array(&d[sidr::REQ_PRIVATE_DATA..]),
            }),
            attr::SIDR_REP => Message::SidrRep(SidrRep {
                request_id: sidr::REQ_ID.get(d) as u32,
                status: sidr::REP_STATUS.get(d) as u8,
                add_info_len: sidr::REP_ADD_INFO_LEN.get(d) as u8,
                qpn: sidr::REP_QPN.get(d) as u32,
                service_id: sidr::REP_SERVICE_ID.get(d),
                qkey: sidr::REP_QKEY.get(d) as u32,
                add_info: array(&d[sidr::REP_ADD_INFO..]),
                private_data: array(&d[sidr::REP_PRIVATE_DATA..]),
            }),
            attr::LAP => Message::Lap {
                local_comm_id: ids().0,
                remote_comm_id: ids().1,
            },
            attr::APR => Message::Apr {
                local_comm_id: ids().0,
                remote_comm_id: ids().1,
                ap_status: APR_STATUS.get(d) as u8,
            },
            other => return Err(Error::UnknownAttribute(other)),
        })
    }

    /// Writes the attribute into `d` (232 bytes; reserved bits zero).
    pub fn emit(&self, d: &mut [u8]) {
        let d = &mut d[..DATA_LEN];
        d.fill(0);
        let ids = |d: &mut [u8], l: u32, r: u32| {
            ID_LOCAL.set(d, l.into());
            ID_REMOTE.set(d, r.into());
        };
        match self {
            Message::Req(m) => m.emit(d),
            Message::Mra(m) => m.emit(d),
            Message::Rej(m) => m.emit(d),
            Message::Rep(m) => m.emit(d),
            Message::Rtu(m) => {
                ids(d, m.local_comm_id, m.remote_comm_id);
                d[8..].copy_from_slice(&m.private_data);
            }
            Message::Dreq(m) => {
                ids(d, m.local_comm_id, m.remote_comm_id);
                DREQ_REMOTE_QPN.set(d, m.remote_qpn.into());
                d[12..].copy_from_slice(&m.private_data);
            }
            Message::Drep(m) => {
                ids(d, m.local_comm_id, m.remote_comm_id);
                d[8..].copy_from_slice(&m.private_data);
            }
            Message::SidrReq(m) => {
                sidr::REQ_ID.set(d, m.request_id.into());
                sidr::REQ_PKEY.set(d, m.pkey.into());
                sidr::REQ_SERVICE_ID.set(d, m.service_id);
                d[sidr::REQ_PRIVATE_DATA..].copy_from_slice(&m.private_data);
            }
            Message::SidrRep(m) => {
                sidr::REQ_ID.set(d, m.request_id.into());
                sidr::REP_STATUS.set(d, m.status.into());
                sidr::REP_ADD_INFO_LEN.set(d, m.add_info_len.into());
                sidr::REP_QPN.set(d, m.qpn.into());
                sidr::REP_SERVICE_ID.set(d, m.service_id);
                sidr::REP_QKEY.set(d, m.qkey.into());
                let a = sidr::REP_ADD_INFO;
                d[a..a + private_len::SIDR_REP_INFO].copy_from_slice(&m.add_info);
                d[sidr::REP_PRIVATE_DATA..].copy_from_slice(&m.private_data);
            }
            Message::Lap {
                local_comm_id,
                remote_comm_id,
            } => ids(d, *local_comm_id, *remote_comm_id),
            Message::Apr {
                local_comm_id,
                remote_comm_id,
                ap_status,
            } => {
                ids(d, *local_comm_id, *remote_comm_id);
                APR_STATUS.set(d, (*ap_status).into());
            }
        }
    }
}

/// A whole CM MAD: the header and the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CmMad {
    /// The transaction ID.
    pub tid: u64,
    /// The message.
    pub msg: Message,
}

impl CmMad {
    /// Reads a CM MAD from the 256 bytes after a UD receive's GRH area. Anything else
    /// (another class, version or method, a short buffer, an unknown attribute, a
    /// field out of range) is an [`Error`] naming what is wrong.
    pub fn parse(mad: &[u8]) -> Result<CmMad, Error> {
        let h = Header::parse(mad)?;
        h.check_cm()?;
        Ok(CmMad {
            tid: h.tid,
            msg: Message::parse(h.attr_id, &mad[HEADER_LEN..MAD_LEN])?,
        })
    }

    /// Writes the MAD (256 bytes) into `mad`.
    pub fn emit(&self, mad: &mut [u8; MAD_LEN]) {
        Header::cm(self.msg.attr_id(), self.tid).emit(&mut mad[..HEADER_LEN]);
        self.msg.emit(&mut mad[HEADER_LEN..]);
    }

    /// The MAD's bytes.
    pub fn to_bytes(&self) -> [u8; MAD_LEN] {
        let mut b = [0u8; MAD_LEN];
        self.emit(&mut b);
        b
    }
}

/// The first `N` bytes of `s` (which has at least `N`: the caller checked the
/// attribute's length).
fn array<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&s[..N]);
    a
}

//! The BTH opcode table for the RC, UC and UD transports.
//!
//! The opcode byte is `transport | operation`: the top three bits select the transport
//! (RC 0x00, UC 0x20, RD 0x40, UD 0x60, CNP 0x80, XRC 0xA0), the low five bits the
//! operation. Each opcode fixes which extension headers follow the BTH, in which order,
//! where the packet sits in its message and how much payload it may carry. IBTA Vol. 1
//! §9.2 (OpCode field) and §9.3; the values and header sets are those of Linux's
//! `include/rdma/ib_pack.h` and rxe's opcode table, as listed in
//! `shared/reference/rocev2-wire.md` §3.
//!
//! Not modelled: RD and XRC (unused by the simulator), the CNP (0x81 per scapy, 0x80 per
//! Wireshark), the reserved 0x15 (RESYNC), and FLUSH (0x1C) / ATOMIC_WRITE (0x1D) of IBTA
//! 1.5, whose header order the reference leaves unconfirmed. They parse as
//! [`Error::Opcode`].

use core::fmt;

use super::error::{Error, Header};
use super::{aeth, atomic_ack_eth, atomic_eth, deth, ieth, immdt, reth};

/// The transport service of an opcode (its top three bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connection, opcodes 0x00–0x1F.
    Rc,
    /// Unreliable Connection, opcodes 0x20–0x3F.
    Uc,
    /// Unreliable Datagram, opcodes 0x60–0x7F.
    Ud,
}

impl Transport {
    /// The opcode base: the transport's value in the top three bits.
    pub const fn base(self) -> u8 {
        match self {
            Transport::Rc => 0x00,
            Transport::Uc => 0x20,
            Transport::Ud => 0x60,
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Ud => "UD",
        })
    }
}

/// The operation an opcode belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// SEND (with or without immediate or invalidate).
    Send,
    /// RDMA WRITE (with or without immediate).
    RdmaWrite,
    /// RDMA READ request.
    RdmaReadRequest,
    /// RDMA READ response.
    RdmaReadResponse,
    /// ACK or NAK.
    Acknowledge,
    /// Atomic ACK.
    AtomicAcknowledge,
    /// Atomic compare and swap.
    CompareSwap,
    /// Atomic fetch and add.
    FetchAdd,
}

/// Where a packet sits in its message. Single-packet operations (READ request, atomics,
/// ACKs) are [`Position::Only`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a multi-packet message.
    First,
    /// A middle packet.
    Middle,
    /// Last packet of a multi-packet message.
    Last,
    /// The only packet of its message.
    Only,
}

impl Position {
    /// Whether this packet starts a message (FIRST or ONLY).
    pub const fn starts_message(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }

    /// Whether this packet ends a message (LAST or ONLY).
    pub const fn ends_message(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// How much payload a packet of an opcode carries, given the path MTU
/// (reference §1.4, rxe `check_length`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PayloadRule {
    /// No payload at all (READ request, ACKs, atomics).
    None,
    /// Exactly one PMTU (FIRST and MIDDLE packets).
    Pmtu,
    /// 1 to PMTU bytes (LAST packets).
    OneToPmtu,
    /// 0 to PMTU bytes (ONLY packets).
    UpToPmtu,
}

impl PayloadRule {
    /// Whether a payload of `len` bytes (pad excluded) is allowed at path MTU `pmtu`.
    pub const fn allows(self, len: usize, pmtu: usize) -> bool {
        match self {
            PayloadRule::None => len == 0,
            PayloadRule::Pmtu => len == pmtu,
            PayloadRule::OneToPmtu => len >= 1 && len <= pmtu,
            PayloadRule::UpToPmtu => len <= pmtu,
        }
    }

    /// Whether the opcode may carry any payload.
    pub const fn any(self) -> bool {
        !matches!(self, PayloadRule::None)
    }
}

/// The set of extension headers an opcode carries after its BTH.
///
/// Wire order is fixed (reference §2.2): DETH, then RETH or AtomicETH or AETH, then
/// AtomicAckETH, then ImmDt or IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HeaderSet(u8);

impl HeaderSet {
    /// No extension header.
    pub const NONE: HeaderSet = HeaderSet(0);
    /// Datagram ETH.
    pub const DETH: HeaderSet = HeaderSet(1 << 0);
    /// RDMA ETH.
    pub const RETH: HeaderSet = HeaderSet(1 << 1);
    /// Atomic ETH.
    pub const ATOMIC_ETH: HeaderSet = HeaderSet(1 << 2);
    /// ACK ETH.
    pub const AETH: HeaderSet = HeaderSet(1 << 3);
    /// Atomic ACK ETH.
    pub const ATOMIC_ACK_ETH: HeaderSet = HeaderSet(1 << 4);
    /// Immediate data.
    pub const IMM_DT: HeaderSet = HeaderSet(1 << 5);
    /// Invalidate ETH.
    pub const IETH: HeaderSet = HeaderSet(1 << 6);

    /// The headers in wire order, each with its set bit and size in bytes.
    pub const ORDER: [(HeaderSet, Header, usize); 7] = [
        (HeaderSet::DETH, Header::Deth, deth::HEADER_LEN),
        (HeaderSet::RETH, Header::Reth, reth::HEADER_LEN),
        (
            HeaderSet::ATOMIC_ETH,
            Header::AtomicEth,
            atomic_eth::HEADER_LEN,
        ),
        (HeaderSet::AETH, Header::Aeth, aeth::HEADER_LEN),
        (
            HeaderSet::ATOMIC_ACK_ETH,
            Header::AtomicAckEth,
            atomic_ack_eth::HEADER_LEN,
        ),
        (HeaderSet::IMM_DT, Header::ImmDt, immdt::HEADER_LEN),
        (HeaderSet::IETH, Header::Ieth, ieth::HEADER_LEN),
    ];

    /// The union of two sets.
    pub const fn with(self, other: HeaderSet) -> HeaderSet {
        HeaderSet(self.0 | other.0)
    }

    /// Whether every header of `other` is in this set.
    pub const fn contains(self, other: HeaderSet) -> bool {
        self.0 & other.0 == other.0
    }

    /// The total size in bytes of the headers of this set.
    pub const fn len(self) -> usize {
        let mut total = 0;
        let mut i = 0;
        while i < Self::ORDER.len() {
            if self.contains(Self::ORDER[i].0) {
                total += Self::ORDER[i].2;
            }
            i += 1;
        }
        total
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// Everything the opcode table says about one opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// The IBTA name without the transport, e.g. `SEND_ONLY_WITH_IMMEDIATE`.
    pub name: &'static str,
    /// The transport service.
    pub transport: Transport,
    /// The operation.
    pub operation: Operation,
    /// The packet's place in its message.
    pub position: Position,
    /// The extension headers after the BTH.
    pub headers: HeaderSet,
    /// The payload rule.
    pub payload: PayloadRule,
}

macro_rules! opcodes {
    ($(
        $(#[$doc:meta])*
        $variant:ident = $value:literal, $name:literal, $transport:ident, $operation:ident,
            $position:ident, [$($header:ident),*], $payload:ident;
    )*) => {
        /// A BTH opcode of the RC, UC or UD transport (reference §3).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum Opcode {
            $( $(#[$doc])* $variant = $value, )*
        }

        impl Opcode {
            /// Every opcode of the table, in increasing value.
            pub const ALL: &'static [Opcode] = &[$(Opcode::$variant),*];

            /// The opcode of a BTH opcode byte, if it is one of the table (one load
            /// from a table indexed by the byte).
            pub const fn from_u8(value: u8) -> Option<Opcode> {
                BY_BYTE[value as usize]
            }

            /// The table row of this opcode (one load from a table indexed by the
            /// opcode byte: the packet path asks for it several times per packet).
            pub const fn info(self) -> OpcodeInfo {
                INFO[self as usize]
            }
        }

        /// [`Opcode::from_u8`] as a table indexed by the byte.
        const BY_BYTE: [Option<Opcode>; 256] = {
            let mut t = [None; 256];
            $( t[$value] = Some(Opcode::$variant); )*
            t
        };

        /// [`Opcode::info`] as a table indexed by the opcode byte. Rows of bytes that
        /// are not opcodes hold a placeholder and are never read (an [`Opcode`] is
        /// always one of the table).
        const INFO: [OpcodeInfo; 256] = {
            let mut t = [OpcodeInfo {
                name: "",
                transport: Transport::Rc,
                operation: Operation::Send,
                position: Position::Only,
                headers: HeaderSet::NONE,
                payload: PayloadRule::None,
            }; 256];
            $( t[$value] = OpcodeInfo {
                name: $name,
                transport: Transport::$transport,
                operation: Operation::$operation,
                position: Position::$position,
                headers: HeaderSet::NONE$(.with(HeaderSet::$header))*,
                payload: PayloadRule::$payload,
            }; )*
            t
        };

        /// [`Opcode::headers_len`] as a table indexed by the opcode byte.
        const HEADERS_LEN: [u8; 256] = {
            let mut t = [0u8; 256];
            let mut i = 0;
            while i < 256 {
                t[i] = INFO[i].headers.len() as u8;
                i += 1;
            }
            t
        };
    };
}

opcodes! {
    /// RC SEND_FIRST.
    RcSendFirst = 0x00, "SEND_FIRST", Rc, Send, First, [], Pmtu;
    /// RC SEND_MIDDLE.
    RcSendMiddle = 0x01, "SEND_MIDDLE", Rc, Send, Middle, [], Pmtu;
    /// RC SEND_LAST.
    RcSendLast = 0x02, "SEND_LAST", Rc, Send, Last, [], OneToPmtu;
    /// RC SEND_LAST_WITH_IMMEDIATE.
    RcSendLastWithImmediate = 0x03, "SEND_LAST_WITH_IMMEDIATE", Rc, Send, Last, [IMM_DT], OneToPmtu;
    /// RC SEND_ONLY.
    RcSendOnly = 0x04, "SEND_ONLY", Rc, Send, Only, [], UpToPmtu;
    /// RC SEND_ONLY_WITH_IMMEDIATE.
    RcSendOnlyWithImmediate = 0x05, "SEND_ONLY_WITH_IMMEDIATE", Rc, Send, Only, [IMM_DT], UpToPmtu;
    /// RC RDMA_WRITE_FIRST.
    RcRdmaWriteFirst = 0x06, "RDMA_WRITE_FIRST", Rc, RdmaWrite, First, [RETH], Pmtu;
    /// RC RDMA_WRITE_MIDDLE.
    RcRdmaWriteMiddle = 0x07, "RDMA_WRITE_MIDDLE", Rc, RdmaWrite, Middle, [], Pmtu;
    /// RC RDMA_WRITE_LAST.
    RcRdmaWriteLast = 0x08, "RDMA_WRITE_LAST", Rc, RdmaWrite, Last, [], OneToPmtu;
    /// RC RDMA_WRITE_LAST_WITH_IMMEDIATE.
    RcRdmaWriteLastWithImmediate = 0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", Rc, RdmaWrite, Last, [IMM_DT], OneToPmtu;
    /// RC RDMA_WRITE_ONLY.
    RcRdmaWriteOnly = 0x0a, "RDMA_WRITE_ONLY", Rc, RdmaWrite, Only, [RETH], UpToPmtu;
    /// RC RDMA_WRITE_ONLY_WITH_IMMEDIATE.
    RcRdmaWriteOnlyWithImmediate = 0x0b, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", Rc, RdmaWrite, Only, [RETH, IMM_DT], UpToPmtu;
    /// RC RDMA_READ_REQUEST (uses max(1, ceil(len/PMTU)) PSNs).
    RcRdmaReadRequest = 0x0c, "RDMA_READ_REQUEST", Rc, RdmaReadRequest, Only, [RETH], None;
    /// RC RDMA_READ_RESPONSE_FIRST.
    RcRdmaReadResponseFirst = 0x0d, "RDMA_READ_RESPONSE_FIRST", Rc, RdmaReadResponse, First, [AETH], Pmtu;
    /// RC RDMA_READ_RESPONSE_MIDDLE (no AETH).
    RcRdmaReadResponseMiddle = 0x0e, "RDMA_READ_RESPONSE_MIDDLE", Rc, RdmaReadResponse, Middle, [], Pmtu;
    /// RC RDMA_READ_RESPONSE_LAST.
    RcRdmaReadResponseLast = 0x0f, "RDMA_READ_RESPONSE_LAST", Rc, RdmaReadResponse, Last, [AETH], OneToPmtu;
    /// RC RDMA_READ_RESPONSE_ONLY.
    RcRdmaReadResponseOnly = 0x10, "RDMA_READ_RESPONSE_ONLY", Rc, RdmaReadResponse, Only, [AETH], UpToPmtu;
    /// RC ACKNOWLEDGE (ACK, RNR NAK or NAK, per the AETH syndrome).
    RcAcknowledge = 0x11, "ACKNOWLEDGE", Rc, Acknowledge, Only, [AETH], None;
    /// RC ATOMIC_ACKNOWLEDGE.
    RcAtomicAcknowledge = 0x12, "ATOMIC_ACKNOWLEDGE", Rc, AtomicAcknowledge, Only, [AETH, ATOMIC_ACK_ETH], None;
    /// RC COMPARE_SWAP.
    RcCompareSwap = 0x13, "COMPARE_SWAP", Rc, CompareSwap, Only, [ATOMIC_ETH], None;
    /// RC FETCH_ADD.
    RcFetchAdd = 0x14, "FETCH_ADD", Rc, FetchAdd, Only, [ATOMIC_ETH], None;
    /// RC SEND_LAST_WITH_INVALIDATE.
    RcSendLastWithInvalidate = 0x16, "SEND_LAST_WITH_INVALIDATE", Rc, Send, Last, [IETH], OneToPmtu;
    /// RC SEND_ONLY_WITH_INVALIDATE.
    RcSendOnlyWithInvalidate = 0x17, "SEND_ONLY_WITH_INVALIDATE", Rc, Send, Only, [IETH], UpToPmtu;
    /// UC SEND_FIRST.
    UcSendFirst = 0x20, "SEND_FIRST", Uc, Send, First, [], Pmtu;
    /// UC SEND_MIDDLE.
    UcSendMiddle = 0x21, "SEND_MIDDLE", Uc, Send, Middle, [], Pmtu;
    /// UC SEND_LAST.
    UcSendLast = 0x22, "SEND_LAST", Uc, Send, Last, [], OneToPmtu;
    /// UC SEND_LAST_WITH_IMMEDIATE.
    UcSendLastWithImmediate = 0x23, "SEND_LAST_WITH_IMMEDIATE", Uc, Send, Last, [IMM_DT], OneToPmtu;
    /// UC SEND_ONLY.
    UcSendOnly = 0x24, "SEND_ONLY", Uc, Send, Only, [], UpToPmtu;
    /// UC SEND_ONLY_WITH_IMMEDIATE.
    UcSendOnlyWithImmediate = 0x25, "SEND_ONLY_WITH_IMMEDIATE", Uc, Send, Only, [IMM_DT], UpToPmtu;
    /// UC RDMA_WRITE_FIRST.
    UcRdmaWriteFirst = 0x26, "RDMA_WRITE_FIRST", Uc, RdmaWrite, First, [RETH], Pmtu;
    /// UC RDMA_WRITE_MIDDLE.
    UcRdmaWriteMiddle = 0x27, "RDMA_WRITE_MIDDLE", Uc, RdmaWrite, Middle, [], Pmtu;
    /// UC RDMA_WRITE_LAST.
    UcRdmaWriteLast = 0x28, "RDMA_WRITE_LAST", Uc, RdmaWrite, Last, [], OneToPmtu;
    /// UC RDMA_WRITE_LAST_WITH_IMMEDIATE.
    UcRdmaWriteLastWithImmediate = 0x29, "RDMA_WRITE_LAST_WITH_IMMEDIATE", Uc, RdmaWrite, Last, [IMM_DT], OneToPmtu;
    /// UC RDMA_WRITE_ONLY.
    UcRdmaWriteOnly = 0x2a, "RDMA_WRITE_ONLY", Uc, RdmaWrite, Only, [RETH], UpToPmtu;
    /// UC RDMA_WRITE_ONLY_WITH_IMMEDIATE.
    UcRdmaWriteOnlyWithImmediate = 0x2b, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", Uc, RdmaWrite, Only, [RETH, IMM_DT], UpToPmtu;
    /// UD SEND_ONLY.
    UdSendOnly = 0x64, "SEND_ONLY", Ud, Send, Only, [DETH], UpToPmtu;
    /// UD SEND_ONLY_WITH_IMMEDIATE.
    UdSendOnlyWithImmediate = 0x65, "SEND_ONLY_WITH_IMMEDIATE", Ud, Send, Only, [DETH, IMM_DT], UpToPmtu;
}

impl Opcode {
    /// The opcode byte.
    pub const fn value(self) -> u8 {
        self as u8
    }

    /// The IBTA name without the transport, e.g. `RDMA_WRITE_ONLY`.
    pub const fn name(self) -> &'static str {
        self.info().name
    }

    /// The transport service.
    pub const fn transport(self) -> Transport {
        self.info().transport
    }

    /// The operation.
    pub const fn operation(self) -> Operation {
        self.info().operation
    }

    /// The packet's place in its message.
    pub const fn position(self) -> Position {
        self.info().position
    }

    /// The extension headers after the BTH.
    pub const fn headers(self) -> HeaderSet {
        self.info().headers
    }

    /// The size of the extension headers after the BTH.
    pub const fn headers_len(self) -> usize {
        HEADERS_LEN[self as usize] as usize
    }

    /// The payload rule.
    pub const fn payload(self) -> PayloadRule {
        self.info().payload
    }

    /// Whether the packet carries an ImmDt header.
    pub const fn has_immediate(self) -> bool {
        self.headers().contains(HeaderSet::IMM_DT)
    }

    /// Whether the packet carries an IETH header.
    pub const fn has_invalidate(self) -> bool {
        self.headers().contains(HeaderSet::IETH)
    }

    /// Whether the packet travels requester → responder (everything but READ responses
    /// and acknowledgements).
    pub const fn is_request(self) -> bool {
        !self.is_response()
    }

    /// Whether the packet travels responder → requester: READ responses, ACK/NAK,
    /// atomic ACK.
    pub const fn is_response(self) -> bool {
        matches!(
            self.operation(),
            Operation::RdmaReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge
        )
    }
}

impl TryFrom<u8> for Opcode {
    type Error = Error;

    fn try_from(value: u8) -> Result<Self, Error> {
        Opcode::from_u8(value).ok_or(Error::Opcode(value))
    }
}

impl From<Opcode> for u8 {
    fn from(op: Opcode) -> u8 {
        op as u8
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.transport(), self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_converts_only_to_its_own_opcode() {
        let mut known = 0;
        for v in 0..=255u8 {
            match Opcode::try_from(v) {
                Ok(op) => {
                    known += 1;
                    assert_eq!(u8::from(op), v);
                    assert_eq!(op.transport().base(), v & 0xe0, "{op}");
                }
                Err(e) => assert_eq!(e, Error::Opcode(v)),
            }
        }
        assert_eq!(known, Opcode::ALL.len());
        assert_eq!(known, 23 + 12 + 2);
        assert!(Opcode::ALL.windows(2).all(|w| w[0].value() < w[1].value()));
    }

    #[test]
    fn table_matches_the_reference() {
        // Reference §3: headers after the BTH per opcode.
        use Opcode::*;
        let h = |op: Opcode| op.headers();
        assert_eq!(h(RcSendOnly), HeaderSet::NONE);
        assert_eq!(h(RcSendLastWithImmediate), HeaderSet::IMM_DT);
        assert_eq!(h(RcRdmaWriteFirst), HeaderSet::RETH);
        assert_eq!(h(RcRdmaWriteMiddle), HeaderSet::NONE);
        assert_eq!(
            h(RcRdmaWriteOnlyWithImmediate),
            HeaderSet::RETH.with(HeaderSet::IMM_DT)
        );
        assert_eq!(h(RcRdmaReadRequest), HeaderSet::RETH);
        assert_eq!(h(RcRdmaReadResponseFirst), HeaderSet::AETH);
        assert_eq!(h(RcRdmaReadResponseMiddle), HeaderSet::NONE);
        assert_eq!(h(RcRdmaReadResponseLast), HeaderSet::AETH);
        assert_eq!(h(RcRdmaReadResponseOnly), HeaderSet::AETH);
        assert_eq!(h(RcAcknowledge), HeaderSet::AETH);
        assert_eq!(
            h(RcAtomicAcknowledge),
            HeaderSet::AETH.with(HeaderSet::ATOMIC_ACK_ETH)
        );
        assert_eq!(h(RcCompareSwap), HeaderSet::ATOMIC_ETH);
        assert_eq!(h(RcFetchAdd), HeaderSet::ATOMIC_ETH);
        assert_eq!(h(RcSendLastWithInvalidate), HeaderSet::IETH);
        assert_eq!(h(UdSendOnly), HeaderSet::DETH);
        assert_eq!(
            h(UdSendOnlyWithImmediate),
            HeaderSet::DETH.with(HeaderSet::IMM_DT)
        );
        assert_eq!(RcAtomicAcknowledge.headers_len(), 12);
        assert_eq!(RcCompareSwap.headers_len(), 28);
        assert_eq!(RcRdmaWriteOnlyWithImmediate.headers_len(), 20);
        assert_eq!(UdSendOnlyWithImmediate.headers_len(), 12);
        // UC mirrors the RC SEND and WRITE families.
        for op in Opcode::ALL
            .iter()
            .filter(|o| o.transport() == Transport::Uc)
        {
            let rc = Opcode::from_u8(op.value() & 0x1f).unwrap();
            assert_eq!(op.info().headers, rc.info().headers);
            assert_eq!(op.name(), rc.name());
            assert_eq!(op.payload(), rc.payload());
            assert!(matches!(
                op.operation(),
                Operation::Send | Operation::RdmaWrite
            ));
        }
        assert_eq!(RcRdmaReadRequest.payload(), PayloadRule::None);
        assert!(RcRdmaReadResponseMiddle.is_response());
        assert!(RcCompareSwap.is_request());
        assert_eq!(UdSendOnly.to_string(), "UD SEND_ONLY");
    }

    #[test]
    fn payload_rules() {
        assert!(PayloadRule::Pmtu.allows(1024, 1024));
        assert!(!PayloadRule::Pmtu.allows(1023, 1024));
        assert!(!PayloadRule::OneToPmtu.allows(0, 1024));
        assert!(PayloadRule::OneToPmtu.allows(1024, 1024));
        assert!(PayloadRule::UpToPmtu.allows(0, 1024));
        assert!(!PayloadRule::UpToPmtu.allows(1025, 1024));
        assert!(PayloadRule::None.allows(0, 1024));
        assert!(!PayloadRule::None.allows(1, 1024));
    }
}

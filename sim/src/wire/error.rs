//! The one error type of the wire codecs.

use core::fmt;

use super::opcode::Opcode;

/// The headers of a RoCEv2 frame, to name the one an [`Error`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Header {
    /// Ethernet II header.
    Ethernet,
    /// IPv4 header.
    Ipv4,
    /// UDP header.
    Udp,
    /// Base Transport Header.
    Bth,
    /// Datagram Extended Transport Header.
    Deth,
    /// RDMA Extended Transport Header.
    Reth,
    /// Atomic Extended Transport Header.
    AtomicEth,
    /// ACK Extended Transport Header.
    Aeth,
    /// Atomic ACK Extended Transport Header.
    AtomicAckEth,
    /// Immediate Data.
    ImmDt,
    /// Invalidate Extended Transport Header.
    Ieth,
    /// The payload and its pad bytes.
    Payload,
    /// The Invariant CRC.
    Icrc,
}

impl Header {
    /// The header's name as the IBTA and Wireshark write it.
    pub const fn name(self) -> &'static str {
        match self {
            Header::Ethernet => "Ethernet",
            Header::Ipv4 => "IPv4",
            Header::Udp => "UDP",
            Header::Bth => "BTH",
            Header::Deth => "DETH",
            Header::Reth => "RETH",
            Header::AtomicEth => "AtomicETH",
            Header::Aeth => "AETH",
            Header::AtomicAckEth => "AtomicAckETH",
            Header::ImmDt => "ImmDt",
            Header::Ieth => "IETH",
            Header::Payload => "payload",
            Header::Icrc => "ICRC",
        }
    }
}

impl fmt::Display for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What is wrong with a packet being parsed, or with a representation being emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A header (or the ICRC) does not fit in the bytes left for it.
    #[error("{header} truncated: needs {need} bytes, {have} available")]
    Truncated {
        /// The header that does not fit.
        header: Header,
        /// Bytes it needs.
        need: usize,
        /// Bytes there are.
        have: usize,
    },
    /// The EtherType is not IPv4 (0x0800); IPv6 and RoCEv1 are not modelled.
    #[error("EtherType {0:#06x} is not IPv4")]
    EtherType(u16),
    /// The IPv4 version nibble is not 4.
    #[error("IPv4 version field is {0}, not 4")]
    Ipv4Version(u8),
    /// The IPv4 IHL is not 5: shorter is invalid, options are not used by RoCEv2.
    #[error("IPv4 header length (IHL) is {0} words, only 5 is supported")]
    Ipv4HeaderLength(u8),
    /// The IPv4 total length is shorter than the header or longer than the buffer.
    #[error("IPv4 total length {total} is inconsistent with {available} available bytes")]
    Ipv4TotalLength {
        /// The total length field.
        total: u16,
        /// Bytes from the start of the IPv4 header to the end of the buffer.
        available: usize,
    },
    /// The packet is a fragment (MF set or a non-zero fragment offset); RoCEv2 is never
    /// fragmented.
    #[error("IPv4 fragment (flags/offset word {0:#06x}); RoCEv2 packets are never fragmented")]
    Ipv4Fragment(u16),
    /// The IPv4 header checksum is wrong.
    #[error("IPv4 header checksum {found:#06x} is wrong, {expected:#06x} expected")]
    Ipv4Checksum {
        /// The checksum in the header.
        found: u16,
        /// The checksum the header should carry.
        expected: u16,
    },
    /// The IPv4 protocol is not UDP (17).
    #[error("IPv4 protocol {0} is not UDP (17)")]
    Protocol(u8),
    /// The UDP length field disagrees with the IPv4 payload length.
    #[error("UDP length {udp} is inconsistent with the {ip_payload}-byte IPv4 payload")]
    UdpLength {
        /// The UDP length field.
        udp: u16,
        /// The IPv4 payload length.
        ip_payload: usize,
    },
    /// The UDP destination port is not the RoCEv2 port 4791.
    #[error("UDP destination port {0} is not RoCEv2 (4791)")]
    UdpPort(u16),
    /// A non-zero UDP checksum is wrong.
    #[error("UDP checksum {found:#06x} is wrong, {expected:#06x} expected")]
    UdpChecksum {
        /// The checksum in the header.
        found: u16,
        /// The checksum the header should carry.
        expected: u16,
    },
    /// The BTH opcode is not one of the RC, UC or UD opcodes this codec knows.
    #[error("unknown or unsupported BTH opcode {0:#04x}")]
    Opcode(u8),
    /// The BTH transport header version is not 0.
    #[error("BTH transport header version {0} is not 0")]
    TransportVersion(u8),
    /// The bytes between the headers and the ICRC are not a multiple of 4, or fewer than
    /// the BTH pad count.
    #[error("payload and pad span {len} bytes, which does not fit pad count {pad}")]
    PadCount {
        /// The BTH pad count.
        pad: u8,
        /// Bytes between the last header and the ICRC.
        len: usize,
    },
    /// The opcode carries no payload but the packet has one (or the representation
    /// being emitted has one).
    #[error("{opcode} carries no payload, found {len} bytes")]
    UnexpectedPayload {
        /// The opcode.
        opcode: Opcode,
        /// Payload bytes found, pad included.
        len: usize,
    },
    /// The AETH syndrome is one of the reserved encodings.
    #[error("reserved AETH syndrome {0:#04x}")]
    Syndrome(u8),
    /// The Invariant CRC does not match the packet.
    #[error("ICRC {found:#010x} is wrong, {expected:#010x} expected")]
    Icrc {
        /// The CRC value read from the wire (little-endian bytes).
        found: u32,
        /// The CRC computed over the masked packet.
        expected: u32,
    },
    /// A representation being emitted has an extension header its opcode does not carry,
    /// or lacks one it requires.
    #[error("{opcode} {} {header}", if *.present { "does not carry" } else { "requires" })]
    HeaderMismatch {
        /// The opcode.
        opcode: Opcode,
        /// The header in question.
        header: Header,
        /// Whether the representation had it.
        present: bool,
    },
    /// A value does not fit its field (e.g. a QPN above 24 bits).
    #[error("value {value:#x} does not fit field {field}")]
    FieldRange {
        /// The field.
        field: &'static str,
        /// The value.
        value: u64,
    },
    /// The packet would not fit in an IPv4 datagram.
    #[error("packet of {0} bytes is too long for IPv4")]
    TooLong(usize),
    /// The buffer given to `emit` is too small.
    #[error("buffer of {have} bytes is too small, {need} needed")]
    BufferTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes in the buffer.
        have: usize,
    },
}

/// The result type of the wire codecs.
pub type Result<T> = core::result::Result<T, Error>;

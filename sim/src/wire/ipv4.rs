//! IPv4 header (20 bytes, no options), the network layer of RoCEv2 over IPv4.
//!
//! RFC 791 (format), RFC 1071 (header checksum), RFC 2474 and RFC 3168 (the TOS byte as
//! DSCP and ECN). How a RoCEv2 sender fills it (`shared/reference/rocev2-wire.md` §1.1,
//! rxe `prepare_ipv4_hdr`): version 4, IHL 5, TOS = the address vector's traffic class
//! (DSCP << 2 | ECN), DF set, TTL = the hop limit, protocol 17. The ICRC covers the
//! header except TOS, TTL and checksum, so the identification must be final before the
//! ICRC is computed.
//!
//! | bytes | field |
//! |---|---|
//! | 0 | version (4) and IHL (5) |
//! | 1 | DSCP (7:2) and ECN (1:0) |
//! | 2–3 | total length |
//! | 4–5 | identification |
//! | 6–7 | flags (reserved, DF, MF) and fragment offset |
//! | 8 | TTL |
//! | 9 | protocol |
//! | 10–11 | header checksum |
//! | 12–15 | source address |
//! | 16–19 | destination address |

use std::net::Ipv4Addr;

use super::{be, Error, Header, Result};

mod field {
    use crate::wire::Field;
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLG_OFF: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC_ADDR: Field = 12..16;
    pub const DST_ADDR: Field = 16..20;
}

/// The size of an IPv4 header without options, the only kind RoCEv2 uses.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

/// The largest IPv4 datagram.
pub const MAX_TOTAL_LEN: usize = u16::MAX as usize;

/// The IP protocol number of UDP.
pub const PROTOCOL_UDP: u8 = 17;

/// Byte offsets of the fields the ICRC masks: TOS, TTL and the checksum (reference §2.4).
pub const ICRC_MASKED_BYTES: [usize; 4] = [
    field::TOS,
    field::TTL,
    field::CHECKSUM.start,
    field::CHECKSUM.start + 1,
];

pub(crate) const DF: u16 = 0x4000;
const MF: u16 = 0x2000;
const FRAG_OFFSET: u16 = 0x1fff;

/// The ECN codepoint of the TOS byte (RFC 3168).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Ecn {
    /// Not ECN-capable transport (00).
    #[default]
    NotEct = 0,
    /// ECN-capable transport, ECT(1) (01).
    Ect1 = 1,
    /// ECN-capable transport, ECT(0) (10).
    Ect0 = 2,
    /// Congestion experienced (11), set by switches; answered with a CNP.
    Ce = 3,
}

impl Ecn {
    /// The codepoint of the low two bits of `bits`.
    pub const fn from_bits(bits: u8) -> Ecn {
        match bits & 3 {
            0 => Ecn::NotEct,
            1 => Ecn::Ect1,
            2 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }
}

/// The Internet checksum (RFC 1071): the ones' complement of the ones' complement sum of
/// the 16-bit big-endian words of `data`, an odd last byte padded with zero.
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(0, data))
}

/// Adds the 16-bit words of `data` to a 32-bit accumulator (odd tail padded with zero).
pub(crate) fn sum(mut acc: u32, data: &[u8]) -> u32 {
    let mut words = data.chunks_exact(2);
    for w in &mut words {
        acc = acc.wrapping_add(u32::from(u16::from_be_bytes([w[0], w[1]])));
        // Fold early so long inputs cannot overflow.
        if acc & 0x8000_0000 != 0 {
            acc = (acc & 0xffff) + (acc >> 16);
        }
    }
    if let [last] = words.remainder() {
        acc = acc.wrapping_add(u32::from(*last) << 8);
    }
    acc
}

/// The checksum an IPv4 header (without options) should carry: [`checksum`] of its
/// words with the checksum field taken as zero. The frame parser's fast path calls it
/// per received frame, so it adds the header as five 32-bit big-endian words (the
/// checksum field, bytes 10-11, masked out) and folds the 64-bit sum: RFC 1071 §2's
/// "larger word" sum, equal to the 16-bit one because 2^16 ≡ 1 modulo 2^16 − 1 (and
/// both sums are zero only for an all-zero header).
#[inline]
pub fn header_checksum(h: &[u8; HEADER_LEN]) -> u16 {
    let w = |at: usize| u64::from(u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]));
    const _: () = assert!(field::CHECKSUM.start == 10 && HEADER_LEN == 20);
    let mut acc = w(0) + w(4) + (w(8) & 0xffff_0000) + w(12) + w(16);
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// Folds a 32-bit ones' complement accumulator to 16 bits.
pub(crate) fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

buffer_view! {
    /// A typed view of an IPv4 header and its payload.
    pub struct Packet;
    /// Wraps a buffer without checking it. Accessors panic on a buffer shorter than
    /// [`HEADER_LEN`], and [`Packet::payload`] on a total length beyond the buffer: use
    /// [`Packet::new_checked`] on bytes from elsewhere.
    fn new_unchecked;
    /// Wraps a buffer after [`Packet::check`].
    fn new_checked => check;
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks the length, version 4, IHL 5 (no options) and a total length that covers
    /// the header and fits the buffer (the buffer may be longer, e.g. Ethernet padding).
    /// Checksum and fragmentation are checked by [`Repr::parse`].
    pub fn check(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        super::check_len(Header::Ipv4, HEADER_LEN, len)?;
        if self.version() != 4 {
            return Err(Error::Ipv4Version(self.version()));
        }
        if self.ihl() != 5 {
            return Err(Error::Ipv4HeaderLength(self.ihl()));
        }
        let total = self.total_len();
        if usize::from(total) < HEADER_LEN || usize::from(total) > len {
            return Err(Error::Ipv4TotalLength {
                total,
                available: len,
            });
        }
        Ok(())
    }

    fn byte(&self, at: usize) -> u8 {
        self.buffer.as_ref()[at]
    }

    /// The version field.
    pub fn version(&self) -> u8 {
        self.byte(field::VER_IHL) >> 4
    }

    /// The IHL field, the header length in 32-bit words.
    pub fn ihl(&self) -> u8 {
        self.byte(field::VER_IHL) & 0x0f
    }

    /// The whole TOS byte.
    pub fn tos(&self) -> u8 {
        self.byte(field::TOS)
    }

    /// The DSCP (upper six bits of TOS).
    pub fn dscp(&self) -> u8 {
        self.tos() >> 2
    }

    /// The ECN codepoint (lower two bits of TOS).
    pub fn ecn(&self) -> Ecn {
        Ecn::from_bits(self.tos())
    }

    /// The total length of the datagram.
    pub fn total_len(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// The identification.
    pub fn ident(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::IDENT.start)
    }

    /// The flags and fragment offset word.
    pub fn flags_frag(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::FLG_OFF.start)
    }

    /// The don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.flags_frag() & DF != 0
    }

    /// The more-fragments flag.
    pub fn more_frags(&self) -> bool {
        self.flags_frag() & MF != 0
    }

    /// The fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        self.flags_frag() & FRAG_OFFSET
    }

    /// The time to live.
    pub fn ttl(&self) -> u8 {
        self.byte(field::TTL)
    }

    /// The protocol number.
    pub fn protocol(&self) -> u8 {
        self.byte(field::PROTOCOL)
    }

    /// The header checksum.
    pub fn checksum(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    fn addr(&self, at: usize) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3])
    }

    /// The source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        self.addr(field::SRC_ADDR.start)
    }

    /// The destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        self.addr(field::DST_ADDR.start)
    }

    /// The checksum the header should carry (computed with the checksum field as zero).
    pub fn expected_checksum(&self) -> u16 {
        let h: &[u8; HEADER_LEN] = self.buffer.as_ref()[..HEADER_LEN]
            .try_into()
            .expect("HEADER_LEN bytes");
        header_checksum(h)
    }

    /// Whether the header checksum is right.
    pub fn verify_checksum(&self) -> bool {
        self.checksum() == self.expected_checksum()
    }

    /// The 20 header bytes.
    pub fn header_bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[..HEADER_LEN]
    }

    /// The payload: the bytes after the header up to the total length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets version 4 and IHL 5.
    pub fn set_version_ihl(&mut self) {
        self.buffer.as_mut()[field::VER_IHL] = 0x45;
    }

    /// Sets the whole TOS byte.
    pub fn set_tos(&mut self, value: u8) {
        self.buffer.as_mut()[field::TOS] = value;
    }

    /// Sets the DSCP (low six bits of `value`), keeping the ECN bits.
    pub fn set_dscp(&mut self, value: u8) {
        let tos = (value << 2) | (self.tos() & 3);
        self.set_tos(tos);
    }

    /// Sets the ECN codepoint, keeping the DSCP.
    pub fn set_ecn(&mut self, value: Ecn) {
        let tos = (self.tos() & !3) | value as u8;
        self.set_tos(tos);
    }

    /// Sets the total length.
    pub fn set_total_len(&mut self, value: u16) {
        be::set_u16(self.buffer.as_mut(), field::LENGTH.start, value)
    }

    /// Sets the identification.
    pub fn set_ident(&mut self, value: u16) {
        be::set_u16(self.buffer.as_mut(), field::IDENT.start, value)
    }

    /// Sets the flags and fragment offset word.
    pub fn set_flags_frag(&mut self, value: u16) {
        be::set_u16(self.buffer.as_mut(), field::FLG_OFF.start, value)
    }

    /// Sets the TTL.
    pub fn set_ttl(&mut self, value: u8) {
        self.buffer.as_mut()[field::TTL] = value;
    }

    /// Sets the protocol number.
    pub fn set_protocol(&mut self, value: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = value;
    }

    /// Sets the header checksum field.
    pub fn set_checksum(&mut self, value: u16) {
        be::set_u16(self.buffer.as_mut(), field::CHECKSUM.start, value)
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, value: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&value.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, value: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&value.octets());
    }

    /// Computes and writes the header checksum.
    pub fn fill_checksum(&mut self) {
        let c = self.expected_checksum();
        self.set_checksum(c);
    }

    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.total_len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// The values of an IPv4 header. The total length follows from the payload and is an
/// argument of [`Repr::emit`]; the checksum is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Protocol number ([`PROTOCOL_UDP`] for RoCEv2).
    pub protocol: u8,
    /// DSCP, six bits.
    pub dscp: u8,
    /// ECN codepoint.
    pub ecn: Ecn,
    /// Time to live (the address vector's hop limit).
    pub ttl: u8,
    /// Identification.
    pub ident: u16,
    /// Don't fragment (RoCEv2 senders set it).
    pub dont_frag: bool,
}

impl Repr {
    /// A RoCEv2 header: UDP, DF set, TOS 0, TTL 64, identification 0.
    pub const fn rocev2(src_addr: Ipv4Addr, dst_addr: Ipv4Addr) -> Repr {
        Repr {
            src_addr,
            dst_addr,
            protocol: PROTOCOL_UDP,
            dscp: 0,
            ecn: Ecn::NotEct,
            ttl: 64,
            ident: 0,
            dont_frag: true,
        }
    }

    /// The TOS byte, `dscp << 2 | ecn` (the verbs traffic class).
    pub const fn tos(&self) -> u8 {
        (self.dscp << 2) | self.ecn as u8
    }

    /// Reads a checked IPv4 header: the checksum must be right and the datagram must not
    /// be a fragment.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check()?;
        if !packet.verify_checksum() {
            return Err(Error::Ipv4Checksum {
                found: packet.checksum(),
                expected: packet.expected_checksum(),
            });
        }
        if packet.more_frags() || packet.frag_offset() != 0 {
            return Err(Error::Ipv4Fragment(packet.flags_frag()));
        }
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            protocol: packet.protocol(),
            dscp: packet.dscp(),
            ecn: packet.ecn(),
            ttl: packet.ttl(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
        })
    }

    /// The bytes this header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes this header for a payload of `payload_len` bytes, checksum included.
    /// The buffer must hold the header; the DSCP must fit six bits and the datagram
    /// 65535 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
        payload_len: usize,
    ) -> Result<()> {
        super::check_len(Header::Ipv4, HEADER_LEN, packet.buffer.as_ref().len())?;
        let total = HEADER_LEN + payload_len;
        if total > MAX_TOTAL_LEN {
            return Err(Error::TooLong(total));
        }
        if self.dscp > 0x3f {
            return Err(Error::FieldRange {
                field: "IPv4 DSCP",
                value: u64::from(self.dscp),
            });
        }
        packet.set_version_ihl();
        packet.set_tos(self.tos());
        packet.set_total_len(total as u16);
        packet.set_ident(self.ident);
        packet.set_flags_frag(if self.dont_frag { DF } else { 0 });
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        packet.fill_checksum();
        Ok(())
    }

    /// The 20 header bytes this representation emits for a payload of `payload_len`.
    pub fn header(&self, payload_len: usize) -> Result<[u8; HEADER_LEN]> {
        let mut bytes = [0u8; HEADER_LEN];
        self.emit(&mut Packet::new_unchecked(&mut bytes[..]), payload_len)?;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference_repr() -> Repr {
        Repr::rocev2(Ipv4Addr::new(192, 168, 0, 1), Ipv4Addr::new(192, 168, 0, 2))
    }

    /// Reference §2.4: `45 00 0034 0000 4000 40 11 b965 c0a80001 c0a80002`.
    const REFERENCE: [u8; 20] = [
        0x45, 0x00, 0x00, 0x34, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb9, 0x65, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0x02,
    ];

    #[test]
    fn reference_header_and_checksum() {
        assert_eq!(reference_repr().header(0x34 - 20), Ok(REFERENCE));
        let mut buf = [0u8; 0x34];
        buf[..20].copy_from_slice(&REFERENCE);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.checksum(), 0xb965);
        assert_eq!(checksum(&REFERENCE), 0, "a correct header sums to zero");
        assert_eq!(Repr::parse(&p), Ok(reference_repr()));
        assert_eq!(p.payload().len(), 0x34 - 20);
    }

    #[test]
    fn tos_is_dscp_and_ecn() {
        let mut repr = reference_repr();
        repr.dscp = 26;
        repr.ecn = Ecn::Ce;
        assert_eq!(repr.tos(), 0x6b);
        let h = repr.header(0).unwrap();
        assert_eq!(h[1], 0x6b);
        let p = Packet::new_checked(&h[..]).unwrap();
        assert_eq!((p.dscp(), p.ecn()), (26, Ecn::Ce));
        assert_eq!(Repr::parse(&p), Ok(repr));
        repr.dscp = 64;
        assert!(repr.header(0).is_err());
    }

    #[test]
    fn invalid_headers_are_typed_errors() {
        let mut buf = [0u8; 0x34];
        buf[..20].copy_from_slice(&REFERENCE);
        let check = |b: &[u8]| Repr::parse(&Packet::new_unchecked(b));

        let mut b = buf;
        b[0] = 0x65;
        assert_eq!(check(&b), Err(Error::Ipv4Version(6)));
        b = buf;
        b[0] = 0x46;
        assert_eq!(check(&b), Err(Error::Ipv4HeaderLength(6)));
        b = buf;
        b[3] = 0x35;
        assert!(matches!(
            check(&b),
            Err(Error::Ipv4TotalLength { total: 0x35, .. })
        ));
        b = buf;
        b[3] = 0x13;
        assert!(matches!(check(&b), Err(Error::Ipv4TotalLength { .. })));
        b = buf;
        b[8] = 1;
        assert_eq!(
            check(&b),
            Err(Error::Ipv4Checksum {
                found: 0xb965,
                expected: 0xf865
            })
        );
        b = buf;
        b[6] = 0x20; // MF
        Packet::new_unchecked(&mut b[..]).fill_checksum();
        assert_eq!(check(&b), Err(Error::Ipv4Fragment(0x2000)));
        b = buf;
        b[7] = 0x01; // DF with offset 1
        Packet::new_unchecked(&mut b[..]).fill_checksum();
        assert_eq!(check(&b), Err(Error::Ipv4Fragment(0x4001)));
        assert!(matches!(
            check(&buf[..19]),
            Err(Error::Truncated {
                header: Header::Ipv4,
                ..
            })
        ));
        assert_eq!(
            reference_repr().header(65_536 - 20),
            Err(Error::TooLong(65_536))
        );
    }

    #[test]
    fn header_checksum_is_the_checksum_of_the_words() {
        // Random headers (a fixed-seed xorshift), all-zero and all-ones ones: the
        // wide-word sum equals `checksum` of the header with its checksum field zero.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut headers = vec![[0u8; HEADER_LEN], [0xff; HEADER_LEN]];
        for _ in 0..20_000 {
            let mut h = [0u8; HEADER_LEN];
            for b in h.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            headers.push(h);
        }
        for mut h in headers {
            let got = header_checksum(&h);
            h[10] = 0;
            h[11] = 0;
            assert_eq!(got, checksum(&h), "{h:02x?}");
        }
    }

    #[test]
    fn checksum_of_odd_lengths() {
        assert_eq!(checksum(&[]), 0xffff);
        assert_eq!(checksum(&[0x01]), !0x0100);
        assert_eq!(checksum(&[0xff; 3]), !fold(0xffff + 0xff00));
    }
}

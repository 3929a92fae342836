//! One RoCEv2 transport packet: the UDP payload from the BTH to the ICRC.
//!
//! ```text
//! BTH (12) | extension headers per opcode (0-28) | payload | pad (0-3, zero) | ICRC (4)
//! ```
//!
//! `shared/reference/rocev2-wire.md` §1.1, §2 and §3; IBTA Vol. 1 §9.2–9.3 and Annex
//! A17. [`Packet::check`] validates the header chain against the opcode (each missing
//! header is named in a typed error), the pad count and the payload rule.
//!
//! The ICRC also covers the IPv4 and UDP headers. A packet inside an Ethernet frame is
//! checked against the frame's actual header bytes ([`super::frame`]); a packet carried
//! alone (over a UDP socket, where the kernel owns the IP header) is checked against the
//! headers an [`ipv4::Repr`] and a [`udp::Repr`] agreed by both ends would produce, so
//! that the same packet rebuilt into a frame (e.g. for a capture) has a correct ICRC.

use core::ops::Range;

use super::icrc::{self, ICRC_LEN};
use super::opcode::{HeaderSet, Opcode};
use super::{aeth, atomic_ack_eth, atomic_eth, bth, deth, ieth, immdt, ipv4, reth, udp};
use super::{check_len, Error, Header, Result};

/// The smallest transport packet: a BTH and an ICRC.
pub const MIN_LEN: usize = bth::HEADER_LEN + ICRC_LEN;

/// The pad bytes that make `payload_len` a multiple of four (reference §2.3).
pub const fn pad_len(payload_len: usize) -> usize {
    payload_len.wrapping_neg() & 3
}

/// The offset (from the start of the BTH) of one extension header of an opcode, if the
/// opcode carries it.
pub fn ext_offset(opcode: Opcode, which: HeaderSet) -> Option<usize> {
    let headers = opcode.headers();
    if !headers.contains(which) || which.is_empty() {
        return None;
    }
    let mut at = bth::HEADER_LEN;
    for (set, _, size) in HeaderSet::ORDER {
        if set == which {
            return Some(at);
        }
        if headers.contains(set) {
            at += size;
        }
    }
    None
}

buffer_view! {
    /// A typed view of a transport packet (BTH through ICRC).
    pub struct Packet;
    /// Wraps a buffer without checking it. Accessors other than [`Packet::bth`] assume
    /// a packet that passed [`Packet::check`] and may panic otherwise: use
    /// [`Packet::new_checked`] on bytes from elsewhere.
    fn new_unchecked;
    /// Wraps a buffer after [`Packet::check`].
    fn new_checked => check;
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks the structure of the packet (not its ICRC, which needs the IP and UDP
    /// headers): a BTH with transport version 0 and a known opcode; every extension
    /// header the opcode carries, in order, with room left for the ICRC; payload and pad
    /// a multiple of four bytes holding the pad count; no payload for an opcode that
    /// carries none.
    pub fn check(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        check_len(Header::Bth, bth::HEADER_LEN, len)?;
        let bth = self.bth();
        if bth.transport_version() != 0 {
            return Err(Error::TransportVersion(bth.transport_version()));
        }
        let opcode = bth.opcode()?;
        let headers = opcode.headers();
        let mut at = bth::HEADER_LEN;
        for (set, header, size) in HeaderSet::ORDER {
            if headers.contains(set) {
                check_len(header, size, len.saturating_sub(at + ICRC_LEN))?;
                at += size;
            }
        }
        check_len(Header::Icrc, ICRC_LEN, len - at)?;
        let rest = len - at - ICRC_LEN;
        let pad = bth.pad_count();
        if !rest.is_multiple_of(4) || usize::from(pad) > rest {
            return Err(Error::PadCount { pad, len: rest });
        }
        if rest > 0 && !opcode.payload().any() {
            return Err(Error::UnexpectedPayload { opcode, len: rest });
        }
        Ok(())
    }

    /// The whole packet.
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The BTH.
    pub fn bth(&self) -> bth::Packet<&[u8]> {
        bth::Packet::new_unchecked(&self.buffer.as_ref()[..bth::HEADER_LEN])
    }

    /// The opcode.
    pub fn opcode(&self) -> Result<Opcode> {
        self.bth().opcode()
    }

    fn ext(&self, which: HeaderSet) -> Option<&[u8]> {
        let at = ext_offset(self.opcode().ok()?, which)?;
        let size = HeaderSet::ORDER
            .iter()
            .find(|(set, _, _)| *set == which)
            .map(|(_, _, size)| *size)?;
        self.buffer.as_ref().get(at..at + size)
    }

    /// The DETH, if the opcode carries one.
    pub fn deth(&self) -> Option<deth::Packet<&[u8]>> {
        self.ext(HeaderSet::DETH).map(deth::Packet::new_unchecked)
    }

    /// The RETH, if the opcode carries one.
    pub fn reth(&self) -> Option<reth::Packet<&[u8]>> {
        self.ext(HeaderSet::RETH).map(reth::Packet::new_unchecked)
    }

    /// The AtomicETH, if the opcode carries one.
    pub fn atomic_eth(&self) -> Option<atomic_eth::Packet<&[u8]>> {
        self.ext(HeaderSet::ATOMIC_ETH)
            .map(atomic_eth::Packet::new_unchecked)
    }

    /// The AETH, if the opcode carries one.
    pub fn aeth(&self) -> Option<aeth::Packet<&[u8]>> {
        self.ext(HeaderSet::AETH).map(aeth::Packet::new_unchecked)
    }

    /// The AtomicAckETH, if the opcode carries one.
    pub fn atomic_ack_eth(&self) -> Option<atomic_ack_eth::Packet<&[u8]>> {
        self.ext(HeaderSet::ATOMIC_ACK_ETH)
            .map(atomic_ack_eth::Packet::new_unchecked)
    }

    /// The ImmDt header, if the opcode carries one.
    pub fn immdt(&self) -> Option<immdt::Packet<&[u8]>> {
        self.ext(HeaderSet::IMM_DT)
            .map(immdt::Packet::new_unchecked)
    }

    /// The IETH, if the opcode carries one.
    pub fn ieth(&self) -> Option<ieth::Packet<&[u8]>> {
        self.ext(HeaderSet::IETH).map(ieth::Packet::new_unchecked)
    }

    /// The length of the BTH and the extension headers.
    pub fn header_len(&self) -> usize {
        bth::HEADER_LEN + self.opcode().map_or(0, Opcode::headers_len)
    }

    /// The offset of the ICRC.
    pub fn icrc_offset(&self) -> usize {
        self.buffer.as_ref().len() - ICRC_LEN
    }

    /// The byte range of the payload (pad excluded).
    pub fn payload_range(&self) -> Range<usize> {
        let end = self.icrc_offset() - usize::from(self.bth().pad_count());
        self.header_len()..end
    }

    /// The payload (pad excluded).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.payload_range()]
    }

    /// The pad bytes.
    pub fn pad(&self) -> &[u8] {
        &self.buffer.as_ref()[self.payload_range().end..self.icrc_offset()]
    }

    /// The ICRC as read from the wire.
    pub fn icrc(&self) -> u32 {
        let b = self.buffer.as_ref();
        let at = self.icrc_offset();
        icrc::from_wire([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    /// The ICRC this packet should carry behind the given IPv4 and UDP header bytes.
    pub fn expected_icrc(
        &self,
        ipv4_header: &[u8; ipv4::HEADER_LEN],
        udp_header: &[u8; udp::HEADER_LEN],
    ) -> u32 {
        icrc::compute(
            ipv4_header,
            udp_header,
            &self.buffer.as_ref()[..self.icrc_offset()],
        )
    }

    /// Checks the ICRC behind the given IPv4 and UDP header bytes.
    pub fn verify_icrc(
        &self,
        ipv4_header: &[u8; ipv4::HEADER_LEN],
        udp_header: &[u8; udp::HEADER_LEN],
    ) -> Result<()> {
        let expected = self.expected_icrc(ipv4_header, udp_header);
        let found = self.icrc();
        if found == expected {
            Ok(())
        } else {
            Err(Error::Icrc { found, expected })
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// The BTH, mutably.
    pub fn bth_mut(&mut self) -> bth::Packet<&mut [u8]> {
        bth::Packet::new_unchecked(&mut self.buffer.as_mut()[..bth::HEADER_LEN])
    }

    /// The payload (pad excluded), mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let range = self.payload_range();
        &mut self.buffer.as_mut()[range]
    }

    /// Computes the ICRC behind the given IPv4 and UDP header bytes and writes it.
    pub fn fill_icrc(
        &mut self,
        ipv4_header: &[u8; ipv4::HEADER_LEN],
        udp_header: &[u8; udp::HEADER_LEN],
    ) {
        let value = self.expected_icrc(ipv4_header, udp_header);
        let at = self.icrc_offset();
        self.buffer.as_mut()[at..at + ICRC_LEN].copy_from_slice(&icrc::to_wire(value));
    }
}

/// The headers of a transport packet: a BTH and the extension headers of its opcode.
///
/// Exactly the headers the opcode carries must be `Some` ([`Repr::check`]). The payload
/// is not part of the representation: it is read from [`Packet::payload`] and given to
/// [`Repr::emit`]; the pad count follows from its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// The BTH.
    pub bth: bth::Repr,
    /// The DETH (UD).
    pub deth: Option<deth::Repr>,
    /// The RETH (WRITE FIRST/ONLY, READ request).
    pub reth: Option<reth::Repr>,
    /// The AtomicETH (CmpSwap, FetchAdd).
    pub atomic_eth: Option<atomic_eth::Repr>,
    /// The AETH (ACK, atomic ACK, READ response FIRST/LAST/ONLY).
    pub aeth: Option<aeth::Repr>,
    /// The AtomicAckETH (atomic ACK).
    pub atomic_ack_eth: Option<atomic_ack_eth::Repr>,
    /// The immediate data (WITH_IMMEDIATE opcodes).
    pub immdt: Option<immdt::Repr>,
    /// The IETH (WITH_INVALIDATE opcodes).
    pub ieth: Option<ieth::Repr>,
}

impl Repr {
    /// A packet with this BTH and no extension header yet.
    pub const fn new(bth: bth::Repr) -> Repr {
        Repr {
            bth,
            deth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            immdt: None,
            ieth: None,
        }
    }

    /// The opcode.
    pub const fn opcode(&self) -> Opcode {
        self.bth.opcode
    }

    /// The extension headers that are present.
    pub const fn headers(&self) -> HeaderSet {
        let mut set = HeaderSet::NONE;
        if self.deth.is_some() {
            set = set.with(HeaderSet::DETH);
        }
        if self.reth.is_some() {
            set = set.with(HeaderSet::RETH);
        }
        if self.atomic_eth.is_some() {
            set = set.with(HeaderSet::ATOMIC_ETH);
        }
        if self.aeth.is_some() {
            set = set.with(HeaderSet::AETH);
        }
        if self.atomic_ack_eth.is_some() {
            set = set.with(HeaderSet::ATOMIC_ACK_ETH);
        }
        if self.immdt.is_some() {
            set = set.with(HeaderSet::IMM_DT);
        }
        if self.ieth.is_some() {
            set = set.with(HeaderSet::IETH);
        }
        set
    }

    /// Checks that the extension headers are exactly those of the opcode and that a
    /// payload of `payload_len` bytes is allowed (path MTU rules are the transport's:
    /// see [`super::opcode::PayloadRule::allows`]).
    pub fn check(&self, payload_len: usize) -> Result<()> {
        let opcode = self.opcode();
        let required = opcode.headers();
        let present = self.headers();
        if required == present {
            // The common case (one compare): no header to name.
            return if payload_len > 0 && !opcode.payload().any() {
                Err(Error::UnexpectedPayload {
                    opcode,
                    len: payload_len,
                })
            } else {
                Ok(())
            };
        }
        for (set, header, _) in HeaderSet::ORDER {
            if required.contains(set) != present.contains(set) {
                return Err(Error::HeaderMismatch {
                    opcode,
                    header,
                    present: present.contains(set),
                });
            }
        }
        if payload_len > 0 && !opcode.payload().any() {
            return Err(Error::UnexpectedPayload {
                opcode,
                len: payload_len,
            });
        }
        Ok(())
    }

    /// The length of the BTH and extension headers.
    pub const fn header_len(&self) -> usize {
        bth::HEADER_LEN + self.opcode().headers_len()
    }

    /// The length of the transport packet with a payload of `payload_len` bytes: headers,
    /// payload, pad and ICRC.
    pub const fn buffer_len(&self, payload_len: usize) -> usize {
        self.header_len() + payload_len + pad_len(payload_len) + ICRC_LEN
    }

    /// Reads the headers of a packet without checking its ICRC (for a packet whose ICRC
    /// was checked against its frame, or for tools).
    pub fn parse_without_icrc<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check()?;
        Repr::parse_checked(packet)
    }

    /// [`Repr::parse_without_icrc`] of a packet that passed [`Packet::check`]: the
    /// extension headers are read in one pass in wire order (their presence and
    /// lengths were checked against the opcode).
    pub(crate) fn parse_checked<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        let mut repr = Repr::new(bth::Repr::parse(&packet.bth())?);
        repr.parse_extensions(packet.as_bytes())?;
        Ok(repr)
    }

    /// Reads the extension headers of `self.bth.opcode` from the transport packet `b`
    /// (BTH first) into `self`, in one pass in wire order. Their presence and lengths
    /// must have been checked against the opcode ([`Packet::check`]); a short `b` is
    /// an error, never a panic.
    #[inline]
    pub(crate) fn parse_extensions(&mut self, b: &[u8]) -> Result<()> {
        let headers = self.bth.opcode.headers();
        if headers.is_empty() {
            return Ok(());
        }
        let repr = self;
        let mut at = bth::HEADER_LEN;
        // The header at `at` of `len` bytes (present: `check` measured it).
        let mut next = |len: usize| -> Result<&[u8]> {
            let h = b.get(at..at + len).ok_or(Error::Truncated {
                header: Header::Bth,
                need: at + len,
                have: b.len(),
            })?;
            at += len;
            Ok(h)
        };
        if headers.contains(HeaderSet::DETH) {
            let h = next(deth::HEADER_LEN)?;
            repr.deth = Some(deth::Repr::parse(&deth::Packet::new_unchecked(h))?);
        }
        if headers.contains(HeaderSet::RETH) {
            let h = next(reth::HEADER_LEN)?;
            repr.reth = Some(reth::Repr::parse(&reth::Packet::new_unchecked(h))?);
        }
        if headers.contains(HeaderSet::ATOMIC_ETH) {
            let h = next(atomic_eth::HEADER_LEN)?;
            repr.atomic_eth = Some(atomic_eth::Repr::parse(
                &atomic_eth::Packet::new_unchecked(h),
            )?);
        }
        if headers.contains(HeaderSet::AETH) {
            let h = next(aeth::HEADER_LEN)?;
            repr.aeth = Some(aeth::Repr::parse(&aeth::Packet::new_unchecked(h))?);
        }
        if headers.contains(HeaderSet::ATOMIC_ACK_ETH) {
            let h = next(atomic_ack_eth::HEADER_LEN)?;
            repr.atomic_ack_eth = Some(atomic_ack_eth::Repr::parse(
                &atomic_ack_eth::Packet::new_unchecked(h),
            )?);
        }
        if headers.contains(HeaderSet::IMM_DT) {
            let h = next(immdt::HEADER_LEN)?;
            repr.immdt = Some(immdt::Repr::parse(&immdt::Packet::new_unchecked(h))?);
        }
        if headers.contains(HeaderSet::IETH) {
            let h = next(ieth::HEADER_LEN)?;
            repr.ieth = Some(ieth::Repr::parse(&ieth::Packet::new_unchecked(h))?);
        }
        Ok(())
    }

    /// Reads a packet carried without its IPv4 and UDP headers, checking its ICRC
    /// against the headers `ipv4` and `udp` produce for it.
    pub fn parse<T: AsRef<[u8]>>(
        packet: &Packet<T>,
        ipv4: &ipv4::Repr,
        udp: &udp::Repr,
    ) -> Result<Repr> {
        packet.check()?;
        let len = packet.as_bytes().len();
        let ip_header = ipv4.header(udp::HEADER_LEN + len)?;
        let udp_header = udp.header(len)?;
        packet.verify_icrc(&ip_header, &udp_header)?;
        Repr::parse_without_icrc(packet)
    }

    /// Writes the headers and the zero pad of a packet with a payload of `payload_len`
    /// bytes into the first [`Repr::buffer_len`] bytes of `buf`, and returns the byte
    /// range the payload goes to. The ICRC bytes are zeroed; fill them with
    /// [`Packet::fill_icrc`] once the payload is in place.
    pub fn emit_headers(&self, payload_len: usize, buf: &mut [u8]) -> Result<Range<usize>> {
        self.check(payload_len)?;
        let len = self.buffer_len(payload_len);
        if buf.len() < len {
            return Err(Error::BufferTooSmall {
                need: len,
                have: buf.len(),
            });
        }
        let buf = &mut buf[..len];
        let pad = pad_len(payload_len);
        self.bth.emit(
            &mut bth::Packet::new_unchecked(&mut buf[..bth::HEADER_LEN]),
            pad as u8,
        )?;
        let mut at = bth::HEADER_LEN;
        if let Some(h) = &self.deth {
            h.emit(&mut deth::Packet::new_unchecked(&mut buf[at..]))?;
            at += deth::HEADER_LEN;
        }
        if let Some(h) = &self.reth {
            h.emit(&mut reth::Packet::new_unchecked(&mut buf[at..]))?;
            at += reth::HEADER_LEN;
        }
        if let Some(h) = &self.atomic_eth {
            h.emit(&mut atomic_eth::Packet::new_unchecked(&mut buf[at..]))?;
            at += atomic_eth::HEADER_LEN;
        }
        if let Some(h) = &self.aeth {
            h.emit(&mut aeth::Packet::new_unchecked(&mut buf[at..]))?;
            at += aeth::HEADER_LEN;
        }
        if let Some(h) = &self.atomic_ack_eth {
            h.emit(&mut atomic_ack_eth::Packet::new_unchecked(&mut buf[at..]))?;
            at += atomic_ack_eth::HEADER_LEN;
        }
        if let Some(h) = &self.immdt {
            h.emit(&mut immdt::Packet::new_unchecked(&mut buf[at..]))?;
            at += immdt::HEADER_LEN;
        }
        if let Some(h) = &self.ieth {
            h.emit(&mut ieth::Packet::new_unchecked(&mut buf[at..]))?;
            at += ieth::HEADER_LEN;
        }
        let payload = at..at + payload_len;
        buf[payload.end..].fill(0);
        Ok(payload)
    }

    /// Writes a packet carried without IPv4 and UDP headers into `buf`, the payload
    /// written by `fill` into the slice it is given, the ICRC computed against the
    /// headers `ipv4` and `udp` produce for it. Returns the packet length.
    pub fn emit_with(
        &self,
        ipv4: &ipv4::Repr,
        udp: &udp::Repr,
        payload_len: usize,
        buf: &mut [u8],
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<usize> {
        let len = self.buffer_len(payload_len);
        let ip_header = ipv4.header(udp::HEADER_LEN + len)?;
        let udp_header = udp.header(len)?;
        let range = self.emit_headers(payload_len, buf)?;
        fill(&mut buf[range]);
        Packet::new_unchecked(&mut buf[..len]).fill_icrc(&ip_header, &udp_header);
        Ok(len)
    }

    /// Writes a packet with `payload` carried without IPv4 and UDP headers (see
    /// [`Repr::emit_with`]). Returns the packet length.
    pub fn emit(
        &self,
        ipv4: &ipv4::Repr,
        udp: &udp::Repr,
        payload: &[u8],
        buf: &mut [u8],
    ) -> Result<usize> {
        self.emit_with(ipv4, udp, payload.len(), buf, |dst| {
            dst.copy_from_slice(payload)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Psn;
    use std::net::Ipv4Addr;

    fn outer() -> (ipv4::Repr, udp::Repr) {
        (
            ipv4::Repr::rocev2(Ipv4Addr::new(192, 168, 0, 1), Ipv4Addr::new(192, 168, 0, 2)),
            udp::Repr::rocev2(0xc000),
        )
    }

    fn send_only() -> Repr {
        let mut bth = bth::Repr::new(Opcode::RcSendOnly, 0x12, Psn::new(0));
        bth.ack_req = true;
        Repr::new(bth)
    }

    #[test]
    fn reference_transport_packet() {
        // Reference §2.4: BTH, "hello", 3 pad bytes, ICRC 53 66 c8 73.
        let (ip, u) = outer();
        let mut buf = [0xeeu8; 64];
        let len = send_only().emit(&ip, &u, b"hello", &mut buf).unwrap();
        assert_eq!(len, 24);
        assert_eq!(
            &buf[..len],
            &[
                0x04, 0x30, 0xff, 0xff, 0x00, 0x00, 0x00, 0x12, 0x80, 0x00, 0x00, 0x00, b'h', b'e',
                b'l', b'l', b'o', 0, 0, 0, 0x53, 0x66, 0xc8, 0x73
            ]
        );
        let p = Packet::new_checked(&buf[..len]).unwrap();
        assert_eq!(p.payload(), b"hello");
        assert_eq!(p.pad(), &[0, 0, 0]);
        assert_eq!(Repr::parse(&p, &ip, &u), Ok(send_only()));
    }

    #[test]
    fn ext_offsets_follow_the_wire_order() {
        use HeaderSet as H;
        assert_eq!(
            ext_offset(Opcode::RcRdmaWriteOnlyWithImmediate, H::RETH),
            Some(12)
        );
        assert_eq!(
            ext_offset(Opcode::RcRdmaWriteOnlyWithImmediate, H::IMM_DT),
            Some(28)
        );
        assert_eq!(ext_offset(Opcode::RcAtomicAcknowledge, H::AETH), Some(12));
        assert_eq!(
            ext_offset(Opcode::RcAtomicAcknowledge, H::ATOMIC_ACK_ETH),
            Some(16)
        );
        assert_eq!(
            ext_offset(Opcode::UdSendOnlyWithImmediate, H::DETH),
            Some(12)
        );
        assert_eq!(
            ext_offset(Opcode::UdSendOnlyWithImmediate, H::IMM_DT),
            Some(20)
        );
        assert_eq!(ext_offset(Opcode::RcSendOnly, H::RETH), None);
        assert_eq!(ext_offset(Opcode::RcSendOnly, H::NONE), None);
    }

    #[test]
    fn pad_lengths() {
        assert_eq!(
            [0, 1, 2, 3, 4, 5, 4096, 4097].map(pad_len),
            [0, 3, 2, 1, 0, 3, 0, 3]
        );
    }

    #[test]
    fn missing_extension_header_is_named() {
        // An RDMA_WRITE_FIRST needs a RETH: give it a BTH, 4 bytes and an ICRC.
        let mut bytes = [0u8; 20];
        bytes[0] = Opcode::RcRdmaWriteFirst.value();
        assert_eq!(
            Packet::new_checked(&bytes[..]).unwrap_err(),
            Error::Truncated {
                header: Header::Reth,
                need: 16,
                have: 4
            }
        );
        // An ATOMIC_ACKNOWLEDGE with its AETH but only half its AtomicAckETH.
        let mut bytes = [0u8; 24];
        bytes[0] = Opcode::RcAtomicAcknowledge.value();
        assert_eq!(
            Packet::new_checked(&bytes[..]).unwrap_err(),
            Error::Truncated {
                header: Header::AtomicAckEth,
                need: 8,
                have: 4
            }
        );
        // A SEND_ONLY with no room for its ICRC.
        let mut bytes = [0u8; 14];
        bytes[0] = Opcode::RcSendOnly.value();
        assert_eq!(
            Packet::new_checked(&bytes[..]).unwrap_err(),
            Error::Truncated {
                header: Header::Icrc,
                need: 4,
                have: 2
            }
        );
        assert_eq!(
            Packet::new_checked(&bytes[..5]).unwrap_err(),
            Error::Truncated {
                header: Header::Bth,
                need: 12,
                have: 5
            }
        );
    }

    #[test]
    fn pad_and_payload_rules_are_enforced() {
        let mut bytes = [0u8; 22];
        bytes[0] = Opcode::RcSendOnly.value();
        // 6 bytes between BTH and ICRC: not a multiple of four.
        assert_eq!(
            Packet::new_checked(&bytes[..]).unwrap_err(),
            Error::PadCount { pad: 0, len: 6 }
        );
        // Pad count 3 with nothing to pad.
        let mut bytes = [0u8; 16];
        bytes[0] = Opcode::RcSendOnly.value();
        bytes[1] = 0x30;
        assert_eq!(
            Packet::new_checked(&bytes[..]).unwrap_err(),
            Error::PadCount { pad: 3, len: 0 }
        );
        // An ACK with four payload bytes.
        let mut bytes = [0u8; 24];
        bytes[0] = Opcode::RcAcknowledge.value();
        assert_eq!(
            Packet::new_checked(&bytes[..]).unwrap_err(),
            Error::UnexpectedPayload {
                opcode: Opcode::RcAcknowledge,
                len: 4
            }
        );
        bytes[0] = 0x15;
        assert_eq!(
            Packet::new_checked(&bytes[..]).unwrap_err(),
            Error::Opcode(0x15)
        );
        bytes[0] = Opcode::RcSendOnly.value();
        bytes[1] = 0x02;
        assert_eq!(
            Packet::new_checked(&bytes[..]).unwrap_err(),
            Error::TransportVersion(2)
        );
    }

    #[test]
    fn emit_checks_the_representation() {
        let (ip, u) = outer();
        let mut buf = [0u8; 128];
        let mut repr = send_only();
        repr.reth = Some(reth::Repr::default());
        assert_eq!(
            repr.emit(&ip, &u, &[], &mut buf),
            Err(Error::HeaderMismatch {
                opcode: Opcode::RcSendOnly,
                header: Header::Reth,
                present: true
            })
        );
        let write = Repr::new(bth::Repr::new(Opcode::RcRdmaWriteOnly, 1, Psn::new(1)));
        let err = write.emit(&ip, &u, &[], &mut buf).unwrap_err();
        assert_eq!(
            err,
            Error::HeaderMismatch {
                opcode: Opcode::RcRdmaWriteOnly,
                header: Header::Reth,
                present: false
            }
        );
        assert_eq!(err.to_string(), "RC RDMA_WRITE_ONLY requires RETH");
        let mut ack = Repr::new(bth::Repr::new(Opcode::RcAcknowledge, 1, Psn::new(1)));
        ack.aeth = Some(aeth::Repr {
            syndrome: aeth::Syndrome::ACK,
            msn: 0,
        });
        assert_eq!(
            ack.emit(&ip, &u, b"x", &mut buf),
            Err(Error::UnexpectedPayload {
                opcode: Opcode::RcAcknowledge,
                len: 1
            })
        );
        assert_eq!(
            send_only().emit(&ip, &u, b"hello", &mut buf[..23]),
            Err(Error::BufferTooSmall { need: 24, have: 23 })
        );
        assert_eq!(ack.emit(&ip, &u, &[], &mut buf), Ok(20));
    }

    #[test]
    fn icrc_mismatch_against_other_outer_headers() {
        let (ip, u) = outer();
        let mut buf = [0u8; 64];
        let len = send_only().emit(&ip, &u, b"hello", &mut buf).unwrap();
        let p = Packet::new_checked(&buf[..len]).unwrap();
        let other_port = udp::Repr::rocev2(0xc001);
        assert!(matches!(
            Repr::parse(&p, &ip, &other_port),
            Err(Error::Icrc {
                found: 0x73c8_6653,
                ..
            })
        ));
        let mut other_ip = ip;
        other_ip.ttl = 1;
        other_ip.dscp = 46;
        assert_eq!(
            Repr::parse(&p, &other_ip, &u),
            Ok(send_only()),
            "TTL and TOS are masked"
        );
    }

    #[test]
    fn emit_with_writes_the_payload_in_place() {
        let (ip, u) = outer();
        let mut a = [0u8; 64];
        let mut b = [0xffu8; 64];
        let la = send_only().emit(&ip, &u, b"hello", &mut a).unwrap();
        let lb = send_only()
            .emit_with(&ip, &u, 5, &mut b, |dst| dst.copy_from_slice(b"hello"))
            .unwrap();
        assert_eq!(a[..la], b[..lb]);
    }
}

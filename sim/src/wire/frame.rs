//! A whole RoCEv2 Ethernet frame: Ethernet II, IPv4, UDP to port 4791, and one transport
//! packet (BTH through ICRC).
//!
//! `shared/reference/rocev2-wire.md` §1.1 (stack and offsets) and §2.4 (the ICRC over
//! the frame's IPv4 and UDP headers). The frame check sequence is not included, as in a
//! pcap capture. Frames are emitted without the Ethernet minimum-size padding; parsing
//! accepts trailing bytes after the IPv4 datagram (such padding) and ignores them.

use core::ops::Range;

use super::{check_len, Error, Header, Result};
use super::{ethernet, ipv4, roce, udp};

/// Offset of the IPv4 header in a frame.
pub const IPV4_OFFSET: usize = ethernet::HEADER_LEN;
/// Offset of the UDP header in a frame.
pub const UDP_OFFSET: usize = IPV4_OFFSET + ipv4::HEADER_LEN;
/// Offset of the BTH in a frame.
pub const BTH_OFFSET: usize = UDP_OFFSET + udp::HEADER_LEN;
/// The length of everything before the BTH: Ethernet, IPv4 and UDP headers.
pub const ENCAP_LEN: usize = BTH_OFFSET;

buffer_view! {
    /// A typed view of a RoCEv2 Ethernet frame.
    pub struct Frame;
    /// Wraps a buffer without checking it. The accessors assume a frame that passed
    /// [`Frame::check`] and may panic otherwise: use [`Frame::new_checked`] on bytes
    /// from elsewhere.
    fn new_unchecked;
    /// Wraps a buffer after [`Frame::check`].
    fn new_checked => check;
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Checks the structure of every layer (checksums and ICRC are checked by
    /// [`Frame::verify`] and [`Repr::parse`]): an Ethernet header with EtherType IPv4;
    /// an IPv4 header as [`ipv4::Packet::check`] and protocol UDP; a UDP header whose
    /// length equals the IPv4 payload, to port 4791; a transport packet as
    /// [`roce::Packet::check`].
    pub fn check(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        check_len(Header::Ethernet, ethernet::HEADER_LEN, b.len())?;
        let eth = ethernet::Packet::new_unchecked(b);
        if eth.ethertype() != ethernet::EtherType::IPV4 {
            return Err(Error::EtherType(eth.ethertype().0));
        }
        let ip = ipv4::Packet::new_checked(&b[IPV4_OFFSET..])?;
        if ip.protocol() != ipv4::PROTOCOL_UDP {
            return Err(Error::Protocol(ip.protocol()));
        }
        let ip_payload = ip.payload();
        let u = udp::Packet::new_checked(ip_payload)?;
        if usize::from(u.len()) != ip_payload.len() {
            return Err(Error::UdpLength {
                udp: u.len(),
                ip_payload: ip_payload.len(),
            });
        }
        if u.dst_port() != udp::ROCEV2_PORT {
            return Err(Error::UdpPort(u.dst_port()));
        }
        roce::Packet::new_checked(u.payload())?;
        Ok(())
    }

    /// The length of the frame: the Ethernet header and the IPv4 datagram (trailing
    /// bytes of the buffer excluded).
    pub fn frame_len(&self) -> usize {
        IPV4_OFFSET + usize::from(self.ipv4().total_len())
    }

    /// The frame's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.frame_len()]
    }

    /// The Ethernet header.
    pub fn ethernet(&self) -> ethernet::Packet<&[u8]> {
        ethernet::Packet::new_unchecked(&self.buffer.as_ref()[..ethernet::HEADER_LEN])
    }

    /// The IPv4 datagram.
    pub fn ipv4(&self) -> ipv4::Packet<&[u8]> {
        ipv4::Packet::new_unchecked(&self.buffer.as_ref()[IPV4_OFFSET..])
    }

    /// The UDP datagram.
    pub fn udp(&self) -> udp::Packet<&[u8]> {
        udp::Packet::new_unchecked(&self.buffer.as_ref()[UDP_OFFSET..self.frame_len()])
    }

    /// The transport packet (BTH through ICRC).
    pub fn roce(&self) -> roce::Packet<&[u8]> {
        roce::Packet::new_unchecked(&self.buffer.as_ref()[BTH_OFFSET..self.frame_len()])
    }

    /// The transport payload (pad excluded).
    pub fn payload(&self) -> &[u8] {
        let range = self.roce().payload_range();
        &self.buffer.as_ref()[BTH_OFFSET + range.start..BTH_OFFSET + range.end]
    }

    fn outer_headers(&self) -> ([u8; ipv4::HEADER_LEN], [u8; udp::HEADER_LEN]) {
        let b = self.buffer.as_ref();
        let mut ip = [0u8; ipv4::HEADER_LEN];
        ip.copy_from_slice(&b[IPV4_OFFSET..UDP_OFFSET]);
        let mut u = [0u8; udp::HEADER_LEN];
        u.copy_from_slice(&b[UDP_OFFSET..BTH_OFFSET]);
        (ip, u)
    }

    /// The ICRC the frame should carry.
    pub fn expected_icrc(&self) -> u32 {
        let (ip, u) = self.outer_headers();
        self.roce().expected_icrc(&ip, &u)
    }

    /// Checks the ICRC over the frame's own IPv4 and UDP headers.
    pub fn verify_icrc(&self) -> Result<()> {
        let (ip, u) = self.outer_headers();
        self.roce().verify_icrc(&ip, &u)
    }

    /// Checks the structure ([`Frame::check`]), then the IPv4 header checksum and
    /// fragmentation, a non-zero UDP checksum, and the ICRC.
    pub fn verify(&self) -> Result<()> {
        self.check()?;
        let ip = self.ipv4();
        ipv4::Repr::parse(&ip)?;
        udp::Repr::parse(&self.udp(), ip.src_addr(), ip.dst_addr())?;
        self.verify_icrc()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// The Ethernet header, mutably.
    pub fn ethernet_mut(&mut self) -> ethernet::Packet<&mut [u8]> {
        ethernet::Packet::new_unchecked(&mut self.buffer.as_mut()[..ethernet::HEADER_LEN])
    }

    /// The IPv4 datagram, mutably.
    pub fn ipv4_mut(&mut self) -> ipv4::Packet<&mut [u8]> {
        ipv4::Packet::new_unchecked(&mut self.buffer.as_mut()[IPV4_OFFSET..])
    }

    /// The UDP datagram, mutably.
    pub fn udp_mut(&mut self) -> udp::Packet<&mut [u8]> {
        let end = self.frame_len();
        udp::Packet::new_unchecked(&mut self.buffer.as_mut()[UDP_OFFSET..end])
    }

    /// The transport packet, mutably.
    pub fn roce_mut(&mut self) -> roce::Packet<&mut [u8]> {
        let end = self.frame_len();
        roce::Packet::new_unchecked(&mut self.buffer.as_mut()[BTH_OFFSET..end])
    }

    /// Recomputes and writes the ICRC over the frame's current bytes.
    pub fn fill_icrc(&mut self) {
        let (ip, u) = self.outer_headers();
        self.roce_mut().fill_icrc(&ip, &u);
    }

    /// Recomputes the IPv4 header checksum and then the ICRC (after a header was
    /// rewritten, e.g. by a test or a fault injector).
    pub fn fill_checksums(&mut self) {
        self.ipv4_mut().fill_checksum();
        self.fill_icrc();
    }
}

/// A RoCEv2 frame's headers: Ethernet, IPv4, UDP and the transport headers.
///
/// The payload is not part of the representation: it is read from [`Frame::payload`]
/// (or returned by [`parse`]) and given to [`Repr::emit`]. Lengths, checksums, the pad
/// count and the ICRC are computed on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// The Ethernet header (EtherType [`ethernet::EtherType::IPV4`]).
    pub ethernet: ethernet::Repr,
    /// The IPv4 header (protocol [`ipv4::PROTOCOL_UDP`]).
    pub ipv4: ipv4::Repr,
    /// The UDP header (destination port [`udp::ROCEV2_PORT`]).
    pub udp: udp::Repr,
    /// The transport headers.
    pub roce: roce::Repr,
}

impl Repr {
    /// Reads a frame, checking its structure, IPv4 checksum, UDP checksum (if non-zero)
    /// and ICRC.
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Result<Repr> {
        frame.check()?;
        Repr::parse_checked(frame)
    }

    /// [`Repr::parse`] of a frame that passed [`Frame::check`] (the structure is not
    /// checked again).
    fn parse_checked<T: AsRef<[u8]>>(frame: &Frame<T>) -> Result<Repr> {
        let ip = frame.ipv4();
        let ipv4 = ipv4::Repr::parse(&ip)?;
        let udp = udp::Repr::parse(&frame.udp(), ip.src_addr(), ip.dst_addr())?;
        frame.verify_icrc()?;
        Ok(Repr {
            ethernet: ethernet::Repr::parse(&frame.ethernet())?,
            ipv4,
            udp,
            roce: roce::Repr::parse_checked(&frame.roce())?,
        })
    }

    /// The length of the frame with a payload of `payload_len` bytes.
    pub const fn buffer_len(&self, payload_len: usize) -> usize {
        ENCAP_LEN + self.roce.buffer_len(payload_len)
    }

    fn check_encapsulation(&self) -> Result<()> {
        if self.ethernet.ethertype != ethernet::EtherType::IPV4 {
            return Err(Error::EtherType(self.ethernet.ethertype.0));
        }
        if self.ipv4.protocol != ipv4::PROTOCOL_UDP {
            return Err(Error::Protocol(self.ipv4.protocol));
        }
        if self.udp.dst_port != udp::ROCEV2_PORT {
            return Err(Error::UdpPort(self.udp.dst_port));
        }
        Ok(())
    }

    /// Writes every header of a frame with a payload of `payload_len` bytes into the
    /// first [`Repr::buffer_len`] bytes of `buf` and returns the byte range of the
    /// payload. The ICRC bytes are zeroed: once the payload is in place, finish with
    /// [`Frame::fill_icrc`] on those bytes.
    pub fn emit_headers(&self, payload_len: usize, buf: &mut [u8]) -> Result<Range<usize>> {
        self.check_encapsulation()?;
        self.roce.check(payload_len)?;
        let len = self.buffer_len(payload_len);
        if len - IPV4_OFFSET > ipv4::MAX_TOTAL_LEN {
            return Err(Error::TooLong(len - IPV4_OFFSET));
        }
        if buf.len() < len {
            return Err(Error::BufferTooSmall {
                need: len,
                have: buf.len(),
            });
        }
        let buf = &mut buf[..len];
        self.ethernet.emit(&mut ethernet::Packet::new_unchecked(
            &mut buf[..IPV4_OFFSET],
        ))?;
        self.ipv4.emit(
            &mut ipv4::Packet::new_unchecked(&mut buf[IPV4_OFFSET..UDP_OFFSET]),
            len - UDP_OFFSET,
        )?;
        self.udp.emit(
            &mut udp::Packet::new_unchecked(&mut buf[UDP_OFFSET..BTH_OFFSET]),
            len - BTH_OFFSET,
        )?;
        let payload = self
            .roce
            .emit_headers(payload_len, &mut buf[BTH_OFFSET..])?;
        Ok(BTH_OFFSET + payload.start..BTH_OFFSET + payload.end)
    }

    /// Writes a frame into `buf`, the payload written by `fill` into the slice it is
    /// given, and its ICRC. Returns the frame length. Allocates nothing.
    pub fn emit_with(
        &self,
        payload_len: usize,
        buf: &mut [u8],
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<usize> {
        let range = self.emit_headers(payload_len, buf)?;
        fill(&mut buf[range]);
        let len = self.buffer_len(payload_len);
        Frame::new_unchecked(&mut buf[..len]).fill_icrc();
        Ok(len)
    }

    /// Writes a frame carrying `payload` into `buf`. Returns the frame length.
    pub fn emit(&self, payload: &[u8], buf: &mut [u8]) -> Result<usize> {
        self.emit_with(payload.len(), buf, |dst| dst.copy_from_slice(payload))
    }
}

/// Parses a frame from bytes (see [`Repr::parse`]) and returns its headers and its
/// payload (pad excluded).
#[inline]
pub fn parse(bytes: &[u8]) -> Result<(Repr, &[u8])> {
    if let Some(x) = parse_lean(bytes) {
        return Ok(x);
    }
    parse_general(bytes)
}

/// The headers up to the BTH's end, at fixed offsets in the common case.
const LEAN_HEADERS: usize = BTH_OFFSET + super::bth::HEADER_LEN;

/// [`parse`] of the common frame in one pass over fixed offsets: Ethernet II with
/// EtherType IPv4 (no VLAN tag), IPv4 without options nor fragmentation with a right
/// header checksum, UDP to port 4791 with a zero checksum (RoCEv2 senders leave it
/// zero) and a length equal to the IPv4 payload, a BTH with transport version 0 and a
/// known opcode, the opcode's extension headers, payload and pad a multiple of four
/// bytes holding the pad count (no payload for an opcode without one), and a right
/// ICRC: every check [`Frame::check`] and [`Repr::parse`] make, in one pass.
///
/// `None` when anything differs from that common shape or any check fails: the caller
/// then runs the general parser, which accepts what is merely unusual (a non-zero UDP
/// checksum) and names the error of what is wrong. So a frame this accepts is one the
/// general parser accepts with the same result, and every rejection is the general
/// parser's (the drop counters see the same error either way).
#[inline]
fn parse_lean(bytes: &[u8]) -> Option<(Repr, &[u8])> {
    use super::opcode::Opcode;
    let h: &[u8; LEAN_HEADERS] = bytes.get(..LEAN_HEADERS)?.try_into().ok()?;
    let be16 = |at: usize| u16::from_be_bytes([h[at], h[at + 1]]);
    // Ethernet II, EtherType IPv4.
    if be16(12) != ethernet::EtherType::IPV4.0 {
        return None;
    }
    // IPv4: version 4, IHL 5, UDP, not a fragment (MF clear, offset 0).
    const IP: usize = IPV4_OFFSET;
    if h[IP] != 0x45 || h[IP + 9] != ipv4::PROTOCOL_UDP || be16(IP + 6) & 0x3fff != 0 {
        return None;
    }
    let total = usize::from(be16(IP + 2));
    let end = IPV4_OFFSET + total;
    if end > bytes.len() || total < ipv4::HEADER_LEN + udp::HEADER_LEN + roce::MIN_LEN {
        return None;
    }
    let ip_header: &[u8; ipv4::HEADER_LEN] = h[IP..UDP_OFFSET].try_into().ok()?;
    if ipv4::header_checksum(ip_header) != be16(IP + 10) {
        return None;
    }
    // UDP: to 4791, length = the IPv4 payload, no checksum.
    const U: usize = UDP_OFFSET;
    if usize::from(be16(U + 4)) != total - ipv4::HEADER_LEN
        || be16(U + 2) != udp::ROCEV2_PORT
        || be16(U + 6) != 0
    {
        return None;
    }
    // The transport packet: BTH, extension headers, payload, pad, ICRC.
    let t = &bytes[BTH_OFFSET..end];
    let flags = h[BTH_OFFSET + 1];
    if flags & 0x0f != 0 {
        return None;
    }
    let opcode = Opcode::from_u8(h[BTH_OFFSET])?;
    let hlen = super::bth::HEADER_LEN + opcode.headers_len();
    let rest = t.len().checked_sub(hlen + super::icrc::ICRC_LEN)?;
    let pad = usize::from((flags >> 4) & 3);
    if !rest.is_multiple_of(4) || pad > rest || (rest > 0 && !opcode.payload().any()) {
        return None;
    }
    let icrc_at = t.len() - super::icrc::ICRC_LEN;
    let udp_header: &[u8; udp::HEADER_LEN] = h[U..BTH_OFFSET].try_into().ok()?;
    let found = super::icrc::from_wire(t[icrc_at..].try_into().ok()?);
    if found != super::icrc::compute(ip_header, udp_header, &t[..icrc_at]) {
        return None;
    }
    let mut roce = roce::Repr::new(lean_bth(h, opcode));
    roce.parse_extensions(t).ok()?;
    // The IPv4 fields straight from the fixed-size header (what `ipv4::Packet`'s
    // accessors read, without their slice bounds checks).
    let addr = |at: usize| {
        std::net::Ipv4Addr::new(h[IP + at], h[IP + at + 1], h[IP + at + 2], h[IP + at + 3])
    };
    let tos = h[IP + 1];
    let mac = |at: usize| {
        let mut a = [0u8; 6];
        a.copy_from_slice(&h[at..at + 6]);
        ethernet::Address(a)
    };
    let repr = Repr {
        ethernet: ethernet::Repr {
            dst_addr: mac(0),
            src_addr: mac(6),
            ethertype: ethernet::EtherType::IPV4,
        },
        ipv4: ipv4::Repr {
            src_addr: addr(12),
            dst_addr: addr(16),
            protocol: ipv4::PROTOCOL_UDP,
            dscp: tos >> 2,
            ecn: ipv4::Ecn::from_bits(tos),
            ttl: h[IP + 8],
            ident: be16(IP + 4),
            dont_frag: be16(IP + 6) & ipv4::DF != 0,
        },
        udp: udp::Repr {
            src_port: be16(U),
            dst_port: udp::ROCEV2_PORT,
        },
        roce,
    };
    Some((repr, &t[hlen..icrc_at - pad]))
}

/// A one-packet RC SEND frame (SEND_ONLY or SEND_ONLY_WITH_IMMEDIATE) as
/// [`parse_rc_send_only`] reads it: what the receive path of the common request
/// needs, without the whole [`Repr`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RcSendOnly<'a> {
    /// The Ethernet destination address.
    pub dst_mac: [u8; 6],
    /// The IPv4 source address.
    pub src_addr: std::net::Ipv4Addr,
    /// The IPv4 destination address.
    pub dst_addr: std::net::Ipv4Addr,
    /// The BTH (opcode [`Opcode::RcSendOnly`](super::Opcode::RcSendOnly) or
    /// [`Opcode::RcSendOnlyWithImmediate`](super::Opcode::RcSendOnlyWithImmediate)).
    pub bth: super::bth::Repr,
    /// The immediate data (SEND_ONLY_WITH_IMMEDIATE).
    pub immediate: Option<u32>,
    /// The payload (pad excluded).
    pub payload: &'a [u8],
}

impl RcSendOnly<'_> {
    /// The transport headers as [`parse`] gives them (the BTH and the ImmDt).
    pub fn roce(&self) -> roce::Repr {
        let mut r = roce::Repr::new(self.bth);
        r.immdt = self
            .immediate
            .map(|immediate| super::immdt::Repr { immediate });
        r
    }
}

/// The BTH of a frame whose headers the lean parsers hold at fixed offsets (`h`, the
/// first [`LEAN_HEADERS`] bytes; `opcode` already read and checked): the fields as
/// `bth::Packet`'s accessors read them, without their slice bounds checks.
#[inline(always)]
fn lean_bth(h: &[u8; LEAN_HEADERS], opcode: super::Opcode) -> super::bth::Repr {
    const B: usize = BTH_OFFSET;
    let be16 = |at: usize| u16::from_be_bytes([h[at], h[at + 1]]);
    let be24 = |at: usize| u32::from_be_bytes([0, h[at], h[at + 1], h[at + 2]]);
    let flags = h[B + 1];
    super::bth::Repr {
        opcode,
        solicited: flags & 0x80 != 0,
        mig_req: flags & 0x40 != 0,
        pkey: be16(B + 2),
        fecn: h[B + 4] & 0x80 != 0,
        becn: h[B + 4] & 0x40 != 0,
        dest_qp: be24(B + 5),
        ack_req: h[B + 8] & 0x80 != 0,
        psn: super::Psn::new(be24(B + 9)),
    }
}

/// `parse_lean` for the frame of the common request, a one-packet RC SEND (with or
/// without immediate), read at fixed offsets with the same checks (structure, IPv4
/// header checksum, lengths, UDP port and zero checksum, transport version, pad,
/// ICRC) and without building the whole [`Repr`]. `None` for any other frame or any
/// failed check: the caller then runs [`parse`], which reads or rejects it as
/// always. So a frame this accepts is one [`parse`] accepts with the same fields.
#[inline]
pub fn parse_rc_send_only(bytes: &[u8]) -> Option<RcSendOnly<'_>> {
    use super::opcode::Opcode;
    let h: &[u8; LEAN_HEADERS] = bytes.get(..LEAN_HEADERS)?.try_into().ok()?;
    let be16 = |at: usize| u16::from_be_bytes([h[at], h[at + 1]]);
    const B: usize = BTH_OFFSET;
    // The opcode first: anything else goes to the general path at once.
    let (opcode, hlen) = match h[B] {
        0x04 => (Opcode::RcSendOnly, super::bth::HEADER_LEN),
        0x05 => (
            Opcode::RcSendOnlyWithImmediate,
            super::bth::HEADER_LEN + super::immdt::HEADER_LEN,
        ),
        _ => return None,
    };
    const IP: usize = IPV4_OFFSET;
    const U: usize = UDP_OFFSET;
    // Ethernet II, EtherType IPv4; IPv4 version 4, IHL 5, UDP, not a fragment.
    if be16(12) != ethernet::EtherType::IPV4.0
        || h[IP] != 0x45
        || h[IP + 9] != ipv4::PROTOCOL_UDP
        || be16(IP + 6) & 0x3fff != 0
    {
        return None;
    }
    let total = usize::from(be16(IP + 2));
    let end = IPV4_OFFSET + total;
    // UDP to 4791, length = the IPv4 payload, no checksum.
    if end > bytes.len()
        || total < ipv4::HEADER_LEN + udp::HEADER_LEN + roce::MIN_LEN
        || usize::from(be16(U + 4)) != total - ipv4::HEADER_LEN
        || be16(U + 2) != udp::ROCEV2_PORT
        || be16(U + 6) != 0
    {
        return None;
    }
    let ip_header: &[u8; ipv4::HEADER_LEN] = h[IP..U].try_into().ok()?;
    if ipv4::header_checksum(ip_header) != be16(IP + 10) {
        return None;
    }
    // The transport packet: BTH (transport version 0), ImmDt, payload, pad, ICRC.
    let t = bytes.get(B..end)?;
    let flags = h[B + 1];
    if flags & 0x0f != 0 {
        return None;
    }
    let icrc_at = t.len().checked_sub(super::icrc::ICRC_LEN)?;
    let rest = icrc_at.checked_sub(hlen)?;
    let pad = usize::from((flags >> 4) & 3);
    if !rest.is_multiple_of(4) || pad > rest {
        return None;
    }
    let udp_header: &[u8; udp::HEADER_LEN] = h[U..B].try_into().ok()?;
    let found = super::icrc::from_wire(t[icrc_at..].try_into().ok()?);
    if found != super::icrc::compute(ip_header, udp_header, &t[..icrc_at]) {
        return None;
    }
    let immediate = match opcode {
        Opcode::RcSendOnlyWithImmediate => {
            let i = t.get(super::bth::HEADER_LEN..hlen)?;
            Some(u32::from_be_bytes([i[0], i[1], i[2], i[3]]))
        }
        _ => None,
    };
    let addr = |at: usize| {
        std::net::Ipv4Addr::new(h[IP + at], h[IP + at + 1], h[IP + at + 2], h[IP + at + 3])
    };
    Some(RcSendOnly {
        dst_mac: [h[0], h[1], h[2], h[3], h[4], h[5]],
        src_addr: addr(12),
        dst_addr: addr(16),
        bth: lean_bth(h, opcode),
        immediate,
        payload: &t[hlen..icrc_at - pad],
    })
}

/// [`parse`] by the general, layer-by-layer parser (any frame; names the error).
#[inline(never)]
pub fn parse_general(bytes: &[u8]) -> Result<(Repr, &[u8])> {
    // One structural check (`new_checked`); the rest of the parse relies on it.
    let frame = Frame::new_checked(bytes)?;
    let repr = Repr::parse_checked(&frame)?;
    let range = frame.roce().payload_range();
    Ok((
        repr,
        &bytes[BTH_OFFSET + range.start..BTH_OFFSET + range.end],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::opcode::Opcode;
    use crate::wire::{aeth, bth, deth, immdt, reth, Psn};
    use std::net::Ipv4Addr;

    fn frame(roce: roce::Repr, payload: &[u8]) -> Vec<u8> {
        let mut ip = ipv4::Repr::rocev2(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        ip.dscp = 26;
        ip.ttl = 17;
        ip.ident = 0x1234;
        let repr = Repr {
            ethernet: ethernet::Repr {
                src_addr: ethernet::Address([2, 0, 0, 0, 0, 1]),
                dst_addr: ethernet::Address([2, 0, 0, 0, 0, 2]),
                ethertype: ethernet::EtherType::IPV4,
            },
            ipv4: ip,
            udp: udp::Repr::rocev2(0xc123),
            roce,
        };
        let mut buf = vec![0u8; repr.buffer_len(payload.len())];
        let n = repr.emit(payload, &mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    fn samples() -> Vec<Vec<u8>> {
        let b = |op, psn| bth::Repr::new(op, 0x00ab_cdef, Psn::new(psn));
        let mut send = roce::Repr::new(b(Opcode::RcSendOnly, 7));
        send.bth.ack_req = true;
        let mut imm = roce::Repr::new(b(Opcode::RcSendOnlyWithImmediate, 8));
        imm.immdt = Some(immdt::Repr {
            immediate: 0x0102_0304,
        });
        let mut write = roce::Repr::new(b(Opcode::RcRdmaWriteOnly, 9));
        write.reth = Some(reth::Repr {
            virtual_address: 0x1000,
            rkey: 0x55,
            dma_length: 6,
        });
        let mut ack = roce::Repr::new(b(Opcode::RcAcknowledge, 10));
        ack.aeth = Some(aeth::Repr {
            syndrome: aeth::Syndrome::ACK,
            msn: 3,
        });
        let mut ud = roce::Repr::new(b(Opcode::UdSendOnly, 11));
        ud.deth = Some(deth::Repr {
            qkey: 0x1111_2222,
            src_qp: 0x33,
        });
        vec![
            frame(send, b"hello"),
            frame(send, &[0xa5; 64]),
            frame(send, &[]),
            frame(imm, b"imm!"),
            frame(write, b"write!"),
            frame(ack, &[]),
            frame(ud, b"ud"),
        ]
    }

    #[test]
    fn lean_parse_takes_the_common_frames() {
        for f in samples() {
            let lean = parse_lean(&f).expect("the common shape");
            assert_eq!(Ok(lean), parse_general(&f));
            // Trailing bytes (Ethernet padding) are ignored by both.
            let mut padded = f.clone();
            padded.extend_from_slice(&[0u8; 7]);
            assert_eq!(parse_lean(&padded).map(|(r, _)| r), Some(lean.0));
        }
    }

    #[test]
    fn lean_parse_agrees_with_the_general_parser_on_every_corruption() {
        for f in samples() {
            for at in 0..f.len() {
                for bit in 0..8 {
                    let mut g = f.clone();
                    g[at] ^= 1 << bit;
                    assert_eq!(parse(&g), parse_general(&g), "byte {at} bit {bit}");
                    // Same with the checksums made right again (where the structure
                    // allows computing them): the other checks.
                    if Frame::new_checked(&g[..]).is_ok() {
                        Frame::new_unchecked(&mut g[..]).fill_checksums();
                        assert_eq!(parse(&g), parse_general(&g), "byte {at} bit {bit}, fixed");
                    }
                }
            }
            for n in 0..f.len() {
                assert_eq!(parse(&f[..n]), parse_general(&f[..n]), "truncated to {n}");
            }
        }
    }

    /// What [`parse_rc_send_only`] must give for `g`: `Some` exactly when the lean
    /// parser takes `g` and it is a one-packet RC SEND, then the fields [`parse`]
    /// reads.
    fn check_send_only(g: &[u8], what: &str) {
        let hot = parse_rc_send_only(g);
        let lean = parse_lean(g).filter(|(r, _)| {
            matches!(
                r.roce.bth.opcode,
                Opcode::RcSendOnly | Opcode::RcSendOnlyWithImmediate
            )
        });
        match (hot, lean) {
            (Some(s), Some(_)) => {
                let (r, p) = parse(g).expect("accepted by parse");
                assert_eq!(s.dst_mac, r.ethernet.dst_addr.0, "{what}");
                assert_eq!(s.src_addr, r.ipv4.src_addr, "{what}");
                assert_eq!(s.dst_addr, r.ipv4.dst_addr, "{what}");
                assert_eq!(s.roce(), r.roce, "{what}");
                assert_eq!(s.bth, r.roce.bth, "{what}");
                assert_eq!(s.immediate, r.roce.immdt.map(|i| i.immediate), "{what}");
                assert_eq!(s.payload, p, "{what}");
            }
            (None, None) => {}
            (hot, lean) => panic!("{what}: send-only parse {hot:?}, lean parse {lean:?}"),
        }
    }

    #[test]
    fn send_only_parse_agrees_with_the_parser() {
        let mut taken = 0;
        for f in samples() {
            check_send_only(&f, "as built");
            taken += usize::from(parse_rc_send_only(&f).is_some());
            let mut padded = f.clone();
            padded.extend_from_slice(&[0u8; 7]);
            check_send_only(&padded, "padded");
            for at in 0..f.len() {
                for bit in 0..8 {
                    let mut g = f.clone();
                    g[at] ^= 1 << bit;
                    check_send_only(&g, &format!("byte {at} bit {bit}"));
                    if Frame::new_checked(&g[..]).is_ok() {
                        Frame::new_unchecked(&mut g[..]).fill_checksums();
                        check_send_only(&g, &format!("byte {at} bit {bit}, fixed"));
                    }
                }
            }
            for n in 0..f.len() {
                check_send_only(&f[..n], &format!("truncated to {n}"));
            }
        }
        // The four one-packet SENDs of the samples (payloads of 5, 64, 0 and 4 bytes,
        // one with immediate) take it; the WRITE, ACK and UD frames do not.
        assert_eq!(taken, 4);
    }

    #[test]
    fn unusual_frames_go_to_the_general_parser() {
        let f = &samples()[0];
        // A right, non-zero UDP checksum: valid, read by the general parser.
        let mut g = f.clone();
        let c = {
            let fr = Frame::new_unchecked(&g[..]);
            let ip = fr.ipv4();
            fr.udp().expected_checksum(ip.src_addr(), ip.dst_addr())
        };
        g[UDP_OFFSET + 6..UDP_OFFSET + 8].copy_from_slice(&c.to_be_bytes());
        Frame::new_unchecked(&mut g[..]).fill_icrc();
        assert_eq!(parse_lean(&g), None);
        assert_eq!(
            parse(&g).map(|(r, p)| (r, p.to_vec())),
            Ok((parse(f).unwrap().0, b"hello".to_vec()))
        );
        // A wrong ICRC is named.
        let mut g = f.clone();
        let n = g.len();
        g[n - 1] ^= 1;
        assert!(matches!(parse(&g), Err(Error::Icrc { .. })));
        // A wrong IPv4 checksum is named.
        let mut g = f.clone();
        g[IPV4_OFFSET + 10] ^= 1;
        assert!(matches!(parse(&g), Err(Error::Ipv4Checksum { .. })));
    }
}

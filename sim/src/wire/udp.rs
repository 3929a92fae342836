//! UDP header (8 bytes), the RoCEv2 encapsulation: destination port 4791.
//!
//! RFC 768; the port is IANA's "roce" (IBTA Annex A17). A RoCEv2 sender writes checksum
//! 0 (rxe does, for IPv4 and IPv6; the checksum is masked out of the ICRC), and draws
//! the source port from the QP pair so that ECMP hashing keeps a QP on one path
//! (`shared/reference/rocev2-wire.md` §1.1, Linux `rdma_get_udp_sport`).
//!
//! | bytes | field |
//! |---|---|
//! | 0–1 | source port (entropy, 0xC000–0xFFFF) |
//! | 2–3 | destination port, 4791 |
//! | 4–5 | length (header + payload) |
//! | 6–7 | checksum (0: none) |

use std::net::Ipv4Addr;

use super::ipv4::{fold, sum, PROTOCOL_UDP};
use super::{be, Error, Header, Result};

mod field {
    use crate::wire::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
}

/// The size of a UDP header.
pub const HEADER_LEN: usize = field::CHECKSUM.end;

/// The RoCEv2 UDP destination port.
pub const ROCEV2_PORT: u16 = 4791;

/// Byte offsets of the field the ICRC masks: the checksum (reference §2.4).
pub const ICRC_MASKED_BYTES: [usize; 2] = [field::CHECKSUM.start, field::CHECKSUM.start + 1];

/// The 20-bit flow label Linux derives from a QP pair when the address vector has none:
/// `v = lqpn * rqpn; v ^= v >> 20; v ^= v >> 40; v & 0xFFFFF`. Symmetric, so both ends
/// of a connection compute the same value (`rdma_calc_flow_label`).
pub const fn flow_label_from_qpns(lqpn: u32, rqpn: u32) -> u32 {
    let mut v = lqpn as u64 * rqpn as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xf_ffff) as u32
}

/// The UDP source port of a flow label: `((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)) |
/// 0xC000`, always in the ephemeral range 0xC000–0xFFFF
/// (`rdma_flow_label_to_udp_sport`).
pub const fn source_port_from_flow_label(flow_label: u32) -> u16 {
    let fl = flow_label & 0xf_ffff;
    (((fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14)) | 0xc000) as u16
}

/// The UDP source port of a RoCEv2 QP (`rdma_get_udp_sport`): from the address vector's
/// flow label, or, when that is 0, from the local and remote QP numbers. rxe fixes it
/// when the QP gets its address vector, for the life of the QP.
pub const fn rocev2_source_port(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    let fl = if flow_label & 0xf_ffff == 0 {
        flow_label_from_qpns(lqpn, rqpn)
    } else {
        flow_label
    };
    source_port_from_flow_label(fl)
}

buffer_view! {
    /// A typed view of a UDP header and its payload.
    pub struct Packet;
    /// Wraps a buffer without checking it. Accessors panic on a buffer shorter than
    /// [`HEADER_LEN`], and [`Packet::payload`] on a length field outside the buffer: use
    /// [`Packet::new_checked`] on bytes from elsewhere.
    fn new_unchecked;
    /// Wraps a buffer after [`Packet::check`].
    fn new_checked => check;
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks that the buffer holds the header and that the length field covers the
    /// header and fits the buffer.
    pub fn check(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        super::check_len(Header::Udp, HEADER_LEN, len)?;
        let udp = self.len();
        if usize::from(udp) < HEADER_LEN || usize::from(udp) > len {
            return Err(Error::UdpLength {
                udp,
                ip_payload: len,
            });
        }
        Ok(())
    }

    /// The source port.
    pub fn src_port(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::SRC_PORT.start)
    }

    /// The destination port.
    pub fn dst_port(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::DST_PORT.start)
    }

    /// The length field (header + payload).
    pub fn len(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }

    /// The checksum field (0: not computed).
    pub fn checksum(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// The checksum the datagram should carry between these addresses (RFC 768, over
    /// the IPv4 pseudo header, header and payload; a computed 0 is sent as 0xFFFF).
    pub fn expected_checksum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> u16 {
        let b = self.buffer.as_ref();
        let len = self.len();
        let mut acc = sum(0, &src.octets());
        acc = sum(acc, &dst.octets());
        acc = acc.wrapping_add(u32::from(PROTOCOL_UDP)) + u32::from(len);
        acc = sum(acc, &b[..field::CHECKSUM.start]);
        acc = sum(acc, &b[HEADER_LEN..usize::from(len)]);
        match !fold(acc) {
            0 => 0xffff,
            c => c,
        }
    }

    /// Whether the checksum is right: 0 (not computed, as RoCEv2 senders send it) or
    /// the expected value.
    pub fn verify_checksum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        self.checksum() == 0 || self.checksum() == self.expected_checksum(src, dst)
    }

    /// The 8 header bytes.
    pub fn header_bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[..HEADER_LEN]
    }

    /// The payload, up to the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, value: u16) {
        be::set_u16(self.buffer.as_mut(), field::SRC_PORT.start, value)
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, value: u16) {
        be::set_u16(self.buffer.as_mut(), field::DST_PORT.start, value)
    }

    /// Sets the length field.
    pub fn set_len(&mut self, value: u16) {
        be::set_u16(self.buffer.as_mut(), field::LENGTH.start, value)
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, value: u16) {
        be::set_u16(self.buffer.as_mut(), field::CHECKSUM.start, value)
    }

    /// Computes and writes the checksum (RoCEv2 senders leave it 0; this is for peers
    /// and tests that want one).
    pub fn fill_checksum(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        let c = self.expected_checksum(src, dst);
        self.set_checksum(c);
    }

    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// The values of a UDP header. The length follows from the payload and is an argument
/// of [`Repr::emit`]; the checksum is emitted as 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source port.
    pub src_port: u16,
    /// Destination port ([`ROCEV2_PORT`]).
    pub dst_port: u16,
}

impl Repr {
    /// A RoCEv2 header from the given source port to 4791.
    pub const fn rocev2(src_port: u16) -> Repr {
        Repr {
            src_port,
            dst_port: ROCEV2_PORT,
        }
    }

    /// Reads a checked UDP header carried between `src` and `dst`: a non-zero checksum
    /// must be right.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>, src: Ipv4Addr, dst: Ipv4Addr) -> Result<Repr> {
        packet.check()?;
        if !packet.verify_checksum(src, dst) {
            return Err(Error::UdpChecksum {
                found: packet.checksum(),
                expected: packet.expected_checksum(src, dst),
            });
        }
        Ok(Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
        })
    }

    /// The bytes this header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes this header for a payload of `payload_len` bytes, checksum 0.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
        payload_len: usize,
    ) -> Result<()> {
        super::check_len(Header::Udp, HEADER_LEN, packet.buffer.as_ref().len())?;
        let len = HEADER_LEN + payload_len;
        if len > usize::from(u16::MAX) {
            return Err(Error::TooLong(len));
        }
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(len as u16);
        packet.set_checksum(0);
        Ok(())
    }

    /// The 8 header bytes this representation emits for a payload of `payload_len`.
    pub fn header(&self, payload_len: usize) -> Result<[u8; HEADER_LEN]> {
        let mut bytes = [0u8; HEADER_LEN];
        self.emit(&mut Packet::new_unchecked(&mut bytes[..]), payload_len)?;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_header() {
        // Reference §2.4: c000 12b7 0020 0000.
        assert_eq!(
            Repr::rocev2(0xc000).header(0x20 - 8),
            Ok([0xc0, 0x00, 0x12, 0xb7, 0x00, 0x20, 0x00, 0x00])
        );
        assert_eq!(ROCEV2_PORT, 0x12b7);
    }

    #[test]
    fn source_port_entropy() {
        // Reference §1.1: lqpn 0x11, rqpn 0x12 -> 0xC132.
        assert_eq!(flow_label_from_qpns(0x11, 0x12), 0x132);
        assert_eq!(rocev2_source_port(0, 0x11, 0x12), 0xc132);
        assert_eq!(rocev2_source_port(0, 0x12, 0x11), 0xc132, "symmetric");
        // A given flow label wins over the QPNs.
        assert_eq!(
            rocev2_source_port(0x1_2345, 0x11, 0x12),
            0xc000 | (0x2345 ^ 0x4)
        );
        // Large QPNs exercise the folds; the port always lands in 0xC000-0xFFFF.
        let (l, r) = (0xff_fffe_u32, 0xab_cdef_u32);
        let mut v = u64::from(l) * u64::from(r);
        v ^= v >> 20;
        v ^= v >> 40;
        assert_eq!(flow_label_from_qpns(l, r), (v & 0xf_ffff) as u32);
        for q in 0..5000u32 {
            assert!(rocev2_source_port(0, q, q.wrapping_mul(2_654_435_761)) >= 0xc000);
        }
    }

    #[test]
    fn checksum_zero_is_accepted_and_others_are_checked() {
        let src = Ipv4Addr::new(10, 0, 0, 1);
        let dst = Ipv4Addr::new(10, 0, 0, 2);
        let mut buf = [0u8; 13];
        buf[8..].copy_from_slice(b"hello");
        let mut p = Packet::new_unchecked(&mut buf[..]);
        Repr::rocev2(0xc001).emit(&mut p, 5).unwrap();
        assert!(p.verify_checksum(src, dst));
        assert_eq!(Repr::parse(&p, src, dst), Ok(Repr::rocev2(0xc001)));
        p.fill_checksum(src, dst);
        let good = p.checksum();
        assert_ne!(good, 0);
        assert!(p.verify_checksum(src, dst));
        assert!(!p.verify_checksum(src, Ipv4Addr::new(10, 0, 0, 3)));
        p.set_checksum(good ^ 1);
        assert_eq!(
            Repr::parse(&p, src, dst),
            Err(Error::UdpChecksum {
                found: good ^ 1,
                expected: good
            })
        );
        // Independent check: the ones' complement sum over pseudo header, header and
        // payload with the right checksum in place is 0xFFFF.
        p.set_checksum(good);
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&src.octets());
        pseudo.extend_from_slice(&dst.octets());
        pseudo.extend_from_slice(&[0, 17, 0, 13]);
        pseudo.extend_from_slice(&buf);
        assert_eq!(crate::wire::ipv4::checksum(&pseudo), 0);
    }

    #[test]
    fn bad_lengths_are_typed_errors() {
        let mut buf = [0u8; 8];
        assert_eq!(
            Packet::new_checked(&buf[..7]).unwrap_err(),
            Error::Truncated {
                header: Header::Udp,
                need: 8,
                have: 7
            }
        );
        buf[5] = 7;
        assert_eq!(
            Packet::new_checked(&buf[..]).unwrap_err(),
            Error::UdpLength {
                udp: 7,
                ip_payload: 8
            }
        );
        buf[5] = 9;
        assert!(Packet::new_checked(&buf[..]).is_err());
    }
}

//! Frames on a fixed path, emitted fast: the Ethernet, IPv4 and UDP headers of a path
//! are written once ([`Encap::new`], with the same checks as [`super::frame::Repr`]'s
//! emit); each frame then copies those 42 bytes and patches what depends on its length:
//! the IPv4 total length, the IPv4 header checksum (updated from the precomputed sum of
//! the other header words, RFC 1071 §2(4) / RFC 1624) and the UDP length.
//!
//! The bytes are exactly those [`super::frame::Repr::emit_headers`] writes (tests
//! below compare them over many paths and lengths); [`fill_icrc`] computes the ICRC
//! over the finished frame in place.

use core::ops::Range;

use super::frame::{BTH_OFFSET, ENCAP_LEN, IPV4_OFFSET, UDP_OFFSET};
use super::{bth, ethernet, icrc, immdt, ipv4, roce, udp, Error, Opcode, Psn, Result};

/// Offset of the IPv4 total length in a frame.
const IP_LEN_AT: usize = IPV4_OFFSET + 2;
/// Offset of the IPv4 header checksum in a frame.
const IP_CSUM_AT: usize = IPV4_OFFSET + 10;
/// Offset of the UDP length in a frame.
const UDP_LEN_AT: usize = UDP_OFFSET + 4;

/// The Ethernet, IPv4 and UDP headers of a path, lengths and IPv4 checksum left open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encap {
    /// The headers, with total length, IPv4 checksum and UDP length zero.
    bytes: [u8; ENCAP_LEN],
    /// The ones' complement sum (folded) of the IPv4 header words other than the total
    /// length and the checksum.
    ip_sum: u16,
}

impl Encap {
    /// The encapsulation of frames with these headers (EtherType IPv4, protocol UDP,
    /// destination port 4791, DSCP within six bits; as [`super::frame::Repr`] checks).
    pub fn new(ethernet: &ethernet::Repr, ip: &ipv4::Repr, u: &udp::Repr) -> Result<Encap> {
        if ethernet.ethertype != ethernet::EtherType::IPV4 {
            return Err(Error::EtherType(ethernet.ethertype.0));
        }
        if ip.protocol != ipv4::PROTOCOL_UDP {
            return Err(Error::Protocol(ip.protocol));
        }
        if u.dst_port != udp::ROCEV2_PORT {
            return Err(Error::UdpPort(u.dst_port));
        }
        let mut bytes = [0u8; ENCAP_LEN];
        ethernet.emit(&mut ethernet::Packet::new_unchecked(
            &mut bytes[..IPV4_OFFSET],
        ))?;
        ip.emit(
            &mut ipv4::Packet::new_unchecked(&mut bytes[IPV4_OFFSET..UDP_OFFSET]),
            0,
        )?;
        u.emit(
            &mut udp::Packet::new_unchecked(&mut bytes[UDP_OFFSET..BTH_OFFSET]),
            0,
        )?;
        for at in [IP_LEN_AT, IP_CSUM_AT, UDP_LEN_AT] {
            bytes[at] = 0;
            bytes[at + 1] = 0;
        }
        let ip_sum = ipv4::fold(ipv4::sum(0, &bytes[IPV4_OFFSET..UDP_OFFSET]));
        Ok(Encap { bytes, ip_sum })
    }

    /// Writes the headers of a frame that is all of `frame` (Ethernet header to ICRC):
    /// the lengths follow from `frame.len()`.
    pub fn write(&self, frame: &mut [u8]) -> Result<()> {
        let n = frame.len();
        if n < ENCAP_LEN {
            return Err(Error::BufferTooSmall {
                need: ENCAP_LEN,
                have: n,
            });
        }
        let ip_len = n - IPV4_OFFSET;
        if ip_len > ipv4::MAX_TOTAL_LEN {
            return Err(Error::TooLong(ip_len));
        }
        frame[..ENCAP_LEN].copy_from_slice(&self.bytes);
        let ip_len = ip_len as u16;
        frame[IP_LEN_AT..IP_LEN_AT + 2].copy_from_slice(&ip_len.to_be_bytes());
        let csum = !ipv4::fold(u32::from(self.ip_sum) + u32::from(ip_len));
        frame[IP_CSUM_AT..IP_CSUM_AT + 2].copy_from_slice(&csum.to_be_bytes());
        let udp_len = ip_len - ipv4::HEADER_LEN as u16;
        frame[UDP_LEN_AT..UDP_LEN_AT + 2].copy_from_slice(&udp_len.to_be_bytes());
        Ok(())
    }

    /// Writes every header of a frame with transport headers `roce` and a payload of
    /// `payload_len` bytes into the first [`Encap::frame_len`] bytes of `buf`, and
    /// returns the payload's byte range (as [`super::frame::Repr::emit_headers`]; the
    /// ICRC bytes are zeroed: finish with [`fill_icrc`]).
    pub fn emit_headers(
        &self,
        roce: &roce::Repr,
        payload_len: usize,
        buf: &mut [u8],
    ) -> Result<Range<usize>> {
        let len = Self::frame_len(roce, payload_len);
        if buf.len() < len {
            return Err(Error::BufferTooSmall {
                need: len,
                have: buf.len(),
            });
        }
        let frame = &mut buf[..len];
        let payload = roce.emit_headers(payload_len, &mut frame[BTH_OFFSET..])?;
        self.write(frame)?;
        Ok(BTH_OFFSET + payload.start..BTH_OFFSET + payload.end)
    }

    /// The length of a frame with transport headers `roce` and `payload_len` bytes of
    /// payload.
    pub const fn frame_len(roce: &roce::Repr, payload_len: usize) -> usize {
        ENCAP_LEN + roce.buffer_len(payload_len)
    }
}

/// Most payload bytes [`Encap::rc_send_only`] builds a frame for.
pub const SEND_ONLY_MAX_PAYLOAD: usize = 112;

/// The largest frame [`Encap::rc_send_only`] builds: headers, a BTH and an ImmDt,
/// [`SEND_ONLY_MAX_PAYLOAD`] bytes (no pad needed at that length), the ICRC.
pub const SEND_ONLY_FRAME_MAX: usize =
    ENCAP_LEN + bth::HEADER_LEN + immdt::HEADER_LEN + SEND_ONLY_MAX_PAYLOAD + icrc::ICRC_LEN;

impl Encap {
    /// Makes `out` a whole RC SEND ONLY frame (SEND ONLY WITH IMMEDIATE when `imm` is
    /// given: the ImmDt's four wire bytes) whose payload is the first `n` bytes of
    /// `window`, built at fixed offsets, ICRC included, and returns its length: the
    /// bytes [`Encap::emit_headers`] with a [`roce::Repr`] of that opcode (P_Key
    /// 0xFFFF, AckReq set, MigReq, FECN and BECN clear, SE as `solicited`), the
    /// payload, zero pad bytes and [`fill_icrc`] produce (a test compares them over
    /// many paths, PSNs, QPs and lengths). The frame is written into `out` directly
    /// (its previous contents dropped; no intermediate buffer): `out` is extended by
    /// the largest frame's length in one step, the payload copied as the whole
    /// fixed-size `window` and the pad as four zero bytes after the `n` (copies of
    /// sizes known at compile time instead of calls for `n` and `pad` bytes), then cut
    /// to the frame. `None`, with `out` unchanged, for a window above
    /// [`SEND_ONLY_MAX_PAYLOAD`] bytes, `n` above `W`, or a destination QP above 24
    /// bits.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn rc_send_only<const W: usize>(
        &self,
        out: &mut Vec<u8>,
        dest_qp: u32,
        psn: Psn,
        solicited: bool,
        imm: Option<[u8; 4]>,
        window: &[u8; W],
        n: usize,
    ) -> Option<usize> {
        if W > SEND_ONLY_MAX_PAYLOAD || n > W || dest_qp > super::MAX_U24 {
            return None;
        }
        let pad = roce::pad_len(n);
        let ext = if imm.is_some() { immdt::HEADER_LEN } else { 0 };
        let data_at = BTH_OFFSET + bth::HEADER_LEN + ext;
        let len = data_at + n + pad + icrc::ICRC_LEN;
        let opcode = if imm.is_some() {
            Opcode::RcSendOnlyWithImmediate
        } else {
            Opcode::RcSendOnly
        };
        // The outer headers with the lengths and the IPv4 checksum of this frame
        // (what `Encap::write` patches), then the BTH (IBTA 9.2): opcode; SE, MigReq 0,
        // pad count, TVer 0; P_Key; FECN, BECN, reserved 0; destination QP; AckReq
        // and reserved; PSN.
        let mut h = [0u8; ENCAP_LEN + bth::HEADER_LEN];
        h[..ENCAP_LEN].copy_from_slice(&self.bytes);
        // `len <= SEND_ONLY_FRAME_MAX`: the lengths fit 16 bits.
        let ip_len = (len - IPV4_OFFSET) as u16;
        h[IP_LEN_AT..IP_LEN_AT + 2].copy_from_slice(&ip_len.to_be_bytes());
        let csum = !ipv4::fold(u32::from(self.ip_sum) + u32::from(ip_len));
        h[IP_CSUM_AT..IP_CSUM_AT + 2].copy_from_slice(&csum.to_be_bytes());
        let udp_len = ip_len - ipv4::HEADER_LEN as u16;
        h[UDP_LEN_AT..UDP_LEN_AT + 2].copy_from_slice(&udp_len.to_be_bytes());
        // As three big-endian words: opcode, SE and pad count, P_Key; the byte of
        // FECN/BECN (0) and the 24-bit QP; AckReq and the 24-bit PSN.
        let se_pad = if solicited { 0x80 } else { 0 } | (pad as u32) << 4;
        let w0 = u32::from(opcode.value()) << 24 | se_pad << 16 | u32::from(bth::DEFAULT_PKEY);
        let w2 = 0x8000_0000 | (psn.value() & super::MAX_U24);
        h[BTH_OFFSET..BTH_OFFSET + 4].copy_from_slice(&w0.to_be_bytes());
        h[BTH_OFFSET + 4..BTH_OFFSET + 8].copy_from_slice(&dest_qp.to_be_bytes());
        h[BTH_OFFSET + 8..].copy_from_slice(&w2.to_be_bytes());
        out.clear();
        out.extend_from_slice(&[0u8; SEND_ONLY_FRAME_MAX]);
        let f = out.as_mut_slice();
        // In bounds: `data_at + W <= SEND_ONLY_FRAME_MAX - 4`, `data_at + n + 4` too.
        f[..h.len()].copy_from_slice(&h);
        if let Some(i) = imm {
            f[BTH_OFFSET + bth::HEADER_LEN..data_at].copy_from_slice(&i);
        }
        f[data_at..data_at + W].copy_from_slice(window);
        f[data_at + n..data_at + n + icrc::ICRC_LEN].copy_from_slice(&[0; 4]);
        out.truncate(len);
        fill_icrc(out);
        Some(len)
    }
}

/// Computes and writes the ICRC of a finished frame (all of `frame`, Ethernet header to
/// ICRC) over its own IPv4 and UDP headers. A frame too short to hold the headers and
/// an ICRC is left as it is.
pub fn fill_icrc(frame: &mut [u8]) {
    let n = frame.len();
    if n < ENCAP_LEN + icrc::ICRC_LEN {
        return;
    }
    let (head, transport) = frame.split_at_mut(BTH_OFFSET);
    let (Ok(ip), Ok(u)) = (
        <&[u8; ipv4::HEADER_LEN]>::try_from(&head[IPV4_OFFSET..UDP_OFFSET]),
        <&[u8; udp::HEADER_LEN]>::try_from(&head[UDP_OFFSET..BTH_OFFSET]),
    ) else {
        return;
    };
    let (body, crc) = transport.split_at_mut(transport.len() - icrc::ICRC_LEN);
    crc.copy_from_slice(&icrc::to_wire(icrc::compute(ip, u, body)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::frame::{self, Frame};
    use crate::wire::{aeth, bth, immdt, reth, Opcode, Psn};
    use std::net::Ipv4Addr;

    fn headers(k: u32) -> (ethernet::Repr, ipv4::Repr, udp::Repr) {
        let mut ip = ipv4::Repr::rocev2(
            Ipv4Addr::from(0x0a00_0001u32.wrapping_mul(k | 1)),
            Ipv4Addr::from(0xc0a8_0002u32 ^ k.wrapping_mul(0x9e37_79b9)),
        );
        ip.dscp = (k % 64) as u8;
        ip.ecn = ipv4::Ecn::from_bits(k as u8);
        ip.ttl = (k * 7) as u8;
        let eth = ethernet::Repr {
            src_addr: ethernet::Address([2, 0, 0, 0, (k >> 8) as u8, k as u8]),
            dst_addr: ethernet::Address([2, 1, 2, 3, 4, k as u8]),
            ethertype: ethernet::EtherType::IPV4,
        };
        (eth, ip, udp::Repr::rocev2(0xc000 | (k as u16 & 0x3fff)))
    }

    fn transports(k: u32) -> [roce::Repr; 4] {
        let mut send = roce::Repr::new(bth::Repr::new(
            Opcode::RcSendOnly,
            k & 0xff_ffff,
            Psn::new(k),
        ));
        send.bth.ack_req = k & 1 == 0;
        send.bth.solicited = k & 2 == 0;
        let mut write = roce::Repr::new(bth::Repr::new(
            Opcode::RcRdmaWriteOnlyWithImmediate,
            7,
            Psn::new(!k),
        ));
        write.reth = Some(reth::Repr {
            virtual_address: u64::from(k) << 20,
            rkey: k,
            dma_length: k & 0xfff,
        });
        write.immdt = Some(immdt::Repr { immediate: k });
        let mut ack = roce::Repr::new(bth::Repr::new(Opcode::RcAcknowledge, 9, Psn::new(k)));
        ack.aeth = Some(aeth::Repr {
            syndrome: aeth::Syndrome::ACK,
            msn: k & 0xff_ffff,
        });
        let middle = roce::Repr::new(bth::Repr::new(Opcode::RcSendMiddle, 3, Psn::new(k)));
        [send, write, ack, middle]
    }

    #[test]
    fn frames_are_byte_for_byte_those_of_frame_repr() {
        for k in 0..300u32 {
            let (eth, ip, u) = headers(k);
            let encap = Encap::new(&eth, &ip, &u).unwrap();
            for (i, r) in transports(k).iter().enumerate() {
                let len = match i {
                    2 => 0,
                    3 => 1024,
                    _ => (k as usize * 13) % 1500,
                };
                let payload: Vec<u8> = (0..len).map(|b| (b as u32 ^ k) as u8).collect();
                let full = frame::Repr {
                    ethernet: eth,
                    ipv4: ip,
                    udp: u,
                    roce: *r,
                };
                let mut want = vec![0xeeu8; 5000];
                let n = full.emit(&payload, &mut want).unwrap();
                let mut got = vec![0x11u8; 5000];
                let range = encap.emit_headers(r, len, &mut got).unwrap();
                assert_eq!(Encap::frame_len(r, len), n);
                got[range].copy_from_slice(&payload);
                fill_icrc(&mut got[..n]);
                assert_eq!(got[..n], want[..n], "path {k}, transport {i}");
                Frame::new_checked(&got[..n]).unwrap().verify().unwrap();
            }
        }
    }

    #[test]
    fn send_only_frames_are_byte_for_byte_those_of_the_general_builder() {
        let qps = [0u32, 1, 0x12_3456, 0xff_fffe, 0xff_ffff];
        let psns = [0u32, 1, 0x7f_ffff, 0x80_0000, 0xff_fffe, 0xff_ffff];
        let mut checked = 0;
        for k in 0..120u32 {
            let (eth, ip, u) = headers(k);
            let encap = Encap::new(&eth, &ip, &u).unwrap();
            for len in 0..=SEND_ONLY_MAX_PAYLOAD {
                // Every length on a few paths; a spread of them on the others.
                if k >= 4 && !(len as u32 + k).is_multiple_of(9) {
                    continue;
                }
                let qp = qps[(k as usize + len) % qps.len()] ^ (k << 4) & 0xff_ffff;
                let psn = psns[(k as usize * 7 + len) % psns.len()] ^ (k * 0x1_0101) & 0xff_ffff;
                let payload: Vec<u8> = (0..len).map(|b| (b as u32 * 31 + k) as u8).collect();
                for (imm, solicited) in [
                    (None, false),
                    (Some(0xdead_beefu32), true),
                    (Some(k), false),
                    (None, true),
                ] {
                    let opcode = if imm.is_some() {
                        Opcode::RcSendOnlyWithImmediate
                    } else {
                        Opcode::RcSendOnly
                    };
                    let mut r = roce::Repr::new(bth::Repr::new(opcode, qp, Psn::new(psn)));
                    r.bth.ack_req = true;
                    r.bth.solicited = solicited;
                    r.immdt = imm.map(|immediate| immdt::Repr { immediate });
                    let mut want = vec![0x5au8; 400];
                    let range = encap.emit_headers(&r, len, &mut want).unwrap();
                    want[range].copy_from_slice(&payload);
                    let n = Encap::frame_len(&r, len);
                    fill_icrc(&mut want[..n]);
                    // The payload in a window whose other bytes are not zero, in a
                    // buffer that held another frame.
                    let mut window = [0xc3u8; SEND_ONLY_MAX_PAYLOAD];
                    window[..len].copy_from_slice(&payload);
                    let mut got = vec![0xa5u8; 300];
                    let m = encap
                        .rc_send_only(
                            &mut got,
                            qp,
                            Psn::new(psn),
                            solicited,
                            imm.map(u32::to_be_bytes),
                            &window,
                            len,
                        )
                        .unwrap();
                    assert_eq!(m, n, "path {k}, {len} bytes");
                    assert_eq!(got.len(), n, "path {k}, {len} bytes");
                    assert!(n <= SEND_ONLY_FRAME_MAX);
                    assert_eq!(got[..], want[..n], "path {k}, {len} bytes, {imm:?}");
                    let f = Frame::new_checked(&got[..]).unwrap();
                    f.verify().unwrap();
                    // A window of exactly the payload (no byte after it) too.
                    if len == 8 {
                        let mut got8 = Vec::new();
                        let w8: [u8; 8] = payload[..].try_into().unwrap();
                        let q = Psn::new(psn);
                        let i = imm.map(u32::to_be_bytes);
                        let m8 = encap.rc_send_only(&mut got8, qp, q, solicited, i, &w8, 8);
                        assert_eq!(m8, Some(n));
                        assert_eq!(got8, got);
                    }
                    checked += 1;
                }
            }
        }
        assert!(checked > 4 * 4 * 113, "{checked}");
        // Out of its range: nothing built.
        let (eth, ip, u) = headers(3);
        let encap = Encap::new(&eth, &ip, &u).unwrap();
        let mut out = vec![7u8; 3];
        let big = [0u8; SEND_ONLY_MAX_PAYLOAD + 1];
        let q = Psn::new(0);
        assert_eq!(
            encap.rc_send_only(&mut out, 1, q, false, None, &big, 0),
            None
        );
        let small = [0u8; 4];
        assert_eq!(
            encap.rc_send_only(&mut out, 1, q, false, None, &small, 5),
            None
        );
        assert_eq!(
            encap.rc_send_only(&mut out, 1 << 24, q, false, None, &[], 0),
            None
        );
        assert_eq!(out, [7, 7, 7], "left unchanged");
    }

    #[test]
    fn the_same_checks_as_frame_repr() {
        let (mut eth, mut ip, mut u) = headers(1);
        ip.dscp = 64;
        assert!(Encap::new(&eth, &ip, &u).is_err());
        ip.dscp = 0;
        u.dst_port = 4792;
        assert_eq!(Encap::new(&eth, &ip, &u), Err(Error::UdpPort(4792)));
        u.dst_port = udp::ROCEV2_PORT;
        ip.protocol = 6;
        assert_eq!(Encap::new(&eth, &ip, &u), Err(Error::Protocol(6)));
        ip.protocol = ipv4::PROTOCOL_UDP;
        eth.ethertype = ethernet::EtherType(0x86dd);
        assert_eq!(Encap::new(&eth, &ip, &u), Err(Error::EtherType(0x86dd)));
        eth.ethertype = ethernet::EtherType::IPV4;
        let encap = Encap::new(&eth, &ip, &u).unwrap();
        let r = transports(1)[0];
        let mut small = [0u8; 60];
        assert!(matches!(
            encap.emit_headers(&r, 64, &mut small),
            Err(Error::BufferTooSmall { .. })
        ));
        let mut big = vec![0u8; 70_000];
        assert_eq!(
            encap.write(&mut big),
            Err(Error::TooLong(70_000 - IPV4_OFFSET))
        );
        // Too short for an ICRC: left alone.
        let mut tiny = [7u8; 10];
        fill_icrc(&mut tiny);
        assert_eq!(tiny, [7u8; 10]);
    }
}

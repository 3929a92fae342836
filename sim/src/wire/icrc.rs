//! The Invariant CRC (ICRC) of a RoCEv2 packet.
//!
//! IBTA Vol. 1 §7.8 (ICRC) as adapted by Annex A17 for RoCEv2; algorithm, masks and byte
//! order from `shared/reference/rocev2-wire.md` §2.4 (Linux `rxe_icrc.c`, confirmed with
//! tshark, scapy and zlib):
//!
//! 1. the CRC input is 8 bytes of 0xFF (standing in for the masked LRH), the IPv4
//!    header, the UDP header, the BTH, the other transport headers, the payload and the
//!    pad bytes; the Ethernet header and the ICRC itself are not covered;
//! 2. in that copy, the fields routers may change are set to all ones: IPv4 TOS, TTL
//!    and header checksum; UDP checksum; BTH byte 4 (FECN, BECN, reserved);
//! 3. the CRC is the standard CRC-32 (IEEE 802.3, zlib: reflected polynomial 0xEDB88320,
//!    initial value and final XOR 0xFFFFFFFF);
//! 4. it goes on the wire least-significant byte first (`to_le_bytes`). Wireshark reads
//!    the four bytes big-endian, so it shows the byte-swapped value.
//!
//! The computation copies only the 40 masked header bytes to the stack (one block)
//! and allocates nothing.

use super::{bth, ipv4, udp};

/// The size of the ICRC.
pub const ICRC_LEN: usize = 4;

/// `crc32(b"\xff" * 8)`: the CRC after the eight 0xFF bytes that open every ICRC input.
/// Continuing from it is the same as feeding those bytes (equivalently, rxe starts its
/// raw register at `!0x2144DF1C = 0xDEBB20E3`).
const CRC_OF_FF8: u32 = 0x2144_df1c;

/// Computes the ICRC of a packet from its IPv4 header, its UDP header and its transport
/// part (`transport`: from the BTH to the end of the pad bytes, ICRC excluded).
///
/// The masks are applied to copies; the inputs are not modified. A `transport` shorter
/// than a BTH is hashed as it is (such a packet is rejected before its ICRC matters).
pub fn compute(
    ipv4_header: &[u8; ipv4::HEADER_LEN],
    udp_header: &[u8; udp::HEADER_LEN],
    transport: &[u8],
) -> u32 {
    let mut hasher = crc32fast::Hasher::new_with_initial(CRC_OF_FF8);
    // The masked IPv4, UDP and BTH headers as one contiguous 40-byte block (one CRC
    // update instead of three short ones), then the rest of the packet in place.
    const IP_AT: usize = 0;
    const UDP_AT: usize = ipv4::HEADER_LEN;
    const BTH_AT: usize = UDP_AT + udp::HEADER_LEN;
    let mut h = [0u8; BTH_AT + bth::HEADER_LEN];
    h[IP_AT..UDP_AT].copy_from_slice(ipv4_header);
    for at in ipv4::ICRC_MASKED_BYTES {
        h[IP_AT + at] = 0xff;
    }
    h[UDP_AT..BTH_AT].copy_from_slice(udp_header);
    for at in udp::ICRC_MASKED_BYTES {
        h[UDP_AT + at] = 0xff;
    }
    if transport.len() >= bth::HEADER_LEN {
        h[BTH_AT..].copy_from_slice(&transport[..bth::HEADER_LEN]);
        h[BTH_AT + bth::ICRC_MASKED_BYTE] = 0xff;
        hasher.update(&h);
        hasher.update(&transport[bth::HEADER_LEN..]);
    } else {
        hasher.update(&h[..BTH_AT]);
        hasher.update(transport);
    }
    hasher.finalize()
}

/// Reads an ICRC from its four wire bytes (least-significant byte first).
pub const fn from_wire(bytes: [u8; ICRC_LEN]) -> u32 {
    u32::from_le_bytes(bytes)
}

/// The four wire bytes of an ICRC (least-significant byte first).
pub const fn to_wire(icrc: u32) -> [u8; ICRC_LEN] {
    icrc.to_le_bytes()
}

/// The value Wireshark/tshark prints as "Invariant CRC" for an ICRC: the wire bytes read
/// big-endian (reference §2.4, §7.3).
pub const fn as_wireshark_shows(icrc: u32) -> u32 {
    icrc.swap_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example of reference §2.4.
    const IP: [u8; 20] = [
        0x45, 0x00, 0x00, 0x34, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb9, 0x65, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0x02,
    ];
    const UDP: [u8; 8] = [0xc0, 0x00, 0x12, 0xb7, 0x00, 0x20, 0x00, 0x00];
    const TRANSPORT: [u8; 20] = [
        0x04, 0x30, 0xff, 0xff, 0x00, 0x00, 0x00, 0x12, 0x80, 0x00, 0x00, 0x00, b'h', b'e', b'l',
        b'l', b'o', 0, 0, 0,
    ];

    #[test]
    fn reference_worked_example() {
        let icrc = compute(&IP, &UDP, &TRANSPORT);
        assert_eq!(icrc, 0x73c8_6653);
        assert_eq!(to_wire(icrc), [0x53, 0x66, 0xc8, 0x73]);
        assert_eq!(from_wire([0x53, 0x66, 0xc8, 0x73]), icrc);
        assert_eq!(as_wireshark_shows(icrc), 0x5366_c873);
    }

    #[test]
    fn equals_plain_crc32_of_the_reference_pseudo_packet() {
        // The 56-byte pseudo packet of reference §2.4, fed to a plain CRC-32.
        let pseudo: [u8; 56] = [
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // masked LRH
            0x45, 0xff, 0x00, 0x34, 0x00, 0x00, 0x40, 0x00, 0xff, 0x11, 0xff, 0xff, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0x02, // IPv4, TOS/TTL/csum masked
            0xc0, 0x00, 0x12, 0xb7, 0x00, 0x20, 0xff, 0xff, // UDP, csum masked
            0x04, 0x30, 0xff, 0xff, 0xff, 0x00, 0x00, 0x12, 0x80, 0x00, 0x00, 0x00, // BTH
            b'h', b'e', b'l', b'l', b'o', 0, 0, 0,
        ];
        assert_eq!(crc32fast::hash(&pseudo), 0x73c8_6653);
        assert_eq!(crc32fast::hash(&[0xff; 8]), CRC_OF_FF8);
        assert_eq!(!CRC_OF_FF8, 0xdebb_20e3, "rxe's initial register value");
    }

    #[test]
    fn masked_fields_do_not_matter_and_the_inputs_are_untouched() {
        let reference = compute(&IP, &UDP, &TRANSPORT);
        let (mut ip, mut udp, mut t) = (IP, UDP, TRANSPORT);
        ip[1] = 0x03; // ECN = CE
        ip[8] = 3; // TTL
        ip[10] ^= 0x5a;
        ip[11] ^= 0xa5;
        udp[6] = 0x12;
        udp[7] = 0x34;
        t[4] = 0xc0 | 0x15; // FECN, BECN and reserved bits
        assert_eq!(compute(&ip, &udp, &t), reference);
        assert_eq!(ip[8], 3);
    }
}

//! The RoCE GID table: SET_ROCE_ADDRESS / QUERY_ROCE_ADDRESS and the GID entry
//! ([`roce_addr_layout`]).
//!
//! Without a kernel netdev nobody fills the GID table for a VFIO driver: it writes each
//! entry itself with SET_ROCE_ADDRESS (the GID, the source MAC, L3 type and RoCE
//! version). A QP's address path names an entry by `src_addr_index`. An all-zero GID and
//! MAC delete the entry.

use crate::field::{Field, Layout, TooShort};
use crate::prm_layout;

use super::cmd::{self, Opcode};
use super::vport::{join_mac, split_mac};

prm_layout! {
    /// SET_ROCE_ADDRESS input: writes one GID table entry.
    pub mod set_roce_address_in = "set_roce_address_in" (0x180) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// GID table index.
        roce_address_index: 0x40, 0x10;
        /// Port number (1-based).
        vhca_port_num: 0x5c, 4;
        /// The GID table entry ([`roce_addr_layout`](super::roce_addr_layout)).
        roce_address: 0x80, 0x100;
    }
}

prm_layout! {
    /// SET_ROCE_ADDRESS output.
    pub mod set_roce_address_out = "set_roce_address_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}

prm_layout! {
    /// QUERY_ROCE_ADDRESS input.
    pub mod query_roce_address_in = "query_roce_address_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// GID table index.
        roce_address_index: 0x40, 0x10;
        /// Port number (1-based).
        vhca_port_num: 0x5c, 4;
    }
}

prm_layout! {
    /// QUERY_ROCE_ADDRESS output: one GID table entry.
    pub mod query_roce_address_out = "query_roce_address_out" (0x180) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// The GID table entry ([`roce_addr_layout`](super::roce_addr_layout)).
        roce_address: 0x80, 0x100;
    }
}

prm_layout! {
    /// A GID table entry.
    pub mod roce_addr_layout = "roce_addr_layout" (0x100) {
        /// The GID (16 bytes; IPv4-mapped for IPv4).
        source_l3_address: 0, 0x80;
        /// The entry has a VLAN.
        vlan_valid: 0x83, 1;
        /// VLAN id.
        vlan_id: 0x84, 0xc;
        /// Source MAC bits 47..32.
        source_mac_47_32: 0x90, 0x10;
        /// Source MAC bits 31..0.
        source_mac_31_0: 0xa0, 0x20;
        /// L3 type (`MLX5_ROCE_L3_TYPE_*`).
        roce_l3_type: 0xd4, 4;
        /// RoCE version (`MLX5_ROCE_VERSION_*`).
        roce_version: 0xd8, 8;
    }
}
/// The layouts of this module.
pub const LAYOUTS: &[&Layout] = &[
    &set_roce_address_in::LAYOUT,
    &set_roce_address_out::LAYOUT,
    &query_roce_address_in::LAYOUT,
    &query_roce_address_out::LAYOUT,
    &roce_addr_layout::LAYOUT,
];

header_enum! {
    /// `roce_addr_layout.roce_version` (`MLX5_ROCE_VERSION_*`, `device.h`).
    pub enum RoceVersion: u8 in Device {
        /// RoCE v1 (Ethernet type 0x8915).
        V1 = 0 => "MLX5_ROCE_VERSION_1",
        /// RoCE v2 (UDP port 4791).
        V2 = 2 => "MLX5_ROCE_VERSION_2",
    }
}

header_enum! {
    /// `roce_addr_layout.roce_l3_type` (`MLX5_ROCE_L3_TYPE_*`, `device.h`).
    pub enum RoceL3Type: u8 in Device {
        /// IPv4 (an IPv4-mapped GID).
        Ipv4 = 0 => "MLX5_ROCE_L3_TYPE_IPV4",
        /// IPv6.
        Ipv6 = 1 => "MLX5_ROCE_L3_TYPE_IPV6",
    }
}

c_constants! {
    /// `roce_cap` capability bits (`device.h`).
    pub const CAP_CONSTANTS;
        /// `roce_cap.roce_version` bit: RoCE v1 supported.
        Device MLX5_ROCE_VERSION_1_CAP: u8 = 1 << 0;
        /// `roce_cap.roce_version` bit: RoCE v2 supported.
        Device MLX5_ROCE_VERSION_2_CAP: u8 = 1 << 2;
        /// `roce_cap.l3_type` bit: IPv4 supported.
        Device MLX5_ROCE_L3_TYPE_IPV4_CAP: u8 = 1 << 1;
        /// `roce_cap.l3_type` bit: IPv6 supported.
        Device MLX5_ROCE_L3_TYPE_IPV6_CAP: u8 = 1 << 2;

}

/// One GID table entry, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoceAddr {
    /// The GID.
    pub gid: [u8; 16],
    /// The source MAC.
    pub mac: [u8; 6],
    /// The VLAN, if any.
    pub vlan: Option<u16>,
    /// Raw `roce_l3_type` ([`RoceL3Type`]).
    pub l3_type: u8,
    /// Raw `roce_version` ([`RoceVersion`]).
    pub version: u8,
}

impl RoceAddr {
    /// Reads the entry whose `roce_addr_layout` starts at bit `base` of `buf`.
    pub fn read(buf: &[u8], base: u32) -> Result<Self, TooShort> {
        let end = (base as usize + roce_addr_layout::LAYOUT.size_bits as usize) / 8;
        if buf.len() < end {
            return Err(TooShort {
                layout: roce_addr_layout::LAYOUT.name,
                len: buf.len(),
                need: end,
            });
        }
        let f = |x: Field| x.at(base);
        let mut gid = [0u8; 16];
        if let Some(b) = f(roce_addr_layout::source_l3_address).bytes(buf) {
            gid.copy_from_slice(b);
        }
        let vlan = (f(roce_addr_layout::vlan_valid).get(buf) != 0)
            .then(|| f(roce_addr_layout::vlan_id).get(buf) as u16);
        Ok(RoceAddr {
            gid,
            mac: join_mac(
                f(roce_addr_layout::source_mac_47_32).get(buf) as u16,
                f(roce_addr_layout::source_mac_31_0).get(buf) as u32,
            ),
            vlan,
            l3_type: f(roce_addr_layout::roce_l3_type).get(buf) as u8,
            version: f(roce_addr_layout::roce_version).get(buf) as u8,
        })
    }

    /// Writes the entry at bit `base` of `buf`, which the caller sized for it (see
    /// [`Field::set`]).
    pub fn write(&self, buf: &mut [u8], base: u32) {
        let f = |x: Field| x.at(base);
        if let Some(b) = f(roce_addr_layout::source_l3_address).bytes_mut(buf) {
            b.copy_from_slice(&self.gid);
        }
        let (hi, lo) = split_mac(self.mac);
        f(roce_addr_layout::source_mac_47_32).set(buf, hi.into());
        f(roce_addr_layout::source_mac_31_0).set(buf, lo.into());
        f(roce_addr_layout::vlan_valid).set(buf, self.vlan.is_some().into());
        f(roce_addr_layout::vlan_id).set(buf, self.vlan.unwrap_or(0).into());
        f(roce_addr_layout::roce_l3_type).set(buf, self.l3_type.into());
        f(roce_addr_layout::roce_version).set(buf, self.version.into());
    }
}

/// The RoCE v2 GID of an IPv4 address `a.b.c.d`: the IPv4-mapped IPv6 address
/// `::ffff:a.b.c.d` (RFC 4291 §2.5.5.2), i.e. bytes 0–9 zero, bytes 10–11 0xFF and the
/// address in bytes 12–15. This is how RoCE v2 (IBTA Annex A17) names an IPv4
/// interface in the GID table and in address paths; Linux builds the same GID with
/// `ipv6_addr_set_v4mapped` (`shared/reference/rocev2-wire.md` §1.3). Such an entry is
/// written with [`RoceL3Type::Ipv4`].
pub const fn ipv4_mapped_gid(ip: [u8; 4]) -> [u8; 16] {
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, ip[0], ip[1], ip[2], ip[3],
    ]
}

/// The modified EUI-64 interface identifier of a MAC (RFC 4291 appendix A): the
/// universal/local bit flipped and `ff:fe` in the middle. It is a RoCE port's node
/// GUID and the low half of its link-local GID (`fe80::/64`).
pub const fn eui64(mac: [u8; 6]) -> [u8; 8] {
    [
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ]
}

/// A SET_ROCE_ADDRESS input writing `addr` to GID table entry `index` of `port`
/// (`vhca_port_num`, used only when the device reports `num_vhca_ports`).
pub fn set_roce_address_input(index: u16, port: u8, addr: &RoceAddr) -> Vec<u8> {
    let mut input = cmd::new_input(Opcode::SetRoceAddress, 0, set_roce_address_in::SIZE);
    set_roce_address_in::roce_address_index.set(&mut input, index.into());
    set_roce_address_in::vhca_port_num.set(&mut input, port.into());
    addr.write(&mut input, set_roce_address_in::roce_address.bit);
    input
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_mapped_gid_is_rfc4291_mapped_address() {
        assert_eq!(
            ipv4_mapped_gid([192, 168, 1, 7]),
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 7]
        );
        let ip = std::net::Ipv4Addr::new(10, 0, 0, 72);
        assert_eq!(ipv4_mapped_gid(ip.octets()), ip.to_ipv6_mapped().octets());
    }

    #[test]
    fn eui64_flips_the_universal_bit_and_inserts_fffe() {
        assert_eq!(
            eui64([0x02, 0x11, 0x22, 0x33, 0x44, 0x55]),
            [0x00, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55]
        );
        assert_eq!(eui64([0; 6]), [2, 0, 0, 0xff, 0xfe, 0, 0, 0]);
    }

    #[test]
    fn set_roce_address_placement() {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[192, 168, 1, 7]);
        let addr = RoceAddr {
            gid,
            mac: [0x02, 0, 0, 0x11, 0x22, 0x33],
            vlan: Some(0x123),
            l3_type: RoceL3Type::Ipv4.value(),
            version: RoceVersion::V2.value(),
        };
        let input = set_roce_address_input(5, 1, &addr);
        assert_eq!(input.len(), 48);
        assert_eq!(&input[..2], &[0x07, 0x61]);
        assert_eq!(&input[8..12], &[0, 5, 0, 1]);
        assert_eq!(&input[0x10..0x20], &gid);
        // vlan_valid dword 4 bit 28, vlan_id [27:16], source_mac_47_32 [15:0].
        assert_eq!(&input[0x20..0x24], &[0x11, 0x23, 0x02, 0x00]);
        assert_eq!(&input[0x24..0x28], &[0x00, 0x11, 0x22, 0x33]);
        assert_eq!(&input[0x28..0x2c], &[0, 0, 0x00, 0x02]);
        assert_eq!(
            RoceAddr::read(&input, set_roce_address_in::roce_address.bit),
            Ok(addr)
        );
        assert!(RoceAddr::read(&input[..47], set_roce_address_in::roce_address.bit).is_err());
        let out = [0u8; 48];
        let none = RoceAddr::read(&out, query_roce_address_out::roce_address.bit).unwrap();
        assert_eq!(none.vlan, None);
        assert_eq!(none.version, RoceVersion::V1.value());
    }
}

//! The host's IPv4 neighbour table (`/proc/net/arp`, Linux `arp_seq_show`): the MAC
//! of a RoCE peer for a ConnectX on VFIO, which has no kernel netdev of its own to
//! resolve it through (Linux `mlx5_ib` asks the neighbour subsystem,
//! `ib_resolve_eth_dmac`). A peer the host reaches through another interface on the
//! same Ethernet segment is found there.

use std::net::Ipv4Addr;

/// The kernel's table.
pub const ARP_TABLE: &str = "/proc/net/arp";

/// The MAC of `ip` in a table in `/proc/net/arp`'s format (a header line, then `IP
/// address  HW type  Flags  HW address  Mask  Device`), if it has a complete entry
/// (flag `ATF_COM`, 0x2: an incomplete one reads `00:00:00:00:00:00`).
pub fn lookup(table: &str, ip: Ipv4Addr) -> Option<[u8; 6]> {
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 || f[0].parse::<Ipv4Addr>().ok() != Some(ip) {
            continue;
        }
        let flags = u32::from_str_radix(f[2].trim_start_matches("0x"), 16).unwrap_or(0);
        let m: Vec<u8> = f[3]
            .split(':')
            .filter_map(|x| u8::from_str_radix(x, 16).ok())
            .collect();
        if flags & 0x2 != 0 && m.len() == 6 && m != [0; 6] {
            return Some([m[0], m[1], m[2], m[3], m[4], m[5]]);
        }
    }
    None
}

/// The MAC of `ip` in the host's table ([`ARP_TABLE`]), if it has one.
pub fn arp_mac(ip: Ipv4Addr) -> Option<[u8; 6]> {
    lookup(&std::fs::read_to_string(ARP_TABLE).ok()?, ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
IP address       HW type     Flags       HW address            Mask     Device
10.0.0.2         0x1         0x2         b8:ce:f6:01:02:03     *        enp1s0
10.0.0.3         0x1         0x0         00:00:00:00:00:00     *        enp1s0
10.0.0.4         0x1         0x2         00:00:00:00:00:00     *        enp1s0
";

    #[test]
    fn complete_entries_give_their_mac_and_others_none() {
        let a = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert_eq!(
            lookup(TABLE, a("10.0.0.2")),
            Some([0xb8, 0xce, 0xf6, 1, 2, 3])
        );
        assert_eq!(lookup(TABLE, a("10.0.0.3")), None, "incomplete");
        assert_eq!(lookup(TABLE, a("10.0.0.4")), None, "no address");
        assert_eq!(lookup(TABLE, a("10.0.0.5")), None, "absent");
        assert_eq!(lookup("", a("10.0.0.2")), None);
        assert_eq!(
            lookup("header\n10.0.0.2 0x1", a("10.0.0.2")),
            None,
            "short line"
        );
    }
}

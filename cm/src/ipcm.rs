//! The RDMA IP CM service (IBTA Annex A11) as Linux's rdma_cm implements it: service
//! IDs of the IP port spaces, and the 36-byte IP addressing header that opens the
//! private data of a REQ or SIDR_REQ (Linux `drivers/infiniband/core/cma.c`
//! `rdma_get_service_id`, `cma_format_hdr`, `cma_save_ip_info`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::Error;

/// An rdma_cm port space (`enum rdma_ucm_port_space`, `rdma/rdma_user_cm.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PortSpace {
    /// `RDMA_PS_TCP` (0x0106): RC and UC connections.
    Tcp,
    /// `RDMA_PS_UDP` (0x0111): UD services resolved by SIDR.
    Udp,
    /// `RDMA_PS_IB` (0x013f): either QP type.
    Ib,
}

impl PortSpace {
    /// The port space's number.
    pub const fn number(self) -> u16 {
        match self {
            PortSpace::Tcp => 0x0106,
            PortSpace::Udp => 0x0111,
            PortSpace::Ib => 0x013f,
        }
    }

    /// The port space of `number`, if it is one of the IP port spaces.
    pub const fn from_number(number: u16) -> Option<PortSpace> {
        match number {
            0x0106 => Some(PortSpace::Tcp),
            0x0111 => Some(PortSpace::Udp),
            0x013f => Some(PortSpace::Ib),
            _ => None,
        }
    }
}

/// `RDMA_IB_IP_PS_MASK`: the bits of a service ID that name an IP port space.
pub const IP_PS_MASK: u64 = 0xffff_ffff_ffff_0000;

/// The service ID of `port` in `ps`: `(ps << 16) + port` (Linux `rdma_get_service_id`).
pub const fn service_id(ps: PortSpace, port: u16) -> u64 {
    ((ps.number() as u64) << 16) | port as u64
}

/// The port space and port of an IP service ID, or `None` for another service.
pub fn from_service_id(sid: u64) -> Option<(PortSpace, u16)> {
    if sid >> 32 != 0 {
        return None;
    }
    let ps = PortSpace::from_number((sid >> 16) as u16)?;
    Some((ps, sid as u16))
}

/// Bytes of the IP addressing header.
pub const HDR_LEN: usize = 36;
/// The only `cma_version` Linux sends and accepts (`CMA_VERSION`).
pub const CMA_VERSION: u8 = 0x00;

/// The IP addressing header: who connects from where to where. The destination port
/// is not in it: it is the low 16 bits of the service ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpHdr {
    /// The active side's bound port.
    pub src_port: u16,
    /// The active side's address.
    pub src: IpAddr,
    /// The address the active side connects to.
    pub dst: IpAddr,
}

impl IpHdr {
    /// Reads the header at the start of `pd` (a REQ's or SIDR_REQ's private data).
    /// A version other than 0, an IP version other than 4 or 6, or source and
    /// destination of different families is an error: Linux's rdma_cm rejects them
    /// (REJ consumer defined).
    pub fn parse(pd: &[u8]) -> Result<IpHdr, Error> {
        if pd.len() < HDR_LEN {
            return Err(Error::Truncated {
                what: "IP CM header",
                len: pd.len(),
                need: HDR_LEN,
            });
        }
        if pd[0] != CMA_VERSION {
            return Err(Error::Field {
                msg: "IP CM header",
                field: "version",
                value: pd[0].into(),
            });
        }
        let ip = |o: usize, v6: bool| -> IpAddr {
            if v6 {
                let mut a = [0u8; 16];
                a.copy_from_slice(&pd[o..o + 16]);
                IpAddr::V6(Ipv6Addr::from(a))
            } else {
                // IPv4 in the last 4 of the 16 bytes, after 12 zero bytes (Linux
                // `union cma_ip_addr`), not as ::ffff:a.b.c.d.
                IpAddr::V4(Ipv4Addr::new(
                    pd[o + 12],
                    pd[o + 13],
                    pd[o + 14],
                    pd[o + 15],
                ))
            }
        };
        let v6 = match pd[1] >> 4 {
            4 => false,
            6 => true,
            v => {
                return Err(Error::Field {
                    msg: "IP CM header",
                    field: "IP version",
                    value: v.into(),
                })
            }
        };
        Ok(IpHdr {
            src_port: u16::from_be_bytes([pd[2], pd[3]]),
            src: ip(4, v6),
            dst: ip(20, v6),
        })
    }

    /// Writes the header into the first 36 bytes of `pd`. Both addresses must be of
    /// one family.
    pub fn emit(&self, pd: &mut [u8]) -> Result<(), Error> {
        let h = &mut pd[..HDR_LEN];
        h.fill(0);
        h[0] = CMA_VERSION;
        h[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                h[1] = 4 << 4;
                h[16..20].copy_from_slice(&s.octets());
                h[32..36].copy_from_slice(&d.octets());
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                h[1] = 6 << 4;
                h[4..20].copy_from_slice(&s.octets());
                h[20..36].copy_from_slice(&d.octets());
            }
            _ => {
                return Err(Error::Field {
                    msg: "IP CM header",
                    field: "address families (source and destination differ)",
                    value: 0,
                })
            }
        }
        Ok(())
    }
}

/// The RoCEv2 GID of an IP address: IPv4-mapped (`::ffff:a.b.c.d`) for IPv4, the
/// address itself for IPv6 (Linux `rdma_ip2gid`).
pub fn ip_to_gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The IP address of a RoCEv2 GID (IPv4 for an IPv4-mapped GID).
pub fn gid_to_ip(gid: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// The flow label rdma_cm puts in a REQ for a RoCEv2 connection between the active
/// side's port `src_port` and the service port `dst_port`:
/// `(src_port * 31 + dst_port) & 0xfffff` (Linux `cma_get_roce_udp_flow_label`).
pub const fn roce_flow_label(src_port: u16, dst_port: u16) -> u32 {
    ((src_port as u32) * 31 + dst_port as u32) & 0xf_ffff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids_are_port_space_and_port() {
        assert_eq!(service_id(PortSpace::Tcp, 7174), 0x0000_0000_0106_1c06);
        assert_eq!(service_id(PortSpace::Udp, 7174), 0x0000_0000_0111_1c06);
        assert_eq!(from_service_id(0x0106_1c06), Some((PortSpace::Tcp, 7174)));
        assert_eq!(from_service_id(0x0200_0000_0106_1c06), None);
        assert_eq!(from_service_id(0x0107_0001), None);
        assert_eq!(service_id(PortSpace::Ib, 1) & IP_PS_MASK, 0x013f_0000);
    }

    #[test]
    fn an_ipv4_header_puts_the_addresses_after_twelve_zero_bytes() {
        let h = IpHdr {
            src_port: 0x9c40,
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
        };
        let mut b = [0xaau8; 40];
        h.emit(&mut b).unwrap();
        let mut want = [0u8; 36];
        want[1] = 0x40;
        want[2..4].copy_from_slice(&[0x9c, 0x40]);
        want[16..20].copy_from_slice(&[10, 0, 0, 1]);
        want[32..36].copy_from_slice(&[10, 0, 0, 2]);
        assert_eq!(&b[..36], &want);
        assert_eq!(&b[36..], &[0xaa; 4], "only the header is written");
        assert_eq!(IpHdr::parse(&b).unwrap(), h);
    }

    #[test]
    fn bad_headers_say_what_is_wrong() {
        let mut b = [0u8; 36];
        b[1] = 0x40;
        b[0] = 1;
        assert!(IpHdr::parse(&b)
            .unwrap_err()
            .to_string()
            .contains("version"));
        b[0] = 0;
        b[1] = 0x50;
        assert!(IpHdr::parse(&b)
            .unwrap_err()
            .to_string()
            .contains("IP version"));
        assert!(IpHdr::parse(&b[..20]).is_err());
        let mixed = IpHdr {
            src_port: 1,
            src: "10.0.0.1".parse().unwrap(),
            dst: "::1".parse().unwrap(),
        };
        assert!(mixed.emit(&mut [0u8; 36]).is_err());
    }

    #[test]
    fn gids_map_ipv4_addresses() {
        let ip: IpAddr = "192.168.1.7".parse().unwrap();
        let g = ip_to_gid(ip);
        assert_eq!(&g[10..], &[0xff, 0xff, 192, 168, 1, 7]);
        assert_eq!(gid_to_ip(g), ip);
        assert_eq!(
            roce_flow_label(0x9c40, 7174),
            (0x9c40 * 31 + 7174) & 0xfffff
        );
    }
}

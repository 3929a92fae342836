//! Ethernet II header (14 bytes): destination MAC, source MAC, EtherType.
//!
//! IEEE 802.3 (Ethernet II framing); RoCEv2 over IPv4 uses EtherType 0x0800
//! (`shared/reference/rocev2-wire.md` §1.1). The frame check sequence is not part of
//! the frames handled here (nor of a pcap capture). VLAN tags are not modelled.

use core::fmt;

use super::{be, Header, Result};

mod field {
    use crate::wire::Field;
    pub const DST: Field = 0..6;
    pub const SRC: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
}

/// The size of an Ethernet II header.
pub const HEADER_LEN: usize = field::ETHERTYPE.end;

/// A 48-bit MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Address(pub [u8; 6]);

impl Address {
    /// The broadcast address.
    pub const BROADCAST: Address = Address([0xff; 6]);

    /// Whether this is a unicast address (group bit clear).
    pub const fn is_unicast(&self) -> bool {
        self.0[0] & 0x01 == 0
    }

    /// Whether this is a locally administered address.
    pub const fn is_local(&self) -> bool {
        self.0[0] & 0x02 != 0
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// An EtherType value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EtherType(pub u16);

impl EtherType {
    /// IPv4, the only network layer the simulator's RoCEv2 uses.
    pub const IPV4: EtherType = EtherType(0x0800);
    /// IPv6 (RoCEv2 over IPv6; not modelled).
    pub const IPV6: EtherType = EtherType(0x86dd);
    /// RoCEv1 (not modelled).
    pub const ROCE_V1: EtherType = EtherType(0x8915);
}

fixed_header_view!(Header::Ethernet, "Ethernet II header");

impl<T: AsRef<[u8]>> Packet<T> {
    fn address(&self, range: core::ops::Range<usize>) -> Address {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[range]);
        Address(a)
    }

    /// The destination MAC address.
    pub fn dst_addr(&self) -> Address {
        self.address(field::DST)
    }

    /// The source MAC address.
    pub fn src_addr(&self) -> Address {
        self.address(field::SRC)
    }

    /// The EtherType.
    pub fn ethertype(&self) -> EtherType {
        EtherType(be::u16_at(self.buffer.as_ref(), field::ETHERTYPE.start))
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the destination MAC address.
    pub fn set_dst_addr(&mut self, value: Address) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&value.0);
    }

    /// Sets the source MAC address.
    pub fn set_src_addr(&mut self, value: Address) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&value.0);
    }

    /// Sets the EtherType.
    pub fn set_ethertype(&mut self, value: EtherType) {
        be::set_u16(self.buffer.as_mut(), field::ETHERTYPE.start, value.0)
    }

    /// The bytes after the header, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// The values of an Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source MAC address.
    pub src_addr: Address,
    /// Destination MAC address.
    pub dst_addr: Address,
    /// EtherType.
    pub ethertype: EtherType,
}

impl Repr {
    /// Reads an Ethernet II header.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            ethertype: packet.ethertype(),
        })
    }

    /// The bytes this header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes this header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<()> {
        packet.check_len()?;
        packet.set_dst_addr(self.dst_addr);
        packet.set_src_addr(self.src_addr);
        packet.set_ethertype(self.ethertype);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_header() {
        // Reference §2.4: 020000000002 020000000001 0800.
        let repr = Repr {
            src_addr: Address([2, 0, 0, 0, 0, 1]),
            dst_addr: Address([2, 0, 0, 0, 0, 2]),
            ethertype: EtherType::IPV4,
        };
        let mut bytes = [0u8; HEADER_LEN];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]))
            .unwrap();
        assert_eq!(bytes, [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0]);
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(Repr::parse(&p), Ok(repr));
        assert!(p.payload().is_empty());
        assert_eq!(repr.src_addr.to_string(), "02:00:00:00:00:01");
        assert!(repr.src_addr.is_unicast() && repr.src_addr.is_local());
        assert!(!Address::BROADCAST.is_unicast());
        assert!(Packet::new_checked(&bytes[..13]).is_err());
    }
}

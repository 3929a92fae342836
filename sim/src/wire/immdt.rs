//! ImmDt, the Immediate Data header (4 bytes).
//!
//! Carried by the WITH_IMMEDIATE opcodes. The 32 bits are opaque to the transport; verbs
//! keep them in network order (`__be32 imm_data`), so [`Repr::immediate`] is the value of
//! the four wire bytes read big-endian. IBTA Vol. 1 §9.3 (ImmDt);
//! `shared/reference/rocev2-wire.md` §2.2.

use super::{Header, Result};

mod field {
    use crate::wire::Field;
    pub const IMM: Field = 0..4;
}

/// The size of an ImmDt header.
pub const HEADER_LEN: usize = field::IMM.end;

fixed_header_view!(Header::ImmDt, "ImmDt header");

be_fields! {
    /// The immediate data, the wire bytes read big-endian.
    immediate,
    /// Sets the immediate data (written big-endian).
    set_immediate: u32 = field::IMM;
}

/// The value of an ImmDt header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    /// The immediate data, the wire bytes read big-endian.
    pub immediate: u32,
}

impl Repr {
    /// Reads an ImmDt header.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            immediate: packet.immediate(),
        })
    }

    /// The bytes this header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes this ImmDt header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<()> {
        packet.check_len()?;
        packet.set_immediate(self.immediate);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_and_round_trip() {
        let repr = Repr {
            immediate: 0xdead_beef,
        };
        let mut bytes = [0u8; HEADER_LEN];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]))
            .unwrap();
        assert_eq!(bytes, [0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Ok(repr)
        );
        assert!(Packet::new_checked(&bytes[..3]).is_err());
    }
}

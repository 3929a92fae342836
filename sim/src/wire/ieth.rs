//! IETH, the Invalidate Extended Transport Header (4 bytes).
//!
//! Carried by SEND_LAST_WITH_INVALIDATE and SEND_ONLY_WITH_INVALIDATE: the R_Key the
//! responder invalidates. IBTA Vol. 1 §9.3 (IETH); `shared/reference/rocev2-wire.md`
//! §2.2 (tshark `infiniband.ieth`).

use super::{Header, Result};

mod field {
    use crate::wire::Field;
    pub const RKEY: Field = 0..4;
}

/// The size of an IETH.
pub const HEADER_LEN: usize = field::RKEY.end;

fixed_header_view!(Header::Ieth, "IETH");

be_fields! {
    /// The R_Key to invalidate.
    rkey,
    /// Sets the R_Key to invalidate.
    set_rkey: u32 = field::RKEY;
}

/// The value of an IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    /// The R_Key to invalidate.
    pub rkey: u32,
}

impl Repr {
    /// Reads an IETH.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            rkey: packet.rkey(),
        })
    }

    /// The bytes this header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes this IETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<()> {
        packet.check_len()?;
        packet.set_rkey(self.rkey);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_and_round_trip() {
        let repr = Repr { rkey: 0x0102_0304 };
        let mut bytes = [0u8; HEADER_LEN];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]))
            .unwrap();
        assert_eq!(bytes, [1, 2, 3, 4]);
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Ok(repr)
        );
        assert!(Packet::new_checked(&bytes[..0]).is_err());
    }
}

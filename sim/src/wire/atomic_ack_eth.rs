//! AtomicAckETH, the Atomic Acknowledge Extended Transport Header (8 bytes).
//!
//! Follows the AETH in an ATOMIC_ACKNOWLEDGE and carries the remote value as it was
//! before the atomic operation. IBTA Vol. 1 §9.3 (AtomicAckETH); layout from
//! `shared/reference/rocev2-wire.md` §2.2 (tshark `infiniband.atomicacketh.origremdt`).

use super::{Header, Result};

mod field {
    use crate::wire::Field;
    pub const ORIG: Field = 0..8;
}

/// The size of an AtomicAckETH.
pub const HEADER_LEN: usize = field::ORIG.end;

fixed_header_view!(Header::AtomicAckEth, "AtomicAckETH");

be_fields! {
    /// The original remote value.
    original,
    /// Sets the original remote value.
    set_original: u64 = field::ORIG;
}

/// The value of an AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    /// The remote value before the operation.
    pub original: u64,
}

impl Repr {
    /// Reads an AtomicAckETH.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            original: packet.original(),
        })
    }

    /// The bytes this header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes this AtomicAckETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<()> {
        packet.check_len()?;
        packet.set_original(self.original);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_and_round_trip() {
        let repr = Repr {
            original: 0x0123_4567_89ab_cdef,
        };
        let mut bytes = [0u8; HEADER_LEN];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]))
            .unwrap();
        assert_eq!(bytes, [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]);
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Ok(repr)
        );
        assert!(Packet::new_checked(&bytes[..7]).is_err());
    }
}

//! AtomicETH, the Atomic Extended Transport Header (28 bytes).
//!
//! Carried by COMPARE_SWAP and FETCH_ADD. IBTA Vol. 1 §9.3 (AtomicETH); layout from
//! `shared/reference/rocev2-wire.md` §2.2 (rxe `rxe_hdr.h`, tshark
//! `infiniband.atomiceth.*`):
//!
//! | bytes | field |
//! |---|---|
//! | 0–7 | virtual address (8-byte aligned) |
//! | 8–11 | R_Key |
//! | 12–19 | swap value (CmpSwap) or add value (FetchAdd) |
//! | 20–27 | compare value (CmpSwap; 0 for FetchAdd) |

use super::{Header, Result};

mod field {
    use crate::wire::Field;
    pub const VA: Field = 0..8;
    pub const RKEY: Field = 8..12;
    pub const SWAP_ADD: Field = 12..20;
    pub const COMPARE: Field = 20..28;
}

/// The size of an AtomicETH.
pub const HEADER_LEN: usize = field::COMPARE.end;

fixed_header_view!(Header::AtomicEth, "AtomicETH");

be_fields! {
    /// The remote virtual address of the 8-byte operand.
    virtual_address,
    /// Sets the remote virtual address.
    set_virtual_address: u64 = field::VA;

    /// The R_Key of the remote memory region.
    rkey,
    /// Sets the R_Key.
    set_rkey: u32 = field::RKEY;

    /// The swap value (compare and swap) or the value to add (fetch and add).
    swap_add,
    /// Sets the swap or add value.
    set_swap_add: u64 = field::SWAP_ADD;

    /// The compare value (compare and swap).
    compare,
    /// Sets the compare value.
    set_compare: u64 = field::COMPARE;
}

/// The values of an AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    /// Remote virtual address (the responder checks its 8-byte alignment).
    pub virtual_address: u64,
    /// R_Key.
    pub rkey: u32,
    /// Swap value (compare and swap) or value to add (fetch and add).
    pub swap_add: u64,
    /// Compare value (compare and swap; 0 for fetch and add).
    pub compare: u64,
}

impl Repr {
    /// Reads an AtomicETH.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            virtual_address: packet.virtual_address(),
            rkey: packet.rkey(),
            swap_add: packet.swap_add(),
            compare: packet.compare(),
        })
    }

    /// The bytes this header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes this AtomicETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<()> {
        packet.check_len()?;
        packet.set_virtual_address(self.virtual_address);
        packet.set_rkey(self.rkey);
        packet.set_swap_add(self.swap_add);
        packet.set_compare(self.compare);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_and_round_trip() {
        let repr = Repr {
            virtual_address: 0x1000,
            rkey: 0xabcd,
            swap_add: 0x1111_2222_3333_4444,
            compare: 0x5555_6666_7777_8888,
        };
        let mut bytes = [0u8; HEADER_LEN];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]))
            .unwrap();
        assert_eq!(&bytes[..12], &[0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0xab, 0xcd]);
        assert_eq!(&bytes[12..20], &0x1111_2222_3333_4444u64.to_be_bytes());
        assert_eq!(&bytes[20..], &0x5555_6666_7777_8888u64.to_be_bytes());
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Ok(repr)
        );
        assert!(Packet::new_checked(&bytes[..27]).is_err());
    }
}

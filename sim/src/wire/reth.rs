//! RETH, the RDMA Extended Transport Header (16 bytes).
//!
//! Carried by RDMA WRITE FIRST/ONLY and RDMA READ requests. IBTA Vol. 1 §9.3 (RETH);
//! layout from `shared/reference/rocev2-wire.md` §2.2 (rxe `rxe_hdr.h`, tshark
//! `infiniband.reth.*`):
//!
//! | bytes | field |
//! |---|---|
//! | 0–7 | virtual address |
//! | 8–11 | R_Key |
//! | 12–15 | DMA length: the length of the whole message, not of this packet |

use super::{Header, Result};

mod field {
    use crate::wire::Field;
    pub const VA: Field = 0..8;
    pub const RKEY: Field = 8..12;
    pub const DMA_LEN: Field = 12..16;
}

/// The size of a RETH.
pub const HEADER_LEN: usize = field::DMA_LEN.end;

fixed_header_view!(Header::Reth, "RETH");

be_fields! {
    /// The remote virtual address.
    virtual_address,
    /// Sets the remote virtual address.
    set_virtual_address: u64 = field::VA;

    /// The R_Key of the remote memory region.
    rkey,
    /// Sets the R_Key.
    set_rkey: u32 = field::RKEY;

    /// The length of the whole message (or READ) in bytes.
    dma_length,
    /// Sets the DMA length.
    set_dma_length: u32 = field::DMA_LEN;
}

/// The values of a RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    /// Remote virtual address.
    pub virtual_address: u64,
    /// R_Key.
    pub rkey: u32,
    /// Length of the whole message in bytes.
    pub dma_length: u32,
}

impl Repr {
    /// Reads a RETH.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            virtual_address: packet.virtual_address(),
            rkey: packet.rkey(),
            dma_length: packet.dma_length(),
        })
    }

    /// The bytes this header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes this RETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<()> {
        packet.check_len()?;
        packet.set_virtual_address(self.virtual_address);
        packet.set_rkey(self.rkey);
        packet.set_dma_length(self.dma_length);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Error;

    #[test]
    fn layout_and_round_trip() {
        let repr = Repr {
            virtual_address: 0x0102_0304_0506_0708,
            rkey: 0x1122_3344,
            dma_length: 0x0000_2710,
        };
        let mut bytes = [0u8; HEADER_LEN];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]))
            .unwrap();
        assert_eq!(
            bytes,
            [1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0, 0, 0x27, 0x10]
        );
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Ok(repr)
        );
    }

    #[test]
    fn short_buffers_are_typed_errors() {
        assert_eq!(
            Packet::new_checked(&[0u8; 15][..]).unwrap_err(),
            Error::Truncated {
                header: Header::Reth,
                need: 16,
                have: 15
            }
        );
        let mut short = [0u8; 3];
        assert!(Repr::default()
            .emit(&mut Packet::new_unchecked(&mut short[..]))
            .is_err());
    }
}

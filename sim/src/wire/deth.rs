//! DETH, the Datagram Extended Transport Header (8 bytes).
//!
//! Carried by every UD packet. IBTA Vol. 1 §9.3 (DETH); layout from
//! `shared/reference/rocev2-wire.md` §2.2 (rxe `rxe_hdr.h`, tshark `infiniband.deth.*`):
//!
//! | bytes | field |
//! |---|---|
//! | 0–3 | Q_Key |
//! | 4 | reserved |
//! | 5–7 | source QP (24 bits) |

use super::{check_u24, Header, Result};

mod field {
    use crate::wire::Field;
    pub const QKEY: Field = 0..4;
    pub const RESERVED: usize = 4;
    pub const SRC_QP: Field = 5..8;
}

/// The size of a DETH.
pub const HEADER_LEN: usize = field::SRC_QP.end;

/// The Q_Key of the GSI QP (QP1), which carries RDMA-CM MADs (reference §1.1).
pub const GSI_QKEY: u32 = 0x8001_0000;

fixed_header_view!(Header::Deth, "DETH");

be_fields! {
    /// The Q_Key.
    qkey,
    /// Sets the Q_Key.
    set_qkey: u32 = field::QKEY;

    /// The sender's QP number (24 bits).
    src_qp,
    /// Sets the source QP number (its low 24 bits).
    set_src_qp: u24 = field::SRC_QP;
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The reserved byte.
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[field::RESERVED]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the reserved byte.
    pub fn set_reserved(&mut self, value: u8) {
        self.buffer.as_mut()[field::RESERVED] = value;
    }
}

/// The values of a DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    /// Q_Key; must equal the destination QP's Q_Key.
    pub qkey: u32,
    /// Source QP number (24 bits).
    pub src_qp: u32,
}

impl Repr {
    /// Reads a DETH (the reserved byte is ignored).
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            qkey: packet.qkey(),
            src_qp: packet.src_qp(),
        })
    }

    /// The bytes this header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes this DETH; the source QP must fit 24 bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<()> {
        packet.check_len()?;
        check_u24("DETH.SrcQP", self.src_qp)?;
        packet.set_qkey(self.qkey);
        packet.set_reserved(0);
        packet.set_src_qp(self.src_qp);
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
            qkey: GSI_QKEY,
            src_qp: 0x12_3456,
        };
        let mut bytes = [0xffu8; HEADER_LEN];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]))
            .unwrap();
        assert_eq!(bytes, [0x80, 0x01, 0x00, 0x00, 0x00, 0x12, 0x34, 0x56]);
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Ok(repr)
        );
    }

    #[test]
    fn source_qp_is_24_bits() {
        let mut bytes = [0u8; HEADER_LEN];
        let repr = Repr {
            qkey: 1,
            src_qp: 0x100_0000,
        };
        assert_eq!(
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..])),
            Err(Error::FieldRange {
                field: "DETH.SrcQP",
                value: 0x100_0000
            })
        );
    }
}

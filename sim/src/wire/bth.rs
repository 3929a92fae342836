//! BTH, the InfiniBand Base Transport Header (12 bytes), the first header of every
//! RoCEv2 transport packet.
//!
//! IBTA Vol. 1 §9.2; layout from `shared/reference/rocev2-wire.md` §2.1 (rxe
//! `rxe_hdr.h` masks, tshark `infiniband.bth.*`):
//!
//! | byte | bits | field |
//! |---|---|---|
//! | 0 | 7:0 | OpCode |
//! | 1 | 7 | SE, solicited event |
//! | 1 | 6 | M, MigReq |
//! | 1 | 5:4 | PadCnt |
//! | 1 | 3:0 | TVer, must be 0 |
//! | 2–3 | | P_Key |
//! | 4 | 7 | FECN (RoCEv2; the IB "resv8a" byte, masked in the ICRC) |
//! | 4 | 6 | BECN |
//! | 4 | 5:0 | reserved |
//! | 5–7 | | DestQP |
//! | 8 | 7 | AckReq |
//! | 8 | 6:0 | reserved |
//! | 9–11 | | PSN |

use super::opcode::Opcode;
use super::psn::Psn;
use super::{be, check_u24, Error, Header, Result};

mod field {
    use crate::wire::Field;
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: Field = 2..4;
    pub const RESV8A: usize = 4;
    pub const DEST_QP: Field = 5..8;
    pub const ACK: usize = 8;
    pub const PSN: Field = 9..12;
}

/// The size of a BTH.
pub const HEADER_LEN: usize = field::PSN.end;

/// The default partition key, full member (rxe always sends it).
pub const DEFAULT_PKEY: u16 = 0xffff;

/// The byte of the BTH that the ICRC masks (FECN, BECN, reserved).
pub const ICRC_MASKED_BYTE: usize = field::RESV8A;

const SE: u8 = 0x80;
const MIG_REQ: u8 = 0x40;
const PAD_SHIFT: u8 = 4;
const PAD_MASK: u8 = 0x30;
const TVER_MASK: u8 = 0x0f;
const FECN: u8 = 0x80;
const BECN: u8 = 0x40;
const ACK_REQ: u8 = 0x80;

fixed_header_view!(Header::Bth, "BTH");

impl<T: AsRef<[u8]>> Packet<T> {
    fn byte(&self, at: usize) -> u8 {
        self.buffer.as_ref()[at]
    }

    /// The raw opcode byte.
    pub fn opcode_raw(&self) -> u8 {
        self.byte(field::OPCODE)
    }

    /// The opcode, or [`Error::Opcode`] if it is not one of the table.
    pub fn opcode(&self) -> Result<Opcode> {
        Opcode::try_from(self.opcode_raw())
    }

    /// The solicited event bit.
    pub fn solicited(&self) -> bool {
        self.byte(field::FLAGS) & SE != 0
    }

    /// The MigReq bit.
    pub fn mig_req(&self) -> bool {
        self.byte(field::FLAGS) & MIG_REQ != 0
    }

    /// The pad count, 0–3.
    pub fn pad_count(&self) -> u8 {
        (self.byte(field::FLAGS) & PAD_MASK) >> PAD_SHIFT
    }

    /// The transport header version.
    pub fn transport_version(&self) -> u8 {
        self.byte(field::FLAGS) & TVER_MASK
    }

    /// The partition key.
    pub fn pkey(&self) -> u16 {
        be::u16_at(self.buffer.as_ref(), field::PKEY.start)
    }

    /// The FECN bit.
    pub fn fecn(&self) -> bool {
        self.byte(field::RESV8A) & FECN != 0
    }

    /// The BECN bit.
    pub fn becn(&self) -> bool {
        self.byte(field::RESV8A) & BECN != 0
    }

    /// The whole byte 4 (FECN, BECN and the six reserved bits).
    pub fn resv8a(&self) -> u8 {
        self.byte(field::RESV8A)
    }

    /// The destination QP number (24 bits).
    pub fn dest_qp(&self) -> u32 {
        be::u24_at(self.buffer.as_ref(), field::DEST_QP.start)
    }

    /// The AckReq bit.
    pub fn ack_req(&self) -> bool {
        self.byte(field::ACK) & ACK_REQ != 0
    }

    /// The seven reserved bits after AckReq.
    pub fn resv7(&self) -> u8 {
        self.byte(field::ACK) & !ACK_REQ
    }

    /// The packet sequence number.
    pub fn psn(&self) -> Psn {
        Psn::new(be::u24_at(self.buffer.as_ref(), field::PSN.start))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_bits(&mut self, at: usize, mask: u8, value: u8) {
        let b = &mut self.buffer.as_mut()[at];
        *b = (*b & !mask) | (value & mask);
    }

    fn set_flag(&mut self, at: usize, bit: u8, on: bool) {
        self.set_bits(at, bit, if on { bit } else { 0 });
    }

    /// Sets the opcode byte.
    pub fn set_opcode_raw(&mut self, value: u8) {
        self.buffer.as_mut()[field::OPCODE] = value;
    }

    /// Sets the opcode.
    pub fn set_opcode(&mut self, value: Opcode) {
        self.set_opcode_raw(value.value());
    }

    /// Sets the solicited event bit.
    pub fn set_solicited(&mut self, on: bool) {
        self.set_flag(field::FLAGS, SE, on);
    }

    /// Sets the MigReq bit.
    pub fn set_mig_req(&mut self, on: bool) {
        self.set_flag(field::FLAGS, MIG_REQ, on);
    }

    /// Sets the pad count (its low two bits).
    pub fn set_pad_count(&mut self, value: u8) {
        self.set_bits(field::FLAGS, PAD_MASK, value << PAD_SHIFT);
    }

    /// Sets the transport header version (its low four bits).
    pub fn set_transport_version(&mut self, value: u8) {
        self.set_bits(field::FLAGS, TVER_MASK, value);
    }

    /// Sets the partition key.
    pub fn set_pkey(&mut self, value: u16) {
        be::set_u16(self.buffer.as_mut(), field::PKEY.start, value)
    }

    /// Sets the FECN bit.
    pub fn set_fecn(&mut self, on: bool) {
        self.set_flag(field::RESV8A, FECN, on);
    }

    /// Sets the BECN bit.
    pub fn set_becn(&mut self, on: bool) {
        self.set_flag(field::RESV8A, BECN, on);
    }

    /// Sets the whole byte 4.
    pub fn set_resv8a(&mut self, value: u8) {
        self.buffer.as_mut()[field::RESV8A] = value;
    }

    /// Sets the destination QP number (its low 24 bits).
    pub fn set_dest_qp(&mut self, value: u32) {
        be::set_u24(self.buffer.as_mut(), field::DEST_QP.start, value)
    }

    /// Sets the AckReq bit.
    pub fn set_ack_req(&mut self, on: bool) {
        self.set_flag(field::ACK, ACK_REQ, on);
    }

    /// Sets the seven reserved bits after AckReq.
    pub fn set_resv7(&mut self, value: u8) {
        self.set_bits(field::ACK, !ACK_REQ, value);
    }

    /// Sets the packet sequence number.
    pub fn set_psn(&mut self, value: Psn) {
        be::set_u24(self.buffer.as_mut(), field::PSN.start, value.value())
    }
}

/// The values of a BTH. The pad count follows from the payload length and is an
/// argument of [`Repr::emit`]; the transport version is always 0 and the reserved bits
/// are written as 0 and ignored on receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// The opcode.
    pub opcode: Opcode,
    /// Solicited event: set on the last packet of a SEND or WRITE_WITH_IMM posted with
    /// IBV_SEND_SOLICITED.
    pub solicited: bool,
    /// MigReq (path migration); 0 in normal operation.
    pub mig_req: bool,
    /// The partition key ([`DEFAULT_PKEY`] normally).
    pub pkey: u16,
    /// Forward explicit congestion notification (RoCEv2).
    pub fecn: bool,
    /// Backward explicit congestion notification (RoCEv2; set in CNPs).
    pub becn: bool,
    /// The destination QP number (24 bits).
    pub dest_qp: u32,
    /// Asks the responder for an acknowledgement.
    pub ack_req: bool,
    /// The packet sequence number.
    pub psn: Psn,
}

impl Repr {
    /// A BTH with the given opcode, destination QP and PSN, the default P_Key and every
    /// flag clear.
    pub const fn new(opcode: Opcode, dest_qp: u32, psn: Psn) -> Repr {
        Repr {
            opcode,
            solicited: false,
            mig_req: false,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }

    /// Reads a BTH: the transport version must be 0 and the opcode one of the table.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        if packet.transport_version() != 0 {
            return Err(Error::TransportVersion(packet.transport_version()));
        }
        Ok(Repr {
            opcode: packet.opcode()?,
            solicited: packet.solicited(),
            mig_req: packet.mig_req(),
            pkey: packet.pkey(),
            fecn: packet.fecn(),
            becn: packet.becn(),
            dest_qp: packet.dest_qp(),
            ack_req: packet.ack_req(),
            psn: packet.psn(),
        })
    }

    /// The bytes this header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes this BTH with the given pad count (0–3); the destination QP must fit
    /// 24 bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
        pad_count: u8,
    ) -> Result<()> {
        packet.check_len()?;
        check_u24("BTH.DestQP", self.dest_qp)?;
        if pad_count > 3 {
            return Err(Error::FieldRange {
                field: "BTH.PadCnt",
                value: u64::from(pad_count),
            });
        }
        packet.set_opcode(self.opcode);
        let flags = if self.solicited { SE } else { 0 }
            | if self.mig_req { MIG_REQ } else { 0 }
            | pad_count << PAD_SHIFT;
        packet.buffer.as_mut()[field::FLAGS] = flags;
        packet.set_pkey(self.pkey);
        packet.set_resv8a(if self.fecn { FECN } else { 0 } | if self.becn { BECN } else { 0 });
        packet.set_dest_qp(self.dest_qp);
        packet.buffer.as_mut()[field::ACK] = if self.ack_req { ACK_REQ } else { 0 };
        packet.set_psn(self.psn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The BTH of the worked example of reference §2.4: SEND_ONLY, pad 3, P_Key 0xFFFF,
    /// DestQP 0x12, AckReq, PSN 0.
    const REFERENCE: [u8; 12] = [
        0x04, 0x30, 0xff, 0xff, 0x00, 0x00, 0x00, 0x12, 0x80, 0, 0, 0,
    ];

    #[test]
    fn reference_bth() {
        let mut repr = Repr::new(Opcode::RcSendOnly, 0x12, Psn::new(0));
        repr.ack_req = true;
        let mut bytes = [0xaau8; HEADER_LEN];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]), 3)
            .unwrap();
        assert_eq!(bytes, REFERENCE);
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.pad_count(), 3);
        assert_eq!(Repr::parse(&p), Ok(repr));
    }

    #[test]
    fn every_bit_lands_where_the_reference_puts_it() {
        let repr = Repr {
            opcode: Opcode::UdSendOnlyWithImmediate,
            solicited: true,
            mig_req: true,
            pkey: 0x8001,
            fecn: true,
            becn: true,
            dest_qp: 0xab_cdef,
            ack_req: true,
            psn: Psn::new(0x12_3456),
        };
        let mut bytes = [0u8; HEADER_LEN];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]), 2)
            .unwrap();
        assert_eq!(
            bytes,
            [0x65, 0xe0, 0x80, 0x01, 0xc0, 0xab, 0xcd, 0xef, 0x80, 0x12, 0x34, 0x56]
        );
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert!(p.solicited() && p.mig_req() && p.fecn() && p.becn() && p.ack_req());
        assert_eq!((p.pad_count(), p.transport_version(), p.resv7()), (2, 0, 0));
        assert_eq!(Repr::parse(&p), Ok(repr));
    }

    #[test]
    fn setters_touch_only_their_bits() {
        let mut bytes = [0u8; HEADER_LEN];
        let mut p = Packet::new_unchecked(&mut bytes[..]);
        p.set_transport_version(0xf);
        p.set_pad_count(3);
        p.set_solicited(true);
        p.set_solicited(false);
        p.set_resv7(0x7f);
        p.set_ack_req(true);
        p.set_becn(true);
        p.set_dest_qp(0xffff_ffff);
        p.set_psn(Psn::new(0xff_ffff));
        assert_eq!(
            bytes,
            [0, 0x3f, 0, 0, 0x40, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
        );
    }

    #[test]
    fn invalid_bths_are_typed_errors() {
        let mut bytes = REFERENCE;
        bytes[1] |= 0x01;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&bytes[..])),
            Err(Error::TransportVersion(1))
        );
        bytes = REFERENCE;
        bytes[0] = 0x15;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&bytes[..])),
            Err(Error::Opcode(0x15))
        );
        assert_eq!(
            Packet::new_checked(&bytes[..11]).unwrap_err(),
            Error::Truncated {
                header: Header::Bth,
                need: 12,
                have: 11
            }
        );
        let repr = Repr::new(Opcode::RcSendOnly, 1 << 24, Psn::new(0));
        let mut out = [0u8; HEADER_LEN];
        assert!(repr
            .emit(&mut Packet::new_unchecked(&mut out[..]), 0)
            .is_err());
        let repr = Repr::new(Opcode::RcSendOnly, 1, Psn::new(0));
        assert!(repr
            .emit(&mut Packet::new_unchecked(&mut out[..]), 4)
            .is_err());
    }
}

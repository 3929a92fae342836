//! AETH, the ACK Extended Transport Header (4 bytes).
//!
//! Carried by ACKNOWLEDGE (ACK, RNR NAK, NAK), ATOMIC_ACKNOWLEDGE and the READ responses
//! FIRST, LAST and ONLY. IBTA Vol. 1 §9.3 (AETH) and §9.7 (ACK/NAK); layout and
//! encodings from `shared/reference/rocev2-wire.md` §2.2, §4.3–4.5 and §7.2 (rxe
//! `rxe_hdr.h`, rdmavt tables, tshark decode):
//!
//! | bytes | field |
//! |---|---|
//! | 0 | syndrome: bit 7 reserved, bits 6:5 type, bits 4:0 value |
//! | 1–3 | MSN, the responder's 24-bit message sequence number |
//!
//! | syndrome | meaning |
//! |---|---|
//! | 0x00–0x1F | ACK; low bits = credit count code (0x1F: no end-to-end flow control) |
//! | 0x20–0x3F | RNR NAK; low bits = RNR timer code |
//! | 0x40–0x5F | reserved |
//! | 0x60–0x64 | NAK: PSN sequence error, invalid request, remote access error, remote operational error, invalid RD request |
//! | 0x65–0x7F | reserved NAK codes |

use core::fmt;

use super::{check_u24, Error, Header, Result};

mod field {
    use crate::wire::Field;
    pub const SYNDROME: usize = 0;
    pub const MSN: Field = 1..4;
}

/// The size of an AETH.
pub const HEADER_LEN: usize = field::MSN.end;

/// The ACK credit code meaning "no flow control" (invalid credit count); rxe always
/// sends it (`AETH_ACK_UNLIMITED`).
pub const CREDITS_UNLIMITED: u8 = 0x1f;

/// The largest 5-bit credit or RNR timer code.
pub const MAX_CODE: u8 = 0x1f;

const TYPE_MASK: u8 = 0x60;
const VALUE_MASK: u8 = 0x1f;
const TYPE_ACK: u8 = 0x00;
const TYPE_RNR_NAK: u8 = 0x20;
const TYPE_NAK: u8 = 0x60;

/// The NAK codes of syndromes 0x60–0x64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NakCode {
    /// PSN sequence error; the packet's PSN is the responder's expected PSN.
    PsnSequenceError = 0,
    /// Invalid request (completes with IBV_WC_REM_INV_REQ_ERR).
    InvalidRequest = 1,
    /// Remote access error (IBV_WC_REM_ACCESS_ERR).
    RemoteAccessError = 2,
    /// Remote operational error (IBV_WC_REM_OP_ERR).
    RemoteOperationalError = 3,
    /// Invalid RD request (RD only; IBV_WC_REM_INV_RD_REQ_ERR).
    InvalidRdRequest = 4,
}

impl NakCode {
    /// The NAK code of the low five syndrome bits, if it is not reserved.
    pub const fn from_u8(code: u8) -> Option<NakCode> {
        match code {
            0 => Some(NakCode::PsnSequenceError),
            1 => Some(NakCode::InvalidRequest),
            2 => Some(NakCode::RemoteAccessError),
            3 => Some(NakCode::RemoteOperationalError),
            4 => Some(NakCode::InvalidRdRequest),
            _ => None,
        }
    }
}

impl fmt::Display for NakCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Wireshark's names.
        f.write_str(match self {
            NakCode::PsnSequenceError => "PSN Sequence Error",
            NakCode::InvalidRequest => "Invalid Request",
            NakCode::RemoteAccessError => "Remote Access Error",
            NakCode::RemoteOperationalError => "Remote Operational Error",
            NakCode::InvalidRdRequest => "Invalid RD Request",
        })
    }
}

/// A decoded AETH syndrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledgement with a credit count code (0–31, see [`credit_count`]).
    Ack {
        /// Credit count code; [`CREDITS_UNLIMITED`] for no flow control.
        credits: u8,
    },
    /// Receiver not ready: retry after the time of an RNR timer code (0–31, see
    /// [`rnr_timer_micros`]).
    RnrNak {
        /// RNR timer code.
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
}

impl Syndrome {
    /// An ACK without flow control, as rxe sends it.
    pub const ACK: Syndrome = Syndrome::Ack {
        credits: CREDITS_UNLIMITED,
    };

    /// Decodes a syndrome byte. Bit 7 is reserved and ignored; the reserved type 0x40
    /// and the reserved NAK codes are [`Error::Syndrome`].
    pub const fn from_u8(byte: u8) -> Result<Syndrome> {
        let value = byte & VALUE_MASK;
        match byte & TYPE_MASK {
            TYPE_ACK => Ok(Syndrome::Ack { credits: value }),
            TYPE_RNR_NAK => Ok(Syndrome::RnrNak { timer: value }),
            TYPE_NAK => match NakCode::from_u8(value) {
                Some(code) => Ok(Syndrome::Nak(code)),
                None => Err(Error::Syndrome(byte)),
            },
            _ => Err(Error::Syndrome(byte)),
        }
    }

    /// Encodes the syndrome byte, or [`Error::FieldRange`] for a credit or timer code
    /// above 31.
    pub const fn to_u8(self) -> Result<u8> {
        match self {
            Syndrome::Ack { credits } if credits <= MAX_CODE => Ok(TYPE_ACK | credits),
            Syndrome::Ack { credits } => Err(Error::FieldRange {
                field: "AETH credit count",
                value: credits as u64,
            }),
            Syndrome::RnrNak { timer } if timer <= MAX_CODE => Ok(TYPE_RNR_NAK | timer),
            Syndrome::RnrNak { timer } => Err(Error::FieldRange {
                field: "AETH RNR timer",
                value: timer as u64,
            }),
            Syndrome::Nak(code) => Ok(TYPE_NAK | code as u8),
        }
    }

    /// Whether this is an ACK.
    pub const fn is_ack(self) -> bool {
        matches!(self, Syndrome::Ack { .. })
    }
}

/// The number of receive WQEs an ACK credit code advertises (rdmavt's credit table,
/// reference §4.4), or `None` for [`CREDITS_UNLIMITED`] and codes above 31.
pub const fn credit_count(code: u8) -> Option<u32> {
    const TABLE: [u32; 31] = [
        0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
        2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
    ];
    if (code as usize) < TABLE.len() {
        Some(TABLE[code as usize])
    } else {
        None
    }
}

/// The wait in microseconds an RNR timer code asks for (rdmavt `ib_rvt_rnr_table`,
/// reference §4.3; code 0 is the longest, 655.36 ms), or `None` above 31.
pub const fn rnr_timer_micros(code: u8) -> Option<u32> {
    const TABLE: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
        5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122_880, 163_840, 245_760,
        327_680, 491_520,
    ];
    if (code as usize) < TABLE.len() {
        Some(TABLE[code as usize])
    } else {
        None
    }
}

fixed_header_view!(Header::Aeth, "AETH");

impl<T: AsRef<[u8]>> Packet<T> {
    /// The raw syndrome byte.
    pub fn syndrome_raw(&self) -> u8 {
        self.buffer.as_ref()[field::SYNDROME]
    }

    /// The decoded syndrome.
    pub fn syndrome(&self) -> Result<Syndrome> {
        Syndrome::from_u8(self.syndrome_raw())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the raw syndrome byte.
    pub fn set_syndrome_raw(&mut self, value: u8) {
        self.buffer.as_mut()[field::SYNDROME] = value;
    }
}

be_fields! {
    /// The message sequence number (24 bits).
    msn,
    /// Sets the message sequence number (its low 24 bits).
    set_msn: u24 = field::MSN;
}

/// The values of an AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// ACK, RNR NAK or NAK.
    pub syndrome: Syndrome,
    /// The responder's message sequence number (24 bits).
    pub msn: u32,
}

impl Repr {
    /// Reads an AETH; reserved syndromes are [`Error::Syndrome`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            syndrome: packet.syndrome()?,
            msn: packet.msn(),
        })
    }

    /// The bytes this header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes this AETH; codes must fit 5 bits and the MSN 24 bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<()> {
        packet.check_len()?;
        let syndrome = self.syndrome.to_u8()?;
        check_u24("AETH.MSN", self.msn)?;
        packet.set_syndrome_raw(syndrome);
        packet.set_msn(self.msn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn emit(repr: Repr) -> [u8; HEADER_LEN] {
        let mut bytes = [0u8; HEADER_LEN];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]))
            .unwrap();
        bytes
    }

    /// The decodes of reference §7.2 (tshark 4.0.17).
    #[test]
    fn reference_syndromes() {
        // "Syndrome: 31, Ack / Credit Count: 31 / Message Sequence Number: 4"
        let ack = Repr {
            syndrome: Syndrome::ACK,
            msn: 4,
        };
        assert_eq!(emit(ack), [31, 0, 0, 4]);
        // "Syndrome: 46, RNR Nak / Timer: 1.28 ms (14)"
        let rnr = Syndrome::RnrNak { timer: 14 };
        assert_eq!(rnr.to_u8(), Ok(46));
        assert_eq!(rnr_timer_micros(14), Some(1280));
        // "Syndrome: 96, Nak / Error Code: PSN Sequence Error (0)"
        assert_eq!(Syndrome::Nak(NakCode::PsnSequenceError).to_u8(), Ok(96));
        assert_eq!(NakCode::PsnSequenceError.to_string(), "PSN Sequence Error");
        // The other NAK codes.
        for (code, byte, name) in [
            (NakCode::InvalidRequest, 0x61, "Invalid Request"),
            (NakCode::RemoteAccessError, 0x62, "Remote Access Error"),
            (
                NakCode::RemoteOperationalError,
                0x63,
                "Remote Operational Error",
            ),
            (NakCode::InvalidRdRequest, 0x64, "Invalid RD Request"),
        ] {
            assert_eq!(Syndrome::Nak(code).to_u8(), Ok(byte));
            assert_eq!(Syndrome::from_u8(byte), Ok(Syndrome::Nak(code)));
            assert_eq!(code.to_string(), name);
        }
    }

    #[test]
    fn every_syndrome_byte_decodes_or_is_reserved() {
        for byte in 0..=255u8 {
            let low = byte & 0x7f;
            match Syndrome::from_u8(byte) {
                Ok(s) => {
                    // Bit 7 is reserved and ignored; the encoding is otherwise exact.
                    assert_eq!(s.to_u8(), Ok(low));
                    assert!(low < 0x40 || (0x60..=0x64).contains(&low));
                }
                Err(e) => {
                    assert_eq!(e, Error::Syndrome(byte));
                    assert!((0x40..0x60).contains(&low) || low > 0x64);
                }
            }
        }
    }

    #[test]
    fn msn_and_codes_are_range_checked() {
        let mut bytes = [0u8; HEADER_LEN];
        let mut p = Packet::new_unchecked(&mut bytes[..]);
        let too_big_msn = Repr {
            syndrome: Syndrome::ACK,
            msn: 1 << 24,
        };
        assert!(matches!(
            too_big_msn.emit(&mut p),
            Err(Error::FieldRange { .. })
        ));
        let too_big_timer = Repr {
            syndrome: Syndrome::RnrNak { timer: 32 },
            msn: 0,
        };
        assert!(matches!(
            too_big_timer.emit(&mut p),
            Err(Error::FieldRange { .. })
        ));
        let nak = Repr {
            syndrome: Syndrome::Nak(NakCode::RemoteAccessError),
            msn: 0xab_cdef,
        };
        nak.emit(&mut p).unwrap();
        assert_eq!(bytes, [0x62, 0xab, 0xcd, 0xef]);
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Ok(nak)
        );
    }

    #[test]
    fn tables() {
        assert_eq!(credit_count(0), Some(0));
        assert_eq!(credit_count(5), Some(6));
        assert_eq!(credit_count(30), Some(32768));
        assert_eq!(credit_count(CREDITS_UNLIMITED), None);
        assert_eq!(rnr_timer_micros(0), Some(655_360));
        assert_eq!(rnr_timer_micros(1), Some(10));
        assert_eq!(rnr_timer_micros(25), Some(61440));
        assert_eq!(rnr_timer_micros(31), Some(491_520));
        assert_eq!(rnr_timer_micros(32), None);
    }
}

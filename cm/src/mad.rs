//! The MAD common header (IBTA Vol. 1 13.4.3; Linux `include/rdma/ib_mad.h`) and the
//! framing of CM MADs on the GSI QP.

use crate::Error;

/// Bytes of a MAD.
pub const MAD_LEN: usize = 256;
/// Bytes of the common header.
pub const HEADER_LEN: usize = 24;
/// Bytes of a CM attribute (the MAD after its header).
pub const DATA_LEN: usize = MAD_LEN - HEADER_LEN;

/// `BaseVersion` of every MAD.
pub const BASE_VERSION: u8 = 1;
/// `MgmtClass` of the Communication Manager (`IB_MGMT_CLASS_CM`).
pub const MGMT_CLASS_CM: u8 = 0x07;
/// `ClassVersion` of the CM that Linux's `ib_cm` registers (`IB_CM_CLASS_VERSION`).
pub const CM_CLASS_VERSION: u8 = 2;
/// `Method` Send: every CM message is sent with it (Linux `cm_format_mad_hdr`).
pub const METHOD_SEND: u8 = 0x03;

/// The GSI QP's number.
pub const GSI_QPN: u32 = 1;
/// The Q_Key of QP1 (`IB_QP1_QKEY`): every MAD to or from QP1 carries it.
pub const QP1_QKEY: u32 = 0x8001_0000;
/// The default P_Key, which RoCE uses for CM MADs.
pub const DEFAULT_PKEY: u16 = 0xffff;

/// The common header of a MAD.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// `BaseVersion` (1).
    pub base_version: u8,
    /// `MgmtClass` (0x07 for the CM).
    pub mgmt_class: u8,
    /// `ClassVersion` (2 for the CM).
    pub class_version: u8,
    /// `Method` (Send for the CM).
    pub method: u8,
    /// `Status`.
    pub status: u16,
    /// `ClassSpecific`.
    pub class_specific: u16,
    /// `TransactionID`.
    pub tid: u64,
    /// `AttributeID`: which CM message.
    pub attr_id: u16,
    /// `AttributeModifier`.
    pub attr_mod: u32,
}

impl Header {
    /// The header of a CM message `attr_id` with transaction ID `tid`.
    pub const fn cm(attr_id: u16, tid: u64) -> Header {
        Header {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id,
            attr_mod: 0,
        }
    }

    /// Reads the header of the MAD `mad`; `mad` must be a whole MAD (256 bytes).
    pub fn parse(mad: &[u8]) -> Result<Header, Error> {
        if mad.len() < MAD_LEN {
            return Err(Error::Truncated {
                what: "MAD",
                len: mad.len(),
                need: MAD_LEN,
            });
        }
        let be16 = |o: usize| u16::from_be_bytes([mad[o], mad[o + 1]]);
        let mut tid = [0u8; 8];
        tid.copy_from_slice(&mad[8..16]);
        Ok(Header {
            base_version: mad[0],
            mgmt_class: mad[1],
            class_version: mad[2],
            method: mad[3],
            status: be16(4),
            class_specific: be16(6),
            tid: u64::from_be_bytes(tid),
            attr_id: be16(16),
            attr_mod: u32::from_be_bytes([mad[20], mad[21], mad[22], mad[23]]),
        })
    }

    /// Whether this is a CM MAD this implementation speaks (base version 1, class
    /// 0x07 version 2, method Send), or the reason it is not.
    pub fn check_cm(&self) -> Result<(), Error> {
        if self.base_version != BASE_VERSION {
            return Err(Error::BaseVersion(self.base_version));
        }
        if self.mgmt_class != MGMT_CLASS_CM {
            return Err(Error::NotCm(self.mgmt_class));
        }
        if self.class_version != CM_CLASS_VERSION {
            return Err(Error::ClassVersion(self.class_version));
        }
        if self.method != METHOD_SEND {
            return Err(Error::Method(self.method));
        }
        Ok(())
    }

    /// Writes the header into the first 24 bytes of `mad`.
    pub fn emit(&self, mad: &mut [u8]) {
        mad[0] = self.base_version;
        mad[1] = self.mgmt_class;
        mad[2] = self.class_version;
        mad[3] = self.method;
        mad[4..6].copy_from_slice(&self.status.to_be_bytes());
        mad[6..8].copy_from_slice(&self.class_specific.to_be_bytes());
        mad[8..16].copy_from_slice(&self.tid.to_be_bytes());
        mad[16..18].copy_from_slice(&self.attr_id.to_be_bytes());
        mad[18..20].fill(0);
        mad[20..24].copy_from_slice(&self.attr_mod.to_be_bytes());
    }
}

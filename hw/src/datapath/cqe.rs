//! Completion queue entries: the 64-byte CQE, the error CQE that overlays it, CQE
//! opcodes and syndromes, and the ownership rule (`mlx5-datapath.md` §7).
//!
//! A CQ is a ring of `ncqe` (a power of two) entries of 64 or 128 bytes; with 128-byte
//! entries the [`Cqe64`] is the upper half. Software initialises every entry's `op_own`
//! to [`CQE_OP_OWN_INIT`] (opcode [`MLX5_CQE_INVALID`], owner 0). The device writes the
//! entry for producer index `p` with owner bit `(p / ncqe) & 1`, body first and
//! `op_own` last; software consumes entry `n & (ncqe - 1)` when [`sw_owned`] holds for
//! consumer index `n`, then issues a read barrier before reading the body.
//!
//! Layouts: rdma-core 44 `infiniband/mlx5dv.h` (`struct mlx5_cqe64`, `struct mlx5_err_cqe`;
//! the latter is identical in Linux `device.h`).

use crate::conformance::{CStruct, Header};
use zerocopy::byteorder::big_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

c_constants! {
    /// The constants of this module, for the conformance registry.
    pub(crate) const CONSTANTS;

    // CQE opcodes, bits 7..4 of op_own (mlx5dv.h; also Linux cq.h).
    /// Bit 0 of `op_own`: the owner bit.
    Mlx5Dv MLX5_CQE_OWNER_MASK: u8 = 1;
    /// Successful requester (send-side) completion, any send opcode.
    Mlx5Dv MLX5_CQE_REQ: u8 = 0;
    /// Responder: RDMA WRITE with immediate.
    Mlx5Dv MLX5_CQE_RESP_WR_IMM: u8 = 1;
    /// Responder: SEND.
    Mlx5Dv MLX5_CQE_RESP_SEND: u8 = 2;
    /// Responder: SEND with immediate.
    Mlx5Dv MLX5_CQE_RESP_SEND_IMM: u8 = 3;
    /// Responder: SEND with invalidate.
    Mlx5Dv MLX5_CQE_RESP_SEND_INV: u8 = 4;
    /// Internal, during a CQ resize.
    Mlx5Dv MLX5_CQE_RESIZE_CQ: u8 = 5;
    /// Tag matching: no packet.
    Mlx5Dv MLX5_CQE_NO_PACKET: u8 = 6;
    /// Signature error.
    Mlx5Dv MLX5_CQE_SIG_ERR: u8 = 12;
    /// Requester error (an [`ErrCqe`]).
    Mlx5Dv MLX5_CQE_REQ_ERR: u8 = 13;
    /// Responder error (an [`ErrCqe`]).
    Mlx5Dv MLX5_CQE_RESP_ERR: u8 = 14;
    /// Software's initial value: the entry holds no completion.
    Mlx5Dv MLX5_CQE_INVALID: u8 = 15;

    // Syndromes, byte 55 of an error CQE (mlx5dv.h; also Linux cq.h).
    /// Local length error.
    Mlx5Dv MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR: u8 = 0x01;
    /// Local QP operation error.
    Mlx5Dv MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR: u8 = 0x02;
    /// Local protection error.
    Mlx5Dv MLX5_CQE_SYNDROME_LOCAL_PROT_ERR: u8 = 0x04;
    /// Work request flushed in error.
    Mlx5Dv MLX5_CQE_SYNDROME_WR_FLUSH_ERR: u8 = 0x05;
    /// Memory window bind error.
    Mlx5Dv MLX5_CQE_SYNDROME_MW_BIND_ERR: u8 = 0x06;
    /// Bad response error.
    Mlx5Dv MLX5_CQE_SYNDROME_BAD_RESP_ERR: u8 = 0x10;
    /// Local access error.
    Mlx5Dv MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR: u8 = 0x11;
    /// Remote invalid request error.
    Mlx5Dv MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR: u8 = 0x12;
    /// Remote access error.
    Mlx5Dv MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR: u8 = 0x13;
    /// Remote operation error.
    Mlx5Dv MLX5_CQE_SYNDROME_REMOTE_OP_ERR: u8 = 0x14;
    /// Transport retry counter exceeded.
    Mlx5Dv MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR: u8 = 0x15;
    /// RNR retry counter exceeded.
    Mlx5Dv MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR: u8 = 0x16;
    /// Remote aborted error.
    Mlx5Dv MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR: u8 = 0x22;
    /// Vendor syndrome of an ODP page fault.
    Mlx5Dv MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT: u8 = 0x93;
    /// The kernel's name for the flush syndrome.
    Device MLX5_CQE_SYND_FLUSHED_IN_ERROR: u8 = 5;

    // Inline scatter formats: op_own bits 3..2, as op_own bits.
    /// Format 1 as `op_own` bits: 32 bytes of data inline in this CQE.
    Mlx5Dv MLX5_INLINE_SCATTER_32: u8 = 0x4;
    /// Format 2 as `op_own` bits: 64 bytes of data inline in the preceding 64 bytes.
    Mlx5Dv MLX5_INLINE_SCATTER_64: u8 = 0x8;
    // The same formats as the 2-bit field value (Linux device.h).
    /// Format 0: no inline data.
    Device MLX5_NO_INLINE_DATA: u8 = 0;
    /// Format 1: 32 bytes inline.
    Device MLX5_INLINE_DATA32_SEG: u8 = 1;
    /// Format 2: 64 bytes inline.
    Device MLX5_INLINE_DATA64_SEG: u8 = 2;
    /// Format 3: a compressed CQE session (never produced unless requested).
    Device MLX5_COMPRESSED: u8 = 3;

    // hds_ip_ext and l4_hdr_type_etc (mlx5dv.h).
    /// `hds_ip_ext` bit 0: L2 OK.
    Mlx5Dv MLX5_CQE_L2_OK: u8 = 1 << 0;
    /// `hds_ip_ext` bit 1: L3 checksum OK.
    Mlx5Dv MLX5_CQE_L3_OK: u8 = 1 << 1;
    /// `hds_ip_ext` bit 2: L4 checksum OK.
    Mlx5Dv MLX5_CQE_L4_OK: u8 = 1 << 2;
    /// L3 header type (bits 3..2 of `l4_hdr_type_etc`): none.
    Mlx5Dv MLX5_CQE_L3_HDR_TYPE_NONE: u8 = 0x0;
    /// L3 header type: IPv6.
    Mlx5Dv MLX5_CQE_L3_HDR_TYPE_IPV6: u8 = 0x1;
    /// L3 header type: IPv4.
    Mlx5Dv MLX5_CQE_L3_HDR_TYPE_IPV4: u8 = 0x2;
}

/// `op_own` of a fresh CQ entry: opcode [`MLX5_CQE_INVALID`], owner 0 (`0xF0`).
pub const CQE_OP_OWN_INIT: u8 = MLX5_CQE_INVALID << 4;

/// Size of a [`Cqe64`] and of the default CQ entry.
pub const CQE_SIZE: usize = 64;

/// Whether the entry whose `op_own` byte is `op_own` belongs to software for consumer
/// index `consumer_index` in a CQ of `ncqe` entries (a power of two): the opcode is not
/// [`MLX5_CQE_INVALID`] and the owner bit equals the wrap parity
/// `(consumer_index & ncqe) != 0` (rdma-core `get_sw_cqe`, `mlx5-datapath.md` §7.3).
#[inline]
pub const fn sw_owned(op_own: u8, consumer_index: u32, ncqe: u32) -> bool {
    (op_own >> 4) != MLX5_CQE_INVALID
        && ((op_own & MLX5_CQE_OWNER_MASK) != 0) == ((consumer_index & ncqe) != 0)
}

/// The owner bit the device writes into the entry for producer index
/// `producer_index` in a CQ of `ncqe` entries: `(producer_index / ncqe) & 1`.
#[inline]
pub const fn hw_owner_bit(producer_index: u32, ncqe: u32) -> u8 {
    ((producer_index & ncqe) != 0) as u8
}

/// Builds an `op_own` byte from its parts.
#[inline]
pub const fn make_op_own(opcode: u8, format: u8, se: bool, owner: u8) -> u8 {
    (opcode << 4) | ((format & 3) << 2) | ((se as u8) << 1) | (owner & MLX5_CQE_OWNER_MASK)
}

/// CQE opcodes (`op_own >> 4`) as a closed set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CqeOpcode {
    /// [`MLX5_CQE_REQ`].
    Req = MLX5_CQE_REQ,
    /// [`MLX5_CQE_RESP_WR_IMM`].
    RespWrImm = MLX5_CQE_RESP_WR_IMM,
    /// [`MLX5_CQE_RESP_SEND`].
    RespSend = MLX5_CQE_RESP_SEND,
    /// [`MLX5_CQE_RESP_SEND_IMM`].
    RespSendImm = MLX5_CQE_RESP_SEND_IMM,
    /// [`MLX5_CQE_RESP_SEND_INV`].
    RespSendInv = MLX5_CQE_RESP_SEND_INV,
    /// [`MLX5_CQE_RESIZE_CQ`].
    ResizeCq = MLX5_CQE_RESIZE_CQ,
    /// [`MLX5_CQE_NO_PACKET`].
    NoPacket = MLX5_CQE_NO_PACKET,
    /// [`MLX5_CQE_SIG_ERR`].
    SigErr = MLX5_CQE_SIG_ERR,
    /// [`MLX5_CQE_REQ_ERR`].
    ReqErr = MLX5_CQE_REQ_ERR,
    /// [`MLX5_CQE_RESP_ERR`].
    RespErr = MLX5_CQE_RESP_ERR,
    /// [`MLX5_CQE_INVALID`].
    Invalid = MLX5_CQE_INVALID,
}

impl CqeOpcode {
    /// Decodes a 4-bit CQE opcode; `None` for the undefined values 7..=11.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            MLX5_CQE_REQ => Self::Req,
            MLX5_CQE_RESP_WR_IMM => Self::RespWrImm,
            MLX5_CQE_RESP_SEND => Self::RespSend,
            MLX5_CQE_RESP_SEND_IMM => Self::RespSendImm,
            MLX5_CQE_RESP_SEND_INV => Self::RespSendInv,
            MLX5_CQE_RESIZE_CQ => Self::ResizeCq,
            MLX5_CQE_NO_PACKET => Self::NoPacket,
            MLX5_CQE_SIG_ERR => Self::SigErr,
            MLX5_CQE_REQ_ERR => Self::ReqErr,
            MLX5_CQE_RESP_ERR => Self::RespErr,
            MLX5_CQE_INVALID => Self::Invalid,
            _ => return None,
        })
    }

    /// Whether the CQE is an error CQE ([`ErrCqe`] layout).
    pub fn is_error(self) -> bool {
        matches!(self, Self::ReqErr | Self::RespErr)
    }
}

/// Error CQE syndromes (byte 55 of [`ErrCqe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CqeSyndrome {
    /// [`MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR`].
    LocalLengthErr = MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR,
    /// [`MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR`].
    LocalQpOpErr = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
    /// [`MLX5_CQE_SYNDROME_LOCAL_PROT_ERR`].
    LocalProtErr = MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
    /// [`MLX5_CQE_SYNDROME_WR_FLUSH_ERR`].
    WrFlushErr = MLX5_CQE_SYNDROME_WR_FLUSH_ERR,
    /// [`MLX5_CQE_SYNDROME_MW_BIND_ERR`].
    MwBindErr = MLX5_CQE_SYNDROME_MW_BIND_ERR,
    /// [`MLX5_CQE_SYNDROME_BAD_RESP_ERR`].
    BadRespErr = MLX5_CQE_SYNDROME_BAD_RESP_ERR,
    /// [`MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR`].
    LocalAccessErr = MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR,
    /// [`MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR`].
    RemoteInvalReqErr = MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
    /// [`MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR`].
    RemoteAccessErr = MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,
    /// [`MLX5_CQE_SYNDROME_REMOTE_OP_ERR`].
    RemoteOpErr = MLX5_CQE_SYNDROME_REMOTE_OP_ERR,
    /// [`MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR`].
    TransportRetryExcErr = MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR,
    /// [`MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR`].
    RnrRetryExcErr = MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR,
    /// [`MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR`].
    RemoteAbortedErr = MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR,
}

impl CqeSyndrome {
    /// Every syndrome.
    pub const ALL: [CqeSyndrome; 13] = [
        Self::LocalLengthErr,
        Self::LocalQpOpErr,
        Self::LocalProtErr,
        Self::WrFlushErr,
        Self::MwBindErr,
        Self::BadRespErr,
        Self::LocalAccessErr,
        Self::RemoteInvalReqErr,
        Self::RemoteAccessErr,
        Self::RemoteOpErr,
        Self::TransportRetryExcErr,
        Self::RnrRetryExcErr,
        Self::RemoteAbortedErr,
    ];

    /// Decodes a syndrome byte; `None` for values rdma-core maps to
    /// `IBV_WC_GENERAL_ERR`.
    pub fn from_u8(v: u8) -> Option<Self> {
        Self::ALL.iter().copied().find(|s| *s as u8 == v)
    }
}

/// 64-byte CQE (`struct mlx5_cqe64`, mlx5dv.h), member names as in rdma-core 44
/// (`mlx5-datapath.md` §7.1). All multi-byte members are big-endian.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct Cqe64 {
    /// Reserved (kernel: byte 0 `tls_outer_l3_tunneled`).
    pub rsvd0: [u8; 2],
    /// Striding-RQ WQE index.
    pub wqe_id: U16,
    /// Reserved (kernel: LRO fields, RSS hash result and type).
    pub rsvd4: [u8; 13],
    /// Bits 6..0: DLID path bits.
    pub ml_path: u8,
    /// Reserved (kernel: checksum at 20).
    pub rsvd20: [u8; 4],
    /// Source LID.
    pub slid: U16,
    /// Bits 29..28 GRH present ("g"), 27..24 SL, 23..0 remote (source) QPN.
    pub flags_rqpn: U32,
    /// Bit 0 L2 OK, bit 1 L3 OK, bit 2 L4 OK.
    pub hds_ip_ext: u8,
    /// Bits 6..4 L4 type, 3..2 L3 type, bit 0 CVLAN present.
    pub l4_hdr_type_etc: u8,
    /// VLAN information.
    pub vlan_info: U16,
    /// Bits 23..0: SRQN (CQE version 0) or user index (version 1).
    pub srqn_uidx: U32,
    /// Immediate (as on the wire), invalidated rkey, or P_Key index.
    pub imm_inval_pkey: U32,
    /// 1 = tag matching.
    pub app: u8,
    /// Tag matching operation.
    pub app_op: u8,
    /// Tag matching information.
    pub app_info: U16,
    /// Bytes received, or read by an RDMA READ.
    pub byte_cnt: U32,
    /// Raw HCA clock.
    pub timestamp: U64,
    /// Bits 31..24 send WQE opcode (requester CQEs), 23..0 QPN.
    pub sop_drop_qpn: U32,
    /// Index of the WQE completed: SQ WQE index, RQ WQE counter, or SRQ WQE index.
    pub wqe_counter: U16,
    /// Signature.
    pub signature: u8,
    /// Bits 7..4 CQE opcode, 3..2 format, 1 SE, 0 owner.
    pub op_own: u8,
}
checked_view!(Cqe64, "mlx5_cqe64");

impl Cqe64 {
    /// The CQE opcode, `op_own >> 4` (`mlx5dv_get_cqe_opcode`).
    pub fn opcode(&self) -> u8 {
        self.op_own >> 4
    }

    /// The CQE opcode decoded; `None` for an undefined value.
    pub fn cqe_opcode(&self) -> Option<CqeOpcode> {
        CqeOpcode::from_u8(self.opcode())
    }

    /// The inline-scatter format, `(op_own >> 2) & 3` (`mlx5dv_get_cqe_format`).
    pub fn format(&self) -> u8 {
        (self.op_own >> 2) & 3
    }

    /// Solicited event, `(op_own >> 1) & 1` (`mlx5dv_get_cqe_se`).
    pub fn se(&self) -> bool {
        (self.op_own >> 1) & 1 != 0
    }

    /// The owner bit, `op_own & 1` (`mlx5dv_get_cqe_owner`).
    pub fn owner(&self) -> u8 {
        self.op_own & MLX5_CQE_OWNER_MASK
    }

    /// Sets the owner bit, keeping the rest of `op_own` (`mlx5dv_set_cqe_owner`).
    pub fn set_owner(&mut self, owner: u8) {
        self.op_own = (owner & MLX5_CQE_OWNER_MASK) | (self.op_own & !MLX5_CQE_OWNER_MASK);
    }

    /// The completed WQE's index.
    pub fn wqe_counter(&self) -> u16 {
        self.wqe_counter.get()
    }

    /// The byte count.
    pub fn byte_cnt(&self) -> u32 {
        self.byte_cnt.get()
    }

    /// The local QP number, bits 23..0 of `sop_drop_qpn`.
    pub fn qpn(&self) -> u32 {
        self.sop_drop_qpn.get() & 0x00ff_ffff
    }

    /// The send WQE opcode of a requester CQE, bits 31..24 of `sop_drop_qpn`.
    pub fn sop_opcode(&self) -> u8 {
        (self.sop_drop_qpn.get() >> 24) as u8
    }

    /// SRQN or user index, bits 23..0 of `srqn_uidx`.
    pub fn srqn_uidx(&self) -> u32 {
        self.srqn_uidx.get() & 0x00ff_ffff
    }

    /// The immediate as a value: its big-endian wire bytes read as a `u32`. rdma-core
    /// passes the raw word to `wc.imm_data` unchanged, which is the same bytes.
    pub fn imm(&self) -> u32 {
        self.imm_inval_pkey.get()
    }

    /// The P_Key index of a responder CQE, low 16 bits of `imm_inval_pkey`.
    pub fn pkey_index(&self) -> u16 {
        self.imm_inval_pkey.get() as u16
    }

    /// The remote (source) QPN, bits 23..0 of `flags_rqpn`.
    pub fn src_qpn(&self) -> u32 {
        self.flags_rqpn.get() & 0x00ff_ffff
    }

    /// The service level, bits 27..24 of `flags_rqpn`.
    pub fn sl(&self) -> u8 {
        ((self.flags_rqpn.get() >> 24) & 0xf) as u8
    }

    /// The "g" field, bits 29..28 of `flags_rqpn`; non-zero means a GRH was received.
    pub fn grh_type(&self) -> u8 {
        ((self.flags_rqpn.get() >> 28) & 3) as u8
    }

    /// The source LID.
    pub fn slid(&self) -> u16 {
        self.slid.get()
    }

    /// The DLID path bits, `ml_path & 0x7f`.
    pub fn dlid_path_bits(&self) -> u8 {
        self.ml_path & 0x7f
    }

    /// The L3 header type, bits 3..2 of `l4_hdr_type_etc` (`MLX5_CQE_L3_HDR_TYPE_*`).
    pub fn l3_hdr_type(&self) -> u8 {
        (self.l4_hdr_type_etc >> 2) & 3
    }

    /// The timestamp.
    pub fn timestamp(&self) -> u64 {
        self.timestamp.get()
    }

    /// Sets `op_own` from its parts.
    pub fn set_op_own(&mut self, opcode: u8, format: u8, se: bool, owner: u8) {
        self.op_own = make_op_own(opcode, format, se, owner);
    }

    /// Sets `sop_drop_qpn` from a send opcode and a QPN.
    pub fn set_sop_drop_qpn(&mut self, sop_opcode: u8, qpn: u32) {
        self.sop_drop_qpn = U32::new((u32::from(sop_opcode) << 24) | (qpn & 0x00ff_ffff));
    }

    /// Sets `flags_rqpn` from the GRH type, SL and source QPN.
    pub fn set_flags_rqpn(&mut self, grh_type: u8, sl: u8, src_qpn: u32) {
        self.flags_rqpn = U32::new(
            (u32::from(grh_type & 3) << 28) | (u32::from(sl & 0xf) << 24) | (src_qpn & 0x00ff_ffff),
        );
    }

    /// Views this CQE as an error CQE (meaningful when [`Cqe64::opcode`] is
    /// [`MLX5_CQE_REQ_ERR`] or [`MLX5_CQE_RESP_ERR`]).
    pub fn as_err(&self) -> &ErrCqe {
        zerocopy::transmute_ref!(self)
    }

    /// The device side of the ownership protocol: copies this CQE into `entry` (the
    /// 64 bytes of a CQ slot, or the upper half of a 128-byte slot) writing bytes 0..63
    /// first, then a release fence, then the `op_own` byte. Software that sees the new
    /// owner bit and issues its read barrier is therefore guaranteed to see the whole
    /// body; the device must never make `op_own` visible before the body
    /// (`mlx5-datapath.md` §7.3). A simulator whose DMA writes go through its own
    /// accessors uses [`Cqe64::body`] and [`Cqe64::op_own`] in the same order.
    pub fn write_body_then_owner(&self, entry: &mut [u8]) -> Result<(), crate::TooShort> {
        super::write_owner_last(entry, self.as_bytes(), Self::C_NAME)
    }

    /// The 63 bytes before `op_own`, to be written before it.
    pub fn body(&self) -> &[u8] {
        &self.as_bytes()[..Self::SIZE - 1]
    }
}

/// Error CQE (`struct mlx5_err_cqe`, mlx5dv.h and Linux 6.1 `device.h`), overlaying a
/// [`Cqe64`] whose opcode is [`MLX5_CQE_REQ_ERR`] or [`MLX5_CQE_RESP_ERR`] (§7.6).
///
/// Bytes 52 and 53 lie in `rsvd1` in both installed headers; MLNX_OFED `libmlx5`, UCX
/// and newer kernels name them `hw_err_synd` and `hw_synd_type`, which
/// [`ErrCqe::hw_err_synd`] and [`ErrCqe::hw_synd_type`] read.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct ErrCqe {
    /// Reserved.
    pub rsvd0: [u8; 32],
    /// Bits 23..0: SRQN or user index.
    pub srqn: U32,
    /// Reserved; bytes 16 and 17 of it (CQE bytes 52, 53) are the hardware syndrome
    /// and its type.
    pub rsvd1: [u8; 18],
    /// Vendor syndrome (`wc.vendor_err`).
    pub vendor_err_synd: u8,
    /// Syndrome (`MLX5_CQE_SYNDROME_*`).
    pub syndrome: u8,
    /// Bits 31..24 send WQE opcode, 23..0 QPN.
    pub s_wqe_opcode_qpn: U32,
    /// Index of the failing or flushed WQE.
    pub wqe_counter: U16,
    /// Signature.
    pub signature: u8,
    /// Opcode (13 or 14), format, SE, owner.
    pub op_own: u8,
}
checked_view!(ErrCqe, "mlx5_err_cqe");

/// Offset of `hw_err_synd` in [`ErrCqe::rsvd1`] (CQE byte 52).
const HW_ERR_SYND_IN_RSVD1: usize = 52 - 36;

impl ErrCqe {
    /// The syndrome byte.
    pub fn syndrome(&self) -> u8 {
        self.syndrome
    }

    /// The syndrome decoded; `None` for a value rdma-core reports as a general error.
    pub fn cqe_syndrome(&self) -> Option<CqeSyndrome> {
        CqeSyndrome::from_u8(self.syndrome)
    }

    /// The vendor syndrome.
    pub fn vendor_err_synd(&self) -> u8 {
        self.vendor_err_synd
    }

    /// The hardware error syndrome, CQE byte 52 (UCX/MLNX_OFED `hw_err_synd`).
    pub fn hw_err_synd(&self) -> u8 {
        self.rsvd1[HW_ERR_SYND_IN_RSVD1]
    }

    /// The hardware syndrome type, CQE byte 53 (UCX/MLNX_OFED `hw_synd_type`; UCX
    /// prints `hw_synd_type >> 4`).
    pub fn hw_synd_type(&self) -> u8 {
        self.rsvd1[HW_ERR_SYND_IN_RSVD1 + 1]
    }

    /// Sets bytes 52 and 53.
    pub fn set_hw_synd(&mut self, hw_err_synd: u8, hw_synd_type: u8) {
        self.rsvd1[HW_ERR_SYND_IN_RSVD1] = hw_err_synd;
        self.rsvd1[HW_ERR_SYND_IN_RSVD1 + 1] = hw_synd_type;
    }

    /// The send WQE opcode, bits 31..24 of `s_wqe_opcode_qpn`.
    pub fn wqe_opcode(&self) -> u8 {
        (self.s_wqe_opcode_qpn.get() >> 24) as u8
    }

    /// The QPN, bits 23..0 of `s_wqe_opcode_qpn`.
    pub fn qpn(&self) -> u32 {
        self.s_wqe_opcode_qpn.get() & 0x00ff_ffff
    }

    /// SRQN or user index, bits 23..0 of `srqn`.
    pub fn srqn(&self) -> u32 {
        self.srqn.get() & 0x00ff_ffff
    }

    /// The failing WQE's index.
    pub fn wqe_counter(&self) -> u16 {
        self.wqe_counter.get()
    }

    /// The CQE opcode, `op_own >> 4`.
    pub fn opcode(&self) -> u8 {
        self.op_own >> 4
    }

    /// Views the error CQE as a plain [`Cqe64`].
    pub fn as_cqe64(&self) -> &Cqe64 {
        zerocopy::transmute_ref!(self)
    }
}

/// The C structures of this module, for the conformance registry.
pub(crate) const C_STRUCTS: &[CStruct] = &[
    CStruct {
        header: Header::Mlx5Dv,
        name: "mlx5_cqe64",
        size: Cqe64::SIZE,
        members: &[
            c_member!(Cqe64, rsvd0),
            c_member!(Cqe64, wqe_id),
            c_member!(Cqe64, rsvd4),
            c_member!(Cqe64, ml_path),
            c_member!(Cqe64, rsvd20),
            c_member!(Cqe64, slid),
            c_member!(Cqe64, flags_rqpn),
            c_member!(Cqe64, hds_ip_ext),
            c_member!(Cqe64, l4_hdr_type_etc),
            c_member!(Cqe64, vlan_info),
            c_member!(Cqe64, srqn_uidx),
            c_member!(Cqe64, imm_inval_pkey),
            c_member!(Cqe64, app),
            c_member!(Cqe64, app_op),
            c_member!(Cqe64, app_info),
            c_member!(Cqe64, byte_cnt),
            c_member!(Cqe64, timestamp),
            c_member!(Cqe64, sop_drop_qpn),
            c_member!(Cqe64, wqe_counter),
            c_member!(Cqe64, signature),
            c_member!(Cqe64, op_own),
        ],
    },
    CStruct {
        header: Header::Mlx5Dv,
        name: "mlx5_err_cqe",
        size: ErrCqe::SIZE,
        members: &[
            c_member!(ErrCqe, rsvd0),
            c_member!(ErrCqe, srqn),
            c_member!(ErrCqe, rsvd1),
            c_member!(ErrCqe, vendor_err_synd),
            c_member!(ErrCqe, syndrome),
            c_member!(ErrCqe, s_wqe_opcode_qpn),
            c_member!(ErrCqe, wqe_counter),
            c_member!(ErrCqe, signature),
            c_member!(ErrCqe, op_own),
        ],
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_offsets() {
        assert_eq!(Cqe64::SIZE, 64);
        assert_eq!(ErrCqe::SIZE, 64);
        assert_eq!(core::mem::offset_of!(Cqe64, flags_rqpn), 24);
        assert_eq!(core::mem::offset_of!(Cqe64, srqn_uidx), 32);
        assert_eq!(core::mem::offset_of!(Cqe64, byte_cnt), 44);
        assert_eq!(core::mem::offset_of!(Cqe64, sop_drop_qpn), 56);
        assert_eq!(core::mem::offset_of!(ErrCqe, vendor_err_synd), 54);
        assert_eq!(core::mem::offset_of!(ErrCqe, syndrome), 55);
        assert_eq!(
            core::mem::offset_of!(ErrCqe, rsvd1) + HW_ERR_SYND_IN_RSVD1,
            52
        );
    }

    #[test]
    fn op_own_accessors() {
        let mut c = Cqe64::zeroed();
        c.op_own = 0x27;
        assert_eq!(
            (c.opcode(), c.format(), c.se(), c.owner()),
            (MLX5_CQE_RESP_SEND, 1, true, 1)
        );
        c.set_owner(0);
        assert_eq!(c.op_own, 0x26);
        c.set_op_own(MLX5_CQE_REQ_ERR, 0, false, 1);
        assert_eq!(c.op_own, 0xd1);
        assert_eq!(c.cqe_opcode(), Some(CqeOpcode::ReqErr));
        assert!(CqeOpcode::ReqErr.is_error());
        assert_eq!(CqeOpcode::from_u8(7), None);
    }

    #[test]
    fn decodes_a_cqe_built_from_bytes() {
        let mut b = [0u8; 64];
        b[17] = 0x85; // ml_path
        b[22..24].copy_from_slice(&0x1234u16.to_be_bytes());
        b[24..28].copy_from_slice(&0x2a00_0042u32.to_be_bytes()); // g=2, sl=10, rqpn 0x42
        b[29] = 0x2 << 2; // L3 IPv4
        b[32..36].copy_from_slice(&0xff00_0007u32.to_be_bytes());
        b[36..40].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        b[44..48].copy_from_slice(&4096u32.to_be_bytes());
        b[48..56].copy_from_slice(&0x0102_0304_0506_0708u64.to_be_bytes());
        b[56..60].copy_from_slice(&0x0a12_3456u32.to_be_bytes());
        b[60..62].copy_from_slice(&0xbeefu16.to_be_bytes());
        b[63] = make_op_own(MLX5_CQE_REQ, 0, false, 1);
        let c = Cqe64::ref_from(&b).unwrap();
        assert_eq!(c.dlid_path_bits(), 5);
        assert_eq!(c.slid(), 0x1234);
        assert_eq!((c.grh_type(), c.sl(), c.src_qpn()), (2, 10, 0x42));
        assert_eq!(c.l3_hdr_type(), MLX5_CQE_L3_HDR_TYPE_IPV4);
        assert_eq!(c.srqn_uidx(), 7);
        assert_eq!(c.imm(), 0xdead_beef);
        assert_eq!(c.pkey_index(), 0xbeef);
        assert_eq!(c.byte_cnt(), 4096);
        assert_eq!(c.timestamp(), 0x0102_0304_0506_0708);
        assert_eq!((c.sop_opcode(), c.qpn()), (0x0a, 0x123456));
        assert_eq!(c.wqe_counter(), 0xbeef);
        assert_eq!(c.owner(), 1);

        let mut built = Cqe64::read_from(&b).unwrap();
        built.set_flags_rqpn(2, 10, 0x42);
        built.set_sop_drop_qpn(0x0a, 0x123456);
        assert_eq!(built.as_bytes(), &b[..]);
    }

    #[test]
    fn error_cqe_fields() {
        let mut b = [0u8; 64];
        b[32..36].copy_from_slice(&0x0000_0099u32.to_be_bytes());
        b[52] = 0x07;
        b[53] = 0x20;
        b[54] = 0x93;
        b[55] = MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
        b[56..60].copy_from_slice(&0x1000_0101u32.to_be_bytes());
        b[60..62].copy_from_slice(&5u16.to_be_bytes());
        b[63] = make_op_own(MLX5_CQE_REQ_ERR, 0, false, 0);
        let e = ErrCqe::ref_from(&b).unwrap();
        assert_eq!(e.srqn(), 0x99);
        assert_eq!((e.hw_err_synd(), e.hw_synd_type()), (0x07, 0x20));
        assert_eq!(e.vendor_err_synd(), MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT);
        assert_eq!(e.cqe_syndrome(), Some(CqeSyndrome::RemoteAccessErr));
        assert_eq!(
            (e.wqe_opcode(), e.qpn()),
            (MLX5_OPCODE_RDMA_READ_FOR_TEST, 0x101)
        );
        assert_eq!(e.wqe_counter(), 5);
        assert_eq!(e.opcode(), MLX5_CQE_REQ_ERR);
        let c = Cqe64::ref_from(&b).unwrap();
        assert_eq!(c.as_err(), e);
        assert_eq!(e.as_cqe64(), c);
        let mut e2 = ErrCqe::zeroed();
        e2.set_hw_synd(0x07, 0x20);
        assert_eq!(&e2.as_bytes()[52..54], &[0x07, 0x20]);
        assert_eq!(CqeSyndrome::from_u8(0x99), None);
        for s in CqeSyndrome::ALL {
            assert_eq!(CqeSyndrome::from_u8(s as u8), Some(s));
        }
    }
    const MLX5_OPCODE_RDMA_READ_FOR_TEST: u8 = crate::datapath::wqe::MLX5_OPCODE_RDMA_READ;

    #[test]
    fn ownership_across_wraps() {
        let ncqe = 4u32;
        // A fresh CQ: nothing is software-owned.
        for n in 0..8 {
            assert!(!sw_owned(CQE_OP_OWN_INIT, n, ncqe));
        }
        // The device fills producer indexes 0..12 in turn; the consumer at index n
        // sees entry n & 3 as its own exactly when the device has written p == n.
        let mut ring = [CQE_OP_OWN_INIT; 4];
        for p in 0..12u32 {
            let slot = (p & (ncqe - 1)) as usize;
            assert!(!sw_owned(ring[slot], p, ncqe), "p={p} before write");
            ring[slot] = make_op_own(MLX5_CQE_REQ, 0, false, hw_owner_bit(p, ncqe));
            assert!(sw_owned(ring[slot], p, ncqe), "p={p} after write");
            // The stale entry one lap ahead is not mistaken for a new one.
            assert!(!sw_owned(ring[slot], p + ncqe, ncqe));
        }
        assert_eq!(hw_owner_bit(3, 4), 0);
        assert_eq!(hw_owner_bit(4, 4), 1);
        assert_eq!(hw_owner_bit(8, 4), 0);
    }

    #[test]
    fn body_then_owner() {
        let mut c = Cqe64::zeroed();
        c.byte_cnt = U32::new(7);
        c.set_op_own(MLX5_CQE_RESP_SEND, 0, false, 1);
        let mut slot = [0xeeu8; 64];
        c.write_body_then_owner(&mut slot).unwrap();
        assert_eq!(&slot[..], c.as_bytes());
        assert!(c.write_body_then_owner(&mut [0u8; 63]).is_err());
        assert_eq!(c.body().len(), 63);
    }
}

//! Work queue elements: send WQE segments, receive data segments, send opcodes and the
//! control-segment flags.
//!
//! A send WQE is a control segment ([`WqeCtrlSeg`]) followed by optional transport and
//! operation segments ([`WqeDatagramSeg`], [`WqeRaddrSeg`], [`WqeAtomicSeg`], ...) and a
//! data part: gather entries ([`WqeDataSeg`]) or inline data behind a 4-byte header
//! ([`WqeInlDataSeg`]). Everything is counted in 16-byte units ("DS", octowords); a WQE
//! occupies `ceil(DS / 4)` 64-byte basic blocks (WQEBBs) of the send queue ring
//! (`mlx5-datapath.md` §2). A receive WQE is an array of [`WqeDataSeg`] closed by a
//! terminator entry whose lkey is [`MLX5_INVALID_LKEY`] when the list is short (§4).
//!
//! Layouts: rdma-core 44 `infiniband/mlx5dv.h` ([`Header::Mlx5Dv`](crate::conformance::Header))
//! and, for the segments it lacks, Linux `include/linux/mlx5/qp.h`
//! ([`Header::Qp`](crate::conformance::Header)).

use crate::conformance::{CStruct, Header};
use zerocopy::byteorder::big_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

c_constants! {
    /// The constants of this module, for the conformance registry.
    pub(crate) const CONSTANTS;

    // Send opcodes, control segment byte 3 (mlx5dv.h `enum { MLX5_OPCODE_* }`).
    /// NOP: a WQE that does nothing (used for padding and completion requests).
    Mlx5Dv MLX5_OPCODE_NOP: u8 = 0x00;
    /// SEND with invalidate (`IBV_WR_SEND_WITH_INV`); the rkey goes in `imm`.
    Mlx5Dv MLX5_OPCODE_SEND_INVAL: u8 = 0x01;
    /// RDMA WRITE (`IBV_WR_RDMA_WRITE`).
    Mlx5Dv MLX5_OPCODE_RDMA_WRITE: u8 = 0x08;
    /// RDMA WRITE with immediate (`IBV_WR_RDMA_WRITE_WITH_IMM`).
    Mlx5Dv MLX5_OPCODE_RDMA_WRITE_IMM: u8 = 0x09;
    /// SEND (`IBV_WR_SEND`).
    Mlx5Dv MLX5_OPCODE_SEND: u8 = 0x0a;
    /// SEND with immediate (`IBV_WR_SEND_WITH_IMM`).
    Mlx5Dv MLX5_OPCODE_SEND_IMM: u8 = 0x0b;
    /// TCP segmentation offload (the kernel calls it [`MLX5_OPCODE_LSO`]).
    Mlx5Dv MLX5_OPCODE_TSO: u8 = 0x0e;
    /// RDMA READ (`IBV_WR_RDMA_READ`).
    Mlx5Dv MLX5_OPCODE_RDMA_READ: u8 = 0x10;
    /// Atomic compare and swap (`IBV_WR_ATOMIC_CMP_AND_SWP`).
    Mlx5Dv MLX5_OPCODE_ATOMIC_CS: u8 = 0x11;
    /// Atomic fetch and add (`IBV_WR_ATOMIC_FETCH_AND_ADD`).
    Mlx5Dv MLX5_OPCODE_ATOMIC_FA: u8 = 0x12;
    /// Masked compare and swap (extended atomics; DV/UCX only).
    Mlx5Dv MLX5_OPCODE_ATOMIC_MASKED_CS: u8 = 0x14;
    /// Masked fetch and add (extended atomics; DV/UCX only).
    Mlx5Dv MLX5_OPCODE_ATOMIC_MASKED_FA: u8 = 0x15;
    /// Fast memory registration.
    Mlx5Dv MLX5_OPCODE_FMR: u8 = 0x19;
    /// Local invalidate.
    Mlx5Dv MLX5_OPCODE_LOCAL_INVAL: u8 = 0x1b;
    /// Configuration command.
    Mlx5Dv MLX5_OPCODE_CONFIG_CMD: u8 = 0x1f;
    /// Set a protection signature value.
    Mlx5Dv MLX5_OPCODE_SET_PSV: u8 = 0x20;
    /// User-mode memory registration; rdma-core uses it for BIND_MW and LOCAL_INV.
    Mlx5Dv MLX5_OPCODE_UMR: u8 = 0x25;
    /// Tag matching list operation.
    Mlx5Dv MLX5_OPCODE_TAG_MATCHING: u8 = 0x28;
    /// Flow table access.
    Mlx5Dv MLX5_OPCODE_FLOW_TBL_ACCESS: u8 = 0x2c;
    /// Memory-to-memory offload (opmod 1 = DMA memcpy).
    Mlx5Dv MLX5_OPCODE_MMO: u8 = 0x2f;
    // Send opcodes that only the kernel's device.h names.
    /// Large send offload: the kernel's name for [`MLX5_OPCODE_TSO`].
    Device MLX5_OPCODE_LSO: u8 = 0x0e;
    /// Memory window bind (kernel name; rdma-core uses UMR).
    Device MLX5_OPCODE_BIND_MW: u8 = 0x18;
    /// Enhanced multi-packet send WQE (Ethernet).
    Device MLX5_OPCODE_ENHANCED_MPSW: u8 = 0x29;
    /// Get a protection signature value.
    Device MLX5_OPCODE_GET_PSV: u8 = 0x21;
    /// Check a protection signature value.
    Device MLX5_OPCODE_CHECK_PSV: u8 = 0x22;
    /// Dump (Ethernet).
    Device MLX5_OPCODE_DUMP: u8 = 0x23;
    /// Remote get PSV.
    Device MLX5_OPCODE_RGET_PSV: u8 = 0x26;
    /// Remote check PSV.
    Device MLX5_OPCODE_RCHECK_PSV: u8 = 0x27;
    /// Advanced steering operation (ASO) access.
    Device MLX5_OPCODE_ACCESS_ASO: u8 = 0x2d;

    // fm_ce_se flags, control segment byte 11.
    /// CE = 2: produce a CQE when the WQE completes successfully ("signaled").
    Mlx5Dv MLX5_WQE_CTRL_CQ_UPDATE: u8 = 2 << 2;
    /// SE: the message is solicited.
    Mlx5Dv MLX5_WQE_CTRL_SOLICITED: u8 = 1 << 1;
    /// rdma-core's fence for `IBV_SEND_FENCE`: fence mode 4, "small and fence".
    Mlx5Dv MLX5_WQE_CTRL_FENCE: u8 = 4 << 5;
    /// Fence mode 1, initiator small fence (rdma-core sets it after BIND_MW/LOCAL_INV).
    Mlx5Dv MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE: u8 = 1 << 5;
    /// CE = 3: a CQE and an EQE on completion (kernel only).
    Qp MLX5_WQE_CTRL_CQ_UPDATE_AND_EQE: u8 = 3 << 2;
    /// Fence mode 0: no fence.
    Qp MLX5_FENCE_MODE_NONE: u8 = 0;
    /// Fence mode 1: initiator small fence.
    Qp MLX5_FENCE_MODE_INITIATOR_SMALL: u8 = 1 << 5;
    /// Fence mode 2: fence.
    Qp MLX5_FENCE_MODE_FENCE: u8 = 2 << 5;
    /// Fence mode 3: strong ordering.
    Qp MLX5_FENCE_MODE_STRONG_ORDERING: u8 = 3 << 5;
    /// Fence mode 4: small and fence.
    Qp MLX5_FENCE_MODE_SMALL_AND_FENCE: u8 = 4 << 5;

    // Geometry.
    /// Size of a send WQE basic block (WQEBB).
    Mlx5Dv MLX5_SEND_WQE_BB: usize = 64;
    /// log2 of [`MLX5_SEND_WQE_BB`].
    Mlx5Dv MLX5_SEND_WQE_SHIFT: u32 = 6;
    /// Size of one DS unit (octoword).
    Qp MLX5_SEND_WQE_DS: usize = 16;
    /// Largest send WQE in WQEBBs (1024 bytes).
    Qp MLX5_SEND_WQE_MAX_WQEBBS: usize = 16;
    /// DS units per WQEBB (a macro: `MLX5_SEND_WQE_BB / MLX5_SEND_WQE_DS`).
    Qp MLX5_SEND_WQEBB_NUM_DS: usize = MLX5_SEND_WQE_BB / MLX5_SEND_WQE_DS;
    /// Largest send WQE in bytes (a macro: `MLX5_SEND_WQE_MAX_WQEBBS * MLX5_SEND_WQE_BB`).
    Qp MLX5_SEND_WQE_MAX_SIZE: usize = MLX5_SEND_WQE_MAX_WQEBBS * MLX5_SEND_WQE_BB;
    /// `qpn_ds` mask of the DS count (6 bits: at most 63 DS, 1008 bytes).
    Qp MLX5_WQE_CTRL_DS_MASK: u32 = 0x3f;
    /// `qpn_ds` mask of the QP number.
    Qp MLX5_WQE_CTRL_QPN_MASK: u32 = 0xffff_ff00;
    /// `qpn_ds` shift of the QP number.
    Qp MLX5_WQE_CTRL_QPN_SHIFT: u32 = 8;
    /// Bytes per DS unit (the kernel's second name for [`MLX5_SEND_WQE_DS`]).
    Qp MLX5_WQE_DS_UNITS: usize = 16;
    /// `opmod_idx_opcode` mask of the opcode.
    Qp MLX5_WQE_CTRL_OPCODE_MASK: u32 = 0xff;
    /// `opmod_idx_opcode` mask of the WQE index.
    Qp MLX5_WQE_CTRL_WQE_INDEX_MASK: u32 = 0x00ff_ff00;
    /// `opmod_idx_opcode` shift of the WQE index.
    Qp MLX5_WQE_CTRL_WQE_INDEX_SHIFT: u32 = 8;

    // Data part.
    /// Bit 31 of an inline header: the segment carries inline data.
    Mlx5Dv MLX5_INLINE_SEG: u32 = 0x8000_0000;
    /// The kernel's mask of the inline byte count (10 bits).
    Qp MLX5_WQE_INLINE_SEG_BYTE_COUNT_MASK: u32 = 0x3ff;
    /// Bit 31 of `mlx5_wqe_av.dqp_dct`: a full (extended, 48-byte) address vector.
    Mlx5Dv MLX5_EXTENDED_UD_AV: u32 = 0x8000_0000;
    /// The lkey of a receive list terminator (`byte_count` 0, `addr` 0).
    Mlx5Dv MLX5_INVALID_LKEY: u32 = 0x100;
}

/// The largest DS count a control segment can express (its 6-bit field): 1008 bytes.
/// rdma-core's sizing can produce a 1024-byte WQE (DS 64), which must not be built
/// (`mlx5-datapath.md` §2.4).
pub const MAX_WQE_DS: u8 = MLX5_WQE_CTRL_DS_MASK as u8;

/// WQEBBs occupied by a WQE of `ds` 16-byte units: `ceil(ds / 4)`.
pub const fn wqebbs_for_ds(ds: u8) -> u16 {
    (ds as u16).div_ceil(MLX5_SEND_WQEBB_NUM_DS as u16)
}

/// DS units taken by an inline section of `len` payload bytes: the 4-byte header plus
/// the data, rounded up to 16 bytes; 0 when `len` is 0 (no segment is written).
pub const fn inline_ds(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        (4 + len).div_ceil(MLX5_SEND_WQE_DS)
    }
}

/// The send opcodes of byte 3 of the control segment, as a closed set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SendOpcode {
    /// [`MLX5_OPCODE_NOP`].
    Nop = MLX5_OPCODE_NOP,
    /// [`MLX5_OPCODE_SEND_INVAL`].
    SendInval = MLX5_OPCODE_SEND_INVAL,
    /// [`MLX5_OPCODE_RDMA_WRITE`].
    RdmaWrite = MLX5_OPCODE_RDMA_WRITE,
    /// [`MLX5_OPCODE_RDMA_WRITE_IMM`].
    RdmaWriteImm = MLX5_OPCODE_RDMA_WRITE_IMM,
    /// [`MLX5_OPCODE_SEND`].
    Send = MLX5_OPCODE_SEND,
    /// [`MLX5_OPCODE_SEND_IMM`].
    SendImm = MLX5_OPCODE_SEND_IMM,
    /// [`MLX5_OPCODE_TSO`] (kernel: LSO).
    Tso = MLX5_OPCODE_TSO,
    /// [`MLX5_OPCODE_RDMA_READ`].
    RdmaRead = MLX5_OPCODE_RDMA_READ,
    /// [`MLX5_OPCODE_ATOMIC_CS`].
    AtomicCs = MLX5_OPCODE_ATOMIC_CS,
    /// [`MLX5_OPCODE_ATOMIC_FA`].
    AtomicFa = MLX5_OPCODE_ATOMIC_FA,
    /// [`MLX5_OPCODE_ATOMIC_MASKED_CS`].
    AtomicMaskedCs = MLX5_OPCODE_ATOMIC_MASKED_CS,
    /// [`MLX5_OPCODE_ATOMIC_MASKED_FA`].
    AtomicMaskedFa = MLX5_OPCODE_ATOMIC_MASKED_FA,
    /// [`MLX5_OPCODE_BIND_MW`].
    BindMw = MLX5_OPCODE_BIND_MW,
    /// [`MLX5_OPCODE_FMR`].
    Fmr = MLX5_OPCODE_FMR,
    /// [`MLX5_OPCODE_LOCAL_INVAL`].
    LocalInval = MLX5_OPCODE_LOCAL_INVAL,
    /// [`MLX5_OPCODE_CONFIG_CMD`].
    ConfigCmd = MLX5_OPCODE_CONFIG_CMD,
    /// [`MLX5_OPCODE_SET_PSV`].
    SetPsv = MLX5_OPCODE_SET_PSV,
    /// [`MLX5_OPCODE_GET_PSV`].
    GetPsv = MLX5_OPCODE_GET_PSV,
    /// [`MLX5_OPCODE_CHECK_PSV`].
    CheckPsv = MLX5_OPCODE_CHECK_PSV,
    /// [`MLX5_OPCODE_DUMP`].
    Dump = MLX5_OPCODE_DUMP,
    /// [`MLX5_OPCODE_UMR`].
    Umr = MLX5_OPCODE_UMR,
    /// [`MLX5_OPCODE_RGET_PSV`].
    RgetPsv = MLX5_OPCODE_RGET_PSV,
    /// [`MLX5_OPCODE_RCHECK_PSV`].
    RcheckPsv = MLX5_OPCODE_RCHECK_PSV,
    /// [`MLX5_OPCODE_TAG_MATCHING`].
    TagMatching = MLX5_OPCODE_TAG_MATCHING,
    /// [`MLX5_OPCODE_ENHANCED_MPSW`].
    EnhancedMpsw = MLX5_OPCODE_ENHANCED_MPSW,
    /// [`MLX5_OPCODE_FLOW_TBL_ACCESS`].
    FlowTblAccess = MLX5_OPCODE_FLOW_TBL_ACCESS,
    /// [`MLX5_OPCODE_ACCESS_ASO`].
    AccessAso = MLX5_OPCODE_ACCESS_ASO,
    /// [`MLX5_OPCODE_MMO`].
    Mmo = MLX5_OPCODE_MMO,
}

impl SendOpcode {
    /// Every send opcode.
    pub const ALL: [SendOpcode; 28] = [
        Self::Nop,
        Self::SendInval,
        Self::RdmaWrite,
        Self::RdmaWriteImm,
        Self::Send,
        Self::SendImm,
        Self::Tso,
        Self::RdmaRead,
        Self::AtomicCs,
        Self::AtomicFa,
        Self::AtomicMaskedCs,
        Self::AtomicMaskedFa,
        Self::BindMw,
        Self::Fmr,
        Self::LocalInval,
        Self::ConfigCmd,
        Self::SetPsv,
        Self::GetPsv,
        Self::CheckPsv,
        Self::Dump,
        Self::Umr,
        Self::RgetPsv,
        Self::RcheckPsv,
        Self::TagMatching,
        Self::EnhancedMpsw,
        Self::FlowTblAccess,
        Self::AccessAso,
        Self::Mmo,
    ];

    /// Decodes byte 3 of a control segment; `None` for an undefined opcode.
    pub fn from_u8(v: u8) -> Option<Self> {
        Self::ALL.iter().copied().find(|o| *o as u8 == v)
    }
}

/// Control segment (`struct mlx5_wqe_ctrl_seg`, 16 bytes, mlx5dv.h), the first
/// segment of every send WQE (`mlx5-datapath.md` §2.1).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct WqeCtrlSeg {
    /// Bits 31..24 opmod, 23..8 WQE index (the WQEBB producer counter), 7..0 opcode.
    pub opmod_idx_opcode: U32,
    /// Bits 31..8 QP/SQ number, 5..0 DS (WQE size in 16-byte units, ctrl included).
    pub qpn_ds: U32,
    /// WQE signature (0 unless the QP was created with WQE signatures).
    pub signature: u8,
    /// DC stream channel (the kernel's `rsvd[2]`).
    pub dci_stream_channel_id: U16,
    /// Fence mode (7..5), completion/event (3..2), solicited (1).
    pub fm_ce_se: u8,
    /// Immediate data, invalidated rkey or mkey, stored big-endian.
    pub imm: U32,
}
checked_view!(WqeCtrlSeg, "mlx5_wqe_ctrl_seg");

impl WqeCtrlSeg {
    /// opmod, bits 31..24 of `opmod_idx_opcode`.
    pub fn opmod(&self) -> u8 {
        (self.opmod_idx_opcode.get() >> 24) as u8
    }

    /// The WQE index: the 16-bit WQEBB counter at the WQE's first block.
    pub fn wqe_index(&self) -> u16 {
        ((self.opmod_idx_opcode.get() & MLX5_WQE_CTRL_WQE_INDEX_MASK)
            >> MLX5_WQE_CTRL_WQE_INDEX_SHIFT) as u16
    }

    /// The send opcode byte (`MLX5_OPCODE_*`).
    pub fn opcode(&self) -> u8 {
        (self.opmod_idx_opcode.get() & MLX5_WQE_CTRL_OPCODE_MASK) as u8
    }

    /// The QP (or SQ) number, 24 bits.
    pub fn qpn(&self) -> u32 {
        (self.qpn_ds.get() & MLX5_WQE_CTRL_QPN_MASK) >> MLX5_WQE_CTRL_QPN_SHIFT
    }

    /// The WQE size in 16-byte units, 6 bits.
    pub fn ds(&self) -> u8 {
        (self.qpn_ds.get() & MLX5_WQE_CTRL_DS_MASK) as u8
    }

    /// Fence mode, bits 7..5 of `fm_ce_se` (`MLX5_FENCE_MODE_* >> 5`).
    pub fn fence_mode(&self) -> u8 {
        self.fm_ce_se >> 5
    }

    /// Completion and event request, bits 3..2 of `fm_ce_se` (2 = CQE, 3 = CQE and EQE).
    pub fn ce(&self) -> u8 {
        (self.fm_ce_se >> 2) & 3
    }

    /// Whether a CQE is requested on success (CE bit 3 set).
    pub fn cq_update(&self) -> bool {
        self.fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE != 0
    }

    /// Solicited event, bit 1 of `fm_ce_se`.
    pub fn solicited(&self) -> bool {
        self.fm_ce_se & MLX5_WQE_CTRL_SOLICITED != 0
    }

    /// The immediate word as a value (its bytes in the WQE are big-endian).
    pub fn imm(&self) -> u32 {
        self.imm.get()
    }

    /// Fills the segment as `mlx5dv_set_ctrl_seg` does: `opmod_idx_opcode =
    /// opmod << 24 | pi << 8 | opcode`, `qpn_ds = qp_num << 8 | ds`, then `fm_ce_se`,
    /// `signature` and `imm`. Like the C helper it **leaves bytes 9-10
    /// (`dci_stream_channel_id`) untouched**.
    ///
    /// `imm` is the value stored big-endian at bytes 12-15, i.e. rdma-core's `imm`
    /// argument is `htobe32(imm)`; for SEND_IMM and WRITE_IMM pass the immediate whose
    /// big-endian bytes are the wire bytes, for SEND_INVAL the rkey.
    #[allow(clippy::too_many_arguments)]
    pub fn set_ctrl_seg(
        &mut self,
        pi: u16,
        opcode: u8,
        opmod: u8,
        qp_num: u32,
        fm_ce_se: u8,
        ds: u8,
        signature: u8,
        imm: u32,
    ) {
        self.opmod_idx_opcode =
            U32::new((u32::from(opmod) << 24) | (u32::from(pi) << 8) | u32::from(opcode));
        self.qpn_ds = U32::new((qp_num << 8) | u32::from(ds));
        self.fm_ce_se = fm_ce_se;
        self.signature = signature;
        self.imm = U32::new(imm);
    }

    /// Fills the segment as `mlx5dv_x86_set_ctrl_seg` does: the same bytes as
    /// [`WqeCtrlSeg::set_ctrl_seg`], and bytes 9-10 (`dci_stream_channel_id`) zeroed.
    #[allow(clippy::too_many_arguments)]
    pub fn set_ctrl_seg_x86(
        &mut self,
        pi: u16,
        opcode: u8,
        opmod: u8,
        qp_num: u32,
        fm_ce_se: u8,
        ds: u8,
        signature: u8,
        imm: u32,
    ) {
        self.set_ctrl_seg(pi, opcode, opmod, qp_num, fm_ce_se, ds, signature, imm);
        self.dci_stream_channel_id = U16::ZERO;
    }

    /// The first 8 bytes as they sit in memory: what an 8-byte doorbell carries.
    pub fn doorbell_bytes(&self) -> [u8; 8] {
        let b = self.as_bytes();
        [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]
    }

    /// The first 8 bytes as the value [`Bus::write64`](crate::Bus::write64) takes, so
    /// that the register receives exactly [`WqeCtrlSeg::doorbell_bytes`].
    pub fn doorbell_value(&self) -> u64 {
        u64::from_be_bytes(self.doorbell_bytes())
    }
}

/// Remote address segment (`struct mlx5_wqe_raddr_seg`, 16 bytes, mlx5dv.h): RDMA
/// READ/WRITE and atomics, right after the control segment.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct WqeRaddrSeg {
    /// Remote virtual address.
    pub raddr: U64,
    /// Remote key.
    pub rkey: U32,
    /// Reserved; rdma-core writes 0.
    pub reserved: U32,
}
checked_view!(WqeRaddrSeg, "mlx5_wqe_raddr_seg");

impl WqeRaddrSeg {
    /// Fills the segment as rdma-core's `set_raddr_seg` does (reserved word zeroed).
    pub fn set_raddr_seg(&mut self, raddr: u64, rkey: u32) {
        self.raddr = U64::new(raddr);
        self.rkey = U32::new(rkey);
        self.reserved = U32::ZERO;
    }
}

/// Atomic segment (`struct mlx5_wqe_atomic_seg`, 16 bytes, mlx5dv.h): after the
/// remote address segment of ATOMIC_CS / ATOMIC_FA.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct WqeAtomicSeg {
    /// CAS: the swap value; FETCH_ADD: the value to add.
    pub swap_add: U64,
    /// CAS: the compare value; unused by FETCH_ADD.
    pub compare: U64,
}
checked_view!(WqeAtomicSeg, "mlx5_wqe_atomic_seg");

impl WqeAtomicSeg {
    /// Compare and swap: writes both words.
    pub fn set_cas(&mut self, swap: u64, compare: u64) {
        self.swap_add = U64::new(swap);
        self.compare = U64::new(compare);
    }

    /// Fetch and add: writes `swap_add` only. rdma-core's legacy post path leaves
    /// `compare` as it was (`mlx5-datapath.md` §2.2); so does this.
    pub fn set_fetch_add(&mut self, add: u64) {
        self.swap_add = U64::new(add);
    }
}

/// Masked atomic segment (`struct mlx5_wqe_masked_atomic_seg`, 32 bytes, Linux
/// `qp.h`; not in mlx5dv.h), for [`MLX5_OPCODE_ATOMIC_MASKED_CS`] and `_FA`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct WqeMaskedAtomicSeg {
    /// Swap (CS) or add (FA) value.
    pub swap_add: U64,
    /// Compare value (CS).
    pub compare: U64,
    /// Mask of the swap/add value.
    pub swap_add_mask: U64,
    /// Mask of the compare value.
    pub compare_mask: U64,
}
checked_view!(WqeMaskedAtomicSeg, "mlx5_wqe_masked_atomic_seg");

impl WqeMaskedAtomicSeg {
    /// Writes all four words.
    pub fn set(&mut self, swap_add: u64, compare: u64, swap_add_mask: u64, compare_mask: u64) {
        self.swap_add = U64::new(swap_add);
        self.compare = U64::new(compare);
        self.swap_add_mask = U64::new(swap_add_mask);
        self.compare_mask = U64::new(compare_mask);
    }
}

/// Data (gather/scatter) segment (`struct mlx5_wqe_data_seg`, 16 bytes, mlx5dv.h):
/// one SGE of a send WQE, or one entry of a receive WQE.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct WqeDataSeg {
    /// Length in bytes.
    pub byte_count: U32,
    /// Local key of the memory region.
    pub lkey: U32,
    /// Address (IOVA as registered).
    pub addr: U64,
}
checked_view!(WqeDataSeg, "mlx5_wqe_data_seg");

impl WqeDataSeg {
    /// Fills the segment as `mlx5dv_set_data_seg` does.
    pub fn set_data_seg(&mut self, length: u32, lkey: u32, address: u64) {
        self.byte_count = U32::new(length);
        self.lkey = U32::new(lkey);
        self.addr = U64::new(address);
    }

    /// Makes this entry the receive-list terminator: `byte_count` 0,
    /// `lkey` [`MLX5_INVALID_LKEY`], `addr` 0 (rdma-core `mlx5_post_recv`).
    pub fn set_terminator(&mut self) {
        self.set_data_seg(0, MLX5_INVALID_LKEY, 0);
    }

    /// Whether this receive entry ends the scatter list (lkey [`MLX5_INVALID_LKEY`]).
    pub fn is_terminator(&self) -> bool {
        self.lkey.get() == MLX5_INVALID_LKEY
    }

    /// The length.
    pub fn byte_count(&self) -> u32 {
        self.byte_count.get()
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.lkey.get()
    }

    /// The address.
    pub fn addr(&self) -> u64 {
        self.addr.get()
    }
}

/// Inline data header (`struct mlx5_wqe_inl_data_seg`, 4 bytes, mlx5dv.h, where the
/// field is host-typed; Linux `qp.h` `mlx5_wqe_inline_seg` types it `__be32`): BE32
/// `total_len | MLX5_INLINE_SEG`, with the payload starting right after it.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct WqeInlDataSeg {
    /// `total inline bytes | MLX5_INLINE_SEG`, big-endian.
    pub byte_count: U32,
}
checked_view!(WqeInlDataSeg, "mlx5_wqe_inl_data_seg");

impl WqeInlDataSeg {
    /// Writes the header of an inline section of `len` bytes.
    pub fn set(&mut self, len: u32) {
        self.byte_count = U32::new(len | MLX5_INLINE_SEG);
    }

    /// Whether bit 31 ([`MLX5_INLINE_SEG`]) is set: the data part is inline rather than
    /// a gather list. A parser reads the first word after the transport segments and
    /// uses this bit to tell the two apart.
    pub fn is_inline(&self) -> bool {
        self.byte_count.get() & MLX5_INLINE_SEG != 0
    }

    /// The inline byte count: bits 30..0. The kernel masks with
    /// [`MLX5_WQE_INLINE_SEG_BYTE_COUNT_MASK`] (10 bits); a reader of untrusted WQEs
    /// should instead check the full count against the WQE's DS.
    pub fn inline_len(&self) -> u32 {
        self.byte_count.get() & !MLX5_INLINE_SEG
    }
}

/// Address vector (`struct mlx5_wqe_av`, 48 bytes, mlx5dv.h; the kernel's
/// `mlx5_av`), the body of the datagram segment of UD and DC WQEs (§2.3).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct WqeAv {
    /// UD: Q_Key in bytes 0-3, 4-7 reserved; DC: the 64-bit DC access key.
    pub key: U64,
    /// Bit 31 [`MLX5_EXTENDED_UD_AV`]; bits 23..0 destination QPN or DCT number.
    pub dqp_dct: U32,
    /// Bits 7..4 static rate; IB: 3..0 SL; RoCE: 3..1 priority.
    pub stat_rate_sl: u8,
    /// Bit 7 force loopback; bits 6..0 source path bits.
    pub fl_mlid: u8,
    /// IB: DLID. RoCEv2: the UDP source port.
    pub rlid: U16,
    /// Reserved.
    pub reserved0: [u8; 4],
    /// Destination MAC (RoCE).
    pub rmac: [u8; 6],
    /// Traffic class / IP ToS.
    pub tclass: u8,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Bit 30 GRH present, 27..20 SGID index, 19..0 flow label.
    pub grh_gid_fl: U32,
    /// Destination GID.
    pub rgid: [u8; 16],
}
checked_view!(WqeAv, "mlx5_wqe_av");

/// `grh_gid_fl` bit 30: a GRH is present (IB; 0 for RoCE).
pub const AV_GRH: u32 = 1 << 30;

impl WqeAv {
    /// Builds a `grh_gid_fl` word: GRH bit, 8-bit SGID index, 20-bit flow label.
    pub const fn make_grh_gid_fl(grh: bool, sgid_index: u8, flow_label: u32) -> u32 {
        (if grh { AV_GRH } else { 0 }) | ((sgid_index as u32) << 20) | (flow_label & 0xf_ffff)
    }

    /// Fills the vector as `mlx5dv_set_dgram_seg` does: `key` is stored in full as a
    /// BE64 (so a Q_Key is passed as `qkey << 32`) and `dqp_dct = ext << 31 | dqp_dct`.
    /// `reserved0` is left untouched, as in the C helper.
    #[allow(clippy::too_many_arguments)]
    pub fn set_dgram_seg(
        &mut self,
        key: u64,
        dqp_dct: u32,
        ext: bool,
        stat_rate_sl: u8,
        fl_mlid: u8,
        rlid: u16,
        rmac: [u8; 6],
        tclass: u8,
        hop_limit: u8,
        grh_gid_fl: u32,
        rgid: [u8; 16],
    ) {
        self.key = U64::new(key);
        self.dqp_dct = U32::new((u32::from(ext) << 31) | dqp_dct);
        self.stat_rate_sl = stat_rate_sl;
        self.fl_mlid = fl_mlid;
        self.rlid = U16::new(rlid);
        self.rmac = rmac;
        self.tclass = tclass;
        self.hop_limit = hop_limit;
        self.grh_gid_fl = U32::new(grh_gid_fl);
        self.rgid = rgid;
    }

    /// What rdma-core's UD post path writes over the prebuilt AV it copied:
    /// `dqp_dct = remote_qpn | MLX5_EXTENDED_UD_AV` and the Q_Key in bytes 0-3
    /// (bytes 4-7 keep the prebuilt value).
    pub fn set_ud_dest(&mut self, remote_qpn: u32, remote_qkey: u32) {
        self.dqp_dct = U32::new(remote_qpn | MLX5_EXTENDED_UD_AV);
        let mut key = self.key.get().to_be_bytes();
        key[..4].copy_from_slice(&remote_qkey.to_be_bytes());
        self.key = U64::new(u64::from_be_bytes(key));
    }

    /// The Q_Key (UD): bytes 0-3 of `key`.
    pub fn qkey(&self) -> u32 {
        (self.key.get() >> 32) as u32
    }

    /// The DC access key: all of `key`.
    pub fn dc_key(&self) -> u64 {
        self.key.get()
    }

    /// Destination QPN or DCT number, bits 23..0 of `dqp_dct`.
    pub fn dest_qpn(&self) -> u32 {
        self.dqp_dct.get() & 0x00ff_ffff
    }

    /// Whether the [`MLX5_EXTENDED_UD_AV`] bit is set (a full 48-byte vector).
    pub fn extended(&self) -> bool {
        self.dqp_dct.get() & MLX5_EXTENDED_UD_AV != 0
    }

    /// Static rate code, bits 7..4 of `stat_rate_sl`.
    pub fn stat_rate(&self) -> u8 {
        self.stat_rate_sl >> 4
    }

    /// IB service level, bits 3..0 of `stat_rate_sl`.
    pub fn sl(&self) -> u8 {
        self.stat_rate_sl & 0xf
    }

    /// Force loopback, bit 7 of `fl_mlid`.
    pub fn force_loopback(&self) -> bool {
        self.fl_mlid & 0x80 != 0
    }

    /// Source path bits, bits 6..0 of `fl_mlid`.
    pub fn mlid(&self) -> u8 {
        self.fl_mlid & 0x7f
    }

    /// DLID (IB) or UDP source port (RoCEv2).
    pub fn rlid(&self) -> u16 {
        self.rlid.get()
    }

    /// GRH present, bit 30 of `grh_gid_fl`.
    pub fn grh(&self) -> bool {
        self.grh_gid_fl.get() & AV_GRH != 0
    }

    /// SGID index, bits 27..20 of `grh_gid_fl`.
    pub fn sgid_index(&self) -> u8 {
        (self.grh_gid_fl.get() >> 20) as u8
    }

    /// Flow label, bits 19..0 of `grh_gid_fl`.
    pub fn flow_label(&self) -> u32 {
        self.grh_gid_fl.get() & 0xf_ffff
    }
}

/// Datagram segment (`struct mlx5_wqe_datagram_seg`, 48 bytes, mlx5dv.h): the
/// address vector of a UD or DC send, right after the control segment. Control plus
/// datagram is exactly one WQEBB, so the data part starts in the next one.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct WqeDatagramSeg {
    /// The address vector.
    pub av: WqeAv,
}
checked_view!(WqeDatagramSeg, "mlx5_wqe_datagram_seg");

/// SRQ "next" segment (`struct mlx5_wqe_srq_next_seg`, 16 bytes, mlx5dv.h): the first
/// 16 bytes of every SRQ WQE, linking the free list (§4).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct WqeSrqNextSeg {
    /// Reserved.
    pub rsvd0: [u8; 2],
    /// Index of the next free WQE.
    pub next_wqe_index: U16,
    /// WQE signature.
    pub signature: u8,
    /// Reserved.
    pub rsvd1: [u8; 11],
}
checked_view!(WqeSrqNextSeg, "mlx5_wqe_srq_next_seg");

impl WqeSrqNextSeg {
    /// The index of the next WQE of the free list.
    pub fn next_wqe_index(&self) -> u16 {
        self.next_wqe_index.get()
    }

    /// Links this WQE to `next`.
    pub fn set_next_wqe_index(&mut self, next: u16) {
        self.next_wqe_index = U16::new(next);
    }
}

/// XRC segment (`struct mlx5_wqe_xrc_seg`, 16 bytes, Linux `qp.h`; not in mlx5dv.h):
/// the destination XRC SRQ of an XRC send, right after the control segment.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct WqeXrcSeg {
    /// Remote XRC SRQ number.
    pub xrc_srqn: U32,
    /// Reserved.
    pub rsvd: [u8; 12],
}
checked_view!(WqeXrcSeg, "mlx5_wqe_xrc_seg");

/// Receive WQE signature segment (`struct mlx5_rwqe_sig`, 16 bytes, Linux `qp.h`):
/// the first 16 bytes of a receive WQE when WQE signatures are enabled.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct RwqeSig {
    /// Reserved.
    pub rsvd0: [u8; 4],
    /// Signature byte.
    pub signature: u8,
    /// Reserved.
    pub rsvd1: [u8; 11],
}
checked_view!(RwqeSig, "mlx5_rwqe_sig");

/// The C structures of this module, for the conformance registry.
pub(crate) const C_STRUCTS: &[CStruct] = &[
    CStruct {
        header: Header::Mlx5Dv,
        name: "mlx5_wqe_ctrl_seg",
        size: WqeCtrlSeg::SIZE,
        members: &[
            c_member!(WqeCtrlSeg, opmod_idx_opcode),
            c_member!(WqeCtrlSeg, qpn_ds),
            c_member!(WqeCtrlSeg, signature),
            c_member!(WqeCtrlSeg, dci_stream_channel_id),
            c_member!(WqeCtrlSeg, fm_ce_se),
            c_member!(WqeCtrlSeg, imm),
        ],
    },
    CStruct {
        header: Header::Mlx5Dv,
        name: "mlx5_wqe_raddr_seg",
        size: WqeRaddrSeg::SIZE,
        members: &[
            c_member!(WqeRaddrSeg, raddr),
            c_member!(WqeRaddrSeg, rkey),
            c_member!(WqeRaddrSeg, reserved),
        ],
    },
    CStruct {
        header: Header::Mlx5Dv,
        name: "mlx5_wqe_atomic_seg",
        size: WqeAtomicSeg::SIZE,
        members: &[
            c_member!(WqeAtomicSeg, swap_add),
            c_member!(WqeAtomicSeg, compare),
        ],
    },
    CStruct {
        header: Header::Qp,
        name: "mlx5_wqe_masked_atomic_seg",
        size: WqeMaskedAtomicSeg::SIZE,
        members: &[
            c_member!(WqeMaskedAtomicSeg, swap_add),
            c_member!(WqeMaskedAtomicSeg, compare),
            c_member!(WqeMaskedAtomicSeg, swap_add_mask),
            c_member!(WqeMaskedAtomicSeg, compare_mask),
        ],
    },
    CStruct {
        header: Header::Mlx5Dv,
        name: "mlx5_wqe_data_seg",
        size: WqeDataSeg::SIZE,
        members: &[
            c_member!(WqeDataSeg, byte_count),
            c_member!(WqeDataSeg, lkey),
            c_member!(WqeDataSeg, addr),
        ],
    },
    CStruct {
        header: Header::Mlx5Dv,
        name: "mlx5_wqe_inl_data_seg",
        size: WqeInlDataSeg::SIZE,
        members: &[c_member!(WqeInlDataSeg, byte_count)],
    },
    CStruct {
        header: Header::Qp,
        name: "mlx5_wqe_inline_seg",
        size: WqeInlDataSeg::SIZE,
        members: &[c_member!(WqeInlDataSeg, byte_count)],
    },
    CStruct {
        header: Header::Mlx5Dv,
        name: "mlx5_wqe_av",
        size: WqeAv::SIZE,
        members: &[
            c_member!(WqeAv, key),
            c_member!(WqeAv, dqp_dct),
            c_member!(WqeAv, stat_rate_sl),
            c_member!(WqeAv, fl_mlid),
            c_member!(WqeAv, rlid),
            c_member!(WqeAv, reserved0),
            c_member!(WqeAv, rmac),
            c_member!(WqeAv, tclass),
            c_member!(WqeAv, hop_limit),
            c_member!(WqeAv, grh_gid_fl),
            c_member!(WqeAv, rgid),
        ],
    },
    CStruct {
        header: Header::Mlx5Dv,
        name: "mlx5_wqe_datagram_seg",
        size: WqeDatagramSeg::SIZE,
        members: &[c_member!(WqeDatagramSeg, av)],
    },
    CStruct {
        header: Header::Mlx5Dv,
        name: "mlx5_wqe_srq_next_seg",
        size: WqeSrqNextSeg::SIZE,
        members: &[
            c_member!(WqeSrqNextSeg, rsvd0),
            c_member!(WqeSrqNextSeg, next_wqe_index),
            c_member!(WqeSrqNextSeg, signature),
            c_member!(WqeSrqNextSeg, rsvd1),
        ],
    },
    CStruct {
        header: Header::Qp,
        name: "mlx5_wqe_xrc_seg",
        size: WqeXrcSeg::SIZE,
        members: &[c_member!(WqeXrcSeg, xrc_srqn), c_member!(WqeXrcSeg, rsvd)],
    },
    CStruct {
        header: Header::Qp,
        name: "mlx5_rwqe_sig",
        size: RwqeSig::SIZE,
        members: &[
            c_member!(RwqeSig, rsvd0),
            c_member!(RwqeSig, signature),
            c_member!(RwqeSig, rsvd1),
        ],
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn sizes() {
        assert_eq!(WqeCtrlSeg::SIZE, 16);
        assert_eq!(WqeRaddrSeg::SIZE, 16);
        assert_eq!(WqeAtomicSeg::SIZE, 16);
        assert_eq!(WqeMaskedAtomicSeg::SIZE, 32);
        assert_eq!(WqeDataSeg::SIZE, 16);
        assert_eq!(WqeInlDataSeg::SIZE, 4);
        assert_eq!(WqeAv::SIZE, 48);
        assert_eq!(WqeDatagramSeg::SIZE, 48);
        assert_eq!(WqeSrqNextSeg::SIZE, 16);
        assert_eq!(WqeXrcSeg::SIZE, 16);
        assert_eq!(RwqeSig::SIZE, 16);
    }

    #[test]
    fn ctrl_seg_matches_mlx5dv_helper_and_decodes() {
        // mlx5-datapath.md §2.6, buffer pre-filled with 0xEE.
        let mut buf = [0xeeu8; 16];
        let c = WqeCtrlSeg::mut_from(&mut buf).unwrap();
        c.set_ctrl_seg(
            0x1234,
            MLX5_OPCODE_RDMA_WRITE,
            0,
            0xabcdef,
            0x8a,
            3,
            0,
            0xdead_beef,
        );
        assert_eq!(buf.to_vec(), hex("00123408 abcdef03 00eeee8a deadbeef"));
        let c = WqeCtrlSeg::ref_from(&buf).unwrap();
        assert_eq!(c.opmod(), 0);
        assert_eq!(c.wqe_index(), 0x1234);
        assert_eq!(c.opcode(), MLX5_OPCODE_RDMA_WRITE);
        assert_eq!(c.qpn(), 0xabcdef);
        assert_eq!(c.ds(), 3);
        assert_eq!(c.fence_mode(), 4);
        assert_eq!(c.ce(), 2);
        assert!(c.cq_update() && c.solicited());
        assert_eq!(c.imm(), 0xdead_beef);
        assert_eq!(
            c.doorbell_bytes(),
            [0, 0x12, 0x34, 0x08, 0xab, 0xcd, 0xef, 0x03]
        );
        assert_eq!(c.doorbell_value(), 0x0012_3408_abcd_ef03);

        let mut buf = [0xeeu8; 16];
        WqeCtrlSeg::mut_from(&mut buf).unwrap().set_ctrl_seg_x86(
            0x1234,
            MLX5_OPCODE_RDMA_WRITE,
            0,
            0xabcdef,
            0x8a,
            3,
            0,
            0xdead_beef,
        );
        assert_eq!(buf.to_vec(), hex("00123408 abcdef03 0000008a deadbeef"));

        // Out-of-range arguments are truncated as the C helpers truncate them
        // (measured with gcc against the installed mlx5dv.h).
        for x86 in [false, true] {
            let mut c = WqeCtrlSeg::zeroed();
            let args = (
                0xffff,
                0xff,
                0xff,
                0xffff_ffff,
                0xff,
                0xff,
                0xff,
                0xffff_ffff,
            );
            if x86 {
                c.set_ctrl_seg_x86(
                    args.0, args.1, args.2, args.3, args.4, args.5, args.6, args.7,
                );
            } else {
                c.set_ctrl_seg(
                    args.0, args.1, args.2, args.3, args.4, args.5, args.6, args.7,
                );
            }
            assert_eq!(c.as_bytes(), hex("ffffffff ffffffff ff0000ff ffffffff"));
        }
    }

    #[test]
    fn data_seg_and_terminator() {
        let mut buf = [0xeeu8; 16];
        WqeDataSeg::mut_from(&mut buf)
            .unwrap()
            .set_data_seg(0x100, 0x1234, 0x1122_3344_5566_7788);
        assert_eq!(buf.to_vec(), hex("00000100 00001234 1122334455667788"));
        let d = WqeDataSeg::read_from(&buf).unwrap();
        assert_eq!(
            (d.byte_count(), d.lkey(), d.addr()),
            (0x100, 0x1234, 0x1122_3344_5566_7788)
        );
        assert!(!d.is_terminator());
        let mut t = WqeDataSeg::zeroed();
        t.set_terminator();
        assert_eq!(t.as_bytes(), hex("00000000 00000100 0000000000000000"));
        assert!(t.is_terminator());
    }

    #[test]
    fn dgram_seg_matches_mlx5dv_helper() {
        let mut buf = [0u8; 48];
        let av = &mut WqeDatagramSeg::mut_from(&mut buf).unwrap().av;
        let rgid: [u8; 16] = core::array::from_fn(|i| 0xa0 + i as u8);
        av.set_dgram_seg(
            0x1111_1111 << 32,
            0x123456,
            true,
            0x35,
            0x85,
            0x4321,
            [1, 2, 3, 4, 5, 6],
            0x22,
            0x40,
            WqeAv::make_grh_gid_fl(true, 3, 0x12345),
            rgid,
        );
        let mut want =
            hex("11111111 00000000 80123456 35854321 00000000 01020304 05062240 40312345");
        want.extend_from_slice(&rgid);
        assert_eq!(buf.to_vec(), want);
        let av = WqeAv::ref_from(&buf).unwrap();
        assert_eq!(av.qkey(), 0x1111_1111);
        assert_eq!(av.dest_qpn(), 0x123456);
        assert!(av.extended());
        assert_eq!((av.stat_rate(), av.sl()), (3, 5));
        assert!(av.force_loopback());
        assert_eq!(av.mlid(), 5);
        assert_eq!(av.rlid(), 0x4321);
        assert!(av.grh());
        assert_eq!((av.sgid_index(), av.flow_label()), (3, 0x12345));
    }

    #[test]
    fn ud_dest_overwrites_only_qkey_and_dqp() {
        let mut av = WqeAv::zeroed();
        av.key = U64::new(0x0000_0000_dead_beef);
        av.tclass = 7;
        av.set_ud_dest(0x42, 0x1111_2222);
        assert_eq!(&av.as_bytes()[..12], &hex("11112222 deadbeef 80000042")[..]);
        assert_eq!(av.tclass, 7);
    }

    #[test]
    fn raddr_atomic_inline() {
        let mut buf = [0xeeu8; 16];
        WqeRaddrSeg::mut_from(&mut buf)
            .unwrap()
            .set_raddr_seg(0x0102_0304_0506_0708, 0xaabbccdd);
        assert_eq!(buf.to_vec(), hex("0102030405060708 aabbccdd 00000000"));
        let mut buf = [0xeeu8; 16];
        WqeAtomicSeg::mut_from(&mut buf).unwrap().set_fetch_add(5);
        assert_eq!(buf.to_vec(), hex("0000000000000005 eeeeeeeeeeeeeeee"));
        WqeAtomicSeg::mut_from(&mut buf).unwrap().set_cas(1, 2);
        assert_eq!(buf.to_vec(), hex("0000000000000001 0000000000000002"));
        let mut h = WqeInlDataSeg::zeroed();
        h.set(60);
        assert_eq!(h.as_bytes(), [0x80, 0, 0, 60]);
        assert!(h.is_inline());
        assert_eq!(h.inline_len(), 60);
    }

    #[test]
    fn geometry() {
        assert_eq!(wqebbs_for_ds(1), 1);
        assert_eq!(wqebbs_for_ds(4), 1);
        assert_eq!(wqebbs_for_ds(5), 2);
        assert_eq!(wqebbs_for_ds(63), 16);
        assert_eq!(inline_ds(0), 0);
        assert_eq!(inline_ds(12), 1);
        assert_eq!(inline_ds(13), 2);
        assert_eq!(MLX5_SEND_WQEBB_NUM_DS, 4);
        assert_eq!(MAX_WQE_DS, 63);
    }

    #[test]
    fn opcodes_round_trip() {
        for o in SendOpcode::ALL {
            assert_eq!(SendOpcode::from_u8(o as u8), Some(o));
        }
        assert_eq!(SendOpcode::from_u8(0x02), None);
        assert_eq!(SendOpcode::from_u8(MLX5_OPCODE_LSO), Some(SendOpcode::Tso));
    }

    #[test]
    fn short_buffers_are_errors_not_panics() {
        let e = WqeCtrlSeg::ref_from(&[0u8; 15]).unwrap_err();
        assert_eq!((e.layout, e.len, e.need), ("mlx5_wqe_ctrl_seg", 15, 16));
        assert!(WqeAv::read_from(&[0u8; 47]).is_err());
        assert!(WqeDataSeg::mut_from(&mut [0u8; 3]).is_err());
        // Longer buffers view their prefix.
        assert!(WqeDataSeg::ref_from(&[0u8; 64]).is_ok());
    }
}

//! Shared receive queues: CREATE_SRQ / DESTROY_SRQ / QUERY_SRQ, ARM_RQ (the limit
//! watermark) and the SRQ context ([`srqc`]).
//!
//! An SRQ is a ring of `1 << log_srq_size` receive WQEs of `16 << log_rq_stride` bytes
//! in host memory, listed page by page in `pas` (byte 0x110 of CREATE_SRQ; pages of
//! `4096 << log_page_size` bytes, the buffer starting `page_offset` * 64 bytes into the
//! first), with a 4-byte doorbell record at `dbr_addr` (the count of WQEs posted, 16
//! bits). Each WQE starts with `struct mlx5_wqe_srq_next_seg`, whose
//! `next_wqe_index` links the free list the device follows
//! (`mlx5-datapath.md` §4, rdma-core `srq.c`).
//!
//! `lwm` is the limit watermark: armed (non-zero), the device raises
//! `MLX5_EVENT_TYPE_SRQ_RQ_LIMIT` once fewer WQEs than it are posted, and disarms it
//! (`lwm` back to 0) until ARM_RQ (`op_mod` [`ArmRqOpMod::Srq`]) sets it again; this is
//! how Linux's `mlx5_ib` arms an SRQ created with CREATE_SRQ (`srq_cmd.c`
//! `arm_srq_cmd`). Layouts as Linux 6.1's `mlx5_ifc.h` (`create_srq_in`, `srqc`,
//! `arm_rq_in`, ...).

use crate::field::{Field, Layout};
use crate::prm_layout;

use super::cmd::{self, Opcode};

prm_layout! {
    /// CREATE_SRQ input; the SRQ buffer's page addresses (`pas`) follow at byte 0x110.
    pub mod create_srq_in = "create_srq_in" (0x880) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// The SRQ context ([`srqc`](super::srqc)).
        srq_context_entry: 0x80, 0x200;
        /// Flexible array of 64-bit page addresses.
        pas: 0x880, 0;
    }
}

prm_layout! {
    /// CREATE_SRQ output.
    pub mod create_srq_out = "create_srq_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// The new SRQ's number.
        srqn: 0x48, 0x18;
    }
}

prm_layout! {
    /// DESTROY_SRQ input.
    pub mod destroy_srq_in = "destroy_srq_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// SRQ number.
        srqn: 0x48, 0x18;
    }
}

prm_layout! {
    /// DESTROY_SRQ output.
    pub mod destroy_srq_out = "destroy_srq_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}

prm_layout! {
    /// QUERY_SRQ input.
    pub mod query_srq_in = "query_srq_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// SRQ number.
        srqn: 0x48, 0x18;
    }
}

prm_layout! {
    /// QUERY_SRQ output.
    pub mod query_srq_out = "query_srq_out" (0x880) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// The SRQ context ([`srqc`](super::srqc)).
        srq_context_entry: 0x80, 0x200;
        /// Flexible array of 64-bit page addresses.
        pas: 0x880, 0;
    }
}

prm_layout! {
    /// ARM_RQ input: sets the limit watermark of an SRQ (or XRQ).
    pub mod arm_rq_in = "arm_rq_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// [`ArmRqOpMod`](super::ArmRqOpMod).
        op_mod: 0x30, 0x10;
        /// SRQ number.
        srq_number: 0x48, 0x18;
        /// The limit watermark (0 disarms).
        lwm: 0x70, 0x10;
    }
}

prm_layout! {
    /// ARM_RQ output.
    pub mod arm_rq_out = "arm_rq_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}

prm_layout! {
    /// The shared receive queue context.
    pub mod srqc = "srqc" (0x200) {
        /// [`SrqcState`](super::SrqcState).
        state: 0, 4;
        /// log2 of the number of WQEs.
        log_srq_size: 4, 4;
        /// WQE signatures enabled.
        wq_signature: 0x20, 1;
        /// Contiguous buffer (no PAS list).
        cont_srq: 0x21, 1;
        /// Reserved lkey enabled.
        rlky: 0x23, 1;
        /// log2 of the WQE stride minus 4 (stride = `16 << log_rq_stride`).
        log_rq_stride: 0x25, 3;
        /// XRC domain (XRC SRQs).
        xrcd: 0x28, 0x18;
        /// Offset of the buffer in its first page, in 64-byte units.
        page_offset: 0x40, 6;
        /// CQ of an XRC SRQ.
        cqn: 0x48, 0x18;
        /// log2 of the buffer page size minus 12.
        log_page_size: 0x82, 6;
        /// Protection domain.
        pd: 0xc8, 0x18;
        /// Limit watermark: an SRQ_RQ_LIMIT event when fewer WQEs are posted (0: none).
        lwm: 0xe0, 0x10;
        /// WQE counter (QUERY_SRQ: WQEs the device consumed, 16 bits).
        wqe_cnt: 0xf0, 0x10;
        /// DMA address of the doorbell record.
        dbr_addr: 0x140, 0x40;
    }
}

/// The layouts of this module.
pub const LAYOUTS: &[&Layout] = &[
    &create_srq_in::LAYOUT,
    &create_srq_out::LAYOUT,
    &destroy_srq_in::LAYOUT,
    &destroy_srq_out::LAYOUT,
    &query_srq_in::LAYOUT,
    &query_srq_out::LAYOUT,
    &arm_rq_in::LAYOUT,
    &arm_rq_out::LAYOUT,
    &srqc::LAYOUT,
];

header_enum! {
    /// `srqc.state` (`MLX5_SRQC_STATE_*`).
    pub enum SrqcState: u8 in Mlx5Ifc {
        /// Working.
        Good = 0x0 => "MLX5_SRQC_STATE_GOOD",
        /// In error.
        Error = 0x1 => "MLX5_SRQC_STATE_ERROR",
    }
}

header_enum! {
    /// `arm_rq_in.op_mod` (`MLX5_ARM_RQ_IN_OP_MOD_*`).
    pub enum ArmRqOpMod: u16 in Mlx5Ifc {
        /// Arm an SRQ.
        Srq = 0x1 => "MLX5_ARM_RQ_IN_OP_MOD_SRQ",
        /// Arm an XRQ.
        Xrq = 0x2 => "MLX5_ARM_RQ_IN_OP_MOD_XRQ",
    }
}

/// An srqc field placed where CREATE_SRQ and QUERY_SRQ carry the context (byte 0x10).
pub const fn in_command(field: Field) -> Field {
    field.at(create_srq_in::srq_context_entry.bit)
}

/// Byte offset of the page list in CREATE_SRQ and QUERY_SRQ (0x110).
pub const PAS_OFFSET: usize = create_srq_in::pas.byte_offset();

/// What a CREATE_SRQ describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqParams {
    /// log2 of the number of WQEs.
    pub log_srq_size: u8,
    /// log2 of the WQE stride minus 4.
    pub log_rq_stride: u8,
    /// Protection domain.
    pub pd: u32,
    /// Limit watermark (0: not armed).
    pub lwm: u16,
    /// Doorbell record address.
    pub dbr_addr: u64,
    /// log2 of the buffer page size minus 12.
    pub log_page_size: u8,
}

/// A CREATE_SRQ input for `p` over the pages `pas`.
pub fn create_srq_input(p: &SrqParams, pas: &[u64]) -> Vec<u8> {
    let len = cmd::len_with_flex64(&create_srq_in::LAYOUT, pas.len()).unwrap_or(0);
    let mut input = cmd::new_input(Opcode::CreateSrq, 0, len);
    let s = |input: &mut Vec<u8>, f: Field, v: u64| in_command(f).set(input, v);
    s(&mut input, srqc::state, SrqcState::Good.value().into());
    s(&mut input, srqc::log_srq_size, p.log_srq_size.into());
    s(&mut input, srqc::log_rq_stride, p.log_rq_stride.into());
    s(&mut input, srqc::pd, p.pd.into());
    s(&mut input, srqc::lwm, p.lwm.into());
    s(&mut input, srqc::log_page_size, p.log_page_size.into());
    s(&mut input, srqc::dbr_addr, p.dbr_addr);
    // The buffer was sized for the list above.
    let _ = cmd::set_flex64(&mut input, create_srq_in::pas, pas);
    input
}

/// An ARM_RQ input setting the limit of SRQ `srqn` to `lwm`.
pub fn arm_srq_input(srqn: u32, lwm: u16) -> Vec<u8> {
    let mut input = cmd::new_input(Opcode::ArmRq, ArmRqOpMod::Srq.value(), arm_rq_in::SIZE);
    arm_rq_in::srq_number.set(&mut input, srqn.into());
    arm_rq_in::lwm.set(&mut input, lwm.into());
    input
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_srq_placement() {
        let p = SrqParams {
            log_srq_size: 10,
            log_rq_stride: 1,
            pd: 0x12_3456,
            lwm: 0x40,
            dbr_addr: 0xdead_0040,
            log_page_size: 0,
        };
        let input = create_srq_input(&p, &[0x10_0000, 0x10_1000]);
        assert_eq!(input.len(), 0x110 + 16);
        assert_eq!(&input[..2], &[0x07, 0x00]);
        // srqc at 0x10: state | log_srq_size in byte 0; log_rq_stride the low 3 bits of byte 4.
        assert_eq!(input[0x10], 0x0a);
        assert_eq!(input[0x14], 0x01);
        // pd: dword 6 of the srqc; lwm: upper half of dword 7.
        assert_eq!(&input[0x28..0x2c], &[0, 0x12, 0x34, 0x56]);
        assert_eq!(&input[0x2c..0x2e], &[0, 0x40]);
        // dbr_addr: dwords 10-11.
        assert_eq!(&input[0x38..0x40], &0xdead_0040u64.to_be_bytes());
        assert_eq!(PAS_OFFSET, 0x110);
        assert_eq!(&input[0x118..0x120], &0x10_1000u64.to_be_bytes());
    }

    #[test]
    fn arm_rq_placement() {
        let input = arm_srq_input(0x00ab_cdef, 0x1234);
        assert_eq!(input.len(), 16);
        assert_eq!(&input[..2], &[0x07, 0x03]);
        assert_eq!(&input[6..8], &[0, 1]);
        assert_eq!(&input[8..12], &[0, 0xab, 0xcd, 0xef]);
        assert_eq!(&input[12..16], &[0, 0, 0x12, 0x34]);
    }
}

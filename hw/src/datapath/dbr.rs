//! Doorbell records: small big-endian counters in host memory that the device reads
//! (`mlx5-datapath.md` §5).
//!
//! | object | word at +0 | word at +4 |
//! |---|---|---|
//! | QP | [`MLX5_RCV_DBR`]: RQ producer counter, WQEs, `& 0xffff` | [`MLX5_SND_DBR`]: SQ producer counter, WQEBBs, `& 0xffff` |
//! | SRQ | WQE counter, 16 bits | – |
//! | CQ | [`MLX5_CQ_SET_CI`]: consumer index `& 0xffffff` | [`MLX5_CQ_ARM_DB`]: the arm word `sn << 28 \| cmd \| ci` |
//!
//! The records are zeroed when the object is created and written with single 32-bit
//! stores; no C structure describes them (rdma-core and Linux index a `__be32` array),
//! so the types here are Rust-only views with their offsets checked below.

use zerocopy::byteorder::big_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

c_constants! {
    /// The constants of this module, for the conformance registry.
    pub(crate) const CONSTANTS;

    /// Index of the receive counter in a QP doorbell record (byte offset 0).
    Mlx5Dv MLX5_RCV_DBR: usize = 0;
    /// Index of the send counter in a QP doorbell record (byte offset 4).
    Mlx5Dv MLX5_SND_DBR: usize = 1;
    /// CQ arm command: request an event for the next completion.
    Mlx5Dv MLX5_CQ_DB_REQ_NOT: u32 = 0;
    /// CQ arm command: request an event for the next solicited completion only.
    Mlx5Dv MLX5_CQ_DB_REQ_NOT_SOL: u32 = 1 << 24;
}

/// Index of the consumer-index word in a CQ doorbell record (rdma-core private
/// `providers/mlx5/mlx5.h` `MLX5_CQ_SET_CI`; not in an installed header).
pub const MLX5_CQ_SET_CI: usize = 0;
/// Index of the arm word in a CQ doorbell record (rdma-core private
/// `providers/mlx5/mlx5.h` `MLX5_CQ_ARM_DB`; not in an installed header).
pub const MLX5_CQ_ARM_DB: usize = 1;

/// Size of a QP or CQ doorbell record (two 32-bit words).
pub const DBR_SIZE: usize = 8;

/// The value of the QP receive counter word: the RQ WQE counter, 16 bits.
#[inline]
pub const fn rq_counter(head: u32) -> u32 {
    head & 0xffff
}

/// The value of the QP send counter word: the SQ WQEBB counter (the next free WQEBB),
/// 16 bits.
#[inline]
pub const fn sq_counter(cur_post: u32) -> u32 {
    cur_post & 0xffff
}

/// The value of the CQ consumer-index word: 24 bits of the consumer index.
#[inline]
pub const fn cq_set_ci(cons_index: u32) -> u32 {
    cons_index & 0x00ff_ffff
}

/// The CQ arm command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqArmCmd {
    /// [`MLX5_CQ_DB_REQ_NOT`]: an event for the next completion.
    NextCompletion,
    /// [`MLX5_CQ_DB_REQ_NOT_SOL`]: an event for the next solicited completion.
    Solicited,
}

impl CqArmCmd {
    /// The command bits of the arm word.
    pub const fn bits(self) -> u32 {
        match self {
            CqArmCmd::NextCompletion => MLX5_CQ_DB_REQ_NOT,
            CqArmCmd::Solicited => MLX5_CQ_DB_REQ_NOT_SOL,
        }
    }
}

/// The CQ arm word: `(arm_sn & 3) << 28 | cmd | (cons_index & 0xffffff)`, written
/// to the record's arm word and as the high half of the UAR doorbell (rdma-core
/// `mlx5_arm_cq`, Linux `mlx5_cq_arm`). `arm_sn` counts acknowledged CQ events.
#[inline]
pub const fn cq_arm_word(arm_sn: u32, cmd: CqArmCmd, cons_index: u32) -> u32 {
    ((arm_sn & 3) << 28) | cmd.bits() | cq_set_ci(cons_index)
}

/// The 64-bit value of the CQ arm doorbell, for
/// [`Bus::write64`](crate::Bus::write64) at UAR + [`MLX5_CQ_DOORBELL`](crate::datapath::uar::MLX5_CQ_DOORBELL):
/// the arm word in bytes 0-3 and the CQ number in bytes 4-7.
#[inline]
pub const fn cq_arm_doorbell(arm_word: u32, cqn: u32) -> u64 {
    ((arm_word as u64) << 32) | cqn as u64
}

/// Splits a CQ arm word into `(sn, cmd bits, ci)`: the device side's decoder.
#[inline]
pub const fn decode_cq_arm_word(word: u32) -> (u8, u32, u32) {
    (
        ((word >> 28) & 3) as u8,
        word & MLX5_CQ_DB_REQ_NOT_SOL,
        word & 0x00ff_ffff,
    )
}

/// A QP doorbell record as it sits in host memory.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct QpDoorbellRecord {
    /// RQ producer counter (WQEs), word [`MLX5_RCV_DBR`].
    pub rcv: U32,
    /// SQ producer counter (WQEBBs), word [`MLX5_SND_DBR`].
    pub snd: U32,
}
checked_view!(QpDoorbellRecord, "qp doorbell record");

impl QpDoorbellRecord {
    /// The RQ producer counter.
    pub fn rq_head(&self) -> u16 {
        self.rcv.get() as u16
    }

    /// The SQ producer counter.
    pub fn sq_head(&self) -> u16 {
        self.snd.get() as u16
    }
}

/// A CQ doorbell record as it sits in host memory.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct CqDoorbellRecord {
    /// Consumer index, word [`MLX5_CQ_SET_CI`].
    pub set_ci: U32,
    /// Arm word, word [`MLX5_CQ_ARM_DB`].
    pub arm_db: U32,
}
checked_view!(CqDoorbellRecord, "cq doorbell record");

impl CqDoorbellRecord {
    /// The consumer index (24 bits).
    pub fn consumer_index(&self) -> u32 {
        cq_set_ci(self.set_ci.get())
    }

    /// The arm word decoded as `(sn, cmd bits, ci)`.
    pub fn arm(&self) -> (u8, u32, u32) {
        decode_cq_arm_word(self.arm_db.get())
    }
}

const _: () = {
    assert!(core::mem::offset_of!(QpDoorbellRecord, rcv) == MLX5_RCV_DBR * 4);
    assert!(core::mem::offset_of!(QpDoorbellRecord, snd) == MLX5_SND_DBR * 4);
    assert!(core::mem::offset_of!(CqDoorbellRecord, set_ci) == MLX5_CQ_SET_CI * 4);
    assert!(core::mem::offset_of!(CqDoorbellRecord, arm_db) == MLX5_CQ_ARM_DB * 4);
    assert!(core::mem::size_of::<QpDoorbellRecord>() == DBR_SIZE);
    assert!(core::mem::size_of::<CqDoorbellRecord>() == DBR_SIZE);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qp_record_layout() {
        let mut r = QpDoorbellRecord::zeroed();
        r.rcv = U32::new(rq_counter(0x1_0005));
        r.snd = U32::new(sq_counter(0x2_abcd));
        assert_eq!(r.as_bytes(), [0, 0, 0, 5, 0, 0, 0xab, 0xcd]);
        assert_eq!((r.rq_head(), r.sq_head()), (5, 0xabcd));
    }

    #[test]
    fn cq_arm_word_and_doorbell() {
        let w = cq_arm_word(5, CqArmCmd::Solicited, 0x0123_4567);
        assert_eq!(w, 0x1123_4567);
        assert_eq!(
            decode_cq_arm_word(w),
            (1, MLX5_CQ_DB_REQ_NOT_SOL, 0x23_4567)
        );
        let w = cq_arm_word(2, CqArmCmd::NextCompletion, 7);
        assert_eq!(w, 0x2000_0007);
        assert_eq!(
            cq_arm_doorbell(w, 0x42).to_be_bytes(),
            [0x20, 0, 0, 7, 0, 0, 0, 0x42]
        );
        let mut r = CqDoorbellRecord::zeroed();
        r.set_ci = U32::new(cq_set_ci(0xff00_0010));
        r.arm_db = U32::new(w);
        assert_eq!(r.as_bytes(), [0, 0, 0, 0x10, 0x20, 0, 0, 7]);
        assert_eq!(r.consumer_index(), 0x10);
        assert_eq!(r.arm(), (2, 0, 7));
    }
}

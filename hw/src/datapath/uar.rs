//! UAR pages: where the doorbells live in BAR0 (`mlx5-datapath.md` §5.4, §6;
//! `mlx5-controlpath.md` §5.2, §8).
//!
//! ALLOC_UAR returns an index; with `log_uar_page_sz = 0` the UAR is the 4 KiB page at
//! BAR0 + `index * 4096` ([`uar_bar_offset`]). Inside it:
//!
//! | offset | register | write |
//! |---|---|---|
//! | [`MLX5_CQ_DOORBELL`] 0x20 | CQ arm doorbell | 64-bit: arm word, CQN ([`crate::datapath::dbr::cq_arm_doorbell`]) |
//! | [`EQ_DOORBELL_ARM`] 0x40 | EQ consumer index, and arm | 32-bit: `eqn << 24 \| ci` ([`eq_doorbell_value`]) |
//! | [`EQ_DOORBELL_NO_ARM`] 0x48 | EQ consumer index without arming | same value |
//! | [`MLX5_BF_OFFSET`] 0x800 + k · `bf_reg_size` | BlueFlame register k (k < [`MLX5_BFREGS_PER_UAR`]) | 8-byte doorbell or BlueFlame copy |
//!
//! Each BlueFlame register is used as two alternating halves of `bf_reg_size / 2` bytes
//! (`bf_reg_size = 1 << HCA_CAP.log_bf_reg_size`, 512 on common parts): a send doorbell
//! goes to `bfreg + offset`, then `offset ^= bf_reg_size / 2`.

use crate::bus::ADAPTER_PAGE_SIZE;

c_constants! {
    /// The constants of this module, for the conformance registry.
    pub(crate) const CONSTANTS;

    /// Offset of the CQ arm doorbell in a UAR page (also a macro in Linux `doorbell.h`).
    Mlx5Dv MLX5_CQ_DOORBELL: usize = 0x20;
    /// Offset of the first BlueFlame register in a UAR page (Linux `doorbell.h`; also
    /// rdma-core's private `mlx5.h`).
    Doorbell MLX5_BF_OFFSET: usize = 0x800;
    /// BlueFlame registers per UAR page.
    Device MLX5_BFREGS_PER_UAR: usize = 4;
    /// BlueFlame registers per UAR that are not "fast path" (bfregs 0 and 1).
    Device MLX5_NON_FP_BFREGS_PER_UAR: usize = 2;
    /// Fast-path BlueFlame registers per UAR (bfregs 2 and 3).
    Device MLX5_FP_BFREGS_PER_UAR: usize = 2;
}

/// Offset of the EQ doorbell that updates the consumer index **and arms** the EQ
/// (Linux `MLX5_EQ_DOORBEL_OFFSET` in `drivers/net/ethernet/mellanox/mlx5/core/lib/eq.h`,
/// and rdma-core `mlx5_vfio.c`; not in an installed header).
pub const EQ_DOORBELL_ARM: usize = 0x40;

/// Offset of the EQ doorbell that updates the consumer index without arming: two dwords
/// after [`EQ_DOORBELL_ARM`] (Linux `eq_update_ci(eq, 0)`).
pub const EQ_DOORBELL_NO_ARM: usize = EQ_DOORBELL_ARM + 8;

/// The usual `bf_reg_size` (`log_bf_reg_size` = 9).
pub const DEFAULT_BF_REG_SIZE: usize = 512;

/// Byte offset in BAR0 of UAR page `index` (`log_uar_page_sz = 0`, 4 KiB UARs).
pub const fn uar_bar_offset(index: u32) -> usize {
    index as usize * ADAPTER_PAGE_SIZE
}

/// Offset inside a UAR page of BlueFlame register `k`.
pub const fn bfreg_offset(k: usize, bf_reg_size: usize) -> usize {
    MLX5_BF_OFFSET + k * bf_reg_size
}

/// Size of one half of a BlueFlame register: the largest WQE BlueFlame can carry.
pub const fn bf_buf_size(bf_reg_size: usize) -> usize {
    bf_reg_size / 2
}

/// The 32-bit value written to an EQ doorbell: `eqn << 24 | (ci & 0xffffff)`.
pub const fn eq_doorbell_value(eqn: u8, consumer_index: u32) -> u32 {
    ((eqn as u32) << 24) | (consumer_index & 0x00ff_ffff)
}

/// Splits an EQ doorbell value into `(eqn, ci)`.
pub const fn decode_eq_doorbell(value: u32) -> (u8, u32) {
    ((value >> 24) as u8, value & 0x00ff_ffff)
}

/// The offset of the EQ doorbell for an update with or without arming.
pub const fn eq_doorbell_offset(arm: bool) -> usize {
    if arm {
        EQ_DOORBELL_ARM
    } else {
        EQ_DOORBELL_NO_ARM
    }
}

/// What a write at some offset of a UAR page means: the device side's decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UarRegister {
    /// The CQ arm doorbell (8 bytes at [`MLX5_CQ_DOORBELL`]).
    CqArm,
    /// EQ consumer index update with arm.
    EqArm,
    /// EQ consumer index update without arm.
    EqNoArm,
    /// Inside BlueFlame register `bfreg`, half `half` (0 or 1), `offset` bytes into
    /// the half (0 for a doorbell or the start of a BlueFlame copy).
    BlueFlame {
        /// BlueFlame register index, below [`MLX5_BFREGS_PER_UAR`].
        bfreg: usize,
        /// Which half of the register.
        half: usize,
        /// Offset inside the half.
        offset: usize,
    },
    /// Nothing the data path defines.
    Unknown,
}

/// Classifies offset `off` of a UAR page for a device whose `bf_reg_size` is
/// `bf_reg_size` (a power of two, at least 2). Never panics.
pub fn classify(off: usize, bf_reg_size: usize) -> UarRegister {
    match off {
        MLX5_CQ_DOORBELL => UarRegister::CqArm,
        EQ_DOORBELL_ARM => UarRegister::EqArm,
        EQ_DOORBELL_NO_ARM => UarRegister::EqNoArm,
        _ if bf_reg_size >= 2 && off >= MLX5_BF_OFFSET => {
            let rel = off - MLX5_BF_OFFSET;
            let bfreg = rel / bf_reg_size;
            if bfreg >= MLX5_BFREGS_PER_UAR || off >= ADAPTER_PAGE_SIZE {
                return UarRegister::Unknown;
            }
            let half_size = bf_buf_size(bf_reg_size);
            let in_reg = rel % bf_reg_size;
            UarRegister::BlueFlame {
                bfreg,
                half: in_reg / half_size,
                offset: in_reg % half_size,
            }
        }
        _ => UarRegister::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets() {
        assert_eq!(uar_bar_offset(3), 0x3000);
        assert_eq!(bfreg_offset(0, 512), 0x800);
        assert_eq!(bfreg_offset(1, 512), 0xa00);
        assert_eq!(bfreg_offset(3, 512), 0xe00);
        assert_eq!(bf_buf_size(512), 256);
        assert_eq!(eq_doorbell_offset(true), 0x40);
        assert_eq!(eq_doorbell_offset(false), 0x48);
        assert_eq!(eq_doorbell_value(7, 0x1234_5678), 0x0734_5678);
        assert_eq!(decode_eq_doorbell(0x0734_5678), (7, 0x34_5678));
    }

    #[test]
    fn classification() {
        assert_eq!(classify(0x20, 512), UarRegister::CqArm);
        assert_eq!(classify(0x40, 512), UarRegister::EqArm);
        assert_eq!(classify(0x48, 512), UarRegister::EqNoArm);
        assert_eq!(
            classify(0x900, 512),
            UarRegister::BlueFlame {
                bfreg: 0,
                half: 1,
                offset: 0
            }
        );
        assert_eq!(
            classify(0xa48, 512),
            UarRegister::BlueFlame {
                bfreg: 1,
                half: 0,
                offset: 0x48
            }
        );
        assert_eq!(classify(0x1000, 512), UarRegister::Unknown);
        assert_eq!(classify(0x24, 512), UarRegister::Unknown);
        assert_eq!(classify(0x800, 0), UarRegister::Unknown);
        assert_eq!(classify(usize::MAX, 512), UarRegister::Unknown);
    }
}

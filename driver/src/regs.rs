//! The init-segment registers the control plane touches (BAR0 offsets of
//! `struct mlx5_init_seg`, Linux `device.h`), and the UAR offsets of the EQ doorbell.

/// `fw_rev`: [31:16] minor, [15:0] major.
pub(crate) const FW_REV: usize = 0x00;
/// `cmdif_rev_fw_sub`: [31:16] command interface revision, [15:0] sub-minor.
pub(crate) const CMDIF_REV_FW_SUB: usize = 0x04;
/// `cmdq_addr_h`: command queue address bits 63..32.
pub(crate) const CMDQ_ADDR_H: usize = 0x10;
/// `cmdq_addr_l_sz`: address bits 31..12, nic_interface [10:8], log size [7:4], log
/// stride [3:0].
pub(crate) const CMDQ_ADDR_L_SZ: usize = 0x14;
/// `cmd_dbell`: command doorbell vector.
pub(crate) const CMD_DBELL: usize = 0x18;
/// `initializing`: bit 31 set while firmware initializes.
pub(crate) const INITIALIZING: usize = 0x1fc;
/// `health.fw_ver`: all ones when the device is gone.
pub(crate) const HEALTH_FW_VER: usize = 0x230;
/// The health dword holding `irisc_index` [31:24], `synd` [23:16], `ext_synd` [15:0].
pub(crate) const HEALTH_SYND_DWORD: usize = 0x23c;
/// `health_counter`: [31:24] health syndrome, [23:0] the counter.
pub(crate) const HEALTH_COUNTER: usize = 0x1010;
/// The counter bits of [`HEALTH_COUNTER`].
pub(crate) const HEALTH_COUNTER_MASK: u32 = 0x00ff_ffff;

/// The command interface revision this driver speaks (`CMD_IF_REV`).
pub(crate) const CMD_IF_REV: u16 = 5;

/// EQ doorbell in a UAR page: update the consumer index and arm
/// (`MLX5_EQ_DOORBEL_OFFSET`).
pub(crate) const UAR_EQ_ARM: usize = 0x40;
/// EQ doorbell in a UAR page: update the consumer index without arming.
pub(crate) const UAR_EQ_UPDATE_CI: usize = 0x48;
/// Bytes per UAR page with `log_uar_page_sz = 0`.
pub(crate) const UAR_PAGE_SIZE: usize = 4096;

/// The NIC interface mode from a `cmdq_addr_l_sz` value: both drivers read 3 bits.
#[inline]
pub(crate) fn nic_interface(cmdq_addr_l_sz: u32) -> u8 {
    ((cmdq_addr_l_sz >> 8) & 7) as u8
}

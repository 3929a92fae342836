//! The init-segment registers and UAR doorbells the control plane touches, from the
//! register model (`ferroverbs_hw::control::iseg`, `ferroverbs_hw::datapath::uar`).

use ferroverbs_hw::control::iseg::{
    health_buffer, initial_seg, nic_interface_of, reg_get, HEALTH_IRISC_SYND,
};
pub(crate) use ferroverbs_hw::control::iseg::{
    CMDIF_REV_FW_SUB, CMDQ_ADDR_H, CMDQ_ADDR_L_SZ, CMD_DBELL, CMD_IF_REV, FW_REV, HEALTH_COUNTER,
    HEALTH_FW_VER, HEALTH_RFR_SEVERITY, INITIALIZING,
};
pub(crate) use ferroverbs_hw::datapath::uar::{
    eq_doorbell_offset, eq_doorbell_value, uar_bar_offset,
};

/// The health dword holding `irisc_index` [31:24], `synd` [23:16] and `ext_synd`
/// [15:0] (`struct health_buffer` bytes 0x3c..0x40).
pub(crate) const HEALTH_SYND_DWORD: usize = HEALTH_IRISC_SYND;

/// The RFR (reset for recovery requested) bit of the dword holding `rfr_severity`:
/// bit 7 of that byte, which is the dword's top byte (rdma-core reads it as bit 31 of
/// `health.rfr`, `MLX5_RFR_OFFSET`; Linux as bit `MLX5_RFR_BIT_OFFSET` of the byte).
#[inline]
pub(crate) fn rfr(rfr_severity_dword: u32) -> bool {
    let field = health_buffer::rfr.at(initial_seg::health_buffer.bit);
    reg_get(field, rfr_severity_dword) != 0
}

/// The counter bits of the `health_counter` register.
#[inline]
pub(crate) fn health_counter(v: u32) -> u32 {
    reg_get(initial_seg::health_counter, v)
}

/// The `initializing` bit of its register.
#[inline]
pub(crate) fn initializing(v: u32) -> bool {
    reg_get(initial_seg::initializing, v) != 0
}

/// The NIC interface mode from a `cmdq_addr_l_sz` value: both drivers read 3 bits
/// [10:8] although the ifc declares 2 (`mlx5-controlpath.md` §1).
#[inline]
pub(crate) fn nic_interface(cmdq_addr_l_sz: u32) -> u8 {
    nic_interface_of(cmdq_addr_l_sz)
}

/// Command interface revision from `cmdif_rev_fw_sub`.
#[inline]
pub(crate) fn cmdif_rev(v: u32) -> u16 {
    reg_get(initial_seg::cmd_interface_rev, v) as u16
}

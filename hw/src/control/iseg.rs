//! The initialization segment ("iseg") at BAR0 offset 0.
//!
//! Two descriptions of the same registers exist in Linux and both are mirrored here:
//!
//! * the PRM view, [`initial_seg`] and [`health_buffer`] (`mlx5_ifc_initial_seg_bits`,
//!   `mlx5_ifc_health_buffer_bits` in `include/linux/mlx5/mlx5_ifc.h`), which names
//!   every bit field;
//! * the driver's view, [`InitSeg`] and [`HealthBuffer`] (`struct mlx5_init_seg`,
//!   `struct health_buffer` in `include/linux/mlx5/device.h`), which names every
//!   32-bit register and reaches further (the internal timer at 0x1000 is reserved in
//!   the PRM view). The register offsets below ([`FW_REV`], [`CMDQ_ADDR_L_SZ`], ...)
//!   are measured on it, so the conformance test checks them against `device.h`.
//!
//! Every register is a big-endian 32-bit value; [`Bus::read32`](crate::Bus::read32)
//! returns it already converted, and [`reg_get`] / [`reg_set`] pick a PRM field out of
//! such a value.

use core::mem::offset_of;

use zerocopy::byteorder::big_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::conformance::{CStruct, Header};
use crate::field::{Field, Layout};
use crate::prm_layout;

prm_layout! {
    /// The health buffer (`mlx5_ifc_health_buffer_bits`), 64 bytes at iseg + 0x200:
    /// firmware assert information, the firmware version as a health probe and the
    /// health syndrome. A `fw_version` of all ones means the PCI link is gone.
    pub mod health_buffer = "health_buffer" (0x200) {
        /// Address of the last firmware assert (spelt `assert_existptr` in the header).
        assert_existptr: 0x100, 0x20;
        /// Return address of the last firmware assert.
        assert_callra: 0x120, 0x20;
        /// Firmware time stamp of the health record.
        time: 0x160, 0x20;
        /// Firmware version; all ones when the device no longer answers.
        fw_version: 0x180, 0x20;
        /// Hardware id.
        hw_id: 0x1a0, 0x20;
        /// Reset-for-recovery requested (bit 7 of `rfr_severity` in `device.h`).
        rfr: 0x1c0, 1;
        /// `severity` is valid.
        valid: 0x1c4, 1;
        /// Severity of the health event.
        severity: 0x1c5, 3;
        /// Index of the iRISC that reported the event.
        irisc_index: 0x1e0, 8;
        /// Health syndrome; 0 when healthy, else a [`HealthSyndrome`](super::HealthSyndrome).
        synd: 0x1e8, 8;
        /// Extended syndrome.
        ext_synd: 0x1f0, 0x10;
    }
}

prm_layout! {
    /// The initialization segment (`mlx5_ifc_initial_seg_bits`, 16396 bytes).
    pub mod initial_seg = "initial_seg" (0x20060) {
        /// Firmware minor revision (register `fw_rev` `[31:16]`).
        fw_rev_minor: 0x0, 0x10;
        /// Firmware major revision (`fw_rev` `[15:0]`).
        fw_rev_major: 0x10, 0x10;
        /// Command interface revision, 5 for every mlx5 device (`cmdif_rev_fw_sub` `[31:16]`).
        cmd_interface_rev: 0x20, 0x10;
        /// Firmware sub-minor revision (`cmdif_rev_fw_sub` `[15:0]`).
        fw_rev_subminor: 0x30, 0x10;
        /// Bits 63..32 of the command queue's DMA address (`cmdq_addr_h`).
        cmdq_phy_addr_63_32: 0x80, 0x20;
        /// Bits 31..12 of the command queue's DMA address (`cmdq_addr_l_sz` `[31:12]`).
        cmdq_phy_addr_31_12: 0xa0, 0x14;
        /// NIC interface mode (`cmdq_addr_l_sz` `[9:8]`); both drivers read 3 bits `[10:8]`,
        /// see [`nic_interface_of`](super::nic_interface_of).
        nic_interface: 0xb6, 2;
        /// log2 of the number of command queue entries (read-only).
        log_cmdq_size: 0xb8, 4;
        /// log2 of the command queue entry stride in bytes (read-only).
        log_cmdq_stride: 0xbc, 4;
        /// Command doorbell: bit *i* rings queue entry *i* (`cmd_dbell`).
        command_doorbell_vector: 0xc0, 0x20;
        /// 1 while firmware is initializing, 0 when it accepts commands.
        initializing: 0xfe0, 1;
        /// NIC interface modes the device supports.
        nic_interface_supported: 0xfe5, 3;
        /// 1 on the embedded-CPU (ECPF) side of a SmartNIC.
        embedded_cpu: 0xfe8, 1;
        /// The [`health_buffer`](super::health_buffer) at byte 0x200.
        health_buffer: 0x1000, 0x200;
        /// Offset used by the NO_DRAM_NIC interface mode.
        no_dram_nic_offset: 0x1200, 0x20;
        /// INTx clear (unused with MSI-X; `device.h` names `clr_intx` at 0x200c instead).
        clear_int: 0x807f, 1;
        /// Health syndrome mirror (`health_counter` register `[31:24]`).
        health_syndrome: 0x8080, 8;
        /// Free-running health counter that firmware advances (`health_counter` `[23:0]`).
        health_counter: 0x8088, 0x18;
    }
}

/// `struct health_buffer` of `device.h`: the health buffer as 32-bit registers.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct HealthBuffer {
    /// Firmware assert variables.
    pub assert_var: [U32; 6],
    /// Reserved.
    pub rsvd0: [U32; 2],
    /// Address of the last firmware assert.
    pub assert_exit_ptr: U32,
    /// Return address of the last firmware assert.
    pub assert_callra: U32,
    /// Reserved.
    pub rsvd1: [U32; 1],
    /// Firmware time stamp.
    pub time: U32,
    /// Firmware version; all ones when the PCI link is gone.
    pub fw_ver: U32,
    /// Hardware id.
    pub hw_id: U32,
    /// Bit 7 ([`MLX5_RFR_BIT_OFFSET`]): reset for recovery requested; bit 3: severity
    /// valid; bits 2..0: severity.
    pub rfr_severity: u8,
    /// Reserved.
    pub rsvd2: [u8; 3],
    /// Index of the reporting iRISC.
    pub irisc_index: u8,
    /// Health syndrome, 0 when healthy.
    pub synd: u8,
    /// Extended syndrome.
    pub ext_synd: U16,
}

/// `struct mlx5_init_seg` of `device.h`: the initialization segment as 32-bit registers.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct InitSeg {
    /// `[31:16]` minor, `[15:0]` major firmware revision.
    pub fw_rev: U32,
    /// `[31:16]` command interface revision, `[15:0]` firmware sub-minor revision.
    pub cmdif_rev_fw_sub: U32,
    /// Reserved.
    pub rsvd0: [U32; 2],
    /// Command queue address, bits 63..32.
    pub cmdq_addr_h: U32,
    /// Command queue address bits 31..12, NIC interface, log size and log stride.
    pub cmdq_addr_l_sz: U32,
    /// Command doorbell vector.
    pub cmd_dbell: U32,
    /// Reserved.
    pub rsvd1: [U32; 120],
    /// `[31]` initializing, `[30]` FW reset supported, `[26:24]` NIC interfaces supported,
    /// `[23]` embedded CPU.
    pub initializing: U32,
    /// The health buffer.
    pub health: HealthBuffer,
    /// Reserved.
    pub rsvd2: [U32; 878],
    /// Command execution timeout (newer firmware).
    pub cmd_exec_to: U32,
    /// Timeout of the post-command-queue initializing wait (newer firmware).
    pub cmd_q_init_to: U32,
    /// Free-running device clock, high 32 bits.
    pub internal_timer_h: U32,
    /// Free-running device clock, low 32 bits.
    pub internal_timer_l: U32,
    /// Reserved.
    pub rsvd3: [U32; 2],
    /// `[31:24]` health syndrome, `[23:0]` health counter.
    pub health_counter: U32,
    /// Reserved.
    pub rsvd4: [U32; 11],
    /// Real-time clock, high 32 bits.
    pub real_time_h: U32,
    /// Real-time clock, low 32 bits.
    pub real_time_l: U32,
    /// Reserved.
    pub rsvd5: [U32; 1006],
    /// IEEE 1588 clock.
    pub ieee1588_clk: U64,
    /// IEEE 1588 clock type.
    pub ieee1588_clk_type: U32,
    /// INTx clear.
    pub clr_intx: U32,
}

/// Byte offset of `fw_rev` (0x0).
pub const FW_REV: usize = offset_of!(InitSeg, fw_rev);
/// Byte offset of `cmdif_rev_fw_sub` (0x4).
pub const CMDIF_REV_FW_SUB: usize = offset_of!(InitSeg, cmdif_rev_fw_sub);
/// Byte offset of `cmdq_addr_h` (0x10).
pub const CMDQ_ADDR_H: usize = offset_of!(InitSeg, cmdq_addr_h);
/// Byte offset of `cmdq_addr_l_sz` (0x14).
pub const CMDQ_ADDR_L_SZ: usize = offset_of!(InitSeg, cmdq_addr_l_sz);
/// Byte offset of the command doorbell `cmd_dbell` (0x18).
pub const CMD_DBELL: usize = offset_of!(InitSeg, cmd_dbell);
/// Byte offset of the `initializing` register (0x1fc).
pub const INITIALIZING: usize = offset_of!(InitSeg, initializing);
/// Byte offset of the health buffer (0x200).
pub const HEALTH: usize = offset_of!(InitSeg, health);
/// Byte offset of the health buffer's `fw_ver` (0x230).
pub const HEALTH_FW_VER: usize = HEALTH + offset_of!(HealthBuffer, fw_ver);
/// Byte offset of the dword holding `rfr_severity` (0x238).
pub const HEALTH_RFR_SEVERITY: usize = HEALTH + offset_of!(HealthBuffer, rfr_severity);
/// Byte offset of the dword holding `irisc_index`, `synd` and `ext_synd` (0x23c).
pub const HEALTH_IRISC_SYND: usize = HEALTH + offset_of!(HealthBuffer, irisc_index);
/// Byte offset of `cmd_exec_to` (0xff8).
pub const CMD_EXEC_TO: usize = offset_of!(InitSeg, cmd_exec_to);
/// Byte offset of `cmd_q_init_to` (0xffc).
pub const CMD_Q_INIT_TO: usize = offset_of!(InitSeg, cmd_q_init_to);
/// Byte offset of `internal_timer_h` (0x1000).
pub const INTERNAL_TIMER_H: usize = offset_of!(InitSeg, internal_timer_h);
/// Byte offset of `internal_timer_l` (0x1004).
pub const INTERNAL_TIMER_L: usize = offset_of!(InitSeg, internal_timer_l);
/// Byte offset of `health_counter` (0x1010).
pub const HEALTH_COUNTER: usize = offset_of!(InitSeg, health_counter);
/// Byte offset of `real_time_h` (0x1040).
pub const REAL_TIME_H: usize = offset_of!(InitSeg, real_time_h);
/// Byte offset of `real_time_l` (0x1044).
pub const REAL_TIME_L: usize = offset_of!(InitSeg, real_time_l);
/// Size of `struct mlx5_init_seg` (0x2010): the init segment as the drivers map it.
pub const INIT_SEG_SIZE: usize = core::mem::size_of::<InitSeg>();

/// The command interface revision every mlx5 driver requires (Linux `cmd.c`
/// `CMD_IF_REV`, rdma-core `mlx5_vfio.c`: anything else is refused).
pub const CMD_IF_REV: u16 = 5;

c_constants! {
    /// `device.h` constants about the init segment registers.
    pub const CONSTANTS;
        /// Shift of the NIC interface field in `cmdq_addr_l_sz` (`enum mlx5_cmd_addr_l_sz_offset`).
        Device MLX5_NIC_IFC_OFFSET: u32 = 8;
        /// Bit of `initializing` that says firmware reset is supported.
        Device MLX5_FW_RESET_SUPPORTED_OFFSET: u32 = 30;
        /// Bit of the health buffer's `rfr_severity` byte that requests a reset for recovery.
        Device MLX5_RFR_BIT_OFFSET: u32 = 0x7;

}

/// The NIC interface mode in `cmdq_addr_l_sz` `[10:8]` (Linux `MLX5_INITIAL_SEG_NIC_INTERFACE_*`
/// of `mlx5_ifc.h`, plus `SW_RESET` = 7 which the drivers write in health recovery).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NicInterface {
    /// Normal operation (`MLX5_INITIAL_SEG_NIC_INTERFACE_FULL_DRIVER`); what writing the
    /// command queue address with its low 12 bits zero requests.
    FullDriver = 0,
    /// NIC disabled (`MLX5_INITIAL_SEG_NIC_INTERFACE_DISABLED`), the end of a fast teardown.
    Disabled = 1,
    /// No-DRAM NIC mode (`MLX5_INITIAL_SEG_NIC_INTERFACE_NO_DRAM_NIC`).
    NoDramNic = 2,
    /// Software reset (Linux `MLX5_NIC_IFC_SW_RESET` in `health.c`, not in the 6.1 headers).
    SwReset = 7,
}

c_constants! {
    /// `mlx5_ifc.h` NIC interface values.
    pub const NIC_INTERFACE_CONSTANTS;
        /// Full driver mode.
        Mlx5Ifc MLX5_INITIAL_SEG_NIC_INTERFACE_FULL_DRIVER: u8 = NicInterface::FullDriver as u8;
        /// NIC disabled.
        Mlx5Ifc MLX5_INITIAL_SEG_NIC_INTERFACE_DISABLED: u8 = NicInterface::Disabled as u8;
        /// No-DRAM NIC.
        Mlx5Ifc MLX5_INITIAL_SEG_NIC_INTERFACE_NO_DRAM_NIC: u8 = NicInterface::NoDramNic as u8;

}

impl NicInterface {
    /// Decodes the 3-bit mode; `None` for a value no driver defines.
    pub const fn from_value(v: u8) -> Option<Self> {
        match v {
            0 => Some(NicInterface::FullDriver),
            1 => Some(NicInterface::Disabled),
            2 => Some(NicInterface::NoDramNic),
            7 => Some(NicInterface::SwReset),
            _ => None,
        }
    }
}

header_enum! {
    /// Bits of `nic_interface_supported` (`MLX5_INITIAL_SEG_NIC_INTERFACE_SUPPORTED_*`).
    pub enum NicInterfaceSupported: u8 in Mlx5Ifc {
        /// Full driver mode.
        FullDriver = 0x0 => "MLX5_INITIAL_SEG_NIC_INTERFACE_SUPPORTED_FULL_DRIVER",
        /// Disabled mode.
        Disabled = 0x1 => "MLX5_INITIAL_SEG_NIC_INTERFACE_SUPPORTED_DISABLED",
        /// No-DRAM NIC mode.
        NoDramNic = 0x2 => "MLX5_INITIAL_SEG_NIC_INTERFACE_SUPPORTED_NO_DRAM_NIC",
    }
}

header_enum! {
    /// Health syndromes (`health_buffer.synd`, `MLX5_INITIAL_SEG_HEALTH_SYNDROME_*`).
    pub enum HealthSyndrome: u8 in Mlx5Ifc {
        /// Firmware internal error.
        FwInternalErr = 0x1 => "MLX5_INITIAL_SEG_HEALTH_SYNDROME_FW_INTERNAL_ERR",
        /// An iRISC stopped responding.
        DeadIrisc = 0x7 => "MLX5_INITIAL_SEG_HEALTH_SYNDROME_DEAD_IRISC",
        /// Unrecoverable hardware error.
        HwFatalErr = 0x8 => "MLX5_INITIAL_SEG_HEALTH_SYNDROME_HW_FATAL_ERR",
        /// Firmware CRC error.
        FwCrcErr = 0x9 => "MLX5_INITIAL_SEG_HEALTH_SYNDROME_FW_CRC_ERR",
        /// ICM fetch PCI error.
        IcmFetchPciErr = 0xa => "MLX5_INITIAL_SEG_HEALTH_SYNDROME_ICM_FETCH_PCI_ERR",
        /// ICM page error.
        IcmPageErr = 0xb => "MLX5_INITIAL_SEG_HEALTH_SYNDROME_ICM_PAGE_ERR",
        /// Asynchronous EQ buffer overrun.
        AsynchronousEqBufOverrun = 0xc => "MLX5_INITIAL_SEG_HEALTH_SYNDROME_ASYNCHRONOUS_EQ_BUF_OVERRUN",
        /// EQ in error.
        EqInErr = 0xd => "MLX5_INITIAL_SEG_HEALTH_SYNDROME_EQ_IN_ERR",
        /// Invalid EQ.
        EqInv = 0xe => "MLX5_INITIAL_SEG_HEALTH_SYNDROME_EQ_INV",
        /// FFSER error.
        FfserErr = 0xf => "MLX5_INITIAL_SEG_HEALTH_SYNDROME_FFSER_ERR",
        /// High temperature.
        HighTempErr = 0x10 => "MLX5_INITIAL_SEG_HEALTH_SYNDROME_HIGH_TEMP_ERR",
    }
}

/// The layouts of this module.
pub const LAYOUTS: &[&Layout] = &[&initial_seg::LAYOUT, &health_buffer::LAYOUT];

/// The C structures of this module.
pub const C_STRUCTS: &[CStruct] = &[
    CStruct {
        header: Header::Device,
        name: "health_buffer",
        size: core::mem::size_of::<HealthBuffer>(),
        members: &[
            crate::c_member!(HealthBuffer, assert_var),
            crate::c_member!(HealthBuffer, rsvd0),
            crate::c_member!(HealthBuffer, assert_exit_ptr),
            crate::c_member!(HealthBuffer, assert_callra),
            crate::c_member!(HealthBuffer, rsvd1),
            crate::c_member!(HealthBuffer, time),
            crate::c_member!(HealthBuffer, fw_ver),
            crate::c_member!(HealthBuffer, hw_id),
            crate::c_member!(HealthBuffer, rfr_severity),
            crate::c_member!(HealthBuffer, rsvd2),
            crate::c_member!(HealthBuffer, irisc_index),
            crate::c_member!(HealthBuffer, synd),
            crate::c_member!(HealthBuffer, ext_synd),
        ],
    },
    CStruct {
        header: Header::Device,
        name: "mlx5_init_seg",
        size: INIT_SEG_SIZE,
        members: &[
            crate::c_member!(InitSeg, fw_rev),
            crate::c_member!(InitSeg, cmdif_rev_fw_sub),
            crate::c_member!(InitSeg, rsvd0),
            crate::c_member!(InitSeg, cmdq_addr_h),
            crate::c_member!(InitSeg, cmdq_addr_l_sz),
            crate::c_member!(InitSeg, cmd_dbell),
            crate::c_member!(InitSeg, rsvd1),
            crate::c_member!(InitSeg, initializing),
            crate::c_member!(InitSeg, health),
            crate::c_member!(InitSeg, rsvd2),
            crate::c_member!(InitSeg, cmd_exec_to),
            crate::c_member!(InitSeg, cmd_q_init_to),
            crate::c_member!(InitSeg, internal_timer_h),
            crate::c_member!(InitSeg, internal_timer_l),
            crate::c_member!(InitSeg, rsvd3),
            crate::c_member!(InitSeg, health_counter),
            crate::c_member!(InitSeg, rsvd4),
            crate::c_member!(InitSeg, real_time_h),
            crate::c_member!(InitSeg, real_time_l),
            crate::c_member!(InitSeg, rsvd5),
            crate::c_member!(InitSeg, ieee1588_clk),
            crate::c_member!(InitSeg, ieee1588_clk_type),
            crate::c_member!(InitSeg, clr_intx),
        ],
    },
];

/// Byte offset of the 32-bit register that holds `field` (a field of [`initial_seg`] or,
/// shifted with [`Field::at`], of the health buffer).
pub const fn reg_offset(field: Field) -> usize {
    (field.bit / 32 * 4) as usize
}

/// The field as it sits inside its own dword (bit offset modulo 32), or `None` when it
/// does not fit in one dword.
const fn in_dword(field: Field) -> Option<Field> {
    let off = field.bit % 32;
    if field.width == 0 || off + field.width > 32 {
        None
    } else {
        Some(Field::new(field.name, off, field.width))
    }
}

/// Reads `field` out of `value`, the value of the register at [`reg_offset`]`(field)`.
/// Returns 0 for a field that spans more than one dword.
pub fn reg_get(field: Field, value: u32) -> u32 {
    match in_dword(field) {
        Some(f) => f.get(&value.to_be_bytes()) as u32,
        None => 0,
    }
}

/// Writes `v` into `field` of `value`, the value of the register that holds it. A field
/// that spans more than one dword leaves `value` unchanged.
pub fn reg_set(field: Field, value: &mut u32, v: u32) {
    if let Some(f) = in_dword(field) {
        let mut b = value.to_be_bytes();
        f.set(&mut b, u64::from(v));
        *value = u32::from_be_bytes(b);
    }
}

/// The NIC interface mode of a `cmdq_addr_l_sz` value, read as both drivers read it:
/// 3 bits at [`MLX5_NIC_IFC_OFFSET`] (the header declares only 2; the value 7 needs 3).
pub const fn nic_interface_of(cmdq_addr_l_sz: u32) -> u8 {
    ((cmdq_addr_l_sz >> MLX5_NIC_IFC_OFFSET) & 7) as u8
}

/// The `cmdq_addr_l_sz` value to write to request NIC interface mode `mode`, keeping
/// the address bits of `current` (the drivers' `set_nic_state`; the read-only size bits
/// are written as zero).
pub const fn with_nic_interface(current: u32, mode: NicInterface) -> u32 {
    (current & 0xffff_f000) | ((mode as u32) << MLX5_NIC_IFC_OFFSET)
}

/// Whether the `initializing` register value says firmware is still busy (bit 31).
pub fn is_initializing(initializing: u32) -> bool {
    reg_get(initial_seg::initializing, initializing) != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromZeros;

    #[test]
    fn register_offsets_match_the_reference() {
        assert_eq!(FW_REV, 0x0);
        assert_eq!(CMDIF_REV_FW_SUB, 0x4);
        assert_eq!(CMDQ_ADDR_H, 0x10);
        assert_eq!(CMDQ_ADDR_L_SZ, 0x14);
        assert_eq!(CMD_DBELL, 0x18);
        assert_eq!(INITIALIZING, 0x1fc);
        assert_eq!(HEALTH, 0x200);
        assert_eq!(HEALTH_FW_VER, 0x230);
        assert_eq!(HEALTH_RFR_SEVERITY, 0x238);
        assert_eq!(HEALTH_IRISC_SYND, 0x23c);
        assert_eq!(CMD_EXEC_TO, 0xff8);
        assert_eq!(CMD_Q_INIT_TO, 0xffc);
        assert_eq!(INTERNAL_TIMER_H, 0x1000);
        assert_eq!(INTERNAL_TIMER_L, 0x1004);
        assert_eq!(HEALTH_COUNTER, 0x1010);
        assert_eq!(REAL_TIME_H, 0x1040);
        assert_eq!(INIT_SEG_SIZE, 0x2010);
        assert_eq!(core::mem::size_of::<HealthBuffer>(), 64);
    }

    #[test]
    fn prm_view_agrees_with_the_register_view() {
        // Every PRM field lies in the register the device.h view names for it.
        assert_eq!(reg_offset(initial_seg::fw_rev_minor), FW_REV);
        assert_eq!(reg_offset(initial_seg::cmd_interface_rev), CMDIF_REV_FW_SUB);
        assert_eq!(reg_offset(initial_seg::cmdq_phy_addr_63_32), CMDQ_ADDR_H);
        assert_eq!(reg_offset(initial_seg::log_cmdq_size), CMDQ_ADDR_L_SZ);
        assert_eq!(reg_offset(initial_seg::command_doorbell_vector), CMD_DBELL);
        assert_eq!(reg_offset(initial_seg::initializing), INITIALIZING);
        assert_eq!(initial_seg::health_buffer.byte_offset(), HEALTH);
        assert_eq!(
            health_buffer::LAYOUT.size(),
            core::mem::size_of::<HealthBuffer>()
        );
        let fw = health_buffer::fw_version.at(initial_seg::health_buffer.bit);
        assert_eq!(reg_offset(fw), HEALTH_FW_VER);
        let synd = health_buffer::synd.at(initial_seg::health_buffer.bit);
        assert_eq!(synd.byte_offset(), HEALTH + offset_of!(HealthBuffer, synd));
        assert_eq!(reg_offset(initial_seg::health_counter), HEALTH_COUNTER);
        // RFR is bit 7 of the rfr_severity byte, i.e. bit 31 of its dword.
        let rfr = health_buffer::rfr.at(initial_seg::health_buffer.bit);
        assert_eq!(reg_offset(rfr), HEALTH_RFR_SEVERITY);
        assert_eq!(reg_get(rfr, 1 << (24 + MLX5_RFR_BIT_OFFSET)), 1);
    }

    #[test]
    fn cmdq_addr_l_sz_low_byte() {
        // Reference §2.1: log_cmdq_size 5, log_cmdq_stride 6 read as low byte 0x56.
        let mut v = 0u32;
        reg_set(initial_seg::log_cmdq_size, &mut v, 5);
        reg_set(initial_seg::log_cmdq_stride, &mut v, 6);
        assert_eq!(v, 0x56);
        reg_set(initial_seg::cmdq_phy_addr_31_12, &mut v, 0xabcde);
        assert_eq!(v, 0xabcd_e056);
        assert_eq!(
            reg_get(initial_seg::cmdq_phy_addr_31_12, v) << 12,
            0xabcd_e000
        );
        assert_eq!(reg_get(initial_seg::log_cmdq_size, v), 5);
        assert_eq!(reg_get(initial_seg::log_cmdq_stride, v), 6);
        // The drivers' 3-bit NIC interface read and the fast-teardown write.
        let d = with_nic_interface(v, NicInterface::Disabled);
        assert_eq!(d, 0xabcd_e100);
        assert_eq!(nic_interface_of(d), NicInterface::Disabled as u8);
        assert_eq!(reg_get(initial_seg::nic_interface, d), 1);
        let r = with_nic_interface(v, NicInterface::SwReset);
        assert_eq!(nic_interface_of(r), 7);
        assert_eq!(NicInterface::from_value(7), Some(NicInterface::SwReset));
        assert_eq!(NicInterface::from_value(3), None);
    }

    #[test]
    fn revision_and_initializing_fields() {
        let v = u32::from(CMD_IF_REV) << 16 | 0x1234;
        assert_eq!(reg_get(initial_seg::cmd_interface_rev, v), 5);
        assert_eq!(reg_get(initial_seg::fw_rev_subminor, v), 0x1234);
        // fw_rev: minor in the high half, major in the low half.
        assert_eq!(reg_get(initial_seg::fw_rev_minor, 0x001c_0010), 0x1c);
        assert_eq!(reg_get(initial_seg::fw_rev_major, 0x001c_0010), 0x10);
        assert!(is_initializing(0x8000_0000));
        assert!(!is_initializing(0x4000_0000));
        assert_eq!(reg_get(initial_seg::embedded_cpu, 1 << 23), 1);
        assert_eq!(reg_get(initial_seg::health_counter, 0xab12_3456), 0x12_3456);
        assert_eq!(reg_get(initial_seg::health_syndrome, 0xab12_3456), 0xab);
        // A field wider than a dword is refused rather than misread.
        assert_eq!(reg_get(initial_seg::health_buffer, u32::MAX), 0);
    }

    #[test]
    fn register_struct_is_big_endian_bytes() {
        let mut seg = InitSeg::new_zeroed();
        seg.cmdif_rev_fw_sub.set(0x0005_0001);
        seg.health.fw_ver.set(0x1122_3344);
        let bytes = seg.as_bytes();
        assert_eq!(&bytes[4..8], &[0, 5, 0, 1]);
        assert_eq!(
            &bytes[HEALTH_FW_VER..HEALTH_FW_VER + 4],
            &[0x11, 0x22, 0x33, 0x44]
        );
        // The PRM fields read the same bytes (the register image is shorter than the
        // 16396-byte PRM view, but covers every field up to the health buffer).
        assert_eq!(initial_seg::cmd_interface_rev.get(bytes), 5);
        let fw = health_buffer::fw_version.at(initial_seg::health_buffer.bit);
        assert_eq!(fw.get(bytes), 0x1122_3344);
    }
}

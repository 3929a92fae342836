//! Access registers: ACCESS_REG and the registers bring-up touches.
//!
//! ACCESS_REG (op_mod 0 = write, 1 = read) carries a register id and the register's
//! bytes after the 16-byte header, in both directions. Bring-up writes HOST_ENDIANNESS
//! (0x7004); the RoCE tests of rdma-core bring a port up through PAOS (0x5006).
//!
//! The register ids are Linux `driver.h` `MLX5_REG_*` values; `driver.h` is not among
//! the headers the conformance fixtures cover, so they are plain constants here.

use crate::field::{Layout, TooShort};
use crate::prm_layout;

use super::cmd::{self, Opcode};

prm_layout! {
    /// ACCESS_REG input; op_mod 0 = write, 1 = read; the register data follows the header.
    pub mod access_register_in = "access_register_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// Register id (Linux `MLX5_REG_*`).
        register_id: 0x50, 0x10;
        /// Register-specific argument.
        argument: 0x60, 0x20;
        /// Flexible array of register data (32-bit units).
        register_data: 0x80, 0;
    }
}

prm_layout! {
    /// ACCESS_REG output; the register data follows the header.
    pub mod access_register_out = "access_register_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// Flexible array of register data (32-bit units).
        register_data: 0x80, 0;
    }
}

prm_layout! {
    /// The HOST_ENDIANNESS register (id 0x7004).
    pub mod register_host_endianness = "register_host_endianness" (0x80) {
        /// Host endianness: 0 little-endian, 1 big-endian (byte 0 = 0x00 or 0x80).
        he: 0, 1;
    }
}

prm_layout! {
    /// The PAOS register (port administrative and operational status, id 0x5006).
    pub mod paos_reg = "paos_reg" (0x80) {
        /// Switch id.
        swid: 0, 8;
        /// Local port number.
        local_port: 8, 8;
        /// Administrative port status: 1 = up, 2 = down (`MLX5_PORT_UP`/`DOWN`).
        admin_status: 0x14, 4;
        /// Operational port status: 1 = up, 2 = down.
        oper_status: 0x1c, 4;
        /// Admin status enable: apply `admin_status`.
        ase: 0x20, 1;
        /// Event enable: apply `e`.
        ee: 0x21, 1;
        /// Event generation: 0 none, 1 event, 2 polling.
        e: 0x3e, 2;
    }
}
/// The layouts of this module.
pub const LAYOUTS: &[&Layout] = &[
    &access_register_in::LAYOUT,
    &access_register_out::LAYOUT,
    &register_host_endianness::LAYOUT,
    &paos_reg::LAYOUT,
];

header_enum! {
    /// ACCESS_REG op_mod (`MLX5_ACCESS_REGISTER_IN_OP_MOD_*`).
    pub enum AccessRegisterOpMod: u16 in Mlx5Ifc {
        /// Write the register.
        Write = 0x0 => "MLX5_ACCESS_REGISTER_IN_OP_MOD_WRITE",
        /// Read the register.
        Read = 0x1 => "MLX5_ACCESS_REGISTER_IN_OP_MOD_READ",
    }
}

/// Register id of PMTU, port MTU (`MLX5_REG_PMTU`, Linux `driver.h`).
pub const MLX5_REG_PMTU: u16 = 0x5003;
/// Register id of PTYS, port type and speed (`MLX5_REG_PTYS`).
pub const MLX5_REG_PTYS: u16 = 0x5004;
/// Register id of PAOS, port administrative and operational status (`MLX5_REG_PAOS`).
pub const MLX5_REG_PAOS: u16 = 0x5006;
/// Register id of HOST_ENDIANNESS (`MLX5_REG_HOST_ENDIANNESS`).
pub const MLX5_REG_HOST_ENDIANNESS: u16 = 0x7004;
/// Register id of DTOR, default timeouts (`MLX5_REG_DTOR`).
pub const MLX5_REG_DTOR: u16 = 0xc00e;

/// PAOS `admin_status`/`oper_status`: port up (`MLX5_PORT_UP`, `driver.h`).
pub const MLX5_PORT_UP: u8 = 1;
/// PAOS `admin_status`/`oper_status`: port down (`MLX5_PORT_DOWN`, `driver.h`).
pub const MLX5_PORT_DOWN: u8 = 2;

/// The `he` value of this host: 0 little-endian, 1 big-endian (byte 0 of the register
/// is 0x00 or 0x80, Linux `device.h` `MLX5_SET_HOST_ENDIANNESS`).
pub const HOST_ENDIANNESS: u8 = if cfg!(target_endian = "big") { 1 } else { 0 };

/// An ACCESS_REG input for `register_id` carrying `data` (the register's bytes; for a
/// read, zeroes of the register's size).
pub fn access_register_input(
    op: AccessRegisterOpMod,
    register_id: u16,
    argument: u32,
    data: &[u8],
) -> Vec<u8> {
    let mut input = cmd::new_input(
        Opcode::AccessReg,
        op.value(),
        access_register_in::SIZE + data.len(),
    );
    access_register_in::register_id.set(&mut input, register_id.into());
    access_register_in::argument.set(&mut input, argument.into());
    input[access_register_in::SIZE..].copy_from_slice(data);
    input
}

/// The HOST_ENDIANNESS write of bring-up: `he` = [`HOST_ENDIANNESS`].
pub fn host_endianness_input() -> Vec<u8> {
    let mut reg = [0u8; register_host_endianness::SIZE];
    register_host_endianness::he.set(&mut reg, HOST_ENDIANNESS.into());
    access_register_input(
        AccessRegisterOpMod::Write,
        MLX5_REG_HOST_ENDIANNESS,
        0,
        &reg,
    )
}

/// The register bytes of an ACCESS_REG input or output (everything after the header).
pub fn register_data(msg: &[u8]) -> Result<&[u8], TooShort> {
    access_register_in::LAYOUT.check(msg)?;
    Ok(&msg[access_register_in::register_data.byte_offset()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_endianness_write() {
        let input = host_endianness_input();
        assert_eq!(input.len(), 32);
        assert_eq!(
            &input[..12],
            &[0x08, 0x05, 0, 0, 0, 0, 0, 0, 0, 0, 0x70, 0x04]
        );
        let he = if cfg!(target_endian = "big") {
            0x80
        } else {
            0x00
        };
        assert_eq!(
            register_data(&input).unwrap(),
            &[he, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        let mut reg = [0u8; 16];
        register_host_endianness::he.set(&mut reg, 1);
        assert_eq!(reg[0], 0x80);
        assert!(register_data(&input[..15]).is_err());
    }

    #[test]
    fn paos_fields() {
        let mut reg = [0u8; paos_reg::SIZE];
        paos_reg::local_port.set(&mut reg, 1);
        paos_reg::admin_status.set(&mut reg, MLX5_PORT_UP.into());
        paos_reg::oper_status.set(&mut reg, MLX5_PORT_DOWN.into());
        paos_reg::ase.set(&mut reg, 1);
        assert_eq!(&reg[..8], &[0, 1, 0x01, 0x02, 0x80, 0, 0, 0]);
        let input = access_register_input(AccessRegisterOpMod::Read, MLX5_REG_PAOS, 0, &reg);
        assert_eq!(cmd::op_mod(&input), Ok(1));
        assert_eq!(access_register_in::register_id.get(&input), 0x5006);
        assert_eq!(&input[16..], &reg);
    }
}

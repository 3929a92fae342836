//! The NIC vport: QUERY_VPORT_STATE, QUERY_NIC_VPORT_CONTEXT and
//! MODIFY_NIC_VPORT_CONTEXT with the vport context ([`nic_vport_context`]).
//!
//! On an Ethernet port RoCE must be switched on after INIT_HCA: MODIFY_NIC_VPORT_CONTEXT
//! with `field_select.roce_en` (bit 1 of the dword at 0x0c) and the context's `roce_en`
//! (absolute byte 0x103, bit 0). QUERY_NIC_VPORT_CONTEXT gives the permanent MAC and the
//! MTU; QUERY_VPORT_STATE the link state.

use crate::field::{Field, Layout, TooShort};
use crate::prm_layout;

use super::cmd::{self, Opcode};

prm_layout! {
    /// QUERY_VPORT_STATE input.
    pub mod query_vport_state_in = "query_vport_state_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// Address another vport.
        other_vport: 0x40, 1;
        /// Vport number.
        vport_number: 0x50, 0x10;
    }
}

prm_layout! {
    /// QUERY_VPORT_STATE output: the link state.
    pub mod query_vport_state_out = "query_vport_state_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// Administrative state (`MLX5_VPORT_ADMIN_STATE_*`).
        admin_state: 0x78, 4;
        /// Link state (`MLX5_QUERY_VPORT_STATE_OUT_STATE_*`).
        state: 0x7c, 4;
    }
}

prm_layout! {
    /// QUERY_NIC_VPORT_CONTEXT input.
    pub mod query_nic_vport_context_in = "query_nic_vport_context_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// Address another vport.
        other_vport: 0x40, 1;
        /// Vport number.
        vport_number: 0x50, 0x10;
        /// Which address list to report (`MLX5_NVPRT_LIST_TYPE_*`).
        allowed_list_type: 0x65, 3;
    }
}

prm_layout! {
    /// QUERY_NIC_VPORT_CONTEXT output.
    pub mod query_nic_vport_context_out = "query_nic_vport_context_out" (0x880) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// The NIC vport context ([`nic_vport_context`](super::nic_vport_context)).
        nic_vport_context: 0x80, 0x800;
    }
}

prm_layout! {
    /// MODIFY_NIC_VPORT_CONTEXT input: the context at byte 0x100, applied where `field_select` says.
    pub mod modify_nic_vport_context_in = "modify_nic_vport_context_in" (0x1000) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// Address another vport.
        other_vport: 0x40, 1;
        /// Vport number.
        vport_number: 0x50, 0x10;
        /// Which fields to modify ([`modify_nic_vport_field_select`](super::modify_nic_vport_field_select)).
        field_select: 0x60, 0x20;
        /// The NIC vport context ([`nic_vport_context`](super::nic_vport_context)).
        nic_vport_context: 0x800, 0x800;
    }
}

prm_layout! {
    /// MODIFY_NIC_VPORT_CONTEXT output.
    pub mod modify_nic_vport_context_out = "modify_nic_vport_context_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}

prm_layout! {
    /// The NIC vport context.
    pub mod nic_vport_context = "nic_vport_context" (0x800) {
        /// Minimum WQE inline mode.
        min_wqe_inline_mode: 5, 3;
        /// Disable multicast local loopback.
        disable_mc_local_lb: 0x1d, 1;
        /// Disable unicast local loopback.
        disable_uc_local_lb: 0x1e, 1;
        /// RoCE enabled on the vport.
        roce_en: 0x1f, 1;
        /// Arm a NIC_VPORT_CHANGE event.
        arm_change_event: 0x20, 1;
        /// Event on MTU change.
        event_on_mtu: 0x3b, 1;
        /// Event on promiscuous mode change.
        event_on_promisc_change: 0x3c, 1;
        /// Event on VLAN change.
        event_on_vlan_change: 0x3d, 1;
        /// Event on multicast address change.
        event_on_mc_address_change: 0x3e, 1;
        /// Event on unicast address change.
        event_on_uc_address_change: 0x3f, 1;
        /// vHCA id type.
        vhca_id_type: 0x40, 1;
        /// Affiliation criteria.
        affiliation_criteria: 0x4c, 4;
        /// vHCA this vport is affiliated with.
        affiliated_vhca_id: 0x50, 0x10;
        /// MTU in bytes (Ethernet frame).
        mtu: 0x130, 0x10;
        /// System image GUID.
        system_image_guid: 0x140, 0x40;
        /// Port GUID.
        port_guid: 0x180, 0x40;
        /// Node GUID.
        node_guid: 0x1c0, 0x40;
        /// Q_Key violations.
        qkey_violation_counter: 0x340, 0x10;
        /// Promiscuous for unicast.
        promisc_uc: 0x780, 1;
        /// Promiscuous for multicast.
        promisc_mc: 0x781, 1;
        /// Promiscuous for all traffic.
        promisc_all: 0x782, 1;
        /// Which address list to report (`MLX5_NVPRT_LIST_TYPE_*`).
        allowed_list_type: 0x785, 3;
        /// Number of entries of the current address list.
        allowed_list_size: 0x794, 0xc;
        /// Permanent MAC ([`mac_address_layout`](super::mac_address_layout)).
        permanent_address: 0x7a0, 0x40;
        /// Flexible array of the current address list (64-bit entries).
        current_uc_mac_address: 0x800, 0;
    }
}

prm_layout! {
    /// Which fields of the NIC vport context MODIFY_NIC_VPORT_CONTEXT applies.
    pub mod modify_nic_vport_field_select = "modify_nic_vport_field_select" (0x20) {
        /// Modify `affiliation`.
        affiliation: 0x12, 1;
        /// Modify `disable_uc_local_lb`.
        disable_uc_local_lb: 0x14, 1;
        /// Modify `disable_mc_local_lb`.
        disable_mc_local_lb: 0x15, 1;
        /// Modify `node_guid`.
        node_guid: 0x16, 1;
        /// Modify `port_guid`.
        port_guid: 0x17, 1;
        /// Modify `min_inline`.
        min_inline: 0x18, 1;
        /// Modify `mtu`.
        mtu: 0x19, 1;
        /// Modify `change_event`.
        change_event: 0x1a, 1;
        /// Modify `promisc`.
        promisc: 0x1b, 1;
        /// Modify `permanent_address`.
        permanent_address: 0x1c, 1;
        /// Modify `addresses_list`.
        addresses_list: 0x1d, 1;
        /// Modify `roce_en`.
        roce_en: 0x1e, 1;
    }
}

prm_layout! {
    /// A MAC address in two dwords.
    pub mod mac_address_layout = "mac_address_layout" (0x40) {
        /// MAC address bits 47..32.
        mac_addr_47_32: 0x10, 0x10;
        /// MAC address bits 31..0.
        mac_addr_31_0: 0x20, 0x20;
    }
}
/// The layouts of this module.
pub const LAYOUTS: &[&Layout] = &[
    &query_vport_state_in::LAYOUT,
    &query_vport_state_out::LAYOUT,
    &query_nic_vport_context_in::LAYOUT,
    &query_nic_vport_context_out::LAYOUT,
    &modify_nic_vport_context_in::LAYOUT,
    &modify_nic_vport_context_out::LAYOUT,
    &nic_vport_context::LAYOUT,
    &modify_nic_vport_field_select::LAYOUT,
    &mac_address_layout::LAYOUT,
];

header_enum! {
    /// QUERY_VPORT_STATE output `state` (`MLX5_QUERY_VPORT_STATE_OUT_STATE_*`).
    pub enum VportState: u8 in Mlx5Ifc {
        /// Link down.
        Down = 0x0 => "MLX5_QUERY_VPORT_STATE_OUT_STATE_DOWN",
        /// Link up.
        Up = 0x1 => "MLX5_QUERY_VPORT_STATE_OUT_STATE_UP",
    }
}

header_enum! {
    /// QUERY_VPORT_STATE op_mod (`MLX5_VPORT_STATE_OP_MOD_*`).
    pub enum VportStateOpMod: u16 in Mlx5Ifc {
        /// The function's own NIC vport.
        VnicVport = 0x0 => "MLX5_VPORT_STATE_OP_MOD_VNIC_VPORT",
        /// An e-switch vport.
        EswVport = 0x1 => "MLX5_VPORT_STATE_OP_MOD_ESW_VPORT",
        /// The uplink.
        Uplink = 0x2 => "MLX5_VPORT_STATE_OP_MOD_UPLINK",
    }
}

header_enum! {
    /// QUERY_VPORT_STATE output `admin_state` (`MLX5_VPORT_ADMIN_STATE_*`, `device.h`).
    pub enum VportAdminState: u8 in Device {
        /// Administratively down.
        Down = 0x0 => "MLX5_VPORT_ADMIN_STATE_DOWN",
        /// Administratively up.
        Up = 0x1 => "MLX5_VPORT_ADMIN_STATE_UP",
        /// Follows the uplink.
        Auto = 0x2 => "MLX5_VPORT_ADMIN_STATE_AUTO",
    }
}

header_enum! {
    /// `allowed_list_type` (`MLX5_NVPRT_LIST_TYPE_*`, `device.h`).
    pub enum NvprtListType: u8 in Device {
        /// Unicast MAC list.
        Uc = 0x0 => "MLX5_NVPRT_LIST_TYPE_UC",
        /// Multicast MAC list.
        Mc = 0x1 => "MLX5_NVPRT_LIST_TYPE_MC",
        /// VLAN list.
        Vlan = 0x2 => "MLX5_NVPRT_LIST_TYPE_VLAN",
    }
}

/// A nic_vport_context field placed where QUERY_NIC_VPORT_CONTEXT's output carries the
/// context (byte 0x10).
pub const fn in_query_out(field: Field) -> Field {
    field.at(query_nic_vport_context_out::nic_vport_context.bit)
}

/// A nic_vport_context field placed where MODIFY_NIC_VPORT_CONTEXT carries the context
/// (byte 0x100).
pub const fn in_modify(field: Field) -> Field {
    field.at(modify_nic_vport_context_in::nic_vport_context.bit)
}

/// A field_select bit placed in MODIFY_NIC_VPORT_CONTEXT (the dword at 0x0c).
pub const fn select(field: Field) -> Field {
    field.at(modify_nic_vport_context_in::field_select.bit)
}

/// Splits a MAC into the `47_32` and `31_0` fields the PRM layouts use.
pub const fn split_mac(mac: [u8; 6]) -> (u16, u32) {
    (
        u16::from_be_bytes([mac[0], mac[1]]),
        u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]),
    )
}

/// Joins the `47_32` and `31_0` fields of a MAC.
pub const fn join_mac(hi: u16, lo: u32) -> [u8; 6] {
    let h = hi.to_be_bytes();
    let l = lo.to_be_bytes();
    [h[0], h[1], l[0], l[1], l[2], l[3]]
}

/// The permanent MAC of a QUERY_NIC_VPORT_CONTEXT output.
pub fn permanent_mac(query_out: &[u8]) -> Result<[u8; 6], TooShort> {
    query_nic_vport_context_out::LAYOUT.check(query_out)?;
    let base = query_nic_vport_context_out::nic_vport_context.bit
        + nic_vport_context::permanent_address.bit;
    let hi = mac_address_layout::mac_addr_47_32.at(base).get(query_out) as u16;
    let lo = mac_address_layout::mac_addr_31_0.at(base).get(query_out) as u32;
    Ok(join_mac(hi, lo))
}

/// The MODIFY_NIC_VPORT_CONTEXT input that switches RoCE on or off for the function's
/// own vport (what rdma-core's VFIO provider sends on an Ethernet port).
pub fn roce_enable_input(enable: bool) -> Vec<u8> {
    let mut input = cmd::new_input(
        Opcode::ModifyNicVportContext,
        0,
        modify_nic_vport_context_in::SIZE,
    );
    select(modify_nic_vport_field_select::roce_en).set(&mut input, 1);
    in_modify(nic_vport_context::roce_en).set(&mut input, enable.into());
    input
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roce_en_placement() {
        let input = roce_enable_input(true);
        assert_eq!(input.len(), 512);
        assert_eq!(&input[..2], &[0x07, 0x55]);
        // field_select.roce_en: bit 1 of the dword at 0x0c.
        assert_eq!(&input[0x0c..0x10], &[0, 0, 0, 0x02]);
        // nic_vport_context.roce_en: absolute byte 0x103, bit 0.
        assert_eq!(input[0x103], 0x01);
        assert_eq!(input.iter().filter(|b| **b != 0).count(), 4);
    }

    #[test]
    fn mac_and_mtu() {
        let mut out = vec![0u8; query_nic_vport_context_out::SIZE];
        assert_eq!(out.len(), 272);
        out[0x10 + 0xf6..0x10 + 0xfc].copy_from_slice(&[0x02, 0x00, 0x00, 0xab, 0xcd, 0xef]);
        assert_eq!(
            permanent_mac(&out),
            Ok([0x02, 0x00, 0x00, 0xab, 0xcd, 0xef])
        );
        assert!(permanent_mac(&out[..271]).is_err());
        in_query_out(nic_vport_context::mtu).set(&mut out, 1500);
        assert_eq!(&out[0x10 + 0x26..0x10 + 0x28], &1500u16.to_be_bytes());
        assert_eq!(split_mac([1, 2, 3, 4, 5, 6]), (0x0102, 0x0304_0506));
        assert_eq!(join_mac(0x0102, 0x0304_0506), [1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn vport_state() {
        let mut out = [0u8; 16];
        query_vport_state_out::admin_state.set(&mut out, VportAdminState::Auto.value().into());
        query_vport_state_out::state.set(&mut out, VportState::Up.value().into());
        assert_eq!(out[0x0f], 0x21);
        let mut input = cmd::new_input(Opcode::QueryVportState, 0, 16);
        query_vport_state_in::other_vport.set(&mut input, 1);
        query_vport_state_in::vport_number.set(&mut input, 0x1234);
        assert_eq!(&input[8..12], &[0x80, 0, 0x12, 0x34]);
    }
}

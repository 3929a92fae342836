//! The command layouts the control plane uses, from the register model
//! (`ferroverbs_hw::control`, checked there against Linux `mlx5_ifc.h`).

#![allow(missing_docs)]

pub use ferroverbs_hw::control::cmd::{mbox_in, mbox_out};

/// Command opcodes (`MLX5_CMD_OP_*`), from the register model.
pub mod op {
    use ferroverbs_hw::control::cmd::Opcode;
    pub const QUERY_HCA_CAP: u16 = Opcode::QueryHcaCap.value();
    pub const INIT_HCA: u16 = Opcode::InitHca.value();
    pub const TEARDOWN_HCA: u16 = Opcode::TeardownHca.value();
    pub const ENABLE_HCA: u16 = Opcode::EnableHca.value();
    pub const DISABLE_HCA: u16 = Opcode::DisableHca.value();
    pub const QUERY_PAGES: u16 = Opcode::QueryPages.value();
    pub const MANAGE_PAGES: u16 = Opcode::ManagePages.value();
    pub const SET_HCA_CAP: u16 = Opcode::SetHcaCap.value();
    pub const QUERY_ISSI: u16 = Opcode::QueryIssi.value();
    pub const SET_ISSI: u16 = Opcode::SetIssi.value();
    pub const CREATE_EQ: u16 = Opcode::CreateEq.value();
    pub const DESTROY_EQ: u16 = Opcode::DestroyEq.value();
    pub const QUERY_VPORT_STATE: u16 = Opcode::QueryVportState.value();
    pub const QUERY_NIC_VPORT_CONTEXT: u16 = Opcode::QueryNicVportContext.value();
    pub const MODIFY_NIC_VPORT_CONTEXT: u16 = Opcode::ModifyNicVportContext.value();
    pub const QUERY_ROCE_ADDRESS: u16 = Opcode::QueryRoceAddress.value();
    pub const SET_ROCE_ADDRESS: u16 = Opcode::SetRoceAddress.value();
    pub const ALLOC_UAR: u16 = Opcode::AllocUar.value();
    pub const DEALLOC_UAR: u16 = Opcode::DeallocUar.value();
    pub const ACCESS_REG: u16 = Opcode::AccessReg.value();
}

pub use ferroverbs_hw::control::caps::{
    atomic_caps, cmd_hca_cap, query_hca_cap_out, roce_cap, set_hca_cap_in,
};
pub use ferroverbs_hw::control::eq::{create_eq_in, create_eq_out, destroy_eq_in, eqc};
pub use ferroverbs_hw::control::hca::{init_hca_in, query_issi_out, set_issi_in, teardown_hca_in};
pub use ferroverbs_hw::control::pages::{manage_pages_in, manage_pages_out, query_pages_out};
pub use ferroverbs_hw::control::reg::access_register_in;
pub use ferroverbs_hw::control::roce::{
    query_roce_address_in, query_roce_address_out, roce_addr_layout, set_roce_address_in,
};
pub use ferroverbs_hw::control::uar_pd_td::{alloc_uar_out, dealloc_uar_in};
pub use ferroverbs_hw::control::vport::{
    modify_nic_vport_context_in, modify_nic_vport_field_select, nic_vport_context,
    query_nic_vport_context_out, query_vport_state_out,
};

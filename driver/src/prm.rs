//! The command layouts the control plane uses, named as in Linux `mlx5_ifc.h` (6.1)
//! and checked against it (bit offsets and widths as in the header's `*_bits`
//! declarations).
//!
//! Interim: these move to `ferroverbs_hw::control` once the hw crate's command layouts
//! land, and this module then re-exports them.

#![allow(missing_docs)]

use ferroverbs_hw::prm_layout;

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

prm_layout! {
    pub mod enable_hca_in = "enable_hca_in" (128) {
        embedded_cpu_function: 64, 1;
        function_id: 80, 16;
    }
}

prm_layout! {
    pub mod query_issi_out = "query_issi_out" (896) {
        current_issi: 80, 16;
        supported_issi_dw0: 864, 32;
    }
}

prm_layout! {
    pub mod set_issi_in = "set_issi_in" (128) {
        current_issi: 80, 16;
    }
}

prm_layout! {
    pub mod query_pages_in = "query_pages_in" (128) {
        embedded_cpu_function: 64, 1;
        function_id: 80, 16;
    }
}

prm_layout! {
    pub mod query_pages_out = "query_pages_out" (128) {
        embedded_cpu_function: 64, 1;
        function_id: 80, 16;
        num_pages: 96, 32;
    }
}

prm_layout! {
    pub mod manage_pages_in = "manage_pages_in" (128) {
        embedded_cpu_function: 64, 1;
        function_id: 80, 16;
        input_num_entries: 96, 32;
        pas: 128, 0;
    }
}

prm_layout! {
    pub mod manage_pages_out = "manage_pages_out" (128) {
        output_num_entries: 64, 32;
        pas: 128, 0;
    }
}

prm_layout! {
    pub mod access_register_in = "access_register_in" (128) {
        register_id: 80, 16;
        argument: 96, 32;
        register_data: 128, 0;
    }
}

prm_layout! {
    pub mod query_hca_cap_in = "query_hca_cap_in" (128) {
        other_function: 64, 1;
        function_id: 80, 16;
    }
}

prm_layout! {
    pub mod query_hca_cap_out = "query_hca_cap_out" (32896) {
        capability: 128, 32768;
    }
}

prm_layout! {
    pub mod set_hca_cap_in = "set_hca_cap_in" (32896) {
        other_function: 64, 1;
        function_id: 80, 16;
        capability: 128, 32768;
    }
}

prm_layout! {
    pub mod cmd_hca_cap = "cmd_hca_cap" (2048) {
        vhca_id: 48, 16;
        log_max_srq_sz: 128, 8;
        log_max_qp_sz: 136, 8;
        log_max_qp: 155, 5;
        log_max_srq: 171, 5;
        log_max_cq_sz: 200, 8;
        log_max_cq: 219, 5;
        log_max_eq_sz: 224, 8;
        log_max_mkey: 234, 6;
        fast_teardown: 251, 1;
        log_max_eq: 252, 4;
        log_max_mrw_sz: 265, 7;
        log_max_ra_req_qp: 330, 6;
        log_max_ra_res_qp: 346, 6;
        gid_table_size: 368, 16;
        pkey_table_size: 400, 16;
        local_ca_ack_delay: 427, 5;
        port_type: 438, 2;
        num_ports: 440, 8;
        log_max_msg: 451, 5;
        max_tc: 460, 4;
        cqe_version: 508, 4;
        cmdif_checksum: 528, 2;
        roce: 541, 1;
        atomic: 542, 1;
        xrc: 572, 1;
        ud: 573, 1;
        uc: 574, 1;
        rc: 575, 1;
        uar_4k: 576, 1;
        umem_uid_0: 594, 1;
        log_pg_sz: 600, 8;
        bf: 608, 1;
        mkey_by_name: 614, 1;
        log_bf_reg_size: 619, 5;
        max_wqe_sz_sq: 656, 16;
        max_wqe_sz_rq: 688, 16;
        max_qp_mcg: 743, 25;
        log_max_mcg: 792, 8;
        log_max_transport_domain: 803, 5;
        log_max_pd: 811, 5;
        log_max_xrcd: 827, 5;
        max_num_eqs: 1136, 16;
        log_uar_page_sz: 1168, 16;
        device_frequency_khz: 1248, 32;
        num_vhca_ports: 1552, 8;
    }
}

prm_layout! {
    pub mod roce_cap = "roce_cap" (2048) {
        roce_apm: 0, 1;
        sw_r_roce_src_udp_port: 4, 1;
        l3_type: 140, 4;
        roce_version: 152, 8;
        r_roce_dest_udp_port: 176, 16;
        r_roce_max_src_udp_port: 192, 16;
        r_roce_min_src_udp_port: 208, 16;
        roce_address_table_size: 240, 16;
    }
}

prm_layout! {
    pub mod init_hca_in = "init_hca_in" (256) {
        sw_vhca_id: 98, 14;
        sw_owner_id: 128, 128;
    }
}

prm_layout! {
    pub mod teardown_hca_in = "teardown_hca_in" (128) {
        profile: 80, 16;
    }
}

prm_layout! {
    pub mod teardown_hca_out = "teardown_hca_out" (128) {
        state: 127, 1;
    }
}

prm_layout! {
    pub mod alloc_uar_out = "alloc_uar_out" (128) {
        uar: 72, 24;
    }
}

prm_layout! {
    pub mod dealloc_uar_in = "dealloc_uar_in" (128) {
        uar: 72, 24;
    }
}

prm_layout! {
    pub mod create_eq_in = "create_eq_in" (2176) {
        eq_context_entry: 128, 512;
        event_bitmask: 704, 256;
        pas: 2176, 0;
    }
}

prm_layout! {
    pub mod create_eq_out = "create_eq_out" (128) {
        eq_number: 88, 8;
    }
}

prm_layout! {
    pub mod destroy_eq_in = "destroy_eq_in" (128) {
        eq_number: 88, 8;
    }
}

prm_layout! {
    pub mod eqc = "eqc" (512) {
        status: 0, 4;
        ec: 13, 1;
        oi: 14, 1;
        st: 20, 4;
        page_offset: 84, 6;
        log_eq_size: 99, 5;
        uar_page: 104, 24;
        intr: 180, 12;
        log_page_size: 195, 5;
        consumer_counter: 328, 24;
        producer_counter: 360, 24;
    }
}

prm_layout! {
    pub mod modify_nic_vport_context_in = "modify_nic_vport_context_in" (4096) {
        other_vport: 64, 1;
        vport_number: 80, 16;
        field_select: 96, 32;
        nic_vport_context: 2048, 2048;
    }
}

prm_layout! {
    pub mod modify_nic_vport_field_select = "modify_nic_vport_field_select" (32) {
        mtu: 25, 1;
        roce_en: 30, 1;
    }
}

prm_layout! {
    pub mod query_nic_vport_context_in = "query_nic_vport_context_in" (128) {
        other_vport: 64, 1;
        vport_number: 80, 16;
        allowed_list_type: 101, 3;
    }
}

prm_layout! {
    pub mod query_nic_vport_context_out = "query_nic_vport_context_out" (2176) {
        nic_vport_context: 128, 2048;
    }
}

prm_layout! {
    pub mod nic_vport_context = "nic_vport_context" (2048) {
        roce_en: 31, 1;
        mtu: 304, 16;
        system_image_guid: 320, 64;
        port_guid: 384, 64;
        node_guid: 448, 64;
        permanent_address: 1952, 64;
    }
}

prm_layout! {
    pub mod set_roce_address_in = "set_roce_address_in" (384) {
        roce_address_index: 64, 16;
        vhca_port_num: 92, 4;
        roce_address: 128, 256;
    }
}

prm_layout! {
    pub mod query_roce_address_in = "query_roce_address_in" (128) {
        roce_address_index: 64, 16;
        vhca_port_num: 92, 4;
    }
}

prm_layout! {
    pub mod query_roce_address_out = "query_roce_address_out" (384) {
        roce_address: 128, 256;
    }
}

prm_layout! {
    pub mod roce_addr_layout = "roce_addr_layout" (256) {
        source_l3_address: 0, 128;
        vlan_valid: 131, 1;
        vlan_id: 132, 12;
        source_mac_47_32: 144, 16;
        source_mac_31_0: 160, 32;
        roce_l3_type: 212, 4;
        roce_version: 216, 8;
    }
}

prm_layout! {
    pub mod query_vport_state_in = "query_vport_state_in" (128) {
        other_vport: 64, 1;
        vport_number: 80, 16;
    }
}

prm_layout! {
    pub mod query_vport_state_out = "query_vport_state_out" (128) {
        admin_state: 120, 4;
        state: 124, 4;
    }
}

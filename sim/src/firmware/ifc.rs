//! The PRM layouts the firmware reads and writes, gathered from `ferroverbs_hw`'s
//! control-path modules so that the command handlers can name each structure by its
//! `mlx5_ifc.h` name.

pub use ferroverbs_hw::control::caps::{
    atomic_caps, cmd_hca_cap, odp_cap, odp_per_transport_service_cap, query_hca_cap_in,
    query_hca_cap_out, roce_cap, set_hca_cap_in, set_hca_cap_out,
};
pub use ferroverbs_hw::control::cmd::{mbox_in, mbox_out};
pub use ferroverbs_hw::control::cq::{
    cqc, create_cq_in, create_cq_out, destroy_cq_in, destroy_cq_out, query_cq_in, query_cq_out,
};
pub use ferroverbs_hw::control::eq::{
    create_eq_in, create_eq_out, destroy_eq_in, destroy_eq_out, eqc, query_eq_in, query_eq_out,
};
pub use ferroverbs_hw::control::hca::{
    disable_hca_in, disable_hca_out, enable_hca_in, enable_hca_out, init_hca_in, init_hca_out,
    query_issi_in, query_issi_out, set_issi_in, set_issi_out, teardown_hca_in, teardown_hca_out,
};
pub use ferroverbs_hw::control::mkey::{
    create_mkey_in, create_mkey_out, destroy_mkey_in, destroy_mkey_out, mkc, query_mkey_in,
    query_mkey_out,
};
pub use ferroverbs_hw::control::pages::{
    manage_pages_in, manage_pages_out, query_pages_in, query_pages_out,
};
pub use ferroverbs_hw::control::qp::{
    ads, create_qp_in, create_qp_out, destroy_qp_in, destroy_qp_out, init2init_qp_in,
    init2init_qp_out, init2rtr_qp_in, init2rtr_qp_out, qp_2err_in, qp_2err_out, qp_2rst_in,
    qp_2rst_out, qpc, query_qp_in, query_qp_out, rst2init_qp_in, rst2init_qp_out, rtr2rts_qp_in,
    rtr2rts_qp_out, rts2rts_qp_in, rts2rts_qp_out, sqd2rts_qp_in, sqd2rts_qp_out, sqerr2rts_qp_in,
    sqerr2rts_qp_out,
};
pub use ferroverbs_hw::control::reg::{
    access_register_in, access_register_out, paos_reg, register_host_endianness,
};
pub use ferroverbs_hw::control::roce::{
    query_roce_address_in, query_roce_address_out, roce_addr_layout, set_roce_address_in,
    set_roce_address_out,
};
pub use ferroverbs_hw::control::uar_pd_td::{
    alloc_pd_in, alloc_pd_out, alloc_transport_domain_in, alloc_transport_domain_out, alloc_uar_in,
    alloc_uar_out, dealloc_pd_in, dealloc_pd_out, dealloc_transport_domain_in,
    dealloc_transport_domain_out, dealloc_uar_in, dealloc_uar_out,
};
pub use ferroverbs_hw::control::vport::{
    mac_address_layout, modify_nic_vport_context_in, modify_nic_vport_context_out,
    modify_nic_vport_field_select, nic_vport_context, query_nic_vport_context_in,
    query_nic_vport_context_out, query_vport_state_in, query_vport_state_out,
};

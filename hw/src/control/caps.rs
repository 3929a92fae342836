//! Capabilities: QUERY_HCA_CAP / SET_HCA_CAP and the capability pages a verbs driver
//! reads and sets: the general device capabilities ([`cmd_hca_cap`]) and the RoCE
//! capabilities ([`roce_cap`]), the atomic capabilities ([`atomic_caps`]) and the
//! on-demand paging capabilities ([`odp_cap`]).
//!
//! A capability page is 4096 bytes (`hca_cap_union`) at byte 0x10 of the QUERY_HCA_CAP
//! output and of the SET_HCA_CAP input; [`in_command`] moves a field of a page there.
//! QUERY_HCA_CAP's op_mod is `cap_type << 1 | mode` ([`query_op_mod`]), SET_HCA_CAP's is
//! `cap_type << 1` ([`set_op_mod`]). Both drivers query the general page CUR and MAX,
//! then SET a copy of CUR with `cmdif_checksum = 0` and `log_uar_page_sz = 0`.
//!
//! Fields follow the 6.1 header: `relaxed_ordering_read` is in dword 7 there, and
//! `page_request_disable` / `abs_native_port_num` do not exist yet.

use crate::field::{Field, Layout};
use crate::prm_layout;

prm_layout! {
    /// QUERY_HCA_CAP input; op_mod = `cap_type << 1 | cur` (see [`query_op_mod`]).
    pub mod query_hca_cap_in = "query_hca_cap_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// Query another function.
        other_function: 0x40, 1;
        /// Function; 0 for the function itself.
        function_id: 0x50, 0x10;
    }
}

prm_layout! {
    /// QUERY_HCA_CAP output: the 4096-byte capability page at byte 0x10.
    pub mod query_hca_cap_out = "query_hca_cap_out" (0x8080) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// The capability page (`hca_cap_union`, 4096 bytes); its start holds the layout of the queried cap type.
        capability: 0x80, 0x8000;
    }
}

prm_layout! {
    /// SET_HCA_CAP input; op_mod = `cap_type << 1` (see [`set_op_mod`]).
    pub mod set_hca_cap_in = "set_hca_cap_in" (0x8080) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// Query another function.
        other_function: 0x40, 1;
        /// Function; 0 for the function itself.
        function_id: 0x50, 0x10;
        /// The capability page (`hca_cap_union`, 4096 bytes); its start holds the layout of the queried cap type.
        capability: 0x80, 0x8000;
    }
}

prm_layout! {
    /// SET_HCA_CAP output.
    pub mod set_hca_cap_out = "set_hca_cap_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}

prm_layout! {
    /// The general device capabilities (cap type GENERAL), the fields a verbs driver and the simulator use.
    pub mod cmd_hca_cap = "cmd_hca_cap" (0x800) {
        /// The GENERAL_2 capability page exists.
        hca_cap_2: 0x20, 1;
        /// vHCA id.
        vhca_id: 0x30, 0x10;
        /// log2 of the largest SRQ.
        log_max_srq_sz: 0x80, 8;
        /// log2 of the largest work queue in WQEs.
        log_max_qp_sz: 0x88, 8;
        /// Events supported.
        event_cap: 0x90, 1;
        /// log2 of the number of QPs.
        log_max_qp: 0x9b, 5;
        /// ECE supported.
        ece_support: 0xa3, 1;
        /// log2 of the number of SRQs.
        log_max_srq: 0xab, 5;
        /// log2 of the largest CQ.
        log_max_cq_sz: 0xc8, 8;
        /// log2 of the number of CQs.
        log_max_cq: 0xdb, 5;
        /// log2 of the largest EQ.
        log_max_eq_sz: 0xe0, 8;
        /// Relaxed ordering for writes.
        relaxed_ordering_write: 0xe8, 1;
        /// Relaxed ordering for reads.
        relaxed_ordering_read: 0xe9, 1;
        /// log2 of the number of memory keys.
        log_max_mkey: 0xea, 6;
        /// Dump-fill mkey supported.
        dump_fill_mkey: 0xf8, 1;
        /// Fast teardown (TEARDOWN_HCA profile 2) supported.
        fast_teardown: 0xfb, 1;
        /// log2 of the number of EQs.
        log_max_eq: 0xfc, 4;
        /// Largest indirection depth.
        max_indirection: 0x100, 8;
        /// log2 of the largest memory region.
        log_max_mrw_sz: 0x109, 7;
        /// Force teardown supported.
        force_teardown: 0x110, 1;
        /// Null mkey supported.
        null_mkey: 0x119, 1;
        /// log2 of the largest KLM list.
        log_max_klm_list_size: 0x11a, 6;
        /// Firmware may ask for all pages back at once.
        release_all_pages: 0x145, 1;
        /// log2 of outstanding RDMA read/atomic as requester.
        log_max_ra_req_qp: 0x14a, 6;
        /// log2 of outstanding RDMA read/atomic as responder.
        log_max_ra_res_qp: 0x15a, 6;
        /// End padding supported.
        end_pad: 0x160, 1;
        /// Start padding supported.
        start_pad: 0x163, 1;
        /// 128-byte cache lines in use.
        cache_line_128byte: 0x164, 1;
        /// GID table entries per port.
        gid_table_size: 0x170, 0x10;
        /// QUERY_VPORT_COUNTER supported.
        vport_counters: 0x181, 1;
        /// Number of Q counter sets (ALLOC_Q_COUNTER).
        max_qp_cnt: 0x186, 0xa;
        /// P_Key table size code.
        pkey_table_size: 0x190, 0x10;
        /// Vport group manager.
        vport_group_manager: 0x1a0, 1;
        /// InfiniBand virtualization supported.
        ib_virt: 0x1a2, 1;
        /// NIC flow tables supported.
        nic_flow_table: 0x1a6, 1;
        /// Local CA ACK delay exponent.
        local_ca_ack_delay: 0x1ab, 5;
        /// INIT_HCA does not bring the link up.
        disable_link_up: 0x1b4, 1;
        /// Port type (`MLX5_CAP_PORT_TYPE_*`: 0 IB, 1 Ethernet).
        port_type: 0x1b6, 2;
        /// Number of ports.
        num_ports: 0x1b8, 8;
        /// log2 of the largest message.
        log_max_msg: 0x1c3, 5;
        /// Number of traffic classes.
        max_tc: 0x1cc, 4;
        /// Supported static rates (bit mask).
        stat_rate_support: 0x1e0, 0x10;
        /// CQE version: 1 reports `user_index` in CQEs.
        cqe_version: 0x1fc, 4;
        /// Drain on signature error.
        drain_sigerr: 0x20f, 1;
        /// Command-interface checksum mode (`MLX5_CMD_HCA_CAP_CMDIF_CHECKSUM_*`); drivers set 0.
        cmdif_checksum: 0x210, 2;
        /// Scatter to CQE supported.
        sctr_data_cqe: 0x215, 1;
        /// Signature handover supported.
        sho: 0x217, 1;
        /// Dynamically connected transport supported.
        dct: 0x21a, 1;
        /// Ethernet offloads supported.
        eth_net_offloads: 0x21c, 1;
        /// RoCE supported.
        roce: 0x21d, 1;
        /// Atomic operations supported.
        atomic: 0x21e, 1;
        /// CQ overrun ignore supported.
        cq_oi: 0x220, 1;
        /// CQ resize supported.
        cq_resize: 0x221, 1;
        /// CQ moderation supported.
        cq_moderation: 0x222, 1;
        /// A CQ may be moved to another EQ.
        cq_eq_remap: 0x226, 1;
        /// The QP context's `block_lb_mc` (multicast loopback blocking) is honoured.
        block_lb_mc: 0x228, 1;
        /// Paging (ODP) supported.
        pg: 0x227, 1;
        /// Q_Key violation counter supported.
        qkv: 0x236, 1;
        /// P_Key violation counter supported.
        pkv: 0x237, 1;
        /// XRC transport supported.
        xrc: 0x23c, 1;
        /// UD transport supported.
        ud: 0x23d, 1;
        /// UC transport supported.
        uc: 0x23e, 1;
        /// RC transport supported.
        rc: 0x23f, 1;
        /// 4 KiB UARs.
        uar_4k: 0x240, 1;
        /// log2 of the UAR area size.
        uar_sz: 0x24a, 6;
        /// UMEMs with uid 0 supported.
        umem_uid_0: 0x252, 1;
        /// log2 of the device page size.
        log_pg_sz: 0x258, 8;
        /// BlueFlame supported.
        bf: 0x260, 1;
        /// SET_DRIVER_VERSION supported.
        driver_version: 0x261, 1;
        /// Software chooses the mkey index.
        mkey_by_name: 0x266, 1;
        /// log2 of the BlueFlame register size.
        log_bf_reg_size: 0x26b, 5;
        /// LAG master.
        lag_master: 0x27b, 1;
        /// Largest SQ WQE in bytes.
        max_wqe_sz_sq: 0x290, 0x10;
        /// Largest RQ WQE in bytes.
        max_wqe_sz_rq: 0x2b0, 0x10;
        /// Largest DC SQ WQE in bytes.
        max_wqe_sz_sq_dc: 0x2d0, 0x10;
        /// QPs per multicast group.
        max_qp_mcg: 0x2e7, 0x19;
        /// log2 of the number of multicast groups.
        log_max_mcg: 0x318, 8;
        /// log2 of the number of transport domains.
        log_max_transport_domain: 0x323, 5;
        /// log2 of the number of PDs.
        log_max_pd: 0x32b, 5;
        /// log2 of the number of XRC domains.
        log_max_xrcd: 0x33b, 5;
        /// log2 of the number of RQs.
        log_max_rq: 0x363, 5;
        /// log2 of the number of SQs.
        log_max_sq: 0x36b, 5;
        /// log2 of the number of TIRs.
        log_max_tir: 0x373, 5;
        /// log2 of the number of TISs.
        log_max_tis: 0x37b, 5;
        /// log2 of the number of RMPs.
        log_max_rmp: 0x383, 5;
        /// log2 of the number of RQ tables.
        log_max_rqt: 0x38b, 5;
        /// The `roce` cap may be set.
        roce_rw_supported: 0x3a1, 1;
        /// log2 of the largest WQ.
        log_max_wq_sz: 0x3db, 5;
        /// log2 of the multicast address list size.
        log_max_current_mc_list: 0x3f3, 5;
        /// log2 of the unicast address list size.
        log_max_current_uc_list: 0x3fb, 5;
        /// Supported general object types (bit mask).
        general_obj_types: 0x400, 0x40;
        /// SQ timestamp formats supported.
        sq_ts_format: 0x440, 2;
        /// RQ timestamp formats supported.
        rq_ts_format: 0x442, 2;
        /// log2 of the number of user contexts.
        log_max_uctx: 0x463, 5;
        /// Number of EQs.
        max_num_eqs: 0x470, 0x10;
        /// log2 of the UAR page size minus 12; drivers set 0 on 4 KiB hosts.
        log_uar_page_sz: 0x490, 0x10;
        /// Device clock in MHz.
        device_frequency_mhz: 0x4c0, 0x20;
        /// Device clock in kHz.
        device_frequency_khz: 0x4e0, 0x20;
        /// UARs per system page.
        num_of_uars_per_page: 0x520, 0x20;
        /// 128-byte CQEs always supported.
        cqe_128_always: 0x5bd, 1;
        /// CQE compression supported.
        cqe_compression: 0x5bf, 1;
        /// Native port number.
        native_port_num: 0x608, 8;
        /// Number of vHCA ports.
        num_vhca_ports: 0x610, 8;
        /// Software owner id.
        sw_owner_id: 0x61e, 1;
    }
}

prm_layout! {
    /// The RoCE capabilities (cap type ROCE).
    pub mod roce_cap = "roce_cap" (0x800) {
        /// RoCE automatic path migration.
        roce_apm: 0, 1;
        /// Software sets the RoCEv2 UDP source port.
        sw_r_roce_src_udp_port: 4, 1;
        /// RC QPs may force loopback when RoCE is disabled.
        fl_rc_qp_when_roce_disabled: 5, 1;
        /// RC QPs may force loopback when RoCE is enabled.
        fl_rc_qp_when_roce_enabled: 6, 1;
        /// QP timestamp formats supported.
        qp_ts_format: 0x1e, 2;
        /// Supported L3 types (`MLX5_ROCE_L3_TYPE_*_CAP`).
        l3_type: 0x8c, 4;
        /// Supported RoCE versions (`MLX5_ROCE_VERSION_*_CAP`).
        roce_version: 0x98, 8;
        /// RoCEv2 UDP destination port.
        r_roce_dest_udp_port: 0xb0, 0x10;
        /// Largest RoCEv2 UDP source port.
        r_roce_max_src_udp_port: 0xc0, 0x10;
        /// Smallest RoCEv2 UDP source port.
        r_roce_min_src_udp_port: 0xd0, 0x10;
        /// GID table size.
        roce_address_table_size: 0xf0, 0x10;
    }
}
prm_layout! {
    /// The atomic capabilities (cap type ATOMIC): which atomic operations and sizes an
    /// RC QP executes, and the byte order of the value an 8-byte atomic returns to the
    /// requester.
    pub mod atomic_caps = "atomic_caps" (0x800) {
        /// The requester's byte order for 8-byte atomic responses: 0 big-endian, 1 host
        /// endianness ([`super::ATOMIC_REQ_MODE_HOST_ENDIANNESS`]); settable.
        atomic_req_8B_endianness_mode: 0x40, 2;
        /// Mode 1 (host endianness) may be set.
        supported_atomic_req_8B_endianness_mode_1: 0x46, 1;
        /// Supported operations ([`super::ATOMIC_OPS_CMP_SWAP`], [`super::ATOMIC_OPS_FETCH_ADD`], ...).
        atomic_operations: 0x90, 0x10;
        /// Operand sizes supported on QPs (`MLX5_ATOMIC_CAPS_ATOMIC_SIZE_QP_*`).
        atomic_size_qp: 0xb0, 0x10;
        /// Operand sizes supported on DC.
        atomic_size_dc: 0xd0, 0x10;
    }
}

prm_layout! {
    /// The on-demand paging capabilities (cap type ODP, present when the general
    /// page's `pg` is set): per transport, which operations may touch ODP memory.
    pub mod odp_cap = "odp_cap" (0x800) {
        /// Signature offloads may touch ODP memory.
        sig: 0x40, 1;
        /// RC ([`super::odp_per_transport_service_cap`]).
        rc_odp_caps: 0x80, 0x20;
        /// UC.
        uc_odp_caps: 0xa0, 0x20;
        /// UD.
        ud_odp_caps: 0xc0, 0x20;
        /// XRC.
        xrc_odp_caps: 0xe0, 0x20;
        /// DC.
        dc_odp_caps: 0x100, 0x20;
    }
}

prm_layout! {
    /// One transport's ODP capabilities (a 32-bit field of [`odp_cap`]).
    pub mod odp_per_transport_service_cap = "odp_per_transport_service_cap" (0x20) {
        /// Sends may gather from ODP memory.
        send: 0, 1;
        /// Receives may scatter to ODP memory.
        receive: 1, 1;
        /// RDMA writes may target ODP memory.
        write: 2, 1;
        /// RDMA reads may target ODP memory.
        read: 3, 1;
        /// Atomics may target ODP memory.
        atomic: 4, 1;
        /// Receives from an SRQ may scatter to ODP memory.
        srq_receive: 5, 1;
    }
}

/// `atomic_caps.atomic_operations`: compare and swap (Linux `mlx5_ib.h`
/// `MLX5_ATOMIC_OPS_CMP_SWAP`).
pub const ATOMIC_OPS_CMP_SWAP: u64 = 1 << 0;
/// `atomic_caps.atomic_operations`: fetch and add (`MLX5_ATOMIC_OPS_FETCH_ADD`).
pub const ATOMIC_OPS_FETCH_ADD: u64 = 1 << 1;
/// `atomic_caps.atomic_operations`: masked compare and swap.
pub const ATOMIC_OPS_MASKED_CMP_SWAP: u64 = 1 << 2;
/// `atomic_caps.atomic_operations`: masked fetch and add.
pub const ATOMIC_OPS_MASKED_FETCH_ADD: u64 = 1 << 3;
/// `atomic_caps.atomic_req_8B_endianness_mode`: responses in host endianness (Linux
/// `mlx5_core` `MLX5_ATOMIC_REQ_MODE_HOST_ENDIANNESS`); 0 is big-endian.
pub const ATOMIC_REQ_MODE_HOST_ENDIANNESS: u64 = 1;

/// The layouts of this module.
pub const LAYOUTS: &[&Layout] = &[
    &query_hca_cap_in::LAYOUT,
    &query_hca_cap_out::LAYOUT,
    &set_hca_cap_in::LAYOUT,
    &set_hca_cap_out::LAYOUT,
    &cmd_hca_cap::LAYOUT,
    &roce_cap::LAYOUT,
    &atomic_caps::LAYOUT,
    &odp_cap::LAYOUT,
    &odp_per_transport_service_cap::LAYOUT,
];

header_enum! {
    /// Capability page types (`enum mlx5_cap_type`, `device.h`).
    pub enum CapType: u16 in Device {
        /// General device capabilities ([`cmd_hca_cap`]).
        General = 0 => "MLX5_CAP_GENERAL",
        /// Ethernet offloads.
        EthernetOffloads = 1 => "MLX5_CAP_ETHERNET_OFFLOADS",
        /// On-demand paging.
        Odp = 2 => "MLX5_CAP_ODP",
        /// Atomic operations.
        Atomic = 3 => "MLX5_CAP_ATOMIC",
        /// RoCE ([`roce_cap`]).
        Roce = 4 => "MLX5_CAP_ROCE",
        /// IPoIB offloads.
        IpoibOffloads = 5 => "MLX5_CAP_IPOIB_OFFLOADS",
        /// Enhanced IPoIB offloads.
        IpoibEnhancedOffloads = 6 => "MLX5_CAP_IPOIB_ENHANCED_OFFLOADS",
        /// NIC flow tables.
        FlowTable = 7 => "MLX5_CAP_FLOW_TABLE",
        /// E-switch flow tables.
        EswitchFlowTable = 8 => "MLX5_CAP_ESWITCH_FLOW_TABLE",
        /// E-switch.
        Eswitch = 9 => "MLX5_CAP_ESWITCH",
        /// Vector calculation.
        VectorCalc = 11 => "MLX5_CAP_VECTOR_CALC",
        /// Quality of service.
        Qos = 12 => "MLX5_CAP_QOS",
        /// Debug.
        Debug = 13 => "MLX5_CAP_DEBUG",
        /// Device memory.
        DevMem = 15 => "MLX5_CAP_DEV_MEM",
        /// TLS.
        Tls = 17 => "MLX5_CAP_TLS",
        /// vDPA emulation.
        VdpaEmulation = 0x13 => "MLX5_CAP_VDPA_EMULATION",
        /// Device events.
        DevEvent = 0x14 => "MLX5_CAP_DEV_EVENT",
        /// IPsec.
        Ipsec = 0x15 => "MLX5_CAP_IPSEC",
        /// SHAMPO.
        DevShampo = 0x1d => "MLX5_CAP_DEV_SHAMPO",
        /// MACsec.
        Macsec = 0x1f => "MLX5_CAP_MACSEC",
        /// General capabilities, second page.
        General2 = 0x20 => "MLX5_CAP_GENERAL_2",
        /// Port selection.
        PortSelection = 0x25 => "MLX5_CAP_PORT_SELECTION",
        /// Advanced virtualization.
        AdvVirtualization = 0x26 => "MLX5_CAP_ADV_VIRTUALIZATION",
    }
}

header_enum! {
    /// Which values QUERY_HCA_CAP returns (low bit of its op_mod; `device.h`).
    pub enum CapMode: u16 in Device {
        /// The largest values the device allows.
        Max = 0 => "HCA_CAP_OPMOD_GET_MAX",
        /// The values in force.
        Cur = 1 => "HCA_CAP_OPMOD_GET_CUR",
    }
}

c_constants! {
    /// `mlx5_ifc.h` names of the cap types SET_HCA_CAP is used with (the kernel shifts
    /// them left by one to form the op_mod).
    pub const SET_HCA_CAP_OP_MOD_CONSTANTS;
        /// General device capabilities.
        Mlx5Ifc MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE: u16 = 0x0;
        /// On-demand paging.
        Mlx5Ifc MLX5_SET_HCA_CAP_OP_MOD_ODP: u16 = 0x2;
        /// Atomic operations.
        Mlx5Ifc MLX5_SET_HCA_CAP_OP_MOD_ATOMIC: u16 = 0x3;
        /// RoCE.
        Mlx5Ifc MLX5_SET_HCA_CAP_OP_MOD_ROCE: u16 = 0x4;
        /// Port selection.
        Mlx5Ifc MLX5_SET_HCA_CAP_OP_MODE_PORT_SELECTION: u16 = 0x25;
        /// `atomic_caps.atomic_size_qp`: 8-byte operands.
        Mlx5Ifc MLX5_ATOMIC_CAPS_ATOMIC_SIZE_QP_8_BYTES: u16 = 8;

}

header_enum! {
    /// `cmd_hca_cap.port_type` (`MLX5_CAP_PORT_TYPE_*`).
    pub enum PortType: u8 in Mlx5Ifc {
        /// InfiniBand.
        Ib = 0x0 => "MLX5_CAP_PORT_TYPE_IB",
        /// Ethernet (RoCE).
        Eth = 0x1 => "MLX5_CAP_PORT_TYPE_ETH",
    }
}

header_enum! {
    /// `cmd_hca_cap.cmdif_checksum` (`MLX5_CMD_HCA_CAP_CMDIF_CHECKSUM_*`).
    pub enum CmdifChecksum: u8 in Mlx5Ifc {
        /// No signatures checked; what both drivers set.
        Disabled = 0x0 => "MLX5_CMD_HCA_CAP_CMDIF_CHECKSUM_DISABLED",
        /// The state after reset.
        InitialState = 0x1 => "MLX5_CMD_HCA_CAP_CMDIF_CHECKSUM_INITIAL_STATE",
        /// Signatures checked.
        Enabled = 0x3 => "MLX5_CMD_HCA_CAP_CMDIF_CHECKSUM_ENABLED",
    }
}

/// The QUERY_HCA_CAP op_mod for a page and mode: `cap_type << 1 | mode`.
pub const fn query_op_mod(cap: CapType, mode: CapMode) -> u16 {
    (cap.value() << 1) | mode.value()
}

/// The SET_HCA_CAP op_mod for a page: `cap_type << 1`.
pub const fn set_op_mod(cap: CapType) -> u16 {
    cap.value() << 1
}

/// Decodes a QUERY_HCA_CAP op_mod into page and mode; `None` for an unknown page.
pub const fn parse_query_op_mod(op_mod: u16) -> Option<(CapType, CapMode)> {
    let mode = if op_mod & 1 == 0 {
        CapMode::Max
    } else {
        CapMode::Cur
    };
    match CapType::from_value(op_mod >> 1) {
        Some(cap) => Some((cap, mode)),
        None => None,
    }
}

/// A field of a capability page, placed where it sits in the QUERY_HCA_CAP output and
/// the SET_HCA_CAP input (the page starts at byte 0x10 of both).
pub const fn in_command(field: Field) -> Field {
    field.at(query_hca_cap_out::capability.bit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_mods() {
        // Reference §3.4: general CUR 0x0001, MAX 0x0000, RoCE CUR 0x0009, MAX 0x0008.
        assert_eq!(query_op_mod(CapType::General, CapMode::Cur), 0x0001);
        assert_eq!(query_op_mod(CapType::General, CapMode::Max), 0x0000);
        assert_eq!(query_op_mod(CapType::Roce, CapMode::Cur), 0x0009);
        assert_eq!(query_op_mod(CapType::Roce, CapMode::Max), 0x0008);
        assert_eq!(set_op_mod(CapType::Roce), 0x8);
        assert_eq!(set_op_mod(CapType::General2), 0x40);
        assert_eq!(set_op_mod(CapType::Roce), MLX5_SET_HCA_CAP_OP_MOD_ROCE << 1);
        assert_eq!(parse_query_op_mod(0x9), Some((CapType::Roce, CapMode::Cur)));
        assert_eq!(parse_query_op_mod(0x14), None);
        let mut input = crate::control::cmd::new_input(
            crate::control::cmd::Opcode::QueryHcaCap,
            query_op_mod(CapType::General, CapMode::Cur),
            query_hca_cap_in::SIZE,
        );
        assert_eq!(&input[..8], &[0x01, 0x00, 0, 0, 0, 0, 0x00, 0x01]);
        query_hca_cap_in::other_function.set(&mut input, 1);
        assert_eq!(input[8], 0x80);
    }

    #[test]
    fn general_cap_fields_in_the_command() {
        let mut out = vec![0u8; query_hca_cap_out::SIZE];
        assert_eq!(out.len(), 4112);
        // roce: cap dword 16 bit 2, i.e. absolute byte 0x10 + 0x43.
        in_command(cmd_hca_cap::roce).set(&mut out, 1);
        assert_eq!(out[0x53], 0x04);
        // port_type: cap dword 13 [9:8], byte 0x36 of the cap.
        in_command(cmd_hca_cap::port_type).set(&mut out, PortType::Eth.value().into());
        assert_eq!(out[0x10 + 0x36], 0x01);
        // umem_uid_0: dword 18 bit 13.
        in_command(cmd_hca_cap::umem_uid_0).set(&mut out, 1);
        assert_eq!(out[0x10 + 0x4a], 0x20);
        // cmdif_checksum: dword 16 [15:14].
        in_command(cmd_hca_cap::cmdif_checksum).set(&mut out, 3);
        assert_eq!(out[0x10 + 0x42], 0xc0);
        // log_uar_page_sz: dword 36 [15:0].
        in_command(cmd_hca_cap::log_uar_page_sz).set(&mut out, 0xabcd);
        assert_eq!(&out[0x10 + 0x92..0x10 + 0x94], &[0xab, 0xcd]);
        // fast_teardown: the kernel's bit 0xfb (dword 7 bit 4), not rdma-core's 0x111.
        assert_eq!(cmd_hca_cap::fast_teardown.bit, 0xfb);
        in_command(cmd_hca_cap::fast_teardown).set(&mut out, 1);
        assert_eq!(out[0x10 + 0x1f], 0x10);
        // log_max_qp: dword 4 [4:0].
        in_command(cmd_hca_cap::log_max_qp).set(&mut out, 0x1f);
        assert_eq!(out[0x10 + 0x13], 0x1f);
    }

    #[test]
    fn roce_cap_fields() {
        let mut cap = [0u8; roce_cap::SIZE];
        roce_cap::sw_r_roce_src_udp_port.set(&mut cap, 1);
        assert_eq!(cap[0], 0x08);
        roce_cap::r_roce_dest_udp_port.set(&mut cap, 4791);
        assert_eq!(&cap[0x16..0x18], &4791u16.to_be_bytes());
        roce_cap::roce_address_table_size.set(&mut cap, 256);
        assert_eq!(&cap[0x1e..0x20], &[1, 0]);
    }
}

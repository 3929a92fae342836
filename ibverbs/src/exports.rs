//! The exported C names, each an assembler entry point that tail-jumps to its
//! implementation (`name: jmp impl`; an alias with `.set` cannot name a function of
//! another codegen unit). The implementations are ordinary (mangled, unexported) Rust
//! functions, so rustc's own version script does not name these symbols and
//! `libibverbs.map` alone decides their version node (`ibv_reg_mr@@IBVERBS_1.1`).
//! `tests/symbols.rs` checks that this list and the map agree with the built library.

use crate::ffi as f;

macro_rules! export {
    ($($name:ident = $imp:path;)*) => {
        $(
            core::arch::global_asm!(
                concat!(".globl ", stringify!($name)),
                concat!(".type ", stringify!($name), ",@function"),
                concat!(stringify!($name), ":"),
                "jmp {}",
                concat!(".size ", stringify!($name), ", . - ", stringify!($name)),
                sym $imp,
            );
        )*
        /// Every function symbol this file exports.
        #[cfg(test)]
        pub(crate) const FUNCTIONS: &[&str] = &[$(stringify!($name)),*];
    };
}

export! {
    // IBVERBS_1.0
    ibv_copy_path_rec_from_kern = f::nothing;
    ibv_copy_path_rec_to_kern = f::nothing;
    ibv_copy_qp_attr_from_kern = f::nothing;
    ibv_create_comp_channel = f::create_comp_channel;
    ibv_destroy_comp_channel = f::destroy_comp_channel;
    ibv_get_sysfs_path = f::get_sysfs_path;
    ibv_rate_to_mult = f::rate_to_mult;
    ibv_read_sysfs_file = f::minus_one;
    mult_to_ibv_rate = f::mult_to_rate;
    // IBVERBS_1.1
    ibv_ack_async_event = f::ack_async_event;
    ibv_ack_cq_events = f::ack_cq_events;
    ibv_alloc_pd = f::alloc_pd;
    ibv_attach_mcast = f::unsupported_int;
    ibv_close_device = f::close_device;
    ibv_copy_ah_attr_from_kern = f::nothing;
    ibv_create_ah = f::create_ah;
    ibv_create_ah_from_wc = f::unsupported_ptr;
    ibv_create_cq = f::create_cq;
    ibv_create_qp = f::create_qp;
    ibv_create_srq = f::create_srq;
    ibv_dealloc_pd = f::dealloc_pd;
    ibv_dereg_mr = f::dereg_mr;
    ibv_destroy_ah = f::destroy_ah;
    ibv_destroy_cq = f::destroy_cq;
    ibv_destroy_qp = f::destroy_qp;
    ibv_destroy_srq = f::destroy_srq;
    ibv_detach_mcast = f::unsupported_int;
    ibv_dofork_range = f::nothing;
    ibv_dontfork_range = f::nothing;
    ibv_event_type_str = f::event_type_str;
    ibv_fork_init = f::nothing;
    ibv_free_device_list = f::free_device_list;
    ibv_get_async_event = f::get_async_event;
    ibv_get_cq_event = f::get_cq_event;
    ibv_get_device_guid = f::get_device_guid;
    ibv_get_device_list = f::get_device_list;
    ibv_get_device_name = f::get_device_name;
    ibv_init_ah_from_wc = f::unsupported_int;
    ibv_modify_qp = f::modify_qp;
    ibv_modify_srq = f::modify_srq;
    ibv_node_type_str = f::node_type_str;
    ibv_open_device = f::open_device;
    ibv_port_state_str = f::port_state_str;
    ibv_query_device = f::query_device;
    ibv_query_gid = f::query_gid;
    ibv_query_pkey = f::query_pkey;
    ibv_query_port = f::query_port;
    ibv_query_qp = f::query_qp;
    ibv_query_srq = f::query_srq;
    ibv_rate_to_mbps = f::rate_to_mbps;
    ibv_reg_mr = f::reg_mr;
    ibv_rereg_mr = f::rereg_mr;
    ibv_resize_cq = f::resize_cq;
    ibv_resolve_eth_l2_from_gid = f::unsupported_int;
    ibv_wc_status_str = f::wc_status_str;
    mbps_to_ibv_rate = f::mbps_to_rate;
    // IBVERBS_1.5 .. 1.14. The import verbs (sharing another process's objects through
    // a kernel uverbs file) and dma-buf registration are not offered: they answer as
    // rdma-core does for a provider without them (its dummy ops).
    ibv_get_pkey_index = f::get_pkey_index;
    ibv_qp_to_qp_ex = f::qp_to_qp_ex;
    ibv_reg_mr_iova = f::reg_mr_iova;
    ibv_reg_mr_iova2 = f::reg_mr_iova2;
    ibv_get_device_index = f::get_device_index;
    ibv_query_ece = f::unsupported_int;
    ibv_set_ece = f::unsupported_int;
    ibv_import_device = f::import_device;
    ibv_import_pd = f::unsupported_ptr;
    ibv_unimport_pd = f::nothing;
    ibv_import_mr = f::unsupported_ptr;
    ibv_unimport_mr = f::nothing;
    ibv_reg_dmabuf_mr = f::unsupported_ptr;
    ibv_import_dm = f::unsupported_ptr;
    ibv_unimport_dm = f::nothing;
    // 0: "not guaranteed in order" (rdma-core's answer for a provider without the op).
    ibv_query_qp_data_in_order = f::nothing;
    _ibv_query_gid_ex = f::query_gid_ex;
    _ibv_query_gid_table = f::query_gid_table;
    ibv_is_fork_initialized = f::fork_unneeded;
    // IBVERBS_PRIVATE_34: the provider interface. libmlx5 and libefa are loaded by
    // perftest and call verbs_register_driver_34 from their constructors (accepted and
    // ignored); the rest is reached only through a provider's own device, never here.
    __verbs_log = f::nothing;
    __ioctl_final_num_attrs = f::ioctl_final_num_attrs;
    _verbs_init_and_alloc_context = f::unsupported_ptr;
    execute_ioctl = f::unsupported_int;
    ibv_cmd_advise_mr = f::unsupported_int;
    ibv_cmd_alloc_dm = f::unsupported_int;
    ibv_cmd_alloc_mw = f::unsupported_int;
    ibv_cmd_alloc_pd = f::unsupported_int;
    ibv_cmd_attach_mcast = f::unsupported_int;
    ibv_cmd_close_xrcd = f::unsupported_int;
    ibv_cmd_create_ah = f::unsupported_int;
    ibv_cmd_create_counters = f::unsupported_int;
    ibv_cmd_create_cq = f::unsupported_int;
    ibv_cmd_create_cq_ex = f::unsupported_int;
    ibv_cmd_create_flow = f::unsupported_int;
    ibv_cmd_create_flow_action_esp = f::unsupported_int;
    ibv_cmd_create_qp = f::unsupported_int;
    ibv_cmd_create_qp_ex = f::unsupported_int;
    ibv_cmd_create_qp_ex2 = f::unsupported_int;
    ibv_cmd_create_rwq_ind_table = f::unsupported_int;
    ibv_cmd_create_srq = f::unsupported_int;
    ibv_cmd_create_srq_ex = f::unsupported_int;
    ibv_cmd_create_wq = f::unsupported_int;
    ibv_cmd_dealloc_mw = f::unsupported_int;
    ibv_cmd_dealloc_pd = f::unsupported_int;
    ibv_cmd_dereg_mr = f::unsupported_int;
    ibv_cmd_destroy_ah = f::unsupported_int;
    ibv_cmd_destroy_counters = f::unsupported_int;
    ibv_cmd_destroy_cq = f::unsupported_int;
    ibv_cmd_destroy_flow = f::unsupported_int;
    ibv_cmd_destroy_flow_action = f::unsupported_int;
    ibv_cmd_destroy_qp = f::unsupported_int;
    ibv_cmd_destroy_rwq_ind_table = f::unsupported_int;
    ibv_cmd_destroy_srq = f::unsupported_int;
    ibv_cmd_destroy_wq = f::unsupported_int;
    ibv_cmd_detach_mcast = f::unsupported_int;
    ibv_cmd_free_dm = f::unsupported_int;
    ibv_cmd_get_context = f::unsupported_int;
    ibv_cmd_modify_cq = f::unsupported_int;
    ibv_cmd_modify_flow_action_esp = f::unsupported_int;
    ibv_cmd_modify_qp = f::unsupported_int;
    ibv_cmd_modify_qp_ex = f::unsupported_int;
    ibv_cmd_modify_srq = f::unsupported_int;
    ibv_cmd_modify_wq = f::unsupported_int;
    ibv_cmd_open_qp = f::unsupported_int;
    ibv_cmd_open_xrcd = f::unsupported_int;
    ibv_cmd_poll_cq = f::unsupported_int;
    ibv_cmd_post_recv = f::unsupported_int;
    ibv_cmd_post_send = f::unsupported_int;
    ibv_cmd_post_srq_recv = f::unsupported_int;
    ibv_cmd_query_context = f::unsupported_int;
    ibv_cmd_query_device_any = f::unsupported_int;
    ibv_cmd_query_mr = f::unsupported_int;
    ibv_cmd_query_port = f::unsupported_int;
    ibv_cmd_query_qp = f::unsupported_int;
    ibv_cmd_query_srq = f::unsupported_int;
    ibv_cmd_read_counters = f::unsupported_int;
    ibv_cmd_reg_dm_mr = f::unsupported_int;
    ibv_cmd_reg_dmabuf_mr = f::unsupported_int;
    ibv_cmd_reg_mr = f::unsupported_int;
    ibv_cmd_rereg_mr = f::unsupported_int;
    ibv_cmd_req_notify_cq = f::unsupported_int;
    ibv_cmd_resize_cq = f::unsupported_int;
    ibv_query_gid_type = f::query_gid_type;
    ibv_read_ibdev_sysfs_file = f::minus_one;
    verbs_init_cq = f::nothing;
    verbs_open_device = f::unsupported_ptr;
    verbs_register_driver_34 = f::nothing;
    verbs_set_ops = f::nothing;
    verbs_uninit_context = f::nothing;
}

// The compatibility versions rdma-core keeps next to the default ones
// (`ibv_alloc_pd@IBVERBS_1.0` beside `ibv_alloc_pd@@IBVERBS_1.1`): programs linked
// against the libibverbs of 2006 with its 1.0 structs (compat-1_0.c). Each is an entry
// point under an internal name that `.symver` renames to `name@NODE`; the map's
// `local: *` hides the internal name. The device list, name and GUID work as rdma-core's
// wrappers do; `ibv_open_device@IBVERBS_1.0` fails with EOPNOTSUPP (the 1.0 context
// with its own ops table is not implemented), so the object verbs of 1.0 are never
// reached with an object and answer EOPNOTSUPP (void ones do nothing).
macro_rules! compat {
    ($($name:ident @ $node:literal = $imp:path;)*) => {
        $(
            core::arch::global_asm!(
                concat!(".globl __ferroverbs_compat.", stringify!($name), ".", $node),
                concat!(".type __ferroverbs_compat.", stringify!($name), ".", $node, ",@function"),
                concat!("__ferroverbs_compat.", stringify!($name), ".", $node, ":"),
                "jmp {}",
                concat!(".size __ferroverbs_compat.", stringify!($name), ".", $node,
                    ", . - __ferroverbs_compat.", stringify!($name), ".", $node),
                concat!(".symver __ferroverbs_compat.", stringify!($name), ".", $node, ", ",
                    stringify!($name), "@", $node),
                sym $imp,
            );
        )*
        /// Every compatibility symbol this file exports: (name, node).
        #[cfg(test)]
        pub(crate) const COMPAT: &[(&str, &str)] = &[$((stringify!($name), $node)),*];
    };
}

compat! {
    ibv_get_device_list @ "IBVERBS_1.0" = f::get_device_list_1_0;
    ibv_free_device_list @ "IBVERBS_1.0" = f::free_device_list_1_0;
    ibv_get_device_name @ "IBVERBS_1.0" = f::get_device_name_1_0;
    ibv_get_device_guid @ "IBVERBS_1.0" = f::get_device_guid_1_0;
    // A 1.0 context is not offered: open fails, so no 1.0 object reaches the rest.
    ibv_open_device @ "IBVERBS_1.0" = f::unsupported_ptr;
    ibv_alloc_pd @ "IBVERBS_1.0" = f::unsupported_ptr;
    ibv_reg_mr @ "IBVERBS_1.0" = f::unsupported_ptr;
    ibv_create_cq @ "IBVERBS_1.0" = f::unsupported_ptr;
    ibv_create_srq @ "IBVERBS_1.0" = f::unsupported_ptr;
    ibv_create_qp @ "IBVERBS_1.0" = f::unsupported_ptr;
    ibv_create_ah @ "IBVERBS_1.0" = f::unsupported_ptr;
    ibv_close_device @ "IBVERBS_1.0" = f::unsupported_int;
    ibv_query_device @ "IBVERBS_1.0" = f::unsupported_int;
    ibv_query_port @ "IBVERBS_1.0" = f::unsupported_int;
    ibv_query_gid @ "IBVERBS_1.0" = f::unsupported_int;
    ibv_query_pkey @ "IBVERBS_1.0" = f::unsupported_int;
    ibv_dealloc_pd @ "IBVERBS_1.0" = f::unsupported_int;
    ibv_dereg_mr @ "IBVERBS_1.0" = f::unsupported_int;
    ibv_resize_cq @ "IBVERBS_1.0" = f::unsupported_int;
    ibv_destroy_cq @ "IBVERBS_1.0" = f::unsupported_int;
    ibv_get_cq_event @ "IBVERBS_1.0" = f::unsupported_int;
    ibv_modify_srq @ "IBVERBS_1.0" = f::unsupported_int;
    ibv_query_srq @ "IBVERBS_1.0" = f::unsupported_int;
    ibv_destroy_srq @ "IBVERBS_1.0" = f::unsupported_int;
    ibv_query_qp @ "IBVERBS_1.0" = f::unsupported_int;
    ibv_modify_qp @ "IBVERBS_1.0" = f::unsupported_int;
    ibv_destroy_qp @ "IBVERBS_1.0" = f::unsupported_int;
    ibv_destroy_ah @ "IBVERBS_1.0" = f::unsupported_int;
    ibv_attach_mcast @ "IBVERBS_1.0" = f::unsupported_int;
    ibv_detach_mcast @ "IBVERBS_1.0" = f::unsupported_int;
    ibv_get_async_event @ "IBVERBS_1.0" = f::unsupported_int;
    ibv_ack_async_event @ "IBVERBS_1.0" = f::nothing;
    ibv_ack_cq_events @ "IBVERBS_1.0" = f::nothing;
    // An empty stub in rdma-core too (kept for old libfabric usnic providers).
    ibv_register_driver @ "IBVERBS_1.1" = f::nothing;
}

// The one data symbol: `bool verbs_allow_disassociate_destroy` (1 byte, false).
core::arch::global_asm!(
    ".pushsection .bss.verbs_allow_disassociate_destroy,\"aw\",@nobits",
    ".globl verbs_allow_disassociate_destroy",
    ".type verbs_allow_disassociate_destroy,@object",
    ".size verbs_allow_disassociate_destroy, 1",
    "verbs_allow_disassociate_destroy:",
    ".zero 1",
    ".popsection",
);

#[cfg(test)]
mod tests {
    /// The map file and this list name the same symbols.
    #[test]
    fn the_map_and_the_exports_agree() {
        let map = include_str!("../libibverbs.map");
        let mut in_map: Vec<&str> = map
            .lines()
            .map(str::trim)
            .filter(|l| l.ends_with(';') && !l.contains(' ') && !l.starts_with('}'))
            .map(|l| l.trim_end_matches(';'))
            .filter(|s| *s != "verbs_allow_disassociate_destroy")
            .collect();
        let mut ours: Vec<&str> = super::FUNCTIONS.to_vec();
        in_map.sort_unstable();
        ours.sort_unstable();
        assert_eq!(in_map, ours);
    }

    /// Each compatibility version names a node the map defines, and its name also has
    /// a default version there (rdma-core's pairs), except `ibv_register_driver`, which
    /// rdma-core keeps at IBVERBS_1.1 only.
    #[test]
    fn compat_versions_name_nodes_of_the_map() {
        let map = include_str!("../libibverbs.map");
        for (name, node) in super::COMPAT {
            assert!(
                map.contains(&format!("\n{node} {{")),
                "{name}@{node}: no node"
            );
            assert!(
                *name == "ibv_register_driver" || super::FUNCTIONS.contains(name),
                "{name}@{node} without a default version"
            );
        }
        assert_eq!(super::COMPAT.len(), 34);
    }
}

//! The rdma_cm write() command ABI (`rdma/rdma_user_cm.h`, ABI version 4), which
//! librdmacm speaks on `/dev/infiniband/rdma_cm`: command and event numbers, and the
//! byte offset of every field of its commands and responses. Unlike uverbs, a
//! command's header counts `in` and `out` in bytes, and the response pointer is a
//! field of the payload. `tests/layout.rs` checks each offset and size against
//! the installed header with gcc.

/// Command numbers (`RDMA_USER_CM_CMD_*`).
pub mod cmd {
    #![allow(missing_docs)]
    pub const CREATE_ID: u32 = 0;
    pub const DESTROY_ID: u32 = 1;
    pub const BIND_IP: u32 = 2;
    pub const RESOLVE_IP: u32 = 3;
    pub const RESOLVE_ROUTE: u32 = 4;
    pub const QUERY_ROUTE: u32 = 5;
    pub const CONNECT: u32 = 6;
    pub const LISTEN: u32 = 7;
    pub const ACCEPT: u32 = 8;
    pub const REJECT: u32 = 9;
    pub const DISCONNECT: u32 = 10;
    pub const INIT_QP_ATTR: u32 = 11;
    pub const GET_EVENT: u32 = 12;
    pub const GET_OPTION: u32 = 13;
    pub const SET_OPTION: u32 = 14;
    pub const NOTIFY: u32 = 15;
    pub const JOIN_IP_MCAST: u32 = 16;
    pub const LEAVE_MCAST: u32 = 17;
    pub const MIGRATE_ID: u32 = 18;
    pub const QUERY: u32 = 19;
    pub const BIND: u32 = 20;
    pub const RESOLVE_ADDR: u32 = 21;
    pub const JOIN_MCAST: u32 = 22;
}

/// Event numbers of `rdma_ucm_event_resp.event` (`enum rdma_cm_event_type`).
pub mod event {
    #![allow(missing_docs)]
    pub const ADDR_RESOLVED: u32 = 0;
    pub const ADDR_ERROR: u32 = 1;
    pub const ROUTE_RESOLVED: u32 = 2;
    pub const ROUTE_ERROR: u32 = 3;
    pub const CONNECT_REQUEST: u32 = 4;
    pub const CONNECT_RESPONSE: u32 = 5;
    pub const CONNECT_ERROR: u32 = 6;
    pub const UNREACHABLE: u32 = 7;
    pub const REJECTED: u32 = 8;
    pub const ESTABLISHED: u32 = 9;
    pub const DISCONNECTED: u32 = 10;
    pub const DEVICE_REMOVAL: u32 = 11;
    pub const MULTICAST_JOIN: u32 = 12;
    pub const MULTICAST_ERROR: u32 = 13;
    pub const ADDR_CHANGE: u32 = 14;
    pub const TIMEWAIT_EXIT: u32 = 15;
}

/// `QUERY` options (`RDMA_USER_CM_QUERY_*`).
pub mod query {
    #![allow(missing_docs)]
    pub const ADDR: u32 = 0;
    pub const PATH: u32 = 1;
    pub const GID: u32 = 2;
}

/// The ABI version librdmacm accepts (3..=4) and this layer offers
/// (`class/misc/rdma_cm/abi_version`).
pub const ABI_VERSION: u32 = 4;
/// `RDMA_MAX_PRIVATE_DATA`: the private data buffer of a command or event.
pub const MAX_PRIVATE_DATA: usize = 256;

abi_structs! {
    /// Every command's first 8 bytes (`in`, `out` in bytes).
    /// (`in` is the `u16` at 4, between the two: a keyword in Rust, so not listed.)
    ucm_cmd_hdr = "rdma_ucm_cmd_hdr", size 8, { cmd: 0, out: 6 }
    ucm_create_id = "rdma_ucm_create_id", size 24, { uid: 0, response: 8, ps: 16, qp_type: 18, reserved: 19 }
    ucm_create_id_resp = "rdma_ucm_create_id_resp", size 4, { id: 0 }
    ucm_destroy_id = "rdma_ucm_destroy_id", size 16, { response: 0, id: 8, reserved: 12 }
    ucm_destroy_id_resp = "rdma_ucm_destroy_id_resp", size 4, { events_reported: 0 }
    ucm_bind_ip = "rdma_ucm_bind_ip", size 40, { response: 0, addr: 8, id: 36 }
    ucm_bind = "rdma_ucm_bind", size 136, { id: 0, addr_size: 4, reserved: 6, addr: 8 }
    ucm_resolve_ip = "rdma_ucm_resolve_ip", size 64, { src_addr: 0, dst_addr: 28, id: 56, timeout_ms: 60 }
    ucm_resolve_addr = "rdma_ucm_resolve_addr", size 272, {
        id: 0, timeout_ms: 4, src_size: 8, dst_size: 10, reserved: 12, src_addr: 16, dst_addr: 144,
    }
    ucm_resolve_route = "rdma_ucm_resolve_route", size 8, { id: 0, timeout_ms: 4 }
    ucm_query = "rdma_ucm_query", size 16, { response: 0, id: 8, option: 12 }
    user_path_rec = "ib_user_path_rec", size 64, {
        dgid: 0, sgid: 16, dlid: 32, slid: 34, raw_traffic: 36, flow_label: 40, reversible: 44,
        mtu: 48, pkey: 52, hop_limit: 54, traffic_class: 55, numb_path: 56, sl: 57,
        mtu_selector: 58, rate_selector: 59, rate: 60, packet_life_time_selector: 61,
        packet_life_time: 62, preference: 63,
    }
    ucm_query_route_resp = "rdma_ucm_query_route_resp", size 208, {
        node_guid: 0, ib_route: 8, src_addr: 136, dst_addr: 164, num_paths: 192, port_num: 196,
        reserved: 197, ibdev_index: 200, reserved1: 204,
    }
    ucm_query_addr_resp = "rdma_ucm_query_addr_resp", size 280, {
        node_guid: 0, port_num: 8, reserved: 9, pkey: 10, src_size: 12, dst_size: 14,
        src_addr: 16, dst_addr: 144, ibdev_index: 272, reserved1: 276,
    }
    ucm_conn_param = "rdma_ucm_conn_param", size 272, {
        qp_num: 0, qkey: 4, private_data: 8, private_data_len: 264, srq: 265,
        responder_resources: 266, initiator_depth: 267, flow_control: 268, retry_count: 269,
        rnr_retry_count: 270, valid: 271,
    }
    ucm_ud_param = "rdma_ucm_ud_param", size 304, {
        qp_num: 0, qkey: 4, ah_attr: 8, private_data: 40, private_data_len: 296, reserved: 297,
    }
    ucm_ece = "rdma_ucm_ece", size 8, { vendor_id: 0, attr_mod: 4 }
    ucm_connect = "rdma_ucm_connect", size 288, { conn_param: 0, id: 272, reserved: 276, ece: 280 }
    ucm_listen = "rdma_ucm_listen", size 8, { id: 0, backlog: 4 }
    ucm_accept = "rdma_ucm_accept", size 296, { uid: 0, conn_param: 8, id: 280, reserved: 284, ece: 288 }
    ucm_reject = "rdma_ucm_reject", size 264, {
        id: 0, private_data_len: 4, reason: 5, reserved: 6, private_data: 8,
    }
    ucm_disconnect = "rdma_ucm_disconnect", size 4, { id: 0 }
    ucm_init_qp_attr = "rdma_ucm_init_qp_attr", size 16, { response: 0, id: 8, qp_state: 12 }
    ucm_notify = "rdma_ucm_notify", size 8, { id: 0, event: 4 }
    ucm_get_event = "rdma_ucm_get_event", size 8, { response: 0 }
    ucm_event_resp = "rdma_ucm_event_resp", size 336, {
        uid: 0, id: 8, event: 12, status: 16, param: 20, reserved: 324, ece: 328,
    }
    ucm_set_option = "rdma_ucm_set_option", size 24, {
        optval: 0, id: 8, level: 12, optname: 16, optlen: 20,
    }
    ucm_join_ip_mcast = "rdma_ucm_join_ip_mcast", size 48, { response: 0, uid: 8, addr: 16, id: 44 }
    ucm_join_mcast = "rdma_ucm_join_mcast", size 152, {
        response: 0, uid: 8, id: 16, addr_size: 20, join_flags: 22, addr: 24,
    }
    ucm_migrate_id = "rdma_ucm_migrate_id", size 16, { response: 0, id: 8, fd: 12 }
    ucm_migrate_resp = "rdma_ucm_migrate_resp", size 4, { events_reported: 0 }
    /// The INIT_QP_ATTR response.
    uverbs_qp_attr = "ib_uverbs_qp_attr", size 144, {
        qp_attr_mask: 0, qp_state: 4, cur_qp_state: 8, path_mtu: 12, path_mig_state: 16,
        qkey: 20, rq_psn: 24, sq_psn: 28, dest_qp_num: 32, qp_access_flags: 36, ah_attr: 40,
        alt_ah_attr: 72, max_send_wr: 104, max_recv_wr: 108, max_send_sge: 112,
        max_recv_sge: 116, max_inline_data: 120, pkey_index: 124, alt_pkey_index: 126,
        en_sqd_async_notify: 128, sq_draining: 129, max_rd_atomic: 130,
        max_dest_rd_atomic: 131, min_rnr_timer: 132, port_num: 133, timeout: 134,
        retry_cnt: 135, rnr_retry: 136, alt_port_num: 137, alt_timeout: 138,
    }
}

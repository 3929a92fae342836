//! The uverbs ioctl ABI (`RDMA_VERBS_IOCTL`, `rdma/rdma_user_ioctl_cmds.h`): the
//! header and attribute layouts, and the object, method and attribute ids
//! (`rdma/ib_user_ioctl_cmds.h`, `rdma/mlx5_user_ioctl_cmds.h`) of the methods this
//! layer implements. `tests/layout.rs` checks each against the installed headers
//! with gcc.

abi_structs! {
    /// The command header; `attrs` follow it.
    ioctl_hdr = "ib_uverbs_ioctl_hdr", size 24, {
        length: 0, object_id: 2, method_id: 4, num_attrs: 6, reserved1: 8, driver_id: 16,
        reserved2: 20, attrs: 24,
    }
    /// One attribute: inline data (`len` ≤ 8), a pointer, an object handle or a
    /// descriptor in `data`.
    attr = "ib_uverbs_attr", size 16, { attr_id: 0, len: 2, flags: 4, attr_data: 6, data: 8 }
    /// MLX5_IB_METHOD_QUERY_PORT's answer (`mlx5dv_query_port`).
    mlx5_query_port = "mlx5_ib_uapi_query_port", size 40, {
        flags: 0, vport: 8, vport_vhca_id: 10, esw_owner_vhca_id: 12,
        vport_steering_icm_rx: 16, vport_steering_icm_tx: 24, reg_c0: 32,
    }
    /// QP_CREATE's capabilities, in and out.
    qp_cap = "ib_uverbs_qp_cap", size 20, {
        max_send_wr: 0, max_recv_wr: 4, max_send_sge: 8, max_recv_sge: 12, max_inline_data: 16,
    }
}

/// `UVERBS_ATTR_F_MANDATORY`, `UVERBS_ATTR_F_VALID_OUTPUT`.
pub const ATTR_F_MANDATORY: u16 = 1;
/// The kernel sets it on each output attribute it wrote.
pub const ATTR_F_VALID_OUTPUT: u16 = 2;

/// Ids, named as in the headers (checked by `tests/layout.rs`).
pub const IDS: &[(&str, u16)] = &[
    ("UVERBS_OBJECT_DEVICE", OBJECT_DEVICE),
    ("UVERBS_OBJECT_PD", OBJECT_PD),
    ("UVERBS_OBJECT_MR", OBJECT_MR),
    ("UVERBS_OBJECT_ASYNC_EVENT", OBJECT_ASYNC_EVENT),
    ("UVERBS_METHOD_QUERY_CONTEXT", METHOD_QUERY_CONTEXT),
    (
        "UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS",
        QUERY_CONTEXT_NUM_COMP_VECTORS,
    ),
    (
        "UVERBS_ATTR_QUERY_CONTEXT_CORE_SUPPORT",
        QUERY_CONTEXT_CORE_SUPPORT,
    ),
    (
        "MLX5_IB_ATTR_QUERY_CONTEXT_RESP_UCTX",
        MLX5_QUERY_CONTEXT_RESP_UCTX,
    ),
    ("UVERBS_METHOD_QUERY_MR", METHOD_QUERY_MR),
    ("UVERBS_METHOD_ADVISE_MR", METHOD_ADVISE_MR),
    ("UVERBS_ATTR_ADVISE_MR_PD_HANDLE", ADVISE_MR_PD_HANDLE),
    ("UVERBS_ATTR_ADVISE_MR_ADVICE", ADVISE_MR_ADVICE),
    ("UVERBS_ATTR_ADVISE_MR_FLAGS", ADVISE_MR_FLAGS),
    ("UVERBS_ATTR_ADVISE_MR_SGE_LIST", ADVISE_MR_SGE_LIST),
    ("UVERBS_ATTR_QUERY_MR_HANDLE", QUERY_MR_HANDLE),
    ("UVERBS_ATTR_QUERY_MR_RESP_LKEY", QUERY_MR_RESP_LKEY),
    ("UVERBS_ATTR_QUERY_MR_RESP_RKEY", QUERY_MR_RESP_RKEY),
    ("UVERBS_ATTR_QUERY_MR_RESP_LENGTH", QUERY_MR_RESP_LENGTH),
    ("UVERBS_ATTR_QUERY_MR_RESP_IOVA", QUERY_MR_RESP_IOVA),
    ("MLX5_IB_METHOD_QUERY_PORT", MLX5_METHOD_QUERY_PORT),
    ("MLX5_IB_ATTR_QUERY_PORT_PORT_NUM", MLX5_QUERY_PORT_PORT_NUM),
    ("MLX5_IB_ATTR_QUERY_PORT", MLX5_QUERY_PORT),
    ("MLX5_IB_METHOD_PD_QUERY", MLX5_METHOD_PD_QUERY),
    ("MLX5_IB_ATTR_QUERY_PD_HANDLE", MLX5_QUERY_PD_HANDLE),
    ("MLX5_IB_ATTR_QUERY_PD_RESP_PDN", MLX5_QUERY_PD_RESP_PDN),
    ("UVERBS_METHOD_ASYNC_EVENT_ALLOC", METHOD_ASYNC_EVENT_ALLOC),
    (
        "UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE",
        ASYNC_EVENT_ALLOC_FD_HANDLE,
    ),
    (
        "IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS",
        CORE_SUPPORT_OPTIONAL_MR_ACCESS,
    ),
    ("MLX5_IB_OBJECT_UAR", MLX5_OBJECT_UAR),
    ("MLX5_IB_METHOD_UAR_OBJ_ALLOC", MLX5_METHOD_UAR_OBJ_ALLOC),
    (
        "MLX5_IB_METHOD_UAR_OBJ_DESTROY",
        MLX5_METHOD_UAR_OBJ_DESTROY,
    ),
    (
        "MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE",
        MLX5_UAR_OBJ_ALLOC_HANDLE,
    ),
    ("MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE", MLX5_UAR_OBJ_ALLOC_TYPE),
    (
        "MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET",
        MLX5_UAR_OBJ_ALLOC_MMAP_OFFSET,
    ),
    (
        "MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH",
        MLX5_UAR_OBJ_ALLOC_MMAP_LENGTH,
    ),
    (
        "MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID",
        MLX5_UAR_OBJ_ALLOC_PAGE_ID,
    ),
    (
        "MLX5_IB_ATTR_UAR_OBJ_DESTROY_HANDLE",
        MLX5_UAR_OBJ_DESTROY_HANDLE,
    ),
    ("MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF", MLX5_UAR_ALLOC_TYPE_BF),
    ("MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC", MLX5_UAR_ALLOC_TYPE_NC),
    ("UVERBS_OBJECT_CQ", OBJECT_CQ),
    ("UVERBS_OBJECT_QP", OBJECT_QP),
    ("UVERBS_METHOD_CQ_CREATE", METHOD_CQ_CREATE),
    ("UVERBS_METHOD_QP_CREATE", METHOD_QP_CREATE),
    ("UVERBS_ATTR_UHW_IN", UHW_IN),
    ("UVERBS_ATTR_UHW_OUT", UHW_OUT),
    ("UVERBS_ATTR_CREATE_CQ_HANDLE", CREATE_CQ_HANDLE),
    ("UVERBS_ATTR_CREATE_CQ_CQE", CREATE_CQ_CQE),
    ("UVERBS_ATTR_CREATE_CQ_USER_HANDLE", CREATE_CQ_USER_HANDLE),
    ("UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL", CREATE_CQ_COMP_CHANNEL),
    ("UVERBS_ATTR_CREATE_CQ_COMP_VECTOR", CREATE_CQ_COMP_VECTOR),
    ("UVERBS_ATTR_CREATE_CQ_FLAGS", CREATE_CQ_FLAGS),
    ("UVERBS_ATTR_CREATE_CQ_RESP_CQE", CREATE_CQ_RESP_CQE),
    ("UVERBS_ATTR_CREATE_CQ_EVENT_FD", CREATE_CQ_EVENT_FD),
    ("UVERBS_ATTR_CREATE_QP_HANDLE", CREATE_QP_HANDLE),
    ("UVERBS_ATTR_CREATE_QP_XRCD_HANDLE", CREATE_QP_XRCD_HANDLE),
    ("UVERBS_ATTR_CREATE_QP_PD_HANDLE", CREATE_QP_PD_HANDLE),
    ("UVERBS_ATTR_CREATE_QP_SRQ_HANDLE", CREATE_QP_SRQ_HANDLE),
    (
        "UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE",
        CREATE_QP_SEND_CQ_HANDLE,
    ),
    (
        "UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE",
        CREATE_QP_RECV_CQ_HANDLE,
    ),
    (
        "UVERBS_ATTR_CREATE_QP_IND_TABLE_HANDLE",
        CREATE_QP_IND_TABLE_HANDLE,
    ),
    ("UVERBS_ATTR_CREATE_QP_USER_HANDLE", CREATE_QP_USER_HANDLE),
    ("UVERBS_ATTR_CREATE_QP_CAP", CREATE_QP_CAP),
    ("UVERBS_ATTR_CREATE_QP_TYPE", CREATE_QP_TYPE),
    ("UVERBS_ATTR_CREATE_QP_FLAGS", CREATE_QP_FLAGS),
    ("UVERBS_ATTR_CREATE_QP_SOURCE_QPN", CREATE_QP_SOURCE_QPN),
    ("UVERBS_ATTR_CREATE_QP_EVENT_FD", CREATE_QP_EVENT_FD),
    ("UVERBS_ATTR_CREATE_QP_RESP_CAP", CREATE_QP_RESP_CAP),
    ("UVERBS_ATTR_CREATE_QP_RESP_QP_NUM", CREATE_QP_RESP_QP_NUM),
    (
        "IB_UVERBS_QP_CREATE_SQ_SIG_ALL",
        QP_CREATE_SQ_SIG_ALL as u16,
    ),
    ("UVERBS_ATTR_F_MANDATORY", ATTR_F_MANDATORY),
    ("UVERBS_ATTR_F_VALID_OUTPUT", ATTR_F_VALID_OUTPUT),
];

#[allow(missing_docs)]
mod ids {
    pub const OBJECT_DEVICE: u16 = 0;
    pub const OBJECT_PD: u16 = 1;
    pub const OBJECT_MR: u16 = 7;
    pub const OBJECT_ASYNC_EVENT: u16 = 16;
    pub const METHOD_QUERY_CONTEXT: u16 = 4;
    pub const QUERY_CONTEXT_NUM_COMP_VECTORS: u16 = 0;
    pub const QUERY_CONTEXT_CORE_SUPPORT: u16 = 1;
    pub const MLX5_QUERY_CONTEXT_RESP_UCTX: u16 = 0x1000;
    pub const METHOD_QUERY_MR: u16 = 3;
    pub const METHOD_ADVISE_MR: u16 = 2;
    pub const ADVISE_MR_PD_HANDLE: u16 = 0;
    pub const ADVISE_MR_ADVICE: u16 = 1;
    pub const ADVISE_MR_FLAGS: u16 = 2;
    pub const ADVISE_MR_SGE_LIST: u16 = 3;
    pub const QUERY_MR_HANDLE: u16 = 0;
    pub const QUERY_MR_RESP_LKEY: u16 = 1;
    pub const QUERY_MR_RESP_RKEY: u16 = 2;
    pub const QUERY_MR_RESP_LENGTH: u16 = 3;
    pub const QUERY_MR_RESP_IOVA: u16 = 4;
    pub const MLX5_METHOD_QUERY_PORT: u16 = 0x1000;
    pub const MLX5_QUERY_PORT_PORT_NUM: u16 = 0x1000;
    pub const MLX5_QUERY_PORT: u16 = 0x1001;
    pub const MLX5_METHOD_PD_QUERY: u16 = 0x1000;
    pub const MLX5_QUERY_PD_HANDLE: u16 = 0x1000;
    pub const MLX5_QUERY_PD_RESP_PDN: u16 = 0x1001;
    pub const METHOD_ASYNC_EVENT_ALLOC: u16 = 0;
    pub const ASYNC_EVENT_ALLOC_FD_HANDLE: u16 = 0;
    pub const CORE_SUPPORT_OPTIONAL_MR_ACCESS: u16 = 1;
    pub const MLX5_OBJECT_UAR: u16 = 0x1008;
    pub const MLX5_METHOD_UAR_OBJ_ALLOC: u16 = 0x1000;
    pub const MLX5_METHOD_UAR_OBJ_DESTROY: u16 = 0x1001;
    pub const MLX5_UAR_OBJ_ALLOC_HANDLE: u16 = 0x1000;
    pub const MLX5_UAR_OBJ_ALLOC_TYPE: u16 = 0x1001;
    pub const MLX5_UAR_OBJ_ALLOC_MMAP_OFFSET: u16 = 0x1002;
    pub const MLX5_UAR_OBJ_ALLOC_MMAP_LENGTH: u16 = 0x1003;
    pub const MLX5_UAR_OBJ_ALLOC_PAGE_ID: u16 = 0x1004;
    pub const MLX5_UAR_OBJ_DESTROY_HANDLE: u16 = 0x1000;
    pub const MLX5_UAR_ALLOC_TYPE_BF: u16 = 0;
    pub const MLX5_UAR_ALLOC_TYPE_NC: u16 = 1;
    pub const OBJECT_CQ: u16 = 3;
    pub const OBJECT_QP: u16 = 4;
    pub const METHOD_CQ_CREATE: u16 = 0;
    pub const METHOD_QP_CREATE: u16 = 0;
    pub const UHW_IN: u16 = 0x1000;
    pub const UHW_OUT: u16 = 0x1001;
    pub const CREATE_CQ_HANDLE: u16 = 0;
    pub const CREATE_CQ_CQE: u16 = 1;
    pub const CREATE_CQ_USER_HANDLE: u16 = 2;
    pub const CREATE_CQ_COMP_CHANNEL: u16 = 3;
    pub const CREATE_CQ_COMP_VECTOR: u16 = 4;
    pub const CREATE_CQ_FLAGS: u16 = 5;
    pub const CREATE_CQ_RESP_CQE: u16 = 6;
    pub const CREATE_CQ_EVENT_FD: u16 = 7;
    pub const CREATE_QP_HANDLE: u16 = 0;
    pub const CREATE_QP_XRCD_HANDLE: u16 = 1;
    pub const CREATE_QP_PD_HANDLE: u16 = 2;
    pub const CREATE_QP_SRQ_HANDLE: u16 = 3;
    pub const CREATE_QP_SEND_CQ_HANDLE: u16 = 4;
    pub const CREATE_QP_RECV_CQ_HANDLE: u16 = 5;
    pub const CREATE_QP_IND_TABLE_HANDLE: u16 = 6;
    pub const CREATE_QP_USER_HANDLE: u16 = 7;
    pub const CREATE_QP_CAP: u16 = 8;
    pub const CREATE_QP_TYPE: u16 = 9;
    pub const CREATE_QP_FLAGS: u16 = 10;
    pub const CREATE_QP_SOURCE_QPN: u16 = 11;
    pub const CREATE_QP_EVENT_FD: u16 = 12;
    pub const CREATE_QP_RESP_CAP: u16 = 13;
    pub const CREATE_QP_RESP_QP_NUM: u16 = 14;
    /// `IB_UVERBS_QP_CREATE_SQ_SIG_ALL` (the other create flags keep the write
    /// command's bit numbers).
    pub const QP_CREATE_SQ_SIG_ALL: u32 = 1 << 12;
}
pub use ids::*;

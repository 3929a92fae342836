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
    ("UVERBS_ATTR_QUERY_MR_HANDLE", QUERY_MR_HANDLE),
    ("UVERBS_ATTR_QUERY_MR_RESP_LKEY", QUERY_MR_RESP_LKEY),
    ("UVERBS_ATTR_QUERY_MR_RESP_RKEY", QUERY_MR_RESP_RKEY),
    ("UVERBS_ATTR_QUERY_MR_RESP_LENGTH", QUERY_MR_RESP_LENGTH),
    ("UVERBS_ATTR_QUERY_MR_RESP_IOVA", QUERY_MR_RESP_IOVA),
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
    pub const QUERY_MR_HANDLE: u16 = 0;
    pub const QUERY_MR_RESP_LKEY: u16 = 1;
    pub const QUERY_MR_RESP_RKEY: u16 = 2;
    pub const QUERY_MR_RESP_LENGTH: u16 = 3;
    pub const QUERY_MR_RESP_IOVA: u16 = 4;
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
}
pub use ids::*;

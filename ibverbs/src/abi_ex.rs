//! `#[repr(C)]` mirrors of the `<infiniband/verbs.h>` structures of the extended
//! verbs (rdma-core v44, x86-64): the `ibv_qp_ex` work-request interface, the
//! `ibv_cq_ex` polling interface, memory windows. Checked against the installed
//! header by this module's test (gcc prints `offsetof`/`sizeof` of every member of
//! [`LAYOUT_EX`] and every expression of [`EXPRESSIONS_EX`]) and, for the offsets the
//! applications' inline code depends on, at compile time.

#![allow(non_camel_case_types)]

use std::ffi::{c_int, c_uint, c_void};
use std::mem::{offset_of, size_of};

use crate::abi::{
    ibv_ah, ibv_comp_channel, ibv_context, ibv_cq, ibv_mr, ibv_pd, ibv_qp, ibv_qp_cap, ibv_sge,
};

/// A pointer to an `extern "C"` function stored in a C struct (NULL when unset).
pub type FnPtr = *const c_void;

/// `struct ibv_qp_ex`: `ibv_qp`, then the work-request interface.
#[repr(C)]
pub struct ibv_qp_ex {
    /// The QP.
    pub qp_base: ibv_qp,
    /// Compatibility mask.
    pub comp_mask: u64,
    /// The next request's `wr_id` (written by the application).
    pub wr_id: u64,
    /// The next request's `ibv_send_flags` (written by the application).
    pub wr_flags: c_uint,
    /// `wr_atomic_cmp_swp`.
    pub wr_atomic_cmp_swp: FnPtr,
    /// `wr_atomic_fetch_add`.
    pub wr_atomic_fetch_add: FnPtr,
    /// `wr_bind_mw`.
    pub wr_bind_mw: FnPtr,
    /// `wr_local_inv`.
    pub wr_local_inv: FnPtr,
    /// `wr_rdma_read`.
    pub wr_rdma_read: FnPtr,
    /// `wr_rdma_write`.
    pub wr_rdma_write: FnPtr,
    /// `wr_rdma_write_imm`.
    pub wr_rdma_write_imm: FnPtr,
    /// `wr_send`.
    pub wr_send: FnPtr,
    /// `wr_send_imm`.
    pub wr_send_imm: FnPtr,
    /// `wr_send_inv`.
    pub wr_send_inv: FnPtr,
    /// `wr_send_tso`.
    pub wr_send_tso: FnPtr,
    /// `wr_set_ud_addr`.
    pub wr_set_ud_addr: FnPtr,
    /// `wr_set_xrc_srqn`.
    pub wr_set_xrc_srqn: FnPtr,
    /// `wr_set_inline_data`.
    pub wr_set_inline_data: FnPtr,
    /// `wr_set_inline_data_list`.
    pub wr_set_inline_data_list: FnPtr,
    /// `wr_set_sge`.
    pub wr_set_sge: FnPtr,
    /// `wr_set_sge_list`.
    pub wr_set_sge_list: FnPtr,
    /// `wr_start`.
    pub wr_start: FnPtr,
    /// `wr_complete`.
    pub wr_complete: FnPtr,
    /// `wr_abort`.
    pub wr_abort: FnPtr,
    /// `wr_atomic_write`.
    pub wr_atomic_write: FnPtr,
}

/// `struct ibv_cq_ex`: the first 128 bytes are `struct ibv_cq`'s.
#[repr(C)]
pub struct ibv_cq_ex {
    /// The CQ.
    pub cq: ibv_cq,
    /// Compatibility mask.
    pub comp_mask: u32,
    /// `enum ibv_wc_status` of the current completion.
    pub status: c_uint,
    /// `wr_id` of the current completion.
    pub wr_id: u64,
    /// `start_poll`.
    pub start_poll: FnPtr,
    /// `next_poll`.
    pub next_poll: FnPtr,
    /// `end_poll`.
    pub end_poll: FnPtr,
    /// `read_opcode`.
    pub read_opcode: FnPtr,
    /// `read_vendor_err`.
    pub read_vendor_err: FnPtr,
    /// `read_byte_len`.
    pub read_byte_len: FnPtr,
    /// `read_imm_data`.
    pub read_imm_data: FnPtr,
    /// `read_qp_num`.
    pub read_qp_num: FnPtr,
    /// `read_src_qp`.
    pub read_src_qp: FnPtr,
    /// `read_wc_flags`.
    pub read_wc_flags: FnPtr,
    /// `read_slid`.
    pub read_slid: FnPtr,
    /// `read_sl`.
    pub read_sl: FnPtr,
    /// `read_dlid_path_bits`.
    pub read_dlid_path_bits: FnPtr,
    /// `read_completion_ts`.
    pub read_completion_ts: FnPtr,
    /// `read_cvlan`.
    pub read_cvlan: FnPtr,
    /// `read_flow_tag`.
    pub read_flow_tag: FnPtr,
    /// `read_tm_info`.
    pub read_tm_info: FnPtr,
    /// `read_completion_wallclock_ns`.
    pub read_completion_wallclock_ns: FnPtr,
}

/// `struct ibv_mw`.
#[repr(C)]
pub struct ibv_mw {
    /// Context.
    pub context: *mut ibv_context,
    /// PD.
    pub pd: *mut ibv_pd,
    /// The window's current key.
    pub rkey: u32,
    /// Handle.
    pub handle: u32,
    /// `enum ibv_mw_type`.
    pub r#type: c_uint,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind_info {
    /// The region (NULL with length 0: unbind).
    pub mr: *mut ibv_mr,
    /// Start address.
    pub addr: u64,
    /// Length.
    pub length: u64,
    /// `ibv_access_flags` of the window.
    pub mw_access_flags: c_uint,
}

/// `struct ibv_mw_bind`.
#[repr(C)]
pub struct ibv_mw_bind {
    /// Returned in the completion.
    pub wr_id: u64,
    /// `ibv_send_flags`.
    pub send_flags: c_uint,
    /// What to bind.
    pub bind_info: ibv_mw_bind_info,
}

/// The `bind_mw` member of `struct ibv_send_wr`'s last union.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct send_wr_bind_mw {
    /// The window.
    pub mw: *mut ibv_mw,
    /// The key the window gets.
    pub rkey: u32,
    /// What to bind.
    pub bind_info: ibv_mw_bind_info,
}

/// `struct ibv_data_buf`.
#[repr(C)]
pub struct ibv_data_buf {
    /// Address.
    pub addr: *mut c_void,
    /// Length.
    pub length: usize,
}

/// `struct ibv_rx_hash_conf` (not supported; mirrored for the layout).
#[repr(C)]
pub struct ibv_rx_hash_conf {
    /// Hash function.
    pub rx_hash_function: u8,
    /// Key length.
    pub rx_hash_key_len: u8,
    /// Key.
    pub rx_hash_key: *mut u8,
    /// Fields.
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex`.
#[repr(C)]
pub struct ibv_qp_init_attr_ex {
    /// User context.
    pub qp_context: *mut c_void,
    /// Send CQ.
    pub send_cq: *mut ibv_cq,
    /// Receive CQ.
    pub recv_cq: *mut ibv_cq,
    /// SRQ.
    pub srq: *mut c_void,
    /// Capabilities (in and out).
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type`.
    pub qp_type: c_uint,
    /// Signal all.
    pub sq_sig_all: c_int,
    /// `IBV_QP_INIT_ATTR_*`.
    pub comp_mask: u32,
    /// PD.
    pub pd: *mut ibv_pd,
    /// XRC domain.
    pub xrcd: *mut c_void,
    /// `IBV_QP_CREATE_*`.
    pub create_flags: u32,
    /// TSO header.
    pub max_tso_header: u16,
    /// RSS indirection table.
    pub rwq_ind_tbl: *mut c_void,
    /// RSS hash.
    pub rx_hash_conf: ibv_rx_hash_conf,
    /// Source QPN.
    pub source_qpn: u32,
    /// `IBV_QP_EX_WITH_*`.
    pub send_ops_flags: u64,
}

/// `struct ibv_cq_init_attr_ex`.
#[repr(C)]
pub struct ibv_cq_init_attr_ex {
    /// Entries.
    pub cqe: u32,
    /// User context.
    pub cq_context: *mut c_void,
    /// Completion channel.
    pub channel: *mut ibv_comp_channel,
    /// Completion vector.
    pub comp_vector: u32,
    /// `IBV_WC_EX_WITH_*`.
    pub wc_flags: u64,
    /// `IBV_CQ_INIT_ATTR_MASK_*`.
    pub comp_mask: u32,
    /// `IBV_CREATE_CQ_ATTR_*`.
    pub flags: u32,
    /// Parent domain.
    pub parent_domain: *mut ibv_pd,
}

/// `struct ibv_poll_cq_attr`.
#[repr(C)]
pub struct ibv_poll_cq_attr {
    /// Compatibility mask (0).
    pub comp_mask: u32,
}

/// Slots of `struct ibv_context_ops` for memory windows.
pub mod ops {
    /// `alloc_mw` (`ibv_alloc_mw`).
    pub const ALLOC_MW: usize = crate::abi::ops::ALLOC_MW;
    /// `bind_mw` (`ibv_bind_mw`).
    pub const BIND_MW: usize = 8;
    /// `dealloc_mw` (`ibv_dealloc_mw`).
    pub const DEALLOC_MW: usize = 9;
}

/// The constants of the extended verbs.
pub mod c {
    /// `IBV_WR_LOCAL_INV`.
    pub const IBV_WR_LOCAL_INV: u32 = 7;
    /// `IBV_WR_BIND_MW`.
    pub const IBV_WR_BIND_MW: u32 = 8;
    /// `IBV_MW_TYPE_1`.
    pub const IBV_MW_TYPE_1: u32 = 1;
    /// `IBV_MW_TYPE_2`.
    pub const IBV_MW_TYPE_2: u32 = 2;
    /// `IBV_ACCESS_ZERO_BASED`.
    pub const IBV_ACCESS_ZERO_BASED: u32 = 1 << 5;
    /// `IBV_QP_INIT_ATTR_PD`.
    pub const IBV_QP_INIT_ATTR_PD: u32 = 1;
    /// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
    pub const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;
    /// `IBV_QP_INIT_ATTR_CREATE_FLAGS`.
    pub const IBV_QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
    /// `IBV_QP_EX_WITH_RDMA_WRITE`.
    pub const IBV_QP_EX_WITH_RDMA_WRITE: u64 = 1 << 0;
    /// `IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM`.
    pub const IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
    /// `IBV_QP_EX_WITH_SEND`.
    pub const IBV_QP_EX_WITH_SEND: u64 = 1 << 2;
    /// `IBV_QP_EX_WITH_SEND_WITH_IMM`.
    pub const IBV_QP_EX_WITH_SEND_WITH_IMM: u64 = 1 << 3;
    /// `IBV_QP_EX_WITH_RDMA_READ`.
    pub const IBV_QP_EX_WITH_RDMA_READ: u64 = 1 << 4;
    /// `IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP`.
    pub const IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
    /// `IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD`.
    pub const IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
    /// `IBV_QP_EX_WITH_LOCAL_INV`.
    pub const IBV_QP_EX_WITH_LOCAL_INV: u64 = 1 << 7;
    /// `IBV_QP_EX_WITH_BIND_MW`.
    pub const IBV_QP_EX_WITH_BIND_MW: u64 = 1 << 8;
    /// `IBV_QP_EX_WITH_SEND_WITH_INV`.
    pub const IBV_QP_EX_WITH_SEND_WITH_INV: u64 = 1 << 9;
    /// `IBV_QP_EX_WITH_TSO`.
    pub const IBV_QP_EX_WITH_TSO: u64 = 1 << 10;
    /// `IBV_QP_EX_WITH_ATOMIC_WRITE`.
    pub const IBV_QP_EX_WITH_ATOMIC_WRITE: u64 = 1 << 12;
    /// `IBV_WC_EX_WITH_BYTE_LEN` .. `IBV_WC_EX_WITH_DLID_PATH_BITS`:
    /// `IBV_WC_STANDARD_FLAGS`.
    pub const IBV_WC_STANDARD_FLAGS: u64 = 0x7f;
    /// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`.
    pub const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP: u64 = 1 << 7;
    /// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK`.
    pub const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK: u64 = 1 << 11;
    /// `IBV_CREATE_CQ_SUP_WC_FLAGS`.
    pub const IBV_CREATE_CQ_SUP_WC_FLAGS: u64 = 0xfff;
    /// `IBV_CQ_INIT_ATTR_MASK_FLAGS`.
    pub const IBV_CQ_INIT_ATTR_MASK_FLAGS: u32 = 1;
    /// `IBV_CQ_INIT_ATTR_MASK_PD`.
    pub const IBV_CQ_INIT_ATTR_MASK_PD: u32 = 2;
    /// `IBV_CREATE_CQ_ATTR_SINGLE_THREADED`.
    pub const IBV_CREATE_CQ_ATTR_SINGLE_THREADED: u32 = 1;
    /// `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`.
    pub const IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: u32 = 2;
}

/// One member checked against the header: `(struct, member, offset)`; the struct
/// sizes are members named `sizeof`.
pub type Member = (&'static str, &'static str, usize);

macro_rules! members {
    ($($s:ident : $($f:ident),*;)*) => {
        &[$(
            (stringify!($s), "sizeof", size_of::<$s>()),
            $((stringify!($s), stringify!($f), offset_of!($s, $f)),)*
        )*]
    };
}

/// Every mirrored struct's size and member offsets.
pub const LAYOUT_EX: &[Member] = members! {
    ibv_qp_ex: qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp, wr_atomic_fetch_add,
        wr_bind_mw, wr_local_inv, wr_rdma_read, wr_rdma_write, wr_rdma_write_imm, wr_send,
        wr_send_imm, wr_send_inv, wr_send_tso, wr_set_ud_addr, wr_set_xrc_srqn,
        wr_set_inline_data, wr_set_inline_data_list, wr_set_sge, wr_set_sge_list, wr_start,
        wr_complete, wr_abort, wr_atomic_write;
    ibv_cq_ex: comp_mask, status, wr_id, start_poll, next_poll, end_poll, read_opcode,
        read_vendor_err, read_byte_len, read_imm_data, read_qp_num, read_src_qp,
        read_wc_flags, read_slid, read_sl, read_dlid_path_bits, read_completion_ts,
        read_cvlan, read_flow_tag, read_tm_info, read_completion_wallclock_ns;
    ibv_mw: context, pd, rkey, handle;
    ibv_mw_bind_info: mr, addr, length, mw_access_flags;
    ibv_mw_bind: wr_id, send_flags, bind_info;
    ibv_data_buf: addr, length;
    ibv_rx_hash_conf: rx_hash_function, rx_hash_key_len, rx_hash_key, rx_hash_fields_mask;
    ibv_qp_init_attr_ex: qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all,
        comp_mask, pd, xrcd, create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf,
        source_qpn, send_ops_flags;
    ibv_cq_init_attr_ex: cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags,
        parent_domain;
    ibv_poll_cq_attr: comp_mask;
};

/// Further facts checked against the header: `(C expression, value)`.
pub const EXPRESSIONS_EX: &[(&str, usize)] = &[
    ("offsetof(struct ibv_mw, type)", offset_of!(ibv_mw, r#type)),
    (
        "offsetof(struct ibv_context, ops.bind_mw)",
        offset_of!(ibv_context, ops) + 8 * ops::BIND_MW,
    ),
    (
        "offsetof(struct ibv_context, ops.dealloc_mw)",
        offset_of!(ibv_context, ops) + 8 * ops::DEALLOC_MW,
    ),
    (
        "offsetof(struct ibv_send_wr, bind_mw.mw)",
        offset_of!(crate::abi::ibv_send_wr, bind_mw_tso),
    ),
    (
        "offsetof(struct ibv_send_wr, bind_mw.rkey)",
        offset_of!(crate::abi::ibv_send_wr, bind_mw_tso) + offset_of!(send_wr_bind_mw, rkey),
    ),
    (
        "offsetof(struct ibv_send_wr, bind_mw.bind_info)",
        offset_of!(crate::abi::ibv_send_wr, bind_mw_tso) + offset_of!(send_wr_bind_mw, bind_info),
    ),
    (
        "sizeof(((struct ibv_send_wr *)0)->bind_mw)",
        size_of::<send_wr_bind_mw>(),
    ),
    (
        "offsetof(struct ibv_send_wr, invalidate_rkey)",
        offset_of!(crate::abi::ibv_send_wr, imm_data),
    ),
    ("IBV_WR_LOCAL_INV", c::IBV_WR_LOCAL_INV as usize),
    ("IBV_WR_BIND_MW", c::IBV_WR_BIND_MW as usize),
    ("IBV_MW_TYPE_1", c::IBV_MW_TYPE_1 as usize),
    ("IBV_MW_TYPE_2", c::IBV_MW_TYPE_2 as usize),
    ("IBV_ACCESS_ZERO_BASED", c::IBV_ACCESS_ZERO_BASED as usize),
    ("IBV_QP_INIT_ATTR_PD", c::IBV_QP_INIT_ATTR_PD as usize),
    (
        "IBV_QP_INIT_ATTR_SEND_OPS_FLAGS",
        c::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS as usize,
    ),
    (
        "IBV_QP_INIT_ATTR_CREATE_FLAGS",
        c::IBV_QP_INIT_ATTR_CREATE_FLAGS as usize,
    ),
    (
        "IBV_QP_EX_WITH_RDMA_WRITE",
        c::IBV_QP_EX_WITH_RDMA_WRITE as usize,
    ),
    (
        "IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM",
        c::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM as usize,
    ),
    ("IBV_QP_EX_WITH_SEND", c::IBV_QP_EX_WITH_SEND as usize),
    (
        "IBV_QP_EX_WITH_SEND_WITH_IMM",
        c::IBV_QP_EX_WITH_SEND_WITH_IMM as usize,
    ),
    (
        "IBV_QP_EX_WITH_RDMA_READ",
        c::IBV_QP_EX_WITH_RDMA_READ as usize,
    ),
    (
        "IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP",
        c::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP as usize,
    ),
    (
        "IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD",
        c::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD as usize,
    ),
    (
        "IBV_QP_EX_WITH_LOCAL_INV",
        c::IBV_QP_EX_WITH_LOCAL_INV as usize,
    ),
    ("IBV_QP_EX_WITH_BIND_MW", c::IBV_QP_EX_WITH_BIND_MW as usize),
    (
        "IBV_QP_EX_WITH_SEND_WITH_INV",
        c::IBV_QP_EX_WITH_SEND_WITH_INV as usize,
    ),
    ("IBV_QP_EX_WITH_TSO", c::IBV_QP_EX_WITH_TSO as usize),
    (
        "IBV_QP_EX_WITH_ATOMIC_WRITE",
        c::IBV_QP_EX_WITH_ATOMIC_WRITE as usize,
    ),
    ("IBV_WC_STANDARD_FLAGS", c::IBV_WC_STANDARD_FLAGS as usize),
    (
        "IBV_WC_EX_WITH_COMPLETION_TIMESTAMP",
        c::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP as usize,
    ),
    (
        "IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK",
        c::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK as usize,
    ),
    (
        "IBV_CREATE_CQ_SUP_WC_FLAGS",
        c::IBV_CREATE_CQ_SUP_WC_FLAGS as usize,
    ),
    (
        "IBV_CQ_INIT_ATTR_MASK_FLAGS",
        c::IBV_CQ_INIT_ATTR_MASK_FLAGS as usize,
    ),
    (
        "IBV_CQ_INIT_ATTR_MASK_PD",
        c::IBV_CQ_INIT_ATTR_MASK_PD as usize,
    ),
    (
        "IBV_CREATE_CQ_ATTR_SINGLE_THREADED",
        c::IBV_CREATE_CQ_ATTR_SINGLE_THREADED as usize,
    ),
    (
        "IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN",
        c::IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN as usize,
    ),
];

// What the inline code of applications reads at fixed offsets.
const _: () = {
    assert!(size_of::<ibv_qp_ex>() == 352);
    assert!(offset_of!(ibv_qp_ex, wr_id) == 168);
    assert!(offset_of!(ibv_qp_ex, wr_flags) == 176);
    assert!(offset_of!(ibv_qp_ex, wr_send) == 240);
    assert!(offset_of!(ibv_qp_ex, wr_start) == 320);
    assert!(size_of::<ibv_cq_ex>() == 288);
    assert!(offset_of!(ibv_cq_ex, status) == 132);
    assert!(offset_of!(ibv_cq_ex, start_poll) == 144);
    assert!(size_of::<ibv_mw>() == 32);
};

// Pointer types used only in signatures of the entry points.
#[allow(dead_code)]
type _Used = (*mut ibv_ah, *mut ibv_sge);

#[cfg(test)]
mod tests {
    use super::*;

    /// gcc against the installed `<infiniband/verbs.h>`: every size and offset of
    /// [`LAYOUT_EX`] and every expression of [`EXPRESSIONS_EX`]. Skipped (with a
    /// notice) without gcc or the header, unless `FERROVERBS_REQUIRE_IBVERBS_UTILS=1`.
    #[test]
    fn extended_layouts_match_the_installed_header() {
        if !crate::abi::gcc_check::available() {
            return;
        }
        let mut exprs: Vec<(String, usize)> = LAYOUT_EX
            .iter()
            .map(|&(s, m, v)| {
                let e = if m == "sizeof" {
                    format!("sizeof(struct {s})")
                } else {
                    format!("offsetof(struct {s}, {})", m.trim_start_matches("r#"))
                };
                (e, v)
            })
            .collect();
        exprs.extend(EXPRESSIONS_EX.iter().map(|&(e, v)| (e.to_string(), v)));
        crate::abi::gcc_check::check(
            "fv-ibv-layout-ex",
            "#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\n\
             int main(void) {\n",
            &exprs,
        );
        assert!(exprs.len() > 100, "only {} facts checked", exprs.len());
    }
}

//! `#[repr(C)]` mirrors of the rdma-core v44 `<infiniband/verbs.h>` structures (x86-64),
//! field for field, with the C names. Offsets and sizes are checked at compile time
//! (the asserts at the end) and against the installed header by `tests/layout.rs`,
//! which compiles a C program that prints `offsetof`/`sizeof` of every member listed
//! in [`LAYOUT`].
//!
//! Facts: `/usr/include/infiniband/verbs.h` of Debian 12 (`libibverbs-dev` 44.0-2,
//! byte-identical to rdma-core `v44.0:libibverbs/verbs.h`); the private `verbs_device`
//! prefix from rdma-core `libibverbs/driver.h`.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::mem::{offset_of, size_of};

/// `pthread_mutex_t` (glibc x86-64: 40 bytes, zero is `PTHREAD_MUTEX_INITIALIZER`).
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct pthread_mutex_t(pub [u8; 40]);

/// `pthread_cond_t` (glibc x86-64: 48 bytes, zero is `PTHREAD_COND_INITIALIZER`).
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct pthread_cond_t(pub [u8; 48]);

/// `struct ibv_device`.
#[repr(C)]
pub struct ibv_device {
    /// `struct _ibv_device_ops` (two unused compat pointers).
    pub _ops: [*mut c_void; 2],
    /// `enum ibv_node_type`.
    pub node_type: c_int,
    /// `enum ibv_transport_type`.
    pub transport_type: c_int,
    /// The device name (`ibv_get_device_name`).
    pub name: [c_char; 64],
    /// The uverbs device name.
    pub dev_name: [c_char; 64],
    /// The uverbs sysfs path.
    pub dev_path: [c_char; 256],
    /// The IB device sysfs path.
    pub ibdev_path: [c_char; 256],
}

/// rdma-core's private `struct verbs_device` prefix (`driver.h`): what libmlx5 and
/// libefa read (`ops`) when asked whether a device is theirs.
#[repr(C)]
pub struct verbs_device {
    /// The public part.
    pub device: ibv_device,
    /// `const struct verbs_device_ops *`: never a provider's, so theirs say "not mine".
    pub ops: *const c_void,
    /// Reference count.
    pub refcount: c_int,
    /// `struct list_node`.
    pub entry: [*mut c_void; 2],
    /// `struct verbs_sysfs_dev *`.
    pub sysfs: *mut c_void,
    /// `uint64_t core_support`.
    pub core_support: u64,
}

/// Slots of `struct ibv_context_ops` (32 function pointers) that inline code calls.
pub mod ops {
    /// `alloc_mw` (NULL: the inline `ibv_alloc_mw` returns EOPNOTSUPP).
    pub const ALLOC_MW: usize = 7;
    /// `poll_cq` (inline `ibv_poll_cq`).
    pub const POLL_CQ: usize = 11;
    /// `req_notify_cq` (inline `ibv_req_notify_cq`).
    pub const REQ_NOTIFY_CQ: usize = 12;
    /// `post_srq_recv` (inline `ibv_post_srq_recv`).
    pub const POST_SRQ_RECV: usize = 20;
    /// `post_send` (inline `ibv_post_send`).
    pub const POST_SEND: usize = 25;
    /// `post_recv` (inline `ibv_post_recv`).
    pub const POST_RECV: usize = 26;
}

/// Slots of the extended ops of `struct verbs_context` (39 pointers before `sz`).
pub mod vops {
    /// `query_port` (the `ibv_query_port` macro).
    pub const QUERY_PORT: usize = 0;
    /// `create_cq_ex`.
    pub const CREATE_CQ_EX: usize = 25;
    /// `query_device_ex` (inline `ibv_query_device_ex`).
    pub const QUERY_DEVICE_EX: usize = 27;
    /// `create_qp_ex`.
    pub const CREATE_QP_EX: usize = 33;
}

/// `struct ibv_context`.
#[repr(C)]
pub struct ibv_context {
    /// `struct ibv_device *`.
    pub device: *mut ibv_device,
    /// `struct ibv_context_ops` (see [`ops`]).
    pub ops: [*const c_void; 32],
    /// The uverbs command descriptor (-1: none).
    pub cmd_fd: c_int,
    /// The async event descriptor.
    pub async_fd: c_int,
    /// Completion vectors.
    pub num_comp_vectors: c_int,
    /// Library-internal mutex.
    pub mutex: pthread_mutex_t,
    /// `(void *)UINTPTR_MAX` marks an extended (`verbs_context`) context.
    pub abi_compat: *mut c_void,
}

/// `struct verbs_context`: 39 extended op slots (see [`vops`]), `sz`, then the
/// `ibv_context` applications hold (it "grows up": new ops are prepended).
#[repr(C)]
pub struct verbs_context {
    /// Extended ops.
    pub ext: [*const c_void; 39],
    /// `sizeof(struct verbs_context)`: how far up inline code may look.
    pub sz: usize,
    /// The public context.
    pub context: ibv_context,
}

/// `struct ibv_pd`.
#[repr(C)]
pub struct ibv_pd {
    /// Context.
    pub context: *mut ibv_context,
    /// Handle.
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct ibv_mr {
    /// Context.
    pub context: *mut ibv_context,
    /// PD.
    pub pd: *mut ibv_pd,
    /// Start address.
    pub addr: *mut c_void,
    /// Length.
    pub length: usize,
    /// Handle.
    pub handle: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub struct ibv_comp_channel {
    /// Context.
    pub context: *mut ibv_context,
    /// The pollable descriptor.
    pub fd: c_int,
    /// CQs using it.
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct ibv_cq {
    /// Context.
    pub context: *mut ibv_context,
    /// Completion channel or NULL.
    pub channel: *mut ibv_comp_channel,
    /// User context.
    pub cq_context: *mut c_void,
    /// Handle.
    pub handle: u32,
    /// Entries.
    pub cqe: c_int,
    /// Mutex.
    pub mutex: pthread_mutex_t,
    /// Condition.
    pub cond: pthread_cond_t,
    /// Completion events acknowledged.
    pub comp_events_completed: u32,
    /// Async events acknowledged.
    pub async_events_completed: u32,
}

/// `struct ibv_srq`.
#[repr(C)]
pub struct ibv_srq {
    /// Context.
    pub context: *mut ibv_context,
    /// User context.
    pub srq_context: *mut c_void,
    /// PD.
    pub pd: *mut ibv_pd,
    /// Handle.
    pub handle: u32,
    /// Mutex.
    pub mutex: pthread_mutex_t,
    /// Condition.
    pub cond: pthread_cond_t,
    /// Events acknowledged.
    pub events_completed: u32,
}

/// `struct ibv_qp`.
#[repr(C)]
pub struct ibv_qp {
    /// Context.
    pub context: *mut ibv_context,
    /// User context.
    pub qp_context: *mut c_void,
    /// PD.
    pub pd: *mut ibv_pd,
    /// Send CQ.
    pub send_cq: *mut ibv_cq,
    /// Receive CQ.
    pub recv_cq: *mut ibv_cq,
    /// SRQ or NULL.
    pub srq: *mut ibv_srq,
    /// Handle.
    pub handle: u32,
    /// QP number.
    pub qp_num: u32,
    /// `enum ibv_qp_state`.
    pub state: c_uint,
    /// `enum ibv_qp_type`.
    pub qp_type: c_uint,
    /// Mutex.
    pub mutex: pthread_mutex_t,
    /// Condition.
    pub cond: pthread_cond_t,
    /// Events acknowledged.
    pub events_completed: u32,
}

/// `struct ibv_ah`.
#[repr(C)]
pub struct ibv_ah {
    /// Context.
    pub context: *mut ibv_context,
    /// PD.
    pub pd: *mut ibv_pd,
    /// Handle.
    pub handle: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_sge {
    /// Address.
    pub addr: u64,
    /// Length.
    pub length: u32,
    /// Local key.
    pub lkey: u32,
}

/// `wr.rdma` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_rdma {
    /// Remote address.
    pub remote_addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// `wr.atomic` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_atomic {
    /// Remote address.
    pub remote_addr: u64,
    /// Compare (CAS) or add (FAA) operand.
    pub compare_add: u64,
    /// Swap operand.
    pub swap: u64,
    /// Remote key.
    pub rkey: u32,
}

/// `wr.ud` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_ud {
    /// Address handle.
    pub ah: *mut ibv_ah,
    /// Destination QPN.
    pub remote_qpn: u32,
    /// Destination Q_Key.
    pub remote_qkey: u32,
}

/// The `wr` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union send_wr_wr {
    /// RDMA WRITE/READ.
    pub rdma: wr_rdma,
    /// Atomics.
    pub atomic: wr_atomic,
    /// UD.
    pub ud: wr_ud,
}

/// `struct ibv_send_wr`.
#[repr(C)]
pub struct ibv_send_wr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Next request or NULL.
    pub next: *mut ibv_send_wr,
    /// Gather list.
    pub sg_list: *mut ibv_sge,
    /// Gather entries.
    pub num_sge: c_int,
    /// `enum ibv_wr_opcode`.
    pub opcode: c_uint,
    /// `enum ibv_send_flags`.
    pub send_flags: c_uint,
    /// `imm_data` (big-endian) / `invalidate_rkey`.
    pub imm_data: u32,
    /// Operation-specific part.
    pub wr: send_wr_wr,
    /// `qp_type.xrc.remote_srqn`.
    pub remote_srqn: u32,
    /// The `bind_mw` / `tso` union (48 bytes).
    pub bind_mw_tso: [u64; 6],
}

/// `struct ibv_recv_wr`.
#[repr(C)]
pub struct ibv_recv_wr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Next request or NULL.
    pub next: *mut ibv_recv_wr,
    /// Scatter list.
    pub sg_list: *mut ibv_sge,
    /// Scatter entries.
    pub num_sge: c_int,
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_wc {
    /// From the work request.
    pub wr_id: u64,
    /// `enum ibv_wc_status`.
    pub status: c_uint,
    /// `enum ibv_wc_opcode`.
    pub opcode: c_uint,
    /// Vendor syndrome.
    pub vendor_err: u32,
    /// Bytes received.
    pub byte_len: u32,
    /// `imm_data` (big-endian) / `invalidated_rkey`.
    pub imm_data: u32,
    /// Local QP.
    pub qp_num: u32,
    /// Source QP (UD).
    pub src_qp: u32,
    /// `enum ibv_wc_flags`.
    pub wc_flags: c_uint,
    /// P_Key index.
    pub pkey_index: u16,
    /// Source LID.
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// DLID path bits.
    pub dlid_path_bits: u8,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_qp_cap {
    /// Send requests.
    pub max_send_wr: u32,
    /// Receive requests.
    pub max_recv_wr: u32,
    /// Gather entries.
    pub max_send_sge: u32,
    /// Scatter entries.
    pub max_recv_sge: u32,
    /// Inline bytes.
    pub max_inline_data: u32,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_global_route {
    /// `union ibv_gid` holds two `__be64`: the struct is 8-aligned.
    pub _align: [u64; 0],
    /// Destination GID.
    pub dgid: [u8; 16],
    /// Flow label.
    pub flow_label: u32,
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_ah_attr {
    /// Global route.
    pub grh: ibv_global_route,
    /// Destination LID.
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// Whether `grh` is valid.
    pub is_global: u8,
    /// Port.
    pub port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_qp_attr {
    /// `enum ibv_qp_state`.
    pub qp_state: c_uint,
    /// Current state.
    pub cur_qp_state: c_uint,
    /// `enum ibv_mtu`.
    pub path_mtu: c_uint,
    /// `enum ibv_mig_state`.
    pub path_mig_state: c_uint,
    /// Q_Key.
    pub qkey: u32,
    /// Receive PSN.
    pub rq_psn: u32,
    /// Send PSN.
    pub sq_psn: u32,
    /// Destination QPN.
    pub dest_qp_num: u32,
    /// Access flags.
    pub qp_access_flags: c_uint,
    /// Capabilities.
    pub cap: ibv_qp_cap,
    /// Primary path.
    pub ah_attr: ibv_ah_attr,
    /// Alternate path.
    pub alt_ah_attr: ibv_ah_attr,
    /// P_Key index.
    pub pkey_index: u16,
    /// Alternate P_Key index.
    pub alt_pkey_index: u16,
    /// SQD async notification.
    pub en_sqd_async_notify: u8,
    /// SQ draining.
    pub sq_draining: u8,
    /// Outstanding READ/atomic as requester.
    pub max_rd_atomic: u8,
    /// Outstanding READ/atomic as responder.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer.
    pub min_rnr_timer: u8,
    /// Port.
    pub port_num: u8,
    /// ACK timeout.
    pub timeout: u8,
    /// Retry count.
    pub retry_cnt: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// Alternate port.
    pub alt_port_num: u8,
    /// Alternate timeout.
    pub alt_timeout: u8,
    /// Rate limit.
    pub rate_limit: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub struct ibv_qp_init_attr {
    /// User context.
    pub qp_context: *mut c_void,
    /// Send CQ.
    pub send_cq: *mut ibv_cq,
    /// Receive CQ.
    pub recv_cq: *mut ibv_cq,
    /// SRQ.
    pub srq: *mut ibv_srq,
    /// Capabilities (written back with what was granted).
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type`.
    pub qp_type: c_uint,
    /// Signal every send.
    pub sq_sig_all: c_int,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_srq_attr {
    /// Requests.
    pub max_wr: u32,
    /// Scatter entries.
    pub max_sge: u32,
    /// Limit event threshold.
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
pub struct ibv_srq_init_attr {
    /// User context.
    pub srq_context: *mut c_void,
    /// Attributes.
    pub attr: ibv_srq_attr,
}

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    /// Firmware version string.
    pub fw_ver: [c_char; 64],
    /// Node GUID (big-endian).
    pub node_guid: u64,
    /// System image GUID (big-endian).
    pub sys_image_guid: u64,
    /// Largest MR.
    pub max_mr_size: u64,
    /// Page sizes.
    pub page_size_cap: u64,
    /// PCI vendor.
    pub vendor_id: u32,
    /// PCI device.
    pub vendor_part_id: u32,
    /// Hardware revision.
    pub hw_ver: u32,
    /// QPs.
    pub max_qp: c_int,
    /// Requests per QP.
    pub max_qp_wr: c_int,
    /// `enum ibv_device_cap_flags`.
    pub device_cap_flags: c_uint,
    /// Gather/scatter entries.
    pub max_sge: c_int,
    /// RDMA READ scatter entries.
    pub max_sge_rd: c_int,
    /// CQs.
    pub max_cq: c_int,
    /// CQ entries.
    pub max_cqe: c_int,
    /// MRs.
    pub max_mr: c_int,
    /// PDs.
    pub max_pd: c_int,
    /// Responder READ/atomic depth per QP.
    pub max_qp_rd_atom: c_int,
    /// EE READ depth.
    pub max_ee_rd_atom: c_int,
    /// Responder resources.
    pub max_res_rd_atom: c_int,
    /// Requester READ/atomic depth per QP.
    pub max_qp_init_rd_atom: c_int,
    /// EE initiator depth.
    pub max_ee_init_rd_atom: c_int,
    /// `enum ibv_atomic_cap`.
    pub atomic_cap: c_uint,
    /// EE contexts.
    pub max_ee: c_int,
    /// RDDs.
    pub max_rdd: c_int,
    /// MWs.
    pub max_mw: c_int,
    /// Raw IPv6 QPs.
    pub max_raw_ipv6_qp: c_int,
    /// Raw Ethertype QPs.
    pub max_raw_ethy_qp: c_int,
    /// Multicast groups.
    pub max_mcast_grp: c_int,
    /// QPs per multicast group.
    pub max_mcast_qp_attach: c_int,
    /// Total multicast attachments.
    pub max_total_mcast_qp_attach: c_int,
    /// AHs.
    pub max_ah: c_int,
    /// FMRs.
    pub max_fmr: c_int,
    /// Maps per FMR.
    pub max_map_per_fmr: c_int,
    /// SRQs.
    pub max_srq: c_int,
    /// Requests per SRQ.
    pub max_srq_wr: c_int,
    /// Scatter entries per SRQ request.
    pub max_srq_sge: c_int,
    /// P_Keys.
    pub max_pkeys: u16,
    /// ACK delay.
    pub local_ca_ack_delay: u8,
    /// Ports.
    pub phys_port_cnt: u8,
}

/// Size of `struct ibv_device_attr_ex`.
pub const DEVICE_ATTR_EX_SIZE: usize = 400;
/// Offset of `comp_mask` in `struct ibv_device_attr_ex`.
pub const DEVICE_ATTR_EX_COMP_MASK: usize = 232;
/// Offset of `phys_port_cnt_ex` in `struct ibv_device_attr_ex`.
pub const DEVICE_ATTR_EX_PHYS_PORT_CNT_EX: usize = 396;
/// Offset of `completion_timestamp_mask` (u64) in `struct ibv_device_attr_ex`.
pub const DEVICE_ATTR_EX_COMPLETION_TIMESTAMP_MASK: usize = 264;
/// Offset of `hca_core_clock` (u64, kHz) in `struct ibv_device_attr_ex`.
pub const DEVICE_ATTR_EX_HCA_CORE_CLOCK: usize = 272;

/// `struct ibv_port_attr` (52 bytes; the compat one of `ibv_query_port@1.1` is the
/// first [`PORT_ATTR_COMPAT_SIZE`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_port_attr {
    /// `enum ibv_port_state`.
    pub state: c_uint,
    /// `enum ibv_mtu`.
    pub max_mtu: c_uint,
    /// `enum ibv_mtu`.
    pub active_mtu: c_uint,
    /// GID table size.
    pub gid_tbl_len: c_int,
    /// `enum ibv_port_cap_flags`.
    pub port_cap_flags: u32,
    /// Largest message.
    pub max_msg_sz: u32,
    /// Bad P_Key counter.
    pub bad_pkey_cntr: u32,
    /// Q_Key violation counter.
    pub qkey_viol_cntr: u32,
    /// P_Key table size.
    pub pkey_tbl_len: u16,
    /// LID.
    pub lid: u16,
    /// SM LID.
    pub sm_lid: u16,
    /// LMC.
    pub lmc: u8,
    /// VLs.
    pub max_vl_num: u8,
    /// SM SL.
    pub sm_sl: u8,
    /// Subnet timeout.
    pub subnet_timeout: u8,
    /// Init type reply.
    pub init_type_reply: u8,
    /// Active width.
    pub active_width: u8,
    /// Active speed.
    pub active_speed: u8,
    /// Physical state.
    pub phys_state: u8,
    /// `IBV_LINK_LAYER_*`.
    pub link_layer: u8,
    /// Flags.
    pub flags: u8,
    /// `port_cap_flags2`.
    pub port_cap_flags2: u16,
}

/// Bytes of `struct _compat_ibv_port_attr` (written by the exported `ibv_query_port`).
pub const PORT_ATTR_COMPAT_SIZE: usize = 48;

/// `struct ibv_gid_entry`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_gid_entry {
    /// The GID.
    pub gid: [u8; 16],
    /// Table index.
    pub gid_index: u32,
    /// Port.
    pub port_num: u32,
    /// `enum ibv_gid_type` (`IBV_GID_TYPE_ROCE_V2` = 2).
    pub gid_type: u32,
    /// Network device index.
    pub ndev_ifindex: u32,
}

/// `struct ibv_async_event`.
#[repr(C)]
pub struct ibv_async_event {
    /// `element` union: the CQ, QP, SRQ or WQ pointer, or the port number.
    pub element: *mut c_void,
    /// `enum ibv_event_type`.
    pub event_type: c_uint,
}

/// `struct ib_uverbs_attr` (`rdma/rdma_user_ioctl_cmds.h`): 16 bytes.
#[repr(C)]
pub struct ib_uverbs_attr {
    /// `attr_id`, `len`, `flags`, `attr_data`.
    pub head: [u16; 4],
    /// `data` / `data_s64`.
    pub data: u64,
}

/// `struct ibv_command_buffer` of rdma-core's provider interface (`cmd_ioctl.h`, not
/// installed): the links, the cursors, five bytes of indices and flags, then the
/// `ib_uverbs_ioctl_hdr` (24 bytes, 8-aligned) whose trailing `attrs[]` starts at 56.
#[repr(C)]
pub struct ibv_command_buffer {
    /// `next`: the linked buffer.
    pub next: *const ibv_command_buffer,
    /// `next_attr`: the first unused attribute of `attrs`.
    pub next_attr: *const ib_uverbs_attr,
    /// `last_attr`.
    pub last_attr: *const ib_uverbs_attr,
    /// `uhw_*` indices and the flag bits.
    pub idx_flags: [u8; 5],
    /// `hdr`: length, object_id, method_id, num_attrs, reserved1, driver_id, reserved2.
    pub hdr: [u64; 3],
    /// `hdr.attrs[]`.
    pub attrs: [ib_uverbs_attr; 0],
}
const _: () = assert!(std::mem::size_of::<ib_uverbs_attr>() == 16);
const _: () = assert!(std::mem::offset_of!(ibv_command_buffer, hdr) == 32);
const _: () = assert!(std::mem::offset_of!(ibv_command_buffer, attrs) == 56);

/// Constants of `verbs.h`.
pub mod c {
    /// `IBV_FORK_UNNEEDED` (`enum ibv_fork_status`).
    pub const IBV_FORK_UNNEEDED: i32 = 2;
    /// `IBV_NODE_CA`.
    pub const IBV_NODE_CA: i32 = 1;
    /// `IBV_TRANSPORT_IB` (RoCE devices report IB).
    pub const IBV_TRANSPORT_IB: i32 = 0;
    /// `IBV_LINK_LAYER_ETHERNET`.
    pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;
    /// `IBV_LINK_LAYER_INFINIBAND`.
    pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
    /// `IBV_PORT_DOWN`.
    pub const IBV_PORT_DOWN: u32 = 1;
    /// `IBV_PORT_ACTIVE`.
    pub const IBV_PORT_ACTIVE: u32 = 4;
    /// `IBV_ATOMIC_HCA`.
    pub const IBV_ATOMIC_HCA: u32 = 1;
    /// `IBV_GID_TYPE_ROCE_V2` (of `enum ibv_gid_type`, `_ibv_query_gid_ex`).
    pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;
    /// `IBV_GID_TYPE_SYSFS_ROCE_V2` (of rdma-core's private `enum ibv_gid_type_sysfs`
    /// in `driver.h`, what `ibv_query_gid_type` reports; not in the public header).
    pub const IBV_GID_TYPE_SYSFS_ROCE_V2: u32 = 1;
    /// `IBV_PORT_IP_BASED_GIDS` (port_cap_flags bit 26).
    pub const IBV_PORT_IP_BASED_GIDS: u32 = 1 << 26;
    /// `IBV_DEVICE_RC_RNR_NAK_GEN`.
    pub const IBV_DEVICE_RC_RNR_NAK_GEN: u32 = 1 << 12;
    /// `IBV_DEVICE_PORT_ACTIVE_EVENT`.
    pub const IBV_DEVICE_PORT_ACTIVE_EVENT: u32 = 1 << 15;

    /// `IBV_QPT_RC`.
    pub const IBV_QPT_RC: u32 = 2;
    /// `IBV_QPT_UC`.
    pub const IBV_QPT_UC: u32 = 3;
    /// `IBV_QPT_UD`.
    pub const IBV_QPT_UD: u32 = 4;

    /// `enum ibv_qp_attr_mask` bits.
    pub const IBV_QP_STATE: i32 = 1;
    /// `IBV_QP_CUR_STATE`.
    pub const IBV_QP_CUR_STATE: i32 = 1 << 1;
    /// `IBV_QP_ACCESS_FLAGS`.
    pub const IBV_QP_ACCESS_FLAGS: i32 = 1 << 3;
    /// `IBV_QP_PKEY_INDEX`.
    pub const IBV_QP_PKEY_INDEX: i32 = 1 << 4;
    /// `IBV_QP_PORT`.
    pub const IBV_QP_PORT: i32 = 1 << 5;
    /// `IBV_QP_QKEY`.
    pub const IBV_QP_QKEY: i32 = 1 << 6;
    /// `IBV_QP_AV`.
    pub const IBV_QP_AV: i32 = 1 << 7;
    /// `IBV_QP_PATH_MTU`.
    pub const IBV_QP_PATH_MTU: i32 = 1 << 8;
    /// `IBV_QP_TIMEOUT`.
    pub const IBV_QP_TIMEOUT: i32 = 1 << 9;
    /// `IBV_QP_RETRY_CNT`.
    pub const IBV_QP_RETRY_CNT: i32 = 1 << 10;
    /// `IBV_QP_RNR_RETRY`.
    pub const IBV_QP_RNR_RETRY: i32 = 1 << 11;
    /// `IBV_QP_RQ_PSN`.
    pub const IBV_QP_RQ_PSN: i32 = 1 << 12;
    /// `IBV_QP_MAX_QP_RD_ATOMIC`.
    pub const IBV_QP_MAX_QP_RD_ATOMIC: i32 = 1 << 13;
    /// `IBV_QP_ALT_PATH`.
    pub const IBV_QP_ALT_PATH: i32 = 1 << 14;
    /// `IBV_QP_MIN_RNR_TIMER`.
    pub const IBV_QP_MIN_RNR_TIMER: i32 = 1 << 15;
    /// `IBV_QP_SQ_PSN`.
    pub const IBV_QP_SQ_PSN: i32 = 1 << 16;
    /// `IBV_QP_MAX_DEST_RD_ATOMIC`.
    pub const IBV_QP_MAX_DEST_RD_ATOMIC: i32 = 1 << 17;
    /// `IBV_QP_PATH_MIG_STATE`.
    pub const IBV_QP_PATH_MIG_STATE: i32 = 1 << 18;
    /// `IBV_QP_CAP`.
    pub const IBV_QP_CAP: i32 = 1 << 19;
    /// `IBV_QP_DEST_QPN`.
    pub const IBV_QP_DEST_QPN: i32 = 1 << 20;
    /// `IBV_QP_RATE_LIMIT`.
    pub const IBV_QP_RATE_LIMIT: i32 = 1 << 25;

    /// `IBV_SEND_FENCE`.
    pub const IBV_SEND_FENCE: u32 = 1;
    /// `IBV_SEND_SIGNALED`.
    pub const IBV_SEND_SIGNALED: u32 = 2;
    /// `IBV_SEND_SOLICITED`.
    pub const IBV_SEND_SOLICITED: u32 = 4;
    /// `IBV_SEND_INLINE`.
    pub const IBV_SEND_INLINE: u32 = 8;

    /// `IBV_WR_RDMA_WRITE`.
    pub const IBV_WR_RDMA_WRITE: u32 = 0;
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`.
    pub const IBV_WR_RDMA_WRITE_WITH_IMM: u32 = 1;
    /// `IBV_WR_SEND`.
    pub const IBV_WR_SEND: u32 = 2;
    /// `IBV_WR_SEND_WITH_IMM`.
    pub const IBV_WR_SEND_WITH_IMM: u32 = 3;
    /// `IBV_WR_RDMA_READ`.
    pub const IBV_WR_RDMA_READ: u32 = 4;
    /// `IBV_WR_ATOMIC_CMP_AND_SWP`.
    pub const IBV_WR_ATOMIC_CMP_AND_SWP: u32 = 5;
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD`.
    pub const IBV_WR_ATOMIC_FETCH_AND_ADD: u32 = 6;
    /// `IBV_WR_SEND_WITH_INV`.
    pub const IBV_WR_SEND_WITH_INV: u32 = 9;

    /// `IBV_ACCESS_LOCAL_WRITE` .. `IBV_ACCESS_REMOTE_ATOMIC`.
    pub const IBV_ACCESS_BASIC: u32 = 0xf;
    /// `IBV_ACCESS_MW_BIND`.
    pub const IBV_ACCESS_MW_BIND: u32 = 0x10;
    /// `IBV_ACCESS_HUGETLB`.
    pub const IBV_ACCESS_HUGETLB: u32 = 0x80;
    /// `IBV_ACCESS_RELAXED_ORDERING`.
    pub const IBV_ACCESS_RELAXED_ORDERING: u32 = 0x100000;
    /// `IBV_ACCESS_OPTIONAL_RANGE` (hints a device may ignore).
    pub const IBV_ACCESS_OPTIONAL_RANGE: u32 = 0x3ff0_0000;

    /// `__VERBS_ABI_IS_EXTENDED`.
    pub const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;
}

/// One member whose offset the C header must agree with: `(struct, member, offset,
/// size)`; the struct sizes are members named `sizeof`.
pub type Member = (&'static str, &'static str, usize, usize);

macro_rules! members {
    ($($s:ident : $($f:ident),*;)*) => {
        &[$(
            (stringify!($s), "sizeof", size_of::<$s>(), 0),
            $((stringify!($s), stringify!($f), offset_of!($s, $f), 0),)*
        )*]
    };
}

/// Every mirrored struct's size and member offsets, checked against the header by
/// `tests/layout.rs` (C expressions `sizeof(struct S)` / `offsetof(struct S, m)`).
pub const LAYOUT: &[Member] = members! {
    ibv_device: node_type, transport_type, name, dev_name, dev_path, ibdev_path;
    ibv_context: device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat;
    ibv_pd: context, handle;
    ibv_mr: context, pd, addr, length, handle, lkey, rkey;
    ibv_comp_channel: context, fd, refcnt;
    ibv_cq: context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
        async_events_completed;
    ibv_srq: context, srq_context, pd, handle, mutex, cond, events_completed;
    ibv_qp: context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type,
        mutex, cond, events_completed;
    ibv_ah: context, pd, handle;
    ibv_sge: addr, length, lkey;
    ibv_send_wr: wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data, wr;
    ibv_recv_wr: wr_id, next, sg_list, num_sge;
    ibv_wc: wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num, src_qp, wc_flags,
        pkey_index, slid, sl, dlid_path_bits;
    ibv_qp_cap: max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data;
    ibv_global_route: dgid, flow_label, sgid_index, hop_limit, traffic_class;
    ibv_ah_attr: grh, dlid, sl, src_path_bits, static_rate, is_global, port_num;
    ibv_qp_attr: qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn,
        dest_qp_num, qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index,
        en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer,
        port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, rate_limit;
    ibv_qp_init_attr: qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all;
    ibv_srq_attr: max_wr, max_sge, srq_limit;
    ibv_srq_init_attr: srq_context, attr;
    ibv_device_attr: fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id,
        vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd,
        max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom,
        max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw,
        max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
        max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr,
        max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt;
    ibv_port_attr: state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz,
        bad_pkey_cntr, qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl,
        subnet_timeout, init_type_reply, active_width, active_speed, phys_state, link_layer,
        flags, port_cap_flags2;
    ibv_gid_entry: gid, gid_index, port_num, gid_type, ndev_ifindex;
    ibv_async_event: element, event_type;
};

/// Further facts checked against the header: `(C expression, value)`.
pub const EXPRESSIONS: &[(&str, usize)] = &[
    (
        "offsetof(struct ibv_context, ops.poll_cq)",
        offset_of!(ibv_context, ops) + 8 * ops::POLL_CQ,
    ),
    (
        "offsetof(struct ibv_context, ops.req_notify_cq)",
        offset_of!(ibv_context, ops) + 8 * ops::REQ_NOTIFY_CQ,
    ),
    (
        "offsetof(struct ibv_context, ops.post_srq_recv)",
        offset_of!(ibv_context, ops) + 8 * ops::POST_SRQ_RECV,
    ),
    (
        "offsetof(struct ibv_context, ops.post_send)",
        offset_of!(ibv_context, ops) + 8 * ops::POST_SEND,
    ),
    (
        "offsetof(struct ibv_context, ops.post_recv)",
        offset_of!(ibv_context, ops) + 8 * ops::POST_RECV,
    ),
    (
        "offsetof(struct ibv_context, ops.alloc_mw)",
        offset_of!(ibv_context, ops) + 8 * ops::ALLOC_MW,
    ),
    (
        "sizeof(struct ibv_context_ops)",
        size_of::<[*const c_void; 32]>(),
    ),
    ("sizeof(struct verbs_context)", size_of::<verbs_context>()),
    (
        "offsetof(struct verbs_context, context)",
        offset_of!(verbs_context, context),
    ),
    (
        "offsetof(struct verbs_context, sz)",
        offset_of!(verbs_context, sz),
    ),
    (
        "offsetof(struct verbs_context, query_port)",
        8 * vops::QUERY_PORT,
    ),
    (
        "offsetof(struct verbs_context, query_device_ex)",
        8 * vops::QUERY_DEVICE_EX,
    ),
    (
        "offsetof(struct verbs_context, create_cq_ex)",
        8 * vops::CREATE_CQ_EX,
    ),
    (
        "offsetof(struct verbs_context, create_qp_ex)",
        8 * vops::CREATE_QP_EX,
    ),
    (
        "offsetof(struct ibv_send_wr, wr.rdma.rkey)",
        offset_of!(ibv_send_wr, wr) + offset_of!(wr_rdma, rkey),
    ),
    (
        "offsetof(struct ibv_send_wr, wr.atomic.compare_add)",
        offset_of!(ibv_send_wr, wr) + offset_of!(wr_atomic, compare_add),
    ),
    (
        "offsetof(struct ibv_send_wr, wr.atomic.swap)",
        offset_of!(ibv_send_wr, wr) + offset_of!(wr_atomic, swap),
    ),
    (
        "offsetof(struct ibv_send_wr, wr.atomic.rkey)",
        offset_of!(ibv_send_wr, wr) + offset_of!(wr_atomic, rkey),
    ),
    (
        "offsetof(struct ibv_send_wr, wr.ud.remote_qpn)",
        offset_of!(ibv_send_wr, wr) + offset_of!(wr_ud, remote_qpn),
    ),
    (
        "offsetof(struct ibv_send_wr, wr.ud.remote_qkey)",
        offset_of!(ibv_send_wr, wr) + offset_of!(wr_ud, remote_qkey),
    ),
    (
        "offsetof(struct ibv_send_wr, qp_type.xrc.remote_srqn)",
        offset_of!(ibv_send_wr, remote_srqn),
    ),
    ("sizeof(struct ibv_send_wr)", size_of::<ibv_send_wr>()),
    ("sizeof(struct ibv_device_attr_ex)", DEVICE_ATTR_EX_SIZE),
    (
        "offsetof(struct ibv_device_attr_ex, comp_mask)",
        DEVICE_ATTR_EX_COMP_MASK,
    ),
    (
        "offsetof(struct ibv_device_attr_ex, phys_port_cnt_ex)",
        DEVICE_ATTR_EX_PHYS_PORT_CNT_EX,
    ),
    (
        "offsetof(struct ibv_device_attr_ex, completion_timestamp_mask)",
        DEVICE_ATTR_EX_COMPLETION_TIMESTAMP_MASK,
    ),
    (
        "offsetof(struct ibv_device_attr_ex, hca_core_clock)",
        DEVICE_ATTR_EX_HCA_CORE_CLOCK,
    ),
    (
        "sizeof(struct _compat_ibv_port_attr)",
        PORT_ATTR_COMPAT_SIZE,
    ),
    ("sizeof(struct ibv_qp_ex)", 352),
    ("sizeof(pthread_mutex_t)", size_of::<pthread_mutex_t>()),
    ("sizeof(pthread_cond_t)", size_of::<pthread_cond_t>()),
    (
        "IBV_ACCESS_OPTIONAL_RANGE",
        c::IBV_ACCESS_OPTIONAL_RANGE as usize,
    ),
    (
        "IBV_ACCESS_RELAXED_ORDERING",
        c::IBV_ACCESS_RELAXED_ORDERING as usize,
    ),
    ("IBV_PORT_IP_BASED_GIDS", c::IBV_PORT_IP_BASED_GIDS as usize),
    ("IBV_GID_TYPE_ROCE_V2", c::IBV_GID_TYPE_ROCE_V2 as usize),
    ("IBV_QP_DEST_QPN", c::IBV_QP_DEST_QPN as usize),
    ("IBV_QP_RATE_LIMIT", c::IBV_QP_RATE_LIMIT as usize),
    ("IBV_WR_SEND_WITH_INV", c::IBV_WR_SEND_WITH_INV as usize),
    ("IBV_SEND_INLINE", c::IBV_SEND_INLINE as usize),
];

// The facts the inline code of every application depends on, at compile time.
const _: () = {
    assert!(size_of::<ibv_device>() == 664);
    assert!(size_of::<verbs_device>() == 712);
    assert!(offset_of!(verbs_device, ops) == 664);
    assert!(size_of::<ibv_context>() == 328);
    assert!(size_of::<verbs_context>() == 648);
    assert!(offset_of!(verbs_context, context) == 320);
    assert!(offset_of!(ibv_context, ops) + 8 * ops::POLL_CQ == 96);
    assert!(offset_of!(ibv_context, ops) + 8 * ops::POST_SEND == 208);
    assert!(offset_of!(ibv_context, ops) + 8 * ops::POST_RECV == 216);
    assert!(offset_of!(ibv_context, abi_compat) == 320);
    assert!(size_of::<ibv_cq>() == 128);
    assert!(size_of::<ibv_qp>() == 160);
    assert!(offset_of!(ibv_qp, qp_num) == 52);
    assert!(size_of::<ibv_mr>() == 48);
    assert!(size_of::<ibv_wc>() == 48);
    assert!(size_of::<ibv_send_wr>() == 128);
    assert!(size_of::<ibv_qp_attr>() == 144);
    assert!(size_of::<ibv_port_attr>() == 52);
    assert!(size_of::<ibv_device_attr>() == 232);
    assert!(size_of::<ibv_qp_init_attr>() == 64);
};

/// The layout tests' C side: gcc against the installed `<infiniband/verbs.h>`.
#[cfg(test)]
pub(crate) mod gcc_check {
    use std::fmt::Write as _;
    use std::process::Command;

    /// Whether gcc and the header are installed; without them the test is skipped
    /// (with a notice), unless `FERROVERBS_REQUIRE_IBVERBS_UTILS=1` makes it fail.
    pub(crate) fn available() -> bool {
        let header = std::path::Path::new("/usr/include/infiniband/verbs.h");
        let gcc = Command::new("gcc").arg("--version").output().is_ok();
        if header.exists() && gcc {
            return true;
        }
        assert_ne!(
            std::env::var("FERROVERBS_REQUIRE_IBVERBS_UTILS").as_deref(),
            Ok("1"),
            "gcc or /usr/include/infiniband/verbs.h (libibverbs-dev) missing"
        );
        println!("SKIPPED: gcc or libibverbs-dev not installed");
        false
    }

    /// Compiles `prelude` (includes, declarations, `int main(void) {`) with a printf
    /// of each C expression of `exprs`, runs it, and fails on any value that differs
    /// from ours. `tag` names the scratch directory.
    pub(crate) fn check(tag: &str, prelude: &str, exprs: &[(String, usize)]) {
        let mut src = String::from(prelude);
        for (e, _) in exprs {
            writeln!(src, "  printf(\"%zu\\n\", (size_t)({e}));").unwrap();
        }
        src.push_str("  return 0;\n}\n");
        let dir = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = dir.join("layout.c");
        let exe = dir.join("layout");
        std::fs::write(&c, &src).unwrap();
        let o = Command::new("gcc")
            .arg("-o")
            .arg(&exe)
            .arg(&c)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "gcc failed:\n{}\n{src}",
            String::from_utf8_lossy(&o.stderr)
        );
        let out = Command::new(&exe).output().unwrap();
        std::fs::remove_dir_all(&dir).ok();
        let got: Vec<usize> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        assert_eq!(got.len(), exprs.len());
        let bad: Vec<String> = exprs
            .iter()
            .zip(&got)
            .filter(|((_, v), g)| v != *g)
            .map(|((e, v), g)| format!("{e}: C {g}, Rust {v}"))
            .collect();
        assert!(bad.is_empty(), "layout mismatches:\n{}", bad.join("\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compiles a C program against the installed `<infiniband/verbs.h>` that prints
    /// every size and offset of [`LAYOUT`] and every expression of [`EXPRESSIONS`], and
    /// compares. Skipped (with a notice) without gcc or the header, unless
    /// `FERROVERBS_REQUIRE_IBVERBS_UTILS=1`.
    #[test]
    fn layouts_match_the_installed_header() {
        if !crate::abi::gcc_check::available() {
            return;
        }
        let mut exprs: Vec<(String, usize)> = LAYOUT
            .iter()
            .map(|&(s, m, v, _)| {
                let e = if m == "sizeof" {
                    format!("sizeof(struct {s})")
                } else {
                    format!("offsetof(struct {s}, {m})")
                };
                (e, v)
            })
            .collect();
        exprs.extend(EXPRESSIONS.iter().map(|&(e, v)| (e.to_string(), v)));
        crate::abi::gcc_check::check(
            "fv-ibv-layout",
            "#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\n\
             struct _compat_ibv_port_attr { char b[offsetof(struct ibv_port_attr, flags) + 1]; };\n\
             int main(void) {\n",
            &exprs,
        );
        assert!(exprs.len() > 250, "only {} facts checked", exprs.len());
    }
}

//! The uverbs write() command ABI (`rdma/ib_user_verbs.h`) and mlx5_ib's driver data
//! (`rdma/mlx5-abi.h`): command numbers, and the byte offset of every field this layer
//! reads or writes. `tests/layout.rs` checks each offset and size against the
//! installed headers with gcc.

/// Legacy command numbers (`enum ib_uverbs_write_cmds`).
pub mod cmd {
    #![allow(missing_docs)]
    pub const GET_CONTEXT: u32 = 0;
    pub const QUERY_DEVICE: u32 = 1;
    pub const QUERY_PORT: u32 = 2;
    pub const ALLOC_PD: u32 = 3;
    pub const DEALLOC_PD: u32 = 4;
    pub const CREATE_AH: u32 = 5;
    pub const DESTROY_AH: u32 = 8;
    pub const REG_MR: u32 = 9;
    pub const REREG_MR: u32 = 11;
    pub const DEREG_MR: u32 = 13;
    pub const ALLOC_MW: u32 = 14;
    pub const DEALLOC_MW: u32 = 16;
    pub const CREATE_COMP_CHANNEL: u32 = 17;
    pub const CREATE_CQ: u32 = 18;
    pub const RESIZE_CQ: u32 = 19;
    pub const DESTROY_CQ: u32 = 20;
    pub const POLL_CQ: u32 = 21;
    pub const REQ_NOTIFY_CQ: u32 = 23;
    pub const CREATE_QP: u32 = 24;
    pub const QUERY_QP: u32 = 25;
    pub const MODIFY_QP: u32 = 26;
    pub const DESTROY_QP: u32 = 27;
    pub const POST_SEND: u32 = 28;
    pub const POST_RECV: u32 = 29;
    pub const ATTACH_MCAST: u32 = 30;
    pub const DETACH_MCAST: u32 = 31;
    pub const CREATE_SRQ: u32 = 32;
    pub const MODIFY_SRQ: u32 = 33;
    pub const QUERY_SRQ: u32 = 34;
    pub const DESTROY_SRQ: u32 = 35;
    pub const POST_SRQ_RECV: u32 = 36;
    pub const OPEN_XRCD: u32 = 37;
    pub const CLOSE_XRCD: u32 = 38;
    pub const CREATE_XSRQ: u32 = 39;
    pub const OPEN_QP: u32 = 40;
    /// `IB_USER_VERBS_CMD_FLAG_EXTENDED`.
    pub const FLAG_EXTENDED: u32 = 0x8000_0000;
    /// `IB_USER_VERBS_CMD_COMMAND_MASK`.
    pub const COMMAND_MASK: u32 = 0xff;
    /// `IB_USER_VERBS_CMD_FLAGS_MASK`.
    pub const FLAGS_MASK: u32 = 0xff00_0000;
}

/// `RDMA_VERBS_IOCTL`: `_IOWR(0x1b, 1, struct ib_uverbs_ioctl_hdr)` (24 bytes).
pub const RDMA_VERBS_IOCTL: u64 = (3 << 30) | (24 << 16) | (0x1b << 8) | 1;

/// `ibv_qp_attr_mask` bits (`infiniband/verbs.h`).
pub mod qp_mask {
    #![allow(missing_docs)]
    pub const STATE: u32 = 1 << 0;
    pub const CUR_STATE: u32 = 1 << 1;
    pub const EN_SQD_ASYNC_NOTIFY: u32 = 1 << 2;
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const PORT: u32 = 1 << 5;
    pub const QKEY: u32 = 1 << 6;
    pub const AV: u32 = 1 << 7;
    pub const PATH_MTU: u32 = 1 << 8;
    pub const TIMEOUT: u32 = 1 << 9;
    pub const RETRY_CNT: u32 = 1 << 10;
    pub const RNR_RETRY: u32 = 1 << 11;
    pub const RQ_PSN: u32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    pub const ALT_PATH: u32 = 1 << 14;
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    pub const SQ_PSN: u32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    pub const PATH_MIG_STATE: u32 = 1 << 18;
    pub const CAP: u32 = 1 << 19;
    pub const DEST_QPN: u32 = 1 << 20;
}

macro_rules! abi_structs {
    ($( $(#[$doc:meta])* $m:ident = $c:literal, size $size:expr, { $($f:ident : $off:expr),* $(,)? } )*) => {
        $(
            $(#[$doc])*
            #[allow(non_upper_case_globals, missing_docs)]
            pub mod $m {
                /// The C struct.
                pub const C_NAME: &str = $c;
                /// `sizeof`.
                pub const SIZE: usize = $size;
                $( pub const $f: usize = $off; )*
                /// (field, offset), for the layout test.
                pub const FIELDS: &[(&str, usize)] = &[ $((stringify!($f), $off)),* ];
            }
        )*
        /// Every struct: (C name, size, fields), for the layout test.
        pub const STRUCTS: &[(&str, usize, &[(&str, usize)])] = &[ $(($m::C_NAME, $m::SIZE, $m::FIELDS)),* ];
    };
}

abi_structs! {
    /// Every command's first 8 bytes.
    cmd_hdr = "ib_uverbs_cmd_hdr", size 8, { command: 0, in_words: 4, out_words: 6 }
    /// After `cmd_hdr` in an extended command.
    ex_cmd_hdr = "ib_uverbs_ex_cmd_hdr", size 16, {
        response: 0, provider_in_words: 8, provider_out_words: 10, cmd_hdr_reserved: 12,
    }
    get_context = "ib_uverbs_get_context", size 8, { response: 0 }
    get_context_resp = "ib_uverbs_get_context_resp", size 8, { async_fd: 0, num_comp_vectors: 4 }
    alloc_ucontext_req = "mlx5_ib_alloc_ucontext_req_v2", size 32, {
        total_num_bfregs: 0, num_low_latency_bfregs: 4, flags: 8, comp_mask: 12,
        max_cqe_version: 16, reserved0: 17, reserved1: 18, reserved2: 20, lib_caps: 24,
    }
    alloc_ucontext_resp = "mlx5_ib_alloc_ucontext_resp", size 72, {
        qp_tab_size: 0, bf_reg_size: 4, tot_bfregs: 8, cache_line_size: 12,
        max_sq_desc_sz: 16, max_rq_desc_sz: 18, max_send_wqebb: 20, max_recv_wr: 24,
        max_srq_recv_wr: 28, num_ports: 32, flow_action_flags: 34, comp_mask: 36,
        response_length: 40, cqe_version: 44, cmds_supp_uhw: 45, eth_min_inline: 46,
        clock_info_versions: 47, hca_core_clock_offset: 48, log_uar_size: 56,
        num_uars_per_page: 60, num_dyn_bfregs: 64, dump_fill_mkey: 68,
    }
    /// The clock info page (`MLX5_IB_MMAP_CLOCK_INFO`).
    clock_info = "mlx5_ib_clock_info", size 56, {
        sign: 0, resv: 4, nsec: 8, cycles: 16, frac: 24, mult: 32, shift: 36, mask: 40,
        overflow_period: 48,
    }
    query_device = "ib_uverbs_query_device", size 8, { response: 0 }
    query_device_resp = "ib_uverbs_query_device_resp", size 176, {
        fw_ver: 0, node_guid: 8, sys_image_guid: 16, max_mr_size: 24, page_size_cap: 32,
        vendor_id: 40, vendor_part_id: 44, hw_ver: 48, max_qp: 52, max_qp_wr: 56,
        device_cap_flags: 60, max_sge: 64, max_sge_rd: 68, max_cq: 72, max_cqe: 76,
        max_mr: 80, max_pd: 84, max_qp_rd_atom: 88, max_ee_rd_atom: 92,
        max_res_rd_atom: 96, max_qp_init_rd_atom: 100, max_ee_init_rd_atom: 104,
        atomic_cap: 108, max_ee: 112, max_rdd: 116, max_mw: 120, max_raw_ipv6_qp: 124,
        max_raw_ethy_qp: 128, max_mcast_grp: 132, max_mcast_qp_attach: 136,
        max_total_mcast_qp_attach: 140, max_ah: 144, max_fmr: 148, max_map_per_fmr: 152,
        max_srq: 156, max_srq_wr: 160, max_srq_sge: 164, max_pkeys: 168,
        local_ca_ack_delay: 170, phys_port_cnt: 171,
    }
    ex_query_device = "ib_uverbs_ex_query_device", size 8, { comp_mask: 0, reserved: 4 }
    sge = "ib_uverbs_sge", size 16, { addr: 0, length: 8, lkey: 12 }
    ex_query_device_resp = "ib_uverbs_ex_query_device_resp", size 304, {
        base: 0, comp_mask: 176, response_length: 180, odp_caps: 184, timestamp_mask: 208,
        hca_core_clock: 216, device_cap_flags_ex: 224, rss_caps: 232, max_wq_type_rq: 248,
        raw_packet_caps: 252, tm_caps: 256, cq_moderation_caps: 280, max_dm_size: 288,
        xrc_odp_caps: 296,
    }
    query_port = "ib_uverbs_query_port", size 16, { response: 0, port_num: 8 }
    query_port_resp = "ib_uverbs_query_port_resp", size 40, {
        port_cap_flags: 0, max_msg_sz: 4, bad_pkey_cntr: 8, qkey_viol_cntr: 12,
        gid_tbl_len: 16, pkey_tbl_len: 20, lid: 22, sm_lid: 24, state: 26, max_mtu: 27,
        active_mtu: 28, lmc: 29, max_vl_num: 30, sm_sl: 31, subnet_timeout: 32,
        init_type_reply: 33, active_width: 34, active_speed: 35, phys_state: 36,
        link_layer: 37, flags: 38,
    }
    alloc_pd = "ib_uverbs_alloc_pd", size 8, { response: 0 }
    alloc_pd_resp = "ib_uverbs_alloc_pd_resp", size 4, { pd_handle: 0 }
    mlx5_alloc_pd_resp = "mlx5_ib_alloc_pd_resp", size 4, { pdn: 0 }
    dealloc_pd = "ib_uverbs_dealloc_pd", size 4, { pd_handle: 0 }
    reg_mr = "ib_uverbs_reg_mr", size 40, {
        response: 0, start: 8, length: 16, hca_va: 24, pd_handle: 32, access_flags: 36,
    }
    reg_mr_resp = "ib_uverbs_reg_mr_resp", size 12, { mr_handle: 0, lkey: 4, rkey: 8 }
    dereg_mr = "ib_uverbs_dereg_mr", size 4, { mr_handle: 0 }
    rereg_mr = "ib_uverbs_rereg_mr", size 48, {
        response: 0, mr_handle: 8, flags: 12, start: 16, length: 24, hca_va: 32,
        pd_handle: 40, access_flags: 44,
    }
    rereg_mr_resp = "ib_uverbs_rereg_mr_resp", size 8, { lkey: 0, rkey: 4 }
    alloc_mw = "ib_uverbs_alloc_mw", size 16, {
        response: 0, pd_handle: 8, mw_type: 12, reserved: 13,
    }
    alloc_mw_resp = "ib_uverbs_alloc_mw_resp", size 8, { mw_handle: 0, rkey: 4 }
    mlx5_alloc_mw = "mlx5_ib_alloc_mw", size 8, {
        comp_mask: 0, num_klms: 4, reserved1: 5, reserved2: 6,
    }
    dealloc_mw = "ib_uverbs_dealloc_mw", size 4, { mw_handle: 0 }
    create_comp_channel = "ib_uverbs_create_comp_channel", size 8, { response: 0 }
    create_comp_channel_resp = "ib_uverbs_create_comp_channel_resp", size 4, { fd: 0 }
    create_cq = "ib_uverbs_create_cq", size 32, {
        response: 0, user_handle: 8, cqe: 16, comp_vector: 20, comp_channel: 24,
    }
    create_cq_resp = "ib_uverbs_create_cq_resp", size 8, { cq_handle: 0, cqe: 4 }
    ex_create_cq = "ib_uverbs_ex_create_cq", size 32, {
        user_handle: 0, cqe: 8, comp_vector: 12, comp_channel: 16, comp_mask: 20, flags: 24,
    }
    ex_create_cq_resp = "ib_uverbs_ex_create_cq_resp", size 16, {
        base: 0, comp_mask: 8, response_length: 12,
    }
    mlx5_create_cq = "mlx5_ib_create_cq", size 32, {
        buf_addr: 0, db_addr: 8, cqe_size: 16, cqe_comp_en: 20, cqe_comp_res_format: 21,
        flags: 22, uar_page_index: 24,
    }
    mlx5_create_cq_resp = "mlx5_ib_create_cq_resp", size 8, { cqn: 0 }
    resize_cq = "ib_uverbs_resize_cq", size 16, { response: 0, cq_handle: 8, cqe: 12 }
    resize_cq_resp = "ib_uverbs_resize_cq_resp", size 8, { cqe: 0, reserved: 4 }
    mlx5_resize_cq = "mlx5_ib_resize_cq", size 16, {
        buf_addr: 0, cqe_size: 8, reserved0: 10, reserved1: 12,
    }
    destroy_cq = "ib_uverbs_destroy_cq", size 16, { response: 0, cq_handle: 8 }
    destroy_cq_resp = "ib_uverbs_destroy_cq_resp", size 8, {
        comp_events_reported: 0, async_events_reported: 4,
    }
    create_qp = "ib_uverbs_create_qp", size 56, {
        response: 0, user_handle: 8, pd_handle: 16, send_cq_handle: 20, recv_cq_handle: 24,
        srq_handle: 28, max_send_wr: 32, max_recv_wr: 36, max_send_sge: 40,
        max_recv_sge: 44, max_inline_data: 48, sq_sig_all: 52, qp_type: 53, is_srq: 54,
    }
    create_qp_resp = "ib_uverbs_create_qp_resp", size 32, {
        qp_handle: 0, qpn: 4, max_send_wr: 8, max_recv_wr: 12, max_send_sge: 16,
        max_recv_sge: 20, max_inline_data: 24,
    }
    ex_create_qp = "ib_uverbs_ex_create_qp", size 64, {
        user_handle: 0, pd_handle: 8, send_cq_handle: 12, recv_cq_handle: 16,
        srq_handle: 20, max_send_wr: 24, max_recv_wr: 28, max_send_sge: 32,
        max_recv_sge: 36, max_inline_data: 40, sq_sig_all: 44, qp_type: 45, is_srq: 46,
        comp_mask: 48, create_flags: 52, rwq_ind_tbl_handle: 56, source_qpn: 60,
    }
    ex_create_qp_resp = "ib_uverbs_ex_create_qp_resp", size 40, {
        base: 0, comp_mask: 32, response_length: 36,
    }
    mlx5_create_qp = "mlx5_ib_create_qp", size 56, {
        buf_addr: 0, db_addr: 8, sq_wqe_count: 16, rq_wqe_count: 20, rq_wqe_shift: 24,
        flags: 28, uidx: 32, bfreg_index: 36, sq_buf_addr: 40, ece_options: 48,
    }
    mlx5_create_qp_resp = "mlx5_ib_create_qp_resp", size 40, {
        bfreg_index: 0, ece_options: 4, comp_mask: 8, tirn: 12, tisn: 16, rqn: 20, sqn: 24,
        tir_icm_addr: 32,
    }
    qp_dest = "ib_uverbs_qp_dest", size 32, {
        dgid: 0, flow_label: 16, dlid: 20, sgid_index: 24, hop_limit: 25,
        traffic_class: 26, sl: 27, src_path_bits: 28, static_rate: 29, is_global: 30,
        port_num: 31,
    }
    modify_qp = "ib_uverbs_modify_qp", size 112, {
        dest: 0, alt_dest: 32, qp_handle: 64, attr_mask: 68, qkey: 72, rq_psn: 76,
        sq_psn: 80, dest_qp_num: 84, qp_access_flags: 88, pkey_index: 92,
        alt_pkey_index: 94, qp_state: 96, cur_qp_state: 97, path_mtu: 98,
        path_mig_state: 99, en_sqd_async_notify: 100, max_rd_atomic: 101,
        max_dest_rd_atomic: 102, min_rnr_timer: 103, port_num: 104, timeout: 105,
        retry_cnt: 106, rnr_retry: 107, alt_port_num: 108, alt_timeout: 109,
    }
    ex_modify_qp = "ib_uverbs_ex_modify_qp", size 120, { base: 0, rate_limit: 112 }
    query_qp = "ib_uverbs_query_qp", size 16, { response: 0, qp_handle: 8, attr_mask: 12 }
    query_qp_resp = "ib_uverbs_query_qp_resp", size 128, {
        dest: 0, alt_dest: 32, max_send_wr: 64, max_recv_wr: 68, max_send_sge: 72,
        max_recv_sge: 76, max_inline_data: 80, qkey: 84, rq_psn: 88, sq_psn: 92,
        dest_qp_num: 96, qp_access_flags: 100, pkey_index: 104, alt_pkey_index: 106,
        qp_state: 108, cur_qp_state: 109, path_mtu: 110, path_mig_state: 111,
        sq_draining: 112, max_rd_atomic: 113, max_dest_rd_atomic: 114, min_rnr_timer: 115,
        port_num: 116, timeout: 117, retry_cnt: 118, rnr_retry: 119, alt_port_num: 120,
        alt_timeout: 121, sq_sig_all: 122,
    }
    destroy_qp = "ib_uverbs_destroy_qp", size 16, { response: 0, qp_handle: 8 }
    destroy_qp_resp = "ib_uverbs_destroy_qp_resp", size 4, { events_reported: 0 }
    global_route = "ib_uverbs_global_route", size 24, {
        dgid: 0, flow_label: 16, sgid_index: 20, hop_limit: 21, traffic_class: 22,
    }
    ah_attr = "ib_uverbs_ah_attr", size 32, {
        grh: 0, dlid: 24, sl: 26, src_path_bits: 27, static_rate: 28, is_global: 29,
        port_num: 30,
    }
    create_ah = "ib_uverbs_create_ah", size 56, {
        response: 0, user_handle: 8, pd_handle: 16, attr: 24,
    }
    create_ah_resp = "ib_uverbs_create_ah_resp", size 4, { ah_handle: 0 }
    mlx5_create_ah_resp = "mlx5_ib_create_ah_resp", size 16, { response_length: 0, dmac: 4 }
    destroy_ah = "ib_uverbs_destroy_ah", size 4, { ah_handle: 0 }
    create_srq = "ib_uverbs_create_srq", size 32, {
        response: 0, user_handle: 8, pd_handle: 16, max_wr: 20, max_sge: 24, srq_limit: 28,
    }
    create_srq_resp = "ib_uverbs_create_srq_resp", size 16, {
        srq_handle: 0, max_wr: 4, max_sge: 8, srqn: 12,
    }
    mlx5_create_srq = "mlx5_ib_create_srq", size 32, {
        buf_addr: 0, db_addr: 8, flags: 16, uidx: 24,
    }
    mlx5_create_srq_resp = "mlx5_ib_create_srq_resp", size 8, { srqn: 0 }
    modify_srq = "ib_uverbs_modify_srq", size 16, {
        srq_handle: 0, attr_mask: 4, max_wr: 8, srq_limit: 12,
    }
    query_srq = "ib_uverbs_query_srq", size 16, { response: 0, srq_handle: 8 }
    query_srq_resp = "ib_uverbs_query_srq_resp", size 16, { max_wr: 0, max_sge: 4, srq_limit: 8 }
    destroy_srq = "ib_uverbs_destroy_srq", size 16, { response: 0, srq_handle: 8 }
    destroy_srq_resp = "ib_uverbs_destroy_srq_resp", size 4, { events_reported: 0 }
    comp_event_desc = "ib_uverbs_comp_event_desc", size 8, { cq_handle: 0 }
    async_event_desc = "ib_uverbs_async_event_desc", size 16, {
        element: 0, event_type: 8, reserved: 12,
    }
}

/// Little-endian (host order: x86-64 and arm64 Linux) reads of a command's bytes at
/// offsets of this module; a read past the end gives 0, as a zero-filled short
/// command would.
pub struct Req<'a>(pub &'a [u8]);

impl Req<'_> {
    fn bytes<const N: usize>(&self, off: usize) -> [u8; N] {
        let mut b = [0u8; N];
        if let Some(s) = off.checked_add(N).and_then(|end| self.0.get(off..end)) {
            b.copy_from_slice(s);
        }
        b
    }
    /// The byte at `off`.
    pub fn u8(&self, off: usize) -> u8 {
        self.bytes::<1>(off)[0]
    }
    /// The u16 at `off`.
    pub fn u16(&self, off: usize) -> u16 {
        u16::from_ne_bytes(self.bytes(off))
    }
    /// The u32 at `off`.
    pub fn u32(&self, off: usize) -> u32 {
        u32::from_ne_bytes(self.bytes(off))
    }
    /// The u64 at `off`.
    pub fn u64(&self, off: usize) -> u64 {
        u64::from_ne_bytes(self.bytes(off))
    }
    /// 16 bytes at `off` (a GID).
    pub fn gid(&self, off: usize) -> [u8; 16] {
        self.bytes(off)
    }
}

/// A response being built: host-order writes at offsets of this module.
pub struct Resp(pub Vec<u8>);

impl Resp {
    /// `len` zero bytes.
    pub fn new(len: usize) -> Resp {
        Resp(vec![0; len])
    }
    fn put(&mut self, off: usize, b: &[u8]) {
        if let Some(d) = off
            .checked_add(b.len())
            .and_then(|end| self.0.get_mut(off..end))
        {
            d.copy_from_slice(b);
        }
    }
    /// Writes a byte.
    pub fn u8(&mut self, off: usize, v: u8) {
        self.put(off, &[v]);
    }
    /// Writes a u16.
    pub fn u16(&mut self, off: usize, v: u16) {
        self.put(off, &v.to_ne_bytes());
    }
    /// Writes a u32.
    pub fn u32(&mut self, off: usize, v: u32) {
        self.put(off, &v.to_ne_bytes());
    }
    /// Writes a u64.
    pub fn u64(&mut self, off: usize, v: u64) {
        self.put(off, &v.to_ne_bytes());
    }
    /// Writes bytes.
    pub fn bytes(&mut self, off: usize, b: &[u8]) {
        self.put(off, b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_past_the_end_are_zero_and_writes_past_it_are_dropped() {
        let b = [1u8, 2, 3, 4, 5];
        let r = Req(&b);
        assert_eq!(r.u32(0), u32::from_ne_bytes([1, 2, 3, 4]));
        assert_eq!(r.u32(2), 0);
        assert_eq!(r.u8(4), 5);
        assert_eq!(r.u64(usize::MAX - 2), 0);
        let mut w = Resp::new(6);
        w.u32(4, 0xdead_beef);
        w.u16(4, 0x0102);
        assert_eq!(w.0, [0, 0, 0, 0, 2, 1]);
    }

    #[test]
    fn the_ioctl_number_is_rdma_verbs_ioctl() {
        // _IOWR(0x1b, 1, struct ib_uverbs_ioctl_hdr) with a 24-byte header.
        assert_eq!(RDMA_VERBS_IOCTL, 0xc018_1b01);
    }
}

/// The rdma_cm command ABI.
pub mod ucma;

/// The uverbs ioctl ABI.
pub mod ioctl;

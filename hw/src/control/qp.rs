//! Queue pairs: CREATE_QP / DESTROY_QP / QUERY_QP, the state transitions, the QP
//! context ([`qpc`]) and its address paths ([`ads`]).
//!
//! CREATE_QP carries the context at byte 0x18 and the buffer's page list at 0x110:
//! the RQ (`1 << log_rq_size` WQEs of `16 << log_rq_stride` bytes) first, then the SQ
//! (`1 << log_sq_size` 64-byte WQEBBs). Every modify command (RST2INIT, INIT2INIT,
//! INIT2RTR, RTR2RTS, RTS2RTS, SQERR2RTS, SQD_RTS) carries `qpn`, `opt_param_mask` and a
//! full context at the same offsets; 2ERR and 2RST carry only the QP number. The
//! primary path therefore sits at absolute byte 0x30 of all of them.
//!
//! Two state enumerations exist: [`QpcState`] is what the context's `state` field
//! holds (`mlx5_ifc.h`, SQD = 7), [`QpState`] is the kernel driver's (`qp.h`, SQD = 5,
//! SQ_DRAINING = 7); Linux reads both 5 and 7 as SQD.

use crate::field::{Field, Layout, TooShort};
use crate::prm_layout;

use super::cmd::{self, Opcode};

prm_layout! {
    /// CREATE_QP input; the QP buffer's page addresses (`pas`) follow at byte 0x110 (RQ first, then SQ).
    pub mod create_qp_in = "create_qp_in" (0x880) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// Requested QP number (special QPs).
        input_qpn: 0x48, 0x18;
        /// Optional parameters present (`MLX5_QP_OPTPAR_*`).
        opt_param_mask: 0x80, 0x20;
        /// Enhanced connection establishment value.
        ece: 0xa0, 0x20;
        /// The QP context ([`qpc`](super::qpc)).
        qpc: 0xc0, 0x740;
        /// The work queue buffer is a UMEM.
        wq_umem_valid: 0x860, 1;
        /// Flexible array of 64-bit page addresses.
        pas: 0x880, 0;
    }
}

prm_layout! {
    /// CREATE_QP output.
    pub mod create_qp_out = "create_qp_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// The new QP's number.
        qpn: 0x48, 0x18;
        /// Enhanced connection establishment value.
        ece: 0x60, 0x20;
    }
}

prm_layout! {
    /// DESTROY_QP input.
    pub mod destroy_qp_in = "destroy_qp_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// QP number.
        qpn: 0x48, 0x18;
    }
}

prm_layout! {
    /// DESTROY_QP output.
    pub mod destroy_qp_out = "destroy_qp_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}

prm_layout! {
    /// QUERY_QP input.
    pub mod query_qp_in = "query_qp_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// QP number.
        qpn: 0x48, 0x18;
    }
}

prm_layout! {
    /// QUERY_QP output.
    pub mod query_qp_out = "query_qp_out" (0x880) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// Optional parameters present (`MLX5_QP_OPTPAR_*`).
        opt_param_mask: 0x80, 0x20;
        /// Enhanced connection establishment value.
        ece: 0xa0, 0x20;
        /// The QP context ([`qpc`](super::qpc)).
        qpc: 0xc0, 0x740;
        /// Flexible array of 64-bit page addresses.
        pas: 0x880, 0;
    }
}

prm_layout! {
    /// The queue pair context.
    pub mod qpc = "qpc" (0x740) {
        /// QP state (`MLX5_QPC_STATE_*`).
        state: 0, 4;
        /// LAG transmit port affinity.
        lag_tx_port_affinity: 4, 4;
        /// Service type (`MLX5_QPC_ST_*`).
        st: 8, 8;
        /// Isolate VL/traffic class.
        isolate_vl_tc: 0x12, 1;
        /// Path migration state (`MLX5_QPC_PM_STATE_*`).
        pm_state: 0x13, 2;
        /// Requester end-to-end credit mode.
        req_e2e_credit_mode: 0x16, 2;
        /// Offload type (`MLX5_QPC_OFFLOAD_TYPE_*`).
        offload_type: 0x18, 4;
        /// Scatter end padding mode (`MLX5_QPC_END_PADDING_MODE_*`).
        end_padding_mode: 0x1c, 2;
        /// WQE signature.
        wq_signature: 0x20, 1;
        /// Block multicast loopback.
        block_lb_mc: 0x21, 1;
        /// Atomic-like write enable.
        atomic_like_write_en: 0x22, 1;
        /// Latency sensitive.
        latency_sensitive: 0x23, 1;
        /// Drain on signature error.
        drain_sigerr: 0x25, 1;
        /// Protection domain.
        pd: 0x28, 0x18;
        /// Path MTU (`MLX5_QPC_MTU_*`: 1 = 256 ... 5 = 4096).
        mtu: 0x40, 3;
        /// log2 of the largest message.
        log_msg_max: 0x43, 5;
        /// log2 of the number of RQ WQEs.
        log_rq_size: 0x49, 4;
        /// log2 of the RQ WQE size minus 4.
        log_rq_stride: 0x4d, 3;
        /// No send queue.
        no_sq: 0x50, 1;
        /// log2 of the number of SQ WQEBBs.
        log_sq_size: 0x51, 4;
        /// Timestamp format.
        ts_format: 0x58, 2;
        /// Reserved lkey allowed.
        rlky: 0x5b, 1;
        /// ULP stateless offload mode.
        ulp_stateless_offload_mode: 0x5c, 4;
        /// Queue counter set.
        counter_set_id: 0x60, 8;
        /// UAR page index of the doorbells.
        uar_page: 0x68, 0x18;
        /// User index reported in CQEs (cqe_version 1).
        user_index: 0x88, 0x18;
        /// log2 of the buffer page size minus 12.
        log_page_size: 0xa3, 5;
        /// Destination QP number.
        remote_qpn: 0xa8, 0x18;
        /// The primary path ([`ads`](super::ads)).
        primary_address_path: 0xc0, 0x160;
        /// The alternate path ([`ads`](super::ads)).
        secondary_address_path: 0x220, 0x160;
        /// log2 of the ACK request frequency.
        log_ack_req_freq: 0x380, 4;
        /// log2 of requester RDMA read/atomic resources.
        log_sra_max: 0x388, 3;
        /// Transport retry count.
        retry_count: 0x38d, 3;
        /// RNR retry count (7 = infinite).
        rnr_retry: 0x390, 3;
        /// Fast registration enabled.
        fre: 0x394, 1;
        /// Current RNR retry count.
        cur_rnr_retry: 0x395, 3;
        /// Current transport retry count.
        cur_retry_count: 0x398, 3;
        /// Next send PSN.
        next_send_psn: 0x3c8, 0x18;
        /// log2 of DCI stream channels.
        log_num_dci_stream_channels: 0x3e3, 5;
        /// CQ of the send queue.
        cqn_snd: 0x3e8, 0x18;
        /// log2 of errored DCI streams.
        log_num_dci_errored_streams: 0x403, 5;
        /// Source QP number of a DETH (UD).
        deth_sqpn: 0x408, 0x18;
        /// Last acknowledged PSN.
        last_acked_psn: 0x448, 0x18;
        /// Send sequence number.
        ssn: 0x468, 0x18;
        /// log2 of responder RDMA read/atomic resources.
        log_rra_max: 0x488, 3;
        /// Atomic mode (`MLX5_QPC_ATOMIC_MODE_*`).
        atomic_mode: 0x48c, 4;
        /// Remote read enabled.
        rre: 0x490, 1;
        /// Remote write enabled.
        rwe: 0x491, 1;
        /// Remote atomic enabled.
        rae: 0x492, 1;
        /// Offset of the buffer in its first page, in 64-byte units.
        page_offset: 0x494, 6;
        /// Cross-channel slave on the receive side.
        cd_slave_receive: 0x49d, 1;
        /// Cross-channel slave on the send side.
        cd_slave_send: 0x49e, 1;
        /// Cross-channel master.
        cd_master: 0x49f, 1;
        /// Minimum RNR NAK timer code.
        min_rnr_nak: 0x4a3, 5;
        /// Next expected receive PSN.
        next_rcv_psn: 0x4a8, 0x18;
        /// XRC domain.
        xrcd: 0x4c8, 0x18;
        /// CQ of the receive queue.
        cqn_rcv: 0x4e8, 0x18;
        /// DMA address of the doorbell record.
        dbr_addr: 0x500, 0x40;
        /// Q_Key.
        q_key: 0x540, 0x20;
        /// Receive queue type (`MLX5_NON_ZERO_RQ`, `MLX5_SRQ_RQ`, ...).
        rq_type: 0x565, 3;
        /// SRQ, RMP or XRQ number.
        srqn_rmpn_xrqn: 0x568, 0x18;
        /// Responder message sequence number.
        rmsn: 0x588, 0x18;
        /// Hardware send queue WQEBB counter.
        hw_sq_wqebb_counter: 0x5a0, 0x10;
        /// Software send queue WQEBB counter.
        sw_sq_wqebb_counter: 0x5b0, 0x10;
        /// Hardware receive queue counter.
        hw_rq_counter: 0x5c0, 0x20;
        /// Software receive queue counter.
        sw_rq_counter: 0x5e0, 0x20;
        /// Completion generation state.
        cgs: 0x62f, 1;
        /// Requester CQE scatter (`MLX5_QPC_CS_REQ_*`).
        cs_req: 0x630, 8;
        /// Responder CQE scatter (`MLX5_QPC_CS_RES_*`).
        cs_res: 0x638, 8;
        /// DC access key.
        dc_access_key: 0x640, 0x40;
        /// The doorbell record is in a UMEM.
        dbr_umem_valid: 0x683, 1;
    }
}

prm_layout! {
    /// An address path (primary at qpc + 0x18, alternate at qpc + 0x44).
    pub mod ads = "ads" (0x160) {
        /// Force loopback.
        fl: 0, 1;
        /// Free adaptive routing.
        free_ar: 1, 1;
        /// P_Key index.
        pkey_index: 0x10, 0x10;
        /// A GRH is present.
        grh: 0x28, 1;
        /// Source LID path bits.
        mlid: 0x29, 7;
        /// Remote LID.
        rlid: 0x30, 0x10;
        /// Local ACK timeout exponent: 4.096 us * 2^ack_timeout.
        ack_timeout: 0x40, 5;
        /// Local GID table index.
        src_addr_index: 0x48, 8;
        /// Static rate code.
        stat_rate: 0x54, 4;
        /// IP hop limit (TTL).
        hop_limit: 0x58, 8;
        /// Traffic class.
        tclass: 0x64, 8;
        /// IPv6 flow label.
        flow_label: 0x6c, 0x14;
        /// Remote GID or IP address (16 bytes).
        rgid_rip: 0x80, 0x80;
        /// Force DSCP.
        f_dscp: 0x104, 1;
        /// Force ECN.
        f_ecn: 0x105, 1;
        /// Force Ethernet priority.
        f_eth_prio: 0x107, 1;
        /// IP ECN.
        ecn: 0x108, 2;
        /// IP DSCP.
        dscp: 0x10a, 6;
        /// RoCEv2 UDP source port.
        udp_sport: 0x110, 0x10;
        /// VLAN DEI/CFI bit.
        dei_cfi: 0x120, 1;
        /// Ethernet priority (PCP).
        eth_prio: 0x121, 3;
        /// Service level.
        sl: 0x124, 4;
        /// Port number (1-based).
        vhca_port_num: 0x128, 8;
        /// Remote MAC bits 47..32.
        rmac_47_32: 0x130, 0x10;
        /// Remote MAC bits 31..0.
        rmac_31_0: 0x140, 0x20;
    }
}

prm_layout! {
    /// RST2INIT_QP input.
    pub mod rst2init_qp_in = "rst2init_qp_in" (0x880) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// QP number.
        qpn: 0x48, 0x18;
        /// Optional parameters present (`MLX5_QP_OPTPAR_*`).
        opt_param_mask: 0x80, 0x20;
        /// Enhanced connection establishment value.
        ece: 0xa0, 0x20;
        /// The QP context ([`qpc`](super::qpc)).
        qpc: 0xc0, 0x740;
    }
}

prm_layout! {
    /// RST2INIT_QP output.
    pub mod rst2init_qp_out = "rst2init_qp_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// Enhanced connection establishment value.
        ece: 0x60, 0x20;
    }
}

prm_layout! {
    /// INIT2INIT_QP input.
    pub mod init2init_qp_in = "init2init_qp_in" (0x880) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// QP number.
        qpn: 0x48, 0x18;
        /// Optional parameters present (`MLX5_QP_OPTPAR_*`).
        opt_param_mask: 0x80, 0x20;
        /// Enhanced connection establishment value.
        ece: 0xa0, 0x20;
        /// The QP context ([`qpc`](super::qpc)).
        qpc: 0xc0, 0x740;
    }
}

prm_layout! {
    /// INIT2INIT_QP output.
    pub mod init2init_qp_out = "init2init_qp_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// Enhanced connection establishment value.
        ece: 0x60, 0x20;
    }
}

prm_layout! {
    /// INIT2RTR_QP input.
    pub mod init2rtr_qp_in = "init2rtr_qp_in" (0x880) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// QP number.
        qpn: 0x48, 0x18;
        /// Optional parameters present (`MLX5_QP_OPTPAR_*`).
        opt_param_mask: 0x80, 0x20;
        /// Enhanced connection establishment value.
        ece: 0xa0, 0x20;
        /// The QP context ([`qpc`](super::qpc)).
        qpc: 0xc0, 0x740;
    }
}

prm_layout! {
    /// INIT2RTR_QP output.
    pub mod init2rtr_qp_out = "init2rtr_qp_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// Enhanced connection establishment value.
        ece: 0x60, 0x20;
    }
}

prm_layout! {
    /// RTR2RTS_QP input.
    pub mod rtr2rts_qp_in = "rtr2rts_qp_in" (0x880) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// QP number.
        qpn: 0x48, 0x18;
        /// Optional parameters present (`MLX5_QP_OPTPAR_*`).
        opt_param_mask: 0x80, 0x20;
        /// Enhanced connection establishment value.
        ece: 0xa0, 0x20;
        /// The QP context ([`qpc`](super::qpc)).
        qpc: 0xc0, 0x740;
    }
}

prm_layout! {
    /// RTR2RTS_QP output.
    pub mod rtr2rts_qp_out = "rtr2rts_qp_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// Enhanced connection establishment value.
        ece: 0x60, 0x20;
    }
}

prm_layout! {
    /// RTS2RTS_QP input.
    pub mod rts2rts_qp_in = "rts2rts_qp_in" (0x880) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// QP number.
        qpn: 0x48, 0x18;
        /// Optional parameters present (`MLX5_QP_OPTPAR_*`).
        opt_param_mask: 0x80, 0x20;
        /// Enhanced connection establishment value.
        ece: 0xa0, 0x20;
        /// The QP context ([`qpc`](super::qpc)).
        qpc: 0xc0, 0x740;
    }
}

prm_layout! {
    /// RTS2RTS_QP output.
    pub mod rts2rts_qp_out = "rts2rts_qp_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// Enhanced connection establishment value.
        ece: 0x60, 0x20;
    }
}

prm_layout! {
    /// SQERR2RTS_QP input.
    pub mod sqerr2rts_qp_in = "sqerr2rts_qp_in" (0x880) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// QP number.
        qpn: 0x48, 0x18;
        /// Optional parameters present (`MLX5_QP_OPTPAR_*`).
        opt_param_mask: 0x80, 0x20;
        /// The QP context ([`qpc`](super::qpc)).
        qpc: 0xc0, 0x740;
    }
}

prm_layout! {
    /// SQERR2RTS_QP output.
    pub mod sqerr2rts_qp_out = "sqerr2rts_qp_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}

prm_layout! {
    /// SQD_RTS_QP input.
    pub mod sqd2rts_qp_in = "sqd2rts_qp_in" (0x880) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// QP number.
        qpn: 0x48, 0x18;
        /// Optional parameters present (`MLX5_QP_OPTPAR_*`).
        opt_param_mask: 0x80, 0x20;
        /// The QP context ([`qpc`](super::qpc)).
        qpc: 0xc0, 0x740;
    }
}

prm_layout! {
    /// SQD_RTS_QP output.
    pub mod sqd2rts_qp_out = "sqd2rts_qp_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}

prm_layout! {
    /// 2ERR_QP input.
    pub mod qp_2err_in = "qp_2err_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// QP number.
        qpn: 0x48, 0x18;
    }
}

prm_layout! {
    /// 2ERR_QP output.
    pub mod qp_2err_out = "qp_2err_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}

prm_layout! {
    /// 2RST_QP input.
    pub mod qp_2rst_in = "qp_2rst_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// QP number.
        qpn: 0x48, 0x18;
    }
}

prm_layout! {
    /// 2RST_QP output.
    pub mod qp_2rst_out = "qp_2rst_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}
/// The layouts of this module.
pub const LAYOUTS: &[&Layout] = &[
    &create_qp_in::LAYOUT,
    &create_qp_out::LAYOUT,
    &destroy_qp_in::LAYOUT,
    &destroy_qp_out::LAYOUT,
    &query_qp_in::LAYOUT,
    &query_qp_out::LAYOUT,
    &qpc::LAYOUT,
    &ads::LAYOUT,
    &rst2init_qp_in::LAYOUT,
    &rst2init_qp_out::LAYOUT,
    &init2init_qp_in::LAYOUT,
    &init2init_qp_out::LAYOUT,
    &init2rtr_qp_in::LAYOUT,
    &init2rtr_qp_out::LAYOUT,
    &rtr2rts_qp_in::LAYOUT,
    &rtr2rts_qp_out::LAYOUT,
    &rts2rts_qp_in::LAYOUT,
    &rts2rts_qp_out::LAYOUT,
    &sqerr2rts_qp_in::LAYOUT,
    &sqerr2rts_qp_out::LAYOUT,
    &sqd2rts_qp_in::LAYOUT,
    &sqd2rts_qp_out::LAYOUT,
    &qp_2err_in::LAYOUT,
    &qp_2err_out::LAYOUT,
    &qp_2rst_in::LAYOUT,
    &qp_2rst_out::LAYOUT,
];

header_enum! {
    /// `qpc.state` (`MLX5_QPC_STATE_*`, `mlx5_ifc.h`).
    pub enum QpcState: u8 in Mlx5Ifc {
        /// Reset.
        Rst = 0x0 => "MLX5_QPC_STATE_RST",
        /// Initialized.
        Init = 0x1 => "MLX5_QPC_STATE_INIT",
        /// Ready to receive.
        Rtr = 0x2 => "MLX5_QPC_STATE_RTR",
        /// Ready to send.
        Rts = 0x3 => "MLX5_QPC_STATE_RTS",
        /// Send queue error.
        Sqer = 0x4 => "MLX5_QPC_STATE_SQER",
        /// Error.
        Err = 0x6 => "MLX5_QPC_STATE_ERR",
        /// Send queue drained.
        Sqd = 0x7 => "MLX5_QPC_STATE_SQD",
        /// Suspended.
        Suspended = 0x9 => "MLX5_QPC_STATE_SUSPENDED",
    }
}

header_enum! {
    /// The kernel's QP states (`enum mlx5_qp_state`, `qp.h`), as Linux decodes QUERY_QP.
    pub enum QpState: u8 in Qp {
        /// Reset.
        Rst = 0 => "MLX5_QP_STATE_RST",
        /// Initialized.
        Init = 1 => "MLX5_QP_STATE_INIT",
        /// Ready to receive.
        Rtr = 2 => "MLX5_QP_STATE_RTR",
        /// Ready to send.
        Rts = 3 => "MLX5_QP_STATE_RTS",
        /// Send queue error.
        Sqer = 4 => "MLX5_QP_STATE_SQER",
        /// Send queue drained.
        Sqd = 5 => "MLX5_QP_STATE_SQD",
        /// Error.
        Err = 6 => "MLX5_QP_STATE_ERR",
        /// Send queue draining (read as SQD).
        SqDraining = 7 => "MLX5_QP_STATE_SQ_DRAINING",
        /// Suspended.
        Suspended = 9 => "MLX5_QP_STATE_SUSPENDED",
    }
}

header_enum! {
    /// `qpc.st`: the service type (`MLX5_QPC_ST_*`).
    pub enum QpcSt: u8 in Mlx5Ifc {
        /// Reliable connected.
        Rc = 0x0 => "MLX5_QPC_ST_RC",
        /// Unreliable connected.
        Uc = 0x1 => "MLX5_QPC_ST_UC",
        /// Unreliable datagram.
        Ud = 0x2 => "MLX5_QPC_ST_UD",
        /// Extended reliable connected.
        Xrc = 0x3 => "MLX5_QPC_ST_XRC",
        /// Dynamically connected initiator.
        Dci = 0x5 => "MLX5_QPC_ST_DCI",
        /// QP0 (subnet management).
        Qp0 = 0x7 => "MLX5_QPC_ST_QP0",
        /// QP1 (general services).
        Qp1 = 0x8 => "MLX5_QPC_ST_QP1",
        /// Raw datagram.
        RawDatagram = 0x9 => "MLX5_QPC_ST_RAW_DATAGRAM",
        /// UMR registration QP.
        RegUmr = 0xc => "MLX5_QPC_ST_REG_UMR",
    }
}

header_enum! {
    /// `qpc.pm_state` (`MLX5_QPC_PM_STATE_*`).
    pub enum QpcPmState: u8 in Mlx5Ifc {
        /// Armed for migration.
        Armed = 0x0 => "MLX5_QPC_PM_STATE_ARMED",
        /// Re-arm.
        Rearm = 0x1 => "MLX5_QPC_PM_STATE_REARM",
        /// Reserved.
        Reserved = 0x2 => "MLX5_QPC_PM_STATE_RESERVED",
        /// Migrated: what drivers set at creation.
        Migrated = 0x3 => "MLX5_QPC_PM_STATE_MIGRATED",
    }
}

header_enum! {
    /// `qpc.mtu` (`MLX5_QPC_MTU_*`).
    pub enum QpcMtu: u8 in Mlx5Ifc {
        /// 256 bytes.
        Bytes256 = 0x1 => "MLX5_QPC_MTU_256_BYTES",
        /// 512 bytes.
        Bytes512 = 0x2 => "MLX5_QPC_MTU_512_BYTES",
        /// 1024 bytes.
        Bytes1K = 0x3 => "MLX5_QPC_MTU_1K_BYTES",
        /// 2048 bytes.
        Bytes2K = 0x4 => "MLX5_QPC_MTU_2K_BYTES",
        /// 4096 bytes.
        Bytes4K = 0x5 => "MLX5_QPC_MTU_4K_BYTES",
        /// Raw Ethernet QP.
        RawEthernetQp = 0x7 => "MLX5_QPC_MTU_RAW_ETHERNET_QP",
    }
}

impl QpcMtu {
    /// The MTU in bytes; `None` for the raw Ethernet marker.
    pub const fn bytes(self) -> Option<u32> {
        match self {
            QpcMtu::RawEthernetQp => None,
            m => Some(128 << (m as u32)),
        }
    }
}

header_enum! {
    /// `qpc.atomic_mode` (`MLX5_QPC_ATOMIC_MODE_*`).
    pub enum QpcAtomicMode: u8 in Mlx5Ifc {
        /// InfiniBand specification atomics.
        IbSpec = 0x1 => "MLX5_QPC_ATOMIC_MODE_IB_SPEC",
        /// 8-byte atomics only.
        Only8B = 0x2 => "MLX5_QPC_ATOMIC_MODE_ONLY_8B",
        /// Up to 8 bytes.
        UpTo8B = 0x3 => "MLX5_QPC_ATOMIC_MODE_UP_TO_8B",
        /// Up to 16 bytes.
        UpTo16B = 0x4 => "MLX5_QPC_ATOMIC_MODE_UP_TO_16B",
        /// Up to 32 bytes.
        UpTo32B = 0x5 => "MLX5_QPC_ATOMIC_MODE_UP_TO_32B",
        /// Up to 64 bytes.
        UpTo64B = 0x6 => "MLX5_QPC_ATOMIC_MODE_UP_TO_64B",
        /// Up to 128 bytes.
        UpTo128B = 0x7 => "MLX5_QPC_ATOMIC_MODE_UP_TO_128B",
        /// Up to 256 bytes.
        UpTo256B = 0x8 => "MLX5_QPC_ATOMIC_MODE_UP_TO_256B",
    }
}

header_enum! {
    /// `qpc.end_padding_mode` (`MLX5_QPC_END_PADDING_MODE_*`).
    pub enum QpcEndPaddingMode: u8 in Mlx5Ifc {
        /// Scatter as is.
        ScatterAsIs = 0x0 => "MLX5_QPC_END_PADDING_MODE_SCATTER_AS_IS",
        /// Pad to a cache line.
        PadToCacheLineAlignment = 0x1 => "MLX5_QPC_END_PADDING_MODE_PAD_TO_CACHE_LINE_ALIGNMENT",
    }
}

header_enum! {
    /// `qpc.rq_type` (`qp.h`).
    pub enum RqType: u8 in Qp {
        /// A regular receive queue.
        NonZeroRq = 0x0 => "MLX5_NON_ZERO_RQ",
        /// Receives come from an SRQ (`srqn_rmpn_xrqn`).
        SrqRq = 0x1 => "MLX5_SRQ_RQ",
        /// Cyclic receive queue.
        CrqRq = 0x2 => "MLX5_CRQ_RQ",
        /// No receive queue.
        ZeroLenRq = 0x3 => "MLX5_ZERO_LEN_RQ",
    }
}

c_constants! {
    /// `opt_param_mask` bits (`enum mlx5_qp_optpar`, `qp.h`): which optional context
    /// fields a modify command applies.
    pub const OPTPAR_CONSTANTS;
        /// The alternate path.
        Qp MLX5_QP_OPTPAR_ALT_ADDR_PATH: u32 = 1 << 0;
        /// `rre`.
        Qp MLX5_QP_OPTPAR_RRE: u32 = 1 << 1;
        /// `rae`.
        Qp MLX5_QP_OPTPAR_RAE: u32 = 1 << 2;
        /// `rwe`.
        Qp MLX5_QP_OPTPAR_RWE: u32 = 1 << 3;
        /// `primary_address_path.pkey_index`.
        Qp MLX5_QP_OPTPAR_PKEY_INDEX: u32 = 1 << 4;
        /// `q_key`.
        Qp MLX5_QP_OPTPAR_Q_KEY: u32 = 1 << 5;
        /// `min_rnr_nak`.
        Qp MLX5_QP_OPTPAR_RNR_TIMEOUT: u32 = 1 << 6;
        /// The primary path.
        Qp MLX5_QP_OPTPAR_PRIMARY_ADDR_PATH: u32 = 1 << 7;
        /// `log_sra_max`.
        Qp MLX5_QP_OPTPAR_SRA_MAX: u32 = 1 << 8;
        /// `log_rra_max`.
        Qp MLX5_QP_OPTPAR_RRA_MAX: u32 = 1 << 9;
        /// `pm_state`.
        Qp MLX5_QP_OPTPAR_PM_STATE: u32 = 1 << 10;
        /// `retry_count`.
        Qp MLX5_QP_OPTPAR_RETRY_COUNT: u32 = 1 << 12;
        /// `rnr_retry`.
        Qp MLX5_QP_OPTPAR_RNR_RETRY: u32 = 1 << 13;
        /// `primary_address_path.ack_timeout`.
        Qp MLX5_QP_OPTPAR_ACK_TIMEOUT: u32 = 1 << 14;
        /// `lag_tx_port_affinity`.
        Qp MLX5_QP_OPTPAR_LAG_TX_AFF: u32 = 1 << 15;
        /// `primary_address_path.vhca_port_num`.
        Qp MLX5_QP_OPTPAR_PRI_PORT: u32 = 1 << 16;
        /// `srqn_rmpn_xrqn`.
        Qp MLX5_QP_OPTPAR_SRQN: u32 = 1 << 18;
        /// `cqn_rcv`.
        Qp MLX5_QP_OPTPAR_CQN_RCV: u32 = 1 << 19;
        /// DC handshake.
        Qp MLX5_QP_OPTPAR_DC_HS: u32 = 1 << 20;
        /// `dc_access_key`.
        Qp MLX5_QP_OPTPAR_DC_KEY: u32 = 1 << 21;
        /// `counter_set_id`.
        Qp MLX5_QP_OPTPAR_COUNTER_SET_ID: u32 = 1 << 25;

}

/// A QP state transition command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpTransition {
    /// RESET to INIT.
    Rst2Init,
    /// INIT to INIT.
    Init2Init,
    /// INIT to RTR.
    Init2Rtr,
    /// RTR to RTS.
    Rtr2Rts,
    /// RTS to RTS.
    Rts2Rts,
    /// SQ error to RTS.
    Sqerr2Rts,
    /// SQ drained to RTS.
    Sqd2Rts,
    /// Any state to ERR.
    ToErr,
    /// Any state to RESET.
    ToRst,
}

impl QpTransition {
    /// Every transition.
    pub const ALL: &'static [QpTransition] = &[
        QpTransition::Rst2Init,
        QpTransition::Init2Init,
        QpTransition::Init2Rtr,
        QpTransition::Rtr2Rts,
        QpTransition::Rts2Rts,
        QpTransition::Sqerr2Rts,
        QpTransition::Sqd2Rts,
        QpTransition::ToErr,
        QpTransition::ToRst,
    ];

    /// The command's opcode.
    pub const fn opcode(self) -> Opcode {
        match self {
            QpTransition::Rst2Init => Opcode::Rst2InitQp,
            QpTransition::Init2Init => Opcode::Init2InitQp,
            QpTransition::Init2Rtr => Opcode::Init2RtrQp,
            QpTransition::Rtr2Rts => Opcode::Rtr2RtsQp,
            QpTransition::Rts2Rts => Opcode::Rts2RtsQp,
            QpTransition::Sqerr2Rts => Opcode::Sqerr2RtsQp,
            QpTransition::Sqd2Rts => Opcode::SqdRtsQp,
            QpTransition::ToErr => Opcode::Qp2ErrQp,
            QpTransition::ToRst => Opcode::Qp2RstQp,
        }
    }

    /// The transition an opcode performs.
    pub const fn from_opcode(op: Opcode) -> Option<Self> {
        Some(match op {
            Opcode::Rst2InitQp => QpTransition::Rst2Init,
            Opcode::Init2InitQp => QpTransition::Init2Init,
            Opcode::Init2RtrQp => QpTransition::Init2Rtr,
            Opcode::Rtr2RtsQp => QpTransition::Rtr2Rts,
            Opcode::Rts2RtsQp => QpTransition::Rts2Rts,
            Opcode::Sqerr2RtsQp => QpTransition::Sqerr2Rts,
            Opcode::SqdRtsQp => QpTransition::Sqd2Rts,
            Opcode::Qp2ErrQp => QpTransition::ToErr,
            Opcode::Qp2RstQp => QpTransition::ToRst,
            _ => return None,
        })
    }

    /// The input layout.
    pub const fn in_layout(self) -> &'static Layout {
        match self {
            QpTransition::Rst2Init => &rst2init_qp_in::LAYOUT,
            QpTransition::Init2Init => &init2init_qp_in::LAYOUT,
            QpTransition::Init2Rtr => &init2rtr_qp_in::LAYOUT,
            QpTransition::Rtr2Rts => &rtr2rts_qp_in::LAYOUT,
            QpTransition::Rts2Rts => &rts2rts_qp_in::LAYOUT,
            QpTransition::Sqerr2Rts => &sqerr2rts_qp_in::LAYOUT,
            QpTransition::Sqd2Rts => &sqd2rts_qp_in::LAYOUT,
            QpTransition::ToErr => &qp_2err_in::LAYOUT,
            QpTransition::ToRst => &qp_2rst_in::LAYOUT,
        }
    }

    /// The output layout.
    pub const fn out_layout(self) -> &'static Layout {
        match self {
            QpTransition::Rst2Init => &rst2init_qp_out::LAYOUT,
            QpTransition::Init2Init => &init2init_qp_out::LAYOUT,
            QpTransition::Init2Rtr => &init2rtr_qp_out::LAYOUT,
            QpTransition::Rtr2Rts => &rtr2rts_qp_out::LAYOUT,
            QpTransition::Rts2Rts => &rts2rts_qp_out::LAYOUT,
            QpTransition::Sqerr2Rts => &sqerr2rts_qp_out::LAYOUT,
            QpTransition::Sqd2Rts => &sqd2rts_qp_out::LAYOUT,
            QpTransition::ToErr => &qp_2err_out::LAYOUT,
            QpTransition::ToRst => &qp_2rst_out::LAYOUT,
        }
    }

    /// Whether the input carries `opt_param_mask` and a context (all but 2ERR, 2RST).
    pub const fn has_qpc(self) -> bool {
        !matches!(self, QpTransition::ToErr | QpTransition::ToRst)
    }

    /// Whether the input carries `ece` (not SQERR2RTS, SQD_RTS, 2ERR, 2RST).
    pub const fn has_ece(self) -> bool {
        self.has_qpc() && !matches!(self, QpTransition::Sqerr2Rts | QpTransition::Sqd2Rts)
    }

    /// The state the QP is in after the command.
    pub const fn target(self) -> QpcState {
        match self {
            QpTransition::Rst2Init | QpTransition::Init2Init => QpcState::Init,
            QpTransition::Init2Rtr => QpcState::Rtr,
            QpTransition::Rtr2Rts
            | QpTransition::Rts2Rts
            | QpTransition::Sqerr2Rts
            | QpTransition::Sqd2Rts => QpcState::Rts,
            QpTransition::ToErr => QpcState::Err,
            QpTransition::ToRst => QpcState::Rst,
        }
    }

    /// The command that takes a QP from `cur` to `next` (Linux `mlx5_ib` `optab`);
    /// `None` for a transition no command performs.
    pub const fn between(cur: QpcState, next: QpcState) -> Option<Self> {
        use QpcState as S;
        Some(match (cur, next) {
            (_, S::Rst) => QpTransition::ToRst,
            (_, S::Err) => QpTransition::ToErr,
            (S::Rst, S::Init) => QpTransition::Rst2Init,
            (S::Init, S::Init) => QpTransition::Init2Init,
            (S::Init, S::Rtr) => QpTransition::Init2Rtr,
            (S::Rtr, S::Rts) => QpTransition::Rtr2Rts,
            (S::Rts, S::Rts) => QpTransition::Rts2Rts,
            (S::Sqer, S::Rts) => QpTransition::Sqerr2Rts,
            (S::Sqd, S::Rts) => QpTransition::Sqd2Rts,
            _ => return None,
        })
    }

    /// Whether the command may be applied to a QP in state `cur`.
    pub const fn allowed_from(self, cur: QpcState) -> bool {
        match QpTransition::between(cur, self.target()) {
            Some(t) => t as u8 == self as u8,
            None => false,
        }
    }
}

/// A qpc field placed where CREATE_QP, QUERY_QP and the modify commands carry the
/// context (byte 0x18).
pub const fn in_command(field: Field) -> Field {
    field.at(create_qp_in::qpc.bit)
}

/// An ads field of the primary path, placed in a CREATE_QP or modify command.
pub const fn primary_path(field: Field) -> Field {
    field.at(create_qp_in::qpc.bit + qpc::primary_address_path.bit)
}

/// An ads field of the alternate path, placed in a CREATE_QP or modify command.
pub const fn secondary_path(field: Field) -> Field {
    field.at(create_qp_in::qpc.bit + qpc::secondary_address_path.bit)
}

/// A zeroed modify command for QP `qpn` with its header written.
pub fn transition_input(t: QpTransition, qpn: u32, opt_param_mask: u32) -> Vec<u8> {
    let mut input = cmd::new_input(t.opcode(), 0, t.in_layout().size());
    rst2init_qp_in::qpn.set(&mut input, qpn.into());
    if t.has_qpc() {
        rst2init_qp_in::opt_param_mask.set(&mut input, opt_param_mask.into());
    }
    input
}

/// The QP number of any transition, DESTROY_QP or QUERY_QP input (dword 2 `[23:0]`).
pub fn qpn(input: &[u8]) -> Result<u32, TooShort> {
    qp_2rst_in::LAYOUT.check(input)?;
    Ok(qp_2rst_in::qpn.get(input) as u32)
}

/// Size in bytes of the work queue buffer a CREATE_QP input describes: the RQ then the
/// SQ (none with `no_sq`, and no RQ unless `rq_type` is a regular RQ).
pub fn wq_buffer_len(create_qp_in: &[u8]) -> Result<u64, TooShort> {
    create_qp_in::LAYOUT.check(create_qp_in)?;
    let get = |f: Field| in_command(f).get(create_qp_in);
    let rq = if get(qpc::rq_type) == u64::from(RqType::NonZeroRq.value()) {
        (16u64 << get(qpc::log_rq_stride)) << get(qpc::log_rq_size)
    } else {
        0
    };
    let sq = if get(qpc::no_sq) == 0 {
        64u64 << get(qpc::log_sq_size)
    } else {
        0
    };
    Ok(rq + sq)
}

/// The page addresses a CREATE_QP input lists for its buffer (pages of
/// `4096 << log_page_size` bytes, starting `page_offset` * 64 bytes into the first),
/// checked against the input's length.
pub fn qp_pas(create_qp_in: &[u8]) -> Result<impl ExactSizeIterator<Item = u64> + '_, TooShort> {
    let len = wq_buffer_len(create_qp_in)?;
    let offset = in_command(qpc::page_offset).get(create_qp_in) * 64;
    let page = 1u64 << (in_command(qpc::log_page_size).get(create_qp_in) + 12);
    let npages = (len + offset).div_ceil(page);
    cmd::flex64_entries(create_qp_in, create_qp_in::pas, npages as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primary_path_at_absolute_0x30() {
        // Reference §4.7: primary path at qpc + 0x18 = absolute 0x30 of create_qp_in and
        // of every modify command.
        assert_eq!(primary_path(ads::fl).byte_offset(), 0x30);
        assert_eq!(secondary_path(ads::fl).byte_offset(), 0x18 + 0x44);
        for t in QpTransition::ALL.iter().filter(|t| t.has_qpc()) {
            let l = t.in_layout();
            assert_eq!(l.field("qpc").map(|f| f.byte_offset()), Some(0x18), "{t:?}");
            assert_eq!(l.field("qpn").map(|f| f.byte_offset()), Some(0x09), "{t:?}");
            assert_eq!(
                l.field("opt_param_mask").map(|f| f.byte_offset()),
                Some(0x10)
            );
            assert_eq!(l.field("ece").is_some(), t.has_ece(), "{t:?}");
            assert_eq!(l.size(), 272);
        }
        let mut input = transition_input(QpTransition::Init2Rtr, 0x12_3456, MLX5_QP_OPTPAR_RRE);
        assert_eq!(&input[..2], &[0x05, 0x03]);
        assert_eq!(&input[8..12], &[0, 0x12, 0x34, 0x56]);
        assert_eq!(&input[0x10..0x14], &[0, 0, 0, 2]);
        assert_eq!(qpn(&input), Ok(0x12_3456));
        primary_path(ads::rgid_rip)
            .bytes_mut(&mut input)
            .unwrap()
            .copy_from_slice(&[0xfe; 16]);
        assert_eq!(&input[0x40..0x50], &[0xfe; 16]);
        primary_path(ads::src_addr_index).set(&mut input, 3);
        primary_path(ads::hop_limit).set(&mut input, 64);
        assert_eq!(&input[0x38..0x3c], &[0, 3, 0, 64]);
        primary_path(ads::udp_sport).set(&mut input, 0xdcba);
        assert_eq!(&input[0x52..0x54], &[0xdc, 0xba]);
        primary_path(ads::vhca_port_num).set(&mut input, 1);
        primary_path(ads::rmac_47_32).set(&mut input, 0x0002);
        primary_path(ads::rmac_31_0).set(&mut input, 0xc903_0001);
        assert_eq!(
            &input[0x54..0x5c],
            &[0, 1, 0x00, 0x02, 0xc9, 0x03, 0x00, 0x01]
        );
        in_command(qpc::mtu).set(&mut input, QpcMtu::Bytes1K.value().into());
        in_command(qpc::log_msg_max).set(&mut input, 20);
        assert_eq!(input[0x18 + 8], 0x74);
        in_command(qpc::remote_qpn).set(&mut input, 0xab_cdef);
        assert_eq!(&input[0x18 + 0x15..0x18 + 0x18], &[0xab, 0xcd, 0xef]);
        in_command(qpc::next_rcv_psn).set(&mut input, 0x11_2233);
        assert_eq!(&input[0x18 + 0x95..0x18 + 0x98], &[0x11, 0x22, 0x33]);
        // 2ERR carries only the QP number.
        let e = transition_input(QpTransition::ToErr, 7, MLX5_QP_OPTPAR_RRE);
        assert_eq!(e.len(), 16);
        assert_eq!(&e[..12], &[0x05, 0x07, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7]);
        assert!(qpn(&e[..11]).is_err());
    }

    #[test]
    fn transitions_follow_the_kernel_table() {
        use QpcState as S;
        assert_eq!(
            QpTransition::between(S::Rst, S::Init),
            Some(QpTransition::Rst2Init)
        );
        assert_eq!(
            QpTransition::between(S::Init, S::Rtr),
            Some(QpTransition::Init2Rtr)
        );
        assert_eq!(
            QpTransition::between(S::Rtr, S::Rts),
            Some(QpTransition::Rtr2Rts)
        );
        assert_eq!(
            QpTransition::between(S::Sqd, S::Rts),
            Some(QpTransition::Sqd2Rts)
        );
        assert_eq!(
            QpTransition::between(S::Rts, S::Err),
            Some(QpTransition::ToErr)
        );
        assert_eq!(
            QpTransition::between(S::Err, S::Rst),
            Some(QpTransition::ToRst)
        );
        assert_eq!(QpTransition::between(S::Rst, S::Rtr), None);
        assert_eq!(QpTransition::between(S::Rtr, S::Init), None);
        assert!(QpTransition::Init2Rtr.allowed_from(S::Init));
        assert!(!QpTransition::Init2Rtr.allowed_from(S::Rst));
        assert!(QpTransition::ToErr.allowed_from(S::Rtr));
        for t in QpTransition::ALL {
            assert_eq!(QpTransition::from_opcode(t.opcode()), Some(*t));
            assert_eq!(t.out_layout().size(), 16);
        }
        assert_eq!(QpTransition::from_opcode(Opcode::CreateQp), None);
        assert_eq!(Opcode::SqdRtsQp.value(), 0x50c);
    }

    #[test]
    fn qpc_fields() {
        let mut c = [0u8; qpc::SIZE];
        qpc::state.set(&mut c, QpcState::Rts.value().into());
        qpc::st.set(&mut c, QpcSt::Ud.value().into());
        qpc::pm_state.set(&mut c, QpcPmState::Migrated.value().into());
        assert_eq!(&c[..4], &[0x30, 0x02, 0x18, 0]);
        qpc::pd.set(&mut c, 0x12_3456);
        assert_eq!(&c[4..8], &[0, 0x12, 0x34, 0x56]);
        qpc::rre.set(&mut c, 1);
        qpc::rwe.set(&mut c, 1);
        qpc::rae.set(&mut c, 1);
        assert_eq!(c[0x92], 0xe0);
        qpc::retry_count.set(&mut c, 7);
        qpc::rnr_retry.set(&mut c, 7);
        assert_eq!(&c[0x70..0x74], &[0, 0x07, 0xe0, 0]);
        qpc::dbr_addr.set(&mut c, 0x1234_5678_9abc_def0);
        assert_eq!(&c[0xa0..0xa8], &0x1234_5678_9abc_def0u64.to_be_bytes());
        qpc::q_key.set(&mut c, 0x1111_1111);
        assert_eq!(&c[0xa8..0xac], &[0x11; 4]);
        assert_eq!(QpcMtu::Bytes4K.bytes(), Some(4096));
        assert_eq!(QpcMtu::Bytes256.bytes(), Some(256));
        assert_eq!(QpcMtu::RawEthernetQp.bytes(), None);
        assert_eq!(QpState::from_value(5), Some(QpState::Sqd));
        assert_eq!(QpcState::from_value(5), None);
    }

    #[test]
    fn buffer_pages() {
        let mut input = cmd::new_input(Opcode::CreateQp, 0, 0x110 + 3 * 8);
        // RQ: 16 WQEs of 64 bytes (stride 2); SQ: 64 WQEBBs. 1 KiB + 4 KiB = 2 pages.
        in_command(qpc::log_rq_size).set(&mut input, 4);
        in_command(qpc::log_rq_stride).set(&mut input, 2);
        in_command(qpc::log_sq_size).set(&mut input, 6);
        assert_eq!(wq_buffer_len(&input), Ok(1024 + 4096));
        cmd::set_flex64(&mut input, create_qp_in::pas, &[0x1000, 0x2000, 0x3000]).unwrap();
        assert_eq!(
            qp_pas(&input).unwrap().collect::<Vec<_>>(),
            [0x1000, 0x2000]
        );
        in_command(qpc::no_sq).set(&mut input, 1);
        in_command(qpc::rq_type).set(&mut input, RqType::ZeroLenRq.value().into());
        assert_eq!(wq_buffer_len(&input), Ok(0));
        // A lying size is refused rather than read past the end.
        in_command(qpc::no_sq).set(&mut input, 0);
        in_command(qpc::log_sq_size).set(&mut input, 15);
        assert!(qp_pas(&input).is_err());
        assert!(wq_buffer_len(&input[..100]).is_err());
    }
}

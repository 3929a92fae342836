//! Counters: queue counter sets (ALLOC_Q_COUNTER, DEALLOC_Q_COUNTER, QUERY_Q_COUNTER,
//! and the QP context's `counter_set_id`) and the vport traffic counters
//! (QUERY_VPORT_COUNTER).
//!
//! Facts (Linux 6.1 `mlx5_ifc.h`: `mlx5_ifc_alloc_q_counter_{in,out}_bits`,
//! `mlx5_ifc_dealloc_q_counter_{in,out}_bits`, `mlx5_ifc_query_q_counter_{in,out}_bits`,
//! `mlx5_ifc_query_vport_counter_{in,out}_bits`, `mlx5_ifc_traffic_counter_bits`;
//! opcodes `MLX5_CMD_OP_QUERY_VPORT_COUNTER` 0x770 .. `MLX5_CMD_OP_QUERY_Q_COUNTER`
//! 0x773):
//!
//! * A *Q counter set* is allocated by ALLOC_Q_COUNTER, which returns an 8-bit
//!   `counter_set_id`. A QP counts into the set its context names (`qpc.counter_set_id`,
//!   set at CREATE_QP or by a modify with `MLX5_QP_OPTPAR_COUNTER_SET_ID`). The counters
//!   are per set, not per QP: a QP that wants its own numbers gets its own set (what
//!   Linux's per-QP "rdma statistic" binding does).
//! * QUERY_Q_COUNTER reads a set (32-bit counters, `clear` zeroes it after the read);
//!   QUERY_VPORT_COUNTER reads the vport's traffic counters, each a packets/octets pair
//!   of 64-bit values ([`traffic_counter`]).
//!
//! # Simulator extensions
//!
//! The PRM has no counter for several things a simulator can count exactly (RNR NAKs
//! received, packets retransmitted, doorbells, WQE fetches, DMA bytes, frame drops by
//! reason). The simulator reports them in the *reserved* tails of the two query
//! outputs ([`ferroverbs_q_counter_ext`] at bit 0x6e0 of `query_q_counter_out`,
//! [`ferroverbs_vport_counter_ext`] at bit 0x680 of `query_vport_counter_out`). A real
//! ConnectX returns those bytes as zero, so a driver reading them sees 0 ("not
//! counted"), never a wrong value. The two layouts are recorded in
//! [`crate::conformance::DEVIATIONS`] (they are ferroverbs' own, absent from the
//! header).

use crate::field::{Field, Layout, TooShort};
use crate::prm_layout;

use super::cmd::{self, Opcode};

prm_layout! {
    /// ALLOC_Q_COUNTER input.
    pub mod alloc_q_counter_in = "alloc_q_counter_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id (0).
        uid: 0x10, 0x10;
        /// Command-specific modifier (0).
        op_mod: 0x30, 0x10;
    }
}

prm_layout! {
    /// ALLOC_Q_COUNTER output: the new set.
    pub mod alloc_q_counter_out = "alloc_q_counter_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// The counter set allocated.
        counter_set_id: 0x58, 8;
    }
}

prm_layout! {
    /// DEALLOC_Q_COUNTER input.
    pub mod dealloc_q_counter_in = "dealloc_q_counter_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier (0).
        op_mod: 0x30, 0x10;
        /// The counter set to free.
        counter_set_id: 0x58, 8;
    }
}

prm_layout! {
    /// DEALLOC_Q_COUNTER output.
    pub mod dealloc_q_counter_out = "dealloc_q_counter_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}

prm_layout! {
    /// QUERY_Q_COUNTER input.
    pub mod query_q_counter_in = "query_q_counter_in" (0x100) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier (0).
        op_mod: 0x30, 0x10;
        /// Zero the set after reading it.
        clear: 0xc0, 1;
        /// The counter set to read.
        counter_set_id: 0xf8, 8;
    }
}

prm_layout! {
    /// QUERY_Q_COUNTER output: the counters of one set (32 bits each, wrapping).
    pub mod query_q_counter_out = "query_q_counter_out" (0x800) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// RDMA WRITE requests received (responder).
        rx_write_requests: 0x80, 0x20;
        /// RDMA READ requests received (responder).
        rx_read_requests: 0xc0, 0x20;
        /// Atomic requests received (responder).
        rx_atomic_requests: 0x100, 0x20;
        /// DCT connect requests received.
        rx_dct_connect: 0x140, 0x20;
        /// Requests that found no receive WQE (responder; RC answers an RNR NAK).
        out_of_buffer: 0x180, 0x20;
        /// Requests received out of sequence (responder; a sequence NAK or a drop).
        out_of_sequence: 0x1c0, 0x20;
        /// Duplicate requests received (responder).
        duplicate_request: 0x200, 0x20;
        /// WQEs completed with RNR retry exceeded (requester).
        rnr_nak_retry_err: 0x240, 0x20;
        /// Sequence NAKs received (requester).
        packet_seq_err: 0x280, 0x20;
        /// Implied NAKs: a response showing earlier responses were lost (requester).
        implied_nak_seq_err: 0x2c0, 0x20;
        /// Local ACK timeouts (requester).
        local_ack_timeout_err: 0x300, 0x20;
        /// Responder local length errors.
        resp_local_length_error: 0x3c0, 0x20;
        /// Requester local length errors.
        req_local_length_error: 0x3e0, 0x20;
        /// Responder local QP operation errors.
        resp_local_qp_error: 0x400, 0x20;
        /// Local operation errors.
        local_operation_error: 0x420, 0x20;
        /// Responder local protection errors.
        resp_local_protection: 0x440, 0x20;
        /// Requester local protection errors.
        req_local_protection: 0x460, 0x20;
        /// Responder error CQEs.
        resp_cqe_error: 0x480, 0x20;
        /// Requester error CQEs.
        req_cqe_error: 0x4a0, 0x20;
        /// Memory window binding errors.
        req_mw_binding: 0x4c0, 0x20;
        /// Bad responses received (requester).
        req_bad_response: 0x4e0, 0x20;
        /// Remote invalid request NAKs received (requester).
        req_remote_invalid_request: 0x500, 0x20;
        /// Invalid requests received (responder).
        resp_remote_invalid_request: 0x520, 0x20;
        /// Remote access error NAKs received (requester).
        req_remote_access_errors: 0x540, 0x20;
        /// Remote access errors (responder).
        resp_remote_access_errors: 0x560, 0x20;
        /// Remote operation error NAKs received (requester).
        req_remote_operation_errors: 0x580, 0x20;
        /// WQEs completed with transport retry exceeded (requester).
        req_transport_retries_exceeded: 0x5a0, 0x20;
        /// CQEs lost to a CQ overrun.
        cq_overflow: 0x5c0, 0x20;
        /// Responder flushed CQEs.
        resp_cqe_flush_error: 0x5e0, 0x20;
        /// Requester flushed CQEs.
        req_cqe_flush_error: 0x600, 0x20;
        /// Adaptive retransmissions.
        roce_adp_retrans: 0x640, 0x20;
        /// Adaptive retransmission timeouts.
        roce_adp_retrans_to: 0x660, 0x20;
        /// Slow restarts.
        roce_slow_restart: 0x680, 0x20;
        /// Slow restart CNPs.
        roce_slow_restart_cnps: 0x6a0, 0x20;
        /// Slow restart transitions.
        roce_slow_restart_trans: 0x6c0, 0x20;
    }
}

prm_layout! {
    /// Simulator extension of QUERY_Q_COUNTER: counters the PRM has no field for,
    /// reported in the reserved tail of `query_q_counter_out` (at bit
    /// [`Q_COUNTER_EXT_BIT`]; zero on real hardware). 32 bits each, wrapping.
    pub mod ferroverbs_q_counter_ext = "ferroverbs_q_counter_ext" (0x120) {
        /// RNR NAKs received (requester): each one delays the QP and resends.
        rnr_nak_received: 0, 0x20;
        /// Go-back-N retransmissions started (after a sequence NAK, an implied NAK, a
        /// local ACK timeout or an RNR NAK).
        retransmissions: 0x20, 0x20;
        /// Request packets sent again by those retransmissions.
        retransmitted_packets: 0x40, 0x20;
    }
}

/// Where [`ferroverbs_q_counter_ext`] sits in `query_q_counter_out` (its
/// `reserved_at_6e0`).
pub const Q_COUNTER_EXT_BIT: u32 = 0x6e0;

prm_layout! {
    /// A packets/octets pair of 64-bit counters.
    pub mod traffic_counter = "traffic_counter" (0x80) {
        /// Packets.
        packets: 0, 0x40;
        /// Bytes.
        octets: 0x40, 0x40;
    }
}

prm_layout! {
    /// QUERY_VPORT_COUNTER input.
    pub mod query_vport_counter_in = "query_vport_counter_in" (0x100) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier (0: this function's vport).
        op_mod: 0x30, 0x10;
        /// Address another vport.
        other_vport: 0x40, 1;
        /// Port number (multi-port functions).
        port_num: 0x4c, 4;
        /// Vport number.
        vport_number: 0x50, 0x10;
        /// Zero the counters after reading them.
        clear: 0xc0, 1;
    }
}

prm_layout! {
    /// QUERY_VPORT_COUNTER output: [`traffic_counter`] pairs.
    pub mod query_vport_counter_out = "query_vport_counter_out" (0x1080) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// Frames received with errors.
        received_errors: 0x80, 0x80;
        /// Frames that could not be transmitted.
        transmit_errors: 0x100, 0x80;
        /// InfiniBand unicast received.
        received_ib_unicast: 0x180, 0x80;
        /// InfiniBand unicast transmitted.
        transmitted_ib_unicast: 0x200, 0x80;
        /// InfiniBand multicast received.
        received_ib_multicast: 0x280, 0x80;
        /// InfiniBand multicast transmitted.
        transmitted_ib_multicast: 0x300, 0x80;
        /// Ethernet broadcast received.
        received_eth_broadcast: 0x380, 0x80;
        /// Ethernet broadcast transmitted.
        transmitted_eth_broadcast: 0x400, 0x80;
        /// Ethernet unicast received.
        received_eth_unicast: 0x480, 0x80;
        /// Ethernet unicast transmitted.
        transmitted_eth_unicast: 0x500, 0x80;
        /// Ethernet multicast received.
        received_eth_multicast: 0x580, 0x80;
        /// Ethernet multicast transmitted.
        transmitted_eth_multicast: 0x600, 0x80;
    }
}

prm_layout! {
    /// Simulator extension of QUERY_VPORT_COUNTER: device counters the PRM has no field
    /// for (doorbells, WQE fetches, PCIe DMA traffic, drops by reason), in the reserved
    /// tail of `query_vport_counter_out` (at bit [`VPORT_COUNTER_EXT_BIT`]; zero on real
    /// hardware). 64 bits each.
    pub mod ferroverbs_vport_counter_ext = "ferroverbs_vport_counter_ext" (0xa00) {
        /// Send doorbells acted on (8-byte doorbells and BlueFlame copies).
        doorbells: 0, 0x40;
        /// Doorbells for no usable QP or CQ.
        stray_doorbells: 0x40, 0x40;
        /// Send WQEs fetched (retransmissions re-read a WQE without counting it again).
        wqes_fetched: 0x80, 0x40;
        /// CQEs written.
        cqes_written: 0xc0, 0x40;
        /// Bytes the device read from host memory (DMA reads through the IOMMU).
        dma_read_bytes: 0x100, 0x40;
        /// Bytes the device wrote to host memory (DMA writes through the IOMMU).
        dma_write_bytes: 0x140, 0x40;
        /// Dropped: ICRC mismatch.
        rx_drop_bad_icrc: 0x180, 0x40;
        /// Dropped: not a well-formed RoCEv2 frame.
        rx_drop_malformed: 0x1c0, 0x40;
        /// Dropped: destination MAC of no port of this device.
        rx_drop_not_mine: 0x200, 0x40;
        /// Dropped: transport the device does not serve.
        rx_drop_unsupported: 0x240, 0x40;
        /// Dropped: no such QP.
        rx_drop_no_qp: 0x280, 0x40;
        /// Dropped: the QP's state does not accept it.
        rx_drop_bad_state: 0x2c0, 0x40;
        /// Dropped: addresses do not match the QP's path.
        rx_drop_bad_addr: 0x300, 0x40;
        /// Dropped: P_Key mismatch.
        rx_drop_bad_pkey: 0x340, 0x40;
        /// Dropped: a response matching no outstanding request.
        rx_drop_unexpected: 0x380, 0x40;
        /// Ignored: stale or duplicate responses.
        rx_drop_stale: 0x3c0, 0x40;
        /// Dropped: the device's receive queue was full.
        rx_drop_queue_full: 0x400, 0x40;
        /// Duplicate requests received (answered again or ignored).
        rx_duplicates: 0x440, 0x40;
    }
}

/// Where [`ferroverbs_vport_counter_ext`] sits in `query_vport_counter_out` (its
/// `reserved_at_680`).
pub const VPORT_COUNTER_EXT_BIT: u32 = 0x680;

/// The layouts of this module.
pub const LAYOUTS: &[&Layout] = &[
    &alloc_q_counter_in::LAYOUT,
    &alloc_q_counter_out::LAYOUT,
    &dealloc_q_counter_in::LAYOUT,
    &dealloc_q_counter_out::LAYOUT,
    &query_q_counter_in::LAYOUT,
    &query_q_counter_out::LAYOUT,
    &ferroverbs_q_counter_ext::LAYOUT,
    &traffic_counter::LAYOUT,
    &query_vport_counter_in::LAYOUT,
    &query_vport_counter_out::LAYOUT,
    &ferroverbs_vport_counter_ext::LAYOUT,
];

/// A Q counter extension field placed in `query_q_counter_out`.
pub const fn q_ext(field: Field) -> Field {
    field.at(Q_COUNTER_EXT_BIT)
}

/// A vport counter extension field placed in `query_vport_counter_out`.
pub const fn vport_ext(field: Field) -> Field {
    field.at(VPORT_COUNTER_EXT_BIT)
}

/// The packets and octets fields of a [`traffic_counter`] member of
/// `query_vport_counter_out` (e.g. `query_vport_counter_out::received_eth_unicast`).
pub const fn traffic(member: Field) -> (Field, Field) {
    (
        traffic_counter::packets.at(member.bit),
        traffic_counter::octets.at(member.bit),
    )
}

/// The ALLOC_Q_COUNTER input.
pub fn alloc_input() -> Vec<u8> {
    cmd::command_input(Opcode::AllocQCounter, 0)
}

/// The DEALLOC_Q_COUNTER input for `set`.
pub fn dealloc_input(set: u8) -> Vec<u8> {
    let mut i = cmd::command_input(Opcode::DeallocQCounter, 0);
    dealloc_q_counter_in::counter_set_id.set(&mut i, u64::from(set));
    i
}

/// The QUERY_Q_COUNTER input for `set`, zeroing it after the read if `clear`.
pub fn query_q_input(set: u8, clear: bool) -> Vec<u8> {
    let mut i = cmd::command_input(Opcode::QueryQCounter, 0);
    query_q_counter_in::counter_set_id.set(&mut i, u64::from(set));
    query_q_counter_in::clear.set(&mut i, u64::from(clear));
    i
}

/// The QUERY_VPORT_COUNTER input for the function's own vport, zeroing the counters
/// after the read if `clear`.
pub fn query_vport_input(clear: bool) -> Vec<u8> {
    let mut i = cmd::command_input(Opcode::QueryVportCounter, 0);
    query_vport_counter_in::clear.set(&mut i, u64::from(clear));
    i
}

/// The counter set an ALLOC_Q_COUNTER output names.
pub fn allocated_set(out: &[u8]) -> Result<u8, TooShort> {
    alloc_q_counter_out::LAYOUT.check(out)?;
    Ok(alloc_q_counter_out::counter_set_id.get(out) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_place_their_fields() {
        let i = alloc_input();
        assert_eq!(i.len(), 16);
        assert_eq!(&i[..2], &[0x07, 0x71]);
        let i = dealloc_input(0x2a);
        assert_eq!(&i[..2], &[0x07, 0x72]);
        assert_eq!(i[0x0b], 0x2a);
        let i = query_q_input(7, true);
        assert_eq!(i.len(), 32);
        assert_eq!(&i[..2], &[0x07, 0x73]);
        assert_eq!(i[0x18], 0x80);
        assert_eq!(i[0x1f], 7);
        let i = query_vport_input(false);
        assert_eq!((i.len(), &i[..2]), (32, &[0x07, 0x70][..]));
        assert!(i[2..].iter().all(|b| *b == 0));
    }

    #[test]
    fn outputs_place_their_fields() {
        let mut o = vec![0u8; query_vport_counter_out::SIZE];
        assert_eq!(o.len(), 528);
        let (p, b) = traffic(query_vport_counter_out::transmitted_eth_unicast);
        p.set(&mut o, 0x0102_0304_0506_0708);
        b.set(&mut o, 9);
        assert_eq!(&o[0xa0..0xa8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(o[0xaf], 9);
        vport_ext(ferroverbs_vport_counter_ext::doorbells).set(&mut o, 5);
        assert_eq!(o[0xd7], 5);
        let mut q = vec![0u8; query_q_counter_out::SIZE];
        assert_eq!(q.len(), 256);
        q_ext(ferroverbs_q_counter_ext::retransmitted_packets).set(&mut q, 3);
        assert_eq!(q[0xe4], 0);
        assert_eq!(q[0xe7], 3);
        query_q_counter_out::local_ack_timeout_err.set(&mut q, 1);
        assert_eq!(q[0x63], 1);
        let mut a = vec![0u8; 16];
        alloc_q_counter_out::counter_set_id.set(&mut a, 200);
        assert_eq!(allocated_set(&a), Ok(200));
        assert!(allocated_set(&a[..8]).is_err());
    }

    #[test]
    fn extensions_fit_the_reserved_tails() {
        let q = Q_COUNTER_EXT_BIT + ferroverbs_q_counter_ext::LAYOUT.size_bits;
        assert_eq!(q, query_q_counter_out::LAYOUT.size_bits);
        let last = query_q_counter_out::roce_slow_restart_trans;
        assert!(last.bit + last.width <= Q_COUNTER_EXT_BIT);
        let v = VPORT_COUNTER_EXT_BIT + ferroverbs_vport_counter_ext::LAYOUT.size_bits;
        assert_eq!(v, query_vport_counter_out::LAYOUT.size_bits);
        let last = query_vport_counter_out::transmitted_eth_multicast;
        assert!(last.bit + last.width <= VPORT_COUNTER_EXT_BIT);
    }
}

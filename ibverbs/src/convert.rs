//! Conversions between the verbs ABI values and the driver's types (no pointers here:
//! everything in this module is safe code on values).

use std::ffi::c_char;

use ferroverbs::verbs::{
    AccessFlags, AddressVector, Error as VerbsError, QpAttr, QpCap, QpInfo, QpState, WorkCompletion,
};
use ferroverbs::{AtomicCap, DeviceAttr, Error as CtrlError, LinkLayer, Mtu, PortAttr, PortState};
use ferroverbs_sim::link::udp::{addr_of_gid, mac_for};

use crate::abi::{self, c};

/// The `vendor_part_id` reported: 4119, a ConnectX-5 (PCI device id 0x1017, the part
/// the simulator models; Linux `mlx5_core` and `ibv_devinfo` report the same), so that
/// programs that key features on the part use what a ConnectX-5 offers: perftest
/// posts through the `ibv_wr_*` API (`ibv_wr* API : ON`) and sends small messages
/// inline, as on the hardware.
pub const VENDOR_PART_ID: u32 = 4119;

/// The shortest local ACK timeout exponent a QP on a simulated NIC gets: 18, 4.096 µs ×
/// 2^18 ≈ 1.07 s. The simulated NIC's threads share the CPU with the applications (and
/// everything else on the machine): descheduled for longer than a hardware NIC ever
/// is, a peer may not acknowledge within the 67 ms of the usual exponent 14 although no
/// packet was lost, and seven such spurious timeouts in a row fail the QP with
/// `IBV_WC_RETRY_EXC_ERR`. Loss on the loopback link is rare, so a longer timer costs
/// little. (`ibv_query_qp` reports the exponent in use; `FERROVERBS_MIN_ACK_TIMEOUT`
/// replaces this floor, [`crate::device::parse_min_ack_timeout`].)
pub const SIM_MIN_ACK_TIMEOUT: u8 = 18;

/// `enum ibv_qp_state` of a driver state.
pub fn qp_state_to_ibv(s: QpState) -> u32 {
    match s {
        QpState::Reset => 0,
        QpState::Init => 1,
        QpState::Rtr => 2,
        QpState::Rts => 3,
        QpState::Sqd => 4,
        QpState::Sqe => 5,
        QpState::Err => 6,
    }
}

/// The driver state of an `enum ibv_qp_state`.
pub fn qp_state_from_ibv(s: u32) -> Option<QpState> {
    Some(match s {
        0 => QpState::Reset,
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Sqd,
        5 => QpState::Sqe,
        6 => QpState::Err,
        _ => return None,
    })
}

/// `enum ibv_mtu` of an MTU (the IB encoding the driver's [`Mtu`] carries; the other
/// way is [`Mtu::from_ib`]).
pub fn mtu_to_ibv(m: Mtu) -> u32 {
    m as u32
}

/// The errno of a driver error: EINVAL for what the caller asked wrongly, ENOMEM when a
/// limit is exceeded, EIO when the device failed.
pub fn errno_of(e: &VerbsError) -> i32 {
    match e {
        VerbsError::Device(CtrlError::InvalidArgument { .. }) => libc::EINVAL,
        VerbsError::Device(_) => libc::EIO,
        VerbsError::CapExceeded { .. } => libc::ENOMEM,
        VerbsError::CqInUse { .. } => libc::EBUSY,
        // `mlx5r_umr_post_send_wait`: a UMR that completed in error is EFAULT; one
        // that never completed, the device's failure (EIO).
        VerbsError::UmrFailed { .. } => libc::EFAULT,
        VerbsError::UmrTimeout { .. } => libc::EIO,
        _ => libc::EINVAL,
    }
}

/// The errno of a failed `ibv_create_cq`: more entries than `max_cqe` is EINVAL (as
/// mlx5 answers it: the size is an invalid argument, not a shortage of memory); the
/// rest as [`errno_of`].
pub fn create_cq_errno(e: &VerbsError) -> i32 {
    match e {
        VerbsError::CapExceeded { .. } => libc::EINVAL,
        e => errno_of(e),
    }
}

/// The errno of a failed `ibv_resize_cq`, as Linux `mlx5_ib_resize_cq` answers: a
/// size out of range or below the completions not yet polled is EINVAL, and so is a
/// resize the firmware refused with a bad parameter or resource state
/// (`mlx5_cmd_check`); the rest as [`errno_of`].
pub fn resize_cq_errno(e: &VerbsError) -> i32 {
    use ferroverbs::CmdStatus;
    match e {
        VerbsError::CapExceeded { .. } | VerbsError::CqResizeBelowUnpolled { .. } => libc::EINVAL,
        VerbsError::Device(CtrlError::Cmd(c))
            if matches!(
                c.status,
                CmdStatus::BadParam | CmdStatus::BadResState | CmdStatus::BadResource
            ) =>
        {
            libc::EINVAL
        }
        VerbsError::CqResizeLost { .. } => libc::EIO,
        e => errno_of(e),
    }
}

/// The driver's access flags of `ibv_access_flags`, or EINVAL for flags this library
/// cannot honour (zero-based, on-demand paging, ...). Optional-range hints (relaxed
/// ordering) and `MW_BIND`/`HUGETLB` are accepted and have no effect.
pub fn access_from_ibv(bits: u32) -> Result<AccessFlags, i32> {
    let ignored = c::IBV_ACCESS_OPTIONAL_RANGE | c::IBV_ACCESS_MW_BIND | c::IBV_ACCESS_HUGETLB;
    if bits & !(c::IBV_ACCESS_BASIC | ignored) != 0 {
        return Err(libc::EINVAL);
    }
    AccessFlags::from_bits(bits & c::IBV_ACCESS_BASIC).ok_or(libc::EINVAL)
}

/// The MAC of a peer on the simulated link (derived from its IPv4-mapped GID), or
/// from the host's neighbour table for a VFIO NIC ([`ferroverbs::neighbour`]).
pub fn dmac_for_gid(gid: &[u8; 16]) -> Option<[u8; 6]> {
    let ip = addr_of_gid(gid)?;
    Some(ferroverbs::neighbour::arp_mac(ip).unwrap_or_else(|| mac_for(ip)))
}

/// The driver's QP attributes of an `ibv_qp_attr` and its mask, and the target state.
/// A local ACK timeout other than 0 (no timer) is raised to at least `min_timeout`
/// (the NIC's floor, [`SIM_MIN_ACK_TIMEOUT`] on a simulated one, 0 on hardware).
pub fn qp_attr_from_ibv(
    a: &abi::ibv_qp_attr,
    mask: i32,
    current: QpState,
    sim_link: bool,
    min_timeout: u8,
) -> Result<(QpState, QpAttr), i32> {
    let to = if mask & c::IBV_QP_STATE != 0 {
        qp_state_from_ibv(a.qp_state).ok_or(libc::EINVAL)?
    } else {
        current
    };
    let unsupported = c::IBV_QP_ALT_PATH | c::IBV_QP_PATH_MIG_STATE | c::IBV_QP_RATE_LIMIT;
    if mask & unsupported != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let mut q = QpAttr::new();
    if mask & c::IBV_QP_PKEY_INDEX != 0 {
        q = q.pkey_index(a.pkey_index);
    }
    if mask & c::IBV_QP_PORT != 0 {
        q = q.port(a.port_num);
    }
    if mask & c::IBV_QP_ACCESS_FLAGS != 0 {
        // The QP's access flags are the remote ones.
        q = q.access(access_from_ibv(a.qp_access_flags)?.remote());
    }
    if mask & c::IBV_QP_AV != 0 {
        q = q.av(av_from_ibv(&a.ah_attr, sim_link)?);
    }
    if mask & c::IBV_QP_QKEY != 0 {
        q = q.qkey(a.qkey);
    }
    if mask & c::IBV_QP_PATH_MTU != 0 {
        q = q.path_mtu(Mtu::from_ib(a.path_mtu).ok_or(libc::EINVAL)?);
    }
    if mask & c::IBV_QP_DEST_QPN != 0 {
        q = q.dest_qpn(a.dest_qp_num);
    }
    if mask & c::IBV_QP_RQ_PSN != 0 {
        q = q.rq_psn(a.rq_psn & 0xff_ffff);
    }
    if mask & c::IBV_QP_MAX_DEST_RD_ATOMIC != 0 {
        q = q.max_dest_rd_atomic(a.max_dest_rd_atomic);
    }
    if mask & c::IBV_QP_MIN_RNR_TIMER != 0 {
        q = q.min_rnr_timer(a.min_rnr_timer);
    }
    if mask & c::IBV_QP_SQ_PSN != 0 {
        q = q.sq_psn(a.sq_psn & 0xff_ffff);
    }
    if mask & c::IBV_QP_TIMEOUT != 0 {
        let t = if a.timeout != 0 {
            a.timeout.max(min_timeout)
        } else {
            a.timeout
        };
        q = q.timeout(t);
    }
    if mask & c::IBV_QP_RETRY_CNT != 0 {
        q = q.retry_cnt(a.retry_cnt);
    }
    if mask & c::IBV_QP_RNR_RETRY != 0 {
        q = q.rnr_retry(a.rnr_retry);
    }
    if mask & c::IBV_QP_MAX_QP_RD_ATOMIC != 0 {
        q = q.max_rd_atomic(a.max_rd_atomic);
    }
    Ok((to, q))
}

/// The driver's address vector of an `ibv_ah_attr`: RoCE needs its global route (the
/// destination GID carries the peer's IP address; without it, EINVAL). The peer's MAC
/// follows from its IPv4-mapped GID on the simulated link (`sim_link`), or from the
/// kernel's neighbour table.
pub fn av_from_ibv(ah: &abi::ibv_ah_attr, sim_link: bool) -> Result<AddressVector, i32> {
    if ah.is_global == 0 {
        return Err(libc::EINVAL);
    }
    let dgid = ah.grh.dgid;
    let dmac = if sim_link {
        addr_of_gid(&dgid).map(mac_for)
    } else {
        dmac_for_gid(&dgid)
    }
    .ok_or(libc::EINVAL)?;
    let mut av = AddressVector::new(dgid, dmac, ah.grh.sgid_index);
    if ah.grh.hop_limit > 1 {
        av.hop_limit = ah.grh.hop_limit;
    }
    av.traffic_class = ah.grh.traffic_class;
    av.flow_label = ah.grh.flow_label & 0xf_ffff;
    av.sl = ah.sl & 7;
    Ok(av)
}

/// `ibv_qp_cap` of the driver's.
pub fn cap_to_ibv(c: &QpCap) -> abi::ibv_qp_cap {
    abi::ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// `ibv_qp_attr` of what `QUERY_QP` reported.
pub fn qp_info_to_ibv(i: &QpInfo) -> abi::ibv_qp_attr {
    let mut a = abi::ibv_qp_attr {
        qp_state: qp_state_to_ibv(i.state),
        cur_qp_state: qp_state_to_ibv(i.state),
        path_mtu: i.path_mtu.map(mtu_to_ibv).unwrap_or(0),
        rq_psn: i.rq_psn,
        sq_psn: i.sq_psn,
        dest_qp_num: i.dest_qpn,
        qp_access_flags: i.access.bits(),
        cap: cap_to_ibv(&i.cap),
        pkey_index: i.pkey_index,
        max_rd_atomic: i.max_rd_atomic,
        max_dest_rd_atomic: i.max_dest_rd_atomic,
        min_rnr_timer: i.min_rnr_timer,
        port_num: i.port,
        timeout: i.timeout,
        retry_cnt: i.retry_cnt,
        rnr_retry: i.rnr_retry,
        qkey: i.qkey,
        ..Default::default()
    };
    a.ah_attr.grh.dgid = i.av.dgid;
    a.ah_attr.grh.sgid_index = i.av.sgid_index;
    a.ah_attr.grh.hop_limit = i.av.hop_limit;
    a.ah_attr.grh.traffic_class = i.av.traffic_class;
    a.ah_attr.grh.flow_label = i.av.flow_label;
    a.ah_attr.sl = i.av.sl;
    a.ah_attr.is_global = u8::from(i.av.dgid != [0; 16]);
    a.ah_attr.port_num = i.port;
    a
}

/// `ibv_wc` of a completion.
pub const fn wc_to_ibv(w: &WorkCompletion) -> abi::ibv_wc {
    abi::ibv_wc {
        wr_id: w.wr_id,
        status: w.status as u32,
        opcode: w.opcode as u32,
        vendor_err: w.vendor_err as u32,
        byte_len: w.byte_len,
        // The immediate in network order; for a SEND with Invalidate the invalidated
        // key, in host order (rdma-core mlx5 `handle_responder`: `invalidated_rkey =
        // be32toh(imm_inval_pkey)`).
        imm_data: if w.wc_flags.contains(ferroverbs::verbs::WcFlags::WITH_INV) {
            w.imm_data
        } else {
            w.imm_data.to_be()
        },
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags.bits(),
        pkey_index: 0,
        slid: 0,
        sl: w.sl,
        dlid_path_bits: 0,
    }
}

fn clamp(v: u32) -> i32 {
    v.min(i32::MAX as u32) as i32
}

/// Copies `s` into a C string field, NUL-terminated and truncated to fit.
pub fn set_cstr(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = b as c_char;
    }
    if let Some(d) = dst.get_mut(n) {
        *d = 0;
    }
}

/// `ibv_device_attr` of the driver's device attributes.
pub fn device_attr_to_ibv(d: &DeviceAttr) -> abi::ibv_device_attr {
    let mut fw = [0 as c_char; 64];
    set_cstr(&mut fw, &d.fw_ver.to_string());
    abi::ibv_device_attr {
        fw_ver: fw,
        node_guid: d.node_guid.to_be(),
        sys_image_guid: d.sys_image_guid.to_be(),
        max_mr_size: d.max_mr_size,
        page_size_cap: d.page_size_cap,
        vendor_id: d.vendor_id,
        vendor_part_id: VENDOR_PART_ID,
        hw_ver: 0,
        max_qp: clamp(d.max_qp),
        max_qp_wr: clamp(d.max_qp_wr),
        device_cap_flags: c::IBV_DEVICE_RC_RNR_NAK_GEN,
        max_sge: clamp(d.max_sge),
        max_sge_rd: clamp(d.max_sge_rd),
        max_cq: clamp(d.max_cq),
        max_cqe: clamp(d.max_cqe),
        max_mr: clamp(d.max_mr),
        max_pd: clamp(d.max_pd),
        max_qp_rd_atom: clamp(d.max_qp_rd_atom),
        max_ee_rd_atom: 0,
        max_res_rd_atom: clamp(d.max_qp_rd_atom.saturating_mul(d.max_qp.min(1 << 16))),
        max_qp_init_rd_atom: clamp(d.max_qp_init_rd_atom),
        max_ee_init_rd_atom: 0,
        atomic_cap: match d.atomic_cap {
            AtomicCap::Hca => c::IBV_ATOMIC_HCA,
            AtomicCap::None => 0,
        },
        max_ee: 0,
        max_rdd: 0,
        // Memory windows are mkeys as memory regions are (rdma-core mlx5 reports
        // `max_mw` from `log_max_mkey` too).
        max_mw: clamp(d.max_mr),
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        max_mcast_grp: clamp(d.max_mcast_grp),
        max_mcast_qp_attach: clamp(d.max_mcast_qp_attach),
        max_total_mcast_qp_attach: clamp(d.max_mcast_grp.saturating_mul(d.max_mcast_qp_attach)),
        max_ah: i32::MAX,
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: clamp(d.max_srq),
        max_srq_wr: clamp(d.max_srq_wr),
        max_srq_sge: clamp(d.max_srq_sge),
        max_pkeys: 1,
        local_ca_ack_delay: d.local_ca_ack_delay,
        phys_port_cnt: d.phys_port_cnt.max(1),
    }
}

/// `ibv_port_attr` of the driver's port attributes.
pub fn port_attr_to_ibv(p: &PortAttr) -> abi::ibv_port_attr {
    let eth = p.link_layer == LinkLayer::Ethernet;
    abi::ibv_port_attr {
        state: match p.state {
            PortState::Active => c::IBV_PORT_ACTIVE,
            PortState::Down => c::IBV_PORT_DOWN,
            PortState::Other(v) => u32::from(v),
        },
        max_mtu: mtu_to_ibv(p.max_mtu),
        active_mtu: mtu_to_ibv(p.active_mtu),
        gid_tbl_len: clamp(p.gid_tbl_len),
        port_cap_flags: if eth { c::IBV_PORT_IP_BASED_GIDS } else { 0 },
        max_msg_sz: p.max_msg_sz.min(u64::from(u32::MAX)) as u32,
        bad_pkey_cntr: 0,
        qkey_viol_cntr: 0,
        pkey_tbl_len: 1,
        lid: 0,
        sm_lid: 0,
        lmc: 0,
        max_vl_num: 1,
        sm_sl: 0,
        subnet_timeout: 0,
        init_type_reply: 0,
        // 4X at 25 Gb/s (EDR): what a ConnectX-5 port reports.
        active_width: 2,
        active_speed: 32,
        phys_state: if p.state == PortState::Active { 5 } else { 3 },
        link_layer: if eth {
            c::IBV_LINK_LAYER_ETHERNET
        } else {
            c::IBV_LINK_LAYER_INFINIBAND
        },
        flags: 0,
        port_cap_flags2: 0,
    }
}

/// `ibv_wc_status_str`'s strings (rdma-core `libibverbs/enum_strs.c` wording).
pub fn wc_status_str(status: u32) -> &'static std::ffi::CStr {
    const S: [&std::ffi::CStr; 23] = [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
    ];
    S.get(status as usize).copied().unwrap_or(c"unknown")
}

/// `ibv_node_type_str`'s strings.
pub fn node_type_str(t: i32) -> &'static std::ffi::CStr {
    match t {
        1 => c"InfiniBand channel adapter",
        2 => c"InfiniBand switch",
        3 => c"InfiniBand router",
        4 => c"iWARP NIC",
        5 => c"usNIC",
        6 => c"usNIC UDP",
        7 => c"unspecified",
        _ => c"unknown",
    }
}

/// `ibv_port_state_str`'s strings.
pub fn port_state_str(s: u32) -> &'static std::ffi::CStr {
    match s {
        0 => c"PORT_NOP",
        1 => c"PORT_DOWN",
        2 => c"PORT_INIT",
        3 => c"PORT_ARMED",
        4 => c"PORT_ACTIVE",
        5 => c"PORT_ACTIVE_DEFER",
        _ => c"invalid state",
    }
}

/// `ibv_event_type_str`'s strings.
pub fn event_type_str(e: u32) -> &'static std::ffi::CStr {
    const S: [&std::ffi::CStr; 20] = [
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    S.get(e as usize).copied().unwrap_or(c"unknown")
}

/// `ibv_rate_to_mult`: the multiple of 2.5 Gb/s of an `enum ibv_rate`.
pub fn rate_to_mult(rate: i32) -> i32 {
    match rate {
        2 => 1,
        5 => 2,
        3 => 4,
        6 => 6,
        4 => 8,
        7 => 12,
        8 => 16,
        9 => 24,
        _ => -1,
    }
}

/// `mult_to_ibv_rate`.
pub fn mult_to_rate(mult: i32) -> i32 {
    match mult {
        1 => 2,
        2 => 5,
        4 => 3,
        6 => 6,
        8 => 4,
        12 => 7,
        16 => 8,
        24 => 9,
        _ => 0,
    }
}

/// `ibv_rate_to_mbps`: Mb/s of an `enum ibv_rate`.
pub fn rate_to_mbps(rate: i32) -> i32 {
    const M: [i32; 23] = [
        -1, -1, 2500, 10000, 20000, 5000, 15000, 30000, 40000, 60000, 80000, 120000, 14062, 56250,
        112500, 168750, 25781, 103125, 206250, 309375, 50000, 400000, 600000,
    ];
    usize::try_from(rate)
        .ok()
        .and_then(|i| M.get(i).copied())
        .unwrap_or(-1)
}

/// `mbps_to_ibv_rate`.
pub fn mbps_to_rate(mbps: i32) -> i32 {
    (2..23).find(|&r| rate_to_mbps(r) == mbps).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_and_mtus_round_trip() {
        for v in 0..7 {
            assert_eq!(qp_state_to_ibv(qp_state_from_ibv(v).unwrap()), v);
        }
        assert!(qp_state_from_ibv(7).is_none());
        for v in 1..=5 {
            assert_eq!(mtu_to_ibv(Mtu::from_ib(v).unwrap()), v);
        }
        assert!(Mtu::from_ib(0).is_none());
        assert!(Mtu::from_ib(6).is_none());
    }

    #[test]
    fn perftest_access_flags_are_accepted() {
        // perftest ORs in IBV_ACCESS_RELAXED_ORDERING.
        let a = access_from_ibv(0x100009).unwrap();
        assert!(a.contains(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC));
        assert_eq!(access_from_ibv(0x20), Err(libc::EINVAL)); // zero-based
        assert_eq!(access_from_ibv(0x40), Err(libc::EINVAL)); // on demand
    }

    #[test]
    fn rc_pingpong_rtr_converts() {
        let mut a = abi::ibv_qp_attr {
            qp_state: 2,
            path_mtu: 3,
            dest_qp_num: 0x1234,
            rq_psn: 0x1ab_cdef,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ..Default::default()
        };
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = ferroverbs_sim::link::udp::gid_for([127, 0, 0, 2].into());
        a.ah_attr.grh.hop_limit = 1;
        a.ah_attr.port_num = 1;
        let (to, q) = qp_attr_from_ibv(&a, 0x129181, QpState::Init, true, 18).unwrap();
        assert_eq!(to, QpState::Rtr);
        assert_eq!(q.dest_qpn, Some(0x1234));
        assert_eq!(q.rq_psn, Some(0xab_cdef));
        assert_eq!(q.path_mtu, Some(Mtu::Mtu1024));
        let av = q.av.unwrap();
        assert_eq!(av.dmac, [2, 0, 127, 0, 0, 2]);
        // RTS: the ACK timeout of a simulated NIC is at least SIM_MIN_ACK_TIMEOUT.
        let rts = abi::ibv_qp_attr {
            qp_state: 3,
            timeout: 14,
            ..Default::default()
        };
        let floor = SIM_MIN_ACK_TIMEOUT;
        let (_, q) = qp_attr_from_ibv(&rts, 0x201, QpState::Rtr, true, floor).unwrap();
        assert_eq!(q.timeout, Some(SIM_MIN_ACK_TIMEOUT));
        let (_, q) = qp_attr_from_ibv(&rts, 0x201, QpState::Rtr, false, 0).unwrap();
        assert_eq!(q.timeout, Some(14));
        // FERROVERBS_MIN_ACK_TIMEOUT's floor: raised to it, a longer value kept, 0
        // (no timer) kept.
        let (_, q) = qp_attr_from_ibv(&rts, 0x201, QpState::Rtr, true, 23).unwrap();
        assert_eq!(q.timeout, Some(23));
        let long = abi::ibv_qp_attr { timeout: 25, ..rts };
        let (_, q) = qp_attr_from_ibv(&long, 0x201, QpState::Rtr, true, 23).unwrap();
        assert_eq!(q.timeout, Some(25));
        let none = abi::ibv_qp_attr { timeout: 0, ..rts };
        let (_, q) = qp_attr_from_ibv(&none, 0x201, QpState::Rtr, true, 23).unwrap();
        assert_eq!(q.timeout, Some(0));
        assert_eq!(av.hop_limit, 64);
        a.ah_attr.is_global = 0;
        assert_eq!(
            qp_attr_from_ibv(&a, 0x129181, QpState::Init, true, 18).unwrap_err(),
            libc::EINVAL
        );
    }

    #[test]
    fn strings() {
        assert_eq!(wc_status_str(0).to_str().unwrap(), "success");
        assert_eq!(
            wc_status_str(12).to_str().unwrap(),
            "transport retry counter exceeded"
        );
        assert_eq!(wc_status_str(99).to_str().unwrap(), "unknown");
        assert_eq!(port_state_str(4).to_str().unwrap(), "PORT_ACTIVE");
        assert_eq!(rate_to_mbps(mbps_to_rate(25781)), 25781);
        assert_eq!(mult_to_rate(rate_to_mult(7)), 7);
    }
}

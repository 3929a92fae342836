//! What the opcode-family examples share: two simulated NICs on an in-process fabric
//! (deterministic mode), opened through the driver, and a connected pair of RC QPs.
#![allow(dead_code)]

use ferroverbs::verbs::{
    AccessFlags, AddressVector, CompletionQueue, Mtu, QueuePair, RtrAttr, RtsAttr, WorkCompletion,
};
use ferroverbs::{Context, Device, DeviceConfig, GidEntry};
use ferroverbs_sim::{Fabric, Sim, SimBus, SimConfig};

/// The fabric and the two NICs.
pub struct Net {
    pub fabric: Fabric,
    pub a: Sim,
    pub b: Sim,
}

/// Two deterministic NICs on one fabric.
pub fn net() -> Net {
    net_with(false)
}

/// Two NICs on one fabric, deterministic (stepped by the fabric) or `threaded`.
pub fn net_with(threaded: bool) -> Net {
    let cfg = |seed| {
        if threaded {
            SimConfig::threaded(seed, 1)
        } else {
            SimConfig::deterministic(seed, 1)
        }
    };
    let fabric = Fabric::new(1);
    let a = Sim::new(cfg(11));
    let b = Sim::new(cfg(22));
    fabric.attach(&a);
    fabric.attach(&b);
    Net { fabric, a, b }
}

/// Opens NIC `n` with the RoCE v2 GID 10.0.0.n.
pub fn open(sim: &Sim, n: u8) -> (Context<SimBus>, GidEntry) {
    let gid = GidEntry::ipv4(0, [10, 0, 0, n], sim.port_macs()[0]);
    let clock = sim.clock().clone();
    let cfg = DeviceConfig::default()
        .with_clock(std::sync::Arc::new(ferroverbs::SteppedClock::new(
            {
                let c = clock.clone();
                move || c.now()
            },
            move |d| clock.advance(d),
        )))
        .with_gid(gid);
    (Device::open(sim.bus(), cfg).expect("bring-up"), gid)
}

/// Connects `qa` and `qb` (RESET → INIT → RTR → RTS on both) with remote `access`.
pub fn connect(
    qa: &mut QueuePair<'_, SimBus>,
    ga: &GidEntry,
    qb: &mut QueuePair<'_, SimBus>,
    gb: &GidEntry,
    access: AccessFlags,
) {
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    to_rts(qa, gb, nb, (0x200, 0x100), access);
    to_rts(qb, ga, na, (0x100, 0x200), access);
}

/// RESET → INIT → RTR → RTS towards QP `peer_qpn` at `peer`; `psn` = (expected,
/// first sent).
pub fn to_rts(
    q: &mut QueuePair<'_, SimBus>,
    peer: &GidEntry,
    peer_qpn: u32,
    psn: (u32, u32),
    access: AccessFlags,
) {
    q.to_init(1, access).expect("INIT");
    q.to_rtr(&RtrAttr {
        max_dest_rd_atomic: 4,
        ..rtr_attr(peer, peer_qpn, psn.0)
    })
    .expect("RTR");
    q.to_rts(&RtsAttr {
        max_rd_atomic: 4,
        ..RtsAttr::new(psn.1)
    })
    .expect("RTS");
}

/// The RTR attributes the examples use toward `peer`'s QP `peer_qpn`: path MTU 1024,
/// one RDMA READ / atomic in flight, the shortest RNR timer, expected PSN `rq_psn`.
pub fn rtr_attr(peer: &GidEntry, peer_qpn: u32, rq_psn: u32) -> RtrAttr {
    RtrAttr {
        av: AddressVector::new(peer.gid, peer.mac, 0),
        path_mtu: Mtu::Mtu1024,
        dest_qpn: peer_qpn,
        rq_psn,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 1,
    }
}

/// RESET → INIT → RTR → RTS towards QP `peer_qpn` at `peer` for SENDs: no remote
/// access, one RDMA READ / atomic in flight each way; `psn` = (expected, first sent).
pub fn to_rts_send(q: &mut QueuePair<'_, SimBus>, peer: &GidEntry, peer_qpn: u32, psn: (u32, u32)) {
    q.to_init(1, AccessFlags::empty()).expect("INIT");
    q.to_rtr(&rtr_attr(peer, peer_qpn, psn.0)).expect("RTR");
    q.to_rts(&RtsAttr::new(psn.1)).expect("RTS");
}

/// Runs the fabric and polls `cq` until one completion arrives.
pub fn wait(net: &Net, cq: &mut CompletionQueue<'_, SimBus>) -> WorkCompletion {
    let mut wc = [WorkCompletion::default(); 1];
    loop {
        net.fabric.run_until_idle();
        if cq.poll(&mut wc) == 1 {
            return wc[0];
        }
    }
}

//! Shared helpers of the verbs tests: simulated devices, contexts on their virtual
//! clocks, a connected pair of RC QPs, and the leak check.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use ferroverbs::verbs::{AddressVector, Mtu, RtrAttr, RtsAttr};
use ferroverbs::{Clock, Context, Device, DeviceConfig, GidEntry};
use ferroverbs_sim::{Sim, SimBus, SimConfig};

/// A deterministic (virtual-time) single-port device.
pub fn sim() -> Sim {
    Sim::new(SimConfig::deterministic(0x5eed, 1))
}

/// The driver's clock reading the device's virtual time, which the driver's waits
/// move on (in 100 µs steps while the firmware boots).
pub fn vclock(sim: &Sim) -> Arc<dyn Clock> {
    let (now, time) = (sim.clock().clone(), sim.clock().clone());
    Arc::new(ferroverbs::SteppedClock::new(
        move || now.now(),
        move |d| time.advance(d),
    ))
}

/// The GID of NIC `n` (index 0 of its table): 10.0.0.n, MAC 02:00:00:00:00:n.
pub fn gid(n: u8) -> GidEntry {
    GidEntry::ipv4(0, [10, 0, 0, n], [0x02, 0, 0, 0, 0, n])
}

/// A configuration on the device's virtual time with the GID of NIC `n`.
pub fn config(sim: &Sim, n: u8) -> DeviceConfig {
    DeviceConfig {
        cmd_timeout: Duration::from_millis(200),
        init_timeout: Duration::from_secs(1),
        health_period: Duration::from_millis(500),
        ..DeviceConfig::default()
    }
    .with_clock(vclock(sim))
    .with_gid(gid(n))
}

/// Opens NIC `n` on `sim`.
pub fn open(sim: &Sim, n: u8) -> Context<SimBus> {
    Device::open(sim.bus(), config(sim, n)).expect("bring-up")
}

/// The path from any NIC to NIC `n`.
pub fn av_to(n: u8) -> AddressVector {
    let g = gid(n);
    AddressVector::new(g.gid, g.mac, 0)
}

/// INIT→RTR attributes towards QP `dest_qpn` of NIC `n`.
pub fn rtr(n: u8, dest_qpn: u32, mtu: Mtu) -> RtrAttr {
    RtrAttr {
        av: av_to(n),
        path_mtu: mtu,
        dest_qpn,
        rq_psn: 0x100,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 12,
    }
}

/// RTR→RTS attributes.
pub fn rts() -> RtsAttr {
    RtsAttr {
        max_rd_atomic: 4,
        ..RtsAttr::new(0x100)
    }
}

/// Asserts that nothing is left on the device or in the IOMMU.
#[track_caller]
pub fn assert_nothing_left(sim: &Sim) {
    let s = sim.stats();
    assert_eq!(s.mappings, 0, "IOVA mappings left: {s:?}");
    assert_eq!(s.pages_held, 0, "firmware pages left: {s:?}");
    assert_eq!(s.objects.total(), 0, "objects left: {s:?}");
}

/// Two simulated NICs on an in-process fabric.
pub struct Net {
    /// The fabric.
    pub fabric: ferroverbs_sim::Fabric,
    /// NIC 1.
    pub a: Sim,
    /// NIC 2.
    pub b: Sim,
}

impl Net {
    /// Two deterministic (virtual time, stepped) or threaded NICs.
    pub fn new(threaded: bool) -> Net {
        let cfg = |seed| {
            if threaded {
                SimConfig::threaded(seed, 1)
            } else {
                SimConfig::deterministic(seed, 1)
            }
        };
        let fabric = ferroverbs_sim::Fabric::new(0xfab);
        let a = Sim::new(cfg(0xa1));
        let b = Sim::new(cfg(0xb2));
        fabric.attach(&a);
        fabric.attach(&b);
        Net { fabric, a, b }
    }

    /// Lets the fabric deliver what is in flight (deterministic mode; in threaded
    /// mode the devices progress alone and this only runs what is queued).
    pub fn settle(&self) {
        self.fabric.run_until_idle();
    }
}

/// The RoCE v2 GID of NIC `n` (10.0.0.n) with the simulated port's MAC.
pub fn nic_gid(sim: &Sim, n: u8) -> GidEntry {
    GidEntry::ipv4(0, [10, 0, 0, n], sim.port_macs()[0])
}

/// Opens NIC `n` with its GID at index 0.
pub fn open_nic(sim: &Sim, n: u8) -> (Context<SimBus>, GidEntry) {
    let g = nic_gid(sim, n);
    let cfg = DeviceConfig {
        cmd_timeout: Duration::from_secs(5),
        init_timeout: Duration::from_secs(5),
        health_period: Duration::from_secs(1),
        ..DeviceConfig::default()
    }
    .with_clock(vclock(sim))
    .with_gid(g);
    (Device::open(sim.bus(), cfg).expect("bring-up"), g)
}

/// An opened NIC and its GID ([`open_nic`]).
pub type Nic = (Context<SimBus>, GidEntry);

/// Two NICs on a fabric ([`Net::new`]), opened as NIC 1 and NIC 2 ([`open_nic`]).
pub fn two_nics(threaded: bool) -> (Net, Nic, Nic) {
    let net = Net::new(threaded);
    let a = open_nic(&net.a, 1);
    let b = open_nic(&net.b, 2);
    (net, a, b)
}

/// Takes `qa` (whose peer is `gb`) and `qb` (peer `ga`) to RTS, connected to each
/// other, with every remote access enabled and the path MTU `mtu`.
pub fn connect<B: ferroverbs_hw::Bus>(
    qa: &mut ferroverbs::verbs::QueuePair<'_, B>,
    ga: &GidEntry,
    qb: &mut ferroverbs::verbs::QueuePair<'_, B>,
    gb: &GidEntry,
    mtu: Mtu,
) {
    use ferroverbs::verbs::AccessFlags as A;
    let all = A::REMOTE_READ | A::REMOTE_WRITE | A::REMOTE_ATOMIC;
    connect_with(qa, ga, qb, gb, mtu, all);
}

/// As [`connect`], with the remote access rights `access` on both QPs.
pub fn connect_with<B: ferroverbs_hw::Bus>(
    qa: &mut ferroverbs::verbs::QueuePair<'_, B>,
    ga: &GidEntry,
    qb: &mut ferroverbs::verbs::QueuePair<'_, B>,
    gb: &GidEntry,
    mtu: Mtu,
    access: ferroverbs::verbs::AccessFlags,
) {
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    to_rts(qa, gb, nb, 0x200, 0x100, mtu, access);
    to_rts(qb, ga, na, 0x100, 0x200, mtu, access);
}

/// The ACK timeout exponent for RC QPs on real-time devices (threaded mode, or the
/// UDP link) over a loss-free link (the in-process fabric without impairments, UDP
/// loopback) in tests that need no timeout to recover: 4.096 µs × 2^23 = 34 s. A QP's
/// ACK timer runs on real time while the threads that would deliver its ACK (the
/// peer's device thread, its own, a stepping test thread) wait for a CPU; with the
/// default 14 (67 ms), a thread descheduled for 100 ms on a loaded 2-core machine
/// fires it spuriously (a retransmission, which counters show), and eight in a row
/// exhaust `retry_cnt` 7 and fail the WR. At 34 s: where a test counts timeouts or
/// retransmissions (udp_link), it waits at most 20 s for any completion, so the timer
/// cannot fire before the test has failed on its own hang guard; elsewhere (guards of
/// 60 s) one expiry would only retransmit, and running the budget out takes
/// 8 × 34 s = 275 s without the peer answering.
pub const REAL_TIME_ACK_TIMEOUT: u8 = 23;

/// [`connect`] with the ACK timeout exponent `timeout` on both QPs (e.g.
/// [`REAL_TIME_ACK_TIMEOUT`]).
pub fn connect_timeout<B: ferroverbs_hw::Bus>(
    qa: &mut ferroverbs::verbs::QueuePair<'_, B>,
    ga: &GidEntry,
    qb: &mut ferroverbs::verbs::QueuePair<'_, B>,
    gb: &GidEntry,
    mtu: Mtu,
    timeout: u8,
) {
    use ferroverbs::verbs::AccessFlags as A;
    let all = A::REMOTE_READ | A::REMOTE_WRITE | A::REMOTE_ATOMIC;
    let rts = |sq_psn| RtsAttr {
        max_rd_atomic: 4,
        timeout,
        ..RtsAttr::new(sq_psn)
    };
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    to_rts_with(qa, gb, nb, 0x200, mtu, all, &rts(0x100));
    to_rts_with(qb, ga, na, 0x100, mtu, all, &rts(0x200));
}

/// Takes `q` to RTS towards QP `peer_qpn` at `peer`.
#[allow(clippy::too_many_arguments)]
pub fn to_rts<B: ferroverbs_hw::Bus>(
    q: &mut ferroverbs::verbs::QueuePair<'_, B>,
    peer: &GidEntry,
    peer_qpn: u32,
    rq_psn: u32,
    sq_psn: u32,
    mtu: Mtu,
    access: ferroverbs::verbs::AccessFlags,
) {
    let rts = RtsAttr {
        max_rd_atomic: 4,
        ..RtsAttr::new(sq_psn)
    };
    to_rts_with(q, peer, peer_qpn, rq_psn, mtu, access, &rts);
}

/// Takes `q` from RESET to RTS towards QP `peer_qpn` at `peer` (every remote right,
/// MTU 1024) with these reliability attributes.
#[allow(clippy::too_many_arguments)]
pub fn to_rts_reliable<B: ferroverbs_hw::Bus>(
    q: &mut ferroverbs::verbs::QueuePair<'_, B>,
    peer: &GidEntry,
    peer_qpn: u32,
    rq_psn: u32,
    sq_psn: u32,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
) {
    use ferroverbs::verbs::AccessFlags as A;
    let all = A::REMOTE_READ | A::REMOTE_WRITE | A::REMOTE_ATOMIC;
    let rts = RtsAttr {
        sq_psn,
        timeout,
        retry_cnt,
        rnr_retry,
        max_rd_atomic: 4,
    };
    to_rts_with(q, peer, peer_qpn, rq_psn, Mtu::Mtu1024, all, &rts);
}

/// Takes `q` from RESET to RTS towards QP `peer_qpn` at `peer` with the RTS
/// attributes `rts` (reliability: timeout, retry_cnt, rnr_retry, ...).
pub fn to_rts_with<B: ferroverbs_hw::Bus>(
    q: &mut ferroverbs::verbs::QueuePair<'_, B>,
    peer: &GidEntry,
    peer_qpn: u32,
    rq_psn: u32,
    mtu: Mtu,
    access: ferroverbs::verbs::AccessFlags,
    rts: &RtsAttr,
) {
    q.to_init(1, access).expect("INIT");
    q.to_rtr(&RtrAttr {
        av: AddressVector::new(peer.gid, peer.mac, 0),
        path_mtu: mtu,
        dest_qpn: peer_qpn,
        rq_psn,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
    })
    .expect("RTR");
    q.to_rts(rts).expect("RTS");
}

/// Takes the UC QP `q` from RESET to RTS towards QP `peer_qpn` at `peer` (remote
/// WRITE rights; no RC-only attribute: UC's RTR takes no `max_dest_rd_atomic` or
/// `min_rnr_timer`, its RTS no timeout or retry counts).
pub fn uc_to_rts<B: ferroverbs_hw::Bus>(
    q: &mut ferroverbs::verbs::QueuePair<'_, B>,
    peer: &GidEntry,
    peer_qpn: u32,
    rq_psn: u32,
    sq_psn: u32,
    mtu: Mtu,
) {
    use ferroverbs::verbs::{AccessFlags, QpAttr, QpState};
    q.to_init(1, AccessFlags::REMOTE_WRITE).expect("INIT");
    q.modify(
        QpState::Rtr,
        &QpAttr::new()
            .av(AddressVector::new(peer.gid, peer.mac, 0))
            .path_mtu(mtu)
            .dest_qpn(peer_qpn)
            .rq_psn(rq_psn),
    )
    .expect("RTR");
    q.modify(QpState::Rts, &QpAttr::new().sq_psn(sq_psn))
        .expect("RTS");
}

/// Connects the UC QPs `qa` (whose peer is `gb`) and `qb` (peer `ga`), every PSN
/// `psn`, path MTU `mtu`.
pub fn connect_uc<B: ferroverbs_hw::Bus>(
    qa: &mut ferroverbs::verbs::QueuePair<'_, B>,
    ga: &GidEntry,
    qb: &mut ferroverbs::verbs::QueuePair<'_, B>,
    gb: &GidEntry,
    mtu: Mtu,
    psn: u32,
) {
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    uc_to_rts(qa, gb, nb, psn, psn, mtu);
    uc_to_rts(qb, ga, na, psn, psn, mtu);
}

/// Takes every completion `cq` holds into `out`.
pub fn poll_all<B: ferroverbs_hw::Bus>(
    cq: &mut ferroverbs::verbs::CompletionQueue<'_, B>,
    out: &mut Vec<ferroverbs::verbs::WorkCompletion>,
) {
    let mut wc = [ferroverbs::verbs::WorkCompletion::default(); 64];
    loop {
        let k = cq.poll(&mut wc);
        out.extend_from_slice(&wc[..k]);
        if k == 0 {
            break;
        }
    }
}

/// Polls `cq` until `n` completions arrived, letting the fabric run; panics after 60 s
/// (a hang guard: a loaded 2-core machine may leave any thread without a CPU for a
/// while, and one completion never takes a minute).
pub fn wait<B: ferroverbs_hw::Bus>(
    net: &Net,
    cq: &mut ferroverbs::verbs::CompletionQueue<'_, B>,
    n: usize,
) -> Vec<ferroverbs::verbs::WorkCompletion> {
    let mut out = Vec::new();
    let mut wc = [ferroverbs::verbs::WorkCompletion::default(); 64];
    let start = std::time::Instant::now();
    while out.len() < n {
        net.settle();
        let k = cq.poll(&mut wc[..(n - out.len()).min(64)]);
        out.extend_from_slice(&wc[..k]);
        if k == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "only {} of {n} completions: {out:?}",
                out.len()
            );
            std::thread::yield_now();
        }
    }
    out
}

/// Bytes `n` of a pattern seeded with `seed`.
pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

/// Whether `fd` becomes readable within `ms` milliseconds (`poll(2)`).
#[allow(dead_code)]
pub fn readable(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, ms) == 1 }
}

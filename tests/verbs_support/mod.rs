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

/// The driver's clock reading the device's virtual time.
pub fn vclock(sim: &Sim) -> Arc<dyn Clock> {
    let c = sim.clock().clone();
    Arc::new(move || c.now())
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

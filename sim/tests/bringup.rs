//! Bring-up and teardown through the command interface, played by the test.

mod common;
use common::*;

#[test]
fn bring_up_and_tear_down_leave_nothing_behind() {
    let mut h = Host::deterministic();
    for _ in 0..3 {
        let up = h.bring_up();
        let s = h.sim.stats();
        assert!(s.pages_held > 0);
        assert_eq!(s.objects.uars, 1);
        assert_eq!(s.objects.eqs, 1);
        h.tear_down(up);
        let s = h.sim.stats();
        assert_eq!(s.pages_held, 0);
        assert_eq!(s.pages_abandoned, 0);
        assert_eq!(s.objects.total(), 0);
        assert_eq!(s.mappings, 1, "only the command queue page is left");
    }
    let sim = h.close();
    let s = sim.stats();
    assert_eq!(s.mappings, 0);
    assert_eq!(s.iommu_faults, 0);
    assert_eq!(s.delivery_errors, 0);
    assert_eq!(s.fw.failed, 0);
}

#[test]
fn a_thousand_bring_ups_in_one_process_leave_nothing_behind() {
    let mut h = Host::deterministic();
    let fd = {
        use ferroverbs_hw::Bus;
        h.bus.irq_eventfd(0).unwrap()
    };
    for _ in 0..1000 {
        let up = h.bring_up();
        h.tear_down(up);
    }
    let s = h.sim.stats();
    assert_eq!(s.pages_held, 0);
    assert_eq!(s.pages_abandoned, 0);
    assert_eq!(s.objects.total(), 0);
    assert_eq!(s.mappings, 1, "only the command queue page");
    assert_eq!(s.eventfds, 1, "one eventfd, reused");
    assert_eq!(s.delivery_errors, 0);
    assert_eq!(s.fw.failed, 0);
    assert_eq!(s.iommu_faults, 0);
    assert!(fd >= 0);
    let sim = h.close();
    assert_eq!(sim.stats().mappings, 0);
}

#[test]
fn the_bus_is_shareable_across_threads() {
    fn send_sync<T: Send + Sync + Clone + 'static>() {}
    send_sync::<ferroverbs_sim::SimBus>();
    send_sync::<ferroverbs_sim::Sim>();
    let h = Host::deterministic();
    let bus = h.bus.clone();
    let t = std::thread::spawn(move || {
        use ferroverbs_hw::Bus;
        bus.read32(ferroverbs_hw::control::iseg::CMDIF_REV_FW_SUB) >> 16
    });
    assert_eq!(t.join().unwrap(), 5);
}

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

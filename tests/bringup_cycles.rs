//! Bring-up and teardown 1,000 times in one process leave no firmware page, IOVA
//! mapping, device object or thread behind, counted through the simulator's counters.
//! (Alone in its binary so the thread count is not disturbed by other tests.)

mod bringup_support;
use bringup_support::*;

use ferroverbs::Device;
use ferroverbs_sim::firmware::HcaState;

#[test]
fn a_thousand_bring_ups_and_teardowns_leave_nothing_behind() {
    let sim = sim();
    let threads_before = threads();
    let mut pages_each = None;
    for i in 0..1000 {
        let ctx = Device::open(sim.bus(), config(&sim)).expect("bring-up");
        let s = sim.stats();
        assert!(s.pages_held > 0, "cycle {i}: firmware holds its pages");
        assert_eq!(s.pages_held as usize, ctx.pages_lent(), "cycle {i}");
        assert_eq!(s.objects.uars, 1, "cycle {i}: the driver UAR");
        assert_eq!(s.objects.eqs, 1, "cycle {i}: the async EQ");
        assert_eq!(s.objects.total(), 2, "cycle {i}");
        assert!(s.mappings > 0);
        assert_eq!(sim.hca_state(), HcaState::Initialized);
        assert!(ctx.event_mode());
        // Every cycle lends the same pages and maps the same memory.
        let shape = (s.pages_held, s.mappings, s.mapped_bytes);
        assert_eq!(*pages_each.get_or_insert(shape), shape, "cycle {i}");
        ctx.close().expect("teardown");
        assert_nothing_left(&sim);
        assert_eq!(sim.hca_state(), HcaState::Disabled, "cycle {i}");
    }
    let s = sim.stats();
    assert_eq!(s.iommu_faults, 0);
    assert_eq!(s.delivery_errors, 0);
    assert_eq!(s.fw.failed, 0, "no command failed");
    assert_eq!(s.fw.eq_overruns, 0);
    assert_eq!(s.commands_ignored, 0);
    assert_eq!(s.stray_doorbells, 0);
    assert_eq!(s.eventfds, 0);
    assert_eq!(threads(), threads_before, "no thread left behind");
}

//! The BAR0 checks `VfioBus::open` makes right after mapping BAR0
//! (`ferroverbs::vfio::check_bar0`), run against the simulator's bus.
//!
//! The check is Linux's "pre-initializing" wait (`mlx5_function_enable` polls
//! `initializing` before it programs the command queue, so real firmware clears the
//! bit first). The simulator boots for `BarConfig::boot_time` after reset (real time
//! here) and then clears the bit on its own, as real firmware does.

use std::time::Duration;

use ferroverbs::vfio::{check_bar0, Bar0Error, FW_READY_POLL};
use ferroverbs_sim::{Sim, SimConfig};

#[test]
fn check_bar0_on_the_simulator() {
    let mut cfg = SimConfig::default();
    cfg.bar.boot_time = Duration::from_millis(40);
    let sim = Sim::new(cfg);
    let bus = sim.bus();
    // While it boots the simulated firmware reports itself initializing.
    match check_bar0(&bus, Duration::ZERO, FW_READY_POLL) {
        Err(Bar0Error::FwNotReady { register, .. }) => assert_ne!(register & (1 << 31), 0),
        other => panic!("{other:?}"),
    }
    // Once booted it is ready without any command queue address written: revision 5
    // and the configured firmware version.
    let fw = check_bar0(&bus, Duration::from_secs(5), FW_READY_POLL).unwrap();
    assert_eq!(fw.cmdif_rev, 5);
    assert_eq!((fw.major, fw.minor, fw.subminor), (16, 35, 1012));
    assert!(fw.waited > Duration::ZERO);
    assert_eq!(sim.with_bar(|b| b.cmdq_addr()), None);
    // A device that has fallen off the bus.
    sim.vanish(true);
    assert_eq!(
        check_bar0(&bus, Duration::ZERO, FW_READY_POLL),
        Err(Bar0Error::NotResponding { offset: 0 })
    );
}

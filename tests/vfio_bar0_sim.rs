//! The BAR0 checks `VfioBus::open` makes right after mapping BAR0
//! (`ferroverbs::vfio::check_bar0`), run against the simulator's bus.
//!
//! The check is Linux's "pre-initializing" wait (`mlx5_function_enable` polls
//! `initializing` before it programs the command queue, so real firmware clears the
//! bit first). The simulator by default models rdma-core's ordering instead and keeps
//! the bit set until the command queue address is written; both are shown here.

use std::time::Duration;

use ferroverbs::vfio::{check_bar0, Bar0Error, FW_READY_POLL};
use ferroverbs_hw::control::iseg;
use ferroverbs_hw::Bus;
use ferroverbs_sim::{Sim, SimConfig};

#[test]
fn check_bar0_on_the_simulator() {
    let sim = Sim::new(SimConfig::default());
    let bus = sim.bus();
    // Before the command queue address is written the simulated firmware reports
    // itself initializing.
    match check_bar0(&bus, Duration::from_millis(20), FW_READY_POLL) {
        Err(Bar0Error::FwNotReady { register, .. }) => assert_ne!(register & (1 << 31), 0),
        other => panic!("{other:?}"),
    }
    // Once the address is written (low half last), it is ready: revision 5 and the
    // configured firmware version.
    bus.write32(iseg::CMDQ_ADDR_H, 0);
    bus.write32(iseg::CMDQ_ADDR_L_SZ, 0x0010_0000);
    let fw = check_bar0(&bus, Duration::from_secs(5), FW_READY_POLL).unwrap();
    assert_eq!(fw.cmdif_rev, 5);
    assert_eq!((fw.major, fw.minor, fw.subminor), (16, 35, 1012));
    // A device that has fallen off the bus.
    sim.vanish(true);
    assert_eq!(
        check_bar0(&bus, Duration::ZERO, FW_READY_POLL),
        Err(Bar0Error::NotResponding { offset: 0 })
    );
}

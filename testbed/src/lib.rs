//! A test bed for code that runs on the ferroverbs simulator.
//!
//! A [`Bed`] is N simulated ConnectX NICs on one in-process fabric, with a seed and
//! optional link faults, each opened through the driver on the simulator's virtual
//! clock with a protection domain. [`Bed::pair`] gives a connected RC, UC or UD pair of
//! queue pairs in one call, each side with its CQ and a registered buffer.
//! [`Bed::run_until`] steps the fabric and moves virtual time (so that ACK timeouts,
//! retransmissions and RNR timers fire) until a condition holds; past a virtual
//! deadline, or when nothing is left to happen, it fails with the seed and the last
//! packets on the wire.
//!
//! The bed holds the contexts and protection domains for the whole process, so the
//! objects it hands out ([`Endpoint`], [`Pair`]) carry no lifetime and fit in the
//! user's own structs.
//!
//! ```
//! use std::time::Duration;
//! use ferroverbs::verbs::{RecvWr, SendWr, WcOpcode};
//! use ferroverbs_sim::link::faults::Impairments;
//! use ferroverbs_testbed::{Bed, PairConfig};
//!
//! // Two NICs, 5 % of the frames lost in each direction.
//! let bed = Bed::builder(7).impair(Impairments::new().loss(0.05)).build().unwrap();
//! let mut p = bed.pair(0, 1, &PairConfig::rc()).unwrap();
//! for i in 0..20u64 {
//!     let rsg = [p.b.mr.sge(0, 64).unwrap()];
//!     p.b.qp.post_recv(&[RecvWr::new(i, &rsg)]).unwrap();
//!     p.a.mr.write(0, &i.to_le_bytes());
//!     let sg = [p.a.mr.sge(0, 8).unwrap()];
//!     p.a.qp.post_send(&[SendWr::send(i, &sg).signaled()]).unwrap();
//!     let got = bed.run_until(Duration::from_secs(1), || p.b.cq.poll_one()).unwrap();
//!     assert!(got.is_ok() && got.opcode == WcOpcode::Recv && got.byte_len == 8);
//!     let mut buf = [0u8; 8];
//!     p.b.mr.read(0, &mut buf);
//!     assert_eq!(u64::from_le_bytes(buf), i);
//!     let sent = bed.run_until(Duration::from_secs(1), || p.a.cq.poll_one()).unwrap();
//!     assert!(sent.is_ok(), "{sent:?}");
//! }
//! ```

mod bed;
mod endpoint;
mod run;
pub mod trace;

pub use bed::{Bed, BedBuilder, Nic};
pub use endpoint::{Endpoint, Pair, PairConfig, Transport};
pub use run::{Stuck, StuckReason};

/// What building a bed or a pair can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Opening a NIC through the driver failed.
    #[error("opening a simulated NIC: {0}")]
    Open(#[from] ferroverbs::Error),
    /// A verbs call (PD, CQ, QP, MR, AH, a QP transition) failed.
    #[error(transparent)]
    Verbs(#[from] ferroverbs::verbs::Error),
    /// The bed's configuration is out of range.
    #[error("test bed: {0}")]
    Config(&'static str),
}

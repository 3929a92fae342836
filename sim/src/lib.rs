//! # ferroverbs-sim: a software ConnectX (mlx5)
//!
//! A simulated ConnectX that implements the register model of `ferroverbs-hw`: BAR0
//! with the initialization segment and UAR pages ([`bar`]), the command queue
//! ([`cmdq`]) and the firmware behind it ([`firmware`]), event queues ([`eq`]) and
//! MSI-X eventfds ([`irq`]), device time ([`clock`]), fault injection ([`fault`]), and
//! the data path ([`engine`]: WQEs, memory keys, CQEs; [`transport`]: the RC
//! requester, responder and completer) and the RoCEv2 wire ([`wire`]) on an in-process
//! fabric ([`link`]), stepped by the test or running on its own threads ([`mode`]). The driver reaches it through [`SimBus`], an
//! implementation of the `Bus` contract, exactly as it reaches real hardware through
//! VFIO; a test holds the [`Sim`] to configure it, inject faults, move time and read
//! counters. `docs/simulator.md` says what is modelled, simplified and absent.
//!
//! ```
//! use ferroverbs_hw::control::iseg;
//! use ferroverbs_hw::Bus;
//! use ferroverbs_sim::{Sim, SimConfig};
//!
//! let sim = Sim::new(SimConfig::deterministic(42, 1));
//! let bus = sim.bus();
//! assert_eq!(bus.read32(iseg::CMDIF_REV_FW_SUB) >> 16, 5);
//! assert!(iseg::is_initializing(bus.read32(iseg::INITIALIZING)));
//! sim.advance(std::time::Duration::from_millis(200));
//! assert_eq!(bus.read32(iseg::HEALTH_COUNTER), 2);
//! assert_eq!(sim.stats().mappings, 0);
//! ```
//!
//! Unsafe code is confined to [`iommu`] (device accesses to host memory, each checked
//! against the IOVA map) and [`irq`] (creating the MSI-X eventfds), plus one call of
//! the `PCLMULQDQ` CRC kernel in [`wire::icrc`] after the CPU feature was detected.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod bar;
pub mod clock;
pub mod cmdq;
pub mod device;
pub mod engine;
pub mod eq;
pub mod fault;
pub mod firmware;
#[allow(unsafe_code)]
pub mod iommu;
#[allow(unsafe_code)]
pub mod irq;
pub mod link;
pub mod mode;
/// Timers keyed by object number that never scan (the `ferroverbs-timer` crate, which
/// the connection manager uses too).
pub use ferroverbs_timer as timer;
pub mod transport;
pub mod wire;

pub use device::{Sim, SimBus, SimConfig, SimStats, WeakSim};
pub use engine::DataPathStats;
pub use link::Fabric;
pub use mode::{Doorbells, Mode};

//! # ferroverbs-hw: the mlx5 register model
//!
//! The single description of what a ConnectX (mlx5) device looks like to software,
//! shared by the ferroverbs driver and the ferroverbs simulator:
//!
//! * [`field`]: the PRM bit-field accessor layer and [`prm_layout!`] declarations;
//! * [`bus`]: the Bus contract between a driver and a device (MMIO, DMA, barriers,
//!   interrupts) and [`bus::MemBus`], an in-memory bus for tests and benchmarks;
//! * the layouts of the data path (WQE segments, CQEs, EQEs, doorbells, UAR offsets)
//!   and of the control path (init segment, command queue, commands and contexts).
//!
//! Every layout and constant here is checked against fixtures generated from the
//! public headers (`infiniband/mlx5dv.h` of rdma-core 44 and Linux's
//! `include/linux/mlx5/{mlx5_ifc.h,device.h}`); see `docs/architecture.md`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bus;
#[macro_use]
pub mod conformance;
pub mod control;
pub mod datapath;
pub mod field;

pub use bus::{Bus, BusError, DmaPerm, MemBus};
pub use field::{Field, Layout, TooShort};

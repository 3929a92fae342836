//! # ferroverbs-sim: a software ConnectX (mlx5)
//!
//! A simulated ConnectX that implements the register model of `ferroverbs-hw`: BAR0
//! with the initialization segment and UAR pages, the command queue and the firmware
//! behind it, event queues, and (later) the data path and RoCEv2 wire. The driver
//! reaches it through [`SimBus`], an implementation of the `Bus` contract, exactly as
//! it reaches real hardware through VFIO.
//!
//! Unsafe code is confined to [`iommu`] (device accesses to host memory, each checked
//! against the IOVA map) and [`irq`] (creating the MSI-X eventfds).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod bar;
pub mod clock;
pub mod cmdq;
pub mod device;
pub mod eq;
pub mod fault;
pub mod firmware;
#[allow(unsafe_code)]
pub mod iommu;
#[allow(unsafe_code)]
pub mod irq;
pub mod wire;

pub use device::{Sim, SimBus, SimConfig, SimStats};

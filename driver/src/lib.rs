//! # ferroverbs: a userspace RDMA verbs driver for NVIDIA ConnectX (mlx5)
//!
//! The driver talks to a device only through a [`Bus`](ferroverbs_hw::Bus) (VFIO on
//! hardware, the simulator in tests). This part is the control plane:
//!
//! * [`dma`]: DMA memory shared with the device and the firmware page pool;
//! * [`cmdif`]: the command queue, mailbox chains, completion by polling or event;
//! * [`hca`]: bring-up and teardown in the order firmware requires;
//! * [`eq`]: event queues, page requests;
//! * [`health`]: the health watchdog;
//! * [`device`]: [`Device::open`] and the [`Context`] it returns;
//! * [`error`]: what can go wrong, with opcode, status, syndrome and step.
//! * [`ring`]: the fast path: WQE building, doorbells and BlueFlame, CQE polling.
//! * [`verbs`]: protection domains, memory regions, completion queues, RC queue pairs.
//!
//! ```no_run
//! # fn demo<B: ferroverbs_hw::Bus>(bus: B) -> ferroverbs::Result<()> {
//! use ferroverbs::{Device, DeviceConfig};
//! let ctx = Device::open(bus, DeviceConfig::default())?;
//! let attr = ctx.query_device()?;
//! println!("fw {} max_qp {}", attr.fw_ver, attr.max_qp);
//! ctx.close()?;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod any_bus;
pub mod clock;
pub mod cmdif;
pub mod device;
pub mod dma;
pub mod eq;
pub mod error;
pub mod hca;
pub mod health;
pub mod neighbour;
pub mod prm;
mod regs;
pub mod ring;
pub mod verbs;

pub use any_bus::AnyBus;
pub use clock::{Clock, MonotonicClock, SteppedClock};
pub use device::{
    AtomicCap, Context, Device, DeviceAttr, DeviceConfig, DeviceId, FwVersion, GidConfig, GidEntry,
    L3Type, LinkLayer, Mtu, PortAttr, PortState, RoceVersion, Transports,
};
pub use eq::AsyncEvent;
pub use error::{
    BringUpError, CmdError, CmdStatus, DeliveryStatus, Error, Failure, InitWait, Opcode, Result,
    Step, Wait,
};

pub mod vfio;
pub use vfio::{DeviceSpec, DeviceSpecError};

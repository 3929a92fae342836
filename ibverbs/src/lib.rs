//! A drop-in `libibverbs.so.1` over ferroverbs: unmodified programs built against
//! rdma-core's libibverbs (the Debian 12 `ibverbs-utils`, `perftest`, any verbs
//! application) run on a simulated ConnectX (RoCE v2 over UDP) or on a ConnectX behind
//! VFIO, with no kernel RDMA stack.
//!
//! Build with `cargo build -p ferroverbs-ibverbs --release`, then point the loader at
//! it: `ln -sf libibverbs.so target/release/libibverbs.so.1` and
//! `LD_LIBRARY_PATH=target/release ibv_devinfo`. The device comes from
//! `FERROVERBS_DEVICE` ([`device`] module docs); `docs/ibverbs-compat.md` lists what
//! works and what does not.
//!
//! Layout:
//! * [`abi`]: `#[repr(C)]` mirrors of the `verbs.h` structs, checked against the header;
//! * [`device`]: device selection and the process-wide NIC;
//! * [`convert`]: value conversions between the ABI and the driver (safe code);
//! * `ffi`: the entry points, the unsafe code (with `spin`, the CQ and QP lock),
//!   each block with its `SAFETY:`;
//! * `exports`: the C names and their version nodes (`libibverbs.map`).

#![deny(unsafe_op_in_unsafe_fn)]

pub mod abi;
pub mod abi_ex;
pub mod convert;
mod cq_ex;
pub mod device;
mod exports;
mod ffi;
mod mw;
mod qp_ex;
mod spin;

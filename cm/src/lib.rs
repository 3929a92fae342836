//! The InfiniBand Communication Manager (IBTA Vol. 1 chapter 12) with the RDMA IP CM
//! service (Annex A11), for RoCEv2: what connects two queue pairs in Linux's
//! `ib_cm`/`rdma_cm`, as MADs on QP1 in the same UDP/4791 packets as the data.
//!
//! * [`mad`]: the MAD common header and the GSI constants (QP1, its Q_Key);
//! * [`msg`]: the CM messages (REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ,
//!   SIDR_REP; LAP and APR by their IDs) parsed from and emitted into MADs;
//! * [`ipcm`]: service IDs of the IP port spaces and the IP addressing header;
//! * [`time`]: the CM's time-outs as Linux computes them;
//! * [`engine`]: the connection state machines, without I/O;
//! * [`service`]: the CM of a device port over its QP1, with the RDMA IP CM service and
//!   the application's QP taken to RTS, in the spirit of rdma_cm.
//!
//! Everything read from the network goes through a checked parser that names what is
//! wrong ([`Error`]); nothing here panics on bad input.

pub mod engine;
pub mod field;
pub mod ipcm;
pub mod mad;
pub mod msg;
pub mod service;
pub mod time;

pub use msg::{CmMad, Message};

/// What a CM MAD or header could not be read for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Fewer bytes than the structure needs.
    #[error("{what} of {len} bytes, {need} needed")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// The bytes there were.
        len: usize,
        /// The bytes needed.
        need: usize,
    },
    /// A MAD base version other than 1.
    #[error("MAD base version {0}, not 1")]
    BaseVersion(u8),
    /// A MAD of another management class.
    #[error("management class {0:#04x} is not the CM's (0x07)")]
    NotCm(u8),
    /// A CM class version other than 2.
    #[error("CM class version {0}, not 2")]
    ClassVersion(u8),
    /// A method other than Send.
    #[error("CM method {0:#04x}, not Send (0x03)")]
    Method(u8),
    /// An attribute ID that is no CM message.
    #[error("CM attribute {0:#06x} is no CM message")]
    UnknownAttribute(u16),
    /// A field out of its range.
    #[error("{msg}: {field} {value} is out of range")]
    Field {
        /// The message.
        msg: &'static str,
        /// The field.
        field: &'static str,
        /// Its value.
        value: u32,
    },
}

//! The verbs API: protection domains, memory regions, completion queues, RC, UC and UD
//! queue pairs and shared receive queues ([`SharedReceiveQueue`]) over an open
//! [`Context`](crate::Context), with a fast path (post and poll) that allocates
//! nothing, takes no lock and makes no system call (an SRQ's completions hand their
//! WQEs back through a short lock, as rdma-core's SRQ spinlock does).
//!
//! ```no_run
//! # fn demo<B: ferroverbs_hw::Bus>(ctx: &ferroverbs::Context<B>) -> Result<(), Box<dyn std::error::Error>> {
//! use ferroverbs::verbs::*;
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(256)?;
//! let mr = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE)?;
//! let mut qp = pd.create_qp(&QpInitAttr::new(&cq, &cq, QpCap::default()))?;
//! qp.to_init(1, AccessFlags::empty())?;
//! // ... exchange QPN, PSN, GID and MAC with the peer, then:
//! # let rtr: RtrAttr = unimplemented!(); let rts: RtsAttr = unimplemented!();
//! qp.to_rtr(&rtr)?;
//! qp.to_rts(&rts)?;
//! mr.write(0, b"ping");
//! qp.post_send(&[SendWr::send(1, &[mr.sge(0, 4)?]).signaled()])?;
//! let mut wc = [WorkCompletion::default(); 16];
//! # let mut cq = cq;
//! let n = cq.poll(&mut wc);
//! # let _ = n; Ok(()) }
//! ```
//!
//! # Objects and their lifetimes
//!
//! Every object borrows what it depends on, so the compiler enforces the order of
//! destruction the device requires (a QP before its PD, every object before the
//! context): [`Pd`] borrows the [`Context`](crate::Context); a [`MemoryRegion`] and a
//! [`QueuePair`] borrow their [`Pd`]. Each object's `Drop` issues its firmware destroy
//! command, then releases its DMA memory.
//!
//! A [`CompletionQueue`] is the exception: polling needs `&mut`, and a QP keeps using
//! its CQs after creation, so a QP holds a reference-counted share of the firmware CQ
//! (and of its ring memory) instead of a borrow. Dropping the [`CompletionQueue`]
//! handle while QPs still use it therefore cannot destroy the CQ under them: the
//! `DESTROY_CQ` happens when the last QP goes. [`CompletionQueue::destroy`] makes the
//! same situation an error ([`Error::CqInUse`]) for code that wants to know.
//! [`CompletionQueue::resize`] (`&mut` too, so no poll runs meanwhile) moves a CQ
//! to a larger or smaller ring with its unpolled completions, as libmlx5 does.
//!
//! Object numbers are per device: a QP created with a CQ or an SRQ of another
//! [`Context`](crate::Context) (another [`DeviceId`](crate::DeviceId)) is refused with
//! [`Error::ForeignObject`], naming the object and both devices, before any command
//! reaches the firmware. Keys and address handles are only met on the post path, which
//! checks nothing it cannot check for free: there the device refuses a key of another
//! PD with a protection error completion.
//!
//! # Unreliable datagram
//!
//! A UD [`QueuePair`] comes from [`QpInitAttr::ud`]; [`QueuePair::to_init_ud`] (port,
//! P_Key index, Q_Key), [`QueuePair::to_rtr_ud`] and [`QueuePair::to_rts_ud`] (first
//! PSN) take it to RTS, and a missing attribute is named
//! ([`Error::MissingAttribute`] with [`Attribute::Qkey`], [`Attribute::SqPsn`]). Each
//! send names its destination: an [`AddressHandle`] ([`Pd::create_ah`]: destination
//! GID and MAC, source GID index, hop limit, traffic class, flow label), the remote
//! QPN and the remote Q_Key ([`SendWr::ud`]); a message is at most the port MTU
//! ([`PostError::MessageTooLong`]). Every receive buffer starts with 40 bytes of GRH
//! (for RoCE v2 over IPv4: 20 zero bytes, then the sender's IPv4 header), counted in
//! the completion's `byte_len`, which also carries the sender's QPN (`src_qp`) and
//! [`WcFlags::GRH`].
//!
//! ```no_run
//! # fn demo<B: ferroverbs_hw::Bus>(ctx: &ferroverbs::Context<B>, peer: ferroverbs::GidEntry, peer_qpn: u32) -> Result<(), Box<dyn std::error::Error>> {
//! use ferroverbs::verbs::*;
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(64)?;
//! let mut qp = pd.create_qp(&QpInitAttr::ud(&cq, &cq, QpCap::default()))?;
//! qp.to_init_ud(&UdInitAttr::new(1, 0x1111_1111))?;
//! qp.to_rtr_ud()?;
//! qp.to_rts_ud(0)?;
//! let ah = pd.create_ah(1, &AddressVector::new(peer.gid, peer.mac, 0))?;
//! let mr = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE)?;
//! qp.post_recv(&[RecvWr::new(1, &[mr.sge(0, 40 + 1024)?])])?;
//! mr.write(2048, b"ping");
//! qp.post_send(&[SendWr::send(2, &[mr.sge(2048, 4)?]).ud(&ah, peer_qpn, 0x1111_1111).signaled()])?;
//! # Ok(()) }
//! ```
//!
//! # Memory windows
//!
//! A [`MemoryWindow`] ([`Pd::alloc_mw`], types 1 and 2) gives a peer access to a
//! range of a [`MemoryRegion`] with its own rights, granted and revoked on the send
//! queue: [`QueuePair::bind_mw`] (type 1), [`SendBatch::bind_mw`] and
//! [`SendBatch::local_inv`] (type 2), or a peer's SEND with Invalidate; the QP is
//! sized for these requests with [`QpInitAttr::with_memory_windows`] ([`mw`] module
//! docs: the checks and completions).
//!
//! # Events and buffer pools
//!
//! * Completion events: a [`CompletionChannel`] (`Context::create_comp_channel`) owns
//!   a completion EQ on its own MSI-X vector; CQs created through it report armed
//!   completions ([`CompletionQueue::req_notify`]) there, and its descriptor works
//!   with `poll(2)`/`epoll` ([`channel`] module docs: the two
//!   simulator modes, get/ack semantics).
//! * Asynchronous events: [`Context::get_async_event`](crate::Context::get_async_event)
//!   and [`Context::poll_async_events`](crate::Context::poll_async_events) give typed
//!   [`AsyncEvent`]s (QP errors, CQ errors, SRQ limit, port changes, device fatal).
//! * A [`BufferPool`] carves one registered region into fixed-size [`Slot`]s.
//!
//! # Memory regions and safety
//!
//! Memory the device may write (a registered buffer) is never exposed as a Rust
//! reference: a [`MemoryRegion`] owns its buffer (allocated by the driver, or a
//! `Box<[u8]>` handed over by the caller, returned by
//! [`MemoryRegion::deregister`]) and offers copies in and out. The device reaches the
//! buffer only through the IOMMU mapping and the memory key, whose bounds, PD and
//! access rights it checks, so posting any [`Sge`] is safe: a bad key or range ends in
//! an error completion, never in a write to memory Rust code holds. [`MemoryRegion::sge`]
//! checks the range against the region when the request is built, so that mistake is
//! caught before the device sees it.
//!
//! # The fast path
//!
//! [`QueuePair::post_send`], [`QueuePair::post_recv`] and [`CompletionQueue::poll`]
//! take `&mut self` (one thread at a time per object, no lock), write WQEs with the
//! [`ring`](crate::ring) writers, and share per-slot `wr_id` tables and completion
//! counters between a QP and its CQs through atomics (`Relaxed`/`Release`/`Acquire`
//! loads and stores: plain moves on x86-64, no read-modify-write). A CQ finds the QP
//! of a CQE in a small table it reads without locking (`Mutex::get_mut` under
//! `&mut self`). `tests/verbs_noalloc.rs` proves the absence of allocation with a
//! counting global allocator; `docs/performance.md` records the audit for locks and
//! system calls and the measured costs.

mod ah;
pub mod async_event;
mod attr;
pub mod channel;
mod counters;
mod cq;
pub(crate) mod fastmem;
pub mod fastpath;
mod mr;
pub mod mw;
mod pd;
pub mod pool;
mod post;
mod qp;
mod rereg;
pub(crate) mod scatter;
mod srq;
mod wc;
mod wr;

pub use ah::{flow_label_from_qpns, udp_sport_from_flow_label, AddressHandle};
pub(crate) use async_event::EventState;
pub use async_event::{AsyncEvent, CQ_ERR_SYNDROME_ACCESS_VIOLATION, CQ_ERR_SYNDROME_OVERRUN};
pub use attr::{
    AddressVector, Attribute, QpAttr, QpInfo, QpState, RtrAttr, RtsAttr, Transition, UdInitAttr,
};
pub use channel::{CompletionChannel, CqEvent, CqOptions};
pub use counters::{CqCounters, DeviceCounters, QpCounters, QpDeviceCounters, RxDrops};
pub use cq::{requester_completion, CompletionQueue, CqeSize, HotReq};
pub use mr::{AccessFlags, MemoryRegion, RangeError};
pub use mw::{inc_rkey, MemoryWindow, MwBind, MwBindError, MwType, MAX_MW_LEN};
pub use pd::Pd;
pub use pool::{BufferPool, PoolConfig, PoolError, Slot, MAX_SLOTS, MAX_SLOT_ALIGN, MAX_SLOT_SIZE};
pub use post::SendBatch;
pub use qp::{BadWr, PostError, QpCap, QpInitAttr, QueuePair};
pub use rereg::UMR_WAIT;
pub use srq::{SharedReceiveQueue, SrqAttr, SrqInfo};
pub use wc::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
pub use wr::RecvWr;

pub use crate::ring::{QpType, RemoteAddr, SendData, SendFlags, SendOp, SendWr, Sge};
pub use crate::Mtu;

use crate::error::Error as CtrlError;

/// What a verbs control operation (create, modify, query, destroy) can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The device or a firmware command failed (opcode, status and syndrome inside).
    #[error(transparent)]
    Device(#[from] CtrlError),
    /// A QP transition was asked without an attribute it requires.
    #[error("{transition} requires the {attribute} attribute")]
    MissingAttribute {
        /// The transition.
        transition: Transition,
        /// The attribute that is missing.
        attribute: Attribute,
    },
    /// A QP transition was given an attribute it does not accept.
    #[error("{transition} does not accept the {attribute} attribute")]
    UnexpectedAttribute {
        /// The transition.
        transition: Transition,
        /// The attribute that may not be given.
        attribute: Attribute,
    },
    /// An attribute value is out of range.
    #[error("{attribute} = {value} is out of range (at most {max})")]
    AttributeOutOfRange {
        /// The attribute.
        attribute: Attribute,
        /// The value given.
        value: u64,
        /// The largest valid value.
        max: u64,
    },
    /// No transition leads from the QP's state to the state asked for.
    #[error("no QP transition from {from:?} to {to:?}")]
    InvalidTransition {
        /// The QP's current state.
        from: QpState,
        /// The state asked for.
        to: QpState,
    },
    /// The path MTU is larger than the port's active MTU.
    #[error("path MTU {requested:?} exceeds the active MTU {active:?} of port {port}")]
    PathMtuTooLarge {
        /// The MTU asked for.
        requested: Mtu,
        /// The port's active MTU.
        active: Mtu,
        /// The port.
        port: u8,
    },
    /// A requested capability exceeds what the device supports.
    #[error("{what} of {requested} exceeds the device limit of {max}")]
    CapExceeded {
        /// Which capability.
        what: &'static str,
        /// The value requested.
        requested: u64,
        /// The device's limit.
        max: u64,
    },
    /// An invalid combination of access flags (remote write or atomic without local
    /// write, as verbs forbids).
    #[error("invalid access flags {0:?}: remote write and remote atomic need LOCAL_WRITE")]
    InvalidAccess(AccessFlags),
    /// Remote access rights the QP's transport cannot carry (REMOTE_READ or
    /// REMOTE_ATOMIC on a UC QP: UC has only SEND and RDMA WRITE).
    #[error("{qp_type:?} QPs do not support the access rights {access:?}")]
    AccessNotSupported {
        /// The QP's transport.
        qp_type: QpType,
        /// The rights refused.
        access: AccessFlags,
    },
    /// An argument is invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// A CQ resize to a ring that cannot hold the completions not yet polled (they
    /// move to the new ring, and the device needs one entry more).
    #[error(
        "a CQ ring of {entries} entries cannot hold the {unpolled} completions not yet \
         polled (it needs more entries than that)"
    )]
    CqResizeBelowUnpolled {
        /// Completions waiting in the CQ.
        unpolled: u32,
        /// Entries of the ring asked for.
        entries: u32,
    },
    /// The device accepted a CQ resize but wrote no resize CQE where the CQ's
    /// completions end (the CQ is in error): the CQ keeps its old ring.
    #[error("CQ {cqn}: the device wrote no resize CQE (the CQ is in error)")]
    CqResizeLost {
        /// The CQ number.
        cqn: u32,
    },
    /// The CQ is still used by `qps` queue pairs.
    #[error("the completion queue is still used by {qps} queue pair(s)")]
    CqInUse {
        /// How many QPs still use it.
        qps: usize,
    },
    /// An object of another device (another [`Context`](crate::Context)) was given
    /// where an object of this one is needed: its number would name an unrelated
    /// object of this device (a QP on another device's CQ number would send its
    /// completions to whichever CQ of its own device has that number).
    #[error(
        "the {object} {number:#x} belongs to {owner}, not to {device} where the {creating} \
         is created"
    )]
    ForeignObject {
        /// What was given ("send CQ", "receive CQ", "SRQ").
        object: &'static str,
        /// Its number on its own device (CQN, SRQN).
        number: u32,
        /// The device it belongs to.
        owner: crate::DeviceId,
        /// What was being created ("QP").
        creating: &'static str,
        /// The device the new object was to be created on.
        device: crate::DeviceId,
    },
    /// The device completed the UMR that was to change a memory region in place
    /// with an error ([`MemoryRegion::rereg_pd_access`]; Linux answers EFAULT).
    #[error("the UMR on key {key:#x} completed in error (syndrome {syndrome:#x})")]
    UmrFailed {
        /// The region's key.
        key: u32,
        /// The error CQE's syndrome.
        syndrome: u8,
    },
    /// The UMR that was to change a memory region in place did not complete within
    /// [`UMR_WAIT`].
    #[error("the UMR on key {key:#x} did not complete within {UMR_WAIT:?}")]
    UmrTimeout {
        /// The region's key.
        key: u32,
    },
    /// The bus gave an IOVA whose page offset differs from the buffer's (memory keys
    /// translate page by page, so both must agree).
    #[error("IOVA {iova:#x} of the buffer at {addr:#x} has another page offset")]
    IovaMisaligned {
        /// Host address.
        addr: u64,
        /// IOVA.
        iova: u64,
    },
}

/// Result alias of the verbs control operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Runs one firmware command through the context.
pub(crate) fn exec<B: ferroverbs_hw::Bus>(
    ctx: &crate::Context<B>,
    input: &[u8],
    out_len: usize,
) -> Result<Vec<u8>> {
    Ok(ctx.exec_cmd(input, out_len)?)
}

#[cfg(test)]
mod tests;

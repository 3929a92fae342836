//! Asynchronous events (`ibv_get_async_event`): what the device reports on the async
//! EQ about queues, ports and itself, as a typed [`AsyncEvent`] naming its object.
//!
//! The async EQ is consumed by the driver whenever it talks to the device (every
//! command) and by [`Context::process_events`]; the events it carries queue up in the
//! context (at most 1024; older ones are dropped first). [`Context::get_async_event`]
//! and [`Context::poll_async_events`] process pending EQEs first, then hand out the
//! queued events, oldest first. A failure of the device found by the health watchdog
//! is reported once as [`AsyncEvent::DeviceFatal`] (rdma-core `IBV_EVENT_DEVICE_FATAL`),
//! after the events queued before it.
//!
//! [`Context::async_event_fd`] gives the async EQ's MSI-X eventfd where the bus offers
//! one (VFIO, the simulator): it becomes readable when the device writes an EQE to the
//! async EQ, so an application can sleep in `poll(2)`/`epoll` and call
//! [`Context::get_async_event`] on wake-up (which also clears the descriptor).
//!
//! | device event (`MLX5_EVENT_TYPE_*`) | [`AsyncEvent`] | `ibv_event_type` |
//! |---|---|---|
//! | `WQ_CATAS_ERROR` 0x05 | [`QpFatal`](AsyncEvent::QpFatal) | `IBV_EVENT_QP_FATAL` |
//! | `WQ_INVAL_REQ_ERROR` 0x10 | [`QpRequestError`](AsyncEvent::QpRequestError) | `IBV_EVENT_QP_REQ_ERR` |
//! | `WQ_ACCESS_ERROR` 0x11 | [`QpAccessError`](AsyncEvent::QpAccessError) | `IBV_EVENT_QP_ACCESS_ERR` |
//! | `COMM_EST` 0x02 | [`CommEstablished`](AsyncEvent::CommEstablished) | `IBV_EVENT_COMM_EST` |
//! | `SQ_DRAINED` 0x03 | [`SqDrained`](AsyncEvent::SqDrained) | `IBV_EVENT_SQ_DRAINED` |
//! | `PATH_MIG` 0x01 / `PATH_MIG_FAILED` 0x07 | [`PathMigrated`](AsyncEvent::PathMigrated) / [`PathMigrationError`](AsyncEvent::PathMigrationError) | `IBV_EVENT_PATH_MIG(_ERR)` |
//! | `SRQ_LAST_WQE` 0x13 | [`QpLastWqeReached`](AsyncEvent::QpLastWqeReached) | `IBV_EVENT_QP_LAST_WQE_REACHED` |
//! | `SRQ_RQ_LIMIT` 0x14 | [`SrqLimitReached`](AsyncEvent::SrqLimitReached) | `IBV_EVENT_SRQ_LIMIT_REACHED` |
//! | `SRQ_CATAS_ERROR` 0x12 | [`SrqError`](AsyncEvent::SrqError) | `IBV_EVENT_SRQ_ERR` |
//! | `CQ_ERROR` 0x04 | [`CqError`](AsyncEvent::CqError) | `IBV_EVENT_CQ_ERR` |
//! | `PORT_CHANGE` 0x09, sub-type ACTIVE / DOWN | [`PortActive`](AsyncEvent::PortActive) / [`PortError`](AsyncEvent::PortError) | `IBV_EVENT_PORT_ACTIVE` / `IBV_EVENT_PORT_ERR` |
//! | `PORT_CHANGE`, other sub-types | [`PortChange`](AsyncEvent::PortChange) | `IBV_EVENT_LID_CHANGE`, ... |
//! | health watchdog verdict | [`DeviceFatal`](AsyncEvent::DeviceFatal) | `IBV_EVENT_DEVICE_FATAL` |
//! | health syndrome without RFR (not fatal) | [`HealthReport`](AsyncEvent::HealthReport) | none (Linux logs it and runs its devlink health reporter) |

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferroverbs_hw::datapath::eqe::{
    EventType, MLX5_PORT_CHANGE_SUBTYPE_ACTIVE, MLX5_PORT_CHANGE_SUBTYPE_DOWN,
};
use ferroverbs_hw::Bus;

use crate::eq::AsyncEvent as RawEvent;
use crate::error::Failure;
use crate::Context;

/// `mlx5_eqe_cq_err.syndrome` of a CQ error event for an overrun (PRM: 1).
pub const CQ_ERR_SYNDROME_OVERRUN: u8 = 1;
/// `mlx5_eqe_cq_err.syndrome` of a CQ error event for an access violation (PRM: 2).
pub const CQ_ERR_SYNDROME_ACCESS_VIOLATION: u8 = 2;

/// An asynchronous event, with the number of the object it concerns (see the
/// [module](self) table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncEvent {
    /// A catastrophic error on a QP's work queue: the QP is in error.
    QpFatal {
        /// The QP number.
        qpn: u32,
    },
    /// A QP received an invalid request (e.g. an opcode out of sequence): the QP is
    /// in error.
    QpRequestError {
        /// The QP number.
        qpn: u32,
    },
    /// A QP received a request that violated access rights (bad rkey, bounds, PD):
    /// the QP is in error.
    QpAccessError {
        /// The QP number.
        qpn: u32,
    },
    /// A QP in RTR received its first packet.
    CommEstablished {
        /// The QP number.
        qpn: u32,
    },
    /// A QP's send queue drained (SQD).
    SqDrained {
        /// The QP number.
        qpn: u32,
    },
    /// A QP migrated to its alternate path.
    PathMigrated {
        /// The QP number.
        qpn: u32,
    },
    /// A path migration failed.
    PathMigrationError {
        /// The QP number.
        qpn: u32,
    },
    /// The last WQE of a QP attached to an SRQ was consumed.
    QpLastWqeReached {
        /// The QP number.
        qpn: u32,
    },
    /// An SRQ's number of receive WQEs fell below its limit.
    SrqLimitReached {
        /// The SRQ number.
        srqn: u32,
    },
    /// A catastrophic error on an SRQ.
    SrqError {
        /// The SRQ number.
        srqn: u32,
    },
    /// A CQ overran (or hit an access violation): the CQ is in error.
    CqError {
        /// The CQ number.
        cqn: u32,
        /// `mlx5_eqe_cq_err.syndrome`: [`CQ_ERR_SYNDROME_OVERRUN`] or
        /// [`CQ_ERR_SYNDROME_ACCESS_VIOLATION`].
        syndrome: u8,
    },
    /// A port became active.
    PortActive {
        /// The port (1-based).
        port: u8,
    },
    /// A port went down.
    PortError {
        /// The port (1-based).
        port: u8,
    },
    /// Another port change (`MLX5_PORT_CHANGE_SUBTYPE_*`: LID, P_Key, GUID, ...).
    PortChange {
        /// The port (1-based).
        port: u8,
        /// The sub-type.
        sub_type: u8,
    },
    /// The firmware reported a health syndrome without asking for a reset (`health.synd`
    /// nonzero, RFR clear): the device keeps working. Each new syndrome is reported
    /// once (Linux `health.c` `poll_health` reports a changed syndrome and carries
    /// on; a syndrome is fatal only with RFR, rdma-core `sensor_fw_synd_rfr`).
    HealthReport {
        /// `health.synd` (1 = FW internal error, 0x10 = high temperature, ...).
        synd: u8,
        /// `health.ext_synd`.
        ext_synd: u16,
    },
    /// The device failed (health watchdog): nothing works any more.
    DeviceFatal {
        /// Why.
        failure: Failure,
    },
    /// An event this API does not name.
    Other {
        /// `MLX5_EVENT_TYPE_*`.
        event_type: u8,
        /// The sub-type byte.
        sub_type: u8,
    },
}

impl AsyncEvent {
    /// The typed event of a decoded EQE.
    pub fn from_raw(raw: RawEvent) -> AsyncEvent {
        match raw {
            RawEvent::PortChange { port, sub_type } => match sub_type {
                MLX5_PORT_CHANGE_SUBTYPE_ACTIVE => AsyncEvent::PortActive { port },
                MLX5_PORT_CHANGE_SUBTYPE_DOWN => AsyncEvent::PortError { port },
                _ => AsyncEvent::PortChange { port, sub_type },
            },
            RawEvent::CqError { cqn, syndrome } => AsyncEvent::CqError { cqn, syndrome },
            RawEvent::Queue {
                event_type, number, ..
            } => {
                let n = number;
                let t = |e: EventType| e as u8 == event_type;
                if t(EventType::WqCatasError) {
                    AsyncEvent::QpFatal { qpn: n }
                } else if t(EventType::WqInvalReqError) {
                    AsyncEvent::QpRequestError { qpn: n }
                } else if t(EventType::WqAccessError) {
                    AsyncEvent::QpAccessError { qpn: n }
                } else if t(EventType::CommEst) {
                    AsyncEvent::CommEstablished { qpn: n }
                } else if t(EventType::SqDrained) {
                    AsyncEvent::SqDrained { qpn: n }
                } else if t(EventType::PathMig) {
                    AsyncEvent::PathMigrated { qpn: n }
                } else if t(EventType::PathMigFailed) {
                    AsyncEvent::PathMigrationError { qpn: n }
                } else if t(EventType::SrqLastWqe) {
                    AsyncEvent::QpLastWqeReached { qpn: n }
                } else if t(EventType::SrqRqLimit) {
                    AsyncEvent::SrqLimitReached { srqn: n }
                } else if t(EventType::SrqCatasError) {
                    AsyncEvent::SrqError { srqn: n }
                } else {
                    AsyncEvent::Other {
                        event_type,
                        sub_type: 0,
                    }
                }
            }
            RawEvent::Other {
                event_type,
                sub_type,
            } => AsyncEvent::Other {
                event_type,
                sub_type,
            },
            RawEvent::HealthReport { synd, ext_synd } => {
                AsyncEvent::HealthReport { synd, ext_synd }
            }
        }
    }

    /// The QP the event concerns, if it concerns one.
    pub fn qpn(&self) -> Option<u32> {
        match *self {
            AsyncEvent::QpFatal { qpn }
            | AsyncEvent::QpRequestError { qpn }
            | AsyncEvent::QpAccessError { qpn }
            | AsyncEvent::CommEstablished { qpn }
            | AsyncEvent::SqDrained { qpn }
            | AsyncEvent::PathMigrated { qpn }
            | AsyncEvent::PathMigrationError { qpn }
            | AsyncEvent::QpLastWqeReached { qpn } => Some(qpn),
            _ => None,
        }
    }

    /// Whether the event puts its QP in the error state (fatal, request and access
    /// errors).
    pub fn is_qp_error(&self) -> bool {
        matches!(
            self,
            AsyncEvent::QpFatal { .. }
                | AsyncEvent::QpRequestError { .. }
                | AsyncEvent::QpAccessError { .. }
        )
    }

    /// The `ibv_event_type` name of the event.
    pub fn ibv_name(&self) -> &'static str {
        match self {
            AsyncEvent::QpFatal { .. } => "IBV_EVENT_QP_FATAL",
            AsyncEvent::QpRequestError { .. } => "IBV_EVENT_QP_REQ_ERR",
            AsyncEvent::QpAccessError { .. } => "IBV_EVENT_QP_ACCESS_ERR",
            AsyncEvent::CommEstablished { .. } => "IBV_EVENT_COMM_EST",
            AsyncEvent::SqDrained { .. } => "IBV_EVENT_SQ_DRAINED",
            AsyncEvent::PathMigrated { .. } => "IBV_EVENT_PATH_MIG",
            AsyncEvent::PathMigrationError { .. } => "IBV_EVENT_PATH_MIG_ERR",
            AsyncEvent::QpLastWqeReached { .. } => "IBV_EVENT_QP_LAST_WQE_REACHED",
            AsyncEvent::SrqLimitReached { .. } => "IBV_EVENT_SRQ_LIMIT_REACHED",
            AsyncEvent::SrqError { .. } => "IBV_EVENT_SRQ_ERR",
            AsyncEvent::CqError { .. } => "IBV_EVENT_CQ_ERR",
            AsyncEvent::PortActive { .. } => "IBV_EVENT_PORT_ACTIVE",
            AsyncEvent::PortError { .. } => "IBV_EVENT_PORT_ERR",
            AsyncEvent::PortChange { .. } => "IBV_EVENT_PORT_CHANGE",
            AsyncEvent::DeviceFatal { .. } => "IBV_EVENT_DEVICE_FATAL",
            AsyncEvent::HealthReport { .. } => "health report",
            AsyncEvent::Other { .. } => "other",
        }
    }
}

/// Per-context event bookkeeping (a field of [`Context`]).
#[derive(Debug, Default)]
pub(crate) struct EventState {
    /// Whether [`AsyncEvent::DeviceFatal`] was handed out.
    fatal_reported: AtomicBool,
    /// MSI-X vectors taken by completion channels (bit *i*: vector *i*; vector 0 is
    /// the async EQ's).
    vectors: AtomicU64,
}

impl EventState {
    /// Takes the lowest free MSI-X vector above 0, if any.
    pub(crate) fn take_vector(&self) -> Option<u16> {
        let mut cur = self.vectors.load(Ordering::Relaxed);
        loop {
            let free = !(cur | 1);
            if free == 0 {
                return None;
            }
            let v = free.trailing_zeros();
            match self.vectors.compare_exchange_weak(
                cur,
                cur | (1 << v),
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(v as u16),
                Err(c) => cur = c,
            }
        }
    }

    /// Gives vector `v` back.
    pub(crate) fn put_vector(&self, v: u16) {
        if v < 64 {
            self.vectors.fetch_and(!(1u64 << v), Ordering::AcqRel);
        }
    }
}

impl<B: Bus> Context<B> {
    /// Takes the next asynchronous event, processing pending EQEs first; `None` when
    /// there is none. Never blocks: the same as [`Context::try_get_async_event`].
    pub fn get_async_event(&self) -> Option<AsyncEvent> {
        self.try_get_async_event()
    }

    /// Takes the next asynchronous event without blocking (`ibv_get_async_event` on a
    /// non-blocking descriptor): `None` when there is none. While events stay queued
    /// after this one, [`Context::async_event_fd`] stays readable.
    pub fn try_get_async_event(&self) -> Option<AsyncEvent> {
        let mut one = [AsyncEvent::Other {
            event_type: 0,
            sub_type: 0,
        }];
        (self.poll_async_events(&mut one) == 1).then_some(one[0])
    }

    /// Waits up to `timeout` (`None`: forever) for an asynchronous event
    /// (`ibv_get_async_event`, blocking): sleeps in `poll(2)` on
    /// [`Context::async_event_fd`], which the device makes readable when it writes
    /// an event. On a bus without interrupts (no descriptor) the async EQ is looked
    /// at every millisecond instead. In the simulator's deterministic mode another
    /// thread must drive the device.
    pub fn get_async_event_timeout(&self, timeout: Option<Duration>) -> Option<AsyncEvent> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(ev) = self.try_get_async_event() {
                return Some(ev);
            }
            let left = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    Some(left)
                }
                None => None,
            };
            match self.async_event_fd() {
                Some(fd) => {
                    super::channel::wait_readable(fd, left);
                }
                None => std::thread::sleep(left.map_or(Duration::from_millis(1), |l| {
                    l.min(Duration::from_millis(1))
                })),
            }
        }
    }

    /// Fills `out` with pending asynchronous events (oldest first), processing
    /// pending EQEs first, and returns how many were written. A device failure comes
    /// last, once.
    pub fn poll_async_events(&self, out: &mut [AsyncEvent]) -> usize {
        if out.is_empty() {
            return 0;
        }
        if let Some(fd) = self.async_event_fd() {
            super::channel::drain_eventfd(fd);
        }
        // A failed device answers nothing: what was queued is still handed out.
        if let Err(e) = self.process_events() {
            tracing::debug!(error = %e, "processing events");
            self.drain_async_eq();
        }
        let mut n = 0;
        while n < out.len() {
            match self.next_async_event() {
                Some(raw) => {
                    out[n] = AsyncEvent::from_raw(raw);
                    n += 1;
                }
                None => break,
            }
        }
        if n == out.len() && self.async_event_queued() {
            // Keep the descriptor readable while events wait (the kernel's async
            // event file is readable while its list is non-empty).
            if let Some(fd) = self.async_event_fd() {
                super::channel::signal_eventfd(fd);
            }
        }
        if n < out.len() {
            if let Some(failure) = self.failure() {
                if !self
                    .event_state()
                    .fatal_reported
                    .swap(true, Ordering::AcqRel)
                {
                    out[n] = AsyncEvent::DeviceFatal { failure };
                    n += 1;
                }
            }
        }
        n
    }

    /// The async EQ's MSI-X eventfd (vector 0), where the bus offers one: readable
    /// once the device has written an EQE to the async EQ since the driver last
    /// consumed it, and while events wait in the context's queue.
    /// [`Context::try_get_async_event`] clears it when it hands out the last one. The descriptor belongs to
    /// the bus: do not close it.
    pub fn async_event_fd(&self) -> Option<i32> {
        self.bus().irq_eventfd(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_events_map_to_typed_ones() {
        let q = |t: EventType, n| RawEvent::Queue {
            event_type: t as u8,
            resource: 0,
            number: n,
        };
        assert_eq!(
            AsyncEvent::from_raw(q(EventType::WqCatasError, 7)),
            AsyncEvent::QpFatal { qpn: 7 }
        );
        assert_eq!(
            AsyncEvent::from_raw(q(EventType::WqAccessError, 8)),
            AsyncEvent::QpAccessError { qpn: 8 }
        );
        assert_eq!(
            AsyncEvent::from_raw(q(EventType::WqInvalReqError, 9)).qpn(),
            Some(9)
        );
        assert_eq!(
            AsyncEvent::from_raw(q(EventType::SrqRqLimit, 3)),
            AsyncEvent::SrqLimitReached { srqn: 3 }
        );
        assert_eq!(
            AsyncEvent::from_raw(RawEvent::PortChange {
                port: 1,
                sub_type: 1
            }),
            AsyncEvent::PortError { port: 1 }
        );
        assert_eq!(
            AsyncEvent::from_raw(RawEvent::PortChange {
                port: 2,
                sub_type: 4
            }),
            AsyncEvent::PortActive { port: 2 }
        );
        assert!(AsyncEvent::QpFatal { qpn: 1 }.is_qp_error());
        assert!(!AsyncEvent::PortActive { port: 1 }.is_qp_error());
    }

    #[test]
    fn vectors_are_handed_out_once() {
        let s = EventState::default();
        let got: Vec<u16> = std::iter::from_fn(|| s.take_vector()).collect();
        assert_eq!(got, (1..64).collect::<Vec<u16>>());
        s.put_vector(5);
        assert_eq!(s.take_vector(), Some(5));
        assert_eq!(s.take_vector(), None);
    }
}

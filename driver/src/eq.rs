//! Event queues.
//!
//! An EQ is a ring of 64-byte EQEs in host memory that the device writes (Linux
//! `device.h` `struct mlx5_eqe`). Software sets every entry's owner byte to 1 before
//! `CREATE_EQ`; the entry at consumer counter `cc` belongs to software when
//! `owner & 1 == (cc >> log_size) & 1` (the device flips the value it writes on every
//! pass). After seeing a valid owner bit the driver issues a read barrier before
//! reading the body, consumes the entry, and publishes its consumer counter through
//! the UAR doorbell: `(eqn << 24) | cc` at UAR + 0x40 to update and arm, at + 0x48 to
//! update only. During a long pass the counter is published (unarmed) well before
//! the 128 spare entries are used up, or the device would see an overrun.
//!
//! The driver's one EQ is the async EQ: command completions (type 0x0a), page
//! requests (0x0b) and the asynchronous events of queues and ports. This module also
//! services page requests while the device runs (see `Hca::service_page_requests`).

use std::sync::Arc;

use ferroverbs_hw::{Bus, DmaPerm};

use crate::dma::DmaBuf;
use crate::error::Result;
use crate::regs;

use ferroverbs_hw::datapath::eqe::{eqe_sw_owned, Eqe, MLX5_EQE_OWNER_INIT_VAL};
pub use ferroverbs_hw::datapath::eqe::{EventType, EQE_SIZE, MLX5_NUM_SPARE_EQE as NUM_SPARE_EQE};

/// Offset of the owner byte in an EQE.
const EQE_OWNER: usize = core::mem::offset_of!(Eqe, owner);

/// The async EQ's `event_bitmask[0]`: Linux's `MLX5_ASYNC_EVENT_MASK` plus the
/// command-completion and page-request events rdma-core's VFIO driver subscribes.
pub fn async_event_mask() -> u64 {
    use EventType::*;
    [
        PathMig,
        CommEst,
        SqDrained,
        CqError,
        WqCatasError,
        PathMigFailed,
        WqInvalReqError,
        WqAccessError,
        PortChange,
        SrqCatasError,
        SrqLastWqe,
        SrqRqLimit,
        Cmd,
        PageRequest,
    ]
    .iter()
    .fold(0, |m, t| m | t.mask_bit())
}

/// An asynchronous event reported by the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncEvent {
    /// A port changed state (`sub_type`: 1 down, 4 active, 5 initialized, ...).
    PortChange {
        /// Port number (1-based).
        port: u8,
        /// The `MLX5_PORT_CHANGE_SUBTYPE_*` value.
        sub_type: u8,
    },
    /// A CQ overran or hit an error.
    CqError {
        /// The CQ number.
        cqn: u32,
        /// The error syndrome.
        syndrome: u8,
    },
    /// An event on a QP, RQ, SQ or SRQ (`event_type` says which).
    Queue {
        /// The event type (`MLX5_EVENT_TYPE_*`).
        event_type: u8,
        /// Resource type (0 QP, 1 RQ, 2 SQ, 6 DCT; for SRQ events the SRQ type).
        resource: u8,
        /// The queue number.
        number: u32,
    },
    /// Any other event type.
    Other {
        /// The event type.
        event_type: u8,
        /// The sub-type byte.
        sub_type: u8,
    },
    /// The health watchdog found a new non-fatal syndrome in the health buffer
    /// (`health.synd` without the RFR bit): not an EQE, queued with them.
    HealthReport {
        /// `health.synd`.
        synd: u8,
        /// `health.ext_synd`.
        ext_synd: u16,
    },
}

/// A decoded EQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// Command completion: a bitmask of completed slots.
    Cmd {
        /// Bit *i* set: slot *i* completed.
        vector: u32,
    },
    /// The firmware wants `num_pages` more pages (negative: it returns pages).
    PageRequest {
        /// `function_id` to answer with.
        func_id: u16,
        /// Embedded-CPU function bit of `ec_function`.
        ec_function: bool,
        /// Pages asked for (> 0) or offered back (< 0).
        num_pages: i32,
    },
    /// A completion event for a CQ (not expected on the async EQ).
    Completion {
        /// The CQ number.
        cqn: u32,
    },
    /// Anything else.
    Async(AsyncEvent),
}

impl Event {
    /// Decodes an EQE. Total over every 64-byte value: device bytes never panic.
    pub(crate) fn decode(bytes: &[u8; EQE_SIZE]) -> Event {
        // Same size, both unaligned plain bytes: checked at compile time.
        let eqe: &Eqe = zerocopy::transmute_ref!(bytes);
        let ty = eqe.event_type();
        let sub_type = eqe.sub_type;
        match eqe.event() {
            Some(EventType::Cmd) => Event::Cmd {
                vector: eqe.cmd().vector(),
            },
            Some(EventType::PageRequest) => {
                let r = eqe.page_req();
                Event::PageRequest {
                    ec_function: r.ec_function(),
                    func_id: r.func_id(),
                    num_pages: r.num_pages(),
                }
            }
            Some(EventType::Comp) => Event::Completion {
                cqn: eqe.comp().cqn(),
            },
            Some(EventType::PortChange) => Event::Async(AsyncEvent::PortChange {
                port: eqe.port().port_num(),
                sub_type,
            }),
            Some(EventType::CqError) => Event::Async(AsyncEvent::CqError {
                cqn: eqe.cq_err().cqn(),
                syndrome: eqe.cq_err().syndrome,
            }),
            Some(t) if t.is_qp_srq_event() => Event::Async(AsyncEvent::Queue {
                event_type: ty,
                resource: eqe.qp_srq().resource_type(),
                number: eqe.qp_srq().qp_srq_n(),
            }),
            _ => Event::Async(AsyncEvent::Other {
                event_type: ty,
                sub_type,
            }),
        }
    }
}

/// An event queue's host side: the EQE ring and the consumer counter.
pub(crate) struct EventQueue<B: Bus> {
    bus: Arc<B>,
    buf: DmaBuf<B>,
    log_size: u8,
    cc: u32,
    eqn: u8,
    /// BAR0 offset of the UAR page whose doorbells this EQ uses.
    uar: usize,
    unpublished: u32,
}

impl<B: Bus> EventQueue<B> {
    /// Allocates a ring of `1 << log_size` EQEs with every owner byte set to 1
    /// (`MLX5_EQE_OWNER_INIT_VAL`), ready for `CREATE_EQ`.
    pub(crate) fn new(bus: &Arc<B>, log_size: u8) -> Result<Self> {
        let nent = 1usize << log_size;
        let buf = DmaBuf::new(bus, nent * EQE_SIZE, DmaPerm::RW)?;
        for i in 0..nent {
            buf.write_u8(i * EQE_SIZE + EQE_OWNER, MLX5_EQE_OWNER_INIT_VAL);
        }
        Ok(EventQueue {
            bus: Arc::clone(bus),
            buf,
            log_size,
            cc: 0,
            eqn: 0,
            uar: 0,
            unpublished: 0,
        })
    }

    /// log2 of the number of entries.
    pub(crate) fn log_size(&self) -> u8 {
        self.log_size
    }

    /// The IOVAs of the ring's 4 KiB pages, for the `pas` list of `CREATE_EQ`.
    pub(crate) fn pas(&self) -> Vec<u64> {
        (0..self.buf.len() / crate::dma::PAGE_SIZE)
            .map(|i| self.buf.iova() + (i * crate::dma::PAGE_SIZE) as u64)
            .collect()
    }

    /// Records the EQ number the firmware assigned and the UAR index of its
    /// doorbells.
    pub(crate) fn activate(&mut self, eqn: u8, uar_index: u32) {
        self.eqn = eqn;
        self.uar = regs::uar_bar_offset(uar_index);
    }

    /// The EQ number.
    pub(crate) fn eqn(&self) -> u8 {
        self.eqn
    }

    /// The consumer counter.
    pub(crate) fn consumer_counter(&self) -> u32 {
        self.cc
    }

    /// Takes the next software-owned EQE, if any.
    pub(crate) fn next(&mut self) -> Option<[u8; EQE_SIZE]> {
        let nent = 1u32 << self.log_size;
        let off = (self.cc & (nent - 1)) as usize * EQE_SIZE;
        let owner = self.buf.load_u8_acquire(off + EQE_OWNER);
        if !eqe_sw_owned(owner, self.cc, nent) {
            return None;
        }
        self.bus.rmb();
        let mut eqe = [0u8; EQE_SIZE];
        self.buf.read_bytes(off, &mut eqe);
        self.cc = self.cc.wrapping_add(1);
        self.unpublished += 1;
        if self.unpublished >= NUM_SPARE_EQE / 2 {
            self.doorbell(false);
        }
        Some(eqe)
    }

    /// Publishes the consumer counter and arms the EQ (one interrupt for the next
    /// EQE).
    pub(crate) fn arm(&mut self) {
        self.doorbell(true);
    }

    fn doorbell(&mut self, arm: bool) {
        let v = regs::eq_doorbell_value(self.eqn, self.cc);
        self.bus.wmb();
        self.bus
            .write32(self.uar + regs::eq_doorbell_offset(arm), v);
        self.unpublished = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroverbs_hw::MemBus;

    const EQE_TYPE: usize = 0x01;
    const EQE_SUB_TYPE: usize = 0x03;
    const EQE_DATA: usize = 0x20;

    /// Plays the device: writes an EQE at `idx` for pass `pass`.
    fn post(eq: &EventQueue<MemBus>, idx: usize, pass: u32, ty: u8, data: &[u8]) {
        let off = idx * EQE_SIZE;
        eq.buf.write_u8(off + EQE_TYPE, ty);
        eq.buf.write_bytes(off + EQE_DATA, data);
        eq.buf.store_u8_release(off + EQE_OWNER, (pass & 1) as u8);
    }

    #[test]
    fn owner_rule_across_wraps_and_doorbells() {
        let bus = Arc::new(MemBus::new(3 * 4096));
        let mut eq = EventQueue::new(&bus, 2).unwrap();
        eq.activate(7, 2);
        assert_eq!(eq.pas().len(), 1);
        assert!(eq.next().is_none(), "fresh ring is hardware-owned");
        eq.arm();
        assert_eq!(bus.read32(2 * 4096 + 0x40), 0x0700_0000);
        for round in 0..3u32 {
            for i in 0..4usize {
                let v = (round * 4 + i as u32).to_be_bytes();
                post(&eq, i, round, EventType::Cmd as u8, &v);
                let e = eq.next().expect("posted");
                assert_eq!(
                    Event::decode(&e),
                    Event::Cmd {
                        vector: round * 4 + i as u32
                    }
                );
                assert!(eq.next().is_none());
            }
        }
        assert_eq!(eq.consumer_counter(), 12);
        eq.arm();
        assert_eq!(bus.read32(2 * 4096 + 0x40), 0x0700_000c);
    }

    #[test]
    fn decodes_page_requests_and_async_events() {
        let mut e = [0u8; 64];
        e[EQE_TYPE] = EventType::PageRequest as u8;
        e[EQE_DATA..EQE_DATA + 8].copy_from_slice(&[0x80, 0, 0, 3, 0xff, 0xff, 0xff, 0xf6]);
        assert_eq!(
            Event::decode(&e),
            Event::PageRequest {
                func_id: 3,
                ec_function: true,
                num_pages: -10
            }
        );
        let mut p = [0u8; 64];
        p[EQE_TYPE] = EventType::PortChange as u8;
        p[EQE_SUB_TYPE] = 4;
        p[EQE_DATA + 8] = 0x10;
        assert_eq!(
            Event::decode(&p),
            Event::Async(AsyncEvent::PortChange {
                port: 1,
                sub_type: 4
            })
        );
        let mut q = [0u8; 64];
        q[EQE_TYPE] = EventType::WqCatasError as u8;
        q[EQE_DATA + 0x18..EQE_DATA + 0x1c].copy_from_slice(&0xff12_3456u32.to_be_bytes());
        assert_eq!(
            Event::decode(&q),
            Event::Async(AsyncEvent::Queue {
                event_type: EventType::WqCatasError as u8,
                resource: 0,
                number: 0x12_3456
            })
        );
        // Any garbage decodes without panicking.
        for t in 0..=255u8 {
            let mut g = [0xa5u8; 64];
            g[EQE_TYPE] = t;
            let _ = Event::decode(&g);
        }
        assert_eq!(async_event_mask() & 0xc00, 0xc00);
    }

    #[test]
    fn long_passes_publish_the_counter_before_the_spares_run_out() {
        let bus = Arc::new(MemBus::new(2 * 4096));
        let mut eq = EventQueue::new(&bus, 8).unwrap();
        eq.activate(1, 1);
        for i in 0..100usize {
            post(&eq, i, 0, EventType::PortChange as u8, &[0; 28]);
            eq.next().unwrap();
        }
        // Published unarmed at 64 consumed entries.
        assert_eq!(bus.read32(4096 + 0x48), 0x0100_0040);
        assert_eq!(bus.read32(4096 + 0x40), 0);
    }
}

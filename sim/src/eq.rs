//! Event queues as the device runs them: the ring of 64-byte EQEs in host memory,
//! the producer and consumer counters, arming, and the MSI-X vector.
//!
//! Facts (`mlx5-controlpath.md` §5; Linux `eq.c`, `struct mlx5_eqe`):
//!
//! * EQE *i* lives at byte `(i & (nent - 1)) * 64` of the buffer described by the PAS
//!   list (pages of `4096 << log_page_size` bytes).
//! * Software initialises every `owner` byte to 1; the entry at consumer counter `ci`
//!   is valid when `owner & 1 == (ci >> log_nent) & 1`. The device therefore writes
//!   `owner = (pi >> log_nent) & 1`: 0 on the first pass, 1 on the second, ...
//! * The body of an EQE is written before its owner byte.
//! * The doorbell in the EQ's UAR page takes `(eqn << 24) | ci`: at offset 0x40 it
//!   updates the consumer counter *and arms* the EQ, at 0x48 it only updates it.
//! * An armed EQ raises its MSI-X vector (`eqc.intr`) once for the next EQE, then sits
//!   in FIRED until re-armed. Arming while unconsumed EQEs are pending fires at once
//!   (inferred from the CQ arming semantics; without it an event that raced the arm
//!   would be lost).
//! * With `nent` entries outstanding (`pi - ci == nent`) the EQ is full; a further
//!   event overruns it. Unless `oi` (overrun ignore) is set, the device drops the event,
//!   marks the EQ's status `EQ_WRITE_FAILURE` (0xa) and counts the overrun.

use ferroverbs_hw::datapath::eqe::{eqe_hw_owner_bit, Eqe, EQE_SIZE};
use zerocopy::FromZeros;

use crate::iommu::{Access, Iommu, IommuFault};

/// Counters are 24 bits wide in the eqc and the doorbell.
const COUNTER_MASK: u32 = 0x00ff_ffff;

/// eqc `st` value: armed.
pub const EQ_STATE_ARMED: u8 = 0x9;
/// eqc `st` value: fired.
pub const EQ_STATE_FIRED: u8 = 0xa;
/// eqc `status` value: an EQE could not be written.
pub const EQ_STATUS_WRITE_FAILURE: u8 = 0xa;

/// What happened to an event offered to an EQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Posted {
    /// Written; `Some(vector)` if the EQ was armed and its vector must fire.
    Written(Option<u16>),
    /// The EQ was full: the event was dropped.
    Overrun,
    /// The EQE could not be written to host memory (IOMMU fault).
    Fault(IommuFault),
}

/// A doorbell's consumer counter was not one this EQ produced (ahead of the producer
/// counter, or more than a ring behind it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterAhead {
    /// The consumer counter written.
    pub ci: u32,
    /// The producer counter at the time.
    pub pi: u32,
}

/// The device side of one event queue.
#[derive(Clone, Debug)]
pub struct EqRing {
    /// log2 of the number of EQEs.
    pub log_size: u8,
    /// Page addresses (IOVAs) of the buffer.
    pub pages: Vec<u64>,
    /// log2 of the page size, minus 12.
    pub log_page_size: u8,
    /// Offset of the first EQE in the first page, in bytes.
    pub offset: u64,
    /// Producer counter (EQEs written), 24 bits.
    pub pi: u32,
    /// Consumer counter (from the doorbell), 24 bits.
    pub ci: u32,
    /// Armed: the next EQE fires the vector.
    pub armed: bool,
    /// MSI-X vector.
    pub intr: u16,
    /// UAR page whose doorbell drives this EQ.
    pub uar: u32,
    /// Subscribed event types (`event_bitmask`, bit *t* of word *t / 64*).
    pub mask: [u64; 4],
    /// Overrun ignore.
    pub oi: bool,
    /// eqc `status` (0 OK, [`EQ_STATUS_WRITE_FAILURE`]).
    pub status: u8,
    /// Events dropped because the EQ was full.
    pub overruns: u64,
    /// Times the vector fired.
    pub fired: u64,
}

impl EqRing {
    /// Number of EQEs.
    pub fn nent(&self) -> u32 {
        1u32 << self.log_size
    }

    /// Whether the EQ subscribed to event type `ty`.
    pub fn subscribed(&self, ty: u8) -> bool {
        let word = usize::from(ty / 64);
        self.mask[word] & (1u64 << (ty % 64)) != 0
    }

    /// The eqc `st` value.
    pub fn state(&self) -> u8 {
        if self.armed {
            EQ_STATE_ARMED
        } else {
            EQ_STATE_FIRED
        }
    }

    /// EQEs written and not yet consumed.
    pub fn outstanding(&self) -> u32 {
        self.pi.wrapping_sub(self.ci) & COUNTER_MASK
    }

    /// The IOVA of EQE number `index` (a counter value).
    fn eqe_iova(&self, index: u32) -> Option<u64> {
        let slot = u64::from(index & (self.nent() - 1));
        let page_size = 4096u64 << self.log_page_size;
        let byte = self.offset + slot * EQE_SIZE as u64;
        let page = self.pages.get(usize::try_from(byte / page_size).ok()?)?;
        Some(page + byte % page_size)
    }

    /// Writes an event of type `ty` with `data` (at most 28 bytes, the
    /// `struct mlx5_eqe` payload) at the producer index, owner bit last.
    pub fn post(&mut self, io: &Iommu, ty: u8, sub_type: u8, data: &[u8]) -> Posted {
        if self.outstanding() >= self.nent() {
            self.overruns += 1;
            if !self.oi {
                self.status = EQ_STATUS_WRITE_FAILURE;
            }
            return Posted::Overrun;
        }
        let Some(iova) = self.eqe_iova(self.pi) else {
            self.status = EQ_STATUS_WRITE_FAILURE;
            return Posted::Fault(IommuFault::NotMapped {
                iova: 0,
                len: EQE_SIZE,
                access: Access::Write,
            });
        };
        let mut eqe = Eqe::new_zeroed();
        eqe.r#type = ty;
        eqe.sub_type = sub_type;
        eqe.set_data(data);
        eqe.owner = eqe_hw_owner_bit(self.pi, self.nent());
        let bytes = eqe.as_bytes();
        // Body first, then the owner byte (the iommu orders each write after the
        // previous one with a release fence).
        if let Err(e) = io.write(iova, &bytes[..EQE_SIZE - 1]) {
            self.status = EQ_STATUS_WRITE_FAILURE;
            return Posted::Fault(e);
        }
        if let Err(e) = io.write(iova + EQE_SIZE as u64 - 1, &bytes[EQE_SIZE - 1..]) {
            self.status = EQ_STATUS_WRITE_FAILURE;
            return Posted::Fault(e);
        }
        self.pi = (self.pi + 1) & COUNTER_MASK;
        Posted::Written(self.fire_if_armed())
    }

    fn fire_if_armed(&mut self) -> Option<u16> {
        if self.armed && self.outstanding() > 0 {
            self.armed = false;
            self.fired += 1;
            Some(self.intr)
        } else {
            None
        }
    }

    /// A doorbell write: consumer counter `ci`, and arm if `arm`. Returns the vector to
    /// fire if arming found unconsumed EQEs. A counter that runs ahead of the producer
    /// is ignored (returns `Err`).
    pub fn doorbell(&mut self, ci: u32, arm: bool) -> Result<Option<u16>, CounterAhead> {
        let ci = ci & COUNTER_MASK;
        // ci may trail pi by at most nent; anything else is not a counter this EQ gave.
        if self.pi.wrapping_sub(ci) & COUNTER_MASK > self.nent() {
            return Err(CounterAhead { ci, pi: self.pi });
        }
        self.ci = ci;
        if arm {
            self.armed = true;
            return Ok(self.fire_if_armed());
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroverbs_hw::DmaPerm;

    fn ring(io: &Iommu, buf: &mut [u8], log_size: u8) -> (EqRing, u64) {
        let iova = io
            .map(buf.as_mut_ptr() as usize, buf.len(), DmaPerm::RW)
            .unwrap();
        let pages = (0..buf.len() as u64 / 4096)
            .map(|i| iova + i * 4096)
            .collect();
        (
            EqRing {
                log_size,
                pages,
                log_page_size: 0,
                offset: 0,
                pi: 0,
                ci: 0,
                armed: false,
                intr: 3,
                uar: 1,
                mask: [1 << 0x0a, 0, 0, 0],
                oi: false,
                status: 0,
                overruns: 0,
                fired: 0,
            },
            iova,
        )
    }

    #[test]
    fn owner_bit_alternates_per_pass_and_body_is_written() {
        let io = Iommu::new();
        let mut buf = vec![0u8; 4096];
        // Software initialises every owner byte to 1.
        for e in buf.chunks_mut(64).take(4) {
            e[63] = 1;
        }
        let (mut eq, iova) = ring(&io, &mut buf, 2);
        assert!(eq.subscribed(0x0a));
        assert!(!eq.subscribed(0x0b));
        for i in 0..4u32 {
            assert_eq!(
                eq.post(&io, 0x0a, 0, &[0, 0, 0, 1 << i]),
                Posted::Written(None)
            );
        }
        assert_eq!(eq.post(&io, 0x0a, 0, &[]), Posted::Overrun);
        assert_eq!(eq.status, EQ_STATUS_WRITE_FAILURE);
        eq.status = 0;
        assert_eq!(eq.doorbell(4, false), Ok(None));
        assert_eq!(eq.post(&io, 0x0b, 7, &[9]), Posted::Written(None));
        io.unmap(iova, 4096).unwrap();
        // First pass: owner 0; entry 0 was overwritten on the second pass: owner 1.
        assert_eq!(buf[63], 1);
        assert_eq!(buf[1], 0x0b);
        assert_eq!(buf[3], 7);
        assert_eq!(buf[0x20], 9);
        for i in 1..4 {
            let e = &buf[i * 64..(i + 1) * 64];
            assert_eq!(e[63], 0, "entry {i}");
            assert_eq!(e[1], 0x0a);
            assert_eq!(e[0x23], 1 << i);
        }
    }

    #[test]
    fn arming_fires_once() {
        let io = Iommu::new();
        let mut buf = vec![0u8; 4096];
        let (mut eq, iova) = ring(&io, &mut buf, 3);
        assert_eq!(eq.doorbell(0, true), Ok(None));
        assert_eq!(eq.state(), EQ_STATE_ARMED);
        assert_eq!(eq.post(&io, 0x0a, 0, &[]), Posted::Written(Some(3)));
        assert_eq!(eq.state(), EQ_STATE_FIRED);
        assert_eq!(eq.post(&io, 0x0a, 0, &[]), Posted::Written(None));
        // Re-arming with events pending fires at once.
        assert_eq!(eq.doorbell(1, true), Ok(Some(3)));
        // Consumed everything, armed: quiet until the next event.
        assert_eq!(eq.doorbell(2, true), Ok(None));
        assert_eq!(eq.post(&io, 0x0a, 0, &[]), Posted::Written(Some(3)));
        assert_eq!(eq.fired, 3);
        // A consumer counter ahead of the producer is refused.
        assert_eq!(eq.doorbell(100, true), Err(CounterAhead { ci: 100, pi: 3 }));
        io.unmap(iova, 4096).unwrap();
    }

    #[test]
    fn unmapped_buffer_is_a_fault_not_a_panic() {
        let io = Iommu::new();
        let mut buf = vec![0u8; 4096];
        let (mut eq, iova) = ring(&io, &mut buf, 2);
        io.unmap(iova, 4096).unwrap();
        assert!(matches!(eq.post(&io, 0x0a, 0, &[]), Posted::Fault(_)));
        assert_eq!(eq.pi, 0);
        eq.pages.clear();
        assert!(matches!(eq.post(&io, 0x0a, 0, &[]), Posted::Fault(_)));
    }
}

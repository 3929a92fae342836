//! What the data path hands to the firmware before a query command reports it:
//! QUERY_CQ's producer and consumer counters (and MODIFY_CQ's, whose resize checks
//! them), QUERY_VPORT_COUNTER's device counts.
//!
//! The counting itself is done where the events happen (one add each): the engine's
//! [`DataPathStats`](super::DataPathStats), the QP's Q counter set
//! ([`Firmware::q_counts`]) and the IOMMU's DMA byte totals.

use ferroverbs_hw::control::cmd::{self, Opcode};
use ferroverbs_hw::control::cq::{cqc, modify_cq_in, query_cq_in};

use super::Engine;
use crate::firmware::counters::DeviceCounts;
use crate::firmware::Firmware;
use crate::iommu::Iommu;
use crate::link::RxQueue;

/// Called with every command input right before the firmware executes it: for
/// QUERY_CQ, writes the CQ's producer counter (CQEs written) and the consumer counter
/// software last published into the firmware's image of its context; for
/// QUERY_VPORT_COUNTER, hands over the data path's counters.
pub fn export(engine: &Engine, fw: &mut Firmware, io: &Iommu, rx: &RxQueue, input: &[u8]) {
    let Ok(op) = cmd::opcode(input) else { return };
    if op == Opcode::QueryCq.value() {
        if !query_cq_in::cqn.fits(input.len()) {
            return;
        }
        let cqn = query_cq_in::cqn.get(input) as u32;
        let Some(rt) = engine.cq(cqn) else { return };
        let (pi, ci) = (rt.pi, rt.consumer_index(io));
        if let Some(cq) = fw.cq_mut(cqn) {
            let img = &mut cq.cqc;
            if cqc::producer_counter.fits(img.len()) {
                cqc::producer_counter.set(img, u64::from(pi));
                if let Some(ci) = ci {
                    cqc::consumer_counter.set(img, u64::from(ci));
                }
            }
        }
    } else if op == Opcode::ModifyCq.value() {
        // A resize checks the unpolled CQEs: the producer counter (0 before the data
        // path wrote any CQE) and the consumer counter of the doorbell record.
        if !modify_cq_in::cqn.fits(input.len()) {
            return;
        }
        let cqn = modify_cq_in::cqn.get(input) as u32;
        let pi = engine.cq(cqn).map_or(0, |rt| rt.pi);
        if let Some(cq) = fw.cq_mut(cqn) {
            let ci = io.read_be32(cq.dbr).ok().map(|v| v & 0x00ff_ffff);
            let img = &mut cq.cqc;
            if cqc::producer_counter.fits(img.len()) {
                cqc::producer_counter.set(img, u64::from(pi));
                if let Some(ci) = ci {
                    cqc::consumer_counter.set(img, u64::from(ci));
                }
            }
        }
    } else if op == Opcode::QueryVportCounter.value() {
        fw.note_device_counters(DeviceCounts {
            dp: engine.stats(),
            rx_queue_full: rx.dropped(),
            ..DeviceCounts::default()
        });
    }
}

//! [`AnyBus`]: the simulator's bus or VFIO's behind one type, used by the drop-in
//! libibverbs and the uAPI layer alike.

use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use ferroverbs_hw::bus::Block64;
use ferroverbs_hw::{Bus, BusError, DmaPerm};

use crate::vfio::VfioBus;

/// Either bus, the simulator's (`S`, the simulator crate's bus: the driver does not
/// depend on the simulator) or VFIO's, so that one set of verbs serves both kinds of NIC. (One exists per
/// process: the size of the larger variant does not matter, an indirection on every
/// register access would.)
#[allow(clippy::large_enum_variant)]
pub enum AnyBus<S> {
    /// The simulator.
    Sim(S),
    /// VFIO.
    Vfio(VfioBus),
}

macro_rules! each {
    ($self:ident, $b:ident => $e:expr) => {
        match $self {
            AnyBus::Sim($b) => $e,
            AnyBus::Vfio($b) => $e,
        }
    };
}

impl<S: Bus> Bus for AnyBus<S> {
    fn bar0_len(&self) -> usize {
        each!(self, b => b.bar0_len())
    }
    fn read32(&self, off: usize) -> u32 {
        each!(self, b => b.read32(off))
    }
    fn write32(&self, off: usize, value: u32) {
        each!(self, b => b.write32(off, value))
    }
    fn write64(&self, off: usize, value: u64) {
        each!(self, b => b.write64(off, value))
    }
    fn write_block64(&self, off: usize, block: &Block64) {
        each!(self, b => b.write_block64(off, block))
    }
    fn direct_reg(&self, off: usize, len: usize) -> Option<NonNull<AtomicU64>> {
        each!(self, b => b.direct_reg(off, len))
    }
    fn blueflame(&self) -> bool {
        each!(self, b => b.blueflame())
    }
    fn scatter_to_cqe_pays(&self) -> bool {
        each!(self, b => b.scatter_to_cqe_pays())
    }
    fn wmb(&self) {
        each!(self, b => b.wmb())
    }
    /// VFIO's barrier for either bus, without the dispatch (`lfence` on x86-64, as
    /// rdma-core's `udma_from_device_barrier`): it orders at least what the
    /// simulator's does (an acquire fence), and the poll path then loads no bus.
    #[inline(always)]
    fn rmb(&self) {
        crate::vfio::rmb()
    }
    fn dma_map(&self, vaddr: usize, len: usize, perm: DmaPerm) -> Result<u64, BusError> {
        each!(self, b => b.dma_map(vaddr, len, perm))
    }
    fn dma_map_on_demand(&self, vaddr: usize, len: usize, perm: DmaPerm) -> Result<u64, BusError> {
        each!(self, b => b.dma_map_on_demand(vaddr, len, perm))
    }
    fn dma_unmap(&self, iova: u64, len: usize) -> Result<(), BusError> {
        each!(self, b => b.dma_unmap(iova, len))
    }
    fn irq_eventfd(&self, vector: u16) -> Option<i32> {
        each!(self, b => b.irq_eventfd(vector))
    }
}

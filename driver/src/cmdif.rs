//! The command interface: command queue entries and mailbox chains.
//!
//! The command queue is one 4 KiB DMA page whose address the driver writes to the
//! init segment; it holds `1 << log_cmdq_size` entries of `1 << log_cmdq_stride`
//! bytes (both read from `cmdq_addr_l_sz`). An entry (`struct mlx5_cmd_layout`, Linux
//! `device.h`, 64 bytes) carries the first 16 bytes of the input and output inline;
//! the rest travels in chains of 576-byte mailbox blocks (`struct
//! mlx5_cmd_prot_block`), 512 data bytes each, linked by `next` and numbered from 0
//! by `block_num`. Chains are built back to front so each block's `next` is known
//! when it is written, and every block carries the entry's token.
//!
//! Posting: fill the entry and chains, set `status_own = 1` (hardware owns it), write
//! barrier, ring bit *slot* of the doorbell (0x18). Completion: the device clears the
//! owner bit, after setting the delivery status in bits 7..1, and (once an EQ
//! subscribed to command completions exists) posts a command-completion EQE with the
//! slot's bit. The driver checks the delivery status, copies the output back and
//! checks the command status in the output header.
//!
//! `CmdIf` is the queue itself; the loop that waits for completion (polled or by
//! event), services page requests meanwhile and enforces the timeout is
//! `Hca::exec`.

use std::sync::Arc;
use std::time::Duration;

use ferroverbs_hw::{Bus, DmaPerm};

use crate::dma::{DmaBuf, PAGE_SIZE};
use crate::error::{CmdError, CmdStatus, DeliveryStatus, Error, Failure, Opcode, Result};
use crate::regs;

pub use ferroverbs_hw::control::cmdq::{blocks_for, INLINE_LEN};
use ferroverbs_hw::control::cmdq::{
    CmdLayout, CmdProtBlock, CmdqGeometry, GeometryError, CMD_LAYOUT_SIZE, CMD_PROT_BLOCK_SIZE,
    MLX5_CMD_DATA_BLOCK_SIZE, MLX5_PCI_CMD_XPORT,
};

/// Data bytes per mailbox block (`MLX5_CMD_DATA_BLOCK_SIZE`).
pub const BLOCK_DATA: usize = MLX5_CMD_DATA_BLOCK_SIZE;
/// Size of a mailbox block (`struct mlx5_cmd_prot_block`).
pub const BLOCK_SIZE: usize = CMD_PROT_BLOCK_SIZE;
/// Distance between blocks in a chain's memory: Linux allocates blocks 1024-byte
/// aligned (`roundup_pow_of_two(576)`).
pub const BLOCK_STRIDE: usize = BLOCK_SIZE.next_power_of_two();

/// Offsets inside a command queue entry (`struct mlx5_cmd_layout`).
mod entry {
    use super::CmdLayout;
    use core::mem::offset_of;
    pub const TYPE: usize = offset_of!(CmdLayout, type_);
    pub const INLEN: usize = offset_of!(CmdLayout, inlen);
    pub const IN_PTR: usize = offset_of!(CmdLayout, in_ptr);
    pub const IN: usize = offset_of!(CmdLayout, in_);
    pub const OUT: usize = offset_of!(CmdLayout, out);
    pub const OUT_PTR: usize = offset_of!(CmdLayout, out_ptr);
    pub const OUTLEN: usize = offset_of!(CmdLayout, outlen);
    pub const TOKEN: usize = offset_of!(CmdLayout, token);
    pub const STATUS_OWN: usize = offset_of!(CmdLayout, status_own);
    pub const SIZE: usize = super::CMD_LAYOUT_SIZE;
}

/// Offsets inside a mailbox block (`struct mlx5_cmd_prot_block`).
mod block {
    use super::CmdProtBlock;
    use core::mem::offset_of;
    pub const NEXT: usize = offset_of!(CmdProtBlock, next);
    pub const BLOCK_NUM: usize = offset_of!(CmdProtBlock, block_num);
    pub const TOKEN: usize = offset_of!(CmdProtBlock, token);
    pub const CTRL_SIG: usize = offset_of!(CmdProtBlock, ctrl_sig);
    pub const SIG: usize = offset_of!(CmdProtBlock, sig);
}

/// Reads the opcode and `op_mod` of a command input (generic header `mbox_in`).
pub fn header_of(input: &[u8]) -> (u16, u16) {
    let op = u16::from_be_bytes([input[0], input[1]]);
    let op_mod = u16::from_be_bytes([input[6], input[7]]);
    (op, op_mod)
}

/// A chain of mailbox blocks in one DMA buffer, reused across commands and grown on
/// demand.
struct Chain<B: Bus> {
    buf: Option<DmaBuf<B>>,
}

impl<B: Bus> Chain<B> {
    fn capacity(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.len() / BLOCK_STRIDE)
    }

    /// Makes room for `n` blocks, links them back to front with their numbers and the
    /// token, and clears their data. Returns the IOVA of block 0 (0 for no blocks).
    fn prepare(&mut self, bus: &Arc<B>, n: usize, token: u8) -> Result<u64> {
        if n == 0 {
            return Ok(0);
        }
        if self.capacity() < n {
            // Drop the old chain first: it is unmapped and freed, then a bigger one
            // is mapped.
            self.buf = None;
            let bytes = (n * BLOCK_STRIDE).div_ceil(PAGE_SIZE) * PAGE_SIZE;
            let b = DmaBuf::new(bus, bytes, DmaPerm::RW)?;
            if b.iova() % BLOCK_STRIDE as u64 != 0 {
                return Err(Error::Misaligned {
                    what: "mailbox chain",
                    iova: b.iova(),
                });
            }
            self.buf = Some(b);
        }
        let buf = self.buf.as_ref().expect("allocated above");
        let base = buf.iova();
        for i in (0..n).rev() {
            let off = i * BLOCK_STRIDE;
            buf.fill(off, BLOCK_SIZE, 0);
            let next = if i + 1 < n {
                base + ((i + 1) * BLOCK_STRIDE) as u64
            } else {
                0
            };
            buf.write_be64(off + block::NEXT, next);
            buf.write_be32(off + block::BLOCK_NUM, i as u32);
            buf.write_u8(off + block::TOKEN, token);
            buf.write_u8(off + block::CTRL_SIG, 0);
            buf.write_u8(off + block::SIG, 0);
        }
        Ok(base)
    }

    /// Copies `data` (the message bytes after the inline part) into the blocks.
    fn scatter(&self, data: &[u8]) {
        if let Some(buf) = &self.buf {
            for (i, chunk) in data.chunks(BLOCK_DATA).enumerate() {
                buf.write_bytes(i * BLOCK_STRIDE, chunk);
            }
        }
    }

    /// Copies the blocks' data into `out` (the message bytes after the inline part).
    fn gather(&self, out: &mut [u8]) {
        if let Some(buf) = &self.buf {
            for (i, chunk) in out.chunks_mut(BLOCK_DATA).enumerate() {
                buf.read_bytes(i * BLOCK_STRIDE, chunk);
            }
        }
    }
}

/// What a command slot is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    Free,
    Busy,
    /// The command timed out while the device still owned the entry. The slot (and
    /// its mailboxes, which the device may still write) stays reserved until the
    /// device lets go of it.
    Abandoned,
}

struct Slot<B: Bus> {
    state: SlotState,
    inbox: Chain<B>,
    outbox: Chain<B>,
}

/// Which slots a command may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotClass {
    /// Ordinary commands: every slot but the last.
    Regular,
    /// `MANAGE_PAGES` answering a page request, issued while an ordinary command is
    /// outstanding: the last slot, kept free for it (as Linux and rdma-core do).
    Pages,
}

/// A posted command.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) slot: usize,
    pub(crate) opcode: u16,
    pub(crate) op_mod: u16,
    pub(crate) out_len: usize,
    pub(crate) posted_at: Duration,
}

/// The command queue.
pub(crate) struct CmdIf<B: Bus> {
    bus: Arc<B>,
    page: DmaBuf<B>,
    log_size: u8,
    log_stride: u8,
    slots: Vec<Slot<B>>,
    token: u8,
}

/// The command queue geometry read from the init segment.
pub(crate) type Geometry = CmdqGeometry;

/// Reads and validates `cmdif_rev` and the queue geometry (Linux `mlx5_cmd_init`,
/// rdma-core `mlx5_vfio_init_cmd_interface`).
pub(crate) fn read_geometry<B: Bus>(bus: &B) -> Result<Geometry> {
    if bus.read32(regs::HEALTH_FW_VER) == u32::MAX && bus.read32(regs::FW_REV) == u32::MAX {
        return Err(Error::DeviceFailed(Failure::Vanished));
    }
    let rev = regs::cmdif_rev(bus.read32(regs::CMDIF_REV_FW_SUB));
    if rev != regs::CMD_IF_REV {
        return Err(Error::UnsupportedCmdifRev { found: rev });
    }
    CmdqGeometry::from_reg(bus.read32(regs::CMDQ_ADDR_L_SZ))
        .validate()
        .map_err(|e: GeometryError| Error::BadCmdqGeometry(e))
}

impl<B: Bus> CmdIf<B> {
    /// Allocates the command queue page and writes its address to the init segment
    /// (`cmdq_addr_h` first, then `cmdq_addr_l_sz` with the low 12 bits clear, which
    /// also selects the FULL_DRIVER NIC interface), followed by a write barrier.
    pub(crate) fn new(bus: &Arc<B>, geo: Geometry) -> Result<Self> {
        let page = DmaBuf::new(bus, PAGE_SIZE, DmaPerm::RW)?;
        let iova = page.iova();
        if iova % PAGE_SIZE as u64 != 0 {
            return Err(Error::Misaligned {
                what: "command queue",
                iova,
            });
        }
        let n = geo.entries();
        let slots = (0..n)
            .map(|_| Slot {
                state: SlotState::Free,
                inbox: Chain { buf: None },
                outbox: Chain { buf: None },
            })
            .collect();
        bus.write32(regs::CMDQ_ADDR_H, (iova >> 32) as u32);
        bus.write32(regs::CMDQ_ADDR_L_SZ, iova as u32 & !0xfff);
        bus.wmb();
        Ok(CmdIf {
            bus: Arc::clone(bus),
            page,
            log_size: geo.log_size,
            log_stride: geo.log_stride,
            slots,
            token: 0,
        })
    }

    /// Number of entries.
    pub(crate) fn entries(&self) -> usize {
        1 << self.log_size
    }

    /// The slot reserved for page-request answers.
    fn pages_slot(&self) -> usize {
        self.entries() - 1
    }

    fn entry_off(&self, slot: usize) -> usize {
        slot << self.log_stride
    }

    /// Whether the device has let go of the entry (owner bit clear).
    pub(crate) fn owner_clear(&self, slot: usize) -> bool {
        let st = self
            .page
            .load_u8_acquire(self.entry_off(slot) + entry::STATUS_OWN);
        st & 1 == 0
    }

    /// Slots with a command in flight, as a bitmask.
    pub(crate) fn busy_mask(&self) -> u32 {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state == SlotState::Busy)
            .fold(0, |m, (i, _)| m | 1 << i)
    }

    /// Frees abandoned slots the device has since completed.
    fn reclaim_abandoned(&mut self) {
        for i in 0..self.slots.len() {
            if self.slots[i].state == SlotState::Abandoned && self.owner_clear(i) {
                tracing::debug!(slot = i, "abandoned command slot released by the device");
                self.slots[i].state = SlotState::Free;
            }
        }
    }

    fn next_token(&mut self) -> u8 {
        // A nonzero token that changes with every command (Linux `alloc_token`).
        self.token = self.token.wrapping_add(1);
        if self.token == 0 {
            self.token = 1;
        }
        self.token
    }

    /// Posts a command: `input` is the whole input message (generic header first),
    /// `out_len` the whole output length expected.
    pub(crate) fn post(
        &mut self,
        class: SlotClass,
        input: &[u8],
        out_len: usize,
        now: Duration,
    ) -> Result<Pending> {
        if input.len() < INLINE_LEN || out_len < INLINE_LEN {
            return Err(Error::InvalidArgument {
                what: "command input and output are at least 16 bytes",
            });
        }
        self.reclaim_abandoned();
        let pages = self.pages_slot();
        let candidates = match class {
            SlotClass::Regular if pages > 0 => 0..pages,
            _ => pages..pages + 1,
        };
        let slot = candidates
            .clone()
            .find(|&i| self.slots[i].state == SlotState::Free)
            .ok_or(Error::NoFreeSlot)?;
        let token = self.next_token();
        let (opcode, op_mod) = header_of(input);

        let in_blocks = blocks_for(input.len());
        let out_blocks = blocks_for(out_len);
        let bus = Arc::clone(&self.bus);
        let s = &mut self.slots[slot];
        let in_ptr = s.inbox.prepare(&bus, in_blocks, token)?;
        s.inbox.scatter(&input[INLINE_LEN..]);
        let out_ptr = s.outbox.prepare(&bus, out_blocks, token)?;

        let e = self.entry_off(slot);
        let page = &self.page;
        page.fill(e, entry::SIZE, 0);
        page.write_u8(e + entry::TYPE, MLX5_PCI_CMD_XPORT);
        page.write_be32(e + entry::INLEN, input.len() as u32);
        page.write_be64(e + entry::IN_PTR, in_ptr);
        page.write_bytes(e + entry::IN, &input[..INLINE_LEN]);
        page.write_be64(e + entry::OUT_PTR, out_ptr);
        page.write_be32(e + entry::OUTLEN, out_len as u32);
        page.write_u8(e + entry::TOKEN, token);
        // Hardware owns the entry from here on.
        page.store_u8_release(e + entry::STATUS_OWN, 1);
        self.slots[slot].state = SlotState::Busy;
        self.bus.wmb();
        self.bus.write32(regs::CMD_DBELL, 1 << slot);
        Ok(Pending {
            slot,
            opcode,
            op_mod,
            out_len,
            posted_at: now,
        })
    }

    /// Gives up on a command that did not complete: its slot stays reserved until the
    /// device releases it.
    pub(crate) fn abandon(&mut self, p: &Pending) {
        self.slots[p.slot].state = SlotState::Abandoned;
    }

    /// Reads the result of a completed command (owner bit clear): delivery status,
    /// output, command status. Frees the slot.
    pub(crate) fn finish(&mut self, p: &Pending) -> Result<Vec<u8>> {
        self.bus.rmb();
        let e = self.entry_off(p.slot);
        let status_own = self.page.read_u8(e + entry::STATUS_OWN);
        self.slots[p.slot].state = SlotState::Free;
        let delivery = status_own >> 1;
        if delivery != 0 {
            return Err(Error::Delivery {
                opcode: Opcode(p.opcode),
                op_mod: p.op_mod,
                status: DeliveryStatus::from_raw(delivery),
            });
        }
        let mut out = vec![0u8; p.out_len];
        self.page.read_bytes(e + entry::OUT, &mut out[..INLINE_LEN]);
        self.slots[p.slot].outbox.gather(&mut out[INLINE_LEN..]);
        let status = out[0];
        if status != 0 {
            return Err(Error::Cmd(CmdError {
                opcode: Opcode(p.opcode),
                op_mod: p.op_mod,
                status: CmdStatus::from_raw(status),
                syndrome: u32::from_be_bytes([out[4], out[5], out[6], out[7]]),
            }));
        }
        Ok(out)
    }

    /// Whether any slot is held by a command the device never completed.
    pub(crate) fn has_abandoned(&mut self) -> bool {
        self.reclaim_abandoned();
        self.slots.iter().any(|s| s.state == SlotState::Abandoned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroverbs_hw::MemBus;

    /// A MemBus whose init segment says cmdif 5, 32 entries of 64 bytes.
    fn bus() -> Arc<MemBus> {
        let bus = Arc::new(MemBus::new(0x2000));
        bus.write32(regs::CMDIF_REV_FW_SUB, 5 << 16);
        bus.write32(regs::CMDQ_ADDR_L_SZ, 0x56);
        bus
    }

    /// Reads `len` bytes of host memory at an identity-mapped IOVA (MemBus maps
    /// IOVA = host address), going through a DmaBuf-free path: the test plays the
    /// device by walking the chain from the entry, as firmware would.
    fn device_gather(q: &CmdIf<MemBus>, slot: usize) -> (Vec<u8>, Vec<(u32, u8)>) {
        let e = q.entry_off(slot);
        let inlen = q.page.read_be32(e + entry::INLEN) as usize;
        let mut msg = vec![0u8; INLINE_LEN];
        q.page.read_bytes(e + entry::IN, &mut msg);
        let mut blocks = Vec::new();
        let mut ptr = q.page.read_be64(e + entry::IN_PTR);
        let chain = q.slots[slot].inbox.buf.as_ref();
        while ptr != 0 {
            let c = chain.expect("chain exists");
            let off = (ptr - c.iova()) as usize;
            let mut data = vec![0u8; BLOCK_DATA];
            c.read_bytes(off, &mut data);
            msg.extend_from_slice(&data);
            blocks.push((
                c.read_be32(off + block::BLOCK_NUM),
                c.read_u8(off + block::TOKEN),
            ));
            ptr = c.read_be64(off + block::NEXT);
        }
        msg.truncate(inlen);
        (msg, blocks)
    }

    /// Plays the device completing `slot` with `out` (scattered into the out chain).
    fn device_complete(q: &CmdIf<MemBus>, slot: usize, out: &[u8], delivery: u8) {
        let e = q.entry_off(slot);
        q.page.write_bytes(e + entry::OUT, &out[..INLINE_LEN]);
        let mut ptr = q.page.read_be64(e + entry::OUT_PTR);
        let chain = q.slots[slot].outbox.buf.as_ref();
        let mut rest = &out[INLINE_LEN..];
        let mut n = 0;
        while ptr != 0 {
            let c = chain.expect("chain exists");
            let off = (ptr - c.iova()) as usize;
            assert_eq!(c.read_be32(off + block::BLOCK_NUM), n);
            let take = rest.len().min(BLOCK_DATA);
            c.write_bytes(off, &rest[..take]);
            rest = &rest[take..];
            ptr = c.read_be64(off + block::NEXT);
            n += 1;
        }
        assert!(rest.is_empty(), "output chain too short");
        q.page
            .store_u8_release(e + entry::STATUS_OWN, delivery << 1);
    }

    #[test]
    fn geometry_is_validated() {
        let b = bus();
        let g = read_geometry(&*b).unwrap();
        assert_eq!((g.log_size, g.log_stride), (5, 6));
        b.write32(regs::CMDIF_REV_FW_SUB, 4 << 16);
        assert!(matches!(
            read_geometry(&*b),
            Err(Error::UnsupportedCmdifRev { found: 4 })
        ));
        b.write32(regs::CMDIF_REV_FW_SUB, 5 << 16);
        b.write32(regs::CMDQ_ADDR_L_SZ, 0x67);
        assert!(matches!(
            read_geometry(&*b),
            Err(Error::BadCmdqGeometry { .. })
        ));
        let gone = MemBus::new(0);
        assert!(matches!(
            read_geometry(&gone),
            Err(Error::DeviceFailed(Failure::Vanished))
        ));
    }

    #[test]
    fn queue_address_and_doorbell() {
        let b = bus();
        let geo = read_geometry(&*b).unwrap();
        let mut q = CmdIf::new(&b, geo).unwrap();
        let iova = q.page.iova();
        assert_eq!(b.read32(regs::CMDQ_ADDR_H), (iova >> 32) as u32);
        assert_eq!(b.read32(regs::CMDQ_ADDR_L_SZ), iova as u32 & !0xfff);
        let mut input = [0u8; 16];
        input[..2].copy_from_slice(&0x104u16.to_be_bytes());
        let p = q
            .post(SlotClass::Regular, &input, 16, Duration::ZERO)
            .unwrap();
        assert_eq!(p.slot, 0);
        assert_eq!(b.read32(regs::CMD_DBELL), 1);
        let e = q.entry_off(0);
        assert_eq!(q.page.read_u8(e + entry::TYPE), 7);
        assert_eq!(q.page.read_be32(e + entry::INLEN), 16);
        assert_eq!(q.page.read_be64(e + entry::IN_PTR), 0, "no blocks");
        assert_eq!(q.page.read_u8(e + entry::STATUS_OWN), 1);
        assert_ne!(q.page.read_u8(e + entry::TOKEN), 0);
        assert!(!q.owner_clear(0));
        assert_eq!(q.busy_mask(), 1);
        // A second command takes the next slot; a page answer the last one.
        let p2 = q
            .post(SlotClass::Regular, &input, 16, Duration::ZERO)
            .unwrap();
        assert_eq!(p2.slot, 1);
        let pp = q
            .post(SlotClass::Pages, &input, 16, Duration::ZERO)
            .unwrap();
        assert_eq!(pp.slot, 31);
        assert!(matches!(
            q.post(SlotClass::Pages, &input, 16, Duration::ZERO),
            Err(Error::NoFreeSlot)
        ));
        device_complete(&q, 0, &[0u8; 16], 0);
        assert!(q.owner_clear(0));
        assert_eq!(q.finish(&p).unwrap(), vec![0u8; 16]);
    }

    #[test]
    fn mailboxes_of_one_two_and_many_blocks_round_trip() {
        let b = bus();
        let mut q = CmdIf::new(&b, read_geometry(&*b).unwrap()).unwrap();
        for len in [16usize, 17, 528, 529, 1040, 1041, 16 + 512 * 40 + 7] {
            let input: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let out_len = len + 100;
            let p = q
                .post(SlotClass::Regular, &input, out_len, Duration::ZERO)
                .unwrap();
            let (seen, blocks) = device_gather(&q, p.slot);
            assert_eq!(seen, input, "input of {len} bytes");
            assert_eq!(blocks.len(), blocks_for(len));
            let token = q.page.read_u8(q.entry_off(p.slot) + entry::TOKEN);
            for (i, (num, tok)) in blocks.iter().enumerate() {
                assert_eq!(*num, i as u32, "block numbers count up from 0");
                assert_eq!(*tok, token, "every block carries the token");
            }
            let mut out: Vec<u8> = (0..out_len).map(|i| (i * 13) as u8).collect();
            out[0] = 0;
            device_complete(&q, p.slot, &out, 0);
            assert_eq!(q.finish(&p).unwrap(), out);
        }
    }

    #[test]
    fn statuses_come_back_typed() {
        let b = bus();
        let mut q = CmdIf::new(&b, read_geometry(&*b).unwrap()).unwrap();
        let mut input = [0u8; 16];
        input[..2].copy_from_slice(&0x801u16.to_be_bytes());
        input[6..8].copy_from_slice(&3u16.to_be_bytes());
        let p = q
            .post(SlotClass::Regular, &input, 16, Duration::ZERO)
            .unwrap();
        let mut out = [0u8; 16];
        out[0] = 0x05;
        out[4..8].copy_from_slice(&0xdead_beefu32.to_be_bytes());
        device_complete(&q, p.slot, &out, 0);
        match q.finish(&p) {
            Err(Error::Cmd(c)) => {
                assert_eq!(c.opcode, Opcode(0x801));
                assert_eq!(c.op_mod, 3);
                assert_eq!(c.status, CmdStatus::BadResource);
                assert_eq!(c.syndrome, 0xdead_beef);
            }
            other => panic!("{other:?}"),
        }
        let p = q
            .post(SlotClass::Regular, &input, 16, Duration::ZERO)
            .unwrap();
        device_complete(&q, p.slot, &[0u8; 16], 3);
        assert!(matches!(
            q.finish(&p),
            Err(Error::Delivery {
                status: DeliveryStatus::BadBlockNumber,
                ..
            })
        ));
    }

    #[test]
    fn abandoned_slots_are_skipped_until_released() {
        let b = bus();
        b.write32(regs::CMDQ_ADDR_L_SZ, 0x16); // 2 entries
        let mut q = CmdIf::new(&b, read_geometry(&*b).unwrap()).unwrap();
        let input = [0u8; 16];
        let p = q
            .post(SlotClass::Regular, &input, 16, Duration::ZERO)
            .unwrap();
        q.abandon(&p);
        assert!(q.has_abandoned());
        assert!(matches!(
            q.post(SlotClass::Regular, &input, 16, Duration::ZERO),
            Err(Error::NoFreeSlot)
        ));
        device_complete(&q, p.slot, &[0u8; 16], 0);
        assert!(!q.has_abandoned());
        assert!(q
            .post(SlotClass::Regular, &input, 16, Duration::ZERO)
            .is_ok());
    }
}

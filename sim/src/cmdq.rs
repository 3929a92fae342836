//! The command queue as the device processes it: for each doorbell bit, read the
//! entry, gather the input (16 inline bytes and the `in_ptr` mailbox chain), execute
//! it, scatter the output (16 inline bytes and the `out_ptr` chain), then hand the entry
//! back with `status_own = delivery_status << 1` (`mlx5-controlpath.md` §2, §9 item 2).
//!
//! Every byte is read from and written to host memory through the [`Iommu`], so an
//! unmapped or read-only mailbox is a delivery error, never a crash. The chain walk is
//! bounded by the message length: a chain longer than needed is not followed past the
//! last block the length requires (rdma-core points every command at an 8-block
//! chain), a cycle is caught by the `block_num` sequence check, and lengths above
//! [`MAX_MESSAGE`] are refused before anything is allocated.
//!
//! Delivery status for each transport problem:
//!
//! | problem | delivery status |
//! |---|---|
//! | `type` other than 7 | `CMD_DESCR_ERR` (0x10) |
//! | `inlen` / `outlen` above [`MAX_MESSAGE`] | `IN_LENGTH_ERR` (0x7) / `OUT_LENGTH_ERR` (0x8) |
//! | input (output) block pointer not 512-byte aligned (`next` not 1 KiB aligned, per `cmd_if_box.next_pointer_31_10`), unmapped, or (output) not writable | `IN_PTR_ALIGN_ERR` (0x5) / `OUT_PTR_ALIGN_ERR` (0x4) |
//! | chain shorter than the length needs, `block_num` out of sequence (cycles included) | `BAD_BLK_NUM_ERR` (0x3) |
//! | block `token` differs from the entry's | `TOK_ERR` (0x2) |
//!
//! Signatures are not checked: both drivers disable the command-interface checksum.

use ferroverbs_hw::control::cmd;
use ferroverbs_hw::control::cmdq::{
    gather, scatter, ChainError, CmdLayout, CmdProtBlock, CmdqGeometry, DeliveryStatus,
    CMD_LAYOUT_SIZE, CMD_PROT_BLOCK_SIZE, INLINE_LEN, MLX5_PCI_CMD_XPORT,
};
use zerocopy::{FromBytes, IntoBytes};

use crate::fault::FaultOutcome;
use crate::iommu::{Access, Iommu, IommuFault};

/// Longest input or output message accepted (1 MiB, about 2000 mailbox blocks).
pub const MAX_MESSAGE: usize = 1 << 20;

/// Alignment of the first mailbox block (`input_mailbox_pointer_31_9`).
const FIRST_BLOCK_ALIGN: u64 = 512;
/// Alignment of a chained block (`next_pointer_31_10`).
const NEXT_BLOCK_ALIGN: u64 = 1024;

/// Offset of `out[]` in an entry.
const OUT_INLINE: u64 = 0x20;
/// Offset of `status_own` in an entry.
const STATUS_OWN: u64 = 0x3f;

/// Why a mailbox block could not be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockError {
    /// The block address violates the alignment the PRM's pointer fields imply.
    Misaligned(u64),
    /// The IOMMU refused the access.
    Iommu(IommuFault),
}

/// What the device did with one command slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotResult {
    /// The entry could not be read (the command queue page is not mapped): nothing was
    /// written back.
    Unreadable,
    /// The entry is not owned by hardware (`status_own & 1 == 0`): ignored.
    NotOwned,
    /// The entry was completed with this delivery status; `opcode` and `status` are
    /// known when the input could be gathered and the firmware answered.
    Completed {
        /// Delivery status written to `status_own`.
        delivery: DeliveryStatus,
        /// Opcode of the command, if its input was gathered.
        opcode: Option<u16>,
        /// Command status in the output header, if the command ran.
        status: Option<u8>,
        /// Whether the handing back itself failed (the entry became unwritable).
        lost: bool,
    },
}

/// A command entry read from host memory, gathered and ready to execute.
#[derive(Clone, Debug)]
pub struct Gathered {
    /// The entry as read.
    pub entry: CmdLayout,
    /// IOVA of the entry.
    pub entry_iova: u64,
    /// The whole input message (`inlen` bytes).
    pub input: Vec<u8>,
}

/// IOVA of slot `slot` of the queue at `base`.
pub fn entry_iova(base: u64, geom: CmdqGeometry, slot: usize) -> Option<u64> {
    geom.entry_offset(slot)
        .map(|off| base.wrapping_add(off as u64))
}

/// Reads the entry of a slot; `None` if unreadable.
pub fn read_entry(io: &Iommu, iova: u64) -> Option<CmdLayout> {
    let mut raw = [0u8; CMD_LAYOUT_SIZE];
    io.read(iova, &mut raw).ok()?;
    CmdLayout::read_from_bytes(&raw).ok()
}

fn read_block(
    io: &Iommu,
    addr: u64,
    index: &mut usize,
    access: Access,
) -> Result<CmdProtBlock, BlockError> {
    let align = if *index == 0 {
        FIRST_BLOCK_ALIGN
    } else {
        NEXT_BLOCK_ALIGN
    };
    *index += 1;
    if !addr.is_multiple_of(align) {
        return Err(BlockError::Misaligned(addr));
    }
    if access == Access::Write {
        io.check(addr, CMD_PROT_BLOCK_SIZE, Access::Write)
            .map_err(BlockError::Iommu)?;
    }
    let mut raw = [0u8; CMD_PROT_BLOCK_SIZE];
    io.read(addr, &mut raw).map_err(BlockError::Iommu)?;
    CmdProtBlock::read_from_bytes(&raw).map_err(|_| BlockError::Misaligned(addr))
}

/// Completes an entry: writes `status_own = delivery << 1` (owner 0). Returns `false`
/// if the write faulted.
pub fn complete(io: &Iommu, entry_iova: u64, delivery: DeliveryStatus) -> bool {
    io.write(entry_iova + STATUS_OWN, &[(delivery as u8) << 1])
        .is_ok()
}

/// Step 1: read and check an entry, gather its input, and check that its output
/// chain can take `outlen` bytes. `Err` carries the delivery status to complete with
/// (or the non-delivery reasons [`SlotResult::Unreadable`] / [`SlotResult::NotOwned`]).
pub fn prepare(io: &Iommu, entry_iova: u64) -> Result<Gathered, SlotResult> {
    let entry = read_entry(io, entry_iova).ok_or(SlotResult::Unreadable)?;
    if !entry.hw_owned() {
        return Err(SlotResult::NotOwned);
    }
    let fail = |delivery: DeliveryStatus| SlotResult::Completed {
        delivery,
        opcode: None,
        status: None,
        lost: false,
    };
    if entry.type_ != MLX5_PCI_CMD_XPORT {
        return Err(fail(DeliveryStatus::CmdDescrErr));
    }
    let inlen = entry.inlen.get() as usize;
    let outlen = entry.outlen.get() as usize;
    let token = entry.token;
    let mut index = 0usize;
    let input = gather(
        &entry.in_,
        inlen,
        entry.in_ptr.get(),
        token,
        MAX_MESSAGE,
        |addr| read_block(io, addr, &mut index, Access::Read),
    )
    .map_err(|e: ChainError<BlockError>| fail(e.delivery_status(true)))?;
    // Walk the output chain now, before executing, so that a command with side
    // effects never runs when its answer cannot be delivered.
    let mut index = 0usize;
    gather(
        &entry.out,
        outlen,
        entry.out_ptr.get(),
        token,
        MAX_MESSAGE,
        |addr| read_block(io, addr, &mut index, Access::Write),
    )
    .map_err(|e: ChainError<BlockError>| fail(e.delivery_status(false)))?;
    Ok(Gathered {
        entry,
        entry_iova,
        input,
    })
}

/// Step 2: delivers `output` (the firmware's answer, header included) into the entry's
/// inline `out[]` and output chain, then completes the entry with delivery OK. The
/// message is cut or zero-padded to `outlen` (at least the 16 inline bytes).
pub fn deliver(io: &Iommu, g: &Gathered, output: &[u8]) -> SlotResult {
    let outlen = (g.entry.outlen.get() as usize).max(INLINE_LEN);
    let mut msg = output.to_vec();
    msg.resize(outlen, 0);
    let mut inline = [0u8; INLINE_LEN];
    let mut index = 0usize;
    let r = scatter(
        &msg,
        &mut inline,
        g.entry.out_ptr.get(),
        g.entry.token,
        outlen,
        |addr| read_block(io, addr, &mut index, Access::Write),
        |addr, block| io.write(addr, block.as_bytes()).map_err(BlockError::Iommu),
    );
    let opcode = cmd::opcode(&g.input).ok();
    let status = cmd::status(output).ok();
    let delivery = match r {
        Ok(()) => {
            if io.write(g.entry_iova + OUT_INLINE, &inline).is_err() {
                return SlotResult::Completed {
                    delivery: DeliveryStatus::Ok,
                    opcode,
                    status,
                    lost: true,
                };
            }
            DeliveryStatus::Ok
        }
        // The chain was checked in `prepare`; it can only fail here if the driver
        // changed or unmapped it while the command ran.
        Err(e) => e.delivery_status(false),
    };
    let lost = !complete(io, g.entry_iova, delivery);
    SlotResult::Completed {
        delivery,
        opcode,
        status: (delivery == DeliveryStatus::Ok).then_some(status).flatten(),
        lost,
    }
}

/// Completes an entry with a non-OK delivery status (an injected fault or a
/// transport error found in [`prepare`]).
pub fn fail(
    io: &Iommu,
    entry_iova: u64,
    delivery: DeliveryStatus,
    opcode: Option<u16>,
) -> SlotResult {
    let lost = !complete(io, entry_iova, delivery);
    SlotResult::Completed {
        delivery,
        opcode,
        status: None,
        lost,
    }
}

/// Runs one slot end to end: prepare, apply an injected fault if `fault` yields one,
/// execute with `exec(input, outlen)`, deliver.
pub fn run(
    io: &Iommu,
    entry_iova: u64,
    fault: impl FnOnce(u16, u16) -> Option<FaultOutcome>,
    exec: impl FnOnce(&[u8], usize) -> Vec<u8>,
) -> SlotResult {
    let g = match prepare(io, entry_iova) {
        Ok(g) => g,
        Err(SlotResult::Completed { delivery, .. }) => {
            return fail(io, entry_iova, delivery, None);
        }
        Err(other) => return other,
    };
    let opcode = cmd::opcode(&g.input).ok();
    let op_mod = cmd::op_mod(&g.input).ok();
    if let (Some(op), Some(m)) = (opcode, op_mod) {
        match fault(op, m) {
            Some(FaultOutcome::Delivery(d)) => {
                let d = DeliveryStatus::from_value(d).unwrap_or(DeliveryStatus::FwErr);
                return fail(io, entry_iova, d, opcode);
            }
            Some(FaultOutcome::Status { status, syndrome }) => {
                let mut out = vec![0u8; INLINE_LEN];
                cmd::mbox_out::status.set(&mut out, u64::from(status));
                cmd::mbox_out::syndrome.set(&mut out, u64::from(syndrome));
                return deliver(io, &g, &out);
            }
            None => {}
        }
    }
    let output = exec(&g.input, g.entry.outlen.get() as usize);
    deliver(io, &g, &output)
}

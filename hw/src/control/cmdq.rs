//! The command queue: entries, mailbox blocks and chained messages.
//!
//! The driver programs one 4 KiB DMA page as the command queue (iseg `cmdq_addr_h` /
//! `cmdq_addr_l_sz`); it holds `1 << log_cmdq_size` entries of `1 << log_cmdq_stride`
//! bytes. An entry ([`CmdLayout`], Linux `struct mlx5_cmd_layout`) carries the first 16
//! bytes of the input and of the output inline; the rest of each message travels in a
//! chain of mailbox blocks ([`CmdProtBlock`], `struct mlx5_cmd_prot_block`), 512 payload
//! bytes each, linked by `next` and numbered from 0 by `block_num`.
//!
//! Software fills an entry, sets `status_own` to 1 (hardware owns it) and writes
//! `1 << slot` to the command doorbell; hardware executes the command, scatters the
//! output and writes `status_own = delivery_status << 1`, handing the entry back.
//!
//! Bytes here come from the other side of the bus, so every view has a checked
//! constructor and nothing panics on short or malformed input.

use zerocopy::byteorder::big_endian::{U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::conformance::{CStruct, Header};
use crate::field::TooShort;

c_constants! {
    /// `device.h` command queue constants.
    pub const CONSTANTS;
        /// Most command queue entries any driver uses (and the doorbell vector's width).
        Device MLX5_MAX_COMMANDS: usize = 32;
        /// Payload bytes of one mailbox block.
        Device MLX5_CMD_DATA_BLOCK_SIZE: usize = 512;
        /// The only valid entry `type`: PCI command transport.
        Device MLX5_PCI_CMD_XPORT: u8 = 7;

}

/// Bytes of input and of output carried inline in the entry (`in[4]`, `out[4]`).
pub const INLINE_LEN: usize = 16;

/// The largest `log_cmdq_size + log_cmdq_stride`: the queue must fit in one 4 KiB page.
pub const MAX_LOG_QUEUE_BYTES: u8 = 12;

/// `struct mlx5_cmd_layout` (`device.h`): one command queue entry, 64 bytes, big-endian.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct CmdLayout {
    /// Transport type (`type`), must be [`MLX5_PCI_CMD_XPORT`].
    pub type_: u8,
    /// Reserved.
    pub rsvd0: [u8; 3],
    /// Total input length in bytes (header included).
    pub inlen: U32,
    /// DMA address of the first input mailbox block.
    pub in_ptr: U64,
    /// The first 16 input bytes (`in[4]`): the generic input header.
    pub in_: [u8; INLINE_LEN],
    /// The first 16 output bytes (`out[4]`): the generic output header.
    pub out: [u8; INLINE_LEN],
    /// DMA address of the first output mailbox block.
    pub out_ptr: U64,
    /// Total output length in bytes.
    pub outlen: U32,
    /// Token, repeated in every mailbox block of the command.
    pub token: u8,
    /// Entry signature (checked only with the command-interface checksum enabled).
    pub sig: u8,
    /// Reserved.
    pub rsvd1: u8,
    /// Bit 0: ownership (1 = hardware); bits 7..1: [`DeliveryStatus`].
    pub status_own: u8,
}

/// `struct mlx5_cmd_prot_block` (`device.h`): one mailbox block, 576 bytes, big-endian.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct CmdProtBlock {
    /// Payload: message bytes `16 + 512 * block_num ..`.
    pub data: [u8; MLX5_CMD_DATA_BLOCK_SIZE],
    /// Reserved.
    pub rsvd0: [u8; 48],
    /// DMA address of the next block, 0 in the last one.
    pub next: U64,
    /// Position in the chain, counting from 0.
    pub block_num: U32,
    /// Reserved.
    pub rsvd1: u8,
    /// The command's token.
    pub token: u8,
    /// Signature of the control part.
    pub ctrl_sig: u8,
    /// Signature of the whole block.
    pub sig: u8,
}

/// Size of a command queue entry (64).
pub const CMD_LAYOUT_SIZE: usize = core::mem::size_of::<CmdLayout>();
/// Size of a mailbox block (576).
pub const CMD_PROT_BLOCK_SIZE: usize = core::mem::size_of::<CmdProtBlock>();

/// The C structures of this module.
pub const C_STRUCTS: &[CStruct] = &[
    CStruct {
        header: Header::Device,
        name: "mlx5_cmd_layout",
        size: CMD_LAYOUT_SIZE,
        members: &[
            c_member_as!(CmdLayout, type_, "type"),
            crate::c_member!(CmdLayout, rsvd0),
            crate::c_member!(CmdLayout, inlen),
            crate::c_member!(CmdLayout, in_ptr),
            c_member_as!(CmdLayout, in_, "in"),
            crate::c_member!(CmdLayout, out),
            crate::c_member!(CmdLayout, out_ptr),
            crate::c_member!(CmdLayout, outlen),
            crate::c_member!(CmdLayout, token),
            crate::c_member!(CmdLayout, sig),
            crate::c_member!(CmdLayout, rsvd1),
            crate::c_member!(CmdLayout, status_own),
        ],
    },
    CStruct {
        header: Header::Device,
        name: "mlx5_cmd_prot_block",
        size: CMD_PROT_BLOCK_SIZE,
        members: &[
            crate::c_member!(CmdProtBlock, data),
            crate::c_member!(CmdProtBlock, rsvd0),
            crate::c_member!(CmdProtBlock, next),
            crate::c_member!(CmdProtBlock, block_num),
            crate::c_member!(CmdProtBlock, rsvd1),
            crate::c_member!(CmdProtBlock, token),
            crate::c_member!(CmdProtBlock, ctrl_sig),
            crate::c_member!(CmdProtBlock, sig),
        ],
    },
];

/// The transport-level result hardware writes to `status_own >> 1` (Linux `cmd.c`
/// `MLX5_CMD_DELIVERY_STAT_*`; not in the public headers). Separate from the
/// command's own status in the output header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DeliveryStatus {
    /// Delivered; the output header holds the command's status.
    Ok = 0x0,
    /// Bad entry or block signature.
    SignatErr = 0x1,
    /// Token mismatch between the entry and a mailbox block.
    TokErr = 0x2,
    /// Mailbox blocks out of sequence, or a chain too short for the length.
    BadBlkNumErr = 0x3,
    /// Misaligned output mailbox pointer.
    OutPtrAlignErr = 0x4,
    /// Misaligned input mailbox pointer.
    InPtrAlignErr = 0x5,
    /// Firmware error.
    FwErr = 0x6,
    /// Bad input length.
    InLengthErr = 0x7,
    /// Bad output length.
    OutLengthErr = 0x8,
    /// A reserved field was not clear.
    ResFldNotClrErr = 0x9,
    /// Bad command descriptor (e.g. a `type` other than 7).
    CmdDescrErr = 0x10,
}

impl DeliveryStatus {
    /// Decodes `status_own >> 1`; `None` for an undefined value.
    pub const fn from_value(v: u8) -> Option<Self> {
        Some(match v {
            0x0 => DeliveryStatus::Ok,
            0x1 => DeliveryStatus::SignatErr,
            0x2 => DeliveryStatus::TokErr,
            0x3 => DeliveryStatus::BadBlkNumErr,
            0x4 => DeliveryStatus::OutPtrAlignErr,
            0x5 => DeliveryStatus::InPtrAlignErr,
            0x6 => DeliveryStatus::FwErr,
            0x7 => DeliveryStatus::InLengthErr,
            0x8 => DeliveryStatus::OutLengthErr,
            0x9 => DeliveryStatus::ResFldNotClrErr,
            0x10 => DeliveryStatus::CmdDescrErr,
            _ => return None,
        })
    }
}

/// Exclusive-or of every byte, complemented: the signature both entry and block use.
fn inverted_xor(bytes: &[u8]) -> u8 {
    !bytes.iter().fold(0u8, |acc, b| acc ^ b)
}

fn too_short(layout: &'static str, len: usize, need: usize) -> TooShort {
    TooShort { layout, len, need }
}

impl CmdLayout {
    /// A checked view of the entry at the start of `bytes` (an entry slot may be longer
    /// than 64 bytes when the stride is).
    pub fn from_bytes(bytes: &[u8]) -> Result<&CmdLayout, TooShort> {
        CmdLayout::ref_from_prefix(bytes)
            .map(|(e, _)| e)
            .map_err(|_| too_short("mlx5_cmd_layout", bytes.len(), CMD_LAYOUT_SIZE))
    }

    /// A checked mutable view of the entry at the start of `bytes`.
    pub fn from_bytes_mut(bytes: &mut [u8]) -> Result<&mut CmdLayout, TooShort> {
        let len = bytes.len();
        CmdLayout::mut_from_prefix(bytes)
            .map(|(e, _)| e)
            .map_err(|_| too_short("mlx5_cmd_layout", len, CMD_LAYOUT_SIZE))
    }

    /// An entry ready to post: `type` 7, lengths, mailbox pointers, token, the first 16
    /// input bytes inline (zero-padded), the inline output cleared and `status_own` = 1.
    pub fn new_posted(
        input: &[u8],
        in_ptr: u64,
        outlen: u32,
        out_ptr: u64,
        token: u8,
    ) -> CmdLayout {
        let mut e = CmdLayout::new_zeroed();
        e.type_ = MLX5_PCI_CMD_XPORT;
        e.inlen.set(u32::try_from(input.len()).unwrap_or(u32::MAX));
        e.in_ptr.set(in_ptr);
        let n = input.len().min(INLINE_LEN);
        e.in_[..n].copy_from_slice(&input[..n]);
        e.out_ptr.set(out_ptr);
        e.outlen.set(outlen);
        e.token = token;
        e.status_own = 1;
        e
    }

    /// Whether hardware owns the entry (bit 0 of `status_own`).
    pub fn hw_owned(&self) -> bool {
        self.status_own & 1 != 0
    }

    /// The raw delivery status (`status_own >> 1`).
    pub fn delivery_status_raw(&self) -> u8 {
        self.status_own >> 1
    }

    /// The delivery status, or the raw value when it is undefined.
    pub fn delivery_status(&self) -> Result<DeliveryStatus, u8> {
        let raw = self.delivery_status_raw();
        DeliveryStatus::from_value(raw).ok_or(raw)
    }

    /// Hands the entry back to software with `status` (what hardware does last).
    pub fn complete(&mut self, status: DeliveryStatus) {
        self.status_own = (status as u8) << 1;
    }

    /// The signature of the entry: the complemented XOR of all 64 bytes with `sig` = 0
    /// (what Linux writes; firmware checks it only with `cmdif_checksum` enabled).
    pub fn signature(&self) -> u8 {
        let mut e = *self;
        e.sig = 0;
        inverted_xor(e.as_bytes())
    }

    /// Number of mailbox blocks the input needs.
    pub fn in_blocks(&self) -> usize {
        blocks_for(self.inlen.get() as usize)
    }

    /// Number of mailbox blocks the output needs.
    pub fn out_blocks(&self) -> usize {
        blocks_for(self.outlen.get() as usize)
    }
}

impl CmdProtBlock {
    /// A checked view of the block at the start of `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Result<&CmdProtBlock, TooShort> {
        CmdProtBlock::ref_from_prefix(bytes)
            .map(|(b, _)| b)
            .map_err(|_| too_short("mlx5_cmd_prot_block", bytes.len(), CMD_PROT_BLOCK_SIZE))
    }

    /// A checked mutable view of the block at the start of `bytes`.
    pub fn from_bytes_mut(bytes: &mut [u8]) -> Result<&mut CmdProtBlock, TooShort> {
        let len = bytes.len();
        CmdProtBlock::mut_from_prefix(bytes)
            .map(|(b, _)| b)
            .map_err(|_| too_short("mlx5_cmd_prot_block", len, CMD_PROT_BLOCK_SIZE))
    }

    /// An empty block of a chain: link, number and token set, data zero.
    pub fn new_linked(next: u64, block_num: u32, token: u8) -> CmdProtBlock {
        let mut b = CmdProtBlock::new_zeroed();
        b.next.set(next);
        b.block_num.set(block_num);
        b.token = token;
        b
    }

    /// DMA address of the next block (0 in the last one).
    pub fn next(&self) -> u64 {
        self.next.get()
    }

    /// Position of the block in its chain.
    pub fn block_num(&self) -> u32 {
        self.block_num.get()
    }

    /// The command's token.
    pub fn token(&self) -> u8 {
        self.token
    }

    /// The 512 payload bytes.
    pub fn data(&self) -> &[u8; MLX5_CMD_DATA_BLOCK_SIZE] {
        &self.data
    }

    /// The 512 payload bytes, mutably.
    pub fn data_mut(&mut self) -> &mut [u8; MLX5_CMD_DATA_BLOCK_SIZE] {
        &mut self.data
    }

    /// The control signature: complemented XOR of `rsvd0` through `token`.
    pub fn compute_ctrl_sig(&self) -> u8 {
        let b = self.as_bytes();
        inverted_xor(&b[MLX5_CMD_DATA_BLOCK_SIZE..CMD_PROT_BLOCK_SIZE - 2])
    }

    /// The block signature: complemented XOR of every byte before `sig`.
    pub fn compute_sig(&self) -> u8 {
        inverted_xor(&self.as_bytes()[..CMD_PROT_BLOCK_SIZE - 1])
    }

    /// Sets `ctrl_sig` and then `sig`.
    pub fn seal(&mut self) {
        self.ctrl_sig = self.compute_ctrl_sig();
        self.sig = self.compute_sig();
    }

    /// Whether both signatures are right.
    pub fn signatures_ok(&self) -> bool {
        self.ctrl_sig == self.compute_ctrl_sig() && self.sig == self.compute_sig()
    }
}

/// Number of mailbox blocks a message of `len` bytes needs: the first 16 bytes travel
/// inline, the rest in 512-byte blocks.
pub const fn blocks_for(len: usize) -> usize {
    len.saturating_sub(INLINE_LEN)
        .div_ceil(MLX5_CMD_DATA_BLOCK_SIZE)
}

/// The part of `msg` that mailbox block `index` carries (empty past the end).
pub fn block_chunk(msg: &[u8], index: usize) -> &[u8] {
    let start = INLINE_LEN.saturating_add(index.saturating_mul(MLX5_CMD_DATA_BLOCK_SIZE));
    let end = start
        .saturating_add(MLX5_CMD_DATA_BLOCK_SIZE)
        .min(msg.len());
    msg.get(start..end).unwrap_or(&[])
}

/// The command queue's geometry, from the low byte of `cmdq_addr_l_sz`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmdqGeometry {
    /// log2 of the number of entries.
    pub log_size: u8,
    /// log2 of the entry stride in bytes.
    pub log_stride: u8,
}

/// A command queue geometry both drivers refuse (Linux `mlx5_cmd_init`, rdma-core
/// `mlx5_vfio_init_cmd_interface`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GeometryError {
    /// More than [`MLX5_MAX_COMMANDS`] entries.
    #[error("command queue of 2^{log_size} entries exceeds {max}", max = MLX5_MAX_COMMANDS)]
    TooManyEntries {
        /// The reported log2 size.
        log_size: u8,
    },
    /// The queue does not fit in one 4 KiB page.
    #[error("command queue of 2^{log_size} entries of 2^{log_stride} bytes exceeds a page")]
    TooLarge {
        /// The reported log2 size.
        log_size: u8,
        /// The reported log2 stride.
        log_stride: u8,
    },
    /// An entry stride smaller than an entry.
    #[error("command queue stride 2^{log_stride} is smaller than a 64-byte entry")]
    StrideTooSmall {
        /// The reported log2 stride.
        log_stride: u8,
    },
}

impl CmdqGeometry {
    /// Decodes the low byte of a `cmdq_addr_l_sz` value: size in `[7:4]`, stride in `[3:0]`.
    pub const fn from_reg(cmdq_addr_l_sz: u32) -> Self {
        CmdqGeometry {
            log_size: ((cmdq_addr_l_sz >> 4) & 0xf) as u8,
            log_stride: (cmdq_addr_l_sz & 0xf) as u8,
        }
    }

    /// The low byte of `cmdq_addr_l_sz` that reports this geometry.
    pub const fn to_reg(self) -> u32 {
        ((self.log_size as u32 & 0xf) << 4) | (self.log_stride as u32 & 0xf)
    }

    /// Checks the geometry as the drivers do before using the queue.
    pub fn validate(self) -> Result<Self, GeometryError> {
        if (1usize << self.log_size) > MLX5_MAX_COMMANDS {
            return Err(GeometryError::TooManyEntries {
                log_size: self.log_size,
            });
        }
        if self.log_size + self.log_stride > MAX_LOG_QUEUE_BYTES {
            return Err(GeometryError::TooLarge {
                log_size: self.log_size,
                log_stride: self.log_stride,
            });
        }
        if (1usize << self.log_stride) < CMD_LAYOUT_SIZE {
            return Err(GeometryError::StrideTooSmall {
                log_stride: self.log_stride,
            });
        }
        Ok(self)
    }

    /// Number of entries.
    pub const fn entries(self) -> usize {
        1 << (self.log_size & 0xf)
    }

    /// Entry stride in bytes.
    pub const fn stride(self) -> usize {
        1 << (self.log_stride & 0xf)
    }

    /// Byte offset of entry `slot` in the queue page, `None` past the last entry.
    pub const fn entry_offset(self, slot: usize) -> Option<usize> {
        if slot < self.entries() {
            Some(slot << (self.log_stride & 0xf))
        } else {
            None
        }
    }
}

/// Why a chained message could not be gathered or scattered. `E` is the error of the
/// callback that reads or writes a block (an IOMMU fault, for the simulator).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChainError<E> {
    /// The message is longer than the caller accepts.
    #[error("message of {len} bytes exceeds the {max}-byte limit")]
    TooLong {
        /// Length the entry announced.
        len: usize,
        /// Largest length accepted.
        max: usize,
    },
    /// The chain ended (null pointer) before the message did.
    #[error("mailbox chain ends before block {index}")]
    MissingBlock {
        /// Index of the block that is missing.
        index: u32,
    },
    /// A block carries the wrong `block_num`.
    #[error("mailbox block {index} says it is block {found}")]
    BadBlockNum {
        /// Position in the chain.
        index: u32,
        /// The block's `block_num`.
        found: u32,
    },
    /// A block carries another token than the entry.
    #[error("mailbox block {index} has token {found:#x}, the entry {expected:#x}")]
    BadToken {
        /// Position in the chain.
        index: u32,
        /// The entry's token.
        expected: u8,
        /// The block's token.
        found: u8,
    },
    /// The callback failed to read or write a block.
    #[error("mailbox block at {addr:#x}: {source}")]
    Access {
        /// DMA address of the block.
        addr: u64,
        /// The callback's error.
        source: E,
    },
}

impl<E> ChainError<E> {
    /// The delivery status that reports this error for an input (`is_input`) or output
    /// chain.
    pub fn delivery_status(&self, is_input: bool) -> DeliveryStatus {
        match self {
            ChainError::TooLong { .. } if is_input => DeliveryStatus::InLengthErr,
            ChainError::TooLong { .. } => DeliveryStatus::OutLengthErr,
            ChainError::MissingBlock { .. } | ChainError::BadBlockNum { .. } => {
                DeliveryStatus::BadBlkNumErr
            }
            ChainError::BadToken { .. } => DeliveryStatus::TokErr,
            ChainError::Access { .. } if is_input => DeliveryStatus::InPtrAlignErr,
            ChainError::Access { .. } => DeliveryStatus::OutPtrAlignErr,
        }
    }
}

/// Walks a mailbox chain from `first`, checking each block's number and token, and
/// calls `visit` with each block's index and contents. Stops after `blocks` blocks.
fn walk<E>(
    first: u64,
    blocks: usize,
    token: u8,
    read: &mut impl FnMut(u64) -> Result<CmdProtBlock, E>,
    mut visit: impl FnMut(u64, usize, CmdProtBlock) -> Result<(), ChainError<E>>,
) -> Result<(), ChainError<E>> {
    let mut addr = first;
    for index in 0..blocks {
        let idx32 = u32::try_from(index).unwrap_or(u32::MAX);
        if addr == 0 {
            return Err(ChainError::MissingBlock { index: idx32 });
        }
        let block = read(addr).map_err(|source| ChainError::Access { addr, source })?;
        if block.block_num() != idx32 {
            return Err(ChainError::BadBlockNum {
                index: idx32,
                found: block.block_num(),
            });
        }
        if block.token() != token {
            return Err(ChainError::BadToken {
                index: idx32,
                expected: token,
                found: block.token(),
            });
        }
        let next = block.next();
        visit(addr, index, block)?;
        addr = next;
    }
    Ok(())
}

/// Gathers a message of `len` bytes: 16 inline bytes, then the data of the chain that
/// starts at `first`, read block by block through `read`. Blocks must be numbered
/// 0, 1, ... and carry `token`. A `len` above `max_len` is refused before anything is
/// read or allocated.
pub fn gather<E>(
    inline: &[u8; INLINE_LEN],
    len: usize,
    first: u64,
    token: u8,
    max_len: usize,
    mut read: impl FnMut(u64) -> Result<CmdProtBlock, E>,
) -> Result<Vec<u8>, ChainError<E>> {
    if len > max_len {
        return Err(ChainError::TooLong { len, max: max_len });
    }
    let mut msg = Vec::with_capacity(len);
    msg.extend_from_slice(&inline[..len.min(INLINE_LEN)]);
    walk(first, blocks_for(len), token, &mut read, |_, _, block| {
        let take = (len - msg.len()).min(MLX5_CMD_DATA_BLOCK_SIZE);
        msg.extend_from_slice(&block.data[..take]);
        Ok(())
    })?;
    Ok(msg)
}

/// Scatters `msg`: its first 16 bytes into `inline`, the rest into the data of the chain
/// that starts at `first` (each block is read through `read`, checked, filled and
/// written back through `write`; the data beyond the message is zeroed). A message
/// longer than `max_len` (the output length the entry allows) is refused.
pub fn scatter<E>(
    msg: &[u8],
    inline: &mut [u8; INLINE_LEN],
    first: u64,
    token: u8,
    max_len: usize,
    mut read: impl FnMut(u64) -> Result<CmdProtBlock, E>,
    mut write: impl FnMut(u64, &CmdProtBlock) -> Result<(), E>,
) -> Result<(), ChainError<E>> {
    if msg.len() > max_len {
        return Err(ChainError::TooLong {
            len: msg.len(),
            max: max_len,
        });
    }
    let n = msg.len().min(INLINE_LEN);
    inline.fill(0);
    inline[..n].copy_from_slice(&msg[..n]);
    walk(
        first,
        blocks_for(msg.len()),
        token,
        &mut read,
        |addr, index, mut block| {
            let chunk = block_chunk(msg, index);
            block.data.fill(0);
            block.data[..chunk.len()].copy_from_slice(chunk);
            write(addr, &block).map_err(|source| ChainError::Access { addr, source })
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn sizes_and_offsets() {
        assert_eq!(CMD_LAYOUT_SIZE, 64);
        assert_eq!(CMD_PROT_BLOCK_SIZE, 576);
        let e = C_STRUCTS[0].members;
        let off = |n: &str| e.iter().find(|m| m.name == n).map(|m| (m.offset, m.size));
        assert_eq!(off("type"), Some((0x00, 1)));
        assert_eq!(off("inlen"), Some((0x04, 4)));
        assert_eq!(off("in_ptr"), Some((0x08, 8)));
        assert_eq!(off("in"), Some((0x10, 16)));
        assert_eq!(off("out"), Some((0x20, 16)));
        assert_eq!(off("out_ptr"), Some((0x30, 8)));
        assert_eq!(off("outlen"), Some((0x38, 4)));
        assert_eq!(off("token"), Some((0x3c, 1)));
        assert_eq!(off("status_own"), Some((0x3f, 1)));
        let b = C_STRUCTS[1].members;
        let off = |n: &str| b.iter().find(|m| m.name == n).map(|m| m.offset);
        assert_eq!(off("next"), Some(0x230));
        assert_eq!(off("block_num"), Some(0x238));
        assert_eq!(off("token"), Some(0x23d));
        assert_eq!(off("ctrl_sig"), Some(0x23e));
        assert_eq!(off("sig"), Some(0x23f));
    }

    #[test]
    fn entry_bytes_are_big_endian() {
        let input = [
            0x01, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x2a, 0, 0, 0, 0, 0xee,
        ];
        let e = CmdLayout::new_posted(&input, 0x1122_3344_5566_7000, 0x10, 0xabc000, 9);
        let b = e.as_bytes();
        assert_eq!(b[0], 7);
        assert_eq!(&b[4..8], &[0, 0, 0, 17]);
        assert_eq!(&b[8..16], &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x70, 0x00]);
        assert_eq!(&b[0x10..0x20], &input[..16]);
        assert_eq!(&b[0x30..0x38], &[0, 0, 0, 0, 0, 0xab, 0xc0, 0]);
        assert_eq!(&b[0x38..0x3c], &[0, 0, 0, 0x10]);
        assert_eq!(b[0x3c], 9);
        assert_eq!(b[0x3f], 1);
        assert!(e.hw_owned());
        assert_eq!(e.in_blocks(), 1);
    }

    #[test]
    fn completion_and_delivery_status() {
        let mut raw = [0u8; 128];
        raw[0x3f] = 1;
        let e = CmdLayout::from_bytes_mut(&mut raw).unwrap();
        assert!(e.hw_owned());
        e.complete(DeliveryStatus::BadBlkNumErr);
        assert!(!e.hw_owned());
        assert_eq!(e.delivery_status(), Ok(DeliveryStatus::BadBlkNumErr));
        assert_eq!(raw[0x3f], 0x06);
        raw[0x3f] = 0x7e;
        let e = CmdLayout::from_bytes(&raw).unwrap();
        assert_eq!(e.delivery_status(), Err(0x3f));
        assert_eq!(
            CmdLayout::from_bytes(&raw[..63]).unwrap_err(),
            TooShort {
                layout: "mlx5_cmd_layout",
                len: 63,
                need: 64
            }
        );
        assert!(CmdProtBlock::from_bytes(&[0u8; 575]).is_err());
    }

    #[test]
    fn signatures() {
        let mut e = CmdLayout::new_posted(&[1, 2, 3], 0, 16, 0, 1);
        e.sig = e.signature();
        // With the right signature the XOR of all bytes is 0xff.
        assert_eq!(e.as_bytes().iter().fold(0u8, |a, b| a ^ b), 0xff);
        let mut b = CmdProtBlock::new_linked(0x1000, 3, 0x5a);
        b.data[7] = 0x42;
        assert!(!b.signatures_ok());
        b.seal();
        assert!(b.signatures_ok());
        let bytes = b.as_bytes();
        assert_eq!(bytes[0x200..0x23f].iter().fold(0u8, |a, x| a ^ x), 0xff);
        assert_eq!(bytes.iter().fold(0u8, |a, x| a ^ x), 0xff);
    }

    #[test]
    fn geometry() {
        let g = CmdqGeometry::from_reg(0xabcd_e056);
        assert_eq!(
            g,
            CmdqGeometry {
                log_size: 5,
                log_stride: 6
            }
        );
        assert_eq!(g.to_reg(), 0x56);
        assert_eq!(g.validate(), Ok(g));
        assert_eq!(g.entries(), 32);
        assert_eq!(g.stride(), 64);
        assert_eq!(g.entry_offset(31), Some(31 * 64));
        assert_eq!(g.entry_offset(32), None);
        assert!(matches!(
            CmdqGeometry::from_reg(0x66).validate(),
            Err(GeometryError::TooManyEntries { log_size: 6 })
        ));
        assert!(matches!(
            CmdqGeometry::from_reg(0x58).validate(),
            Err(GeometryError::TooLarge { .. })
        ));
        assert!(matches!(
            CmdqGeometry::from_reg(0x25).validate(),
            Err(GeometryError::StrideTooSmall { log_stride: 5 })
        ));
    }

    #[test]
    fn block_math() {
        assert_eq!(blocks_for(0), 0);
        assert_eq!(blocks_for(16), 0);
        assert_eq!(blocks_for(17), 1);
        assert_eq!(blocks_for(16 + 512), 1);
        assert_eq!(blocks_for(16 + 513), 2);
        // QUERY_HCA_CAP output: 4112 bytes = 16 inline + 8 blocks.
        assert_eq!(blocks_for(4112), 8);
        let msg: Vec<u8> = (0..600u32).map(|i| i as u8).collect();
        assert_eq!(block_chunk(&msg, 0).len(), 512);
        assert_eq!(block_chunk(&msg, 0)[0], 16);
        assert_eq!(block_chunk(&msg, 1).len(), 600 - 528);
        assert!(block_chunk(&msg, 2).is_empty());
        assert!(block_chunk(&msg, usize::MAX).is_empty());
    }

    /// A fake DMA space of mailbox blocks.
    struct Chain(HashMap<u64, CmdProtBlock>);

    impl Chain {
        fn new(addrs: &[u64], token: u8) -> Self {
            let mut m = HashMap::new();
            for (i, &a) in addrs.iter().enumerate() {
                let next = addrs.get(i + 1).copied().unwrap_or(0);
                m.insert(a, CmdProtBlock::new_linked(next, i as u32, token));
            }
            Chain(m)
        }
        fn read(&self, a: u64) -> Result<CmdProtBlock, &'static str> {
            self.0.get(&a).copied().ok_or("fault")
        }
    }

    #[test]
    fn scatter_then_gather_round_trips() {
        let msg: Vec<u8> = (0..1100u32).map(|i| (i * 7) as u8).collect();
        let mut chain = Chain::new(&[0x1000, 0x3000, 0x2000], 4);
        let mut inline = [0u8; 16];
        let snapshot = Chain(chain.0.clone());
        let mut written = Vec::new();
        scatter(
            &msg,
            &mut inline,
            0x1000,
            4,
            4096,
            |a| snapshot.read(a),
            |a, b| {
                written.push(a);
                chain.0.insert(a, *b);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(written, [0x1000, 0x3000, 0x2000]);
        assert_eq!(&inline, &msg[..16]);
        let back = gather(&inline, msg.len(), 0x1000, 4, 4096, |a| chain.read(a)).unwrap();
        assert_eq!(back, msg);
        // Only 16 bytes: no block is touched.
        let short = gather(&inline, 8, 0, 4, 4096, |_| Err("no")).unwrap();
        assert_eq!(short, &msg[..8]);
    }

    #[test]
    fn gather_reports_broken_chains() {
        let inline = [0u8; 16];
        let chain = Chain::new(&[0x1000], 1);
        let e = gather(&inline, 16 + 600, 0x1000, 1, 4096, |a| chain.read(a)).unwrap_err();
        assert_eq!(e, ChainError::MissingBlock { index: 1 });
        assert_eq!(e.delivery_status(true), DeliveryStatus::BadBlkNumErr);
        let e = gather(&inline, 100, 0x1000, 2, 4096, |a| chain.read(a)).unwrap_err();
        assert_eq!(e.delivery_status(true), DeliveryStatus::TokErr);
        let e = gather(&inline, 100, 0x2000, 1, 4096, |a| chain.read(a)).unwrap_err();
        assert!(matches!(e, ChainError::Access { addr: 0x2000, .. }));
        let e = gather(&inline, usize::MAX, 0x1000, 1, 4096, |a| chain.read(a)).unwrap_err();
        assert_eq!(e.delivery_status(true), DeliveryStatus::InLengthErr);
        let mut swapped = Chain::new(&[0x1000, 0x2000], 1);
        swapped.0.get_mut(&0x2000).unwrap().block_num.set(5);
        let e = gather(&inline, 16 + 600, 0x1000, 1, 4096, |a| swapped.read(a)).unwrap_err();
        assert_eq!(e, ChainError::BadBlockNum { index: 1, found: 5 });
        // A chain that loops back on itself ends when the length is reached.
        let mut looped = Chain::new(&[0x1000], 1);
        looped.0.get_mut(&0x1000).unwrap().next.set(0x1000);
        let e = gather(&inline, 16 + 600, 0x1000, 1, 4096, |a| looped.read(a)).unwrap_err();
        assert_eq!(e, ChainError::BadBlockNum { index: 1, found: 0 });
    }
}

//! The completion queue consumer (`mlx5-datapath.md` §5.1, §5.4, §7.3, §8.4).
//!
//! The CQ is a ring of `ncqe` entries (a power of two) of 64 or 128 bytes; the
//! [`Cqe64`] is the entry's last 64 bytes. Software starts every entry as
//! [`CQE_OP_OWN_INIT`] ([`CompletionQueue::init_entries`]). Polling consumer index `n`
//! reads the `op_own` byte of entry `n & (ncqe - 1)`, stops unless [`sw_owned`] holds
//! (opcode not INVALID and owner bit = wrap parity of `n`), issues [`Bus::rmb`], then
//! copies the entry out and increments `n`. After a batch the doorbell record word
//! [`MLX5_CQ_SET_CI`](ferroverbs_hw::datapath::dbr::MLX5_CQ_SET_CI) gets
//! BE32(`n & 0xffffff`). Arming writes the arm word to the record and, as a 64-bit
//! doorbell, to UAR + [`MLX5_CQ_DOORBELL`].

use super::mem::{DoorbellWord, QueueMem};
use super::GeometryError;
use ferroverbs_hw::datapath::cqe::{sw_owned, Cqe64, CQE_OP_OWN_INIT};
use ferroverbs_hw::datapath::dbr::{cq_arm_doorbell, cq_arm_word, cq_set_ci, CqArmCmd};
use ferroverbs_hw::datapath::uar::MLX5_CQ_DOORBELL;
use ferroverbs_hw::Bus;

/// Largest CQ in entries (`cqc.log_cq_size` is 5 bits, and rdma-core caps at 2^24).
pub const MAX_CQES: u32 = 1 << 24;

/// How a [`CompletionQueue`] is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqConfig {
    /// The CQ number (for the arm doorbell).
    pub cqn: u32,
    /// Entries: a power of two, at most [`MAX_CQES`].
    pub ncqe: u32,
    /// Entry size: 64 or 128 bytes.
    pub cqe_size: usize,
    /// BAR0 offset of the UAR page the CQ is armed through.
    pub uar: usize,
}

/// A completion queue: the CQE ring, its two doorbell record words and its UAR.
///
/// `M` is the ring memory ([`QueueMem`], at least `ncqe * cqe_size` bytes); `D` the
/// doorbell record words [`MLX5_CQ_SET_CI`](ferroverbs_hw::datapath::dbr::MLX5_CQ_SET_CI)
/// and [`MLX5_CQ_ARM_DB`](ferroverbs_hw::datapath::dbr::MLX5_CQ_ARM_DB).
pub struct CompletionQueue<M: QueueMem, D: DoorbellWord> {
    buf: M,
    set_ci: D,
    arm_db: D,
    cfg: CqConfig,
    mask: u32,
    cons_index: u32,
    arm_sn: u32,
}

impl<M: QueueMem, D: DoorbellWord> CompletionQueue<M, D> {
    /// A completion queue over `buf` and its doorbell record words.
    pub fn new(buf: M, set_ci: D, arm_db: D, cfg: CqConfig) -> Result<Self, GeometryError> {
        if !cfg.ncqe.is_power_of_two() || cfg.ncqe > MAX_CQES {
            return Err(GeometryError::BadCount {
                what: "CQ size in entries",
                count: cfg.ncqe,
                max: MAX_CQES,
            });
        }
        if cfg.cqe_size != 64 && cfg.cqe_size != 128 {
            return Err(GeometryError::BadSize {
                what: "CQE size",
                value: cfg.cqe_size,
            });
        }
        let need = cfg.ncqe as usize * cfg.cqe_size;
        if buf.len() < need {
            return Err(GeometryError::BufferTooShort {
                len: buf.len(),
                need,
            });
        }
        Ok(CompletionQueue {
            buf,
            set_ci,
            arm_db,
            cfg,
            mask: cfg.ncqe - 1,
            cons_index: 0,
            arm_sn: 0,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &CqConfig {
        &self.cfg
    }

    /// The software consumer index (32 bits; the device sees its low 24).
    #[inline(always)]
    pub fn consumer_index(&self) -> u32 {
        self.cons_index
    }

    /// Sets the software consumer index, for a consumer that keeps the index itself
    /// (and writes the doorbell record itself) and uses this ring only to arm.
    pub fn set_consumer_index(&mut self, ci: u32) {
        self.cons_index = ci;
    }

    /// Marks every entry invalid (`op_own` = [`CQE_OP_OWN_INIT`]): done once, before the
    /// CQ is created in firmware.
    pub fn init_entries(&mut self) {
        for i in 0..self.cfg.ncqe as usize {
            let at = (i + 1) * self.cfg.cqe_size - 1;
            self.buf.write(at, &[CQE_OP_OWN_INIT]);
        }
    }

    /// Byte offset of the [`Cqe64`] of consumer index `n`.
    #[inline(always)]
    fn cqe64_offset(&self, n: u32) -> usize {
        ((n & self.mask) as usize + 1) * self.cfg.cqe_size - Cqe64::SIZE
    }

    /// Takes the next CQE if software owns it: the owner check, [`Bus::rmb`], a copy
    /// of the entry, and the consumer index advanced. Does not write the doorbell
    /// record (see [`CompletionQueue::update_ci`]).
    pub fn poll<B: Bus + ?Sized>(&mut self, bus: &B) -> Option<Cqe64> {
        let off = self.take(bus)?;
        let mut bytes = [0u8; Cqe64::SIZE];
        self.buf.read(off, &mut bytes);
        Some(zerocopy::transmute!(bytes))
    }

    /// Takes the next CQE if software owns it, without copying it: the owner check,
    /// [`Bus::rmb`], and the consumer index advanced. Returns the byte offset of its
    /// [`Cqe64`] in the ring memory ([`CompletionQueue::mem`]), for the caller to read
    /// only the fields it needs before it polls again.
    #[inline(always)]
    pub fn take<B: Bus + ?Sized>(&mut self, bus: &B) -> Option<usize> {
        let off = self.cqe64_offset(self.cons_index);
        let op_own = self.buf.load_u8(off + Cqe64::SIZE - 1);
        if !sw_owned(op_own, self.cons_index, self.cfg.ncqe) {
            return None;
        }
        bus.rmb();
        self.cons_index = self.cons_index.wrapping_add(1);
        Some(off)
    }

    /// Takes the next CQE after the caller saw software own it (its own test of the
    /// `op_own` byte at [`CompletionQueue::owner_offset`]): [`Bus::rmb`] and the
    /// consumer index advanced; returns the byte offset of its [`Cqe64`].
    #[inline(always)]
    pub fn take_owned<B: Bus + ?Sized>(&mut self, bus: &B) -> usize {
        let off = self.cqe64_offset(self.cons_index);
        bus.rmb();
        self.cons_index = self.cons_index.wrapping_add(1);
        off
    }

    /// Byte offset of the [`Cqe64`] of the entry taken last (consumer index - 1).
    #[inline(always)]
    pub fn last_taken_offset(&self) -> usize {
        self.cqe64_offset(self.cons_index.wrapping_sub(1))
    }

    /// Byte offset of the `op_own` byte of the entry the next poll looks at.
    #[inline(always)]
    pub fn owner_offset(&self) -> usize {
        self.cqe64_offset(self.cons_index) + Cqe64::SIZE - 1
    }

    /// The ring memory.
    #[inline(always)]
    pub fn mem(&self) -> &M {
        &self.buf
    }

    /// Polls up to `out.len()` CQEs into `out`, then writes the consumer index to the
    /// doorbell record (even when none was found, as rdma-core's `mlx5_poll_cq`
    /// does). Returns how many were taken.
    pub fn poll_many<B: Bus + ?Sized>(&mut self, bus: &B, out: &mut [Cqe64]) -> usize {
        let mut n = 0;
        for slot in out.iter_mut() {
            match self.poll(bus) {
                Some(c) => {
                    *slot = c;
                    n += 1;
                }
                None => break,
            }
        }
        self.update_ci();
        n
    }

    /// Writes the consumer index to the doorbell record: BE32(`ci & 0xffffff`).
    #[inline(always)]
    pub fn update_ci(&mut self) {
        self.set_ci.store_be32(cq_set_ci(self.cons_index));
    }

    /// Requests an event for the next completion (or the next solicited one): the arm
    /// word `sn << 28 | cmd | ci` to the doorbell record, [`Bus::wmb`], then the 64-bit
    /// doorbell {arm word, CQN} at UAR + [`MLX5_CQ_DOORBELL`] (rdma-core `mlx5_arm_cq`).
    pub fn arm<B: Bus + ?Sized>(&mut self, bus: &B, cmd: CqArmCmd) {
        let word = cq_arm_word(self.arm_sn, cmd, self.cons_index);
        self.arm_db.store_be32(word);
        bus.wmb();
        bus.write64(
            self.cfg.uar + MLX5_CQ_DOORBELL,
            cq_arm_doorbell(word, self.cfg.cqn),
        );
    }

    /// The ring over `buf` with `ncqe` entries (a resized CQ), keeping the doorbell
    /// record words, the CQ number, the UAR, the entry size, the consumer index and
    /// the arm sequence number; the old ring memory is returned.
    pub fn replace_buffer(&mut self, buf: M, ncqe: u32) -> Result<M, GeometryError> {
        if !ncqe.is_power_of_two() || ncqe > MAX_CQES {
            return Err(GeometryError::BadCount {
                what: "CQ size in entries",
                count: ncqe,
                max: MAX_CQES,
            });
        }
        let need = ncqe as usize * self.cfg.cqe_size;
        if buf.len() < need {
            return Err(GeometryError::BufferTooShort {
                len: buf.len(),
                need,
            });
        }
        self.cfg.ncqe = ncqe;
        self.mask = ncqe - 1;
        Ok(std::mem::replace(&mut self.buf, buf))
    }

    /// Acknowledges a completion event: the arm sequence number advances
    /// (rdma-core `mlx5_cq_event`), so the next arm is distinguishable from the last.
    pub fn ack_event(&mut self) {
        self.arm_sn = self.arm_sn.wrapping_add(1);
    }
}

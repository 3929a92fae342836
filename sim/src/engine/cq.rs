//! Completion queues as the device writes them: 64-byte CQEs (the upper half of a
//! 128-byte entry), the owner bit, overrun detection against the consumer index in the
//! doorbell record, arming, and completion events.
//!
//! Facts (`mlx5-datapath.md` §5.4, §7; `mlx5dv.h` `struct mlx5_cqe64`,
//! `struct mlx5_err_cqe`):
//!
//! * CQE `p` lives in slot `p & (ncqe - 1)`; its owner bit is `(p / ncqe) & 1`
//!   ([`hw_owner_bit`]), so software's check [`sw_owned`](ferroverbs_hw::datapath::cqe::sw_owned)
//!   with consumer index `p` accepts it. The 63 body bytes are written before `op_own`.
//! * The consumer index is the doorbell record's `set_ci` word (24 bits). A CQE that
//!   would make `producer - consumer` exceed `ncqe` overruns the CQ: unless the context
//!   sets `oi` (overrun ignore), the CQ enters error (`status` = CQ_OVERFLOW), a CQ error
//!   event (type 0x04, syndrome 1) goes to the asynchronous EQ, and no further CQE is
//!   written.
//! * The arm doorbell (UAR + 0x20) carries the arm sequence number, the command (next
//!   completion, or solicited only) and the consumer index. An armed CQ posts one
//!   completion EQE (type 0, CQN in the last dword) to its EQ for the next CQE (for a
//!   solicited-only arm: the next CQE with SE set or in error), then is disarmed. Arming
//!   while CQEs past the doorbell's consumer index exist fires at once.

use ferroverbs_hw::control::cq::{cqc, CqcSt, CqcStatus};
use ferroverbs_hw::datapath::cqe::{
    hw_owner_bit, make_op_own, Cqe64, ErrCqe, MLX5_CQE_RESIZE_CQ, MLX5_INLINE_SCATTER_32,
    MLX5_INLINE_SCATTER_64,
};
use ferroverbs_hw::datapath::eqe::{MLX5_EVENT_TYPE_COMP, MLX5_EVENT_TYPE_CQ_ERROR};
use zerocopy::byteorder::big_endian::{U16, U32, U64};

use crate::firmware::Firmware;
use crate::iommu::{Held, Iommu, Window};
use crate::irq::Irqs;

/// 24-bit counters.
const MASK24: u32 = 0x00ff_ffff;

/// The `mlx5_eqe_cq_err` syndrome of an overrun.
pub const CQ_ERR_SYNDROME_OVERRUN: u8 = 1;

/// What a CQE reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqeKind {
    /// A successful requester completion (`MLX5_CQE_REQ`) of send opcode `sop`.
    Req {
        /// The WQE's `MLX5_OPCODE_*`.
        sop: u8,
    },
    /// A successful responder completion with this `MLX5_CQE_RESP_*` opcode.
    Resp {
        /// `MLX5_CQE_RESP_SEND`, `_SEND_IMM`, `_WR_IMM`, ...
        opcode: u8,
    },
    /// An error completion (`MLX5_CQE_REQ_ERR` / `MLX5_CQE_RESP_ERR`).
    Err {
        /// Requester (`true`) or responder.
        req: bool,
        /// `MLX5_CQE_SYNDROME_*`.
        syndrome: u8,
        /// Vendor syndrome.
        vendor: u8,
        /// The WQE opcode (requester) or 0.
        sop: u8,
    },
}

/// The contents of one CQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// Kind and opcode.
    pub kind: CqeKind,
    /// The QP number.
    pub qpn: u32,
    /// The WQE index (requester: the control segment's index; responder: the RQ
    /// counter).
    pub wqe_counter: u16,
    /// Byte count.
    pub byte_cnt: u32,
    /// Immediate data, as it came off the wire (already big-endian in the CQE).
    pub imm: u32,
    /// The remote QP number (responder).
    pub rqpn: u32,
    /// The user index (CQE version 1) of the QP.
    pub uidx: u32,
    /// The solicited-event bit (responder completions of solicited messages).
    pub se: bool,
    /// Device time (ns) of the completion; the CQE carries it as the free-running
    /// counter of the device clock ([`device_ticks`]).
    pub timestamp: u64,
    /// A GRH (for RoCEv2: the IPv4 header) was received and written to the receive
    /// buffer (UD responder completions): `flags_rqpn` gets "g" and the RoCE L3 header
    /// type.
    pub grh: bool,
}

/// The device clock in kHz: the general HCA cap `device_frequency_khz` the firmware
/// reports, and the rate of the CQE `timestamp` counter (`struct mlx5_cqe64`
/// `timestamp`, big-endian; Linux `mlx5_ib_query_device` reports the cap as
/// `hca_core_clock`). 156.25 MHz.
pub const DEVICE_FREQUENCY_KHZ: u32 = 156_250;

/// The CQE `timestamp` of device time `ns`: the count of the device clock
/// ([`DEVICE_FREQUENCY_KHZ`]) since the device started, `ns * kHz / 10^6` rounded
/// down, as a 64-bit free-running counter. The fraction is reduced at compile time
/// (156250 / 10^6 = 5 / 32), so this is a multiply and a shift.
#[inline(always)]
pub const fn device_ticks(ns: u64) -> u64 {
    const fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    const KHZ: u64 = DEVICE_FREQUENCY_KHZ as u64;
    const G: u64 = gcd(KHZ, 1_000_000);
    const NUM: u128 = (KHZ / G) as u128;
    const DEN: u128 = (1_000_000 / G) as u128;
    (ns as u128 * NUM / DEN) as u64
}

/// `MLX5_CQE_ROCE_L3_HEADER_TYPE_IPV4` (Linux `device.h`): the RoCE L3 header type
/// in bits 25..24 of `flags_rqpn` (the SL field of an IB CQE) that mlx5 reports on
/// Ethernet ports, read by Linux `mlx5_ib` `handle_responder` as the network header
/// type of the completion.
pub const ROCE_L3_HEADER_TYPE_IPV4: u8 = 2;

impl Completion {
    /// Whether a solicited-only arm fires for this completion.
    pub fn solicits(&self) -> bool {
        self.se || matches!(self.kind, CqeKind::Err { .. })
    }

    /// The 64 bytes of the CQE with owner bit `owner`.
    pub fn encode(&self, owner: u8) -> [u8; 64] {
        let mut out = [0u8; 64];
        match self.kind {
            CqeKind::Err {
                req,
                syndrome,
                vendor,
                sop,
            } => {
                let mut e = ErrCqe::zeroed();
                e.srqn = U32::new(self.uidx & MASK24);
                e.vendor_err_synd = vendor;
                e.syndrome = syndrome;
                e.s_wqe_opcode_qpn = U32::new((u32::from(sop) << 24) | (self.qpn & MASK24));
                e.wqe_counter = U16::new(self.wqe_counter);
                let op = if req {
                    ferroverbs_hw::datapath::cqe::MLX5_CQE_REQ_ERR
                } else {
                    ferroverbs_hw::datapath::cqe::MLX5_CQE_RESP_ERR
                };
                e.op_own = make_op_own(op, 0, false, owner);
                out.copy_from_slice(e.as_bytes());
            }
            CqeKind::Req { sop } => {
                let mut c = Cqe64::zeroed();
                c.srqn_uidx = U32::new(self.uidx & MASK24);
                c.byte_cnt = U32::new(self.byte_cnt);
                c.timestamp = U64::new(device_ticks(self.timestamp));
                c.set_sop_drop_qpn(sop, self.qpn);
                c.wqe_counter = U16::new(self.wqe_counter);
                c.set_op_own(ferroverbs_hw::datapath::cqe::MLX5_CQE_REQ, 0, false, owner);
                out.copy_from_slice(c.as_bytes());
            }
            CqeKind::Resp { opcode } => {
                let mut c = Cqe64::zeroed();
                if self.grh {
                    c.set_flags_rqpn(1, ROCE_L3_HEADER_TYPE_IPV4, self.rqpn);
                } else {
                    c.set_flags_rqpn(0, 0, self.rqpn);
                }
                // RoCEv2 over IPv4: L3 header type IPv4.
                c.l4_hdr_type_etc = ferroverbs_hw::datapath::cqe::MLX5_CQE_L3_HDR_TYPE_IPV4 << 2;
                c.srqn_uidx = U32::new(self.uidx & MASK24);
                c.imm_inval_pkey = U32::new(self.imm);
                c.byte_cnt = U32::new(self.byte_cnt);
                c.timestamp = U64::new(device_ticks(self.timestamp));
                c.set_sop_drop_qpn(0, self.qpn);
                c.wqe_counter = U16::new(self.wqe_counter);
                c.set_op_own(opcode, 0, self.se, owner);
                out.copy_from_slice(c.as_bytes());
            }
        }
        out
    }
}

/// A successful responder CQE with the fields that are the same for every completion
/// of one QP already in place (`flags_rqpn`, `l4_hdr_type_etc`, `srqn_uidx`,
/// `sop_drop_qpn`; every reserved byte zero), built once per QP context
/// ([`super::qp::QpCfg::resp_cqe`]). A completion then writes only what changes per
/// CQE: `imm_inval_pkey`, `byte_cnt`, `timestamp`, `wqe_counter` and `op_own` (CQE
/// opcode, SE, owner). [`CqeTemplate::fill`] gives the same 64 bytes as
/// [`Completion::encode`] of the same completion (tested byte for byte), and
/// [`CqeTemplate::words`] the same entry as eight words, for a write straight into the
/// CQ slot ([`CqRt::try_push_resp`]).
///
/// Held as the eight native-endian words of the entry (`u64::from_ne_bytes` of its
/// bytes `8k..8k + 8`); the per-completion fields are in words 4 (`imm_inval_pkey`,
/// bytes 36-39), 5 (`byte_cnt`, 44-47), 6 (`timestamp`, 48-55) and 7 (`wqe_counter`
/// 60-61, `op_own` 63), zero in the template.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqeTemplate([u64; 8]);

impl CqeTemplate {
    /// The template of the successful responder CQEs of QP `qpn` (remote QPN `rqpn`,
    /// user index `uidx`; `grh` as [`Completion::grh`]).
    pub fn resp(qpn: u32, rqpn: u32, uidx: u32, grh: bool) -> CqeTemplate {
        let c = Completion {
            kind: CqeKind::Resp { opcode: 0 },
            qpn,
            wqe_counter: 0,
            byte_cnt: 0,
            imm: 0,
            rqpn,
            uidx,
            se: false,
            timestamp: 0,
            grh,
        };
        let mut e = c.encode(0);
        // `op_own` (opcode, SE and owner) is written per completion.
        e[63] = 0;
        CqeTemplate(core::array::from_fn(|k| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&e[8 * k..8 * k + 8]);
            u64::from_ne_bytes(w)
        }))
    }

    /// The entry of a successful responder completion with CQE opcode `opcode`
    /// (`MLX5_CQE_RESP_*`), its solicited-event bit, owner bit `owner`, and these
    /// per-completion values (`imm` as it came off the wire) as eight native-endian
    /// words: `words[k]` is `u64::from_ne_bytes` of the entry's bytes `8k..8k + 8`
    /// (what [`Held::try_write_entry64`](crate::iommu::Held::try_write_entry64)
    /// takes). `timestamp` is device time in ns, written as [`device_ticks`].
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn words(
        &self,
        opcode: u8,
        se: bool,
        owner: u8,
        wqe_counter: u16,
        byte_cnt: u32,
        imm: u32,
        timestamp: u64,
    ) -> [u64; 8] {
        let t = &self.0;
        let op_own = make_op_own(opcode, 0, se, owner);
        // A field's bytes in a native-endian word: the big-endian value of the eight
        // bytes (`from_ne_bytes(v.to_be_bytes()) == v.to_be()`) with only that field
        // set, and the template's bytes around it are zero there.
        let be = |v: u64| v.to_be();
        [
            t[0],
            t[1],
            t[2],
            t[3],
            t[4] | be(u64::from(imm)),
            t[5] | be(u64::from(byte_cnt)),
            be(device_ticks(timestamp)),
            t[7] | be((u64::from(wqe_counter) << 16) | u64::from(op_own)),
        ]
    }

    /// [`CqeTemplate::words`] as the 64 bytes of the CQE.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn fill(
        &self,
        opcode: u8,
        se: bool,
        owner: u8,
        wqe_counter: u16,
        byte_cnt: u32,
        imm: u32,
        timestamp: u64,
    ) -> [u8; 64] {
        let w = self.words(opcode, se, owner, wqe_counter, byte_cnt, imm, timestamp);
        let mut out = [0u8; 64];
        for (k, w) in w.iter().enumerate() {
            out[8 * k..8 * k + 8].copy_from_slice(&w.to_ne_bytes());
        }
        out
    }
}

/// Puts `data` (at most 32 bytes) over the first bytes of the CQE held as eight
/// native-endian words `w` ([`CqeTemplate::words`]) and sets `MLX5_INLINE_SCATTER_32`
/// in its `op_own`: what [`CqRt::push_scattered`] does to an encoded CQE.
#[inline]
fn scatter_32_words(w: &mut [u64; 8], data: &[u8]) {
    let n = data.len().min(32);
    let mut b = [0u8; 32];
    for (k, w) in w[..4].iter().enumerate() {
        b[8 * k..8 * k + 8].copy_from_slice(&w.to_ne_bytes());
    }
    b[..n].copy_from_slice(&data[..n]);
    for (k, w) in w[..4].iter_mut().enumerate() {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[8 * k..8 * k + 8]);
        *w = u64::from_ne_bytes(x);
    }
    // `op_own` is byte 63: the last byte of word 7.
    w[7] |= u64::from_ne_bytes([0, 0, 0, 0, 0, 0, 0, MLX5_INLINE_SCATTER_32]);
}

/// How a CQ is armed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Event on the next completion.
    Next,
    /// Event on the next solicited or error completion.
    Solicited,
}

/// What happened to a CQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushed {
    /// Written.
    Written,
    /// The CQ was full (it is now in error unless `oi`): dropped.
    Overrun,
    /// The CQ is in error, unknown, or its buffer is not reachable: dropped.
    Failed,
}

/// The device side of one CQ.
#[derive(Clone, Debug)]
pub struct CqRt {
    cqn: u32,
    pages: Vec<u64>,
    page_shift: u32,
    offset: u64,
    log_size: u8,
    cqe_size: u64,
    dbr: u64,
    eqn: u32,
    uar: u32,
    oi: bool,
    /// Producer counter (CQEs written).
    pub pi: u32,
    /// The consumer index last read from the doorbell record. It only moves towards
    /// `pi`, so while `pi - ci_seen < ncqe` no overrun is possible and the record is
    /// not read again (as a ConnectX caches it).
    ci_seen: u32,
    arm: Option<Arm>,
    sn: u8,
    /// The producer index of the last solicited/error CQE, if any.
    last_solicited: Option<u32>,
    /// The producer index when the last completion event fired: the CQEs before it
    /// were announced by an event (`cqc.last_notified_index` is the last of them);
    /// an arm fires at once only for a CQE at or after it ([`CqRt::arm`]).
    notified_pi: u32,
    /// In error (overrun or write failure): nothing more is written.
    pub error: bool,
    /// CQEs written.
    pub written: u64,
    /// Events posted.
    pub events: u64,
    /// The cached translation of the ring's mapping (one table search per unmap, not
    /// per CQE; see [`Window`]).
    win: Window,
}

impl CqRt {
    /// Bytes of simulator memory this runtime holds (the structure and its page
    /// list; the ring itself is host memory the driver mapped).
    pub fn footprint(&self) -> usize {
        std::mem::size_of::<CqRt>() + self.pages.capacity() * std::mem::size_of::<u64>()
    }
}

impl CqRt {
    /// The runtime of CQ `cqn` as the firmware created it.
    pub fn load(fw: &Firmware, cqn: u32) -> Option<CqRt> {
        let cq = fw.cq(cqn)?;
        let g = |f: ferroverbs_hw::Field| {
            if f.fits(cq.cqc.len()) {
                f.get(&cq.cqc)
            } else {
                0
            }
        };
        Some(CqRt {
            cqn,
            pages: cq.pages.clone(),
            page_shift: 12 + g(cqc::log_page_size).min(19) as u32,
            offset: g(cqc::page_offset) * 64,
            log_size: cq.log_size,
            cqe_size: u64::from(cq.cqe_size),
            dbr: cq.dbr,
            eqn: cq.eqn,
            uar: cq.uar,
            oi: g(cqc::oi) != 0,
            pi: 0,
            ci_seen: 0,
            arm: None,
            sn: 0,
            last_solicited: None,
            notified_pi: 0,
            error: false,
            written: 0,
            events: 0,
            win: Window::default(),
        })
    }

    /// Number of entries.
    pub fn ncqe(&self) -> u32 {
        1u32 << self.log_size
    }

    /// The UAR page that rings this CQ's arm doorbell.
    pub fn uar(&self) -> u32 {
        self.uar
    }

    /// The IOVA of the 64-byte CQE of producer index `p`.
    fn cqe_iova(&self, p: u32) -> Option<u64> {
        let slot = u64::from(p & (self.ncqe() - 1));
        // With 128-byte CQEs the CQE64 is the upper half of the entry.
        let byte = self.offset + slot * self.cqe_size + (self.cqe_size - 64);
        let page = self
            .pages
            .get(usize::try_from(byte >> self.page_shift).ok()?)?;
        Some(page + (byte & ((1u64 << self.page_shift) - 1)))
    }

    /// The consumer index software last published.
    pub fn consumer_index(&self, io: &Iommu) -> Option<u32> {
        io.read_be32(self.dbr).ok().map(|v| v & MASK24)
    }

    /// Writes a CQE and posts the completion event it triggers.
    pub fn push(&mut self, fw: &mut Firmware, io: &Iommu, irqs: &Irqs, c: &Completion) -> Pushed {
        self.push_with(fw, io, irqs, c.solicits(), |owner| c.encode(owner))
    }

    /// [`CqRt::push`] of a responder CQE that carries the received message `data`
    /// (scatter to CQE; at most 32 bytes, or 64 with 128-byte CQEs): up to 32 bytes in
    /// the CQE's first 32 bytes with `MLX5_INLINE_SCATTER_32` in `op_own`, more in
    /// the first half of the 128-byte entry with `MLX5_INLINE_SCATTER_64`
    /// (`mlx5-datapath.md` §5; libmlx5 `cq.c` reads them from the CQE, or the 64 bytes
    /// before it). The data is written before the CQE, whose owner byte goes last.
    pub fn push_scattered(
        &mut self,
        fw: &mut Firmware,
        io: &Iommu,
        irqs: &Irqs,
        c: &Completion,
        data: &[u8],
    ) -> Pushed {
        let wide = data.len() > 32;
        if data.len() > 64 || (wide && self.cqe_size != 128) {
            self.fail(fw, io, irqs, CqcStatus::CqWriteFail);
            return Pushed::Failed;
        }
        let lower = self.cqe_iova(self.pi).map(|a| a - (self.cqe_size - 64));
        let mut wrote = true;
        let pushed = self.push_with(fw, io, irqs, c.solicits(), |owner| {
            let mut e = c.encode(owner);
            if wide {
                let mut half = [0u8; 64];
                half[..data.len()].copy_from_slice(data);
                wrote = lower.is_some_and(|a| io.write(a, &half).is_ok());
                e[63] |= MLX5_INLINE_SCATTER_64;
            } else {
                e[..data.len()].copy_from_slice(data);
                e[63] |= MLX5_INLINE_SCATTER_32;
            }
            e
        });
        // Both halves are one 128-byte entry of one page: a lower half that cannot be
        // written means a CQE write that failed too (`push_with` then failed the CQ),
        // so no CQE announces data that is not there.
        if !wrote && pushed == Pushed::Written {
            self.fail(fw, io, irqs, CqcStatus::CqWriteFail);
            return Pushed::Failed;
        }
        pushed
    }

    /// [`CqRt::push`] of the CQE `entry(owner)` gives for the owner bit of its slot;
    /// `solicits` is [`Completion::solicits`] of it.
    #[inline]
    pub fn push_with(
        &mut self,
        fw: &mut Firmware,
        io: &Iommu,
        irqs: &Irqs,
        solicits: bool,
        entry: impl FnOnce(u8) -> [u8; 64],
    ) -> Pushed {
        if self.error {
            return Pushed::Failed;
        }
        if !self.oi && (self.pi.wrapping_sub(self.ci_seen) & MASK24) >= self.ncqe() {
            let Some(ci) = self.consumer_index(io) else {
                self.fail(fw, io, irqs, CqcStatus::CqWriteFail);
                return Pushed::Failed;
            };
            self.ci_seen = ci;
            if (self.pi.wrapping_sub(ci) & MASK24) >= self.ncqe() {
                self.fail(fw, io, irqs, CqcStatus::CqOverflow);
                return Pushed::Overrun;
            }
        }
        let Some(iova) = self.cqe_iova(self.pi) else {
            self.fail(fw, io, irqs, CqcStatus::CqWriteFail);
            return Pushed::Failed;
        };
        let bytes = entry(hw_owner_bit(self.pi, self.ncqe()));
        // Body first, then op_own (a release fence between them).
        if io
            .write_owner_last_cached(&mut self.win, iova, &bytes)
            .is_err()
        {
            self.fail(fw, io, irqs, CqcStatus::CqWriteFail);
            return Pushed::Failed;
        }
        if solicits {
            self.last_solicited = Some(self.pi);
        }
        self.pi = self.pi.wrapping_add(1) & MASK24;
        self.written += 1;
        match self.arm {
            Some(Arm::Next) => self.fire(fw, io, irqs),
            Some(Arm::Solicited) if solicits => self.fire(fw, io, irqs),
            _ => {}
        }
        Pushed::Written
    }

    /// [`CqRt::push_with`] of a successful responder CQE from the QP's template `tpl`
    /// ([`CqeTemplate::words`]) written straight into its slot through the held
    /// table `held` ([`Held::try_write_entry64`]: the 63 body bytes, a release fence,
    /// then `op_own`, as `push_with` writes every CQE), when the push needs nothing
    /// but that write: the CQ is not in error, not armed, the overrun check needs no
    /// read of the consumer index (fewer than `ncqe` CQEs past the last one read, or
    /// `oi`), and the slot is reachable through the CQ's window. Then the same
    /// effects as `push_with` (the entry, the IOMMU byte counter, the producer index,
    /// the written count, the last solicited CQE) and `true`.
    ///
    /// `false`: nothing was done (the window may have been refreshed, as `push_with`
    /// would refresh it); the caller drops the hold and pushes the CQE with
    /// `push_with`, which handles every such case (consumer index read, overrun,
    /// write fault, events).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn try_push_resp(
        &mut self,
        held: &Held,
        tpl: &CqeTemplate,
        opcode: u8,
        se: bool,
        wqe_counter: u16,
        byte_cnt: u32,
        imm: u32,
        timestamp: u64,
    ) -> bool {
        self.try_push_words(held, se, |owner| {
            tpl.words(opcode, se, owner, wqe_counter, byte_cnt, imm, timestamp)
        })
    }

    /// [`CqRt::try_push_resp`] of a responder CQE that carries the received message
    /// `data` of at most 32 bytes (scatter to CQE): the template's entry with `data`
    /// over its first bytes and `MLX5_INLINE_SCATTER_32` in `op_own`, the bytes
    /// [`CqRt::push_scattered`] writes for it (tested byte for byte). `false` (nothing
    /// done) as `try_push_resp`, and for more than 32 bytes (a 128-byte entry's lower
    /// half, which `push_scattered` writes).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn try_push_resp_scattered(
        &mut self,
        held: &Held,
        tpl: &CqeTemplate,
        opcode: u8,
        se: bool,
        wqe_counter: u16,
        imm: u32,
        timestamp: u64,
        data: &[u8],
    ) -> bool {
        if data.len() > 32 {
            return false;
        }
        self.try_push_words(held, se, |owner| {
            let byte_cnt = data.len() as u32;
            let mut w = tpl.words(opcode, se, owner, wqe_counter, byte_cnt, imm, timestamp);
            scatter_32_words(&mut w, data);
            w
        })
    }

    /// The common part of [`CqRt::try_push_resp`] and
    /// [`CqRt::try_push_resp_scattered`]: the entry `words(owner)` written straight
    /// into its slot when nothing else is needed.
    #[inline(always)]
    fn try_push_words(
        &mut self,
        held: &Held,
        se: bool,
        words: impl FnOnce(u8) -> [u64; 8],
    ) -> bool {
        if self.error || self.arm.is_some() {
            return false;
        }
        if !self.oi && (self.pi.wrapping_sub(self.ci_seen) & MASK24) >= self.ncqe() {
            return false;
        }
        let Some(iova) = self.cqe_iova(self.pi) else {
            return false;
        };
        let owner = hw_owner_bit(self.pi, self.ncqe());
        let words = words(owner);
        if !held.try_write_entry64(&mut self.win, iova, &words) {
            return false;
        }
        if se {
            self.last_solicited = Some(self.pi);
        }
        self.pi = self.pi.wrapping_add(1) & MASK24;
        self.written += 1;
        true
    }

    /// Fault injection (a faulty device, for the driver's defences): writes the CQE
    /// the device wrote `back` entries ago (1: the last one) again as the next CQE,
    /// byte for byte but for the owner bit of its new slot, as [`CqRt::push`] writes
    /// one (overrun check, producer index, event). `Failed` if there is no such CQE
    /// (`back` is 0 or reaches past what was written or past the ring).
    pub fn repeat(&mut self, fw: &mut Firmware, io: &Iommu, irqs: &Irqs, back: u32) -> Pushed {
        if self.error || back == 0 || back > self.ncqe() || u64::from(back) > self.written {
            return Pushed::Failed;
        }
        let mut bytes = [0u8; 64];
        let Some(from) = self.cqe_iova(self.pi.wrapping_sub(back) & MASK24) else {
            return Pushed::Failed;
        };
        if io.read(from, &mut bytes).is_err() {
            return Pushed::Failed;
        }
        if !self.oi {
            let Some(ci) = self.consumer_index(io) else {
                return Pushed::Failed;
            };
            self.ci_seen = ci;
            if (self.pi.wrapping_sub(ci) & MASK24) >= self.ncqe() {
                self.fail(fw, io, irqs, CqcStatus::CqOverflow);
                return Pushed::Overrun;
            }
        }
        let Some(to) = self.cqe_iova(self.pi) else {
            return Pushed::Failed;
        };
        bytes[63] = (bytes[63] & !1) | hw_owner_bit(self.pi, self.ncqe());
        if io.write_owner_last(to, &bytes).is_err() {
            return Pushed::Failed;
        }
        // A repeated solicited CQE solicits again (the `se` bit of op_own).
        if bytes[63] & 2 != 0 {
            self.last_solicited = Some(self.pi);
        }
        self.pi = self.pi.wrapping_add(1) & MASK24;
        self.written += 1;
        match self.arm {
            Some(Arm::Next) => self.fire(fw, io, irqs),
            Some(Arm::Solicited) if bytes[63] & 2 != 0 => self.fire(fw, io, irqs),
            _ => {}
        }
        Pushed::Written
    }

    /// The switch of a MODIFY_CQ resize ([`Firmware`] accepted it and holds the new
    /// buffer, [`Cq::take_resize`](crate::firmware::Cq::take_resize)): the resize
    /// CQE (opcode `MLX5_CQE_RESIZE_CQ`, every other byte zero, the owner bit of its
    /// index) goes into the old buffer at the entry of the producer index, which it
    /// consumes; the CQEs after it go into the new buffer, at their producer
    /// indexes, with owner bits of the new size. The CQ keeps its state otherwise
    /// (arm, sequence number, doorbell record); the resize CQE raises no event, and
    /// no arm fires for it (it is not a completion). A resize CQE that cannot be
    /// written fails the CQ as any CQE write does (no switch: the command was
    /// answered, software then finds no resize CQE).
    pub fn resize(&mut self, fw: &mut Firmware, io: &Iommu, irqs: &Irqs) {
        if self.error {
            // Nothing is written to a CQ in error; the firmware refused its resize.
            let _ = fw.cq_mut(self.cqn).and_then(|c| c.take_resize());
            return;
        }
        let Some(iova) = self.cqe_iova(self.pi) else {
            let _ = fw.cq_mut(self.cqn).and_then(|c| c.take_resize());
            self.fail(fw, io, irqs, CqcStatus::CqWriteFail);
            return;
        };
        let mut e = [0u8; 64];
        e[63] = make_op_own(
            MLX5_CQE_RESIZE_CQ,
            0,
            false,
            hw_owner_bit(self.pi, self.ncqe()),
        );
        if io.write_owner_last(iova, &e).is_err() {
            let _ = fw.cq_mut(self.cqn).and_then(|c| c.take_resize());
            self.fail(fw, io, irqs, CqcStatus::CqWriteFail);
            return;
        }
        let Some(r) = fw.cq_mut(self.cqn).and_then(|c| c.take_resize()) else {
            return;
        };
        // Every CQE announced so far stays announced; the resize CQE needs no event.
        if self.notified_pi == self.pi {
            self.notified_pi = self.pi.wrapping_add(1) & MASK24;
        }
        self.pi = self.pi.wrapping_add(1) & MASK24;
        self.pages = r.pages;
        self.page_shift = 12 + u32::from(r.log_page_size.min(19));
        self.offset = u64::from(r.page_offset) * 64;
        self.log_size = r.log_size;
        // The entries `repeat` may copy are the new buffer's only.
        self.written = 0;
        self.win = Window::default();
    }

    fn set_ctx(&self, fw: &mut Firmware, f: ferroverbs_hw::Field, v: u64) {
        if let Some(cq) = fw.cq_mut(self.cqn) {
            if f.fits(cq.cqc.len()) {
                f.set(&mut cq.cqc, v);
            }
        }
    }

    fn fail(&mut self, fw: &mut Firmware, io: &Iommu, irqs: &Irqs, status: CqcStatus) {
        self.error = true;
        self.set_ctx(fw, cqc::status, u64::from(status.value()));
        // struct mlx5_eqe_cq_err: cqn (BE32), 7 reserved bytes, syndrome.
        let mut data = [0u8; 12];
        data[..4].copy_from_slice(&(self.cqn & MASK24).to_be_bytes());
        data[11] = if status == CqcStatus::CqOverflow {
            CQ_ERR_SYNDROME_OVERRUN
        } else {
            2
        };
        if let Some(v) = fw.post_event(io, MLX5_EVENT_TYPE_CQ_ERROR, 0, &data) {
            irqs.signal(v);
        }
    }

    fn fire(&mut self, fw: &mut Firmware, io: &Iommu, irqs: &Irqs) {
        self.arm = None;
        self.set_ctx(fw, cqc::st, u64::from(CqcSt::Fired.value()));
        // Every CQE written so far is announced by this event.
        self.notified_pi = self.pi;
        let last = self.pi.wrapping_sub(1) & MASK24;
        self.set_ctx(fw, cqc::last_notified_index, u64::from(last));
        // struct mlx5_eqe_comp: 24 reserved bytes, then the CQN.
        let mut data = [0u8; 28];
        data[24..].copy_from_slice(&(self.cqn & MASK24).to_be_bytes());
        self.events += 1;
        if let Some(v) = fw.post_to_eq(io, self.eqn, MLX5_EVENT_TYPE_COMP, 0, &data) {
            irqs.signal(v);
        }
    }

    /// The arm doorbell: arm for the next (or next solicited) completion after consumer
    /// index `ci`. Fires at once when such a CQE already exists that no earlier event
    /// announced (an index past `cqc.last_notified_index`): a CQE written while the CQ
    /// was not armed is not lost, and one an event already announced does not raise a
    /// second event when the application re-arms before polling it (the verbs order
    /// of `ibv_get_cq_event`, `ibv_ack_cq_events`, `ibv_req_notify_cq`, then poll, as
    /// perftest's `-e` latency tests do with one poll per event: on a ConnectX they
    /// find the completion of the request they posted after that re-arm, which a
    /// second event for the announced CQE would break). The CQ context keeps the
    /// index (PRM CQ context `last_notified_index`, Linux `mlx5_ifc_cqc_bits`); the
    /// rule is inferred from that field and from perftest's behaviour on hardware,
    /// which cannot be checked here.
    pub fn arm(
        &mut self,
        fw: &mut Firmware,
        io: &Iommu,
        irqs: &Irqs,
        sn: u8,
        solicited: bool,
        ci: u32,
    ) {
        if self.error {
            return;
        }
        let mode = if solicited { Arm::Solicited } else { Arm::Next };
        self.arm = Some(mode);
        self.sn = sn;
        let st = if solicited {
            CqcSt::SolicitedNotificationRequestArmed
        } else {
            CqcSt::NotificationRequestArmed
        };
        self.set_ctx(fw, cqc::st, u64::from(st.value()));
        let ci = ci & MASK24;
        let pending = self.pi.wrapping_sub(ci) & MASK24;
        if pending == 0 || pending > self.ncqe() {
            return;
        }
        // The CQEs no event announced: from `notified_pi` (or `ci`, if later) on.
        let unnotified = self.pi.wrapping_sub(self.notified_pi) & MASK24;
        let fresh = pending.min(unnotified);
        if fresh == 0 {
            return;
        }
        let due = match mode {
            Arm::Next => true,
            // A solicited CQE at or after ci that no event announced.
            Arm::Solicited => self
                .last_solicited
                .is_some_and(|s| (self.pi.wrapping_sub(1).wrapping_sub(s) & MASK24) < fresh),
        };
        if due {
            self.fire(fw, io, irqs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroverbs_hw::datapath::cqe::{sw_owned, MLX5_CQE_RESP_SEND};

    /// The per-QP template gives the bytes of the general encoder for every
    /// responder completion: random QPNs, remote QPNs and user indexes (bits above
    /// 24 included, which both must drop), opcodes, SE, owner, counters, byte counts,
    /// immediates and time stamps, with and without a GRH.
    #[test]
    fn the_responder_template_writes_the_bytes_of_encode() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..20_000 {
            let (a, b, c) = (next(), next(), next());
            let grh = i % 3 == 0;
            let opcode = match i % 4 {
                0 => MLX5_CQE_RESP_SEND,
                1 => ferroverbs_hw::datapath::cqe::MLX5_CQE_RESP_SEND_IMM,
                2 => ferroverbs_hw::datapath::cqe::MLX5_CQE_RESP_WR_IMM,
                _ => (a >> 60) as u8,
            };
            let comp = Completion {
                kind: CqeKind::Resp { opcode },
                qpn: a as u32,
                wqe_counter: (a >> 32) as u16,
                byte_cnt: b as u32,
                imm: (b >> 32) as u32,
                rqpn: c as u32,
                uidx: (c >> 32) as u32,
                se: a & (1 << 50) != 0,
                timestamp: next(),
                grh,
            };
            let owner = ((a >> 51) & 1) as u8;
            let t = CqeTemplate::resp(comp.qpn, comp.rqpn, comp.uidx, grh);
            let filled = t.fill(
                opcode,
                comp.se,
                owner,
                comp.wqe_counter,
                comp.byte_cnt,
                comp.imm,
                comp.timestamp,
            );
            assert_eq!(filled, comp.encode(owner), "{comp:?} owner {owner}");
        }
    }

    /// A scattered responder CQE from the template ([`scatter_32_words`], the fast
    /// path's) has the bytes `push_scattered` writes for it (the encoded CQE, the
    /// message over its first bytes, `MLX5_INLINE_SCATTER_32`): every length from 0
    /// to 32, random fields.
    #[test]
    fn the_scattered_template_writes_the_bytes_of_push_scattered() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..4_000usize {
            let (a, b, c) = (next(), next(), next());
            let n = i % 33;
            let data: Vec<u8> = (0..n).map(|_| next() as u8).collect();
            let opcode = if i % 2 == 0 {
                MLX5_CQE_RESP_SEND
            } else {
                ferroverbs_hw::datapath::cqe::MLX5_CQE_RESP_SEND_IMM
            };
            let comp = Completion {
                kind: CqeKind::Resp { opcode },
                qpn: a as u32,
                wqe_counter: (a >> 32) as u16,
                byte_cnt: n as u32,
                imm: (b >> 32) as u32,
                rqpn: c as u32,
                uidx: (c >> 32) as u32,
                se: a & (1 << 50) != 0,
                timestamp: next(),
                grh: false,
            };
            let owner = ((a >> 51) & 1) as u8;
            let t = CqeTemplate::resp(comp.qpn, comp.rqpn, comp.uidx, false);
            let mut w = t.words(
                opcode,
                comp.se,
                owner,
                comp.wqe_counter,
                comp.byte_cnt,
                comp.imm,
                comp.timestamp,
            );
            scatter_32_words(&mut w, &data);
            let mut got = [0u8; 64];
            for (k, w) in w.iter().enumerate() {
                got[8 * k..8 * k + 8].copy_from_slice(&w.to_ne_bytes());
            }
            let mut want = comp.encode(owner);
            want[..n].copy_from_slice(&data);
            want[63] |= MLX5_INLINE_SCATTER_32;
            assert_eq!(got, want, "{comp:?} owner {owner} data {data:?}");
        }
    }

    #[test]
    fn encodings() {
        let c = Completion {
            kind: CqeKind::Req { sop: 0x0a },
            qpn: 0x123,
            wqe_counter: 7,
            byte_cnt: 64,
            imm: 0,
            rqpn: 0,
            uidx: 0x55,
            se: false,
            timestamp: 9,
            grh: false,
        };
        let b = c.encode(1);
        let v = Cqe64::read_from(&b).unwrap();
        assert_eq!(
            (v.sop_opcode(), v.qpn(), v.wqe_counter(), v.srqn_uidx()),
            (0x0a, 0x123, 7, 0x55)
        );
        assert_eq!(v.opcode(), 0);
        assert!(sw_owned(b[63], 8, 8));
        let r = Completion {
            kind: CqeKind::Resp {
                opcode: MLX5_CQE_RESP_SEND,
            },
            se: true,
            rqpn: 0x42,
            ..c
        };
        let v = Cqe64::read_from(&r.encode(0)).unwrap();
        assert_eq!(
            (v.opcode(), v.se(), v.src_qpn(), v.owner()),
            (2, true, 0x42, 0)
        );
        assert_eq!(v.grh_type(), 0);
        // UD: "g" and the RoCE L3 header type IPv4 in bits 25..24.
        let u = Completion { grh: true, ..r };
        let v = Cqe64::read_from(&u.encode(0)).unwrap();
        assert_eq!(v.grh_type(), 1);
        assert_eq!(v.flags_rqpn.get(), (1 << 28) | (2 << 24) | 0x42);
        let e = Completion {
            kind: CqeKind::Err {
                req: true,
                syndrome: 5,
                vendor: 0xf9,
                sop: 0x0a,
            },
            ..c
        };
        let b = e.encode(0);
        let v = ErrCqe::read_from(&b).unwrap();
        assert_eq!(
            (
                v.opcode(),
                v.syndrome(),
                v.vendor_err_synd(),
                v.wqe_opcode(),
                v.qpn(),
                v.wqe_counter(),
                v.srqn()
            ),
            (13, 5, 0xf9, 0x0a, 0x123, 7, 0x55)
        );
        assert!(e.solicits());
    }
}

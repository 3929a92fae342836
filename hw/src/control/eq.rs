//! Event queues: CREATE_EQ / DESTROY_EQ / QUERY_EQ and the EQ context ([`eqc`]).
//!
//! An EQ is a ring of `1 << log_eq_size` 64-byte EQEs ([`crate::datapath::eqe`]) in
//! host memory, listed page by page in `pas` (byte 0x110 of CREATE_EQ; pages of
//! `4096 << log_page_size` bytes). `event_bitmask` (four big-endian 64-bit words at
//! byte 0x58) subscribes event types: bit *t* of word 0 is type *t*. Completion events
//! (type 0) are not subscribed: they go to the EQ a CQ names. `uar_page` names the UAR
//! whose EQ doorbells ([`crate::datapath::uar::EQ_DOORBELL_ARM`]) update and arm the EQ;
//! `intr` is the MSI-X vector.
//!
//! rdma-core's VFIO provider creates one EQ of 256 entries, one PAS entry, vector 0,
//! subscribed to CMD and PAGE_REQUEST (`event_bitmask` word 0 = 0xc00).

use crate::datapath::eqe::EventType;
use crate::field::{Field, Layout, TooShort};
use crate::prm_layout;

use super::cmd::{self, Opcode};

prm_layout! {
    /// CREATE_EQ input; the EQ buffer's page addresses (`pas`) follow at byte 0x110.
    pub mod create_eq_in = "create_eq_in" (0x880) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// The EQ context ([`eqc`](super::eqc)).
        eq_context_entry: 0x80, 0x200;
        /// Event types the EQ receives: four 64-bit words; bit t of word 0 subscribes event type t.
        event_bitmask: 0x2c0, 0x100;
        /// Flexible array of 64-bit page addresses.
        pas: 0x880, 0;
    }
}

prm_layout! {
    /// CREATE_EQ output.
    pub mod create_eq_out = "create_eq_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// The new EQ's number.
        eq_number: 0x58, 8;
    }
}

prm_layout! {
    /// DESTROY_EQ input.
    pub mod destroy_eq_in = "destroy_eq_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// EQ number.
        eq_number: 0x58, 8;
    }
}

prm_layout! {
    /// DESTROY_EQ output.
    pub mod destroy_eq_out = "destroy_eq_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}

prm_layout! {
    /// QUERY_EQ input.
    pub mod query_eq_in = "query_eq_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// EQ number.
        eq_number: 0x58, 8;
    }
}

prm_layout! {
    /// QUERY_EQ output.
    pub mod query_eq_out = "query_eq_out" (0x880) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// The EQ context ([`eqc`](super::eqc)).
        eq_context_entry: 0x80, 0x200;
        /// Event types the EQ receives (first 64 types).
        event_bitmask: 0x2c0, 0x40;
        /// Flexible array of 64-bit page addresses.
        pas: 0x880, 0;
    }
}

prm_layout! {
    /// The event queue context.
    pub mod eqc = "eqc" (0x200) {
        /// EQ status (`MLX5_EQC_STATUS_*`).
        status: 0, 4;
        /// EQ on the embedded CPU side.
        ec: 0xd, 1;
        /// Overrun ignore.
        oi: 0xe, 1;
        /// EQ state (`MLX5_EQC_ST_*`: 0x9 armed, 0xa fired).
        st: 0x14, 4;
        /// Offset of the buffer in its first page, in 64-byte units.
        page_offset: 0x54, 6;
        /// log2 of the number of EQEs.
        log_eq_size: 0x63, 5;
        /// UAR page index of the doorbells.
        uar_page: 0x68, 0x18;
        /// MSI-X vector the EQ interrupts.
        intr: 0xb4, 0xc;
        /// log2 of the buffer page size minus 12.
        log_page_size: 0xc3, 5;
        /// Consumer counter.
        consumer_counter: 0x148, 0x18;
        /// Producer counter.
        producer_counter: 0x168, 0x18;
    }
}
/// The layouts of this module.
pub const LAYOUTS: &[&Layout] = &[
    &create_eq_in::LAYOUT,
    &create_eq_out::LAYOUT,
    &destroy_eq_in::LAYOUT,
    &destroy_eq_out::LAYOUT,
    &query_eq_in::LAYOUT,
    &query_eq_out::LAYOUT,
    &eqc::LAYOUT,
];

header_enum! {
    /// `eqc.status` (`MLX5_EQC_STATUS_*`).
    pub enum EqcStatus: u8 in Mlx5Ifc {
        /// Healthy.
        Ok = 0x0 => "MLX5_EQC_STATUS_OK",
        /// The device failed to write an EQE.
        EqWriteFailure = 0xa => "MLX5_EQC_STATUS_EQ_WRITE_FAILURE",
    }
}

header_enum! {
    /// `eqc.st` (`MLX5_EQC_ST_*`).
    pub enum EqcSt: u8 in Mlx5Ifc {
        /// Armed: the next EQE raises the interrupt.
        Armed = 0x9 => "MLX5_EQC_ST_ARMED",
        /// Fired: no interrupt until the EQ is armed again.
        Fired = 0xa => "MLX5_EQC_ST_FIRED",
    }
}

/// An eqc field placed where CREATE_EQ and QUERY_EQ carry the context (byte 0x10).
pub const fn in_command(field: Field) -> Field {
    field.at(create_eq_in::eq_context_entry.bit)
}

/// The bit of `event_bitmask` (CREATE_EQ layout) that subscribes event type `t`: bit
/// `t % 64` of big-endian word `t / 64`.
pub const fn event_bit(t: u8) -> Field {
    let word = t as u32 / 64;
    let bit = t as u32 % 64;
    Field::new(
        "event_bitmask",
        create_eq_in::event_bitmask.bit + word * 64 + (63 - bit),
        1,
    )
}

/// The first word of an `event_bitmask` subscribing `types` (all below 64).
pub fn event_mask_word0(types: &[EventType]) -> u64 {
    types
        .iter()
        .filter(|t| (**t as u8) < 64)
        .fold(0, |m, t| m | 1 << (*t as u8))
}

/// Whether a CREATE_EQ input subscribes event type `t`; false for a short input.
pub fn subscribes(create_eq_in: &[u8], t: u8) -> bool {
    let f = event_bit(t);
    f.fits(create_eq_in.len()) && f.get(create_eq_in) != 0
}

/// A CREATE_EQ input for an EQ of `1 << log_eq_size` entries in the pages `pas`,
/// doorbells in UAR `uar_page`, interrupts on MSI-X vector `intr`, subscribed to
/// `events`. `log_page_size` is the page size as log2 above 4 KiB.
pub fn create_eq_input(
    log_eq_size: u8,
    uar_page: u32,
    intr: u16,
    log_page_size: u8,
    events: &[EventType],
    pas: &[u64],
) -> Vec<u8> {
    let len = cmd::len_with_flex64(&create_eq_in::LAYOUT, pas.len()).unwrap_or(0);
    let mut input = cmd::new_input(Opcode::CreateEq, 0, len);
    in_command(eqc::log_eq_size).set(&mut input, log_eq_size.into());
    in_command(eqc::uar_page).set(&mut input, uar_page.into());
    in_command(eqc::intr).set(&mut input, intr.into());
    in_command(eqc::log_page_size).set(&mut input, log_page_size.into());
    let m = create_eq_in::event_bitmask;
    Field::new(m.name, m.bit, 64).set(&mut input, event_mask_word0(events));
    // The buffer was sized for the list above.
    let _ = cmd::set_flex64(&mut input, create_eq_in::pas, pas);
    input
}

/// The page addresses a CREATE_EQ input lists, as many as its ring of
/// `1 << log_eq_size` 64-byte EQEs needs in pages of `4096 << log_page_size` bytes,
/// checked against the input's length.
pub fn eq_pas(create_eq_in: &[u8]) -> Result<impl ExactSizeIterator<Item = u64> + '_, TooShort> {
    create_eq_in::LAYOUT.check(create_eq_in)?;
    let log_size = in_command(eqc::log_eq_size).get(create_eq_in) as u32;
    let log_page = in_command(eqc::log_page_size).get(create_eq_in) as u32 + 12;
    let bytes_log = log_size + 6;
    let npages = if bytes_log <= log_page {
        1
    } else {
        1usize << (bytes_log - log_page).min(63)
    };
    cmd::flex64_entries(create_eq_in, create_eq_in::pas, npages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdma_core_async_eq() {
        let input = create_eq_input(
            8,
            3,
            0,
            2,
            &[EventType::Cmd, EventType::PageRequest],
            &[0x40_0000],
        );
        assert_eq!(input.len(), 0x110 + 8);
        assert_eq!(&input[..2], &[0x03, 0x01]);
        // eqc at 0x10: log_eq_size dword 3 [28:24], uar_page [23:0].
        assert_eq!(&input[0x1c..0x20], &[0x08, 0, 0, 3]);
        // intr: dword 5 [11:0].
        assert_eq!(&input[0x24..0x28], &[0, 0, 0, 0]);
        // log_page_size: dword 6 [28:24].
        assert_eq!(input[0x28], 2);
        // event_bitmask word 0 at 0x58: 0xc00.
        assert_eq!(&input[0x58..0x60], &0xc00u64.to_be_bytes());
        assert!(subscribes(&input, 0x0a));
        assert!(subscribes(&input, 0x0b));
        assert!(!subscribes(&input, 0x00));
        assert!(!subscribes(&input[..0x58], 0x0a));
        assert_eq!(&input[0x110..], &0x40_0000u64.to_be_bytes());
        // 256 entries * 64 bytes = 16 KiB = one page of 4096 << 2.
        assert_eq!(eq_pas(&input).unwrap().collect::<Vec<_>>(), [0x40_0000]);
    }

    #[test]
    fn event_bits_beyond_the_first_word() {
        assert_eq!(event_bit(0).byte_offset(), 0x5f);
        assert_eq!(event_bit(64).byte_offset(), 0x67);
        let mut b = [0u8; create_eq_in::SIZE];
        event_bit(0x41).set(&mut b, 1);
        assert_eq!(&b[0x60..0x68], &2u64.to_be_bytes());
        assert!(subscribes(&b, 0x41));
    }

    #[test]
    fn eqc_fields() {
        let mut c = [0u8; eqc::SIZE];
        eqc::st.set(&mut c, EqcSt::Armed.value().into());
        eqc::oi.set(&mut c, 1);
        eqc::intr.set(&mut c, 0xabc);
        eqc::consumer_counter.set(&mut c, 0x12_3456);
        assert_eq!(&c[..4], &[0, 0x02, 0x09, 0]);
        assert_eq!(&c[0x14..0x18], &[0, 0, 0x0a, 0xbc]);
        assert_eq!(&c[0x28..0x2c], &[0, 0x12, 0x34, 0x56]);
        let mut out = [0u8; 16];
        create_eq_out::eq_number.set(&mut out, 7);
        assert_eq!(out[0x0b], 7);
        assert_eq!(destroy_eq_in::eq_number.byte_offset(), 0x0b);
        // A lying size is refused rather than read past the end.
        let mut lie = create_eq_input(20, 0, 0, 0, &[], &[0]);
        assert!(eq_pas(&lie).is_err());
        in_command(eqc::log_eq_size).set(&mut lie, 31);
        in_command(eqc::log_page_size).set(&mut lie, 0);
        assert!(eq_pas(&lie).is_err());
    }
}

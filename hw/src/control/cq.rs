//! Completion queues: CREATE_CQ / DESTROY_CQ / QUERY_CQ and the CQ context ([`cqc`]).
//!
//! A CQ is a ring of `1 << log_cq_size` CQEs of 64 bytes (`cqe_sz` 0) in host memory,
//! listed page by page in `pas` (byte 0x110 of CREATE_CQ; pages of
//! `4096 << log_page_size` bytes, the buffer starting `page_offset` * 64 bytes into the
//! first). `dbr_addr` is the 8-byte doorbell record, `uar_page` the UAR whose CQ arm
//! doorbell the driver rings, and the EQ number of completion events goes in
//! `c_eqn_or_apu_element` (the whole dword holds the EQN; DPDK and rdma-core's tests
//! name its low byte `c_eqn`).
//!
//! The 6.1 header hides the UMEM id and offset of CREATE_CQ as reserved bits, so only
//! `cq_umem_valid` is described; this model uses the `pas` list.

use crate::field::{Field, Layout, TooShort};
use crate::prm_layout;

use super::cmd::{self, Opcode};

prm_layout! {
    /// CREATE_CQ input; the CQ buffer's page addresses (`pas`) follow at byte 0x110.
    pub mod create_cq_in = "create_cq_in" (0x880) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// The CQ context ([`cqc`](super::cqc)).
        cq_context: 0x80, 0x200;
        /// The CQ buffer is a UMEM instead of the `pas` list.
        cq_umem_valid: 0x2e0, 1;
        /// Flexible array of 64-bit page addresses.
        pas: 0x880, 0;
    }
}

prm_layout! {
    /// CREATE_CQ output.
    pub mod create_cq_out = "create_cq_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// The new CQ's number.
        cqn: 0x48, 0x18;
    }
}

prm_layout! {
    /// DESTROY_CQ input.
    pub mod destroy_cq_in = "destroy_cq_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// CQ number.
        cqn: 0x48, 0x18;
    }
}

prm_layout! {
    /// DESTROY_CQ output.
    pub mod destroy_cq_out = "destroy_cq_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}

prm_layout! {
    /// QUERY_CQ input.
    pub mod query_cq_in = "query_cq_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// CQ number.
        cqn: 0x48, 0x18;
    }
}

prm_layout! {
    /// QUERY_CQ output.
    pub mod query_cq_out = "query_cq_out" (0x880) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// The CQ context ([`cqc`](super::cqc)).
        cq_context: 0x80, 0x200;
        /// Flexible array of 64-bit page addresses.
        pas: 0x880, 0;
    }
}

prm_layout! {
    /// The completion queue context.
    pub mod cqc = "cqc" (0x200) {
        /// CQ status (`MLX5_CQC_STATUS_*`).
        status: 0, 4;
        /// The doorbell record is in a UMEM.
        dbr_umem_valid: 6, 1;
        /// CQ of an APU (embedded processor) element.
        apu_cq: 7, 1;
        /// CQE size (`MLX5_CQC_CQE_SZ_*`: 0 = 64 bytes, 1 = 128 bytes).
        cqe_sz: 8, 3;
        /// Collapsed CQ: every CQE is written to entry 0.
        cc: 0xb, 1;
        /// Solicited CQE breaks moderation.
        scqe_break_moderation_en: 0xd, 1;
        /// Overrun ignore.
        oi: 0xe, 1;
        /// Moderation period mode (from EQE or from CQE).
        cq_period_mode: 0xf, 2;
        /// CQE compression enabled.
        cqe_comp_en: 0x11, 1;
        /// Mini-CQE format.
        mini_cqe_res_format: 0x12, 2;
        /// CQ state (`MLX5_CQC_ST_*`).
        st: 0x14, 4;
        /// Layout of compressed CQEs.
        cqe_compression_layout: 0x1e, 2;
        /// Offset of the buffer in its first page, in 64-byte units.
        page_offset: 0x54, 6;
        /// log2 of the number of CQEs.
        log_cq_size: 0x63, 5;
        /// UAR page index of the doorbells.
        uar_page: 0x68, 0x18;
        /// Moderation: period in microseconds.
        cq_period: 0x84, 0xc;
        /// Moderation: CQEs before an event.
        cq_max_count: 0x90, 0x10;
        /// Completion EQ number (low bits; the kernel name covers the APU element too).
        c_eqn_or_apu_element: 0xa0, 0x20;
        /// log2 of the buffer page size minus 12.
        log_page_size: 0xc3, 5;
        /// Index of the last notified CQE.
        last_notified_index: 0x108, 0x18;
        /// Index of the last solicited CQE.
        last_solicit_index: 0x128, 0x18;
        /// Consumer counter.
        consumer_counter: 0x148, 0x18;
        /// Producer counter.
        producer_counter: 0x168, 0x18;
        /// DMA address of the doorbell record.
        dbr_addr: 0x1c0, 0x40;
    }
}
prm_layout! {
    /// MODIFY_CQ input. With `op_mod` [`MLX5_CQ_OPMOD_RESIZE`] it moves the CQ to a
    /// new buffer: the context's `log_cq_size`, `page_offset` and `log_page_size`
    /// (as `modify_field_select_resize_field_select` selects them) describe it, and
    /// its page addresses follow at byte 0x110 as in CREATE_CQ (Linux `mlx5_ib`
    /// `mlx5_ib_resize_cq`).
    pub mod modify_cq_in = "modify_cq_in" (0x880) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier (`MLX5_CQ_OPMOD_*`).
        op_mod: 0x30, 0x10;
        /// CQ number.
        cqn: 0x48, 0x18;
        /// Which context fields apply (`MLX5_MODIFY_CQ_MASK_*`).
        modify_field_select_resize_field_select: 0x60, 0x20;
        /// The CQ context ([`cqc`](super::cqc)).
        cq_context: 0x80, 0x200;
        /// The CQ buffer is a UMEM instead of the `pas` list.
        cq_umem_valid: 0x2e0, 1;
        /// Flexible array of 64-bit page addresses.
        pas: 0x880, 0;
    }
}

prm_layout! {
    /// MODIFY_CQ output.
    pub mod modify_cq_out = "modify_cq_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}

c_constants! {
    /// MODIFY_CQ's `op_mod` and field-select bits (Linux `cq.h`).
    pub const MODIFY_CQ_CONSTANTS;
        /// `op_mod` of a resize.
        Cq MLX5_CQ_OPMOD_RESIZE: u16 = 1;
        /// Resize: `log_cq_size` applies.
        Cq MLX5_MODIFY_CQ_MASK_LOG_SIZE: u32 = 1 << 0;
        /// Resize: `page_offset` applies.
        Cq MLX5_MODIFY_CQ_MASK_PG_OFFSET: u32 = 1 << 1;
        /// Resize: `log_page_size` applies.
        Cq MLX5_MODIFY_CQ_MASK_PG_SIZE: u32 = 1 << 2;
}

/// The layouts of this module.
pub const LAYOUTS: &[&Layout] = &[
    &create_cq_in::LAYOUT,
    &create_cq_out::LAYOUT,
    &destroy_cq_in::LAYOUT,
    &destroy_cq_out::LAYOUT,
    &query_cq_in::LAYOUT,
    &query_cq_out::LAYOUT,
    &modify_cq_in::LAYOUT,
    &modify_cq_out::LAYOUT,
    &cqc::LAYOUT,
];

header_enum! {
    /// `cqc.status` (`MLX5_CQC_STATUS_*`).
    pub enum CqcStatus: u8 in Mlx5Ifc {
        /// Healthy.
        Ok = 0x0 => "MLX5_CQC_STATUS_OK",
        /// The CQ overflowed.
        CqOverflow = 0x9 => "MLX5_CQC_STATUS_CQ_OVERFLOW",
        /// The device failed to write a CQE.
        CqWriteFail = 0xa => "MLX5_CQC_STATUS_CQ_WRITE_FAIL",
    }
}

header_enum! {
    /// `cqc.cqe_sz` (`MLX5_CQC_CQE_SZ_*`).
    pub enum CqcCqeSz: u8 in Mlx5Ifc {
        /// 64-byte CQEs.
        Bytes64 = 0x0 => "MLX5_CQC_CQE_SZ_64_BYTES",
        /// 128-byte CQEs.
        Bytes128 = 0x1 => "MLX5_CQC_CQE_SZ_128_BYTES",
    }
}

header_enum! {
    /// `cqc.st` (`MLX5_CQC_ST_*`).
    pub enum CqcSt: u8 in Mlx5Ifc {
        /// Armed for solicited completions only.
        SolicitedNotificationRequestArmed = 0x6 => "MLX5_CQC_ST_SOLICITED_NOTIFICATION_REQUEST_ARMED",
        /// Armed for the next completion.
        NotificationRequestArmed = 0x9 => "MLX5_CQC_ST_NOTIFICATION_REQUEST_ARMED",
        /// An event was generated; no other until the CQ is armed again.
        Fired = 0xa => "MLX5_CQC_ST_FIRED",
    }
}

/// A cqc field placed where CREATE_CQ and QUERY_CQ carry the context (byte 0x10).
pub const fn in_command(field: Field) -> Field {
    field.at(create_cq_in::cq_context.bit)
}

/// Byte offset of the page list in CREATE_CQ (0x110).
pub const PAS_OFFSET: usize = create_cq_in::pas.byte_offset();

/// A CREATE_CQ input for a CQ of `1 << log_cq_size` 64-byte CQEs in the pages `pas`,
/// arm doorbell in UAR `uar_page`, completion events to EQ `eqn`, doorbell record at
/// `dbr_addr`. `log_page_size` is the page size as log2 above 4 KiB.
pub fn create_cq_input(
    log_cq_size: u8,
    uar_page: u32,
    eqn: u32,
    dbr_addr: u64,
    log_page_size: u8,
    pas: &[u64],
) -> Vec<u8> {
    let len = cmd::len_with_flex64(&create_cq_in::LAYOUT, pas.len()).unwrap_or(0);
    let mut input = cmd::new_input(Opcode::CreateCq, 0, len);
    in_command(cqc::cqe_sz).set(&mut input, CqcCqeSz::Bytes64.value().into());
    in_command(cqc::log_cq_size).set(&mut input, log_cq_size.into());
    in_command(cqc::uar_page).set(&mut input, uar_page.into());
    in_command(cqc::c_eqn_or_apu_element).set(&mut input, eqn.into());
    in_command(cqc::log_page_size).set(&mut input, log_page_size.into());
    in_command(cqc::dbr_addr).set(&mut input, dbr_addr);
    // The buffer was sized for the list above.
    let _ = cmd::set_flex64(&mut input, create_cq_in::pas, pas);
    input
}

/// A MODIFY_CQ input that resizes CQ `cqn` to `1 << log_cq_size` CQEs of
/// `cqe_size` bytes (64 or 128) in the pages `pas` (pages of `4096 << log_page_size`
/// bytes, the ring starting at byte 0 of the first), with every resize field selected,
/// as Linux `mlx5_ib_resize_cq` builds it.
pub fn resize_cq_input(
    cqn: u32,
    log_cq_size: u8,
    cqe_size: usize,
    log_page_size: u8,
    pas: &[u64],
) -> Vec<u8> {
    let len = cmd::len_with_flex64(&modify_cq_in::LAYOUT, pas.len()).unwrap_or(0);
    let mut input = cmd::new_input(Opcode::ModifyCq, MLX5_CQ_OPMOD_RESIZE, len);
    modify_cq_in::cqn.set(&mut input, cqn.into());
    modify_cq_in::modify_field_select_resize_field_select.set(
        &mut input,
        (MLX5_MODIFY_CQ_MASK_LOG_SIZE
            | MLX5_MODIFY_CQ_MASK_PG_OFFSET
            | MLX5_MODIFY_CQ_MASK_PG_SIZE)
            .into(),
    );
    let sz = if cqe_size == 128 {
        CqcCqeSz::Bytes128
    } else {
        CqcCqeSz::Bytes64
    };
    in_command(cqc::cqe_sz).set(&mut input, sz.value().into());
    in_command(cqc::log_cq_size).set(&mut input, log_cq_size.into());
    in_command(cqc::log_page_size).set(&mut input, log_page_size.into());
    // The buffer was sized for the list above.
    let _ = cmd::set_flex64(&mut input, modify_cq_in::pas, pas);
    input
}

/// The page addresses a CREATE_CQ input lists, as many as its CQE ring needs
/// (`cqe_sz`, `log_cq_size`, `log_page_size`, `page_offset`), checked against the
/// input's length.
pub fn cq_pas(create_cq_in: &[u8]) -> Result<impl ExactSizeIterator<Item = u64> + '_, TooShort> {
    create_cq_in::LAYOUT.check(create_cq_in)?;
    let cqe_log = if in_command(cqc::cqe_sz).get(create_cq_in) == 0 {
        6
    } else {
        7
    };
    let bytes = 1u64 << (in_command(cqc::log_cq_size).get(create_cq_in) + cqe_log);
    let offset = in_command(cqc::page_offset).get(create_cq_in) * 64;
    let page = 1u64 << (in_command(cqc::log_page_size).get(create_cq_in) + 12);
    let npages = (bytes + offset).div_ceil(page);
    cmd::flex64_entries(create_cq_in, create_cq_in::pas, npages as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_cq_placement() {
        let input = create_cq_input(
            8,
            5,
            3,
            0xdead_0000,
            0,
            &[0x10_0000, 0x10_1000, 0x10_2000, 0x10_3000],
        );
        assert_eq!(input.len(), 0x110 + 32);
        assert_eq!(&input[..2], &[0x04, 0x00]);
        // log_cq_size dword 3 [28:24] of the cqc at 0x10, uar_page [23:0].
        assert_eq!(&input[0x1c..0x20], &[0x08, 0, 0, 5]);
        // c_eqn: cqc dword 5, low byte at absolute 0x27.
        assert_eq!(&input[0x24..0x28], &[0, 0, 0, 3]);
        // dbr_addr: cqc dword 14.
        assert_eq!(&input[0x48..0x50], &0xdead_0000u64.to_be_bytes());
        assert_eq!(PAS_OFFSET, 0x110);
        // 256 CQEs * 64 bytes = 4 pages of 4 KiB.
        let pas: Vec<u64> = cq_pas(&input).unwrap().collect();
        assert_eq!(pas, [0x10_0000, 0x10_1000, 0x10_2000, 0x10_3000]);
        assert!(cq_pas(&input[..0x110 + 24]).is_err());
    }

    #[test]
    fn cqc_fields() {
        let mut c = [0u8; cqc::SIZE];
        cqc::cqe_sz.set(&mut c, CqcCqeSz::Bytes128.value().into());
        cqc::oi.set(&mut c, 1);
        cqc::st.set(&mut c, CqcSt::NotificationRequestArmed.value().into());
        assert_eq!(&c[..4], &[0, 0x22, 0x09, 0]);
        cqc::cq_period.set(&mut c, 0xfff);
        cqc::cq_max_count.set(&mut c, 0x1234);
        assert_eq!(&c[0x10..0x14], &[0x0f, 0xff, 0x12, 0x34]);
        cqc::page_offset.set(&mut c, 0x3f);
        assert_eq!(&c[8..12], &[0, 0, 0x0f, 0xc0]);
        let mut out = [0u8; 16];
        create_cq_out::cqn.set(&mut out, 0x12_3456);
        assert_eq!(&out[8..12], &[0, 0x12, 0x34, 0x56]);
        assert_eq!(create_cq_in::cq_umem_valid.byte_offset(), 0x5c);
    }
}

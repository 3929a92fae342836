//! Memory keys: CREATE_MKEY / DESTROY_MKEY / QUERY_MKEY and the mkey context ([`mkc`]).
//!
//! A memory region is an mkey in MTT access mode: the context gives the PD, the
//! access rights, the start address and length, and the page size of the translation;
//! the translation itself is a list of big-endian 64-bit page addresses (MTT entries,
//! bit 0 = read and bit 1 = write when `pg_access` is set) at byte 0x110 of the input,
//! padded to an even count. The key is `(mkey_index << 8) | mkey_7_0`: firmware picks
//! the index, software the low byte. DESTROY_MKEY takes the index (`key >> 8`).
//!
//! Note `mkc.log_page_size` is the absolute log2 (12 for 4 KiB), unlike the EQ, CQ and
//! QP contexts, where it is relative to 4 KiB. The 6.1 header declares it 5 bits wide.

use crate::field::Layout;
use crate::prm_layout;

use super::cmd::{self, Opcode};

prm_layout! {
    /// CREATE_MKEY input; the translation entries (`klm_pas_mtt`) follow at byte 0x110.
    pub mod create_mkey_in = "create_mkey_in" (0x880) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// MTT entries carry read/write permission bits.
        pg_access: 0x60, 1;
        /// The translation is a UMEM.
        mkey_umem_valid: 0x61, 1;
        /// The mkey context ([`mkc`](super::mkc)).
        memory_key_mkey_entry: 0x80, 0x200;
        /// Octwords of translation entries in this command.
        translations_octword_actual_size: 0x300, 0x20;
        /// Flexible array of translation entries (32-bit units; an MTT entry is 64 bits).
        klm_pas_mtt: 0x880, 0;
    }
}

prm_layout! {
    /// CREATE_MKEY output.
    pub mod create_mkey_out = "create_mkey_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// The new key's index (the key >> 8).
        mkey_index: 0x48, 0x18;
    }
}

prm_layout! {
    /// DESTROY_MKEY input.
    pub mod destroy_mkey_in = "destroy_mkey_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// Memory key index (the key >> 8).
        mkey_index: 0x48, 0x18;
    }
}

prm_layout! {
    /// DESTROY_MKEY output.
    pub mod destroy_mkey_out = "destroy_mkey_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}

prm_layout! {
    /// QUERY_MKEY input.
    pub mod query_mkey_in = "query_mkey_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// Memory key index (the key >> 8).
        mkey_index: 0x48, 0x18;
        /// MTT entries carry read/write permission bits.
        pg_access: 0x60, 1;
    }
}

prm_layout! {
    /// QUERY_MKEY output.
    pub mod query_mkey_out = "query_mkey_out" (0x980) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// The mkey context ([`mkc`](super::mkc)).
        memory_key_mkey_entry: 0x80, 0x200;
        /// First translation entries of the key (BSF, KLM or MTT 0..1).
        bsf0_klm0_pas_mtt0_1: 0x880, 0x80;
        /// Next translation entries of the key (BSF, KLM or MTT 2..3).
        bsf1_klm1_pas_mtt2_3: 0x900, 0x80;
    }
}

prm_layout! {
    /// The memory key context.
    pub mod mkc = "mkc" (0x200) {
        /// The key is free (not in use).
        free: 1, 1;
        /// Access mode bits 4..2.
        access_mode_4_2: 3, 3;
        /// Relaxed ordering for writes.
        relaxed_ordering_write: 0xd, 1;
        /// Small fence on RDMA read response.
        small_fence_on_rdma_read_response: 0xf, 1;
        /// UMR enabled.
        umr_en: 0x10, 1;
        /// Remote atomic access allowed.
        a: 0x11, 1;
        /// Remote write access.
        rw: 0x12, 1;
        /// Remote read access.
        rr: 0x13, 1;
        /// Local write access.
        lw: 0x14, 1;
        /// Local read access.
        lr: 0x15, 1;
        /// Access mode bits 1..0 (`MLX5_MKC_ACCESS_MODE_*`; 1 = MTT).
        access_mode_1_0: 0x16, 2;
        /// Memory address translation mode.
        ma_translation_mode: 0x1a, 2;
        /// QP the key is bound to; 0xffffff for none.
        qpn: 0x20, 0x18;
        /// Variant byte of the key: lkey = rkey = (mkey_index << 8) | mkey_7_0.
        mkey_7_0: 0x38, 8;
        /// Length is 2^64 (the whole address space).
        length64: 0x60, 1;
        /// Byte-stream format (signature) enabled.
        bsf_en: 0x61, 1;
        /// Synchronous UMR.
        sync_umr: 0x62, 1;
        /// Expected signature error count.
        expected_sigerr_count: 0x65, 1;
        /// Remote invalidation enabled.
        en_rinval: 0x67, 1;
        /// Protection domain.
        pd: 0x68, 0x18;
        /// Start address (the VA the key translates).
        start_addr: 0x80, 0x40;
        /// Length in bytes.
        len: 0xc0, 0x40;
        /// Size of the BSF in octwords; 0 without signature.
        bsf_octword_size: 0x100, 0x20;
        /// Octwords of translation entries: (pages + 1) / 2 for MTTs.
        translations_octword_size: 0x1a0, 0x20;
        /// Relaxed ordering for reads.
        relaxed_ordering_read: 0x1d9, 1;
        /// Absolute log2 of the translation page size (12 for 4 KiB).
        log_page_size: 0x1db, 5;
    }
}
/// The layouts of this module.
pub const LAYOUTS: &[&Layout] = &[
    &create_mkey_in::LAYOUT,
    &create_mkey_out::LAYOUT,
    &destroy_mkey_in::LAYOUT,
    &destroy_mkey_out::LAYOUT,
    &query_mkey_in::LAYOUT,
    &query_mkey_out::LAYOUT,
    &mkc::LAYOUT,
];

header_enum! {
    /// `mkc.access_mode_1_0` / `access_mode_4_2` combined (`MLX5_MKC_ACCESS_MODE_*`).
    pub enum MkcAccessMode: u8 in Mlx5Ifc {
        /// Physical addresses.
        Pa = 0x0 => "MLX5_MKC_ACCESS_MODE_PA",
        /// Memory translation table: a list of pages.
        Mtt = 0x1 => "MLX5_MKC_ACCESS_MODE_MTT",
        /// Key-length-memory lists.
        Klms = 0x2 => "MLX5_MKC_ACCESS_MODE_KLMS",
        /// Key-segment-memory lists.
        Ksm = 0x3 => "MLX5_MKC_ACCESS_MODE_KSM",
        /// Software-owned ICM.
        SwIcm = 0x4 => "MLX5_MKC_ACCESS_MODE_SW_ICM",
        /// On-chip memory.
        Memic = 0x5 => "MLX5_MKC_ACCESS_MODE_MEMIC",
    }
}

/// MTT entry bit: the page may be read (Linux `mlx5_ib` `MLX5_MTT_READ`).
pub const MTT_READ: u64 = 1;
/// MTT entry bit: the page may be written (`MLX5_MTT_WRITE`).
pub const MTT_WRITE: u64 = 2;

/// `mkc.qpn` of a key bound to no QP.
pub const MKC_QPN_NONE: u32 = 0xff_ffff;

/// Byte offset of the translation entries in CREATE_MKEY (0x110).
pub const MTT_OFFSET: usize = create_mkey_in::klm_pas_mtt.byte_offset();

/// The key (lkey = rkey) of mkey `index` with software byte `variant`.
pub const fn mkey(index: u32, variant: u8) -> u32 {
    (index << 8) | variant as u32
}

/// The index of a key (what DESTROY_MKEY and QUERY_MKEY take).
pub const fn mkey_index(key: u32) -> u32 {
    key >> 8
}

/// `translations_octword_size` for `npages` MTT entries: two entries per octword.
pub const fn mtt_octwords(npages: usize) -> usize {
    npages.div_ceil(2)
}

/// Length of a CREATE_MKEY input carrying `npages` MTT entries (padded to an even
/// count), or `None` on overflow.
pub const fn create_mkey_in_len(npages: usize) -> Option<usize> {
    match mtt_octwords(npages).checked_mul(2) {
        Some(n) => cmd::len_with_flex64(&create_mkey_in::LAYOUT, n),
        None => None,
    }
}

/// The mkc fields of an mkey: `mkc` moved to where CREATE_MKEY / QUERY_MKEY carry it.
pub const fn in_command(field: crate::Field) -> crate::Field {
    field.at(create_mkey_in::memory_key_mkey_entry.bit)
}

/// A zeroed CREATE_MKEY input sized for `npages` MTT entries with its header written.
pub fn create_mkey_input(npages: usize) -> Vec<u8> {
    cmd::new_input(
        Opcode::CreateMkey,
        0,
        create_mkey_in_len(npages).unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mkc_placement() {
        let mut input = create_mkey_input(3);
        assert_eq!(input.len(), 0x110 + 4 * 8);
        create_mkey_in::pg_access.set(&mut input, 1);
        assert_eq!(input[0x0c], 0x80);
        in_command(mkc::access_mode_1_0).set(&mut input, MkcAccessMode::Mtt.value().into());
        in_command(mkc::lr).set(&mut input, 1);
        in_command(mkc::lw).set(&mut input, 1);
        in_command(mkc::rr).set(&mut input, 1);
        in_command(mkc::rw).set(&mut input, 1);
        in_command(mkc::a).set(&mut input, 1);
        // access bits a rw rr lw lr | access_mode_1_0 in mkc byte 2.
        assert_eq!(input[0x10 + 2], 0b0111_1101);
        in_command(mkc::qpn).set(&mut input, MKC_QPN_NONE.into());
        in_command(mkc::mkey_7_0).set(&mut input, 0x42);
        assert_eq!(&input[0x14..0x18], &[0xff, 0xff, 0xff, 0x42]);
        in_command(mkc::pd).set(&mut input, 0x12_3456);
        assert_eq!(&input[0x1d..0x20], &[0x12, 0x34, 0x56]);
        in_command(mkc::start_addr).set(&mut input, 0x7f00_1234_5000);
        assert_eq!(&input[0x20..0x28], &0x7f00_1234_5000u64.to_be_bytes());
        in_command(mkc::len).set(&mut input, 0x3000);
        assert_eq!(&input[0x28..0x30], &0x3000u64.to_be_bytes());
        in_command(mkc::translations_octword_size).set(&mut input, mtt_octwords(3) as u64);
        assert_eq!(&input[0x10 + 0x34..0x10 + 0x38], &[0, 0, 0, 2]);
        in_command(mkc::log_page_size).set(&mut input, 12);
        assert_eq!(input[0x10 + 0x3b], 12);
        create_mkey_in::translations_octword_actual_size.set(&mut input, 2);
        assert_eq!(&input[0x60..0x64], &[0, 0, 0, 2]);
        cmd::set_flex64(
            &mut input,
            create_mkey_in::klm_pas_mtt,
            &[0x1000 | MTT_READ | MTT_WRITE],
        )
        .unwrap();
        assert_eq!(MTT_OFFSET, 0x110);
        assert_eq!(&input[0x110..0x118], &[0, 0, 0, 0, 0, 0, 0x10, 0x03]);
    }

    #[test]
    fn keys() {
        assert_eq!(mkey(0x12_3456, 0x78), 0x1234_5678);
        assert_eq!(mkey_index(0x1234_5678), 0x12_3456);
        assert_eq!(mtt_octwords(0), 0);
        assert_eq!(mtt_octwords(1), 1);
        assert_eq!(mtt_octwords(4), 2);
        assert_eq!(create_mkey_in_len(usize::MAX), None);
        let mut out = [0u8; 16];
        create_mkey_out::mkey_index.set(&mut out, 0x12_3456);
        assert_eq!(&out[8..12], &[0, 0x12, 0x34, 0x56]);
        assert_eq!(destroy_mkey_in::mkey_index.byte_offset(), 9);
        assert_eq!(query_mkey_out::SIZE, 304);
    }
}

//! Firmware pages: QUERY_PAGES and MANAGE_PAGES.
//!
//! Firmware asks for host memory in 4 KiB pages: QUERY_PAGES says how many it needs
//! (boot, init, then regular pages on request), MANAGE_PAGES GIVE hands them over as a
//! list of big-endian 64-bit DMA addresses (`pas`, at byte 0x10 of the input), and
//! MANAGE_PAGES TAKE gets them back (listed at byte 0x10 of the output). A page request
//! event (EQE type 0x0b) asks for more pages, or for pages back when its count is
//! negative.

use crate::field::{Layout, TooShort};
use crate::prm_layout;

use super::cmd::{self, Opcode};

prm_layout! {
    /// QUERY_PAGES input; op_mod 1/2/3 = boot/init/regular pages.
    pub mod query_pages_in = "query_pages_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// The function is on the embedded CPU side.
        embedded_cpu_function: 0x40, 1;
        /// Function; 0 for the function itself.
        function_id: 0x50, 0x10;
    }
}

prm_layout! {
    /// QUERY_PAGES output.
    pub mod query_pages_out = "query_pages_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// The function is on the embedded CPU side.
        embedded_cpu_function: 0x40, 1;
        /// Function; 0 for the function itself.
        function_id: 0x50, 0x10;
        /// Pages firmware needs (signed: negative asks for pages back).
        num_pages: 0x60, 0x20;
    }
}

prm_layout! {
    /// MANAGE_PAGES input; op_mod 0/1/2 = cannot give/give/take; `pas` lists the pages given.
    pub mod manage_pages_in = "manage_pages_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// The function is on the embedded CPU side.
        embedded_cpu_function: 0x40, 1;
        /// Function; 0 for the function itself.
        function_id: 0x50, 0x10;
        /// Number of `pas` entries given (GIVE) or pages requested (TAKE).
        input_num_entries: 0x60, 0x20;
        /// Flexible array of 64-bit page addresses.
        pas: 0x80, 0;
    }
}

prm_layout! {
    /// MANAGE_PAGES output; `pas` lists the pages returned by a TAKE.
    pub mod manage_pages_out = "manage_pages_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// Number of `pas` entries returned (TAKE).
        output_num_entries: 0x40, 0x20;
        /// Flexible array of 64-bit page addresses.
        pas: 0x80, 0;
    }
}
/// The layouts of this module.
pub const LAYOUTS: &[&Layout] = &[
    &query_pages_in::LAYOUT,
    &query_pages_out::LAYOUT,
    &manage_pages_in::LAYOUT,
    &manage_pages_out::LAYOUT,
];

header_enum! {
    /// QUERY_PAGES op_mod (`MLX5_QUERY_PAGES_IN_OP_MOD_*`).
    pub enum QueryPagesOpMod: u16 in Mlx5Ifc {
        /// Pages needed before capabilities are set.
        BootPages = 0x1 => "MLX5_QUERY_PAGES_IN_OP_MOD_BOOT_PAGES",
        /// Pages needed before INIT_HCA.
        InitPages = 0x2 => "MLX5_QUERY_PAGES_IN_OP_MOD_INIT_PAGES",
        /// Pages needed at run time.
        RegularPages = 0x3 => "MLX5_QUERY_PAGES_IN_OP_MOD_REGULAR_PAGES",
    }
}

header_enum! {
    /// MANAGE_PAGES op_mod (`MLX5_MANAGE_PAGES_IN_OP_MOD_*`).
    pub enum ManagePagesOpMod: u16 in Mlx5Ifc {
        /// The driver cannot satisfy the request ("CANT_GIVE").
        AllocationFail = 0x0 => "MLX5_MANAGE_PAGES_IN_OP_MOD_ALLOCATION_FAIL",
        /// The driver gives the pages listed in `pas` ("GIVE").
        AllocationSuccess = 0x1 => "MLX5_MANAGE_PAGES_IN_OP_MOD_ALLOCATION_SUCCESS",
        /// Firmware returns up to `input_num_entries` pages ("TAKE").
        HcaReturnPages = 0x2 => "MLX5_MANAGE_PAGES_IN_OP_MOD_HCA_RETURN_PAGES",
    }
}

/// Byte offset of the page list in the MANAGE_PAGES input and output (0x10).
pub const PAS_OFFSET: usize = manage_pages_in::pas.byte_offset();

/// Size of a firmware page.
pub const FW_PAGE_SIZE: usize = crate::bus::ADAPTER_PAGE_SIZE;

/// The signed page count of a QUERY_PAGES output (negative: firmware has pages to
/// return).
pub fn num_pages(query_pages_out: &[u8]) -> Result<i32, TooShort> {
    query_pages_out::LAYOUT.check(query_pages_out)?;
    Ok(query_pages_out::num_pages.get(query_pages_out) as u32 as i32)
}

/// A MANAGE_PAGES GIVE input for `function_id` listing `pages` (DMA addresses of 4 KiB
/// pages).
pub fn give_pages_in(function_id: u16, pages: &[u64]) -> Vec<u8> {
    let len = cmd::len_with_flex64(&manage_pages_in::LAYOUT, pages.len()).unwrap_or(0);
    let mut input = cmd::new_input(
        Opcode::ManagePages,
        ManagePagesOpMod::AllocationSuccess.value(),
        len,
    );
    manage_pages_in::function_id.set(&mut input, function_id.into());
    manage_pages_in::input_num_entries.set(&mut input, pages.len() as u64);
    // The buffer was sized for the list above.
    let _ = cmd::set_flex64(&mut input, manage_pages_in::pas, pages);
    input
}

/// The pages a MANAGE_PAGES GIVE input lists, checked against its length.
pub fn given_pages(
    manage_pages_in: &[u8],
) -> Result<impl ExactSizeIterator<Item = u64> + '_, TooShort> {
    manage_pages_in::LAYOUT.check(manage_pages_in)?;
    let n = manage_pages_in::input_num_entries.get(manage_pages_in) as usize;
    cmd::flex64_entries(manage_pages_in, manage_pages_in::pas, n)
}

/// The pages a MANAGE_PAGES TAKE output returns, checked against its length.
pub fn returned_pages(
    manage_pages_out: &[u8],
) -> Result<impl ExactSizeIterator<Item = u64> + '_, TooShort> {
    manage_pages_out::LAYOUT.check(manage_pages_out)?;
    let n = manage_pages_out::output_num_entries.get(manage_pages_out) as usize;
    cmd::flex64_entries(manage_pages_out, manage_pages_out::pas, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_pages_count_is_signed() {
        let mut out = [0u8; 16];
        query_pages_out::num_pages.set(&mut out, (-3i32) as u32 as u64);
        assert_eq!(&out[12..16], &[0xff, 0xff, 0xff, 0xfd]);
        assert_eq!(num_pages(&out), Ok(-3));
        query_pages_out::function_id.set(&mut out, 7);
        assert_eq!(&out[8..12], &[0, 0, 0, 7]);
        assert!(num_pages(&out[..15]).is_err());
    }

    #[test]
    fn give_pages_layout() {
        assert_eq!(PAS_OFFSET, 0x10);
        let input = give_pages_in(0, &[0x1000, 0x2000, 0x7fff_f000]);
        assert_eq!(input.len(), 16 + 3 * 8);
        assert_eq!(&input[..8], &[0x01, 0x08, 0, 0, 0, 0, 0, 1]);
        assert_eq!(&input[12..16], &[0, 0, 0, 3]);
        assert_eq!(&input[0x10..0x18], &0x1000u64.to_be_bytes());
        assert_eq!(&input[0x20..0x28], &0x7fff_f000u64.to_be_bytes());
        let pages: Vec<u64> = given_pages(&input).unwrap().collect();
        assert_eq!(pages, [0x1000, 0x2000, 0x7fff_f000]);
        // A count larger than the list is refused, not read past the end.
        let mut lying = input.clone();
        manage_pages_in::input_num_entries.set(&mut lying, 0xffff_ffff);
        assert!(given_pages(&lying).is_err());
        assert!(given_pages(&input[..8]).is_err());
    }

    #[test]
    fn returned_pages_layout() {
        let mut out = vec![0u8; 16 + 16];
        manage_pages_out::output_num_entries.set(&mut out, 2);
        assert_eq!(&out[8..12], &[0, 0, 0, 2]);
        out[0x17] = 0x10;
        out[0x1f] = 0x20;
        let pages: Vec<u64> = returned_pages(&out).unwrap().collect();
        assert_eq!(pages, [0x10, 0x20]);
    }
}

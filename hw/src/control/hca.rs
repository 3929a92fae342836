//! Bringing the HCA up and down: ENABLE_HCA / DISABLE_HCA, QUERY_ISSI / SET_ISSI,
//! INIT_HCA and TEARDOWN_HCA.
//!
//! Order at bring-up (reference `mlx5-controlpath.md` §3): ENABLE_HCA, QUERY_ISSI and
//! SET_ISSI(1), boot pages, host endianness, capabilities, init pages, INIT_HCA. At the
//! end TEARDOWN_HCA (profile GRACEFUL_CLOSE), page reclaim and DISABLE_HCA (Linux; the
//! rdma-core VFIO provider stops after TEARDOWN_HCA).

use crate::field::Layout;
use crate::prm_layout;

prm_layout! {
    /// ENABLE_HCA input: enables the function; the first command after the queue is up.
    pub mod enable_hca_in = "enable_hca_in" (0x80) {
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
    /// ENABLE_HCA output (12 bytes in the 6.1 header).
    pub mod enable_hca_out = "enable_hca_out" (0x60) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}

prm_layout! {
    /// DISABLE_HCA input.
    pub mod disable_hca_in = "disable_hca_in" (0x80) {
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
    /// DISABLE_HCA output (12 bytes in the 6.1 header).
    pub mod disable_hca_out = "disable_hca_out" (0x60) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}

prm_layout! {
    /// QUERY_ISSI input.
    pub mod query_issi_in = "query_issi_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
    }
}

prm_layout! {
    /// QUERY_ISSI output: current and supported interface step sequence ids.
    pub mod query_issi_out = "query_issi_out" (0x380) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// ISSI in use.
        current_issi: 0x50, 0x10;
        /// Supported ISSIs: bit n set means ISSI n.
        supported_issi_dw0: 0x360, 0x20;
    }
}

prm_layout! {
    /// SET_ISSI input.
    pub mod set_issi_in = "set_issi_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// Interface step sequence id in use.
        current_issi: 0x50, 0x10;
    }
}

prm_layout! {
    /// SET_ISSI output.
    pub mod set_issi_out = "set_issi_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}

prm_layout! {
    /// INIT_HCA input.
    pub mod init_hca_in = "init_hca_in" (0x100) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// Software vHCA id.
        sw_vhca_id: 0x62, 0xe;
        /// Software owner id.
        sw_owner_id: 0x80, 0x80;
    }
}

prm_layout! {
    /// INIT_HCA output.
    pub mod init_hca_out = "init_hca_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}

prm_layout! {
    /// TEARDOWN_HCA input.
    pub mod teardown_hca_in = "teardown_hca_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// Teardown profile (`MLX5_TEARDOWN_HCA_IN_PROFILE_*`).
        profile: 0x50, 0x10;
    }
}

prm_layout! {
    /// TEARDOWN_HCA output.
    pub mod teardown_hca_out = "teardown_hca_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// Fast teardown result (`MLX5_TEARDOWN_HCA_OUT_FORCE_STATE_*`).
        state: 0x7f, 1;
    }
}
/// The layouts of this module.
pub const LAYOUTS: &[&Layout] = &[
    &enable_hca_in::LAYOUT,
    &enable_hca_out::LAYOUT,
    &disable_hca_in::LAYOUT,
    &disable_hca_out::LAYOUT,
    &query_issi_in::LAYOUT,
    &query_issi_out::LAYOUT,
    &set_issi_in::LAYOUT,
    &set_issi_out::LAYOUT,
    &init_hca_in::LAYOUT,
    &init_hca_out::LAYOUT,
    &teardown_hca_in::LAYOUT,
    &teardown_hca_out::LAYOUT,
];

header_enum! {
    /// TEARDOWN_HCA `profile` values (`MLX5_TEARDOWN_HCA_IN_PROFILE_*`).
    pub enum TeardownProfile: u16 in Mlx5Ifc {
        /// Orderly close; what both drivers use.
        GracefulClose = 0x0 => "MLX5_TEARDOWN_HCA_IN_PROFILE_GRACEFUL_CLOSE",
        /// Forced close.
        ForceClose = 0x1 => "MLX5_TEARDOWN_HCA_IN_PROFILE_FORCE_CLOSE",
        /// First half of a fast teardown (followed by NIC interface DISABLED).
        PrepareFastTeardown = 0x2 => "MLX5_TEARDOWN_HCA_IN_PROFILE_PREPARE_FAST_TEARDOWN",
    }
}

header_enum! {
    /// TEARDOWN_HCA output `state` (`MLX5_TEARDOWN_HCA_OUT_FORCE_STATE_*`).
    pub enum TeardownState: u8 in Mlx5Ifc {
        /// The forced or fast teardown succeeded.
        Success = 0x0 => "MLX5_TEARDOWN_HCA_OUT_FORCE_STATE_SUCCESS",
        /// It failed; fall back to a graceful close.
        Fail = 0x1 => "MLX5_TEARDOWN_HCA_OUT_FORCE_STATE_FAIL",
    }
}

/// The ISSI every ConnectX-4 and later supports and rdma-core requires.
pub const ISSI_1: u16 = 1;

/// Whether a QUERY_ISSI output says ISSI `issi` is supported. Only the lowest 32 ISSIs
/// are visible (`supported_issi_dw0`); a short output supports nothing.
pub fn issi_supported(query_issi_out: &[u8], issi: u16) -> bool {
    let f = query_issi_out::supported_issi_dw0;
    issi < 32 && f.fits(query_issi_out.len()) && f.get(query_issi_out) & (1 << issi) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements() {
        // ENABLE_HCA: function_id at byte 0x0a, embedded_cpu_function at 0x08 bit 7.
        let mut b = [0u8; 16];
        enable_hca_in::function_id.set(&mut b, 0x1234);
        enable_hca_in::embedded_cpu_function.set(&mut b, 1);
        assert_eq!(&b[8..12], &[0x80, 0, 0x12, 0x34]);
        // QUERY_ISSI: supported ISSIs in the dword at 0x6c, current at 0x0a.
        let mut out = [0u8; query_issi_out::SIZE];
        out[0x6f] = 0b11;
        out[0x0b] = 1;
        assert!(issi_supported(&out, 0));
        assert!(issi_supported(&out, ISSI_1));
        assert!(!issi_supported(&out, 2));
        assert!(!issi_supported(&out, 40));
        assert!(!issi_supported(&out[..0x6c], 1));
        assert_eq!(query_issi_out::current_issi.get(&out), 1);
        // INIT_HCA: sw_vhca_id is 14 bits at dword 3 [29:16].
        let mut i = [0u8; init_hca_in::SIZE];
        init_hca_in::sw_vhca_id.set(&mut i, 0x3fff);
        assert_eq!(&i[12..16], &[0x3f, 0xff, 0, 0]);
        // TEARDOWN_HCA: profile at 0x0a, output state at byte 0x0f bit 0.
        let mut t = [0u8; 16];
        teardown_hca_in::profile.set(&mut t, TeardownProfile::PrepareFastTeardown.value().into());
        assert_eq!(&t[8..12], &[0, 0, 0, 2]);
        let mut o = [0u8; 16];
        o[15] = 1;
        assert_eq!(
            teardown_hca_out::state.get(&o),
            u64::from(TeardownState::Fail.value())
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(enable_hca_in::SIZE, 16);
        assert_eq!(enable_hca_out::SIZE, 12);
        assert_eq!(query_issi_out::SIZE, 112);
        assert_eq!(init_hca_in::SIZE, 32);
    }
}

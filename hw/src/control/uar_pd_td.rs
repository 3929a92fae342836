//! UARs, protection domains and transport domains: ALLOC_* / DEALLOC_*.
//!
//! ALLOC_UAR returns a UAR index; the UAR page is at BAR0 + index * 4096 (both drivers
//! set `log_uar_page_sz = 0`, see [`crate::datapath::uar`]). It holds the CQ arm
//! doorbell (0x20), the EQ doorbells (0x40, 0x48) and the BlueFlame registers (0x800). ALLOC_PD returns the 24-bit PD
//! that memory keys and QPs name. A transport domain is needed only for Ethernet
//! TIR/TIS objects, not for RC/UD verbs QPs.

use crate::field::Layout;
use crate::prm_layout;

prm_layout! {
    /// ALLOC_UAR input.
    pub mod alloc_uar_in = "alloc_uar_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
    }
}

prm_layout! {
    /// ALLOC_UAR output.
    pub mod alloc_uar_out = "alloc_uar_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// The new UAR's index.
        uar: 0x48, 0x18;
    }
}

prm_layout! {
    /// DEALLOC_UAR input.
    pub mod dealloc_uar_in = "dealloc_uar_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// UAR index.
        uar: 0x48, 0x18;
    }
}

prm_layout! {
    /// DEALLOC_UAR output.
    pub mod dealloc_uar_out = "dealloc_uar_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}

prm_layout! {
    /// ALLOC_PD input.
    pub mod alloc_pd_in = "alloc_pd_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
    }
}

prm_layout! {
    /// ALLOC_PD output.
    pub mod alloc_pd_out = "alloc_pd_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// The new protection domain.
        pd: 0x48, 0x18;
    }
}

prm_layout! {
    /// DEALLOC_PD input.
    pub mod dealloc_pd_in = "dealloc_pd_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// Protection domain.
        pd: 0x48, 0x18;
    }
}

prm_layout! {
    /// DEALLOC_PD output.
    pub mod dealloc_pd_out = "dealloc_pd_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}

prm_layout! {
    /// ALLOC_TRANSPORT_DOMAIN input.
    pub mod alloc_transport_domain_in = "alloc_transport_domain_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
    }
}

prm_layout! {
    /// ALLOC_TRANSPORT_DOMAIN output.
    pub mod alloc_transport_domain_out = "alloc_transport_domain_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
        /// The new transport domain.
        transport_domain: 0x48, 0x18;
    }
}

prm_layout! {
    /// DEALLOC_TRANSPORT_DOMAIN input.
    pub mod dealloc_transport_domain_in = "dealloc_transport_domain_in" (0x80) {
        /// Command opcode.
        opcode: 0, 0x10;
        /// DEVX user context id.
        uid: 0x10, 0x10;
        /// Command-specific modifier.
        op_mod: 0x30, 0x10;
        /// Transport domain.
        transport_domain: 0x48, 0x18;
    }
}

prm_layout! {
    /// DEALLOC_TRANSPORT_DOMAIN output.
    pub mod dealloc_transport_domain_out = "dealloc_transport_domain_out" (0x80) {
        /// Command status (`MLX5_CMD_STAT_*`).
        status: 0, 8;
        /// Firmware syndrome, meaningful when `status` is not OK.
        syndrome: 0x20, 0x20;
    }
}
/// The layouts of this module.
pub const LAYOUTS: &[&Layout] = &[
    &alloc_uar_in::LAYOUT,
    &alloc_uar_out::LAYOUT,
    &dealloc_uar_in::LAYOUT,
    &dealloc_uar_out::LAYOUT,
    &alloc_pd_in::LAYOUT,
    &alloc_pd_out::LAYOUT,
    &dealloc_pd_in::LAYOUT,
    &dealloc_pd_out::LAYOUT,
    &alloc_transport_domain_in::LAYOUT,
    &alloc_transport_domain_out::LAYOUT,
    &dealloc_transport_domain_in::LAYOUT,
    &dealloc_transport_domain_out::LAYOUT,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_numbers_are_24_bits_at_byte_9() {
        let mut out = [0xffu8; 16];
        alloc_uar_out::uar.set(&mut out, 0x12_3456);
        assert_eq!(&out[8..12], &[0xff, 0x12, 0x34, 0x56]);
        let mut out = [0u8; 16];
        alloc_pd_out::pd.set(&mut out, 0xab_cdef);
        assert_eq!(&out[8..12], &[0, 0xab, 0xcd, 0xef]);
        let mut input = [0u8; 16];
        dealloc_transport_domain_in::transport_domain.set(&mut input, 5);
        assert_eq!(&input[8..12], &[0, 0, 0, 5]);
        assert_eq!(dealloc_pd_in::pd, alloc_pd_out::pd);
        assert_eq!(dealloc_uar_in::uar, alloc_uar_out::uar);
    }
}

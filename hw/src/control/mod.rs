//! The control path of the register model: the BAR0 initialization segment, the
//! command queue and its mailboxes, and the commands and contexts a verbs driver and
//! the simulated firmware exchange through it.
//!
//! One module per PRM concept:
//!
//! * [`iseg`]: the initialization segment at BAR0 offset 0 and its health buffer;
//! * [`cmdq`]: command queue entries (`mlx5_cmd_layout`) and mailbox blocks
//!   (`mlx5_cmd_prot_block`), delivery status, the gather of a chained message;
//! * [`cmd`]: the generic command headers, opcodes and command status codes, and the
//!   input and output layout of every opcode ([`cmd::Opcode::in_layout`]);
//! * [`hca`]: ENABLE_HCA, DISABLE_HCA, QUERY_ISSI, SET_ISSI, INIT_HCA, TEARDOWN_HCA;
//! * [`caps`]: QUERY_HCA_CAP, SET_HCA_CAP and the general and RoCE capability pages;
//! * [`pages`]: QUERY_PAGES and MANAGE_PAGES;
//! * [`reg`]: ACCESS_REG and the host endianness and PAOS registers;
//! * [`uar_pd_td`]: ALLOC/DEALLOC of UARs, protection domains and transport domains;
//! * [`mkey`]: memory keys and the mkey context;
//! * [`eq`]: event queues and the EQ context;
//! * [`cq`]: completion queues and the CQ context;
//! * [`qp`]: queue pairs, their state transitions, the QP context and address path;
//! * [`vport`]: vport state and the NIC vport context (RoCE enable, MAC, MTU);
//! * [`roce`]: the RoCE GID table;
//! * [`counters`]: queue counter sets and vport traffic counters;
//! * [`srq`]: shared receive queues, the SRQ context and ARM_RQ.
//!
//! Layouts follow Linux 6.1's `include/linux/mlx5/mlx5_ifc.h` exactly (struct and field
//! names, bit offsets, widths and full sizes); where the reference describes a newer
//! header, the 6.1 header wins and the module documentation says what differs.
//!
//! Every layout, C structure and constant is registered in [`LAYOUTS`], [`C_STRUCTS`]
//! and [`CONSTANTS`] for the conformance test (see [`crate::conformance`]).

use crate::conformance::{CStruct, Constant};
use crate::field::Layout;

/// Declares a fieldless enum whose variants are named constants of a public header,
/// with its decoding helpers and the [`Constant`] registry entries of every variant.
///
/// ```ignore
/// header_enum! {
///     /// doc
///     pub enum Example: u16 in Mlx5Ifc {
///         /// doc
///         First = 0x100 => "MLX5_EXAMPLE_FIRST",
///     }
/// }
/// ```
macro_rules! header_enum {
    (
        $(#[$m:meta])*
        pub enum $name:ident : $repr:ident in $header:ident {
            $( $(#[$vm:meta])* $var:ident = $val:expr => $cname:literal, )*
        }
    ) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr($repr)]
        pub enum $name {
            $( $(#[$vm])* $var = $val, )*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$var),*];

            /// The registry entries of every value, for the conformance test.
            pub const CONSTANTS: &'static [$crate::conformance::Constant] = &[$(
                $crate::conformance::Constant {
                    header: $crate::conformance::Header::$header,
                    name: $cname,
                    value: $val as u64,
                },
            )*];

            /// The value as it travels in the PRM field.
            pub const fn value(self) -> $repr {
                self as $repr
            }

            /// The value's name exactly as the header spells it.
            pub const fn c_name(self) -> &'static str {
                match self {
                    $($name::$var => $cname,)*
                }
            }

            /// Decodes a raw value; `None` for a value the header does not define.
            pub const fn from_value(v: $repr) -> Option<Self> {
                match v {
                    $(x if x == $val => Some($name::$var),)*
                    _ => None,
                }
            }
        }

        impl ::core::convert::TryFrom<$repr> for $name {
            type Error = $repr;
            /// Decodes a raw value, giving it back when the header does not define it.
            fn try_from(v: $repr) -> Result<Self, $repr> {
                $name::from_value(v).ok_or(v)
            }
        }

        impl ::core::fmt::Display for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(self.c_name())
            }
        }
    };
}

/// A [`CMember`](crate::conformance::CMember) whose Rust field name differs from the C
/// member name (because the C name is a Rust keyword such as `type` or `in`).
macro_rules! c_member_as {
    ($ty:ty, $field:ident, $cname:literal) => {
        $crate::conformance::CMember {
            name: $cname,
            ..$crate::c_member!($ty, $field)
        }
    };
}

pub mod caps;
pub mod cmd;
pub mod cmdq;
pub mod counters;
pub mod cq;
pub mod eq;
pub mod hca;
pub mod iseg;
pub mod mkey;
pub mod pages;
pub mod qp;
pub mod reg;
pub mod roce;
pub mod srq;
pub mod uar_pd_td;
pub mod vport;

/// Concatenates registry slices at compile time (`N` must be their total length).
const fn concat<T: Copy, const N: usize>(parts: &[&[T]], filler: T) -> [T; N] {
    let mut out = [filler; N];
    let mut n = 0;
    let mut p = 0;
    while p < parts.len() {
        let mut i = 0;
        while i < parts[p].len() {
            out[n] = parts[p][i];
            n += 1;
            i += 1;
        }
        p += 1;
    }
    assert!(n == N, "registry length mismatch");
    out
}

/// Total length of registry slices.
const fn total<T>(parts: &[&[T]]) -> usize {
    let mut n = 0;
    let mut p = 0;
    while p < parts.len() {
        n += parts[p].len();
        p += 1;
    }
    n
}

const LAYOUT_PARTS: &[&[&Layout]] = &[
    iseg::LAYOUTS,
    cmd::LAYOUTS,
    hca::LAYOUTS,
    caps::LAYOUTS,
    pages::LAYOUTS,
    reg::LAYOUTS,
    uar_pd_td::LAYOUTS,
    mkey::LAYOUTS,
    eq::LAYOUTS,
    cq::LAYOUTS,
    qp::LAYOUTS,
    vport::LAYOUTS,
    roce::LAYOUTS,
    counters::LAYOUTS,
    srq::LAYOUTS,
];
const LAYOUT_COUNT: usize = total(LAYOUT_PARTS);
const LAYOUT_ARRAY: [&Layout; LAYOUT_COUNT] = concat(LAYOUT_PARTS, &cmd::mbox_in::LAYOUT);

const C_STRUCT_PARTS: &[&[CStruct]] = &[iseg::C_STRUCTS, cmdq::C_STRUCTS];
const C_STRUCT_COUNT: usize = total(C_STRUCT_PARTS);
const C_STRUCT_ARRAY: [CStruct; C_STRUCT_COUNT] = concat(C_STRUCT_PARTS, cmdq::C_STRUCTS[0]);

const CONSTANT_PARTS: &[&[Constant]] = &[
    iseg::CONSTANTS,
    iseg::NIC_INTERFACE_CONSTANTS,
    iseg::NicInterfaceSupported::CONSTANTS,
    iseg::HealthSyndrome::CONSTANTS,
    cmdq::CONSTANTS,
    cmd::Opcode::CONSTANTS,
    cmd::CmdStatus::CONSTANTS,
    hca::TeardownProfile::CONSTANTS,
    hca::TeardownState::CONSTANTS,
    caps::CapType::CONSTANTS,
    caps::CapMode::CONSTANTS,
    caps::SET_HCA_CAP_OP_MOD_CONSTANTS,
    caps::PortType::CONSTANTS,
    caps::CmdifChecksum::CONSTANTS,
    pages::QueryPagesOpMod::CONSTANTS,
    pages::ManagePagesOpMod::CONSTANTS,
    reg::AccessRegisterOpMod::CONSTANTS,
    mkey::MkcAccessMode::CONSTANTS,
    eq::EqcStatus::CONSTANTS,
    eq::EqcSt::CONSTANTS,
    cq::CqcStatus::CONSTANTS,
    cq::CqcCqeSz::CONSTANTS,
    cq::CqcSt::CONSTANTS,
    cq::MODIFY_CQ_CONSTANTS,
    qp::QpcState::CONSTANTS,
    qp::QpState::CONSTANTS,
    qp::QpcSt::CONSTANTS,
    qp::QpcPmState::CONSTANTS,
    qp::QpcMtu::CONSTANTS,
    qp::QpcAtomicMode::CONSTANTS,
    qp::QpcEndPaddingMode::CONSTANTS,
    qp::RqType::CONSTANTS,
    qp::OPTPAR_CONSTANTS,
    vport::VportState::CONSTANTS,
    vport::VportStateOpMod::CONSTANTS,
    vport::VportAdminState::CONSTANTS,
    vport::NvprtListType::CONSTANTS,
    roce::RoceVersion::CONSTANTS,
    roce::RoceL3Type::CONSTANTS,
    roce::CAP_CONSTANTS,
    srq::SrqcState::CONSTANTS,
    srq::ArmRqOpMod::CONSTANTS,
];
const CONSTANT_COUNT: usize = total(CONSTANT_PARTS);
const CONSTANT_ARRAY: [Constant; CONSTANT_COUNT] = concat(CONSTANT_PARTS, cmdq::CONSTANTS[0]);

/// Every PRM layout of this part, for the conformance test.
pub const LAYOUTS: &[&Layout] = &LAYOUT_ARRAY;
/// Every C structure of this part, for the conformance test.
pub const C_STRUCTS: &[CStruct] = &C_STRUCT_ARRAY;
/// Every named constant of this part, for the conformance test.
pub const CONSTANTS: &[Constant] = &CONSTANT_ARRAY;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn registries_have_no_duplicates() {
        let mut seen = HashSet::new();
        for l in LAYOUTS {
            assert!(seen.insert(l.name), "layout {} registered twice", l.name);
            let mut fields = HashSet::new();
            for f in l.fields {
                assert!(fields.insert(f.name), "{}.{} defined twice", l.name, f.name);
            }
        }
        let mut seen = HashSet::new();
        for s in C_STRUCTS {
            assert!(seen.insert(s.name), "struct {} registered twice", s.name);
        }
        let mut seen = HashSet::new();
        for c in CONSTANTS {
            assert!(seen.insert(c.name), "constant {} registered twice", c.name);
        }
    }

    /// Prints the registries in the fixture line format, for checking against the
    /// headers by hand: `cargo test -p ferroverbs-hw dump_registry -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn dump_registry() {
        for l in LAYOUTS {
            println!("layout {} {}", l.name, l.size_bits);
            for f in l.fields {
                println!("field {} {} {} {}", l.name, f.name, f.bit, f.width);
            }
        }
        for s in C_STRUCTS {
            println!("struct {:?} {} {}", s.header, s.name, s.size);
            for m in s.members {
                println!("member {} {} {} {}", s.name, m.name, m.offset, m.size);
            }
        }
        for c in CONSTANTS {
            println!("const {:?} {} {}", c.header, c.name, c.value);
        }
    }

    #[test]
    fn every_field_lies_inside_its_layout() {
        for l in LAYOUTS {
            for f in l.fields {
                assert!(
                    f.bit + f.width <= l.size_bits,
                    "{}.{:?} runs past {} bits",
                    l.name,
                    f,
                    l.size_bits
                );
            }
            // Every layout is a whole number of dwords, as in mlx5_ifc.h.
            assert_eq!(l.size_bits % 32, 0, "{} is not dword-sized", l.name);
        }
    }

    #[test]
    fn fields_of_a_layout_do_not_overlap() {
        // Nested contexts are one field; flex arrays have width 0. No two fields of one
        // layout may share a bit (unions are not modelled as overlapping fields).
        for l in LAYOUTS {
            let mut fields: Vec<_> = l.fields.iter().filter(|f| f.width > 0).collect();
            fields.sort_by_key(|f| f.bit);
            for w in fields.windows(2) {
                assert!(
                    w[0].bit + w[0].width <= w[1].bit,
                    "{}: {:?} overlaps {:?}",
                    l.name,
                    w[0],
                    w[1]
                );
            }
        }
    }
}

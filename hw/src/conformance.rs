//! The registry of everything in this crate that mirrors a public header.
//!
//! The conformance test (`hw/tests/conformance.rs`) walks these lists and compares
//! each entry with the fixtures that `tools/conformance/gen.py` extracts from the
//! headers Debian ships:
//!
//! * [`layouts`]: PRM layouts, field by field (bit offset and width), against
//!   `include/linux/mlx5/mlx5_ifc.h` (package `linux-headers-*-common`);
//! * [`c_structs`]: byte-level C structures (WQE segments, CQE64, EQE, command queue
//!   entry, mailbox block), member by member (offset and size), against
//!   `infiniband/mlx5dv.h` (package `libibverbs-dev`) and `include/linux/mlx5/device.h`;
//! * [`constants`]: named constants (opcodes, flags, syndromes, event types, status
//!   codes) by value;
//! * [`DEVIATIONS`]: the few places where the project deliberately follows another
//!   source than the header, each with the reason.
//!
//! An entry without a fixture counterpart fails the test: nothing passes silently.

use crate::field::Layout;

/// The header a C structure or constant is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Header {
    /// rdma-core 44 `infiniband/mlx5dv.h` (Debian 12 `libibverbs-dev`).
    Mlx5Dv,
    /// Linux `include/linux/mlx5/mlx5_ifc.h`.
    Mlx5Ifc,
    /// Linux `include/linux/mlx5/device.h`.
    Device,
    /// Linux `include/linux/mlx5/qp.h`.
    Qp,
    /// Linux `include/linux/mlx5/cq.h`.
    Cq,
    /// Linux `include/linux/mlx5/doorbell.h`.
    Doorbell,
}

/// A named constant and the value this crate gives it.
#[derive(Clone, Copy, Debug)]
pub struct Constant {
    /// Where the name is defined.
    pub header: Header,
    /// The name exactly as the header spells it (`MLX5_OPCODE_SEND`).
    pub name: &'static str,
    /// The value this crate uses.
    pub value: u64,
}

/// One member of a C structure: offset and size in bytes.
#[derive(Clone, Copy, Debug)]
pub struct CMember {
    /// Member name as in the header.
    pub name: &'static str,
    /// Byte offset (`offsetof`).
    pub offset: usize,
    /// Size in bytes (`sizeof`).
    pub size: usize,
}

/// A C structure mirrored by a Rust `#[repr(C)]` type.
#[derive(Clone, Copy, Debug)]
pub struct CStruct {
    /// Where the structure is defined.
    pub header: Header,
    /// The C name without `struct` (`mlx5_wqe_ctrl_seg`).
    pub name: &'static str,
    /// `sizeof` of the Rust type.
    pub size: usize,
    /// Every member the Rust type defines.
    pub members: &'static [CMember],
}

/// A place where the project follows another source than the fixture's header.
#[derive(Clone, Copy, Debug)]
pub struct Deviation {
    /// Header of the fixture entry.
    pub header: Header,
    /// `struct.field` or constant name.
    pub item: &'static str,
    /// The source the project follows, and why.
    pub follows: &'static str,
}

/// Every deliberate deviation from the headers.
pub const DEVIATIONS: &[Deviation] = &[
    Deviation {
        header: Header::Mlx5Ifc,
        item: "mbox_in",
        follows: "newer Linux mlx5_ifc.h (mlx5_ifc_mbox_in_bits, reference mlx5-controlpath.md \
                  §2.4): the generic command input header is absent from the 6.1 header; its \
                  fields (opcode, uid, op_mod) coincide with those of every 6.1 *_in layout, \
                  which control::cmd's tests check",
    },
    Deviation {
        header: Header::Mlx5Ifc,
        item: "mbox_out",
        follows: "newer Linux mlx5_ifc.h (mlx5_ifc_mbox_out_bits, reference mlx5-controlpath.md \
                  §2.4): the generic command output header is absent from the 6.1 header; its \
                  fields (status, syndrome) coincide with those of every 6.1 *_out layout, \
                  which control::cmd's tests check",
    },
    Deviation {
        header: Header::Mlx5Ifc,
        item: "ferroverbs_q_counter_ext",
        follows: "the simulator (control::counters): counters the PRM does not define (RNR \
                  NAKs received, retransmissions, retransmitted packets), reported in the \
                  reserved tail of query_q_counter_out (reserved_at_6e0), which real \
                  firmware returns as zero",
    },
    Deviation {
        header: Header::Mlx5Ifc,
        item: "ferroverbs_vport_counter_ext",
        follows: "the simulator (control::counters): device counters the PRM does not define \
                  (doorbells, WQE fetches, DMA bytes, drops by reason), reported in the \
                  reserved tail of query_vport_counter_out (reserved_at_680), which real \
                  firmware returns as zero",
    },
];

/// Every PRM layout the crate defines.
pub fn layouts() -> impl Iterator<Item = &'static Layout> {
    crate::control::LAYOUTS
        .iter()
        .chain(crate::datapath::LAYOUTS.iter())
        .copied()
}

/// Every C structure the crate mirrors.
pub fn c_structs() -> impl Iterator<Item = &'static CStruct> {
    crate::control::C_STRUCTS
        .iter()
        .chain(crate::datapath::C_STRUCTS.iter())
}

/// Every named constant the crate mirrors.
pub fn constants() -> impl Iterator<Item = &'static Constant> {
    crate::control::CONSTANTS
        .iter()
        .chain(crate::datapath::CONSTANTS.iter())
}

/// Declares named constants that mirror a header, each as a Rust `const` and as a
/// registry [`Constant`] naming the header it is checked against:
///
/// ```ignore
/// c_constants! {
///     /// The constants of this module, for the conformance registry.
///     pub(crate) const CONSTANTS;
///     /// Doc of the constant.
///     Mlx5Dv MLX5_OPCODE_SEND: u8 = 0x0a;
/// }
/// ```
macro_rules! c_constants {
    (
        $(#[$lm:meta])*
        $vis:vis const $list:ident;
        $( $(#[$m:meta])* $header:ident $name:ident : $ty:ty = $value:expr; )*
    ) => {
        $(
            $(#[$m])*
            #[allow(non_upper_case_globals)]
            pub const $name: $ty = $value;
        )*
        $(#[$lm])*
        $vis const $list: &[$crate::conformance::Constant] = &[
            $( $crate::conformance::Constant {
                header: $crate::conformance::Header::$header,
                name: stringify!($name),
                value: $name as u64,
            } ),*
        ];
    };
}

/// The `CMember` of field `$field` of `#[repr(C)]` type `$ty`, measured by the compiler.
#[macro_export]
macro_rules! c_member {
    ($ty:ty, $field:ident) => {
        $crate::conformance::CMember {
            name: stringify!($field),
            offset: ::core::mem::offset_of!($ty, $field),
            size: {
                const fn size_of_return<T, F>(_: fn(&T) -> &F) -> usize {
                    ::core::mem::size_of::<F>()
                }
                size_of_return::<$ty, _>(|s: &$ty| &s.$field)
            },
        }
    };
}

#[cfg(test)]
mod tests {
    #[repr(C)]
    struct Demo {
        a: u16,
        b: [u8; 6],
        c: u64,
    }
    const MEMBERS: &[super::CMember] =
        &[c_member!(Demo, a), c_member!(Demo, b), c_member!(Demo, c)];

    #[test]
    fn c_member_measures_offset_and_size() {
        let d = Demo {
            a: 0,
            b: [0; 6],
            c: 0,
        };
        let _ = (d.a, d.b, d.c);
        let got: Vec<_> = MEMBERS.iter().map(|m| (m.name, m.offset, m.size)).collect();
        assert_eq!(got, [("a", 0, 2), ("b", 2, 6), ("c", 8, 8)]);
    }
}

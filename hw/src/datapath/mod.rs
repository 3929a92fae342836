//! The data-path half of the register model: what the driver and the device exchange
//! through host memory and UAR doorbells once the queues exist.
//!
//! | module | PRM concept | C names |
//! |---|---|---|
//! | [`wqe`] | send and receive WQE segments, send opcodes, `fm_ce_se` flags | `mlx5_wqe_*_seg`, `mlx5_wqe_av`, `MLX5_OPCODE_*` |
//! | [`cqe`] | 64-byte CQEs, error CQEs, CQE opcodes and syndromes, the ownership rule | `mlx5_cqe64`, `mlx5_err_cqe`, `MLX5_CQE_*` |
//! | [`eqe`] | event queue entries and their payloads, event types | `mlx5_eqe`, `mlx5_eqe_*`, `MLX5_EVENT_TYPE_*` |
//! | [`dbr`] | doorbell records in host memory (QP, SRQ, CQ) and the CQ arm word | `MLX5_RCV_DBR`, `MLX5_SND_DBR`, `MLX5_CQ_DB_REQ_NOT*` |
//! | [`uar`] | UAR page offsets: CQ arm doorbell, EQ doorbells, BlueFlame registers | `MLX5_CQ_DOORBELL`, `MLX5_BF_OFFSET` |
//!
//! Every structure is a `#[repr(C)]` [`zerocopy`] type made only of bytes and
//! big-endian integers, so it has alignment 1, no padding, and the exact size and member
//! offsets of its C counterpart; its members carry the C names so that the conformance
//! test can compare them one by one (see [`crate::conformance`]). Bytes that come from
//! the other side of the bus are viewed through checked constructors (`ref_from`,
//! `read_from`) that return [`TooShort`](crate::TooShort) instead of panicking.
//!
//! Sources: rdma-core 44 `infiniband/mlx5dv.h` as installed by Debian 12
//! (`libibverbs-dev` 44.0-2) and Linux 6.1 `include/linux/mlx5/{qp.h,device.h,cq.h,doorbell.h}`;
//! the semantics are those of `shared/reference/mlx5-datapath.md` and
//! `mlx5-controlpath.md` §5 and §8.

use crate::conformance::{CStruct, Constant, Header};
use crate::field::Layout;

/// Implements the checked constructors of a byte-level structure whose bytes may come
/// from the other side of the bus.
macro_rules! checked_view {
    ($ty:ty, $cname:literal) => {
        impl $ty {
            /// The structure's C name (a descriptive name where no C structure exists).
            pub const C_NAME: &'static str = $cname;
            /// Size in bytes (`sizeof(struct ...)`).
            pub const SIZE: usize = ::core::mem::size_of::<$ty>();

            /// Views the first [`Self::SIZE`] bytes of `buf` as this structure.
            ///
            /// Fails, without panicking, when `buf` is shorter than the structure.
            pub fn ref_from(buf: &[u8]) -> Result<&Self, $crate::field::TooShort> {
                <$ty as ::zerocopy::FromBytes>::ref_from_prefix(buf)
                    .map(|(s, _)| s)
                    .map_err(|_| Self::too_short(buf.len()))
            }

            /// Views the first [`Self::SIZE`] bytes of `buf` as this structure, mutably.
            pub fn mut_from(buf: &mut [u8]) -> Result<&mut Self, $crate::field::TooShort> {
                let len = buf.len();
                <$ty as ::zerocopy::FromBytes>::mut_from_prefix(buf)
                    .map(|(s, _)| s)
                    .map_err(|_| Self::too_short(len))
            }

            /// Copies the first [`Self::SIZE`] bytes of `buf` into a value.
            pub fn read_from(buf: &[u8]) -> Result<Self, $crate::field::TooShort> {
                <$ty as ::zerocopy::FromBytes>::read_from_prefix(buf)
                    .map(|(s, _)| s)
                    .map_err(|_| Self::too_short(buf.len()))
            }

            /// An all-zero value.
            pub fn zeroed() -> Self {
                <$ty as ::zerocopy::FromZeros>::new_zeroed()
            }

            /// The structure's bytes as they sit in memory (big-endian fields).
            pub fn as_bytes(&self) -> &[u8] {
                <$ty as ::zerocopy::IntoBytes>::as_bytes(self)
            }

            fn too_short(len: usize) -> $crate::field::TooShort {
                $crate::field::TooShort {
                    layout: $cname,
                    len,
                    need: Self::SIZE,
                }
            }
        }
    };
}

pub mod cqe;
pub mod dbr;
pub mod eqe;
pub mod uar;
pub mod umr;
pub mod wqe;

/// Every PRM layout of this part, for the conformance test. The data path is described
/// by byte-level C structures, not by `mlx5_ifc.h` bit layouts, so this list is empty.
pub const LAYOUTS: &[&Layout] = &[];

const C_STRUCT_PARTS: &[&[CStruct]] = &[
    wqe::C_STRUCTS,
    cqe::C_STRUCTS,
    eqe::C_STRUCTS,
    umr::C_STRUCTS,
];

/// Every C structure of this part, for the conformance test.
pub const C_STRUCTS: &[CStruct] = &concat::<CStruct, { total(C_STRUCT_PARTS) }>(
    C_STRUCT_PARTS,
    CStruct {
        header: Header::Mlx5Dv,
        name: "",
        size: 0,
        members: &[],
    },
);

const CONSTANT_PARTS: &[&[Constant]] = &[
    wqe::CONSTANTS,
    cqe::CONSTANTS,
    eqe::CONSTANTS,
    dbr::CONSTANTS,
    uar::CONSTANTS,
    umr::CONSTANTS,
];

/// Every named constant of this part, for the conformance test.
pub const CONSTANTS: &[Constant] = &concat::<Constant, { total(CONSTANT_PARTS) }>(
    CONSTANT_PARTS,
    Constant {
        header: Header::Mlx5Dv,
        name: "",
        value: 0,
    },
);

/// The device side of an ownership protocol (CQE `op_own`, EQE `owner`): copies
/// `image` into the start of `entry`, all bytes but the last first, then a release
/// fence, then the last byte, so that whoever sees the new owner byte and issues its
/// read barrier sees the whole body. Fails, without writing, when `entry` is shorter
/// than `image`.
fn write_owner_last(
    entry: &mut [u8],
    image: &[u8],
    layout: &'static str,
) -> Result<(), crate::TooShort> {
    let len = entry.len();
    let too_short = crate::TooShort {
        layout,
        len,
        need: image.len(),
    };
    let dst = entry.get_mut(..image.len()).ok_or(too_short)?;
    let (Some((last, body)), Some((own, dst_body))) = (image.split_last(), dst.split_last_mut())
    else {
        return Ok(());
    };
    dst_body.copy_from_slice(body);
    core::sync::atomic::fence(core::sync::atomic::Ordering::Release);
    *own = *last;
    Ok(())
}

/// Total length of a list of slices (for sizing [`concat`] at compile time).
const fn total<T>(parts: &[&[T]]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < parts.len() {
        n += parts[i].len();
        i += 1;
    }
    n
}

/// Concatenates slices into an array at compile time; `filler` is overwritten.
const fn concat<T: Copy, const N: usize>(parts: &[&[T]], filler: T) -> [T; N] {
    let mut out = [filler; N];
    let mut k = 0;
    let mut i = 0;
    while i < parts.len() {
        let mut j = 0;
        while j < parts[i].len() {
            out[k] = parts[i][j];
            k += 1;
            j += 1;
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn registry_is_complete_and_unique() {
        assert_eq!(
            CONSTANTS.len(),
            CONSTANT_PARTS.iter().map(|p| p.len()).sum::<usize>()
        );
        assert!(CONSTANTS.iter().all(|c| !c.name.is_empty()));
        let names: HashSet<_> = CONSTANTS.iter().map(|c| (c.header, c.name)).collect();
        assert_eq!(
            names.len(),
            CONSTANTS.len(),
            "a constant is registered twice"
        );
        let structs: HashSet<_> = C_STRUCTS.iter().map(|s| (s.header, s.name)).collect();
        assert_eq!(structs.len(), C_STRUCTS.len());
        for s in C_STRUCTS {
            assert!(!s.name.is_empty());
            // Members lie inside the structure and do not overlap.
            let mut end = 0;
            let mut members = s.members.to_vec();
            members.sort_by_key(|m| m.offset);
            for m in members {
                assert!(m.offset >= end, "{}.{} overlaps", s.name, m.name);
                end = m.offset + m.size;
            }
            assert!(end <= s.size, "{} members run past its size", s.name);
        }
    }
}

//! User-mode memory registration (UMR) WQEs: how a memory window is bound, how a
//! key is invalidated on the send queue, and how a driver changes a memory region's
//! PD and access rights in place (Linux `mlx5r_umr_rereg_pd_access`, posted on its
//! own `MLX5_QPC_ST_REG_UMR` QP).
//!
//! A UMR WQE (`MLX5_OPCODE_UMR`) is the control segment (whose `imm` names the mkey
//! the WQE modifies), a UMR control segment ([`UmrCtrlSeg`], 48 bytes: flags, the
//! translation size, the mask of mkey fields to change), an mkey context segment
//! ([`MkeyContextSeg`], 64 bytes: the new values of those fields) and, when the key
//! gets a translation, inline KLM entries ([`UmrKlmSeg`], padded to 64 bytes). rdma-core
//! builds exactly these for `IBV_WR_BIND_MW` and `IBV_WR_LOCAL_INV`
//! (`providers/mlx5/qp.c` `set_bind_wr`, `set_umr_control_seg`, `set_umr_mkey_seg`,
//! `set_umr_data_seg`): 8 DS without a translation, 12 with one.
//!
//! Layouts: rdma-core 44 `infiniband/mlx5dv.h`; the mkey mask bits and check flags
//! that only the kernel uses: Linux 6.1 `include/linux/mlx5/device.h`.

use crate::conformance::{CStruct, Header};
use zerocopy::byteorder::big_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

c_constants! {
    /// The constants of this module, for the conformance registry.
    pub(crate) const CONSTANTS;

    /// UMR control flags: the translation entries are inline in the WQE.
    Mlx5Dv MLX5_WQE_UMR_CTRL_FLAG_INLINE: u8 = 1 << 7;
    /// UMR control flags: the mkey must be free (a type 2 window is bound only when
    /// free).
    Mlx5Dv MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE: u8 = 1 << 5;
    /// UMR control flags: `translation_offset` is valid.
    Mlx5Dv MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET: u8 = 1 << 4;
    /// UMR control flags: the mkey's QPN must be this QP's (invalidation of a type 2
    /// window).
    Mlx5Dv MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN: u8 = 1 << 3;
    /// Mkey mask: `len`.
    Mlx5Dv MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN: u64 = 1 << 0;
    /// Mkey mask: `start_addr`.
    Mlx5Dv MLX5_WQE_UMR_CTRL_MKEY_MASK_START_ADDR: u64 = 1 << 6;
    /// Mkey mask: the key's variant byte (`qpn_mkey` bits 7..0).
    Mlx5Dv MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY: u64 = 1 << 13;
    /// Mkey mask: the QPN the key is bound to (`qpn_mkey` bits 31..8).
    Mlx5Dv MLX5_WQE_UMR_CTRL_MKEY_MASK_QPN: u64 = 1 << 14;
    /// Mkey mask: local write access.
    Mlx5Dv MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE: u64 = 1 << 18;
    /// Mkey mask: remote read access.
    Mlx5Dv MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ: u64 = 1 << 19;
    /// Mkey mask: remote write access.
    Mlx5Dv MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE: u64 = 1 << 20;
    /// Mkey mask: remote atomic access.
    Mlx5Dv MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC: u64 = 1 << 21;
    /// Mkey mask: the `free` state.
    Mlx5Dv MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE: u64 = 1 << 29;
    /// Mkey context `free`: the key becomes free (invalid).
    Mlx5Dv MLX5_WQE_MKEY_CONTEXT_FREE: u8 = 1 << 6;
    /// Mkey context access: remote atomic.
    Mlx5Dv MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC: u8 = 1 << 6;
    /// Mkey context access: remote write.
    Mlx5Dv MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE: u8 = 1 << 5;
    /// Mkey context access: remote read.
    Mlx5Dv MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ: u8 = 1 << 4;
    /// Mkey context access: local write.
    Mlx5Dv MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE: u8 = 1 << 3;
    /// Mkey context access: local read.
    Mlx5Dv MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ: u8 = 1 << 2;
    /// Mkey mask: the PD (`flags_pd` bits 23..0).
    Device MLX5_MKEY_MASK_PD: u64 = 1 << 7;
    /// Mkey mask: local read access.
    Device MLX5_MKEY_MASK_LR: u64 = 1 << 17;
    /// UMR control flags, the two-bit free-state check (bits 6..5) = 1: the mkey
    /// must be free (rdma-core calls the same value
    /// [`MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE`]).
    Device MLX5_UMR_CHECK_NOT_FREE: u8 = 1 << 5;
    /// UMR control flags, free-state check = 2: the mkey must be in use (not free),
    /// what `mlx5r_umr_rereg_pd_access` asks of a live region.
    Device MLX5_UMR_CHECK_FREE: u8 = 2 << 5;
}

/// The free-state check bits (6..5) of the UMR control flags.
pub const UMR_CHECK_STATE_MASK: u8 = 3 << 5;

/// UMR control segment (`struct mlx5_wqe_umr_ctrl_seg`, 48 bytes).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct UmrCtrlSeg {
    /// `MLX5_WQE_UMR_CTRL_FLAG_*`.
    pub flags: u8,
    /// Reserved.
    pub rsvd0: [u8; 3],
    /// Octowords of translation entries (two KLMs per octoword, aligned to 8 entries).
    pub klm_octowords: U16,
    /// Translation offset (or BSF octowords with signature).
    pub translation_offset: U16,
    /// `MLX5_WQE_UMR_CTRL_MKEY_MASK_*`: the mkey fields the WQE changes.
    pub mkey_mask: U64,
    /// Reserved.
    pub rsvd1: [u8; 32],
}
checked_view!(UmrCtrlSeg, "mlx5_wqe_umr_ctrl_seg");

/// Mkey context segment (`struct mlx5_wqe_mkey_context_seg`, 64 bytes).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct MkeyContextSeg {
    /// [`MLX5_WQE_MKEY_CONTEXT_FREE`] or 0.
    pub free: u8,
    /// Reserved.
    pub reserved1: u8,
    /// `MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_*`.
    pub access_flags: u8,
    /// Reserved (signature flags).
    pub sf: u8,
    /// The QPN (bits 31..8, 0xffffff for none) and the key's variant byte (7..0).
    pub qpn_mkey: U32,
    /// Reserved.
    pub reserved2: U32,
    /// Flags and PD.
    pub flags_pd: U32,
    /// Start address of the key.
    pub start_addr: U64,
    /// Length in bytes.
    pub len: U64,
    /// BSF size.
    pub bsf_octword_size: U32,
    /// Reserved.
    pub reserved3: [U32; 4],
    /// Translation size.
    pub translations_octword_size: U32,
    /// Reserved.
    pub reserved4: [u8; 3],
    /// Page size of the translation.
    pub log_page_size: u8,
    /// Reserved.
    pub reserved: U32,
}
checked_view!(MkeyContextSeg, "mlx5_wqe_mkey_context_seg");

/// KLM entry (`struct mlx5_wqe_umr_klm_seg`, 16 bytes): `byte_count` bytes at
/// `address` of the key `mkey`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct UmrKlmSeg {
    /// Length (up to 2 GiB).
    pub byte_count: U32,
    /// The key the entry translates through (the memory region's lkey).
    pub mkey: U32,
    /// Address in that key's space.
    pub address: U64,
}
checked_view!(UmrKlmSeg, "mlx5_wqe_umr_klm_seg");

/// The C structures of this module, for the conformance registry.
pub(crate) const C_STRUCTS: &[CStruct] = &[
    CStruct {
        header: Header::Mlx5Dv,
        name: "mlx5_wqe_umr_ctrl_seg",
        size: UmrCtrlSeg::SIZE,
        members: &[
            c_member!(UmrCtrlSeg, flags),
            c_member!(UmrCtrlSeg, rsvd0),
            c_member!(UmrCtrlSeg, klm_octowords),
            c_member!(UmrCtrlSeg, translation_offset),
            c_member!(UmrCtrlSeg, mkey_mask),
            c_member!(UmrCtrlSeg, rsvd1),
        ],
    },
    CStruct {
        header: Header::Mlx5Dv,
        name: "mlx5_wqe_mkey_context_seg",
        size: MkeyContextSeg::SIZE,
        members: &[
            c_member!(MkeyContextSeg, free),
            c_member!(MkeyContextSeg, reserved1),
            c_member!(MkeyContextSeg, access_flags),
            c_member!(MkeyContextSeg, sf),
            c_member!(MkeyContextSeg, qpn_mkey),
            c_member!(MkeyContextSeg, reserved2),
            c_member!(MkeyContextSeg, flags_pd),
            c_member!(MkeyContextSeg, start_addr),
            c_member!(MkeyContextSeg, len),
            c_member!(MkeyContextSeg, bsf_octword_size),
            c_member!(MkeyContextSeg, reserved3),
            c_member!(MkeyContextSeg, translations_octword_size),
            c_member!(MkeyContextSeg, reserved4),
            c_member!(MkeyContextSeg, log_page_size),
            c_member!(MkeyContextSeg, reserved),
        ],
    },
    CStruct {
        header: Header::Mlx5Dv,
        name: "mlx5_wqe_umr_klm_seg",
        size: UmrKlmSeg::SIZE,
        members: &[
            c_member!(UmrKlmSeg, byte_count),
            c_member!(UmrKlmSeg, mkey),
            c_member!(UmrKlmSeg, address),
        ],
    },
];

/// `qpn_mkey` QPN of a key bound to no QP.
pub const UMR_QPN_NONE: u32 = 0xff_ffff;

/// Bytes after the control segment of a UMR WQE without a translation (UMR control
/// and mkey context segments): DS 8 with the control segment.
pub const UMR_NO_KLM_BYTES: usize = UmrCtrlSeg::SIZE + MkeyContextSeg::SIZE;
/// Bytes after the control segment of a UMR WQE with one inline KLM (padded to 64
/// bytes, as rdma-core writes it): DS 12 with the control segment.
pub const UMR_KLM_BYTES: usize = UMR_NO_KLM_BYTES + 64;

/// What a memory-window UMR WQE says (the part after the control segment, with the
/// control segment's `imm`): the form rdma-core's `set_bind_wr` writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MwUmr {
    /// The key the WQE modifies (control segment `imm`): the window's current rkey.
    pub key: u32,
    /// `MLX5_WQE_UMR_CTRL_FLAG_*`.
    pub flags: u8,
    /// `MLX5_WQE_UMR_CTRL_MKEY_MASK_*`.
    pub mkey_mask: u64,
    /// The key becomes free (an invalidation, or a bind of length 0).
    pub free: bool,
    /// `MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_*`.
    pub access: u8,
    /// The QPN the key is bound to, [`UMR_QPN_NONE`] for none.
    pub qpn: u32,
    /// The key's new variant byte.
    pub variant: u8,
    /// The PD (`flags_pd` bits 23..0: the new PD under [`MLX5_MKEY_MASK_PD`]).
    pub pd: u32,
    /// Start address.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
    /// The one KLM entry (the memory region's lkey and the address in it), for a bind
    /// of a nonzero length.
    pub klm: Option<(u32, u64)>,
}

impl MwUmr {
    /// Bytes after the control segment.
    pub fn bytes(&self) -> usize {
        if self.klm.is_some() {
            UMR_KLM_BYTES
        } else {
            UMR_NO_KLM_BYTES
        }
    }

    /// Writes the segments after the control segment into `out` (at least
    /// [`MwUmr::bytes`] long; nothing is written when it is shorter).
    pub fn emit(&self, out: &mut [u8]) {
        if out.len() < self.bytes() {
            return;
        }
        let ctrl = UmrCtrlSeg {
            flags: self.flags,
            rsvd0: [0; 3],
            // rdma-core `get_klm_octo`: entries aligned to 8, two per octoword.
            klm_octowords: U16::new(if self.klm.is_some() { 4 } else { 0 }),
            translation_offset: U16::ZERO,
            mkey_mask: U64::new(self.mkey_mask),
            rsvd1: [0; 32],
        };
        out[..UmrCtrlSeg::SIZE].copy_from_slice(ctrl.as_bytes());
        let mk = MkeyContextSeg {
            free: if self.free {
                MLX5_WQE_MKEY_CONTEXT_FREE
            } else {
                0
            },
            reserved1: 0,
            access_flags: self.access,
            sf: 0,
            qpn_mkey: U32::new((self.qpn << 8) | u32::from(self.variant)),
            reserved2: U32::ZERO,
            flags_pd: U32::new(self.pd & 0xff_ffff),
            start_addr: U64::new(self.start),
            len: U64::new(self.len),
            bsf_octword_size: U32::ZERO,
            reserved3: [U32::ZERO; 4],
            translations_octword_size: U32::ZERO,
            reserved4: [0; 3],
            log_page_size: 0,
            reserved: U32::ZERO,
        };
        out[UmrCtrlSeg::SIZE..UMR_NO_KLM_BYTES].copy_from_slice(mk.as_bytes());
        if let Some((mkey, addr)) = self.klm {
            let klm = UmrKlmSeg {
                byte_count: U32::new(self.len as u32),
                mkey: U32::new(mkey),
                address: U64::new(addr),
            };
            let k = &mut out[UMR_NO_KLM_BYTES..UMR_KLM_BYTES];
            k.fill(0);
            k[..UmrKlmSeg::SIZE].copy_from_slice(klm.as_bytes());
        }
    }

    /// The UMR of Linux `mlx5r_umr_rereg_pd_access` (`drivers/infiniband/hw/mlx5/umr.c`)
    /// for the region whose key is `key`: PD `pdn` and the verbs access flags
    /// `ibv_access` (`IBV_ACCESS_LOCAL_WRITE` 1, `_REMOTE_WRITE` 2, `_REMOTE_READ` 4,
    /// `_REMOTE_ATOMIC` 8 of `<infiniband/verbs.h>`; other bits are ignored). Flags
    /// `MLX5_UMR_CHECK_FREE` (the key must be in use) | inline; the mask PD | LR | LW |
    /// RR | RW, and A when the device has atomics (`atomic`: `get_umr_update_pd_mask`,
    /// `get_umr_update_access_mask`); the rights with local read always set, QPN
    /// [`UMR_QPN_NONE`] and the key's own variant byte.
    pub fn rereg_pd_access(key: u32, pdn: u32, ibv_access: u32, atomic: bool) -> MwUmr {
        let mut mask = MLX5_MKEY_MASK_LR
            | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE
            | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ
            | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE
            | MLX5_MKEY_MASK_PD;
        if atomic {
            mask |= MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC;
        }
        let mut access = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ;
        for (verbs, bit) in [
            (1, MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE),
            (4, MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ),
            (2, MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE),
            (8, MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC),
        ] {
            if ibv_access & verbs != 0 {
                access |= bit;
            }
        }
        MwUmr {
            key,
            flags: MLX5_UMR_CHECK_FREE | MLX5_WQE_UMR_CTRL_FLAG_INLINE,
            mkey_mask: mask,
            access,
            qpn: UMR_QPN_NONE,
            variant: key as u8,
            pd: pdn,
            ..MwUmr::default()
        }
    }

    /// Reads the segments after the control segment (`rest`, the WQE from byte 16 up
    /// to its DS) of a UMR WQE whose control `imm` is `key`; `None` when `rest` is too
    /// short for what the UMR control segment announces.
    pub fn parse(key: u32, rest: &[u8]) -> Option<MwUmr> {
        let ctrl = UmrCtrlSeg::read_from(rest).ok()?;
        let mk = MkeyContextSeg::read_from(rest.get(UmrCtrlSeg::SIZE..)?).ok()?;
        let qpn_mkey = mk.qpn_mkey.get();
        let klm = if ctrl.klm_octowords.get() != 0 {
            let k = UmrKlmSeg::read_from(rest.get(UMR_NO_KLM_BYTES..)?).ok()?;
            Some((k.mkey.get(), k.address.get()))
        } else {
            None
        };
        Some(MwUmr {
            key,
            flags: ctrl.flags,
            mkey_mask: ctrl.mkey_mask.get(),
            free: mk.free & MLX5_WQE_MKEY_CONTEXT_FREE != 0,
            access: mk.access_flags,
            qpn: qpn_mkey >> 8,
            variant: qpn_mkey as u8,
            pd: mk.flags_pd.get() & 0xff_ffff,
            start: mk.start_addr.get(),
            len: mk.len.get(),
            klm,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bind_round_trips_with_rdma_core_offsets() {
        let u = MwUmr {
            key: 0x1234_5601,
            flags: MLX5_WQE_UMR_CTRL_FLAG_INLINE | MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE,
            mkey_mask: MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN | MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE,
            free: false,
            access: MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE,
            qpn: 0x42,
            variant: 2,
            pd: 0x12,
            start: 0x7000_1000,
            len: 0x800,
            klm: Some((0x300, 0x7000_0800)),
        };
        let mut b = [0xeeu8; UMR_KLM_BYTES];
        u.emit(&mut b);
        assert_eq!(b[0], 0xa0);
        assert_eq!(&b[4..6], &[0, 4]);
        assert_eq!(&b[48 + 4..48 + 8], &[0, 0, 0x42, 2]);
        assert_eq!(&b[48 + 12..48 + 16], &[0, 0, 0, 0x12]);
        assert_eq!(&b[48 + 24..48 + 32], &0x800u64.to_be_bytes());
        assert_eq!(&b[112..116], &0x800u32.to_be_bytes());
        assert_eq!(&b[116..120], &0x300u32.to_be_bytes());
        assert!(b[128..].iter().all(|&x| x == 0));
        assert_eq!(MwUmr::parse(u.key, &b), Some(u));
        assert_eq!(MwUmr::parse(u.key, &b[..100]), None);
    }
    #[test]
    fn a_rereg_pd_access_umr_asks_what_linux_asks() {
        // IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, bits outside the four ignored.
        let u = MwUmr::rereg_pd_access(0xabcd_ef07, 0x33, 1 | 2 | 0x100, false);
        assert_eq!(
            u.access,
            MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ
                | MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE
                | MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE
        );
        assert_eq!(u.mkey_mask & MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC, 0);
        let a = MwUmr::rereg_pd_access(0xabcd_ef07, 0x33, 4 | 8, true);
        assert_eq!(
            a.access,
            MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ
                | MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ
                | MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC
        );
        assert_eq!(
            a.mkey_mask,
            u.mkey_mask | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC
        );
        let mut b = [0xeeu8; UMR_NO_KLM_BYTES];
        u.emit(&mut b);
        // CHECK_FREE | INLINE, the mask at 8, QPN 0xffffff with the key's variant
        // byte and the PD in the mkey context.
        assert_eq!(b[0], 0xc0);
        assert_eq!(
            &b[8..16],
            &(MLX5_MKEY_MASK_LR
                | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE
                | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ
                | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE
                | MLX5_MKEY_MASK_PD)
                .to_be_bytes()
        );
        assert_eq!(&b[48 + 4..48 + 8], &[0xff, 0xff, 0xff, 0x07]);
        assert_eq!(&b[48 + 12..48 + 16], &[0, 0, 0, 0x33]);
        assert_eq!(MwUmr::parse(u.key, &b), Some(u));
    }
}

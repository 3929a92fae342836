//! The PRM bit-field accessor layer.
//!
//! The PRM (and Linux's `include/linux/mlx5/mlx5_ifc.h`) describes every command,
//! context and register as an array of big-endian 32-bit dwords, with each field
//! given by its bit offset counted MSB-first from the start of the structure and its
//! width in bits. `MLX5_SET(typ, p, fld, v)` shifts a value into dword `off / 32` by
//! `32 - width - (off & 31)`. This module is the one place where that arithmetic
//! lives: every field of every layout is a [`Field`] constant, read and written
//! through [`Field::get`] and [`Field::set`], never shifted by hand at the use site.
//!
//! Layouts are declared with [`prm_layout!`](crate::prm_layout), which also records
//! every field in a [`Layout`] so that the conformance tests can compare each one
//! against the fixtures generated from the public headers.

use core::fmt;

/// One field of a PRM structure: bit offset (MSB-first) and width in bits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Field {
    /// The field's name, exactly as `mlx5_ifc.h` spells it.
    pub name: &'static str,
    /// Offset of the field's most significant bit from the start of the structure.
    pub bit: u32,
    /// Width in bits.
    pub width: u32,
}

impl fmt::Debug for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{:#x}/{:#x}", self.name, self.bit, self.width)
    }
}

impl Field {
    /// A field at bit offset `bit` (MSB-first) with `width` bits.
    pub const fn new(name: &'static str, bit: u32, width: u32) -> Self {
        Field { name, bit, width }
    }

    /// The byte that holds the field's most significant bit.
    pub const fn byte_offset(&self) -> usize {
        (self.bit / 8) as usize
    }

    /// One past the last byte the field touches.
    pub const fn end_byte(&self) -> usize {
        (self.bit + self.width).div_ceil(8) as usize
    }

    /// Whether the field starts and ends on byte boundaries (arrays, nested layouts).
    pub const fn is_byte_aligned(&self) -> bool {
        self.bit.is_multiple_of(8) && self.width.is_multiple_of(8)
    }

    /// The same field moved `base_bits` further into an enclosing structure
    /// (for a context nested at a fixed offset inside a command).
    pub const fn at(self, base_bits: u32) -> Field {
        Field {
            name: self.name,
            bit: self.bit + base_bits,
            width: self.width,
        }
    }

    /// Whether `buf` is long enough to hold the field.
    pub const fn fits(&self, buf_len: usize) -> bool {
        self.end_byte() <= buf_len
    }

    /// Reads a field of at most 64 bits.
    ///
    /// Bits beyond the end of `buf` read as zero (a debug build asserts instead, since
    /// callers are expected to have checked the buffer against its [`Layout`] first).
    #[inline]
    pub fn get(&self, buf: &[u8]) -> u64 {
        debug_assert!(self.width <= 64, "{self:?} is wider than 64 bits");
        debug_assert!(
            self.fits(buf.len()),
            "{self:?} beyond a {}-byte buffer",
            buf.len()
        );
        let (dw, off) = ((self.bit / 32) as usize, self.bit % 32);
        if off + self.width <= 32 {
            // Fast path: the field lives inside one big-endian dword.
            let word = read_be32(buf, dw * 4);
            let shifted = word >> (32 - self.width - off);
            return u64::from(shifted) & mask(self.width);
        }
        // General path: gather the covering bytes into a u128 window.
        let first = self.byte_offset();
        let last = self.end_byte();
        let mut acc: u128 = 0;
        for i in first..last {
            acc = (acc << 8) | u128::from(buf.get(i).copied().unwrap_or(0));
        }
        let tail = (last * 8) as u32 - (self.bit + self.width);
        ((acc >> tail) as u64) & mask(self.width)
    }

    /// Writes a field of at most 64 bits; bits of `value` above the width are dropped.
    ///
    /// Bytes beyond the end of `buf` are not written (a debug build asserts instead).
    #[inline]
    pub fn set(&self, buf: &mut [u8], value: u64) {
        debug_assert!(self.width <= 64, "{self:?} is wider than 64 bits");
        debug_assert!(
            self.fits(buf.len()),
            "{self:?} beyond a {}-byte buffer",
            buf.len()
        );
        let value = value & mask(self.width);
        let (dw, off) = ((self.bit / 32) as usize, self.bit % 32);
        if off + self.width <= 32 {
            let shift = 32 - self.width - off;
            let m = (mask(self.width) as u32) << shift;
            let word = read_be32(buf, dw * 4);
            write_be32(buf, dw * 4, (word & !m) | ((value as u32) << shift));
            return;
        }
        let first = self.byte_offset();
        let last = self.end_byte();
        let tail = (last * 8) as u32 - (self.bit + self.width);
        let m = u128::from(mask(self.width)) << tail;
        let mut acc: u128 = 0;
        for i in first..last {
            acc = (acc << 8) | u128::from(buf.get(i).copied().unwrap_or(0));
        }
        acc = (acc & !m) | (u128::from(value) << tail);
        for i in (first..last).rev() {
            if let Some(b) = buf.get_mut(i) {
                *b = acc as u8;
            }
            acc >>= 8;
        }
    }

    /// The bytes of a byte-aligned field (an array such as a GID, or a nested context).
    ///
    /// Returns `None` when the field is not byte-aligned or `buf` is too short.
    pub fn bytes<'a>(&self, buf: &'a [u8]) -> Option<&'a [u8]> {
        if !self.is_byte_aligned() {
            return None;
        }
        buf.get(self.byte_offset()..self.end_byte())
    }

    /// The bytes of a byte-aligned field, mutably.
    pub fn bytes_mut<'a>(&self, buf: &'a mut [u8]) -> Option<&'a mut [u8]> {
        if !self.is_byte_aligned() {
            return None;
        }
        buf.get_mut(self.byte_offset()..self.end_byte())
    }
}

#[inline]
const fn mask(width: u32) -> u64 {
    if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

#[inline]
fn read_be32(buf: &[u8], at: usize) -> u32 {
    match buf.get(at..at + 4) {
        Some(b) => u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
        None => {
            let mut w = [0u8; 4];
            for (i, slot) in w.iter_mut().enumerate() {
                *slot = buf.get(at + i).copied().unwrap_or(0);
            }
            u32::from_be_bytes(w)
        }
    }
}

#[inline]
fn write_be32(buf: &mut [u8], at: usize, v: u32) {
    let bytes = v.to_be_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if let Some(slot) = buf.get_mut(at + i) {
            *slot = *b;
        }
    }
}

/// A PRM structure: its `mlx5_ifc.h` name, its size and every field the project uses.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// The structure's name in `mlx5_ifc.h`, without the `mlx5_ifc_` prefix and the
    /// `_bits` suffix (e.g. `create_qp_in`).
    pub name: &'static str,
    /// Size of the fixed part in bits (a trailing flexible array adds nothing).
    pub size_bits: u32,
    /// Every field the project defines for this structure.
    pub fields: &'static [Field],
}

/// A buffer was too short for the layout it was checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{layout}: {len} bytes is shorter than the {need} bytes the layout requires")]
pub struct TooShort {
    /// The layout checked against.
    pub layout: &'static str,
    /// Length of the buffer.
    pub len: usize,
    /// Length the layout requires.
    pub need: usize,
}

impl Layout {
    /// Size of the fixed part in bytes.
    pub const fn size(&self) -> usize {
        (self.size_bits / 8) as usize
    }

    /// Checks that `buf` holds at least the fixed part of this layout, so that every
    /// field of it can be read without running off the end. This is the checked
    /// constructor for bytes that come from the other side of the bus.
    pub fn check(&self, buf: &[u8]) -> Result<(), TooShort> {
        if buf.len() < self.size() {
            Err(TooShort {
                layout: self.name,
                len: buf.len(),
                need: self.size(),
            })
        } else {
            Ok(())
        }
    }

    /// Looks a field up by name.
    pub fn field(&self, name: &str) -> Option<Field> {
        self.fields.iter().copied().find(|f| f.name == name)
    }
}

/// Declares a PRM layout as a module of [`Field`] constants plus its [`Layout`].
///
/// ```
/// ferroverbs_hw::prm_layout! {
///     /// An example structure.
///     pub mod example = "example" (64) {
///         /// A 4-bit state at the top of dword 0.
///         state: 0, 4;
///         /// A 24-bit number in dword 1.
///         number: 0x28, 24;
///     }
/// }
/// let mut buf = [0u8; 8];
/// example::number.set(&mut buf, 0x123456);
/// assert_eq!(buf, [0, 0, 0, 0, 0, 0x12, 0x34, 0x56]);
/// assert_eq!(example::LAYOUT.fields.len(), 2);
/// ```
#[macro_export]
macro_rules! prm_layout {
    (
        $(#[$m:meta])*
        $vis:vis mod $name:ident = $ifc:literal ($bits:expr) {
            $( $(#[$fm:meta])* $field:ident : $bit:expr, $width:expr; )*
        }
    ) => {
        $(#[$m])*
        #[allow(non_upper_case_globals)]
        $vis mod $name {
            use $crate::field::{Field, Layout};
            $(
                $(#[$fm])*
                pub const $field: Field = Field::new(stringify!($field), $bit, $width);
            )*
            /// Every field of this layout that the project defines.
            pub const FIELDS: &[Field] = &[$($field),*];
            /// The layout: name in `mlx5_ifc.h`, size and fields.
            pub const LAYOUT: Layout = Layout { name: $ifc, size_bits: $bits, fields: FIELDS };
            /// Size of the fixed part in bytes.
            pub const SIZE: usize = LAYOUT.size();
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_dword_fields_match_mlx5_set() {
        // qpc.state is bits [31:28] of dword 0; pd is [23:0] of dword 1.
        let state = Field::new("state", 0, 4);
        let pd = Field::new("pd", 0x28, 24);
        let mut buf = [0u8; 8];
        state.set(&mut buf, 0x3);
        pd.set(&mut buf, 0xabcdef);
        assert_eq!(buf, [0x30, 0, 0, 0, 0, 0xab, 0xcd, 0xef]);
        assert_eq!(state.get(&buf), 3);
        assert_eq!(pd.get(&buf), 0xabcdef);
        // Writing one field leaves its neighbours alone.
        let lo = Field::new("lo", 0x3c, 4);
        lo.set(&mut buf, 0xf);
        assert_eq!(pd.get(&buf), 0xabcdef);
        assert_eq!(buf[7], 0xef | 0x0f);
    }

    #[test]
    fn wide_and_straddling_fields() {
        let addr = Field::new("addr", 64, 64);
        let mut buf = [0u8; 16];
        addr.set(&mut buf, 0x1122_3344_5566_7788);
        assert_eq!(&buf[8..], &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
        assert_eq!(addr.get(&buf), 0x1122_3344_5566_7788);
        // A 12-bit field straddling a dword boundary.
        let odd = Field::new("odd", 26, 12);
        let mut b = [0u8; 8];
        odd.set(&mut b, 0xfff);
        assert_eq!(odd.get(&b), 0xfff);
        assert_eq!(b, [0, 0, 0, 0x3f, 0xfc, 0, 0, 0]);
        odd.set(&mut b, 0);
        assert_eq!(b, [0; 8]);
    }

    #[test]
    fn value_is_truncated_to_width() {
        let f = Field::new("f", 4, 4);
        let mut b = [0u8; 4];
        f.set(&mut b, 0xff);
        assert_eq!(b, [0x0f, 0, 0, 0]);
    }

    #[test]
    fn byte_views_and_checks() {
        let gid = Field::new("gid", 32, 128);
        let mut b = [0u8; 20];
        gid.bytes_mut(&mut b).unwrap().copy_from_slice(&[7; 16]);
        assert_eq!(gid.bytes(&b).unwrap(), &[7; 16]);
        assert!(Field::new("x", 3, 8).bytes(&b).is_none());
        let l = Layout {
            name: "l",
            size_bits: 160,
            fields: &[],
        };
        assert!(l.check(&b).is_ok());
        assert_eq!(l.check(&b[..3]).unwrap_err().need, 20);
    }
}

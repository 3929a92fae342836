//! Big-endian bit fields of CM attributes, as IBTA Vol. 1 ch. 12 tables 106-120 lay
//! them out (Linux `include/rdma/ibta_vol1_c12.h`): a field is `width` bits of the
//! big-endian integer made of the `bytes` bytes at `off`, `shift` bits above its least
//! significant bit. A 24-bit QPN at word 32 is `Field::new(32, 4, 8, 24)`: the upper
//! three bytes of the word.

/// One field of an attribute (offsets from the first byte after the MAD header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// Byte offset of the big-endian integer that holds the field.
    pub off: usize,
    /// Its size in bytes (1 to 8).
    pub bytes: usize,
    /// Bits below the field in that integer.
    pub shift: u32,
    /// The field's width in bits.
    pub width: u32,
}

impl Field {
    /// A field of `width` bits at `shift` in the `bytes`-byte integer at `off`.
    pub const fn new(off: usize, bytes: usize, shift: u32, width: u32) -> Field {
        assert!(bytes >= 1 && bytes <= 8 && shift + width <= 8 * bytes as u32);
        Field {
            off,
            bytes,
            shift,
            width,
        }
    }

    /// A whole big-endian integer of `bytes` bytes at `off`.
    pub const fn int(off: usize, bytes: usize) -> Field {
        Field::new(off, bytes, 0, 8 * bytes as u32)
    }

    /// The bits `hi..=lo` (bit 7 the most significant) of the byte at `off`.
    pub const fn bits(off: usize, hi: u32, lo: u32) -> Field {
        Field::new(off, 1, lo, hi - lo + 1)
    }

    const fn mask(&self) -> u64 {
        if self.width == 64 {
            u64::MAX
        } else {
            (1u64 << self.width) - 1
        }
    }

    /// Reads the field from `buf` (which must hold `off + bytes` bytes: the caller
    /// checked the attribute's length).
    pub fn get(&self, buf: &[u8]) -> u64 {
        let v = buf[self.off..self.off + self.bytes]
            .iter()
            .fold(0u64, |a, &b| (a << 8) | u64::from(b));
        (v >> self.shift) & self.mask()
    }

    /// Writes `v` (truncated to the field's width) into `buf`, leaving the other bits
    /// of the integer as they are.
    pub fn set(&self, buf: &mut [u8], v: u64) {
        let bytes = &mut buf[self.off..self.off + self.bytes];
        let old = bytes.iter().fold(0u64, |a, &b| (a << 8) | u64::from(b));
        let m = self.mask() << self.shift;
        let new = (old & !m) | ((v << self.shift) & m);
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (new >> (8 * (self.bytes - 1 - i))) as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_24_bit_qpn_is_the_upper_three_bytes_of_its_word() {
        let f = Field::new(0, 4, 8, 24);
        let mut b = [0u8; 4];
        b[3] = 0x5a;
        f.set(&mut b, 0x12_3456);
        assert_eq!(b, [0x12, 0x34, 0x56, 0x5a]);
        assert_eq!(f.get(&b), 0x12_3456);
    }

    #[test]
    fn bit_ranges_count_from_the_most_significant_bit() {
        let hi = Field::bits(0, 7, 3);
        let lo = Field::bits(0, 2, 0);
        let mut b = [0u8; 1];
        hi.set(&mut b, 20);
        lo.set(&mut b, 7);
        assert_eq!(b[0], (20 << 3) | 7);
        assert_eq!((hi.get(&b), lo.get(&b)), (20, 7));
        hi.set(&mut b, 0xff);
        assert_eq!(b[0], 0xff, "truncated to 5 bits, the rest kept");
    }
}

//! Packet sequence numbers: 24-bit values with modulo-2^24 arithmetic.
//!
//! Comparison follows the convention of rxe, rdmavt and the other software transports
//! (`psn_compare`, reference §4.1): `cmp(a, b) = (i32)((a - b) << 8)`, positive when `a`
//! is after `b` within half the sequence space (2^23), negative when before, zero when
//! equal. IBTA Vol. 1 §9.7 (reliable service).

use core::cmp::Ordering;
use core::fmt;

/// A 24-bit packet sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

/// How a received PSN relates to the responder's expected PSN (reference §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PsnClass {
    /// The expected PSN: a new request.
    Expected,
    /// Within the 2^23 PSNs before the expected one: a duplicate.
    Duplicate,
    /// After the expected one: a sequence error (NAK once, then drop).
    Ahead,
}

impl Psn {
    /// The size of the PSN space, 2^24.
    pub const MODULUS: u32 = 1 << 24;
    /// The mask of the 24 PSN bits.
    pub const MASK: u32 = Self::MODULUS - 1;
    /// Half the PSN space, 2^23: the farthest a PSN can be "after" another.
    pub const HALF: u32 = 1 << 23;

    /// The PSN of the low 24 bits of `value`.
    pub const fn new(value: u32) -> Psn {
        Psn(value & Self::MASK)
    }

    /// The PSN of `value`, or `None` if it does not fit 24 bits.
    pub const fn checked(value: u32) -> Option<Psn> {
        if value <= Self::MASK {
            Some(Psn(value))
        } else {
            None
        }
    }

    /// The 24-bit value.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// This PSN plus `n`, modulo 2^24.
    pub const fn add(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_add(n))
    }

    /// This PSN minus `n`, modulo 2^24.
    pub const fn sub(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_sub(n))
    }

    /// The next PSN.
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// The signed distance from `other` to `self`: `(i32)((self - other) << 8) >> 8`,
    /// in `-2^23..2^23`. Positive when `self` is after `other`.
    pub const fn distance(self, other: Psn) -> i32 {
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// Compares within the window: `Greater` when `self` is after `other`.
    pub fn compare(self, other: Psn) -> Ordering {
        self.distance(other).cmp(&0)
    }

    /// Whether `self` is after `other` (within half the space).
    pub const fn is_after(self, other: Psn) -> bool {
        self.distance(other) > 0
    }

    /// Whether `self` is before `other` (within half the space).
    pub const fn is_before(self, other: Psn) -> bool {
        self.distance(other) < 0
    }

    /// Classifies a received PSN (`self`) against the expected PSN.
    pub const fn classify(self, expected: Psn) -> PsnClass {
        match self.distance(expected) {
            0 => PsnClass::Expected,
            d if d < 0 => PsnClass::Duplicate,
            _ => PsnClass::Ahead,
        }
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#08x}", self.0)
    }
}

impl From<Psn> for u32 {
    fn from(psn: Psn) -> u32 {
        psn.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_wraps_at_24_bits() {
        let p = Psn::new(0xff_fffe);
        assert_eq!(p.add(1).value(), 0xff_ffff);
        assert_eq!(p.add(2).value(), 0);
        assert_eq!(p.add(3), Psn::new(1));
        assert_eq!(Psn::new(1).sub(3), p);
        assert_eq!(Psn::new(0x1ff_ffff).value(), 0xff_ffff);
        assert_eq!(Psn::checked(0x100_0000), None);
        assert_eq!(Psn::checked(0xff_ffff), Some(Psn::new(0xff_ffff)));
        assert_eq!(Psn::new(5).next(), Psn::new(6));
        assert_eq!(p.add(Psn::MODULUS), p);
    }

    #[test]
    fn comparison_across_the_wrap() {
        let before = Psn::new(0xff_fffe);
        let after = Psn::new(2);
        assert_eq!(after.distance(before), 4);
        assert_eq!(before.distance(after), -4);
        assert_eq!(after.compare(before), Ordering::Greater);
        assert_eq!(before.compare(after), Ordering::Less);
        assert_eq!(after.compare(after), Ordering::Equal);
        assert!(after.is_after(before) && before.is_before(after));
        // Exactly half the space away counts as "before" (the sign bit of the shifted
        // difference), as in rxe's psn_compare.
        assert_eq!(
            Psn::new(Psn::HALF).distance(Psn::new(0)),
            -(Psn::HALF as i32)
        );
        assert_eq!(
            Psn::new(Psn::HALF - 1).distance(Psn::new(0)),
            (Psn::HALF - 1) as i32
        );
    }

    #[test]
    fn agrees_with_the_reference_formula() {
        // cmp(a, b) = (int32)((a - b) << 8) on u32 values.
        let mut x = 0x1234_5678u32;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let a = Psn::new(x);
            let b = Psn::new(x.rotate_left(11));
            let reference = (a.value().wrapping_sub(b.value()) << 8) as i32;
            assert_eq!(a.compare(b), reference.cmp(&0));
        }
    }

    #[test]
    fn classification() {
        let e = Psn::new(0x10);
        assert_eq!(Psn::new(0x10).classify(e), PsnClass::Expected);
        assert_eq!(Psn::new(0x0f).classify(e), PsnClass::Duplicate);
        assert_eq!(Psn::new(0x11).classify(e), PsnClass::Ahead);
        assert_eq!(
            Psn::new(0xff_ffff).classify(Psn::new(0)),
            PsnClass::Duplicate
        );
        assert_eq!(e.sub(Psn::HALF).classify(e), PsnClass::Duplicate);
        assert_eq!(e.add(Psn::HALF - 1).classify(e), PsnClass::Ahead);
    }
}

//! Maps keyed by object numbers (QPN, CQN, MKEY index, communication ID).
//!
//! The standard `HashMap` hashes with SipHash-1-3, which costs tens of instructions
//! per lookup and guards against keys chosen by an attacker. A simulated device's data
//! path looks a QP or a CQ up several times per packet, and its keys are object
//! numbers it handed out itself, so a multiplicative hash (Fibonacci hashing: one
//! multiplication by 2^64 / φ) is enough: it spreads consecutive numbers over the
//! buckets (low bits) and the control bytes (high bits) of the table.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// 2^64 / φ, odd.
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// A [`Hasher`] for integer keys: one multiplication per integer written.
#[derive(Clone, Copy, Debug, Default)]
pub struct NumHasher(u64);

impl Hasher for NumHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(GOLDEN);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(GOLDEN);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// A `HashMap` keyed by object number, hashed with [`NumHasher`].
pub type NumMap<K, V> = HashMap<K, V, BuildHasherDefault<NumHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::Hasher;

    #[test]
    fn behaves_as_a_map_and_spreads_consecutive_keys() {
        let mut m: NumMap<u32, u32> = NumMap::default();
        for q in 0..1000u32 {
            m.insert(q, q * 2);
        }
        assert!((0..1000u32).all(|q| m.get(&q) == Some(&(q * 2))));
        assert_eq!(m.get(&1000), None);
        let h = |n: u32| {
            let mut s = NumHasher::default();
            s.write_u32(n);
            s.finish()
        };
        // Consecutive keys land in different buckets and carry different top bits.
        let low: std::collections::HashSet<u64> = (0..64).map(|n| h(n) & 63).collect();
        let top: std::collections::HashSet<u64> = (0..64).map(|n| h(n) >> 57).collect();
        assert!(
            low.len() > 32 && top.len() > 32,
            "{} {}",
            low.len(),
            top.len()
        );
    }
}

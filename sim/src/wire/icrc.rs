//! The Invariant CRC (ICRC) of a RoCEv2 packet.
//!
//! IBTA Vol. 1 §7.8 (ICRC) as adapted by Annex A17 for RoCEv2; algorithm, masks and byte
//! order from `shared/reference/rocev2-wire.md` §2.4 (Linux `rxe_icrc.c`, confirmed with
//! tshark, scapy and zlib):
//!
//! 1. the CRC input is 8 bytes of 0xFF (standing in for the masked LRH), the IPv4
//!    header, the UDP header, the BTH, the other transport headers, the payload and the
//!    pad bytes; the Ethernet header and the ICRC itself are not covered;
//! 2. in that copy, the fields routers may change are set to all ones: IPv4 TOS, TTL
//!    and header checksum; UDP checksum; BTH byte 4 (FECN, BECN, reserved);
//! 3. the CRC is the standard CRC-32 (IEEE 802.3, zlib: reflected polynomial 0xEDB88320,
//!    initial value and final XOR 0xFFFFFFFF);
//! 4. it goes on the wire least-significant byte first (`to_le_bytes`). Wireshark reads
//!    the four bytes big-endian, so it shows the byte-swapped value.
//!
//! The computation copies only the 48 masked bytes that open the input (the eight 0xFF
//! bytes and the masked IPv4, UDP and BTH headers) to the stack and allocates nothing.
//!
//! **Speed.** On x86-64 CPUs with `PCLMULQDQ` the CRC is one carry-less-multiply fold
//! over the whole input (module `clmul`): the standard CRC-32 fold of Gopal et al.,
//! "Fast CRC computation for generic polynomials using PCLMULQDQ instruction" (Intel,
//! 2009), with the constants of the IEEE polynomial given there (also in Linux
//! `crc32-pclmul` and zlib). The 48 masked bytes are exactly three 16-byte blocks, so
//! the header block and the packet continue one fold stream without an intermediate
//! reduction; a transport part that is not a multiple of 16 bytes has its first
//! `len % 16` bytes moved into the stack block behind leading zero bytes (a CRC register
//! of zero is unchanged by zero bytes; the initial all-ones register is folded into the
//! first four input bytes instead), so every block is whole. Elsewhere (or without
//! `PCLMULQDQ`) it is `crc32fast`. Both give the same value (tests below, against
//! `crc32fast` and the reference vector).

use super::{bth, ipv4, udp};

/// The size of the ICRC.
pub const ICRC_LEN: usize = 4;

/// `crc32(b"\xff" * 8)`: the CRC after the eight 0xFF bytes that open every ICRC input
/// (rxe starts its raw register at `!0x2144DF1C = 0xDEBB20E3`).
#[cfg(test)]
const CRC_OF_FF8: u32 = 0x2144_df1c;

/// The eight 0xFF bytes and the masked IPv4, UDP and BTH headers: the first 48 bytes of
/// every ICRC input.
const MASKED_LEN: usize = 8 + ipv4::HEADER_LEN + udp::HEADER_LEN + bth::HEADER_LEN;

/// Computes the ICRC of a packet from its IPv4 header, its UDP header and its transport
/// part (`transport`: from the BTH to the end of the pad bytes, ICRC excluded).
///
/// The masks are applied to copies; the inputs are not modified. A `transport` shorter
/// than a BTH is hashed as it is (such a packet is rejected before its ICRC matters).
///
/// The common packet (a whole BTH, a transport part a multiple of four bytes long, a
/// CPU with `PCLMULQDQ`) goes straight to the fold kernel from the caller (this
/// function is inlined: a test and a call); any other to `compute_other`.
#[inline]
pub fn compute(
    ipv4_header: &[u8; ipv4::HEADER_LEN],
    udp_header: &[u8; udp::HEADER_LEN],
    transport: &[u8],
) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if transport.len().is_multiple_of(4) && clmul::available() {
        if let Some((b, rest)) = transport.split_first_chunk::<{ bth::HEADER_LEN }>() {
            return clmul::icrc(ipv4_header, udp_header, b, rest);
        }
    }
    compute_other(ipv4_header, udp_header, transport)
}

/// [`compute`] for the other packets: a transport part shorter than a BTH (hashed as
/// it is), of a length not a multiple of four, or a CPU without `PCLMULQDQ`.
#[inline(never)]
fn compute_other(
    ipv4_header: &[u8; ipv4::HEADER_LEN],
    udp_header: &[u8; udp::HEADER_LEN],
    transport: &[u8],
) -> u32 {
    if transport.len() < bth::HEADER_LEN {
        let mut h = [0u8; MASKED_LEN];
        masked_block(&mut h, ipv4_header, udp_header, &[]);
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&h[..MASKED_LEN - bth::HEADER_LEN]);
        hasher.update(transport);
        return hasher.finalize();
    }
    let (bth_bytes, rest) = transport.split_at(bth::HEADER_LEN);
    #[cfg(target_arch = "x86_64")]
    if clmul::available() {
        if let Ok(b) = <&[u8; bth::HEADER_LEN]>::try_from(bth_bytes) {
            return clmul::icrc_any(ipv4_header, udp_header, b, rest);
        }
    }
    let mut h = [0u8; MASKED_LEN];
    masked_block(&mut h, ipv4_header, udp_header, bth_bytes);
    portable_crc32(&h, rest)
}

/// The CRC-32 of `h` followed by `rest` with `crc32fast` (any CPU).
fn portable_crc32(h: &[u8; MASKED_LEN], rest: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(h);
    hasher.update(rest);
    hasher.finalize()
}

/// Writes the first [`MASKED_LEN`] bytes of the ICRC input into `h`: the 0xFF bytes
/// standing in for the LRH, then copies of the headers with their variant fields set to
/// ones. A `bth_bytes` that is not a whole BTH leaves the BTH part as it was.
fn masked_block(
    h: &mut [u8; MASKED_LEN],
    ipv4_header: &[u8; ipv4::HEADER_LEN],
    udp_header: &[u8; udp::HEADER_LEN],
    bth_bytes: &[u8],
) {
    const IP_AT: usize = 8;
    const UDP_AT: usize = IP_AT + ipv4::HEADER_LEN;
    const BTH_AT: usize = UDP_AT + udp::HEADER_LEN;
    h[..IP_AT].fill(0xff);
    h[IP_AT..UDP_AT].copy_from_slice(ipv4_header);
    for at in ipv4::ICRC_MASKED_BYTES {
        h[IP_AT + at] = 0xff;
    }
    h[UDP_AT..BTH_AT].copy_from_slice(udp_header);
    for at in udp::ICRC_MASKED_BYTES {
        h[UDP_AT + at] = 0xff;
    }
    if bth_bytes.len() == bth::HEADER_LEN {
        h[BTH_AT..].copy_from_slice(bth_bytes);
        h[BTH_AT + bth::ICRC_MASKED_BYTE] = 0xff;
    }
}

/// The CRC-32 by carry-less multiplication (x86-64 `PCLMULQDQ`).
///
/// The module's only `unsafe` is the call of the `#[target_feature]` kernel, made only
/// after the CPU was seen to support that feature ([`clmul::available`]); the kernel
/// itself is safe code (register intrinsics on values, no pointer).
#[cfg(target_arch = "x86_64")]
mod clmul {
    use core::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_clmulepi64_si128, _mm_cvtsi128_si32, _mm_or_si128,
        _mm_set_epi32, _mm_set_epi64x, _mm_slli_si128, _mm_srli_si128, _mm_xor_si128,
    };
    use std::sync::atomic::{AtomicU8, Ordering};

    use super::{bth, ipv4, udp, MASKED_LEN};

    /// Fold constants of the reflected IEEE polynomial (0xEDB88320), from the paper:
    /// `K3 = x^(128+32) mod P` and `K4 = x^(128-32) mod P` (fold forward by one 128-bit
    /// block), `K5 = x^64 mod P`, each bit-reflected and shifted left by one.
    const K3: i64 = 0x1_7519_97d0;
    const K4: i64 = 0x0_ccaa_009e;
    const K5: i64 = 0x1_63cd_6124;
    /// The polynomial `P(x)` (33 bits, reflected) and the Barrett constant
    /// `mu = floor(x^64 / P(x))` (reflected), for the final 64-to-32-bit reduction.
    const P_X: i64 = 0x1_db71_0641;
    const MU: i64 = 0x1_f701_1641;

    /// 0: not probed yet; 1: `PCLMULQDQ` present; 2: absent.
    static HAVE: AtomicU8 = AtomicU8::new(0);

    /// Whether the CPU has `PCLMULQDQ` (probed once).
    #[inline]
    pub(super) fn available() -> bool {
        match HAVE.load(Ordering::Relaxed) {
            1 => true,
            2 => false,
            _ => {
                let yes = std::arch::is_x86_feature_detected!("pclmulqdq");
                HAVE.store(if yes { 1 } else { 2 }, Ordering::Relaxed);
                yes
            }
        }
    }

    /// The ICRC of a packet with a BTH (`bth_bytes`, 12 bytes) followed by `rest` (the
    /// other transport bytes, ICRC excluded), for a `rest` whose length is a multiple
    /// of four (every RoCEv2 packet; any other length gives the ICRC too, through
    /// [`icrc_any`]). Call only when [`available`].
    #[inline]
    pub(super) fn icrc(
        ipv4_header: &[u8; ipv4::HEADER_LEN],
        udp_header: &[u8; udp::HEADER_LEN],
        bth_bytes: &[u8; bth::HEADER_LEN],
        rest: &[u8],
    ) -> u32 {
        // SAFETY: `available()` returned true: the CPU supports `pclmulqdq`, the only
        // target feature `kernel` enables beyond the x86-64 baseline (SSE2). `kernel`
        // has no other precondition: it reads its inputs as arrays and slices.
        #[allow(unsafe_code)]
        unsafe {
            kernel(ipv4_header, udp_header, bth_bytes, rest)
        }
    }

    /// [`icrc`] for any length of `rest`. Call only when [`available`].
    pub(super) fn icrc_any(
        ipv4_header: &[u8; ipv4::HEADER_LEN],
        udp_header: &[u8; udp::HEADER_LEN],
        bth_bytes: &[u8; bth::HEADER_LEN],
        rest: &[u8],
    ) -> u32 {
        if rest.len().is_multiple_of(4) {
            icrc(ipv4_header, udp_header, bth_bytes, rest)
        } else {
            stacked(ipv4_header, udp_header, bth_bytes, rest)
        }
    }

    /// [`kernel`] for a `rest` of any length: the header blocks behind leading zero
    /// bytes on the stack, with the first `t = rest.len() % 16` bytes of `rest` after
    /// them, so that every block is whole. Call only when [`available`].
    #[inline(never)]
    fn stacked(
        ipv4_header: &[u8; ipv4::HEADER_LEN],
        udp_header: &[u8; udp::HEADER_LEN],
        bth_bytes: &[u8; bth::HEADER_LEN],
        rest: &[u8],
    ) -> u32 {
        let w = masked_words(ipv4_header, udp_header, bth_bytes);
        let t = rest.len() % 16;
        let z = 16 - t;
        let mut head = [0u8; MASKED_LEN + 16];
        for (k, v) in w.iter().enumerate() {
            // `z + 8 * k + 8 <= 16 + 48 <= head.len()`.
            if let Some(d) = head.get_mut(z + 8 * k..z + 8 * k + 8) {
                d.copy_from_slice(&v.to_le_bytes());
            }
        }
        // `z + MASKED_LEN + t == head.len()`; a `t` of 0 leaves one zero block.
        head[z + MASKED_LEN..].copy_from_slice(&rest[..t]);
        // SAFETY: as in `icrc`: `available()` returned true; `fold` reads slices.
        #[allow(unsafe_code)]
        unsafe {
            fold(&head, &rest[t..])
        }
    }

    /// The ICRC by folding. Every block is whole: the first `t = rest.len() % 16`
    /// bytes of `rest` join the header blocks behind `16 - t` zero bytes. The initial
    /// all-ones register is XORed into the first four input bytes instead
    /// ([`masked_words`]), so the fold starts from a zero register, which leading zero
    /// bytes do not change. For `t` of 0, 4, 8 or 12 (every RoCEv2 packet: the
    /// transport part is a multiple of four bytes) the header blocks are built in
    /// registers and shifted there; any other `t` goes to [`stacked`] (out of line,
    /// so that this function needs no stack block).
    #[target_feature(enable = "pclmulqdq")]
    fn kernel(
        ipv4_header: &[u8; ipv4::HEADER_LEN],
        udp_header: &[u8; udp::HEADER_LEN],
        bth_bytes: &[u8; bth::HEADER_LEN],
        rest: &[u8],
    ) -> u32 {
        let w = masked_words(ipv4_header, udp_header, bth_bytes);
        let k3k4 = _mm_set_epi64x(K4, K3);
        let h = [
            _mm_set_epi64x(w[1] as i64, w[0] as i64),
            _mm_set_epi64x(w[3] as i64, w[2] as i64),
            _mm_set_epi64x(w[5] as i64, w[4] as i64),
        ];
        // The first `t` bytes of `rest`, in the low bytes of a block.
        let mut r = [0u8; 16];
        let t = rest.len() % 16;
        let x = match t {
            0 => fold1(fold1(h[0], h[1], k3k4), h[2], k3k4),
            4 => {
                r[..4].copy_from_slice(&rest[..4]);
                shifted::<12, 4>(h, block(&r), k3k4)
            }
            8 => {
                r[..8].copy_from_slice(&rest[..8]);
                shifted::<8, 8>(h, block(&r), k3k4)
            }
            12 => {
                r[..12].copy_from_slice(&rest[..12]);
                shifted::<4, 12>(h, block(&r), k3k4)
            }
            _ => return stacked(ipv4_header, udp_header, bth_bytes, rest),
        };
        let (blocks, _) = rest[t..].as_chunks::<16>();
        let mut x = x;
        for b in blocks {
            x = fold1(x, block(b), k3k4);
        }
        reduce(x, k3k4)
    }

    /// The register after the blocks `Z` zero bytes, the three header blocks `h`, the
    /// first `16 - Z` bytes of `r` (`R = 16 - Z`): four blocks, each made of two
    /// neighbours shifted by `Z` bytes.
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn shifted<const Z: i32, const R: i32>(h: [__m128i; 3], r: __m128i, k3k4: __m128i) -> __m128i {
        let b0 = _mm_slli_si128::<Z>(h[0]);
        let b1 = _mm_or_si128(_mm_slli_si128::<Z>(h[1]), _mm_srli_si128::<R>(h[0]));
        let b2 = _mm_or_si128(_mm_slli_si128::<Z>(h[2]), _mm_srli_si128::<R>(h[1]));
        let b3 = _mm_or_si128(_mm_slli_si128::<Z>(r), _mm_srli_si128::<R>(h[2]));
        fold1(fold1(fold1(b0, b1, k3k4), b2, k3k4), b3, k3k4)
    }

    /// The [`MASKED_LEN`] bytes of [`masked_block`] as six little-endian words, with
    /// the first four bytes (the opening 0xFF bytes) XORed with the initial all-ones
    /// register, i.e. zero: built from the headers with loads and masks instead of
    /// byte copies. The masked positions (IPv4 TOS, TTL and checksum, UDP checksum,
    /// BTH byte 4) are those of `ipv4::ICRC_MASKED_BYTES`, `udp::ICRC_MASKED_BYTES`
    /// and `bth::ICRC_MASKED_BYTE` (a test checks the words against `masked_block`).
    #[inline]
    pub(super) fn masked_words(
        ip: &[u8; ipv4::HEADER_LEN],
        u: &[u8; udp::HEADER_LEN],
        b: &[u8; bth::HEADER_LEN],
    ) -> [u64; MASKED_LEN / 8] {
        let le64 = |s: &[u8], at: usize| {
            let mut v = [0u8; 8];
            v.copy_from_slice(&s[at..at + 8]);
            u64::from_le_bytes(v)
        };
        let le32 = |s: &[u8], at: usize| {
            u64::from(u32::from_le_bytes([s[at], s[at + 1], s[at + 2], s[at + 3]]))
        };
        [
            // 0xFF x 8 (the LRH), the first four XORed with the initial register.
            0xffff_ffff_0000_0000,
            // IPv4 bytes 0-7: TOS (byte 1) masked.
            le64(ip, 0) | 0xff00,
            // IPv4 bytes 8-15: TTL (8) and the header checksum (10, 11) masked.
            le64(ip, 8) | 0xffff_00ff,
            // IPv4 bytes 16-19, UDP bytes 0-3.
            le32(ip, 16) | le32(u, 0) << 32,
            // UDP bytes 4-7 (the checksum, 6-7, masked), BTH bytes 0-3.
            u64::from(u16::from_le_bytes([u[4], u[5]])) | 0xffff_0000 | le32(b, 0) << 32,
            // BTH bytes 4-11: byte 4 (FECN, BECN, reserved) masked.
            le64(b, 4) | 0xff,
        ]
    }

    /// The CRC-32 (IEEE: initial value and final XOR all ones) of `h` followed by
    /// `rest`. Call only when [`available`].
    #[cfg(test)]
    pub(super) fn crc32(h: &[u8; MASKED_LEN], rest: &[u8]) -> u32 {
        let t = rest.len() % 16;
        let z = (16 - t) % 16;
        let mut head = [0u8; MASKED_LEN + 16];
        head[z..z + MASKED_LEN].copy_from_slice(h);
        for b in &mut head[z..z + 4] {
            *b ^= 0xff;
        }
        head[z + MASKED_LEN..z + MASKED_LEN + t].copy_from_slice(&rest[..t]);
        // SAFETY: as in `icrc`.
        #[allow(unsafe_code)]
        unsafe {
            fold(&head[..z + MASKED_LEN + t], &rest[t..])
        }
    }

    /// The 16 bytes at the start of `b` as a vector (little-endian lanes, as a load
    /// would give).
    #[inline]
    #[target_feature(enable = "sse2")]
    fn block(b: &[u8; 16]) -> __m128i {
        // A plain 16-byte load (zerocopy proves the byte-for-byte reinterpretation
        // sound: `__m128i` has no invalid bit patterns).
        zerocopy::transmute!(*b)
    }

    /// `x` folded forward by 128 bits onto block `b`.
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn fold1(x: __m128i, b: __m128i, k3k4: __m128i) -> __m128i {
        let lo = _mm_clmulepi64_si128(x, k3k4, 0x00);
        let hi = _mm_clmulepi64_si128(x, k3k4, 0x11);
        _mm_xor_si128(_mm_xor_si128(b, lo), hi)
    }

    /// The CRC-32 value (register complemented) of `head` followed by `tail`, from a
    /// zero register; both are read in whole 16-byte blocks (a partial last block of
    /// either is ignored: the caller gives whole blocks).
    #[target_feature(enable = "pclmulqdq")]
    fn fold(head: &[u8], tail: &[u8]) -> u32 {
        let k3k4 = _mm_set_epi64x(K4, K3);
        if head.len() < 16 {
            return !0;
        }
        let (first, head) = head.split_at(16);
        let Ok(first) = <&[u8; 16]>::try_from(first) else {
            return !0;
        };
        let mut x = block(first);
        let (blocks, _) = head.as_chunks::<16>();
        for b in blocks {
            x = fold1(x, block(b), k3k4);
        }
        let (blocks, _) = tail.as_chunks::<16>();
        for b in blocks {
            x = fold1(x, block(b), k3k4);
        }
        reduce(x, k3k4)
    }

    /// The CRC-32 value (register complemented) of the folded 128-bit remainder `x`.
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn reduce(x: __m128i, k3k4: __m128i) -> u32 {
        // 128 bits to 96: the low 64 bits times K4, added to the high 64.
        let x = _mm_xor_si128(_mm_clmulepi64_si128(x, k3k4, 0x10), _mm_srli_si128(x, 8));
        // 96 bits to 64: the low 32 bits times K5, added to the high 64.
        let low32 = _mm_set_epi32(0, 0, 0, !0);
        let x = _mm_xor_si128(
            _mm_clmulepi64_si128(_mm_and_si128(x, low32), _mm_set_epi64x(0, K5), 0x00),
            _mm_srli_si128(x, 4),
        );
        // Barrett reduction of the 64-bit remainder to the 32-bit register.
        let pmu = _mm_set_epi64x(MU, P_X);
        let t1 = _mm_clmulepi64_si128(_mm_and_si128(x, low32), pmu, 0x10);
        let t2 = _mm_clmulepi64_si128(_mm_and_si128(t1, low32), pmu, 0x00);
        !(_mm_cvtsi128_si32(_mm_srli_si128(_mm_xor_si128(x, t2), 4)) as u32)
    }
}

/// Reads an ICRC from its four wire bytes (least-significant byte first).
pub const fn from_wire(bytes: [u8; ICRC_LEN]) -> u32 {
    u32::from_le_bytes(bytes)
}

/// The four wire bytes of an ICRC (least-significant byte first).
pub const fn to_wire(icrc: u32) -> [u8; ICRC_LEN] {
    icrc.to_le_bytes()
}

/// The value Wireshark/tshark prints as "Invariant CRC" for an ICRC: the wire bytes read
/// big-endian (reference §2.4, §7.3).
pub const fn as_wireshark_shows(icrc: u32) -> u32 {
    icrc.swap_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example of reference §2.4.
    const IP: [u8; 20] = [
        0x45, 0x00, 0x00, 0x34, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb9, 0x65, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0x02,
    ];
    const UDP: [u8; 8] = [0xc0, 0x00, 0x12, 0xb7, 0x00, 0x20, 0x00, 0x00];
    const TRANSPORT: [u8; 20] = [
        0x04, 0x30, 0xff, 0xff, 0x00, 0x00, 0x00, 0x12, 0x80, 0x00, 0x00, 0x00, b'h', b'e', b'l',
        b'l', b'o', 0, 0, 0,
    ];

    #[test]
    fn reference_worked_example() {
        let icrc = compute(&IP, &UDP, &TRANSPORT);
        assert_eq!(icrc, 0x73c8_6653);
        assert_eq!(to_wire(icrc), [0x53, 0x66, 0xc8, 0x73]);
        assert_eq!(from_wire([0x53, 0x66, 0xc8, 0x73]), icrc);
        assert_eq!(as_wireshark_shows(icrc), 0x5366_c873);
    }

    #[test]
    fn equals_plain_crc32_of_the_reference_pseudo_packet() {
        // The 56-byte pseudo packet of reference §2.4, fed to a plain CRC-32.
        let pseudo: [u8; 56] = [
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // masked LRH
            0x45, 0xff, 0x00, 0x34, 0x00, 0x00, 0x40, 0x00, 0xff, 0x11, 0xff, 0xff, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0x02, // IPv4, TOS/TTL/csum masked
            0xc0, 0x00, 0x12, 0xb7, 0x00, 0x20, 0xff, 0xff, // UDP, csum masked
            0x04, 0x30, 0xff, 0xff, 0xff, 0x00, 0x00, 0x12, 0x80, 0x00, 0x00, 0x00, // BTH
            b'h', b'e', b'l', b'l', b'o', 0, 0, 0,
        ];
        assert_eq!(crc32fast::hash(&pseudo), 0x73c8_6653);
        assert_eq!(crc32fast::hash(&[0xff; 8]), CRC_OF_FF8);
        assert_eq!(!CRC_OF_FF8, 0xdebb_20e3, "rxe's initial register value");
    }

    #[test]
    fn masked_fields_do_not_matter_and_the_inputs_are_untouched() {
        let reference = compute(&IP, &UDP, &TRANSPORT);
        let (mut ip, mut udp, mut t) = (IP, UDP, TRANSPORT);
        ip[1] = 0x03; // ECN = CE
        ip[8] = 3; // TTL
        ip[10] ^= 0x5a;
        ip[11] ^= 0xa5;
        udp[6] = 0x12;
        udp[7] = 0x34;
        t[4] = 0xc0 | 0x15; // FECN, BECN and reserved bits
        assert_eq!(compute(&ip, &udp, &t), reference);
        assert_eq!(ip[8], 3);
    }

    /// The ICRC input of reference §2.4 built byte by byte: 8 x 0xFF, the masked
    /// headers, the transport part.
    fn reference_icrc(ip: &[u8; 20], udp: &[u8; 8], transport: &[u8]) -> u32 {
        let mut pseudo = vec![0xffu8; 8];
        let mut ip = *ip;
        ip[1] = 0xff;
        ip[8] = 0xff;
        ip[10] = 0xff;
        ip[11] = 0xff;
        pseudo.extend_from_slice(&ip);
        let mut udp = *udp;
        udp[6] = 0xff;
        udp[7] = 0xff;
        pseudo.extend_from_slice(&udp);
        let mut t = transport.to_vec();
        if t.len() >= 12 {
            t[4] = 0xff;
        }
        pseudo.extend_from_slice(&t);
        crc32fast::hash(&pseudo)
    }

    /// A deterministic byte stream (xorshift) for the comparisons below.
    fn bytes(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn every_length_equals_the_plain_crc32_of_the_pseudo_packet() {
        // Every transport length from 0 to 600 bytes (all residues mod 16 for the fold,
        // short packets for the fallback), random bytes, on whichever path this CPU
        // takes and on the portable one.
        for len in 0..600usize {
            let b = bytes(len as u64 * 7919 + 1, 28 + len);
            let ip: [u8; 20] = b[..20].try_into().unwrap();
            let udp: [u8; 8] = b[20..28].try_into().unwrap();
            let t = &b[28..];
            let want = reference_icrc(&ip, &udp, t);
            assert_eq!(compute(&ip, &udp, t), want, "transport of {len} bytes");
            if len >= 12 {
                let mut h = [0u8; MASKED_LEN];
                masked_block(&mut h, &ip, &udp, &t[..12]);
                assert_eq!(portable_crc32(&h, &t[12..]), want, "portable, {len} bytes");
            }
        }
        // A full-size frame's transport part.
        let b = bytes(99, 28 + 4096 + 32);
        let (ip, udp) = (b[..20].try_into().unwrap(), b[20..28].try_into().unwrap());
        assert_eq!(
            compute(&ip, &udp, &b[28..]),
            reference_icrc(&ip, &udp, &b[28..])
        );
    }

    /// CRC-32 (IEEE 802.3: reflected polynomial 0xEDB88320, initial value and final
    /// XOR all ones) one bit at a time: the definition, independent of any table or
    /// fold.
    fn bitwise_crc32(bytes: &[u8]) -> u32 {
        let mut r = !0u32;
        for &b in bytes {
            r ^= u32::from(b);
            for _ in 0..8 {
                r = if r & 1 != 0 {
                    (r >> 1) ^ 0xedb8_8320
                } else {
                    r >> 1
                };
            }
        }
        !r
    }

    #[test]
    fn the_icrc_is_the_bitwise_crc32_of_the_masked_input_at_every_alignment() {
        // The ICRC input of reference §2.4 built byte by byte (8 x 0xFF, the masked
        // IPv4, UDP and BTH headers, the rest) and hashed bit by bit, against
        // `compute` on transport parts at each of the 16 alignments of a buffer:
        // every length 0-80, then random lengths up to 4,200 bytes (more than a
        // 4,096-byte payload with its headers), multiples of four and not.
        assert_eq!(bitwise_crc32(b"123456789"), 0xcbf4_3926, "the check value");
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let buf = bytes(77, 4200 + 16 + 28);
        for align in 0..16usize {
            let mut lens: Vec<usize> = (0..=80).collect();
            lens.extend((0..48).map(|_| (next() % 4201) as usize));
            lens.extend((0..16).map(|_| (next() % 1051) as usize * 4));
            lens.push(4200);
            for len in lens {
                let h = next().to_le_bytes();
                let mut ip: [u8; 20] = buf[..20].try_into().unwrap();
                let mut udp: [u8; 8] = buf[20..28].try_into().unwrap();
                ip[..8].copy_from_slice(&h);
                udp[..4].copy_from_slice(&h[4..]);
                let t = &buf[28 + align..28 + align + len];
                let mut pseudo = vec![0xffu8; 8];
                let mut mip = ip;
                for at in ipv4::ICRC_MASKED_BYTES {
                    mip[at] = 0xff;
                }
                pseudo.extend_from_slice(&mip);
                let mut mudp = udp;
                for at in udp::ICRC_MASKED_BYTES {
                    mudp[at] = 0xff;
                }
                pseudo.extend_from_slice(&mudp);
                let at = pseudo.len();
                pseudo.extend_from_slice(t);
                if len >= bth::HEADER_LEN {
                    pseudo[at + bth::ICRC_MASKED_BYTE] = 0xff;
                }
                assert_eq!(
                    compute(&ip, &udp, t),
                    bitwise_crc32(&pseudo),
                    "transport of {len} bytes at alignment {align}"
                );
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_masked_words_are_the_masked_block() {
        for seed in 0..500u64 {
            let b = bytes(seed * 31 + 7, 40);
            let ip: [u8; 20] = b[..20].try_into().unwrap();
            let udp: [u8; 8] = b[20..28].try_into().unwrap();
            let bth: [u8; 12] = b[28..40].try_into().unwrap();
            let mut h = [0u8; MASKED_LEN];
            masked_block(&mut h, &ip, &udp, &bth);
            h[..4].fill(0);
            let words = clmul::masked_words(&ip, &udp, &bth);
            let got: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            assert_eq!(got, h, "seed {seed}");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_fold_is_used_where_the_cpu_has_pclmulqdq() {
        // Which path runs is the CPU's business; the fold's answer is the CRC-32's.
        let b = bytes(5, 200);
        let h: [u8; MASKED_LEN] = b[..MASKED_LEN].try_into().unwrap();
        if clmul::available() {
            for n in 0..150 {
                let rest = &b[MASKED_LEN..MASKED_LEN + n];
                assert_eq!(clmul::crc32(&h, rest), portable_crc32(&h, rest), "{n}");
            }
            // The kernel's entry for lengths that are multiples of four, given any
            // length (its other residues go to the stack block), and `icrc_any`.
            let ip: [u8; 20] = b[..20].try_into().unwrap();
            let udp: [u8; 8] = b[20..28].try_into().unwrap();
            let bth: [u8; 12] = b[28..40].try_into().unwrap();
            let mut h = [0u8; MASKED_LEN];
            masked_block(&mut h, &ip, &udp, &bth);
            for n in 0..150 {
                let rest = &b[40..40 + n];
                let want = portable_crc32(&h, rest);
                assert_eq!(clmul::icrc(&ip, &udp, &bth, rest), want, "{n}");
                assert_eq!(clmul::icrc_any(&ip, &udp, &bth, rest), want, "{n}");
            }
        }
        assert_eq!(
            clmul::available(),
            std::arch::is_x86_feature_detected!("pclmulqdq")
        );
    }
}

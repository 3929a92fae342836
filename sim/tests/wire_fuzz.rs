//! Robustness of the RoCEv2 parsers on untrusted bytes: over a million random and
//! mutated frames must never panic, and whatever parses must re-emit to the same bytes.
//! Plus property tests of emit/parse round trips for every opcode.
//!
//! The big loop uses a seeded xorshift generator (cheap in debug builds); a failure
//! prints the seed, the iteration and the frame.

use std::net::Ipv4Addr;
use std::panic::{catch_unwind, AssertUnwindSafe};

use ferroverbs_sim::wire::aeth::{self, NakCode, Syndrome};
use ferroverbs_sim::wire::ethernet::{self, Address, EtherType};
use ferroverbs_sim::wire::ipv4::{self, Ecn};
use ferroverbs_sim::wire::{
    atomic_ack_eth, atomic_eth, bth, deth, frame, ieth, immdt, reth, udp, Error, Frame, FrameRepr,
    Header, Opcode, Psn, RocePacket, RoceRepr,
};
use proptest::prelude::*;

/// xorshift64*: deterministic and cheap.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// A frame representation for `opcode` with every field drawn from `v`.
fn make_repr(opcode: Opcode, v: &[u64; 10]) -> FrameRepr {
    let mut b = bth::Repr::new(
        opcode,
        (v[0] & 0xff_ffff) as u32,
        Psn::new((v[0] >> 24) as u32),
    );
    b.pkey = (v[0] >> 48) as u16;
    b.solicited = v[1] & 1 != 0;
    b.mig_req = v[1] & 2 != 0;
    b.fecn = v[1] & 4 != 0;
    b.becn = v[1] & 8 != 0;
    b.ack_req = v[1] & 16 != 0;
    let mut roce = RoceRepr::new(b);
    let h = opcode.headers();
    use ferroverbs_sim::wire::opcode::HeaderSet as H;
    if h.contains(H::DETH) {
        roce.deth = Some(deth::Repr {
            qkey: v[2] as u32,
            src_qp: (v[2] >> 32) as u32 & 0xff_ffff,
        });
    }
    if h.contains(H::RETH) {
        roce.reth = Some(reth::Repr {
            virtual_address: v[3],
            rkey: v[4] as u32,
            dma_length: (v[4] >> 32) as u32,
        });
    }
    if h.contains(H::ATOMIC_ETH) {
        roce.atomic_eth = Some(atomic_eth::Repr {
            virtual_address: v[3],
            rkey: v[4] as u32,
            swap_add: v[5],
            compare: v[6],
        });
    }
    if h.contains(H::AETH) {
        let code = (v[7] & 0x1f) as u8;
        let syndrome = match (v[7] >> 8) % 3 {
            0 => Syndrome::Ack { credits: code },
            1 => Syndrome::RnrNak { timer: code },
            _ => Syndrome::Nak(NakCode::from_u8(code % 5).unwrap()),
        };
        roce.aeth = Some(aeth::Repr {
            syndrome,
            msn: (v[7] >> 32) as u32 & 0xff_ffff,
        });
    }
    if h.contains(H::ATOMIC_ACK_ETH) {
        roce.atomic_ack_eth = Some(atomic_ack_eth::Repr { original: v[5] });
    }
    if h.contains(H::IMM_DT) {
        roce.immdt = Some(immdt::Repr {
            immediate: v[8] as u32,
        });
    }
    if h.contains(H::IETH) {
        roce.ieth = Some(ieth::Repr {
            rkey: (v[8] >> 32) as u32,
        });
    }
    let mut ip = ipv4::Repr::rocev2(
        Ipv4Addr::from((v[9] as u32) | 1),
        Ipv4Addr::from((v[9] >> 32) as u32 | 2),
    );
    ip.dscp = (v[1] >> 8) as u8 & 0x3f;
    ip.ecn = Ecn::from_bits((v[1] >> 16) as u8);
    ip.ttl = (v[1] >> 24) as u8;
    ip.ident = (v[1] >> 32) as u16;
    ip.dont_frag = v[1] & 32 != 0;
    FrameRepr {
        ethernet: ethernet::Repr {
            src_addr: Address([2, 0, 0, 0, 0, (v[2] >> 56) as u8]),
            dst_addr: Address([2, 0, 0, 0, 1, (v[2] >> 48) as u8]),
            ethertype: EtherType::IPV4,
        },
        ipv4: ip,
        udp: udp::Repr::rocev2(udp::rocev2_source_port(0, v[0] as u32, v[2] as u32)),
        roce,
    }
}

/// Parses `bytes` every way the simulator can, and checks that whatever parses
/// re-emits to the same frame.
fn exercise(bytes: &[u8], scratch: &mut [u8]) -> bool {
    let parsed = frame::parse(bytes);
    if let Ok((repr, payload)) = &parsed {
        let len = repr
            .emit(payload, scratch)
            .expect("a parsed frame re-emits");
        let f = Frame::new_checked(bytes).unwrap();
        // Reserved bits (BTH resv6/resv7, DETH reserved, AETH bit 7) are dropped by the
        // representation, so compare through a second parse.
        let again = frame::parse(&scratch[..len]).expect("a re-emitted frame parses");
        assert_eq!(again.0, *repr);
        assert_eq!(again.1, *payload);
        assert_eq!(len, f.frame_len());
    }
    // The transport packet alone, against arbitrary outer headers.
    if bytes.len() > frame::BTH_OFFSET {
        let transport = &bytes[frame::BTH_OFFSET..];
        if let Ok(p) = RocePacket::new_checked(transport) {
            let _ = RoceRepr::parse_without_icrc(&p);
            let ip = ipv4::Repr::rocev2(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
            let _ = RoceRepr::parse(&p, &ip, &udp::Repr::rocev2(0xc000));
            let _ = (p.payload(), p.pad(), p.icrc(), p.reth(), p.aeth(), p.deth());
        }
        let _ = bth::Repr::parse(&bth::Packet::new_unchecked(
            &transport[..transport.len().min(12)],
        ))
        .err();
    }
    // Each header view on its own, at every offset it could be found.
    for at in [0usize, 14, 34, 42, 54, 58, 62] {
        let b = bytes.get(at..).unwrap_or(&[]);
        let _ = ethernet::Packet::new_checked(b).and_then(|p| ethernet::Repr::parse(&p));
        let _ = ipv4::Packet::new_checked(b).and_then(|p| ipv4::Repr::parse(&p));
        let _ = udp::Packet::new_checked(b)
            .and_then(|p| udp::Repr::parse(&p, Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST));
        let _ = bth::Packet::new_checked(b).and_then(|p| bth::Repr::parse(&p));
        let _ = reth::Packet::new_checked(b).and_then(|p| reth::Repr::parse(&p));
        let _ = aeth::Packet::new_checked(b).and_then(|p| aeth::Repr::parse(&p));
        let _ = deth::Packet::new_checked(b).and_then(|p| deth::Repr::parse(&p));
        let _ = atomic_eth::Packet::new_checked(b).and_then(|p| atomic_eth::Repr::parse(&p));
        let _ =
            atomic_ack_eth::Packet::new_checked(b).and_then(|p| atomic_ack_eth::Repr::parse(&p));
        let _ = immdt::Packet::new_checked(b).and_then(|p| immdt::Repr::parse(&p));
        let _ = ieth::Packet::new_checked(b).and_then(|p| ieth::Repr::parse(&p));
    }
    parsed.is_ok()
}

/// Applies one random mutation to a frame of `len` bytes in `buf`; returns the new length.
fn mutate(rng: &mut Rng, buf: &mut [u8], len: usize) -> usize {
    match rng.below(10) {
        // Flip a bit, set a byte, or overwrite a field that steers parsing.
        0..=2 => {
            let at = rng.below(len.max(1) as u64) as usize;
            buf[at] ^= 1 << rng.below(8);
            len
        }
        3 => {
            let at = rng.below(len.max(1) as u64) as usize;
            buf[at] = rng.next() as u8;
            len
        }
        4 => {
            // Opcode, flags (pad count / tver), or one of the length fields.
            let at = [42, 43, 16, 17, 38, 39, 14, 23, 12, 13, 54][rng.below(11) as usize];
            if at < len {
                buf[at] = rng.next() as u8;
            }
            len
        }
        // Truncate.
        5 | 6 => rng.below(len as u64 + 1) as usize,
        // Extend with random bytes.
        7 => {
            let extra = rng.below(16) as usize;
            let end = (len + extra).min(buf.len());
            rng.fill(&mut buf[len..end]);
            end
        }
        // Swap in a random opcode byte.
        8 => {
            if len > 42 {
                buf[42] = rng.next() as u8;
            }
            len
        }
        // Random bytes over a random stretch of the transport headers.
        _ => {
            let start = 42 + rng.below(24) as usize;
            let end = (start + 1 + rng.below(8) as usize).min(len);
            if start < end {
                rng.fill(&mut buf[start..end]);
            }
            len
        }
    }
}

/// Makes IPv4 checksum and ICRC right again when the structure allows it, so that the
/// mutation reaches the transport checks behind them.
fn refresh_checksums(buf: &mut [u8]) {
    if Frame::new_checked(&*buf).is_ok() {
        Frame::new_unchecked(buf).fill_checksums();
    }
}

#[test]
fn a_million_random_and_mutated_frames_never_panic() {
    const ITERATIONS: u64 = 1_000_000;
    let seed = std::env::var("WIRE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_f00d_cafe_0001u64);
    let mut rng = Rng(seed);
    let mut buf = vec![0u8; 2048];
    let mut scratch = vec![0u8; 2048];
    let mut parsed = 0u64;
    let mut mutated_parsed = 0u64;
    for i in 0..ITERATIONS {
        let kind = rng.below(16);
        let len = if kind < 2 {
            // Pure noise, sometimes with a plausible Ethernet/IPv4/UDP prefix.
            let len = rng.below(120) as usize;
            rng.fill(&mut buf[..len]);
            if kind == 1 && len > 42 {
                buf[12..14].copy_from_slice(&[0x08, 0x00]);
                buf[14] = 0x45;
                buf[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
                buf[20] &= 0xbf;
                buf[21] = 0;
                buf[23] = 17;
                buf[36..38].copy_from_slice(&4791u16.to_be_bytes());
                buf[38..40].copy_from_slice(&((len - 34) as u16).to_be_bytes());
                buf[40..42].fill(0);
                refresh_checksums(&mut buf[..len]);
            }
            len
        } else {
            // A valid frame of a random opcode and payload, mutated unless kind == 2.
            let op = Opcode::ALL[rng.below(Opcode::ALL.len() as u64) as usize];
            let mut v = [0u64; 10];
            v.iter_mut().for_each(|x| *x = rng.next());
            let repr = make_repr(op, &v);
            let payload_len = if op.payload().any() {
                match rng.below(8) {
                    0 => rng.below(1100) as usize,
                    _ => rng.below(40) as usize,
                }
            } else {
                0
            };
            let mut len = repr
                .emit_with(payload_len, &mut buf, |dst| rng.fill(dst))
                .unwrap();
            if kind == 2 {
                let ok = exercise(&buf[..len], &mut scratch);
                assert!(
                    ok,
                    "seed {seed:#x} iteration {i}: valid {op} frame rejected"
                );
                parsed += 1;
                continue;
            }
            for _ in 0..1 + rng.below(3) {
                len = mutate(&mut rng, &mut buf, len);
            }
            if rng.below(2) == 0 {
                refresh_checksums(&mut buf[..len]);
            }
            len
        };
        let input = &buf[..len];
        let outcome = catch_unwind(AssertUnwindSafe(|| exercise(input, &mut scratch)));
        match outcome {
            Ok(true) => mutated_parsed += 1,
            Ok(false) => {}
            Err(_) => panic!(
                "seed {seed:#x} iteration {i}: parser panicked on {len} bytes: {}",
                input.iter().map(|b| format!("{b:02x}")).collect::<String>()
            ),
        }
    }
    // The generator must reach deep into the parsers, not only fail at the first check.
    assert!(parsed > ITERATIONS / 32, "valid frames: {parsed}");
    assert!(
        mutated_parsed > ITERATIONS / 100,
        "mutated frames parsed: {mutated_parsed}"
    );
}

fn opcode_strategy() -> impl Strategy<Value = Opcode> {
    (0..Opcode::ALL.len()).prop_map(|i| Opcode::ALL[i])
}

proptest! {
    #[test]
    fn frames_round_trip(
        op in opcode_strategy(),
        v in proptest::array::uniform10(any::<u64>()),
        payload in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let repr = make_repr(op, &v);
        let payload = if op.payload().any() { &payload[..] } else { &[][..] };
        let mut buf = vec![0u8; repr.buffer_len(payload.len())];
        let len = repr.emit(payload, &mut buf).unwrap();
        prop_assert_eq!(len, buf.len());
        prop_assert_eq!((len - frame::ENCAP_LEN) % 4, 0, "headers, payload and pad are 4-byte multiples");
        let (parsed, parsed_payload) = frame::parse(&buf).unwrap();
        prop_assert_eq!(parsed, repr);
        prop_assert_eq!(parsed_payload, payload);
        let f = Frame::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(usize::from(f.roce().bth().pad_count()), (4 - payload.len() % 4) % 4);
        prop_assert_eq!(f.roce().as_bytes().len() % 4, 0);
        prop_assert_eq!(f.roce().header_len(), 12 + op.headers_len());
        // The transport packet alone is the same bytes and parses the same.
        let mut t = vec![0u8; repr.roce.buffer_len(payload.len())];
        repr.roce.emit(&repr.ipv4, &repr.udp, payload, &mut t).unwrap();
        prop_assert_eq!(&t[..], &buf[frame::BTH_OFFSET..]);
        let p = RocePacket::new_checked(&t[..]).unwrap();
        prop_assert_eq!(RoceRepr::parse(&p, &repr.ipv4, &repr.udp), Ok(repr.roce));
    }

    #[test]
    fn a_short_buffer_is_an_error_not_a_panic(
        op in opcode_strategy(),
        v in proptest::array::uniform10(any::<u64>()),
        payload_len in 0usize..64,
        cut in 1usize..200,
    ) {
        let repr = make_repr(op, &v);
        let payload_len = if op.payload().any() { payload_len } else { 0 };
        let need = repr.buffer_len(payload_len);
        let have = need.saturating_sub(cut);
        let mut buf = vec![0u8; have];
        prop_assert_eq!(
            repr.emit(&vec![0; payload_len], &mut buf),
            Err(Error::BufferTooSmall { need, have })
        );
    }

    #[test]
    fn truncated_transport_packets_name_a_header(
        op in opcode_strategy(),
        v in proptest::array::uniform10(any::<u64>()),
    ) {
        let repr = make_repr(op, &v);
        let mut buf = vec![0u8; repr.buffer_len(0)];
        repr.emit(&[], &mut buf).unwrap();
        let transport = &buf[frame::BTH_OFFSET..];
        for n in 0..transport.len() {
            match RocePacket::new_checked(&transport[..n]) {
                Err(Error::Truncated { header, .. }) => prop_assert!(matches!(
                    header,
                    Header::Bth | Header::Deth | Header::Reth | Header::AtomicEth
                        | Header::Aeth | Header::AtomicAckEth | Header::ImmDt | Header::Ieth
                        | Header::Icrc
                )),
                // Shorter by a multiple of four with no payload: the pad/payload check.
                Err(Error::PadCount { .. }) => {}
                other => prop_assert!(false, "{} bytes of {}: {:?}", n, op, other),
            }
        }
    }
}

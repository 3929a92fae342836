//! Hostile packets: 1,000,000 random and mutated datagrams through the UDP link's
//! receive function (`UdpLink::deliver`, what the socket read calls for each
//! datagram) at a NIC with a connected RC QP, receive WQEs posted and memory
//! registered for every remote access. Nothing may panic; every datagram is accounted
//! for, dropped by the link (too short, too long, bad transport version, unknown opcode)
//! or handed to the device, which drops and counts by reason (bad ICRC, malformed, not
//! RC, no such QP, wrong state, wrong address, wrong P_Key, unexpected response) or
//! executes it (duplicates, NAKs, RNR NAKs for PSNs and resources out of order).
//!
//! Packets: a quarter pure random bytes; the rest well-formed packets of a random
//! opcode (headers of that opcode, random payload length, P_Key mostly the default,
//! destination QP mostly the NIC's, PSN mostly near the expected one, source address
//! mostly the QP's peer, ICRC right over the canonical headers), of which most are then
//! mutated (bits flipped, bytes overwritten, truncated, extended), half of those with
//! the ICRC recomputed so that the mutation reaches the transport. The QP is reset and
//! reconnected every 2,000 packets (errors move it to ERR). Seeded: set
//! `FERROVERBS_FUZZ_SEED` to replay, `FERROVERBS_FUZZ_PACKETS` to change the count.

#[path = "common/net.rs"]
mod net;

use std::net::{Ipv4Addr, SocketAddrV4};

use ferroverbs::verbs::{
    AccessFlags as A, AddressVector, Mtu, QpCap, QpInitAttr, RecvWr, RtrAttr, RtsAttr,
    WorkCompletion,
};
use ferroverbs::{Device, DeviceConfig, GidEntry};
use ferroverbs_sim::link::udp::{canonical_headers, gid_for, mac_for, UdpConfig, UdpLink};
use ferroverbs_sim::wire::{self, opcode::HeaderSet, roce, Opcode, Psn, RoceRepr};
use ferroverbs_sim::Sim;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[test]
fn a_million_hostile_datagrams() {
    let seed: u64 = std::env::var("FERROVERBS_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x00f0_2200);
    let total: u64 = std::env::var("FERROVERBS_FUZZ_PACKETS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    println!("seed {seed} (FERROVERBS_FUZZ_SEED={seed} to replay), {total} packets");
    let mut rng = Rng(seed);

    // This process's own loopback addresses: the ICRCs differ from run to run, the
    // mutations (the seed's) do not.
    let (me, peer) = (net::host(1), net::host(2));
    println!("NIC {me}, peer {peer}");
    let cfg = UdpConfig::new(me);
    let sim = Sim::new(cfg.sim_config(false));
    let link = UdpLink::attach(&sim, cfg).unwrap();
    let gid = GidEntry::ipv4(0, me.octets(), mac_for(me));
    let clock = sim.clock().clone();
    let ctx = Device::open(
        sim.bus(),
        DeviceConfig::default()
            .with_clock(std::sync::Arc::new(ferroverbs::SteppedClock::new(
                {
                    let c = clock.clone();
                    move || c.now()
                },
                move |d| clock.advance(d),
            )))
            .with_gid(gid),
    )
    .unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut cq = ctx.create_cq(4096).unwrap();
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 256,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut qp = pd.create_qp(&QpInitAttr::new(&cq, &cq, cap)).unwrap();
    let all = A::LOCAL_WRITE | A::REMOTE_READ | A::REMOTE_WRITE | A::REMOTE_ATOMIC;
    let mr = pd.alloc_mr(1 << 16, all).unwrap();
    let (va, rkey) = {
        let r = mr.remote(0);
        (r.addr, r.rkey)
    };
    let peer_qpn = 0x99u32;
    let expected = 0x1000u32;
    let connect = |qp: &mut ferroverbs::verbs::QueuePair<'_, _>| {
        qp.reset().unwrap();
        qp.to_init(1, all).unwrap();
        qp.to_rtr(&RtrAttr {
            av: AddressVector::new(gid_for(peer), mac_for(peer), 0),
            path_mtu: Mtu::Mtu1024,
            dest_qpn: peer_qpn,
            rq_psn: expected,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 1,
        })
        .unwrap();
        qp.to_rts(&RtsAttr::new(0x2000)).unwrap();
        let sg = [mr.sge(0, 4096).unwrap()];
        for i in 0..128 {
            qp.post_recv(&[RecvWr::new(i, &sg)]).unwrap();
        }
    };
    let qpn = qp.qp_num();
    let src_ok = SocketAddrV4::new(peer, wire::udp::rocev2_source_port(0, qpn, peer_qpn));
    let mut wc = [WorkCompletion::default(); 256];
    let mut buf = vec![0u8; 8192];
    let mut payload = vec![0u8; 2048];

    for i in 0..total {
        if i % 2_000 == 0 {
            sim.step();
            while cq.poll(&mut wc) > 0 {}
            connect(&mut qp);
        }
        let src = if rng.chance(90) {
            src_ok
        } else {
            SocketAddrV4::new(Ipv4Addr::from(rng.next() as u32), rng.next() as u16)
        };
        let len = if rng.chance(25) {
            // Pure noise (sometimes longer than any frame).
            let n = if rng.chance(1) {
                4200 + rng.below(3000) as usize
            } else {
                rng.below(200) as usize
            };
            for b in &mut buf[..n] {
                *b = rng.next() as u8;
            }
            n
        } else {
            let op = Opcode::ALL[rng.below(Opcode::ALL.len() as u64) as usize];
            let dqp = if rng.chance(85) {
                qpn
            } else {
                rng.next() as u32 & 0xff_ffff
            };
            let psn = if rng.chance(80) {
                expected.wrapping_add(rng.below(64) as u32).wrapping_sub(16)
            } else {
                rng.next() as u32
            } & 0xff_ffff;
            let mut bth = wire::bth::Repr::new(op, dqp, Psn::new(psn));
            if rng.chance(5) {
                bth.pkey = rng.next() as u16;
            }
            bth.ack_req = rng.chance(50);
            let mut r = RoceRepr::new(bth);
            let h = op.headers();
            if h.contains(HeaderSet::DETH) {
                r.deth = Some(wire::deth::Repr {
                    qkey: rng.next() as u32,
                    src_qp: rng.next() as u32 & 0xff_ffff,
                });
            }
            if h.contains(HeaderSet::RETH) {
                let near = rng.chance(70);
                r.reth = Some(wire::reth::Repr {
                    virtual_address: if near {
                        va + rng.below(1 << 16)
                    } else {
                        rng.next()
                    },
                    rkey: if near { rkey } else { rng.next() as u32 },
                    dma_length: rng.below(if near { 1 << 14 } else { u64::MAX }) as u32,
                });
            }
            if h.contains(HeaderSet::ATOMIC_ETH) {
                r.atomic_eth = Some(wire::atomic_eth::Repr {
                    virtual_address: if rng.chance(70) {
                        va + (rng.below(1 << 13) << 3)
                    } else {
                        rng.next()
                    },
                    rkey: if rng.chance(80) {
                        rkey
                    } else {
                        rng.next() as u32
                    },
                    swap_add: rng.next(),
                    compare: rng.next(),
                });
            }
            if h.contains(HeaderSet::AETH) {
                let mut aeth = [0u8; 4];
                for _ in 0..16 {
                    let b = (rng.next() as u32).to_be_bytes();
                    if wire::aeth::Repr::parse(&wire::aeth::Packet::new_unchecked(&b[..])).is_ok() {
                        aeth = b;
                        break;
                    }
                }
                r.aeth =
                    wire::aeth::Repr::parse(&wire::aeth::Packet::new_unchecked(&aeth[..])).ok();
            }
            if h.contains(HeaderSet::ATOMIC_ACK_ETH) {
                r.atomic_ack_eth = Some(wire::atomic_ack_eth::Repr {
                    original: rng.next(),
                });
            }
            if h.contains(HeaderSet::IMM_DT) {
                r.immdt = Some(wire::immdt::Repr {
                    immediate: rng.next() as u32,
                });
            }
            if h.contains(HeaderSet::IETH) {
                r.ieth = Some(wire::ieth::Repr {
                    rkey: rng.next() as u32,
                });
            }
            let n = if op.payload().any() {
                [0, 1, 3, 64, 1023, 1024, 1025, 2000][rng.below(8) as usize]
            } else {
                0
            };
            for b in &mut payload[..n] {
                *b = rng.next() as u8;
            }
            let dst = *link.local_addr().ip();
            let ip = wire::ipv4::Repr::rocev2(*src.ip(), dst);
            let udp = wire::udp::Repr::rocev2(src.port());
            let mut len = r
                .emit(&ip, &udp, &payload[..n], &mut buf)
                .expect("emit a generated packet");
            if rng.chance(70) {
                // Mutate.
                match rng.below(4) {
                    0 => {
                        for _ in 0..=rng.below(3) {
                            let at = rng.below(len as u64) as usize;
                            buf[at] ^= 1 << rng.below(8);
                        }
                    }
                    1 => {
                        let at = rng.below(len.min(48) as u64) as usize;
                        buf[at] = rng.next() as u8;
                    }
                    2 => len = rng.below(len as u64) as usize,
                    _ => {
                        let extra = 1 + rng.below(16) as usize;
                        for b in &mut buf[len..len + extra] {
                            *b = rng.next() as u8;
                        }
                        len += extra;
                    }
                }
                if rng.chance(50) && len >= roce::MIN_LEN {
                    if let Some((iph, udph)) = canonical_headers(src, dst, len) {
                        roce::Packet::new_unchecked(&mut buf[..len]).fill_icrc(&iph, &udph);
                    }
                }
            }
            len
        };
        link.deliver(src, &buf[..len]);
        if i % 256 == 255 {
            sim.step();
            while cq.poll(&mut wc) > 0 {}
        }
    }
    sim.step();
    while cq.poll(&mut wc) > 0 {}

    let l = link.stats();
    let d = sim.stats().data_path;
    println!("link: {l:#?}");
    println!("device: {d:#?}");
    assert_eq!(l.rx_datagrams, total);
    assert_eq!(
        l.rx_too_short
            + l.rx_too_long
            + l.rx_bad_version
            + l.rx_unknown_opcode
            + l.rx_queue_full
            + l.rx_delivered,
        total,
        "every datagram accounted for by the link"
    );
    assert_eq!(d.rx_frames, l.rx_delivered, "every delivered frame seen");
    if total >= 100_000 {
        for (name, n) in [
            ("too short", l.rx_too_short),
            ("too long", l.rx_too_long),
            ("bad version", l.rx_bad_version),
            ("unknown opcode", l.rx_unknown_opcode),
            ("bad ICRC", d.rx_bad_icrc),
            ("malformed", d.rx_malformed),
            ("not RC", d.rx_unsupported),
            ("no such QP", d.rx_no_qp),
            ("wrong address", d.rx_bad_addr),
            ("wrong P_Key", d.rx_bad_pkey),
            ("duplicates", d.rx_duplicates),
            ("NAKs sent", d.naks),
        ] {
            assert!(n > 0, "no packet exercised {name}");
        }
    }
}

//! pcap capture of an in-process run, checked frame by frame: every frame's structure
//! and ICRC by the simulator's own codecs, and every frame decoded as RoCE/InfiniBand
//! by tshark with no malformed packet and no error (reference `rocev2-wire.md` §7).
//!
//! The run (two NICs, deterministic mode, path MTU 1024) holds every RC opcode the
//! simulator's data path implements: SEND FIRST/MIDDLE/LAST/ONLY and the immediate
//! variants, RDMA WRITE FIRST/MIDDLE/LAST/ONLY and the immediate variants, RDMA READ
//! request and responses FIRST/MIDDLE/LAST/ONLY, COMPARE_SWAP, FETCH_ADD, ATOMIC
//! ACKNOWLEDGE, and ACKNOWLEDGE as ACK, RNR NAK (a SEND before its receive WQE, then
//! retransmitted after the RNR timer), NAK PSN sequence error (a middle packet taken
//! off the receive queue: the requester goes back N and retransmits) and NAK remote
//! access error (a WRITE with a wrong rkey). UD traffic between two UD QPs: UD
//! SEND_ONLY and SEND_ONLY_WITH_IMMEDIATE (BTH, DETH, ImmDt), whose DETH tshark must
//! decode with the Q_Key and the source QP the run used. The opcodes the data path
//! does not implement (SEND with invalidate, UC) are injected into the fabric as
//! hand-built frames (built with the simulator's codecs from a captured frame) to a QP
//! that does not exist, so that tshark sees every opcode of the table too.
//!
//! tshark is optional on a developer machine: without it the test checks the capture
//! itself and prints a note; with `FERROVERBS_REQUIRE_TSHARK=1` (set by `.ci/run`) a
//! missing tshark fails the test.

mod verbs_support;
use verbs_support::*;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use ferroverbs::verbs::{
    AccessFlags as A, AddressVector, Mtu, QpCap, QpInitAttr, RecvWr, RemoteAddr, SendWr,
    UdInitAttr, WcFlags, WcStatus,
};
use ferroverbs_sim::link::{pcap, PcapWriter};
use ferroverbs_sim::wire::{self, frame, Opcode};

const MTU: usize = 1024;

/// The Q_Key of the run's UD QPs.
const UD_QKEY: u32 = 0x0bad_cafe;

/// What [`run`] reports besides the capture.
struct RunInfo {
    /// Frames injected by hand.
    injected: usize,
    /// The sending UD QP.
    ud_src_qp: u32,
    /// UD messages sent.
    ud_sent: usize,
}

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    }
}

/// Runs the traffic described in the module comment on a fabric capturing to `path`.
fn run(path: &std::path::Path) -> RunInfo {
    let net = Net::new(false);
    let writer = PcapWriter::create(path).unwrap();
    net.fabric.set_pcap(Some(writer.clone()));
    let (ca, ga) = open_nic(&net.a, 1);
    let (cb, gb) = open_nic(&net.b, 2);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut cqa = ca.create_cq(256).unwrap();
    let mut cqb = cb.create_cq(256).unwrap();
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    let all = A::LOCAL_WRITE | A::REMOTE_READ | A::REMOTE_WRITE | A::REMOTE_ATOMIC;
    let la = pa.alloc_mr(1 << 16, all).unwrap();
    let lb = pb.alloc_mr(1 << 16, all).unwrap();
    let big = 3 * MTU - 100;
    let data = pattern(big, 7);
    la.write(0, &data);
    let ok = |c: &[ferroverbs::verbs::WorkCompletion]| {
        assert!(c.iter().all(|c| c.status == WcStatus::Success), "{c:?}")
    };

    // SENDs: FIRST/MIDDLE/LAST, ONLY, LAST_WITH_IMM, ONLY_WITH_IMM.
    for (id, n, imm) in [
        (1, big, None),
        (2, 10, None),
        (3, big, Some(7)),
        (4, 10, Some(8)),
    ] {
        qb.post_recv(&[RecvWr::new(id, &[lb.sge(0, 1 << 16).unwrap()])])
            .unwrap();
        let sg = [la.sge(0, n as u32).unwrap()];
        let wr = match imm {
            None => SendWr::send(id, &sg),
            Some(i) => SendWr::send_with_imm(id, &sg, i),
        };
        qa.post_send(&[wr.signaled()]).unwrap();
        ok(&wait(&net, &mut cqa, 1));
        ok(&wait(&net, &mut cqb, 1));
        let mut got = vec![0; n];
        lb.read(0, &mut got);
        assert_eq!(got, data[..n]);
    }
    // WRITEs: FIRST/MIDDLE/LAST, ONLY, LAST_WITH_IMM, ONLY_WITH_IMM.
    for (id, n, imm) in [
        (5, big, None),
        (6, 10, None),
        (7, big, Some(9)),
        (8, 10, Some(10)),
    ] {
        let sg = [la.sge(0, n as u32).unwrap()];
        let remote = lb.remote(4096);
        let wr = match imm {
            None => SendWr::rdma_write(id, &sg, remote),
            Some(i) => {
                qb.post_recv(&[RecvWr::new(id, &[])]).unwrap();
                SendWr::rdma_write_with_imm(id, &sg, remote, i)
            }
        };
        qa.post_send(&[wr.signaled()]).unwrap();
        ok(&wait(&net, &mut cqa, 1));
        if imm.is_some() {
            ok(&wait(&net, &mut cqb, 1));
        }
        let mut got = vec![0; n];
        lb.read(4096, &mut got);
        assert_eq!(got, data[..n]);
    }
    // READs: request, responses FIRST/MIDDLE/LAST and ONLY.
    for (id, n) in [(9, big), (10, 10)] {
        let sg = [la.sge(8192, n as u32).unwrap()];
        qa.post_send(&[SendWr::rdma_read(id, &sg, lb.remote(4096)).signaled()])
            .unwrap();
        ok(&wait(&net, &mut cqa, 1));
        let mut got = vec![0; n];
        la.read(8192, &mut got);
        assert_eq!(got, data[..n]);
    }
    // Atomics and their ATOMIC_ACKNOWLEDGE.
    let res = [la.sge(16384, 8).unwrap()];
    qa.post_send(&[SendWr::atomic_fetch_add(11, &res, lb.remote(16384), 5).signaled()])
        .unwrap();
    ok(&wait(&net, &mut cqa, 1));
    qa.post_send(&[SendWr::atomic_cmp_swp(12, &res, lb.remote(16384), 5, 6).signaled()])
        .unwrap();
    ok(&wait(&net, &mut cqa, 1));

    // UD: SEND_ONLY (with and without immediate, empty to a full MTU) between two UD
    // QPs, each checked at the receiver after its 40-byte GRH.
    let mut ua = pa.create_qp(&QpInitAttr::ud(&cqa, &cqa, cap())).unwrap();
    let mut ub = pb.create_qp(&QpInitAttr::ud(&cqb, &cqb, cap())).unwrap();
    for q in [&mut ua, &mut ub] {
        q.to_init_ud(&UdInitAttr::new(1, UD_QKEY)).unwrap();
        q.to_rtr_ud().unwrap();
        q.to_rts_ud(0x77).unwrap();
    }
    let ah = pa
        .create_ah(1, &AddressVector::new(gb.gid, gb.mac, 0))
        .unwrap();
    let ud_msgs = [
        (0usize, None),
        (10, Some(0x1234)),
        (MTU, None),
        (333, Some(5)),
    ];
    for (k, &(n, imm)) in ud_msgs.iter().enumerate() {
        let id = 100 + k as u64;
        ub.post_recv(&[RecvWr::new(
            id,
            &[lb.sge(32768, (40 + MTU) as u32).unwrap()],
        )])
        .unwrap();
        let sg = if n == 0 {
            vec![]
        } else {
            vec![la.sge(0, n as u32).unwrap()]
        };
        let wr = match imm {
            None => SendWr::send(id, &sg),
            Some(i) => SendWr::send_with_imm(id, &sg, i),
        };
        ua.post_send(&[wr.ud(&ah, ub.qp_num(), UD_QKEY).signaled()])
            .unwrap();
        ok(&wait(&net, &mut cqa, 1));
        let r = wait(&net, &mut cqb, 1);
        ok(&r);
        assert_eq!((r[0].src_qp, r[0].byte_len as usize), (ua.qp_num(), 40 + n));
        assert!(r[0].wc_flags.contains(WcFlags::GRH));
        let mut got = vec![0; n];
        lb.read(32768 + 40, &mut got);
        assert_eq!(got, data[..n]);
    }
    let ud_src_qp = ua.qp_num();

    // RNR NAK: a SEND before its receive WQE; retransmitted after the RNR timer.
    let sg = [la.sge(0, 10).unwrap()];
    qa.post_send(&[SendWr::send(13, &sg).signaled()]).unwrap();
    net.settle();
    assert!(net.b.stats().data_path.rnr_naks >= 1);
    qb.post_recv(&[RecvWr::new(13, &[lb.sge(0, 1 << 16).unwrap()])])
        .unwrap();
    net.fabric.run_timers(Duration::from_secs(10));
    ok(&wait(&net, &mut cqa, 1));
    ok(&wait(&net, &mut cqb, 1));

    // NAK PSN sequence error: the FIRST packet of a 3-packet SEND is lost on the way;
    // the MIDDLE is ahead of the expected PSN, the requester goes back N.
    qb.post_recv(&[RecvWr::new(14, &[lb.sge(0, 1 << 16).unwrap()])])
        .unwrap();
    let sg = [la.sge(0, big as u32).unwrap()];
    qa.post_send(&[SendWr::send(14, &sg).signaled()]).unwrap();
    let lost = net.b.rx_queue().pop().expect("the SEND's first packet");
    drop(lost);
    net.settle();
    ok(&wait(&net, &mut cqa, 1));
    ok(&wait(&net, &mut cqb, 1));
    let (sa, sb) = (net.a.stats().data_path, net.b.stats().data_path);
    assert!(sb.naks >= 1 && sa.retransmits >= 3, "{sa:?} {sb:?}");

    // NAK remote access error: a WRITE with a wrong rkey (ends the QPs' life).
    let bad = RemoteAddr {
        rkey: lb.rkey() ^ 0x0012_3400,
        ..lb.remote(0)
    };
    qa.post_send(&[SendWr::rdma_write(15, &sg, bad).signaled()])
        .unwrap();
    let c = wait(&net, &mut cqa, 1);
    assert_eq!(c[0].status, WcStatus::RemAccessErr, "{c:?}");

    // The opcodes the data path does not implement, built from a captured frame and
    // injected towards a QP that does not exist.
    let captured = net.fabric.take_captured();
    drop(captured);
    writer.flush().unwrap();
    let recs = pcap::read(path).unwrap();
    let template = recs
        .iter()
        .find_map(|r| {
            let (repr, _) = frame::parse(&r.data).ok()?;
            (repr.roce.opcode() == Opcode::RcSendOnly).then_some(repr)
        })
        .expect("a SEND_ONLY frame");
    let mut injected = 0;
    for &op in Opcode::ALL {
        let implemented = (op.transport() == wire::Transport::Rc && !op.has_invalidate())
            || op.transport() == wire::Transport::Ud;
        if implemented {
            continue;
        }
        let mut r = template;
        r.roce = wire::RoceRepr::new(wire::bth::Repr::new(op, 0xab_cdef, wire::Psn::new(5)));
        if op.headers().contains(wire::opcode::HeaderSet::DETH) {
            r.roce.deth = Some(wire::deth::Repr {
                qkey: 0x1111_1111,
                src_qp: qa.qp_num(),
            });
        }
        if op.headers().contains(wire::opcode::HeaderSet::RETH) {
            r.roce.reth = Some(wire::reth::Repr {
                virtual_address: 0x1000,
                rkey: 0x1234,
                dma_length: 4096,
            });
        }
        if op.has_immediate() {
            r.roce.immdt = Some(wire::immdt::Repr { immediate: 0xfeed });
        }
        if op.has_invalidate() {
            r.roce.ieth = Some(wire::ieth::Repr { rkey: 0x4321 });
        }
        let n = match op.payload() {
            wire::opcode::PayloadRule::Pmtu => MTU,
            _ => 24,
        };
        let mut buf = vec![0u8; r.buffer_len(n)];
        let len = r.emit(&data[..n], &mut buf).unwrap();
        net.fabric.inject(&buf[..len]);
        injected += 1;
    }
    net.settle();
    let sb = net.b.stats().data_path;
    assert_eq!(sb.rx_bad_icrc + sb.rx_malformed, 0, "{sb:?}");
    writer.flush().unwrap();
    RunInfo {
        injected,
        ud_src_qp,
        ud_sent: ud_msgs.len(),
    }
}

fn tshark() -> Option<String> {
    match Command::new("tshark").arg("--version").output() {
        Ok(o) if o.status.success() => Some(
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string(),
        ),
        _ => None,
    }
}

/// The tshark command line of the reference §7.1: the RoCEv2 port and no RPC-over-RDMA
/// heuristic on SEND payloads; and no Mellanox EoIB heuristic on UD payloads (tshark
/// 4.0.17's reads past the end of an empty UD SEND_ONLY payload and reports
/// "[Malformed Packet: Mellanox EoIB]" on a valid frame).
fn tshark_args(path: &std::path::Path) -> Vec<String> {
    vec![
        "-n".into(),
        "-r".into(),
        path.display().to_string(),
        "-o".into(),
        "infiniband.rroce.port:4791".into(),
        "--disable-heuristic".into(),
        "rpcrdma_infiniband".into(),
        "--disable-heuristic".into(),
        "mellanox_eoib".into(),
    ]
}

#[test]
fn every_frame_has_a_good_icrc_and_decodes_in_tshark() {
    let path = std::env::temp_dir().join(format!("ferroverbs-tshark-{}.pcap", std::process::id()));
    let info = run(&path);
    let injected = info.injected;
    let recs = pcap::read(&path).unwrap();

    // Our own checks: every frame well-formed, its ICRC right; the opcode set.
    let mut ops = BTreeSet::new();
    let mut syndromes = BTreeSet::new();
    let mut ud_frames = 0;
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r.orig_len as usize, r.data.len());
        let f = frame::Frame::new_checked(&r.data[..]).unwrap_or_else(|e| panic!("frame {i}: {e}"));
        f.verify().unwrap_or_else(|e| panic!("frame {i}: {e}"));
        assert_eq!(f.roce().icrc(), f.expected_icrc(), "frame {i}");
        let op = f.roce().opcode().unwrap();
        ops.insert(op.value());
        if let Some(a) = f.roce().aeth() {
            syndromes.insert(a.syndrome_raw() >> 5);
        }
        if op.transport() == wire::Transport::Ud {
            let roce = f.roce();
            let d = roce
                .deth()
                .unwrap_or_else(|| panic!("frame {i}: UD without DETH"));
            assert_eq!(
                (d.qkey(), d.src_qp()),
                (UD_QKEY, info.ud_src_qp),
                "frame {i}"
            );
            ud_frames += 1;
        }
    }
    assert_eq!(ud_frames, info.ud_sent, "one frame per UD message");
    let all: BTreeSet<u8> = Opcode::ALL.iter().map(|o| o.value()).collect();
    assert_eq!(ops, all, "every opcode of the table is in the capture");
    // AETH syndrome classes: 0 ACK, 1 RNR NAK, 3 NAK.
    assert_eq!(syndromes, BTreeSet::from([0, 1, 3]), "ACK, RNR NAK and NAK");
    println!(
        "capture: {} frames ({injected} injected), {} opcodes",
        recs.len(),
        ops.len()
    );

    let Some(version) = tshark() else {
        if std::env::var_os("FERROVERBS_REQUIRE_TSHARK").is_some_and(|v| v == "1") {
            panic!("tshark is required (FERROVERBS_REQUIRE_TSHARK=1) but not installed");
        }
        println!("NOTE: tshark not installed: the tshark decode check was skipped");
        let _ = std::fs::remove_file(&path);
        return;
    };
    println!("{version}");

    let out = Command::new("tshark")
        .args(tshark_args(&path))
        .arg("-V")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let frames = text.lines().filter(|l| l.starts_with("Frame ")).count();
    let ib = text.lines().filter(|l| *l == "InfiniBand").count();
    assert_eq!(frames, recs.len(), "tshark read every frame");
    assert_eq!(ib, recs.len(), "every frame decodes as InfiniBand");
    for bad in [
        "Malformed",
        "Expert Info (Error",
        "Unknown (",
        "[Dissector bug",
    ] {
        let hit: Vec<&str> = text.lines().filter(|l| l.contains(bad)).take(5).collect();
        assert!(hit.is_empty(), "tshark printed {bad:?}: {hit:?}");
    }
    assert!(text.contains("Syndrome: 96, Nak") || text.contains("PSN Sequence Error"));
    assert!(text.contains("Remote Access Error"));
    assert!(text.contains("RNR Nak"));

    assert!(text.contains("Unreliable Datagram (UD) - SEND only (100)"));
    assert!(text.contains("Unreliable Datagram (UD) - SEND only with Immediate (101)"));
    assert!(text.contains("DETH - Datagram Extended Transport Header"));

    // Per frame: the protocol column and the opcode tshark read equal ours; UD frames
    // carry the DETH (Q_Key, source QP) of the run.
    let out = Command::new("tshark")
        .args(tshark_args(&path))
        .args([
            "-T",
            "fields",
            "-e",
            "_ws.col.Protocol",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "infiniband.deth.q_key",
            "-e",
            "infiniband.deth.srcqp",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), recs.len());
    for (i, (row, r)) in rows.iter().zip(&recs).enumerate() {
        let mut cols = row.split('\t');
        assert_eq!(cols.next(), Some("RRoCE"), "frame {i}: {row}");
        let op: u8 = cols
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("frame {i}: no opcode in {row:?}"));
        assert_eq!(op, r.data[frame::BTH_OFFSET], "frame {i}");
        if op == Opcode::UdSendOnly.value() || op == Opcode::UdSendOnlyWithImmediate.value() {
            let num = |v: Option<&str>| {
                v.and_then(|v| {
                    let v = v.trim();
                    match v.strip_prefix("0x") {
                        Some(h) => u32::from_str_radix(h, 16).ok(),
                        None => v.parse().ok(),
                    }
                })
            };
            let (qkey, src) = (num(cols.next()), num(cols.next()));
            assert_eq!(
                (qkey, src),
                (Some(UD_QKEY), Some(info.ud_src_qp)),
                "frame {i}: DETH as tshark reads it: {row}"
            );
        }
    }
    let _ = std::fs::remove_file(&path);
}

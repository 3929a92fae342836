//! UC queue pairs through the verbs API on two simulated NICs: SEND,
//! SEND with immediate, RDMA WRITE and RDMA WRITE with immediate over a lossy link.
//! A lost packet loses exactly the message it belongs to: every other message
//! arrives intact (data, immediate, length), in order, and the receive WQEs a lost
//! message would have used go to the next messages. The expected set of lost
//! messages comes from a deterministic drop schedule (frame indexes on the link) or,
//! under seeded random loss, from the frames the fabric delivered (its capture sits
//! after the fault middleware).

mod verbs_support;
use verbs_support::*;

use std::collections::{BTreeSet, HashMap};

use ferroverbs::verbs::{
    AccessFlags as A, Mtu, QpCap, QpInitAttr, QpType, RecvWr, SendWr, WcFlags, WcOpcode, WcStatus,
    WorkCompletion,
};
use ferroverbs_sim::link::Impairments;
use ferroverbs_sim::SimBus;

const N: usize = 400;
const BATCH: usize = 32;
const SLOT: usize = 4096;
const RQ_SLOTS: usize = 256;
const RQ_FILL: usize = 128;
const MTU: usize = 1024;
const SQ_PSN: u32 = 0x00ff_fff0; // the run crosses the PSN wrap

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Send,
    SendImm,
    WriteImm,
    Write,
}

fn kind(i: usize) -> Kind {
    match i % 4 {
        0 => Kind::Send,
        1 => Kind::SendImm,
        2 => Kind::WriteImm,
        _ => Kind::Write,
    }
}

/// Message `i`'s length: 8..3508 bytes, 1 to 4 packets at a 1024-byte MTU.
fn len(i: usize) -> usize {
    8 + (i * 977) % 3500
}

fn packets(i: usize) -> usize {
    len(i).div_ceil(MTU).max(1)
}

/// Message `i`'s bytes: its index (LE), then a pattern with no zero byte.
fn data(i: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len(i))
        .map(|k| ((k * 31 + i * 7) % 255 + 1) as u8)
        .collect();
    v[..4].copy_from_slice(&(i as u32).to_le_bytes());
    v
}

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 64,
        max_recv_wr: RQ_SLOTS as u32,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    }
}

/// Checks a receive completion of the workload against the data it names (read from
/// its receive slot while that slot is not reposted) and returns the message index.
fn check_recv(
    wc: &WorkCompletion,
    src_qp: u32,
    rbuf: &ferroverbs::verbs::MemoryRegion<'_, SimBus>,
    wbuf: &ferroverbs::verbs::MemoryRegion<'_, SimBus>,
) -> usize {
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    assert_eq!(wc.src_qp, src_qp);
    let slot = (wc.wr_id as usize % RQ_SLOTS) * SLOT;
    match wc.opcode {
        WcOpcode::Recv => {
            let mut got = vec![0u8; wc.byte_len as usize];
            rbuf.read(slot, &mut got);
            let i = u32::from_le_bytes(got[..4].try_into().unwrap()) as usize;
            assert!(i < N, "{wc:?}");
            assert!(
                got == data(i),
                "SEND {i} not intact: {} bytes of {}",
                got.len(),
                len(i)
            );
            if kind(i) == Kind::SendImm {
                assert!(wc.wc_flags.contains(WcFlags::WITH_IMM));
                assert_eq!(wc.imm_data, i as u32);
            } else {
                assert_eq!(kind(i), Kind::Send);
            }
            i
        }
        WcOpcode::RecvRdmaWithImm => {
            let i = wc.imm_data as usize;
            assert_eq!(kind(i), Kind::WriteImm);
            assert_eq!(wc.byte_len as usize, len(i));
            let mut got = vec![0u8; len(i)];
            wbuf.read(i * SLOT, &mut got);
            assert!(got == data(i), "WRITE_IMM {i} not intact");
            i
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// What arrived: the messages seen complete at the receiver (by completion or, for a
/// plain WRITE, by its bytes in place), each checked intact.
struct Outcome {
    delivered: BTreeSet<usize>,
    /// PSNs of the UC request frames the fabric delivered to NIC B.
    psns: BTreeSet<u32>,
    lost_frames: u64,
}

/// Runs the N-message workload from A to B with `imp` on the link A→B.
fn run(imp: Impairments) -> Outcome {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    net.fabric.impair(ga.mac, gb.mac, imp);
    net.fabric.capture(Some(1 << 20));
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (mut cqa, mut cqb) = (ca.create_cq(512).unwrap(), cb.create_cq(1024).unwrap());
    let src = pa.alloc_mr(N * SLOT, A::LOCAL_WRITE).unwrap();
    let rbuf = pb.alloc_mr(RQ_SLOTS * SLOT, A::LOCAL_WRITE).unwrap();
    let wbuf = pb
        .alloc_mr(N * SLOT, A::LOCAL_WRITE | A::REMOTE_WRITE)
        .unwrap();
    let mut qa = pa
        .create_qp(&QpInitAttr::new(&cqa, &cqa, cap()).with_type(QpType::Uc))
        .unwrap();
    let mut qb = pb
        .create_qp(&QpInitAttr::new(&cqb, &cqb, cap()).with_type(QpType::Uc))
        .unwrap();
    assert_eq!(qa.qp_type(), QpType::Uc);
    connect_uc(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024, SQ_PSN);
    for i in 0..N {
        src.write(i * SLOT, &data(i));
    }

    let mut posted_recv = 0usize;
    let mut consumed = 0usize;
    let mut send_wcs = Vec::new();
    let mut recv_wcs = Vec::new();
    let mut order = Vec::new();
    for start in (0..N).step_by(BATCH) {
        // Keep RQ_FILL receives posted (slot = post count mod RQ_SLOTS, never one
        // still posted: at most RQ_FILL are outstanding).
        let sges: Vec<_> = (posted_recv..posted_recv + RQ_FILL - (posted_recv - consumed))
            .map(|k| rbuf.sge((k % RQ_SLOTS) * SLOT, SLOT as u32).unwrap())
            .collect();
        let wrs: Vec<_> = sges
            .iter()
            .enumerate()
            .map(|(j, s)| RecvWr::new((posted_recv + j) as u64, std::slice::from_ref(s)))
            .collect();
        qb.post_recv(&wrs).unwrap();
        posted_recv += wrs.len();

        let end = (start + BATCH).min(N);
        let sges: Vec<_> = (start..end)
            .map(|i| src.sge(i * SLOT, len(i) as u32).unwrap())
            .collect();
        let wrs: Vec<_> = (start..end)
            .map(|i| {
                let sg = std::slice::from_ref(&sges[i - start]);
                let remote = wbuf.remote(i * SLOT);
                match kind(i) {
                    Kind::Send => SendWr::send(i as u64, sg),
                    Kind::SendImm => SendWr::send_with_imm(i as u64, sg, i as u32),
                    Kind::WriteImm => SendWr::rdma_write_with_imm(i as u64, sg, remote, i as u32),
                    Kind::Write => SendWr::rdma_write(i as u64, sg, remote),
                }
                .signaled()
            })
            .collect();
        qa.post_send(&wrs).unwrap();
        net.settle();
        poll_all(&mut cqa, &mut send_wcs);
        let before = recv_wcs.len();
        poll_all(&mut cqb, &mut recv_wcs);
        consumed += recv_wcs.len() - before;
        for wc in &recv_wcs[before..] {
            order.push(check_recv(wc, qa.qp_num(), &rbuf, &wbuf));
        }
    }
    net.settle();
    poll_all(&mut cqa, &mut send_wcs);
    let before = recv_wcs.len();
    poll_all(&mut cqb, &mut recv_wcs);
    for wc in &recv_wcs[before..] {
        order.push(check_recv(wc, qa.qp_num(), &rbuf, &wbuf));
    }

    // The requester completes every WR once its last packet is sent, lost or not.
    assert_eq!(send_wcs.len(), N, "send completions");
    for (i, wc) in send_wcs.iter().enumerate() {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        assert_eq!(wc.wr_id, i as u64);
    }

    let mut delivered = BTreeSet::new();
    // Receive WQEs are used in posting order (a lost message uses none), delivered
    // messages come in order, each intact (checked as it was polled).
    for (k, &i) in order.iter().enumerate() {
        assert_eq!(
            recv_wcs[k].wr_id, k as u64,
            "receive WQEs consumed in order"
        );
        assert!(delivered.insert(i), "message {i} delivered twice");
    }
    assert!(order.windows(2).all(|w| w[0] < w[1]), "in order: {order:?}");
    // Plain WRITEs: complete (every byte, none of them zero) or not.
    for i in (0..N).filter(|&i| kind(i) == Kind::Write) {
        let mut got = vec![0u8; len(i)];
        wbuf.read(i * SLOT, &mut got);
        if got == data(i) {
            delivered.insert(i);
        }
    }

    let mut psns = BTreeSet::new();
    for f in net.fabric.take_captured() {
        let (repr, _) = ferroverbs_sim::wire::frame::parse(&f).expect("captured frame");
        assert_eq!(
            repr.roce.opcode().transport(),
            ferroverbs_sim::wire::opcode::Transport::Uc,
            "UC sends no acknowledgement"
        );
        psns.insert(repr.roce.bth.psn.value());
    }
    let fstats = net.fabric.fault_stats();
    assert_eq!(net.fabric.stats().queue_full, 0);
    let dp = net.b.stats().data_path;
    assert_eq!(
        dp.acks + dp.naks + dp.rnr_naks,
        0,
        "no acknowledgement on UC"
    );
    drop((qa, qb));
    Outcome {
        delivered,
        psns,
        lost_frames: fstats.lost,
    }
}

/// The PSNs of message `i` (the run starts at [`SQ_PSN`] and wraps at 2^24).
fn psns_of(i: usize) -> Vec<u32> {
    let first: usize = (0..i).map(packets).sum();
    (0..packets(i))
        .map(|k| (SQ_PSN + (first + k) as u32) & 0x00ff_ffff)
        .collect()
}

/// The messages whose every packet the fabric delivered.
fn complete_messages(psns: &BTreeSet<u32>) -> BTreeSet<usize> {
    (0..N)
        .filter(|&i| psns_of(i).iter().all(|p| psns.contains(p)))
        .collect()
}

#[test]
fn uc_lossless_delivers_everything() {
    let out = run(Impairments::new());
    assert_eq!(out.delivered, (0..N).collect::<BTreeSet<_>>());
    assert_eq!(out.lost_frames, 0);
}

#[test]
fn uc_drop_schedule_loses_exactly_the_messages_hit() {
    // Frame index → message: message i occupies frames first(i)..first(i)+packets(i).
    let mut owner = HashMap::new();
    let mut f = 0u64;
    for i in 0..N {
        for _ in 0..packets(i) {
            owner.insert(f, i);
            f += 1;
        }
    }
    let total = f;
    // Single packets (first, middle, last, only), a burst across a message boundary,
    // the very first and the very last frame.
    let schedule: &[(u64, u64)] = &[
        (0, 1),
        (5, 1),
        (17, 1),
        (40, 3),
        (101, 1),
        (102, 1),
        (250, 2),
        (333, 1),
        (500, 6),
        (777, 1),
        (total - 1, 1),
    ];
    let mut imp = Impairments::new();
    let mut lost = BTreeSet::new();
    for &(from, count) in schedule {
        imp = imp.drop_frames(from, count);
        for k in from..from + count {
            lost.insert(owner[&k]);
        }
    }
    let out = run(imp);
    let expected: BTreeSet<usize> = (0..N).filter(|i| !lost.contains(i)).collect();
    assert_eq!(out.delivered, expected, "lost: {lost:?}");
    assert_eq!(
        out.lost_frames,
        schedule.iter().map(|s| s.1).sum::<u64>(),
        "frames dropped"
    );
    assert_eq!(complete_messages(&out.psns), expected);
    assert!(lost.len() >= 10);
}

#[test]
fn uc_random_loss_loses_only_the_messages_hit() {
    for seed in [1u64, 2, 3] {
        let out = run(Impairments::new().loss(0.03).seeded(seed));
        assert!(
            out.lost_frames > 10,
            "seed {seed}: {} lost",
            out.lost_frames
        );
        let expected = complete_messages(&out.psns);
        assert!(expected.len() < N && expected.len() > N / 2, "seed {seed}");
        assert_eq!(out.delivered, expected, "seed {seed}");
    }
}

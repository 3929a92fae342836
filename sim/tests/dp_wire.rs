//! What arrives on the wire: bad frames dropped and counted by reason, duplicates
//! re-acknowledged, a PSN gap NAKed once, and no panic (nor hang) on any packet:
//! mutated frames, with and without valid checksums, thrown at live QPs.

mod common;
mod dp;

use dp::*;
use ferroverbs_hw::datapath::cqe::MLX5_CQE_REQ;
use ferroverbs_sim::wire::{frame, Frame, Opcode, Psn};

/// A deterministic generator (splitmix64).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Captures the frames of one 2-packet SEND (and its ACK) from A to B.
fn captured_send(p: &mut Pair) -> Vec<Vec<u8>> {
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(4096, ALL);
    let dst = p.b.reg_mr(4096, ALL);
    p.b.post_recv(&mut p.qb, &[sge(&dst, 0, 4096)]);
    p.fabric.capture(Some(16));
    p.a.post(&mut p.qa, &send_wqe(qpn, &[sge(&src, 0, 1500)], None, SIG));
    p.fabric.run_until_idle();
    let frames = p.fabric.take_captured();
    p.fabric.capture(None);
    assert_eq!(p.a.poll(&mut p.acq.0).unwrap().opcode(), MLX5_CQE_REQ);
    assert!(p.b.poll(&mut p.bcq.1).is_some());
    frames
}

#[test]
fn bad_frames_are_dropped_and_counted_by_reason() {
    let mut p = Pair::deterministic(Conn::default());
    let frames = captured_send(&mut p);
    assert_eq!(frames.len(), 3);
    let before = p.b.h.sim.stats().data_path;
    // A flipped payload bit: the ICRC no longer matches.
    let mut bad = frames[0].clone();
    bad[70] ^= 0x10;
    p.fabric.inject(&bad);
    // A truncated frame, a wrong EtherType, a wrong UDP port (with fixed checksums).
    p.fabric.inject(&frames[0][..50]);
    let mut et = frames[0].clone();
    et[12] = 0x86;
    p.fabric.inject(&et);
    let mut port = frames[0].clone();
    port[36..38].copy_from_slice(&4792u16.to_be_bytes());
    Frame::new_unchecked(&mut port[..]).fill_checksums();
    p.fabric.inject(&port);
    // A valid frame for a QP that does not exist.
    let mut noqp = frames[0].clone();
    {
        let mut f = Frame::new_unchecked(&mut noqp[..]);
        f.roce_mut().bth_mut().set_dest_qp(0xabcdef);
        f.fill_checksums();
    }
    p.fabric.inject(&noqp);
    // A valid frame from another source address than the QP's peer.
    let mut spoof = frames[0].clone();
    spoof[26 + 3] ^= 1;
    Frame::new_unchecked(&mut spoof[..]).fill_checksums();
    p.fabric.inject(&spoof);
    // A frame for a MAC nobody has.
    let mut lost = frames[0].clone();
    lost[..6].copy_from_slice(&[2, 9, 9, 9, 9, 9]);
    p.fabric.inject(&lost);
    p.fabric.run_until_idle();
    let s = p.b.h.sim.stats().data_path;
    assert_eq!(s.rx_bad_icrc - before.rx_bad_icrc, 1);
    assert_eq!(s.rx_malformed - before.rx_malformed, 3);
    assert_eq!(s.rx_no_qp - before.rx_no_qp, 1);
    assert_eq!(s.rx_bad_addr - before.rx_bad_addr, 1);
    assert_eq!(p.fabric.stats().no_route, 1);
    assert_eq!(p.fabric.stats().injected, 7);
    // Nothing of it reached a CQ.
    assert!(p.b.poll(&mut p.bcq.1).is_none());
}

#[test]
fn duplicates_are_reacknowledged_not_executed() {
    let mut p = Pair::deterministic(Conn::default());
    let frames = captured_send(&mut p);
    let before = p.b.h.sim.stats().data_path;
    // The whole SEND again: both packets are duplicates.
    p.fabric.inject(&frames[0]);
    p.fabric.inject(&frames[1]);
    p.fabric.run_until_idle();
    let s = p.b.h.sim.stats().data_path;
    assert_eq!(s.rx_duplicates - before.rx_duplicates, 2);
    assert_eq!(s.acks - before.acks, 2);
    assert!(
        p.b.poll(&mut p.bcq.1).is_none(),
        "no second receive completion"
    );
    // A's completer takes the ACKs of what it already completed as no news.
    assert!(p.a.poll(&mut p.acq.0).is_none());
}

#[test]
fn a_psn_gap_is_nacked_once() {
    let mut p = Pair::deterministic(Conn::default());
    let frames = captured_send(&mut p);
    let before = p.b.h.sim.stats().data_path;
    for ahead in [5u32, 6, 7] {
        let mut f = frames[0].clone();
        let mut fr = Frame::new_unchecked(&mut f[..]);
        let psn = fr.roce().bth().psn();
        fr.roce_mut()
            .bth_mut()
            .set_psn(Psn::new(psn.value() + ahead));
        fr.fill_checksums();
        p.fabric.inject(&f);
    }
    p.fabric.run_until_idle();
    let s = p.b.h.sim.stats().data_path;
    assert_eq!(s.naks - before.naks, 1, "one sequence NAK per gap");
    // The link still works.
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(64, ALL);
    let dst = p.b.reg_mr(64, ALL);
    p.b.post_recv(&mut p.qb, &[sge(&dst, 0, 64)]);
    p.a.post(&mut p.qa, &send_wqe(qpn, &[sge(&src, 0, 8)], None, SIG));
    assert_eq!(
        wait_cqe(&p.fabric, &p.a, &mut p.acq.0).opcode(),
        MLX5_CQE_REQ
    );
}

#[test]
fn no_panic_on_any_packet() {
    let seed = 0x5eed_f00d_u64;
    let mut rng = Rng(seed);
    let mut p = Pair::deterministic(Conn::default());
    let frames = captured_send(&mut p);
    // Also a READ request, a WRITE and an atomic to mutate.
    let qpn = p.qa.qpn;
    let local = p.a.reg_mr(4096, ALL);
    let remote = p.b.reg_mr(4096, ALL);
    p.fabric.capture(Some(64));
    p.a.post(
        &mut p.qa,
        &rdma_wqe(
            qpn,
            true,
            remote.va,
            remote.key,
            &[sge(&local, 0, 2000)],
            None,
            SIG,
        ),
    );
    p.a.post(
        &mut p.qa,
        &rdma_wqe(
            qpn,
            false,
            remote.va,
            remote.key,
            &[sge(&local, 0, 100)],
            Some(1),
            SIG,
        ),
    );
    p.b.post_recv(&mut p.qb, &[sge(&remote, 0, 64)]);
    p.a.post(
        &mut p.qa,
        &atomic_wqe(qpn, remote.va, remote.key, sge(&local, 0, 8), 1, None, SIG),
    );
    p.fabric.run_until_idle();
    let mut pool: Vec<Vec<u8>> = frames;
    pool.extend(p.fabric.take_captured());
    p.fabric.capture(None);
    assert!(pool.len() >= 8);
    for round in 0..20_000u32 {
        let mut f = pool[rng.below(pool.len())].clone();
        let n = 1 + rng.below(4);
        for _ in 0..n {
            let at = rng.below(f.len());
            f[at] = rng.next() as u8;
        }
        if rng.below(4) == 0 {
            let keep = rng.below(f.len() + 1);
            f.truncate(keep);
        }
        // Most rounds fix the checksums so the packet reaches the transport.
        if rng.below(4) != 0 && Frame::new_checked(&f[..]).is_ok() {
            Frame::new_unchecked(&mut f[..]).fill_checksums();
        }
        // Half go to A, half to B (destination MAC).
        if f.len() >= 6 {
            let mac = if round % 2 == 0 { p.a.mac } else { p.b.mac };
            f[..6].copy_from_slice(&mac);
        }
        p.fabric.inject(&f);
        if round % 64 == 0 {
            p.fabric.run_timers(std::time::Duration::from_millis(10));
        }
    }
    p.fabric.run_timers(std::time::Duration::from_secs(1));
    let (sa, sb) = (p.a.h.sim.stats().data_path, p.b.h.sim.stats().data_path);
    assert!(sa.rx_frames + sb.rx_frames >= 20_000, "seed {seed}");
    // Many mutants reached the transport (valid checksums) and were judged there.
    let judged = |s: ferroverbs_sim::DataPathStats| {
        s.rx_no_qp + s.rx_bad_addr + s.rx_bad_pkey + s.rx_unexpected + s.rx_duplicates + s.naks
    };
    assert!(judged(sa) + judged(sb) > 1000, "seed {seed}: {sa:?} {sb:?}");
    // Whatever state the QPs ended in, the devices still answer commands and polls.
    let _ = p.a.qp_state(&p.qa);
    while p.a.poll(&mut p.acq.0).is_some() {}
    while p.b.poll(&mut p.bcq.1).is_some() {}
    let _ = frame::parse(&pool[0]).expect("the originals were valid");
    let _ = Opcode::RcSendOnly;
}

#[test]
fn acks_coalesce_within_a_batch() {
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    let src = p.a.reg_mr(64, ALL);
    let dst = p.b.reg_mr(64, ALL);
    let mut first = [0u8; 8];
    let mut idx = Vec::new();
    for _ in 0..20 {
        p.b.post_recv(&mut p.qb, &[sge(&dst, 0, 64)]);
        let (i, f) =
            p.a.write_wqe(&mut p.qa, &send_wqe(qpn, &[sge(&src, 0, 8)], None, SIG));
        idx.push(i);
        first = f;
    }
    p.fabric.capture(Some(64));
    p.a.ring(&p.qa, first);
    p.fabric.run_until_idle();
    let frames = p.fabric.take_captured();
    // 20 SEND_ONLY (each asking for an ACK), one ACK covering them all, with MSN 20.
    assert_eq!(frames.len(), 21);
    let (ack, _) = frame::parse(&frames[20]).unwrap();
    assert_eq!(ack.roce.opcode(), Opcode::RcAcknowledge);
    assert_eq!(ack.roce.bth.psn.value(), 0x10 + 19);
    assert_eq!(ack.roce.aeth.unwrap().msn, 20);
    assert_eq!(p.b.h.sim.stats().data_path.acks, 1);
    for i in idx {
        assert_eq!(p.a.poll(&mut p.acq.0).unwrap().wqe_counter(), i);
    }
}

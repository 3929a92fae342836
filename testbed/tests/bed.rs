//! The test bed against the behaviour it promises: connected pairs that carry data on
//! each transport, runs that end in a typed failure with the seed and the last frames
//! (never a hang), faults that reach the verbs statuses, and seeded replays that put
//! the same bytes on the wire.

use std::time::Duration;

use ferroverbs::verbs::{RecvWr, SendWr, WcFlags, WcOpcode, WcStatus};
use ferroverbs_sim::link::faults::Impairments;
use ferroverbs_testbed::{Bed, PairConfig, StuckReason};

const SECOND: Duration = Duration::from_secs(1);

/// Posts a receive of `len` bytes at offset 0 of `b`'s buffer.
fn post_recv(p: &mut ferroverbs_testbed::Pair, id: u64, len: u32) {
    let sg = [p.b.mr.sge(0, len).unwrap()];
    p.b.qp.post_recv(&[RecvWr::new(id, &sg)]).unwrap();
}

#[test]
fn an_rc_pair_carries_a_send_and_an_rdma_write() {
    let bed = Bed::new(1);
    let mut p = bed.rc_pair().unwrap();
    post_recv(&mut p, 9, 64);
    p.a.mr.write(0, b"hello, bed");
    let sg = [p.a.mr.sge(0, 10).unwrap()];
    p.a.qp
        .post_send(&[SendWr::send(1, &sg).signaled()])
        .unwrap();
    let r = bed.run_until(SECOND, || p.b.cq.poll_one()).unwrap();
    assert_eq!(
        (r.status, r.opcode, r.wr_id, r.byte_len),
        (WcStatus::Success, WcOpcode::Recv, 9, 10)
    );
    let mut got = [0u8; 10];
    p.b.mr.read(0, &mut got);
    assert_eq!(&got, b"hello, bed");
    let s = bed.run_until(SECOND, || p.a.cq.poll_one()).unwrap();
    assert_eq!(
        (s.status, s.opcode, s.wr_id),
        (WcStatus::Success, WcOpcode::Send, 1)
    );

    // WRITE into b's buffer at 100 with its key.
    p.a.mr.write(0, b"written");
    let remote = p.b.remote(100);
    let sg = [p.a.mr.sge(0, 7).unwrap()];
    p.a.qp
        .post_send(&[SendWr::rdma_write(2, &sg, remote).signaled()])
        .unwrap();
    let w = bed.run_until(SECOND, || p.a.cq.poll_one()).unwrap();
    assert_eq!(
        (w.status, w.opcode),
        (WcStatus::Success, WcOpcode::RdmaWrite)
    );
    let mut got = [0u8; 7];
    p.b.mr.read(100, &mut got);
    assert_eq!(&got, b"written");
}

#[test]
fn uc_and_ud_pairs_deliver_the_bytes() {
    let bed = Bed::builder(2).nics(3).build().unwrap();
    let mut uc = bed.pair(0, 2, &PairConfig::uc()).unwrap();
    post_recv(&mut uc, 1, 64);
    uc.a.mr.write(0, b"over UC");
    let sg = [uc.a.mr.sge(0, 7).unwrap()];
    uc.a.qp
        .post_send(&[SendWr::send(1, &sg).signaled()])
        .unwrap();
    let r = bed.run_until(SECOND, || uc.b.cq.poll_one()).unwrap();
    assert_eq!((r.status, r.byte_len), (WcStatus::Success, 7));
    let mut got = [0u8; 7];
    uc.b.mr.read(0, &mut got);
    assert_eq!(&got, b"over UC");

    let mut ud = bed.pair(1, 2, &PairConfig::ud()).unwrap();
    // A UD receive buffer starts with the 40-byte GRH.
    post_recv(&mut ud, 2, 40 + 64);
    ud.a.mr.write(0, b"over UD");
    let sg = [ud.a.mr.sge(0, 7).unwrap()];
    let (ah, qpn, qkey) = (ud.a.ah.as_ref().unwrap(), ud.a.peer_qpn, ud.a.qkey);
    ud.a.qp
        .post_send(&[SendWr::send(3, &sg).ud(ah, qpn, qkey).signaled()])
        .unwrap();
    let r = bed.run_until(SECOND, || ud.b.cq.poll_one()).unwrap();
    assert_eq!(
        (r.status, r.byte_len, r.src_qp),
        (WcStatus::Success, 40 + 7, ud.a.qp.qp_num())
    );
    assert!(r.wc_flags.contains(WcFlags::GRH), "{r:?}");
    // `sl` carries the RoCE packet type of a UD receive, as libmlx5 reports it: L3
    // header IPv4 (2); UCX finds the destination address in the GRH area by it.
    assert_eq!(r.sl & 7, 2, "{r:?}");
    let mut got = [0u8; 7];
    ud.b.mr.read(40, &mut got);
    assert_eq!(&got, b"over UD");
    // The GRH's IPv4 source address is NIC 1's, 10.0.0.2.
    let mut grh = [0u8; 40];
    ud.b.mr.read(0, &mut grh);
    assert_eq!(&grh[32..36], &[10, 0, 0, 2]);
}

#[test]
fn a_condition_nothing_can_meet_fails_at_once_with_the_seed() {
    let bed = Bed::new(3);
    let mut p = bed.rc_pair().unwrap();
    let start = bed.now();
    let e = bed.run_until(SECOND, || p.b.cq.poll_one()).unwrap_err();
    assert_eq!(e.reason, StuckReason::Idle);
    assert_eq!(e.seed, 3);
    assert_eq!(e.now, start, "an idle bed moves no time");
    assert!(e.to_string().contains("seed 3"), "{e}");
}

#[test]
fn a_cut_link_ends_at_the_deadline_with_the_retransmissions_in_the_trace() {
    let bed = Bed::new(4);
    let mut p = bed.rc_pair().unwrap();
    bed.fabric().partition(p.a.gid.mac, p.b.gid.mac, true);
    post_recv(&mut p, 1, 64);
    let sg = [p.a.mr.sge(0, 16).unwrap()];
    p.a.qp
        .post_send(&[SendWr::send(1, &sg).signaled()])
        .unwrap();
    // The ACK timeout is 67 ms (exponent 14): 300 ms see the first send and a few
    // retransmissions, far from the seven retries' exhaustion.
    let within = Duration::from_millis(300);
    let start = bed.now();
    let e = bed.run_until(within, || p.a.cq.poll_one()).unwrap_err();
    assert_eq!(e.reason, StuckReason::Deadline, "{e}");
    assert_eq!(e.now, start + within);
    let sends = e
        .frames
        .iter()
        .filter(|l| l.contains("SEND_ONLY") && l.contains("psn 0x000100"))
        .count();
    assert!(sends >= 4, "the first SEND and its retransmissions: {e}");
    assert!(
        e.frames.iter().all(|l| l.starts_with("10.0.0.1:")),
        "only A transmits: {e}"
    );
    // The partition stays: the run to a larger deadline ends in RETRY_EXC_ERR.
    let c = bed.run_until(10 * SECOND, || p.a.cq.poll_one()).unwrap();
    assert_eq!((c.status, c.wr_id), (WcStatus::RetryExcErr, 1), "{c:?}");
}

/// Sends `n` messages over a lossy RC pair and returns the frames of the last
/// exchange and every payload received.
fn lossy_run(seed: u64, n: u64) -> (Vec<Vec<u8>>, Vec<u64>) {
    let bed = Bed::builder(seed)
        .impair(Impairments::new().loss(0.2).duplicate(0.05))
        .trace(64)
        .build()
        .unwrap();
    let mut p = bed.rc_pair().unwrap();
    let mut got = Vec::new();
    for i in 0..n {
        post_recv(&mut p, i, 8);
        p.a.mr.write(0, &i.to_le_bytes());
        let sg = [p.a.mr.sge(0, 8).unwrap()];
        p.a.qp
            .post_send(&[SendWr::send(i, &sg).signaled()])
            .unwrap();
        let r = bed.run_until(10 * SECOND, || p.b.cq.poll_one()).unwrap();
        assert_eq!((r.status, r.wr_id), (WcStatus::Success, i));
        let mut b = [0u8; 8];
        p.b.mr.read(0, &mut b);
        got.push(u64::from_le_bytes(b));
        let s = bed.run_until(10 * SECOND, || p.a.cq.poll_one()).unwrap();
        assert_eq!((s.status, s.wr_id), (WcStatus::Success, i));
    }
    let f = bed.fabric().fault_stats();
    assert!(f.lost > 0 && f.duplicated > 0, "{f:?}");
    (bed.fabric().last_frames(), got)
}

#[test]
fn a_seed_replays_the_same_bytes_on_a_lossy_link() {
    let (frames, got) = lossy_run(5, 40);
    assert_eq!(got, (0..40).collect::<Vec<_>>(), "exactly once, in order");
    assert!(!frames.is_empty());
    let (again, _) = lossy_run(5, 40);
    assert_eq!(frames, again, "the same seed gives byte-identical frames");
    let (other, _) = lossy_run(6, 40);
    assert_ne!(frames, other, "another seed loses other frames");
}

#[test]
fn pairs_fit_in_the_users_own_struct() {
    struct Fixture {
        bed: Bed,
        rc: ferroverbs_testbed::Pair,
        ud: ferroverbs_testbed::Pair,
    }
    let bed = Bed::new(8);
    let rc = bed.rc_pair().unwrap();
    let ud = bed.pair(1, 0, &PairConfig::ud()).unwrap();
    let mut f = Fixture { bed, rc, ud };
    assert_ne!(f.rc.a.qp.qp_num(), f.ud.b.qp.qp_num());
    assert_eq!((f.ud.a.nic, f.ud.b.nic), (1, 0));
    let e = f
        .bed
        .run_until(SECOND, || f.rc.a.cq.poll_one())
        .unwrap_err();
    assert_eq!(e.reason, StuckReason::Idle);
}

#[test]
fn a_condition_that_always_posts_ends_as_a_livelock_not_a_hang() {
    let bed = Bed::new(9);
    let mut p = bed.rc_pair().unwrap();
    let sg = [p.a.mr.sge(0, 8).unwrap()];
    // Every look sends again and never finds what it waits for.
    let e = bed
        .run_until(SECOND, || {
            let _ = p.a.cq.poll_one();
            let _ =
                p.a.qp
                    .post_send(&[SendWr::rdma_write(1, &sg, p.b.mr.remote(0)).signaled()]);
            None::<()>
        })
        .unwrap_err();
    assert_eq!(e.reason, StuckReason::Livelock, "{e}");
}

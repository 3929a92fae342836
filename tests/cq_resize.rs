//! CQ resize on the simulated ConnectX (`CompletionQueue::resize`, `MODIFY_CQ` with
//! `op_mod` resize): completions not yet polled survive growing and shrinking, in
//! order, each polled exactly once with its data; the ring keeps working across its
//! wraps afterwards; and the refusals (too small for the unpolled completions, out of
//! range, a full CQ, a CQ in error, the firmware's checks of a raw command) leave the
//! CQ as it was.

use std::time::Duration;

use ferroverbs::verbs::{CompletionQueue, Error, RecvWr, SendWr, WcOpcode};
use ferroverbs_hw::control::cmd::{new_input, Opcode};
use ferroverbs_hw::control::cq::{
    cqc, modify_cq_in, query_cq_in, query_cq_out, resize_cq_input, MLX5_CQ_OPMOD_RESIZE,
};
use ferroverbs_sim::firmware::Syndrome;
use ferroverbs_sim::SimBus;
use ferroverbs_testbed::{Bed, Pair, PairConfig};

const WAIT: Duration = Duration::from_secs(1);

/// The CQEs the device wrote to CQ `cqn` of NIC `nic` (its producer index).
fn produced(bed: &Bed, nic: usize, cqn: u32) -> u32 {
    bed.nic(nic)
        .sim
        .with_engine(|e| e.cq(cqn).map_or(0, |c| c.pi))
}

/// Runs the fabric until CQ `cqn` of NIC `nic` has `pi` CQEs written.
fn until_produced(bed: &Bed, nic: usize, cqn: u32, pi: u32) {
    bed.run_until(WAIT, || (produced(bed, nic, cqn) >= pi).then_some(()))
        .unwrap_or_else(|e| panic!("CQ {cqn} never reached {pi} CQEs: {e}"));
    assert_eq!(produced(bed, nic, cqn), pi);
}

/// SENDs `ids` from a to b: b receives SEND `i` at offset `16 * (i % 64)` of its
/// buffer, carrying `i` and its complement.
fn send(p: &mut Pair, ids: std::ops::Range<u64>) {
    for i in ids {
        let off = 16 * (i as usize % 64);
        let rsg = [p.b.mr.sge(off, 16).unwrap()];
        p.b.qp.post_recv(&[RecvWr::new(i, &rsg)]).unwrap();
        let src = 2048 + off;
        let mut msg = [0u8; 16];
        msg[..8].copy_from_slice(&i.to_le_bytes());
        msg[8..].copy_from_slice(&(!i).to_le_bytes());
        p.a.mr.write(src, &msg);
        let sg = [p.a.mr.sge(src, 16).unwrap()];
        p.a.qp
            .post_send(&[SendWr::send(i, &sg).signaled()])
            .unwrap();
    }
}

/// Polls b's receive completions and a's send completions `ids`, in order, each
/// once, with their data; then both CQs are empty.
fn drain(p: &mut Pair, ids: std::ops::Range<u64>) {
    for i in ids {
        let r =
            p.b.cq
                .poll_one()
                .unwrap_or_else(|| panic!("receive {i} missing"));
        assert!(r.is_ok(), "{r:?}");
        assert_eq!((r.wr_id, r.opcode, r.byte_len), (i, WcOpcode::Recv, 16));
        let mut got = [0u8; 16];
        p.b.mr.read(16 * (i as usize % 64), &mut got);
        assert_eq!(u64::from_le_bytes(got[..8].try_into().unwrap()), i);
        assert_eq!(u64::from_le_bytes(got[8..].try_into().unwrap()), !i);
        let s =
            p.a.cq
                .poll_one()
                .unwrap_or_else(|| panic!("send {i} missing"));
        assert!(s.is_ok(), "{s:?}");
        assert_eq!((s.wr_id, s.opcode), (i, WcOpcode::Send));
    }
    assert!(
        p.b.cq.poll_one().is_none(),
        "a completion twice or from nowhere"
    );
    assert!(
        p.a.cq.poll_one().is_none(),
        "a completion twice or from nowhere"
    );
}

fn pair(bed: &Bed, cq_entries: u32) -> Pair {
    let cfg = PairConfig {
        cq_entries,
        ..PairConfig::rc()
    };
    bed.pair(0, 1, &cfg).unwrap()
}

fn log_size(bed: &Bed, nic: usize, cq: &CompletionQueue<'static, SimBus>) -> u64 {
    let mut q = new_input(Opcode::QueryCq, 0, query_cq_in::SIZE);
    query_cq_in::cqn.set(&mut q, cq.cqn().into());
    let out = bed
        .nic(nic)
        .ctx
        .exec_cmd(&q, query_cq_out::SIZE + 64)
        .unwrap();
    cqc::log_cq_size.at(query_cq_out::cq_context.bit).get(&out)
}

#[test]
fn unpolled_completions_survive_growing_and_shrinking_each_once_in_order() {
    let bed = Bed::new(11);
    let mut p = pair(&bed, 15);
    let (acq, bcq) = (p.a.cq.cqn(), p.b.cq.cqn());
    assert_eq!(p.b.cq.capacity(), 15);
    send(&mut p, 0..10);
    until_produced(&bed, 1, bcq, 10);
    until_produced(&bed, 0, acq, 10);
    // Three polled, seven waiting on each side.
    for i in 0..3 {
        assert_eq!(p.b.cq.poll_one().unwrap().wr_id, i);
        assert_eq!(p.a.cq.poll_one().unwrap().wr_id, i);
    }

    // Grow: 7 waiting move to a ring of 128.
    p.b.cq.resize(100).unwrap();
    p.a.cq.resize(100).unwrap();
    assert_eq!((p.a.cq.capacity(), p.b.cq.capacity()), (127, 127));
    assert_eq!(
        log_size(&bed, 1, &p.b.cq),
        7,
        "QUERY_CQ reports the new ring"
    );
    // The resize CQE took one producer index; 10 more land in the new ring.
    send(&mut p, 10..20);
    until_produced(&bed, 1, bcq, 21);
    until_produced(&bed, 0, acq, 21);

    // Shrink with 17 waiting: a ring of 16 cannot hold them, one of 32 can.
    match p.b.cq.resize(8) {
        Err(Error::CqResizeBelowUnpolled { unpolled, entries }) => {
            assert_eq!((unpolled, entries), (17, 16));
        }
        other => panic!("shrinking below the unpolled completions: {other:?}"),
    }
    assert_eq!(p.b.cq.capacity(), 127, "a refused resize keeps the ring");
    p.b.cq.resize(20).unwrap();
    p.a.cq.resize(17).unwrap();
    assert_eq!((p.a.cq.capacity(), p.b.cq.capacity()), (31, 31));
    assert_eq!(log_size(&bed, 1, &p.b.cq), 5);
    // The same size again does nothing (no command: the producer index stays).
    p.b.cq.resize(31).unwrap();
    assert_eq!(produced(&bed, 1, bcq), 22);

    drain(&mut p, 3..20);

    // The new ring wraps many times with its owner bits right.
    for round in 0..12u64 {
        let ids = 20 + round * 20..40 + round * 20;
        send(&mut p, ids.clone());
        bed.run_until(WAIT, || {
            (produced(&bed, 1, bcq) >= 22 + 20 * (round as u32 + 1)).then_some(())
        })
        .unwrap();
        bed.run_until(WAIT, || {
            (produced(&bed, 0, acq) >= 22 + 20 * (round as u32 + 1)).then_some(())
        })
        .unwrap();
        drain(&mut p, ids);
    }
    // Back to a bigger ring with nothing waiting, and it still works.
    p.b.cq.resize(1000).unwrap();
    assert_eq!(p.b.cq.capacity(), 1023);
    send(&mut p, 1000..1010);
    bed.run_until(WAIT, || {
        (produced(&bed, 0, acq) >= 22 + 240 + 10).then_some(())
    })
    .unwrap();
    until_produced(&bed, 1, bcq, 22 + 240 + 1 + 10);
    drain(&mut p, 1000..1010);
}

#[test]
fn a_cq_the_device_never_wrote_resizes_and_out_of_range_sizes_are_refused() {
    let bed = Bed::new(12);
    let mut p = pair(&bed, 3);
    let bcq = p.b.cq.cqn();
    // Never used by the data path: the resize CQE goes to entry 0.
    p.b.cq.resize(1).unwrap();
    assert_eq!(p.b.cq.capacity(), 1);
    assert_eq!(produced(&bed, 1, bcq), 1);
    assert!(
        p.b.cq.poll_one().is_none(),
        "the resize CQE is not a completion"
    );
    for bad in [0, 1 << 24] {
        match p.b.cq.resize(bad) {
            Err(Error::CapExceeded { requested, .. }) => assert_eq!(requested, bad.into()),
            other => panic!("resize({bad}): {other:?}"),
        }
    }
    // A ring of 2 holds one waiting completion, not two.
    send(&mut p, 0..1);
    until_produced(&bed, 1, bcq, 2);
    p.b.cq.resize(3).unwrap();
    send(&mut p, 1..2);
    until_produced(&bed, 1, bcq, 4);
    assert!(matches!(
        p.b.cq.resize(1),
        Err(Error::CqResizeBelowUnpolled {
            unpolled: 2,
            entries: 2
        })
    ));
    drain(&mut p, 0..2);
}

#[test]
fn the_firmware_checks_a_raw_resize_command() {
    let bed = Bed::new(13);
    let p = pair(&bed, 15);
    let ctx = bed.nic(1).ctx;
    let cqn = p.b.cq.cqn();
    // Page addresses nothing maps: every check below comes before the buffer's.
    let pas: Vec<u64> = (0..8).map(|i| (1u64 << 46) + i * 4096).collect();
    let refused = |input: &[u8]| match ctx.exec_cmd(input, 16) {
        Err(ferroverbs::Error::Cmd(c)) => Syndrome::from_value(c.syndrome),
        other => panic!("accepted: {other:?}"),
    };
    let ok = resize_cq_input(cqn, 5, 64, 0, &pas);
    let mut unknown = ok.clone();
    modify_cq_in::cqn.set(&mut unknown, 0xff_fff0);
    assert_eq!(refused(&unknown), Some(Syndrome::CqUnknown));
    let mut opmod = ok.clone();
    ferroverbs_hw::control::cmd::mbox_in::op_mod.set(&mut opmod, 2);
    assert_eq!(refused(&opmod), Some(Syndrome::BadOpMod));
    let mut fields = ok.clone();
    modify_cq_in::modify_field_select_resize_field_select.set(&mut fields, 1);
    assert_eq!(refused(&fields), Some(Syndrome::CqResizeFields));
    let big = resize_cq_input(cqn, 23, 64, 0, &pas);
    assert_eq!(refused(&big), Some(Syndrome::CqResizeBadSize));
    let wide = resize_cq_input(cqn, 5, 128, 0, &pas);
    assert_eq!(refused(&wide), Some(Syndrome::CqResizeCqeSize));
    let short = resize_cq_input(cqn, 5, 64, 0, &pas[..0]);
    assert_eq!(refused(&short), Some(Syndrome::CqPasShort));
    assert_eq!(
        refused(&resize_cq_input(cqn, 5, 64, 0, &pas)),
        Some(Syndrome::CqPasNotMapped)
    );
    assert_eq!(MLX5_CQ_OPMOD_RESIZE, 1);
    // Nothing changed: the CQ still has its ring of 16.
    assert_eq!(log_size(&bed, 1, &p.b.cq), 4);
}

/// The firmware's syndrome of a refused resize.
fn refused_with(r: Result<(), Error>) -> Option<Syndrome> {
    match r {
        Err(Error::Device(ferroverbs::Error::Cmd(c))) => Syndrome::from_value(c.syndrome),
        other => panic!("not refused by the firmware: {other:?}"),
    }
}

#[test]
fn a_full_cq_and_a_cq_in_error_are_refused_by_the_firmware() {
    let bed = Bed::new(14);
    let mut p = pair(&bed, 15);
    let bcq = p.b.cq.cqn();
    // Sixteen completions fill the ring of 16: no entry is left for the resize CQE.
    send(&mut p, 0..16);
    until_produced(&bed, 1, bcq, 16);
    assert_eq!(
        refused_with(p.b.cq.resize(100)),
        Some(Syndrome::CqResizeFull)
    );
    assert_eq!(p.b.cq.capacity(), 15);
    // One polled: the fifteen others move.
    assert_eq!(p.b.cq.poll_one().unwrap().wr_id, 0);
    p.b.cq.resize(100).unwrap();
    for i in 1..16 {
        let w = p.b.cq.poll_one().unwrap();
        assert_eq!((w.wr_id, w.byte_len), (i, 16));
    }
    assert!(p.b.cq.poll_one().is_none());

    // A CQ that overran is in error: its resize is refused.
    let mut q = pair(&bed, 3);
    let qcq = q.b.cq.cqn();
    send(&mut q, 0..5);
    bed.run_until(WAIT, || {
        bed.nic(1)
            .sim
            .with_engine(|e| e.cq(qcq).is_some_and(|c| c.error))
            .then_some(())
    })
    .unwrap();
    assert_eq!(
        refused_with(q.b.cq.resize(100)),
        Some(Syndrome::CqResizeInError)
    );
}

//! Completion queues: the owner bit over several passes, arming (next completion and
//! solicited only) with completion EQEs and MSI-X, overrun (CQ error event, context
//! status) and the `oi` bit.

mod common;
mod dp;

use dp::*;
use ferroverbs_hw::control::cmd::Opcode;
use ferroverbs_hw::control::cq::{cqc, query_cq_in, query_cq_out, CqcStatus};
use ferroverbs_hw::control::qp::QpcState;
use ferroverbs_hw::datapath::cqe::*;
use ferroverbs_hw::datapath::eqe::{EventType, MLX5_EVENT_TYPE_COMP, MLX5_EVENT_TYPE_CQ_ERROR};
use ferroverbs_hw::datapath::wqe::MLX5_WQE_CTRL_SOLICITED;

/// Sends `n` bytes A → B (a receive posted first); returns when both CQEs are written.
fn send(p: &mut Pair, src: &Mr, dst: &Mr, flags: u8) {
    let qpn = p.qa.qpn;
    p.b.post_recv(&mut p.qb, &[sge(dst, 0, 64)]);
    p.a.post(&mut p.qa, &send_wqe(qpn, &[sge(src, 0, 8)], None, flags));
    p.fabric.run_until_idle();
}

#[test]
fn owner_bit_over_many_passes() {
    let mut p = Pair::deterministic(Conn::default());
    let src = p.a.reg_mr(64, ALL);
    let dst = p.b.reg_mr(64, ALL);
    // 256-entry CQs, 1000 completions on each side: four passes of the ring.
    for i in 0..1000u32 {
        p.a.mr_write(&src, 0, &i.to_le_bytes());
        send(&mut p, &src, &dst, SIG);
        let r = p.b.poll(&mut p.bcq.1).expect("receive");
        assert_eq!(r.opcode(), MLX5_CQE_RESP_SEND);
        assert_eq!(u32::from(r.wqe_counter()), i & 0xffff);
        assert_eq!(p.a.poll(&mut p.acq.0).expect("send").opcode(), MLX5_CQE_REQ);
        assert!(p.b.poll(&mut p.bcq.1).is_none());
        assert_eq!(p.b.mr_read(&dst, 0, 4), i.to_le_bytes());
    }
}

fn ceq_events(n: &Node, from: u32) -> Vec<(u8, u32)> {
    let mut v = Vec::new();
    let mut ci = from;
    while let Some(e) = n.ceq_entry(ci) {
        v.push((
            e[1],
            u32::from_be_bytes([e[0x38], e[0x39], e[0x3a], e[0x3b]]) & 0xff_ffff,
        ));
        ci += 1;
    }
    v
}

#[test]
fn arming_posts_one_completion_event() {
    let mut p = Pair::deterministic(Conn::default());
    let src = p.a.reg_mr(64, ALL);
    let dst = p.b.reg_mr(64, ALL);
    let irq0 = p.b.h.sim.irq_count(1);
    // Not armed: no event.
    send(&mut p, &src, &dst, SIG);
    assert!(ceq_events(&p.b, 0).is_empty());
    assert!(p.b.poll(&mut p.bcq.1).is_some());
    // Armed at the consumer index: the next CQE posts one EQE and fires vector 1.
    p.b.arm(&p.bcq.1, 0, false);
    assert!(
        ceq_events(&p.b, 0).is_empty(),
        "nothing pending at arm time"
    );
    send(&mut p, &src, &dst, SIG);
    send(&mut p, &src, &dst, SIG);
    assert_eq!(
        ceq_events(&p.b, 0),
        vec![(MLX5_EVENT_TYPE_COMP, p.bcq.1.cqn)]
    );
    assert_eq!(p.b.h.sim.irq_count(1), irq0 + 1);
    // Arming with CQEs past the consumer index fires at once.
    p.b.h.eq_doorbell(p.b.up.uar, p.b.ceq, 1, true);
    p.b.arm(&p.bcq.1, 1, false);
    assert_eq!(ceq_events(&p.b, 0).len(), 2);
    assert_eq!(p.b.h.sim.irq_count(1), irq0 + 2);
    // An arm doorbell in another UAR is ignored.
    let uar2 = p.b.h.alloc_uar();
    let before = p.b.h.sim.stats().data_path.stray_doorbells;
    let word = ferroverbs_hw::datapath::dbr::cq_arm_word(
        2,
        ferroverbs_hw::datapath::dbr::CqArmCmd::NextCompletion,
        0,
    );
    ferroverbs_hw::Bus::write64(
        &p.b.h.bus,
        ferroverbs_hw::datapath::uar::uar_bar_offset(uar2) + 0x20,
        ferroverbs_hw::datapath::dbr::cq_arm_doorbell(word, p.bcq.1.cqn),
    );
    assert_eq!(p.b.h.sim.stats().data_path.stray_doorbells, before + 1);
}

/// An arm fires at once only for a CQE that no event announced yet: re-arming over
/// the CQE the last event announced (its consumer index still behind it, as
/// perftest's `-e` latency tests re-arm before they poll) posts no second event, and
/// the next CQE does; a CQE written while the CQ was not armed fires the next arm
/// at once (none is lost). QUERY_CQ reports the last announced index
/// (`last_notified_index`).
#[test]
fn an_arm_announces_each_cqe_once() {
    let mut p = Pair::deterministic(Conn::default());
    let src = p.a.reg_mr(64, ALL);
    let dst = p.b.reg_mr(64, ALL);
    let cqn = p.bcq.1.cqn;
    let notified = |n: &mut Node| {
        let o = n.h.simple(Opcode::QueryCq, 0, |i| {
            common::set(i, query_cq_in::cqn, cqn.into())
        });
        cqc::last_notified_index
            .at(query_cq_out::cq_context.bit)
            .get(&o)
    };
    p.b.arm(&p.bcq.1, 0, false);
    send(&mut p, &src, &dst, SIG);
    assert_eq!(ceq_events(&p.b, 0).len(), 1, "CQE 0 announced");
    assert_eq!(notified(&mut p.b), 0);
    // The event read (sn 1), the CQ re-armed before CQE 0 is polled: no event.
    p.b.h.eq_doorbell(p.b.up.uar, p.b.ceq, 1, true);
    p.b.arm(&p.bcq.1, 1, false);
    assert_eq!(ceq_events(&p.b, 0).len(), 1, "CQE 0 is not announced again");
    assert!(p.b.poll(&mut p.bcq.1).is_some());
    // The next CQE fires that arm.
    send(&mut p, &src, &dst, SIG);
    assert_eq!(
        ceq_events(&p.b, 0),
        vec![(MLX5_EVENT_TYPE_COMP, cqn), (MLX5_EVENT_TYPE_COMP, cqn)]
    );
    assert_eq!(notified(&mut p.b), 1);
    assert!(p.b.poll(&mut p.bcq.1).is_some());
    // A CQE while not armed, then an arm behind it (ci 2, CQE 2 pending): at once.
    send(&mut p, &src, &dst, SIG);
    assert_eq!(ceq_events(&p.b, 0).len(), 2, "not armed");
    p.b.h.eq_doorbell(p.b.up.uar, p.b.ceq, 2, true);
    p.b.arm(&p.bcq.1, 2, false);
    assert_eq!(ceq_events(&p.b, 0).len(), 3, "CQE 2 announced at the arm");
    assert_eq!(notified(&mut p.b), 2);
    // Announced: an arm before it is polled is quiet again, solicited or not.
    p.b.arm(&p.bcq.1, 3, false);
    p.b.arm(&p.bcq.1, 3, true);
    assert_eq!(ceq_events(&p.b, 0).len(), 3);
}

#[test]
fn solicited_only_arming() {
    let mut p = Pair::deterministic(Conn::default());
    let src = p.a.reg_mr(64, ALL);
    let dst = p.b.reg_mr(64, ALL);
    p.b.arm(&p.bcq.1, 0, true);
    send(&mut p, &src, &dst, SIG);
    let c = p.b.poll(&mut p.bcq.1).unwrap();
    assert!(!c.se());
    assert!(
        ceq_events(&p.b, 0).is_empty(),
        "an unsolicited receive does not fire"
    );
    send(&mut p, &src, &dst, SIG | MLX5_WQE_CTRL_SOLICITED);
    let c = p.b.poll(&mut p.bcq.1).unwrap();
    assert!(c.se(), "SE set in the CQE");
    assert_eq!(
        ceq_events(&p.b, 0),
        vec![(MLX5_EVENT_TYPE_COMP, p.bcq.1.cqn)]
    );
    // An error completion also fires a solicited-only arm.
    p.b.h.eq_doorbell(p.b.up.uar, p.b.ceq, 1, true);
    p.b.arm(&p.bcq.1, 1, true);
    p.b.post_recv(&mut p.qb, &[sge(&dst, 0, 64)]);
    p.b.modify(&p.qb, ferroverbs_hw::control::qp::QpTransition::ToErr);
    let c = p.b.poll(&mut p.bcq.1).unwrap();
    assert_eq!(c.opcode(), MLX5_CQE_RESP_ERR);
    assert_eq!(ceq_events(&p.b, 0).len(), 2);
}

fn query_status(n: &mut Node, cqn: u32) -> u64 {
    let o = n.h.simple(Opcode::QueryCq, 0, |i| {
        common::set(i, query_cq_in::cqn, cqn.into())
    });
    cqc::status.at(query_cq_out::cq_context.bit).get(&o)
}

#[test]
fn overrun_is_a_cq_error() {
    let mut p = Pair::deterministic(Conn::default());
    let qpn = p.qa.qpn;
    // A 4-entry send CQ for a fresh QP; a CQ_ERROR-subscribed EQ on vector 2.
    let small = p.a.create_cq(2);
    let (aeq, aeq_m) = p.a.h.create_eq(4, p.a.up.uar, 2, &[EventType::CqError]);
    p.a.h.eq_doorbell(p.a.up.uar, aeq, 0, true);
    let _ = qpn;
    let mut qa = p.a.create_qp(&small, &p.acq.1, 6, 4, 1);
    let mut qb = p.b.create_qp(&p.bcq.0, &p.bcq.1, 6, 4, 1);
    let c = Conn::default();
    p.connect_qps(&qa, &qb, &c, 0x900);
    let src = p.a.reg_mr(64, ALL);
    let dst = p.b.reg_mr(64, ALL);
    for _ in 0..5 {
        p.b.post_recv(&mut qb, &[sge(&dst, 0, 64)]);
    }
    let qpa = qa.qpn;
    for _ in 0..5 {
        p.a.post(&mut qa, &send_wqe(qpa, &[sge(&src, 0, 8)], None, SIG));
    }
    p.fabric.run_until_idle();
    assert_eq!(
        query_status(&mut p.a, small.cqn),
        u64::from(CqcStatus::CqOverflow.value())
    );
    let e = p.a.h.mapped[aeq_m].mem.bytes(0, 64);
    assert_eq!(e[1], MLX5_EVENT_TYPE_CQ_ERROR);
    assert_eq!(
        u32::from_be_bytes([e[0x20], e[0x21], e[0x22], e[0x23]]),
        small.cqn
    );
    assert_eq!(e[0x20 + 11], 1, "syndrome: overrun");
    assert_eq!(p.a.h.sim.irq_count(2), 1);
    assert_eq!(p.a.qp_state(&qa), QpcState::Err.value());
    let mut small = small;
    for _ in 0..4 {
        assert_eq!(p.a.poll(&mut small).unwrap().opcode(), MLX5_CQE_REQ);
    }
    assert!(
        p.a.poll(&mut small).is_none(),
        "nothing written after the overrun"
    );
    assert!(p.a.h.sim.stats().data_path.cqes_dropped >= 1);
}

#[test]
fn overrun_ignore_overwrites() {
    let mut p = Pair::deterministic(Conn::default());
    let oi = p.a.create_cq_with(2, true);
    let mut qa = p.a.create_qp(&oi, &p.acq.1, 6, 4, 1);
    let mut qb = p.b.create_qp(&p.bcq.0, &p.bcq.1, 6, 4, 1);
    let c = Conn::default();
    p.connect_qps(&qa, &qb, &c, 0x900);
    let src = p.a.reg_mr(64, ALL);
    let dst = p.b.reg_mr(64, ALL);
    let qpa = qa.qpn;
    let mut idx = Vec::new();
    for _ in 0..6 {
        p.b.post_recv(&mut qb, &[sge(&dst, 0, 64)]);
        idx.push(p.a.post(&mut qa, &send_wqe(qpa, &[sge(&src, 0, 8)], None, SIG)));
    }
    p.fabric.run_until_idle();
    assert_eq!(query_status(&mut p.a, oi.cqn), 0);
    assert_eq!(p.a.qp_state(&qa), QpcState::Rts.value());
    // Entries 4 and 5 overwrote slots 0 and 1 (second pass, owner 1).
    let mut late = oi;
    late.ci = 4;
    assert_eq!(p.a.poll(&mut late).unwrap().wqe_counter(), idx[4]);
    assert_eq!(p.a.poll(&mut late).unwrap().wqe_counter(), idx[5]);
}

//! Completion channels on the simulator: a CQ armed, a SEND arrives, the channel's
//! descriptor becomes readable (`poll(2)` with a timeout), `try_get_cq_event` names the
//! CQ, the CQ is polled, events acknowledged, re-armed; solicited-only arming ignores
//! an unsolicited SEND and fires on a solicited one; in threaded mode the descriptor
//! becomes readable with nobody driving the device, and an event-driven ping-pong
//! sleeps in `epoll_wait` between messages.

mod verbs_support;
use verbs_support::*;

use std::time::Duration;

use ferroverbs::verbs::{
    AccessFlags as A, CompletionQueue, CqEvent, Mtu, QpCap, QpInitAttr, RecvWr, SendFlags, SendWr,
    WcOpcode, WcStatus, WorkCompletion,
};
use ferroverbs_sim::SimBus;

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 32,
        max_recv_wr: 32,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    }
}

fn drain(cq: &mut CompletionQueue<'_, SimBus>) -> Vec<WorkCompletion> {
    let mut wc = [WorkCompletion::default(); 16];
    let n = cq.poll(&mut wc);
    wc[..n].to_vec()
}

#[test]
fn an_armed_cq_fires_its_channel_in_deterministic_mode() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let pa = ca.alloc_pd().unwrap();
    let pb = cb.alloc_pd().unwrap();
    let ch = cb.create_comp_channel().unwrap();
    assert!(
        ch.is_interrupt_driven(),
        "the simulator offers MSI-X eventfds"
    );
    assert_ne!(ch.vector(), 0);
    let mut cqa = ca.create_cq(32).unwrap();
    let mut cqb = ch.create_cq(32).unwrap();
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    let rbuf = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    for i in 0..8 {
        qb.post_recv(&[RecvWr::new(i, &[rbuf.sge(0, 4096).unwrap()])])
            .unwrap();
    }
    let fd = ch.fd();
    assert!(!readable(fd, 0));
    assert_eq!(ch.try_get_cq_event(), None);

    // Not armed: a SEND completes without an event.
    qa.post_send(&[SendWr::send_inline(1, &[b"quiet"]).signaled()])
        .unwrap();
    net.settle();
    assert!(!readable(fd, 20));
    assert_eq!(drain(&mut cqb).len(), 1);

    for round in 0..3u64 {
        cqb.req_notify(false);
        assert!(!readable(fd, 0), "nothing to report yet");
        qa.post_send(&[SendWr::send_inline(10 + round, &[b"ping"]).signaled()])
            .unwrap();
        net.settle();
        assert!(
            readable(fd, 1000),
            "round {round}: the descriptor became readable"
        );
        let ev = ch.try_get_cq_event().expect("an event");
        assert_eq!(ev, CqEvent { cqn: cqb.cqn() });
        assert_eq!(ch.unacked_events(cqb.cqn()), 1);
        ch.ack_cq_events(&mut cqb, 1);
        assert_eq!(ch.unacked_events(cqb.cqn()), 0);
        let wc = drain(&mut cqb);
        assert_eq!(wc.len(), 1);
        assert_eq!(wc[0].status, WcStatus::Success);
        assert_eq!(wc[0].opcode, WcOpcode::Recv);
        assert_eq!(wc[0].byte_len, 4);
        // One event per arm: a second SEND without re-arming raises none.
        qa.post_send(&[SendWr::send_inline(20 + round, &[b"more"]).signaled()])
            .unwrap();
        net.settle();
        assert!(!readable(fd, 20));
        assert_eq!(ch.try_get_cq_event(), None);
        assert_eq!(drain(&mut cqb).len(), 1);
        // Re-post the two receives.
        for i in 0..2 {
            qb.post_recv(&[RecvWr::new(100 + i, &[rbuf.sge(0, 4096).unwrap()])])
                .unwrap();
        }
    }
    // Arming with a completion already waiting fires at once.
    qa.post_send(&[SendWr::send_inline(50, &[b"early"]).signaled()])
        .unwrap();
    net.settle();
    cqb.req_notify(false);
    assert!(readable(fd, 1000));
    assert_eq!(
        ch.get_cq_event_timeout(Duration::from_secs(1)),
        Some(CqEvent { cqn: cqb.cqn() })
    );
    ch.ack_cq_events(&mut cqb, 1);
    assert_eq!(drain(&mut cqb).len(), 1);
    assert_eq!(ch.get_cq_event_timeout(Duration::from_millis(20)), None);
    drop(drain(&mut cqa));
}

#[test]
fn solicited_only_arming_ignores_unsolicited_sends() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let pa = ca.alloc_pd().unwrap();
    let pb = cb.alloc_pd().unwrap();
    let ch = cb.create_comp_channel().unwrap();
    let cqa = ca.create_cq(32).unwrap();
    let mut cqb = ch.create_cq(32).unwrap();
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    let rbuf = pb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    for i in 0..4 {
        qb.post_recv(&[RecvWr::new(i, &[rbuf.sge(0, 4096).unwrap()])])
            .unwrap();
    }
    cqb.req_notify(true);
    qa.post_send(&[SendWr::send_inline(1, &[b"unsolicited"])])
        .unwrap();
    net.settle();
    assert!(
        !readable(ch.fd(), 50),
        "an unsolicited SEND raises no event"
    );
    assert_eq!(ch.try_get_cq_event(), None);
    let wc = drain(&mut cqb);
    assert_eq!(wc.len(), 1, "the completion is there all the same");
    let mut wr = SendWr::send_inline(2, &[b"solicited"]);
    wr.flags = SendFlags::SOLICITED;
    qa.post_send(&[wr]).unwrap();
    net.settle();
    assert!(
        readable(ch.fd(), 1000),
        "a solicited SEND fires the channel"
    );
    assert_eq!(ch.try_get_cq_event(), Some(CqEvent { cqn: cqb.cqn() }));
    ch.ack_cq_events(&mut cqb, 1);
    let wc = drain(&mut cqb);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].byte_len, 9);
}

#[test]
fn two_cqs_share_a_channel_and_events_queue_until_taken() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let pa = ca.alloc_pd().unwrap();
    let pb = cb.alloc_pd().unwrap();
    let ch = cb.create_comp_channel().unwrap();
    let ch2 = cb.create_comp_channel().unwrap();
    assert_ne!(ch.vector(), ch2.vector());
    assert_ne!(ch.eqn(), ch2.eqn());
    let cqa = ca.create_cq(32).unwrap();
    let mut cq1 = ch.create_cq(8).unwrap();
    let mut cq2 = ch.create_cq(8).unwrap();
    let mut qa1 = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
    let mut qa2 = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
    let mut qb1 = pb.create_qp(&QpInitAttr::new(&cq1, &cq1, cap())).unwrap();
    let mut qb2 = pb.create_qp(&QpInitAttr::new(&cq2, &cq2, cap())).unwrap();
    connect(&mut qa1, &ga, &mut qb1, &gb, Mtu::Mtu1024);
    connect(&mut qa2, &ga, &mut qb2, &gb, Mtu::Mtu1024);
    let rbuf = pb.alloc_mr(64, A::LOCAL_WRITE).unwrap();
    qb1.post_recv(&[RecvWr::new(1, &[rbuf.sge(0, 64).unwrap()])])
        .unwrap();
    qb2.post_recv(&[RecvWr::new(2, &[rbuf.sge(0, 64).unwrap()])])
        .unwrap();
    cq1.req_notify(false);
    cq2.req_notify(false);
    qa1.post_send(&[SendWr::send_inline(1, &[b"a"])]).unwrap();
    qa2.post_send(&[SendWr::send_inline(2, &[b"b"])]).unwrap();
    net.settle();
    assert!(readable(ch.fd(), 1000));
    assert!(!readable(ch2.fd(), 0), "the other channel stays quiet");
    let e1 = ch.try_get_cq_event().unwrap();
    // The second event waits in the channel: the descriptor stays readable.
    assert!(readable(ch.fd(), 0));
    let e2 = ch.try_get_cq_event().unwrap();
    let mut got = [e1.cqn, e2.cqn];
    got.sort();
    let mut want = [cq1.cqn(), cq2.cqn()];
    want.sort();
    assert_eq!(got, want);
    assert_eq!(ch.try_get_cq_event(), None);
    ch.ack_cq_events(&mut cq1, 1);
    ch.ack_cq_events(&mut cq2, 1);
    assert_eq!(
        ch.unacked_events(cq1.cqn()) + ch.unacked_events(cq2.cqn()),
        0
    );
    assert_eq!(drain(&mut cq1).len() + drain(&mut cq2).len(), 2);
}

#[test]
fn threaded_mode_the_device_makes_the_descriptor_readable() {
    let (_net, (ca, ga), (cb, gb)) = two_nics(true);
    let pa = ca.alloc_pd().unwrap();
    let pb = cb.alloc_pd().unwrap();
    let cha = ca.create_comp_channel().unwrap();
    let chb = cb.create_comp_channel().unwrap();
    let mut cqa = cha.create_cq(32).unwrap();
    let mut cqb = chb.create_cq(32).unwrap();
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    // Real time, loss-free: no ACK timeout may fire while a device thread waits for a
    // CPU (a retransmission is harmless here, running the retry budget out is not).
    connect_timeout(
        &mut qa,
        &ga,
        &mut qb,
        &gb,
        Mtu::Mtu1024,
        REAL_TIME_ACK_TIMEOUT,
    );
    let ra = pa.alloc_mr(64, A::LOCAL_WRITE).unwrap();
    let rb = pb.alloc_mr(64, A::LOCAL_WRITE).unwrap();

    // An event-driven ping-pong: each side sleeps in epoll_wait on its channel.
    // SAFETY: epoll_create1 takes no pointers.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(ep >= 0);
    for (fd, tag) in [(cha.fd(), 1u64), (chb.fd(), 2u64)] {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: tag,
        };
        // SAFETY: a valid epoll descriptor, an open fd, a live epoll_event.
        assert_eq!(
            unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) },
            0
        );
    }
    qa.post_recv(&[RecvWr::new(0, &[ra.sge(0, 64).unwrap()])])
        .unwrap();
    qb.post_recv(&[RecvWr::new(0, &[rb.sge(0, 64).unwrap()])])
        .unwrap();
    cqa.req_notify(false);
    cqb.req_notify(false);
    const ROUNDS: u32 = 20;
    let (mut wakeups, mut events) = (0, 0);
    qa.post_send(&[SendWr::send_inline(0, &[b"ping"]).signaled()])
        .unwrap();
    let mut received = 0;
    while received < 2 * ROUNDS {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 2];
        // SAFETY: `evs` is a live array of 2 epoll_events; 60 s timeout (a hang
        // guard: a message never takes a minute, however loaded the machine).
        let n = unsafe { libc::epoll_wait(ep, evs.as_mut_ptr(), 2, 60_000) };
        assert!(n > 0, "no event within 60 s after {received} messages");
        wakeups += 1;
        for e in &evs[..n as usize] {
            let tag = e.u64;
            let (ch, cq, qp, mr) = if tag == 1 {
                (&cha, &mut cqa, &mut qa, &ra)
            } else {
                (&chb, &mut cqb, &mut qb, &rb)
            };
            let Some(ev) = ch.try_get_cq_event() else {
                continue;
            };
            events += 1;
            assert_eq!(ev.cqn, cq.cqn());
            ch.ack_cq_events(cq, 1);
            cq.req_notify(false);
            let mut wc = [WorkCompletion::default(); 8];
            let k = cq.poll(&mut wc);
            for w in &wc[..k] {
                assert_eq!(w.status, WcStatus::Success);
                if w.opcode == WcOpcode::Recv {
                    received += 1;
                    qp.post_recv(&[RecvWr::new(0, &[mr.sge(0, 64).unwrap()])])
                        .unwrap();
                    if received < 2 * ROUNDS {
                        qp.post_send(&[SendWr::send_inline(0, &[b"pong"]).signaled()])
                            .unwrap();
                    }
                }
            }
        }
    }
    // SAFETY: closing the epoll descriptor this test created.
    unsafe { libc::close(ep) };
    // Every message was found after an epoll wake-up (one wake-up may serve both
    // sides when their events coincide). 2 * ROUNDS messages make 4 * ROUNDS CQEs,
    // a send and a receive CQE each. An event fires either when a CQE is written to
    // an armed CQ (at most one per CQE) or when arming finds CQEs at or after the
    // consumer index it names (mlx5 arming semantics, as `ibv_req_notify_cq` then
    // poll relies on). This loop re-arms before it polls, so the CQE that caused an
    // event is still unpolled at the re-arm and fires a second event at once; the
    // poll that follows that arm consumes it, so each CQE is behind at most one
    // arm-time event: at most 2 events per CQE. A wake-up may find no event: the
    // device writes the EQE, then signals the descriptor, and a `try_get_cq_event`
    // between the two takes the event before the signal, which then wakes
    // `epoll_wait` for nothing; at most one such wake-up per event.
    assert!(
        events > 0 && events <= 2 * 4 * ROUNDS as usize,
        "{events} events"
    );
    assert!(
        wakeups <= 2 * events,
        "{wakeups} wake-ups for {events} events"
    );
}

#[test]
fn a_channel_is_destroyed_with_its_eq_and_gives_its_vector_back() {
    let sim = sim();
    let ctx = open(&sim, 1);
    let before = sim.stats().objects.total();
    let v = {
        let ch = ctx.create_comp_channel().unwrap();
        let cq = ch.create_cq(16).unwrap();
        assert!(sim.stats().objects.total() >= before + 2, "an EQ and a CQ");
        drop(cq);
        ch.vector()
    };
    assert_eq!(sim.stats().objects.total(), before);
    let ch = ctx.create_comp_channel().unwrap();
    assert_eq!(ch.vector(), v, "the vector was given back");
    drop(ch);
    ctx.close().unwrap();
    assert_nothing_left(&sim);
}

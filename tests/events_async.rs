//! Asynchronous events through `Context::get_async_event` / `poll_async_events`, each
//! produced by an injected cause on the simulator (deterministic mode): a CQ overrun,
//! a remote access error, the link going down and up, and a fatal health syndrome.

mod verbs_support;
use verbs_support::*;

use std::time::Duration;

use ferroverbs::verbs::{
    AccessFlags as A, AsyncEvent, CqOptions, Mtu, QpCap, QpInitAttr, QpState, RemoteAddr, SendWr,
    WcStatus, WorkCompletion, CQ_ERR_SYNDROME_OVERRUN,
};
use ferroverbs::Failure;
use ferroverbs_sim::fault::FatalHealth;

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

fn all_events<B: ferroverbs_hw::Bus>(ctx: &ferroverbs::Context<B>) -> Vec<AsyncEvent> {
    let mut buf = [AsyncEvent::Other {
        event_type: 0,
        sub_type: 0,
    }; 8];
    let mut out = Vec::new();
    loop {
        let n = ctx.poll_async_events(&mut buf);
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn a_cq_overrun_raises_a_cq_error_event() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let pa = ca.alloc_pd().unwrap();
    let pb = cb.alloc_pd().unwrap();
    // Two entries: the third completion overruns.
    let mut small = ca.create_cq(1).unwrap();
    assert_eq!(small.capacity(), 1);
    let cqb = cb.create_cq(16).unwrap();
    let mut qa = pa
        .create_qp(&QpInitAttr::new(&small, &small, cap()))
        .unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    let src = pa.alloc_mr(64, A::empty()).unwrap();
    let dst = pb.alloc_mr(64, A::LOCAL_WRITE | A::REMOTE_WRITE).unwrap();
    assert_eq!(ca.get_async_event(), None);
    for i in 0..4 {
        qa.post_send(&[
            SendWr::rdma_write(i, &[src.sge(0, 64).unwrap()], dst.remote(0)).signaled(),
        ])
        .unwrap();
        net.settle();
    }
    let evs = all_events(&ca);
    assert!(
        evs.contains(&AsyncEvent::CqError {
            cqn: small.cqn(),
            syndrome: CQ_ERR_SYNDROME_OVERRUN
        }),
        "{evs:?}"
    );
    assert_eq!(evs[0].ibv_name(), "IBV_EVENT_CQ_ERR");
    // Nothing is reported twice.
    assert_eq!(ca.get_async_event(), None);
    let mut wc = [WorkCompletion::default(); 4];
    let _ = small.poll(&mut wc);
    assert_eq!(net.a.stats().data_path.qp_errors.min(1), 1);
}

#[test]
fn a_cq_ignoring_overrun_stays_usable_and_raises_nothing() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let pa = ca.alloc_pd().unwrap();
    let pb = cb.alloc_pd().unwrap();
    let opts = CqOptions {
        ignore_overrun: true,
        ..CqOptions::default()
    };
    let mut small = ca.create_cq_with(1, opts).unwrap();
    let cqb = cb.create_cq(16).unwrap();
    let mut qa = pa
        .create_qp(&QpInitAttr::new(&small, &small, cap()))
        .unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    let src = pa.alloc_mr(64, A::empty()).unwrap();
    let dst = pb.alloc_mr(64, A::LOCAL_WRITE | A::REMOTE_WRITE).unwrap();
    for i in 0..4 {
        qa.post_send(&[
            SendWr::rdma_write(i, &[src.sge(0, 64).unwrap()], dst.remote(0)).signaled(),
        ])
        .unwrap();
        net.settle();
    }
    assert_eq!(all_events(&ca), vec![], "no CQ error with oi");
    assert_eq!(qa.query().unwrap().state, QpState::Rts);
    assert_eq!(net.a.stats().data_path.qp_errors, 0);
    // Still working: the next completions are polled as usual.
    let mut wc = [WorkCompletion::default(); 4];
    while small.poll(&mut wc) > 0 {}
    qa.post_send(&[SendWr::rdma_write(9, &[src.sge(0, 64).unwrap()], dst.remote(0)).signaled()])
        .unwrap();
    let w = wait(&net, &mut small, 1)[0];
    assert_eq!((w.wr_id, w.status), (9, WcStatus::Success));
}

#[test]
fn a_remote_access_error_puts_the_responder_qp_in_error_with_its_event() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let pa = ca.alloc_pd().unwrap();
    let pb = cb.alloc_pd().unwrap();
    let mut cqa = ca.create_cq(16).unwrap();
    let cqb = cb.create_cq(16).unwrap();
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    connect(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024);
    let src = pa.alloc_mr(64, A::empty()).unwrap();
    let dst = pb.alloc_mr(64, A::LOCAL_WRITE).unwrap(); // no remote write
    assert_eq!(cb.get_async_event(), None);
    let fd = cb
        .async_event_fd()
        .expect("the simulator offers MSI-X eventfds");
    while readable(fd, 0) {
        cb.get_async_event();
    }
    qa.post_send(&[SendWr::rdma_write(7, &[src.sge(0, 64).unwrap()], dst.remote(0)).signaled()])
        .unwrap();
    let wc = wait(&net, &mut cqa, 1)[0];
    assert_eq!(wc.status, WcStatus::RemAccessErr);
    assert!(readable(fd, 1000), "the async EQ's vector fired");
    let ev = cb.get_async_event().expect("an event");
    assert_eq!(ev, AsyncEvent::QpAccessError { qpn: qb.qp_num() });
    assert!(ev.is_qp_error());
    assert_eq!(ev.qpn(), Some(qb.qp_num()));
    assert_eq!(ev.ibv_name(), "IBV_EVENT_QP_ACCESS_ERR");
    assert!(!readable(fd, 0), "taking the event cleared the descriptor");
    assert_eq!(qb.query().unwrap().state, QpState::Err);
    assert_eq!(cb.get_async_event(), None);

    // An invalid key of another kind: a WRITE out of bounds on a fresh pair gives
    // the same event for the new responder QP.
    let bad = RemoteAddr {
        addr: dst.addr() + 4096,
        rkey: dst.rkey(),
    };
    let mut qa2 = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
    let mut qb2 = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    connect(&mut qa2, &ga, &mut qb2, &gb, Mtu::Mtu1024);
    qa2.post_send(&[SendWr::rdma_write(8, &[src.sge(0, 64).unwrap()], bad).signaled()])
        .unwrap();
    let wc = wait(&net, &mut cqa, 1)[0];
    assert_eq!(wc.status, WcStatus::RemAccessErr);
    assert_eq!(
        cb.get_async_event(),
        Some(AsyncEvent::QpAccessError { qpn: qb2.qp_num() })
    );
}

#[test]
fn an_operation_the_responder_does_not_enable_raises_a_request_error_event() {
    let (net, (ca, ga), (cb, gb)) = two_nics(false);
    let pa = ca.alloc_pd().unwrap();
    let pb = cb.alloc_pd().unwrap();
    let mut cqa = ca.create_cq(16).unwrap();
    let cqb = cb.create_cq(16).unwrap();
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    // No remote access enabled on either QP.
    connect_with(&mut qa, &ga, &mut qb, &gb, Mtu::Mtu1024, A::empty());
    let src = pa.alloc_mr(64, A::empty()).unwrap();
    let all = A::LOCAL_WRITE | A::REMOTE_WRITE;
    let dst = pb.alloc_mr(64, all).unwrap();
    qa.post_send(&[SendWr::rdma_write(1, &[src.sge(0, 64).unwrap()], dst.remote(0)).signaled()])
        .unwrap();
    let wc = wait(&net, &mut cqa, 1)[0];
    assert_eq!(wc.status, WcStatus::RemInvReqErr);
    let ev = cb.get_async_event().expect("an event");
    assert_eq!(ev, AsyncEvent::QpRequestError { qpn: qb.qp_num() });
    assert_eq!(ev.ibv_name(), "IBV_EVENT_QP_REQ_ERR");
    assert_eq!(qb.query().unwrap().state, QpState::Err);
    // The requester gets an error completion, not an async event.
    assert_eq!(ca.get_async_event(), None);
}

#[test]
fn link_down_and_up_give_port_events() {
    let sim = sim();
    let ctx = open(&sim, 1);
    assert_eq!(ctx.get_async_event(), None);
    let fd = ctx.async_event_fd().unwrap();
    assert!(sim.set_link(1, false));
    assert!(readable(fd, 1000));
    assert_eq!(
        ctx.get_async_event(),
        Some(AsyncEvent::PortError { port: 1 })
    );
    assert_eq!(ctx.get_async_event(), None);
    assert!(sim.set_link(1, true));
    assert!(readable(fd, 1000));
    assert_eq!(
        ctx.get_async_event(),
        Some(AsyncEvent::PortActive { port: 1 })
    );
    // Several at once, in order.
    sim.set_link(1, false);
    sim.set_link(1, true);
    sim.set_link(1, false);
    let evs = all_events(&ctx);
    assert_eq!(
        evs,
        vec![
            AsyncEvent::PortError { port: 1 },
            AsyncEvent::PortActive { port: 1 },
            AsyncEvent::PortError { port: 1 },
        ]
    );
    assert_eq!(evs[1].ibv_name(), "IBV_EVENT_PORT_ACTIVE");
}

#[test]
fn a_fatal_health_syndrome_gives_device_fatal_once() {
    let sim = sim();
    let ctx = open(&sim, 1);
    sim.set_link(1, false);
    sim.advance(Duration::from_millis(10));
    assert_eq!(ctx.failure(), None);
    sim.raise_fatal(Some(FatalHealth {
        synd: 1,
        ext_synd: 0x42,
        rfr: true,
    }));
    let failure = Failure::FatalSyndrome {
        synd: 1,
        ext_synd: 0x42,
    };
    // What was queued before the failure comes first, then the failure, once.
    let evs = all_events(&ctx);
    assert_eq!(
        evs,
        vec![
            AsyncEvent::PortError { port: 1 },
            AsyncEvent::DeviceFatal { failure }
        ]
    );
    assert_eq!(evs[1].ibv_name(), "IBV_EVENT_DEVICE_FATAL");
    assert_eq!(ctx.failure(), Some(failure));
    assert_eq!(ctx.get_async_event(), None);
    assert!(ctx.alloc_pd().is_err());
}

#[test]
fn a_health_syndrome_without_rfr_is_a_report_not_a_failure() {
    // rdma-core `sensor_fw_synd_rfr` and Linux `health.c`: a syndrome is fatal only
    // with the reset-for-recovery bit; alone it is reported and the device works on.
    let sim = sim();
    let ctx = open(&sim, 1);
    sim.raise_fatal(Some(FatalHealth {
        synd: 0x10,
        ext_synd: 0x0003,
        rfr: false,
    }));
    let evs = all_events(&ctx);
    assert_eq!(
        evs,
        vec![AsyncEvent::HealthReport {
            synd: 0x10,
            ext_synd: 3
        }]
    );
    assert_eq!(ctx.failure(), None);
    assert_eq!(ctx.health_reports(), 1);
    // Still working: commands run, and the same syndrome is not reported again.
    let pd = ctx
        .alloc_pd()
        .expect("a device with a non-fatal syndrome works");
    drop(pd);
    sim.advance(Duration::from_secs(3));
    ctx.process_events().unwrap();
    assert_eq!(ctx.get_async_event(), None);
    assert_eq!(ctx.health_reports(), 1);
    // A different syndrome is a new report.
    sim.raise_fatal(Some(FatalHealth {
        synd: 0x1,
        ext_synd: 0,
        rfr: false,
    }));
    ctx.process_events().unwrap();
    assert_eq!(
        ctx.get_async_event(),
        Some(AsyncEvent::HealthReport {
            synd: 1,
            ext_synd: 0
        })
    );
    assert_eq!(ctx.health_reports(), 2);
    // The firmware then asks for a reset: now it is fatal.
    sim.raise_fatal(Some(FatalHealth {
        synd: 0x1,
        ext_synd: 0,
        rfr: true,
    }));
    assert_eq!(
        all_events(&ctx),
        vec![AsyncEvent::DeviceFatal {
            failure: Failure::FatalSyndrome {
                synd: 1,
                ext_synd: 0
            }
        }]
    );
}

#[test]
fn a_stalled_health_counter_gives_device_fatal() {
    let sim = sim();
    let ctx = open(&sim, 1);
    sim.stall_health(true);
    let mut got = None;
    for _ in 0..10 {
        sim.advance(Duration::from_millis(600));
        if let Some(ev) = ctx.get_async_event() {
            got = Some(ev);
            break;
        }
    }
    assert!(
        matches!(
            got,
            Some(AsyncEvent::DeviceFatal {
                failure: Failure::CounterStalled { .. }
            })
        ),
        "{got:?}"
    );
}

#[test]
fn try_and_timed_async_events_never_block_and_the_fd_stays_readable_while_queued() {
    let sim = sim();
    let ctx = open(&sim, 1);
    let fd = ctx.async_event_fd().unwrap();
    assert_eq!(ctx.try_get_async_event(), None);
    let t = std::time::Instant::now();
    assert_eq!(
        ctx.get_async_event_timeout(Some(Duration::from_millis(30))),
        None
    );
    assert!(t.elapsed() >= Duration::from_millis(30));
    assert!(!readable(fd, 0));
    // Two events at once: after the first is taken the descriptor is still readable
    // (an application sleeping in poll/epoll would otherwise never see the second).
    assert!(sim.set_link(1, false));
    assert!(sim.set_link(1, true));
    assert!(readable(fd, 1000));
    assert_eq!(
        ctx.try_get_async_event(),
        Some(AsyncEvent::PortError { port: 1 })
    );
    assert!(
        readable(fd, 0),
        "an event is queued but the descriptor is not readable"
    );
    assert_eq!(
        ctx.get_async_event_timeout(Some(Duration::from_secs(5))),
        Some(AsyncEvent::PortActive { port: 1 })
    );
    assert!(!readable(fd, 0));
    assert_eq!(ctx.try_get_async_event(), None);
    // The timed form wakes on the descriptor when another thread causes an event.
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            sim.set_link(1, false);
        });
        assert_eq!(
            ctx.get_async_event_timeout(Some(Duration::from_secs(10))),
            Some(AsyncEvent::PortError { port: 1 })
        );
    });
}

//! The CM's state machines between two engines on a simulated wire with virtual time:
//! the exchanges rdma_cm makes (RC connect, accept, RTU, disconnect, TimeWait; SIDR),
//! rejections, lost and duplicated MADs answered as Linux's `ib_cm` answers them,
//! bounded retransmissions, and MADs that are not valid.

use std::time::Duration;

use ferroverbs_cm::engine::*;
use ferroverbs_cm::ipcm::{self, PortSpace};
use ferroverbs_cm::msg::{rej_reason, sidr_status, Message, MsgKind, Path, TransportType};
use ferroverbs_cm::CmMad;

const A: u8 = b'a';
const B: u8 = b'b';
const MS: Duration = Duration::from_millis(1);

fn sid() -> u64 {
    ipcm::service_id(PortSpace::Tcp, 7174)
}

/// Decides whether the wire loses a MAD (its sender, the MAD).
type DropRule = Box<dyn FnMut(u8, &CmMad) -> bool>;

/// Two engines, a wire between them and a virtual clock.
struct Net {
    a: Engine<u8>,
    b: Engine<u8>,
    now: Duration,
    /// Whether to drop a MAD (sender, the MAD).
    drop: DropRule,
    /// Every MAD that crossed the wire: (sender, name).
    log: Vec<(u8, &'static str)>,
    /// Every MAD sent, delivered or not.
    sent: Vec<(u8, CmMad)>,
}

impl Net {
    fn new() -> Net {
        Net {
            a: Engine::new(Config::rdma_cm(0xaaaa, 1)),
            b: Engine::new(Config::rdma_cm(0xbbbb, 2)),
            now: Duration::from_secs(1),
            drop: Box::new(|_, _| false),
            log: Vec::new(),
            sent: Vec::new(),
        }
    }

    /// Delivers MADs until both outboxes are empty.
    fn pump(&mut self) {
        loop {
            let mut moved = false;
            while let Some(o) = self.a.poll_transmit() {
                moved = true;
                assert_eq!(o.to, B);
                self.sent.push((A, o.mad));
                if !(self.drop)(A, &o.mad) {
                    self.log.push((A, o.mad.msg.name()));
                    self.b.receive(self.now, A, &o.mad.to_bytes()).unwrap();
                }
            }
            while let Some(o) = self.b.poll_transmit() {
                moved = true;
                assert_eq!(o.to, A);
                self.sent.push((B, o.mad));
                if !(self.drop)(B, &o.mad) {
                    self.log.push((B, o.mad.msg.name()));
                    self.a.receive(self.now, B, &o.mad.to_bytes()).unwrap();
                }
            }
            if !moved {
                return;
            }
        }
    }

    /// Moves time forward by `d`, running each timer when it is due.
    fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        self.pump();
        loop {
            let next = [self.a.next_deadline(), self.b.next_deadline()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    self.a.on_timers(self.now);
                    self.b.on_timers(self.now);
                    self.pump();
                }
                _ => break,
            }
        }
        self.now = end;
    }

    fn events(e: &mut Engine<u8>) -> Vec<Event<u8>> {
        std::iter::from_fn(|| e.poll_event()).collect()
    }
}

fn connect_params() -> ConnectParams {
    let mut private_data = vec![0u8; 36];
    private_data.extend_from_slice(b"hello from A");
    ConnectParams {
        service_id: sid(),
        transport: TransportType::Rc,
        local_qpn: 0x111,
        starting_psn: 0xa0a0a,
        responder_resources: 4,
        initiator_depth: 2,
        retry_count: 7,
        rnr_retry_count: 6,
        path_mtu: 3,
        srq: false,
        path: Path::default(),
        private_data,
    }
}

fn accept_params() -> AcceptParams {
    AcceptParams {
        local_qpn: 0x222,
        starting_psn: 0xb0b0b,
        responder_resources: 3,
        initiator_depth: 1,
        rnr_retry_count: 5,
        srq: false,
        private_data: b"welcome".to_vec(),
    }
}

/// Connects A to B's listener; returns (A's id, B's id).
fn established(n: &mut Net) -> (ConnId, ConnId) {
    n.b.listen(sid()).unwrap();
    let ia = n.a.connect(n.now, B, &connect_params()).unwrap();
    n.pump();
    let ib = match Net::events(&mut n.b).as_slice() {
        [Event::ConnectRequest { id, from, req }] => {
            assert_eq!(*from, A);
            assert_eq!(&req.private_data[36..48], b"hello from A");
            assert_eq!((req.local_qpn, req.starting_psn), (0x111, 0xa0a0a));
            *id
        }
        e => panic!("{e:?}"),
    };
    n.b.accept(n.now, ib, &accept_params()).unwrap();
    n.pump();
    match Net::events(&mut n.a).as_slice() {
        [Event::ConnectResponse { id, rep }] => {
            assert_eq!(*id, ia);
            assert_eq!(&rep.private_data[..7], b"welcome");
        }
        e => panic!("{e:?}"),
    }
    n.a.establish(ia).unwrap();
    n.pump();
    assert_eq!(Net::events(&mut n.a), [Event::Established { id: ia }]);
    assert_eq!(Net::events(&mut n.b), [Event::Established { id: ib }]);
    (ia, ib)
}

#[test]
fn connect_accept_establish_with_the_negotiated_qp_attributes() {
    let mut n = Net::new();
    let (ia, ib) = established(&mut n);
    assert_eq!(n.log, [(A, "REQ"), (B, "REP"), (A, "RTU")]);
    let pa = n.a.qp_params(ia).unwrap();
    let pb = n.b.qp_params(ib).unwrap();
    // PSNs and QPNs cross; READ/atomic depths swap (responder = peer's initiator).
    assert_eq!(
        (pa.dest_qpn, pa.sq_psn, pa.rq_psn),
        (0x222, 0xb0b0b, 0xa0a0a)
    );
    assert_eq!(
        (pb.dest_qpn, pb.sq_psn, pb.rq_psn),
        (0x111, 0xa0a0a, 0xb0b0b)
    );
    assert_eq!((pa.max_dest_rd_atomic, pa.max_rd_atomic), (1, 3));
    assert_eq!((pb.max_dest_rd_atomic, pb.max_rd_atomic), (3, 1));
    assert_eq!(
        (pa.retry_cnt, pa.rnr_retry, pb.retry_cnt, pb.rnr_retry),
        (7, 5, 7, 6)
    );
    assert_eq!((pa.path_mtu, pb.path_mtu), (3, 3));
    // Both ACK time-outs from a packet life time of 16 and an ACK delay of 15.
    assert_eq!((pa.timeout, pb.timeout), (17, 17));
    // The REQ carried rdma_cm's values.
    let Message::Req(req) = n.sent[0].1.msg else {
        panic!()
    };
    assert_eq!(
        (req.remote_cm_response_timeout, req.max_cm_retries, req.pkey),
        (20, 15, 0xffff)
    );
    assert_eq!(
        n.sent[1].1.tid, n.sent[0].1.tid,
        "the REP echoes the REQ's TID"
    );
    assert_eq!(n.sent[2].1.tid, n.sent[0].1.tid, "so does the RTU");
}

#[test]
fn disconnect_then_timewait() {
    let mut n = Net::new();
    let (ia, ib) = established(&mut n);
    n.log.clear();
    n.a.disconnect(n.now, ia).unwrap();
    n.pump();
    assert_eq!(Net::events(&mut n.b), [Event::Disconnected { id: ib }]);
    assert_eq!(n.b.state(ib), Some(State::DreqRcvd));
    n.b.disconnect(n.now, ib).unwrap();
    n.pump();
    assert_eq!(n.log, [(A, "DREQ"), (B, "DREP")]);
    assert_eq!(Net::events(&mut n.a), [Event::Disconnected { id: ia }]);
    assert_eq!(
        (n.a.state(ia), n.b.state(ib)),
        (Some(State::TimeWait), Some(State::TimeWait))
    );
    // TimeWait: conv(packet life time + 1) = 2^(17-8) ms = 512 ms.
    n.run_for(511 * MS);
    assert!(Net::events(&mut n.a).is_empty());
    n.run_for(MS);
    assert_eq!(Net::events(&mut n.a), [Event::TimewaitExit { id: ia }]);
    assert_eq!(Net::events(&mut n.b), [Event::TimewaitExit { id: ib }]);
    assert_eq!(n.a.state(ia), Some(State::Idle));
}

#[test]
fn no_listener_is_rej_invalid_service_id_and_reject_carries_private_data() {
    let mut n = Net::new();
    let ia = n.a.connect(n.now, B, &connect_params()).unwrap();
    n.pump();
    match Net::events(&mut n.a).as_slice() {
        [Event::Rejected { id, rej }] => {
            assert_eq!(*id, ia);
            assert_eq!(
                (rej.reason, rej.msg_rejected),
                (rej_reason::INVALID_SERVICE_ID, MsgKind::Req)
            );
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(n.a.state(ia), Some(State::Idle));
    // A consumer reject.
    n.b.listen(sid()).unwrap();
    assert_eq!(n.b.listen(sid()), Err(CmError::AddrInUse(sid())));
    let ia = n.a.connect(n.now, B, &connect_params()).unwrap();
    n.pump();
    let Some(Event::ConnectRequest { id: ib, .. }) = n.b.poll_event() else {
        panic!()
    };
    n.b.reject(ib, rej_reason::CONSUMER_DEFINED, b"go away")
        .unwrap();
    n.pump();
    match Net::events(&mut n.a).as_slice() {
        [Event::Rejected { id, rej }] => {
            assert_eq!(*id, ia);
            assert_eq!(rej.reason, 28);
            assert_eq!(&rej.private_data[..7], b"go away");
        }
        e => panic!("{e:?}"),
    }
    // Misuse is typed.
    assert!(matches!(
        n.b.accept(n.now, ib, &accept_params()),
        Err(CmError::InvalidState { op: "accept", .. })
    ));
    assert_eq!(n.a.establish(ConnId(7)), Err(CmError::UnknownId(ConnId(7))));
    let mut p = connect_params();
    p.private_data = vec![0; 93];
    assert!(matches!(
        n.a.connect(n.now, B, &p),
        Err(CmError::PrivateDataTooLong { max: 92, .. })
    ));
}

#[test]
fn a_lost_req_is_sent_again_with_the_same_ids_after_4608_ms() {
    let mut n = Net::new();
    n.b.listen(sid()).unwrap();
    let mut first = true;
    n.drop = Box::new(move |from, m| {
        let lose = from == A && first && matches!(m.msg, Message::Req(_));
        if lose {
            first = false;
        }
        lose
    });
    n.a.connect(n.now, B, &connect_params()).unwrap();
    n.run_for(4607 * MS);
    assert_eq!(n.sent.len(), 1, "nothing before the time-out");
    n.run_for(MS);
    assert_eq!(n.sent.len(), 2, "the REQ again");
    assert_eq!(n.sent[0].1, n.sent[1].1, "the same REQ, TID and comm ID");
    assert!(matches!(
        n.b.poll_event(),
        Some(Event::ConnectRequest { .. })
    ));
}

#[test]
fn an_unanswered_req_fails_after_16_sends() {
    let mut n = Net::new();
    n.drop = Box::new(|_, _| true);
    let ia = n.a.connect(n.now, B, &connect_params()).unwrap();
    n.run_for(16 * 4608 * MS - MS);
    assert!(Net::events(&mut n.a).is_empty());
    n.run_for(MS);
    assert_eq!(Net::events(&mut n.a), [Event::Unreachable { id: ia }]);
    assert_eq!(n.sent.len(), 16, "the REQ and 15 retransmissions");
    assert_eq!(n.a.next_deadline(), None, "nothing left to wait for");
}

#[test]
fn timers_of_destroyed_connections_do_not_accumulate() {
    // A client that connects and gives up at once, 5,000 times within one REQ
    // time-out: each connection's retransmission timer is cancelled with it, and the
    // timers keep memory for the live connections only (the engine's timer heap
    // drops cancelled entries instead of keeping them until their deadline).
    let mut n = Net::new();
    n.drop = Box::new(|_, _| true);
    for _ in 0..5000 {
        let id = n.a.connect(n.now, B, &connect_params()).unwrap();
        n.a.destroy(n.now, id).unwrap();
        n.run_for(MS / 2);
    }
    assert!(
        n.a.timer_entries() <= 200,
        "{} timer entries for no live connection",
        n.a.timer_entries()
    );
    // Live connections keep theirs, one each.
    let ids: Vec<_> = (0..100)
        .map(|_| n.a.connect(n.now, B, &connect_params()).unwrap())
        .collect();
    assert!(n.a.next_deadline().is_some());
    assert!(n.a.timer_entries() >= ids.len());
}

#[test]
fn a_duplicate_req_while_the_application_decides_gets_an_mra() {
    let mut n = Net::new();
    n.b.listen(sid()).unwrap();
    let ia = n.a.connect(n.now, B, &connect_params()).unwrap();
    n.pump();
    let Some(Event::ConnectRequest { id: ib, .. }) = n.b.poll_event() else {
        panic!()
    };
    // B's application sits on it: A's REQ time-out sends the REQ again, B answers MRA.
    n.run_for(4608 * MS);
    assert_eq!(&n.log[1..], [(A, "REQ"), (B, "MRA")]);
    assert_eq!(n.a.state(ia), Some(State::MraReqRcvd));
    assert!(
        Net::events(&mut n.b).is_empty(),
        "the duplicate is not reported"
    );
    // The MRA's 2^(24-8) ms + 512 ms: no REQ for that long.
    n.run_for(65_536 * MS);
    assert_eq!(n.log.len(), 3);
    n.b.accept(n.now, ib, &accept_params()).unwrap();
    n.pump();
    assert!(matches!(
        n.a.poll_event(),
        Some(Event::ConnectResponse { .. })
    ));
}

#[test]
fn a_lost_rtu_is_healed_by_the_rep_retransmission() {
    let mut n = Net::new();
    n.b.listen(sid()).unwrap();
    let mut first = true;
    n.drop = Box::new(move |_, m| {
        let lose = first && matches!(m.msg, Message::Rtu(_));
        if lose {
            first = false;
        }
        lose
    });
    let ia = n.a.connect(n.now, B, &connect_params()).unwrap();
    n.pump();
    let Some(Event::ConnectRequest { id: ib, .. }) = n.b.poll_event() else {
        panic!()
    };
    n.b.accept(n.now, ib, &accept_params()).unwrap();
    n.pump();
    n.a.poll_event();
    n.a.establish(ia).unwrap();
    n.pump();
    assert_eq!(n.b.state(ib), Some(State::RepSent));
    // B's REP time-out: conv(REQ local response time-out 20) = 4096 ms.
    n.run_for(4096 * MS);
    assert_eq!(&n.log[2..], [(B, "REP"), (A, "RTU")]);
    assert_eq!(n.b.state(ib), Some(State::Established));
    assert_eq!(Net::events(&mut n.b), [Event::Established { id: ib }]);
}

#[test]
fn dreqs_that_match_nothing_or_another_qp() {
    let mut n = Net::new();
    let (ia, ib) = established(&mut n);
    n.log.clear();
    // A DREQ naming an unknown connection gets a DREP built from it.
    let unknown = CmMad {
        tid: 9,
        msg: Message::Dreq(ferroverbs_cm::msg::Dreq {
            local_comm_id: 0x1234,
            remote_comm_id: 0x5678,
            remote_qpn: 0x222,
            private_data: [0; 220],
        }),
    };
    n.b.receive(n.now, A, &unknown.to_bytes()).unwrap();
    let o = n.b.poll_transmit().unwrap();
    assert_eq!(o.mad.tid, 9);
    let Message::Drep(d) = o.mad.msg else {
        panic!()
    };
    assert_eq!((d.local_comm_id, d.remote_comm_id), (0x5678, 0x1234));
    // A DREQ for B's connection naming another QP is dropped.
    let Message::Rtu(rtu) = n.sent[2].1.msg else {
        panic!()
    };
    let wrong_qp = CmMad {
        tid: 10,
        msg: Message::Dreq(ferroverbs_cm::msg::Dreq {
            local_comm_id: rtu.local_comm_id,
            remote_comm_id: rtu.remote_comm_id,
            remote_qpn: 0x333,
            private_data: [0; 220],
        }),
    };
    n.b.receive(n.now, A, &wrong_qp.to_bytes()).unwrap();
    assert!(n.b.poll_transmit().is_none());
    assert_eq!(n.b.state(ib), Some(State::Established));
    assert!(Net::events(&mut n.b).is_empty());
    let _ = ia;
}

#[test]
fn a_vanished_peer_is_disconnected_after_the_dreq_retries() {
    let mut n = Net::new();
    let (ia, _) = established(&mut n);
    n.drop = Box::new(|_, _| true);
    n.a.disconnect(n.now, ia).unwrap();
    n.run_for(16 * 4608 * MS - MS);
    assert!(
        Net::events(&mut n.a).is_empty(),
        "nothing before the last retry"
    );
    assert_eq!(n.a.state(ia), Some(State::DreqSent));
    n.run_for(MS);
    // The peer vanished: DISCONNECTED after the DREQ and its 15 retransmissions.
    assert_eq!(Net::events(&mut n.a), [Event::Disconnected { id: ia }]);
    assert_eq!(n.a.state(ia), Some(State::TimeWait));
    let dreqs = n
        .sent
        .iter()
        .filter(|(_, m)| matches!(m.msg, Message::Dreq(_)))
        .count();
    assert_eq!(dreqs, 16, "the DREQ and 15 retransmissions");
    n.run_for(512 * MS);
    assert_eq!(Net::events(&mut n.a), [Event::TimewaitExit { id: ia }]);
}

#[test]
fn sidr_resolves_a_ud_service_or_says_it_is_unsupported() {
    let mut n = Net::new();
    let udp = ipcm::service_id(PortSpace::Udp, 7174);
    let ia = n.a.sidr_request(n.now, B, udp, b"sidr").unwrap();
    n.pump();
    match Net::events(&mut n.a).as_slice() {
        [Event::SidrResolved { id, rep }] => {
            assert_eq!(*id, ia);
            assert_eq!(rep.status, sidr_status::UNSUPPORTED);
        }
        e => panic!("{e:?}"),
    }
    n.b.listen(udp).unwrap();
    let ia = n.a.sidr_request(n.now, B, udp, b"sidr").unwrap();
    n.pump();
    let Some(Event::SidrRequest { id: ib, req, .. }) = n.b.poll_event() else {
        panic!()
    };
    assert_eq!(&req.private_data[..4], b"sidr");
    n.b.sidr_reply(ib, sidr_status::SUCCESS, 0x345, 0x0123_4567, b"ok")
        .unwrap();
    n.pump();
    match Net::events(&mut n.a).as_slice() {
        [Event::SidrResolved { id, rep }] => {
            assert_eq!(*id, ia);
            assert_eq!((rep.status, rep.qpn, rep.qkey), (0, 0x345, 0x0123_4567));
            assert_eq!(rep.service_id, udp);
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(n.a.state(ia), Some(State::Idle));
    assert_eq!(
        n.b.state(ib),
        None,
        "the passive exchange ends with its reply"
    );
}

#[test]
fn a_lap_is_answered_as_unsupported_and_garbage_changes_nothing() {
    let mut n = Net::new();
    let (ia, _) = established(&mut n);
    let lap = CmMad {
        tid: 5,
        msg: Message::Lap {
            local_comm_id: 1,
            remote_comm_id: ia.0,
        },
    };
    n.a.receive(n.now, B, &lap.to_bytes()).unwrap();
    let o = n.a.poll_transmit().unwrap();
    assert_eq!(
        o.mad.msg,
        Message::Apr {
            local_comm_id: ia.0,
            remote_comm_id: 1,
            ap_status: 2
        }
    );
    assert!(n.a.receive(n.now, B, &[0u8; 10]).is_err());
    let mut bad = lap.to_bytes();
    bad[1] = 0x81;
    assert!(n.a.receive(n.now, B, &bad).is_err());
    assert!(n.a.poll_transmit().is_none());
    assert_eq!(n.a.state(ia), Some(State::Established));
}

#[test]
fn the_same_seed_gives_the_same_ids_and_mads() {
    let run = || {
        let mut n = Net::new();
        established(&mut n);
        n.sent
    };
    assert_eq!(run(), run());
}

#[test]
fn destroying_an_established_connection_sends_a_dreq_and_reports_nothing() {
    let mut n = Net::new();
    let (ia, ib) = established(&mut n);
    n.log.clear();
    n.a.destroy(n.now, ia).unwrap();
    n.pump();
    assert_eq!(n.log[0], (A, "DREQ"));
    assert_eq!(Net::events(&mut n.b), [Event::Disconnected { id: ib }]);
    n.b.disconnect(n.now, ib).unwrap();
    n.run_for(Duration::from_secs(2));
    assert!(
        Net::events(&mut n.a).is_empty(),
        "a destroyed connection reports nothing"
    );
    assert_eq!(n.a.state(ia), None, "and is gone after TimeWait");
}

/// A peer whose process died without a DREQ comes back as a new process (another
/// comm ID) with the same QPN: its REQ is rejected as stale and the old connection
/// is sent a DREQ, which the new process answers with a DREP (it knows no such
/// connection); the old connection is reported disconnected and, from TimeWait on,
/// no longer holds the QPN, so the REQ sent again is a connect request (Linux
/// `cm_match_req`, `cm_issue_drep`, `cm_enter_timewait`).
#[test]
fn a_req_from_the_qp_of_a_dead_connection_is_stale_and_disconnects_it() {
    let mut n = Net::new();
    let (_, ib) = established(&mut n);
    // A's process is gone; its successor has the same CA GUID and QPN.
    n.a = Engine::new(Config::rdma_cm(0xaaaa, 3));
    n.log.clear();
    let ia = n.a.connect(n.now, B, &connect_params()).unwrap();
    n.pump();
    assert_eq!(n.log, [(A, "REQ"), (B, "REJ"), (B, "DREQ"), (A, "DREP")]);
    let rej = n.sent.iter().find_map(|(_, m)| match m.msg {
        Message::Rej(r) => Some(r),
        _ => None,
    });
    assert_eq!(rej.map(|r| r.reason), Some(rej_reason::STALE_CONN));
    assert!(matches!(
        Net::events(&mut n.a).as_slice(),
        [Event::Rejected { id, .. }] if *id == ia
    ));
    assert_eq!(Net::events(&mut n.b), [Event::Disconnected { id: ib }]);
    assert_eq!(n.b.state(ib), Some(State::TimeWait));
    // The REQ again (the application retries): now a connect request.
    n.log.clear();
    let ia2 = n.a.connect(n.now, B, &connect_params()).unwrap();
    n.pump();
    assert_eq!(n.log, [(A, "REQ")]);
    let ib2 = match Net::events(&mut n.b).as_slice() {
        [Event::ConnectRequest { id, from, .. }] => {
            assert_eq!(*from, A);
            *id
        }
        e => panic!("{e:?}"),
    };
    n.b.accept(n.now, ib2, &accept_params()).unwrap();
    n.pump();
    assert!(matches!(
        Net::events(&mut n.a).as_slice(),
        [Event::ConnectResponse { id, .. }] if *id == ia2
    ));
}

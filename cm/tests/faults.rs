//! The CM's fault cases over the simulated ConnectX's QP1 on a seeded test bed, on
//! the virtual clock: MADs lost on a lossy link recovered by the CM's retries; a
//! peer that never answers (UNREACHABLE after the REQ's 16 sends); a REQ flood
//! bounded by the listen backlog; malformed and truncated MADs dropped and counted
//! by reason.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ferroverbs::verbs::{AccessFlags, AddressVector, QpCap, QpInitAttr, SendWr, UdInitAttr};
use ferroverbs::{Clock, SteppedClock};
use ferroverbs_cm::msg::{CmMad, Message};
use ferroverbs_cm::service::{CmEvent, ConnParam, Service};
use ferroverbs_sim::link::faults::Impairments;
use ferroverbs_sim::SimBus;
use ferroverbs_testbed::{Bed, Nic};

const MS: Duration = Duration::from_millis(1);

fn clock(nic: &Nic) -> Arc<dyn Clock> {
    let (a, b) = (nic.sim.clock().clone(), nic.sim.clock().clone());
    Arc::new(SteppedClock::new(move || a.now(), move |d| b.advance(d)))
}

fn service(bed: &Bed, i: usize, seed: u64) -> Service<'static, SimBus> {
    let table: Vec<([u8; 16], [u8; 6])> =
        bed.nics().iter().map(|n| (n.gid.gid, n.gid.mac)).collect();
    let resolve = move |ip| {
        let gid = ferroverbs_cm::ipcm::ip_to_gid(ip);
        table.iter().find(|(g, _)| *g == gid).map(|(_, m)| *m)
    };
    let n = bed.nic(i);
    Service::new(n.pd, 1, n.gid, clock(n), resolve, seed).expect("CM service")
}

fn addr(n: u8, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)), port)
}

/// Polls both services, moving virtual time to the CM's next deadline while nothing
/// happens, until an event or `within` of virtual time; the event and when.
fn next_within(
    bed: &Bed,
    a: &mut Service<'_, SimBus>,
    b: &mut Service<'_, SimBus>,
    within: Duration,
) -> Option<(char, CmEvent, Duration)> {
    let end = bed.now() + within;
    loop {
        // The frames in flight first, then time.
        bed.fabric().run_until_idle();
        let work = a.poll() + b.poll();
        if let Some(e) = a.next_event() {
            return Some(('a', e, bed.now()));
        }
        if let Some(e) = b.next_event() {
            return Some(('b', e, bed.now()));
        }
        let now = bed.now();
        if now >= end {
            return None;
        }
        if work > 0 {
            continue;
        }
        let due = [a.next_deadline(), b.next_deadline()]
            .into_iter()
            .flatten()
            .filter(|&t| t > now)
            .min()
            .unwrap_or(now + MS);
        bed.advance(due.min(end) - now);
    }
}

#[test]
fn a_connection_on_a_lossy_link_is_made_and_torn_down_by_the_retries() {
    // 40% of the frames lost each way, from seed 46: the REQ, REP, RTU, DREQ or DREP
    // lost are sent again after their time-outs (4608 ms each).
    let bed = Bed::builder(46)
        .impair(Impairments::new().loss(0.4))
        .build()
        .unwrap();
    let mut sa = service(&bed, 0, 11);
    let mut sb = service(&bed, 1, 12);
    let (na, nb) = (bed.nic(0), bed.nic(1));
    let (cqa, cqb) = (na.ctx.create_cq(16).unwrap(), nb.ctx.create_cq(16).unwrap());
    let mut qa = na
        .pd
        .create_qp(&QpInitAttr::new(&cqa, &cqa, QpCap::default()))
        .unwrap();
    let mut qb = nb
        .pd
        .create_qp(&QpInitAttr::new(&cqb, &cqb, QpCap::default()))
        .unwrap();
    sb.listen(addr(2, 7174)).unwrap();
    let ia = sa
        .connect(&qa, addr(2, 7174), &ConnParam::default())
        .unwrap();
    let limit = Duration::from_secs(120);
    let (mut a_up, mut b_up, mut ib) = (false, false, None);
    while !(a_up && b_up) {
        let Some((who, e, _)) = next_within(&bed, &mut sa, &mut sb, limit) else {
            panic!("not connected (seed {})", bed.seed());
        };
        match (who, e) {
            ('b', CmEvent::ConnectRequest { id, .. }) => {
                assert!(ib.is_none(), "one request, however often the REQ came");
                ib = Some(id);
                sb.accept(id, &mut qb, &ConnParam::default()).unwrap();
            }
            ('a', CmEvent::ConnectResponse { id, .. }) => {
                assert_eq!(id, ia);
                sa.establish(ia, &mut qa).unwrap();
            }
            ('a', CmEvent::Established { id }) => {
                assert_eq!(id, ia);
                a_up = true;
            }
            ('b', CmEvent::Established { id }) => {
                assert_eq!(Some(id), ib);
                b_up = true;
            }
            (w, e) => panic!("{w}: {e:?} (seed {})", bed.seed()),
        }
    }
    let sent = sa.stats().mads_out + sb.stats().mads_out;
    assert!(
        sent > 3,
        "losses were recovered by sending again: {sent} MADs"
    );
    sa.disconnect(ia, None).unwrap();
    let (mut a_down, mut b_down) = (false, false);
    while !(a_down && b_down) {
        match next_within(&bed, &mut sa, &mut sb, limit) {
            Some(('a', CmEvent::Disconnected { id }, _)) if id == ia => a_down = true,
            Some(('b', CmEvent::Disconnected { id }, _)) if Some(id) == ib => {
                b_down = true;
                sb.disconnect(id, None).unwrap();
            }
            Some((_, CmEvent::TimewaitExit { .. }, _)) => {}
            e => panic!("{e:?} (seed {})", bed.seed()),
        }
    }
}

#[test]
fn a_peer_that_never_answers_is_unreachable_after_the_req_retries() {
    let bed = Bed::new(47);
    let mut sa = service(&bed, 0, 13);
    let mut sb = service(&bed, 1, 14);
    let (na, nb) = (bed.nic(0), bed.nic(1));
    let cq = na.ctx.create_cq(16).unwrap();
    let qa = na
        .pd
        .create_qp(&QpInitAttr::new(&cq, &cq, QpCap::default()))
        .unwrap();
    sb.listen(addr(2, 7174)).unwrap();
    // Nothing reaches B, ever.
    bed.fabric().partition(na.gid.mac, nb.gid.mac, true);
    let start = bed.now();
    let ia = sa
        .connect(&qa, addr(2, 7174), &ConnParam::default())
        .unwrap();
    let (who, e, at) = next_within(&bed, &mut sa, &mut sb, Duration::from_secs(120)).unwrap();
    assert_eq!((who, e), ('a', CmEvent::Unreachable { id: ia }));
    // The REQ and its 15 retransmissions (rdma_cm's max_cm_retries), 4608 ms apart.
    assert_eq!(at - start, 16 * 4608 * MS);
    assert_eq!(sa.stats().mads_out, 16);
    assert_eq!(sb.stats().mads_in, 0);
}

#[test]
fn a_req_flood_is_bounded_by_the_listen_backlog() {
    let bed = Bed::new(48);
    let mut sa = service(&bed, 0, 15);
    let mut sb = service(&bed, 1, 16);
    let na = bed.nic(0);
    let cq = na.ctx.create_cq(64).unwrap();
    let qps: Vec<_> = (0..20)
        .map(|_| {
            na.pd
                .create_qp(&QpInitAttr::new(&cq, &cq, QpCap::default()))
                .unwrap()
        })
        .collect();
    sb.listen_backlog(addr(2, 7174), 3).unwrap();
    for q in &qps {
        sa.connect(q, addr(2, 7174), &ConnParam::default()).unwrap();
    }
    let mut requests = Vec::new();
    while let Some((who, e, _)) = next_within(&bed, &mut sa, &mut sb, 100 * MS) {
        match (who, e) {
            ('b', CmEvent::ConnectRequest { id, .. }) => requests.push(id),
            (w, e) => panic!("{w}: {e:?}"),
        }
    }
    // Three wait for the application; the 17 others were dropped without an
    // answer (no REJ: their CMs send them again later) and hold nothing here.
    assert_eq!(requests.len(), 3);
    assert_eq!(sb.engine().backlog_drops(), 17);
    assert_eq!(sb.stats().mads_out, 0, "no REJ, no MRA");
    // Answering one makes room: the next retransmission (4608 ms after the first
    // sends) gets in, one of them.
    sb.reject(requests[0], &[]).unwrap();
    let mut later = 0;
    let end = bed.now() + 4700 * MS;
    while let Some((who, e, _)) = next_within(&bed, &mut sa, &mut sb, end - bed.now()) {
        match (who, e) {
            ('b', CmEvent::ConnectRequest { .. }) => later += 1,
            ('a', CmEvent::Rejected { reason: 28, .. }) => {}
            (w, e) => panic!("{w}: {e:?}"),
        }
    }
    assert_eq!(later, 1, "room for one");
    assert_eq!(sb.engine().backlog_drops(), 17 + 16);
}

#[test]
fn malformed_and_truncated_mads_are_dropped_and_counted_by_reason() {
    let bed = Bed::builder(49).nics(3).build().unwrap();
    let _sa = service(&bed, 0, 17);
    let mut sb = service(&bed, 1, 18);
    sb.listen(addr(2, 7174)).unwrap();
    // NIC 3 sends raw MADs from a QP1 of its own to B's QP1.
    let nc = bed.nic(2);
    let nb = bed.nic(1);
    let cq = nc.ctx.create_cq(16).unwrap();
    let mut g = nc
        .pd
        .create_qp(&QpInitAttr::gsi(&cq, &cq, QpCap::default()))
        .unwrap();
    g.to_init_ud(&UdInitAttr::new(1, 0x8001_0000)).unwrap();
    g.to_rtr_ud().unwrap();
    g.to_rts_ud(0).unwrap();
    let ah = nc
        .pd
        .create_ah(1, &AddressVector::new(nb.gid.gid, nb.gid.mac, 0))
        .unwrap();
    let good = CmMad {
        tid: 9,
        msg: Message::Lap {
            local_comm_id: 1,
            remote_comm_id: 2,
        },
    }
    .to_bytes();
    let with = |off: usize, v: u8| {
        let mut m = good.to_vec();
        m[off] = v;
        m
    };
    // MAD header (IBTA 13.4.3): base version, class, class version, method at 0..4,
    // attribute ID at 16..18.
    let mut unknown_attr = good.to_vec();
    unknown_attr[16..18].copy_from_slice(&0x0030u16.to_be_bytes());
    let mads: Vec<Vec<u8>> = vec![
        good[..100].to_vec(),
        with(0, 2),
        with(1, 0x81),
        with(2, 1),
        with(3, 0x01),
        unknown_attr,
    ];
    let buf = nc.pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    for (i, m) in mads.iter().enumerate() {
        buf.write(i * 256, m);
        let sg = [buf.sge(i * 256, m.len() as u32).unwrap()];
        g.post_send(&[SendWr::send(i as u64, &sg).ud(&ah, 1, 0x8001_0000)])
            .unwrap();
    }
    bed.fabric().run_until_idle();
    sb.poll();
    let s = sb.stats();
    let d = s.dropped;
    assert_eq!(
        (
            d.truncated,
            d.base_version,
            d.not_cm,
            d.class_version,
            d.method,
            d.unknown_attribute
        ),
        (1, 1, 1, 1, 1, 1),
        "{s:?}"
    );
    assert_eq!(s.bad_mads, 6);
    assert_eq!(s.mads_out, 0, "nothing answers garbage");
    assert!(sb.next_event().is_none());
}

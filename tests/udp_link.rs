//! RC traffic between two simulated NICs over the UDP link (real sockets on 127.0.x.y),
//! through the verbs API: threaded mode with the application only posting and polling,
//! deterministic mode stepped by the test, the source-port fallback, a capture of
//! both directions with every ICRC checked, and garbage datagrams dropped and counted
//! by reason.

mod verbs_support;
use verbs_support::{connect, connect_timeout, pattern, REAL_TIME_ACK_TIMEOUT as PATIENT};
#[path = "common/net.rs"]
mod net;

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use ferroverbs::verbs::{
    AccessFlags as A, CompletionQueue, Mtu, QpCap, QpInitAttr, RecvWr, SendWr, WcOpcode, WcStatus,
    WorkCompletion,
};
use ferroverbs::{Context, Device, DeviceConfig, GidEntry};
use ferroverbs_sim::link::pcap;
use ferroverbs_sim::link::udp::{mac_for, UdpConfig, UdpLink};
use ferroverbs_sim::wire::frame;
use ferroverbs_sim::{Sim, SimBus};

struct Nic {
    sim: Sim,
    link: UdpLink,
    gid: GidEntry,
}

fn nic(cfg: UdpConfig, threaded: bool) -> Nic {
    let sim = Sim::new(cfg.sim_config(threaded));
    let addr = cfg.addr;
    let link = UdpLink::attach(&sim, cfg).expect("bind");
    let gid = GidEntry::ipv4(0, addr.octets(), mac_for(addr));
    Nic { sim, link, gid }
}

fn open(n: &Nic) -> Context<SimBus> {
    let clock = n.sim.clock().clone();
    let cfg = DeviceConfig::default()
        .with_clock(std::sync::Arc::new(ferroverbs::SteppedClock::new(
            {
                let c = clock.clone();
                move || c.now()
            },
            move |d| clock.advance(d),
        )))
        .with_gid(n.gid);
    Device::open(n.sim.bus(), cfg).expect("bring-up")
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

thread_local! {
    /// Whether `wait` services the first NIC itself ([`Sim::try_service`]).
    static ASSIST: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Polls until `n` completions arrived; steps both devices unless they are threaded.
fn wait(
    nics: &[&Nic],
    step: bool,
    cq: &mut CompletionQueue<'_, SimBus>,
    n: usize,
) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut wc = [WorkCompletion::default(); 16];
    let start = Instant::now();
    while out.len() < n {
        if step {
            for x in nics {
                x.sim.step();
            }
        } else if ASSIST.get() {
            // Busy polling: the first NIC's threaded device is serviced by this
            // thread too, unless its device thread is servicing it.
            let _ = nics[0].sim.try_service();
        }
        let k = cq.poll(&mut wc[..(n - out.len()).min(16)]);
        out.extend_from_slice(&wc[..k]);
        if k == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "only {} of {n} completions; {:?} {:?}",
                out.len(),
                nics[0].link.stats(),
                nics[1].link.stats()
            );
            std::thread::yield_now();
        }
    }
    assert!(out.iter().all(|c| c.status == WcStatus::Success), "{out:?}");
    out
}

/// SEND, WRITE, READ and atomics with data checked, `rounds` times.
fn traffic(a: &Nic, b: &Nic, step: bool, rounds: usize) {
    let (ca, cb) = (open(a), open(b));
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut cqa = ca.create_cq(256).unwrap();
    let mut cqb = cb.create_cq(256).unwrap();
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    connect_timeout(&mut qa, &a.gid, &mut qb, &b.gid, Mtu::Mtu1024, PATIENT);
    let all = A::LOCAL_WRITE | A::REMOTE_READ | A::REMOTE_WRITE | A::REMOTE_ATOMIC;
    let la = pa.alloc_mr(1 << 16, all).unwrap();
    let lb = pb.alloc_mr(1 << 16, all).unwrap();
    let nics = [a, b];
    for r in 0..rounds {
        let n = [0, 1, 1000, 1024, 5000][r % 5];
        let data = pattern(n, r as u8);
        la.write(0, &data);
        // SEND (with immediate on odd rounds).
        qb.post_recv(&[RecvWr::new(1, &[lb.sge(0, 8192).unwrap()])])
            .unwrap();
        let sg = [la.sge(0, n.max(1) as u32).unwrap()];
        let sg: &[_] = if n == 0 { &[] } else { &sg };
        let wr = if r % 2 == 1 {
            SendWr::send_with_imm(2, sg, r as u32)
        } else {
            SendWr::send(2, sg)
        };
        qa.post_send(&[wr.signaled()]).unwrap();
        wait(&nics, step, &mut cqa, 1);
        let c = wait(&nics, step, &mut cqb, 1)[0];
        assert_eq!((c.opcode, c.byte_len as usize), (WcOpcode::Recv, n));
        let mut got = vec![0; n];
        lb.read(0, &mut got);
        assert_eq!(got, data);
        // WRITE, then READ it back into another place.
        qa.post_send(&[SendWr::rdma_write(3, sg, lb.remote(8192)).signaled()])
            .unwrap();
        wait(&nics, step, &mut cqa, 1);
        lb.read(8192, &mut got);
        assert_eq!(got, data);
        let back = [la.sge(16384, n.max(1) as u32).unwrap()];
        let back: &[_] = if n == 0 { &[] } else { &back };
        qa.post_send(&[SendWr::rdma_read(4, back, lb.remote(8192)).signaled()])
            .unwrap();
        wait(&nics, step, &mut cqa, 1);
        la.read(16384, &mut got);
        assert_eq!(got, data);
        // Fetch-and-add.
        lb.write(32768, &(r as u64).to_le_bytes());
        let res = [la.sge(40000, 8).unwrap()];
        qa.post_send(&[SendWr::atomic_fetch_add(5, &res, lb.remote(32768), 3).signaled()])
            .unwrap();
        wait(&nics, step, &mut cqa, 1);
        let mut v = [0u8; 8];
        la.read(40000, &mut v);
        assert_eq!(
            v,
            (r as u64).to_ne_bytes(),
            "the fetched value in host order"
        );
        lb.read(32768, &mut v);
        assert_eq!(u64::from_le_bytes(v), r as u64 + 3);
    }
}

/// Host `y` (1 or 2) of test `x` (21..=32), in this process's loopback /24
/// ([`net::host`]): every test has its own `x`, so tests running at once in this
/// process (or another run of this binary) never bind the same address.
fn addr(x: u8, y: u8) -> Ipv4Addr {
    assert!((21..=32).contains(&x) && (1..=9).contains(&y));
    net::host((x - 20) * 10 + y)
}

#[test]
fn threaded_nics_carry_rc_traffic_without_the_application() {
    let path = std::env::temp_dir().join(format!("ferroverbs-udp-{}.pcap", std::process::id()));
    let cfg = |a| UdpConfig {
        pcap: Some(path.clone()),
        ..UdpConfig::new(a)
    };
    let a = nic(cfg(addr(21, 1)), true);
    let b = nic(cfg(addr(21, 2)), true);
    assert!(a.sim.threaded());
    traffic(&a, &b, false, 20);
    let (sa, sb) = (a.link.stats(), b.link.stats());
    assert_eq!(sa.tx_port_fallback + sb.tx_port_fallback, 0, "{sa:?}");
    assert!(
        sa.tx_datagrams > 100 && sb.rx_delivered > 100,
        "{sa:?} {sb:?}"
    );
    // The device threads read the sockets (there is no other reader).
    assert!(sa.rx_bursts > 0 && sb.rx_bursts > 0, "{sa:?} {sb:?}");
    for s in [a.sim.stats().data_path, b.sim.stats().data_path] {
        assert_eq!(s.rx_bad_icrc + s.rx_malformed + s.rx_bad_addr, 0, "{s:?}");
    }
    // The capture holds both directions as sent and as rebuilt: every ICRC right,
    // the source ports in the entropy range, the destination port 4791.
    let w = a.link.pcap().unwrap();
    drop(a);
    drop(b);
    w.flush().unwrap();
    let recs = pcap::read(&path).unwrap();
    assert!(recs.len() as u64 >= sa.tx_datagrams + sb.tx_datagrams);
    for r in &recs {
        let f = frame::Frame::new_checked(&r.data[..]).unwrap();
        f.verify().unwrap();
        assert!(f.udp().src_port() >= 0xc000);
        assert_eq!(f.udp().dst_port(), 4791);
    }
    let _ = std::fs::remove_file(&path);
}

#[test]
fn threaded_nic_assisted_by_its_polling_thread() {
    // One side's polling thread services its device when its CQ is empty (NAPI-style
    // busy polling, what `ferroverbs perf` does in threaded mode); the other side's
    // device thread alone carries its traffic. Then neither assists: the first
    // device's thread takes over again after its nap.
    let a = nic(UdpConfig::new(addr(28, 1)), true);
    let b = nic(UdpConfig::new(addr(28, 2)), true);
    assert!(a.sim.threaded() && b.sim.threaded());
    ASSIST.set(true);
    traffic(&a, &b, false, 10);
    ASSIST.set(false);
    let before = b.link.stats();
    traffic(&a, &b, false, 10);
    let (sa, sb) = (a.link.stats(), b.link.stats());
    assert!(sb.rx_delivered > before.rx_delivered, "{before:?} {sb:?}");
    assert_eq!(sa.rx_datagrams, sa.rx_delivered, "{sa:?}");
    for s in [a.sim.stats().data_path, b.sim.stats().data_path] {
        assert_eq!(s.rx_bad_icrc + s.rx_malformed + s.rx_bad_addr, 0, "{s:?}");
    }
}

#[test]
fn a_threaded_nic_wakes_for_its_own_loopback_frames() {
    // Two QPs of one threaded NIC with a UDP ingress: a SEND's frames go to the NIC's
    // own receive queue, not to the socket its idle device thread waits in. The
    // doorbell must end that wait; before it did, every frame waited for the wait's
    // timeout (10 ms), which the device counts as a late frame.
    let a = nic(UdpConfig::new(addr(29, 1)), true);
    assert!(a.sim.threaded());
    let ctx = open(&a);
    let pd = ctx.alloc_pd().unwrap();
    let mut cqa = ctx.create_cq(64).unwrap();
    let mut cqb = ctx.create_cq(64).unwrap();
    let mut qa = pd.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
    let mut qb = pd.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    connect_timeout(&mut qa, &a.gid, &mut qb, &a.gid, Mtu::Mtu1024, PATIENT);
    let mr = pd.alloc_mr(1 << 16, A::LOCAL_WRITE).unwrap();
    for i in 0..40u8 {
        let data = pattern(100, i);
        mr.write(0, &data);
        qb.post_recv(&[RecvWr::new(u64::from(i), &[mr.sge(4096, 4096).unwrap()])])
            .unwrap();
        qa.post_send(&[SendWr::send(1, &[mr.sge(0, 100).unwrap()]).signaled()])
            .unwrap();
        // No assisting poll: the device thread alone carries the traffic.
        wait(&[&a], false, &mut cqa, 1);
        let c = wait(&[&a], false, &mut cqb, 1)[0];
        assert_eq!((c.wr_id, c.byte_len), (u64::from(i), 100));
        let mut got = vec![0; 100];
        mr.read(4096, &mut got);
        assert_eq!(got, data);
    }
    assert_eq!(
        a.link.stats().tx_datagrams,
        0,
        "loopback frames stay in the NIC"
    );
    assert_eq!(a.sim.stats().late_frames, 0, "{:?}", a.sim.stats());
}

#[test]
fn deterministic_nics_stepped_by_the_test() {
    let a = nic(UdpConfig::new(addr(22, 1)), false);
    let b = nic(UdpConfig::new(addr(22, 2)), false);
    assert!(!a.sim.threaded());
    traffic(&a, &b, true, 10);
}

#[test]
fn source_port_fallback_rewrites_the_icrc() {
    let cfg = |a| UdpConfig {
        entropy_ports: false,
        ..UdpConfig::new(a).port(0)
    };
    let a = nic(cfg(addr(23, 1)), true);
    // b listens where a sends (the peers' port is 4791; a's own port is the kernel's).
    let b = nic(UdpConfig::new(addr(23, 2)), true);
    let (pa, pb) = (a.link.local_addr().port(), b.link.local_addr().port());
    assert_eq!(pb, 4791);
    assert_ne!(pa, 4791);
    // b answers a at 4791, where nobody listens: only a → b traffic is checked.
    let (ca, cb) = (open(&a), open(&b));
    let (pda, pdb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut cqa = ca.create_cq(64).unwrap();
    let mut cqb = cb.create_cq(64).unwrap();
    let mut qa = pda.create_qp(&QpInitAttr::new(&cqa, &cqa, cap())).unwrap();
    let mut qb = pdb.create_qp(&QpInitAttr::new(&cqb, &cqb, cap())).unwrap();
    connect(&mut qa, &a.gid, &mut qb, &b.gid, Mtu::Mtu1024);
    let mb = pdb.alloc_mr(4096, A::LOCAL_WRITE).unwrap();
    qb.post_recv(&[RecvWr::new(1, &[mb.sge(0, 4096).unwrap()])])
        .unwrap();
    let parts: [&[u8]; 1] = [b"over the main socket"];
    qa.post_send(&[SendWr::send_inline(1, &parts)]).unwrap();
    let c = wait(&[&a, &b], false, &mut cqb, 1)[0];
    assert_eq!(c.byte_len, 20);
    let mut got = [0u8; 20];
    mb.read(0, &mut got);
    assert_eq!(&got, b"over the main socket");
    assert!(a.link.stats().tx_port_fallback >= 1);
    assert_eq!(b.sim.stats().data_path.rx_bad_icrc, 0);
    // b's ACKs go to a closed port: its connected sending socket reports the ICMP
    // error on the next send, which is made again (nothing counted as lost).
    assert_eq!(b.link.stats().tx_errors, 0, "{:?}", b.link.stats());
    let _ = &mut cqa;
}

#[test]
fn garbage_datagrams_are_dropped_and_counted_by_reason() {
    let n = nic(UdpConfig::new(addr(24, 1)), true);
    let s = UdpSocket::bind(SocketAddrV4::new(addr(24, 2), 0)).unwrap();
    let to = n.link.local_addr();
    let mut ok = [0u8; 28];
    ok[0] = 0x04; // RC SEND_ONLY
    ok[2] = 0xff;
    ok[3] = 0xff;
    ok[7] = 0x42; // QP 0x42
    let sends: Vec<Vec<u8>> = vec![
        vec![],
        vec![0; 15],
        {
            let mut b = ok.to_vec();
            b[0] = 0x1f; // not in the table
            b
        },
        {
            let mut b = ok.to_vec();
            b[1] = 0x05; // transport version 5
            b
        },
        ok.to_vec(), // bad ICRC (zero)
    ];
    for d in &sends {
        s.send_to(d, to).unwrap();
    }
    // A well-formed packet with a good ICRC over the canonical headers, to a QP that
    // does not exist.
    let src = match s.local_addr().unwrap() {
        std::net::SocketAddr::V4(a) => a,
        _ => unreachable!(),
    };
    let (ip, u) = ferroverbs_sim::link::udp::canonical_headers(src, *to.ip(), ok.len()).unwrap();
    let mut good = ok;
    ferroverbs_sim::wire::roce::Packet::new_unchecked(&mut good[..]).fill_icrc(&ip, &u);
    s.send_to(&good, to).unwrap();
    let start = Instant::now();
    loop {
        let d = n.sim.stats().data_path;
        if d.rx_frames >= 2 || start.elapsed() > Duration::from_secs(10) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let l = n.link.stats();
    assert_eq!(l.rx_datagrams, 6, "{l:?}");
    assert_eq!(
        (
            l.rx_too_short,
            l.rx_unknown_opcode,
            l.rx_bad_version,
            l.rx_delivered
        ),
        (2, 1, 1, 2),
        "{l:?}"
    );
    let d = n.sim.stats().data_path;
    assert_eq!((d.rx_bad_icrc, d.rx_no_qp), (1, 1), "{d:?}");
}

/// Two connected RC QPs on `a` and `b` (ACK timeout exponent `timeout`) with 64 KiB
/// regions; runs `f`.
fn with_pair(
    a: &Nic,
    b: &Nic,
    timeout: u8,
    f: impl FnOnce(
        &mut ferroverbs::verbs::QueuePair<'_, SimBus>,
        &mut CompletionQueue<'_, SimBus>,
        &ferroverbs::verbs::MemoryRegion<'_, SimBus>,
        &mut ferroverbs::verbs::QueuePair<'_, SimBus>,
        &mut CompletionQueue<'_, SimBus>,
        &ferroverbs::verbs::MemoryRegion<'_, SimBus>,
    ),
) {
    let (ca, cb) = (open(a), open(b));
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let mut cqa = ca.create_cq(512).unwrap();
    let mut cqb = cb.create_cq(512).unwrap();
    let big = QpCap {
        max_send_wr: 256,
        max_recv_wr: 256,
        ..cap()
    };
    let mut qa = pa.create_qp(&QpInitAttr::new(&cqa, &cqa, big)).unwrap();
    let mut qb = pb.create_qp(&QpInitAttr::new(&cqb, &cqb, big)).unwrap();
    connect_timeout(&mut qa, &a.gid, &mut qb, &b.gid, Mtu::Mtu1024, timeout);
    let la = pa.alloc_mr(1 << 16, A::LOCAL_WRITE).unwrap();
    let lb = pb.alloc_mr(1 << 16, A::LOCAL_WRITE).unwrap();
    f(&mut qa, &mut cqa, &la, &mut qb, &mut cqb, &lb);
}

#[test]
fn a_stepped_nic_reads_its_socket_on_the_stepping_thread() {
    // Deterministic NICs have no thread reading their sockets: a datagram waits in
    // the kernel until the application steps the device, and that step reads it.
    let a = nic(UdpConfig::new(addr(25, 1)), false);
    let b = nic(UdpConfig::new(addr(25, 2)), false);
    with_pair(&a, &b, PATIENT, |qa, cqa, la, qb, cqb, lb| {
        qb.post_recv(&[RecvWr::new(7, &[lb.sge(0, 4096).unwrap()])])
            .unwrap();
        la.write(0, b"read by the step");
        qa.post_send(&[SendWr::send(1, &[la.sge(0, 16).unwrap()]).signaled()])
            .unwrap();
        // The SEND left on the posting thread (the doorbell is serviced there).
        assert_eq!(a.link.stats().tx_datagrams, 1);
        std::thread::sleep(Duration::from_millis(50));
        let l = b.link.stats();
        assert_eq!(
            (l.rx_datagrams, l.rx_bursts, l.rx_waits),
            (0, 0, 0),
            "{l:?}"
        );
        assert_eq!(b.sim.stats().rx_queued, 0);
        // The step that reads the SEND also processes it: the receive completion is
        // there when it returns, and the ACK is owed, not yet sent.
        let start = Instant::now();
        while b.link.stats().rx_datagrams == 0 {
            assert!(start.elapsed() < Duration::from_secs(20), "no datagram");
            b.sim.step();
        }
        let l = b.link.stats();
        assert_eq!((l.rx_datagrams, l.rx_delivered), (1, 1), "{l:?}");
        assert!(l.rx_bursts >= 1 && l.rx_waits == 0, "{l:?}");
        assert_eq!(l.tx_datagrams, 0, "the ACK waits for the next step");
        let mut wc = [WorkCompletion::default(); 4];
        assert_eq!(cqb.poll(&mut wc), 1);
        assert_eq!(
            (wc[0].wr_id, wc[0].opcode, wc[0].byte_len),
            (7, WcOpcode::Recv, 16)
        );
        let mut got = [0u8; 16];
        lb.read(0, &mut got);
        assert_eq!(&got, b"read by the step");
        // The next step sends the ACK; the requester completes the SEND once.
        b.sim.step();
        assert_eq!(b.link.stats().tx_datagrams, 1);
        let c = wait(&[&a, &b], true, cqa, 1);
        assert_eq!((c[0].wr_id, c[0].opcode), (1, WcOpcode::Send));
        for _ in 0..10 {
            a.sim.step();
            b.sim.step();
        }
        assert_eq!(cqa.poll(&mut wc), 0);
        assert_eq!(cqb.poll(&mut wc), 0);
    });
}

#[test]
fn a_command_sends_the_deferred_ack_first() {
    // An ACK deferred by one step must not wait for a step that may never come: the
    // application that saw its last receive completion typically queries, resets or
    // destroys the QP and exits. Any command sends the owed ACKs before it runs.
    let a = nic(UdpConfig::new(addr(26, 1)), false);
    let b = nic(UdpConfig::new(addr(26, 2)), false);
    with_pair(&a, &b, PATIENT, |qa, cqa, la, qb, cqb, lb| {
        qb.post_recv(&[RecvWr::new(7, &[lb.sge(0, 4096).unwrap()])])
            .unwrap();
        la.write(0, b"last message");
        qa.post_send(&[SendWr::send(1, &[la.sge(0, 12).unwrap()]).signaled()])
            .unwrap();
        let start = Instant::now();
        while b.link.stats().rx_datagrams == 0 {
            assert!(start.elapsed() < Duration::from_secs(20), "no datagram");
            b.sim.step();
        }
        assert_eq!(b.link.stats().tx_datagrams, 0, "the ACK is owed");
        let mut wc = [WorkCompletion::default(); 4];
        assert_eq!(cqb.poll(&mut wc), 1);
        assert_eq!((wc[0].wr_id, wc[0].byte_len), (7, 12));
        // No step: a QUERY_QP command alone sends the ACK, before it runs.
        qb.query().unwrap();
        assert_eq!(
            b.link.stats().tx_datagrams,
            1,
            "the command flushed the ACK"
        );
        let c = wait(&[&a], true, cqa, 1);
        assert_eq!((c[0].wr_id, c[0].opcode), (1, WcOpcode::Send));
        assert_eq!(c[0].status, ferroverbs::verbs::WcStatus::Success);
    });
}

#[test]
fn a_send_doorbell_sends_the_deferred_ack_first() {
    // The responder's application answers a SEND as soon as it sees it: the ACK the
    // receiving step deferred leaves before the answer's packet, as a ConnectX
    // acknowledges a request when it arrives, long before the application answers.
    let a = nic(UdpConfig::new(addr(27, 1)), false);
    let b = nic(UdpConfig::new(addr(27, 2)), false);
    with_pair(&a, &b, PATIENT, |qa, cqa, la, qb, cqb, lb| {
        qb.post_recv(&[RecvWr::new(7, &[lb.sge(0, 4096).unwrap()])])
            .unwrap();
        qa.post_recv(&[RecvWr::new(8, &[la.sge(1024, 1024).unwrap()])])
            .unwrap();
        la.write(0, b"ping");
        qa.post_send(&[SendWr::send(1, &[la.sge(0, 4).unwrap()]).signaled()])
            .unwrap();
        let start = Instant::now();
        while b.link.stats().rx_datagrams == 0 {
            assert!(start.elapsed() < Duration::from_secs(20), "no datagram");
            b.sim.step();
        }
        assert_eq!(b.link.stats().tx_datagrams, 0, "the ACK is owed");
        let mut wc = [WorkCompletion::default(); 4];
        assert_eq!(cqb.poll(&mut wc), 1);
        // The answer, with no step between: the ACK goes first, then the SEND.
        lb.write(2048, b"pong");
        qb.post_send(&[SendWr::send(2, &[lb.sge(2048, 4).unwrap()]).signaled()])
            .unwrap();
        assert_eq!(
            b.link.stats().tx_datagrams,
            2,
            "the send doorbell flushed the ACK before its own packet"
        );
        let c = wait(&[&a, &b], true, cqa, 2);
        let mut got: Vec<_> = c.iter().map(|w| (w.wr_id, w.opcode, w.status)).collect();
        got.sort_by_key(|g| g.0);
        use ferroverbs::verbs::WcStatus::Success;
        assert_eq!(
            got,
            [(1, WcOpcode::Send, Success), (8, WcOpcode::Recv, Success)]
        );
        let c = wait(&[&a, &b], true, cqb, 1);
        assert_eq!((c[0].wr_id, c[0].opcode), (2, WcOpcode::Send));
    });
}

/// Sends `n` SENDs of 64 bytes from `qa` to `qb` in posts of `batch`, stepping both
/// devices (or not, threaded), and checks that every WR completes exactly once on
/// each side, in order, with its data.
#[allow(clippy::too_many_arguments)]
fn sends_complete_once(
    nics: &[&Nic],
    step: bool,
    n: u64,
    batch: u64,
    qa: &mut ferroverbs::verbs::QueuePair<'_, SimBus>,
    cqa: &mut CompletionQueue<'_, SimBus>,
    la: &ferroverbs::verbs::MemoryRegion<'_, SimBus>,
    qb: &mut ferroverbs::verbs::QueuePair<'_, SimBus>,
    cqb: &mut CompletionQueue<'_, SimBus>,
    lb: &ferroverbs::verbs::MemoryRegion<'_, SimBus>,
) {
    let mut next = 0u64;
    while next < n {
        let k = batch.min(n - next);
        let at = |i: u64| (i % 256) as usize * 64;
        let rsg: Vec<[_; 1]> = (next..next + k)
            .map(|i| [lb.sge(at(i), 64).unwrap()])
            .collect();
        let recvs: Vec<RecvWr> = (next..).zip(&rsg).map(|(i, g)| RecvWr::new(i, g)).collect();
        qb.post_recv(&recvs).unwrap();
        for i in next..next + k {
            la.write(at(i), &[i as u8; 64]);
        }
        let ssg: Vec<[_; 1]> = (next..next + k)
            .map(|i| [la.sge(at(i), 64).unwrap()])
            .collect();
        let sends: Vec<SendWr> = (next..)
            .zip(&ssg)
            .map(|(i, g)| SendWr::send(i, g).signaled())
            .collect();
        qa.post_send(&sends).unwrap();
        let s = wait(nics, step, cqa, k as usize);
        let r = wait(nics, step, cqb, k as usize);
        for (j, (s, r)) in s.iter().zip(&r).enumerate() {
            let i = next + j as u64;
            assert_eq!((s.wr_id, s.opcode), (i, WcOpcode::Send));
            assert_eq!((r.wr_id, r.opcode, r.byte_len), (i, WcOpcode::Recv, 64));
            let mut got = [0u8; 64];
            lb.read((i % 256) as usize * 64, &mut got);
            assert_eq!(got, [i as u8; 64], "message {i}");
        }
        next += k;
    }
    // Nothing more completes.
    for _ in 0..20 {
        if step {
            for x in nics {
                x.sim.step();
            }
        }
    }
    let mut wc = [WorkCompletion::default(); 4];
    assert_eq!(cqa.poll(&mut wc) + cqb.poll(&mut wc), 0);
}

#[test]
fn deferred_acks_complete_every_wr_exactly_once() {
    // The responder's ACKs leave one step after the packets they acknowledge (one
    // ACK for all of a step's packets): every SEND still completes once, in order,
    // with no ACK timeout and nothing retransmitted; ping-pong, bursts, and threaded.
    // Both modes run on real time over this link: the QPs' ACK timeout is
    // REAL_TIME_ACK_TIMEOUT (34 s, longer than `wait` waits), so that a thread left
    // without a CPU cannot fire it spuriously.
    for (k, threaded) in [(29u8, false), (30, true)] {
        let a = nic(UdpConfig::new(addr(k, 1)), threaded);
        let b = nic(UdpConfig::new(addr(k, 2)), threaded);
        with_pair(&a, &b, PATIENT, |qa, cqa, la, qb, cqb, lb| {
            sends_complete_once(&[&a, &b], !threaded, 200, 1, qa, cqa, la, qb, cqb, lb);
            sends_complete_once(&[&a, &b], !threaded, 600, 100, qa, cqa, la, qb, cqb, lb);
        });
        let (da, db) = (a.sim.stats().data_path, b.sim.stats().data_path);
        for d in [da, db] {
            assert_eq!((d.ack_timeouts, d.retransmits, d.naks), (0, 0, 0), "{d:?}");
        }
        let (sa, sb) = (a.link.stats(), b.link.stats());
        // Every SEND is one datagram; the ACKs are at most one per SEND, fewer when
        // a step acknowledges several.
        assert_eq!(sa.tx_datagrams, 800, "{sa:?}");
        assert!(sb.tx_datagrams >= 1 && sb.tx_datagrams <= 800, "{sb:?}");
        assert_eq!(sb.rx_datagrams, 800, "{sb:?}");
        if threaded {
            assert!(
                sb.rx_bursts >= 1,
                "the device thread read the socket: {sb:?}"
            );
        }
    }
}

#[test]
fn a_lost_datagram_is_recovered() {
    // A datagram taken off the receive queue before the device sees it (lost on the
    // wire): the responder NAKs the gap, the requester goes back and retransmits;
    // every message arrives once and in order.
    let a = nic(UdpConfig::new(addr(31, 1)), false);
    let b = nic(UdpConfig::new(addr(31, 2)), false);
    // The default ACK timeout (67 ms): the gap is NAKed, and should the NAK not do
    // it, the timer recovers well within `wait`'s guard. A spurious timeout (a
    // stalled thread) only adds a retransmission, which this test expects anyway.
    with_pair(&a, &b, 14, |qa, cqa, la, qb, cqb, lb| {
        let rsg: Vec<[_; 1]> = (0..4).map(|i| [lb.sge(i * 64, 64).unwrap()]).collect();
        let recvs: Vec<RecvWr> = (0..).zip(&rsg).map(|(i, g)| RecvWr::new(i, g)).collect();
        qb.post_recv(&recvs).unwrap();
        for i in 0..4u8 {
            la.write(usize::from(i) * 64, &[i + 1; 64]);
        }
        let ssg: Vec<[_; 1]> = (0..4).map(|i| [la.sge(i * 64, 64).unwrap()]).collect();
        let sends: Vec<SendWr> = (0..)
            .zip(&ssg)
            .map(|(i, g)| SendWr::send(i, g).signaled())
            .collect();
        qa.post_send(&sends).unwrap();
        let start = Instant::now();
        while b.sim.stats().rx_queued == 0 {
            assert!(start.elapsed() < Duration::from_secs(20), "nothing arrived");
            b.link.poll();
        }
        let lost = b.sim.rx_queue().pop().expect("a frame");
        drop(lost);
        let s = wait(&[&a, &b], true, cqa, 4);
        let r = wait(&[&a, &b], true, cqb, 4);
        for i in 0..4u64 {
            assert_eq!((s[i as usize].wr_id, r[i as usize].wr_id), (i, i));
            let mut got = [0u8; 64];
            lb.read(i as usize * 64, &mut got);
            assert_eq!(got, [i as u8 + 1; 64]);
        }
        let mut wc = [WorkCompletion::default(); 4];
        for _ in 0..10 {
            a.sim.step();
            b.sim.step();
        }
        assert_eq!(cqa.poll(&mut wc) + cqb.poll(&mut wc), 0);
    });
    let (da, db) = (a.sim.stats().data_path, b.sim.stats().data_path);
    assert!(da.retransmits >= 1, "{da:?}");
    assert!(db.naks + da.ack_timeouts >= 1, "{da:?} {db:?}");
}

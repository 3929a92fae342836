//! librdmacm programs (Debian 12's `rdmacm-utils`, unmodified) on the userspace RDMA
//! interface: rdma-core's librdmacm, libibverbs and libmlx5 over
//! `/dev/infiniband/rdma_cm` and `uverbs0` of `ferroverbs run`, two processes each
//! with its own simulated NIC, connected by the CM on QP1 (REQ, REP, RTU) and
//! disconnected by DREQ and DREP.

mod uapi_support;

use std::sync::Mutex;
use std::time::Duration;

use uapi_support::{have, net, Proc};

static SERIAL: Mutex<()> = Mutex::new(());

/// The RC QPs' shortest local ACK timeout: 4.096 us x 2^20 = 4.3 s. The timer runs on
/// real time while the peer process's threads may wait for a CPU on a loaded 2-core
/// machine; at the 17 the CM negotiates (0.54 s), eight expiries in a row, 4.3 s
/// without the peer running, fail a WR although nothing was lost (as
/// `ibverbs/tests/tools.rs` explains for the drop-in).
const PATIENT: [(&str, &str); 1] = [("FERROVERBS_MIN_ACK_TIMEOUT", "20")];

/// Waits (up to a minute) until the simulated NIC at `ip` has bound its UDP port
/// 4791 (`/proc/net/udp`), then two seconds more for the program to reach its CM
/// calls.
fn wait_for_nic(ip: std::net::Ipv4Addr) {
    // /proc/net/udp: local address as little-endian hex of the IPv4 address, port.
    let want = format!("{:08X}:12B7", u32::from_le_bytes(ip.octets()));
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        let t = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
        if t.lines()
            .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(2));
}

/// Runs `server` and then `client` (the server given time to listen), each on its own
/// NIC; both must exit 0 within `limit`. Returns (server, client) stdout.
fn cm_pair(tool: &str, server: &[&str], client: &[&str], hosts: (u8, u8)) -> (String, String) {
    try_cm_pair(tool, server, client, hosts).unwrap_or_else(|e| panic!("{e}"))
}

/// [`cm_pair`], the failure returned.
fn try_cm_pair(
    tool: &str,
    server: &[&str],
    client: &[&str],
    hosts: (u8, u8),
) -> Result<(String, String), String> {
    run_pair(tool, server, client, hosts, true, None)
}

/// Runs the pair; with `server_exits` false only the client's status counts (a
/// server that serves until killed).
fn run_pair(
    tool: &str,
    server: &[&str],
    client: &[&str],
    hosts: (u8, u8),
    server_exits: bool,
    tolerated: Option<&str>,
) -> Result<(String, String), String> {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // rping -C 1000 -V takes seconds on a quiet machine, minutes on a loaded one.
    let limit = Duration::from_secs(600);
    let (sip, cip) = (net::host(hosts.0), net::host(hosts.1));
    let spawn_server = || {
        let s = Proc::spawn(
            &format!("{tool} server"),
            &format!("sim:{sip}"),
            server,
            &PATIENT,
        );
        wait_for_nic(sip);
        s
    };
    // No TCP to watch: the server's LISTEN is a CM call; give it its start-up. A
    // request before it is rejected (REJ 8, nobody listens): the pair runs again
    // while that is so, for up to a minute (a loaded machine starts slowly), each
    // time with a new server. Not the same one: perftest's `-R` client connects
    // twice (its exchange of parameters, then the test QPs) without waiting for the
    // server's second listen, so on a loaded machine its second REQ can be
    // rejected; the client then dies, and the server, waiting for test QPs, would
    // take the next client's first connection for them (a run that never ends).
    let mut s = spawn_server();
    let start = std::time::Instant::now();
    let (cs, co, ce) = loop {
        let c = Proc::spawn(
            &format!("{tool} client"),
            &format!("sim:{cip}"),
            client,
            &PATIENT,
        );
        let (cs, co, ce) = c.finish(limit);
        // perftest's client reports a rejected request as a failed connect, or
        // (the latency tests' client) as the event's number: 8 is
        // RDMA_CM_EVENT_REJECTED in librdmacm's `enum rdma_cm_event_type`.
        let all = format!("{co}{ce}");
        let refused = cs.is_some_and(|x| !x.success())
            && (all.contains("REJECTED")
                || all.contains("Unable to perform rdma_client")
                || all.contains("Unexpected CM event bl blka 8"))
            && start.elapsed() < Duration::from_secs(60);
        if !refused {
            break (cs, co, ce);
        }
        let (ss, so, se) = s.finish(Duration::from_secs(1));
        println!(
            "{tool} client refused (the server not listening yet): again, with a new server; the old one ({ss:?}):\n{so}{se}"
        );
        s = spawn_server();
    };
    let wait = if server_exits { 30 } else { 2 };
    let (ss, so, se) = s.finish(Duration::from_secs(wait));
    println!("--- {tool} server ---\n{so}{se}\n--- client ---\n{co}{ce}");
    let mut who = vec![("client", cs, &co, &ce)];
    if server_exits {
        who.push(("server", ss, &so, &se));
    }
    for (who, st, o, e) in who {
        match st {
            Some(x) if x.success() => {}
            Some(_) if tolerated.is_some_and(|t| e.contains(t)) => {
                println!("{tool} {who}: a tolerated failure ({tolerated:?})");
            }
            Some(x) => return Err(format!("{tool} {who} failed: {x}\n{o}\n{e}")),
            None => return Err(format!("{tool} {who} did not finish (killed)\n{o}\n{e}")),
        }
    }
    Ok((so, co))
}

/// rping with `-V`: each of the 1000 pings is an RDMA READ of the client's buffer
/// and an RDMA WRITE back, the server's copy compared with the client's every time.
/// Its server closes its event channel while its CM thread waits in
/// `rdma_get_cm_event` (rdma-core 44) and must still exit 0 from `main`.
#[test]
fn rping_connects_by_the_cm_and_verifies_a_thousand_pings() {
    if !have("rping") {
        return;
    }
    let s = net::host(51).to_string();
    let port = net::tcp_port(0).to_string();
    let server = ["rping", "-s", "-a", &s, "-p", &port, "-C", "1000", "-V"];
    let client = [
        "rping", "-c", "-a", &s, "-p", &port, "-C", "1000", "-v", "-V",
    ];
    // rping of rdma-core 44 closes its event channel while its CM thread may be on
    // its way back into `rdma_get_cm_event` after the last event: then that read
    // finds the descriptor closed (EBADF, as on Linux) and rping exits 255 after
    // all its pings. A race of the program (later rping wakes the thread by an
    // eventfd instead), likelier on a loaded machine; tolerated, the pings checked.
    let (_, co) = run_pair(
        "rping",
        &server,
        &client,
        (51, 52),
        true,
        Some("rdma_get_cm_event: Bad file descriptor"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(co.contains("ping data: rdma-ping-999"), "{co}");
    let pings = co
        .lines()
        .filter(|l| l.contains("ping data: rdma-ping-"))
        .count();
    assert_eq!(pings, 1000, "{co}");
}

/// A connection request to a port nobody listens on: the server's CM answers REJ
/// with reason 8 (invalid service ID) and the client gets RDMA_CM_EVENT_REJECTED
/// with status 8, as from Linux's CM, within a second (no retries).
#[test]
fn rping_to_a_port_nobody_listens_on_is_rejected() {
    if !have("rping") {
        return;
    }
    let s = net::host(63).to_string();
    let (port, other) = (net::tcp_port(5).to_string(), net::tcp_port(6).to_string());
    let server = ["rping", "-s", "-a", &s, "-p", &port, "-C", "5"];
    let client = ["rping", "-c", "-a", &s, "-p", &other, "-C", "5"];
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut sp = Proc::spawn("rping server", &format!("sim:{s}"), &server, &PATIENT);
    // Its NIC up (so that its CM answers); the port it listens on is another.
    wait_for_nic(net::host(63));
    assert!(sp.running(), "the rping server runs");
    let start = std::time::Instant::now();
    let c = Proc::spawn(
        "rping client",
        &format!("sim:{}", net::host(64)),
        &client,
        &PATIENT,
    );
    let (cs, co, ce) = c.finish(Duration::from_secs(60));
    let took = start.elapsed();
    drop(sp);
    println!("{co}{ce}");
    assert!(cs.is_some_and(|s| !s.success()), "{cs:?}");
    assert!(
        format!("{co}{ce}").contains("cma event RDMA_CM_EVENT_REJECTED, error 8"),
        "{co}{ce}"
    );
    // A CM retry would take 4 s and more (the response timeout 2^20 x 4.096 us).
    assert!(took < Duration::from_secs(4), "{took:?}");
}

#[test]
fn ucmatose_makes_and_tears_down_several_connections() {
    if !have("ucmatose") {
        return;
    }
    let s = net::host(53).to_string();
    let port = net::tcp_port(1).to_string();
    let (so, co) = cm_pair(
        "ucmatose",
        &["ucmatose", "-p", &port, "-c", "4", "-C", "20"],
        &["ucmatose", "-s", &s, "-p", &port, "-c", "4", "-C", "20"],
        (53, 54),
    );
    for out in [&so, &co] {
        assert!(out.contains("data transfers complete"), "{out}");
        assert!(out.contains("return status 0"), "{out}");
    }
    assert!(so.contains("disconnected"), "{so}");
}

#[test]
fn udaddy_resolves_a_ud_service_by_sidr_and_exchanges_datagrams() {
    if !have("udaddy") {
        return;
    }
    // udaddy's -p is the port space, not the port: it listens on its 7174 (each test
    // run has its own addresses).
    let s = net::host(55).to_string();
    let (so, co) = cm_pair(
        "udaddy",
        &["udaddy", "-C", "20"],
        &["udaddy", "-s", &s, "-C", "20"],
        (55, 56),
    );
    for out in [&so, &co] {
        assert!(out.contains("data transfers complete"), "{out}");
        assert!(out.contains("return status 0"), "{out}");
    }
}

/// perftest's eight tests with `-R`: the connection (and perftest's own parameter
/// exchange, over a first CM connection it then drops) by rdma_cm instead of its
/// TCP socket. `ib_atomic_lat`'s server returns from `main` without disconnecting:
/// its process exit releases the ids, whose DREQ lets the client finish.
#[test]
fn perftest_eight_tests_connect_by_rdma_cm() {
    let tools = [
        ("ib_send_lat", "2"),
        ("ib_send_bw", "65536"),
        ("ib_write_lat", "2"),
        ("ib_write_bw", "65536"),
        ("ib_read_lat", "2"),
        ("ib_read_bw", "65536"),
        ("ib_atomic_lat", "8"),
        ("ib_atomic_bw", "8"),
    ];
    for (i, (tool, size)) in tools.into_iter().enumerate() {
        if !have(tool) {
            return;
        }
        let hosts = (70 + 2 * i as u8, 71 + 2 * i as u8);
        let s = net::host(hosts.0).to_string();
        let port = net::tcp_port(3).to_string();
        let (so, co) = cm_pair(
            tool,
            &[tool, "-R", "-p", &port, "-n", "200"],
            &[tool, "-R", "-p", &port, "-n", "200", &s],
            hosts,
        );
        // The result line: message size and iterations, on the side that measures
        // (both for send and bw tests; the client for READ and atomic latency).
        let row = |o: &str| {
            o.lines().any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 2 && f[0] == size && f[1] == "200"
            })
        };
        assert!(row(&co), "{tool} client: {co}");
        assert!(so.contains("rdma_cm QPs"), "{tool} server: {so}");
    }
}

/// rsockets over rdma_cm: `rstream` (socket calls on an RC connection the library
/// makes with rdma_cm) and `riostream` (its RDMA-write `riomap` variant), 100
/// transfers of 4 KiB each way with the data checked by the tool's own exchange.
#[test]
fn rstream_and_riostream_run_on_rsockets() {
    for (tool, hosts) in [("rstream", (90, 91)), ("riostream", (92, 93))] {
        if !have(tool) {
            return;
        }
        let s = net::host(hosts.0).to_string();
        let port = net::tcp_port(7).to_string();
        let args = [tool, "-S", "4096", "-C", "100", "-p", &port];
        let mut client = args.to_vec();
        client.extend(["-s", &s]);
        let (so, co) = cm_pair(tool, &args, &client, hosts);
        for out in [&so, &co] {
            assert!(
                out.lines()
                    .any(|l| l.starts_with("custom") && l.contains(" 100 ")),
                "{tool}: {out}"
            );
        }
    }
}

/// `cmtime`: ten connections set up at once and torn down, each step timed; its
/// server (rdma-core 44) serves until killed, so the client's status decides.
#[test]
fn cmtime_times_ten_connections() {
    if !have("cmtime") {
        return;
    }
    let s = net::host(94).to_string();
    let port = net::tcp_port(8).to_string();
    let (_, co) = run_pair(
        "cmtime",
        &["cmtime", "-p", &port],
        &["cmtime", "-c", "10", "-p", &port, "-s", &s],
        (94, 95),
        false,
        None,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for step in [
        "resolve addr",
        "resolve route",
        "create qp",
        "connect",
        "disconnect",
    ] {
        assert!(
            co.lines().any(|l| l.starts_with(step)),
            "{step} missing: {co}"
        );
    }
    assert!(!co.contains("event:"), "an unexpected event: {co}");
}

/// `mckey`: an IP multicast join answers ENOSYS, what Linux's `rdma_join_multicast`
/// answers for a port without multicast support; mckey reports it and fails.
#[test]
fn mckey_reports_the_unsupported_multicast_join() {
    if !have("mckey") {
        return;
    }
    let b = net::host(96).to_string();
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let p = Proc::spawn(
        "mckey",
        &format!("sim:{b}"),
        &["mckey", "-m", "224.0.0.9", "-b", &b, "-C", "1"],
        &PATIENT,
    );
    let (st, out, err) = p.finish(Duration::from_secs(60));
    println!("{out}{err}");
    assert!(st.is_some_and(|s| !s.success()), "{st:?}");
    let all = format!("{out}{err}");
    assert!(
        all.contains("failure joining: Function not implemented"),
        "{all}"
    );
    assert!(all.contains("return status -1"), "{all}");
}

/// `rdma_server`/`rdma_client`: `rdma_getaddrinfo`, `rdma_create_ep` with its QP made
/// by librdmacm, synchronous ids (each on a channel of its own: `rdma_get_request`
/// moves the new id with MIGRATE_ID), `rdma_post_recv`/`rdma_post_send`.
#[test]
fn rdma_server_and_rdma_client_exchange_a_message() {
    if !have("rdma_server") {
        return;
    }
    let s = net::host(61).to_string();
    let port = net::tcp_port(4).to_string();
    let (so, co) = cm_pair(
        "rdma_server",
        &["rdma_server", "-p", &port],
        &["rdma_client", "-s", &s, "-p", &port],
        (61, 62),
    );
    assert!(so.contains("rdma_server: end 0"), "{so}");
    assert!(co.contains("rdma_client: end 0"), "{co}");
}

/// `rdma_xserver`/`rdma_xclient` over RC (their default; XRC ids are `RDMA_PS_IB`,
/// not offered): `rdma_create_ep` on both sides, one message each way.
#[test]
fn rdma_xserver_and_rdma_xclient_exchange_a_message_over_rc() {
    if !have("rdma_xserver") {
        return;
    }
    let s = net::host(97).to_string();
    let port = net::tcp_port(9).to_string();
    let (so, co) = cm_pair(
        "rdma_xserver",
        &["rdma_xserver", "-p", &port],
        &["rdma_xclient", "-s", &s, "-p", &port],
        (97, 98),
    );
    assert!(so.contains("rdma_xserver: end 0"), "{so}");
    assert!(co.contains("rdma_xclient: end 0"), "{co}");
}

/// `rcopy` (rsockets): a 3 MB file of random bytes copied to the server, which
/// writes it through a shared mapping of the destination (`rrecv` into it); the
/// copy is byte for byte the source. Its server (rdma-core 44) serves until killed.
#[test]
fn rcopy_copies_a_file_byte_for_byte() {
    if !have("rcopy") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ferroverbs-rcopy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, dst) = (dir.join("src"), dir.join("dst"));
    // A reproducible pattern no run of bytes repeats early (xorshift).
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let data: Vec<u8> = (0..3_000_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(&src, &data).unwrap();
    let s = net::host(120).to_string();
    let port = net::tcp_port(10).to_string();
    let target = format!("{s}:{}", dst.display());
    let (so, co) = run_pair(
        "rcopy",
        &["rcopy", "-p", &port],
        &["rcopy", src.to_str().unwrap(), &target, "-p", &port],
        (120, 121),
        false,
        None,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(co.contains("3000000 bytes in"), "{co}");
    assert!(so.contains(&format!("opening: {}", dst.display())), "{so}");
    let got = std::fs::read(&dst).unwrap();
    assert_eq!(got.len(), data.len());
    assert!(got == data, "the copy differs from the source");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `rstream`'s other modes, 100 transfers of 64 KiB each way: `-T v` (every byte
/// checked against its pattern), `-T n` (non-blocking rsockets, EAGAIN retried),
/// `-T b` (blocking calls without rpoll).
#[test]
fn rstream_verifies_data_and_runs_non_blocking_and_blocking() {
    if !have("rstream") {
        return;
    }
    for (mode, hosts) in [("v", (122, 123)), ("n", (124, 125)), ("b", (126, 127))] {
        let s = net::host(hosts.0).to_string();
        let port = net::tcp_port(11).to_string();
        let args = [
            "rstream", "-S", "65536", "-C", "100", "-T", mode, "-p", &port,
        ];
        let mut client = args.to_vec();
        client.extend(["-s", &s]);
        let (so, co) = cm_pair("rstream", &args, &client, hosts);
        for out in [&so, &co] {
            assert!(
                out.lines()
                    .any(|l| l.starts_with("custom") && l.contains(" 64k ") && l.contains(" 100 ")),
                "rstream -T {mode}: {out}"
            );
        }
    }
}

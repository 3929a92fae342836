//! `ferroverbs perf --server` / `--client` as a user runs them: two OS processes, each
//! with one simulated NIC bound to its own 127.x.y.z address, meeting over TCP as
//! perftest's two sides do and then running the test as RoCEv2 over UDP. Every test
//! with a few iterations: both processes exit 0 and the client prints perftest's
//! information block, column header and result lines.
//!
//! Each run uses its own pair of loopback addresses, derived from this process's id
//! and the test, so that tests (and concurrent test runs) do not share sockets.

#[path = "common/net.rs"]
mod net;

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";
const LAT_COLUMNS: &str = "#bytes #iterations t_min[usec] t_max[usec] t_typical[usec] \
                           t_avg[usec] t_stdev[usec] 99% percentile[usec] 99.9% \
                           percentile[usec]";
const BW_COLUMNS: &str = "#bytes #iterations BW peak[MiB/sec] BW average[MiB/sec] MsgRate[Mpps]";

/// A whole run must end within this (debug builds on a loaded machine are slow).
const RUN_TIMEOUT: Duration = Duration::from_secs(180);

/// The QPs' local ACK timeout exponent on both sides (`--qp-timeout`, perftest's
/// `-u`): 4.096 µs × 2^20 = 4.3 s. The timer runs on real time while the peer
/// process's threads (its device thread, its polling thread) may wait for a CPU: at
/// perftest's default 14 (67 ms), eight expiries in a row (`retry_cnt` 7 + 1), i.e.
/// 537 ms without the peer running, fail a WR with a retry error although nothing
/// was lost; at 20 that takes 34 s without the peer. The loopback link may still drop
/// a datagram (unprivileged, the socket's receive buffer is capped by
/// `net.core.rmem_max`, often 208 KiB, below the 8 MiB the link asks for), and a lost
/// packet that nothing follows waits for one expiry: 4.3 s (8.6 s if its
/// retransmission is lost too), within the tool's stall limit (10 s beyond the
/// 8-expiry budget, 44 s) and far within RUN_TIMEOUT for the few such tails a run
/// of at most 96 messages per size can have. (23, the in-process tests' choice,
/// would make each such tail cost 34 s.)
const QP_TIMEOUT: &str = "20";

struct Run {
    code: Option<i32>,
    out: String,
    err: String,
}

fn spawn(args: &[String]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ferroverbs"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the ferroverbs binary runs")
}

fn finish(mut c: Child, deadline: Instant) -> Run {
    // Drain the pipes on threads so a chatty child never blocks.
    let mut so = c.stdout.take().unwrap();
    let mut se = c.stderr.take().unwrap();
    let to = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let te = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let code = loop {
        if let Some(st) = c.try_wait().unwrap() {
            break st.code();
        }
        if Instant::now() > deadline {
            let _ = c.kill();
            let _ = c.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code,
        out: to.join().unwrap(),
        err: te.join().unwrap(),
    }
}

/// The server's and the client's NIC addresses for test number `k` (in this
/// process's loopback /24, `common::net`).
fn addresses(k: u8) -> (String, String) {
    (
        net::host(2 * k + 1).to_string(),
        net::host(2 * k + 2).to_string(),
    )
}

/// Runs `perf <server args>` as the server and `perf <client args>` as the client.
fn pair_with(k: u8, server_args: &[&str], client_args: &[&str]) -> (Run, Run) {
    let (sip, cip) = addresses(k);
    let mut s: Vec<String> = ["perf"]
        .iter()
        .chain(server_args)
        .map(|x| x.to_string())
        .collect();
    s.extend(["--server", "--bind", &sip, "--ip", &sip].map(String::from));
    s.extend(["--qp-timeout", QP_TIMEOUT].map(String::from));
    let mut c: Vec<String> = ["perf"]
        .iter()
        .chain(client_args)
        .map(|x| x.to_string())
        .collect();
    c.extend(["--client", &sip, "--ip", &cip].map(String::from));
    c.extend(["--qp-timeout", QP_TIMEOUT].map(String::from));
    let deadline = Instant::now() + RUN_TIMEOUT;
    let server = spawn(&s);
    let client = spawn(&c);
    let cr = finish(client, deadline);
    let sr = finish(server, deadline);
    (sr, cr)
}

fn pair(k: u8, args: &[&str]) -> (Run, Run) {
    pair_with(k, args, args)
}

/// Checks a successful run and returns the client's result rows.
fn check(k: u8, args: &[&str], title: &str, columns: &str) -> (Run, Run, Vec<Vec<f64>>) {
    let (s, c) = pair(k, args);
    let ctx = format!(
        "{args:?}\n--- server ({:?}):\n{}\n{}\n--- client ({:?}):\n{}\n{}",
        s.code, s.out, s.err, c.code, c.out, c.err
    );
    assert_eq!(c.code, Some(0), "{ctx}");
    assert_eq!(s.code, Some(0), "{ctx}");
    assert!(
        s.out.contains("* Waiting for client to connect... *"),
        "{ctx}"
    );
    for out in [&s.out, &c.out] {
        assert!(out.lines().any(|l| l.trim() == title), "{ctx}");
        assert!(out.contains("RoCEv2 over UDP"), "{ctx}");
        assert!(out.contains(" local address: LID 0000 QPN "), "{ctx}");
    }
    // The client's report is the in-process one: header, rows, closing line.
    assert!(c.out.starts_with(RESULT_LINE), "{ctx}");
    let lines: Vec<&str> = c.out.lines().collect();
    let h = lines
        .iter()
        .position(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") == columns)
        .unwrap_or_else(|| panic!("column header missing: {ctx}"));
    let rows: Vec<Vec<f64>> = lines[h + 1..]
        .iter()
        .take_while(|l| **l != RESULT_LINE)
        .map(|l| {
            l.split_whitespace()
                .map(|f| f.parse::<f64>().unwrap_or_else(|_| panic!("{l:?}: {ctx}")))
                .collect()
        })
        .collect();
    assert!(!rows.is_empty(), "{ctx}");
    let width = if columns == LAT_COLUMNS { 9 } else { 5 };
    for r in &rows {
        assert_eq!(r.len(), width, "{r:?}: {ctx}");
        if width == 9 {
            // t_min and t_max (µs, 2 decimals): a round trip through two processes'
            // sockets takes far more than the 5 ns that would print as 0.00.
            assert!(r[2] > 0.0 && r[width - 1] > 0.0, "{r:?}: {ctx}");
        } else {
            check_bw_row(r, &ctx);
        }
    }
    // The wire summary on standard error (drops are possible under load: a full
    // device queue drops a datagram, and the transport recovers it).
    for err in [&s.err, &c.err] {
        assert!(err.contains("ferroverbs: UDP link"), "{ctx}");
    }
    (s, c, rows)
}

/// Checks a bandwidth row (bytes, iterations, BW peak, BW average, MsgRate) by what
/// holds at any speed. Bandwidths are printed with 2 decimals (MiB/s) and the rate
/// with 6 (Mpps), so a slow run prints 0.00: 8-byte atomics below 655 per second, as
/// a loaded machine gave (32 in 60 ms). The runner computes the average and the rate
/// from the same total time (average = rate × bytes / 2^20), so the printed values
/// agree within their rounding: half a unit of the average's last digit (0.005)
/// plus half a unit of the rate's (5e-7 Mpps) times the size.
fn check_bw_row(r: &[f64], ctx: &str) {
    let (bytes, peak, avg, rate) = (r[0], r[2], r[3], r[4]);
    assert!(peak >= 0.0 && avg >= 0.0 && rate >= 0.0, "{r:?}: {ctx}");
    let implied = rate * 1e6 * bytes / 1_048_576.0;
    let slack = 0.005 + 0.5 * bytes / 1_048_576.0 + 1e-9;
    assert!(
        (implied - avg).abs() <= slack,
        "average {avg} MiB/s, rate {rate} Mpps of {bytes} B: {r:?}: {ctx}"
    );
}

#[test]
fn send_lat() {
    let (s, _, rows) = check(
        1,
        &["send-lat", "-n", "20"],
        "Send Latency Test",
        LAT_COLUMNS,
    );
    assert_eq!((rows[0][0], rows[0][1]), (2.0, 20.0));
    // The server reports its own latency, as perftest's does.
    assert!(
        s.out
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") == LAT_COLUMNS),
        "{}",
        s.out
    );
}

#[test]
fn send_bw() {
    let (_, _, rows) = check(
        2,
        &["send-bw", "-n", "32", "-s", "2048"],
        "Send BW Test",
        BW_COLUMNS,
    );
    assert_eq!((rows[0][0], rows[0][1]), (2048.0, 32.0));
}

#[test]
fn write_lat_inline_and_not() {
    let (_, _, rows) = check(
        3,
        &["write-lat", "-n", "20", "-s", "64"],
        "RDMA_Write Latency Test",
        LAT_COLUMNS,
    );
    assert_eq!((rows[0][0], rows[0][1]), (64.0, 20.0));
    let (_, c, rows) = check(
        4,
        &["write-lat", "-n", "10", "-s", "3000"],
        "RDMA_Write Latency Test",
        LAT_COLUMNS,
    );
    assert_eq!(rows[0][0], 3000.0);
    assert!(c.out.contains(" RKey 0x"), "{}", c.out);
}

#[test]
fn write_bw_on_several_qps() {
    let (s, c, rows) = check(
        5,
        &["write-bw", "-n", "32", "-s", "4096", "-q", "3"],
        "RDMA_Write BW Test",
        BW_COLUMNS,
    );
    assert_eq!(rows[0][1], 96.0, "iterations times QPs");
    assert_eq!(c.out.matches(" local address:").count(), 3);
    // The passive server prints no result table.
    assert!(!s.out.contains("#bytes"), "{}", s.out);
}

#[test]
fn read_lat_and_bw() {
    let (_, _, rows) = check(
        6,
        &["read-lat", "-n", "20"],
        "RDMA_Read Latency Test",
        LAT_COLUMNS,
    );
    assert_eq!(rows[0][1], 20.0);
    let (_, _, rows) = check(
        7,
        &["read-bw", "-n", "32", "-s", "4096"],
        "RDMA_Read BW Test",
        BW_COLUMNS,
    );
    assert_eq!(rows[0][0], 4096.0);
}

#[test]
fn atomic_lat_and_bw() {
    check(
        8,
        &["atomic-lat", "-n", "20", "-A", "CMP_AND_SWAP"],
        "Atomic CMP_AND_SWAP Latency Test",
        LAT_COLUMNS,
    );
    let (_, _, rows) = check(
        9,
        &["atomic-bw", "-n", "32"],
        "Atomic FETCH_AND_ADD BW Test",
        BW_COLUMNS,
    );
    assert_eq!(rows[0][0], 8.0);
}

#[test]
fn large_messages() {
    let (_, _, rows) = check(
        10,
        &["send-lat", "-s", "4096", "-n", "10", "-H"],
        "Send Latency Test",
        LAT_COLUMNS,
    );
    assert_eq!(rows.len(), 1);
    let (_, _, rows) = check(
        11,
        &["write-bw", "-s", "65536", "-n", "8", "-t", "2"],
        "RDMA_Write BW Test",
        BW_COLUMNS,
    );
    assert_eq!(rows[0][0], 65536.0);
}

#[test]
fn deterministic_devices_stepped_by_each_process() {
    // A ping-pong: both processes step their devices while they wait. (A passive
    // server steps its device only while it waits on the rendezvous connection;
    // under heavy load that can be too rare for the transport's timers, see
    // docs/performance.md, across processes.)
    check(
        13,
        &["send-lat", "-n", "20", "--sim-mode", "deterministic"],
        "Send Latency Test",
        LAT_COLUMNS,
    );
}

#[test]
fn different_options_on_the_two_sides_are_refused() {
    let (s, c) = pair_with(14, &["send-lat", "-n", "20"], &["send-lat", "-n", "30"]);
    for r in [&s, &c] {
        assert_eq!(r.code, Some(3), "{}\n{}", r.out, r.err);
        assert!(r.err.contains("same options"), "{}", r.err);
        assert!(
            r.err.contains("server iters=20, client iters=30"),
            "{}",
            r.err
        );
    }
}

#[test]
fn cross_process_options_without_a_side_are_usage_errors() {
    for args in [
        &["perf", "send-lat", "--ip", "127.0.0.5"][..],
        &["perf", "send-lat", "--udp-port", "5000"],
        &["perf", "send-lat", "--client", "h", "--bind", "127.0.0.1"],
        &["perf", "send-lat", "--server", "--ip", "::1"],
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_ferroverbs"))
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("error:"), "{args:?}: {err}");
    }
}

#[test]
fn baselines_across_processes() {
    let (_, c, _) = check(
        15,
        &["send-lat", "-n", "20", "--baseline"],
        "Send Latency Test",
        LAT_COLUMNS,
    );
    assert!(
        c.out
            .contains(" Baseline (same run): TCP ping-pong between the two processes"),
        "{}",
        c.out
    );
    assert!(c.out.contains(" 2 B t_typical: "), "{}", c.out);
    let (_, c, _) = check(
        16,
        &["write-bw", "-n", "16", "-s", "4096", "--baseline"],
        "RDMA_Write BW Test",
        BW_COLUMNS,
    );
    assert!(
        c.out.contains(" Baseline (same run): raw UDP from "),
        "{}",
        c.out
    );
    assert!(c.out.contains("1040-byte datagrams"), "{}", c.out);
    assert!(c.out.contains(" 4096 B BW average: "), "{}", c.out);
    assert!(c.out.contains("% of the baseline"), "{}", c.out);
}

#[test]
fn completions_by_event_across_processes() {
    let (s, c, _) = check(
        17,
        &["send-lat", "-n", "20", "-e"],
        "Send Latency Test",
        LAT_COLUMNS,
    );
    for out in [&s.out, &c.out] {
        assert!(out.contains(" Test with events. Using sim@"), "{out}");
    }
    check(
        18,
        &["send-bw", "-n", "32", "-s", "4096", "-e"],
        "Send BW Test",
        BW_COLUMNS,
    );
}

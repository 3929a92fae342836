//! Unmodified Debian 12 verbs tools (`ibverbs-utils`, `perftest`) on the built
//! `libibverbs.so.1`: each runs with `LD_LIBRARY_PATH` pointing at a directory holding
//! it, on a simulated NIC chosen by `FERROVERBS_DEVICE`. Pairs run as two processes,
//! each with its own NIC address (a host of this process's loopback /24, `net`) and
//! the RoCE v2 traffic on real UDP datagrams; every test has its own addresses and
//! TCP port.
//!
//! A tool that is not installed skips its test with a printed notice, unless
//! `FERROVERBS_REQUIRE_IBVERBS_UTILS=1` (CI) makes that a failure.
//!
//! The `-a` perftest runs use `-n 5` iterations per size: sizes go up to 8 MiB, and a
//! software NIC moving some MB/s on two shared cores would need hours for the default
//! 1000 iterations of each.
//!
//! The RC runs use a long local ACK timeout ([`ACK_TIMEOUT`]): perftest's own
//! `-u`/`--qp-timeout`, and for the pingpongs, which always ask for 14, the library's
//! `FERROVERBS_MIN_ACK_TIMEOUT` floor ([`PATIENT`]). UC and UD have no ACK timer.

mod support;

#[path = "../../tests/common/pingpong_output.rs"]
mod pingpong_output;
use pingpong_output::check_completion_clock;

use std::sync::Mutex;
use std::time::Duration;

use support::{have, library_dir, net, pair, pair_env, run_ok};

/// The pairs run one at a time: each is four busy processes' worth of threads.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const LIMIT: Duration = Duration::from_secs(900);

/// The local ACK timeout exponent of the RC runs: 4.096 µs × 2^20 = 4.3 s. The timer
/// runs on real time while the peer process's threads (its NIC's device thread, the
/// tool's polling thread) may wait for a CPU: at the tools' 14 (67 ms), eight expiries
/// in a row (`retry_cnt` 7 + 1), 537 ms without the peer running, fail a WR with
/// "transport retry counter exceeded" although nothing was lost; at the library's
/// default floor of 18 (1.07 s), 8.6 s; at 20, 34 s. The loopback link may still drop
/// a datagram (unprivileged, the socket's receive buffer is capped by
/// `net.core.rmem_max`, often 208 KiB, below the 8 MiB the link asks for, and a
/// bandwidth test's 256-packet window overflows it), and a lost packet that nothing
/// follows waits for one expiry: 4.3 s, so even one such tail at every one of the 23
/// sizes of `ib_send_bw -a` adds 99 s, far within LIMIT (a 23, 34 s per expiry, would
/// add 13 minutes).
const ACK_TIMEOUT: &str = "20";

/// The environment of the RC pingpongs, which have no timeout option and ask for 14:
/// the library raises every QP's ACK timeout to [`ACK_TIMEOUT`]
/// (`FERROVERBS_MIN_ACK_TIMEOUT`, docs/ibverbs-compat.md).
const PATIENT: [(&str, &str); 1] = [("FERROVERBS_MIN_ACK_TIMEOUT", ACK_TIMEOUT)];

/// A pair is run again only when a tool printed perftest's calibration failure
/// (`support::pair_env`), in either stream; other failures are not.
#[test]
fn only_perftest_calibration_failures_are_run_again() {
    use support::{calibration_failed, PERFTEST_CALIBRATION_FAILED};
    let msg = format!("{PERFTEST_CALIBRATION_FAILED}: 0.820676 < 0.9\nCan't produce a report\n");
    assert!(calibration_failed("", &msg));
    assert!(calibration_failed(&msg, ""));
    assert!(!calibration_failed(
        " 2          5                0.00               0.07",
        "ethernet_read_keys: Couldn't read remote address"
    ));
}

#[test]
fn ibv_devices_lists_the_device() {
    if !have("ibv_devices") {
        return;
    }
    let lib = library_dir("devices");
    let out = run_ok(
        "ibv_devices",
        &lib,
        &format!("sim:{}", net::host(1)),
        &["ibv_devices"],
        Duration::from_secs(120),
    );
    assert!(out.contains("ferroverbs0"), "{out}");
    // The node GUID: EUI-64 of the simulated NIC's MAC 02:00:7f:A:B:01.
    let [_, a, b, _] = net::host(1).octets();
    assert!(
        out.contains(&format!("00007ffffe{a:02x}{b:02x}01")),
        "{out}"
    );
}

#[test]
fn ibv_devinfo_verbose_shows_an_active_roce_v2_port() {
    if !have("ibv_devinfo") {
        return;
    }
    let lib = library_dir("devinfo");
    let out = run_ok(
        "ibv_devinfo -v",
        &lib,
        &format!("sim:{}", net::host(2)),
        &["ibv_devinfo", "-v"],
        Duration::from_secs(300),
    );
    let gid = format!("GID[  0]:\t\t::ffff:{}, RoCE v2", net::host(2));
    for want in [
        "hca_id:\tferroverbs0",
        "vendor_id:\t\t\t0x02c9",
        "PORT_ACTIVE (4)",
        "active_mtu:\t\t1024 (3)",
        "link_layer:\t\tEthernet",
        &gid,
        "atomic_cap:\t\t\tATOMIC_HCA (1)",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
}

fn pingpong_done(out: &str) {
    assert!(out.contains("8192000 bytes in"), "{out}");
    assert!(out.contains("1000 iters in"), "{out}");
}

#[test]
fn ibv_rc_pingpong_between_two_processes() {
    if !have("ibv_rc_pingpong") {
        return;
    }
    let _s = serial();
    let lib = library_dir("rc_pingpong");
    let (s, c) = pair_env(
        "ibv_rc_pingpong -g 0",
        &lib,
        "ibv_rc_pingpong",
        &["-g", "0"],
        &PATIENT,
        11,
        12,
        1,
        LIMIT,
    );
    pingpong_done(&s);
    pingpong_done(&c);
    assert!(c.contains(&format!("GID ::ffff:{}", net::host(12))), "{c}");
    assert!(c.contains("remote address: LID 0x0000, QPN"), "{c}");
}

/// `-t`: the CQ from `ibv_create_cq_ex` with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`
/// (after `ibv_query_device_ex` reported a `completion_timestamp_mask`), every
/// completion through `ibv_start_poll` / `ibv_next_poll` and its timestamp from
/// `ibv_wc_read_completion_ts`. `-c` has the server check the data it received.
/// (`-t -e` is not run: rc_pingpong.c's timestamp path takes an empty
/// `ibv_start_poll` after a CQ event, ENOENT, as a failure, "poll CQ failed 2". A
/// CQE written between the event and the re-arm makes the re-arm fire at once
/// (docs/simulator.md, CQ arming), the poll that follows takes that CQE too, and the
/// next event finds the CQ empty.)
#[test]
fn ibv_rc_pingpong_with_completion_timestamps() {
    if !have("ibv_rc_pingpong") {
        return;
    }
    let _s = serial();
    let lib = library_dir("rc_pingpong_t");
    let (s, c) = pair_env(
        "ibv_rc_pingpong -g 0 -t",
        &lib,
        "ibv_rc_pingpong",
        &["-g", "0", "-t", "-c", "-n", "300"],
        &PATIENT,
        101,
        102,
        14,
        LIMIT,
    );
    for out in [&s, &c] {
        assert!(out.contains("300 iters in"), "{out}");
        assert!(!out.contains("invalid data"), "{out}");
        check_completion_clock(out);
    }
}

/// `-N`: the QPs come from `ibv_create_qp_ex` with `IBV_QP_EX_WITH_SEND` and every
/// SEND goes through `ibv_wr_start` / `ibv_wr_send` / `ibv_wr_set_sge` /
/// `ibv_wr_complete` (the library's `ibv_qp_ex` interface).
#[test]
fn ibv_rc_pingpong_with_the_new_send_api() {
    if !have("ibv_rc_pingpong") {
        return;
    }
    let _s = serial();
    let lib = library_dir("rc_pingpong_n");
    let (s, c) = pair_env(
        "ibv_rc_pingpong -g 0 -N",
        &lib,
        "ibv_rc_pingpong",
        &["-g", "0", "-N"],
        &PATIENT,
        15,
        16,
        13,
        LIMIT,
    );
    pingpong_done(&s);
    pingpong_done(&c);
}

#[test]
fn ibv_rc_pingpong_with_completion_events() {
    if !have("ibv_rc_pingpong") {
        return;
    }
    let _s = serial();
    let lib = library_dir("rc_pingpong_e");
    let (s, c) = pair_env(
        "ibv_rc_pingpong -g 0 -e",
        &lib,
        "ibv_rc_pingpong",
        &["-g", "0", "-e", "-n", "200"],
        &PATIENT,
        13,
        14,
        2,
        LIMIT,
    );
    for out in [&s, &c] {
        assert!(out.contains("200 iters in"), "{out}");
    }
}

/// Whether perftest says it posts through the `ibv_wr_*` interface (its banner line
/// `ibv_wr* API     : ON`).
fn wr_api_on(out: &str) -> bool {
    out.lines().any(|l| {
        let l = l.trim();
        l.starts_with("ibv_wr* API") && l.split(':').nth(1).map(str::trim) == Some("ON")
    })
}

/// The result line of a perftest run: the first line whose first field is `size`.
fn result_line<'a>(out: &'a str, size: &str) -> &'a str {
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(size))
        .unwrap_or_else(|| panic!("no result line for {size} bytes in:\n{out}"))
}

/// The numbers of a result line after the size and iteration count (NaN for a field
/// that is not a number).
fn numbers(line: &str) -> Vec<f64> {
    line.split_whitespace()
        .skip(2)
        .map(|x| x.parse::<f64>().unwrap_or(f64::NAN))
        .collect()
}

#[test]
fn ib_send_lat_default() {
    if !have("ib_send_lat") {
        return;
    }
    let _s = serial();
    let lib = library_dir("send_lat");
    let args = ["-u", ACK_TIMEOUT];
    let (s, c) = pair("ib_send_lat", &lib, "ib_send_lat", &args, 21, 22, 3, LIMIT);
    for out in [&s, &c] {
        assert!(out.contains("Send Latency Test"), "{out}");
        // The device reports a ConnectX-5's part id: perftest posts through the
        // `ibv_wr_*` interface.
        assert!(wr_api_on(out), "{out}");
        let l = result_line(out, "2");
        assert_eq!(l.split_whitespace().nth(1), Some("1000"), "{l}");
        // t_min, t_max, t_typical, t_avg: positive microseconds.
        let n = numbers(l);
        assert!(n[..4].iter().all(|v| v.is_finite() && *v > 0.0), "{l}");
    }
}

#[test]
fn ib_send_bw_default() {
    if !have("ib_send_bw") {
        return;
    }
    let _s = serial();
    let lib = library_dir("send_bw");
    let args = ["--qp-timeout", ACK_TIMEOUT];
    let (_s, c) = pair("ib_send_bw", &lib, "ib_send_bw", &args, 31, 32, 4, LIMIT);
    assert!(wr_api_on(&c), "{c}");
    let l = result_line(&c, "65536");
    assert_eq!(l.split_whitespace().nth(1), Some("1000"), "{l}");
    // BW peak, BW average (MB/s), message rate: the average is positive. It prints
    // with 2 decimals; the run ends within LIMIT (900 s), so 1000 messages of 64 KiB
    // average at least 0.07 MB/s, however loaded the machine.
    let n = numbers(l);
    assert!(n[1].is_finite() && n[1] > 0.0, "{l}");
    check_bw_numbers(l, 65536.0);
}

/// RDMA WRITE bandwidth through perftest's `ibv_wr_*` path (`ibv_wr_rdma_write`,
/// `ibv_wr_set_sge`, one `ibv_wr_complete` per batch of posts).
#[test]
fn ib_write_bw_default() {
    if !have("ib_write_bw") {
        return;
    }
    let _s = serial();
    let lib = library_dir("write_bw");
    let args = ["--qp-timeout", ACK_TIMEOUT, "-n", "1000"];
    let (s, c) = pair("ib_write_bw", &lib, "ib_write_bw", &args, 33, 34, 14, LIMIT);
    for out in [&s, &c] {
        assert!(out.contains("RDMA_Write BW Test"), "{out}");
        assert!(wr_api_on(out), "{out}");
    }
    let l = result_line(&c, "65536");
    assert_eq!(l.split_whitespace().nth(1), Some("1000"), "{l}");
    check_bw_numbers(l, 65536.0);
}

#[test]
fn ibv_ud_pingpong_between_two_processes() {
    if !have("ibv_ud_pingpong") {
        return;
    }
    let _s = serial();
    let lib = library_dir("ud_pingpong");
    let (s, c) = pair(
        "ibv_ud_pingpong -g 0",
        &lib,
        "ibv_ud_pingpong",
        &["-g", "0"],
        61,
        62,
        5,
        LIMIT,
    );
    for out in [&s, &c] {
        // 1000 round trips of 1024 bytes (the 40-byte GRH area not counted).
        assert!(out.contains("2048000 bytes in"), "{out}");
        assert!(out.contains("1000 iters in"), "{out}");
    }
}

#[test]
fn ibv_uc_pingpong_between_two_processes() {
    if !have("ibv_uc_pingpong") {
        return;
    }
    let _s = serial();
    let lib = library_dir("uc_pingpong");
    let (s, c) = pair(
        "ibv_uc_pingpong -g 0",
        &lib,
        "ibv_uc_pingpong",
        &["-g", "0"],
        71,
        72,
        6,
        LIMIT,
    );
    pingpong_done(&s);
    pingpong_done(&c);
}
/// One SRQ shared by the 16 RC QPs of each side (the tool's default `-q 16`): the
/// receives are posted with `ibv_post_srq_recv`, each completion found by its `qp_num`
/// and `wr_id`.
#[test]
fn ibv_srq_pingpong_between_two_processes() {
    if !have("ibv_srq_pingpong") {
        return;
    }
    let _s = serial();
    let lib = library_dir("srq_pingpong");
    let (s, c) = pair_env(
        "ibv_srq_pingpong -g 0",
        &lib,
        "ibv_srq_pingpong",
        &["-g", "0"],
        &PATIENT,
        81,
        82,
        7,
        LIMIT,
    );
    pingpong_done(&s);
    pingpong_done(&c);
    // Every one of the 16 QPs was connected.
    for out in [&s, &c] {
        assert_eq!(out.matches("remote address: LID").count(), 16, "{out}");
    }
}

const ALL_SIZES: [&str; 23] = [
    "2", "4", "8", "16", "32", "64", "128", "256", "512", "1024", "2048", "4096", "8192", "16384",
    "32768", "65536", "131072", "262144", "524288", "1048576", "2097152", "4194304", "8388608",
];

#[test]
fn ib_send_lat_all_sizes() {
    if !have("ib_send_lat") {
        return;
    }
    let _s = serial();
    let lib = library_dir("send_lat_a");
    let (s, c) = pair(
        "ib_send_lat -a",
        &lib,
        "ib_send_lat",
        &["-a", "-n", "5", "-u", ACK_TIMEOUT],
        41,
        42,
        8,
        LIMIT,
    );
    for out in [&s, &c] {
        for size in ALL_SIZES {
            let l = result_line(out, size);
            let n = numbers(l);
            assert!(n[0].is_finite() && n[0] > 0.0, "{l}");
        }
    }
}

#[test]
fn ib_send_bw_all_sizes() {
    if !have("ib_send_bw") {
        return;
    }
    let _s = serial();
    let lib = library_dir("send_bw_a");
    let (_s, c) = pair(
        "ib_send_bw -a",
        &lib,
        "ib_send_bw",
        &["-a", "-n", "5", "-u", ACK_TIMEOUT],
        51,
        52,
        9,
        LIMIT,
    );
    for size in ALL_SIZES {
        let l = result_line(&c, size);
        let bytes: f64 = size.parse().unwrap();
        check_bw_numbers(l, bytes);
        // Positive where the printed precision allows it at any speed: each size's 5
        // messages take at most LIMIT (900 s), so from 1 MiB up the average is at
        // least 0.0056 MiB/s and prints as 0.01 or more. Smaller sizes on a loaded
        // machine may print 0.00 (2 B below 2,600 messages/s), and the rate 0.000000
        // (below 0.5 messages/s, as 8 MiB messages at 3.6 MB/s did).
        if bytes >= 1_048_576.0 {
            assert!(numbers(l)[1] > 0.0, "{l}");
        }
    }
}

/// Checks the numbers of a bandwidth result line of `bytes`-byte messages (BW peak,
/// BW average, MsgRate): finite, not negative, and the average consistent with the
/// rate. perftest computes both from the same cycles (BW average [MB/s, 2^20
/// bytes] = MsgRate [Mpps] × 10^6 × bytes / 2^20), so the printed values agree
/// within their rounding: half a unit of the average's last digit (0.005) plus half
/// a unit of the rate's (5e-7 Mpps) times the size.
fn check_bw_numbers(l: &str, bytes: f64) {
    let n = numbers(l);
    assert_eq!(n.len(), 3, "{l}");
    assert!(n.iter().all(|v| v.is_finite() && *v >= 0.0), "{l}");
    let implied = n[2] * 1e6 * bytes / 1_048_576.0;
    let slack = 0.005 + 0.5 * bytes / 1_048_576.0 + 1e-9;
    assert!((implied - n[1]).abs() <= slack, "average vs rate: {l}");
}

/// The latency tests with completion events (`-e`): perftest waits for one event
/// (`ibv_get_cq_event`, `ibv_ack_cq_events`, then `ibv_req_notify_cq` before any
/// poll: perftest `ctx_notify_events`), then polls its CQ once, and posts the next WR
/// with a TX depth of 1. The re-arm names a consumer index behind the CQE the event
/// announced; an arm that raised a second event for that CQE would make the next
/// wait return at once and its one poll find the CQ empty (perftest then stops with
/// "Couldn't post send: scnt=3", the SQ of one WQE still holding the unpolled
/// request, or prints an uninitialized work completion). The simulated ConnectX
/// raises an event at an arm only for a CQE that no event announced yet (the CQ
/// context's `last_notified_index`, `sim::engine::cq`), so each wait ends with the
/// completion of the request posted before it, and every run takes its 200
/// iterations; both processes exit 0 within the bound. `ib_send_lat` reports on
/// both sides; `ib_read_lat` and `ib_atomic_lat` only on the client (the server is
/// passive), in lines of `size` bytes (2, 8 for the atomics).
fn lat_with_events(
    tool: &str,
    server: u8,
    client: u8,
    slot: u16,
    size: &str,
    server_reports: bool,
) {
    if !have(tool) {
        return;
    }
    let _s = serial();
    let lib = library_dir(&format!("{tool}_e"));
    let args = ["-e", "-n", "200", "-u", ACK_TIMEOUT];
    let (s, c) = pair(
        &format!("{tool} -e"),
        &lib,
        tool,
        &args,
        server,
        client,
        slot,
        Duration::from_secs(120),
    );
    let reports: &[&String] = if server_reports { &[&s, &c] } else { &[&c] };
    for out in reports {
        let l = result_line(out, size);
        assert_eq!(l.split_whitespace().nth(1), Some("200"), "{l}");
    }
}

#[test]
fn ib_send_lat_with_completion_events() {
    lat_with_events("ib_send_lat", 91, 92, 10, "2", true);
}

#[test]
fn ib_read_lat_with_completion_events() {
    lat_with_events("ib_read_lat", 93, 94, 11, "2", false);
}

#[test]
fn ib_atomic_lat_with_completion_events() {
    lat_with_events("ib_atomic_lat", 95, 96, 12, "8", false);
}

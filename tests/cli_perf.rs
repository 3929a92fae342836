//! `ferroverbs perf`, run as a user runs it, on two simulated NICs: every test with a
//! few iterations prints perftest's information block, its column header and one
//! result line per size with the documented columns.

use std::process::{Command, Output};

fn ferroverbs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferroverbs"))
        .args(args)
        .output()
        .expect("the ferroverbs binary runs")
}

/// The QPs' local ACK timeout exponent (`--qp-timeout`) of the runs whose NICs have
/// device threads (`--sim-mode threaded`): 4.096 µs × 2^23 = 34 s, as the in-process
/// tests' `REAL_TIME_ACK_TIMEOUT`. The timer runs on real time while the threads that
/// would deliver the ACK (the NICs' device threads, the polling thread) wait for a
/// CPU: at perftest's default 14 (67 ms), eight expiries in a row (`retry_cnt` 7 + 1),
/// 537 ms without those threads running, fail a WR with a retry error although
/// nothing was lost. The in-process fabric loses nothing here (a device's receive
/// queue holds 2^17 frames, these runs have at most 2 QPs × a 256-packet window in
/// flight), so no test waits for an expiry; the tool's stall limit grows with the
/// timer (10 s beyond the 8-expiry budget). The deterministic runs keep the default:
/// one thread steps both NICs, so an expiry after the thread was descheduled
/// retransmits once and the same step delivers the ACK, whose progress restores the
/// retry budget.
const THREADED_QP_TIMEOUT: &str = "23";

const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";
const LAT_COLUMNS: [&str; 11] = [
    "#bytes",
    "#iterations",
    "t_min[usec]",
    "t_max[usec]",
    "t_typical[usec]",
    "t_avg[usec]",
    "t_stdev[usec]",
    "99%",
    "percentile[usec]",
    "99.9%",
    "percentile[usec]",
];
const BW_COLUMNS: [&str; 7] = [
    "#bytes",
    "#iterations",
    "BW",
    "peak[MiB/sec]",
    "BW",
    "average[MiB/sec]",
    "MsgRate[Mpps]",
];

/// Runs a test and returns its result lines, each split into fields, after checking
/// the exit code, the title and the column header.
fn run(args: &[&str], title: &str, columns: &[&str]) -> (String, Vec<Vec<f64>>) {
    let mut argv = vec!["perf"];
    argv.extend_from_slice(args);
    let o = ferroverbs(&argv);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{args:?}\n{out}\n{err}");
    assert!(out.starts_with(RESULT_LINE), "{out}");
    assert!(
        out.lines().any(|l| l.trim() == title),
        "title {title:?} missing:\n{out}"
    );
    let lines: Vec<&str> = out.lines().collect();
    let h = lines
        .iter()
        .position(|l| l.split_whitespace().collect::<Vec<_>>() == columns)
        .unwrap_or_else(|| panic!("column header missing:\n{out}"));
    let rows: Vec<Vec<f64>> = lines[h + 1..]
        .iter()
        .take_while(|l| **l != RESULT_LINE)
        .map(|l| {
            l.split_whitespace()
                .map(|f| f.parse::<f64>().unwrap_or_else(|_| panic!("{l:?}")))
                .collect()
        })
        .collect();
    assert!(!rows.is_empty(), "{out}");
    (out, rows)
}

fn lat(args: &[&str], title: &str) -> (String, Vec<Vec<f64>>) {
    let (out, rows) = run(args, title, &LAT_COLUMNS);
    for r in &rows {
        // bytes iterations min max typical avg stdev 99% 99.9%
        assert_eq!(r.len(), 9, "{r:?}");
        let (min, max, typ, avg, p99, p999) = (r[2], r[3], r[4], r[5], r[7], r[8]);
        assert!(min > 0.0 && min <= typ && typ <= max, "{r:?}");
        assert!(min <= avg && avg <= max, "{r:?}");
        assert!(typ <= p99 && p99 <= p999 && p999 <= max, "{r:?}");
        assert!(r[6] >= 0.0);
    }
    (out, rows)
}

fn bw(args: &[&str], title: &str) -> (String, Vec<Vec<f64>>) {
    let (out, rows) = run(args, title, &BW_COLUMNS);
    for r in &rows {
        // bytes iterations peak average msgrate
        assert_eq!(r.len(), 5, "{r:?}");
        // Bandwidths are printed with 2 decimals (MiB/s), the rate with 6 (Mpps): a
        // slow run on a loaded machine prints 0.00 for small messages (8 bytes below
        // 655 per second), so no printed value is required to be positive.
        assert!(r[2] >= 0.0 && r[3] >= 0.0 && r[4] >= 0.0, "{r:?}");
        assert!(r[2] >= r[3] * 0.999, "peak >= average: {r:?}");
        // The peak is a bandwidth some stretch of the run reached: not orders of
        // magnitude above the whole run's (a window that measured no time once gave
        // size / 1 ps). A small average prints as 0.00: bound by one unit of it.
        assert!(
            r[2] <= 1000.0 * r[3].max(0.01),
            "peak far above the average: {r:?}"
        );
        // MiB/s = Mpps * bytes / 2^20 (the runner computes both from the same total
        // time), within the rounding of the two printed values: half a unit of the
        // average's last digit plus half a unit of the rate's times the size.
        let implied = r[4] * 1e6 * r[0] / 1_048_576.0;
        let slack = 0.005 + 0.5 * r[0] / 1_048_576.0 + 1e-9;
        assert!((implied - r[3]).abs() <= slack, "{r:?}");
    }
    (out, rows)
}

#[test]
fn send_lat() {
    let (out, rows) = lat(&["send-lat", "-n", "20"], "Send Latency Test");
    assert_eq!(rows, vec![rows[0].clone()]);
    assert_eq!((rows[0][0], rows[0][1]), (2.0, 20.0));
    assert!(out.contains(" Max inline data : 236[B]"), "{out}");
    assert!(out.contains(" local address: LID 0000 QPN "), "{out}");
    assert!(out.contains(" remote address: LID 0000 QPN "), "{out}");
    assert!(out.contains(" GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:00:02:01"));
}

#[test]
fn send_lat_large_messages_and_a_histogram() {
    let (out, rows) = lat(
        &["send-lat", "-n", "10", "-s", "3000", "-H"],
        "Send Latency Test",
    );
    assert_eq!((rows[0][0], rows[0][1]), (3000.0, 10.0));
    assert!(
        out.contains("Histogram of t[usec] (half round trip), 3000 bytes, 9 samples"),
        "{out}"
    );
}

#[test]
fn write_lat() {
    let (_, rows) = lat(
        &["write-lat", "-n", "20", "-s", "64"],
        "RDMA_Write Latency Test",
    );
    assert_eq!((rows[0][0], rows[0][1]), (64.0, 20.0));
    // Not inline: larger than the 220-byte default.
    let (_, rows) = lat(
        &["write-lat", "-n", "8", "-s", "2500"],
        "RDMA_Write Latency Test",
    );
    assert_eq!(rows[0][0], 2500.0);
}

#[test]
fn read_lat() {
    let (out, rows) = lat(&["read-lat", "-n", "20"], "RDMA_Read Latency Test");
    assert_eq!((rows[0][0], rows[0][1]), (2.0, 20.0));
    assert!(out.contains(" Outstand reads  : "), "{out}");
    assert!(out.contains(" RKey 0x"), "{out}");
}

#[test]
fn atomic_lat() {
    lat(
        &["atomic-lat", "-n", "20"],
        "Atomic FETCH_AND_ADD Latency Test",
    );
    lat(
        &["atomic-lat", "-n", "20", "-A", "CMP_AND_SWAP"],
        "Atomic CMP_AND_SWAP Latency Test",
    );
}

#[test]
fn latency_over_several_sizes() {
    // -a runs 2 .. 2^23; keep it short: 5 iterations.
    let (_, rows) = lat(&["write-lat", "-a", "-n", "5"], "RDMA_Write Latency Test");
    let sizes: Vec<f64> = rows.iter().map(|r| r[0]).collect();
    let want: Vec<f64> = (1..=23).map(|k| f64::from(1u32 << k)).collect();
    assert_eq!(sizes, want);
}

#[test]
fn send_bw() {
    let (out, rows) = bw(&["send-bw", "-n", "64", "-s", "256"], "Send BW Test");
    assert_eq!((rows[0][0], rows[0][1]), (256.0, 64.0));
    assert!(out.contains(" CQ Moderation   : 64"), "{out}");
}

#[test]
fn write_bw_with_post_lists_and_several_qps() {
    bw(
        &["write-bw", "-n", "64", "-s", "1024"],
        "RDMA_Write BW Test",
    );
    let (out, rows) = bw(
        &[
            "write-bw", "-n", "64", "-s", "64", "-l", "4", "-q", "3", "-t", "16",
        ],
        "RDMA_Write Post List BW Test",
    );
    assert_eq!(rows[0][1], 192.0, "iterations times QPs");
    assert!(out.contains(" Number of qps   : 3"), "{out}");
    assert_eq!(out.matches(" local address:").count(), 3, "{out}");
    assert!(out.contains("Post List requested - CQ moderation will be the size of the post list"));
}

/// The RKeys of the address lines of `side` (`local` or `remote`), in order.
fn rkeys(out: &str, side: &str) -> Vec<String> {
    let tag = format!(" {side} address:");
    out.lines()
        .filter(|l| l.starts_with(&tag))
        .filter_map(|l| l.split_whitespace().skip_while(|w| *w != "RKey").nth(1))
        .map(str::to_owned)
        .collect()
}

#[test]
fn one_memory_region_per_qp() {
    // perftest's --mr_per_qp: every QP of each side has its own region (its own
    // RKey in the address lines), each QP's RDMA WRITEs go to its peer QP's region
    // (a wrong key fails the run with a remote access error), and the time the
    // regions took to register is on stderr.
    for test in ["write-bw", "send-bw", "read-bw"] {
        let args = [
            "perf",
            test,
            "-n",
            "20",
            "-s",
            "64",
            "-q",
            "3",
            "--mr_per_qp",
        ];
        let o = ferroverbs(&args);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(0), "{args:?}\n{out}\n{err}");
        for side in ["client", "server"] {
            let line = format!("ferroverbs: {side}: registered 3 memory regions of 128 bytes in ");
            assert!(err.contains(&line), "{test}: {err}");
        }
        let rows: Vec<&str> = out
            .lines()
            .skip_while(|l| !l.contains("#bytes"))
            .skip(1)
            .take_while(|l| !l.starts_with("---"))
            .collect();
        assert_eq!(rows.len(), 1, "{out}");
        assert_eq!(rows[0].split_whitespace().nth(1), Some("60"), "{out}");
        if test != "send-bw" {
            for side in ["local", "remote"] {
                let mut k = rkeys(&out, side);
                assert_eq!(k.len(), 3, "{out}");
                k.dedup();
                assert_eq!(k.len(), 3, "{test}: one region per QP: {out}");
            }
        }
    }
    // Without the option the QPs of a side share one region, and nothing is printed.
    let (out, _) = bw(
        &["write-bw", "-n", "20", "-s", "64", "-q", "3"],
        "RDMA_Write BW Test",
    );
    let mut k = rkeys(&out, "local");
    k.dedup();
    assert_eq!(k.len(), 1, "{out}");
    let o = ferroverbs(&["perf", "write-bw", "-n", "20", "-s", "64", "-q", "3"]);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("registered"));
}

#[test]
fn write_bw_peak_with_many_qps_is_bounded_by_the_run() {
    // 256 QPs: completions of one QP are polled before later-numbered messages of
    // others are posted; the peak once came out as 61,035,156 MiB/s here.
    let (_, rows) = bw(
        &["write-bw", "-s", "64", "-q", "256", "-n", "16"],
        "RDMA_Write BW Test",
    );
    assert_eq!(rows[0][1], 4096.0, "iterations times QPs");
    assert!(rows[0][2] < 1_000_000.0, "{:?}", rows[0]);
}

#[test]
fn read_bw() {
    let (_, rows) = bw(
        &["read-bw", "-n", "32", "-s", "4096", "-Q", "4"],
        "RDMA_Read BW Test",
    );
    assert_eq!(rows[0][0], 4096.0);
}

#[test]
fn atomic_bw() {
    let (_, rows) = bw(&["atomic-bw", "-n", "32"], "Atomic FETCH_AND_ADD BW Test");
    assert_eq!(rows[0][0], 8.0);
}

#[test]
fn threaded_mode_runs_too() {
    let t = THREADED_QP_TIMEOUT;
    lat(
        &["send-lat", "-n", "10", "--sim-mode", "threaded", "-u", t],
        "Send Latency Test",
    );
    bw(
        &[
            "write-bw",
            "-n",
            "32",
            "-s",
            "64",
            "--sim-mode",
            "threaded",
            "--qp-timeout",
            t,
        ],
        "RDMA_Write BW Test",
    );
}

#[test]
fn pinned_to_a_cpu() {
    lat(
        &["read-lat", "-n", "10", "--cpu", "0"],
        "RDMA_Read Latency Test",
    );
}

#[test]
fn baselines_in_the_same_run() {
    let (out, _) = lat(&["send-lat", "-n", "20", "--baseline"], "Send Latency Test");
    assert!(
        out.contains(" Baseline (same run): TCP ping-pong over 127.0.0.1"),
        "{out}"
    );
    assert!(out.contains(" 2 B t_typical: "), "{out}");
    assert!(out.contains("than the baseline"), "{out}");
    let (out, _) = bw(
        &["write-bw", "-n", "32", "-s", "4096", "--baseline"],
        "RDMA_Write BW Test",
    );
    assert!(out.contains(" Baseline (same run): memcpy"), "{out}");
    assert!(out.contains(" 4096 B BW average: "), "{out}");
}

#[test]
fn completions_by_event() {
    for (mode, timeout) in [("deterministic", "14"), ("threaded", THREADED_QP_TIMEOUT)] {
        let (out, rows) = lat(
            &[
                "send-lat",
                "-n",
                "20",
                "-e",
                "--sim-mode",
                mode,
                "-u",
                timeout,
            ],
            "Send Latency Test",
        );
        assert!(out.contains(" Test with events. Using "), "{out}");
        assert_eq!(rows[0][1], 20.0);
    }
    lat(&["read-lat", "-n", "20", "-e"], "RDMA_Read Latency Test");
    lat(
        &["atomic-lat", "-n", "20", "-e"],
        "Atomic FETCH_AND_ADD Latency Test",
    );
    let (out, _) = bw(&["send-bw", "-n", "64", "-s", "256", "-e"], "Send BW Test");
    assert!(out.contains(" Test with events. Using "), "{out}");
    bw(
        &["write-bw", "-n", "32", "-s", "4096", "-e", "-q", "2"],
        "RDMA_Write BW Test",
    );
}

#[test]
fn qp_timeout_out_of_range_is_a_usage_error() {
    // 5 bits in the QP context (IBTA's 4.096 µs × 2^n, 0 = no timer): 0 to 31.
    for bad in ["32", "100", "-1"] {
        let arg = format!("--qp-timeout={bad}");
        let o = ferroverbs(&["perf", "send-lat", &arg]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains("'--qp-timeout <EXP>'"), "{bad}: {err}");
        assert!(err.contains("is not in 0..=31"), "{bad}: {err}");
    }
    // The help names perftest's default.
    let o = ferroverbs(&["perf", "send-lat", "--help"]);
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(help.contains("-u, --qp-timeout <EXP>"), "{help}");
    assert!(help.contains("[default: 14]"), "{help}");
}

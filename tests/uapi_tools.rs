//! rdma-core's own libibverbs and libmlx5 (Debian 12's `libibverbs1`,
//! `ibverbs-providers`), unmodified, on the simulated ConnectX through the userspace
//! RDMA interface (`ferroverbs run`): the verbs tools of `ibverbs-utils` and
//! perftest, alone and between two processes each with its own simulated NIC.

mod uapi_support;

#[path = "common/pingpong_output.rs"]
mod pingpong_output;
use pingpong_output::check_completion_clock;

use std::sync::Mutex;
use std::time::Duration;

use uapi_support::{have, net, run_ok};

/// The pairs run one at a time (each is several busy threads on a 2-core machine).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn ibv_devinfo_sees_a_connectx5_through_libmlx5() {
    if !have("ibv_devinfo") {
        return;
    }
    let dev = format!("sim:{}", net::host(2));
    let out = run_ok(&dev, &["ibv_devinfo", "-v"], Duration::from_secs(120));
    let gid = format!("GID[  0]:\t\t::ffff:{}, RoCE v2", net::host(2));
    for want in [
        "hca_id:\tmlx5_0",
        "transport:\t\t\tInfiniBand (0)",
        "vendor_id:\t\t\t0x02c9",
        "vendor_part_id:\t\t\t4119",
        "phys_port_cnt:\t\t\t1",
        "max_pkeys:\t\t\t1",
        "state:\t\t\tPORT_ACTIVE (4)",
        "active_mtu:\t\t1024 (3)",
        "link_layer:\t\tEthernet",
        "gid_tbl_len:\t\t256",
        "atomic_cap:\t\t\tATOMIC_HCA (1)",
        &gid,
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    // The node GUID: EUI-64 of the NIC's MAC 02:00:7f:A:B:02, as sysfs and
    // QUERY_DEVICE both give it.
    let [_, a, b, _] = net::host(2).octets();
    assert!(
        out.contains(&format!("node_guid:\t\t\t0000:7fff:fe{a:02x}:{b:02x}02")),
        "{out}"
    );
}

#[test]
fn ibv_devices_lists_mlx5_0() {
    if !have("ibv_devices") {
        return;
    }
    let out = run_ok("sim", &["ibv_devices"], Duration::from_secs(60));
    assert!(out.contains("mlx5_0"), "{out}");
    assert!(out.contains("00007ffffe000001"), "{out}");
    let _s = serial();
}

/// Iterations of each pingpong: enough to wrap the queues (rx depth 500 for the RC,
/// UC, UD tools; the SRQ's is shared by 16 QPs) a few times over.
const ITERS: &str = "300";
/// Time limit of a pair.
const LIMIT: Duration = Duration::from_secs(600);

/// A pair of `tool` with `extra` arguments; its two outputs (server, client), or
/// `None` when the tool is not installed.
fn pingpong(
    tool: &str,
    extra: &[&str],
    server: u8,
    client: u8,
    slot: u16,
) -> Option<(String, String)> {
    pingpong_env(tool, extra, &[], server, client, slot)
}

fn pingpong_env(
    tool: &str,
    extra: &[&str],
    envs: &[(&str, &str)],
    server: u8,
    client: u8,
    slot: u16,
) -> Option<(String, String)> {
    if !have(tool) {
        return None;
    }
    let _s = serial();
    let mut args = vec!["-g", "0", "-n", ITERS, "-c"];
    args.extend_from_slice(extra);
    let (s, c) = uapi_support::pair(tool, &args, envs, server, client, slot, LIMIT);
    for out in [&s, &c] {
        assert!(out.contains(&format!("{ITERS} iters in")), "{out}");
        // `-c`: the server checks the buffer it received (`invalid data in page N`).
        assert!(!out.contains("invalid data"), "{out}");
    }
    assert!(
        c.contains(&format!("GID ::ffff:{}", net::host(client))),
        "{c}"
    );
    assert!(
        c.contains(&format!("GID ::ffff:{}", net::host(server))),
        "{c}"
    );
    Some((s, c))
}

#[test]
fn ibv_rc_pingpong_polling() {
    pingpong("ibv_rc_pingpong", &[], 11, 12, 1);
}

/// The watcher thread instead of the trapped stores (the fallback where a store
/// cannot be decoded, and the only way off x86-64).
#[test]
fn ibv_rc_pingpong_with_the_doorbell_watcher() {
    pingpong_env(
        "ibv_rc_pingpong",
        &["-e"],
        &[("FERROVERBS_DOORBELLS", "watch")],
        88,
        89,
        10,
    );
}

/// Frames lost on both NICs' egress (`FERROVERBS_IMPAIR`, what `ferroverbs run
/// --impair` sets): libmlx5's RC QPs recover by the device's retransmissions (NAKs
/// for gaps, the ACK timeout for a lost last packet or ACK), every buffer checked;
/// each side's `FERROVERBS_STATS` line counts the frames its link dropped and the
/// retransmissions. The losses are frames picked by index early and midway
/// through the run (some 1,000 frames a side), not random ones: `ibv_rc_pingpong`
/// exits once its own work is done, so a lost ACK of the peer's last send would
/// leave the peer retrying to a QP that is gone, and ending in "transport retry
/// counter exceeded", as it does on a ConnectX.
#[test]
fn ibv_rc_pingpong_recovers_from_lost_frames() {
    if !have("ibv_rc_pingpong") {
        return;
    }
    let _s = serial();
    let envs = [
        ("FERROVERBS_IMPAIR", "drop=40:2,drop=301:1,drop=650:3"),
        ("FERROVERBS_STATS", "1"),
        // 0.27 s: the timer runs on real time while the peer may wait for a CPU.
        ("FERROVERBS_MIN_ACK_TIMEOUT", "16"),
    ];
    let args = ["-g", "0", "-n", "200", "-c"];
    let ((so, se), (co, ce)) =
        uapi_support::pair_outputs("ibv_rc_pingpong", &args, &envs, (90, 91), 11, LIMIT);
    let mut lost = 0;
    let mut retransmits = 0;
    for (out, err) in [(&so, &se), (&co, &ce)] {
        assert!(out.contains("200 iters in"), "{out}");
        assert!(!out.contains("invalid data"), "{out}");
        let line = err
            .lines()
            .find(|l| l.starts_with("ferroverbs-uapi: link"))
            .unwrap_or_else(|| panic!("no stats line:\n{err}"));
        let count = |key: &str| -> u64 {
            let at = line.find(key).unwrap_or_else(|| panic!("{key} in {line}")) + key.len();
            let digits: String = line[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().unwrap()
        };
        lost += count("lost: ");
        retransmits += count("retransmits ");
    }
    assert_eq!(lost, 12, "six frames lost a side:\n{se}\n{ce}");
    assert!(retransmits > 0, "nothing was retransmitted:\n{se}\n{ce}");
}

/// `--impair down=AT:FOR` takes the simulated port's link down and back up: every
/// context's async file gets `IBV_EVENT_PORT_ERR` then `IBV_EVENT_PORT_ACTIVE` for
/// port 1, as Linux's uverbs delivers a port event to each ucontext
/// (`ibv_asyncwatch` prints each event it reads; it runs until killed).
#[test]
fn ibv_asyncwatch_sees_the_port_go_down_and_come_back() {
    if !have("ibv_asyncwatch") {
        return;
    }
    let _s = serial();
    let dev = format!("sim:{}", net::host(94));
    let (_, out, err) = uapi_support::Proc::spawn(
        "ibv_asyncwatch",
        &dev,
        &["ibv_asyncwatch"],
        &[("FERROVERBS_IMPAIR", "down=400ms:400ms")],
    )
    .finish(Duration::from_secs(8));
    let down = out
        .find("event_type IBV_EVENT_PORT_ERR (10), port 1")
        .unwrap_or_else(|| panic!("no PORT_ERR:\n{out}\n{err}"));
    let up = out
        .find("event_type IBV_EVENT_PORT_ACTIVE (9), port 1")
        .unwrap_or_else(|| panic!("no PORT_ACTIVE:\n{out}\n{err}"));
    assert!(down < up, "{out}");
    assert_eq!(out.matches("event_type").count(), 2, "{out}");
}

/// QUERY_PORT answers the port's state as it is at the query: with its link down
/// (`--impair down=0ms:...`, from the NIC's start) `ibv_devinfo -v` shows the port
/// DOWN and its physical state DISABLED, as Linux's `mlx5_query_port_roce` answers
/// for a netdev without carrier.
#[test]
fn ibv_devinfo_shows_the_port_down_while_its_link_is_down() {
    if !have("ibv_devinfo") {
        return;
    }
    let dev = format!("sim:{}", net::host(95));
    let (st, out, err) = uapi_support::Proc::spawn(
        "ibv_devinfo",
        &dev,
        &["ibv_devinfo", "-v"],
        &[("FERROVERBS_IMPAIR", "down=0ms:600s")],
    )
    .finish(Duration::from_secs(120));
    assert!(st.is_some_and(|s| s.success()), "{out}\n{err}");
    assert!(out.contains("state:\t\t\tPORT_DOWN (1)"), "{out}");
    assert!(out.contains("phys_state:\t\tDISABLED (3)"), "{out}");
}

/// `FERROVERBS_MTU=4096`: the port reports `active_mtu` 4096, so `-m 4096` passes
/// the modify to RTR, and an 8000-byte SEND leaves in two packets (eight at the
/// default 1024): each side's link sends at most three datagrams per iteration (the
/// message and an ACK), every buffer checked.
#[test]
fn ibv_rc_pingpong_with_a_4096_byte_mtu() {
    if !have("ibv_rc_pingpong") {
        return;
    }
    let _s = serial();
    let envs = [("FERROVERBS_MTU", "4096"), ("FERROVERBS_STATS", "1")];
    let args = ["-g", "0", "-n", "50", "-c", "-m", "4096", "-s", "8000"];
    let ((so, se), (co, ce)) =
        uapi_support::pair_outputs("ibv_rc_pingpong", &args, &envs, (92, 93), 12, LIMIT);
    for (out, err) in [(&so, &se), (&co, &ce)] {
        assert!(out.contains("50 iters in"), "{out}\n{err}");
        assert!(!out.contains("invalid data"), "{out}");
        let line = err
            .lines()
            .find(|l| l.starts_with("ferroverbs-uapi: link"))
            .unwrap_or_else(|| panic!("no stats line:\n{err}"));
        let key = "tx_datagrams: ";
        let at = line.find(key).unwrap_or_else(|| panic!("{key} in {line}")) + key.len();
        let tx: u64 = line[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap();
        assert!(
            (100..=150).contains(&tx),
            "{tx} datagrams for 50 iterations: {line}"
        );
    }
}

#[test]
fn ibv_rc_pingpong_with_completion_events() {
    pingpong("ibv_rc_pingpong", &["-e"], 13, 14, 2);
}

#[test]
fn ibv_rc_pingpong_new_post_send_api() {
    pingpong("ibv_rc_pingpong", &["-N"], 15, 16, 3);
}

/// `-t`: the CQ from `ibv_create_cq_ex` with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`
/// (libmlx5 accepts it once QUERY_DEVICE_EX reports a `completion_timestamp_mask`)
/// and every completion's CQE `timestamp` read. (`-t -e` is not run: after a CQ
/// event, rc_pingpong.c's timestamp path treats an empty `ibv_start_poll`, ENOENT,
/// as a failure, "poll CQ failed 2". A CQE written between the event and the re-arm
/// makes the re-arm fire at once (docs/simulator.md, CQ arming), the poll that
/// follows takes that CQE too, and the next event finds the CQ empty.)
#[test]
fn ibv_rc_pingpong_with_completion_timestamps() {
    if let Some((s, c)) = pingpong("ibv_rc_pingpong", &["-t"], 90, 91, 14) {
        check_completion_clock(&s);
        check_completion_clock(&c);
    }
}

#[test]
fn ibv_uc_pingpong_polling() {
    pingpong("ibv_uc_pingpong", &[], 17, 18, 4);
}

#[test]
fn ibv_uc_pingpong_with_completion_events() {
    pingpong("ibv_uc_pingpong", &["-e"], 19, 20, 5);
}

#[test]
fn ibv_ud_pingpong_polling() {
    pingpong("ibv_ud_pingpong", &[], 21, 22, 6);
}

#[test]
fn ibv_ud_pingpong_with_completion_events() {
    pingpong("ibv_ud_pingpong", &["-e"], 23, 24, 7);
}

#[test]
fn ibv_srq_pingpong_polling() {
    pingpong("ibv_srq_pingpong", &[], 25, 26, 8);
}

#[test]
fn ibv_srq_pingpong_with_completion_events() {
    pingpong("ibv_srq_pingpong", &["-e"], 27, 28, 9);
}

/// The result lines of a perftest run (first field a message size).
fn results(out: &str) -> Vec<Vec<f64>> {
    out.lines()
        .filter_map(|l| {
            let f: Vec<f64> = l
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            let first = l.split_whitespace().next()?;
            (first.parse::<u64>().is_ok() && f.len() >= 5).then_some(f)
        })
        .collect()
}

/// Runs perftest's `tool` with `extra` between two processes; checks that both use
/// rdma-core's new post API (`ibv_wr* API : ON`, libmlx5's `ibv_wr_*`), that the
/// result lines have the sizes `sizes` with `iters` iterations each, and positive
/// numbers (latencies in µs, or the average bandwidth or message rate) on the client.
fn perftest(tool: &str, extra: &[&str], sizes: &[u64], iters: u64, slot: u16, hosts: (u8, u8)) {
    if !have(tool) {
        return;
    }
    let _s = serial();
    let (s, c) = uapi_support::pair(tool, extra, &[], hosts.0, hosts.1, slot, LIMIT);
    for out in [&s, &c] {
        assert!(out.contains("ibv_wr* API     : ON"), "{out}");
    }
    let r = results(&c);
    let got: Vec<u64> = r.iter().map(|l| l[0] as u64).collect();
    assert_eq!(got, sizes, "sizes in:\n{c}");
    let lat = tool.ends_with("_lat");
    for l in &r {
        assert_eq!(l[1] as u64, iters, "iterations in {l:?}");
        if lat {
            // t_min, t_max, t_typical, t_avg.
            assert!(l[2..6].iter().all(|v| v.is_finite() && *v > 0.0), "{l:?}");
        } else {
            // BW average (MB/s, 2 decimals: 0.00 for tiny messages) or message rate
            // (Mpps, 6 decimals).
            assert!(
                l[3] > 0.0 || l[4] > 0.0,
                "BW average and message rate in {l:?}"
            );
        }
    }
}

/// The sizes of `-a`: 2 bytes to 8 MiB.
fn all_sizes() -> Vec<u64> {
    (1..=23).map(|k| 1u64 << k).collect()
}

#[test]
fn ib_send_lat_default() {
    perftest("ib_send_lat", &[], &[2], 1000, 10, (31, 32));
}

#[test]
fn ib_write_lat_default() {
    perftest("ib_write_lat", &[], &[2], 1000, 11, (33, 34));
}

#[test]
fn ib_read_lat_default() {
    perftest("ib_read_lat", &[], &[2], 1000, 12, (35, 36));
}

#[test]
fn ib_atomic_lat_default() {
    perftest("ib_atomic_lat", &[], &[8], 1000, 13, (37, 38));
}

#[test]
fn ib_send_bw_default_and_four_qps() {
    perftest("ib_send_bw", &[], &[65536], 1000, 10, (41, 42));
    perftest(
        "ib_send_bw",
        &["-q", "4", "-n", "200"],
        &[65536],
        800,
        11,
        (43, 44),
    );
}

#[test]
fn ib_write_bw_default_and_four_qps() {
    perftest("ib_write_bw", &[], &[65536], 5000, 12, (45, 46));
    perftest(
        "ib_write_bw",
        &["-q", "4", "-n", "200"],
        &[65536],
        800,
        13,
        (47, 48),
    );
}

#[test]
fn ib_read_bw_default_and_four_qps() {
    perftest("ib_read_bw", &[], &[65536], 1000, 14, (49, 50));
    perftest(
        "ib_read_bw",
        &["-q", "4", "-n", "200"],
        &[65536],
        800,
        15,
        (51, 52),
    );
}

#[test]
fn ib_atomic_bw_default_and_four_qps() {
    perftest("ib_atomic_bw", &[], &[8], 1000, 0, (53, 54));
    perftest(
        "ib_atomic_bw",
        &["-q", "4", "-n", "200"],
        &[8],
        800,
        1,
        (55, 56),
    );
}

#[test]
fn perftest_all_sizes() {
    for (i, tool) in ["ib_send_lat", "ib_write_lat", "ib_read_lat", "ib_send_bw"]
        .into_iter()
        .chain(["ib_write_bw", "ib_read_bw"])
        .enumerate()
    {
        let h = 60 + 2 * i as u8;
        perftest(
            tool,
            &["-a", "-n", "5"],
            &all_sizes(),
            5,
            2 + i as u16,
            (h, h + 1),
        );
    }
}

/// perftest's `--odp`: its buffers registered with `IBV_ACCESS_ON_DEMAND` (it first
/// checks `ibv_query_device_ex`'s ODP capabilities for the transport and the test's
/// operation), the device reaching them through the process's page tables.
#[test]
fn perftest_on_demand_paging() {
    perftest(
        "ib_write_bw",
        &["--odp", "-n", "200"],
        &[65536],
        200,
        3,
        (150, 151),
    );
    perftest(
        "ib_send_bw",
        &["--odp", "-n", "200"],
        &[65536],
        200,
        4,
        (152, 153),
    );
    perftest(
        "ib_read_lat",
        &["--odp", "-n", "200"],
        &[2],
        200,
        5,
        (154, 155),
    );
}

#[test]
fn perftest_bandwidth_with_completion_events() {
    perftest(
        "ib_send_bw",
        &["-e", "-n", "200"],
        &[65536],
        200,
        8,
        (80, 81),
    );
    perftest(
        "ib_read_bw",
        &["-e", "-n", "200"],
        &[65536],
        200,
        9,
        (82, 83),
    );
    perftest(
        "ib_atomic_bw",
        &["-e", "-n", "200"],
        &[8],
        200,
        14,
        (84, 85),
    );
}

/// perftest's latency tests with `-e` wait for one event, re-arm, poll once and post
/// with a TX depth of 1: the re-arm names a consumer index behind the CQE just
/// announced, so it raises a second, stale event (PRM CQ arming, rdma-core
/// `mlx5_arm_cq`), and the next single poll must find the completion of the SEND in
/// flight. It does when the ACK of that SEND reaches the sender before the peer's
/// answer, as on a ConnectX: the simulated device holds the ACK it owes for the
/// answer's doorbell, which sends it first, in the same burst.
#[test]
fn ib_send_lat_with_completion_events() {
    perftest("ib_send_lat", &["-e", "-n", "200"], &[2], 200, 15, (86, 87));
}

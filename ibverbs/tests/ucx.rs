//! UCX 1.13 (Debian's `ucx-utils`, unmodified) on the drop-in `libibverbs.so.1`:
//! `ucx_info -d` lists the simulated device with its `rc_verbs` and `ud_verbs`
//! transports, and `ucx_perftest` runs tag-matching (UCP) and active-message (UCT)
//! tests between two processes, each on its own simulated NIC, over RoCE v2 on UDP.
//!
//! UCX offers a verbs device only if `/dev/infiniband/<dev_name>` is a character
//! device it may read and write (`uct_ib_device_is_accessible`, UCX
//! `src/uct/ib/base/ib_md.c`); the drop-in never opens it. Without that node (or
//! without UCX) the tests print a notice and return, unless
//! `FERROVERBS_REQUIRE_IBVERBS_UTILS=1` (CI, which creates the node) makes that a
//! failure.

mod support;

use std::os::unix::fs::FileTypeExt;
use std::sync::Mutex;
use std::time::Duration;

use support::{library_dir, pair_env, run_ok, REQUIRE_ENV};

/// The pairs run one at a time (each is two busy processes).
static SERIAL: Mutex<()> = Mutex::new(());

/// The node UCX checks: `/dev/infiniband/` + the drop-in's `ibv_device.dev_name`.
const DEVICE_NODE: &str = "/dev/infiniband/uverbs-ferroverbs";

const LIMIT: Duration = Duration::from_secs(300);

/// Whether UCX can run here on the drop-in; otherwise a notice (or, in CI, a failure
/// that says what is missing).
fn ucx_ready() -> bool {
    let have_ucx = support::have_quiet("ucx_perftest") && support::have_quiet("ucx_info");
    let node = std::fs::metadata(DEVICE_NODE)
        .map(|m| m.file_type().is_char_device())
        .unwrap_or(false);
    let missing = match (have_ucx, node) {
        (true, true) => return true,
        (false, _) => "UCX is not installed (apt-get install ucx-utils)".to_string(),
        (true, false) => format!(
            "{DEVICE_NODE} is not a character device (as root: mkdir -p /dev/infiniband && \
             mknod -m 666 {DEVICE_NODE} c 1 3)"
        ),
    };
    if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") {
        panic!("{missing} and {REQUIRE_ENV}=1");
    }
    println!("SKIPPED: {missing}; {REQUIRE_ENV}=1 makes this a failure");
    false
}

#[test]
fn ucx_info_lists_the_device_with_rc_verbs_and_ud_verbs() {
    if !ucx_ready() {
        return;
    }
    let lib = library_dir("ucx_info");
    let out = run_ok(
        "ucx_info -d",
        &lib,
        &format!("sim:{}", support::net::host(40)),
        &["ucx_info", "-d"],
        Duration::from_secs(120),
    );
    let md = out
        .split("# Memory domain: ")
        .find(|s| s.starts_with("ferroverbs0"))
        .unwrap_or_else(|| panic!("no memory domain ferroverbs0 in:\n{out}"));
    for tl in ["rc_verbs", "ud_verbs"] {
        assert!(
            md.contains(&format!(
                "#      Transport: {tl}\n#         Device: ferroverbs0:1"
            )),
            "no {tl} on ferroverbs0:1 in:\n{md}"
        );
    }
}

/// Runs `ucx_perftest` with `args` and `-n n` as a server on host `s` and a client
/// on host `s + 1` with `UCX_TLS=tls`, and checks that both exit 0 and the client
/// reports all `n` iterations.
fn perftest(name: &str, tls: &str, args: &[&str], n: u64, s: u8, slot: u16) {
    if !ucx_ready() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lib = library_dir(name);
    let envs = [("UCX_TLS", tls), ("UCX_NET_DEVICES", "ferroverbs0:1")];
    let ns = n.to_string();
    let mut all = args.to_vec();
    all.extend(["-n", &ns]);
    let (_, c) = pair_env(
        name,
        &lib,
        "ucx_perftest",
        &all,
        &envs,
        s,
        s + 1,
        slot,
        LIMIT,
    );
    let fin = c
        .lines()
        .find(|l| l.starts_with("Final:"))
        .unwrap_or_else(|| panic!("{name}: no final report in:\n{c}"));
    let iters: Option<u64> = fin.split_whitespace().nth(1).and_then(|x| x.parse().ok());
    assert_eq!(iters, Some(n), "{fin}");
}

// Over UCP, rc_verbs needs ud_verbs beside it for the wire-up of its endpoints
// ("no auxiliary transport" otherwise), as on a real ConnectX.
const RC: &str = "rc_verbs,ud_verbs";

#[test]
fn ucx_tag_lat_over_rc_verbs() {
    perftest("tag_lat_rc", RC, &["-t", "tag_lat"], 1000, 41, 0);
}

#[test]
fn ucx_tag_bw_over_rc_verbs() {
    perftest("tag_bw_rc", RC, &["-t", "tag_bw"], 1000, 43, 1);
}

#[test]
fn ucx_tag_lat_over_ud_verbs() {
    perftest("tag_lat_ud", "ud_verbs", &["-t", "tag_lat"], 1000, 45, 2);
}

#[test]
fn ucx_tag_bw_over_ud_verbs() {
    perftest("tag_bw_ud", "ud_verbs", &["-t", "tag_bw"], 1000, 47, 3);
}

// am_lat is a UCT test: the transport and device are named on the command line.
#[test]
fn ucx_am_lat_over_rc_verbs() {
    let args = ["-t", "am_lat", "-x", "rc_verbs", "-d", "ferroverbs0:1"];
    perftest("am_lat_rc", "rc_verbs", &args, 1000, 49, 4);
}

#[test]
fn ucx_am_lat_over_ud_verbs() {
    let args = ["-t", "am_lat", "-x", "ud_verbs", "-d", "ferroverbs0:1"];
    perftest("am_lat_ud", "ud_verbs", &args, 1000, 51, 5);
}

/// A 1 MiB tag message goes by UCX's rendezvous protocol (zero-copy RDMA of the
/// registered buffers) instead of the eager copies above.
#[test]
fn ucx_rendezvous_tag_bw_over_rc_verbs() {
    let args = ["-t", "tag_bw", "-s", "1048576"];
    perftest("tag_bw_rndv", RC, &args, 20, 53, 6);
}

/// UCT RDMA WRITE latency and atomic add latency on rc_verbs.
#[test]
fn ucx_put_and_add_lat_over_rc_verbs() {
    for (t, slot) in [("put_lat", 7), ("add_lat", 8)] {
        let args = ["-t", t, "-x", "rc_verbs", "-d", "ferroverbs0:1"];
        perftest(t, "rc_verbs", &args, 200, 55 + 2 * slot as u8, slot);
    }
}

//! The command line as a user meets it: help, version, usage errors with exit code 2,
//! and the modes that are not available yet with exit code 3 and what they need
//! (the cross-process modes themselves: `tests/cli_udp.rs`).

use std::process::{Command, Output};

fn ferroverbs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferroverbs"))
        .args(args)
        .output()
        .expect("the ferroverbs binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn help_lists_the_commands_tests_and_exit_codes() {
    let o = ferroverbs(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("devinfo") && out.contains("perf"), "{out}");
    assert!(out.contains("Exit codes:"), "{out}");
    let o = ferroverbs(&["perf", "--help"]);
    let out = String::from_utf8_lossy(&o.stdout);
    for t in [
        "send-lat",
        "send-bw",
        "write-lat",
        "write-bw",
        "read-lat",
        "read-bw",
        "atomic-lat",
        "atomic-bw",
    ] {
        assert!(out.contains(t), "{t}: {out}");
    }
    let o = ferroverbs(&["perf", "send-bw", "--help"]);
    let out = String::from_utf8_lossy(&o.stdout);
    for opt in [
        "--size",
        "--all",
        "--iters",
        "--inline-size",
        "--tx-depth",
        "--post-list",
        "--cq-mod",
        "--qp",
        "--events",
        "--cpu",
        "--report-histogram",
        "--device",
        "--server",
        "--client",
        "--port",
    ] {
        assert!(out.contains(opt), "{opt}: {out}");
    }
    assert_eq!(ferroverbs(&["--version"]).status.code(), Some(0));
}

#[test]
fn bad_options_are_usage_errors_with_exit_code_2() {
    // No command: the help, on standard error, with exit code 2.
    for args in [&[][..], &["perf"]] {
        let o = ferroverbs(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains("Usage: ferroverbs"), "{args:?}");
    }
    for args in [
        &["perf", "send-lat", "-n", "4"][..],
        &["perf", "send-lat", "-n", "lots"],
        &["perf", "send-bw", "-t", "0"],
        &["perf", "send-bw", "-Q", "2000"],
        &["perf", "send-bw", "-q", "20000"],
        &["perf", "send-lat", "-s", "0"],
        &["perf", "send-lat", "-s", "4G"],
        &["perf", "send-lat", "-s", "64", "-a"],
        &["perf", "send-lat", "--frobnicate"],
        &["perf", "send-lat", "--server", "--client", "peer.example"],
        &["perf", "write-lat", "-d", "rdma0"],
        // Combinations perftest refuses.
        &["perf", "send-lat", "-q", "4"],
        &["perf", "send-lat", "-l", "4"],
        &["perf", "send-lat", "-Q", "4"],
        &["perf", "read-lat", "-I", "64"],
        &["perf", "atomic-bw", "-s", "64"],
        &["perf", "atomic-lat", "-a"],
        &["perf", "send-bw", "--report-histogram"],
        &["perf", "write-bw", "-l", "3", "-n", "100"],
        &["perf", "write-bw", "-l", "8", "-Q", "3"],
        &["perf", "write-bw", "-l", "10", "-t", "8"],
        // Impairment specs the NIC would refuse.
        &["run", "--impair", "loss=2", "--", "true"],
        &["run", "--impair", "jitter=1", "--", "true"],
        &["run", "--impair", "delay=5", "--", "true"],
    ] {
        let o = ferroverbs(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("error:"), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    let err = stderr(&ferroverbs(&["run", "--impair", "loss=2", "--", "true"]));
    assert!(
        err.contains("loss=2: expected a probability from 0 to 1"),
        "{err}"
    );
    let err = stderr(&ferroverbs(&["perf", "send-lat", "-q", "4"]));
    assert!(err.contains("Usage: ferroverbs perf send-lat"), "{err}");
    assert!(err.contains("bandwidth tests"), "{err}");
}

#[test]
fn cross_process_modes_run_on_the_simulator_only() {
    let o = ferroverbs(&["perf", "send-lat", "--server", "-d", "vfio:0000:3b:00.0"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("not yet supported"), "{err}");
    assert!(err.contains("UDP link"), "{err}");
}

#[test]
fn the_udp_link_device_string_is_refused_with_exit_code_3() {
    // `sim:A.B.C.D` parses (the libibverbs form) but the tool's NICs are in-process.
    for args in [
        &["devinfo", "-d", "sim:127.0.0.2"][..],
        &["perf", "send-lat", "-n", "5", "-d", "sim:127.0.0.2:5000"][..],
        &["perf", "send-lat", "--server", "-d", "sim:127.0.0.2"][..],
    ] {
        let o = ferroverbs(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(3), "{args:?}: {err}");
        assert!(err.contains("--device sim:127.0.0.2"), "{args:?}: {err}");
        assert!(err.contains("--ip/--udp-port"), "{args:?}: {err}");
    }
    let o = ferroverbs(&["devinfo", "-d", "sim:127.0.0.300"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn a_cpu_that_does_not_exist_is_a_setup_error() {
    let o = ferroverbs(&["perf", "send-lat", "--cpu", "1023", "-n", "5"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("CPU 1023"), "{err}");
}

#[test]
fn perf_on_vfio_without_vfio_names_the_fix_and_exits_3() {
    if std::path::Path::new("/dev/vfio/vfio").exists() {
        eprintln!("skipped: this machine has VFIO");
        return;
    }
    let o = ferroverbs(&["perf", "send-lat", "-d", "vfio:0000:3b:00.0", "-n", "5"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("modprobe vfio-pci"), "{err}");
}

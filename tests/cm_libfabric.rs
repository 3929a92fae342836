//! libfabric's verbs provider (Debian's `libfabric-bin`, unmodified) under `ferroverbs
//! run`: `fi_info` lists FI_EP_MSG, and `fi_pingpong` runs between two processes over
//! FI_EP_MSG (RC connected by rdma_cm), FI_EP_RDM (`ofi_rxm` over verbs MSG, at 64 KiB
//! and at 1 MiB by its rendezvous), FI_EP_RDM over `ofi_rxd` on verbs FI_EP_DGRAM, and
//! FI_EP_DGRAM (UD), each transfer's data checked: six PASS lines.
//! `tests/cm_fabric_netns.sh` does it in a network namespace of its own (the provider
//! skips loopback interfaces), which needs root: without it the test says so and
//! passes; `.ci/run` runs the script with sudo.

use std::process::Command;
use std::time::Duration;

#[test]
fn fi_pingpong_over_verbs_msg_rdm_and_dgram() {
    let have = |c: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {c}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !have("fi_pingpong") || !have("unshare") || !have("ip") {
        println!("fi_pingpong, unshare or ip missing: skipped");
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("not root (a network namespace needs it): skipped; .ci/run runs it");
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cm_fabric_netns.sh");
    let mut child = Command::new(script)
        .arg(env!("CARGO_BIN_EXE_ferroverbs"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("tests/cm_fabric_netns.sh");
    let mut pipe = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = std::io::Read::read_to_string(&mut pipe, &mut out);
        out
    });
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(900),
            "tests/cm_fabric_netns.sh did not finish in 15 minutes"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = reader.join().unwrap();
    println!("{out}");
    assert!(status.success(), "{status}\n{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("PASS ")).count(),
        6,
        "{out}"
    );
    assert!(!out.contains("FAIL"), "{out}");
}

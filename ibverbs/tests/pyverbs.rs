//! rdma-core v44's own test suite, as Debian installs it (`rdma-core`'s
//! `/usr/share/doc/rdma-core/tests`, partly gzipped), run with Debian's
//! `python3-pyverbs` on the built `libibverbs.so.1`: the extended QP interface
//! (`test_qpex`), the extended CQ (`test_cqex`), the memory-window tests of
//! `test_mr` (`MWTest`) and `test_cq`'s CQ resize (`test_resize_cq`). The suite is
//! unpacked into a scratch directory that is removed afterwards; its players (two
//! sets of objects) share one simulated NIC, host 86 of this process's loopback /24.
//!
//! Every test must pass or be skipped for a feature the device does not offer (XRC
//! domains; `IBV_QP_EX_WITH_ATOMIC_WRITE`, which a ConnectX-5 lacks too); the ones
//! that must pass are listed. Without pyverbs or the installed suite the test is
//! skipped with a notice, unless `FERROVERBS_REQUIRE_IBVERBS_UTILS=1`.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::{library_dir, net, Proc, REQUIRE_ENV};

#[path = "../../tests/common/pyverbs_suite.rs"]
mod pyverbs_suite;

use pyverbs_suite::{unpack, PYVERBS, SUITE};

/// The tests that must pass (the others of these modules may only be skipped).
const MUST_PASS: &[&str] = &[
    "test_qp_ex_rc_send",
    "test_qp_ex_rc_send_imm",
    "test_qp_ex_rc_rdma_write",
    "test_qp_ex_rc_rdma_write_imm",
    "test_qp_ex_rc_rdma_write_zero_length",
    "test_qp_ex_rc_rdma_read",
    "test_qp_ex_rc_rdma_read_zero_size",
    "test_qp_ex_rc_atomic_cmp_swp",
    "test_qp_ex_rc_atomic_fetch_add",
    "test_qp_ex_ud_send",
    "test_qp_ex_ud_send_imm",
    "test_qp_ex_ud_zero_size",
    "test_post_receive_qp_state_bad_flow",
    "test_post_send_qp_state_bad_flow",
    "test_full_rq_bad_flow",
    "test_rq_with_larger_sgl_bad_flow",
    "Verify bind memory window operation using the new post_send API.",
    "test_rc_traffic_cq_ex",
    "test_ud_traffic_cq_ex",
    "Test ibv_create_cq_ex()",
    "Test ibv_create_cq_ex() with wrong comp_vector / number of cqes",
    "test_mw_type1",
    "test_invalidate_mw_type1",
    "test_mw_type2",
    "test_mw_type2_invalidate_local",
    "test_mw_type2_invalidate_remote",
    "test_mw_type2_invalidate_dealloc",
    "Verify that trying to create a MW of a wrong type fails",
    // test_cq's test_resize_cq, named by its docstring's first line.
    "Test resize CQ, start with specific value and then increase and decrease",
];

/// The tests that may be skipped, with the reason rdma-core's suite prints.
const MAY_SKIP: &[(&str, &str)] = &[
    ("test_qp_ex_rc_atomic_write", "Extended QP is not supported"),
    ("test_qp_ex_xrc_send", "Create XRCD is not supported"),
    ("test_qp_ex_xrc_send_imm", "Create XRCD is not supported"),
    ("test_xrc_traffic_cq_ex", "Create XRCD is not supported"),
];

/// `(test, outcome)` of every result line of `unittest -v`: the test's name (or its
/// docstring's first line), and `ok`, `skipped '<reason>'`, `ERROR` or `FAIL`.
fn results(err: &str) -> Vec<(String, String)> {
    let mut v = Vec::new();
    let mut pending: Option<String> = None;
    for line in err.lines() {
        let (head, outcome) = match line.rsplit_once(" ... ") {
            Some((h, o)) => (Some(h), o),
            None => (None, ""),
        };
        match head {
            Some(h) => {
                let name = h.split(" (").next().unwrap_or(h).trim().to_string();
                let name = if name.is_empty() {
                    pending.take().unwrap_or_default()
                } else if h.starts_with("test_") {
                    name
                } else {
                    h.trim().to_string()
                };
                v.push((name, outcome.trim().to_string()));
                pending = None;
            }
            None => {
                if line.starts_with("test_") && line.contains(" (tests.") {
                    pending = Some(line.split(" (").next().unwrap().to_string());
                }
            }
        }
    }
    v
}

#[test]
fn rdma_core_qpex_cqex_and_memory_window_tests_pass() {
    let have = Path::new(SUITE).exists()
        && Path::new(PYVERBS).exists()
        && Path::new("/usr/bin/python3").exists();
    if !have {
        assert_ne!(
            std::env::var(REQUIRE_ENV).as_deref(),
            Ok("1"),
            "rdma-core's tests or python3-pyverbs are missing (apt-get install rdma-core python3-pyverbs)"
        );
        println!("SKIPPED: rdma-core's tests or python3-pyverbs not installed");
        return;
    }
    let scratch: PathBuf =
        std::env::temp_dir().join(format!("ferroverbs-rdma-core-tests-{}", std::process::id()));
    let tests = scratch.join("tests");
    unpack(&tests);
    let lib = library_dir("pyverbs");
    let cmd = format!(
        "cd {} && exec /usr/bin/python3 run_tests.py -v test_qpex test_cqex test_mr.MWTest \
         test_cq.CQTest.test_resize_cq",
        tests.display()
    );
    let p = Proc::spawn(
        "rdma-core tests",
        &lib,
        &format!("sim:{}", net::host(86)),
        &["sh", "-c", &cmd],
    );
    let (status, out, err) = p.finish(Duration::from_secs(600));
    std::fs::remove_dir_all(&scratch).ok();
    println!("{out}{err}");
    let r = results(&err);
    let table: String = r.iter().map(|(n, o)| format!("{o:>10}  {n}\n")).collect();
    println!("{table}");
    assert!(status.is_some(), "the suite did not finish in 600 s");
    for name in MUST_PASS {
        assert!(
            r.iter().any(|(n, o)| n == name && o == "ok"),
            "{name} did not pass:\n{table}"
        );
    }
    for (n, o) in &r {
        if o == "ok" {
            continue;
        }
        let allowed = MAY_SKIP
            .iter()
            .any(|(s, why)| s == n && o.starts_with("skipped") && o.contains(why));
        assert!(allowed, "{n}: {o}\n{table}");
    }
    assert_eq!(
        r.len(),
        MUST_PASS.len() + MAY_SKIP.len(),
        "unexpected tests:\n{table}"
    );
    assert!(status.unwrap().success(), "{err}");
}

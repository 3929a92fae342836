//! rdma-core v44's own test suite (Debian's `python3-pyverbs` installs it in
//! `/usr/share/doc/rdma-core/tests`, partly gzipped) on rdma-core's own libibverbs
//! and libmlx5 under `ferroverbs run`: the modules below, in one process on one
//! simulated NIC (its players share it, as they share one ConnectX). The suite is
//! unpacked into a scratch directory that is removed afterwards.
//!
//! Every test listed in [`MUST_PASS`] must pass; every other one may only be
//! skipped for the reason [`MAY_SKIP`] gives it (a capability the device does not
//! report, or one the environment lacks), and [`PENDING`] names the ones that fail
//! today and why. Without pyverbs or the installed suite the test is skipped with a
//! notice, unless `FERROVERBS_REQUIRE_IBVERBS_UTILS=1`. docs/uapi.md has the table.

mod uapi_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use uapi_support::{net, Proc, REQUIRE_ENV};

#[path = "common/pyverbs_suite.rs"]
mod pyverbs_suite;

use pyverbs_suite::{unpack, PYVERBS, SUITE};

/// The modules run.
const MODULES: &[&str] = &[
    "test_device",
    "test_pd",
    "test_mr",
    "test_cq",
    "test_cq_events",
    "test_cqex",
    "test_qp",
    "test_qpex",
    "test_atomic",
    "test_addr",
    "test_shared_pd",
    "test_relaxed_ordering",
    "test_parent_domain",
    "test_mlx5_huge_page",
    "test_mlx5_timestamp",
    "test_mlx5_cq",
    "test_mlx5_uar",
    "test_fork",
    "test_mlx5_raw_wqe",
    "test_mlx5_query_port",
    "test_odp",
];

/// The tests that must pass (`module.Class.test`).
const MUST_PASS: &[&str] = &[
    "test_addr.AHTest.test_create_ah",
    "test_addr.AHTest.test_create_ah_roce",
    "test_addr.AHTest.test_destroy_ah",
    "test_atomic.AtomicTest.test_atomic_cmp_and_swap",
    "test_atomic.AtomicTest.test_atomic_fetch_and_add",
    "test_atomic.AtomicTest.test_atomic_invalid_lkey",
    "test_atomic.AtomicTest.test_atomic_invalid_mr_access",
    "test_atomic.AtomicTest.test_atomic_invalid_qp_access",
    "test_atomic.AtomicTest.test_atomic_invalid_rkey",
    "test_atomic.AtomicTest.test_atomic_non_aligned_addr",
    "test_cq.CQAPITest.test_create_cq",
    "test_cq.CQAPITest.test_create_cq_bad_flow",
    "test_cq.CQAPITest.test_create_cq_with_comp_channel",
    "test_cq.CQTest.test_resize_cq",
    "test_cq_events.CqEventsTestCase.test_cq_events_rc",
    "test_cq_events.CqEventsTestCase.test_cq_events_ud",
    "test_cqex.CQEXAPITest.test_create_cq_ex",
    "test_cqex.CQEXAPITest.test_create_cq_ex_bad_flow",
    "test_cqex.CqExTestCase.test_rc_traffic_cq_ex",
    "test_cqex.CqExTestCase.test_ud_traffic_cq_ex",
    "test_device.DeviceTest.test_dev_list",
    "test_device.DeviceTest.test_open_dev",
    "test_device.DeviceTest.test_phys_port_cnt_ex",
    "test_device.DeviceTest.test_query_device",
    "test_device.DeviceTest.test_query_device_ex",
    "test_device.DeviceTest.test_query_gid",
    "test_device.DeviceTest.test_query_gid_ex",
    "test_device.DeviceTest.test_query_gid_ex_bad_flow",
    "test_device.DeviceTest.test_query_gid_table",
    "test_device.DeviceTest.test_query_gid_table_bad_flow",
    "test_device.DeviceTest.test_query_pkey",
    "test_device.DeviceTest.test_query_port",
    "test_device.DeviceTest.test_query_port_bad_flow",
    "test_fork.ForkAPITest.test_is_fork_initialized",
    "test_mlx5_cq.DvCqTest.test_dv_cq_cqe_size_128",
    "test_mlx5_cq.DvCqTest.test_dv_cq_cqe_size_64",
    "test_mlx5_cq.DvCqTest.test_dv_cq_cqe_size_environment_var",
    "test_mlx5_cq.DvCqTest.test_dv_cq_cqe_size_with_bad_size",
    "test_mlx5_cq.DvCqTest.test_dv_cq_traffic",
    "test_mlx5_huge_page.ResourcesOnHugePageTest.test_obj_on_huge",
    "test_mlx5_huge_page.ResourcesOnHugePageTest.test_prefer_obj_on_huge",
    "test_mlx5_query_port.Mlx5DVQueryPortTestCase.test_dv_query_port",
    "test_mlx5_raw_wqe.RawWqeTest.test_mixed_raw_wqe_traffic",
    "test_mlx5_timestamp.TimeAPITest.test_query_rt_values",
    "test_mlx5_timestamp.TimeStampTest.test_timestamp_free_running_rc_traffic",
    "test_mlx5_timestamp.TimeStampTest.test_timestamp_real_time_rc_traffic",
    "test_mlx5_uar.Mlx5UarTestCase.test_alloc_uar",
    "test_mr.MRTest.test_mr_rereg_access",
    "test_mr.MRTest.test_mr_rereg_access_bad_flow",
    "test_mr.MRTest.test_mr_rereg_addr",
    "test_mr.MRTest.test_mr_rereg_pd",
    "test_mr.MRTest.test_reg_mr_bad_flags",
    "test_mr.MWTest.test_invalidate_mw_type1",
    "test_mr.MWTest.test_mw_type1",
    "test_mr.MWTest.test_mw_type2",
    "test_mr.MWTest.test_mw_type2_invalidate_dealloc",
    "test_mr.MWTest.test_mw_type2_invalidate_local",
    "test_mr.MWTest.test_mw_type2_invalidate_remote",
    "test_mr.MWTest.test_reg_mw_wrong_type",
    "test_odp.OdpTestCase.test_odp_async_prefetch_rc_traffic",
    "test_odp.OdpTestCase.test_odp_prefetch_async_no_page_fault_rc_traffic",
    "test_odp.OdpTestCase.test_odp_prefetch_sync_no_page_fault_rc_traffic",
    "test_odp.OdpTestCase.test_odp_rc_atomic_cmp_and_swp",
    "test_odp.OdpTestCase.test_odp_rc_atomic_fetch_and_add",
    "test_odp.OdpTestCase.test_odp_rc_rdma_read",
    "test_odp.OdpTestCase.test_odp_rc_rdma_write",
    "test_odp.OdpTestCase.test_odp_rc_srq_traffic",
    "test_odp.OdpTestCase.test_odp_rc_traffic",
    "test_odp.OdpTestCase.test_odp_sync_prefetch_rc_traffic",
    "test_odp.OdpTestCase.test_odp_ud_traffic",
    "test_parent_domain.ParentDomainTrafficTest.test_default_allocators_rc_traffic",
    "test_parent_domain.ParentDomainTrafficTest.test_mem_align_rc_traffic",
    "test_parent_domain.ParentDomainTrafficTest.test_mem_align_srq_excq_rc_traffic",
    "test_parent_domain.ParentDomainTrafficTest.test_mem_align_ud_traffic",
    "test_parent_domain.ParentDomainTrafficTest.test_without_allocators_rc_traffic",
    "test_pd.PDTest.test_alloc_pd",
    "test_pd.PDTest.test_dealloc_pd",
    "test_pd.PDTest.test_destroy_pd_twice",
    "test_pd.PDTest.test_multiple_pd_creation",
    "test_qp.QPTest.test_create_raw_qp_ex_with_illegal_caps_max_recv_sge",
    "test_qp.QPTest.test_create_raw_qp_ex_with_illegal_caps_max_recv_wr",
    "test_qp.QPTest.test_create_raw_qp_ex_with_illegal_caps_max_send_sge",
    "test_qp.QPTest.test_create_raw_qp_ex_with_illegal_caps_max_send_wr",
    "test_qp.QPTest.test_create_rc_qp_ex_no_attr",
    "test_qp.QPTest.test_create_rc_qp_ex_with_attr",
    "test_qp.QPTest.test_create_rc_qp_no_attr",
    "test_qp.QPTest.test_create_rc_qp_with_attr",
    "test_qp.QPTest.test_create_uc_qp_ex_no_attr",
    "test_qp.QPTest.test_create_uc_qp_ex_with_attr",
    "test_qp.QPTest.test_create_uc_qp_no_attr",
    "test_qp.QPTest.test_create_uc_qp_with_attr",
    "test_qp.QPTest.test_create_ud_qp_no_attr",
    "test_qp.QPTest.test_create_ud_qp_with_attr",
    "test_qp.QPTest.test_query_data_in_order",
    "test_qp.QPTest.test_query_rc_qp",
    "test_qp.QPTest.test_query_uc_qp",
    "test_qpex.QpExTestCase.test_full_rq_bad_flow",
    "test_qpex.QpExTestCase.test_post_receive_qp_state_bad_flow",
    "test_qpex.QpExTestCase.test_post_send_qp_state_bad_flow",
    "test_qpex.QpExTestCase.test_qp_ex_rc_atomic_cmp_swp",
    "test_qpex.QpExTestCase.test_qp_ex_rc_atomic_fetch_add",
    "test_qpex.QpExTestCase.test_qp_ex_rc_bind_mw",
    "test_qpex.QpExTestCase.test_qp_ex_rc_rdma_read",
    "test_qpex.QpExTestCase.test_qp_ex_rc_rdma_read_zero_size",
    "test_qpex.QpExTestCase.test_qp_ex_rc_rdma_write",
    "test_qpex.QpExTestCase.test_qp_ex_rc_rdma_write_imm",
    "test_qpex.QpExTestCase.test_qp_ex_rc_rdma_write_zero_length",
    "test_qpex.QpExTestCase.test_qp_ex_rc_send",
    "test_qpex.QpExTestCase.test_qp_ex_rc_send_imm",
    "test_qpex.QpExTestCase.test_qp_ex_ud_send",
    "test_qpex.QpExTestCase.test_qp_ex_ud_send_imm",
    "test_qpex.QpExTestCase.test_qp_ex_ud_zero_size",
    "test_qpex.QpExTestCase.test_rq_with_larger_sgl_bad_flow",
    "test_relaxed_ordering.RoTestCase.test_ro_rc_traffic",
    "test_relaxed_ordering.RoTestCase.test_ro_ud_traffic",
    "test_shared_pd.SharedPDTestCase.test_imported_rc_ex_rdma_write",
];

/// Tests that may be skipped, by name prefix, with the reason the suite prints
/// (any of them) and why that is right.
const MAY_SKIP: &[(&str, &[&str], &str)] = &[
    (
        "test_odp.OdpTestCase.test_odp_implicit_",
        &["ODP implicit is not supported"],
        "no implicit ODP regions: IBV_ODP_SUPPORT_IMPLICIT is not reported",
    ),
    (
        "test_odp.OdpTestCase.test_odp_rc_huge_",
        &["There are no huge pages"],
        "the machine has no 2 MiB huge pages allocated (the environment's, not the device's)",
    ),
    (
        "test_odp.OdpTestCase.test_odp_xrc_traffic",
        &["Create XRCD is not supported"],
        "no XRC: OPEN_XRCD EOPNOTSUPP",
    ),
    (
        "test_parent_domain.ParentDomainTrafficTest.test_huge_page_traffic",
        &["There are no huge pages"],
        "the machine has no 2 MiB huge pages allocated (the environment's, not the device's)",
    ),
    (
        "test_device.DMTest.",
        &["Device memory is not supported"],
        "no device memory (MEMIC): max_dm_size 0",
    ),
    (
        "test_device.SharedDMTest.",
        &["Device memory is not supported"],
        "no device memory (MEMIC): max_dm_size 0",
    ),
    (
        "test_mr.DeviceMemory",
        &["Device memory is not supported"],
        "no device memory (MEMIC): max_dm_size 0",
    ),
    (
        "test_mr.DmaBuf",
        &["Allocating dmabuf is not supported", "dmabuf"],
        "the machine has no GPU render node to export a dma-buf",
    ),
    (
        "test_cqex.CqExTestCase.test_xrc_traffic_cq_ex",
        &["Create XRCD is not supported"],
        "no XRC: device_cap_flags without IB_DEVICE_XRC, OPEN_XRCD EOPNOTSUPP",
    ),
    (
        "test_qpex.QpExTestCase.test_qp_ex_xrc_",
        &["Create XRCD is not supported"],
        "no XRC: device_cap_flags without IB_DEVICE_XRC, OPEN_XRCD EOPNOTSUPP",
    ),
    (
        "test_atomic.AtomicTest.test_xrc_",
        &["Create XRCD is not supported"],
        "no XRC: device_cap_flags without IB_DEVICE_XRC, OPEN_XRCD EOPNOTSUPP",
    ),
    (
        "test_relaxed_ordering.RoTestCase.test_ro_xrc_traffic",
        &["Create XRCD is not supported"],
        "no XRC: device_cap_flags without IB_DEVICE_XRC, OPEN_XRCD EOPNOTSUPP",
    ),
    (
        "test_qpex.QpExTestCase.test_qp_ex_rc_atomic_write",
        &["Extended QP is not supported on this device"],
        "no RDMA atomic write (a ConnectX-5 has none): libmlx5 refuses the send op",
    ),
    (
        "test_qp.QPTest.test_create_raw_qp",
        &["Raw Packet QP", "must be done by root"],
        "raw Ethernet QPs (TIR/TIS objects) are not simulated: CREATE_QP EOPNOTSUPP",
    ),
    (
        "test_qp.QPTest.test_query_raw_qp",
        &["Raw Packet QP", "must be done by root"],
        "raw Ethernet QPs (TIR/TIS objects) are not simulated: CREATE_QP EOPNOTSUPP",
    ),
    // The suite draws IBV_QP_CREATE_BLOCK_SELF_MCAST_LB at random for extended UD
    // QPs: they pass without it and skip with it.
    (
        "test_qp.QPTest.test_create_ud_qp_ex_",
        &["Create UD QP"],
        "no block_lb_mc capability (no multicast): that create flag is EOPNOTSUPP",
    ),
    (
        "test_qp.QPTest.test_modify_ud_qp",
        &["Create UD QP"],
        "no block_lb_mc capability (no multicast): that create flag is EOPNOTSUPP",
    ),
    (
        "test_qp.QPTest.test_query_ud_qp",
        &["Create UD QP"],
        "no block_lb_mc capability (no multicast): that create flag is EOPNOTSUPP",
    ),
    (
        "test_mlx5_timestamp.TimeStampTest.test_timestamp_",
        &["Create QP type 8 is not supported"],
        "raw Ethernet QPs (TIR/TIS objects) are not simulated: CREATE_QP EOPNOTSUPP",
    ),
    (
        "test_mlx5_cq.DvCqTest.test_dv_cq_compression_flags",
        &["CQE 128B compression"],
        "no CQE compression: the capabilities report none (the device writes every CQE whole)",
    ),
    (
        "test_mlx5_cq.DvCqTest.test_dv_cq_padding",
        &["CQE 128B padding"],
        "no 128-byte CQE padding capability (cqe_128_always 0)",
    ),
    (
        "test_mlx5_cq.DvCqTest.test_scatter_to_cqe_control_by_qp",
        &["Create DC QP is not supported"],
        "no DC transport: creating a DC QP is EOPNOTSUPP",
    ),
];

/// Tests that fail today, and why (each may pass, which the test reports).
const PENDING: &[(&str, &str)] = &[];

/// `(module.Class.test, outcome)` of every result of `unittest -v`: the test's id
/// from `name (tests.module.Class.name)`, and the text after the last ` ... ` of
/// that line or the docstring line after it (`ok`, `skipped '<reason>'`, `ERROR`,
/// `FAIL`).
fn results(err: &str) -> Vec<(String, String)> {
    let mut v = Vec::new();
    let mut pending: Option<String> = None;
    for line in err.lines() {
        if let Some(i) = line.find(" (tests.") {
            let rest = &line[i + " (tests.".len()..];
            if let Some(end) = rest.find(')') {
                pending = Some(rest[..end].to_string());
            }
        }
        if let (Some((_, outcome)), Some(_)) = (line.rsplit_once(" ... "), &pending) {
            v.push((pending.take().unwrap(), outcome.trim().to_string()));
        }
    }
    v
}

#[test]
fn rdma_core_pyverbs_suite_passes_on_libmlx5() {
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
    let scratch: PathBuf = std::env::temp_dir().join(format!(
        "ferroverbs-uapi-rdma-core-tests-{}",
        std::process::id()
    ));
    let tests = scratch.join("tests");
    unpack(&tests);
    let cmd = format!(
        "cd {} && exec /usr/bin/python3 run_tests.py -v {}",
        tests.display(),
        MODULES.join(" ")
    );
    let p = Proc::spawn(
        "rdma-core tests",
        &format!("sim:{}", net::host(120)),
        &["sh", "-c", &cmd],
        &[],
    );
    let (status, out, err) = p.finish(Duration::from_secs(900));
    std::fs::remove_dir_all(&scratch).ok();
    println!("{out}{err}");
    let r = results(&err);
    let table: String = r.iter().map(|(n, o)| format!("{o:>10}  {n}\n")).collect();
    println!("{table}");
    assert!(status.is_some(), "the suite did not finish in 900 s");
    for name in MUST_PASS {
        assert!(
            r.iter().any(|(n, o)| n == name && o == "ok"),
            "{name} did not pass:\n{table}"
        );
    }
    for (n, o) in &r {
        if o == "ok" {
            if !MUST_PASS.contains(&n.as_str()) {
                println!("passes, not listed: {n}");
            }
            continue;
        }
        if let Some((_, why)) = PENDING.iter().find(|(p, _)| p == n) {
            println!("pending: {n}: {o} ({why})");
            continue;
        }
        let allowed = MAY_SKIP.iter().any(|(prefix, reasons, _)| {
            n.starts_with(prefix)
                && o.starts_with("skipped")
                && reasons.iter().any(|why| o.contains(why))
        });
        assert!(allowed, "{n}: {o}\n{table}");
    }
    // Every test of the modules ran (a module that failed to load shows as one
    // `_FailedTest`).
    assert!(r.len() >= MUST_PASS.len() + 30, "too few results:\n{table}");
    assert!(
        !err.contains("_FailedTest"),
        "a module failed to load:\n{err}"
    );
}

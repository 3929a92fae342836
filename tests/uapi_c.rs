//! C programs run under `ferroverbs run` (compiled here with gcc against the
//! installed headers; skipped with a notice without gcc or the headers):
//!
//! * `uapi/tests/c/badcmd.c` writes malformed uverbs commands on
//!   `/dev/infiniband/uverbs0` (short and oversized buffers, bad headers, unknown and
//!   unimplemented commands, wrong handles and other objects' handles, unmapped
//!   buffers, bad mmap offsets, event file misuse) and checks each errno against
//!   Linux's; the file stays usable afterwards;
//! * `uapi/tests/c/events.c` uses rdma-core's libibverbs + libmlx5: a completion event
//!   of an RDMA WRITE between two QPs of the process (poll readiness, the bytes
//!   written, EAGAIN on an empty non-blocking channel), and a remote access error
//!   reported as a completion at the requester and as `IBV_EVENT_QP_ACCESS_ERR` on the
//!   async file for the responder QP;
//! * `uapi/tests/c/ioctl.c` issues raw `RDMA_VERBS_IOCTL` methods (header and
//!   attribute rules, mlx5_ib's UAR objects and their mmap, QUERY_CONTEXT, PD_QUERY,
//!   QUERY_MR, ASYNC_EVENT_ALLOC) and checks that a duplicated descriptor names the
//!   same ucontext.
//! * `uapi/tests/c/resize.c` uses rdma-core's libibverbs + libmlx5: `ibv_resize_cq`
//!   (libmlx5's copy of the unpolled completions up to the device's resize CQE)
//!   growing and shrinking a CQ with completions waiting before and arriving after,
//!   each polled once, in order, with its data; sizes out of range or below the
//!   waiting completions are EINVAL; `cqe` is the size rounded up; run with the
//!   layer's busy-poll assistance (the context's `poll_cq` entry wrapped) and without.
//! * `uapi/tests/c/cqex.c`: extended CQs (`ibv_create_cq_ex`, a locked and a
//!   single-threaded one: two of libmlx5's `start_poll` variants) polled with
//!   `ibv_start_poll`/`ibv_next_poll`/`ibv_end_poll` in a SEND ping-pong between
//!   two QPs, every completion checked; `start_poll` is the layer's wrapper (in
//!   `libferroverbs_uapi.so`, `dladdr`) with the busy-poll assistance, libmlx5's
//!   own without it, `next_poll`/`end_poll` libmlx5's either way; and the same
//!   ping-pong between two processes, each on its own NIC.
//! * `uapi/tests/c/scatter.c`: responder scatter to CQE as libmlx5 asks for it (a
//!   SEND of up to 32 bytes, 64 with `MLX5_CQE_SIZE=128`, in its CQE, the receive
//!   buffer untouched until libmlx5's poll copies it there; none with
//!   `MLX5_SCATTER_TO_CQE=0`), and requester scatter to CQE (RDMA READs of up to 32
//!   or 64 bytes and atomic results of a QP with `sq_sig_all`, the local buffer
//!   untouched after the completion event until the poll; with 128-byte CQEs
//!   Debian's libmlx5 v44 copies them from the wrong address, which the checker
//!   recognises exactly: rdma-core fixed it upstream in commit 45184d2c8).
//! * `uapi/tests/c/lastsend.c`: an RDMA WRITE posted on a hot UAR page (its doorbell
//!   a plain store) and its QP destroyed at once, with no poll between, still
//!   reaches the responder, as on a ConnectX, which sees the doorbell before the
//!   DESTROY_QP command that follows it.
//! * `uapi/tests/c/clock.c`: mlx5_ib's clock pages through libmlx5:
//!   `ibv_query_rt_values_ex` reads the device clock (the core clock page, its loads
//!   trapped) at `hca_core_clock` kHz; `mlx5dv_get_clock_info` and `mlx5dv_ts_to_ns`
//!   turn it into CLOCK_REALTIME; the pages' mmap errnos are mlx5_ib's.
//! * `uapi/tests/c/cmbind.c` binds rdma_cm ids with the raw write ABI: the NIC's
//!   address, a loopback address (to this device, with its GID, as Linux's
//!   `cma_bind_loopback`), another address (EADDRNOTAVAIL), IPv6 (EAFNOSUPPORT), a
//!   port listened on twice (EADDRINUSE), ids bound to port 0 (distinct ephemeral
//!   ports, reported before and after LISTEN); a resolved route's path record as Linux's
//!   `cma_resolve_iboe_route` fills it (hop limit 64, MTU, selectors, lifetime,
//!   flow label); LEAVE_MCAST of a group not joined (ENOENT, ENOSPC) and bad joins
//!   (EINVAL, ENOENT).

mod uapi_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Compiles `uapi/tests/c/NAME.c` with `libs`; `None` (skip) without gcc or headers.
fn compile(name: &str, header: &str, libs: &[&str]) -> Option<(PathBuf, PathBuf)> {
    if !Path::new(header).exists() || Command::new("gcc").arg("--version").output().is_err() {
        println!("gcc or {header} missing: skipped");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("ferroverbs-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("uapi/tests/c/{name}.c"));
    let o = Command::new("gcc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(libs)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    Some((dir, exe))
}

/// Runs a compiled checker on the simulated NIC at host `host` of this process's
/// loopback /24; asserts it passed at least `min` cases and failed none.
fn run_checker(dir: PathBuf, exe: PathBuf, host: u8, min: usize) {
    run_checker_with(&exe, &[], &[], host, min);
    let _ = std::fs::remove_dir_all(&dir);
}

/// [`run_checker`] with arguments `args` and environment `envs`, leaving the
/// directory.
fn run_checker_with(exe: &Path, args: &[&str], envs: &[(&str, &str)], host: u8, min: usize) {
    let dev = format!("sim:{}", uapi_support::net::host(host));
    let mut cmd = vec![exe.to_str().unwrap()];
    cmd.extend_from_slice(args);
    let p = uapi_support::Proc::spawn("checker", &dev, &cmd, envs);
    let (st, out, err) = p.finish(Duration::from_secs(180));
    println!("{out}{err}");
    assert!(st.is_some_and(|s| s.success()), "{st:?}\n{out}\n{err}");
    let passed = out.lines().filter(|l| l.starts_with("PASS ")).count();
    assert!(!out.contains("FAIL"), "{out}");
    assert!(out.contains("\n0 failures"), "{out}");
    assert!(passed >= min, "{passed} cases passed:\n{out}");
}

#[test]
fn malformed_commands_get_linuxs_errnos() {
    if let Some((dir, exe)) = compile("badcmd", "/usr/include/rdma/mlx5-abi.h", &[]) {
        run_checker(dir, exe, 101, 60);
    }
}

#[test]
fn completion_and_async_events_through_libmlx5() {
    if let Some((dir, exe)) = compile("events", "/usr/include/infiniband/verbs.h", &["-libverbs"]) {
        run_checker(dir, exe, 102, 23);
    }
}

#[test]
fn ioctl_methods_and_duplicated_descriptors() {
    if let Some((dir, exe)) = compile("ioctl", "/usr/include/rdma/mlx5_user_ioctl_cmds.h", &[]) {
        run_checker(dir, exe, 103, 35);
    }
}

#[test]
fn cq_resize_through_libmlx5_keeps_every_completion() {
    if let Some((dir, exe)) = compile("resize", "/usr/include/infiniband/verbs.h", &["-libverbs"]) {
        // With the layer's busy-poll assistance (the default) and without it.
        run_checker_with(&exe, &[], &[], 104, 18);
        run_checker_with(&exe, &[], &[("FERROVERBS_POLL_ASSIST", "0")], 104, 18);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn extended_cqs_through_libmlx5_with_and_without_the_poll_assistance() {
    if let Some((dir, exe)) = compile("cqex", "/usr/include/infiniband/verbs.h", &["-libverbs"]) {
        run_checker_with(&exe, &["ex", "300"], &[], 107, 12);
        run_checker_with(
            &exe,
            &["ex", "300"],
            &[("FERROVERBS_POLL_ASSIST", "0")],
            107,
            12,
        );
        run_checker_with(&exe, &["poll", "300"], &[], 107, 7);
        // Two processes, each on its own NIC, with and without the assistance.
        let exe = exe.to_str().unwrap();
        for (k, envs) in [&[][..], &[("FERROVERBS_POLL_ASSIST", "0")][..]]
            .into_iter()
            .enumerate()
        {
            let limit = Duration::from_secs(180);
            let (so, co) = uapi_support::pair(exe, &["ex", "300"], envs, 108, 109, k as u16, limit);
            for out in [&so, &co] {
                assert!(out.contains("PASS start_poll_entry"), "{out}");
                assert!(out.contains("PASS pingpong"), "{out}");
                assert!(out.contains("\n0 failures"), "{out}");
            }
            assert!(co.contains("rtt_us "), "{co}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn scatter_to_cqe_through_libmlx5() {
    if let Some((dir, exe)) = compile("scatter", "/usr/include/infiniband/verbs.h", &["-libverbs"])
    {
        // 64-byte CQEs: up to 32 bytes in the CQE; 128-byte ones: up to 64; off: none.
        // Receives, then READs and atomics of a QP that signals every WQE (87 cases).
        run_checker_with(&exe, &["32"], &[], 105, 87);
        run_checker_with(&exe, &["64"], &[("MLX5_CQE_SIZE", "128")], 105, 87);
        run_checker_with(&exe, &["0"], &[("MLX5_SCATTER_TO_CQE", "0")], 105, 87);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn rdma_cm_binds_routes_and_refuses_as_linux() {
    if let Some((dir, exe)) = compile("cmbind", "/usr/include/rdma/rdma_user_cm.h", &[]) {
        let ip = uapi_support::net::host(106).to_string();
        run_checker_with(&exe, &[&ip], &[], 106, 15);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_write_rung_just_before_destroy_qp_reaches_the_responder() {
    if let Some((dir, exe)) = compile(
        "lastsend",
        "/usr/include/infiniband/verbs.h",
        &["-libverbs"],
    ) {
        let stats = dir.join("stats");
        let path = stats.to_str().unwrap();
        run_checker_with(&exe, &[], &[("FERROVERBS_DOORBELL_STATS", path)], 110, 10);
        // The last doorbell was a store to a hot page (not a trapped one, which is
        // forwarded at once): the case this checks.
        let line = std::fs::read_to_string(&stats).unwrap();
        let w: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(w.get(5), Some(&"pages_gone_hot"), "{line}");
        assert!(
            w[6].parse::<u64>().unwrap() >= 1,
            "no page went hot: {line}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn clock_pages_give_the_device_clock_and_its_wall_clock_translation() {
    if let Some((dir, exe)) = compile(
        "clock",
        "/usr/include/infiniband/mlx5dv.h",
        &["-libverbs", "-lmlx5"],
    ) {
        run_checker(dir, exe, 111, 12);
    }
}

/// On-demand paging through libmlx5: the capabilities, an ODP region over a hole and
/// untouched pages, WRITEs and READs that follow the process's page tables,
/// `ibv_advise_mr`'s errnos, and a WRITE into an inaccessible page completing in
/// error.
#[test]
fn on_demand_paging_follows_the_page_tables() {
    if let Some((dir, exe)) = compile("odp", "/usr/include/infiniband/verbs.h", &["-libverbs"]) {
        run_checker(dir, exe, 112, 21);
    }
}

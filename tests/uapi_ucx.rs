//! UCX 1.13 (Debian 12's `ucx-utils`, unmodified) on rdma-core's own libibverbs and
//! libmlx5 through the userspace RDMA interface (`ferroverbs run`): `ucx_info -d`
//! lists the simulated ConnectX-5 `mlx5_0` with the verbs transports and the
//! accelerated `rc_mlx5` and `ud_mlx5` (UCX writes the WQEs and rings the doorbells
//! itself, through `mlx5dv`), and `ucx_perftest` runs between two processes, each on
//! its own simulated NIC.
//!
//! UCX's UCM patches `mmap` and maps the UAR pages with the system call itself,
//! behind the preload library: the uverbs descriptor is a memfd whose pages the layer
//! also maps and watches, so those mappings ring the device as libmlx5's own do.
//! `dc_mlx5` is not offered: the device has no DC (`mlx5dv_create_qp` of a DCT is
//! EOPNOTSUPP), and no DEVX (`mlx5dv_open_device` with DEVX is EOPNOTSUPP).
//!
//! UCX's `io_demo` connects by IP address through UCX's `rdmacm` connection manager
//! (librdmacm on each process's `/dev/infiniband/rdma_cm`), and the hang of
//! `UCX_MEM_MMAP_HOOK_MODE=reloc` is shown to be UCX's own (below), with the two
//! ways around it run.

mod uapi_support;

use std::sync::Mutex;
use std::time::Duration;

use uapi_support::{have, net, pair, run_ok};

/// The pairs run one at a time (each is two busy processes).
static SERIAL: Mutex<()> = Mutex::new(());

/// Time limit of a pair.
const LIMIT: Duration = Duration::from_secs(300);

/// The device as UCX names it.
const DEV: &str = "mlx5_0:1";

fn ucx() -> bool {
    have("ucx_info") && have("ucx_perftest")
}

/// The transports `ucx_info -d` lists on `mlx5_0:1`.
fn transports(out: &str) -> Vec<String> {
    let Some(md) = out
        .split("# Memory domain: ")
        .find(|s| s.starts_with("mlx5_0\n"))
    else {
        return Vec::new();
    };
    md.lines()
        .zip(md.lines().skip(1))
        .filter(|(_, d)| d.trim_start_matches('#').trim() == format!("Device: {DEV}"))
        .filter_map(|(t, _)| {
            t.trim_start_matches('#')
                .trim()
                .strip_prefix("Transport: ")
                .map(str::to_string)
        })
        .collect()
}

#[test]
fn ucx_info_lists_mlx5_0_with_verbs_and_mlx5_transports() {
    if !ucx() {
        return;
    }
    let dev = format!("sim:{}", net::host(131));
    let out = run_ok(&dev, &["ucx_info", "-d"], Duration::from_secs(120));
    let tls = transports(&out);
    for want in ["rc_verbs", "ud_verbs", "rc_mlx5", "ud_mlx5"] {
        assert!(
            tls.iter().any(|t| t == want),
            "{want} not listed on {DEV} (listed: {tls:?}) in:\n{out}"
        );
    }
    // No DC on this device (and no DEVX): UCX does not offer dc_mlx5.
    assert!(!tls.iter().any(|t| t == "dc_mlx5"), "{tls:?}");
}

/// Runs `ucx_perftest args -n n` as a server on host `s` and a client on host
/// `s + 1` with `UCX_TLS=tls` on `mlx5_0:1`, and checks that both exit 0 and the
/// client reports all `n` iterations.
fn perftest(tls: &str, args: &[&str], n: u64, s: u8, slot: u16) {
    perftest_with(tls, args, n, s, slot, &[]);
}

/// [`perftest`] with the environment `more` added.
fn perftest_with(tls: &str, args: &[&str], n: u64, s: u8, slot: u16, more: &[(&str, &str)]) {
    if !ucx() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut envs = vec![("UCX_TLS", tls), ("UCX_NET_DEVICES", DEV)];
    envs.extend_from_slice(more);
    let ns = n.to_string();
    let mut all = args.to_vec();
    all.extend(["-n", &ns]);
    let (_, c) = pair("ucx_perftest", &all, &envs, s, s + 1, slot, LIMIT);
    let fin = c
        .lines()
        .find(|l| l.starts_with("Final:"))
        .unwrap_or_else(|| panic!("{tls} {args:?}: no final report in:\n{c}"));
    let iters: Option<u64> = fin.split_whitespace().nth(1).and_then(|x| x.parse().ok());
    assert_eq!(iters, Some(n), "{fin}");
}

// Over UCP an RC transport needs a UD one beside it for the wire-up of its
// endpoints, as on a real ConnectX.

#[test]
fn tag_lat_over_rc_verbs() {
    perftest("rc_verbs,ud_verbs", &["-t", "tag_lat"], 500, 133, 0);
}

#[test]
fn tag_bw_over_rc_verbs() {
    perftest("rc_verbs,ud_verbs", &["-t", "tag_bw"], 500, 135, 1);
}

#[test]
fn tag_lat_and_bw_over_ud_verbs() {
    perftest("ud_verbs", &["-t", "tag_lat"], 500, 137, 2);
    perftest("ud_verbs", &["-t", "tag_bw"], 500, 139, 3);
}

#[test]
fn tag_lat_over_rc_mlx5() {
    perftest("rc_mlx5,ud_mlx5", &["-t", "tag_lat"], 500, 141, 4);
}

#[test]
fn tag_bw_over_rc_mlx5() {
    perftest("rc_mlx5,ud_mlx5", &["-t", "tag_bw"], 500, 143, 5);
}

#[test]
fn tag_lat_and_bw_over_ud_mlx5() {
    perftest("ud_mlx5", &["-t", "tag_lat"], 500, 145, 6);
    perftest("ud_mlx5", &["-t", "tag_bw"], 500, 147, 7);
}

/// A 256 KiB tag message goes by UCX's rendezvous protocol: RDMA READ of the
/// registered buffer, with UCX's own WQEs.
#[test]
fn rendezvous_tag_bw_over_rc_mlx5() {
    let args = ["-t", "tag_bw", "-s", "262144"];
    perftest("rc_mlx5,ud_mlx5", &args, 10, 149, 8);
}

// UCT tests: the transport and device are named on the command line.

#[test]
fn am_lat_over_each_transport() {
    for (k, tl) in ["rc_verbs", "ud_verbs", "rc_mlx5", "ud_mlx5"]
        .into_iter()
        .enumerate()
    {
        let args = ["-t", "am_lat", "-x", tl, "-d", DEV];
        perftest(tl, &args, 500, 151 + 2 * k as u8, 9 + k as u16);
    }
}

/// RDMA WRITE latency (the receiver polls its buffer for the iteration's sequence
/// number: the data must land) and atomic add latency, with rc_mlx5's own WQEs.
#[test]
fn put_and_add_lat_over_rc_mlx5() {
    for (k, t) in ["put_lat", "add_lat"].into_iter().enumerate() {
        let args = ["-t", t, "-x", "rc_mlx5", "-d", DEV];
        perftest("rc_mlx5", &args, 200, 161 + 2 * k as u8, 13 + k as u16);
    }
}

/// Zero-copy active messages: UCX's WQE carries the AM header inline and the payload
/// by a data segment pointing at the registered buffer (RC: a SEND, UD: with UCX's
/// own address vector).
#[test]
fn zcopy_am_lat_over_rc_mlx5_and_ud_mlx5() {
    let rc = [
        "-t", "am_lat", "-x", "rc_mlx5", "-d", DEV, "-s", "3000", "-D", "zcopy",
    ];
    perftest("rc_mlx5", &rc, 200, 171, 0);
    let ud = [
        "-t", "am_lat", "-x", "ud_mlx5", "-d", DEV, "-s", "900", "-D", "zcopy",
    ];
    perftest("ud_mlx5", &ud, 200, 173, 1);
}

/// RDMA READ (zero-copy 64 KiB and a 16-byte buffered copy) and the standard 64-bit
/// atomics UCX issues with its own WQEs. (UCX's `swap` needs the extended atomics,
/// which it uses only through DEVX: not offered, as on a ConnectX without it.)
#[test]
fn get_fadd_and_cswap_over_rc_mlx5() {
    let tests: [&[&str]; 4] = [
        &["-t", "get", "-s", "65536", "-D", "zcopy"],
        &["-t", "get", "-s", "16", "-D", "bcopy"],
        &["-t", "fadd"],
        &["-t", "cswap"],
    ];
    for (k, t) in tests.into_iter().enumerate() {
        let mut args = t.to_vec();
        args.extend(["-x", "rc_mlx5", "-d", DEV]);
        perftest("rc_mlx5", &args, 100, 175 + 2 * k as u8, 2 + k as u16);
    }
}

/// Waits (up to a minute) until the simulated NIC at `ip` has bound its UDP port
/// 4791 (`/proc/net/udp`), then two seconds more for the program to reach its
/// listener.
fn wait_for_nic(ip: std::net::Ipv4Addr) {
    // /proc/net/udp: local address as little-endian hex of the IPv4 address, port.
    let want = format!("{:08X}:12B7", u32::from_le_bytes(ip.octets()));
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        let t = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
        if t.lines()
            .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(2));
}

/// UCX's client/server connection by IP address: UCX's own `io_demo` (Debian's
/// `ucx-utils`), whose server makes a `ucp_listener` on a socket address and whose
/// client makes its endpoint from the server's (`UCP_EP_PARAM_FIELD_SOCK_ADDR`), with
/// UCX's connection manager restricted to `rdmacm` (`UCX_SOCKADDR_TLS_PRIORITY`):
/// librdmacm on `/dev/infiniband/rdma_cm` of each process (the CM on QP1 of its
/// NIC; the trace shows the rdma_cm commands), UCX's wire-up in the CM's private
/// data, then `iters` IO requests (reads and writes of 1 to 64 KiB, `-q`: every
/// payload and transaction checked) over `tls`. The server serves until killed; the
/// client must connect, run every iteration and exit 0.
fn io_demo_over_rdmacm(tls: &str, iters: u32, hosts: (u8, u8)) {
    if !have("io_demo") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (sip, cip) = (net::host(hosts.0), net::host(hosts.1));
    let (ss, cs) = (sip.to_string(), cip.to_string());
    let envs = [
        ("UCX_SOCKADDR_TLS_PRIORITY", "rdmacm"),
        ("UCX_TLS", tls),
        ("UCX_NET_DEVICES", DEV),
        ("FERROVERBS_MIN_ACK_TIMEOUT", "20"),
        ("FERROVERBS_UAPI_TRACE", "1"),
    ];
    let port = "13337";
    let server = ["io_demo", "-p", port, "-q", "-d", "1024:65536"];
    let s = uapi_support::Proc::spawn("io_demo server", &format!("sim:{ss}"), &server, &envs);
    wait_for_nic(sip);
    let its = iters.to_string();
    // Refused while the server is not yet listening: retried every second.
    let client = [
        "io_demo",
        "-p",
        port,
        "-q",
        "-d",
        "1024:65536",
        "-o",
        "read,write",
        "-i",
        &its,
        "-c",
        "60",
        "-y",
        "1",
        "-I",
        &cs,
        &ss,
    ];
    let c = uapi_support::Proc::spawn("io_demo client", &format!("sim:{cs}"), &client, &envs);
    let (cst, co, ce) = c.finish(LIMIT);
    let (_, so, se) = s.finish(Duration::from_secs(2));
    let strip = |t: &str| {
        t.lines()
            .filter(|l| !l.starts_with("uapi: ") || l.contains("rdma_cm"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    println!(
        "--- io_demo server ---\n{so}{}\n--- client ---\n{co}{}",
        strip(&se),
        strip(&ce)
    );
    assert!(
        cst.is_some_and(|x| x.success()),
        "io_demo client: {cst:?}\n{co}\n{}",
        strip(&ce)
    );
    let all = format!("{co}{ce}");
    assert!(all.contains("Connected to server [0]"), "{all}");
    assert!(all.contains("Client exit with status 'OK'"), "{all}");
    // Both went through the rdma_cm device: the client's CONNECT, the server's
    // LISTEN and ACCEPT (rdma_user_cm.h command numbers 6, 7, 8).
    let cmd = |t: &str, n: u32| t.contains(&format!("command {n} "));
    assert!(cmd(&ce, 6), "no rdma_cm CONNECT by the client");
    assert!(
        cmd(&se, 7) && cmd(&se, 8),
        "no rdma_cm LISTEN and ACCEPT by the server"
    );
}

#[test]
fn io_demo_connects_by_ip_through_rdmacm_over_rc_verbs() {
    io_demo_over_rdmacm("rc_verbs", 200, (181, 182));
}

#[test]
fn io_demo_connects_by_ip_through_rdmacm_over_rc_mlx5() {
    io_demo_over_rdmacm("rc_mlx5", 200, (183, 184));
}

// UCX_MEM_MMAP_HOOK_MODE=reloc (UCM patches the relocation tables instead of the
// functions' code). In that mode UCM's malloc hooks (UCX_MEM_MALLOC_RELOC=y, the
// default) put UCM's own heap (`ucm_dlmalloc`) in place of glibc's malloc; when the
// registration cache asks for memory events, that heap grows by UCM's `sbrk`, whose
// original UCM looks up at the first call with `dlsym(RTLD_NEXT, "sbrk")` from
// libucm. RTLD_NEXT searches only the objects after libucm, and libc.so.6 comes
// before it (the program needs libucs and libc; libucm is libucs's dependency), so
// the lookup fails; glibc's `_dlerror_run` allocates the error's record with malloc,
// which is UCM's heap again, whose lock this thread holds: it spins in
// `sched_yield` for ever. Nothing of ferroverbs is involved: `ucm_reloc.c` hangs so
// with no RDMA device and no preload. Two ways out, both run below: libucm first in
// the search order (`LD_PRELOAD=libucm.so.0`; the lookup then finds libc's `sbrk` and
// the memory events work), or no UCM malloc (`UCX_MEM_MALLOC_RELOC=n`; UCM then
// refuses the memory events, UCS_ERR_UNSUPPORTED, and UCX's IB memory domain runs
// without its registration cache).

/// `uapi/tests/c/ucm_reloc.c` built against the installed libucs (no headers
/// needed); `None` without gcc or libucs.
fn ucm_reloc_program() -> Option<std::path::PathBuf> {
    let libucs = "/usr/lib/x86_64-linux-gnu/libucs.so.0";
    let gcc = std::process::Command::new("gcc").arg("--version").output();
    if !std::path::Path::new(libucs).exists() || gcc.is_err() {
        println!("gcc or {libucs} missing: skipped");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("ferroverbs-ucm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("ucm_reloc");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("uapi/tests/c/ucm_reloc.c");
    let o = std::process::Command::new("gcc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(["-Wl,--no-as-needed", libucs])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    Some(exe)
}

/// Runs `exe` (no ferroverbs) with `envs` for at most `limit`: its stdout, or `None`
/// if it had to be killed.
fn run_bounded(exe: &std::path::Path, envs: &[(&str, &str)], limit: Duration) -> Option<String> {
    let mut c = std::process::Command::new(exe);
    c.stdout(std::process::Stdio::piped());
    for (k, v) in envs {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    let start = std::time::Instant::now();
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            let mut out = String::new();
            use std::io::Read;
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            return Some(out);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ucm_reloc_mode_hangs_by_itself_when_libc_precedes_libucm() {
    let Some(exe) = ucm_reloc_program() else {
        return;
    };
    let limit = Duration::from_secs(10);
    let reloc = ("UCX_MEM_MMAP_HOOK_MODE", "reloc");
    // The default (bistro) mode: the events are installed.
    let out = run_bounded(&exe, &[], limit).expect("bistro mode finishes");
    assert!(out.contains("ucm_set_event_handler: 0\ndone"), "{out}");
    // reloc: never returns (UCM's heap lock, taken again inside its own sbrk lookup).
    assert_eq!(
        run_bounded(&exe, &[reloc], limit),
        None,
        "reloc mode finished"
    );
    // libucm before libc: the lookup finds libc's sbrk, the events are installed.
    let out = run_bounded(&exe, &[reloc, ("LD_PRELOAD", "libucm.so.0")], limit)
        .expect("reloc mode with libucm preloaded finishes");
    assert!(out.contains("ucm_set_event_handler: 0\ndone"), "{out}");
    // No UCM malloc: the events are refused (UCS_ERR_UNSUPPORTED, -22), no hang.
    let out = run_bounded(&exe, &[reloc, ("UCX_MEM_MALLOC_RELOC", "n")], limit)
        .expect("reloc mode without UCM's malloc finishes");
    assert!(out.contains("ucm_set_event_handler: -22\ndone"), "{out}");
    let _ = std::fs::remove_dir_all(exe.parent().unwrap());
}

#[test]
fn tag_lat_over_rc_mlx5_with_reloc_mmap_hooks() {
    let reloc = ("UCX_MEM_MMAP_HOOK_MODE", "reloc");
    let args = ["-t", "tag_lat"];
    let preload = [reloc, ("LD_PRELOAD", "libucm.so.0")];
    perftest_with("rc_mlx5,ud_mlx5", &args, 500, 185, 10, &preload);
    let no_malloc = [reloc, ("UCX_MEM_MALLOC_RELOC", "n")];
    perftest_with("rc_mlx5,ud_mlx5", &args, 500, 187, 11, &no_malloc);
}

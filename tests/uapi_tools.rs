//! rdma-core's own libibverbs and libmlx5 (Debian 12's `libibverbs1`,
//! `ibverbs-providers`), unmodified, on the simulated ConnectX through the userspace
//! RDMA interface (`ferroverbs run`): the verbs tools of `ibverbs-utils` and
//! perftest, alone and between two processes each with its own simulated NIC.

mod uapi_support;

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

fn pingpong(tool: &str, extra: &[&str], server: u8, client: u8, slot: u16) {
    if !have(tool) {
        return;
    }
    let _s = serial();
    let mut args = vec!["-g", "0", "-n", ITERS, "-c"];
    args.extend_from_slice(extra);
    let (s, c) = uapi_support::pair(tool, &args, &[], server, client, slot, LIMIT);
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
}

#[test]
fn ibv_rc_pingpong_polling() {
    pingpong("ibv_rc_pingpong", &[], 11, 12, 1);
}

#[test]
fn ibv_rc_pingpong_with_completion_events() {
    pingpong("ibv_rc_pingpong", &["-e"], 13, 14, 2);
}

#[test]
fn ibv_rc_pingpong_new_post_send_api() {
    pingpong("ibv_rc_pingpong", &["-N"], 15, 16, 3);
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

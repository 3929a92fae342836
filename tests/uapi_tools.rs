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

//! `ferroverbs devinfo`, run as a user runs it: the documented fields on the embedded
//! simulator, and the VFIO backend's error (with its fix and exit code 3) on a machine
//! without VFIO.

use std::process::{Command, Output};

fn ferroverbs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferroverbs"))
        .args(args)
        .output()
        .expect("the ferroverbs binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The value of `name:` in the listing (the first occurrence).
fn value<'a>(out: &'a str, name: &str) -> Option<&'a str> {
    out.lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(str::trim)
}

#[test]
fn devinfo_prints_the_documented_fields_of_the_simulator() {
    let o = ferroverbs(&["devinfo"]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", text(&o.stderr));
    assert_eq!(value(&out, "hca_id"), Some("sim0"));
    assert_eq!(value(&out, "transport"), Some("InfiniBand (0)"));
    assert_eq!(value(&out, "vendor_id"), Some("0x02c9"));
    assert_eq!(value(&out, "vendor_part_id"), Some("4119"));
    assert_eq!(value(&out, "hw_ver"), Some("0x0"));
    assert_eq!(value(&out, "phys_port_cnt"), Some("1"));
    let fw = value(&out, "fw_ver").unwrap();
    assert_eq!(fw.split('.').count(), 3, "{fw}");
    let guid = value(&out, "node_guid").unwrap();
    assert_eq!(guid.len(), 19, "xxxx:xxxx:xxxx:xxxx: {guid}");
    assert!(value(&out, "sys_image_guid").is_some());
    assert_eq!(value(&out, "port"), Some("1"));
    assert_eq!(value(&out, "state"), Some("PORT_ACTIVE (4)"));
    assert_eq!(value(&out, "max_mtu"), Some("4096 (5)"));
    assert_eq!(value(&out, "active_mtu"), Some("1024 (3)"));
    assert_eq!(value(&out, "link_layer"), Some("Ethernet"));
    assert_eq!(value(&out, "max_qp"), None, "only with -v");
}

#[test]
fn devinfo_verbose_adds_the_limits_and_the_gid_table() {
    let o = ferroverbs(&["devinfo", "--device", "sim", "-v"]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", text(&o.stderr));
    for f in [
        "max_mr_size",
        "page_size_cap",
        "max_qp",
        "max_qp_wr",
        "max_sge",
        "max_sge_rd",
        "max_cq",
        "max_cqe",
        "max_mr",
        "max_pd",
        "max_qp_rd_atom",
        "max_qp_init_rd_atom",
        "max_srq",
        "max_srq_wr",
        "max_srq_sge",
        "max_msg_sz",
        "gid_tbl_len",
    ] {
        assert!(value(&out, f).is_some(), "{f} missing:\n{out}");
    }
    assert_eq!(value(&out, "atomic_cap"), Some("ATOMIC_HCA (1)"));
    let max_qp: u64 = value(&out, "max_qp").unwrap().parse().unwrap();
    assert!(max_qp.is_power_of_two());
    assert!(out.contains("GID[  0]:\t\tfe80::"), "{out}");
    assert!(
        out.contains("GID[  1]:\t\t::ffff:192.0.2.1, RoCE v2"),
        "{out}"
    );
}

#[test]
fn devinfo_of_one_port_and_of_a_missing_port() {
    let o = ferroverbs(&["devinfo", "-i", "1"]);
    assert_eq!(o.status.code(), Some(0));
    let o = ferroverbs(&["devinfo", "-i", "2"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(text(&o.stderr).contains("no port 2"), "{}", text(&o.stderr));
}

#[test]
fn devinfo_on_vfio_without_vfio_names_the_fix_and_exits_3() {
    if std::path::Path::new("/dev/vfio/vfio").exists() {
        eprintln!("skipped: this machine has VFIO");
        return;
    }
    let o = ferroverbs(&["devinfo", "--device", "vfio:0000:3b:00.0"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(o.stdout.is_empty());
    assert!(err.contains("cannot open vfio:0000:3b:00.0"), "{err}");
    assert!(err.contains("modprobe vfio-pci"), "the fix is named: {err}");
}

#[test]
fn a_malformed_device_is_a_usage_error() {
    for dev in ["mlx5_0", "vfio:3b:00", "vfio:0000:3b:20.0"] {
        let o = ferroverbs(&["devinfo", "-d", dev]);
        assert_eq!(o.status.code(), Some(2), "{dev}");
        assert!(text(&o.stderr).contains("invalid value"), "{dev}");
    }
}

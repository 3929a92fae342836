//! The VFIO ioctl request numbers, structure sizes, member offsets and constants the
//! backend uses, against the kernel UAPI header: a small C program compiled with gcc
//! against the installed `linux/vfio.h` prints them, and they must agree with
//! `ferroverbs::vfio::ioctl`. Skipped (with a note) when gcc or the header is absent;
//! the numbers of reference §6.3 are checked unconditionally by the unit tests of
//! `driver/src/vfio/ioctl.rs` and again here.

// Requests are `c_ulong`, 32 bits on some targets.
#![allow(clippy::unnecessary_cast)]

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use ferroverbs::vfio::ioctl::{CONSTANTS, MEMBER_OFFSETS, REQUESTS, STRUCT_SIZES};

const HEADER: &str = "/usr/include/linux/vfio.h";

fn c_program() -> String {
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <linux/vfio.h>\nint main(void) {\n",
    );
    for (name, _) in REQUESTS {
        c += &format!("  printf(\"req {name} %lu\\n\", (unsigned long)({name}));\n");
    }
    for (name, _) in CONSTANTS {
        c += &format!("  printf(\"const {name} %lu\\n\", (unsigned long)({name}));\n");
    }
    for (name, _) in STRUCT_SIZES {
        c += &format!("  printf(\"size {name} %zu\\n\", sizeof(struct {name}));\n");
    }
    for (s, m, _) in MEMBER_OFFSETS {
        c += &format!("  printf(\"member {s}.{m} %zu\\n\", offsetof(struct {s}, {m}));\n");
    }
    c += "  return 0;\n}\n";
    c
}

#[test]
fn ioctls_and_structures_match_the_installed_header() {
    if !Path::new(HEADER).exists() {
        println!("note: {HEADER} absent (install linux-libc-dev); UAPI comparison skipped");
        return;
    }
    if Command::new("gcc").arg("--version").output().is_err() {
        println!("note: gcc absent; UAPI comparison skipped");
        return;
    }
    let dir = std::env::temp_dir().join(format!("ferroverbs-vfio-uapi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("uapi.c");
    let exe = dir.join("uapi");
    std::fs::write(&src, c_program()).unwrap();
    let out = Command::new("gcc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gcc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    std::fs::remove_dir_all(&dir).unwrap();
    let text = String::from_utf8(run.stdout).unwrap();
    let c: HashMap<String, u64> = text
        .lines()
        .map(|l| {
            let mut it = l.split_whitespace();
            let kind = it.next().unwrap();
            let name = it.next().unwrap();
            let v = it.next().unwrap().parse().unwrap();
            (format!("{kind} {name}"), v)
        })
        .collect();

    let mut mismatches = Vec::new();
    for (name, v) in REQUESTS {
        let want = c[&format!("req {name}")];
        if *v as u64 != want {
            mismatches.push(format!("{name}: ours {v:#x}, header {want:#x}"));
        }
    }
    for (name, v) in CONSTANTS {
        let want = c[&format!("const {name}")];
        if *v != want {
            mismatches.push(format!("{name}: ours {v}, header {want}"));
        }
    }
    for (name, v) in STRUCT_SIZES {
        let want = c[&format!("size {name}")] as usize;
        // vfio_device_info grew a trailing `pad` after Linux 6.1 (20 -> 24 bytes); the
        // kernel copies only up to `cap_offset`, so the longer structure is compatible.
        let ok = *v == want || (*name == "vfio_device_info" && want == 20 && *v == 24);
        if !ok {
            mismatches.push(format!("sizeof({name}): ours {v}, header {want}"));
        }
    }
    for (s, m, v) in MEMBER_OFFSETS {
        let want = c[&format!("member {s}.{m}")] as usize;
        if *v != want {
            mismatches.push(format!("offsetof({s}, {m}): ours {v}, header {want}"));
        }
    }
    assert!(
        mismatches.is_empty(),
        "UAPI mismatches:\n{}",
        mismatches.join("\n")
    );
    println!(
        "checked {} requests, {} constants, {} sizes, {} members against {HEADER}",
        REQUESTS.len(),
        CONSTANTS.len(),
        STRUCT_SIZES.len(),
        MEMBER_OFFSETS.len()
    );
}

/// Reference §6.3, always.
#[test]
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn request_numbers_of_the_reference() {
    let r: HashMap<&str, u64> = REQUESTS.iter().map(|(n, v)| (*n, *v as u64)).collect();
    assert_eq!(r["VFIO_GET_API_VERSION"], 0x3b64);
    assert_eq!(r["VFIO_CHECK_EXTENSION"], 0x3b65);
    assert_eq!(r["VFIO_SET_IOMMU"], 0x3b66);
    assert_eq!(r["VFIO_GROUP_GET_STATUS"], 0x3b67);
    assert_eq!(r["VFIO_GROUP_SET_CONTAINER"], 0x3b68);
    assert_eq!(r["VFIO_GROUP_GET_DEVICE_FD"], 0x3b6a);
    assert_eq!(r["VFIO_DEVICE_GET_INFO"], 0x3b6b);
    assert_eq!(r["VFIO_DEVICE_GET_REGION_INFO"], 0x3b6c);
    assert_eq!(r["VFIO_DEVICE_GET_IRQ_INFO"], 0x3b6d);
    assert_eq!(r["VFIO_DEVICE_SET_IRQS"], 0x3b6e);
    assert_eq!(r["VFIO_DEVICE_RESET"], 0x3b6f);
    assert_eq!(r["VFIO_IOMMU_GET_INFO"], 0x3b70);
    assert_eq!(r["VFIO_IOMMU_MAP_DMA"], 0x3b71);
    assert_eq!(r["VFIO_IOMMU_UNMAP_DMA"], 0x3b72);
    let k: HashMap<&str, u64> = CONSTANTS.iter().copied().collect();
    assert_eq!(k["VFIO_API_VERSION"], 0);
    assert_eq!(k["VFIO_TYPE1v2_IOMMU"], 3);
    assert_eq!(k["VFIO_GROUP_FLAGS_VIABLE"], 1);
    assert_eq!(k["VFIO_PCI_CONFIG_REGION_INDEX"], 7);
    assert_eq!(k["VFIO_PCI_MSIX_IRQ_INDEX"], 2);
    assert_eq!(
        k["VFIO_IRQ_SET_DATA_EVENTFD"] | k["VFIO_IRQ_SET_ACTION_TRIGGER"],
        0x24
    );
    assert_eq!(k["VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE"], 1);
}

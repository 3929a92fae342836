//! Every struct size and field offset of `abi.rs` (uverbs and mlx5_ib's driver data)
//! and `abi/ucma.rs` (rdma_cm) against the installed Linux UAPI headers
//! (`/usr/include/rdma/ib_user_verbs.h`, `mlx5-abi.h`, `rdma_user_cm.h`), compiled
//! with gcc. Skipped with a notice when gcc or the headers are missing.

use std::path::Path;
use std::process::Command;

type Structs = [(&'static str, usize, &'static [(&'static str, usize)])];

/// Compiles a program that prints `sizeof` and every `offsetof` of `structs` with
/// `headers` included, and compares each with ours; returns the entries checked.
fn check(name: &str, headers: &[&str], structs: &Structs) -> usize {
    let mut c = String::from("#include <stddef.h>\n#include <stdio.h>\n");
    for h in headers {
        c += &format!("#include <{h}>\n");
    }
    c += "int main(void) {\n";
    let mut want = String::new();
    for (s, size, fields) in structs {
        c += &format!("printf(\"{s} %zu\\n\", sizeof(struct {s}));\n");
        want += &format!("{s} {size}\n");
        for (f, off) in *fields {
            c += &format!("printf(\"{s}.{f} %zu\\n\", offsetof(struct {s}, {f}));\n");
            want += &format!("{s}.{f} {off}\n");
        }
    }
    c += "return 0; }\n";
    let dir = std::env::temp_dir().join(format!(
        "ferroverbs-uapi-layout-{name}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("l.c"), dir.join("l"));
    std::fs::write(&src, c).unwrap();
    let o = Command::new("gcc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = Command::new(&exe).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let got = String::from_utf8(out.stdout).unwrap();
    let wrong: Vec<String> = want
        .lines()
        .zip(got.lines())
        .filter(|(w, g)| w != g)
        .map(|(w, g)| format!("ours {w}, the header's {g}"))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_eq!(want.lines().count(), got.lines().count());
    want.lines().count()
}

fn toolchain(header: &str) -> bool {
    let ok = Path::new(header).exists() && Command::new("gcc").arg("--version").output().is_ok();
    if !ok {
        println!("gcc or {header} missing: layout check skipped");
    }
    ok
}

#[test]
fn abi_offsets_and_sizes_match_the_kernel_headers() {
    if !toolchain("/usr/include/rdma/ib_user_verbs.h") {
        return;
    }
    let n = check(
        "uverbs",
        &["rdma/ib_user_verbs.h", "rdma/mlx5-abi.h"],
        ferroverbs_uapi::abi::STRUCTS,
    );
    assert!(n > 300, "{n} entries");
}

#[test]
fn rdma_cm_abi_offsets_and_sizes_match_the_kernel_header() {
    if !toolchain("/usr/include/rdma/rdma_user_cm.h") {
        return;
    }
    let n = check(
        "ucma",
        &["rdma/rdma_user_cm.h"],
        ferroverbs_uapi::abi::ucma::STRUCTS,
    );
    assert!(n > 150, "{n} entries");
}

#[test]
fn ioctl_abi_layouts_and_ids_match_the_kernel_headers() {
    if !toolchain("/usr/include/rdma/ib_user_ioctl_cmds.h") {
        return;
    }
    let headers = [
        "rdma/rdma_user_ioctl_cmds.h",
        "rdma/ib_user_ioctl_cmds.h",
        "rdma/ib_user_ioctl_verbs.h",
        "rdma/mlx5_user_ioctl_cmds.h",
        "rdma/mlx5_user_ioctl_verbs.h",
    ];
    let n = check("ioctl", &headers, ferroverbs_uapi::abi::ioctl::STRUCTS);
    assert!(n >= 15, "{n} entries");
    // The ids: a program printing each with the headers included.
    let mut c = String::from("#include <stdio.h>\n");
    for h in headers {
        c += &format!("#include <{h}>\n");
    }
    c += "int main(void) {\n";
    let mut want = String::new();
    for (name, v) in ferroverbs_uapi::abi::ioctl::IDS {
        c += &format!("printf(\"{name} %lu\\n\", (unsigned long)({name}));\n");
        want += &format!("{name} {v}\n");
    }
    c += "return 0; }\n";
    let dir = std::env::temp_dir().join(format!("ferroverbs-uapi-ids-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("i.c"), dir.join("i"));
    std::fs::write(&src, c).unwrap();
    let o = Command::new("gcc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = String::from_utf8(Command::new(&exe).output().unwrap().stdout).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(got, want);
}

#[test]
fn poll_assist_offsets_match_libibverbs_header() {
    // The busy-poll assistance writes `ibv_context.ops.poll_cq` of the context it
    // reads from `ibv_cq.context`, and an extended CQ's `ibv_cq_ex.start_poll`
    // (rdma-core's public ABI, `infiniband/verbs.h`).
    if !toolchain("/usr/include/infiniband/verbs.h") {
        return;
    }
    use ferroverbs_uapi::poll_assist::{CONTEXT_OPS_POLL_CQ, CQ_CONTEXT, CQ_EX_START_POLL};
    let n = check(
        "libibverbs",
        &["infiniband/verbs.h"],
        &[
            (
                "ibv_context",
                328,
                &[("ops.poll_cq", CONTEXT_OPS_POLL_CQ as usize)],
            ),
            ("ibv_cq", 128, &[("context", CQ_CONTEXT as usize)]),
            (
                "ibv_cq_ex",
                288,
                &[
                    ("context", CQ_CONTEXT as usize),
                    ("start_poll", CQ_EX_START_POLL as usize),
                ],
            ),
        ],
    );
    assert_eq!(n, 7);
}

//! Malformed uverbs commands on `/dev/infiniband/uverbs0` under `ferroverbs run`: a C
//! program (`uapi/tests/c/badcmd.c`, compiled here with gcc against the installed
//! kernel headers) writes raw commands (short and oversized buffers, bad headers,
//! unknown and unimplemented commands, wrong handles and other objects' handles,
//! unmapped buffers, bad mmap offsets, event file misuse) and checks each errno
//! against Linux's; the file stays usable afterwards. Skipped with a notice without
//! gcc or the headers.

mod uapi_support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

#[test]
fn malformed_commands_get_linuxs_errnos() {
    if !Path::new("/usr/include/rdma/mlx5-abi.h").exists()
        || Command::new("gcc").arg("--version").output().is_err()
    {
        println!("gcc or /usr/include/rdma missing: skipped");
        return;
    }
    let dir = std::env::temp_dir().join(format!("ferroverbs-badcmd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("badcmd");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("uapi/tests/c/badcmd.c");
    let o = Command::new("gcc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let p = uapi_support::Proc::spawn("badcmd", "sim", &[exe.to_str().unwrap()], &[]);
    let (st, out, err) = p.finish(Duration::from_secs(120));
    let _ = std::fs::remove_dir_all(&dir);
    println!("{out}{err}");
    assert!(st.is_some_and(|s| s.success()), "{st:?}\n{out}\n{err}");
    let passed = out.lines().filter(|l| l.starts_with("PASS ")).count();
    assert!(!out.contains("FAIL"), "{out}");
    assert!(out.contains("\n0 failures"), "{out}");
    assert!(passed >= 60, "{passed} cases passed:\n{out}");
}

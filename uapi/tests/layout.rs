//! Every struct size and field offset of `abi.rs` against the installed Linux UAPI
//! headers (`/usr/include/rdma/ib_user_verbs.h`, `mlx5-abi.h`), compiled with gcc.
//! Skipped with a notice when gcc or the headers are missing.

use std::path::Path;
use std::process::Command;

use ferroverbs_uapi::abi::STRUCTS;

#[test]
fn abi_offsets_and_sizes_match_the_kernel_headers() {
    if !Path::new("/usr/include/rdma/ib_user_verbs.h").exists()
        || Command::new("gcc").arg("--version").output().is_err()
    {
        println!("gcc or /usr/include/rdma missing: layout check skipped");
        return;
    }
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <rdma/ib_user_verbs.h>\n\
         #include <rdma/mlx5-abi.h>\nint main(void) {\n",
    );
    for (name, _, fields) in STRUCTS {
        c += &format!("printf(\"{name} %zu\\n\", sizeof(struct {name}));\n");
        for (f, _) in *fields {
            c += &format!("printf(\"{name}.{f} %zu\\n\", offsetof(struct {name}, {f}));\n");
        }
    }
    c += "return 0; }\n";
    let dir = std::env::temp_dir().join(format!("ferroverbs-uapi-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("l.c");
    let exe = dir.join("l");
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
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (name, size, fields) in STRUCTS {
        let want = format!("{name} {size}");
        let got = lines.next().unwrap_or("");
        if got != want {
            wrong.push(format!("sizeof: ours {want}, the header's {got}"));
        }
        for (f, off) in *fields {
            let want = format!("{name}.{f} {off}");
            let got = lines.next().unwrap_or("");
            if got != want {
                wrong.push(format!("offsetof: ours {want}, the header's {got}"));
            }
            checked += 1;
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(checked > 300, "{checked} fields");
}

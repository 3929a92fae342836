//! Every struct size and field offset of the rdma_cm ABI (`abi::ucma`) against the
//! installed Linux UAPI header `rdma/rdma_user_cm.h`, compiled with gcc. Skipped with a
//! notice when gcc or the header is missing.

use std::path::Path;
use std::process::Command;

use ferroverbs_uapi::abi::ucma::STRUCTS;

#[test]
fn rdma_cm_abi_offsets_and_sizes_match_the_kernel_header() {
    if !Path::new("/usr/include/rdma/rdma_user_cm.h").exists()
        || Command::new("gcc").arg("--version").output().is_err()
    {
        println!("gcc or /usr/include/rdma/rdma_user_cm.h missing: layout check skipped");
        return;
    }
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <rdma/rdma_user_cm.h>\n\
         int main(void) {\n",
    );
    let mut want = String::new();
    for (name, size, fields) in STRUCTS {
        c += &format!("printf(\"{name} %zu\\n\", sizeof(struct {name}));\n");
        want += &format!("{name} {size}\n");
        for (f, off) in *fields {
            c += &format!("printf(\"{name}.{f} %zu\\n\", offsetof(struct {name}, {f}));\n");
            want += &format!("{name}.{f} {off}\n");
        }
    }
    c += "return 0; }\n";
    let dir = std::env::temp_dir().join(format!("ferroverbs-ucma-layout-{}", std::process::id()));
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
    assert!(
        want.lines().count() > 150,
        "{} entries",
        want.lines().count()
    );
}

//! rdma-core's pyverbs test suite as Debian's `python3-pyverbs` installs it: where it
//! is, and a scratch copy with its gzipped files unpacked. Included with `#[path]` by
//! the suite's runners on the uAPI layer (`tests/uapi_pyverbs.rs`) and on the drop-in
//! (`ibverbs/tests/pyverbs.rs`).

use std::path::Path;

/// The installed suite (partly gzipped).
pub const SUITE: &str = "/usr/share/doc/rdma-core/tests";
/// The installed pyverbs package.
pub const PYVERBS: &str = "/usr/lib/python3/dist-packages/pyverbs";

/// Copies the installed suite into `dst`, unpacking the gzipped files.
pub fn unpack(dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(SUITE).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        if let Some(stem) = name.strip_suffix(".gz") {
            let out = std::process::Command::new("gzip")
                .arg("-dc")
                .arg(&p)
                .output()
                .expect("gzip");
            assert!(out.status.success(), "gzip -dc {}", p.display());
            std::fs::write(dst.join(stem), out.stdout).unwrap();
        } else if p.is_file() {
            std::fs::copy(&p, dst.join(&name)).unwrap();
        }
    }
}

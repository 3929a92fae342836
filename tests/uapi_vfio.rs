//! `ferroverbs run --device vfio:BDF -- PROGRAM` on a machine without VFIO: the run
//! opens the device before starting the program and stops with the VFIO set-up
//! error that names the fix (the one `ferroverbs devinfo -d vfio:BDF` gives), exit
//! code 3, and the program never runs.

use std::process::Command;

#[test]
fn run_on_vfio_without_vfio_names_the_fix_and_exits_3() {
    if std::path::Path::new("/dev/vfio/vfio").exists() {
        eprintln!("skipped: this machine has VFIO");
        return;
    }
    let marker = std::env::temp_dir().join(format!("ferroverbs-uapi-vfio-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let o = Command::new(env!("CARGO_BIN_EXE_ferroverbs"))
        .args(["run", "--device", "vfio:0000:3b:00.0", "--", "touch"])
        .arg(&marker)
        .output()
        .expect("the ferroverbs binary runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(o.stdout.is_empty());
    assert!(err.contains("cannot open vfio:0000:3b:00.0"), "{err}");
    assert!(err.contains("modprobe vfio-pci"), "the fix is named: {err}");
    assert!(!err.contains("simulator only"), "{err}");
    assert!(!marker.exists(), "the program must not start");
}

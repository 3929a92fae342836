//! The built library as the dynamic loader sees it (`readelf`): soname
//! `libibverbs.so.1`, every symbol of `libibverbs.map` defined at its exact version
//! node (`ibv_reg_mr@@IBVERBS_1.1`), nothing else exported, the version nodes chained
//! (when the Debian tools are installed) every
//! `IBVERBS_*` import of the tools and of the libraries perftest loads (libmlx5,
//! libefa, librdmacm) satisfied at the version they name.
//!
//! `readelf` comes with binutils (gcc's dependency); without it the tests skip with a
//! notice.

mod support;

use std::collections::BTreeMap;
use std::process::Command;

const NODES: [&str; 13] = [
    "IBVERBS_1.0",
    "IBVERBS_1.1",
    "IBVERBS_1.5",
    "IBVERBS_1.6",
    "IBVERBS_1.7",
    "IBVERBS_1.8",
    "IBVERBS_1.9",
    "IBVERBS_1.10",
    "IBVERBS_1.11",
    "IBVERBS_1.12",
    "IBVERBS_1.13",
    "IBVERBS_1.14",
    "IBVERBS_PRIVATE_34",
];

fn readelf(args: &[&str], file: &std::path::Path) -> Option<String> {
    let o = Command::new("readelf").args(args).arg(file).output().ok()?;
    assert!(o.status.success(), "readelf {args:?} failed");
    Some(String::from_utf8(o.stdout).unwrap())
}

/// symbol -> version node, from the map file.
fn map() -> BTreeMap<String, String> {
    let text = include_str!("../libibverbs.map");
    let mut node = String::new();
    let mut m = BTreeMap::new();
    for l in text.lines().map(str::trim) {
        if let Some(n) = l.strip_suffix(" {") {
            node = n.to_string();
        } else if l.ends_with(';') && !l.contains(' ') && !l.starts_with('}') {
            m.insert(l.trim_end_matches(';').to_string(), node.clone());
        }
    }
    m
}

/// (name, version, defined) of the dynamic symbols readelf lists.
fn dyn_syms(text: &str) -> Vec<(String, String, bool)> {
    text.lines()
        .filter_map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            // Num: Value Size Type Bind Vis Ndx Name
            if c.len() < 8 || c[0].trim_end_matches(':').parse::<u32>().is_err() {
                return None;
            }
            let defined = c[6] != "UND";
            let name = c[7];
            let (n, v) = if let Some((n, v)) = name.split_once("@@") {
                (n, v)
            } else if let Some((n, v)) = name.split_once('@') {
                (n, v)
            } else {
                (name, "")
            };
            Some((n.to_string(), v.to_string(), defined))
        })
        .collect()
}

#[test]
fn soname_and_versions() {
    let lib = support::built_library();
    let Some(d) = readelf(&["-d", "-W"], &lib) else {
        println!("SKIPPED: readelf (binutils) not installed");
        return;
    };
    assert!(d.contains("Library soname: [libibverbs.so.1]"), "{d}");
    assert!(d.contains("BIND_NOW") || d.contains("NOW"), "{d}");

    let syms = readelf(&["--dyn-syms", "-W"], &lib).unwrap();
    let m = map();
    assert!(m.len() >= 126, "{} symbols in the map", m.len());
    let defined: BTreeMap<String, String> = dyn_syms(&syms)
        .into_iter()
        .filter(|(_, _, d)| *d)
        .filter(|(n, _, _)| !n.is_empty())
        .map(|(n, v, _)| (n, v))
        .collect();
    // Exactly the map's symbols are exported, each at its node (readelf prints the
    // default version as `name@@NODE`).
    let want = m;
    // Version nodes may appear as absolute symbols named after themselves.
    let got: BTreeMap<String, String> = defined
        .into_iter()
        .filter(|(n, _)| !NODES.contains(&n.as_str()))
        .collect();
    assert_eq!(got, want, "exported symbols differ from libibverbs.map");
    assert!(syms.contains("ibv_reg_mr@@IBVERBS_1.1"), "{syms}");
    assert!(
        syms.contains("ibv_query_gid_type@@IBVERBS_PRIVATE_34"),
        "{syms}"
    );
    assert!(syms.contains("verbs_allow_disassociate_destroy@@IBVERBS_PRIVATE_34"));

    // The version definitions: every node rdma-core v44 defines. (rust-lld records no
    // parent chain in `.gnu.version_d`, where GNU ld would; the dynamic loader does not
    // use it: a reference binds by node name.)
    let v = readelf(&["-V", "-W"], &lib).unwrap();
    let vd = v
        .split("Version definition section")
        .nth(1)
        .expect("a version definition section");
    let vd = vd.split("Version needs section").next().unwrap();
    for node in NODES {
        let named = format!("Name: {node}");
        assert!(
            vd.lines().any(|l| l.trim_end().ends_with(&named)),
            "node {node} missing:\n{vd}"
        );
    }
    assert!(
        vd.contains("Flags: BASE") && vd.contains("Name: libibverbs.so.1"),
        "{vd}"
    );
}

#[test]
fn every_import_of_the_tools_is_exported_at_its_version() {
    let lib = support::built_library();
    let Some(ours) = readelf(&["--dyn-syms", "-W"], &lib) else {
        println!("SKIPPED: readelf (binutils) not installed");
        return;
    };
    let ours: BTreeMap<String, String> = dyn_syms(&ours)
        .into_iter()
        .filter(|(_, _, d)| *d)
        .map(|(n, v, _)| (n, v))
        .collect();
    let mut files = vec![];
    for t in [
        "ibv_devices",
        "ibv_devinfo",
        "ibv_rc_pingpong",
        "ibv_uc_pingpong",
        "ibv_ud_pingpong",
        "ibv_srq_pingpong",
        "ibv_xsrq_pingpong",
        "ibv_asyncwatch",
        "ib_send_lat",
        "ib_send_bw",
        "ib_write_lat",
        "ib_write_bw",
        "ib_read_lat",
        "ib_read_bw",
        "ib_atomic_lat",
        "ib_atomic_bw",
    ] {
        files.push(std::path::PathBuf::from("/usr/bin").join(t));
    }
    for l in ["libmlx5.so.1", "libefa.so.1", "librdmacm.so.1"] {
        files.push(std::path::PathBuf::from("/usr/lib/x86_64-linux-gnu").join(l));
    }
    let present: Vec<_> = files.iter().filter(|f| f.exists()).collect();
    if present.is_empty() {
        assert_ne!(
            std::env::var(support::REQUIRE_ENV).as_deref(),
            Ok("1"),
            "no verbs tool installed"
        );
        println!("SKIPPED: ibverbs-utils / perftest not installed");
        return;
    }
    let mut checked = 0;
    for f in present {
        let t = readelf(&["--dyn-syms", "-W"], f).unwrap();
        for (n, v, defined) in dyn_syms(&t) {
            if defined || !v.starts_with("IBVERBS_") {
                continue;
            }
            let v = v.split_whitespace().next().unwrap().to_string();
            assert_eq!(
                ours.get(&n),
                Some(&v),
                "{} imports {n}@{v}; the library does not export it there",
                f.display()
            );
            checked += 1;
        }
    }
    assert!(checked > 100, "only {checked} imports checked");
}

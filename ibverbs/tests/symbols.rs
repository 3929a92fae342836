//! The built library as the dynamic loader sees it (`readelf`): soname
//! `libibverbs.so.1`, every symbol of `libibverbs.map` defined at its exact version
//! node (`ibv_reg_mr@@IBVERBS_1.1`), nothing else exported, the version nodes chained;
//! its whole exported symbol@version set equal to the installed rdma-core
//! `libibverbs.so.1`'s (defaults `@@` and compatibility versions `@` alike, so that a
//! program or library linked with immediate binding, such as pyverbs or libfabric, finds
//! every symbol it may import); and (when the Debian tools are installed) every
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

/// One dynamic symbol as readelf lists it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Sym {
    name: String,
    /// The version node, "" for none.
    version: String,
    /// `name@@NODE` (the default version a new link binds to) rather than `name@NODE`.
    default: bool,
    defined: bool,
}

/// The dynamic symbols readelf lists.
fn dyn_syms(text: &str) -> Vec<Sym> {
    text.lines()
        .filter_map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            // Num: Value Size Type Bind Vis Ndx Name
            if c.len() < 8 || c[0].trim_end_matches(':').parse::<u32>().is_err() {
                return None;
            }
            let defined = c[6] != "UND";
            let name = c[7];
            let (n, v, default) = if let Some((n, v)) = name.split_once("@@") {
                (n, v, true)
            } else if let Some((n, v)) = name.split_once('@') {
                (n, v, false)
            } else {
                (name, "", true)
            };
            Some(Sym {
                name: n.to_string(),
                version: v.to_string(),
                default,
                defined,
            })
        })
        .collect()
}

/// The defined, versioned symbols of a library as `name@NODE` / `name@@NODE` (the
/// version nodes' own absolute symbols left out).
fn exported_set(text: &str) -> std::collections::BTreeSet<String> {
    dyn_syms(text)
        .into_iter()
        .filter(|s| s.defined && !s.name.is_empty() && !NODES.contains(&s.name.as_str()))
        .map(|s| {
            let at = if s.default { "@@" } else { "@" };
            format!("{}{at}{}", s.name, s.version)
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
        .filter(|s| s.defined && s.default && !s.name.is_empty())
        .map(|s| (s.name, s.version))
        .collect();
    // Exactly the map's symbols are exported at their default version, each at its
    // node (readelf prints the default version as `name@@NODE`).
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

/// The `*.so` files under `dir` (none if it does not exist).
fn shared_objects(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(shared_objects(&p));
        } else if p.extension().is_some_and(|x| x == "so") {
            out.push(p);
        }
    }
    out
}

#[test]
fn every_import_of_the_tools_is_exported_at_its_version() {
    let lib = support::built_library();
    let Some(ours) = readelf(&["--dyn-syms", "-W"], &lib) else {
        println!("SKIPPED: readelf (binutils) not installed");
        return;
    };
    let ours: std::collections::BTreeSet<(String, String)> = dyn_syms(&ours)
        .into_iter()
        .filter(|s| s.defined)
        .map(|s| (s.name, s.version))
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
    // pyverbs (python3-pyverbs), when installed: its extension modules are linked with
    // immediate binding and import the import verbs, dma-buf registration and more.
    files.extend(shared_objects(std::path::Path::new(
        "/usr/lib/python3/dist-packages/pyverbs",
    )));
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
        for s in dyn_syms(&t) {
            let (n, v) = (s.name, s.version);
            if s.defined || !v.starts_with("IBVERBS_") {
                continue;
            }
            let v = v.split_whitespace().next().unwrap().to_string();
            assert!(
                ours.contains(&(n.clone(), v.clone())),
                "{} imports {n}@{v}; the library does not export it there",
                f.display()
            );
            checked += 1;
        }
    }
    assert!(checked > 100, "only {checked} imports checked");
}

/// The installed rdma-core library (`libibverbs1`, a dependency of `ibverbs-utils`).
const SYSTEM_LIBIBVERBS: &str = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1";

#[test]
fn exports_exactly_the_symbol_versions_of_the_system_library() {
    let lib = support::built_library();
    let Some(ours) = readelf(&["--dyn-syms", "-W"], &lib) else {
        println!("SKIPPED: readelf (binutils) not installed");
        return;
    };
    let system = std::path::Path::new(SYSTEM_LIBIBVERBS);
    if !system.exists() {
        assert_ne!(
            std::env::var(support::REQUIRE_ENV).as_deref(),
            Ok("1"),
            "{SYSTEM_LIBIBVERBS} (libibverbs1) not installed"
        );
        println!("SKIPPED: {SYSTEM_LIBIBVERBS} not installed");
        return;
    }
    let theirs = exported_set(&readelf(&["--dyn-syms", "-W"], system).unwrap());
    let ours = exported_set(&ours);
    // rdma-core v44 exports 180 (names at their default and compatibility versions).
    assert!(
        theirs.len() >= 180,
        "{} symbols in {SYSTEM_LIBIBVERBS}",
        theirs.len()
    );
    let missing: Vec<_> = theirs.difference(&ours).collect();
    let extra: Vec<_> = ours.difference(&theirs).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "the drop-in does not export (but {SYSTEM_LIBIBVERBS} does): {missing:?}\n\
         the drop-in exports (but {SYSTEM_LIBIBVERBS} does not): {extra:?}"
    );
    // Both forms of a symbol with a compatibility version.
    assert!(ours.contains("ibv_alloc_pd@IBVERBS_1.0"));
    assert!(ours.contains("ibv_alloc_pd@@IBVERBS_1.1"));
    assert!(ours.contains("ibv_reg_dmabuf_mr@@IBVERBS_1.12"));
}

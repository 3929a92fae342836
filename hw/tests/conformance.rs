//! Conformance of every layout, C structure and constant the crate mirrors with the
//! fixtures generated from Debian's headers (`hw/conformance/*.txt`, written by
//! `tools/conformance/gen.py`; see `hw/conformance/README.md`).
//!
//! The fixtures are compiled in with `include_str!`, so this test needs no header
//! package. `.ci/run` separately regenerates them from the installed headers and fails
//! on any difference, so a layout here cannot drift from the headers unnoticed.
//!
//! Rules:
//! * every registered PRM [`Layout`] must exist in `mlx5_ifc.txt` with the same size,
//!   and every one of its fields with the same bit offset and width;
//! * every registered [`CStruct`] must exist in the fixture of its [`Header`] with the
//!   same size, and every member with the same offset and size;
//! * every registered [`Constant`] must exist in the fixture of its header with the
//!   same value;
//! * an entry without a fixture counterpart is a failure;
//! * an item listed in [`conformance::DEVIATIONS`] is reported with the source the
//!   project follows instead; a deviation that names nothing which differs fails.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::OnceLock;

use ferroverbs_hw::conformance::{self, CMember, CStruct, Constant, Deviation, Header};
use ferroverbs_hw::{Field, Layout};

// ---------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------

const MLX5_IFC_TXT: &str = include_str!("../conformance/mlx5_ifc.txt");
const MLX5DV_TXT: &str = include_str!("../conformance/mlx5dv.txt");
const DEVICE_TXT: &str = include_str!("../conformance/device.txt");
const QP_TXT: &str = include_str!("../conformance/qp.txt");
const CQ_TXT: &str = include_str!("../conformance/cq.txt");
const DOORBELL_TXT: &str = include_str!("../conformance/doorbell.txt");

/// Every header, in the order reports list them.
const HEADERS: [Header; 6] = [
    Header::Mlx5Ifc,
    Header::Device,
    Header::Qp,
    Header::Cq,
    Header::Doorbell,
    Header::Mlx5Dv,
];

/// The header's file name, as messages print it.
fn header_file(h: Header) -> &'static str {
    match h {
        Header::Mlx5Dv => "mlx5dv.h",
        Header::Mlx5Ifc => "mlx5_ifc.h",
        Header::Device => "device.h",
        Header::Qp => "qp.h",
        Header::Cq => "cq.h",
        Header::Doorbell => "doorbell.h",
    }
}

/// One parsed fixture file.
#[derive(Default, Debug)]
struct Fixture {
    /// `layout` lines: PRM structure -> size in bits.
    layouts: BTreeMap<String, u32>,
    /// `field` lines: (structure, field) -> (bit offset, width).
    fields: BTreeMap<(String, String), (u32, u32)>,
    /// `flex` lines: (structure, field) -> element width of a flexible array.
    flex: BTreeMap<(String, String), u32>,
    /// `struct` lines: C structure -> size in bytes.
    structs: BTreeMap<String, usize>,
    /// `member` lines: (structure, member) -> (offset, size).
    members: BTreeMap<(String, String), (usize, usize)>,
    /// `const` lines.
    consts: BTreeMap<String, u64>,
    /// `bytes` lines.
    bytes: BTreeMap<String, Vec<u8>>,
}

/// Parses a fixture strictly: an unknown or malformed line is a bug in the generator
/// or a corrupted file, so it panics with the line.
fn parse_fixture(file: &str, text: &str) -> Fixture {
    let mut fx = Fixture::default();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let p: Vec<&str> = line.split_whitespace().collect();
        let bad = || -> ! { malformed(file, n, line) };
        let num = |s: &str| -> u64 { s.parse().unwrap_or_else(|_| bad()) };
        let key = |a: &str, b: &str| (a.to_string(), b.to_string());
        let dup = match (p[0], p.len()) {
            ("layout", 3) => fx.layouts.insert(p[1].into(), num(p[2]) as u32).is_some(),
            ("field", 5) => fx
                .fields
                .insert(key(p[1], p[2]), (num(p[3]) as u32, num(p[4]) as u32))
                .is_some(),
            ("flex", 4) => fx.flex.insert(key(p[1], p[2]), num(p[3]) as u32).is_some(),
            ("struct", 3) => fx.structs.insert(p[1].into(), num(p[2]) as usize).is_some(),
            ("member", 5) => fx
                .members
                .insert(key(p[1], p[2]), (num(p[3]) as usize, num(p[4]) as usize))
                .is_some(),
            ("const", 3) => fx.consts.insert(p[1].into(), num(p[2])).is_some(),
            ("bytes", 3) => {
                let hex = p[2];
                if !hex.len().is_multiple_of(2) {
                    bad();
                }
                let v = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or_else(|_| bad()))
                    .collect();
                fx.bytes.insert(p[1].into(), v).is_some()
            }
            _ => bad(),
        };
        assert!(!dup, "{file}:{}: duplicate fixture entry `{line}`", n + 1);
    }
    fx
}

fn malformed(file: &str, n: usize, line: &str) -> ! {
    panic!("{file}:{}: malformed fixture line `{line}`", n + 1)
}

/// All six fixtures, parsed once.
struct Fixtures {
    by_header: BTreeMap<&'static str, Fixture>,
}

impl Fixtures {
    fn get(&self, h: Header) -> &Fixture {
        &self.by_header[header_file(h)]
    }
}

fn fixtures() -> &'static Fixtures {
    static FX: OnceLock<Fixtures> = OnceLock::new();
    FX.get_or_init(|| {
        let files = [
            (Header::Mlx5Ifc, "mlx5_ifc.txt", MLX5_IFC_TXT),
            (Header::Mlx5Dv, "mlx5dv.txt", MLX5DV_TXT),
            (Header::Device, "device.txt", DEVICE_TXT),
            (Header::Qp, "qp.txt", QP_TXT),
            (Header::Cq, "cq.txt", CQ_TXT),
            (Header::Doorbell, "doorbell.txt", DOORBELL_TXT),
        ];
        Fixtures {
            by_header: files
                .into_iter()
                .map(|(h, f, t)| (header_file(h), parse_fixture(f, t)))
                .collect(),
        }
    })
}

// ---------------------------------------------------------------------------------
// The checker
// ---------------------------------------------------------------------------------

/// One difference between a registry entry and its fixture.
#[derive(Clone, Debug)]
struct Mismatch {
    header: Header,
    /// `layout`, `layout.field`, `struct`, `struct.member` or `CONSTANT`.
    item: String,
    message: String,
}

/// What the checker compared, and what differed.
#[derive(Default, Debug)]
struct Report {
    layouts: usize,
    fields: usize,
    structs: usize,
    members: usize,
    constants: usize,
    mismatches: Vec<Mismatch>,
    /// Items the project defines (header, item), for matching deviations.
    defined: BTreeSet<(String, String)>,
}

impl Report {
    fn fail(&mut self, header: Header, item: String, message: String) {
        self.mismatches.push(Mismatch {
            header,
            item,
            message,
        });
    }

    fn define(&mut self, header: Header, item: &str) {
        self.defined
            .insert((header_file(header).to_string(), item.to_string()));
    }

    fn has_mismatch(&self, item: &str) -> bool {
        self.mismatches.iter().any(|m| m.item == item)
    }
}

/// Compares one PRM layout (name, size in bits, fields) with `mlx5_ifc.txt`.
fn check_layout(fx: &Fixtures, name: &str, size_bits: u32, fields: &[Field], r: &mut Report) {
    let ifc = fx.get(Header::Mlx5Ifc);
    let h = Header::Mlx5Ifc;
    r.layouts += 1;
    r.define(h, name);
    match ifc.layouts.get(name) {
        None => r.fail(
            h,
            name.into(),
            format!("layout {name} does not exist in mlx5_ifc.h"),
        ),
        Some(&want) if want != size_bits => r.fail(
            h,
            name.into(),
            format!(
                "layout {name} is {size_bits:#x} bits here, {want:#x} bits in mlx5_ifc.h \
                 (a layout must cover the whole structure)"
            ),
        ),
        Some(_) => {}
    }
    let mut seen = BTreeSet::new();
    for f in fields {
        r.fields += 1;
        let item = format!("{name}.{}", f.name);
        r.define(h, &item);
        if !seen.insert(f.name) {
            r.fail(h, item.clone(), format!("{item} is defined twice"));
        }
        let key = (name.to_string(), f.name.to_string());
        match ifc.fields.get(&key) {
            None => r.fail(
                h,
                item.clone(),
                format!(
                    "{item} (bit {:#x}, width {:#x}) does not exist in mlx5_ifc.h",
                    f.bit, f.width
                ),
            ),
            Some(&(bit, width)) => {
                let width_ok = match ifc.flex.get(&key) {
                    // A flexible array: the project may describe it as empty or as
                    // its first element.
                    Some(&elem) => f.width == 0 || f.width == elem,
                    None => f.width == width,
                };
                if f.bit != bit || !width_ok {
                    let want = match ifc.flex.get(&key) {
                        Some(elem) => format!("0 or {elem:#x} (flexible array)"),
                        None => format!("{width:#x}"),
                    };
                    r.fail(
                        h,
                        item.clone(),
                        format!(
                            "{item}: bit {:#x} width {:#x} here, bit {bit:#x} width {want} in \
                             mlx5_ifc.h",
                            f.bit, f.width
                        ),
                    );
                }
            }
        }
    }
}

/// Compares one C structure with the fixture of its header.
fn check_struct(fx: &Fixtures, s: &CStruct, r: &mut Report) {
    let file = header_file(s.header);
    let c = fx.get(s.header);
    r.structs += 1;
    r.define(s.header, s.name);
    match c.structs.get(s.name) {
        None => r.fail(
            s.header,
            s.name.into(),
            format!("struct {} does not exist in {file}", s.name),
        ),
        Some(&want) if want != s.size => r.fail(
            s.header,
            s.name.into(),
            format!(
                "struct {} is {} bytes here, {want} bytes in {file}",
                s.name, s.size
            ),
        ),
        Some(_) => {}
    }
    let mut seen = BTreeSet::new();
    for m in s.members {
        r.members += 1;
        let item = format!("{}.{}", s.name, m.name);
        r.define(s.header, &item);
        if !seen.insert(m.name) {
            r.fail(s.header, item.clone(), format!("{item} is defined twice"));
        }
        match c.members.get(&(s.name.to_string(), m.name.to_string())) {
            None => r.fail(
                s.header,
                item.clone(),
                format!(
                    "{item} (offset {}, size {}) does not exist in {file}",
                    m.offset, m.size
                ),
            ),
            Some(&(off, size)) if (off, size) != (m.offset, m.size) => r.fail(
                s.header,
                item.clone(),
                format!(
                    "{item}: offset {} size {} here, offset {off} size {size} in {file}",
                    m.offset, m.size
                ),
            ),
            Some(_) => {}
        }
    }
}

/// Compares one constant with the fixture of its header.
fn check_constant(fx: &Fixtures, k: &Constant, r: &mut Report) {
    let file = header_file(k.header);
    r.constants += 1;
    r.define(k.header, k.name);
    match fx.get(k.header).consts.get(k.name) {
        None => r.fail(
            k.header,
            k.name.into(),
            format!("{} = {:#x} does not exist in {file}", k.name, k.value),
        ),
        Some(&want) if want != k.value => r.fail(
            k.header,
            k.name.into(),
            format!("{} is {:#x} here, {want:#x} in {file}", k.name, k.value),
        ),
        Some(_) => {}
    }
}

/// A deviation covers a mismatch of its item, or of anything inside it
/// (`create_qp_in` covers `create_qp_in.qpc`).
fn covers(d: &Deviation, m: &Mismatch) -> bool {
    d.header == m.header
        && (m.item == d.item
            || (m.item.starts_with(d.item) && m.item[d.item.len()..].starts_with('.')))
}

/// The verdict once deviations are applied.
#[derive(Default, Debug)]
struct Verdict {
    /// Mismatches no deviation covers.
    failures: Vec<String>,
    /// Mismatches covered by a deviation, with the source followed.
    followed: Vec<String>,
    /// Deviations that name nothing the project defines, or nothing that differs.
    stale: Vec<String>,
}

fn apply_deviations(r: &Report, deviations: &[Deviation]) -> Verdict {
    let mut v = Verdict::default();
    for m in &r.mismatches {
        if !deviations.iter().any(|d| covers(d, m)) {
            v.failures.push(m.message.clone());
        }
    }
    for d in deviations {
        let file = header_file(d.header);
        let covered: Vec<&str> = r
            .mismatches
            .iter()
            .filter(|m| covers(d, m))
            .map(|m| m.message.as_str())
            .collect();
        if !r.defined.contains(&(file.to_string(), d.item.to_string())) {
            v.stale.push(format!(
                "deviation {file} {} names nothing the project defines",
                d.item
            ));
        } else if covered.is_empty() {
            v.stale.push(format!(
                "deviation {file} {} is stale: the project agrees with {file} there",
                d.item
            ));
        } else {
            v.followed.push(format!(
                "{file} {}: {}; the project follows {}",
                d.item,
                covered.join("; "),
                d.follows
            ));
        }
    }
    v
}

/// Where another header defines the same structure or constant differently, says which
/// one the project follows (its entry's header) and what the other one says.
fn cross_source_notes(fx: &Fixtures, structs: &[&CStruct], consts: &[&Constant]) -> Vec<String> {
    let mut notes = Vec::new();
    for s in structs {
        for other in HEADERS {
            if other == s.header || other == Header::Mlx5Ifc {
                continue;
            }
            let o = fx.get(other);
            let Some(&osize) = o.structs.get(s.name) else {
                continue;
            };
            let mut diffs = Vec::new();
            if osize != s.size {
                diffs.push(format!("size {osize} there, {} here", s.size));
            }
            for m in s.members {
                match o.members.get(&(s.name.to_string(), m.name.to_string())) {
                    None => diffs.push(format!("no member {}", m.name)),
                    Some(&(off, size)) if (off, size) != (m.offset, m.size) => diffs.push(format!(
                        "{} at {off}/{size} there, {}/{} here",
                        m.name, m.offset, m.size
                    )),
                    Some(_) => {}
                }
            }
            if !diffs.is_empty() {
                notes.push(format!(
                    "struct {} differs between {} and {} ({}); the project follows {}",
                    s.name,
                    header_file(s.header),
                    header_file(other),
                    diffs.join(", "),
                    header_file(s.header)
                ));
            }
        }
    }
    for k in consts {
        for other in HEADERS {
            if other == k.header {
                continue;
            }
            if let Some(&v) = fx.get(other).consts.get(k.name) {
                if v != k.value {
                    notes.push(format!(
                        "{} is {v:#x} in {} but {:#x} in {}; the project follows {}",
                        k.name,
                        header_file(other),
                        k.value,
                        header_file(k.header),
                        header_file(k.header)
                    ));
                }
            }
        }
    }
    notes.sort();
    notes.dedup();
    notes
}

/// Runs every check over the given registries.
fn check_all<'a>(
    layouts: impl IntoIterator<Item = &'a Layout>,
    structs: impl IntoIterator<Item = &'a CStruct>,
    consts: impl IntoIterator<Item = &'a Constant>,
) -> Report {
    let fx = fixtures();
    let mut r = Report::default();
    for l in layouts {
        check_layout(fx, l.name, l.size_bits, l.fields, &mut r);
    }
    for s in structs {
        check_struct(fx, s, &mut r);
    }
    for k in consts {
        check_constant(fx, k, &mut r);
    }
    r
}

fn summary(r: &Report, deviations: usize) -> String {
    format!(
        "checked {} layouts, {} fields, {} structs, {} members, {} constants, {} deviations",
        r.layouts, r.fields, r.structs, r.members, r.constants, deviations
    )
}

// ---------------------------------------------------------------------------------
// The crate's registries
// ---------------------------------------------------------------------------------

#[test]
fn registries_conform_to_header_fixtures() {
    let structs: Vec<&CStruct> = conformance::c_structs().collect();
    let consts: Vec<&Constant> = conformance::constants().collect();
    let r = check_all(
        conformance::layouts(),
        structs.iter().copied(),
        consts.iter().copied(),
    );
    let v = apply_deviations(&r, conformance::DEVIATIONS);
    for f in &v.followed {
        eprintln!("conformance: deviation: {f}");
    }
    for n in cross_source_notes(fixtures(), &structs, &consts) {
        eprintln!("conformance: note: {n}");
    }
    let line = summary(&r, conformance::DEVIATIONS.len());
    eprintln!("conformance: {line}");
    let mut msg = String::new();
    for f in v.failures.iter().chain(&v.stale) {
        let _ = writeln!(msg, "  {f}");
    }
    assert!(
        msg.is_empty(),
        "{} conformance failures ({line}):\n{msg}",
        v.failures.len() + v.stale.len()
    );
}

#[test]
fn registries_are_not_empty() {
    assert!(
        conformance::layouts().count() > 0,
        "no PRM layout registered"
    );
    assert!(
        conformance::c_structs().count() > 0,
        "no C structure registered"
    );
    assert!(
        conformance::constants().count() > 0,
        "no constant registered"
    );
}

#[test]
fn every_registered_field_lies_inside_its_layout() {
    // Independent of the field values in the fixtures; a flexible array (which the
    // fixture marks) may extend past the fixed part.
    let flex = &fixtures().get(Header::Mlx5Ifc).flex;
    let mut bad = Vec::new();
    for l in conformance::layouts() {
        for f in l.fields {
            let is_flex = flex.contains_key(&(l.name.to_string(), f.name.to_string()));
            if f.bit + f.width > l.size_bits && !is_flex {
                bad.push(format!(
                    "{}.{} ends beyond {:#x} bits",
                    l.name, f.name, l.size_bits
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

/// A one-bit change in any registered field, member or constant must be reported.
#[test]
fn checker_catches_a_one_bit_change_in_every_registered_entry() {
    let layouts: Vec<&Layout> = conformance::layouts()
        .chain(local::LAYOUTS.iter().copied())
        .collect();
    let structs: Vec<CStruct> = conformance::c_structs()
        .copied()
        .chain(local::structs())
        .collect();
    let consts: Vec<Constant> = conformance::constants()
        .copied()
        .chain(local::CONSTANTS.iter().copied())
        .collect();
    let n = assert_mutations_detected(&layouts, &structs, &consts);
    eprintln!("conformance: {n} single-bit mutations of registry entries were all detected");
}

fn assert_mutations_detected(
    layouts: &[&Layout],
    structs: &[CStruct],
    consts: &[Constant],
) -> usize {
    let fx = fixtures();
    let mut undetected = Vec::new();
    let mut n = 0;
    let mut expect = |r: Report, item: String, what: &str| {
        n += 1;
        if !r.has_mismatch(&item) {
            undetected.push(format!("{item}: {what}"));
        }
    };
    for l in layouts {
        let mut r = Report::default();
        check_layout(fx, l.name, l.size_bits + 1, &[], &mut r);
        expect(r, l.name.to_string(), "size + 1");
        for f in l.fields {
            let item = format!("{}.{}", l.name, f.name);
            let flex_elem = fx
                .get(Header::Mlx5Ifc)
                .flex
                .get(&(l.name.to_string(), f.name.to_string()));
            // Width + 1 of an empty flexible array of 1-bit elements is still a valid
            // description (one element); change it by two there.
            let dw = if f.width == 0 && flex_elem == Some(&1) {
                2
            } else {
                1
            };
            for (mutated, what) in [
                (Field::new(f.name, f.bit + 1, f.width), "bit + 1"),
                (Field::new(f.name, f.bit, f.width + dw), "width + 1"),
            ] {
                let mut r = Report::default();
                check_layout(fx, l.name, l.size_bits, &[mutated], &mut r);
                expect(r, item.clone(), what);
            }
        }
    }
    for s in structs {
        let mut r = Report::default();
        check_struct(
            fx,
            &CStruct {
                size: s.size + 1,
                members: &[],
                ..*s
            },
            &mut r,
        );
        expect(r, s.name.to_string(), "size + 1");
        for m in s.members {
            let item = format!("{}.{}", s.name, m.name);
            for (mutated, what) in [
                (
                    CMember {
                        offset: m.offset + 1,
                        ..*m
                    },
                    "offset + 1",
                ),
                (
                    CMember {
                        size: m.size + 1,
                        ..*m
                    },
                    "size + 1",
                ),
            ] {
                let members = [mutated];
                let mut r = Report::default();
                // The slice only lives for this call; `CStruct` wants 'static, so leak
                // a copy (a test, bounded by the registry size).
                let members: &'static [CMember] = Box::leak(Box::new(members));
                check_struct(fx, &CStruct { members, ..*s }, &mut r);
                expect(r, item.clone(), what);
            }
        }
    }
    for k in consts {
        let mut r = Report::default();
        check_constant(
            fx,
            &Constant {
                value: k.value ^ 1,
                ..*k
            },
            &mut r,
        );
        expect(r, k.name.to_string(), "value ^ 1");
    }
    assert!(
        undetected.is_empty(),
        "mutations not detected:\n{undetected:#?}"
    );
    n
}

// ---------------------------------------------------------------------------------
// The checker itself, on a small set of entries known from the headers
// ---------------------------------------------------------------------------------

/// Entries written here from the headers, independent of the crate's registries, to
/// prove the checker on known-good and known-bad data.
mod local {
    use ferroverbs_hw::conformance::{CMember, CStruct, Constant, Header};
    use ferroverbs_hw::{c_member, prm_layout, Layout};

    prm_layout! {
        /// Part of the memory key context (`mlx5_ifc_mkc_bits`).
        pub mod mkc = "mkc" (0x200) {
            /// Free.
            free: 0x1, 1;
            /// Local read.
            lr: 0x15, 1;
            /// Access mode bits [1:0].
            access_mode_1_0: 0x16, 2;
            /// Queue pair number.
            qpn: 0x20, 24;
            /// Memory key 7:0.
            mkey_7_0: 0x38, 8;
            /// Protection domain.
            pd: 0x68, 24;
            /// Start address.
            start_addr: 0x80, 64;
            /// Length.
            len: 0xc0, 64;
            /// Log of the page size.
            log_page_size: 0x1db, 5;
        }
    }

    prm_layout! {
        /// `CREATE_QP` input (`mlx5_ifc_create_qp_in_bits`) with its nested context and
        /// its flexible page-address array described as its first element.
        pub mod create_qp_in = "create_qp_in" (0x880) {
            /// Opcode.
            opcode: 0, 16;
            /// Opcode modifier.
            op_mod: 0x30, 16;
            /// The QP context.
            qpc: 0xc0, 0x740;
            /// The first physical address.
            pas: 0x880, 0x40;
        }
    }

    prm_layout! {
        /// `mlx5_ifc_pcam_reg_bits`, with a named union member.
        pub mod pcam_reg = "pcam_reg" (0x280) {
            /// Feature group.
            feature_group: 0x8, 8;
            /// The named union of the port access register mask.
            port_access_reg_cap_mask: 0x40, 0x80;
        }
    }

    pub const LAYOUTS: &[&Layout] = &[&mkc::LAYOUT, &create_qp_in::LAYOUT, &pcam_reg::LAYOUT];

    /// `struct mlx5_wqe_ctrl_seg` of mlx5dv.h (16 bytes, BE fields as byte arrays).
    #[repr(C)]
    pub struct CtrlSeg {
        pub opmod_idx_opcode: [u8; 4],
        pub qpn_ds: [u8; 4],
        pub signature: u8,
        pub dci_stream_channel_id: [u8; 2],
        pub fm_ce_se: u8,
        pub imm: [u8; 4],
    }

    /// `struct mlx5_wqe_data_seg` (identical in qp.h and mlx5dv.h).
    #[repr(C)]
    pub struct DataSeg {
        pub byte_count: [u8; 4],
        pub lkey: [u8; 4],
        pub addr: [u8; 8],
    }

    const CTRL_MEMBERS: &[CMember] = &[
        c_member!(CtrlSeg, opmod_idx_opcode),
        c_member!(CtrlSeg, qpn_ds),
        c_member!(CtrlSeg, signature),
        c_member!(CtrlSeg, dci_stream_channel_id),
        c_member!(CtrlSeg, fm_ce_se),
        c_member!(CtrlSeg, imm),
    ];

    const DATA_MEMBERS: &[CMember] = &[
        c_member!(DataSeg, byte_count),
        c_member!(DataSeg, lkey),
        c_member!(DataSeg, addr),
    ];

    pub fn ctrl_seg(header: Header) -> CStruct {
        CStruct {
            header,
            name: "mlx5_wqe_ctrl_seg",
            size: core::mem::size_of::<CtrlSeg>(),
            members: CTRL_MEMBERS,
        }
    }

    pub fn structs() -> Vec<CStruct> {
        vec![
            ctrl_seg(Header::Mlx5Dv),
            CStruct {
                header: Header::Qp,
                name: "mlx5_wqe_data_seg",
                size: core::mem::size_of::<DataSeg>(),
                members: DATA_MEMBERS,
            },
        ]
    }

    pub const CONSTANTS: &[Constant] = &[
        Constant {
            header: Header::Mlx5Dv,
            name: "MLX5_OPCODE_SEND",
            value: 10,
        },
        Constant {
            header: Header::Mlx5Dv,
            name: "MLX5_INVALID_LKEY",
            value: 0x100,
        },
        Constant {
            header: Header::Mlx5Ifc,
            name: "MLX5_CMD_OP_CREATE_QP",
            value: 0x500,
        },
        Constant {
            header: Header::Device,
            name: "MLX5_EVENT_TYPE_COMP",
            value: 0,
        },
        Constant {
            header: Header::Qp,
            name: "MLX5_SEND_WQE_BB",
            value: 64,
        },
        Constant {
            header: Header::Qp,
            name: "MLX5_WQE_FMR_PERM_ATOMIC",
            value: 1 << 31,
        },
        Constant {
            header: Header::Doorbell,
            name: "MLX5_CQ_DOORBELL",
            value: 0x20,
        },
    ];
}

#[test]
fn known_entries_pass() {
    let structs = local::structs();
    let r = check_all(local::LAYOUTS.iter().copied(), &structs, local::CONSTANTS);
    assert!(r.mismatches.is_empty(), "{:#?}", r.mismatches);
    assert_eq!(
        (r.layouts, r.fields, r.structs, r.members, r.constants),
        (3, 15, 2, 9, 7)
    );
    let v = apply_deviations(&r, &[]);
    assert!(v.failures.is_empty() && v.stale.is_empty() && v.followed.is_empty());
}

#[test]
fn known_mismatches_are_all_reported_at_once() {
    prm_bad::check();
}

mod prm_bad {
    use super::*;
    use ferroverbs_hw::prm_layout;

    prm_layout! {
        /// Wrong on purpose: size is a prefix, lr is one bit off, `nonexistent` is absent.
        pub mod mkc_bad = "mkc" (0x100) {
            /// One bit off.
            lr: 0x16, 1;
            /// Not in the header.
            nonexistent: 0x0, 1;
            /// Correct.
            qpn: 0x20, 24;
        }
    }

    prm_layout! {
        /// A layout the header does not have.
        pub mod nothing = "no_such_layout" (0x20) {
            /// Anything.
            x: 0, 1;
        }
    }

    pub fn check() {
        let consts = [
            Constant {
                header: Header::Mlx5Dv,
                name: "MLX5_OPCODE_SEND",
                value: 11,
            },
            Constant {
                header: Header::Qp,
                name: "MLX5_NO_SUCH_CONSTANT",
                value: 1,
            },
        ];
        let r = check_all([&mkc_bad::LAYOUT, &nothing::LAYOUT], &[], &consts);
        let items: BTreeSet<&str> = r.mismatches.iter().map(|m| m.item.as_str()).collect();
        assert_eq!(
            items,
            BTreeSet::from([
                "mkc",
                "mkc.lr",
                "mkc.nonexistent",
                "no_such_layout",
                "no_such_layout.x",
                "MLX5_OPCODE_SEND",
                "MLX5_NO_SUCH_CONSTANT",
            ])
        );
        let v = apply_deviations(&r, &[]);
        assert_eq!(v.failures.len(), 7, "{:#?}", v.failures);
        assert!(v
            .failures
            .iter()
            .any(|f| f.contains("a layout must cover the whole structure")));
    }
}

#[test]
fn deviations_are_followed_and_stale_ones_fail() {
    // mlx5dv.h's control segment checked against qp.h: qp.h has no
    // dci_stream_channel_id (it calls bytes 9-10 `rsvd`).
    let structs = [local::ctrl_seg(Header::Qp)];
    let r = check_all([], &structs, []);
    let items: Vec<&str> = r.mismatches.iter().map(|m| m.item.as_str()).collect();
    assert_eq!(items, ["mlx5_wqe_ctrl_seg.dci_stream_channel_id"]);

    let follows = "rdma-core 44 mlx5dv.h";
    let member = Deviation {
        header: Header::Qp,
        item: "mlx5_wqe_ctrl_seg.dci_stream_channel_id",
        follows,
    };
    let v = apply_deviations(&r, &[member]);
    assert!(v.failures.is_empty() && v.stale.is_empty(), "{v:#?}");
    assert_eq!(v.followed.len(), 1);
    assert!(v.followed[0].ends_with(follows), "{}", v.followed[0]);

    // A deviation on the whole structure covers its members.
    let whole = Deviation {
        header: Header::Qp,
        item: "mlx5_wqe_ctrl_seg",
        follows,
    };
    let v = apply_deviations(&r, &[whole]);
    assert!(v.failures.is_empty() && v.stale.is_empty(), "{v:#?}");

    // ... but not a structure whose name merely starts the same.
    let prefix = Deviation {
        header: Header::Qp,
        item: "mlx5_wqe_ctrl",
        follows,
    };
    let v = apply_deviations(&r, &[prefix]);
    assert_eq!(v.failures.len(), 1);
    assert_eq!(v.stale.len(), 1, "{v:#?}");

    // A deviation for an item that agrees with its header is stale.
    let agrees = Deviation {
        header: Header::Qp,
        item: "mlx5_wqe_ctrl_seg.qpn_ds",
        follows,
    };
    // One for another header than the item's, and one for nothing defined.
    let wrong_header = Deviation {
        header: Header::Mlx5Dv,
        item: "mlx5_wqe_ctrl_seg.dci_stream_channel_id",
        follows,
    };
    let undefined = Deviation {
        header: Header::Qp,
        item: "mlx5_wqe_ctrl_seg.nothing",
        follows,
    };
    let v = apply_deviations(&r, &[member, agrees, wrong_header, undefined]);
    assert!(v.failures.is_empty());
    assert_eq!(v.stale.len(), 3, "{v:#?}");
    assert!(v.stale[0].contains("stale"));
    assert!(v.stale[2].contains("names nothing"));
}

#[test]
fn disagreeing_headers_are_named() {
    let dv = local::ctrl_seg(Header::Mlx5Dv);
    let solicited = Constant {
        header: Header::Mlx5Dv,
        name: "MLX5_WQE_CTRL_CQ_UPDATE",
        value: 8,
    };
    let notes = cross_source_notes(fixtures(), &[&dv], &[&solicited]);
    assert!(
        notes.iter().any(|n| n
            .starts_with("struct mlx5_wqe_ctrl_seg differs between mlx5dv.h and qp.h")
            && n.contains("no member dci_stream_channel_id")
            && n.ends_with("the project follows mlx5dv.h")),
        "{notes:#?}"
    );
    // Both headers agree on the data segment: no note.
    let data = &local::structs()[1];
    assert!(cross_source_notes(fixtures(), &[data], &[]).is_empty());
}

#[test]
fn mutations_of_known_entries_are_detected() {
    let structs = local::structs();
    let n = assert_mutations_detected(local::LAYOUTS, &structs, local::CONSTANTS);
    assert_eq!(n, 3 + 2 * 15 + 2 + 2 * 9 + 7);
}

// ---------------------------------------------------------------------------------
// The fixtures themselves
// ---------------------------------------------------------------------------------

#[test]
fn fixtures_hold_the_whole_headers() {
    let fx = fixtures();
    let ifc = fx.get(Header::Mlx5Ifc);
    assert!(ifc.layouts.len() > 600, "{} layouts", ifc.layouts.len());
    assert!(ifc.fields.len() > 4000, "{} fields", ifc.fields.len());
    assert!(ifc.consts.len() > 500, "{} constants", ifc.consts.len());
    // Every field lies inside its layout and every flex entry has a field.
    for ((s, f), &(bit, width)) in &ifc.fields {
        let size = ifc.layouts[s];
        assert!(bit + width <= size, "{s}.{f} beyond {size}");
    }
    for k in ifc.flex.keys() {
        assert_eq!(ifc.fields[k].1, 0, "{k:?}");
    }
    for (h, names) in [
        (
            Header::Device,
            &[
                "mlx5_cmd_layout",
                "mlx5_cmd_prot_block",
                "mlx5_eqe",
                "ev_data",
                "mlx5_eqe_cmd",
                "mlx5_eqe_page_req",
                "mlx5_eqe_comp",
                "mlx5_eqe_qp_srq",
                "mlx5_eqe_cq_err",
                "mlx5_eqe_port_state",
                "mlx5_init_seg",
                "health_buffer",
                "mlx5_err_cqe",
                "mlx5_cqe64",
            ][..],
        ),
        (
            Header::Qp,
            &[
                "mlx5_wqe_ctrl_seg",
                "mlx5_wqe_data_seg",
                "mlx5_wqe_raddr_seg",
                "mlx5_wqe_atomic_seg",
                "mlx5_wqe_masked_atomic_seg",
                "mlx5_wqe_inline_seg",
                "mlx5_wqe_xrc_seg",
                "mlx5_wqe_datagram_seg",
                "mlx5_av",
            ][..],
        ),
        (
            Header::Mlx5Dv,
            &[
                "mlx5_wqe_ctrl_seg",
                "mlx5_wqe_data_seg",
                "mlx5_wqe_av",
                "mlx5_cqe64",
                "mlx5_err_cqe",
            ][..],
        ),
    ] {
        for n in names {
            assert!(
                fx.get(h).structs.contains_key(*n),
                "{n} missing from {}",
                header_file(h)
            );
        }
    }
    // Spot values, as in the headers.
    let dev = fx.get(Header::Device);
    assert_eq!(dev.structs["mlx5_eqe"], 64);
    assert_eq!(dev.members[&("mlx5_eqe".into(), "data".into())], (32, 28));
    assert_eq!(dev.structs["mlx5_init_seg"], 0x2010);
    assert_eq!(ifc.fields[&("mkc".into(), "lr".into())], (0x15, 1));
    assert_eq!(
        ifc.fields[&("create_qp_in".into(), "qpc".into())],
        (0xc0, 0x740)
    );
}

#[test]
fn reference_byte_vectors_match_the_datapath_reference() {
    // mlx5-datapath.md section 2.6, measured independently of gen.py.
    let dv = fixtures().get(Header::Mlx5Dv);
    let hex =
        |name: &str| -> String { dv.bytes[name].iter().map(|b| format!("{b:02x}")).collect() };
    assert_eq!(hex("ctrl_seg"), "00123408abcdef0300eeee8adeadbeef");
    assert_eq!(hex("ctrl_seg_x86"), "00123408abcdef030000008adeadbeef");
    assert_eq!(hex("data_seg"), "00000100000012341122334455667788");
    assert_eq!(
        hex("dgram_seg"),
        "11111111000000008012345635854321\
         eeeeeeee010203040506224040312345\
         a0a1a2a3a4a5a6a7a8a9aaabacadaeaf"
    );
    let cqe = &dv.bytes["cqe64_owner"];
    assert_eq!(cqe.len(), 64);
    assert_eq!(cqe[63], 0x27);
    assert!(cqe[..63].iter().all(|&b| b == 0));
    for name in [
        "ctrl_seg_full",
        "data_seg_x86",
        "data_seg_invalid_lkey",
        "dgram_seg_noext",
        "eth_seg",
        "cqe64_owner_clear",
        "cqe64_getters_d7",
    ] {
        assert!(dv.bytes.contains_key(name), "{name}");
    }
}

//! `docs/simulator.md` lists every syndrome of the simulated firmware with its status.

use ferroverbs_sim::firmware::Syndrome;

#[test]
fn every_syndrome_is_documented_with_its_status() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/simulator.md");
    let doc = std::fs::read_to_string(path).expect("docs/simulator.md");
    for s in Syndrome::ALL {
        let v = s.value();
        let value = format!("`0x{:04x}_{:04x}`", v >> 16, v & 0xffff);
        let status = format!("(0x{:02x})", s.status().value());
        let name = format!("`{s:?}`");
        let line = doc
            .lines()
            .find(|l| l.contains(&value))
            .unwrap_or_else(|| panic!("{s:?} ({value}) is not in docs/simulator.md"));
        assert!(
            line.contains(&status),
            "{s:?}: status {status} missing: {line}"
        );
        assert!(line.contains(&name), "{s:?}: name missing: {line}");
    }
}

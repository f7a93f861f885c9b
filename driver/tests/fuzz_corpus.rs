//! Replays the minimized fuzz corpora (`tests/data/fuzz/TARGET/`) through
//! the fuzz target bodies: regressions for everything the fuzzers found.

mod fuzz_bodies;

use std::path::Path;

fn replay(target: &str, body: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz").join(target);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut count = 0;
    for entry in entries {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        body(&data);
        count += 1;
    }
    assert!(count > 0, "empty corpus in {}", dir.display());
}

#[test]
fn identify_corpus() {
    replay("identify", fuzz_bodies::identify);
}

#[test]
fn zone_report_corpus() {
    replay("zone_report", fuzz_bodies::zone_report);
}

#[test]
fn completions_corpus() {
    replay("completions", fuzz_bodies::completions);
}

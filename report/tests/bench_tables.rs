//! BENCHMARKS.md's generated tables are what `bench/latest.json` gives:
//! the page cannot drift from the run it cites. After a new run,
//! `hack/bench-tables --write BENCHMARKS.md bench/latest.json`.

use nvme_report::bench_tables::{render, splice, Run};
use std::path::Path;

#[test]
fn benchmarks_md_matches_bench_latest_json() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let page = std::fs::read_to_string(root.join("BENCHMARKS.md")).expect("BENCHMARKS.md");
    let json = std::fs::read_to_string(root.join("bench/latest.json")).expect("bench/latest.json");
    let run = Run::from_json(&serde_json::from_str(&json).expect("bench/latest.json is JSON"))
        .expect("bench/latest.json is a hack/bench run");
    let expected = splice(&page, &render(&[run])).expect("BENCHMARKS.md has the markers once each");
    assert!(
        expected == page,
        "BENCHMARKS.md's tables differ from bench/latest.json: run \
         hack/bench-tables --write BENCHMARKS.md bench/latest.json"
    );
}

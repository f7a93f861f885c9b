//! `hack/bench --quick` end to end: one VM boot gives the whole side-by-side
//! table (every pair with both figures), its JSON and the chart. The
//! figures are not judged here (a benchmark is not a test); that every job
//! ran, on both sides, and was reported is.

use serde_json::Value;
use std::process::Command;
use std::time::Duration;

/// The quick run takes about 1.5 minutes here; its own VM limit is twice
/// its estimate.
const LIMIT: Duration = Duration::from_secs(1200);

#[test]
fn a_quick_bench_reports_every_pair() {
    let dir = std::env::temp_dir().join(format!("hack-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json_path, svg_path) = (dir.join("out.json"), dir.join("chart.svg"));
    let mut command = Command::new(env!("CARGO_BIN_EXE_bench"));
    command.arg("--quick").arg("--json").arg(&json_path).arg("--svg").arg(&svg_path);
    let output = vm_rig::host_command(&mut command, LIMIT).expect("hack/bench runs within its limit");
    assert!(output.status.success(), "hack/bench failed:\n{}\n{}", output.stdout, output.stderr);

    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let table = report["table"].as_array().expect("a table");
    let jobs: Vec<&str> = table.iter().map(|row| row["job"].as_str().unwrap()).collect();
    for expected in [
        "4 KiB random read, QD1",
        "4 KiB random read, QD32",
        "256 KiB sequential write, QD1",
        "512 KiB sequential read, QD32",
        "seqwrite 256K QD1, 90% fill",
        "seqwrite 256K QD8",
        "seqwrite flatness, QD1",
        "scrub, verifying",
        "scrub, no verification",
        "scrub engine efficiency",
    ] {
        assert!(jobs.contains(&expected), "{expected} missing from {jobs:?}");
    }
    for row in table {
        for side in ["ours", "kernel"] {
            let value = row[side]["value"].as_f64();
            assert!(value.is_some_and(|v| v > 0.0), "{side} of {row}");
        }
        if row["unit"] != "flatness" {
            assert!(row["ratio"].as_f64().is_some_and(f64::is_finite), "{row}");
        }
    }
    // The driver's medians and every zoned step's own output are kept.
    assert_eq!(report["driver"]["jobs"].as_array().map(Vec::len), Some(4));
    for step in ["ours", "btrfs", "raw-zbd", "scrub", "perf-read", "fio-read"] {
        assert!(report["zoned"]["steps"].get(step).is_some(), "{step}");
    }
    assert!(report["environment"]["date"].is_string());

    // The same table on stdout, and the chart.
    assert!(output.stdout.contains("Ours against the kernel, one boot"), "{}", output.stdout);
    assert!(output.stdout.contains("btrfs scrub start -B"), "{}", output.stdout);
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("<polyline"), "{svg}");
    let _ = std::fs::remove_dir_all(&dir);
}

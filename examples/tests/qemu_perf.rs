//! `perf` in QEMU, one VM: the floor (`--engine raw`) moves data through
//! PRPs with and without a list and through an SGL descriptor on a
//! controller with shadow doorbells (which QEMU reads the SQ tail from),
//! and `--profile` breaks the driver engine's time into phases.

use serde_json::Value;
use vm_rig::{Controller, Vm};

const MIB: u64 = 1 << 20;

/// The runs, in order: (engine, arguments).
const RUNS: [(&str, &str); 4] = [
    ("raw", "--rw write --bs 128k --qd 8 --sgl never"),
    ("raw", "--rw randread --bs 4k --qd 1"),
    ("raw", "--rw read --bs 128k --qd 8 --sgl always"),
    ("driver", "--rw randread --bs 4k --qd 4 --profile"),
];

#[test]
fn the_floor_and_the_profile_run_on_qemu() {
    let vm = Vm::new().controller(Controller::nvme(64 * MIB));
    let mut script = String::from("set -e; ");
    for (engine, args) in RUNS {
        script += &format!("perf --pci 00:10.0 --engine {engine} {args} --time 1 --size 16M --json; ");
    }
    let outcome = vm.run(&["sh", "-c", &script]).expect("VM run");
    assert_eq!(outcome.status, 0, "{}\nconsole:\n{}", outcome.output, outcome.console);
    let reports: Vec<Value> = outcome
        .output
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(reports.len(), RUNS.len(), "{}", outcome.output);
    for ((engine, args), report) in RUNS.iter().zip(&reports) {
        assert_eq!(report["engine"], *engine, "{args}: {report}");
        assert_eq!(report["errors"], 0, "{args}: {report}");
        assert!(report["ios"].as_u64().unwrap() > 0, "{args}: nothing completed: {report}");
    }
    let profile = &reports[3]["profile_ns_per_io"];
    for phase in ["request", "checks", "data_pointer", "sqe", "doorbell", "reaping", "device", "total"] {
        assert!(profile[phase].as_f64().is_some_and(|ns| ns > 0.0), "{phase}: {profile}");
    }
    assert!(reports[2]["profile_ns_per_io"].is_null(), "no profile unless asked");
}

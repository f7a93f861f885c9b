//! `perf` in QEMU, one VM: the floor (`--engine raw`) moves data through
//! PRPs with and without a list and through an SGL descriptor on a
//! controller with shadow doorbells (which QEMU reads the SQ tail from),
//! and `--profile` breaks the driver engines' time into phases. On a ZNS
//! controller whose zones hold less than their size and few may be open,
//! zoned write jobs fill each zone once, at the write pointer and by Zone
//! Append.

use serde_json::Value;
use vm_rig::{Controller, Vm};

const MIB: u64 = 1 << 20;

/// The runs, in order: (engine, arguments).
const RUNS: [(&str, &str); 7] = [
    ("raw", "--pci 00:10.0 --time 1 --size 16M --rw write --yes --bs 128k --qd 8 --sgl never"),
    ("raw", "--pci 00:10.0 --time 1 --size 16M --rw randread --bs 4k --qd 1"),
    ("raw", "--pci 00:10.0 --time 1 --size 16M --rw read --bs 128k --qd 8 --sgl always"),
    ("submit", "--pci 00:10.0 --time 1 --size 16M --rw randread --bs 4k --qd 4 --profile"),
    ("driver", "--pci 00:10.0 --time 1 --size 16M --rw randread --bs 4k --qd 4 --profile"),
    // The ZNS controller (00:11.0): four 16 MiB zones of 12 MiB capacity,
    // which end the run once full.
    ("driver", "--pci 00:11.0 --rw write --yes --bs 128k --qd 4 --size 64M --offset 16M --time 60"),
    ("driver", "--pci 00:11.0 --rw write --yes --bs 128k --qd 8 --size 64M --zone-append --time 60"),
];

/// What each zoned run writes: four zones of 12 MiB.
const ZONED_BYTES: u64 = 4 * 12 * MIB;

#[test]
fn the_floor_and_the_profile_run_on_qemu() {
    let zns = Controller::zns(128 * MIB, 16 * MIB).zone_capacity(12 * MIB).max_open(4).max_active(4);
    let vm = Vm::new().controller(Controller::nvme(64 * MIB)).controller(zns);
    // A write job without --yes, and no terminal to ask on: refused
    // before the device is opened.
    let mut script = String::from(
        "perf --pci 00:10.0 --rw randwrite --time 1 --size 16M </dev/null 2>&1 && echo 'refusal: none' \
         || echo \"refusal: exit $?\"; set -e; ",
    );
    for (engine, args) in RUNS {
        script += &format!("perf --engine {engine} {args} --json; ");
    }
    let outcome = vm.run(&["sh", "-c", &script]).expect("VM run");
    assert_eq!(outcome.status, 0, "{}\nconsole:\n{}", outcome.output, outcome.console);
    assert!(outcome.output.contains("refusal: exit 1"), "{}", outcome.output);
    assert!(
        outcome.output.contains("perf: --rw randwrite overwrites the data of namespace 1 of 0000:00:10.0")
            && outcome.output.contains("pass --yes to go on"),
        "{}",
        outcome.output
    );
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
    // In place, no request is built and the data pointer stays: the
    // checks and the SQE are what a command sent again costs.
    let profile = &reports[4]["profile_ns_per_io"];
    for phase in ["checks", "sqe", "doorbell", "reaping", "device", "total"] {
        assert!(profile[phase].as_f64().is_some_and(|ns| ns > 0.0), "{phase}: {profile}");
    }
    assert_eq!(profile["request"].as_f64(), Some(0.0), "{profile}");
    assert!(reports[2]["profile_ns_per_io"].is_null(), "no profile unless asked");
    // QEMU fails a write that is not at its zone's write pointer and a
    // write past a zone's capacity: no errors, and the bytes of four full
    // zones, mean each was written once, in order, to its capacity.
    for (report, mode) in reports[5..].iter().zip(["write-pointer", "zone-append"]) {
        assert_eq!(report["zoned"]["mode"], mode, "{report}");
        assert_eq!(report["zoned"]["zones"], 4, "{report}");
        assert_eq!(report["ios"].as_u64().unwrap() * 128 * 1024, ZONED_BYTES, "{report}");
    }
}

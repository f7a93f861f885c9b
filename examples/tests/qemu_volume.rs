//! QEMU integration tests for the zoned allocator. Each test boots one VM
//! with the controllers its scenarios need and runs `volume-check`
//! (hack/guest) once per scenario; the guest builds the volume, drives it
//! and checks what it reads back, printing one line per passed check,
//! which the tests here require by name. Scenarios share a VM (a boot costs
//! seconds under TCG) but not a namespace, and one failing scenario does
//! not stop the others, so a failure report shows them all.
//!
//! QEMU forgets zone state when it exits, so reopening is tested within
//! one boot (a second process); persistence across power cuts is the
//! simulator's job (`allocator/tests/sim_crash.rs`).

use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vm_rig::{Controller, Outcome, Vm};

const MIB: u64 = 1 << 20;

/// The controllers' addresses in the guest, in the order they are given.
const FIRST: &str = "0000:00:10.0";
const SECOND: &str = "0000:00:11.0";
const THIRD: &str = "0000:00:12.0";
const FOURTH: &str = "0000:00:13.0";

/// How long one `volume-check` run may take in the guest (each takes a
/// few seconds). The guest's `timeout` ends a run that hangs, so the VM
/// still reports what every scenario printed.
const RUN_LIMIT_S: u64 = 120;

/// Boot and shutdown, beyond the runs' limits.
const BOOT_LIMIT_S: u64 = 60;

/// One guest command line and what it must print: per label (how
/// volume-check names a scenario or phase), the checks it must pass.
struct Scenario<'a> {
    /// `volume-check` arguments, one run each, the next only if the last
    /// succeeded.
    runs: Vec<String>,
    expect: Vec<(&'a str, &'a [&'a str])>,
}

impl<'a> Scenario<'a> {
    /// `volume-check ARGS`, whose scenario prints as `label`.
    fn new(label: &'a str, args: String, checks: &'a [&'a str]) -> Self {
        Scenario { runs: vec![args], expect: vec![(label, checks)] }
    }

    fn command(&self) -> String {
        let runs: Vec<String> =
            self.runs.iter().map(|args| format!("timeout -s KILL {RUN_LIMIT_S} volume-check {args}")).collect();
        runs.join(" && ")
    }
}

/// Runs every scenario in one boot (each runs even when an earlier one
/// fails) and requires status 0 and, per label, its final
/// `volume-check: LABEL ok` and every `volume-check: LABEL CHECK: ok (`.
fn run(vm: Vm, scenarios: &[Scenario<'_>]) -> Outcome {
    let mut script = String::from("status=0\n");
    for scenario in scenarios {
        let command = scenario.command();
        script += &format!("{{ {command}; }} || {{ echo \"{command}: exit status $?\"; status=1; }}\n");
    }
    script += "exit $status\n";
    let runs = scenarios.iter().map(|s| s.runs.len() as u64).sum::<u64>();
    let outcome = vm
        .timeout(Duration::from_secs(BOOT_LIMIT_S + runs * RUN_LIMIT_S))
        .run(&["sh", "-c", &script])
        .unwrap_or_else(|e| panic!("VM run failed: {e}"));
    let report = || {
        format!(
            "the guest exited {} after {:.1} s\noutput:\n{}\nconsole tail:\n{}",
            outcome.status,
            outcome.elapsed.as_secs_f64(),
            outcome.output,
            tail(&outcome.console, 30)
        )
    };
    let mut missing = Vec::new();
    for (label, checks) in scenarios.iter().flat_map(|s| &s.expect) {
        for check in *checks {
            let line = format!("volume-check: {label} {check}: ok (");
            if !outcome.output.lines().any(|l| l.starts_with(&line)) {
                missing.push(line);
            }
        }
        let last = format!("volume-check: {label} ok");
        if !outcome.output.lines().any(|l| l == last) {
            missing.push(last);
        }
    }
    assert!(missing.is_empty() && outcome.status == 0, "missing lines {missing:#?}\n{}", report());
    eprintln!("{:.1} s in the VM:\n{}", outcome.elapsed.as_secs_f64(), outcome.output);
    outcome
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The detail of a passed check line.
fn detail<'a>(outcome: &'a Outcome, label: &str, check: &str) -> &'a str {
    let prefix = format!("volume-check: {label} {check}: ok (");
    outcome
        .output
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line in\n{}", outcome.output))
}

const WORKLOAD: &[&str] = &[
    "geometry",
    "format",
    "write",
    "streams",
    "commit",
    "free",
    "commit frees",
    "reclaim",
    "commit reclaim",
    "verify",
    "lba",
    "invariants",
];

/// Single-copy volumes on a ZNS namespace, a conventional one (software
/// zones), ZNS with zone capacity below zone size, and ZNS with 4 KiB
/// LBAs: a few hundred extents on two streams, frees, reclaim until idle,
/// everything read back.
#[test]
fn zns_conventional_zone_capacity_and_4k_lbas() {
    let vm = Vm::new()
        .controller(Controller::zns(512 * MIB, 16 * MIB))
        .controller(Controller::nvme(512 * MIB))
        .controller(Controller::zns(256 * MIB, 16 * MIB).zone_capacity(12 * MIB))
        .controller(Controller::zns(256 * MIB, 16 * MIB).lba(4096));
    let zcap_checks: Vec<&str> = WORKLOAD.iter().copied().chain(["capacity"]).collect();
    let outcome = run(
        vm,
        &[
            Scenario::new("zns", format!("zns --pci {FIRST}"), WORKLOAD),
            Scenario::new("conventional", format!("conventional --pci {SECOND}"), WORKLOAD),
            Scenario::new("zcap", format!("zcap --pci {THIRD}"), &zcap_checks),
            Scenario::new("4k", format!("4k --pci {FOURTH}"), WORKLOAD),
        ],
    );
    assert!(detail(&outcome, "zns", "geometry").starts_with("ZNS, 512-byte LBAs, 512 MiB, 32 zones of 16 MiB"));
    assert!(detail(&outcome, "conventional", "geometry").starts_with("conventional, 512-byte LBAs"));
    assert!(detail(&outcome, "4k", "geometry").starts_with("ZNS, 4096-byte LBAs"));
    let capacity = detail(&outcome, "zcap", "capacity");
    assert!(capacity.starts_with("zones of 4096 blocks with 3072 usable"), "{capacity}");
}

/// `max-open=2,max-active=4`: two streams are refused at format, one
/// stream fills the volume to a clean NoSpace, and after frees and reclaim
/// it fills again. Reopening in a new process (same boot) rebuilds exactly
/// the committed state.
#[test]
fn zone_limits_and_reopening_in_a_new_process() {
    let vm = Vm::new()
        .controller(Controller::zns(256 * MIB, 16 * MIB).max_open(2).max_active(4))
        .controller(Controller::zns(256 * MIB, 16 * MIB));
    let outcome = run(
        vm,
        &[
            Scenario::new(
                "limits",
                format!("limits --pci {FIRST}"),
                &["geometry", "two streams refused", "fill", "free", "reclaim", "write again", "verify", "invariants"],
            ),
            // Two processes in one boot: the second opens what the first
            // committed.
            Scenario {
                runs: vec![
                    format!("reopen --phase write --pci {SECOND}"),
                    format!("reopen --phase verify --pci {SECOND}"),
                ],
                expect: vec![
                    ("reopen write", &["geometry", "commit", "commit second", "committed", "uncommitted"]),
                    ("reopen verify", &["geometry", "open", "committed state", "invariants", "keeps working"]),
                ],
            },
        ],
    );
    let fill = detail(&outcome, "limits", "fill");
    assert!(fill.contains("then NoSpace"), "{fill}");
    let state = detail(&outcome, "reopen verify", "committed state");
    assert!(state.contains("40 uncommitted writes absent"), "{state}");
}

/// A scratch directory for backing images, removed on drop.
struct ImageDir(PathBuf);

impl ImageDir {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        ImageDir(path)
    }
}

impl Drop for ImageDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Inverts `len` bytes at `offset` of `image`, as a failing medium might.
/// QEMU's nvme device reads its backing file with `pread` through the host
/// page cache (the rig's drives use QEMU's default writeback cache, no
/// O_DIRECT), so the guest's next read sees the change.
fn flip_bytes(image: &Path, offset: u64, len: usize) -> Result<String, String> {
    let file = File::options().read(true).write(true).open(image).map_err(|e| format!("{}: {e}", image.display()))?;
    let mut bytes = vec![0u8; len];
    file.read_exact_at(&mut bytes, offset).map_err(|e| format!("reading {len} bytes at {offset}: {e}"))?;
    for byte in &mut bytes {
        *byte = !*byte;
    }
    file.write_all_at(&bytes, offset).map_err(|e| format!("writing {len} bytes at {offset}: {e}"))?;
    Ok(format!("flipped {len} bytes at {offset} of {}", image.display()))
}

/// A mirror across two ZNS controllers; then a mirror across a ZNS and a
/// conventional controller where the host flips bytes of one block of the
/// first copy in the ZNS controller's backing image, and the read returns
/// the original data from the other copy, reports the block, and
/// `rewrite_copy` repairs the copy.
#[test]
fn mirror_across_controllers_and_repair_after_host_corruption() {
    let images = ImageDir::new("qemu-volume-repair");
    let image = images.0.join("nvme0.img");
    let flipped: Arc<Mutex<Option<Result<String, String>>>> = Arc::default();
    let vm = {
        let flipped = Arc::clone(&flipped);
        Vm::new()
            .controller(Controller::zns(256 * MIB, 16 * MIB))
            .controller(Controller::nvme(256 * MIB))
            .controller(Controller::zns(256 * MIB, 16 * MIB))
            .images(&images.0)
            .on_line(move |line| {
                let Some(rest) = line.strip_prefix("volume-check: corrupt-me ") else { return };
                let mut words = rest.split_whitespace().map(str::parse::<u64>);
                let result = match (words.next(), words.next()) {
                    (Some(Ok(offset)), Some(Ok(len))) => flip_bytes(&image, offset, len as usize),
                    _ => Err(format!("cannot parse {line:?}")),
                };
                eprintln!("host: {result:?}");
                *flipped.lock().unwrap() = Some(result);
            })
    };
    let mut mirror_checks: Vec<&str> = WORKLOAD.to_vec();
    mirror_checks.push("lanes");
    let outcome = run(
        vm,
        &[
            Scenario::new("mirror", format!("mirror --pci {FIRST} --pci {THIRD}"), &mirror_checks),
            Scenario::new(
                "repair",
                format!("repair --pci {FIRST} --pci {SECOND}"),
                &["geometry", "commit", "corrupted", "read", "commit rewrite", "rewrite", "verify", "invariants"],
            ),
        ],
    );
    let flipped = flipped.lock().unwrap().clone();
    assert!(matches!(flipped, Some(Ok(_))), "the host did not flip the bytes: {flipped:?}");
    assert!(detail(&outcome, "mirror", "verify").contains("both copies"));
    let read = detail(&outcome, "repair", "read");
    assert!(read.contains("block 2 repaired"), "{read}");
}

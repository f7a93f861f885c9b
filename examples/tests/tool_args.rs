//! The tools refuse bad arguments before they touch a device. These tests
//! run the built binaries with no NVMe device and no VFIO: every refusal
//! must come from argument checking (or from the confirmation, which comes
//! first), so stderr names the option and shows no attempt to open a
//! device. The simulator cases show what the checks still let through.

use std::process::{Command, Stdio};

const SEQWRITE: &str = env!("CARGO_BIN_EXE_seqwrite");
const SCRUB: &str = env!("CARGO_BIN_EXE_scrub");
const ZEROOUT: &str = env!("CARGO_BIN_EXE_zeroout");
const VOLUME: &str = env!("CARGO_BIN_EXE_volume");
const PERF: &str = env!("CARGO_BIN_EXE_perf");

/// Clap's status for a bad argument.
const USAGE: i32 = 2;
/// The tools' status for a refusal at run time.
const FAILURE: i32 = 1;

/// What the tools and the driver say once they try to open a device
/// (lowercase): none may appear in a refusal.
const DEVICE_OPENING: [&str; 6] =
    ["vfio", "iommu", "no pci function", "not an nvme controller", "dma memory", "controller fatal"];

/// Runs `binary` with `args`, stdin not a terminal (empty): its status and
/// its stdout and stderr.
fn run(binary: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(binary).args(args).stdin(Stdio::null()).output().expect("the tool runs");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code(), text(&output.stdout), text(&output.stderr))
}

/// `binary args` exits with `status`, its stderr names everything in
/// `mentions`, and it never tried to open a device.
fn refused(binary: &str, args: &[&str], status: i32, mentions: &[&str]) {
    let (code, _, stderr) = run(binary, args);
    let tool = binary.rsplit('/').next().unwrap_or(binary);
    assert_eq!(code, Some(status), "{tool} {args:?}: {stderr}");
    for mention in mentions {
        assert!(stderr.contains(mention), "{tool} {args:?}: no {mention:?} in {stderr:?}");
    }
    let lower = stderr.to_lowercase();
    for marker in DEVICE_OPENING {
        assert!(!lower.contains(marker), "{tool} {args:?} tried to open a device: {stderr:?}");
    }
}

#[test]
fn seqwrite_runtime_must_be_a_positive_finite_number() {
    for value in ["nan", "inf", "-1", "0", "1e300", "ten"] {
        let arg = format!("--runtime={value}");
        refused(SEQWRITE, &[&arg], USAGE, &["--runtime", "more than 0 and at most 31536000"]);
    }
}

#[test]
fn seqwrite_numbers_are_checked_before_any_device() {
    refused(SEQWRITE, &["--iodepth", "0"], USAGE, &["--iodepth", "1..=1024"]);
    refused(SEQWRITE, &["--iodepth", "1025"], USAGE, &["--iodepth", "1..=1024"]);
    refused(SEQWRITE, &["--bs", "3000"], USAGE, &["--bs", "a multiple of 4096"]);
    refused(SEQWRITE, &["--bs", "0"], USAGE, &["--bs"]);
    for size in ["0", "0%", "101%", "nan%", "-5%"] {
        let arg = format!("--size={size}");
        refused(SEQWRITE, &[&arg], USAGE, &["--size"]);
    }
    refused(SEQWRITE, &["--size", "4k", "--bs", "8k"], USAGE, &["--size", "--bs"]);
    refused(SEQWRITE, &["--log-interval", "0"], USAGE, &["--log-interval"]);
    refused(SEQWRITE, &["--streams", "0"], USAGE, &["--streams", "1..=64"]);
    refused(SEQWRITE, &["--ns", "0"], USAGE, &["--ns", "1..=4294967294"]);
    refused(SEQWRITE, &["--commit-every", "0"], USAGE, &["--commit-every"]);
    refused(SEQWRITE, &["--checksum-threads", "65"], USAGE, &["--checksum-threads", "0..=64"]);
    // A new volume's limits are known before it exists.
    refused(SEQWRITE, &["--format", "--yes", "--stream", "1"], USAGE, &["--stream", "--streams 1"]);
    refused(SEQWRITE, &["--format", "--yes", "--bs", "2M"], USAGE, &["--bs", "largest extent"]);
}

#[test]
fn seqwrite_mirror_needs_two_devices_given() {
    let what = ["--profile mirror", "two --pci", "two --ns"];
    refused(SEQWRITE, &["--profile", "mirror"], USAGE, &what);
    refused(SEQWRITE, &["--profile", "mirror", "--ns", "1"], USAGE, &what);
    refused(SEQWRITE, &["--profile", "mirror", "--pci", "0000:00:10.0"], USAGE, &what);
    refused(SEQWRITE, &["--profile", "mirror", "--ns", "1,1"], USAGE, &["--ns 1,1", "one namespace twice"]);
    let twice = ["--profile", "mirror", "--pci", "0000:00:10.0", "--pci", "0000:00:10.0"];
    refused(SEQWRITE, &twice, USAGE, &["given twice"]);
    // A dup is on one device; any other profile spans every device given.
    let two = ["--profile", "dup", "--pci", "0000:00:10.0", "--pci", "0000:00:11.0"];
    refused(SEQWRITE, &two, USAGE, &["--profile dup", "1 to 1 device(s), 2 given"]);
    refused(SEQWRITE, &["--profile", "dup", "--ns", "1,2"], USAGE, &["--profile dup", "1 to 1 device(s), 2 given"]);
    let three = ["--profile", "mirror3", "--format", "--yes", "--ns", "1,2"];
    refused(SEQWRITE, &three, USAGE, &["--profile mirror3", "3 devices wanted, 2 given"]);
    let many: Vec<String> = (1..=17).map(|n| n.to_string()).collect();
    let seventeen = ["--ns".to_string(), many.join(",")];
    let seventeen: Vec<&str> = seventeen.iter().map(String::as_str).collect();
    refused(SEQWRITE, &seventeen, USAGE, &["16 device(s) wanted, 0 --pci and 17 --ns given"]);
    // --degraded opens a mirror on the one device left, but a new one needs both.
    let format = ["--profile", "mirror", "--degraded", "--format", "--yes", "--ns", "1"];
    refused(SEQWRITE, &format, USAGE, &what);
}

#[test]
fn seqwrite_format_without_a_terminal_needs_yes() {
    refused(SEQWRITE, &["--format"], FAILURE, &["--format destroys", "--yes"]);
}

#[test]
fn scrub_limit_must_be_a_rate() {
    for value in ["0", "nan", "inf", "-5", "0.5"] {
        let arg = format!("--limit={value}");
        refused(SCRUB, &[&arg], USAGE, &["--limit", "at least 1 and at most 1048576"]);
    }
}

#[test]
fn scrub_numbers_and_devices_are_checked_before_any_device() {
    refused(SCRUB, &["--qd", "0"], USAGE, &["--qd", "1..=1024"]);
    refused(SCRUB, &["--bs", "1k"], USAGE, &["--bs", "a multiple of 4096"]);
    refused(SCRUB, &["--copy", "16"], USAGE, &["--copy", "0..=15"]);
    refused(SCRUB, &["--verify-threads", "65"], USAGE, &["--verify-threads"]);
    refused(SCRUB, &["--cancel-after", "0"], USAGE, &["--cancel-after"]);
    refused(SCRUB, &["--sim", "0"], USAGE, &["--sim"]);
    refused(SCRUB, &["--ns", "1,1"], USAGE, &["--ns 1,1", "one namespace twice"]);
    let many: Vec<String> = (1..=17).map(|n| n.to_string()).collect();
    refused(SCRUB, &["--ns", &many.join(",")], USAGE, &["1 to 16 devices", "17 --ns"]);
    refused(SCRUB, &["--resume", "--state", "/nonexistent/scrub.state"], USAGE, &["/nonexistent/scrub.state"]);
}

#[test]
fn zeroout_of_a_whole_namespace_without_a_terminal_needs_yes() {
    refused(ZEROOUT, &[], FAILURE, &["all of namespace 1", "--yes"]);
    refused(ZEROOUT, &["--ns", "2"], FAILURE, &["all of namespace 2", "--yes"]);
    refused(ZEROOUT, &["--offset", "1M"], FAILURE, &["to its end", "--yes"]);
}

#[test]
fn zeroout_numbers_are_checked_before_any_device() {
    refused(ZEROOUT, &["--length", "0"], USAGE, &["--length", "more than 0"]);
    refused(ZEROOUT, &["--length", "1000"], USAGE, &["--length", "a multiple of 512"]);
    refused(ZEROOUT, &["--offset", "100", "--length", "4k"], USAGE, &["--offset"]);
    refused(ZEROOUT, &["--qd", "0", "--length", "4k"], USAGE, &["--qd"]);
    refused(ZEROOUT, &["--ns", "0", "--length", "4k"], USAGE, &["--ns"]);
    refused(ZEROOUT, &["--strategy", "fast", "--length", "4k"], USAGE, &["--strategy", "write-zeroes"]);
}

#[test]
fn perf_numbers_are_checked_before_any_device() {
    refused(PERF, &["--qd", "0"], USAGE, &["--qd"]);
    refused(PERF, &["--qd", "65535"], USAGE, &["--qd", "1..=1024"]);
    refused(PERF, &["--time", "0"], USAGE, &["--time"]);
    refused(PERF, &["--time", "1.5"], USAGE, &["--time", "expected whole seconds"]);
    refused(PERF, &["--rw", "randread", "--rwmixread", "70"], USAGE, &["--rwmixread applies to --rw randrw only"]);
    refused(SEQWRITE, &["--sim", "--sim-zone", "1k"], USAGE, &["--sim-zone", "a multiple of 4096 bytes"]);
    refused(PERF, &["--qpairs", "0"], USAGE, &["--qpairs"]);
    refused(PERF, &["--bs", "0"], USAGE, &["--bs"]);
    refused(PERF, &["--sim", "--sim-lba", "1024"], USAGE, &["--sim-lba"]);
}

#[test]
fn a_mirror_on_the_simulator_is_on_its_two_namespaces() {
    // The simulator's namespaces are the tool's own: no --ns needed, and
    // no terminal needed to format them.
    let (code, stdout, stderr) = run(SEQWRITE, &["--sim", "--profile", "mirror", "--format", "--size", "8M", "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(report["bytes"], 8 << 20);
    let (code, _, stderr) = run(SEQWRITE, &["--sim", "--profile", "mirror", "--ns", "2,1", "--size", "8M"]);
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn seqwrite_zero_copy_writes_what_it_verifies_and_copies_nothing() {
    // Inline and on checksum threads, single and mirrored: every extent is
    // read back and compared with its pattern (--verify), and only a
    // mirror's second copy is copied into DMA memory.
    for (threads, profile, copied) in [("0", "single", 0), ("2", "single", 0), ("2", "mirror", 8 << 20)] {
        let args = [
            "--sim",
            "--sim-capacity",
            "64M",
            "--sim-zone",
            "4M",
            "--profile",
            profile,
            "--format",
            "--size",
            "8M",
            "--bs",
            "128k",
            "--iodepth",
            "4",
            "--checksum-threads",
            threads,
            "--zero-copy",
            "--verify",
            "--json",
        ];
        let (code, stdout, stderr) = run(SEQWRITE, &args);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
        assert_eq!(report["bytes"], 8 << 20, "{args:?}");
        assert_eq!(report["zero_copy"], true);
        assert_eq!(report["volume"]["copied_in_bytes"], copied, "{args:?}");
    }
    // The same bytes every time: no checksum work and no copy during the
    // run, and every extent still reads back as written.
    let args =
        ["--sim", "--format", "--size", "8M", "--iodepth", "4", "--zero-copy", "--same-data", "--verify", "--json"];
    let (code, stdout, stderr) = run(SEQWRITE, &args);
    assert_eq!(code, Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!((report["bytes"].as_u64(), report["same_data"].as_bool()), (Some(8 << 20), Some(true)));
    assert_eq!(report["volume"]["copied_in_bytes"], 0);
    assert_eq!(report["volume"]["checksum_ns"], 0);
    // One reused buffer, checksummed by the volume at every write (the
    // peer's work): no copy, the checksum work done, every extent back.
    let args =
        ["--sim", "--format", "--size", "8M", "--iodepth", "4", "--zero-copy", "--reuse-data", "--verify", "--json"];
    let (code, stdout, stderr) = run(SEQWRITE, &args);
    assert_eq!(code, Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!((report["bytes"].as_u64(), report["reuse_data"].as_bool()), (Some(8 << 20), Some(true)));
    assert_eq!(report["volume"]["copied_in_bytes"], 0);
    assert!(report["volume"]["checksum_ns"].as_u64().is_some_and(|ns| ns > 0), "{report}");
    // Without --zero-copy, every byte is copied.
    let (code, stdout, stderr) = run(SEQWRITE, &["--sim", "--format", "--size", "8M", "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(report["volume"]["copied_in_bytes"], 8 << 20);
}

#[test]
fn a_rate_limited_scrub_on_the_simulator_finishes() {
    let (code, stdout, stderr) = run(SCRUB, &["--sim", "8M", "--limit", "512", "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(report["tool"], "scrub");
}

/// One zoned write job on the simulator: its JSON report.
fn zoned_perf(extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["--sim", "--sim-capacity", "8M", "--sim-zone", "1M", "--rw", "write", "--time", "30", "--json"];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = run(PERF, &args);
    assert_eq!(code, Some(0), "{extra:?}: {stderr}");
    serde_json::from_str(stdout.trim()).expect("one JSON object")
}

#[test]
fn perf_writes_every_zone_once_at_its_write_pointer_or_by_append() {
    // The simulator fails a write that is not at its zone's write pointer,
    // so no errors and exactly the region's bytes mean every zone was
    // written in order to its capacity, and nothing twice.
    for extra in [&["--qd", "1"][..], &["--qd", "4", "--bs", "64k"], &["--qd", "8", "--zone-append"]] {
        let report = zoned_perf(extra);
        assert_eq!(report["errors"], 0, "{extra:?}: {report}");
        let written = report["ios"].as_u64().unwrap() * report["bs"].as_u64().unwrap();
        assert_eq!(written, 8 << 20, "{extra:?}: {report}");
        let mode = if extra.contains(&"--zone-append") { "zone-append" } else { "write-pointer" };
        assert_eq!(report["zoned"], serde_json::json!({ "mode": mode, "zones": 8 }), "{extra:?}");
    }
    // Two queue pairs share the zones; --offset and --size pick whole ones.
    let report = zoned_perf(&["--qpairs", "2", "--qd", "2", "--offset", "2M", "--size", "4M"]);
    assert_eq!(report["zoned"]["zones"], 4, "{report}");
    assert_eq!(report["ios"].as_u64().unwrap() * 4096, 4 << 20, "{report}");
}

#[test]
fn perf_refuses_zoned_writes_it_cannot_place() {
    let zoned = ["--sim", "--sim-capacity", "8M", "--sim-zone", "1M", "--time", "1"];
    let refused_with = |extra: &[&str], words: &[&str]| {
        let args: Vec<&str> = zoned.iter().copied().chain(extra.iter().copied()).collect();
        let (code, _, stderr) = run(PERF, &args);
        assert_eq!(code, Some(1), "{extra:?} ran");
        for word in words {
            assert!(stderr.contains(word), "{extra:?}: {word:?} not in {stderr}");
        }
    };
    refused_with(&["--rw", "randwrite"], &["--rw write"]);
    refused_with(&["--rw", "write", "--bs", "24k"], &["divide", "capacity"]);
    refused_with(&["--rw", "write", "--qd", "9"], &["8 whole zone(s)", "at least 9"]);
    refused_with(&["--rw", "write", "--offset", "4k"], &["zone's start"]);
    refused_with(&["--rw", "write", "--engine", "raw"], &["driver engine"]);
    refused_with(&["--rw", "read", "--zone-append"], &["--rw write"]);
    let (code, _, stderr) = run(PERF, &["--sim", "--rw", "write", "--zone-append", "--time", "1"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("needs a zoned namespace"), "{stderr}");
}

#[test]
fn perf_reports_each_whole_second_with_per_second() {
    let (code, stdout, stderr) = run(PERF, &["--sim", "--time", "2", "--per-second", "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    let series = report["mib_s_per_second"].as_array().expect("a series");
    // Two seconds of reads, less the partial last one.
    assert!((1..=2).contains(&series.len()), "{report}");
    assert!(series.iter().all(|mib_s| mib_s.as_f64().is_some_and(|m| m > 0.0)), "{report}");
    let (_, stdout, _) = run(PERF, &["--sim", "--time", "1", "--json"]);
    assert!(stdout.contains("\"mib_s_per_second\":null"), "only when asked: {stdout}");
}

#[test]
fn perf_copies_each_write_in_when_asked() {
    let (code, stdout, stderr) = run(PERF, &["--sim", "--rw", "write", "--time", "1", "--copy-in", "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!((report["copy_in"].as_bool(), report["errors"].as_u64()), (Some(true), Some(0)), "{report}");
    refused(PERF, &["--rw", "write", "--copy-in", "--engine", "raw"], USAGE, &["--copy-in", "driver engines"]);
}

/// `volume replace --format` formats a real device: on the simulator, which
/// offers no Format NVM, it is refused at parsing, before anything opens.
#[test]
fn volume_replace_format_is_for_real_devices() {
    refused(VOLUME, &["replace", "--sim", "64M", "--place", "1", "--format", "--yes"], 2, &["--format", "--sim"]);
}

/// `volume fail` of the member holding the only copies while the other
/// resilvers is refused, with what would be lost and what to do, exit 1;
/// failing the resilvering one is allowed.
#[test]
fn volume_fail_of_the_last_good_copy_is_refused() {
    let (code, _, stderr) =
        run(VOLUME, &["fail", "--sim", "64M", "--sim-state", "resilvering", "--place", "0", "--yes"]);
    assert_eq!(code, Some(1), "{stderr}");
    for mention in ["only copy", "extent(s)", "finish the resilver", "nothing was changed"] {
        assert!(stderr.contains(mention), "no {mention:?} in {stderr}");
    }
    let (code, _, stderr) =
        run(VOLUME, &["fail", "--sim", "64M", "--sim-state", "resilvering", "--place", "1", "--yes"]);
    assert_eq!(code, Some(0), "{stderr}");
}

/// `volume resilver --place 0` when place 1 is the one lacking copies:
/// place 0's report is complete, but the volume is not, so the tool says
/// which place still lacks what and exits 3 (needs attention); resilvering
/// place 1 ends with exit 0.
#[test]
fn volume_resilver_of_a_complete_place_says_what_another_lacks() {
    let (code, stdout, stderr) =
        run(VOLUME, &["resilver", "--sim", "64M", "--sim-state", "resilvering", "--place", "0", "--no-progress"]);
    assert_eq!(code, Some(3), "{stdout}{stderr}");
    assert!(stdout.contains("place 1 still lacks") && stdout.contains("volume resilver --place 1"), "{stdout}");
    assert!(!stdout.contains("every copy written"), "{stdout}");
    let (code, stdout, stderr) =
        run(VOLUME, &["resilver", "--sim", "64M", "--sim-state", "resilvering", "--no-progress"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
}

/// A mirror whose members went on apart: `status` shows both sides and
/// exits 3 (needs attention); `resolve` without a terminal says what the
/// other side loses and refuses without --yes; with it, it keeps the side
/// named and ends with the other rebuilt (exit 0). Anything else is
/// refused: a side that is not one, a pair that has not diverged.
#[test]
fn volume_status_shows_a_diverged_pair_and_resolve_keeps_the_side_named() {
    let diverged = ["--sim", "64M", "--sim-state", "diverged"];
    let (code, stdout, stderr) = run(VOLUME, &[&["status", "--json"][..], &diverged].concat());
    assert_eq!(code, Some(3), "{stderr}");
    let value: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(value["state"], "diverged", "{value}");
    let only: Vec<u64> =
        value["sides"].as_array().expect("sides").iter().map(|s| s["extents_only_here"].as_u64().unwrap()).collect();
    assert_eq!(only, vec![1, 64], "{value}");
    let (code, stdout, _) = run(VOLUME, &[&["status"][..], &diverged].concat());
    assert_eq!(code, Some(3));
    assert!(stdout.contains("DIVERGED") && stdout.contains("volume resolve --keep"), "{stdout}");
    let (code, _, stderr) = run(VOLUME, &[&["resolve", "--keep", "sim1"][..], &diverged].concat());
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("are lost") && stderr.contains("--yes"), "{stderr}");
    let (code, stdout, stderr) =
        run(VOLUME, &[&["resolve", "--keep", "sim1", "--yes", "--no-progress"][..], &diverged].concat());
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("place 0 (sim0): rebuilt from place 1"), "{stdout}");
    let (code, _, stderr) = run(VOLUME, &["resolve", "--sim", "64M", "--keep", "sim0", "--yes"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("have not gone on apart"), "{stderr}");
    let (code, _, _) = run(VOLUME, &[&["resolve", "--keep", "sim2", "--yes"][..], &diverged].concat());
    assert_eq!(code, Some(2));
}

/// A scratch directory of this test process's own, removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("tool-args-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        Scratch(dir)
    }

    fn path(&self, file: &str) -> String {
        self.0.join(file).to_str().expect("UTF-8").to_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `scrub --state` never overwrites a file that is not its own, nor an
/// unfinished pass, and checks where it will write before it scrubs: a
/// user's file, an unfinished checkpoint without --resume, and a path in
/// a directory that does not exist are refused (exit 2) before any
/// device is opened, with the file unchanged; `--new-pass` replaces an
/// unfinished checkpoint when asked to.
#[test]
fn scrub_state_never_overwrites_what_is_not_its_own() {
    let scratch = Scratch::new("scrub-state");
    let notes = scratch.path("notes.txt");
    std::fs::write(&notes, "a user's notes\n").unwrap();
    let (code, stdout, stderr) = run(SCRUB, &["--sim", "16M", "--state", &notes, "--no-progress"]);
    assert_eq!(code, Some(USAGE), "{stdout}{stderr}");
    assert!(stderr.contains("not a scrub checkpoint") && stderr.contains(&notes), "{stderr}");
    assert!(stdout.is_empty(), "nothing was scrubbed: {stdout}");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "a user's notes\n");

    let state = scratch.path("scrub.state");
    let (code, stdout, stderr) =
        run(SCRUB, &["--sim", "64M", "--state", &state, "--cancel-after", "1M", "--no-progress"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let unfinished = std::fs::read_to_string(&state).unwrap();
    assert!(unfinished.contains("\"finished\":false"), "{unfinished}");
    let (code, stdout, stderr) = run(SCRUB, &["--sim", "64M", "--state", &state, "--no-progress"]);
    assert_eq!(code, Some(USAGE), "{stdout}{stderr}");
    assert!(stderr.contains("unfinished") && stderr.contains("--resume") && stderr.contains("--new-pass"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&state).unwrap(), unfinished, "the unfinished pass is kept");
    let (code, stdout, stderr) = run(SCRUB, &["--sim", "64M", "--state", &state, "--new-pass", "--no-progress"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(std::fs::read_to_string(&state).unwrap().contains("\"finished\":true"));

    let nowhere = scratch.path("no/such/dir/scrub.state");
    let (code, stdout, stderr) = run(SCRUB, &["--sim", "16M", "--state", &nowhere, "--no-progress"]);
    assert_eq!(code, Some(USAGE), "{stdout}{stderr}");
    assert!(stderr.contains(&nowhere) && stdout.is_empty(), "{stderr}");
}

/// `plot` never replaces its own input, nor a file that is not a chart
/// unless told to (`--force`), and refuses values no bandwidth log holds
/// (NaN, infinities, negatives) rather than drawing an invalid SVG; each
/// refusal exits 2 and leaves the files as they were.
#[test]
fn plot_never_overwrites_its_input_or_a_file_that_is_not_a_chart() {
    const PLOT: &str = env!("CARGO_BIN_EXE_plot");
    let scratch = Scratch::new("plot");
    let log = scratch.path("lg_bw.1.log");
    std::fs::write(&log, "1000, 2048, 1, 262144\n2000, 1024, 1, 262144\n").unwrap();
    let input = format!("a={log}");
    let (code, _, stderr) = run(PLOT, &["--out", &log, &input]);
    assert_eq!(code, Some(USAGE), "{stderr}");
    assert!(stderr.contains("its own input"), "{stderr}");
    assert!(std::fs::read_to_string(&log).unwrap().starts_with("1000, 2048"), "the log is intact");
    let notes = scratch.path("notes.txt");
    std::fs::write(&notes, "mine\n").unwrap();
    let (code, _, stderr) = run(PLOT, &["--out", &notes, &input]);
    assert_eq!(code, Some(USAGE), "{stderr}");
    assert!(stderr.contains("--force") && std::fs::read_to_string(&notes).unwrap() == "mine\n", "{stderr}");
    let (code, _, stderr) = run(PLOT, &["--out", &notes, "--force", &input]);
    assert_eq!(code, Some(0), "{stderr}");
    let chart = scratch.path("chart.svg");
    for _ in 0..2 {
        let (code, _, stderr) = run(PLOT, &["--out", &chart, &input]);
        assert_eq!(code, Some(0), "a chart it drew is its own to redraw: {stderr}");
    }
    for bad in ["1000, NaN, 1, 4096\n", "1000, inf, 1, 4096\n", "1000, -5, 1, 4096\n", "-1, 5, 1, 4096\n"] {
        let odd = scratch.path("odd.log");
        std::fs::write(&odd, bad).unwrap();
        let (code, _, stderr) = run(PLOT, &["--out", &scratch.path("odd.svg"), &format!("b={odd}")]);
        assert_eq!(code, Some(USAGE), "{bad:?}: {stderr}");
        assert!(stderr.contains("line 1"), "{stderr}");
    }
}

/// seqwrite checks where its plot and logs go before any device is
/// touched (a directory that does not exist: exit 2, nothing written),
/// refuses to replace a file there that is not its own (a user's file as
/// the plot), and when an output fails after the work, still prints the
/// results and names the path.
#[test]
fn seqwrite_outputs_are_checked_first_and_never_cost_the_results() {
    let scratch = Scratch::new("seqwrite-outputs");
    let nowhere = scratch.path("no/such/dir/x");
    for option in ["--plot", "--write-log"] {
        let (code, stdout, stderr) = run(SEQWRITE, &["--sim", "--size", "8M", option, &nowhere, "--no-progress"]);
        assert_eq!(code, Some(USAGE), "{option}: {stdout}{stderr}");
        assert!(stderr.contains(&nowhere) && !stdout.contains("write:"), "{option}: {stderr}");
    }
    let notes = scratch.path("notes.txt");
    std::fs::write(&notes, "mine\n").unwrap();
    let (code, _, stderr) = run(SEQWRITE, &["--sim", "--size", "8M", "--plot", &notes, "--no-progress"]);
    assert_eq!(code, Some(USAGE), "{stderr}");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "mine\n");
    let chart = scratch.path("chart.svg");
    let prefix = scratch.path("run");
    let (code, stdout, stderr) =
        run(SEQWRITE, &["--sim", "--size", "8M", "--plot", &chart, "--write-log", &prefix, "--no-progress"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(std::fs::read_to_string(&chart).unwrap().starts_with("<svg"));
    assert!(std::fs::metadata(format!("{prefix}_bw.1.log")).is_ok());
}

/// A PCI address is parsed and normalised (domain included) by every
/// tool before any device is opened: a malformed one is exit 2 "not a PCI
/// address", and one device named two ways is one device.
#[test]
fn pci_addresses_are_parsed_and_one_device_named_two_ways_is_one() {
    const IDENTIFY: &str = env!("CARGO_BIN_EXE_identify");
    for tool in [IDENTIFY, PERF, ZEROOUT, SEQWRITE, SCRUB] {
        for bad in ["zz", "0000:01:00", "01:00.8", "1:2:3:4.0", "0000:100:00.0", "01:20.0"] {
            refused(tool, &["--pci", bad], USAGE, &["not a PCI address", bad]);
        }
    }
    refused(VOLUME, &["status", "--pci", "zz"], USAGE, &["not a PCI address"]);
    refused(
        SEQWRITE,
        &["--pci", "0000:01:00.0", "--pci", "01:00.0", "--profile", "mirror"],
        USAGE,
        &["0000:01:00.0", "given twice"],
    );
    refused(
        VOLUME,
        &["replace", "--pci", "0000:01:00.0", "--pci", "0000:02:00.0", "--place", "0", "--new-pci", "01:00.0"],
        USAGE,
        &["a device given as the volume's"],
    );
}

/// Starts `binary args`, waits until `ready` holds (at most 30 s), sends
/// SIGINT, and returns its status, stdout and stderr (it must end within
/// 30 s of the signal).
fn interrupted(binary: &str, args: &[&str], ready: impl Fn() -> bool) -> (Option<i32>, String, String) {
    use std::io::Read;
    let mut child = Command::new(binary)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the tool starts");
    let start = std::time::Instant::now();
    while !ready() {
        assert!(start.elapsed().as_secs() < 30, "{args:?} never got going");
        assert!(child.try_wait().unwrap().is_none(), "{args:?} ended before the signal");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let sent = Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("kill runs");
    assert!(sent.success());
    let signalled = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(signalled.elapsed().as_secs() < 30, "{args:?} did not stop within 30 s of SIGINT");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let (mut stdout, mut stderr) = (String::new(), String::new());
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    (status.code(), stdout, stderr)
}

/// A stop is a result: SIGINT to a scrub with --state ends it within a
/// bounded time with exit 130, its report of what was read, the pass
/// saved unfinished, and the exact command that continues it; to a
/// seqwrite, with its figures so far, marked partial (and in --json).
#[test]
fn sigint_stops_a_tool_with_its_results_and_how_to_continue() {
    let scratch = Scratch::new("sigint");
    let state = scratch.path("scrub.state");
    let exists = || std::path::Path::new(&state).exists();
    let scrub = ["--sim", "256M", "--sim-rot", "64", "--limit", "32", "--state", &state, "--no-progress"];
    let (code, stdout, stderr) = interrupted(SCRUB, &scrub, exists);
    assert_eq!(code, Some(130), "{stdout}{stderr}");
    assert!(stdout.contains("scrub"), "the report: {stdout}");
    assert!(stderr.contains("interrupted by SIGINT") && stderr.contains("--resume"), "{stderr}");
    assert!(std::fs::read_to_string(&state).unwrap().contains("\"finished\":false"));
    // The command it names continues the pass (without its rate limit
    // here), and the pass then reports every rotten block: those found
    // before the signal, and the rest.
    let hint = stderr.split('`').nth(1).unwrap_or_else(|| panic!("no command in {stderr}"));
    let again: Vec<&str> = hint.split(' ').skip(1).filter(|&a| a != "--limit" && a != "32").collect();
    assert!(again.contains(&"--resume") && again.contains(&"--sim-rot"), "{hint}");
    let found_before = stdout.split("errors: ").nth(1).and_then(|t| t.split(' ').next()).unwrap_or_default();
    let found_before: u64 = found_before.parse().unwrap_or_else(|_| panic!("no errors line in {stdout}"));
    assert!(found_before < 64, "the signal came after the whole pass: {stdout}");
    let (code, stdout, stderr) = run(SCRUB, &[&again[..], &["--json"]].concat());
    assert_eq!(code, Some(0), "{stderr}");
    let value: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(value["report"]["outcome"], "clean", "{value}");
    assert_eq!(value["report"]["errors"]["checksum"], 64, "found before the signal: {found_before}; {value}");

    let (code, stdout, stderr) = interrupted(
        SEQWRITE,
        &[
            "--sim",
            "--sim-capacity",
            "2G",
            "--size",
            "1536M",
            "--bs",
            "4k",
            "--iodepth",
            "1",
            "--json",
            "--no-progress",
        ],
        // Writing by then (a signal before the handler is installed ends
        // the process, as it should).
        {
            let started = std::time::Instant::now();
            move || started.elapsed().as_millis() > 700
        },
    );
    assert_eq!(code, Some(130), "{stdout}{stderr}");
    let value: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!((value["partial"].as_bool(), value["interrupted_by"].as_str()), (Some(true), Some("SIGINT")), "{value}");
    assert!(value["bytes"].as_u64().unwrap() < value["target_bytes"].as_u64().unwrap(), "{value}");
    assert!(stderr.contains("interrupted by SIGINT"), "{stderr}");

    // volume resilver: stopped with what it copied committed, and said so.
    let started = std::time::Instant::now();
    let (code, stdout, stderr) = interrupted(
        VOLUME,
        &["resilver", "--sim", "256M", "--sim-state", "resilvering", "--limit", "16", "--no-progress"],
        move || started.elapsed().as_millis() > 2500,
    );
    assert_eq!(code, Some(130), "{stdout}{stderr}");
    assert!(stdout.contains("resilver place 1"), "the report: {stdout}");
    assert!(stderr.contains("interrupted by SIGINT") && stderr.contains("nothing continues it"), "{stderr}");

    // perf: the run until the signal, marked partial.
    let started = std::time::Instant::now();
    let (code, stdout, stderr) =
        interrupted(PERF, &["--sim", "--time", "60", "--json"], move || started.elapsed().as_millis() > 1500);
    assert_eq!(code, Some(130), "{stdout}{stderr}");
    let value: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!((value["partial"].as_bool(), value["interrupted_by"].as_str()), (Some(true), Some("SIGINT")), "{value}");
    assert!(value["seconds"].as_f64().unwrap() < 30.0 && value["ios"].as_u64().unwrap() > 0, "{value}");
}

/// A percentage is of what the volume holds, and 100% of it is written
/// whole, on zoned and conventional namespaces, with checksums in areas or
/// in the map (before, checksum areas stopped it at 87.5% on a
/// conventional namespace and 99.6% on a zoned one, with "no space left").
/// A size that cannot fit is refused before anything is written (exit 2),
/// naming what fits, and never suggesting --format.
#[test]
fn seqwrite_sizes_are_of_what_the_volume_holds_and_one_that_cannot_fit_is_refused() {
    // The rig's zones (64 MiB), and a conventional namespace.
    for (capacity, zone) in [("1G", "64M"), ("256M", "0")] {
        for checksums in ["area", "map"] {
            let args = ["--sim", "--sim-capacity", capacity, "--sim-zone", zone, "--checksums", checksums, "--format"];
            let (code, stdout, stderr) = run(SEQWRITE, &[&args[..], &["--size", "100%", "--json"]].concat());
            assert_eq!(code, Some(0), "zone {zone}, {checksums}: {stderr}");
            let value: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
            let capacity = value["volume"]["capacity_bytes"].as_u64().unwrap();
            assert_eq!(value["bytes"].as_u64(), Some(capacity), "zone {zone}, {checksums}: {value}");
            assert!(capacity > 150 << 20, "zone {zone}, {checksums}: {capacity}");
        }
    }
    // A pool: a 3-copy mirror over four namespaces holds four thirds of
    // one, and takes all of it.
    let pool = ["--sim", "--sim-capacity", "512M", "--sim-zone", "64M", "--profile", "mirror3", "--ns", "1,2,3,4"];
    let (code, stdout, stderr) = run(SEQWRITE, &[&pool[..], &["--format", "--size", "100%", "--json"]].concat());
    assert_eq!(code, Some(0), "a pool: {stderr}");
    let value: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let capacity = value["volume"]["capacity_bytes"].as_u64().unwrap();
    assert_eq!(value["bytes"].as_u64(), Some(capacity), "a pool: {value}");
    assert!(capacity > 400 << 20, "a pool of four 512 MiB namespaces, three copies: {capacity}");
    for (case, args) in [
        ("more than the volume", &["--size", "2G"][..]),
        // 64 MiB zones with checksum areas hold 63.75 MiB of data: half a
        // write of 512 KiB left in each.
        ("a size whose writes leave zone tails", &["--size", "100%", "--bs", "512k"]),
    ] {
        let (code, _, stderr) = run(SEQWRITE, &[&["--sim", "--format", "--no-progress"][..], args].concat());
        assert_eq!(code, Some(USAGE), "{case}: {stderr}");
        assert!(
            stderr.contains("--size") && stderr.contains("fit") && stderr.contains("no data was written"),
            "{stderr}"
        );
        assert!(!stderr.contains("--format") && !stderr.contains("no space left"), "{case}: {stderr}");
    }
    // An argument the volume refuses once open is a bad argument, as perf's.
    refused(SEQWRITE, &["--sim", "--bs", "1M"], USAGE, &["--bs", "largest extent"]);
    refused(PERF, &["--sim", "--bs", "4M"], USAGE, &["--bs", "MDTS"]);
}

/// perf never cuts a region short silently: a --size past the namespace's
/// end (from --offset) is refused, naming what it holds.
#[test]
fn perf_refuses_a_region_past_the_namespace() {
    refused(PERF, &["--sim", "--sim-capacity", "64M", "--size", "100G"], USAGE, &["--size 100", "holds 64"]);
    refused(PERF, &["--sim", "--sim-capacity", "64M", "--offset", "32M", "--size", "48M"], USAGE, &["holds 32"]);
    let (code, _, stderr) = run(PERF, &["--sim", "--sim-capacity", "64M", "--offset", "32M", "--size", "32M"]);
    assert_eq!(code, Some(0), "{stderr}");
}

/// Runs `binary args` on a pseudo-terminal (util-linux `script`, in every
/// Debian), typing `answer`: its status and everything it printed.
fn on_terminal(binary: &str, args: &[&str], answer: &str) -> (Option<i32>, String) {
    use std::io::Write;
    let command = std::iter::once(binary).chain(args.iter().copied()).collect::<Vec<_>>().join(" ");
    let mut child = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script runs");
    child.stdin.take().expect("stdin").write_all(answer.as_bytes()).expect("the answer is typed");
    let output = child.wait_with_output().expect("script ends");
    let text = String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
    (output.status.code(), text)
}

/// Before destroying anything, the question names the device by address,
/// namespace, model, serial and size, and says what it holds: asked once
/// the devices are open (only read), never before, when it could only
/// repeat the arguments. Without a terminal it is still refused before
/// any device is opened.
#[test]
fn confirmations_name_the_device_by_what_it_is_and_what_it_holds() {
    let replace = ["replace", "--sim", "16M", "--sim-state", "degraded", "--degraded", "--place", "1"];
    let replace = [&replace[..], &["--new-pci", "sim2"]].concat();
    let (code, text) = on_terminal(VOLUME, &replace, "no\n");
    assert_eq!(code, Some(FAILURE), "{text}");
    for named in
        ["namespace 1 of sim2", "serial sim-2", "1.0 GiB", "which holds nothing (blank)", "place 1 of volume 0x"]
    {
        assert!(text.contains(named), "no {named:?} in {text}");
    }
    assert!(text.contains("not confirmed: nothing was changed"), "{text}");
    let (code, text) = on_terminal(VOLUME, &["fail", "--sim", "16M", "--place", "1"], "no\n");
    assert_eq!(code, Some(FAILURE), "{text}");
    for named in ["gives up place 1 of volume 0x", "namespace 1 of sim1", "serial sim-1"] {
        assert!(text.contains(named), "no {named:?} in {text}");
    }
    // Typed "yes", the device named goes.
    let (code, text) = on_terminal(VOLUME, &["fail", "--sim", "16M", "--place", "1"], "yes\n");
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("place 1: given up"), "{text}");
    // Nobody to ask: refused before anything is opened.
    refused(VOLUME, &replace, FAILURE, &["stdin is not a terminal", "--yes"]);
    refused(PERF, &["--rw", "write", "--pci", "1:0.0"], FAILURE, &["0000:01:00.0", "stdin is not a terminal", "--yes"]);
    refused(ZEROOUT, &[], FAILURE, &["stdin is not a terminal", "--yes"]);
}

/// `--cancel-after` stops near what it says: before, it was checked only
/// at the 64 MiB checkpoints, and `--cancel-after 1M` read 120 MiB.
#[test]
fn scrub_cancel_after_stops_near_it_and_says_how_to_continue() {
    let scratch = Scratch::new("cancel-after");
    let state = scratch.path("scrub.state");
    let args = ["--sim", "256M", "--cancel-after", "1M", "--qd", "1", "--state", &state, "--json", "--no-progress"];
    let (code, stdout, stderr) = run(SCRUB, &args);
    assert_eq!(code, Some(0), "{stderr}");
    let value: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let read = value["report"]["bytes_read"].as_u64().unwrap();
    assert!((1 << 20..=16 << 20).contains(&read), "{read} bytes read for --cancel-after 1M");
    assert_eq!(value["report"]["cancelled"].as_bool(), Some(true), "{value}");
}

/// Options that do not apply are refused, not ignored.
#[test]
fn options_that_do_not_apply_are_refused() {
    refused(SEQWRITE, &["--degraded", "--format"], USAGE, &["--degraded", "--format makes a new volume"]);
    refused(SEQWRITE, &["--sim", "--degraded"], USAGE, &["--degraded applies to a mirror", "single"]);
    refused(SEQWRITE, &["--sim", "--software-zone", "1M"], USAGE, &["--software-zone", "zoned"]);
    refused(SEQWRITE, &["--same-data", "--checksum-threads", "2"], USAGE, &["--same-data", "--checksum-threads"]);
    refused(SEQWRITE, &["--reuse-data", "--checksum-threads", "2"], USAGE, &["--reuse-data", "--checksum-threads"]);
    refused(SEQWRITE, &["--reuse-data", "--same-data"], USAGE, &["--reuse-data", "--same-data"]);
    refused(PERF, &["--rw", "randread", "--rwmixread", "70"], USAGE, &["--rwmixread applies to --rw randrw only"]);
    refused(PERF, &["--copy-in", "--engine", "raw"], USAGE, &["--copy-in"]);
}

/// With --json, a failure is one JSON object on stdout too (`tool` and
/// `error`), the message on stderr as well; a result already printed is
/// never followed by a second object.
#[test]
fn json_failures_are_json_on_stdout() {
    let cases: [(&str, &[&str], i32); 3] = [
        (SEQWRITE, &["--sim", "--json", "--size", "2G", "--no-progress"], USAGE),
        (VOLUME, &["resolve", "--sim", "16M", "--keep", "sim0", "--yes", "--json"], FAILURE),
        (SCRUB, &["--sim", "16M", "--json", "--resume", "--state", "/nonexistent/x.state"], USAGE),
    ];
    for (tool, args, status) in cases {
        let (code, stdout, stderr) = run(tool, args);
        assert_eq!(code, Some(status), "{args:?}: {stderr}");
        let value: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
        let error = value["error"].as_str().unwrap_or_else(|| panic!("no error in {value}"));
        assert!(!error.is_empty() && stderr.contains(error), "{value} / {stderr}");
        assert_eq!(value["tool"], tool.rsplit('/').next().unwrap());
    }
}

/// Each tool's `--help` begins with its own purpose, and `--version`
/// names the tool.
#[test]
fn each_tool_names_itself_in_help_and_version() {
    const IDENTIFY: &str = env!("CARGO_BIN_EXE_identify");
    const PLOT: &str = env!("CARGO_BIN_EXE_plot");
    let mut firsts = std::collections::BTreeSet::new();
    for tool in [IDENTIFY, PERF, ZEROOUT, SEQWRITE, SCRUB, VOLUME, PLOT] {
        let name = tool.rsplit('/').next().unwrap();
        let (code, help, _) = run(tool, &["--help"]);
        assert_eq!(code, Some(0));
        let first = help.lines().next().unwrap_or_default().to_owned();
        assert!(!first.starts_with("The tools:") && !first.is_empty(), "{name}: {first}");
        assert!(firsts.insert(first.clone()), "{name} shares its first help line: {first}");
        let (_, version, _) = run(tool, &["--version"]);
        assert!(version.starts_with(&format!("{name} ")), "{name}: {version}");
    }
}

/// A simulated volume larger than the host's memory is refused at once
/// (exit 2), naming what it would take and what the host has, instead of
/// growing until the host runs out.
#[test]
fn simulated_sizes_are_capped_to_the_host() {
    refused(SCRUB, &["--sim", "1T"], USAGE, &["--sim", "in memory", "available"]);
    refused(VOLUME, &["status", "--sim", "1T"], USAGE, &["--sim", "in memory", "available"]);
    refused(SEQWRITE, &["--sim", "--sim-capacity", "1T"], USAGE, &["--sim-capacity", "in memory", "available"]);
    refused(PERF, &["--sim", "--sim-capacity", "1T", "--rw", "write"], USAGE, &["--sim-capacity", "in memory"]);
    // A read job reads blocks never written, which take no memory.
    let (code, _, stderr) = run(PERF, &["--sim", "--sim-capacity", "1T", "--time", "1"]);
    assert_eq!(code, Some(0), "{stderr}");
}

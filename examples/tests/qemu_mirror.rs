//! QEMU integration test of a mirror's members through their life, in one
//! boot, one `volume-check members` process per phase (hack/guest), the
//! bodies of `nvme_testkit::scenarios::MembersPhase`, whose docs say what
//! each phase does and checks (the simulator runs them too,
//! `testkit/tests/sim_scenarios.rs`):
//!
//! 1. `unplug`: a mirror across a conventional controller behind a hot-plug
//!    port (device 0) and a ZNS one (device 1), written in bursts while
//!    QEMU unplugs device 0 (`device_del`, sent when the guest prints
//!    `volume-check: unplug-me`): every write is acknowledged, the volume
//!    gives device 0 up and goes on degraded, and the commit succeeds.
//! 2. `degraded`: once the function has left the guest, a new process
//!    opens the volume on device 1, only when allowed to.
//! 3. `replace`: a third controller, blank from boot, takes device 0's
//!    place; the resilver writes every copy; both copies read back.
//! 4. `rejoin`: device 1's controller is reset; the next write gives it
//!    up and goes on without it; written without it; the device rejoins
//!    lacking exactly what it missed, and the resilver copies only that.
//! 5. `final`: a new process opens it online; every copy reads back.
//!
//! The host checks each phase's passed checks, its extents per batch,
//! and the status JSON it prints (`Volume::status`).

use nvme_testkit::scenarios::MembersPhase;
use serde_json::Value;
use std::time::Duration;
use vm_rig::{Controller, Outcome, Vm, GUEST_BDFS};

const MIB: u64 = 1 << 20;

/// The controllers in the guest: the first behind a PCIe root port of its
/// own (so it can be unplugged), the others on the root bus.
const PULLED: &str = "0000:01:00.0";
const ZONED: &str = GUEST_BDFS[1];
const SPARE: &str = GUEST_BDFS[2];

/// What QEMU's monitor is told when the guest asks for the unplug.
const UNPLUG_MARKER: &str = "volume-check: unplug-me";
const UNPLUG: &str = r#"{"execute":"device_del","arguments":{"id":"nvme0"}}"#;

/// Bound on one phase in the guest (each takes seconds to tens of
/// seconds); the guest's `timeout` ends one that hangs, so the output
/// still shows what every phase printed.
const RUN_LIMIT_S: u64 = 180;

/// Boot and shutdown, beyond the phases' limits.
const BOOT_LIMIT_S: u64 = 60;

/// Writes `volume-check` makes after device 0 is given up, at least
/// (bursts of 16).
const WRITES_AFTER_GIVE_UP_MIN: u64 = 4 * 16;

/// Per phase: its name, its `--pci` (and `--gone`) arguments, and the
/// checks it must pass (`nvme_testkit::scenarios::MembersPhase`, which the
/// simulator runs too).
fn phases() -> [(&'static str, String, Vec<&'static str>); 5] {
    MembersPhase::ALL.map(|phase| {
        let args = match phase {
            MembersPhase::Unplug => format!("--pci {PULLED} --pci {ZONED}"),
            MembersPhase::Degraded => format!("--pci {ZONED} --gone {PULLED}"),
            MembersPhase::Replace => format!("--pci {ZONED} --pci {SPARE}"),
            MembersPhase::Rejoin | MembersPhase::Final => format!("--pci {SPARE} --pci {ZONED}"),
        };
        (phase.name(), args, phase.checks())
    })
}

fn vm() -> Vm {
    Vm::new()
        .controller(Controller::nvme(256 * MIB).hotplug())
        .controller(Controller::zns(256 * MIB, 16 * MIB))
        .controller(Controller::nvme(256 * MIB))
        .qmp_on_output(UNPLUG_MARKER, &[UNPLUG])
        .timeout(Duration::from_secs(BOOT_LIMIT_S + phases().len() as u64 * RUN_LIMIT_S))
}

/// The operator's view after a phase: the `volume` tool's `status
/// --json` (its exit status, 0 online or 3 degraded, is printed, not
/// checked by the shell), with the devices it opens.
fn tool_status(after: &str) -> Option<String> {
    let pci = match after {
        "unplug" => format!("--pci {ZONED} --degraded"),
        "replace" | "final" => format!("--pci {SPARE} --pci {ZONED}"),
        _ => return None,
    };
    Some(format!(
        "{{ timeout -s KILL {RUN_LIMIT_S} volume status {pci} --json > /tmp/status.json; \
         echo \"volume-status {after} exit $? $(tr -d '\\n' < /tmp/status.json)\"; }}"
    ))
}

/// The phases in one chain (each needs the one before), in one boot, with
/// the tool's status after some.
fn script() -> String {
    let runs: Vec<String> = phases()
        .iter()
        .flat_map(|(phase, args, _)| {
            let run = format!("timeout -s KILL {RUN_LIMIT_S} volume-check members --phase {phase} {args}");
            std::iter::once(run).chain(tool_status(phase))
        })
        .collect();
    runs.join(" &&\n")
}

/// What `volume status --json` printed after phase `after`: its exit
/// status and the JSON.
fn tool_status_of(outcome: &Outcome, after: &str) -> (i32, Value) {
    let prefix = format!("volume-status {after} exit ");
    let line = outcome.output.lines().find_map(|l| l.strip_prefix(&prefix));
    let line = line.unwrap_or_else(|| panic!("no {prefix:?} line in\n{}", outcome.output));
    let (code, json) = line.split_once(' ').unwrap_or_else(|| panic!("{prefix}{line}"));
    let value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{prefix}: {e}: {json}"));
    (code.parse().unwrap_or_else(|e| panic!("{prefix}{code}: {e}")), value)
}

/// The tool's status says `state`, each device's `states`, and carries
/// each device's PCI address (or none, for one away) and error counters.
fn check_tool_status(outcome: &Outcome, after: &str, code: i32, state: &str, devices: &[(&str, &str)]) {
    let (exit, value) = tool_status_of(outcome, after);
    assert_eq!(exit, code, "volume status after {after}: {value}");
    let expected = (state.to_string(), devices.iter().map(|(s, _)| s.to_string()).collect::<Vec<_>>());
    assert_eq!(states(&value), expected, "volume status after {after}: {value}");
    for (device, (_, pci)) in value["devices"].as_array().unwrap().iter().zip(devices) {
        assert_eq!(device["pci"], *pci, "volume status after {after}: {value}");
        for kind in ["read", "write", "checksum"] {
            assert!(device["errors"][kind].is_u64(), "volume status after {after}: no {kind} errors: {value}");
        }
    }
}

fn boot() -> Outcome {
    // One boot: a QEMU that dies fails the test with its signal.
    vm().run(&["sh", "-c", &script()]).unwrap_or_else(|e| panic!("VM run failed: {e}"))
}

/// The detail of phase `phase`'s passed check `check`.
fn detail<'a>(outcome: &'a Outcome, phase: &str, check: &str) -> &'a str {
    outcome.detail("volume-check", &format!("members {phase}"), check)
}

/// The status phase `phase` printed as `name`.
fn status(outcome: &Outcome, phase: &str, name: &str) -> Value {
    let prefix = format!("volume-check: members {phase} status {name} ");
    let line = outcome.output.lines().find_map(|l| l.strip_prefix(&prefix));
    let line = line.unwrap_or_else(|| panic!("no {prefix:?} line in\n{}", outcome.output));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{prefix}: {e}: {line}"))
}

/// The volume's state and each device's, from a status.
fn states(status: &Value) -> (String, Vec<String>) {
    let text = |v: &Value| v.as_str().unwrap_or_else(|| panic!("not a string: {v}")).to_string();
    let devices = status["devices"].as_array().unwrap_or_else(|| panic!("no devices in {status}"));
    (text(&status["state"]), devices.iter().map(|d| text(&d["state"])).collect())
}

fn number(value: &Value) -> u64 {
    value.as_u64().unwrap_or_else(|| panic!("not a number: {value}"))
}

/// The number after `word` in `text` (`... unplug 171, ...`).
fn count_after(text: &str, word: &str) -> u64 {
    let words: Vec<&str> = text.split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')').collect();
    let at = words.iter().position(|w| *w == word).unwrap_or_else(|| panic!("no {word:?} in {text:?}"));
    let next = words[at + 1..].iter().find(|w| !w.is_empty()).unwrap_or_else(|| panic!("nothing after {word:?}"));
    next.parse().unwrap_or_else(|e| panic!("{word} {next:?} in {text:?}: {e}"))
}

/// The number just before `phrase` in `text`.
fn number_before(text: &str, phrase: &str) -> u64 {
    let at = text.find(phrase).unwrap_or_else(|| panic!("no {phrase:?} in {text:?}"));
    let word = text[..at].rsplit(' ').next().unwrap_or_default();
    word.parse().unwrap_or_else(|e| panic!("{word:?} before {phrase:?} in {text:?}: {e}"))
}

/// A mirror loses device 0 to a hot-unplug mid-write and carries on
/// degraded; a new process opens it on the survivor; a blank controller
/// replaces the lost one and the resilver restores every copy; the other
/// device comes back after a controller reset and gets exactly what it
/// missed; a last process finds it online with every copy.
#[test]
fn a_mirror_loses_a_device_mid_write_is_rebuilt_on_a_new_one_and_takes_back_one_that_returns() {
    let outcome = boot();
    let missing: Vec<String> = phases()
        .into_iter()
        .flat_map(|(phase, _, checks)| outcome.missing_checks("volume-check", &format!("members {phase}"), &checks))
        .collect();
    assert!(missing.is_empty() && outcome.status == 0, "missing lines {missing:#?}\n{}", outcome.report());
    eprintln!("{:.1} s in the VM:\n{}", outcome.elapsed.as_secs_f64(), outcome.output);

    // 1. Pulled mid-write: writes went on after device 0 was given up, and
    // everything written since the last commit before the unplug lacks
    // copy 0.
    let given_up = detail(&outcome, "unplug", "given up");
    assert!(number_before(given_up, " extents of the batch acknowledged by then") > 0, "{given_up}");
    assert!(number_before(given_up, " more on device 1 alone") >= WRITES_AFTER_GIVE_UP_MIN, "{given_up}");
    let extents = detail(&outcome, "unplug", "extents");
    let (first, unplugged) = (count_after(extents, "first"), count_after(extents, "unplug"));
    assert_eq!(first, 96, "{extents}");
    assert!(unplugged >= WRITES_AFTER_GIVE_UP_MIN + 4 * 16, "{extents}");
    let degraded = status(&outcome, "unplug", "degraded");
    assert_eq!(states(&degraded), ("degraded".into(), vec!["failed".into(), "online".into()]), "{degraded}");
    assert!(degraded["devices"][0]["why"].is_string(), "{degraded}");
    assert_eq!(degraded["devices"][1]["pci"], ZONED, "{degraded}");
    // Every extent has one copy available; those written since the
    // unplug began lack the other for good (a resilver writes it).
    assert_eq!(number(&degraded["redundancy"]["extents_at_risk"]), first + unplugged, "{degraded}");
    assert_eq!(number(&degraded["redundancy"]["extents_missing"]), unplugged, "{degraded}");
    let missing = number(&degraded["redundancy"]["bytes_missing"]);
    assert!(missing > 0, "{degraded}");
    assert_eq!(number(&degraded["devices"][0]["missing_bytes"]), missing, "{degraded}");
    assert_eq!(number(&degraded["devices"][1]["sole_bytes"]), number(&degraded["used_bytes"]), "{degraded}");
    assert!(degraded["resilver"].as_array().is_some_and(Vec::is_empty), "{degraded}");

    // 2. Degraded open in a new process, only when allowed.
    let refused = detail(&outcome, "degraded", "refused");
    assert!(refused.starts_with("device place(s) [0] cannot be used"), "{refused}");
    let open = status(&outcome, "degraded", "open");
    assert_eq!(states(&open), ("degraded".into(), vec!["failed".into(), "online".into()]), "{open}");
    assert_eq!(number(&open["redundancy"]["extents_missing"]), unplugged, "{open}");
    assert_eq!(detail(&outcome, "degraded", "extents"), extents);

    // 3. Replaced and resilvered: every copy written, online.
    let replaced = status(&outcome, "replace", "replaced");
    assert_eq!(states(&replaced), ("resilvering".into(), vec!["resilvering".into(), "online".into()]), "{replaced}");
    assert_eq!(replaced["devices"][0]["pci"], SPARE, "{replaced}");
    let total_bytes = number(&replaced["used_bytes"]);
    assert_eq!(number(&replaced["devices"][0]["missing_bytes"]), total_bytes, "{replaced}");
    assert_eq!(number(&replaced["redundancy"]["extents_at_risk"]), first + unplugged, "{replaced}");
    let copied = detail(&outcome, "replace", "resilver");
    assert!(copied.starts_with(&format!("{total_bytes} bytes copied of {total_bytes} missing")), "{copied}");
    for name in ["resilvered", "reopened"] {
        let online = status(&outcome, "replace", name);
        assert_eq!(states(&online), ("online".into(), vec!["online".into(), "online".into()]), "{online}");
        assert_eq!(number(&online["redundancy"]["bytes_at_risk"]), 0, "{online}");
    }
    assert_eq!(detail(&outcome, "replace", "extents"), extents);

    // 4. Back after a controller reset: away, then exactly what it missed
    // copied.
    let degraded_on = detail(&outcome, "rejoin", "degraded on");
    assert!(degraded_on.contains("controller was reset"), "{degraded_on}");
    let away = status(&outcome, "rejoin", "away");
    assert_eq!(states(&away), ("degraded".into(), vec!["online".into(), "failed".into()]), "{away}");
    assert_eq!(
        away["devices"][1]["why"], "its controller was reset: writes since the last commit may be lost",
        "{away}"
    );
    let rejoined = status(&outcome, "rejoin", "rejoined");
    assert_eq!(states(&rejoined), ("resilvering".into(), vec!["online".into(), "resilvering".into()]), "{rejoined}");
    let rejoin = detail(&outcome, "rejoin", "rejoin");
    let missed_bytes = count_after(rejoin, "lacking") * 4096;
    assert!(missed_bytes > 0, "{rejoin}");
    assert_eq!(number(&rejoined["resilver"][0]["place"]), 1, "{rejoined}");
    assert_eq!(number(&rejoined["resilver"][0]["bytes_left"]), missed_bytes, "{rejoined}");
    assert_eq!(number(&rejoined["devices"][1]["missing_bytes"]), missed_bytes, "{rejoined}");
    let copied = detail(&outcome, "rejoin", "resilver");
    assert!(copied.starts_with(&format!("{missed_bytes} bytes copied of {missed_bytes} missing")), "{copied}");
    let resilvered = status(&outcome, "rejoin", "resilvered");
    assert_eq!(states(&resilvered), ("online".into(), vec!["online".into(), "online".into()]), "{resilvered}");
    let all = detail(&outcome, "rejoin", "extents");
    assert_eq!(count_after(all, "first"), first, "{all}");
    assert_eq!(count_after(all, "unplug"), unplugged, "{all}");
    assert_eq!(count_after(all, "uncommitted"), 16, "{all}");
    assert_eq!(count_after(all, "away"), 48, "{all}");

    // The operator's view, through the tool, along the way: degraded with
    // device 0 lost (its identity unknown to a new process), then online
    // on the replacement, and online at the end.
    check_tool_status(&outcome, "unplug", 3, "degraded", &[("failed", ""), ("online", ZONED)]);
    check_tool_status(&outcome, "replace", 0, "online", &[("online", SPARE), ("online", ZONED)]);
    check_tool_status(&outcome, "final", 0, "online", &[("online", SPARE), ("online", ZONED)]);

    // 5. A new process: online, the same extents.
    let last = status(&outcome, "final", "open");
    assert_eq!(states(&last), ("online".into(), vec!["online".into(), "online".into()]), "{last}");
    assert_eq!(number(&last["redundancy"]["extents_at_risk"]), 0, "{last}");
    assert_eq!(detail(&outcome, "final", "extents"), all);
}

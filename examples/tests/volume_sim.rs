//! The volume tool end to end on the simulator (`--sim`): each run builds
//! a mirrored ZNS volume in-process, tells it a story (online; place 1
//! given up and not given back; given up and given back), then runs the
//! command the way it runs on hardware. The tests check the exit status,
//! the JSON an operator's scripts read, and the refusals.

use serde_json::Value;
use std::process::{Command, Stdio};

const VOLUME: &str = env!("CARGO_BIN_EXE_volume");

/// Data the simulated volume holds (its stories write a quarter more).
const SIM: [&str; 2] = ["--sim", "4M"];

/// Runs `volume args` on the simulator, stdin not a terminal: its status,
/// stdout and stderr.
fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(VOLUME).args(args).args(SIM).stdin(Stdio::null()).output().expect("the tool runs");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code(), text(&output.stdout), text(&output.stderr))
}

/// Runs `volume args --json`, expecting exit status `status`: the object.
fn json(args: &[&str], status: i32) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let (code, stdout, stderr) = run(&args);
    assert_eq!(code, Some(status), "volume {args:?}: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("volume {args:?}: {e}: {stdout:?}"))
}

#[test]
fn status_of_an_online_mirror() {
    let status = json(&["status"], 0);
    assert_eq!(status["state"], "online");
    // Enum values in JSON are lowercase, like the states.
    assert_eq!(status["profile"], "mirror");
    let devices = status["devices"].as_array().expect("devices");
    assert_eq!(devices.len(), 2);
    for (place, device) in devices.iter().enumerate() {
        assert_eq!(device["state"], "online");
        assert_eq!(device["pci"], format!("sim{place}"));
        assert_eq!(device["errors"]["read"], 0);
        assert!(device["health"]["composite_temperature_kelvin"].as_u64().is_some_and(|k| k > 0), "{device}");
    }
    let (code, text, _) = run(&["status"]);
    assert_eq!(code, Some(0));
    assert!(text.contains(" state: ONLINE\n"), "{text}");
}

#[test]
fn a_mirror_missing_a_member_opens_only_degraded() {
    let (code, _, stderr) = run(&["status", "--sim-state", "degraded"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("pass --degraded"), "{stderr}");
    let status = json(&["status", "--sim-state", "degraded", "--degraded"], 3);
    assert_eq!(status["state"], "degraded");
    assert_eq!(status["devices"][1]["state"], "failed");
    assert_eq!(status["devices"][1]["pci"], "");
    assert_eq!(status["devices"][1]["health"], Value::Null);
    assert_eq!(status["redundancy"]["bytes_missing"], 1 << 20, "the quarter written without place 1");
    assert_eq!(status["redundancy"]["bytes_at_risk"], status["used_bytes"], "every extent has one copy available");
    let (code, text, _) = run(&["status", "--sim-state", "degraded", "--degraded", "--prometheus"]);
    assert_eq!(code, Some(3));
    assert!(text.contains("\nnvme_volume_state{state=\"degraded\"} 1\n"), "{text}");
    assert!(text.contains("\nnvme_volume_bytes_missing 1048576\n"), "{text}");
}

#[test]
fn a_member_that_comes_back_is_resilvered() {
    let status = json(&["status", "--sim-state", "resilvering"], 3);
    assert_eq!(status["state"], "resilvering");
    assert_eq!(status["resilver"][0]["place"], 1);
    let done = json(&["resilver", "--sim-state", "resilvering"], 0);
    assert_eq!(done["place"], 1);
    assert_eq!(done["complete"], true);
    assert_eq!(done["report"]["bytes_copied"], 1 << 20, "only what it missed");
    assert_eq!(done["report"]["verify"]["outcome"], "clean");
    assert_eq!(done["status"]["state"], "online");
    let (code, text, _) = run(&["resilver"]);
    assert_eq!(code, Some(0));
    assert!(text.contains("nothing to resilver"), "{text}");
}

#[test]
fn a_new_device_replaces_a_missing_one() {
    let done = json(&["replace", "--sim-state", "degraded", "--place", "1", "--yes"], 0);
    assert_eq!(done["new_device"]["pci"], "sim2");
    assert_eq!(done["complete"], true);
    assert_eq!(done["status"]["state"], "online");
    assert_eq!(done["status"]["devices"][1]["pci"], "sim2");
    // The old member is not blank: refused without --force, taken with it.
    let (code, _, stderr) = run(&["replace", "--sim-state", "degraded", "--place", "1", "--new-pci", "sim1", "--yes"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("not blank") && stderr.contains("--force"), "{stderr}");
    let forced =
        json(&["replace", "--sim-state", "degraded", "--place", "1", "--new-pci", "sim1", "--force", "--yes"], 0);
    assert_eq!(forced["status"]["state"], "online");
    // A place in use is not replaced; a device of the volume is not a new one.
    let (code, _, stderr) = run(&["replace", "--place", "1", "--yes"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("in use"), "{stderr}");
    let (code, _, stderr) = run(&["replace", "--place", "1", "--new-pci", "sim0"]);
    assert_eq!(code, Some(2), "{stderr}");
    let left = json(&["replace", "--sim-state", "degraded", "--place", "1", "--no-resilver", "--yes"], 0);
    assert_eq!(left["resilver"], Value::Null);
    assert_eq!(left["status"]["state"], "resilvering");
}

#[test]
fn check_writes_nothing_and_says_whether_open_would() {
    let clean = json(&["check"], 0);
    assert_eq!(clean["report"]["clean"], true);
    let degraded = json(&["check", "--sim-state", "degraded", "--degraded"], 3);
    assert_eq!(degraded["report"]["clean"], false);
    assert_eq!(degraded["report"]["missing_blocks"][1], 256);
}

#[test]
fn fail_gives_a_member_up_and_asks_first() {
    let failed = json(&["fail", "--place", "0", "--yes"], 0);
    assert_eq!(failed["status"]["state"], "degraded");
    assert_eq!(failed["status"]["devices"][0]["state"], "failed");
    assert_eq!(failed["status"]["devices"][0]["why"], "taken out by the operator");
    // The last device in use is not given up.
    let (code, _, stderr) = run(&["fail", "--sim-state", "degraded", "--degraded", "--place", "0", "--yes"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("last device"), "{stderr}");
}

#[test]
fn destroying_commands_need_yes_without_a_terminal() {
    // On the simulator too, as the help says.
    for args in [&["replace", "--sim-state", "degraded", "--place", "1"][..], &["fail", "--place", "1"]] {
        let (code, _, stderr) = run(args);
        assert_eq!(code, Some(1), "{args:?} --sim: {stderr}");
        assert!(stderr.contains("pass --yes"), "{args:?} --sim: {stderr}");
    }
    for args in [&["replace", "--place", "1", "--new-pci", "0000:09:00.0"][..], &["fail", "--place", "1"]] {
        let output = Command::new(VOLUME).args(args).stdin(Stdio::null()).output().expect("the tool runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("pass --yes"), "{args:?}: {stderr}");
        assert!(!stderr.to_lowercase().contains("vfio"), "{args:?} tried to open a device: {stderr}");
    }
}

/// A 3-copy mirror over four simulated namespaces (sim4 blank).
const POOL: [&str; 4] = ["--sim-devices", "4", "--sim-profile", "mirror3"];

fn pool(args: &[&str]) -> Vec<String> {
    args.iter().chain(POOL.iter()).map(|s| s.to_string()).collect()
}

#[test]
fn a_pool_grows_by_a_blank_device_and_shrinks_by_a_member() {
    let line = pool(&["add", "--yes"]);
    let added = json(&line.iter().map(String::as_str).collect::<Vec<_>>(), 0);
    assert_eq!(added["place"], 4, "{added}");
    assert_eq!(added["new_device"]["pci"], "sim4");
    let devices = added["status"]["devices"].as_array().expect("devices");
    assert_eq!(devices.len(), 5);
    assert!(devices.iter().all(|d| d["state"] == "online"), "{added}");
    assert!(devices[4]["metadata_bytes"].as_u64().is_some_and(|b| b > 0), "its label's zone: {added}");
    let line = pool(&["remove", "--yes", "--place", "3"]);
    let removed = json(&line.iter().map(String::as_str).collect::<Vec<_>>(), 0);
    assert_eq!(removed["removal"]["complete"], true, "{removed}");
    assert!(removed["removal"]["extents_moved"].as_u64().is_some_and(|n| n > 0), "{removed}");
    assert_eq!(removed["status"]["devices"].as_array().map(Vec::len), Some(3));
    assert_eq!(removed["status"]["state"], "online");
    // A member holding a metadata copy hands it to the last member, which
    // takes its place: three members hold a copy each after.
    let line = pool(&["remove", "--yes", "--place", "0"]);
    let removed = json(&line.iter().map(String::as_str).collect::<Vec<_>>(), 0);
    assert_eq!(removed["removal"]["complete"], true, "{removed}");
    let devices = removed["status"]["devices"].as_array().expect("devices");
    assert_eq!(devices.len(), 3, "{removed}");
    assert!(devices.iter().all(|d| d["metadata_bytes"] == devices[0]["metadata_bytes"]), "{removed}");
    // A mirror of two takes a third device, which takes the third
    // metadata copy.
    let added = json(&["add", "--yes"], 0);
    assert_eq!(added["place"], 2, "{added}");
    let devices = added["status"]["devices"].as_array().expect("devices");
    assert_eq!(devices.len(), 3, "{added}");
    assert!(devices.iter().all(|d| d["state"] == "online"), "{added}");
    // Nothing destroys without --yes and no terminal.
    let line = pool(&["remove", "--place", "3"]);
    let (code, _, stderr) = run(&line.iter().map(String::as_str).collect::<Vec<_>>());
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("--yes"), "{stderr}");
}

#[test]
fn a_lost_member_of_a_pool_is_rebuilt_onto_the_others() {
    let line = pool(&["rebuild", "--sim-state", "degraded"]);
    let rebuilt = json(&line.iter().map(String::as_str).collect::<Vec<_>>(), 0);
    assert_eq!(rebuilt["place"], 1, "the member the story pulled");
    assert_eq!(rebuilt["complete"], true, "{rebuilt}");
    assert_eq!(rebuilt["rebuild"]["distributed"], true);
    assert_eq!(rebuilt["status"]["redundancy"]["extents_at_risk"], 0, "{rebuilt}");
    // A story its profile cannot tell is refused before anything runs.
    let (code, _, stderr) = run(&["status", "--sim-devices", "2", "--sim-profile", "mirror3"]);
    assert_eq!(code, Some(2), "{stderr}");
}

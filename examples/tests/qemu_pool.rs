//! QEMU integration test of a pool through its life, in one boot, with the
//! tools an operator runs (`seqwrite`, `volume`, `scrub`), each step's JSON
//! checked on the host:
//!
//! 1. a 3-copy mirror over four controllers, two ZNS and two conventional
//!    (places 0 to 3), 30% filled;
//! 2. place 3 pulled (QMP `device_del`) while seqwrite writes 5% more:
//!    every write succeeds, the pool goes on degraded;
//! 3. place 1 pulled the same way during more writes: two devices gone,
//!    and nothing lost;
//! 4. a read-only scrub on the two left reads every extent from the copies
//!    there (degraded reads of every extent): clean;
//! 5. a blank controller hot-added (QMP `device_add`) takes place 1
//!    (`volume replace`), the resilver reading from every survivor;
//! 6. `volume rebuild`: place 3's copies written onto the three in use (the
//!    distributed rebuild), and `volume remove` drops the empty place: a
//!    pool of three, online;
//! 7. a second blank controller hot-added joins (`volume add`), takes new
//!    writes, and is removed again (`volume remove`, its copies moved to
//!    the others);
//! 8. a scrub of every copy: clean; `volume status`: online.

use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use vm_rig::{Controller, Outcome, Vm, GUEST_BDFS};

const MIB: u64 = 1 << 20;

/// Places 0 to 3 at format: the ZNS controllers on the root bus, the
/// conventional ones behind hot-plug root ports (their buses 01 and 02).
const ZNS_A: &str = GUEST_BDFS[1];
const CONV_B: &str = "0000:02:00.0";
const ZNS_C: &str = GUEST_BDFS[3];
const CONV_D: &str = "0000:01:00.0";
/// The blank controllers hot-added during the run (buses 03 and 04).
const SPARE_A: &str = "0000:03:00.0";
const SPARE_B: &str = "0000:04:00.0";

/// Markers the guest prints for the host to act on, and what QEMU is told.
const PULL_D: &str = "qemu-pool: pull place 3";
const PULL_B: &str = "qemu-pool: pull place 1";
const PLUG_A: &str = "qemu-pool: plug spare a";
const PLUG_B: &str = "qemu-pool: plug spare b";

/// Bound on one step in the guest.
const STEP_LIMIT_S: u64 = 240;

fn spare() -> Controller {
    Controller::nvme(512 * MIB).hot_added()
}

fn vm() -> Vm {
    Vm::new()
        .controller(Controller::nvme(512 * MIB).hotplug())
        .controller(Controller::zns(512 * MIB, 32 * MIB))
        .controller(Controller::nvme(512 * MIB).hotplug())
        .controller(Controller::zns(512 * MIB, 32 * MIB))
        .controller(spare())
        .controller(spare())
        .qmp_on_output(PULL_D, &[r#"{"execute":"device_del","arguments":{"id":"nvme0"}}"#])
        .qmp_on_output(PULL_B, &[r#"{"execute":"device_del","arguments":{"id":"nvme2"}}"#])
        .qmp_on_output(PLUG_A, &[&spare().hot_add_command(4)])
        .qmp_on_output(PLUG_B, &[&spare().hot_add_command(5)])
        .mem(2 << 30)
        .timeout(Duration::from_secs(1200))
}

fn pci(devices: &[&str]) -> String {
    devices.iter().map(|d| format!("--pci {d}")).collect::<Vec<_>>().join(" ")
}

fn script() -> String {
    let four = pci(&[ZNS_A, CONV_B, ZNS_C, CONV_D]);
    let without_d = pci(&[ZNS_A, CONV_B, ZNS_C]);
    let two = pci(&[ZNS_A, ZNS_C]);
    let three = pci(&[ZNS_A, SPARE_A, ZNS_C]);
    let with_b = pci(&[ZNS_A, SPARE_A, ZNS_C, SPARE_B]);
    let after = pci(&[SPARE_B, SPARE_A, ZNS_C]);
    let write = "--profile mirror3 --bs 256k --iodepth 8 --checksum-threads 2 --no-progress --json";
    format!(
        r#"step() {{
    name=$1; shift
    out=$(timeout -s KILL {STEP_LIMIT_S} "$@" 2>/tmp/err); rc=$?
    echo "@@ $name rc=$rc $out"
    [ $rc -le 3 ] || cat /tmp/err
}}
# write_while NAME MARKER SEQWRITE-ARGS...: seqwrite, and MARKER printed
# once its writes run (its checksum threads are up).
write_while() {{
    name=$1; marker=$2; shift 2
    timeout -s KILL {STEP_LIMIT_S} seqwrite "$@" > /tmp/w.json 2>/tmp/err &
    pid=$!; i=0
    while [ $i -lt 300 ] && [ "$(ls /proc/$pid/task 2>/dev/null | wc -l)" -lt 3 ] \
        && grep -qs '^State:[^Z]*$' /proc/$pid/status; do i=$((i + 1)); sleep 0.1; done
    echo "$marker"
    rc=0; wait $pid || rc=$?
    echo "@@ $name rc=$rc $(tr -d '\n' < /tmp/w.json)"
    [ $rc -eq 0 ] || cat /tmp/err
}}
# plug MARKER BDF: the host plugs a blank controller; bound to vfio-pci.
plug() {{
    echo "$1"; i=0
    until [ "$(cat /sys/bus/pci/devices/$2/class 2>/dev/null)" = 0x010802 ]; do
        i=$((i + 1)); [ $i -lt 300 ] || {{ echo "@@ plug-$2 rc=1 never appeared"; return; }}; sleep 0.1
    done
    echo vfio-pci > /sys/bus/pci/devices/$2/driver_override
    echo $2 > /sys/bus/pci/drivers_probe
}}
step format seqwrite {four} {write} --format --yes --size 30%
step status-formatted volume status {four} --json
write_while write-pull-3 '{PULL_D}' {four} {write} --degraded --size 5%
step status-one-gone volume status {without_d} --degraded --json
write_while write-pull-1 '{PULL_B}' {without_d} {write} --degraded --size 5%
step status-two-gone volume status {two} --degraded --json
step degraded-scrub scrub {two} --degraded --readonly --no-progress --json
plug '{PLUG_A}' {SPARE_A}
step replace volume replace {two} --place 1 --new-pci {SPARE_A} --yes --no-progress --json
step rebuild volume rebuild {three} --place 3 --no-progress --json
step remove-empty volume remove {three} --degraded --place 3 --yes --no-progress --json
step status-three volume status {three} --json
plug '{PLUG_B}' {SPARE_B}
step add volume add {three} --new-pci {SPARE_B} --yes --json
step write-four seqwrite {with_b} {write} --size 5%
step remove-first volume remove {with_b} --place 0 --yes --no-progress --json
step scrub scrub {after} --no-progress --json
step status-final volume status {after} --json
"#
    )
}

/// A step's exit status and JSON.
struct Step {
    rc: i32,
    json: Value,
}

fn steps(outcome: &Outcome) -> BTreeMap<String, Step> {
    outcome
        .output
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("@@ ")?;
            let (name, rest) = rest.split_once(" rc=")?;
            let (rc, json) = rest.split_once(' ').unwrap_or((rest, ""));
            let json = serde_json::from_str(json).unwrap_or(Value::Null);
            Some((name.to_string(), Step { rc: rc.parse().ok()?, json }))
        })
        .collect()
}

/// The volume's state and each device's (state, pci), from a status.
fn states(status: &Value) -> (String, Vec<(String, String)>) {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let devices = status["devices"].as_array().unwrap_or_else(|| panic!("no devices in {status}"));
    (text(&status["state"]), devices.iter().map(|d| (text(&d["state"]), text(&d["pci"]))).collect())
}

fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(s, p)| (s.to_string(), p.to_string())).collect()
}

#[test]
fn a_pool_loses_two_devices_is_rebuilt_grows_and_shrinks_and_loses_nothing() {
    let outcome = vm().run(&["sh", "-c", &script()]).unwrap_or_else(|e| panic!("VM run failed: {e}"));
    eprintln!("{:.1} s in the VM", outcome.elapsed.as_secs_f64());
    let steps = steps(&outcome);
    for (name, step) in &steps {
        eprintln!("{name}: exit {}, {} bytes of JSON", step.rc, step.json.to_string().len());
    }
    let step = |name: &str, rc: i32| -> &Value {
        let step = steps.get(name).unwrap_or_else(|| panic!("no step {name}:\n{}", outcome.report()));
        assert_eq!(step.rc, rc, "{name}: {}\n{}", step.json, outcome.report());
        &step.json
    };
    let format = step("format", 0);
    assert_eq!(format["partial"], false, "{format}");
    let written = format["bytes"].as_u64().expect("bytes");
    assert!(written > 0);

    let status = step("status-formatted", 0);
    assert_eq!(status["profile"], "mirror3");
    let online = owned(&[("online", ZNS_A), ("online", CONV_B), ("online", ZNS_C), ("online", CONV_D)]);
    assert_eq!(states(status), ("online".into(), online));

    // Two pulls during writes: every write acknowledged.
    for name in ["write-pull-3", "write-pull-1"] {
        let write = step(name, 0);
        assert_eq!(write["partial"], false, "{name}: {write}");
    }
    let status = step("status-one-gone", 3);
    let one_gone = owned(&[("online", ZNS_A), ("online", CONV_B), ("online", ZNS_C), ("failed", "")]);
    assert_eq!(states(status), ("degraded".into(), one_gone));
    let status = step("status-two-gone", 3);
    let two_gone = owned(&[("online", ZNS_A), ("failed", ""), ("online", ZNS_C), ("failed", "")]);
    assert_eq!(states(status), ("degraded".into(), two_gone));
    assert_eq!(status["redundancy"]["extents_lost"], 0, "{status}");
    let at_risk = status["redundancy"]["extents_at_risk"].as_u64().expect("at risk");
    assert!(at_risk > 0, "{status}");

    // Every extent read from the copies on the two left.
    let scrub = step("degraded-scrub", 0);
    assert_eq!(scrub["report"]["outcome"], "clean", "{scrub}");
    assert_eq!(scrub["report"]["uncorrectable"], Value::Array(vec![]), "{scrub}");
    assert!(scrub["report"]["bytes_verified"].as_u64().is_some_and(|b| b >= written), "{scrub}");

    // Place 1 replaced, resilvered from every survivor.
    let replace = step("replace", 0);
    assert_eq!(replace["complete"], true, "{replace}");
    let sources = replace["resilver"]["source_lanes"].as_array().expect("source lanes");
    assert_eq!(sources.len(), 2, "the two in use: {replace}");

    // Place 3's copies onto the three in use, and the empty place dropped.
    let rebuild = step("rebuild", 0);
    assert_eq!(rebuild["complete"], true, "{rebuild}");
    assert_eq!(rebuild["rebuild"]["distributed"], true);
    assert_eq!(rebuild["status"]["redundancy"]["extents_at_risk"], 0, "{rebuild}");
    let removed = step("remove-empty", 0);
    assert_eq!(removed["removal"]["complete"], true, "{removed}");
    assert_eq!(removed["removal"]["extents_moved"], 0, "{removed}");
    let three = owned(&[("online", ZNS_A), ("online", SPARE_A), ("online", ZNS_C)]);
    assert_eq!(states(step("status-three", 0)), ("online".into(), three));

    // A blank controller joins and takes writes; then place 0, which holds
    // a metadata copy, leaves: the added one takes its place and its copy.
    let added = step("add", 0);
    assert_eq!(added["place"], 3, "{added}");
    let four = owned(&[("online", ZNS_A), ("online", SPARE_A), ("online", ZNS_C), ("online", SPARE_B)]);
    assert_eq!(states(&added["status"]), ("online".into(), four));
    let write = step("write-four", 0);
    assert_eq!(write["partial"], false, "{write}");
    let removed = step("remove-first", 0);
    assert_eq!(removed["removal"]["complete"], true, "{removed}");
    assert!(removed["removal"]["extents_moved"].as_u64().is_some_and(|n| n > 0), "it held copies: {removed}");
    let after = owned(&[("online", SPARE_B), ("online", SPARE_A), ("online", ZNS_C)]);
    assert_eq!(states(&removed["status"]), ("online".into(), after.clone()));
    // Three metadata copies again, the added device's among them: it
    // holds as much as the other conventional spare, which took place 1's
    // copy by the replace.
    let metadata: Vec<u64> = removed["status"]["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .map(|d| d["metadata_bytes"].as_u64().expect("metadata bytes"))
        .collect();
    assert!(metadata[0] > 0 && metadata[0] == metadata[1], "{metadata:?}");

    // Every copy of everything, clean.
    let scrub = step("scrub", 0);
    assert_eq!(scrub["report"]["outcome"], "clean", "{scrub}");
    assert_eq!(scrub["report"]["corrected_blocks"], 0, "{scrub}");
    let status = step("status-final", 0);
    assert_eq!(states(status), ("online".into(), after));
    assert_eq!(status["redundancy"]["extents_at_risk"], 0, "{status}");
    assert_eq!(status["redundancy"]["extents_lost"], 0, "{status}");
}

//! QEMU integration test of a mirror whose members went on apart, in one
//! boot, with the tools an operator runs:
//!
//! 1. `seqwrite --format` makes a mirror across a conventional controller
//!    behind a hot-plug port (A) and a ZNS one (B), and fills part of it.
//! 2. A second `seqwrite --degraded` writes while QEMU unplugs A
//!    (`device_del`): the volume gives A up and goes on, on B alone. The
//!    writer is slowed (a 30 ms sleep per idle poll, one write in flight:
//!    about 10 s) so that it is still writing when the guest lets A go,
//!    which takes seconds after the unplug (pciehp's attention button);
//!    at full speed it could end first, and A would then be stale, not
//!    diverged.
//! 3. A comes back in its slot (QMP `device_add` on its own image, as a
//!    drive re-seated), and a new process opens it alone (`seqwrite
//!    --degraded --pci A`) and writes: both sides went on alone.
//! 4. Given both, `volume status --json` shows the divergence (exit 3)
//!    and changes nothing; `seqwrite` on both refuses.
//! 5. `volume resolve --keep B` rebuilds A from B; `scrub` of both is
//!    clean and `volume status` online.

use serde_json::Value;
use std::time::Duration;
use vm_rig::{Controller, Outcome, Vm, GUEST_BDFS};

const MIB: u64 = 1 << 20;

/// A, behind a root port of its own; B on the root bus.
const PULLED: &str = "0000:01:00.0";
const ZONED: &str = GUEST_BDFS[1];

const PULL_MARKER: &str = "qemu-diverged: pull A";
const UNPLUG: &str = r#"{"execute":"device_del","arguments":{"id":"nvme0"}}"#;
const PLUG_MARKER: &str = "qemu-diverged: plug A back";

/// A's image, opened again under a new node name when QEMU deleted the
/// `-drive` with the device (it does for `if=none` drives), then A's
/// controller on it in the same slot, with its namespace on the
/// controller itself (QEMU cannot hot-plug an `nvme-ns`).
fn replug(image: &str) -> [String; 2] {
    [
        format!(
            r#"{{"execute":"blockdev-add","arguments":{{"driver":"raw","node-name":"back0","file":{{"driver":"file","filename":"{image}"}}}}}}"#
        ),
        r#"{"execute":"device_add","arguments":{"driver":"nvme","id":"nvme0b","bus":"rp0","serial":"rig0b","drive":"back0","logical_block_size":512,"physical_block_size":512}}"#.to_string(),
    ]
}

/// Bound on the whole boot.
const LIMIT_S: u64 = 900;

fn script() -> String {
    format!(
        "set -e\n\
         echo '== a mirror across A and B'\n\
         seqwrite --pci {PULLED} --pci {ZONED} --profile mirror --format --yes --bs 256k --size 20% --no-progress\n\
         echo '== writes while A is pulled'\n\
         seqwrite --pci {PULLED} --pci {ZONED} --profile mirror --degraded --bs 256k --size 60% \
         --poll-sleep-us 30000 --no-progress > /tmp/pulled.txt 2>&1 &\n\
         pid=$!\n\
         i=0\n\
         while [ $i -lt 300 ] && [ \"$(ls /proc/$pid/task 2>/dev/null | wc -l)\" -lt 2 ] \\\n\
             && grep -qs '^State:[^Z]*$' /proc/$pid/status; do\n\
             i=$((i + 1)); sleep 0.1\n\
         done\n\
         echo '{PULL_MARKER}'\n\
         status=0; wait $pid || status=$?\n\
         cat /tmp/pulled.txt\n\
         echo \"qemu-diverged: pulled-writes exit $status\"\n\
         i=0\n\
         while [ -e /sys/bus/pci/devices/{PULLED} ]; do\n\
             i=$((i + 1)); [ $i -lt 300 ] || {{ echo 'A never left'; exit 1; }}; sleep 0.1\n\
         done\n\
         echo '== A back in its slot, opened alone and written'\n\
         echo '{PLUG_MARKER}'\n\
         i=0\n\
         until [ \"$(cat /sys/bus/pci/devices/{PULLED}/class 2>/dev/null)\" = 0x010802 ]; do\n\
             i=$((i + 1)); [ $i -lt 300 ] || {{ echo 'A never came back'; exit 1; }}; sleep 0.1\n\
         done\n\
         echo vfio-pci > /sys/bus/pci/devices/{PULLED}/driver_override\n\
         echo {PULLED} > /sys/bus/pci/drivers_probe\n\
         seqwrite --pci {PULLED} --degraded --bs 256k --size 5% --no-progress\n\
         echo '== both given: the divergence'\n\
         status=0; volume status --pci {PULLED} --pci {ZONED} --json > /tmp/status.json || status=$?\n\
         echo \"qemu-diverged: status exit $status $(tr -d '\\n' < /tmp/status.json)\"\n\
         status=0; seqwrite --pci {PULLED} --pci {ZONED} --profile mirror --bs 256k --size 1% --no-progress \
         2> /tmp/refused.txt \
         || status=$?\n\
         echo \"qemu-diverged: seqwrite on both exit $status $(tr -d '\\n' < /tmp/refused.txt)\"\n\
         echo '== resolve: keep B, rebuild A'\n\
         volume resolve --pci {PULLED} --pci {ZONED} --keep {ZONED} --yes --no-progress\n\
         echo '== scrub and status'\n\
         scrub --pci {PULLED} --pci {ZONED} --no-progress\n\
         status=0; volume status --pci {PULLED} --pci {ZONED} --json > /tmp/status.json || status=$?\n\
         echo \"qemu-diverged: final status exit $status $(tr -d '\\n' < /tmp/status.json)\"\n"
    )
}

/// The text after `prefix` on the line that holds it.
fn line_after<'a>(outcome: &'a Outcome, prefix: &str) -> &'a str {
    let line = outcome.output.lines().find_map(|l| l.split_once(prefix).map(|(_, rest)| rest));
    line.unwrap_or_else(|| panic!("no {prefix:?} line in\n{}", outcome.report()))
}

/// `exit N JSON` after `prefix`.
fn exit_and_json(outcome: &Outcome, prefix: &str) -> (i32, Value) {
    let rest = line_after(outcome, prefix);
    let (code, json) = rest.split_once(' ').unwrap_or_else(|| panic!("{prefix}{rest}"));
    let value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{prefix}: {e}: {json}\n{}", outcome.report()));
    (code.parse().unwrap_or_else(|e| panic!("{prefix}{code}: {e}")), value)
}

/// A mirror pulled apart mid-write, each side written alone, is refused
/// together and shown as diverged; keeping one side rebuilds the other,
/// and a scrub of both is clean.
#[test]
fn members_pulled_apart_and_written_alone_are_shown_diverged_and_resolved() {
    // The images where the host can name A's for QMP.
    let dir = std::env::temp_dir().join(format!("qemu-diverged-{}", std::process::id()));
    let image = dir.join("nvme0.img");
    let replug = replug(image.to_str().expect("a UTF-8 path"));
    let vm = Vm::new()
        .controller(Controller::nvme(256 * MIB).hotplug())
        .controller(Controller::zns(256 * MIB, 16 * MIB))
        .images(&dir)
        .qmp_on_output(PULL_MARKER, &[UNPLUG])
        .qmp_on_output(PLUG_MARKER, &[&replug[0], &replug[1]])
        .timeout(Duration::from_secs(LIMIT_S));
    let outcome = vm.run(&["sh", "-c", &script()]);
    let _ = std::fs::remove_dir_all(&dir);
    let outcome = outcome.unwrap_or_else(|e| panic!("VM run failed: {e}"));
    assert_eq!(outcome.status, 0, "{}", outcome.report());
    eprintln!("{:.1} s in the VM:\n{}", outcome.elapsed.as_secs_f64(), outcome.output);
    assert_eq!(line_after(&outcome, "qemu-diverged: pulled-writes exit ").trim(), "0", "{}", outcome.report());
    assert!(outcome.output.contains("given up"), "A was not given up while B was written: {}", outcome.report());
    let (code, status) = exit_and_json(&outcome, "qemu-diverged: status exit ");
    assert_eq!((code, status["state"].as_str()), (3, Some("diverged")), "{status}");
    let sides = status["sides"].as_array().expect("both sides");
    assert_eq!(sides.len(), 2, "{status}");
    for side in sides {
        assert!(side["extents_only_here"].as_u64().unwrap() > 0, "each side wrote alone: {status}");
    }
    let refused = line_after(&outcome, "qemu-diverged: seqwrite on both exit ");
    assert!(refused.starts_with("1 ") && refused.contains("went on apart"), "{refused}");
    assert!(!refused.contains("--format"), "{refused}");
    let (code, status) = exit_and_json(&outcome, "qemu-diverged: final status exit ");
    assert_eq!((code, status["state"].as_str()), (0, Some("online")), "{status}");
}

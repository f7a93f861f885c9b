//! `hack/run`: the main job, in one VM. A conventional controller and a
//! ZNS controller, both owned by our driver, their namespaces formatted
//! with 8 bytes of metadata per LBA; a mirrored volume across them that
//! keeps every block's checksum in that metadata (block tags);
//! seqwrite over most of it; bytes of one copy flipped from the host while
//! the guest runs; scrub finding and repairing them; a second scrub clean.
//! Then the conventional controller is pulled (QMP `device_del`) while
//! seqwrite runs and the volume carries on degraded; `volume status` says
//! what is at risk; a blank controller is plugged into an empty slot
//! (QMP `device_add`), formatted to the volume's LBA format, takes the
//! pulled one's place, and the resilver brings it up to date; a scrub comes
//! back clean.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vm_rig::{Controller, Vm};

const USAGE: &str = "\
usage: hack/run [--timeout SECONDS]

Boots one VM (QEMU TCG) with a 1 GiB conventional NVMe controller (behind
a hot-plug port), a 2 GiB ZNS controller (64 MiB zones) and an empty
hot-plug slot, all driven by our userspace driver, and shows the stack end
to end:

  1. identify the two (one line each)
  2. seqwrite: a mirrored volume across them, 80% filled with 256 KiB
     writes, checksummed
  3. the host flips bytes in eight blocks of the conventional copy
  4. scrub: finds the bad blocks, repairs them from the ZNS copy
  5. scrub --readonly: clean
  6. seqwrite --degraded writes 10% more while the host pulls the
     conventional controller (QMP device_del): the volume gives it up and
     carries on degraded on the ZNS copy
  7. volume status: degraded, and what is at risk (text, then JSON)
  8. the host plugs a blank 1 GiB controller into the empty slot (QMP
     device_add); the guest binds it to vfio-pci
  9. volume replace --format: it takes the volume's LBA format (Format
     NVM, 8 bytes of metadata per block) and the pulled one's place, and
     the resilver writes every copy it lacks, then verifies them
 10. scrub: both copies, clean; volume status: online

Options:
  --timeout SECONDS   hard limit on the VM (default 420)
  -h, --help          this text";

/// The conventional controller sits behind a PCIe root port of its own so
/// QEMU can unplug it: the guest finds it on the port's bus.
const CONVENTIONAL: &str = "0000:01:00.0";
const ZONED: &str = "0000:00:11.0";
/// The replacement: plugged into an empty slot (the third controller's
/// root port, whose bus is 02) during the run, blank, formatted without
/// metadata; `volume replace --format` gives it the volume's format.
const SPARE: &str = "0000:02:00.0";
/// The spare's place among the VM's controllers.
const SPARE_INDEX: usize = 2;
/// Blocks flipped, 1 MiB apart, from the start of the first data zone.
const FLIPS: u64 = 8;

/// The guest asks for the pull with this line; the rig then sends QEMU
/// `UNPLUG` (the conventional controller is QOM device `nvme0`).
const PULL_MARKER: &str = "rig-run: pull the conventional controller";
const UNPLUG: &str = r#"{"execute":"device_del","arguments":{"id":"nvme0"}}"#;

/// The guest asks for the spare with this line; the rig then plugs it in
/// (QMP `device_add`).
const PLUG_MARKER: &str = "rig-run: plug the spare into the empty slot";

fn spare() -> Controller {
    Controller::nvme(1 << 30).hot_added()
}

fn guest_script() -> String {
    format!(
        "set -e\n\
         echo '== identify'\n\
         identify --pci {CONVENTIONAL} | sed -n 1p\n\
         identify --pci {ZONED} | sed -n 1p\n\
         echo '== seqwrite: a mirror across the two, 80% of it, 256 KiB writes at QD8'\n\
         seqwrite --pci {CONVENTIONAL} --pci {ZONED} --profile mirror --format --yes --bs 256k --size 80% \
         --iodepth 8 --checksum-threads 2 --no-progress | tee /tmp/seqwrite.txt\n\
         offset=$(sed -n 's/.*data zones from byte \\([0-9]*\\).*/\\1/p' /tmp/seqwrite.txt)\n\
         echo '== corruption: the host flips bytes in {FLIPS} blocks of the conventional copy'\n\
         echo \"rig-run: corrupt $offset\"\n\
         i=0\n\
         while scrub --pci {CONVENTIONAL} --pci {ZONED} --readonly --copy 0 --json > /tmp/check.json 2>/dev/null; do\n\
             i=$((i + 1)); [ $i -lt 30 ] || {{ echo 'the corruption never showed'; exit 1; }}; sleep 1\n\
         done\n\
         echo '== scrub: verify both copies, repair from the good one'\n\
         scrub --pci {CONVENTIONAL} --pci {ZONED} --no-progress\n\
         echo '== scrub again, read-only'\n\
         scrub --pci {CONVENTIONAL} --pci {ZONED} --readonly --no-progress\n\
         echo '== seqwrite --degraded, 10% more: the host pulls the conventional controller meanwhile'\n\
         seqwrite --pci {CONVENTIONAL} --pci {ZONED} --profile mirror --degraded --bs 256k --size 10% \
         --iodepth 8 --checksum-threads 2 --no-progress > /tmp/seqwrite-degraded.txt 2>&1 &\n\
         pid=$!\n\
         # seqwrite starts its two checksum threads just before its first write:\n\
         # wait (up to 30 s) for three threads, or for it to end.\n\
         i=0\n\
         while [ $i -lt 300 ] && [ \"$(ls /proc/$pid/task 2>/dev/null | wc -l)\" -lt 3 ] \\\n\
             && grep -qs '^State:[^Z]*$' /proc/$pid/status; do\n\
             i=$((i + 1)); sleep 0.1\n\
         done\n\
         echo '{PULL_MARKER}'\n\
         status=0; wait $pid || status=$?\n\
         cat /tmp/seqwrite-degraded.txt\n\
         [ $status -eq 0 ] || {{ echo \"seqwrite exited $status\"; exit 1; }}\n\
         echo '== volume status: the survivor alone (exit status 3: it needs attention)'\n\
         volume status --pci {ZONED} --degraded || [ $? -eq 3 ]\n\
         volume status --pci {ZONED} --degraded --json > /tmp/status.json || [ $? -eq 3 ]\n\
         grep -q '\"state\":\"degraded\"' /tmp/status.json || {{ echo 'the volume is not degraded'; exit 1; }}\n\
         echo \"as JSON (volume status --json): ... $(grep -o '\"redundancy\":{{[^}}]*}}' /tmp/status.json) ...\"\n\
         echo '== a blank controller goes into the empty slot (QMP device_add); the guest binds it to vfio-pci'\n\
         echo '{PLUG_MARKER}'\n\
         i=0\n\
         until [ \"$(cat /sys/bus/pci/devices/{SPARE}/class 2>/dev/null)\" = 0x010802 ]; do\n\
             i=$((i + 1)); [ $i -lt 300 ] || {{ echo 'the new controller never appeared'; exit 1; }}; sleep 0.1\n\
         done\n\
         echo vfio-pci > /sys/bus/pci/devices/{SPARE}/driver_override\n\
         echo {SPARE} > /sys/bus/pci/drivers_probe\n\
         identify --pci {SPARE} | sed -n 1p\n\
         echo '== volume replace --format: it takes the volume format (8 bytes of metadata per block) and place 0; the resilver brings it up to date'\n\
         volume replace --pci {ZONED} --place 0 --new-pci {SPARE} --format --yes --no-progress\n\
         echo '== scrub: both copies'\n\
         scrub --pci {SPARE} --pci {ZONED} --no-progress\n\
         echo '== volume status'\n\
         volume status --pci {SPARE} --pci {ZONED}\n"
    )
}

/// Flips one byte in each of `FLIPS` blocks of `image`, 1 MiB apart from
/// `offset`.
fn corrupt(image: &PathBuf, offset: u64) -> std::io::Result<()> {
    let mut file = OpenOptions::new().read(true).write(true).open(image)?;
    for k in 0..FLIPS {
        let at = offset + k * (1 << 20) + 100;
        let mut byte = [0u8];
        file.seek(SeekFrom::Start(at))?;
        file.read_exact(&mut byte)?;
        byte[0] ^= 0xFF;
        file.seek(SeekFrom::Start(at))?;
        file.write_all(&byte)?;
    }
    file.sync_all()
}

fn main() -> ExitCode {
    let mut timeout = 420u64;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            "--timeout" => match args.next().and_then(|v| v.parse().ok()) {
                Some(seconds) => timeout = seconds,
                None => {
                    eprintln!("hack/run: --timeout needs a number of seconds");
                    return ExitCode::from(2);
                }
            },
            other => {
                eprintln!("hack/run: unknown option {other}\n\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let images = std::env::temp_dir().join(format!("hack-run-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&images) {
        eprintln!("hack/run: {}: {e}", images.display());
        return ExitCode::from(2);
    }
    let image = images.join("nvme0.img");
    let corrupted: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let observer = Arc::clone(&corrupted);
    let started = Instant::now();
    let vm = Vm::new()
        .controller(Controller::nvme(1 << 30).metadata(8).hotplug())
        .controller(Controller::zns(2 << 30, 64 << 20).metadata(8))
        .controller(spare())
        .qmp_on_output(PULL_MARKER, &[UNPLUG])
        .qmp_on_output(PLUG_MARKER, &[&spare().hot_add_command(SPARE_INDEX)])
        .images(&images)
        .mem(2 << 30)
        .stream(true)
        .timeout(Duration::from_secs(timeout))
        .on_line(move |line| {
            let Some(offset) = line.trim().strip_prefix("rig-run: corrupt ") else { return };
            let result = offset
                .trim()
                .parse::<u64>()
                .map_err(|e| format!("offset {offset:?}: {e}"))
                .and_then(|offset| corrupt(&image, offset).map_err(|e| e.to_string()).map(|()| offset));
            let message = match result {
                Ok(offset) => format!("host: flipped a byte in {FLIPS} blocks of nvme0.img from byte {offset}"),
                Err(e) => format!("host: corrupting failed: {e}"),
            };
            eprintln!("{message}");
            if let Ok(mut slot) = observer.lock() {
                *slot = Some(message);
            }
        });
    let outcome = vm.run(&["sh", "-c", &guest_script()]);
    let _ = std::fs::remove_dir_all(&images);
    match outcome {
        Ok(outcome) if outcome.status == 0 => {
            eprintln!("\nhack/run: done in {:.0} s", started.elapsed().as_secs_f64());
            ExitCode::SUCCESS
        }
        Ok(outcome) => {
            eprintln!("hack/run: the guest exited {}", outcome.status);
            ExitCode::FAILURE
        }
        Err(e @ vm_rig::Error::QemuKilled { .. }) => {
            // Not a flake to retry: QEMU crashing is a bug to find
            // (docs/rig.md, "QEMU and removal").
            eprintln!("hack/run: {e}\nreproduce: hack/run (the run failed; docs/rig.md says how to keep QEMU's core)");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("hack/run: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The guest runs the script with busybox's `sh`; the host's parses
    /// the same language.
    #[test]
    fn the_guest_script_parses() {
        let output = std::process::Command::new("sh").args(["-n", "-c", &guest_script()]).output().expect("sh");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    }
}

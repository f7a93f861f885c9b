//! `hack/run`: the main job, in one VM. A pool of four controllers, two
//! conventional and two ZNS, all owned by our driver; a 3-copy mirror over
//! them, each copy of every extent on its own device, every block
//! checksummed; seqwrite over a good part of it; bytes of one device's
//! copies flipped from the host while the guest runs; scrub finding and
//! repairing them from the other copies; a second scrub clean. Then one
//! conventional controller is pulled (QMP `device_del`) while seqwrite
//! runs and the pool carries on degraded; `volume status` says what is at
//! risk; `volume rebuild` writes the lost device's copies onto the three
//! left, read from all of them at once (the distributed rebuild, no new
//! device), and `volume remove` drops its empty place; a blank controller
//! plugged into an empty slot (QMP `device_add`) joins the pool (`volume
//! add`); a scrub of every copy comes back clean.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vm_rig::{Controller, Vm, GUEST_BDFS};

const USAGE: &str = "\
usage: hack/run [--timeout SECONDS]

Boots one VM (QEMU TCG) with four 1 GiB NVMe controllers, two conventional
(one behind a hot-plug port) and two ZNS (64 MiB zones), and an empty
hot-plug slot, all driven by our userspace driver, and shows the stack end
to end:

  1. identify the four (one line each)
  2. seqwrite: a pool of the four with a 3-copy mirror (each extent's copies
     on three distinct devices, chosen per extent), 40% filled with 256 KiB
     writes, checksummed
  3. the host flips bytes in eight blocks of the first device's copies
  4. scrub: finds the bad blocks, repairs them from the other copies
  5. scrub --readonly: clean
  6. seqwrite --degraded writes 5% more while the host pulls the hot-plug
     conventional controller (QMP device_del): the pool gives it up and
     carries on with full copies on the three left
  7. volume status: degraded, and what is at risk (text, then JSON)
  8. volume rebuild: the pulled device's copies written onto the three
     left, read from all of them at once (no new device); volume remove:
     its empty place leaves, and the pool of three is whole
  9. the host plugs a blank 1 GiB controller into the empty slot (QMP
     device_add); the guest binds it to vfio-pci; volume add: it joins the
     pool, and new extents go to it
 10. scrub: every copy, clean; volume status: online

Options:
  --timeout SECONDS   hard limit on the VM (default 600)
  -h, --help          this text";

/// Places 0 to 3 of the pool, in the order seqwrite formats them: the
/// conventional controller on the root bus first (its copies are the ones
/// flipped), the two ZNS ones, and last the conventional one behind a
/// PCIe root port of its own, so that QEMU can unplug it (the guest finds
/// it on the port's bus). Place 3 holds no metadata copy: once rebuilt
/// elsewhere, its place can be removed.
const CONVENTIONAL: &str = GUEST_BDFS[2];
const ZONED_A: &str = GUEST_BDFS[1];
const ZONED_B: &str = GUEST_BDFS[3];
const PULLED: &str = "0000:01:00.0";
/// The new member: plugged into an empty slot (the fifth controller's root
/// port, whose bus is 02) during the run, blank.
const SPARE: &str = "0000:02:00.0";
/// The spare's place among the VM's controllers.
const SPARE_INDEX: usize = 4;
/// The image of the controller whose copies are flipped.
const CORRUPTED_IMAGE: &str = "nvme2.img";
/// Blocks flipped, 1 MiB apart, from the start of the first data zone.
const FLIPS: u64 = 8;

/// The guest asks for the pull with this line; the rig then sends QEMU
/// `UNPLUG` (the pulled controller is QOM device `nvme0`).
const PULL_MARKER: &str = "rig-run: pull the hot-plug conventional controller";
const UNPLUG: &str = r#"{"execute":"device_del","arguments":{"id":"nvme0"}}"#;

/// The guest asks for the spare with this line; the rig then plugs it in
/// (QMP `device_add`).
const PLUG_MARKER: &str = "rig-run: plug the spare into the empty slot";

fn spare() -> Controller {
    Controller::nvme(1 << 30).hot_added()
}

fn guest_script() -> String {
    let pool = format!("--pci {CONVENTIONAL} --pci {ZONED_A} --pci {ZONED_B} --pci {PULLED}");
    let three = format!("--pci {CONVENTIONAL} --pci {ZONED_A} --pci {ZONED_B}");
    format!(
        "set -e\n\
         echo '== identify'\n\
         for pci in {CONVENTIONAL} {ZONED_A} {ZONED_B} {PULLED}; do identify --pci $pci | sed -n 1p; done\n\
         echo '== seqwrite: a pool of the four, a 3-copy mirror, 40% of it, 256 KiB writes at QD8'\n\
         seqwrite {pool} --profile mirror3 --format --yes --bs 256k --size 40% \
         --iodepth 8 --checksum-threads 2 --no-progress | tee /tmp/seqwrite.txt\n\
         offset=$(sed -n 's/.*data zones from byte \\([0-9]*\\).*/\\1/p' /tmp/seqwrite.txt)\n\
         echo '== corruption: the host flips bytes in {FLIPS} blocks of the copies on the first device'\n\
         echo \"rig-run: corrupt $offset\"\n\
         i=0\n\
         while scrub {pool} --readonly --copy 0 --json > /tmp/check.json 2>/dev/null; do\n\
             i=$((i + 1)); [ $i -lt 30 ] || {{ echo 'the corruption never showed'; exit 1; }}; sleep 1\n\
         done\n\
         echo '== scrub: verify every copy, repair from the good ones'\n\
         scrub {pool} --no-progress\n\
         echo '== scrub again, read-only'\n\
         scrub {pool} --readonly --no-progress\n\
         echo '== seqwrite --degraded, 5% more: the host pulls the hot-plug controller (place 3) meanwhile'\n\
         seqwrite {pool} --profile mirror3 --degraded --bs 256k --size 5% \
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
         echo '== volume status: three devices left (exit status 3: it needs attention)'\n\
         volume status {three} --degraded || [ $? -eq 3 ]\n\
         volume status {three} --degraded --json > /tmp/status.json || [ $? -eq 3 ]\n\
         grep -q '\"state\":\"degraded\"' /tmp/status.json || {{ echo 'the pool is not degraded'; exit 1; }}\n\
         echo \"as JSON (volume status --json): ... $(grep -o '\"redundancy\":{{[^}}]*}}' /tmp/status.json) ...\"\n\
         echo '== volume rebuild: the copies of place 3 onto the three left, read from all of them (no new device)'\n\
         volume rebuild {three} --place 3 --no-progress\n\
         echo '== volume remove: its empty place leaves; the pool of three is whole'\n\
         volume remove {three} --degraded --place 3 --yes --no-progress\n\
         volume status {three}\n\
         echo '== a blank controller goes into the empty slot (QMP device_add); the guest binds it to vfio-pci'\n\
         echo '{PLUG_MARKER}'\n\
         i=0\n\
         until [ \"$(cat /sys/bus/pci/devices/{SPARE}/class 2>/dev/null)\" = 0x010802 ]; do\n\
             i=$((i + 1)); [ $i -lt 300 ] || {{ echo 'the new controller never appeared'; exit 1; }}; sleep 0.1\n\
         done\n\
         echo vfio-pci > /sys/bus/pci/devices/{SPARE}/driver_override\n\
         echo {SPARE} > /sys/bus/pci/drivers_probe\n\
         identify --pci {SPARE} | sed -n 1p\n\
         echo '== volume add: it joins the pool, as place 3; new extents go to it'\n\
         volume add {three} --new-pci {SPARE} --yes\n\
         seqwrite {three} --pci {SPARE} --profile mirror3 --bs 256k --size 5% --iodepth 8 --checksum-threads 2 \
         --no-progress | sed -n 1,2p\n\
         echo '== scrub: every copy'\n\
         scrub {three} --pci {SPARE} --no-progress\n\
         echo '== volume status'\n\
         volume status {three} --pci {SPARE}\n"
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
    let mut timeout = 600u64;
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
    let image = images.join(CORRUPTED_IMAGE);
    let corrupted: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let observer = Arc::clone(&corrupted);
    let started = Instant::now();
    let vm = Vm::new()
        .controller(Controller::nvme(1 << 30).hotplug())
        .controller(Controller::zns(1 << 30, 64 << 20))
        .controller(Controller::nvme(1 << 30))
        .controller(Controller::zns(1 << 30, 64 << 20))
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
                Ok(offset) => format!("host: flipped a byte in {FLIPS} blocks of {CORRUPTED_IMAGE} from byte {offset}"),
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

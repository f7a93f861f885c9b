//! `volume-check SCENARIO --pci BDF... [--seed N] [--phase PHASE]`:
//! the guest side of the zoned allocator's QEMU tests
//! (`examples/tests/qemu_volume.rs`; `qemu_mirror.rs` for `members`).
//! Each scenario builds a volume on the controllers named (namespace 1 of
//! each, in the order given), drives it and checks what it reads back; the
//! data is a deterministic function of the seed and each extent's owner,
//! so a later process can check it too.
//!
//! Scenarios, and the controllers each takes (`--pci`, in this order):
//!
//! - `zns`, `conventional`, `zcap`, `4k`, `tags`, `limits`, `reopen
//!   --phase write|verify`, `mirror`, `repair`, `tags-repair`, `area`,
//!   `area-repair`: the scenarios of `nvme_testkit::scenarios`, whose docs
//!   say what each does and checks; the simulator runs the same bodies.
//!   Here the host is QEMU's: for the repair scenarios the guest prints
//!   `volume-check: corrupt-me OFFSET LEN`, the byte range of one block of
//!   copy 0 in the first controller's backing image (LBA × LBA size), and
//!   waits (up to 20 s) until the host has inverted those bytes. The
//!   `reopen` phases run in two processes.
//! - `metadata --phase format|garbage|reopen|swapped|foreign|damage` and
//!   `members --phase unplug|degraded|replace|rejoin|final` (`--gone BDF`
//!   with `degraded`): the phases of `nvme_testkit::scenarios`'
//!   `MetadataPhase` and `MembersPhase`, one process each, in this order
//!   in one boot; their docs say what each does and checks, and the
//!   simulator runs the same bodies. The host's part, asked by a line:
//!   - `volume-check: overwrite-me BDF OFFSET LEN...`: random bytes over
//!     those ranges of the controllers' backing images, each written from
//!     its last block to its first; `volume-check: restore-me BDF OFFSET
//!     LEN...`: what they held back (`examples/tests/qemu_volume.rs`);
//!   - `volume-check: unplug-me`: QEMU's monitor unplugs the first
//!     controller (`examples/tests/qemu_mirror.rs`);
//!   - the `damage` phase runs the `seqwrite` tool itself, which must
//!     refuse the damaged volume with "nothing was formatted".
//!
//!   Every open prints the volume's ID (`volume 0x...`) for the host to
//!   compare.
//!
//! Passed checks print `volume-check: SCENARIO CHECK: ok (DETAIL)`; the
//! last line is `volume-check: SCENARIO ok` (status 0) or
//! `volume-check: SCENARIO FAILED: why` (status 1). Phases call themselves
//! by scenario and phase (`reopen write`, `metadata garbage`). Usage
//! errors exit with status 2.

use nvme_driver::Controller;
use nvme_examples::device::open_controllers;
use nvme_testkit::scenarios::{self, Check, Host, MediaRange, MembersPhase, MetadataPhase, HOST_POLL_INTERVAL};
use std::fs::File;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};
use zoned_allocator::Device;

const USAGE: &str = "usage: volume-check zns|conventional|zcap|4k|tags|tags-repair|area|area-repair|limits|reopen|\
                     mirror|repair|metadata|members \
                     --pci BDF... [--seed N] [--phase PHASE] [--gone BDF]\n\
                     phases: reopen write|verify; metadata format|garbage|reopen|swapped|foreign|damage; \
                     members unplug|degraded|replace|rejoin|final";

/// Bound on the `seqwrite` run that must refuse a damaged volume.
const SEQWRITE_TIME_MAX: Duration = Duration::from_secs(60);

/// Bound on waiting for the pulled function to leave the guest.
const REMOVAL_WAIT_MAX: Duration = Duration::from_secs(60);

/// What one process runs: a shared scenario, or a phase of one run in
/// phases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    Shared(scenarios::Scenario),
    Metadata(MetadataPhase),
    Members(MembersPhase),
}

impl Scenario {
    fn label(self) -> &'static str {
        match self {
            Scenario::Shared(scenario) => scenario.label(),
            Scenario::Metadata(phase) => phase.label(),
            Scenario::Members(phase) => phase.label(),
        }
    }

    fn controllers(self) -> usize {
        match self {
            Scenario::Shared(scenario) => scenario.controllers(),
            Scenario::Metadata(phase) => phase.controllers(),
            Scenario::Members(phase) => phase.controllers(),
        }
    }
}

#[derive(Debug)]
struct Args {
    scenario: Scenario,
    pci: Vec<String>,
    seed: u64,
    /// A device that must leave the guest first (`members --phase
    /// degraded`).
    gone: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut words = std::env::args().skip(1);
    let (mut name, mut phase, mut pci, mut seed, mut gone) = (None, None, Vec::new(), 1u64, None);
    while let Some(word) = words.next() {
        match word.as_str() {
            "--pci" => pci.push(words.next().ok_or("--pci needs a BDF")?),
            "--seed" => {
                let value = words.next().ok_or("--seed needs a number")?;
                seed = value.parse().map_err(|_| format!("--seed {value}: not a number"))?;
            }
            "--phase" => phase = Some(words.next().ok_or("--phase needs a name")?),
            "--gone" => gone = Some(words.next().ok_or("--gone needs a BDF")?),
            "-h" | "--help" => return Err(String::new()),
            _ if name.is_none() => name = Some(word),
            other => return Err(format!("unexpected argument {other}")),
        }
    }
    let name = name.ok_or("no scenario given")?;
    let metadata = |phase: &str| {
        MetadataPhase::parse(phase)
            .map(Scenario::Metadata)
            .ok_or_else(|| format!("--phase {phase}: expected format, garbage, reopen, swapped, foreign or damage"))
    };
    use scenarios::Scenario as Shared;
    let scenario = match (name.as_str(), phase.as_deref()) {
        ("reopen", Some("write")) => Scenario::Shared(Shared::ReopenWrite),
        ("reopen", Some("verify")) => Scenario::Shared(Shared::ReopenVerify),
        ("reopen", _) => return Err("reopen needs --phase write|verify".into()),
        ("metadata", Some(phase)) => metadata(phase)?,
        ("metadata", None) => return Err("metadata needs --phase".into()),
        ("members", Some(phase)) => MembersPhase::parse(phase)
            .map(Scenario::Members)
            .ok_or_else(|| format!("--phase {phase}: expected unplug, degraded, replace, rejoin or final"))?,
        ("members", None) => return Err("members needs --phase".into()),
        (_, Some(_)) => return Err(format!("--phase applies to reopen, metadata and members, not {name}")),
        // The shared scenarios by their labels, `tags repair` as
        // `tags-repair`; `reopen` takes a phase (above).
        (_, None) => match Shared::ALL.into_iter().find(|s| s.label().replace(' ', "-") == name) {
            Some(shared) if !matches!(shared, Shared::ReopenWrite | Shared::ReopenVerify) => Scenario::Shared(shared),
            _ => return Err(format!("unknown scenario {name}")),
        },
    };
    if pci.len() != scenario.controllers() {
        return Err(format!("{name} takes {} --pci, got {}", scenario.controllers(), pci.len()));
    }
    if gone.is_some() != (scenario == Scenario::Members(MembersPhase::Degraded)) {
        return Err("--gone goes with members --phase degraded, and only there".into());
    }
    Ok(Args { scenario, pci, seed, gone })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("volume-check: {message}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let label = args.scenario.label();
    let started = Instant::now();
    match run(&args) {
        Ok(()) => {
            println!("volume-check: {label} ok");
            eprintln!("volume-check: {label} took {} ms", started.elapsed().as_millis());
            ExitCode::SUCCESS
        }
        Err(why) => {
            println!("volume-check: {label} FAILED: {why}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let check = Check::new("volume-check", args.scenario.label(), args.seed);
    let mut host = QemuHost { pci: args.pci.clone(), gone: args.gone.clone() };
    match args.scenario {
        Scenario::Shared(scenario) => {
            let controllers = open_controllers(&args.pci)?;
            scenarios::run(&check, scenario, &controllers, &mut host)
        }
        Scenario::Metadata(phase) => scenarios::run_metadata(&check, phase, &mut host),
        Scenario::Members(phase) => scenarios::run_members(&check, phase, &mut host),
    }
}

/// QEMU's host, asked by lines on the console: it inverts or overwrites
/// bytes of the controllers' backing images and puts them back
/// (`examples/tests/qemu_volume.rs`), and unplugs the first controller
/// through QEMU's monitor (`examples/tests/qemu_mirror.rs`). What the
/// guest itself can do (bring controllers up, run seqwrite, watch sysfs)
/// it does here.
#[derive(Debug)]
struct QemuHost {
    /// The controllers `--pci` names, in order.
    pci: Vec<String>,
    /// The function an earlier process pulled (`--gone`).
    gone: Option<String>,
}

impl QemuHost {
    /// Asks the host to act on `ranges`, in order: `overwrite-me` or
    /// `restore-me`, each range as `BDF OFFSET LEN`.
    fn ask(&self, request: &str, ranges: &[MediaRange]) -> Result<(), String> {
        let mut words = Vec::with_capacity(ranges.len());
        for range in ranges {
            let bdf = self.pci.get(range.device).ok_or_else(|| format!("{request}: no device {}", range.device))?;
            words.push(format!("{bdf} {} {}", range.offset, range.len));
        }
        println!("volume-check: {request} {}", words.join(" "));
        Ok(())
    }
}

impl Host for QemuHost {
    fn corrupt(&mut self, offset: u64, len: usize) -> Result<(), String> {
        println!("volume-check: corrupt-me {offset} {len}");
        Ok(())
    }

    fn controllers(&mut self) -> Result<Vec<Controller>, String> {
        open_controllers(&self.pci)
    }

    fn address(&self, device: usize) -> String {
        self.pci.get(device).cloned().unwrap_or_default()
    }

    fn overwrite(&mut self, ranges: &[MediaRange]) -> Result<(), String> {
        self.ask("overwrite-me", ranges)
    }

    fn restore(&mut self, ranges: &[MediaRange]) -> Result<(), String> {
        self.ask("restore-me", ranges)
    }

    fn seqwrite_refusal(&mut self) -> Result<String, String> {
        seqwrite_refusal(&self.pci)
    }

    fn unplug(&mut self, device: usize) -> Result<(), String> {
        // The host's monitor command names the first controller.
        if device != 0 {
            return Err(format!("the host unplugs the first controller only, not device {device}"));
        }
        println!("volume-check: unplug-me");
        Ok(())
    }

    fn wait_removed(&mut self) -> Result<String, String> {
        let bdf = self.gone.as_deref().ok_or("no --gone BDF: which device left?")?;
        let path = std::path::Path::new("/sys/bus/pci/devices").join(bdf);
        let started = Instant::now();
        while path.exists() {
            if started.elapsed() > REMOVAL_WAIT_MAX {
                return Err(format!("{bdf} still in the guest after {} s", REMOVAL_WAIT_MAX.as_secs()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(format!("{bdf} left the guest after {} ms", started.elapsed().as_millis()))
    }

    /// Leaves the pulled controller open until the process exits: its
    /// `Controller` and its `Device`. vfio-ioctls 0.10's `VfioDevice::drop`
    /// closes the device and then reads the function's `iommu_group` link
    /// in sysfs, unwrapping the result; closing the device is what lets
    /// the guest kernel finish the removal, and when the kernel is quicker
    /// the link is gone and the drop panics (`InvalidPath`; once in six
    /// runs here). The exit closes the device without that read.
    fn release_pulled(&mut self, device: Device, controller: Controller) {
        std::mem::forget(device);
        std::mem::forget(controller);
    }
}

/// Runs the `seqwrite` tool without `--format` on the damaged volume's
/// two controllers: it must exit 1 with its reason, which is returned.
fn seqwrite_refusal(pci: &[String]) -> Result<String, String> {
    let out = std::env::temp_dir().join("volume-check-seqwrite.out");
    let err = std::env::temp_dir().join("volume-check-seqwrite.err");
    let create = |path: &std::path::Path| File::create(path).map_err(|e| format!("{}: {e}", path.display()));
    let started = Instant::now();
    let mut child = Command::new("seqwrite")
        .args(["--pci", &pci[0], "--pci", &pci[1], "--profile", "mirror", "--size", "16M", "--no-progress"])
        .stdin(Stdio::null())
        .stdout(create(&out)?)
        .stderr(create(&err)?)
        .spawn()
        .map_err(|e| format!("starting seqwrite: {e}"))?;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("waiting for seqwrite: {e}"))? {
            break status;
        }
        if started.elapsed() > SEQWRITE_TIME_MAX {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("seqwrite still running after {} s", SEQWRITE_TIME_MAX.as_secs()));
        }
        std::thread::sleep(HOST_POLL_INTERVAL);
    };
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    let stdout = std::fs::read_to_string(&out).unwrap_or_default();
    match (status.code(), stderr.lines().find(|l| l.contains("nothing was formatted"))) {
        (Some(1), Some(line)) => Ok(format!("exit status 1: {line}")),
        _ => Err(format!("seqwrite on the damaged volume: {status}; stderr {stderr:?}; stdout {stdout:?}")),
    }
}

//! volume: the operator's view and control of a volume's members (a
//! mirror's two, or a pool's up to sixteen): the status of every device
//! place (text, `--json`, or the Prometheus text exposition format),
//! putting a new device in a failed one's place, the resilver that writes
//! the copies a member lacks, the distributed rebuild that writes a lost
//! member's copies onto the others, growing and shrinking a pool online
//! (add, remove), a read-only check, giving a member up on purpose, and
//! keeping one side of a mirror whose members went on apart.

use clap::{Args, Parser, Subcommand, ValueEnum};
use nvme_driver::sim::{NamespaceConfig, SimConfig, Simulator};
use nvme_driver::{Controller, ControllerOptions, Transport};
use nvme_examples::args::{self, BLOCK_BYTES, QUEUE_DEPTH_MAX, SIM_BYTES_MAX};
use nvme_examples::confirm::{confirm_on_stdin, Confirmation};
use nvme_examples::device::{self, explain, DeviceChoice, VolumeLocation};
use nvme_examples::health::Health;
use nvme_examples::interrupt;
use nvme_examples::logging;
use nvme_examples::prometheus;
use nvme_examples::volume_view::{check_text, human_bytes, resilver_text, status_text};
use nvme_scrub::{
    rebuild_distributed, resilver, Control, ResilverOptions, ResilverPhase, ResilverProgress, ResilverReport,
};
use serde_json::{json, Value};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use zoned_allocator::{
    Device, DeviceOptions, DeviceState, DivergedSide, Error, Profile, Volume, VolumeOptions, VolumeState, VolumeStatus,
};

/// The status for "done, but the volume needs attention": degraded,
/// resilvering or failed, copies left missing, a check that is not clean.
const EXIT_ATTENTION: u8 = 3;

/// Device places a volume has at most (a pool's sixteen).
const PLACES_MAX: u64 = zoned_allocator::chooser::MAX_DEVICES as u64;

/// Why `volume fail` gives a member up, as the metadata records it.
const FAILED_BY_OPERATOR: &str = "taken out by the operator";

/// View and control a volume's members: status, replace, resilver, rebuild, add, remove, check, fail, resolve.
#[derive(Parser, Debug)]
#[command(
    name = "volume",
    version,
    after_help = "Exit status: 0 done and the volume healthy; 3 done, but the volume needs attention (status: \
                  degraded, resilvering, damaged, failed or diverged; resilver, replace or resolve: copies still \
                  missing or the verify pass not clean; check: not clean); 1 an error; 2 a bad argument (every \
                  option is checked before a device is opened)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show the volume's state, its devices (errors, zones, use, health),
    /// what is at risk, the resilver and the last scrub.
    #[command(after_help = "Opening the volume may write its metadata: a member that came back rejoins (and \
                            lacks only what was written while it was away), a metadata copy that differs is \
                            rewritten, and with --degraded a missing member is recorded failed. Members that \
                            went on apart are shown side by side, and nothing is written (see resolve).\n\
                            Exit status: 0 online; 3 degraded, resilvering, damaged (extents lost), failed or \
                            diverged; 1 an error; 2 a bad argument.")]
    Status(StatusArgs),
    /// Put a new device in the place of a failed or missing member, then
    /// resilver it. Destroys what the new device holds (asks first).
    #[command(after_help = "The volume is opened degraded (the place replaced is failed or missing). The new \
                            device must be blank unless --force, at least as large as the old one, with zones \
                            as large. The resilver that follows is the one `volume resilver` runs: \
                            interrupted, it continues when run again.\n\
                            Exit status: 0 replaced (and resilvered, unless --no-resilver); 3 replaced, but \
                            copies are still missing or the verify pass is not clean; 1 an error; 2 a bad \
                            argument.")]
    Replace(ReplaceArgs),
    /// Write every copy a member lacks from the other copy, then verify
    /// the new copy.
    #[command(after_help = "Resumable: progress lives in the volume's own metadata (a copy written is \
                            committed with the next commit, every 256 MiB), so a resilver that is interrupted \
                            (Ctrl-C, a crash, a power cut) continues where it stopped when run again.\n\
                            Exit status: 0 complete (or nothing to resilver); 3 copies still missing \
                            (unrecoverable extents, failed copies) or the verify pass not clean; 1 an error; 2 \
                            a bad argument.")]
    Resilver(ResilverArgs),
    /// Rebuild a lost member's copies onto the others' free space, with no
    /// new device (a distributed spare): redundancy comes back at the
    /// survivors' combined bandwidth.
    #[command(after_help = "The volume is opened degraded (the place rebuilt is failed or missing). Each of the \
                            place's copies is read from a survivor holding it and written where placement puts \
                            it, on a survivor without one; needs as many survivors as copies, and their room. \
                            Resumable like a resilver; the survivors are scrubbed at the end unless \
                            --no-verify-after.\n\
                            Exit status: 0 complete; 3 copies still missing or the verify pass not clean; 1 an \
                            error; 2 a bad argument.")]
    Rebuild(ResilverArgs),
    /// Put a blank device into a volume (not a dup) as a new member:
    /// new extents use it at once. Destroys what it holds (asks first).
    #[command(after_help = "The device must be blank unless --force. On a volume of one or two devices it \
                            takes a metadata copy (the second or the third). Refused, writing nothing, for a dup, \
                            a device too small for what it must hold, and a pool of sixteen.\n\
                            Exit status: 0 added; 1 an error; 2 a bad argument.")]
    Add(AddArgs),
    /// Take a member out of a pool: its copies move to the others, then
    /// the place is dropped (the last place takes its number). Asks first.
    #[command(after_help = "Checks first that the others can take every copy (refused, moving nothing, with \
                            the bytes that would find no place). Crash-safe and resumable: interrupted (Ctrl-C, \
                            a crash), it continues when run again. A member holding a metadata copy (places 0 \
                            to 2) hands it to the last member, which takes its place (on a pool of four or \
                            more, that member's first zones are emptied for it); a member of a pool of two is \
                            refused.\n\
                            Exit status: 0 removed; 3 stopped before the end (run it again); 1 an error; 2 a \
                            bad argument.")]
    Remove(RemoveArgs),
    /// Check the volume without writing anything: labels, both metadata
    /// copies, the journal, the extent map against the zones.
    #[command(after_help = "Read-only: reports what opening the volume would repair or change, and writes \
                            nothing.\n\
                            Exit status: 0 clean; 3 not clean; 1 an error (a problem open would refuse); 2 a \
                            bad argument.")]
    Check(CheckArgs),
    /// Give a member up on purpose (to take a drive out): the volume goes
    /// on degraded on the other. Asks first.
    #[command(after_help = "What is written from now on has one copy until a replace and its resilver. \
                            Refused for the last device in use.\n\
                            Exit status: 0 given up; 1 an error; 2 a bad argument.")]
    Fail(FailArgs),
    /// Keep one side of a mirror whose members went on apart (each opened
    /// or kept running without the other, and written): the other device
    /// is rebuilt from it, and what only it held is lost. Asks first.
    #[command(after_help = "`volume status` shows both sides of such a mirror and what each holds, and changes \
                            nothing; any other open refuses them. Resolve reads both first, says what the other \
                            side loses (extents, bytes, its last commit), asks, then takes the other device as \
                            a blank replacement and resilvers it.\n\
                            Exit status: 0 resolved and resilvered; 3 resolved, but copies are still missing or \
                            the verify pass is not clean; 1 an error (the members have not gone on apart, ...); \
                            2 a bad argument.")]
    Resolve(ResolveArgs),
}

/// Where the volume is.
#[derive(Args, Debug)]
struct VolumeArgs {
    #[command(flatten)]
    location: VolumeLocation,
    /// Run on the in-process simulator: a volume of --sim-devices ZNS
    /// namespaces (controllers sim0, sim1, ..., and a blank one after them
    /// to replace or add with) holding this much data (e.g. 64M,
    /// 4k..=1T).
    #[arg(long, value_name = "SIZE", value_parser = args::size_in(1, BLOCK_BYTES, SIM_BYTES_MAX), conflicts_with = "pci")]
    sim: Option<u64>,
    /// The simulated volume's devices, 2..=15.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = args::int_in::<usize>(2, PLACES_MAX - 1), requires = "sim")]
    sim_devices: usize,
    /// The simulated volume's profile: mirror (2 copies), mirror3 (3
    /// copies, 3 devices or more) or single.
    #[arg(long, value_enum, default_value = "mirror", requires = "sim")]
    sim_profile: SimProfile,
    /// How the simulated volume is found: online; degraded (sim1 was given
    /// up, data written since, and it is not given: needs --degraded);
    /// resilvering (the same, but sim1 is given back and rejoins); or
    /// diverged (sim1 opened alone and written, then sim0 alone).
    #[arg(long, value_enum, default_value = "online", requires = "sim")]
    sim_state: SimState,
}

/// The simulated volume's profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum SimProfile {
    Single,
    Mirror,
    Mirror3,
}

impl SimProfile {
    fn profile(self) -> Profile {
        match self {
            SimProfile::Single => Profile::Single,
            SimProfile::Mirror => Profile::Mirror,
            SimProfile::Mirror3 => Profile::Mirror3,
        }
    }
}

/// The simulated volume's story.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum SimState {
    Online,
    Degraded,
    Resilvering,
    /// sim1 was opened alone and written, then sim0 alone: the members
    /// went on apart.
    Diverged,
}

/// How a resilver runs (resilver, and replace after it).
#[derive(Args, Debug)]
struct ResilverFlags {
    /// Rate limit on the reads in MiB/s, 1..=1048576 (fractions allowed);
    /// default: none.
    #[arg(long, value_name = "MIB_S", value_parser = args::rate_mib_s, allow_negative_numbers = true)]
    limit: Option<f64>,
    /// Reads of the source copy in flight, 1..=1024.
    #[arg(long, default_value_t = 64, value_parser = args::int_in::<usize>(1, QUEUE_DEPTH_MAX))]
    qd: usize,
    /// Copy as read, without checking each extent's checksums.
    #[arg(long)]
    no_verify: bool,
    /// Skip the scrub of the new copy at the end.
    #[arg(long)]
    no_verify_after: bool,
    /// No progress line, even on a terminal.
    #[arg(long)]
    no_progress: bool,
}

#[derive(Args, Debug)]
struct StatusArgs {
    #[command(flatten)]
    volume: VolumeArgs,
    /// Print one JSON object (the status, with each device's controller
    /// health) instead of text.
    #[arg(long, conflicts_with = "prometheus")]
    json: bool,
    /// Print the Prometheus text exposition format instead of text.
    #[arg(long)]
    prometheus: bool,
}

#[derive(Args, Debug)]
struct ReplaceArgs {
    #[command(flatten)]
    volume: VolumeArgs,
    /// The device place to replace, 0 or 1: a failed or missing member.
    #[arg(long, value_parser = args::int_in::<usize>(0, PLACES_MAX - 1))]
    place: usize,
    /// Controller PCI address of the new device (on --sim: sim0, sim1 or
    /// sim2, the default).
    #[arg(long, value_name = "BDF", required_unless_present = "sim", value_parser = args::pci_address_or_sim)]
    new_pci: Option<String>,
    /// Namespace ID of the new device, 1..=4294967294.
    #[arg(long, value_name = "NSID", default_value_t = 1, value_parser = args::nsid)]
    new_ns: u32,
    /// Don't ask before destroying what the new device holds (without a
    /// terminal to ask on, replace needs it).
    #[arg(long)]
    yes: bool,
    /// Take a new device that is not blank (what it holds is destroyed).
    #[arg(long)]
    force: bool,
    /// Format the new device's namespace to the volume's LBA format (block
    /// size and per-block metadata, as its other devices have) when it has
    /// another, as a drive new from its box often does: Format NVM, which
    /// destroys what it holds. Without it, a namespace formatted otherwise
    /// is refused.
    #[arg(long, conflicts_with = "sim")]
    format: bool,
    /// Replace only: leave the resilver for `volume resilver`.
    #[arg(long)]
    no_resilver: bool,
    #[command(flatten)]
    resilver: ResilverFlags,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct ResilverArgs {
    #[command(flatten)]
    volume: VolumeArgs,
    /// The device place to resilver, 0 or 1. Default: the one that lacks
    /// copies.
    #[arg(long, value_parser = args::int_in::<usize>(0, PLACES_MAX - 1))]
    place: Option<usize>,
    #[command(flatten)]
    resilver: ResilverFlags,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct AddArgs {
    #[command(flatten)]
    volume: VolumeArgs,
    /// Controller PCI address of the new device (on --sim: the blank one
    /// after the volume's, the default).
    #[arg(long, value_name = "BDF", required_unless_present = "sim", value_parser = args::pci_address_or_sim)]
    new_pci: Option<String>,
    /// Namespace ID of the new device, 1..=4294967294.
    #[arg(long, value_name = "NSID", default_value_t = 1, value_parser = args::nsid)]
    new_ns: u32,
    /// Don't ask before destroying what the new device holds (without a
    /// terminal to ask on, add needs it).
    #[arg(long)]
    yes: bool,
    /// Take a new device that is not blank (what it holds is destroyed).
    #[arg(long)]
    force: bool,
    /// Print one JSON object (the place, and the status after) instead of
    /// text.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct RemoveArgs {
    #[command(flatten)]
    volume: VolumeArgs,
    /// The device place to take out, 3..=15 (places 0 to 2 hold the
    /// metadata).
    #[arg(long, value_parser = args::int_in::<usize>(0, PLACES_MAX - 1))]
    place: usize,
    /// Don't ask first (without a terminal to ask on, remove needs it).
    #[arg(long)]
    yes: bool,
    /// No progress line, even on a terminal.
    #[arg(long)]
    no_progress: bool,
    /// Print one JSON object (the removal, and the status after) instead
    /// of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct CheckArgs {
    #[command(flatten)]
    volume: VolumeArgs,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct FailArgs {
    #[command(flatten)]
    volume: VolumeArgs,
    /// The device place to give up, 0 or 1.
    #[arg(long, value_parser = args::int_in::<usize>(0, PLACES_MAX - 1))]
    place: usize,
    /// Don't ask first (without a terminal to ask on, fail needs it).
    #[arg(long)]
    yes: bool,
    /// Print one JSON object (the status after) instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct ResolveArgs {
    #[command(flatten)]
    volume: VolumeArgs,
    /// Controller PCI address of the side to keep (on --sim: sim0 or
    /// sim1); the other is rebuilt from it.
    #[arg(long, value_name = "BDF", value_parser = args::pci_address_or_sim)]
    keep: String,
    /// Don't ask before destroying the other side (without a terminal to
    /// ask on, resolve needs it).
    #[arg(long)]
    yes: bool,
    #[command(flatten)]
    resilver: ResilverFlags,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// How a command that ran ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Done {
    /// Exit status 0.
    Healthy,
    /// Exit status [`EXIT_ATTENTION`].
    Attention,
}

fn main() -> ExitCode {
    logging::init("volume");
    let cli = Cli::parse();
    interrupt::install();
    if let Err(message) = check_args(&cli.command) {
        args::exit_usage_error::<Cli>("volume", &message);
    }
    let result = match &cli.command {
        Command::Status(a) => status(a),
        Command::Replace(a) => replace(a),
        Command::Resilver(a) => run_resilver(a),
        Command::Rebuild(a) => run_rebuild(a),
        Command::Add(a) => add(a),
        Command::Remove(a) => remove(a),
        Command::Check(a) => check(a),
        Command::Fail(a) => fail(a),
        Command::Resolve(a) => resolve(a),
    };
    if let (Ok(_), Some(signal)) = (&result, interrupt::signal_name()) {
        eprintln!("volume: interrupted by {signal}: the report above is of what was done; {}", continue_hint(&cli));
        return ExitCode::from(interrupt::EXIT_INTERRUPTED);
    }
    match result {
        Ok(Done::Healthy) => ExitCode::SUCCESS,
        Ok(Done::Attention) => ExitCode::from(EXIT_ATTENTION),
        Err(message) => {
            nvme_examples::output::failure("volume", &message);
            ExitCode::FAILURE
        }
    }
}

/// The exact command that continues a resilver a signal stopped: its
/// progress is in the volume's metadata. After a replace, the volume's
/// devices are the ones given and the new one.
fn continue_hint(cli: &Cli) -> String {
    let (volume, place, new) = match &cli.command {
        Command::Resilver(a) => (&a.volume, a.place, None),
        Command::Rebuild(a) => {
            return match a.volume.sim {
                Some(_) => "the simulated volume ends with this process: nothing continues it".into(),
                None => "what was copied is committed, and the same command continues the rebuild".into(),
            }
        }
        Command::Remove(a) => {
            return match a.volume.sim {
                Some(_) => "the simulated volume ends with this process: nothing continues it".into(),
                None => format!(
                    "what was moved is committed, and the same command continues the removal of place {}",
                    a.place
                ),
            }
        }
        Command::Replace(a) => (&a.volume, Some(a.place), a.new_pci.as_deref().map(|pci| (pci, a.new_ns))),
        Command::Resolve(a) => (&a.volume, None, None),
        _ => return "nothing was left half done".into(),
    };
    if volume.sim.is_some() {
        return "the simulated volume ends with this process: nothing continues it".into();
    }
    let mut command = vec!["volume".to_owned(), "resilver".to_owned()];
    for pci in volume.location.pci.iter().map(String::as_str).chain(new.map(|(pci, _)| pci)) {
        command.extend(["--pci".to_owned(), pci.to_owned()]);
    }
    let mut ns: Vec<String> = volume.location.ns.iter().map(u32::to_string).collect();
    if !ns.is_empty() || new.is_some_and(|(_, nsid)| nsid != 1) {
        if ns.is_empty() {
            ns = vec!["1".into(); volume.location.pci.len().max(1)];
        }
        ns.extend(new.map(|(_, nsid)| nsid.to_string()));
        command.extend(["--ns".to_owned(), ns.join(",")]);
    }
    if let Some(place) = place {
        command.extend(["--place".to_owned(), place.to_string()]);
    }
    format!("what was copied is committed, and `{}` continues the resilver", command.join(" "))
}

/// A simulated volume must fit in the host's memory: both copies of its
/// data, and the quarter more its stories write.
fn check_sim_size(command: &Command) -> Result<(), String> {
    let volume = command.volume();
    let copies = volume.sim_profile.profile().copies() as u64;
    volume.sim.map_or(Ok(()), |bytes| args::sim_fits("--sim", bytes.saturating_mul(5) / 4 * (copies + 1)))
}

impl Command {
    /// Where the volume the command acts on is.
    fn volume(&self) -> &VolumeArgs {
        match self {
            Command::Status(a) => &a.volume,
            Command::Replace(a) => &a.volume,
            Command::Resilver(a) | Command::Rebuild(a) => &a.volume,
            Command::Add(a) => &a.volume,
            Command::Remove(a) => &a.volume,
            Command::Check(a) => &a.volume,
            Command::Fail(a) => &a.volume,
            Command::Resolve(a) => &a.volume,
        }
    }
}

/// Checks across options, before any device is opened.
fn check_args(command: &Command) -> Result<(), String> {
    check_sim_size(command)?;
    let volume = command.volume();
    if volume.sim.is_some() {
        let (devices, profile) = (volume.sim_devices, volume.sim_profile);
        if profile == SimProfile::Mirror3 && devices < 3 {
            return Err(format!("--sim-profile mirror3 --sim-devices {devices}: a 3-copy mirror spans 3 or more"));
        }
        if profile == SimProfile::Single && volume.sim_state != SimState::Online {
            return Err("--sim-profile single: only --sim-state online (a single pool's lost device loses data)".into());
        }
        if volume.sim_state == SimState::Diverged && (devices != 2 || profile != SimProfile::Mirror) {
            return Err("--sim-state diverged: a mirror of two (--sim-devices 2 --sim-profile mirror)".into());
        }
    }
    match command {
        Command::Resolve(a) => {
            let given: Vec<String> = match a.volume.sim {
                Some(_) => vec!["sim0".into(), "sim1".into()],
                None => a.volume.location.pci.clone(),
            };
            if !given.contains(&a.keep) {
                return Err(format!("--keep {}: not one of the volume's controllers ({})", a.keep, given.join(", ")));
            }
        }
        Command::Replace(a) => {
            if a.volume.sim.is_some() {
                if let Some(name) = &a.new_pci {
                    let devices = a.volume.sim_devices;
                    let given = if a.volume.sim_state == SimState::Degraded { 1 } else { devices };
                    match sim_index(name, devices) {
                        None => {
                            return Err(format!("--new-pci {name}: on --sim, the controllers are sim0 to sim{devices}"))
                        }
                        Some(index) if index < given => {
                            return Err(format!("--new-pci {name}: a device given as the volume's"))
                        }
                        Some(_) => {}
                    }
                }
            } else {
                let new = a.new_pci.as_deref().expect("clap requires --new-pci without --sim");
                for choice in a.volume.location.device_choices()? {
                    if a.volume.location.pci.get(choice.controller).map(String::as_str) == Some(new)
                        && choice.nsid == a.new_ns
                    {
                        return Err(format!(
                            "--new-pci {new} --new-ns {}: a device given as the volume's (--pci, --ns)",
                            a.new_ns
                        ));
                    }
                }
            }
        }
        _ => {}
    }
    let volume = command.volume();
    if volume.sim.is_none() {
        volume.location.device_choices()?;
    }
    Ok(())
}

/// A controller and what the views call it: its PCI address, or `simN`.
struct Named {
    name: String,
    controller: Controller,
}

/// `sim0`, `sim1`, ...: the simulated controllers' index (`devices` of the
/// volume's and the blank one after them).
fn sim_index(name: &str, devices: usize) -> Option<usize> {
    let index: usize = name.strip_prefix("sim")?.parse().ok()?;
    (index <= devices).then_some(index)
}

/// The controllers of the volume's devices (each named by its transport:
/// the PCI address, or `simN`). On --sim, the three simulated ones.
fn open_controllers(volume: &VolumeArgs) -> Result<Vec<Named>, String> {
    if let Some(bytes) = volume.sim {
        return sim_controllers(bytes, volume);
    }
    let controllers = volume.location.open_controllers()?;
    Ok(controllers
        .into_iter()
        .map(|controller| Named { name: controller.transport().name().to_string(), controller })
        .collect())
}

/// The index in `controllers` of controller `bdf` (a new device's), opened
/// and added when it is not one of the volume's. On --sim, `simN`.
fn new_controller(volume: &VolumeArgs, controllers: &mut Vec<Named>, bdf: &str) -> Result<usize, String> {
    if volume.sim.is_some() {
        return sim_index(bdf, volume.sim_devices)
            .ok_or_else(|| format!("--new-pci {bdf}: not a simulated controller"));
    }
    let given = volume.location.pci.iter().position(|p| p == bdf);
    if let Some(index) = given.or_else(|| controllers.iter().position(|n| n.name == bdf)) {
        return Ok(index);
    }
    let controller = device::open_controller(Some(bdf), ControllerOptions::default())?;
    controllers.push(Named { name: controller.transport().name().to_string(), controller });
    Ok(controllers.len() - 1)
}

/// Opens the volume's devices on `controllers`, each told its address.
/// Each of the volume's devices named, with what it holds, read only
/// (no volume is opened): what a confirmation names.
fn members_read(volume: &VolumeArgs, controllers: &[Named]) -> Result<Vec<(String, DeviceState)>, String> {
    let options = DeviceOptions { queue_depth: 8, buffers: 4, ..DeviceOptions::default() };
    let mut devices = open_devices(volume, controllers, options)?;
    Ok(devices.iter_mut().map(device::named_and_held).collect())
}

fn open_devices(volume: &VolumeArgs, controllers: &[Named], options: DeviceOptions) -> Result<Vec<Device>, String> {
    let choices = match volume.sim {
        // sim1 is left out when the story has it pulled.
        Some(_) => (0..volume.sim_devices)
            .filter(|&index| index != 1 || volume.sim_state != SimState::Degraded)
            .map(|controller| DeviceChoice { controller, nsid: 1 })
            .collect(),
        None => volume.location.device_choices()?,
    };
    let mut devices = Vec::new();
    for choice in choices {
        let named = controllers.get(choice.controller).ok_or("a device on a controller not opened")?;
        devices.push(open_device(named, choice.nsid, options)?);
    }
    Ok(devices)
}

fn open_device(named: &Named, nsid: u32, options: DeviceOptions) -> Result<Device, String> {
    let mut device =
        Device::open(&named.controller, nsid, options).map_err(|e| format!("{} namespace {nsid}: {e}", named.name))?;
    device.set_identity(&named.name);
    Ok(device)
}

/// Device options for a resilver at `qd` reads in flight: room for the
/// reads and for the copy writes they feed.
fn resilver_device_options(qd: usize) -> DeviceOptions {
    let defaults = DeviceOptions::default();
    DeviceOptions {
        queue_depth: (qd as u16).saturating_add(8).max(defaults.queue_depth),
        buffers: (qd as u32 + 8).max(defaults.buffers),
        ..defaults
    }
}

/// Each device's controller health, `None` for a device absent or whose
/// log could not be read (a warning says why).
fn health_of(status: &VolumeStatus, controllers: &[Named]) -> Vec<Option<Health>> {
    status
        .devices
        .iter()
        .map(|device| {
            let named = controllers.iter().find(|n| !device.pci.is_empty() && n.name == device.pci)?;
            match named.controller.smart_log() {
                Ok(log) => Some(Health::from_log(&log)),
                Err(e) => {
                    log::warn!("{}: SMART / Health log: {e}", named.name);
                    None
                }
            }
        })
        .collect()
}

/// The status as JSON: every field of [`VolumeStatus`] (`state`, `devices`
/// with `state`, `pci`, `errors`, ...), each device with its controller's
/// `health` (null when unknown), and `volume_id_hex` (the ID exactly, for
/// readers whose numbers are doubles).
fn status_json(status: &VolumeStatus, health: &[Option<Health>]) -> Value {
    let mut value = serde_json::to_value(status).expect("the status serializes");
    if let Some(devices) = value["devices"].as_array_mut() {
        assert_eq!(devices.len(), health.len(), "a health per device");
        for (device, health) in devices.iter_mut().zip(health) {
            device["health"] = serde_json::to_value(health).expect("health serializes");
        }
    }
    value["volume_id_hex"] = json!(format!("{:#018x}", status.volume_id));
    value
}

fn now_unix_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn health_state(state: VolumeState) -> Done {
    if state == VolumeState::Online {
        Done::Healthy
    } else {
        Done::Attention
    }
}

fn status(a: &StatusArgs) -> Result<Done, String> {
    let controllers = open_controllers(&a.volume)?;
    let devices = open_devices(&a.volume, &controllers, DeviceOptions::default())?;
    let options = a.volume.location.volume_options(a.volume.location.degraded);
    let volume = match Volume::open(devices, &options) {
        Ok(volume) => volume,
        // Refused with nothing written: both sides shown, for `resolve`.
        Err(Error::Diverged { sides }) => {
            if a.json {
                println!("{}", json!({ "tool": "volume", "state": "diverged", "sides": sides }));
            } else if a.prometheus {
                return Err(format!("open: {}", Error::Diverged { sides }));
            } else {
                print!("{}", diverged_text(&sides));
            }
            return Ok(Done::Attention);
        }
        Err(error) => return Err(format!("open: {}", explain(error))),
    };
    let status = volume.status();
    let health = health_of(&status, &controllers);
    if a.json {
        let mut value = status_json(&status, &health);
        value["tool"] = json!("volume");
        println!("{value}");
    } else if a.prometheus {
        print!("{}", prometheus::volume_status(&status, &health));
    } else {
        print!("{}", status_text(&status, &health, now_unix_s()));
    }
    volume.close().map_err(|e| format!("close: {e}"))?;
    Ok(health_state(status.state))
}

/// Both sides of a mirror whose members went on apart, and the choice.
fn diverged_text(sides: &[DivergedSide]) -> String {
    let mut out = String::from(
        "state: DIVERGED: the members went on apart, each opened or kept running without the other; nothing was \
         written to either\n",
    );
    for side in sides {
        let name = if side.name.is_empty() { format!("device {}", side.device) } else { side.name.clone() };
        out += &format!(
            "  place {} ({name}): last commit {} of generation {} at {} (Unix s); holds {} extent(s), {}; {} \
             extent(s), {} only here\n",
            side.place,
            side.last_seq,
            side.last_generation,
            side.last_commit_unix_s,
            side.extents,
            human_bytes(side.bytes),
            side.extents_only_here,
            human_bytes(side.bytes_only_here),
        );
    }
    out += "keep one side: `volume resolve --keep <its PCI address>` rebuilds the other from it (what only the other \
            holds is lost); or open one alone with --degraded to read it first\n";
    out
}

/// Runs a resilver of `place`, with progress on stderr when asked and a
/// terminal is there.
fn resilver_place(
    volume: &mut Volume,
    controllers: &[Named],
    place: usize,
    flags: &ResilverFlags,
    json: bool,
) -> Result<ResilverReport, String> {
    copy_place(volume, controllers, place, flags, json, false)
}

/// Runs a resilver of `place` (or with `distributed`, the rebuild of its
/// copies onto the others), with progress on stderr when asked and a
/// terminal is there.
fn copy_place(
    volume: &mut Volume,
    controllers: &[Named],
    place: usize,
    flags: &ResilverFlags,
    json: bool,
    distributed: bool,
) -> Result<ResilverReport, String> {
    let options = ResilverOptions {
        max_in_flight: flags.qd,
        verify: !flags.no_verify,
        rate_limit_mib_s: flags.limit,
        verify_after: !flags.no_verify_after,
        ..ResilverOptions::default()
    };
    let progress = std::io::stderr().is_terminal() && !json && !flags.no_progress;
    let what = if distributed { "rebuild" } else { "resilver" };
    // A signal stops it at its next safe point; what it copied is
    // committed, and the same command run again continues from there.
    let control = Control::new();
    interrupt::on_request({
        let control = control.clone();
        move || control.cancel()
    });
    // Each controller's events (a SMART critical warning) said as they come.
    let mut watch = nvme_examples::events::Watch::new(
        controllers.iter().map(|n| (n.name.clone(), &n.controller)),
        nvme_examples::events::EVERY,
    );
    let mut show = |p: &ResilverProgress| {
        watch.poll(std::time::Instant::now());
        if progress {
            let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
            let phase = match p.phase {
                ResilverPhase::Copy => "copy",
                ResilverPhase::Verify => "verify",
            };
            eprint!(
                "\r{what}: place {} {phase:6} {:5.1}% {:.0}/{:.0} MiB {:8.1} MiB/s ETA {:5.0} s ",
                p.place,
                p.bytes_done as f64 / p.bytes_total.max(1) as f64 * 100.0,
                mib(p.bytes_done),
                mib(p.bytes_total),
                p.rate_mib_s,
                p.eta_s
            );
        }
    };
    let report = match distributed {
        true => rebuild_distributed(volume, place, &options, &control, &mut show),
        false => resilver(volume, place, &options, &control, &mut show),
    }
    .map_err(|e| format!("{what}: {e}"))?;
    if progress {
        eprintln!();
    }
    Ok(report)
}

fn run_resilver(a: &ResilverArgs) -> Result<Done, String> {
    let controllers = open_controllers(&a.volume)?;
    let devices = open_devices(&a.volume, &controllers, resilver_device_options(a.resilver.qd))?;
    let mut volume = a.volume.location.open_volume(devices, a.volume.location.degraded)?;
    let place = a.place.or_else(|| volume.status().resilver.first().map(|r| r.place));
    let Some(place) = place else {
        if a.json {
            println!("{}", resilver_json(&volume, &controllers, None, None));
        } else {
            println!("nothing to resilver: every device in use holds every copy it should");
        }
        volume.close().map_err(|e| format!("close: {e}"))?;
        return Ok(Done::Healthy);
    };
    let report = resilver_place(&mut volume, &controllers, place, &a.resilver, a.json)?;
    let status = volume.status();
    if a.json {
        println!("{}", resilver_json(&volume, &controllers, Some(place), Some(&report)));
    } else {
        print!("{}", resilver_text(&report));
        for other in status.resilver.iter().filter(|r| r.place != place && r.bytes_left > 0) {
            println!(
                "place {} still lacks {} ({}): run `volume resilver --place {}`",
                other.place,
                other.bytes_left,
                human_bytes(other.bytes_left),
                other.place
            );
        }
    }
    volume.close().map_err(|e| format!("close: {e}"))?;
    // The exit status follows the volume, not the one place: 0 only when
    // every member holds every copy.
    Ok(if report.complete() && status.state == VolumeState::Online { Done::Healthy } else { Done::Attention })
}

/// `volume resilver --json`: the place resilvered and its report (none
/// when nothing was owed), and the volume's status after it.
fn resilver_json(
    volume: &Volume,
    controllers: &[Named],
    place: Option<usize>,
    report: Option<&ResilverReport>,
) -> Value {
    let status = volume.status();
    let health = health_of(&status, controllers);
    json!({
        "tool": "volume",
        "command": "resilver",
        "events": nvme_examples::events::seen_json(),
        "place": place,
        "report": report,
        "complete": report.is_none_or(ResilverReport::complete),
        "status": status_json(&status, &health),
    })
}

fn replace(a: &ReplaceArgs) -> Result<Done, String> {
    let new_name = a.new_pci.clone().unwrap_or_else(|| "sim2".into());
    // Asked before any device is opened.
    let formatted = if a.format { " (formatted to the volume's LBA format first, if it has another)" } else { "" };
    let what = format!(
        "replace destroys everything on namespace {} of {new_name}{formatted}, which takes place {} of the volume",
        a.new_ns, a.place
    );
    // Refused here when nobody can answer; asked once the devices are
    // open, and only read: before the volume is opened (which may write)
    // and before anything is formatted.
    let confirmation = Confirmation::before_opening(&what, a.yes)?;
    let mut controllers = open_controllers(&a.volume)?;
    let new_index = new_controller(&a.volume, &mut controllers, &new_name)?;
    let new_name = controllers[new_index].name.clone();
    let volume_id = members_read(&a.volume, &controllers)?.into_iter().find_map(|(_, state)| match state {
        DeviceState::Member { volume_id, .. } => Some(volume_id),
        _ => None,
    });
    let (named, state) = device::probe_namespace(&controllers[new_index].controller, a.new_ns, &new_name);
    if !a.force {
        if let Some(holds) = state.as_ref().and_then(|state| not_blank(state, volume_id.unwrap_or(0))) {
            return Err(format!(
                "replace: namespace {} of {new_name} is not blank: {holds}; nothing was changed (--force destroys \
                 what it holds)",
                a.new_ns
            ));
        }
    }
    let of_volume = volume_id.map_or_else(|| "the volume".to_string(), |id| format!("volume {id:#018x}"));
    confirmation.ask(
        "volume",
        &format!("replace destroys everything on {named}{formatted}, to take place {} of {of_volume}", a.place),
    )?;
    if a.volume.sim.is_none() {
        match_lba_format(a, &mut controllers, new_index)?;
    }
    let options = resilver_device_options(a.resilver.qd);
    let devices = open_devices(&a.volume, &controllers, options)?;
    // The place replaced is failed or missing: the volume opens without it.
    let mut volume = a.volume.location.open_volume(devices, true)?;
    // What it holds was checked above; without --force, `Volume::replace`
    // checks again (a device that could not be read then is refused here).
    let new_device = open_device(&controllers[new_index], a.new_ns, options)?;
    volume.replace(a.place, new_device, a.force).map_err(|e| format!("replace: {e}"))?;
    let left = volume.status().resilver.iter().find(|r| r.place == a.place).map_or(0, |r| r.bytes_left);
    if !a.json {
        println!(
            "place {}: namespace {} of {new_name} takes it; {} ({}) to resilver",
            a.place,
            a.new_ns,
            left,
            human_bytes(left)
        );
    }
    let report = if a.no_resilver {
        None
    } else {
        let report = resilver_place(&mut volume, &controllers, a.place, &a.resilver, a.json).map_err(|e| {
            format!("place {} was replaced, but {e}; `volume resilver` continues from what was copied", a.place)
        })?;
        Some(report)
    };
    let status = volume.status();
    if a.json {
        let health = health_of(&status, &controllers);
        let value = json!({
            "tool": "volume",
            "command": "replace",
            "events": nvme_examples::events::seen_json(),
            "place": a.place,
            "new_device": { "pci": new_name, "nsid": a.new_ns },
            "bytes_to_resilver": left,
            "resilver": report,
            "complete": report.as_ref().is_none_or(ResilverReport::complete),
            "status": status_json(&status, &health),
        });
        println!("{value}");
    } else {
        match &report {
            Some(report) => print!("{}", resilver_text(report)),
            None => println!("resilver: not run (--no-resilver): `volume resilver` writes the copies"),
        }
    }
    volume.close().map_err(|e| format!("close: {e}"))?;
    Ok(if report.as_ref().is_none_or(ResilverReport::complete) { Done::Healthy } else { Done::Attention })
}

/// `(block size, metadata bytes per block)` of namespace `nsid` of `named`.
fn lba_format_of(named: &Named, nsid: u32) -> Result<(u32, u16), String> {
    let ns = named.controller.namespace(nsid).map_err(|e| format!("{} namespace {nsid}: {e}", named.name))?;
    Ok((ns.block_size(), ns.metadata().map_or(0, |format| format.bytes_per_block)))
}

/// The new device's namespace in the LBA format of the volume's first
/// device given: formatted to it with --format, else refused with what to
/// do, before anything is written.
fn match_lba_format(a: &ReplaceArgs, controllers: &mut [Named], new_index: usize) -> Result<(), String> {
    let Some(first) = a.volume.location.device_choices()?.into_iter().find(|c| c.controller != new_index) else {
        return Ok(());
    };
    let wanted = lba_format_of(&controllers[first.controller], first.nsid)?;
    let new = &mut controllers[new_index];
    let have = lba_format_of(new, a.new_ns)?;
    if have == wanted {
        return Ok(());
    }
    let describe = |(block, metadata): (u32, u16)| format!("{block}-byte blocks with {metadata} bytes of metadata");
    if !a.format {
        return Err(format!(
            "replace: namespace {} of {} has {}, the volume's devices {}: pass --format to format it \
             (Format NVM; it destroys what the namespace holds)",
            a.new_ns,
            new.name,
            describe(have),
            describe(wanted)
        ));
    }
    new.controller
        .format_namespace(a.new_ns, wanted.0, wanted.1)
        .map_err(|e| format!("replace: formatting namespace {} of {}: {e}", a.new_ns, new.name))?;
    if !a.json {
        println!("namespace {} of {}: formatted to {}", a.new_ns, new.name, describe(wanted));
    }
    Ok(())
}

/// What a device `replace` was given holds, when it is not blank, for
/// the volume `volume_id`.
fn not_blank(state: &DeviceState, volume_id: u64) -> Option<String> {
    match state {
        DeviceState::Blank => None,
        DeviceState::Member { volume_id: id, device_index, .. } if *id == volume_id => Some(format!(
            "it is place {device_index} of this volume (given with the volume's devices, it rejoins and only what it \
             missed is resilvered)"
        )),
        DeviceState::Member { volume_id, device_index, profile } => {
            Some(format!("it is place {device_index} of volume {volume_id:#018x} ({profile:?})"))
        }
        DeviceState::Unreadable(what) => {
            Some(format!("no label found and reads failed ({what}): it may hold a volume"))
        }
        DeviceState::Unrecognized => Some("no label found, but it holds data".into()),
        DeviceState::OtherVersion(version) => Some(format!("it holds a volume of format version {version}")),
    }
}

/// The distributed rebuild of a lost member's copies onto the others.
fn run_rebuild(a: &ResilverArgs) -> Result<Done, String> {
    let controllers = open_controllers(&a.volume)?;
    let devices = open_devices(&a.volume, &controllers, resilver_device_options(a.resilver.qd))?;
    // The place rebuilt is failed or missing: the volume opens without it.
    let mut volume = a.volume.location.open_volume(devices, true)?;
    let away =
        volume.status().devices.iter().find(|d| d.state == zoned_allocator::MemberState::Failed).map(|d| d.place);
    let Some(place) = a.place.or(away) else {
        return Err("rebuild: no member is failed or missing (name one with --place)".into());
    };
    let report = copy_place(&mut volume, &controllers, place, &a.resilver, a.json, true)?;
    let status = volume.status();
    if a.json {
        let health = health_of(&status, &controllers);
        let value = json!({
            "tool": "volume",
            "command": "rebuild",
            "events": nvme_examples::events::seen_json(),
            "place": place,
            "rebuild": report,
            "complete": report.complete(),
            "status": status_json(&status, &health),
        });
        println!("{value}");
    } else {
        print!("{}", resilver_text(&report));
        if report.complete() {
            let out =
                if place >= 3 { format!("`volume remove --place {place}` takes it out, or ") } else { String::new() };
            println!("place {place} holds nothing now: {out}`volume replace --place {place}` puts a device in it");
        }
    }
    volume.close().map_err(|e| format!("close: {e}"))?;
    Ok(if report.complete() && status.redundancy.extents_at_risk == 0 { Done::Healthy } else { Done::Attention })
}

/// A blank device into the pool as a new member.
fn add(a: &AddArgs) -> Result<Done, String> {
    let new_name = a.new_pci.clone().unwrap_or_else(|| format!("sim{}", a.volume.sim_devices));
    let what = format!("add destroys everything on namespace {} of {new_name}, which joins the volume", a.new_ns);
    let confirmation = Confirmation::before_opening(&what, a.yes)?;
    let mut controllers = open_controllers(&a.volume)?;
    let new_index = new_controller(&a.volume, &mut controllers, &new_name)?;
    if a.volume.sim.is_none() && a.volume.location.pci.iter().any(|p| *p == controllers[new_index].name) {
        let given = a.volume.location.device_choices()?;
        if given.iter().any(|c| a.volume.location.pci.get(c.controller) == Some(&new_name) && c.nsid == a.new_ns) {
            return Err(format!("--new-pci {new_name} --new-ns {}: a device given as the volume's", a.new_ns));
        }
    }
    let new_name = controllers[new_index].name.clone();
    let (named, state) = device::probe_namespace(&controllers[new_index].controller, a.new_ns, &new_name);
    if !a.force {
        if let Some(holds) = state.as_ref().and_then(|state| not_blank(state, 0)) {
            return Err(format!(
                "add: namespace {} of {new_name} is not blank: {holds}; nothing was changed (--force destroys what \
                 it holds)",
                a.new_ns
            ));
        }
    }
    confirmation.ask("volume", &format!("add destroys everything on {named}, which joins the volume"))?;
    let devices = open_devices(&a.volume, &controllers, DeviceOptions::default())?;
    let mut volume = a.volume.location.open_volume(devices, false)?;
    let new_device = open_device(&controllers[new_index], a.new_ns, DeviceOptions::default())?;
    let place = volume.add(new_device, a.force).map_err(|e| format!("add: {e}"))?;
    let status = volume.status();
    if a.json {
        let health = health_of(&status, &controllers);
        let value = json!({
            "tool": "volume",
            "command": "add",
            "place": place,
            "new_device": { "pci": new_name, "nsid": a.new_ns },
            "capacity_bytes": volume.capacity_bytes(),
            "status": status_json(&status, &health),
        });
        println!("{value}");
    } else {
        println!(
            "place {place}: namespace {} of {new_name} joins the volume; capacity now {}",
            a.new_ns,
            human_bytes(volume.capacity_bytes())
        );
    }
    volume.close().map_err(|e| format!("close: {e}"))?;
    Ok(health_state(status.state))
}

/// A member out of the pool: its copies moved to the others.
fn remove(a: &RemoveArgs) -> Result<Done, String> {
    let what = format!("remove moves every copy off place {} and takes it out of the volume", a.place);
    let confirmation = Confirmation::before_opening(&what, a.yes)?;
    let controllers = open_controllers(&a.volume)?;
    let devices = open_devices(&a.volume, &controllers, DeviceOptions::default())?;
    // A member away is removed once a distributed rebuild emptied it: the
    // volume opens without it (--degraded).
    let mut volume = a.volume.location.open_volume(devices, a.volume.location.degraded)?;
    let status = volume.status();
    let Some(device) = status.devices.get(a.place) else {
        return Err(format!("--place {}: the volume has {} places", a.place, status.devices.len()));
    };
    let named = format!(
        "place {} ({} {} {}, {} used)",
        a.place,
        device.pci,
        device.model,
        device.serial,
        human_bytes(device.used_bytes)
    );
    confirmation.ask("volume", &format!("remove moves every copy off {named} and takes it out of the volume"))?;
    let progress = std::io::stderr().is_terminal() && !a.json && !a.no_progress;
    let removal = volume
        .remove(a.place, &mut |done, total| {
            if progress {
                let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
                eprint!(
                    "\rremove: place {} {:5.1}% {:.0}/{:.0} MiB ",
                    a.place,
                    done as f64 / total.max(1) as f64 * 100.0,
                    mib(done),
                    mib(total)
                );
            }
            interrupt::signal_name().is_none()
        })
        .map_err(|e| format!("remove: {e}"))?;
    if progress {
        eprintln!();
    }
    let status = volume.status();
    if a.json {
        let health = health_of(&status, &controllers);
        let value = json!({
            "tool": "volume",
            "command": "remove",
            "removal": removal,
            "status": status_json(&status, &health),
        });
        println!("{value}");
    } else if removal.complete {
        println!(
            "place {}: removed; {} copies ({}) moved to the others",
            a.place,
            removal.extents_moved,
            human_bytes(removal.bytes_moved)
        );
        if removal.heir_extents_moved > 0 {
            println!(
                "  its metadata copy went to the member now in its place, which first moved {} of its copies ({}) \
                 out of the zones the copy takes",
                removal.heir_extents_moved,
                human_bytes(removal.heir_bytes_moved)
            );
        }
    } else {
        println!(
            "place {}: stopped; {} copies ({}) moved so far, committed: run it again to go on",
            a.place,
            removal.extents_moved,
            human_bytes(removal.bytes_moved)
        );
    }
    volume.close().map_err(|e| format!("close: {e}"))?;
    Ok(if removal.complete { health_state(status.state) } else { Done::Attention })
}

fn check(a: &CheckArgs) -> Result<Done, String> {
    let controllers = open_controllers(&a.volume)?;
    let devices = open_devices(&a.volume, &controllers, DeviceOptions::default())?;
    let (report, devices) = Volume::check(devices, &a.volume.location.volume_options(a.volume.location.degraded))
        .map_err(|e| format!("check: {}", explain(e)))?;
    drop(devices);
    if a.json {
        println!("{}", json!({ "tool": "volume", "command": "check", "report": report }));
    } else {
        print!("{}", check_text(&report));
    }
    Ok(if report.clean { Done::Healthy } else { Done::Attention })
}

fn fail(a: &FailArgs) -> Result<Done, String> {
    let what = format!(
        "fail gives up device place {} of the volume: it goes on degraded, and what is written from now on has \
         one copy until a replace and its resilver",
        a.place
    );
    let confirmation = Confirmation::before_opening(&what, a.yes)?;
    let controllers = open_controllers(&a.volume)?;
    // The device at the place, by its label (read only: the volume is
    // opened, which may write, once the answer is yes).
    let at_place = members_read(&a.volume, &controllers)?.into_iter().find_map(|(named, state)| match state {
        DeviceState::Member { volume_id, device_index, .. } if usize::from(device_index) == a.place => {
            Some((named, volume_id))
        }
        _ => None,
    });
    match at_place {
        Some((named, volume_id)) => confirmation.ask(
            "volume",
            &format!(
                "fail gives up place {} of volume {volume_id:#018x}, {named}: the volume goes on degraded, and \
                 what is written from now on has one copy until a replace and its resilver",
                a.place
            ),
        )?,
        None => confirmation.ask("volume", &what)?,
    }
    let devices = open_devices(&a.volume, &controllers, DeviceOptions::default())?;
    let mut volume = a.volume.location.open_volume(devices, a.volume.location.degraded)?;
    // The allocator logs a member given up as an error; here it is what
    // was asked for, and the status below shows it.
    let level = log::max_level();
    log::set_max_level(log::LevelFilter::Off);
    let failed = volume.fail_device(a.place, FAILED_BY_OPERATOR);
    log::set_max_level(level);
    failed.map_err(|e| format!("fail: {e}"))?;
    volume.commit().map_err(|e| format!("commit: {e}"))?;
    let status = volume.status();
    let health = health_of(&status, &controllers);
    if a.json {
        let value = json!({
            "tool": "volume",
            "command": "fail",
            "place": a.place,
            "status": status_json(&status, &health),
        });
        println!("{value}");
    } else {
        println!("place {}: given up ({FAILED_BY_OPERATOR})", a.place);
        print!("{}", status_text(&status, &health, now_unix_s()));
    }
    volume.close().map_err(|e| format!("close: {e}"))?;
    Ok(Done::Healthy)
}

/// Keeps one side of a diverged mirror: reads both (writing nothing),
/// says what the other loses, asks, then rebuilds the other from it.
fn resolve(a: &ResolveArgs) -> Result<Done, String> {
    let controllers = open_controllers(&a.volume)?;
    let options = resilver_device_options(a.resilver.qd);
    let volume_options = a.volume.location.volume_options(false);
    let devices = open_devices(&a.volume, &controllers, options)?;
    let sides = match Volume::check(devices, &volume_options) {
        Err(Error::Diverged { sides }) => sides,
        Ok(_) => {
            return Err("resolve: the members have not gone on apart (nothing was changed): open them together; a \
                        member that is only stale rejoins by itself"
                .into())
        }
        Err(error) => return Err(format!("resolve: {}; nothing was changed", explain(error))),
    };
    let named =
        |side: &DivergedSide| if side.name.is_empty() { format!("device {}", side.device) } else { side.name.clone() };
    // A side in full: its address, with the controller's model and serial.
    let described = |side: &DivergedSide| {
        let name = named(side);
        match controllers.iter().find(|c| c.name == side.name) {
            Some(c) => {
                let id = c.controller.identify();
                format!("{name}: {}, serial {}", id.mn.trim(), id.sn.trim())
            }
            None => name,
        }
    };
    let keep = sides.iter().find(|s| named(s) == a.keep).ok_or_else(|| format!("--keep {}: not a side", a.keep))?;
    let lost = sides.iter().find(|s| s.place != keep.place).expect("two sides");
    let what = format!(
        "resolve keeps place {} ({}) and rebuilds place {} ({}) from it: the other side's {} extent(s), {} ({} \
         byte(s)) that the kept side lacks, and its last commit ({} of generation {}), are lost",
        keep.place,
        described(keep),
        lost.place,
        described(lost),
        lost.extents_only_here,
        human_bytes(lost.bytes_only_here),
        lost.bytes_only_here,
        lost.last_seq,
        lost.last_generation,
    );
    if !a.json {
        print!("{}", diverged_text(&sides));
    }
    confirm_on_stdin("volume", &what, a.yes)?;
    let devices = open_devices(&a.volume, &controllers, options)?;
    let mut volume = Volume::resolve(devices, keep.device, &volume_options).map_err(|e| format!("resolve: {e}"))?;
    if !a.json {
        println!("place {} ({}): rebuilt from place {}; resilvering", lost.place, named(lost), keep.place);
    }
    let report = resilver_place(&mut volume, &controllers, lost.place, &a.resilver, a.json).map_err(|e| {
        format!("place {} was taken as a replacement, but {e}; `volume resilver` continues", lost.place)
    })?;
    let status = volume.status();
    if a.json {
        let health = health_of(&status, &controllers);
        let value = json!({
            "tool": "volume",
            "command": "resolve",
            "events": nvme_examples::events::seen_json(),
            "kept": keep,
            "lost": lost,
            "resilver": report,
            "complete": report.complete(),
            "status": status_json(&status, &health),
        });
        println!("{value}");
    } else {
        print!("{}", resilver_text(&report));
    }
    volume.close().map_err(|e| format!("close: {e}"))?;
    Ok(if report.complete() && status.state == VolumeState::Online { Done::Healthy } else { Done::Attention })
}

/// The simulated controllers: a ZNS volume of `--sim-profile` on sim0 to
/// sim{N-1} holding `bytes` of data, and a blank sim{N}. For the degraded
/// and resilvering stories, sim1 is given up after the fill and a quarter
/// more is written without it.
fn sim_controllers(bytes: u64, volume: &VolumeArgs) -> Result<Vec<Named>, String> {
    // The story's own failure is no news: the log stays quiet while it plays.
    let level = log::max_level();
    log::set_max_level(log::LevelFilter::Off);
    let built = sim_story(bytes, volume.sim_state, volume.sim_devices, volume.sim_profile.profile());
    log::set_max_level(level);
    built
}

fn sim_story(bytes: u64, state: SimState, devices: usize, profile: Profile) -> Result<Vec<Named>, String> {
    const ZONE_BYTES: u64 = 64 << 20;
    const LBA_BYTES: u64 = 512;
    const CHUNK_BYTES: u64 = 256 << 10;
    let extra = if state == SimState::Online { 0 } else { (bytes / 4).max(CHUNK_BYTES) };
    let total = bytes + extra;
    // Each device holds its share of the copies, and room to take a lost
    // one's (a distributed rebuild) or a removed one's.
    let per_device = total * profile.copies() as u64 / (devices as u64 - 1).max(1);
    let zones = (per_device.max(total / devices as u64) * 21 / 20 / ZONE_BYTES + 8).max(16);
    let zone_lbas = ZONE_BYTES / LBA_BYTES;
    let namespace = NamespaceConfig::zoned(zones * zone_lbas, LBA_BYTES as u32, zone_lbas, zone_lbas);
    let mut config = SimConfig::empty().with_namespace(namespace);
    config.memory_limit_bytes = 2 * total + (1 << 30);
    let controllers = (0..=devices)
        .map(|index| {
            // Each its own serial, as drives have.
            let transport: Arc<dyn Transport> =
                Simulator::new(SimConfig { serial: format!("sim-{index}"), ..config.clone() });
            let controller =
                Controller::init(transport, ControllerOptions::default()).map_err(|e| format!("simulator: {e}"))?;
            Ok(Named { name: format!("sim{index}"), controller })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let members = controllers[..devices]
        .iter()
        .map(|named| open_device(named, 1, DeviceOptions::default()))
        .collect::<Result<Vec<_>, _>>()?;
    let options = VolumeOptions { profile, ..VolumeOptions::default() };
    let mut volume = Volume::format(members, &options).map_err(|e| format!("simulator: format: {e}"))?;
    let data: Vec<u8> = (0..CHUNK_BYTES).map(|i| (i * 31 + i / 4096) as u8).collect();
    let fill = |volume: &mut Volume, from: u64, to: u64| -> Result<(), String> {
        for owner in from / CHUNK_BYTES..to.div_ceil(CHUNK_BYTES) {
            volume.write(0, &data, owner).map_err(|e| format!("simulator: filling: {e}"))?;
        }
        volume.commit().map(|_| ()).map_err(|e| format!("simulator: commit: {e}"))
    };
    fill(&mut volume, 0, bytes)?;
    if state == SimState::Diverged {
        volume.close().map_err(|e| format!("simulator: close: {e}"))?;
        // Each side opened alone and written: sim1 a quarter more, sim0 a
        // chunk.
        let alone = VolumeOptions { degraded: true, ..options };
        for (index, to) in [(1, total), (0, bytes + CHUNK_BYTES)] {
            let device = open_device(&controllers[index], 1, DeviceOptions::default())?;
            let mut volume = Volume::open(vec![device], &alone).map_err(|e| format!("simulator: open: {e}"))?;
            fill(&mut volume, bytes, to)?;
            volume.close().map_err(|e| format!("simulator: close: {e}"))?;
        }
        return Ok(controllers);
    }
    if state != SimState::Online {
        volume.fail_device(1, "pulled from the simulator").map_err(|e| format!("simulator: {e}"))?;
        fill(&mut volume, bytes, total)?;
    }
    volume.close().map_err(|e| format!("simulator: close: {e}"))?;
    Ok(controllers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The command a stopped resilver names continues it on the volume's
    /// devices: after a replace, the new one is among them.
    #[test]
    fn a_stopped_resilver_names_the_command_that_continues_it() {
        let hint = |line: &[&str]| {
            continue_hint(&Cli::try_parse_from(std::iter::once("volume").chain(line.iter().copied())).unwrap())
        };
        let replace = hint(&["replace", "--pci", "0000:00:11.0", "--place", "0", "--new-pci", "02:00.0"]);
        assert!(replace.contains("`volume resilver --pci 0000:00:11.0 --pci 0000:02:00.0 --place 0`"), "{replace}");
        let resilver = hint(&["resilver", "--pci", "0000:00:11.0", "--pci", "0000:00:12.0"]);
        assert!(resilver.contains("`volume resilver --pci 0000:00:11.0 --pci 0000:00:12.0`"), "{resilver}");
        assert!(hint(&["resilver", "--sim", "1M"]).contains("nothing continues it"));
    }

    #[test]
    fn the_places_and_namespaces_are_checked() {
        let parse = |line: &[&str]| Cli::try_parse_from(std::iter::once("volume").chain(line.iter().copied()));
        assert!(parse(&["replace", "--place", "2", "--new-pci", "x"]).is_err());
        assert!(parse(&["replace", "--place", "1"]).is_err(), "a new device is needed");
        assert!(parse(&["replace", "--place", "1", "--sim", "1M"]).is_ok(), "sim2 is the default on --sim");
        assert!(parse(&["status", "--json", "--prometheus"]).is_err());
        assert!(parse(&["status", "--sim-state", "degraded"]).is_err(), "--sim-state needs --sim");
        assert!(parse(&["resilver", "--qd", "0"]).is_err());
        assert!(parse(&["fail"]).is_err(), "a place is needed");
        let Command::Replace(replace) =
            parse(&["replace", "--place", "1", "--new-pci", "0b:00.0", "--pci", "0a:00.0", "--pci", "0000:0b:00.0"])
                .expect("parses")
                .command
        else {
            panic!("a replace")
        };
        assert!(check_args(&Command::Replace(replace)).unwrap_err().contains("a device given as the volume's"));
    }
}

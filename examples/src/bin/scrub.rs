//! scrub: reads every extent of a volume at high queue depth, verifies
//! checksums and repairs bad copies from the other one, like `btrfs scrub
//! start -B`, with a rate limit, resume, progress and `--json`. The report
//! ends with the pass's result: clean only when every byte of the copies
//! scrubbed was read and verified (over every run of a resumed pass) and no
//! bad block is left.

use clap::Parser;
use nvme_driver::sim::{NamespaceConfig, SimConfig, Simulator};
use nvme_driver::{Controller, ControllerOptions, Transport};
use nvme_examples::args::{self, BLOCK_BYTES, IO_BYTES_MAX, QUEUE_DEPTH_MAX, SIM_BYTES_MAX, THREADS_MAX};
use nvme_examples::device::VolumeLocation;
use nvme_examples::interrupt;
use nvme_examples::logging;
use nvme_examples::profile::ProfileArg;
use nvme_scrub::{scrub, Checkpoint, Control, Outcome, ScrubOptions};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;
use zoned_allocator::{checksum, Device, DeviceOptions, Profile, Volume, VolumeOptions};

/// Verify every block of a volume and repair bad copies from the other one.
#[derive(Parser, Debug)]
#[command(
    name = "scrub",
    version,
    long_about = None,
    after_help = "The report ends with the result of the pass: clean (every byte of the copies scrubbed read and \
                  verified, over every run of a resumed pass, and no bad block left), incomplete (no bad block left \
                  in what was read, but not everything was read and verified: cancelled, --no-verify, or an earlier \
                  run that did not verify), or damaged (bad blocks left: uncorrectable, a failed repair, or found by \
                  --readonly). --json carries it as report.outcome, with report.pass_bytes_read, \
                  report.pass_bytes_verified and report.bytes_total.\n\
                  Exit status: 0 clean or incomplete, 3 damaged, 1 the scrub failed, 2 a bad argument."
)]
struct Args {
    #[command(flatten)]
    volume: VolumeLocation,
    /// Reads in flight, 1..=1024.
    #[arg(long, default_value_t = 64, value_parser = args::int_in::<usize>(1, QUEUE_DEPTH_MAX))]
    qd: usize,
    /// Largest read, a multiple of 4k, 4k..=64M (default, and at most: the
    /// namespace's largest transfer).
    #[arg(long, value_parser = args::size_in(BLOCK_BYTES, BLOCK_BYTES, IO_BYTES_MAX))]
    bs: Option<u64>,
    /// Rate limit in MiB/s, 1..=1048576 (fractions allowed); default: none.
    #[arg(long, value_name = "MIB_S", value_parser = args::rate_mib_s, allow_negative_numbers = true)]
    limit: Option<f64>,
    /// Detect and report, repair nothing.
    #[arg(long)]
    readonly: bool,
    /// Plan, merge, read and account, but skip checksums (engine speed).
    #[arg(long)]
    no_verify: bool,
    /// Threads verifying checksums, 0..=64; 0 verifies on the polling thread.
    #[arg(long, default_value_t = 2, value_parser = args::int_in::<usize>(0, THREADS_MAX))]
    verify_threads: usize,
    /// Ablation: one read at a time, each waited for (the regressed btrfs scrub).
    #[arg(long)]
    submit_and_wait: bool,
    /// Scrub only this copy (lane), 0..=15, one the volume has: a
    /// mirror's 0 or 1, a pool's device place.
    #[arg(long, value_parser = args::int_in::<usize>(0, 15))]
    copy: Option<usize>,
    /// Keep the checkpoint in FILE (the position, and what was found and
    /// repaired so far); with --resume, continue from it.
    #[arg(long, value_name = "FILE")]
    state: Option<PathBuf>,
    /// Continue the pass saved in --state, reporting what its earlier runs
    /// found too; a finished pass starts a new one.
    #[arg(long, requires = "state")]
    resume: bool,
    /// Start a new pass even though --state holds an unfinished one, or
    /// another volume's: what it had found is dropped. Without it, such a
    /// file is refused (and a file that is not a checkpoint always is).
    #[arg(long, requires = "state", conflicts_with = "resume")]
    new_pass: bool,
    /// Cancel at the first checkpoint past this many bytes verified, more
    /// than 0 (for tests of resume). Checkpoints come at least that often;
    /// the reads already submitted or awaiting verification still finish,
    /// so it stops a few reads after (at --qd 1, within a few MiB).
    #[arg(long, value_parser = args::size_in(1, 1, u64::MAX))]
    cancel_after: Option<u64>,
    /// crc32c implementation: auto (the faster one here, measured), hardware or table.
    #[arg(long, default_value = "auto", value_parser = ["auto", "hardware", "table"])]
    crc32c: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// No progress line, even on a terminal.
    #[arg(long)]
    no_progress: bool,
    /// Run on the in-process simulator: a mirrored ZNS volume filled with
    /// this much data (e.g. 1G, 4k..=1T), scrubbed at native speed.
    #[arg(long, value_parser = args::size_in(1, BLOCK_BYTES, SIM_BYTES_MAX), conflicts_with = "pci")]
    sim: Option<u64>,
    /// Profile of the simulated volume.
    #[arg(long, value_enum, default_value = "mirror", requires = "sim")]
    sim_profile: ProfileArg,
    /// Rot this many blocks of the simulated volume's first copy (one bit
    /// each, spread evenly over its extents), for the scrub to find. The
    /// same --sim, --sim-profile and --sim-rot make the same volume, its ID
    /// included, so that a pass saved with --state resumes on the next run.
    #[arg(long, default_value = "0", requires = "sim")]
    sim_rot: u64,
}

/// The command that continues this pass from its checkpoint: the same
/// arguments, with --resume, and without what would start over
/// (--new-pass) or stop it again (--cancel-after).
fn continue_command(resuming: bool) -> String {
    let mut again = Vec::new();
    let mut given = std::env::args();
    while let Some(arg) = given.next() {
        match arg.as_str() {
            "--new-pass" => {}
            "--cancel-after" => {
                given.next();
            }
            _ if arg.starts_with("--cancel-after=") => {}
            _ => again.push(arg),
        }
    }
    if !resuming {
        again.push("--resume".into());
    }
    again.join(" ")
}

fn main() -> ExitCode {
    logging::init("scrub");
    interrupt::install();
    let args = Args::parse();
    if let Err(message) = args.volume.device_choices() {
        args::exit_usage_error::<Args>("scrub", &message);
    }
    // Each copy of the simulated volume's data is kept in memory.
    let copies = Profile::from(args.sim_profile).min_devices().max(2) as u64;
    if let Err(message) = args.sim.map_or(Ok(()), |bytes| args::sim_fits("--sim", bytes.saturating_mul(copies))) {
        args::exit_usage_error::<Args>("scrub", &message);
    }
    match run(&args) {
        Ok(Outcome::Damaged) => ExitCode::from(3),
        Ok(Outcome::Clean | Outcome::Incomplete) => ExitCode::SUCCESS,
        Err(Stop::Refused(message)) => {
            nvme_examples::output::failure("scrub", &message);
            ExitCode::from(2)
        }
        Err(Stop::Failed(message)) => {
            nvme_examples::output::failure("scrub", &message);
            ExitCode::FAILURE
        }
        Err(Stop::Interrupted(message)) => {
            eprintln!("scrub: {message}");
            ExitCode::from(interrupt::EXIT_INTERRUPTED)
        }
        Err(Stop::Unsaved { outcome, message }) => {
            eprintln!("scrub: {message}");
            // The scrub's own finding is not masked by the file's failure.
            ExitCode::from(if outcome == Outcome::Damaged { 3 } else { 1 })
        }
    }
}

/// Why a run ends without its result.
enum Stop {
    /// An argument, found wrong before the scrub began (exit 2).
    Refused(String),
    /// The scrub failed (exit 1).
    Failed(String),
    /// The scrub ran and its report was printed, but the checkpoint could
    /// not be saved.
    Unsaved { outcome: Outcome, message: String },
    /// A signal stopped it; its report (of what was read) was printed.
    Interrupted(String),
}

impl From<String> for Stop {
    fn from(message: String) -> Stop {
        Stop::Failed(message)
    }
}

/// Checks `--state` before any device is opened: its directory takes a
/// file (the checkpoint is written beside it, then renamed), and an
/// existing file there is a scrub checkpoint, finished unless resumed or
/// replaced with `--new-pass`. Returns the checkpoint found, if any.
fn check_state(args: &Args) -> Result<Option<Checkpoint>, Stop> {
    let Some(path) = &args.state else { return Ok(None) };
    let shown = path.display();
    let existing = match std::fs::read_to_string(path) {
        Ok(text) => Some(Checkpoint::from_json(&text).map_err(|_| {
            Stop::Refused(format!(
                "--state {shown}: the file exists and is not a scrub checkpoint; refusing to overwrite it (give \
                 another path, or remove it)"
            ))
        })?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !args.resume => None,
        Err(e) => return Err(Stop::Refused(format!("--state {shown}: {e}"))),
    };
    if let Some(checkpoint) = &existing {
        if !checkpoint.finished && !args.resume && !args.new_pass {
            let found = checkpoint.findings.errors.total_blocks();
            return Err(Stop::Refused(format!(
                "--state {shown} holds an unfinished pass ({} bytes read, {found} bad block(s) found so far): \
                 --resume continues it; --new-pass starts over and drops it",
                checkpoint.bytes_done
            )));
        }
    }
    // Where the checkpoint will be written (beside it, then renamed),
    // tried now.
    nvme_examples::output::writable("--state", path, &path.with_extension("tmp")).map_err(Stop::Refused)?;
    Ok(existing)
}

fn device_options(args: &Args) -> DeviceOptions {
    DeviceOptions {
        queue_depth: (args.qd as u16).saturating_add(8).max(16),
        buffers: args.qd as u32 + 8,
        ..DeviceOptions::default()
    }
}

/// A simulated mirrored (or dup) ZNS volume holding `bytes` of data.
fn sim_volume(args: &Args, bytes: u64) -> Result<(Vec<Controller>, Volume), String> {
    let zone_lbas = (64u64 << 20) / 512;
    let zones = (bytes * 21 / 20 / (64 << 20) + 8).max(16);
    let namespace = NamespaceConfig::zoned(zones * zone_lbas, 512, zone_lbas, zone_lbas);
    let mut config = SimConfig::empty().with_namespace(namespace.clone());
    config.memory_limit_bytes = 2 * bytes + (1 << 30);
    let profile = Profile::from(args.sim_profile);
    let sims: Vec<Arc<Simulator>> = (0..profile.min_devices()).map(|_| Simulator::new(config.clone())).collect();
    let controllers: Vec<Controller> = sims
        .iter()
        .map(|sim| {
            let transport: Arc<dyn Transport> = sim.clone();
            Controller::init(transport, ControllerOptions::default()).map_err(|e| format!("simulator: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let devices = controllers
        .iter()
        .map(|c| Device::open(c, 1, device_options(args)).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    // The same arguments make the same volume: its ID too.
    let volume_id = [bytes, args.sim_profile as u64, args.sim_rot]
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |hash, &value| (hash ^ value).wrapping_mul(0x0100_0000_01b3))
        | 1;
    let options = VolumeOptions { profile, volume_id: Some(volume_id), ..VolumeOptions::default() };
    let mut volume = Volume::format(devices, &options).map_err(|e| format!("format: {e}"))?;
    let chunk = 256 << 10;
    let data: Vec<u8> = (0..chunk).map(|i| (i * 31 + i / 4096) as u8).collect();
    let mut written = 0;
    while written < bytes {
        volume.submit_write(0, &data, written / chunk as u64).map_err(|e| format!("filling: {e}"))?;
        volume.poll();
        while let Some(done) = volume.next_done() {
            done.result.map_err(|e| format!("filling: {e}"))?;
        }
        written += chunk as u64;
    }
    volume.commit().map_err(|e| format!("commit: {e}"))?;
    // Rot: one block in every so many of the first copy's extents.
    let ids: Vec<_> = volume.extent_ids().collect();
    for n in 0..args.sim_rot.min(ids.len() as u64) {
        let id = ids[(n * ids.len() as u64 / args.sim_rot.max(1)) as usize];
        let location = volume.location(id, 0).ok_or("a simulated extent without its first copy")?;
        let lba = volume.lba(0, location);
        sims[volume.lane_device(0)].corrupt_at_rest(1, lba + n % 8, 3);
    }
    Ok((controllers, volume))
}

fn open_volume(args: &Args) -> Result<(Vec<Controller>, Volume), String> {
    if let Some(bytes) = args.sim {
        return sim_volume(args, bytes);
    }
    let controllers = args.volume.open_controllers()?;
    let devices = args.volume.open_devices(&controllers, device_options(args))?;
    let volume = args.volume.open_volume(devices, args.volume.degraded)?;
    Ok((controllers, volume))
}

fn run(args: &Args) -> Result<Outcome, Stop> {
    // The checkpoint is read before any device is opened: a bad file
    // stops the scrub before it starts.
    let existing = check_state(args)?;
    let resume = if args.resume { existing.clone() } else { None };
    if args.crc32c != "auto" {
        std::env::set_var("ZONED_CRC32C", &args.crc32c);
    }
    let (controllers, mut volume) = open_volume(args)?;
    // Each controller's events (a SMART critical warning) said as they come.
    let mut watch = nvme_examples::events::Watch::of(&controllers);
    if let Some(other) = existing.filter(|c| c.volume_id != volume.id() && !args.resume && !args.new_pass) {
        return Err(Stop::Refused(format!(
            "--state {} holds a checkpoint of volume {:#x}, not of this one ({:#x}): --new-pass replaces it",
            args.state.as_ref().expect("a checkpoint was read").display(),
            other.volume_id,
            volume.id()
        )));
    }
    let options = ScrubOptions {
        max_in_flight: args.qd,
        max_request_bytes: args.bs.map(|b| b as usize),
        verify: !args.no_verify,
        repair: !args.readonly,
        rate_limit_mib_s: args.limit,
        verify_threads: args.verify_threads,
        submit_and_wait: args.submit_and_wait,
        lanes: args.copy.map(|c| vec![c]),
        // --cancel-after is checked at each checkpoint: one at least that
        // often, so that the cancel comes after it, not the next 64 MiB.
        checkpoint_every_bytes: args.cancel_after.map_or(ScrubOptions::default().checkpoint_every_bytes, |limit| {
            limit.min(ScrubOptions::default().checkpoint_every_bytes)
        }),
        ..ScrubOptions::default()
    };
    let control = Control::new();
    interrupt::on_request({
        let control = control.clone();
        move || control.cancel()
    });
    let progress = std::io::stderr().is_terminal() && !args.json && !args.no_progress;
    let started = Instant::now();
    let mut save_error: Option<String> = None;
    let report = scrub(
        &mut volume,
        &options,
        &control,
        resume.as_ref(),
        &mut |p| {
            watch.poll(Instant::now());
            if progress {
                let percent = p.bytes_done as f64 / p.bytes_total.max(1) as f64 * 100.0;
                eprint!(
                    "\rscrub: copy {} {:5.1}% {:.0}/{:.0} MiB {:8.1} MiB/s ETA {:5.0} s ",
                    p.lane,
                    percent,
                    p.bytes_done as f64 / f64::from(1 << 20),
                    p.bytes_total as f64 / f64::from(1 << 20),
                    p.rate_mib_s,
                    p.eta_s
                );
            }
        },
        &mut |checkpoint| {
            if let Some(limit) = args.cancel_after {
                if checkpoint.bytes_done >= limit {
                    control.cancel();
                }
            }
            if let Some(path) = &args.state {
                let text = serde_json::to_string(checkpoint).expect("checkpoints serialize");
                // Write then rename, so a crash never leaves half a file.
                let temporary = path.with_extension("tmp");
                if let Err(e) = std::fs::write(&temporary, text).and_then(|()| std::fs::rename(&temporary, path)) {
                    save_error.get_or_insert(format!("{}: {e}", path.display()));
                }
            }
        },
    )
    .map_err(|e| Stop::Failed(e.to_string()))?;
    if progress {
        eprintln!();
    }
    if args.json {
        let json = serde_json::json!({
            "tool": "scrub",
            "report": report,
            "events": nvme_examples::events::seen_json(),
            "crc32c": checksum::implementation().name(),
            "qd": args.qd,
            "verify_threads": args.verify_threads,
            "wall_seconds": started.elapsed().as_secs_f64(),
            "sim": args.sim.is_some(),
        });
        println!("{json}");
    } else {
        println!("{report}");
        println!("  crc32c: {}, {} verify thread(s)", checksum::implementation().name(), args.verify_threads);
    }
    volume.close().map_err(|e| format!("close: {e}"))?;
    let hint = || match &args.state {
        Some(path) if save_error.is_none() => {
            format!("the pass is saved in {}: `{}` continues it", path.display(), continue_command(args.resume))
        }
        _ => "nothing was saved to continue from (--state FILE keeps the pass, and --resume continues it)".into(),
    };
    if let Some(signal) = interrupt::signal_name() {
        return Err(Stop::Interrupted(format!(
            "interrupted by {signal}; the report above is of what was read; {}",
            hint()
        )));
    }
    if args.cancel_after.is_some() && report.cancelled {
        eprintln!("scrub: cancelled after --cancel-after, as asked; {}", hint());
    }
    if let Some(e) = save_error {
        return Err(Stop::Unsaved {
            outcome: report.outcome,
            message: format!("the report above stands, but the checkpoint could not be saved: {e}"),
        });
    }
    Ok(report.outcome)
}

//! seqwrite: sequential writes through the zoned allocator, like
//! `fio --rw=write`, with fio-format bandwidth, IOPS and latency logs, a
//! flatness figure and an SVG plot. It owns the namespace(s): a volume is
//! created when none is found, and `--format` recreates it.

mod feed;
mod report;

use clap::{Parser, ValueEnum};
use feed::{fill_lookahead, Feed};
use nvme_driver::sim::{SimConfig, Simulator};
use nvme_driver::{Controller, ControllerOptions, Transport};
use nvme_examples::args::{
    self, human_size, Amount, BLOCK_BYTES, IO_BYTES_MAX, QUEUE_DEPTH_MAX, SIM_BYTES_MAX, SOFTWARE_ZONE_BYTES_MAX,
    THREADS_MAX,
};
use nvme_examples::checksums::ChecksumsArg;
use nvme_examples::confirm::Confirmation;
use nvme_examples::device::{self, choose_devices, DeviceChoice};
use nvme_examples::interrupt;
use nvme_examples::logging;
use nvme_examples::output::{self, Failure};
use nvme_examples::profile::ProfileArg;
use nvme_examples::volume_view::human_bytes;
use report::{report, Run, Tally};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use zoned_allocator::{Device, DeviceOptions, Profile, Volume, VolumeOptions, WriteMode};

/// Sequential writes through the zoned allocator (fio --rw=write style).
/// WARNING: the tool owns the namespaces it is given and overwrites them.
#[derive(Parser, Debug)]
#[command(
    name = "seqwrite",
    version, long_about = None)]
struct Args {
    /// Controller PCI address: one, or one per device of a volume across
    /// controllers (a pool of up to 16). Default: the first NVMe function
    /// bound to vfio-pci.
    #[arg(long = "pci", value_name = "BDF", value_parser = args::pci_address)]
    pci: Vec<String>,
    /// Namespace IDs (1..=4294967294), comma-separated, one per device: a
    /// mirror on one controller takes two (--ns 1,2); with several --pci,
    /// one ID serves all. Default: 1 (1,2 for a mirror on --sim, 1,2,3 for
    /// a mirror3).
    #[arg(long = "ns", value_name = "NSID", value_delimiter = ',', value_parser = args::nsid)]
    ns: Vec<u32>,
    /// Copies: single (one, on any of the devices given), dup (two on one
    /// namespace), mirror or mirror3 (two or three, on distinct devices of
    /// the two or three and more given: one --pci each, or one --pci and
    /// one --ns each). The volume spans every device given.
    #[arg(long, value_enum, default_value = "single")]
    profile: ProfileArg,
    /// Recreate the volume (destroys its contents; asks first, see --yes).
    #[arg(long)]
    format: bool,
    /// For a new volume (--format, or blank devices): where it keeps its
    /// blocks' checksums (default auto). auto: block tags on namespaces
    /// with per-block metadata, zone checksum areas otherwise; area: after
    /// each zone's data, on any namespace; map: in memory and the journal;
    /// tags. Refused on an existing volume.
    #[arg(long, value_enum)]
    checksums: Option<ChecksumsArg>,
    /// Open a mirror with a member missing, blank or failing, on the one
    /// left (the member is recorded failed, and what is written has one
    /// copy until `volume replace` and its resilver); with --profile
    /// mirror, one device may then be given.
    #[arg(long)]
    degraded: bool,
    /// Don't ask before --format destroys the volume (without a terminal
    /// to ask on, --format needs it).
    #[arg(long)]
    yes: bool,
    /// Block size of each write: a multiple of 4k, 4k..=64M, and at most
    /// the volume's largest extent (1M on volumes this tool formats).
    #[arg(long, default_value = "256k", value_parser = args::size_in(BLOCK_BYTES, BLOCK_BYTES, IO_BYTES_MAX))]
    bs: u64,
    /// Bytes to write (at least --bs), or a percentage of the volume's
    /// capacity, more than 0 and at most 100 ("95%").
    #[arg(long, default_value = "95%", value_parser = args::amount)]
    size: Amount,
    /// Writes in flight, 1..=1024.
    #[arg(long, default_value_t = 1, value_parser = args::int_in::<usize>(1, QUEUE_DEPTH_MAX))]
    iodepth: usize,
    /// Stop after this many seconds (more than 0, at most a year) even if
    /// --size is not reached.
    #[arg(long, value_name = "SECONDS", value_parser = args::runtime_s, allow_negative_numbers = true)]
    runtime: Option<f64>,
    /// Zone Append on zoned namespaces (the default when the device has it).
    #[arg(long, conflicts_with = "ordered")]
    zone_append: bool,
    /// Writes at the write pointer, one in flight per zone.
    #[arg(long)]
    ordered: bool,
    /// Stream (lifetime class) to write to, 0..=63: one of the volume's
    /// streams.
    #[arg(long, default_value_t = 0, value_parser = args::int_in::<u8>(0, STREAMS_MAX - 1))]
    stream: u8,
    /// Streams of a new volume (--format, or blank devices), 1..=64
    /// (default 1). Refused on an existing volume.
    #[arg(long, value_parser = args::int_in::<u8>(1, STREAMS_MAX))]
    streams: Option<u8>,
    /// Software zone size on conventional namespaces, a multiple of 4k
    /// (default: from the capacity, with room for a checksum area after a
    /// power of two of data). Refused when every namespace is zoned.
    #[arg(long, value_parser = args::size_in(BLOCK_BYTES, BLOCK_BYTES, SOFTWARE_ZONE_BYTES_MAX))]
    software_zone: Option<u64>,
    /// Interval of the logs and the flatness figure, in milliseconds,
    /// 1..=3600000.
    #[arg(long, default_value_t = 1000, value_parser = args::int_in::<u64>(1, LOG_INTERVAL_MS_MAX))]
    log_interval: u64,
    /// Write fio-format logs PREFIX_bw.1.log, PREFIX_iops.1.log and PREFIX_lat.1.log.
    #[arg(long, value_name = "PREFIX")]
    write_log: Option<String>,
    /// Draw bandwidth over time to this SVG file.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Threads computing checksums ahead of the writer, 0..=64 (default
    /// 1); 0 checksums on the submitting thread. Refused with --same-data,
    /// which computes none, and with --reuse-data, which checksums on the
    /// submitting thread.
    #[arg(long, value_parser = args::int_in::<usize>(0, THREADS_MAX), conflicts_with_all = ["same_data", "reuse_data"])]
    checksum_threads: Option<usize>,
    /// Commit after every this many bytes (and at the end), at least 4k.
    #[arg(long, default_value = "256M", value_parser = args::size_in(1, BLOCK_BYTES, u64::MAX))]
    commit_every: u64,
    /// crc32c implementation: auto (the faster one on this CPU, measured),
    /// hardware (SSE4.2) or table (slicing-by-8).
    #[arg(long, default_value = "auto", value_parser = ["auto", "hardware", "table"])]
    crc32c: String,
    /// When a poll finds nothing, sleep this many microseconds before the
    /// next, 0..=1000000 (0 spins). Under an emulator a spinning vCPU takes
    /// host CPU from the emulated device; on hardware, spin.
    #[arg(long, default_value_t = 0, value_parser = args::int_in::<u64>(0, POLL_SLEEP_US_MAX))]
    poll_sleep_us: u64,
    /// Make each write in place, in a buffer the volume lends (memory the
    /// device may only read), instead of copying it into DMA memory: needs
    /// VFIO or --sim. The second copy of a dup or mirror is still copied.
    #[arg(long)]
    zero_copy: bool,
    /// Write the same bytes every time, with their checksums computed
    /// once before the run: no per-write data generation or checksum
    /// work (and, with --zero-copy, no copy either), so what is left is
    /// the allocator and the device. The volume still stores and checks
    /// every block's checksum.
    #[arg(long)]
    same_data: bool,
    /// Write the same bytes every time, as fio reuses one buffer, but have
    /// the volume checksum every write (on the submitting thread), as a
    /// file system checksums every block it is given: no data generation,
    /// the per-write checksums kept. With --zero-copy, the peer's work and
    /// no more (the row `hack/bench` compares with btrfs zoned).
    #[arg(long, conflicts_with = "same_data")]
    reuse_data: bool,
    /// Read everything back and verify it afterwards.
    #[arg(long)]
    verify: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// No progress bar, even on a terminal.
    #[arg(long)]
    no_progress: bool,
    /// Run on the in-process simulator instead of a device.
    #[arg(long, conflicts_with = "pci")]
    sim: bool,
    /// Simulated namespace size: a multiple of 512, 1M..=1T.
    #[arg(long, default_value = "1G", value_parser = args::size_in(SIM_LBA_BYTES, 1 << 20, SIM_BYTES_MAX), requires = "sim")]
    sim_capacity: u64,
    /// Simulated zone size, a multiple of 4k (the volume's block) and at
    /// most --sim-capacity; 0 simulates a conventional namespace.
    #[arg(long, default_value = "64M", value_parser = args::size_in(BLOCK_BYTES, 0, SIM_BYTES_MAX), requires = "sim")]
    sim_zone: u64,
    /// Metadata bytes per simulated LBA: 0, 8, 16 or 64 (8 or more: the
    /// volume keeps checksums in block tags).
    #[arg(long, default_value_t = 0, value_parser = parse_sim_metadata, requires = "sim")]
    sim_metadata: u16,
}

fn parse_sim_metadata(text: &str) -> Result<u16, String> {
    match text.parse::<u16>() {
        Ok(bytes) if nvme_driver::sim::METADATA_BYTES_ALLOWED.contains(&bytes) => Ok(bytes),
        _ => Err(format!("{text}: expected one of {:?}", nvme_driver::sim::METADATA_BYTES_ALLOWED)),
    }
}

/// The allocator's most streams per volume (`Volume::format` checks it).
const STREAMS_MAX: u64 = 64;
/// Longest log interval: an hour.
const LOG_INTERVAL_MS_MAX: u64 = 3_600_000;
/// Longest sleep between polls: a second.
const POLL_SLEEP_US_MAX: u64 = 1_000_000;
/// The simulator's logical block.
const SIM_LBA_BYTES: u64 = 512;

impl Args {
    /// Threads computing checksums ahead of the writer (none with
    /// --same-data, which computes them once).
    fn checksum_threads(&self) -> usize {
        if self.same_data || self.reuse_data {
            0
        } else {
            self.checksum_threads.unwrap_or(1)
        }
    }
}

fn main() -> ExitCode {
    logging::init("seqwrite");
    let args = Args::parse();
    if let Err(message) = check_args(&args) {
        args::exit_usage_error::<Args>("seqwrite", &message);
    }
    interrupt::install();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report("seqwrite"),
    }
}

/// Checks what can be checked without a device, against the other options.
/// What needs the volume (--size against its free space, --bs against its
/// largest extent, --stream against its streams) is checked once it is
/// open, before the first write.
fn check_args(args: &Args) -> Result<(), String> {
    device_choices(args)?;
    // Options that do not apply are refused, not ignored.
    if args.degraded && args.format {
        return Err("--degraded opens a mirror that exists on the member left; --format makes a new volume".into());
    }
    if args.sim && args.sim_zone != 0 && args.software_zone.is_some() {
        return Err("--software-zone applies to conventional namespaces, and --sim-zone makes a zoned one".into());
    }
    let profile = Profile::from(args.profile);
    let given = args.pci.len().max(args.ns.len());
    // More devices than the profile spans is refused always; fewer only at
    // format (a volume opened degraded may be given fewer).
    let wanted = devices_wanted(args);
    if given > 0 && (wanted > profile.max_devices() || (args.format && wanted < profile.min_devices())) {
        return Err(format!(
            "--profile {}: a volume of {} to {} device(s), {given} given",
            profile_name(args),
            profile.min_devices(),
            profile.max_devices()
        ));
    }
    if args.sim {
        // What the run writes is kept in memory, on each namespace.
        args::sim_fits("--sim-capacity", args.sim_capacity.saturating_mul(sim_namespaces(args) as u64))?;
    }
    if let Amount::Bytes(bytes) = args.size {
        if bytes < args.bs {
            return Err(format!("--size {}: less than one --bs {} write", human_size(bytes), human_size(args.bs)));
        }
    }
    if args.format {
        check_new_volume(args)?;
    }
    // Where the plot and the logs go, before any device is touched.
    if let Some(path) = &args.plot {
        output::check("--plot", path, output::is_svg)?;
    }
    if let Some(prefix) = &args.write_log {
        for kind in ["bw", "iops", "lat"] {
            output::check("--write-log", Path::new(&format!("{prefix}_{kind}.1.log")), output::is_fio_log)?;
        }
    }
    if args.sim && args.sim_zone > args.sim_capacity {
        return Err(format!(
            "--sim-zone {}: more than --sim-capacity {}",
            human_size(args.sim_zone),
            human_size(args.sim_capacity)
        ));
    }
    Ok(())
}

/// Checks the options against the volume a format would make, before
/// it exists: for `--format`, and for blank devices that seqwrite formats.
fn check_new_volume(args: &Args) -> Result<(), String> {
    // The new volume's limits are known before it exists.
    let largest = VolumeOptions::default().max_extent_bytes as u64;
    if args.bs > largest {
        return Err(format!(
            "--bs {}: --format makes a volume whose largest extent is {}",
            human_size(args.bs),
            human_size(largest)
        ));
    }
    let streams = args.streams.unwrap_or(1);
    if args.stream >= streams {
        return Err(format!(
            "--stream {}: --format makes a volume of --streams {streams} (streams 0..={})",
            args.stream,
            streams - 1
        ));
    }
    Ok(())
}

/// How many devices the volume is on: as many as --pci and --ns give,
/// and at least the profile's fewest (a pool of several is given device
/// by device).
fn devices_wanted(args: &Args) -> usize {
    let given = args.pci.len().max(args.ns.len());
    // A mirror opened degraded may be given the one device left.
    if args.degraded && !args.format && given == 1 {
        return 1;
    }
    given.max(Profile::from(args.profile).min_devices()).min(device::VOLUME_DEVICES_MAX)
}

/// Namespaces of the simulator --sim makes: one per device, and as many as
/// the highest --ns names.
fn sim_namespaces(args: &Args) -> usize {
    devices_wanted(args).max(args.ns.iter().copied().max().unwrap_or(0) as usize)
}

/// The profile as the command line spells it.
fn profile_name(args: &Args) -> String {
    args.profile.to_possible_value().map_or_else(String::new, |v| v.get_name().to_string())
}

/// The devices the volume is on, exactly as --pci and --ns give them. The
/// simulator's namespaces are the tool's own: a mirror on --sim without
/// --ns is on its namespaces 1 and 2.
fn device_choices(args: &Args) -> Result<Vec<DeviceChoice>, String> {
    let wanted = devices_wanted(args);
    let ns = if args.sim && args.ns.is_empty() { (1..=wanted as u32).collect() } else { args.ns.clone() };
    choose_devices(&args.pci, &ns, wanted).map_err(|e| format!("--profile {}: {e}", profile_name(args)))
}

/// The devices, in words: "namespace 1 of 0000:01:00.0 and namespace 2 of ...".
fn describe_devices(args: &Args, choices: &[DeviceChoice]) -> String {
    let names: Vec<String> = choices
        .iter()
        .map(|choice| match args.pci.get(choice.controller) {
            Some(bdf) => format!("namespace {} of {bdf}", choice.nsid),
            None => format!("namespace {} of the default controller", choice.nsid),
        })
        .collect();
    names.join(" and ")
}

fn open_devices(args: &Args, controllers: &[Controller]) -> Result<Vec<Device>, String> {
    // Lent buffers: those in flight, and those being filled ahead.
    let fill_buffers = if args.zero_copy { fill_lookahead(args) as u32 + args.iodepth as u32 + 2 } else { 0 };
    let options = DeviceOptions {
        queue_depth: 256,
        buffers: (args.iodepth as u32 * 2).max(64),
        fill_buffers,
        ..DeviceOptions::default()
    };
    device_choices(args)?.into_iter().map(|choice| device::open_device(controllers, choice, options)).collect()
}

fn controllers(args: &Args) -> Result<Vec<Controller>, String> {
    let options = ControllerOptions::default();
    if args.sim {
        let lba = 512u64;
        let blocks = args.sim_capacity / lba;
        let config = if args.sim_zone == 0 {
            SimConfig::nvm(blocks, lba as u32)
        } else {
            let zone = args.sim_zone / lba;
            SimConfig::zoned(blocks / zone * zone, lba as u32, zone, zone)
        };
        let namespace = config.namespaces[0].clone().metadata_bytes(args.sim_metadata);
        let mut config = SimConfig { namespaces: Vec::new(), ..config.clone() };
        for _ in 0..sim_namespaces(args) {
            config = config.with_namespace(namespace.clone());
        }
        let transport: Arc<dyn Transport> = Simulator::new(config);
        return Ok(vec![Controller::init(transport, options).map_err(|e| format!("simulator: {e}"))?]);
    }
    device::open_controllers(&args.pci)
}

fn run(args: &Args) -> Result<(), Failure> {
    // Refused before any device is opened when nobody can answer; asked
    // once they are, naming each.
    let confirmation = match args.format {
        true => {
            let what = format!("--format destroys everything on {}", describe_devices(args, &device_choices(args)?));
            Some(Confirmation::before_opening(&what, args.yes || args.sim)?)
        }
        false => None,
    };
    if args.crc32c != "auto" {
        // Read once, at the first checksum: set before any.
        std::env::set_var("ZONED_CRC32C", &args.crc32c);
    }
    let controllers = controllers(args)?;
    let options = volume_options(args);
    if args.software_zone.is_some() {
        // Before a format could make the volume.
        check_software_zone(args, &open_devices(args, &controllers)?).map_err(Failure::Argument)?;
    }
    let (mut volume, created) = open_volume(args, &controllers, &options, confirmation)?;
    check_applies(args, &volume, created).map_err(Failure::Argument)?;
    let target = check_against(args, &volume, created).map_err(Failure::Argument)?;
    // Where the first data zone starts (after the metadata segments), on
    // the first copy in use.
    let lane = (0..volume.lanes()).find(|&l| volume.lane_online(l)).unwrap_or(0);
    let (data_offset_bytes, namespace_bytes) = {
        let lba = volume.data_start_lba(lane).ok_or("no data zone on the first copy in use")?;
        let device = volume.lane_device(lane);
        let ns = volume.devices_mut()[device].as_ref().ok_or("no device in use")?.namespace();
        (lba * u64::from(ns.block_size()), ns.capacity_blocks() * u64::from(ns.block_size()))
    };
    let (checksum_before, copied_before) = (volume.stats().checksum_ns, volume.stats().copied_in_bytes);
    let mut feed = Feed::start(args, target / args.bs);
    let mut tally = Tally::new();
    // Each controller's events (a SMART critical warning) said as they come.
    let mut watch = nvme_examples::events::Watch::of(&controllers);
    let failure = write(args, &mut volume, &mut feed, &mut tally, target, &mut watch).err();
    feed.stop();
    let t = Instant::now();
    let committed = volume.commit();
    tally.commit_time += t.elapsed();
    let elapsed = tally.started.elapsed();
    if progress_bar(args) {
        eprintln!();
    }
    if let Some(message) = failure {
        return Err(message.into());
    }
    committed.map_err(|e| format!("final commit: {e}"))?;
    tally.commits += 1;
    tally.finish(elapsed);
    let run = Run {
        tally,
        elapsed,
        created,
        write_mode: options.write_mode,
        capacity: volume.capacity_bytes(),
        namespace_bytes,
        data_offset_bytes,
        checksum_before,
        copied_before,
        target,
        interrupted: interrupt::signal_name(),
    };
    report(args, &mut volume, &run)?;
    volume.close().map_err(|e| format!("close: {e}"))?;
    match run.interrupted {
        Some(signal) => Err(Interrupted(signal).to_string().into()),
        None => Ok(()),
    }
}

/// The message of a run stopped by a signal: main exits
/// [`interrupt::EXIT_INTERRUPTED`] on it.
struct Interrupted(&'static str);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "interrupted by {}: what was written is committed (the figures above are partial)", self.0)
    }
}

/// The volume's options, as the arguments give them.
fn volume_options(args: &Args) -> VolumeOptions {
    VolumeOptions {
        profile: Profile::from(args.profile),
        streams: args.streams.unwrap_or(1),
        software_zone_bytes: args.software_zone,
        checksums: args.checksums.unwrap_or(ChecksumsArg::Auto).into(),
        degraded: args.degraded,
        write_mode: if args.ordered {
            WriteMode::Ordered
        } else if args.zone_append {
            WriteMode::Append
        } else {
            WriteMode::Auto
        },
        ..VolumeOptions::default()
    }
}

/// Formats (with --format, or on devices that all read back blank) or
/// opens the volume; whether it is new.
fn open_volume(
    args: &Args,
    controllers: &[Controller],
    options: &VolumeOptions,
    confirmation: Option<Confirmation>,
) -> Result<(Volume, bool), String> {
    let format = || Volume::format(open_devices(args, controllers)?, options).map_err(|e| format!("format: {e}"));
    if let Some(confirmation) = confirmation {
        let mut devices = open_devices(args, controllers)?;
        let named: Vec<String> = devices.iter_mut().map(device::named).collect();
        confirmation.ask("seqwrite", &format!("--format destroys everything on {}", named.join(" and ")))?;
        drop(devices);
        return Ok((format()?, true));
    }
    match device::open_for_writing(open_devices(args, controllers)?, options)? {
        Some(volume) => Ok((volume, false)),
        // Every device read back blank (no label anywhere, every read
        // whole): nothing can be lost, so a volume is made.
        None => {
            check_new_volume(args)?;
            log::info!("no volume found and every device is blank: formatting");
            Ok((format()?, true))
        }
    }
}

/// Refuses, before the first write, options that do not apply to the
/// volume opened: those of a new volume on one that exists, and
/// --degraded on one that is not a mirror.
fn check_applies(args: &Args, volume: &Volume, created: bool) -> Result<(), String> {
    if !created {
        for (given, option) in [(args.streams.is_some(), "--streams"), (args.checksums.is_some(), "--checksums")] {
            if given {
                return Err(format!(
                    "{option} applies to a new volume (--format, or blank devices), and this one exists: it has {} \
                     stream(s) and keeps its checksums {}",
                    volume.streams(),
                    match volume.checksum_store() {
                        zoned_allocator::ChecksumStore::Tags => "in block tags",
                        zoned_allocator::ChecksumStore::Area => "in zone checksum areas",
                        _ => "in the extent map",
                    }
                ));
            }
        }
    }
    if args.degraded && volume.copies() < 2 {
        return Err(format!(
            "--degraded applies to a mirror (of 2 or 3 copies), and this volume is {}: it has no member to go on              without",
            format!("{:?}", volume.profile()).to_lowercase()
        ));
    }
    Ok(())
}

/// Refuses software zones where every namespace given is zoned.
fn check_software_zone(args: &Args, devices: &[Device]) -> Result<(), String> {
    if args.software_zone.is_some() && devices.iter().all(Device::is_zoned) {
        return Err("--software-zone applies to conventional namespaces, and every one here is zoned".into());
    }
    Ok(())
}

/// Checks --size, --bs and --stream against the open volume, before the
/// first write; the bytes to write. A percentage is of the volume's
/// capacity ([`Volume::capacity_bytes`]), and what is asked must fit in
/// writes of --bs ([`Volume::room`]): refused otherwise, naming what fits.
fn check_against(args: &Args, volume: &Volume, created: bool) -> Result<u64, String> {
    if args.bs as usize > volume.max_extent_bytes() {
        return Err(format!(
            "--bs {}: the volume's largest extent is {}",
            human_size(args.bs),
            human_size(volume.max_extent_bytes() as u64)
        ));
    }
    if args.stream >= volume.streams() {
        return Err(format!("--stream {}: the volume has {} stream(s)", args.stream, volume.streams()));
    }
    let capacity = volume.capacity_bytes();
    let used = volume.stats().valid_bytes;
    let target = args.size.bytes(capacity, args.bs);
    if target == 0 {
        return Err(format!(
            "--size {}: less than one --bs {} write on a volume of {}",
            args.size,
            human_size(args.bs),
            human_size(capacity)
        ));
    }
    let room = volume.room(args.stream, args.bs as usize).map_err(|e| e.to_string())?;
    if target > room {
        // Why less fits than the capacity left, when it does.
        let blocks = volume.room(args.stream, BLOCK_BYTES as usize).map_err(|e| e.to_string())?;
        let mut why = String::new();
        if room < blocks {
            why += &format!(
                "; zones take whole writes, which a power of two up to {} fills exactly",
                human_size(volume.data_unit_bytes() as u64)
            );
        }
        if blocks + used < capacity {
            why += "; zones closed with room left (at a reopen, or after a failed write) take nothing more until \
                    reclaim empties and resets them";
        }
        let fits = match room {
            0 => "nothing more fits".to_string(),
            room => format!("--size {room} or less fits"),
        };
        let written = if created { "the volume was made, and no data was written" } else { "nothing was written" };
        return Err(format!(
            "--size {}: {} asked, and writes of --bs {} fit {} more ({fits}; the volume holds {}, {} used{why}); \
             {written}",
            args.size,
            human_bytes(target),
            human_size(args.bs),
            human_bytes(room),
            human_bytes(capacity),
            human_bytes(used),
        ));
    }
    Ok(target)
}

/// Whether a progress bar goes to stderr.
fn progress_bar(args: &Args) -> bool {
    std::io::stderr().is_terminal() && !args.json && !args.no_progress
}

/// Writes `target` bytes (or until --runtime) with --iodepth in flight,
/// committing every --commit-every bytes.
fn write(
    args: &Args,
    volume: &mut Volume,
    feed: &mut Feed,
    tally: &mut Tally,
    target: u64,
    watch: &mut nvme_examples::events::Watch,
) -> Result<(), String> {
    let progress = progress_bar(args);
    let interval = Duration::from_millis(args.log_interval);
    let runtime = args.runtime.map(Duration::from_secs_f64);
    while tally.written < target {
        if runtime.is_some_and(|limit| tally.started.elapsed() >= limit) || interrupt::requested() {
            break;
        }
        while tally.in_flight() < args.iodepth && tally.submitted < target {
            let id = feed
                .submit(args, volume, tally.submitted / args.bs)
                .map_err(|e| format!("at {}: {e}", tally.submitted))?;
            tally.submitted(id, args.bs);
        }
        if volume.poll() == 0 && args.poll_sleep_us > 0 {
            std::thread::sleep(Duration::from_micros(args.poll_sleep_us));
        }
        let now = Instant::now();
        while let Some(done) = volume.next_done() {
            tally.completed(done, now, args.bs, false)?;
        }
        tally.roll(now, interval);
        watch.poll(now);
        if tally.since_commit >= args.commit_every {
            let t = Instant::now();
            volume.commit().map_err(|e| format!("commit: {e}"))?;
            // Writes completed during the commit's wait count now.
            while let Some(done) = volume.next_done() {
                tally.completed(done, now, args.bs, true)?;
            }
            tally.commit_time += t.elapsed();
            tally.since_commit = 0;
            tally.commits += 1;
        }
        if progress {
            tally.progress(now, target);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A simulated ZNS volume of one stream, as `args` would open it.
    fn opened(args: &Args) -> (Vec<Controller>, Volume) {
        let controllers = controllers(args).unwrap();
        let volume = Volume::format(open_devices(args, &controllers).unwrap(), &volume_options(args)).unwrap();
        (controllers, volume)
    }

    /// Options of a new volume are refused on one that exists, not
    /// ignored; software zones are refused where every namespace is zoned.
    #[test]
    fn options_that_do_not_apply_to_the_volume_opened_are_refused() {
        let args = Args::parse_from(["seqwrite", "--sim", "--sim-capacity", "256M", "--sim-zone", "16M"]);
        let (controllers, volume) = opened(&args);
        assert_eq!(check_applies(&args, &volume, false), Ok(()));
        for (option, value) in [("--streams", "2"), ("--checksums", "map")] {
            let given = Args::parse_from(["seqwrite", "--sim", option, value]);
            assert_eq!(check_applies(&given, &volume, true), Ok(()), "{option} on a new volume");
            let refused = check_applies(&given, &volume, false).unwrap_err();
            assert!(refused.contains(option) && refused.contains("applies to a new volume"), "{refused}");
            assert!(refused.contains("1 stream(s)"), "{refused}");
        }
        let zones = Args::parse_from(["seqwrite", "--sim", "--software-zone", "1M"]);
        let devices = open_devices(&args, &controllers).unwrap();
        let refused = check_software_zone(&zones, &devices).unwrap_err();
        assert!(refused.contains("every one here is zoned"), "{refused}");
        // --degraded opens a mirror on the member left, whatever --profile
        // says (the labels say what the volume is); on a single volume it
        // is refused.
        let degraded = Args::parse_from(["seqwrite", "--sim", "--degraded"]);
        let refused = check_applies(&degraded, &volume, false).unwrap_err();
        assert!(
            refused.contains("--degraded applies to a mirror (of 2 or 3 copies), and this volume is single"),
            "{refused}"
        );
    }
}

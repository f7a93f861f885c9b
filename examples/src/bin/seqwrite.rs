//! seqwrite: sequential writes through the zoned allocator, like
//! `fio --rw=write`, with fio-format bandwidth, IOPS and latency logs, a
//! flatness figure and an SVG plot. It owns the namespace(s): a volume is
//! created when none is found, and `--format` recreates it.

use clap::{Parser, ValueEnum};
use nvme_driver::dma::FillBuffer;
use nvme_driver::sim::{SimConfig, Simulator};
use nvme_driver::{Controller, ControllerOptions, Transport};
use nvme_examples::args::{
    self, human_size, Amount, BLOCK_BYTES, IO_BYTES_MAX, QUEUE_DEPTH_MAX, SIM_BYTES_MAX, SOFTWARE_ZONE_BYTES_MAX,
    THREADS_MAX,
};
use nvme_examples::checksums::ChecksumsArg;
use nvme_examples::confirm::confirm_on_stdin;
use nvme_examples::device::{self, choose_devices, DeviceChoice};
use nvme_examples::logging;
use nvme_examples::profile::ProfileArg;
use nvme_report::histogram::Histogram;
use nvme_report::series::flatness;
use nvme_report::svg::{line_chart, Series};
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use zoned_allocator::{checksum, Device, DeviceOptions, Error, Profile, Volume, VolumeOptions, WriteMode, BLOCK_SIZE};

/// Sequential writes through the zoned allocator (fio --rw=write style).
/// WARNING: the tool owns the namespaces it is given and overwrites them.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
struct Args {
    /// Controller PCI address: one, or two for a mirror across controllers.
    /// Default: the first NVMe function bound to vfio-pci.
    #[arg(long = "pci", value_name = "BDF")]
    pci: Vec<String>,
    /// Namespace IDs (1..=4294967294), comma-separated, one per device: a
    /// mirror on one controller takes two (--ns 1,2); with two --pci, one
    /// ID serves both. Default: 1 (1,2 for a mirror on --sim).
    #[arg(long = "ns", value_name = "NSID", value_delimiter = ',', value_parser = args::nsid)]
    ns: Vec<u32>,
    /// Copies: single, dup (two on one namespace) or mirror (two devices,
    /// both given: two --pci, or one --pci and two --ns).
    #[arg(long, value_enum, default_value = "single")]
    profile: ProfileArg,
    /// Recreate the volume (destroys its contents; asks first, see --yes).
    #[arg(long)]
    format: bool,
    /// With --format: where the volume keeps its blocks' checksums. auto:
    /// block tags on namespaces with per-block metadata, zone checksum
    /// areas otherwise; area: after each zone's data, on any namespace;
    /// map: in memory and the journal; tags.
    #[arg(long, value_enum, default_value = "auto")]
    checksums: ChecksumsArg,
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
    /// Streams of a new volume, 1..=64.
    #[arg(long, default_value_t = 1, value_parser = args::int_in::<u8>(1, STREAMS_MAX))]
    streams: u8,
    /// Software zone size on conventional namespaces, a multiple of 4k
    /// (default: from the capacity).
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
    /// Threads computing checksums ahead of the writer, 0..=64; 0
    /// checksums on the submitting thread.
    #[arg(long, default_value_t = 1, value_parser = args::int_in::<usize>(0, THREADS_MAX))]
    checksum_threads: usize,
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
    /// every block's checksum. --checksum-threads is ignored.
    #[arg(long)]
    same_data: bool,
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
    /// Simulated zone size, a multiple of 512 and at most --sim-capacity; 0
    /// simulates a conventional namespace.
    #[arg(long, default_value = "64M", value_parser = args::size_in(SIM_LBA_BYTES, 0, SIM_BYTES_MAX), requires = "sim")]
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

/// One log interval.
#[derive(Clone, Copy, Debug, serde::Serialize)]
struct Interval {
    end_ms: u64,
    bytes: u64,
    writes: u64,
    latency_ns_sum: u64,
    duration_ms: u64,
}

impl Interval {
    fn kib_s(&self) -> f64 {
        self.bytes as f64 / 1024.0 / (self.duration_ms as f64 / 1000.0)
    }
}

fn main() -> ExitCode {
    logging::init("seqwrite");
    let args = Args::parse();
    if let Err(message) = check_args(&args) {
        args::exit_usage_error::<Args>("seqwrite", &message);
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("seqwrite: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Checks what can be checked without a device, against the other options.
/// What needs the volume (--size against its free space, --bs against its
/// largest extent, --stream against its streams) is checked once it is
/// open, before the first write.
fn check_args(args: &Args) -> Result<(), String> {
    device_choices(args)?;
    if let Amount::Bytes(bytes) = args.size {
        if bytes < args.bs {
            return Err(format!("--size {}: less than one --bs {} write", human_size(bytes), human_size(args.bs)));
        }
    }
    if args.format {
        check_new_volume(args)?;
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
    if args.stream >= args.streams {
        return Err(format!(
            "--stream {}: --format makes a volume of --streams {} (streams 0..={})",
            args.stream,
            args.streams,
            args.streams - 1
        ));
    }
    Ok(())
}

/// The devices the volume is on, exactly as --pci and --ns give them. The
/// simulator's namespaces are the tool's own: a mirror on --sim without
/// --ns is on its namespaces 1 and 2.
fn device_choices(args: &Args) -> Result<Vec<DeviceChoice>, String> {
    let mut wanted = Profile::from(args.profile).devices();
    // A mirror opened degraded may be given the one device left.
    if args.degraded && !args.format && args.pci.len().max(args.ns.len()) == 1 {
        wanted = 1;
    }
    let ns = if args.sim && args.ns.is_empty() { (1..=wanted as u32).collect() } else { args.ns.clone() };
    choose_devices(&args.pci, &ns, wanted).map_err(|e| {
        let profile = args.profile.to_possible_value().map_or_else(String::new, |v| v.get_name().to_string());
        format!("--profile {profile}: {e}")
    })
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
    let mut devices = Vec::new();
    for choice in device_choices(args)? {
        let controller = controllers.get(choice.controller).ok_or("a device on a controller not opened")?;
        let nsid = choice.nsid;
        devices.push(Device::open(controller, nsid, options).map_err(|e| format!("namespace {nsid}: {e}"))?);
    }
    Ok(devices)
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
        let namespaces = if args.profile == ProfileArg::Mirror { 2 } else { 1 };
        let namespace = config.namespaces[0].clone().metadata_bytes(args.sim_metadata);
        let mut config = SimConfig { namespaces: Vec::new(), ..config.clone() }.with_namespace(namespace);
        if namespaces == 2 {
            config = config.clone().with_namespace(config.namespaces[0].clone());
        }
        let transport: Arc<dyn Transport> = Simulator::new(config);
        return Ok(vec![Controller::init(transport, options).map_err(|e| format!("simulator: {e}"))?]);
    }
    if args.pci.is_empty() {
        return Ok(vec![device::open_controller(None, options)?]);
    }
    args.pci.iter().map(|bdf| device::open_controller(Some(bdf), options.clone())).collect()
}

fn run(args: &Args) -> Result<(), String> {
    if args.format {
        // Asked before any device is opened.
        let what = format!("--format destroys everything on {}", describe_devices(args, &device_choices(args)?));
        confirm_on_stdin("seqwrite", &what, args.yes || args.sim)?;
    }
    if args.crc32c != "auto" {
        // Read once, at the first checksum: set before any.
        std::env::set_var("ZONED_CRC32C", &args.crc32c);
    }
    let controllers = controllers(args)?;
    let profile = Profile::from(args.profile);
    let options = VolumeOptions {
        profile,
        streams: args.streams,
        software_zone_bytes: args.software_zone,
        checksums: args.checksums.into(),
        degraded: args.degraded,
        write_mode: if args.ordered {
            WriteMode::Ordered
        } else if args.zone_append {
            WriteMode::Append
        } else {
            WriteMode::Auto
        },
        ..VolumeOptions::default()
    };
    let mut created = false;
    let mut volume = if args.format {
        created = true;
        Volume::format(open_devices(args, &controllers)?, &options).map_err(|e| format!("format: {e}"))?
    } else {
        match Volume::open(open_devices(args, &controllers)?, &options) {
            Ok(volume) => volume,
            // Every device read back blank (no label anywhere, every read
            // whole): nothing can be lost, so a volume is made. Any other
            // error (unreadable, damaged, foreign, another version) stops
            // here with its reason: seqwrite never formats by inference.
            Err(Error::NoVolume) => {
                check_new_volume(args)?;
                log::info!("no volume found and every device is blank: formatting");
                created = true;
                Volume::format(open_devices(args, &controllers)?, &options).map_err(|e| format!("format: {e}"))?
            }
            Err(e @ Error::Degraded { .. }) => {
                return Err(format!("open: {e}; pass --degraded to write to it on the devices left"))
            }
            Err(e) => {
                return Err(format!(
                    "open: {e}; nothing was formatted (--format destroys what the devices hold, after asking)"
                ))
            }
        }
    };
    let capacity = volume.capacity_bytes();
    let free = capacity.saturating_sub(volume.stats().valid_bytes);
    // Checked against the volume, before the first write.
    let target = args.size.bytes(capacity, args.bs);
    if target == 0 {
        return Err(format!(
            "--size {}: less than one --bs {} write on a volume of {capacity} bytes",
            args.size, args.bs
        ));
    }
    if target > free {
        return Err(format!(
            "--size {}: {} bytes asked, {} free of {} (free extents, or --format)",
            args.size, target, free, capacity
        ));
    }
    if args.bs as usize > volume.max_extent_bytes() {
        return Err(format!("--bs {}: the volume's largest extent is {}", args.bs, volume.max_extent_bytes()));
    }
    if args.stream >= volume.streams() {
        return Err(format!("--stream {}: the volume has {} stream(s)", args.stream, volume.streams()));
    }
    // Where the first data zone starts (after the metadata segments), on
    // the first copy in use.
    let lane = (0..volume.lanes()).find(|&l| volume.lane_online(l)).unwrap_or(0);
    let (data_offset_bytes, namespace_bytes) = {
        let lba = volume.data_start_lba(lane).ok_or("no data zone on the first copy in use")?;
        let device = volume.lane_device(lane);
        let ns = volume.devices_mut()[device].as_ref().ok_or("no device in use")?.namespace();
        (lba * u64::from(ns.block_size()), ns.capacity_blocks() * u64::from(ns.block_size()))
    };

    // Data and checksums, made ahead on worker threads.
    let bs = args.bs as usize;
    let writes_total = target / args.bs;
    let (ready_tx, ready_rx) = mpsc::sync_channel::<Prepared>(args.iodepth * 2 + 2);
    // Buffers the writer is done with go back to the workers.
    let (spent_tx, spent_rx) = mpsc::channel::<Vec<u8>>();
    let spent_rx = Arc::new(std::sync::Mutex::new(spent_rx));
    // With --zero-copy, the buffers the volume lends, on their way to be
    // filled; `lent` of them are out.
    let (lend_tx, lend_rx) = mpsc::channel::<FillBuffer>();
    let lend_rx = Arc::new(std::sync::Mutex::new(lend_rx));
    let mut lent = 0usize;
    let next_write = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut workers = Vec::new();
    // --same-data makes nothing per write.
    let threads = if args.same_data { 0 } else { args.checksum_threads };
    for _ in 0..threads {
        let ready_tx = ready_tx.clone();
        let spent_rx = Arc::clone(&spent_rx);
        let lend_rx = Arc::clone(&lend_rx);
        let next_write = Arc::clone(&next_write);
        let zero_copy = args.zero_copy;
        workers.push(std::thread::spawn(move || loop {
            let Some(sequence) = claim(&next_write, writes_total) else { return };
            let data = match zero_copy {
                // Ends when the writer stops lending.
                true => match lend_rx.lock().map(|rx| rx.recv()) {
                    Ok(Ok(buffer)) => Data::Lent(buffer),
                    _ => return,
                },
                false => Data::Host(spent_rx.lock().ok().and_then(|rx| rx.try_recv().ok()).unwrap_or_default()),
            };
            if ready_tx.send(prepare(sequence, data, bs)).is_err() {
                return;
            }
        }));
    }
    drop(ready_tx);

    let progress = std::io::stderr().is_terminal() && !args.json && !args.no_progress;
    let interval_length = Duration::from_millis(args.log_interval);
    let runtime = args.runtime.map(Duration::from_secs_f64);
    let mut latency = Histogram::new();
    let mut intervals: Vec<Interval> = Vec::new();
    let mut current = Interval { end_ms: 0, bytes: 0, writes: 0, latency_ns_sum: 0, duration_ms: 0 };
    let mut submitted_at: HashMap<u64, Instant> = HashMap::new();
    let (mut submitted, mut written, mut since_commit, mut commits) = (0u64, 0u64, 0u64, 0u32);
    let mut inline_data = vec![0u8; bs];

    // --same-data: write 0's bytes and checksums, made before the clock
    // starts, and the lent buffers that already hold them.
    let mut same = args.same_data.then(|| {
        let mut data = vec![0u8; bs];
        fill(&mut data, 0);
        let mut crcs = Vec::with_capacity(bs / BLOCK_SIZE);
        checksum::block_crcs(&data, &mut crcs);
        (data, crcs, std::collections::HashSet::<u64>::new())
    });

    let started = Instant::now();
    let mut interval_start = started;
    let mut last_progress = started;
    let mut commit_time = Duration::ZERO;
    let checksum_before = volume.stats().checksum_ns;
    let copied_before = volume.stats().copied_in_bytes;
    let mut failure: Option<String> = None;
    'run: while written < target {
        if runtime.is_some_and(|limit| started.elapsed() >= limit) {
            break;
        }
        while submitted_at.len() < args.iodepth && submitted < target {
            let result = if let Some((data, crcs, filled)) = &mut same {
                let sequence = submitted / args.bs;
                match args.zero_copy {
                    true => match volume.fill_buffer() {
                        // A buffer holds the bytes from its first lending on:
                        // neither the device nor the volume writes it.
                        Ok(mut buffer) => {
                            if filled.insert(buffer.iova()) {
                                buffer[..bs].copy_from_slice(data);
                            }
                            volume.submit_filled_with_checksums(args.stream, buffer, bs, sequence, crcs.clone())
                        }
                        Err(e) => Err(e),
                    },
                    false => volume.submit_write_with_checksums(args.stream, data, sequence, crcs.clone()),
                }
            } else if args.checksum_threads == 0 && args.zero_copy {
                let sequence = submitted / args.bs;
                match volume.fill_buffer() {
                    Ok(mut buffer) => {
                        fill(&mut buffer[..bs], sequence);
                        volume.submit_filled(args.stream, buffer, bs, sequence)
                    }
                    Err(e) => Err(e),
                }
            } else if args.checksum_threads == 0 {
                let sequence = submitted / args.bs;
                fill(&mut inline_data, sequence);
                volume.submit_write(args.stream, &inline_data, sequence)
            } else {
                if args.zero_copy {
                    if let Err(e) = lend(&mut volume, &lend_tx, &mut lent, fill_lookahead(args)) {
                        failure = Some(format!("a buffer to fill: {e}"));
                        break 'run;
                    }
                }
                // Made ahead by the workers. (Checksumming here instead while
                // the device works was measured slower under TCG: it delays
                // reaping and the next submission.)
                let Ok(Prepared { sequence, data, crcs }) = ready_rx.recv() else {
                    failure = Some("the checksum threads stopped".into());
                    break 'run;
                };
                match data {
                    Data::Host(data) => {
                        let result = volume.submit_write_with_checksums(args.stream, &data, sequence, crcs);
                        let _ = spent_tx.send(data);
                        result
                    }
                    Data::Lent(buffer) => {
                        lent -= 1;
                        volume.submit_filled_with_checksums(args.stream, buffer, bs, sequence, crcs)
                    }
                }
            };
            match result {
                Ok(id) => {
                    submitted_at.insert(id, Instant::now());
                    submitted += args.bs;
                }
                Err(e) => {
                    failure = Some(format!("write at {submitted}: {e}"));
                    break 'run;
                }
            }
        }
        if volume.poll() == 0 && args.poll_sleep_us > 0 {
            std::thread::sleep(Duration::from_micros(args.poll_sleep_us));
        }
        let now = Instant::now();
        while let Some(done) = volume.next_done() {
            if let Err(e) = done.result {
                failure = Some(format!("write: {e}"));
                break 'run;
            }
            let issued = submitted_at.remove(&done.id).unwrap_or(now);
            let ns = now.duration_since(issued).as_nanos() as u64;
            latency.record(ns);
            current.bytes += args.bs;
            current.writes += 1;
            current.latency_ns_sum += ns;
            written += args.bs;
            since_commit += args.bs;
        }
        if now.duration_since(interval_start) >= interval_length {
            current.duration_ms = now.duration_since(interval_start).as_millis() as u64;
            current.end_ms = now.duration_since(started).as_millis() as u64;
            intervals.push(current);
            current = Interval { end_ms: 0, bytes: 0, writes: 0, latency_ns_sum: 0, duration_ms: 0 };
            interval_start = now;
        }
        if since_commit >= args.commit_every {
            let t = Instant::now();
            if let Err(e) = volume.commit() {
                failure = Some(format!("commit: {e}"));
                break;
            }
            // Writes completed during the commit's wait count now.
            while let Some(done) = volume.next_done() {
                if let Err(e) = done.result {
                    failure = Some(format!("write: {e}"));
                    break 'run;
                }
                let issued = submitted_at.remove(&done.id).unwrap_or(now);
                latency.record(Instant::now().duration_since(issued).as_nanos() as u64);
                current.bytes += args.bs;
                current.writes += 1;
                written += args.bs;
            }
            commit_time += t.elapsed();
            since_commit = 0;
            commits += 1;
        }
        if progress && now.duration_since(last_progress) >= Duration::from_millis(250) {
            last_progress = now;
            let fraction = written as f64 / target as f64;
            let rate = written as f64 / (1 << 20) as f64 / started.elapsed().as_secs_f64().max(1e-9);
            let eta = (target - written) as f64 / (1 << 20) as f64 / rate.max(1e-9);
            let bar: String = (0..30).map(|i| if (i as f64) < fraction * 30.0 { '#' } else { '.' }).collect();
            eprint!("\r[{bar}] {:5.1}% {rate:8.1} MiB/s ETA {eta:5.0} s ", fraction * 100.0);
        }
    }
    // Workers waiting for a buffer to fill, or to hand one over, stop.
    drop(ready_rx);
    drop(lend_tx);
    for worker in workers {
        let _ = worker.join();
    }
    let t = Instant::now();
    let committed = volume.commit();
    commit_time += t.elapsed();
    let elapsed = started.elapsed();
    if progress {
        eprintln!();
    }
    if let Err(e) = committed {
        failure.get_or_insert(format!("final commit: {e}"));
    }
    if let Some(message) = failure {
        return Err(message);
    }
    commits += 1;
    if current.writes > 0 {
        current.duration_ms = interval_start.elapsed().as_millis().max(1) as u64;
        current.end_ms = elapsed.as_millis() as u64;
        intervals.push(current);
    }

    // Only whole intervals count for flatness.
    let whole: Vec<f64> =
        intervals.iter().filter(|i| i.duration_ms * 10 >= args.log_interval * 9).map(|i| i.kib_s() / 1024.0).collect();
    let flatness = flatness(&whole);
    let mib_s = written as f64 / (1 << 20) as f64 / elapsed.as_secs_f64();
    let stats = volume.stats();
    // Where the checksums live: block tags (metadata bytes per 4 KiB
    // block), zone checksum areas or the extent map.
    let tag_bytes = volume.block_tags().filter(|_| !volume.checksum_areas()).map(|layout| layout.stride);
    let checksums_kind = volume.checksum_store().name();
    let mapped_extents = volume.mapped_extents();
    let checksum_s =
        if args.checksum_threads == 0 { (stats.checksum_ns - checksum_before) as f64 / 1e9 } else { f64::NAN };

    if args.verify {
        verify(&mut volume, bs, args.same_data).map_err(|e| format!("verify: {e}"))?;
    }
    if let Some(prefix) = &args.write_log {
        write_logs(prefix, &intervals, args.bs).map_err(|e| format!("logs: {e}"))?;
    }
    if let Some(path) = &args.plot {
        let points = intervals.iter().map(|i| (i.end_ms as f64 / 1000.0, i.kib_s() / 1024.0)).collect();
        let title = format!(
            "seqwrite bs={} iodepth={} ({:.0}% of the namespace), flatness {:.3}",
            args.bs,
            args.iodepth,
            written as f64 / namespace_bytes as f64 * 100.0,
            flatness.unwrap_or(f64::NAN)
        );
        let svg = line_chart(&title, "time (s)", "MiB/s", &[Series { label: "bandwidth".into(), points }]);
        std::fs::write(path, svg).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let fill_volume = stats.valid_bytes as f64 / capacity as f64 * 100.0;
    let fill_namespace = stats.valid_bytes as f64 / namespace_bytes as f64 * 100.0;
    if args.json {
        let json = serde_json::json!({
            "tool": "seqwrite",
            "created": created,
            "bs": args.bs,
            "iodepth": args.iodepth,
            "bytes": written,
            "seconds": elapsed.as_secs_f64(),
            "mib_s": mib_s,
            "iops": written as f64 / args.bs as f64 / elapsed.as_secs_f64(),
            "flatness": flatness,
            "intervals_mib_s": whole,
            "lat_us": {
                "min": latency.min() as f64 / 1e3,
                "mean": latency.mean() / 1e3,
                "p50": latency.quantile(0.5) as f64 / 1e3,
                "p99": latency.quantile(0.99) as f64 / 1e3,
                "max": latency.max() as f64 / 1e3,
            },
            "commits": commits,
            "commit_seconds": commit_time.as_secs_f64(),
            "checksum_threads": args.checksum_threads,
            "zero_copy": args.zero_copy,
            "same_data": args.same_data,
            "crc32c": checksum::implementation().name(),
            "block_tag_bytes": tag_bytes,
            "checksums": checksums_kind,
            "extents_with_checksums_in_memory": mapped_extents,
            "checksum_seconds_on_writer": if checksum_s.is_nan() { None } else { Some(checksum_s) },
            "volume_fill_percent": fill_volume,
            "data_offset_bytes": data_offset_bytes,
            "namespace_fill_percent": fill_namespace,
            "volume": stats,
        });
        println!("{json}");
    } else {
        println!(
            "seqwrite: bs={}, iodepth={}, {} {}",
            args.bs,
            args.iodepth,
            if created { "new volume" } else { "existing volume" },
            match options.write_mode {
                WriteMode::Ordered => "(ordered writes)",
                _ => "(zone append where available)",
            }
        );
        println!(
            "  write: IOPS={:.0}, BW={:.1}MiB/s ({:.1}MB/s)({:.1}MiB/{}msec)",
            written as f64 / args.bs as f64 / elapsed.as_secs_f64(),
            mib_s,
            written as f64 / 1e6 / elapsed.as_secs_f64(),
            written as f64 / (1 << 20) as f64,
            elapsed.as_millis()
        );
        println!(
            "    lat (usec): min={:.0}, max={:.0}, avg={:.1}, p50={:.0}, p99={:.0}",
            latency.min() as f64 / 1e3,
            latency.max() as f64 / 1e3,
            latency.mean() / 1e3,
            latency.quantile(0.5) as f64 / 1e3,
            latency.quantile(0.99) as f64 / 1e3
        );
        match flatness {
            Some(f) => println!("  flatness: {f:.3} (mean of the last 10% of intervals / the first 10%)"),
            None => println!("  flatness: n/a (fewer than two whole intervals)"),
        }
        println!(
            "  volume: {:.1}% full ({:.1}% of the namespace), {} commits taking {:.2} s",
            fill_volume,
            fill_namespace,
            commits,
            commit_time.as_secs_f64()
        );
        println!(
            "  checksums: crc32c {}, {} worker thread(s), {}",
            checksum::implementation().name(),
            args.checksum_threads,
            match (checksums_kind, tag_bytes) {
                (_, Some(bytes)) => format!("in block tags ({bytes} bytes of metadata per block)"),
                ("area", _) => format!("in zone checksum areas ({mapped_extents} extent(s) still in memory)"),
                _ => "in the extent map".into(),
            }
        );
        println!(
            "  data: {}, {:.1} MiB copied into DMA memory",
            if args.zero_copy { "made in buffers the volume lent" } else { "copied into DMA buffers" },
            (stats.copied_in_bytes - copied_before) as f64 / (1 << 20) as f64
        );
        println!("  layout: data zones from byte {data_offset_bytes} of the first namespace");
        if args.verify {
            println!("  verify: every extent read back and matched its checksums");
        }
    }
    volume.close().map_err(|e| format!("close: {e}"))?;
    Ok(())
}

/// One write's data and block checksums, made ahead.
struct Prepared {
    sequence: u64,
    data: Data,
    crcs: Vec<u32>,
}

/// Where a write's data is made: host memory (copied into DMA memory at
/// submission), or a buffer the volume lent (`--zero-copy`).
enum Data {
    Host(Vec<u8>),
    Lent(FillBuffer),
}

/// Lent buffers out to the checksum threads at once with `--zero-copy`.
fn fill_lookahead(args: &Args) -> usize {
    args.iodepth + args.checksum_threads
}

/// Keeps up to `lookahead` lent buffers out to the checksum threads: as
/// many as the volume has free, and at least one (waiting for it,
/// bounded by the volume's timeout), so that a write is always on its way.
fn lend(volume: &mut Volume, to: &mpsc::Sender<FillBuffer>, lent: &mut usize, lookahead: usize) -> Result<(), Error> {
    while *lent < lookahead {
        let buffer = match volume.try_fill_buffer()? {
            Some(buffer) => buffer,
            None if *lent == 0 => volume.fill_buffer()?,
            None => return Ok(()),
        };
        if to.send(buffer).is_err() {
            // Every checksum thread is done: nothing more to fill.
            return Ok(());
        }
        *lent += 1;
    }
    Ok(())
}

/// The next write's sequence number, if any write is left.
fn claim(next: &std::sync::atomic::AtomicU64, total: u64) -> Option<u64> {
    let sequence = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (sequence < total).then_some(sequence)
}

/// Fills (a reused buffer or a new one) with write `sequence`'s data and
/// checksums it.
fn prepare(sequence: u64, mut data: Data, bs: usize) -> Prepared {
    let bytes = match &mut data {
        Data::Host(vec) => {
            vec.resize(bs, 0);
            &mut vec[..]
        }
        Data::Lent(buffer) => &mut buffer[..bs],
    };
    fill(bytes, sequence);
    let mut crcs = Vec::with_capacity(bs / BLOCK_SIZE);
    checksum::block_crcs(bytes, &mut crcs);
    Prepared { sequence, data, crcs }
}

/// Deterministic data for write `sequence`: a fixed random pattern with
/// the write's sequence number and block index stamped in each block, so
/// no two blocks are equal.
fn fill(data: &mut [u8], sequence: u64) {
    if data.iter().take(64).all(|&b| b == 0) {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for chunk in data.chunks_exact_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            chunk.copy_from_slice(&state.to_le_bytes());
        }
    }
    for (index, block) in data.chunks_exact_mut(BLOCK_SIZE).enumerate() {
        block[..8].copy_from_slice(&sequence.to_le_bytes());
        block[8..16].copy_from_slice(&(index as u64).to_le_bytes());
    }
}

/// Reads every extent back and compares it with the bytes of its write
/// (write 0's for all with `same_data`).
fn verify(volume: &mut Volume, bs: usize, same_data: bool) -> Result<(), Error> {
    let ids: Vec<u64> = volume.extent_ids().collect();
    let mut buffer = vec![0u8; bs];
    for id in ids {
        let len = volume.extent(id).expect("listed");
        let owner = volume.owner(id)?;
        buffer.resize(len, 0);
        volume.read(id, &mut buffer)?;
        let mut expected = vec![0u8; len];
        fill(&mut expected, if same_data { 0 } else { owner });
        if buffer != expected {
            return Err(Error::Corrupt(format!("extent {id} (write {owner}) holds other data")));
        }
    }
    Ok(())
}

/// fio's log format: `time (ms), value, direction (1 = write), block size, offset`.
fn write_logs(prefix: &str, intervals: &[Interval], bs: u64) -> std::io::Result<()> {
    let mut bw = std::fs::File::create(format!("{prefix}_bw.1.log"))?;
    let mut iops = std::fs::File::create(format!("{prefix}_iops.1.log"))?;
    let mut lat = std::fs::File::create(format!("{prefix}_lat.1.log"))?;
    for i in intervals {
        let seconds = i.duration_ms as f64 / 1000.0;
        writeln!(bw, "{}, {:.0}, 1, {bs}, 0", i.end_ms, i.kib_s())?;
        writeln!(iops, "{}, {:.0}, 1, {bs}, 0", i.end_ms, i.writes as f64 / seconds)?;
        let mean = i.latency_ns_sum.checked_div(i.writes).unwrap_or(0);
        writeln!(lat, "{}, {mean}, 1, {bs}, 0", i.end_ms)?;
    }
    Ok(())
}

//! `perf`: the job of `spdk_nvme_perf`. Drives one namespace through polled
//! queue pairs (one thread each) at a fixed queue depth and reports IOPS,
//! bandwidth and latency percentiles.
//!
//! On a zoned namespace, `--rw write` writes each zone of the region once,
//! at its write pointer or by Zone Append (`--zone-append`): see [`zoned`].

mod in_place;
mod report;
mod zoned;

use clap::{Parser, ValueEnum};
use nvme_driver::clock::{Clock, ClockSource};
use nvme_driver::cmd::nvm;
use nvme_driver::dma::{DmaBuffer, DmaMemory, DmaPool, HUGE_PAGE_SIZE};
use nvme_driver::prng::Prng;
use nvme_driver::sim::{SimConfig, Simulator};
use nvme_driver::{Controller, ControllerOptions, IoBuffer, IoCompletion, Namespace, RawQueue, Request, Transport};
use nvme_examples::args::{
    self, BLOCK_BYTES, IO_BYTES_MAX, LBA_BYTES_MIN, QUEUE_DEPTH_MAX, SIM_BYTES_MAX, THREADS_MAX,
};
use nvme_examples::confirm::Confirmation;
use nvme_examples::device::open_controller;
use nvme_examples::interrupt;
use nvme_examples::output::Failure;
use report::{report, PerSecond, ProfileNs, RawTimes, WorkerResult};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What drives the queue: the driver's queue pairs, or the bare floor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Engine {
    /// `QueuePair`: validation, buffer ownership, deadlines, recovery; each
    /// I/O sent again from its completion, in place
    /// (`QueuePair::poll_in_place`).
    Driver,
    /// `QueuePair` as `driver`, each I/O a new `Request` submitted after
    /// the poll pass (`QueuePair::poll`, then `QueuePair::submit`).
    Submit,
    /// `RawQueue`: commands written straight into the ring, the phase tag
    /// spun on, nothing else; what the platform costs by itself.
    Raw,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Rw {
    Read,
    Write,
    Randread,
    Randwrite,
    Randrw,
}

impl Rw {
    /// Whether the job writes, and so destroys what the region held.
    fn writes(self) -> bool {
        matches!(self, Rw::Write | Rw::Randwrite | Rw::Randrw)
    }
}

/// Measure a namespace's IOPS, bandwidth and latency through polled queue pairs.
#[derive(Parser, Debug)]
#[command(name = "perf", version)]
struct Args {
    /// I/O pattern.
    #[arg(long, value_enum, default_value = "randread")]
    rw: Rw,
    /// driver: the driver's queue pairs; raw: a bare queue pair with no
    /// validation, deadlines or recovery, the floor the driver is measured
    /// against (its rings and PRP lists on a huge page).
    #[arg(long, value_enum, default_value = "driver")]
    engine: Engine,
    /// Block size of each I/O (e.g. 4k, 256k): a multiple of the block
    /// size, 512..=64M, and at most the device's largest transfer (MDTS).
    #[arg(long, default_value = "4k", value_parser = args::size_in(LBA_BYTES_MIN, LBA_BYTES_MIN, IO_BYTES_MAX))]
    bs: u64,
    /// I/Os in flight per queue pair, 1..=1024.
    #[arg(long, default_value_t = 1, value_parser = args::int_in::<u16>(1, QUEUE_DEPTH_MAX))]
    qd: u16,
    /// Run time in seconds, 1..=86400.
    #[arg(long, default_value_t = 10, value_parser = args::whole_seconds_in(1, TIME_S_MAX))]
    time: u64,
    /// Queue pairs, one thread each, 1..=64.
    #[arg(long, default_value_t = 1, value_parser = args::int_in::<u16>(1, THREADS_MAX))]
    qpairs: u16,
    /// Namespace ID, 1..=4294967294.
    #[arg(long, default_value_t = 1, value_parser = args::nsid)]
    ns: u32,
    /// Controller PCI address; default: the first NVMe function bound to vfio-pci.
    #[arg(long, value_name = "BDF", value_parser = nvme_examples::args::pci_address)]
    pci: Option<String>,
    /// Percentage of reads for randrw, 0..=100 (default 50); refused with
    /// other jobs.
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=100))]
    rwmixread: Option<u8>,
    /// Bytes of the namespace to use, more than 0, from --offset (default:
    /// all of it).
    #[arg(long, value_parser = args::size_in(1, 1, u64::MAX))]
    size: Option<u64>,
    /// Stop after this many bytes per queue pair (fio's io_size), or at
    /// --time, whichever comes first: one pass over a region. More than 0.
    #[arg(long, value_parser = args::size_in(1, 1, u64::MAX))]
    io_bytes: Option<u64>,
    /// Where the region starts, in bytes from LBA 0: a multiple of 512,
    /// before the namespace's end.
    #[arg(long, default_value = "0", value_parser = args::size_in(LBA_BYTES_MIN, 0, u64::MAX))]
    offset: u64,
    /// Use MMIO doorbells only, even when shadow doorbells are offered.
    #[arg(long)]
    no_shadow_doorbells: bool,
    /// When I/O commands describe their data with an SGL instead of PRPs,
    /// on a controller that offers SGLs: never, auto (where PRPs would
    /// need a list, more than 8 KiB) or always.
    #[arg(long, default_value = "auto", value_parser = parse_sgl)]
    sgl: nvme_driver::SglMode,
    /// The clock perf's latencies read: auto (the TSC where CPUID says it
    /// is invariant, or where an OS clock read costs far more, as in a VM
    /// on the HPET; else the OS's), tsc (the TSC in every case) or os
    /// (clock_gettime). Deadlines read it too where CPUID vouches for the
    /// TSC, else the OS clock, once per deadline check.
    #[arg(long, default_value = "auto", value_parser = parse_clock)]
    clock: ClockSource,
    /// Entries per queue (at least --qd + 1, at most the controller's
    /// CAP.MQES + 1); default: the larger of --qd + 1 and 256, as SPDK's
    /// perf sizes its queues.
    #[arg(long, value_parser = args::int_in::<u16>(2, 4096))]
    queue_entries: Option<u16>,
    /// Each command's deadline in seconds, after which the driver aborts it
    /// and then resets the controller, 0..=3600; 0 turns deadlines (and the
    /// health checks that go with them) off, to measure what they cost.
    #[arg(long, default_value_t = 30, value_parser = args::whole_seconds_in(0, 3600))]
    io_timeout: u64,
    /// Seed for the random offsets.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// On a zoned namespace (--rw write), write with Zone Append, any
    /// number in flight per zone, instead of at each zone's write pointer,
    /// one in flight per zone.
    #[arg(long)]
    zone_append: bool,
    /// Run against the in-process simulator instead of a device.
    #[arg(long, conflicts_with = "pci")]
    sim: bool,
    /// Go on without asking: a write job (--rw write, randwrite, randrw)
    /// overwrites what the namespace holds in its region. Without it, a
    /// write job on a device asks on a terminal and refuses otherwise.
    #[arg(long)]
    yes: bool,
    /// Simulated namespace size: a multiple of 4k, 1M..=1T.
    #[arg(long, default_value = "1G", value_parser = args::size_in(BLOCK_BYTES, 1 << 20, SIM_BYTES_MAX), requires = "sim")]
    sim_capacity: u64,
    /// Simulated block size (512 or 4096).
    #[arg(long, default_value_t = 512, value_parser = sim_lba, requires = "sim")]
    sim_lba: u32,
    /// Make the simulated namespace zoned, with zones of this size: a
    /// multiple of 4k, at least 64k, at most the namespace.
    #[arg(long, value_parser = args::size_in(BLOCK_BYTES, 64 << 10, SIM_BYTES_MAX), requires = "sim")]
    sim_zone: Option<u64>,
    /// Break the cost per I/O into phases, timed with the clock: building
    /// the request, the pair's checks, the data pointer, the SQE, the
    /// doorbell, poll passes, completion dispatch, perf's own bookkeeping,
    /// and apart from those the device's time from the doorbell to the
    /// completion. With --engine raw, the whole submission counts as the
    /// SQE's. The timing itself adds a few clock reads per I/O.
    #[arg(long)]
    profile: bool,
    /// Before each write, copy its --bs bytes from ordinary memory into
    /// its DMA buffer, as a caller handing over its own bytes does (a
    /// volume's writes do): to measure what that copy costs.
    #[arg(long)]
    copy_in: bool,
    /// Also report the bandwidth of every second of the run (all queue
    /// pairs together), to see whether it holds level.
    #[arg(long)]
    per_second: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Entries per queue unless --queue-entries says otherwise (SPDK's perf
/// default): a queue of --qd + 1 entries wraps on every command, which
/// measured 3 to 11 µs slower at QD1 under QEMU.
const DEFAULT_QUEUE_ENTRIES: u16 = 256;

/// How long the raw engine waits for its last commands after the run.
const RAW_DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// Longest run: a day.
const TIME_S_MAX: u64 = 24 * 3600;

/// A simulated block size: 512 or 4096.
fn sim_lba(text: &str) -> Result<u32, String> {
    match text.trim() {
        "512" => Ok(512),
        "4096" | "4k" => Ok(4096),
        _ => Err("expected 512 or 4096".into()),
    }
}

/// Reads in a randrw job when --rwmixread is not given, in percent.
const RWMIXREAD_DEFAULT: u8 = 50;

fn main() -> ExitCode {
    let args = Args::parse();
    if args.rwmixread.is_some() && args.rw != Rw::Randrw {
        // An option that does not apply is refused, not ignored.
        nvme_examples::args::exit_usage_error::<Args>("perf", "--rwmixread applies to --rw randrw only");
    }
    if args.copy_in && args.engine == Engine::Raw {
        nvme_examples::args::exit_usage_error::<Args>("perf", "--copy-in runs on the driver engines only");
    }
    if args.sim && args.rw.writes() {
        // What a write job writes is kept in memory; reads of blocks never
        // written take none.
        let written = args.size.unwrap_or(args.sim_capacity).min(args.sim_capacity);
        if let Err(message) = args::sim_fits("--sim-capacity", written) {
            nvme_examples::args::exit_usage_error::<Args>("perf", &message);
        }
    }
    interrupt::install();
    match run(&args) {
        Ok(()) if interrupt::requested() => {
            eprintln!(
                "perf: interrupted by {}: the figures above are of the run until then (partial)",
                interrupt::signal_name().unwrap_or("a signal")
            );
            ExitCode::from(interrupt::EXIT_INTERRUPTED)
        }
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report("perf"),
    }
}

fn run(args: &Args) -> Result<(), Failure> {
    // A write job is refused here when nobody can answer, and asked once
    // the controller is open, naming the namespace by what it is and holds.
    let rw = args.rw.to_possible_value().map_or_else(String::new, |v| v.get_name().to_string());
    let confirmation = match args.rw.writes() && !args.sim {
        true => {
            let device = args.pci.as_deref().unwrap_or("the first vfio-pci controller");
            let what = format!("--rw {rw} overwrites the data of namespace {} of {device}", args.ns);
            Some(Confirmation::before_opening(&what, args.yes)?)
        }
        false => None,
    };
    let options = ControllerOptions {
        shadow_doorbells: !args.no_shadow_doorbells,
        sgl: args.sgl,
        clock: args.clock,
        ..ControllerOptions::default()
    };
    let controller = if args.sim {
        let blocks = args.sim_capacity / u64::from(args.sim_lba);
        let config = match args.sim_zone {
            Some(zone) => {
                let zone_blocks = zone / u64::from(args.sim_lba);
                if zone > args.sim_capacity {
                    return Err(Failure::Argument(format!(
                        "--sim-zone {zone} is larger than --sim-capacity {}",
                        args.sim_capacity
                    )));
                }
                SimConfig::zoned(blocks / zone_blocks * zone_blocks, args.sim_lba, zone_blocks, zone_blocks)
            }
            None => SimConfig::nvm(blocks, args.sim_lba),
        }
        .with_seed(args.seed);
        let transport: Arc<dyn Transport> = Simulator::new(config);
        Controller::init(transport, options).map_err(|e| format!("simulator: {e}"))?
    } else {
        open_controller(args.pci.as_deref(), options)?
    };
    let ns = controller.namespace(args.ns).map_err(|e| e.to_string())?;
    if let Some(confirmation) = confirmation {
        let what = format!("--rw {rw} overwrites {}", nvme_examples::device::named_namespace(&controller, args.ns));
        confirmation.ask("perf", &what)?;
    }
    let block = u64::from(ns.block_size());
    // What the options ask of this namespace is checked before any I/O:
    // a bad fit is a bad argument (exit 2), never a region silently cut.
    let argument = |message: String| Err(Failure::Argument(message));
    if args.bs == 0 || !args.bs.is_multiple_of(block) || args.bs > ns.max_transfer_bytes() {
        return argument(format!(
            "--bs {} must be a multiple of the {block}-byte block and at most {} bytes (MDTS)",
            args.bs,
            ns.max_transfer_bytes()
        ));
    }
    let offset_blocks = args.offset / block;
    if offset_blocks >= ns.capacity_blocks() || !args.offset.is_multiple_of(block) {
        return argument(format!(
            "--offset {}: expected a multiple of the {block}-byte block before the namespace's end ({} bytes)",
            args.offset,
            ns.capacity_blocks() * block
        ));
    }
    let left = ns.capacity_blocks() - offset_blocks;
    let region_blocks = match args.size {
        Some(bytes) if bytes.div_ceil(block) > left => {
            return argument(format!(
                "--size {}: from --offset {} the namespace holds {} ({} bytes)",
                nvme_examples::args::human_size(bytes),
                args.offset,
                nvme_examples::args::human_size(left * block),
                left * block
            ));
        }
        Some(bytes) => bytes / block,
        None => left,
    };
    let io_blocks = args.bs / block;
    if region_blocks < io_blocks * u64::from(args.qpairs) {
        return argument("--size leaves less than one I/O per queue pair".into());
    }
    let most = u16::try_from(controller.max_queue_entries()).unwrap_or(u16::MAX);
    let entries = args.queue_entries.unwrap_or(DEFAULT_QUEUE_ENTRIES.max(args.qd + 1).min(most));
    if entries <= args.qd || entries > most {
        return argument(format!(
            "--queue-entries {entries}: expected {}..={most} (--qd + 1 to CAP.MQES + 1)",
            u32::from(args.qd) + 1
        ));
    }
    let zones = zoned_shares(args, &controller, &ns, offset_blocks, region_blocks, io_blocks)?;

    let results: Vec<Result<WorkerResult, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..args.qpairs)
            .map(|index| {
                let (controller, ns) = (&controller, &ns);
                let zones = zones.as_ref().map(|shares| shares[usize::from(index)].clone());
                let job = Job { args, entries, index, region_blocks, io_blocks, zones };
                scope.spawn(move || match args.engine {
                    Engine::Driver | Engine::Submit => worker(controller, ns, &job),
                    Engine::Raw => raw_worker(controller, ns, &job),
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("worker panicked".into()))).collect()
    });
    let mut total = WorkerResult::default();
    for result in results {
        let result = result?;
        total.reads.merge(&result.reads);
        total.writes.merge(&result.writes);
        total.bytes += result.bytes;
        total.errors += result.errors;
        total.first_error = total.first_error.or(result.first_error);
        total.elapsed = total.elapsed.max(result.elapsed);
        total.rings_on_small_pages += result.rings_on_small_pages;
        if let Some(profile) = &result.profile {
            total.profile.get_or_insert_with(ProfileNs::default).add(profile);
        }
        if let Some(series) = &result.per_second {
            total.per_second.get_or_insert_with(PerSecond::default).merge(series);
        }
        let s = &mut total.stats;
        s.submitted += result.stats.submitted;
        s.completed += result.stats.completed;
        s.sq_doorbell_mmio_writes += result.stats.sq_doorbell_mmio_writes;
        s.cq_doorbell_mmio_writes += result.stats.cq_doorbell_mmio_writes;
        s.sq_doorbell_updates += result.stats.sq_doorbell_updates;
        s.cq_doorbell_updates += result.stats.cq_doorbell_updates;
        s.spurious_completions += result.stats.spurious_completions;
    }
    let zone_count = zones.as_ref().map(|shares| shares.iter().map(Vec::len).sum::<usize>());
    report(args, &controller, &ns, entries, zone_count, &total);
    if total.errors > 0 {
        return Err(format!("{} I/Os failed; first: {}", total.errors, total.first_error.unwrap_or_default()).into());
    }
    Ok(())
}

/// Each queue pair's zones for a zoned write job, the zones reset; `None`
/// for every other job. Refuses writes a zoned namespace cannot take.
fn zoned_shares(
    args: &Args,
    controller: &Controller,
    ns: &Namespace,
    offset_blocks: u64,
    region_blocks: u64,
    io_blocks: u64,
) -> Result<Option<Vec<Vec<zoned::Zone>>>, String> {
    if ns.zones().is_none() {
        return if args.zone_append { Err("--zone-append needs a zoned namespace".into()) } else { Ok(None) };
    }
    match args.rw {
        Rw::Write => {}
        Rw::Randwrite | Rw::Randrw => {
            return Err("a zoned namespace is written at its write pointers: use --rw write (or seqwrite)".into())
        }
        Rw::Read | Rw::Randread if args.zone_append => return Err("--zone-append needs --rw write".into()),
        Rw::Read | Rw::Randread => return Ok(None),
    }
    if args.engine == Engine::Raw {
        return Err("zoned write jobs run on the driver engines only".into());
    }
    let append_max = ns.zones().map_or(0, |z| z.zone_append_max_bytes);
    if args.zone_append && args.bs > append_max {
        return Err(format!("--bs {} is more than the device's largest Zone Append, {append_max} bytes", args.bs));
    }
    let job = zoned::ZonedJob {
        region_start: offset_blocks,
        region_blocks,
        io_blocks,
        qpairs: args.qpairs,
        qd: args.qd,
        append: args.zone_append,
    };
    let timeout = Duration::from_secs(args.io_timeout.max(ZONE_RESET_TIMEOUT_S));
    zoned::prepare(controller, ns, job, timeout).map(Some)
}

/// The least time a zoned job's zone resets are given, in seconds.
const ZONE_RESET_TIMEOUT_S: u64 = 30;

/// When a worker stops submitting (at --time, or after --io-bytes), and
/// what it still has in flight; the first --qd I/Os are already submitted.
struct Pace {
    started: Instant,
    /// The end of the run, in the clock's ticks.
    deadline: u64,
    stopping: bool,
    io_limit: u64,
    submitted_bytes: u64,
    in_flight: usize,
    empty_polls: u32,
}

impl Pace {
    fn new(args: &Args, clock: &Clock) -> Self {
        Pace {
            started: Instant::now(),
            deadline: clock.now().saturating_add(clock.ticks(Duration::from_secs(args.time))),
            stopping: false,
            io_limit: args.io_bytes.unwrap_or(u64::MAX),
            submitted_bytes: u64::from(args.qd) * args.bs,
            in_flight: usize::from(args.qd),
            empty_polls: 0,
        }
    }

    /// A poll pass that found nothing. No PAUSE and no system call per
    /// pass, as SPDK's pollers: every 64th reads the clock to see whether
    /// the run is over, and returns what it read.
    fn idle(&mut self, clock: &Clock) -> Option<u64> {
        self.empty_polls = self.empty_polls.wrapping_add(1);
        self.empty_polls.is_multiple_of(64).then(|| self.now(clock))
    }

    /// The clock, and whether the run is over by it.
    fn now(&mut self, clock: &Clock) -> u64 {
        let now = clock.now();
        // A signal ends the run as --time does: the figures so far stand.
        self.stopping |= now >= self.deadline || interrupt::requested();
        now
    }

    /// An I/O of `bs` bytes completed: whether to submit another in its
    /// place; if not, it no longer counts as in flight.
    fn replace(&mut self, bs: u64) -> bool {
        if self.stopping || self.submitted_bytes >= self.io_limit {
            self.in_flight -= 1;
            return false;
        }
        self.submitted_bytes += bs;
        true
    }

    /// The I/O `replace` made room for has nowhere to go (a zoned job's
    /// zones are full): the slot retires.
    fn nothing_left(&mut self, bs: u64) {
        self.submitted_bytes -= bs;
        self.in_flight -= 1;
    }
}

/// One queue pair's share of the run.
struct Job<'a> {
    args: &'a Args,
    entries: u16,
    index: u16,
    region_blocks: u64,
    io_blocks: u64,
    /// A zoned write job's zones for this queue pair.
    zones: Option<Vec<zoned::Zone>>,
}

/// One I/O a picker chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Io {
    Read(u64),
    Write(u64),
    /// A Zone Append to the zone of this index in the pair's share.
    Append(usize),
}

/// Where each I/O of one queue pair goes, and whether it reads.
struct Picker {
    rw: Rw,
    rwmixread: u64,
    rng: Prng,
    random: bool,
    region_start: u64,
    slots: u64,
    io_blocks: u64,
    slice_start: u64,
    slice_blocks: u64,
    next_sequential: u64,
    zoned: Option<zoned::ZonedPicker>,
}

impl Picker {
    fn new(ns: &Namespace, job: &Job) -> Self {
        let args = job.args;
        let io_blocks = job.io_blocks;
        // Each thread works in its own slice for sequential jobs; random
        // jobs use the whole region.
        let slice_blocks = (job.region_blocks / u64::from(args.qpairs)) / io_blocks * io_blocks;
        let region_start = args.offset / u64::from(ns.block_size());
        Picker {
            rw: args.rw,
            rwmixread: u64::from(args.rwmixread.unwrap_or(RWMIXREAD_DEFAULT)),
            rng: Prng::with_stream(args.seed, u64::from(job.index)),
            random: matches!(args.rw, Rw::Randread | Rw::Randwrite | Rw::Randrw),
            region_start,
            slots: job.region_blocks / io_blocks,
            io_blocks,
            slice_start: region_start + slice_blocks * u64::from(job.index),
            slice_blocks,
            next_sequential: 0,
            zoned: job
                .zones
                .clone()
                .map(|zones| zoned::ZonedPicker::new(zones, io_blocks, usize::from(args.qd), args.zone_append)),
        }
    }

    /// The I/O to submit in `slot` (its token: a zoned job's lane), or
    /// `None` when a zoned job's zones are full.
    fn next(&mut self, slot: usize) -> Option<Io> {
        if let Some(zoned) = &mut self.zoned {
            return zoned.next(slot).map(|target| match target {
                zoned::Target::At(lba) => Io::Write(lba),
                zoned::Target::Append(zone) => Io::Append(zone),
            });
        }
        let lba = if self.random {
            self.region_start + self.rng.below(self.slots) * self.io_blocks
        } else {
            let lba = self.slice_start + self.next_sequential;
            self.next_sequential = (self.next_sequential + self.io_blocks) % self.slice_blocks.max(self.io_blocks);
            lba
        };
        let is_read = match self.rw {
            Rw::Read | Rw::Randread => true,
            Rw::Write | Rw::Randwrite => false,
            Rw::Randrw => self.rng.below(100) < self.rwmixread,
        };
        Some(if is_read { Io::Read(lba) } else { Io::Write(lba) })
    }
}

/// The data buffers of one queue pair: at least 2 MiB of them, so the pool
/// sits in one hugepage (the IOMMU then translates one large page instead
/// of many small ones); filled with a pattern for writes.
fn data_pool(controller: &Controller, args: &Args) -> Result<DmaPool, String> {
    let bs = args.bs as usize;
    let count = usize::from(args.qd).max(HUGE_PAGE_SIZE.div_ceil(bs));
    DmaPool::new(controller.transport(), bs, count as u32).map_err(|e| e.to_string())
}

fn worker(controller: &Controller, ns: &Namespace, job: &Job) -> Result<WorkerResult, String> {
    let args = job.args;
    let qd = usize::from(args.qd);
    let mut qpair = controller.create_queue_pair(job.entries).map_err(|e| e.to_string())?;
    qpair.set_timeout((args.io_timeout > 0).then(|| Duration::from_secs(args.io_timeout)));
    // Latencies are stamped with the pair's clock: one read per completion
    // batch, no system call on the TSC.
    let clock = qpair.clock();
    let bs = args.bs as usize;
    let pool = data_pool(controller, args)?;
    let mut picker = Picker::new(ns, job);
    let zones = job.zones.as_deref().unwrap_or(&[]);
    let source: Option<Vec<u8>> = args.copy_in.then(|| (0..bs).map(|i| (i % 251) as u8).collect());
    // The request for `io` in slot `token`, on `buffer`. (Built and
    // submitted in place: a request is some 140 bytes, and every move of
    // one is a memcpy call per I/O.)
    let request_for = |io: Io, token: usize, buffer: IoBuffer| -> Result<Request, String> {
        if let (Some(source), Io::Write(_) | Io::Append(_)) = (&source, io) {
            buffer.buffer().copy_in(buffer.offset(), source);
        }
        let token = token as u64;
        let request = match io {
            Io::Read(lba) => ns.read(lba, buffer, token),
            Io::Write(lba) => ns.write(lba, buffer, false, token),
            Io::Append(zone) => ns.zone_append(zones[zone].start, buffer, false, token),
        };
        request.map_err(|e| e.to_string())
    };

    let mut result =
        WorkerResult { rings_on_small_pages: usize::from(!qpair.is_hugepage_backed()), ..Default::default() };
    let mut submitted_at = vec![clock.now(); qd];
    let mut ios = vec![Io::Read(0); qd];
    let mut completions: Vec<IoCompletion> = Vec::with_capacity(qd);
    qpair.set_profiling(args.profile);
    let profile_start = clock.now();
    let mut request_ticks = 0u64;
    for token in 0..qd {
        let buffer = pool.get().ok_or("DMA pool exhausted")?;
        if !matches!(args.rw, Rw::Read | Rw::Randread) {
            buffer.fill(0, bs, 0xA5 ^ token as u8);
        }
        let io = picker.next(token).ok_or_else(|| format!("the region's zones hold fewer than --qd {qd} writes"))?;
        ios[token] = io;
        submitted_at[token] = clock.now();
        qpair.submit(request_for(io, token, IoBuffer::range(buffer, 0, bs))?).map_err(|(e, _)| format!("{e:?}"))?;
    }

    let mut pace = Pace::new(args, &clock);
    result.per_second = args.per_second.then(|| PerSecond::new(&clock));
    if args.engine == Engine::Driver {
        let source = source.as_deref();
        let mut run = in_place::Run::new(
            job,
            ns,
            &clock,
            zones,
            source,
            &request_for,
            &mut pace,
            &mut result,
            &mut picker,
            &mut ios,
            &mut submitted_at,
        );
        run.run(&mut qpair)?;
    } else {
        while pace.in_flight > 0 {
            qpair.poll(|completion| completions.push(completion));
            if completions.is_empty() {
                pace.idle(&clock);
                continue;
            }
            let now = pace.now(&clock);
            for completion in completions.drain(..) {
                let token = completion.token as usize;
                let mut status = completion.status.map_err(|status| status.to_string());
                if let (Io::Append(zone), Ok(())) = (ios[token], &status) {
                    status = zoned::check_append(zones[zone], job.io_blocks, completion.result_u64());
                }
                let read = matches!(ios[token], Io::Read(_));
                result.record(&clock, now, submitted_at[token], read, args.bs, status);
                let buffer = completion.buffer.ok_or("a data command came back without its buffer")?;
                if !pace.replace(args.bs) {
                    continue;
                }
                let Some(io) = picker.next(token) else {
                    pace.nothing_left(args.bs);
                    continue;
                };
                ios[token] = io;
                submitted_at[token] = now;
                if args.profile {
                    let built = clock.now();
                    let request = request_for(io, token, buffer)?;
                    request_ticks += clock.now() - built;
                    qpair.submit(request).map_err(|(e, _)| format!("{e:?}"))?;
                } else {
                    qpair.submit(request_for(io, token, buffer)?).map_err(|(e, _)| format!("{e:?}"))?;
                }
            }
        }
    }
    result.elapsed = pace.started.elapsed();
    result.stats = qpair.stats();
    if let Some(phases) = qpair.profile() {
        result.profile = Some(ProfileNs::of(&clock, clock.now() - profile_start, request_ticks, phases));
    }
    Ok(result)
}

/// The floor: the same job on a [`RawQueue`]. Commands go straight into the
/// ring with their buffers' addresses; completions are matched by command
/// identifier, which is the buffer's index. Spins as `worker` does: no
/// PAUSE and no system call per pass, the TSC (or `--clock`) as the clock.
fn raw_worker(controller: &Controller, ns: &Namespace, job: &Job) -> Result<WorkerResult, String> {
    let args = job.args;
    let qd = usize::from(args.qd);
    let mut queue = controller.create_raw_queue(job.entries).map_err(|e| e.to_string())?;
    let clock = Clock::new(args.clock);
    let bs = args.bs as usize;
    let pool = data_pool(controller, args)?;
    let buffers: Vec<DmaBuffer> = (0..qd).map(|_| pool.get().ok_or("DMA pool exhausted")).collect::<Result<_, _>>()?;
    if !matches!(args.rw, Rw::Read | Rw::Randread) {
        for (index, buffer) in buffers.iter().enumerate() {
            buffer.fill(0, bs, 0xA5 ^ index as u8);
        }
    }
    let (nsid, blocks) = (ns.nsid(), job.io_blocks as u32);
    let mut picker = Picker::new(ns, job);
    let mut is_read = vec![true; qd];
    let mut submitted_at = vec![clock.now(); qd];
    // Returns whether the I/O reads.
    let mut submit = |queue: &mut RawQueue, cid: usize| -> Result<bool, String> {
        let (command, read) = match picker.next(cid) {
            Some(Io::Read(lba)) => (nvm::read(nsid, lba, blocks), true),
            Some(Io::Write(lba)) => (nvm::write(nsid, lba, blocks, false), false),
            other => unreachable!("the raw engine runs conventional jobs only, not {other:?}"),
        };
        // SAFETY: buffer `cid` is mapped for this controller and neither
        // read nor written by this loop until command `cid` completes; at
        // most qd < entries commands are in flight, one per cid.
        unsafe { queue.push(command, cid as u16, buffers[cid].iova(), bs) }.map_err(|e| e.to_string())?;
        Ok(read)
    };

    let mut result =
        WorkerResult { rings_on_small_pages: usize::from(!queue.is_hugepage_backed()), ..Default::default() };
    // With --profile: phases as the driver engine reports them, and when
    // each command's doorbell was rung.
    let mut timed = args.profile.then(|| RawTimes::new(qd));
    let profile_start = clock.now();
    for cid in 0..qd {
        submitted_at[cid] = clock.now();
        is_read[cid] = submit(&mut queue, cid)?;
    }
    queue.ring();
    if let Some(timed) = &mut timed {
        timed.rung_at.fill(clock.now());
    }
    let mut pace = Pace::new(args, &clock);
    result.per_second = args.per_second.then(|| PerSecond::new(&clock));
    let mut done: Vec<(u16, u16)> = Vec::with_capacity(qd);
    // No deadlines, aborts or resets here: a command the device never
    // completes ends the run, this long after its end.
    let give_up = pace.deadline.saturating_add(clock.ticks(RAW_DRAIN_LIMIT));
    while pace.in_flight > 0 {
        let reap_start = if timed.is_some() { clock.now() } else { 0 };
        let reaped = queue.reap(|cid, status| done.push((cid, status)));
        if let Some(timed) = &mut timed {
            timed.reaped(&done, reap_start, clock.now());
        }
        if reaped == 0 {
            if pace.idle(&clock).is_some_and(|now| now >= give_up) {
                return Err(format!(
                    "{} command(s) never completed, {} s after the run's end (the raw engine has no deadlines or \
                     recovery)",
                    pace.in_flight,
                    RAW_DRAIN_LIMIT.as_secs()
                ));
            }
            continue;
        }
        let now = pace.now(&clock);
        for (cid, status) in done.drain(..) {
            let cid = usize::from(cid);
            let status = if status == 0 { Ok(()) } else { Err(format!("status field {status:#x}")) };
            result.record(&clock, now, submitted_at[cid], is_read[cid], args.bs, status);
            if !pace.replace(args.bs) {
                continue;
            }
            submitted_at[cid] = now;
            let submit_start = if timed.is_some() { clock.now() } else { 0 };
            is_read[cid] = submit(&mut queue, cid)?;
            if let Some(timed) = &mut timed {
                timed.submitted(cid, submit_start, clock.now());
            }
        }
        if pace.in_flight > 0 {
            let ring_start = if timed.is_some() { clock.now() } else { 0 };
            queue.ring();
            if let Some(timed) = &mut timed {
                timed.rung(ring_start, clock.now());
            }
        }
    }
    result.elapsed = pace.started.elapsed();
    let ios = result.reads.count() + result.writes.count();
    (result.stats.submitted, result.stats.completed) = (ios, ios);
    (result.stats.sq_doorbell_mmio_writes, result.stats.cq_doorbell_mmio_writes) = queue.mmio_writes();
    if let Some(timed) = timed {
        result.profile = Some(ProfileNs::of(&clock, clock.now() - profile_start, 0, timed.ticks));
    }
    Ok(result)
}

fn parse_sgl(text: &str) -> Result<nvme_driver::SglMode, String> {
    text.parse()
}

fn parse_clock(text: &str) -> Result<ClockSource, String> {
    text.parse()
}

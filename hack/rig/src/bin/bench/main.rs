//! `hack/bench`: our stack next to the kernel's, in one VM boot.
//!
//! One QEMU (TCG) guest with identical controllers in pairs. Two
//! conventional controllers on equal, fresh images: controller 0 bound to
//! vfio-pci for our `perf`, controller 1 left to the guest kernel's nvme
//! driver (booted with `nvme.poll_queues=1`, so io_uring can poll) for
//! Debian's fio. Both namespaces are written once before any job: a read of
//! a never-written block of a sparse image costs the host less than a read
//! of data, so either both sides are preconditioned or neither. Then every
//! job runs on every side, interleaved, for a number of rounds; the order of
//! the sides rotates from round to round so that no side always runs first.
//! The report gives each side's median and range over the rounds, and the
//! ratios of our median to the kernel's.
//!
//! Then three ZNS controllers ([`zoned`]): `seqwrite` against btrfs in zoned
//! mode and raw fio, `scrub` against `btrfs scrub` and fio.
//!
//! With `--only resilver`, a VM of its own ([`resilver`]): a mirror member
//! rebuilt from the survivor, with and without verification, next to our
//! `perf` on the same devices and our scrub of the same volume.
//!
//! Last, one side-by-side table of every pair (job, ours, kernel, ratio),
//! the same as JSON, and an SVG chart. See BENCHMARKS.md and docs/benchmarks/method.md.

mod cli;
mod images;
mod monitor;
mod parse;
mod plan;
mod pool;
mod report;
mod resilver;
mod scale;
mod zoned;

use cli::*;
use images::*;
use monitor::*;
use parse::*;
use plan::*;
use report::*;

use nvme_report::svg;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use vm_rig::{format_size, host_command, parse_size, Controller, Vm};

const USAGE: &str = "\
usage: hack/bench [--json FILE] [--svg FILE] [--quick]
                  [--only driver|zoned|resilver|pool|scale]
                  [--rounds N] [--time SECONDS] [--size SIZE] [--no-precondition]
                  [--zoned-size SIZE] [--zone SIZE] [--zoned-metadata BYTES] [--zoned-checksums KIND]
                  [--fill PERCENT] [--btrfs-fill PERCENT] [--iodepth N] [--no-ablations]
                  [--resilver-size SIZE] [--resilver-fill PERCENT]
                  [--pool-size SIZE] [--pool-hold SIZE] [--pool-scale SIZE]
                  [--scale-capacities LIST] [--scale-extents LIST]
                  [--scale-metadata BYTES] [--scale-checksums KIND] [--timeout SECONDS]

Boots ONE VM (QEMU TCG, q35, 2 vCPUs, 3 GiB) with five controllers, in
identical pairs, and runs our tools and the kernel's side by side in it
(with --only resilver: three controllers, with --only pool: five, and our
tools alone).

The driver (two conventional controllers of --size; ours: perf on
vfio-pci; kernel: fio on /dev/ctrl1n1, nvme.poll_queues=1). Both
namespaces are written once first. Then, in every round, each job runs on
each side in turn:

  randread-4k-qd1    4 KiB random read, QD1: ours, io_uring, io_uring --hipri
  randread-4k-qd32   4 KiB random read, QD32: ours, io_uring, io_uring --hipri
  write-256k-qd1     256 KiB sequential write, QD1: ours, libaio, and ours
                     with PRPs only (perf --sgl never)
  read-512k-qd32     512 KiB sequential read, QD32: ours, io_uring, and ours
                     with PRPs only

and every job also on the floor (perf --engine raw: a bare queue pair with
no validation, deadlines or recovery, its rings on a huge page), which
ours is held to: at least 0.97 of it. Ours and the floor run back to back
in alternating order, and the target judges the median of each round's
own ratio (the ratio of the two medians is shown beside it).

The allocator and the scrub (three ZNS controllers of --zoned-size with
--zone zones; ours, btrfs zoned, raw):

  ours / ours-qdN    seqwrite, 256 KiB at QD1 and QD N, FILL of the namespace
  ours-zc(-qd)       the same with --zero-copy: no copy into DMA memory
  ours-bare(-qd)     the same with --zero-copy --same-data: no per-write work
                     (data, checksums, copy), the allocator alone
  ours-fair          seqwrite --zero-copy --reuse-data, QD1: the peer's work
                     and no more (one reused buffer, every write checksummed,
                     no copy); the row compared with btrfs (target 1.5x)
  perf-zoned(-qd)    perf --zone-append of as many bytes at QD1 and QD N: the
                     raw zoned path seqwrite runs on, bandwidth per second
  btrfs / btrfs-qdN  the seed's fio job on mkfs.btrfs -O zoned, BTRFS-FILL
  btrfs-scrub        btrfs scrub start -B on what btrfs-qdN wrote
  raw-zbd            fio --zonemode=zbd on the raw namespace, FILL
  scrub              our scrub, QD64, verifying, over as much data as btrfs held
  scrub-no-verify    the same without verification; fio-read: the kernel's
                     512 KiB sequential reads at QD32; perf-read: ours over
                     the same LBAs
  ablations          seqwrite with checksums inline and with the SSE4.2
                     crc32c; scrub at QD1 submit-and-wait with 64 KiB reads

The resilver (only with --only resilver, in a VM of its own with three
controllers of --resilver-size: two ZNS mirror members, with zones of
SIZE/512 so that the conventional spare can take a member's place, and the
spare). seqwrite fills the mirror (--resilver-fill), then in every round:

  perf-read          perf 512 KiB reads QD64 of the survivor's data, once
  scrub              our scrub of the volume (both copies, verifying)
  fail               volume fail: place 1 is given up
  perf-write         perf 256 KiB writes QD64 to the spare, as many bytes
  perf-both-*        the two at once, 3 s
  resilver           volume replace: the spare takes place 1, copied
                     without verification (--no-verify --no-verify-after)
  resilver-verify    given up and replaced again, verifying each extent as
                     read, then a scrub of the new copy
  Rows: the resilver without verification against the slower perf run
  (target >= 0.9x), with verification against the scrub, its mean queue
  depths and what bounds it, the full resilver's duration, and bytes read
  against bytes to rebuild: every replace must rebuild everything the
  volume holds, reading each extent once, or the benchmark fails.

The pool (only with --only pool, in a VM of its own with five
conventional controllers of --pool-size: four make the pool, the fifth is
the spare). In every round:

  perf-N             perf 256 KiB writes QD8 to each of the first N devices
                     at once (N = 1, 2, 4), --pool-scale bytes each
  seqwrite-N         a single pool over the same N devices, as many bytes
                     (256 KiB, QD8 per device, --zero-copy --same-data)
  fill               a 2-copy mirror over the four, --pool-hold per device
  fail               volume fail: place 3 is given up
  perf-spare         perf 256 KiB writes QD64 to the spare, --pool-hold
  replace            volume replace: the spare takes place 3 (no verify)
  fail-again         the spare is given up
  rebuild            volume rebuild: its copies onto the three left
  Rows: seqwrite against perf at 1, 2 and 4 devices; the distributed
  rebuild against replace; replace against perf on the spare; the time to
  full redundancy by each. Each rebuild must copy everything the lost
  place held, or the benchmark fails.

The report (stdout): each driver job's medians (min-max) per side, each
zoned step, then the side-by-side table of job, ours, kernel, ratio and
target. Progress goes to stderr. A driver run during which other host
processes (or the hypervisor under the host) took more than 5% of the
host's CPU time is flagged. Every run has a time limit; the first failure
ends the benchmark.

Options:
  --json FILE         also write everything as JSON to FILE (- for stdout,
                      then the tables go to stderr)
  --svg FILE          the chart: ours and the kernel per job, and seqwrite's
                      bandwidth over time (default target/bench/bench.svg)
  --quick             a smoke run: 1 round of 2 s driver runs, 1 GiB zoned
                      namespaces of 16 MiB zones, no ablations, 512 MiB
                      resilver namespaces (explicit options still win)
  --only PART         run only the driver jobs, only the zoned ones, the
                      resilver (run only when asked for, in a VM of its own:
                      about 6 minutes; the default runs the other two), or
                      scale: the allocator's metadata at 64G to 2T on the
                      host's simulator, no VM (about 40 minutes; --quick
                      16G and 32G)
  --rounds N          rounds of every driver job on every side, and of the
                      resilver's steps (default 3)
  --time SECONDS      length of each driver run (default 10)
  --size SIZE         each conventional namespace (default 256M)
  --no-precondition   skip writing both conventional namespaces first
  --zoned-size SIZE   each ZNS namespace (default 4G)
  --zone SIZE         zone size (default 64M)
  --zoned-metadata BYTES  per-LBA metadata of ours' ZNS namespace (default
                      0: none, like the kernel's, and the volume keeps
                      checksums in zone checksum areas; 8: in block tags)
  --zoned-checksums KIND  where ours keeps checksums (seqwrite --checksums):
                      auto (default), area (after each zone's data), map
                      or tags
  --fill PERCENT      share of the namespace seqwrite and raw-zbd write (90)
  --btrfs-fill PERCENT  share btrfs writes (70)
  --iodepth N         queue depth of the second write runs (8)
  --no-ablations      leave out the ablations
  --resilver-size SIZE  each resilver namespace (default 2G)
  --resilver-fill PERCENT  share of it the mirror holds (65)
  --pool-size SIZE    each pool namespace (default 2G; --quick 1G)
  --pool-hold SIZE    copies each of the four holds before one is lost
                      (default 1G; --quick 256M)
  --pool-scale SIZE   bytes per device of each write-scaling step (default
                      512M; --quick 128M)
  --scale-capacities LIST  scale: volume sizes (64G,256G,1T,2T); a point whose
                      memory, projected from the one before, would not fit
                      is skipped and says so
  --scale-extents LIST  scale: extent sizes (16K,256K,4M; up to 4 MiB, one
                      command per extent)
  --scale-metadata BYTES  scale: the namespace's per-block metadata (default
                      8: block tags; 0: none, checksums in zone checksum areas)
  --scale-checksums KIND  scale: where the volume keeps checksums: auto (the
                      default: block tags with metadata, else zone checksum
                      areas), area (after each zone's data), map or tags
  --timeout SECONDS   hard limit on the VM (default: twice the estimate)
  -h, --help          this text

Exit status: 0 when every run succeeded, 1 when a run failed (its output is
printed), 2 for bad options or a rig failure.";

/// Our controller's function; the rig puts controller N at `00:(10+N).0`.
const OURS_PCI: &str = "0000:00:10.0";
/// The kernel-owned controller's namespace, as the rig links it.
const KERNEL_DEVICE: &str = "/dev/ctrl1n1";
const FIO: &str = "/usr/bin/fio";
const VCPUS: u32 = 2;
const MEM_BYTES: u64 = 3 << 30;
const POLL_QUEUES_ARG: &str = "nvme.poll_queues=1";
/// Preconditioning writes in these units, this deep, on both sides.
const PRECONDITION_BS_BYTES: u64 = 256 << 10;
const PRECONDITION_QD: u16 = 32;
/// Our preconditioning is one pass (`perf --io-bytes`), within a time that
/// covers the region at this rate, and is checked to have covered it.
const PRECONDITION_MIN_MIB_S: u64 = 64;
/// Allowances for the time limit: the boot (about 5 s here, fio's 80 MB of
/// libraries included), and each run's start-up (controller bring-up, fio
/// loading its libraries under TCG: under a second here).
const BOOT_ALLOWANCE_S: u64 = 60;
const RUN_OVERHEAD_S: u64 = 5;
/// A run still going this long past its expected time is killed in the
/// guest (busybox `timeout`), and reported as failed.
const RUN_LIMIT_SLACK_S: u64 = 60;
const QEMU_VERSION_TIMEOUT: Duration = Duration::from_secs(20);
const GIT_TIMEOUT: Duration = Duration::from_secs(20);
const ROUNDS_MAX: u32 = 100;
const RUN_TIME_MAX_S: u64 = 3600;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    /// Our driver through `perf`: vfio-pci, polled queue pairs.
    Ours,
    /// The kernel's interrupt-driven path (the job's engine).
    KernelIrq,
    /// The kernel's polled path: io_uring with `--hipri` on a poll queue.
    KernelPolled,
    /// Our driver with PRPs only (`perf --sgl never`): the baseline for
    /// SGL data pointers, where the job's transfers would need PRP lists.
    OursPrp,
    /// The floor (`perf --engine raw`): what the platform costs with none
    /// of the driver's work.
    Floor,
}

impl Side {
    fn key(self) -> &'static str {
        match self {
            Side::Ours => "ours",
            Side::KernelIrq => "kernel_irq",
            Side::KernelPolled => "kernel_polled",
            Side::OursPrp => "ours_prp",
            Side::Floor => "floor",
        }
    }
}

/// What a job's ratios compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Metric {
    Iops,
    MibS,
}

/// One access pattern, run on our driver and on one or two kernel paths.
#[derive(Debug)]
struct Job {
    name: &'static str,
    title: &'static str,
    /// `perf --rw` and `fio --rw` (they share the names).
    rw: &'static str,
    bs: &'static str,
    qd: u16,
    metric: Metric,
    /// The kernel's interrupt-driven fio engine.
    irq_engine: &'static str,
    /// Whether the kernel also runs io_uring `--hipri` (polled).
    polled: bool,
    /// Whether ours also runs with PRPs only (transfers past two pages,
    /// which SGLs describe in one descriptor where PRPs need a list).
    prp_baseline: bool,
}

const JOBS: [Job; 4] = [
    Job {
        name: "randread-4k-qd1",
        title: "4 KiB random read, QD1",
        rw: "randread",
        bs: "4k",
        qd: 1,
        metric: Metric::Iops,
        irq_engine: "io_uring",
        polled: true,
        prp_baseline: false,
    },
    Job {
        name: "randread-4k-qd32",
        title: "4 KiB random read, QD32",
        rw: "randread",
        bs: "4k",
        qd: 32,
        metric: Metric::Iops,
        irq_engine: "io_uring",
        polled: true,
        prp_baseline: false,
    },
    Job {
        name: "write-256k-qd1",
        title: "256 KiB sequential write, QD1",
        rw: "write",
        bs: "256k",
        qd: 1,
        metric: Metric::MibS,
        irq_engine: "libaio",
        polled: false,
        prp_baseline: true,
    },
    Job {
        name: "read-512k-qd32",
        title: "512 KiB sequential read, QD32",
        rw: "read",
        bs: "512k",
        qd: 32,
        metric: Metric::MibS,
        irq_engine: "io_uring",
        polled: false,
        prp_baseline: true,
    },
];

/// Which parts of the benchmark run: the driver and zoned halves share a
/// VM; the resilver runs alone, in a VM of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Parts {
    Both,
    Driver,
    Zoned,
    Resilver,
    /// Write scaling and rebuilds over a pool of four, in a VM of its own.
    Pool,
    /// The allocator's metadata at scale, on the host's simulator.
    Scale,
}

impl Parts {
    fn driver(self) -> bool {
        matches!(self, Parts::Both | Parts::Driver)
    }

    fn zoned(self) -> bool {
        matches!(self, Parts::Both | Parts::Zoned)
    }

    fn resilver(self) -> bool {
        self == Parts::Resilver
    }

    fn pool(self) -> bool {
        self == Parts::Pool
    }
}

#[derive(Debug, Clone)]
struct Options {
    rounds: u32,
    time_s: u64,
    size_bytes: u64,
    /// Where the JSON goes: a file, or `-` for stdout.
    json: Option<String>,
    svg: PathBuf,
    precondition: bool,
    timeout_s: Option<u64>,
    parts: Parts,
    zoned: zoned::Options,
    resilver: resilver::Options,
    pool: pool::Options,
    scale: scale::Options,
}

/// What a side-by-side row measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    Iops,
    MibS,
    /// Mean bandwidth of the last 10% of intervals over the first 10%.
    Flatness,
    /// Mean commands in flight.
    Depth,
    Seconds,
    Bytes,
}

/// What a row is expected to reach.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Target {
    /// Ours over the other side, at least.
    Ratio(f64),
    /// Ours alone, at least.
    Minimum(f64),
}

/// One line of the side-by-side table: ours against the kernel's path (or,
/// for engine efficiency and ablations, against a baseline of our own).
#[derive(Clone, Debug, PartialEq)]
struct Row {
    job: String,
    ours_label: String,
    ours: Option<f64>,
    kernel_label: String,
    kernel: Option<f64>,
    unit: Unit,
    target: Option<Target>,
    /// The other side is ours too (a baseline, not the kernel).
    baseline_ours: bool,
    /// The median of the rounds' own ratios, where the two sides ran back
    /// to back ([`JobResult::paired_ratio`]); a ratio target judges this
    /// when it is there.
    paired: Option<f64>,
}

/// One run of one job on one side.
#[derive(Debug, Clone)]
struct Run {
    /// 1-based; 0 for preconditioning.
    round: u32,
    job: Option<usize>,
    side: Side,
    command: Vec<String>,
    /// How long the run should take (a fio pass: at least the slowest
    /// preconditioning rate).
    time_s: u64,
}

/// What one run measured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Sample {
    iops: f64,
    mib_s: f64,
    mean_us: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    bytes: u64,
    /// What else the host ran meanwhile; not summarized.
    load: Option<HostLoad>,
}

const FIELDS: usize = 6;

/// One line of guest output, as the script writes them.
#[derive(Debug, PartialEq, Eq)]
enum Line<'a> {
    Env(&'a str, &'a str),
    Result(usize, &'a str),
    Note(&'a str, &'a str),
    Failed(&'a str, &'a str),
    Done,
    Other,
}

/// Host CPU time in clock ticks (`/proc/stat`, `/proc/PID/stat`): all of it,
/// the busy part, the part the hypervisor under this host took (steal), and
/// the part of this process and its children (QEMU).
#[derive(Clone, Copy, Debug, Default)]
struct CpuTicks {
    total: u64,
    busy: u64,
    steal: u64,
    ours: u64,
}

/// What else used the host's CPUs while a run went on, as shares of the
/// host's whole capacity: other processes, and steal by the hypervisor
/// under the host. The VM's vCPUs and device model share the host's cores
/// with everything else, so either skews a run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct HostLoad {
    other: f64,
    steal: f64,
}

/// Samples the host's CPU ticks at each run's end, so each run (from the
/// previous run's end) gets its [`HostLoad`]; shared between the output
/// observer and the report.
#[derive(Debug, Default)]
struct LoadMonitor {
    last: Mutex<Option<CpuTicks>>,
    loads: Mutex<Vec<Option<HostLoad>>>,
}

/// Median, minimum and maximum of each field over the rounds.
#[derive(Clone, Copy, Debug)]
struct Summary {
    median: Sample,
    min: Sample,
    max: Sample,
}

/// One job's results: each side's samples in round order.
#[derive(Debug)]
struct JobResult {
    job: usize,
    sides: Vec<(Side, Vec<Sample>)>,
}

fn main() -> ExitCode {
    let options = match parse_options(std::env::args().skip(1).collect()) {
        Ok(Some(options)) => options,
        Ok(None) => {
            out(&format!("{USAGE}\n"));
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("bench: {message}");
            return ExitCode::from(2);
        }
    };
    match bench(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, message)) => {
            eprintln!("bench: {message}");
            ExitCode::from(code)
        }
    }
}

fn bench(options: &Options) -> Result<(), (u8, String)> {
    if options.parts == Parts::Scale {
        return scale::bench(&options.scale, options.json.as_deref(), options.timeout_s.map(Duration::from_secs));
    }
    let started = Instant::now();
    let date = utc_date(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()));
    let runs = Arc::new(if options.parts.driver() { plan(options) } else { Vec::new() });
    let driver_s: u64 = runs.iter().map(|run| run.time_s + RUN_OVERHEAD_S).sum();
    let zoned_s = if options.parts.zoned() { options.zoned.estimate_s() } else { 0 };
    let resilver_s = if options.parts.resilver() { options.resilver.estimate_s() } else { 0 };
    let pool_s = if options.parts.pool() { options.pool.estimate_s() } else { 0 };
    let estimate_s = BOOT_ALLOWANCE_S + driver_s + zoned_s + resilver_s + pool_s;
    let timeout_s = options.timeout_s.unwrap_or(2 * estimate_s);
    let size = format_size(options.size_bytes);
    let zoned_size = format_size(options.zoned.size);
    let resilver_size = format_size(options.resilver.size);
    if options.parts.pool() {
        eprintln!(
            "bench: one VM (TCG, {VCPUS} vCPUs, {} memory): conventional controllers 0 to 3 (the pool) and 4 (the \
             spare), {} each",
            format_size(MEM_BYTES),
            format_size(options.pool.size)
        );
    } else if options.parts.resilver() {
        eprintln!(
            "bench: one VM (TCG, {VCPUS} vCPUs, {} memory): ZNS controllers 0 (survivor) and 1 (member) of \
             {resilver_size} with {} zones, conventional controller 2 (spare) of {resilver_size}",
            format_size(MEM_BYTES),
            format_size(options.resilver.zone_bytes())
        );
    } else {
        eprintln!(
            "bench: one VM (TCG, {VCPUS} vCPUs, {} memory, {POLL_QUEUES_ARG}): conventional controllers 0 (ours) \
             and 1 (kernel) of {size}; ZNS controllers 2 (ours, {} bytes of metadata per LBA), 3 (btrfs) and \
             4 (raw fio) of {zoned_size}",
            format_size(MEM_BYTES),
            options.zoned.metadata,
        );
    }
    if options.parts.driver() {
        eprintln!(
            "bench: driver: {} runs ({} round(s) x {} jobs on each side, {} s each{})",
            runs.len(),
            options.rounds,
            JOBS.len(),
            options.time_s,
            if options.precondition { ", after writing both namespaces once" } else { ", no preconditioning" },
        );
    }
    if options.parts.zoned() {
        eprintln!("bench: zoned: {}", zoned::steps(&options.zoned).join(", "));
    }
    if options.parts.resilver() {
        let rounds = options.resilver.rounds;
        eprintln!("bench: resilver: fill, then {rounds} round(s) of: {}", resilver::ROUND_STEPS.join(", "));
    }
    if options.parts.pool() {
        eprintln!("bench: pool: {} round(s) of: {}", options.pool.rounds, pool::ROUND_STEPS.join(", "));
    }
    eprintln!(
        "bench: at most {} min {} s expected; the VM is killed after {} min {} s",
        estimate_s / 60,
        estimate_s % 60,
        timeout_s / 60,
        timeout_s % 60
    );
    let environment_host = host_environment();
    let source = source_tree();

    // The images in memory (tmpfs) when there is room for every byte the
    // jobs write: a guest flush then costs nothing on the host's shared
    // disk, on every side alike.
    remove_stale_images(Path::new(SHM));
    let needed = if options.parts.resilver() {
        3 * options.resilver.size + (1 << 30)
    } else if options.parts.pool() {
        5 * options.pool.size + (1 << 30)
    } else {
        2 * options.size_bytes + 3 * options.zoned.size + (1 << 30)
    };
    let shm = Path::new(SHM).join(format!("{SHM_PREFIX}{}", std::process::id()));
    let use_shm = free_bytes(SHM).is_some_and(|free| free >= needed) && std::fs::create_dir(&shm).is_ok();
    eprintln!(
        "bench: backing images {}",
        if use_shm {
            format!("in {} (tmpfs)", shm.display())
        } else {
            format!("in the rig's image directory ({SHM} lacks {} free)", format_size(needed))
        }
    );

    let monitor = Arc::new(LoadMonitor::new(runs.len()));
    let observer_runs = Arc::clone(&runs);
    let observer_monitor = Arc::clone(&monitor);
    let rounds = options.rounds;
    let mut vm = Vm::new();
    if use_shm {
        vm = vm.images(&shm);
    }
    vm = vm.smp(VCPUS).mem(MEM_BYTES);
    if options.parts.pool() {
        for _ in pool::PCIS {
            vm = vm.controller(Controller::nvme(options.pool.size));
        }
    } else if options.parts.resilver() {
        let r = &options.resilver;
        vm = vm
            .controller(Controller::zns(r.size, r.zone_bytes()))
            .controller(Controller::zns(r.size, r.zone_bytes()))
            .controller(Controller::nvme(r.size));
    } else {
        let zns = || Controller::zns(options.zoned.size, options.zoned.zone);
        vm = vm
            .controller(Controller::nvme(options.size_bytes))
            .controller(Controller::nvme(options.size_bytes).kernel())
            .controller(zns().metadata(options.zoned.metadata))
            .controller(zns().kernel())
            .controller(zns().kernel())
            .append(POLL_QUEUES_ARG)
            .kernel_module("btrfs")
            .host_program(FIO)
            .host_program(zoned::MKFS)
            .host_program(zoned::BTRFS);
    }
    let part = if options.parts.pool() {
        "pool"
    } else if options.parts.resilver() {
        "resilver"
    } else {
        "zoned"
    };
    let resilver_part = options.parts.resilver();
    let pool_part = options.parts.pool();
    let vm = vm.timeout(Duration::from_secs(timeout_s)).on_line(move |line| {
        if let Some(step) = line.strip_prefix("== ") {
            eprintln!("{} {part}: {step}", clock(started));
        } else if let Some(times) = line.strip_prefix("BTRFS-SCRUB-TIME ") {
            eprintln!("{} zoned: btrfs-scrub      done (uptime from-to: {times})", clock(started));
        } else if let Some((key, value)) = zoned::bench_line(line) {
            let describe = if pool_part {
                pool::describe
            } else if resilver_part {
                resilver::describe
            } else {
                zoned::describe
            };
            let text = value.map_or_else(|e| e, |v| describe(key, &v));
            eprintln!("{} {part}: {key:<16} {text}", clock(started));
        } else {
            progress(line, &observer_runs, rounds, started, &observer_monitor);
        }
    });
    eprintln!("{} building the guest tools and booting", clock(started));
    let mut script = if options.parts.resilver() || options.parts.pool() { String::new() } else { guest_script(&runs) };
    if options.parts.zoned() {
        script += &zoned::guest_script(&options.zoned);
    }
    if options.parts.resilver() {
        script += &resilver::guest_script(&options.resilver);
    }
    if options.parts.pool() {
        script += &pool::guest_script(&options.pool);
    }
    let outcome = vm.run(&["sh", "-c", &script]);
    if use_shm {
        let _ = std::fs::remove_dir_all(&shm);
    }
    let outcome = outcome.map_err(|e| (2, e.to_string()))?;
    if outcome.status != 0 {
        return Err((1, failure_report(&outcome.output, outcome.status, &runs, rounds)));
    }
    let mut environment_guest = serde_json::Map::new();
    for line in outcome.output.lines() {
        if let Line::Env(key, value) = classify(line) {
            environment_guest.insert(key.to_owned(), Value::from(value.trim()));
        }
    }
    let mut rows = Vec::new();
    let mut report = String::new();
    let mut report_json = serde_json::Map::new();
    if options.parts.driver() {
        if options.precondition {
            check_preconditioning(&runs, &outcome.output, options.size_bytes).map_err(|e| (1, e))?;
        }
        let results = collect_results(&runs, &outcome.output, &monitor).map_err(|e| (1, e))?;
        report += &render_tables(&results, options);
        report_json.insert("driver".into(), render_json(&results, &runs, options));
        rows.extend(driver_rows(&results));
    }
    let mut line_charts = Vec::new();
    if options.parts.zoned() {
        let results = zoned::collect(&outcome.output).map_err(|e| (1, e))?;
        let missing: Vec<&str> = zoned::steps(&options.zoned).into_iter().filter(|key| !results.has(key)).collect();
        if !missing.is_empty() {
            return Err((1, format!("the guest ended without results for {}", missing.join(", "))));
        }
        report += &results.render_steps(&options.zoned);
        report_json.insert(
            "zoned".into(),
            json!({
                "settings": {
                    "size_bytes": options.zoned.size,
                    "zone_bytes": options.zoned.zone,
                    "fill_percent": options.zoned.fill,
                    "btrfs_fill_percent": options.zoned.btrfs_fill,
                    "iodepth": options.zoned.iodepth,
                    "ablations": options.zoned.ablations,
                    "ours_metadata_bytes_per_lba": options.zoned.metadata,
                    "ours_checksums": options.zoned.checksums,
                    "script": zoned::guest_script(&options.zoned),
                },
                "details": results.details(&options.zoned),
                "steps": results.raw,
                "btrfs_scrub_output": results.btrfs_scrub_lines,
                "bandwidth_logs_mib_s": results.bw_logs,
            }),
        );
        rows.extend(results.rows(&options.zoned));
        line_charts = results.charts(&options.zoned);
    }
    if options.parts.resilver() {
        let r = &options.resilver;
        let results = resilver::collect(&outcome.output).map_err(|e| (1, e))?;
        let missing: Vec<String> = resilver::steps(r).into_iter().filter(|key| !results.has(key)).collect();
        if !missing.is_empty() {
            return Err((1, format!("the guest ended without results for {}", missing.join(", "))));
        }
        let steps = results.render_steps(r);
        if let Err(e) = results.check(r) {
            eprint!("{steps}");
            return Err((1, format!("the resilver misbehaved: {e}")));
        }
        report += &steps;
        report_json.insert(
            "resilver".into(),
            json!({
                "settings": {
                    "size_bytes": r.size,
                    "zone_bytes": r.zone_bytes(),
                    "fill_percent": r.fill,
                    "data_bytes": r.data_bytes(),
                    "rounds": r.rounds,
                    "queue_depth": resilver::QUEUE_DEPTH,
                    "pair_time_s": resilver::PAIR_TIME_S,
                    "script": resilver::guest_script(r),
                },
                "details": results.details(r),
                "steps": results.raw,
            }),
        );
        rows.extend(results.rows(r));
    }
    if options.parts.pool() {
        let p = &options.pool;
        let results = pool::collect(&outcome.output).map_err(|e| (1, e))?;
        let missing: Vec<String> = pool::steps(p).into_iter().filter(|key| !results.has(key)).collect();
        if !missing.is_empty() {
            return Err((1, format!("the guest ended without results for {}", missing.join(", "))));
        }
        let steps = results.render_steps(p);
        if let Err(e) = results.check(p) {
            eprint!("{steps}");
            return Err((1, format!("a rebuild misbehaved: {e}")));
        }
        report += &steps;
        report_json.insert(
            "pool".into(),
            json!({
                "settings": {
                    "size_bytes": p.size,
                    "hold_bytes": p.hold,
                    "scale_bytes": p.scale,
                    "data_bytes": p.data_bytes(),
                    "rounds": p.rounds,
                    "rebuild_queue_depth": pool::REBUILD_DEPTH,
                    "script": pool::guest_script(p),
                },
                "details": results.details(p),
                "steps": results.raw,
            }),
        );
        rows.extend(results.rows(p));
    }
    let runtime_s = started.elapsed().as_secs_f64();
    let environment = json!({
        "date": date,
        "source": source,
        "host": environment_host,
        "guest": {
            "vcpus": VCPUS,
            "mem_bytes": MEM_BYTES,
            "accel": "tcg",
            "machine": "q35, intel-iommu",
            "images": if use_shm { "tmpfs (/dev/shm)" } else { "the rig's image directory" },
            "details": environment_guest,
        },
    });
    let table = render_rows(&rows);
    let text = format!("{}{report}{table}", render_header(options, &environment));
    report_json.insert("command".into(), json!(invocation(std::env::args(), std::env::var("HACK_BENCH").ok())));
    report_json.insert("environment".into(), environment);
    report_json.insert("table".into(), rows.iter().map(Row::to_json).collect());
    report_json.insert("runtime_s".into(), json!(runtime_s));
    let json_text = serde_json::to_string_pretty(&Value::Object(report_json)).expect("a JSON value serializes");
    match options.json.as_deref() {
        Some("-") => {
            eprint!("{text}");
            out(&format!("{json_text}\n"));
        }
        Some(path) => {
            out(&text);
            std::fs::write(path, json_text + "\n").map_err(|e| (2, format!("{path}: {e}")))?;
            eprintln!("bench: wrote {path}");
        }
        None => out(&text),
    }
    if let Some(dir) = options.svg.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| (2, format!("{}: {e}", dir.display())))?;
    }
    std::fs::write(&options.svg, render_svg(&rows, line_charts))
        .map_err(|e| (2, format!("{}: {e}", options.svg.display())))?;
    eprintln!("bench: wrote the chart to {}", options.svg.display());
    eprintln!("bench: done in {} min {} s", started.elapsed().as_secs() / 60, started.elapsed().as_secs() % 60);
    Ok(())
}

/// Writes to stdout; a reader that went away (`hack/bench --help | head`)
/// is not an error worth a panic.
fn out(text: &str) {
    use std::io::Write as _;
    let _ = std::io::stdout().write_all(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(rounds: u32) -> Options {
        Options { rounds, ..parse_options(vec![]).unwrap().unwrap() }
    }

    #[test]
    fn options_default_and_quick() {
        let o = parse_options(vec![]).unwrap().unwrap();
        assert_eq!((o.rounds, o.time_s, o.size_bytes), (3, 10, 256 << 20));
        let o = parse_options(vec!["--quick".into()]).unwrap().unwrap();
        assert_eq!((o.rounds, o.time_s), (1, 2));
        let args = ["--time", "5", "--quick", "--rounds", "2"];
        let o = parse_options(args.map(String::from).to_vec()).unwrap().unwrap();
        assert_eq!((o.rounds, o.time_s), (2, 5));
        for bad in [
            &["--rounds", "0"][..],
            &["--time", "x"],
            &["--size", "1M"],
            &["--size", "3000k"],
            &["--bogus"],
            &["--time"],
        ] {
            assert!(parse_options(bad.iter().map(|s| s.to_string()).collect()).is_err(), "{bad:?}");
        }
        assert!(parse_options(vec!["--help".into()]).unwrap().is_none());
    }

    #[test]
    fn options_for_both_halves() {
        let parse = |args: &[&str]| parse_options(args.iter().map(|s| s.to_string()).collect());
        let o = parse(&[]).unwrap().unwrap();
        assert_eq!((o.parts, o.json.as_deref()), (Parts::Both, None));
        assert_eq!(o.zoned, zoned::Options::defaults(false));
        assert!(o.svg.ends_with("target/bench/bench.svg"));
        let o = parse(&["--json", "out.json", "--svg", "c.svg", "--only", "zoned", "--quick", "--fill", "90%"])
            .unwrap()
            .unwrap();
        assert_eq!((o.parts, o.json.as_deref(), o.svg.to_str()), (Parts::Zoned, Some("out.json"), Some("c.svg")));
        assert_eq!((o.zoned.size, o.zoned.zone, o.zoned.fill, o.zoned.ablations), (1 << 30, 16 << 20, 90.0, false));
        // Explicit zoned settings win over --quick.
        let o = parse(&["--quick", "--zoned-size", "2G", "--zone", "32M", "--iodepth", "4"]).unwrap().unwrap();
        assert_eq!((o.zoned.size, o.zoned.zone, o.zoned.iodepth, o.zoned.metadata), (2 << 30, 32 << 20, 4, 0));
        assert_eq!(parse(&["--zoned-metadata", "8"]).unwrap().unwrap().zoned.metadata, 8);
        assert!(parse(&["--zoned-metadata", "12"]).is_err());
        assert!(!parse(&["--no-ablations"]).unwrap().unwrap().zoned.ablations);
        // The resilver runs alone, its rounds those of --rounds.
        let o = parse(&["--only", "resilver", "--quick"]).unwrap().unwrap();
        assert!(o.parts.resilver() && !o.parts.driver() && !o.parts.zoned());
        assert_eq!(o.resilver, resilver::Options { size: 512 << 20, fill: 65.0, rounds: 1 });
        let o = parse(&["--resilver-size", "1G", "--resilver-fill", "50%", "--rounds", "5"]).unwrap().unwrap();
        assert_eq!(o.resilver, resilver::Options { size: 1 << 30, fill: 50.0, rounds: 5 });
        assert!(!o.parts.resilver(), "only when asked for");
        for bad in [
            &["--json"][..],
            &["--only", "both"],
            &["--fill", "0"],
            &["--zone", "48M"],
            &["--zoned-size", "64M"],
            &["--iodepth", "0"],
            &["--only", "rebuild"],
            &["--resilver-fill", "95"],
            &["--resilver-size", "100M"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_command_is_recorded_as_typed() {
        let args = || ["/w/target/debug/bench", "--json", "o.json"].map(String::from).into_iter();
        assert_eq!(invocation(args(), Some("hack/bench".into())), "hack/bench --json o.json");
        assert_eq!(invocation(args(), None), "/w/target/debug/bench --json o.json");
    }

    #[test]
    fn stale_image_directories_go_live_ones_stay() {
        let dir = std::env::temp_dir().join(format!("bench-stale-test-{}", std::process::id()));
        let live = dir.join(format!("{SHM_PREFIX}{}", std::process::id()));
        // Above any pid_max Linux allows (2^22).
        let dead = dir.join(format!("{SHM_PREFIX}999999999"));
        let other = dir.join("hack-bench-notapid");
        for d in [&live, &dead, &other] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(dead.join("nvme2.img"), b"x").unwrap();
        remove_stale_images(&dir);
        assert!(live.exists() && other.exists() && !dead.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rows_compare_and_judge() {
        let row = Row::new("j".into(), "o".into(), Some(300.0), "k".into(), Some(100.0), Unit::MibS);
        assert_eq!((row.ratio(), row.met()), (Some(3.0), None));
        assert_eq!(row.clone().target(2.0).met(), Some(true));
        assert_eq!(row.clone().target(4.0).target_text(), ">= 4x MISSED");
        let missing = Row { kernel: None, ..row.clone().target(2.0) };
        assert_eq!((missing.ratio(), missing.met(), missing.target_text()), (None, None, ">= 2x n/a".into()));
        let flat = Row::new("f".into(), "o".into(), Some(0.97), "k".into(), Some(0.5), Unit::Flatness).minimum(0.95);
        assert_eq!((flat.ratio(), flat.met()), (None, Some(true)));
        let formats = [(Unit::Depth, "QD 27.5"), (Unit::Seconds, "27.5 s"), (Unit::Bytes, "0.0 MiB")];
        for (unit, text) in formats {
            assert_eq!(unit.format(Some(27.5)), text);
        }
        let json = flat.to_json();
        assert_eq!(json["target"], json!({"ours_at_least": 0.95, "met": true}));
        assert_eq!(json["ratio"], Value::Null);

        let sample = |iops: f64| Sample { iops, mib_s: iops / 4.0, ..Sample::default() };
        let results = vec![
            JobResult {
                job: 1,
                sides: vec![
                    (Side::Ours, vec![sample(60000.0)]),
                    (Side::KernelIrq, vec![sample(10000.0)]),
                    (Side::KernelPolled, vec![sample(15000.0)]),
                ],
            },
            JobResult {
                job: 3,
                sides: vec![(Side::Ours, vec![sample(8000.0)]), (Side::KernelIrq, vec![sample(4000.0)])],
            },
        ];
        let rows = driver_rows(&results);
        assert_eq!(rows.len(), 3);
        assert_eq!((rows[0].ratio(), rows[0].target), (Some(6.0), None));
        assert_eq!((rows[1].ratio(), rows[1].met()), (Some(4.0), Some(true)));
        assert_eq!(rows[1].kernel_label, "fio, io_uring --hipri, polled");
        assert_eq!((rows[2].unit, rows[2].ours, rows[2].met()), (Unit::MibS, Some(2000.0), Some(true)));
        let table = render_rows(&rows);
        assert!(table.contains("Ours against the kernel") && !table.contains("our own baselines"), "{table}");
        assert!(table.contains("60000 IOPS     15000 IOPS  4.000x  >= 3x met"), "{table}");
        // With PRPs only measured too: a row against that baseline.
        let mut with_prps = results;
        with_prps[1].sides.push((Side::OursPrp, vec![sample(6400.0)]));
        let prp_rows = driver_rows(&with_prps);
        let prp = prp_rows.last().unwrap();
        assert_eq!((prp.job.as_str(), prp.baseline_ours), ("512 KiB sequential read, QD32, SGLs against PRPs", true));
        assert_eq!((prp.ratio(), prp.kernel_label.as_str()), (Some(1.25), "the same with --sgl never"));
        assert!(render_rows(&prp_rows).contains("our own baselines"));
        // With the floor measured: a row against it, held to 0.97.
        with_prps[1].sides.push((Side::Floor, vec![sample(8400.0)]));
        let floor_rows = driver_rows(&with_prps);
        let floor = floor_rows.last().unwrap();
        assert_eq!(
            (floor.job.as_str(), floor.baseline_ours),
            ("512 KiB sequential read, QD32, against the floor", true)
        );
        assert_eq!((floor.kernel_label.as_str(), floor.met()), ("the same with --engine raw", Some(false)));
        assert!((floor.ratio().unwrap() - 8000.0 / 8400.0).abs() < 1e-9);
        assert_eq!(floor.paired, Some(8000.0 / 8400.0), "one round: its own ratio");
        assert!(render_rows(&floor_rows).contains("paired"));
        // Three rounds: the ratio of medians and the median of the rounds'
        // ratios differ, and the target judges the paired one.
        let latency = |iops: f64, mean_us: f64| Sample { mean_us, ..sample(iops) };
        let three = JobResult {
            job: 0,
            sides: vec![
                (Side::Ours, vec![latency(100.0, 10.0), latency(90.0, 11.0), latency(300.0, 3.0)]),
                (Side::Floor, vec![latency(95.0, 9.0), latency(200.0, 5.0), latency(290.0, 3.5)]),
            ],
        };
        assert!((three.ratio(Side::Floor).unwrap() - 100.0 / 200.0).abs() < 1e-9);
        assert!((three.paired_ratio(Side::Floor).unwrap() - 300.0 / 290.0).abs() < 1e-9);
        assert_eq!(three.paired_latency_difference_us(Side::Floor), Some(1.0));
        let row = driver_rows(&[three]).pop().unwrap();
        assert_eq!((row.ratio().map(|r| r < 0.97), row.met()), (Some(true), Some(true)));
        assert_eq!(row.to_json()["paired_ratio"], json!(300.0 / 290.0));
        let svg = render_svg(&rows, vec![("t".into(), vec![("ours".into(), vec![(1.0, 100.0), (2.0, 110.0)])])]);
        assert_eq!(svg.matches("<svg").count(), 3, "{svg}");
        assert!(svg.contains("<polyline"));
    }

    #[test]
    fn plan_interleaves_and_rotates_sides() {
        let runs = plan(&options(3));
        // 2 preconditioning runs, then 4 + 4 + 4 + 4 runs per round (the
        // large transfers' third side is ours with PRPs only; the fourth
        // of each is the floor).
        assert_eq!(runs.len(), 2 + 3 * 16);
        assert!(runs[..2].iter().all(|r| r.job.is_none()));
        let first_sides = |round: u32, job: usize| -> Side {
            runs.iter().find(|r| r.round == round && r.job == Some(job)).unwrap().side
        };
        assert_eq!(first_sides(1, 0), Side::Ours);
        assert_eq!(first_sides(2, 0), Side::KernelIrq);
        assert_eq!(first_sides(3, 0), Side::KernelPolled);
        assert_eq!(first_sides(2, 2), Side::KernelIrq);
        assert_eq!(first_sides(3, 2), Side::OursPrp);
        for (index, job) in JOBS.iter().enumerate() {
            for side in job.sides() {
                let n = runs.iter().filter(|r| r.job == Some(index) && r.side == side).count();
                assert_eq!(n, 3, "{} {side:?}", job.name);
            }
        }
        // Ours and the floor back to back, the floor second in odd rounds
        // and first in even ones.
        for round in 1..=3 {
            for job in 0..JOBS.len() {
                let sides: Vec<Side> =
                    runs.iter().filter(|r| r.round == round && r.job == Some(job)).map(|r| r.side).collect();
                let ours = sides.iter().position(|&s| s == Side::Ours).unwrap();
                let floor = sides.iter().position(|&s| s == Side::Floor).unwrap();
                let expected = if round % 2 == 1 { ours + 1 } else { ours - 1 };
                assert_eq!(floor, expected, "round {round} job {job}: {sides:?}");
            }
        }
    }

    #[test]
    fn commands_match_the_documented_jobs() {
        let fio = fio_command(&JOBS[1], Side::KernelPolled, 10).join(" ");
        assert_eq!(
            fio,
            "fio --name=randread-4k-qd32-kernel_polled --filename=/dev/ctrl1n1 --direct=1 \
             --rw=randread --bs=4k --iodepth=32 --ioengine=io_uring --hipri --norandommap \
             --time_based --runtime=10 --lat_percentiles=1 --output-format=json"
        );
        let fio = fio_command(&JOBS[2], Side::KernelIrq, 10).join(" ");
        assert!(fio.contains("--direct=1 --rw=write --bs=256k --iodepth=1 --ioengine=libaio --time_based"), "{fio}");
        assert_eq!(
            perf_command("randread", "4k", 32, 10).join(" "),
            "perf --rw randread --bs 4k --qd 32 --time 10 --clock tsc --pci 0000:00:10.0 --json"
        );
        assert!(
            perf_command("write", "256k", 1, 10).join(" ").ends_with("--json --yes"),
            "a write job goes on unasked"
        );
    }

    #[test]
    fn guest_script_quotes_commands_and_tags_runs() {
        let runs = plan(&options(1));
        let script = guest_script(&runs);
        assert!(script.contains("\nrun r0 64 'perf' '--rw' 'write' '--bs' '256k' '--qd' '32'"));
        assert!(script.contains("\nrun r2 70 'perf' '--rw' 'randread' '--bs' '4k' '--qd' '1' '--time' '10'"));
        assert!(script.ends_with("echo bench-done\n"));
    }

    /// A shortened `fio --output-format=json --lat_percentiles=1` (fio 3.33).
    const FIO_WRITE: &str = r#"{"fio version":"fio-3.33","jobs":[{"jobname":"w","error":0,
        "read":{"io_bytes":0,"bw_bytes":0,"iops":0.0,"total_ios":0},
        "write":{"io_bytes":2027945984,"bw_bytes":675756742,"iops":2577.807398,"total_ios":7736,
          "lat_ns":{"min":166020,"max":11229910,"mean":370732.903309,
            "percentile":{"50.000000":272384,"99.000000":2113536,"99.900000":6389760}}}}]}"#;

    #[test]
    fn fio_results_parse() {
        let runs = plan(&options(1));
        let run =
            runs.iter().find(|r| r.job == Some(2) && r.side == Side::KernelIrq).expect("the 256k write's kernel run");
        let sample = parse_result(run, &format!("fio: note\n{FIO_WRITE}")).unwrap();
        assert_eq!(sample.iops, 2577.807398);
        assert!((sample.mib_s - 644.45).abs() < 0.01, "{}", sample.mib_s);
        assert_eq!(sample.mean_us, 370.732903309);
        assert_eq!((sample.p50_us, sample.p99_us, sample.p999_us), (272.384, 2113.536, 6389.76));
        assert_eq!(sample.bytes, 2027945984);
        // The same output is no result for a read job.
        let read_run = runs.iter().find(|r| r.job == Some(0) && r.side == Side::KernelIrq).unwrap();
        assert!(parse_result(read_run, FIO_WRITE).is_err());
    }

    #[test]
    fn perf_results_parse() {
        let text = r#"{"bs":4096,"errors":0,"ios":31613,"iops":10537.0,"mib_s":41.16,
            "lat_us":{"mean":94.9,"p50":75.775,"p99":270.335,"p999":3866.623}}"#;
        let run = &plan(&options(1))[2];
        let sample = parse_result(run, text).unwrap();
        assert_eq!(
            sample,
            Sample {
                iops: 10537.0,
                mib_s: 41.16,
                mean_us: 94.9,
                p50_us: 75.775,
                p99_us: 270.335,
                p999_us: 3866.623,
                bytes: 31613 * 4096,
                load: None,
            }
        );
        assert!(parse_result(run, &text.replace("\"errors\":0", "\"errors\":3")).is_err());
    }

    #[test]
    fn lines_are_classified() {
        assert_eq!(classify("bench-env io_poll 1"), Line::Env("io_poll", "1"));
        assert_eq!(classify("bench-result r12 {}"), Line::Result(12, "{}"));
        assert_eq!(classify("bench-failed r3 status 1"), Line::Failed("r3", "status 1"));
        assert_eq!(classify("bench-note r3 fio: hi"), Line::Note("r3", "fio: hi"));
        assert_eq!(classify("bench-done"), Line::Done);
        assert_eq!(classify("rig: ready"), Line::Other);
    }

    #[test]
    fn summaries_and_ratios() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        let sample = |iops: f64| Sample { iops, mib_s: iops / 256.0, ..Sample::default() };
        let result = JobResult {
            job: 0,
            sides: vec![
                (Side::Ours, vec![sample(9000.0), sample(10000.0), sample(12000.0)]),
                (Side::KernelIrq, vec![sample(2000.0), sample(2500.0), sample(1000.0)]),
                (Side::KernelPolled, vec![sample(4000.0)]),
            ],
        };
        let ours = result.summary(Side::Ours).unwrap();
        assert_eq!((ours.median.iops, ours.min.iops, ours.max.iops), (10000.0, 9000.0, 12000.0));
        assert_eq!(result.ratio(Side::KernelIrq), Some(5.0));
        assert_eq!(result.ratio(Side::KernelPolled), Some(2.5));
    }

    #[test]
    fn preconditioning_must_cover_the_region() {
        let runs = plan(&options(1));
        let short = r#"bench-result r0 {"bs":262144,"errors":0,"ios":10,"iops":1.0,"mib_s":1.0,"lat_us":{"mean":1,"p50":1,"p99":1,"p999":1}}"#;
        assert!(check_preconditioning(&runs, short, 256 << 20).is_err());
        let enough = short.replace("\"ios\":10", "\"ios\":1024");
        assert!(check_preconditioning(&runs, &enough, 256 << 20).is_ok());
    }

    #[test]
    fn failures_name_the_run_and_its_output() {
        let runs = plan(&options(1));
        // r2 is the first job's ours, r3 its floor, r4 its kernel side.
        let output = "bench-result r0 {}\nbench-note r4 fio: unrecognized option\n\
                      bench-note r2 other\nbench-failed r4 status 1\nsome stdout\n";
        let report = failure_report(output, 1, &runs, 1);
        assert!(report.starts_with("round 1/1 randread-4k-qd1"), "{report}");
        assert!(report.contains("kernel io_uring, irq failed with status 1"), "{report}");
        assert!(report.contains("stderr:\nfio: unrecognized option\nstdout:\nsome stdout"), "{report}");
        assert!(!report.contains("other"), "{report}");
        let report = failure_report("rig: ready\nsh: bad\n", 2, &runs, 1);
        assert!(report.contains("status 2") && report.ends_with("sh: bad"), "{report}");
    }

    #[test]
    fn host_load_comes_from_proc() {
        let stat = "cpu  100 5 50 800 10 3 2 40 0 0\ncpu0 50 2 25 400 5 1 1 20 0 0\n";
        assert_eq!(parse_cpu_line(stat), Some((1010, 200, 40)));
        assert_eq!(parse_cpu_line("cpu  1 2 3\n"), None);
        let qemu = "4242 (qemu-system-x86) S 4000 4242 4000 0 -1 4194560 9 0 0 0 1200 300 0 0 20 0 7 0";
        assert_eq!(parse_process_stat(qemu), Some((4000, 1500)));
        let odd_name = "7 (a) b (c)) R 1 7 7 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0";
        assert_eq!(parse_process_stat(odd_name), Some((1, 11)));

        let before = CpuTicks { total: 1000, busy: 500, steal: 0, ours: 400 };
        let quiet = CpuTicks { total: 2000, busy: 1130, steal: 10, ours: 1000 };
        let load = HostLoad::between(before, quiet).unwrap();
        assert!((load.other - 0.02).abs() < 1e-9 && (load.steal - 0.01).abs() < 1e-9, "{load:?}");
        assert!(!load.disturbed());
        let busy = CpuTicks { total: 2000, busy: 1400, steal: 10, ours: 1000 };
        assert!(HostLoad::between(before, busy).unwrap().disturbed());
        assert_eq!(HostLoad::between(before, before), None);
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(utc_date(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc_date(951_782_400), "2000-02-29 00:00 UTC");
        assert_eq!(utc_date(1_796_056_037), "2026-11-30 16:27 UTC");
    }
}

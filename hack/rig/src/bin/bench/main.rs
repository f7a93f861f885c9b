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
//! the same as JSON, and an SVG chart. See BENCHMARKS.md.

mod resilver;
mod scale;
mod zoned;

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
                  [--only driver|zoned|resilver|scale]
                  [--rounds N] [--time SECONDS] [--size SIZE] [--no-precondition]
                  [--zoned-size SIZE] [--zone SIZE] [--zoned-metadata BYTES] [--zoned-checksums KIND]
                  [--fill PERCENT] [--btrfs-fill PERCENT] [--iodepth N] [--no-ablations]
                  [--resilver-size SIZE] [--resilver-fill PERCENT]
                  [--scale-capacities LIST] [--scale-extents LIST]
                  [--scale-metadata BYTES] [--scale-checksums KIND] [--timeout SECONDS]

Boots ONE VM (QEMU TCG, q35, 2 vCPUs, 3 GiB) with five controllers, in
identical pairs, and runs our tools and the kernel's side by side in it
(with --only resilver: three controllers, and our tools alone).

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
ours is held to: at least 0.97 of it.

The allocator and the scrub (three ZNS controllers of --zoned-size with
--zone zones; ours, btrfs zoned, raw):

  ours / ours-qdN    seqwrite, 256 KiB at QD1 and QD N, FILL of the namespace
  ours-zc(-qd)       the same with --zero-copy: no copy into DMA memory
  ours-bare(-qd)     the same with --zero-copy --same-data: no per-write work
                     (data, checksums, copy), the allocator alone
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

impl Job {
    fn sides(&self) -> Vec<Side> {
        let mut sides = vec![Side::Ours, Side::KernelIrq];
        if self.polled {
            sides.push(Side::KernelPolled);
        }
        if self.prp_baseline {
            sides.push(Side::OursPrp);
        }
        sides.push(Side::Floor);
        sides
    }

    fn is_read(&self) -> bool {
        matches!(self.rw, "read" | "randread")
    }

    fn is_random(&self) -> bool {
        self.rw.starts_with("rand")
    }

    fn side_label(&self, side: Side) -> String {
        match side {
            Side::Ours => "ours (vfio-pci, polled)".into(),
            Side::KernelIrq => format!("kernel {}, irq", self.irq_engine),
            Side::KernelPolled => "kernel io_uring --hipri, polled".into(),
            Side::OursPrp => "ours, PRPs only (--sgl never)".into(),
            Side::Floor => "the floor (--engine raw)".into(),
        }
    }
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
    scale: scale::Options,
}

fn parse_options(args: Vec<String>) -> Result<Option<Options>, String> {
    let mut rounds = None;
    let mut time_s = None;
    let mut quick = false;
    let mut options = Options {
        rounds: 3,
        time_s: 10,
        size_bytes: 256 << 20,
        json: None,
        svg: vm_rig::workspace_root().join("target/bench/bench.svg"),
        precondition: true,
        timeout_s: None,
        parts: Parts::Both,
        zoned: zoned::Options::defaults(false),
        resilver: resilver::Options::defaults(false),
        scale: scale::Options::default(),
    };
    // Zoned settings given explicitly; --quick changes only the others.
    let mut zoned_size = None;
    let mut zone = None;
    let mut fill = None;
    let mut btrfs_fill = None;
    let mut iodepth = None;
    let mut zoned_metadata = None;
    let mut zoned_checksums = None;
    let mut no_ablations = false;
    let mut resilver_size = None;
    let mut resilver_fill = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value\n\n{USAGE}"));
        let size = |text: String, name: &str| parse_size(&text).map_err(|e| format!("{name}: {e}"));
        let percent = |text: String, name: &str| {
            text.trim_end_matches('%').parse::<f64>().map_err(|_| format!("{name}: {text:?} is not a percentage"))
        };
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--rounds" => rounds = Some(number(&value("--rounds")?, 1, ROUNDS_MAX.into())?),
            "--time" => time_s = Some(number(&value("--time")?, 1, RUN_TIME_MAX_S)?),
            "--quick" => quick = true,
            "--json" => options.json = Some(value("--json")?),
            "--svg" => options.svg = PathBuf::from(value("--svg")?),
            "--no-precondition" => options.precondition = false,
            "--size" => options.size_bytes = size(value("--size")?, "--size")?,
            "--timeout" => options.timeout_s = Some(number(&value("--timeout")?, 1, 7 * 86400)?),
            "--only" => {
                options.parts = match value("--only")?.as_str() {
                    "driver" => Parts::Driver,
                    "zoned" => Parts::Zoned,
                    "resilver" => Parts::Resilver,
                    "scale" => Parts::Scale,
                    other => return Err(format!("--only {other:?}: driver, zoned, resilver or scale")),
                }
            }
            "--zoned-size" => zoned_size = Some(size(value("--zoned-size")?, "--zoned-size")?),
            "--zone" => zone = Some(size(value("--zone")?, "--zone")?),
            "--zoned-metadata" => {
                let text = value("--zoned-metadata")?;
                zoned_metadata =
                    Some(text.parse().map_err(|_| format!("--zoned-metadata {text}: expected 0, 8, 16 or 64"))?);
            }
            "--zoned-checksums" => {
                let text = value("--zoned-checksums")?;
                zoned_checksums = Some(
                    ["auto", "area", "map", "tags"]
                        .into_iter()
                        .find(|&kind| kind == text)
                        .ok_or(format!("--zoned-checksums {text}: expected auto, area, map or tags"))?,
                );
            }
            "--fill" => fill = Some(percent(value("--fill")?, "--fill")?),
            "--btrfs-fill" => btrfs_fill = Some(percent(value("--btrfs-fill")?, "--btrfs-fill")?),
            "--iodepth" => iodepth = Some(number(&value("--iodepth")?, 1, 256)? as u32),
            "--no-ablations" => no_ablations = true,
            "--resilver-size" => resilver_size = Some(size(value("--resilver-size")?, "--resilver-size")?),
            "--resilver-fill" => resilver_fill = Some(percent(value("--resilver-fill")?, "--resilver-fill")?),
            "--scale-capacities" => options.scale.capacities = Some(value("--scale-capacities")?),
            "--scale-extents" => options.scale.extents = Some(value("--scale-extents")?),
            "--scale-metadata" => options.scale.metadata = Some(value("--scale-metadata")?),
            "--scale-checksums" => options.scale.checksums = Some(value("--scale-checksums")?),
            other => return Err(format!("unknown option {other:?}\n\n{USAGE}")),
        }
    }
    let (quick_rounds, quick_time_s) = if quick { (1, 2) } else { (3, 10) };
    options.rounds = rounds.map_or(quick_rounds, |r| r as u32);
    options.scale.quick = quick;
    options.time_s = time_s.unwrap_or(quick_time_s);
    // Every job's block size must tile the region; 512 KiB is the largest.
    let largest_bs_bytes = 512 << 10;
    if options.size_bytes < 4 * largest_bs_bytes || !options.size_bytes.is_multiple_of(largest_bs_bytes) {
        return Err(format!("--size {} must be a multiple of 512K and at least 2M", options.size_bytes));
    }
    let defaults = zoned::Options::defaults(quick);
    options.zoned = zoned::Options {
        size: zoned_size.unwrap_or(defaults.size),
        zone: zone.unwrap_or(defaults.zone),
        fill: fill.unwrap_or(defaults.fill),
        btrfs_fill: btrfs_fill.unwrap_or(defaults.btrfs_fill),
        iodepth: iodepth.unwrap_or(defaults.iodepth),
        ablations: defaults.ablations && !no_ablations,
        metadata: zoned_metadata.unwrap_or(defaults.metadata),
        checksums: zoned_checksums.unwrap_or(defaults.checksums),
    };
    options.zoned.validate()?;
    let defaults = resilver::Options::defaults(quick);
    options.resilver = resilver::Options {
        size: resilver_size.unwrap_or(defaults.size),
        fill: resilver_fill.unwrap_or(defaults.fill),
        rounds: options.rounds,
    };
    options.resilver.validate()?;
    Ok(Some(options))
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

impl Unit {
    fn key(self) -> &'static str {
        match self {
            Unit::Iops => "iops",
            Unit::MibS => "mib_s",
            Unit::Flatness => "flatness",
            Unit::Depth => "queue_depth",
            Unit::Seconds => "s",
            Unit::Bytes => "bytes",
        }
    }

    fn format(self, value: Option<f64>) -> String {
        match value {
            None => "-".into(),
            Some(v) => match self {
                Unit::Iops => format!("{v:.0} IOPS"),
                Unit::MibS => format!("{v:.1} MiB/s"),
                Unit::Flatness => format!("{v:.3}"),
                Unit::Depth => format!("QD {v:.1}"),
                Unit::Seconds => format!("{v:.1} s"),
                Unit::Bytes => format!("{:.1} MiB", v / f64::from(1 << 20)),
            },
        }
    }
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
}

impl Row {
    fn new(
        job: String,
        ours_label: String,
        ours: Option<f64>,
        kernel_label: String,
        kernel: Option<f64>,
        unit: Unit,
    ) -> Self {
        Row { job, ours_label, ours, kernel_label, kernel, unit, target: None, baseline_ours: false }
    }

    fn target(mut self, ratio: f64) -> Self {
        self.target = Some(Target::Ratio(ratio));
        self
    }

    fn minimum(mut self, value: f64) -> Self {
        self.target = Some(Target::Minimum(value));
        self
    }

    fn baseline_is_ours(mut self) -> Self {
        self.baseline_ours = true;
        self
    }

    /// Ours over the other side; flatness is compared by value, not ratio.
    fn ratio(&self) -> Option<f64> {
        match (self.unit, self.ours, self.kernel) {
            (Unit::Flatness, ..) => None,
            (_, Some(ours), Some(kernel)) if kernel > 0.0 => Some(ours / kernel),
            _ => None,
        }
    }

    fn met(&self) -> Option<bool> {
        match self.target? {
            Target::Ratio(at_least) => Some(self.ratio()? >= at_least),
            Target::Minimum(at_least) => Some(self.ours? >= at_least),
        }
    }

    fn target_text(&self) -> String {
        let verdict = match self.met() {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "n/a",
        };
        match self.target {
            None => String::new(),
            Some(Target::Ratio(r)) => format!(">= {r}x {verdict}"),
            Some(Target::Minimum(m)) => format!("ours >= {m} {verdict}"),
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "job": self.job,
            "unit": self.unit.key(),
            "ours": { "label": self.ours_label, "value": self.ours },
            "kernel": { "label": self.kernel_label, "value": self.kernel },
            "baseline": if self.baseline_ours { "ours" } else { "kernel" },
            "ratio": self.ratio(),
            "target": self.target.map(|t| match t {
                Target::Ratio(r) => json!({ "ratio_at_least": r, "met": self.met() }),
                Target::Minimum(m) => json!({ "ours_at_least": m, "met": self.met() }),
            }),
        })
    }
}

/// The driver's rows: our median against each kernel side's median, with
/// the targets of the queue-pair work.
fn driver_rows(results: &[JobResult]) -> Vec<Row> {
    let mut rows = Vec::new();
    for result in results {
        let job = &JOBS[result.job];
        let unit = match job.metric {
            Metric::Iops => Unit::Iops,
            Metric::MibS => Unit::MibS,
        };
        let median = |side| result.summary(side).map(|s| s.median.metric(job.metric));
        for side in job.sides().into_iter().filter(|s| !matches!(s, Side::Ours | Side::OursPrp | Side::Floor)) {
            let row = Row::new(
                job.title.to_owned(),
                format!("perf --rw {} --bs {} --qd {}", job.rw, job.bs, job.qd),
                median(Side::Ours),
                format!("fio, {}", job.side_label(side).trim_start_matches("kernel ")),
                median(side),
                unit,
            );
            rows.push(match (job.name, side) {
                ("randread-4k-qd32", Side::KernelPolled) => row.target(3.0),
                ("write-256k-qd1" | "read-512k-qd32", Side::KernelIrq) => row.target(2.0),
                _ => row,
            });
        }
        if job.prp_baseline && result.summary(Side::OursPrp).is_some() {
            rows.push(
                Row::new(
                    format!("{}, SGLs against PRPs", job.title),
                    format!("perf --rw {} --bs {} --qd {}", job.rw, job.bs, job.qd),
                    median(Side::Ours),
                    "the same with --sgl never".into(),
                    median(Side::OursPrp),
                    unit,
                )
                .baseline_is_ours(),
            );
        }
        if result.summary(Side::Floor).is_some() {
            rows.push(
                Row::new(
                    format!("{}, against the floor", job.title),
                    format!("perf --rw {} --bs {} --qd {}", job.rw, job.bs, job.qd),
                    median(Side::Ours),
                    "the same with --engine raw".into(),
                    median(Side::Floor),
                    unit,
                )
                .baseline_is_ours()
                .target(FLOOR_RATIO_MIN),
            );
        }
    }
    rows
}

/// What ours must reach of the floor, job by job.
const FLOOR_RATIO_MIN: f64 = 0.97;

/// The side-by-side table, kernel comparisons first.
fn render_rows(rows: &[Row]) -> String {
    let mut out = String::new();
    for (baseline_ours, heading) in
        [(false, "Ours against the kernel, one boot"), (true, "Ours against our own baselines")]
    {
        let section: Vec<&Row> = rows.iter().filter(|r| r.baseline_ours == baseline_ours).collect();
        if section.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\n{heading}\n");
        let _ = writeln!(
            out,
            "  {:<36} {:>14} {:>14} {:>7}  {:<17} compared with",
            "job",
            "ours",
            if baseline_ours { "baseline" } else { "kernel" },
            "ratio",
            "target",
        );
        for row in section {
            let _ = writeln!(
                out,
                "  {:<36} {:>14} {:>14} {:>7}  {:<17} {}",
                row.job,
                row.unit.format(row.ours),
                row.unit.format(row.kernel),
                ratio_text(row.ratio()),
                row.target_text(),
                row.kernel_label
            );
        }
    }
    out
}

/// The chart: ours and the other side per row (each row scaled to its own
/// larger value), then bandwidth over time of the write runs.
fn render_svg(rows: &[Row], line_charts: Vec<zoned::LineChart>) -> String {
    let bars: Vec<(String, Vec<f64>)> = rows
        .iter()
        .filter_map(|row| {
            let unit = match row.unit {
                Unit::Iops => "IOPS",
                Unit::MibS => "MiB/s",
                Unit::Flatness => "flatness",
                Unit::Depth => "mean queue depth",
                Unit::Seconds => "s",
                Unit::Bytes => "bytes",
            };
            let ratio = row.ratio().map_or(String::new(), |r| format!(": {}", ratio_text(Some(r))));
            let label = format!("{} ({unit}) vs {}{ratio}", row.job, row.kernel_label);
            Some((label, vec![row.ours?, row.kernel?]))
        })
        .collect();
    let mut charts =
        vec![svg::bar_chart("hack/bench: ours against the kernel, one VM boot", "", &["ours", "other side"], &bars)];
    for (title, lines) in line_charts {
        let series: Vec<svg::Series> = lines.into_iter().map(|(label, points)| svg::Series { label, points }).collect();
        charts.push(svg::line_chart(&title, "time (s)", "MiB/s", &series));
    }
    svg::stack(&charts)
}

fn number(text: &str, min: u64, max: u64) -> Result<u64, String> {
    text.parse()
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| format!("{text:?} is not a number in {min}..={max}"))
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

impl Run {
    fn tag(index: usize) -> String {
        format!("r{index}")
    }

    /// The guest kills a run still going this long after its start.
    fn limit_s(&self) -> u64 {
        self.time_s + RUN_LIMIT_SLACK_S
    }

    fn describe(&self, rounds: u32) -> String {
        match self.job {
            Some(job) => {
                format!("round {}/{rounds} {:<16} {}", self.round, JOBS[job].name, JOBS[job].side_label(self.side))
            }
            None if self.side == Side::Ours => "precondition ours (perf write)".into(),
            None => "precondition kernel (fio write)".into(),
        }
    }
}

/// Ours reads the TSC (`--clock tsc`), as on hardware with an invariant
/// TSC, where `auto` takes it: TCG does not advertise one, though its TSC
/// follows the host's, and the OS clock is a system call and an emulated
/// HPET read there.
fn perf_command(rw: &str, bs: &str, qd: u16, time_s: u64) -> Vec<String> {
    [
        "perf",
        "--rw",
        rw,
        "--bs",
        bs,
        "--qd",
        &qd.to_string(),
        "--time",
        &time_s.to_string(),
        "--clock",
        "tsc",
        "--pci",
        OURS_PCI,
        "--json",
    ]
    .map(str::to_owned)
    .to_vec()
}

fn fio_command(job: &Job, side: Side, time_s: u64) -> Vec<String> {
    let engine = match side {
        Side::KernelPolled => "io_uring",
        _ => job.irq_engine,
    };
    let mut command = vec![
        "fio".to_owned(),
        format!("--name={}-{}", job.name, side.key()),
        format!("--filename={KERNEL_DEVICE}"),
        "--direct=1".into(),
        format!("--rw={}", job.rw),
        format!("--bs={}", job.bs),
        format!("--iodepth={}", job.qd),
        format!("--ioengine={engine}"),
    ];
    if side == Side::KernelPolled {
        command.push("--hipri".into());
    }
    if job.is_random() {
        // Like perf: offsets drawn independently, not a shuffled pass.
        command.push("--norandommap".into());
    }
    command.extend([
        "--time_based".into(),
        format!("--runtime={time_s}"),
        // Percentiles of submission-to-completion latency, as perf reports.
        "--lat_percentiles=1".into(),
        "--output-format=json".into(),
    ]);
    command
}

/// Preconditioning (when asked for), then every round of every job on
/// every side; within a round the sides' order rotates by the round number.
fn plan(options: &Options) -> Vec<Run> {
    let mut runs = Vec::new();
    if options.precondition {
        let precondition_s = (options.size_bytes / (PRECONDITION_MIN_MIB_S << 20)).max(3);
        let bs = format!("{}k", PRECONDITION_BS_BYTES >> 10);
        runs.push(Run {
            round: 0,
            job: None,
            side: Side::Ours,
            command: {
                let mut command = perf_command("write", &bs, PRECONDITION_QD, precondition_s);
                command.extend(["--io-bytes".into(), options.size_bytes.to_string()]);
                command
            },
            time_s: precondition_s,
        });
        runs.push(Run {
            round: 0,
            job: None,
            side: Side::KernelIrq,
            command: vec![
                "fio".into(),
                "--name=precondition".into(),
                format!("--filename={KERNEL_DEVICE}"),
                "--direct=1".into(),
                "--rw=write".into(),
                format!("--bs={bs}"),
                format!("--iodepth={PRECONDITION_QD}"),
                "--ioengine=libaio".into(),
                // One whole pass over the device, not time-based.
                "--size=100%".into(),
                "--lat_percentiles=1".into(),
                "--output-format=json".into(),
            ],
            time_s: precondition_s,
        });
    }
    for round in 1..=options.rounds {
        for (index, job) in JOBS.iter().enumerate() {
            let mut sides = job.sides();
            let turn = (round as usize - 1) % sides.len();
            sides.rotate_left(turn);
            for side in sides {
                let command = match side {
                    Side::Ours => perf_command(job.rw, job.bs, job.qd, options.time_s),
                    Side::OursPrp => {
                        let mut command = perf_command(job.rw, job.bs, job.qd, options.time_s);
                        command.extend(["--sgl".into(), "never".into()]);
                        command
                    }
                    Side::Floor => {
                        let mut command = perf_command(job.rw, job.bs, job.qd, options.time_s);
                        command.extend(["--engine".into(), "raw".into()]);
                        command
                    }
                    _ => fio_command(job, side, options.time_s),
                };
                runs.push(Run { round, job: Some(index), side, command, time_s: options.time_s });
            }
        }
    }
    runs
}

/// The guest script: environment lines, then each run with its result on
/// one line (`bench-result TAG JSON`), stopping at the first failure
/// (`bench-failed TAG status N`, then the run's output).
fn guest_script(runs: &[Run]) -> String {
    let mut script = String::from(
        r#"set -u
dev=$(basename "$(readlink /dev/ctrl1n1)")
if [ -z "$dev" ] || [ ! -e "/sys/block/$dev" ]; then
    echo "bench-failed setup status 1"; echo "/dev/ctrl1n1 is missing"; exit 1
fi
echo "bench-env kernel $(uname -r)"
echo "bench-env fio $(fio --version 2>&1 | tr '\n' ' ')"
echo "bench-env device $dev"
echo "bench-env io_poll $(cat /sys/block/$dev/queue/io_poll)"
if [ "$(cat /sys/block/$dev/queue/io_poll)" != 1 ]; then
    echo "bench-failed setup status 1, /dev/ctrl1n1 has no poll queue: --hipri would not poll"
    exit 1
fi
echo "bench-env scheduler $(cat /sys/block/$dev/queue/scheduler)"
echo "bench-env cmdline $(cat /proc/cmdline)"
run() {
    tag=$1; limit=$2; shift 2
    timeout -k 10 "$limit" "$@" > /tmp/out 2> /tmp/err
    status=$?
    [ -s /tmp/err ] && sed "s/^/bench-note $tag /" /tmp/err
    if [ $status -ne 0 ]; then
        case $status in
            137|143) echo "bench-failed $tag status $status, killed at its $limit s limit" ;;
            *) echo "bench-failed $tag status $status" ;;
        esac
        cat /tmp/out
        exit 1
    fi
    echo "bench-result $tag $(tr -d '\n' < /tmp/out)"
}
"#,
    );
    for (index, run) in runs.iter().enumerate() {
        let words: Vec<String> = run.command.iter().map(|w| format!("'{}'", w.replace('\'', r"'\''"))).collect();
        let _ = writeln!(script, "run {} {} {}", Run::tag(index), run.limit_s(), words.join(" "));
    }
    script.push_str("echo bench-done\n");
    script
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

impl Sample {
    fn fields(&self) -> [f64; FIELDS] {
        [self.iops, self.mib_s, self.mean_us, self.p50_us, self.p99_us, self.p999_us]
    }

    fn from_fields(f: [f64; FIELDS]) -> Self {
        Sample {
            iops: f[0],
            mib_s: f[1],
            mean_us: f[2],
            p50_us: f[3],
            p99_us: f[4],
            p999_us: f[5],
            bytes: 0,
            load: None,
        }
    }

    fn metric(&self, metric: Metric) -> f64 {
        match metric {
            Metric::Iops => self.iops,
            Metric::MibS => self.mib_s,
        }
    }

    fn to_json(self) -> Value {
        let mut value = json!({
            "iops": self.iops,
            "mib_s": self.mib_s,
            "lat_us": {
                "mean": self.mean_us,
                "p50": self.p50_us,
                "p99": self.p99_us,
                "p999": self.p999_us,
            },
        });
        if let Some(load) = self.load {
            value["host_other_cpu"] = json!(load.other);
            value["host_steal"] = json!(load.steal);
            value["host_disturbed"] = json!(load.disturbed());
        }
        value
    }
}

fn field(value: &Value, path: &[&str]) -> Result<f64, String> {
    let mut at = value;
    for key in path {
        at = at.get(key).ok_or_else(|| format!("no {} in the output", path.join(".")))?;
    }
    at.as_f64().ok_or_else(|| format!("{} is not a number", path.join(".")))
}

/// `perf --json`: iops, mib_s, lat_us{mean,p50,p99,p999}, ios, bs, errors.
fn parse_perf(output: &Value) -> Result<Sample, String> {
    let errors = field(output, &["errors"])?;
    if errors != 0.0 {
        return Err(format!("perf reports {errors} failed I/Os"));
    }
    let ios = field(output, &["ios"])?;
    let bs = field(output, &["bs"])?;
    Ok(Sample {
        iops: field(output, &["iops"])?,
        mib_s: field(output, &["mib_s"])?,
        mean_us: field(output, &["lat_us", "mean"])?,
        p50_us: field(output, &["lat_us", "p50"])?,
        p99_us: field(output, &["lat_us", "p99"])?,
        p999_us: field(output, &["lat_us", "p999"])?,
        bytes: (ios * bs) as u64,
        load: None,
    })
}

/// fio `--output-format=json` of one job: the read or write side's IOPS,
/// bandwidth and total (submission to completion) latency in ns.
fn parse_fio(output: &Value, read: bool) -> Result<Sample, String> {
    let job = output.get("jobs").and_then(|jobs| jobs.get(0)).ok_or("no jobs[0] in fio's output")?;
    let error = field(job, &["error"])?;
    if error != 0.0 {
        return Err(format!("fio reports error {error}"));
    }
    let direction = if read { "read" } else { "write" };
    let side = job.get(direction).ok_or_else(|| format!("no {direction} section in fio's output"))?;
    if field(side, &["total_ios"])? == 0.0 {
        return Err(format!("fio completed no {direction}s"));
    }
    let us = |path: &[&str]| field(side, path).map(|ns| ns / 1000.0);
    Ok(Sample {
        iops: field(side, &["iops"])?,
        mib_s: field(side, &["bw_bytes"])? / f64::from(1 << 20),
        mean_us: us(&["lat_ns", "mean"])?,
        p50_us: us(&["lat_ns", "percentile", "50.000000"])?,
        p99_us: us(&["lat_ns", "percentile", "99.000000"])?,
        p999_us: us(&["lat_ns", "percentile", "99.900000"])?,
        bytes: field(side, &["io_bytes"])? as u64,
        load: None,
    })
}

/// A run's result from its `bench-result` line.
fn parse_result(run: &Run, json_text: &str) -> Result<Sample, String> {
    // fio may print notices before its JSON.
    let start = json_text.find('{').ok_or("the run printed no JSON object")?;
    let value: Value = serde_json::from_str(&json_text[start..])
        .map_err(|e| format!("unreadable JSON from {}: {e}", run.command[0]))?;
    match (run.side, run.job) {
        (Side::Ours | Side::OursPrp | Side::Floor, _) => parse_perf(&value),
        (_, Some(job)) => parse_fio(&value, JOBS[job].is_read()),
        (_, None) => parse_fio(&value, false),
    }
}

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

fn split_word(text: &str) -> (&str, &str) {
    text.split_once(' ').unwrap_or((text, ""))
}

fn classify(line: &str) -> Line<'_> {
    let split = split_word;
    if let Some(rest) = line.strip_prefix("bench-env ") {
        let (key, value) = split(rest);
        Line::Env(key, value)
    } else if let Some(rest) = line.strip_prefix("bench-result r") {
        let (index, json) = split(rest);
        index.parse().map_or(Line::Other, |i| Line::Result(i, json))
    } else if let Some(rest) = line.strip_prefix("bench-note ") {
        let (tag, text) = split(rest);
        Line::Note(tag, text)
    } else if let Some(rest) = line.strip_prefix("bench-failed ") {
        let (tag, text) = split(rest);
        Line::Failed(tag, text)
    } else if line == "bench-done" {
        Line::Done
    } else {
        Line::Other
    }
}

fn describe_tag(tag: &str, runs: &[Run], rounds: u32) -> String {
    tag.strip_prefix('r')
        .and_then(|i| i.parse::<usize>().ok())
        .and_then(|i| runs.get(i))
        .map_or_else(|| tag.to_owned(), |run| run.describe(rounds))
}

fn clock(started: Instant) -> String {
    let s = started.elapsed().as_secs();
    format!("[{:>2}:{:02}]", s / 60, s % 60)
}

/// Prints one progress line (to stderr) for a guest output line, and
/// samples the host's load at each run's end.
fn progress(line: &str, runs: &[Run], rounds: u32, started: Instant, monitor: &LoadMonitor) {
    match classify(line) {
        Line::Env(key, value) if key != "cmdline" => {
            eprintln!("{} guest {key}: {}", clock(started), value.trim())
        }
        // The runs start right after the last environment line.
        Line::Env(..) => monitor.restart(),
        Line::Result(index, json) => {
            let Some(run) = runs.get(index) else { return };
            let load = monitor.run_ended(index);
            let text = match parse_result(run, json) {
                Ok(s) if run.job.is_none() => format!("wrote {}", gib(s.bytes)),
                Ok(s) => format!(
                    "{:>9.0} IOPS {:>8.1} MiB/s  mean {:>7.1} us  p99 {:>8.1} us",
                    s.iops, s.mib_s, s.mean_us, s.p99_us
                ),
                Err(e) => format!("unreadable result: {e}"),
            };
            let warning = match load {
                Some(load) if load.disturbed() => format!(
                    "  [host busy elsewhere: {:.0}% other, {:.0}% steal]",
                    load.other * 100.0,
                    load.steal * 100.0
                ),
                _ => String::new(),
            };
            eprintln!(
                "{} {:>3}/{} {:<62} {text}{warning}",
                clock(started),
                index + 1,
                runs.len(),
                run.describe(rounds)
            );
        }
        Line::Note(tag, text) => {
            eprintln!("{}   note from {}: {text}", clock(started), describe_tag(tag, runs, rounds))
        }
        Line::Failed(tag, text) => {
            eprintln!("{} FAILED: {} with {text}", clock(started), describe_tag(tag, runs, rounds))
        }
        _ => {}
    }
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

impl CpuTicks {
    fn now() -> Option<Self> {
        let (total, busy, steal) = parse_cpu_line(&std::fs::read_to_string("/proc/stat").ok()?)?;
        let own_pid = std::process::id();
        let mut ours = process_ticks(own_pid).map_or(0, |(_, ticks)| ticks);
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if let Some((parent, ticks)) = process_ticks(pid) {
                if parent == own_pid {
                    ours += ticks;
                }
            }
        }
        Some(CpuTicks { total, busy, steal, ours })
    }
}

/// The total, busy and stolen ticks of `/proc/stat`'s first line:
/// `cpu user nice system idle iowait irq softirq steal guest guest_nice`
/// (guest time is already counted in user and nice).
fn parse_cpu_line(stat: &str) -> Option<(u64, u64, u64)> {
    let cpu: Vec<u64> =
        stat.lines().next()?.strip_prefix("cpu ")?.split_whitespace().map(|n| n.parse().ok()).collect::<Option<_>>()?;
    let [user, nice, system, idle, iowait, irq, softirq, steal, ..] = cpu[..] else {
        return None;
    };
    let busy = user + nice + system + irq + softirq + steal;
    Some((busy + idle + iowait, busy, steal))
}

fn process_ticks(pid: u32) -> Option<(u32, u64)> {
    parse_process_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// A process's parent and its user plus system ticks, from `/proc/PID/stat`:
/// `pid (comm) state ppid ... utime stime ...`, utime and stime being the
/// 14th and 15th fields. The command name may hold spaces and parentheses,
/// so the fields are counted from its last `)`.
fn parse_process_stat(stat: &str) -> Option<(u32, u64)> {
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let parent = fields.get(1)?.parse().ok()?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((parent, utime + stime))
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

impl HostLoad {
    /// A run whose neighbours took more than this share is flagged.
    const DISTURBED: f64 = 0.05;

    fn between(before: CpuTicks, after: CpuTicks) -> Option<Self> {
        let total = after.total.checked_sub(before.total).filter(|t| *t > 0)? as f64;
        let busy = after.busy.saturating_sub(before.busy);
        let steal = after.steal.saturating_sub(before.steal);
        let ours = after.ours.saturating_sub(before.ours);
        let other = busy.saturating_sub(steal).saturating_sub(ours);
        Some(HostLoad { other: other as f64 / total, steal: steal as f64 / total })
    }

    fn disturbed(self) -> bool {
        self.other + self.steal > Self::DISTURBED
    }
}

/// Samples the host's CPU ticks at each run's end, so each run (from the
/// previous run's end) gets its [`HostLoad`]; shared between the output
/// observer and the report.
#[derive(Debug, Default)]
struct LoadMonitor {
    last: Mutex<Option<CpuTicks>>,
    loads: Mutex<Vec<Option<HostLoad>>>,
}

impl LoadMonitor {
    fn new(runs: usize) -> Self {
        LoadMonitor { last: Mutex::new(CpuTicks::now()), loads: Mutex::new(vec![None; runs]) }
    }

    /// Starts the interval of the first run.
    fn restart(&self) {
        *self.last.lock().expect("no panics while locked") = CpuTicks::now();
    }

    /// Ends run `index`'s interval and starts the next one's.
    fn run_ended(&self, index: usize) -> Option<HostLoad> {
        let now = CpuTicks::now()?;
        let before = self.last.lock().expect("no panics while locked").replace(now)?;
        let load = HostLoad::between(before, now)?;
        if let Some(slot) = self.loads.lock().expect("no panics while locked").get_mut(index) {
            *slot = Some(load);
        }
        Some(load)
    }

    fn load(&self, index: usize) -> Option<HostLoad> {
        self.loads.lock().expect("no panics while locked").get(index).copied().flatten()
    }
}

/// Median, minimum and maximum of each field over the rounds.
#[derive(Clone, Copy, Debug)]
struct Summary {
    median: Sample,
    min: Sample,
    max: Sample,
}

fn median(values: &mut [f64]) -> f64 {
    assert!(!values.is_empty(), "a median of nothing");
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

fn summarize(samples: &[Sample]) -> Summary {
    let mut median_fields = [0.0; FIELDS];
    let mut min_fields = [0.0; FIELDS];
    let mut max_fields = [0.0; FIELDS];
    for index in 0..FIELDS {
        let mut values: Vec<f64> = samples.iter().map(|s| s.fields()[index]).collect();
        median_fields[index] = median(&mut values);
        min_fields[index] = values[0];
        max_fields[index] = values[values.len() - 1];
    }
    Summary {
        median: Sample::from_fields(median_fields),
        min: Sample::from_fields(min_fields),
        max: Sample::from_fields(max_fields),
    }
}

/// One job's results: each side's samples in round order.
#[derive(Debug)]
struct JobResult {
    job: usize,
    sides: Vec<(Side, Vec<Sample>)>,
}

impl JobResult {
    fn summary(&self, side: Side) -> Option<Summary> {
        self.sides.iter().find(|(s, _)| *s == side).map(|(_, samples)| summarize(samples))
    }

    /// Our median over the kernel side's median, in the job's metric.
    fn ratio(&self, kernel: Side) -> Option<f64> {
        let metric = JOBS[self.job].metric;
        let ours = self.summary(Side::Ours)?.median.metric(metric);
        let theirs = self.summary(kernel)?.median.metric(metric);
        (theirs > 0.0).then(|| ours / theirs)
    }
}

fn collect_results(runs: &[Run], output: &str, monitor: &LoadMonitor) -> Result<Vec<JobResult>, String> {
    let mut samples: Vec<Option<Sample>> = vec![None; runs.len()];
    for line in output.lines() {
        if let Line::Result(index, json) = classify(line) {
            let run = runs.get(index).ok_or_else(|| format!("a result for unknown run {index}"))?;
            let sample = parse_result(run, json).map_err(|e| format!("{}: {e}", run.describe(0)))?;
            samples[index] = Some(Sample { load: monitor.load(index), ..sample });
        }
    }
    let mut results: Vec<JobResult> = (0..JOBS.len())
        .map(|job| JobResult { job, sides: JOBS[job].sides().into_iter().map(|s| (s, Vec::new())).collect() })
        .collect();
    for (run, sample) in runs.iter().zip(samples) {
        let sample = sample.ok_or_else(|| format!("no result for {}", run.describe(0)))?;
        let Some(job) = run.job else {
            continue;
        };
        let side =
            results[job].sides.iter_mut().find(|(s, _)| *s == run.side).expect("plan() runs only a job's own sides");
        side.1.push(sample);
    }
    Ok(results)
}

/// Checks that preconditioning wrote at least the whole region on each side.
fn check_preconditioning(runs: &[Run], output: &str, size_bytes: u64) -> Result<(), String> {
    for line in output.lines() {
        if let Line::Result(index, json) = classify(line) {
            let Some(run) = runs.get(index).filter(|r| r.job.is_none()) else {
                continue;
            };
            let sample = parse_result(run, json)?;
            if sample.bytes < size_bytes {
                return Err(format!(
                    "{} wrote {} of the {} region; it must cover all of it",
                    run.describe(0),
                    gib(sample.bytes),
                    gib(size_bytes)
                ));
            }
        }
    }
    Ok(())
}

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / f64::from(1 << 30))
}

fn format_count(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

fn range(min: f64, max: f64) -> String {
    format!("{}-{}", format_count(min), format_count(max))
}

fn ratio_text(ratio: Option<f64>) -> String {
    // Three decimals below 10, so that a ratio just under a target does not
    // print as the target.
    ratio.map_or_else(|| "-".into(), |r| if r < 10.0 { format!("{r:.3}x") } else { format!("{r:.2}x") })
}

/// Date, settings, host, guest and source lines above the tables.
fn render_header(options: &Options, environment: &Value) -> String {
    let text = |value: &Value| value.as_str().unwrap_or("unknown").to_owned();
    let (host, guest, source) = (&environment["host"], &environment["guest"]["details"], &environment["source"]);
    let modified = source["modified"].as_array().map_or(0, Vec::len);
    let mut out = String::new();
    let _ = writeln!(out, "hack/bench, {}", text(&environment["date"]));
    if options.parts.driver() {
        let _ = writeln!(
            out,
            "driver: {} round(s) of {} s per run on {} conventional namespaces; {}",
            options.rounds,
            options.time_s,
            format_size(options.size_bytes),
            if options.precondition { "both written once first" } else { "not preconditioned" }
        );
    }
    if options.parts.zoned() {
        let z = &options.zoned;
        let _ = writeln!(
            out,
            "zoned: {} ZNS namespaces of {} zones; seqwrite and raw-zbd write {:.0}%, btrfs {:.0}%; {}",
            format_size(z.size),
            format_size(z.zone),
            z.fill,
            z.btrfs_fill,
            if z.ablations { "with the ablations" } else { "no ablations" }
        );
    }
    if options.parts.resilver() {
        let r = &options.resilver;
        let _ = writeln!(
            out,
            "resilver: {} round(s); two ZNS members of {} ({} zones) and a conventional spare; the mirror holds {}",
            r.rounds,
            format_size(r.size),
            format_size(r.zone_bytes()),
            resilver::mib(r.data_bytes())
        );
    }
    let _ = writeln!(
        out,
        "host: {}, {} cores, {}; guest: {}{}",
        text(&host["cpu"]),
        host["cores"],
        text(&host["qemu"]),
        text(&guest["kernel"]),
        // The resilver's guest runs no fio.
        guest.get("fio").map_or(String::new(), |fio| format!(", {}", text(fio)))
    );
    let _ = writeln!(
        out,
        "source: commit {}{}",
        text(&source["commit"]),
        if modified > 0 {
            format!(" with {modified} modified file(s) under driver/, examples/, hack/")
        } else {
            String::new()
        }
    );
    out
}

fn render_tables(results: &[JobResult], options: &Options) -> String {
    let mut out = String::new();
    for result in results {
        let job = &JOBS[result.job];
        let _ = writeln!(
            out,
            "\n{} ({}): median of {} round(s) of {} s, (min-max)",
            job.title, job.name, options.rounds, options.time_s
        );
        let _ = writeln!(
            out,
            "  {:<32} {:>8} {:>15} {:>8} {:>13} {:>9} {:>9} {:>9} {:>7}",
            "side", "IOPS", "(min-max)", "MiB/s", "(min-max)", "mean us", "p50 us", "p99 us", "busy*"
        );
        for (side, samples) in &result.sides {
            let s = result.summary(*side).expect("listed side");
            let disturbed = samples.iter().filter(|s| s.load.is_some_and(HostLoad::disturbed)).count();
            let _ = writeln!(
                out,
                "  {:<32} {:>8} {:>15} {:>8} {:>13} {:>9.1} {:>9.1} {:>9.1} {:>7}",
                job.side_label(*side),
                format_count(s.median.iops),
                format!("({})", range(s.min.iops, s.max.iops)),
                format_count(s.median.mib_s),
                format!("({})", range(s.min.mib_s, s.max.mib_s)),
                s.median.mean_us,
                s.median.p50_us,
                s.median.p99_us,
                format!("{disturbed}/{}", samples.len())
            );
        }
        let metric = match job.metric {
            Metric::Iops => "IOPS",
            Metric::MibS => "MiB/s",
        };
        let _ = writeln!(
            out,
            "  ours/kernel irq: {}   ours/kernel polled: {}   ours/PRPs only: {}   ours/floor: {}   ({metric}, \
             medians)",
            ratio_text(result.ratio(Side::KernelIrq)),
            ratio_text(result.ratio(Side::KernelPolled)),
            ratio_text(result.ratio(Side::OursPrp)),
            ratio_text(result.ratio(Side::Floor))
        );
    }
    let _ = writeln!(
        out,
        "\n* busy: rounds in which other host processes or the hypervisor took more than {:.0}% of the \
         host's CPU time",
        HostLoad::DISTURBED * 100.0
    );
    out
}

/// The driver half as JSON: settings, and every job's sides with their
/// medians, ranges, rounds and commands.
fn render_json(results: &[JobResult], runs: &[Run], options: &Options) -> Value {
    let jobs: Vec<Value> = results
        .iter()
        .map(|result| {
            let job = &JOBS[result.job];
            let sides: Vec<Value> = result
                .sides
                .iter()
                .map(|(side, samples)| {
                    let summary = result.summary(*side).expect("listed side");
                    let command = runs
                        .iter()
                        .find(|r| r.job == Some(result.job) && r.side == *side)
                        .map(|r| r.command.join(" "))
                        .unwrap_or_default();
                    json!({
                        "side": side.key(),
                        "label": job.side_label(*side),
                        "command": command,
                        "median": summary.median.to_json(),
                        "min": summary.min.to_json(),
                        "max": summary.max.to_json(),
                        "rounds": samples.iter().map(|s| s.to_json()).collect::<Vec<_>>(),
                    })
                })
                .collect();
            json!({
                "name": job.name,
                "title": job.title,
                "metric": match job.metric { Metric::Iops => "iops", Metric::MibS => "mib_s" },
                "sides": sides,
                "ratio_ours_kernel_irq": result.ratio(Side::KernelIrq),
                "ratio_ours_kernel_polled": result.ratio(Side::KernelPolled),
                "ratio_ours_prp_only": result.ratio(Side::OursPrp),
                "ratio_ours_floor": result.ratio(Side::Floor),
            })
        })
        .collect();
    let precondition: Vec<String> = runs.iter().filter(|r| r.job.is_none()).map(|r| r.command.join(" ")).collect();
    json!({
        "settings": {
            "rounds": options.rounds,
            "time_s": options.time_s,
            "size_bytes": options.size_bytes,
            "precondition": precondition,
        },
        "jobs": jobs,
    })
}

/// `YYYY-MM-DD HH:MM UTC` for a Unix time: days since 1970-01-01 to a
/// proleptic Gregorian date, counting in 400-year eras that start on
/// 1 March so that leap days fall at the end of a year.
fn utc_date(unix_s: u64) -> String {
    let days = (unix_s / 86400) as i64;
    let seconds_of_day = unix_s % 86400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02} UTC", seconds_of_day / 3600, seconds_of_day % 3600 / 60)
}

/// The commit the tools were built from, and the files under `driver/`,
/// `examples/` and `hack/` that differ from it (results of a modified tree
/// cannot be reproduced from the commit alone).
fn source_tree() -> Value {
    let root = vm_rig::workspace_root();
    let git = |args: &[&str]| {
        host_command(Command::new("git").arg("-C").arg(&root).args(args), GIT_TIMEOUT)
            .ok()
            .filter(|out| out.status.success())
            .map(|out| out.stdout)
    };
    let commit = git(&["rev-parse", "HEAD"]).map(|s| s.trim().to_owned());
    let modified: Vec<String> = git(&["status", "--porcelain", "--", "driver", "examples", "hack"])
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.get(3..).map(str::to_owned))
        .collect();
    json!({ "commit": commit, "modified": modified })
}

/// What the host is: QEMU's version, CPU model and count, kernel.
fn host_environment() -> Value {
    let qemu = host_command(Command::new("qemu-system-x86_64").arg("--version"), QEMU_VERSION_TIMEOUT)
        .map(|out| out.stdout.lines().next().unwrap_or_default().to_owned())
        .unwrap_or_else(|e| format!("unknown ({e})"));
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown", |(_, model)| model.trim());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    json!({
        "qemu": qemu,
        "cpu": cpu,
        "cores": cores,
        "kernel": kernel.trim(),
    })
}

/// What failed, from the guest's output: the failed run with its stderr
/// (its `bench-note` lines) and stdout, or the output's last lines when the
/// script itself failed.
fn failure_report(output: &str, status: i32, runs: &[Run], rounds: u32) -> String {
    const TAIL_LINES: usize = 60;
    let lines: Vec<&str> = output.lines().collect();
    let failed = lines.iter().enumerate().find_map(|(at, line)| match classify(line) {
        Line::Failed(tag, text) => Some((at, tag, text)),
        _ => None,
    });
    let Some((at, tag, text)) = failed else {
        let tail = &lines[lines.len().saturating_sub(TAIL_LINES)..];
        return format!("the guest script exited with status {status}; its output ends with:\n{}", tail.join("\n"));
    };
    let stderr: Vec<&str> = lines[..at]
        .iter()
        .filter_map(|line| match classify(line) {
            Line::Note(note_tag, note) if note_tag == tag => Some(note),
            _ => None,
        })
        .collect();
    let stdout = &lines[at + 1..(at + 1 + TAIL_LINES).min(lines.len())];
    format!(
        "{} failed with {text}\nstderr:\n{}\nstdout:\n{}",
        describe_tag(tag, runs, rounds),
        stderr.join("\n"),
        stdout.join("\n")
    )
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
    let estimate_s = BOOT_ALLOWANCE_S + driver_s + zoned_s + resilver_s;
    let timeout_s = options.timeout_s.unwrap_or(2 * estimate_s);
    let size = format_size(options.size_bytes);
    let zoned_size = format_size(options.zoned.size);
    let resilver_size = format_size(options.resilver.size);
    if options.parts.resilver() {
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
    if options.parts.resilver() {
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
    let part = if options.parts.resilver() { "resilver" } else { "zoned" };
    let resilver_part = options.parts.resilver();
    let vm = vm.timeout(Duration::from_secs(timeout_s)).on_line(move |line| {
        if let Some(step) = line.strip_prefix("== ") {
            eprintln!("{} {part}: {step}", clock(started));
        } else if let Some(times) = line.strip_prefix("BTRFS-SCRUB-TIME ") {
            eprintln!("{} zoned: btrfs-scrub      done (uptime from-to: {times})", clock(started));
        } else if let Some((key, value)) = zoned::bench_line(line) {
            let describe = if resilver_part { resilver::describe } else { zoned::describe };
            let text = value.map_or_else(|e| e, |v| describe(key, &v));
            eprintln!("{} {part}: {key:<16} {text}", clock(started));
        } else {
            progress(line, &observer_runs, rounds, started, &observer_monitor);
        }
    });
    eprintln!("{} building the guest tools and booting", clock(started));
    let mut script = if options.parts.resilver() { String::new() } else { guest_script(&runs) };
    if options.parts.zoned() {
        script += &zoned::guest_script(&options.zoned);
    }
    if options.parts.resilver() {
        script += &resilver::guest_script(&options.resilver);
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

/// The command line as typed: `hack/bench` (which the wrapper passes in
/// `HACK_BENCH`) in place of the binary it execs.
fn invocation(mut args: impl Iterator<Item = String>, wrapper: Option<String>) -> String {
    let program = args.next().unwrap_or_default();
    std::iter::once(wrapper.unwrap_or(program)).chain(args).collect::<Vec<_>>().join(" ")
}

/// Where the images go when there is room, and their directories' prefix
/// (the process ID follows).
const SHM: &str = "/dev/shm";
const SHM_PREFIX: &str = "hack-bench-";

/// Removes image directories left in `dir` by runs that were killed before
/// they could (their process is gone); tmpfs holds them in memory.
fn remove_stale_images(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(SHM_PREFIX)).and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            eprintln!("bench: removing {}, left by an earlier run that was killed", entry.path().display());
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Bytes free to an unprivileged user on the file system holding `path`.
fn free_bytes(path: &str) -> Option<u64> {
    let path = std::ffi::CString::new(path).ok()?;
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string and `stat` a writable
    // statvfs, both alive for the call.
    let status = unsafe { libc::statvfs(path.as_ptr(), &mut stat) };
    (status == 0).then(|| stat.f_bavail * stat.f_frsize)
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
        let run = &plan(&options(1))[2 + 8 + 1];
        assert_eq!((run.job, run.side), (Some(2), Side::KernelIrq), "the 256k write's kernel run");
        let sample = parse_result(run, &format!("fio: note\n{FIO_WRITE}")).unwrap();
        assert_eq!(sample.iops, 2577.807398);
        assert!((sample.mib_s - 644.45).abs() < 0.01, "{}", sample.mib_s);
        assert_eq!(sample.mean_us, 370.732903309);
        assert_eq!((sample.p50_us, sample.p99_us, sample.p999_us), (272.384, 2113.536, 6389.76));
        assert_eq!(sample.bytes, 2027945984);
        // The same output is no result for a read job.
        let read_run = &plan(&options(1))[2 + 1];
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
        let output = "bench-result r0 {}\nbench-note r3 fio: unrecognized option\n\
                      bench-note r2 other\nbench-failed r3 status 1\nsome stdout\n";
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

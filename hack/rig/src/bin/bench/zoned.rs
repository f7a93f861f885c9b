//! The zoned half of `hack/bench`: sequential writes through our zoned
//! allocator next to btrfs in zoned mode and to raw fio, and our scrub next
//! to `btrfs scrub`, on identical ZNS controllers in the same VM boot as the
//! driver's jobs.
//!
//! Three ZNS controllers: the first is ours (vfio-pci: `seqwrite`, `scrub`,
//! `perf`); the second carries a zoned btrfs on the guest kernel's nvme
//! driver, written by the seed's fio job; the third is written raw by fio
//! with `--zonemode=zbd` (no file system, no checksums), the ceiling of the
//! kernel path, and read by fio for the scrub's kernel baseline. Every
//! write job writes 256 KiB blocks sequentially, at queue depth 1 as the
//! seed's job does, and again at `--iodepth`. Ours writes the largest share
//! of its namespace (`--fill`, default 90%: a single-namespace volume keeps
//! two metadata copies, four of the 64 zones); btrfs writes what a zoned
//! btrfs of that size holds comfortably (`--btrfs-fill`, default 70%: its metadata
//! and system block groups take zones of their own).
//!
//! Guest protocol, one line each: `== KEY` (to stderr) when a step starts;
//! `BENCH KEY JSON` with a tool's JSON output; `BWLOG KEY LINE` for each
//! line of a bandwidth log; `BTRFS-SCRUB LINE` and `BTRFS-SCRUB-TIME T0 T1`
//! for btrfs scrub's report and wall time; `bench-failed KEY status N`
//! followed by the step's output when a step fails (the script then ends).

use super::{Row, Unit};
use nvme_report::series::{flatness, steady};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Our ZNS controller's function (controller 2 of the VM).
pub const OURS_PCI: &str = "0000:00:12.0";
/// The namespace that carries btrfs (controller 3).
pub const BTRFS_DEVICE: &str = "/dev/ctrl3n1";
/// The namespace fio writes raw and reads (controller 4).
pub const RAW_DEVICE: &str = "/dev/ctrl4n1";
pub const MKFS: &str = "/usr/sbin/mkfs.btrfs";
pub const BTRFS: &str = "/usr/bin/btrfs";
const FIO: &str = "/usr/bin/fio";
/// Block size of every write job, as in the seed's fio job.
const BS_BYTES: u64 = 256 << 10;
/// The slowest write rate a step is allowed before it is killed as hung:
/// far below anything measured here (the slowest, btrfs at QD1 with its
/// checksums, was above 90 MiB/s).
const SLOWEST_MIB_S: u64 = 8;
/// Each step's allowance for its start-up (mkfs, controller bring-up,
/// volume format, fio loading its libraries under TCG).
const STEP_OVERHEAD_S: u64 = 60;

/// What the zoned half runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Each ZNS namespace, in bytes.
    pub size: u64,
    /// Zone size (= capacity), in bytes.
    pub zone: u64,
    /// Share of the namespace ours and raw-zbd write, in percent.
    pub fill: f64,
    /// Share btrfs writes, in percent.
    pub btrfs_fill: f64,
    /// Queue depth of the second write runs (ours-qdN, btrfs-qdN).
    pub iodepth: u32,
    /// The ablations: checksums inline, hardware crc32c, scrub at QD1.
    pub ablations: bool,
    /// Per-LBA metadata of ours' namespace (`nvme-ns ms=`): 0 (the
    /// default) leaves it without, like the kernel's (whose driver cannot
    /// use metadata without protection information), and the volume keeps
    /// its checksums in zone checksum areas; 8 formats it 4096+8-style and
    /// the volume keeps them in block tags (which QEMU makes slow: see
    /// docs/benchmarks/allocator.md, format 7).
    pub metadata: u16,
    /// Where the volumes seqwrite formats keep their checksums
    /// (`seqwrite --checksums`): auto, area, map or tags.
    pub checksums: &'static str,
}

impl Options {
    pub fn defaults(quick: bool) -> Self {
        if quick {
            Options {
                size: 1 << 30,
                zone: 16 << 20,
                fill: 90.0,
                btrfs_fill: 70.0,
                iodepth: 8,
                ablations: false,
                metadata: 0,
                checksums: "auto",
            }
        } else {
            Options {
                size: 4 << 30,
                zone: 64 << 20,
                fill: 90.0,
                btrfs_fill: 70.0,
                iodepth: 8,
                ablations: true,
                metadata: 0,
                checksums: "auto",
            }
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(1.0..=100.0).contains(&self.fill) || !(1.0..=100.0).contains(&self.btrfs_fill) {
            return Err("--fill and --btrfs-fill are percentages (1 to 100)".into());
        }
        if self.zone < (1 << 20) || !self.size.is_multiple_of(self.zone) || self.size / self.zone < 16 {
            return Err("--zoned-size must be a multiple of --zone, of at least 16 zones of at least 1M".into());
        }
        if !(1..=256).contains(&self.iodepth) {
            return Err("--iodepth is 1 to 256".into());
        }
        if ![0, 8, 16, 64].contains(&self.metadata) {
            return Err("--zoned-metadata is 0, 8, 16 or 64".into());
        }
        Ok(())
    }

    /// Bytes ours and raw-zbd write.
    pub fn ours_bytes(&self) -> u64 {
        share(self.size, self.fill)
    }

    /// Bytes btrfs writes, and the scrub jobs' data.
    pub fn btrfs_bytes(&self) -> u64 {
        share(self.size, self.btrfs_fill)
    }

    /// A step writing or reading `bytes` is killed after this long.
    fn step_limit_s(&self, bytes: u64) -> u64 {
        bytes / (SLOWEST_MIB_S << 20) + STEP_OVERHEAD_S
    }

    /// An upper estimate of the whole half, in seconds: every byte
    /// written or read at a pessimistic 40 MiB/s, and 10 s per step.
    pub fn estimate_s(&self) -> u64 {
        // seqwrite runs, zoned perf runs and raw-zbd write `ours_bytes`.
        let full_writes = if self.ablations { 11 } else { 9 };
        // btrfs twice, scrub-prep, btrfs scrub, scrub twice (three times
        // with the ablation), perf and fio reading.
        let btrfs_passes = 8 + u64::from(self.ablations);
        let bytes = full_writes * self.ours_bytes() + btrfs_passes * self.btrfs_bytes();
        bytes / (40 << 20) + steps(self).len() as u64 * 10
    }
}

/// One line of a chart: its label and (seconds, MiB/s) points.
pub type Curve = (String, Vec<(f64, f64)>);
/// A chart's title and lines.
pub type LineChart = (String, Vec<Curve>);

/// Bytes for `percent` of `size`, in whole 256 KiB writes.
fn share(size: u64, percent: f64) -> u64 {
    (size as f64 * percent / 100.0) as u64 / BS_BYTES * BS_BYTES
}

/// The steps, in order; `key`s name results in the report.
pub fn steps(options: &Options) -> Vec<&'static str> {
    let mut keys = vec!["ours"];
    if options.ablations {
        keys.extend(["ours-inline", "ours-hw-crc"]);
    }
    keys.extend([
        "ours-qd",
        "ours-zc",
        "ours-zc-qd",
        "ours-bare",
        "ours-bare-qd",
        "ours-fair",
        "perf-zoned",
        "perf-zoned-qd",
        "btrfs",
        "btrfs-qd",
        "btrfs-scrub",
        "raw-zbd",
        "scrub-prep",
        "scrub",
        "scrub-no-verify",
    ]);
    if options.ablations {
        keys.push("scrub-ablation");
    }
    keys.extend(["perf-read", "fio-read"]);
    keys
}

/// Shell-quotes one word.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

pub fn guest_script(options: &Options) -> String {
    let ours = options.ours_bytes();
    let btrfs = options.btrfs_bytes();
    let checksums = options.checksums;
    let qd = options.iodepth;
    let write_limit = options.step_limit_s(ours);
    let read_limit = options.step_limit_s(btrfs);
    let mut script = String::from(
        r#"mkdir -p /mnt
# step KEY LIMIT COMMAND...: runs a tool whose stdout is JSON, killed after
# LIMIT seconds; BENCH KEY JSON, or bench-failed and the step's output.
step() {
    key=$1; limit=$2; shift 2
    echo "== $key" >&2
    timeout -k 10 "$limit" "$@" > /tmp/$key.json 2> /tmp/$key.err
    status=$?
    if [ $status -ne 0 ]; then
        echo "bench-failed $key status $status$( [ $status -ge 124 ] && echo ", killed at its $limit s limit" )"
        cat /tmp/$key.err /tmp/$key.json
        exit 1
    fi
    echo "BENCH $key $(tr -d '\n' < /tmp/$key.json)"
}
# check KEY COMMAND...: a set-up command that must succeed.
check() {
    key=$1; shift
    if ! "$@" > /tmp/check.out 2>&1; then
        echo "bench-failed $key status 1, $*"
        cat /tmp/check.out
        exit 1
    fi
}
bwlog() { sed "s/^/BWLOG $1 /" "$2"; }
"#,
    );
    let seqwrite = |key: &str, depth: u32, extra: &str| {
        format!(
            "step {key} {write_limit} seqwrite --pci {OURS_PCI} --format --yes --checksums {checksums} --bs 256k \
             --size {ours} --iodepth {depth} --json --no-progress --write-log /tmp/{key} {extra}\n"
        )
    };
    script += &seqwrite("ours", 1, "--checksum-threads 2");
    script += "bwlog ours /tmp/ours_bw.1.log\n";
    if options.ablations {
        script += &seqwrite("ours-inline", 1, "--checksum-threads 0");
        script += &seqwrite("ours-hw-crc", 1, "--checksum-threads 2 --crc32c hardware");
    }
    script += &seqwrite("ours-qd", qd, "--checksum-threads 2");
    script += "bwlog ours-qd /tmp/ours-qd_bw.1.log\n";
    // Without the copy into DMA memory (each write made in a buffer the
    // volume lends), then with no per-write work at all: the same bytes
    // every write, checksums computed before the run.
    for (key, depth, extra) in [
        ("ours-zc", 1, "--zero-copy --checksum-threads 2"),
        ("ours-zc-qd", qd, "--zero-copy --checksum-threads 2"),
        ("ours-bare", 1, "--zero-copy --same-data"),
        ("ours-bare-qd", qd, "--zero-copy --same-data"),
        // The peer's work and no more: fio reuses one buffer and btrfs
        // checksums every block it is given, from user memory.
        ("ours-fair", 1, "--zero-copy --reuse-data"),
    ] {
        script += &seqwrite(key, depth, extra);
    }
    // The raw zoned path under seqwrite: the driver's Zone Appends of as
    // many bytes, from the same empty zones (perf resets them), at each
    // depth; what seqwrite adds above it is the allocator and checksums.
    for (key, depth) in [("perf-zoned", 1), ("perf-zoned-qd", qd)] {
        let _ = writeln!(
            script,
            "step {key} {write_limit} perf --pci {OURS_PCI} --rw write --yes --zone-append --bs 256k --qd {depth} \
             --io-bytes {ours} --time {write_limit} --per-second --json"
        );
    }
    for (key, depth) in [("btrfs", 1), ("btrfs-qd", qd)] {
        let fio = [
            FIO,
            "--filename=/mnt/testfile",
            "--direct=1",
            "--rw=write",
            "--bs=256k",
            "--ioengine=libaio",
            &format!("--iodepth={depth}"),
            "--fallocate=none",
            &format!("--write_bw_log=/tmp/{key}"),
            "--log_avg_msec=1000",
            &format!("--size={btrfs}"),
            "--name=seed",
            "--output-format=json",
        ]
        .map(quote)
        .join(" ");
        let _ = write!(
            script,
            "check {key} {MKFS} -f -O zoned {BTRFS_DEVICE}\n\
             check {key} mount -t btrfs {BTRFS_DEVICE} /mnt\n\
             step {key} {write_limit} {fio}\n\
             bwlog {key} /tmp/{key}_bw.1.log\n"
        );
        if depth != 1 {
            // btrfs scrub on the file system the QD run filled; wall time
            // from /proc/uptime (busybox has no sub-second date).
            let _ = write!(
                script,
                "echo '== btrfs-scrub' >&2; sync; t0=$(cut -d' ' -f1 /proc/uptime)\n\
                 if ! timeout -k 10 {read_limit} {BTRFS} scrub start -B /mnt > /tmp/btrfs-scrub.txt 2>&1; then\n\
                 \x20   echo 'bench-failed btrfs-scrub status 1'; cat /tmp/btrfs-scrub.txt; exit 1\n\
                 fi\n\
                 t1=$(cut -d' ' -f1 /proc/uptime)\n\
                 sed 's/^/BTRFS-SCRUB /' /tmp/btrfs-scrub.txt; echo \"BTRFS-SCRUB-TIME $t0 $t1\"\n"
            );
        }
        script += "check umount umount /mnt\n";
    }
    let _ = write!(
        script,
        "step raw-zbd {write_limit} {FIO} --filename={RAW_DEVICE} --direct=1 --rw=write --bs=256k --ioengine=libaio \
         --iodepth=1 --zonemode=zbd --size={ours} --write_bw_log=/tmp/raw --log_avg_msec=1000 --name=raw \
         --output-format=json\n\
         bwlog raw-zbd /tmp/raw_bw.1.log\n"
    );
    // Scrub: as much data as btrfs held, written by seqwrite at QD8; our
    // scrub with and without verification (and the QD1 ablation), perf
    // reading the same LBAs once; fio reading as much from the kernel's
    // namespace (raw-zbd wrote it).
    let _ = write!(
        script,
        "step scrub-prep {write_limit} seqwrite --pci {OURS_PCI} --format --yes --checksums {checksums} --bs 256k \
         --size {btrfs} --iodepth 8 --checksum-threads 2 --json --no-progress\n\
         offset=$(sed -n 's/.*\"data_offset_bytes\":\\([0-9]*\\).*/\\1/p' /tmp/scrub-prep.json)\n\
         step scrub {read_limit} scrub --pci {OURS_PCI} --qd 64 --json --no-progress\n\
         step scrub-no-verify {read_limit} scrub --pci {OURS_PCI} --qd 64 --no-verify --json --no-progress\n"
    );
    if options.ablations {
        let _ = writeln!(
            script,
            "step scrub-ablation {read_limit} scrub --pci {OURS_PCI} --no-verify --submit-and-wait --bs 64k --json \
             --no-progress"
        );
    }
    let _ = write!(
        script,
        "step perf-read {read_limit} perf --pci {OURS_PCI} --rw read --bs 512k --qd 64 --time {read_limit} \
         --io-bytes {btrfs} --offset $offset --size {btrfs} --json\n\
         step fio-read {read_limit} {FIO} --filename={RAW_DEVICE} --direct=1 --rw=read --bs=512k --ioengine=io_uring \
         --iodepth=32 --size={btrfs} --name=read --output-format=json\n\
         echo zoned-done\n"
    );
    script
}

/// btrfs-progs' sizes: `2.80GiB`, `300.00MiB`, `4.00KiB`, `512B`.
fn parse_btrfs_size(text: &str) -> Option<u64> {
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale = match unit.trim() {
        "B" => 1u64,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return None,
    };
    Some((number * scale as f64) as u64)
}

/// One direction of fio's JSON output: MiB/s and bytes.
fn fio_side(report: &Value, direction: &str) -> Option<(f64, u64)> {
    let side = report.get("jobs")?.get(0)?.get(direction)?;
    Some((side.get("bw_bytes")?.as_f64()? / f64::from(1 << 20), side.get("io_bytes")?.as_u64()?))
}

/// The write runs whose steady state is reported.
const WRITE_RUNS: [&str; 12] = [
    "ours",
    "ours-qd",
    "ours-zc",
    "ours-zc-qd",
    "ours-bare",
    "ours-bare-qd",
    "ours-fair",
    "perf-zoned",
    "perf-zoned-qd",
    "btrfs",
    "btrfs-qd",
    "raw-zbd",
];

/// What the zoned half measured, from the guest's output.
#[derive(Debug, Default)]
pub struct Results {
    /// Each step's JSON, by key.
    pub raw: Map<String, Value>,
    /// Bandwidth logs, by key: (seconds, MiB/s).
    pub bw_logs: BTreeMap<String, Vec<(f64, f64)>>,
    /// btrfs scrub's own report lines.
    pub btrfs_scrub_lines: Vec<String>,
    pub btrfs_scrub_seconds: Option<f64>,
}

/// A `BENCH KEY JSON` line's key and JSON (fio may print notes before it).
pub fn bench_line(line: &str) -> Option<(&str, Result<Value, String>)> {
    let (key, body) = line.strip_prefix("BENCH ")?.split_once(' ')?;
    let body = body.find('{').map_or(body, |at| &body[at..]);
    Some((key, serde_json::from_str(body).map_err(|e| format!("{key}: unreadable JSON ({e})"))))
}

pub fn collect(output: &str) -> Result<Results, String> {
    let mut results = Results::default();
    for line in output.lines() {
        if let Some(rest) = line.strip_prefix("BTRFS-SCRUB-TIME ") {
            let times: Vec<f64> = rest.split_whitespace().filter_map(|t| t.parse().ok()).collect();
            if let [t0, t1] = times[..] {
                results.btrfs_scrub_seconds = Some(t1 - t0);
            }
        } else if let Some(rest) = line.strip_prefix("BTRFS-SCRUB ") {
            results.btrfs_scrub_lines.push(rest.trim().to_owned());
        } else if let Some(rest) = line.strip_prefix("BWLOG ") {
            // fio's log format: time (ms), value (KiB/s), direction, bs.
            let Some((key, entry)) = rest.split_once(' ') else { continue };
            let mut fields = entry.split(',').map(str::trim);
            let time = fields.next().and_then(|f| f.parse::<f64>().ok());
            let kib_s = fields.next().and_then(|f| f.parse::<f64>().ok());
            if let (Some(time), Some(kib_s)) = (time, kib_s) {
                results.bw_logs.entry(key.to_owned()).or_default().push((time / 1000.0, kib_s / 1024.0));
            }
        } else if let Some((key, value)) = bench_line(line) {
            let value = value?;
            // perf's per-second bandwidth (--per-second), as a log.
            if let Some(series) = value.get("mib_s_per_second").and_then(Value::as_array) {
                let points = series.iter().enumerate().filter_map(|(i, v)| Some(((i + 1) as f64, v.as_f64()?)));
                results.bw_logs.insert(key.to_owned(), points.collect());
            }
            results.raw.insert(key.to_owned(), value);
        }
    }
    Ok(results)
}

impl Results {
    /// Whether step `key` left its result.
    pub fn has(&self, key: &str) -> bool {
        match key {
            "btrfs-scrub" => self.btrfs_scrub_seconds.is_some(),
            _ => self.raw.contains_key(key),
        }
    }

    /// Every step's figure, in the order they ran.
    pub fn render_steps(&self, options: &Options) -> String {
        let mut out = format!(
            "\nZoned steps, in order ({} ZNS namespaces, {} zones)\n\n",
            vm_rig::format_size(options.size),
            vm_rig::format_size(options.zone)
        );
        for key in steps(options) {
            let text = match key {
                "btrfs-scrub" => match (self.btrfs_scrub_mib_s(), self.btrfs_scrub_seconds) {
                    (Some(mib_s), Some(seconds)) => format!("{mib_s:>8.1} MiB/s  over {seconds:.1} s"),
                    _ => "no figure".into(),
                },
                _ => match self.raw.get(key) {
                    Some(value) => {
                        let mut text = describe(key, value);
                        if let Some(steady) = self.steady_mib_s(key).filter(|_| WRITE_RUNS.contains(&key)) {
                            let _ = write!(text, "  steady {steady:.1} MiB/s (second half)");
                        }
                        if let Some(qd) = self.number(key, &["report", "mean_queue_depth"]) {
                            let request = self.number(key, &["report", "mean_request_bytes"]).unwrap_or(0.0);
                            let _ = write!(text, "  mean QD {qd:.1}, mean request {:.0} KiB", request / 1024.0);
                        }
                        text
                    }
                    None => "no result".into(),
                },
            };
            let _ = writeln!(out, "  {key:<16} {text}");
        }
        out
    }

    fn number(&self, key: &str, path: &[&str]) -> Option<f64> {
        let mut at = self.raw.get(key)?;
        for part in path {
            at = at.get(part)?;
        }
        at.as_f64()
    }

    fn seqwrite_mib_s(&self, key: &str) -> Option<f64> {
        self.number(key, &["mib_s"])
    }

    fn fio_write_mib_s(&self, key: &str) -> Option<f64> {
        fio_side(self.raw.get(key)?, "write").map(|(mib_s, _)| mib_s)
    }

    /// The flatness of a fio bandwidth log, leaving out its last interval,
    /// which is partial.
    fn fio_flatness(&self, key: &str) -> Option<f64> {
        flatness(&self.whole_intervals(key)?)
    }

    /// A run's whole intervals (MiB/s): seqwrite's own list, perf's
    /// series, or a fio log less its last, partial interval.
    fn whole_intervals(&self, key: &str) -> Option<Vec<f64>> {
        if let Some(list) = self.raw.get(key).and_then(|r| r.get("intervals_mib_s")).and_then(Value::as_array) {
            return Some(list.iter().filter_map(Value::as_f64).collect());
        }
        let log = self.bw_logs.get(key)?;
        let whole = if key.starts_with("perf-") { log.len() } else { log.len().saturating_sub(1) };
        Some(log[..whole].iter().map(|p| p.1).collect())
    }

    /// The mean MiB/s of the second half of a run's log.
    fn steady_mib_s(&self, key: &str) -> Option<f64> {
        steady(&self.whole_intervals(key)?)
    }

    fn scrub_mib_s(&self, key: &str) -> Option<f64> {
        self.number(key, &["report", "rate_mib_s"])
    }

    /// btrfs scrub: its total to scrub over the wall time of the command.
    fn btrfs_scrub_mib_s(&self) -> Option<f64> {
        let total = self.btrfs_scrub_lines.iter().find_map(|l| l.strip_prefix("Total to scrub:"))?;
        let bytes = parse_btrfs_size(total.trim())?;
        let seconds = self.btrfs_scrub_seconds.filter(|s| *s > 0.0)?;
        Some(bytes as f64 / f64::from(1 << 20) / seconds)
    }

    /// The side-by-side rows: ours against the kernel's path, then ours
    /// against our own baselines (engine efficiency, ablations).
    pub fn rows(&self, options: &Options) -> Vec<Row> {
        let qd = options.iodepth;
        let fill = options.fill;
        let btrfs_fill = options.btrfs_fill;
        let mut rows = vec![
            Row::new(
                format!("seqwrite 256K QD1, the peer's work, {fill:.0}% fill"),
                "seqwrite --zero-copy --reuse-data".into(),
                self.seqwrite_mib_s("ours-fair"),
                format!("btrfs zoned, the seed's fio job, {btrfs_fill:.0}% fill"),
                self.fio_write_mib_s("btrfs"),
                Unit::MibS,
            )
            .target(1.5),
            Row::new(
                format!("seqwrite 256K QD1, {fill:.0}% fill"),
                "seqwrite".into(),
                self.seqwrite_mib_s("ours"),
                format!("btrfs zoned, the seed's fio job, {btrfs_fill:.0}% fill"),
                self.fio_write_mib_s("btrfs"),
                Unit::MibS,
            )
            .target(2.0),
            Row::new(
                format!("seqwrite 256K QD{qd}"),
                format!("seqwrite --iodepth {qd}"),
                self.seqwrite_mib_s("ours-qd"),
                format!("btrfs zoned, fio --iodepth={qd}"),
                self.fio_write_mib_s("btrfs-qd"),
                Unit::MibS,
            ),
            Row::new(
                format!("seqwrite 256K QD1, {fill:.0}% fill"),
                "seqwrite".into(),
                self.seqwrite_mib_s("ours"),
                "fio --zonemode=zbd, raw device".into(),
                self.fio_write_mib_s("raw-zbd"),
                Unit::MibS,
            ),
            Row::new(
                "seqwrite flatness, QD1".into(),
                "seqwrite".into(),
                self.number("ours", &["flatness"]),
                "btrfs zoned".into(),
                self.fio_flatness("btrfs"),
                Unit::Flatness,
            )
            .minimum(0.95),
            Row::new(
                "scrub, verifying".into(),
                "scrub --qd 64".into(),
                self.scrub_mib_s("scrub"),
                "btrfs scrub start -B".into(),
                self.btrfs_scrub_mib_s(),
                Unit::MibS,
            )
            .target(2.0),
            Row::new(
                "scrub, no verification".into(),
                "scrub --no-verify".into(),
                self.scrub_mib_s("scrub-no-verify"),
                "fio 512K sequential read QD32".into(),
                fio_side(self.raw.get("fio-read").unwrap_or(&Value::Null), "read").map(|(mib_s, _)| mib_s),
                Unit::MibS,
            )
            .target(2.0),
        ];
        // Ours against ours: the allocator over the raw zoned path, as it
        // runs, without the copy, and with no per-write work (the 0.9
        // target: what is left is the allocator); then the scrub engine.
        // Each write run's steady state goes with its step and in the
        // details: a short run (--quick) may have too few whole seconds.
        let runs = [
            ("", "seqwrite", "seqwrite, checksums on 2 threads", None),
            ("-zc", "seqwrite --zero-copy", "seqwrite --zero-copy, checksums on 2 threads", None),
            ("-bare", "seqwrite, no per-write work", "seqwrite --zero-copy --same-data", Some(0.9)),
        ];
        for (suffix, job, ours, target) in runs {
            for (key, perf, depth) in [("ours", "perf-zoned", 1), ("ours-qd", "perf-zoned-qd", qd)] {
                let key = key.replacen("ours", &format!("ours{suffix}"), 1);
                // The two new runs' names are shorter, to fit the table.
                let over = if suffix.is_empty() { "over the raw zoned path" } else { "/ raw zoned" };
                let row = Row::new(
                    format!("{job} {over}, QD{depth}"),
                    ours.into(),
                    self.seqwrite_mib_s(&key),
                    "perf --zone-append, as many bytes (ours)".into(),
                    self.number(perf, &["mib_s"]),
                    Unit::MibS,
                )
                .baseline_is_ours();
                rows.push(match target {
                    Some(target) => row.target(target),
                    None => row,
                });
            }
        }
        rows.push(
            Row::new(
                "scrub engine efficiency".into(),
                "scrub --no-verify".into(),
                self.scrub_mib_s("scrub-no-verify"),
                "perf 512K read QD64, same LBAs (ours)".into(),
                self.number("perf-read", &["mib_s"]),
                Unit::MibS,
            )
            .target(0.9)
            .baseline_is_ours(),
        );
        if options.ablations {
            rows.push(
                Row::new(
                    "scrub against its ablation".into(),
                    "scrub --no-verify".into(),
                    self.scrub_mib_s("scrub-no-verify"),
                    "scrub QD1 submit-and-wait, 64K (ours)".into(),
                    self.scrub_mib_s("scrub-ablation"),
                    Unit::MibS,
                )
                .target(3.0)
                .baseline_is_ours(),
            );
            rows.push(
                Row::new(
                    "seqwrite, checksums on 2 threads".into(),
                    "seqwrite".into(),
                    self.seqwrite_mib_s("ours"),
                    "checksums inline (ours)".into(),
                    self.seqwrite_mib_s("ours-inline"),
                    Unit::MibS,
                )
                .baseline_is_ours(),
            );
        }
        rows
    }

    /// Figures that are not a pair: shares, fills, queue depths.
    pub fn details(&self, options: &Options) -> Map<String, Value> {
        let mut details = Map::new();
        let mut put = |key: &str, value: Option<f64>| {
            details.insert(key.into(), json!(value));
        };
        put("ours_namespace_fill_percent", self.number("ours", &["namespace_fill_percent"]));
        put("ours_qd_flatness", self.number("ours-qd", &["flatness"]));
        put("btrfs_qd_flatness", self.fio_flatness("btrfs-qd"));
        put("raw_zbd_flatness", self.fio_flatness("raw-zbd"));
        for key in ["perf-zoned", "perf-zoned-qd"] {
            put(&format!("{}_flatness", key.replace('-', "_")), self.whole_intervals(key).and_then(|v| flatness(&v)));
        }
        // Each write run's steady state: the second half of its log.
        for key in WRITE_RUNS {
            put(&format!("{}_steady_mib_s", key.replace('-', "_")), self.steady_mib_s(key));
        }
        let btrfs_bytes = self.raw.get("btrfs").and_then(|r| fio_side(r, "write")).map(|(_, b)| b as f64);
        put("btrfs_namespace_fill_percent", btrfs_bytes.map(|b| b / options.size as f64 * 100.0));
        if options.ablations {
            let inline = self.number("ours-inline", &["checksum_seconds_on_writer"]);
            let seconds = self.number("ours-inline", &["seconds"]);
            put("checksum_share_inline", inline.zip(seconds).map(|(c, s)| c / s));
            put("ours_hw_crc_mib_s", self.seqwrite_mib_s("ours-hw-crc"));
            put("scrub_ablation_mean_queue_depth", self.number("scrub-ablation", &["report", "mean_queue_depth"]));
        }
        for key in ["scrub", "scrub-no-verify"] {
            let k = key.replace('-', "_");
            put(&format!("{k}_mean_queue_depth"), self.number(key, &["report", "mean_queue_depth"]));
            put(&format!("{k}_mean_request_bytes"), self.number(key, &["report", "mean_request_bytes"]));
            put(&format!("{k}_bytes_read"), self.number(key, &["report", "bytes_read"]));
            put(&format!("{k}_checksum_errors"), self.number(key, &["report", "errors", "checksum"]));
        }
        put("btrfs_scrub_seconds", self.btrfs_scrub_seconds);
        details.insert(
            "btrfs_scrub_rate_reported".into(),
            json!(self.btrfs_scrub_lines.iter().find_map(|l| l.strip_prefix("Rate:")).map(str::trim)),
        );
        details
    }

    /// Bandwidth over time of the write runs, for the charts: a title and
    /// its lines, at QD1 and at `iodepth`.
    pub fn charts(&self, options: &Options) -> Vec<LineChart> {
        let qd = options.iodepth;
        let lines = |keys: &[(&str, String)]| -> Vec<Curve> {
            keys.iter().filter_map(|(key, label)| Some((label.clone(), self.bw_logs.get(*key)?.clone()))).collect()
        };
        let qd1 = lines(&[
            ("ours", "ours, seqwrite".into()),
            ("btrfs", "btrfs zoned (fio)".into()),
            ("raw-zbd", "raw fio --zonemode=zbd".into()),
            ("perf-zoned", "ours, perf --zone-append".into()),
        ]);
        let qdn = lines(&[
            ("ours-qd", format!("ours, seqwrite --iodepth {qd}")),
            ("btrfs-qd", format!("btrfs zoned, QD{qd}")),
            ("perf-zoned-qd", format!("ours, perf --zone-append --qd {qd}")),
        ]);
        [
            ("sequential 256 KiB writes at QD1, one ZNS namespace each".to_owned(), qd1),
            (format!("the same at QD{qd}"), qdn),
        ]
        .into_iter()
        .filter(|(_, lines)| !lines.is_empty())
        .collect()
    }
}

/// A progress line for one step's result.
pub fn describe(key: &str, value: &Value) -> String {
    let mib_s = value
        .get("mib_s")
        .and_then(Value::as_f64)
        .or_else(|| value.get("report").and_then(|r| r.get("rate_mib_s")).and_then(Value::as_f64))
        .or_else(|| fio_side(value, "write").filter(|w| w.1 > 0).or_else(|| fio_side(value, "read")).map(|s| s.0));
    match (mib_s, value.get("flatness").and_then(Value::as_f64)) {
        (Some(m), Some(f)) => format!("{m:>8.1} MiB/s  flatness {f:.3}"),
        (Some(m), None) => format!("{m:>8.1} MiB/s"),
        _ => format!("{key}: no bandwidth in its output"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_check_their_ranges() {
        assert!(Options::defaults(false).validate().is_ok());
        assert!(Options::defaults(true).validate().is_ok());
        let bad = |f: fn(&mut Options)| {
            let mut o = Options::defaults(false);
            f(&mut o);
            o.validate().is_err()
        };
        assert!(bad(|o| o.fill = 0.0));
        assert!(bad(|o| o.btrfs_fill = 101.0));
        assert!(bad(|o| o.zone = 3 << 20));
        assert!(bad(|o| o.size = 8 * o.zone));
        assert!(bad(|o| o.iodepth = 0));
        assert_eq!(Options::defaults(false).ours_bytes(), 3865313280);
    }

    #[test]
    fn the_script_runs_every_step_and_bounds_each() {
        for options in [Options::defaults(false), Options::defaults(true)] {
            let script = guest_script(&options);
            for key in steps(&options) {
                let started = script.contains(&format!("step {key} ")) || script.contains(&format!("'== {key}'"));
                assert!(started, "{key} missing");
            }
            assert!(script.ends_with("echo zoned-done\n"));
            assert_eq!(script.contains("ours-inline"), options.ablations);
            // Every fio and tool run goes through `step` (timeout) or `timeout`.
            for line in script.lines().filter(|l| l.contains("fio ") || l.contains("seqwrite --")) {
                assert!(line.starts_with("step ") || line.contains("timeout "), "{line}");
            }
        }
        let script = guest_script(&Options::defaults(false));
        assert!(script.contains("--iodepth 8 --json"), "{script}");
        assert!(script.contains("'--iodepth=8'"), "{script}");
        assert!(script.contains(&format!(
            "seqwrite --pci {OURS_PCI} --format --yes --checksums auto --bs 256k --size 3865313280"
        )));
        let areas = guest_script(&Options { checksums: "area", ablations: false, ..Options::defaults(false) });
        assert_eq!(areas.matches("--checksums area").count(), 8, "the eight seqwrite runs");
        assert_eq!(areas.matches("--zero-copy --reuse-data").count(), 1, "the peer's work, at QD1");
        assert_eq!(areas.matches("--zero-copy --same-data").count(), 2, "no per-write work at QD1 and QD N");
    }

    const FIO_WRITE: &str = r#"{"jobs":[{"write":{"bw_bytes":138412032,"io_bytes":3007315968},
        "read":{"bw_bytes":0,"io_bytes":0}}]}"#;

    #[test]
    fn results_make_rows() {
        let output = format!(
            "rig: boot\nBENCH ours {{\"mib_s\":150.0,\"flatness\":0.99,\"namespace_fill_percent\":95.0,\
             \"intervals_mib_s\":[150.0,140.0,130.0,120.0]}}\n\
             BWLOG ours 1000, 153600, 1, 262144\nBWLOG ours 2000, 148480, 1, 262144\n\
             BENCH btrfs fio: note {}\n\
             BWLOG btrfs 1000, 135168, 1, 262144\nBWLOG btrfs 2000, 133120, 1, 262144\nBWLOG btrfs 2500, 10, 1, 262144\n\
             BENCH scrub {{\"report\":{{\"rate_mib_s\":600.0}}}}\n\
             BENCH perf-zoned {{\"mib_s\":200.0,\"mib_s_per_second\":[210.0,190.0]}}\n\
             BTRFS-SCRUB Total to scrub: 3.00GiB\nBTRFS-SCRUB Rate: 287.70MiB/s\nBTRFS-SCRUB-TIME 100.5 110.5\n",
            // The guest joins fio's JSON into one line.
            FIO_WRITE.replace('\n', "")
        );
        let results = collect(&output).unwrap();
        assert_eq!(results.bw_logs["ours"], vec![(1.0, 150.0), (2.0, 145.0)]);
        assert_eq!(results.bw_logs["perf-zoned"], vec![(1.0, 210.0), (2.0, 190.0)]);
        let options = Options::defaults(false);
        let rows = results.rows(&options);
        // The peer's work against btrfs first, then today's default.
        assert_eq!(rows[0].ours_label, "seqwrite --zero-copy --reuse-data");
        assert_eq!(rows[0].kernel, Some(132.0));
        let first = &rows[1];
        assert_eq!((first.ours, first.kernel), (Some(150.0), Some(132.0)));
        assert!((first.ratio().unwrap() - 150.0 / 132.0).abs() < 1e-9);
        let flat = rows.iter().find(|r| r.unit == Unit::Flatness).unwrap();
        // The partial last interval is left out of fio's flatness.
        assert!((flat.kernel.unwrap() - 130.0 / 132.0).abs() < 1e-9, "{:?}", flat.kernel);
        let over_perf = rows.iter().find(|r| r.job == "seqwrite over the raw zoned path, QD1").unwrap();
        assert_eq!((over_perf.ours, over_perf.kernel), (Some(150.0), Some(200.0)));
        // The steady states: seqwrite's whole intervals' second half (130,
        // 120), perf's series' (190).
        let details = results.details(&options);
        let steady = |key: &str| details[key].as_f64();
        assert_eq!((steady("ours_steady_mib_s"), steady("perf_zoned_steady_mib_s")), (Some(125.0), Some(190.0)));
        // fio's log less its partial last line: 132, 130.
        assert_eq!(steady("btrfs_steady_mib_s"), Some(130.0));
        assert!(details["raw_zbd_steady_mib_s"].is_null(), "no log, no figure");
        assert!(results.render_steps(&options).contains("steady 190.0 MiB/s"));
        assert!(!rows.iter().any(|r| r.job.contains("steady")), "no row that a short run leaves empty");
        let scrub = rows.iter().find(|r| r.job == "scrub, verifying").unwrap();
        assert!((scrub.kernel.unwrap() - 3072.0 / 10.0).abs() < 1e-9);
        assert!((scrub.ratio().unwrap() - 600.0 / 307.2).abs() < 1e-9);
        // Missing steps give empty cells, not invented ones.
        let qd = rows.iter().find(|r| r.job.starts_with("seqwrite 256K QD8")).unwrap();
        assert_eq!((qd.ours, qd.kernel, qd.ratio()), (None, None, None));
        assert!(collect("BENCH ours {not json").is_err());
        assert_eq!(results.details(&options)["btrfs_scrub_rate_reported"], json!("287.70MiB/s"));
    }

    #[test]
    fn sizes_and_flatness() {
        assert_eq!(parse_btrfs_size("2.80GiB"), Some((2.8 * f64::from(1 << 30)) as u64));
        assert_eq!(parse_btrfs_size("512B"), Some(512));
        assert_eq!(parse_btrfs_size("5 parsecs"), None);
        assert_eq!(flatness(&[100.0; 20]), Some(1.0));
        assert_eq!(flatness(&[100.0, 100.0, 50.0, 50.0, 50.0, 50.0, 50.0, 50.0, 50.0, 50.0]), Some(0.5));
        assert_eq!(flatness(&[1.0]), None);
        // A fast start, then level: the steady state is the level.
        assert_eq!(steady(&[300.0, 300.0, 150.0, 150.0]), Some(150.0));
        assert_eq!(steady(&[400.0, 100.0, 100.0]), Some(100.0));
        assert_eq!(steady(&[100.0]), None);
    }
}

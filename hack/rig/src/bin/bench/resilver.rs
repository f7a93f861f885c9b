//! The resilver part of `hack/bench`: how fast a mirror member is rebuilt
//! from the survivor, with and without verification, next to what the same
//! devices do raw (our `perf`) and to our scrub of the same volume, in one
//! VM boot.
//!
//! Three controllers: A and B, ZNS, hold a mirrored volume (places 0 and
//! 1), filled by `seqwrite`; C, conventional and as large, is the spare.
//! `perf` refuses writes to a zoned namespace, so the spare is the
//! conventional one, and every replace is a ZNS survivor copied onto a
//! conventional device. The ZNS zones are as large as the software zones
//! `replace` gives a conventional namespace of that size (its capacity /
//! 512, a power of two from 1 MiB to 256 MiB: `default_software_zone_bytes`
//! in `allocator/src/journal/layout.rs`): a replacement's metadata segments
//! must hold what the survivor's hold, and with the zoned part's 64 MiB
//! zones a 2 GiB spare (4 MiB software zones) is refused.
//!
//! Each round, in this order:
//! - `perf-read`: perf reads A's data LBAs once (512 KiB, the resilver's
//!   merged read at QEMU's MDTS; QD64, the resilver's reads in flight).
//! - `scrub`: our scrub of the volume (both copies, verifying).
//! - `fail`: place 1 (B in the first round, C after) is given up.
//! - `perf-write`: perf writes as many bytes to C (256 KiB, one extent;
//!   QD64), now out of the volume.
//! - `perf-both-read` and `perf-both-write`: the two at once, for
//!   [`PAIR_TIME_S`]: the devices share QEMU and the host's cores, so a copy
//!   from one to the other may not reach the slower of the two alone.
//! - `resilver`: `volume replace` puts C in place 1 and copies without
//!   verification (`--no-verify --no-verify-after`).
//! - `fail-again`, `resilver-verify`: C is given up and replaced again,
//!   this time as an operator runs it: every extent's checksums verified as
//!   read, then a scrub of the new copy. The report's rate is the copy's
//!   (it is taken before the verify pass); its duration is the whole.
//!
//! Every replace must rebuild everything the volume holds, reading each
//! extent once ([`Results::check`] fails the benchmark otherwise).
//!
//! Guest protocol: `zoned`'s (`== KEY`, `BENCH KEY JSON`, `bench-failed
//! KEY status N`); keys are `fill` and `STEP.ROUND`.

use super::{median, Row, Unit};
use serde_json::{json, Map, Value};
use std::fmt::Write as _;

/// The survivor (place 0), the member given up first (place 1) and the
/// conventional spare: the only controllers of this part's VM.
pub const SURVIVOR_PCI: &str = "0000:00:10.0";
pub const MEMBER_PCI: &str = "0000:00:11.0";
pub const SPARE_PCI: &str = "0000:00:12.0";
/// Extent size (seqwrite's `--bs`) and perf's write size.
const EXTENT_BYTES: u64 = 256 << 10;
/// perf's read size: the resilver merges reads up to the namespace's
/// largest transfer, 512 KiB on QEMU's controllers (MDTS 7).
const READ_BYTES: u64 = 512 << 10;
/// Reads in flight, the resilver's default, and perf's queue depth.
pub const QUEUE_DEPTH: u32 = 64;
/// How long perf reads and writes at once.
pub const PAIR_TIME_S: u64 = 3;
/// The slowest rate a step may run at before it is killed as hung: far
/// below anything measured here (a verified resilver at 75 MiB/s with the
/// host busy).
const SLOWEST_MIB_S: u64 = 8;
/// Each step's allowance for its start-up (controller bring-up, opening
/// the volume).
const STEP_OVERHEAD_S: u64 = 60;
/// A pessimistic rate for the estimate of the part's length.
const ESTIMATE_MIB_S: u64 = 40;

/// `bytes` in MiB, for a reader.
pub fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / f64::from(1 << 20))
}

/// What the resilver part runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Each namespace (the two members and the spare), in bytes.
    pub size: u64,
    /// Share of each namespace the volume's data takes, in percent.
    pub fill: f64,
    pub rounds: u32,
}

impl Options {
    pub fn defaults(quick: bool) -> Self {
        if quick {
            Options { size: 512 << 20, fill: 65.0, rounds: 1 }
        } else {
            Options { size: 2 << 30, fill: 65.0, rounds: 3 }
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(1.0..=90.0).contains(&self.fill) {
            return Err("--resilver-fill is a percentage (1 to 90)".into());
        }
        if !(256 << 20..=64 << 30).contains(&self.size) || !self.size.is_multiple_of(self.zone_bytes()) {
            return Err(format!(
                "--resilver-size is 256M to 64G, a multiple of its zone size ({}: the size / 512, rounded up to a \
                 power of two)",
                vm_rig::format_size(self.zone_bytes())
            ));
        }
        Ok(())
    }

    /// The members' zone size: the software zone size `replace` gives a
    /// conventional namespace of `size` (see the module documentation).
    pub fn zone_bytes(&self) -> u64 {
        (self.size / 512).next_power_of_two().clamp(1 << 20, 256 << 20)
    }

    /// Bytes the volume holds: `fill` of a namespace, in whole extents.
    pub fn data_bytes(&self) -> u64 {
        (self.size as f64 * self.fill / 100.0) as u64 / EXTENT_BYTES * EXTENT_BYTES
    }

    /// A step reading or writing `passes` times the data is killed after
    /// this long.
    fn step_limit_s(&self, passes: u64) -> u64 {
        passes * self.data_bytes() / (SLOWEST_MIB_S << 20) + STEP_OVERHEAD_S
    }

    /// An upper estimate of the part, in seconds: the fill, and per round
    /// seven passes over the data (perf twice, the scrub's two copies, the
    /// two copies and the verify pass) at a pessimistic rate, the pair of
    /// perf runs, and 10 s per step.
    pub fn estimate_s(&self) -> u64 {
        let passes = 1 + 7 * u64::from(self.rounds);
        passes * self.data_bytes() / (ESTIMATE_MIB_S << 20)
            + u64::from(self.rounds) * PAIR_TIME_S
            + steps(self).len() as u64 * 10
    }
}

/// The steps of a round, in order.
pub const ROUND_STEPS: [&str; 9] = [
    "perf-read",
    "scrub",
    "fail",
    "perf-write",
    "perf-both-read",
    "perf-both-write",
    "resilver",
    "fail-again",
    "resilver-verify",
];

/// Checksum workers of the resilver as the `volume` tool runs it
/// (`ResilverOptions::verify_threads`' default).
const RESILVER_VERIFY_THREADS: f64 = 2.0;

fn key(step: &str, round: u32) -> String {
    format!("{step}.{round}")
}

/// Every step's key, in order.
pub fn steps(options: &Options) -> Vec<String> {
    let mut keys = vec!["fill".to_owned()];
    for round in 1..=options.rounds {
        keys.extend(ROUND_STEPS.iter().map(|step| key(step, round)));
    }
    keys
}

/// The guest script's opening: the kernel's name, and the shell functions
/// that run each step under a time limit and print its JSON (shared with
/// the pool part).
pub const GUEST_STEPS: &str = r#"echo "bench-env kernel $(uname -r)"
# report KEY STATUS LIMIT: BENCH KEY JSON, or bench-failed and the step's
# output (the script then ends).
report() {
    if [ "$2" -ne 0 ]; then
        echo "bench-failed $1 status $2$( [ "$2" -ge 124 ] && echo ", killed at its $3 s limit" )"
        cat /tmp/$1.err /tmp/$1.json
        exit 1
    fi
    echo "BENCH $1 $(tr -d '\n' < /tmp/$1.json)"
}
# step KEY LIMIT COMMAND...: runs a tool whose stdout is JSON, killed after
# LIMIT seconds.
step() {
    key=$1; limit=$2; shift 2
    echo "== $key" >&2
    timeout -k 10 "$limit" "$@" > /tmp/$key.json 2> /tmp/$key.err
    report "$key" $? "$limit"
}
# start KEY LIMIT COMMAND...: the same in the background, its pid in
# $started; finish KEY PID LIMIT waits for it.
start() {
    key=$1; limit=$2; shift 2
    echo "== $key" >&2
    timeout -k 10 "$limit" "$@" > /tmp/$key.json 2> /tmp/$key.err &
    started=$!
}
finish() {
    wait "$2"
    report "$1" $? "$3"
}
"#;

pub fn guest_script(options: &Options) -> String {
    let data = options.data_bytes();
    let (a, b, c) = (SURVIVOR_PCI, MEMBER_PCI, SPARE_PCI);
    let one_pass = options.step_limit_s(1);
    let two_passes = options.step_limit_s(2);
    let pair_limit = PAIR_TIME_S + STEP_OVERHEAD_S;
    let bare_limit = STEP_OVERHEAD_S;
    let qd = QUEUE_DEPTH;
    let (read_k, write_k) = (READ_BYTES >> 10, EXTENT_BYTES >> 10);
    let mut script = String::from(GUEST_STEPS);
    let _ = write!(
        script,
        "step fill {one_pass} seqwrite --pci {a} --pci {b} --profile mirror --format --yes --bs {write_k}k \
         --size {data} --iodepth 8 --checksum-threads 2 --json --no-progress\n\
         offset=$(sed -n 's/.*\"data_offset_bytes\":\\([0-9]*\\).*/\\1/p' /tmp/fill.json)\n\
         if [ -z \"$offset\" ]; then echo 'bench-failed fill status 1, no data_offset_bytes'; exit 1; fi\n"
    );
    let region = format!("--offset $offset --size {data}");
    let read = format!("perf --pci {a} --rw read --bs {read_k}k --qd {qd} {region}");
    let write = format!("perf --pci {c} --rw write --yes --bs {write_k}k --qd {qd} {region}");
    let replace =
        format!("volume replace --pci {a} --place 1 --new-pci {c} --yes --force --qd {qd} --no-progress --json");
    for round in 1..=options.rounds {
        // Place 1 is B until the first replace puts C there.
        let member = if round == 1 { b } else { c };
        let k = |step: &str| key(step, round);
        let mut step = |name: &str, limit: u64, command: String| {
            let _ = writeln!(script, "step {} {limit} {command}", k(name));
        };
        step("perf-read", one_pass, format!("{read} --io-bytes {data} --time {one_pass} --json"));
        step("scrub", two_passes, format!("scrub --pci {a} --pci {member} --json --no-progress"));
        step("fail", bare_limit, format!("volume fail --pci {a} --pci {member} --place 1 --yes --json"));
        step("perf-write", one_pass, format!("{write} --io-bytes {data} --time {one_pass} --json"));
        let _ = write!(
            script,
            "start {} {pair_limit} {read} --time {PAIR_TIME_S} --json; reading=$started\n\
             start {} {pair_limit} {write} --time {PAIR_TIME_S} --json; writing=$started\n\
             finish {} $reading {pair_limit}; finish {} $writing {pair_limit}\n",
            k("perf-both-read"),
            k("perf-both-write"),
            k("perf-both-read"),
            k("perf-both-write"),
        );
        let mut step = |name: &str, limit: u64, command: String| {
            let _ = writeln!(script, "step {} {limit} {command}", k(name));
        };
        step("resilver", one_pass, format!("{replace} --no-verify --no-verify-after"));
        step("fail-again", bare_limit, format!("volume fail --pci {a} --pci {c} --place 1 --yes --json"));
        step("resilver-verify", two_passes, replace.clone());
    }
    script += "echo resilver-done\n";
    script
}

/// What the resilver part measured: each step's JSON, by key.
#[derive(Debug, Default)]
pub struct Results {
    pub raw: Map<String, Value>,
}

pub fn collect(output: &str) -> Result<Results, String> {
    Ok(Results { raw: steps_json(output)? })
}

/// Every step's JSON in the guest's output (`BENCH KEY JSON`), by key.
pub fn steps_json(output: &str) -> Result<Map<String, Value>, String> {
    let mut raw = Map::new();
    for line in output.lines() {
        if let Some((key, value)) = super::zoned::bench_line(line) {
            raw.insert(key.to_owned(), value?);
        }
    }
    Ok(raw)
}

/// The number at `path` in `value`.
pub fn number(value: &Value, path: &[&str]) -> Option<f64> {
    path.iter().try_fold(value, |at, part| at.get(part))?.as_f64()
}

/// The median of the values present, `None` when there are none.
pub fn median_of(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let mut values: Vec<f64> = values.into_iter().flatten().collect();
    (!values.is_empty()).then(|| median(&mut values))
}

impl Results {
    pub fn has(&self, key: &str) -> bool {
        self.raw.contains_key(key)
    }

    fn get(&self, step: &str, round: u32, path: &[&str]) -> Option<f64> {
        number(self.raw.get(&key(step, round))?, path)
    }

    /// A replace's resilver report figure.
    fn resilver(&self, step: &str, round: u32, field: &str) -> Option<f64> {
        self.get(step, round, &["resilver", field])
    }

    /// The slower of two figures of a round.
    fn slower(&self, round: u32, read: &str, write: &str) -> Option<f64> {
        Some(self.get(read, round, &["mib_s"])?.min(self.get(write, round, &["mib_s"])?))
    }

    /// One figure's median over the rounds.
    fn median(&self, options: &Options, figure: impl Fn(u32) -> Option<f64>) -> Option<f64> {
        median_of((1..=options.rounds).map(figure))
    }

    /// Every replace rebuilt everything the volume holds, reading each
    /// extent of the survivor once, and came out complete.
    pub fn check(&self, options: &Options) -> Result<(), String> {
        let fill = self.raw.get("fill").ok_or("no result for fill")?;
        let held = number(fill, &["volume", "valid_bytes"]).ok_or("fill: no volume.valid_bytes")?;
        let extents = number(fill, &["volume", "extents"]).ok_or("fill: no volume.extents")?;
        for round in 1..=options.rounds {
            for (step, verified) in [("resilver", false), ("resilver-verify", true)] {
                let name = key(step, round);
                let report = self.raw.get(&name).and_then(|v| v.get("resilver")).ok_or(format!("{name}: no report"))?;
                let field = |f: &str| number(report, &[f]).ok_or(format!("{name}: no resilver.{f}"));
                let (total, read) = (field("bytes_total")?, field("bytes_read")?);
                let expect = |ok: bool, what: String| if ok { Ok(()) } else { Err(format!("{name}: {what}")) };
                expect(
                    read == total,
                    format!("read {read} bytes of the survivor for {total} to rebuild: not each extent once"),
                )?;
                expect(total == held, format!("{total} bytes to rebuild, the volume holds {held}"))?;
                expect(field("bytes_copied")? == total, format!("copied {} of {total} bytes", field("bytes_copied")?))?;
                expect(
                    field("extents_copied")? == extents,
                    format!("copied {} of {extents} extents", field("extents_copied")?),
                )?;
                expect(field("bytes_left")? == 0.0, "bytes left to rebuild at the end".into())?;
                let errors = field("checksum_errors")? + field("failed_reads")?;
                expect(errors == 0.0, format!("{errors} checksum errors and failed reads on the survivor"))?;
                expect(report.get("verified") == Some(&json!(verified)), format!("verified is not {verified}"))?;
                let outcome = report.get("verify").and_then(|v| v.get("outcome")).and_then(Value::as_str);
                expect(outcome == verified.then_some("clean"), format!("the verify pass's outcome is {outcome:?}"))?;
                expect(self.raw[&name].get("complete") == Some(&json!(true)), "not complete".into())?;
            }
        }
        Ok(())
    }

    /// The median of a figure of the copy without verification, and of
    /// the one with.
    fn both(&self, options: &Options, field: &str) -> (Option<f64>, Option<f64>) {
        (
            self.median(options, |r| self.resilver("resilver", r, field)),
            self.median(options, |r| self.resilver("resilver-verify", r, field)),
        )
    }

    /// How long a copy stays in flight on average, in ms (Little's law:
    /// copies in flight over copies per second).
    fn copy_in_flight_ms(&self, options: &Options, step: &str) -> Option<f64> {
        let m = |field: &str| self.median(options, |r| self.resilver(step, r, field));
        let extent_bytes = m("bytes_copied")? / m("extents_copied").filter(|n| *n > 0.0)?;
        let copies_per_s = m("rate_mib_s").filter(|r| *r > 0.0)? * f64::from(1 << 20) / extent_bytes;
        Some(m("mean_write_queue_depth")? / copies_per_s * 1000.0)
    }

    /// What bounds the copy without verification, from the perf runs on
    /// the same devices. When the devices, alone and at once, move much
    /// more while the copy keeps reads and copies queued, their
    /// completions wait on the resilver's polling thread.
    fn copy_bound(&self, options: &Options) -> String {
        let m = |figure: &dyn Fn(u32) -> Option<f64>| self.median(options, figure);
        let copy = m(&|r| self.resilver("resilver", r, "rate_mib_s"));
        let alone = m(&|r| self.slower(r, "perf-read", "perf-write"));
        let at_once = m(&|r| self.slower(r, "perf-both-read", "perf-both-write"));
        let (Some(copy), Some(alone), Some(at_once)) = (copy, alone, at_once) else {
            return "unknown (a figure is missing)".into();
        };
        if copy >= 0.9 * alone {
            return "the devices: the copy reaches 0.9x the slower perf run".into();
        }
        if copy >= 0.9 * at_once {
            return format!("the devices, shared: perf reading and writing them at once reaches {at_once:.0} MiB/s");
        }
        let (reads, copies) = self
            .both(options, "mean_read_queue_depth")
            .0
            .zip(self.both(options, "mean_write_queue_depth").0)
            .unwrap_or((f64::NAN, f64::NAN));
        let in_flight = self.copy_in_flight_ms(options, "resilver").unwrap_or(f64::NAN);
        let perf_ms = m(&|r| self.get("perf-write", r, &["lat_us", "mean"])).unwrap_or(f64::NAN) / 1000.0;
        format!(
            "not the devices: perf reads and writes them at once at {at_once:.0} MiB/s (the slower), yet with \
             {reads:.1} reads and {copies:.1} copies in flight the copy makes {copy:.0} MiB/s; a copy is in flight \
             {in_flight:.0} ms on average (Little's law), perf's writes at QD{QUEUE_DEPTH} {perf_ms:.0} ms: \
             completions wait on the polling thread"
        )
    }

    /// What bounds the verified copy. The resilver checksums completed
    /// reads on worker threads (`ResilverOptions::verify_threads`, 2 by
    /// default, as the `volume` tool runs it) and queues each copy once
    /// checked. The scrub verifies on threads of its own and, waiting on
    /// them rather than on the device (a mean QD far below its 64), gives
    /// crc32c's rate per thread: the workers' capacity is that times their
    /// number, and the verified rate over it is the share they reach while
    /// sharing the guest's two vCPUs with the polling thread.
    fn verify_bound(&self, options: &Options) -> String {
        let (Some(plain), Some(verified)) = self.both(options, "rate_mib_s") else {
            return "unknown (a figure is missing)".into();
        };
        let cost = (1.0 - verified / plain) * 100.0;
        if verified >= 0.9 * plain {
            return format!("the copy, as without verification (verification costs {cost:.0}%)");
        }
        let scrub = |path: &[&str]| self.median(options, |r| self.get("scrub", r, path));
        let crc = self.raw.get(&key("scrub", 1)).and_then(|s| s.get("crc32c")).and_then(Value::as_str);
        let (Some(rate), Some(threads), Some(depth)) =
            (scrub(&["report", "rate_mib_s"]), scrub(&["verify_threads"]), scrub(&["report", "mean_queue_depth"]))
        else {
            return format!("the checksums: verification costs {cost:.0}%");
        };
        let per_thread = rate / threads.max(1.0);
        let capacity = per_thread * RESILVER_VERIFY_THREADS;
        let reads = self.both(options, "mean_read_queue_depth").1.unwrap_or(f64::NAN);
        format!(
            "the checksums: verification costs {cost:.0}% ({plain:.0} -> {verified:.0} MiB/s). crc32c, {}, runs at \
             {per_thread:.0} MiB/s per thread (the scrub's rate per verify thread; it waits on them, mean QD \
             {depth:.1} of {QUEUE_DEPTH}), so the resilver's {RESILVER_VERIFY_THREADS:.0} checksum workers could \
             check {capacity:.0} MiB/s; they check {verified:.0} ({:.0}%) on the guest's two vCPUs, shared with the \
             polling thread, while {reads:.1} reads stay in flight: the devices wait on the checksums",
            crc.unwrap_or("unknown"),
            verified / capacity * 100.0
        )
    }

    /// Each step's figure, round by round.
    pub fn render_steps(&self, options: &Options) -> String {
        let mut out = format!(
            "\nResilver steps ({} ZNS members of {} zones and a conventional spare; {} of data)\n\n",
            vm_rig::format_size(options.size),
            vm_rig::format_size(options.zone_bytes()),
            mib(options.data_bytes()),
        );
        for key in steps(options) {
            let text = self.raw.get(&key).map_or_else(|| "no result".into(), |value| describe(&key, value));
            let _ = writeln!(out, "  {key:<20} {text}");
        }
        let _ = writeln!(out, "\n  what bounds the copy: {}", self.copy_bound(options));
        let _ = writeln!(out, "  what bounds the verified copy: {}", self.verify_bound(options));
        out
    }

    /// The rows: all against our own baselines, medians over the rounds.
    pub fn rows(&self, options: &Options) -> Vec<Row> {
        let m = |figure: &dyn Fn(u32) -> Option<f64>| self.median(options, figure);
        let plain_rate = m(&|r| self.resilver("resilver", r, "rate_mib_s"));
        let verified_rate = m(&|r| self.resilver("resilver-verify", r, "rate_mib_s"));
        let data = mib(options.data_bytes());
        let qd = QUEUE_DEPTH;
        vec![
            Row::new(
                "resilver, no verification".into(),
                "volume replace --no-verify".into(),
                plain_rate,
                format!("slower of perf {}K read, {}K write, QD{qd}", READ_BYTES >> 10, EXTENT_BYTES >> 10),
                m(&|r| self.slower(r, "perf-read", "perf-write")),
                Unit::MibS,
            )
            .target(0.9),
            Row::new(
                "resilver, no verification".into(),
                "volume replace --no-verify".into(),
                plain_rate,
                "the same perf runs at once, slower".into(),
                m(&|r| self.slower(r, "perf-both-read", "perf-both-write")),
                Unit::MibS,
            ),
            Row::new(
                "resilver, verifying".into(),
                "volume replace".into(),
                verified_rate,
                "scrub of the volume, verifying".into(),
                m(&|r| self.get("scrub", r, &["report", "rate_mib_s"])),
                Unit::MibS,
            ),
            Row::new(
                "resilver verifying: reads in flight".into(),
                format!("mean, of {qd}"),
                m(&|r| self.resilver("resilver-verify", r, "mean_read_queue_depth")),
                "scrub, verifying: mean QD".into(),
                m(&|r| self.get("scrub", r, &["report", "mean_queue_depth"])),
                Unit::Depth,
            ),
            Row::new(
                "resilver verifying: copies in flight".into(),
                "mean".into(),
                m(&|r| self.resilver("resilver-verify", r, "mean_write_queue_depth")),
                "resilver without verification".into(),
                m(&|r| self.resilver("resilver", r, "mean_write_queue_depth")),
                Unit::Depth,
            ),
            Row::new(
                format!("full resilver of {data}"),
                "verifying, then the verify pass".into(),
                m(&|r| self.resilver("resilver-verify", r, "duration_s")),
                "without verification".into(),
                m(&|r| self.resilver("resilver", r, "duration_s")),
                Unit::Seconds,
            ),
            Row::new(
                "resilver reads each extent once".into(),
                "bytes read, survivor".into(),
                m(&|r| self.resilver("resilver-verify", r, "bytes_read")),
                "bytes to rebuild".into(),
                m(&|r| self.resilver("resilver-verify", r, "bytes_total")),
                Unit::Bytes,
            ),
        ]
        .into_iter()
        .map(Row::baseline_is_ours)
        .collect()
    }

    /// Figures that are not a pair, each round's and their medians.
    pub fn details(&self, options: &Options) -> Map<String, Value> {
        let mut details = Map::new();
        let figures: [(&str, &str, &[&str]); 14] = [
            ("perf_read_mib_s", "perf-read", &["mib_s"]),
            ("perf_write_mib_s", "perf-write", &["mib_s"]),
            ("perf_both_read_mib_s", "perf-both-read", &["mib_s"]),
            ("perf_both_write_mib_s", "perf-both-write", &["mib_s"]),
            ("scrub_mib_s", "scrub", &["report", "rate_mib_s"]),
            ("scrub_mean_queue_depth", "scrub", &["report", "mean_queue_depth"]),
            ("resilver_mib_s", "resilver", &["resilver", "rate_mib_s"]),
            ("resilver_mean_read_queue_depth", "resilver", &["resilver", "mean_read_queue_depth"]),
            ("resilver_mean_write_queue_depth", "resilver", &["resilver", "mean_write_queue_depth"]),
            ("resilver_verify_mib_s", "resilver-verify", &["resilver", "rate_mib_s"]),
            ("resilver_verify_mean_read_queue_depth", "resilver-verify", &["resilver", "mean_read_queue_depth"]),
            ("resilver_verify_mean_write_queue_depth", "resilver-verify", &["resilver", "mean_write_queue_depth"]),
            ("resilver_verify_duration_s", "resilver-verify", &["resilver", "duration_s"]),
            ("verify_pass_duration_s", "resilver-verify", &["resilver", "verify", "duration_s"]),
        ];
        for (name, step, path) in figures {
            let rounds: Vec<Option<f64>> = (1..=options.rounds).map(|r| self.get(step, r, path)).collect();
            details.insert(name.into(), json!({ "median": median_of(rounds.clone()), "rounds": rounds }));
        }
        let reads = self.median(options, |r| self.resilver("resilver-verify", r, "reads"));
        let read_bytes = self.median(options, |r| self.resilver("resilver-verify", r, "bytes_read"));
        let mean_read = read_bytes.zip(reads).filter(|(_, n)| *n > 0.0).map(|(b, n)| b / n);
        details.insert("resilver_mean_read_bytes".into(), json!(mean_read));
        details.insert("copy_bound".into(), json!(self.copy_bound(options)));
        details.insert("verify_bound".into(), json!(self.verify_bound(options)));
        for (name, step) in [("resilver", "resilver"), ("resilver_verify", "resilver-verify")] {
            details.insert(format!("{name}_copy_in_flight_ms"), json!(self.copy_in_flight_ms(options, step)));
        }
        details.insert("zone_bytes".into(), json!(options.zone_bytes()));
        details.insert("data_bytes".into(), json!(options.data_bytes()));
        details
    }
}

/// A progress line for one step's result.
pub fn describe(key: &str, value: &Value) -> String {
    let mib_s = |v: Option<f64>| v.map_or_else(|| "-".into(), |m| format!("{m:>8.1} MiB/s"));
    if let Some(report) = value.get("resilver").filter(|r| r.is_object()) {
        let n = |f: &str| number(report, &[f]).unwrap_or(f64::NAN);
        let mut text = format!(
            "{}  {:.1} s, QD read {:.1} write {:.1}, {:.0} MiB in {:.0} reads",
            mib_s(number(report, &["rate_mib_s"])),
            n("duration_s"),
            n("mean_read_queue_depth"),
            n("mean_write_queue_depth"),
            n("bytes_read") / f64::from(1 << 20),
            n("reads")
        );
        if let Some(verify) = number(report, &["verify", "rate_mib_s"]) {
            let _ = write!(text, "; verify pass {verify:.1} MiB/s");
        }
        return text;
    }
    if let Some(report) = value.get("report").filter(|r| r.is_object()) {
        let qd = number(report, &["mean_queue_depth"]).unwrap_or(f64::NAN);
        return format!("{}  mean QD {qd:.1}", mib_s(number(report, &["rate_mib_s"])));
    }
    if value.get("command").and_then(Value::as_str) == Some("fail") {
        return "place 1 given up".into();
    }
    match number(value, &["mib_s"]) {
        Some(m) => mib_s(Some(m)),
        None => format!("{key}: no bandwidth in its output"),
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
        assert!(bad(|o| o.fill = 0.5));
        assert!(bad(|o| o.fill = 95.0));
        assert!(bad(|o| o.size = 128 << 20));
        assert!(bad(|o| o.size = (2 << 30) + (1 << 20)), "not a multiple of its 8M zones");
        // The allocator's default software zone: size / 512, a power of
        // two in 1M..=256M.
        let zone = |size: u64| Options { size, ..Options::defaults(false) }.zone_bytes();
        assert_eq!(
            (zone(512 << 20), zone(2 << 30), zone(3 << 30), zone(1 << 40)),
            (1 << 20, 4 << 20, 8 << 20, 256 << 20)
        );
        assert_eq!(Options::defaults(true).data_bytes(), 348913664);
        assert_eq!(Options::defaults(false).data_bytes() % EXTENT_BYTES, 0);
    }

    #[test]
    fn the_script_runs_every_step_and_bounds_each() {
        for options in [Options::defaults(false), Options::defaults(true)] {
            let script = guest_script(&options);
            for key in steps(&options) {
                let started = script.contains(&format!("step {key} ")) || script.contains(&format!("start {key} "));
                assert!(started, "{key} missing");
            }
            assert_eq!(steps(&options).len(), 1 + 9 * options.rounds as usize);
            assert!(script.ends_with("echo resilver-done\n"));
            // Every tool runs through `step` or `start` (a time limit).
            for line in
                script.lines().filter(|l| ["perf ", "scrub ", "volume ", "seqwrite "].iter().any(|t| l.contains(t)))
            {
                assert!(line.starts_with("step ") || line.starts_with("start "), "{line}");
            }
        }
        let script = guest_script(&Options::defaults(false));
        // Place 1 is B in the first round, C after.
        let scrub = |round: u32, member: &str| {
            let limit = Options::defaults(false).step_limit_s(2);
            format!("step scrub.{round} {limit} scrub --pci {SURVIVOR_PCI} --pci {member} --json --no-progress\n")
        };
        assert!(script.contains(&scrub(1, MEMBER_PCI)) && script.contains(&scrub(2, SPARE_PCI)), "{script}");
        assert!(
            script.contains(&format!("step fail.2 60 volume fail --pci {SURVIVOR_PCI} --pci {SPARE_PCI} --place 1"))
        );
        assert!(script.contains("--force --qd 64 --no-progress --json --no-verify --no-verify-after\n"), "{script}");
        assert!(script.contains(&format!("perf --pci {SPARE_PCI} --rw write --yes --bs 256k --qd 64 --offset $offset")));
        assert!(script.contains("finish perf-both-read.3 $reading"));
    }

    /// A shortened `volume replace --json` (the status left out).
    fn replace(verified: bool, rate: f64, bytes_read: u64) -> String {
        let verify = if verified { r#"{"outcome":"clean","rate_mib_s":220.0,"duration_s":1.5}"# } else { "null" };
        format!(
            r#"{{"command":"replace","complete":true,"place":1,"resilver":{{"bytes_copied":1000,"bytes_left":0,
            "bytes_read":{bytes_read},"bytes_total":1000,"checksum_errors":0,"extents_copied":4,"failed_reads":0,
            "mean_read_queue_depth":27.5,"mean_write_queue_depth":56.0,"rate_mib_s":{rate},"reads":2,
            "duration_s":3.0,"verified":{verified},"verify":{verify}}}}}"#
        )
        .replace('\n', "")
    }

    fn output(rounds: u32, bytes_read: u64) -> String {
        let mut out = String::from(
            "rig: boot\n== fill\nBENCH fill {\"mib_s\":50.0,\"data_offset_bytes\":4096,\
             \"volume\":{\"valid_bytes\":1000,\"extents\":4}}\n",
        );
        for r in 1..=rounds {
            let scale = f64::from(r);
            let _ = writeln!(out, "BENCH perf-read.{r} {{\"mib_s\":{}}}", 3000.0 * scale);
            let _ =
                writeln!(out, "BENCH perf-write.{r} {{\"mib_s\":{},\"lat_us\":{{\"mean\":20000.0}}}}", 500.0 * scale);
            let _ = writeln!(out, "BENCH perf-both-read.{r} {{\"mib_s\":400.0}}");
            let _ = writeln!(out, "BENCH perf-both-write.{r} {{\"mib_s\":300.0}}");
            let _ = writeln!(
                out,
                "BENCH scrub.{r} {{\"crc32c\":\"table\",\"verify_threads\":2,\"report\":{{\"rate_mib_s\":200.0,\"mean_queue_depth\":1.5}}}}"
            );
            let _ = writeln!(out, "BENCH fail.{r} {{\"command\":\"fail\",\"place\":1}}");
            let _ = writeln!(out, "BENCH resilver.{r} {}", replace(false, 100.0 * scale, bytes_read));
            let _ = writeln!(out, "BENCH resilver-verify.{r} {}", replace(true, 80.0, bytes_read));
        }
        out
    }

    #[test]
    fn results_make_rows() {
        let options = Options { rounds: 3, ..Options::defaults(false) };
        let results = collect(&output(3, 1000)).unwrap();
        assert!(results.has("fill") && results.has("resilver-verify.3") && !results.has("resilver.4"));
        results.check(&options).unwrap();
        let rows = results.rows(&options);
        assert!(rows.iter().all(|r| r.baseline_ours));
        // Medians over the rounds: 200 against the slower of 6000 and 1000.
        let first = &rows[0];
        assert_eq!((first.ours, first.kernel, first.met()), (Some(200.0), Some(1000.0), Some(false)));
        assert_eq!(rows[1].kernel, Some(300.0));
        assert_eq!((rows[2].ours, rows[2].kernel), (Some(80.0), Some(200.0)));
        assert_eq!((rows[3].unit, rows[3].ours, rows[3].kernel), (Unit::Depth, Some(27.5), Some(1.5)));
        let once = rows.iter().find(|r| r.job == "resilver reads each extent once").unwrap();
        assert_eq!((once.unit, once.ratio()), (Unit::Bytes, Some(1.0)));
        let details = results.details(&options);
        assert_eq!(details["resilver_mib_s"], json!({"median": 200.0, "rounds": [100.0, 200.0, 300.0]}));
        assert_eq!(details["resilver_mean_read_bytes"], json!(500.0));
        // crc32c at 100 MiB/s per thread (the scrub's 200 on 2 threads):
        // the resilver's 2 workers could check 200 MiB/s, and check 80.
        let bound = details["verify_bound"].as_str().unwrap();
        assert!(bound.starts_with("the checksums: verification costs 60% (200 -> 80 MiB/s)"), "{bound}");
        assert!(bound.contains("crc32c, table, runs at 100 MiB/s per thread"), "{bound}");
        assert!(bound.contains("2 checksum workers could check 200 MiB/s; they check 80 (40%)"), "{bound}");
        assert!(bound.contains("while 27.5 reads stay in flight"), "{bound}");
        // 56 copies of 250 bytes in flight at 200 MiB/s: 0.067 ms each.
        let bound = details["copy_bound"].as_str().unwrap();
        assert!(bound.starts_with("not the devices: perf reads and writes them at once at 300 MiB/s"), "{bound}");
        assert!(bound.contains("with 27.5 reads and 56.0 copies in flight the copy makes 200 MiB/s"), "{bound}");
        assert!(bound.contains("perf's writes at QD64 20 ms"), "{bound}");
        let in_flight = details["resilver_copy_in_flight_ms"].as_f64().unwrap();
        assert!((in_flight - 56.0 / (200.0 * f64::from(1 << 20) / 250.0) * 1000.0).abs() < 1e-9);
        let text = results.render_steps(&options);
        assert!(text.contains("resilver-verify.2        80.0 MiB/s  3.0 s, QD read 27.5 write 56.0"), "{text}");
        assert!(text.contains("fail.1               place 1 given up"), "{text}");
        // A missing round leaves the median of the others, not an invented figure.
        let partial = collect(&output(1, 1000)).unwrap();
        assert_eq!(partial.rows(&options)[0].ours, Some(100.0));
        assert!(partial.check(&options).unwrap_err().contains("resilver.2: no report"));
        assert!(collect("BENCH fill {not json").is_err());
    }

    #[test]
    fn a_resilver_that_reads_twice_fails_the_check() {
        let options = Options { rounds: 1, ..Options::defaults(true) };
        let error = collect(&output(1, 2000)).unwrap().check(&options).unwrap_err();
        assert!(error.starts_with("resilver.1: read 2000 bytes of the survivor for 1000"), "{error}");
        let incomplete = output(1, 1000).replace("\"complete\":true", "\"complete\":false");
        assert!(collect(&incomplete).unwrap().check(&options).unwrap_err().ends_with("not complete"));
        let unverified = output(1, 1000).replace("\"outcome\":\"clean\"", "\"outcome\":\"damaged\"");
        assert!(collect(&unverified).unwrap().check(&options).unwrap_err().contains("the verify pass's outcome"));
    }
}

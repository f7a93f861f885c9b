//! The pool part of `hack/bench`: how writes scale over 1, 2 and 4 devices
//! of a pool, and how long redundancy takes to come back after losing one
//! of four, by `volume replace` and by the distributed rebuild, in one VM
//! boot of its own.
//!
//! Five identical conventional controllers: A, B, C and D make the pool,
//! E is the spare. Conventional, because perf (the baseline) writes them.
//!
//! Each round, in this order:
//! - **Write scaling.** `perf-N` writes `scale` bytes to each of the first
//!   N devices at once, N perf processes (256 KiB, QD8 each), for N = 1,
//!   2, 4; the pool's rate is their bytes over the slowest one's time.
//!   `seqwrite-N` formats a `single` pool over the same N devices and
//!   writes as many bytes (256 KiB, QD 8 per device, `--zero-copy
//!   --same-data`: the peer's work and no more; checksums on).
//! - **Rebuild.** `fill` formats a 2-copy mirror over A–D holding `hold`
//!   bytes of copies per device. `fail` gives up place 3 (D). `perf-spare`
//!   writes `hold` bytes to E (256 KiB, QD64): what one device's write
//!   bandwidth allows a replace. `replace` puts E in place 3 (no
//!   verification, as the resilver part's first copy). `fail-again` gives
//!   up place 3 (E), and `rebuild` writes its copies onto A, B and C (the
//!   distributed rebuild), reading from all three at once. Neither
//!   verifies as it reads nor scrubs after (`--no-verify
//!   --no-verify-after`): the two copy the same bytes, and the time is the
//!   copy's.
//!
//! Each rebuild must copy every copy the lost place held and end complete
//! ([`Results::check`] fails the benchmark otherwise).
//!
//! Guest protocol: `zoned`'s (`== KEY`, `BENCH KEY JSON`, `bench-failed
//! KEY status N`); keys are `STEP.ROUND`.

use super::resilver::{median_of, number, steps_json, GUEST_STEPS};
use super::{Row, Unit};
use serde_json::{json, Map, Value};
use std::fmt::Write as _;

/// The pool's four controllers, then the spare.
pub const PCIS: [&str; 5] = ["0000:00:10.0", "0000:00:11.0", "0000:00:12.0", "0000:00:13.0", "0000:00:14.0"];
/// Write size: one extent.
const EXTENT_BYTES: u64 = 256 << 10;
/// perf's queue depth per device, and seqwrite's per device of the pool.
const WRITE_DEPTH: u32 = 8;
/// The rebuilds' reads in flight per device, and perf's on the spare.
pub const REBUILD_DEPTH: u32 = 64;
/// Pool sizes of the write scaling.
pub const SCALING: [usize; 3] = [1, 2, 4];
/// The slowest rate a step may run at before it is killed as hung.
const SLOWEST_MIB_S: u64 = 8;
/// Each step's allowance for start-up.
const STEP_OVERHEAD_S: u64 = 60;
/// A pessimistic rate for the estimate of the part's length.
const ESTIMATE_MIB_S: u64 = 40;

/// What the pool part runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Each namespace, in bytes.
    pub size: u64,
    /// Bytes of copies each device of the mirror holds before one is lost.
    pub hold: u64,
    /// Bytes written to each device by each write-scaling step.
    pub scale: u64,
    pub rounds: u32,
}

impl Options {
    pub fn defaults(quick: bool) -> Self {
        if quick {
            Options { size: 1 << 30, hold: 256 << 20, scale: 128 << 20, rounds: 1 }
        } else {
            Options { size: 2 << 30, hold: 1 << 30, scale: 512 << 20, rounds: 3 }
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(256 << 20..=16 << 30).contains(&self.size) {
            return Err("--pool-size is 256M to 16G".into());
        }
        // The distributed rebuild puts a lost device's copies on the three
        // left: each then holds 4/3 of `hold`, with room for metadata.
        if self.hold < 16 << 20 || self.hold * 4 / 3 > self.size * 3 / 4 {
            return Err(format!(
                "--pool-hold is 16M to 9/16 of --pool-size ({}): the three survivors take the lost one's copies",
                vm_rig::format_size(self.size * 9 / 16)
            ));
        }
        if self.scale < 16 << 20 || self.scale > self.size / 2 {
            return Err("--pool-scale is 16M to half of --pool-size".into());
        }
        Ok(())
    }

    /// User bytes the mirror holds: two copies over four devices.
    pub fn data_bytes(&self) -> u64 {
        (2 * self.hold) / EXTENT_BYTES * EXTENT_BYTES
    }

    fn step_limit_s(&self, bytes: u64) -> u64 {
        bytes / (SLOWEST_MIB_S << 20) + STEP_OVERHEAD_S
    }

    /// An upper estimate of the part, in seconds.
    pub fn estimate_s(&self) -> u64 {
        let per_round = 2 * 7 * self.scale + 2 * self.data_bytes() + 4 * self.hold;
        u64::from(self.rounds) * (per_round / (ESTIMATE_MIB_S << 20) + steps_per_round() as u64 * 10)
    }
}

fn steps_per_round() -> usize {
    ROUND_STEPS.len()
}

/// The steps of a round, in order (the perf-N steps stand for their N
/// processes, `perf-N-I`).
pub const ROUND_STEPS: [&str; 12] = [
    "perf-1",
    "perf-2",
    "perf-4",
    "seqwrite-1",
    "seqwrite-2",
    "seqwrite-4",
    "fill",
    "fail",
    "perf-spare",
    "replace",
    "fail-again",
    "rebuild",
];

fn key(step: &str, round: u32) -> String {
    format!("{step}.{round}")
}

/// Every result's key, in order.
pub fn steps(options: &Options) -> Vec<String> {
    let mut keys = Vec::new();
    for round in 1..=options.rounds {
        for step in ROUND_STEPS {
            match step.strip_prefix("perf-").and_then(|n| n.parse::<usize>().ok()) {
                Some(n) => keys.extend((0..n).map(|i| key(&format!("perf-{n}-{i}"), round))),
                None => keys.push(key(step, round)),
            }
        }
    }
    keys
}

fn pcis(devices: &[&str]) -> String {
    devices.iter().map(|p| format!("--pci {p}")).collect::<Vec<_>>().join(" ")
}

pub fn guest_script(options: &Options) -> String {
    let mut script = String::from(GUEST_STEPS);
    let (bs_k, qd) = (EXTENT_BYTES >> 10, WRITE_DEPTH);
    let pool = pcis(&PCIS[..4]);
    let three = pcis(&PCIS[..3]);
    let with_spare = pcis(&[PCIS[0], PCIS[1], PCIS[2], PCIS[4]]);
    let spare = PCIS[4];
    let hold = options.hold;
    let data = options.data_bytes();
    let rd = REBUILD_DEPTH;
    for round in 1..=options.rounds {
        let k = |step: &str| key(step, round);
        for n in SCALING {
            let limit = options.step_limit_s(options.scale * n as u64);
            let mut waits = Vec::new();
            for (i, pci) in PCIS[..n].iter().enumerate() {
                let name = k(&format!("perf-{n}-{i}"));
                let _ = writeln!(
                    script,
                    "start {name} {limit} perf --pci {pci} --rw write --yes --bs {bs_k}k --qd {qd} --io-bytes {} \
                     --time {limit} --json; pid{i}=$started",
                    options.scale
                );
                waits.push(format!("finish {name} $pid{i} {limit}"));
            }
            let _ = writeln!(script, "{}", waits.join("; "));
        }
        for n in SCALING {
            let limit = options.step_limit_s(options.scale * n as u64);
            let _ = writeln!(
                script,
                "step {} {limit} seqwrite {} --profile single --format --yes --bs {bs_k}k --size {} --iodepth {} \
                 --zero-copy --same-data --json --no-progress",
                k(&format!("seqwrite-{n}")),
                pcis(&PCIS[..n]),
                options.scale * n as u64,
                qd as usize * n,
            );
        }
        let fill_limit = options.step_limit_s(2 * data);
        let copy_limit = options.step_limit_s(2 * hold);
        let _ = writeln!(
            script,
            "step {} {fill_limit} seqwrite {pool} --profile mirror --format --yes --bs {bs_k}k --size {data} \
             --iodepth {} --checksum-threads 2 --json --no-progress",
            k("fill"),
            4 * qd,
        );
        let _ = writeln!(script, "step {} {STEP_OVERHEAD_S} volume fail {pool} --place 3 --yes --json", k("fail"));
        let _ = writeln!(
            script,
            "step {} {copy_limit} perf --pci {spare} --rw write --yes --bs {bs_k}k --qd {rd} --io-bytes {hold} \
             --time {copy_limit} --json",
            k("perf-spare")
        );
        let _ = writeln!(
            script,
            "step {} {copy_limit} volume replace {three} --place 3 --new-pci {spare} --yes --force --qd {rd} \
             --no-verify --no-verify-after --no-progress --json",
            k("replace")
        );
        let _ = writeln!(
            script,
            "step {} {STEP_OVERHEAD_S} volume fail {with_spare} --place 3 --yes --json",
            k("fail-again")
        );
        let _ = writeln!(
            script,
            "step {} {copy_limit} volume rebuild {three} --place 3 --qd {rd} --no-verify --no-verify-after \
             --no-progress --json",
            k("rebuild")
        );
    }
    script += "echo pool-done\n";
    script
}

/// What the pool part measured: each step's JSON, by key.
#[derive(Debug, Default)]
pub struct Results {
    pub raw: Map<String, Value>,
}

pub fn collect(output: &str) -> Result<Results, String> {
    Ok(Results { raw: steps_json(output)? })
}

const MIB: f64 = (1 << 20) as f64;

impl Results {
    pub fn has(&self, key: &str) -> bool {
        self.raw.contains_key(key)
    }

    fn get(&self, step: &str, round: u32, path: &[&str]) -> Option<f64> {
        number(self.raw.get(&key(step, round))?, path)
    }

    fn median(&self, options: &Options, figure: impl Fn(u32) -> Option<f64>) -> Option<f64> {
        median_of((1..=options.rounds).map(figure))
    }

    /// The N perf processes of a round at once: their bytes over the
    /// slowest one's time, in MiB/s.
    fn perf_pool(&self, n: usize, round: u32) -> Option<f64> {
        let (mut bytes, mut seconds) = (0.0, 0.0f64);
        for i in 0..n {
            let step = format!("perf-{n}-{i}");
            bytes += self.get(&step, round, &["ios"])? * self.get(&step, round, &["bs"])?;
            seconds = seconds.max(self.get(&step, round, &["seconds"])?);
        }
        (seconds > 0.0).then(|| bytes / MIB / seconds)
    }

    fn seqwrite(&self, n: usize, round: u32) -> Option<f64> {
        self.get(&format!("seqwrite-{n}"), round, &["mib_s"])
    }

    /// A rebuild's report figure (`replace`'s under "resilver", the
    /// distributed one's under "rebuild").
    fn rebuild(&self, step: &str, round: u32, field: &str) -> Option<f64> {
        let section = if step == "rebuild" { "rebuild" } else { "resilver" };
        self.get(step, round, &[section, field])
    }

    /// Every rebuild copied everything the lost place held, complete.
    pub fn check(&self, options: &Options) -> Result<(), String> {
        for round in 1..=options.rounds {
            for step in ["replace", "rebuild"] {
                let name = key(step, round);
                let field = |f: &str| self.rebuild(step, round, f).ok_or(format!("{name}: no {f}"));
                let (total, copied) = (field("bytes_total")?, field("bytes_copied")?);
                let expect = |ok: bool, what: String| if ok { Ok(()) } else { Err(format!("{name}: {what}")) };
                expect(total > 0.0, "nothing to rebuild".into())?;
                expect(copied == total, format!("copied {copied} of {total} bytes"))?;
                expect(field("bytes_left")? == 0.0, "bytes left to rebuild at the end".into())?;
                let errors = field("checksum_errors")? + field("failed_reads")?;
                expect(errors == 0.0, format!("{errors} checksum errors and failed reads"))?;
                expect(self.raw[&name].get("complete") == Some(&json!(true)), "not complete".into())?;
            }
        }
        Ok(())
    }

    pub fn render_steps(&self, options: &Options) -> String {
        let mut out = format!(
            "\nPool steps (five conventional controllers of {}; write scaling {} per device; a 2-copy mirror over \
             four holding {} per device)\n\n",
            vm_rig::format_size(options.size),
            vm_rig::format_size(options.scale),
            vm_rig::format_size(options.hold),
        );
        for key in steps(options) {
            let text = self.raw.get(&key).map_or_else(|| "no result".into(), |value| describe(&key, value));
            let _ = writeln!(out, "  {key:<20} {text}");
        }
        out
    }

    /// The rows, medians over the rounds.
    pub fn rows(&self, options: &Options) -> Vec<Row> {
        let m = |figure: &dyn Fn(u32) -> Option<f64>| self.median(options, figure);
        let mut rows = Vec::new();
        for n in SCALING {
            rows.push(Row::new(
                format!("pool write, {n} device{}", if n == 1 { "" } else { "s" }),
                "seqwrite single, zero-copy".into(),
                m(&|r| self.seqwrite(n, r)),
                format!("perf on the {n} at once"),
                m(&|r| self.perf_pool(n, r)),
                Unit::MibS,
            ));
        }
        let hold = vm_rig::format_size(options.hold);
        let rate = |step: &'static str| move |r: u32| self.rebuild(step, r, "rate_mib_s");
        rows.push(Row::new(
            format!("redundancy back, one of 4 lost ({hold} each)"),
            "volume rebuild (distributed)".into(),
            m(&rate("rebuild")),
            "volume replace".into(),
            m(&rate("replace")),
            Unit::MibS,
        ));
        rows.push(Row::new(
            "replace onto the spare".into(),
            "volume replace".into(),
            m(&rate("replace")),
            "perf writing the spare alone".into(),
            m(&|r| self.get("perf-spare", r, &["mib_s"])),
            Unit::MibS,
        ));
        rows.push(Row::new(
            format!("time to full redundancy ({hold} lost)"),
            "volume rebuild (distributed)".into(),
            m(&|r| self.rebuild("rebuild", r, "duration_s")),
            "volume replace".into(),
            m(&|r| self.rebuild("replace", r, "duration_s")),
            Unit::Seconds,
        ));
        rows.into_iter().map(Row::baseline_is_ours).collect()
    }

    /// Every figure, each round's and their medians.
    pub fn details(&self, options: &Options) -> Map<String, Value> {
        let mut details = Map::new();
        let mut put = |name: String, figure: &dyn Fn(u32) -> Option<f64>| {
            let rounds: Vec<Option<f64>> = (1..=options.rounds).map(figure).collect();
            details.insert(name, json!({ "median": median_of(rounds.clone()), "rounds": rounds }));
        };
        for n in SCALING {
            put(format!("perf_{n}_mib_s"), &|r| self.perf_pool(n, r));
            put(format!("seqwrite_{n}_mib_s"), &|r| self.seqwrite(n, r));
            put(format!("perf_{n}_over_1"), &|r| Some(self.perf_pool(n, r)? / self.perf_pool(1, r)?));
            put(format!("seqwrite_{n}_over_1"), &|r| Some(self.seqwrite(n, r)? / self.seqwrite(1, r)?));
        }
        put("rebuild_over_replace_rate".into(), &|r| {
            Some(self.rebuild("rebuild", r, "rate_mib_s")? / self.rebuild("replace", r, "rate_mib_s")?)
        });
        put("perf_spare_mib_s".into(), &|r| self.get("perf-spare", r, &["mib_s"]));
        for step in ["replace", "rebuild"] {
            for field in ["rate_mib_s", "duration_s", "bytes_total", "mean_read_queue_depth", "mean_write_queue_depth"]
            {
                put(format!("{step}_{field}"), &|r| self.rebuild(step, r, field));
            }
        }
        details
    }
}

/// A progress line for one step's result.
pub fn describe(key: &str, value: &Value) -> String {
    let n = |path: &[&str]| number(value, path).unwrap_or(f64::NAN);
    for section in ["resilver", "rebuild"] {
        if value.get(section).is_some_and(Value::is_object) {
            return format!(
                "{:>8.1} MiB/s  {:.1} s, {:.0} MiB, QD read {:.1} write {:.1}",
                n(&[section, "rate_mib_s"]),
                n(&[section, "duration_s"]),
                n(&[section, "bytes_total"]) / MIB,
                n(&[section, "mean_read_queue_depth"]),
                n(&[section, "mean_write_queue_depth"]),
            );
        }
    }
    if value.get("mib_s").is_some() {
        return format!("{:>8.1} MiB/s", n(&["mib_s"]));
    }
    let _ = key;
    "done".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_runs_every_step_it_expects_a_result_for() {
        let options = Options::defaults(true);
        options.validate().unwrap();
        let script = guest_script(&options);
        for key in steps(&options) {
            assert!(
                script.contains(&format!("start {key} ")) || script.contains(&format!("step {key} ")),
                "{key} never runs"
            );
        }
        assert!(Options { hold: 1 << 30, ..Options::defaults(true) }.validate().is_err(), "survivors too small");
    }

    #[test]
    fn the_pool_rate_is_all_bytes_over_the_slowest_time() {
        let mut results = Results::default();
        for (i, seconds) in [(0, 2.0), (1, 4.0)] {
            results
                .raw
                .insert(key(&format!("perf-2-{i}"), 1), json!({ "ios": 1024, "bs": 262144, "seconds": seconds }));
        }
        assert_eq!(results.perf_pool(2, 1), Some(512.0 / 4.0));
        assert_eq!(results.perf_pool(4, 1), None);
    }
}

//! What `perf` measured and how it says so: each worker's result, the
//! per-second series, the `--profile` phases (the driver's and the raw
//! engine's), and the report as text or JSON.

use super::Args;
use nvme_driver::clock::Clock;
use nvme_driver::queue::{PhaseTicks, QueueStats};
use nvme_driver::{Controller, Namespace};
use nvme_report::histogram::Histogram;
use serde_json::json;
use std::time::Duration;

/// What one queue pair's thread measured.
#[derive(Debug, Default)]
pub(super) struct WorkerResult {
    pub(super) reads: Histogram,
    pub(super) writes: Histogram,
    pub(super) bytes: u64,
    pub(super) errors: u64,
    pub(super) first_error: Option<String>,
    pub(super) elapsed: Duration,
    pub(super) stats: QueueStats,
    /// With --profile: nanoseconds by phase, summed over the run.
    pub(super) profile: Option<ProfileNs>,
    /// With --per-second: bytes completed in each second of the run.
    pub(super) per_second: Option<PerSecond>,
    /// Queue pairs whose rings and PRP lists are on 4 KiB pages: no 2 MiB
    /// huge page was free for them.
    pub(super) rings_on_small_pages: usize,
}

/// Bytes completed per second of a run, by the clock's ticks.
#[derive(Debug, Default, Clone)]
pub(super) struct PerSecond {
    start: u64,
    second: u64,
    bytes: Vec<u64>,
}

impl PerSecond {
    pub(super) fn new(clock: &Clock) -> Self {
        PerSecond { start: clock.now(), second: clock.ticks(Duration::from_secs(1)).max(1), bytes: Vec::new() }
    }

    fn add(&mut self, now: u64, bytes: u64) {
        let at = (now.saturating_sub(self.start) / self.second) as usize;
        if self.bytes.len() <= at {
            self.bytes.resize(at + 1, 0);
        }
        self.bytes[at] += bytes;
    }

    pub(super) fn merge(&mut self, other: &PerSecond) {
        if self.bytes.len() < other.bytes.len() {
            self.bytes.resize(other.bytes.len(), 0);
        }
        for (mine, theirs) in self.bytes.iter_mut().zip(&other.bytes) {
            *mine += theirs;
        }
    }
}

/// Nanoseconds spent in each phase over a run (see `--profile`), and the
/// counts they divide by.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct ProfileNs {
    /// The whole submit/complete loop.
    total: f64,
    /// Building and validating requests (`Namespace::read`/`write`).
    request: f64,
    phases: [f64; 8],
    empty_polls: u64,
    doorbells: u64,
}

/// The driver's phases in `ProfileNs::phases`, in order.
const PHASES: [&str; 8] = ["checks", "data_pointer", "sqe", "doorbell", "empty_polls", "reaping", "callback", "device"];

impl ProfileNs {
    pub(super) fn of(clock: &Clock, total: u64, request: u64, t: PhaseTicks) -> Self {
        let ns = |ticks: u64| clock.nanos(ticks) as f64;
        ProfileNs {
            total: ns(total),
            request: ns(request),
            phases: [t.checks, t.data_pointer, t.sqe, t.doorbell, t.empty_poll, t.reaping, t.callback, t.device]
                .map(ns),
            empty_polls: t.empty_polls,
            doorbells: t.doorbells,
        }
    }

    pub(super) fn add(&mut self, other: &ProfileNs) {
        self.total += other.total;
        self.request += other.request;
        for (mine, theirs) in self.phases.iter_mut().zip(other.phases) {
            *mine += theirs;
        }
        self.empty_polls += other.empty_polls;
        self.doorbells += other.doorbells;
    }

    /// perf's own share: the loop less the request building and every
    /// driver phase but the device's, which overlaps the empty polls.
    fn bookkeeping(&self) -> f64 {
        self.total - self.request - self.phases[..7].iter().sum::<f64>()
    }
}

impl WorkerResult {
    /// One I/O of `bs` bytes submitted at `submitted`, completed at `now`.
    pub(super) fn record(
        &mut self,
        clock: &Clock,
        now: u64,
        submitted: u64,
        read: bool,
        bs: u64,
        status: Result<(), String>,
    ) {
        let latency_ns = clock.nanos(now.saturating_sub(submitted));
        if read {
            self.reads.record(latency_ns);
        } else {
            self.writes.record(latency_ns);
        }
        match status {
            Ok(()) => {
                self.bytes += bs;
                if let Some(series) = &mut self.per_second {
                    series.add(now, bs);
                }
            }
            Err(error) => {
                self.errors += 1;
                self.first_error.get_or_insert(error);
            }
        }
    }
}

/// The raw engine's phase timings (`--profile`), in the driver's terms.
pub(super) struct RawTimes {
    pub(super) ticks: PhaseTicks,
    /// Commands pushed since the last doorbell.
    pub(super) unrung: Vec<usize>,
    pub(super) rung_at: Vec<u64>,
}

impl RawTimes {
    pub(super) fn new(qd: usize) -> Self {
        RawTimes { ticks: PhaseTicks::default(), unrung: Vec::with_capacity(qd), rung_at: vec![0; qd] }
    }

    pub(super) fn submitted(&mut self, cid: usize, start: u64, end: u64) {
        self.ticks.submits += 1;
        self.ticks.sqe += end - start;
        self.unrung.push(cid);
    }

    /// The doorbell was rung from `start` to `end` for what was pushed.
    pub(super) fn rung(&mut self, start: u64, end: u64) {
        self.ticks.doorbells += 1;
        self.ticks.doorbell += end - start;
        for cid in self.unrung.drain(..) {
            self.rung_at[cid] = end;
        }
    }

    pub(super) fn reaped(&mut self, done: &[(u16, u16)], start: u64, end: u64) {
        if done.is_empty() {
            self.ticks.empty_polls += 1;
            self.ticks.empty_poll += end - start;
            return;
        }
        self.ticks.reaping_polls += 1;
        self.ticks.reaping += end - start;
        for &(cid, _) in done {
            self.ticks.completions += 1;
            self.ticks.device += end.saturating_sub(self.rung_at[usize::from(cid)]);
        }
    }
}

pub(super) fn report(
    args: &Args,
    controller: &Controller,
    ns: &Namespace,
    entries: u16,
    zone_count: Option<usize>,
    total: &WorkerResult,
) {
    let run = Run { args, controller, ns, entries, zone_count, total };
    if args.json {
        report_json(&run);
    } else {
        report_text(&run);
    }
}

/// What one run's report is made from.
struct Run<'a> {
    args: &'a Args,
    controller: &'a Controller,
    ns: &'a Namespace,
    entries: u16,
    zone_count: Option<usize>,
    total: &'a WorkerResult,
}

/// The run's figures, as both reports give them.
struct Figures {
    zoned_mode: &'static str,
    clock: &'static str,
    seconds: f64,
    ios: u64,
    iops: f64,
    mib_s: f64,
    /// Reads and writes together.
    all: Histogram,
    rw: String,
    /// Each whole second's MiB/s.
    per_second: Option<Vec<f64>>,
}

impl Figures {
    fn of(args: &Args, total: &WorkerResult) -> Figures {
        let seconds = total.elapsed.as_secs_f64().max(1e-9);
        let ios = total.reads.count() + total.writes.count();
        let mut all = total.reads.clone();
        all.merge(&total.writes);
        Figures {
            zoned_mode: if args.zone_append { "zone-append" } else { "write-pointer" },
            clock: if Clock::new(args.clock).is_tsc() { "tsc" } else { "os" },
            seconds,
            ios,
            iops: ios as f64 / seconds,
            mib_s: total.bytes as f64 / seconds / (1024.0 * 1024.0),
            all,
            rw: format!("{:?}", args.rw).to_lowercase(),
            // The last second is partial and left out.
            per_second: total.per_second.as_ref().map(|series| {
                let whole = series.bytes.len().saturating_sub(1);
                series.bytes[..whole].iter().map(|&b| b as f64 / f64::from(1 << 20)).collect()
            }),
        }
    }

    /// `n` per I/O.
    fn per_io(&self, n: u64) -> f64 {
        if self.ios == 0 {
            0.0
        } else {
            n as f64 / self.ios as f64
        }
    }
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn lat(h: &Histogram) -> serde_json::Value {
    json!({
        "mean": h.mean() / 1000.0,
        "p50": us(h.quantile(0.50)),
        "p99": us(h.quantile(0.99)),
        "p999": us(h.quantile(0.999)),
        "min": us(h.min()),
        "max": us(h.max()),
    })
}

/// The report as one JSON object.
fn report_json(run: &Run<'_>) {
    let Run { args, controller, ns, entries, zone_count, total } = *run;
    let f = Figures::of(args, total);
    let out = json!({
        "iops": f.iops,
        "mib_s": f.mib_s,
        "lat_us": lat(&f.all),
        "read": { "ios": total.reads.count(), "lat_us": lat(&total.reads) },
        "write": { "ios": total.writes.count(), "lat_us": lat(&total.writes) },
        "ios": f.ios,
        "errors": total.errors,
        "seconds": f.seconds,
        "rw": f.rw,
        "engine": format!("{:?}", args.engine).to_lowercase(),
        "bs": args.bs,
        "qd": args.qd,
        "qpairs": args.qpairs,
        "pci": controller.transport().name(),
        "nsid": ns.nsid(),
        "shadow_doorbells": controller.shadow_doorbells(),
        "sgl_mode": args.sgl,
        "clock": f.clock,
        "queue_entries": entries,
        "rings_on_huge_pages": total.rings_on_small_pages == 0,
        "io_timeout_s": args.io_timeout,
        "sgl_above_bytes": controller.sgl_threshold(),
        "sq_mmio_per_io": f.per_io(total.stats.sq_doorbell_mmio_writes),
        "cq_mmio_per_io": f.per_io(total.stats.cq_doorbell_mmio_writes),
        "profile_ns_per_io": total.profile.map(|p| profile_json(&p, f.ios)),
        "zoned": zone_count.map(|zones| json!({ "mode": f.zoned_mode, "zones": zones })),
        "mib_s_per_second": f.per_second,
        "copy_in": args.copy_in,
        "partial": nvme_examples::interrupt::requested(),
        "interrupted_by": nvme_examples::interrupt::signal_name(),
    });
    println!("{out}");
}

/// The report in words and a table.
fn report_text(run: &Run<'_>) {
    let Run { args, controller, ns, entries, zone_count, total } = *run;
    let f = Figures::of(args, total);
    let (iops, mib_s, all, ios, seconds, rw, clock, zoned_mode) =
        (f.iops, f.mib_s, &f.all, f.ios, f.seconds, &f.rw, f.clock, f.zoned_mode);
    let per_io = |n: u64| f.per_io(n);
    let per_second = &f.per_second;
    if let Some(signal) = nvme_examples::interrupt::signal_name() {
        println!("partial: stopped by {signal} after {seconds:.1} s of --time {}", args.time);
    }
    println!(
        "perf: {rw} bs={} qd={} qpairs={} on {} ns {} for {:.1} s ({} engine, shadow doorbells {}, {}, \
         {entries}-entry queues on {} pages, {clock} clock)",
        args.bs,
        args.qd,
        args.qpairs,
        controller.transport().name(),
        ns.nsid(),
        seconds,
        format!("{:?}", args.engine).to_lowercase(),
        if controller.shadow_doorbells() { "on" } else { "off" },
        match controller.sgl_threshold() {
            None => "PRPs".to_string(),
            Some(0) => "SGLs".to_string(),
            Some(above) => format!("SGLs above {above} bytes"),
        },
        if total.rings_on_small_pages == 0 { "2 MiB" } else { "4 KiB" },
    );
    if let Some(zones) = zone_count {
        println!("  zoned: {zoned_mode} writes, each of {zones} zone(s) written once from its start");
    }
    println!(
        "  {:>12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "IOPS", "MiB/s", "mean us", "p50 us", "p99 us", "p99.9 us", "max us"
    );
    println!(
        "  {:>12.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
        iops,
        mib_s,
        all.mean() / 1000.0,
        us(all.quantile(0.5)),
        us(all.quantile(0.99)),
        us(all.quantile(0.999)),
        us(all.max())
    );
    println!(
        "  doorbell MMIO writes per I/O: SQ {:.3}, CQ {:.3}; errors: {}",
        per_io(total.stats.sq_doorbell_mmio_writes),
        per_io(total.stats.cq_doorbell_mmio_writes),
        total.errors
    );
    if let Some(series) = &per_second {
        let text: Vec<String> = series.iter().map(|mib_s| format!("{mib_s:.0}")).collect();
        println!("  MiB/s by second (whole seconds): {}", text.join(" "));
    }
    if let Some(profile) = &total.profile {
        println!(
            "  per I/O, ns (--profile; {:.1} empty poll passes and {:.2} doorbells per I/O; the device's time \
             overlaps the empty polls):",
            per_io(profile.empty_polls),
            per_io(profile.doorbells)
        );
        let phases = profile_per_io(profile, ios);
        println!("  {}", phases.iter().map(|(name, _)| format!("{name:>12}")).collect::<String>());
        println!("  {}", phases.iter().map(|(_, ns)| format!("{ns:>12.0}")).collect::<String>());
    }
}

/// The `--profile` breakdown, per I/O.
fn profile_per_io(profile: &ProfileNs, ios: u64) -> Vec<(&'static str, f64)> {
    let per_io = |ns: f64| ns / ios.max(1) as f64;
    let mut phases = vec![("request", per_io(profile.request))];
    phases
        .extend(PHASES.iter().zip(profile.phases).filter(|(name, _)| **name != "device").map(|(n, v)| (*n, per_io(v))));
    phases.push(("perf", per_io(profile.bookkeeping())));
    phases.push(("device", per_io(profile.phases[7])));
    phases
}

fn profile_json(profile: &ProfileNs, ios: u64) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for (name, ns) in profile_per_io(profile, ios) {
        out.insert(name.into(), json!(ns));
    }
    out.insert("total".into(), json!(profile.total / ios.max(1) as f64));
    out.insert("empty_polls_per_io".into(), json!(profile.empty_polls as f64 / ios.max(1) as f64));
    out.insert("doorbells_per_io".into(), json!(profile.doorbells as f64 / ios.max(1) as f64));
    serde_json::Value::Object(out)
}

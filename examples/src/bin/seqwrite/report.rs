//! What a run measured, and its report: the latency histogram and the
//! per-interval log as writes complete, then the text or JSON summary,
//! fio-style logs, the SVG chart and the read-back check.

use crate::feed::fill;
use crate::Args;
use nvme_report::histogram::Histogram;
use nvme_report::series::flatness;
use nvme_report::svg::{line_chart, Series};
use std::collections::VecDeque;
use std::io::Write as _;
use std::time::{Duration, Instant};
use zoned_allocator::{checksum, Error, Volume, VolumeStats, WriteDone, WriteMode};

/// One log interval.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub(crate) struct Interval {
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

impl Interval {
    fn empty() -> Self {
        Interval { end_ms: 0, bytes: 0, writes: 0, latency_ns_sum: 0, duration_ms: 0 }
    }
}

/// The measurements of a run, kept as writes are submitted and complete.
pub(crate) struct Tally {
    pub(crate) started: Instant,
    pub(crate) latency: Histogram,
    pub(crate) intervals: Vec<Interval>,
    current: Interval,
    interval_start: Instant,
    last_progress: Instant,
    /// (The writes in flight, in submission order: they mostly complete
    /// in it, so the search ends at the front, cheaper than hashing.)
    submitted_at: VecDeque<(u64, Instant)>,
    /// Bytes submitted, written (completed), and written since the last
    /// commit.
    pub(crate) submitted: u64,
    pub(crate) written: u64,
    pub(crate) since_commit: u64,
    pub(crate) commits: u32,
    pub(crate) commit_time: Duration,
}

impl Tally {
    pub(crate) fn new() -> Self {
        let started = Instant::now();
        Tally {
            started,
            latency: Histogram::new(),
            intervals: Vec::new(),
            current: Interval::empty(),
            interval_start: started,
            last_progress: started,
            submitted_at: VecDeque::new(),
            submitted: 0,
            written: 0,
            since_commit: 0,
            commits: 0,
            commit_time: Duration::ZERO,
        }
    }

    /// Writes submitted and not yet complete.
    pub(crate) fn in_flight(&self) -> usize {
        self.submitted_at.len()
    }

    pub(crate) fn submitted(&mut self, id: u64, bs: u64) {
        self.submitted_at.push_back((id, Instant::now()));
        self.submitted += bs;
    }

    /// A write completed at `now`. Those that complete while a commit
    /// waits (`during_commit`) count in the interval's bytes but not in its
    /// latency sum, nor toward the next commit.
    pub(crate) fn completed(
        &mut self,
        done: WriteDone,
        now: Instant,
        bs: u64,
        during_commit: bool,
    ) -> Result<(), String> {
        done.result.map_err(|e| format!("write: {e}"))?;
        let at = self.submitted_at.iter().position(|&(id, _)| id == done.id);
        let issued = at.and_then(|at| self.submitted_at.remove(at)).map_or(now, |(_, issued)| issued);
        let ns = if during_commit { Instant::now() } else { now }.duration_since(issued).as_nanos() as u64;
        self.latency.record(ns);
        self.current.bytes += bs;
        self.current.writes += 1;
        self.written += bs;
        if !during_commit {
            self.current.latency_ns_sum += ns;
            self.since_commit += bs;
        }
        Ok(())
    }

    /// Closes the interval once `length` has passed.
    pub(crate) fn roll(&mut self, now: Instant, length: Duration) {
        if now.duration_since(self.interval_start) >= length {
            self.current.duration_ms = now.duration_since(self.interval_start).as_millis() as u64;
            self.current.end_ms = now.duration_since(self.started).as_millis() as u64;
            self.intervals.push(self.current);
            self.current = Interval::empty();
            self.interval_start = now;
        }
    }

    /// Keeps the last, partial interval, if it saw a write.
    pub(crate) fn finish(&mut self, elapsed: Duration) {
        if self.current.writes > 0 {
            self.current.duration_ms = self.interval_start.elapsed().as_millis().max(1) as u64;
            self.current.end_ms = elapsed.as_millis() as u64;
            self.intervals.push(self.current);
        }
    }

    /// The progress bar, at most four times a second.
    pub(crate) fn progress(&mut self, now: Instant, target: u64) {
        if now.duration_since(self.last_progress) < Duration::from_millis(250) {
            return;
        }
        self.last_progress = now;
        let fraction = self.written as f64 / target as f64;
        let rate = self.written as f64 / (1 << 20) as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
        let eta = (target - self.written) as f64 / (1 << 20) as f64 / rate.max(1e-9);
        let bar: String = (0..30).map(|i| if (i as f64) < fraction * 30.0 { '#' } else { '.' }).collect();
        eprint!("\r[{bar}] {:5.1}% {rate:8.1} MiB/s ETA {eta:5.0} s ", fraction * 100.0);
    }
}

/// A finished run, as its report needs it.
pub(crate) struct Run {
    pub(crate) tally: Tally,
    pub(crate) elapsed: Duration,
    pub(crate) created: bool,
    pub(crate) write_mode: WriteMode,
    pub(crate) capacity: u64,
    /// The first namespace's size, and where its data zones start.
    pub(crate) namespace_bytes: u64,
    pub(crate) data_offset_bytes: u64,
    /// The volume's counters when the writes began.
    pub(crate) checksum_before: u64,
    pub(crate) copied_before: u64,
    /// The bytes the run was to write, and the signal that stopped it
    /// before (its figures are then partial).
    pub(crate) target: u64,
    pub(crate) interrupted: Option<&'static str>,
}

/// Verifies (with --verify), writes the logs and chart asked for, and
/// prints the summary.
pub(crate) fn report(args: &Args, volume: &mut Volume, run: &Run) -> Result<(), String> {
    let Run { capacity, namespace_bytes, elapsed, checksum_before, .. } = *run;
    let (intervals, written) = (&run.tally.intervals, run.tally.written);
    let bs = args.bs as usize;
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
        if args.checksum_threads() == 0 { (stats.checksum_ns - checksum_before) as f64 / 1e9 } else { f64::NAN };

    if args.verify {
        verify(volume, bs, args.same_data || args.reuse_data).map_err(|e| format!("verify: {e}"))?;
    }
    // An output that cannot be written costs neither the summary nor the
    // other outputs: each failure is named after the summary.
    let mut unsaved = Vec::new();
    if let Some(prefix) = &args.write_log {
        if let Err(e) = write_logs(prefix, intervals, args.bs) {
            unsaved.push(format!("the logs {prefix}_{{bw,iops,lat}}.1.log: {e}"));
        }
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
        if let Err(e) = std::fs::write(path, svg) {
            unsaved.push(format!("the plot {}: {e}", path.display()));
        }
    }
    let fill_volume = stats.valid_bytes as f64 / capacity as f64 * 100.0;
    let fill_namespace = stats.valid_bytes as f64 / namespace_bytes as f64 * 100.0;
    let summary = Summary {
        flatness,
        whole,
        mib_s,
        stats,
        tag_bytes,
        checksums_kind,
        mapped_extents,
        checksum_s,
        fill_volume,
        fill_namespace,
    };
    match args.json {
        true => print_json(args, run, &summary),
        false => print_text(args, run, &summary),
    }
    nvme_examples::output::result_printed();
    if !unsaved.is_empty() {
        return Err(format!("the results above stand, but could not write {}", unsaved.join("; ")));
    }
    Ok(())
}

/// The figures both summaries print.
struct Summary {
    flatness: Option<f64>,
    /// Whole intervals' MiB/s.
    whole: Vec<f64>,
    mib_s: f64,
    stats: VolumeStats,
    tag_bytes: Option<usize>,
    checksums_kind: &'static str,
    mapped_extents: usize,
    checksum_s: f64,
    fill_volume: f64,
    fill_namespace: f64,
}

fn print_json(args: &Args, run: &Run, summary: &Summary) {
    let Summary {
        flatness,
        ref whole,
        mib_s,
        ref stats,
        tag_bytes,
        checksums_kind,
        mapped_extents,
        checksum_s,
        fill_volume,
        fill_namespace,
    } = *summary;
    let Run { created, elapsed, data_offset_bytes, .. } = *run;
    let (latency, written, commits, commit_time) =
        (&run.tally.latency, run.tally.written, run.tally.commits, run.tally.commit_time);
    let json = serde_json::json!({
        "tool": "seqwrite",
        "created": created,
        "events": nvme_examples::events::seen_json(),
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
        "checksum_threads": args.checksum_threads(),
        "zero_copy": args.zero_copy,
        "same_data": args.same_data,
        "reuse_data": args.reuse_data,
        "crc32c": checksum::implementation().name(),
        "block_tag_bytes": tag_bytes,
        "checksums": checksums_kind,
        "extents_with_checksums_in_memory": mapped_extents,
        "checksum_seconds_on_writer": if checksum_s.is_nan() { None } else { Some(checksum_s) },
        "volume_fill_percent": fill_volume,
        "data_offset_bytes": data_offset_bytes,
        "namespace_fill_percent": fill_namespace,
        "volume": stats,
        "partial": run.interrupted.is_some(),
        "interrupted_by": run.interrupted,
        "target_bytes": run.target,
    });
    println!("{json}");
}

fn print_text(args: &Args, run: &Run, summary: &Summary) {
    let Summary {
        flatness,
        mib_s,
        ref stats,
        tag_bytes,
        checksums_kind,
        mapped_extents,
        fill_volume,
        fill_namespace,
        ..
    } = *summary;
    let Run { created, elapsed, write_mode, data_offset_bytes, copied_before, .. } = *run;
    let (latency, written, commits, commit_time) =
        (&run.tally.latency, run.tally.written, run.tally.commits, run.tally.commit_time);
    println!(
        "seqwrite: bs={}, iodepth={}, {} {}",
        args.bs,
        args.iodepth,
        if created { "new volume" } else { "existing volume" },
        match write_mode {
            WriteMode::Ordered => "(ordered writes)",
            _ => "(zone append where available)",
        }
    );
    if let Some(signal) = run.interrupted {
        println!(
            "  partial: stopped by {signal} after {} of {} bytes; the figures are of what was written (and committed)",
            written, run.target
        );
    }
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
        args.checksum_threads(),
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

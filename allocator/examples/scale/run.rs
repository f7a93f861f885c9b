//! One measured volume: format a simulated ZNS namespace with synthetic
//! data, fill it with extents of one size committing every few writes,
//! reopen it (replaying the log), write a checkpoint, reopen it again.

use crate::heap;
use nvme_driver::sim::{synthetic, SimConfig, Simulator};
use nvme_driver::{Controller, ControllerOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zoned_allocator::{Device, DeviceOptions, Error, Volume, VolumeOptions, BLOCK_SIZE};

/// What a run is told.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Writes between commits: each commit journals this many extents.
    pub commit_every: usize,
    /// Share of the volume's capacity to fill, in percent.
    pub fill_percent: u64,
    /// Zone size of the simulated namespace.
    pub zone_bytes: u64,
    /// The simulator may keep this many bytes of stored (non-synthetic)
    /// blocks: the metadata.
    pub sim_memory_bytes: u64,
    /// Per-block metadata of the namespace's LBA format (0 for none): the
    /// volume keeps its checksums there (block tags) when it has room, in
    /// the extent map otherwise.
    pub metadata_bytes: u16,
    /// Times to open the filled volume with its log (at least 1).
    pub opens: usize,
    /// Where the volume keeps its checksums (format's choice by default).
    pub checksums: zoned_allocator::ChecksumStore,
}

/// What one (capacity, extent size) run measured: a row of the JSON.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Row {
    pub capacity_bytes: u64,
    pub extent_bytes: u64,
    /// The namespace's metadata bytes per block.
    pub metadata_bytes: u16,
    /// Where the volume keeps its checksums: "tags", "area" or "map".
    pub checksums: &'static str,
    pub volume_capacity_bytes: u64,
    pub data_bytes: u64,
    pub extents: u64,
    pub fill_seconds: f64,
    pub commits: usize,
    pub commit_ops: usize,
    pub commit_median_ms: f64,
    pub commit_p99_ms: f64,
    pub commit_max_ms: f64,
    pub commit_median_bytes: u64,
    pub commit_p99_bytes: u64,
    pub commit_max_bytes: u64,
    /// The slowest commit that began a checkpoint (moved the log to the
    /// other segment, resetting it first on a zoned namespace), and the
    /// slowest that did not; 0 when there was none of the kind.
    pub commit_max_rotating_ms: f64,
    pub commit_max_plain_ms: f64,
    /// What the slowest commit of all used of its thread (getrusage): CPU
    /// time (user and system), involuntary context switches (the host
    /// taking the CPU away), voluntary ones (waiting), minor and major page
    /// faults. Wall time beyond its CPU time with no switch at all is time
    /// the machine itself was not running (a virtual machine's steal).
    pub commit_max_cpu_ms: f64,
    pub commit_max_preempted: u64,
    pub commit_max_waited: u64,
    pub commit_max_minor_faults: u64,
    pub commit_max_major_faults: u64,
    /// The slowest commit's phases (`CommitInfo::phases`), microseconds:
    /// waiting, flushing, encoding, writing, rotating, resetting.
    pub commit_max_phases_us: [u64; 6],
    /// Commits from the last that began a checkpoint to the slowest (0:
    /// the slowest began one).
    pub commit_max_since_rotation: u64,
    /// Checkpoints the fill's commits wrote (segment rotations).
    pub fill_checkpoints: u64,
    pub checkpoint_bytes: u64,
    pub checkpoint_written_bytes: u64,
    pub checkpoint_seconds: f64,
    /// Open after the fill: labels, the last checkpoint and the whole log.
    pub open_seconds: f64,
    /// What that open read and replayed (`Volume::recovery`): metadata
    /// blocks over every copy, checkpoint pages loaded, journal records
    /// and operations replayed.
    pub open_metadata_blocks: u64,
    pub open_pages_loaded: u64,
    pub open_records_replayed: u64,
    pub open_ops_replayed: u64,
    /// Where that open's time went (`RecoveryReport::phases`): reading,
    /// recovering (verifying and decoding), replaying, checking; seconds.
    pub open_phases_seconds: [f64; 4],
    /// Resident memory open took at its peak beyond what was resident
    /// before it (the images, the records being decoded, the table): RSS,
    /// not heap, since an image's unread blocks are allocated but never
    /// touched.
    pub open_peak_rss_bytes: u64,
    /// Every open of that state (`--opens`), the first being
    /// `open_seconds`; and their median.
    pub open_seconds_all: Vec<f64>,
    pub open_median_seconds: f64,
    /// Open right after a checkpoint.
    pub open_after_checkpoint_seconds: f64,
    /// Heap the open volume holds (live bytes across `Volume::open`).
    pub memory_bytes: u64,
    /// The same per TiB of data.
    pub memory_bytes_per_tib: f64,
    /// Process RSS with the volume open, less the simulator's stored data.
    pub rss_above_sim_bytes: u64,
    pub peak_rss_bytes: u64,
    pub sim_bytes: u64,
    /// Metadata bytes on the device after the fill (one copy's log and
    /// checkpoint, as written).
    pub metadata_written_bytes: u64,
}

/// The largest command, and so the largest extent: 4 MiB, one SGL
/// descriptor's worth here (the simulator offers SGLs, as QEMU does).
const MAX_TRANSFER_BYTES: usize = 4 << 20;

fn device(sim: &Arc<Simulator>) -> Result<Device, String> {
    let controller =
        Controller::init(sim.clone(), ControllerOptions::default()).map_err(|e| format!("bring-up: {e}"))?;
    let options = DeviceOptions { max_transfer_bytes: MAX_TRANSFER_BYTES, buffers: 8, ..DeviceOptions::default() };
    Device::open(&controller, 1, options).map_err(|e| format!("namespace 1: {e}"))
}

fn quantile<T: Copy + Ord>(sorted: &[T], q: f64) -> T {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// Runs one (capacity, extent size) point.
pub fn run(capacity_bytes: u64, extent_bytes: usize, settings: &Settings) -> Result<Row, String> {
    heap::reset_peak();
    let zone_blocks = settings.zone_bytes / BLOCK_SIZE as u64;
    let blocks = capacity_bytes / BLOCK_SIZE as u64 / zone_blocks * zone_blocks;
    let mut config = SimConfig::zoned(blocks, BLOCK_SIZE as u32, zone_blocks, zone_blocks);
    config.namespaces[0] = config.namespaces[0].clone().synthetic_data().metadata_bytes(settings.metadata_bytes);
    config.volatile_write_cache = false;
    // 4 MiB per command (MDTS 10), for the largest extents.
    config.mdts = 10;
    config.memory_limit_bytes = settings.sim_memory_bytes;
    let sim = Simulator::new(config);
    let options =
        VolumeOptions { max_extent_bytes: extent_bytes, checksums: settings.checksums, ..VolumeOptions::default() };
    let mut volume = Volume::format(vec![device(&sim)?], &options).map_err(|e| format!("format: {e}"))?;
    let written = |sim: &Simulator| sim.stats().lbas_written * BLOCK_SIZE as u64;
    let mut row = Row {
        capacity_bytes: blocks * BLOCK_SIZE as u64,
        extent_bytes: extent_bytes as u64,
        metadata_bytes: settings.metadata_bytes,
        checksums: volume.checksum_store().name(),
        volume_capacity_bytes: volume.capacity_bytes(),
        commit_ops: settings.commit_every,
        ..Row::default()
    };
    let label = format!("{} × {}", size(row.capacity_bytes), size(row.extent_bytes));

    // Fill.
    let mut buffer = vec![0u8; extent_bytes];
    for block in buffer.chunks_exact_mut(BLOCK_SIZE) {
        synthetic::fill(block, 0);
    }
    let target = volume.capacity_bytes() / 100 * settings.fill_percent;
    let mut seed = 1u64;
    let mut latencies = Vec::new();
    let mut commit_bytes = Vec::new();
    let mut since_commit = 0;
    let (mut slowest_rotating, mut slowest_plain) = (Duration::ZERO, Duration::ZERO);
    let mut slowest_usage = heap::Usage::default();
    let mut slowest_phases = [0u64; 6];
    let (mut since_rotation, mut slowest_since_rotation) = (0u64, 0u64);
    let started = Instant::now();
    let mut progress_at = Instant::now();
    let mut commit = |volume: &mut Volume, latencies: &mut Vec<Duration>, commit_bytes: &mut Vec<u64>| {
        let before = written(&sim);
        let usage = heap::thread_usage();
        let at = Instant::now();
        let info = volume.commit().map_err(|e| format!("commit: {e}"))?;
        let took = at.elapsed();
        since_rotation = if info.checkpoint { 0 } else { since_rotation + 1 };
        if took > slowest_rotating.max(slowest_plain) {
            slowest_usage = heap::thread_usage() - usage;
            slowest_since_rotation = since_rotation;
            let p = info.phases;
            slowest_phases = [p.waiting_us, p.flushing_us, p.encoding_us, p.writing_us, p.rotating_us, p.resetting_us];
        }
        latencies.push(took);
        let slowest = if info.checkpoint { &mut slowest_rotating } else { &mut slowest_plain };
        *slowest = (*slowest).max(took);
        commit_bytes.push(written(&sim) - before);
        Ok::<_, String>(info)
    };
    while row.data_bytes + extent_bytes as u64 <= target {
        for block in buffer.chunks_exact_mut(BLOCK_SIZE) {
            synthetic::stamp(block, seed);
            seed += 1;
        }
        match volume.write(0, &buffer, row.extents) {
            Ok(_) => {}
            Err(Error::NoSpace(_)) => break,
            Err(error) => return Err(format!("{label}: write {}: {error}", row.extents)),
        }
        row.data_bytes += extent_bytes as u64;
        row.extents += 1;
        since_commit += 1;
        if since_commit == settings.commit_every {
            commit(&mut volume, &mut latencies, &mut commit_bytes)?;
            since_commit = 0;
        }
        if progress_at.elapsed() >= Duration::from_secs(10) {
            progress_at = Instant::now();
            eprintln!(
                "scale: {label}: {}% filled, {} commits, {:.0} s",
                row.data_bytes * 100 / target.max(1),
                latencies.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    if since_commit > 0 {
        commit(&mut volume, &mut latencies, &mut commit_bytes)?;
    }
    row.fill_seconds = started.elapsed().as_secs_f64();
    row.fill_checkpoints = volume.stats().checkpoints;
    row.metadata_written_bytes = commit_bytes.iter().sum::<u64>() / 2;
    latencies.sort_unstable();
    commit_bytes.sort_unstable();
    row.commits = latencies.len();
    if !latencies.is_empty() {
        row.commit_median_ms = ms(quantile(&latencies, 0.5));
        row.commit_p99_ms = ms(quantile(&latencies, 0.99));
        row.commit_max_ms = ms(*latencies.last().expect("commits"));
        row.commit_median_bytes = quantile(&commit_bytes, 0.5);
        row.commit_p99_bytes = quantile(&commit_bytes, 0.99);
        row.commit_max_bytes = *commit_bytes.last().expect("commits");
    }
    row.commit_max_rotating_ms = ms(slowest_rotating);
    row.commit_max_plain_ms = ms(slowest_plain);
    row.commit_max_cpu_ms = ms(slowest_usage.cpu);
    row.commit_max_preempted = slowest_usage.preempted;
    row.commit_max_waited = slowest_usage.waited;
    row.commit_max_since_rotation = slowest_since_rotation;
    row.commit_max_phases_us = slowest_phases;
    row.commit_max_minor_faults = slowest_usage.minor_faults;
    row.commit_max_major_faults = slowest_usage.major_faults;
    drop((latencies, commit_bytes));
    eprintln!(
        "scale: {label}: filled {} in {:.0} s; the slowest commit {:.1} ms beginning a checkpoint, {:.1} ms \
         otherwise; the slowest of all used {:.1} ms of CPU, was preempted {} times, waited {} times, took {} minor and {} major \
         page faults, {} commits after the last checkpoint began; its phases (µs: waiting, flushing, \
         encoding, writing, rotating, resetting) {:?}; reopening",
        size(row.data_bytes),
        row.fill_seconds,
        row.commit_max_rotating_ms,
        row.commit_max_plain_ms,
        row.commit_max_cpu_ms,
        row.commit_max_preempted,
        row.commit_max_waited,
        row.commit_max_minor_faults,
        row.commit_max_major_faults,
        row.commit_max_since_rotation,
        row.commit_max_phases_us
    );

    // Open with the whole log to replay; the heap the volume holds.
    let devices = volume.close().map_err(|e| format!("close: {e}"))?;
    heap::reset_peak();
    let heap_before = heap::live_bytes();
    let rss_before = heap::status_bytes("VmRSS");
    let at = Instant::now();
    let mut volume = Volume::open(devices, &options).map_err(|e| format!("open: {e}"))?;
    row.open_seconds = at.elapsed().as_secs_f64();
    row.open_peak_rss_bytes = heap::status_bytes("VmHWM").saturating_sub(rss_before);
    let report = volume.recovery();
    row.open_metadata_blocks = report.metadata_blocks_read;
    row.open_pages_loaded = report.pages_loaded;
    row.open_records_replayed = report.records_replayed;
    row.open_ops_replayed = report.ops_replayed;
    let phases = report.phases;
    row.open_phases_seconds =
        [phases.reading_us, phases.recovering_us, phases.replaying_us, phases.checking_us].map(|us| us as f64 / 1e6);
    let [reading, recovering, replaying, checking] = row.open_phases_seconds;
    eprintln!(
        "scale: {label}: opened in {:.2} s: read {} of metadata, loaded {} pages, replayed {} records \
         ({} operations); reading {reading:.2} s, recovering {recovering:.2}, replaying {replaying:.2}, \
         checking {checking:.2}",
        row.open_seconds,
        size(report.metadata_blocks_read * zoned_allocator::BLOCK_SIZE as u64),
        report.pages_loaded,
        report.records_replayed,
        report.ops_replayed
    );
    row.memory_bytes = heap::live_bytes().saturating_sub(heap_before);
    // The same state opened again, as many times as asked: the median of
    // all (the first included) is steadier than one open on a noisy host.
    row.open_seconds_all.push(row.open_seconds);
    for _ in 1..settings.opens {
        let devices = volume.close().map_err(|e| format!("close: {e}"))?;
        let at = Instant::now();
        volume = Volume::open(devices, &options).map_err(|e| format!("open again: {e}"))?;
        row.open_seconds_all.push(at.elapsed().as_secs_f64());
    }
    let mut sorted = row.open_seconds_all.clone();
    sorted.sort_by(f64::total_cmp);
    row.open_median_seconds = sorted[sorted.len() / 2];
    eprintln!(
        "scale: {label}: open's resident memory at its peak {} above what it was before; {} open(s), median {:.2} s",
        size(row.open_peak_rss_bytes),
        sorted.len(),
        row.open_median_seconds
    );
    row.memory_bytes_per_tib = row.memory_bytes as f64 / (row.data_bytes as f64 / (1u64 << 40) as f64);
    row.sim_bytes = sim.storage_bytes(1);
    row.rss_above_sim_bytes = heap::status_bytes("VmRSS").saturating_sub(row.sim_bytes);

    // A checkpoint, then open again.
    let before = written(&sim);
    let at = Instant::now();
    volume.checkpoint_now().map_err(|e| format!("checkpoint: {e}"))?;
    row.checkpoint_seconds = at.elapsed().as_secs_f64();
    row.checkpoint_written_bytes = written(&sim) - before;
    row.checkpoint_bytes = volume.stats().checkpoint_bytes;
    let devices = volume.close().map_err(|e| format!("close: {e}"))?;
    let at = Instant::now();
    let volume = Volume::open(devices, &options).map_err(|e| format!("open after the checkpoint: {e}"))?;
    row.open_after_checkpoint_seconds = at.elapsed().as_secs_f64();
    if volume.stats().extents != row.extents {
        return Err(format!("{label}: {} extents after reopening, {} written", volume.stats().extents, row.extents));
    }
    row.peak_rss_bytes = heap::status_bytes("VmHWM");
    drop(volume);
    Ok(row)
}

/// `bytes` in the largest binary unit that divides it, else in the
/// largest it reaches, to a tenth.
pub fn size(bytes: u64) -> String {
    const UNITS: [(u32, &str); 4] = [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")];
    for (shift, unit) in UNITS {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    let (shift, unit) = UNITS.into_iter().find(|&(shift, _)| bytes >= 1 << shift).unwrap_or((0, "B"));
    format!("{:.1} {unit}", bytes as f64 / (1u64 << shift) as f64)
}

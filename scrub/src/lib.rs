//! The scrub engine: reads every extent a [`zoned_allocator::Volume`]
//! holds, in physical order and at high queue depth, verifies each 4 KiB
//! block's crc32c, and repairs bad copies from the other one.
//!
//! # Architecture
//!
//! - [`plan`]: a lane's extents in physical order, merged into reads up
//!   to the request size (the namespace's largest transfer by default),
//!   each carrying its checksums. The plan is read ahead of the queue,
//!   one index walk per refill, so the queue never drains waiting for it.
//! - The in-flight table (this file): a fixed number of reads in flight
//!   (default 64) on the lane's queue pair, polled; completions free their
//!   slot at once and new reads are submitted in the same pass. Never
//!   submit-and-wait (except in the [`ScrubOptions::submit_and_wait`]
//!   ablation, which reproduces the regressed btrfs behaviour for
//!   comparison).
//! - Verification (`verify.rs`): each completed read is copied out of its
//!   DMA buffer (which goes straight back to the pool) and checksummed on
//!   worker threads ([`ScrubOptions::verify_threads`]), so checksumming
//!   overlaps I/O. With `verify: false` the engine still plans, merges,
//!   reads and accounts: the engine's own speed without checksum cost.
//! - Detection: checksum mismatches, and reads that fail (media errors,
//!   typed by their NVMe status, timeouts, resets). A failed merged read is
//!   narrowed down by re-reading each extent on its own.
//! - Repair (`repair.rs`, [`ScrubOptions::repair`]): a bad copy's extent
//!   is read from the other copy and verified; then written back in place
//!   on a conventional namespace, or relocated on a zoned one (overwrite is
//!   impossible there) through the allocator, which journals the move at
//!   the commit that ends the repair. The copy is re-read to confirm. A
//!   block with no good copy is reported uncorrectable with its extent and
//!   owner, and nothing is changed. A repair whose write fails (or whose
//!   confirming read does not complete) is reported with its error
//!   ([`RepairFailed`]), the copy is left as it was, and the scrub goes on
//!   with the others; the commit at the end still makes every relocation
//!   that succeeded durable. Each copy is scrubbed in turn, as btrfs
//!   scrubs per device.
//! - Control ([`Control`]): pause, resume and cancel from another thread;
//!   a rate limit in MiB/s (a token bucket on submitted bytes); a
//!   [`Checkpoint`] (`checkpoint.rs`) of the last completed position,
//!   handed to the caller to persist, from which a later run resumes
//!   without rereading finished work. It carries what was found before
//!   it ([`Findings`]): counts, uncorrectable blocks, repairs made and
//!   failed, and the bad copies not yet repaired (repair runs once the
//!   reads end), so the resumed run repairs those and reports everything
//!   found across the runs. A checkpoint of a finished pass starts a new
//!   pass over everything.
//! - Report ([`Report`], `report.rs`): bytes read and verified, errors by
//!   kind, corrected and uncorrectable blocks, failed repairs, duration,
//!   mean queue depth and mean request size (the iostat view), as text or
//!   JSON, and the pass's [`Outcome`]: clean only when every byte of the
//!   copies scrubbed was read and verified, over every run of a resumed
//!   pass, and no bad block is left.
//!
//! # Example
//!
//! A volume mirrored across two simulated ZNS controllers: one bit of the
//! first copy rots at rest, the scrub finds it by its checksum and repairs
//! it from the second copy (relocating it, as a zone cannot be rewritten
//! in place).
//!
//! ```
//! use nvme_driver::sim::{SimConfig, Simulator};
//! use nvme_driver::{Controller, ControllerOptions};
//! use nvme_scrub::{scrub, Control, Outcome, ScrubOptions};
//! use zoned_allocator::{Device, DeviceOptions, Profile, Volume, VolumeOptions};
//!
//! // Two controllers, each with a 64 MiB ZNS namespace of 1 MiB zones
//! // (512-byte LBAs).
//! let sims = [0, 1].map(|_| Simulator::new(SimConfig::zoned(131072, 512, 2048, 2048)));
//! let mut devices = Vec::new();
//! for sim in &sims {
//!     let controller = Controller::init(sim.clone(), ControllerOptions::default()).unwrap();
//!     devices.push(Device::open(&controller, 1, DeviceOptions::default()).unwrap());
//! }
//! let options = VolumeOptions { profile: Profile::Mirror, ..VolumeOptions::default() };
//! let mut volume = Volume::format(devices, &options).unwrap();
//! let extent = volume.write(0, &vec![0x5Au8; 64 * 1024], 7).unwrap();
//! volume.commit().unwrap();
//!
//! // Flip bit 3 of the extent's first block in copy 0, behind the driver.
//! let location = volume.location(extent, 0).unwrap();
//! sims[0].corrupt_at_rest(1, volume.lba(0, location), 3);
//!
//! let report = scrub(&mut volume, &ScrubOptions::default(), &Control::new(), None, &mut |_| {}, &mut |_| {})
//!     .unwrap();
//! assert_eq!(report.bytes_read, 2 * 64 * 1024); // both copies
//! assert_eq!(report.errors.checksum, 1);
//! assert_eq!(report.corrected_blocks, 1);
//! assert!(report.uncorrectable.is_empty());
//! assert_eq!(report.outcome, Outcome::Clean); // all read and verified, nothing left bad
//! println!("{report}");
//! ```

#![deny(missing_docs)]

mod checkpoint;
pub mod plan;
mod repair;
mod report;
pub mod resilver;
mod spread;
mod verify;

pub use checkpoint::{Checkpoint, Findings, LanePosition, Suspect, CHECKPOINT_VERSION};
pub use report::{ErrorCounts, Outcome, RepairError, RepairFailed, Report, Uncorrectable};
pub use resilver::{
    rebuild_distributed, resilver, Resilver, ResilverOptions, ResilverPhase, ResilverProgress, ResilverReport,
};

use nvme_driver::IoCompletion;
use plan::{Planner, Read};
use repair::resolve_suspects;
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use verify::{ReadMeta, Verifier, VerifyJob, VerifyResult};
use zoned_allocator::{Location, Volume, BLOCK_SIZE};

/// The scrub's one error type.
#[derive(Debug)]
pub enum Error {
    /// The volume failed (quiescing it, narrowing a failed read, the
    /// commit). A failed repair is not an error of the scrub: the report
    /// lists it ([`Report::repair_failed`]).
    Volume(zoned_allocator::Error),
    /// The checkpoint belongs to another volume or is malformed.
    BadCheckpoint(String),
    /// An argument is out of range.
    InvalidArgument(String),
    /// The device stopped answering within the bound.
    Timeout {
        /// What was waited for, in words ("scrub reads").
        what: &'static str,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Volume(e) => write!(f, "volume: {e}"),
            Error::BadCheckpoint(why) => write!(f, "checkpoint: {why}"),
            Error::InvalidArgument(why) => write!(f, "invalid argument: {why}"),
            Error::Timeout { what } => write!(f, "timed out waiting for {what}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<zoned_allocator::Error> for Error {
    fn from(e: zoned_allocator::Error) -> Self {
        Error::Volume(e)
    }
}

/// The scrub's result type, with [`Error`] by default.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How to scrub.
#[derive(Clone, Debug)]
pub struct ScrubOptions {
    /// Reads in flight.
    pub max_in_flight: usize,
    /// Largest read; `None` is the namespace's largest transfer.
    pub max_request_bytes: Option<usize>,
    /// Verify checksums (off: plan, merge, read and account only).
    pub verify: bool,
    /// Repair bad copies (off: detect and report only, change nothing).
    pub repair: bool,
    /// Bandwidth ceiling in MiB/s.
    pub rate_limit_mib_s: Option<f64>,
    /// Threads checksumming completed reads; 0 checksums on the polling
    /// thread.
    pub verify_threads: usize,
    /// Ablation: one read at a time, each waited for before the next.
    pub submit_and_wait: bool,
    /// Copies to scrub; `None` is all of them.
    pub lanes: Option<Vec<usize>>,
    /// Hand a checkpoint to the caller after this many bytes.
    pub checkpoint_every_bytes: u64,
    /// Bound on waiting for one read.
    pub timeout: Duration,
}

impl Default for ScrubOptions {
    fn default() -> Self {
        ScrubOptions {
            max_in_flight: 64,
            max_request_bytes: None,
            verify: true,
            repair: true,
            rate_limit_mib_s: None,
            verify_threads: 1,
            submit_and_wait: false,
            lanes: None,
            checkpoint_every_bytes: 64 << 20,
            timeout: Duration::from_secs(30),
        }
    }
}

pub(crate) const RUN: u8 = 0;
pub(crate) const PAUSE: u8 = 1;
pub(crate) const CANCEL: u8 = 2;

/// Pause, resume and cancel a running scrub from another thread.
#[derive(Clone, Debug, Default)]
pub struct Control(Arc<AtomicU8>);

impl Control {
    /// A control in the running state; clone it to hand to another thread.
    pub fn new() -> Self {
        Control::default()
    }
    /// Stops submitting after the reads in flight finish, until resumed.
    pub fn pause(&self) {
        let _ = self.0.compare_exchange(RUN, PAUSE, Ordering::AcqRel, Ordering::Acquire);
    }
    /// Lets a paused scrub submit again; does nothing unless paused (a
    /// cancelled scrub stays cancelled).
    pub fn resume(&self) {
        let _ = self.0.compare_exchange(PAUSE, RUN, Ordering::AcqRel, Ordering::Acquire);
    }
    /// Ends the scrub after the reads in flight finish; the report says so
    /// and the last checkpoint covers everything read.
    pub fn cancel(&self) {
        self.0.store(CANCEL, Ordering::Release);
    }
    pub(crate) fn state(&self) -> u8 {
        self.0.load(Ordering::Acquire)
    }
}

/// Progress, as the scrub goes.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Progress {
    /// The copy (lane) being scrubbed now.
    pub lane: usize,
    /// Bytes read so far, over the whole scrub (a resumed scrub counts from
    /// its checkpoint).
    pub bytes_done: u64,
    /// Bytes the whole scrub reads: live bytes times the copies scrubbed.
    pub bytes_total: u64,
    /// Read bandwidth so far, in MiB/s, pauses excluded.
    pub rate_mib_s: f64,
    /// Estimated time to finish at that rate, in seconds (infinite before the
    /// first completion).
    pub eta_s: f64,
}

/// A read in the in-flight table or waiting for verification, and what it
/// found: accounted when it retires, in order, so that a checkpoint holds
/// exactly what was found before its position.
struct Pending {
    read: Read,
    done: bool,
    /// The read failed.
    failed: bool,
    /// Blocks that failed their checksum.
    checksum_blocks: u64,
    /// Copies found bad.
    suspects: Vec<Suspect>,
}

/// Scrubs `volume`. `resume` continues a pass from its checkpoint (with
/// what it found so far); a finished checkpoint starts a new pass, as
/// `None` does. `on_progress` is called about twice a second,
/// `on_checkpoint` every [`ScrubOptions::checkpoint_every_bytes`] and at
/// the end, after the repairs (persist it to resume after a restart).
///
/// Coverage is judged by position: a volume written between the runs of a
/// pass may have extents placed behind the checkpoint, which that pass
/// does not read.
pub fn scrub(
    volume: &mut Volume,
    options: &ScrubOptions,
    control: &Control,
    resume: Option<&Checkpoint>,
    on_progress: &mut dyn FnMut(&Progress),
    on_checkpoint: &mut dyn FnMut(&Checkpoint),
) -> Result<Report> {
    if options.max_in_flight == 0 || options.max_in_flight > 4096 {
        return Err(Error::InvalidArgument(format!("{} reads in flight: expected 1..=4096", options.max_in_flight)));
    }
    // Every copy whose device is in use (a degraded mirror scrubs what it
    // has).
    let lanes: Vec<usize> =
        options.lanes.clone().unwrap_or_else(|| (0..volume.lanes()).filter(|&l| volume.lane_online(l)).collect());
    if let Some(&bad) = lanes.iter().find(|&&l| l >= volume.lanes()) {
        return Err(Error::InvalidArgument(format!("copy {bad}: the volume has {}", volume.lanes())));
    }
    if let Some(&away) = lanes.iter().find(|&&l| !volume.lane_online(l)) {
        return Err(Error::InvalidArgument(format!("copy {away}: its device is not in use")));
    }
    if let Some(checkpoint) = resume {
        check_checkpoint(checkpoint, volume, &lanes)?;
    }
    // A finished checkpoint ends its pass: this scrub starts a new one.
    let resume = resume.filter(|c| !c.finished);
    let bytes_total = lanes.iter().map(|&l| volume.lane_valid_blocks(l)).sum::<u64>() * BLOCK_SIZE as u64;
    let found = resume.map(|c| c.findings.clone()).unwrap_or_default();
    let mut report = Report {
        bytes_total,
        lanes: lanes.clone(),
        errors: found.errors,
        corrected_blocks: found.corrected_blocks,
        uncorrectable: found.uncorrectable,
        repair_failed: found.repair_failed,
        unrepaired_blocks: found.unrepaired_blocks,
        verify: options.verify,
        repair: options.repair,
        resumed: resume.is_some(),
        ..Report::default()
    };
    // Extents with no copy on a device in use are lost: uncorrectable,
    // whole, named once per pass (no copy walk ever meets them).
    if resume.is_none() {
        for (extent, blocks) in volume.lost_extents() {
            let owner = volume.owner(extent).ok();
            let lane = lanes.first().copied().unwrap_or(0);
            report.uncorrectable.push(Uncorrectable { extent, owner, lane, blocks: (0..blocks).collect() });
        }
    }
    // The metadata first: labels, checkpoints and journal records on every
    // copy, a bad copy rewritten from the good one.
    let metadata = volume.scrub_metadata(options.repair)?;
    let bad_metadata: u64 = metadata.bad_records.iter().chain(&metadata.bad_labels).sum();
    report.errors.metadata += bad_metadata;
    if metadata.repaired {
        report.metadata_repaired += bad_metadata;
    }
    report.metadata = Some(metadata);
    let bytes_done = resume.map_or(0, |c| c.bytes_done);
    let started = Instant::now();
    let mut engine = Engine {
        options,
        control,
        report: &mut report,
        verifier: Verifier::new(if options.verify { options.verify_threads } else { 0 }),
        started,
        paused: Duration::ZERO,
        depth_area: 0.0,
        depth_since: started,
        in_flight: 0,
        bytes_done,
        bytes_verified: resume.map_or(0, |c| c.bytes_verified),
        bytes_submitted: 0,
        last_checkpoint_bytes: bytes_done,
        last_progress: started,
        suspects: found.suspects,
        volume_id: volume.id(),
    };
    // Every copy at once, each on its own device at its own depth: a pool
    // scrubs at the bandwidth of all its devices.
    let starts = starts(resume, &lanes);
    let (runs, cancelled) = engine.run_lanes(volume, &lanes, &starts, on_progress, on_checkpoint)?;
    // Per-device error counters, kept in the volume's metadata.
    for run in &runs {
        volume.record_read_errors(run.lane, run.failed_reads, run.checksum_blocks);
    }
    let positions = lane_positions(&runs, false);
    let suspects = std::mem::take(&mut engine.suspects);
    let run_time = started.elapsed().saturating_sub(engine.paused);
    let depth_area = engine.depth_area;
    let bytes_done = engine.bytes_done;
    let bytes_verified = engine.bytes_verified;
    assert!(bytes_verified <= bytes_done, "verified {bytes_verified} bytes of {bytes_done} read");
    drop(engine);
    // Commit what was repaired, even when some repairs failed: the
    // relocations journaled so far become durable.
    if resolve_suspects(volume, options, suspects, &mut report)? {
        volume.commit()?;
    }
    report.cancelled = cancelled;
    report.pass_bytes_read = bytes_done;
    report.pass_bytes_verified = bytes_verified;
    report.outcome = report.judge(!cancelled);
    // The pass, recorded in the volume's metadata for status views (a
    // read-only scrub changes nothing, so records nothing).
    if !cancelled && options.repair {
        // Metadata records and labels count with the blocks: a pass that
        // rewrote a bad copy of the metadata found something, and fixed it.
        let bad_blocks = report.errors.total_blocks() + report.errors.metadata;
        let uncorrectable_blocks = report.uncorrectable.iter().map(|u| u.blocks.len() as u64).sum();
        volume.record_scrub(zoned_allocator::ScrubRecord {
            finished_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            bytes_verified: report.pass_bytes_verified,
            bad_blocks,
            repaired_blocks: report.corrected_blocks + report.metadata_repaired,
            uncorrectable_blocks,
            clean: report.outcome == Outcome::Clean,
        });
        volume.commit()?;
    }
    report.duration_s = started.elapsed().as_secs_f64();
    report.rate_mib_s = report.bytes_read as f64 / f64::from(1 << 20) / run_time.as_secs_f64().max(1e-9);
    report.mean_queue_depth = depth_area / run_time.as_secs_f64().max(1e-9);
    report.mean_request_bytes = if report.reads > 0 { report.bytes_read as f64 / report.reads as f64 } else { 0.0 };
    // The last checkpoint: where a cancelled scrub stopped, or the end,
    // with everything found, now repaired or reported.
    let first = first_not_done(&positions, *lanes.last().unwrap_or(&0));
    on_checkpoint(&Checkpoint {
        version: CHECKPOINT_VERSION,
        volume_id: volume.id(),
        lane: first.lane,
        zone: first.zone,
        offset: first.offset,
        skip_blocks: first.skip_blocks,
        bytes_done,
        bytes_verified,
        lanes,
        finished: !cancelled,
        findings: findings(&report, Vec::new()),
        positions,
    });
    Ok(report)
}

/// Refuses a checkpoint of another volume, of an unknown format, or (for
/// a pass not finished) of a pass over other copies.
fn check_checkpoint(checkpoint: &Checkpoint, volume: &Volume, lanes: &[usize]) -> Result<()> {
    checkpoint.check_version()?;
    if checkpoint.volume_id != volume.id() {
        return Err(Error::BadCheckpoint(format!(
            "it belongs to volume {:#x}, not {:#x}",
            checkpoint.volume_id,
            volume.id()
        )));
    }
    if checkpoint.bytes_verified > checkpoint.bytes_done {
        return Err(Error::BadCheckpoint(format!(
            "malformed: {} bytes verified of {} read",
            checkpoint.bytes_verified, checkpoint.bytes_done
        )));
    }
    if checkpoint.finished {
        return Ok(());
    }
    if !checkpoint.lanes.is_empty() && checkpoint.lanes != lanes {
        return Err(Error::BadCheckpoint(format!(
            "its pass scrubs copies {:?}, this scrub copies {lanes:?}: resume with the same copies",
            checkpoint.lanes
        )));
    }
    if !lanes.contains(&checkpoint.lane) {
        return Err(Error::BadCheckpoint(format!(
            "it stopped in copy {}, which this scrub does not scrub",
            checkpoint.lane
        )));
    }
    Ok(())
}

/// Where each of `lanes` starts: from its beginning, or where `resume`
/// left it (`None`: done). A version-2 checkpoint names one copy: those
/// before it are done, those after it not begun.
fn starts(resume: Option<&Checkpoint>, lanes: &[usize]) -> Vec<Option<(Location, u32)>> {
    let begin = Some((Location { zone: 0, offset: 0 }, 0));
    let Some(checkpoint) = resume else { return vec![begin; lanes.len()] };
    if !checkpoint.positions.is_empty() {
        return lanes
            .iter()
            .map(|&lane| match checkpoint.positions.iter().find(|p| p.lane == lane) {
                Some(p) if p.done => None,
                Some(p) => Some((Location { zone: p.zone, offset: p.offset }, p.skip_blocks)),
                None => begin,
            })
            .collect();
    }
    let at = lanes.iter().position(|&l| l == checkpoint.lane).unwrap_or(0);
    let from = (Location { zone: checkpoint.zone, offset: checkpoint.offset }, checkpoint.skip_blocks);
    (0..lanes.len())
        .map(|index| match index.cmp(&at) {
            std::cmp::Ordering::Less => None,
            std::cmp::Ordering::Equal => Some(from),
            std::cmp::Ordering::Greater => begin,
        })
        .collect()
}

/// The first copy of `positions` not done, or (all done) `last` at its
/// start: what a checkpoint's one position names.
fn first_not_done(positions: &[LanePosition], last: usize) -> LanePosition {
    positions.iter().find(|p| !p.done).copied().unwrap_or(LanePosition {
        lane: last,
        zone: 0,
        offset: 0,
        skip_blocks: 0,
        done: true,
    })
}

/// Each copy's position: at its first read not yet finished (with
/// `in_flight`), else at the next to submit, else at the next to plan.
fn lane_positions(runs: &[LaneRun], in_flight: bool) -> Vec<LanePosition> {
    runs.iter()
        .map(|run| {
            let first = if in_flight { run.pending.values().map(|p| &p.read).next() } else { None };
            let at = position(first, &run.queue, &run.planner);
            LanePosition {
                lane: run.lane,
                zone: at.location.zone,
                offset: at.location.offset,
                skip_blocks: at.skip,
                done: run.finished(),
            }
        })
        .collect()
}

/// Bits of a read's token above which its copy's index in the pass is kept:
/// copies on one device (a dup's two) share its queue pair, and each
/// completion goes back to its own.
const LANE_SHIFT: u32 = 48;

fn token(index: usize, seq: u64) -> u64 {
    (index as u64) << LANE_SHIFT | seq
}

fn untoken(token: u64) -> (usize, u64) {
    ((token >> LANE_SHIFT) as usize, token & ((1 << LANE_SHIFT) - 1))
}

/// One copy's walk in a pass: its plan, the reads planned, and those
/// submitted until verified.
struct LaneRun {
    lane: usize,
    planner: Planner,
    queue: VecDeque<Read>,
    /// Submitted reads in order, by sequence number, until verified.
    pending: BTreeMap<u64, Pending>,
    next_seq: u64,
    in_flight: usize,
    /// Done before this run began (a resumed pass).
    done_before: bool,
    /// Reads that failed, and blocks that failed their checksum, on it.
    failed_reads: u64,
    checksum_blocks: u64,
}

impl LaneRun {
    /// Every read of the copy planned, submitted and finished.
    fn finished(&self) -> bool {
        self.done_before || (self.pending.is_empty() && self.queue.is_empty() && self.planner.is_done())
    }
}

/// A position in a copy's walk: the extent to start from, and blocks of
/// it already read.
#[derive(Clone, Copy, Debug)]
struct Position {
    location: Location,
    skip: u32,
}

/// The findings so far, for a checkpoint.
fn findings(report: &Report, suspects: Vec<Suspect>) -> Findings {
    Findings {
        errors: report.errors.clone(),
        corrected_blocks: report.corrected_blocks,
        uncorrectable: report.uncorrectable.clone(),
        repair_failed: report.repair_failed.clone(),
        unrepaired_blocks: report.unrepaired_blocks,
        suspects,
    }
}

struct Engine<'a> {
    options: &'a ScrubOptions,
    control: &'a Control,
    report: &'a mut Report,
    verifier: Verifier,
    started: Instant,
    paused: Duration,
    /// Integral of reads in flight over time, for the mean queue depth.
    depth_area: f64,
    depth_since: Instant,
    in_flight: usize,
    /// Bytes of the pass read, its checkpoint's included.
    bytes_done: u64,
    /// Bytes of `bytes_done` verified.
    bytes_verified: u64,
    /// Bytes submitted while not paused, for the rate limit.
    bytes_submitted: u64,
    last_checkpoint_bytes: u64,
    last_progress: Instant,
    suspects: Vec<Suspect>,
    volume_id: u64,
}

impl Engine<'_> {
    fn set_in_flight(&mut self, count: usize) {
        let now = Instant::now();
        self.depth_area += self.in_flight as f64 * now.duration_since(self.depth_since).as_secs_f64();
        self.depth_since = now;
        self.in_flight = count;
    }

    /// Bytes the rate limit allows to have been submitted by now.
    fn allowed(&self) -> Option<u64> {
        let rate = self.options.rate_limit_mib_s?;
        let running = self.started.elapsed().saturating_sub(self.paused).as_secs_f64();
        Some((rate * f64::from(1 << 20) * running) as u64)
    }

    fn run_lanes(
        &mut self,
        volume: &mut Volume,
        lanes: &[usize],
        starts: &[Option<(Location, u32)>],
        on_progress: &mut dyn FnMut(&Progress),
        on_checkpoint: &mut dyn FnMut(&Checkpoint),
    ) -> Result<(Vec<LaneRun>, bool)> {
        volume.quiesce()?;
        let depth = if self.options.submit_and_wait { 1 } else { self.options.max_in_flight };
        let mut runs = Vec::with_capacity(lanes.len());
        for (&lane, start) in lanes.iter().zip(starts) {
            let max_request = {
                let limit = volume.lane_reads(lane)?.max_request_bytes();
                self.options.max_request_bytes.unwrap_or(limit).min(limit)
            };
            if max_request < BLOCK_SIZE {
                return Err(Error::InvalidArgument(format!("requests of {max_request} bytes")));
            }
            let (from, skip) = start.unwrap_or((Location { zone: 0, offset: 0 }, 0));
            runs.push(LaneRun {
                lane,
                planner: Planner::new(lane, from, skip, max_request),
                queue: VecDeque::new(),
                pending: BTreeMap::new(),
                next_seq: 0,
                in_flight: 0,
                done_before: start.is_none(),
                failed_reads: 0,
                checksum_blocks: 0,
            });
        }
        let mut completions: Vec<IoCompletion> = Vec::with_capacity(depth);
        let mut cancelled = false;
        let mut idle_since: Option<Instant> = None;
        loop {
            match self.control.state() {
                CANCEL => cancelled = true,
                PAUSE if runs.iter().all(|r| r.pending.is_empty()) => {
                    self.checkpoint(&runs, false, on_checkpoint);
                    let paused_at = Instant::now();
                    while self.control.state() == PAUSE {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    self.paused += paused_at.elapsed();
                    self.depth_since = Instant::now();
                    continue;
                }
                _ => {}
            }
            let running = self.control.state() == RUN;
            // Plan ahead of each copy's queue, and submit up to its depth
            // on its device, within the rate limit (over all of them).
            let mut submitted = 0;
            // Submit-and-wait (the ablation) keeps one read in flight over
            // the whole pass, verified before the next, as a kernel scrub
            // at queue depth 1 does.
            let mut waiting = runs.iter().any(|r| !r.pending.is_empty());
            for (index, run) in runs.iter_mut().enumerate() {
                if run.done_before {
                    continue;
                }
                if running && !cancelled && run.queue.len() < 2 * depth {
                    run.planner.refill(volume, &mut run.queue, 4 * depth);
                }
                while running && !cancelled && run.in_flight < depth && !run.queue.is_empty() {
                    if self.options.submit_and_wait && waiting {
                        break;
                    }
                    let bytes = run.queue.front().map_or(0, |r| r.bytes()) as u64;
                    if self.allowed().is_some_and(|allowed| self.bytes_submitted + bytes > allowed + bytes.min(1 << 20))
                    {
                        break;
                    }
                    // The volume was quiesced when the pass began and
                    // writes nothing until repair: no wait here.
                    let (lba, read_bytes) = run.queue.front().map(|r| (r.lba, r.bytes())).expect("non-empty");
                    if !volume.lane_reads(run.lane)?.submit(lba, read_bytes, token(index, run.next_seq))? {
                        // No buffer or queue slot free: reap first.
                        break;
                    }
                    let read = run.queue.pop_front().expect("non-empty");
                    self.bytes_submitted += bytes;
                    run.pending.insert(
                        run.next_seq,
                        Pending { read, done: false, failed: false, checksum_blocks: 0, suspects: Vec::new() },
                    );
                    run.next_seq += 1;
                    run.in_flight += 1;
                    waiting = true;
                    self.set_in_flight(self.in_flight + 1);
                    submitted += 1;
                }
            }
            // Reap each copy's device; a completion goes to the copy its
            // token names.
            let mut reaped = 0;
            for index in 0..runs.len() {
                if runs[index].in_flight == 0 {
                    continue;
                }
                volume.lane_reads(runs[index].lane)?.poll(&mut completions);
                reaped += completions.len();
                for completion in completions.drain(..) {
                    let (owner, seq) = untoken(completion.token);
                    let Some(run) = runs.get_mut(owner) else { continue };
                    run.in_flight = run.in_flight.saturating_sub(1);
                    self.set_in_flight(self.in_flight.saturating_sub(1));
                    let lane = run.lane;
                    let Some(entry) = run.pending.get_mut(&seq) else { continue };
                    self.report.reads += 1;
                    self.report.bytes_read += entry.read.bytes() as u64;
                    match completion.status {
                        Ok(()) => {
                            let buffer = completion.buffer.expect("reads carry their buffer");
                            if self.options.verify {
                                let pieces =
                                    entry.read.pieces.iter().map(|p| (p.offset_blocks, p.expected.clone())).collect();
                                let tags = ReadMeta::of(volume, &entry.read, completion.metadata);
                                self.verifier.submit(VerifyJob { seq: completion.token, buffer, tags, pieces });
                            } else {
                                entry.done = true;
                            }
                        }
                        Err(error) => {
                            log::debug!(
                                "read of {} blocks at LBA {} failed: {error}",
                                entry.read.blocks,
                                entry.read.lba
                            );
                            entry.failed = true;
                            entry.suspects.extend(entry.read.pieces.iter().map(|piece| Suspect {
                                lane,
                                extent: piece.id,
                                bad_blocks: Vec::new(),
                                read_failed: true,
                            }));
                            entry.done = true;
                        }
                    }
                }
            }
            // Verification results.
            while let Some(result) = self.verifier.try_recv() {
                finish_verify(&mut runs, result);
            }
            // Retire each copy's finished reads in order; account.
            for run in &mut runs {
                while let Some(entry) = run.pending.first_entry() {
                    if !entry.get().done {
                        break;
                    }
                    let Pending { read, failed, checksum_blocks, suspects, .. } = entry.remove();
                    run.failed_reads += u64::from(failed);
                    run.checksum_blocks += checksum_blocks;
                    self.report.errors.failed_reads += u64::from(failed);
                    self.report.errors.checksum += checksum_blocks;
                    self.suspects.extend(suspects);
                    self.bytes_done += read.bytes() as u64;
                    if self.options.verify {
                        self.bytes_verified += read.bytes() as u64;
                        self.report.bytes_verified += read.bytes() as u64;
                    }
                }
            }
            // Each copy's position is its first read not yet finished, so
            // reads in flight do not hold the checkpoint back.
            if self.bytes_done - self.last_checkpoint_bytes >= self.options.checkpoint_every_bytes {
                self.checkpoint(&runs, true, on_checkpoint);
            }
            if self.last_progress.elapsed() >= Duration::from_millis(500) {
                self.last_progress = Instant::now();
                let running = self.started.elapsed().saturating_sub(self.paused).as_secs_f64().max(1e-9);
                let rate = self.report.bytes_read as f64 / running;
                let left = self.report.bytes_total.saturating_sub(self.bytes_done) as f64;
                let lane = runs.iter().find(|r| !r.finished()).or(runs.last()).map_or(0, |r| r.lane);
                on_progress(&Progress {
                    lane,
                    bytes_done: self.bytes_done,
                    bytes_total: self.report.bytes_total,
                    rate_mib_s: rate / f64::from(1 << 20),
                    eta_s: if rate > 0.0 { left / rate } else { f64::INFINITY },
                });
            }
            let drained = runs.iter().all(|r| r.pending.is_empty());
            if drained && (cancelled || runs.iter().all(LaneRun::finished)) {
                break;
            }
            // Bounded waits: nothing moved for a whole timeout with reads
            // outstanding means a device stopped answering.
            if reaped == 0 && submitted == 0 {
                if self.in_flight == 0 && self.verifier.outstanding() > 0 {
                    if let Some(result) = self.verifier.recv_timeout(Duration::from_millis(50)) {
                        finish_verify(&mut runs, result);
                    }
                } else if self.in_flight == 0 && self.allowed().is_some() && runs.iter().any(|r| !r.queue.is_empty()) {
                    // Rate limited with nothing in flight: sleep a little.
                    std::thread::sleep(Duration::from_micros(500));
                }
                let since = *idle_since.get_or_insert_with(Instant::now);
                if self.in_flight > 0 && since.elapsed() > self.options.timeout {
                    return Err(Error::Timeout { what: "scrub reads" });
                }
            } else {
                idle_since = None;
            }
        }
        self.set_in_flight(0);
        for run in &runs {
            self.report.plan_lookups += run.planner.lookups;
        }
        Ok((runs, cancelled))
    }

    /// A checkpoint at each copy's first read not yet finished (with
    /// `in_flight`), or at the next one to submit or plan, with everything
    /// found before.
    fn checkpoint(&mut self, runs: &[LaneRun], in_flight: bool, on_checkpoint: &mut dyn FnMut(&Checkpoint)) {
        let positions = lane_positions(runs, in_flight);
        let first = first_not_done(&positions, runs.last().map_or(0, |r| r.lane));
        assert!(self.bytes_verified <= self.bytes_done, "more verified than read");
        self.last_checkpoint_bytes = self.bytes_done;
        on_checkpoint(&Checkpoint {
            version: CHECKPOINT_VERSION,
            volume_id: self.volume_id,
            lane: first.lane,
            zone: first.zone,
            offset: first.offset,
            skip_blocks: first.skip_blocks,
            bytes_done: self.bytes_done,
            bytes_verified: self.bytes_verified,
            lanes: self.report.lanes.clone(),
            finished: false,
            findings: findings(self.report, self.suspects.clone()),
            positions,
        });
    }
}

/// A verification's result, to the read (and copy) its token names.
fn finish_verify(runs: &mut [LaneRun], result: VerifyResult) {
    let (owner, seq) = untoken(result.seq);
    let Some(run) = runs.get_mut(owner) else { return };
    let lane = run.lane;
    let Some(entry) = run.pending.get_mut(&seq) else { return };
    for (piece, bad) in entry.read.pieces.iter().zip(result.bad) {
        if !bad.is_empty() {
            entry.checksum_blocks += bad.len() as u64;
            entry.suspects.push(Suspect {
                lane,
                extent: piece.id,
                bad_blocks: bad.iter().map(|b| b + piece.extent_block).collect(),
                read_failed: false,
            });
        }
    }
    entry.done = true;
}

/// The position of the first read not yet finished, else of the next read
/// to submit, else of the next to plan.
fn position(first_unfinished: Option<&Read>, queue: &VecDeque<Read>, planner: &Planner) -> Position {
    let (location, skip) = match first_unfinished.or(queue.front()) {
        Some(read) => {
            let piece = &read.pieces[0];
            let extent_start = Location {
                zone: read.start.zone,
                offset: read.start.offset + piece.offset_blocks - piece.extent_block,
            };
            (extent_start, piece.extent_block)
        }
        None => planner.position(),
    };
    Position { location, skip }
}

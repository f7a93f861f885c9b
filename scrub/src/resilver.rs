//! Resilver: writing every copy a member lacks (it was replaced, or came
//! back after missing some writes), from the other copies, in physical
//! order and at high queue depth, reading every survivor at once.
//!
//! - The reads are the scrub's: a [`Planner`] per source lane walks that
//!   lane in physical order, taking only the extents that lack the target
//!   copy and that the volume reads from it ([`Volume::copy_source`]:
//!   each extent from one of the lanes holding it, spread over them), and
//!   merges adjacent ones into large reads; a fixed number are in flight
//!   on each source's queue pair ([`ResilverOptions::max_in_flight`]), so
//!   a pool's rebuild reads all its survivors in parallel, each at its
//!   own queue depth (dRAID's lesson: not one drive's bandwidth).
//! - Each completed read is copied out of its DMA buffer, verified against
//!   the extents' checksums ([`ResilverOptions::verify`]), and each extent
//!   is queued as a write of its missing copy
//!   ([`Volume::submit_copy`]), so reads of the source and writes of the
//!   target overlap. A block that fails its checksum has no good copy left:
//!   the extent is reported ([`ResilverReport::unrecoverable`]) and its
//!   copy stays missing.
//! - Progress is the volume's own metadata: a copy written is journaled at
//!   the next commit (every [`ResilverOptions::commit_every_bytes`]), and
//!   what is still missing is what a resilver started after a restart
//!   does. No progress file.
//! - Work goes in steps ([`Resilver::step`]): between steps the volume is
//!   the caller's again, to read and write (new writes go to every copy in
//!   use, the target's included). Pause, resume and cancel come through a
//!   [`Control`]; a rate limit in MiB/s bounds the reads.
//! - At the end a verify pass (the scrub, over the target copy only)
//!   confirms the new copy ([`ResilverOptions::verify_after`]).
//!
//! ZFS's sequential resilver (`zpool replace`, then a scrub) and btrfs's
//! `replace` are the anchors; ZFS's dirty-time log is what the missing
//! locations stand for.

use crate::plan::{Piece, Planner, Read};
use crate::spread::Spread;
use crate::verify::{piece_mismatches, ReadMeta, Workers};
use crate::{scrub, Control, Error, Report, Result, ScrubOptions, CANCEL, PAUSE};
use nvme_driver::dma::DmaMemory;
use nvme_driver::IoCompletion;
use serde::Serialize;
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use zoned_allocator::{ExtentId, Location, Profile, Volume, BLOCK_SIZE};

/// How to resilver.
#[derive(Clone, Debug)]
pub struct ResilverOptions {
    /// Reads in flight on each source lane.
    pub max_in_flight: usize,
    /// Largest read; `None` is the namespace's largest transfer. Never
    /// below the volume's largest extent (an extent is copied whole).
    pub max_request_bytes: Option<usize>,
    /// Verify each extent's checksums as it is read (off: copy as read).
    pub verify: bool,
    /// Threads checksumming completed reads; 0 checksums on the polling
    /// thread.
    pub verify_threads: usize,
    /// Bandwidth ceiling on the reads, in MiB/s.
    pub rate_limit_mib_s: Option<f64>,
    /// Commit (making the copies written durable, and the progress with
    /// them) after this many bytes.
    pub commit_every_bytes: u64,
    /// Scrub the new copy when every copy is written.
    pub verify_after: bool,
    /// Bound on waiting for one read or write.
    pub timeout: Duration,
}

impl Default for ResilverOptions {
    fn default() -> Self {
        ResilverOptions {
            max_in_flight: 64,
            max_request_bytes: None,
            verify: true,
            verify_threads: 2,
            rate_limit_mib_s: None,
            commit_every_bytes: 256 << 20,
            verify_after: true,
            timeout: Duration::from_secs(30),
        }
    }
}

/// What a resilver is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResilverPhase {
    /// Writing the copies the place lacks.
    Copy,
    /// Scrubbing the new copy ([`ResilverOptions::verify_after`]).
    Verify,
}

/// Progress, as the resilver goes: of the copy, then of the verify pass
/// (its bytes, rate and time to finish are the scrub's).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ResilverProgress {
    /// The device place being brought up to date.
    pub place: usize,
    /// Which part is running.
    pub phase: ResilverPhase,
    /// Bytes of copies written so far.
    pub bytes_done: u64,
    /// Bytes of copies missing when the resilver began.
    pub bytes_total: u64,
    /// Copy bandwidth so far, in MiB/s, pauses excluded.
    pub rate_mib_s: f64,
    /// Time to finish at that rate, in seconds (infinite before the first
    /// copy).
    pub eta_s: f64,
}

/// What a resilver did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ResilverReport {
    /// The device place brought up to date.
    pub place: usize,
    /// The lanes read (every other lane in use that holds copies).
    pub source_lanes: Vec<usize>,
    /// Bytes read from each of them, in the same order.
    pub source_bytes: Vec<u64>,
    /// Source lanes given up during the run: their extents were read from
    /// the others.
    pub sources_lost: Vec<usize>,
    /// The copy written (for a distributed rebuild, the lane whose copies
    /// were written elsewhere).
    pub target_lane: usize,
    /// A distributed rebuild: the copies went to free space on the
    /// survivors, not to a replacement.
    pub distributed: bool,
    /// Bytes of copies missing when it began.
    pub bytes_total: u64,
    /// Bytes of copies written and journaled.
    pub bytes_copied: u64,
    /// Extents whose copy was written.
    pub extents_copied: u64,
    /// Bytes read from the source, and read commands.
    pub bytes_read: u64,
    /// Read commands.
    pub reads: u64,
    /// Checksums were verified as read.
    pub verified: bool,
    /// Each read's buffer was written as it was, with no copy through the
    /// host: both devices share one I/O address space.
    pub zero_copy: bool,
    /// Blocks of the source that failed their checksum.
    pub checksum_errors: u64,
    /// Reads of the source that failed.
    pub failed_reads: u64,
    /// Extents with no good copy left: their copy stays missing.
    pub unrecoverable: Vec<ExtentId>,
    /// Copies whose write failed (with why): they stay missing.
    pub copy_failures: Vec<(ExtentId, String)>,
    /// Bytes the target still lacks at the end.
    pub bytes_left: u64,
    /// Seconds, pauses included.
    pub duration_s: f64,
    /// Copy bandwidth, pauses excluded, in MiB/s.
    pub rate_mib_s: f64,
    /// Mean reads in flight, and mean copy writes in flight.
    pub mean_read_queue_depth: f64,
    /// Mean copy writes in flight.
    pub mean_write_queue_depth: f64,
    /// Commits made along the way.
    pub commits: u64,
    /// Stopped by a cancel before the end.
    pub cancelled: bool,
    /// The verify pass over the new copy.
    pub verify: Option<Report>,
}

impl ResilverReport {
    /// Every missing copy was written, and the verify pass (if run) is
    /// clean.
    pub fn complete(&self) -> bool {
        !self.cancelled
            && self.bytes_left == 0
            && self.verify.as_ref().is_none_or(|v| v.outcome == crate::Outcome::Clean)
    }
}

/// Brings device place `place` of `volume` up to date: see the [module
/// documentation](self). Runs to the end (or a cancel), then commits and,
/// when asked, scrubs the new copy.
pub fn resilver(
    volume: &mut Volume,
    place: usize,
    options: &ResilverOptions,
    control: &Control,
    on_progress: &mut dyn FnMut(&ResilverProgress),
) -> Result<ResilverReport> {
    let engine = Resilver::new(volume, place, options)?;
    run(volume, engine, options, control, on_progress)
}

/// Restores the redundancy place `place` (a member away or given up)
/// held, with no replacement device: each of its copies is written to
/// free space on the survivors, read from them all at once
/// ([`Resilver::distributed`]). Runs to the end (or a cancel), commits,
/// and when asked scrubs every survivor. Needs room on the survivors for
/// what the place held.
pub fn rebuild_distributed(
    volume: &mut Volume,
    place: usize,
    options: &ResilverOptions,
    control: &Control,
    on_progress: &mut dyn FnMut(&ResilverProgress),
) -> Result<ResilverReport> {
    let engine = Resilver::distributed(volume, place, options)?;
    run(volume, engine, options, control, on_progress)
}

fn run(
    volume: &mut Volume,
    mut engine: Resilver,
    options: &ResilverOptions,
    control: &Control,
    on_progress: &mut dyn FnMut(&ResilverProgress),
) -> Result<ResilverReport> {
    let started = Instant::now();
    let mut last_progress = Instant::now();
    loop {
        match control.state() {
            CANCEL => {
                engine.report.cancelled = true;
                break;
            }
            PAUSE => {
                let paused_at = Instant::now();
                while control.state() == PAUSE {
                    std::thread::sleep(Duration::from_millis(5));
                }
                engine.paused += paused_at.elapsed();
                continue;
            }
            _ => {}
        }
        let done = engine.step(volume, 64 << 20)?;
        if last_progress.elapsed() >= Duration::from_millis(500) || done {
            last_progress = Instant::now();
            on_progress(&engine.progress());
        }
        if done {
            break;
        }
    }
    let mut report = engine.finish(volume)?;
    if options.verify_after && !report.cancelled {
        // The verify pass keeps the resilver's rate limit, control and
        // progress: a ceiling set for the copy holds for the whole job.
        // A distributed rebuild's copies are on every survivor.
        let scrub_options = ScrubOptions {
            lanes: (!report.distributed).then(|| vec![report.target_lane]),
            max_in_flight: options.max_in_flight,
            verify_threads: options.verify_threads,
            rate_limit_mib_s: options.rate_limit_mib_s,
            timeout: options.timeout,
            ..ScrubOptions::default()
        };
        let place = report.place;
        let mut on_scrub_progress = |p: &crate::Progress| {
            on_progress(&ResilverProgress {
                place,
                phase: ResilverPhase::Verify,
                bytes_done: p.bytes_done,
                bytes_total: p.bytes_total,
                rate_mib_s: p.rate_mib_s,
                eta_s: p.eta_s,
            })
        };
        let verify = scrub(volume, &scrub_options, control, None, &mut on_scrub_progress, &mut |_| {})?;
        // The scrub reports now and then; its end is reported here.
        on_progress(&ResilverProgress {
            place,
            phase: ResilverPhase::Verify,
            bytes_done: verify.pass_bytes_read,
            bytes_total: verify.bytes_total,
            rate_mib_s: verify.rate_mib_s,
            eta_s: 0.0,
        });
        report.verify = Some(verify);
    }
    report.duration_s = started.elapsed().as_secs_f64();
    Ok(report)
}

/// A resilver in steps. See the [module documentation](self).
#[allow(missing_debug_implementations)]
pub struct Resilver {
    options: ResilverOptions,
    target: Target,
    /// One walk per source lane.
    walks: Vec<Walk>,
    /// Reads in flight: tag → read.
    in_flight: Vec<Option<Read>>,
    free_tags: Vec<usize>,
    reads_in_flight: usize,
    copies_in_flight: usize,
    report: ResilverReport,
    started: Instant,
    paused: Duration,
    read_depth_area: f64,
    write_depth_area: f64,
    depth_since: Instant,
    bytes_submitted: u64,
    since_commit: u64,
    scratch: Vec<u8>,
    completions: Vec<IoCompletion>,
    /// Walks of the source begun after the first.
    passes: u32,
    /// Checksums on worker threads, when verifying with any.
    checker: Option<Checker>,
    /// The source's reads are written as the copies, buffer and all: both
    /// devices share one I/O address space (two controllers in one VFIO
    /// container), so no byte passes through the host.
    zero_copy: bool,
    /// Source lanes whose device the copies are written to too: their
    /// reads leave buffers to the copies
    /// ([`zoned_allocator::LaneReads::leaving_room_for_writes`]).
    sources_written: Vec<usize>,
    /// Where a distributed rebuild writes each copy: planned from what
    /// every survivor reads, so that their reads and writes come out even
    /// (the busiest device's work is the rebuild's time; see
    /// [`crate::spread`]). No plan for a replace.
    spread: Spread,
}

/// Walks of the sources a resilver makes at most: the first, and more only
/// when the volume moved extents behind them between steps.
const MAX_PASSES: u32 = 8;

/// One source lane's walk: its planner, the reads planned and not yet
/// submitted, and its reads in flight.
struct Walk {
    lane: usize,
    planner: Planner,
    queue: VecDeque<Read>,
    reads_in_flight: usize,
}

impl Walk {
    /// A walk of `lane` from `from` over the extents lacking their copy in
    /// `target` that are read from it.
    fn new(lane: usize, from: Location, target: usize, one_extent_per_read: bool) -> Walk {
        let planner =
            Planner::new(lane, from, 0, usize::MAX).lacking_in(target).one_extent_per_read(one_extent_per_read);
        Walk { lane, planner, queue: VecDeque::new(), reads_in_flight: 0 }
    }
}

fn blocks_of(volume: &Volume, id: ExtentId) -> u64 {
    volume.extent(id).map_or(0, |bytes| (bytes / BLOCK_SIZE) as u64)
}

impl Resilver {
    /// Sets up a resilver of place `place`: a member in use that lacks
    /// copies, read from the others.
    pub fn new(volume: &Volume, place: usize, options: &ResilverOptions) -> Result<Resilver> {
        Resilver::set_up(volume, place, false, options)
    }

    /// Sets up a distributed rebuild of place `place`, a member away or
    /// given up: each of its copies is written to free space on the
    /// survivors, where placement puts it (dRAID's distributed spare, done
    /// by placement), read from the survivors, so that redundancy comes
    /// back at their combined bandwidth, with no replacement device.
    /// Refused when the survivors lack room for every copy
    /// ([`Volume::check_rebuild_room`]), before anything is written.
    pub fn distributed(volume: &Volume, place: usize, options: &ResilverOptions) -> Result<Resilver> {
        Resilver::set_up(volume, place, true, options)
    }

    fn set_up(volume: &Volume, place: usize, distributed: bool, options: &ResilverOptions) -> Result<Resilver> {
        if options.max_in_flight == 0 || options.max_in_flight > 4096 {
            return Err(Error::InvalidArgument(format!(
                "{} reads in flight: expected 1..=4096",
                options.max_in_flight
            )));
        }
        if volume.copies() < 2 || volume.profile() == Profile::Dup {
            return Err(Error::InvalidArgument(format!("a {:?} volume has no member to resilver", volume.profile())));
        }
        let target = (0..volume.lanes()).find(|&l| volume.lane_device(l) == place);
        let Some(target) = target else {
            return Err(Error::InvalidArgument(format!("the volume has no device place {place}")));
        };
        match (distributed, volume.lane_online(target)) {
            (false, false) => {
                return Err(Error::InvalidArgument(format!(
                    "device place {place} is not in use: replace it first, or rebuild its copies on the others \
                     (distributed)"
                )))
            }
            (true, true) => {
                return Err(Error::InvalidArgument(format!(
                    "device place {place} is in use: a distributed rebuild moves the copies of a device gone"
                )))
            }
            _ => {}
        }
        let sources: Vec<usize> = (0..volume.lanes()).filter(|&l| l != target && volume.lane_online(l)).collect();
        if sources.is_empty() {
            return Err(Error::InvalidArgument("no other copy in use to read from".into()));
        }
        if distributed && sources.len() < volume.copies() {
            return Err(Error::InvalidArgument(format!(
                "{} device(s) in use cannot hold {} copies of each extent apart: replace place {place} instead",
                sources.len(),
                volume.copies()
            )));
        }
        // Refused before a copy is written when the survivors lack room
        // for them all: else it would fill them and stop part way.
        if distributed {
            volume.check_rebuild_room(target)?;
        }
        let work = if distributed { Target::Elsewhere { from: target } } else { Target::Lane(target) };
        let bytes_total = work.blocks_left(volume) * BLOCK_SIZE as u64;
        // Reads written as they are when every source shares the I/O
        // address space of every lane written.
        let domain = volume.dma_domain(sources[0]);
        let written: Vec<usize> = if distributed { sources.clone() } else { vec![target] };
        let zero_copy = domain.is_some() && sources.iter().chain(&written).all(|&l| volume.dma_domain(l) == domain);
        let sources_written = sources
            .iter()
            .copied()
            .filter(|&s| written.iter().any(|&w| volume.lane_device(w) == volume.lane_device(s)))
            .collect();
        let start = Location { zone: 0, offset: 0 };
        let now = Instant::now();
        Ok(Resilver {
            options: options.clone(),
            target: work,
            walks: sources.iter().map(|&lane| Walk::new(lane, start, target, zero_copy)).collect(),
            in_flight: Vec::new(),
            free_tags: Vec::new(),
            reads_in_flight: 0,
            copies_in_flight: 0,
            report: ResilverReport {
                place,
                source_bytes: vec![0; sources.len()],
                source_lanes: sources,
                target_lane: target,
                distributed,
                bytes_total,
                verified: options.verify,
                zero_copy,
                ..ResilverReport::default()
            },
            started: now,
            paused: Duration::ZERO,
            read_depth_area: 0.0,
            write_depth_area: 0.0,
            depth_since: now,
            bytes_submitted: 0,
            since_commit: 0,
            scratch: Vec::new(),
            completions: Vec::new(),
            passes: 0,
            zero_copy,
            sources_written,
            // What each survivor reads, known from the start: the copies'
            // writes are planned against the whole rebuild's reads.
            spread: if distributed { plan_spread(volume, target) } else { Spread::none(0) },
            checker: (options.verify && options.verify_threads > 0)
                .then(|| Checker::new(options.verify_threads, check)),
        })
    }

    /// Progress so far.
    pub fn progress(&self) -> ResilverProgress {
        let running = self.running_s();
        let rate = self.report.bytes_copied as f64 / running;
        let left = self.report.bytes_total.saturating_sub(self.report.bytes_copied) as f64;
        ResilverProgress {
            place: self.report.place,
            phase: ResilverPhase::Copy,
            bytes_done: self.report.bytes_copied,
            bytes_total: self.report.bytes_total,
            rate_mib_s: rate / f64::from(1 << 20),
            eta_s: if rate > 0.0 { left / rate } else { f64::INFINITY },
        }
    }

    fn running_s(&self) -> f64 {
        self.started.elapsed().saturating_sub(self.paused).as_secs_f64().max(1e-9)
    }

    fn account_depth(&mut self) {
        let now = Instant::now();
        let span = now.duration_since(self.depth_since).as_secs_f64();
        self.read_depth_area += self.reads_in_flight as f64 * span;
        self.write_depth_area += self.copies_in_flight as f64 * span;
        self.depth_since = now;
    }

    /// Copies up to about `budget_bytes`, then drains its reads and hands
    /// the volume back (writes of copies may still be in flight; they end
    /// at the caller's next poll or commit). Returns `true` when every
    /// missing copy was planned and written.
    pub fn step(&mut self, volume: &mut Volume, budget_bytes: u64) -> Result<bool> {
        let target = self.report.target_lane;
        let work = self.target;
        let depth = self.options.max_in_flight;
        let mut step_bytes = 0u64;
        let mut idle_since: Option<Instant> = None;
        // The sources take no write while we read them: wait out the
        // caller's writes there.
        volume.quiesce()?;
        // The volume may have changed since the last step (extents freed,
        // moved by reclaim, zones reset): each source plans again from its
        // first read not yet submitted.
        for walk in &mut self.walks {
            if let Some(first) = walk.queue.front() {
                let from = first.start;
                *walk = Walk {
                    reads_in_flight: walk.reads_in_flight,
                    ..Walk::new(walk.lane, from, target, self.zero_copy)
                };
            }
        }
        self.drop_lost_sources(volume)?;
        let mut max_requests = Vec::with_capacity(self.walks.len());
        for walk in &mut self.walks {
            let limit = volume.lane_reads(walk.lane)?.max_request_bytes();
            let max_request = self.options.max_request_bytes.unwrap_or(limit).clamp(volume.max_extent_bytes(), limit);
            walk.planner.set_max_request(max_request);
            max_requests.push((walk.lane, max_request));
        }
        loop {
            let reading = step_bytes < budget_bytes;
            let mut moved = self.drop_lost_sources(volume)?;
            for index in 0..self.walks.len() {
                let walk = &mut self.walks[index];
                if reading && walk.queue.len() < 2 * depth {
                    walk.planner.refill(volume, &mut walk.queue, 4 * depth);
                }
                while step_bytes < budget_bytes
                    && self.walks[index].reads_in_flight < depth
                    && !self.walks[index].queue.is_empty()
                {
                    let walk = &self.walks[index];
                    let bytes = walk.queue.front().map_or(0, Read::bytes) as u64;
                    if self.over_rate(bytes) {
                        break;
                    }
                    let tag = self.free_tags.pop().unwrap_or(self.in_flight.len());
                    let (lba, read_bytes) = walk.queue.front().map(|r| (r.lba, r.bytes())).expect("non-empty");
                    let mut reads = volume.lane_reads(walk.lane)?;
                    if self.sources_written.contains(&walk.lane) {
                        reads = reads.leaving_room_for_writes();
                    }
                    if !reads.submit(lba, read_bytes, tag as u64)? {
                        self.free_tags.push(tag);
                        break;
                    }
                    let read = self.walks[index].queue.pop_front().expect("non-empty");
                    if tag == self.in_flight.len() {
                        self.in_flight.push(Some(read));
                    } else {
                        self.in_flight[tag] = Some(read);
                    }
                    self.account_depth();
                    self.walks[index].reads_in_flight += 1;
                    self.reads_in_flight += 1;
                    self.bytes_submitted += bytes;
                    step_bytes += bytes;
                    moved = true;
                }
            }
            let mut completions = std::mem::take(&mut self.completions);
            for index in 0..self.walks.len() {
                volume.lane_reads(self.walks[index].lane)?.poll(&mut completions);
                for completion in completions.drain(..) {
                    moved = true;
                    self.read_done(volume, completion)?;
                }
            }
            self.completions = completions;
            while let Some(checked) = self.checker.as_mut().and_then(Checker::try_recv) {
                moved = true;
                self.checked(volume, checked)?;
            }
            volume.poll();
            while let Some(done) = volume.next_copy_done() {
                moved = true;
                self.copy_done(volume, done);
            }
            let mut finished = self.walks.iter().all(|w| w.queue.is_empty() && w.planner.is_done());
            let idle = self.reads_in_flight == 0 && self.checker.as_ref().is_none_or(|c| c.outstanding == 0);
            if finished && idle && self.copies_in_flight == 0 && self.passes < MAX_PASSES {
                // Reclaim between steps may have moved an extent behind
                // the walks: another pass over what is still missing.
                let skipped: std::collections::BTreeSet<ExtentId> = self
                    .report
                    .unrecoverable
                    .iter()
                    .copied()
                    .chain(self.report.copy_failures.iter().map(|(id, _)| *id))
                    .collect();
                let left = work.blocks_left(volume)
                    - skipped
                        .iter()
                        .filter(|&&id| work.needs(volume, id))
                        .map(|&id| blocks_of(volume, id))
                        .sum::<u64>();
                if left > 0 {
                    self.passes += 1;
                    for walk in &mut self.walks {
                        *walk = Walk::new(walk.lane, Location { zone: 0, offset: 0 }, target, self.zero_copy);
                        let max_request = max_requests.iter().find(|(lane, _)| *lane == walk.lane).map(|m| m.1);
                        walk.planner.set_max_request(max_request.expect("a lane walked from the start"));
                    }
                    finished = false;
                    if reading {
                        continue;
                    }
                }
            }
            let checking = self.checker.as_ref().map_or(0, |c| c.outstanding);
            if self.reads_in_flight == 0 && checking == 0 && (finished || !reading) {
                if self.since_commit >= self.options.commit_every_bytes {
                    self.commit(volume)?;
                }
                return Ok(finished && self.copies_in_flight == 0);
            }
            if moved {
                idle_since = None;
            } else {
                let waiting = self.checker.as_mut().filter(|c| c.outstanding > 0);
                if let Some(checked) = waiting.and_then(|c| c.recv_timeout(Duration::from_millis(5))) {
                    self.checked(volume, checked)?;
                    continue;
                }
                if self.reads_in_flight == 0 && self.options.rate_limit_mib_s.is_some() {
                    std::thread::sleep(Duration::from_micros(500));
                }
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() > self.options.timeout {
                    return Err(Error::Timeout { what: "resilver reads or copies" });
                }
            }
        }
    }

    /// Stops reading from source lanes whose device was given up since
    /// (a second device lost during a rebuild): their reads in flight are
    /// dropped, and the extents they were to copy are read from another
    /// lane holding them on the next pass ([`Volume::copy_source`] no
    /// longer names the lost one). Fails only when no source is left.
    /// Whether any was dropped.
    fn drop_lost_sources(&mut self, volume: &Volume) -> Result<bool> {
        let lost: Vec<usize> = self.walks.iter().map(|w| w.lane).filter(|&lane| !volume.lane_online(lane)).collect();
        if lost.is_empty() {
            return Ok(false);
        }
        for &lane in &lost {
            log::warn!("resilver: lane {lane} is no longer in use; its extents are read from the others");
            for tag in 0..self.in_flight.len() {
                if self.in_flight[tag].as_ref().is_some_and(|read| read.lane == lane) {
                    self.in_flight[tag] = None;
                    self.free_tags.push(tag);
                    self.account_depth();
                    self.reads_in_flight -= 1;
                }
            }
            self.report.sources_lost.push(lane);
        }
        self.walks.retain(|walk| !lost.contains(&walk.lane));
        if self.walks.is_empty() {
            return Err(Error::InvalidArgument("no copy in use left to read from".into()));
        }
        Ok(true)
    }

    fn over_rate(&self, bytes: u64) -> bool {
        let Some(rate) = self.options.rate_limit_mib_s else { return false };
        let allowed = (rate * f64::from(1 << 20) * self.running_s()) as u64;
        self.bytes_submitted + bytes > allowed + bytes.min(1 << 20)
    }

    /// A read of the source finished: verify its extents and queue their
    /// copies.
    fn read_done(&mut self, volume: &mut Volume, completion: IoCompletion) -> Result<()> {
        let tag = completion.token as usize;
        let Some(read) = self.in_flight.get_mut(tag).and_then(Option::take) else { return Ok(()) };
        self.free_tags.push(tag);
        self.account_depth();
        self.reads_in_flight -= 1;
        if let Some(walk) = self.walks.iter_mut().find(|w| w.lane == read.lane) {
            walk.reads_in_flight -= 1;
        }
        if let Some(index) = self.report.source_lanes.iter().position(|&lane| lane == read.lane) {
            self.report.source_bytes[index] += read.bytes() as u64;
        }
        self.report.reads += 1;
        self.report.bytes_read += read.bytes() as u64;
        let meta = ReadMeta::of(volume, &read, completion.metadata);
        let buffer = match completion.status {
            Ok(()) => completion.buffer.expect("reads carry their buffer"),
            Err(error) => {
                log::warn!("resilver read of {} blocks at LBA {} failed: {error}", read.blocks, read.lba);
                self.report.failed_reads += 1;
                volume.record_read_errors(read.lane, 1, 0);
                // Each extent alone, through the volume's own read (which
                // tries every copy it has).
                for piece in &read.pieces {
                    self.copy_one(volume, piece.id)?;
                }
                return Ok(());
            }
        };
        if let Some(checker) = self.checker.as_mut() {
            checker.submit(CheckJob { read, buffer, meta, keep_bytes: !self.zero_copy });
            return Ok(());
        }
        if self.zero_copy {
            return self.copy_read_buffer(volume, &read, buffer, meta.as_ref());
        }
        self.scratch.resize(buffer.len(), 0);
        buffer.buffer().copy_out(buffer.offset(), &mut self.scratch);
        drop(buffer);
        let mut again = Vec::new();
        for piece in &read.pieces {
            let start = piece.offset_blocks as usize * BLOCK_SIZE;
            let data = &self.scratch[start..start + piece.blocks as usize * BLOCK_SIZE];
            let whole = volume.extent(piece.id).is_some_and(|bytes| bytes == data.len());
            assert!(whole || volume.extent(piece.id).is_none(), "extent {} split across reads", piece.id);
            if !whole || !self.target.needs(volume, piece.id) {
                // Freed (or written) since it was planned.
                continue;
            }
            if self.options.verify {
                let bad = piece_mismatches(&piece.expected, piece.offset_blocks, data, meta.as_ref());
                if !bad.is_empty() {
                    // Read it again on its own, through the volume (which
                    // counts the errors and tries every copy it has).
                    self.report.checksum_errors += bad.len() as u64;
                    again.push(piece.id);
                    continue;
                }
            }
            let submitted =
                submit_copy(volume, piece, self.target, Source::Bytes(data), meta.as_ref(), &mut self.spread);
            self.queued(piece.id, submitted);
        }
        for id in again {
            self.copy_one(volume, id)?;
        }
        Ok(())
    }

    /// A read checksummed on a worker: queue the copies of the extents
    /// that verified, and read each that did not again on its own.
    fn checked(&mut self, volume: &mut Volume, checked: Checked) -> Result<()> {
        let Checked { read, buffer, bytes, meta, bad } = checked;
        assert!(buffer.is_none() || read.pieces.len() == 1, "a buffer written as it is holds one extent");
        let mut again = Vec::new();
        let mut buffer = buffer;
        for (piece, bad) in read.pieces.iter().zip(&bad) {
            let whole = volume.extent(piece.id).is_some_and(|len| len == piece.blocks as usize * BLOCK_SIZE);
            if !whole || !self.target.needs(volume, piece.id) {
                continue;
            }
            if !bad.is_empty() {
                self.report.checksum_errors += bad.len() as u64;
                again.push(piece.id);
                continue;
            }
            let source = match buffer.take() {
                // One extent per read: the buffer is its copy.
                Some(io) => Source::Buffer(io),
                None => {
                    let start = piece.offset_blocks as usize * BLOCK_SIZE;
                    Source::Bytes(&bytes[start..start + piece.blocks as usize * BLOCK_SIZE])
                }
            };
            let submitted = submit_copy(volume, piece, self.target, source, meta.as_ref(), &mut self.spread);
            self.queued(piece.id, submitted);
        }
        for id in again {
            self.copy_one(volume, id)?;
        }
        Ok(())
    }

    /// Writes a read of one extent, its buffer as it is, as the extent's
    /// missing copy; verified first when asked (its bytes copied out only
    /// to be checksummed).
    fn copy_read_buffer(
        &mut self,
        volume: &mut Volume,
        read: &Read,
        buffer: nvme_driver::IoBuffer,
        meta: Option<&ReadMeta>,
    ) -> Result<()> {
        assert_eq!(read.pieces.len(), 1, "one extent per read when writing reads as they are");
        let piece = &read.pieces[0];
        let whole = volume.extent(piece.id).is_some_and(|bytes| bytes == buffer.len());
        if !whole || !self.target.needs(volume, piece.id) {
            // Freed (or written) since it was planned.
            return Ok(());
        }
        if self.options.verify {
            self.scratch.resize(buffer.len(), 0);
            buffer.buffer().copy_out(buffer.offset(), &mut self.scratch);
            let bad = piece_mismatches(&piece.expected, piece.offset_blocks, &self.scratch, meta);
            if !bad.is_empty() {
                self.report.checksum_errors += bad.len() as u64;
                drop(buffer);
                return self.copy_one(volume, piece.id);
            }
        }
        let submitted = submit_copy(volume, piece, self.target, Source::Buffer(buffer), meta, &mut self.spread);
        self.queued(piece.id, submitted);
        Ok(())
    }

    /// Accounts for a copy the volume finished writing.
    fn copy_done(&mut self, volume: &Volume, done: zoned_allocator::WriteDone) {
        self.account_depth();
        self.copies_in_flight -= 1;
        let bytes = volume.extent(done.id).map_or(0, |bytes| bytes as u64);
        match done.result {
            Ok(()) => {
                self.report.extents_copied += 1;
                self.report.bytes_copied += bytes;
                self.since_commit += bytes;
            }
            Err(error) => self.report.copy_failures.push((done.id, error.to_string())),
        }
    }

    /// Accounts for a copy queued (or refused) for extent `id`.
    fn queued(&mut self, id: ExtentId, submitted: zoned_allocator::Result<()>) {
        match submitted {
            Ok(()) => {
                self.account_depth();
                self.copies_in_flight += 1;
            }
            Err(error) => self.report.copy_failures.push((id, error.to_string())),
        }
    }

    /// Copies one extent through the volume's verified read (after a
    /// failed merged read).
    fn copy_one(&mut self, volume: &mut Volume, id: ExtentId) -> Result<()> {
        let Some(bytes) = volume.extent(id) else { return Ok(()) };
        if !self.target.needs(volume, id) {
            return Ok(());
        }
        let mut data = vec![0u8; bytes];
        match volume.read(id, &mut data) {
            Ok(_) => {
                let submitted = match self.target {
                    Target::Lane(lane) => volume.submit_copy(id, lane, &data),
                    Target::Elsewhere { from } => balanced_lane(volume, id, from, &mut self.spread)
                        .and_then(|lane| volume.submit_relocation(id, from, lane, &data, None)),
                };
                self.queued(id, submitted);
            }
            Err(zoned_allocator::Error::Uncorrectable { .. }) => self.report.unrecoverable.push(id),
            Err(error) => return Err(error.into()),
        }
        Ok(())
    }

    fn commit(&mut self, volume: &mut Volume) -> Result<()> {
        volume.commit()?;
        self.report.commits += 1;
        // The commit waited for every write: the copies in flight ended,
        // and are durable with it.
        while let Some(done) = volume.next_copy_done() {
            self.copy_done(volume, done);
        }
        self.since_commit = 0;
        Ok(())
    }

    /// Ends the resilver: waits for the copies, commits, and reports.
    pub fn finish(mut self, volume: &mut Volume) -> Result<ResilverReport> {
        self.account_depth();
        self.commit(volume)?;
        assert_eq!(self.copies_in_flight, 0, "copies in flight after the final commit");
        let running = self.running_s();
        self.report.rate_mib_s = self.report.bytes_copied as f64 / f64::from(1 << 20) / running;
        self.report.mean_read_queue_depth = self.read_depth_area / running;
        self.report.mean_write_queue_depth = self.write_depth_area / running;
        self.report.bytes_left = self.target.blocks_left(volume) * BLOCK_SIZE as u64;
        self.report.duration_s = self.started.elapsed().as_secs_f64();
        Ok(self.report)
    }
}

/// A completed read handed to a worker to checksum.
struct CheckJob {
    read: Read,
    buffer: nvme_driver::IoBuffer,
    meta: Option<ReadMeta>,
    /// Hand the bytes back (the copying path); else hand the buffer back
    /// (it is written as it is).
    keep_bytes: bool,
}

/// What a worker found: per piece, the blocks that failed their checksum.
struct Checked {
    read: Read,
    buffer: Option<nvme_driver::IoBuffer>,
    bytes: Vec<u8>,
    meta: Option<ReadMeta>,
    bad: Vec<Vec<u32>>,
}

/// Checksums on worker threads, so that the polling thread keeps reads
/// and copies in flight (the scrub's verifier uses the same pool). Each
/// worker copies a read out of its DMA buffer (no reference into DMA
/// memory is formed), checks it, and hands back the buffer or the bytes.
type Checker = Workers<CheckJob, Checked>;

/// Checks one read on a worker.
fn check(job: CheckJob, scratch: &mut Vec<u8>) -> Checked {
    let CheckJob { read, buffer, meta, keep_bytes } = job;
    let mut bytes = if keep_bytes { Vec::new() } else { std::mem::take(scratch) };
    bytes.resize(buffer.len(), 0);
    buffer.buffer().copy_out(buffer.offset(), &mut bytes);
    let bad = read
        .pieces
        .iter()
        .map(|piece| {
            let start = piece.offset_blocks as usize * BLOCK_SIZE;
            let data = &bytes[start..start + piece.blocks as usize * BLOCK_SIZE];
            piece_mismatches(&piece.expected, piece.offset_blocks, data, meta.as_ref())
        })
        .collect();
    if keep_bytes {
        drop(buffer);
        Checked { read, buffer: None, bytes, meta, bad }
    } else {
        *scratch = bytes;
        Checked { read, buffer: Some(buffer), bytes: Vec::new(), meta, bad }
    }
}

/// What a resilver writes as an extent's missing copy.
enum Source<'a> {
    Bytes(&'a [u8]),
    Buffer(nvme_driver::IoBuffer),
}

/// Queues `source`, the read of `piece` (a whole extent), as its missing
/// copy in `lane`. On a volume with block tags the copy carries the
/// checksums its source's tags record, so that a block that went bad
/// unnoticed (say, with verification off) stays bad, for the next read or
/// scrub to find, rather than getting a tag made from bad data.
/// With [`Target::Elsewhere`], the copy goes to a lane placement chooses
/// and takes the place of the extent's copy in the lane left.
fn submit_copy(
    volume: &mut Volume,
    piece: &Piece,
    target: Target,
    source: Source<'_>,
    meta: Option<&ReadMeta>,
    spread: &mut Spread,
) -> zoned_allocator::Result<()> {
    let crcs = meta.map(|m| m.crcs(piece.offset_blocks, piece.blocks as usize));
    let lane = match target {
        Target::Lane(lane) => lane,
        Target::Elsewhere { from } => {
            let lane = balanced_lane(volume, piece.id, from, spread)?;
            return match source {
                Source::Bytes(data) => volume.submit_relocation(piece.id, from, lane, data, crcs),
                Source::Buffer(io) => volume.submit_relocation_buffer(piece.id, from, lane, io, crcs),
            };
        }
    };
    match (source, crcs) {
        (Source::Bytes(data), None) => volume.submit_copy(piece.id, lane, data),
        (Source::Bytes(data), Some(crcs)) => volume.submit_copy_with_checksums(piece.id, lane, data, crcs),
        (Source::Buffer(io), None) => volume.submit_copy_buffer(piece.id, lane, io),
        (Source::Buffer(io), Some(crcs)) => volume.submit_copy_buffer_with_checksums(piece.id, lane, io, crcs),
    }
}

/// A distributed rebuild's plan of the copies lane `target` lacks: the
/// blocks each survivor reads, and the journal each metadata device writes
/// besides (see [`crate::spread`]).
fn plan_spread(volume: &Volume, target: usize) -> Spread {
    let reads = volume.copy_source_blocks(target);
    let journal = volume.relocation_journal_blocks(target);
    let extra: Vec<u64> = (0..reads.len()).map(|lane| volume.metadata_copies_on(lane) as u64 * journal).collect();
    Spread::plan(&reads, &extra)
}

/// The lane a distributed rebuild writes extent `id`'s copy (of lane
/// `from`) to: of those that can take it, the one `spread` plans for the
/// survivor it is read from (see [`crate::spread`]).
fn balanced_lane(volume: &Volume, id: ExtentId, from: usize, spread: &mut Spread) -> zoned_allocator::Result<usize> {
    let eligible = volume.relocation_lanes(id, from)?;
    let blocks = volume.extent(id).map_or(0, |bytes| (bytes / BLOCK_SIZE) as u64);
    let lane = spread.choose(volume.copy_source(id, from), u32::from(eligible), blocks);
    Ok(lane.expect("relocation_lanes names one at least"))
}

/// Where a resilver writes the copies: into the lane that lacks them, or
/// (a distributed rebuild) anywhere placement puts them, in place of the
/// copies in a lane whose device is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// The missing copies of this lane, written there.
    Lane(usize),
    /// The copies of this lane (whose device is away), written to other
    /// lanes.
    Elsewhere { from: usize },
}

impl Target {
    /// Whether extent `id` still needs its copy written.
    fn needs(self, volume: &Volume, id: ExtentId) -> bool {
        match self {
            Target::Lane(lane) => volume.lacks_copy(id, lane),
            Target::Elsewhere { from } => volume.lacks_available_copy(id, from),
        }
    }

    /// Blocks of the copies still to write.
    fn blocks_left(self, volume: &Volume) -> u64 {
        match self {
            Target::Lane(lane) => volume.missing_blocks(lane),
            Target::Elsewhere { from } => volume.unavailable_blocks(from),
        }
    }
}

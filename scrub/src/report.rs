//! What a scrub found and did: errors by kind, corrected and
//! uncorrectable blocks, and the iostat view of its reads, as text or JSON.

use nvme_driver::IoError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use zoned_allocator::{ExtentId, MetadataScrub};

/// A block with no good copy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Uncorrectable {
    /// The extent the blocks belong to.
    pub extent: ExtentId,
    /// The extent's owner, as given to [`Volume::submit_write`](zoned_allocator::Volume::submit_write);
    /// `None` when it could not be read back.
    pub owner: Option<u64>,
    /// The copy (lane) that was scrubbed when the blocks were found; no lane
    /// had a good copy.
    pub lane: usize,
    /// Block indices within the extent.
    pub blocks: Vec<u32>,
}

/// A bad copy the scrub could not repair although a good copy exists: the
/// repair's write (or its confirming read) failed. The copy was left as it
/// was, the scrub went on with the others, and a later scrub retries it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairFailed {
    /// The extent the blocks belong to.
    pub extent: ExtentId,
    /// The extent's owner, as given to [`Volume::submit_write`](zoned_allocator::Volume::submit_write);
    /// `None` when it could not be read back.
    pub owner: Option<u64>,
    /// The copy (lane) whose repair failed.
    pub lane: usize,
    /// Block indices within the extent found bad in that copy.
    pub blocks: Vec<u32>,
    /// How the repair failed.
    pub error: RepairError,
}

/// How a repair failed, in a form that can be persisted in a
/// [`Checkpoint`](crate::Checkpoint).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RepairError {
    /// The device completed a command of the repair with an error status
    /// (NVMe Base 2.0 §4.2.3): Write Fault, Zone Invalid Write, ...
    Status {
        /// The command, in the allocator's words ("Write", "Read").
        command: String,
        /// SCT, the Status Code Type.
        sct: u8,
        /// SC, the Status Code.
        sc: u8,
        /// The status code's spec name.
        name: String,
    },
    /// A command of the repair ended without a status of its own: it timed
    /// out, was aborted, was ended by a controller reset, or the device is
    /// gone.
    Command {
        /// The command, in the allocator's words.
        command: String,
        /// How it ended, in words.
        reason: String,
    },
    /// The volume refused or failed the repair otherwise (no zone left for
    /// the relocation, a controller reset since the last commit, ...).
    Volume {
        /// Why, in words.
        reason: String,
    },
}

impl From<&zoned_allocator::Error> for RepairError {
    fn from(error: &zoned_allocator::Error) -> Self {
        match error {
            zoned_allocator::Error::Command { what, error: IoError::Device(status) } => RepairError::Status {
                command: (*what).to_owned(),
                sct: status.sct.raw(),
                sc: status.sc,
                name: status.name().to_owned(),
            },
            zoned_allocator::Error::Command { what, error } => {
                RepairError::Command { command: (*what).to_owned(), reason: error.to_string() }
            }
            other => RepairError::Volume { reason: other.to_string() },
        }
    }
}

impl fmt::Display for RepairError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RepairError::Status { command, sct, sc, name } => {
                write!(f, "{command} failed: {name} (SCT {sct:X}h, SC {sc:02X}h)")
            }
            RepairError::Command { command, reason } => write!(f, "{command} failed: {reason}"),
            RepairError::Volume { reason } => write!(f, "{reason}"),
        }
    }
}

/// Bad blocks found, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCounts {
    /// Blocks whose data failed its checksum.
    pub checksum: u64,
    /// Blocks unreadable with a media status, by the status's spec name.
    pub media: BTreeMap<String, u64>,
    /// Blocks unreadable for another reason (a timeout, a reset, another
    /// status), by reason.
    pub command: BTreeMap<String, u64>,
    /// Read commands that failed (before narrowing to extents).
    pub failed_reads: u64,
    /// Metadata records (checkpoints, journal records) and label blocks
    /// that did not verify on some copy, checked at the start of each run;
    /// not blocks of data, so not in [`ErrorCounts::total_blocks`].
    #[serde(default)]
    pub metadata: u64,
}

impl ErrorCounts {
    /// Bad blocks of every kind: checksum mismatches plus unreadable blocks.
    pub fn total_blocks(&self) -> u64 {
        self.checksum + self.media.values().sum::<u64>() + self.command.values().sum::<u64>()
    }
}

/// What a scrub's pass comes to, judged on all of it (every run of a
/// resumed pass).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every byte of the copies scrubbed was read and verified, and no bad
    /// block is left: none was found, or every one found was repaired.
    Clean,
    /// No bad block is left in what was read, but not every byte was read
    /// and verified: the scrub was cancelled, verification was off, or an
    /// earlier run of the pass did not verify (or left a checkpoint of the
    /// first format, which does not say).
    #[default]
    Incomplete,
    /// Bad blocks are left: uncorrectable, a failed repair, or found by a
    /// read-only scrub.
    Damaged,
}

/// What a scrub did. Findings (errors, corrected, uncorrectable, failed
/// and left repairs) and `pass_*` cover the whole pass: a scrub resumed
/// from a [`Checkpoint`](crate::Checkpoint) includes what the runs before
/// it found and read. The other counts, rates and times are this run's.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// What the pass comes to; the text says "clean" only for
    /// [`Outcome::Clean`].
    pub outcome: Outcome,
    /// Bytes the pass sets out to read: live bytes times the copies
    /// scrubbed.
    pub bytes_total: u64,
    /// Bytes of the pass read, over all its runs (not counting repair I/O).
    /// A copy repaired by an earlier run may be read again when its
    /// relocation moved it past the checkpoint, so this can exceed
    /// `bytes_total`.
    pub pass_bytes_read: u64,
    /// Bytes of `pass_bytes_read` whose checksums were checked.
    pub pass_bytes_verified: u64,
    /// The copies (lanes) scrubbed.
    pub lanes: Vec<usize>,
    /// Bytes read by this run's own reads (not counting repair I/O).
    pub bytes_read: u64,
    /// Bytes this run read whose checksums were checked (0 with
    /// `verify: false`).
    pub bytes_verified: u64,
    /// Read commands completed, merged reads counted once.
    pub reads: u64,
    /// Bad blocks found, by kind.
    pub errors: ErrorCounts,
    /// Blocks rewritten from a good copy and confirmed by a re-read.
    pub corrected_blocks: u64,
    /// Blocks with no good copy, by extent; nothing was changed for them.
    pub uncorrectable: Vec<Uncorrectable>,
    /// Bad copies whose repair failed (a good copy exists), by extent; they
    /// were left as they were.
    pub repair_failed: Vec<RepairFailed>,
    /// Of [`ErrorCounts::metadata`], those repaired: every copy of the
    /// metadata rewritten whole.
    pub metadata_repaired: u64,
    /// Bad blocks left as they were although a good copy exists: found by a
    /// read-only scrub, or in a copy that also holds uncorrectable blocks
    /// (such a copy is left whole). Failed repairs are not counted here.
    pub unrepaired_blocks: u64,
    /// Wall time of the whole scrub, pauses and the final commit included,
    /// in seconds.
    pub duration_s: f64,
    /// `bytes_read` over the running time (pauses excluded), in MiB/s.
    pub rate_mib_s: f64,
    /// Time-weighted reads in flight while running, over every device (each
    /// copy is read on its own device at the same time, each up to
    /// `max_in_flight`).
    pub mean_queue_depth: f64,
    /// `bytes_read` over `reads`, in bytes: how well the plan merged extents.
    pub mean_request_bytes: f64,
    /// Index walks of the allocator (one per plan refill).
    pub plan_lookups: u64,
    /// The scrub was cancelled through [`Control::cancel`](crate::Control::cancel) before the end.
    pub cancelled: bool,
    /// The scrub continued a pass from a [`Checkpoint`](crate::Checkpoint)
    /// (a finished checkpoint starts a new pass instead).
    pub resumed: bool,
    /// Checksums were verified ([`ScrubOptions::verify`](crate::ScrubOptions::verify)).
    pub verify: bool,
    /// Bad copies were repaired ([`ScrubOptions::repair`](crate::ScrubOptions::repair)).
    pub repair: bool,
    /// The volume's metadata (labels, checkpoints, journal records on
    /// every copy), read and checked at the start of this run, and
    /// rewritten on every copy when one was bad and repair is on.
    pub metadata: Option<MetadataScrub>,
}

impl Report {
    /// Judges the pass: damaged if bad blocks are left, else clean only if
    /// it ran to the end (`complete`) and verified every byte it read.
    pub(crate) fn judge(&self, complete: bool) -> Outcome {
        let metadata_left_bad = self
            .metadata
            .as_ref()
            .is_some_and(|m| !m.repaired && m.bad_records.iter().chain(&m.bad_labels).any(|&bad| bad > 0));
        if !self.uncorrectable.is_empty()
            || !self.repair_failed.is_empty()
            || self.unrepaired_blocks > 0
            || metadata_left_bad
        {
            Outcome::Damaged
        } else if complete && self.pass_bytes_verified == self.pass_bytes_read {
            Outcome::Clean
        } else {
            Outcome::Incomplete
        }
    }

    /// The result line: the outcome, and why.
    fn result(&self) -> String {
        let copies = match self.lanes.as_slice() {
            [one] => format!("copy {one}"),
            [first @ .., last] => {
                format!("copies {} and {last}", first.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))
            }
            [] => "no copy".to_owned(),
        };
        match self.outcome {
            Outcome::Clean => format!("clean: every byte of {copies} read and verified, no bad block left"),
            Outcome::Incomplete => {
                let why = if self.cancelled {
                    "cancelled"
                } else if !self.verify {
                    "verification off"
                } else {
                    "an earlier run of this pass did not verify what it read"
                };
                let share = (self.pass_bytes_verified as f64 / self.bytes_total.max(1) as f64 * 100.0).min(100.0);
                format!("incomplete ({why}): {share:.1}% of {copies} read and verified, no bad block left in it")
            }
            Outcome::Damaged => {
                let uncorrectable: usize = self.uncorrectable.iter().map(|u| u.blocks.len()).sum();
                let failed: usize = self.repair_failed.iter().map(|r| r.blocks.len()).sum();
                format!(
                    "damaged: {uncorrectable} uncorrectable, {failed} whose repair failed, {} left unrepaired \
                     (blocks)",
                    self.unrepaired_blocks
                )
            }
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: u64| b as f64 / f64::from(1 << 20);
        writeln!(
            f,
            "scrub {}: {:.1} MiB read of {:.1} MiB in {:.2} s ({:.1} MiB/s){}",
            if self.cancelled { "cancelled" } else { "done" },
            mib(self.bytes_read),
            mib(self.bytes_total),
            self.duration_s,
            self.rate_mib_s,
            if self.resumed { ", resumed" } else { "" }
        )?;
        if self.resumed {
            writeln!(
                f,
                "  pass (with the runs before): {:.1} MiB read, {:.1} MiB verified",
                mib(self.pass_bytes_read),
                mib(self.pass_bytes_verified)
            )?;
        }
        if let Some(m) = &self.metadata {
            let bad: u64 = m.bad_records.iter().chain(&m.bad_labels).sum();
            writeln!(
                f,
                "  metadata: {:.1} MiB of both copies read; {} bad record(s) {:?} and label(s) {:?} per copy{}",
                mib(m.bytes_read),
                bad,
                m.bad_records,
                m.bad_labels,
                if m.repaired { ", both copies rewritten" } else { "" }
            )?;
        }
        writeln!(
            f,
            "  verified: {:.1} MiB{}",
            mib(self.bytes_verified),
            if self.verify { "" } else { " (verification off)" }
        )?;
        writeln!(
            f,
            "  requests: {} reads, mean {:.0} KiB, mean queue depth {:.1}, {} plan lookups",
            self.reads,
            self.mean_request_bytes / 1024.0,
            self.mean_queue_depth,
            self.plan_lookups
        )?;
        writeln!(
            f,
            "  errors: {} checksum, {} media, {} other (blocks); {} failed reads",
            self.errors.checksum,
            self.errors.media.values().sum::<u64>(),
            self.errors.command.values().sum::<u64>(),
            self.errors.failed_reads
        )?;
        if self.errors.metadata > 0 {
            let fate = if self.metadata_repaired == self.errors.metadata { "repaired" } else { "left bad" };
            writeln!(f, "  metadata errors: {} metadata record(s) or label(s), {fate}", self.errors.metadata)?;
        }
        for (kind, count) in self.errors.media.iter().chain(&self.errors.command) {
            writeln!(f, "    {kind}: {count}")?;
        }
        writeln!(
            f,
            "  corrected: {} blocks{}",
            self.corrected_blocks,
            if self.repair { "" } else { " (read-only: nothing repaired)" }
        )?;
        write!(f, "  uncorrectable: {} blocks", self.uncorrectable.iter().map(|u| u.blocks.len()).sum::<usize>())?;
        for u in &self.uncorrectable {
            write!(f, "\n    extent {} (owner {}), copy {}: blocks {:?}", u.extent, owner(u.owner), u.lane, u.blocks)?;
        }
        if !self.repair_failed.is_empty() {
            let blocks: usize = self.repair_failed.iter().map(|r| r.blocks.len()).sum();
            write!(f, "\n  repair failed: {blocks} blocks (a good copy exists; left as they were)")?;
            for r in &self.repair_failed {
                write!(
                    f,
                    "\n    extent {} (owner {}), copy {}: blocks {:?}: {}",
                    r.extent,
                    owner(r.owner),
                    r.lane,
                    r.blocks,
                    r.error
                )?;
            }
        }
        if self.unrepaired_blocks > 0 {
            write!(f, "\n  left unrepaired: {} blocks (a good copy exists)", self.unrepaired_blocks)?;
        }
        write!(f, "\n  result: {}", self.result())
    }
}

/// An owner as a report shows it.
fn owner(owner: Option<u64>) -> String {
    owner.map_or_else(|| "unknown".into(), |o| o.to_string())
}

//! Where a scrub stands, and what it found so far, persisted by the caller
//! to resume after a restart.
//!
//! The format is JSON through serde. Version 1 (no `version` field) held
//! the position only; version 2 adds what was found
//! ([`Checkpoint::findings`]), the bytes verified and the copies of the
//! pass. A version-1 checkpoint still loads, with nothing found and nothing
//! known verified before it (so the pass it continues is never called
//! clean); a checkpoint of a later version than [`CHECKPOINT_VERSION`] is
//! refused. Version 3 adds a position per copy ([`Checkpoint::positions`]):
//! the copies are scrubbed all at once, each on its own device. A version-2
//! checkpoint's one position still loads (the copies before it done, those
//! after it not begun).

use crate::{Error, ErrorCounts, RepairFailed, Result, Uncorrectable};
use serde::{Deserialize, Serialize};
use zoned_allocator::ExtentId;

/// The checkpoint format this scrub writes, and the newest it reads.
pub const CHECKPOINT_VERSION: u32 = 3;

/// Where a scrub's pass stands: the caller persists it (JSON) to resume
/// after a restart. Everything before the position of the lane named was
/// read; lanes before it are done. A checkpoint with `finished` set ends
/// its pass: resuming from it starts a new pass over everything.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The format ([`CHECKPOINT_VERSION`] when written by this scrub; 1 when
    /// absent).
    #[serde(default = "first_version")]
    pub version: u32,
    /// The volume scrubbed ([`Volume::id`](zoned_allocator::Volume::id));
    /// [`scrub`](crate::scrub) refuses a checkpoint of another volume.
    pub volume_id: u64,
    /// The copy (lane) being scrubbed at this point.
    pub lane: usize,
    /// The extent to start from, and blocks of it already done.
    pub zone: u32,
    /// The 4 KiB block offset of that extent in `zone`.
    pub offset: u32,
    /// Blocks at the start of that extent already read and verified.
    pub skip_blocks: u32,
    /// Bytes read before this point, over the whole pass.
    pub bytes_done: u64,
    /// Bytes of `bytes_done` whose checksums were checked (0 in a version-1
    /// checkpoint: not known).
    #[serde(default)]
    pub bytes_verified: u64,
    /// The copies (lanes) the pass scrubs, in order (empty in a version-1
    /// checkpoint); a resume must scrub the same.
    #[serde(default)]
    pub lanes: Vec<usize>,
    /// Every lane is done: the pass is over.
    pub finished: bool,
    /// What the scrub found and repaired before this point (nothing in a
    /// version-1 checkpoint).
    #[serde(default)]
    pub findings: Findings,
    /// Where each copy of the pass stands (version 3; empty before, when
    /// `lane` and the position after it say where the one copy being
    /// scrubbed stood). `lane`, `zone`, `offset` and `skip_blocks` then
    /// name the first copy not done.
    #[serde(default)]
    pub positions: Vec<LanePosition>,
}

/// Where one copy (lane) of a scrub's pass stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LanePosition {
    /// The copy.
    pub lane: usize,
    /// The extent to start from, and blocks of it already done.
    pub zone: u32,
    /// The 4 KiB block offset of that extent in `zone`.
    pub offset: u32,
    /// Blocks at the start of that extent already read and verified.
    pub skip_blocks: u32,
    /// Every extent of the copy was read.
    pub done: bool,
}

fn first_version() -> u32 {
    1
}

impl Checkpoint {
    /// Reads a checkpoint persisted as JSON, refusing malformed text and
    /// formats newer than this scrub's.
    pub fn from_json(text: &str) -> Result<Checkpoint> {
        let checkpoint: Checkpoint =
            serde_json::from_str(text).map_err(|e| Error::BadCheckpoint(format!("not a scrub checkpoint ({e})")))?;
        checkpoint.check_version()?;
        Ok(checkpoint)
    }

    /// Refuses a format this scrub does not know.
    pub(crate) fn check_version(&self) -> Result<()> {
        if self.version == 0 || self.version > CHECKPOINT_VERSION {
            return Err(Error::BadCheckpoint(format!(
                "format version {}, this scrub reads 1 to {CHECKPOINT_VERSION}",
                self.version
            )));
        }
        Ok(())
    }
}

/// What a scrub found and did up to a checkpoint, so that a resumed scrub
/// reports everything found across its runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Findings {
    /// Bad blocks found, by kind.
    pub errors: ErrorCounts,
    /// Blocks rewritten from a good copy and confirmed by a re-read.
    pub corrected_blocks: u64,
    /// Blocks with no good copy.
    pub uncorrectable: Vec<Uncorrectable>,
    /// Bad copies whose repair failed.
    pub repair_failed: Vec<RepairFailed>,
    /// Bad blocks with a good copy left as they were.
    pub unrepaired_blocks: u64,
    /// Copies found bad and not yet repaired or reported: repair runs once
    /// the reads end, so a checkpoint taken while reading carries them, and
    /// the scrub resumed from it repairs them.
    pub suspects: Vec<Suspect>,
}

/// A suspect extent copy: blocks found bad, and how.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suspect {
    /// The copy (lane).
    pub lane: usize,
    /// The extent.
    pub extent: ExtentId,
    /// Blocks (within the extent) that failed their checksum (already
    /// counted in [`ErrorCounts::checksum`]).
    pub bad_blocks: Vec<u32>,
    /// A read covering the copy failed: repair narrows it down by
    /// re-reading the copy alone.
    pub read_failed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_version_checkpoint_loads_with_nothing_found() {
        let text = r#"{"volume_id":7,"lane":1,"zone":3,"offset":8,"skip_blocks":2,"bytes_done":4096,"finished":false}"#;
        let checkpoint = Checkpoint::from_json(text).unwrap();
        assert_eq!((checkpoint.version, checkpoint.lane, checkpoint.bytes_done), (1, 1, 4096));
        assert_eq!((checkpoint.bytes_verified, checkpoint.lanes.len()), (0, 0), "not known");
        assert_eq!(checkpoint.findings, Findings::default());
    }

    #[test]
    fn a_checkpoint_reads_back_what_it_wrote() {
        let checkpoint = Checkpoint {
            version: CHECKPOINT_VERSION,
            volume_id: 7,
            lane: 0,
            zone: 3,
            offset: 8,
            skip_blocks: 0,
            bytes_done: 1 << 20,
            bytes_verified: 1 << 20,
            lanes: vec![0, 1],
            positions: vec![
                LanePosition { lane: 0, zone: 3, offset: 8, skip_blocks: 0, done: false },
                LanePosition { lane: 1, zone: 5, offset: 0, skip_blocks: 2, done: false },
            ],
            finished: false,
            findings: Findings {
                errors: ErrorCounts { checksum: 2, failed_reads: 1, ..ErrorCounts::default() },
                corrected_blocks: 1,
                suspects: vec![Suspect { lane: 0, extent: 9, bad_blocks: vec![0, 3], read_failed: true }],
                ..Findings::default()
            },
        };
        let text = serde_json::to_string(&checkpoint).unwrap();
        assert_eq!(Checkpoint::from_json(&text).unwrap(), checkpoint);
    }

    #[test]
    fn newer_formats_and_other_text_are_refused() {
        let newer = r#"{"version":4,"volume_id":7,"lane":0,"zone":0,"offset":0,"skip_blocks":0,"bytes_done":0,"finished":false}"#;
        let error = Checkpoint::from_json(newer).unwrap_err().to_string();
        assert!(error.contains("format version 4"), "{error}");
        let error = Checkpoint::from_json(r#"{"volume_id":7}"#).unwrap_err().to_string();
        assert!(error.contains("not a scrub checkpoint"), "{error}");
    }
}

//! Repair: failed reads narrowed to extents, each bad copy rebuilt from
//! the good blocks of every copy, written back (in place or relocated) and
//! confirmed by a re-read; blocks with no good copy reported.

use crate::{RepairError, RepairFailed, Report, Result, ScrubOptions, Suspect, Uncorrectable};
use nvme_driver::spec::status::StatusCode;
use nvme_driver::IoError;
use std::collections::BTreeMap;
use zoned_allocator::{ExtentId, Volume, BLOCK_SIZE};

/// Narrows failed reads to extents, then repairs (or reports) every
/// suspect copy. A repair whose write fails is recorded in
/// [`Report::repair_failed`] and the others go on. Returns whether a repair
/// wrote to the volume (relocations to commit).
pub(crate) fn resolve_suspects(
    volume: &mut Volume,
    options: &ScrubOptions,
    suspects: Vec<Suspect>,
    report: &mut Report,
) -> Result<bool> {
    // One entry per (lane, extent).
    let mut merged: BTreeMap<(usize, ExtentId), Suspect> = BTreeMap::new();
    for s in suspects {
        merged
            .entry((s.lane, s.extent))
            .and_modify(|m| {
                m.read_failed |= s.read_failed;
                m.bad_blocks.extend(&s.bad_blocks);
            })
            .or_insert(s);
    }
    let mut wrote = false;
    for ((lane, id), suspect) in merged {
        if volume.extent(id).is_none() {
            continue;
        }
        // Owners are kept on the device: one for a report may take a read.
        let owner = volume.owner(id).ok();
        let bad_blocks = narrow(volume, options, suspect, report)?;
        if bad_blocks.is_empty() {
            continue;
        }
        let (good, unrecoverable) = good_data(volume, id, lane);
        if !unrecoverable.is_empty() {
            // The copy is left whole, its correctable blocks too.
            report.unrepaired_blocks += bad_blocks.iter().filter(|b| !unrecoverable.contains(b)).count() as u64;
            report.uncorrectable.push(Uncorrectable { extent: id, owner, lane, blocks: unrecoverable });
            continue;
        }
        if !options.repair {
            report.unrepaired_blocks += bad_blocks.len() as u64;
            continue;
        }
        match repair(volume, id, lane, &good) {
            Repair::Healed => {
                wrote = true;
                report.corrected_blocks += bad_blocks.len() as u64;
            }
            Repair::StillBad => {
                wrote = true;
                report.uncorrectable.push(Uncorrectable { extent: id, owner, lane, blocks: bad_blocks });
            }
            Repair::Failed { wrote: written, error } => {
                wrote |= written;
                log::warn!("extent {id}, copy {lane}: repair failed, left as it was: {error}");
                report.repair_failed.push(RepairFailed { extent: id, owner, lane, blocks: bad_blocks, error });
            }
        }
    }
    volume.take_bad_blocks();
    Ok(wrote)
}

/// The blocks of a suspect copy that are bad, sorted: those that failed
/// their checksum and, when a read covering the copy failed, what a re-read
/// of the copy alone finds (counted in the report's errors here).
fn narrow(volume: &mut Volume, options: &ScrubOptions, suspect: Suspect, report: &mut Report) -> Result<Vec<u32>> {
    let Suspect { lane, extent: id, mut bad_blocks, read_failed } = suspect;
    if read_failed {
        let Some(len) = volume.extent(id) else { return Ok(Vec::new()) };
        let blocks = (len / BLOCK_SIZE) as u32;
        let mut copy = vec![0u8; len];
        // Which blocks does this extent's copy really fail on?
        match volume.read_copy_checked(id, lane, &mut copy) {
            Ok(crcs_bad) => {
                if !crcs_bad.is_empty() && options.verify {
                    report.errors.checksum += crcs_bad.len() as u64;
                }
                bad_blocks.extend(crcs_bad);
            }
            Err(zoned_allocator::Error::Command { error, .. }) => {
                let key = error_kind(&error);
                let map = if key.0 { &mut report.errors.media } else { &mut report.errors.command };
                *map.entry(key.1).or_default() += u64::from(blocks);
                bad_blocks.extend(0..blocks);
            }
            Err(e) => return Err(e.into()),
        }
    }
    bad_blocks.sort_unstable();
    bad_blocks.dedup();
    Ok(bad_blocks)
}

/// The extent's data rebuilt block by block from the verified blocks of
/// every copy, `lane`'s own first, and the blocks no copy holds good.
fn good_data(volume: &mut Volume, id: ExtentId, lane: usize) -> (Vec<u8>, Vec<u32>) {
    let len = volume.extent(id).map_or(0, |len| len);
    let blocks = (len / BLOCK_SIZE) as u32;
    let mut good = vec![0u8; len];
    let mut good_blocks = vec![false; blocks as usize];
    let mut data = vec![0u8; len];
    for copy in std::iter::once(lane).chain((0..volume.lanes()).filter(|&l| l != lane)) {
        let Ok(bad_there) = volume.read_copy_checked(id, copy, &mut data) else { continue };
        for b in 0..blocks {
            if !good_blocks[b as usize] && !bad_there.contains(&b) {
                let range = b as usize * BLOCK_SIZE..(b as usize + 1) * BLOCK_SIZE;
                good[range.clone()].copy_from_slice(&data[range]);
                good_blocks[b as usize] = true;
            }
        }
    }
    let unrecoverable = (0..blocks).filter(|&b| !good_blocks[b as usize]).collect();
    (good, unrecoverable)
}

/// How one repair ended.
enum Repair {
    /// Written, and a re-read verifies.
    Healed,
    /// Written, but the copy still fails to read or verify (a sector the
    /// drive could not remap).
    StillBad,
    /// The write, or the re-read confirming it, failed.
    Failed {
        /// The write went through (the re-read failed).
        wrote: bool,
        /// How.
        error: RepairError,
    },
}

/// Writes `good` over copy `lane` of extent `id`, in place on a
/// conventional namespace or relocated on a zoned one (journaled at the
/// next commit), then re-reads it to confirm.
fn repair(volume: &mut Volume, id: ExtentId, lane: usize, good: &[u8]) -> Repair {
    let written = if volume.lane_is_zoned(lane) {
        volume.rewrite_copy(id, lane, good).map(drop)
    } else {
        volume.repair_in_place(id, lane, good)
    };
    if let Err(error) = written {
        return Repair::Failed { wrote: false, error: RepairError::from(&error) };
    }
    let mut copy = vec![0u8; good.len()];
    match volume.read_copy_checked(id, lane, &mut copy) {
        Ok(bad) if bad.is_empty() => Repair::Healed,
        Ok(_) => Repair::StillBad,
        Err(zoned_allocator::Error::Command { error, .. }) if error.device_status().is_some() => {
            log::warn!("extent {id}, copy {lane}: still unreadable after the repair: {error}");
            Repair::StillBad
        }
        Err(error) => Repair::Failed { wrote: true, error: RepairError::from(&error) },
    }
}

/// (is a media error, its name).
fn error_kind(error: &IoError) -> (bool, String) {
    match error {
        IoError::Device(status) => (matches!(status.code(), StatusCode::Media(_)), status.code().name().to_owned()),
        other => (false, other.to_string()),
    }
}

//! Repair: failed reads narrowed to extents, each bad copy rebuilt from
//! the good blocks of every copy, written back (in place or relocated) and
//! confirmed by a re-read; blocks with no good copy reported.

use crate::{Report, Result, ScrubOptions, Uncorrectable};
use nvme_driver::spec::status::StatusCode;
use nvme_driver::IoError;
use std::collections::BTreeMap;
use zoned_allocator::{ExtentId, Volume, BLOCK_SIZE};

/// A suspect extent copy: blocks found bad, and how.
#[derive(Clone, Debug)]
pub(crate) struct Suspect {
    pub(crate) lane: usize,
    pub(crate) id: ExtentId,
    /// Blocks (within the extent) that failed their checksum.
    pub(crate) bad_blocks: Vec<u32>,
    /// The read covering it failed (narrow it down by re-reading).
    pub(crate) read_failed: bool,
}

/// Narrows failed reads to extents, then repairs (or reports) every
/// suspect copy.
pub(crate) fn resolve_suspects(
    volume: &mut Volume,
    options: &ScrubOptions,
    suspects: Vec<Suspect>,
    report: &mut Report,
) -> Result<()> {
    // One entry per (lane, extent).
    let mut merged: BTreeMap<(usize, ExtentId), Suspect> = BTreeMap::new();
    for s in suspects {
        merged
            .entry((s.lane, s.id))
            .and_modify(|m| {
                m.read_failed |= s.read_failed;
                m.bad_blocks.extend(&s.bad_blocks);
            })
            .or_insert(s);
    }
    for ((lane, id), mut suspect) in merged {
        let Some((len, owner)) = volume.extent(id) else { continue };
        let blocks = (len / BLOCK_SIZE) as u32;
        let mut copy = vec![0u8; len];
        if suspect.read_failed {
            // Which blocks does this extent's copy really fail on?
            match volume.read_copy(id, lane, &mut copy) {
                Ok(()) => {
                    let crcs_bad = checksum_mismatches(volume, id, &copy);
                    if !crcs_bad.is_empty() && options.verify {
                        report.errors.checksum += crcs_bad.len() as u64;
                    }
                    suspect.bad_blocks.extend(crcs_bad);
                }
                Err(zoned_allocator::Error::Command { error, .. }) => {
                    let key = error_kind(&error);
                    let map = if key.0 { &mut report.errors.media } else { &mut report.errors.command };
                    *map.entry(key.1).or_default() += u64::from(blocks);
                    suspect.bad_blocks.extend(0..blocks);
                }
                Err(e) => return Err(e.into()),
            }
        }
        suspect.bad_blocks.sort_unstable();
        suspect.bad_blocks.dedup();
        if suspect.bad_blocks.is_empty() {
            continue;
        }
        // The other copies, verified block by block.
        let mut good = vec![0u8; len];
        let mut good_blocks = vec![false; blocks as usize];
        if let Ok(()) = volume.read_copy(id, lane, &mut copy) {
            let bad_here = checksum_mismatches(volume, id, &copy);
            for b in 0..blocks {
                if !bad_here.contains(&b) {
                    good_blocks[b as usize] = true;
                }
            }
            good.copy_from_slice(&copy);
        }
        for other in (0..volume.lanes()).filter(|&l| l != lane) {
            let mut data = vec![0u8; len];
            if volume.read_copy(id, other, &mut data).is_err() {
                continue;
            }
            let bad_there = checksum_mismatches(volume, id, &data);
            for b in 0..blocks {
                if !good_blocks[b as usize] && !bad_there.contains(&b) {
                    let range = b as usize * BLOCK_SIZE..(b as usize + 1) * BLOCK_SIZE;
                    good[range.clone()].copy_from_slice(&data[range]);
                    good_blocks[b as usize] = true;
                }
            }
        }
        let unrecoverable: Vec<u32> = (0..blocks).filter(|&b| !good_blocks[b as usize]).collect();
        if !unrecoverable.is_empty() {
            report.uncorrectable.push(Uncorrectable { extent: id, owner, lane, blocks: unrecoverable });
            continue;
        }
        if !options.repair {
            continue;
        }
        if volume.lane_is_zoned(lane) {
            volume.rewrite_copy(id, lane, &good)?;
        } else {
            volume.repair_in_place(id, lane, &good)?;
        }
        // Confirm. A copy the rewrite did not heal (a sector that still
        // fails to read: a drive that could not remap it) is reported
        // uncorrectable and the scrub goes on, so the other suspects are
        // still repaired and committed.
        let healed = match volume.read_copy(id, lane, &mut copy) {
            Ok(()) => checksum_mismatches(volume, id, &copy).is_empty(),
            Err(zoned_allocator::Error::Command { error, .. }) => {
                log::warn!("extent {id}, copy {lane}: still unreadable after the repair: {error}");
                false
            }
            Err(e) => return Err(e.into()),
        };
        if healed {
            report.corrected_blocks += suspect.bad_blocks.len() as u64;
        } else {
            report.uncorrectable.push(Uncorrectable { extent: id, owner, lane, blocks: suspect.bad_blocks });
        }
    }
    volume.take_bad_blocks();
    Ok(())
}

fn checksum_mismatches(volume: &Volume, id: ExtentId, data: &[u8]) -> Vec<u32> {
    volume.checksums(id).map_or_else(Vec::new, |crcs| zoned_allocator::checksum::mismatches(data, crcs))
}

/// (is a media error, its name).
fn error_kind(error: &IoError) -> (bool, String) {
    match error {
        IoError::Device(status) => (matches!(status.code(), StatusCode::Media(_)), status.code().name().to_owned()),
        other => (false, other.to_string()),
    }
}

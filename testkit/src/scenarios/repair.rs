//! The repair scenarios: a mirror; the host flips bytes of one block of
//! copy 0 at rest; the read returns the original from copy 1 and reports
//! the block, and `rewrite_copy` fixes the copy.

use super::*;
use crate::data::describe_mismatch;
use std::time::{Duration, Instant};
use zoned_allocator::{BadBlock, Profile, Volume, BLOCK_SIZE};

pub(super) fn repair(
    check: &Check,
    scenario: Scenario,
    controllers: &[Controller],
    host: &mut dyn Host,
) -> Result<(), String> {
    let seed = check.seed;
    let (devices, geometry) = scenario_devices(check, scenario, controllers)?;
    let mut volume =
        Volume::format(devices, &scenario_options(scenario, Profile::Mirror, 1)).map_err(|e| format!("format: {e}"))?;
    require_tags(scenario, &volume)?;
    check.ok("format", checksums(&volume));
    // On areas, enough to fill a zone and a half, so that the victim's
    // checksums are in its sealed zone's area only.
    let area = scenario == Scenario::AreaRepair;
    let count = if area {
        let table = volume.zone_table(0);
        let largest = (0..table.zone_count()).map(|z| table.zone(z).capacity).max().unwrap_or(0);
        u64::from(largest) * 3 / 2 / 8 + 24
    } else {
        24
    };
    let planned = plan(seed, 0, count, 1, 16);
    let mut model = Model::new();
    write_all(&mut volume, seed, &planned, &mut model, false)?;
    commit(check, &mut volume, "commit")?;

    // The victim: the first extent of at least 4 blocks (on areas, in a
    // sealed zone); its block 2.
    let in_area = |id: u64| {
        volume.location(id, 0).is_some_and(|l| volume.sealed_blocks(0, l.zone) > 0) && volume.checksums(id).is_none()
    };
    let (&owner, &(id, blocks, _)) = model
        .iter()
        .find(|(_, &(id, blocks, _))| blocks >= 4 && (!area || in_area(id)))
        .ok_or("no extent of 4 blocks or more (in a sealed zone, on areas)")?;
    let block = 2u32;
    let data = extent_data(seed, owner, blocks);
    let location = volume.location(id, 0).ok_or("no copy 0")?;
    let first_lba = volume.lba(0, location);
    let lba = first_lba + u64::from(block) * geometry[0].lbas_per_block();
    let offset = lba * u64::from(geometry[0].lba_bytes) + CORRUPT_OFFSET_IN_BLOCK as u64;
    eprintln!("{}: extent {id} (owner {owner}, {blocks} blocks) copy 0 at {location:?}, LBA {first_lba}", check.prefix);
    host.corrupt(offset, CORRUPT_BYTES)?;

    // Wait for the host's flip to show through the device.
    let started = Instant::now();
    let mut copy = vec![0u8; data.len()];
    loop {
        volume.read_copy(id, 0, &mut copy).map_err(|e| format!("reading copy 0: {e}"))?;
        if copy != data {
            break;
        }
        if started.elapsed() > CORRUPTION_WAIT_MAX {
            return Err(format!(
                "copy 0 of extent {id} unchanged {} s after the host was asked to corrupt it",
                CORRUPTION_WAIT_MAX.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let changed: Vec<usize> = (0..data.len()).filter(|&i| copy[i] != data[i]).collect();
    let want_start = block as usize * BLOCK_SIZE + CORRUPT_OFFSET_IN_BLOCK;
    let (lo, hi) = (changed[0], changed[changed.len() - 1] + 1);
    if lo < want_start || hi > want_start + CORRUPT_BYTES {
        return Err(format!(
            "copy 0 changed in bytes {lo}..{hi} of the extent, not within {want_start}..{}",
            want_start + CORRUPT_BYTES
        ));
    }
    check.ok(
        "corrupted",
        format!(
            "copy 0 of extent {id} differs in bytes {lo}..{hi} (block {block}) after {} ms",
            started.elapsed().as_millis()
        ),
    );

    let mut back = vec![0u8; data.len()];
    let outcome = volume.read(id, &mut back).map_err(|e| format!("reading extent {id}: {e}"))?;
    if back != data {
        return Err(format!("the repaired read is wrong: {}", describe_mismatch(&data, &back)));
    }
    if outcome.repaired != [block] {
        return Err(format!("repaired blocks {:?}, expected [{block}]", outcome.repaired));
    }
    let want = BadBlock { extent: id, lane: 0, block, unreadable: false };
    if volume.bad_blocks() != [want] {
        return Err(format!("bad blocks {:?}, expected [{want:?}]", volume.bad_blocks()));
    }
    check
        .ok("read", format!("original data from copy 1, block {block} repaired, bad blocks {:?}", volume.bad_blocks()));

    let moved = volume.rewrite_copy(id, 0, &back).map_err(|e| format!("rewrite_copy: {e}"))?;
    if moved == location {
        return Err(format!("rewrite_copy left copy 0 at {location:?}"));
    }
    commit(check, &mut volume, "commit rewrite")?;
    volume.read_copy(id, 0, &mut copy).map_err(|e| format!("reading copy 0 again: {e}"))?;
    if copy != data {
        return Err(format!("copy 0 still wrong after rewrite_copy: {}", describe_mismatch(&data, &copy)));
    }
    let outcome = volume.read(id, &mut back).map_err(|e| format!("reading extent {id} again: {e}"))?;
    if !outcome.repaired.is_empty() || back != data {
        return Err(format!("after rewrite_copy the read repaired {:?}", outcome.repaired));
    }
    check.ok("rewrite", format!("copy 0 moved from {location:?} to {moved:?}, reads back clean"));
    volume.take_bad_blocks();
    let bytes = verify(&mut volume, seed, &model, true)?;
    check.ok("verify", format!("{} extents, {}, both copies", model.len(), mib(bytes)));
    invariants(check, &volume)
}

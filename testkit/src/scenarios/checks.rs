//! Checks of where a volume put things: LBAs, streams, zone capacity,
//! checksum areas and block tags.

use super::{Check, Geometry, Model, Scenario};
use std::collections::{BTreeMap, BTreeSet};
use zoned_allocator::zones::ZoneUse;
use zoned_allocator::Volume;

/// Each live extent's first LBA on copy 0 is its zone's start plus its
/// block offset: what the repair test's byte offsets rely on.
pub fn check_lbas(check: &Check, volume: &Volume, geometry: &Geometry, model: &Model) -> Result<(), String> {
    let mut example = None;
    for &(id, _, _) in model.values() {
        let location = volume.location(id, 0).ok_or_else(|| format!("extent {id} has no copy 0"))?;
        let lba = volume.lba(0, location);
        let want =
            u64::from(location.zone) * geometry.zone_lbas + u64::from(location.offset) * geometry.lbas_per_block();
        if lba != want {
            return Err(format!("extent {id} at {location:?}: LBA {lba}, expected {want}"));
        }
        example.get_or_insert((id, location, lba));
    }
    let (id, location, lba) = example.ok_or("no extent to check")?;
    check.ok(
        "lba",
        format!(
            "{} extents; e.g. extent {id} at zone {} block {} is LBA {lba} = {} x {} + {} x {}",
            model.len(),
            location.zone,
            location.offset,
            location.zone,
            geometry.zone_lbas,
            location.offset,
            geometry.lbas_per_block()
        ),
    );
    Ok(())
}

/// Streams never share a zone (checked before reclaim mixes them).
pub fn check_streams(check: &Check, volume: &Volume, model: &Model) -> Result<(), String> {
    let mut zone_streams: BTreeMap<(usize, u32), BTreeSet<u8>> = BTreeMap::new();
    for &(id, _, stream) in model.values() {
        for lane in 0..volume.lanes() {
            let location = volume.location(id, lane).ok_or_else(|| format!("extent {id} has no copy {lane}"))?;
            zone_streams.entry((lane, location.zone)).or_default().insert(stream);
        }
    }
    if let Some(((lane, zone), streams)) = zone_streams.iter().find(|(_, s)| s.len() > 1) {
        return Err(format!("copy {lane} zone {zone} holds streams {streams:?}"));
    }
    let streams: BTreeSet<u8> = zone_streams.values().flatten().copied().collect();
    check.ok("streams", format!("{} streams in {} zones, none shared", streams.len(), zone_streams.len()));
    Ok(())
}

/// No extent reaches past its zone's capacity, and capacity is below the
/// zone size.
pub fn check_capacity(check: &Check, volume: &Volume, geometry: &Geometry, model: &Model) -> Result<(), String> {
    let table = volume.zone_table(0);
    let zone_blocks = (geometry.zone_lbas / geometry.lbas_per_block()) as u32;
    let owned: Vec<u32> = (0..table.zone_count()).filter(|&z| table.zone(z).usage != ZoneUse::NotOwned).collect();
    let capacity = owned.iter().map(|&z| table.zone(z).capacity).max().unwrap_or(0);
    if capacity == 0 || capacity >= zone_blocks {
        return Err(format!("zone capacity {capacity} blocks is not below the zone size of {zone_blocks}"));
    }
    let mut furthest = 0;
    for &(id, blocks, _) in model.values() {
        let location = volume.location(id, 0).ok_or_else(|| format!("extent {id} has no copy 0"))?;
        let end = location.offset + blocks;
        let cap = table.zone(location.zone).capacity;
        if end > cap {
            return Err(format!("extent {id} at {location:?} ends at block {end}, past the zone capacity {cap}"));
        }
        furthest = furthest.max(end);
    }
    let filled = owned.iter().filter(|&&z| table.zone(z).usage == ZoneUse::Full).count();
    if filled == 0 {
        return Err("no zone filled: the workload never reached a zone's capacity".into());
    }
    check.ok(
        "capacity",
        format!(
            "zones of {zone_blocks} blocks with {capacity} usable (data in units of {} blocks); {filled} zones \
             filled; extents end by block {furthest}",
            volume.data_unit_bytes() / 4096
        ),
    );
    Ok(())
}

/// On zone checksum areas: zones were sealed, and only extents with a
/// copy in a zone not sealed keep their checksums in memory.
pub fn check_areas(check: &Check, volume: &Volume, model: &Model) -> Result<(), String> {
    let zones = volume.zone_table(0).zone_count();
    let sealed = (0..zones).filter(|&zone| volume.sealed_blocks(0, zone) > 0).count();
    let unsealed_extents = model
        .values()
        .filter(|&&(id, _, _)| volume.location(id, 0).is_some_and(|l| volume.sealed_blocks(0, l.zone) == 0))
        .count();
    if sealed == 0 || volume.mapped_extents() > unsealed_extents {
        return Err(format!(
            "{sealed} zones sealed; {} extents with checksums in memory, {unsealed_extents} in zones not sealed",
            volume.mapped_extents()
        ));
    }
    check.ok(
        "areas",
        format!(
            "{sealed} zones sealed; {} of {} extents with checksums in memory, all in zones being filled",
            volume.mapped_extents(),
            model.len()
        ),
    );
    Ok(())
}

/// Every extent whose tags one command carries is tagged, the others keep
/// the map (on QEMU 7.2, whose quirk refuses metadata transfers of 512
/// bytes or more that are not a multiple of 512); some of each.
pub fn check_tagged(check: &Check, volume: &Volume, model: &Model) -> Result<(), String> {
    let layout = volume.block_tags().ok_or("no block tags")?;
    let mut tagged = 0;
    for &(id, blocks, _) in model.values() {
        if volume.tagged(id) != layout.carries(blocks as usize) {
            return Err(format!(
                "extent {id} of {blocks} blocks: tagged {}, carried {}",
                volume.tagged(id),
                !volume.tagged(id)
            ));
        }
        tagged += usize::from(volume.tagged(id));
    }
    let mapped = model.len() - tagged;
    if tagged == 0 || (layout.granule.is_some() && mapped == 0) {
        return Err(format!("{tagged} extents tagged, {mapped} in the map"));
    }
    check.ok(
        "tagged",
        format!("{tagged} extents tagged, {mapped} with checksums in the map (granule {:?})", layout.granule),
    );
    Ok(())
}

/// Where the volume keeps its checksums, in words.
pub fn checksums(volume: &Volume) -> String {
    if volume.checksum_areas() {
        return "checksums in zone checksum areas".into();
    }
    match volume.block_tags() {
        Some(layout) => format!("checksums in block tags ({} bytes of metadata per block)", layout.stride),
        None => "checksums in the extent map".into(),
    }
}

/// A tags scenario's volume must keep its checksums in block tags.
pub fn require_tags(scenario: Scenario, volume: &Volume) -> Result<(), String> {
    match scenario {
        Scenario::Tags | Scenario::TagsRepair if volume.block_tags().is_none() => {
            Err("the namespaces have per-block metadata, but the volume keeps its checksums in the map".into())
        }
        _ => Ok(()),
    }
}

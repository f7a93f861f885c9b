//! Where the metadata segments lie on the first namespace, and block I/O
//! within them.

use super::HEADER_BYTES;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::BLOCK_SIZE;

/// Metadata bytes a checkpoint may need for `blocks` of data: every extent
/// as small as a block, with two copies.
fn worst_checkpoint_bytes(blocks: u64, zones: u64) -> u64 {
    HEADER_BYTES as u64 + 4096 + blocks * super::extent_record_bytes(2, 1) as u64 + 2 * zones * 4 + 64
}

/// Zones per metadata segment: room for the largest checkpoint the first
/// namespace's capacity allows (every extent a single block), plus a few
/// deltas. Real volumes hold larger extents, so checkpoints are far
/// smaller and a segment takes many deltas between rotations.
pub(crate) fn meta_zones_per_segment(device: &Device) -> Result<u32> {
    let zones = &device.zones;
    let total_blocks: u64 = zones.iter().map(|z| u64::from(z.capacity_blocks)).sum();
    let needed = worst_checkpoint_bytes(total_blocks, zones.len() as u64).div_ceil(BLOCK_SIZE as u64) + 16;
    let mut sum = 0u64;
    for (index, zone) in zones.iter().enumerate() {
        sum += u64::from(zone.capacity_blocks);
        if sum >= needed {
            let g = index as u32 + 1;
            if 2 * g as usize >= zones.len() {
                break;
            }
            return Ok(g);
        }
    }
    Err(Error::InvalidConfig(format!(
        "namespace {}: {} zones cannot hold two metadata segments of {} blocks and data",
        device.ns.nsid(),
        zones.len(),
        needed
    )))
}

/// The zone and block within it of block `offset` of `segment`.
pub(crate) fn segment_position(device: &Device, g: u32, segment: u32, offset: u64) -> (u32, u64) {
    let mut left = offset;
    let first = segment * g;
    for zone in first..first + g {
        let capacity = u64::from(device.zones[zone as usize].capacity_blocks);
        if left < capacity || zone == first + g - 1 {
            return (zone, left);
        }
        left -= capacity;
    }
    unreachable!("segments have zones")
}

pub(crate) fn meta_lba(device: &Device, g: u32, segment: u32, offset: u64) -> u64 {
    let (zone, in_zone) = segment_position(device, g, segment, offset);
    device.zones[zone as usize].start_lba + in_zone * device.lbas_per_block
}

pub(crate) fn read_meta(device: &mut Device, lba: u64, out: &mut [u8]) -> Result<()> {
    device.read_at(lba, out)
}

pub(crate) fn read_segment(device: &mut Device, g: u32, segment: u32, offset: u64, blocks: u64) -> Result<Vec<u8>> {
    let mut data = vec![0u8; blocks as usize * BLOCK_SIZE];
    let mut done = 0usize;
    while done < data.len() {
        let block = offset + (done / BLOCK_SIZE) as u64;
        let (zone, in_zone) = segment_position(device, g, segment, block);
        let room = (u64::from(device.zones[zone as usize].capacity_blocks).saturating_sub(in_zone)) as usize;
        if room == 0 {
            return Err(Error::Corrupt("metadata record runs past its segment".into()));
        }
        let len = (room * BLOCK_SIZE).min(data.len() - done);
        let lba = device.zones[zone as usize].start_lba + in_zone * device.lbas_per_block;
        device.read_at(lba, &mut data[done..done + len])?;
        done += len;
    }
    Ok(data)
}

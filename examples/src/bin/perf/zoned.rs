//! Zoned write jobs: `perf --rw write` on a zoned namespace writes each
//! zone of its region once, from the zone's start, and ends when the
//! region is full (or at `--time` or `--io-bytes`).
//!
//! - At the write pointer (the default): one write in flight per zone, so
//!   every write arrives at the pointer whatever order the device runs its
//!   commands in (ZNS Command Set 1.1 §2.3.1.1: a write not at the write
//!   pointer fails with Zone Invalid Write). At `--qd N`, N lanes write N
//!   zones side by side, as the kernel's zone write locking lets fio
//!   `--zonemode=zbd` do.
//! - Zone Append (`--zone-append`): any number in flight to one zone; the
//!   device picks each LBA and returns it, which is checked against the
//!   zone. The zone changes when the appends placed in it fill it.
//!
//! The region's zones are reset first, so the writes start from empty
//! zones.

use nvme_driver::cmd::zns::ZoneSendAction;
use nvme_driver::spec::zns::ZoneState;
use nvme_driver::{Controller, Namespace};
use std::time::Duration;

/// Zones a Report Zones asks for at once: one page of descriptors.
const REPORT_BATCH: usize = 63;

/// One zone a job writes: where it starts and how many blocks it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Zone {
    pub start: u64,
    pub capacity: u64,
}

/// What the job asks of the namespace.
#[derive(Clone, Copy, Debug)]
pub struct ZonedJob {
    pub region_start: u64,
    pub region_blocks: u64,
    pub io_blocks: u64,
    pub qpairs: u16,
    pub qd: u16,
    pub append: bool,
}

/// Checks the job against the namespace's zones, resets the region's
/// zones that are not empty, and gives each queue pair its share: whole
/// zones, in order.
pub fn prepare(
    controller: &Controller,
    ns: &Namespace,
    job: ZonedJob,
    timeout: Duration,
) -> Result<Vec<Vec<Zone>>, String> {
    let geometry = *ns.zones().ok_or("the namespace is not zoned")?;
    let zone_blocks = geometry.zone_size_blocks;
    let block = u64::from(ns.block_size());
    if !job.region_start.is_multiple_of(zone_blocks) {
        return Err(format!("--offset must be at a zone's start: zones are {} bytes", zone_blocks * block));
    }
    let count = job.region_blocks / zone_blocks;
    let per_pair = count / u64::from(job.qpairs);
    // At the write pointer, every lane needs a zone of its own.
    let lanes = if job.append { 1 } else { u64::from(job.qd) };
    if per_pair < lanes {
        return Err(format!(
            "the region holds {count} whole zone(s): {} queue pair(s) at --qd {} need at least {} (one per write in \
             flight at the write pointer, or one per queue pair with --zone-append)",
            job.qpairs,
            job.qd,
            lanes * u64::from(job.qpairs)
        ));
    }
    // Zones open at once: one per lane; with Zone Append the next zone may
    // open while appends to the last are still in flight.
    let open = u64::from(job.qpairs) * if job.append { u64::from(job.qd.min(2)) } else { lanes };
    for (limit, name) in [(geometry.max_open_zones, "open"), (geometry.max_active_zones, "active")] {
        if let Some(limit) = limit.filter(|&limit| open > u64::from(limit)) {
            return Err(format!(
                "{} queue pair(s) at --qd {} keep up to {open} zones {name} at once; the namespace allows {limit}",
                job.qpairs, job.qd
            ));
        }
    }

    let zones = report(controller, ns, job.region_start, count as usize)?;
    for zone in &zones {
        if matches!(zone.state, ZoneState::ReadOnly | ZoneState::Offline) {
            return Err(format!("the zone at LBA {} is {:?}: it cannot be written", zone.zslba, zone.state));
        }
        if zone.zcap == 0 || !zone.zcap.is_multiple_of(job.io_blocks) {
            return Err(format!(
                "--bs must divide each zone's capacity: the zone at LBA {} holds {} bytes",
                zone.zslba,
                zone.zcap * block
            ));
        }
    }
    reset(controller, ns, &zones, geometry.zone_count == count, timeout)?;
    let zones: Vec<Zone> = zones.iter().map(|z| Zone { start: z.zslba, capacity: z.zcap }).collect();
    Ok(zones.chunks(per_pair as usize).take(usize::from(job.qpairs)).map(<[Zone]>::to_vec).collect())
}

/// The descriptors of `count` zones from `start`.
fn report(
    controller: &Controller,
    ns: &Namespace,
    start: u64,
    count: usize,
) -> Result<Vec<nvme_driver::spec::zns::ZoneDescriptor>, String> {
    let zone_blocks = ns.zones().map_or(1, |z| z.zone_size_blocks);
    let mut zones = Vec::with_capacity(count);
    while zones.len() < count {
        let slba = start + zones.len() as u64 * zone_blocks;
        let batch = controller
            .report_zones(ns.nsid(), slba, REPORT_BATCH.min(count - zones.len()))
            .map_err(|e| format!("report zones from LBA {slba}: {e}"))?;
        if batch.is_empty() {
            return Err(format!("report zones from LBA {slba}: the device reported none"));
        }
        for zone in batch.into_iter().take(count - zones.len()) {
            let expected = start + zones.len() as u64 * zone_blocks;
            if zone.zslba != expected {
                return Err(format!("report zones: a zone at LBA {} where one at {expected} was due", zone.zslba));
            }
            zones.push(zone);
        }
    }
    Ok(zones)
}

/// Resets the zones that are not empty: all at once when they are the
/// whole namespace.
fn reset(
    controller: &Controller,
    ns: &Namespace,
    zones: &[nvme_driver::spec::zns::ZoneDescriptor],
    whole_namespace: bool,
    timeout: Duration,
) -> Result<(), String> {
    let dirty: Vec<u64> = zones.iter().filter(|z| z.state != ZoneState::Empty).map(|z| z.zslba).collect();
    if dirty.is_empty() {
        return Ok(());
    }
    let mut pair = controller.create_queue_pair(2).map_err(|e| e.to_string())?;
    let targets = if whole_namespace { vec![(0, true)] } else { dirty.iter().map(|&z| (z, false)).collect() };
    for (zslba, all) in targets {
        let request = ns.zone_send(zslba, ZoneSendAction::Reset, all, 0).map_err(|e| e.to_string())?;
        let completion = pair.execute(request, timeout).map_err(|e| e.to_string());
        completion
            .and_then(|c| c.status.map_err(|e| e.to_string()))
            .map_err(|e| format!("reset the zone at LBA {zslba}: {e}"))?;
    }
    Ok(())
}

/// Where a zoned job's next write goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A write at this LBA, the zone's write pointer once the lane's
    /// earlier writes are done.
    At(u64),
    /// A Zone Append to the zone of this index in the pair's share.
    Append(usize),
}

/// One queue pair's zoned writes.
#[derive(Debug)]
pub struct ZonedPicker {
    zones: Vec<Zone>,
    io_blocks: u64,
    /// At the write pointer: each lane's zone (an index into `zones`) and
    /// the blocks placed in it. With Zone Append: one cursor.
    lanes: Vec<(usize, u64)>,
    append: bool,
}

impl ZonedPicker {
    /// Lane `i` of `lanes` writes zones `i`, `i + lanes`, ... of `zones`;
    /// with `append`, one cursor walks them all.
    pub fn new(zones: Vec<Zone>, io_blocks: u64, lanes: usize, append: bool) -> Self {
        assert!(io_blocks > 0 && lanes > 0);
        let lanes = if append { vec![(0, 0)] } else { (0..lanes).map(|lane| (lane, 0)).collect() };
        ZonedPicker { zones, io_blocks, lanes, append }
    }

    /// The next write of `lane` (the slot of the write it replaces), or
    /// `None` once its zones are full.
    pub fn next(&mut self, lane: usize) -> Option<Target> {
        let step = if self.append { 1 } else { self.lanes.len() };
        let (zone, placed) = &mut self.lanes[if self.append { 0 } else { lane }];
        loop {
            let this = self.zones.get(*zone)?;
            if *placed + self.io_blocks <= this.capacity {
                let lba = this.start + *placed;
                *placed += self.io_blocks;
                return Some(if self.append { Target::Append(*zone) } else { Target::At(lba) });
            }
            *zone += step;
            *placed = 0;
        }
    }
}

/// Checks the LBA the device says a Zone Append of `io_blocks` to `zone`
/// wrote: one of the zone's slots, as every append of the job is as long.
pub fn check_append(zone: Zone, io_blocks: u64, lba: u64) -> Result<(), String> {
    let Zone { start, capacity } = zone;
    let offset = lba.wrapping_sub(start);
    if lba < start || offset + io_blocks > capacity || !offset.is_multiple_of(io_blocks) {
        return Err(format!(
            "a Zone Append to the zone at LBA {start} says it wrote at LBA {lba}: not one of the zone's \
             {io_blocks}-block slots"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_driver::dma::DmaPool;
    use nvme_driver::sim::{Fault, SimConfig, Simulator};
    use nvme_driver::spec::command::opcode;
    use nvme_driver::{ControllerOptions, IoBuffer, Transport};
    use std::sync::Arc;

    const TIMEOUT: Duration = Duration::from_secs(5);

    /// A simulated zoned namespace of 8 zones of 256 blocks of 4 KiB.
    fn zoned_sim() -> (Arc<Simulator>, Controller, Namespace) {
        let sim = Simulator::new(SimConfig::zoned(8 * 256, 4096, 256, 256));
        let transport: Arc<dyn Transport> = sim.clone();
        let controller = Controller::init(transport, ControllerOptions::default()).expect("init");
        let ns = controller.namespace(1).expect("namespace 1");
        (sim, controller, ns)
    }

    fn job(append: bool) -> ZonedJob {
        ZonedJob { region_start: 0, region_blocks: 8 * 256, io_blocks: 16, qpairs: 1, qd: 2, append }
    }

    #[test]
    fn an_offline_zone_is_refused_by_name_before_anything_is_reset() {
        let (sim, controller, ns) = zoned_sim();
        sim.inject(Fault::ZoneOffline { nsid: 1, zslba: 512 });
        let error = prepare(&controller, &ns, job(false), TIMEOUT).unwrap_err();
        assert!(error.contains("LBA 512") && error.contains("Offline"), "{error}");
    }

    #[test]
    fn a_failed_reset_names_its_zone_and_writes_nothing() {
        let (sim, controller, ns) = zoned_sim();
        // Zone 1 holds a block, so it needs a reset; the device refuses them.
        let pool = DmaPool::new(controller.transport(), 4096, 1).expect("pool");
        let mut pair = controller.create_queue_pair(4).expect("pair");
        let write = ns.write(256, IoBuffer::new(pool.get().expect("buffer")), false, 0).expect("request");
        pair.execute(write, TIMEOUT).expect("write").status.expect("written");
        sim.inject(Fault::RejectOpcode { opcode: opcode::nvm::ZONE_MANAGEMENT_SEND });
        let error = prepare(&controller, &ns, ZonedJob { region_start: 256, region_blocks: 512, ..job(true) }, TIMEOUT)
            .unwrap_err();
        assert!(error.starts_with("reset the zone at LBA 256:"), "{error}");
        // The block written before is still there: the zone was not reset.
        let zone = controller.report_zones(1, 256, 1).expect("report")[0];
        assert_eq!((zone.state, zone.wp), (ZoneState::ImplicitlyOpened, 257), "{zone:?}");
    }

    fn zones(count: u64, size: u64, capacity: u64) -> Vec<Zone> {
        (0..count).map(|i| Zone { start: i * size, capacity }).collect()
    }

    #[test]
    fn lanes_write_their_own_zones_in_order_to_capacity() {
        // Capacity below the zone size, as ZNS allows.
        let mut picker = ZonedPicker::new(zones(5, 100, 60), 20, 2, false);
        let mut seen = Vec::new();
        // Lane 0 finishes its zones (0, 2, 4) while lane 1 writes 1 and 3.
        while let Some(target) = picker.next(0) {
            seen.push((0, target));
        }
        while let Some(target) = picker.next(1) {
            seen.push((1, target));
        }
        let lbas = |lane| seen.iter().filter(|(l, _)| *l == lane).map(|(_, t)| *t).collect::<Vec<_>>();
        let at = |lbas: &[u64]| lbas.iter().map(|&l| Target::At(l)).collect::<Vec<_>>();
        assert_eq!(lbas(0), at(&[0, 20, 40, 200, 220, 240, 400, 420, 440]));
        assert_eq!(lbas(1), at(&[100, 120, 140, 300, 320, 340]));
        assert_eq!(picker.next(0), None, "stays done");
    }

    #[test]
    fn appends_fill_one_zone_then_the_next() {
        let mut picker = ZonedPicker::new(zones(2, 100, 40), 20, 8, true);
        let targets: Vec<_> = std::iter::from_fn(|| picker.next(3)).collect();
        assert_eq!(targets, [Target::Append(0), Target::Append(0), Target::Append(1), Target::Append(1)]);
    }

    #[test]
    fn an_append_must_land_in_a_slot_of_its_zone() {
        let zone = Zone { start: 100, capacity: 40 };
        assert!(check_append(zone, 20, 100).is_ok());
        assert!(check_append(zone, 20, 120).is_ok());
        for wrong in [0, 20, 99, 110, 140, 200] {
            assert!(check_append(zone, 20, wrong).is_err(), "LBA {wrong}");
        }
    }
}

//! Format and open: a new volume on blank devices, or the committed state
//! rebuilt from the journal and the devices' zones.

use super::fork::Fork;
use super::identify::{identify, read_images, Identified};
use super::zone_plan::ZoneAction;
use super::{describe_misplaced, ChecksumStore, OpenPhases, RecoveryReport, Volume, VolumeOptions, WriteMode};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::journal::layout::placed_copies;
use crate::journal::layout::{
    default_software_zone_bytes, meta_copies, meta_zones_per_segment, write_segment, SegmentImage, LABEL_BLOCKS,
};
use crate::journal::recovery::{max_generation, probe, recover, tips, Probe};
use crate::journal::{self, push_session, Label, MemberRecord, Op, PageImage, SessionRecord, Superblock};
use crate::table::{split, ZoneCensus};
use crate::zones::{ZoneTable, ZoneUse};
use crate::{ExtentId, Location, Profile, BLOCK_SIZE};
use nvme_driver::cmd::zns::ZoneSendAction;
use std::time::Instant;

impl Volume {
    /// Creates a new volume on `devices` (one to sixteen: a dup takes
    /// one, a mirror two or more), destroying what they held, and commits
    /// it. Every option is checked before the first write.
    pub fn format(mut devices: Vec<Device>, options: &VolumeOptions) -> Result<Volume> {
        let profile = options.profile;
        if !profile.spans(devices.len()) {
            return Err(Error::InvalidConfig(format!(
                "profile {profile:?} spans {} to {} namespace(s), got {}",
                profile.min_devices(),
                profile.max_devices(),
                devices.len()
            )));
        }
        if options.streams == 0 || options.streams > 64 {
            return Err(Error::InvalidConfig(format!("{} streams: expected 1..=64", options.streams)));
        }
        let volume_id = match options.volume_id {
            Some(0) => return Err(Error::InvalidConfig("volume ID 0".into())),
            Some(id) => id,
            None => new_volume_id(),
        };
        let store = checksum_store_for(&devices, options.checksums)?;
        let area = store == ChecksumStore::Area;
        // Zoned members first: a conventional member of a volume with
        // zoned ones takes software zones as large as their zones, so that
        // one count of zones per metadata segment suits every member (with
        // 2 MiB software zones first, a mirror's 64 MiB ZNS member gave 12
        // of its 16 zones to metadata).
        for device in devices.iter_mut().filter(|d| d.is_zoned()) {
            device.load_zones(0)?;
        }
        let zoned = devices.iter().filter(|d| d.is_zoned()).flat_map(|d| d.zones.iter());
        let zoned_zone_blocks = zoned.map(|z| z.capacity_blocks).max();
        let mut software_zone_blocks = 0;
        for device in devices.iter_mut().filter(|d| !d.is_zoned()) {
            software_zone_blocks = software_zone_blocks_for(device, options, area, zoned_zone_blocks)?;
            device.load_zones(software_zone_blocks)?;
        }
        // The checkpoint must have room for every extent of the volume
        // (the first namespace's worth, at least, as before pools).
        let pool_blocks = devices.iter().map(|d| d.zones.iter().map(|z| u64::from(z.capacity_blocks)).sum::<u64>());
        let data_blocks =
            pool_blocks.clone().next().unwrap_or(0).max(pool_blocks.sum::<u64>() / profile.copies() as u64);
        let map_store = store == ChecksumStore::Map;
        let holders: Vec<(&Device, u32)> = (0..devices.len())
            .filter(|&d| segments_on(devices.len(), d) > 0)
            .map(|d| (&devices[d], segments_on(devices.len(), d)))
            .collect();
        let largest = transfer_blocks(&devices, options);
        let data_unit_blocks = super::data_unit_blocks(&devices, area, largest);
        let g = meta_zones_per_segment(&holders, Some(data_blocks), data_unit_blocks, map_store)?;
        let max_extent_blocks = max_extent_blocks(&devices, largest, area, data_unit_blocks);
        let superblock = Superblock {
            profile,
            streams: options.streams,
            software_zone_blocks,
            meta_zones_per_segment: g,
            reserve_zones: options.reserve_zones,
            max_extent_blocks,
            finish_threshold_blocks: (options.finish_threshold_bytes / BLOCK_SIZE as u64).min(u64::from(u32::MAX))
                as u32,
            devices: devices
                .iter()
                .map(|d| (d.ns.nsid(), d.ns.block_size(), d.ns.capacity_blocks(), d.is_zoned()))
                .collect(),
            meta_segments: meta_copies(devices.len(), g).iter().map(|copy| copy.segments).collect(),
            meta_segment_blocks: 0,
            members: (0..devices.len())
                .map(|_| MemberRecord { id: journal::random_u64(), ..MemberRecord::default() })
                .collect(),
            last_scrub: None,
            tag_stride: match store {
                ChecksumStore::Tags => common_tag_layout(&devices).map_or(0, |layout| layout.stride as u32),
                _ => 0,
            },
            location_offset_bits: location_bits(&devices)?.offset_bits(),
            checksum_area: area,
            sessions: vec![SessionRecord::new(u8::MAX, 0, 0, 0)],
            data_unit_blocks,
        };
        let label = Label { volume_id, device_index: 0, copy: 0, segment: 0, generation: 1, superblock };
        // Checks the zone budget and lane sizes before anything is written.
        let mut volume = Volume::assemble(devices.into_iter().map(Some).collect(), label, options.clone(), &[])?;
        let segment_blocks = volume.journal.present_segment_blocks(&volume.devices);
        if segment_blocks < LABEL_BLOCKS + 16 {
            return Err(Error::InvalidConfig("the second device's metadata zones are too small".into()));
        }
        volume.superblock.meta_segment_blocks = segment_blocks;
        volume.journal.label.superblock.meta_segment_blocks = segment_blocks;
        // Format destroys: every zone of every zoned namespace is reset.
        for device in volume.devices.iter_mut().flatten() {
            if device.is_zoned() {
                let request = device.ns.zone_send(0, ZoneSendAction::Reset, true, 0)?;
                device.run(request, "Zone Reset (all)")?;
            }
        }
        // Members without a metadata copy are labelled first: a cut before
        // the metadata leaves no volume (open finds labels but no
        // metadata), and one after leaves every member labelled.
        for place in 0..volume.devices.len() {
            volume.label_member(place)?;
        }
        let pages = volume.page_chunk(0, volume.table.pages())?;
        let payload = volume.begin_payload(&journal::encode_ops(&[]), &pages.bytes);
        volume.journal.format(&mut volume.devices, &payload)?;
        volume.owners_written(&pages, payload.len() - pages.bytes.len());
        volume.stats.checkpoints += 1;
        Ok(volume)
    }

    /// Opens the volume on `devices`, given in any order: each is
    /// identified by its label. Rebuilds exactly the committed state from
    /// whichever metadata copy holds each record, and fails with a typed
    /// error, having written nothing, when a device is blank, foreign or
    /// unreadable, or committed metadata is lost on every copy (see
    /// [`VolumeOptions::rewind`]). A copy that lacks what the other holds
    /// is rewritten.
    ///
    /// A mirror member that is not given, or is blank or failing, makes
    /// open fail with [`Error::Degraded`] unless [`VolumeOptions::degraded`]
    /// allows it: then the volume opens on the other, records the member
    /// failed, and extents written from now on lack its copy. A member the
    /// metadata records failed that is given again, with its label, rejoins:
    /// only the copies it lacks are for a resilver to write.
    pub fn open(devices: Vec<Device>, options: &VolumeOptions) -> Result<Volume> {
        let Loaded {
            mut volume, dropped, copies_differ, order, unlabelled, absent, images, actions, log_mismatch, ..
        } = Volume::load(devices, options, false)?;
        let mut rejoined = Vec::new();
        // The state is known whole: only now does open write.
        volume.take_zone_actions(actions)?;
        // Zones left unsealed get their checksum areas (and are finished).
        volume.process_retiring()?;
        // Places that go missing now (not those recorded failed already).
        let mut newly_absent = 0;
        for (slot, why) in &absent {
            let member = &mut volume.members[*slot];
            newly_absent += usize::from(!member.record.failed);
            member.record.failed = true;
            member.why = Some(why.clone());
        }
        for slot in 0..volume.devices.len() {
            if volume.devices[slot].is_some() && volume.members[slot].record.failed {
                log::warn!("device place {slot}, recorded failed, is back: it rejoins");
                volume.members[slot].record.failed = false;
                volume.members[slot].why = None;
                rejoined.push(slot);
            }
        }
        if newly_absent > 0 {
            volume.begin_session();
        }
        let membership_changed = newly_absent > 0 || !rejoined.is_empty();
        if membership_changed {
            volume.journal.label.generation += 1;
            volume.journal_members();
        }
        let repair = copies_differ || !unlabelled.is_empty() || membership_changed;
        if log_mismatch || repair {
            volume.journal.broken = true;
            match volume.commit() {
                // A member without a metadata copy carries only its label,
                // which the commit does not write.
                Ok(_) => {
                    for &place in &unlabelled {
                        volume.label_member(place)?;
                    }
                }
                // Everything committed is readable; nothing more can be.
                Err(Error::ReadOnly { why }) => log::warn!("opened read-only: {why}"),
                Err(error) => return Err(error),
            }
        } else {
            volume.clear_stale_checkpoints(&images)?;
        }
        volume.recovery = RecoveryReport {
            dropped,
            copies_repaired: repair,
            device_order: order.iter().map(|g| g.unwrap_or(usize::MAX)).collect(),
            ..std::mem::take(&mut volume.recovery)
        };
        Ok(volume)
    }

    /// Everything open does before it writes: places the devices,
    /// recovers the committed state and plans the zones. Reads only. Reads
    /// one metadata copy whole and the others only where they may hold
    /// what it lacks, unless `every_copy` (a check): a copy's damage where
    /// the first is whole is the metadata scrub's to find
    /// ([`Volume::scrub_metadata`]), as btrfs and ZFS read one good copy
    /// of their metadata and leave the others to scrub.
    pub(super) fn load(devices: Vec<Device>, options: &VolumeOptions, every_copy: bool) -> Result<Loaded> {
        let Front {
            mut label,
            mut order,
            mut unlabelled,
            mut absent,
            mut devices,
            mut descriptors,
            mut images,
            mut phases,
            mut label_ids,
            mut blank,
        } = front(devices, options, every_copy, false)?;
        let mut superblock = label.superblock.clone();
        // No metadata copy among the devices given: nothing to learn the
        // places from, and a volume not opened degraded is refused as
        // before (a degraded open then finds no metadata).
        if !absent.is_empty() && !options.degraded && images.iter().all(Option::is_none) {
            return Err(super::identify::degraded_error(&absent));
        }
        let id = label.volume_id;
        let mut since = Instant::now();
        let mut blocks_read = blocks_read(&images);
        let partial = images.iter().flatten().flatten().any(|image| !image.skipped.is_empty());
        // Members whose newest records name other sessions may have gone
        // on apart (see `fork`): every copy is read whole, and each is
        // recovered alone.
        let sessions: Vec<u64> = tips(&images, id).into_iter().flatten().map(|t| t.session).collect();
        let suspect = sessions.windows(2).any(|pair| pair[0] != pair[1]);
        let mut recovered = None;
        if partial && !suspect {
            match recover(&images, id, false) {
                Ok(first) if !first.copies_differ && !first.conflict => recovered = Some(first),
                _ => {}
            }
            phases.recovering_us += lap(&mut since);
        }
        if recovered.is_none() && partial {
            images = read_images(&mut devices, &descriptors, &superblock, id, true);
            blocks_read += self::blocks_read(&images);
            phases.reading_us += lap(&mut since);
        }
        // Two copies holding one record differently are two histories.
        let mut conflict = false;
        if recovered.is_none() && !suspect {
            let all = recover(&images, id, options.rewind)?;
            conflict = all.conflict;
            if !conflict {
                recovered = Some(all);
            }
        }
        let recovered = match recovered {
            Some(recovered) => recovered,
            None => {
                let fork = self::fork(&mut images, &superblock, id, conflict, &order, &devices)?;
                let recovered = match fork {
                    Fork::Diverged(sides) => return Err(Error::Diverged { sides }),
                    Fork::Same => recover(&images, id, options.rewind)?,
                    Fork::Stale { keep } => {
                        log::warn!(
                            "the metadata copies without copy {keep}'s session are stale: the state is recovered \
                             from that copy alone, and their devices rejoin"
                        );
                        let above = max_generation(&images, id);
                        let mut recovered = only_copy(&mut images, keep, |images| recover(images, id, options.rewind))?;
                        recovered.next_generation = recovered.next_generation.max(above + 1);
                        recovered.copies_differ = true;
                        recovered
                    }
                };
                phases.recovering_us += lap(&mut since);
                recovered
            }
        };
        // The places and members are the durable checkpoint's. A label may
        // be ahead of it (a checkpoint whose head's labels landed and whose
        // record did not) or behind it (one not found): a pool's shape
        // changes only in a whole checkpoint (add, remove, replace), so the
        // devices are placed again, by member ID, as it says.
        let ids = |s: &Superblock| s.members.iter().map(|m| m.id).collect::<Vec<u64>>();
        if let Some(durable) = recovered.superblock.as_ref().filter(|d| ids(d) != ids(&superblock)) {
            log::warn!(
                "the labels say {} place(s), the durable metadata {}: the devices are placed as the metadata says",
                superblock.members.len(),
                durable.members.len()
            );
            let count = durable.members.len();
            let mut placed: Vec<Option<Device>> = (0..count).map(|_| None).collect();
            let mut new_descriptors = vec![Vec::new(); count];
            let mut new_order = vec![None; count];
            let mut new_ids = vec![None; count];
            let mut new_blank = vec![false; count];
            let mut new_unlabelled = Vec::new();
            for old in 0..devices.len() {
                let Some(device) = devices[old].take() else { continue };
                let given = order[old].expect("a placed device was given");
                let slot = match label_ids[old] {
                    Some(id) => match durable.members.iter().position(|m| m.id == id) {
                        Some(slot) => slot,
                        // Labelled by an add (its metadata copy's head) whose
                        // commit is not durable: it holds nothing of the
                        // volume, and is added again as if blank.
                        None if superblock.members.len() > count && superblock.members.iter().any(|m| m.id == id) => {
                            log::warn!(
                                "device {given}: labelled by an add whose commit is not durable; it holds nothing \
                                 of the volume and is left out (add it again)"
                            );
                            continue;
                        }
                        None => return Err(Error::Removed { device: given, place: old }),
                    },
                    None if old < count => old,
                    None => {
                        return Err(Error::InvalidConfig(format!("the volume spans {count} namespace(s), more given")))
                    }
                };
                if placed[slot].is_some() {
                    return Err(Error::Corrupt(format!("two devices given claim place {slot}")));
                }
                if label_ids[old].is_none() {
                    new_unlabelled.push(slot);
                }
                placed[slot] = Some(device);
                new_descriptors[slot] = std::mem::take(&mut descriptors[old]);
                new_order[slot] = Some(given);
                new_ids[slot] = label_ids[old];
                new_blank[slot] = blank[old];
            }
            absent = (0..count).filter(|&s| placed[s].is_none()).map(|s| (s, "not given".to_string())).collect();
            (devices, descriptors, order, label_ids, blank) = (placed, new_descriptors, new_order, new_ids, new_blank);
            unlabelled = new_unlabelled;
            superblock = durable.clone();
            label.superblock = durable.clone();
        }
        // Places not taken, now that the metadata said what they are: only
        // when opening degraded.
        if !absent.is_empty() && !options.degraded {
            return Err(super::identify::degraded_error(&absent));
        }
        let absent_zones: Vec<usize> = (0..devices.len())
            .map(|device| {
                let lane = lanes_of(superblock.profile, superblock.devices.len(), device).next().unwrap_or(0);
                recovered.lane_zones.get(lane).map_or(0, |&zones| zones as usize)
            })
            .collect();
        let mut volume = Volume::assemble(devices, label, options.clone(), &absent_zones)?;
        let segment_blocks = volume.journal.present_segment_blocks(&volume.devices);
        if segment_blocks < volume.superblock.meta_segment_blocks {
            return Err(Error::Corrupt(format!(
                "metadata segments of {segment_blocks} blocks, the volume's take {}",
                volume.superblock.meta_segment_blocks
            )));
        }
        volume.journal.segment = recovered.segment;
        volume.journal.offset = recovered.end;
        volume.journal.generation = recovered.generation;
        volume.journal.seq = recovered.seq;
        volume.journal.next_generation = recovered.next_generation;
        volume.journal.pages_total = recovered.pages_total;
        volume.journal.pages_written = recovered.pages_written;
        volume.journal.other_needed = recovered.other_needed;
        volume.journal.sealed_at = recovered.sealed_at;
        phases.recovering_us += lap(&mut since);
        // The sealed checkpoint's pages, then every record's operations
        // over them, each decoded from the images as it comes.
        let mut report = RecoveryReport { metadata_blocks_read: blocks_read, ..RecoveryReport::default() };
        volume.loading = true;
        for replay in &recovered.replay {
            for page in replay.pages(&images, id)? {
                volume.load_page(&page)?;
                report.pages_loaded += 1;
            }
        }
        for replay in &recovered.replay {
            for op in replay.ops(&images)? {
                volume.apply(op)?;
                report.ops_replayed += 1;
            }
            for &(page, home) in &replay.homes {
                volume.owners.written(page, home);
            }
        }
        report.records_replayed = recovered.replay.len() as u64;
        for &session in &recovered.sessions {
            push_session(&mut volume.superblock.sessions, session);
        }
        volume.journal.session = volume.superblock.sessions.last().map_or(0, |s| s.id);
        volume.recovery = report;
        volume.loading = false;
        phases.replaying_us += lap(&mut since);
        let census = volume.finish_load()?;
        // A device whose label names another member than the one the
        // state records in its place was replaced since: an old copy.
        for (place, label_id) in label_ids.iter().enumerate() {
            let Some(label_id) = *label_id else { continue };
            if volume.devices[place].is_none() || label_id == volume.members[place].record.id {
                continue;
            }
            let given = order[place].expect("a labelled device was placed");
            let error = Error::Replaced { device: given, place };
            if options.degraded && volume.devices.iter().flatten().count() > 1 {
                log::warn!("{error}; opening degraded without it");
                volume.set_absent(place);
                absent.push((place, error.to_string()));
            } else {
                return Err(error);
            }
        }
        for &slot in &unlabelled {
            let given = order[slot].expect("an unlabelled device was placed");
            match volume.verify_member(slot, given, blank[slot]) {
                Ok(()) => {}
                Err(error) if options.degraded && volume.devices.iter().flatten().count() > 1 => {
                    log::warn!("device place {slot}: {error}; opening degraded without it");
                    volume.set_absent(slot);
                    absent.push((slot, error.to_string()));
                }
                Err(error) => return Err(error),
            }
        }
        let (actions, log_mismatch) = volume.plan_zones(&descriptors, &census)?;
        phases.checking_us += lap(&mut since);
        volume.recovery.phases = phases;
        Ok(Loaded {
            volume,
            dropped: recovered.dropped,
            copies_differ: recovered.copies_differ,
            bad_records: recovered.bad_records,
            bad_labels: recovered.bad_labels,
            order,
            unlabelled,
            absent,
            images,
            actions,
            log_mismatch,
        })
    }

    /// Makes place `slot` absent before the zones are planned: its device
    /// is dropped, and its lanes keep their copies' places in tables of
    /// unknown capacity.
    fn set_absent(&mut self, slot: usize) {
        self.devices[slot] = None;
        self.lanes_moved();
        for lane in 0..self.lanes.len() {
            if self.lanes[lane].device == slot {
                let zones = self.lanes[lane].table.zone_count() as usize;
                let capacities = vec![super::member::UNKNOWN_CAPACITY; zones];
                let old = &self.lanes[lane].table;
                let owned: Vec<bool> = (0..zones as u32).map(|z| old.zone(z).usage != ZoneUse::NotOwned).collect();
                let table = ZoneTable::new(
                    &capacities,
                    |z| owned[z as usize],
                    self.superblock.streams,
                    self.superblock.reserve_zones as usize,
                );
                self.lanes[lane].table = table;
                self.lanes[lane].appended.clear();
            }
        }
        self.watch_lanes();
    }

    /// Checks that device `slot` (given at `given`), which carries no
    /// label, holds this volume's data: some of its extents' copies verify.
    /// A blank or wiped device does not, and is refused by name
    /// ([`Error::BlankDevice`]). A device whose reads fail is not known to
    /// be blank: it is [`Error::Unreadable`], with the first read error, so
    /// that nothing offers to format a dying member.
    ///
    /// Except a blank device in a place that holds no extent's copy: its
    /// label is written after the commit that put it there (format,
    /// `replace`), or its metadata copy with that commit (an add to a
    /// volume of one or two, where the commit may be durable on the others
    /// and lost on it), so a cut leaves it blank, and it holds nothing
    /// committed that another blank device would not. It takes the place,
    /// and open writes its label (and its metadata copy).
    fn verify_member(&mut self, slot: usize, given: usize, is_blank: bool) -> Result<()> {
        let blank = Error::BlankDevice { device: given, volume_id: self.volume_id };
        let Some(lane) = self.lanes.iter().position(|l| l.device == slot) else { return Err(blank) };
        let lanes: Vec<usize> = (0..self.lanes.len()).filter(|&l| self.lanes[l].device == slot).collect();
        let holds_nothing = || self.table.iter().all(|(_, e)| lanes.iter().all(|&l| e.on(l).is_missing()));
        if is_blank && holds_nothing() {
            // A new member, as a replace makes one: a device that held the
            // place before, if it comes back, is not taken for it.
            log::warn!("device {given}: blank, in place {slot}, which holds nothing yet: it takes the place");
            self.members[slot].record.id = crate::journal::random_u64();
            self.journal.label.generation += 1;
            return Ok(());
        }
        let ids: Vec<(ExtentId, u32)> =
            self.table.iter().filter(|(_, e)| !e.on(lane).is_missing()).map(|(id, e)| (id, e.blocks)).collect();
        let step = (ids.len() / 16).max(1);
        let mut failed_read = None;
        for &(id, blocks) in ids.iter().step_by(step).take(16) {
            let mut data = vec![0u8; blocks as usize * BLOCK_SIZE];
            match self.read_copy_checked(id, lane, &mut data) {
                Ok(bad) if bad.is_empty() => {
                    log::warn!("device {given}: no label, but it holds this volume's data; rewriting its metadata");
                    return Ok(());
                }
                Ok(_) => {}
                Err(error) => {
                    failed_read.get_or_insert_with(|| format!("reading extent {id}: {error}"));
                }
            }
        }
        match failed_read {
            Some(what) => Err(Error::Unreadable { device: given, what }),
            None => Err(blank),
        }
    }

    /// On conventional namespaces, clears the checkpoint slot of the
    /// segment the log is not in, when it still holds an older checkpoint
    /// (a rotation cut short), so that no later damage can make open fall
    /// back to it. Not while the current checkpoint, not yet sealed, builds
    /// on that segment.
    fn clear_stale_checkpoints(&mut self, images: &[Option<[SegmentImage; 2]>]) -> Result<()> {
        if self.journal.other_needed {
            return Ok(());
        }
        let other = 1 - self.journal.segment;
        for (copy, segments) in self.journal.copies.clone().into_iter().zip(images) {
            let Some(segments) = segments else { continue };
            let Some(device) = self.devices[copy.device].as_mut() else { continue };
            let stale = segments[other as usize]
                .range(LABEL_BLOCKS, 1)
                .and_then(journal::Header::decode)
                .is_some_and(|h| h.volume_id == self.volume_id);
            if stale && !device.is_zoned() {
                let g = self.journal.g;
                write_segment(device, copy, g, other, LABEL_BLOCKS, &[0u8; BLOCK_SIZE])?;
                device.flush()?;
            }
        }
        Ok(())
    }

    /// Puts a checkpoint page in the extent table (at open).
    fn load_page(&mut self, page: &PageImage) -> Result<()> {
        let mapped =
            self.table.load_page(page).map_err(|e| Error::Corrupt(format!("checkpoint page {}: {e}", page.index)))?;
        self.mapped.extend(mapped.into_iter().map(|(id, crcs)| (id, crcs.into_boxed_slice())));
        Ok(())
    }

    /// After the pages and the log are in: the table's free list, the
    /// checksum map without the entries of extents gone since their page
    /// was written, the live count, and every extent checked to lie within
    /// its zones and to overlap no other. Returns each lane's census, which
    /// the zones are planned from, counted in the same pass over the table.
    fn finish_load(&mut self) -> Result<Vec<ZoneCensus>> {
        self.table.finish_load();
        let table = &self.table;
        self.mapped.retain(|&id, _| table.get(id).is_some());
        // Checksums whose copies are all in sealed zones since.
        self.drop_covered();
        let (lanes, copies) = (self.lanes.len(), self.copies());
        let mut census: Vec<ZoneCensus> = self.lanes.iter().map(|l| ZoneCensus::new(l.table.zone_count())).collect();
        let mut live = 0;
        for (id, entry) in self.table.iter() {
            live += u64::from(entry.blocks);
            let unmapped = self.mapped.get(&id).is_none_or(|c| c.is_empty());
            // With checksum areas, an extent outside the map must lie within
            // its zones' areas.
            let uncovered = || {
                entry.copies().any(|(lane, at)| {
                    let lane = &self.lanes[lane];
                    !at.is_missing()
                        && at.zone < lane.table.zone_count()
                        && !lane.area_covers(at.zone, at.offset, entry.blocks)
                })
            };
            let no_crcs = unmapped && (self.tags.is_none() || (self.area && uncovered()));
            // An extent with no copy left is lost (its checksums matter no
            // more), not malformed: it stays, named.
            if entry.copy_count() != copies || !entry.within(lanes) {
                return Err(Error::Corrupt(format!("extent {id}: wrong shape")));
            }
            if no_crcs && !entry.is_lost() {
                return Err(Error::Corrupt(format!("extent {id}: no checksums")));
            }
            for (lane, location) in entry.copies() {
                self.check_location(lane, location, entry.blocks)?;
                if !location.is_missing() {
                    census[lane].add(location, entry.blocks);
                }
            }
        }
        self.live_blocks = live;
        self.check_owner_homes()?;
        for (lane, census) in census.iter().enumerate() {
            if let Some(found) = self.table.misplaced_counted(lane, census, None) {
                return Err(Error::Corrupt(describe_misplaced(found, lane)));
            }
        }
        Ok(census)
    }

    /// Applies a journaled operation to the in-memory state (at open), over
    /// the checkpoint's pages, which may already hold its effect or a later
    /// one: an addition puts its extent in its slot whatever was there,
    /// and a free or a move of an extent the slot no longer holds does
    /// nothing. Replayed in order from the checkpoint's first record, the
    /// operations end in the state of the last (see `journal::recovery`).
    pub(super) fn apply(&mut self, op: Op) -> Result<()> {
        match op {
            Op::Add(record) => {
                // An extent of a volume with tags may keep its checksums in
                // the map (tags its controller could not carry).
                let entry = record.entry;
                let crcs_fit =
                    record.crcs.len() == entry.blocks as usize || (record.crcs.is_empty() && self.tags.is_some());
                let lanes = self.lanes.len();
                if entry.copy_count() != self.copies() || !entry.within(lanes) || !crcs_fit {
                    return Err(Error::Corrupt(format!("extent {}: wrong shape", record.id)));
                }
                // Where it lies is checked once the log is replayed, for
                // what is live then: a zone this extent used may since have
                // gone to a moved metadata segment.
                if let Some((_, location)) = entry.copies().find(|(_, l)| !self.table.fits(*l)) {
                    return Err(Error::Corrupt(format!("extent {} at {location:?}, outside the volume", record.id)));
                }
                self.table.put(record.id, &entry).map_err(|e| Error::Corrupt(format!("extent {}: {e}", record.id)))?;
                self.owners.set(split(record.id).0, record.owner);
                if record.crcs.is_empty() {
                    if !self.mapped.is_empty() {
                        self.mapped.remove(&record.id);
                    }
                } else {
                    self.mapped.insert(record.id, record.crcs.into_boxed_slice());
                }
                Ok(())
            }
            Op::Free(id) => {
                if self.table.remove(id).is_some() {
                    self.mapped.remove(&id);
                    self.owners.clear(split(id).0);
                }
                Ok(())
            }
            Op::Move { id, lane, to } => {
                let lane = usize::from(lane);
                if lane >= self.lanes.len() {
                    return Err(Error::Corrupt(format!("move of extent {id} to lane {lane}")));
                }
                if self.table.get(id).is_none() {
                    return Ok(());
                }
                if !self.table.fits(to) {
                    return Err(Error::Corrupt(format!("extent {id} moved to {to:?}, outside the volume's zones")));
                }
                // A copy left missing on every lane is caught once the log
                // is replayed; overlaps too.
                self.table.set_location(id, lane, to);
                Ok(())
            }
            Op::Relane { id, from, lane, to } => {
                let (from, lane) = (usize::from(from), usize::from(lane));
                if from >= self.lanes.len() || lane >= self.lanes.len() || from == lane {
                    return Err(Error::Corrupt(format!("extent {id}'s copy moved from lane {from} to {lane}")));
                }
                if !self.table.fits(to) {
                    return Err(Error::Corrupt(format!("extent {id} moved to {to:?}, outside the volume's zones")));
                }
                // An extent freed (or moved) since does nothing.
                self.table.relane(id, from, lane, to);
                Ok(())
            }
            Op::Member { device, record } => self.apply_member(device, record),
            Op::Session(record) => {
                push_session(&mut self.superblock.sessions, record);
                Ok(())
            }
            Op::Scrubbed(record) => {
                self.superblock.last_scrub = Some(record);
                Ok(())
            }
            Op::Sealed { lane, zone, blocks } => {
                let lane = usize::from(lane);
                let Some(table) = self.lanes.get(lane).map(|l| &l.table).filter(|t| zone < t.zone_count()) else {
                    return Err(Error::Corrupt(format!("a checksum area in lane {lane} zone {zone}")));
                };
                if !self.area || blocks > table.zone(zone).capacity {
                    return Err(Error::Corrupt(format!("lane {lane} zone {zone}: a checksum area of {blocks} blocks")));
                }
                self.lanes[lane].sealed[zone as usize] = blocks;
                Ok(())
            }
            Op::Crcs { id, crcs } => {
                if !self.area {
                    return Err(Error::Corrupt(format!("extent {id}'s checksums journaled on a volume without areas")));
                }
                match self.table.get(id) {
                    Some(entry) if entry.blocks as usize == crcs.len() => {
                        self.mapped.insert(id, crcs.into_boxed_slice());
                    }
                    Some(_) => return Err(Error::Corrupt(format!("extent {id}: {} checksums", crcs.len()))),
                    None => {}
                }
                Ok(())
            }
        }
    }

    pub(super) fn check_location(&self, lane: usize, location: Location, blocks: u32) -> Result<()> {
        if location.is_missing() {
            return Ok(());
        }
        let table = &self.lanes[lane].table;
        let ok = location.zone < table.zone_count() && {
            let zone = table.zone(location.zone);
            zone.usage != ZoneUse::NotOwned
                && u64::from(location.offset) + u64::from(blocks) <= u64::from(zone.capacity)
        };
        if ok {
            Ok(())
        } else {
            Err(Error::Corrupt(format!("lane {lane}: {blocks} blocks at {location:?} lie outside its zones")))
        }
    }
}

/// The lanes that lie on device place `device` of a volume of `devices`
/// namespaces (see [`super::lane_devices`]).
fn lanes_of(profile: Profile, devices: usize, device: usize) -> impl Iterator<Item = usize> {
    let lanes = super::lane_devices(profile, devices);
    (0..lanes.len()).filter(move |&lane| lanes[lane] == device)
}

/// Zones a conventional member must get to take its zoned partners' zone
/// size: fewer, and a few metadata and reserve zones would be most of it.
const MIN_ZONES_TO_MATCH: u64 = 16;

/// Software zones for a conventional `device`: the size asked; else, on a
/// volume with zoned members, their largest zone capacity
/// (`zoned_zone_blocks`) when the device takes [`MIN_ZONES_TO_MATCH`] of
/// them; else the default for its capacity, with room after the data for
/// the checksum area on a volume with areas, so that the data stays whole.
fn software_zone_blocks_for(
    device: &Device,
    options: &VolumeOptions,
    area: bool,
    zoned_zone_blocks: Option<u32>,
) -> Result<u32> {
    if device.is_zoned() {
        return Ok(0);
    }
    let capacity = device.ns.capacity_blocks() * u64::from(device.ns.block_size());
    // The zoned members' zone, as it is (with an area, the data is then
    // theirs too), when this device still has as many zones as a volume
    // needs at the least.
    let default = || match zoned_zone_blocks.map(|blocks| u64::from(blocks) * BLOCK_SIZE as u64) {
        Some(bytes) if capacity / bytes >= MIN_ZONES_TO_MATCH => bytes,
        _ => default_software_zone_bytes(capacity, area),
    };
    let bytes = options.software_zone_bytes.unwrap_or_else(default);
    if bytes < BLOCK_SIZE as u64 || !bytes.is_multiple_of(BLOCK_SIZE as u64) || bytes > u64::from(u32::MAX) * 4096 {
        return Err(Error::InvalidConfig(format!("software zones of {bytes} bytes: expected a multiple of 4096")));
    }
    Ok((bytes / BLOCK_SIZE as u64) as u32)
}

/// The tag layout every device shares, if each has room for a tag and
/// all alike (a mirror's copies must read alike).
fn common_tag_layout(devices: &[Device]) -> Option<crate::tags::TagLayout> {
    let first = devices.first()?.tag_layout()?;
    devices.iter().all(|d| d.tag_layout() == Some(first)).then_some(first)
}

/// Where a volume formatted on `devices` keeps its checksums, as `store`
/// asks: [`ChecksumStore::Auto`] takes block tags where every device has
/// room for them alike, and zone checksum areas elsewhere (nothing per
/// block in memory either way; the map only when asked for).
fn checksum_store_for(devices: &[Device], store: ChecksumStore) -> Result<ChecksumStore> {
    match (store, common_tag_layout(devices)) {
        (ChecksumStore::Auto, Some(_)) => Ok(ChecksumStore::Tags),
        (ChecksumStore::Auto, None) => Ok(ChecksumStore::Area),
        (ChecksumStore::Tags, None) => Err(Error::InvalidConfig(format!(
            "block tags need per-block metadata of at least {} bytes in a separate buffer, alike on every device; \
             found {}",
            crate::tags::TAG_BYTES,
            devices.iter().map(describe_metadata).collect::<Vec<_>>().join(", "),
        ))),
        (store, _) => Ok(store),
    }
}

fn describe_metadata(device: &Device) -> String {
    match device.ns.metadata() {
        None => format!("namespace {}: none", device.ns.nsid()),
        Some(m) => format!("namespace {}: {} bytes per LBA", device.ns.nsid(), m.bytes_per_block),
    }
}

/// How the extent table packs locations on `devices`: room for the largest
/// zone and the most zones of any.
fn location_bits(devices: &[Device]) -> Result<crate::table::LocationBits> {
    let largest = devices.iter().flat_map(|d| d.zones.iter().map(|z| z.capacity_blocks)).max().unwrap_or(0);
    let zones = devices.iter().map(|d| d.zones.len() as u32).max().unwrap_or(0);
    crate::table::LocationBits::new(largest, zones).ok_or_else(|| {
        Error::InvalidConfig(format!(
            "{zones} zones of up to {largest} blocks: past the extent table's 36-bit locations"
        ))
    })
}

/// The largest extent one command to every device takes, in blocks: the
/// option, the transfer limits and, for Zone Append, its own.
fn transfer_blocks(devices: &[Device], options: &VolumeOptions) -> u32 {
    let mut bytes = options.max_extent_bytes.max(BLOCK_SIZE);
    for d in devices {
        bytes = bytes.min(d.max_transfer_bytes);
        if d.is_zoned() && options.write_mode != WriteMode::Ordered && d.append_max_bytes >= BLOCK_SIZE {
            bytes = bytes.min(d.append_max_bytes);
        }
    }
    (bytes / BLOCK_SIZE).min(crate::table::MAX_BLOCKS as usize) as u32
}

/// The largest extent: what one command takes (`largest`), and no more
/// than the smallest zone's data.
fn max_extent_blocks(devices: &[Device], largest: u32, area: bool, unit: u32) -> u32 {
    let zones = devices.iter().flat_map(|d| d.zones.iter());
    let smallest = zones.map(|z| super::zone_data_blocks(z.capacity_blocks, area, unit)).min().unwrap_or(0);
    largest.min(smallest)
}

fn new_volume_id() -> u64 {
    journal::random_u64()
}

/// Whether the metadata copies of `images` (every one read whole) hold
/// one history, a stale one, or two (see `fork`); `conflict` when
/// recovery from all of them met a record two copies hold differently.
pub(super) fn fork(
    images: &mut [Option<[SegmentImage; 2]>],
    superblock: &Superblock,
    volume_id: u64,
    conflict: bool,
    order: &[Option<usize>],
    devices: &[Option<Device>],
) -> Result<Fork> {
    let bits = crate::table::LocationBits::from_offset_bits(superblock.location_offset_bits)
        .ok_or_else(|| Error::Corrupt(format!("{} offset bits", superblock.location_offset_bits)))?;
    let places: Vec<usize> = placed_copies(superblock).iter().map(|c| c.device).collect();
    let given: Vec<(usize, String)> = (0..devices.len())
        .map(|place| {
            let name = devices[place].as_ref().map_or(String::new(), |d| d.identity.0.clone());
            (order[place].unwrap_or(usize::MAX), name)
        })
        .collect();
    Ok(super::fork::analyze(images, volume_id, bits, conflict, &places, &given))
}

/// `f` over `images` with every metadata copy but `keep` taken out (put
/// back after).
pub(super) fn only_copy<T>(
    images: &mut [Option<[SegmentImage; 2]>],
    keep: usize,
    f: impl FnOnce(&[Option<[SegmentImage; 2]>]) -> T,
) -> T {
    let mut others: Vec<_> = (0..images.len()).map(|c| if c == keep { None } else { images[c].take() }).collect();
    let out = f(images);
    for (c, image) in others.iter_mut().enumerate() {
        if c != keep {
            images[c] = image.take();
        }
    }
    out
}

/// What open knows before it recovers anything: the devices placed by
/// their labels, and their metadata read.
pub(super) struct Front {
    pub label: Label,
    pub order: Vec<Option<usize>>,
    pub unlabelled: Vec<usize>,
    pub absent: Vec<(usize, String)>,
    pub devices: Vec<Option<Device>>,
    pub descriptors: Vec<Vec<nvme_driver::spec::zns::ZoneDescriptor>>,
    pub images: Vec<Option<[SegmentImage; 2]>>,
    pub phases: OpenPhases,
    /// Per place, the member ID the label of the device given there
    /// names for it (`None`: no device, or no label).
    pub label_ids: Vec<Option<u64>>,
    /// Per place, whether the device given there is blank.
    pub blank: Vec<bool>,
}

/// Places `devices` by their labels and reads their metadata (see
/// `Volume::load`). Reads only.
pub(super) fn front(
    mut devices: Vec<Device>,
    options: &VolumeOptions,
    every_copy: bool,
    refuse_absent: bool,
) -> Result<Front> {
    if devices.is_empty() {
        return Err(Error::InvalidArgument("no devices".into()));
    }
    let probes: Vec<Probe> = devices.iter_mut().map(|d| probe(d, options.software_zone_bytes)).collect();
    let Identified { label, order, unlabelled, absent } = identify(&probes, &devices, options.degraded, refuse_absent)?;
    let label_ids: Vec<Option<u64>> = order
        .iter()
        .map(|given| match given.map(|g| &probes[g]) {
            Some(Probe::Label(own)) => own.superblock.members.get(usize::from(own.device_index)).map(|m| m.id),
            _ => None,
        })
        .collect();
    let blank = order.iter().map(|given| given.is_some_and(|g| matches!(probes[g], Probe::Blank))).collect();
    let mut given: Vec<Option<Device>> = devices.into_iter().map(Some).collect();
    let mut devices: Vec<Option<Device>> =
        order.iter().map(|&g| g.map(|g| given[g].take().expect("placed once"))).collect();
    let superblock = &label.superblock;
    let mut descriptors = Vec::new();
    for device in &mut devices {
        descriptors.push(match device {
            Some(device) => {
                let blocks = if device.is_zoned() { 0 } else { superblock.software_zone_blocks };
                device.load_zones(blocks)?
            }
            None => Vec::new(),
        });
    }
    // Zones per segment are the label's (format chose them from the
    // first device; a replacement may have other zones): each copy
    // present must hold the segment size the volume uses, checked once
    // assembled.
    //
    // One copy is read whole and the others where they may differ,
    // unless that shows a difference or does not stand on its own:
    // then every copy whole (see `read_segment_image`).
    let mut phases = OpenPhases::default();
    let since = Instant::now();
    let images = read_images(&mut devices, &descriptors, superblock, label.volume_id, every_copy);
    phases.reading_us += since.elapsed().as_micros() as u64;
    Ok(Front { label, order, unlabelled, absent, devices, descriptors, images, phases, label_ids, blank })
}

/// Segments (two per metadata copy) on device `device` of a volume of
/// `devices` namespaces.
fn segments_on(devices: usize, device: usize) -> u32 {
    2 * super::meta_copies_on(devices, device)
}

/// What `Volume::load` found, for open to act on or check to report.
pub(super) struct Loaded {
    pub volume: Volume,
    /// What recovery found: a rewind's drops, whether the copies differ,
    /// and per copy its bad records and labels.
    pub dropped: Option<crate::journal::recovery::Dropped>,
    pub copies_differ: bool,
    pub bad_records: Vec<u64>,
    pub bad_labels: Vec<u64>,
    pub order: Vec<Option<usize>>,
    pub unlabelled: Vec<usize>,
    pub absent: Vec<(usize, String)>,
    pub images: Vec<Option<[SegmentImage; 2]>>,
    pub actions: Vec<ZoneAction>,
    pub log_mismatch: bool,
}

/// Microseconds since `since`, which moves to now.
fn lap(since: &mut Instant) -> u64 {
    let now = Instant::now();
    let us = now.duration_since(*since).as_micros() as u64;
    *since = now;
    us
}

/// Blocks the images read (or tried to).
fn blocks_read(images: &[Option<[SegmentImage; 2]>]) -> u64 {
    images.iter().flatten().flatten().map(SegmentImage::blocks_read).sum()
}

#[cfg(test)]
mod tests {
    use crate::journal::{ExtentRecord, Op};
    use crate::{Device, DeviceOptions, Error, Location, Volume, VolumeOptions, BLOCK_SIZE};
    use nvme_driver::sim::{SimConfig, Simulator};
    use nvme_driver::{Controller, ControllerOptions};
    use std::time::Duration;

    /// A journaled addition that puts a second extent over the first's
    /// copy, or past what its zone holds, is refused at open by name, not
    /// taken in: the table's checks hold whatever the log says.
    #[test]
    fn open_refuses_committed_extents_that_overlap_or_lie_past_their_zone() {
        type Forge = fn(Location) -> Location;
        let cases: [(&str, Forge, &str); 2] = [
            ("overlapping", |at| Location { zone: at.zone, offset: at.offset + 2 }, "overlap"),
            ("past the write pointer", |at| Location { zone: at.zone, offset: at.offset + 64 }, "the zone holds"),
        ];
        for (case, forge, refusal) in cases {
            // 64 zones of 1 MiB, 512-byte LBAs.
            let sim = Simulator::new(SimConfig::zoned(64 * 2048, 512, 2048, 2048));
            let bound = Duration::from_millis(200);
            let controller_options =
                ControllerOptions { admin_timeout: bound, shutdown_timeout: bound, ..ControllerOptions::default() };
            let controller = Controller::init(sim, controller_options).expect("bring-up");
            let device_options = DeviceOptions { timeout: bound, ..DeviceOptions::default() };
            let device = Device::open(&controller, 1, device_options).expect("the device");
            let options = VolumeOptions { timeout: bound, ..VolumeOptions::default() };
            let mut volume = Volume::format(vec![device], &options).expect("format");
            let first = volume.write(0, &vec![7u8; 4 * BLOCK_SIZE], 1).expect("a write");
            volume.commit().expect("commit");
            let at = volume.location(first, 0).expect("its copy");
            let crcs = volume.checksums(first).map(<[u32]>::to_vec).unwrap_or_default();
            let forged = volume.table.reserve();
            volume.ops.push(Op::Add(ExtentRecord::new(
                forged,
                2,
                crate::table::Entry::on_lanes(4, &[forge(at)]),
                crcs,
            )));
            volume.commit().expect("the forged addition is journaled");
            let devices = volume.close().expect("close");
            match Volume::open(devices, &options) {
                Err(Error::Corrupt(why)) => assert!(why.contains(refusal), "{case}: {why}"),
                other => panic!("{case}: open gave {:?}, not a refusal", other.map(|v| v.recovery().clone())),
            }
        }
    }
}

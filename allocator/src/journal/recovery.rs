//! Recovery at open: finding a device's label, and rebuilding the
//! committed state from the journal's two copies without ever guessing.
//!
//! Every record that verifies (its header and payload checksums, this
//! volume's ID) on any copy is evidence that everything before it was
//! committed. The journal is a series of *chains*: a checkpoint's first
//! record and the deltas after it (one generation, consecutive sequence
//! numbers and blocks), each read from whichever copy holds it whole. A
//! checkpoint's pages follow its first record a few per delta, and the
//! record with its last page is marked sealed (see `log`).
//!
//! Recovery takes the newest chain. When it is not sealed (a cut while
//! its pages were being written), it builds on the chain before it: the
//! newest older one holding the commit just before its first, cut there
//! (anything of it past that point was superseded, never acknowledged);
//! and so on back to a sealed one. The state is that chain's pages, with
//! every operation from its first record on replayed over them: pages were
//! written while the log went on, and replaying an operation over a page
//! that already holds its effect, or a later one, ends in the same state
//! (see `Volume::load`).
//!
//! If a verified record anywhere is newer than where the newest chain
//! ends, a record in between is lost on every copy: a hole, not a torn
//! tail, and open fails naming it (or, when asked to rewind, opens at the
//! newest chain that stands and reports what it drops, as `zpool import
//! -F` does). A torn tail, the last commit that was never acknowledged,
//! has no verified successor and is dropped silently, as it must be.
//!
//! TigerBeetle's journal recovery makes the same distinction between torn,
//! missing and corrupt entries (`src/vsr/journal.zig`).

use super::layout::{default_software_zone_bytes, meta_zones_per_segment, with_area, SegmentImage, LABEL_BLOCKS};
use super::{
    decode_begin, decode_delta, decode_label, decode_record_ops, push_session, Header, Kind, Label, LabelRead, Op,
    PageImage, SessionRecord, HEADER_BYTES,
};
use crate::checksum::crc;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::owners::Home;
use crate::{ExtentId, BLOCK_SIZE};
use std::collections::HashMap;

/// What a device holds, read as a member of a volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Probe {
    Label(Label),
    /// Every place a label could be was read, and none holds one.
    Blank,
    /// No label was found, and some of the places could not be read.
    Unreadable(String),
    /// No label was found, every place was read, and some hold data: not
    /// blank (garbage over the labels, or another owner's data).
    Unrecognized,
    /// A volume of another format version.
    OtherVersion(u8),
}

/// Finds the newest label on `device` (the highest label generation: it
/// says where the segments are now): the first two blocks of the
/// namespace, then the heads of the other segments. On a zoned namespace
/// those are zone starts; on a conventional one they depend on the
/// software zone size, so the sizes a volume may have been formatted with
/// are tried (`hint` first).
pub(crate) fn probe(device: &mut Device, hint_software_zone_bytes: Option<u64>) -> Probe {
    let lpb = device.lbas_per_block;
    let mut candidates: Vec<u64> = vec![0, lpb];
    if device.is_zoned() {
        if let Err(error) = device.load_zones(0) {
            return Probe::Unreadable(format!("Report Zones: {error}"));
        }
        // Every zone start: a segment whose zone wore out moves anywhere.
        candidates.extend(device.zones.iter().skip(1).flat_map(|z| [z.start_lba, z.start_lba + lpb]));
    } else {
        let capacity_bytes = device.ns.capacity_blocks() * u64::from(device.ns.block_size());
        let mut sizes: Vec<u64> = hint_software_zone_bytes.into_iter().collect();
        sizes.push(default_software_zone_bytes(capacity_bytes, false));
        sizes.extend((16..=30).map(|shift| 1u64 << shift));
        // A volume with checksum areas has each zone's area after a power
        // of two of data.
        sizes.extend((16..=30).map(|shift| with_area(1u64 << shift)));
        for bytes in sizes {
            let blocks = (bytes / BLOCK_SIZE as u64).min(u64::from(u32::MAX)) as u32;
            if blocks == 0 || device.load_zones(blocks).is_err() {
                continue;
            }
            for segments in [2, 4] {
                let Ok(g) = meta_zones_per_segment(&[(device, segments)], None, 1, false) else { continue };
                for k in 1..segments {
                    let start = device.zones[(k * g) as usize].start_lba;
                    candidates.extend([start, start + lpb]);
                }
            }
        }
    }
    let capacity = device.ns.capacity_blocks();
    let mut failed = None;
    let mut data_found = false;
    let mut newest: Option<Label> = None;
    let mut block = vec![0u8; BLOCK_SIZE];
    let mut seen = std::collections::HashSet::new();
    for lba in candidates {
        if lba + lpb > capacity || !seen.insert(lba) {
            continue;
        }
        match device.read_at(lba, &mut block) {
            Err(error) => {
                failed.get_or_insert(format!("LBA {lba}: {error}"));
            }
            Ok(()) => match decode_label(&block) {
                // The newest label says where the segments are now.
                LabelRead::Label(label) => {
                    if newest.as_ref().is_none_or(|n| label.generation > n.generation) {
                        newest = Some(label);
                    }
                }
                LabelRead::Newer(version) | LabelRead::Older(version) => return Probe::OtherVersion(version),
                LabelRead::None => data_found |= block.iter().any(|&b| b != 0),
            },
        }
    }
    // A label says where its copy's segments are: on a conventional
    // namespace the guesses above (from its own size) may have missed the
    // other segment's head (a pool sizes segments from all its devices), and
    // a newer label there names where the log went on.
    let mut followed = 0;
    while let Some(label) = newest.as_ref().filter(|_| !device.is_zoned() && followed < 4) {
        followed += 1;
        let superblock = &label.superblock;
        if superblock.software_zone_blocks == 0 || device.load_zones(superblock.software_zone_blocks).is_err() {
            break;
        }
        let place = usize::from(label.device_index);
        let heads: Vec<u64> = super::layout::placed_copies(superblock)
            .into_iter()
            .filter(|copy| copy.device == place)
            .flat_map(|copy| copy.segments)
            .filter_map(|zone| device.zones.get(zone as usize).map(|z| z.start_lba))
            .flat_map(|start| [start, start + lpb])
            .filter(|&lba| lba + lpb <= capacity && seen.insert(lba))
            .collect();
        let mut newer = None;
        for lba in heads {
            if let Ok(()) = device.read_at(lba, &mut block) {
                if let LabelRead::Label(found) = decode_label(&block) {
                    let best = newer.as_ref().or(newest.as_ref()).map_or(0, |l: &Label| l.generation);
                    if found.generation > best {
                        newer = Some(found);
                    }
                }
            }
        }
        match newer {
            Some(found) => newest = Some(found),
            None => break,
        }
    }
    if let Some(label) = newest {
        return Probe::Label(label);
    }
    match failed {
        Some(what) => Probe::Unreadable(what),
        // Blank means never written (or zeroed): anything else may be
        // someone's data, and nothing may format it by inference.
        None if data_found => Probe::Unrecognized,
        None => Probe::Blank,
    }
}

/// Commits dropped by a rewind past a hole.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Dropped {
    /// The journal sequence numbers of the commits dropped (the first is
    /// the one no copy holds).
    pub first_seq: u64,
    /// The newest commit a readable record proved.
    pub last_seq: u64,
    /// Extents those commits added, as far as readable records tell.
    pub extents: Vec<ExtentId>,
}

/// The committed state, as recovery found it.
#[derive(Debug)]
pub(crate) struct Recovered {
    /// Where the log goes on: the newest chain's segment, generation, next
    /// free block and last sequence number.
    pub segment: u32,
    pub generation: u64,
    pub end: u64,
    pub seq: u64,
    /// Above every generation any header found carries.
    pub next_generation: u64,
    /// Per lane, its zones (the newest chain's first record says).
    pub lane_zones: Vec<u32>,
    /// The superblock of the newest checkpoint replayed: the places and
    /// members the durable state has (a pool's shape changes only in a
    /// whole checkpoint: add, remove, replace), whatever a label says.
    pub superblock: Option<super::Superblock>,
    /// Every record from the sealed checkpoint's first on, through the
    /// newest chain, in order: open loads the pages of those that carry
    /// the sealed checkpoint's (up to its seal), then replays every one's
    /// operations, decoding each from the images as it goes (see
    /// [`Replay::pages`], [`Replay::ops`]), so that no more than one
    /// record's operations are in memory at once.
    pub replay: Vec<Replay>,
    /// The newest chain's checkpoint: pages to write, and written.
    pub pages_total: u64,
    pub pages_written: u64,
    /// The other segment holds part of the chain recovered from.
    pub other_needed: bool,
    /// Where the newest chain's checkpoint became whole (the end of the
    /// record with its last page); 0 when it did not.
    pub sealed_at: u64,
    /// Some present copy lacks a record or label the other holds: the
    /// metadata must be rewritten on every copy.
    pub copies_differ: bool,
    /// Per copy (absent ones count nothing): records of the recovered
    /// chains that do not verify on it, and label blocks of the segments
    /// they lie in that are not this volume's.
    pub bad_records: Vec<u64>,
    pub bad_labels: Vec<u64>,
    /// What a rewind dropped.
    pub dropped: Option<Dropped>,
    /// Another copy holds a record of the recovered chains with the same
    /// numbers but other contents (see `Volume::load`).
    pub conflict: bool,
    /// The sessions the checkpoints recovered from name (see
    /// [`SessionRecord`]), and the newest record's session and time.
    pub sessions: Vec<SessionRecord>,
    pub last_session: u64,
    pub last_unix_s: u32,
}

/// One record to replay: where it lies, whether it carries pages of the
/// checkpoint open loads, and where the owner blobs it carries lie (per
/// page index; see [`crate::owners`]).
#[derive(Debug)]
pub(crate) struct Replay {
    record: Found,
    pub load_pages: bool,
    pub homes: Vec<(u64, Home)>,
}

impl Replay {
    /// The pages of the checkpoint this record carries (none unless
    /// `load_pages`), decoded from `images` (those `recover` was given).
    pub fn pages(&self, images: &[Option<[SegmentImage; 2]>], volume_id: u64) -> Result<Vec<PageImage>> {
        if !self.load_pages {
            return Ok(Vec::new());
        }
        let bytes = payload(images, &self.record).expect("verified");
        let seq = self.record.header.seq;
        Ok(match self.record.header.kind {
            Kind::Checkpoint => decode_begin(bytes, volume_id, seq, true, false)?.pages,
            Kind::Delta => decode_delta(bytes, volume_id, seq, true, false)?.pages,
        })
    }

    /// The record's operations, decoded from `images`.
    pub fn ops(&self, images: &[Option<[SegmentImage; 2]>]) -> Result<Vec<Op>> {
        decode_record_ops(self.record.header.kind, payload(images, &self.record).expect("verified"))
    }
}

#[derive(Clone, Copy, Debug)]
struct Found {
    copy: usize,
    segment: u32,
    offset: u64,
    header: Header,
}

/// One chain: a checkpoint's first record and the deltas that follow it.
#[derive(Clone, Debug)]
struct Chain {
    records: Vec<Found>,
}

impl Chain {
    fn first(&self) -> &Found {
        &self.records[0]
    }

    fn last(&self) -> &Found {
        self.records.last().expect("a chain has its first record")
    }

    fn sealed(&self) -> bool {
        self.records.iter().any(|r| r.header.sealed)
    }

    fn end(&self) -> u64 {
        self.last().offset + self.last().header.record_blocks()
    }

    /// The chain without its records from sequence number `seq` on.
    fn cut_before(&self, seq: u64) -> Option<Chain> {
        let records: Vec<Found> = self.records.iter().copied().take_while(|r| r.header.seq < seq).collect();
        (records.last()?.header.seq + 1 == seq).then_some(Chain { records })
    }
}

/// Rebuilds the state from the images of every copy's two segments
/// (`None` for a copy whose device is absent). Pure: the device reads are
/// done, so this is what the fuzz target and the unit tests drive. A
/// record in blocks an image skipped is neither found there nor counted
/// bad there.
pub(crate) fn recover(images: &[Option<[SegmentImage; 2]>], volume_id: u64, rewind: bool) -> Result<Recovered> {
    let (found, max_generation) = verified_records(images, volume_id);
    let mut at: HashMap<(u32, u64), Vec<Found>> = HashMap::new();
    for record in &found {
        at.entry((record.segment, record.offset)).or_default().push(*record);
    }
    let follow = |first: Found| {
        let mut records = vec![first];
        let mut end = first.offset + first.header.record_blocks();
        while let Some(next) = at.get(&(first.segment, end)).and_then(|list| {
            let seq = records.last().map_or(0, |r: &Found| r.header.seq);
            list.iter().find(|r| {
                r.header.kind == Kind::Delta
                    && r.header.generation == first.header.generation
                    && r.header.seq == seq + 1
            })
        }) {
            records.push(*next);
            end += next.header.record_blocks();
        }
        Chain { records }
    };
    // Every chain, newest first (one per generation: a generation begins
    // once, at one place on every copy).
    let mut firsts: Vec<Found> = found.iter().filter(|r| r.header.kind == Kind::Checkpoint).copied().collect();
    firsts.sort_by_key(|r| std::cmp::Reverse(r.header.generation));
    firsts.dedup_by_key(|r| r.header.generation);
    let chains: Vec<Chain> = firsts.into_iter().map(follow).collect();
    // The chains a newest one stands on, back to a sealed one.
    let stands_on = |top: usize| -> Option<Vec<Chain>> {
        let mut list = vec![chains[top].clone()];
        while !list.last().expect("one").sealed() {
            let first = *list.last().expect("one").first();
            let before = chains
                .iter()
                .filter(|c| c.first().header.generation < first.header.generation)
                .find_map(|c| c.cut_before(first.header.seq))?;
            list.push(before);
        }
        list.reverse();
        Some(list)
    };
    let newest = found.iter().map(|r| (r.header.generation, r.header.seq)).max();
    let Some((top, list)) = (0..chains.len()).find_map(|top| stands_on(top).map(|list| (top, list))) else {
        let (generation, newest_seq) = newest.unwrap_or((0, 0));
        return Err(Error::MetadataLost {
            generation,
            seq: 0,
            newest_seq,
            what: format!(
                "no checkpoint verifies whole on any copy (the newest record found is commit {newest_seq} of \
                 generation {generation})"
            ),
        });
    };
    let last = *list.last().expect("the newest chain").last();
    let (generation, seq, segment) = (last.header.generation, last.header.seq, last.segment);
    let end = list.last().expect("the newest chain").end();
    let newest = newest.expect("a checkpoint was found");
    let mut dropped = None;
    if newest > (generation, seq) {
        let what = if top > 0 {
            format!("a record before the checkpoint of generation {} (a later record of it verifies)", newest.0)
        } else {
            format!("the delta at block {end} of segment {segment}")
        };
        if !rewind {
            return Err(Error::MetadataLost { generation, seq: seq + 1, newest_seq: newest.1, what });
        }
        let extents = found
            .iter()
            .filter(|r| (r.header.generation, r.header.seq) > (generation, seq))
            .filter_map(|r| payload(images, r).map(|p| (r, p)))
            .filter_map(|(r, p)| decode_record_ops(r.header.kind, p).ok())
            .flatten()
            .filter_map(|op| if let Op::Add(e) = op { Some(e.id) } else { None })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        log::warn!("rewinding past {what}: commits {}..={} dropped", seq + 1, newest.1);
        dropped = Some(Dropped { first_seq: seq + 1, last_seq: newest.1, extents });
    }
    let records: Vec<Found> = list.iter().flat_map(|c| c.records.iter().copied()).collect();
    let segments: std::collections::BTreeSet<u32> = records.iter().map(|r| r.segment).collect();
    let mut bad_records = vec![0u64; images.len()];
    let mut bad_labels = vec![0u64; images.len()];
    for (copy, images) in images.iter().enumerate() {
        let Some(images) = images else { continue };
        bad_records[copy] = records
            .iter()
            .filter(|r| !images[r.segment as usize].skips(r.offset, r.header.record_blocks()))
            .filter(|r| {
                !at[&(r.segment, r.offset)].iter().any(|o| {
                    o.copy == copy && o.header.generation == r.header.generation && o.header.seq == r.header.seq
                })
            })
            .count() as u64;
        bad_labels[copy] = segments
            .iter()
            .map(|&segment| {
                (0..LABEL_BLOCKS).filter(|&block| !is_label_of(&images[segment as usize], block, volume_id)).count()
                    as u64
            })
            .sum();
    }
    let copies_differ = bad_records.iter().chain(&bad_labels).any(|&bad| bad > 0);
    // A record recovered from one copy that another holds with the same
    // numbers but other contents: two histories, never a bad copy to
    // rewrite.
    let conflict = records.iter().any(|r| {
        at[&(r.segment, r.offset)].iter().any(|o| {
            o.copy != r.copy
                && (o.header.generation, o.header.seq) == (r.header.generation, r.header.seq)
                && o.header != r.header
        })
    });
    // Every record from the sealed chain's first on, checked whole (its
    // operations are decoded as open replays them); the pages of the
    // sealed chain up to its seal are loaded.
    let mut replay = Vec::with_capacity(records.len());
    let mut sessions = Vec::new();
    let mut lane_zones = Vec::new();
    let mut superblock = None;
    let mut sealing = true;
    let (mut pages_total, mut pages_written) = (0, 0);
    for (index, chain) in list.iter().enumerate() {
        for record in &chain.records {
            let bytes = payload(images, record).expect("verified");
            let seq = record.header.seq;
            let (record_pages, owner_pages) = match record.header.kind {
                Kind::Checkpoint => {
                    let begin = decode_begin(bytes, volume_id, seq, false, false)?;
                    for &session in &begin.superblock.sessions {
                        push_session(&mut sessions, session);
                    }
                    lane_zones = begin.lane_zones;
                    superblock = Some(begin.superblock);
                    pages_total = begin.pages_total;
                    pages_written = 0;
                    (begin.pages, Vec::new())
                }
                Kind::Delta => {
                    let delta = decode_delta(bytes, volume_id, seq, false, false)?;
                    (delta.pages, delta.owner_pages)
                }
            };
            pages_written += record_pages.len() as u64;
            let home = |at: usize| Home {
                segment: record.segment,
                byte: record.offset * BLOCK_SIZE as u64 + (HEADER_BYTES + at) as u64,
                seq,
            };
            let homes = record_pages
                .iter()
                .map(|page| (page.index, home(page.owners_at)))
                .chain(owner_pages.iter().map(|&(index, at)| (index, home(at))))
                .collect();
            // Only the sealed chain's pages up to its seal are loaded.
            let load_pages = index == 0 && sealing;
            if load_pages {
                sealing = !record.header.sealed;
            }
            replay.push(Replay { record: *record, load_pages, homes });
        }
    }
    let other_needed = list.iter().any(|c| c.first().segment != segment);
    let newest_chain = list.last().expect("the newest chain");
    let sealed_at =
        newest_chain.records.iter().find(|r| r.header.sealed).map_or(0, |r| r.offset + r.header.record_blocks());
    Ok(Recovered {
        segment,
        generation,
        end,
        seq,
        next_generation: max_generation + 1,
        lane_zones,
        superblock,
        replay,
        pages_total,
        pages_written: pages_written.min(pages_total),
        other_needed,
        sealed_at,
        copies_differ,
        bad_records,
        bad_labels,
        dropped,
        conflict,
        sessions,
        last_session: last.header.session,
        last_unix_s: last.header.unix_s,
    })
}

/// The newest record header one copy holds, whatever its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tip {
    pub generation: u64,
    pub seq: u64,
    pub session: u64,
}

/// Per copy, its newest header of this volume (`None` for an absent copy
/// or one with none). Reads headers only, so it costs open little: tips
/// of other sessions tell open that the members may have gone on apart
/// (see `Volume::load`). A header whose payload is torn still names the
/// session that wrote it.
pub(crate) fn tips(images: &[Option<[SegmentImage; 2]>], volume_id: u64) -> Vec<Option<Tip>> {
    let mut tips = vec![None; images.len()];
    for (copy, segments) in images.iter().enumerate() {
        let Some(segments) = segments else { continue };
        for image in segments {
            for offset in LABEL_BLOCKS..image.blocks() {
                let Some(h) = image.range(offset, 1).and_then(Header::decode) else { continue };
                if h.volume_id != volume_id {
                    continue;
                }
                let tip = Tip { generation: h.generation, seq: h.seq, session: h.session };
                if tips[copy].is_none_or(|t: Tip| (t.generation, t.seq) < (tip.generation, tip.seq)) {
                    tips[copy] = Some(tip);
                }
            }
        }
    }
    tips
}

/// The highest generation any header of this volume on any copy carries.
pub(crate) fn max_generation(images: &[Option<[SegmentImage; 2]>], volume_id: u64) -> u64 {
    verified_records(images, volume_id).1
}

/// Every record that verifies whole, on every copy and segment, and the
/// highest generation any valid header carries (verified or not).
fn verified_records(images: &[Option<[SegmentImage; 2]>], volume_id: u64) -> (Vec<Found>, u64) {
    let mut found = Vec::new();
    let mut max_generation = 0;
    for (copy, segments) in images.iter().enumerate() {
        let Some(segments) = segments else { continue };
        for (segment, image) in segments.iter().enumerate() {
            for offset in LABEL_BLOCKS..image.blocks() {
                let Some(header) = image.range(offset, 1).and_then(Header::decode) else { continue };
                if header.volume_id != volume_id {
                    continue;
                }
                max_generation = max_generation.max(header.generation);
                let record = Found { copy, segment: segment as u32, offset, header };
                if record_payload(image, &header, offset).is_some() {
                    found.push(record);
                }
            }
        }
    }
    (found, max_generation)
}

/// Where the chain of records at the head of a segment's image ends on
/// this copy: past the last of the records that follow the first one
/// block after block, in its generation with consecutive sequence numbers,
/// as their headers say; and where its last record begins (the tip a
/// second copy is compared at). Only the last one's payload is checked
/// (when it fails, the chain ends before it): a bad payload before it
/// leaves a later record of the chain standing, which recovery takes for a
/// hole unless another copy fills it. `None` when the head holds no header
/// of this volume. How open knows which blocks of a second copy it need
/// not read (see `Volume::load`).
pub(crate) fn chain_end(image: &SegmentImage, volume_id: u64) -> Option<(u64, u64)> {
    let header_at = |offset| image.range(offset, 1).and_then(Header::decode).filter(|h| h.volume_id == volume_id);
    let first = header_at(LABEL_BLOCKS)?;
    let (mut before, mut at, mut last) = (LABEL_BLOCKS, LABEL_BLOCKS, first);
    while let Some(next) = header_at(at + last.record_blocks())
        .filter(|h| h.kind == Kind::Delta && h.generation == first.generation && h.seq == last.seq + 1)
    {
        before = at;
        at += last.record_blocks();
        last = next;
    }
    Some(if record_payload(image, &last, at).is_some() { (at, at + last.record_blocks()) } else { (before, at) })
}

/// The payload of the record whose header is at `offset`, when it is
/// whole and matches its checksum.
fn record_payload<'a>(image: &'a SegmentImage, header: &Header, offset: u64) -> Option<&'a [u8]> {
    payload_bytes(image, header, offset).filter(|payload| crc(payload) == header.payload_crc)
}

/// The payload of the record whose header is at `offset`, when it is
/// whole, unchecked.
fn payload_bytes<'a>(image: &'a SegmentImage, header: &Header, offset: u64) -> Option<&'a [u8]> {
    let total = (HEADER_BYTES as u64).checked_add(header.payload_bytes)?;
    let blocks = total.div_ceil(BLOCK_SIZE as u64);
    let bytes = image.range(offset, blocks)?;
    Some(&bytes[HEADER_BYTES..total as usize])
}

/// The payload of `record`, which `verified_records` found matching its
/// checksum (not checked again: the images do not change).
fn payload<'a>(images: &'a [Option<[SegmentImage; 2]>], record: &Found) -> Option<&'a [u8]> {
    let image = &images[record.copy].as_ref()?[record.segment as usize];
    payload_bytes(image, &record.header, record.offset)
}

/// Whether block `block` of `image` is a label of this volume.
fn is_label_of(image: &SegmentImage, block: u64, volume_id: u64) -> bool {
    matches!(
        image.range(block, 1).map(decode_label),
        Some(LabelRead::Label(label)) if label.volume_id == volume_id
    )
}

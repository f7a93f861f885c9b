//! The journal's wire format: records, operations, checkpoints.
//!
//! A record is a 64-byte header and a payload, padded to whole 4 KiB
//! blocks. The header carries a magic number, the volume ID, the metadata
//! segment's generation, a sequence number, the payload length and crc32c,
//! and its own crc32c. A reader accepts a record only when every one of
//! those checks out and the generation and sequence are the ones it
//! expects next, so a torn tail (some blocks of a record lost in a power
//! cut) and stale records of an older generation both end the log.
//!
//! Payloads are little-endian. A delta carries the operations since the
//! last commit, and pages of the extent table while a checkpoint is being
//! written; a checkpoint record begins one: the volume's shape, how many
//! table pages the checkpoint takes, the operations of its commit, and its
//! first pages. The pages follow a few per delta, and the record that
//! carries the last one is marked sealed in its header (see
//! `allocator/METADATA.md`, step 3). A page's owners are a blob with its
//! own checksum, so that one page's can be read back alone; a delta may
//! carry owner blobs without their pages (step 4, [`crate::owners`]).

use crate::checksum::crc;
use crate::error::{Error, Result};
use crate::table::Entry;
use crate::{ExtentId, Location, Profile, BLOCK_SIZE};

mod codec;
use codec::{corrupt, Reader, Writer};

pub(crate) const HEADER_BYTES: usize = 64;
const MAGIC: u64 = u64::from_le_bytes(*b"ZNVOLLOG");
/// The on-disk format this build writes and reads. Version 1 kept one copy
/// of the journal on the first namespace and had no labels; version 2 had
/// no member states, error counters or missing copies; version 3 kept every
/// extent's checksums in the journal and in memory, whatever the devices;
/// version 4 kept extents in a map and wrote each checkpoint whole in one
/// record; version 5 wrote the extent table whole in one record; version
/// 6 kept every owner in memory, its pages' owners under the record's
/// checksum only; version 7 had no zone checksum areas; version 8 had no
/// sessions (a record could not be told from another side's with the same
/// numbers); version 9 used every block of a zone before its checksum area,
/// so that extents of the largest size left each zone's tail unused and
/// the volume held less than it reported.
pub const FORMAT_VERSION: u8 = 11;
/// Sessions a volume's metadata keeps, newest last (see [`SessionRecord`]).
pub(crate) const MAX_SESSIONS: usize = 16;
const VERSION: u8 = FORMAT_VERSION;
/// The copy a label names on a member that holds no metadata copy.
pub(crate) const NO_COPY: u8 = u8::MAX;

/// The most metadata per 4 KiB block a format offers: eight 512-byte LBAs
/// of 64 bytes, or 4 KiB LBAs with QEMU's largest (and so some drives').
const MAX_TAG_STRIDE: u32 = 512;
const LABEL_MAGIC: u64 = u64::from_le_bytes(*b"ZNVLABEL");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Checkpoint = 1,
    Delta = 2,
}

/// A decoded record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub kind: Kind,
    pub volume_id: u64,
    pub generation: u64,
    pub seq: u64,
    pub payload_bytes: u64,
    pub payload_crc: u32,
    /// The record carries the last page of its checkpoint (or a
    /// checkpoint that needs none): from it on, the checkpoint is whole.
    pub sealed: bool,
    /// The session that wrote it ([`SessionRecord::id`]): two sides of a
    /// mirror that went on apart write the same numbers under different
    /// sessions.
    pub session: u64,
    /// When it was written, in seconds since the Unix epoch (saturated at
    /// `u32::MAX`).
    pub unix_s: u32,
}

impl Header {
    /// Blocks the whole record occupies.
    pub fn record_blocks(&self) -> u64 {
        (HEADER_BYTES as u64).saturating_add(self.payload_bytes).div_ceil(BLOCK_SIZE as u64)
    }

    /// The format version of a record header whose magic and checksum hold,
    /// whatever the version.
    pub fn decode_any_version(bytes: &[u8]) -> Option<u8> {
        let magic = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
        let stored = u32::from_le_bytes(bytes.get(HEADER_BYTES - 4..HEADER_BYTES)?.try_into().ok()?);
        (magic == MAGIC && stored == crc(&bytes[..HEADER_BYTES - 4])).then_some(bytes[9])
    }

    /// Decodes the first 64 bytes of a block; `None` when it is not a
    /// valid header (zeroes, garbage, a torn write).
    pub fn decode(bytes: &[u8]) -> Option<Header> {
        let mut r = Reader::new(bytes.get(..HEADER_BYTES)?);
        let magic = r.u64().ok()?;
        let kind = r.u8().ok()?;
        let version = r.u8().ok()?;
        let flags = r.u8().ok()?;
        r.skip(1).ok()?;
        let unix_s = r.u32().ok()?;
        let volume_id = r.u64().ok()?;
        let generation = r.u64().ok()?;
        let seq = r.u64().ok()?;
        let payload_bytes = r.u64().ok()?;
        let payload_crc = r.u32().ok()?;
        let session = r.u64().ok()?;
        let header_crc = r.u32().ok()?;
        if magic != MAGIC || version != VERSION || header_crc != crc(&bytes[..HEADER_BYTES - 4]) || flags > 1 {
            return None;
        }
        let kind = match kind {
            1 => Kind::Checkpoint,
            2 => Kind::Delta,
            _ => return None,
        };
        let sealed = flags & 1 != 0;
        Some(Header { kind, volume_id, generation, seq, payload_bytes, payload_crc, sealed, session, unix_s })
    }
}

/// Where a record stands in the journal: its kind, generation, sequence
/// number, whether it seals its checkpoint, and the session writing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub kind: Kind,
    pub generation: u64,
    pub seq: u64,
    pub sealed: bool,
    pub session: u64,
}

/// Builds a whole record: header, payload, zero padding to 4 KiB. The
/// header says when it was written.
pub(crate) fn encode_record(stamp: Stamp, volume_id: u64, payload: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(HEADER_BYTES + payload.len() + BLOCK_SIZE);
    body.resize(HEADER_BYTES, 0);
    body.extend_from_slice(payload);
    seal_record(stamp, volume_id, body)
}

/// The record whose payload `body` holds after [`HEADER_BYTES`] of room:
/// the header written there, the end padded to a whole block. What
/// [`encode_record`] makes, with no copy of the payload.
pub(crate) fn seal_record(stamp: Stamp, volume_id: u64, mut body: Vec<u8>) -> Vec<u8> {
    assert!(body.len() >= HEADER_BYTES, "a record's room for its header");
    let Stamp { kind, generation, seq, sealed, session } = stamp;
    let payload = &body[HEADER_BYTES..];
    let mut w = Writer(Vec::with_capacity(HEADER_BYTES));
    w.u64(MAGIC);
    w.u8(kind as u8);
    w.u8(VERSION);
    w.u8(u8::from(sealed));
    w.u8(0);
    w.u32(unix_now_s().min(u64::from(u32::MAX)) as u32);
    w.u64(volume_id);
    w.u64(generation);
    w.u64(seq);
    w.u64(payload.len() as u64);
    w.u32(crc(payload));
    w.u64(session);
    let header_crc = crc(&w.0);
    w.u32(header_crc);
    debug_assert_eq!(w.0.len(), HEADER_BYTES);
    body[..HEADER_BYTES].copy_from_slice(&w.0);
    let padded = body.len().div_ceil(BLOCK_SIZE) * BLOCK_SIZE;
    body.resize(padded, 0);
    body
}

/// Seconds since the Unix epoch, now (0 on a clock before it).
pub(crate) fn unix_now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// One extent as the journal stores it: its blocks and each copy's lane
/// and location, as the extent table holds them (kept inline, so that
/// decoding the log allocates nothing per extent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ExtentRecord {
    pub id: ExtentId,
    pub owner: u64,
    pub entry: Entry,
    /// One per block; empty on a volume whose devices carry block tags.
    pub crcs: Vec<u32>,
}

impl ExtentRecord {
    /// Extent `id` of `owner`, as `entry`.
    pub fn new(id: ExtentId, owner: u64, entry: Entry, crcs: Vec<u32>) -> ExtentRecord {
        ExtentRecord { id, owner, entry, crcs }
    }
}

/// A change to the volume, journaled at commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Add(ExtentRecord),
    Free(ExtentId),
    /// The copy in `lane` now lives at `to`.
    Move {
        id: ExtentId,
        lane: u8,
        to: Location,
    },
    /// Device `device`'s standing and error counters are now `record`.
    Member {
        device: u8,
        record: MemberRecord,
    },
    /// A scrub pass ended with `record`.
    Scrubbed(ScrubRecord),
    /// Zone `zone` of lane `lane` holds the checksums of its first
    /// `blocks` blocks in its checksum area ([`crate::area`]); 0: none
    /// (the zone was reset, or found empty).
    Sealed {
        lane: u8,
        zone: u32,
        blocks: u32,
    },
    /// Extent `id`'s checksums are in the map again: a copy of it went to
    /// a zone whose checksum area is not written yet.
    Crcs {
        id: ExtentId,
        crcs: Vec<u32>,
    },
    /// A new session began: the volume went on without a member.
    Session(SessionRecord),
    /// Extent `id`'s copy in lane `from` now lives in lane `lane`, at
    /// `to`: a distributed rebuild or an evacuation moved it to another
    /// device.
    Relane {
        id: ExtentId,
        from: u8,
        lane: u8,
        to: Location,
    },
}

const OP_ADD: u8 = 1;
const OP_FREE: u8 = 2;
const OP_MOVE: u8 = 3;
const OP_MEMBER: u8 = 4;
const OP_SCRUBBED: u8 = 5;
const OP_SEALED: u8 = 6;
const OP_CRCS: u8 = 7;
const OP_SESSION: u8 = 8;
const OP_RELANE: u8 = 9;

/// A stretch of a volume's history: from format, or from the moment the
/// volume went on without a member (a degraded open, a member given up
/// while running), until the next such moment. Every record carries its
/// session's ID, and the metadata keeps the last [`MAX_SESSIONS`], newest
/// last: so two sides of a mirror that each went on alone are told apart
/// at open, whatever numbers their records carry (mdraid's event counts
/// and ZFS's txgs order one history; they cannot tell two apart).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SessionRecord {
    /// Random, never 0.
    pub id: u64,
    /// The device place that went on (`u8::MAX` at format: every member).
    pub place: u8,
    /// The session it parted from (0 at format).
    pub parent: u64,
    /// The last commit of the parent this side holds: its generation.
    pub parted_generation: u64,
    /// And its sequence number.
    pub parted_seq: u64,
    /// When it began, in seconds since the Unix epoch.
    pub began_unix_s: u64,
}

impl SessionRecord {
    /// A new session, going on from `parent` after its commit
    /// (`generation`, `seq`), on device place `place`.
    pub(crate) fn new(place: u8, parent: u64, generation: u64, seq: u64) -> SessionRecord {
        SessionRecord {
            id: random_u64(),
            place,
            parent,
            parted_generation: generation,
            parted_seq: seq,
            began_unix_s: unix_now_s(),
        }
    }
}

/// Adds `record` to `sessions` unless it is there, keeping the newest
/// [`MAX_SESSIONS`].
pub(crate) fn push_session(sessions: &mut Vec<SessionRecord>, record: SessionRecord) {
    if sessions.iter().any(|s| s.id == record.id) {
        return;
    }
    sessions.push(record);
    if sessions.len() > MAX_SESSIONS {
        sessions.remove(0);
    }
}

/// A random non-zero `u64` (volume and session IDs): the process's hasher
/// keys, the time and the process ID, mixed.
pub(crate) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    hasher.write_u32(std::process::id());
    hasher.finish() | 1
}

/// What the metadata keeps of one member device: whether the volume gave
/// it up (it went away or passed its error threshold), and its error
/// counters, which survive restarts (btrfs keeps the same per device in
/// its device stats items).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemberRecord {
    /// Which device holds the place: random, drawn at format and at each
    /// replace, and kept in the labels the device carries, so that a device
    /// the place was taken from is never taken for its member.
    pub id: u64,
    /// The volume stopped using the device; its copies are stale.
    pub failed: bool,
    /// Reads that failed (media errors, timeouts, resets).
    pub read_errors: u64,
    /// Writes that failed.
    pub write_errors: u64,
    /// Blocks read whose checksum did not match.
    pub checksum_errors: u64,
}

/// What the metadata keeps of the last scrub pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ScrubRecord {
    /// When it ended, in seconds since the Unix epoch.
    pub finished_unix_s: u64,
    /// Bytes it read and verified.
    pub bytes_verified: u64,
    /// Bad blocks it found (checksum mismatches and failed reads), and bad
    /// metadata records and labels on some copy.
    pub bad_blocks: u64,
    /// Blocks it repaired from another copy, and metadata records and
    /// labels it rewrote.
    pub repaired_blocks: u64,
    /// Blocks with no good copy.
    pub uncorrectable_blocks: u64,
    /// Every byte was read and verified, and nothing bad is left.
    pub clean: bool,
}

/// What a checkpoint records about the volume's shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Superblock {
    pub profile: Profile,
    pub streams: u8,
    pub software_zone_blocks: u32,
    pub meta_zones_per_segment: u32,
    pub reserve_zones: u32,
    pub max_extent_blocks: u32,
    pub finish_threshold_blocks: u32,
    /// Per device: NSID, LBA size, capacity in LBAs, zoned.
    pub devices: Vec<(u32, u32, u64, bool)>,
    /// Per metadata copy, the first zone of each of its two segments: where
    /// format put them, or where a segment moved when a zone wore out.
    pub meta_segments: Vec<[u32; 2]>,
    /// Blocks of every metadata segment the journal uses: the smallest
    /// over the copies when the volume was formatted, kept so that a copy
    /// away (or a replacement) never changes how far the log may grow.
    pub meta_segment_blocks: u64,
    /// Per device: its standing and error counters.
    pub members: Vec<MemberRecord>,
    /// The last scrub pass, if any.
    pub last_scrub: Option<ScrubRecord>,
    /// Metadata bytes per 4 KiB block that carry each block's tag on every
    /// device ([`crate::tags`]); 0 when checksums live in the extent map
    /// (and so in the journal and in memory).
    pub tag_stride: u32,
    /// How the extent table packs a location: the offset in this many low
    /// bits, the zone above (see [`crate::table::LocationBits`]), chosen
    /// at format from the largest zone.
    pub location_offset_bits: u8,
    /// Each data zone keeps its blocks' checksums in an area after its
    /// data ([`crate::area`]) rather than in the extent map (then
    /// `tag_stride` is 0).
    pub checksum_area: bool,
    /// The last sessions, newest last: the current one, and the ones this
    /// history went on from.
    pub sessions: Vec<SessionRecord>,
    /// Each data zone takes data in a multiple of this many blocks (a
    /// power of two), so that extents of any power-of-two size up to it
    /// fill the zone exactly (see [`crate::volume::zone_data_blocks`]).
    pub data_unit_blocks: u32,
}

/// One page of the extent table as a checkpoint carries it
/// ([`crate::table::PAGE_SLOTS`] records): each slot's record (its free
/// slots with no link), its owners' blob, and the checksums of the extents
/// on it that keep them in the map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PageImage {
    pub index: u64,
    pub records: Vec<[u64; crate::table::COPIES_MAX]>,
    /// Each slot's owner, when encoding; empty when decoded (open keeps
    /// owners on the device: `owners_at` says where).
    pub owners: Vec<u64>,
    /// (slot within the page, one checksum per block).
    pub mapped: Vec<(u16, Vec<u32>)>,
    /// Decoded: where the owners' blob begins in the record's payload.
    pub owners_at: usize,
}

/// Bytes of a page's owners as a record carries them: one `u64` per slot,
/// then the crc32c of the volume ID, the record's sequence number, the
/// page index and those owners. The sequence number makes a blob left
/// from an older record at the same place fail.
pub(crate) const OWNER_BLOB_BYTES: usize = crate::table::PAGE_SLOTS * 8 + 4;

fn owner_blob_crc(volume_id: u64, seq: u64, index: u64, owners: &[u8]) -> u32 {
    let mut prefix = [0u8; 24];
    prefix[..8].copy_from_slice(&volume_id.to_le_bytes());
    prefix[8..16].copy_from_slice(&seq.to_le_bytes());
    prefix[16..].copy_from_slice(&index.to_le_bytes());
    crate::checksum::crc_append(crc(&prefix), owners)
}

/// The owners of page `index` from the blob `bytes` (at least
/// [`OWNER_BLOB_BYTES`]) of record `seq`, when its checksum holds.
pub(crate) fn decode_owner_blob(bytes: &[u8], volume_id: u64, seq: u64, index: u64) -> Option<Vec<u64>> {
    let owners = bytes.get(..OWNER_BLOB_BYTES - 4)?;
    let stored = u32::from_le_bytes(bytes.get(OWNER_BLOB_BYTES - 4..OWNER_BLOB_BYTES)?.try_into().ok()?);
    (stored == owner_blob_crc(volume_id, seq, index, owners))
        .then(|| owners.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect())
}

/// Pages or owner blobs encoded for a record, and where each page's blob
/// begins in those bytes.
#[derive(Debug, Default)]
pub(crate) struct Encoded {
    pub bytes: Vec<u8>,
    pub blobs: Vec<(u64, usize)>,
}

/// The record that begins a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Begin {
    pub superblock: Superblock,
    /// Per lane, its zones (what a lane on an absent device keeps).
    pub lane_zones: Vec<u32>,
    /// Pages of the extent table the checkpoint writes: every page in use
    /// when it began.
    pub pages_total: u64,
    pub ops: Vec<Op>,
    pub pages: Vec<PageImage>,
}

/// A delta: a commit's operations, the checkpoint pages that came with
/// it, and owner blobs written without their pages.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Delta {
    pub ops: Vec<Op>,
    pub pages: Vec<PageImage>,
    /// (page index, where its blob begins in the payload).
    pub owner_pages: Vec<(u64, usize)>,
}

/// A device's label: the volume it belongs to, its place in it, and the
/// volume's geometry, so that open finds devices by label rather than by
/// the order it is given them, and knows the software zone size without
/// being told. One 4 KiB block, twice at the head of every metadata segment
/// of every copy (ZFS keeps four per device, btrfs a superblock copy per
/// device with its fsid and devid).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Label {
    pub volume_id: u64,
    /// The device's index in the volume: lane 0's device is 0, a mirror's
    /// second device is 1.
    pub device_index: u8,
    /// The metadata copy and segment this label heads ([`NO_COPY`]: the
    /// label of a member that holds no metadata copy).
    pub copy: u8,
    pub segment: u8,
    /// Bumped whenever labels are rewritten with other contents.
    pub generation: u64,
    pub superblock: Superblock,
}

/// What a block holds, read as a label.
#[derive(Clone, Debug, PartialEq, Eq)]
// Read a few times per open and matched at once: its size costs nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum LabelRead {
    Label(Label),
    /// No label (zeroes, data, garbage, or a damaged label).
    None,
    /// A label of a newer format than this build reads.
    Newer(u8),
    /// The first block of a volume of an older format (version 1 had no
    /// labels and began with a checkpoint).
    Older(u8),
}

pub(crate) fn encode_label(label: &Label) -> Vec<u8> {
    let mut w = Writer::default();
    w.u64(LABEL_MAGIC);
    w.u8(FORMAT_VERSION);
    w.bytes(&[0; 7]);
    w.u64(label.volume_id);
    w.u8(label.device_index);
    w.u8(label.copy);
    w.u8(label.segment);
    w.bytes(&[0; 5]);
    w.u64(label.generation);
    w.superblock(&label.superblock);
    assert!(w.0.len() <= BLOCK_SIZE - 4, "a label fits one block");
    w.0.resize(BLOCK_SIZE - 4, 0);
    let label_crc = crc(&w.0);
    w.u32(label_crc);
    w.0
}

pub(crate) fn decode_label(block: &[u8]) -> LabelRead {
    if block.len() < BLOCK_SIZE {
        return LabelRead::None;
    }
    let block = &block[..BLOCK_SIZE];
    let magic = u64::from_le_bytes(block[..8].try_into().expect("8 bytes"));
    if magic == MAGIC {
        // A journal record in the first block: a version-1 volume.
        return match Header::decode_any_version(block) {
            Some(version) if version < FORMAT_VERSION => LabelRead::Older(version),
            _ => LabelRead::None,
        };
    }
    let stored = u32::from_le_bytes(block[BLOCK_SIZE - 4..].try_into().expect("4 bytes"));
    if magic != LABEL_MAGIC || stored != crc(&block[..BLOCK_SIZE - 4]) {
        return LabelRead::None;
    }
    let version = block[8];
    if version > FORMAT_VERSION {
        return LabelRead::Newer(version);
    }
    let mut r = Reader::new(&block[16..BLOCK_SIZE - 4]);
    let decoded = (|| -> Result<Label> {
        let volume_id = r.u64()?;
        let device_index = r.u8()?;
        let copy = r.u8()?;
        let segment = r.u8()?;
        r.skip(5)?;
        let generation = r.u64()?;
        let superblock = r.superblock()?;
        Ok(Label { volume_id, device_index, copy, segment, generation, superblock })
    })();
    match decoded {
        Ok(label) if version == FORMAT_VERSION => LabelRead::Label(label),
        Ok(_) => LabelRead::Older(version),
        Err(_) => LabelRead::None,
    }
}

pub(crate) fn encode_ops(ops: &[Op]) -> Vec<u8> {
    let mut w = Writer::default();
    write_ops(&mut w, ops, |_| None);
    w.0
}

/// [`encode_ops`], appended to `w`. An addition that carries no checksums
/// takes those `map` has for its extent, when they are one per block (a
/// write's are in the volume's map, not copied into its operation).
fn write_ops<'m>(w: &mut Writer, ops: &[Op], map: impl Fn(ExtentId) -> Option<&'m [u32]>) {
    w.u32(ops.len() as u32);
    for op in ops {
        match op {
            Op::Add(extent) if extent.crcs.is_empty() => {
                w.u8(OP_ADD);
                let mapped = map(extent.id).filter(|crcs| crcs.len() == extent.entry.blocks as usize);
                w.extent_with(extent, mapped.unwrap_or(&[]));
            }
            Op::Add(extent) => {
                w.u8(OP_ADD);
                w.extent(extent);
            }
            Op::Free(id) => {
                w.u8(OP_FREE);
                w.u64(*id);
            }
            Op::Move { id, lane, to } => {
                w.u8(OP_MOVE);
                w.u64(*id);
                w.u8(*lane);
                w.location(*to);
            }
            Op::Member { device, record } => {
                w.u8(OP_MEMBER);
                w.u8(*device);
                w.member(record);
            }
            Op::Scrubbed(record) => {
                w.u8(OP_SCRUBBED);
                w.scrub(record);
            }
            Op::Sealed { lane, zone, blocks } => {
                w.u8(OP_SEALED);
                w.u8(*lane);
                w.u32(*zone);
                w.u32(*blocks);
            }
            Op::Crcs { id, crcs } => {
                w.u8(OP_CRCS);
                w.u64(*id);
                w.u32(crcs.len() as u32);
                crcs.iter().for_each(|&crc| w.u32(crc));
            }
            Op::Session(record) => {
                w.u8(OP_SESSION);
                w.session(record);
            }
            Op::Relane { id, from, lane, to } => {
                w.u8(OP_RELANE);
                w.u64(*id);
                w.u8(*from);
                w.u8(*lane);
                w.location(*to);
            }
        }
    }
}

/// Two lists of operations as [`encode_ops`] made them, as one: `first`'s
/// then `then`'s.
pub(crate) fn concat_ops(first: &[u8], then: &[u8]) -> Vec<u8> {
    let count = |ops: &[u8]| u32::from_le_bytes(ops[..4].try_into().expect("a count"));
    let mut out = Vec::with_capacity(first.len() + then.len());
    out.extend_from_slice(&(count(first) + count(then)).to_le_bytes());
    out.extend_from_slice(&first[4..]);
    out.extend_from_slice(&then[4..]);
    out
}

pub(crate) fn decode_ops(payload: &[u8]) -> Result<Vec<Op>> {
    let mut r = Reader::new(payload);
    let count = r.u32()? as usize;
    let mut ops = Vec::with_capacity(count.min(payload.len()));
    for _ in 0..count {
        let op = match r.u8()? {
            OP_ADD => Op::Add(r.extent()?),
            OP_FREE => Op::Free(r.u64()?),
            OP_MOVE => Op::Move { id: r.u64()?, lane: r.u8()?, to: r.location()? },
            OP_MEMBER => Op::Member { device: r.u8()?, record: r.member()? },
            OP_SCRUBBED => Op::Scrubbed(r.scrub()?),
            OP_SEALED => Op::Sealed { lane: r.u8()?, zone: r.u32()?, blocks: r.u32()? },
            OP_CRCS => {
                let id = r.u64()?;
                let count = r.u32()?;
                if count == 0 || count > crate::table::MAX_BLOCKS {
                    return Err(corrupt(format!("{count} checksums for extent {id}")));
                }
                Op::Crcs { id, crcs: (0..count).map(|_| r.u32()).collect::<Result<_>>()? }
            }
            OP_SESSION => Op::Session(r.session()?),
            OP_RELANE => Op::Relane { id: r.u64()?, from: r.u8()?, lane: r.u8()?, to: r.location()? },
            other => return Err(corrupt(format!("unknown journal operation {other}"))),
        };
        ops.push(op);
    }
    r.finish()?;
    Ok(ops)
}

/// The payload of a record that begins a checkpoint. `ops` is
/// [`encode_ops`]'s output, `pages` [`encode_pages`]'.
pub(crate) fn encode_begin(
    superblock: &Superblock,
    lane_zones: &[u32],
    pages_total: u64,
    ops: &[u8],
    pages: &[u8],
) -> Vec<u8> {
    let mut w = Writer::default();
    w.superblock(superblock);
    w.u8(lane_zones.len() as u8);
    for &zones in lane_zones {
        w.u32(zones);
    }
    w.u64(pages_total);
    w.u64(ops.len() as u64);
    w.bytes(ops);
    w.bytes(pages);
    w.0
}

/// A checkpoint's first record's payload, checking its blobs against
/// record `seq`; its pages' records only with `keep_pages`, its operations
/// only with `keep_ops` (see [`decode_record_ops`]).
pub(crate) fn decode_begin(
    payload: &[u8],
    volume_id: u64,
    seq: u64,
    keep_pages: bool,
    keep_ops: bool,
) -> Result<Begin> {
    let mut r = Reader::new(payload);
    let superblock = r.superblock()?;
    let lanes = r.u8()?;
    if !(1..=crate::chooser::MAX_DEVICES).contains(&usize::from(lanes)) {
        return Err(corrupt(format!("a checkpoint of {lanes} lanes")));
    }
    let lane_zones = (0..lanes).map(|_| r.u32()).collect::<Result<Vec<u32>>>()?;
    let pages_total = r.u64()?;
    let ops = r.ops(keep_ops)?;
    let pages = r.pages(volume_id, seq, keep_pages)?;
    r.finish()?;
    Ok(Begin { superblock, lane_zones, pages_total, ops, pages })
}

/// The payload of a delta: `ops` as [`encode_ops`] made it, `pages` as
/// [`encode_pages`] did, `owners` as [`encode_owner_pages`] did. The
/// pages begin at `8 + ops.len()`, the owner blobs right after them.
/// A delta record being built in place (see [`seal_record`]): room for
/// the header, then the payload [`encode_delta`] makes, its operations
/// encoded straight into it and its pages and owner blobs appended, so
/// that a commit's bytes are copied once before the device's buffer.
pub(crate) struct DeltaBody {
    w: Writer,
}

impl DeltaBody {
    /// The body with the operations `ops`, additions without checksums
    /// taking `map`'s (see [`write_ops`]).
    pub fn new<'m>(ops: &[Op], map: impl Fn(ExtentId) -> Option<&'m [u32]>) -> DeltaBody {
        let mut w = Writer(Vec::with_capacity(HEADER_BYTES + 8 + 64 * ops.len() + BLOCK_SIZE));
        w.0.resize(HEADER_BYTES + 8, 0);
        write_ops(&mut w, ops, map);
        let ops_bytes = (w.0.len() - HEADER_BYTES - 8) as u64;
        w.0[HEADER_BYTES..HEADER_BYTES + 8].copy_from_slice(&ops_bytes.to_le_bytes());
        DeltaBody { w }
    }

    /// The operations, encoded (as [`encode_ops`] makes them).
    pub fn ops(&self) -> &[u8] {
        &self.w.0[HEADER_BYTES + 8..]
    }

    /// Appends the pages, then the owner blobs: the record's body, for
    /// [`seal_record`].
    pub fn finish(mut self, pages: &[u8], owners: &[u8]) -> Vec<u8> {
        self.w.bytes(pages);
        self.w.bytes(owners);
        self.w.0
    }
}

pub(crate) fn encode_delta(ops: &[u8], pages: &[u8], owners: &[u8]) -> Vec<u8> {
    let mut w = Writer::default();
    w.u64(ops.len() as u64);
    w.bytes(ops);
    w.bytes(pages);
    w.bytes(owners);
    w.0
}

/// A delta's payload, checking its blobs against record `seq`; its
/// pages' records only with `keep_pages`, its operations only with
/// `keep_ops`.
pub(crate) fn decode_delta(
    payload: &[u8],
    volume_id: u64,
    seq: u64,
    keep_pages: bool,
    keep_ops: bool,
) -> Result<Delta> {
    let mut r = Reader::new(payload);
    let ops = r.ops(keep_ops)?;
    let pages = r.pages(volume_id, seq, keep_pages)?;
    let count = r.u32()? as usize;
    let mut owner_pages = Vec::with_capacity(count.min(payload.len() / OWNER_BLOB_BYTES + 1));
    for _ in 0..count {
        let index = r.u64()?;
        owner_pages.push((index, r.blob(volume_id, seq, index)?));
    }
    r.finish()?;
    Ok(Delta { ops, pages, owner_pages })
}

/// The operations of a record of `kind` whose payload its checksum
/// verified, and nothing else of it: what open replays, a record at a
/// time, once recovery has chosen the records (its pages and blobs were
/// checked then).
pub(crate) fn decode_record_ops(kind: Kind, payload: &[u8]) -> Result<Vec<Op>> {
    let mut r = Reader::new(payload);
    if kind == Kind::Checkpoint {
        r.superblock()?;
        for _ in 0..r.u8()? {
            r.u32()?;
        }
        r.u64()?;
    }
    r.ops(true)
}

/// Checkpoint pages, as record `seq` of volume `volume_id` carries them.
pub(crate) fn encode_pages(pages: &[PageImage], volume_id: u64, seq: u64) -> Encoded {
    let mut w = Writer::default();
    let mut blobs = Vec::with_capacity(pages.len());
    w.u32(pages.len() as u32);
    for page in pages {
        debug_assert_eq!(page.records.len(), crate::table::PAGE_SLOTS);
        w.u64(page.index);
        for record in &page.records {
            for &word in record {
                w.u64(word);
            }
        }
        blobs.push((page.index, w.0.len()));
        w.blob(volume_id, seq, page.index, &page.owners);
        w.u32(page.mapped.len() as u32);
        for (slot, crcs) in &page.mapped {
            w.u16(*slot);
            w.u32(crcs.len() as u32);
            for &c in crcs {
                w.u32(c);
            }
        }
    }
    Encoded { bytes: w.0, blobs }
}

/// Owner blobs without their pages, as record `seq` carries them: a count,
/// then each page's index and blob.
pub(crate) fn encode_owner_pages(pages: &[(u64, Vec<u64>)], volume_id: u64, seq: u64) -> Encoded {
    let mut w = Writer::default();
    let mut blobs = Vec::with_capacity(pages.len());
    w.u32(pages.len() as u32);
    for (index, owners) in pages {
        w.u64(*index);
        blobs.push((*index, w.0.len()));
        w.blob(volume_id, seq, *index, owners);
    }
    Encoded { bytes: w.0, blobs }
}

/// Bytes [`encode_pages`] takes for one page without mapped checksums.
pub(crate) const PAGE_BYTES: usize = 8 + crate::table::PAGE_SLOTS * RECORD_BYTES + OWNER_BLOB_BYTES + 4;

/// Bytes of one slot's record in a checkpoint page.
pub(crate) const RECORD_BYTES: usize = 8 * crate::table::COPIES_MAX;

#[cfg(test)]
mod tests {
    use super::*;

    fn extent(id: u64) -> ExtentRecord {
        let entry = Entry::new(2, &[(0, Location { zone: 3, offset: 4 }), (2, Location { zone: 5, offset: 6 })]);
        ExtentRecord::new(id, 99, entry, vec![7, 8])
    }

    #[test]
    fn a_delta_built_in_place_is_the_record_encoded_from_its_parts() {
        let ops = vec![Op::Add(extent(1)), Op::Free(3), Op::Add(extent(9))];
        let (volume_id, seq) = (42, 17);
        let page = PageImage {
            index: 2,
            records: (0..crate::table::PAGE_SLOTS as u64).map(|i| [i, i * 5, i << 50]).collect(),
            owners: (0..crate::table::PAGE_SLOTS as u64).collect(),
            mapped: vec![(7, vec![4, 5])],
            owners_at: 0,
        };
        let pages = encode_pages(&[page], volume_id, seq).bytes;
        let owners = b"owner blobs".to_vec();
        let payload = encode_delta(&encode_ops(&ops), &pages, &owners);
        let body = DeltaBody::new(&ops, |_| None);
        assert_eq!(body.ops(), &encode_ops(&ops)[..]);
        let body = body.finish(&pages, &owners);
        assert_eq!(&body[HEADER_BYTES..], &payload[..]);
        let stamp = Stamp { kind: Kind::Delta, generation: 3, seq, sealed: true, session: 5 };
        let (built, encoded) = (seal_record(stamp, volume_id, body), encode_record(stamp, volume_id, &payload));
        assert_eq!(built.len(), encoded.len());
        let (a, b) = (Header::decode(&built).unwrap(), Header::decode(&encoded).unwrap());
        // The same but for the second each was written in.
        assert_eq!(Header { unix_s: 0, ..a }, Header { unix_s: 0, ..b });
        assert_eq!(built[HEADER_BYTES..], encoded[HEADER_BYTES..]);
        // An empty delta too.
        let empty = DeltaBody::new(&[], |_| None).finish(&[], &[]);
        assert_eq!(&empty[HEADER_BYTES..], &encode_delta(&encode_ops(&[]), &[], &[])[..]);
    }

    #[test]
    fn records_round_trip_and_pad_to_blocks() {
        let ops =
            vec![Op::Add(extent(1)), Op::Free(2), Op::Move { id: 1, lane: 1, to: Location { zone: 9, offset: 0 } }];
        let payload = encode_ops(&ops);
        let stamp = Stamp { kind: Kind::Delta, generation: 3, seq: 17, sealed: true, session: 5 };
        let record = encode_record(stamp, 42, &payload);
        assert_eq!(record.len() % BLOCK_SIZE, 0);
        let header = Header::decode(&record).unwrap();
        assert_eq!(header.kind, Kind::Delta);
        assert_eq!(
            (header.volume_id, header.generation, header.seq, header.sealed, header.session),
            (42, 3, 17, true, 5)
        );
        assert_eq!(header.record_blocks(), 1);
        let body = &record[HEADER_BYTES..HEADER_BYTES + header.payload_bytes as usize];
        assert_eq!(crc(body), header.payload_crc);
        assert_eq!(decode_ops(body).unwrap(), ops);
    }

    #[test]
    fn any_flipped_header_bit_is_rejected() {
        let stamp = Stamp { kind: Kind::Checkpoint, generation: 1, seq: 1, sealed: false, session: 9 };
        let record = encode_record(stamp, 1, b"payload");
        for bit in 0..HEADER_BYTES * 8 {
            let mut copy = record.clone();
            copy[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(Header::decode(&copy), None, "bit {bit}");
        }
        assert_eq!(Header::decode(&[0u8; 64]), None);
    }

    #[test]
    fn checkpoints_round_trip() {
        let page = |index: u64| PageImage {
            index,
            records: (0..crate::table::PAGE_SLOTS as u64).map(|i| [i, i * 3, i << 52]).collect(),
            owners: (0..crate::table::PAGE_SLOTS as u64).map(|i| i * 7 + index).collect(),
            mapped: vec![(3, vec![1, 2, 3]), (339, vec![9])],
            owners_at: 0,
        };
        let begin = Begin {
            superblock: Superblock {
                profile: Profile::Mirror,
                streams: 3,
                software_zone_blocks: 0,
                meta_zones_per_segment: 2,
                reserve_zones: 1,
                max_extent_blocks: 128,
                finish_threshold_blocks: 0,
                devices: vec![(1, 512, 1 << 20, true), (1, 4096, 1 << 17, false)],
                meta_segments: vec![[0, 2], [0, 9]],
                meta_segment_blocks: 4096,
                members: vec![
                    MemberRecord::default(),
                    MemberRecord { id: 77, failed: true, read_errors: 3, write_errors: 1, checksum_errors: 9 },
                ],
                last_scrub: Some(ScrubRecord {
                    finished_unix_s: 1_800_000_000,
                    bytes_verified: 1 << 30,
                    bad_blocks: 2,
                    repaired_blocks: 2,
                    uncorrectable_blocks: 0,
                    clean: true,
                }),
                tag_stride: 64,
                location_offset_bits: 16,
                checksum_area: false,
                data_unit_blocks: 1,
                sessions: vec![SessionRecord::new(u8::MAX, 0, 0, 0), SessionRecord::new(1, 3, 2, 40)],
            },
            lane_zones: vec![64, 32],
            pages_total: 9,
            ops: vec![Op::Add(extent(1)), Op::Free(3)],
            pages: vec![page(0), page(1)],
        };
        let (volume_id, seq) = (42, 17);
        let encoded = encode_pages(&begin.pages, volume_id, seq);
        let payload = encode_begin(
            &begin.superblock,
            &begin.lane_zones,
            begin.pages_total,
            &encode_ops(&begin.ops),
            &encode_pages(&begin.pages, volume_id, seq).bytes,
        );
        // Decoded pages leave their owners on the device, and say where.
        let decoded = decode_begin(&payload, volume_id, seq, true, true).unwrap();
        let pages_at = payload.len() - encoded.bytes.len();
        for ((page, original), (index, blob)) in decoded.pages.iter().zip(&begin.pages).zip(&encoded.blobs) {
            assert_eq!((page.index, page.owners_at), (*index, pages_at + blob));
            assert_eq!(
                decode_owner_blob(&payload[page.owners_at..], volume_id, seq, page.index).unwrap(),
                original.owners
            );
            assert_eq!(decode_owner_blob(&payload[page.owners_at..], volume_id, seq + 1, page.index), None, "older");
            assert_eq!(
                decode_owner_blob(&payload[page.owners_at..], volume_id, seq, page.index + 1),
                None,
                "other page"
            );
        }
        let strip = |pages: &[PageImage]| -> Vec<PageImage> {
            pages.iter().map(|p| PageImage { owners: Vec::new(), owners_at: 0, ..p.clone() }).collect()
        };
        // Decoded without keeping the pages: where each blob lies, no more.
        let light = decode_begin(&payload, volume_id, seq, false, true).unwrap();
        assert_eq!(light.ops, decoded.ops);
        for (light, page) in light.pages.iter().zip(&decoded.pages) {
            assert_eq!((light.index, light.owners_at), (page.index, page.owners_at));
            assert!(light.records.is_empty() && light.mapped.is_empty());
        }
        assert_eq!(Begin { pages: strip(&decoded.pages), ..decoded }, Begin { pages: strip(&begin.pages), ..begin });
        let ops = encode_ops(&[Op::Free(1)]);
        let owners = vec![(5, (0..crate::table::PAGE_SLOTS as u64).map(|i| i ^ 0x55).collect::<Vec<u64>>())];
        let owner_blobs = encode_owner_pages(&owners, volume_id, seq);
        let payload = encode_delta(&ops, &encode_pages(&[page(2)], volume_id, seq).bytes, &owner_blobs.bytes);
        let delta = decode_delta(&payload, volume_id, seq, true, true).unwrap();
        assert_eq!(delta.ops, vec![Op::Free(1)]);
        assert_eq!(strip(&delta.pages), strip(&[page(2)]));
        let owners_at = payload.len() - owner_blobs.bytes.len() + owner_blobs.blobs[0].1;
        assert_eq!(delta.owner_pages, vec![(5, owners_at)]);
        assert_eq!(decode_owner_blob(&payload[owners_at..], volume_id, seq, 5).unwrap(), owners[0].1);
        assert!(decode_delta(&payload, volume_id, seq + 1, true, true).is_err(), "blobs of another record");
        let bare = encode_pages(&[PageImage { mapped: Vec::new(), ..page(0) }], volume_id, seq);
        assert_eq!(bare.bytes.len(), 4 + PAGE_BYTES);
        for len in 0..payload.len() {
            assert!(decode_delta(&payload[..len], volume_id, seq, true, true).is_err(), "length {len}");
        }
    }

    #[test]
    fn member_and_scrub_ops_and_missing_copies_round_trip() {
        let mut missing = extent(7);
        missing.entry.set(2, Location::MISSING);
        let ops = vec![
            Op::Member {
                device: 1,
                record: MemberRecord { id: 5, failed: true, read_errors: 1, write_errors: 2, checksum_errors: 3 },
            },
            Op::Scrubbed(ScrubRecord { finished_unix_s: 5, clean: false, ..ScrubRecord::default() }),
            Op::Add(missing),
            Op::Move { id: 7, lane: 0, to: Location::MISSING },
            Op::Relane { id: 7, from: 2, lane: 9, to: Location { zone: 4, offset: 16 } },
            Op::Session(SessionRecord::new(0, 11, 4, 99)),
        ];
        assert_eq!(decode_ops(&encode_ops(&ops)).unwrap(), ops);
    }

    #[test]
    fn truncated_payloads_are_typed_errors() {
        let payload = encode_ops(&[Op::Add(extent(1))]);
        for len in 0..payload.len() {
            assert!(matches!(decode_ops(&payload[..len]), Err(Error::Corrupt(_))), "length {len}");
        }
    }
}

//! The journal's fields as bytes: a writer and a reader of little-endian
//! primitives and of the structures records carry (superblock, members,
//! extents, owner blobs). The reader refuses, as [`Error::Corrupt`], any
//! field that runs past its record or holds a value no writer makes.

use super::*;
use crate::table::{COPIES_MAX, LANES_MAX};

pub(super) fn corrupt(why: String) -> Error {
    Error::Corrupt(why)
}

#[derive(Default)]
pub(super) struct Writer(pub(super) Vec<u8>);

impl Writer {
    pub(super) fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub(super) fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// Every value of `v`, little-endian, in one pass (a 256 KiB extent
    /// has 64 checksums; one growth check for them, not one each).
    pub(super) fn u32s(&mut self, v: &[u32]) {
        let start = self.0.len();
        self.0.resize(start + 4 * v.len(), 0);
        for (out, value) in self.0[start..].chunks_exact_mut(4).zip(v) {
            out.copy_from_slice(&value.to_le_bytes());
        }
    }
    pub(super) fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn bytes(&mut self, v: &[u8]) {
        self.0.extend_from_slice(v);
    }
    pub(super) fn blob(&mut self, volume_id: u64, seq: u64, index: u64, owners: &[u64]) {
        assert_eq!(owners.len(), crate::table::PAGE_SLOTS, "a page's owners");
        let start = self.0.len();
        for &owner in owners {
            self.u64(owner);
        }
        let blob_crc = owner_blob_crc(volume_id, seq, index, &self.0[start..]);
        self.u32(blob_crc);
    }
    pub(super) fn location(&mut self, l: Location) {
        self.u32(l.zone);
        self.u32(l.offset);
    }
    pub(super) fn superblock(&mut self, s: &Superblock) {
        self.u8(s.profile as u8);
        self.u8(s.streams);
        self.u32(s.software_zone_blocks);
        self.u32(s.meta_zones_per_segment);
        self.u32(s.reserve_zones);
        self.u32(s.max_extent_blocks);
        self.u32(s.finish_threshold_blocks);
        self.u8(s.devices.len() as u8);
        for &(nsid, lba_size, capacity, zoned) in &s.devices {
            self.u32(nsid);
            self.u32(lba_size);
            self.u64(capacity);
            self.u8(u8::from(zoned));
        }
        self.u8(s.meta_segments.len() as u8);
        for segments in &s.meta_segments {
            self.u32(segments[0]);
            self.u32(segments[1]);
        }
        self.u64(s.meta_segment_blocks);
        debug_assert_eq!(s.members.len(), s.devices.len());
        for member in &s.members {
            self.member(member);
        }
        match &s.last_scrub {
            Some(record) => {
                self.u8(1);
                self.scrub(record);
            }
            None => self.u8(0),
        }
        self.u32(s.tag_stride);
        self.u8(s.location_offset_bits);
        self.u8(u8::from(s.checksum_area));
        debug_assert!(s.sessions.len() <= MAX_SESSIONS);
        self.u8(s.sessions.len() as u8);
        for session in &s.sessions {
            self.session(session);
        }
        self.u32(s.data_unit_blocks);
    }
    pub(super) fn session(&mut self, s: &SessionRecord) {
        self.u64(s.id);
        self.u8(s.place);
        self.u64(s.parent);
        self.u64(s.parted_generation);
        self.u64(s.parted_seq);
        self.u64(s.began_unix_s);
    }
    pub(super) fn member(&mut self, m: &MemberRecord) {
        self.u64(m.id);
        self.u8(u8::from(m.failed));
        self.u64(m.read_errors);
        self.u64(m.write_errors);
        self.u64(m.checksum_errors);
    }
    pub(super) fn scrub(&mut self, s: &ScrubRecord) {
        self.u64(s.finished_unix_s);
        self.u64(s.bytes_verified);
        self.u64(s.bad_blocks);
        self.u64(s.repaired_blocks);
        self.u64(s.uncorrectable_blocks);
        self.u8(u8::from(s.clean));
    }
    pub(super) fn extent(&mut self, e: &ExtentRecord) {
        self.extent_with(e, &e.crcs);
    }

    /// `e` with the checksums `crcs` (its own, or the map's).
    pub(super) fn extent_with(&mut self, e: &ExtentRecord, crcs: &[u32]) {
        self.u64(e.id);
        self.u64(e.owner);
        self.u32(e.entry.blocks);
        self.u8(e.entry.copy_count() as u8);
        for (lane, location) in e.entry.copies() {
            self.u8(lane as u8);
            self.location(location);
        }
        debug_assert!(crcs.is_empty() || crcs.len() == e.entry.blocks as usize);
        self.u8(u8::from(!crcs.is_empty()));
        self.u32s(crcs);
    }
}

pub(super) struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(data: &'a [u8]) -> Self {
        Reader { data, at: 0 }
    }
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&end| end <= self.data.len());
        let Some(end) = end else {
            return Err(corrupt(format!("record ends at {} of {} bytes", self.at + n, self.data.len())));
        };
        let slice = &self.data[self.at..end];
        self.at = end;
        Ok(slice)
    }
    pub(super) fn skip(&mut self, n: usize) -> Result<()> {
        self.take(n).map(drop)
    }
    pub(super) fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    pub(super) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    pub(super) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    pub(super) fn location(&mut self) -> Result<Location> {
        Ok(Location { zone: self.u32()?, offset: self.u32()? })
    }
    pub(super) fn superblock(&mut self) -> Result<Superblock> {
        let profile = match self.u8()? {
            0 => Profile::Single,
            1 => Profile::Dup,
            2 => Profile::Mirror,
            3 => Profile::Mirror3,
            other => return Err(corrupt(format!("unknown profile {other}"))),
        };
        let streams = self.u8()?;
        let software_zone_blocks = self.u32()?;
        let meta_zones_per_segment = self.u32()?;
        let reserve_zones = self.u32()?;
        let max_extent_blocks = self.u32()?;
        let finish_threshold_blocks = self.u32()?;
        let device_count = self.u8()?;
        if !profile.spans(usize::from(device_count)) || meta_zones_per_segment == 0 || streams == 0 {
            return Err(corrupt(format!(
                "{device_count} devices, {meta_zones_per_segment} zones per segment, {streams} streams for {profile:?}"
            )));
        }
        let mut devices = Vec::new();
        for _ in 0..device_count {
            devices.push((self.u32()?, self.u32()?, self.u64()?, self.u8()? != 0));
        }
        let copies = usize::from(self.u8()?);
        let expected = crate::journal::layout::meta_copies(usize::from(device_count), 1).len();
        if copies != expected {
            return Err(corrupt(format!("{copies} metadata copies on {device_count} devices, {expected} expected")));
        }
        let meta_segments = (0..copies).map(|_| Ok([self.u32()?, self.u32()?])).collect::<Result<Vec<_>>>()?;
        let meta_segment_blocks = self.u64()?;
        let mut members = Vec::new();
        for _ in 0..device_count {
            members.push(self.member()?);
        }
        let last_scrub = match self.u8()? {
            0 => None,
            1 => Some(self.scrub()?),
            other => return Err(corrupt(format!("last scrub tag {other}"))),
        };
        let tag_stride = self.u32()?;
        if tag_stride != 0 && !(crate::tags::TAG_BYTES as u32..=MAX_TAG_STRIDE).contains(&tag_stride) {
            return Err(corrupt(format!("{tag_stride} metadata bytes per block")));
        }
        let location_offset_bits = self.u8()?;
        if crate::table::LocationBits::from_offset_bits(location_offset_bits).is_none() {
            return Err(corrupt(format!("locations with {location_offset_bits} offset bits")));
        }
        let checksum_area = match self.u8()? {
            0 => false,
            1 if tag_stride == 0 => true,
            other => return Err(corrupt(format!("checksum area {other} with {tag_stride} tag bytes"))),
        };
        let count = usize::from(self.u8()?);
        if count > MAX_SESSIONS {
            return Err(corrupt(format!("{count} sessions")));
        }
        let sessions = (0..count).map(|_| self.session()).collect::<Result<Vec<_>>>()?;
        let data_unit_blocks = self.u32()?;
        if !data_unit_blocks.is_power_of_two() || data_unit_blocks > crate::table::MAX_BLOCKS {
            return Err(corrupt(format!("zones taking data in units of {data_unit_blocks} blocks")));
        }
        Ok(Superblock {
            profile,
            streams,
            software_zone_blocks,
            meta_zones_per_segment,
            reserve_zones,
            max_extent_blocks,
            finish_threshold_blocks,
            devices,
            meta_segments,
            meta_segment_blocks,
            members,
            last_scrub,
            tag_stride,
            location_offset_bits,
            checksum_area,
            sessions,
            data_unit_blocks,
        })
    }
    pub(super) fn session(&mut self) -> Result<SessionRecord> {
        let id = self.u64()?;
        if id == 0 {
            return Err(corrupt("a session of ID 0".into()));
        }
        Ok(SessionRecord {
            id,
            place: self.u8()?,
            parent: self.u64()?,
            parted_generation: self.u64()?,
            parted_seq: self.u64()?,
            began_unix_s: self.u64()?,
        })
    }
    pub(super) fn member(&mut self) -> Result<MemberRecord> {
        let id = self.u64()?;
        let failed = match self.u8()? {
            0 => false,
            1 => true,
            other => return Err(corrupt(format!("member state {other}"))),
        };
        Ok(MemberRecord {
            id,
            failed,
            read_errors: self.u64()?,
            write_errors: self.u64()?,
            checksum_errors: self.u64()?,
        })
    }
    pub(super) fn scrub(&mut self) -> Result<ScrubRecord> {
        Ok(ScrubRecord {
            finished_unix_s: self.u64()?,
            bytes_verified: self.u64()?,
            bad_blocks: self.u64()?,
            repaired_blocks: self.u64()?,
            uncorrectable_blocks: self.u64()?,
            clean: match self.u8()? {
                0 => false,
                1 => true,
                other => return Err(corrupt(format!("scrub outcome {other}"))),
            },
        })
    }
    pub(super) fn extent(&mut self) -> Result<ExtentRecord> {
        let id = self.u64()?;
        let owner = self.u64()?;
        let blocks = self.u32()?;
        let copies = usize::from(self.u8()?);
        if copies == 0 || copies > COPIES_MAX || blocks == 0 {
            return Err(corrupt(format!("extent {id}: {copies} copies of {blocks} blocks")));
        }
        let mut placed = [(0, Location::MISSING); COPIES_MAX];
        for index in 0..copies {
            let lane = usize::from(self.u8()?);
            if lane >= LANES_MAX || placed[..index].iter().any(|&(other, _)| other == lane) {
                return Err(corrupt(format!("extent {id}: a copy in lane {lane}")));
            }
            placed[index] = (lane, self.location()?);
        }
        let entry = Entry::new(blocks, &placed[..copies]);
        let crcs = match self.u8()? {
            0 => Vec::new(),
            1 => {
                let raw = self.take(blocks as usize * 4)?;
                raw.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))).collect()
            }
            other => return Err(corrupt(format!("extent {id}: checksum flag {other}"))),
        };
        Ok(ExtentRecord { id, owner, entry, crcs })
    }
    pub(super) fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    /// An owner blob, checked; returns where it begins.
    pub(super) fn blob(&mut self, volume_id: u64, seq: u64, index: u64) -> Result<usize> {
        let at = self.at;
        let bytes = self.take(OWNER_BLOB_BYTES)?;
        if decode_owner_blob(bytes, volume_id, seq, index).is_none() {
            return Err(corrupt(format!("page {index}: its owners do not match their checksum")));
        }
        Ok(at)
    }
    /// A record's operations, length first; skipped unless `keep`.
    pub(super) fn ops(&mut self, keep: bool) -> Result<Vec<Op>> {
        let bytes = self.u64()?;
        let ops = self.take(usize::try_from(bytes).map_err(|_| corrupt("operations' length".into()))?)?;
        if keep {
            decode_ops(ops)
        } else {
            Ok(Vec::new())
        }
    }
    /// Checkpoint pages; with `keep` false, only where each page's owner
    /// blob lies (its records and checksums are checked for length and
    /// skipped: open loads the pages of one checkpoint only).
    pub(super) fn pages(&mut self, volume_id: u64, seq: u64, keep: bool) -> Result<Vec<PageImage>> {
        fn words(raw: &[u8]) -> impl Iterator<Item = u32> + '_ {
            raw.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        }
        let count = self.u32()? as usize;
        let slots = crate::table::PAGE_SLOTS;
        let mut pages = Vec::with_capacity(count.min(self.data.len() / PAGE_BYTES + 1));
        for _ in 0..count {
            let index = self.u64()?;
            let raw = self.take(slots * RECORD_BYTES)?;
            let records = if keep {
                let word = |r: &[u8], i: usize| u64::from_le_bytes(r[8 * i..8 * i + 8].try_into().expect("8 bytes"));
                raw.chunks_exact(RECORD_BYTES).map(|r| std::array::from_fn(|i| word(r, i))).collect()
            } else {
                Vec::new()
            };
            let owners_at = self.blob(volume_id, seq, index)?;
            let mapped_count = self.u32()? as usize;
            let mut mapped = Vec::with_capacity(if keep { mapped_count.min(slots) } else { 0 });
            for _ in 0..mapped_count {
                let slot = self.u16()?;
                let blocks = self.u32()? as usize;
                if usize::from(slot) >= slots || blocks > crate::table::MAX_BLOCKS as usize {
                    return Err(corrupt(format!("page {index}: checksums of slot {slot}, {blocks} blocks")));
                }
                let raw = self.take(blocks * 4)?;
                if keep {
                    mapped.push((slot, words(raw).collect()));
                }
            }
            pages.push(PageImage { index, records, owners: Vec::new(), mapped, owners_at });
        }
        Ok(pages)
    }
    pub(super) fn finish(&self) -> Result<()> {
        if self.at == self.data.len() {
            Ok(())
        } else {
            Err(corrupt(format!("{} trailing bytes in a record", self.data.len() - self.at)))
        }
    }
}

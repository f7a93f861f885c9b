//! Copy (NVM Command Set 1.1 §3.3.2): source ranges checked whole before
//! any block moves, each block's metadata copied with its data.
//!
//! Descriptor format 0h copies within the command's namespace. Format 2h
//! (§3.3.2.4, "Copy across Multiple Namespaces") names a source namespace
//! per range: it needs OCFS bit 2 and the host's enable (Host Behavior
//! Support CDFE bit 2), or the command is Invalid Field in Command, as a
//! format the controller does not support. Per range, an SNSID of 0,
//! FFFFFFFFh or above NN is Invalid Namespace or Format, an inactive one
//! Invalid Field in Command, and a source whose LBA data size or metadata
//! size differs from the destination's Incompatible Namespace or Format
//! (no namespace has protection information, so these two sizes are the
//! whole of "matching namespace formats for copy", §3.3.2.4.1). A source
//! range in the destination namespace that overlaps the destination range
//! is Overlapping I/O Range in format 2h (in format 0h the sources are
//! read first, so such a copy moves what was there before the command).
//! MSRC, MSSRL and MCL are the destination namespace's in both formats
//! (QEMU 9.1 checks MSSRL against the source namespace's).

use super::*;
use crate::cmd::nvm::{CopySourceRangeFormat2, COPY_DESCRIPTOR_FORMAT_0, COPY_DESCRIPTOR_FORMAT_2};

/// One source range, decoded from either format.
#[derive(Clone, Copy, Debug)]
struct Source {
    /// SNSID of a format 2h entry; `None` in format 0h (the destination).
    snsid: Option<u32>,
    slba: u64,
    /// 1-based.
    blocks: u64,
}

/// Source range `index` of the descriptors in Descriptor Format `format`
/// (0h or 2h, checked before).
fn source(descriptors: &[u8], format: u8, index: usize) -> Source {
    let bytes: &[u8; COPY_SOURCE_RANGE_SIZE] = descriptors
        [index * COPY_SOURCE_RANGE_SIZE..(index + 1) * COPY_SOURCE_RANGE_SIZE]
        .try_into()
        .expect("a whole descriptor");
    if format == COPY_DESCRIPTOR_FORMAT_2 {
        let range = CopySourceRangeFormat2::from_bytes(bytes);
        Source { snsid: Some(range.snsid), slba: range.slba, blocks: u64::from(range.blocks()) }
    } else {
        debug_assert_eq!(format, COPY_DESCRIPTOR_FORMAT_0);
        let range = CopySourceRange::from_bytes(bytes);
        Source { snsid: None, slba: range.slba, blocks: u64::from(range.blocks()) }
    }
}

/// The index of the namespace a checked source range reads.
fn source_index(destination: usize, source: &Source) -> usize {
    source.snsid.map_or(destination, |snsid| snsid as usize - 1)
}

impl State {
    /// Copy, descriptor format 0h or 2h: every source is read into one
    /// buffer (MCL bounds it), then written at SDLBA as one write. Too many
    /// ranges (MSRC), a range over MSSRL or a total over MCL is Command
    /// Size Limit Exceeded.
    pub(super) fn copy(&mut self, index: usize, c: &Command) -> Result<(u32, u32), Status> {
        let sdlba = slba(c);
        let ranges = (c.cdw12 & 0xFF) as usize + 1;
        let format = ((c.cdw12 >> 8) & 0xF) as u8;
        let fua = fua(c);
        if !self.copy_format_enabled(format) {
            return Err(invalid_field());
        }
        if ranges > usize::from(self.namespaces[index].config.msrc) + 1 {
            return Err(size_limit_exceeded());
        }
        let descriptors = self.fetch_descriptors(c, ranges * COPY_SOURCE_RANGE_SIZE)?;
        let result = self.copy_ranges(index, &descriptors, format, ranges, sdlba, fua);
        self.buffer = descriptors;
        let total = result?;
        self.after_write(index, sdlba, total, fua);
        Ok((0, 0))
    }

    /// The namespace `source` reads, checked: the destination's in format
    /// 0h; in format 2h the active one SNSID names, formatted as the
    /// destination is.
    fn source_namespace(&self, destination: usize, source: &Source) -> Result<usize, Status> {
        let Some(snsid) = source.snsid else {
            return Ok(destination);
        };
        // As for the command's own NSID: 0, FFFFFFFFh (NN is below it) and
        // NSIDs above NN are Invalid Namespace or Format, inactive ones
        // Invalid Field in Command.
        let index = self.namespace_index(snsid)?;
        let (from, to) = (&self.namespaces[index], &self.namespaces[destination]);
        if from.block_size != to.block_size || from.config.metadata_bytes != to.config.metadata_bytes {
            return Err(Status::from(CommandSpecificStatus::IncompatibleNamespaceOrFormat).with_dnr());
        }
        Ok(index)
    }

    /// Checks every source range and the destination, then copies.
    fn copy_ranges(
        &mut self,
        index: usize,
        descriptors: &[u8],
        format: u8,
        ranges: usize,
        sdlba: u64,
        fua: bool,
    ) -> Result<u64, Status> {
        let destination = &self.namespaces[index];
        let nsid = destination.nsid;
        let (mssrl, mcl) = (u64::from(destination.config.mssrl), u64::from(destination.config.mcl));
        let mut total = 0u64;
        for i in 0..ranges {
            let source = source(descriptors, format, i);
            let from = self.source_namespace(index, &source)?;
            total += source.blocks;
            if source.blocks > mssrl || total > mcl {
                return Err(size_limit_exceeded());
            }
            let namespace = &self.namespaces[from];
            namespace.check_range(source.slba, source.blocks)?;
            if let Some(zones) = &namespace.zones {
                zones.check_read(source.slba, source.blocks)?;
            }
        }
        let destination = &self.namespaces[index];
        destination.check_range(sdlba, total)?;
        let overlaps = |source: &Source| {
            source.snsid == Some(nsid) && source.slba < sdlba + total && sdlba < source.slba + source.blocks
        };
        if (0..ranges).any(|i| overlaps(&source(descriptors, format, i))) {
            return Err(Status::from(CommandSpecificStatus::OverlappingIoRange).with_dnr());
        }
        let zone = match &destination.zones {
            Some(zones) => Some(zones.check_write(sdlba, total)?),
            None => None,
        };
        for i in 0..ranges {
            let source = source(descriptors, format, i);
            let snsid = self.namespaces[source_index(index, &source)].nsid;
            self.read_fault(snsid, source.slba, source.blocks)?;
        }
        self.write_fault(nsid, sdlba, total)?;
        let namespace = &mut self.namespaces[index];
        if let (Some(zones), Some(zone)) = (&mut namespace.zones, zone) {
            zones.advance(zone, total);
        }
        let durable = fua || !self.features.volatile_write_cache;
        self.copy_blocks(index, descriptors, format, ranges, sdlba, durable);
        self.smart.read_bytes += u128::from(total * self.namespaces[index].block_size);
        Ok(total)
    }

    /// Reads every source range, data and metadata, then writes them all at
    /// SDLBA: sources first, so overlapping ranges copy what was there
    /// before the command. The metadata goes with its data, as in QEMU
    /// 7.2's `nvme_copy_in_cb` and `nvme_copy_out_cb`.
    fn copy_blocks(&mut self, index: usize, descriptors: &[u8], format: u8, ranges: usize, sdlba: u64, durable: bool) {
        let mut data = std::mem::take(&mut self.copy_data);
        let mut metadata = std::mem::take(&mut self.copy_metadata);
        data.clear();
        metadata.clear();
        let mut total = 0;
        for i in 0..ranges {
            let source = source(descriptors, format, i);
            let namespace = &self.namespaces[source_index(index, &source)];
            namespace.storage().read(source.slba, source.blocks, |run| run.append_to(&mut data));
            namespace.storage().read_metadata(source.slba, source.blocks, |run| run.append_to(&mut metadata));
            total += source.blocks;
        }
        let namespace = &self.namespaces[index];
        let metadata_bytes = u64::from(namespace.config.metadata_bytes);
        assert_eq!(data.len() as u64, total * namespace.block_size, "every source block read");
        assert_eq!(metadata.len() as u64, total * metadata_bytes, "every source block's metadata read");
        let (mut at, mut metadata_at) = (0, 0);
        let fill = |destination: &mut [u8]| {
            destination.copy_from_slice(&data[at..at + destination.len()]);
            at += destination.len();
        };
        let mut fill_metadata = |destination: &mut [u8]| {
            destination.copy_from_slice(&metadata[metadata_at..metadata_at + destination.len()]);
            metadata_at += destination.len();
        };
        let source = if metadata_bytes == 0 { MetadataSource::Keep } else { MetadataSource::Fill(&mut fill_metadata) };
        namespace.storage_mut().write(sdlba, total, durable, fill, source);
        assert!(at == data.len() && metadata_at == metadata.len(), "everything read was written");
        self.copy_data = data;
        self.copy_metadata = metadata;
    }
}

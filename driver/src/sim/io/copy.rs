//! Copy (NVM Command Set 1.0 §3.2.2): source ranges checked whole before
//! any block moves, each block's metadata copied with its data.

use super::*;

impl State {
    /// Copy, descriptor format 0h: every source is read into one buffer
    /// (MCL bounds it), then written at SDLBA as one write. Too many ranges
    /// (MSRC), a range over MSSRL or a total over MCL is Command Size Limit
    /// Exceeded.
    pub(super) fn copy(&mut self, index: usize, c: &Command) -> Result<(u32, u32), Status> {
        let sdlba = slba(c);
        let ranges = (c.cdw12 & 0xFF) as usize + 1;
        let format = (c.cdw12 >> 8) & 0xF;
        let fua = fua(c);
        if format != 0 {
            return Err(invalid_field());
        }
        if ranges > usize::from(self.namespaces[index].config.msrc) + 1 {
            return Err(size_limit_exceeded());
        }
        let descriptors = self.fetch_descriptors(c, ranges * COPY_SOURCE_RANGE_SIZE)?;
        let result = self.copy_ranges(index, &descriptors, ranges, sdlba, fua);
        self.buffer = descriptors;
        let total = result?;
        self.after_write(index, sdlba, total, fua);
        Ok((0, 0))
    }

    /// Checks every source range and the destination, then copies.
    pub(super) fn copy_ranges(
        &mut self,
        index: usize,
        descriptors: &[u8],
        ranges: usize,
        sdlba: u64,
        fua: bool,
    ) -> Result<u64, Status> {
        let namespace = &self.namespaces[index];
        let nsid = namespace.nsid;
        let mut total = 0u64;
        for i in 0..ranges {
            let source = source_range(descriptors, i);
            let blocks = u64::from(source.blocks());
            total += blocks;
            if blocks > u64::from(namespace.config.mssrl) || total > u64::from(namespace.config.mcl) {
                return Err(size_limit_exceeded());
            }
            namespace.check_range(source.slba, blocks)?;
            if let Some(zones) = &namespace.zones {
                zones.check_read(source.slba, blocks)?;
            }
        }
        namespace.check_range(sdlba, total)?;
        let zone = match &namespace.zones {
            Some(zones) => Some(zones.check_write(sdlba, total)?),
            None => None,
        };
        for i in 0..ranges {
            let source = source_range(descriptors, i);
            self.read_fault(nsid, source.slba, u64::from(source.blocks()))?;
        }
        self.write_fault(nsid, sdlba, total)?;
        let namespace = &mut self.namespaces[index];
        if let (Some(zones), Some(zone)) = (&mut namespace.zones, zone) {
            zones.advance(zone, total);
        }
        let durable = fua || !self.features.volatile_write_cache;
        self.copy_blocks(index, descriptors, ranges, sdlba, durable);
        self.smart.read_bytes += u128::from(total * self.namespaces[index].block_size);
        Ok(total)
    }

    /// Reads every source range, data and metadata, then writes them all at
    /// SDLBA: sources first, so overlapping ranges copy what was there
    /// before the command. The metadata goes with its data, as in QEMU
    /// 7.2's `nvme_copy_in_cb` and `nvme_copy_out_cb`.
    pub(super) fn copy_blocks(&mut self, index: usize, descriptors: &[u8], ranges: usize, sdlba: u64, durable: bool) {
        let mut data = std::mem::take(&mut self.copy_data);
        let mut metadata = std::mem::take(&mut self.copy_metadata);
        data.clear();
        metadata.clear();
        let namespace = &mut self.namespaces[index];
        let mut total = 0;
        for i in 0..ranges {
            let source = source_range(descriptors, i);
            let blocks = u64::from(source.blocks());
            namespace.storage().read(source.slba, blocks, |run| run.append_to(&mut data));
            namespace.storage().read_metadata(source.slba, blocks, |run| run.append_to(&mut metadata));
            total += blocks;
        }
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

//! I/O commands: the NVM Command Set 1.0 (Read, Write, Flush, Write
//! Zeroes, Dataset Management, Compare, Verify; Copy as in 1.1, across
//! namespaces too: see `io/copy.rs`) and the Zoned Namespace Command Set
//! 1.1 (Zone Append, Zone Management Send and Receive).
//!
//! Each command checks everything it can before it changes anything: the
//! namespace, the opcode against ONCS, sizes against MDTS and the other
//! limits, the LBA range, zone rules, the data pointer, the metadata
//! pointer, then injected media faults. Only a command that passes all of
//! them moves data.
//!
//! # Metadata
//!
//! On a namespace formatted with metadata (MS > 0, in a separate buffer:
//! FLBAS bit 4 clear), Read, Write and Zone Append move each block's MS
//! bytes through MPTR: one physically contiguous buffer of blocks × MS
//! bytes, dword aligned (PSDT 00b; NVMe Base 2.0, "Common Command Format").
//! A misaligned MPTR is PRP Offset Invalid, as a misaligned PRP1 is (the
//! spec names no status for it); one that no mapping covers whole is Data
//! Transfer Error. MDTS bounds the data only, as in QEMU 7.2 for separate
//! buffers.
//!
//! MPTR = 0 moves no metadata, as QEMU 7.2's `nvme_rw_cb` (hw/nvme/ctrl.c)
//! skips the metadata when the namespace is not extended and MPTR is 0: a
//! Read returns data only, and a Write or Zone Append leaves the blocks'
//! metadata as it was (neither zeroed nor invented). Unlike QEMU, which
//! transfers the metadata after the data, the simulator checks MPTR before
//! anything moves, so a bad MPTR writes no data either.
//!
//! Copy copies each source block's metadata with its data, within one
//! namespace or across two of the same format (QEMU's `nvme_copy_in_cb`
//! and `nvme_copy_out_cb`). Write Zeroes, a Dataset
//! Management deallocate whose blocks then read zeroes, and Zone Reset
//! zero the metadata (QEMU's `nvme_rw_cb`, `nvme_dsm_md_cb`,
//! `nvme_zone_reset_epilogue_cb`). Compare compares the data only and
//! ignores MPTR (QEMU also compares the metadata); Verify has no data to
//! transfer and is unchanged.

use super::admin::{invalid_field, invalid_namespace, invalid_opcode, TRANSFER_BYTES_MAX};
use super::controller::{Outcome, State};
use super::deferred::ReadJob;
use super::dma::{resolve_prps, resolve_sgl, DmaTable, HostRange, Transfer, PAGE_SIZE};
use super::fault::RangeKind;
use super::storage::{MetadataSource, Run, Storage};
use super::zones::{Action, Effect};
use crate::cmd::nvm::{CopySourceRange, DsmRange, COPY_SOURCE_RANGE_SIZE, DSM_RANGE_SIZE};
use crate::spec::command::opcode::nvm as op;
use crate::spec::command::{Command, PSDT_PRP, PSDT_SGL_MPTR_CONTIGUOUS};
use crate::spec::identify::{Oncs, NSID_BROADCAST};
use crate::spec::registers::CC_CSS_ALL_IO;
use crate::spec::status::{CommandSpecificStatus, GenericStatus, MediaStatus, Status};
use crate::spec::zns::{REPORT_HEADER_SIZE, ZONE_DESCRIPTOR_SIZE, ZRA_REPORT_ZONES};

mod copy;
mod zoned;

/// CDW12 bit 30: Force Unit Access.
const CDW12_FUA: u32 = 1 << 30;
/// Dataset Management CDW11 bit 2: Attribute – Deallocate.
const DSM_DEALLOCATE: u32 = 1 << 2;
/// Zone Management Send CDW13 bit 8: Select All.
const ZSA_SELECT_ALL: u32 = 1 << 8;
/// Zone Management Receive CDW13 bit 16: Partial Report.
const ZRA_PARTIAL: u32 = 1 << 16;
/// Report Zones filters go up to 7h (Offline).
const ZRASF_MAX: u32 = 7;

pub(super) fn slba(command: &Command) -> u64 {
    u64::from(command.cdw10) | u64::from(command.cdw11) << 32
}

/// NLB + 1.
pub(super) fn blocks(command: &Command) -> u64 {
    u64::from(command.cdw12 & 0xFFFF) + 1
}

pub(super) fn fua(command: &Command) -> bool {
    command.cdw12 & CDW12_FUA != 0
}

/// Stores a Write's or Zone Append's data from the host `segments`, and its
/// metadata from the host `metadata` buffer, or keeps the blocks' metadata
/// without one; `scratch` holds the metadata on its way (kept by the
/// controller, so that a write allocates nothing).
pub(super) fn store(
    scratch: &mut Vec<u8>,
    storage: &mut Storage,
    slba: u64,
    blocks: u64,
    durable: bool,
    segments: &[HostRange],
    metadata: Option<HostRange>,
) {
    let mut transfer = Transfer::new(segments);
    let fill = |destination: &mut [u8]| transfer.take(destination);
    match metadata {
        Some(buffer) => {
            // What the blocks hold now, under what the host buffer moves
            // (all of it, or QEMU 7.2's truncated head).
            let metadata = scratch;
            metadata.clear();
            storage.read_metadata(slba, blocks, |run| run.append_to(metadata));
            buffer.take(0, &mut metadata[..buffer.len()]);
            let mut at = 0;
            let mut fill_metadata = |destination: &mut [u8]| {
                destination.copy_from_slice(&metadata[at..at + destination.len()]);
                at += destination.len();
            };
            storage.write(slba, blocks, durable, fill, MetadataSource::Fill(&mut fill_metadata));
        }
        None => storage.write(slba, blocks, durable, fill, MetadataSource::Keep),
    }
}

/// Resolves `command`'s data pointer (PRPs, or an SGL) for `len` bytes
/// into `segments`.
pub(super) fn resolve_pointer(
    dma: &mut DmaTable,
    command: &Command,
    len: usize,
    segments: &mut Vec<HostRange>,
) -> Result<(), Status> {
    if command.psdt() == PSDT_PRP {
        resolve_prps(dma, command.prp1, command.prp2, len, segments)
    } else {
        resolve_sgl(dma, (command.prp1, command.prp2), len, segments)
    }
}

/// A transfer `into_host` needs every segment's mapping to let the device
/// write it; else the IOMMU faults: Data Transfer Error.
pub(super) fn check_into_host(into_host: bool, segments: &[HostRange]) -> Result<(), Status> {
    match into_host && !segments.iter().all(HostRange::device_writes) {
        true => Err(Status::from(GenericStatus::DataTransferError)),
        false => Ok(()),
    }
}

/// The metadata buffer of `len` bytes at `command`'s MPTR: `None` when
/// there is no metadata or MPTR is 0 (no metadata moves; see the [module
/// documentation](self#metadata)); with `truncation`, QEMU 7.2's head of
/// it (see `metadata_dma_truncation`).
pub(super) fn metadata_buffer(
    dma: &mut DmaTable,
    command: &Command,
    len: u64,
    into_host: bool,
    truncation: bool,
) -> Result<Option<HostRange>, Status> {
    if len == 0 || command.mptr == 0 {
        return Ok(None);
    }
    if command.mptr & 0b11 != 0 {
        return Err(Status::from(GenericStatus::PrpOffsetInvalid).with_dnr());
    }
    let len = len as usize;
    match dma.translate(command.mptr, len) {
        Some((buffer, _)) if into_host && !buffer.device_writes() => {
            Err(Status::from(GenericStatus::DataTransferError))
        }
        Some((buffer, _)) if truncation && len >= 512 && !len.is_multiple_of(512) => Ok(Some(buffer.sub(0, len % 512))),
        Some((buffer, _)) => Ok(Some(buffer)),
        None => Err(Status::from(GenericStatus::DataTransferError)),
    }
}

fn size_limit_exceeded() -> Status {
    Status::from(CommandSpecificStatus::CommandSizeLimitExceeded).with_dnr()
}

impl State {
    /// Executes one I/O command.
    pub(crate) fn io(&mut self, command: &Command) -> Outcome {
        self.stats.io_commands[usize::from(command.opcode)] += 1;
        Outcome::from_result(self.io_command(command))
    }

    fn io_command(&mut self, c: &Command) -> Result<(u32, u32), Status> {
        // SGLs with MPTR as one contiguous buffer where SGLS offers them;
        // no metadata SGLs (SGLS bit 19 clear), no fused operations
        // (FUSES = 0).
        let psdt_ok = c.psdt() == PSDT_PRP || (c.psdt() == PSDT_SGL_MPTR_CONTIGUOUS && self.config.sgls & 0b11 != 0);
        if !psdt_ok || c.fuse() != 0 {
            return Err(invalid_field());
        }
        if self.rejected_opcodes[usize::from(c.opcode)] {
            return Err(invalid_opcode());
        }
        if c.opcode == op::FLUSH {
            match self.flush_fails_after {
                Some(0) => {
                    self.flush_fails_after = None;
                    self.stats.faults.write_faults += 1;
                    return Err(Status::from(MediaStatus::WriteFault));
                }
                Some(left) => self.flush_fails_after = Some(left - 1),
                None => {}
            }
            return self.flush(c);
        }
        let index = self.namespace_index(c.nsid)?;
        let oncs = self.config.oncs;
        // Zone commands need a zoned namespace and CC.CSS selecting all I/O
        // command sets; with CC.CSS = NVM a zoned namespace still enforces
        // its zones on reads and writes.
        let zone_commands = self.namespaces[index].zones.is_some() && self.css() == CC_CSS_ALL_IO;
        match c.opcode {
            op::READ => self.read(index, c),
            op::WRITE => self.write(index, c, false),
            op::COMPARE if oncs.contains(Oncs::COMPARE) => self.compare(index, c),
            op::WRITE_ZEROES if oncs.contains(Oncs::WRITE_ZEROES) => self.write_zeroes(index, c),
            op::DATASET_MANAGEMENT if oncs.contains(Oncs::DATASET_MANAGEMENT) => self.dataset_management(index, c),
            op::VERIFY if oncs.contains(Oncs::VERIFY) => self.verify(index, c),
            op::COPY if oncs.contains(Oncs::COPY) => self.copy(index, c),
            op::ZONE_APPEND if zone_commands => self.write(index, c, true),
            op::ZONE_MANAGEMENT_SEND if zone_commands => self.zone_send(index, c),
            op::ZONE_MANAGEMENT_RECEIVE if zone_commands => self.zone_receive(index, c),
            _ => Err(invalid_opcode()),
        }
    }

    /// The namespace of an I/O command: an NSID outside 1..=NN is Invalid
    /// Namespace or Format, an inactive one Invalid Field (as QEMU 7.2).
    fn namespace_index(&self, nsid: u32) -> Result<usize, Status> {
        if nsid == 0 || nsid > self.config.nn {
            return Err(invalid_namespace());
        }
        let index = nsid as usize - 1;
        if index >= self.namespaces.len() {
            return Err(invalid_field());
        }
        Ok(index)
    }

    /// MDTS: Invalid Field in Command for a larger transfer.
    /// The `len` bytes of range descriptors a command's data pointer names
    /// (Dataset Management's ranges, Copy's sources), in the controller's
    /// reused buffer: hand it back to `self.buffer` when done.
    pub(super) fn fetch_descriptors(&mut self, c: &Command, len: usize) -> Result<Vec<u8>, Status> {
        let segments = self.resolve(c, len, false)?;
        let mut descriptors = std::mem::take(&mut self.buffer);
        super::zeroed(&mut descriptors, len);
        Transfer::new(&segments).take(&mut descriptors);
        self.segments = segments;
        Ok(descriptors)
    }

    fn check_transfer(&self, bytes: u64) -> Result<(), Status> {
        match self.config.max_transfer_bytes() {
            Some(max) if bytes > max => Err(invalid_field()),
            _ => Ok(()),
        }
    }

    /// Resolves the command's data pointer for `len` bytes, which the
    /// device transfers into host memory when `into_host` (a mapping the
    /// device may only read then fails as an IOMMU fault would: Data
    /// Transfer Error). The returned segments are the state's scratch
    /// vector: hand them back with `self.segments = segments`.
    fn resolve(&mut self, command: &Command, len: usize, into_host: bool) -> Result<Vec<HostRange>, Status> {
        let mut segments = std::mem::take(&mut self.segments);
        let resolved = resolve_pointer(&mut self.dma, command, len, &mut segments);
        if command.psdt() != PSDT_PRP {
            self.stats.sgl_transfers += u64::from(resolved.is_ok());
        }
        match resolved.and_then(|()| check_into_host(into_host, &segments)) {
            Ok(()) => Ok(segments),
            Err(status) => {
                self.segments = segments;
                if status.sc == GenericStatus::DataTransferError.sc() {
                    self.stats.dma_errors += 1;
                }
                Err(status)
            }
        }
    }

    /// The data pointer of a Read, Write or Zone Append of `blocks` blocks
    /// (as [`State::resolve`]) and its metadata buffer (as
    /// [`State::resolve_metadata`]); on failure, neither.
    fn resolve_with_metadata(
        &mut self,
        index: usize,
        command: &Command,
        blocks: u64,
        into_host: bool,
    ) -> Result<(Vec<HostRange>, Option<HostRange>), Status> {
        let len = blocks * self.namespaces[index].block_size;
        let segments = self.resolve(command, len as usize, into_host)?;
        match self.resolve_metadata(index, command, blocks, into_host) {
            Ok(metadata) => Ok((segments, metadata)),
            Err(status) => {
                self.segments = segments;
                Err(status)
            }
        }
    }

    /// The metadata buffer of a Read, Write or Zone Append of `blocks`
    /// blocks: `None` when the namespace has no metadata or MPTR is 0 (no
    /// metadata moves; see the [module documentation](self#metadata)).
    fn resolve_metadata(
        &mut self,
        index: usize,
        command: &Command,
        blocks: u64,
        into_host: bool,
    ) -> Result<Option<HostRange>, Status> {
        let metadata_bytes = u64::from(self.namespaces[index].config.metadata_bytes);
        let truncation = self.config.metadata_dma_truncation;
        let buffer = metadata_buffer(&mut self.dma, command, blocks * metadata_bytes, into_host, truncation);
        if buffer.is_err_and(|status| status.sc == GenericStatus::DataTransferError.sc()) {
            self.stats.dma_errors += 1;
        }
        buffer
    }

    /// An injected read failure on these blocks, or a random one.
    fn read_fault(&mut self, nsid: u32, slba: u64, blocks: u64) -> Result<(), Status> {
        let hit =
            !self.faults.is_empty() && self.faults.first_hit(RangeKind::UnrecoveredRead, nsid, slba, blocks).is_some();
        if hit || self.rng.chance(self.fault_config.unrecovered_read_probability) {
            self.stats.faults.unrecovered_reads += 1;
            return Err(Status::from(MediaStatus::UnrecoveredReadError));
        }
        Ok(())
    }

    /// An injected write failure on these blocks, or a random one.
    fn write_fault(&mut self, nsid: u32, slba: u64, blocks: u64) -> Result<(), Status> {
        let hit = !self.faults.is_empty() && self.faults.first_hit(RangeKind::WriteFault, nsid, slba, blocks).is_some();
        if hit || self.rng.chance(self.fault_config.write_fault_probability) {
            self.stats.faults.write_faults += 1;
            return Err(Status::from(MediaStatus::WriteFault));
        }
        Ok(())
    }

    /// Where writes land: the media with FUA or without a write cache.
    fn durable(&self, fua: bool) -> bool {
        fua || !self.features.volatile_write_cache
    }

    /// Bookkeeping after a write of `blocks` at `slba`: on a zoned
    /// namespace FUA persists the zone's whole prefix (zones are written in
    /// order, so durable data is always a prefix); unrecovered-read faults
    /// of the blocks heal; counters.
    fn after_write(&mut self, index: usize, slba: u64, blocks: u64, fua: bool) {
        self.stats.lbas_written += blocks;
        let namespace = &mut self.namespaces[index];
        if fua {
            if let Some(zones) = &namespace.zones {
                let zslba = zones.zslba(zones.index(slba));
                namespace.storage_mut().persist(zslba, slba + blocks - zslba);
            }
        }
        if !self.faults.is_empty() {
            self.faults.heal(namespace.nsid, slba, blocks);
        }
        self.smart.host_writes += 1;
        self.smart.written_bytes += u128::from(blocks * namespace.block_size);
    }

    // ---- NVM commands ----

    fn read(&mut self, index: usize, c: &Command) -> Result<(u32, u32), Status> {
        let (slba, blocks) = (slba(c), blocks(c));
        let namespace = &self.namespaces[index];
        let (nsid, block_size) = (namespace.nsid, namespace.block_size);
        self.check_transfer(blocks * block_size)?;
        let namespace = &self.namespaces[index];
        namespace.check_range(slba, blocks)?;
        if let Some(zones) = &namespace.zones {
            zones.check_read(slba, blocks)?;
        }
        let (segments, metadata) = self.resolve_with_metadata(index, c, blocks, true)?;
        if let Err(status) = self.read_fault(nsid, slba, blocks) {
            self.segments = segments;
            return Err(status);
        }
        self.smart.host_reads += 1;
        self.smart.read_bytes += u128::from(blocks * block_size);
        self.stats.lbas_read += blocks;
        // All of the metadata, or the head QEMU 7.2 moves (see
        // `metadata_dma_truncation`).
        let metadata_bytes = u64::from(self.namespaces[index].config.metadata_bytes);
        let metadata = metadata.map(|buffer| (buffer, buffer.len() as u64 / metadata_bytes));
        let job = ReadJob { namespace: index, slba, blocks, segments, metadata };
        if self.may_defer_read(blocks * block_size) {
            // The data moves after the lock is let go (`sim/deferred.rs`).
            self.deferred.reads.push(job);
            self.stats.deferred_reads += 1;
            self.segments = self.segment_pool.pop().unwrap_or_default();
            return Ok((0, 0));
        }
        job.run(&self.namespaces[index].storage());
        // Bit flips stay in the data.
        self.flip_on_read(nsid, slba, blocks, block_size, &Transfer::new(&job.segments));
        self.segments = job.segments;
        Ok((0, 0))
    }

    /// A silent bit flip in the data a read returned: in an injected range,
    /// or at random.
    fn flip_on_read(&mut self, nsid: u32, slba: u64, blocks: u64, block_size: u64, transfer: &Transfer<'_>) {
        let injected = if self.faults.is_empty() {
            None
        } else {
            self.faults.first_hit(RangeKind::ReadBitFlip, nsid, slba, blocks)
        };
        let lba = match injected {
            Some(lba) => lba,
            None if self.rng.chance(self.fault_config.read_bit_flip_probability) => slba + self.rng.below(blocks),
            None => return,
        };
        let byte = (lba - slba) * block_size + self.rng.below(block_size);
        let bit = self.rng.below(8) as u8;
        transfer.flip_bit(byte as usize, bit);
        self.stats.faults.read_bit_flips += 1;
    }

    /// Write, and Zone Append (`append`: the controller picks the LBA, the
    /// write pointer of the zone starting at SLBA, and returns it in DW0 and
    /// DW1; ZASL bounds the size).
    fn write(&mut self, index: usize, c: &Command, append: bool) -> Result<(u32, u32), Status> {
        let (start, blocks, fua) = (slba(c), blocks(c), fua(c));
        let namespace = &self.namespaces[index];
        let (nsid, block_size) = (namespace.nsid, namespace.block_size);
        let bytes = blocks * block_size;
        self.check_transfer(bytes)?;
        if append && self.config.zasl != 0 && bytes > (PAGE_SIZE as u64) << self.config.zasl {
            return Err(invalid_field());
        }
        let namespace = &self.namespaces[index];
        namespace.check_range(start, blocks)?;
        let (slba, zone) = match &namespace.zones {
            None => (start, None),
            Some(zones) if append => {
                let zone = zones.start(start)?;
                (zones.check_append(zone, blocks)?, Some(zone))
            }
            Some(zones) => (start, Some(zones.check_write(start, blocks)?)),
        };
        let (segments, metadata) = self.resolve_with_metadata(index, c, blocks, false)?;
        let result = self.write_fault(nsid, slba, blocks).map(|()| {
            let durable = self.durable(fua);
            let namespace = &mut self.namespaces[index];
            if let (Some(zones), Some(zone)) = (&mut namespace.zones, zone) {
                zones.advance(zone, blocks);
            }
            store(&mut self.metadata_scratch, &mut namespace.storage_mut(), slba, blocks, durable, &segments, metadata);
            self.after_write(index, slba, blocks, fua);
            if append {
                self.appended_lba(slba)
            } else {
                (0, 0)
            }
        });
        self.segments = segments;
        result
    }

    /// DW0 and DW1 of a Zone Append that wrote at `slba`: the LBA, unless a
    /// [`super::Fault::MisreportAppendLba`] skews it.
    fn appended_lba(&mut self, slba: u64) -> (u32, u32) {
        let mut reported = slba;
        if self.misreport_append.0 > 0 {
            self.misreport_append.0 -= 1;
            reported = slba.wrapping_add(self.misreport_append.1);
        }
        (reported as u32, (reported >> 32) as u32)
    }

    fn write_zeroes(&mut self, index: usize, c: &Command) -> Result<(u32, u32), Status> {
        let (slba, blocks, fua) = (slba(c), blocks(c), fua(c));
        let namespace = &self.namespaces[index];
        let nsid = namespace.nsid;
        // WZSL bounds Write Zeroes (no data moves, so MDTS does not).
        if self.config.wzsl != 0 && blocks * namespace.block_size > (PAGE_SIZE as u64) << self.config.wzsl {
            return Err(invalid_field());
        }
        namespace.check_range(slba, blocks)?;
        let zone = match &namespace.zones {
            Some(zones) => Some(zones.check_write(slba, blocks)?),
            None => None,
        };
        self.write_fault(nsid, slba, blocks)?;
        let durable = self.durable(fua);
        let namespace = &mut self.namespaces[index];
        if let (Some(zones), Some(zone)) = (&mut namespace.zones, zone) {
            zones.advance(zone, blocks);
        }
        // With or without DEAC the blocks read as zeroes afterwards; whole
        // chunks are freed either way.
        namespace.storage_mut().zero(slba, blocks, durable);
        self.after_write(index, slba, blocks, fua);
        Ok((0, 0))
    }

    fn flush(&mut self, c: &Command) -> Result<(u32, u32), Status> {
        if c.nsid == NSID_BROADCAST {
            for namespace in &mut self.namespaces {
                namespace.storage_mut().flush();
            }
            return Ok((0, 0));
        }
        let index = self.namespace_index(c.nsid)?;
        self.namespaces[index].storage_mut().flush();
        Ok((0, 0))
    }

    fn verify(&mut self, index: usize, c: &Command) -> Result<(u32, u32), Status> {
        let (slba, blocks) = (slba(c), blocks(c));
        let namespace = &self.namespaces[index];
        if self.config.vsl != 0 && blocks * namespace.block_size > (PAGE_SIZE as u64) << self.config.vsl {
            return Err(invalid_field());
        }
        namespace.check_range(slba, blocks)?;
        if let Some(zones) = &namespace.zones {
            zones.check_read(slba, blocks)?;
        }
        let nsid = namespace.nsid;
        self.read_fault(nsid, slba, blocks)?;
        self.smart.host_reads += 1;
        Ok((0, 0))
    }

    fn compare(&mut self, index: usize, c: &Command) -> Result<(u32, u32), Status> {
        let (slba, blocks) = (slba(c), blocks(c));
        let namespace = &self.namespaces[index];
        let (nsid, block_size) = (namespace.nsid, namespace.block_size);
        let bytes = (blocks * block_size) as usize;
        self.check_transfer(bytes as u64)?;
        let namespace = &self.namespaces[index];
        namespace.check_range(slba, blocks)?;
        if let Some(zones) = &namespace.zones {
            zones.check_read(slba, blocks)?;
        }
        let segments = self.resolve(c, bytes, false)?;
        let result = self.read_fault(nsid, slba, blocks).and_then(|()| {
            let mut host = std::mem::take(&mut self.buffer);
            super::zeroed(&mut host, bytes);
            Transfer::new(&segments).take(&mut host);
            let mut at = 0;
            let mut equal = true;
            self.namespaces[index].storage().read(slba, blocks, |run| {
                let stored_len = match run {
                    Run::Data(stored) => {
                        equal &= host[at..at + stored.len()] == *stored;
                        stored.len()
                    }
                    Run::Zeroes(count) => {
                        equal &= host[at..at + count].iter().all(|byte| *byte == 0);
                        count
                    }
                };
                at += stored_len;
            });
            self.buffer = host;
            self.smart.host_reads += 1;
            self.smart.read_bytes += bytes as u128;
            if equal {
                Ok((0, 0))
            } else {
                Err(Status::from(MediaStatus::CompareFailure))
            }
        });
        self.segments = segments;
        result
    }

    /// Dataset Management: the ranges come from the data buffer. Every
    /// range is checked before any is deallocated: more ranges than DMRL, a
    /// range longer than DMRSL or a total beyond DMSL is Invalid Field in
    /// Command (QEMU 7.2 skips such ranges silently; the spec limits are
    /// binding, so the simulator refuses them); a range past the namespace
    /// is LBA Out of Range.
    fn dataset_management(&mut self, index: usize, c: &Command) -> Result<(u32, u32), Status> {
        let ranges = (c.cdw10 & 0xFF) as usize + 1;
        let deallocate = c.cdw11 & DSM_DEALLOCATE != 0;
        if self.config.dmrl != 0 && ranges > usize::from(self.config.dmrl) {
            return Err(invalid_field());
        }
        let descriptors = self.fetch_descriptors(c, ranges * DSM_RANGE_SIZE)?;
        let range = |i: usize| {
            let bytes: &[u8; DSM_RANGE_SIZE] =
                descriptors[i * DSM_RANGE_SIZE..(i + 1) * DSM_RANGE_SIZE].try_into().expect("sized");
            DsmRange::from_bytes(bytes)
        };
        let namespace = &self.namespaces[index];
        let mut total = 0u64;
        let mut checked = Ok(());
        for i in 0..ranges {
            let range = range(i);
            let blocks = u64::from(range.nlb);
            total += blocks;
            let range_too_long = self.config.dmrsl != 0 && blocks > u64::from(self.config.dmrsl);
            let total_too_long = self.config.dmsl != 0 && total > self.config.dmsl;
            if range_too_long || total_too_long {
                checked = Err(invalid_field());
            } else if let Err(status) = namespace.check_range(range.slba, blocks) {
                checked = Err(status);
            }
            if checked.is_err() {
                break;
            }
        }
        if checked.is_ok() && deallocate && namespace.deallocate_zeroes() {
            let durable = self.durable(false);
            for i in 0..ranges {
                let range = range(i);
                if range.nlb > 0 {
                    self.namespaces[index].storage_mut().zero(range.slba, u64::from(range.nlb), durable);
                }
            }
        }
        self.buffer = descriptors;
        checked.map(|()| (0, 0))
    }
}

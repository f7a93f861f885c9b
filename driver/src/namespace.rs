//! A namespace handle: geometry, limits and validated requests.
//!
//! Every request is checked before it reaches a queue: LBA range, transfer
//! size (MDTS, ZASL, the PRP limit), buffer size and alignment, zone
//! commands on zoned namespaces only, and commands the controller offers
//! (ONCS). A refused request is a typed [`RequestError`] and the device is
//! never touched.

use crate::cmd::nvm::{
    self, CopySourceRange, CopySourceRangeFormat2, DsmAttributes, DsmRange, COPY_DESCRIPTOR_FORMAT_2, COPY_MAX_RANGES,
    COPY_SOURCE_RANGE_SIZE,
};
use crate::cmd::zns::{self as zns_cmd, ReportFilter, ZoneSendAction};
use crate::dma::{DmaMemory, PAGE_SIZE};
use crate::error::Error;
use crate::error::RequestError;
use crate::identity::{ControllerLimits, NamespaceInfo};
use crate::queue::QueuePair;
use crate::queue::{IoBuffer, Request};
use crate::quirks::Quirks;
use crate::spec::identify::Oncs;
use crate::zeroout::{ZeroState, ZeroStats, ZeroStrategy};
use serde::Serialize;
use std::sync::Arc;

pub use crate::identity::RangeLimits;

/// Zone geometry and limits of a zoned namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ZoneGeometry {
    /// Zone size, in logical blocks (ZSZE).
    pub zone_size_blocks: u64,
    /// Zones in the namespace: NSZE over the zone size.
    pub zone_count: u64,
    /// `None`: no limit.
    pub max_open_zones: Option<u32>,
    /// Most zones that may be open or closed at once (MAR + 1); `None`: no
    /// limit.
    pub max_active_zones: Option<u32>,
    /// Largest Zone Append, in bytes (ZASL, capped by the transfer limit).
    pub zone_append_max_bytes: u64,
}

/// How the namespace's LBA format carries per-block metadata (NVM Command
/// Set 1.0 §5.2.2: the LBA Format's MS, FLBAS bit 4 and DPS). Enterprise
/// drives offer formats such as 4096+8 and 4096+64; QEMU's `nvme-ns` has
/// `ms=`, `mset=` and `pi=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MetadataFormat {
    /// Metadata bytes per logical block (MS).
    pub bytes_per_block: u16,
    /// The metadata travels at the end of each block's data (an extended
    /// LBA) rather than in a separate buffer (MPTR).
    pub extended: bool,
    /// End-to-end protection type (DPS bits 2:0); 0 when off.
    pub protection_type: u8,
    /// On a controller with [`Quirks::METADATA_DMA_TRUNCATED`], a metadata
    /// transfer must be shorter than this many bytes or a multiple of it,
    /// or the controller moves only part of it; `None`: any length.
    pub dma_granule: Option<u32>,
}

/// The granule of [`Quirks::METADATA_DMA_TRUNCATED`]: QEMU's sector.
const METADATA_DMA_GRANULE: u32 = 512;

impl MetadataFormat {
    /// Whether the controller moves a metadata transfer of `bytes` whole
    /// (see [`MetadataFormat::dma_granule`]).
    pub fn moves_whole(&self, bytes: u64) -> bool {
        self.dma_granule.is_none_or(|granule| bytes < u64::from(granule) || bytes.is_multiple_of(u64::from(granule)))
    }

    /// A separate buffer the host owns entirely: not interleaved, no
    /// protection information for the device to check or generate. The
    /// only layout the `*_with_metadata` requests take.
    pub fn is_separate_and_opaque(&self) -> bool {
        !self.extended && self.protection_type == 0
    }
}

/// An active namespace of a controller, for building I/O requests.
#[derive(Clone, Debug, Serialize)]
pub struct Namespace {
    nsid: u32,
    block_size: u32,
    capacity_blocks: u64,
    max_transfer_bytes: u64,
    #[serde(skip)]
    oncs: Oncs,
    zones: Option<ZoneGeometry>,
    limits: RangeLimits,
    metadata: Option<MetadataFormat>,
    /// Copy may name a source namespace (descriptor format 2h, enabled at
    /// bring-up).
    cross_copy: bool,
    #[serde(skip)]
    zero: Option<Arc<ZeroState>>,
}

type Checked<T> = Result<T, RequestError>;

/// DPS bits 2:0: the protection information type in use (0: none).
const DPS_PROTECTION_TYPE_MASK: u8 = 0b111;

impl Namespace {
    pub(crate) fn new(controller: &ControllerLimits<'_>, info: &NamespaceInfo) -> Self {
        // The data pointer bounds a transfer too (one PRP list page, or one
        // SGL descriptor); keep a page of slack so that an unaligned buffer
        // start still fits a PRP list.
        let pointer_limit = (controller.data_pointer_max_bytes - PAGE_SIZE) as u64;
        let max_transfer_bytes = controller.max_transfer_bytes.unwrap_or(u64::MAX).min(pointer_limit);
        let zones = info.zoned.as_ref().map(|zoned| {
            let min_page = controller.min_page_size;
            let zasl = controller
                .identify_zns
                .and_then(|z| z.zone_append_size_limit_bytes(min_page, Some(max_transfer_bytes)))
                .unwrap_or(max_transfer_bytes);
            ZoneGeometry {
                zone_size_blocks: zoned.zone_size_blocks,
                zone_count: info.capacity_blocks / zoned.zone_size_blocks,
                max_open_zones: zoned.max_open_zones,
                max_active_zones: zoned.max_active_zones,
                zone_append_max_bytes: zasl.min(max_transfer_bytes),
            }
        });
        // 0 means "not reported" for each of these.
        let nonzero = |value: u64, default: u64| {
            if value == 0 {
                default
            } else {
                value.min(default)
            }
        };
        let defaults = RangeLimits::default();
        let mut limits = defaults;
        if let Some(nvm) = controller.identify_nvm {
            limits.dsm_ranges = nonzero(u64::from(nvm.dmrl), defaults.dsm_ranges as u64) as usize;
            limits.dsm_range_blocks = nonzero(u64::from(nvm.dmrsl), defaults.dsm_range_blocks);
            limits.dsm_total_blocks = nonzero(nvm.dmsl, defaults.dsm_total_blocks);
        }
        let id = &info.identify;
        limits.copy_ranges = (usize::from(id.msrc) + 1).min(COPY_MAX_RANGES);
        // MSSRL and MCL have no "not reported" value: 0 takes no block
        // (QEMU's namespace of a controller given a drive directly, as a
        // hot-added one is, reports 0 for both and fails every Copy, with
        // Internal Error where its check's status is overridden; QEMU 7.2
        // `nvme_do_copy`). Such a namespace has no usable Copy.
        limits.copy_range_blocks = u64::from(id.mssrl).min(defaults.copy_range_blocks);
        limits.copy_total_blocks = u64::from(id.mcl).min(defaults.copy_total_blocks);
        let metadata = id.current_lba_format().ok().filter(|format| format.ms > 0).map(|format| MetadataFormat {
            bytes_per_block: format.ms,
            extended: id.metadata_at_end(),
            protection_type: id.dps & DPS_PROTECTION_TYPE_MASK,
            dma_granule: controller.quirks.contains(Quirks::METADATA_DMA_TRUNCATED).then_some(METADATA_DMA_GRANULE),
        });
        Namespace {
            nsid: info.nsid,
            block_size: info.block_size,
            capacity_blocks: info.capacity_blocks,
            max_transfer_bytes,
            oncs: controller.identify.oncs,
            zones,
            limits,
            metadata,
            cross_copy: controller.cross_namespace_copy,
            zero: None,
        }
    }

    /// A namespace described directly, for tests and simulators. Panics
    /// unless `block_size` is a power of two, as LBADS makes every real one.
    pub fn from_parts(
        nsid: u32,
        block_size: u32,
        capacity_blocks: u64,
        max_transfer_bytes: u64,
        oncs: Oncs,
        zones: Option<ZoneGeometry>,
    ) -> Self {
        assert!(block_size.is_power_of_two(), "a {block_size}-byte block: expected a power of two");
        Namespace {
            nsid,
            block_size,
            capacity_blocks,
            max_transfer_bytes,
            oncs,
            zones,
            limits: RangeLimits::default(),
            metadata: None,
            cross_copy: false,
            zero: None,
        }
    }

    /// The same namespace formatted with per-block metadata, for tests and
    /// simulators.
    pub fn with_metadata(mut self, metadata: Option<MetadataFormat>) -> Self {
        self.metadata = metadata;
        self
    }

    /// The same namespace with other range limits, for tests and simulators.
    pub fn with_limits(mut self, limits: RangeLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The same namespace on a controller where Copy across namespaces is
    /// enabled (`true`) or not, for tests and simulators.
    pub fn with_cross_namespace_copy(mut self, enabled: bool) -> Self {
        self.cross_copy = enabled;
        self
    }

    /// Whether Copy may take its sources from another namespace of the
    /// controller ([`Namespace::copy_from`]): the controller supports Copy
    /// Descriptor Format 2h (CDFS bit 2) and took the host's enable (Host
    /// Behavior Support CDFE bit 2) at bring-up.
    pub fn cross_namespace_copy(&self) -> bool {
        self.cross_copy
    }

    /// Whether a Copy can move a block: the namespace supports Copy and
    /// reports nonzero MSSRL and MCL.
    pub fn copy_usable(&self) -> bool {
        self.oncs.contains(Oncs::COPY) && self.limits.copy_range_blocks > 0 && self.limits.copy_total_blocks > 0
    }

    /// The Dataset Management and Copy limits requests are checked against.
    pub fn range_limits(&self) -> &RangeLimits {
        &self.limits
    }

    pub(crate) fn with_zero_state(mut self, state: Arc<ZeroState>) -> Self {
        self.zero = Some(state);
        self
    }

    fn zero_state(&self) -> Result<&Arc<ZeroState>, Error> {
        self.zero.as_ref().ok_or_else(|| {
            Error::InvalidArgument("this namespace handle has no controller (use Controller::namespace)".into())
        })
    }

    /// Zeroes `[slba, slba + blocks)` with the namespace's zero-out
    /// strategy (see [`crate::zeroout`]), on `pair`, which must have nothing
    /// else in flight. `allow_unmap` lets the device deallocate instead of
    /// writing (DEAC, zone resets of whole zones). A command the device
    /// rejects as unsupported downgrades the strategy once, for every
    /// handle of this namespace, and the range is still zeroed.
    pub fn zeroout(&self, pair: &mut QueuePair, slba: u64, blocks: u64, allow_unmap: bool) -> Result<(), Error> {
        crate::zeroout::zeroout(self.zero_state()?, self.nsid, pair, slba, blocks, allow_unmap)
    }

    /// Deallocates `[slba, slba + blocks)` with as many Dataset Management
    /// commands as DMRL/DMRSL/DMSL require, on `pair` (nothing else in
    /// flight). A hint: the blocks read back as DLFEAT says, which devices
    /// do not always honour; use [`Namespace::zeroout`] to get zeroes.
    pub fn deallocate_range(&self, pair: &mut QueuePair, slba: u64, blocks: u64) -> Result<(), Error> {
        crate::zeroout::deallocate(self.zero_state()?, self.nsid, pair, slba, blocks)
    }

    /// The zero-out strategy in use.
    pub fn zero_strategy(&self) -> Option<ZeroStrategy> {
        self.zero.as_ref().map(|z| z.strategy())
    }

    /// Commands, bytes and downgrades per zero-out strategy.
    pub fn zero_stats(&self) -> Option<ZeroStats> {
        self.zero.as_ref().map(|z| z.stats())
    }

    /// Forces an allowed zero-out strategy (benchmarks, tests).
    pub fn set_zero_strategy(&self, strategy: ZeroStrategy) -> Result<(), Error> {
        self.zero_state()?.set_strategy(strategy)
    }

    /// Namespace ID, as commands carry it (NSID).
    pub fn nsid(&self) -> u32 {
        self.nsid
    }

    /// Logical block size, in bytes: the unit of every `slba` and `blocks`.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// The namespace size, in logical blocks (NSZE).
    pub fn capacity_blocks(&self) -> u64 {
        self.capacity_blocks
    }

    /// The largest data transfer of one command, in bytes.
    pub fn max_transfer_bytes(&self) -> u64 {
        self.max_transfer_bytes
    }

    /// How the LBA format carries per-block metadata; `None` when it has
    /// none.
    pub fn metadata(&self) -> Option<MetadataFormat> {
        self.metadata
    }

    /// Zone geometry; `None` for a namespace that is not zoned.
    pub fn zones(&self) -> Option<&ZoneGeometry> {
        self.zones.as_ref()
    }

    /// Whether the controller supports every optional command in `commands`
    /// (ONCS of Identify Controller, NVMe Base 2.0 §5.17.2.1).
    pub fn supports(&self, commands: Oncs) -> bool {
        self.oncs.contains(commands)
    }

    // ---- validation ----

    pub(crate) fn check_range(&self, slba: u64, blocks: u64) -> Checked<()> {
        if blocks == 0 {
            return Err(RequestError::Empty);
        }
        if slba.checked_add(blocks).is_none_or(|end| end > self.capacity_blocks) {
            return Err(RequestError::LbaOutOfRange { slba, blocks, capacity_blocks: self.capacity_blocks });
        }
        if blocks > u64::from(nvm::MAX_BLOCKS) {
            return Err(RequestError::TooLarge {
                bytes: blocks * u64::from(self.block_size),
                max_bytes: u64::from(nvm::MAX_BLOCKS) * u64::from(self.block_size),
            });
        }
        Ok(())
    }

    /// Blocks a data buffer covers, after checking its shape and the limit.
    fn data_blocks(&self, buffer: &IoBuffer, max_bytes: u64) -> Checked<u64> {
        let bytes = buffer.len() as u64;
        if bytes == 0 {
            return Err(RequestError::Empty);
        }
        // The block size is a power of two (2^LBADS): a mask and a shift,
        // not two divisions per request.
        let block = u64::from(self.block_size);
        if bytes & (block - 1) != 0 {
            return Err(RequestError::NotBlockMultiple { bytes, block_size: self.block_size });
        }
        if bytes > max_bytes {
            return Err(RequestError::TooLarge { bytes, max_bytes });
        }
        if buffer.iova() & 0b11 != 0 {
            return Err(RequestError::Misaligned { iova: buffer.iova() });
        }
        Ok(bytes >> block.trailing_zeros())
    }

    fn zones_or_err(&self) -> Checked<&ZoneGeometry> {
        self.zones.as_ref().ok_or(RequestError::NotZoned { nsid: self.nsid })
    }

    fn check_zone_start(&self, slba: u64) -> Checked<&ZoneGeometry> {
        let zones = self.zones_or_err()?;
        if !slba.is_multiple_of(zones.zone_size_blocks) || slba >= self.capacity_blocks {
            return Err(RequestError::NotZoneStart { slba, zone_size_blocks: zones.zone_size_blocks });
        }
        Ok(zones)
    }

    fn require(&self, command: Oncs, name: &'static str) -> Checked<()> {
        if self.oncs.contains(command) {
            Ok(())
        } else {
            Err(RequestError::Unsupported { command: name })
        }
    }

    // ---- requests ----

    /// Read `buffer.len()` bytes from `slba`.
    pub fn read(&self, slba: u64, buffer: IoBuffer, token: u64) -> Checked<Request> {
        let blocks = self.data_blocks(&buffer, self.max_transfer_bytes)?;
        self.check_range(slba, blocks)?;
        Ok(Request { command: nvm::read(self.nsid, slba, blocks as u32), buffer: Some(buffer), metadata: None, token })
    }

    /// Write `buffer` at `slba`; with `fua` the data is durable at completion.
    pub fn write(&self, slba: u64, buffer: IoBuffer, fua: bool, token: u64) -> Checked<Request> {
        let blocks = self.data_blocks(&buffer, self.max_transfer_bytes)?;
        self.check_range(slba, blocks)?;
        Ok(Request {
            command: nvm::write(self.nsid, slba, blocks as u32, fua),
            buffer: Some(buffer),
            metadata: None,
            token,
        })
    }

    /// Read `buffer.len()` bytes from `slba`, and each block's metadata into
    /// `metadata` (blocks times [`MetadataFormat::bytes_per_block`] bytes).
    pub fn read_with_metadata(&self, slba: u64, buffer: IoBuffer, metadata: IoBuffer, token: u64) -> Checked<Request> {
        let blocks = self.data_blocks(&buffer, self.max_transfer_bytes)?;
        self.check_metadata(blocks, &metadata)?;
        Ok(Request { metadata: Some(metadata), ..self.read(slba, buffer, token)? })
    }

    /// Write `buffer` at `slba` with each block's metadata from `metadata`,
    /// in the same command: a block and its metadata land together.
    pub fn write_with_metadata(
        &self,
        slba: u64,
        buffer: IoBuffer,
        metadata: IoBuffer,
        fua: bool,
        token: u64,
    ) -> Checked<Request> {
        let blocks = self.data_blocks(&buffer, self.max_transfer_bytes)?;
        self.check_metadata(blocks, &metadata)?;
        Ok(Request { metadata: Some(metadata), ..self.write(slba, buffer, fua, token)? })
    }

    /// A metadata buffer must fit a separate, opaque format exactly.
    fn check_metadata(&self, blocks: u64, metadata: &IoBuffer) -> Checked<()> {
        let format = self
            .metadata
            .filter(MetadataFormat::is_separate_and_opaque)
            .ok_or(RequestError::NoSeparateMetadata { nsid: self.nsid })?;
        let expected = blocks * u64::from(format.bytes_per_block);
        if metadata.len() as u64 != expected {
            return Err(RequestError::MetadataLength { expected, got: metadata.len() as u64 });
        }
        if metadata.iova() & 0b11 != 0 {
            return Err(RequestError::Misaligned { iova: metadata.iova() });
        }
        if !format.moves_whole(expected) {
            let granule = format.dma_granule.unwrap_or_default();
            return Err(RequestError::MetadataTruncated { bytes: expected, granule });
        }
        Ok(())
    }

    /// Compare `buffer` with the blocks at `slba` (Compare Failure if they differ).
    pub fn compare(&self, slba: u64, buffer: IoBuffer, token: u64) -> Checked<Request> {
        self.require(Oncs::COMPARE, "Compare")?;
        let blocks = self.data_blocks(&buffer, self.max_transfer_bytes)?;
        self.check_range(slba, blocks)?;
        Ok(Request {
            command: nvm::compare(self.nsid, slba, blocks as u32),
            buffer: Some(buffer),
            metadata: None,
            token,
        })
    }

    /// Verify `blocks` at `slba` on the device, without transferring data.
    pub fn verify(&self, slba: u64, blocks: u32, token: u64) -> Checked<Request> {
        self.require(Oncs::VERIFY, "Verify")?;
        self.check_range(slba, u64::from(blocks))?;
        Ok(Request { command: nvm::verify(self.nsid, slba, blocks), buffer: None, metadata: None, token })
    }

    /// Flush the volatile write cache.
    pub fn flush(&self, token: u64) -> Request {
        Request { command: nvm::flush(self.nsid), buffer: None, metadata: None, token }
    }

    /// Write Zeroes; `deallocate` sets DEAC (the controller may unmap).
    pub fn write_zeroes(&self, slba: u64, blocks: u32, deallocate: bool, token: u64) -> Checked<Request> {
        self.require(Oncs::WRITE_ZEROES, "Write Zeroes")?;
        self.check_range(slba, u64::from(blocks))?;
        Ok(Request {
            command: nvm::write_zeroes(self.nsid, slba, blocks, deallocate, false),
            buffer: None,
            metadata: None,
            token,
        })
    }

    /// Dataset Management, deallocate: `ranges` of `(slba, blocks)`, whose
    /// descriptors are written into `buffer` (16 bytes each).
    pub fn deallocate(&self, ranges: &[(u64, u32)], buffer: IoBuffer, token: u64) -> Checked<Request> {
        self.require(Oncs::DATASET_MANAGEMENT, "Dataset Management")?;
        if ranges.is_empty() {
            return Err(RequestError::Empty);
        }
        if ranges.len() > self.limits.dsm_ranges {
            return Err(RequestError::TooManyRanges { count: ranges.len(), max: self.limits.dsm_ranges });
        }
        let mut total: u64 = 0;
        let needed = ranges.len() * std::mem::size_of::<DsmRange>();
        self.check_descriptor_buffer(&buffer, needed)?;
        for (index, &(slba, blocks)) in ranges.iter().enumerate() {
            // DSM lengths are 32-bit, not limited to MAX_BLOCKS, but the
            // controller's DMRSL is binding: QEMU, for one, skips a longer
            // range and still reports success.
            if blocks == 0 {
                return Err(RequestError::Empty);
            }
            if u64::from(blocks) > self.limits.dsm_range_blocks {
                return Err(RequestError::RangeTooLong {
                    blocks: u64::from(blocks),
                    max_blocks: self.limits.dsm_range_blocks,
                });
            }
            total += u64::from(blocks);
            if total > self.limits.dsm_total_blocks {
                return Err(RequestError::RangeTooLong { blocks: total, max_blocks: self.limits.dsm_total_blocks });
            }
            if slba.checked_add(u64::from(blocks)).is_none_or(|end| end > self.capacity_blocks) {
                return Err(RequestError::LbaOutOfRange {
                    slba,
                    blocks: u64::from(blocks),
                    capacity_blocks: self.capacity_blocks,
                });
            }
            buffer.buffer().copy_in(buffer.offset() + index * 16, &DsmRange::new(slba, blocks).to_bytes());
        }
        let command = nvm::dataset_management(self.nsid, ranges.len() as u16, DsmAttributes::DEALLOCATE);
        Ok(Request { command, buffer: Some(buffer.truncate(needed)), metadata: None, token })
    }

    /// Simple Copy of `sources` (`(slba, blocks)` each) to `sdlba`; the
    /// source range descriptors are written into `buffer` (32 bytes each).
    pub fn copy(&self, sdlba: u64, sources: &[(u64, u32)], buffer: IoBuffer, token: u64) -> Checked<Request> {
        self.require(Oncs::COPY, "Copy")?;
        let needed = self.check_copy(sdlba, sources, &buffer, true)?;
        for (index, &(slba, blocks)) in sources.iter().enumerate() {
            let entry = CopySourceRange::new(slba, blocks).to_bytes();
            buffer.buffer().copy_in(buffer.offset() + index * COPY_SOURCE_RANGE_SIZE, &entry);
        }
        let command = nvm::copy(self.nsid, sdlba, sources.len() as u16, false);
        Ok(Request { command, buffer: Some(buffer.truncate(needed)), metadata: None, token })
    }

    /// Copy of `sources` (`(slba, blocks)` each) of namespace
    /// `source_nsid` of the same controller to `sdlba` of this namespace,
    /// with source range entries in Copy Descriptor Format 2h (NVM Command
    /// Set 1.1 §3.3.2.4, "Copy across Multiple Namespaces") written into
    /// `buffer` (32 bytes each). `source_nsid` may be this namespace: an
    /// ordinary Copy in format 2h, except that a source range overlapping
    /// the destination is then refused by the controller (Overlapping I/O
    /// Range) rather than copied in an undefined order.
    ///
    /// Checked here as [`Namespace::copy`] checks: the ranges against this
    /// namespace's MSRC, MSSRL and MCL, and the destination against its
    /// size. Another namespace's size is not known to this handle, so its
    /// ranges are checked only for not wrapping around the LBA space; the
    /// controller refuses one past its end (LBA Out of Range), a source
    /// NSID that names no namespace (Invalid Namespace or Format) and a
    /// source whose LBA data size or metadata size differs from this
    /// namespace's (Incompatible Namespace or Format).
    ///
    /// [`RequestError::Unsupported`] when the controller did not enable
    /// Copy across namespaces at bring-up ([`Namespace::cross_namespace_copy`]);
    /// [`RequestError::ProtectionInformation`] on a namespace formatted
    /// with protection information, since these entries carry no tags.
    pub fn copy_from(
        &self,
        sdlba: u64,
        source_nsid: u32,
        sources: &[(u64, u32)],
        buffer: IoBuffer,
        token: u64,
    ) -> Checked<Request> {
        const COMMAND: &str = "Copy across namespaces";
        self.require(Oncs::COPY, "Copy")?;
        if !self.cross_copy {
            return Err(RequestError::Unsupported { command: COMMAND });
        }
        if self.metadata.is_some_and(|format| format.protection_type != 0) {
            return Err(RequestError::ProtectionInformation { nsid: self.nsid, command: COMMAND });
        }
        let needed = self.check_copy(sdlba, sources, &buffer, source_nsid == self.nsid)?;
        for (index, &(slba, blocks)) in sources.iter().enumerate() {
            let entry = CopySourceRangeFormat2::new(source_nsid, slba, blocks).to_bytes();
            buffer.buffer().copy_in(buffer.offset() + index * COPY_SOURCE_RANGE_SIZE, &entry);
        }
        let ranges = sources.len() as u16;
        let command = nvm::copy_with_format(self.nsid, sdlba, ranges, COPY_DESCRIPTOR_FORMAT_2, false);
        Ok(Request { command, buffer: Some(buffer.truncate(needed)), metadata: None, token })
    }

    /// The checks every Copy shares: the number of ranges (MSRC), the
    /// descriptor buffer, each range's length (MSSRL) and bounds, the total
    /// (MCL) and the destination's bounds. A source range is bounded by
    /// this namespace when `sources_here`, and otherwise only kept from
    /// wrapping around the LBA space. Returns the descriptor bytes.
    fn check_copy(&self, sdlba: u64, sources: &[(u64, u32)], buffer: &IoBuffer, sources_here: bool) -> Checked<usize> {
        if sources.is_empty() {
            return Err(RequestError::Empty);
        }
        if sources.len() > self.limits.copy_ranges {
            return Err(RequestError::TooManyRanges { count: sources.len(), max: self.limits.copy_ranges });
        }
        let needed = sources.len() * COPY_SOURCE_RANGE_SIZE;
        self.check_descriptor_buffer(buffer, needed)?;
        let mut total: u64 = 0;
        for &(slba, blocks) in sources {
            let blocks = u64::from(blocks);
            if sources_here {
                self.check_range(slba, blocks)?;
            } else {
                self.check_foreign_range(slba, blocks)?;
            }
            if blocks > self.limits.copy_range_blocks {
                return Err(RequestError::RangeTooLong { blocks, max_blocks: self.limits.copy_range_blocks });
            }
            total += blocks;
            if total > self.limits.copy_total_blocks {
                return Err(RequestError::RangeTooLong { blocks: total, max_blocks: self.limits.copy_total_blocks });
            }
        }
        // The destination is bounded by the namespace, not by one range's
        // 16-bit NLB (the controller's MCL/MSSRL/MSRC limits apply there).
        if sdlba.checked_add(total).is_none_or(|end| end > self.capacity_blocks) {
            return Err(RequestError::LbaOutOfRange {
                slba: sdlba,
                blocks: total,
                capacity_blocks: self.capacity_blocks,
            });
        }
        Ok(needed)
    }

    /// [`Namespace::check_range`] for a range of a namespace whose size
    /// this handle does not know: not empty, within one command's NLB, and
    /// not wrapping around the 64-bit LBA space.
    fn check_foreign_range(&self, slba: u64, blocks: u64) -> Checked<()> {
        if blocks == 0 {
            return Err(RequestError::Empty);
        }
        if slba.checked_add(blocks).is_none() {
            return Err(RequestError::LbaOutOfRange { slba, blocks, capacity_blocks: u64::MAX });
        }
        if blocks > u64::from(nvm::MAX_BLOCKS) {
            return Err(RequestError::TooLarge {
                bytes: blocks * u64::from(self.block_size),
                max_bytes: u64::from(nvm::MAX_BLOCKS) * u64::from(self.block_size),
            });
        }
        Ok(())
    }

    /// Zone Append `buffer` to the zone starting at `zslba`. The completion's
    /// [`crate::queue::IoCompletion::result_u64`] is the LBA written.
    pub fn zone_append(&self, zslba: u64, buffer: IoBuffer, fua: bool, token: u64) -> Checked<Request> {
        let zones = *self.check_zone_start(zslba)?;
        let blocks = self.data_blocks(&buffer, zones.zone_append_max_bytes)?;
        if blocks > zones.zone_size_blocks {
            return Err(RequestError::CrossesZone { slba: zslba, blocks });
        }
        self.check_range(zslba, blocks)?;
        Ok(Request {
            command: zns_cmd::zone_append(self.nsid, zslba, blocks as u32, fua),
            buffer: Some(buffer),
            metadata: None,
            token,
        })
    }

    /// Zone Append `buffer` with each block's metadata from `metadata`, in
    /// the same command.
    pub fn zone_append_with_metadata(
        &self,
        zslba: u64,
        buffer: IoBuffer,
        metadata: IoBuffer,
        fua: bool,
        token: u64,
    ) -> Checked<Request> {
        let zones = *self.check_zone_start(zslba)?;
        let blocks = self.data_blocks(&buffer, zones.zone_append_max_bytes)?;
        self.check_metadata(blocks, &metadata)?;
        Ok(Request { metadata: Some(metadata), ..self.zone_append(zslba, buffer, fua, token)? })
    }

    /// Zone Management Send: open, close, finish, reset or offline the zone
    /// at `zslba`, or every zone with `select_all`.
    pub fn zone_send(&self, zslba: u64, action: ZoneSendAction, select_all: bool, token: u64) -> Checked<Request> {
        if select_all {
            self.zones_or_err()?;
        } else {
            self.check_zone_start(zslba)?;
        }
        let slba = if select_all { 0 } else { zslba };
        Ok(Request {
            command: zns_cmd::zone_management_send(self.nsid, slba, action, select_all),
            buffer: None,
            metadata: None,
            token,
        })
    }

    /// Zone Management Receive, Report Zones from `slba` into `buffer`
    /// (a 64-byte header, then 64 bytes per zone). With `partial`, the
    /// header counts only the zones that fit.
    pub fn report_zones(
        &self,
        slba: u64,
        filter: ReportFilter,
        partial: bool,
        buffer: IoBuffer,
        token: u64,
    ) -> Checked<Request> {
        self.zones_or_err()?;
        if slba >= self.capacity_blocks {
            return Err(RequestError::LbaOutOfRange { slba, blocks: 1, capacity_blocks: self.capacity_blocks });
        }
        let header = crate::spec::zns::REPORT_HEADER_SIZE;
        self.check_descriptor_buffer(&buffer, header)?;
        let len = (buffer.len() as u64).min(self.max_transfer_bytes) as usize / 4 * 4;
        let command = zns_cmd::report_zones(self.nsid, slba, len as u32, filter, partial, 0, 0);
        Ok(Request { command, buffer: Some(buffer.truncate(len)), metadata: None, token })
    }

    fn check_descriptor_buffer(&self, buffer: &IoBuffer, needed: usize) -> Checked<()> {
        if buffer.len() < needed {
            return Err(RequestError::BufferTooSmall { needed: needed as u64, got: buffer.len() as u64 });
        }
        if buffer.iova() & 0b11 != 0 {
            return Err(RequestError::Misaligned { iova: buffer.iova() });
        }
        Ok(())
    }
}

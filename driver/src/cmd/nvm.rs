//! NVM Command Set I/O command builders (NVM Command Set 1.0 §3.2; Flush is
//! NVMe Base 2.0 §7.1).
//!
//! Conventions shared by every builder here:
//!
//! - `blocks` is the 1-based number of logical blocks, `1..=`[`MAX_BLOCKS`].
//!   The wire field NLB (CDW12 bits 15:0) is 0-based; the conversion happens
//!   here and nowhere else.
//! - The starting LBA goes in CDW10 (bits 31:0) and CDW11 (bits 63:32).
//! - PRP1 and PRP2 stay 0: the queue pair fills in the data pointer when it
//!   submits, as it fills in the Command Identifier.
//! - Out-of-range counts are caller bugs, caught by `debug_assert!`: the
//!   namespace layer validates user input (against NSZE, MDTS, DMRL, MSRC …)
//!   and returns typed errors before it calls a builder. Release builds clamp
//!   a count into its wire range rather than let it wrap, so a bug can shorten
//!   or lengthen a command but never turn 65537 blocks into 1.
//!
//! Read, Compare and Verify take no FUA argument; callers that need Force
//! Unit Access or Limited Retry on them can OR [`CDW12_FUA`] or [`CDW12_LR`]
//! into `cdw12` of the result.

use core::mem::{offset_of, size_of};

use crate::spec::command::opcode::nvm as op;
use crate::spec::command::Command;

/// Most logical blocks one command can address: NLB is a 16-bit 0-based
/// field. The controller's MDTS may allow fewer for commands that transfer
/// data, and WZSL fewer for Write Zeroes; the namespace layer applies those.
pub const MAX_BLOCKS: u32 = 1 << 16;

/// [`MAX_BLOCKS`], as a function.
pub const fn max_blocks_per_command() -> u32 {
    MAX_BLOCKS
}

/// CDW12 bits 15:0 – Number of Logical Blocks (NLB), 0-based.
const CDW12_NLB_MASK: u32 = 0xFFFF;
/// CDW12 bit 25 – Deallocate (DEAC), Write Zeroes only (NVM Command Set 1.0
/// §3.2.8): the controller should deallocate the blocks rather than write
/// zeroes to the media.
pub const CDW12_DEAC: u32 = 1 << 25;
/// CDW12 bit 30 – Force Unit Access (FUA): the data reaches non-volatile
/// media before the command completes.
pub const CDW12_FUA: u32 = 1 << 30;
/// CDW12 bit 31 – Limited Retry (LR): the controller applies limited retry
/// efforts rather than all available error recovery.
pub const CDW12_LR: u32 = 1 << 31;

/// Converts a 1-based block count to NLB (CDW12 bits 15:0, 0-based).
pub(crate) fn cdw12_nlb(blocks: u32) -> u32 {
    debug_assert!((1..=MAX_BLOCKS).contains(&blocks), "{blocks} blocks is outside 1..={MAX_BLOCKS}");
    (blocks.clamp(1, MAX_BLOCKS) - 1) & CDW12_NLB_MASK
}

/// CDW12 FUA bit for `fua`.
pub(crate) const fn cdw12_fua(fua: bool) -> u32 {
    if fua {
        CDW12_FUA
    } else {
        0
    }
}

/// The blocks CDW12's NLB field (0's based) addresses.
pub(crate) const fn cdw12_blocks(cdw12: u32) -> u32 {
    (cdw12 & CDW12_NLB_MASK) + 1
}

/// Makes `command` the `opcode` command over `blocks` blocks from `slba`
/// with CDW12 flags `flags`, as [`read`] or [`write`] would build it, with
/// its namespace, data pointer and metadata pointer kept: a command sent
/// again from its slot with the same buffers.
pub(crate) fn retarget(command: &mut Command, opcode: u8, slba: u64, blocks: u32, flags: u32) {
    (command.cdw10, command.cdw11) = lba_dwords(slba);
    command.opcode = opcode;
    command.cdw12 = flags | cdw12_nlb(blocks);
    (command.cdw2, command.cdw3, command.cdw13, command.cdw14, command.cdw15) = (0, 0, 0, 0, 0);
}

/// A 64-bit LBA split into (CDW10, CDW11): bits 31:0 and 63:32.
pub(crate) const fn lba_dwords(lba: u64) -> (u32, u32) {
    (lba as u32, (lba >> 32) as u32)
}

/// Converts a 1-based range count (`1..=max`) to the 0-based 8-bit NR field
/// of Dataset Management and Copy.
fn number_of_ranges(ranges: u16, max: usize) -> u32 {
    debug_assert!((1..=max).contains(&usize::from(ranges)), "{ranges} ranges is outside 1..={max}");
    let max = u16::try_from(max).unwrap_or(u16::MAX);
    u32::from(ranges.clamp(1, max) - 1) & NR_MASK
}

/// NR – Number of Ranges: bits 7:0 of CDW10 (Dataset Management) or CDW12
/// (Copy), 0-based.
const NR_MASK: u32 = 0xFF;

/// A command addressing `blocks` blocks from `slba`, with extra CDW12 bits.
fn lba_command(opcode: u8, nsid: u32, slba: u64, blocks: u32, cdw12_flags: u32) -> Command {
    let (cdw10, cdw11) = lba_dwords(slba);
    Command { nsid, cdw10, cdw11, cdw12: cdw12_flags | cdw12_nlb(blocks), ..Command::new(opcode) }
}

/// Read (opcode 02h, NVM Command Set 1.0 §3.2.4) `blocks` logical blocks
/// from `slba`.
pub fn read(nsid: u32, slba: u64, blocks: u32) -> Command {
    lba_command(op::READ, nsid, slba, blocks, 0)
}

/// Write (opcode 01h, NVM Command Set 1.0 §3.2.6) `blocks` logical blocks
/// at `slba`; with `fua`, the data is on non-volatile media when the command
/// completes.
pub fn write(nsid: u32, slba: u64, blocks: u32, fua: bool) -> Command {
    lba_command(op::WRITE, nsid, slba, blocks, cdw12_fua(fua))
}

/// Flush (opcode 00h, NVMe Base 2.0 §7.1): commit the volatile write cache
/// of namespace `nsid` to non-volatile media. NSID FFFFFFFFh flushes every
/// namespace if Identify Controller VWC bits 2:1 say the controller supports
/// it.
pub fn flush(nsid: u32) -> Command {
    Command { nsid, ..Command::new(op::FLUSH) }
}

/// Write Zeroes (opcode 08h, NVM Command Set 1.0 §3.2.8) over `blocks`
/// logical blocks from `slba`. No data is transferred, so WZSL rather than
/// MDTS limits `blocks`. With `deallocate` (DEAC) the host also asks the
/// controller to deallocate the blocks; reads return zeroes either way.
/// Identify Namespace DLFEAT bit 3 says whether the controller supports it.
pub fn write_zeroes(nsid: u32, slba: u64, blocks: u32, deallocate: bool, fua: bool) -> Command {
    let deac = if deallocate { CDW12_DEAC } else { 0 };
    lba_command(op::WRITE_ZEROES, nsid, slba, blocks, deac | cdw12_fua(fua))
}

/// Compare (opcode 05h, NVM Command Set 1.0 §3.2.1) `blocks` logical blocks
/// from `slba` with the data buffer; a mismatch completes with Compare
/// Failure.
pub fn compare(nsid: u32, slba: u64, blocks: u32) -> Command {
    lba_command(op::COMPARE, nsid, slba, blocks, 0)
}

/// Verify (opcode 0Ch, NVM Command Set 1.0 §3.2.5) `blocks` logical blocks
/// from `slba`: the controller reads and checks them (and their protection
/// information) without transferring data to the host.
pub fn verify(nsid: u32, slba: u64, blocks: u32) -> Command {
    lba_command(op::VERIFY, nsid, slba, blocks, 0)
}

/// Most ranges one Dataset Management command carries: NR is an 8-bit
/// 0-based field. 256 ranges of 16 bytes fill exactly one 4 KiB page.
pub const DSM_MAX_RANGES: usize = 256;
/// Bytes in one Dataset Management range.
pub const DSM_RANGE_SIZE: usize = 16;

/// One Dataset Management range (NVM Command Set 1.0 §3.2.3, "Dataset
/// Management – Range Definition").
///
/// Unlike NLB in commands and in Copy source ranges, the range's Length is
/// **not** 0-based: it is the number of logical blocks, so `nlb` here holds
/// the same 1-based count the caller passes as `blocks`, and a range may
/// cover up to `u32::MAX` blocks (the controller's DMRSL may allow fewer).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DsmRange {
    /// Bytes 03:00 – Context Attributes (access frequency, latency,
    /// sequential request, write prepare, command access size). 0 says
    /// nothing about the access pattern.
    pub context_attributes: u32,
    /// Bytes 07:04 – Length in logical blocks, 1-based.
    pub nlb: u32,
    /// Bytes 15:08 – Starting LBA.
    pub slba: u64,
}

const _: () = assert!(size_of::<DsmRange>() == DSM_RANGE_SIZE);
const _: () = assert!(offset_of!(DsmRange, context_attributes) == 0);
const _: () = assert!(offset_of!(DsmRange, nlb) == 4);
const _: () = assert!(offset_of!(DsmRange, slba) == 8);
const _: () = assert!(DSM_MAX_RANGES * DSM_RANGE_SIZE == 4096);

impl DsmRange {
    /// A range of `blocks` logical blocks (1-based, at least 1) from `slba`,
    /// with no context attributes.
    pub fn new(slba: u64, blocks: u32) -> Self {
        debug_assert!(blocks >= 1, "a Dataset Management range is not empty");
        Self { context_attributes: 0, nlb: blocks, slba }
    }

    /// The range as it appears on the wire (little-endian).
    pub fn to_bytes(&self) -> [u8; DSM_RANGE_SIZE] {
        let mut out = [0u8; DSM_RANGE_SIZE];
        out[0..4].copy_from_slice(&self.context_attributes.to_le_bytes());
        out[4..8].copy_from_slice(&self.nlb.to_le_bytes());
        out[8..16].copy_from_slice(&self.slba.to_le_bytes());
        out
    }

    /// Decodes a wire image, the inverse of [`DsmRange::to_bytes`]. Used by
    /// simulated controllers and tests.
    pub fn from_bytes(bytes: &[u8; DSM_RANGE_SIZE]) -> Self {
        use crate::spec::le::{u32_at, u64_at};
        Self { context_attributes: u32_at(bytes, 0), nlb: u32_at(bytes, 4), slba: u64_at(bytes, 8) }
    }
}

bitflags::bitflags! {
    /// Dataset Management CDW11 attributes (NVM Command Set 1.0 §3.2.3).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct DsmAttributes: u32 {
        /// IDR – Attribute – Integral Dataset for Read: the ranges are
        /// read as a whole.
        const INTEGRAL_READ = 1 << 0;
        /// IDW – Attribute – Integral Dataset for Write: the ranges are
        /// written as a whole.
        const INTEGRAL_WRITE = 1 << 1;
        /// AD – Attribute – Deallocate: deallocate the ranges (trim).
        const DEALLOCATE = 1 << 2;
    }
}

/// Dataset Management (opcode 09h, NVM Command Set 1.0 §3.2.3) over `ranges`
/// [`DsmRange`]s (1-based, `1..=`[`DSM_MAX_RANGES`]) in the data buffer,
/// which the queue pair points PRP1 at: `ranges * 16` bytes, at most one
/// page. CDW10 bits 7:0 = NR (0-based), CDW11 = `attributes`.
pub fn dataset_management(nsid: u32, ranges: u16, attributes: DsmAttributes) -> Command {
    Command {
        nsid,
        cdw10: number_of_ranges(ranges, DSM_MAX_RANGES),
        cdw11: attributes.bits(),
        ..Command::new(op::DATASET_MANAGEMENT)
    }
}

/// Most source ranges one Copy command carries: NR is an 8-bit 0-based
/// field. The controller's MSRC (Identify Namespace, 0-based) may allow
/// fewer. 256 format 0h entries take 8 KiB, two pages.
pub const COPY_MAX_RANGES: usize = 256;
/// Bytes in one Copy source range entry, format 0h.
pub const COPY_SOURCE_RANGE_SIZE: usize = 32;
/// Copy CDW12 bits 11:8 – Descriptor Format 0h: 32-byte source range
/// entries with 16-bit NLB and 32-bit reference tags.
pub const COPY_DESCRIPTOR_FORMAT_0: u8 = 0x0;
/// Copy CDW12 bits 11:8 – Descriptor Format 2h: format 0h's entries with a
/// Source Namespace Identifier in bytes 03:00 (NVM Command Set 1.1
/// §3.3.2, Figure 39). The host enables it first (Host Behavior Support
/// CDFE bit 2).
pub const COPY_DESCRIPTOR_FORMAT_2: u8 = 0x2;
/// Descriptor Format is a 4-bit field.
const COPY_DESFMT_MAX: u8 = 0xF;
/// Shift of the Descriptor Format field in Copy CDW12.
const COPY_CDW12_DESFMT_SHIFT: u32 = 8;

/// One Copy source range entry in descriptor format 0h (NVM Command Set 1.0
/// §3.2.2, "Copy – Source Range Entries Copy Descriptor Format 0h").
///
/// Here, unlike in a [`DsmRange`], `nlb` is 0-based, as in the I/O
/// commands: [`CopySourceRange::new`] takes a 1-based `blocks` and stores
/// `blocks - 1`. The controller's MSSRL and MCL (Identify Namespace) may
/// allow fewer blocks per range and per command than the field can say.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopySourceRange {
    /// Bytes 07:00 – reserved.
    rsvd0: u64,
    /// Bytes 15:08 – Starting LBA.
    pub slba: u64,
    /// Bytes 17:16 – Number of Logical Blocks, 0-based.
    pub nlb: u16,
    /// Bytes 23:18 – reserved.
    rsvd18: [u8; 6],
    /// Bytes 27:24 – Expected Initial Logical Block Reference Tag, checked
    /// only with end-to-end protection (PRINFOR).
    pub eilbrt: u32,
    /// Bytes 29:28 – Expected Logical Block Application Tag.
    pub elbat: u16,
    /// Bytes 31:30 – Expected Logical Block Application Tag Mask.
    pub elbatm: u16,
}

const _: () = assert!(size_of::<CopySourceRange>() == COPY_SOURCE_RANGE_SIZE);
const _: () = assert!(offset_of!(CopySourceRange, rsvd0) == 0);
const _: () = assert!(offset_of!(CopySourceRange, slba) == 8);
const _: () = assert!(offset_of!(CopySourceRange, nlb) == 16);
const _: () = assert!(offset_of!(CopySourceRange, rsvd18) == 18);
const _: () = assert!(offset_of!(CopySourceRange, eilbrt) == 24);
const _: () = assert!(offset_of!(CopySourceRange, elbat) == 28);
const _: () = assert!(offset_of!(CopySourceRange, elbatm) == 30);

impl CopySourceRange {
    /// A source range of `blocks` logical blocks (1-based,
    /// `1..=`[`MAX_BLOCKS`]) from `slba`, without protection information.
    pub fn new(slba: u64, blocks: u32) -> Self {
        Self {
            slba,
            // Same 16-bit 0-based encoding as CDW12 NLB.
            nlb: cdw12_nlb(blocks) as u16,
            ..Self::default()
        }
    }

    /// The entry as it appears on the wire (little-endian).
    pub fn to_bytes(&self) -> [u8; COPY_SOURCE_RANGE_SIZE] {
        let mut out = [0u8; COPY_SOURCE_RANGE_SIZE];
        out[0..8].copy_from_slice(&self.rsvd0.to_le_bytes());
        out[8..16].copy_from_slice(&self.slba.to_le_bytes());
        out[16..18].copy_from_slice(&self.nlb.to_le_bytes());
        out[18..24].copy_from_slice(&self.rsvd18);
        out[24..28].copy_from_slice(&self.eilbrt.to_le_bytes());
        out[28..30].copy_from_slice(&self.elbat.to_le_bytes());
        out[30..32].copy_from_slice(&self.elbatm.to_le_bytes());
        out
    }

    /// Decodes a wire image, the inverse of [`CopySourceRange::to_bytes`].
    /// Reserved bytes are kept, so a simulated controller can check them.
    pub fn from_bytes(bytes: &[u8; COPY_SOURCE_RANGE_SIZE]) -> Self {
        use crate::spec::le::{bytes as array_at, u16_at, u32_at, u64_at};
        Self {
            rsvd0: u64_at(bytes, 0),
            slba: u64_at(bytes, 8),
            nlb: u16_at(bytes, 16),
            rsvd18: array_at(bytes, 18),
            eilbrt: u32_at(bytes, 24),
            elbat: u16_at(bytes, 28),
            elbatm: u16_at(bytes, 30),
        }
    }

    /// Whether the reserved bytes are all zero, as the spec requires.
    pub fn reserved_is_zero(&self) -> bool {
        self.rsvd0 == 0 && self.rsvd18 == [0; 6]
    }

    /// The number of logical blocks, 1-based.
    pub const fn blocks(&self) -> u32 {
        self.nlb as u32 + 1
    }
}

/// One Copy source range entry in descriptor format 2h (NVM Command Set
/// 1.1 §3.3.2, "Copy – Source Range Entries Copy Descriptor Format 0h and
/// Format 2h"): format 0h's entry whose bytes 03:00 name the source
/// namespace, which may differ from the destination (the command's NSID).
///
/// `nlb` is 0-based, as in [`CopySourceRange`]. The protection
/// information fields (ELBT, ELBAT, ELBATM) are ignored for a source
/// namespace without protection information, the only kind this driver
/// copies from.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopySourceRangeFormat2 {
    /// Bytes 03:00 – Source Namespace Identifier (SNSID).
    pub snsid: u32,
    /// Bytes 07:04 – reserved.
    rsvd4: u32,
    /// Bytes 15:08 – Starting LBA.
    pub slba: u64,
    /// Bytes 17:16 – Number of Logical Blocks, 0-based (RPARS bits 15:0).
    pub nlb: u16,
    /// Byte 18 – Command Extension Type in bits 3:0 (RPARS bits 19:16);
    /// bits 7:4 reserved. 0: no command extension (Key Per I/O).
    pub cetype: u8,
    /// Byte 19 – reserved (RPARS bits 31:24).
    rsvd19: u8,
    /// Bytes 21:20 – Command Extension Value, used with CETYPE.
    pub cev: u16,
    /// Bytes 23:22 – Source Options: bit 15 Fast Copy Only (FCO), bits
    /// 14:0 reserved.
    pub sopt: u16,
    /// Bytes 27:24 – Expected Logical Block Tags (ELBT).
    pub elbt: u32,
    /// Bytes 29:28 – Expected Logical Block Application Tag.
    pub elbat: u16,
    /// Bytes 31:30 – Expected Logical Block Application Tag Mask.
    pub elbatm: u16,
}

const _: () = assert!(size_of::<CopySourceRangeFormat2>() == COPY_SOURCE_RANGE_SIZE);
const _: () = assert!(offset_of!(CopySourceRangeFormat2, snsid) == 0);
const _: () = assert!(offset_of!(CopySourceRangeFormat2, rsvd4) == 4);
const _: () = assert!(offset_of!(CopySourceRangeFormat2, slba) == 8);
const _: () = assert!(offset_of!(CopySourceRangeFormat2, nlb) == 16);
const _: () = assert!(offset_of!(CopySourceRangeFormat2, cetype) == 18);
const _: () = assert!(offset_of!(CopySourceRangeFormat2, rsvd19) == 19);
const _: () = assert!(offset_of!(CopySourceRangeFormat2, cev) == 20);
const _: () = assert!(offset_of!(CopySourceRangeFormat2, sopt) == 22);
const _: () = assert!(offset_of!(CopySourceRangeFormat2, elbt) == 24);
const _: () = assert!(offset_of!(CopySourceRangeFormat2, elbat) == 28);
const _: () = assert!(offset_of!(CopySourceRangeFormat2, elbatm) == 30);

/// CETYPE: bits 3:0 of byte 18 of a format 2h entry.
const CETYPE_MASK: u8 = 0xF;
/// SOPT bit 15: Fast Copy Only.
pub const COPY_SOPT_FAST_COPY_ONLY: u16 = 1 << 15;

impl CopySourceRangeFormat2 {
    /// A source range of `blocks` logical blocks (1-based,
    /// `1..=`[`MAX_BLOCKS`]) from `slba` of namespace `snsid`, without
    /// protection information, command extension or source options.
    pub fn new(snsid: u32, slba: u64, blocks: u32) -> Self {
        Self { snsid, slba, nlb: cdw12_nlb(blocks) as u16, ..Self::default() }
    }

    /// The entry as it appears on the wire (little-endian).
    pub fn to_bytes(&self) -> [u8; COPY_SOURCE_RANGE_SIZE] {
        let mut out = [0u8; COPY_SOURCE_RANGE_SIZE];
        out[0..4].copy_from_slice(&self.snsid.to_le_bytes());
        out[4..8].copy_from_slice(&self.rsvd4.to_le_bytes());
        out[8..16].copy_from_slice(&self.slba.to_le_bytes());
        out[16..18].copy_from_slice(&self.nlb.to_le_bytes());
        out[18] = self.cetype;
        out[19] = self.rsvd19;
        out[20..22].copy_from_slice(&self.cev.to_le_bytes());
        out[22..24].copy_from_slice(&self.sopt.to_le_bytes());
        out[24..28].copy_from_slice(&self.elbt.to_le_bytes());
        out[28..30].copy_from_slice(&self.elbat.to_le_bytes());
        out[30..32].copy_from_slice(&self.elbatm.to_le_bytes());
        out
    }

    /// Decodes a wire image, the inverse of
    /// [`CopySourceRangeFormat2::to_bytes`]. Reserved bits are kept, so a
    /// simulated controller can check them.
    pub fn from_bytes(bytes: &[u8; COPY_SOURCE_RANGE_SIZE]) -> Self {
        use crate::spec::le::{u16_at, u32_at, u64_at, u8_at};
        Self {
            snsid: u32_at(bytes, 0),
            rsvd4: u32_at(bytes, 4),
            slba: u64_at(bytes, 8),
            nlb: u16_at(bytes, 16),
            cetype: u8_at(bytes, 18),
            rsvd19: u8_at(bytes, 19),
            cev: u16_at(bytes, 20),
            sopt: u16_at(bytes, 22),
            elbt: u32_at(bytes, 24),
            elbat: u16_at(bytes, 28),
            elbatm: u16_at(bytes, 30),
        }
    }

    /// Whether the reserved bits (bytes 07:04, byte 18 bits 7:4, byte 19,
    /// SOPT bits 14:0) are all zero, as the spec requires.
    pub fn reserved_is_zero(&self) -> bool {
        self.rsvd4 == 0
            && self.cetype & !CETYPE_MASK == 0
            && self.rsvd19 == 0
            && self.sopt & !COPY_SOPT_FAST_COPY_ONLY == 0
    }

    /// The number of logical blocks, 1-based.
    pub const fn blocks(&self) -> u32 {
        self.nlb as u32 + 1
    }
}

/// Copy (opcode 19h, NVM Command Set 1.0 §3.2.2): copy the blocks of
/// `ranges` [`CopySourceRange`]s (1-based, `1..=`[`COPY_MAX_RANGES`]) in
/// the data buffer to consecutive blocks from `sdlba` in the same namespace.
///
/// CDW10/11 = SDLBA; CDW12 bits 7:0 = NR (0-based), bits 11:8 = Descriptor
/// Format 0h, bit 30 = FUA. The queue pair points the data pointer at
/// `ranges * 32` bytes, which span two pages beyond 128 ranges. The
/// controller must support Copy (ONCS bit 8) and format 0h (OCFS bit 0).
pub fn copy(nsid: u32, sdlba: u64, ranges: u16, fua: bool) -> Command {
    copy_with_format(nsid, sdlba, ranges, COPY_DESCRIPTOR_FORMAT_0, fua)
}

/// Copy (opcode 19h, NVM Command Set 1.1 §3.3.2) with source range entries
/// in Descriptor Format `format` (CDW12 bits 11:8, `COPY_DESCRIPTOR_FORMAT_*`)
/// to consecutive blocks from `sdlba` in namespace `nsid`. With
/// [`COPY_DESCRIPTOR_FORMAT_2`] the entries are
/// [`CopySourceRangeFormat2`]s and each names its source namespace; the
/// controller must support the format (CDFS, see
/// [`crate::spec::identify::IdentifyController::copy_formats`]) and the
/// host must have enabled it (Host Behavior Support CDFE). Otherwise as
/// [`copy`].
pub fn copy_with_format(nsid: u32, sdlba: u64, ranges: u16, format: u8, fua: bool) -> Command {
    debug_assert!(format <= COPY_DESFMT_MAX, "Descriptor Format {format:#x} is 4 bits");
    let (cdw10, cdw11) = lba_dwords(sdlba);
    Command {
        nsid,
        cdw10,
        cdw11,
        cdw12: cdw12_fua(fua)
            | u32::from(format & COPY_DESFMT_MAX) << COPY_CDW12_DESFMT_SHIFT
            | number_of_ranges(ranges, COPY_MAX_RANGES),
        ..Command::new(op::COPY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 64-byte SQE image from (byte offset, bytes) pairs, laid out by hand
    /// from the spec, independent of `Command`.
    fn sqe(fields: &[(usize, &[u8])]) -> [u8; 64] {
        let mut out = [0u8; 64];
        for (offset, bytes) in fields {
            out[*offset..*offset + bytes.len()].copy_from_slice(bytes);
        }
        out
    }

    /// NSID 1.
    const NSID_BYTES: [u8; 4] = [0x01, 0x00, 0x00, 0x00];
    /// An SLBA above 4 G blocks: 0x0000_0012_3456_789A.
    const SLBA: u64 = 0x0000_0012_3456_789A;
    const SLBA_LOW: [u8; 4] = [0x9A, 0x78, 0x56, 0x34];
    const SLBA_HIGH: [u8; 4] = [0x12, 0x00, 0x00, 0x00];

    #[test]
    fn a_command_retargeted_is_the_one_built_new_with_its_pointers_kept() {
        let pointed = |mut command: Command| {
            (command.flags, command.mptr, command.prp1, command.prp2) = (0x40, 0x1000, 0x2000, 0x3000);
            command
        };
        let mut command = pointed(compare(1, 0, 1));
        command.cdw13 = 0x55;
        command.cdw2 = 7;
        for (opcode, flags, fresh) in [
            (op::READ, 0, read(1, SLBA, 8)),
            (op::WRITE, CDW12_FUA, write(1, SLBA, 8, true)),
            (op::WRITE, 0, write(1, 3, 65536, false)),
        ] {
            let blocks = cdw12_blocks(fresh.cdw12);
            let slba = u64::from(fresh.cdw11) << 32 | u64::from(fresh.cdw10);
            retarget(&mut command, opcode, slba, blocks, flags);
            assert_eq!(command, pointed(fresh));
        }
        assert_eq!(cdw12_blocks(read(1, 0, 1).cdw12), 1);
        assert_eq!(cdw12_blocks(read(1, 0, MAX_BLOCKS).cdw12), MAX_BLOCKS);
    }

    #[test]
    fn read_bytes() {
        let expected = sqe(&[
            (0, &[0x02]),
            (4, &NSID_BYTES),
            (40, &SLBA_LOW),
            (44, &SLBA_HIGH),
            (48, &[0x07, 0x00, 0x00, 0x00]), // 8 blocks: NLB 7
        ]);
        assert_eq!(read(1, SLBA, 8).to_bytes(), expected);
    }

    #[test]
    fn write_bytes() {
        let expected = sqe(&[
            (0, &[0x01]),
            (4, &NSID_BYTES),
            (40, &SLBA_LOW),
            (44, &SLBA_HIGH),
            (48, &[0xFF, 0x00, 0x00, 0x40]), // 256 blocks, FUA (bit 30)
        ]);
        assert_eq!(write(1, SLBA, 256, true).to_bytes(), expected);
        let plain = sqe(&[
            (0, &[0x01]),
            (4, &NSID_BYTES),
            (48, &[0x00, 0x00, 0x00, 0x00]), // 1 block: NLB 0
        ]);
        assert_eq!(write(1, 0, 1, false).to_bytes(), plain);
    }

    #[test]
    fn flush_bytes() {
        let expected = sqe(&[(0, &[0x00]), (4, &[0xFF, 0xFF, 0xFF, 0xFF])]);
        assert_eq!(flush(0xFFFF_FFFF).to_bytes(), expected);
        assert_eq!(flush(1).to_bytes(), sqe(&[(0, &[0x00]), (4, &NSID_BYTES)]));
    }

    #[test]
    fn write_zeroes_bytes() {
        let expected = sqe(&[
            (0, &[0x08]),
            (4, &NSID_BYTES),
            (40, &SLBA_LOW),
            (44, &SLBA_HIGH),
            // 65536 blocks: NLB FFFFh; DEAC (bit 25) and FUA (bit 30).
            (48, &[0xFF, 0xFF, 0x00, 0x42]),
        ]);
        assert_eq!(write_zeroes(1, SLBA, MAX_BLOCKS, true, true).to_bytes(), expected);
        let deac_only = sqe(&[(0, &[0x08]), (4, &NSID_BYTES), (48, &[0x0F, 0x00, 0x00, 0x02])]);
        assert_eq!(write_zeroes(1, 0, 16, true, false).to_bytes(), deac_only);
    }

    #[test]
    fn compare_bytes() {
        let expected = sqe(&[
            (0, &[0x05]),
            (4, &[0x02, 0x00, 0x00, 0x00]),
            (40, &[0x00, 0x10, 0x00, 0x00]),
            (48, &[0x00, 0x01, 0x00, 0x00]), // 257 blocks: NLB 100h
        ]);
        assert_eq!(compare(2, 0x1000, 257).to_bytes(), expected);
    }

    #[test]
    fn verify_bytes() {
        let expected = sqe(&[
            (0, &[0x0C]),
            (4, &NSID_BYTES),
            (40, &[0xFF, 0xFF, 0xFF, 0xFF]),
            (44, &[0xFF, 0xFF, 0xFF, 0xFF]),
            (48, &[0xFE, 0xFF, 0x00, 0x00]), // 65535 blocks: NLB FFFEh
        ]);
        assert_eq!(verify(1, u64::MAX, 65535).to_bytes(), expected);
    }

    #[test]
    fn flags_and_limits() {
        assert_eq!(CDW12_FUA, 0x4000_0000);
        assert_eq!(CDW12_LR, 0x8000_0000);
        assert_eq!(CDW12_DEAC, 0x0200_0000);
        assert_eq!(MAX_BLOCKS, 65536);
        assert_eq!(max_blocks_per_command(), MAX_BLOCKS);
        // PRPs and CID are left to the queue pair.
        for cmd in [
            read(1, SLBA, 1),
            write(1, SLBA, 1, true),
            write_zeroes(1, SLBA, 1, true, true),
            compare(1, SLBA, 1),
            verify(1, SLBA, 1),
            flush(1),
            dataset_management(1, 1, DsmAttributes::all()),
            copy(1, SLBA, 1, true),
        ] {
            assert_eq!((cmd.cid, cmd.flags, cmd.mptr), (0, 0, 0));
            assert_eq!((cmd.prp1, cmd.prp2), (0, 0));
            assert_eq!((cmd.cdw2, cmd.cdw3), (0, 0));
            assert_eq!((cmd.cdw13, cmd.cdw14, cmd.cdw15), (0, 0, 0));
        }
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "outside 1..=65536")]
    fn zero_blocks_is_a_bug() {
        let _ = read(1, 0, 0);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "outside 1..=65536")]
    fn too_many_blocks_is_a_bug() {
        let _ = write(1, 0, MAX_BLOCKS + 1, false);
    }

    #[test]
    fn dataset_management_bytes() {
        let expected = sqe(&[
            (0, &[0x09]),
            (4, &NSID_BYTES),
            (40, &[0x02, 0x00, 0x00, 0x00]), // 3 ranges: NR 2
            (44, &[0x04, 0x00, 0x00, 0x00]), // AD
        ]);
        assert_eq!(dataset_management(1, 3, DsmAttributes::DEALLOCATE).to_bytes(), expected);
        let all = sqe(&[
            (0, &[0x09]),
            (4, &NSID_BYTES),
            (40, &[0xFF, 0x00, 0x00, 0x00]), // 256 ranges: NR FFh
            (44, &[0x07, 0x00, 0x00, 0x00]), // AD | IDW | IDR
        ]);
        assert_eq!(dataset_management(1, 256, DsmAttributes::all()).to_bytes(), all);
        assert_eq!(DsmAttributes::INTEGRAL_READ.bits(), 0b001);
        assert_eq!(DsmAttributes::INTEGRAL_WRITE.bits(), 0b010);
        assert_eq!(DsmAttributes::DEALLOCATE.bits(), 0b100);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "outside 1..=256")]
    fn too_many_dsm_ranges_is_a_bug() {
        let _ = dataset_management(1, 257, DsmAttributes::DEALLOCATE);
    }

    #[test]
    fn dsm_range_layout() {
        assert_eq!(size_of::<DsmRange>(), 16);
        assert_eq!(offset_of!(DsmRange, context_attributes), 0);
        assert_eq!(offset_of!(DsmRange, nlb), 4);
        assert_eq!(offset_of!(DsmRange, slba), 8);
        // Length is 1-based: 8 blocks is 8 on the wire, not 7.
        let range = DsmRange::new(SLBA, 8);
        let expected: [u8; 16] = [
            0x00, 0x00, 0x00, 0x00, // Context Attributes
            0x08, 0x00, 0x00, 0x00, // Length: 8 blocks
            0x9A, 0x78, 0x56, 0x34, 0x12, 0x00, 0x00, 0x00, // SLBA
        ];
        assert_eq!(range.to_bytes(), expected);
        assert_eq!(DsmRange::from_bytes(&expected), range);
        let with_attributes = DsmRange { context_attributes: 0x0100_0402, nlb: u32::MAX, slba: 0 };
        let expected: [u8; 16] =
            [0x02, 0x04, 0x00, 0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00];
        assert_eq!(with_attributes.to_bytes(), expected);
        assert_eq!(DsmRange::default().to_bytes(), [0u8; 16]);
    }

    #[test]
    fn copy_bytes() {
        let expected = sqe(&[
            (0, &[0x19]),
            (4, &NSID_BYTES),
            (40, &SLBA_LOW),  // SDLBA
            (44, &SLBA_HIGH), //
            // 2 ranges: NR 1; Descriptor Format 0h; FUA (bit 30).
            (48, &[0x01, 0x00, 0x00, 0x40]),
        ]);
        assert_eq!(copy(1, SLBA, 2, true).to_bytes(), expected);
        let max = sqe(&[
            (0, &[0x19]),
            (4, &NSID_BYTES),
            (48, &[0xFF, 0x00, 0x00, 0x00]), // 256 ranges: NR FFh
        ]);
        assert_eq!(copy(1, 0, 256, false).to_bytes(), max);
    }

    #[test]
    fn copy_format_2_bytes() {
        let expected = sqe(&[
            (0, &[0x19]),
            (4, &[0x02, 0x00, 0x00, 0x00]), // destination NSID 2
            (40, &SLBA_LOW),                // SDLBA
            (44, &SLBA_HIGH),               //
            // 3 ranges: NR 2; Descriptor Format 2h in bits 11:8.
            (48, &[0x02, 0x02, 0x00, 0x00]),
        ]);
        assert_eq!(copy_with_format(2, SLBA, 3, COPY_DESCRIPTOR_FORMAT_2, false).to_bytes(), expected);
        assert_eq!(copy_with_format(1, SLBA, 2, COPY_DESCRIPTOR_FORMAT_0, true), copy(1, SLBA, 2, true));
        let fua = copy_with_format(1, 0, 256, COPY_DESCRIPTOR_FORMAT_2, true);
        assert_eq!(fua.cdw12, 0x4000_02FF);
    }

    #[test]
    fn copy_source_range_format_2_layout() {
        assert_eq!(size_of::<CopySourceRangeFormat2>(), 32);
        // Namespace 7, 8 blocks from SLBA: SNSID in bytes 03:00, NLB 0-based.
        let range = CopySourceRangeFormat2::new(7, SLBA, 8);
        let mut expected = [0u8; 32];
        expected[0..4].copy_from_slice(&[0x07, 0x00, 0x00, 0x00]);
        expected[8..16].copy_from_slice(&[0x9A, 0x78, 0x56, 0x34, 0x12, 0x00, 0x00, 0x00]);
        expected[16..18].copy_from_slice(&[0x07, 0x00]);
        assert_eq!(range.to_bytes(), expected);
        assert_eq!(range.blocks(), 8);
        assert!(range.reserved_is_zero());
        assert_eq!(CopySourceRangeFormat2::from_bytes(&expected), range);
        // The same range in format 0h differs only in bytes 03:00.
        let format_0 = CopySourceRange::new(SLBA, 8).to_bytes();
        assert_eq!(format_0[4..], expected[4..]);
        assert_eq!(format_0[..4], [0; 4]);

        let full = CopySourceRangeFormat2 {
            cetype: 0x1,
            cev: 0xBEEF,
            sopt: COPY_SOPT_FAST_COPY_ONLY,
            elbt: 0x1122_3344,
            elbat: 0x5566,
            elbatm: 0xFFFF,
            ..CopySourceRangeFormat2::new(0xFFFF_FFFE, 0, MAX_BLOCKS)
        };
        let expected: [u8; 32] = [
            0xFE, 0xFF, 0xFF, 0xFF, // SNSID
            0, 0, 0, 0, // reserved
            0, 0, 0, 0, 0, 0, 0, 0, // SLBA
            0xFF, 0xFF, // NLB: 65536 blocks
            0x01, 0x00, // CETYPE 1h, reserved
            0xEF, 0xBE, // CEV
            0x00, 0x80, // SOPT: FCO
            0x44, 0x33, 0x22, 0x11, // ELBT
            0x66, 0x55, // ELBAT
            0xFF, 0xFF, // ELBATM
        ];
        assert_eq!(full.to_bytes(), expected);
        assert!(full.reserved_is_zero());
        for dirty_byte in [5, 19] {
            let mut dirty = expected;
            dirty[dirty_byte] = 1;
            assert!(!CopySourceRangeFormat2::from_bytes(&dirty).reserved_is_zero(), "byte {dirty_byte}");
            assert_eq!(CopySourceRangeFormat2::from_bytes(&dirty).to_bytes(), dirty);
        }
        let mut dirty = expected;
        dirty[22] = 0x01; // SOPT bit 0
        assert!(!CopySourceRangeFormat2::from_bytes(&dirty).reserved_is_zero());
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "outside 1..=256")]
    fn zero_copy_ranges_is_a_bug() {
        let _ = copy(1, 0, 0, false);
    }

    #[test]
    fn copy_source_range_layout() {
        assert_eq!(size_of::<CopySourceRange>(), 32);
        assert_eq!(offset_of!(CopySourceRange, slba), 8);
        assert_eq!(offset_of!(CopySourceRange, nlb), 16);
        assert_eq!(offset_of!(CopySourceRange, eilbrt), 24);
        assert_eq!(offset_of!(CopySourceRange, elbat), 28);
        assert_eq!(offset_of!(CopySourceRange, elbatm), 30);
        // NLB is 0-based: 8 blocks is 7 on the wire.
        let range = CopySourceRange::new(SLBA, 8);
        let mut expected = [0u8; 32];
        expected[8..16].copy_from_slice(&[0x9A, 0x78, 0x56, 0x34, 0x12, 0x00, 0x00, 0x00]);
        expected[16..18].copy_from_slice(&[0x07, 0x00]);
        assert_eq!(range.to_bytes(), expected);
        assert_eq!(range.blocks(), 8);
        assert!(range.reserved_is_zero());
        assert_eq!(CopySourceRange::from_bytes(&expected), range);

        let tagged = CopySourceRange {
            eilbrt: 0x1122_3344,
            elbat: 0x5566,
            elbatm: 0xFFFF,
            ..CopySourceRange::new(0, MAX_BLOCKS)
        };
        let expected: [u8; 32] = [
            0, 0, 0, 0, 0, 0, 0, 0, // reserved
            0, 0, 0, 0, 0, 0, 0, 0, // SLBA
            0xFF, 0xFF, // NLB: 65536 blocks
            0, 0, 0, 0, 0, 0, // reserved
            0x44, 0x33, 0x22, 0x11, // EILBRT
            0x66, 0x55, // ELBAT
            0xFF, 0xFF, // ELBATM
        ];
        assert_eq!(tagged.to_bytes(), expected);
        assert_eq!(tagged.blocks(), MAX_BLOCKS);

        let mut dirty = expected;
        dirty[19] = 1;
        assert!(!CopySourceRange::from_bytes(&dirty).reserved_is_zero());
        assert_eq!(CopySourceRange::from_bytes(&dirty).to_bytes(), dirty);
    }
}

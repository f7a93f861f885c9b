//! The Identify Namespace data structure (CNS 00h, NVM Command Set 1.0):
//! its offsets, LBA formats, deallocate features and the parsed page.

use super::*;

/// Byte offsets in the Identify Namespace data structure (CNS 00h, NVM
/// Command Set 1.0).
pub mod namespace_offsets {
    /// Namespace Size, logical blocks.
    pub const NSZE: usize = 0;
    /// Namespace Capacity, logical blocks.
    pub const NCAP: usize = 8;
    /// Namespace Utilization, logical blocks.
    pub const NUSE: usize = 16;
    /// Namespace Features.
    pub const NSFEAT: usize = 24;
    /// Number of LBA Formats, 0-based.
    pub const NLBAF: usize = 25;
    /// Formatted LBA Size.
    pub const FLBAS: usize = 26;
    /// Metadata Capabilities.
    pub const MC: usize = 27;
    /// End-to-end Data Protection Capabilities.
    pub const DPC: usize = 28;
    /// End-to-end Data Protection Type Settings.
    pub const DPS: usize = 29;
    /// Namespace Multi-path I/O and Namespace Sharing Capabilities.
    pub const NMIC: usize = 30;
    /// Reservation Capabilities.
    pub const RESCAP: usize = 31;
    /// Format Progress Indicator.
    pub const FPI: usize = 32;
    /// Deallocate Logical Block Features.
    pub const DLFEAT: usize = 33;
    /// Namespace Atomic Write Unit Normal.
    pub const NAWUN: usize = 34;
    /// Namespace Atomic Write Unit Power Fail.
    pub const NAWUPF: usize = 36;
    /// Namespace Atomic Compare & Write Unit.
    pub const NACWU: usize = 38;
    /// Namespace Atomic Boundary Size Normal.
    pub const NABSN: usize = 40;
    /// Namespace Atomic Boundary Offset.
    pub const NABO: usize = 42;
    /// Namespace Atomic Boundary Size Power Fail.
    pub const NABSPF: usize = 44;
    /// Namespace Optimal I/O Boundary.
    pub const NOIOB: usize = 46;
    /// NVM Capacity (16 bytes).
    pub const NVMCAP: usize = 48;
    /// Namespace Preferred Write Granularity.
    pub const NPWG: usize = 64;
    /// Namespace Preferred Write Alignment.
    pub const NPWA: usize = 66;
    /// Namespace Preferred Deallocate Granularity.
    pub const NPDG: usize = 68;
    /// Namespace Preferred Deallocate Alignment.
    pub const NPDA: usize = 70;
    /// Namespace Optimal Write Size.
    pub const NOWS: usize = 72;
    /// Maximum Single Source Range Length.
    pub const MSSRL: usize = 74;
    /// Maximum Copy Length.
    pub const MCL: usize = 76;
    /// Maximum Source Range Count.
    pub const MSRC: usize = 80;
    /// ANA Group Identifier.
    pub const ANAGRPID: usize = 92;
    /// Namespace Attributes.
    pub const NSATTR: usize = 99;
    /// NVM Set Identifier.
    pub const NVMSETID: usize = 100;
    /// Endurance Group Identifier.
    pub const ENDGID: usize = 102;
    /// Namespace Globally Unique Identifier (16 bytes).
    pub const NGUID: usize = 104;
    /// IEEE Extended Unique Identifier (8 bytes).
    pub const EUI64: usize = 120;
    /// LBA Format 0 Support; 64 formats of 4 bytes each follow.
    pub const LBAF: usize = 128;
}

/// Bytes per LBA Format entry.
pub const LBA_FORMAT_SIZE: usize = 4;
/// LBA Format entries in the Identify Namespace data structure.
pub const LBA_FORMATS_MAX: usize = 64;
/// Smallest supported LBA data size exponent: the spec does not support
/// logical blocks under 512 bytes.
pub const LBADS_MIN: u8 = 9;
/// Largest LBA data size exponent this driver accepts (64 KiB).
///
/// The spec sets no upper bound; devices ship 512 B and 4 KiB blocks (some
/// 8–16 KiB). Anything beyond 64 KiB is far more likely a corrupt page
/// (an all-ones page reads as LBADS 255) than a real format, and the bound
/// keeps later `blocks * block_size` arithmetic comfortably inside `u64`.
pub const LBADS_MAX: u8 = 16;

/// FLBAS bits 3:0: low bits of the format index.
const FLBAS_INDEX_LOW_MASK: u8 = 0x0F;
/// FLBAS bit 4: metadata transferred at the end of the data LBA.
const FLBAS_METADATA_AT_END: u8 = 1 << 4;
/// FLBAS bits 6:5: high bits of the format index (when NLBAF >= 16).
const FLBAS_INDEX_HIGH_SHIFT: u32 = 5;
/// NLBAF (0-based) from which FLBAS bits 6:5 are meaningful: more than 16
/// formats.
const NLBAF_HIGH_INDEX_MIN: u8 = 16;

/// An LBA Format (LBAF) entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LbaFormat {
    /// Metadata Size, bytes per logical block.
    pub ms: u16,
    /// LBA Data Size, as `log2(bytes)`.
    pub lbads: u8,
    /// Relative Performance (0: best, 3: degraded).
    pub rp: u8,
}

impl LbaFormat {
    /// Decodes an LBAF dword: MS bits 15:0, LBADS bits 23:16, RP bits 25:24.
    pub const fn from_dword(dword: u32) -> Self {
        Self { ms: dword as u16, lbads: (dword >> 16) as u8, rp: ((dword >> 24) & 0b11) as u8 }
    }

    /// Logical block data size in bytes; errors unless LBADS is within
    /// [`LBADS_MIN`]..=[`LBADS_MAX`].
    pub fn block_size(&self) -> Result<u32, ParseError> {
        if (LBADS_MIN..=LBADS_MAX).contains(&self.lbads) {
            Ok(1 << self.lbads)
        } else {
            Err(ParseError::InvalidField { what: "LBA Format", field: "LBADS", value: u64::from(self.lbads) })
        }
    }
}

/// DLFEAT bits 2:0 – what reading a deallocated logical block returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum DeallocateReadBehavior {
    /// 000b: not reported.
    NotReported,
    /// 001b: all bytes 00h.
    Zeroes,
    /// 010b: all bytes FFh.
    Ones,
    /// A reserved value.
    Reserved(u8),
}

/// DLFEAT – Deallocate Logical Block Features.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DlFeat(pub u8);

impl DlFeat {
    /// Bits 2:0.
    pub const fn read_behavior(self) -> DeallocateReadBehavior {
        match self.0 & 0b111 {
            0b000 => DeallocateReadBehavior::NotReported,
            0b001 => DeallocateReadBehavior::Zeroes,
            0b010 => DeallocateReadBehavior::Ones,
            other => DeallocateReadBehavior::Reserved(other),
        }
    }

    /// Bit 3: Write Zeroes supports the Deallocate bit.
    pub const fn write_zeroes_deac_supported(self) -> bool {
        self.0 & (1 << 3) != 0
    }

    /// Bit 4: the Guard field of deallocated blocks holds the CRC of their
    /// data.
    pub const fn guard_crc_valid(self) -> bool {
        self.0 & (1 << 4) != 0
    }
}

/// Identify Namespace data structure (CNS 00h, NVM Command Set 1.0).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct IdentifyNamespace {
    /// Namespace Size, logical blocks.
    pub nsze: u64,
    /// Namespace Capacity, logical blocks.
    pub ncap: u64,
    /// Namespace Utilization, logical blocks.
    pub nuse: u64,
    /// Namespace Features.
    pub nsfeat: u8,
    /// Number of LBA Formats, 0-based.
    pub nlbaf: u8,
    /// Formatted LBA Size.
    pub flbas: u8,
    /// Metadata Capabilities.
    pub mc: u8,
    /// End-to-end Data Protection Capabilities.
    pub dpc: u8,
    /// End-to-end Data Protection Type Settings.
    pub dps: u8,
    /// Namespace Multi-path I/O and Namespace Sharing Capabilities.
    pub nmic: u8,
    /// Reservation Capabilities.
    pub rescap: u8,
    /// Format Progress Indicator.
    pub fpi: u8,
    /// Deallocate Logical Block Features; see [`Self::deallocate_features`].
    pub dlfeat: u8,
    /// Namespace Atomic Write Unit Normal, 0-based blocks.
    pub nawun: u16,
    /// Namespace Atomic Write Unit Power Fail, 0-based blocks.
    pub nawupf: u16,
    /// Namespace Atomic Compare & Write Unit, 0-based blocks.
    pub nacwu: u16,
    /// Namespace Atomic Boundary Size Normal.
    pub nabsn: u16,
    /// Namespace Atomic Boundary Offset.
    pub nabo: u16,
    /// Namespace Atomic Boundary Size Power Fail.
    pub nabspf: u16,
    /// Namespace Optimal I/O Boundary, blocks.
    pub noiob: u16,
    /// NVM Capacity, bytes.
    pub nvmcap: u128,
    /// Namespace Preferred Write Granularity, 0-based blocks.
    pub npwg: u16,
    /// Namespace Preferred Write Alignment, 0-based blocks.
    pub npwa: u16,
    /// Namespace Preferred Deallocate Granularity, 0-based blocks.
    pub npdg: u16,
    /// Namespace Preferred Deallocate Alignment, 0-based blocks.
    pub npda: u16,
    /// Namespace Optimal Write Size, 0-based blocks.
    pub nows: u16,
    /// Maximum Single Source Range Length (Copy), blocks.
    pub mssrl: u16,
    /// Maximum Copy Length, blocks.
    pub mcl: u32,
    /// Maximum Source Range Count (Copy), 0-based.
    pub msrc: u8,
    /// ANA Group Identifier.
    pub anagrpid: u32,
    /// Namespace Attributes (bit 0: write protected).
    pub nsattr: u8,
    /// NVM Set Identifier.
    pub nvmsetid: u16,
    /// Endurance Group Identifier.
    pub endgid: u16,
    /// Namespace Globally Unique Identifier.
    pub nguid: [u8; 16],
    /// IEEE Extended Unique Identifier.
    pub eui64: [u8; 8],
    /// LBA Formats 0..=NLBAF (at most 64).
    pub lbaf: Vec<LbaFormat>,
}

impl IdentifyNamespace {
    /// Bytes required: up to the end of the 64 LBA Format entries.
    pub const MIN_LEN: usize = namespace_offsets::LBAF + LBA_FORMATS_MAX * LBA_FORMAT_SIZE;
    const WHAT: &'static str = "Identify Namespace";

    /// Decodes the data structure. Accepts any field values; see
    /// [`Self::current_lba_format`] and [`Self::block_size`] for validation.
    pub fn parse(buf: &[u8]) -> Result<Self, ParseError> {
        use namespace_offsets as off;
        check_len(buf, Self::MIN_LEN, Self::WHAT)?;
        let nlbaf = u8_at(buf, off::NLBAF);
        let lbaf_count = (usize::from(nlbaf) + 1).min(LBA_FORMATS_MAX);
        let lbaf =
            (0..lbaf_count).map(|i| LbaFormat::from_dword(u32_at(buf, off::LBAF + i * LBA_FORMAT_SIZE))).collect();
        Ok(Self {
            nsze: u64_at(buf, off::NSZE),
            ncap: u64_at(buf, off::NCAP),
            nuse: u64_at(buf, off::NUSE),
            nsfeat: u8_at(buf, off::NSFEAT),
            nlbaf,
            flbas: u8_at(buf, off::FLBAS),
            mc: u8_at(buf, off::MC),
            dpc: u8_at(buf, off::DPC),
            dps: u8_at(buf, off::DPS),
            nmic: u8_at(buf, off::NMIC),
            rescap: u8_at(buf, off::RESCAP),
            fpi: u8_at(buf, off::FPI),
            dlfeat: u8_at(buf, off::DLFEAT),
            nawun: u16_at(buf, off::NAWUN),
            nawupf: u16_at(buf, off::NAWUPF),
            nacwu: u16_at(buf, off::NACWU),
            nabsn: u16_at(buf, off::NABSN),
            nabo: u16_at(buf, off::NABO),
            nabspf: u16_at(buf, off::NABSPF),
            noiob: u16_at(buf, off::NOIOB),
            nvmcap: u128_at(buf, off::NVMCAP),
            npwg: u16_at(buf, off::NPWG),
            npwa: u16_at(buf, off::NPWA),
            npdg: u16_at(buf, off::NPDG),
            npda: u16_at(buf, off::NPDA),
            nows: u16_at(buf, off::NOWS),
            mssrl: u16_at(buf, off::MSSRL),
            mcl: u32_at(buf, off::MCL),
            msrc: u8_at(buf, off::MSRC),
            anagrpid: u32_at(buf, off::ANAGRPID),
            nsattr: u8_at(buf, off::NSATTR),
            nvmsetid: u16_at(buf, off::NVMSETID),
            endgid: u16_at(buf, off::ENDGID),
            nguid: bytes(buf, off::NGUID),
            eui64: bytes(buf, off::EUI64),
            lbaf,
        })
    }

    /// DLFEAT decoded.
    pub fn deallocate_features(&self) -> DlFeat {
        DlFeat(self.dlfeat)
    }

    /// The format index FLBAS selects: bits 3:0, with bits 6:5 as bits 5:4
    /// of the index when there are more than 16 formats (NLBAF >= 16).
    pub fn current_lba_format_index(&self) -> usize {
        let low = usize::from(self.flbas & FLBAS_INDEX_LOW_MASK);
        if self.nlbaf >= NLBAF_HIGH_INDEX_MIN {
            let high = usize::from((self.flbas >> FLBAS_INDEX_HIGH_SHIFT) & 0b11);
            high << 4 | low
        } else {
            low
        }
    }

    /// FLBAS bit 4: metadata is transferred at the end of each data block
    /// (clear: in a separate buffer).
    pub fn metadata_at_end(&self) -> bool {
        self.flbas & FLBAS_METADATA_AT_END != 0
    }

    /// The LBA format in use; errors when FLBAS selects a format beyond NLBAF.
    pub fn current_lba_format(&self) -> Result<LbaFormat, ParseError> {
        let index = self.current_lba_format_index();
        let invalid = ParseError::InvalidField { what: Self::WHAT, field: "FLBAS", value: u64::from(self.flbas) };
        if index > usize::from(self.nlbaf) {
            return Err(invalid);
        }
        self.lbaf.get(index).copied().ok_or(invalid)
    }

    /// Logical block data size in bytes of the format in use.
    pub fn block_size(&self) -> Result<u32, ParseError> {
        self.current_lba_format()?.block_size()
    }
}

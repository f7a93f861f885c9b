//! Identify data structures (NVMe Base 2.0 "Identify command"; NVM Command
//! Set 1.0 for its I/O Command Set specific ones; the Zoned Namespace
//! pages are in `super::zns`).
//!
//! Parsers take the raw page as `&[u8]`, check its length, and decode into
//! plain structs. Parsing itself accepts any field values (a device may
//! report anything); accessors that turn fields into sizes validate them and
//! return [`ParseError::InvalidField`].

use super::le::{bytes, u128_at, u16_at, u32_at, u64_at, u8_at};
use super::registers::Vs;
use super::{check_len, ParseError};

mod namespace;
pub use namespace::*;

/// Bytes the controller returns for every Identify command.
pub const IDENTIFY_DATA_SIZE: usize = 4096;

/// CNS 00h: Identify Namespace data structure (NVM Command Set).
pub const CNS_NAMESPACE: u8 = 0x00;
/// CNS 01h: Identify Controller data structure.
pub const CNS_CONTROLLER: u8 = 0x01;
/// CNS 02h: Active Namespace ID list.
pub const CNS_ACTIVE_NAMESPACES: u8 = 0x02;
/// CNS 03h: Namespace Identification Descriptor list.
pub const CNS_NS_ID_DESCRIPTORS: u8 = 0x03;
/// CNS 05h: I/O Command Set specific Identify Namespace data structure.
pub const CNS_CSI_NAMESPACE: u8 = 0x05;
/// CNS 06h: I/O Command Set specific Identify Controller data structure.
pub const CNS_CSI_CONTROLLER: u8 = 0x06;

/// Command Set Identifier: NVM Command Set.
pub const CSI_NVM: u8 = 0x00;
/// Command Set Identifier: Key Value Command Set.
pub const CSI_KEY_VALUE: u8 = 0x01;
/// Command Set Identifier: Zoned Namespace Command Set.
pub const CSI_ZONED: u8 = 0x02;

/// Decodes an ASCII field: surrounding spaces and NULs are trimmed, and any
/// byte that is not printable ASCII becomes U+FFFD.
///
/// The spec pads ASCII fields with spaces on the right; some devices pad
/// on the left too, so both ends are trimmed.
fn ascii_field(raw: &[u8]) -> String {
    let is_pad = |b: &u8| *b == b' ' || *b == 0;
    let start = raw.iter().position(|b| !is_pad(b)).unwrap_or(raw.len());
    let end = raw.iter().rposition(|b| !is_pad(b)).map_or(start, |i| i + 1);
    raw[start..end]
        .iter()
        .map(|&b| if b.is_ascii_graphic() || b == b' ' { char::from(b) } else { char::REPLACEMENT_CHARACTER })
        .collect()
}

/// Bytes in `unit_bytes << exponent`, saturating at `u64::MAX` for absurd
/// exponents instead of overflowing.
pub(super) fn power_of_two_units(unit_bytes: usize, exponent: u8) -> u64 {
    let units = 1u64.checked_shl(u32::from(exponent)).unwrap_or(u64::MAX);
    (unit_bytes as u64).saturating_mul(units)
}

/// Byte offsets in the Identify Controller data structure (CNS 01h).
pub mod controller_offsets {
    /// PCI Vendor ID.
    pub const VID: usize = 0;
    /// PCI Subsystem Vendor ID.
    pub const SSVID: usize = 2;
    /// Serial Number (20 ASCII bytes).
    pub const SN: usize = 4;
    /// Model Number (40 ASCII bytes).
    pub const MN: usize = 24;
    /// Firmware Revision (8 ASCII bytes).
    pub const FR: usize = 64;
    /// Recommended Arbitration Burst.
    pub const RAB: usize = 72;
    /// IEEE OUI Identifier (3 bytes).
    pub const IEEE: usize = 73;
    /// Controller Multi-Path I/O and Namespace Sharing Capabilities.
    pub const CMIC: usize = 76;
    /// Maximum Data Transfer Size.
    pub const MDTS: usize = 77;
    /// Controller ID.
    pub const CNTLID: usize = 78;
    /// Version.
    pub const VER: usize = 80;
    /// RTD3 Resume Latency.
    pub const RTD3R: usize = 84;
    /// RTD3 Entry Latency.
    pub const RTD3E: usize = 88;
    /// Optional Asynchronous Events Supported.
    pub const OAES: usize = 92;
    /// Controller Attributes.
    pub const CTRATT: usize = 96;
    /// Controller Type.
    pub const CNTRLTYPE: usize = 111;
    /// Command Retry Delay Time 1 (CRDT2 and CRDT3 follow).
    pub const CRDT1: usize = 128;
    /// Optional Admin Command Support.
    pub const OACS: usize = 256;
    /// Abort Command Limit.
    pub const ACL: usize = 258;
    /// Asynchronous Event Request Limit.
    pub const AERL: usize = 259;
    /// Firmware Updates.
    pub const FRMW: usize = 260;
    /// Log Page Attributes.
    pub const LPA: usize = 261;
    /// Error Log Page Entries.
    pub const ELPE: usize = 262;
    /// Number of Power States Support.
    pub const NPSS: usize = 263;
    /// Warning Composite Temperature Threshold.
    pub const WCTEMP: usize = 266;
    /// Critical Composite Temperature Threshold.
    pub const CCTEMP: usize = 268;
    /// Total NVM Capacity (16 bytes).
    pub const TNVMCAP: usize = 280;
    /// Unallocated NVM Capacity (16 bytes).
    pub const UNVMCAP: usize = 296;
    /// Submission Queue Entry Size.
    pub const SQES: usize = 512;
    /// Completion Queue Entry Size.
    pub const CQES: usize = 513;
    /// Maximum Outstanding Commands.
    pub const MAXCMD: usize = 514;
    /// Number of Namespaces.
    pub const NN: usize = 516;
    /// Optional NVM Command Support.
    pub const ONCS: usize = 520;
    /// Fused Operation Support.
    pub const FUSES: usize = 522;
    /// Format NVM Attributes.
    pub const FNA: usize = 524;
    /// Volatile Write Cache.
    pub const VWC: usize = 525;
    /// Atomic Write Unit Normal.
    pub const AWUN: usize = 526;
    /// Atomic Write Unit Power Fail.
    pub const AWUPF: usize = 528;
    /// Atomic Compare & Write Unit.
    pub const ACWU: usize = 532;
    /// Optional Copy Formats Supported.
    pub const OCFS: usize = 534;
    /// SGL Support.
    pub const SGLS: usize = 536;
    /// Maximum Number of Allowed Namespaces.
    pub const MNAN: usize = 540;
    /// NVM Subsystem NVMe Qualified Name (256 bytes).
    pub const SUBNQN: usize = 768;
}

bitflags::bitflags! {
    /// OACS – Optional Admin Command Support.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
    pub struct Oacs: u16 {
        /// Security Send and Security Receive.
        const SECURITY = 1 << 0;
        /// Format NVM.
        const FORMAT = 1 << 1;
        /// Firmware Commit and Firmware Image Download.
        const FIRMWARE = 1 << 2;
        /// Namespace Management.
        const NS_MANAGEMENT = 1 << 3;
        /// Device Self-test.
        const SELF_TEST = 1 << 4;
        /// Directives.
        const DIRECTIVES = 1 << 5;
        /// NVMe-MI Send and NVMe-MI Receive.
        const NVME_MI = 1 << 6;
        /// Virtualization Management.
        const VIRTUALIZATION = 1 << 7;
        /// Doorbell Buffer Config.
        const DOORBELL_BUFFER_CONFIG = 1 << 8;
        /// Get LBA Status.
        const GET_LBA_STATUS = 1 << 9;
        /// Command and Feature Lockdown.
        const LOCKDOWN = 1 << 10;
    }
}

bitflags::bitflags! {
    /// ONCS – Optional NVM Command Support.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
    pub struct Oncs: u16 {
        /// Compare.
        const COMPARE = 1 << 0;
        /// Write Uncorrectable.
        const WRITE_UNCORRECTABLE = 1 << 1;
        /// Dataset Management.
        const DATASET_MANAGEMENT = 1 << 2;
        /// Write Zeroes.
        const WRITE_ZEROES = 1 << 3;
        /// The Save field in Set Features and the Select field in Get Features.
        const SAVE_SELECT = 1 << 4;
        /// Reservations.
        const RESERVATIONS = 1 << 5;
        /// Timestamp feature.
        const TIMESTAMP = 1 << 6;
        /// Verify.
        const VERIFY = 1 << 7;
        /// Copy.
        const COPY = 1 << 8;
    }
}

bitflags::bitflags! {
    /// Copy Descriptor Formats: bit n stands for Source Range Entries Copy
    /// Descriptor Format nh (NVM Command Set 1.1 §3.3.2, Figure 38). The
    /// layout of CDFS in Identify Controller (bytes 535:534; OCFS before
    /// NVMe Base 2.1) and of CDFE in the Host Behavior Support feature
    /// ([`crate::spec::features::HostBehaviorSupport`]), where only bits 2
    /// and 3 are defined.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
    pub struct CopyFormats: u16 {
        /// Format 0h: 16b Guard protection information, the destination's
        /// own namespace as the source.
        const FORMAT_0 = 1 << 0;
        /// Format 1h: 32b or 64b Guard protection information, the
        /// destination's own namespace as the source.
        const FORMAT_1 = 1 << 1;
        /// Format 2h: as 0h, with a Source Namespace Identifier per range.
        /// Enabled through Host Behavior Support (CDFE bit 2).
        const FORMAT_2 = 1 << 2;
        /// Format 3h: as 1h, with a Source Namespace Identifier per range.
        /// Enabled through Host Behavior Support (CDFE bit 3).
        const FORMAT_3 = 1 << 3;
    }
}

/// VWC bit 0: a volatile write cache is present.
pub const VWC_PRESENT: u8 = 1 << 0;
/// SGLS bits 1:0: SGL support (00b: none).
pub const SGLS_SUPPORT_MASK: u32 = 0b11;

/// Identify Controller data structure (CNS 01h), the fields this driver uses.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct IdentifyController {
    /// PCI Vendor ID.
    pub vid: u16,
    /// PCI Subsystem Vendor ID.
    pub ssvid: u16,
    /// Serial Number.
    pub sn: String,
    /// Model Number.
    pub mn: String,
    /// Firmware Revision.
    pub fr: String,
    /// Recommended Arbitration Burst.
    pub rab: u8,
    /// IEEE OUI Identifier, as stored (least significant byte first).
    pub ieee: [u8; 3],
    /// Controller Multi-Path I/O and Namespace Sharing Capabilities.
    pub cmic: u8,
    /// Maximum Data Transfer Size: `2^MDTS` units of CAP.MPSMIN; 0 is no limit.
    pub mdts: u8,
    /// Controller ID.
    pub cntlid: u16,
    /// Version, encoded like the VS register (0 before NVMe 1.2).
    pub ver: u32,
    /// RTD3 Resume Latency, microseconds.
    pub rtd3r: u32,
    /// RTD3 Entry Latency, microseconds.
    pub rtd3e: u32,
    /// Optional Asynchronous Events Supported.
    pub oaes: u32,
    /// Controller Attributes.
    pub ctratt: u32,
    /// Controller Type (1: I/O, 2: discovery, 3: administrative; 0: not reported).
    pub cntrltype: u8,
    /// Command Retry Delay Times 1–3, in 100 ms units.
    pub crdt: [u16; 3],
    /// Optional Admin Command Support.
    pub oacs: Oacs,
    /// Abort Command Limit, 0-based.
    pub acl: u8,
    /// Asynchronous Event Request Limit, 0-based.
    pub aerl: u8,
    /// Firmware Updates.
    pub frmw: u8,
    /// Log Page Attributes.
    pub lpa: u8,
    /// Error Log Page Entries, 0-based.
    pub elpe: u8,
    /// Number of Power States Support, 0-based.
    pub npss: u8,
    /// Warning Composite Temperature Threshold, kelvin.
    pub wctemp: u16,
    /// Critical Composite Temperature Threshold, kelvin.
    pub cctemp: u16,
    /// Total NVM Capacity, bytes.
    pub tnvmcap: u128,
    /// Unallocated NVM Capacity, bytes.
    pub unvmcap: u128,
    /// Submission Queue Entry Size: required (bits 3:0) and maximum
    /// (bits 7:4), as `log2(bytes)`.
    pub sqes: u8,
    /// Completion Queue Entry Size, encoded like `sqes`.
    pub cqes: u8,
    /// Maximum Outstanding Commands (fabrics only; 0 on PCIe).
    pub maxcmd: u16,
    /// Number of Namespaces: the largest valid NSID.
    pub nn: u32,
    /// Optional NVM Command Support.
    pub oncs: Oncs,
    /// Fused Operation Support.
    pub fuses: u16,
    /// Format NVM Attributes.
    pub fna: u8,
    /// Volatile Write Cache.
    pub vwc: u8,
    /// Atomic Write Unit Normal, logical blocks, 0-based.
    pub awun: u16,
    /// Atomic Write Unit Power Fail, logical blocks, 0-based.
    pub awupf: u16,
    /// Atomic Compare & Write Unit, logical blocks, 0-based.
    pub acwu: u16,
    /// Optional Copy Formats Supported (CDFS since NVMe Base 2.1); see
    /// [`IdentifyController::copy_formats`].
    pub ocfs: u16,
    /// SGL Support.
    pub sgls: u32,
    /// Maximum Number of Allowed Namespaces.
    pub mnan: u32,
    /// NVM Subsystem NVMe Qualified Name.
    pub subnqn: String,
}

impl IdentifyController {
    /// Bytes required: up to the end of SUBNQN.
    pub const MIN_LEN: usize = controller_offsets::SUBNQN + 256;
    const WHAT: &'static str = "Identify Controller";

    /// Decodes the data structure.
    pub fn parse(buf: &[u8]) -> Result<Self, ParseError> {
        use controller_offsets as off;
        check_len(buf, Self::MIN_LEN, Self::WHAT)?;
        Ok(Self {
            vid: u16_at(buf, off::VID),
            ssvid: u16_at(buf, off::SSVID),
            sn: ascii_field(&bytes::<20>(buf, off::SN)),
            mn: ascii_field(&bytes::<40>(buf, off::MN)),
            fr: ascii_field(&bytes::<8>(buf, off::FR)),
            rab: u8_at(buf, off::RAB),
            ieee: bytes(buf, off::IEEE),
            cmic: u8_at(buf, off::CMIC),
            mdts: u8_at(buf, off::MDTS),
            cntlid: u16_at(buf, off::CNTLID),
            ver: u32_at(buf, off::VER),
            rtd3r: u32_at(buf, off::RTD3R),
            rtd3e: u32_at(buf, off::RTD3E),
            oaes: u32_at(buf, off::OAES),
            ctratt: u32_at(buf, off::CTRATT),
            cntrltype: u8_at(buf, off::CNTRLTYPE),
            crdt: [u16_at(buf, off::CRDT1), u16_at(buf, off::CRDT1 + 2), u16_at(buf, off::CRDT1 + 4)],
            oacs: Oacs::from_bits_retain(u16_at(buf, off::OACS)),
            acl: u8_at(buf, off::ACL),
            aerl: u8_at(buf, off::AERL),
            frmw: u8_at(buf, off::FRMW),
            lpa: u8_at(buf, off::LPA),
            elpe: u8_at(buf, off::ELPE),
            npss: u8_at(buf, off::NPSS),
            wctemp: u16_at(buf, off::WCTEMP),
            cctemp: u16_at(buf, off::CCTEMP),
            tnvmcap: u128_at(buf, off::TNVMCAP),
            unvmcap: u128_at(buf, off::UNVMCAP),
            sqes: u8_at(buf, off::SQES),
            cqes: u8_at(buf, off::CQES),
            maxcmd: u16_at(buf, off::MAXCMD),
            nn: u32_at(buf, off::NN),
            oncs: Oncs::from_bits_retain(u16_at(buf, off::ONCS)),
            fuses: u16_at(buf, off::FUSES),
            fna: u8_at(buf, off::FNA),
            vwc: u8_at(buf, off::VWC),
            awun: u16_at(buf, off::AWUN),
            awupf: u16_at(buf, off::AWUPF),
            acwu: u16_at(buf, off::ACWU),
            ocfs: u16_at(buf, off::OCFS),
            sgls: u32_at(buf, off::SGLS),
            mnan: u32_at(buf, off::MNAN),
            subnqn: ascii_field(&bytes::<256>(buf, off::SUBNQN)),
        })
    }

    /// VER as a [`Vs`].
    pub fn version(&self) -> Vs {
        Vs(self.ver)
    }

    /// The largest data transfer in bytes, or `None` when MDTS is 0 (no
    /// limit). `min_page_size` is CAP.MPSMIN in bytes. An MDTS too large to
    /// represent saturates at `u64::MAX`.
    pub fn max_transfer_bytes(&self, min_page_size: usize) -> Option<u64> {
        if self.mdts == 0 {
            None
        } else {
            Some(power_of_two_units(min_page_size, self.mdts))
        }
    }

    /// VWC bit 0: a volatile write cache is present, so data needs Flush
    /// to be durable.
    pub fn volatile_write_cache_present(&self) -> bool {
        self.vwc & VWC_PRESENT != 0
    }

    /// The Copy Descriptor Formats the controller supports (OCFS, named
    /// CDFS since NVMe Base 2.1). Formats 2h and 3h also need the host's
    /// enable in Host Behavior Support before a Copy may use them.
    pub fn copy_formats(&self) -> CopyFormats {
        CopyFormats::from_bits_retain(self.ocfs)
    }

    /// SGLS bits 1:0 non-zero: the NVM command set accepts SGLs.
    pub fn sgl_supported(&self) -> bool {
        self.sgls & SGLS_SUPPORT_MASK != 0
    }

    /// SQES bits 3:0: the required submission queue entry size, `log2(bytes)`.
    pub fn sqes_required(&self) -> u8 {
        self.sqes & 0xF
    }

    /// SQES bits 7:4: the maximum submission queue entry size, `log2(bytes)`.
    pub fn sqes_maximum(&self) -> u8 {
        self.sqes >> 4
    }

    /// CQES bits 3:0: the required completion queue entry size, `log2(bytes)`.
    pub fn cqes_required(&self) -> u8 {
        self.cqes & 0xF
    }

    /// CQES bits 7:4: the maximum completion queue entry size, `log2(bytes)`.
    pub fn cqes_maximum(&self) -> u8 {
        self.cqes >> 4
    }
}

/// Bytes per entry in the Active Namespace ID list.
const NSID_SIZE: usize = 4;
/// Entries in one Active Namespace ID list page.
pub const ACTIVE_NAMESPACES_MAX: usize = IDENTIFY_DATA_SIZE / NSID_SIZE;
/// The broadcast NSID; never a real namespace.
pub const NSID_BROADCAST: u32 = 0xFFFF_FFFF;

/// Decodes an Active Namespace ID list (CNS 02h): NSIDs in increasing order
/// until the first 0, at most 1024. A full page means more may follow: ask
/// again starting from the last NSID.
///
/// Errors when the page is short, an NSID does not increase, or the
/// broadcast NSID appears.
pub fn parse_active_namespace_list(buf: &[u8]) -> Result<Vec<u32>, ParseError> {
    const WHAT: &str = "Active Namespace ID list";
    check_len(buf, IDENTIFY_DATA_SIZE, WHAT)?;
    let mut ids = Vec::new();
    let mut previous = 0u32;
    for i in 0..ACTIVE_NAMESPACES_MAX {
        let nsid = u32_at(buf, i * NSID_SIZE);
        if nsid == 0 {
            break;
        }
        if nsid <= previous || nsid == NSID_BROADCAST {
            return Err(ParseError::InvalidField { what: WHAT, field: "NSID", value: u64::from(nsid) });
        }
        ids.push(nsid);
        previous = nsid;
    }
    Ok(ids)
}

/// NIDT: IEEE Extended Unique Identifier.
pub const NIDT_EUI64: u8 = 0x1;
/// NIDT: Namespace Globally Unique Identifier.
pub const NIDT_NGUID: u8 = 0x2;
/// NIDT: Namespace UUID.
pub const NIDT_UUID: u8 = 0x3;
/// NIDT: Command Set Identifier.
pub const NIDT_CSI: u8 = 0x4;
/// NIDL for EUI64.
pub const NIDL_EUI64: u8 = 8;
/// NIDL for NGUID.
pub const NIDL_NGUID: u8 = 16;
/// NIDL for UUID.
pub const NIDL_UUID: u8 = 16;
/// NIDL for CSI.
pub const NIDL_CSI: u8 = 1;
/// Bytes before the NID in each descriptor: NIDT, NIDL, 2 reserved.
const NS_ID_DESCRIPTOR_HEADER: usize = 4;

/// A Namespace Identification Descriptor (CNS 03h).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum NsIdDescriptor {
    /// IEEE Extended Unique Identifier.
    Eui64([u8; 8]),
    /// Namespace Globally Unique Identifier.
    Nguid([u8; 16]),
    /// Namespace UUID.
    Uuid([u8; 16]),
    /// Command Set Identifier (`CSI_*`).
    Csi(u8),
    /// A type this driver does not know, skipped.
    Unknown {
        /// Namespace Identifier Type.
        nidt: u8,
        /// Namespace Identifier Length.
        len: u8,
    },
}

/// Decodes a Namespace Identification Descriptor list (CNS 03h), stopping at
/// NIDT 0 or the end of the buffer.
///
/// Errors when a descriptor runs past the buffer or a known type has the
/// wrong NIDL.
pub fn parse_ns_id_descriptors(buf: &[u8]) -> Result<Vec<NsIdDescriptor>, ParseError> {
    const WHAT: &str = "Namespace Identification Descriptor";
    let mut descriptors = Vec::new();
    let mut offset = 0;
    while offset < buf.len() {
        let nidt = u8_at(buf, offset);
        if nidt == 0 {
            break;
        }
        let header_end = offset + NS_ID_DESCRIPTOR_HEADER;
        check_len(buf, header_end, WHAT)?;
        let nidl = u8_at(buf, offset + 1);
        let end = header_end + usize::from(nidl);
        check_len(buf, end, WHAT)?;
        let expected_nidl = match nidt {
            NIDT_EUI64 => Some(NIDL_EUI64),
            NIDT_NGUID => Some(NIDL_NGUID),
            NIDT_UUID => Some(NIDL_UUID),
            NIDT_CSI => Some(NIDL_CSI),
            _ => None,
        };
        if expected_nidl.is_some_and(|expected| expected != nidl) {
            return Err(ParseError::InvalidField { what: WHAT, field: "NIDL", value: u64::from(nidl) });
        }
        descriptors.push(match nidt {
            NIDT_EUI64 => NsIdDescriptor::Eui64(bytes(buf, header_end)),
            NIDT_NGUID => NsIdDescriptor::Nguid(bytes(buf, header_end)),
            NIDT_UUID => NsIdDescriptor::Uuid(bytes(buf, header_end)),
            NIDT_CSI => NsIdDescriptor::Csi(u8_at(buf, header_end)),
            _ => NsIdDescriptor::Unknown { nidt, len: nidl },
        });
        offset = end;
    }
    Ok(descriptors)
}

/// The Command Set Identifier among the descriptors, if one is reported.
pub fn command_set(descriptors: &[NsIdDescriptor]) -> Option<u8> {
    descriptors.iter().find_map(|d| match d {
        NsIdDescriptor::Csi(csi) => Some(*csi),
        _ => None,
    })
}

/// Byte offsets in the I/O Command Set specific Identify Controller data
/// structure for the NVM Command Set (CNS 06h, CSI 00h; NVM Command Set 1.0).
pub mod nvm_controller_offsets {
    /// Verify Size Limit.
    pub const VSL: usize = 0;
    /// Write Zeroes Size Limit.
    pub const WZSL: usize = 1;
    /// Write Uncorrectable Size Limit.
    pub const WUSL: usize = 2;
    /// Dataset Management Ranges Limit.
    pub const DMRL: usize = 3;
    /// Dataset Management Range Size Limit.
    pub const DMRSL: usize = 4;
    /// Dataset Management Size Limit.
    pub const DMSL: usize = 8;
}

/// I/O Command Set specific Identify Controller, NVM Command Set (CNS 06h,
/// CSI 00h). Zero in any field means no limit.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct IdentifyControllerNvm {
    /// Verify Size Limit: `2^VSL` units of CAP.MPSMIN.
    pub vsl: u8,
    /// Write Zeroes Size Limit: `2^WZSL` units of CAP.MPSMIN.
    pub wzsl: u8,
    /// Write Uncorrectable Size Limit: `2^WUSL` units of CAP.MPSMIN.
    pub wusl: u8,
    /// Dataset Management Ranges Limit: ranges per command.
    pub dmrl: u8,
    /// Dataset Management Range Size Limit: logical blocks per range.
    pub dmrsl: u32,
    /// Dataset Management Size Limit: logical blocks per command.
    pub dmsl: u64,
}

impl IdentifyControllerNvm {
    /// Bytes required: up to the end of DMSL.
    pub const MIN_LEN: usize = nvm_controller_offsets::DMSL + 8;
    const WHAT: &'static str = "Identify Controller (NVM Command Set)";

    /// Decodes the data structure.
    pub fn parse(buf: &[u8]) -> Result<Self, ParseError> {
        use nvm_controller_offsets as off;
        check_len(buf, Self::MIN_LEN, Self::WHAT)?;
        Ok(Self {
            vsl: u8_at(buf, off::VSL),
            wzsl: u8_at(buf, off::WZSL),
            wusl: u8_at(buf, off::WUSL),
            dmrl: u8_at(buf, off::DMRL),
            dmrsl: u32_at(buf, off::DMRSL),
            dmsl: u64_at(buf, off::DMSL),
        })
    }

    /// Largest Write Zeroes in bytes, `None` if unlimited. Saturates.
    pub fn write_zeroes_size_limit_bytes(&self, min_page_size: usize) -> Option<u64> {
        (self.wzsl != 0).then(|| power_of_two_units(min_page_size, self.wzsl))
    }

    /// Largest Verify in bytes, `None` if unlimited. Saturates.
    pub fn verify_size_limit_bytes(&self, min_page_size: usize) -> Option<u64> {
        (self.vsl != 0).then(|| power_of_two_units(min_page_size, self.vsl))
    }

    /// Largest Write Uncorrectable in bytes, `None` if unlimited. Saturates.
    pub fn write_uncorrectable_size_limit_bytes(&self, min_page_size: usize) -> Option<u64> {
        (self.wusl != 0).then(|| power_of_two_units(min_page_size, self.wusl))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::zns::{IdentifyControllerZns, IdentifyNamespaceZns};

    fn page() -> Vec<u8> {
        vec![0u8; IDENTIFY_DATA_SIZE]
    }

    fn put(buf: &mut [u8], offset: usize, data: &[u8]) {
        buf[offset..offset + data.len()].copy_from_slice(data);
    }

    fn put_ascii(buf: &mut [u8], offset: usize, len: usize, text: &str) {
        let mut field = vec![b' '; len];
        field[..text.len()].copy_from_slice(text.as_bytes());
        put(buf, offset, &field);
    }

    /// An Identify Controller page like QEMU 7.2's emulated controller
    /// returns (hw/nvme/ctrl.c, nvme_init_ctrl).
    fn qemu_controller_page() -> Vec<u8> {
        let mut buf = page();
        put(&mut buf, 0, &0x1B36u16.to_le_bytes());
        put(&mut buf, 2, &0x1AF4u16.to_le_bytes());
        put_ascii(&mut buf, 4, 20, "deadbeef");
        put_ascii(&mut buf, 24, 40, "QEMU NVMe Ctrl");
        put_ascii(&mut buf, 64, 8, "7.2.0");
        buf[72] = 6; // RAB
        put(&mut buf, 73, &[0x00, 0x54, 0x52]); // IEEE OUI 525400h
        buf[77] = 7; // MDTS
        put(&mut buf, 80, &0x0001_0400u32.to_le_bytes()); // VER 1.4.0
        put(&mut buf, 96, &0x0000_0010u32.to_le_bytes()); // CTRATT
        buf[111] = 1; // CNTRLTYPE: I/O controller
        put(&mut buf, 256, &0x010Au16.to_le_bytes()); // OACS
        buf[258] = 3; // ACL
        buf[259] = 3; // AERL
        buf[260] = 0x03; // FRMW
        buf[261] = 0x0E; // LPA
        buf[262] = 0x03; // ELPE
        put(&mut buf, 266, &343u16.to_le_bytes()); // WCTEMP
        put(&mut buf, 268, &373u16.to_le_bytes()); // CCTEMP
        buf[512] = 0x66; // SQES
        buf[513] = 0x44; // CQES
        put(&mut buf, 516, &256u32.to_le_bytes()); // NN
        put(&mut buf, 520, &0x015Du16.to_le_bytes()); // ONCS
        buf[525] = 0x07; // VWC: present, broadcast flush supported
        put(&mut buf, 534, &0x0001u16.to_le_bytes()); // OCFS
        put(&mut buf, 536, &0x0000_0001u32.to_le_bytes()); // SGLS
        let subnqn = b"nqn.2019-08.org.qemu:deadbeef";
        put(&mut buf, 768, subnqn); // NUL-padded
        buf
    }

    #[test]
    fn controller_offsets_match_spec() {
        use controller_offsets::*;
        let pinned = [
            (VID, 0),
            (SSVID, 2),
            (SN, 4),
            (MN, 24),
            (FR, 64),
            (RAB, 72),
            (IEEE, 73),
            (CMIC, 76),
            (MDTS, 77),
            (CNTLID, 78),
            (VER, 80),
            (RTD3R, 84),
            (RTD3E, 88),
            (OAES, 92),
            (CTRATT, 96),
            (CNTRLTYPE, 111),
            (CRDT1, 128),
            (OACS, 256),
            (ACL, 258),
            (AERL, 259),
            (FRMW, 260),
            (LPA, 261),
            (ELPE, 262),
            (NPSS, 263),
            (WCTEMP, 266),
            (CCTEMP, 268),
            (TNVMCAP, 280),
            (UNVMCAP, 296),
            (SQES, 512),
            (CQES, 513),
            (MAXCMD, 514),
            (NN, 516),
            (ONCS, 520),
            (FUSES, 522),
            (FNA, 524),
            (VWC, 525),
            (AWUN, 526),
            (AWUPF, 528),
            (ACWU, 532),
            (OCFS, 534),
            (SGLS, 536),
            (MNAN, 540),
            (SUBNQN, 768),
        ];
        for (offset, spec) in pinned {
            assert_eq!(offset, spec);
        }
        assert_eq!(IdentifyController::MIN_LEN, 1024);
    }

    #[test]
    fn controller_qemu_7_2() {
        let id = IdentifyController::parse(&qemu_controller_page()).unwrap();
        assert_eq!(id.vid, 0x1B36);
        assert_eq!(id.ssvid, 0x1AF4);
        assert_eq!(id.sn, "deadbeef");
        assert_eq!(id.mn, "QEMU NVMe Ctrl");
        assert_eq!(id.fr, "7.2.0");
        assert_eq!(id.rab, 6);
        assert_eq!(id.ieee, [0x00, 0x54, 0x52]);
        assert_eq!(id.mdts, 7);
        assert_eq!(id.max_transfer_bytes(4096), Some(512 * 1024));
        assert_eq!(id.version(), Vs::V1_4);
        assert_eq!(id.ctratt, 0x10);
        assert_eq!(id.cntrltype, 1);
        assert_eq!(id.oacs, Oacs::FORMAT | Oacs::NS_MANAGEMENT | Oacs::DOORBELL_BUFFER_CONFIG);
        assert_eq!((id.acl, id.aerl, id.frmw, id.lpa, id.elpe), (3, 3, 3, 0x0E, 3));
        assert_eq!((id.wctemp, id.cctemp), (343, 373));
        assert_eq!((id.sqes_required(), id.sqes_maximum()), (6, 6));
        assert_eq!((id.cqes_required(), id.cqes_maximum()), (4, 4));
        assert_eq!(id.nn, 256);
        assert_eq!(
            id.oncs,
            Oncs::COMPARE
                | Oncs::DATASET_MANAGEMENT
                | Oncs::WRITE_ZEROES
                | Oncs::SAVE_SELECT
                | Oncs::TIMESTAMP
                | Oncs::COPY
        );
        assert_eq!(id.oncs.bits(), 0x15D);
        assert!(!id.oncs.contains(Oncs::VERIFY));
        assert_eq!(id.vwc, 0x07);
        assert!(id.volatile_write_cache_present());
        assert_eq!(id.ocfs, 1);
        assert!(id.sgl_supported());
        assert_eq!(id.subnqn, "nqn.2019-08.org.qemu:deadbeef");
    }

    #[test]
    fn copy_formats_are_ocfs_bits() {
        assert_eq!(
            [CopyFormats::FORMAT_0, CopyFormats::FORMAT_1, CopyFormats::FORMAT_2, CopyFormats::FORMAT_3]
                .map(|f| f.bits()),
            [0b0001, 0b0010, 0b0100, 0b1000]
        );
        let mut buf = qemu_controller_page();
        let id = IdentifyController::parse(&buf).unwrap();
        assert_eq!(id.copy_formats(), CopyFormats::FORMAT_0);
        // QEMU 9.1 and later: formats 0h to 3h (bytes 535:534 = 000Fh).
        put(&mut buf, 534, &[0x0F, 0x00]);
        let id = IdentifyController::parse(&buf).unwrap();
        assert!(id.copy_formats().contains(CopyFormats::FORMAT_0 | CopyFormats::FORMAT_2));
        assert_eq!(id.copy_formats(), CopyFormats::all());
        // Format 2h alone, and bits this driver has no name for, are kept.
        put(&mut buf, 534, &[0x04, 0x80]);
        let id = IdentifyController::parse(&buf).unwrap();
        assert!(id.copy_formats().contains(CopyFormats::FORMAT_2));
        assert!(!id.copy_formats().contains(CopyFormats::FORMAT_0));
        assert_eq!(id.copy_formats().bits(), 0x8004);
    }

    #[test]
    fn controller_unknown_bits_are_kept() {
        let mut buf = qemu_controller_page();
        put(&mut buf, 256, &0xF000u16.to_le_bytes());
        put(&mut buf, 520, &0x8000u16.to_le_bytes());
        let id = IdentifyController::parse(&buf).unwrap();
        assert_eq!(id.oacs.bits(), 0xF000);
        assert_eq!(id.oncs.bits(), 0x8000);
    }

    #[test]
    fn controller_short_buffer() {
        let buf = qemu_controller_page();
        assert_eq!(
            IdentifyController::parse(&buf[..1023]),
            Err(ParseError::TooShort { what: "Identify Controller", expected: 1024, got: 1023 })
        );
        assert!(IdentifyController::parse(&buf[..1024]).is_ok());
        assert!(IdentifyController::parse(&[]).is_err());
    }

    #[test]
    fn ascii_fields() {
        assert_eq!(ascii_field(b"abc   "), "abc");
        assert_eq!(ascii_field(b"  abc\0\0"), "abc");
        assert_eq!(ascii_field(b"a b c "), "a b c");
        assert_eq!(ascii_field(b"\0\0\0"), "");
        assert_eq!(ascii_field(b""), "");
        assert_eq!(ascii_field(b"x\xFFy\x01z"), "x\u{FFFD}y\u{FFFD}z");
        assert_eq!(ascii_field(b"a\0b"), "a\u{FFFD}b");
    }

    #[test]
    fn max_transfer_bytes() {
        let mut id = IdentifyController::parse(&qemu_controller_page()).unwrap();
        id.mdts = 0;
        assert_eq!(id.max_transfer_bytes(4096), None);
        id.mdts = 5;
        assert_eq!(id.max_transfer_bytes(4096), Some(128 * 1024));
        assert_eq!(id.max_transfer_bytes(16384), Some(512 * 1024));
        id.mdts = 52;
        // 4096 << 52 is 2^64: saturates.
        assert_eq!(id.max_transfer_bytes(4096), Some(u64::MAX));
        id.mdts = 63;
        assert_eq!(id.max_transfer_bytes(4096), Some(u64::MAX));
        id.mdts = 255;
        assert_eq!(id.max_transfer_bytes(4096), Some(u64::MAX));
        id.mdts = 51;
        assert_eq!(id.max_transfer_bytes(4096), Some(1 << 63));
    }

    /// An Identify Namespace page like QEMU 7.2 returns for a 1 GiB
    /// namespace: 8 LBA formats, format 0 (512 B, no metadata) in use.
    fn qemu_namespace_page() -> Vec<u8> {
        let mut buf = page();
        let blocks: u64 = (1 << 30) / 512;
        put(&mut buf, 0, &blocks.to_le_bytes());
        put(&mut buf, 8, &blocks.to_le_bytes());
        put(&mut buf, 16, &blocks.to_le_bytes());
        buf[24] = 0x14; // NSFEAT
        buf[25] = 7; // NLBAF
        buf[26] = 0; // FLBAS
        buf[27] = 0x03; // MC
        buf[28] = 0x1F; // DPC
        buf[33] = 0x09; // DLFEAT: zeroes, Write Zeroes DEAC
        put(&mut buf, 48, &(1u128 << 30).to_le_bytes()); // NVMCAP
        put(&mut buf, 64, &7u16.to_le_bytes()); // NPWG
        put(&mut buf, 72, &7u16.to_le_bytes()); // NOWS
        put(&mut buf, 74, &128u16.to_le_bytes()); // MSSRL
        put(&mut buf, 76, &128u32.to_le_bytes()); // MCL
        buf[80] = 127; // MSRC
        put(&mut buf, 104, &[0x11; 16]); // NGUID
        put(&mut buf, 120, &[0x22; 8]); // EUI64

        // (MS, LBADS) per format, as QEMU lists them.
        let formats: [(u16, u8); 8] = [(0, 9), (8, 9), (16, 9), (64, 9), (0, 12), (8, 12), (16, 12), (64, 12)];
        for (i, (ms, lbads)) in formats.iter().enumerate() {
            let dword = u32::from(*ms) | u32::from(*lbads) << 16;
            put(&mut buf, 128 + 4 * i, &dword.to_le_bytes());
        }
        buf
    }

    #[test]
    fn namespace_offsets_match_spec() {
        use namespace_offsets::*;
        let pinned = [
            (NSZE, 0),
            (NCAP, 8),
            (NUSE, 16),
            (NSFEAT, 24),
            (NLBAF, 25),
            (FLBAS, 26),
            (MC, 27),
            (DPC, 28),
            (DPS, 29),
            (NMIC, 30),
            (RESCAP, 31),
            (FPI, 32),
            (DLFEAT, 33),
            (NAWUN, 34),
            (NAWUPF, 36),
            (NACWU, 38),
            (NABSN, 40),
            (NABO, 42),
            (NABSPF, 44),
            (NOIOB, 46),
            (NVMCAP, 48),
            (NPWG, 64),
            (NPWA, 66),
            (NPDG, 68),
            (NPDA, 70),
            (NOWS, 72),
            (MSSRL, 74),
            (MCL, 76),
            (MSRC, 80),
            (ANAGRPID, 92),
            (NSATTR, 99),
            (NVMSETID, 100),
            (ENDGID, 102),
            (NGUID, 104),
            (EUI64, 120),
            (LBAF, 128),
        ];
        for (offset, spec) in pinned {
            assert_eq!(offset, spec);
        }
        // LBAF63 ends at byte 383.
        assert_eq!(IdentifyNamespace::MIN_LEN, 384);
    }

    #[test]
    fn namespace_qemu_7_2() {
        let ns = IdentifyNamespace::parse(&qemu_namespace_page()).unwrap();
        assert_eq!(ns.nsze, 2 * 1024 * 1024);
        assert_eq!(ns.ncap, ns.nsze);
        assert_eq!(ns.nuse, ns.nsze);
        assert_eq!(ns.nsfeat, 0x14);
        assert_eq!(ns.nlbaf, 7);
        assert_eq!(ns.lbaf.len(), 8);
        assert_eq!(ns.mc, 0x03);
        assert_eq!(ns.dpc, 0x1F);
        assert_eq!(ns.nvmcap, 1 << 30);
        assert_eq!((ns.npwg, ns.nows, ns.mssrl, ns.mcl, ns.msrc), (7, 7, 128, 128, 127));
        assert_eq!(ns.nguid, [0x11; 16]);
        assert_eq!(ns.eui64, [0x22; 8]);
        assert_eq!(ns.current_lba_format_index(), 0);
        assert_eq!(ns.current_lba_format().unwrap(), LbaFormat { ms: 0, lbads: 9, rp: 0 });
        assert_eq!(ns.block_size(), Ok(512));
        assert!(!ns.metadata_at_end());
        assert_eq!(ns.lbaf[7], LbaFormat { ms: 64, lbads: 12, rp: 0 });
        let dlfeat = ns.deallocate_features();
        assert_eq!(dlfeat.read_behavior(), DeallocateReadBehavior::Zeroes);
        assert!(dlfeat.write_zeroes_deac_supported());
        assert!(!dlfeat.guard_crc_valid());
    }

    #[test]
    fn namespace_format_selection() {
        let mut buf = qemu_namespace_page();
        buf[26] = 0x14; // FLBAS: format 4, metadata at end
        let ns = IdentifyNamespace::parse(&buf).unwrap();
        assert_eq!(ns.current_lba_format_index(), 4);
        assert_eq!(ns.block_size(), Ok(4096));
        assert!(ns.metadata_at_end());

        // FLBAS bits 6:5 are reserved with 16 or fewer formats...
        buf[26] = 0x61;
        let ns = IdentifyNamespace::parse(&buf).unwrap();
        assert_eq!(ns.current_lba_format_index(), 1);
        // ...and the high index bits with more.
        buf[25] = 39; // NLBAF: 40 formats
        put(&mut buf, 128 + 4 * 49, &(12u32 << 16).to_le_bytes());
        let ns = IdentifyNamespace::parse(&buf).unwrap();
        assert_eq!(ns.lbaf.len(), 40);
        assert_eq!(ns.current_lba_format_index(), 0x31);
        // Index 49 exceeds NLBAF 39.
        assert_eq!(
            ns.current_lba_format(),
            Err(ParseError::InvalidField { what: "Identify Namespace", field: "FLBAS", value: 0x61 })
        );
        buf[25] = 63;
        let ns = IdentifyNamespace::parse(&buf).unwrap();
        assert_eq!(ns.block_size(), Ok(4096));
    }

    #[test]
    fn namespace_flbas_beyond_nlbaf() {
        let mut buf = qemu_namespace_page();
        buf[26] = 9; // index 9 > NLBAF 7
        let ns = IdentifyNamespace::parse(&buf).unwrap();
        assert!(matches!(ns.current_lba_format(), Err(ParseError::InvalidField { field: "FLBAS", .. })));
        assert!(ns.block_size().is_err());
    }

    #[test]
    fn namespace_lbads_zero_and_huge() {
        let mut buf = qemu_namespace_page();
        put(&mut buf, 128, &0u32.to_le_bytes()); // LBAF0: LBA data size 0
        let ns = IdentifyNamespace::parse(&buf).unwrap();
        assert_eq!(ns.block_size(), Err(ParseError::InvalidField { what: "LBA Format", field: "LBADS", value: 0 }));
        for (lbads, ok) in [(8, false), (9, true), (12, true), (16, true), (17, false), (255, false)] {
            let format = LbaFormat { ms: 0, lbads, rp: 0 };
            assert_eq!(format.block_size().is_ok(), ok, "LBADS {lbads}");
        }
    }

    #[test]
    fn lba_format_dword() {
        let format = LbaFormat::from_dword(0xFF0C_0040);
        assert_eq!(format, LbaFormat { ms: 64, lbads: 12, rp: 3 });
    }

    #[test]
    fn deallocate_read_behavior() {
        assert_eq!(DlFeat(0).read_behavior(), DeallocateReadBehavior::NotReported);
        assert_eq!(DlFeat(2).read_behavior(), DeallocateReadBehavior::Ones);
        assert_eq!(DlFeat(5).read_behavior(), DeallocateReadBehavior::Reserved(5));
        assert!(DlFeat(1 << 4).guard_crc_valid());
    }

    #[test]
    fn namespace_short_and_all_ones() {
        assert!(matches!(
            IdentifyNamespace::parse(&[0u8; 383]),
            Err(ParseError::TooShort { expected: 384, got: 383, .. })
        ));
        let ns = IdentifyNamespace::parse(&[0xFF; IDENTIFY_DATA_SIZE]).unwrap();
        assert_eq!(ns.nlbaf, 255);
        assert_eq!(ns.lbaf.len(), 64);
        assert_eq!(ns.current_lba_format_index(), 0x3F);
        // Index 63 exists, but LBADS 255 does not pass.
        assert!(matches!(ns.block_size(), Err(ParseError::InvalidField { field: "LBADS", value: 255, .. })));
    }

    #[test]
    fn active_namespace_list() {
        let mut buf = page();
        for (i, nsid) in [1u32, 2, 5, 300].iter().enumerate() {
            put(&mut buf, 4 * i, &nsid.to_le_bytes());
        }
        assert_eq!(parse_active_namespace_list(&buf), Ok(vec![1, 2, 5, 300]));
        assert_eq!(parse_active_namespace_list(&page()), Ok(vec![]));
        assert!(matches!(parse_active_namespace_list(&buf[..4095]), Err(ParseError::TooShort { .. })));
    }

    #[test]
    fn active_namespace_list_full_page_never_terminates() {
        let mut buf = page();
        for i in 0..1024u32 {
            put(&mut buf, 4 * i as usize, &(i + 1).to_le_bytes());
        }
        let ids = parse_active_namespace_list(&buf).unwrap();
        assert_eq!(ids.len(), 1024);
        assert_eq!(ids[1023], 1024);
    }

    #[test]
    fn active_namespace_list_rejects_disorder_and_broadcast() {
        let mut buf = page();
        put(&mut buf, 0, &5u32.to_le_bytes());
        put(&mut buf, 4, &5u32.to_le_bytes());
        assert_eq!(
            parse_active_namespace_list(&buf),
            Err(ParseError::InvalidField { what: "Active Namespace ID list", field: "NSID", value: 5 })
        );
        assert!(parse_active_namespace_list(&[0xFF; IDENTIFY_DATA_SIZE]).is_err());
    }

    fn descriptor(nidt: u8, nid: &[u8]) -> Vec<u8> {
        let mut out = vec![nidt, nid.len() as u8, 0, 0];
        out.extend_from_slice(nid);
        out
    }

    #[test]
    fn ns_id_descriptors() {
        let mut buf = page();
        let mut list = descriptor(NIDT_EUI64, &[1; 8]);
        list.extend(descriptor(NIDT_NGUID, &[2; 16]));
        list.extend(descriptor(NIDT_UUID, &[3; 16]));
        list.extend(descriptor(0x7, &[9; 5]));
        list.extend(descriptor(NIDT_CSI, &[CSI_ZONED]));
        put(&mut buf, 0, &list);
        let descriptors = parse_ns_id_descriptors(&buf).unwrap();
        assert_eq!(
            descriptors,
            vec![
                NsIdDescriptor::Eui64([1; 8]),
                NsIdDescriptor::Nguid([2; 16]),
                NsIdDescriptor::Uuid([3; 16]),
                NsIdDescriptor::Unknown { nidt: 7, len: 5 },
                NsIdDescriptor::Csi(CSI_ZONED),
            ]
        );
        assert_eq!(command_set(&descriptors), Some(CSI_ZONED));
        assert_eq!(command_set(&descriptors[..3]), None);
        assert_eq!(parse_ns_id_descriptors(&page()), Ok(vec![]));
        assert_eq!(parse_ns_id_descriptors(&[]), Ok(vec![]));
    }

    #[test]
    fn ns_id_descriptor_bad_length() {
        let mut buf = page();
        put(&mut buf, 0, &descriptor(NIDT_CSI, &[0, 0]));
        assert_eq!(
            parse_ns_id_descriptors(&buf),
            Err(ParseError::InvalidField { what: "Namespace Identification Descriptor", field: "NIDL", value: 2 })
        );
        let mut buf = page();
        put(&mut buf, 0, &descriptor(NIDT_EUI64, &[0; 16]));
        assert!(parse_ns_id_descriptors(&buf).is_err());
    }

    #[test]
    fn ns_id_descriptor_past_end() {
        // NGUID needs 20 bytes; give 12.
        let mut buf = descriptor(NIDT_NGUID, &[2; 16]);
        buf.truncate(12);
        assert_eq!(
            parse_ns_id_descriptors(&buf),
            Err(ParseError::TooShort { what: "Namespace Identification Descriptor", expected: 20, got: 12 })
        );
        // A header cut short.
        assert!(matches!(
            parse_ns_id_descriptors(&[NIDT_CSI, 1]),
            Err(ParseError::TooShort { expected: 4, got: 2, .. })
        ));
        // Unknown types with NIDL running past the page.
        let all_ones = [0xFF; IDENTIFY_DATA_SIZE];
        let mut ones_then_end = all_ones.to_vec();
        ones_then_end.truncate(200);
        assert!(parse_ns_id_descriptors(&ones_then_end).is_err());
        // All 0xFF: 15 unknown descriptors of 259 bytes, then one runs past.
        assert!(matches!(parse_ns_id_descriptors(&all_ones), Err(ParseError::TooShort { got: 4096, .. })));
    }

    #[test]
    fn nvm_controller() {
        use nvm_controller_offsets::*;
        assert_eq!([VSL, WZSL, WUSL, DMRL, DMRSL, DMSL], [0, 1, 2, 3, 4, 8]);
        let mut buf = page();
        buf[0] = 7;
        buf[1] = 8;
        buf[2] = 9;
        buf[3] = 128;
        put(&mut buf, 4, &0x0001_0000u32.to_le_bytes());
        put(&mut buf, 8, &0x0000_0001_0000_0000u64.to_le_bytes());
        let nvm = IdentifyControllerNvm::parse(&buf).unwrap();
        assert_eq!(
            nvm,
            IdentifyControllerNvm { vsl: 7, wzsl: 8, wusl: 9, dmrl: 128, dmrsl: 0x1_0000, dmsl: 0x1_0000_0000 }
        );
        assert_eq!(nvm.verify_size_limit_bytes(4096), Some(512 * 1024));
        assert_eq!(nvm.write_zeroes_size_limit_bytes(4096), Some(1024 * 1024));
        assert_eq!(nvm.write_uncorrectable_size_limit_bytes(4096), Some(2048 * 1024));
        let unlimited = IdentifyControllerNvm::parse(&page()).unwrap();
        assert_eq!(unlimited.write_zeroes_size_limit_bytes(4096), None);
        assert!(matches!(IdentifyControllerNvm::parse(&[0; 15]), Err(ParseError::TooShort { expected: 16, .. })));
    }

    #[test]
    fn all_ones_pages_never_panic() {
        let ones = [0xFF; IDENTIFY_DATA_SIZE];
        let ctrl = IdentifyController::parse(&ones).unwrap();
        assert_eq!(ctrl.sn, "\u{FFFD}".repeat(20));
        assert_eq!(ctrl.max_transfer_bytes(4096), Some(u64::MAX));
        let zns = IdentifyNamespaceZns::parse(&ones).unwrap();
        assert_eq!(zns.max_active_resources(), None);
        assert_eq!(zns.zone_size_blocks(0), Ok(u64::MAX));
        let nvm = IdentifyControllerNvm::parse(&ones).unwrap();
        assert_eq!(nvm.verify_size_limit_bytes(1 << 27), Some(u64::MAX));
    }

    #[test]
    fn random_buffers_never_panic() {
        let mut rng = crate::prng::Prng::new(0x9E37_79B9_7F4A_7C15);
        let mut buf = vec![0u8; IDENTIFY_DATA_SIZE + 64];
        for round in 0..2000 {
            // Mostly full pages; some short or long ones.
            let len = match round % 4 {
                0 => (rng.next_u64() as usize) % buf.len(),
                _ => IDENTIFY_DATA_SIZE,
            };
            // Sparse pages reach more interesting paths (list terminators,
            // small NIDLs) than uniformly random ones.
            let density = rng.next_u64() % 4;
            for byte in buf.iter_mut() {
                let r = rng.next_u64();
                *byte = if r % 4 <= density { r as u8 } else { 0 };
            }
            let page = &buf[..len];
            if let Ok(ctrl) = IdentifyController::parse(page) {
                let _ = ctrl.max_transfer_bytes(4096);
                let _ = ctrl.max_transfer_bytes(1 << 27);
            }
            if let Ok(ns) = IdentifyNamespace::parse(page) {
                let _ = ns.current_lba_format_index();
                let _ = ns.current_lba_format();
                let _ = ns.block_size();
                let _ = ns.deallocate_features().read_behavior();
            }
            let _ = parse_active_namespace_list(page);
            if let Ok(descriptors) = parse_ns_id_descriptors(page) {
                let _ = command_set(&descriptors);
            }
            if let Ok(nvm) = IdentifyControllerNvm::parse(page) {
                let _ = nvm.write_zeroes_size_limit_bytes(4096);
            }
            if let Ok(zns) = IdentifyControllerZns::parse(page) {
                let _ = zns.zone_append_size_limit_bytes(4096, Some(1 << 20));
            }
            if let Ok(zns) = IdentifyNamespaceZns::parse(page) {
                let _ = zns.max_active_resources();
                let _ = zns.max_open_resources();
                let _ = zns.zone_size_blocks(rng.next_u64() as usize % 80);
            }
        }
    }
}

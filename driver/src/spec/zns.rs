//! Zoned Namespace wire formats (NVMe ZNS Command Set 1.1): the Identify
//! pages of the Zoned Namespace Command Set (§4.1, §4.2) and Report Zones
//! (§3.4.2).

use super::identify::{power_of_two_units, LBA_FORMATS_MAX};
use super::le::{u16_at, u32_at, u64_at, u8_at};
use super::{check_len, ParseError};
use serde::Serialize;

/// Zone Management Receive: Zone Receive Action (CDW13 bits 7:0).
pub const ZRA_REPORT_ZONES: u8 = 0x00;
/// Zone Receive Action 01h: Extended Report Zones (descriptors followed by
/// their zone descriptor extensions).
pub const ZRA_EXTENDED_REPORT_ZONES: u8 = 0x01;

/// Report Zones header: Number of Zones (bytes 7:0), then 56 reserved.
pub const REPORT_HEADER_SIZE: usize = 64;
/// One zone descriptor.
pub const ZONE_DESCRIPTOR_SIZE: usize = 64;

mod offset {
    pub const ZT: usize = 0;
    pub const ZS: usize = 1;
    pub const ZA: usize = 2;
    pub const ZCAP: usize = 8;
    pub const ZSLBA: usize = 16;
    pub const WP: usize = 24;
}

/// Zone State (ZS field, bits 7:4 of byte 1; ZNS 1.1 Figure 37).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ZoneState {
    /// ZSE:Empty (1h): write pointer at the zone start, nothing written.
    Empty,
    /// ZSIO:Implicitly Opened (2h): opened by a write.
    ImplicitlyOpened,
    /// ZSEO:Explicitly Opened (3h): opened by Zone Management Send, Open.
    ExplicitlyOpened,
    /// ZSC:Closed (4h): partly written, not open, still active.
    Closed,
    /// ZSRO:Read Only (Dh): can be read, never written again.
    ReadOnly,
    /// ZSF:Full (Eh): written to capacity or finished.
    Full,
    /// ZSO:Offline (Fh): neither readable nor writable.
    Offline,
    /// A value the spec reserves, kept as reported.
    Reserved(u8),
}

impl ZoneState {
    /// Decodes the 4-bit ZS value (already shifted down from bits 7:4).
    pub const fn from_raw(zs: u8) -> Self {
        match zs {
            0x1 => ZoneState::Empty,
            0x2 => ZoneState::ImplicitlyOpened,
            0x3 => ZoneState::ExplicitlyOpened,
            0x4 => ZoneState::Closed,
            0xD => ZoneState::ReadOnly,
            0xE => ZoneState::Full,
            0xF => ZoneState::Offline,
            other => ZoneState::Reserved(other),
        }
    }
}

/// One zone as the device reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ZoneDescriptor {
    /// Zone Type: 2h is Sequential Write Required.
    pub zt: u8,
    /// Zone State (ZS).
    pub state: ZoneState,
    /// Zone Attributes (ZA): bit 0 ZFC (finished by controller), bit 1 FZR
    /// (finish recommended), bit 2 RZR (reset recommended), bit 7 ZDEV (zone
    /// descriptor extension valid).
    pub za: u8,
    /// Zone Capacity, in logical blocks.
    pub zcap: u64,
    /// Zone Start LBA.
    pub zslba: u64,
    /// Write Pointer (all ones when the zone has none, e.g. full).
    pub wp: u64,
}

/// Zone Type 2h: Sequential Write Required, the only type ZNS 1.1 defines.
pub const ZONE_TYPE_SEQUENTIAL_WRITE_REQUIRED: u8 = 0x2;

impl ZoneDescriptor {
    /// Parses one 64-byte zone descriptor (ZNS Command Set 1.1 §3.4.2); fails on a
    /// shorter slice.
    pub fn parse(data: &[u8]) -> Result<Self, ParseError> {
        check_len(data, ZONE_DESCRIPTOR_SIZE, "zone descriptor")?;
        Ok(ZoneDescriptor {
            zt: data[offset::ZT] & 0x0f,
            state: ZoneState::from_raw(data[offset::ZS] >> 4),
            za: data[offset::ZA],
            zcap: u64_at(data, offset::ZCAP),
            zslba: u64_at(data, offset::ZSLBA),
            wp: u64_at(data, offset::WP),
        })
    }
}

/// Parses a Report Zones buffer: the header's zone count, bounded by what
/// the buffer holds.
pub fn parse_report_zones(data: &[u8]) -> Result<(u64, Vec<ZoneDescriptor>), ParseError> {
    check_len(data, REPORT_HEADER_SIZE, "report zones header")?;
    let reported = u64_at(data, 0);
    let room = ((data.len() - REPORT_HEADER_SIZE) / ZONE_DESCRIPTOR_SIZE) as u64;
    let count = reported.min(room) as usize;
    let zones = (0..count)
        .map(|i| ZoneDescriptor::parse(&data[REPORT_HEADER_SIZE + i * ZONE_DESCRIPTOR_SIZE..]))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((reported, zones))
}

/// Byte offset of ZASL in the ZNS Identify Controller data structure.
pub const ZNS_CONTROLLER_ZASL_OFFSET: usize = 0;

/// I/O Command Set specific Identify Controller, Zoned Namespace Command Set
/// (CNS 06h, CSI 02h; ZNS 1.1).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct IdentifyControllerZns {
    /// Zone Append Size Limit: `2^ZASL` units of CAP.MPSMIN; 0 means MDTS.
    pub zasl: u8,
}

impl IdentifyControllerZns {
    /// Bytes required.
    pub const MIN_LEN: usize = ZNS_CONTROLLER_ZASL_OFFSET + 1;
    const WHAT: &'static str = "Identify Controller (Zoned Namespace Command Set)";

    /// Decodes the data structure.
    pub fn parse(buf: &[u8]) -> Result<Self, ParseError> {
        check_len(buf, Self::MIN_LEN, Self::WHAT)?;
        Ok(Self { zasl: u8_at(buf, ZNS_CONTROLLER_ZASL_OFFSET) })
    }

    /// Largest Zone Append in bytes. ZASL 0 defers to MDTS (`mdts_bytes`,
    /// `None` = unlimited). Otherwise `min_page_size << ZASL`, capped at MDTS
    /// since MDTS bounds every data transfer. Saturates.
    pub fn zone_append_size_limit_bytes(&self, min_page_size: usize, mdts_bytes: Option<u64>) -> Option<u64> {
        if self.zasl == 0 {
            return mdts_bytes;
        }
        let zasl_bytes = power_of_two_units(min_page_size, self.zasl);
        Some(mdts_bytes.map_or(zasl_bytes, |mdts| zasl_bytes.min(mdts)))
    }
}

/// Byte offsets in the I/O Command Set specific Identify Namespace data
/// structure for the Zoned Namespace Command Set (CNS 05h, CSI 02h; ZNS 1.1).
pub mod zns_namespace_offsets {
    /// Zone Operation Characteristics.
    pub const ZOC: usize = 0;
    /// Optional Zoned Command Support.
    pub const OZCS: usize = 2;
    /// Maximum Active Resources, 0-based.
    pub const MAR: usize = 4;
    /// Maximum Open Resources, 0-based.
    pub const MOR: usize = 8;
    /// Reset Recommended Limit, seconds.
    pub const RRL: usize = 12;
    /// Finish Recommended Limit, seconds.
    pub const FRL: usize = 16;
    /// LBA Format Extension 0; 64 entries of 16 bytes follow.
    pub const LBAFE: usize = 2816;
}

/// Bytes per LBA Format Extension entry.
pub const ZNS_LBAFE_SIZE: usize = 16;
/// MAR/MOR value meaning no limit.
pub const ZNS_RESOURCES_UNLIMITED: u32 = 0xFFFF_FFFF;

/// ZOC bit 0: Variable Zone Capacity.
const ZOC_VARIABLE_ZONE_CAPACITY: u16 = 1 << 0;
/// ZOC bit 1: Zone Active Excursions.
const ZOC_ZONE_ACTIVE_EXCURSIONS: u16 = 1 << 1;
/// OZCS bit 0: Read Across Zone Boundaries.
const OZCS_READ_ACROSS_ZONE_BOUNDARIES: u16 = 1 << 0;

/// A ZNS LBA Format Extension: zone geometry for the LBA format of the same
/// index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ZnsLbaFormatExtension {
    /// Zone Size, logical blocks.
    pub zsze: u64,
    /// Zone Descriptor Extension Size, in 64-byte units.
    pub zdes: u8,
}

/// I/O Command Set specific Identify Namespace, Zoned Namespace Command Set
/// (CNS 05h, CSI 02h).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct IdentifyNamespaceZns {
    /// Zone Operation Characteristics.
    pub zoc: u16,
    /// Optional Zoned Command Support.
    pub ozcs: u16,
    /// Maximum Active Resources, 0-based; FFFFFFFFh: no limit.
    pub mar: u32,
    /// Maximum Open Resources, 0-based; FFFFFFFFh: no limit.
    pub mor: u32,
    /// Reset Recommended Limit, seconds (0: not reported).
    pub rrl: u32,
    /// Finish Recommended Limit, seconds (0: not reported).
    pub frl: u32,
    /// LBA Format Extensions, indexed like the NVM namespace's LBA formats.
    pub lbafe: Vec<ZnsLbaFormatExtension>,
}

impl IdentifyNamespaceZns {
    /// Bytes required: everything before the LBA Format Extensions. As many
    /// whole extensions as the buffer holds are decoded (all 64 from a full
    /// 4096-byte page).
    pub const MIN_LEN: usize = zns_namespace_offsets::LBAFE;
    const WHAT: &'static str = "Identify Namespace (Zoned Namespace Command Set)";

    /// Decodes the data structure.
    pub fn parse(buf: &[u8]) -> Result<Self, ParseError> {
        use zns_namespace_offsets as off;
        check_len(buf, Self::MIN_LEN, Self::WHAT)?;
        let lbafe_count = ((buf.len() - off::LBAFE) / ZNS_LBAFE_SIZE).min(LBA_FORMATS_MAX);
        let lbafe = (0..lbafe_count)
            .map(|i| {
                let at = off::LBAFE + i * ZNS_LBAFE_SIZE;
                ZnsLbaFormatExtension { zsze: u64_at(buf, at), zdes: u8_at(buf, at + 8) }
            })
            .collect();
        Ok(Self {
            zoc: u16_at(buf, off::ZOC),
            ozcs: u16_at(buf, off::OZCS),
            mar: u32_at(buf, off::MAR),
            mor: u32_at(buf, off::MOR),
            rrl: u32_at(buf, off::RRL),
            frl: u32_at(buf, off::FRL),
            lbafe,
        })
    }

    /// Zones that may be active at once, or `None` for no limit.
    pub fn max_active_resources(&self) -> Option<u32> {
        (self.mar != ZNS_RESOURCES_UNLIMITED).then(|| self.mar + 1)
    }

    /// Zones that may be open at once, or `None` for no limit.
    pub fn max_open_resources(&self) -> Option<u32> {
        (self.mor != ZNS_RESOURCES_UNLIMITED).then(|| self.mor + 1)
    }

    /// ZOC bit 0: zone capacity may change on Zone Reset.
    pub fn variable_zone_capacity(&self) -> bool {
        self.zoc & ZOC_VARIABLE_ZONE_CAPACITY != 0
    }

    /// ZOC bit 1: the controller may finish active zones on its own.
    pub fn zone_active_excursions(&self) -> bool {
        self.zoc & ZOC_ZONE_ACTIVE_EXCURSIONS != 0
    }

    /// OZCS bit 0: reads may cross zone boundaries.
    pub fn read_across_zone_boundaries(&self) -> bool {
        self.ozcs & OZCS_READ_ACROSS_ZONE_BOUNDARIES != 0
    }

    /// Zone size in logical blocks for LBA format `lba_format_index` (use
    /// [`IdentifyNamespace::current_lba_format_index`](super::identify::IdentifyNamespace::current_lba_format_index)). Errors when the
    /// extension is missing or ZSZE is 0.
    pub fn zone_size_blocks(&self, lba_format_index: usize) -> Result<u64, ParseError> {
        match self.lbafe.get(lba_format_index) {
            Some(ext) if ext.zsze != 0 => Ok(ext.zsze),
            Some(ext) => Err(ParseError::InvalidField { what: Self::WHAT, field: "ZSZE", value: ext.zsze }),
            None => {
                Err(ParseError::InvalidField { what: Self::WHAT, field: "LBAFE index", value: lba_format_index as u64 })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::identify::IDENTIFY_DATA_SIZE;

    fn page() -> Vec<u8> {
        vec![0u8; IDENTIFY_DATA_SIZE]
    }

    fn put(buf: &mut [u8], offset: usize, data: &[u8]) {
        buf[offset..offset + data.len()].copy_from_slice(data);
    }

    #[test]
    fn parses_a_report() {
        let mut data = vec![0u8; REPORT_HEADER_SIZE + 2 * ZONE_DESCRIPTOR_SIZE];
        data[0] = 5; // the device has 5 zones but we asked for room for 2
        let d = REPORT_HEADER_SIZE;
        data[d] = 0x2;
        data[d + 1] = 0x1 << 4;
        data[d + 8..d + 16].copy_from_slice(&0x3000u64.to_le_bytes());
        data[d + 24..d + 32].copy_from_slice(&0u64.to_le_bytes());
        let d2 = d + ZONE_DESCRIPTOR_SIZE;
        data[d2] = 0x2;
        data[d2 + 1] = 0xE << 4;
        data[d2 + 16..d2 + 24].copy_from_slice(&0x4000u64.to_le_bytes());
        data[d2 + 24..d2 + 32].copy_from_slice(&u64::MAX.to_le_bytes());
        let (reported, zones) = parse_report_zones(&data).unwrap();
        assert_eq!(reported, 5);
        assert_eq!(zones.len(), 2);
        assert_eq!(zones[0].state, ZoneState::Empty);
        assert_eq!(zones[0].zcap, 0x3000);
        assert_eq!(zones[1].state, ZoneState::Full);
        assert_eq!(zones[1].zslba, 0x4000);
        assert_eq!(zones[1].wp, u64::MAX);
    }

    #[test]
    fn short_buffers_are_errors() {
        assert!(parse_report_zones(&[0; 10]).is_err());
        let mut data = vec![0xffu8; REPORT_HEADER_SIZE + 10];
        data[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(parse_report_zones(&data).unwrap().1.len(), 0);
        assert_eq!(ZoneState::from_raw(0x7), ZoneState::Reserved(7));
    }

    #[test]
    fn zns_controller() {
        let mut buf = page();
        let zns = IdentifyControllerZns::parse(&buf).unwrap();
        assert_eq!(zns.zasl, 0);
        assert_eq!(zns.zone_append_size_limit_bytes(4096, Some(512 * 1024)), Some(512 * 1024));
        assert_eq!(zns.zone_append_size_limit_bytes(4096, None), None);
        buf[0] = 5;
        let zns = IdentifyControllerZns::parse(&buf).unwrap();
        assert_eq!(zns.zone_append_size_limit_bytes(4096, None), Some(128 * 1024));
        assert_eq!(zns.zone_append_size_limit_bytes(4096, Some(512 * 1024)), Some(128 * 1024));
        assert_eq!(zns.zone_append_size_limit_bytes(4096, Some(64 * 1024)), Some(64 * 1024));
        buf[0] = 0xFF;
        let zns = IdentifyControllerZns::parse(&buf).unwrap();
        assert_eq!(zns.zone_append_size_limit_bytes(4096, None), Some(u64::MAX));
        assert!(IdentifyControllerZns::parse(&[]).is_err());
    }

    /// A ZNS Identify Namespace page like QEMU 7.2 returns for
    /// `zoned.zone_size=64M`, `zoned.max_active=8`, `zoned.max_open=8` on
    /// 4 KiB blocks.
    fn qemu_zns_namespace_page() -> Vec<u8> {
        let mut buf = page();
        put(&mut buf, 4, &7u32.to_le_bytes()); // MAR
        put(&mut buf, 8, &7u32.to_le_bytes()); // MOR
        let zone_blocks: u64 = (64 << 20) / 4096;
        for i in 0..8 {
            put(&mut buf, 2816 + 16 * i, &zone_blocks.to_le_bytes());
        }
        buf
    }

    #[test]
    fn zns_namespace_offsets_match_spec() {
        use zns_namespace_offsets::*;
        assert_eq!([ZOC, OZCS, MAR, MOR, RRL, FRL, LBAFE], [0, 2, 4, 8, 12, 16, 2816]);
        // 64 extensions end where the vendor specific area starts.
        assert_eq!(LBAFE + LBA_FORMATS_MAX * ZNS_LBAFE_SIZE, 3840);
    }

    #[test]
    fn zns_namespace_qemu_7_2() {
        let zns = IdentifyNamespaceZns::parse(&qemu_zns_namespace_page()).unwrap();
        assert_eq!(zns.max_active_resources(), Some(8));
        assert_eq!(zns.max_open_resources(), Some(8));
        assert_eq!(zns.lbafe.len(), 64);
        assert_eq!(zns.lbafe[0], ZnsLbaFormatExtension { zsze: 16384, zdes: 0 });
        assert_eq!(zns.zone_size_blocks(0), Ok(16384));
        assert!(!zns.variable_zone_capacity());
        assert!(!zns.zone_active_excursions());
        assert!(!zns.read_across_zone_boundaries());
        // Format 8 has no zone size.
        assert!(matches!(zns.zone_size_blocks(8), Err(ParseError::InvalidField { field: "ZSZE", value: 0, .. })));
        assert!(matches!(
            zns.zone_size_blocks(64),
            Err(ParseError::InvalidField { field: "LBAFE index", value: 64, .. })
        ));
    }

    #[test]
    fn zns_namespace_limits_and_partial_buffers() {
        let mut buf = qemu_zns_namespace_page();
        put(&mut buf, 0, &0x0003u16.to_le_bytes()); // ZOC
        put(&mut buf, 2, &0x0001u16.to_le_bytes()); // OZCS
        put(&mut buf, 4, &u32::MAX.to_le_bytes()); // MAR: no limit
        put(&mut buf, 8, &(u32::MAX - 1).to_le_bytes()); // MOR: the largest limit
        put(&mut buf, 12, &10u32.to_le_bytes()); // RRL
        put(&mut buf, 16, &20u32.to_le_bytes()); // FRL
        buf[2816 + 8] = 2; // ZDES of format 0
        let zns = IdentifyNamespaceZns::parse(&buf).unwrap();
        assert_eq!(zns.max_active_resources(), None);
        assert_eq!(zns.max_open_resources(), Some(u32::MAX));
        assert!(zns.variable_zone_capacity());
        assert!(zns.zone_active_excursions());
        assert!(zns.read_across_zone_boundaries());
        assert_eq!((zns.rrl, zns.frl), (10, 20));
        assert_eq!(zns.lbafe[0].zdes, 2);

        // Only the whole extensions that fit are decoded.
        let partial = IdentifyNamespaceZns::parse(&buf[..2816 + 16 * 3 + 5]).unwrap();
        assert_eq!(partial.lbafe.len(), 3);
        assert_eq!(IdentifyNamespaceZns::parse(&buf[..2816]).unwrap().lbafe.len(), 0);
        assert!(matches!(
            IdentifyNamespaceZns::parse(&buf[..2815]),
            Err(ParseError::TooShort { expected: 2816, got: 2815, .. })
        ));
        // A buffer longer than a page still yields at most 64.
        let mut long = buf.clone();
        long.resize(8192, 0);
        assert_eq!(IdentifyNamespaceZns::parse(&long).unwrap().lbafe.len(), 64);
    }
}

//! Zoned Namespace wire formats (NVMe ZNS Command Set 1.1 §3.4.2).

use super::le::u64_at;
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

#[cfg(test)]
mod tests {
    use super::*;

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
}

//! Zoned Namespace command builders (ZNS Command Set 1.1 §3.4).

use crate::spec::command::{opcode, Command};
use crate::spec::zns::ZRA_REPORT_ZONES;

/// Which zones a report lists (Zone Receive Action Specific Field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ReportFilter {
    All = 0x0,
    Empty = 0x1,
    ImplicitlyOpened = 0x2,
    ExplicitlyOpened = 0x3,
    Closed = 0x4,
    Full = 0x5,
    ReadOnly = 0x6,
    Offline = 0x7,
}

/// Zone Management Receive, Report Zones, from `slba` into a buffer of
/// `len_bytes` at `prp1`/`prp2`. With `partial`, the header's zone count
/// covers only the zones that fit the buffer.
pub fn report_zones(
    nsid: u32,
    slba: u64,
    len_bytes: u32,
    filter: ReportFilter,
    partial: bool,
    prp1: u64,
    prp2: u64,
) -> Command {
    debug_assert!(
        len_bytes >= 4 && len_bytes.is_multiple_of(4),
        "the buffer is a whole number of dwords"
    );
    Command {
        opcode: opcode::nvm::ZONE_MANAGEMENT_RECEIVE,
        nsid,
        prp1,
        prp2,
        cdw10: slba as u32,
        cdw11: (slba >> 32) as u32,
        // NUMD: 0-based dword count.
        cdw12: (len_bytes / 4).saturating_sub(1),
        cdw13: u32::from(ZRA_REPORT_ZONES) | (filter as u32) << 8 | u32::from(partial) << 16,
        ..Command::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_zones_layout() {
        let cmd = report_zones(1, 0x1_0000_0002, 4096, ReportFilter::Full, true, 0x1000, 0);
        let bytes = cmd.to_bytes();
        assert_eq!(bytes[0], 0x7A);
        assert_eq!(u32::from_le_bytes(bytes[4..8].try_into().unwrap()), 1);
        assert_eq!(
            u32::from_le_bytes(bytes[24..28].try_into().unwrap()),
            0x1000
        );
        assert_eq!(u32::from_le_bytes(bytes[40..44].try_into().unwrap()), 2); // SLBA low
        assert_eq!(u32::from_le_bytes(bytes[44..48].try_into().unwrap()), 1); // SLBA high
        assert_eq!(u32::from_le_bytes(bytes[48..52].try_into().unwrap()), 1023); // NUMD
        assert_eq!(
            u32::from_le_bytes(bytes[52..56].try_into().unwrap()),
            0x1_05_00
        ); // partial, Full, report
    }
}

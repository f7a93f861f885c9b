//! Zoned Namespace command builders (ZNS Command Set 1.1 §3.4).
//!
//! The conventions of [`super::nvm`] hold here too: `blocks` is 1-based
//! (`1..=`[`MAX_BLOCKS`](super::nvm::MAX_BLOCKS)) and becomes the 0-based
//! NLB in CDW12 bits 15:0, out-of-range counts are caught by debug
//! assertions (the namespace layer validates user input first), and the
//! queue pair fills in PRP1/PRP2 and the Command Identifier.

use super::nvm::{cdw12_fua, cdw12_nlb, lba_dwords};
use crate::spec::command::{opcode, Command};
use crate::spec::zns::ZRA_REPORT_ZONES;

/// Which zones a report lists (the Zone Receive Action Specific field of
/// Report Zones, ZNS Command Set 1.1 §3.4.2, CDW13 bits 15:8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ReportFilter {
    /// 0h: every zone.
    All = 0x0,
    /// 1h: zones in the ZSE:Empty state.
    Empty = 0x1,
    /// 2h: zones in the ZSIO:Implicitly Opened state.
    ImplicitlyOpened = 0x2,
    /// 3h: zones in the ZSEO:Explicitly Opened state.
    ExplicitlyOpened = 0x3,
    /// 4h: zones in the ZSC:Closed state.
    Closed = 0x4,
    /// 5h: zones in the ZSF:Full state.
    Full = 0x5,
    /// 6h: zones in the ZSRO:Read Only state.
    ReadOnly = 0x6,
    /// 7h: zones in the ZSO:Offline state.
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
    debug_assert!(len_bytes >= 4 && len_bytes.is_multiple_of(4), "the buffer is a whole number of dwords");
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

/// Zone Append (opcode 7Dh, ZNS Command Set 1.1 §3.4.1): write `blocks`
/// logical blocks at the write pointer of the zone starting at `zslba`.
/// The controller picks the LBA and returns it in completion DW0 (bits
/// 31:0) and DW1 (bits 63:32).
///
/// CDW10/11 = ZSLBA, CDW12 bits 15:0 = NLB (0-based), bit 30 = FUA. ZASL
/// (Identify Controller, ZNS) may allow fewer blocks than MDTS.
pub fn zone_append(nsid: u32, zslba: u64, blocks: u32, fua: bool) -> Command {
    let (cdw10, cdw11) = lba_dwords(zslba);
    Command { nsid, cdw10, cdw11, cdw12: cdw12_fua(fua) | cdw12_nlb(blocks), ..Command::new(opcode::nvm::ZONE_APPEND) }
}

/// Zone Send Action (ZSA), Zone Management Send CDW13 bits 7:0 (ZNS Command
/// Set 1.1 §3.4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ZoneSendAction {
    /// Close Zone: an open zone becomes Closed, releasing an open resource;
    /// it stays active and keeps its write pointer.
    Close = 0x1,
    /// Finish Zone: the zone becomes Full.
    Finish = 0x2,
    /// Open Zone: the zone becomes Explicitly Opened.
    Open = 0x3,
    /// Reset Zone Write Pointer: the zone becomes Empty.
    Reset = 0x4,
    /// Offline Zone: a Read Only zone becomes Offline.
    Offline = 0x5,
    /// Set Zone Descriptor Extension: the data buffer holds the extension
    /// (ZDES bytes); an Empty zone becomes Closed.
    SetZoneDescriptorExtension = 0x10,
}

/// Zone Management Send CDW13 bits 7:0 – Zone Send Action.
const CDW13_ZSA_MASK: u32 = 0xFF;
/// Zone Management Send CDW13 bit 8 – Select All (SALL): act on every zone
/// the action applies to, ignoring SLBA.
pub const CDW13_SELECT_ALL: u32 = 1 << 8;

/// Zone Management Send (opcode 79h, ZNS Command Set 1.1 §3.4.3): apply
/// `action` to the zone starting at `slba`, or with `select_all` to every
/// zone in a state the action applies to (then SLBA is ignored).
///
/// CDW10/11 = SLBA, CDW13 bits 7:0 = ZSA, bit 8 = Select All; bit 9 (Zone
/// Send Action Specific Option) stays clear. Only
/// [`ZoneSendAction::SetZoneDescriptorExtension`] transfers data, for which
/// the queue pair fills in the data pointer.
pub fn zone_management_send(nsid: u32, slba: u64, action: ZoneSendAction, select_all: bool) -> Command {
    let (cdw10, cdw11) = lba_dwords(slba);
    let sall = if select_all { CDW13_SELECT_ALL } else { 0 };
    Command {
        nsid,
        cdw10,
        cdw11,
        cdw13: sall | (action as u32 & CDW13_ZSA_MASK),
        ..Command::new(opcode::nvm::ZONE_MANAGEMENT_SEND)
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

    #[test]
    fn zone_append_bytes() {
        let expected = sqe(&[
            (0, &[0x7D]),
            (4, &[0x01, 0x00, 0x00, 0x00]),
            (40, &[0x00, 0x00, 0x08, 0x00]), // ZSLBA 0x3_0008_0000
            (44, &[0x03, 0x00, 0x00, 0x00]), //
            (48, &[0x1F, 0x00, 0x00, 0x40]), // 32 blocks: NLB 1Fh; FUA
        ]);
        assert_eq!(zone_append(1, 0x3_0008_0000, 32, true).to_bytes(), expected);
        let plain = sqe(&[(0, &[0x7D]), (4, &[0x01, 0x00, 0x00, 0x00])]);
        assert_eq!(zone_append(1, 0, 1, false).to_bytes(), plain);
        let cmd = zone_append(1, 0, 1, false);
        assert_eq!((cmd.cid, cmd.prp1, cmd.prp2), (0, 0, 0));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "outside 1..=65536")]
    fn zone_append_of_nothing_is_a_bug() {
        let _ = zone_append(1, 0, 0, false);
    }

    #[test]
    fn zone_management_send_bytes() {
        let expected = sqe(&[
            (0, &[0x79]),
            (4, &[0x02, 0x00, 0x00, 0x00]),
            (40, &[0x00, 0x40, 0x00, 0x00]), // SLBA 4000h
            (52, &[0x04, 0x00, 0x00, 0x00]), // ZSA Reset
        ]);
        assert_eq!(zone_management_send(2, 0x4000, ZoneSendAction::Reset, false).to_bytes(), expected);
        let all = sqe(&[
            (0, &[0x79]),
            (4, &[0x02, 0x00, 0x00, 0x00]),
            (52, &[0x02, 0x01, 0x00, 0x00]), // ZSA Finish, Select All
        ]);
        assert_eq!(zone_management_send(2, 0, ZoneSendAction::Finish, true).to_bytes(), all);
        let ext = sqe(&[
            (0, &[0x79]),
            (4, &[0x02, 0x00, 0x00, 0x00]),
            (40, &[0x00, 0x00, 0x00, 0x00]),
            (44, &[0x01, 0x00, 0x00, 0x00]), // SLBA 1_0000_0000h
            (52, &[0x10, 0x00, 0x00, 0x00]), // Set Zone Descriptor Extension
        ]);
        assert_eq!(
            zone_management_send(2, 0x1_0000_0000, ZoneSendAction::SetZoneDescriptorExtension, false).to_bytes(),
            ext
        );
    }

    #[test]
    fn zone_send_actions_match_spec() {
        let actions = [
            (ZoneSendAction::Close, 0x01),
            (ZoneSendAction::Finish, 0x02),
            (ZoneSendAction::Open, 0x03),
            (ZoneSendAction::Reset, 0x04),
            (ZoneSendAction::Offline, 0x05),
            (ZoneSendAction::SetZoneDescriptorExtension, 0x10),
        ];
        for (action, zsa) in actions {
            assert_eq!(action as u8, zsa);
            assert_eq!(zone_management_send(1, 0, action, false).cdw13, u32::from(zsa));
        }
        assert_eq!(CDW13_SELECT_ALL, 0x100);
    }

    #[test]
    fn report_zones_layout() {
        let cmd = report_zones(1, 0x1_0000_0002, 4096, ReportFilter::Full, true, 0x1000, 0);
        let bytes = cmd.to_bytes();
        assert_eq!(bytes[0], 0x7A);
        assert_eq!(u32::from_le_bytes(bytes[4..8].try_into().unwrap()), 1);
        assert_eq!(u32::from_le_bytes(bytes[24..28].try_into().unwrap()), 0x1000);
        assert_eq!(u32::from_le_bytes(bytes[40..44].try_into().unwrap()), 2); // SLBA low
        assert_eq!(u32::from_le_bytes(bytes[44..48].try_into().unwrap()), 1); // SLBA high
        assert_eq!(u32::from_le_bytes(bytes[48..52].try_into().unwrap()), 1023); // NUMD
        assert_eq!(u32::from_le_bytes(bytes[52..56].try_into().unwrap()), 0x1_05_00);
        // partial, Full, report
    }
}

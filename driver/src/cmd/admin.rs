//! Admin command builders (NVMe Base 2.0, "Admin Command Set").
//!
//! Builders take the data buffer's bus address(es) as PRP entries and
//! return the finished [`Command`]; the queue fills in the CID. Counts are
//! 1-based in this API and converted to the spec's 0-based fields here.

use crate::spec::command::opcode::admin as op;
use crate::spec::command::Command;
use crate::spec::identify::{
    CNS_ACTIVE_NAMESPACES, CNS_CONTROLLER, CNS_CSI_CONTROLLER, CNS_CSI_NAMESPACE, CNS_NAMESPACE, CNS_NS_ID_DESCRIPTORS,
    CSI_NVM,
};

/// Feature: Arbitration.
pub const FID_ARBITRATION: u8 = 0x01;
/// Feature: Power Management.
pub const FID_POWER_MANAGEMENT: u8 = 0x02;
/// Feature: Temperature Threshold.
pub const FID_TEMPERATURE_THRESHOLD: u8 = 0x04;
/// Feature: Volatile Write Cache (CDW11 bit 0: enable).
pub const FID_VOLATILE_WRITE_CACHE: u8 = 0x06;
/// Feature: Number of Queues.
pub const FID_NUMBER_OF_QUEUES: u8 = 0x07;
/// Feature: Interrupt Coalescing.
pub const FID_INTERRUPT_COALESCING: u8 = 0x08;
/// Feature: Asynchronous Event Configuration.
pub const FID_ASYNC_EVENT_CONFIG: u8 = 0x0B;
/// Feature: Timestamp.
pub const FID_TIMESTAMP: u8 = 0x0E;
/// Feature: Host Behavior Support (NVMe Base 2.1 §5.1.25.1.14), a
/// 512-byte structure in the data buffer (see
/// [`crate::spec::features::HostBehaviorSupport`]).
pub const FID_HOST_BEHAVIOR_SUPPORT: u8 = 0x16;
/// Feature: I/O Command Set Profile.
pub const FID_IO_COMMAND_SET_PROFILE: u8 = 0x19;

/// Get Features SEL: the current value.
pub const SEL_CURRENT: u8 = 0b000;
/// Get Features SEL: the default value.
pub const SEL_DEFAULT: u8 = 0b001;
/// Get Features SEL: the saved value.
pub const SEL_SAVED: u8 = 0b010;
/// Get Features SEL: the feature's capabilities (saveable, namespace
/// specific, changeable) in DW0.
pub const SEL_SUPPORTED_CAPABILITIES: u8 = 0b011;

/// Get Log Page CDW10 bit 15 – Retain Asynchronous Event. Clear (the
/// builders' default), reading a log page clears the event that reported it.
pub const GET_LOG_PAGE_RAE: u32 = 1 << 15;
/// Set Features CDW10 bit 31 – Save.
const SET_FEATURES_SAVE: u32 = 1 << 31;

/// Create I/O CQ/SQ CDW11 bit 0 – Physically Contiguous.
const QUEUE_PHYSICALLY_CONTIGUOUS: u32 = 1 << 0;
/// Create I/O CQ CDW11 bit 1 – Interrupts Enabled.
const CQ_INTERRUPTS_ENABLED: u32 = 1 << 1;
/// Create I/O SQ CDW11 bits 2:1 – Queue Priority.
const SQ_QPRIO_SHIFT: u32 = 1;

/// Converts a 1-based count to the spec's 0-based field. Counts below 1 are
/// a caller bug (debug assertion); release builds encode them as 1.
fn zero_based(count: u16) -> u32 {
    debug_assert!(count >= 1, "count is 1-based");
    u32::from(count.saturating_sub(1))
}

/// Queue size field for `entries` (2..=65535 here; the spec's 0-based
/// QSIZE would allow 65536, which a `u16` count cannot say).
fn queue_size(entries: u16) -> u32 {
    debug_assert!(entries >= 2, "a queue holds at least 2 entries");
    zero_based(entries.max(2))
}

/// Identify (opcode 06h): CDW10 = CNTID << 16 | CNS, CDW11 = CSI << 24.
///
/// `prp1` must address a 4096-byte buffer that does not cross a memory
/// page boundary (page-aligned with pages of at least 4 KiB), so no PRP2
/// is needed.
pub fn identify(cns: u8, nsid: u32, cntid: u16, csi: u8, prp1: u64) -> Command {
    Command {
        nsid,
        prp1,
        cdw10: u32::from(cntid) << 16 | u32::from(cns),
        cdw11: u32::from(csi) << 24,
        ..Command::new(op::IDENTIFY)
    }
}

/// Identify Controller (CNS 01h).
pub fn identify_controller(prp1: u64) -> Command {
    identify(CNS_CONTROLLER, 0, 0, CSI_NVM, prp1)
}

/// Identify Namespace, NVM Command Set (CNS 00h).
pub fn identify_namespace(nsid: u32, prp1: u64) -> Command {
    identify(CNS_NAMESPACE, nsid, 0, CSI_NVM, prp1)
}

/// Active Namespace ID list (CNS 02h): active NSIDs greater than
/// `start_nsid` (0 for the first page).
pub fn identify_active_namespaces(start_nsid: u32, prp1: u64) -> Command {
    identify(CNS_ACTIVE_NAMESPACES, start_nsid, 0, CSI_NVM, prp1)
}

/// Namespace Identification Descriptor list (CNS 03h).
pub fn identify_ns_id_descriptors(nsid: u32, prp1: u64) -> Command {
    identify(CNS_NS_ID_DESCRIPTORS, nsid, 0, CSI_NVM, prp1)
}

/// I/O Command Set specific Identify Namespace (CNS 05h).
pub fn identify_csi_namespace(nsid: u32, csi: u8, prp1: u64) -> Command {
    identify(CNS_CSI_NAMESPACE, nsid, 0, csi, prp1)
}

/// I/O Command Set specific Identify Controller (CNS 06h).
pub fn identify_csi_controller(csi: u8, prp1: u64) -> Command {
    identify(CNS_CSI_CONTROLLER, 0, 0, csi, prp1)
}

/// Get Log Page (opcode 02h) for `len_bytes` starting `offset_bytes` into
/// log page `lid`, CSI 0 (NVM), RAE clear.
///
/// `len_bytes` must be a non-zero multiple of 4 and `offset_bytes` a
/// multiple of 4: the command counts dwords (NUMD, 0-based, split into
/// NUMDL in CDW10 bits 31:16 and NUMDU in CDW11 bits 15:0) and LPOL must
/// be dword aligned. Violations are caught by debug assertions; release builds
/// round the length down (at least one dword) and the offset down.
/// Transfers crossing a memory page boundary need `prp2` (a second page
/// or a PRP list).
pub fn get_log_page(lid: u8, nsid: u32, len_bytes: u32, offset_bytes: u64, prp1: u64, prp2: u64) -> Command {
    debug_assert!(len_bytes != 0 && len_bytes & 0b11 == 0, "log length {len_bytes} is not a non-zero multiple of 4");
    debug_assert!(offset_bytes & 0b11 == 0, "log offset {offset_bytes} is not dword aligned");
    let numd = (len_bytes / 4).saturating_sub(1);
    let offset = offset_bytes & !0b11;
    Command {
        nsid,
        prp1,
        prp2,
        cdw10: (numd & 0xFFFF) << 16 | u32::from(lid),
        cdw11: numd >> 16,
        cdw12: offset as u32,
        cdw13: (offset >> 32) as u32,
        ..Command::new(op::GET_LOG_PAGE)
    }
}

/// Set Features (opcode 09h) for the controller (NSID 0): CDW10 = SV << 31 |
/// FID, CDW11 = the feature's value. Set `nsid`, `prp1` or `cdw12`–`cdw15`
/// on the result for features that need them.
pub fn set_features(fid: u8, cdw11: u32, save: bool) -> Command {
    let sv = if save { SET_FEATURES_SAVE } else { 0 };
    Command { cdw10: sv | u32::from(fid), cdw11, ..Command::new(op::SET_FEATURES) }
}

/// Get Features (opcode 0Ah): CDW10 = SEL << 8 | FID (`SEL_*`). The value
/// comes back in the completion's DW0.
pub fn get_features(fid: u8, sel: u8, cdw11: u32) -> Command {
    debug_assert!(sel <= 0b111, "SEL is 3 bits");
    Command { cdw10: (u32::from(sel) & 0b111) << 8 | u32::from(fid), cdw11, ..Command::new(op::GET_FEATURES) }
}

/// Get Features – Host Behavior Support, the current value: the
/// controller writes the 512-byte structure
/// ([`crate::spec::features::HOST_BEHAVIOR_SUPPORT_SIZE`]) to the buffer
/// at `prp1`, which must not cross a memory page boundary (no PRP2); DW0
/// carries nothing.
pub fn get_host_behavior_support(prp1: u64) -> Command {
    Command { prp1, ..get_features(FID_HOST_BEHAVIOR_SUPPORT, SEL_CURRENT, 0) }
}

/// Set Features – Host Behavior Support, not saved (the feature is not
/// saveable): the controller reads the 512-byte structure from the buffer
/// at `prp1`, which must not cross a memory page boundary (no PRP2).
/// CDW11 is reserved for this feature. Read the current value first and
/// write it back changed: the structure replaces every field at once.
pub fn set_host_behavior_support(prp1: u64) -> Command {
    Command { prp1, ..set_features(FID_HOST_BEHAVIOR_SUPPORT, 0, false) }
}

/// Set Features – Number of Queues: ask for `sq_count` I/O submission and
/// `cq_count` I/O completion queues (1-based, 1..=65535), not counting the
/// admin queues. CDW11 = NCQR << 16 | NSQR, both 0-based. The controller
/// answers with the counts it allocated: see [`NumberOfQueues::from_dw0`].
pub fn set_number_of_queues(sq_count: u16, cq_count: u16) -> Command {
    set_features(FID_NUMBER_OF_QUEUES, zero_based(cq_count) << 16 | zero_based(sq_count), false)
}

/// Most I/O queues of one kind a host can address: QIDs 1..=65535.
pub const IO_QUEUES_MAX: u16 = u16::MAX;

/// I/O queue counts a controller allocated (1-based), from the Number of
/// Queues completion DW0: NCQA bits 31:16, NSQA bits 15:0, both 0-based.
///
/// A count of 65536 (NSQA FFFFh) saturates at [`IO_QUEUES_MAX`], since no
/// more queue identifiers exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NumberOfQueues {
    /// I/O submission queues allocated.
    pub sq_count: u16,
    /// I/O completion queues allocated.
    pub cq_count: u16,
}

impl NumberOfQueues {
    /// Decodes DW0.
    pub const fn decode(dw0: u32) -> Self {
        Self { sq_count: (dw0 as u16).saturating_add(1), cq_count: ((dw0 >> 16) as u16).saturating_add(1) }
    }

    /// Decodes DW0 into `(sq_count, cq_count)`.
    pub const fn from_dw0(dw0: u32) -> (u16, u16) {
        let counts = Self::decode(dw0);
        (counts.sq_count, counts.cq_count)
    }
}

/// Create I/O Completion Queue (opcode 05h) of `entries` entries (1-based)
/// at `prp1`. CDW10 = QSIZE << 16 | QID; CDW11 = IV << 16 | IEN << 1 | PC.
/// With `physically_contiguous` false, `prp1` addresses a PRP list.
pub fn create_io_cq(
    qid: u16,
    entries: u16,
    prp1: u64,
    physically_contiguous: bool,
    interrupts_enabled: bool,
    iv: u16,
) -> Command {
    debug_assert!(qid != 0, "QID 0 is the admin queue");
    let mut cdw11 = u32::from(iv) << 16;
    if interrupts_enabled {
        cdw11 |= CQ_INTERRUPTS_ENABLED;
    }
    if physically_contiguous {
        cdw11 |= QUEUE_PHYSICALLY_CONTIGUOUS;
    }
    Command { prp1, cdw10: queue_size(entries) << 16 | u32::from(qid), cdw11, ..Command::new(op::CREATE_IO_CQ) }
}

/// QPRIO 00b: Urgent. Priorities matter only under weighted round robin
/// arbitration; round robin ignores them.
pub const QPRIO_URGENT: u8 = 0b00;
/// QPRIO 01b: High.
pub const QPRIO_HIGH: u8 = 0b01;
/// QPRIO 10b: Medium.
pub const QPRIO_MEDIUM: u8 = 0b10;
/// QPRIO 11b: Low.
pub const QPRIO_LOW: u8 = 0b11;

/// Create I/O Submission Queue (opcode 01h) of `entries` entries (1-based)
/// in physically contiguous memory at `prp1`, completing to `cqid`, with
/// priority `QPRIO_*` (2 bits). CDW10 = QSIZE << 16 | QID; CDW11 = CQID << 16
/// | QPRIO << 1 | PC (set); CDW12 NVMSETID 0.
pub fn create_io_sq(qid: u16, entries: u16, prp1: u64, cqid: u16, priority: u8) -> Command {
    debug_assert!(qid != 0, "QID 0 is the admin queue");
    debug_assert!(cqid != 0, "I/O queues cannot complete to the admin CQ");
    debug_assert!(priority <= QPRIO_LOW, "QPRIO is 2 bits");
    Command {
        prp1,
        cdw10: queue_size(entries) << 16 | u32::from(qid),
        cdw11: u32::from(cqid) << 16 | (u32::from(priority) & 0b11) << SQ_QPRIO_SHIFT | QUEUE_PHYSICALLY_CONTIGUOUS,
        ..Command::new(op::CREATE_IO_SQ)
    }
}

/// Delete I/O Submission Queue (opcode 00h): CDW10 = QID.
pub fn delete_io_sq(qid: u16) -> Command {
    debug_assert!(qid != 0, "QID 0 is the admin queue");
    Command { cdw10: u32::from(qid), ..Command::new(op::DELETE_IO_SQ) }
}

/// Format NVM (opcode 80h, NVMe Base 2.0 §5.23) of namespace `nsid`, to
/// LBA format `lbaf` (bits 3:0 of CDW10, its upper two bits in 13:12),
/// metadata in a separate buffer (MSET 0), no protection information, no
/// secure erase. Destroys the namespace's data.
pub fn format_nvm(nsid: u32, lbaf: u8) -> Command {
    debug_assert!(lbaf < 64, "LBA format indices are 0..=63");
    let lbaf = u32::from(lbaf);
    Command { nsid, cdw10: (lbaf & 0xF) | (lbaf >> 4 & 0b11) << 12, ..Command::new(op::FORMAT_NVM) }
}

/// Delete I/O Completion Queue (opcode 04h): CDW10 = QID. Delete its
/// submission queues first.
pub fn delete_io_cq(qid: u16) -> Command {
    debug_assert!(qid != 0, "QID 0 is the admin queue");
    Command { cdw10: u32::from(qid), ..Command::new(op::DELETE_IO_CQ) }
}

/// Abort (opcode 08h) the command `cid` on submission queue `sqid`:
/// CDW10 = CID << 16 | SQID. DW0 bit 0 of the completion is clear if the
/// command was aborted.
pub fn abort(sqid: u16, cid: u16) -> Command {
    Command { cdw10: u32::from(cid) << 16 | u32::from(sqid), ..Command::new(op::ABORT) }
}

/// Asynchronous Event Request (opcode 0Ch). Completes only when an event
/// occurs; at most AERL + 1 may be outstanding.
pub fn async_event_request() -> Command {
    Command::new(op::ASYNC_EVENT_REQUEST)
}

/// Doorbell Buffer Config (opcode 7Ch): PRP1 = the shadow doorbell buffer,
/// PRP2 = the EventIdx buffer, each one memory page.
pub fn doorbell_buffer_config(shadow_prp1: u64, eventidx_prp2: u64) -> Command {
    Command { prp1: shadow_prp1, prp2: eventidx_prp2, ..Command::new(op::DOORBELL_BUFFER_CONFIG) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::identify::CSI_ZONED;
    use crate::spec::log::{LOG_ERROR_INFORMATION, LOG_SMART_HEALTH};

    /// A 64-byte SQE image from (byte offset, bytes) pairs, laid out by hand
    /// from the spec, independent of `Command`.
    fn sqe(fields: &[(usize, &[u8])]) -> [u8; 64] {
        let mut out = [0u8; 64];
        for (offset, bytes) in fields {
            out[*offset..*offset + bytes.len()].copy_from_slice(bytes);
        }
        out
    }

    const PRP1: u64 = 0x0000_0001_2345_6000;
    const PRP1_BYTES: [u8; 8] = [0x00, 0x60, 0x45, 0x23, 0x01, 0x00, 0x00, 0x00];

    #[test]
    fn identify_controller_bytes() {
        let expected = sqe(&[
            (0, &[0x06]),
            (24, &PRP1_BYTES),
            (40, &[0x01, 0x00, 0x00, 0x00]), // CNS 01h
        ]);
        assert_eq!(identify_controller(PRP1).to_bytes(), expected);
    }

    #[test]
    fn identify_generic_bytes() {
        let cmd = identify(0x12, 0x0000_0007, 0xABCD, CSI_ZONED, PRP1);
        let expected = sqe(&[
            (0, &[0x06]),
            (4, &[0x07, 0x00, 0x00, 0x00]),
            (24, &PRP1_BYTES),
            (40, &[0x12, 0x00, 0xCD, 0xAB]), // CNS 12h, CNTID ABCDh
            (44, &[0x00, 0x00, 0x00, 0x02]), // CSI 02h in bits 31:24
        ]);
        assert_eq!(cmd.to_bytes(), expected);
    }

    #[test]
    fn identify_conveniences() {
        let ns = identify_namespace(1, PRP1);
        assert_eq!((ns.nsid, ns.cdw10, ns.cdw11), (1, 0x00, 0));
        let list = identify_active_namespaces(0, PRP1);
        assert_eq!((list.nsid, list.cdw10), (0, 0x02));
        let desc = identify_ns_id_descriptors(3, PRP1);
        assert_eq!((desc.nsid, desc.cdw10), (3, 0x03));
        let zns_ns = identify_csi_namespace(1, CSI_ZONED, PRP1);
        assert_eq!(
            zns_ns.to_bytes(),
            sqe(&[
                (0, &[0x06]),
                (4, &[0x01, 0x00, 0x00, 0x00]),
                (24, &PRP1_BYTES),
                (40, &[0x05, 0x00, 0x00, 0x00]),
                (44, &[0x00, 0x00, 0x00, 0x02]),
            ])
        );
        let zns_ctrl = identify_csi_controller(CSI_ZONED, PRP1);
        assert_eq!((zns_ctrl.nsid, zns_ctrl.cdw10, zns_ctrl.cdw11), (0, 0x06, 0x0200_0000));
        for cmd in [ns, list, desc, zns_ns, zns_ctrl] {
            assert_eq!(cmd.opcode, 0x06);
            assert_eq!(cmd.prp1, PRP1);
            assert_eq!((cmd.cid, cmd.flags, cmd.prp2), (0, 0, 0));
        }
    }

    #[test]
    fn get_log_page_smart_bytes() {
        let cmd = get_log_page(LOG_SMART_HEALTH, 0xFFFF_FFFF, 512, 0, PRP1, 0);
        let expected = sqe(&[
            (0, &[0x02]),
            (4, &[0xFF, 0xFF, 0xFF, 0xFF]),
            (24, &PRP1_BYTES),
            (40, &[0x02, 0x00, 0x7F, 0x00]), // LID 02h, NUMDL 127
        ]);
        assert_eq!(cmd.to_bytes(), expected);
    }

    #[test]
    fn get_log_page_large_with_offset_bytes() {
        // 1 MiB = 0x40000 dwords: NUMD 3FFFFh splits into NUMDL FFFFh and
        // NUMDU 3h. Offset 1_0000_0200h splits into LPOL and LPOU.
        let cmd = get_log_page(LOG_ERROR_INFORMATION, 0, 1 << 20, 0x1_0000_0200, PRP1, 0x0000_0000_0ABC_D000);
        let expected = sqe(&[
            (0, &[0x02]),
            (24, &PRP1_BYTES),
            (32, &[0x00, 0xD0, 0xBC, 0x0A, 0x00, 0x00, 0x00, 0x00]),
            (40, &[0x01, 0x00, 0xFF, 0xFF]),
            (44, &[0x03, 0x00, 0x00, 0x00]),
            (48, &[0x00, 0x02, 0x00, 0x00]),
            (52, &[0x01, 0x00, 0x00, 0x00]),
        ]);
        assert_eq!(cmd.to_bytes(), expected);
        // One dword: NUMD 0.
        assert_eq!(get_log_page(1, 0, 4, 0, PRP1, 0).cdw10, 0x0000_0001);
        // The largest length: 2^30 - 1 dwords.
        let max = get_log_page(1, 0, u32::MAX - 3, 0, PRP1, 0);
        assert_eq!((max.cdw10 >> 16, max.cdw11), (0xFFFE, 0x3FFF));
    }

    #[test]
    fn features_bytes() {
        let set = set_features(FID_VOLATILE_WRITE_CACHE, 1, true);
        let expected = sqe(&[
            (0, &[0x09]),
            (40, &[0x06, 0x00, 0x00, 0x80]), // FID 06h, SV
            (44, &[0x01, 0x00, 0x00, 0x00]),
        ]);
        assert_eq!(set.to_bytes(), expected);
        assert_eq!(set_features(FID_TIMESTAMP, 0, false).cdw10, 0x0E);

        let get = get_features(FID_ARBITRATION, SEL_SUPPORTED_CAPABILITIES, 0);
        let expected = sqe(&[(0, &[0x0A]), (40, &[0x01, 0x03, 0x00, 0x00])]);
        assert_eq!(get.to_bytes(), expected);
        assert_eq!(get_features(FID_NUMBER_OF_QUEUES, SEL_SAVED, 0).cdw10, 0x0207);
        assert_eq!(get_features(FID_NUMBER_OF_QUEUES, SEL_DEFAULT, 0).cdw10, 0x0107);
        assert_eq!(get_features(FID_NUMBER_OF_QUEUES, SEL_CURRENT, 0).cdw10, 0x0007);
    }

    #[test]
    fn host_behavior_support_bytes() {
        let get = sqe(&[
            (0, &[0x0A]),
            (24, &PRP1_BYTES),
            (40, &[0x16, 0x00, 0x00, 0x00]), // FID 16h, SEL 000b (current)
        ]);
        assert_eq!(get_host_behavior_support(PRP1).to_bytes(), get);
        let set = sqe(&[
            (0, &[0x09]),
            (24, &PRP1_BYTES),
            (40, &[0x16, 0x00, 0x00, 0x00]), // FID 16h, SV clear
        ]);
        assert_eq!(set_host_behavior_support(PRP1).to_bytes(), set);
        // The queue fills PRP1 in when a builder got 0.
        assert_eq!(set_host_behavior_support(0).to_bytes(), sqe(&[(0, &[0x09]), (40, &[0x16])]));
    }

    #[test]
    fn feature_identifiers() {
        assert_eq!(
            [
                FID_ARBITRATION,
                FID_POWER_MANAGEMENT,
                FID_TEMPERATURE_THRESHOLD,
                FID_VOLATILE_WRITE_CACHE,
                FID_NUMBER_OF_QUEUES,
                FID_INTERRUPT_COALESCING,
                FID_ASYNC_EVENT_CONFIG,
                FID_TIMESTAMP,
                FID_HOST_BEHAVIOR_SUPPORT,
                FID_IO_COMMAND_SET_PROFILE,
            ],
            [0x01, 0x02, 0x04, 0x06, 0x07, 0x08, 0x0B, 0x0E, 0x16, 0x19]
        );
    }

    #[test]
    fn number_of_queues_bytes() {
        // 4 SQs and 2 CQs: NSQR 3, NCQR 1.
        let expected = sqe(&[(0, &[0x09]), (40, &[0x07, 0x00, 0x00, 0x00]), (44, &[0x03, 0x00, 0x01, 0x00])]);
        assert_eq!(set_number_of_queues(4, 2).to_bytes(), expected);
        assert_eq!(set_number_of_queues(1, 1).cdw11, 0);
        assert_eq!(set_number_of_queues(u16::MAX, u16::MAX).cdw11, 0xFFFE_FFFE);
    }

    #[test]
    fn number_of_queues_dw0() {
        assert_eq!(NumberOfQueues::from_dw0(0x003F_001F), (32, 64));
        assert_eq!(NumberOfQueues::from_dw0(0), (1, 1));
        assert_eq!(NumberOfQueues::from_dw0(0xFFFE_0001), (2, 65535));
        assert_eq!(
            NumberOfQueues::decode(u32::MAX),
            NumberOfQueues { sq_count: IO_QUEUES_MAX, cq_count: IO_QUEUES_MAX }
        );
    }

    #[test]
    fn create_io_cq_bytes() {
        let cmd = create_io_cq(1, 1024, PRP1, true, true, 3);
        let expected = sqe(&[
            (0, &[0x05]),
            (24, &PRP1_BYTES),
            (40, &[0x01, 0x00, 0xFF, 0x03]), // QID 1, QSIZE 3FFh
            (44, &[0x03, 0x00, 0x03, 0x00]), // PC, IEN, IV 3
        ]);
        assert_eq!(cmd.to_bytes(), expected);
        // Polled, PRP list.
        let polled = create_io_cq(2, 2, PRP1, false, false, 0);
        assert_eq!((polled.cdw10, polled.cdw11), (0x0001_0002, 0));
        assert_eq!(create_io_cq(7, u16::MAX, PRP1, true, false, 0).cdw10, 0xFFFE_0007);
    }

    #[test]
    fn create_io_sq_bytes() {
        let cmd = create_io_sq(1, 1024, PRP1, 1, QPRIO_MEDIUM);
        let expected = sqe(&[
            (0, &[0x01]),
            (24, &PRP1_BYTES),
            (40, &[0x01, 0x00, 0xFF, 0x03]), // QID 1, QSIZE 3FFh
            (44, &[0x05, 0x00, 0x01, 0x00]), // PC, QPRIO 10b, CQID 1
        ]);
        assert_eq!(cmd.to_bytes(), expected);
        let urgent = create_io_sq(3, 64, PRP1, 2, QPRIO_URGENT);
        assert_eq!((urgent.cdw10, urgent.cdw11), (0x003F_0003, 0x0002_0001));
        assert_eq!(create_io_sq(3, 64, PRP1, 2, QPRIO_LOW).cdw11, 0x0002_0007);
        assert_eq!(create_io_sq(3, 64, PRP1, 2, QPRIO_HIGH).cdw11, 0x0002_0003);
    }

    #[test]
    fn delete_queues_bytes() {
        assert_eq!(delete_io_sq(5).to_bytes(), sqe(&[(0, &[0x00]), (40, &[0x05, 0x00, 0x00, 0x00])]));
        assert_eq!(delete_io_cq(0x1234).to_bytes(), sqe(&[(0, &[0x04]), (40, &[0x34, 0x12, 0x00, 0x00])]));
    }

    #[test]
    fn format_nvm_bytes() {
        // LBA format 1 of namespace 1: NSID in bytes 4..8, LBAF in CDW10
        // bits 3:0.
        assert_eq!(format_nvm(1, 1).to_bytes(), sqe(&[(0, &[0x80]), (4, &[0x01]), (40, &[0x01, 0x00, 0x00, 0x00])]));
        // Format 0x35: low nibble 5, upper bits 0b11 in CDW10 bits 13:12.
        assert_eq!(format_nvm(7, 0x35).to_bytes(), sqe(&[(0, &[0x80]), (4, &[0x07]), (40, &[0x05, 0x30, 0x00, 0x00])]));
    }

    #[test]
    fn abort_bytes() {
        assert_eq!(abort(2, 0x1234).to_bytes(), sqe(&[(0, &[0x08]), (40, &[0x02, 0x00, 0x34, 0x12])]));
    }

    #[test]
    fn async_event_request_bytes() {
        assert_eq!(async_event_request().to_bytes(), sqe(&[(0, &[0x0C])]));
    }

    #[test]
    fn doorbell_buffer_config_bytes() {
        let cmd = doorbell_buffer_config(0x1000, 0x0000_0002_0000_2000);
        let expected = sqe(&[
            (0, &[0x7C]),
            (24, &[0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00]),
            (32, &[0x00, 0x20, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00]),
        ]);
        assert_eq!(cmd.to_bytes(), expected);
    }
}

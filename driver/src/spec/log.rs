//! Log pages (NVMe Base 2.0, "Get Log Page command").

use super::le::{u128_at, u16_at, u32_at, u64_at, u8_at};
use super::status::Status;
use super::{check_len, ParseError};

/// Error Information log page.
pub const LOG_ERROR_INFORMATION: u8 = 0x01;
/// SMART / Health Information log page.
pub const LOG_SMART_HEALTH: u8 = 0x02;
/// Firmware Slot Information log page.
pub const LOG_FIRMWARE_SLOT: u8 = 0x03;
/// Changed Namespace List log page.
pub const LOG_CHANGED_NAMESPACES: u8 = 0x04;
/// Commands Supported and Effects log page.
pub const LOG_COMMANDS_SUPPORTED: u8 = 0x05;

/// Asynchronous Event Type values (NVMe Base 2.0 §5.2, Figure 146): error.
pub const AER_TYPE_ERROR: u8 = 0;
/// Asynchronous Event Type: SMART / health status.
pub const AER_TYPE_SMART: u8 = 1;
/// Asynchronous Event Type: notice.
pub const AER_TYPE_NOTICE: u8 = 2;
/// Notice information: Namespace Attribute Changed.
pub const AER_NOTICE_NS_ATTRIBUTE: u8 = 0x00;
/// Notice information: Zone Descriptor Changed (ZNS 1.1).
pub const AER_NOTICE_ZONE_DESCRIPTOR_CHANGED: u8 = 0xEF;
/// Changed Zone List log (NVMe ZNS 1.1 §5.5.1).
pub const LOG_CHANGED_ZONE_LIST: u8 = 0xBF;
/// Asynchronous Event Configuration (NVMe Base 2.0 §5.27.1.7): SMART /
/// health critical warnings (bits 7:0), Namespace Attribute Notices (8),
/// Firmware Activation Notices (9) and, in ZNS, Zone Descriptor Changed
/// Notices (27); the notices only where OAES offers them.
pub const AEC_SMART_WARNINGS: u32 = 0xFF;
/// Asynchronous Event Configuration: the notices (bits 8, 9 and 27).
pub const AEC_NOTICES: u32 = 1 << 8 | 1 << 9 | 1 << 27;

bitflags::bitflags! {
    /// SMART / Health Critical Warning.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
    pub struct CriticalWarning: u8 {
        /// Available spare capacity is below the threshold.
        const SPARE = 1 << 0;
        /// A temperature is above an over-temperature or below an
        /// under-temperature threshold.
        const TEMPERATURE = 1 << 1;
        /// NVM subsystem reliability is degraded.
        const DEGRADED = 1 << 2;
        /// All of the media is read-only.
        const READ_ONLY = 1 << 3;
        /// The volatile memory backup device has failed.
        const VOLATILE_BACKUP = 1 << 4;
        /// The Persistent Memory Region has become read-only or unreliable.
        const PMR_READ_ONLY = 1 << 5;
    }
}

/// Byte offsets in the SMART / Health Information log page.
pub mod smart_offsets {
    /// Critical Warning.
    pub const CRITICAL_WARNING: usize = 0;
    /// Composite Temperature, kelvin.
    pub const COMPOSITE_TEMPERATURE: usize = 1;
    /// Available Spare, percent.
    pub const AVAILABLE_SPARE: usize = 3;
    /// Available Spare Threshold, percent.
    pub const AVAILABLE_SPARE_THRESHOLD: usize = 4;
    /// Percentage Used.
    pub const PERCENTAGE_USED: usize = 5;
    /// Endurance Group Critical Warning Summary.
    pub const ENDURANCE_GROUP_CRITICAL_WARNING_SUMMARY: usize = 6;
    /// Data Units Read (16 bytes).
    pub const DATA_UNITS_READ: usize = 32;
    /// Data Units Written (16 bytes).
    pub const DATA_UNITS_WRITTEN: usize = 48;
    /// Host Read Commands (16 bytes).
    pub const HOST_READ_COMMANDS: usize = 64;
    /// Host Write Commands (16 bytes).
    pub const HOST_WRITE_COMMANDS: usize = 80;
    /// Controller Busy Time, minutes (16 bytes).
    pub const CONTROLLER_BUSY_TIME: usize = 96;
    /// Power Cycles (16 bytes).
    pub const POWER_CYCLES: usize = 112;
    /// Power On Hours (16 bytes).
    pub const POWER_ON_HOURS: usize = 128;
    /// Unsafe Shutdowns (16 bytes).
    pub const UNSAFE_SHUTDOWNS: usize = 144;
    /// Media and Data Integrity Errors (16 bytes).
    pub const MEDIA_ERRORS: usize = 160;
    /// Number of Error Information Log Entries (16 bytes).
    pub const ERROR_LOG_ENTRIES: usize = 176;
    /// Warning Composite Temperature Time, minutes.
    pub const WARNING_TEMPERATURE_TIME: usize = 192;
    /// Critical Composite Temperature Time, minutes.
    pub const CRITICAL_COMPOSITE_TEMPERATURE_TIME: usize = 196;
    /// Temperature Sensor 1; sensors 2–8 follow, 2 bytes each.
    pub const TEMPERATURE_SENSORS: usize = 200;
}

/// Bytes in the SMART / Health Information log page.
pub const SMART_HEALTH_LOG_SIZE: usize = 512;
/// Temperature sensors reported in the SMART / Health log.
pub const TEMPERATURE_SENSORS: usize = 8;
/// Bytes in one Data Unit: the counters count thousands of 512-byte units.
pub const DATA_UNIT_BYTES: u128 = 512 * 1000;

/// SMART / Health Information log page (Log Identifier 02h).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SmartHealthLog {
    /// Critical Warning.
    pub critical_warning: CriticalWarning,
    /// Composite Temperature, kelvin.
    pub composite_temperature_kelvin: u16,
    /// Available Spare, percent of the spare capacity remaining.
    pub available_spare: u8,
    /// Available Spare Threshold, percent.
    pub available_spare_threshold: u8,
    /// Percentage Used of the estimated life (may exceed 100).
    pub percentage_used: u8,
    /// Endurance Group Critical Warning Summary.
    pub endurance_group_critical_warning_summary: u8,
    /// Data Units Read, in thousands of 512-byte units.
    pub data_units_read: u128,
    /// Data Units Written, in thousands of 512-byte units.
    pub data_units_written: u128,
    /// Host Read Commands.
    pub host_read_commands: u128,
    /// Host Write Commands.
    pub host_write_commands: u128,
    /// Controller Busy Time, minutes.
    pub controller_busy_time: u128,
    /// Power Cycles.
    pub power_cycles: u128,
    /// Power On Hours.
    pub power_on_hours: u128,
    /// Unsafe Shutdowns.
    pub unsafe_shutdowns: u128,
    /// Media and Data Integrity Errors.
    pub media_errors: u128,
    /// Number of Error Information Log Entries over the controller's life.
    pub error_log_entries: u128,
    /// Warning Composite Temperature Time, minutes.
    pub warning_temperature_time: u32,
    /// Critical Composite Temperature Time, minutes.
    pub critical_composite_temperature_time: u32,
    /// Temperature Sensors 1–8, kelvin (0: not implemented).
    pub temperature_sensors_kelvin: [u16; TEMPERATURE_SENSORS],
}

impl SmartHealthLog {
    const WHAT: &'static str = "SMART / Health Information log";

    /// Decodes the log page.
    pub fn parse(buf: &[u8]) -> Result<Self, ParseError> {
        use smart_offsets as off;
        check_len(buf, SMART_HEALTH_LOG_SIZE, Self::WHAT)?;
        let mut temperature_sensors_kelvin = [0u16; TEMPERATURE_SENSORS];
        for (i, sensor) in temperature_sensors_kelvin.iter_mut().enumerate() {
            *sensor = u16_at(buf, off::TEMPERATURE_SENSORS + 2 * i);
        }
        Ok(Self {
            critical_warning: CriticalWarning::from_bits_retain(u8_at(buf, off::CRITICAL_WARNING)),
            composite_temperature_kelvin: u16_at(buf, off::COMPOSITE_TEMPERATURE),
            available_spare: u8_at(buf, off::AVAILABLE_SPARE),
            available_spare_threshold: u8_at(buf, off::AVAILABLE_SPARE_THRESHOLD),
            percentage_used: u8_at(buf, off::PERCENTAGE_USED),
            endurance_group_critical_warning_summary: u8_at(buf, off::ENDURANCE_GROUP_CRITICAL_WARNING_SUMMARY),
            data_units_read: u128_at(buf, off::DATA_UNITS_READ),
            data_units_written: u128_at(buf, off::DATA_UNITS_WRITTEN),
            host_read_commands: u128_at(buf, off::HOST_READ_COMMANDS),
            host_write_commands: u128_at(buf, off::HOST_WRITE_COMMANDS),
            controller_busy_time: u128_at(buf, off::CONTROLLER_BUSY_TIME),
            power_cycles: u128_at(buf, off::POWER_CYCLES),
            power_on_hours: u128_at(buf, off::POWER_ON_HOURS),
            unsafe_shutdowns: u128_at(buf, off::UNSAFE_SHUTDOWNS),
            media_errors: u128_at(buf, off::MEDIA_ERRORS),
            error_log_entries: u128_at(buf, off::ERROR_LOG_ENTRIES),
            warning_temperature_time: u32_at(buf, off::WARNING_TEMPERATURE_TIME),
            critical_composite_temperature_time: u32_at(buf, off::CRITICAL_COMPOSITE_TEMPERATURE_TIME),
            temperature_sensors_kelvin,
        })
    }

    /// Composite Temperature in degrees Celsius (rounded down to whole kelvin
    /// as reported).
    pub fn composite_temperature_celsius(&self) -> i32 {
        i32::from(self.composite_temperature_kelvin) - 273
    }

    /// Bytes read by the host, from Data Units Read (saturating).
    pub fn bytes_read(&self) -> u128 {
        self.data_units_read.saturating_mul(DATA_UNIT_BYTES)
    }

    /// Bytes written by the host, from Data Units Written (saturating).
    pub fn bytes_written(&self) -> u128 {
        self.data_units_written.saturating_mul(DATA_UNIT_BYTES)
    }
}

/// Byte offsets in an Error Information Log Entry.
pub mod error_entry_offsets {
    /// Error Count.
    pub const ERROR_COUNT: usize = 0;
    /// Submission Queue ID.
    pub const SQID: usize = 8;
    /// Command ID.
    pub const CID: usize = 10;
    /// Status Field (bits 15:1) and Phase Tag (bit 0).
    pub const STATUS: usize = 12;
    /// Parameter Error Location.
    pub const PARAMETER_ERROR_LOCATION: usize = 14;
    /// LBA.
    pub const LBA: usize = 16;
    /// Namespace.
    pub const NSID: usize = 24;
    /// Vendor Specific Information Available.
    pub const VENDOR_SPECIFIC: usize = 28;
    /// Transport Type.
    pub const TRTYPE: usize = 29;
    /// Command Set Indicator.
    pub const CSI: usize = 30;
    /// Opcode.
    pub const OPCODE: usize = 31;
    /// Command Specific Information.
    pub const COMMAND_SPECIFIC: usize = 32;
    /// Transport Type Specific Information.
    pub const TRANSPORT_TYPE_SPECIFIC: usize = 40;
    /// Log Page Version.
    pub const LOG_PAGE_VERSION: usize = 63;
}

/// Bytes in one Error Information Log Entry.
pub const ERROR_LOG_ENTRY_SIZE: usize = 64;

/// An Error Information Log Entry (Log Identifier 01h).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ErrorLogEntry {
    /// Error Count: a unique, incrementing identifier; 0 marks an unused entry.
    pub error_count: u64,
    /// Submission Queue ID (FFFFh: not specific to a command).
    pub sqid: u16,
    /// Command ID (FFFFh: not specific to a command).
    pub cid: u16,
    /// The Status Field of the failed command.
    pub status: Status,
    /// The Phase Tag posted with the command's completion.
    pub phase_tag: bool,
    /// Parameter Error Location: byte (bits 7:0) and bit (bits 10:8) of the
    /// command field in error.
    pub parameter_error_location: u16,
    /// First LBA that experienced the error.
    pub lba: u64,
    /// Namespace of the error.
    pub nsid: u32,
    /// Log page identifier holding vendor specific details (0: none).
    pub vendor_specific: u8,
    /// Transport Type of a transport error (0: not transport related).
    pub trtype: u8,
    /// Command Set Indicator of the command (valid when `log_page_version` is 1).
    pub csi: u8,
    /// Opcode of the command (valid when `log_page_version` is 1).
    pub opcode: u8,
    /// Command Specific Information.
    pub command_specific: u64,
    /// Transport Type Specific Information.
    pub transport_type_specific: u16,
    /// Log Page Version.
    pub log_page_version: u8,
}

impl ErrorLogEntry {
    const WHAT: &'static str = "Error Information Log Entry";

    /// Decodes one entry.
    pub fn parse(buf: &[u8]) -> Result<Self, ParseError> {
        use error_entry_offsets as off;
        check_len(buf, ERROR_LOG_ENTRY_SIZE, Self::WHAT)?;
        let status_word = u16_at(buf, off::STATUS);
        Ok(Self {
            error_count: u64_at(buf, off::ERROR_COUNT),
            sqid: u16_at(buf, off::SQID),
            cid: u16_at(buf, off::CID),
            status: Status::from_field(status_word >> 1),
            phase_tag: status_word & 1 != 0,
            parameter_error_location: u16_at(buf, off::PARAMETER_ERROR_LOCATION),
            lba: u64_at(buf, off::LBA),
            nsid: u32_at(buf, off::NSID),
            vendor_specific: u8_at(buf, off::VENDOR_SPECIFIC),
            trtype: u8_at(buf, off::TRTYPE),
            csi: u8_at(buf, off::CSI),
            opcode: u8_at(buf, off::OPCODE),
            command_specific: u64_at(buf, off::COMMAND_SPECIFIC),
            transport_type_specific: u16_at(buf, off::TRANSPORT_TYPE_SPECIFIC),
            log_page_version: u8_at(buf, off::LOG_PAGE_VERSION),
        })
    }
}

/// Decodes an Error Information log page: consecutive 64-byte entries,
/// skipping unused ones (Error Count 0). Errors on a trailing partial entry.
pub fn parse_error_log(buf: &[u8]) -> Result<Vec<ErrorLogEntry>, ParseError> {
    let whole = buf.len() / ERROR_LOG_ENTRY_SIZE * ERROR_LOG_ENTRY_SIZE;
    if whole != buf.len() {
        return Err(ParseError::TooShort {
            what: ErrorLogEntry::WHAT,
            expected: whole + ERROR_LOG_ENTRY_SIZE,
            got: buf.len(),
        });
    }
    let mut entries = Vec::new();
    for chunk in buf.chunks_exact(ERROR_LOG_ENTRY_SIZE) {
        let entry = ErrorLogEntry::parse(chunk)?;
        if entry.error_count != 0 {
            entries.push(entry);
        }
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::status::{MediaStatus, StatusCode, StatusCodeType};

    fn put(buf: &mut [u8], offset: usize, data: &[u8]) {
        buf[offset..offset + data.len()].copy_from_slice(data);
    }

    #[test]
    fn log_identifiers() {
        assert_eq!(
            [
                LOG_ERROR_INFORMATION,
                LOG_SMART_HEALTH,
                LOG_FIRMWARE_SLOT,
                LOG_CHANGED_NAMESPACES,
                LOG_COMMANDS_SUPPORTED
            ],
            [1, 2, 3, 4, 5]
        );
    }

    #[test]
    fn smart_offsets_match_spec() {
        use smart_offsets::*;
        let pinned = [
            (CRITICAL_WARNING, 0),
            (COMPOSITE_TEMPERATURE, 1),
            (AVAILABLE_SPARE, 3),
            (AVAILABLE_SPARE_THRESHOLD, 4),
            (PERCENTAGE_USED, 5),
            (ENDURANCE_GROUP_CRITICAL_WARNING_SUMMARY, 6),
            (DATA_UNITS_READ, 32),
            (DATA_UNITS_WRITTEN, 48),
            (HOST_READ_COMMANDS, 64),
            (HOST_WRITE_COMMANDS, 80),
            (CONTROLLER_BUSY_TIME, 96),
            (POWER_CYCLES, 112),
            (POWER_ON_HOURS, 128),
            (UNSAFE_SHUTDOWNS, 144),
            (MEDIA_ERRORS, 160),
            (ERROR_LOG_ENTRIES, 176),
            (WARNING_TEMPERATURE_TIME, 192),
            (CRITICAL_COMPOSITE_TEMPERATURE_TIME, 196),
            (TEMPERATURE_SENSORS, 200),
        ];
        for (offset, spec) in pinned {
            assert_eq!(offset, spec);
        }
    }

    #[test]
    fn smart_health() {
        let mut buf = [0u8; SMART_HEALTH_LOG_SIZE];
        buf[0] = 0b0000_0110; // temperature, degraded
        put(&mut buf, 1, &323u16.to_le_bytes()); // 50 C
        buf[3] = 100;
        buf[4] = 10;
        buf[5] = 3;
        buf[6] = 0;
        let counters = [1u128, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        for (i, value) in counters.iter().enumerate() {
            put(&mut buf, 32 + 16 * i, &value.to_le_bytes());
        }
        // A counter using the upper 64 bits.
        put(&mut buf, 48, &(u128::from(u64::MAX) + 5).to_le_bytes());
        put(&mut buf, 192, &11u32.to_le_bytes());
        put(&mut buf, 196, &12u32.to_le_bytes());
        put(&mut buf, 200, &330u16.to_le_bytes());
        put(&mut buf, 214, &331u16.to_le_bytes());
        let log = SmartHealthLog::parse(&buf).unwrap();
        assert_eq!(log.critical_warning, CriticalWarning::TEMPERATURE | CriticalWarning::DEGRADED);
        assert_eq!(log.composite_temperature_kelvin, 323);
        assert_eq!(log.composite_temperature_celsius(), 50);
        assert_eq!((log.available_spare, log.available_spare_threshold, log.percentage_used), (100, 10, 3));
        assert_eq!(log.data_units_read, 1);
        assert_eq!(log.bytes_read(), 512_000);
        assert_eq!(log.data_units_written, u128::from(u64::MAX) + 5);
        assert_eq!(log.host_read_commands, 3);
        assert_eq!(log.host_write_commands, 4);
        assert_eq!(log.controller_busy_time, 5);
        assert_eq!(log.power_cycles, 6);
        assert_eq!(log.power_on_hours, 7);
        assert_eq!(log.unsafe_shutdowns, 8);
        assert_eq!(log.media_errors, 9);
        assert_eq!(log.error_log_entries, 10);
        assert_eq!(log.warning_temperature_time, 11);
        assert_eq!(log.critical_composite_temperature_time, 12);
        assert_eq!(log.temperature_sensors_kelvin[0], 330);
        assert_eq!(log.temperature_sensors_kelvin[7], 331);
    }

    #[test]
    fn smart_health_edges() {
        assert!(matches!(
            SmartHealthLog::parse(&[0u8; 511]),
            Err(ParseError::TooShort { expected: 512, got: 511, .. })
        ));
        let log = SmartHealthLog::parse(&[0xFF; 512]).unwrap();
        assert_eq!(log.critical_warning.bits(), 0xFF);
        assert!(log.critical_warning.contains(CriticalWarning::all()));
        assert_eq!(log.bytes_written(), u128::MAX);
        assert_eq!(log.composite_temperature_celsius(), 65535 - 273);
        assert_eq!(SmartHealthLog::parse(&[0u8; 512]).unwrap().composite_temperature_celsius(), -273);
        assert_eq!(CriticalWarning::PMR_READ_ONLY.bits(), 1 << 5);
        assert_eq!(CriticalWarning::VOLATILE_BACKUP.bits(), 1 << 4);
        assert_eq!(CriticalWarning::READ_ONLY.bits(), 1 << 3);
        assert_eq!(CriticalWarning::SPARE.bits(), 1);
    }

    #[test]
    fn error_entry_offsets_match_spec() {
        use error_entry_offsets::*;
        let pinned = [
            (ERROR_COUNT, 0),
            (SQID, 8),
            (CID, 10),
            (STATUS, 12),
            (PARAMETER_ERROR_LOCATION, 14),
            (LBA, 16),
            (NSID, 24),
            (VENDOR_SPECIFIC, 28),
            (TRTYPE, 29),
            (CSI, 30),
            (OPCODE, 31),
            (COMMAND_SPECIFIC, 32),
            (TRANSPORT_TYPE_SPECIFIC, 40),
            (LOG_PAGE_VERSION, 63),
        ];
        for (offset, spec) in pinned {
            assert_eq!(offset, spec);
        }
    }

    fn error_entry_bytes(count: u64) -> [u8; ERROR_LOG_ENTRY_SIZE] {
        let mut entry = [0u8; ERROR_LOG_ENTRY_SIZE];
        put(&mut entry, 0, &count.to_le_bytes());
        put(&mut entry, 8, &1u16.to_le_bytes()); // SQID
        put(&mut entry, 10, &0x0042u16.to_le_bytes()); // CID

        // Status: SCT 2h, SC 81h (Unrecovered Read Error), DNR; phase 1.
        let field: u16 = 0x4000 | 0x0200 | 0x81;
        put(&mut entry, 12, &(field << 1 | 1).to_le_bytes());
        put(&mut entry, 14, &0x0128u16.to_le_bytes()); // byte 40, bit 1
        put(&mut entry, 16, &0x1234_5678u64.to_le_bytes()); // LBA
        put(&mut entry, 24, &1u32.to_le_bytes()); // NSID
        entry[28] = 0x80;
        entry[30] = 0x02; // CSI: zoned
        entry[31] = 0x02; // Read
        put(&mut entry, 32, &0xAABBu64.to_le_bytes());
        put(&mut entry, 40, &0x0102u16.to_le_bytes());
        entry[63] = 1;
        entry
    }

    #[test]
    fn error_entry() {
        let entry = ErrorLogEntry::parse(&error_entry_bytes(7)).unwrap();
        assert_eq!(entry.error_count, 7);
        assert_eq!(entry.sqid, 1);
        assert_eq!(entry.cid, 0x42);
        assert_eq!(entry.status.sct, StatusCodeType::MediaAndDataIntegrity);
        assert_eq!(entry.status.code(), StatusCode::Media(MediaStatus::UnrecoveredReadError));
        assert!(entry.status.dnr);
        assert!(entry.phase_tag);
        assert_eq!(entry.parameter_error_location, 0x0128);
        assert_eq!(entry.lba, 0x1234_5678);
        assert_eq!(entry.nsid, 1);
        assert_eq!(entry.vendor_specific, 0x80);
        assert_eq!(entry.trtype, 0);
        assert_eq!((entry.csi, entry.opcode), (2, 2));
        assert_eq!(entry.command_specific, 0xAABB);
        assert_eq!(entry.transport_type_specific, 0x0102);
        assert_eq!(entry.log_page_version, 1);
        assert!(ErrorLogEntry::parse(&[0u8; 63]).is_err());
    }

    #[test]
    fn error_log_skips_unused_entries() {
        let mut page = Vec::new();
        page.extend_from_slice(&error_entry_bytes(9));
        page.extend_from_slice(&[0u8; ERROR_LOG_ENTRY_SIZE]);
        page.extend_from_slice(&error_entry_bytes(8));
        page.extend_from_slice(&[0u8; ERROR_LOG_ENTRY_SIZE]);
        let entries = parse_error_log(&page).unwrap();
        assert_eq!(entries.iter().map(|e| e.error_count).collect::<Vec<_>>(), vec![9, 8]);
        assert_eq!(parse_error_log(&[]), Ok(vec![]));
        assert_eq!(
            parse_error_log(&page[..100]),
            Err(ParseError::TooShort { what: "Error Information Log Entry", expected: 128, got: 100 })
        );
        // Every status word decodes.
        let ones = parse_error_log(&[0xFF; 4 * ERROR_LOG_ENTRY_SIZE]).unwrap();
        assert_eq!(ones.len(), 4);
        assert_eq!(ones[0].status.sct, StatusCodeType::VendorSpecific);
    }
}

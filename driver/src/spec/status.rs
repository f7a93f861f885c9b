//! Completion status (NVMe Base 2.0, "Status Field Definition"; NVM Command
//! Set 1.0 and ZNS Command Set 1.1 for the I/O-specific codes).
//!
//! The 15-bit Status Field is CQE DW3 bits 31:17. Within it:
//! SC bits 7:0, SCT bits 10:8, CRD bits 12:11, M bit 13, DNR bit 14.
//! Decoding is total: every `u16` yields a [`Status`], unknown codes land in
//! `Other`/`Unknown` variants.

use core::fmt;

const SC_SHIFT: u32 = 0;
const SC_MASK: u16 = 0xFF;
const SCT_SHIFT: u32 = 8;
const SCT_MASK: u16 = 0b111;
const CRD_SHIFT: u32 = 11;
const CRD_MASK: u16 = 0b11;
const MORE_BIT: u16 = 1 << 13;
const DNR_BIT: u16 = 1 << 14;

/// Status codes from this value up are vendor specific in the generic,
/// command specific and media status code types.
pub const SC_VENDOR_SPECIFIC_MIN: u8 = 0xC0;

/// SCT – Status Code Type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum StatusCodeType {
    /// 0h – Generic Command Status.
    Generic,
    /// 1h – Command Specific Status.
    CommandSpecific,
    /// 2h – Media and Data Integrity Errors.
    MediaAndDataIntegrity,
    /// 3h – Path Related Status.
    Path,
    /// 7h – Vendor Specific.
    VendorSpecific,
    /// 4h–6h – Reserved.
    Reserved(u8),
}

impl StatusCodeType {
    /// Decodes the 3-bit SCT; bits above are ignored.
    pub const fn from_raw(sct: u8) -> Self {
        match sct & 0b111 {
            0 => Self::Generic,
            1 => Self::CommandSpecific,
            2 => Self::MediaAndDataIntegrity,
            3 => Self::Path,
            7 => Self::VendorSpecific,
            other => Self::Reserved(other),
        }
    }

    /// The 3-bit SCT value.
    pub const fn raw(self) -> u8 {
        match self {
            Self::Generic => 0,
            Self::CommandSpecific => 1,
            Self::MediaAndDataIntegrity => 2,
            Self::Path => 3,
            Self::VendorSpecific => 7,
            Self::Reserved(sct) => sct & 0b111,
        }
    }
}

/// Defines a status code enum with an `Other(u8)` fallback, `from_sc`, `sc`
/// and `name`. `from_sc` only produces `Other` for codes without a variant.
macro_rules! status_codes {
    (
        $(#[$meta:meta])*
        $name:ident {
            $($(#[$vmeta:meta])* $variant:ident = $code:literal => $text:literal,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
            /// A code with no variant here: reserved, vendor specific or
            /// defined by a command set this driver does not decode.
            Other(u8),
        }

        impl $name {
            /// Decodes a status code.
            pub const fn from_sc(sc: u8) -> Self {
                match sc {
                    $($code => Self::$variant,)*
                    other => Self::Other(other),
                }
            }

            /// The status code value.
            pub const fn sc(self) -> u8 {
                match self {
                    $(Self::$variant => $code,)*
                    Self::Other(sc) => sc,
                }
            }

            /// The spec name.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)*
                    Self::Other(sc) => other_name(sc),
                }
            }
        }
    };
}

const fn other_name(sc: u8) -> &'static str {
    if sc >= SC_VENDOR_SPECIFIC_MIN {
        "Vendor Specific Status"
    } else {
        "Unknown Status"
    }
}

status_codes! {
    /// SCT 0h – Generic Command Status (Base 2.0), with the NVM Command Set's
    /// codes 80h–84h.
    GenericStatus {
        /// 00h.
        SuccessfulCompletion = 0x00 => "Successful Completion",
        /// 01h.
        InvalidCommandOpcode = 0x01 => "Invalid Command Opcode",
        /// 02h.
        InvalidFieldInCommand = 0x02 => "Invalid Field in Command",
        /// 03h.
        CommandIdConflict = 0x03 => "Command ID Conflict",
        /// 04h.
        DataTransferError = 0x04 => "Data Transfer Error",
        /// 05h.
        AbortedPowerLoss = 0x05 => "Commands Aborted due to Power Loss Notification",
        /// 06h.
        InternalError = 0x06 => "Internal Error",
        /// 07h.
        CommandAbortRequested = 0x07 => "Command Abort Requested",
        /// 08h.
        AbortedSqDeletion = 0x08 => "Command Aborted due to SQ Deletion",
        /// 09h.
        AbortedFailedFused = 0x09 => "Command Aborted due to Failed Fused Command",
        /// 0Ah.
        AbortedMissingFused = 0x0A => "Command Aborted due to Missing Fused Command",
        /// 0Bh.
        InvalidNamespaceOrFormat = 0x0B => "Invalid Namespace or Format",
        /// 0Ch.
        CommandSequenceError = 0x0C => "Command Sequence Error",
        /// 0Dh.
        InvalidSglSegmentDescriptor = 0x0D => "Invalid SGL Segment Descriptor",
        /// 0Eh.
        InvalidNumberOfSglDescriptors = 0x0E => "Invalid Number of SGL Descriptors",
        /// 0Fh.
        DataSglLengthInvalid = 0x0F => "Data SGL Length Invalid",
        /// 10h.
        MetadataSglLengthInvalid = 0x10 => "Metadata SGL Length Invalid",
        /// 11h.
        SglDescriptorTypeInvalid = 0x11 => "SGL Descriptor Type Invalid",
        /// 12h.
        InvalidUseOfCmb = 0x12 => "Invalid Use of Controller Memory Buffer",
        /// 13h.
        PrpOffsetInvalid = 0x13 => "PRP Offset Invalid",
        /// 14h.
        AtomicWriteUnitExceeded = 0x14 => "Atomic Write Unit Exceeded",
        /// 15h.
        OperationDenied = 0x15 => "Operation Denied",
        /// 16h.
        SglOffsetInvalid = 0x16 => "SGL Offset Invalid",
        /// 18h.
        HostIdentifierInconsistentFormat = 0x18 => "Host Identifier Inconsistent Format",
        /// 19h.
        KeepAliveTimerExpired = 0x19 => "Keep Alive Timer Expired",
        /// 1Ah.
        KeepAliveTimeoutInvalid = 0x1A => "Keep Alive Timeout Invalid",
        /// 1Bh.
        AbortedPreemptAndAbort = 0x1B => "Command Aborted due to Preempt and Abort",
        /// 1Ch.
        SanitizeFailed = 0x1C => "Sanitize Failed",
        /// 1Dh.
        SanitizeInProgress = 0x1D => "Sanitize In Progress",
        /// 1Eh.
        SglDataBlockGranularityInvalid = 0x1E => "SGL Data Block Granularity Invalid",
        /// 1Fh.
        CommandNotSupportedForQueueInCmb = 0x1F => "Command Not Supported for Queue in CMB",
        /// 20h.
        NamespaceWriteProtected = 0x20 => "Namespace is Write Protected",
        /// 21h.
        CommandInterrupted = 0x21 => "Command Interrupted",
        /// 22h.
        TransientTransportError = 0x22 => "Transient Transport Error",
        /// 23h.
        ProhibitedByLockdown = 0x23 => "Command Prohibited by Command and Feature Lockdown",
        /// 24h.
        AdminCommandMediaNotReady = 0x24 => "Admin Command Media Not Ready",
        /// 80h.
        LbaOutOfRange = 0x80 => "LBA Out of Range",
        /// 81h.
        CapacityExceeded = 0x81 => "Capacity Exceeded",
        /// 82h.
        NamespaceNotReady = 0x82 => "Namespace Not Ready",
        /// 83h.
        ReservationConflict = 0x83 => "Reservation Conflict",
        /// 84h.
        FormatInProgress = 0x84 => "Format In Progress",
    }
}

status_codes! {
    /// SCT 1h – Command Specific Status (Base 2.0 admin codes 00h–2Dh, NVM
    /// Command Set 1.1 80h–89h, ZNS Command Set B6h–BFh).
    CommandSpecificStatus {
        /// 00h.
        CompletionQueueInvalid = 0x00 => "Completion Queue Invalid",
        /// 01h.
        InvalidQueueIdentifier = 0x01 => "Invalid Queue Identifier",
        /// 02h.
        InvalidQueueSize = 0x02 => "Invalid Queue Size",
        /// 03h.
        AbortCommandLimitExceeded = 0x03 => "Abort Command Limit Exceeded",
        /// 05h.
        AsyncEventRequestLimitExceeded = 0x05 => "Asynchronous Event Request Limit Exceeded",
        /// 06h.
        InvalidFirmwareSlot = 0x06 => "Invalid Firmware Slot",
        /// 07h.
        InvalidFirmwareImage = 0x07 => "Invalid Firmware Image",
        /// 08h.
        InvalidInterruptVector = 0x08 => "Invalid Interrupt Vector",
        /// 09h.
        InvalidLogPage = 0x09 => "Invalid Log Page",
        /// 0Ah.
        InvalidFormat = 0x0A => "Invalid Format",
        /// 0Bh.
        FirmwareActivationRequiresConventionalReset = 0x0B => "Firmware Activation Requires Conventional Reset",
        /// 0Ch.
        InvalidQueueDeletion = 0x0C => "Invalid Queue Deletion",
        /// 0Dh.
        FeatureIdentifierNotSaveable = 0x0D => "Feature Identifier Not Saveable",
        /// 0Eh.
        FeatureNotChangeable = 0x0E => "Feature Not Changeable",
        /// 0Fh.
        FeatureNotNamespaceSpecific = 0x0F => "Feature Not Namespace Specific",
        /// 10h.
        FirmwareActivationRequiresNvmSubsystemReset = 0x10 => "Firmware Activation Requires NVM Subsystem Reset",
        /// 11h.
        FirmwareActivationRequiresControllerLevelReset = 0x11 => "Firmware Activation Requires Controller Level Reset",
        /// 12h.
        FirmwareActivationRequiresMaximumTimeViolation = 0x12 => "Firmware Activation Requires Maximum Time Violation",
        /// 13h.
        FirmwareActivationProhibited = 0x13 => "Firmware Activation Prohibited",
        /// 14h.
        OverlappingRange = 0x14 => "Overlapping Range",
        /// 15h.
        NamespaceInsufficientCapacity = 0x15 => "Namespace Insufficient Capacity",
        /// 16h.
        NamespaceIdentifierUnavailable = 0x16 => "Namespace Identifier Unavailable",
        /// 18h.
        NamespaceAlreadyAttached = 0x18 => "Namespace Already Attached",
        /// 19h.
        NamespaceIsPrivate = 0x19 => "Namespace Is Private",
        /// 1Ah.
        NamespaceNotAttached = 0x1A => "Namespace Not Attached",
        /// 1Bh.
        ThinProvisioningNotSupported = 0x1B => "Thin Provisioning Not Supported",
        /// 1Ch.
        ControllerListInvalid = 0x1C => "Controller List Invalid",
        /// 1Dh.
        DeviceSelfTestInProgress = 0x1D => "Device Self-test In Progress",
        /// 1Eh.
        BootPartitionWriteProhibited = 0x1E => "Boot Partition Write Prohibited",
        /// 1Fh.
        InvalidControllerIdentifier = 0x1F => "Invalid Controller Identifier",
        /// 20h.
        InvalidSecondaryControllerState = 0x20 => "Invalid Secondary Controller State",
        /// 21h.
        InvalidNumberOfControllerResources = 0x21 => "Invalid Number of Controller Resources",
        /// 22h.
        InvalidResourceIdentifier = 0x22 => "Invalid Resource Identifier",
        /// 23h.
        SanitizeProhibitedWhilePmrEnabled = 0x23 => "Sanitize Prohibited While Persistent Memory Region is Enabled",
        /// 24h.
        AnaGroupIdentifierInvalid = 0x24 => "ANA Group Identifier Invalid",
        /// 25h.
        AnaAttachFailed = 0x25 => "ANA Attach Failed",
        /// 26h.
        InsufficientCapacity = 0x26 => "Insufficient Capacity",
        /// 27h.
        NamespaceAttachmentLimitExceeded = 0x27 => "Namespace Attachment Limit Exceeded",
        /// 28h.
        ProhibitionOfCommandExecutionNotSupported = 0x28 => "Prohibition of Command Execution Not Supported",
        /// 29h.
        IoCommandSetNotSupported = 0x29 => "I/O Command Set Not Supported",
        /// 2Ah.
        IoCommandSetNotEnabled = 0x2A => "I/O Command Set Not Enabled",
        /// 2Bh.
        IoCommandSetCombinationRejected = 0x2B => "I/O Command Set Combination Rejected",
        /// 2Ch.
        InvalidIoCommandSet = 0x2C => "Invalid I/O Command Set",
        /// 2Dh.
        IdentifierUnavailable = 0x2D => "Identifier Unavailable",
        /// 80h (NVM).
        ConflictingAttributes = 0x80 => "Conflicting Attributes",
        /// 81h (NVM).
        InvalidProtectionInformation = 0x81 => "Invalid Protection Information",
        /// 82h (NVM).
        AttemptedWriteToReadOnlyRange = 0x82 => "Attempted Write to Read Only Range",
        /// 83h (NVM).
        CommandSizeLimitExceeded = 0x83 => "Command Size Limit Exceeded",
        /// 84h (Base 2.1, Cancel).
        InvalidCommandId = 0x84 => "Invalid Command ID",
        /// 85h (NVM Command Set 1.1 §3.3.2.4, Copy): a source namespace and
        /// the destination namespace do not have matching formats.
        IncompatibleNamespaceOrFormat = 0x85 => "Incompatible Namespace or Format",
        /// 86h (NVM Command Set 1.1 §3.3.2.1, Copy): Fast Copy Only was set
        /// and no fast copy was possible.
        FastCopyNotPossible = 0x86 => "Fast Copy Not Possible",
        /// 87h (NVM Command Set 1.1 §3.3.2, Copy): with descriptor format 2h
        /// or 3h, a source range in the destination namespace overlaps the
        /// destination range.
        OverlappingIoRange = 0x87 => "Overlapping I/O Range",
        /// 88h (NVM Command Set 1.1 §3.3.2, Copy).
        NamespaceNotReachable = 0x88 => "Namespace Not Reachable",
        /// 89h (NVM Command Set 1.1 §3.3.2, Copy).
        InsufficientResources = 0x89 => "Insufficient Resources",
        /// B6h (ZNS).
        InvalidZoneOperationRequest = 0xB6 => "Invalid Zone Operation Request",
        /// B7h (ZNS).
        ZrwaResourcesUnavailable = 0xB7 => "ZRWA Resources Unavailable",
        /// B8h (ZNS).
        ZoneBoundaryError = 0xB8 => "Zone Boundary Error",
        /// B9h (ZNS).
        ZoneIsFull = 0xB9 => "Zone Is Full",
        /// BAh (ZNS).
        ZoneIsReadOnly = 0xBA => "Zone Is Read Only",
        /// BBh (ZNS).
        ZoneIsOffline = 0xBB => "Zone Is Offline",
        /// BCh (ZNS).
        ZoneInvalidWrite = 0xBC => "Zone Invalid Write",
        /// BDh (ZNS).
        TooManyActiveZones = 0xBD => "Too Many Active Zones",
        /// BEh (ZNS).
        TooManyOpenZones = 0xBE => "Too Many Open Zones",
        /// BFh (ZNS).
        InvalidZoneStateTransition = 0xBF => "Invalid Zone State Transition",
    }
}

status_codes! {
    /// SCT 2h – Media and Data Integrity Errors.
    MediaStatus {
        /// 80h.
        WriteFault = 0x80 => "Write Fault",
        /// 81h.
        UnrecoveredReadError = 0x81 => "Unrecovered Read Error",
        /// 82h.
        EndToEndGuardCheckError = 0x82 => "End-to-end Guard Check Error",
        /// 83h.
        EndToEndApplicationTagCheckError = 0x83 => "End-to-end Application Tag Check Error",
        /// 84h.
        EndToEndReferenceTagCheckError = 0x84 => "End-to-end Reference Tag Check Error",
        /// 85h.
        CompareFailure = 0x85 => "Compare Failure",
        /// 86h.
        AccessDenied = 0x86 => "Access Denied",
        /// 87h.
        DeallocatedOrUnwrittenLogicalBlock = 0x87 => "Deallocated or Unwritten Logical Block",
        /// 88h.
        EndToEndStorageTagCheckError = 0x88 => "End-to-End Storage Tag Check Error",
    }
}

status_codes! {
    /// SCT 3h – Path Related Status.
    PathStatus {
        /// 00h.
        InternalPathError = 0x00 => "Internal Path Error",
        /// 01h.
        AsymmetricAccessPersistentLoss = 0x01 => "Asymmetric Access Persistent Loss",
        /// 02h.
        AsymmetricAccessInaccessible = 0x02 => "Asymmetric Access Inaccessible",
        /// 03h.
        AsymmetricAccessTransition = 0x03 => "Asymmetric Access Transition",
        /// 60h.
        ControllerPathingError = 0x60 => "Controller Pathing Error",
        /// 70h.
        HostPathingError = 0x70 => "Host Pathing Error",
        /// 71h.
        CommandAbortedByHost = 0x71 => "Command Aborted By Host",
    }
}

/// A status code, typed by its status code type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum StatusCode {
    /// SCT 0h.
    Generic(GenericStatus),
    /// SCT 1h.
    CommandSpecific(CommandSpecificStatus),
    /// SCT 2h.
    Media(MediaStatus),
    /// SCT 3h.
    Path(PathStatus),
    /// SCT 7h, with its SC.
    Vendor(u8),
    /// A reserved SCT.
    Unknown {
        /// Status Code Type.
        sct: u8,
        /// Status Code.
        sc: u8,
    },
}

impl StatusCode {
    /// The spec name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Generic(code) => code.name(),
            Self::CommandSpecific(code) => code.name(),
            Self::Media(code) => code.name(),
            Self::Path(code) => code.name(),
            Self::Vendor(_) => "Vendor Specific Status",
            Self::Unknown { .. } => "Reserved Status Code Type",
        }
    }
}

/// A decoded Status Field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Status {
    /// SCT – Status Code Type.
    pub sct: StatusCodeType,
    /// SC – Status Code.
    pub sc: u8,
    /// CRD – Command Retry Delay: 0, or which of CRDT1–3 to wait.
    pub crd: u8,
    /// M – More: the Error Information log page has more detail.
    pub more: bool,
    /// DNR – Do Not Retry.
    pub dnr: bool,
}

impl Status {
    /// Successful Completion.
    pub const SUCCESS: Status = Status::new(StatusCodeType::Generic, 0x00);

    /// A status with this type and code, no retry delay, More and DNR clear.
    pub const fn new(sct: StatusCodeType, sc: u8) -> Self {
        Self { sct, sc, crd: 0, more: false, dnr: false }
    }

    /// Decodes the 15-bit Status Field (CQE DW3 bits 31:17, shifted down so
    /// SC is in bits 7:0). Bit 15 of `field` is ignored.
    pub const fn from_field(field: u16) -> Self {
        Self {
            sct: StatusCodeType::from_raw(((field >> SCT_SHIFT) & SCT_MASK) as u8),
            sc: ((field >> SC_SHIFT) & SC_MASK) as u8,
            crd: ((field >> CRD_SHIFT) & CRD_MASK) as u8,
            more: field & MORE_BIT != 0,
            dnr: field & DNR_BIT != 0,
        }
    }

    /// Encodes the 15-bit Status Field, the inverse of [`Status::from_field`].
    pub const fn to_field(self) -> u16 {
        let mut field = (self.sc as u16) << SC_SHIFT
            | ((self.sct.raw() as u16) & SCT_MASK) << SCT_SHIFT
            | ((self.crd as u16) & CRD_MASK) << CRD_SHIFT;
        if self.more {
            field |= MORE_BIT;
        }
        if self.dnr {
            field |= DNR_BIT;
        }
        field
    }

    /// With DNR set.
    #[must_use]
    pub const fn with_dnr(mut self) -> Self {
        self.dnr = true;
        self
    }

    /// Successful Completion (SCT 0h, SC 00h), whatever CRD, M and DNR say.
    pub const fn is_success(&self) -> bool {
        matches!(self.sct, StatusCodeType::Generic) && self.sc == 0
    }

    /// SCT 2h: the media or end-to-end protection failed.
    pub const fn is_media_error(&self) -> bool {
        matches!(self.sct, StatusCodeType::MediaAndDataIntegrity)
    }

    /// The typed status code.
    pub const fn code(&self) -> StatusCode {
        match self.sct {
            StatusCodeType::Generic => StatusCode::Generic(GenericStatus::from_sc(self.sc)),
            StatusCodeType::CommandSpecific => StatusCode::CommandSpecific(CommandSpecificStatus::from_sc(self.sc)),
            StatusCodeType::MediaAndDataIntegrity => StatusCode::Media(MediaStatus::from_sc(self.sc)),
            StatusCodeType::Path => StatusCode::Path(PathStatus::from_sc(self.sc)),
            StatusCodeType::VendorSpecific => StatusCode::Vendor(self.sc),
            StatusCodeType::Reserved(sct) => StatusCode::Unknown { sct, sc: self.sc },
        }
    }

    /// The spec name of the status code, e.g. "Invalid Field in Command".
    pub const fn name(&self) -> &'static str {
        self.code().name()
    }
}

impl From<GenericStatus> for Status {
    fn from(code: GenericStatus) -> Self {
        Self::new(StatusCodeType::Generic, code.sc())
    }
}

impl From<CommandSpecificStatus> for Status {
    fn from(code: CommandSpecificStatus) -> Self {
        Self::new(StatusCodeType::CommandSpecific, code.sc())
    }
}

impl From<MediaStatus> for Status {
    fn from(code: MediaStatus) -> Self {
        Self::new(StatusCodeType::MediaAndDataIntegrity, code.sc())
    }
}

impl From<PathStatus> for Status {
    fn from(code: PathStatus) -> Self {
        Self::new(StatusCodeType::Path, code.sc())
    }
}

/// "Invalid Field in Command (SCT 0h / SC 02h, DNR)".
impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (SCT {:X}h / SC {:02X}h", self.name(), self.sct.raw(), self.sc)?;
        if self.crd != 0 {
            write!(f, ", CRD {}", self.crd)?;
        }
        if self.more {
            f.write_str(", More")?;
        }
        if self.dnr {
            f.write_str(", DNR")?;
        }
        f.write_str(")")
    }
}

impl std::error::Error for Status {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_layout() {
        // SC 02h, SCT 0h, DNR.
        let status = Status::from_field(0x4002);
        assert_eq!(status.sct, StatusCodeType::Generic);
        assert_eq!(status.sc, 0x02);
        assert!(status.dnr);
        assert!(!status.more);
        assert_eq!(status.crd, 0);
        assert_eq!(status.code(), StatusCode::Generic(GenericStatus::InvalidFieldInCommand));

        // SCT 1h, SC B9h, CRD 2, More.
        let status = Status::from_field(0x2000 | 0x1000 | 0x0100 | 0xB9);
        assert_eq!(status.sct, StatusCodeType::CommandSpecific);
        assert_eq!(status.sc, 0xB9);
        assert_eq!(status.crd, 2);
        assert!(status.more);
        assert!(!status.dnr);
        assert_eq!(status.name(), "Zone Is Full");

        // SCT 2h, SC 81h.
        let status = Status::from_field(0x0281);
        assert!(status.is_media_error());
        assert_eq!(status.name(), "Unrecovered Read Error");
    }

    #[test]
    fn every_field_decodes_and_round_trips() {
        for field in 0..=u16::MAX {
            let status = Status::from_field(field);
            assert_eq!(status.to_field(), field & 0x7FFF);
            assert!(!status.name().is_empty());
            assert!(!status.to_string().is_empty());
            assert_eq!(status.is_success(), field & 0x07FF == 0);
            // Typed codes round-trip to the same SC.
            let sc = match status.code() {
                StatusCode::Generic(code) => code.sc(),
                StatusCode::CommandSpecific(code) => code.sc(),
                StatusCode::Media(code) => code.sc(),
                StatusCode::Path(code) => code.sc(),
                StatusCode::Vendor(sc) | StatusCode::Unknown { sc, .. } => sc,
            };
            assert_eq!(sc, status.sc);
        }
    }

    #[test]
    fn typed_enums_are_total_and_canonical() {
        for sc in 0..=u8::MAX {
            for code in [
                GenericStatus::from_sc(sc).sc(),
                CommandSpecificStatus::from_sc(sc).sc(),
                MediaStatus::from_sc(sc).sc(),
                PathStatus::from_sc(sc).sc(),
            ] {
                assert_eq!(code, sc);
            }
        }
        assert_eq!(GenericStatus::from_sc(0x17), GenericStatus::Other(0x17));
        assert_eq!(GenericStatus::Other(0x17).name(), "Unknown Status");
        assert_eq!(MediaStatus::from_sc(0xC3).name(), "Vendor Specific Status");
    }

    #[test]
    fn names_from_spec() {
        let cases: [(u8, u8, &str); 29] = [
            (0, 0x00, "Successful Completion"),
            (0, 0x01, "Invalid Command Opcode"),
            (0, 0x02, "Invalid Field in Command"),
            (0, 0x0B, "Invalid Namespace or Format"),
            (0, 0x80, "LBA Out of Range"),
            (0, 0x81, "Capacity Exceeded"),
            (0, 0x82, "Namespace Not Ready"),
            (0, 0x83, "Reservation Conflict"),
            (0, 0x84, "Format In Progress"),
            (1, 0x00, "Completion Queue Invalid"),
            (1, 0x01, "Invalid Queue Identifier"),
            (1, 0x02, "Invalid Queue Size"),
            (1, 0x03, "Abort Command Limit Exceeded"),
            (1, 0x05, "Asynchronous Event Request Limit Exceeded"),
            (1, 0x09, "Invalid Log Page"),
            (1, 0x0A, "Invalid Format"),
            (1, 0x0D, "Feature Identifier Not Saveable"),
            (1, 0x80, "Conflicting Attributes"),
            (1, 0x82, "Attempted Write to Read Only Range"),
            (1, 0x85, "Incompatible Namespace or Format"),
            (1, 0x87, "Overlapping I/O Range"),
            (1, 0xB8, "Zone Boundary Error"),
            (1, 0xBC, "Zone Invalid Write"),
            (1, 0xBF, "Invalid Zone State Transition"),
            (2, 0x80, "Write Fault"),
            (2, 0x85, "Compare Failure"),
            (2, 0x87, "Deallocated or Unwritten Logical Block"),
            (2, 0x88, "End-to-End Storage Tag Check Error"),
            (3, 0x02, "Asymmetric Access Inaccessible"),
        ];
        for (sct, sc, name) in cases {
            let status = Status::from_field(u16::from(sct) << 8 | u16::from(sc));
            assert_eq!(status.name(), name, "SCT {sct} SC {sc:#x}");
        }
    }

    #[test]
    fn display() {
        assert_eq!(
            Status::from(GenericStatus::InvalidFieldInCommand).with_dnr().to_string(),
            "Invalid Field in Command (SCT 0h / SC 02h, DNR)"
        );
        assert_eq!(Status::SUCCESS.to_string(), "Successful Completion (SCT 0h / SC 00h)");
        assert_eq!(
            Status::from_field(0x3000 | 0x01BE).to_string(),
            "Too Many Open Zones (SCT 1h / SC BEh, CRD 2, More)"
        );
        assert_eq!(Status::from_field(0x0701).to_string(), "Vendor Specific Status (SCT 7h / SC 01h)");
        assert_eq!(Status::from_field(0x0501).to_string(), "Reserved Status Code Type (SCT 5h / SC 01h)");
    }

    #[test]
    fn sct_round_trips() {
        for raw in 0..8 {
            assert_eq!(StatusCodeType::from_raw(raw).raw(), raw);
        }
        assert_eq!(StatusCodeType::from_raw(4), StatusCodeType::Reserved(4));
        assert_eq!(StatusCodeType::from_raw(7), StatusCodeType::VendorSpecific);
    }

    #[test]
    fn typed_constructors() {
        assert_eq!(Status::from(CommandSpecificStatus::ZoneIsFull).to_field(), 0x01B9);
        assert_eq!(Status::from(MediaStatus::WriteFault).to_field(), 0x0280);
        assert_eq!(Status::from(PathStatus::HostPathingError).to_field(), 0x0370);
        assert!(Status::from(GenericStatus::SuccessfulCompletion).is_success());
        // A successful status with DNR set is still success.
        assert!(Status::from_field(0x4000).is_success());
    }
}

//! The driver's one error type.

use crate::spec::status::Status;
use crate::spec::ParseError;
use std::fmt;
use std::io;

/// Everything the driver reports, typed so callers can act on it.
#[derive(Debug)]
pub enum Error {
    /// No PCI function at this address.
    NoSuchDevice {
        /// The PCI address asked for.
        bdf: String,
    },
    /// The function exists but is not an NVMe controller (class 0x010802).
    NotNvme {
        /// The PCI address.
        bdf: String,
        /// Its 24-bit PCI class code.
        class: u32,
    },
    /// The function is not bound to vfio-pci, so userspace cannot own it.
    NotBoundToVfio {
        /// The PCI address.
        bdf: String,
        /// The driver it is bound to, if any.
        driver: Option<String>,
    },
    /// No NVMe function is bound to vfio-pci on this machine.
    NoVfioDevice,
    /// The IOMMU group holds other devices that are not bound to vfio-pci.
    GroupNotViable {
        /// The PCI address.
        bdf: String,
        /// Its IOMMU group number.
        group: u32,
    },
    /// A VFIO ioctl failed.
    Vfio {
        /// What the driver was doing.
        context: String,
        /// The ioctl's error.
        source: vfio_ioctls::VfioError,
    },
    /// A system call or file operation failed.
    Io {
        /// What the driver was doing (often with the path).
        context: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// DMA memory could not be allocated or mapped.
    Dma(String),
    /// The controller did not reach a state within its bound.
    Timeout {
        /// What was waited for, in words.
        what: &'static str,
        /// How long the driver waited, in milliseconds.
        waited_ms: u64,
    },
    /// CSTS.CFS: the controller reported a fatal error.
    ControllerFatal,
    /// BAR reads return all ones: the device is gone.
    DeviceGone,
    /// The controller could not be brought back by a reset (it did not
    /// become ready, or reported a fatal status again); nothing more can be
    /// submitted.
    ControllerFailed,
    /// A command sent with a blocking helper did not succeed for a reason
    /// other than a device status: a timeout, an abort, a reset or removal.
    NotCompleted {
        /// The command's opcode (OPC).
        opcode: u8,
        /// Whether it was an admin command (else an I/O command).
        admin: bool,
        /// Why it did not complete.
        error: IoError,
    },
    /// The controller lacks something this driver needs.
    Unsupported(String),
    /// A command completed with an error status.
    Command {
        /// The command's opcode (OPC).
        opcode: u8,
        /// Whether it was an admin command (else an I/O command).
        admin: bool,
        /// The status the controller returned.
        status: Status,
    },
    /// Device-provided data could not be decoded.
    Parse(ParseError),
    /// The submission queue is full.
    QueueFull,
    /// A caller-provided argument is out of range.
    InvalidArgument(String),
    /// An I/O request failed validation; the device was not touched.
    InvalidRequest(RequestError),
}

/// Why a request was refused before submission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestError {
    /// The blocks lie (partly) past the namespace's end.
    LbaOutOfRange {
        /// First LBA of the request.
        slba: u64,
        /// Logical blocks requested.
        blocks: u64,
        /// The namespace size, in logical blocks (NSZE).
        capacity_blocks: u64,
    },
    /// More bytes than one command may move (MDTS, ZASL or the PRP limit).
    TooLarge {
        /// Bytes requested.
        bytes: u64,
        /// The largest transfer allowed, in bytes.
        max_bytes: u64,
    },
    /// A transfer of zero blocks.
    Empty,
    /// The buffer length is not a whole number of blocks.
    NotBlockMultiple {
        /// The buffer's length, in bytes.
        bytes: u64,
        /// The logical block size, in bytes.
        block_size: u32,
    },
    /// The buffer is not dword aligned, as PRP entries require.
    Misaligned {
        /// The I/O virtual address of the buffer.
        iova: u64,
    },
    /// The buffer is smaller than the transfer.
    BufferTooSmall {
        /// Bytes the transfer needs.
        needed: u64,
        /// Bytes the buffer has.
        got: u64,
    },
    /// A zone command on a namespace without zones.
    NotZoned {
        /// The namespace.
        nsid: u32,
    },
    /// A zone operation on an LBA that does not start a zone.
    NotZoneStart {
        /// The LBA given.
        slba: u64,
        /// The zone size, in logical blocks.
        zone_size_blocks: u64,
    },
    /// The blocks cross a zone boundary.
    CrossesZone {
        /// First LBA of the request.
        slba: u64,
        /// Logical blocks requested.
        blocks: u64,
    },
    /// The controller does not offer the command (ONCS).
    Unsupported {
        /// The command's name.
        command: &'static str,
    },
    /// Too many ranges for one command.
    TooManyRanges {
        /// Ranges given.
        count: usize,
        /// Ranges the controller allows per command.
        max: usize,
    },
    /// A range (or all ranges together) longer than the controller allows
    /// (DMRSL/DMSL for deallocate, MSSRL/MCL for Copy).
    RangeTooLong {
        /// Logical blocks in the range (or in all of them).
        blocks: u64,
        /// The controller's limit, in logical blocks.
        max_blocks: u64,
    },
    /// A metadata buffer for a namespace whose format has no separate
    /// per-block metadata (none, interleaved with the data, or protection
    /// information on).
    NoSeparateMetadata {
        /// The namespace.
        nsid: u32,
    },
    /// A command this driver builds only without end-to-end protection
    /// information (Copy across namespaces, descriptor format 2h with no
    /// tags), on a namespace formatted with it.
    ProtectionInformation {
        /// The namespace.
        nsid: u32,
        /// The command's name.
        command: &'static str,
    },
    /// A metadata buffer whose length is not the transfer's blocks times
    /// the format's metadata size.
    MetadataLength {
        /// Bytes the transfer's blocks carry.
        expected: u64,
        /// Bytes the buffer has.
        got: u64,
    },
    /// A metadata transfer the controller would move only in part
    /// (`Quirks::METADATA_DMA_TRUNCATED`): at least `granule` bytes and
    /// not a multiple of it.
    MetadataTruncated {
        /// Bytes of metadata the transfer carries.
        bytes: u64,
        /// The controller's granule.
        granule: u32,
    },
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::LbaOutOfRange { slba, blocks, capacity_blocks } => {
                write!(f, "blocks {slba}+{blocks} lie past the namespace end ({capacity_blocks} blocks)")
            }
            RequestError::TooLarge { bytes, max_bytes } => {
                write!(f, "{bytes} bytes exceed the {max_bytes}-byte limit of one command")
            }
            RequestError::Empty => write!(f, "a transfer of zero blocks"),
            RequestError::NotBlockMultiple { bytes, block_size } => {
                write!(f, "{bytes} bytes is not a multiple of the {block_size}-byte block")
            }
            RequestError::Misaligned { iova } => {
                write!(f, "buffer at {iova:#x} is not 4-byte aligned")
            }
            RequestError::BufferTooSmall { needed, got } => {
                write!(f, "buffer of {got} bytes, {needed} needed")
            }
            RequestError::NotZoned { nsid } => write!(f, "namespace {nsid} has no zones"),
            RequestError::NotZoneStart { slba, zone_size_blocks } => {
                write!(f, "LBA {slba} does not start a zone ({zone_size_blocks} blocks each)")
            }
            RequestError::CrossesZone { slba, blocks } => {
                write!(f, "blocks {slba}+{blocks} cross a zone boundary")
            }
            RequestError::Unsupported { command } => {
                write!(f, "the controller does not support {command}")
            }
            RequestError::TooManyRanges { count, max } => {
                write!(f, "{count} ranges, at most {max} per command")
            }
            RequestError::NoSeparateMetadata { nsid } => {
                write!(f, "namespace {nsid} is not formatted with separate per-block metadata")
            }
            RequestError::ProtectionInformation { nsid, command } => {
                write!(f, "namespace {nsid} is formatted with protection information, which {command} does not carry")
            }
            RequestError::MetadataLength { expected, got } => {
                write!(f, "metadata buffer of {got} bytes, the blocks carry {expected}")
            }
            RequestError::MetadataTruncated { bytes, granule } => write!(
                f,
                "{bytes} bytes of metadata: this controller moves only {} of them (a transfer of {granule} bytes \
                 or more must be a multiple of {granule}; quirk METADATA_DMA_TRUNCATED)",
                bytes % u64::from(*granule)
            ),
            RequestError::RangeTooLong { blocks, max_blocks } => {
                write!(f, "{blocks} blocks in a range, at most {max_blocks} allowed")
            }
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoSuchDevice { bdf } => {
                write!(f, "no PCI function {bdf} (see hack/setup-vfio status)")
            }
            Error::NotNvme { bdf, class } => {
                write!(f, "{bdf} is not an NVMe controller (class {class:#08x})")
            }
            Error::NotBoundToVfio { bdf, driver: Some(driver) } => {
                write!(f, "{bdf} is bound to {driver}, not vfio-pci (hack/setup-vfio bind {bdf})")
            }
            Error::NotBoundToVfio { bdf, driver: None } => {
                write!(f, "{bdf} is bound to no driver, not vfio-pci (hack/setup-vfio bind {bdf})")
            }
            Error::NoVfioDevice => write!(f, "no NVMe function is bound to vfio-pci (hack/setup-vfio bind)"),
            Error::GroupNotViable { bdf, group } => {
                write!(f, "IOMMU group {group} of {bdf} has devices not bound to vfio-pci")
            }
            Error::Vfio { context, source } => write!(f, "{context}: {source}"),
            Error::Io { context, source } => write!(f, "{context}: {source}"),
            Error::Dma(message) => write!(f, "DMA memory: {message}"),
            Error::Timeout { what, waited_ms } => {
                write!(f, "timed out after {waited_ms} ms waiting for {what}")
            }
            Error::ControllerFatal => write!(f, "controller fatal status (CSTS.CFS)"),
            Error::DeviceGone => write!(f, "device gone: register reads return all ones"),
            Error::ControllerFailed => write!(f, "controller failed: a reset did not bring it back"),
            Error::NotCompleted { opcode, admin, error } => {
                let name = if *admin {
                    crate::spec::command::admin_opcode_name(*opcode)
                } else {
                    crate::spec::command::io_opcode_name(*opcode)
                };
                write!(f, "{name} (opcode {opcode:#04x}): {error}")
            }
            Error::Unsupported(what) => write!(f, "unsupported: {what}"),
            Error::Command { opcode, admin, status } => {
                let name = if *admin {
                    crate::spec::command::admin_opcode_name(*opcode)
                } else {
                    crate::spec::command::io_opcode_name(*opcode)
                };
                write!(f, "{name} (opcode {opcode:#04x}) failed: {status}")
            }
            Error::Parse(error) => write!(f, "{error}"),
            Error::QueueFull => write!(f, "submission queue full"),
            Error::InvalidArgument(message) => write!(f, "invalid argument: {message}"),
            Error::InvalidRequest(error) => write!(f, "invalid request: {error}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Vfio { source, .. } => Some(source),
            Error::Io { source, .. } => Some(source),
            Error::Parse(source) => Some(source),
            Error::NotCompleted { error, .. } => Some(error),
            _ => None,
        }
    }
}

impl std::error::Error for RequestError {}

impl From<RequestError> for Error {
    fn from(error: RequestError) -> Self {
        Error::InvalidRequest(error)
    }
}

impl From<ParseError> for Error {
    fn from(error: ParseError) -> Self {
        Error::Parse(error)
    }
}

/// Why one command did not succeed: what [`crate::IoCompletion::status`]
/// holds. Every command submitted to a queue pair completes exactly once,
/// with `Ok(())` or one of these; none is lost and none completes twice.
///
/// Whether the owner may resubmit: [`IoError::is_retryable`]. A command
/// that did not succeed may still have taken effect, in part or in full
/// (a write whose completion was lost may have reached the media), so a
/// resubmission must be idempotent or the owner must check first (a zone's
/// write pointer, say, before appending again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoError {
    /// The controller completed the command with an error status.
    Device(Status),
    /// The command's deadline passed
    /// ([`crate::QueuePair::set_timeout`]). The driver aborted it, or
    /// reset the controller when the abort did not end it; the device no
    /// longer touches its buffer.
    Timeout,
    /// The controller ended the command with an abort status the driver
    /// did not cause by a timeout: Command Abort Requested (an Abort from
    /// elsewhere) or Command Aborted due to SQ Deletion (NVMe Base 2.0
    /// §4.2.3, Figure 102, status 07h and 08h).
    Aborted,
    /// The device is gone (register reads return all ones): nothing will
    /// complete, and nothing more can be submitted.
    DeviceGone,
    /// The controller was reset (after a fatal status, a command that would
    /// not end, or [`crate::Controller::reset`]) while the command was in
    /// flight. The queue pair is usable again; the command may be
    /// resubmitted.
    ControllerReset,
}

impl IoError {
    /// The controller's status, for [`IoError::Device`].
    pub fn device_status(&self) -> Option<Status> {
        match self {
            IoError::Device(status) => Some(*status),
            _ => None,
        }
    }

    /// Whether submitting the same command again may succeed: a device
    /// status without Do Not Retry (NVMe Base 2.0 §4.2.3.1), a timeout, an
    /// abort or a reset. Not after the device is gone.
    pub fn is_retryable(&self) -> bool {
        match self {
            IoError::Device(status) => !status.dnr,
            IoError::Timeout | IoError::Aborted | IoError::ControllerReset => true,
            IoError::DeviceGone => false,
        }
    }
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IoError::Device(status) => write!(f, "{status}"),
            IoError::Timeout => write!(f, "command timed out and was aborted"),
            IoError::Aborted => write!(f, "command aborted by the controller"),
            IoError::DeviceGone => write!(f, "device gone"),
            IoError::ControllerReset => write!(f, "command ended by a controller reset"),
        }
    }
}

impl std::error::Error for IoError {}

impl From<Status> for IoError {
    fn from(status: Status) -> Self {
        IoError::Device(status)
    }
}

/// Shorthand for `map_err` on I/O results.
pub(crate) fn io_context(context: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

/// The driver's result type, with [`Error`] by default.
pub type Result<T, E = Error> = std::result::Result<T, E>;

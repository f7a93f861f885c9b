//! The driver's one error type.

use crate::spec::status::Status;
use crate::spec::ParseError;
use std::fmt;
use std::io;

/// Everything the driver reports, typed so callers can act on it.
#[derive(Debug)]
pub enum Error {
    /// No PCI function at this address.
    NoSuchDevice { bdf: String },
    /// The function exists but is not an NVMe controller (class 0x010802).
    NotNvme { bdf: String, class: u32 },
    /// The function is not bound to vfio-pci, so userspace cannot own it.
    NotBoundToVfio { bdf: String, driver: Option<String> },
    /// No NVMe function is bound to vfio-pci on this machine.
    NoVfioDevice,
    /// The IOMMU group holds other devices that are not bound to vfio-pci.
    GroupNotViable { bdf: String, group: u32 },
    /// A VFIO ioctl failed.
    Vfio { context: String, source: vfio_ioctls::VfioError },
    /// A system call or file operation failed.
    Io { context: String, source: io::Error },
    /// DMA memory could not be allocated or mapped.
    Dma(String),
    /// The controller did not reach a state within its bound.
    Timeout { what: &'static str, waited_ms: u64 },
    /// CSTS.CFS: the controller reported a fatal error.
    ControllerFatal,
    /// BAR reads return all ones: the device is gone.
    DeviceGone,
    /// The controller lacks something this driver needs.
    Unsupported(String),
    /// A command completed with an error status.
    Command { opcode: u8, admin: bool, status: Status },
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
    LbaOutOfRange { slba: u64, blocks: u64, capacity_blocks: u64 },
    /// More bytes than one command may move (MDTS, ZASL or the PRP limit).
    TooLarge { bytes: u64, max_bytes: u64 },
    /// A transfer of zero blocks.
    Empty,
    /// The buffer length is not a whole number of blocks.
    NotBlockMultiple { bytes: u64, block_size: u32 },
    /// The buffer is not dword aligned, as PRP entries require.
    Misaligned { iova: u64 },
    /// The buffer is smaller than the transfer.
    BufferTooSmall { needed: u64, got: u64 },
    /// A zone command on a namespace without zones.
    NotZoned { nsid: u32 },
    /// A zone operation on an LBA that does not start a zone.
    NotZoneStart { slba: u64, zone_size_blocks: u64 },
    /// The blocks cross a zone boundary.
    CrossesZone { slba: u64, blocks: u64 },
    /// The controller does not offer the command (ONCS).
    Unsupported { command: &'static str },
    /// Too many ranges for one command.
    TooManyRanges { count: usize, max: usize },
    /// A range (or all ranges together) longer than the controller allows
    /// (DMRSL/DMSL for deallocate, MSSRL/MCL for Copy).
    RangeTooLong { blocks: u64, max_blocks: u64 },
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

/// Shorthand for `map_err` on I/O results.
pub(crate) fn io_context(context: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

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
    Vfio {
        context: String,
        source: vfio_ioctls::VfioError,
    },
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
    Command {
        opcode: u8,
        admin: bool,
        status: Status,
    },
    /// Device-provided data could not be decoded.
    Parse(ParseError),
    /// The submission queue is full.
    QueueFull,
    /// A caller-provided argument is out of range.
    InvalidArgument(String),
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
            Error::NotBoundToVfio {
                bdf,
                driver: Some(driver),
            } => {
                write!(
                    f,
                    "{bdf} is bound to {driver}, not vfio-pci (hack/setup-vfio bind {bdf})"
                )
            }
            Error::NotBoundToVfio { bdf, driver: None } => {
                write!(
                    f,
                    "{bdf} is bound to no driver, not vfio-pci (hack/setup-vfio bind {bdf})"
                )
            }
            Error::NoVfioDevice => write!(
                f,
                "no NVMe function is bound to vfio-pci (hack/setup-vfio bind)"
            ),
            Error::GroupNotViable { bdf, group } => {
                write!(
                    f,
                    "IOMMU group {group} of {bdf} has devices not bound to vfio-pci"
                )
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
            Error::Command {
                opcode,
                admin,
                status,
            } => {
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

//! What a caller hands a queue pair and gets back: the data buffer range,
//! the request, the completion, and why a submission was refused.

use super::prp;
use crate::dma::{DmaBuffer, DmaMemory};
use crate::error::{Error, IoError};
use crate::spec::command::Command;
use crate::spec::status::Status;

/// A byte range of a pooled DMA buffer that a command reads or writes. The
/// queue pair owns it from submission until the completion hands it back.
///
/// Offset and length are 32-bit: no command moves 4 GiB (NLB is 16 bits),
/// and the smaller range keeps a [`Request`] under 128 bytes, which the
/// compiler moves inline instead of calling memcpy (measured: two memcpy
/// calls, some 60 instructions, per I/O in `perf`).
#[derive(Debug)]
pub struct IoBuffer {
    buffer: DmaBuffer,
    offset: u32,
    len: u32,
}

/// A range's offset or length as stored: panics past 4 GiB.
fn narrow(bytes: usize) -> u32 {
    u32::try_from(bytes).unwrap_or_else(|_| panic!("an I/O buffer range of {bytes} bytes: at most 4 GiB - 1"))
}

impl IoBuffer {
    /// The whole buffer. Panics on a buffer of 4 GiB or more.
    pub fn new(buffer: DmaBuffer) -> Self {
        let len = narrow(buffer.len());
        IoBuffer { buffer, offset: 0, len }
    }

    /// `len` bytes from `offset`. Panics when the range leaves the buffer
    /// (or reaches past 4 GiB).
    pub fn range(buffer: DmaBuffer, offset: usize, len: usize) -> Self {
        assert!(offset.checked_add(len).is_some_and(|end| end <= buffer.len()), "range outside the buffer");
        IoBuffer { buffer, offset: narrow(offset), len: narrow(len) }
    }

    /// The first `len` bytes of this range. Panics if `len` is larger.
    pub fn truncate(self, len: usize) -> Self {
        assert!(len <= self.len(), "truncate to {len} of {}", self.len);
        IoBuffer { len: len as u32, ..self }
    }

    /// Length of the range, in bytes: the command's transfer.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where the range starts in its buffer, in bytes.
    pub fn offset(&self) -> usize {
        self.offset as usize
    }

    /// The I/O virtual address of the range's start, as PRP1 carries it.
    pub fn iova(&self) -> u64 {
        self.buffer.iova() + u64::from(self.offset)
    }

    /// The underlying buffer, for reading or filling it between I/Os.
    pub fn buffer(&self) -> &DmaBuffer {
        &self.buffer
    }

    /// Gives the whole buffer back (say, to reuse it for another range).
    pub fn into_buffer(self) -> DmaBuffer {
        self.buffer
    }
}

/// A command ready to submit: the SQE (cid and data pointer are filled by
/// the queue pair), its data buffer, and the caller's token.
#[derive(Debug)]
pub struct Request {
    /// The submission queue entry; the queue pair fills in CID and PRP1/PRP2.
    pub command: Command,
    /// The data buffer, owned by the queue pair until the completion hands it
    /// back; `None` for commands without data.
    pub buffer: Option<IoBuffer>,
    /// The separate metadata buffer (MPTR) of a namespace formatted with
    /// per-block metadata, owned like `buffer`; `None` for no metadata.
    /// [`crate::Namespace`]'s `*_with_metadata` requests size it.
    pub metadata: Option<IoBuffer>,
    /// Returned with the completion, like io_uring's `user_data`.
    pub token: u64,
}

/// A finished command.
#[derive(Debug)]
pub struct IoCompletion {
    /// The caller's token, as given in the [`Request`].
    pub token: u64,
    /// The command identifier the queue pair gave the command.
    pub cid: u16,
    /// `Ok` on success; else why not: the controller's status, a timeout,
    /// a reset, removal ([`IoError`]).
    pub status: std::result::Result<(), IoError>,
    /// Command specific result (e.g. the LBA a Zone Append wrote); 0 when
    /// the controller did not complete the command itself.
    pub dw0: u32,
    /// DW1 of the completion queue entry (command specific; 0 when the
    /// controller did not complete the command itself).
    pub dw1: u32,
    /// The buffer given at submission, back to the caller: the device no
    /// longer touches it.
    pub buffer: Option<IoBuffer>,
    /// The metadata buffer given at submission, back likewise.
    pub metadata: Option<IoBuffer>,
}

impl IoCompletion {
    /// DW0 and DW1 as one 64-bit result (Zone Append's assigned LBA).
    pub fn result_u64(&self) -> u64 {
        u64::from(self.dw1) << 32 | u64::from(self.dw0)
    }

    /// The controller's error status, if it completed the command with one.
    pub fn device_status(&self) -> Option<Status> {
        self.status.err().and_then(|error| error.device_status())
    }
}

/// Why a request was handed back by [`QueuePair::submit`](crate::QueuePair::submit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// Every slot is in flight: poll, then submit again.
    QueueFull,
    /// PRPs or an SGL cannot describe the buffer (misaligned or too
    /// large).
    Buffer(prp::PrpError),
    /// The device is gone; nothing more can be submitted.
    DeviceGone,
    /// A controller reset failed to bring the controller back; nothing more
    /// can be submitted.
    ControllerFailed,
    /// The buffer is mapped in another I/O address space than this
    /// controller's ([`crate::Transport::dma_domain`]): its addresses mean
    /// nothing (or other memory) to this device.
    ForeignBuffer,
    /// The command transfers data to the host, into a buffer the device
    /// may only read ([`crate::dma::DmaPool::new_device_reads`]): the IOMMU
    /// would fault the transfer.
    DeviceReadOnly,
}

impl std::fmt::Display for SubmitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubmitError::QueueFull => write!(f, "submission queue full"),
            SubmitError::Buffer(prp::PrpError::Misaligned { iova }) => {
                write!(f, "buffer at {iova:#x} is not 4-byte aligned")
            }
            SubmitError::Buffer(prp::PrpError::TooLarge { len, max }) => {
                write!(f, "{len} bytes exceed the {max} one command's data pointer describes")
            }
            SubmitError::DeviceGone => write!(f, "device gone"),
            SubmitError::ControllerFailed => write!(f, "controller failed and could not be reset"),
            SubmitError::ForeignBuffer => write!(f, "the buffer is mapped for another device's address space"),
            SubmitError::DeviceReadOnly => {
                write!(f, "the command transfers data to the host, into a buffer the device may only read")
            }
        }
    }
}

impl std::error::Error for SubmitError {}

impl From<SubmitError> for Error {
    fn from(error: SubmitError) -> Self {
        match error {
            SubmitError::QueueFull => Error::QueueFull,
            SubmitError::Buffer(prp::PrpError::Misaligned { iova }) => {
                Error::InvalidRequest(crate::error::RequestError::Misaligned { iova })
            }
            SubmitError::Buffer(prp::PrpError::TooLarge { len, max }) => {
                Error::InvalidRequest(crate::error::RequestError::TooLarge { bytes: len as u64, max_bytes: max as u64 })
            }
            SubmitError::DeviceGone => Error::DeviceGone,
            SubmitError::ControllerFailed => Error::ControllerFailed,
            SubmitError::ForeignBuffer | SubmitError::DeviceReadOnly => Error::InvalidArgument(error.to_string()),
        }
    }
}

//! Writes made in place: the volume lends a DMA buffer that its device may
//! only read ([`nvme_driver::dma::FillBuffer`]), the caller fills it as a
//! byte slice, and the write sends it to the device as it is. The
//! checksums are computed from the same memory, so nothing is copied
//! between the caller and the device (SPDK's blob API and io_uring's
//! registered buffers avoid the same copy).
//!
//! On a volume with more than one copy, the lent buffer goes to one copy's
//! device and the others get a copy of it, as from
//! [`Volume::submit_write`].

use super::Volume;
use crate::error::{Error, Result};
use crate::volume::write::Source;
use crate::ExtentId;
use nvme_driver::dma::FillBuffer;
use std::time::Instant;

impl Volume {
    /// A buffer of [`Volume::max_extent_bytes`] or more to fill and hand to
    /// [`Volume::submit_filled`]. Waits, polling the volume, while every
    /// one is in use (in flight, or held by the caller), up to the volume's
    /// timeout ([`Error::Timeout`]). Needs devices opened with
    /// [`crate::DeviceOptions::fill_buffers`]: else [`Error::InvalidArgument`].
    pub fn fill_buffer(&mut self) -> Result<FillBuffer> {
        // The clock is read only when a buffer must be waited for.
        if let Some(buffer) = self.try_fill_buffer()? {
            return Ok(buffer);
        }
        let deadline = Instant::now() + self.options.timeout;
        loop {
            self.poll();
            if let Some(buffer) = self.try_fill_buffer()? {
                return Ok(buffer);
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout { what: "a free fill buffer" });
            }
        }
    }

    /// [`Volume::fill_buffer`] without waiting: `None` while every buffer is
    /// in use.
    pub fn try_fill_buffer(&mut self) -> Result<Option<FillBuffer>> {
        let lane = self.first_online_lane();
        let device = self.devices[self.lanes[lane].device].as_ref().ok_or(Error::NoDevices)?;
        match &device.fill_pool {
            Some(pool) => Ok(pool.get_fill()),
            None => Err(Error::InvalidArgument(
                "the volume lends no fill buffers: open its devices with DeviceOptions::fill_buffers".into(),
            )),
        }
    }

    /// Writes the first `len` bytes of `buffer` (lent by
    /// [`Volume::fill_buffer`]) as a new extent, as
    /// [`Volume::submit_write`] does with the caller's bytes: the buffer
    /// goes back to the volume when the write ends, whatever its outcome.
    pub fn submit_filled(&mut self, stream: u8, buffer: FillBuffer, len: usize, owner: u64) -> Result<ExtentId> {
        self.submit_write_inner(stream, Source::Filled(buffer, len), owner, None)
    }

    /// [`Volume::submit_filled`] with the blocks' checksums computed by the
    /// caller, as [`Volume::submit_write_with_checksums`].
    pub fn submit_filled_with_checksums(
        &mut self,
        stream: u8,
        buffer: FillBuffer,
        len: usize,
        owner: u64,
        crcs: Vec<u32>,
    ) -> Result<ExtentId> {
        self.submit_write_inner(stream, Source::Filled(buffer, len), owner, Some(crcs))
    }
}

//! Reading a table page's owners back from the journal: each page's
//! newest owner blob lies in a record at a known place (its [`Home`]), and
//! carries its own checksum, so that it can be read alone, two blocks at
//! most, from either copy (see `crate::owners` and `allocator/METADATA.md`,
//! step 4).

use super::layout::read_segment;
use super::log::Journal;
use super::{decode_owner_blob, HEADER_BYTES, OWNER_BLOB_BYTES};
use crate::device::Device;
use crate::error::Result;
use crate::owners::Home;
use crate::BLOCK_SIZE;

impl Journal {
    /// Where a blob that begins `at` bytes into the payload of the last
    /// record written lies.
    pub fn home_in_last(&self, at: usize) -> Home {
        let (segment, offset, seq) = self.last;
        Home { segment, byte: offset * BLOCK_SIZE as u64 + (HEADER_BYTES + at) as u64, seq }
    }

    /// Reads back page `page`'s owners from `home`, from the first copy
    /// that holds the blob whole. Fails with [`crate::Error::Corrupt`],
    /// naming each copy's failure, when every copy is bad for good (a
    /// checksum mismatch, or the device's error status such as an
    /// unrecovered read error); with the error of a copy that failed
    /// otherwise (a timeout, a reset, a device gone), which a retry may
    /// not meet.
    pub fn read_owner_blob(&self, devices: &mut [Option<Device>], home: Home, page: u64) -> Result<Vec<u64>> {
        let first = home.byte / BLOCK_SIZE as u64;
        let skip = (home.byte % BLOCK_SIZE as u64) as usize;
        let mut buf = vec![0u8; (skip + OWNER_BLOB_BYTES).div_ceil(BLOCK_SIZE) * BLOCK_SIZE];
        let mut failures = Vec::new();
        let mut transient = None;
        for copy in self.present(devices)? {
            let device = devices[copy.device].as_mut().expect("present");
            match read_segment(device, copy, self.g, home.segment, first, &mut buf) {
                Ok(()) => match decode_owner_blob(&buf[skip..], self.volume_id, home.seq, page) {
                    Some(owners) => return Ok(owners),
                    None => failures.push(format!("device {}: checksum mismatch", copy.device)),
                },
                Err(error @ crate::Error::Command { error: nvme_driver::IoError::Device(_), .. }) => {
                    failures.push(format!("device {}: {error}", copy.device));
                }
                Err(error) => transient = Some(error),
            }
        }
        if let Some(error) = transient {
            return Err(error);
        }
        Err(crate::Error::Corrupt(format!(
            "the owners of extent table page {page} (segment {}, byte {}): {}",
            home.segment,
            home.byte,
            failures.join("; ")
        )))
    }
}

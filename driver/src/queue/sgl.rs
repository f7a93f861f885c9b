//! Scatter Gather Lists (NVMe Base 2.0 §4.1.2, "Scatter Gather List
//! (SGL)"): how a transfer is described when the controller supports SGLs
//! for the NVM command set (Identify Controller SGLS bits 1:0).
//!
//! Every buffer this driver submits is contiguous in I/O virtual address
//! space, so one SGL Data Block descriptor in the command's data pointer
//! (SGL1) describes it whole: no list page to write, and none for the
//! device to fetch and walk, at any length. SPDK does the same for
//! contiguous payloads (`nvme_pcie_qpair_build_contig_hw_sgl_request`,
//! `lib/nvme/nvme_pcie_common.c`); Linux's nvme-pci uses SGLs above its
//! `sgl_threshold` (32 KiB by default). [`SglMode`] chooses, per
//! controller, when a command uses one instead of PRPs.

use super::prp::{self, PrpError};
use crate::dma::PAGE_SIZE;

/// SGL descriptor byte 15: type (bits 7:4) Data Block, subtype (bits 3:0)
/// Address.
pub const DATA_BLOCK: u8 = 0x00;
/// Descriptor type Segment, subtype Address: the next segment's address
/// and length.
pub const SEGMENT: u8 = 0x20;
/// Descriptor type Last Segment, subtype Address.
pub const LAST_SEGMENT: u8 = 0x30;
/// Bytes in one SGL descriptor.
pub const DESCRIPTOR_BYTES: usize = 16;

/// The longest transfer one Data Block descriptor describes (its length
/// is 32 bits), in whole pages.
pub const MAX_TRANSFER_BYTES: usize = u32::MAX as usize & !(PAGE_SIZE - 1);

/// When I/O commands describe their data with an SGL rather than PRPs. The
/// admin queue always uses PRPs (over PCIe its commands must), and so does
/// every queue of a controller without SGL support.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub enum SglMode {
    /// PRPs for every transfer.
    Never,
    /// An SGL for every transfer whose PRPs would need a list (a buffer
    /// over more than two memory pages), PRP1 and PRP2 for the rest: a short transfer is
    /// two words either way, and devices whose firmware handles SGLs more
    /// slowly (the reason for Linux's threshold) lose nothing on it.
    #[default]
    Auto,
    /// An SGL for every transfer.
    Always,
}

impl SglMode {
    /// The span of pages (bytes from the start of a buffer's first page
    /// to its end) above which a queue of a controller with SGL support
    /// (`supported`) uses an SGL; `None` for PRPs throughout.
    pub fn threshold(self, supported: bool) -> Option<usize> {
        match self {
            _ if !supported => None,
            SglMode::Never => None,
            SglMode::Auto => Some(2 * PAGE_SIZE),
            SglMode::Always => Some(0),
        }
    }

    /// The largest transfer a queue with `threshold` (as
    /// [`SglMode::threshold`] gives) can describe.
    pub fn max_transfer_bytes(threshold: Option<usize>) -> usize {
        match threshold {
            Some(threshold) if threshold < prp::MAX_TRANSFER_BYTES => MAX_TRANSFER_BYTES,
            _ => prp::MAX_TRANSFER_BYTES,
        }
    }
}

impl std::str::FromStr for SglMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "never" => Ok(SglMode::Never),
            "auto" => Ok(SglMode::Auto),
            "always" => Ok(SglMode::Always),
            _ => Err(format!("{text:?}: expected never, auto or always")),
        }
    }
}

/// The data pointer (DPTR's two quadwords, in the command's `prp1` and
/// `prp2`) of one Data Block descriptor for `len` bytes at `iova`. The
/// address must be dword aligned, as for PRPs (a controller that reports
/// SGLS bits 1:0 = 10b requires it, and wants the length in dwords too,
/// which the queue pair sees to).
pub fn data_block(iova: u64, len: usize) -> Result<(u64, u64), PrpError> {
    if iova & 0b11 != 0 {
        return Err(PrpError::Misaligned { iova });
    }
    if len > MAX_TRANSFER_BYTES {
        return Err(PrpError::TooLarge { len, max: MAX_TRANSFER_BYTES });
    }
    Ok((iova, len as u64 | u64::from(DATA_BLOCK) << 56))
}

/// A descriptor's fields from its two quadwords: address, length and the
/// type byte. For the simulated controller and tests.
pub fn decode(words: (u64, u64)) -> (u64, u32, u8) {
    (words.0, words.1 as u32, (words.1 >> 56) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_descriptor_describes_a_contiguous_buffer_of_any_length() {
        assert_eq!(data_block(0x10000, 512), Ok((0x10000, 512)));
        assert_eq!(decode(data_block(0x10800, 4 << 20).unwrap()), (0x10800, 4 << 20, DATA_BLOCK));
        assert_eq!(decode(data_block(0x1_0000_0000, MAX_TRANSFER_BYTES).unwrap()).1 as usize, MAX_TRANSFER_BYTES);
    }

    #[test]
    fn limits() {
        assert_eq!(data_block(0x10002, 512), Err(PrpError::Misaligned { iova: 0x10002 }));
        assert_eq!(data_block(0x10000, 510), Ok((0x10000, 510)), "any length");
        let len = MAX_TRANSFER_BYTES + PAGE_SIZE;
        assert_eq!(data_block(0x10000, len), Err(PrpError::TooLarge { len, max: MAX_TRANSFER_BYTES }));
    }

    #[test]
    fn modes_choose_by_support_and_length() {
        assert_eq!(SglMode::Auto.threshold(false), None, "no SGL support: PRPs");
        assert_eq!(SglMode::Always.threshold(false), None);
        assert_eq!(SglMode::Never.threshold(true), None);
        assert_eq!(SglMode::Auto.threshold(true), Some(8192), "SGLs where a PRP list would be needed");
        assert_eq!(SglMode::Always.threshold(true), Some(0));
        assert_eq!(SglMode::max_transfer_bytes(None), prp::MAX_TRANSFER_BYTES);
        assert_eq!(SglMode::max_transfer_bytes(Some(8192)), MAX_TRANSFER_BYTES);
        assert_eq!("auto".parse(), Ok(SglMode::Auto));
        assert!("sometimes".parse::<SglMode>().is_err());
    }
}

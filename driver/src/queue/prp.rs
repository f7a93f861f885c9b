//! Physical Region Page entries (NVMe Base 2.0 §4.1.1): how a transfer's
//! memory is described to the controller with PRP1, PRP2 and, past two
//! pages, a PRP list.
//!
//! Memory pages are 4 KiB (CC.MPS = 0). Each queue slot owns one list page,
//! so a transfer spans at most [`MAX_LIST_ENTRIES`] pages after its first;
//! the namespace layer caps transfers below that.

use crate::dma::PAGE_SIZE;

/// Entries in one 4 KiB PRP list page.
pub const MAX_LIST_ENTRIES: usize = PAGE_SIZE / 8;

/// The largest transfer one list page can describe when the buffer starts
/// on a page boundary.
pub const MAX_TRANSFER_BYTES: usize = (MAX_LIST_ENTRIES + 1) * PAGE_SIZE;

/// Why a buffer cannot be described.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrpError {
    /// PRP entries must be dword aligned (the low two bits are reserved).
    Misaligned {
        /// The I/O virtual address of the buffer.
        iova: u64,
    },
    /// More than the data pointer describes: more pages than one PRP
    /// list page holds, or more than one SGL descriptor's 32-bit length.
    TooLarge {
        /// The buffer's length, in bytes.
        len: usize,
        /// The most the data pointer describes, in bytes.
        max: usize,
    },
}

/// PRP1 and PRP2 for `len` bytes at `iova`. When a list is needed,
/// `write_entry(index, address)` fills the slot's list page at `list_iova`.
pub fn build(
    iova: u64,
    len: usize,
    list_iova: u64,
    mut write_entry: impl FnMut(usize, u64),
) -> Result<(u64, u64), PrpError> {
    if iova & 0b11 != 0 {
        return Err(PrpError::Misaligned { iova });
    }
    let page = PAGE_SIZE as u64;
    let first_page_bytes = (page - iova % page) as usize;
    if len <= first_page_bytes {
        return Ok((iova, 0));
    }
    let next_page = iova + first_page_bytes as u64;
    let pages = (len - first_page_bytes).div_ceil(PAGE_SIZE);
    if pages == 1 {
        return Ok((iova, next_page));
    }
    if pages > MAX_LIST_ENTRIES {
        return Err(PrpError::TooLarge { len, max: MAX_TRANSFER_BYTES });
    }
    for index in 0..pages {
        write_entry(index, next_page + (index as u64) * page);
    }
    Ok((iova, list_iova))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prps(iova: u64, len: usize) -> Result<(u64, u64, Vec<u64>), PrpError> {
        let mut list = Vec::new();
        let (prp1, prp2) = build(iova, len, 0xF000_0000, |index, address| {
            assert_eq!(index, list.len());
            list.push(address);
        })?;
        Ok((prp1, prp2, list))
    }

    #[test]
    fn one_page_needs_only_prp1() {
        assert_eq!(prps(0x10000, 512).unwrap(), (0x10000, 0, vec![]));
        assert_eq!(prps(0x10000, 4096).unwrap(), (0x10000, 0, vec![]));
        assert_eq!(prps(0x10200, 3584).unwrap(), (0x10200, 0, vec![]), "ends exactly at the page end");
    }

    #[test]
    fn two_pages_use_prp2_as_an_address() {
        assert_eq!(prps(0x10000, 8192).unwrap(), (0x10000, 0x11000, vec![]));
        assert_eq!(prps(0x10200, 4096).unwrap(), (0x10200, 0x11000, vec![]), "unaligned start spills into page 2");
    }

    #[test]
    fn more_pages_use_a_list() {
        let (prp1, prp2, list) = prps(0x10000, 3 * 4096).unwrap();
        assert_eq!((prp1, prp2), (0x10000, 0xF000_0000));
        assert_eq!(list, vec![0x11000, 0x12000]);
        let (_, _, list) = prps(0x10800, 128 * 1024).unwrap();
        assert_eq!(list.len(), 32, "an unaligned 128 KiB buffer touches 33 pages");
        assert_eq!(list[0], 0x11000);
        assert_eq!(*list.last().unwrap(), 0x11000 + 31 * 4096);
    }

    #[test]
    fn limits() {
        assert_eq!(prps(0x10000, MAX_TRANSFER_BYTES).unwrap().2.len(), MAX_LIST_ENTRIES);
        assert_eq!(
            prps(0x10000, MAX_TRANSFER_BYTES + 1),
            Err(PrpError::TooLarge { len: MAX_TRANSFER_BYTES + 1, max: MAX_TRANSFER_BYTES })
        );
        assert_eq!(prps(0x10002, 512), Err(PrpError::Misaligned { iova: 0x10002 }));
    }
}

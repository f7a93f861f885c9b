//! Every raw VFIO system call the driver makes beyond `vfio-ioctls`, each
//! with its SAFETY argument, plus the pure decoding of what they return.

use std::io;
use std::os::unix::io::RawFd;
use vfio_bindings::bindings::vfio::{
    vfio_info_cap_header, vfio_iommu_type1_dma_map, vfio_iommu_type1_info, VFIO_BASE, VFIO_DMA_MAP_FLAG_READ,
    VFIO_IOMMU_INFO_CAPS, VFIO_IOMMU_INFO_PGSIZES, VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE,
    VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL, VFIO_TYPE,
};

/// `VFIO_IOMMU_GET_INFO` is `_IO(VFIO_TYPE, VFIO_BASE + 12)` (linux/vfio.h);
/// `vfio-ioctls` has no wrapper for it.
const VFIO_IOMMU_GET_INFO: libc::c_ulong = ((VFIO_TYPE as libc::c_ulong) << 8) | (VFIO_BASE as libc::c_ulong + 12);

/// `VFIO_DEVICE_RESET` is `_IO(VFIO_TYPE, VFIO_BASE + 11)` (linux/vfio.h);
/// `vfio-ioctls`' wrapper discards its result.
const VFIO_DEVICE_RESET: libc::c_ulong = ((VFIO_TYPE as libc::c_ulong) << 8) | (VFIO_BASE as libc::c_ulong + 11);

/// `VFIO_IOMMU_MAP_DMA` is `_IO(VFIO_TYPE, VFIO_BASE + 13)` (linux/vfio.h);
/// `vfio-ioctls`' wrapper always grants the device read and write.
const VFIO_IOMMU_MAP_DMA: libc::c_ulong = ((VFIO_TYPE as libc::c_ulong) << 8) | (VFIO_BASE as libc::c_ulong + 13);

/// Maps `[vaddr, vaddr + len)` at `iova` for the container's devices to
/// read only (`VFIO_DMA_MAP_FLAG_READ` without `_WRITE`): the IOMMU faults
/// any transfer into it.
///
/// # Safety
/// The memory must stay allocated until it is unmapped.
pub unsafe fn iommu_map_dma_device_reads(container: RawFd, iova: u64, len: usize, vaddr: *mut u8) -> io::Result<()> {
    let map = vfio_iommu_type1_dma_map {
        argsz: std::mem::size_of::<vfio_iommu_type1_dma_map>() as u32,
        flags: VFIO_DMA_MAP_FLAG_READ,
        vaddr: vaddr as u64,
        iova,
        size: len as u64,
    };
    // SAFETY: the kernel only reads `map`, which lives across the call; the
    // caller keeps the mapped memory allocated; the fd is a VFIO container
    // (an invalid one is EBADF).
    let rc = unsafe { libc::ioctl(container, VFIO_IOMMU_MAP_DMA, &map as *const vfio_iommu_type1_dma_map) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Resets the device (vfio-pci tries FLR, then a slot or bus reset it may
/// do alone); fails when it has none it can do.
pub fn device_reset(device: RawFd) -> io::Result<()> {
    // SAFETY: VFIO_DEVICE_RESET takes no argument and touches no memory of
    // ours; `device` is an open VFIO device fd (an invalid one is EBADF).
    let rc = unsafe { libc::ioctl(device, VFIO_DEVICE_RESET) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// What the type1 IOMMU backend allows.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct IommuInfo {
    /// Bitmap of supported IOMMU page sizes.
    pub page_sizes: u64,
    /// Usable IOVA ranges, inclusive ends. Empty means "not reported".
    pub iova_ranges: Vec<(u64, u64)>,
    /// DMA mappings still available (the type1 default limit is 65,535).
    pub dma_mappings_available: Option<u32>,
}

/// Queries the container's IOMMU: page sizes, IOVA ranges, mapping limit.
pub fn iommu_get_info(container: RawFd) -> io::Result<IommuInfo> {
    let header_len = std::mem::size_of::<vfio_iommu_type1_info>();
    let mut buffer = vec![0u64; header_len.div_ceil(8)];
    let mut argsz = header_len;
    // Twice at most: the first call reports how much room the capability
    // chain needs.
    for _ in 0..2 {
        buffer.resize(argsz.div_ceil(8), 0);
        buffer.fill(0);
        let bytes = buffer.as_mut_ptr().cast::<u8>();
        // argsz is the first u32 of the structure.
        let argsz_u32 = u32::try_from(argsz).map_err(|_| io::Error::other("IOMMU info too large"))?;
        // SAFETY: the buffer holds at least 4 bytes and is 8-byte aligned.
        unsafe { bytes.cast::<u32>().write(argsz_u32) };
        // SAFETY: the kernel writes at most `argsz` bytes into `buffer`,
        // which is at least that long; the fd is a VFIO container.
        let rc = unsafe { libc::ioctl(container, VFIO_IOMMU_GET_INFO, bytes) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `buffer` is initialized u64s; reading them as bytes is valid.
        let raw = unsafe { std::slice::from_raw_parts(bytes, buffer.len() * 8) };
        let wanted = u32::from_ne_bytes(raw[0..4].try_into().expect("4 bytes")) as usize;
        if wanted <= argsz {
            return Ok(parse_iommu_info(&raw[..argsz]));
        }
        argsz = wanted;
    }
    Err(io::Error::other("IOMMU info kept growing"))
}

fn u32_at(raw: &[u8], offset: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(raw.get(offset..offset + 4)?.try_into().ok()?))
}

fn u64_at(raw: &[u8], offset: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(raw.get(offset..offset + 8)?.try_into().ok()?))
}

/// Decodes a `vfio_iommu_type1_info` and its capability chain. Total: a
/// malformed chain ends the walk, it never panics.
pub fn parse_iommu_info(raw: &[u8]) -> IommuInfo {
    let mut info = IommuInfo::default();
    let flags = u32_at(raw, 4).unwrap_or(0);
    if flags & VFIO_IOMMU_INFO_PGSIZES != 0 {
        info.page_sizes = u64_at(raw, 8).unwrap_or(0);
    }
    if flags & VFIO_IOMMU_INFO_CAPS == 0 {
        return info;
    }
    let header_len = std::mem::size_of::<vfio_info_cap_header>();
    let mut offset = u32_at(raw, 16).unwrap_or(0) as usize;
    // Each capability lies after the fixed part; the chain ends at 0. The
    // step bound stops a looping chain.
    for _ in 0..64 {
        if offset < std::mem::size_of::<vfio_iommu_type1_info>() || offset + header_len > raw.len() {
            break;
        }
        let id = u32::from(u16::from_ne_bytes([raw[offset], raw[offset + 1]]));
        let next = u32_at(raw, offset + 4).unwrap_or(0) as usize;
        match id {
            VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE => {
                let count = u32_at(raw, offset + 8).unwrap_or(0) as usize;
                for i in 0..count.min(1024) {
                    let at = offset + 16 + i * 16;
                    match (u64_at(raw, at), u64_at(raw, at + 8)) {
                        (Some(start), Some(end)) if start <= end => info.iova_ranges.push((start, end)),
                        _ => break,
                    }
                }
            }
            VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL => info.dma_mappings_available = u32_at(raw, offset + 8),
            _ => {}
        }
        if next == 0 || next <= offset {
            break;
        }
        offset = next;
    }
    info
}

/// Reads exactly `buf.len()` bytes at `offset` of a VFIO device region, so
/// that failures are seen (the crate's `region_read` only logs them).
pub fn pread_exact(fd: RawFd, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let offset = libc::off_t::try_from(offset).map_err(|_| io::Error::other("offset out of range"))?;
    // SAFETY: `buf` is valid for `buf.len()` bytes of writes.
    let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), offset) };
    match usize::try_from(n) {
        Ok(n) if n == buf.len() => Ok(()),
        Ok(n) => Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("short read: {n} of {}", buf.len()))),
        Err(_) => Err(io::Error::last_os_error()),
    }
}

/// Writes all of `buf` at `offset` of a VFIO device region.
pub fn pwrite_all(fd: RawFd, buf: &[u8], offset: u64) -> io::Result<()> {
    let offset = libc::off_t::try_from(offset).map_err(|_| io::Error::other("offset out of range"))?;
    // SAFETY: `buf` is valid for `buf.len()` bytes of reads.
    let n = unsafe { libc::pwrite(fd, buf.as_ptr().cast(), buf.len(), offset) };
    match usize::try_from(n) {
        Ok(n) if n == buf.len() => Ok(()),
        Ok(n) => Err(io::Error::new(io::ErrorKind::WriteZero, format!("short write: {n} of {}", buf.len()))),
        Err(_) => Err(io::Error::last_os_error()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put32(raw: &mut [u8], at: usize, v: u32) {
        raw[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    }
    fn put64(raw: &mut [u8], at: usize, v: u64) {
        raw[at..at + 8].copy_from_slice(&v.to_ne_bytes());
    }

    #[test]
    fn ioctl_number_matches_linux() {
        // _IO(';', 100 + 12)
        assert_eq!(VFIO_IOMMU_GET_INFO, 0x3b70);
    }

    #[test]
    fn decodes_iova_ranges_and_dma_avail() {
        let mut raw = vec![0u8; 24 + 16 + 32 + 12];
        let len = raw.len() as u32;
        put32(&mut raw, 0, len);
        put32(&mut raw, 4, VFIO_IOMMU_INFO_PGSIZES | VFIO_IOMMU_INFO_CAPS);
        put64(&mut raw, 8, 0x4020_1000);
        put32(&mut raw, 16, 24);
        // IOVA range capability at 24: header, nr_iovas=2, reserved, ranges.
        put32(&mut raw, 24, VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE);
        put32(&mut raw, 28, 24 + 16 + 32);
        put32(&mut raw, 32, 2);
        put64(&mut raw, 40, 0);
        put64(&mut raw, 48, 0xfedf_ffff);
        put64(&mut raw, 56, 0xfef0_0000);
        put64(&mut raw, 64, (1 << 48) - 1);
        // DMA avail capability.
        put32(&mut raw, 72, VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL);
        put32(&mut raw, 76, 0);
        put32(&mut raw, 80, 65535);
        let info = parse_iommu_info(&raw);
        assert_eq!(info.page_sizes, 0x4020_1000);
        assert_eq!(info.iova_ranges, vec![(0, 0xfedf_ffff), (0xfef0_0000, (1 << 48) - 1)]);
        assert_eq!(info.dma_mappings_available, Some(65535));
    }

    #[test]
    fn malformed_chains_do_not_panic() {
        let mut raw = vec![0u8; 64];
        put32(&mut raw, 4, VFIO_IOMMU_INFO_CAPS);
        put32(&mut raw, 16, 24);
        put32(&mut raw, 24, VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE);
        put32(&mut raw, 28, 24); // loops to itself
        put32(&mut raw, 32, 1_000_000); // claims far more ranges than fit
        let info = parse_iommu_info(&raw);
        assert!(info.iova_ranges.len() <= 2);
        assert_eq!(parse_iommu_info(&[]), IommuInfo::default());
        assert_eq!(parse_iommu_info(&[0xff; 7]), IommuInfo::default());
    }
}

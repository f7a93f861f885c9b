//! DMA memory: pinned regions mapped for the device, and a lock-free pool of
//! fixed-size buffers carved from one region.
//!
//! Device-visible memory is only touched through raw pointers with volatile
//! accesses ([`DmaMemory`]); no `&`/`&mut` ever points into it, because the
//! device may write it at any moment (see `vfio_ioctls::VfioContainer::vfio_dma_map`).
//! The one exception is memory the IOMMU lets the device read only
//! ([`DmaPool::new_device_reads`]): a [`FillBuffer`] of it is a plain byte
//! slice to its holder, so a write's payload is made in place, not copied.

use crate::error::{Error, Result};
use crate::spec::command::Command;
use crate::spec::completion::Completion;
use crate::transport::Transport;
use crossbeam_queue::ArrayQueue;
use std::ptr::NonNull;
use std::sync::Arc;

/// The memory page size the driver assumes (CC.MPS = 0, 4 KiB; NVMe Base
/// 2.0 §3.1.3.5): PRP entries and queue memory are aligned to it.
pub const PAGE_SIZE: usize = 4096;
/// A 2 MiB huge page. Regions of at least this size are backed by huge
/// pages when the system has free ones, so the IOMMU maps fewer, larger
/// pages.
pub const HUGE_PAGE_SIZE: usize = 2 << 20;

/// Advises the kernel to back `buf`'s whole, aligned 2 MiB pages with
/// transparent huge pages when first touched (THP mode `madvise` or
/// `always`): one fault and one page-table entry per 2 MiB of fresh
/// memory instead of 512. Buffers with no whole huge page inside are left
/// alone; a kernel without THP ignores the advice.
pub fn advise_huge_pages(buf: &[u8]) {
    let start = buf.as_ptr().align_offset(HUGE_PAGE_SIZE);
    if start >= buf.len() || buf.len() - start < HUGE_PAGE_SIZE {
        return;
    }
    let len = (buf.len() - start) / HUGE_PAGE_SIZE * HUGE_PAGE_SIZE;
    // SAFETY: madvise only advises the kernel about pages of this live
    // allocation, within its bounds; it neither reads nor writes memory,
    // and a failure (no THP support) is harmless.
    unsafe { libc::madvise(buf[start..].as_ptr().cast_mut().cast(), len, libc::MADV_HUGEPAGE) };
}

/// Plain data that any bit pattern makes valid, so it can be read from
/// device-written memory.
pub trait Pod: Copy + sealed::Sealed {}
mod sealed {
    pub trait Sealed {}
}
macro_rules! pod {
    ($($t:ty),*) => { $(impl sealed::Sealed for $t {} impl Pod for $t {})* };
}
pod!(u8, u16, u32, u64, Command, Completion);

/// Access to device-visible memory through volatile operations only.
pub trait DmaMemory {
    /// Start, length and I/O virtual address.
    fn raw_parts(&self) -> (NonNull<u8>, usize, u64);

    /// The I/O virtual address of the start: what the device is given in
    /// PRP entries and queue base addresses.
    fn iova(&self) -> u64 {
        self.raw_parts().2
    }

    /// Length, in bytes.
    fn len(&self) -> usize {
        self.raw_parts().1
    }

    /// Whether the length is zero.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A raw pointer to `offset`, bounds- and alignment-checked for a `T`.
    #[inline(always)]
    fn pointer<T: Pod>(&self, offset: usize) -> *mut T {
        let (base, len, _) = self.raw_parts();
        let size = std::mem::size_of::<T>();
        assert!(offset.checked_add(size).is_some_and(|end| end <= len), "DMA access {offset}+{size} outside {len}");
        // SAFETY: offset + size <= len, inside the allocation.
        let pointer = unsafe { base.as_ptr().add(offset) }.cast::<T>();
        assert!(pointer.is_aligned(), "unaligned DMA access at {offset}");
        pointer
    }

    /// A volatile read of a `T` at `offset`.
    #[inline]
    fn read<T: Pod>(&self, offset: usize) -> T {
        // SAFETY: `pointer` checks bounds and alignment; `T: Pod` is valid
        // for any bits; volatile, so no reference is formed.
        unsafe { self.pointer::<T>(offset).read_volatile() }
    }

    /// A volatile write of a `T` at `offset`.
    #[inline]
    fn write<T: Pod>(&self, offset: usize, value: T) {
        // SAFETY: as in `read`.
        unsafe { self.pointer::<T>(offset).write_volatile(value) }
    }

    /// Copies `out.len()` bytes out of device memory from `offset`.
    ///
    /// One bounds check, then a raw-pointer copy: no reference into the
    /// DMA memory is formed. Call it only while no command that writes this
    /// range is in flight (a completed read is ordered before by the
    /// queue pair's Acquire fence on the completion's phase tag).
    fn copy_out(&self, offset: usize, out: &mut [u8]) {
        let (base, len, _) = self.raw_parts();
        assert!(
            offset.checked_add(out.len()).is_some_and(|end| end <= len),
            "DMA copy {offset}+{} outside {len}",
            out.len()
        );
        let source = base.as_ptr().wrapping_add(offset);
        // SAFETY: the range was checked to lie inside the mapping; `out` is
        // host memory that cannot overlap it; bytes are valid for any bits.
        unsafe { std::ptr::copy_nonoverlapping(source, out.as_mut_ptr(), out.len()) }
    }

    /// Copies `data` into device memory at `offset`: one bounds check,
    /// then a raw-pointer copy. Call it only while no command that reads
    /// or writes this range is in flight (submission publishes the bytes
    /// with the queue pair's Release fence before the doorbell).
    fn copy_in(&self, offset: usize, data: &[u8]) {
        let (base, len, _) = self.raw_parts();
        assert!(
            offset.checked_add(data.len()).is_some_and(|end| end <= len),
            "DMA copy {offset}+{} outside {len}",
            data.len()
        );
        let destination = base.as_ptr().wrapping_add(offset);
        // SAFETY: as in `copy_out`, with the roles swapped.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), destination, data.len()) }
    }

    /// Fills `[offset, offset + len)` with `byte`.
    fn fill(&self, offset: usize, len: usize, byte: u8) {
        let (base, region_len, _) = self.raw_parts();
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= region_len),
            "DMA fill {offset}+{len} outside {region_len}"
        );
        let destination = base.as_ptr().wrapping_add(offset);
        // SAFETY: the range lies inside the mapping (checked above); same
        // rule as `copy_in` about commands in flight.
        unsafe { std::ptr::write_bytes(destination, byte, len) }
    }
}

/// Pinned, device-mapped memory: one IOMMU mapping. Backed by 2 MiB
/// hugepages when at least 2 MiB is asked for (or any size, by
/// [`DmaRegion::allocate_preferring_huge_pages`]) and hugepages are
/// free, else by 4 KiB pages. Keeps its transport (and so the VFIO
/// device and container) alive while mapped.
#[derive(Debug)]
pub struct DmaRegion {
    pointer: NonNull<u8>,
    len: usize,
    iova: u64,
    hugepages: bool,
    transport: Arc<dyn Transport>,
    /// `transport.dma_domain()`, kept for the check at every submission.
    domain: usize,
    /// Whether the device may write it ([`Transport::map_dma`]) or only
    /// read it ([`Transport::map_dma_device_reads`]).
    device_writes: bool,
}

// SAFETY: the region is plain memory reachable only through volatile
// accesses via `DmaMemory`; moving it between threads is sound.
unsafe impl Send for DmaRegion {}
// SAFETY: shared access is volatile raw-pointer access only.
unsafe impl Sync for DmaRegion {}

impl DmaRegion {
    /// Allocates and maps at least `len` bytes, zeroed.
    pub fn allocate(transport: &Arc<dyn Transport>, len: usize) -> Result<Self> {
        Self::allocate_as(transport, len, true, len >= HUGE_PAGE_SIZE)
    }

    /// [`DmaRegion::allocate`] on 2 MiB huge pages whenever one is free,
    /// however small `len` is, else on 4 KiB pages: for a queue pair's
    /// rings and PRP lists, which the device reads and writes on every
    /// command. SPDK keeps its rings in huge page memory too; under QEMU's
    /// emulated IOMMU, rings on 4 KiB pages cost about 6% of the 4 KiB
    /// random read IOPS at QD32 (docs/benchmarks/driver.md, "Rings on a huge page").
    pub fn allocate_preferring_huge_pages(transport: &Arc<dyn Transport>, len: usize) -> Result<Self> {
        Self::allocate_as(transport, len, true, true)
    }

    /// [`DmaRegion::allocate`] for the device to read only: a payload for
    /// write commands, which the host may fill through references
    /// ([`FillBuffer`]). Fails with [`Error::Unsupported`] on a transport
    /// that cannot enforce it.
    pub fn allocate_device_reads(transport: &Arc<dyn Transport>, len: usize) -> Result<Self> {
        Self::allocate_as(transport, len, false, len >= HUGE_PAGE_SIZE)
    }

    fn allocate_as(transport: &Arc<dyn Transport>, len: usize, device_writes: bool, try_huge: bool) -> Result<Self> {
        if len == 0 {
            return Err(Error::InvalidArgument("DMA region of 0 bytes".into()));
        }
        let huge_len = len.next_multiple_of(HUGE_PAGE_SIZE);
        let huge = if try_huge { map_anonymous(huge_len, true) } else { None };
        let (pointer, len, hugepages) = match huge {
            Some(pointer) => (pointer, huge_len, true),
            None => {
                let rounded = len.next_multiple_of(PAGE_SIZE);
                let pointer = map_anonymous(rounded, false).ok_or_else(|| {
                    Error::Dma(format!("mmap of {rounded} bytes failed: {}", std::io::Error::last_os_error()))
                })?;
                (pointer, rounded, false)
            }
        };
        let mapped = match device_writes {
            // SAFETY: the memory was just mapped by us, is not referenced by
            // any Rust reference, and is unmapped only in Drop after
            // unmap_dma.
            true => unsafe { transport.map_dma(pointer, len) },
            // SAFETY: as above (references are formed only by a FillBuffer,
            // once the device cannot write the memory).
            false => unsafe { transport.map_dma_device_reads(pointer, len) },
        };
        match mapped {
            Ok(iova) => Ok(DmaRegion {
                pointer,
                len,
                iova,
                hugepages,
                domain: transport.dma_domain(),
                transport: Arc::clone(transport),
                device_writes,
            }),
            Err(error) => {
                unmap_anonymous(pointer, len);
                Err(error)
            }
        }
    }

    /// Whether the region is backed by 2 MiB huge pages (small regions, or
    /// any when no huge page is free, use 4 KiB pages).
    pub fn is_hugepage_backed(&self) -> bool {
        self.hugepages
    }
}

impl DmaMemory for DmaRegion {
    #[inline]
    fn raw_parts(&self) -> (NonNull<u8>, usize, u64) {
        (self.pointer, self.len, self.iova)
    }
}

impl Drop for DmaRegion {
    fn drop(&mut self) {
        // The device must lose access before the memory is reused. If the
        // unmap fails the memory is leaked rather than freed under DMA.
        if self.transport.unmap_dma(self.iova, self.len).is_ok() {
            unmap_anonymous(self.pointer, self.len);
        }
    }
}

fn map_anonymous(len: usize, hugepages: bool) -> Option<NonNull<u8>> {
    let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
    if hugepages {
        flags |= libc::MAP_HUGETLB;
    }
    // SAFETY: an anonymous mapping at a kernel-chosen address touches no
    // existing memory.
    let pointer = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
    if pointer == libc::MAP_FAILED {
        None
    } else {
        NonNull::new(pointer.cast())
    }
}

fn unmap_anonymous(pointer: NonNull<u8>, len: usize) {
    // SAFETY: `pointer`/`len` describe a mapping made by `map_anonymous`
    // that nothing uses any more.
    unsafe { libc::munmap(pointer.as_ptr().cast(), len) };
}

/// A lock-free pool of equal, page-aligned buffers carved from one region
/// (one IOMMU mapping, however many buffers).
#[derive(Debug, Clone)]
pub struct DmaPool {
    inner: Arc<PoolInner>,
}

#[derive(Debug)]
struct PoolInner {
    region: DmaRegion,
    buffer_len: usize,
    free: ArrayQueue<u32>,
}

impl DmaPool {
    /// `count` buffers of `buffer_len` bytes (rounded up to 4 KiB).
    pub fn new(transport: &Arc<dyn Transport>, buffer_len: usize, count: u32) -> Result<Self> {
        Self::new_as(transport, buffer_len, count, true)
    }

    /// [`DmaPool::new`] in memory the device may only read
    /// ([`DmaRegion::allocate_device_reads`]): buffers for write payloads,
    /// filled in place as [`FillBuffer`]s.
    pub fn new_device_reads(transport: &Arc<dyn Transport>, buffer_len: usize, count: u32) -> Result<Self> {
        Self::new_as(transport, buffer_len, count, false)
    }

    fn new_as(transport: &Arc<dyn Transport>, buffer_len: usize, count: u32, device_writes: bool) -> Result<Self> {
        if buffer_len == 0 || count == 0 {
            return Err(Error::InvalidArgument("DMA pool needs a non-zero buffer size and count".into()));
        }
        let buffer_len = buffer_len.next_multiple_of(PAGE_SIZE);
        let total = buffer_len
            .checked_mul(count as usize)
            .ok_or_else(|| Error::InvalidArgument("DMA pool size overflows".into()))?;
        let region = DmaRegion::allocate_as(transport, total, device_writes, total >= HUGE_PAGE_SIZE)?;
        let free = ArrayQueue::new(count as usize);
        for index in 0..count {
            free.push(index).expect("queue sized for every index");
        }
        Ok(DmaPool { inner: Arc::new(PoolInner { region, buffer_len, free }) })
    }

    /// A free buffer, or `None` when all are in use. Never blocks.
    pub fn get(&self) -> Option<DmaBuffer> {
        let index = self.inner.free.pop()?;
        Some(DmaBuffer { pool: Arc::clone(&self.inner), index })
    }

    /// A free buffer to fill in place, or `None` when all are in use or
    /// the device may write this pool's memory (only a
    /// [`DmaPool::new_device_reads`] pool lends them). Never blocks.
    pub fn get_fill(&self) -> Option<FillBuffer> {
        self.get().and_then(|buffer| FillBuffer::new(buffer).ok())
    }

    /// Bytes in each buffer.
    pub fn buffer_len(&self) -> usize {
        self.inner.buffer_len
    }

    /// Buffers in the pool, free or not.
    pub fn capacity(&self) -> usize {
        self.inner.free.capacity()
    }

    /// Buffers free right now (a snapshot: other threads may take or return
    /// buffers meanwhile).
    pub fn available(&self) -> usize {
        self.inner.free.len()
    }

    /// Whether the pool's region is backed by 2 MiB huge pages.
    pub fn is_hugepage_backed(&self) -> bool {
        self.inner.region.is_hugepage_backed()
    }

    /// Whether the device may write its buffers (false for a
    /// [`DmaPool::new_device_reads`] pool).
    pub fn device_writes(&self) -> bool {
        self.inner.region.device_writes
    }

    /// The I/O address space its buffers are mapped in
    /// ([`Transport::dma_domain`]).
    pub fn dma_domain(&self) -> usize {
        self.inner.region.domain
    }
}

/// One buffer of a [`DmaPool`]; returns itself to the pool on drop.
#[derive(Debug)]
pub struct DmaBuffer {
    pool: Arc<PoolInner>,
    index: u32,
}

impl DmaMemory for DmaBuffer {
    fn raw_parts(&self) -> (NonNull<u8>, usize, u64) {
        let (base, _, iova) = self.pool.region.raw_parts();
        let offset = self.index as usize * self.pool.buffer_len;
        // SAFETY: index < count, so the buffer lies inside the region.
        let start = unsafe { base.as_ptr().add(offset) };
        let pointer = NonNull::new(start).expect("inside a non-null region");
        (pointer, self.pool.buffer_len, iova + offset as u64)
    }
}

impl DmaBuffer {
    /// The I/O address space the buffer is mapped in: a device whose
    /// transport answers the same [`Transport::dma_domain`] can transfer
    /// to and from it.
    pub fn dma_domain(&self) -> usize {
        self.pool.region.domain
    }

    /// Whether the device may write the buffer: false for one of a
    /// [`DmaPool::new_device_reads`] pool, which commands that transfer
    /// data to the host refuse ([`crate::queue::SubmitError::DeviceReadOnly`]).
    pub fn device_writes(&self) -> bool {
        self.pool.region.device_writes
    }
}

impl Drop for DmaBuffer {
    fn drop(&mut self) {
        // Cannot fail: the queue holds every index and this one is out.
        let _ = self.pool.free.push(self.index);
    }
}

/// A buffer of a pool the device may only read
/// ([`DmaPool::new_device_reads`]), held by the host: it reads and fills it
/// in place as a byte slice, then hands it to a write command
/// ([`FillBuffer::into_dma`]), with no copy. This is the one place the
/// driver forms references into DMA memory; see the SAFETY argument in
/// `Deref`.
#[derive(Debug)]
pub struct FillBuffer {
    buffer: DmaBuffer,
}

impl FillBuffer {
    /// `buffer` to fill in place, or back when the device may write it.
    pub fn new(buffer: DmaBuffer) -> std::result::Result<Self, DmaBuffer> {
        match buffer.device_writes() {
            true => Err(buffer),
            false => Ok(FillBuffer { buffer }),
        }
    }

    /// The buffer, for a write command (`IoBuffer::range(fill.into_dma(), 0, len)`).
    pub fn into_dma(self) -> DmaBuffer {
        self.buffer
    }

    /// The I/O address space it is mapped in ([`DmaBuffer::dma_domain`]).
    pub fn dma_domain(&self) -> usize {
        self.buffer.dma_domain()
    }

    /// Its I/O virtual address.
    pub fn iova(&self) -> u64 {
        self.buffer.iova()
    }
}

impl std::ops::Deref for FillBuffer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        let (pointer, len, _) = self.buffer.raw_parts();
        // SAFETY: the memory is mapped for the device to read only (the
        // IOMMU faults any transfer into it: `map_dma_device_reads`), so
        // nothing but its holder can write it; `self` owns the buffer (its
        // index is out of the pool's free queue, and a buffer of a command
        // that may still be in flight is quarantined, never returned), so
        // no other host code reaches it either. It stays allocated and
        // mapped while the pool lives, which `self.buffer` keeps alive. Any
        // bytes are valid `u8`s.
        unsafe { std::slice::from_raw_parts(pointer.as_ptr(), len) }
    }
}

impl std::ops::DerefMut for FillBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        let (pointer, len, _) = self.buffer.raw_parts();
        // SAFETY: as in `deref`; `&mut self` makes the slice unique.
        unsafe { std::slice::from_raw_parts_mut(pointer.as_ptr(), len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::PciId;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A transport with no device: IOVA = virtual address, counting maps.
    #[derive(Debug, Default)]
    struct HostMemory {
        mapped: AtomicUsize,
    }

    impl Transport for HostMemory {
        fn read32(&self, _offset: usize) -> u32 {
            0
        }
        fn write32(&self, _offset: usize, _value: u32) {}
        unsafe fn map_dma(&self, vaddr: NonNull<u8>, _len: usize) -> Result<u64> {
            self.mapped.fetch_add(1, Ordering::Relaxed);
            Ok(vaddr.as_ptr() as u64)
        }
        fn unmap_dma(&self, _iova: u64, _len: usize) -> Result<()> {
            self.mapped.fetch_sub(1, Ordering::Relaxed);
            Ok(())
        }
        fn name(&self) -> &str {
            "host"
        }
        fn pci_id(&self) -> PciId {
            PciId { vendor: 0, device: 0, subsystem_vendor: 0, subsystem_device: 0, class: 0 }
        }
    }

    fn host() -> (Arc<HostMemory>, Arc<dyn Transport>) {
        let memory = Arc::new(HostMemory::default());
        let transport: Arc<dyn Transport> = memory.clone();
        (memory, transport)
    }

    #[test]
    fn regions_round_up_zero_and_unmap_on_drop() {
        let (memory, transport) = host();
        let region = DmaRegion::allocate(&transport, 100).unwrap();
        assert_eq!(region.len(), PAGE_SIZE);
        assert!(!region.is_hugepage_backed());
        assert_eq!(region.read::<u64>(8), 0);
        region.write::<u32>(12, 0xdead_beef);
        assert_eq!(region.read::<u32>(12), 0xdead_beef);
        let mut out = [0u8; 4];
        region.copy_out(12, &mut out);
        assert_eq!(out, 0xdead_beefu32.to_ne_bytes());
        assert_eq!(memory.mapped.load(Ordering::Relaxed), 1);
        drop(region);
        assert_eq!(memory.mapped.load(Ordering::Relaxed), 0);
        assert!(DmaRegion::allocate(&transport, 0).is_err());
    }

    #[test]
    fn large_regions_use_hugepages_or_fall_back() {
        let (_, transport) = host();
        let region = DmaRegion::allocate(&transport, HUGE_PAGE_SIZE + 1).unwrap();
        // Whether hugepages are reserved on this host decides the backing;
        // either way the whole request is usable.
        assert!(region.len() > HUGE_PAGE_SIZE);
        region.write::<u8>(HUGE_PAGE_SIZE, 7);
        assert_eq!(region.read::<u8>(HUGE_PAGE_SIZE), 7);
    }

    #[test]
    fn memory_the_device_only_reads_needs_a_transport_that_enforces_it() {
        // The test transport has no IOMMU to enforce it: refused, nothing
        // left mapped.
        let (memory, transport) = host();
        match DmaPool::new_device_reads(&transport, PAGE_SIZE, 2) {
            Err(Error::Unsupported(_)) => {}
            other => panic!("expected Unsupported, got {other:?}"),
        }
        assert_eq!(memory.mapped.load(Ordering::Relaxed), 0);
        let pool = DmaPool::new(&transport, PAGE_SIZE, 1).unwrap();
        assert!(pool.device_writes());
        assert!(pool.get_fill().is_none(), "no fill buffer where the device may write");
        assert_eq!(pool.available(), 1, "the buffer went back");
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn out_of_bounds_access_panics_instead_of_corrupting() {
        let (_, transport) = host();
        let region = DmaRegion::allocate(&transport, PAGE_SIZE).unwrap();
        region.read::<u64>(PAGE_SIZE - 4);
    }

    #[test]
    fn pool_hands_out_distinct_buffers_and_takes_them_back() {
        let (memory, transport) = host();
        let pool = DmaPool::new(&transport, 5000, 3).unwrap();
        assert_eq!(pool.buffer_len(), 2 * PAGE_SIZE);
        let buffers: Vec<DmaBuffer> = (0..3).map(|_| pool.get().unwrap()).collect();
        assert!(pool.get().is_none(), "exhausted pool returns None, never blocks");
        let mut iovas: Vec<u64> = buffers.iter().map(|b| b.iova()).collect();
        iovas.sort_unstable();
        iovas.dedup();
        assert_eq!(iovas.len(), 3);
        assert!(iovas.windows(2).all(|w| w[1] - w[0] >= 2 * PAGE_SIZE as u64));
        buffers[1].fill(0, 2 * PAGE_SIZE, 0xab);
        assert_eq!(buffers[0].read::<u8>(2 * PAGE_SIZE - 1), 0, "buffers do not overlap");
        drop(buffers);
        assert_eq!(pool.available(), 3);
        assert_eq!(memory.mapped.load(Ordering::Relaxed), 1, "one IOMMU mapping for the whole pool");
    }
}

//! The simulated device's side of DMA: the IOVA table that
//! [`crate::Transport::map_dma`] fills, translation of PRPs (NVMe Base 2.0
//! §4.1.1) and SGLs (§4.1.2) into host memory, and the copies in and out
//! of it.
//!
//! This is the only module of the simulator that touches host memory, and
//! it does so only through raw pointers: `ptr::copy_nonoverlapping` and
//! `write_bytes` for data, volatile loads and stores for queue entries and
//! PRP lists. No Rust reference into mapped memory is ever formed, because
//! the driver accesses the same memory volatilely (see `dma::DmaMemory`).
//!
//! IOVAs are chosen here, by a bump allocator from [`IOVA_BASE`] with an
//! unmapped guard page after every mapping, and never equal the host
//! address: a driver that hands the device a host pointer instead of an
//! IOVA gets a Data Transfer Error rather than a lucky hit.

use crate::queue::sgl::{self, DATA_BLOCK, DESCRIPTOR_BYTES, LAST_SEGMENT, SEGMENT};
use crate::spec::status::{GenericStatus, Status};
use std::ptr::NonNull;
use std::sync::Arc;

/// The memory page size the simulator supports (CC.MPS = 0; CAP.MPSMIN =
/// CAP.MPSMAX = 0).
pub(crate) const PAGE_SIZE: usize = 4096;
const PAGE: u64 = PAGE_SIZE as u64;
/// First IOVA handed out: above 4 GiB, so a truncated address is caught too.
pub const IOVA_BASE: u64 = 0x1_0000_0000;
/// Most mappings at once.
const MAPPINGS_MAX: usize = 1 << 16;

/// One `map_dma` call.
#[derive(Clone, Debug)]
struct Mapping {
    id: u64,
    iova: u64,
    len: u64,
    host: NonNull<u8>,
    /// Whether the device may transfer into it (else it may only read it).
    device_writes: bool,
}

/// `len` bytes of host memory that a live mapping covers.
///
/// Invariant (what every `unsafe` block below relies on): a `HostRange` is
/// only made by [`DmaTable::translate`] from a mapping whose memory the
/// `map_dma` caller keeps allocated until `unmap_dma` returns; it is used
/// while the simulator's state lock is held, which `unmap_dma` takes too,
/// or by a deferred read's copy, for which `unmap_dma` waits
/// (`sim/deferred.rs`), or by a lane with its mutex held, which
/// `unmap_dma` takes too when it calls every lent queue back (`sim/lane.rs`);
/// and a `HostRange` kept across calls (a queue's ring) is dropped by the
/// simulator when its mapping is unmapped. So the memory is allocated for
/// every access made through it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HostRange {
    ptr: NonNull<u8>,
    len: usize,
    /// Whether its mapping lets the device write it: a transfer into a
    /// range without is an IOMMU fault.
    device_writes: bool,
}

impl HostRange {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the device may transfer into the range.
    pub(crate) fn device_writes(&self) -> bool {
        self.device_writes
    }

    /// A raw pointer to `offset`, with `offset + count` checked against the
    /// range.
    fn at(&self, offset: usize, count: usize) -> *mut u8 {
        assert!(offset.checked_add(count).is_some_and(|end| end <= self.len), "host access outside its range");
        self.ptr.as_ptr().wrapping_add(offset)
    }

    /// `len` bytes from `offset` of this range.
    pub(crate) fn sub(&self, offset: usize, len: usize) -> HostRange {
        let start = self.at(offset, len);
        HostRange { ptr: NonNull::new(start).expect("inside a non-null range"), len, ..*self }
    }

    /// Copies `source` into host memory at `offset` (device to host).
    pub(crate) fn put(&self, offset: usize, source: &[u8]) {
        let destination = self.at(offset, source.len());
        // SAFETY: `destination` is valid for `source.len()` bytes (bounds
        // checked above, memory allocated per the type's invariant).
        // `source` is simulator-owned memory, so the two cannot overlap. The
        // driver does not touch a data buffer between submission and
        // completion, so no access races this one.
        unsafe { std::ptr::copy_nonoverlapping(source.as_ptr(), destination, source.len()) };
    }

    /// Zeroes `count` bytes of host memory at `offset`.
    pub(crate) fn put_zeroes(&self, offset: usize, count: usize) {
        let destination = self.at(offset, count);
        // SAFETY: valid for `count` bytes, as in `put`.
        unsafe { destination.write_bytes(0, count) };
    }

    /// Copies host memory at `offset` into `destination` (host to device).
    pub(crate) fn take(&self, offset: usize, destination: &mut [u8]) {
        let source = self.at(offset, destination.len());
        // SAFETY: `source` is valid for `destination.len()` bytes, as in
        // `put`; `destination` is simulator-owned, so they do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(source, destination.as_mut_ptr(), destination.len()) };
    }

    /// A volatile read of `N` bytes at `offset` (queue entries, PRP list
    /// entries: memory the driver writes with volatile stores).
    pub(crate) fn read_volatile<const N: usize>(&self, offset: usize) -> [u8; N] {
        let source = self.at(offset, N).cast::<[u8; N]>();
        // SAFETY: valid for N bytes; a byte array needs no alignment.
        unsafe { source.read_volatile() }
    }

    /// A volatile little-endian store of a `u32` at `offset`.
    pub(crate) fn write_u32(&self, offset: usize, value: u32) {
        let destination = self.at(offset, 4).cast::<u32>();
        assert!(destination.is_aligned(), "unaligned u32 store");
        // SAFETY: valid for 4 bytes and aligned (checked above).
        unsafe { destination.write_volatile(value.to_le()) };
    }

    /// A volatile little-endian store of a `u16` at `offset`.
    pub(crate) fn write_u16(&self, offset: usize, value: u16) {
        let destination = self.at(offset, 2).cast::<u16>();
        assert!(destination.is_aligned(), "unaligned u16 store");
        // SAFETY: valid for 2 bytes and aligned (checked above).
        unsafe { destination.write_volatile(value.to_le()) };
    }

    /// Flips bit `bit` (0..8) of the byte at `offset`.
    pub(crate) fn flip_bit(&self, offset: usize, bit: u8) {
        let byte = self.at(offset, 1);
        // SAFETY: valid for 1 byte (checked above).
        let value = unsafe { byte.read_volatile() };
        // SAFETY: as above.
        unsafe { byte.write_volatile(value ^ (1 << (bit & 7))) };
    }
}

/// The IOVA space: every live mapping, in IOVA order (the bump allocator
/// hands out increasing addresses, so pushing keeps the order).
#[derive(Clone, Debug)]
struct Mappings {
    list: Vec<Mapping>,
    next_iova: u64,
    next_id: u64,
}

// SAFETY: the table only records host addresses and compares IOVAs; it
// never reads or writes through them. What may be reached through them is
// governed by the `HostRange` invariant, wherever the table is. It is
// changed only by its state, when no lane shares it (`Arc::make_mut` would
// copy rather than change shared mappings).
unsafe impl Send for Mappings {}
// SAFETY: as above; shared, it is only read.
unsafe impl Sync for Mappings {}

/// The IOVA table as one holder sees it: the mappings, shared with the
/// queues lent out to lanes (`sim/lane.rs`), and the holder's own hint of
/// where its last translation hit, so that two threads translating never
/// write one cache line. Only the controller's state maps and unmaps, after
/// every lane is called back, so the mappings are never copied on write.
#[derive(Debug)]
pub(crate) struct DmaTable {
    mappings: Arc<Mappings>,
    /// Index of the mapping the last translation hit.
    last: usize,
}

impl DmaTable {
    pub(crate) fn new() -> Self {
        let mappings = Mappings { list: Vec::with_capacity(64), next_iova: IOVA_BASE, next_id: 1 };
        DmaTable { mappings: Arc::new(mappings), last: 0 }
    }

    /// The same mappings, for a lane, with a hint of its own.
    pub(crate) fn share(&self) -> DmaTable {
        DmaTable { mappings: Arc::clone(&self.mappings), last: 0 }
    }

    /// Live mappings.
    pub(crate) fn len(&self) -> usize {
        self.mappings.list.len()
    }

    /// Records a mapping of `len` bytes at `host` and returns its IOVA.
    /// Like VFIO, it takes whole pages only. Without `device_writes` the
    /// device may only read it (VFIO_DMA_MAP_FLAG_READ alone).
    pub(crate) fn map(&mut self, host: NonNull<u8>, len: usize, device_writes: bool) -> Result<u64, String> {
        if len == 0 || !len.is_multiple_of(PAGE_SIZE) || !(host.as_ptr() as usize).is_multiple_of(PAGE_SIZE) {
            return Err(format!("DMA mapping of {len} bytes at {host:p}: not whole pages"));
        }
        let mappings = Arc::make_mut(&mut self.mappings);
        if mappings.list.len() >= MAPPINGS_MAX {
            return Err(format!("more than {MAPPINGS_MAX} DMA mappings"));
        }
        let len = len as u64;
        let iova = mappings.next_iova;
        // One unmapped guard page after each mapping catches overruns.
        mappings.next_iova = iova.checked_add(len + PAGE).ok_or("IOVA space exhausted")?;
        let id = mappings.next_id;
        mappings.next_id += 1;
        debug_assert!(mappings.list.last().is_none_or(|last| last.iova + last.len <= iova));
        mappings.list.push(Mapping { id, iova, len, host, device_writes });
        Ok(iova)
    }

    /// Removes the mapping made at `iova` for `len` bytes; returns its id.
    pub(crate) fn unmap(&mut self, iova: u64, len: usize) -> Result<u64, String> {
        let index = self
            .mappings
            .list
            .binary_search_by_key(&iova, |mapping| mapping.iova)
            .map_err(|_| format!("unmap of IOVA {iova:#x}: not mapped"))?;
        if self.mappings.list[index].len != len as u64 {
            return Err(format!("unmap of IOVA {iova:#x}: mapped {} bytes, not {len}", self.mappings.list[index].len));
        }
        self.last = 0;
        Ok(Arc::make_mut(&mut self.mappings).list.remove(index).id)
    }

    /// The host memory behind `[iova, iova + len)`, and its mapping's id, if
    /// one mapping covers all of it.
    pub(crate) fn translate(&mut self, iova: u64, len: usize) -> Option<(HostRange, u64)> {
        assert!(len > 0, "a translation of nothing");
        let end = iova.checked_add(len as u64)?;
        let covers = |mapping: &Mapping| iova >= mapping.iova && end <= mapping.iova + mapping.len;
        let list = &self.mappings.list;
        let index = match list.get(self.last) {
            Some(mapping) if covers(mapping) => self.last,
            _ => {
                let after = list.partition_point(|mapping| mapping.iova <= iova);
                let index = after.checked_sub(1)?;
                if !covers(&list[index]) {
                    return None;
                }
                self.last = index;
                index
            }
        };
        let mapping = &list[index];
        let offset = (iova - mapping.iova) as usize;
        let ptr = mapping.host.as_ptr().wrapping_add(offset);
        let device_writes = mapping.device_writes;
        Some((HostRange { ptr: NonNull::new(ptr).expect("inside a mapping"), len, device_writes }, mapping.id))
    }
}

/// Data Transfer Error: a PRP entry points outside every mapping.
fn data_transfer_error() -> Status {
    Status::from(GenericStatus::DataTransferError)
}

/// PRP Offset Invalid: an entry that must be page aligned is not (or one
/// that must be dword aligned is not).
fn prp_offset_invalid() -> Status {
    Status::from(GenericStatus::PrpOffsetInvalid).with_dnr()
}

/// Resolves the PRP1/PRP2 data pointer of a `len`-byte transfer into host
/// memory segments (appended to `out`, adjacent ones merged), following PRP
/// lists and chained list pages. Fails without side effects on the data: a
/// command whose data pointer does not resolve transfers nothing.
pub(crate) fn resolve_prps(
    table: &mut DmaTable,
    prp1: u64,
    prp2: u64,
    len: usize,
    out: &mut Vec<HostRange>,
) -> Result<(), Status> {
    out.clear();
    if len == 0 {
        return Ok(());
    }
    if prp1 & 0b11 != 0 {
        return Err(prp_offset_invalid());
    }
    let first = len.min(PAGE_SIZE - (prp1 % PAGE) as usize);
    push(out, table.translate(prp1, first).ok_or_else(data_transfer_error)?.0);
    let mut remaining = len - first;
    if remaining == 0 {
        return Ok(());
    }
    if remaining <= PAGE_SIZE {
        if !prp2.is_multiple_of(PAGE) {
            return Err(prp_offset_invalid());
        }
        push(out, table.translate(prp2, remaining).ok_or_else(data_transfer_error)?.0);
        return Ok(());
    }
    // PRP2 is a PRP list pointer (qword aligned, any offset in its page).
    if prp2 & 0b111 != 0 {
        return Err(prp_offset_invalid());
    }
    let mut list = prp2;
    // Each list page holds at least one data entry (or it is the last
    // one), so the pages bound the list pages walked.
    let pages_max = remaining.div_ceil(PAGE_SIZE);
    for _ in 0..pages_max {
        let entries = ((PAGE - list % PAGE) / 8) as usize;
        let (page, _) = table.translate(list, entries * 8).ok_or_else(data_transfer_error)?;
        for index in 0..entries {
            let entry = u64::from_le_bytes(page.read_volatile::<8>(index * 8));
            let last_slot = index + 1 == entries;
            if last_slot && remaining > PAGE_SIZE {
                // The last entry of a full list page chains to the next.
                if entry & 0b111 != 0 {
                    return Err(prp_offset_invalid());
                }
                list = entry;
                break;
            }
            if entry % PAGE != 0 {
                return Err(prp_offset_invalid());
            }
            let count = remaining.min(PAGE_SIZE);
            push(out, table.translate(entry, count).ok_or_else(data_transfer_error)?.0);
            remaining -= count;
            if remaining == 0 {
                return Ok(());
            }
        }
    }
    // Only reachable through a chain that never ends.
    Err(data_transfer_error())
}

/// The most SGL descriptors one command's list may hold: a bound on the
/// walk, so that a list that chains into itself ends.
const SGL_DESCRIPTORS_MAX: usize = 1 << 16;

/// An SGL error: `code`, do not retry.
fn sgl_error(code: GenericStatus) -> Status {
    Status::from(code).with_dnr()
}

/// The descriptor at byte `offset` of an SGL segment, as its two quadwords.
fn read_descriptor(list: &HostRange, offset: usize) -> (u64, u64) {
    let bytes: [u8; DESCRIPTOR_BYTES] = list.read_volatile(offset);
    let (low, high) = bytes.split_at(8);
    (u64::from_le_bytes(low.try_into().expect("8 bytes")), u64::from_le_bytes(high.try_into().expect("8 bytes")))
}

/// Resolves an SGL data pointer (SGL1, the command's two data pointer
/// quadwords `sgl1`) of a `len`-byte transfer into host memory segments,
/// as [`resolve_prps`] does for PRPs. Reads Data Block descriptors (a
/// zero-length one moves nothing) and Segment and Last Segment descriptors,
/// whose lists hold Data Blocks and, last in a Segment's list only, the
/// next Segment or Last Segment. The SGL must describe the transfer
/// exactly: more or less is Data SGL Length Invalid (SGLS bit 18 is clear,
/// as in QEMU 7.2's `nvme_map_sgl`; zero-length descriptors after the last
/// byte are allowed).
pub(crate) fn resolve_sgl(
    table: &mut DmaTable,
    sgl1: (u64, u64),
    len: usize,
    out: &mut Vec<HostRange>,
) -> Result<(), Status> {
    out.clear();
    if len == 0 {
        return Ok(());
    }
    let mut remaining = len;
    let mut descriptor = sgl1;
    // The descriptors of the segment being walked, and where in it.
    let mut segment: Option<(HostRange, usize, bool)> = None;
    for _ in 0..SGL_DESCRIPTORS_MAX {
        let (address, length, kind) = sgl::decode(descriptor);
        let length = length as usize;
        match kind {
            DATA_BLOCK => {
                if length > remaining {
                    return Err(sgl_error(GenericStatus::DataSglLengthInvalid));
                }
                if length > 0 {
                    push(out, table.translate(address, length).ok_or_else(data_transfer_error)?.0);
                }
                remaining -= length;
                if remaining == 0 {
                    return sgl_rest_is_empty(segment);
                }
            }
            SEGMENT | LAST_SEGMENT => {
                if length == 0 || !length.is_multiple_of(DESCRIPTOR_BYTES) {
                    return Err(sgl_error(GenericStatus::InvalidSglSegmentDescriptor));
                }
                let (list, _) = table.translate(address, length).ok_or_else(data_transfer_error)?;
                segment = Some((list, 0, kind == LAST_SEGMENT));
            }
            _ => return Err(sgl_error(GenericStatus::SglDescriptorTypeInvalid)),
        }
        // The next descriptor: the next in the current segment's list.
        let Some((list, at, last)) = segment.as_mut() else {
            // SGL1 was the only one and described too little.
            return Err(sgl_error(GenericStatus::DataSglLengthInvalid));
        };
        if *at == list.len() {
            return Err(sgl_error(GenericStatus::DataSglLengthInvalid));
        }
        let words = read_descriptor(list, *at);
        *at += DESCRIPTOR_BYTES;
        let kind = sgl::decode(words).2;
        let chains = kind == SEGMENT || kind == LAST_SEGMENT;
        if chains && (*last || *at != list.len()) {
            // Only a Segment's last descriptor may chain on.
            return Err(sgl_error(GenericStatus::InvalidSglSegmentDescriptor));
        }
        descriptor = words;
    }
    Err(sgl_error(GenericStatus::InvalidNumberOfSglDescriptors))
}

/// After an SGL's last byte: what is left of the segment being walked
/// holds only zero-length Data Blocks.
fn sgl_rest_is_empty(segment: Option<(HostRange, usize, bool)>) -> Result<(), Status> {
    let Some((list, at, _)) = segment else { return Ok(()) };
    for offset in (at..list.len()).step_by(DESCRIPTOR_BYTES) {
        let (_, length, kind) = sgl::decode(read_descriptor(&list, offset));
        if length != 0 || kind != DATA_BLOCK {
            return Err(sgl_error(GenericStatus::DataSglLengthInvalid));
        }
    }
    Ok(())
}

fn push(out: &mut Vec<HostRange>, range: HostRange) {
    if let Some(last) = out.last_mut() {
        if last.ptr.as_ptr().wrapping_add(last.len) == range.ptr.as_ptr() && last.device_writes == range.device_writes {
            last.len += range.len;
            return;
        }
    }
    out.push(range);
}

/// A cursor over the host segments of one transfer, consumed in order.
#[derive(Debug)]
pub(crate) struct Transfer<'a> {
    segments: &'a [HostRange],
    index: usize,
    offset: usize,
}

impl<'a> Transfer<'a> {
    pub(crate) fn new(segments: &'a [HostRange]) -> Self {
        Transfer { segments, index: 0, offset: 0 }
    }

    /// Calls `step(segment, offset, count)` for the next `len` bytes,
    /// segment by segment.
    fn advance(&mut self, len: usize, mut step: impl FnMut(&HostRange, usize, usize, usize)) {
        let mut done = 0;
        while done < len {
            let segment = self.segments.get(self.index).expect("a transfer longer than its segments");
            let count = (segment.len - self.offset).min(len - done);
            step(segment, self.offset, count, done);
            done += count;
            self.offset += count;
            if self.offset == segment.len {
                self.index += 1;
                self.offset = 0;
            }
        }
    }

    /// Copies `source` to the host (device to host).
    pub(crate) fn put(&mut self, source: &[u8]) {
        self.advance(source.len(), |segment, offset, count, done| segment.put(offset, &source[done..done + count]));
    }

    /// Zeroes the next `len` bytes of the host buffer.
    pub(crate) fn put_zeroes(&mut self, len: usize) {
        self.advance(len, |segment, offset, count, _| segment.put_zeroes(offset, count));
    }

    /// Copies the next `destination.len()` host bytes into `destination`.
    pub(crate) fn take(&mut self, destination: &mut [u8]) {
        self.advance(destination.len(), |segment, offset, count, done| {
            segment.take(offset, &mut destination[done..done + count])
        });
    }

    /// Flips bit `bit` of the byte at `position` from the transfer's start
    /// (the cursor does not move).
    pub(crate) fn flip_bit(&self, position: usize, bit: u8) {
        let mut at = position;
        for segment in self.segments {
            if at < segment.len {
                segment.flip_bit(at, bit);
                return;
            }
            at -= segment.len;
        }
        panic!("bit flip at {position}, past the transfer");
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::alloc::{alloc_zeroed, dealloc, Layout};

    /// Page-aligned, zeroed host memory, reached only through its raw
    /// pointer (as DMA memory must be).
    pub(crate) struct TestMemory {
        ptr: NonNull<u8>,
        layout: Layout,
    }

    impl TestMemory {
        pub(crate) fn new(pages: usize) -> Self {
            let layout = Layout::from_size_align(pages * PAGE_SIZE, PAGE_SIZE).unwrap();
            // SAFETY: the layout has a non-zero size.
            let ptr = NonNull::new(unsafe { alloc_zeroed(layout) }).expect("allocation");
            TestMemory { ptr, layout }
        }

        pub(crate) fn ptr(&self) -> NonNull<u8> {
            self.ptr
        }

        pub(crate) fn all(&self) -> HostRange {
            HostRange { ptr: self.ptr, len: self.layout.size(), device_writes: true }
        }

        pub(crate) fn byte(&self, offset: usize) -> u8 {
            self.all().read_volatile::<1>(offset)[0]
        }
    }

    impl Drop for TestMemory {
        fn drop(&mut self) {
            // SAFETY: allocated in `new` with this layout.
            unsafe { dealloc(self.ptr.as_ptr(), self.layout) };
        }
    }

    #[test]
    fn iovas_are_not_host_addresses_and_have_guard_pages() {
        let memory = TestMemory::new(4);
        let host = memory.ptr();
        let mut table = DmaTable::new();
        let first = table.map(host, 2 * PAGE_SIZE, true).unwrap();
        let second = table.map(host, PAGE_SIZE, true).unwrap();
        assert_eq!(first, IOVA_BASE);
        assert_ne!(first, host.as_ptr() as u64);
        assert_eq!(second, first + 3 * PAGE, "a guard page between mappings");
        assert!(table.translate(first, 2 * PAGE_SIZE).is_some());
        assert!(table.translate(first + 2 * PAGE, 1).is_none(), "the guard page is unmapped");
        assert!(table.translate(first + PAGE, PAGE_SIZE + 1).is_none(), "runs past the mapping");
        assert!(table.translate(host.as_ptr() as u64, 8).is_none(), "a host address is no IOVA");
        assert!(table.map(host, 100, true).is_err(), "whole pages only");
        assert!(table.unmap(first, PAGE_SIZE).is_err(), "length must match");
        table.unmap(first, 2 * PAGE_SIZE).unwrap();
        assert!(table.translate(first, 8).is_none());
        assert!(table.translate(second, 8).is_some());
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn prps_one_two_and_list_pages() {
        let memory = TestMemory::new(4);
        let mut table = DmaTable::new();
        let iova = table.map(memory.ptr(), 4 * PAGE_SIZE, true).unwrap();
        let mut out = Vec::new();
        resolve_prps(&mut table, iova + 512, 0, 1024, &mut out).unwrap();
        assert_eq!((out.len(), out[0].len()), (1, 1024));
        // Two pages through PRP2; adjacent host pages merge.
        resolve_prps(&mut table, iova, iova + PAGE, 2 * PAGE_SIZE, &mut out).unwrap();
        assert_eq!((out.len(), out[0].len()), (1, 2 * PAGE_SIZE));
        assert_eq!(resolve_prps(&mut table, iova, iova + 8, 2 * PAGE_SIZE, &mut out), Err(prp_offset_invalid()));
        assert_eq!(resolve_prps(&mut table, iova + 2, 0, 8, &mut out), Err(prp_offset_invalid()));
        assert_eq!(resolve_prps(&mut table, 0x1000, 0, 8, &mut out), Err(data_transfer_error()));
        // A list in page 3 naming pages 2 and 1: not adjacent in that order.
        let host = memory.all();
        host.put(3 * PAGE_SIZE, &(iova + 2 * PAGE).to_le_bytes());
        host.put(3 * PAGE_SIZE + 8, &(iova + PAGE).to_le_bytes());
        resolve_prps(&mut table, iova, iova + 3 * PAGE, 3 * PAGE_SIZE, &mut out).unwrap();
        assert_eq!(out.len(), 3);
        let total: usize = out.iter().map(HostRange::len).sum();
        assert_eq!(total, 3 * PAGE_SIZE);
    }

    #[test]
    fn prp_lists_chain_across_list_pages() {
        let memory = TestMemory::new(8);
        let mut table = DmaTable::new();
        let iova = table.map(memory.ptr(), 8 * PAGE_SIZE, true).unwrap();
        let host = memory.all();
        // Data: pages 0 (PRP1), 1, 2, 3. The list starts in the last two
        // slots of page 7: page 1, then a chain to a list at page 6 that
        // names pages 2 and 3.
        let start = 8 * PAGE_SIZE - 16;
        host.put(start, &(iova + PAGE).to_le_bytes());
        host.put(start + 8, &(iova + 6 * PAGE).to_le_bytes());
        host.put(6 * PAGE_SIZE, &(iova + 2 * PAGE).to_le_bytes());
        host.put(6 * PAGE_SIZE + 8, &(iova + 3 * PAGE).to_le_bytes());
        let mut out = Vec::new();
        resolve_prps(&mut table, iova, iova + start as u64, 4 * PAGE_SIZE, &mut out).unwrap();
        assert_eq!(out.len(), 1, "four adjacent pages merge into one segment");
        assert_eq!(out[0].len(), 4 * PAGE_SIZE);
        let mut transfer = Transfer::new(&out);
        transfer.put(&[7u8; 4 * PAGE_SIZE]);
        assert_eq!(memory.byte(3 * PAGE_SIZE + 100), 7);
        assert_eq!(memory.byte(4 * PAGE_SIZE), 0, "nothing past the transfer");
        transfer = Transfer::new(&out);
        transfer.flip_bit(PAGE_SIZE + 1, 3);
        assert_eq!(memory.byte(PAGE_SIZE + 1), 7 ^ 8);
    }

    /// One SGL descriptor's two quadwords.
    fn descriptor(address: u64, len: usize, kind: u8) -> (u64, u64) {
        (address, len as u64 | u64::from(kind) << 56)
    }

    fn put_descriptor(host: &HostRange, offset: usize, words: (u64, u64)) {
        host.put(offset, &words.0.to_le_bytes());
        host.put(offset + 8, &words.1.to_le_bytes());
    }

    #[test]
    fn an_sgl_data_block_describes_a_buffer_whole() {
        let memory = TestMemory::new(4);
        let mut table = DmaTable::new();
        let iova = table.map(memory.ptr(), 4 * PAGE_SIZE, true).unwrap();
        let mut out = Vec::new();
        resolve_sgl(&mut table, descriptor(iova + 4, 3 * PAGE_SIZE, DATA_BLOCK), 3 * PAGE_SIZE, &mut out).unwrap();
        assert_eq!((out.len(), out[0].len()), (1, 3 * PAGE_SIZE));
        let long = resolve_sgl(&mut table, descriptor(iova, 2 * PAGE_SIZE, DATA_BLOCK), PAGE_SIZE, &mut out);
        assert_eq!(long, Err(sgl_error(GenericStatus::DataSglLengthInvalid)), "more than the transfer");
        let short = resolve_sgl(&mut table, descriptor(iova, PAGE_SIZE, DATA_BLOCK), PAGE_SIZE + 512, &mut out);
        assert_eq!(short, Err(sgl_error(GenericStatus::DataSglLengthInvalid)));
        let outside = resolve_sgl(&mut table, descriptor(iova, 5 * PAGE_SIZE, DATA_BLOCK), 5 * PAGE_SIZE, &mut out);
        assert_eq!(outside, Err(data_transfer_error()));
        let keyed = resolve_sgl(&mut table, descriptor(iova, PAGE_SIZE, 0x40), PAGE_SIZE, &mut out);
        assert_eq!(keyed, Err(sgl_error(GenericStatus::SglDescriptorTypeInvalid)));
        resolve_sgl(&mut table, descriptor(0, 0, 0x70), 0, &mut out).expect("no data, nothing read");
    }

    #[test]
    fn sgl_segments_chain_to_a_last_segment() {
        let memory = TestMemory::new(8);
        let mut table = DmaTable::new();
        let iova = table.map(memory.ptr(), 8 * PAGE_SIZE, true).unwrap();
        let host = memory.all();
        // SGL1: a Segment at page 6 holding page 2's Data Block and a Last
        // Segment at page 7, which holds pages 0 and 1 (a zero-length
        // block between them).
        put_descriptor(&host, 6 * PAGE_SIZE, descriptor(iova + 2 * PAGE, PAGE_SIZE, DATA_BLOCK));
        put_descriptor(&host, 6 * PAGE_SIZE + 16, descriptor(iova + 7 * PAGE, 48, LAST_SEGMENT));
        put_descriptor(&host, 7 * PAGE_SIZE, descriptor(iova, PAGE_SIZE, DATA_BLOCK));
        put_descriptor(&host, 7 * PAGE_SIZE + 16, descriptor(iova, 0, DATA_BLOCK));
        put_descriptor(&host, 7 * PAGE_SIZE + 32, descriptor(iova + PAGE, PAGE_SIZE, DATA_BLOCK));
        let sgl1 = descriptor(iova + 6 * PAGE, 32, SEGMENT);
        let mut out = Vec::new();
        resolve_sgl(&mut table, sgl1, 3 * PAGE_SIZE, &mut out).unwrap();
        assert_eq!(out.len(), 2, "page 2, then pages 0 and 1 merged");
        let mut transfer = Transfer::new(&out);
        let mut data = vec![1u8; PAGE_SIZE];
        data.extend(vec![2u8; 2 * PAGE_SIZE]);
        transfer.put(&data);
        assert_eq!((memory.byte(2 * PAGE_SIZE), memory.byte(0), memory.byte(PAGE_SIZE + 5)), (1, 2, 2));
        // Two pages of it: the rest of the list (a zero-length block, then
        // page 1) describes more than the transfer.
        let long = resolve_sgl(&mut table, sgl1, 2 * PAGE_SIZE, &mut out);
        assert_eq!(long, Err(sgl_error(GenericStatus::DataSglLengthInvalid)));
        // A chain from inside a Last Segment, or from before a Segment's
        // last descriptor, is refused; so is a list that runs out.
        let invalid = Err(sgl_error(GenericStatus::InvalidSglSegmentDescriptor));
        put_descriptor(&host, 7 * PAGE_SIZE + 32, descriptor(iova + 6 * PAGE, 32, SEGMENT));
        assert_eq!(resolve_sgl(&mut table, sgl1, 3 * PAGE_SIZE, &mut out), invalid);
        put_descriptor(&host, 7 * PAGE_SIZE + 32, descriptor(iova + PAGE, PAGE_SIZE, DATA_BLOCK));
        assert_eq!(resolve_sgl(&mut table, descriptor(iova + 6 * PAGE, 48, SEGMENT), 3 * PAGE_SIZE, &mut out), invalid);
        let runs_out = resolve_sgl(&mut table, sgl1, 4 * PAGE_SIZE, &mut out);
        assert_eq!(runs_out, Err(sgl_error(GenericStatus::DataSglLengthInvalid)));
        assert_eq!(
            resolve_sgl(&mut table, descriptor(iova, 24, SEGMENT), PAGE_SIZE, &mut out),
            invalid,
            "not whole descriptors"
        );
        // A Segment whose last descriptor chains back to itself ends.
        put_descriptor(&host, 5 * PAGE_SIZE, descriptor(iova + 5 * PAGE, 16, SEGMENT));
        let looped = resolve_sgl(&mut table, descriptor(iova + 5 * PAGE, 16, SEGMENT), PAGE_SIZE, &mut out);
        assert_eq!(looped, Err(sgl_error(GenericStatus::InvalidNumberOfSglDescriptors)));
    }
}

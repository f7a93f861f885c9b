//! One namespace as the volume uses it: its queue pair, a pool of DMA
//! buffers, its zones (hardware or software), and blocking helpers for the
//! rare commands (flush, zone management, metadata I/O) that share the
//! pair with asynchronous data writes.
//!
//! Completions of asynchronous commands that arrive while a blocking
//! helper waits are kept (not dropped) and handed to the volume at its
//! next poll, so the two styles mix safely on one pair.

use crate::error::{Error, Result};
use crate::tags::{TagLayout, TAG_BYTES};
use crate::BLOCK_SIZE;
use nvme_driver::cmd::zns::{ReportFilter, ZoneSendAction};
use nvme_driver::dma::{DmaBuffer, DmaMemory, DmaPool, FillBuffer};
use nvme_driver::spec::zns::{parse_report_zones, ZoneDescriptor, ZoneState, REPORT_HEADER_SIZE, ZONE_DESCRIPTOR_SIZE};
use nvme_driver::{Controller, IoBuffer, IoCompletion, Namespace, QueuePair, Request};
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a device is opened for a volume.
#[derive(Clone, Copy, Debug)]
pub struct DeviceOptions {
    /// Queue pair entries (at most `depth - 1` commands in flight).
    pub queue_depth: u16,
    /// DMA buffers, each of the largest extent; bounds writes in flight.
    pub buffers: u32,
    /// The largest transfer per command, and so each DMA buffer's size and
    /// the largest extent: the namespace's MDTS, capped at this (the pool
    /// takes `buffers` times it of pinned memory).
    pub max_transfer_bytes: usize,
    /// Bound on every blocking command.
    pub timeout: Duration,
    /// Buffers the volume lends for writes made in place
    /// ([`crate::Volume::fill_buffer`]), each of the largest extent, in
    /// memory the device may only read; 0 lends none. Needs a transport
    /// that enforces it (VFIO, the simulator).
    pub fill_buffers: u32,
}

impl Default for DeviceOptions {
    fn default() -> Self {
        DeviceOptions {
            queue_depth: 128,
            buffers: 64,
            max_transfer_bytes: 1 << 20,
            timeout: Duration::from_secs(30),
            fill_buffers: 0,
        }
    }
}

/// One zone's geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ZoneGeometry {
    pub start_lba: u64,
    /// Usable 4 KiB blocks.
    pub capacity_blocks: u32,
}

/// A namespace opened for a volume. See the [module documentation](self).
#[derive(Debug)]
pub struct Device {
    pub(crate) ns: Namespace,
    pub(crate) pair: QueuePair,
    pub(crate) pool: DmaPool,
    /// How the namespace's per-block metadata can carry block tags
    /// ([`crate::tags`]); `None` when its format has too little (or none).
    pub(crate) tags: Option<TagLayout>,
    /// Metadata buffers for tagged transfers, one per data buffer, each
    /// sized for the largest transfer; `None` without `tags`.
    tag_pool: Option<DmaPool>,
    /// Buffers lent for writes made in place ([`DeviceOptions::fill_buffers`]).
    pub(crate) fill_pool: Option<DmaPool>,
    /// One buffer of one transfer that the device only reads, for the
    /// volume's own blocking writes built in place (checksum areas): no
    /// copy into DMA memory. `None` where the transport cannot map memory
    /// for the device to read only; those writes then copy.
    own_fill: Option<DmaPool>,
    /// A buffer kept back from the pool for the volume's own reads of
    /// checksum areas ([`crate::area`]), which an engine holding every
    /// other buffer (a scrub at depth) must not starve.
    reserved: Option<DmaBuffer>,
    pub(crate) lbas_per_block: u64,
    pub(crate) stash: VecDeque<IoCompletion>,
    /// Completions of the volume's writes that an engine's poll reaped
    /// ([`crate::LaneReads::poll`]), for the volume's next poll.
    pub(crate) held: VecDeque<IoCompletion>,
    next_token: u64,
    timeout: Duration,
    /// Largest transfer in bytes (MDTS and the pool buffer size).
    pub(crate) max_transfer_bytes: usize,
    /// Zone Append limit in bytes; 0 on conventional namespaces.
    pub(crate) append_max_bytes: usize,
    pub(crate) zones: Vec<ZoneGeometry>,
    /// The zone size in LBAs (hardware or software).
    pub(crate) zone_size_lbas: u64,
    /// The controller's reset generation when the volume last knew its
    /// writes durable (open, or the last commit).
    pub(crate) durable_generation: u64,
    /// Where it is (a PCI address, when the caller says), model and
    /// serial, for status views.
    pub(crate) identity: (String, String, String),
    /// A blocking command failed ([`Device::take_failed`]).
    failed: bool,
    /// Which controller the namespace is on: equal for namespaces of one
    /// controller (a Copy may run across them), distinct otherwise.
    pub(crate) controller: usize,
    /// Copy across namespaces of its controller may write to it (offered
    /// and enabled; cleared when the device refuses one).
    pub(crate) copy_across: bool,
}

impl Device {
    /// Opens namespace `nsid` of `controller`: a queue pair and a buffer
    /// pool. The volume sets up zones when it formats or opens.
    pub fn open(controller: &Controller, nsid: u32, options: DeviceOptions) -> Result<Device> {
        let ns = controller.namespace(nsid)?;
        let block_size = ns.block_size() as usize;
        if block_size > BLOCK_SIZE || !BLOCK_SIZE.is_multiple_of(block_size) {
            return Err(Error::InvalidConfig(format!(
                "namespace {nsid}: LBA size {block_size} does not divide the 4 KiB volume block"
            )));
        }
        let max_transfer = (ns.max_transfer_bytes() as usize).min(options.max_transfer_bytes) / BLOCK_SIZE * BLOCK_SIZE;
        if max_transfer < BLOCK_SIZE {
            return Err(Error::InvalidConfig(format!("namespace {nsid}: transfers below 4 KiB")));
        }
        let append_max_bytes = ns.zones().map_or(0, |z| z.zone_append_max_bytes as usize / BLOCK_SIZE * BLOCK_SIZE);
        let tags = tag_layout(&ns, block_size)?;
        let pair = controller.create_queue_pair(options.queue_depth)?;
        let pool = DmaPool::new(controller.transport(), max_transfer, options.buffers.max(4))?;
        let tag_pool = match tags {
            Some(layout) => Some(DmaPool::new(
                controller.transport(),
                layout.bytes(max_transfer / BLOCK_SIZE),
                options.buffers.max(4),
            )?),
            None => None,
        };
        let fill_pool = match options.fill_buffers {
            0 => None,
            count => Some(DmaPool::new_device_reads(controller.transport(), max_transfer, count)?),
        };
        let own_fill = DmaPool::new_device_reads(controller.transport(), max_transfer, 1).ok();
        let durable_generation = pair.reset_generation();
        let id = controller.identify();
        let identity = (String::new(), id.mn.trim().to_string(), id.sn.trim().to_string());
        Ok(Device {
            identity,
            failed: false,
            controller: Arc::as_ptr(controller.transport()) as *const () as usize,
            copy_across: ns.cross_namespace_copy() && ns.copy_usable(),
            lbas_per_block: (BLOCK_SIZE / block_size) as u64,
            ns,
            pair,
            pool,
            tags,
            tag_pool,
            fill_pool,
            own_fill,
            reserved: None,
            stash: VecDeque::new(),
            held: VecDeque::new(),
            next_token: 0,
            timeout: options.timeout,
            max_transfer_bytes: max_transfer,
            append_max_bytes,
            zones: Vec::new(),
            zone_size_lbas: 0,
            durable_generation,
        })
    }

    /// Says where the device is (say, its PCI address), for status views.
    pub fn set_identity(&mut self, address: &str) {
        self.identity.0 = address.to_string();
    }

    /// Where the device is (its address, once told), its controller's
    /// model and its serial number.
    pub fn identity(&self) -> (&str, &str, &str) {
        (&self.identity.0, &self.identity.1, &self.identity.2)
    }

    /// Whether the controller was reset since the volume last knew its
    /// writes durable.
    pub(crate) fn reset_since_durable(&self) -> bool {
        self.pair.reset_generation() != self.durable_generation
    }

    /// The namespace.
    pub fn namespace(&self) -> &Namespace {
        &self.ns
    }

    /// Whether the namespace has hardware zones.
    pub fn is_zoned(&self) -> bool {
        self.ns.zones().is_some()
    }

    /// The queue pair, for engines (scrub) that issue their own reads.
    /// Completions are routed by their token ([`crate::Token`]).
    pub fn queue_pair(&mut self) -> &mut QueuePair {
        &mut self.pair
    }

    /// The DMA buffer pool (buffers of [`Device::max_transfer_bytes`]).
    pub fn pool(&self) -> &DmaPool {
        &self.pool
    }

    /// The largest single transfer, in bytes: the namespace's limit (MDTS)
    /// rounded down to whole 4 KiB blocks and capped at 1 MiB. The size of
    /// each pool buffer.
    pub fn max_transfer_bytes(&self) -> usize {
        self.max_transfer_bytes
    }

    /// The first LBA of 4 KiB block `offset` of `zone`.
    pub(crate) fn lba(&self, zone: u32, offset: u32) -> u64 {
        self.zones[zone as usize].start_lba + u64::from(offset) * self.lbas_per_block
    }

    /// Sets up zones: the hardware zones of a zoned namespace (from Report
    /// Zones), or software zones of `software_zone_blocks` on a
    /// conventional one. Returns the zone descriptors of a zoned namespace.
    pub(crate) fn load_zones(&mut self, software_zone_blocks: u32) -> Result<Vec<ZoneDescriptor>> {
        if let Some(geometry) = self.ns.zones().copied() {
            let descriptors = self.report_zones()?;
            self.zone_size_lbas = geometry.zone_size_blocks;
            self.zones = descriptors
                .iter()
                .map(|d| ZoneGeometry {
                    start_lba: d.zslba,
                    capacity_blocks: (d.zcap / self.lbas_per_block).min(u64::from(u32::MAX)) as u32,
                })
                .collect();
            Ok(descriptors)
        } else {
            if software_zone_blocks == 0 {
                return Err(Error::InvalidConfig("software zones of 0 blocks".into()));
            }
            let zone_lbas = u64::from(software_zone_blocks) * self.lbas_per_block;
            let count = self.ns.capacity_blocks() / zone_lbas;
            self.zone_size_lbas = zone_lbas;
            self.zones = (0..count)
                .map(|z| ZoneGeometry { start_lba: z * zone_lbas, capacity_blocks: software_zone_blocks })
                .collect();
            Ok(Vec::new())
        }
    }

    /// Every zone's descriptor, in LBA order.
    pub(crate) fn report_zones(&mut self) -> Result<Vec<ZoneDescriptor>> {
        let geometry = *self.ns.zones().ok_or_else(|| Error::InvalidArgument("not a zoned namespace".into()))?;
        let mut zones = Vec::with_capacity(geometry.zone_count as usize);
        let mut data = vec![0u8; self.max_transfer_bytes];
        while (zones.len() as u64) < geometry.zone_count {
            let slba = zones.len() as u64 * geometry.zone_size_blocks;
            let buffer = self.buffer()?;
            let request = self.ns.report_zones(slba, ReportFilter::All, true, IoBuffer::new(buffer), 0)?;
            let completion = self.run(request, "Report Zones")?;
            let buffer = completion.buffer.expect("report zones has a buffer");
            buffer.buffer().copy_out(0, &mut data);
            let (_, batch) = parse_report_zones(&data).map_err(nvme_driver::Error::Parse)?;
            if batch.is_empty() {
                return Err(Error::Corrupt(format!("Report Zones from LBA {slba} returned no zone")));
            }
            let room = (data.len() - REPORT_HEADER_SIZE) / ZONE_DESCRIPTOR_SIZE;
            debug_assert!(batch.len() <= room);
            for zone in batch {
                if zone.zslba != zones.len() as u64 * geometry.zone_size_blocks {
                    return Err(Error::Corrupt(format!("zone at LBA {} out of order", zone.zslba)));
                }
                zones.push(zone);
                if zones.len() as u64 == geometry.zone_count {
                    break;
                }
            }
        }
        Ok(zones)
    }

    /// Whether the device reports `zone` Read Only or Offline (asked after
    /// a zone command failed with a status that does not say: a reset of a
    /// read-only zone may be answered with Invalid Zone State Transition,
    /// as the simulator does).
    pub(crate) fn zone_is_worn(&mut self, zone: u32) -> bool {
        self.report_zones()
            .ok()
            .and_then(|zones| zones.get(zone as usize).map(|d| d.state))
            .is_some_and(|state| matches!(state, ZoneState::ReadOnly | ZoneState::Offline))
    }

    /// The metadata buffers of tagged transfers, if the namespace has tags.
    pub fn tag_pool(&self) -> Option<&DmaPool> {
        self.tag_pool.as_ref()
    }

    /// How the namespace's metadata carries block tags, if it can.
    pub fn tag_layout(&self) -> Option<TagLayout> {
        self.tags
    }

    /// A free DMA buffer, polling (and stashing completions) until one
    /// returns, for at most the timeout.
    pub(crate) fn buffer(&mut self) -> Result<DmaBuffer> {
        self.buffer_from(false)
    }

    /// A free metadata buffer for a tagged transfer, as [`Device::buffer`].
    pub(crate) fn tag_buffer(&mut self) -> Result<DmaBuffer> {
        if self.tag_pool.is_none() {
            return Err(Error::InvalidArgument("this namespace carries no block tags".into()));
        }
        self.buffer_from(true)
    }

    fn take_from(&self, tags: bool) -> Option<DmaBuffer> {
        match tags {
            false => self.pool.get(),
            true => self.tag_pool.as_ref().and_then(DmaPool::get),
        }
    }

    fn buffer_from(&mut self, tags: bool) -> Result<DmaBuffer> {
        if let Some(buffer) = self.take_from(tags) {
            return Ok(buffer);
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            let stash = &mut self.stash;
            self.pair.poll(|c| stash.push_back(c));
            if let Some(buffer) = self.take_from(tags) {
                return Ok(buffer);
            }
            if self.stash.iter().any(|c| c.buffer.is_some() || c.metadata.is_some()) {
                // Buffers are held by completions the volume has not
                // processed yet: it must poll.
                return Err(Error::Timeout { what: "a free DMA buffer (poll the volume)" });
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout { what: "a free DMA buffer" });
            }
        }
    }

    /// Submits `request`, polling (and stashing completions) while the
    /// queue is full.
    pub(crate) fn submit(&mut self, request: Request) -> Result<()> {
        let mut request = request;
        let deadline = Instant::now() + self.timeout;
        loop {
            match self.pair.submit(request) {
                Ok(()) => return Ok(()),
                Err((nvme_driver::queue::SubmitError::QueueFull, back)) => {
                    request = back;
                    let stash = &mut self.stash;
                    self.pair.poll(|c| stash.push_back(c));
                    if Instant::now() > deadline {
                        return Err(Error::Timeout { what: "a submission queue slot" });
                    }
                }
                Err((error, _)) => return Err(nvme_driver::Error::from(error).into()),
            }
        }
    }

    /// Whether a poll could find anything: no completion kept back and no
    /// command in flight. A pool polls only its busy devices, so that a
    /// write's cost does not grow with the devices it is not on.
    pub(crate) fn idle(&self) -> bool {
        self.held.is_empty() && self.stash.is_empty() && self.pair.in_flight() == 0
    }

    /// Reaps completions into `out`: ones kept while a blocking command
    /// waited first, then the queue pair's.
    pub fn poll(&mut self, out: &mut Vec<IoCompletion>) {
        out.extend(self.stash.drain(..));
        self.pair.poll(|c| out.push(c));
    }

    /// Runs one command to completion (its token is replaced), keeping
    /// other completions for the next poll.
    pub(crate) fn run(&mut self, request: Request, what: &'static str) -> Result<IoCompletion> {
        let result = self.run_inner(request, what);
        self.failed |= result.is_err();
        result
    }

    /// Whether a blocking command failed since the last call (for the
    /// volume to tell which device a failed commit or metadata write was
    /// on); clears it.
    pub(crate) fn take_failed(&mut self) -> bool {
        std::mem::take(&mut self.failed)
    }

    fn run_inner(&mut self, mut request: Request, what: &'static str) -> Result<IoCompletion> {
        self.next_token += 1;
        let token = crate::Token::Sync(self.next_token).encode();
        request.token = token;
        self.submit(request)?;
        let deadline = Instant::now() + self.timeout;
        loop {
            let mut found = None;
            let stash = &mut self.stash;
            self.pair.poll(|c| if c.token == token { found = Some(c) } else { stash.push_back(c) });
            if let Some(completion) = found {
                return match status(&completion) {
                    Ok(()) => Ok(completion),
                    Err(error) => Err(Error::Command { what, error }),
                };
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout { what });
            }
        }
    }

    /// Flush: everything completed so far is durable.
    pub(crate) fn flush(&mut self) -> Result<()> {
        let request = self.ns.flush(0);
        self.run(request, "Flush").map(drop)
    }

    /// A zone management action on `zone` (zoned namespaces only).
    pub(crate) fn zone_action(&mut self, zone: u32, action: ZoneSendAction) -> Result<()> {
        let zslba = self.zones[zone as usize].start_lba;
        let request = self.ns.zone_send(zslba, action, false, 0)?;
        let what = match action {
            ZoneSendAction::Finish => "Zone Finish",
            ZoneSendAction::Reset => "Zone Reset",
            ZoneSendAction::Open => "Zone Open",
            ZoneSendAction::Close => "Zone Close",
            _ => "Zone Management Send",
        };
        self.run(request, what).map(drop)
    }

    /// Writes `data` (whole 4 KiB blocks) at `lba`, in transfers of at most
    /// the pool buffer size, one at a time (ordered, as a zone's write
    /// pointer requires).
    pub(crate) fn write_at(&mut self, lba: u64, data: &[u8]) -> Result<()> {
        self.write_range(lba, data, None)
    }

    /// [`Device::write_at`] with the blocks' tags from `tags` (their
    /// metadata bytes, [`TagLayout::bytes`]).
    pub(crate) fn write_tagged_at(&mut self, lba: u64, data: &[u8], tags: &[u8]) -> Result<()> {
        self.write_range(lba, data, Some(tags))
    }

    /// Writes zeroes to `count` LBAs from `lba`, fewer than a 4 KiB block:
    /// how the journal brings a write pointer a cut left inside a block to
    /// the block's end.
    pub(crate) fn pad_lbas(&mut self, lba: u64, count: u64) -> Result<()> {
        assert!(count < self.lbas_per_block, "padding {count} LBAs: less than a block");
        let bytes = count as usize * self.ns.block_size() as usize;
        let buffer = self.buffer()?;
        buffer.copy_in(0, &vec![0u8; bytes]);
        let request = self.ns.write(lba, IoBuffer::range(buffer, 0, bytes), false, 0)?;
        self.run(request, "Write (padding)").map(drop)
    }

    /// Appends `data` (whole 4 KiB blocks) to zone `zone` by Zone Append,
    /// one transfer at a time (each lands after the last, nothing else
    /// writing the zone), or by writes at `write_pointer` (a block offset)
    /// on a namespace without Zone Append. Returns the block offset in the
    /// zone where the first transfer landed, as the device reports it.
    pub(crate) fn append_at(&mut self, zone: u32, write_pointer: u32, data: &[u8]) -> Result<u32> {
        debug_assert!(data.len().is_multiple_of(BLOCK_SIZE) && !data.is_empty());
        if self.append_max_bytes < BLOCK_SIZE {
            self.write_at(self.lba(zone, write_pointer), data)?;
            return Ok(write_pointer);
        }
        let zslba = self.zones[zone as usize].start_lba;
        let mut first = None;
        for chunk in data.chunks(self.append_max_bytes.min(self.max_transfer_bytes)) {
            let (buffer, kept) = self.blocking_buffer()?;
            buffer.copy_in(0, chunk);
            let request = self.ns.zone_append(zslba, IoBuffer::range(buffer, 0, chunk.len()), false, 0)?;
            let mut completion = self.run(request, "Zone Append")?;
            self.keep_back(&mut completion, kept);
            first.get_or_insert(self.appended_offset(zone, completion.result_u64())?);
        }
        Ok(first.expect("at least one transfer"))
    }

    /// A buffer to build `len` bytes in place (whole blocks) for
    /// [`Device::append_filled`] or [`Device::write_filled`], when one
    /// transfer carries them and the one buffer for that is free; `None`
    /// sends the caller to [`Device::append_at`] or [`Device::write_at`].
    pub(crate) fn own_fill_buffer(&mut self, len: usize, append: bool) -> Option<FillBuffer> {
        let limit = if append && self.append_max_bytes >= BLOCK_SIZE {
            self.append_max_bytes.min(self.max_transfer_bytes)
        } else {
            self.max_transfer_bytes
        };
        if len > limit || len == 0 {
            return None;
        }
        self.own_fill.as_ref()?.get_fill()
    }

    /// [`Device::append_at`] of the first `len` bytes of `buffer` (from
    /// [`Device::own_fill_buffer`]): one transfer, no copy.
    pub(crate) fn append_filled(
        &mut self,
        zone: u32,
        write_pointer: u32,
        buffer: FillBuffer,
        len: usize,
    ) -> Result<u32> {
        debug_assert!(len.is_multiple_of(BLOCK_SIZE) && len > 0 && len <= buffer.len());
        if self.append_max_bytes < BLOCK_SIZE {
            self.write_filled(self.lba(zone, write_pointer), buffer, len)?;
            return Ok(write_pointer);
        }
        let zslba = self.zones[zone as usize].start_lba;
        let request = self.ns.zone_append(zslba, IoBuffer::range(buffer.into_dma(), 0, len), false, 0)?;
        let lba = self.run(request, "Zone Append")?.result_u64();
        self.appended_offset(zone, lba)
    }

    /// The block offset in zone `zone` of LBA `lba`, where a Zone Append
    /// to it landed: [`Error::BadDeviceResult`] when the device names an
    /// LBA before the zone, inside a block, or past any zone's reach.
    fn appended_offset(&self, zone: u32, lba: u64) -> Result<u32> {
        let zslba = self.zones[zone as usize].start_lba;
        let lbas = lba.checked_sub(zslba).filter(|l| l % self.lbas_per_block == 0);
        match lbas.and_then(|l| u32::try_from(l / self.lbas_per_block).ok()) {
            Some(offset) => Ok(offset),
            None => Err(Error::BadDeviceResult { what: format!("Zone Append to zone {zone} returned LBA {lba}") }),
        }
    }

    /// [`Device::write_at`] of the first `len` bytes of `buffer` (from
    /// [`Device::own_fill_buffer`]): one transfer, no copy.
    pub(crate) fn write_filled(&mut self, lba: u64, buffer: FillBuffer, len: usize) -> Result<()> {
        debug_assert!(len.is_multiple_of(BLOCK_SIZE) && len > 0 && len <= buffer.len());
        let request = self.ns.write(lba, IoBuffer::range(buffer.into_dma(), 0, len), false, 0)?;
        self.run(request, "Write").map(drop)
    }

    /// A buffer for a blocking transfer: the one kept back
    /// ([`Device::reserve_buffer`]) when there is, else the pool's; and
    /// whether it was the one kept back. A rebuild that writes each read's
    /// buffer as it is to another device can hold every buffer of a pool;
    /// a checksum area or a metadata record written meanwhile then still
    /// has one, rather than wait out its bound.
    fn blocking_buffer(&mut self) -> Result<(DmaBuffer, bool)> {
        // One lost to a failed command is kept back again from the next
        // free one.
        if self.reserved.is_none() {
            self.reserved = self.pool.get();
        }
        match self.reserved.take() {
            Some(buffer) => Ok((buffer, true)),
            None => Ok((self.buffer()?, false)),
        }
    }

    /// Keeps the buffer of `completion` back again when it was the one
    /// kept back (`kept`).
    fn keep_back(&mut self, completion: &mut IoCompletion, kept: bool) {
        if kept {
            if let Some(io) = completion.buffer.take() {
                self.reserved = Some(io.into_buffer());
            }
        }
    }

    /// Keeps a buffer back from the pool for blocking transfers
    /// ([`Device::read_reserved`], writes of checksum areas and metadata).
    pub(crate) fn reserve_buffer(&mut self) {
        if self.reserved.is_none() {
            self.reserved = self.pool.get();
        }
    }

    /// [`Device::read_at`] through the buffer kept back
    /// ([`Device::reserve_buffer`]), or one from the pool while none is.
    pub(crate) fn read_reserved(&mut self, lba: u64, out: &mut [u8]) -> Result<()> {
        debug_assert!(out.len().is_multiple_of(BLOCK_SIZE));
        for (index, chunk) in out.chunks_mut(self.max_transfer_bytes).enumerate() {
            let (slba, _) = self.chunk(lba, index, chunk.len(), None);
            let buffer = match self.reserved.take() {
                Some(buffer) => buffer,
                None => self.buffer()?,
            };
            let request = self.ns.read(slba, IoBuffer::range(buffer, 0, chunk.len()), 0)?;
            let io = self.run(request, "Read")?.buffer.expect("reads have a buffer");
            io.buffer().copy_out(0, chunk);
            self.reserved = Some(io.into_buffer());
        }
        Ok(())
    }

    /// Reads `out.len()` bytes (whole 4 KiB blocks) from `lba`.
    pub(crate) fn read_at(&mut self, lba: u64, out: &mut [u8]) -> Result<()> {
        self.read_range(lba, out, None)
    }

    /// [`Device::read_at`], and the blocks' tags into `tags_out` (their
    /// metadata bytes, [`TagLayout::bytes`]).
    pub(crate) fn read_tagged_at(&mut self, lba: u64, out: &mut [u8], tags_out: &mut [u8]) -> Result<()> {
        self.read_range(lba, out, Some(tags_out))
    }

    /// The layout that `tags_len` bytes of tags for `data_len` bytes of
    /// data follow, when there are tags.
    fn layout_for(&self, tags_len: Option<usize>, data_len: usize) -> Result<Option<TagLayout>> {
        let Some(tags_len) = tags_len else { return Ok(None) };
        let layout = self.tags.ok_or_else(|| Error::InvalidArgument("this namespace carries no block tags".into()))?;
        assert_eq!(tags_len, layout.bytes(data_len / BLOCK_SIZE), "tags for every block");
        Ok(Some(layout))
    }

    /// The LBA and, with `layout`, the tag bytes of transfer `index` of
    /// `len` bytes in a range at `lba` cut at the largest transfer.
    fn chunk(&self, lba: u64, index: usize, len: usize, layout: Option<TagLayout>) -> (u64, Option<Range<usize>>) {
        let first_block = index * self.max_transfer_bytes / BLOCK_SIZE;
        let tags = layout.map(|l| l.bytes(first_block)..l.bytes(first_block + len / BLOCK_SIZE));
        (lba + first_block as u64 * self.lbas_per_block, tags)
    }

    /// A buffer holding `data` (one transfer's worth at most), for
    /// [`Device::write_buffer`] on this device and on any other of the
    /// same I/O address space ([`Device::dma_domain`]): one copy into DMA
    /// memory for several writes of the same bytes (the metadata's copies).
    /// With it, whether it is the one kept back, for
    /// [`Device::give_back_buffer`]. `None` when `data` takes more than one
    /// transfer.
    pub(crate) fn buffer_holding(&mut self, data: &[u8]) -> Result<Option<(DmaBuffer, bool)>> {
        if data.len() > self.max_transfer_bytes {
            return Ok(None);
        }
        let (buffer, kept) = self.blocking_buffer()?;
        buffer.copy_in(0, data);
        Ok(Some((buffer, kept)))
    }

    /// The I/O address space its buffers are mapped in: a buffer of a
    /// device of the same one serves this device's transfers too.
    pub(crate) fn dma_domain(&self) -> usize {
        self.pool.dma_domain()
    }

    /// Writes the first `len` bytes of `buffer` (mapped in this device's
    /// I/O address space, one transfer at most) at `lba`, and gives the
    /// buffer back.
    pub(crate) fn write_buffer(&mut self, lba: u64, buffer: DmaBuffer, len: usize) -> Result<DmaBuffer> {
        debug_assert!(len.is_multiple_of(BLOCK_SIZE) && len > 0 && len <= self.max_transfer_bytes);
        debug_assert_eq!(buffer.dma_domain(), self.dma_domain());
        let request = self.ns.write(lba, IoBuffer::range(buffer, 0, len), false, 0)?;
        let mut completion = self.run(request, "Write")?;
        Ok(completion.buffer.take().expect("a write gives its buffer back").into_buffer())
    }

    /// `buffer` from [`Device::buffer_holding`] back: kept back again when
    /// it was the one kept back (`kept`), else to its pool.
    pub(crate) fn give_back_buffer(&mut self, buffer: DmaBuffer, kept: bool) {
        if kept {
            self.reserved = Some(buffer);
        }
    }

    fn write_range(&mut self, lba: u64, data: &[u8], tags: Option<&[u8]>) -> Result<()> {
        debug_assert!(data.len().is_multiple_of(BLOCK_SIZE));
        let layout = self.layout_for(tags.map(<[u8]>::len), data.len())?;
        for (index, chunk) in data.chunks(self.max_transfer_bytes).enumerate() {
            let (slba, tag_range) = self.chunk(lba, index, chunk.len(), layout);
            let (buffer, kept) = self.blocking_buffer()?;
            buffer.copy_in(0, chunk);
            let data = IoBuffer::range(buffer, 0, chunk.len());
            let request = match (tag_range, tags) {
                (Some(range), Some(tags)) => {
                    let tag_buffer = self.tag_buffer()?;
                    tag_buffer.copy_in(0, &tags[range.clone()]);
                    self.ns.write_with_metadata(slba, data, IoBuffer::range(tag_buffer, 0, range.len()), false, 0)?
                }
                _ => self.ns.write(slba, data, false, 0)?,
            };
            let mut completion = self.run(request, "Write")?;
            self.keep_back(&mut completion, kept);
        }
        Ok(())
    }

    fn read_range(&mut self, lba: u64, out: &mut [u8], mut tags: Option<&mut [u8]>) -> Result<()> {
        debug_assert!(out.len().is_multiple_of(BLOCK_SIZE));
        let layout = self.layout_for(tags.as_deref().map(<[u8]>::len), out.len())?;
        for (index, chunk) in out.chunks_mut(self.max_transfer_bytes).enumerate() {
            let (slba, tag_range) = self.chunk(lba, index, chunk.len(), layout);
            let data = IoBuffer::range(self.buffer()?, 0, chunk.len());
            let request = match &tag_range {
                Some(range) => {
                    let tag_buffer = IoBuffer::range(self.tag_buffer()?, 0, range.len());
                    self.ns.read_with_metadata(slba, data, tag_buffer, 0)?
                }
                None => self.ns.read(slba, data, 0)?,
            };
            let completion = self.run(request, "Read")?;
            completion.buffer.expect("reads have a buffer").buffer().copy_out(0, chunk);
            if let (Some(range), Some(tags)) = (tag_range, tags.as_deref_mut()) {
                completion.metadata.expect("a tagged read has metadata").buffer().copy_out(0, &mut tags[range]);
            }
        }
        Ok(())
    }
}

/// How `ns` can carry block tags: a separate, opaque metadata buffer with
/// at least [`TAG_BYTES`] per LBA. A format the volume cannot drive at all
/// (metadata interleaved with the data, or protection information that the
/// device would check and generate) is refused.
fn tag_layout(ns: &Namespace, block_size: usize) -> Result<Option<TagLayout>> {
    let Some(format) = ns.metadata() else { return Ok(None) };
    if !format.is_separate_and_opaque() {
        return Err(Error::InvalidConfig(format!(
            "namespace {}: its LBA format {}; use one with a separate metadata buffer and no protection information",
            ns.nsid(),
            if format.extended { "interleaves metadata with the data" } else { "has protection information on" },
        )));
    }
    let bytes = usize::from(format.bytes_per_block);
    let granule = format.dma_granule.map(|granule| granule as usize);
    Ok((bytes >= TAG_BYTES).then_some(TagLayout { stride: bytes * (BLOCK_SIZE / block_size), granule }))
}

/// A completion's outcome. The one place the allocator reads it.
pub(crate) fn status(completion: &IoCompletion) -> std::result::Result<(), nvme_driver::IoError> {
    completion.status
}

/// Whether `error` says the zone is worn out: Zone Is Read Only or Zone Is
/// Offline (ZNS Command Set 1.1 §3.3.3), which only the device causes.
pub(crate) fn zone_worn_out(error: &nvme_driver::IoError) -> bool {
    use nvme_driver::spec::status::{CommandSpecificStatus, StatusCode};
    matches!(
        error.device_status().map(|status| status.code()),
        Some(StatusCode::CommandSpecific(CommandSpecificStatus::ZoneIsReadOnly | CommandSpecificStatus::ZoneIsOffline))
    )
}

/// Whether a zone in `state` holds a write pointer that counts.
pub(crate) fn zone_has_write_pointer(state: ZoneState) -> bool {
    matches!(state, ZoneState::Empty | ZoneState::ImplicitlyOpened | ZoneState::ExplicitlyOpened | ZoneState::Closed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_driver::spec::identify::Oncs;
    use nvme_driver::MetadataFormat;

    fn namespace(block_size: u32, metadata: Option<MetadataFormat>) -> Namespace {
        Namespace::from_parts(1, block_size, 1 << 20, 1 << 20, Oncs::all(), None).with_metadata(metadata)
    }

    fn format(bytes_per_block: u16, extended: bool, protection_type: u8) -> Option<MetadataFormat> {
        Some(MetadataFormat { bytes_per_block, extended, protection_type, dma_granule: Some(512) })
    }

    #[test]
    fn tags_need_a_separate_opaque_buffer_of_eight_bytes_and_other_formats_are_refused_by_name() {
        assert_eq!(tag_layout(&namespace(4096, None), 4096).unwrap(), None);
        let layout = tag_layout(&namespace(512, format(8, false, 0)), 512).unwrap();
        assert_eq!(layout, Some(TagLayout { stride: 64, granule: Some(512) }), "eight LBAs of 8 bytes per block");
        // Too little room for a tag: the map, no error.
        assert_eq!(tag_layout(&namespace(4096, format(4, false, 0)), 4096).unwrap(), None);
        for (extended, protection, words) in [(true, 0, "interleaves metadata"), (false, 1, "protection information")] {
            match tag_layout(&namespace(4096, format(8, extended, protection)), 4096) {
                Err(Error::InvalidConfig(why)) => assert!(why.contains(words) && why.contains("namespace 1"), "{why}"),
                other => panic!("expected InvalidConfig, got {other:?}"),
            }
        }
    }
}

//! Zero-out done right: the strategy comes from what the device really
//! offers, quirks never override a missing capability, and a command the
//! device rejects as unsupported downgrades the strategy once, visibly,
//! instead of failing and falling back on every call.
//!
//! The background is the Linux 6.12 regression: the "deallocate reads
//! zeroes" quirk began to apply to drives whose firmware had Dataset
//! Management disabled, so every zero-out became a DSM command the drive
//! rejected, then a fallback to writing zero pages (fixed by gating the
//! quirk on ONCS.DSM).
//!
//! Strategies, in order of preference (only those the device allows):
//! 1. [`ZeroStrategy::WriteZeroes`]: ONCS.WZ and no `DISABLE_WRITE_ZEROES`
//!    quirk. DEAC is set when DLFEAT says deallocated blocks read zeroes,
//!    DLFEAT bit 3 says Write Zeroes honours DEAC, and the caller allows
//!    unmapping. Split by WZSL when non-zero, else by MDTS.
//! 2. [`ZeroStrategy::DeallocateAsZeroes`]: the `DEALLOCATE_ZEROES` quirk
//!    AND ONCS.DSM. Ranges respect DMRL/DMRSL/DMSL and the preferred
//!    deallocate granularity and alignment (NPDG/NPDA); unaligned heads and
//!    tails are zeroed by the next strategy.
//! 3. [`ZeroStrategy::ZeroBuffer`]: writes from one shared zero-filled DMA
//!    buffer, many in flight. Always possible.
//!
//! On a zoned namespace, zeroing whole zones with unmapping allowed is a
//! zone reset (the zones read as never written); any other range is
//! written like data and so must start at the zone's write pointer, or the
//! device answers Zone Invalid Write.

use crate::cmd::nvm::{self, DsmAttributes, DsmRange, MAX_BLOCKS};
use crate::cmd::zns::{self as zns_cmd, ZoneSendAction};
use crate::dma::{DmaMemory, DmaPool, DmaRegion, PAGE_SIZE};
use crate::error::{Error, IoError, RequestError, Result};
use crate::identity::{ControllerLimits, NamespaceInfo, RangeLimits};
use crate::queue::{IoBuffer, QueuePair, Request};
use crate::quirks::Quirks;
use crate::spec::identify::{DeallocateReadBehavior, DlFeat, Oncs};
use crate::spec::status::{GenericStatus, Status, StatusCode};
use crate::transport::Transport;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How a namespace zeroes blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum ZeroStrategy {
    /// Write Zeroes commands (NVM Command Set 1.0 §3.2.8), with DEAC when
    /// deallocated blocks read as zeroes.
    WriteZeroes,
    /// Dataset Management, Deallocate (NVM Command Set 1.0 §3.2.3), for
    /// devices the quirk table says read deallocated blocks as zeroes.
    DeallocateAsZeroes,
    /// Writes of a shared zero-filled buffer: slow, but every device takes
    /// them.
    ZeroBuffer,
}

impl ZeroStrategy {
    /// Every strategy, best first; statistics are kept in this order.
    pub const ALL: [ZeroStrategy; 3] =
        [ZeroStrategy::WriteZeroes, ZeroStrategy::DeallocateAsZeroes, ZeroStrategy::ZeroBuffer];

    /// The strategy's position in [`ZeroStrategy::ALL`].
    pub fn index(self) -> usize {
        match self {
            ZeroStrategy::WriteZeroes => 0,
            ZeroStrategy::DeallocateAsZeroes => 1,
            ZeroStrategy::ZeroBuffer => 2,
        }
    }

    /// The strategy's name in reports and on command lines
    /// (`write-zeroes`, `deallocate-as-zeroes`, `zero-buffer`).
    pub fn name(self) -> &'static str {
        match self {
            ZeroStrategy::WriteZeroes => "write-zeroes",
            ZeroStrategy::DeallocateAsZeroes => "deallocate-as-zeroes",
            ZeroStrategy::ZeroBuffer => "zero-buffer",
        }
    }

    /// The strategy [`ZeroStrategy::name`] names, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        ZeroStrategy::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// What the device offers that zero-out depends on, from Identify and the
/// quirk table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ZeroCapabilities {
    /// Logical block size, in bytes.
    pub block_size: u32,
    /// The namespace size, in logical blocks (NSZE).
    pub capacity_blocks: u64,
    /// ONCS of Identify Controller: whether Write Zeroes and Dataset
    /// Management exist at all.
    #[serde(skip)]
    pub oncs: Oncs,
    /// The controller's effective quirks (`DISABLE_WRITE_ZEROES`,
    /// `DEALLOCATE_ZEROES`).
    #[serde(skip)]
    pub quirks: Quirks,
    /// DLFEAT, raw.
    pub dlfeat: u8,
    /// WZSL as bytes; `None` when WZSL is 0 (MDTS applies).
    pub write_zeroes_max_bytes: Option<u64>,
    /// MDTS as bytes (capped like every transfer of the driver).
    pub max_transfer_bytes: u64,
    /// Dataset Management range limits (DMRL, DMRSL, DMSL).
    pub dsm: RangeLimits,
    /// Preferred deallocate granularity and alignment in blocks (NPDG+1,
    /// NPDA+1 when NSFEAT.OPTPERF says they are valid; else 1).
    pub deallocate_granularity_blocks: u64,
    /// See `deallocate_granularity_blocks`: the alignment, in blocks.
    pub deallocate_alignment_blocks: u64,
    /// Zone size, on zoned namespaces.
    pub zone_size_blocks: Option<u64>,
}

impl ZeroCapabilities {
    /// What namespace `info` allows on its controller, whose handle moves
    /// at most `max_transfer_bytes` per command within `dsm`.
    pub(crate) fn derive(
        controller: &ControllerLimits<'_>,
        info: &NamespaceInfo,
        max_transfer_bytes: u64,
        dsm: RangeLimits,
    ) -> Self {
        let id = &info.identify;
        // NPDG/NPDA are valid only with NSFEAT.OPTPERF (bit 4); 0-based.
        let optperf = id.nsfeat & (1 << 4) != 0;
        let preferred = |value: u16| if optperf { u64::from(value) + 1 } else { 1 };
        ZeroCapabilities {
            block_size: info.block_size,
            capacity_blocks: info.capacity_blocks,
            oncs: controller.identify.oncs,
            quirks: controller.quirks,
            dlfeat: id.dlfeat,
            write_zeroes_max_bytes: controller
                .identify_nvm
                .and_then(|nvm| nvm.write_zeroes_size_limit_bytes(controller.min_page_size)),
            max_transfer_bytes,
            dsm,
            deallocate_granularity_blocks: preferred(id.npdg),
            deallocate_alignment_blocks: preferred(id.npda),
            zone_size_blocks: info.zoned.as_ref().map(|z| z.zone_size_blocks),
        }
    }

    /// The strategies this device allows, best first. ZeroBuffer is always
    /// last and always present.
    pub fn strategies(&self) -> Vec<ZeroStrategy> {
        let mut out = Vec::with_capacity(3);
        if self.oncs.contains(Oncs::WRITE_ZEROES) && !self.quirks.contains(Quirks::DISABLE_WRITE_ZEROES) {
            out.push(ZeroStrategy::WriteZeroes);
        }
        // The quirk never overrides a missing capability: without ONCS.DSM
        // the device would reject every DSM command (the 6.12 regression).
        if self.quirks.contains(Quirks::DEALLOCATE_ZEROES) && self.oncs.contains(Oncs::DATASET_MANAGEMENT) {
            out.push(ZeroStrategy::DeallocateAsZeroes);
        }
        out.push(ZeroStrategy::ZeroBuffer);
        out
    }

    /// DEAC may be set on Write Zeroes: deallocated blocks read zeroes, the
    /// command honours DEAC, and the caller allows unmapping.
    pub fn write_zeroes_deac(&self, allow_unmap: bool) -> bool {
        let dlfeat = DlFeat(self.dlfeat);
        allow_unmap && dlfeat.read_behavior() == DeallocateReadBehavior::Zeroes && dlfeat.write_zeroes_deac_supported()
    }

    /// Blocks per Write Zeroes command: WZSL when non-zero, else MDTS,
    /// and never past the 16-bit NLB.
    pub fn write_zeroes_max_blocks(&self) -> u64 {
        let bytes = self.write_zeroes_max_bytes.unwrap_or(self.max_transfer_bytes);
        (bytes / u64::from(self.block_size)).clamp(1, u64::from(MAX_BLOCKS))
    }
}

/// One command of a zero-out plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZeroOp {
    /// Write Zeroes of `blocks` blocks from `slba`.
    WriteZeroes {
        /// First logical block.
        slba: u64,
        /// Logical blocks, 1-based (at most 65,536, the 16-bit NLB).
        blocks: u32,
        /// Set DEAC (CDW12 bit 25): the device may deallocate instead of
        /// writing.
        deallocate: bool,
    },
    /// Dataset Management, deallocate, with these `(slba, blocks)` ranges.
    Deallocate {
        /// `(slba, blocks)` of each range, in logical blocks.
        ranges: Vec<(u64, u32)>,
    },
    /// A write of `blocks` zero blocks from the shared zero buffer.
    ZeroWrite {
        /// First logical block.
        slba: u64,
        /// Logical blocks, 1-based.
        blocks: u32,
    },
    /// Zone Management Send, Reset, of the zone starting at `zslba`.
    ZoneReset {
        /// The zone's start LBA (ZSLBA).
        zslba: u64,
    },
}

impl ZeroOp {
    /// Blocks this command zeroes.
    pub fn blocks(&self) -> u64 {
        match self {
            ZeroOp::WriteZeroes { blocks, .. } | ZeroOp::ZeroWrite { blocks, .. } => u64::from(*blocks),
            ZeroOp::Deallocate { ranges } => ranges.iter().map(|r| u64::from(r.1)).sum(),
            ZeroOp::ZoneReset { .. } => 0,
        }
    }

    /// The strategy this command belongs to (zone resets count as the
    /// strategy that asked for them).
    pub fn strategy(&self, planned: ZeroStrategy) -> ZeroStrategy {
        match self {
            ZeroOp::WriteZeroes { .. } => ZeroStrategy::WriteZeroes,
            ZeroOp::Deallocate { .. } => ZeroStrategy::DeallocateAsZeroes,
            ZeroOp::ZeroWrite { .. } => ZeroStrategy::ZeroBuffer,
            ZeroOp::ZoneReset { .. } => planned,
        }
    }
}

/// Splits `[slba, slba + blocks)` into chunks of at most `max` blocks.
fn chunks(slba: u64, blocks: u64, max: u64) -> impl Iterator<Item = (u64, u32)> {
    let max = max.clamp(1, u64::from(u32::MAX));
    let end = slba + blocks;
    (0..blocks.div_ceil(max)).map(move |i| {
        let start = slba + i * max;
        (start, (end - start).min(max) as u32)
    })
}

/// The commands that zero `[slba, slba + blocks)` with `strategy`. Heads
/// and tails a deallocate cannot cover go to `fallback` (the next strategy
/// the device allows). `zero_buffer_blocks` bounds zero-buffer writes.
pub fn plan(
    strategy: ZeroStrategy,
    fallback: ZeroStrategy,
    caps: &ZeroCapabilities,
    slba: u64,
    blocks: u64,
    allow_unmap: bool,
    zero_buffer_blocks: u64,
) -> Vec<ZeroOp> {
    if blocks == 0 {
        return Vec::new();
    }
    // Whole zones, with unmapping allowed: a reset each.
    if let Some(zone) = caps.zone_size_blocks {
        if allow_unmap && slba.is_multiple_of(zone) && blocks.is_multiple_of(zone) {
            return (0..blocks / zone).map(|i| ZeroOp::ZoneReset { zslba: slba + i * zone }).collect();
        }
    }
    match strategy {
        ZeroStrategy::WriteZeroes => {
            let deallocate = caps.write_zeroes_deac(allow_unmap);
            chunks(slba, blocks, caps.write_zeroes_max_blocks())
                .map(|(slba, blocks)| ZeroOp::WriteZeroes { slba, blocks, deallocate })
                .collect()
        }
        ZeroStrategy::ZeroBuffer => {
            let max = (caps.max_transfer_bytes / u64::from(caps.block_size))
                .min(zero_buffer_blocks)
                .min(u64::from(MAX_BLOCKS));
            chunks(slba, blocks, max).map(|(slba, blocks)| ZeroOp::ZeroWrite { slba, blocks }).collect()
        }
        ZeroStrategy::DeallocateAsZeroes => {
            let unit = caps.deallocate_granularity_blocks.max(caps.deallocate_alignment_blocks).max(1);
            let end = slba + blocks;
            let middle_start = slba.next_multiple_of(unit).min(end);
            let middle_end = (end / unit * unit).max(middle_start);
            let mut ops = Vec::new();
            let other_way = |ops: &mut Vec<ZeroOp>, start: u64, len: u64| {
                let fallback =
                    if fallback == ZeroStrategy::DeallocateAsZeroes { ZeroStrategy::ZeroBuffer } else { fallback };
                ops.extend(plan(fallback, ZeroStrategy::ZeroBuffer, caps, start, len, allow_unmap, zero_buffer_blocks));
            };
            other_way(&mut ops, slba, middle_start - slba);
            // Ranges of at most DMRSL blocks, kept on unit boundaries.
            let range_max = (caps.dsm.dsm_range_blocks / unit * unit).max(unit);
            ops.extend(deallocate_commands(caps, middle_start, middle_end - middle_start, range_max));
            other_way(&mut ops, middle_end, end - middle_end);
            ops
        }
    }
}

/// Commands, bytes and downgrades of one strategy.
#[derive(Debug, Default)]
struct Counters {
    commands: AtomicU64,
    bytes: AtomicU64,
    downgrades: AtomicU64,
}

/// What a namespace's zero-out has done, readable at run time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ZeroStats {
    /// The strategy in use now.
    pub strategy: ZeroStrategy,
    /// The strategies the device allows, best first.
    pub allowed: Vec<ZeroStrategy>,
    /// Per strategy, in [`ZeroStrategy::ALL`] order.
    pub per_strategy: Vec<StrategyStats>,
}

/// What one strategy did on a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StrategyStats {
    /// The strategy.
    pub strategy: ZeroStrategy,
    /// Commands issued with it.
    pub commands: u64,
    /// Bytes zeroed with it.
    pub bytes: u64,
    /// Times this strategy was abandoned because the device rejected it.
    pub downgrades: u64,
}

/// A namespace's zero-out state, shared by every handle of that namespace
/// on one controller, so a downgrade happens once for all of them.
pub struct ZeroState {
    caps: ZeroCapabilities,
    allowed: Vec<ZeroStrategy>,
    current: AtomicUsize,
    counters: [Counters; 3],
    transport: Arc<dyn Transport>,
    zero_buffer: OnceLock<Result<DmaRegion, String>>,
    descriptors: Mutex<Option<DmaPool>>,
}

impl std::fmt::Debug for ZeroState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZeroState").field("caps", &self.caps).field("stats", &self.stats()).finish_non_exhaustive()
    }
}

/// The shared zero buffer: the largest write one command may make, at most 2 MiB.
const ZERO_BUFFER_MAX_BYTES: u64 = 2 << 20;
/// A zero-out that sees no completion for this long has failed.
const PROGRESS_TIMEOUT: Duration = Duration::from_secs(30);

impl ZeroState {
    /// The state of a namespace with these capabilities, starting with the
    /// best strategy they allow. `transport` maps the zero buffer and the
    /// Dataset Management range lists when first needed.
    pub fn new(caps: ZeroCapabilities, transport: Arc<dyn Transport>) -> Self {
        let allowed = caps.strategies();
        ZeroState {
            caps,
            allowed,
            current: AtomicUsize::new(0),
            counters: Default::default(),
            transport,
            zero_buffer: OnceLock::new(),
            descriptors: Mutex::new(None),
        }
    }

    /// The capabilities the strategies were chosen from.
    pub fn capabilities(&self) -> &ZeroCapabilities {
        &self.caps
    }

    /// The strategy in use now (after any downgrades).
    pub fn strategy(&self) -> ZeroStrategy {
        self.allowed[self.current.load(Ordering::Acquire).min(self.allowed.len() - 1)]
    }

    /// Uses `strategy` from now on (benchmarks, tests); it must be allowed.
    pub fn set_strategy(&self, strategy: ZeroStrategy) -> Result<()> {
        let index =
            self.allowed.iter().position(|s| *s == strategy).ok_or_else(|| {
                Error::InvalidRequest(RequestError::Unsupported { command: strategy_command(strategy) })
            })?;
        self.current.store(index, Ordering::Release);
        Ok(())
    }

    /// Commands, bytes and downgrades per strategy, and the strategy in
    /// use.
    pub fn stats(&self) -> ZeroStats {
        ZeroStats {
            strategy: self.strategy(),
            allowed: self.allowed.clone(),
            per_strategy: ZeroStrategy::ALL
                .iter()
                .map(|&strategy| {
                    let c = &self.counters[strategy.index()];
                    StrategyStats {
                        strategy,
                        commands: c.commands.load(Ordering::Relaxed),
                        bytes: c.bytes.load(Ordering::Relaxed),
                        downgrades: c.downgrades.load(Ordering::Relaxed),
                    }
                })
                .collect(),
        }
    }

    fn zero_buffer(&self) -> Result<&DmaRegion> {
        self.zero_buffer
            .get_or_init(|| {
                let len = self.caps.max_transfer_bytes.min(ZERO_BUFFER_MAX_BYTES) as usize;
                // A fresh anonymous mapping is zero-filled; nothing ever
                // writes it (the device only reads it).
                DmaRegion::allocate(&self.transport, len).map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| Error::Dma(e.clone()))
    }

    fn descriptor_buffer(&self) -> Result<IoBuffer> {
        let mut pool = self.descriptors.lock().unwrap_or_else(|p| p.into_inner());
        if pool.is_none() {
            *pool = Some(DmaPool::new(&self.transport, PAGE_SIZE, DESCRIPTOR_BUFFERS)?);
        }
        let buffer = pool.as_ref().expect("created above").get().ok_or(Error::QueueFull)?;
        Ok(IoBuffer::new(buffer))
    }

    /// Moves from the strategy at `index` to the next, once even if several
    /// callers see the rejection.
    fn downgrade(&self, index: usize, status: Status) {
        let rejected = self.allowed[index];
        if self.current.compare_exchange(index, index + 1, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.counters[rejected.index()].downgrades.fetch_add(1, Ordering::Relaxed);
            log::warn!(
                "{}: the device rejected {} ({status}); zero-out now uses {}",
                self.transport.name(),
                rejected.name(),
                self.allowed[index + 1].name()
            );
        }
    }
}

/// DSM descriptor buffers in flight at once.
const DESCRIPTOR_BUFFERS: u32 = 64;

fn strategy_command(strategy: ZeroStrategy) -> &'static str {
    match strategy {
        ZeroStrategy::WriteZeroes => "Write Zeroes",
        ZeroStrategy::DeallocateAsZeroes => "Dataset Management",
        ZeroStrategy::ZeroBuffer => "Write",
    }
}

/// The device does not support the command: the strategy must change.
fn is_unsupported(status: &Status) -> bool {
    matches!(
        status.code(),
        StatusCode::Generic(GenericStatus::InvalidCommandOpcode | GenericStatus::InvalidFieldInCommand)
    )
}

/// Zeroes `[slba, slba + blocks)` on `pair`, which must have nothing else
/// in flight. Returns when every block reads zeroes.
pub(crate) fn zeroout(
    state: &ZeroState,
    nsid: u32,
    pair: &mut QueuePair,
    slba: u64,
    blocks: u64,
    allow_unmap: bool,
) -> Result<()> {
    if pair.in_flight() != 0 {
        return Err(Error::InvalidArgument("zero-out needs a queue pair with nothing in flight".into()));
    }
    if slba.checked_add(blocks).is_none_or(|end| end > state.caps.capacity_blocks) {
        return Err(RequestError::LbaOutOfRange { slba, blocks, capacity_blocks: state.caps.capacity_blocks }.into());
    }
    let mut pending = vec![(slba, blocks)];
    loop {
        let index = state.current.load(Ordering::Acquire);
        let strategy = state.allowed[index];
        let fallback = state.allowed.get(index + 1).copied().unwrap_or(ZeroStrategy::ZeroBuffer);
        let zero_buffer_blocks = match strategy {
            ZeroStrategy::WriteZeroes => u64::from(MAX_BLOCKS),
            _ => state.zero_buffer()?.len() as u64 / u64::from(state.caps.block_size),
        };
        let mut ops = Vec::new();
        for &(start, len) in &pending {
            ops.extend(plan(strategy, fallback, &state.caps, start, len, allow_unmap, zero_buffer_blocks));
        }
        let rejected = run(state, nsid, pair, strategy, &ops)?;
        let Some((status, failed)) = rejected else { return Ok(()) };
        if index + 1 >= state.allowed.len() {
            return Err(Error::Command { opcode: crate::spec::command::opcode::nvm::WRITE, admin: false, status });
        }
        state.downgrade(index, status);
        // The rejected ranges are still zeroed, by the next strategy.
        pending = failed;
    }
}

/// Deallocate commands for `[slba, slba + blocks)`: ranges of at most
/// DMRSL blocks, at most DMRL ranges and DMSL blocks per command. A hint to
/// the device, not a zero-out: what the blocks read afterwards is DLFEAT's
/// business.
pub fn plan_deallocate(caps: &ZeroCapabilities, slba: u64, blocks: u64) -> Vec<ZeroOp> {
    deallocate_commands(caps, slba, blocks, caps.dsm.dsm_range_blocks)
}

/// Ranges of at most `range_max` blocks, grouped into DSM commands of at
/// most DMRL ranges and DMSL blocks.
fn deallocate_commands(caps: &ZeroCapabilities, slba: u64, blocks: u64, range_max: u64) -> Vec<ZeroOp> {
    let mut ops = Vec::new();
    let mut command: Vec<(u64, u32)> = Vec::new();
    let mut command_blocks = 0u64;
    for (start, len) in chunks(slba, blocks, range_max) {
        if command.len() == caps.dsm.dsm_ranges || command_blocks + u64::from(len) > caps.dsm.dsm_total_blocks {
            ops.push(ZeroOp::Deallocate { ranges: std::mem::take(&mut command) });
            command_blocks = 0;
        }
        command.push((start, len));
        command_blocks += u64::from(len);
    }
    if !command.is_empty() {
        ops.push(ZeroOp::Deallocate { ranges: command });
    }
    ops
}

/// Deallocates `[slba, slba + blocks)` on `pair` (nothing else in flight).
pub(crate) fn deallocate(state: &ZeroState, nsid: u32, pair: &mut QueuePair, slba: u64, blocks: u64) -> Result<()> {
    if pair.in_flight() != 0 {
        return Err(Error::InvalidArgument("deallocate needs a queue pair with nothing in flight".into()));
    }
    if !state.caps.oncs.contains(Oncs::DATASET_MANAGEMENT) {
        return Err(RequestError::Unsupported { command: "Dataset Management" }.into());
    }
    if slba.checked_add(blocks).is_none_or(|end| end > state.caps.capacity_blocks) {
        return Err(RequestError::LbaOutOfRange { slba, blocks, capacity_blocks: state.caps.capacity_blocks }.into());
    }
    let ops = plan_deallocate(&state.caps, slba, blocks);
    match run(state, nsid, pair, ZeroStrategy::DeallocateAsZeroes, &ops)? {
        None => Ok(()),
        Some((status, _)) => {
            Err(Error::Command { opcode: crate::spec::command::opcode::nvm::DATASET_MANAGEMENT, admin: false, status })
        }
    }
}

/// Runs `ops` with as many in flight as the pair allows. Returns the
/// ranges whose commands the device rejected as unsupported.
#[allow(clippy::type_complexity)]
fn run(
    state: &ZeroState,
    nsid: u32,
    pair: &mut QueuePair,
    planned: ZeroStrategy,
    ops: &[ZeroOp],
) -> Result<Option<(Status, Vec<(u64, u64)>)>> {
    let block = u64::from(state.caps.block_size);
    let mut next = 0;
    let mut in_flight = 0usize;
    let mut rejected: Option<(Status, Vec<(u64, u64)>)> = None;
    let mut failure: Option<Error> = None;
    let mut last_progress = Instant::now();
    while next < ops.len() || in_flight > 0 {
        while failure.is_none() && next < ops.len() && in_flight < pair.capacity() {
            let token = next as u64;
            let submitted = match &ops[next] {
                ZeroOp::WriteZeroes { slba, blocks, deallocate } => {
                    let command = nvm::write_zeroes(nsid, *slba, *blocks, *deallocate, false);
                    pair.submit(Request { command, buffer: None, metadata: None, token })
                        .map_err(|(e, _)| Error::from(e))
                }
                ZeroOp::ZoneReset { zslba } => {
                    let command = zns_cmd::zone_management_send(nsid, *zslba, ZoneSendAction::Reset, false);
                    pair.submit(Request { command, buffer: None, metadata: None, token })
                        .map_err(|(e, _)| Error::from(e))
                }
                ZeroOp::ZeroWrite { slba, blocks } => {
                    let zero = state.zero_buffer()?;
                    let command = nvm::write(nsid, *slba, *blocks, false);
                    // SAFETY: the zero buffer is mapped for this controller,
                    // lives as long as `state` (held by the caller across
                    // this call), and is never written: the device only
                    // reads it, so concurrent commands may share it.
                    unsafe { pair.submit_raw(command, zero.iova(), (u64::from(*blocks) * block) as usize, token) }
                }
                ZeroOp::Deallocate { ranges } => {
                    let buffer = state.descriptor_buffer()?;
                    for (i, &(slba, blocks)) in ranges.iter().enumerate() {
                        buffer.buffer().copy_in(i * 16, &DsmRange::new(slba, blocks).to_bytes());
                    }
                    let command = nvm::dataset_management(nsid, ranges.len() as u16, DsmAttributes::DEALLOCATE);
                    let buffer = buffer.truncate(ranges.len() * 16);
                    pair.submit(Request { command, buffer: Some(buffer), metadata: None, token })
                        .map_err(|(e, _)| Error::from(e))
                }
            };
            submitted?;
            next += 1;
            in_flight += 1;
        }
        let reaped = pair.poll(|completion| {
            in_flight -= 1;
            let op = &ops[completion.token as usize];
            match completion.status {
                Ok(()) => {
                    let counters = &state.counters[op.strategy(planned).index()];
                    counters.commands.fetch_add(1, Ordering::Relaxed);
                    counters.bytes.fetch_add(op.blocks() * block, Ordering::Relaxed);
                }
                Err(IoError::Device(status)) if is_unsupported(&status) && !matches!(op, ZeroOp::ZoneReset { .. }) => {
                    let failed = &mut rejected.get_or_insert_with(|| (status, Vec::new())).1;
                    match op {
                        ZeroOp::WriteZeroes { slba, blocks, .. } | ZeroOp::ZeroWrite { slba, blocks } => {
                            failed.push((*slba, u64::from(*blocks)))
                        }
                        ZeroOp::Deallocate { ranges } => failed.extend(ranges.iter().map(|r| (r.0, u64::from(r.1)))),
                        ZeroOp::ZoneReset { .. } => {}
                    }
                }
                Err(IoError::Device(status)) => {
                    failure.get_or_insert(Error::Command { opcode: op_opcode(op), admin: false, status });
                }
                Err(error) => {
                    failure.get_or_insert(Error::NotCompleted { opcode: op_opcode(op), admin: false, error });
                }
            }
        });
        if reaped > 0 {
            last_progress = Instant::now();
        } else if last_progress.elapsed() > PROGRESS_TIMEOUT {
            return Err(Error::Timeout { what: "a zero-out command", waited_ms: PROGRESS_TIMEOUT.as_millis() as u64 });
        }
        if failure.is_some() && in_flight == 0 {
            break;
        }
    }
    match failure {
        Some(error) => Err(error),
        None => Ok(rejected),
    }
}

fn op_opcode(op: &ZeroOp) -> u8 {
    use crate::spec::command::opcode::nvm as op;
    match op {
        ZeroOp::WriteZeroes { .. } => op::WRITE_ZEROES,
        ZeroOp::Deallocate { .. } => op::DATASET_MANAGEMENT,
        ZeroOp::ZeroWrite { .. } => op::WRITE,
        ZeroOp::ZoneReset { .. } => op::ZONE_MANAGEMENT_SEND,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn caps() -> ZeroCapabilities {
        ZeroCapabilities {
            block_size: 512,
            capacity_blocks: 1 << 24,
            oncs: Oncs::WRITE_ZEROES | Oncs::DATASET_MANAGEMENT,
            quirks: Quirks::empty(),
            dlfeat: 0,
            write_zeroes_max_bytes: None,
            max_transfer_bytes: 128 * 1024,
            dsm: RangeLimits::default(),
            deallocate_granularity_blocks: 1,
            deallocate_alignment_blocks: 1,
            zone_size_blocks: None,
        }
    }

    #[test]
    fn chunks_tile_the_range() {
        let pieces: Vec<_> = chunks(10, 25, 10).collect();
        assert_eq!(pieces, vec![(10, 10), (20, 10), (30, 5)]);
        assert_eq!(chunks(0, 0, 10).count(), 0);
    }

    #[test]
    fn plans_cover_exactly_the_range() {
        let mut c = caps();
        c.quirks = Quirks::DEALLOCATE_ZEROES;
        c.deallocate_granularity_blocks = 8;
        c.deallocate_alignment_blocks = 8;
        c.dsm.dsm_range_blocks = 100;
        c.dsm.dsm_ranges = 3;
        for strategy in ZeroStrategy::ALL {
            let ops = plan(strategy, ZeroStrategy::WriteZeroes, &c, 5, 10_000, false, 256);
            let mut covered: Vec<(u64, u64)> = ops
                .iter()
                .flat_map(|op| match op {
                    ZeroOp::WriteZeroes { slba, blocks, .. } | ZeroOp::ZeroWrite { slba, blocks } => {
                        vec![(*slba, u64::from(*blocks))]
                    }
                    ZeroOp::Deallocate { ranges } => ranges.iter().map(|r| (r.0, u64::from(r.1))).collect(),
                    ZeroOp::ZoneReset { .. } => unreachable!(),
                })
                .collect();
            covered.sort_unstable();
            let mut next = 5;
            for (start, len) in covered {
                assert_eq!(start, next, "{strategy:?}: gap or overlap");
                next = start + len;
            }
            assert_eq!(next, 10_005, "{strategy:?}");
        }
    }
}

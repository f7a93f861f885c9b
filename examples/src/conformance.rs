//! Conformance scenarios: I/O checks whose bodies run unchanged against any
//! backend behind the driver's transport seam: QEMU's emulated controllers
//! (through the guest tool `io-check`, driven by `examples/tests/qemu_io.rs`)
//! and the simulator (host tests), so the two device models cannot drift
//! apart unnoticed. Each check prints one line.
//!
//! Scenarios:
//! - `integrity`: random writes, then reads, at queue depth 1 and at the
//!   queue pair's full capacity; every block carries its LBA and a
//!   generation, and some blocks are overwritten by later generations.
//! - `sizes`: every transfer size class from one block to MDTS (PRP1 only,
//!   PRP1+PRP2, PRP lists), from buffers that start at several dword
//!   offsets within a page; MDTS + 1 block is refused before submission.
//! - `threads`: four threads, a queue pair each, mixed I/O at depth 16 on
//!   disjoint regions; every token completes exactly once.
//! - `zns`: concurrent Zone Appends tile the zone, explicit zone state
//!   transitions seen through (partial, filtered) zone reports, writes off
//!   the write pointer fail with Zone Invalid Write. A conventional
//!   namespace given to this scenario is checked to refuse zone commands.
//! - `zns-active`: opening one zone more than Max Active Resources allows
//!   fails with Too Many Active Zones.
//! - `zeroes`: Write Zeroes, Dataset Management deallocate, Copy, Flush,
//!   Verify and Compare, with the data around every range checked intact.
//! - `dsm-limit`: a deallocate range longer than DMRSL is refused before
//!   submission (QEMU completes such a range successfully without
//!   deallocating it); one of exactly DMRSL blocks reads back as zeroes.
//! - `metadata`: per-block metadata in a separate buffer through Write,
//!   Zone Append, Read, Copy, Write Zeroes and zone resets
//!   ([`metadata`]).
//!
//! Every line of a passed check reads `io-check: BDF CHECK: ok (...)`; the
//! last line is `io-check: SCENARIO ok` (status 0) or
//! `io-check: SCENARIO FAILED on BDF: CHECK: why` (status 1). Usage errors
//! exit with status 2.

use nvme_driver::cmd::nvm;
use nvme_driver::cmd::zns::{self as zns_cmd, ReportFilter, ZoneSendAction};
use nvme_driver::dma::{DmaBuffer, DmaMemory, DmaPool, PAGE_SIZE};
use nvme_driver::queue::SubmitError;
use nvme_driver::spec::identify::Oncs;
use nvme_driver::spec::status::{
    CommandSpecificStatus, GenericStatus, MediaStatus, Status, StatusCode, StatusCodeType,
};
use nvme_driver::spec::zns::{parse_report_zones, ZoneDescriptor, ZoneState, REPORT_HEADER_SIZE, ZONE_DESCRIPTOR_SIZE};
use nvme_driver::{Controller, IoBuffer, IoCompletion, IoError, Namespace, QueuePair, Request, RequestError};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod metadata;

/// What a check returns: `Err` says what went wrong, in words.
pub type Outcome<T = ()> = Result<T, String>;

/// The bound on one command, from submission to completion.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// The bound on one batch of commands.
const BATCH_TIMEOUT: Duration = Duration::from_secs(120);
/// Polls between looks at the clock in busy loops.
const POLLS_PER_CLOCK_CHECK: u32 = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    Integrity,
    Sizes,
    Threads,
    Zns,
    ZnsActive,
    Zeroes,
    DsmLimit,
    Metadata,
}

impl Scenario {
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "integrity" => Scenario::Integrity,
            "sizes" => Scenario::Sizes,
            "threads" => Scenario::Threads,
            "zns" => Scenario::Zns,
            "zns-active" => Scenario::ZnsActive,
            "zeroes" => Scenario::Zeroes,
            "dsm-limit" => Scenario::DsmLimit,
            "metadata" => Scenario::Metadata,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Integrity => "integrity",
            Scenario::Sizes => "sizes",
            Scenario::Threads => "threads",
            Scenario::Zns => "zns",
            Scenario::ZnsActive => "zns-active",
            Scenario::Zeroes => "zeroes",
            Scenario::DsmLimit => "dsm-limit",
            Scenario::Metadata => "metadata",
        }
    }

    fn run_on(self, target: &Target) -> Outcome {
        match self {
            Scenario::Integrity => integrity(target),
            Scenario::Sizes => sizes(target),
            Scenario::Threads => threads(target),
            Scenario::Zns => zns(target),
            Scenario::ZnsActive => zns_active(target),
            Scenario::Zeroes => zeroes(target),
            Scenario::DsmLimit => dsm_limit(target),
            Scenario::Metadata => metadata::metadata(target),
        }
    }
}

/// Runs `scenario` on the first active namespace of `controller`.
pub fn run(scenario: Scenario, controller: &Controller, seed: u64) -> Outcome {
    let target = Target::new(controller, seed)?;
    println!("io-check: {} {}: {}", target.name, scenario.name(), target.describe());
    scenario.run_on(&target)
}

/// One controller and its first namespace, as a scenario sees them.
#[derive(Debug)]
struct Target<'a> {
    controller: &'a Controller,
    ns: Namespace,
    name: String,
    block_bytes: usize,
    seed: u64,
}

impl<'a> Target<'a> {
    fn new(controller: &'a Controller, seed: u64) -> Outcome<Self> {
        let nsid = controller.namespaces().first().ok_or("the controller has no active namespace")?.nsid;
        let ns = controller.namespace(nsid).map_err(|e| e.to_string())?;
        Ok(Target {
            controller,
            name: controller.transport().name().to_string(),
            block_bytes: ns.block_size() as usize,
            ns,
            seed,
        })
    }

    fn describe(&self) -> String {
        let mut text = format!(
            "nsid {} lba={} capacity {} blocks, max transfer {} bytes",
            self.ns.nsid(),
            self.block_bytes,
            self.ns.capacity_blocks(),
            self.ns.max_transfer_bytes()
        );
        if let Some(zones) = self.ns.zones() {
            text += &format!(
                ", {} zones of {} blocks, max open {:?}, max active {:?}, zone append max {} bytes",
                zones.zone_count,
                zones.zone_size_blocks,
                zones.max_open_zones,
                zones.max_active_zones,
                zones.zone_append_max_bytes
            );
        }
        text
    }

    /// Reports a passed check.
    fn ok(&self, check: &str, detail: impl fmt::Display) {
        println!("io-check: {} {check}: ok ({detail})", self.name);
    }

    fn pool(&self, buffer_bytes: usize, count: usize) -> Outcome<DmaPool> {
        let count = u32::try_from(count).map_err(|_| "too many DMA buffers".to_string())?;
        DmaPool::new(self.controller.transport(), buffer_bytes, count)
            .map_err(|e| format!("DMA pool of {count} x {buffer_bytes} bytes: {e}"))
    }

    fn queue_pair(&self, depth: u16) -> Outcome<QueuePair> {
        self.controller.create_queue_pair(depth).map_err(|e| format!("queue pair of depth {depth}: {e}"))
    }

    /// Blocks in `bytes`.
    fn blocks(&self, bytes: usize) -> u64 {
        (bytes / self.block_bytes) as u64
    }
}

/// Runs `check`, prefixing its error with the check's name.
fn check<T>(name: &str, body: impl FnOnce() -> Outcome<T>) -> Outcome<T> {
    body().map_err(|e| format!("{name}: {e}"))
}

// ---------------------------------------------------------------------------
// Data: seeded randomness and self-describing blocks.

/// xorshift64*: small, fast and reproducible from `--seed`.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64, stream: u64) -> Self {
        Rng(mix(seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform enough in `0..bound` for picking LBAs and lengths.
    fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0);
        self.next() % bound
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

/// SplitMix64's finalizer.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// What a stamped block says about itself: its first 16 bytes are `tag`
/// (u64 LE; the block's LBA, or an append's id) and `generation` (u64 LE);
/// the rest is a pattern derived from both, so a block from another place
/// or another time never passes for this one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    tag: u64,
    generation: u64,
}

/// Stamps are written and checked a dword at a time, so a buffer may start
/// at any dword offset (as PRP entries allow).
const WORD_BYTES: usize = 4;
/// Words of a block that hold the tag and the generation.
const HEADER_WORDS: usize = 4;
/// Poison written where a read is expected to land: no stamp's header and
/// no zero block looks like it.
const POISON: u32 = 0xDEAD_BEEF;

impl Stamp {
    fn word(self, index: usize) -> u32 {
        match index {
            0 => self.tag as u32,
            1 => (self.tag >> 32) as u32,
            2 => self.generation as u32,
            3 => (self.generation >> 32) as u32,
            _ => {
                let seed = self.tag ^ self.generation.rotate_left(29);
                (mix(seed ^ (index as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93)) >> 16) as u32
            }
        }
    }
}

impl fmt::Display for Stamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tag {} generation {:#x}", self.tag, self.generation)
    }
}

/// What a block should hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    Stamp(Stamp),
    Zeroes,
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expect::Stamp(stamp) => write!(f, "{stamp}"),
            Expect::Zeroes => f.write_str("zeroes"),
        }
    }
}

fn stamp_block(memory: &DmaBuffer, offset: usize, block_bytes: usize, stamp: Stamp) {
    for index in 0..block_bytes / WORD_BYTES {
        memory.write::<u32>(offset + index * WORD_BYTES, stamp.word(index));
    }
}

/// The header of whatever block sits at `offset`, for error messages.
fn found_header(memory: &DmaBuffer, offset: usize) -> String {
    let word = |i: usize| u64::from(memory.read::<u32>(offset + i * WORD_BYTES));
    let found = Stamp { tag: word(1) << 32 | word(0), generation: word(3) << 32 | word(2) };
    if found.tag == u64::from(POISON) << 32 | u64::from(POISON) {
        "the poison the host wrote before the read (no data arrived)".into()
    } else if found.tag == 0 && found.generation == 0 {
        "a block starting with zeroes".into()
    } else {
        found.to_string()
    }
}

fn check_block(memory: &DmaBuffer, offset: usize, block_bytes: usize, expect: Expect) -> Outcome {
    for index in 0..block_bytes / WORD_BYTES {
        let got = memory.read::<u32>(offset + index * WORD_BYTES);
        let want = match expect {
            Expect::Stamp(stamp) => stamp.word(index),
            Expect::Zeroes => 0,
        };
        if got != want {
            return Err(format!(
                "expected {expect}, found {} (first difference at byte {}: {got:#010x}, expected {want:#010x})",
                found_header(memory, offset),
                index * WORD_BYTES
            ));
        }
    }
    Ok(())
}

/// Poisons the header and the last word of each block a read will fill,
/// so a block the device never wrote cannot pass as data.
fn poison_blocks(memory: &DmaBuffer, offset: usize, blocks: usize, block_bytes: usize) {
    for block in 0..blocks {
        let start = offset + block * block_bytes;
        for index in 0..HEADER_WORDS {
            memory.write::<u32>(start + index * WORD_BYTES, POISON);
        }
        memory.write::<u32>(start + block_bytes - WORD_BYTES, POISON);
    }
}

/// Poisons every word of `[offset, offset + len)`.
fn poison_all(memory: &DmaBuffer, offset: usize, len: usize) {
    for index in 0..len / WORD_BYTES {
        memory.write::<u32>(offset + index * WORD_BYTES, POISON);
    }
}

/// What the namespace should hold over a region, block by block.
#[derive(Debug)]
struct Model {
    base: u64,
    blocks: Vec<Expect>,
}

impl Model {
    fn new(base: u64, blocks: u64, initial: Expect) -> Self {
        Model { base, blocks: vec![initial; blocks as usize] }
    }

    fn index(&self, lba: u64) -> usize {
        let index = lba.checked_sub(self.base).filter(|i| *i < self.blocks.len() as u64);
        index.unwrap_or_else(|| panic!("LBA {lba} outside the modelled region")) as usize
    }

    fn expect(&self, lba: u64) -> Expect {
        self.blocks[self.index(lba)]
    }

    fn set(&mut self, lba: u64, expect: Expect) {
        let index = self.index(lba);
        self.blocks[index] = expect;
    }

    fn set_range(&mut self, slba: u64, blocks: u64, expect: Expect) {
        for lba in slba..slba + blocks {
            self.set(lba, expect);
        }
    }

    fn end(&self) -> u64 {
        self.base + self.blocks.len() as u64
    }
}

/// A block stamped with its own LBA.
fn lba_stamp(lba: u64, generation: u64) -> Expect {
    Expect::Stamp(Stamp { tag: lba, generation })
}

/// Splits `[base, base + blocks)` into extents of 1..=`max_blocks` blocks,
/// in random order.
fn random_extents(rng: &mut Rng, base: u64, blocks: u64, max_blocks: u32) -> Vec<(u64, u32)> {
    let mut extents = Vec::new();
    let end = base + blocks;
    let mut at = base;
    while at < end {
        let len = (1 + rng.below(u64::from(max_blocks))).min(end - at);
        extents.push((at, len as u32));
        at += len;
    }
    rng.shuffle(&mut extents);
    extents
}

// ---------------------------------------------------------------------------
// Commands: one at a time, with typed status checks.

/// Submits one request and waits (bounded) for its completion.
fn execute(qpair: &mut QueuePair, request: Result<Request, RequestError>, what: &str) -> Outcome<IoCompletion> {
    let request = request.map_err(|e| format!("{what}: refused by the driver: {e}"))?;
    qpair.execute(request, COMMAND_TIMEOUT).map_err(|e| format!("{what}: {e}"))
}

/// Runs `request` and requires success.
fn run_ok(qpair: &mut QueuePair, request: Result<Request, RequestError>, what: &str) -> Outcome<IoCompletion> {
    let completion = execute(qpair, request, what)?;
    match completion.status {
        Ok(()) => Ok(completion),
        Err(status) => Err(format!("{what}: {status}")),
    }
}

/// Runs `request` and requires it to fail with exactly `want`.
fn run_expecting(
    qpair: &mut QueuePair,
    request: Result<Request, RequestError>,
    want: StatusCode,
    what: &str,
) -> Outcome<Status> {
    let completion = execute(qpair, request, what)?;
    match completion.status {
        Ok(()) => Err(format!("{what}: succeeded, expected {}", want.name())),
        Err(IoError::Device(status)) if status.code() == want => Ok(status),
        Err(error) => Err(format!("{what}: {error}, expected {}", want.name())),
    }
}

/// Requires a builder to refuse with `want`.
fn expect_refused(result: Result<Request, RequestError>, want: &RequestError, what: &str) -> Outcome {
    match result {
        Err(error) if &error == want => Ok(()),
        Err(error) => Err(format!("{what}: refused with {error:?}, expected {want:?}")),
        Ok(request) => {
            Err(format!("{what}: the driver built {:?}, expected it to refuse with {want:?}", request.command))
        }
    }
}

/// A buffer from `pool`; the pools here are sized so one is always free.
fn take(pool: &DmaPool) -> Outcome<DmaBuffer> {
    pool.get().ok_or_else(|| "the DMA pool is exhausted (a buffer was not returned)".into())
}

// ---------------------------------------------------------------------------
// Batches: many commands in flight, every token accounted for.

/// One command of a batch.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// Write `blocks` from `slba`, each block stamped with its LBA and
    /// `generation`.
    Write { slba: u64, blocks: u32, generation: u64 },
    /// Read `blocks` from `slba` and check each against the model.
    Read { slba: u64, blocks: u32 },
}

#[derive(Debug, Default)]
struct BatchReport {
    commands: usize,
    blocks: u64,
    max_in_flight: usize,
    /// A submit at full capacity handed the request back as `QueueFull`.
    queue_full_checked: bool,
}

/// A token no batch command uses: the queue-full probe.
const PROBE_TOKEN: u64 = u64::MAX;

/// Runs `ops` with up to `depth` in flight (depth 1 goes through
/// `QueuePair::execute`). Writes update `model` as they complete; reads
/// are checked against it. Every token must complete exactly once.
fn run_batch(
    qpair: &mut QueuePair,
    ns: &Namespace,
    pool: &DmaPool,
    model: &mut Model,
    ops: &[Op],
    depth: usize,
) -> Outcome<BatchReport> {
    let depth = depth.clamp(1, qpair.capacity());
    if pool.available() < depth {
        return Err(format!("{} free DMA buffers for depth {depth}", pool.available()));
    }
    let mut report = BatchReport::default();
    let mut completions_per_token = vec![0u8; ops.len()];
    if depth == 1 {
        for (token, op) in ops.iter().enumerate() {
            let request = build_request(ns, pool, *op, token as u64)?;
            let completion = qpair.execute(request, COMMAND_TIMEOUT).map_err(|e| format!("{op:?}: {e}"))?;
            finish(completion, ns, ops, &mut completions_per_token, model)?;
            report.max_in_flight = 1;
        }
    } else {
        let mut reaped: Vec<IoCompletion> = Vec::with_capacity(qpair.capacity());
        let mut next = 0;
        let mut in_flight = 0;
        let mut polls = 0u32;
        let started = Instant::now();
        while next < ops.len() || in_flight > 0 {
            while in_flight < depth && next < ops.len() {
                let request = build_request(ns, pool, ops[next], next as u64)?;
                qpair.submit(request).map_err(|(error, _)| {
                    format!("submit with {in_flight} of {} slots in flight: {error:?}", qpair.capacity())
                })?;
                in_flight += 1;
                next += 1;
            }
            report.max_in_flight = report.max_in_flight.max(qpair.in_flight());
            if qpair.in_flight() == qpair.capacity() && !report.queue_full_checked {
                probe_full_queue(qpair, ns)?;
                report.queue_full_checked = true;
            }
            qpair.poll(|completion| reaped.push(completion));
            for completion in reaped.drain(..) {
                in_flight -= 1;
                finish(completion, ns, ops, &mut completions_per_token, model)?;
            }
            if qpair.in_flight() != in_flight {
                return Err(format!("the queue pair counts {} in flight, the batch {in_flight}", qpair.in_flight()));
            }
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(POLLS_PER_CLOCK_CHECK) && started.elapsed() > BATCH_TIMEOUT {
                return Err(format!(
                    "{in_flight} commands still in flight after {} s ({next} of {} submitted)",
                    BATCH_TIMEOUT.as_secs(),
                    ops.len()
                ));
            }
        }
    }
    if let Some(token) = completions_per_token.iter().position(|&n| n != 1) {
        return Err(format!("token {token} ({:?}) completed {} times", ops[token], completions_per_token[token]));
    }
    report.commands = ops.len();
    report.blocks = ops
        .iter()
        .map(|op| match *op {
            Op::Write { blocks, .. } | Op::Read { blocks, .. } => u64::from(blocks),
        })
        .sum();
    Ok(report)
}

fn build_request(ns: &Namespace, pool: &DmaPool, op: Op, token: u64) -> Outcome<Request> {
    let block_bytes = ns.block_size() as usize;
    let buffer = take(pool)?;
    let request = match op {
        Op::Write { slba, blocks, generation } => {
            for i in 0..blocks as usize {
                let stamp = Stamp { tag: slba + i as u64, generation };
                stamp_block(&buffer, i * block_bytes, block_bytes, stamp);
            }
            let len = blocks as usize * block_bytes;
            ns.write(slba, IoBuffer::range(buffer, 0, len), false, token)
        }
        Op::Read { slba, blocks } => {
            poison_blocks(&buffer, 0, blocks as usize, block_bytes);
            let len = blocks as usize * block_bytes;
            ns.read(slba, IoBuffer::range(buffer, 0, len), token)
        }
    };
    request.map_err(|e| format!("{op:?}: refused by the driver: {e}"))
}

/// With every slot in flight, one more submit must hand the request back.
fn probe_full_queue(qpair: &mut QueuePair, ns: &Namespace) -> Outcome {
    match qpair.submit(ns.flush(PROBE_TOKEN)) {
        Err((SubmitError::QueueFull, request)) if request.token == PROBE_TOKEN => Ok(()),
        Err((error, request)) => {
            Err(format!("a full queue answered {error:?} and handed back token {:#x}", request.token))
        }
        Ok(()) => Err(format!("submit accepted a command with all {} slots in flight", qpair.capacity())),
    }
}

fn finish(
    completion: IoCompletion,
    ns: &Namespace,
    ops: &[Op],
    completions_per_token: &mut [u8],
    model: &mut Model,
) -> Outcome {
    let token = completion.token;
    let op = usize::try_from(token)
        .ok()
        .and_then(|t| ops.get(t))
        .ok_or_else(|| format!("a completion carries token {token:#x}, which was never used"))?;
    let count = &mut completions_per_token[token as usize];
    *count += 1;
    if *count > 1 {
        return Err(format!("token {token} ({op:?}) completed twice"));
    }
    if let Err(status) = completion.status {
        return Err(format!("{op:?} failed: {status}"));
    }
    let block_bytes = ns.block_size() as usize;
    let buffer = completion.buffer.ok_or_else(|| format!("{op:?} came back without its buffer"))?;
    match *op {
        Op::Write { slba, blocks, generation } => {
            for lba in slba..slba + u64::from(blocks) {
                model.set(lba, lba_stamp(lba, generation));
            }
        }
        Op::Read { slba, blocks } => {
            if buffer.len() != blocks as usize * block_bytes {
                return Err(format!("{op:?} came back with a buffer of {} bytes", buffer.len()));
            }
            for i in 0..blocks as usize {
                let lba = slba + i as u64;
                check_block(buffer.buffer(), buffer.offset() + i * block_bytes, block_bytes, model.expect(lba))
                    .map_err(|e| format!("LBA {lba}: {e}"))?;
            }
        }
    }
    Ok(())
}

/// Reads `[model.base, model.end())` in extents of up to `max_blocks` at
/// `depth` and checks every block.
fn verify_region(
    qpair: &mut QueuePair,
    ns: &Namespace,
    pool: &DmaPool,
    model: &mut Model,
    rng: &mut Rng,
    max_blocks: u32,
    depth: usize,
) -> Outcome<BatchReport> {
    let extents = random_extents(rng, model.base, model.end() - model.base, max_blocks);
    let ops: Vec<Op> = extents.into_iter().map(|(slba, blocks)| Op::Read { slba, blocks }).collect();
    run_batch(qpair, ns, pool, model, &ops, depth)
}

// ---------------------------------------------------------------------------
// integrity

/// Blocks each phase writes and verifies ("several thousand").
const INTEGRITY_REGION_BLOCKS: u64 = 4096;
/// Write generations; the first covers the whole region, each later one a
/// random half of it.
const INTEGRITY_GENERATIONS: u64 = 3;
/// Longest write or read extent, in blocks.
const INTEGRITY_EXTENT_BLOCKS_MAX: u32 = 16;
/// Queue depth of the full-depth phase (clamped to CAP.MQES+1).
const INTEGRITY_QUEUE_DEPTH: u32 = 256;

fn integrity(target: &Target) -> Outcome {
    let ns = &target.ns;
    let block_bytes = target.block_bytes;
    let region_blocks = INTEGRITY_REGION_BLOCKS;
    if ns.capacity_blocks() < 2 * region_blocks {
        return Err(format!("the namespace needs at least {} blocks", 2 * region_blocks));
    }
    let max_blocks = INTEGRITY_EXTENT_BLOCKS_MAX.min(target.blocks(ns.max_transfer_bytes() as usize) as u32);
    let extent_bytes = max_blocks as usize * block_bytes;

    let name = format!("integrity qd=1 lba={block_bytes}");
    check(&name, || {
        let mut qpair = target.queue_pair(2)?;
        let pool = target.pool(extent_bytes, 1)?;
        let (report, held) = integrity_phase(target, &mut qpair, &pool, 0, max_blocks, 1)?;
        target.ok(&name, format!("{report}, generations 1/2/3 hold {held}"));
        Ok(())
    })?;

    let name = format!("integrity qd=full lba={block_bytes}");
    check(&name, || {
        let depth = INTEGRITY_QUEUE_DEPTH.min(target.controller.cap().max_queue_entries());
        let mut qpair = target.queue_pair(depth as u16)?;
        let capacity = qpair.capacity();
        let pool = target.pool(extent_bytes, capacity)?;
        let (report, held) = integrity_phase(target, &mut qpair, &pool, region_blocks, max_blocks, capacity)?;
        if report.max_in_flight != capacity || !report.queue_full_checked {
            return Err(format!("reached {} of {capacity} in flight; the queue was never full", report.max_in_flight));
        }
        target.ok(
            &name,
            format!(
                "{report}, {capacity} in flight (capacity), a submit to the full queue handed the request back, generations 1/2/3 hold {held}"
            ),
        );
        Ok(())
    })
}

#[derive(Debug, Default)]
struct PhaseReport {
    blocks: u64,
    writes: usize,
    reads: usize,
    max_in_flight: usize,
    queue_full_checked: bool,
}

impl PhaseReport {
    fn add(&mut self, batch: &BatchReport, reads: bool) {
        if reads {
            self.reads += batch.commands;
        } else {
            self.writes += batch.commands;
        }
        self.max_in_flight = self.max_in_flight.max(batch.max_in_flight);
        self.queue_full_checked |= batch.queue_full_checked;
    }
}

impl fmt::Display for PhaseReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} blocks, {} writes and {} reads verified", self.blocks, self.writes, self.reads)
    }
}

/// Writes generation 1 over the region, then two more generations over
/// random halves, reading and checking the whole region after each later
/// generation. Returns how many blocks each generation holds at the end.
fn integrity_phase(
    target: &Target,
    qpair: &mut QueuePair,
    pool: &DmaPool,
    base: u64,
    max_blocks: u32,
    depth: usize,
) -> Outcome<(PhaseReport, String)> {
    let ns = &target.ns;
    let mut rng = Rng::new(target.seed, base ^ depth as u64);
    let mut model = Model::new(base, INTEGRITY_REGION_BLOCKS, Expect::Zeroes);
    let mut report = PhaseReport { blocks: INTEGRITY_REGION_BLOCKS, ..PhaseReport::default() };
    for generation in 1..=INTEGRITY_GENERATIONS {
        let mut extents = random_extents(&mut rng, base, INTEGRITY_REGION_BLOCKS, max_blocks);
        if generation > 1 {
            // Disjoint extents, so no two writes in flight overlap.
            extents.truncate(extents.len() / 2);
        }
        let ops: Vec<Op> = extents.into_iter().map(|(slba, blocks)| Op::Write { slba, blocks, generation }).collect();
        let batch = run_batch(qpair, ns, pool, &mut model, &ops, depth)
            .map_err(|e| format!("generation {generation} writes: {e}"))?;
        report.add(&batch, false);
        if generation > 1 {
            let batch = verify_region(qpair, ns, pool, &mut model, &mut rng, max_blocks, depth)
                .map_err(|e| format!("reads after generation {generation}: {e}"))?;
            report.add(&batch, true);
        }
    }
    let held: Vec<usize> = (1..=INTEGRITY_GENERATIONS)
        .map(|generation| (base..model.end()).filter(|&lba| model.expect(lba) == lba_stamp(lba, generation)).count())
        .collect();
    let held_text = held.iter().map(usize::to_string).collect::<Vec<_>>().join("/");
    if held.contains(&0) {
        return Err(format!("a generation holds no blocks: {held_text}"));
    }
    Ok((report, held_text))
}

impl fmt::Display for BatchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} commands, {} blocks", self.commands, self.blocks)
    }
}

// ---------------------------------------------------------------------------
// sizes

/// Where a transfer's buffer starts within its first page: aligned, the
/// smallest dword offset, a sector in, and the last dword of the page (so
/// PRP1 covers just 4 bytes).
const BUFFER_OFFSETS: [usize; 4] = [0, 4, 512, PAGE_SIZE - 4];

fn sizes(target: &Target) -> Outcome {
    let ns = &target.ns;
    let block_bytes = target.block_bytes;
    let mdts_bytes = ns.max_transfer_bytes() as usize;
    let reported = target.controller.max_transfer_bytes();
    if reported != Some(mdts_bytes as u64) {
        return Err(format!("the namespace allows {mdts_bytes}-byte transfers, Identify MDTS says {reported:?}"));
    }
    let mut sizes: Vec<usize> = vec![
        block_bytes,
        2 * block_bytes,
        PAGE_SIZE - block_bytes,
        PAGE_SIZE,
        PAGE_SIZE + block_bytes,
        2 * PAGE_SIZE - block_bytes,
        2 * PAGE_SIZE,
        2 * PAGE_SIZE + block_bytes,
        3 * PAGE_SIZE,
        mdts_bytes / 2 + block_bytes,
        mdts_bytes - block_bytes,
        mdts_bytes,
    ];
    let mut power = 4 * PAGE_SIZE;
    while power < mdts_bytes {
        sizes.push(power);
        power *= 2;
    }
    sizes.retain(|&size| size > 0 && size.is_multiple_of(block_bytes) && size <= mdts_bytes);
    sizes.sort_unstable();
    sizes.dedup();

    let mut qpair = target.queue_pair(4)?;
    let pool = target.pool(mdts_bytes + 2 * PAGE_SIZE, 2)?;
    let mut lba = 0u64;
    let mut case = 0u64;
    for &size in &sizes {
        let name = format!("sizes lba={block_bytes} bytes={size}");
        check(&name, || {
            for (index, &write_offset) in BUFFER_OFFSETS.iter().enumerate() {
                let read_offset = BUFFER_OFFSETS[(index + 1) % BUFFER_OFFSETS.len()];
                let blocks = target.blocks(size);
                if lba + blocks > ns.capacity_blocks() {
                    lba = 0;
                }
                case += 1;
                size_case(target, &mut qpair, &pool, lba, size, write_offset, read_offset, case)
                    .map_err(|e| format!("written from offset {write_offset}, read to offset {read_offset}: {e}"))?;
                lba += blocks;
            }
            target.ok(&name, format!("{}, buffer offsets {BUFFER_OFFSETS:?}", prp_shape(0, size)));
            Ok(())
        })?;
    }

    let name = format!("sizes lba={block_bytes} mdts+1 block");
    check(&name, || {
        let too_large = mdts_bytes + block_bytes;
        let want = RequestError::TooLarge { bytes: too_large as u64, max_bytes: mdts_bytes as u64 };
        let buffer = take(&pool)?;
        expect_refused(ns.write(0, IoBuffer::range(buffer, 0, too_large), false, 0), &want, "write")?;
        let buffer = take(&pool)?;
        expect_refused(ns.read(0, IoBuffer::range(buffer, 0, too_large), 0), &want, "read")?;
        // The device enforces the same limit (NVMe Base 2.0 §5.17.2.1,
        // MDTS): a hand-built command one block over fails without moving
        // data, so the driver's limit is the device's.
        let blocks = target.blocks(too_large) as u32;
        for (what, command) in [
            ("hand-built write", nvm::write(ns.nsid(), 0, blocks, false)),
            ("hand-built read", nvm::read(ns.nsid(), 0, blocks)),
        ] {
            let request = Request {
                command,
                buffer: Some(IoBuffer::range(take(&pool)?, 0, too_large)),
                metadata: None,
                token: 0,
            };
            run_expecting(&mut qpair, Ok(request), StatusCode::Generic(GenericStatus::InvalidFieldInCommand), what)?;
        }
        target.ok(
            &name,
            format!(
                "{too_large} bytes refused with TooLarge (max {mdts_bytes}) before submission; the device refuses it too with Invalid Field in Command"
            ),
        );
        Ok(())
    })?;

    let name = format!("sizes lba={block_bytes} buffer shape");
    check(&name, || {
        let buffer = take(&pool)?;
        let iova = buffer.iova() + 2;
        expect_refused(
            ns.read(0, IoBuffer::range(buffer, 2, block_bytes), 0),
            &RequestError::Misaligned { iova },
            "read into a buffer at offset 2",
        )?;
        let buffer = take(&pool)?;
        expect_refused(
            ns.read(0, IoBuffer::range(buffer, 0, block_bytes + WORD_BYTES), 0),
            &RequestError::NotBlockMultiple {
                bytes: (block_bytes + WORD_BYTES) as u64,
                block_size: block_bytes as u32,
            },
            "read of a block and a dword",
        )?;
        let buffer = take(&pool)?;
        let capacity = ns.capacity_blocks();
        expect_refused(
            ns.write(capacity - 1, IoBuffer::range(buffer, 0, 2 * block_bytes), false, 0),
            &RequestError::LbaOutOfRange { slba: capacity - 1, blocks: 2, capacity_blocks: capacity },
            "write across the namespace end",
        )?;
        target.ok(
            &name,
            "offset 2 refused as Misaligned, a partial block as NotBlockMultiple, past the end as LbaOutOfRange",
        );
        Ok(())
    })
}

/// How PRPs describe `len` bytes starting `offset` bytes into a page.
fn prp_shape(offset: usize, len: usize) -> String {
    let first = PAGE_SIZE - offset % PAGE_SIZE;
    if len <= first {
        "PRP1 only".into()
    } else {
        let pages = (len - first).div_ceil(PAGE_SIZE);
        if pages == 1 {
            "PRP1+PRP2".into()
        } else {
            format!("PRP list of {pages} entries")
        }
    }
}

/// Writes `size` bytes at `lba` from `write_offset` in one buffer, reads
/// them back to `read_offset` in another, and checks every block and the
/// bytes around the read range (nothing written outside it).
#[allow(clippy::too_many_arguments)]
fn size_case(
    target: &Target,
    qpair: &mut QueuePair,
    pool: &DmaPool,
    lba: u64,
    size: usize,
    write_offset: usize,
    read_offset: usize,
    generation: u64,
) -> Outcome {
    let ns = &target.ns;
    let block_bytes = target.block_bytes;
    let blocks = size / block_bytes;
    let stamp = |i: usize| Stamp { tag: lba + i as u64, generation };

    let buffer = take(pool)?;
    for i in 0..blocks {
        stamp_block(&buffer, write_offset + i * block_bytes, block_bytes, stamp(i));
    }
    run_ok(qpair, ns.write(lba, IoBuffer::range(buffer, write_offset, size), false, generation), "write")?;

    let buffer = take(pool)?;
    let guarded_end = (read_offset + size + PAGE_SIZE).min(buffer.len());
    poison_all(&buffer, 0, guarded_end);
    let completion = run_ok(qpair, ns.read(lba, IoBuffer::range(buffer, read_offset, size), generation), "read")?;
    let returned = completion.buffer.ok_or("the read came back without its buffer")?;
    let memory = returned.buffer();
    for i in 0..blocks {
        check_block(memory, read_offset + i * block_bytes, block_bytes, Expect::Stamp(stamp(i)))
            .map_err(|e| format!("LBA {}: {e}", lba + i as u64))?;
    }
    let outside = (0..read_offset).chain(read_offset + size..guarded_end);
    for offset in outside.step_by(WORD_BYTES) {
        let word = memory.read::<u32>(offset);
        if word != POISON {
            return Err(format!(
                "the read of {size} bytes to offset {read_offset} changed buffer byte {offset} (outside the transfer) to {word:#010x}"
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// threads

const THREADS: usize = 4;
/// Commands in flight per thread.
const THREAD_QUEUE_DEPTH: usize = 16;
/// 4 KiB slots per thread's region.
const THREAD_SLOTS: usize = 256;
/// Mixed reads and writes per thread, after the region is filled.
const THREAD_MIXED_IOS: usize = 6000;
/// Token bits that name the thread; the rest count its I/Os.
const TOKEN_THREAD_SHIFT: u32 = 48;

fn threads(target: &Target) -> Outcome {
    let io_bytes = PAGE_SIZE.max(target.block_bytes);
    let region_blocks = (THREAD_SLOTS * io_bytes / target.block_bytes) as u64;
    if target.ns.capacity_blocks() < THREADS as u64 * region_blocks {
        return Err(format!("the namespace needs at least {} blocks", THREADS as u64 * region_blocks));
    }
    let gate = StartGate::new(THREADS);
    let started = Instant::now();
    let results: Vec<Outcome<ThreadReport>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|index| {
                let gate = &gate;
                scope.spawn(move || {
                    let result = thread_worker(target, index, io_bytes, gate);
                    if result.is_err() {
                        gate.abandon();
                    }
                    result
                })
            })
            .collect();
        handles.into_iter().map(|handle| handle.join().unwrap_or_else(|_| Err("the thread panicked".into()))).collect()
    });
    let elapsed = started.elapsed();
    let mut reports = Vec::new();
    for (index, result) in results.into_iter().enumerate() {
        reports.push(result.map_err(|e| format!("thread {index}: {e}"))?);
    }
    let mut qids: Vec<u16> = reports.iter().map(|r| r.qid).collect();
    qids.sort_unstable();
    qids.dedup();
    if qids.len() != THREADS {
        return Err(format!("threads shared queue ids: {reports:?}"));
    }
    for (index, report) in reports.iter().enumerate() {
        target.ok(
            &format!("threads thread={index}"),
            format!(
                "qid {}, {} tokens each completed once ({} mixed: {} reads, {} writes), data verified, {} in flight at most",
                report.qid, report.tokens, THREAD_MIXED_IOS, report.mixed_reads, report.mixed_writes, report.max_in_flight
            ),
        );
    }
    let tokens: usize = reports.iter().map(|r| r.tokens).sum();
    target.ok(
        "threads",
        format!(
            "{THREADS} queue pairs at depth {THREAD_QUEUE_DEPTH} on disjoint regions, {tokens} tokens, {:.1} s",
            elapsed.as_secs_f64()
        ),
    );
    Ok(())
}

/// Lets the threads start their mixed phase together, without waiting
/// forever when one of them has failed.
#[derive(Debug)]
struct StartGate {
    parties: usize,
    arrived: AtomicUsize,
    abandoned: AtomicBool,
}

impl StartGate {
    fn new(parties: usize) -> Self {
        StartGate { parties, arrived: AtomicUsize::new(0), abandoned: AtomicBool::new(false) }
    }

    fn wait(&self) -> Outcome {
        self.arrived.fetch_add(1, Ordering::AcqRel);
        let started = Instant::now();
        while self.arrived.load(Ordering::Acquire) < self.parties {
            if self.abandoned.load(Ordering::Acquire) {
                return Err("another thread failed before the start".into());
            }
            if started.elapsed() > BATCH_TIMEOUT {
                return Err("the other threads never arrived".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    fn abandon(&self) {
        self.abandoned.store(true, Ordering::Release);
    }
}

#[derive(Debug)]
struct ThreadReport {
    qid: u16,
    tokens: usize,
    mixed_reads: usize,
    mixed_writes: usize,
    max_in_flight: usize,
}

/// One I/O a thread issued.
#[derive(Clone, Copy, Debug)]
struct Issued {
    slot: usize,
    write: bool,
    generation: u64,
}

/// A thread's queue pair, buffers and model of its region.
#[derive(Debug)]
struct Worker<'a> {
    target: &'a Target<'a>,
    index: usize,
    qpair: QueuePair,
    pool: DmaPool,
    base: u64,
    blocks_per_io: usize,
    /// The generation of the last completed write to each slot.
    slot_generation: Vec<u64>,
    slot_busy: Vec<bool>,
    issued: Vec<Issued>,
    completions_per_token: Vec<u8>,
    reaped: Vec<IoCompletion>,
    max_in_flight: usize,
}

impl Worker<'_> {
    fn token(&self, sequence: usize) -> u64 {
        (self.index as u64) << TOKEN_THREAD_SHIFT | sequence as u64
    }

    /// Generations carry the thread's index, so data written by another
    /// thread is recognised as such.
    fn stamp(&self, slot: usize, block: usize, generation: u64) -> Stamp {
        Stamp {
            tag: self.base + (slot * self.blocks_per_io + block) as u64,
            generation: (self.index as u64) << 32 | generation,
        }
    }

    fn issue(&mut self, slot: usize, write: bool) -> Outcome {
        let ns = &self.target.ns;
        let block_bytes = self.target.block_bytes;
        let sequence = self.issued.len();
        let generation = self.slot_generation[slot] + u64::from(write);
        let buffer = take(&self.pool)?;
        let slba = self.base + (slot * self.blocks_per_io) as u64;
        let len = self.blocks_per_io * block_bytes;
        let request = if write {
            for block in 0..self.blocks_per_io {
                let stamp = self.stamp(slot, block, generation);
                stamp_block(&buffer, block * block_bytes, block_bytes, stamp);
            }
            ns.write(slba, IoBuffer::range(buffer, 0, len), false, self.token(sequence))
        } else {
            poison_blocks(&buffer, 0, self.blocks_per_io, block_bytes);
            ns.read(slba, IoBuffer::range(buffer, 0, len), self.token(sequence))
        }
        .map_err(|e| format!("slot {slot}: refused by the driver: {e}"))?;
        self.qpair.submit(request).map_err(|(error, _)| format!("submit: {error:?}"))?;
        self.slot_busy[slot] = true;
        self.issued.push(Issued { slot, write, generation });
        self.completions_per_token.push(0);
        self.max_in_flight = self.max_in_flight.max(self.qpair.in_flight());
        Ok(())
    }

    fn reap(&mut self) -> Outcome {
        let reaped = &mut self.reaped;
        self.qpair.poll(|completion| reaped.push(completion));
        let block_bytes = self.target.block_bytes;
        let mut completions = std::mem::take(&mut self.reaped);
        for completion in completions.drain(..) {
            let token = completion.token;
            let thread = (token >> TOKEN_THREAD_SHIFT) as usize;
            if thread != self.index {
                return Err(format!(
                    "thread {}'s queue pair completed token {token:#x} of thread {thread}",
                    self.index
                ));
            }
            let sequence = (token & ((1 << TOKEN_THREAD_SHIFT) - 1)) as usize;
            let Some(&op) = self.issued.get(sequence) else {
                return Err(format!("a completion carries unused token {token:#x}"));
            };
            self.completions_per_token[sequence] += 1;
            if self.completions_per_token[sequence] > 1 {
                return Err(format!("token {token:#x} ({op:?}) completed twice"));
            }
            if let Err(status) = completion.status {
                return Err(format!("{op:?} failed: {status}"));
            }
            let buffer = completion.buffer.ok_or_else(|| format!("{op:?} came back without its buffer"))?;
            self.slot_busy[op.slot] = false;
            if op.write {
                self.slot_generation[op.slot] = op.generation;
            } else {
                for block in 0..self.blocks_per_io {
                    let stamp = self.stamp(op.slot, block, op.generation);
                    check_block(
                        buffer.buffer(),
                        buffer.offset() + block * block_bytes,
                        block_bytes,
                        Expect::Stamp(stamp),
                    )
                    .map_err(|e| format!("LBA {}: {e}", stamp.tag))?;
                }
            }
        }
        // Keep the allocation for the next poll.
        self.reaped = completions;
        Ok(())
    }

    /// Polls until fewer than `limit` commands are in flight.
    fn wait_below(&mut self, limit: usize) -> Outcome {
        let started = Instant::now();
        let mut polls = 0u32;
        while self.qpair.in_flight() >= limit.max(1) {
            self.reap()?;
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(POLLS_PER_CLOCK_CHECK) && started.elapsed() > BATCH_TIMEOUT {
                return Err(format!(
                    "{} commands still in flight after {} s",
                    self.qpair.in_flight(),
                    BATCH_TIMEOUT.as_secs()
                ));
            }
        }
        Ok(())
    }

    fn drain(&mut self) -> Outcome {
        self.wait_below(1)
    }

    /// Writes or reads every slot once, in order.
    fn sweep(&mut self, write: bool) -> Outcome {
        for slot in 0..THREAD_SLOTS {
            self.wait_below(THREAD_QUEUE_DEPTH)?;
            self.issue(slot, write)?;
        }
        self.drain()
    }
}

fn thread_worker(target: &Target, index: usize, io_bytes: usize, gate: &StartGate) -> Outcome<ThreadReport> {
    let qpair = target.queue_pair(THREAD_QUEUE_DEPTH as u16 + 1)?;
    let pool = target.pool(io_bytes, THREAD_QUEUE_DEPTH)?;
    let blocks_per_io = io_bytes / target.block_bytes;
    let total = 2 * THREAD_SLOTS + THREAD_MIXED_IOS;
    let mut worker = Worker {
        target,
        index,
        qpair,
        pool,
        base: (index * THREAD_SLOTS * blocks_per_io) as u64,
        blocks_per_io,
        slot_generation: vec![0; THREAD_SLOTS],
        slot_busy: vec![false; THREAD_SLOTS],
        issued: Vec::with_capacity(total),
        completions_per_token: Vec::with_capacity(total),
        reaped: Vec::with_capacity(THREAD_QUEUE_DEPTH),
        max_in_flight: 0,
    };
    worker.sweep(true).map_err(|e| format!("fill: {e}"))?;
    gate.wait()?;

    let mut rng = Rng::new(target.seed, 0x7468_7265_6164 + index as u64);
    let (mut reads, mut writes) = (0, 0);
    for _ in 0..THREAD_MIXED_IOS {
        worker.wait_below(THREAD_QUEUE_DEPTH).map_err(|e| format!("mixed: {e}"))?;
        // A slot with nothing in flight, so no read races a write.
        let start = rng.below(THREAD_SLOTS as u64) as usize;
        let slot = (0..THREAD_SLOTS)
            .map(|i| (start + i) % THREAD_SLOTS)
            .find(|&slot| !worker.slot_busy[slot])
            .ok_or("every slot is busy")?;
        let write = rng.below(2) == 0;
        if write {
            writes += 1;
        } else {
            reads += 1;
        }
        worker.issue(slot, write).map_err(|e| format!("mixed: {e}"))?;
    }
    worker.drain().map_err(|e| format!("mixed: {e}"))?;
    worker.sweep(false).map_err(|e| format!("final reads: {e}"))?;

    if let Some(sequence) = worker.completions_per_token.iter().position(|&n| n != 1) {
        return Err(format!(
            "token {:#x} ({:?}) completed {} times",
            worker.token(sequence),
            worker.issued[sequence],
            worker.completions_per_token[sequence]
        ));
    }
    let stats = worker.qpair.stats();
    let tokens = worker.issued.len();
    if stats.submitted != tokens as u64 || stats.completed != tokens as u64 || stats.spurious_completions != 0 {
        return Err(format!(
            "{tokens} tokens but queue stats say {} submitted, {} completed, {} spurious",
            stats.submitted, stats.completed, stats.spurious_completions
        ));
    }
    Ok(ThreadReport {
        qid: worker.qpair.qid(),
        tokens,
        mixed_reads: reads,
        mixed_writes: writes,
        max_in_flight: worker.max_in_flight,
    })
}

// ---------------------------------------------------------------------------
// zns

/// Zone Appends in flight at once, and rounds of them.
const APPENDS_IN_FLIGHT: usize = 32;
const APPEND_ROUNDS: usize = 8;
const APPEND_BYTES: usize = 4096;
/// Tags of append payloads: "APPD" above the append's number.
const APPEND_TAG: u64 = 0x4150_5044 << 32;

/// Zone commands for one zoned namespace through one queue pair.
#[derive(Debug)]
struct Zones<'a> {
    target: &'a Target<'a>,
    qpair: QueuePair,
    /// Buffers for reads, big appends and zone reports.
    pool: DmaPool,
    zone_size_blocks: u64,
    zone_count: u64,
}

impl<'a> Zones<'a> {
    fn new(target: &'a Target<'a>, depth: u16) -> Outcome<Self> {
        let zones = *target.ns.zones().ok_or("the namespace is not zoned")?;
        let buffer_bytes = (target.ns.max_transfer_bytes() as usize).min(1 << 20) + PAGE_SIZE;
        Ok(Zones {
            target,
            qpair: target.queue_pair(depth)?,
            pool: target.pool(buffer_bytes, 2)?,
            zone_size_blocks: zones.zone_size_blocks,
            zone_count: zones.zone_count,
        })
    }

    fn zslba(&self, zone: u64) -> u64 {
        zone * self.zone_size_blocks
    }

    /// Report Zones from `slba` with room for `room` descriptors: the
    /// header's zone count and the descriptors that came back.
    fn report(
        &mut self,
        slba: u64,
        filter: ReportFilter,
        partial: bool,
        room: usize,
    ) -> Outcome<(u64, Vec<ZoneDescriptor>)> {
        let len = REPORT_HEADER_SIZE + room * ZONE_DESCRIPTOR_SIZE;
        let buffer = take(&self.pool)?;
        buffer.fill(0, len, 0xFF);
        let request = self.target.ns.report_zones(slba, filter, partial, IoBuffer::range(buffer, 0, len), 0);
        let completion = run_ok(&mut self.qpair, request, "report zones")?;
        let buffer = completion.buffer.ok_or("the report came back without its buffer")?;
        let mut data = vec![0u8; buffer.len()];
        buffer.buffer().copy_out(buffer.offset(), &mut data);
        parse_report_zones(&data).map_err(|e| format!("report zones: {e}"))
    }

    /// One zone's descriptor.
    fn zone(&mut self, zone: u64) -> Outcome<ZoneDescriptor> {
        let zslba = self.zslba(zone);
        let (_, zones) = self.report(zslba, ReportFilter::All, true, 1)?;
        match zones.first() {
            Some(descriptor) if descriptor.zslba == zslba => Ok(*descriptor),
            other => Err(format!("a report from LBA {zslba} returned {other:?}, not zone {zone}")),
        }
    }

    /// Requires zone `zone` to be in `state`, with its write pointer at
    /// `zslba + written` when `written` is given.
    fn expect(&mut self, zone: u64, state: ZoneState, written: Option<u64>) -> Outcome {
        let descriptor = self.zone(zone)?;
        if descriptor.state != state {
            return Err(format!("zone {zone} is {:?}, expected {state:?} ({descriptor:?})", descriptor.state));
        }
        if let Some(written) = written {
            let wp = descriptor.zslba + written;
            if descriptor.wp != wp {
                return Err(format!("zone {zone} has its write pointer at {}, expected {wp}", descriptor.wp));
            }
        }
        Ok(())
    }

    fn send(&mut self, zone: u64, action: ZoneSendAction) -> Outcome {
        let request = self.target.ns.zone_send(self.zslba(zone), action, false, 0);
        run_ok(&mut self.qpair, request, &format!("{action:?} zone {zone}")).map(drop)
    }

    fn send_expecting(&mut self, zone: u64, action: ZoneSendAction, want: CommandSpecificStatus) -> Outcome<Status> {
        let request = self.target.ns.zone_send(self.zslba(zone), action, false, 0);
        let what = format!("{action:?} zone {zone}");
        run_expecting(&mut self.qpair, request, StatusCode::CommandSpecific(want), &what)
    }

    fn reset_all(&mut self) -> Outcome {
        let request = self.target.ns.zone_send(0, ZoneSendAction::Reset, true, 0);
        run_ok(&mut self.qpair, request, "reset all zones").map(drop)
    }

    /// A write request of `blocks` stamped blocks at `slba`.
    fn write_request(&self, slba: u64, blocks: u64) -> Outcome<Result<Request, RequestError>> {
        let block_bytes = self.target.block_bytes;
        let buffer = take(&self.pool)?;
        for i in 0..blocks as usize {
            stamp_block(&buffer, i * block_bytes, block_bytes, Stamp { tag: slba + i as u64, generation: 1 });
        }
        let len = blocks as usize * block_bytes;
        Ok(self.target.ns.write(slba, IoBuffer::range(buffer, 0, len), false, 0))
    }

    fn write(&mut self, slba: u64, blocks: u64) -> Outcome {
        let request = self.write_request(slba, blocks)?;
        run_ok(&mut self.qpair, request, &format!("write {blocks} blocks at {slba}")).map(drop)
    }

    fn write_expecting(&mut self, slba: u64, blocks: u64, want: CommandSpecificStatus) -> Outcome<Status> {
        let request = self.write_request(slba, blocks)?;
        let what = format!("write {blocks} blocks at {slba}");
        run_expecting(&mut self.qpair, request, StatusCode::CommandSpecific(want), &what)
    }

    /// One Zone Append of `blocks` stamped blocks: the LBA the controller
    /// chose, or the status it failed with. The buffer goes straight back
    /// to the pool.
    fn append(&mut self, zone: u64, blocks: u64) -> Outcome<Result<u64, Status>> {
        let block_bytes = self.target.block_bytes;
        let buffer = take(&self.pool)?;
        for i in 0..blocks as usize {
            stamp_block(&buffer, i * block_bytes, block_bytes, Stamp { tag: APPEND_TAG, generation: i as u64 });
        }
        let len = blocks as usize * block_bytes;
        let request = self.target.ns.zone_append(self.zslba(zone), IoBuffer::range(buffer, 0, len), false, 0);
        let what = format!("append {blocks} blocks to zone {zone}");
        let completion = execute(&mut self.qpair, request, &what)?;
        match completion.status {
            Ok(()) => Ok(Ok(completion.result_u64())),
            Err(IoError::Device(status)) => Ok(Err(status)),
            Err(error) => Err(format!("{what}: {error}")),
        }
    }
}

/// Requires a typed status that says `want`, with its raw SCT/SC as the
/// spec numbers it.
fn expect_raw(status: Status, sct: StatusCodeType, sc: u8) -> Outcome {
    if status.sct == sct && status.sc == sc {
        Ok(())
    } else {
        Err(format!("{status}: expected SCT {:X}h / SC {sc:02X}h", sct.raw()))
    }
}

fn zns(target: &Target) -> Outcome {
    if target.ns.zones().is_none() {
        return not_zoned(target);
    }
    let mut zones = Zones::new(target, 64)?;
    if zones.zone_count < 8 {
        return Err(format!("{} zones; the scenario needs 8", zones.zone_count));
    }
    zones.reset_all()?;
    check("zns report", || {
        let (reported, descriptors) = zones.report(0, ReportFilter::All, false, zones.zone_count as usize)?;
        if reported != zones.zone_count || descriptors.len() as u64 != zones.zone_count {
            return Err(format!(
                "{reported} zones reported, {} descriptors, {} zones expected",
                descriptors.len(),
                zones.zone_count
            ));
        }
        for (index, zone) in descriptors.iter().enumerate() {
            let zslba = zones.zslba(index as u64);
            if zone.zslba != zslba || zone.wp != zslba || zone.state != ZoneState::Empty {
                return Err(format!("zone {index} after reset: {zone:?}"));
            }
            if zone.zcap == 0 || zone.zcap > zones.zone_size_blocks {
                return Err(format!("zone {index} has capacity {}", zone.zcap));
            }
        }
        target.ok(
            "zns report",
            format!(
                "{} zones of {} blocks, all Empty with the write pointer at the zone start",
                zones.zone_count, zones.zone_size_blocks
            ),
        );
        Ok(())
    })?;
    check("zns append", || zns_appends(target, &mut zones))?;
    check("zns append limit", || zns_append_limit(target, &mut zones))?;
    check("zns states", || zns_states(target, &mut zones))?;
    check("zns invalid write", || zns_invalid_writes(target, &mut zones))?;
    check("zns reset all", || {
        zones.reset_all()?;
        let (empty, _) = zones.report(0, ReportFilter::Empty, false, 1)?;
        if empty != zones.zone_count {
            return Err(format!("{empty} of {} zones Empty", zones.zone_count));
        }
        target.ok("zns reset all", format!("select-all reset left {empty} zones Empty"));
        Ok(())
    })
}

/// Concurrent Zone Appends to zone 0: the LBAs they return tile the
/// written range exactly, and each holds the payload its append carried.
fn zns_appends(target: &Target, zones: &mut Zones) -> Outcome {
    let block_bytes = target.block_bytes;
    let blocks_per_append = target.blocks(APPEND_BYTES);
    let appends = APPENDS_IN_FLIGHT * APPEND_ROUNDS;
    let pool = target.pool(APPEND_BYTES, APPENDS_IN_FLIGHT)?;
    let zslba = zones.zslba(0);
    // (assigned LBA, append number)
    let mut placed: Vec<(u64, u64)> = Vec::with_capacity(appends);
    let mut completions_per_append = vec![0u8; appends];
    let mut reaped = Vec::with_capacity(APPENDS_IN_FLIGHT);
    for round in 0..APPEND_ROUNDS {
        for i in 0..APPENDS_IN_FLIGHT {
            let id = (round * APPENDS_IN_FLIGHT + i) as u64;
            let buffer = take(&pool)?;
            for block in 0..blocks_per_append as usize {
                stamp_block(
                    &buffer,
                    block * block_bytes,
                    block_bytes,
                    Stamp { tag: APPEND_TAG | id, generation: block as u64 },
                );
            }
            let request = target
                .ns
                .zone_append(zslba, IoBuffer::new(buffer).truncate(APPEND_BYTES), false, id)
                .map_err(|e| format!("append {id}: refused by the driver: {e}"))?;
            zones.qpair.submit(request).map_err(|(error, _)| format!("append {id}: {error:?}"))?;
        }
        // All of them reach the controller with one doorbell update.
        if zones.qpair.in_flight() != APPENDS_IN_FLIGHT {
            return Err(format!("{} appends in flight", zones.qpair.in_flight()));
        }
        let started = Instant::now();
        while zones.qpair.in_flight() > 0 {
            zones.qpair.poll(|completion| reaped.push(completion));
            for completion in reaped.drain(..) {
                let id = completion.token;
                let count = completions_per_append
                    .get_mut(id as usize)
                    .ok_or_else(|| format!("a completion carries unused token {id}"))?;
                *count += 1;
                if *count > 1 {
                    return Err(format!("append {id} completed twice"));
                }
                if let Err(status) = completion.status {
                    return Err(format!("append {id} failed: {status}"));
                }
                placed.push((completion.result_u64(), id));
            }
            if started.elapsed() > BATCH_TIMEOUT {
                return Err(format!("{} appends never completed", zones.qpair.in_flight()));
            }
        }
    }
    if let Some(id) = completions_per_append.iter().position(|&n| n != 1) {
        return Err(format!("append {id} completed {} times", completions_per_append[id]));
    }
    placed.sort_unstable();
    for (index, &(lba, id)) in placed.iter().enumerate() {
        let want = zslba + index as u64 * blocks_per_append;
        if lba != want {
            return Err(format!(
                "sorted by assigned LBA, append {index} (number {id}) sits at {lba}, expected {want}: the appends do not tile [{zslba}, {})",
                zslba + appends as u64 * blocks_per_append
            ));
        }
    }
    let written = appends as u64 * blocks_per_append;
    zones.expect(0, ZoneState::ImplicitlyOpened, Some(written))?;

    // Read the zone back: each block holds what its append carried.
    let chunk_blocks = target.blocks(zones.pool.buffer_len() - PAGE_SIZE).min(written);
    let mut lba = zslba;
    while lba < zslba + written {
        let blocks = chunk_blocks.min(zslba + written - lba);
        let buffer = take(&zones.pool)?;
        let len = blocks as usize * block_bytes;
        poison_blocks(&buffer, 0, blocks as usize, block_bytes);
        let completion =
            run_ok(&mut zones.qpair, target.ns.read(lba, IoBuffer::range(buffer, 0, len), 0), "read back")?;
        let buffer = completion.buffer.ok_or("a read came back without its buffer")?;
        for i in 0..blocks {
            let at = lba + i;
            let index = ((at - zslba) / blocks_per_append) as usize;
            let id = placed[index].1;
            let expect = Expect::Stamp(Stamp { tag: APPEND_TAG | id, generation: (at - zslba) % blocks_per_append });
            check_block(buffer.buffer(), i as usize * block_bytes, block_bytes, expect)
                .map_err(|e| format!("LBA {at}, assigned to append {id}: {e}"))?;
        }
        lba += blocks;
    }
    target.ok(
        "zns append",
        format!(
            "{APPEND_ROUNDS} rounds of {APPENDS_IN_FLIGHT} appends in flight, {appends} distinct LBAs tile [{zslba}, {}), each holds its own payload; zone ImplicitlyOpened, write pointer at the end",
            zslba + written
        ),
    );
    Ok(())
}

/// An append of exactly the Zone Append Size Limit succeeds at the write
/// pointer; one block more is refused by the driver and by the device.
fn zns_append_limit(target: &Target, zones: &mut Zones) -> Outcome {
    let limit_bytes = target.ns.zones().expect("zoned").zone_append_max_bytes as usize;
    let block_bytes = target.block_bytes;
    if limit_bytes + block_bytes > zones.pool.buffer_len() {
        return Err(format!("a {limit_bytes}-byte append does not fit the buffers"));
    }
    let before = zones.zone(0)?;
    let limit_blocks = target.blocks(limit_bytes);
    let landed =
        zones.append(0, limit_blocks)?.map_err(|status| format!("an append of {limit_bytes} bytes: {status}"))?;
    if landed != before.wp {
        return Err(format!("an append landed at {landed}, the write pointer was {}", before.wp));
    }
    let over = limit_bytes + block_bytes;
    let buffer = take(&zones.pool)?;
    expect_refused(
        target.ns.zone_append(zones.zslba(0), IoBuffer::range(buffer, 0, over), false, 0),
        &RequestError::TooLarge { bytes: over as u64, max_bytes: limit_bytes as u64 },
        "an append one block over the limit",
    )?;
    let request = Request {
        command: zns_cmd::zone_append(target.ns.nsid(), zones.zslba(0), (over / block_bytes) as u32, false),
        buffer: Some(IoBuffer::range(take(&zones.pool)?, 0, over)),
        metadata: None,
        token: 0,
    };
    let status = run_expecting(
        &mut zones.qpair,
        Ok(request),
        StatusCode::Generic(GenericStatus::InvalidFieldInCommand),
        "a hand-built append one block over the limit",
    )?;
    let zasl = target.controller.identify_zns().map(|z| z.zasl);
    zones.expect(0, ZoneState::ImplicitlyOpened, Some(before.wp - before.zslba + limit_blocks))?;
    target.ok(
        "zns append limit",
        format!(
            "{limit_bytes} bytes (ZASL {zasl:?}) appended at the write pointer; {over} bytes refused with TooLarge, and by the device with {status}"
        ),
    );
    Ok(())
}

/// Explicit open, close, finish and reset, seen through zone reports,
/// including partial and filtered ones. Zone 0 stays implicitly opened
/// from the appends.
fn zns_states(target: &Target, zones: &mut Zones) -> Outcome {
    let written = 16;
    // Zone 1: Empty → (close refused) → Explicitly Opened → written →
    // Closed → Explicitly Opened → Full → Empty.
    zones.expect(1, ZoneState::Empty, Some(0))?;
    let refused = zones.send_expecting(1, ZoneSendAction::Close, CommandSpecificStatus::InvalidZoneStateTransition)?;
    expect_raw(refused, StatusCodeType::CommandSpecific, 0xBF)?;
    zones.send(1, ZoneSendAction::Open)?;
    zones.expect(1, ZoneState::ExplicitlyOpened, Some(0))?;
    zones.write(zones.zslba(1), written)?;
    zones.expect(1, ZoneState::ExplicitlyOpened, Some(written))?;
    zones.send(1, ZoneSendAction::Close)?;
    zones.expect(1, ZoneState::Closed, Some(written))?;
    zones.send(1, ZoneSendAction::Open)?;
    zones.expect(1, ZoneState::ExplicitlyOpened, Some(written))?;
    zones.send(1, ZoneSendAction::Finish)?;
    zones.expect(1, ZoneState::Full, None)?;
    zones.write_expecting(zones.zslba(1) + written, 1, CommandSpecificStatus::ZoneIsFull)?;
    zones.send(1, ZoneSendAction::Reset)?;
    zones.expect(1, ZoneState::Empty, Some(0))?;
    target.ok(
        "zns states",
        format!(
            "zone 1: Empty, close refused ({refused}), open, {written} blocks written, close, open, finish (a write then fails as Zone Is Full), reset; the write pointer followed"
        ),
    );

    // One zone in each state, then filtered and partial reports.
    zones.send(2, ZoneSendAction::Open)?;
    zones.write(zones.zslba(2), 8)?;
    zones.send(2, ZoneSendAction::Close)?;
    zones.send(3, ZoneSendAction::Finish)?;
    zones.send(4, ZoneSendAction::Open)?;
    let want: [(ReportFilter, &[u64]); 4] = [
        (ReportFilter::ImplicitlyOpened, &[0]),
        (ReportFilter::Closed, &[2]),
        (ReportFilter::Full, &[3]),
        (ReportFilter::ExplicitlyOpened, &[4]),
    ];
    for (filter, expected) in want {
        let (reported, descriptors) = zones.report(0, filter, false, 4)?;
        let got: Vec<u64> = descriptors.iter().map(|d| d.zslba / zones.zone_size_blocks).collect();
        if reported != expected.len() as u64 || got != expected {
            return Err(format!("report {filter:?}: {reported} zones, {got:?}; expected {expected:?}"));
        }
    }
    let empty = zones.zone_count - 4;
    let (reported, descriptors) = zones.report(0, ReportFilter::Empty, false, 2)?;
    if reported != empty || descriptors.len() != 2 {
        return Err(format!(
            "report Empty with room for 2, not partial: {reported} zones and {} descriptors; expected {empty} and 2",
            descriptors.len()
        ));
    }
    if descriptors.iter().map(|d| d.zslba).collect::<Vec<_>>() != [zones.zslba(1), zones.zslba(5)] {
        return Err(format!("report Empty lists {descriptors:?}, expected zones 1 and 5"));
    }
    let (reported, descriptors) = zones.report(0, ReportFilter::Empty, true, 2)?;
    if reported != 2 || descriptors.len() != 2 {
        return Err(format!(
            "partial report Empty with room for 2: {reported} zones and {} descriptors",
            descriptors.len()
        ));
    }
    // A report from inside a zone starts with that zone.
    let inside = zones.zslba(2) + 5;
    let (_, descriptors) = zones.report(inside, ReportFilter::All, true, 2)?;
    if descriptors.first().map(|d| d.zslba) != Some(zones.zslba(2)) {
        return Err(format!("a report from LBA {inside} starts with {:?}, expected zone 2", descriptors.first()));
    }
    target.ok(
        "zns report filters",
        format!(
            "ImplicitlyOpened [0], Closed [2], Full [3], ExplicitlyOpened [4]; Empty counts {empty} (room for 2), partial counts 2; a report from inside zone 2 starts there"
        ),
    );
    // Back to Empty, releasing their resources.
    for zone in [2, 3, 4] {
        zones.send(zone, ZoneSendAction::Reset)?;
    }
    Ok(())
}

/// Writes that miss the write pointer fail with Zone Invalid Write
/// (SCT 1h, SC BCh in the ZNS Command Set status values); the one at it
/// succeeds.
fn zns_invalid_writes(target: &Target, zones: &mut Zones) -> Outcome {
    let invalid = CommandSpecificStatus::ZoneInvalidWrite;
    // An Empty zone: its write pointer is its start.
    let empty_zone = 5;
    zones.expect(empty_zone, ZoneState::Empty, Some(0))?;
    let status = zones.write_expecting(zones.zslba(empty_zone) + 8, 1, invalid)?;
    expect_raw(status, StatusCodeType::CommandSpecific, 0xBC)?;
    zones.expect(empty_zone, ZoneState::Empty, Some(0))?;
    // An open zone: ahead of and behind the write pointer, then at it.
    let open = zones.zone(0)?;
    let ahead = zones.write_expecting(open.wp + 1, 1, invalid)?;
    expect_raw(ahead, StatusCodeType::CommandSpecific, 0xBC)?;
    let behind = zones.write_expecting(open.wp - 1, 1, invalid)?;
    expect_raw(behind, StatusCodeType::CommandSpecific, 0xBC)?;
    zones.write(open.wp, 1)?;
    zones.expect(0, ZoneState::ImplicitlyOpened, Some(open.wp - open.zslba + 1))?;
    target.ok(
        "zns invalid write",
        format!(
            "a write 8 blocks into an Empty zone, and writes one block ahead of and behind an open zone's write pointer, fail with {status}; a write at the write pointer succeeds"
        ),
    );
    Ok(())
}

/// Zone commands on a conventional namespace are refused by the driver.
fn not_zoned(target: &Target) -> Outcome {
    let ns = &target.ns;
    let want = RequestError::NotZoned { nsid: ns.nsid() };
    let pool = target.pool(PAGE_SIZE, 1)?;
    expect_refused(
        ns.zone_append(0, IoBuffer::range(take(&pool)?, 0, target.block_bytes), false, 0),
        &want,
        "zone append",
    )?;
    expect_refused(ns.zone_send(0, ZoneSendAction::Open, false, 0), &want, "open zone")?;
    expect_refused(ns.zone_send(0, ZoneSendAction::Reset, true, 0), &want, "reset all zones")?;
    expect_refused(
        ns.report_zones(0, ReportFilter::All, false, IoBuffer::new(take(&pool)?), 0),
        &want,
        "report zones",
    )?;
    target.ok("zns not zoned", "zone append, open, reset all and report zones refused with NotZoned");
    Ok(())
}

// ---------------------------------------------------------------------------
// zns-active

/// Opens as many zones as Max Active Resources allows, one by write, one
/// by append and the rest explicitly; one more zone cannot be opened,
/// written or appended to (Too Many Active Zones, SCT 1h / SC BDh), until a
/// zone is finished. A Closed zone still counts as active.
fn zns_active(target: &Target) -> Outcome {
    let max_active = target
        .ns
        .zones()
        .ok_or("the namespace is not zoned")?
        .max_active_zones
        .ok_or("the namespace has no active zone limit")? as u64;
    let mut zones = Zones::new(target, 8)?;
    if max_active < 2 || zones.zone_count < max_active + 1 {
        return Err(format!(
            "max active {max_active} with {} zones; the scenario needs at least 2 and one zone more",
            zones.zone_count
        ));
    }
    zones.reset_all()?;
    let too_many = CommandSpecificStatus::TooManyActiveZones;
    let extra = max_active;
    check("zns-active limit", || {
        zones.write(zones.zslba(0), 8)?;
        zones.append(1, 8)?.map_err(|status| format!("append to zone 1: {status}"))?;
        for zone in 2..max_active {
            zones.send(zone, ZoneSendAction::Open)?;
        }
        let opened = zones.send_expecting(extra, ZoneSendAction::Open, too_many)?;
        expect_raw(opened, StatusCodeType::CommandSpecific, 0xBD)?;
        let written = zones.write_expecting(zones.zslba(extra), 1, too_many)?;
        expect_raw(written, StatusCodeType::CommandSpecific, 0xBD)?;
        match zones.append(extra, 1)? {
            Err(status) if status.code() == StatusCode::CommandSpecific(too_many) => {}
            other => return Err(format!("append to zone {extra}: {other:?}, expected Too Many Active Zones")),
        }
        zones.expect(extra, ZoneState::Empty, Some(0))?;
        // The refused commands leave every active zone active (Open or
        // Closed: a controller may close an implicitly opened zone to make
        // room for an open one).
        let mut states = Vec::new();
        for zone in 0..max_active {
            let descriptor = zones.zone(zone)?;
            let active = matches!(
                descriptor.state,
                ZoneState::ImplicitlyOpened | ZoneState::ExplicitlyOpened | ZoneState::Closed
            );
            if !active {
                return Err(format!("zone {zone} is no longer active: {descriptor:?}"));
            }
            states.push(format!("{zone} {:?}", descriptor.state));
        }
        target.ok(
            "zns-active limit",
            format!(
                "{max_active} zones active (zone 0 by a write, zone 1 by an append, the rest by Open); open, write and append to zone {extra} fail with {opened}; then {}",
                states.join(", ")
            ),
        );
        Ok(())
    })?;
    check("zns-active release", || {
        // A Closed zone keeps its active resource.
        zones.send(0, ZoneSendAction::Close)?;
        zones.expect(0, ZoneState::Closed, Some(8))?;
        zones.send_expecting(extra, ZoneSendAction::Open, too_many)?;
        // A Full zone does not.
        zones.send(0, ZoneSendAction::Finish)?;
        zones.expect(0, ZoneState::Full, None)?;
        zones.send(extra, ZoneSendAction::Open)?;
        zones.expect(extra, ZoneState::ExplicitlyOpened, Some(0))?;
        zones.reset_all()?;
        target.ok("zns-active release", format!("closing zone 0 kept the limit; finishing it let zone {extra} open"));
        Ok(())
    })
}

// ---------------------------------------------------------------------------
// zeroes

/// Bytes of the region the zeroes scenario fills and checks.
const ZEROES_REGION_BYTES: usize = 4 << 20;
/// Commands in flight while filling and checking the region.
const ZEROES_QUEUE_DEPTH: u16 = 33;
const ZEROES_EXTENT_BLOCKS_MAX: u32 = 8;

fn zeroes(target: &Target) -> Outcome {
    let ns = &target.ns;
    let block_bytes = target.block_bytes;
    let region_blocks = target.blocks(ZEROES_REGION_BYTES);
    // Blocks per 4 KiB page: ranges are laid out in pages, so both LBA
    // formats exercise the same byte ranges.
    let p = target.blocks(PAGE_SIZE).max(1);
    if ns.capacity_blocks() < region_blocks || region_blocks < 700 * p {
        return Err(format!("the namespace needs {region_blocks} blocks"));
    }
    let mut qpair = target.queue_pair(ZEROES_QUEUE_DEPTH)?;
    let depth = qpair.capacity();
    let extent_bytes = ZEROES_EXTENT_BLOCKS_MAX as usize * block_bytes;
    let pool = target.pool(extent_bytes.max(PAGE_SIZE), depth)?;
    let mut rng = Rng::new(target.seed, 0x7a65_726f);
    let mut model = Model::new(0, region_blocks, Expect::Zeroes);

    check("zeroes fill", || {
        let ops: Vec<Op> = random_extents(&mut rng, 0, region_blocks, ZEROES_EXTENT_BLOCKS_MAX)
            .into_iter()
            .map(|(slba, blocks)| Op::Write { slba, blocks, generation: 1 })
            .collect();
        run_batch(&mut qpair, ns, &pool, &mut model, &ops, depth).map(drop)
    })?;

    check("zeroes write zeroes", || {
        let ranges = [(16 * p, 40 * p, false), (100 * p + 3, 17, true)];
        for (slba, blocks, deallocate) in ranges {
            run_ok(
                &mut qpair,
                ns.write_zeroes(slba, blocks as u32, deallocate, 0),
                &format!("write zeroes {blocks} blocks at {slba}"),
            )?;
            model.set_range(slba, blocks, Expect::Zeroes);
        }
        target.ok(&format!("zeroes lba={block_bytes} write zeroes"), format!("{ranges:?} (slba, blocks, deallocate)"));
        Ok(())
    })?;

    check("zeroes deallocate", || {
        let ranges = [(200 * p, 8 * p as u32), (220 * p, p as u32), (240 * p, 32 * p as u32)];
        let buffer = IoBuffer::new(take(&pool)?);
        run_ok(&mut qpair, ns.deallocate(&ranges, buffer, 0), "deallocate")?;
        for (slba, blocks) in ranges {
            model.set_range(slba, u64::from(blocks), Expect::Zeroes);
        }
        target.ok(
            &format!("zeroes lba={block_bytes} deallocate"),
            format!("{} ranges in one Dataset Management command: {ranges:?}", ranges.len()),
        );
        Ok(())
    })?;

    check("zeroes copy", || {
        let sources = [(400 * p, 8u32), (410 * p + 1, 16), (420 * p, 3)];
        let destination = 500 * p;
        let buffer = IoBuffer::new(take(&pool)?);
        run_ok(&mut qpair, ns.copy(destination, &sources, buffer, 0), "copy")?;
        let mut at = destination;
        for (slba, blocks) in sources {
            for i in 0..u64::from(blocks) {
                model.set(at, model.expect(slba + i));
                at += 1;
            }
        }
        target.ok(
            &format!("zeroes lba={block_bytes} copy"),
            format!("sources {sources:?} to {destination}, {} blocks", at - destination),
        );
        Ok(())
    })?;

    check("zeroes flush", || {
        run_ok(&mut qpair, Ok(ns.flush(0)), "flush")?;
        if ns.supports(Oncs::VERIFY) {
            run_ok(&mut qpair, ns.verify(0, 64, 0), "verify")?;
            target.ok(&format!("zeroes lba={block_bytes} flush"), "flush and verify of 64 blocks succeed");
        } else {
            expect_refused(ns.verify(0, 64, 0), &RequestError::Unsupported { command: "Verify" }, "verify")?;
            target.ok(
                &format!("zeroes lba={block_bytes} flush"),
                "flush succeeds; verify is not in ONCS and is refused as Unsupported",
            );
        }
        Ok(())
    })?;

    check("zeroes compare", || {
        let slba = 600 * p;
        let blocks = 4usize;
        let len = blocks * block_bytes;
        let matching = take(&pool)?;
        for i in 0..blocks {
            let Expect::Stamp(stamp) = model.expect(slba + i as u64) else {
                return Err(format!("LBA {} is not stamped", slba + i as u64));
            };
            stamp_block(&matching, i * block_bytes, block_bytes, stamp);
        }
        let completion =
            run_ok(&mut qpair, ns.compare(slba, IoBuffer::range(matching, 0, len), 0), "compare of matching data")?;
        // The same data with its very last byte changed.
        let differing = completion.buffer.ok_or("the compare came back without its buffer")?;
        let last = differing.offset() + len - 1;
        let byte = differing.buffer().read::<u8>(last);
        differing.buffer().write::<u8>(last, !byte);
        let status = run_expecting(
            &mut qpair,
            ns.compare(slba, differing, 0),
            StatusCode::Media(MediaStatus::CompareFailure),
            "compare of data differing in the last byte",
        )?;
        expect_raw(status, StatusCodeType::MediaAndDataIntegrity, 0x85)?;
        // Zeroes compare equal to a zeroed range.
        let zeroed = take(&pool)?;
        zeroed.fill(0, len, 0);
        run_ok(
            &mut qpair,
            ns.compare(16 * p, IoBuffer::range(zeroed, 0, len), 0),
            "compare of zeroes with a zeroed range",
        )?;
        target.ok(
            &format!("zeroes lba={block_bytes} compare"),
            format!("matching data and a zeroed range compare equal; one changed byte gives {status}"),
        );
        Ok(())
    })?;

    check("zeroes read back", || {
        let report = verify_region(&mut qpair, ns, &pool, &mut model, &mut rng, ZEROES_EXTENT_BLOCKS_MAX, depth)?;
        let zero_blocks = model.blocks.iter().filter(|e| **e == Expect::Zeroes).count();
        target.ok(
            &format!("zeroes lba={block_bytes} read back"),
            format!(
                "{} blocks: {zero_blocks} read as zeroes, every other block holds its own or its copied data",
                report.blocks
            ),
        );
        Ok(())
    })
}

// ---------------------------------------------------------------------------
// dsm-limit

/// Dataset Management Range Size Limit (Identify Controller, NVM Command
/// Set, DMRSL): the most blocks one deallocate range may cover. QEMU skips
/// a longer range and still completes the command successfully
/// (hw/nvme/ctrl.c, nvme_dsm_cb), so a driver that lets one through makes
/// the caller believe the blocks read as zeroes while they keep their data.
fn dsm_limit(target: &Target) -> Outcome {
    let ns = &target.ns;
    let block_bytes = target.block_bytes;
    let dmrsl = target
        .controller
        .identify_nvm()
        .map(|nvm| nvm.dmrsl)
        .filter(|&dmrsl| dmrsl != 0 && dmrsl < u32::MAX)
        .ok_or("the controller reports no Dataset Management range size limit")?;
    if ns.capacity_blocks() <= u64::from(dmrsl) {
        return Err(format!("the namespace needs more than DMRSL ({dmrsl}) blocks"));
    }
    let mut qpair = target.queue_pair(4)?;
    let pool = target.pool(PAGE_SIZE.max(block_bytes), 2)?;
    let stamp = Stamp { tag: 0, generation: 1 };
    let write_stamp = |qpair: &mut QueuePair| -> Outcome {
        let buffer = take(&pool)?;
        stamp_block(&buffer, 0, block_bytes, stamp);
        run_ok(qpair, ns.write(0, IoBuffer::range(buffer, 0, block_bytes), false, 0), "write LBA 0").map(drop)
    };
    let read_check = |qpair: &mut QueuePair, expect: Expect| -> Outcome {
        let buffer = take(&pool)?;
        poison_blocks(&buffer, 0, 1, block_bytes);
        let completion = run_ok(qpair, ns.read(0, IoBuffer::range(buffer, 0, block_bytes), 0), "read LBA 0")?;
        let buffer = completion.buffer.ok_or("the read came back without its buffer")?;
        check_block(buffer.buffer(), buffer.offset(), block_bytes, expect).map_err(|e| format!("LBA 0: {e}"))
    };

    check("dsm-limit over", || {
        write_stamp(&mut qpair)?;
        let over = dmrsl + 1;
        let request = ns.deallocate(&[(0, over)], IoBuffer::new(take(&pool)?), 0);
        match request {
            Err(error) => {
                read_check(&mut qpair, Expect::Stamp(stamp))?;
                target.ok(
                    "dsm-limit over",
                    format!("a range of {over} blocks (DMRSL {dmrsl}) refused with {error:?} before submission"),
                );
                Ok(())
            }
            Ok(request) => {
                let completion = qpair.execute(request, COMMAND_TIMEOUT).map_err(|e| format!("deallocate: {e}"))?;
                let after = match read_check(&mut qpair, Expect::Zeroes) {
                    Ok(()) => "zeroes".to_string(),
                    Err(message) => message,
                };
                Err(format!(
                    "the driver built a deallocate range of {over} blocks (DMRSL {dmrsl}); the device answered {:?} and LBA 0 then reads {after}",
                    completion.status
                ))
            }
        }
    })?;
    check("dsm-limit at", || {
        write_stamp(&mut qpair)?;
        run_ok(&mut qpair, ns.deallocate(&[(0, dmrsl)], IoBuffer::new(take(&pool)?), 0), "deallocate")?;
        read_check(&mut qpair, Expect::Zeroes)?;
        target.ok("dsm-limit at", format!("a range of exactly DMRSL ({dmrsl}) blocks reads back as zeroes"));
        Ok(())
    })
}

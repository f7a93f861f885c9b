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
use nvme_driver::prng::{mix, Prng};
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

mod dsm_limit;
mod integrity;
mod metadata;
mod sizes;
mod threads;
mod zeroes;
mod zns;
mod zns_active;

use dsm_limit::*;
use integrity::*;
use sizes::*;
use threads::*;
use zeroes::*;
use zns::*;
use zns_active::*;

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
// Data: seeded randomness (`nvme_driver::prng`, streams named per check)
// and self-describing blocks.

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
                (mix(seed, index as u64) >> 16) as u32
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
fn random_extents(rng: &mut Prng, base: u64, blocks: u64, max_blocks: u32) -> Vec<(u64, u32)> {
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

/// Requires a typed status that says `want`, with its raw SCT/SC as the
/// spec numbers it.
fn expect_raw(status: Status, sct: StatusCodeType, sc: u8) -> Outcome {
    if status.sct == sct && status.sc == sc {
        Ok(())
    } else {
        Err(format!("{status}: expected SCT {:X}h / SC {sc:02X}h", sct.raw()))
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
    rng: &mut Prng,
    max_blocks: u32,
    depth: usize,
) -> Outcome<BatchReport> {
    let extents = random_extents(rng, model.base, model.end() - model.base, max_blocks);
    let ops: Vec<Op> = extents.into_iter().map(|(slba, blocks)| Op::Read { slba, blocks }).collect();
    run_batch(qpair, ns, pool, model, &ops, depth)
}

impl fmt::Display for BatchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} commands, {} blocks", self.commands, self.blocks)
    }
}

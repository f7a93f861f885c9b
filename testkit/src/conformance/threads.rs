//! threads: one queue pair per thread, mixed I/O started at once, every
//! token accounted for and every block checked.

use super::*;

const THREADS: usize = 4;
/// Commands in flight per thread.
const THREAD_QUEUE_DEPTH: usize = 16;
/// 4 KiB slots per thread's region.
const THREAD_SLOTS: usize = 256;
/// Mixed reads and writes per thread, after the region is filled.
const THREAD_MIXED_IOS: usize = 6000;
/// Token bits that name the thread; the rest count its I/Os.
const TOKEN_THREAD_SHIFT: u32 = 48;

pub(super) fn threads(target: &Target) -> Outcome {
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

    let mut rng = Prng::with_stream(target.seed, 0x7468_7265_6164 + index as u64);
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

//! Verification: completed reads copied out of their DMA buffers and
//! checksummed on worker threads (or inline), so checksumming overlaps I/O.

use crate::plan::Read;
use nvme_driver::dma::DmaMemory;
use nvme_driver::IoBuffer;
use std::sync::{mpsc, Arc};
use std::time::Duration;
use zoned_allocator::tags::{Expected, ReadTags, TagLayout};
use zoned_allocator::{Volume, BLOCK_SIZE};

/// One completed read waiting for verification. The DMA buffer travels to
/// the verifying thread, which copies it out (no reference into DMA
/// memory is ever formed) and drops it, returning it to the pool.
pub(crate) struct VerifyJob {
    pub(crate) seq: u64,
    pub(crate) buffer: IoBuffer,
    /// The blocks' tags as read with them, on a volume with block tags.
    pub(crate) tags: Option<ReadMeta>,
    /// (piece offset in blocks, what it must hold) per piece.
    pub(crate) pieces: Vec<(u32, Expected)>,
}

/// A read's metadata (its blocks' tags), copied out of its DMA buffer as
/// soon as the read completes (it is small: 8 bytes or so per 4 KiB), and
/// what checks it.
pub(crate) struct ReadMeta {
    layout: TagLayout,
    volume_id: u64,
    bytes: Vec<u8>,
}

impl ReadMeta {
    /// The metadata of a completed read, on a volume with block tags: as
    /// read with it, or from its zone's checksum area (on a volume with
    /// areas, when a piece of it expects tags). `None` when there are none,
    /// or they could not be read: the pieces that expect tags then fail.
    pub(crate) fn of(volume: &mut Volume, read: &Read, metadata: Option<IoBuffer>) -> Option<ReadMeta> {
        let layout = volume.block_tags()?;
        let bytes = match metadata {
            Some(buffer) => {
                let mut bytes = vec![0u8; buffer.len()];
                buffer.buffer().copy_out(buffer.offset(), &mut bytes);
                bytes
            }
            None if read.pieces.iter().any(|p| p.expected.is_tags()) => {
                match volume.area_tags_for(read.lane, read.start, read.blocks)? {
                    Ok(bytes) => bytes,
                    Err(error) => {
                        log::warn!("the tags of {} blocks at {:?} could not be read: {error}", read.blocks, read.start);
                        return None;
                    }
                }
            }
            None => return None,
        };
        Some(ReadMeta { layout, volume_id: volume.volume_id(), bytes })
    }

    /// The tags of blocks `start..start + blocks` of the read.
    pub(crate) fn range(&self, start: u32, blocks: usize) -> ReadTags<'_> {
        let start = start as usize;
        let meta = &self.bytes[self.layout.bytes(start)..self.layout.bytes(start + blocks)];
        ReadTags { layout: self.layout, volume_id: self.volume_id, meta }
    }

    /// The data checksums the tags of blocks `start..start + blocks`
    /// record: the extent's own, for its new copy.
    pub(crate) fn crcs(&self, start: u32, blocks: usize) -> Vec<u32> {
        zoned_allocator::tags::data_crcs(self.layout, self.range(start, blocks).meta).collect()
    }
}

/// Checks `data`, a piece at block `offset` of a read, against what it
/// must hold (and the read's tags).
pub(crate) fn piece_mismatches(expected: &Expected, offset: u32, data: &[u8], meta: Option<&ReadMeta>) -> Vec<u32> {
    expected.mismatches(data, meta.map(|m| m.range(offset, expected.blocks())))
}

pub(crate) struct VerifyResult {
    pub(crate) seq: u64,
    /// Per piece, the mismatching block indices within the piece.
    pub(crate) bad: Vec<Vec<u32>>,
}

/// Verifies one read, with `scratch` as the copy of its data.
fn verify_job(job: VerifyJob, scratch: &mut Vec<u8>) -> VerifyResult {
    scratch.resize(job.buffer.len(), 0);
    job.buffer.buffer().copy_out(job.buffer.offset(), scratch);
    drop(job.buffer);
    let bad = job
        .pieces
        .iter()
        .map(|(offset, expected)| {
            let start = *offset as usize * BLOCK_SIZE;
            let data = &scratch[start..start + expected.blocks() * BLOCK_SIZE];
            piece_mismatches(expected, *offset, data, job.tags.as_ref())
        })
        .collect();
    VerifyResult { seq: job.seq, bad }
}

/// A pool of threads that each take a job, work on it with a scratch
/// buffer of their own, and hand back the result: how the scrub and the
/// resilver checksum completed reads off the polling thread.
pub(crate) struct Workers<J, R> {
    jobs: Option<mpsc::Sender<J>>,
    results: mpsc::Receiver<R>,
    workers: Vec<std::thread::JoinHandle<()>>,
    /// Jobs handed out and not yet taken back.
    pub(crate) outstanding: usize,
}

impl<J: Send + 'static, R: Send + 'static> Workers<J, R> {
    /// `threads` workers (at least one) running `work`.
    pub(crate) fn new(threads: usize, work: fn(J, &mut Vec<u8>) -> R) -> Self {
        let (job_tx, job_rx) = mpsc::channel::<J>();
        let (result_tx, results) = mpsc::channel();
        let job_rx = Arc::new(std::sync::Mutex::new(job_rx));
        let workers = (0..threads.max(1))
            .map(|_| {
                let job_rx = Arc::clone(&job_rx);
                let result_tx = result_tx.clone();
                std::thread::spawn(move || {
                    let mut scratch = Vec::new();
                    loop {
                        let job = match job_rx.lock() {
                            Ok(rx) => rx.recv(),
                            Err(_) => return,
                        };
                        let Ok(job) = job else { return };
                        if result_tx.send(work(job, &mut scratch)).is_err() {
                            return;
                        }
                    }
                })
            })
            .collect();
        Workers { jobs: Some(job_tx), results, workers, outstanding: 0 }
    }

    pub(crate) fn submit(&mut self, job: J) {
        self.outstanding += 1;
        let sent = self.jobs.as_ref().map(|jobs| jobs.send(job));
        assert!(matches!(sent, Some(Ok(()))), "the worker threads stopped");
    }

    pub(crate) fn try_recv(&mut self) -> Option<R> {
        let result = self.results.try_recv().ok()?;
        self.outstanding -= 1;
        Some(result)
    }

    pub(crate) fn recv_timeout(&mut self, timeout: Duration) -> Option<R> {
        let result = self.results.recv_timeout(timeout).ok()?;
        self.outstanding -= 1;
        Some(result)
    }
}

impl<J, R> Drop for Workers<J, R> {
    fn drop(&mut self) {
        self.jobs = None;
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

/// Verification on worker threads, or inline on the polling thread.
pub(crate) enum Verifier {
    Threads(Workers<VerifyJob, VerifyResult>),
    Inline { scratch: Vec<u8>, done: std::collections::VecDeque<VerifyResult> },
}

impl Verifier {
    pub(crate) fn new(threads: usize) -> Self {
        if threads == 0 {
            Verifier::Inline { scratch: Vec::new(), done: std::collections::VecDeque::new() }
        } else {
            Verifier::Threads(Workers::new(threads, verify_job))
        }
    }

    /// Jobs submitted and not yet taken back.
    pub(crate) fn outstanding(&self) -> usize {
        match self {
            Verifier::Threads(workers) => workers.outstanding,
            Verifier::Inline { done, .. } => done.len(),
        }
    }

    pub(crate) fn submit(&mut self, job: VerifyJob) {
        match self {
            Verifier::Threads(workers) => workers.submit(job),
            Verifier::Inline { scratch, done } => done.push_back(verify_job(job, scratch)),
        }
    }

    pub(crate) fn try_recv(&mut self) -> Option<VerifyResult> {
        match self {
            Verifier::Threads(workers) => workers.try_recv(),
            Verifier::Inline { done, .. } => done.pop_front(),
        }
    }

    pub(crate) fn recv_timeout(&mut self, timeout: Duration) -> Option<VerifyResult> {
        match self {
            Verifier::Threads(workers) => workers.recv_timeout(timeout),
            Verifier::Inline { done, .. } => done.pop_front(),
        }
    }
}

//! Verification: completed reads copied out of their DMA buffers and
//! checksummed on worker threads (or inline), so checksumming overlaps I/O.

use nvme_driver::dma::DmaMemory;
use nvme_driver::IoBuffer;
use std::sync::{mpsc, Arc};
use std::time::Duration;
use zoned_allocator::BLOCK_SIZE;

/// One completed read waiting for verification. The DMA buffer travels to
/// the verifying thread, which copies it out (no reference into DMA
/// memory is ever formed) and drops it, returning it to the pool.
pub(crate) struct VerifyJob {
    pub(crate) seq: u64,
    pub(crate) buffer: IoBuffer,
    /// (piece offset in blocks, crcs) per piece.
    pub(crate) pieces: Vec<(u32, Vec<u32>)>,
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
        .map(|(offset, crcs)| {
            let start = *offset as usize * BLOCK_SIZE;
            let data = &scratch[start..start + crcs.len() * BLOCK_SIZE];
            zoned_allocator::checksum::mismatches(data, crcs)
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

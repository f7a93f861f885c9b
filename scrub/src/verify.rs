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

/// Verification on worker threads (or inline).
pub(crate) struct Verifier {
    jobs: Option<mpsc::Sender<VerifyJob>>,
    results: mpsc::Receiver<VerifyResult>,
    inline: Option<mpsc::Sender<VerifyResult>>,
    scratch: Vec<u8>,
    workers: Vec<std::thread::JoinHandle<()>>,
    pub(crate) outstanding: usize,
}

impl Verifier {
    pub(crate) fn new(threads: usize) -> Self {
        let (result_tx, results) = mpsc::channel();
        if threads == 0 {
            return Verifier {
                jobs: None,
                results,
                inline: Some(result_tx),
                scratch: Vec::new(),
                workers: Vec::new(),
                outstanding: 0,
            };
        }
        let (job_tx, job_rx) = mpsc::channel::<VerifyJob>();
        let job_rx = Arc::new(std::sync::Mutex::new(job_rx));
        let workers = (0..threads)
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
                        if result_tx.send(verify_job(job, &mut scratch)).is_err() {
                            return;
                        }
                    }
                })
            })
            .collect();
        Verifier { jobs: Some(job_tx), results, inline: None, scratch: Vec::new(), workers, outstanding: 0 }
    }

    pub(crate) fn submit(&mut self, job: VerifyJob) {
        self.outstanding += 1;
        match (&self.jobs, &self.inline) {
            (Some(jobs), _) => {
                let _ = jobs.send(job);
            }
            (None, Some(inline)) => {
                let _ = inline.send(verify_job(job, &mut self.scratch));
            }
            (None, None) => unreachable!("a verifier has workers or runs inline"),
        }
    }

    pub(crate) fn try_recv(&mut self) -> Option<VerifyResult> {
        let result = self.results.try_recv().ok()?;
        self.outstanding -= 1;
        Some(result)
    }

    pub(crate) fn recv_timeout(&mut self, timeout: Duration) -> Option<VerifyResult> {
        let result = self.results.recv_timeout(timeout).ok()?;
        self.outstanding -= 1;
        Some(result)
    }
}

impl Drop for Verifier {
    fn drop(&mut self) {
        self.jobs = None;
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

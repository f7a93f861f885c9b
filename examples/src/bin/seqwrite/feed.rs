//! Where each write's data comes from: made inline on the writer, or
//! ahead on checksum threads; in host memory (copied into DMA memory at
//! submission) or in buffers the volume lends (`--zero-copy`); or the
//! same bytes every time (`--same-data`).

use crate::Args;
use nvme_driver::dma::FillBuffer;
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use zoned_allocator::{checksum, Error, Volume, BLOCK_SIZE};

/// The data of every write, and the threads that make it ahead.
pub(crate) struct Feed {
    bs: usize,
    ready_rx: Option<mpsc::Receiver<Prepared>>,
    /// Host buffers the writer is done with, back to the workers.
    spent_tx: mpsc::Sender<Vec<u8>>,
    /// With --zero-copy, the buffers the volume lends, on their way to be
    /// filled; `lent` of them are out.
    lend_tx: Option<mpsc::Sender<FillBuffer>>,
    lent: usize,
    workers: Vec<JoinHandle<()>>,
    /// The writer's own buffer, when it makes the data.
    inline: Vec<u8>,
    /// --same-data (and --reuse-data): write 0's bytes and checksums, made
    /// before the clock starts, and the lent buffers that already hold
    /// them.
    same: Option<(Vec<u8>, Vec<u32>, Vec<u64>)>,
    /// --reuse-data: the volume checksums every write, from the bytes
    /// written.
    checksum_each: bool,
}

impl Feed {
    /// Starts the checksum threads (none with --same-data) for
    /// `writes_total` writes of `--bs`.
    pub(crate) fn start(args: &Args, writes_total: u64) -> Feed {
        let bs = args.bs as usize;
        let (ready_tx, ready_rx) = mpsc::sync_channel::<Prepared>(args.iodepth * 2 + 2);
        let (spent_tx, spent_rx) = mpsc::channel::<Vec<u8>>();
        let spent_rx = Arc::new(Mutex::new(spent_rx));
        let (lend_tx, lend_rx) = mpsc::channel::<FillBuffer>();
        let lend_rx = Arc::new(Mutex::new(lend_rx));
        let next_write = Arc::new(AtomicU64::new(0));
        let threads = args.checksum_threads();
        let workers = (0..threads)
            .map(|_| {
                let ready_tx = ready_tx.clone();
                let (spent_rx, lend_rx, next_write) =
                    (Arc::clone(&spent_rx), Arc::clone(&lend_rx), Arc::clone(&next_write));
                let zero_copy = args.zero_copy;
                std::thread::spawn(move || loop {
                    let Some(sequence) = claim(&next_write, writes_total) else { return };
                    let data = match zero_copy {
                        // Ends when the writer stops lending.
                        true => match lend_rx.lock().map(|rx| rx.recv()) {
                            Ok(Ok(buffer)) => Data::Lent(buffer),
                            _ => return,
                        },
                        false => Data::Host(spent_rx.lock().ok().and_then(|rx| rx.try_recv().ok()).unwrap_or_default()),
                    };
                    if ready_tx.send(prepare(sequence, data, bs)).is_err() {
                        return;
                    }
                })
            })
            .collect();
        let same = (args.same_data || args.reuse_data).then(|| {
            let mut data = vec![0u8; bs];
            fill(&mut data, 0);
            let mut crcs = Vec::with_capacity(bs / BLOCK_SIZE);
            checksum::block_crcs(&data, &mut crcs);
            (data, crcs, Vec::new())
        });
        Feed {
            bs,
            ready_rx: Some(ready_rx),
            spent_tx,
            lend_tx: Some(lend_tx),
            lent: 0,
            workers,
            inline: vec![0u8; bs],
            same,
            checksum_each: args.reuse_data,
        }
    }

    /// Submits the next write (number `sequence`, unless the checksum
    /// threads chose it) and returns its extent.
    pub(crate) fn submit(&mut self, args: &Args, volume: &mut Volume, sequence: u64) -> Result<u64, String> {
        let bs = self.bs;
        // With --reuse-data the volume checksums every write itself (as a
        // file system does what it is given); with --same-data it takes the
        // checksums made before the run.
        let checksum_each = self.checksum_each;
        let result = if let Some((data, crcs, filled)) = &mut self.same {
            match args.zero_copy {
                true => volume.fill_buffer().and_then(|mut buffer| {
                    // A buffer holds the bytes from its first lending on:
                    // neither the device nor the volume writes it.
                    // (The volume lends a few buffers: a list, not a hash.)
                    if !filled.contains(&buffer.iova()) {
                        filled.push(buffer.iova());
                        buffer[..bs].copy_from_slice(data);
                    }
                    match checksum_each {
                        true => volume.submit_filled(args.stream, buffer, bs, sequence),
                        false => {
                            // A list from the volume's pool: no allocation per write.
                            let mut list = volume.checksum_list();
                            list.extend_from_slice(crcs);
                            volume.submit_filled_with_checksums(args.stream, buffer, bs, sequence, list)
                        }
                    }
                }),
                false if checksum_each => volume.submit_write(args.stream, data, sequence),
                false => {
                    let mut list = volume.checksum_list();
                    list.extend_from_slice(crcs);
                    volume.submit_write_with_checksums(args.stream, data, sequence, list)
                }
            }
        } else if args.checksum_threads() == 0 && args.zero_copy {
            volume.fill_buffer().and_then(|mut buffer| {
                fill(&mut buffer[..bs], sequence);
                volume.submit_filled(args.stream, buffer, bs, sequence)
            })
        } else if args.checksum_threads() == 0 {
            fill(&mut self.inline, sequence);
            volume.submit_write(args.stream, &self.inline, sequence)
        } else {
            return self.submit_prepared(args, volume);
        };
        result.map_err(|e| format!("write {sequence}: {e}"))
    }

    /// Submits the next write the checksum threads made. (Checksumming on
    /// the writer instead while the device works was measured slower under
    /// TCG: it delays reaping and the next submission.)
    fn submit_prepared(&mut self, args: &Args, volume: &mut Volume) -> Result<u64, String> {
        if args.zero_copy {
            let to = self.lend_tx.as_ref().expect("lending until stopped");
            lend(volume, to, &mut self.lent, fill_lookahead(args)).map_err(|e| format!("a buffer to fill: {e}"))?;
        }
        let ready = self.ready_rx.as_ref().expect("running until stopped");
        let Ok(Prepared { sequence, data, crcs }) = ready.recv() else {
            return Err("the checksum threads stopped".into());
        };
        let result = match data {
            Data::Host(data) => {
                let result = volume.submit_write_with_checksums(args.stream, &data, sequence, crcs);
                let _ = self.spent_tx.send(data);
                result
            }
            Data::Lent(buffer) => {
                self.lent -= 1;
                volume.submit_filled_with_checksums(args.stream, buffer, self.bs, sequence, crcs)
            }
        };
        result.map_err(|e| format!("write {sequence}: {e}"))
    }

    /// Stops the checksum threads: those waiting for a buffer to fill, or
    /// to hand one over, return.
    pub(crate) fn stop(&mut self) {
        self.ready_rx = None;
        self.lend_tx = None;
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

/// One write's data and block checksums, made ahead.
struct Prepared {
    sequence: u64,
    data: Data,
    crcs: Vec<u32>,
}

/// Where a write's data is made: host memory (copied into DMA memory at
/// submission), or a buffer the volume lent (`--zero-copy`).
enum Data {
    Host(Vec<u8>),
    Lent(FillBuffer),
}

/// Lent buffers out to the checksum threads at once with `--zero-copy`.
pub(crate) fn fill_lookahead(args: &Args) -> usize {
    args.iodepth + args.checksum_threads()
}

/// Keeps up to `lookahead` lent buffers out to the checksum threads: as
/// many as the volume has free, and at least one (waiting for it,
/// bounded by the volume's timeout), so that a write is always on its way.
fn lend(volume: &mut Volume, to: &mpsc::Sender<FillBuffer>, lent: &mut usize, lookahead: usize) -> Result<(), Error> {
    while *lent < lookahead {
        let buffer = match volume.try_fill_buffer()? {
            Some(buffer) => buffer,
            None if *lent == 0 => volume.fill_buffer()?,
            None => return Ok(()),
        };
        if to.send(buffer).is_err() {
            // Every checksum thread is done: nothing more to fill.
            return Ok(());
        }
        *lent += 1;
    }
    Ok(())
}

/// The next write's sequence number, if any write is left.
fn claim(next: &std::sync::atomic::AtomicU64, total: u64) -> Option<u64> {
    let sequence = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (sequence < total).then_some(sequence)
}

/// Fills (a reused buffer or a new one) with write `sequence`'s data and
/// checksums it.
fn prepare(sequence: u64, mut data: Data, bs: usize) -> Prepared {
    let bytes = match &mut data {
        Data::Host(vec) => {
            vec.resize(bs, 0);
            &mut vec[..]
        }
        Data::Lent(buffer) => &mut buffer[..bs],
    };
    fill(bytes, sequence);
    let mut crcs = Vec::with_capacity(bs / BLOCK_SIZE);
    checksum::block_crcs(bytes, &mut crcs);
    Prepared { sequence, data, crcs }
}

/// Deterministic data for write `sequence`: a fixed random pattern with
/// the write's sequence number and block index stamped in each block, so
/// no two blocks are equal.
pub(crate) fn fill(data: &mut [u8], sequence: u64) {
    if data.iter().take(64).all(|&b| b == 0) {
        nvme_driver::prng::Prng::new(0x9E37_79B9_7F4A_7C15).fill(data);
    }
    for (index, block) in data.chunks_exact_mut(BLOCK_SIZE).enumerate() {
        block[..8].copy_from_slice(&sequence.to_le_bytes());
        block[8..16].copy_from_slice(&(index as u64).to_le_bytes());
    }
}

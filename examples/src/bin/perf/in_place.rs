//! The driver engine's loop: each I/O goes again from its completion, in
//! its slot, with no request built and no buffer moved
//! ([`QueuePair::poll_in_place`]), as `spdk_nvme_perf` submits the next
//! I/O from the last one's callback.

use super::{zoned, Io, Job, Pace, Picker};
use crate::report::WorkerResult;
use nvme_driver::clock::Clock;
use nvme_driver::dma::DmaMemory;
use nvme_driver::{Finished, IoBuffer, Namespace, QueuePair, Request};

/// One pair's run, as the completion callback sees it: one borrow for the
/// closure to capture, not a dozen to store at every poll pass.
pub(super) struct Run<'a> {
    pub(super) job: &'a Job<'a>,
    pub(super) ns: &'a Namespace,
    pub(super) clock: &'a Clock,
    pub(super) zones: &'a [zoned::Zone],
    /// What `--copy-in` copies into each write's buffer.
    pub(super) source: Option<&'a [u8]>,
    /// A new request for an I/O that cannot go again in place.
    pub(super) request_for: &'a dyn Fn(Io, usize, IoBuffer) -> Result<Request, String>,
    pub(super) pace: &'a mut Pace,
    pub(super) result: &'a mut WorkerResult,
    pub(super) picker: &'a mut Picker,
    pub(super) ios: &'a mut [Io],
    pub(super) submitted_at: &'a mut [u64],
    /// The clock, read once per poll pass that found something.
    now: Option<u64>,
    failed: Option<String>,
}

impl<'a> Run<'a> {
    #[allow(clippy::too_many_arguments, reason = "one run's parts, gathered once")]
    pub(super) fn new(
        job: &'a Job<'a>,
        ns: &'a Namespace,
        clock: &'a Clock,
        zones: &'a [zoned::Zone],
        source: Option<&'a [u8]>,
        request_for: &'a dyn Fn(Io, usize, IoBuffer) -> Result<Request, String>,
        pace: &'a mut Pace,
        result: &'a mut WorkerResult,
        picker: &'a mut Picker,
        ios: &'a mut [Io],
        submitted_at: &'a mut [u64],
    ) -> Self {
        Run {
            job,
            ns,
            clock,
            zones,
            source,
            request_for,
            pace,
            result,
            picker,
            ios,
            submitted_at,
            now: None,
            failed: None,
        }
    }

    /// Polls until nothing is in flight; the first error ends the run.
    pub(super) fn run(&mut self, qpair: &mut QueuePair) -> Result<(), String> {
        while self.pace.in_flight > 0 {
            self.now = None;
            let found = qpair.poll_in_place(|done| self.finish(done));
            if let Some(error) = self.failed.take() {
                return Err(error);
            }
            if found == 0 {
                self.pace.idle(self.clock);
            }
        }
        Ok(())
    }

    /// Records `done`, and sends the next I/O of its slot.
    #[inline(always)]
    fn finish(&mut self, done: Finished<'_>) {
        let args = self.job.args;
        let token = done.token() as usize;
        let io = self.ios[token];
        let mut status = done.status().map_err(|status| status.to_string());
        if let (Io::Append(zone), Ok(())) = (io, &status) {
            status = zoned::check_append(self.zones[zone], self.job.io_blocks, done.result_u64());
        }
        let now = match self.now {
            Some(now) => now,
            None => *self.now.insert(self.pace.now(self.clock)),
        };
        self.result.record(self.clock, now, self.submitted_at[token], matches!(io, Io::Read(_)), args.bs, status);
        if !self.pace.replace(args.bs) {
            return;
        }
        let Some(io) = self.picker.next(token) else {
            self.pace.nothing_left(args.bs);
            return;
        };
        self.ios[token] = io;
        self.submitted_at[token] = now;
        let done = match io {
            Io::Read(lba) => match done.read(self.ns, lba, token as u64) {
                Ok(()) => return,
                Err((_, done)) => done,
            },
            Io::Write(lba) => {
                if let (Some(source), Some(buffer)) = (self.source, done.buffer()) {
                    buffer.buffer().copy_in(buffer.offset(), source);
                }
                match done.write(self.ns, lba, false, token as u64) {
                    Ok(()) => return,
                    Err((_, done)) => done,
                }
            }
            Io::Append(_) => done,
        };
        // A Zone Append, or a command the pair ended itself (or refused to
        // send again): a new request from the completion's buffer, whose
        // error, if any, ends the run.
        let (completion, mut pair) = done.complete();
        let submitted = completion
            .buffer
            .ok_or_else(|| "a data command came back without its buffer".to_string())
            .and_then(|buffer| (self.request_for)(io, token, buffer))
            .and_then(|request| pair.submit(request).map_err(|(e, _)| format!("{e:?}")));
        if let Err(error) = submitted {
            self.failed.get_or_insert(error);
        }
    }
}

//! The blocking helpers: submit one command and poll until it completes
//! or its bounded wait ends (simple callers and the admin queue).

use super::*;

impl QueuePair {
    /// Submits `request` and polls until it completes or `timeout` passes:
    /// the blocking helper for simple callers and for the admin queue.
    /// Completions of other commands that arrive meanwhile (say, late ones
    /// of an earlier timed-out command) are discarded, so don't mix it with
    /// asynchronous submissions on the same pair. Every few hundred polls
    /// the admin queue checks CSTS: all ones is [`Error::DeviceGone`], CFS
    /// is [`Error::ControllerFatal`] (I/O queue pairs check it in `poll`).
    pub fn execute(&mut self, request: Request, timeout: Duration) -> Result<IoCompletion> {
        let cid = self.free.last().copied().ok_or(Error::QueueFull)?;
        self.submit(request).map_err(|(error, _)| Error::from(error))?;
        self.wait_for(cid, timeout, |_| {})
    }

    /// [`QueuePair::execute`] for a command whose data lies at `iova`.
    ///
    /// # Safety
    /// As [`QueuePair::submit_raw`]; on a timeout the command is still in
    /// flight and the memory must stay mapped and untouched until the
    /// controller is reset.
    pub unsafe fn execute_raw(
        &mut self,
        command: Command,
        iova: u64,
        len: usize,
        timeout: Duration,
    ) -> Result<IoCompletion> {
        // SAFETY: forwarded contract.
        unsafe { self.execute_raw_routing(command, iova, len, timeout, |_| {}) }
    }

    /// [`QueuePair::execute_raw`], handing completions of other commands
    /// to `other` instead of discarding them (the admin queue's
    /// Asynchronous Event Requests).
    ///
    /// # Safety
    /// As [`QueuePair::execute_raw`].
    pub(crate) unsafe fn execute_raw_routing(
        &mut self,
        command: Command,
        iova: u64,
        len: usize,
        timeout: Duration,
        other: impl FnMut(IoCompletion),
    ) -> Result<IoCompletion> {
        let cid = self.free.last().copied().ok_or(Error::QueueFull)?;
        // SAFETY: the caller upholds submit_raw's contract.
        unsafe { self.submit_raw(command, iova, len, 0) }?;
        self.wait_for(cid, timeout, other)
    }

    /// Runs `command` (data at `iova`/`len`, or none) to completion and
    /// turns an error status into [`Error::Command`], any other failure
    /// into [`Error::Io`].
    ///
    /// # Safety
    /// As [`QueuePair::execute_raw`].
    pub(crate) unsafe fn run(
        &mut self,
        command: Command,
        iova: u64,
        len: usize,
        timeout: Duration,
    ) -> Result<IoCompletion> {
        // SAFETY: forwarded contract.
        unsafe { self.run_routing(command, iova, len, timeout, |_| {}) }
    }

    /// [`QueuePair::run`] with completions of other commands handed to
    /// `other`.
    ///
    /// # Safety
    /// As [`QueuePair::execute_raw`].
    pub(crate) unsafe fn run_routing(
        &mut self,
        command: Command,
        iova: u64,
        len: usize,
        timeout: Duration,
        other: impl FnMut(IoCompletion),
    ) -> Result<IoCompletion> {
        let opcode = command.opcode;
        let admin = self.qid == 0;
        // SAFETY: forwarded contract.
        let completion = unsafe { self.execute_raw_routing(command, iova, len, timeout, other) }?;
        match completion.status {
            Ok(()) => Ok(completion),
            Err(IoError::Device(status)) => Err(Error::Command { opcode, admin, status }),
            Err(error) => Err(Error::NotCompleted { opcode, admin, error }),
        }
    }

    pub(super) fn wait_for(
        &mut self,
        cid: u16,
        timeout: Duration,
        mut other: impl FnMut(IoCompletion),
    ) -> Result<IoCompletion> {
        let started = Instant::now();
        let mut done = None;
        let mut polls = 0u32;
        loop {
            self.poll(|completion| {
                if completion.cid == cid && done.is_none() {
                    done = Some(completion);
                } else {
                    other(completion);
                }
            });
            if let Some(completion) = done {
                return Ok(completion);
            }
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(256) {
                if self.host.is_none() {
                    let csts = self.transport.read32(CSTS);
                    if csts == u32::MAX || (self.waits_end_on_removal_request && self.transport.removal_requested()) {
                        return Err(Error::DeviceGone);
                    }
                    if Csts(csts).cfs() {
                        return Err(Error::ControllerFatal);
                    }
                }
                if started.elapsed() > timeout {
                    // The command stays in flight: its slot is not reused
                    // until its completion arrives or a reset ends it.
                    let what = if self.qid == 0 { "an admin command" } else { "an I/O command" };
                    return Err(Error::Timeout { what, waited_ms: started.elapsed().as_millis() as u64 });
                }
            }
            std::hint::spin_loop();
        }
    }
}

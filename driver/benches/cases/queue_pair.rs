//! The queue pair's I/O loops over the loopback device (no hardware), a
//! type per case, shared by the criterion bench (`benches/queue_pair.rs`)
//! and the instruction count (`examples/queue_pair_loop.rs`, run by
//! `hack/io-instructions`), so that the two measure the same code. Each
//! case is set up once; a step submits (one command unless it says
//! otherwise), lets the loopback device post the completions, and polls
//! them back, so a step includes the device side's work (reading the SQE
//! and writing the CQE), which real hardware does for free.

use nvme_driver::cmd::nvm;
use nvme_driver::dma::DmaPool;
use nvme_driver::loopback::{self, LoopbackDevice};
use nvme_driver::{IoBuffer, Namespace, QueuePair, Request, Transport};
use std::hint::black_box;
use std::sync::Arc;

/// The depth of every case's queue pair.
const DEPTH: u16 = 64;

/// Flushes, commands without data: one at a time (`qd1_step`), or in
/// batches of 32 with one doorbell per batch and one poll pass
/// (`batch32_step`).
pub struct Flushes {
    pair: QueuePair,
    device: LoopbackDevice,
}

impl Flushes {
    pub const BATCH: u64 = 32;

    pub fn new() -> Self {
        let (pair, device, _) = loopback::queue_pair(DEPTH).expect("a loopback pair");
        Flushes { pair, device }
    }

    /// QD1: one command.
    #[inline]
    pub fn qd1_step(&mut self) {
        self.pair.submit(Request { command: nvm::flush(1), buffer: None, metadata: None, token: 7 }).unwrap();
        self.pair.ring();
        self.device.complete_all();
        black_box(self.pair.poll(|c| {
            black_box(c.token);
        }));
    }

    /// `BATCH` commands.
    #[inline]
    pub fn batch32_step(&mut self) {
        for token in 0..Self::BATCH {
            self.pair.submit(Request { command: nvm::flush(1), buffer: None, metadata: None, token }).unwrap();
        }
        self.pair.ring();
        self.device.complete_all();
        let mut n = 0;
        self.pair.poll(|c| {
            n += 1;
            black_box(c.token);
        });
        assert_eq!(n, Self::BATCH);
    }
}

/// QD1: a 4 KiB read with a pooled buffer that travels with the command.
pub struct Qd1ReadWithBuffer {
    pair: QueuePair,
    device: LoopbackDevice,
    buffer: Option<IoBuffer>,
    // Last: the pool outlives the buffer taken from it.
    _pool: DmaPool,
}

impl Qd1ReadWithBuffer {
    pub fn new() -> Self {
        let (pair, device, transport) = loopback::queue_pair(DEPTH).expect("a loopback pair");
        let transport: Arc<dyn Transport> = transport;
        let pool = DmaPool::new(&transport, 4096, 1).expect("a pool");
        let buffer = Some(IoBuffer::new(pool.get().expect("one buffer")));
        Qd1ReadWithBuffer { pair, device, buffer, _pool: pool }
    }

    #[inline]
    pub fn step(&mut self) {
        let request = Request { command: nvm::read(1, 8, 8), buffer: self.buffer.take(), metadata: None, token: 1 };
        self.pair.submit(request).unwrap();
        self.pair.ring();
        self.device.complete_all();
        let buffer = &mut self.buffer;
        self.pair.poll(|c| *buffer = c.buffer);
    }
}

/// QD1: the same 4 KiB read sent again from its completion, in its slot
/// (`poll_in_place`): no request built, the buffer never moved.
pub struct Qd1ReadInPlace {
    pair: QueuePair,
    device: LoopbackDevice,
    ns: Namespace,
    _pool: DmaPool,
}

impl Qd1ReadInPlace {
    pub fn new() -> Self {
        let (mut pair, device, transport) = loopback::queue_pair(DEPTH).expect("a loopback pair");
        let transport: Arc<dyn Transport> = transport;
        let ns = loopback::namespace(1, 1 << 20, 512);
        let pool = DmaPool::new(&transport, 4096, 1).expect("a pool");
        let request = ns.read(8, IoBuffer::new(pool.get().expect("one buffer")), 1).expect("a valid read");
        pair.submit(request).map_err(|(error, _)| error).expect("room for one");
        Qd1ReadInPlace { pair, device, ns, _pool: pool }
    }

    #[inline]
    pub fn step(&mut self) {
        self.pair.ring();
        self.device.complete_all();
        let ns = &self.ns;
        self.pair.poll_in_place(|done| done.read(ns, 8, 1).map_err(|(error, _)| error).unwrap());
    }
}

/// A poll pass that finds nothing, with one read in flight that the
/// loopback device never completes: what a spinning owner pays per pass
/// while it waits (every eighth pass also checks deadlines). A step is one
/// pass, counted as one "command" by the instruction count.
pub struct IdlePoll {
    pair: QueuePair,
    _device: LoopbackDevice,
    _pool: DmaPool,
}

impl IdlePoll {
    pub fn new() -> Self {
        let (mut pair, device, transport) = loopback::queue_pair(DEPTH).expect("a loopback pair");
        let transport: Arc<dyn Transport> = transport;
        let ns = loopback::namespace(1, 1 << 20, 512);
        let pool = DmaPool::new(&transport, 4096, 1).expect("a pool");
        let request = ns.read(8, IoBuffer::new(pool.get().expect("one buffer")), 1).expect("a valid read");
        pair.submit(request).map_err(|(error, _)| error).expect("room for one");
        pair.ring();
        IdlePoll { pair, _device: device, _pool: pool }
    }

    #[inline]
    pub fn step(&mut self) {
        let found = self.pair.poll_in_place(|_| unreachable!("the device completes nothing"));
        black_box(found);
    }
}

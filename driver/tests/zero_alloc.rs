//! The I/O path allocates nothing: submit, doorbell, poll and completion
//! hand-back, with and without data buffers, counted by a global allocator.
//! (One test in this binary, so no other test allocates concurrently.)

use nvme_testkit::alloc::{allocations_during, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

use nvme_driver::cmd::nvm;
use nvme_driver::dma::DmaPool;
use nvme_driver::loopback;
use nvme_driver::{IoBuffer, IoCompletion, Request, Transport};
use std::sync::Arc;

#[test]
fn submit_and_poll_allocate_nothing() {
    let (mut pair, mut device, transport) = loopback::queue_pair(64).unwrap();
    let transport: Arc<dyn Transport> = transport;
    let pool = DmaPool::new(&transport, 4096, 32).unwrap();
    let mut buffers: Vec<Option<IoBuffer>> = (0..32).map(|_| Some(IoBuffer::new(pool.get().unwrap()))).collect();
    let mut completions: Vec<IoCompletion> = Vec::with_capacity(64);

    let mut cycle = |pair: &mut nvme_driver::QueuePair, completions: &mut Vec<IoCompletion>| {
        for (token, slot) in buffers.iter_mut().enumerate() {
            let command =
                if token % 2 == 0 { nvm::read(1, token as u64, 8) } else { nvm::write(1, token as u64, 8, false) };
            let request = Request { command, buffer: slot.take(), metadata: None, token: token as u64 };
            pair.submit(request).unwrap();
        }
        pair.submit(Request { command: nvm::flush(1), buffer: None, metadata: None, token: 99 }).unwrap();
        pair.ring();
        device.complete_all();
        pair.poll(|c| completions.push(c));
        for completion in completions.drain(..) {
            if let Some(buffer) = completion.buffer {
                buffers[completion.token as usize] = Some(buffer);
            }
        }
    };
    // Warm up (nothing should allocate here either, but only the measured
    // loop is asserted).
    cycle(&mut pair, &mut completions);

    let allocations = allocations_during(|| {
        for _ in 0..10_000 {
            cycle(&mut pair, &mut completions);
        }
    });
    assert_eq!(allocations, 0, "the I/O path allocated {allocations} times in 330,000 commands");
    assert_eq!(pair.stats().completed, 33 * 10_001);
}

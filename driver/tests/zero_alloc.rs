//! The I/O path allocates nothing: submit, doorbell, poll and completion
//! hand-back, with and without data buffers, and commands sent again from
//! their completions in place (`poll_in_place`, the engine `perf` runs),
//! counted by a global allocator. (One test in this binary, so no other
//! test allocates concurrently.)

use nvme_testkit::alloc::{allocations_during, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

use nvme_driver::cmd::nvm;
use nvme_driver::dma::DmaPool;
use nvme_driver::loopback;
use nvme_driver::Finished;
use nvme_driver::{IoBuffer, IoCompletion, Request, Transport};
use std::sync::Arc;

#[test]
fn submit_poll_and_in_place_allocate_nothing() {
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

    // In place: the 32 buffers in flight, each command sent again from its
    // completion as a Read or a Write by turns, as perf's driver engine does.
    let ns = loopback::namespace(1, 1 << 20, 512);
    for (token, slot) in buffers.iter_mut().enumerate() {
        let request = ns.read(token as u64 * 8, slot.take().expect("back from the last cycle"), token as u64);
        pair.submit(request.unwrap()).map_err(|(error, _)| error).unwrap();
    }
    let mut pass = 0u64;
    let mut in_place = |pair: &mut nvme_driver::QueuePair| {
        pair.ring();
        device.complete_all();
        pass += 1;
        let found = pair.poll_in_place(|done: Finished<'_>| {
            done.status().unwrap();
            let token = done.token();
            let lba = (token + pass) % 1024 * 8;
            let sent = if (token + pass).is_multiple_of(2) {
                done.read(&ns, lba, token)
            } else {
                done.write(&ns, lba, false, token)
            };
            sent.map_err(|(error, _)| error).unwrap();
        });
        assert_eq!(found, 32, "every command completes on its pass");
    };
    in_place(&mut pair);
    let completed = pair.stats().completed;
    let allocations = allocations_during(|| {
        for _ in 0..10_000 {
            in_place(&mut pair);
        }
    });
    assert_eq!(allocations, 0, "sending again in place allocated {allocations} times in 320,000 commands");
    assert_eq!(pair.stats().completed, completed + 32 * 10_000);
}

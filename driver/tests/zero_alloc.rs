//! The I/O path allocates nothing: submit, doorbell, poll and completion
//! hand-back, with and without data buffers, counted by a global allocator.
//! (One test in this binary, so no other test allocates concurrently.)

use nvme_driver::cmd::nvm;
use nvme_driver::dma::DmaPool;
use nvme_driver::loopback;
use nvme_driver::{IoBuffer, IoCompletion, Request, Transport};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Only the measuring thread counts: the test harness's own thread may
    /// allocate at any moment (say, when the machine is busy and it gets
    /// scheduled late), and that is not the I/O path.
    static COUNTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn count() {
    if COUNTING.try_with(std::cell::Cell::get).unwrap_or(false) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

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

    COUNTING.with(|c| c.set(true));
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..10_000 {
        cycle(&mut pair, &mut completions);
    }
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    assert_eq!(allocations, 0, "the I/O path allocated {allocations} times in 330,000 commands");
    assert_eq!(pair.stats().completed, 33 * 10_001);
}

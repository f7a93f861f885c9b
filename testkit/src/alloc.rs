//! A global allocator that counts the allocations of one thread while it
//! measures, for the zero-allocation tests (the driver's `zero_alloc.rs`
//! and `sim_zero_alloc.rs`, the allocator's `sim_zero_alloc.rs`). A test
//! binary makes it its global allocator:
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: nvme_testkit::alloc::Counting = nvme_testkit::alloc::Counting;
//! ```
//!
//! and [`allocations_during`] refuses to measure where it is not (a count
//! that could never rise would pass any test). Keep one test per such
//! binary, so that no other test allocates on the measuring thread's
//! behalf.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// Counts, then forwards to the system allocator.
#[derive(Debug)]
pub struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Only the measuring thread counts: the test harness's own thread may
    /// allocate at any moment (say, when the machine is busy and it gets
    /// scheduled late), and that is not the I/O path.
    static COUNTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

thread_local! {
    /// Set while a counted allocation's backtrace is being printed, whose
    /// own allocations are not counted.
    static TRACING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `ALLOC_BACKTRACES=N` prints where the first N counted allocations of a
/// measurement came from: the way to find what a failing zero-allocation
/// test caught.
fn backtraces_wanted() -> u64 {
    static WANTED: AtomicU64 = AtomicU64::new(u64::MAX);
    let mut wanted = WANTED.load(Ordering::Relaxed);
    if wanted == u64::MAX {
        TRACING.with(|t| t.set(true));
        wanted = std::env::var("ALLOC_BACKTRACES").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
        TRACING.with(|t| t.set(false));
        WANTED.store(wanted, Ordering::Relaxed);
    }
    wanted
}

fn count() {
    if !COUNTING.try_with(std::cell::Cell::get).unwrap_or(false)
        || TRACING.try_with(std::cell::Cell::get).unwrap_or(true)
    {
        return;
    }
    let counted = ALLOCATIONS.fetch_add(1, Ordering::Relaxed) - MEASURE_START.load(Ordering::Relaxed);
    if counted < backtraces_wanted() {
        TRACING.with(|t| t.set(true));
        eprintln!("allocation {counted}:\n{}", std::backtrace::Backtrace::force_capture());
        TRACING.with(|t| t.set(false));
    }
}

/// The count when the current measurement started.
static MEASURE_START: AtomicU64 = AtomicU64::new(0);

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
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Runs `body` and returns how many allocations (including reallocations)
/// it made on this thread.
///
/// Panics when [`Counting`] is not the global allocator.
pub fn allocations_during(body: impl FnOnce()) -> u64 {
    COUNTING.with(|c| c.set(true));
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    drop(std::hint::black_box(Box::new(0u64)));
    assert!(
        ALLOCATIONS.load(Ordering::Relaxed) > before,
        "nvme_testkit::alloc::Counting is not this binary's global allocator: nothing would be counted"
    );
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    MEASURE_START.store(before, Ordering::Relaxed);
    body();
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    COUNTING.with(|c| c.set(false));
    allocations
}

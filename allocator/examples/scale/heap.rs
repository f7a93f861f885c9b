//! What the process holds: live heap bytes, counted by a wrapper around
//! the system allocator, and the kernel's resident-set figures.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// The system allocator, counting the bytes it has handed out and not got
/// back.
pub struct Counting;

static LIVE_BYTES: AtomicU64 = AtomicU64::new(0);

/// Counts `bytes` more live.
fn grew(bytes: u64) {
    LIVE_BYTES.fetch_add(bytes, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to `System` with the same arguments; the
// counter only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract, passed on as is.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            grew(layout.size() as u64);
        }
        pointer
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        let pointer = unsafe { System.alloc_zeroed(layout) };
        if !pointer.is_null() {
            grew(layout.size() as u64);
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: `pointer` came from this allocator with `layout`.
        unsafe { System.dealloc(pointer, layout) };
        LIVE_BYTES.fetch_sub(layout.size() as u64, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller upholds `realloc`'s contract, passed on as is.
        let moved = unsafe { System.realloc(pointer, layout, new_size) };
        if !moved.is_null() {
            grew(new_size as u64);
            LIVE_BYTES.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        }
        moved
    }
}

/// Heap bytes allocated and not yet freed, process-wide.
pub fn live_bytes() -> u64 {
    LIVE_BYTES.load(Ordering::Relaxed)
}

/// A field of `/proc/self/status` in bytes (`VmRSS`, `VmHWM`), 0 when
/// unreadable.
pub fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// Hands freed heap back to the kernel and restarts the peak RSS count
/// (`VmHWM`), so that each measured run starts from what it inherits.
pub fn reset_peak() {
    // SAFETY: malloc_trim only releases free memory of the C allocator; it
    // touches no live allocation.
    unsafe { libc::malloc_trim(0) };
    // Writing 5 to clear_refs resets VmHWM (Linux 4.0, proc(5)); failing
    // leaves the peak cumulative, which the report would then overstate.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Bytes of memory the kernel could give this process now
/// (`MemAvailable`).
pub fn available_bytes() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemAvailable:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// This thread's resource use so far: CPU time (user and system), and
/// involuntary context switches and page faults (minor, major), to tell a
/// slow step's own work from the host taking the CPU away.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    pub cpu: std::time::Duration,
    pub preempted: u64,
    /// Voluntary context switches: the thread waited (a lock, a sleep).
    pub waited: u64,
    pub minor_faults: u64,
    pub major_faults: u64,
}

pub fn thread_usage() -> Usage {
    // SAFETY: rusage is plain integers, for which all zeroes is valid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage into `usage`, which outlives the
    // call.
    let done = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    assert_eq!(done, 0, "getrusage(RUSAGE_THREAD)");
    let time = |t: libc::timeval| std::time::Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Usage {
        cpu: time(usage.ru_utime) + time(usage.ru_stime),
        preempted: usage.ru_nivcsw as u64,
        waited: usage.ru_nvcsw as u64,
        minor_faults: usage.ru_minflt as u64,
        major_faults: usage.ru_majflt as u64,
    }
}

impl std::ops::Sub for Usage {
    type Output = Usage;
    fn sub(self, before: Usage) -> Usage {
        Usage {
            cpu: self.cpu.saturating_sub(before.cpu),
            preempted: self.preempted - before.preempted,
            waited: self.waited - before.waited,
            minor_faults: self.minor_faults - before.minor_faults,
            major_faults: self.major_faults - before.major_faults,
        }
    }
}

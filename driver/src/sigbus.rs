//! A revoked BAR reads all ones instead of killing the process.
//!
//! The kernel can take a BAR's mapping away while the driver uses it:
//! vfio-pci zaps it when memory decode is disabled or when it starts a reset
//! of its own, and a later access raises SIGBUS, which by default ends the
//! process. SPDK's answer (`lib/env_dpdk/pci.c`, its SIGBUS handler) is to
//! map a page of all ones over the faulting address and return, so that the
//! access, retried, reads what a device that left the bus reads: all ones.
//! This module does the same, for the whole registered window at once (a
//! BAR is a few pages), and records that it did. Every path of the driver
//! already treats a register that reads all ones as "device gone"
//! (`Error::DeviceGone`, `IoError::DeviceGone`), so a revoked BAR becomes a
//! typed error, never a dead process. Writes after that land in the
//! anonymous page and go nowhere.
//!
//! A SIGBUS whose address is outside every registered window is not ours:
//! it goes to the handler that was installed before (Rust's own, which
//! resets to the default action, so the process dies as it would have).
//!
//! The registry is a fixed array of atomics, so the handler reads it
//! without locks or allocation; [`MAX_WINDOWS`] windows can be guarded at
//! once.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Windows guarded at once (one per open controller).
pub const MAX_WINDOWS: usize = 64;

const FREE: u8 = 0;
const CLAIMED: u8 = 1;
const ACTIVE: u8 = 2;

struct Window {
    state: AtomicU8,
    start: AtomicUsize,
    len: AtomicUsize,
    revoked: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Window = Window {
    state: AtomicU8::new(FREE),
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    revoked: AtomicBool::new(false),
};

static WINDOWS: [Window; MAX_WINDOWS] = [EMPTY; MAX_WINDOWS];

/// The SIGBUS action in place before ours, to pass foreign faults on to.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

/// One guarded window; unguarded on drop, which must come before the
/// window is unmapped.
#[derive(Debug)]
pub struct BarGuard {
    slot: usize,
}

impl BarGuard {
    /// Guards `len` bytes from `base`, a page-aligned mapping of a BAR (or
    /// of anything that may be revoked under the process, as a file that is
    /// truncated), installing the process's SIGBUS handler on first use.
    ///
    /// # Safety
    /// `[base, base + len)` must be a mapping of whole pages that stays
    /// mapped until the guard drops, and nothing may hold a Rust reference
    /// into it: on a fault the handler replaces it, in place, with an
    /// anonymous mapping of all ones.
    pub unsafe fn new(base: NonNull<u8>, len: usize) -> io::Result<Self> {
        let page = page_size();
        let start = base.as_ptr() as usize;
        if len == 0 || !start.is_multiple_of(page) || !len.is_multiple_of(page) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "a guarded window is whole pages"));
        }
        install()?;
        for (slot, window) in WINDOWS.iter().enumerate() {
            if window.state.compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                window.start.store(start, Ordering::Relaxed);
                window.len.store(len, Ordering::Relaxed);
                window.revoked.store(false, Ordering::Relaxed);
                // Publishes start and len to the handler.
                window.state.store(ACTIVE, Ordering::Release);
                return Ok(BarGuard { slot });
            }
        }
        Err(io::Error::other(format!("more than {MAX_WINDOWS} BAR windows guarded at once")))
    }

    /// Whether a SIGBUS in the window replaced it with all ones.
    pub fn revoked(&self) -> bool {
        WINDOWS[self.slot].revoked.load(Ordering::Acquire)
    }
}

impl Drop for BarGuard {
    fn drop(&mut self) {
        let window = &WINDOWS[self.slot];
        window.state.store(CLAIMED, Ordering::Release);
        window.start.store(0, Ordering::Relaxed);
        window.len.store(0, Ordering::Relaxed);
        window.state.store(FREE, Ordering::Release);
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

/// Installs the handler once per process; later calls return its result.
fn install() -> io::Result<()> {
    static INSTALLED: OnceLock<Result<(), i32>> = OnceLock::new();
    let result = INSTALLED.get_or_init(|| {
        // SAFETY: all-zero bytes are a valid sigaction (no handler, no
        // flags, an empty mask).
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_sigbus as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // SAFETY: as above.
        let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: `action` is initialised, its handler has the SA_SIGINFO
        // signature, and `previous` receives the action in place.
        if unsafe { libc::sigaction(libc::SIGBUS, &action, &mut previous) } != 0 {
            return Err(io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL));
        }
        let _ = PREVIOUS.set(previous);
        Ok(())
    });
    result.map_err(io::Error::from_raw_os_error)
}

/// The SIGBUS handler. Async-signal-safe: it reads atomics, and calls
/// mmap and sigaction (system calls) and nothing that allocates or locks.
extern "C" fn on_sigbus(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let info_ref = unsafe { &*info };
    // SAFETY: a SIGBUS's siginfo carries the faulting address.
    let address = unsafe { info_ref.si_addr() } as usize;
    for window in &WINDOWS {
        if window.state.load(Ordering::Acquire) != ACTIVE {
            continue;
        }
        let (start, len) = (window.start.load(Ordering::Relaxed), window.len.load(Ordering::Relaxed));
        if address < start || address - start >= len {
            continue;
        }
        // SAFETY: [start, start + len) is a mapping the guard's owner
        // promised stays mapped while registered and holds no Rust
        // reference; MAP_FIXED replaces it in place with private anonymous
        // memory.
        let mapped = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        let replaced = mapped != libc::MAP_FAILED;
        if replaced {
            // SAFETY: the anonymous mapping just made covers exactly these
            // bytes, readable and writable.
            unsafe { std::ptr::write_bytes(start as *mut u8, 0xFF, len) };
        }
        if replaced {
            window.revoked.store(true, Ordering::Release);
            // The access is retried and now reads all ones.
            return;
        }
        break;
    }
    pass_on(signal, info, context);
}

/// A fault that is not ours: the handler before ours takes it, or the
/// default action once the faulting access is retried.
fn pass_on(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let Some(previous) = PREVIOUS.get() else {
        reset_to_default(signal);
        return;
    };
    let handler = previous.sa_sigaction;
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // Ignoring a SIGBUS would retry the access forever.
        reset_to_default(signal);
    } else if previous.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: with SA_SIGINFO, sa_sigaction holds a handler of this
        // signature, installed by whoever was there before us.
        let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(handler) };
        handler(signal, info, context);
    } else {
        // SAFETY: without SA_SIGINFO, sa_sigaction holds a plain handler.
        let handler: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        handler(signal);
    }
}

fn reset_to_default(signal: libc::c_int) {
    // SAFETY: all-zero bytes are a valid sigaction, and SIG_DFL is 0.
    let action: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `action` is initialised; the old action is not wanted.
    unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A file mapped as a BAR, then truncated under the mapping (what a
    /// revoked BAR looks like to the process): the next read raises SIGBUS,
    /// the handler maps all ones over it, and the read returns all ones.
    #[test]
    fn a_window_truncated_under_its_mapping_reads_all_ones() {
        let path = std::env::temp_dir().join(format!("sigbus-bar-{}", std::process::id()));
        let mut file =
            std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        file.write_all(&[0x5A; 16384]).unwrap();
        let map = memmap2::MmapOptions::new().len(16384).map_raw(&file).unwrap();
        let base = NonNull::new(map.as_mut_ptr()).unwrap();
        // SAFETY: the mapping outlives the guard and the Mmio (dropped
        // first, below); nothing references it.
        let guard = unsafe { BarGuard::new(base, 16384) }.unwrap();
        // SAFETY: as above; page-aligned.
        let mmio = unsafe { crate::mmio::Mmio::new(base, 16384) };
        assert_eq!(mmio.read32(0x1c), 0x5A5A_5A5A);
        assert!(!guard.revoked());
        file.set_len(0).unwrap();
        assert_eq!(mmio.read32(0x1c), u32::MAX, "a revoked BAR reads all ones");
        assert!(guard.revoked());
        mmio.write32(0x14, 0); // goes nowhere, kills nothing
        assert_eq!(mmio.read32(0x3000), u32::MAX);
        drop(guard);
        drop(map);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_window_must_be_whole_pages() {
        let mut page = vec![0u8; 2 * page_size()];
        let unaligned = NonNull::new(page.as_mut_ptr().wrapping_add(1)).unwrap();
        // SAFETY: refused before anything is registered.
        assert!(unsafe { BarGuard::new(unaligned, 4096) }.is_err());
    }
}

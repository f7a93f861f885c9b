//! A stop asked for (SIGINT or SIGTERM) is a result: the tools watch
//! [`requested`], stop at a safe point, print what they did, say how to
//! continue, and exit [`EXIT_INTERRUPTED`]. A second signal while the
//! first is being handled ends the process at once (the default action,
//! put back by the handler), so a tool that cannot stop is still stopped.

use std::sync::atomic::{AtomicI32, Ordering};

/// The exit status of a run stopped by a signal (128 + SIGINT, as shells
/// report it).
pub const EXIT_INTERRUPTED: u8 = 130;

/// The signal that asked for the stop (0: none yet).
static SIGNAL: AtomicI32 = AtomicI32::new(0);

/// Installs the handler for SIGINT and SIGTERM (once; later calls do
/// nothing). Tools call it before their first device command.
pub fn install() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        for signal in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: all-zero bytes are a valid sigaction (no handler, no
            // flags, an empty mask).
            let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
            action.sa_sigaction = on_signal as *const () as usize;
            // The handler puts the default action back: a second signal
            // ends the process.
            action.sa_flags = libc::SA_RESETHAND;
            // SAFETY: `action` is initialised and its handler has the
            // plain one-argument signature; no previous action is asked for.
            if unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) } != 0 {
                log::warn!("installing the handler of signal {signal}: {}", std::io::Error::last_os_error());
            }
        }
    });
}

/// Async-signal-safe: stores an atomic, nothing more.
extern "C" fn on_signal(signal: libc::c_int) {
    SIGNAL.store(signal, Ordering::SeqCst);
}

/// Whether a stop was asked for.
pub fn requested() -> bool {
    SIGNAL.load(Ordering::Relaxed) != 0
}

/// The signal's name, for messages ("SIGINT"), once one came.
pub fn signal_name() -> Option<&'static str> {
    match SIGNAL.load(Ordering::Relaxed) {
        0 => None,
        libc::SIGTERM => Some("SIGTERM"),
        _ => Some("SIGINT"),
    }
}

/// Calls `stop` once, from a watcher thread, soon (within 50 ms) after a
/// signal comes: how a tool whose work runs inside an engine's loop (a
/// scrub, a resilver) asks it to stop at its next safe point. The thread
/// ends when the process does.
pub fn on_request(stop: impl FnOnce() + Send + 'static) {
    std::thread::spawn(move || {
        while !requested() {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        stop();
    });
}

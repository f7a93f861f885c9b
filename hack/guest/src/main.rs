//! `rig-exit CODE`: ends the guest by writing CODE to QEMU's isa-debug-exit
//! device (I/O port 0xf4). QEMU then exits with status `(CODE << 1) | 1`, so
//! the host sees the guest command's status without parsing console output.
//!
//! Only the low 7 bits survive the host's 8-bit exit status; the rig also
//! reads the exact value from the console (see `hack/rig`).

use std::os::unix::io::{AsRawFd, RawFd};
use std::process::ExitCode;

/// The isa-debug-exit device's port, as the rig configures it
/// (`-device isa-debug-exit,iobase=0xf4,iosize=4`).
const DEBUG_EXIT_PORT: u16 = 0xf4;

fn main() -> ExitCode {
    let Some(code) = std::env::args().nth(1).and_then(|arg| arg.parse::<u32>().ok()) else {
        eprintln!("usage: rig-exit CODE");
        return ExitCode::from(2);
    };
    // The tty layer may still hold output; QEMU exits the moment the port
    // is written, so wait until both serial ports have sent everything.
    drain(std::io::stdout().as_raw_fd());
    if let Ok(tty) = std::fs::OpenOptions::new().write(true).open("/dev/ttyS1") {
        drain(tty.as_raw_fd());
    }
    // SAFETY: ioperm only changes this process's I/O permission bitmap; the
    // arguments are a valid port range.
    let rc = unsafe { libc::ioperm(libc::c_ulong::from(DEBUG_EXIT_PORT), 4, 1) };
    if rc != 0 {
        eprintln!("rig-exit: ioperm: {}", std::io::Error::last_os_error());
        return ExitCode::from(1);
    }
    // SAFETY: ioperm above granted access to this port; writing it makes QEMU
    // exit, which is the whole point. The instruction touches no memory.
    unsafe {
        std::arch::asm!("out dx, eax", in("dx") DEBUG_EXIT_PORT, in("eax") code, options(nomem, nostack));
    }
    // Not reached under QEMU with isa-debug-exit.
    eprintln!("rig-exit: no isa-debug-exit device at port {DEBUG_EXIT_PORT:#x}");
    ExitCode::from(1)
}

/// Waits until everything written to the terminal `fd` has been sent.
fn drain(fd: RawFd) {
    // SAFETY: tcdrain only blocks on the descriptor; an invalid or non-tty
    // descriptor just returns an error, which is fine to ignore here.
    unsafe { libc::tcdrain(fd) };
}

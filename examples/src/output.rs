//! Files a tool writes besides its report (plots, logs, checkpoints):
//! checked before any device is touched, and never written over something
//! that is not the tool's own.

use std::path::Path;

/// Checks that the tool may write `path` (named by `option` in messages):
/// its directory exists and takes a new file (one is made and removed
/// beside it), and a file already there is one `ours` recognises from its
/// first bytes (up to 4 KiB) as the tool's own kind.
pub fn check(option: &str, path: &Path, ours: impl Fn(&[u8]) -> bool) -> Result<(), String> {
    let shown = path.display();
    match std::fs::read(path) {
        Ok(held) if !ours(&held[..held.len().min(4096)]) => {
            return Err(format!(
                "{option} {shown}: the file exists and is not one this tool writes; refusing to replace it (give \
                 another path, or remove it)"
            ))
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{option} {shown}: {e}")),
    }
    let mut probe = path.as_os_str().to_owned();
    probe.push(format!(".probe-{}", std::process::id()));
    writable(option, path, Path::new(&probe))
}

/// Checks that a file can be made at `probe` (made and removed), beside
/// `path`, which `option` names: the directory exists and takes files.
pub fn writable(option: &str, path: &Path, probe: &Path) -> Result<(), String> {
    std::fs::write(probe, b"")
        .and_then(|()| std::fs::remove_file(probe))
        .map_err(|e| format!("{option} {}: cannot write there ({}: {e})", path.display(), probe.display()))
}

/// An SVG (a chart drawn before).
pub fn is_svg(head: &[u8]) -> bool {
    String::from_utf8_lossy(head).trim_start().starts_with("<svg")
}

/// An fio-format log (`time, value, ...` lines), or nothing yet.
pub fn is_fio_log(head: &[u8]) -> bool {
    let text = String::from_utf8_lossy(head);
    let Some(first) = text.lines().next() else { return true };
    let mut fields = first.split(',').map(str::trim);
    fields.next().is_some_and(|f| f.parse::<u64>().is_ok()) && fields.next().is_some_and(|f| f.parse::<f64>().is_ok())
}

/// Set once a tool has printed its result (text or JSON).
static RESULT_PRINTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Notes that the tool's result is printed: an error after it (an output
/// that could not be written, a signal) is said on stderr only, so that
/// stdout keeps one JSON object.
pub fn result_printed() {
    RESULT_PRINTED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Says why `tool` failed: on stderr, and, when `--json` was asked for and
/// no result was printed, as one JSON object on stdout too
/// (`{"tool": ..., "error": ...}`), so that a script reading stdout always
/// gets an object.
pub fn failure(tool: &str, message: &str) {
    eprintln!("{tool}: {message}");
    let json = std::env::args().skip(1).any(|a| a == "--json");
    if json && !RESULT_PRINTED.load(std::sync::atomic::Ordering::Relaxed) {
        println!("{}", serde_json::json!({ "tool": tool, "error": message }));
    }
}

/// Why a run stopped short: an argument the devices refuse, found once
/// they are open and before anything is written (a size past what they
/// hold, a block size past their largest transfer), which exits 2 as a
/// bad argument does before; or an error, which exits 1.
#[derive(Debug)]
pub enum Failure {
    /// A bad argument, found against the devices.
    Argument(String),
    /// Anything else.
    Error(String),
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::Error(message)
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Self {
        Failure::Error(message.to_owned())
    }
}

impl Failure {
    /// Says why `tool` failed ([`failure`]), and the status to exit with:
    /// 2 for an argument, 130 when a signal stopped the run, else 1.
    pub fn report(&self, tool: &str) -> std::process::ExitCode {
        let (message, status) = match self {
            Failure::Argument(message) => (message, 2),
            Failure::Error(message) if crate::interrupt::requested() => (message, crate::interrupt::EXIT_INTERRUPTED),
            Failure::Error(message) => (message, 1),
        };
        failure(tool, message);
        std::process::ExitCode::from(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_told_from_their_first_bytes() {
        assert!(is_svg(b"  <svg xmlns=...") && !is_svg(b"notes"));
        assert!(is_fio_log(b"1000, 2048, 1, 4096, 0\n") && is_fio_log(b""));
        assert!(!is_fio_log(b"my notes\n"));
    }
}

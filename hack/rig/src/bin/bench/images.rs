//! Backing images: memory-backed where there is room, and stale ones of
//! an earlier run removed.

use super::*;

/// Where the images go when there is room, and their directories' prefix
/// (the process ID follows).
pub(super) const SHM: &str = "/dev/shm";

pub(super) const SHM_PREFIX: &str = "hack-bench-";

/// Removes image directories left in `dir` by runs that were killed before
/// they could (their process is gone); tmpfs holds them in memory.
pub(super) fn remove_stale_images(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(SHM_PREFIX)).and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            eprintln!("bench: removing {}, left by an earlier run that was killed", entry.path().display());
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Bytes free to an unprivileged user on the file system holding `path`.
pub(super) fn free_bytes(path: &str) -> Option<u64> {
    let path = std::ffi::CString::new(path).ok()?;
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string and `stat` a writable
    // statvfs, both alive for the call.
    let status = unsafe { libc::statvfs(path.as_ptr(), &mut stat) };
    (status == 0).then(|| stat.f_bavail * stat.f_frsize)
}

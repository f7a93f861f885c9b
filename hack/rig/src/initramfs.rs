//! A minimal `newc` cpio writer: the format the kernel unpacks as an
//! initramfs (Linux `Documentation/driver-api/early-userspace/buffer-format.rst`).

use std::io::{self, Write};

const MODE_DIR: u32 = 0o040_000;
const MODE_FILE: u32 = 0o100_000;
const MODE_SYMLINK: u32 = 0o120_000;

/// Writes entries in order; parents must come before their children.
#[derive(Debug)]
pub struct Archive<W: Write> {
    out: W,
    next_inode: u32,
    written: u64,
}

impl<W: Write> Archive<W> {
    pub fn new(out: W) -> Self {
        Archive { out, next_inode: 1, written: 0 }
    }

    pub fn dir(&mut self, path: &str) -> io::Result<()> {
        self.entry(path, MODE_DIR | 0o755, b"")
    }

    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) -> io::Result<()> {
        self.entry(path, MODE_FILE | (mode & 0o7777), data)
    }

    pub fn symlink(&mut self, path: &str, target: &str) -> io::Result<()> {
        self.entry(path, MODE_SYMLINK | 0o777, target.as_bytes())
    }

    /// Writes the trailer and returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.entry("TRAILER!!!", 0, b"")?;
        Ok(self.out)
    }

    fn entry(&mut self, path: &str, mode: u32, data: &[u8]) -> io::Result<()> {
        let name = path.trim_start_matches('/');
        let size = u32::try_from(data.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("{path}: larger than 4 GiB")))?;
        let name_size =
            u32::try_from(name.len() + 1).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "name too long"))?;
        let inode = self.next_inode;
        self.next_inode += 1;
        let nlink = if mode & MODE_DIR != 0 { 2 } else { 1 };
        // c_magic, then ino mode uid gid nlink mtime filesize devmajor
        // devminor rdevmajor rdevminor namesize check, 8 hex digits each.
        let header = format!(
            "070701{inode:08x}{mode:08x}{:08x}{:08x}{nlink:08x}{:08x}{size:08x}{:08x}{:08x}{:08x}{:08x}{name_size:08x}{:08x}",
            0, 0, 0, 0, 0, 0, 0, 0
        );
        self.put(header.as_bytes())?;
        self.put(name.as_bytes())?;
        self.put(&[0])?;
        self.pad()?;
        self.put(data)?;
        self.pad()
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    fn pad(&mut self) -> io::Result<()> {
        let pad = (4 - (self.written % 4) as usize) % 4;
        self.put(&[0u8; 3][..pad])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_aligned_and_terminated() {
        let mut archive = Archive::new(Vec::new());
        archive.dir("bin").unwrap();
        archive.file("/bin/hello", 0o755, b"hi\n").unwrap();
        archive.symlink("bin/sh", "busybox").unwrap();
        let bytes = archive.finish().unwrap();
        assert_eq!(bytes.len() % 4, 0);
        assert!(bytes.starts_with(b"070701"));
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("bin/hello\0"));
        assert!(text.ends_with("TRAILER!!!\0\0\0\0") || text.contains("TRAILER!!!\0"));
        // The file's data follows its 4-byte aligned name.
        let at = text.find("bin/hello\0").unwrap() + "bin/hello\0".len();
        let data_at = at.div_ceil(4) * 4;
        assert_eq!(&bytes[data_at..data_at + 3], b"hi\n");
    }
}

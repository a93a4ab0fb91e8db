//! Opening files whose names come from untrusted input: the files of a
//! session directory, and the paths a session recorded (images.json), which
//! may have been replaced by anything since.
//!
//! A plain `open(O_RDONLY)` of a FIFO waits for a writer forever, and
//! opening a device node can have side effects (a tape rewinds, a terminal
//! becomes the controlling one). So a path is first opened with `O_PATH`,
//! which opens nothing but the name, and checked with fstat; only a regular
//! file is then opened for reading, `O_NONBLOCK` so that a FIFO swapped in
//! between the two opens cannot block either, and checked again to be the
//! same inode. Symbolic links are followed (a link to a regular file is
//! fine; a link to a FIFO is refused like the FIFO).

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Something else than a regular file (named: "FIFO", "directory"...).
    #[error("not a regular file ({0})")]
    NotRegular(&'static str),
    /// A regular file larger than the reader accepts.
    #[error("larger than {limit} bytes")]
    TooLarge { limit: u64 },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl OpenError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, OpenError::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

fn kind(ft: std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "directory"
    } else if ft.is_fifo() {
        "FIFO"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_char_device() {
        "character device"
    } else if ft.is_block_device() {
        "block device"
    } else if ft.is_symlink() {
        "symbolic link"
    } else {
        "special file"
    }
}

/// Opens `path` for reading if, and only if, it is a regular file (after
/// following symbolic links), without ever blocking in open(2).
pub fn open_regular(path: &Path) -> Result<File, OpenError> {
    let probe = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path)?;
    let m = probe.metadata()?;
    if !m.file_type().is_file() {
        return Err(OpenError::NotRegular(kind(m.file_type())));
    }
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)?;
    let m2 = f.metadata()?;
    if !m2.file_type().is_file() {
        return Err(OpenError::NotRegular(kind(m2.file_type())));
    }
    if (m2.dev(), m2.ino()) != (m.dev(), m.ino()) {
        // replaced between the two opens: report what is there now
        return Err(OpenError::Io(std::io::Error::other(
            "replaced while being opened",
        )));
    }
    Ok(f)
}

/// Reads a regular file of at most `limit` bytes (see [`open_regular`]).
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, OpenError> {
    let f = open_regular(path)?;
    let len = f.metadata()?.len();
    if len > limit {
        return Err(OpenError::TooLarge { limit });
    }
    let mut v = Vec::with_capacity(len as usize);
    // take(): the file may grow after the fstat
    f.take(limit + 1).read_to_end(&mut v)?;
    if v.len() as u64 > limit {
        return Err(OpenError::TooLarge { limit });
    }
    Ok(v)
}

/// A path that names an open file (for libraries that take paths): it
/// stays the file we checked for as long as `f` is open, whatever happens
/// to the name it was opened by.
pub fn fd_path(f: &File) -> std::path::PathBuf {
    use std::os::fd::AsRawFd;
    std::path::PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_only() {
        let d = std::env::temp_dir().join(format!("mantle-prof-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("f"), b"abc").unwrap();
        assert_eq!(read_regular(&d.join("f"), 3).unwrap(), b"abc");
        assert!(matches!(
            read_regular(&d.join("f"), 2),
            Err(OpenError::TooLarge { limit: 2 })
        ));
        assert!(matches!(
            read_regular(&d, 10),
            Err(OpenError::NotRegular("directory"))
        ));
        assert!(matches!(
            read_regular(Path::new("/dev/null"), 10),
            Err(OpenError::NotRegular("character device"))
        ));
        assert!(read_regular(&d.join("nope"), 10)
            .unwrap_err()
            .is_not_found());
        std::os::unix::fs::symlink(d.join("f"), d.join("l")).unwrap();
        assert_eq!(read_regular(&d.join("l"), 3).unwrap(), b"abc");
        std::fs::remove_dir_all(&d).unwrap();
    }
}

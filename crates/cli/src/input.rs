//! Files the user names for mantle to read (`tags up --cluster`, `tag
//! lifeline --merge`): only regular files, and never more than a stated
//! size. Opened without blocking, so a FIFO cannot hang mantle at open;
//! refused unless fstat says regular (a FIFO, /dev/zero or a directory
//! would block forever or grow without end: issue 32, `--cluster
//! /dev/zero` took 4.7 GB in 8 s); read through a limit one byte over the
//! cap, so a file that grows after the check is refused too.

use crate::exit::{Failure, EXIT_USAGE};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The largest cluster table read: 16 tags need a few hundred bytes.
pub const MAX_CLUSTER_BYTES: u64 = 64 << 10;
/// The largest lifeline file read for a merge (records are capped apart,
/// `mantle_tags::lifeline_file::MAX_MERGE_RECORDS`).
/// A full merge budget of compact records is about 250 MB.
pub const MAX_MERGE_BYTES: u64 = 256 << 20;

/// Opens `path` (a `what`) for reading if it is a regular file of at most
/// `max` bytes; the file is then read through a `max + 1` limit.
pub fn open_regular(what: &str, path: &Path, max: u64) -> Result<std::io::Take<File>, Failure> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Failure::io(&format!("cannot read {what}"), path, &e))?;
    let m = f
        .metadata()
        .map_err(|e| Failure::io(&format!("cannot read {what}"), path, &e))?;
    let t = m.file_type();
    if !t.is_file() {
        let kind = if t.is_fifo() {
            "a FIFO"
        } else if t.is_dir() {
            "a directory"
        } else if t.is_char_device() || t.is_block_device() {
            "a device"
        } else if t.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        };
        return Err(Failure::new(
            EXIT_USAGE,
            format!(
                "{what} {}: {kind}: mantle reads only regular files",
                path.display()
            ),
        ));
    }
    if m.len() > max {
        return Err(too_big(what, path, max));
    }
    Ok(f.take(max + 1))
}

fn too_big(what: &str, path: &Path, max: u64) -> Failure {
    Failure::new(
        EXIT_USAGE,
        format!(
            "{what} {}: larger than {} bytes, the most mantle reads",
            path.display(),
            max
        ),
    )
}

/// The whole of a regular file of at most `max` bytes.
pub fn read_regular_bytes(what: &str, path: &Path, max: u64) -> Result<Vec<u8>, Failure> {
    let mut r = open_regular(what, path, max)?;
    let mut v = Vec::new();
    r.read_to_end(&mut v)
        .map_err(|e| Failure::io(&format!("cannot read {what}"), path, &e))?;
    if v.len() as u64 > max {
        return Err(too_big(what, path, max));
    }
    Ok(v)
}

/// The whole of a regular file of at most `max` bytes, as text.
pub fn read_regular(what: &str, path: &Path, max: u64) -> Result<String, Failure> {
    let mut r = open_regular(what, path, max)?;
    let mut s = String::new();
    r.read_to_string(&mut s)
        .map_err(|e| Failure::io(&format!("cannot read {what}"), path, &e))?;
    if s.len() as u64 > max {
        return Err(too_big(what, path, max));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_fifos_and_directories_are_refused_at_once() {
        let dir = std::env::temp_dir().join(format!("mantle-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let big = dir.join("big");
        std::fs::write(&big, vec![b'x'; 11]).unwrap();
        let ok = dir.join("ok");
        std::fs::write(&ok, "abc").unwrap();
        let r = [
            read_regular("t", Path::new("/dev/zero"), 10).map(|_| ()),
            read_regular("t", &fifo, 10).map(|_| ()),
            read_regular("t", &dir, 10).map(|_| ()),
            read_regular("t", &big, 10).map(|_| ()),
        ];
        let got = read_regular("t", &ok, 10).ok();
        std::fs::remove_dir_all(&dir).unwrap();
        for (r, want) in r
            .into_iter()
            .zip(["a device", "a FIFO", "a directory", "larger than 10"])
        {
            let f = r.err().unwrap_or_else(|| panic!("accepted: {want}"));
            assert_eq!(f.code, EXIT_USAGE);
            assert!(f.message.contains(want), "{}", f.message);
        }
        assert_eq!(got.as_deref(), Some("abc"));
    }
}

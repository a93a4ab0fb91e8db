//! The machine-wide kernel lock, /run/mantle-kernel.lock: the kernel side is
//! global machine state, so every test binary, benchmark and script that
//! loads, changes or unloads it holds an exclusive flock on this file for
//! as long as it does.

use std::fs::{self, File, OpenOptions};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

pub const KERNEL_LOCK: &str = "/run/mantle-kernel.lock";

/// Takes /run/mantle-kernel.lock for the life of the binary. When run as
/// `flock /run/mantle-kernel.lock cargo test`, the lock is already ours:
/// flock(1) passes its fd down, and locking that same open file succeeds
/// at once (a fresh open would wait for flock(1) forever). If an ancestor
/// holds the lock without passing the fd (`flock -o`), it holds it for us.
pub fn take_kernel_lock() -> Result<File, String> {
    let flock = |f: &File, how: i32| {
        // SAFETY: flock on an fd the File owns; no memory is involved.
        unsafe { libc::flock(f.as_raw_fd(), how) == 0 }
    };
    for e in fs::read_dir("/proc/self/fd")
        .map_err(|e| e.to_string())?
        .flatten()
    {
        if fs::read_link(e.path()).is_ok_and(|p| p == Path::new(KERNEL_LOCK)) {
            let Ok(fd) = e.file_name().to_string_lossy().parse::<RawFd>() else {
                continue;
            };
            // SAFETY: F_DUPFD_CLOEXEC of an fd open in this process (listed in /proc/self/fd); it touches no memory.
            let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
            if dup < 0 {
                continue;
            }
            // SAFETY: dup is a fresh fd nobody else owns; the File closes it.
            let f = unsafe { File::from_raw_fd(dup) };
            if flock(&f, libc::LOCK_EX | libc::LOCK_NB) {
                return Ok(f);
            }
        }
    }
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(KERNEL_LOCK)
        .map_err(|e| format!("open {KERNEL_LOCK}: {e}"))?;
    // Root's alone: flock needs no write access, so a lock file anybody can
    // open is one anybody can hold, stalling every test, benchmark and
    // example (issue 8). An older file made 0644 is tightened.
    fs::set_permissions(KERNEL_LOCK, fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("chmod {KERNEL_LOCK}: {e}"))?;
    if flock(&f, libc::LOCK_EX | libc::LOCK_NB) {
        return Ok(f);
    }
    if let Some(pid) = lock_holder_is_ancestor(&f) {
        eprintln!("mantle tests: {KERNEL_LOCK} is held by our ancestor {pid}: running under it");
        return Ok(f);
    }
    eprintln!("mantle tests: waiting for {KERNEL_LOCK} (another user of the kernel side)");
    if flock(&f, libc::LOCK_EX) {
        return Ok(f);
    }
    Err(format!(
        "flock {KERNEL_LOCK}: {}",
        std::io::Error::last_os_error()
    ))
}

/// The pid holding the flock on `f`'s inode, if it is one of our ancestors.
fn lock_holder_is_ancestor(f: &File) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let ino = f.metadata().ok()?.ino();
    let locks = fs::read_to_string("/proc/locks").ok()?;
    let holder = locks.lines().find_map(|l| {
        let v: Vec<&str> = l.split_whitespace().collect();
        (v.len() >= 6 && v[1] == "FLOCK" && v[5].rsplit(':').next() == Some(&ino.to_string()))
            .then(|| v[4].parse::<u32>().ok())
            .flatten()
    })?;
    let mut pid = std::process::id();
    while pid > 1 {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        pid = stat
            .rsplit(')')
            .next()?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        if pid == holder {
            return Some(holder);
        }
    }
    None
}

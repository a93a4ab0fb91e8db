//! Advisory whole-file locks (`flock(2)`) with a bounded wait, and who
//! holds one (`/proc/locks`).
//!
//! `flock` needs no write access: any process that can open a lock file
//! can hold its lock. Callers keep lock files in directories only their
//! own user can enter (crates/tags: `/run/mantle/lock`, 0700).
//!
//! No locks of its own.

use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Takes an exclusive lock on `f`, polling every 10 ms until `timeout`
/// passes: `Ok(true)` when taken, `Ok(false)` when still held by another.
pub fn lock_exclusive(f: &std::fs::File, timeout: Duration) -> io::Result<bool> {
    let deadline = Instant::now() + timeout;
    loop {
        // SAFETY: plain call on a valid fd.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(e);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The pid holding a flock on `f`, from /proc/locks (matched by inode).
pub fn holder(f: &std::fs::File) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let ino = f.metadata().ok()?.ino();
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    holder_in(&locks, ino)
}

/// The pid of the FLOCK on inode `ino` in /proc/locks text.
fn holder_in(locks: &str, ino: u64) -> Option<u32> {
    locks.lines().find_map(|l| {
        // "1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF"
        let f: Vec<&str> = l.split_whitespace().collect();
        let (pid, dev_ino) = (f.get(4)?, f.get(5)?);
        (f.get(1) == Some(&"FLOCK") && dev_ino.rsplit(':').next()?.parse::<u64>().ok()? == ino)
            .then(|| pid.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_is_found_by_inode_and_only_for_flock() {
        let t = "1: POSIX  ADVISORY  WRITE 99 00:1a:77 0 EOF\n\
                 2: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF\n";
        assert_eq!(holder_in(t, 5678), Some(1234));
        assert_eq!(holder_in(t, 77), None);
        assert_eq!(holder_in("garbage\n", 1), None);
    }

    #[test]
    fn a_second_open_waits_then_gives_up() {
        let _g = crate::test_serial(); // opens fds: not while others count them
        let p = std::env::temp_dir().join(format!("mantle-lock-{}", std::process::id()));
        let a = std::fs::File::create(&p).unwrap();
        let b = std::fs::File::open(&p).unwrap();
        assert!(lock_exclusive(&a, Duration::ZERO).unwrap());
        let t = Instant::now();
        assert!(!lock_exclusive(&b, Duration::from_millis(50)).unwrap());
        assert!(t.elapsed() >= Duration::from_millis(50));
        assert_eq!(holder(&b), Some(std::process::id()));
        drop(a);
        // Other tests of this binary fork children, which share `a`'s open
        // file (and so its lock) until they exit or exec: wait for them.
        assert!(lock_exclusive(&b, Duration::from_secs(10)).unwrap());
        std::fs::remove_file(&p).unwrap();
    }
}

//! Network namespace identities: the cookie the kernel gives each network
//! namespace (`SO_NETNS_COOKIE`, Linux 5.14), the same value eBPF programs
//! read with `bpf_get_netns_cookie`, so user space and the kernel side can
//! name hosts alike.
//!
//! No locks; `cookie_of` runs `setns` on a short-lived thread of its own,
//! so the caller's threads never change namespace.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// `SO_NETNS_COOKIE` (include/uapi/asm-generic/socket.h; not in every libc).
const SO_NETNS_COOKIE: libc::c_int = 71;

/// The cookie of the calling thread's network namespace.
pub fn own_cookie() -> io::Result<u64> {
    // SAFETY: plain system call; a non-negative result is a new fd.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is new and owned by nobody else; closed on drop.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut cookie: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: cookie/len point at locals of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_NETNS_COOKIE,
            (&mut cookie as *mut u64).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cookie)
}

/// The cookie of the network namespace at `path` (e.g. /run/netns/NAME),
/// asked from a short-lived thread that joins it (setns changes only the
/// calling thread).
pub fn cookie_of(path: &Path) -> io::Result<u64> {
    let f = std::fs::File::open(path)?;
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: setns on a valid namespace fd, on this scoped thread
            // only, which ends right after.
            if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            own_cookie()
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("netns thread panicked")))
    })
}

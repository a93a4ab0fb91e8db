//! Thin, typed wrappers over system calls used across mantle.
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

/// The calling thread's kernel thread id.
pub fn gettid() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// PIDFD_THREAD (Linux 6.9): a pidfd that names one thread, not a process.
pub const PIDFD_THREAD: u32 = libc::O_EXCL as u32;

/// Opens a pidfd for a process (`thread == false`) or for one thread.
pub fn pidfd_open(id: u32, thread: bool) -> io::Result<OwnedFd> {
    let flags = if thread { PIDFD_THREAD } else { 0 };
    // SAFETY: plain system call; on success the return value is a new fd we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, id as libc::c_int, flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a freshly opened descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether `path` is the mount point of a filesystem of type `fstype`
/// according to /proc/self/mounts.
pub fn is_mounted(path: &str, fstype: &str) -> bool {
    std::fs::read_to_string("/proc/self/mounts")
        .map(|m| {
            m.lines().any(|l| {
                let mut f = l.split_whitespace();
                let _dev = f.next();
                f.next() == Some(path) && f.next() == Some(fstype)
            })
        })
        .unwrap_or(false)
}

/// Mounts bpffs at /sys/fs/bpf if it is not mounted yet (root only).
pub fn ensure_bpffs() -> io::Result<()> {
    if is_mounted("/sys/fs/bpf", "bpf") {
        return Ok(());
    }
    let src = c"bpf";
    let target = c"/sys/fs/bpf";
    // SAFETY: all pointers are valid NUL-terminated strings; data is null.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            src.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Effective uid of the caller.
pub fn geteuid() -> u32 {
    // SAFETY: cannot fail.
    unsafe { libc::geteuid() }
}

/// This machine's name (uname nodename).
pub fn hostname() -> String {
    // SAFETY: utsname is plain data filled by uname.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "localhost".into();
    }
    let b: Vec<u8> = u
        .nodename
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&b).into_owned()
}

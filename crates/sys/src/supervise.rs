//! System calls of a supervisor (the executive of crates/exec): reading and
//! writing a guest's memory (process_vm_readv/writev), a guest's call to
//! its executive ([`exec_trap`], used by libmantle), taking a guest's file-system
//! identity on one thread (setfsuid, setfsgid, setgroups as raw system
//! calls: the kernel keeps credentials per thread, and glibc's wrappers
//! would change every thread of the process), real-time scheduling and
//! locked memory, passing an fd over a unix socket (SCM_RIGHTS), the
//! child-subreaper flag, non-blocking waits, poll, kill and execve.
//!
//! Invariants: every function is one or a few system calls on memory the
//! caller passes; the ones marked async-signal-safe allocate nothing and
//! may run in a child between fork and exec. New fds come back as
//! [`OwnedFd`]s opened close-on-exec; errors are the `io::Error` of the
//! errno.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// process_vm_readv(2) of one range: reads `buf.len()` bytes at `addr` of
/// process (or thread) `tid`; returns the bytes read (short at the end of
/// a mapping). Needs ptrace access to `tid` (PTRACE_MODE_ATTACH_REALCREDS).
pub fn read_memory(tid: u32, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`, which is valid for writing
    // buf.len() bytes; `remote` is only an address in the other process,
    // which the kernel checks.
    let n = unsafe { libc::process_vm_readv(tid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// process_vm_writev(2) of one range: writes `buf` at `addr` of process
/// (or thread) `tid`; returns the bytes written (short at the end of a
/// mapping). Needs ptrace access to `tid`.
pub fn write_memory(tid: u32, addr: u64, buf: &[u8]) -> io::Result<usize> {
    let local = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`, valid for reading buf.len() bytes
    // (the kernel only reads it); `remote` is only an address in the other
    // process, which the kernel checks.
    let n = unsafe { libc::process_vm_writev(tid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// recv(fd, buf, MSG_DONTWAIT): one datagram (or what a stream has) into
/// `buf`, never waiting; WouldBlock when there is nothing. For a
/// supervisor reading on a guest's behalf from a dup of its socket.
pub fn recv_nonblock(fd: BorrowedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for writing buf.len() bytes.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Whether `fd` is a socket (fstat).
pub fn is_socket(fd: BorrowedFd) -> io::Result<bool> {
    // SAFETY: st is plain data the kernel fills.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is valid for writing.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.st_mode & libc::S_IFMT == libc::S_IFSOCK)
}

/// kcmp(KCMP_FILE): whether fd `a` of process `pid_a` and fd `b` of
/// `pid_b` are the same open file (the same file description). Needs
/// ptrace access to both.
pub fn same_file(pid_a: u32, a: i32, pid_b: u32, b: i32) -> io::Result<bool> {
    const KCMP_FILE: libc::c_long = 0;
    // SAFETY: plain system call with integer arguments.
    let r = unsafe { libc::syscall(libc::SYS_kcmp, pid_a, pid_b, KCMP_FILE, a, b) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r == 0)
}

/// The call a guest makes to its executive: `syscall(nr, op, a1..a5)`,
/// raw (the result as the kernel or the executive gave it: >= 0 or
/// -errno). `nr` is mantle_abi::exec::SYS_EXEC; not under an executive
/// the kernel answers -ENOSYS.
///
/// The executive may write to the memory that `op`'s arguments point at
/// (an RPC's response buffer); callers pass pointers to memory they own
/// (mantle-api's safe wrappers take slices).
pub fn exec_trap(nr: u32, op: u64, a: [u64; 5]) -> i64 {
    // SAFETY: integer arguments; the kernel does not dereference them for
    // an unknown call number, and the executive writes only within the
    // (pointer, capacity) pairs the caller passed for that purpose.
    let r = unsafe { libc::syscall(nr as libc::c_long, op, a[0], a[1], a[2], a[3], a[4]) };
    if r < 0 {
        -i64::from(
            io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    } else {
        r
    }
}

/// setfsuid(2) on the calling thread only (raw system call); returns the
/// previous fsuid. The kernel reports no error: check with a second call.
pub fn set_thread_fsuid(uid: u32) -> u32 {
    // SAFETY: integer argument; changes the calling thread's credentials.
    unsafe { libc::syscall(libc::SYS_setfsuid, uid) as u32 }
}

/// setfsgid(2) on the calling thread only (raw system call); returns the
/// previous fsgid.
pub fn set_thread_fsgid(gid: u32) -> u32 {
    // SAFETY: integer argument; changes the calling thread's credentials.
    unsafe { libc::syscall(libc::SYS_setfsgid, gid) as u32 }
}

/// setgroups(2) on the calling thread only (raw system call; needs
/// CAP_SETGID).
pub fn set_thread_groups(groups: &[u32]) -> io::Result<()> {
    // SAFETY: groups is valid for reading groups.len() gid_t values.
    let r = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's supplementary groups (getgroups(2)).
pub fn thread_groups() -> io::Result<Vec<u32>> {
    let mut g = vec![0u32; 65536];
    // SAFETY: g is valid for writing g.len() gid_t values.
    let n = unsafe { libc::syscall(libc::SYS_getgroups, g.len(), g.as_mut_ptr()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    g.truncate(n as usize);
    Ok(g)
}

/// sched_setscheduler(0, SCHED_FIFO, priority) on the calling thread.
pub fn set_fifo(priority: i32) -> io::Result<()> {
    set_fifo_of(0, priority)
}

/// sched_setscheduler(tid, SCHED_FIFO, priority): thread `tid` (0: the
/// caller); threads and children it creates later inherit it.
pub fn set_fifo_of(tid: u32, priority: i32) -> io::Result<()> {
    let p = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: p is a valid sched_param.
    if unsafe { libc::sched_setscheduler(tid as libc::pid_t, libc::SCHED_FIFO, &p) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether thread `tid` runs under a real-time policy (SCHED_FIFO,
/// SCHED_RR or SCHED_DEADLINE, sched_getscheduler): its own choice, which
/// a boost must neither lower nor end. False if it cannot be read.
pub fn is_realtime(tid: u32) -> bool {
    // SAFETY: plain system call with an integer argument.
    let p = unsafe { libc::sched_getscheduler(tid as libc::pid_t) } & !libc::SCHED_RESET_ON_FORK;
    p == libc::SCHED_FIFO || p == libc::SCHED_RR || p == libc::SCHED_DEADLINE
}

/// sched_setscheduler(tid, SCHED_OTHER, 0): thread `tid` back to the
/// normal policy (nice unchanged).
pub fn set_other_of(tid: u32) -> io::Result<()> {
    let p = libc::sched_param { sched_priority: 0 };
    // SAFETY: p is a valid sched_param.
    if unsafe { libc::sched_setscheduler(tid as libc::pid_t, libc::SCHED_OTHER, &p) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// mlockall(MCL_CURRENT | MCL_FUTURE).
pub fn lock_memory() -> io::Result<()> {
    // SAFETY: integer flags.
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) (Linux 4.4): pages
/// are locked as they are touched, never populated ahead. For a process
/// that maps large sparse memory (the fast path's region: thousands of
/// slots of which only those in use are ever touched), where
/// [`lock_memory`] would commit all of it.
pub fn lock_memory_on_fault() -> io::Result<()> {
    // SAFETY: integer flags.
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE | libc::MCL_ONFAULT) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Blocks `sigs` in the calling thread only (pthread_sigmask), so that
/// the process's other threads receive them: a helper thread that waits
/// in a system call must not take the signal meant to interrupt the main
/// thread's wait.
pub fn block_signals_here(sigs: &[i32]) -> io::Result<()> {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: set is a valid sigset_t for these calls to fill.
    unsafe { libc::sigemptyset(&mut set) };
    for &s in sigs {
        // SAFETY: as above; an invalid number is refused with EINVAL.
        if unsafe { libc::sigaddset(&mut set, s) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: set is initialised; the old mask is not asked for.
    let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok(())
}

/// socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC).
pub fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints for the kernel to fill.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: two new descriptors that nobody else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The control-message buffer for one fd, aligned as cmsghdr needs.
#[repr(C, align(8))]
struct OneFdCmsg([u8; 24]);
const _: () = assert!(std::mem::size_of::<libc::cmsghdr>() + 4 <= 24);

/// Sends fd `fd` with one byte over unix socket `sock` (SCM_RIGHTS).
/// Async-signal-safe (no allocation): for a child between fork and exec.
pub fn send_fd(sock: BorrowedFd, fd: RawFd) -> io::Result<()> {
    send_fd_tagged(sock, fd, 0)
}

/// [`send_fd`] as a raw sendmsg whose (unused) sixth argument is `tag`:
/// the launch cookie a seccomp filter lets through
/// ([`crate::seccomp::notify_on_set`]).
pub fn send_fd_tagged(sock: BorrowedFd, fd: RawFd, tag: u64) -> io::Result<()> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut cbuf = OneFdCmsg([0; 24]);
    // SAFETY: msghdr is plain data; zeroed is a valid empty value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE/CMSG_LEN are pure arithmetic.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(4) } as _;
    // SAFETY: msg_control points to cbuf, large and aligned enough for one
    // cmsghdr carrying one int (checked above), so CMSG_FIRSTHDR is
    // non-null and CMSG_DATA points inside cbuf.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(4) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<i32>(), fd);
    }
    loop {
        // SAFETY: msg points to live iov and cbuf for the call; the two
        // extra arguments are ignored by sendmsg.
        let r = unsafe {
            libc::syscall(
                libc::SYS_sendmsg,
                sock.as_raw_fd(),
                &msg as *const libc::msghdr,
                libc::MSG_NOSIGNAL,
                0,
                0,
                tag,
            )
        };
        if r >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The pid and uid of the process at the other end of connected unix
/// socket `sock`, as the kernel recorded them at connect (SO_PEERCRED:
/// not a claim of the peer's).
pub fn peer_cred(sock: BorrowedFd) -> io::Result<(u32, u32)> {
    let mut c = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: c and len are valid for writing, len is c's size.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut c as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((c.pid as u32, c.uid))
}

/// Receives one fd sent by [`send_fd`] (close-on-exec). End of file (the
/// sender died before sending) is UnexpectedEof.
pub fn recv_fd(sock: BorrowedFd) -> io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut cbuf = OneFdCmsg([0; 24]);
    // SAFETY: msghdr is plain data; zeroed is a valid empty value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    msg.msg_controllen = cbuf.0.len() as _;
    let n = loop {
        // SAFETY: msg points to live iov and cbuf that the kernel fills.
        let r = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if r >= 0 {
            break r;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    if n == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    // SAFETY: the kernel set msg_controllen to what it wrote into cbuf;
    // CMSG_FIRSTHDR returns null when there is no header.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null()
            || (*c).cmsg_level != libc::SOL_SOCKET
            || (*c).cmsg_type != libc::SCM_RIGHTS
            || ((*c).cmsg_len as usize) < libc::CMSG_LEN(4) as usize
        {
            return Err(io::Error::other("no fd in the message"));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<i32>());
        // SAFETY: SCM_RIGHTS installed a new fd in this process for us.
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// prctl(PR_SET_CHILD_SUBREAPER, 1): orphans of this process's
/// descendants become its children.
pub fn set_child_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// How a waited-for child ended: (pid, exit code or None, signal or None,
/// core dumped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waited {
    pub pid: i32,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub core: bool,
}

/// waitpid(pid, WNOHANG or blocking): Ok(None) when nothing ended yet
/// (WNOHANG); ECHILD as an error. Stops and continues are skipped.
pub fn wait_child(pid: i32, block: bool) -> io::Result<Option<Waited>> {
    loop {
        let mut status = 0;
        let flags = if block { 0 } else { libc::WNOHANG };
        // SAFETY: status is a valid out pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, flags | libc::__WALL) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                if block {
                    return Err(e);
                }
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            return Ok(None);
        }
        if libc::WIFEXITED(status) {
            return Ok(Some(Waited {
                pid: r,
                code: Some(libc::WEXITSTATUS(status)),
                signal: None,
                core: false,
            }));
        }
        if libc::WIFSIGNALED(status) {
            return Ok(Some(Waited {
                pid: r,
                code: None,
                signal: Some(libc::WTERMSIG(status)),
                core: libc::WCOREDUMP(status),
            }));
        }
    }
}

/// kill(2); ESRCH is Ok(false).
pub fn kill(pid: i32, sig: i32) -> io::Result<bool> {
    // SAFETY: integer arguments.
    if unsafe { libc::kill(pid, sig) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ESRCH) {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(true)
}

/// poll(2) on `fds` for up to `timeout_ms` (-1: forever); EINTR is Ok(0)
/// with no events set.
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: fds is a valid array of fds.len() pollfd structs.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            for f in fds.iter_mut() {
                f.revents = 0;
            }
            return Ok(0);
        }
        return Err(e);
    }
    Ok(r as usize)
}

/// execve(2) with NULL-terminated argv and envp arrays prepared before the
/// fork; returns only on failure, with its errno. Async-signal-safe.
pub fn execve(path: &CStr, argv: &[*const libc::c_char], envp: &[*const libc::c_char]) -> i32 {
    if argv.last().is_none_or(|p| !p.is_null()) || envp.last().is_none_or(|p| !p.is_null()) {
        return libc::EINVAL;
    }
    // SAFETY: path is a C string; argv and envp are NULL-terminated arrays
    // of pointers to C strings that the caller keeps alive.
    unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The calling thread's errno-free getppid(2), a real system call (for
/// performing a guest's getppid at the cost of one).
pub fn getppid_raw() -> i32 {
    // SAFETY: getppid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_getppid) as i32 }
}

/// openat(2) with raw arguments (the executive performing a guest's
/// open): a new fd, close-on-exec in this process.
pub fn openat_raw(dirfd: RawFd, path: &CStr, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    // SAFETY: path is a C string; the other arguments are integers.
    let fd = unsafe { libc::openat(dirfd, path.as_ptr(), flags | libc::O_CLOEXEC, mode) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// RESOLVE_NO_MAGICLINKS (linux/openat2.h): refuse /proc/PID/fd/N-style
/// links during resolution.
pub const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
/// RESOLVE_IN_ROOT (linux/openat2.h): `/`, `..` and absolute symbolic
/// links stay inside the directory fd, as if it were the root.
pub const RESOLVE_IN_ROOT: u64 = 0x10;

/// openat2(2) (Linux 5.6) with `resolve` flags; the new fd is close-on-exec
/// in this process. `mode` is dropped unless O_CREAT or O_TMPFILE (openat2
/// refuses it otherwise).
pub fn openat2_raw(
    dirfd: RawFd,
    path: &CStr,
    flags: i32,
    mode: u32,
    resolve: u64,
) -> io::Result<OwnedFd> {
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let creates = flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE;
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u32 as u64,
        mode: if creates { u64::from(mode & 0o7777) } else { 0 },
        resolve,
    };
    // SAFETY: path is a C string; how is a valid struct open_how of the
    // size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd,
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// prctl(PR_SET_DUMPABLE, 0): this process's /proc files (mem, environ,
/// fd...) become root's and ptrace needs CAP_SYS_PTRACE, so that a guest
/// of the same user cannot reach the executive's memory.
pub fn set_not_dumpable() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// prctl(PR_SET_TIMERSLACK, ns) for the calling thread: how much later
/// than asked the kernel may end its timed waits, to merge wake-ups. The
/// default is 50 µs for SCHED_OTHER threads. An executive that keeps time
/// sets 1 ns (0 would mean "the default").
pub fn set_timer_slack_ns(ns: u64) -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// write(2) of a few bytes, ignoring EAGAIN (a wake-up byte on a pipe).
pub fn write_wake(fd: BorrowedFd) {
    // SAFETY: one byte from a live buffer.
    unsafe { libc::write(fd.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
}

/// Reads and drops whatever is in a non-blocking pipe (wake-up bytes).
pub fn drain(fd: BorrowedFd) {
    let mut b = [0u8; 64];
    // SAFETY: b is valid for writing 64 bytes.
    while unsafe { libc::read(fd.as_raw_fd(), b.as_mut_ptr().cast(), b.len()) } > 0 {}
}

/// pipe2(O_CLOEXEC | O_NONBLOCK): (read end, write end).
pub fn pipe_nonblock() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints for the kernel to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both are new descriptors that nobody else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Why a filtered child could not start: the step and its errno, as the
/// child reported them on the status pipe (8 bytes: step, errno).
pub const STEP_NO_NEW_PRIVS: u32 = 1;
pub const STEP_FILTER: u32 = 2;
pub const STEP_SEND_LISTENER: u32 = 3;
pub const STEP_EXEC: u32 = 4;
pub const STEP_CGROUP: u32 = 5;
pub const STEP_AFFINITY: u32 = 6;

/// What a guest child needs, all prepared before the fork (nothing is
/// allocated in the child).
pub struct FilteredExec<'a> {
    pub path: &'a CStr,
    /// NULL-terminated.
    pub argv: &'a [*const libc::c_char],
    /// NULL-terminated.
    pub envp: &'a [*const libc::c_char],
    pub filter: &'a [crate::seccomp::sock_filter],
    /// The filter's launch cookie (see `seccomp::notify_on_set`).
    pub launch_cookie: u64,
    /// A `cgroup.procs` file opened for writing: the child moves itself
    /// there before anything else (so it never runs outside it).
    pub cgroup_procs: Option<RawFd>,
    /// A second `cgroup.procs` (another hierarchy's, the cgroup v1
    /// freezer's), joined right after the first.
    pub freezer_procs: Option<RawFd>,
    /// CPUs the child (and what it starts) may run on; empty: unchanged.
    pub cpus: &'a [usize],
    /// Bind mounts in a private mount namespace, made before the filter
    /// (`--redirect`); empty: the caller's namespace.
    pub binds: &'a crate::mountns::Binds,
}

/// Forks a child that sets no_new_privs, installs `x.filter` with a new
/// listener, sends the listener over `sock` (SCM_RIGHTS), closes its own
/// copy and execs `x.path`. A failed step writes (step, errno) to
/// `status` (close-on-exec: end of file there means the exec happened)
/// and exits 127. The parent's copies of `sock` and `status` close here.
pub fn spawn_filtered(
    x: &FilteredExec,
    sock: OwnedFd,
    status: OwnedFd,
) -> io::Result<crate::os::ForkedChild> {
    let fail = |step: u32, errno: i32| -> i32 {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&step.to_ne_bytes());
        b[4..].copy_from_slice(&errno.to_ne_bytes());
        let _ = crate::os::write_all_raw(status.as_fd(), &b);
        127
    };
    // the CPU set is made before the fork: the child must not allocate
    // SAFETY: cpu_set_t is plain bits; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in x.cpus {
        if c < libc::CPU_SETSIZE as usize {
            // SAFETY: c is within the set's size.
            unsafe { libc::CPU_SET(c, &mut set) };
        }
    }
    let run = || -> i32 {
        for fd in [x.cgroup_procs, x.freezer_procs].into_iter().flatten() {
            // SAFETY: a write of one byte from a static buffer to an fd
            // opened before the fork.
            if unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } != 1 {
                return fail(
                    STEP_CGROUP,
                    io::Error::last_os_error().raw_os_error().unwrap_or(0),
                );
            }
        }
        if !x.cpus.is_empty()
            // SAFETY: set is a valid cpu_set_t built before the fork.
            && unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) } != 0
        {
            return fail(
                STEP_AFFINITY,
                io::Error::last_os_error().raw_os_error().unwrap_or(0),
            );
        }
        if let Err((step, errno)) = x.binds.enter() {
            return fail(step, errno);
        }
        if let Err(e) = crate::seccomp::set_no_new_privs() {
            return fail(STEP_NO_NEW_PRIVS, e.errno().unwrap_or(0));
        }
        let l = match crate::seccomp::install_listener_fd(x.filter) {
            Ok(l) => l,
            Err(e) => return fail(STEP_FILTER, e.errno().unwrap_or(0)),
        };
        if let Err(e) = send_fd_tagged(sock.as_fd(), l.as_raw_fd(), x.launch_cookie) {
            // the status write may be interposed, and nobody holds the
            // listener: end without it (the parent sees the socket close)
            let _ = e;
            // SAFETY: _exit ends the child at once; nothing to clean up.
            unsafe { libc::_exit(127) };
        }
        drop(l);
        let e = execve(x.path, x.argv, x.envp);
        fail(STEP_EXEC, e)
    };
    // SAFETY: the child only makes system calls (prctl, seccomp, sendmsg,
    // close, execve, write, _exit) on memory prepared before the fork; the
    // closures allocate nothing.
    unsafe { crate::os::fork_child(run) }
}

/// Forks while this process has a single thread, so that the child may do
/// anything (allocate, start threads); runs `f` in the child and exits
/// with its value. Refuses (EBUSY) when the process has more threads.
pub fn fork_single_threaded<F: FnOnce() -> i32>(f: F) -> io::Result<crate::os::ForkedChild> {
    check_single_threaded()?;
    // SAFETY: the process has one thread (checked just above, and only this
    // thread could start another), so no lock is held by a thread that
    // would not exist in the child: the child may allocate.
    unsafe { crate::os::fork_child(f) }
}

/// [`fork_single_threaded`], the child born in the cgroup v2 directory
/// `cgroup` ([`crate::os::fork_child_into_cgroup`]: no migration).
/// Errors of clone3 are returned as they are (the caller may fall back
/// to [`fork_single_threaded`] and a `cgroup.procs` write); `f` has not
/// run then.
pub fn fork_single_threaded_into<F: FnOnce() -> i32>(
    cgroup: std::os::fd::BorrowedFd,
    f: F,
) -> io::Result<crate::os::ForkedChild> {
    check_single_threaded()?;
    // SAFETY: as in fork_single_threaded: one thread.
    unsafe { crate::os::fork_child_into_cgroup(cgroup, f) }
}

fn check_single_threaded() -> io::Result<()> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // field 20 (num_threads), counted after the ")" that ends comm
    let threads = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(17))
        .and_then(|t| t.parse::<u32>().ok())
        .ok_or_else(|| io::Error::other("unreadable /proc/self/stat"))?;
    if threads != 1 {
        return Err(io::Error::from_raw_os_error(libc::EBUSY));
    }
    Ok(())
}

/// unshare(CLONE_FS) on the calling thread: its own cwd, root and umask
/// (so umask can then be set for it alone).
pub fn unshare_fs() -> io::Result<()> {
    // SAFETY: integer flag.
    if unsafe { libc::unshare(libc::CLONE_FS) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// umask(2) of the calling thread's fs struct; returns the old mask.
pub fn set_umask(mask: u32) -> u32 {
    // SAFETY: integer argument.
    unsafe { libc::umask(mask as libc::mode_t) as u32 }
}

static TERM: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn on_term(sig: libc::c_int) {
    TERM.store(sig, std::sync::atomic::Ordering::SeqCst);
}

extern "C" fn on_nothing(_: libc::c_int) {}

/// Signal handlers of a supervisor, without SA_RESTART (a blocked poll
/// returns): each of `term` records itself ([`term_requested`]); each of
/// `absorb` does nothing (unlike SIG_IGN, a handler is reset by execve,
/// so children started later get the default back).
pub fn catch_signals(term: &[i32], absorb: &[i32]) {
    let set = |sig: i32, h: extern "C" fn(libc::c_int)| {
        // SAFETY: sigaction is plain data; zeroed is an empty mask.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = h as *const () as libc::sighandler_t;
        // SAFETY: sa is valid; the handlers only store to an atomic or do
        // nothing (async-signal-safe).
        unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) };
    };
    for &s in term {
        set(s, on_term);
    }
    for &s in absorb {
        set(s, on_nothing);
    }
}

/// The last of [`catch_signals`]'s `term` signals received (0: none).
pub fn term_requested() -> i32 {
    TERM.load(std::sync::atomic::Ordering::SeqCst)
}

/// Makes the child `cmd` starts keep fd `fd` open across its exec (clears
/// FD_CLOEXEC in the child only), without tying its life to its parent's:
/// for guests that run on unsupervised when their executive dies
/// (`--fail-open`).
pub fn inherit_fd(cmd: &mut std::process::Command, fd: RawFd) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec and only
    // makes an async-signal-safe system call (fcntl) on integers.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Makes the child `cmd` starts keep fd `fd` open across its exec (clears
/// FD_CLOEXEC in the child only) and receive SIGKILL when the thread that
/// spawned it dies (PR_SET_PDEATHSIG): for guests that must not outlive
/// their executive.
pub fn inherit_fd_and_die_with_parent(cmd: &mut std::process::Command, fd: RawFd) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec and only
    // makes async-signal-safe system calls (fcntl, prctl) on integers.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0
                || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
            {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// CAP_SYS_NICE (linux/capability.h): raise priorities, set real-time
/// scheduling.
pub const CAP_SYS_NICE: u32 = 23;

/// The highest capability number of this kernel
/// (/proc/sys/kernel/cap_last_cap; 40 when unreadable).
pub fn cap_last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
}

/// Makes `cmd`'s child drop from its bounding set every capability but
/// those in `keep`, and set no_new_privs, between fork and exec: a child
/// started as root then holds only `keep` after the exec (root's
/// capabilities are recomputed from the bounding set). Without
/// CAP_SETPCAP (a manager that is not root) the drops fail and are
/// skipped: such a child has no capabilities to drop.
pub fn bound_caps_before_exec(cmd: &mut std::process::Command, keep: &[u32]) {
    use std::os::unix::process::CommandExt;
    let last = cap_last_cap().min(63);
    let mut mask = 0u64;
    for &k in keep.iter().filter(|&&k| k <= 63) {
        mask |= 1 << k;
    }
    // SAFETY: the closure runs in the child between fork and exec and only
    // makes async-signal-safe system calls (prctl) on integers.
    unsafe {
        cmd.pre_exec(move || {
            for cap in 0..=last {
                if mask & (1 << cap) == 0 {
                    // EPERM without CAP_SETPCAP: nothing to drop then
                    libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0);
                }
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Makes `cmd`'s child, between fork and exec (after the pre_execs
/// registered before this call), enter `binds`' mount namespace, set
/// no_new_privs and install `filter`; with `sock`, a new listener is
/// sent over it by a sendmsg carrying `cookie` (the filter's launch
/// cookie, [`crate::seccomp::filter`]). A failed step fails the spawn
/// with its errno.
pub fn filter_before_exec(
    cmd: &mut std::process::Command,
    binds: crate::mountns::Binds,
    filter: Vec<crate::seccomp::sock_filter>,
    sock: Option<RawFd>,
    cookie: u64,
) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec; it
    // makes system calls only (unshare, mount, open/write of /proc files,
    // prctl, seccomp, sendmsg, close) on memory prepared before the fork
    // (binds, filter) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            let os = io::Error::from_raw_os_error;
            binds.enter().map_err(|(_, e)| os(e))?;
            crate::seccomp::set_no_new_privs().map_err(|e| os(e.errno().unwrap_or(libc::EPERM)))?;
            match sock {
                None => crate::seccomp::install(&filter)
                    .map_err(|e| os(e.errno().unwrap_or(libc::EINVAL))),
                Some(sock) => {
                    let l = crate::seccomp::install_listener_fd(&filter)
                        .map_err(|e| os(e.errno().unwrap_or(libc::EINVAL)))?;
                    send_fd_tagged(BorrowedFd::borrow_raw(sock), l.as_raw_fd(), cookie)?;
                    drop(l);
                    libc::close(sock);
                    Ok(())
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory_and_refuses_bad_addresses() {
        let src = *b"hello, executive";
        let mut buf = [0u8; 16];
        let n = read_memory(std::process::id(), src.as_ptr() as u64, &mut buf).unwrap();
        assert_eq!(n, 16);
        assert_eq!(&buf, &src);
        assert!(read_memory(std::process::id(), 8, &mut buf).is_err());
    }

    #[test]
    fn writes_own_memory_and_refuses_bad_addresses() {
        let mut dst = [0u8; 5];
        let n = write_memory(std::process::id(), dst.as_mut_ptr() as u64, b"guest").unwrap();
        assert_eq!(n, 5);
        assert_eq!(&dst, b"guest");
        assert!(write_memory(std::process::id(), 8, b"x").is_err());
    }

    #[test]
    fn the_exec_trap_outside_an_executive_is_enosys() {
        assert_eq!(exec_trap(0x4d41, 1, [0; 5]), -i64::from(libc::ENOSYS));
    }

    #[test]
    fn an_fd_crosses_a_socketpair() {
        let _g = crate::test_serial(); // opens fds: not while others count them
        let (a, b) = socketpair().unwrap();
        let (r, w) = crate::os::pipe().unwrap();
        send_fd(a.as_fd(), w.as_raw_fd()).unwrap();
        let got = recv_fd(b.as_fd()).unwrap();
        crate::os::write_all_raw(got.as_fd(), b"x").unwrap();
        let mut one = [0u8; 1];
        crate::os::read_exact_raw(r.as_fd(), &mut one).unwrap();
        assert_eq!(&one, b"x");
        drop(a);
        assert!(recv_fd(b.as_fd()).is_err());
    }
}

/// A thread's host scheduling class, as the executive's dispatcher sets it
/// (crate mantle-exec's dispatch: a dispatched reservation runs real-time,
/// a dispatched best-effort guest normal, a thawed guest that is not
/// dispatched idle).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostClass {
    /// SCHED_RR at this priority (1-99): threads of one guest at the same
    /// level take turns by the kernel's round robin slice.
    Rr(i32),
    /// SCHED_OTHER (nice unchanged).
    Other,
    /// SCHED_IDLE: runs only when nothing normal or real-time wants the CPU.
    Idle,
}

/// sched_setscheduler(tid, class): thread `tid`'s host class. Threads and
/// children it creates later inherit it.
pub fn set_class_of(tid: u32, class: HostClass) -> io::Result<()> {
    let (policy, prio) = match class {
        HostClass::Rr(p) => (libc::SCHED_RR, p),
        HostClass::Other => (libc::SCHED_OTHER, 0),
        HostClass::Idle => (libc::SCHED_IDLE, 0),
    };
    let p = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: p is a valid sched_param.
    if unsafe { libc::sched_setscheduler(tid as libc::pid_t, policy, &p) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

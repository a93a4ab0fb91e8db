//! Small wrappers over process, fd and mount system calls used across
//! mantle: gettid, pidfd_open/pidfd_getfd (Linux 5.3/5.6; PIDFD_THREAD
//! 6.9), pipes, fork-and-wait for throw-away children, a child gated
//! before exec, SIGINT/SIGTERM/SIGHUP turned into a flag, memfd_create,
//! a copy of the vDSO, mount of bpffs, uname, capget and the
//! user-namespace test behind [`privileged`].
//!
//! Invariants: every new fd comes back as an [`OwnedFd`] opened
//! close-on-exec; errors are the `io::Error` of the errno.
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

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

/// pidfd_send_signal(2) (Linux 5.1): sends `sig` to the process (or, for
/// a PIDFD_THREAD pidfd, the thread) the pidfd names. Unlike kill(2) it
/// cannot reach another process that reused the pid after this one died
/// (ESRCH then).
pub fn pidfd_send_signal(pidfd: BorrowedFd, sig: i32) -> io::Result<()> {
    // SAFETY: plain system call; a null siginfo means "as kill(2)", flags 0.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// pidfd_getfd(2) (Linux 5.6): a duplicate, close-on-exec, of file
/// descriptor `fd` of the process `pidfd` names. Needs ptrace access to it
/// (PTRACE_MODE_ATTACH_REALCREDS).
pub fn pidfd_getfd(pidfd: BorrowedFd, fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain system call with integer arguments; flags must be 0.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: r is a new descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(r as i32) })
}

/// pipe2(O_CLOEXEC): (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints for the kernel to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both are new descriptors that nobody else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// write(2) until all of `buf` is written; async-signal-safe (no
/// allocation, retries EINTR), for children between fork and exec.
pub fn write_all_raw(fd: BorrowedFd, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: buf is valid for reading buf.len() bytes.
        let n = unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// read(2) until `buf` is full; end of file is UnexpectedEof.
pub fn read_exact_raw(fd: BorrowedFd, mut buf: &mut [u8]) -> io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: buf is valid for writing buf.len() bytes.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf = &mut buf[n as usize..];
    }
    Ok(())
}

/// How a child process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// exit status
    Code(i32),
    /// killed by this signal
    Signal(i32),
}

/// A child made by [`fork_child`]; [`ForkedChild::wait`] reaps it.
#[derive(Debug)]
pub struct ForkedChild {
    pid: libc::pid_t,
}

impl ForkedChild {
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// waitpid(2) for this child, retrying EINTR.
    pub fn wait(self) -> io::Result<Exit> {
        let mut status = 0;
        loop {
            // SAFETY: waits for our own child; status is a valid out pointer.
            let r = unsafe { libc::waitpid(self.pid, &mut status, 0) };
            if r == self.pid {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        if libc::WIFEXITED(status) {
            Ok(Exit::Code(libc::WEXITSTATUS(status)))
        } else if libc::WIFSIGNALED(status) {
            Ok(Exit::Signal(libc::WTERMSIG(status)))
        } else {
            Err(io::Error::other(format!(
                "child ended oddly (status {status:#x})"
            )))
        }
    }
}

/// fork(2): runs `f` in the child and ends the child with its return
/// value (127 if it panicked), without running the parent's atexit
/// handlers. In the parent, `f` is dropped unrun.
///
/// # Safety
/// The caller may be multi-threaded: another thread may hold the
/// allocator's or any other lock at the fork, and only the calling thread
/// exists in the child. `f` must therefore only make async-signal-safe
/// calls (signal-safety(7)): plain system calls on memory prepared before
/// the fork, no allocation, no locks.
pub unsafe fn fork_child<F: FnOnce() -> i32>(f: F) -> io::Result<ForkedChild> {
    // SAFETY: the caller promises that f only makes async-signal-safe calls.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(127);
        // SAFETY: ends the child at once, as it must after fork.
        unsafe { libc::_exit(code) };
    }
    Ok(ForkedChild { pid })
}

/// `struct clone_args` (linux/sched.h) up to `cgroup`: CLONE_ARGS_SIZE_VER2.
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}
const _: () = assert!(std::mem::size_of::<CloneArgs>() == 88);
/// CLONE_INTO_CGROUP (linux/sched.h, Linux 5.7).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Like [`fork_child`], with the child born in the cgroup v2 directory
/// `cgroup` (an open directory fd): clone3 with CLONE_INTO_CGROUP (Linux
/// 5.7). Why not fork and write the child's pid into `cgroup.procs`:
/// that migration takes the cgroup threadgroup lock for writing, which
/// waits for an RCU grace period when the lock was idle (measured on this
/// VM: 6-40 ms for the first migration of a run, loaded; about 40 µs for
/// the next ones within the same grace period); a child born in the
/// cgroup takes it for reading only. The caller falls back to fork and a
/// write if this fails (ENOSYS before 5.3, E2BIG/EINVAL before 5.7).
///
/// # Safety
///
/// As for [`fork_child`]: `f` must only make async-signal-safe calls
/// unless the process has one thread.
pub unsafe fn fork_child_into_cgroup<F: FnOnce() -> i32>(
    cgroup: std::os::fd::BorrowedFd,
    f: F,
) -> io::Result<ForkedChild> {
    use std::os::fd::AsRawFd;
    let args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup.as_raw_fd() as u64,
        ..Default::default()
    };
    // SAFETY: args is a valid clone_args of the size passed, with no
    // stack (the child continues on a copy of this one, as after fork)
    // and no pointers; the caller promises what f may call.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(127);
        // SAFETY: ends the child at once, as it must after fork.
        unsafe { libc::_exit(code) };
    }
    Ok(ForkedChild {
        pid: pid as libc::pid_t,
    })
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

/// Effective uid of the caller (in its own user namespace: to decide
/// privilege, use [`privileged`]).
pub fn geteuid() -> u32 {
    // SAFETY: cannot fail.
    unsafe { libc::geteuid() }
}

/// uname(2), or `None` if it failed.
fn uname() -> Option<libc::utsname> {
    // SAFETY: utsname is plain old data; all-zero is a valid value.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    Some(u)
}

/// A NUL-terminated utsname field as a string.
fn field(f: &[libc::c_char]) -> String {
    let b: Vec<u8> = f
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&b).into_owned()
}

/// This machine's name (uname nodename).
pub fn hostname() -> String {
    uname().map_or_else(|| "localhost".into(), |u| field(&u.nodename))
}

/// The kernel release from uname(2), e.g. `"6.18.44-fc-v657"`.
pub fn kernel_release() -> String {
    uname().map_or_else(|| "unknown".into(), |u| field(&u.release))
}

/// Inode number of the initial user namespace in nsfs (PROC_USER_INIT_INO
/// in the kernel's proc_ns.h, fixed since Linux 3.8): what
/// /proc/self/ns/user points to outside any user namespace.
const INIT_USER_NS_INO: u64 = 0xEFFF_FFFD;

/// Whether the caller is in the initial user namespace: only there do its
/// capabilities reach the machine's BPF objects, cgroups and other
/// processes. Anyone may stat their own /proc/self/ns/user (reading
/// /proc/1/ns/user, by contrast, needs ptrace rights over init). Without
/// it, an identity uid map (`0 0 4294967295`) says the same, less surely.
pub fn in_initial_user_ns() -> bool {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata("/proc/self/ns/user") {
        Ok(m) => m.ino() == INIT_USER_NS_INO,
        Err(_) => std::fs::read_to_string("/proc/self/uid_map")
            .map(|m| is_identity_map(&m))
            .unwrap_or(false),
    }
}

/// Whether a uid_map text maps every uid to itself.
fn is_identity_map(map: &str) -> bool {
    let lines: Vec<Vec<&str>> = map
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    lines.len() == 1 && lines[0] == ["0", "0", "4294967295"]
}

/// Capability numbers (linux/capability.h).
pub const CAP_SYS_ADMIN: u32 = 21;
pub const CAP_SYS_RESOURCE: u32 = 24;
pub const CAP_PERFMON: u32 = 38;
pub const CAP_BPF: u32 = 39;

/// RLIMIT_MEMLOCK's soft limit in bytes (`None`: unlimited, or the
/// kernel refused to tell): what an unprivileged perf ring may pin beyond
/// `kernel.perf_event_mlock_kb`.
pub fn memlock_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) };
    (rc == 0 && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

/// The calling thread's effective capability set (capget), bit n =
/// capability n; `None` if the kernel refused to tell.
pub fn effective_caps() -> Option<u64> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    // _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set.
    let mut h = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: h and d are valid for the kernel to read and write, with the
    // layout and the two-element array that version 3 asks for.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    Some(d[0].effective as u64 | (d[1].effective as u64) << 32)
}

/// Whether the caller may do what mantle reserves to the administrator
/// (load the kernel side, change the tag table, other threads' tags): it
/// holds CAP_SYS_ADMIN or CAP_BPF in the initial user namespace. Not
/// `geteuid() == 0`: inside `unshare -Ur` every user is uid 0, with all
/// capabilities over its own namespace and none over the machine.
pub fn privileged() -> bool {
    in_initial_user_ns()
        && effective_caps()
            .is_some_and(|c| c & (1 << CAP_SYS_ADMIN) != 0 || c & (1 << CAP_BPF) != 0)
}

// ---------------------------------------------------------------------------
// Stop signals, a child gated before exec, the vDSO, memfd (moved from
// mantle-prof's kernel.rs)

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// SIGINT/SIGTERM/SIGHUP set a flag instead of killing the recorder.
pub fn catch_stop_signals() {
    STOP.store(false, Ordering::SeqCst);
    for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        unsafe {
            libc::signal(s, on_signal as *const () as libc::sighandler_t);
        }
    }
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

pub fn stderr_is_tty() -> bool {
    // SAFETY: no pointers.
    unsafe { libc::isatty(2) == 1 }
}

/// A child process stopped before exec until [`Gate::release`].
pub struct Gate {
    w: OwnedFd,
}

impl Gate {
    pub fn release(self) -> io::Result<()> {
        let b = [1u8];
        // SAFETY: writing one byte from a valid buffer.
        let n = unsafe { libc::write(self.w.as_raw_fd(), b.as_ptr().cast(), 1) };
        if n == 1 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// A child forked by [`spawn_gated`]; its exit code once reaped.
pub struct GatedChild {
    pub pid: u32,
    done: Option<i32>,
}

fn decode_status(st: libc::c_int) -> i32 {
    if libc::WIFEXITED(st) {
        libc::WEXITSTATUS(st)
    } else if libc::WIFSIGNALED(st) {
        128 + libc::WTERMSIG(st)
    } else {
        -1
    }
}

impl GatedChild {
    /// Exit code (128 + signal when killed), if it has exited.
    pub fn try_wait(&mut self) -> Option<i32> {
        if self.done.is_none() {
            let mut st = 0;
            // SAFETY: waiting for our own child.
            let r = unsafe { libc::waitpid(self.pid as i32, &mut st, libc::WNOHANG) };
            if r == self.pid as i32 {
                self.done = Some(decode_status(st));
            }
        }
        self.done
    }
    pub fn wait(&mut self) -> Option<i32> {
        while self.done.is_none() {
            let mut st = 0;
            // SAFETY: waiting for our own child.
            let r = unsafe { libc::waitpid(self.pid as i32, &mut st, 0) };
            if r == self.pid as i32 {
                self.done = Some(decode_status(st));
            } else if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break;
            }
        }
        self.done
    }
}

/// Forks a child that waits for the gate, then execs `argv` (PATH
/// searched). std's spawn cannot be used: it waits for the exec.
pub fn spawn_gated(argv: &[String]) -> io::Result<(GatedChild, Gate)> {
    use std::ffi::CString;
    let cargs: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()).map_err(|_| io::Error::other("NUL in argument")))
        .collect::<io::Result<_>>()?;
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // can the program run? (after fork we can only exit: a command that
    // cannot would be recorded as a session of its _exit(127))
    let runnable = |p: &std::path::Path| -> bool {
        let Ok(c) = CString::new(p.as_os_str().as_encoded_bytes()) else {
            return false;
        };
        // SAFETY: access reads the NUL-terminated path we own.
        p.is_file() && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
    };
    if !argv[0].contains('/') {
        let dirs: Vec<std::path::PathBuf> = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_default();
        if !dirs.iter().any(|d| d.join(&argv[0]).is_file()) {
            return Err(io::Error::new(io::ErrorKind::NotFound, "not found in PATH"));
        }
        if !dirs.iter().any(|d| runnable(&d.join(&argv[0]))) {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "not an executable file",
            ));
        }
    } else if !std::path::Path::new(&argv[0]).exists() {
        return Err(io::Error::new(io::ErrorKind::NotFound, "no such file"));
    } else if !runnable(std::path::Path::new(&argv[0])) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "not an executable file",
        ));
    }
    let mut fds = [0; 2];
    // SAFETY: fds is a valid 2-int array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the child only calls read, execvp and _exit on memory
    // prepared before the fork (argv pointers, the pipe fd). read and _exit
    // are async-signal-safe; execvp is not on POSIX's list, but glibc's
    // searches PATH in stack buffers without allocating or locking.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: see above.
        unsafe {
            libc::close(fds[1]);
            let mut b = [0u8];
            if libc::read(fds[0], b.as_mut_ptr().cast(), 1) != 1 {
                libc::_exit(127);
            }
            libc::execvp(ptrs[0], ptrs.as_ptr());
            libc::_exit(127);
        }
    }
    // SAFETY: fds we own.
    unsafe {
        libc::close(fds[0]);
    }
    // SAFETY: fds[1] is ours.
    let w = unsafe { OwnedFd::from_raw_fd(fds[1]) };
    Ok((
        GatedChild {
            pid: pid as u32,
            done: None,
        },
        Gate { w },
    ))
}

/// A copy of this process's vDSO image (the same for every process of
/// this kernel and ABI), for symbolizing \[vdso\] samples later.
pub fn vdso_image() -> Option<Vec<u8>> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
    let (s, e) = line.split_whitespace().next()?.split_once('-')?;
    let s = usize::from_str_radix(s, 16).ok()?;
    let e = usize::from_str_radix(e, 16).ok()?;
    // SAFETY: [s, e) is this process's readable vDSO mapping.
    Some(unsafe { std::slice::from_raw_parts(s as *const u8, e - s) }.to_vec())
}

/// An anonymous in-memory file holding `data` (memfd_create), for handing
/// bytes that were already validated to a library that reads files by
/// path (through /proc/self/fd/N): no file on disk can change under it.
pub fn memfd(name: &str, data: &[u8]) -> io::Result<std::fs::File> {
    use std::io::{Seek, Write};
    let c = std::ffi::CString::new(name).map_err(|_| io::Error::other("NUL in memfd name"))?;
    // SAFETY: c is a valid NUL-terminated string; the flags are plain bits.
    let fd = unsafe { libc::memfd_create(c.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd we own.
    let mut f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    f.write_all(data)?;
    f.rewind()?;
    Ok(f)
}

/// The page size (sysconf; 4096 if the kernel does not say, which it
/// always does).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// The errno behind an error: the first `io::Error` with an OS code in
/// `e`'s source chain (`e` included). Subsystems keep the failing call's
/// error as a source and ask this where the errno matters (exit codes).
pub fn errno_in_chain(e: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if let Some(code) = e
            .downcast_ref::<io::Error>()
            .and_then(io::Error::raw_os_error)
        {
            return Some(code);
        }
        cur = e.source();
    }
    None
}

/// CLOCK_MONOTONIC in ns (the vDSO: no system call): the clock a guest's
/// own clock_gettime(CLOCK_MONOTONIC) reads, so times taken on either side
/// of a trap compare.
pub fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: t is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The time-stamp counter (x86-64 `rdtsc`): the fast path's guest stub
/// stamps its traps with it too.
#[cfg(target_arch = "x86_64")]
pub fn tsc() -> u64 {
    // SAFETY: rdtsc has no memory effects; every x86-64 CPU has it.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// The TSC's rate in CLOCK_MONOTONIC terms: the fast path's guest stamps
/// with the TSC (no system call, no vDSO in a signal handler), the
/// executive counts in monotonic ns. Only differences of a few
/// milliseconds are converted, each next to a fresh reading of both
/// clocks, so NTP's slewing of CLOCK_MONOTONIC (up to 500 ppm) and the
/// rate's own error stay in the nanoseconds. Assumes an invariant TSC, the
/// same on every CPU (what Linux itself uses as clocksource where it can).
#[derive(Clone, Copy, Debug)]
pub struct TscRate {
    ticks_per_ns: f64,
}

#[cfg(target_arch = "x86_64")]
impl TscRate {
    /// Measures the rate over about `over` (busy). Each end is the reading
    /// of CLOCK_MONOTONIC with the narrowest TSC bracket of a few tries, so
    /// that a preemption between the two readings does not skew it.
    pub fn calibrate(over: std::time::Duration) -> TscRate {
        fn pair() -> (u64, u64) {
            let mut best = (u64::MAX, 0, 0);
            for _ in 0..16 {
                let a = tsc();
                let ns = monotonic_ns();
                let b = tsc();
                if b.wrapping_sub(a) < best.0 {
                    best = (b.wrapping_sub(a), ns, a + b.wrapping_sub(a) / 2);
                }
            }
            (best.1, best.2)
        }
        let (ns0, t0) = pair();
        let end = ns0 + (over.as_nanos() as u64).max(1000);
        while monotonic_ns() < end {
            std::hint::spin_loop();
        }
        let (ns1, t1) = pair();
        TscRate {
            ticks_per_ns: (t1.wrapping_sub(t0) as f64 / (ns1 - ns0).max(1) as f64).max(1e-3),
        }
    }

    /// Nanoseconds in `ticks`.
    pub fn ns(&self, ticks: u64) -> u64 {
        (ticks as f64 / self.ticks_per_ns) as u64
    }

    /// Ticks in `ns` nanoseconds.
    pub fn ticks(&self, ns: u64) -> u64 {
        (ns as f64 * self.ticks_per_ns) as u64
    }

    /// Ticks in `ns` nanoseconds, rounded up and [`TscRate::MARGIN`]
    /// more: a TSC deadline made of it is never before `ns` of
    /// CLOCK_MONOTONIC have passed (a sleep's end must not be early).
    pub fn ticks_at_least(&self, ns: u64) -> u64 {
        (ns as f64 * self.ticks_per_ns * (1.0 + Self::MARGIN)).ceil() as u64 + 1
    }

    /// Nanoseconds in `ticks`, rounded down and [`TscRate::MARGIN`] less:
    /// never more CLOCK_MONOTONIC time than passed (a sleep counted from
    /// a TSC stamp must not start earlier than the stamp).
    pub fn ns_at_most(&self, ticks: u64) -> u64 {
        (ticks as f64 / self.ticks_per_ns * (1.0 - Self::MARGIN)) as u64
    }

    /// The rate's error bound for the conversions that must not err on
    /// one side: NTP slews CLOCK_MONOTONIC against the TSC by up to 500
    /// ppm, and the calibration's two brackets are tens of ns over 2 ms
    /// (10-20 ppm). 1000 ppm costs 50 ns on a 50 us stretch.
    pub const MARGIN: f64 = 1e-3;
}

/// 64 random bits from the kernel's CSPRNG (getrandom(2)).
pub fn random_u64() -> io::Result<u64> {
    let mut b = [0u8; 8];
    // SAFETY: b is a writable buffer of 8 bytes for the call.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 8 {
        return Err(if n < 0 {
            io::Error::last_os_error()
        } else {
            io::Error::other("short getrandom")
        });
    }
    Ok(u64::from_ne_bytes(b))
}

/// Pins the calling thread to one CPU (sched_setaffinity of the thread):
/// an executive thread per CPU (mantle-exec, issue 31).
pub fn pin_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: cpu_set_t is plain bits; all zero is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: cpu is below CPU_SETSIZE (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: a valid pointer to a cpu_set_t of the size passed; 0 is the
    // calling thread.
    if unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The CPUs the calling thread may run on (its affinity mask, which the
/// cpuset bounds), ascending.
pub fn allowed_cpus() -> io::Result<Vec<u32>> {
    // SAFETY: cpu_set_t is plain bits; all zero is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a cpu_set_t of the size passed.
    let r = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as u32)
        // SAFETY: CPU_ISSET reads the set filled above, below its size.
        .filter(|&c| unsafe { libc::CPU_ISSET(c as usize, &set) })
        .collect())
}

/// The CPUs task `tid` may run on (its affinity mask), ascending: where
/// the fast path's executive serves a guest thread from (mantle-exec,
/// issue 31).
pub fn cpus_of(tid: u32) -> io::Result<Vec<u32>> {
    let pid = libc::pid_t::try_from(tid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: cpu_set_t is plain bits; all zero is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a cpu_set_t of the size passed.
    let r = unsafe { libc::sched_getaffinity(pid, size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as u32)
        // SAFETY: CPU_ISSET reads the set filled above, below its size.
        .filter(|&c| unsafe { libc::CPU_ISSET(c as usize, &set) })
        .collect())
}

/// Sets the calling thread's affinity to `cpus` (gives back a mask
/// [`allowed_cpus`] read before [`pin_thread`]).
pub fn set_thread_cpus(cpus: &[u32]) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain bits; all zero is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c as usize >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: c is below CPU_SETSIZE (checked above).
        unsafe { libc::CPU_SET(c as usize, &mut set) };
    }
    // SAFETY: a valid pointer to a cpu_set_t of the size passed; 0 is the
    // calling thread.
    if unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_map() {
        assert!(is_identity_map("         0          0 4294967295\n"));
        assert!(!is_identity_map("         0      65534          1\n"));
        assert!(!is_identity_map("0 0 1000\n1000 1000 4294966295\n"));
        assert!(!is_identity_map(""));
    }
}

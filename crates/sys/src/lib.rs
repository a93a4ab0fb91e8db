//! mantle-sys: the one place where mantle makes system calls and FFI calls.
//!
//! In a nutshell: every `unsafe`, raw file descriptor and kernel ABI struct
//! of mantle's user space sits here, split by kernel mechanism, behind safe
//! functions that return owned fds and `io::Error`s (or typed errors with
//! the `io::Error` of the errno as their source). The pure cores (tag
//! lattice, policies, planners, profile model) make no system calls; the
//! subsystems' `kernel.rs` files keep only the loading of their own BPF
//! objects. To find who makes a kind of system call, read this list:
//!
//! * [`bpf`]: bpf(2) outside a skeleton's own loading: pinned maps opened
//!   read-only or read-write (geometry checked), mmapped arrays, pins,
//!   links, freezing, `BPF_PROG_RUN`, program ids, iterators.
//! * [`perf`]: perf_event_open(2), the perf ioctls, the mmap'd perf ring.
//! * [`seccomp`]: seccomp(2) filters and the user-notification fd's ioctls.
//! * [`shm`]: memfd shared mappings reached only through atomics, and
//!   shared futexes (the executive's fast path).
//! * [`pifutex`]: PI futexes (FUTEX_LOCK_PI2/UNLOCK_PI), priority-ordered
//!   wakes, the calling thread's scheduling and the kernel's view of a
//!   thread's effective priority (the component runtime's TMEM).
//! * [`sud`]: prctl(PR_SET_SYSCALL_USER_DISPATCH) and the SIGSYS it raises.
//! * [`supervise`]: a supervisor's calls: process_vm_readv, per-thread
//!   fsuid/fsgid/groups, SCHED_FIFO, mlockall, SCM_RIGHTS, waitpid, poll.
//! * [`stack`]: the calling thread's own stack bounds, and giving back
//!   its pages below the current frame (madvise MADV_DONTNEED).
//! * [`epoll`]: epoll(7) wait sets registered once (the executive's loop).
//! * [`lock`]: flock(2) with a bounded wait, and who holds a lock.
//! * [`mountns`]: a private mount namespace with bind mounts (a redirected
//!   guest's view), entered in a forked child.
//! * [`netns`]: network namespace cookies (SO_NETNS_COOKIE, setns on a
//!   scoped thread).
//! * [`os`]: small process, fd and mount calls: gettid, pidfd_open,
//!   pidfd_getfd, pipe2, fork/waitpid, mount (bpffs), uname, capget.
//! * [`probe`]: no mechanism of its own: what the running kernel offers
//!   (for `mantle doctor` and start-up checks), tried through the modules
//!   above and libbpf-rs.
//! * [`layout`]: no system calls: checks Rust mirrors of BPF-shared
//!   structs against the object's BTF.
//!
//! No locks are held in this crate.

pub mod bpf;
pub mod epoll;
pub mod layout;
pub mod lock;
pub mod mountns;
pub mod netns;
pub mod os;
pub mod perf;
pub mod pifutex;
pub mod probe;
pub mod seccomp;
pub mod shm;
pub mod stack;
pub mod sud;
pub mod supervise;
pub mod timerfd;

/// The crate's tests count file descriptors and fork: the ones that do
/// take this lock, so that they do not see each other's fds.
#[cfg(test)]
pub(crate) fn test_serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

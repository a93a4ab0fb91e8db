//! mantle-sys: the few places where mantle makes raw system calls.
//!
//! Everything that needs `unsafe`, a raw file descriptor or a kernel ABI
//! struct lives here (or in a crate's own `sys` module), so that the pure
//! cores (tag lattice, policies, planners) stay free of system calls.
//!
//! * [`probe`]: what the running kernel offers (BTF, program types, bpffs,
//!   cgroup v2, PMU, seccomp user notification, Syscall User Dispatch), for
//!   `mantle doctor` and for start-up checks of every subsystem.
//! * [`os`]: small wrappers (pidfd, gettid, mounts) with typed errors.
//!
//! No locks are held in this crate.

pub mod layout;
pub mod os;
pub mod perf;
pub mod probe;
pub mod seccomp;
pub mod sud;

/// The crate's tests count file descriptors and fork: the ones that do
/// take this lock, so that they do not see each other's fds.
#[cfg(test)]
pub(crate) fn test_serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

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

pub mod bpf;
pub mod layout;
pub mod lock;
pub mod netns;
pub mod os;
pub mod probe;

//! Probes of the executive's isolation mechanisms, each tried in a
//! throw-away forked child: a seccomp filter with a user-notification
//! listener, and Syscall User Dispatch turned on and off.

use super::words::errno_words;
use super::Feature;
use crate::os::{self, Exit};
use crate::{seccomp, sud};

/// Runs `f` in a forked child and returns its exit code.
///
/// `f` runs after fork(2) in a possibly multi-threaded process, so it must
/// only make system calls: no allocation, no locks.
pub(super) fn in_child(f: fn() -> i32) -> Result<i32, String> {
    // SAFETY: the children below only make system calls (prctl, seccomp)
    // on memory prepared before the fork (consts and statics), then _exit.
    let child = unsafe { os::fork_child(f) }.map_err(|e| {
        format!(
            "fork failed: {}",
            errno_words(e.raw_os_error().unwrap_or(0))
        )
    })?;
    match child.wait() {
        Ok(Exit::Code(c)) => Ok(c),
        Ok(Exit::Signal(s)) => Err(format!("probe child killed by signal {s}")),
        Err(e) => match e.raw_os_error() {
            Some(n) => Err(format!("waitpid failed: {}", errno_words(n))),
            None => Err(format!("probe {e}")),
        },
    }
}

/// The errno of a failed step, clamped to 1..=99 for the exit code.
pub(super) fn code(e: Option<i32>) -> i32 {
    e.unwrap_or(0).clamp(1, 99)
}

/// Child side of the seccomp probe: 0 on success, else the errno (+100 for
/// the no_new_privs step, which never fails on sane kernels).
pub(super) fn seccomp_listener_child() -> i32 {
    if let Err(e) = seccomp::set_no_new_privs() {
        return 100 + e.errno().unwrap_or(0).min(100);
    }
    // The fd is closed when the child exits.
    match seccomp::install_listener_fd(&seccomp::ALLOW_ALL) {
        Ok(_fd) => 0,
        Err(e) => code(e.errno()),
    }
}

pub(super) fn probe_seccomp_user_notif() -> Feature {
    let (available, detail) = match in_child(seccomp_listener_child) {
        Ok(0) => (
            true,
            "filter with a listener installed in a child (SECCOMP_FILTER_FLAG_NEW_LISTENER)".into(),
        ),
        Ok(c) if c > 100 => (
            false,
            format!("PR_SET_NO_NEW_PRIVS refused: {}", errno_words(c - 100)),
        ),
        Ok(libc::EINVAL) => (
            false,
            format!(
                "seccomp refused the listener flag: {} — needs Linux 5.0 with CONFIG_SECCOMP_FILTER",
                errno_words(libc::EINVAL)
            ),
        ),
        Ok(c) => (false, format!("seccomp refused: {}", errno_words(c))),
        Err(e) => (false, e),
    };
    Feature {
        id: "seccomp_user_notif",
        name: "seccomp user notification".into(),
        available,
        detail,
        needed_by: "executive",
    }
}

/// Child side of the SYNC_WAKE_UP probe: 0 if the flag could be set on a
/// fresh listener, else the errno (+100 for an earlier step).
pub(super) fn sync_wake_up_child() -> i32 {
    if seccomp::set_no_new_privs().is_err() {
        return 101;
    }
    match seccomp::install_listener_fd(&seccomp::ALLOW_ALL) {
        Ok(fd) => match seccomp::set_sync_wake_up_fd(std::os::fd::AsFd::as_fd(&fd)) {
            Ok(()) => 0,
            Err(e) => code(e.errno()),
        },
        Err(_) => 102,
    }
}

pub(super) fn probe_seccomp_sync_wake_up() -> Feature {
    let (available, detail) = match in_child(sync_wake_up_child) {
        Ok(0) => (
            true,
            "set on a listener in a child (the guest and the executive are woken on each other's CPU)".into(),
        ),
        Ok(c) if c > 100 => (false, "no seccomp user notification (see above)".into()),
        Ok(libc::EINVAL) | Ok(libc::ENOTTY) => (
            false,
            "SECCOMP_IOCTL_NOTIF_SET_FLAGS refused: needs Linux 6.6 (the executive works without it)".into(),
        ),
        Ok(c) => (false, format!("refused: {}", errno_words(c))),
        Err(e) => (false, e),
    };
    Feature {
        id: "seccomp_sync_wake_up",
        name: "seccomp notification SYNC_WAKE_UP".into(),
        available,
        detail,
        needed_by: "executive (optional)",
    }
}

/// The selector of the SUD probe: it stays on ALLOW, so nothing is
/// diverted while dispatch is briefly on.
pub(super) static SUD_SELECTOR: sud::Selector = sud::Selector::new();

/// Child side of the SUD probe: 0 on success, else the errno (+100 if
/// turning it off again failed).
pub(super) fn sud_child() -> i32 {
    if let Err(e) = sud::enable(&SUD_SELECTOR, 0, 0) {
        return code(e.raw_os_error());
    }
    if let Err(e) = sud::disable() {
        return 100 + code(e.raw_os_error());
    }
    0
}

pub(super) fn probe_syscall_user_dispatch() -> Feature {
    let (available, detail) = match in_child(sud_child) {
        Ok(0) => (true, "turned on and off again in a child".into()),
        Ok(c) if c > 100 => (
            false,
            format!(
                "turned on, but turning it off failed: {}",
                errno_words(c - 100)
            ),
        ),
        Ok(libc::EINVAL) => (
            false,
            format!(
                "prctl refused: {} — needs Linux 5.11 with generic entry code (x86-64 has it)",
                errno_words(libc::EINVAL)
            ),
        ),
        Ok(c) => (false, format!("prctl refused: {}", errno_words(c))),
        Err(e) => (false, e),
    };
    Feature {
        id: "syscall_user_dispatch",
        name: "Syscall User Dispatch".into(),
        available,
        detail,
        needed_by: "executive",
    }
}

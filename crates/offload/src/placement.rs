//! Which thread of a pair performs each system call: the policy, as a
//! table over call numbers (pure: no system calls). The build script turns
//! it into `placement.h`, the table the preloaded library consults in its
//! trap handler, so the policy is written once and unit-tested here.
//!
//! Most calls act on the process (its memory, files, children, identity):
//! the bootstrap thread performs them, with the process's identity, on the
//! bootstrap CPU. A few act on the *calling thread's* kernel state (its
//! signal mask, TLS base, robust list, rseq area, scheduling, credentials):
//! made by the bootstrap thread they would change the wrong thread, so the
//! application thread makes them itself ([`Placement::Local`]), or both do
//! ([`Placement::Both`]: credentials and the TLS base, so that the
//! bootstrap thread keeps acting with the application thread's identity).
//! Some are special cases of the paper (clone, fork, exit, execve) or of
//! the trap itself (rt_sigreturn, sigprocmask, sigaction on SIGSYS).

/// Where a call is performed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Placement {
    /// By the bootstrap thread (the default).
    Forward = 0,
    /// By the application thread itself: the call acts on the calling
    /// thread's own kernel state.
    Local = 1,
    /// By the bootstrap thread, then by the application thread
    /// (credentials, the TLS base): both threads keep one identity.
    Both = 2,
    /// A special case of the library (clone/fork/vfork, exit, exit_group,
    /// execve, gettid, the signal calls the trap handler emulates).
    Special = 3,
    /// Local when the first argument names the calling thread (0 or its
    /// own tid: sched_setaffinity(0, ...)), else forwarded.
    SelfArg0 = 4,
    /// Local when `which` is PRIO_PROCESS and `who` names the calling
    /// thread (getpriority/setpriority), else forwarded.
    SelfPrio = 5,
}

/// io_pgetevents (x86-64; not in the libc crate).
const SYS_IO_PGETEVENTS: i64 = 333;

/// Call numbers covered by the tables (x86-64 numbers are below 512).
pub const NR_MAX: usize = mantle_abi::offload::OK_NR_MAX;

/// The placement of call `nr` (x86-64 numbering).
pub fn placement(nr: i64) -> Placement {
    use Placement::*;
    match nr {
        // the paper's special cases, and the trap's own
        libc::SYS_clone
        | libc::SYS_clone3
        | libc::SYS_fork
        | libc::SYS_vfork
        | libc::SYS_exit
        | libc::SYS_exit_group
        | libc::SYS_execve
        | libc::SYS_execveat
        | libc::SYS_gettid
        | libc::SYS_rt_sigreturn
        | libc::SYS_rt_sigprocmask
        | libc::SYS_rt_sigaction => Special,
        // the calling thread's signal state: mask-dependent waits and
        // dequeues, the alternate stack
        libc::SYS_rt_sigsuspend
        | libc::SYS_rt_sigtimedwait
        | libc::SYS_rt_sigpending
        | libc::SYS_pause
        | libc::SYS_sigaltstack
        // the calling thread's kernel state
        | libc::SYS_set_tid_address
        | libc::SYS_set_robust_list
        | libc::SYS_rseq
        | libc::SYS_prctl
        | libc::SYS_seccomp
        | libc::SYS_sched_yield
        | libc::SYS_getcpu
        // PTRACE_TRACEME and the tracer's requests must come from one
        // thread; a traced child must be the thread that execs
        | libc::SYS_ptrace => Local,
        // the TLS base (the bootstrap thread keeps the application
        // thread's: a fork child made by it starts with it) and the
        // credentials (per thread in Linux; glibc's setxid broadcast
        // reaches every application thread, each of which changes its
        // bootstrap thread too)
        libc::SYS_arch_prctl
        | libc::SYS_setuid
        | libc::SYS_setgid
        | libc::SYS_setreuid
        | libc::SYS_setregid
        | libc::SYS_setresuid
        | libc::SYS_setresgid
        | libc::SYS_setfsuid
        | libc::SYS_setfsgid
        | libc::SYS_setgroups
        | libc::SYS_capset => Both,
        libc::SYS_sched_setaffinity
        | libc::SYS_sched_getaffinity
        | libc::SYS_sched_setscheduler
        | libc::SYS_sched_getscheduler
        | libc::SYS_sched_setparam
        | libc::SYS_sched_getparam
        | libc::SYS_sched_setattr
        | libc::SYS_sched_getattr
        | libc::SYS_sched_rr_get_interval
        | libc::SYS_get_robust_list => SelfArg0,
        libc::SYS_getpriority | libc::SYS_setpriority => SelfPrio,
        _ => Forward,
    }
}

/// Whether a forwarded call interrupted by a signal whose handler has
/// SA_RESTART is made again (the kernel's -ERESTARTSYS class), or fails
/// with EINTR whatever the flag (signal(7): "never restarted": the calls
/// with timeouts, the multiplexers, sleeps, System V IPC, io_getevents,
/// futex waits, which glibc retries itself).
pub fn restartable(nr: i64) -> bool {
    !matches!(
        nr,
        libc::SYS_select
            | libc::SYS_pselect6
            | libc::SYS_poll
            | libc::SYS_ppoll
            | libc::SYS_epoll_wait
            | libc::SYS_epoll_pwait
            | libc::SYS_epoll_pwait2
            | libc::SYS_nanosleep
            | libc::SYS_clock_nanosleep
            | libc::SYS_msgrcv
            | libc::SYS_msgsnd
            | libc::SYS_semop
            | libc::SYS_semtimedop
            | libc::SYS_io_getevents
            | SYS_IO_PGETEVENTS
            | libc::SYS_futex
            | libc::SYS_futex_waitv
    )
}

/// Whether a bootstrap thread may perform call `nr` when a message asks it
/// to: the forwarded calls and the bootstrap half of [`Placement::Both`],
/// [`Placement::SelfArg0`] and [`Placement::SelfPrio`]. A message for any
/// other call was not written by the trap handler: refused.
pub fn bootstrap_may_perform(nr: i64) -> bool {
    (0..NR_MAX as i64).contains(&nr)
        && matches!(
            placement(nr),
            Placement::Forward | Placement::Both | Placement::SelfArg0 | Placement::SelfPrio
        )
}

/// `placement.h`: the tables above as C arrays (written by build.rs).
pub fn c_header() -> String {
    use std::fmt::Write as _;
    let mut s = String::from(
        "/* Generated by crates/offload/build.rs from src/placement.rs: do not edit. */\n\
         #ifndef MANTLE_OFFLOAD_PLACEMENT_H\n#define MANTLE_OFFLOAD_PLACEMENT_H\n\
         enum ok_place { OK_FORWARD = 0, OK_LOCAL = 1, OK_BOTH = 2, OK_SPECIAL = 3, \
         OK_SELF_ARG0 = 4, OK_SELF_PRIO = 5 };\n",
    );
    let row = |f: &dyn Fn(i64) -> u8| -> String {
        (0..NR_MAX as i64)
            .map(|n| f(n).to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let _ = writeln!(
        s,
        "static const unsigned char ok_place[{NR_MAX}] = {{{}}};",
        row(&|n| placement(n) as u8)
    );
    let _ = writeln!(
        s,
        "static const unsigned char ok_restartable[{NR_MAX}] = {{{}}};",
        row(&|n| restartable(n) as u8)
    );
    let _ = writeln!(
        s,
        "static const unsigned char ok_boot_may[{NR_MAX}] = {{{}}};",
        row(&|n| bootstrap_may_perform(n) as u8)
    );
    s.push_str("#endif\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_calls_go_to_the_bootstrap_thread() {
        for nr in [
            libc::SYS_getpid,
            libc::SYS_read,
            libc::SYS_openat,
            libc::SYS_mmap,
            libc::SYS_wait4,
            libc::SYS_kill,
            libc::SYS_tgkill,
            libc::SYS_futex,
            libc::SYS_unshare,
            libc::SYS_chdir,
        ] {
            assert_eq!(placement(nr), Placement::Forward, "{nr}");
            assert!(bootstrap_may_perform(nr));
        }
    }

    #[test]
    fn thread_state_stays_on_the_application_thread() {
        for nr in [
            libc::SYS_set_robust_list,
            libc::SYS_rseq,
            libc::SYS_sigaltstack,
            libc::SYS_rt_sigsuspend,
            libc::SYS_prctl,
        ] {
            assert_eq!(placement(nr), Placement::Local, "{nr}");
            assert!(!bootstrap_may_perform(nr), "{nr}");
        }
        for nr in [
            libc::SYS_exit,
            libc::SYS_clone,
            libc::SYS_execve,
            libc::SYS_gettid,
        ] {
            assert_eq!(placement(nr), Placement::Special);
            assert!(!bootstrap_may_perform(nr), "{nr}");
        }
        assert_eq!(placement(libc::SYS_setresuid), Placement::Both);
        assert!(bootstrap_may_perform(libc::SYS_setresuid));
        assert_eq!(placement(libc::SYS_sched_getaffinity), Placement::SelfArg0);
    }

    #[test]
    fn numbers_outside_the_table_are_never_performed() {
        assert!(!bootstrap_may_perform(-1));
        assert!(!bootstrap_may_perform(NR_MAX as i64));
        assert!(!bootstrap_may_perform(i64::MAX));
    }

    #[test]
    fn restart_follows_signal_7() {
        assert!(restartable(libc::SYS_read));
        assert!(restartable(libc::SYS_wait4));
        assert!(!restartable(libc::SYS_nanosleep));
        assert!(!restartable(libc::SYS_epoll_wait));
    }

    #[test]
    fn the_header_has_every_number() {
        let h = c_header();
        assert!(h.contains(&format!("ok_place[{NR_MAX}]")));
        let line = h.lines().find(|l| l.contains("ok_place[")).unwrap();
        assert_eq!(line.matches(',').count(), NR_MAX - 1);
    }
}

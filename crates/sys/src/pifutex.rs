//! Priority-inheritance futexes and per-thread scheduling, for the
//! component runtime's transient memory (crates/comp; TMEM paper §IV-B:
//! a thread blocked on a component's empty cache lends its priority to a
//! holder).
//!
//! A PI futex word holds the owner's tid (plus `FUTEX_WAITERS` when the
//! kernel has queued waiters): taking a free lock and releasing an
//! uncontended one are user-space compare-and-swaps; only contention enters
//! the kernel, where FUTEX_LOCK_PI boosts the owner to the waiter's
//! priority (rt_mutex) and FUTEX_UNLOCK_PI hands the lock to the
//! highest-priority waiter. The words are shared between processes, so the
//! calls are the shared (not PRIVATE) variants.
//!
//! No locks.

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

pub const FUTEX_WAITERS: u32 = libc::FUTEX_WAITERS;
pub const FUTEX_OWNER_DIED: u32 = libc::FUTEX_OWNER_DIED;
pub const FUTEX_TID_MASK: u32 = libc::FUTEX_TID_MASK;

/// FUTEX_LOCK_PI2 on a shared word: blocks (boosting the owner) until the
/// lock is ours or `timeout` (CLOCK_MONOTONIC, relative) runs out.
/// Ok(true): acquired; Ok(false): timed out. ESRCH/EOWNERDEAD-style
/// outcomes come back as errors, except that a lock whose owner died is
/// acquired (`FUTEX_OWNER_DIED` set in the word) and reported as Ok(true).
pub fn lock_pi(word: &AtomicU32, timeout: Option<Duration>) -> io::Result<bool> {
    let deadline = match timeout {
        Some(t) => {
            let now = monotonic_ns();
            let end = now.saturating_add(t.as_nanos() as u64);
            Some(libc::timespec {
                tv_sec: (end / 1_000_000_000) as libc::time_t,
                tv_nsec: (end % 1_000_000_000) as libc::c_long,
            })
        }
        None => None,
    };
    let ts = deadline
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: word is a valid aligned u32 for the call; ts is null or on
    // our stack. FUTEX_LOCK_PI2 takes an absolute CLOCK_MONOTONIC time.
    let r = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_LOCK_PI2, 0, ts) };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ETIMEDOUT) => Ok(false),
        _ => Err(e),
    }
}

/// Releases a PI lock we own: a CAS back to 0 when nobody waits, else
/// FUTEX_UNLOCK_PI (the kernel hands it to the top waiter and ends the
/// boost).
pub fn unlock_pi(word: &AtomicU32, tid: u32) -> io::Result<()> {
    if word
        .compare_exchange(tid, 0, Ordering::Release, Ordering::Relaxed)
        .is_ok()
    {
        return Ok(());
    }
    // SAFETY: word is a valid aligned u32; FUTEX_UNLOCK_PI checks that the
    // caller owns it (EPERM otherwise).
    let r = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_UNLOCK_PI, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// FUTEX_WAKE up to `n` waiters of a shared word. Waiters are woken in
/// priority order (the kernel queues them on a priority list).
pub fn wake(word: &AtomicU32, n: i32) -> usize {
    // SAFETY: word is a valid aligned u32; FUTEX_WAKE reads nothing else.
    let r = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, n) };
    r.max(0) as usize
}

/// CLOCK_MONOTONIC in nanoseconds (vDSO, no system call).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A thread's scheduling: the policy (SCHED_OTHER, SCHED_FIFO, SCHED_RR)
/// and its value (nice level for SCHED_OTHER, RT priority otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sched {
    pub policy: i32,
    pub value: i32,
}

/// The kernel's `struct sched_attr` (SCHED_ATTR_SIZE_VER1, 56 bytes).
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
    util_min: u32,
    util_max: u32,
}

/// The calling thread's scheduling, in one system call (sched_getattr):
/// the component runtime reads it at every invocation, so that the
/// context runs at the caller's priority of the moment.
pub fn self_sched() -> io::Result<Sched> {
    let mut a = SchedAttr::default();
    // SAFETY: a is a valid, writable sched_attr of the size passed; 0 is
    // the calling thread; flags 0.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut a as *mut SchedAttr,
            std::mem::size_of::<SchedAttr>() as u32,
            0u32,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    let policy = a.policy as i32 & !libc::SCHED_RESET_ON_FORK;
    let value = if policy == libc::SCHED_FIFO || policy == libc::SCHED_RR {
        a.priority as i32
    } else {
        a.nice
    };
    Ok(Sched { policy, value })
}

/// Sets the calling thread's scheduling (sched_setscheduler on tid 0, or
/// setpriority for SCHED_OTHER's nice level).
pub fn set_self_sched(s: Sched) -> io::Result<()> {
    let rt = s.policy == libc::SCHED_FIFO || s.policy == libc::SCHED_RR;
    let p = libc::sched_param {
        sched_priority: if rt { s.value } else { 0 },
    };
    // SAFETY: p lives on the stack; 0 = the calling thread.
    if unsafe { libc::sched_setscheduler(0, s.policy, &p) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if !rt {
        // SAFETY: PRIO_PROCESS with who = 0 is the calling thread on Linux.
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, s.value) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether thread `tid` runs a real-time policy now (SCHED_FIFO,
/// SCHED_RR or SCHED_DEADLINE); false for a thread that does not exist.
pub fn is_realtime(tid: u32) -> bool {
    if tid == 0 || tid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: sched_getscheduler takes a tid and no pointers.
    let p = unsafe { libc::sched_getscheduler(tid as libc::pid_t) };
    p >= 0
        && matches!(
            p & !libc::SCHED_RESET_ON_FORK,
            libc::SCHED_FIFO | libc::SCHED_RR | 6
        )
}

/// The kernel's effective priority of thread `tid` of `pid` (the `prio`
/// line of /proc/PID/task/TID/sched: 0..99 RT, 100..139 normal; lower is
/// more urgent). It includes a PI boost, which our own bookkeeping cannot
/// show.
pub fn kernel_prio(pid: u32, tid: u32) -> io::Result<i32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/sched"))?;
    s.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == "prio").then(|| v.trim().parse().ok())?
        })
        .ok_or_else(|| io::Error::other("no prio line in sched"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uncontended_lock_and_unlock_stay_in_user_space() {
        let tid = crate::os::gettid();
        let w = AtomicU32::new(0);
        assert!(lock_pi(&w, Some(Duration::from_millis(10))).unwrap());
        assert_eq!(w.load(Ordering::Relaxed) & FUTEX_TID_MASK, tid);
        unlock_pi(&w, tid).unwrap();
        assert_eq!(w.load(Ordering::Relaxed), 0);
        // a word owned by us cannot be locked again: EDEADLK
        w.store(tid, Ordering::Relaxed);
        assert!(lock_pi(&w, Some(Duration::from_millis(10))).is_err());
        w.store(0, Ordering::Relaxed);
    }

    #[test]
    fn own_sched_reads_and_kernel_prio_parses() {
        let s = self_sched().unwrap();
        assert!(s.policy >= 0);
        let p = kernel_prio(std::process::id(), crate::os::gettid()).unwrap();
        assert!((0..140).contains(&p));
    }
}

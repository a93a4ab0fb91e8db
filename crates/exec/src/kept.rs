//! The timers the executive keeps for its guests (`--timers`: the timers
//! agent's [`Decision::Timer`](crate::agent::Decision::Timer)), one table
//! for both paths: the protected executive and the fast path's server
//! differ only in when they call [`KeptTimers::fire`] and what they do for
//! the thread a signal went to (`--boost`).
//!
//! Invariants: at most `max` timers (a guest that arms more gets EAGAIN);
//! a timer is counted from a time after the call's receipt (never early);
//! a thread group that is gone (the signal cannot be sent) loses its
//! timer; a signal goes through the thread group's pidfd, so it never
//! reaches a process that reused the pid. No locks: owned by one thread.

use crate::agent::Timer;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

/// A timer kept for a guest's thread group.
struct Kept {
    tgid: u32,
    /// The thread that armed it (boosted when it fires, `--boost`).
    tid: u32,
    signal: i32,
    pidfd: OwnedFd,
    next: Instant,
    interval: Duration,
}

/// The kept timers, in no order.
pub struct KeptTimers {
    list: Vec<Kept>,
    max: usize,
}

impl KeptTimers {
    /// Room for `max` timers allocated now (the protected executive
    /// allocates nothing while it serves).
    pub fn preallocated(max: usize) -> KeptTimers {
        KeptTimers {
            list: Vec::with_capacity(max),
            max,
        }
    }

    /// Room for `max` timers allocated at the first one armed.
    pub fn lazy(max: usize) -> KeptTimers {
        KeptTimers {
            list: Vec::new(),
            max,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Keeps the timer thread `tid`'s call asked for, replacing its thread
    /// group's timer of the same signal (`first` zero disarms), counted
    /// from `t0`. Err: the errno for the guest (ESRCH: its thread group is
    /// gone; EAGAIN: `max` timers kept).
    pub fn arm(&mut self, tid: u32, t: Timer, t0: Instant) -> Result<(), i32> {
        let tgid = crate::perform::status_field(tid, "Tgid:").ok_or(libc::ESRCH)? as u32;
        self.list
            .retain(|k| !(k.tgid == tgid && k.signal == t.signal));
        if t.first.is_zero() {
            return Ok(());
        }
        if self.list.len() >= self.max {
            return Err(libc::EAGAIN);
        }
        if self.list.capacity() == 0 {
            self.list.reserve_exact(self.max);
        }
        let pidfd = mantle_sys::os::pidfd_open(tgid, false).map_err(|_| libc::ESRCH)?;
        self.list.push(Kept {
            tgid,
            tid,
            signal: t.signal,
            pidfd,
            next: t0 + t.first,
            interval: t.interval,
        });
        Ok(())
    }

    /// The earliest due time, if any timer is kept.
    pub fn next_due(&self) -> Option<Instant> {
        self.list.iter().map(|k| k.next).min()
    }

    /// Sends the signals of the timers due at `now` (a periodic one that
    /// fell behind skips the expiries it missed, as the kernel's overrun)
    /// and calls `sent(tid)` for each one sent; the next due time, if any
    /// timer is left.
    pub fn fire(&mut self, now: Instant, mut sent: impl FnMut(u32)) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut k = 0;
        while k < self.list.len() {
            let t = &mut self.list[k];
            if t.next > now {
                next = Some(next.map_or(t.next, |n| n.min(t.next)));
                k += 1;
                continue;
            }
            let ok = mantle_sys::os::pidfd_send_signal(t.pidfd.as_fd(), t.signal).is_ok();
            let tid = t.tid;
            if ok && !t.interval.is_zero() {
                t.next += t.interval;
                while t.next <= now {
                    t.next += t.interval;
                }
                next = Some(next.map_or(t.next, |n| n.min(t.next)));
                k += 1;
            } else {
                self.list.swap_remove(k);
            }
            if ok {
                sent(tid);
            }
        }
        next
    }
}

//! The executor of agent decisions, one for both paths: the protected
//! executive ([`crate::executive`], seccomp user notification) and the fast
//! path's server ([`crate::fast::server`], shared slots) each decode a
//! call from their transport, hand it here with the guest's agent chain,
//! and translate the [`Action`] that comes back into their transport's
//! answer. What a decision means (an errno clamped, a timer kept, a
//! scheduling call given to the dispatcher, a hold counted from the
//! receipt, getppid answered from the executive's table of parents) is
//! decided here once; how an answer travels, and what a path can perform
//! on a guest's behalf, is the path's.
//!
//! Mechanism: [`Executor::decide`] runs the chain's `before` (the agents
//! decide; a `Guest` reads the caller's memory through the transport),
//! then [`Executor::carry_out`] turns the decision into an [`Action`],
//! keeping what the executor keeps for the guests: the kept timers
//! ([`crate::kept`]) and the parents of guest threads
//! ([`crate::perform::Parents`]). The transport reports the outcome to the
//! chain's `after` when it has one (at once, or when a continued call's
//! result comes back).
//!
//! Invariants: no system call of its own except the timers' pidfds (on
//! arm) and the parents' /proc reads (a thread's first getppid), as
//! before the merge; an errno given to a guest is in 1..4096 (an agent's
//! out-of-range errno becomes EINVAL); a hold is counted from `t0`, taken
//! after the call's receipt, so a held call is never released early.
//! No locks: owned by the one thread that serves its guests.

use crate::agent::{Call, Chain, Decision, Guest, Perform};
use crate::dispatch::Dispatcher;
use crate::kept::KeptTimers;
use crate::perform::Parents;
use crate::sysno::Sysno;
use std::time::Instant;

const GETPPID: Sysno = Sysno(libc::SYS_getppid as u32);

/// What the transport does with a decided call.
#[derive(Debug, PartialEq)]
pub enum Action<'d> {
    /// Answer with this value; the call is not made.
    Return(i64),
    /// Answer with this errno (in 1..4096); the call is not made.
    Fail(i32),
    /// The guest's call goes on to the kernel as it was made (its result
    /// is the transport's to report, if it can see it).
    Continue,
    /// Hold the call and decide it again (the chain's `before` once more)
    /// at this instant.
    Hold(Instant),
    /// Make this changed call on the guest's behalf; which calls a path
    /// can perform, and how, is the path's (answer ENOSYS otherwise).
    Perform(&'d Perform),
}

/// The dispatcher a decision may reach, with the caller's guest index
/// (the protected path's `Options::dispatch`; the fast path has none).
pub type Sched<'a> = Option<(&'a mut Dispatcher, usize)>;

/// What the executor keeps for the guests it serves.
pub struct Executor {
    /// Timers kept for guests (the timers agent).
    pub timers: KeptTimers,
    /// Parents of guest threads, for getppid performed here.
    parents: Parents,
}

impl Executor {
    /// An executor keeping its timers in `timers` (each path sizes its
    /// table: [`KeptTimers::preallocated`] or [`KeptTimers::lazy`]).
    pub fn new(timers: KeptTimers) -> Executor {
        Executor {
            timers,
            parents: Parents::default(),
        }
    }

    /// The agents decide `call` (the chain's `before`; `guest` reads the
    /// caller's memory through the transport).
    #[inline]
    pub fn decide(chain: &mut Chain, call: &Call, guest: &mut dyn Guest) -> Decision {
        chain.before(call, guest).0
    }

    /// The action of a decision that needs none of the executor's state
    /// (Continue, Fail, Return): the executive on N CPUs answers those
    /// without its shared lock. None: [`Executor::carry_out`].
    #[inline]
    pub fn answer_now(d: &Decision) -> Option<Action<'static>> {
        match d {
            Decision::Continue => Some(Action::Continue),
            Decision::Fail(e) => Some(Action::Fail(clamp_errno(*e))),
            Decision::Return(v) => Some(Action::Return(*v)),
            _ => None,
        }
    }

    /// What to do with `d`, decided for `call` received at `t0` (taken
    /// after the receipt). `root` is the tid of the guest's first process
    /// (its parent is the executive's, the reaper); `sched` is the
    /// dispatcher, if any.
    pub fn carry_out<'d>(
        &mut self,
        d: &'d Decision,
        call: &Call,
        t0: Instant,
        root: u32,
        sched: Sched<'_>,
    ) -> Action<'d> {
        match d {
            Decision::Continue => Action::Continue,
            Decision::Fail(e) => Action::Fail(clamp_errno(*e)),
            Decision::Return(v) => Action::Return(*v),
            Decision::Sched(p) => match sched {
                Some((d, i)) => match d.change(i, call.tid, *p) {
                    Ok(()) => Action::Return(0),
                    Err(crate::sched::ChangeError::Refused(_)) => Action::Fail(libc::EBUSY),
                    Err(_) => Action::Fail(libc::EINVAL),
                },
                // nobody to take it: the host's scheduler is not asked
                None => Action::Fail(libc::ENOSYS),
            },
            Decision::Yield => match sched {
                Some((d, i)) => {
                    d.yield_now(i, call.tid);
                    Action::Return(0)
                }
                // no dispatcher: the yield is the kernel's
                None => Action::Continue,
            },
            Decision::Timer(t) => match self.timers.arm(call.tid, *t, t0) {
                Ok(()) => Action::Return(0),
                Err(e) => Action::Fail(e),
            },
            Decision::Delay(dur) => {
                if let Some((d, i)) = sched {
                    d.poke(i); // the guest may have nothing else to run
                }
                // from the call's receipt: a sleep counts from when it was asked
                Action::Hold(t0 + *dur)
            }
            // the guest's parent, as the executive knows it (the call is
            // not made here: its value would be the executive's parent)
            Decision::Perform(p) if p.nr == GETPPID && p.path.is_none() => {
                Action::Return(i64::from(self.parents.of(call.tid, call.tid == root)))
            }
            Decision::Perform(p) => Action::Perform(p),
        }
    }
}

/// An agent's errno as a guest may get it: 1..4096, else EINVAL.
fn clamp_errno(e: i32) -> i32 {
    if (1..4096).contains(&e) {
        e
    } else {
        libc::EINVAL
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::Timer;
    use std::time::Duration;

    fn call(tid: u32) -> Call {
        Call {
            tid,
            nr: GETPPID,
            args: [0; 6],
            ip: 0,
            received_ns: 0,
            start_ns: 0,
        }
    }

    fn ex() -> Executor {
        Executor::new(KeptTimers::lazy(4))
    }

    #[test]
    fn answers_are_carried_out_and_errnos_clamped() {
        let mut x = ex();
        let (c, t0) = (call(1), Instant::now());
        assert_eq!(
            x.carry_out(&Decision::Continue, &c, t0, 1, None),
            Action::Continue
        );
        assert_eq!(
            x.carry_out(&Decision::Return(-3), &c, t0, 1, None),
            Action::Return(-3)
        );
        for (e, want) in [
            (libc::EACCES, libc::EACCES),
            (4095, 4095),
            (0, libc::EINVAL),
            (-1, libc::EINVAL),
            (4096, libc::EINVAL),
            (i32::MAX, libc::EINVAL),
        ] {
            assert_eq!(
                x.carry_out(&Decision::Fail(e), &c, t0, 1, None),
                Action::Fail(want),
                "{e}"
            );
        }
    }

    #[test]
    fn a_hold_counts_from_t0_and_scheduling_without_a_dispatcher_is_the_kernels() {
        let mut x = ex();
        let (c, t0) = (call(1), Instant::now());
        let d = Duration::from_millis(3);
        assert_eq!(
            x.carry_out(&Decision::Delay(d), &c, t0, 1, None),
            Action::Hold(t0 + d)
        );
        assert_eq!(
            x.carry_out(&Decision::Yield, &c, t0, 1, None),
            Action::Continue
        );
        let p = crate::sched::Params::BestEffort { nice: 0 };
        assert_eq!(
            x.carry_out(&Decision::Sched(p), &c, t0, 1, None),
            Action::Fail(libc::ENOSYS)
        );
    }

    #[test]
    fn getppid_is_answered_from_the_parents_and_other_calls_go_to_the_path() {
        let mut x = ex();
        let me = std::process::id();
        let t0 = Instant::now();
        let get = Decision::Perform(Perform {
            nr: GETPPID,
            args: [0; 6],
            path: None,
        });
        // the guest's root: its parent is the executive (here: this test)
        assert_eq!(
            x.carry_out(&get, &call(me), t0, me, None),
            Action::Return(i64::from(me as i32))
        );
        let open = Decision::Perform(Perform {
            nr: Sysno(libc::SYS_openat as u32),
            args: [0; 6],
            path: Some((1, b"/x".to_vec())),
        });
        assert!(matches!(
            x.carry_out(&open, &call(me), t0, me, None),
            Action::Perform(p) if p.nr.0 == libc::SYS_openat as u32
        ));
    }

    #[test]
    fn timers_are_kept_and_refused_past_the_limit() {
        let mut x = Executor::new(KeptTimers::lazy(1));
        let me = std::process::id();
        let t0 = Instant::now();
        let t = |signal| {
            Decision::Timer(Timer {
                signal,
                first: Duration::from_secs(60),
                interval: Duration::ZERO,
            })
        };
        assert_eq!(
            x.carry_out(&t(libc::SIGUSR1), &call(me), t0, me, None),
            Action::Return(0)
        );
        assert!(!x.timers.is_empty());
        assert_eq!(
            x.carry_out(&t(libc::SIGUSR2), &call(me), t0, me, None),
            Action::Fail(libc::EAGAIN)
        );
        // disarmed: nothing is sent when the test ends
        let off = Decision::Timer(Timer {
            signal: libc::SIGUSR1,
            first: Duration::ZERO,
            interval: Duration::ZERO,
        });
        assert_eq!(
            x.carry_out(&off, &call(me), t0, me, None),
            Action::Return(0)
        );
        assert!(x.timers.is_empty());
    }
}

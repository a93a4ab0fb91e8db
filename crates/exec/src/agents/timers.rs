//! `--timers`: a guest's interval timer is the executive's (Hijack,
//! seeds/001 sections 2.3 and 3.2, Figure 5): `setitimer(ITIMER_REAL)` and
//! `alarm` return 0 and the executive keeps the timer
//! ([`Decision::Timer`]), sending SIGALRM to the guest's thread group from
//! its own loop at its own priority (and boosting the thread that armed it
//! with `--boost`), so the signal's delivery does not depend on how many
//! tasks compete for the CPU.
//!
//! The guest's `struct itimerval` (two timevals, 32 bytes) is a claim:
//! `tv_usec` outside 0..1e6 or a negative `tv_sec` fails with EINVAL as the
//! kernel would; an unreadable one with EFAULT.
//!
//! Left to the kernel (Continue): ITIMER_VIRTUAL and ITIMER_PROF (CPU-time
//! timers), and a setitimer that asks for the old value (`old_value` not
//! NULL: the protected path does not write guest memory). Not done:
//! `alarm` returns 0, not the seconds left of a previous alarm; getitimer
//! and POSIX timers (timer_create) are the kernel's, and do not see the
//! executive's timer.

use crate::agent::{Agent, Call, Decision, Guest, Timer};
use crate::sysno::Sysno;
use std::time::Duration;

/// Keeps the guests' ITIMER_REAL timers in the executive.
pub struct Timers {
    setitimer: Sysno,
    alarm: Sysno,
}

impl Default for Timers {
    fn default() -> Self {
        Timers {
            setitimer: Sysno(libc::SYS_setitimer as u32),
            alarm: Sysno(libc::SYS_alarm as u32),
        }
    }
}

/// A timeval at `b`, checked as the kernel checks it.
fn timeval(b: &[u8]) -> Result<Duration, i32> {
    let word = |k: usize| i64::from_ne_bytes(b[k..k + 8].try_into().unwrap_or([0; 8]));
    let (sec, usec) = (word(0), word(8));
    if sec < 0 || !(0..1_000_000).contains(&usec) {
        return Err(libc::EINVAL);
    }
    Ok(Duration::new(sec as u64, usec as u32 * 1000))
}

impl Timers {
    fn setitimer(&self, call: &Call, g: &mut dyn Guest) -> Decision {
        let (which, new, old) = (call.args[0] as i32, call.args[1], call.args[2]);
        if which != libc::ITIMER_REAL || old != 0 {
            return Decision::Continue;
        }
        let mut b = [0u8; 32];
        if !matches!(g.read(new, &mut b), Ok(32)) {
            return Decision::Fail(libc::EFAULT);
        }
        // struct itimerval { it_interval; it_value; }
        match (timeval(&b[..16]), timeval(&b[16..])) {
            (Ok(interval), Ok(first)) => Decision::Timer(Timer {
                signal: libc::SIGALRM,
                first,
                interval,
            }),
            (Err(e), _) | (_, Err(e)) => Decision::Fail(e),
        }
    }
}

impl Agent for Timers {
    fn name(&self) -> &str {
        "timers"
    }
    fn wants(&self) -> Vec<Sysno> {
        vec![self.setitimer, self.alarm]
    }
    fn before(&mut self, call: &Call, g: &mut dyn Guest) -> Decision {
        if call.nr == self.setitimer {
            self.setitimer(call, g)
        } else if call.nr == self.alarm {
            Decision::Timer(Timer {
                signal: libc::SIGALRM,
                first: Duration::from_secs(u64::from(call.args[0] as u32)),
                interval: Duration::ZERO,
            })
        } else {
            Decision::Continue
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::fake::FakeGuest;

    fn itv(isec: i64, iusec: i64, vsec: i64, vusec: i64) -> Vec<u8> {
        [isec, iusec, vsec, vusec]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect()
    }

    fn call(nr: i64, args: [u64; 6]) -> Call {
        Call {
            tid: 1,
            nr: Sysno(nr as u32),
            args,
            ip: 0,
            received_ns: 1,
            start_ns: 1,
        }
    }

    #[test]
    fn setitimer_real_becomes_the_executives_timer() {
        let mut g = FakeGuest::default();
        g.mem.insert(0x1000, itv(0, 1000, 0, 1500));
        let mut t = Timers::default();
        let real = libc::ITIMER_REAL as u64;
        let d = t.before(
            &call(libc::SYS_setitimer, [real, 0x1000, 0, 0, 0, 0]),
            &mut g,
        );
        assert_eq!(
            d,
            Decision::Timer(Timer {
                signal: libc::SIGALRM,
                first: Duration::from_micros(1500),
                interval: Duration::from_millis(1),
            })
        );
        // disarming is a timer with nothing left
        g.mem.insert(0x2000, itv(0, 0, 0, 0));
        let d = t.before(
            &call(libc::SYS_setitimer, [real, 0x2000, 0, 0, 0, 0]),
            &mut g,
        );
        assert!(matches!(d, Decision::Timer(x) if x.first.is_zero()));
        // the old value asked for, or a CPU-time timer: the kernel's
        let d = t.before(
            &call(libc::SYS_setitimer, [real, 0x1000, 0x3000, 0, 0, 0]),
            &mut g,
        );
        assert_eq!(d, Decision::Continue);
        for which in [libc::ITIMER_VIRTUAL, libc::ITIMER_PROF] {
            let c = call(libc::SYS_setitimer, [which as u64, 0x1000, 0, 0, 0, 0]);
            assert_eq!(t.before(&c, &mut g), Decision::Continue);
        }
    }

    #[test]
    fn bad_itimervals_fail_as_the_kernel_fails_them() {
        let mut g = FakeGuest::default();
        let mut t = Timers::default();
        let real = libc::ITIMER_REAL as u64;
        for (k, v) in [
            itv(0, 1_000_000, 0, 1),
            itv(0, -1, 0, 1),
            itv(-1, 0, 0, 1),
            itv(0, 0, 0, 1_000_000),
            itv(0, 0, -5, 0),
        ]
        .into_iter()
        .enumerate()
        {
            let a = 0x4000 + 0x100 * k as u64;
            g.mem.insert(a, v);
            let c = call(libc::SYS_setitimer, [real, a, 0, 0, 0, 0]);
            assert_eq!(
                t.before(&c, &mut g),
                Decision::Fail(libc::EINVAL),
                "case {k}"
            );
        }
        let c = call(libc::SYS_setitimer, [real, 0xdead_0000, 0, 0, 0, 0]);
        assert_eq!(t.before(&c, &mut g), Decision::Fail(libc::EFAULT));
    }

    #[test]
    fn alarm_is_a_one_shot_timer_in_seconds() {
        let mut g = FakeGuest::default();
        let mut t = Timers::default();
        for secs in [0u64, 1, 59, u32::MAX as u64] {
            let d = t.before(&call(libc::SYS_alarm, [secs, 0, 0, 0, 0, 0]), &mut g);
            assert_eq!(
                d,
                Decision::Timer(Timer {
                    signal: libc::SIGALRM,
                    first: Duration::from_secs(secs),
                    interval: Duration::ZERO,
                })
            );
        }
    }
}

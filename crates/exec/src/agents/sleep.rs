//! `--sleep`: a guest's `nanosleep` and `clock_nanosleep` are the
//! executive's (Hijack, seeds/001 sections 2.3 and 3.2, Figure 6): the call
//! is held in the executive's timer queue and answered when due, so the
//! guest wakes by the executive's timer at the executive's priority, not
//! by its own. With the executive's extended mode (`--sleep-spin`) the last
//! stretch before a due call is busy-waited, below the timer's
//! granularity (the paper's "Hijack Extended").
//!
//! Mechanism: the first time a sleep is seen the agent reads the guest's
//! `struct timespec` (16 bytes, a claim: `tv_nsec` outside 0..1e9 or a
//! negative `tv_sec` fails with EINVAL as the kernel would, an unreadable
//! one with EFAULT) and answers [`Decision::Delay`] with what is left of it
//! at the call's receipt ([`Call::received_ns`]), counted from when the
//! guest made it ([`Call::start_ns`]: the receipt on the protected path,
//! the guest's trap stamp on the fast path); when the
//! executive decides the held call again (the same call: same tid, same
//! receipt), it answers 0. Absolute sleeps on CLOCK_MONOTONIC are converted
//! with the receipt time (same clock); a time already past answers 0 at
//! once. The executive releases a held call at its own reading of
//! CLOCK_MONOTONIC taken after the receipt plus the delay (never before:
//! docs/exec.md "Time"), so no held sleep ends before its time.
//!
//! By clock id (what Linux accepts, and who does it):
//! * held: `nanosleep`; relative `clock_nanosleep` on CLOCK_REALTIME,
//!   CLOCK_MONOTONIC, CLOCK_BOOTTIME and CLOCK_TAI (a relative sleep is a
//!   duration whatever the clock: the kernel's relative timers ignore
//!   clock steps too; over a suspend a held BOOTTIME sleep ends late,
//!   never early); absolute on CLOCK_MONOTONIC.
//! * the kernel's (Continue): absolute CLOCK_REALTIME and CLOCK_TAI (the
//!   clock can be stepped back while the sleep waits, and only the kernel
//!   re-times an absolute sleep then), absolute CLOCK_BOOTTIME, the
//!   _ALARM clocks (CAP_WAKE_ALARM and an RTC: EPERM or ENOTSUP from the
//!   kernel), the CPU-time clocks (process: a sleep on CPU time; thread:
//!   EINVAL), the clocks that cannot sleep (MONOTONIC_RAW and the COARSE
//!   ones: ENOTSUP) and every other id (EINVAL), as are sleeps longer
//!   than [`MAX_HELD`]: each returns what Linux returns.
//!
//! Not done: on the protected path a signal handled by a sleeping guest
//! withdraws the held notification: the guest gets EINTR, or with
//! SA_RESTART the kernel restarts the call (a relative sleep then sleeps
//! its full time again, late, never early; the kernel's own nanosleep
//! returns EINTR with the time left in `rem`, which is never written
//! here); the withdrawn call's (tid, receipt) is dropped at the thread's
//! next sleep (a thread makes one call at a time). On the fast path the
//! handler runs during the wait and the sleep goes on to its end.

use crate::agent::{Agent, Call, Decision, Guest};
use crate::sysno::Sysno;
use std::time::Duration;

/// A sleep longer than this is left to the kernel (the executive's timer
/// queue is for the short sleeps a real-time loop makes).
pub const MAX_HELD: Duration = Duration::from_secs(3600);

/// Sleeps held at once (guest threads asleep), remembered to answer them
/// when due.
const MAX_ASLEEP: usize = 1024;

/// Holds the guests' sleeps.
pub struct Sleep {
    nanosleep: Sysno,
    clock_nanosleep: Sysno,
    /// (tid, receipt) of the calls held: answered 0 when decided again.
    asleep: Vec<(u32, u64)>,
}

impl Default for Sleep {
    fn default() -> Self {
        Sleep {
            nanosleep: Sysno(libc::SYS_nanosleep as u32),
            clock_nanosleep: Sysno(libc::SYS_clock_nanosleep as u32),
            asleep: Vec::with_capacity(MAX_ASLEEP),
        }
    }
}

/// What a sleep asks for.
#[derive(Debug, PartialEq, Eq)]
enum Ask {
    /// Hold it this long from its receipt.
    For(Duration),
    /// Not ours: the kernel does it.
    Kernel,
    /// Fails with this errno.
    Fail(i32),
}

/// A guest's timespec, checked as the kernel checks it.
fn timespec(g: &mut dyn Guest, addr: u64) -> Result<Duration, i32> {
    let mut b = [0u8; 16];
    match g.read(addr, &mut b) {
        Ok(16) => {}
        _ => return Err(libc::EFAULT),
    }
    let sec = i64::from_ne_bytes(b[..8].try_into().unwrap_or([0; 8]));
    let nsec = i64::from_ne_bytes(b[8..].try_into().unwrap_or([0; 8]));
    if sec < 0 || !(0..1_000_000_000).contains(&nsec) {
        return Err(libc::EINVAL);
    }
    Ok(Duration::new(sec as u64, nsec as u32))
}

impl Sleep {
    fn ask(&self, call: &Call, g: &mut dyn Guest) -> Ask {
        let (rel, addr) = if call.nr == self.nanosleep {
            (true, call.args[0])
        } else {
            let clock = call.args[0] as i32;
            let abs = call.args[1] as i32 & libc::TIMER_ABSTIME != 0;
            match (clock, abs) {
                (
                    libc::CLOCK_MONOTONIC
                    | libc::CLOCK_REALTIME
                    | libc::CLOCK_BOOTTIME
                    | libc::CLOCK_TAI,
                    false,
                ) => (true, call.args[2]),
                (libc::CLOCK_MONOTONIC, true) => (false, call.args[2]),
                _ => return Ask::Kernel,
            }
        };
        let t = match timespec(g, addr) {
            Ok(t) => t,
            Err(e) => return Ask::Fail(e),
        };
        let d = if rel {
            // counted from the guest's call where the path knows it (the
            // fast path's trap stamp), so the trap is not slept twice
            let start = match call.start_ns {
                s if s == 0 || s > call.received_ns => call.received_ns,
                s => s,
            };
            t.saturating_sub(Duration::from_nanos(call.received_ns - start))
        } else {
            // absolute CLOCK_MONOTONIC: the receipt is on the same clock
            let abs = t.as_nanos().min(u128::from(u64::MAX)) as u64;
            Duration::from_nanos(abs.saturating_sub(call.received_ns))
        };
        if d > MAX_HELD || call.received_ns == 0 {
            Ask::Kernel
        } else {
            Ask::For(d)
        }
    }
}

impl Agent for Sleep {
    fn name(&self) -> &str {
        "sleep"
    }
    fn wants(&self) -> Vec<Sysno> {
        vec![self.nanosleep, self.clock_nanosleep]
    }
    fn before(&mut self, call: &Call, g: &mut dyn Guest) -> Decision {
        if call.nr != self.nanosleep && call.nr != self.clock_nanosleep {
            return Decision::Continue;
        }
        let me = (call.tid, call.received_ns);
        if let Some(k) = self.asleep.iter().position(|&a| a == me) {
            self.asleep.swap_remove(k);
            return Decision::Return(0); // held until due: the sleep is over
        }
        // a new call of this thread: a sleep of it still remembered was
        // withdrawn (a signal interrupted it on the protected path)
        self.asleep.retain(|&(tid, _)| tid != call.tid);
        match self.ask(call, g) {
            Ask::Kernel => Decision::Continue,
            Ask::Fail(e) => Decision::Fail(e),
            Ask::For(d) if d.is_zero() => Decision::Return(0),
            Ask::For(d) => {
                if self.asleep.len() == MAX_ASLEEP {
                    // more sleepers than remembered: the kernel sleeps them
                    return Decision::Continue;
                }
                self.asleep.push(me);
                Decision::Delay(d)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::fake::FakeGuest;

    fn ts(sec: i64, nsec: i64) -> Vec<u8> {
        let mut v = sec.to_ne_bytes().to_vec();
        v.extend_from_slice(&nsec.to_ne_bytes());
        v
    }

    fn call(nr: i64, args: [u64; 6], tid: u32, received_ns: u64) -> Call {
        Call {
            tid,
            nr: Sysno(nr as u32),
            args,
            ip: 0,
            received_ns,
            start_ns: received_ns,
        }
    }

    #[test]
    fn holds_a_relative_sleep_then_answers_it_when_decided_again() {
        let mut g = FakeGuest::default();
        g.mem.insert(0x1000, ts(0, 1_500_000));
        let mut s = Sleep::default();
        let c = call(libc::SYS_nanosleep, [0x1000, 0, 0, 0, 0, 0], 7, 5_000);
        assert_eq!(
            s.before(&c, &mut g),
            Decision::Delay(Duration::from_micros(1500))
        );
        // another thread's sleep is another sleep
        let c2 = call(libc::SYS_nanosleep, [0x1000, 0, 0, 0, 0, 0], 8, 5_000);
        assert_eq!(
            s.before(&c2, &mut g),
            Decision::Delay(Duration::from_micros(1500))
        );
        assert_eq!(s.before(&c, &mut g), Decision::Return(0));
        assert_eq!(s.before(&c2, &mut g), Decision::Return(0));
        // a new call of the same thread is held again
        let c3 = call(libc::SYS_nanosleep, [0x1000, 0, 0, 0, 0, 0], 7, 9_000_000);
        assert!(matches!(s.before(&c3, &mut g), Decision::Delay(_)));
        assert!(s.asleep.len() == 1);
        // ... and one that was never decided again (withdrawn by a
        // signal) is forgotten at the thread's next call
        let c4 = call(libc::SYS_nanosleep, [0x1000, 0, 0, 0, 0, 0], 7, 19_000_000);
        assert!(matches!(s.before(&c4, &mut g), Decision::Delay(_)));
        assert_eq!(s.asleep, vec![(7, 19_000_000)]);
        for k in 0..2 * MAX_ASLEEP as u64 {
            let c = call(
                libc::SYS_nanosleep,
                [0x1000, 0, 0, 0, 0, 0],
                7,
                20_000_000 + k,
            );
            assert!(matches!(s.before(&c, &mut g), Decision::Delay(_)), "{k}");
        }
        assert_eq!(s.asleep.len(), 1);
    }

    #[test]
    fn a_relative_sleep_counts_from_the_guests_call_when_known() {
        let mut g = FakeGuest::default();
        g.mem.insert(0x1000, ts(0, 1_000_000));
        let mut s = Sleep::default();
        let nr = libc::SYS_nanosleep;
        // the trap took 30 us: 970 us are left at the receipt
        let mut c = call(nr, [0x1000, 0, 0, 0, 0, 0], 7, 5_030_000);
        c.start_ns = 5_000_000;
        let left = Duration::from_micros(970);
        assert_eq!(s.before(&c, &mut g), Decision::Delay(left));
        assert_eq!(s.before(&c, &mut g), Decision::Return(0));
        // a start after the receipt, or unknown, is the receipt
        for (k, start) in [0, 5_030_001, u64::MAX].into_iter().enumerate() {
            c.start_ns = start;
            c.tid = 8 + k as u32; // each its own sleep
            let full = Duration::from_millis(1);
            assert_eq!(s.before(&c, &mut g), Decision::Delay(full), "{start}");
        }
        // a trap longer than the sleep: due at once
        let mut c = call(nr, [0x1000, 0, 0, 0, 0, 0], 20, 9_000_000);
        c.start_ns = 7_000_000;
        assert_eq!(s.before(&c, &mut g), Decision::Return(0));
    }

    #[test]
    fn clock_nanosleep_by_clock_and_flag() {
        let mut g = FakeGuest::default();
        g.mem.insert(0x2000, ts(2, 0)); // absolute 2 s on CLOCK_MONOTONIC
        let mut s = Sleep::default();
        let cn = libc::SYS_clock_nanosleep;
        let abs = libc::TIMER_ABSTIME as u64;
        let mono = libc::CLOCK_MONOTONIC as u64;
        let real = libc::CLOCK_REALTIME as u64;
        // absolute: what is left of it from the receipt
        let c = call(cn, [mono, abs, 0x2000, 0, 0, 0], 1, 1_999_000_000);
        assert_eq!(
            s.before(&c, &mut g),
            Decision::Delay(Duration::from_millis(1))
        );
        // absolute and already past: at once
        let c = call(cn, [mono, abs, 0x2000, 0, 0, 0], 2, 3_000_000_000);
        assert_eq!(s.before(&c, &mut g), Decision::Return(0));
        // relative on monotonic, realtime, boottime, tai: held
        let (boot, tai) = (libc::CLOCK_BOOTTIME as u64, libc::CLOCK_TAI as u64);
        for clock in [mono, real, boot, tai] {
            let c = call(cn, [clock, 0, 0x2000, 0, 0, 0], 3 + clock as u32, 10);
            assert_eq!(
                s.before(&c, &mut g),
                Decision::Delay(Duration::from_secs(2)),
                "{clock}"
            );
        }
        // absolute realtime, tai, boottime; cpu-time, alarm, raw, coarse
        // and unknown clocks either way: the kernel's
        let mut kernel = vec![(real, abs), (tai, abs), (boot, abs)];
        for c in [
            libc::CLOCK_PROCESS_CPUTIME_ID,
            libc::CLOCK_THREAD_CPUTIME_ID,
            libc::CLOCK_MONOTONIC_RAW,
            libc::CLOCK_REALTIME_COARSE,
            libc::CLOCK_MONOTONIC_COARSE,
            libc::CLOCK_REALTIME_ALARM,
            libc::CLOCK_BOOTTIME_ALARM,
            10,
            12,
            -1,
            -6, // a CPU clock of pid 0's thread group (dynamic ids < 0)
        ] {
            kernel.push((c as i64 as u64, 0));
            kernel.push((c as i64 as u64, abs));
        }
        for (clock, flags) in kernel {
            let c = call(cn, [clock, flags, 0x2000, 0, 0, 0], 50, 10);
            assert_eq!(s.before(&c, &mut g), Decision::Continue, "{clock} {flags}");
        }
    }

    #[test]
    fn bad_timespecs_fail_as_the_kernel_fails_them() {
        let mut g = FakeGuest::default();
        let mut s = Sleep::default();
        for (k, (sec, nsec)) in [(0, -1), (0, 1_000_000_000), (-1, 0), (i64::MIN, 5)]
            .into_iter()
            .enumerate()
        {
            let a = 0x3000 + 0x100 * k as u64;
            g.mem.insert(a, ts(sec, nsec));
            let c = call(libc::SYS_nanosleep, [a, 0, 0, 0, 0, 0], 1, 10);
            assert_eq!(
                s.before(&c, &mut g),
                Decision::Fail(libc::EINVAL),
                "{sec} {nsec}"
            );
        }
        // unreadable: EFAULT; too long: the kernel's
        let c = call(libc::SYS_nanosleep, [0xdead_0000, 0, 0, 0, 0, 0], 1, 10);
        assert_eq!(s.before(&c, &mut g), Decision::Fail(libc::EFAULT));
        g.mem.insert(0x9000, ts(7200, 0));
        let c = call(libc::SYS_nanosleep, [0x9000, 0, 0, 0, 0, 0], 1, 10);
        assert_eq!(s.before(&c, &mut g), Decision::Continue);
        assert!(s.asleep.is_empty());
    }
}

//! The guest's own scheduling calls land in the executive's policy
//! (Hijack, seeds/001 section 2.2: a `sched_setscheduler` of an unmodified
//! real-time program becomes the executive's decision). On with dispatching
//! (`[dispatch]` in a system file, or `mantle run --sched`): the host's
//! scheduler never sees these calls.
//!
//! `sched_setscheduler`, `sched_setparam` and `sched_setattr` on the
//! caller itself (pid 0 or its own tid) are mapped by
//! [`crate::sched::guest`] (Linux's own checks, Linux's errnos) and answered
//! [`Decision::Sched`]: the executive gives the guest the new parameters,
//! or fails the call with EBUSY when its policy refuses them (EDF
//! admission), as SCHED_DEADLINE does. What the guest set is remembered per
//! thread (only once the executive took it), so `sched_getscheduler` and
//! `getpriority` answer what it believes, and `sched_getparam` and
//! `sched_getattr` write it into the guest's memory as the kernel would
//! (after checking the call is still pending). `setpriority(PRIO_PROCESS,
//! 0 or self)` (glibc's `nice`) likewise. `sched_yield` gives up the rest
//! of the guest's turn in the executive's policy ([`Decision::Yield`]).
//!
//! Left to the kernel: calls about another task (pid not the caller),
//! `sched_get_priority_min/max` (the same answer). Not done: the E2BIG
//! answer to a too-large `sched_attr` does not write the known size back
//! into the guest's `attr->size`.

use crate::agent::{Agent, Call, Decision, Guest, Outcome, Times};
use crate::sched::guest::{self as g, GuestSched};
use crate::sysno::Sysno;

/// Threads remembered (the oldest is forgotten first).
const THREADS: usize = 1024;

/// Maps a guest's scheduling calls onto the executive's policy.
pub struct SchedCalls {
    nr: [Sysno; 9],
    /// What each thread set (tid → state), once the executive took it.
    set: Vec<(u32, GuestSched)>,
    /// What the call being decided would set, until its outcome is known.
    pending: Option<(u32, u64, GuestSched)>,
}

const SETSCHEDULER: usize = 0;
const SETPARAM: usize = 1;
const SETATTR: usize = 2;
const GETSCHEDULER: usize = 3;
const SETPRIORITY: usize = 4;
const GETPARAM: usize = 5;
const GETATTR: usize = 6;
const GETPRIORITY: usize = 7;
const YIELD: usize = 8;

impl Default for SchedCalls {
    fn default() -> Self {
        SchedCalls {
            nr: [
                Sysno(libc::SYS_sched_setscheduler as u32),
                Sysno(libc::SYS_sched_setparam as u32),
                Sysno(libc::SYS_sched_setattr as u32),
                Sysno(libc::SYS_sched_getscheduler as u32),
                Sysno(libc::SYS_setpriority as u32),
                Sysno(libc::SYS_sched_getparam as u32),
                Sysno(libc::SYS_sched_getattr as u32),
                Sysno(libc::SYS_getpriority as u32),
                Sysno(libc::SYS_sched_yield as u32),
            ],
            set: Vec::with_capacity(64),
            pending: None,
        }
    }
}

fn read_i32(gst: &mut dyn Guest, addr: u64) -> Result<i32, i32> {
    let mut b = [0u8; 4];
    match gst.read(addr, &mut b) {
        Ok(4) => Ok(i32::from_ne_bytes(b)),
        _ => Err(libc::EFAULT),
    }
}

/// Writes an answer into the guest: all of it, or EFAULT (a guest gone
/// meanwhile gets EFAULT too: nobody is there to read it).
fn put(gst: &mut dyn Guest, addr: u64, b: &[u8]) -> Result<(), i32> {
    match gst.write(addr, b) {
        Ok(n) if n == b.len() => Ok(()),
        _ => Err(libc::EFAULT),
    }
}

impl SchedCalls {
    fn current(&self, tid: u32) -> GuestSched {
        self.set
            .iter()
            .find(|(t, _)| *t == tid)
            .map_or_else(GuestSched::default, |(_, s)| *s)
    }

    fn decide(&mut self, k: usize, call: &Call, gst: &mut dyn Guest) -> Result<Decision, i32> {
        let cur = self.current(call.tid);
        let a = call.args;
        let me = |pid: u64| pid as i32 == 0 || pid as u32 == call.tid;
        let next = match k {
            SETSCHEDULER if me(a[0]) => {
                let prio = read_i32(gst, a[2])?;
                g::setscheduler(&cur, a[1] as i32, prio)
            }
            SETPARAM if me(a[0]) => g::setparam(&cur, read_i32(gst, a[1])?),
            SETATTR if me(a[0]) => {
                let size = g::attr_size(read_i32(gst, a[1])? as u32).map_err(|e| e.errno())?;
                let mut bytes = vec![0u8; size];
                match gst.read(a[1], &mut bytes) {
                    Ok(n) if n == size => {}
                    _ => return Err(libc::EFAULT),
                }
                g::setattr(&cur, &bytes, a[2] as u32)
            }
            GETSCHEDULER if me(a[0]) => return Ok(Decision::Return(g::getscheduler(&cur).into())),
            GETPRIORITY if a[0] as u32 == libc::PRIO_PROCESS && me(a[1]) => {
                return Ok(Decision::Return(g::getpriority(&cur).into()))
            }
            // the kernel: EINVAL for a NULL pointer, EFAULT for a bad one
            GETPARAM if me(a[0]) && a[1] == 0 => return Err(libc::EINVAL),
            GETPARAM if me(a[0]) => {
                put(gst, a[1], &g::getparam(&cur).to_ne_bytes())?;
                return Ok(Decision::Return(0));
            }
            GETATTR if me(a[0]) && a[1] == 0 => return Err(libc::EINVAL),
            GETATTR if me(a[0]) => {
                let bytes = g::getattr(&cur, a[2] as u32, a[3] as u32).map_err(|e| e.errno())?;
                put(gst, a[1], &bytes)?;
                return Ok(Decision::Return(0));
            }
            YIELD => return Ok(Decision::Yield),
            SETPRIORITY if a[0] as u32 == libc::PRIO_PROCESS && me(a[1]) => {
                g::setpriority(&cur, a[0] as i32, a[2] as i32)
            }
            _ => return Ok(Decision::Continue),
        }
        .map_err(|e| e.errno())?;
        self.pending = Some((call.tid, call.received_ns, next));
        Ok(Decision::Sched(next.params))
    }
}

impl Agent for SchedCalls {
    fn name(&self) -> &str {
        "sched"
    }
    fn wants(&self) -> Vec<Sysno> {
        self.nr.to_vec()
    }
    fn before(&mut self, call: &Call, gst: &mut dyn Guest) -> Decision {
        let Some(k) = self.nr.iter().position(|&n| n == call.nr) else {
            return Decision::Continue;
        };
        self.decide(k, call, gst).unwrap_or_else(Decision::Fail)
    }
    fn after(&mut self, call: &Call, d: &Decision, o: Outcome, _: Times) {
        let Some((tid, at, next)) = self.pending.take() else {
            return;
        };
        // only what the executive took is what the thread has set
        if matches!(d, Decision::Sched(_))
            && (tid, at) == (call.tid, call.received_ns)
            && o == Outcome::Result(0)
        {
            self.set.retain(|(t, _)| *t != tid);
            if self.set.len() == THREADS {
                self.set.remove(0);
            }
            self.set.push((tid, next));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::fake::FakeGuest;
    use crate::sched::Params;

    fn call(nr: i64, args: [u64; 6]) -> Call {
        Call {
            tid: 42,
            nr: Sysno(nr as u32),
            args,
            ip: 0,
            received_ns: 7,
            start_ns: 7,
        }
    }

    #[test]
    fn setscheduler_fifo_becomes_the_executives_and_is_remembered_when_taken() {
        let mut gst = FakeGuest::default();
        gst.mem.insert(0x100, 50i32.to_ne_bytes().to_vec());
        let mut s = SchedCalls::default();
        let c = call(
            libc::SYS_sched_setscheduler,
            [0, libc::SCHED_FIFO as u64, 0x100, 0, 0, 0],
        );
        let d = s.before(&c, &mut gst);
        assert_eq!(
            d,
            Decision::Sched(Params::Fixed {
                prio: 50,
                quantum_ns: None
            })
        );
        // refused by the executive (EBUSY): not what the thread has
        s.after(&c, &d, Outcome::Result(-16), Times::default());
        let get = call(libc::SYS_sched_getscheduler, [0; 6]);
        assert_eq!(s.before(&get, &mut gst), Decision::Return(0));
        // taken: remembered
        let d = s.before(&c, &mut gst);
        s.after(&c, &d, Outcome::Result(0), Times::default());
        assert_eq!(
            s.before(&get, &mut gst),
            Decision::Return(libc::SCHED_FIFO.into())
        );
    }

    #[test]
    fn setattr_deadline_is_an_edf_reservation_and_bad_input_fails_like_linux() {
        let mut gst = FakeGuest::default();
        // struct sched_attr (48 bytes): size, policy, flags, nice, priority,
        // runtime, deadline, period
        let mut b = Vec::new();
        b.extend_from_slice(&48u32.to_ne_bytes());
        b.extend_from_slice(&(libc::SCHED_DEADLINE as u32).to_ne_bytes());
        b.extend_from_slice(&0u64.to_ne_bytes());
        b.extend_from_slice(&0i32.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        for v in [2_000_000u64, 10_000_000, 10_000_000] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        gst.mem.insert(0x200, b);
        let mut s = SchedCalls::default();
        let c = call(libc::SYS_sched_setattr, [0, 0x200, 0, 0, 0, 0]);
        assert_eq!(
            s.before(&c, &mut gst),
            Decision::Sched(Params::Edf {
                period_ns: 10_000_000,
                budget_ns: 2_000_000,
                deadline_ns: 10_000_000
            })
        );
        // flags must be 0; an unreadable attr; a size below the first version
        let c = call(libc::SYS_sched_setattr, [0, 0x200, 1, 0, 0, 0]);
        assert_eq!(s.before(&c, &mut gst), Decision::Fail(libc::EINVAL));
        let c = call(libc::SYS_sched_setattr, [0, 0xdead_0000, 0, 0, 0, 0]);
        assert_eq!(s.before(&c, &mut gst), Decision::Fail(libc::EFAULT));
        gst.mem.insert(0x900, 12u32.to_ne_bytes().to_vec());
        let c = call(libc::SYS_sched_setattr, [0, 0x900, 0, 0, 0, 0]);
        assert_eq!(s.before(&c, &mut gst), Decision::Fail(libc::E2BIG));
    }

    #[test]
    fn other_tasks_are_the_kernels() {
        let mut gst = FakeGuest::default();
        gst.mem.insert(0x100, 10i32.to_ne_bytes().to_vec());
        let mut s = SchedCalls::default();
        for c in [
            call(libc::SYS_sched_setscheduler, [99, 1, 0x100, 0, 0, 0]),
            call(libc::SYS_sched_setparam, [1234, 0x100, 0, 0, 0, 0]),
            call(
                libc::SYS_setpriority,
                [u64::from(libc::PRIO_PGRP), 0, 5, 0, 0, 0],
            ),
            call(libc::SYS_sched_getscheduler, [77, 0, 0, 0, 0, 0]),
            call(libc::SYS_sched_getparam, [77, 0x100, 0, 0, 0, 0]),
            call(libc::SYS_sched_getattr, [77, 0x100, 56, 0, 0, 0]),
            call(
                libc::SYS_getpriority,
                [u64::from(libc::PRIO_USER), 0, 0, 0, 0, 0],
            ),
            call(
                libc::SYS_getpriority,
                [u64::from(libc::PRIO_PROCESS), 77, 0, 0, 0, 0],
            ),
        ] {
            assert_eq!(s.before(&c, &mut gst), Decision::Continue, "{:?}", c.nr);
        }
        // a bad policy number, a bad priority: EINVAL as Linux
        let c = call(libc::SYS_sched_setscheduler, [0, 77, 0x100, 0, 0, 0]);
        assert_eq!(s.before(&c, &mut gst), Decision::Fail(libc::EINVAL));
        gst.mem.insert(0x300, 100i32.to_ne_bytes().to_vec());
        let c = call(
            libc::SYS_sched_setscheduler,
            [42, libc::SCHED_RR as u64, 0x300, 0, 0, 0],
        );
        assert_eq!(s.before(&c, &mut gst), Decision::Fail(libc::EINVAL));
        // nice on itself: best effort with that weight
        let c = call(
            libc::SYS_setpriority,
            [u64::from(libc::PRIO_PROCESS), 0, 5, 0, 0, 0],
        );
        assert_eq!(
            s.before(&c, &mut gst),
            Decision::Sched(Params::BestEffort { nice: 5 })
        );
    }

    /// Takes `c` (as the executive would) and returns what it set.
    fn take(s: &mut SchedCalls, gst: &mut FakeGuest, c: &Call) {
        let d = s.before(c, gst);
        assert!(matches!(d, Decision::Sched(_)), "{d:?}");
        s.after(c, &d, Outcome::Result(0), Times::default());
    }

    #[test]
    fn getters_answer_what_the_guest_set_into_its_memory() {
        let mut gst = FakeGuest::default();
        gst.mem.insert(0x100, 50i32.to_ne_bytes().to_vec());
        gst.mem.insert(0x200, vec![0xaa; 4]);
        let mut s = SchedCalls::default();
        let getparam = call(libc::SYS_sched_getparam, [0, 0x200, 0, 0, 0, 0]);
        // before anything is set: priority 0, nice 0 (20 - nice)
        assert_eq!(s.before(&getparam, &mut gst), Decision::Return(0));
        assert_eq!(gst.mem[&0x200], 0i32.to_ne_bytes());
        let getprio = call(
            libc::SYS_getpriority,
            [u64::from(libc::PRIO_PROCESS), 0, 0, 0, 0, 0],
        );
        assert_eq!(s.before(&getprio, &mut gst), Decision::Return(20));
        take(
            &mut s,
            &mut gst,
            &call(
                libc::SYS_sched_setscheduler,
                [0, libc::SCHED_FIFO as u64, 0x100, 0, 0, 0],
            ),
        );
        assert_eq!(s.before(&getparam, &mut gst), Decision::Return(0));
        assert_eq!(gst.mem[&0x200], 50i32.to_ne_bytes());
        // on its own tid too; NULL is EINVAL, a bad pointer EFAULT
        let c = call(libc::SYS_sched_getparam, [42, 0x200, 0, 0, 0, 0]);
        assert_eq!(s.before(&c, &mut gst), Decision::Return(0));
        let c = call(libc::SYS_sched_getparam, [0, 0, 0, 0, 0, 0]);
        assert_eq!(s.before(&c, &mut gst), Decision::Fail(libc::EINVAL));
        let c = call(libc::SYS_sched_getparam, [0, 0xdead_0000, 0, 0, 0, 0]);
        assert_eq!(s.before(&c, &mut gst), Decision::Fail(libc::EFAULT));
        // nice 5 through setpriority: getpriority says 15
        take(
            &mut s,
            &mut gst,
            &call(
                libc::SYS_setpriority,
                [u64::from(libc::PRIO_PROCESS), 0, 5, 0, 0, 0],
            ),
        );
        assert_eq!(s.before(&getprio, &mut gst), Decision::Return(15));
        // a guest gone meanwhile: nothing written, EFAULT
        gst.gone = true;
        assert_eq!(s.before(&getparam, &mut gst), Decision::Fail(libc::EFAULT));
    }

    /// sched_getattr at every size from 0 to one past the kernel's limit:
    /// below the first version and above a page EINVAL, else min(size, 56)
    /// bytes written with that size in the size field; flags must be 0.
    #[test]
    fn getattr_every_size_and_the_deadline_it_set() {
        let mut gst = FakeGuest::default();
        let mut b = Vec::new();
        b.extend_from_slice(&48u32.to_ne_bytes());
        b.extend_from_slice(&(libc::SCHED_DEADLINE as u32).to_ne_bytes());
        b.extend_from_slice(&[0; 16]);
        for v in [2_000_000u64, 10_000_000, 10_000_000] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        gst.mem.insert(0x200, b);
        let mut s = SchedCalls::default();
        take(
            &mut s,
            &mut gst,
            &call(libc::SYS_sched_setattr, [0, 0x200, 0, 0, 0, 0]),
        );
        for size in 0..=4097u64 {
            gst.mem.insert(0x10000, vec![0xee; 4096]);
            let c = call(libc::SYS_sched_getattr, [0, 0x10000, size, 0, 0, 0]);
            let d = s.before(&c, &mut gst);
            if !(48..=4096).contains(&size) {
                assert_eq!(d, Decision::Fail(libc::EINVAL), "{size}");
                assert!(gst.mem[&0x10000].iter().all(|&x| x == 0xee), "{size}");
                continue;
            }
            assert_eq!(d, Decision::Return(0), "{size}");
            let m = &gst.mem[&0x10000];
            let n = size.min(56) as usize;
            assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()), n as u32);
            let policy = u32::from_ne_bytes(m[4..8].try_into().unwrap());
            assert_eq!(policy, libc::SCHED_DEADLINE as u32, "{size}");
            let runtime = u64::from_ne_bytes(m[24..32].try_into().unwrap());
            let period = u64::from_ne_bytes(m[40..48].try_into().unwrap());
            assert_eq!((runtime, period), (2_000_000, 10_000_000), "{size}");
            assert!(m[n..].iter().all(|&x| x == 0xee), "{size}: wrote past {n}");
        }
        let c = call(libc::SYS_sched_getattr, [0, 0x10000, 56, 1, 0, 0]);
        assert_eq!(s.before(&c, &mut gst), Decision::Fail(libc::EINVAL));
        let c = call(libc::SYS_sched_getattr, [0, 0, 56, 0, 0, 0]);
        assert_eq!(s.before(&c, &mut gst), Decision::Fail(libc::EINVAL));
        // sched_yield: the executive's
        let c = call(libc::SYS_sched_yield, [0; 6]);
        assert_eq!(s.before(&c, &mut gst), Decision::Yield);
    }
}

//! The executive's side of the fast path: it scans the slots of a
//! [`Region`], validates each request, runs the [`Chain`] and writes the
//! answer.
//!
//! Validation of a REQUEST (on a copy of the slot, [`Region::snapshot`]):
//! * the slot's tid is its registered owner; a new owner (first claim, or
//!   a take-over of a dead thread's slot) is accepted only if the tid is a
//!   live task of the guest tree (its thread group's parent chain reaches
//!   the guest's root) and the previous owner is gone;
//! * `seq` is the owner's previous `seq` + 1 (the executive counts, in its
//!   own memory);
//! * `nr` < 1024 and is one of the wanted calls.
//!
//! A request that fails the tid check is answered `-EPERM` (no task must
//! wait forever on a slot the executive will not serve; the slot is memory
//! the guest already owns) and counted (`foreign_tid` once per tid); one
//! that fails the others is answered `-EINVAL` (counted). An unknown state
//! word is counted once and left alone. Nothing here panics on guest
//! input.
//!
//! Where the loop is not yet allocation-free: a new owner's check reads
//! /proc; `Decision::Perform` with a path clones the path; agents may
//! allocate.

use super::region::{self, futex_wake, hdr, slot, Region};
use crate::agent::{Call, Chain, Decision, Guest, GuestError, Outcome, Times};
use crate::sysno::Sysno;
use mantle_abi::exec as abi;
use std::sync::atomic::Ordering::{Acquire, Relaxed, SeqCst};
use std::time::{Duration, Instant};

/// What the executive counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// Requests answered.
    pub calls: u64,
    /// Continued calls whose result the guest reported.
    pub reports: u64,
    /// Requests refused (answered -EINVAL) or ignored.
    pub refused: u64,
    /// Slots with a state word that is not a state (counted once per
    /// value seen).
    pub bad_state: u64,
    /// Slots whose owner is not a task of the guest tree (counted once per
    /// tid seen).
    pub foreign_tid: u64,
    /// Guest calls that found no free slot (the guest's own count: a claim).
    pub overflow: u64,
}

/// The executive's own memory about one slot.
#[derive(Default)]
struct Own {
    owner: u32,
    seq: u64,
    /// A continued call awaiting its report: (seq, call, decision, time in
    /// the executive).
    pending: Option<(u64, Call, Decision, u64)>,
    /// A delayed request: decide again at this instant.
    hold_until: Option<Instant>,
    /// The held request's (receipt, start) ns, the same when decided again
    /// (agents know a held call by them).
    held: Option<(u64, u64)>,
    /// Extended mode: the held request's due time, `extended` after
    /// `hold_until`; a `Return` decided before it is answered with
    /// [`abi::ANS_UNTIL`] (the guest spins the rest).
    due: Option<Instant>,
    /// The owner runs boosted (`--boost`) since its held call was answered,
    /// until its next request.
    boosted: bool,
    /// The last bad (state, tid) seen, so garbage is counted once.
    bad: (u32, u32),
}

/// Serves one region.
pub struct Server {
    region: Region,
    chain: Chain,
    wanted: [u64; abi::WANT_WORDS],
    root: u32,
    own: Vec<Own>,
    pub stats: Stats,
    /// One-way trap samples (see [`Server::record_one_way`]).
    one_way: Vec<u64>,
    /// Parents of guest threads, for getppid performed here.
    parents: crate::perform::Parents,
    /// Where processes that lost the region's fd get it again; closed
    /// with the server.
    door: Option<super::door::Door>,
    /// The guests' trap stamps (TSC) in monotonic ns, and back.
    rate: mantle_sys::os::TscRate,
    /// Extended mode's last stretch (see [`Server::set_extended`]).
    extended: Duration,
    /// SCHED_FIFO priority of a guest thread whose held call was answered.
    boost: Option<i32>,
}

/// The time-stamp counter (the guest stamps `t_trap` with `rdtsc` too).
pub fn tsc() -> u64 {
    mantle_sys::os::tsc()
}

impl Server {
    /// Serves `region` with `chain` for the process tree rooted at `root`.
    pub fn new(region: Region, chain: Chain, root: u32) -> Server {
        let mut wanted = [0u64; abi::WANT_WORDS];
        for s in chain.wants() {
            if s.0 < abi::NR_MAX {
                wanted[(s.0 / 64) as usize] |= 1 << (s.0 % 64);
            }
        }
        let own = (0..region.nslots()).map(|_| Own::default()).collect();
        Server {
            region,
            chain,
            wanted,
            root,
            parents: crate::perform::Parents::default(),
            own,
            stats: Stats::default(),
            one_way: Vec::new(),
            door: None,
            rate: mantle_sys::os::TscRate::calibrate(Duration::from_millis(2)),
            extended: Duration::ZERO,
            boost: None,
        }
    }

    /// Extended mode: a held call (a sleep) is decided again `window`
    /// before it is due; if it then returns a value, the answer tells the
    /// guest to busy-wait to the due time itself ([`abi::ANS_UNTIL`]), so
    /// its wake-up is inside the window and it returns below the timer's
    /// granularity; other decisions are answered when due, the executive
    /// spinning the rest. Costs up to `window` of the guest's CPU per held
    /// call.
    pub fn set_extended(&mut self, window: Duration) {
        self.extended = window;
    }

    /// A guest thread whose held call is answered runs at SCHED_FIFO
    /// `priority` until its next request (as the protected path's
    /// `Options::boost`).
    pub fn set_boost(&mut self, priority: Option<i32>) {
        self.boost = priority;
    }

    /// Keeps `door` open as long as this server.
    pub fn keep_door(&mut self, door: super::door::Door) {
        self.door = Some(door);
    }

    /// The door's counts: connections given the region's fd, and refused.
    pub fn door_counts(&self) -> Option<(u64, u64)> {
        self.door.as_ref().map(|d| d.counts())
    }

    /// Keeps up to `cap` one-way samples: TSC ticks from the guest posting
    /// a request (its `t_trap`, a claim: samples outside 0..2^40 are
    /// dropped) to the executive picking it up. The buffer is allocated
    /// here, so recording does not allocate on the interposition path.
    pub fn record_one_way(&mut self, cap: usize) {
        self.one_way = Vec::with_capacity(cap);
    }

    /// The one-way samples so far, in TSC ticks.
    pub fn one_way(&self) -> &[u64] {
        &self.one_way
    }

    pub fn region(&self) -> &Region {
        &self.region
    }

    fn wants(&self, nr: u32) -> bool {
        nr < abi::NR_MAX && self.wanted[(nr / 64) as usize] >> (nr % 64) & 1 == 1
    }

    /// One pass over every slot; true if anything was done. Also the
    /// earliest held request's deadline, for the caller's sleep.
    pub fn poll(&mut self) -> (bool, Option<Instant>) {
        let mut did = false;
        let mut next: Option<Instant> = None;
        for i in 0..self.region.nslots() {
            let st = self.region.s32(i, slot::STATE).load(Acquire);
            match st {
                abi::ST_FREE | abi::ST_IDLE | abi::ST_ANSWER => {}
                abi::ST_REQUEST => {
                    did |= self.take_report(i);
                    if let Some(t) = self.own[i].hold_until {
                        if Instant::now() < t {
                            next = Some(next.map_or(t, |n| n.min(t)));
                            continue;
                        }
                    }
                    did |= self.request(i);
                }
                abi::ST_DONE => {
                    did |= self.take_report(i);
                    // DONE -> IDLE unless the guest moved on meanwhile
                    let _ = self.region.s32(i, slot::STATE).compare_exchange(
                        abi::ST_DONE,
                        abi::ST_IDLE,
                        SeqCst,
                        Relaxed,
                    );
                }
                bad => {
                    let tid = self.region.s32(i, slot::TID).load(Relaxed);
                    if self.own[i].bad != (bad, tid) {
                        self.own[i].bad = (bad, tid);
                        self.stats.bad_state += 1;
                    }
                }
            }
        }
        self.stats.overflow = self.region.hdr32(hdr::OVERFLOW).load(Relaxed) as u64;
        (did, next)
    }

    /// The report of a continued call, if it is there.
    fn take_report(&mut self, i: usize) -> bool {
        let Some((seq, _, _, _)) = &self.own[i].pending else {
            return false;
        };
        if self.region.s64(i, slot::REPORT_SEQ).load(Acquire) != *seq {
            return false;
        }
        let r = self.region.s64(i, slot::REPORT_RESULT).load(Acquire) as i64;
        if let Some((_, call, d, ns)) = self.own[i].pending.take() {
            self.stats.reports += 1;
            let t = Times {
                executive_ns: ns,
                kernel_ns: 0,
            };
            self.chain.after(&call, &d, Outcome::Result(r), t);
        }
        true
    }

    fn request(&mut self, i: usize) -> bool {
        let s = self.region.snapshot(i);
        if s.state != abi::ST_REQUEST {
            return false; // changed under us: next pass
        }
        if s.tid != self.own[i].owner {
            if !self.accept_owner(i, s.tid) {
                // answered, so that no task waits forever on a slot the
                // executive will not serve; counted once per tid
                if self.own[i].bad != (s.state, s.tid) {
                    self.own[i].bad = (s.state, s.tid);
                    self.stats.foreign_tid += 1;
                }
                self.stats.refused += 1;
                self.answer(i, -(libc::EPERM as i64), 0, None);
                return true;
            }
            self.own[i] = Own {
                owner: s.tid,
                seq: s.seq.wrapping_sub(1),
                ..Own::default()
            };
        }
        if s.seq != self.own[i].seq.wrapping_add(1) || !self.wants(s.nr) {
            self.stats.refused += 1;
            self.own[i].seq = s.seq; // resynchronise an honest but confused guest
            self.answer(i, -(libc::EINVAL as i64), 0, None);
            return true;
        }
        let released = self.own[i].held.is_some();
        let (received_ns, start_ns) = match self.own[i].held.take() {
            Some(h) => h,
            None => {
                if self.own[i].boosted {
                    self.own[i].boosted = false;
                    let _ = mantle_sys::supervise::set_other_of(s.tid);
                }
                let received_ns = mantle_sys::os::monotonic_ns();
                let trap = tsc().wrapping_sub(s.t_trap);
                if self.one_way.len() < self.one_way.capacity() && trap < 1 << 40 {
                    self.one_way.push(trap);
                }
                // the guest's stamp, a claim: kept between the receipt and
                // START_SLACK_NS before it (a stamp in the future wraps
                // to a huge age: the slack)
                let age = self.rate.ns(trap).min(crate::agent::START_SLACK_NS);
                (received_ns, received_ns.saturating_sub(age))
            }
        };
        let due = self.own[i].due.take();
        let call = Call {
            tid: s.tid,
            nr: Sysno(s.nr),
            args: s.args,
            ip: s.ip,
            received_ns,
            start_ns,
        };
        let t0 = Instant::now();
        let (d, _) = {
            let mut g = FastGuest {
                region: &self.region,
                slot: i,
                tid: s.tid,
                seq: s.seq,
            };
            self.chain.before(&call, &mut g)
        };
        let ns = t0.elapsed().as_nanos() as u64;
        self.own[i].hold_until = None;
        if released && !matches!(d, Decision::Delay(_)) {
            // answered after a hold: boosted before the answer wakes it
            if let Some(p) = self.boost {
                if mantle_sys::supervise::set_fifo_of(s.tid, p).is_ok() {
                    self.own[i].boosted = true;
                }
            }
            // extended mode: what is left of the hold
            if let Some(due) = due {
                if !matches!(d, Decision::Return(_)) {
                    while Instant::now() < due {
                        std::hint::spin_loop();
                    }
                }
            }
        }
        let times = Times {
            executive_ns: ns,
            kernel_ns: 0,
        };
        match &d {
            // the fast path does not dispatch: a yield is the kernel's
            Decision::Continue | Decision::Yield => {
                self.own[i].pending = Some((s.seq, call, d.clone(), ns));
                self.answer(i, 0, abi::ANS_CONTINUE, None);
            }
            Decision::Fail(e) => {
                let e = if (1..4096).contains(e) {
                    *e
                } else {
                    libc::EINVAL
                };
                self.answer(i, -(e as i64), 0, None);
                self.chain
                    .after(&call, &d, Outcome::Result(-(e as i64)), times);
            }
            Decision::Return(v) => {
                let now = Instant::now();
                match due.filter(|&t| t > now) {
                    // the guest spins to the due time itself
                    Some(t) => {
                        let left = t.duration_since(now).as_nanos() as u64;
                        let until = tsc().wrapping_add(self.rate.ticks(left));
                        let mut args = s.args;
                        args[0] = until;
                        self.answer(i, *v, abi::ANS_UNTIL, Some((s.nr, args)));
                    }
                    None => self.answer(i, *v, 0, None),
                }
                self.chain.after(&call, &d, Outcome::Result(*v), times);
            }
            // getppid on the guest's behalf: the executive answers with the
            // caller's parent (one round trip, like the protected path),
            // instead of letting the guest make the call and report it
            Decision::Perform(p) if p.path.is_none() && p.nr.0 == libc::SYS_getppid as u32 => {
                let v = i64::from(self.parents.of(call.tid, call.tid == self.root));
                // one real getppid, as the protected path makes: the
                // executive performs a system call for the guest
                let k0 = std::time::Instant::now();
                let _ = mantle_sys::supervise::getppid_raw();
                let kernel_ns = k0.elapsed().as_nanos() as u64;
                self.answer(i, v, 0, None);
                let t = Times {
                    executive_ns: ns,
                    kernel_ns,
                };
                self.chain.after(&call, &d, Outcome::Result(v), t);
            }
            Decision::Perform(p) => {
                let mut args = p.args;
                let ok = p.nr.0 < abi::NR_MAX
                    && match &p.path {
                        None => true,
                        Some((k, path)) => {
                            *k < 6 && self.region.write_path(i, path) && {
                                args[*k] = s.base.wrapping_add(self.region.path_off(i));
                                true
                            }
                        }
                    };
                if ok {
                    self.own[i].pending = Some((s.seq, call, d.clone(), ns));
                    self.answer(i, 0, abi::ANS_CONTINUE, Some((p.nr.0, args)));
                } else {
                    self.answer(i, -(libc::ENOSYS as i64), 0, None);
                    let o = Outcome::Result(-(libc::ENOSYS as i64));
                    self.chain.after(&call, &d, o, times);
                }
            }
            // the fast path keeps no timers (yet): the guest is told so
            Decision::Timer(_) | Decision::Sched(_) => {
                self.answer(i, -(libc::ENOSYS as i64), 0, None);
                let o = Outcome::Result(-(libc::ENOSYS as i64));
                self.chain.after(&call, &d, o, times);
            }
            Decision::Delay(dur) => {
                let now = Instant::now();
                let due = now + *dur;
                self.own[i].held = Some((received_ns, start_ns));
                if self.extended.is_zero() {
                    self.own[i].hold_until = Some(due);
                } else {
                    let early = due.checked_sub(self.extended).unwrap_or(now);
                    self.own[i].hold_until = Some(early.max(now));
                    self.own[i].due = Some(due);
                }
                return true;
            }
        }
        self.own[i].seq = s.seq;
        self.stats.calls += 1;
        true
    }

    /// Writes an answer and wakes the guest if it sleeps.
    fn answer(&mut self, i: usize, result: i64, flags: u32, call: Option<(u32, [u64; 6])>) {
        let r = &self.region;
        if let Some((nr, args)) = call {
            r.s32(i, slot::NR).store(nr, Relaxed);
            for (k, a) in args.iter().enumerate() {
                r.s64(i, slot::ARGS + 8 * k).store(*a, Relaxed);
            }
        }
        r.s64(i, slot::RESULT).store(result as u64, Relaxed);
        r.s32(i, slot::FLAGS).store(flags, Relaxed);
        let state = r.s32(i, slot::STATE);
        if state
            .compare_exchange(abi::ST_REQUEST, abi::ST_ANSWER, SeqCst, Relaxed)
            .is_err()
        {
            self.stats.refused += 1; // the guest changed the state meanwhile
            return;
        }
        if r.s32(i, slot::WAITING).load(SeqCst) != 0 {
            futex_wake(state);
        }
    }

    /// Whether `tid` may own slot `i`: a live task of the guest tree, and
    /// the slot's previous owner (if any) is gone. Reads /proc (start-up
    /// of a thread only).
    fn accept_owner(&self, i: usize, tid: u32) -> bool {
        if tid == 0 || !in_tree(tid, self.root) {
            return false;
        }
        let old = self.own[i].owner;
        old == 0 || old == tid || !std::path::Path::new(&format!("/proc/{old}")).exists()
    }

    /// Serves until `done` says so: spins `spin` empty passes, then sleeps
    /// on the doorbell (at most `tick`). `done` is asked every 4096 empty
    /// passes, when a sleep ran out its time, and every 64 sleeps (not at
    /// every sleep: on one CPU its system call is on the round trip).
    pub fn serve(&mut self, spin: u32, tick: Duration, mut done: impl FnMut() -> bool) {
        let mut idle: u32 = 0;
        let mut sleeps: u32 = 0;
        loop {
            let (did, next) = self.poll();
            if did {
                idle = 0;
                continue;
            }
            idle = idle.saturating_add(1);
            if idle < spin {
                std::hint::spin_loop();
                if idle.is_multiple_of(4096) && done() {
                    return;
                }
                continue;
            }
            let seen = self.region.hdr32(hdr::DOORBELL).load(SeqCst);
            self.region.hdr32(hdr::EXEC_SLEEPING).store(1, SeqCst);
            let (did, next2) = self.poll();
            let mut timed_out = false;
            if !did {
                let mut wait = tick;
                if let Some(t) = next.or(next2) {
                    wait = wait.min(t.saturating_duration_since(Instant::now()));
                }
                timed_out = region::futex_wait(self.region.hdr32(hdr::DOORBELL), seen, wait);
            }
            self.region.hdr32(hdr::EXEC_SLEEPING).store(0, SeqCst);
            idle = 0;
            sleeps = sleeps.wrapping_add(1);
            if (timed_out || sleeps.is_multiple_of(64)) && done() {
                return;
            }
        }
    }
}

/// Whether `tid` is a live task whose thread group is `root` or descends
/// from it, or from this process (the executive: a child subreaper adopts
/// orphaned guests); parent chain through /proc, at most 64 steps.
pub(crate) fn in_tree(tid: u32, root: u32) -> bool {
    let me = std::process::id();
    let field = |pid: u32, key: &str| -> Option<u32> {
        let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        s.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse().ok())
    };
    let Some(mut p) = field(tid, "Tgid:") else {
        return false;
    };
    for _ in 0..64 {
        if p == root {
            return true;
        }
        if p == me {
            return false; // the executive itself is no guest
        }
        match field(p, "PPid:") {
            Some(pp) if pp == me => return true, // an orphan the executive adopted
            Some(pp) if pp > 1 => p = pp,
            _ => return false,
        }
    }
    false
}

/// A guest as the fast path sees it during one call: memory read with
/// process_vm_readv on the calling thread; the call is pending while its
/// slot still holds the same request.
pub struct FastGuest<'a> {
    region: &'a Region,
    slot: usize,
    tid: u32,
    seq: u64,
}

impl Guest for FastGuest<'_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<usize, GuestError> {
        if buf.is_empty() {
            return Ok(0);
        }
        mantle_sys::supervise::read_memory(self.tid, addr, buf)
            .map_err(|e| GuestError::of_memory(&e, addr))
    }
    fn still_pending(&mut self) -> bool {
        let r = self.region;
        r.s32(self.slot, slot::STATE).load(Acquire) == abi::ST_REQUEST
            && r.s32(self.slot, slot::TID).load(Acquire) == self.tid
            && r.s64(self.slot, slot::SEQ).load(Acquire) == self.seq
    }
    fn write(&mut self, addr: u64, buf: &[u8]) -> Result<usize, GuestError> {
        if !self.still_pending() {
            return Err(GuestError::Gone);
        }
        mantle_sys::supervise::write_memory(self.tid, addr, buf)
            .map_err(|e| GuestError::of_memory(&e, addr))
    }
}

#[cfg(test)]
mod tests {
    //! The executive's validation, with this process playing the guest
    //! (it writes the slots itself; its own tid is in its own tree).
    use super::*;
    use crate::agent::Agent;

    struct Seq(Vec<Decision>);
    impl Agent for Seq {
        fn name(&self) -> &str {
            "seq"
        }
        fn wants(&self) -> Vec<Sysno> {
            vec![Sysno(110)]
        }
        fn before(&mut self, _: &Call, _: &mut dyn Guest) -> Decision {
            if self.0.len() > 1 {
                self.0.remove(0)
            } else {
                self.0[0].clone()
            }
        }
    }

    fn server(d: Vec<Decision>) -> Server {
        let r = Region::create(4, &[110], 0, 0).unwrap();
        Server::new(r, Chain::new(vec![Box::new(Seq(d))]), std::process::id())
    }

    fn request(s: &Server, i: usize, tid: u32, seq: u64, nr: u32) {
        let r = s.region();
        r.s32(i, slot::TID).store(tid, SeqCst);
        r.s64(i, slot::SEQ).store(seq, SeqCst);
        r.s32(i, slot::NR).store(nr, SeqCst);
        r.s32(i, slot::STATE).store(abi::ST_REQUEST, SeqCst);
    }

    #[test]
    fn answers_validates_and_refuses() {
        let me = mantle_sys::os::gettid();
        let mut s = server(vec![Decision::Return(7)]);
        request(&s, 0, me, 1, 110);
        assert!(s.poll().0);
        let a = s.region().snapshot(0);
        assert_eq!((a.state, a.result, a.flags), (abi::ST_ANSWER, 7, 0));
        // a replayed sequence number: refused with EINVAL
        request(&s, 0, me, 1, 110);
        s.poll();
        assert_eq!(s.region().snapshot(0).result, -(libc::EINVAL as i64));
        // resynchronised: the next one is answered
        request(&s, 0, me, 2, 110);
        s.poll();
        assert_eq!(s.region().snapshot(0).result, 7);
        // a call nobody wants, a number out of range
        request(&s, 0, me, 3, 111);
        s.poll();
        assert_eq!(s.region().snapshot(0).result, -(libc::EINVAL as i64));
        request(&s, 0, me, 4, 0xffff_ffff);
        s.poll();
        assert_eq!(s.region().snapshot(0).result, -(libc::EINVAL as i64));
        assert_eq!(s.stats.refused, 3);
        assert_eq!(s.stats.calls, 2);
    }

    #[test]
    fn garbage_and_foreign_tids_are_counted_once_and_left_alone() {
        let mut s = server(vec![Decision::Return(7)]);
        let r = s.region();
        r.s32(1, slot::STATE).store(0xdead_beef, SeqCst);
        request(&s, 2, 1, 1, 110); // init: not a guest
        request(&s, 3, u32::MAX, 1, 110); // no such task
        for _ in 0..10 {
            s.poll();
        }
        assert_eq!(s.stats.bad_state, 1);
        assert_eq!(s.stats.foreign_tid, 2);
        for i in [2, 3] {
            let a = s.region().snapshot(i);
            assert_eq!((a.state, a.result), (abi::ST_ANSWER, -(libc::EPERM as i64)));
        }
        // asked again by the same foreign tid: answered again, counted once
        request(&s, 2, 1, 2, 110);
        s.poll();
        assert_eq!(s.region().snapshot(2).state, abi::ST_ANSWER);
        assert_eq!(s.stats.foreign_tid, 2);
    }

    #[test]
    fn continue_waits_for_the_report_and_delay_holds() {
        let me = mantle_sys::os::gettid();
        let mut s = server(vec![
            Decision::Continue,
            Decision::Delay(Duration::from_millis(30)),
            Decision::Return(9),
        ]);
        request(&s, 0, me, 1, 110);
        s.poll();
        let a = s.region().snapshot(0);
        assert_eq!((a.state, a.flags), (abi::ST_ANSWER, abi::ANS_CONTINUE));
        // the guest reports
        s.region().s64(0, slot::REPORT_RESULT).store(123, SeqCst);
        s.region().s64(0, slot::REPORT_SEQ).store(1, SeqCst);
        s.region().s32(0, slot::STATE).store(abi::ST_DONE, SeqCst);
        s.poll();
        assert_eq!(s.stats.reports, 1);
        assert_eq!(s.region().snapshot(0).state, abi::ST_IDLE);
        // delayed: held, then decided again
        request(&s, 0, me, 2, 110);
        s.poll();
        assert_eq!(s.region().snapshot(0).state, abi::ST_REQUEST);
        let t0 = Instant::now();
        // serve for 100 ms: the held request is decided again after 30
        s.serve(0, Duration::from_millis(5), || {
            t0.elapsed() > Duration::from_millis(100)
        });
        let a = s.region().snapshot(0);
        assert_eq!((a.state, a.result), (abi::ST_ANSWER, 9));
    }

    /// Extended mode: a held call that then returns is answered `window`
    /// early with ANS_UNTIL and its due time as a TSC deadline; one that
    /// continues is answered when due (the executive spins the rest); the
    /// held call keeps its receipt when decided again.
    #[test]
    fn extended_mode_answers_early_with_a_deadline_for_the_guest() {
        struct Hold(Vec<Decision>, Vec<(u64, u64)>);
        impl Agent for Hold {
            fn name(&self) -> &str {
                "hold"
            }
            fn wants(&self) -> Vec<Sysno> {
                vec![Sysno(110)]
            }
            fn before(&mut self, c: &Call, _: &mut dyn Guest) -> Decision {
                // decided again: the same receipt and start
                if let Some(&(r, st)) = self.1.first() {
                    assert_eq!((r, st), (c.received_ns, c.start_ns));
                }
                assert!(c.start_ns <= c.received_ns);
                self.1.push((c.received_ns, c.start_ns));
                self.0.remove(0)
            }
        }
        let me = mantle_sys::os::gettid();
        let hold = Duration::from_millis(20);
        let window = Duration::from_millis(8);
        let mut early = 0;
        for then in [
            Decision::Return(5),
            Decision::Return(5),
            Decision::Return(5),
            Decision::Continue,
        ] {
            let d = vec![Decision::Delay(hold), then.clone()];
            let r = Region::create(4, &[110], 0, 0).unwrap();
            let chain = Chain::new(vec![Box::new(Hold(d, vec![]))]);
            let mut s = Server::new(r, chain, std::process::id());
            s.set_extended(window);
            request(&s, 0, me, 1, 110);
            s.region().s64(0, slot::T_TRAP).store(tsc(), SeqCst);
            let (t0, tsc0) = (Instant::now(), tsc());
            s.poll();
            assert_eq!(s.region().snapshot(0).state, abi::ST_REQUEST);
            while s.region().snapshot(0).state == abi::ST_REQUEST {
                s.poll();
                assert!(t0.elapsed() < Duration::from_secs(2), "never answered");
            }
            let (answered, tsc1) = (t0.elapsed(), tsc());
            let a = s.region().snapshot(0);
            let what = format!("{then:?} {a:?} after {answered:?}");
            if then == Decision::Continue {
                assert_eq!(a.flags, abi::ANS_CONTINUE, "{what}");
                assert!(answered >= hold, "{what}");
                continue;
            }
            assert_eq!(a.result, 5, "{what}");
            if a.flags == 0 {
                // this thread lost the CPU past the due time (a loaded
                // machine): answered plainly, and never early
                assert!(answered >= hold, "{what}");
                continue;
            }
            assert_eq!(a.flags, abi::ANS_UNTIL, "{what}");
            early += 1;
            // answered at most `window` early ...
            assert!(answered >= hold - window, "{what}");
            // ... with the due time as the guest's deadline: not before it,
            // at most `window` after the answer (a loaded machine may
            // delay this thread anywhere, so no tighter bounds)
            let deadline = a.args[0];
            let after_start = s.rate.ns(deadline.wrapping_sub(tsc0));
            assert!(after_start >= hold.as_nanos() as u64 - 1000, "{what}");
            let after_answer = deadline.wrapping_sub(tsc1) as i64;
            assert!(
                after_answer <= 0 || s.rate.ns(after_answer as u64) <= window.as_nanos() as u64,
                "{what}"
            );
        }
        assert!(early > 0, "never answered early in three tries");
    }
}
